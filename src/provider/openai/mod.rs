//! OpenAI Chat Completions (and compatible servers): wire types, request encoding, stream
//! decoding and the client.

pub(crate) mod decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
pub(crate) mod request;

crate::provider::format::unit!(
    OpenAiChat,
    "OpenAI Chat Completions",
    encode: |request, model| request::encode(request, model, MaxTokensField::default(), true),
);

mod wire;

pub use crate::provider::responses::compact_on_server::CompactedConversation;
pub(crate) use decode::is_context_overflow;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};

use crate::error::{ApiError, ConfigError, Error, LlmError};
use crate::provider::responses::{self, ResponsesOptions};
use crate::provider::transport::http::{
    join_url, HttpRequest, HttpSettings, ProviderSpec, Secret, Transport,
};
use crate::provider::ModelRequest;
use crate::wire::WireFormat;

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

static SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::OpenAiChat,
    parse_error_body,
    is_context_overflow,
    auth_hint: "the API key: OPENAI_API_KEY, or the key passed to OpenAiClient::new",
};

/// The same server and error shapes as [`SPEC`]; the Responses stream format.
static RESPONSES_SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::OpenAiResponses,
    ..SPEC
};

/// Which request field carries [`ModelRequest::max_tokens`].
///
/// OpenAI now prefers `max_completion_tokens` (and its reasoning models require it), but many
/// OpenAI-compatible servers (vLLM, llama.cpp, Ollama, older proxies) only know `max_tokens`.
/// Unless one is set with [`OpenAiClient::max_tokens_field`], the client picks per request
/// from the model name: `max_completion_tokens` for OpenAI's reasoning models (`o1`, `o3`,
/// `o4`, `gpt-5` and their variants, also behind a `openai/` prefix), `max_tokens` for every
/// other model.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens` (understood by every compatible server).
    #[default]
    MaxTokens,
    /// `max_completion_tokens` (required by OpenAI's reasoning models).
    MaxCompletionTokens,
}

/// A streaming client for OpenAI Chat Completions (`POST {base_url}/chat/completions`) and
/// every OpenAI-compatible server, or, with [`responses`](Self::responses), for the OpenAI
/// Responses API (`POST {base_url}/responses`).
///
/// ```no_run
/// use agent_loop::{OpenAiClient};
/// use agent_loop::provider::openai::MaxTokensField;
///
/// let openai = OpenAiClient::new("sk-…").model("gpt-4.1")
///     .max_tokens_field(MaxTokensField::MaxCompletionTokens);
/// let local = OpenAiClient::new("").base_url("http://127.0.0.1:8000/v1").model("qwen");
/// // or: OpenAiClient::from_env()? reads OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL
/// ```
///
/// Sends `Authorization: Bearer <key>` (omitted when the key is empty; marked sensitive, and
/// the key never appears in `Debug` output or errors), the optional `OpenAI-Organization` and
/// `OpenAI-Project` headers, `content-type: application/json` and `accept: text/event-stream`.
/// See the crate's request-encoding notes: tool results that are errors are sent with the
/// content prefixed by `Error: `, since Chat Completions has no error flag.
///
/// Used on its own, it retries a transient failure before any content per its
/// [`RetryPolicy`](crate::provider::transport::RetryPolicy) (logged at INFO); under an [`Agent`](crate::Agent) the
/// agent owns every retry (see [`ModelRequest::retry`](crate::provider::ModelRequest::retry)). The events
/// of an attempt that fails before any content are held back, so after a retry the response
/// starts cleanly (one `MessageStart` per successful attempt). After the first content event nothing is re-sent: a
/// later failure is the stream's error, and the caller decides (see [`RetryPolicy::delay_for`](crate::provider::transport::RetryPolicy::delay_for)).
///
/// Timeouts (each its own setting): connect 10 s, first byte (response headers) 120 s, idle
/// 300 s between content events (reasoning models think silently before they write), no total
/// limit.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    api_key: Secret,
    base_url: String,
    model: String,
    organization: Option<String>,
    project: Option<String>,
    /// `None`: chosen from the model name ([`MaxTokensField::for_model`]).
    max_tokens_field: Option<MaxTokensField>,
    /// The header the key goes in as it is; `None`: `Authorization: Bearer <key>`.
    auth_header: Option<String>,
    /// Whether signed thinking goes back as `thinking_blocks`.
    thinking_blocks: bool,
    /// `Some`: the Responses API (`/responses`) with these settings; `None`: Chat Completions.
    responses: Option<ResponsesOptions>,
    transport: Transport,
}

impl MaxTokensField {
    /// The field a request for `model` uses when none is set: `max_completion_tokens` for
    /// OpenAI's reasoning models, `max_tokens` otherwise.
    ///
    /// ```
    /// use agent_loop::provider::openai::MaxTokensField;
    ///
    /// assert_eq!(MaxTokensField::for_model("o3-mini"), MaxTokensField::MaxCompletionTokens);
    /// assert_eq!(MaxTokensField::for_model("gpt-5.1"), MaxTokensField::MaxCompletionTokens);
    /// assert_eq!(MaxTokensField::for_model("openai/o4-mini"), MaxTokensField::MaxCompletionTokens);
    /// assert_eq!(MaxTokensField::for_model("gpt-4.1"), MaxTokensField::MaxTokens);
    /// assert_eq!(MaxTokensField::for_model("qwen2.5-coder"), MaxTokensField::MaxTokens);
    /// ```
    pub fn for_model(model: &str) -> MaxTokensField {
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let reasoning = ["o1", "o3", "o4"].iter().any(|family| {
            name.strip_prefix(family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
        }) || name.starts_with("gpt-5");
        if reasoning {
            MaxTokensField::MaxCompletionTokens
        } else {
            MaxTokensField::MaxTokens
        }
    }
}

impl OpenAiClient {
    /// A client with this API key (may be empty for servers that need none), the default base
    /// URL and no model.
    pub fn new(api_key: impl Into<String>) -> Self {
        OpenAiClient {
            api_key: Secret::new(api_key),
            base_url: DEFAULT_BASE_URL.to_owned(),
            model: String::new(),
            organization: None,
            project: None,
            max_tokens_field: None,
            auth_header: None,
            thinking_blocks: false,
            responses: None,
            transport: Transport::new(HttpSettings::new(Duration::from_secs(300))),
        }
    }

    /// A client configured from the environment: `OPENAI_API_KEY`, `OPENAI_BASE_URL`,
    /// `OPENAI_MODEL`, and `OPENAI_WIRE_API` (`responses` for the Responses API, `chat` or unset
    /// for Chat Completions).
    ///
    /// The key is required unless `OPENAI_BASE_URL` is set (local and self-hosted servers often
    /// need none); a missing key is then sent as no `Authorization` header. Fails with
    /// [`Error::Config`] naming the variable otherwise.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let base_url = get("OPENAI_BASE_URL");
        let key = match (get("OPENAI_API_KEY"), &base_url) {
            (Some(key), _) => key.trim().to_owned(),
            (None, Some(_)) => String::new(),
            (None, None) => {
                return Err(Error::Config(ConfigError::Env {
                    variable: "OPENAI_API_KEY",
                    message: "not set: export your OpenAI API key in it (or set \
                              OPENAI_BASE_URL to a compatible server that needs no key)"
                        .to_owned(),
                }))
            }
        };
        let mut client = OpenAiClient::new(key);
        if let Some(url) = base_url {
            client = client.base_url(url.trim());
        }
        if let Some(model) = get("OPENAI_MODEL") {
            client = client.model(model.trim());
        }
        match get("OPENAI_WIRE_API").as_deref().map(str::trim) {
            None | Some("chat") => {}
            Some("responses") => client = client.responses(),
            Some(other) => {
                return Err(Error::Config(ConfigError::Env {
                    variable: "OPENAI_WIRE_API",
                    message: format!("is {other:?}: set it to \"responses\" or \"chat\""),
                }))
            }
        }
        Ok(client)
    }

    /// The server's base URL (default `https://api.openai.com/v1`); requests go to
    /// `{base_url}/chat/completions`. A trailing slash is ignored, and a query on the base URL
    /// is kept at the end (`…/deployments/gpt-4o?api-version=2024-10-21` posts to
    /// `…/deployments/gpt-4o/chat/completions?api-version=2024-10-21`).
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The model used when a request names none.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sends `OpenAI-Organization`.
    pub fn organization(mut self, organization: impl Into<String>) -> Self {
        self.organization = Some(organization.into());
        self
    }

    /// Sends `OpenAI-Project`.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Which field carries the token limit (default: chosen per request from the model name,
    /// see [`MaxTokensField::for_model`]).
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = Some(field);
        self
    }

    /// Sends signed thinking back on assistant messages as `thinking_blocks`
    /// (`[{"type":"thinking","thinking":…,"signature":…}]`), the shape LiteLLM documents for
    /// Anthropic models served over Chat Completions (default off).
    ///
    /// Turn it on when a proxy fronts a model with extended thinking: such a model needs its
    /// signed thinking back in tool turns. Off by default because OpenAI rejects messages with
    /// fields it does not know. Unsigned reasoning (`reasoning_content` from DeepSeek, vLLM,
    /// Ollama …) is never sent back: no compatible server documents a request field for it.
    /// Signed thinking is read from a stream's `delta.thinking_blocks` either way.
    pub fn send_thinking_blocks(mut self, send: bool) -> Self {
        self.thinking_blocks = send;
        self
    }

    /// Sends the key in this header, as it is, instead of `Authorization: Bearer <key>`: for
    /// Azure OpenAI, `auth_header("api-key")`. The value is marked sensitive and never shown.
    ///
    /// ```
    /// use agent_loop::OpenAiClient;
    ///
    /// // Azure OpenAI: the deployment in the path, the API version as a query parameter.
    /// let azure = OpenAiClient::new("azure-key")
    ///     .base_url("https://my-resource.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21")
    ///     .auth_header("api-key")
    ///     .model("gpt-4o");
    /// # let _ = azure;
    /// ```
    pub fn auth_header(mut self, name: impl Into<String>) -> Self {
        self.auth_header = Some(name.into());
        self
    }

    /// Speaks the OpenAI Responses API (`POST {base_url}/responses`) instead of Chat
    /// Completions: the same server, key, headers, timeouts, retries and limits.
    ///
    /// Reasoning models keep their chain of thought across tool calls only when their reasoning
    /// items are sent back; in this mode they are kept in the history as
    /// [`ContentBlock::Reasoning`](crate::ContentBlock::Reasoning) and sent back verbatim.
    /// Nothing is stored on the server by default (`store: false`, with
    /// `include: ["reasoning.encrypted_content"]`); see [`store`](Self::store).
    ///
    /// ```
    /// use agent_loop::{LlmClient, OpenAiClient};
    ///
    /// let client = OpenAiClient::new("sk-…").model("o4-mini").responses()
    ///     .reasoning_effort("low")
    ///     .reasoning_summary("auto");
    /// assert_eq!(LlmClient::model(&client), "o4-mini");
    /// assert!(client.is_responses());
    /// ```
    pub fn responses(mut self) -> Self {
        self.responses.get_or_insert_with(ResponsesOptions::default);
        self
    }

    /// Whether the client speaks the Responses API (see [`responses`](Self::responses)).
    pub fn is_responses(&self) -> bool {
        self.responses.is_some()
    }

    /// `reasoning.effort` for reasoning models (`minimal`, `low`, `medium`, `high`); switches
    /// to the Responses API.
    pub fn reasoning_effort(mut self, effort: impl Into<String>) -> Self {
        self.responses
            .get_or_insert_with(ResponsesOptions::default)
            .reasoning_effort = Some(effort.into());
        self
    }

    /// `reasoning.summary` (`auto`, `concise`, `detailed`): ask for reasoning summaries, which
    /// stream as thinking; switches to the Responses API.
    pub fn reasoning_summary(mut self, summary: impl Into<String>) -> Self {
        self.responses
            .get_or_insert_with(ResponsesOptions::default)
            .reasoning_summary = Some(summary.into());
        self
    }

    /// Lets the server store responses (`store: true`; default false, with
    /// `include: ["reasoning.encrypted_content"]` so reasoning travels in the history instead).
    /// Needed to continue with `previous_response_id` (put it in
    /// [`ModelRequest::extra`]: only the messages after the last assistant message are then
    /// sent). Switches to the Responses API.
    pub fn store(mut self, store: bool) -> Self {
        self.responses
            .get_or_insert_with(ResponsesOptions::default)
            .store = store;
        self
    }

    crate::provider::transport::http::transport_setters!(
        "for example a gateway's routing header",
        "300 s",
        "Keep-alive comments do not reset it."
    );

    fn build(&self, request: &ModelRequest) -> Result<HttpRequest, LlmError> {
        let model = request.model.as_deref().unwrap_or(&self.model);
        let field = self
            .max_tokens_field
            .unwrap_or_else(|| MaxTokensField::for_model(model));
        let (body, path) = match &self.responses {
            Some(options) => (
                responses::request::encode(request, &self.model, options)?,
                "/responses",
            ),
            None => (
                request::encode(request, &self.model, field, self.thinking_blocks)?,
                "/chat/completions",
            ),
        };
        let headers = self.headers()?;
        HttpRequest::json(
            join_url(&self.base_url, path),
            body,
            headers,
            &self.transport.settings().headers,
        )
    }

    /// The headers of every request: the key, organization and project.
    fn headers(&self) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        if !self.api_key.is_empty() {
            match &self.auth_header {
                None => {
                    headers.insert(
                        reqwest::header::AUTHORIZATION,
                        self.api_key.header_value("Bearer ")?,
                    );
                }
                Some(name) => {
                    let name =
                        reqwest::header::HeaderName::try_from(name.as_str()).map_err(|_| {
                            LlmError::InvalidRequest {
                                message: format!("invalid auth header name {name:?}"),
                            }
                        })?;
                    headers.insert(name, self.api_key.header_value("")?);
                }
            }
        }
        for (name, value) in [
            ("openai-organization", &self.organization),
            ("openai-project", &self.project),
        ] {
            if let Some(value) = value {
                let value = HeaderValue::try_from(value.as_str()).map_err(|_| {
                    LlmError::InvalidRequest {
                        message: format!("invalid {name} header value"),
                    }
                })?;
                headers.insert(name, value);
            }
        }
        Ok(headers)
    }

    /// Compacts `conversation` with the Responses API's `POST {base_url}/responses/compact`:
    /// the server keeps every user message and replaces the rest with one encrypted
    /// compaction item ([`ContentBlock::Compaction`](crate::ContentBlock::Compaction)).
    /// [`Agent::restore`](crate::Agent::restore) the result between runs (as the OpenAI
    /// Agents SDK compacts a session after a turn); the next requests send the compacted
    /// window instead of the whole history.
    ///
    /// The request is `model` (this client's), `input` (the conversation, encoded as
    /// [`responses`](Self::responses) requests encode it) and `instructions` (the system
    /// prompt), and is sent whatever the client's wire format, with the client's key, headers,
    /// timeouts and retry policy. The answer is read whole, up to
    /// [`StreamLimits::max_response_bytes`](crate::wire::StreamLimits::max_response_bytes).
    ///
    /// Only the Responses format can read the compaction item: the other formats' encoders
    /// leave it out, so a fallback model of another format gets a valid request holding the
    /// user's messages only. Compact locally (the agent's [`ContextConfig`](crate::context::ContextConfig)) where another format
    /// must read the whole story.
    ///
    /// # Errors
    ///
    /// [`LlmError::InvalidRequest`] for an empty conversation or no model; the API's errors
    /// as for a streamed request; [`LlmError::Malformed`] when the answer is not a compacted
    /// response with a compaction item (nothing is replaced then).
    ///
    /// ```no_run
    /// # async fn demo(mut agent: agent_loop::Agent) -> Result<(), Box<dyn std::error::Error>> {
    /// use agent_loop::OpenAiClient;
    ///
    /// let client = OpenAiClient::new("sk-…").model("gpt-5.4").responses();
    /// let compacted = client.compact_on_server(&agent.snapshot()).await?;
    /// println!("compaction used {} input tokens", compacted.usage.input_tokens);
    /// agent.restore(compacted.conversation)?;
    /// # Ok(()) }
    /// ```
    pub async fn compact_on_server(
        &self,
        conversation: &crate::message::Conversation,
    ) -> Result<CompactedConversation, LlmError> {
        let body = responses::compact_on_server::encode(conversation, &self.model)?;
        let request = HttpRequest::json(
            join_url(&self.base_url, "/responses/compact"),
            body,
            self.headers()?,
            &self.transport.settings().headers,
        )?;
        let limit = self.transport.settings().limits.max_response_bytes;
        let answer = self
            .transport
            .post_json(
                &RESPONSES_SPEC,
                &request,
                limit,
                "StreamLimits::max_response_bytes",
            )
            .await?;
        responses::compact_on_server::decode(&answer, conversation.system.clone())
    }
}

// `openai` for both wire formats (Chat Completions and Responses) and for the compatible
// servers it talks to.
crate::provider::transport::http::llm_client!(
    OpenAiClient,
    spec: |client| if client.responses.is_some() {
        &RESPONSES_SPEC
    } else {
        &SPEC
    },
    model: |client| &client.model,
    provider: |_client| "openai",
    strict: Some(crate::provider::strict::StrictDialect::OpenAi),
);

/// Reads `{"error":{"message","type","code"}}`, and the looser shapes compatible servers send
/// (`{"error":"…"}`, `{"message":"…"}`, `{"detail":"…"}`).
fn parse_error_body(body: &[u8], error: &mut ApiError) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match value.get("error") {
        Some(serde_json::Value::Object(inner)) => {
            error.message = inner.get("message").and_then(text).unwrap_or_default();
            error.error_type = inner.get("type").and_then(text);
            error.code = inner.get("code").and_then(text);
            true
        }
        Some(serde_json::Value::String(message)) => {
            error.message = message.clone();
            true
        }
        _ => match value
            .get("message")
            .or_else(|| value.get("detail"))
            .and_then(text)
        {
            Some(message) => {
                error.message = message;
                true
            }
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LlmClient;

    #[test]
    fn from_env_allows_a_missing_key_only_with_a_base_url() {
        let err = OpenAiClient::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("OPENAI_API_KEY"));
        let local = OpenAiClient::from_lookup(|name| {
            (name == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:1/v1/".to_owned())
        })
        .unwrap();
        assert!(local.api_key.is_empty());
        assert_eq!(local.base_url, "http://127.0.0.1:1/v1");
        let client = OpenAiClient::from_lookup(|name| match name {
            "OPENAI_API_KEY" => Some("sk-secret-123".into()),
            "OPENAI_MODEL" => Some("gpt-x".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(LlmClient::model(&client), "gpt-x");
        assert!(!format!("{client:?}").contains("sk-secret-123"));
    }

    #[test]
    fn from_env_picks_the_wire_api() {
        let lookup = |api: &'static str| {
            move |name: &str| match name {
                "OPENAI_API_KEY" => Some("k".to_owned()),
                "OPENAI_WIRE_API" => Some(api.to_owned()),
                _ => None,
            }
        };
        assert!(OpenAiClient::from_lookup(lookup("responses"))
            .unwrap()
            .is_responses());
        assert!(!OpenAiClient::from_lookup(lookup("chat"))
            .unwrap()
            .is_responses());
        let err = OpenAiClient::from_lookup(lookup("completions")).unwrap_err();
        assert!(err.to_string().contains("OPENAI_WIRE_API"), "{err}");
        assert!(!OpenAiClient::new("k").is_responses());
        assert!(OpenAiClient::new("k").store(false).is_responses());
    }

    #[test]
    fn error_bodies_and_overflow_are_recognized() {
        let mut e = ApiError::new(400, "");
        assert!(parse_error_body(
            br#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            &mut e
        ));
        assert_eq!(e.code.as_deref(), Some("context_length_exceeded"));
        assert!(is_context_overflow(&e));
        let mut e = ApiError::new(500, "");
        assert!(parse_error_body(br#"{"detail":"boom"}"#, &mut e));
        assert_eq!(e.message, "boom");
        assert!(!is_context_overflow(&e));
    }
}
