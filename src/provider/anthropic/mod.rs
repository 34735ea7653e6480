//! Anthropic Messages: wire types, request encoding, stream decoding and the client.

pub(crate) mod decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
pub(crate) mod request;

crate::provider::format::unit!(
    Anthropic,
    "Anthropic Messages",
    encode: |request, model| request::encode(request, model),
);

mod wire;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};

use crate::error::{ApiError, ConfigError, Error, LlmError};
use crate::provider::transport::http::{
    join_url, HttpRequest, HttpSettings, ProviderSpec, Secret, Transport,
};
use crate::provider::ModelRequest;
use crate::wire::WireFormat;

const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const DEFAULT_VERSION: &str = "2023-06-01";

static SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::Anthropic,
    parse_error_body,
    is_context_overflow,
    auth_hint: "the API key: ANTHROPIC_API_KEY, or the key passed to AnthropicClient::new",
};

/// A streaming client for the Anthropic Messages API (`POST {base_url}/v1/messages`).
///
/// ```no_run
/// use std::time::Duration;
/// use agent_loop::{AnthropicClient};
/// use agent_loop::provider::transport::RetryPolicy;
///
/// let client = AnthropicClient::new("sk-ant-…")
///     .model("claude-sonnet-4-5")
///     .idle_timeout(Duration::from_secs(60))
///     .retry_policy(RetryPolicy::default().max_retries(5));
/// // or: AnthropicClient::from_env()? reads ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_MODEL
/// ```
///
/// Sends `x-api-key` (marked sensitive; the key never appears in `Debug` output or errors),
/// `anthropic-version: 2023-06-01`, `content-type: application/json` and
/// `accept: text/event-stream`. Used on its own, it retries transient failures before any
/// content arrived per its [`RetryPolicy`](crate::provider::transport::RetryPolicy) (logged at INFO); under an
/// [`Agent`](crate::Agent) the agent decides and counts every retry itself, with the same
/// policy, and reports each as an `AgentEvent::Retry` (see [`ModelRequest::retry`]).
///
/// The events of an attempt that fails before any content are held back, so after a retry the
/// response starts cleanly (one `MessageStart` per successful attempt). After the first
/// content event nothing is re-sent: a later failure is the stream's error, and the caller
/// decides (see [`RetryPolicy::delay_for`](crate::provider::transport::RetryPolicy::delay_for)).
///
/// Timeouts (each its own setting): connect 10 s, first byte (response headers) 120 s, idle
/// 120 s between content events (pings do not count), no total limit.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    api_key: Secret,
    base_url: String,
    model: String,
    version: String,
    transport: Transport,
}

impl AnthropicClient {
    /// A client with this API key, the default base URL and no model.
    pub fn new(api_key: impl Into<String>) -> Self {
        AnthropicClient {
            api_key: Secret::new(api_key),
            base_url: DEFAULT_BASE_URL.to_owned(),
            model: String::new(),
            version: DEFAULT_VERSION.to_owned(),
            transport: Transport::new(HttpSettings::new(Duration::from_secs(120))),
        }
    }

    /// A client configured from the environment: `ANTHROPIC_API_KEY` (required),
    /// `ANTHROPIC_BASE_URL` and `ANTHROPIC_MODEL` (optional).
    ///
    /// Fails with [`Error::Config`] naming the variable when the key is missing or empty.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let key = get("ANTHROPIC_API_KEY").ok_or_else(|| {
            Error::Config(ConfigError::Env {
                variable: "ANTHROPIC_API_KEY",
                message: "not set: export your Anthropic API key in it".to_owned(),
            })
        })?;
        let mut client = AnthropicClient::new(key.trim());
        if let Some(url) = get("ANTHROPIC_BASE_URL") {
            client = client.base_url(url.trim());
        }
        if let Some(model) = get("ANTHROPIC_MODEL") {
            client = client.model(model.trim());
        }
        Ok(client)
    }

    /// The server's base URL (default `https://api.anthropic.com`); requests go to
    /// `{base_url}/v1/messages`. A trailing slash is ignored.
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The model used when a request names none.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The `anthropic-version` header (default `2023-06-01`).
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    crate::provider::transport::http::transport_setters!(
        "for example `anthropic-beta`",
        "120 s",
        "Keep-alive pings do not reset it."
    );

    fn build(&self, request: &ModelRequest) -> Result<HttpRequest, LlmError> {
        let body = request::encode(request, &self.model)?;
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", self.api_key.header_value("")?);
        let version =
            HeaderValue::try_from(self.version.as_str()).map_err(|_| LlmError::InvalidRequest {
                message: format!("invalid anthropic-version {:?}", self.version),
            })?;
        headers.insert("anthropic-version", version);
        let extra = &self.transport.settings().headers;
        let betas = crate::provider::context_editing::anthropic(
            request.context_editing.as_ref(),
            request.server_compaction,
        )
        .map(|(_, betas)| betas)
        .unwrap_or_default();
        if betas.is_empty() {
            return HttpRequest::json(
                join_url(&self.base_url, "/v1/messages"),
                body,
                headers,
                extra,
            );
        }
        // Context editing's and compaction's betas join any `anthropic-beta` the caller set
        // on the client.
        let mut extra = extra.clone();
        for beta in betas {
            match extra
                .iter_mut()
                .find(|(name, _)| name.eq_ignore_ascii_case("anthropic-beta"))
            {
                Some((_, value)) if !value.split(',').any(|v| v.trim() == beta) => {
                    value.push(',');
                    value.push_str(beta);
                }
                Some(_) => {}
                None => extra.push(("anthropic-beta".to_owned(), beta.to_owned())),
            }
        }
        HttpRequest::json(
            join_url(&self.base_url, "/v1/messages"),
            body,
            headers,
            &extra,
        )
    }
}

crate::provider::transport::http::llm_client!(
    AnthropicClient,
    spec: |_client| &SPEC,
    model: |client| &client.model,
    provider: |_client| "anthropic",
    strict: Some(crate::provider::strict::StrictDialect::Anthropic),
);

fn parse_error_body(body: &[u8], error: &mut ApiError) -> bool {
    let Ok(parsed) = serde_json::from_slice::<wire::ErrorBody>(body) else {
        return false;
    };
    error.error_type = parsed.error.kind;
    error.message = parsed.error.message.unwrap_or_default();
    true
}

/// Anthropic rejects an oversized prompt with a 400 `invalid_request_error` whose message
/// says "prompt is too long: N tokens > M maximum".
fn is_context_overflow(error: &ApiError) -> bool {
    if error.status != 400 {
        return false;
    }
    let message = error.message.to_ascii_lowercase();
    [
        "prompt is too long",
        "context window",
        "context length",
        "input is too long",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LlmClient;

    #[test]
    fn from_env_requires_the_key_and_reads_the_rest() {
        let err = AnthropicClient::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"));
        let client = AnthropicClient::from_lookup(|name| match name {
            "ANTHROPIC_API_KEY" => Some("sk-ant-secret".into()),
            "ANTHROPIC_BASE_URL" => Some("http://127.0.0.1:1/anthropic/".into()),
            "ANTHROPIC_MODEL" => Some("claude-x".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(client.base_url, "http://127.0.0.1:1/anthropic");
        assert_eq!(LlmClient::model(&client), "claude-x");
        let debug = format!("{client:?}");
        assert!(!debug.contains("sk-ant-secret"), "{debug}");
        assert!(debug.contains("[redacted]"));
    }

    #[test]
    fn error_bodies_and_overflow_are_recognized() {
        let mut e = ApiError::new(400, "");
        assert!(parse_error_body(
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            &mut e
        ));
        assert_eq!(e.error_type.as_deref(), Some("invalid_request_error"));
        assert!(is_context_overflow(&e));
        assert!(!parse_error_body(b"<html>bad gateway</html>", &mut e));
    }
}
