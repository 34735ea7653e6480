//! Google Gemini (`generateContent` streamed), on the Gemini API and on Vertex AI: wire types,
//! request encoding, stream decoding and the client.

pub(crate) mod decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
pub(crate) mod request;
mod wire;

crate::provider::format::unit!(
    Gemini,
    "Google Gemini (the Gemini API and Vertex AI)",
    encode: |request, _model| request::encode(request, true),
);

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;

use crate::error::{ApiError, ConfigError, Error, LlmError};
use crate::provider::transport::http::{
    HttpRequest, HttpSettings, ProviderSpec, Secret, Transport,
};
use crate::provider::ModelRequest;
use crate::wire::WireFormat;

const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

static GEMINI_SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::Gemini,
    parse_error_body,
    is_context_overflow,
    auth_hint: "the API key: GEMINI_API_KEY (or GOOGLE_API_KEY), or the key passed to \
                GeminiClient::new",
};

static VERTEX_SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::Gemini,
    parse_error_body,
    is_context_overflow,
    auth_hint: "the Vertex AI access token passed to GeminiClient::vertex (an OAuth 2 access \
                token, e.g. from `gcloud auth print-access-token`; they expire after an hour)",
};

/// A Vertex AI access token: a fixed string, or a source asked for the current token before
/// each request.
///
/// It is a Google OAuth 2 access token for an account with access to the project (the Vertex
/// AI User role), sent as `authorization: Bearer {token}`. For a person's own account,
/// `gcloud auth print-access-token` prints one (`gcloud auth application-default
/// print-access-token` for the application-default credentials); a service account gets one
/// from Google's token endpoint or its host's metadata server.
///
/// A `String` or `&str` converts into a fixed token. Access tokens expire (after an hour, for
/// Google's OAuth 2 tokens), so a long-running program passes a source instead: a closure
/// that returns the current token, for example one that reads a token another task refreshes.
/// It is called once per request, when the request is first sent (a retry re-sends the same
/// request), so it should be quick and not block on the network.
///
/// The token never appears in `Debug` output or errors.
///
/// ```
/// use std::sync::{Arc, RwLock};
/// use agent_loop::{GeminiClient};
/// use agent_loop::provider::gemini::AccessToken;
///
/// // A fixed token:
/// let client = GeminiClient::vertex("my-project", "us-central1", "ya29.…");
/// // A token refreshed elsewhere, read before each request:
/// let current = Arc::new(RwLock::new(String::from("ya29.…")));
/// let shared = Arc::clone(&current);
/// let token = AccessToken::refreshing(move || {
///     shared.read().map(|t| t.clone()).map_err(|_| "the token lock is poisoned".to_owned())
/// });
/// let client = GeminiClient::vertex("my-project", "global", token).model("gemini-2.5-flash");
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct AccessToken(TokenKind);

type TokenFn = dyn Fn() -> Result<String, String> + Send + Sync;

#[derive(Clone)]
enum TokenKind {
    Fixed(Secret),
    Refreshing(Arc<TokenFn>),
}

impl AccessToken {
    /// A token read from `source` before each request; an `Err` fails the request with
    /// [`LlmError::InvalidRequest`] carrying the message.
    ///
    /// Here the token is read from a file that another process (a cron job running
    /// `gcloud auth print-access-token`, a credentials sidecar) rewrites before it expires:
    ///
    /// ```
    /// let token = agent_loop::provider::gemini::AccessToken::refreshing(|| {
    ///     std::fs::read_to_string("/run/secrets/gcp-access-token")
    ///         .map(|token| token.trim().to_owned())
    ///         .map_err(|e| e.to_string())
    /// });
    /// let client = agent_loop::GeminiClient::vertex("my-project", "us-central1", token);
    /// # let _ = client;
    /// ```
    pub fn refreshing(source: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> Self {
        AccessToken(TokenKind::Refreshing(Arc::new(source)))
    }

    fn current(&self) -> Result<Secret, LlmError> {
        match &self.0 {
            TokenKind::Fixed(secret) => Ok(secret.clone()),
            TokenKind::Refreshing(source) => {
                source()
                    .map(Secret::new)
                    .map_err(|message| LlmError::InvalidRequest {
                        message: format!("the Vertex AI access token source failed: {message}"),
                    })
            }
        }
    }
}

impl From<String> for AccessToken {
    fn from(token: String) -> Self {
        AccessToken(TokenKind::Fixed(Secret::new(token)))
    }
}

impl From<&str> for AccessToken {
    fn from(token: &str) -> Self {
        AccessToken::from(token.to_owned())
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            TokenKind::Fixed(_) => f.write_str("AccessToken(\"[redacted]\")"),
            TokenKind::Refreshing(_) => f.write_str("AccessToken(refreshing)"),
        }
    }
}

/// Which service the client talks to, and how it authenticates.
#[derive(Debug, Clone)]
enum Service {
    /// The Gemini API: `x-goog-api-key`.
    Gemini { api_key: Secret },
    /// Vertex AI: `authorization: Bearer {token}`.
    Vertex {
        project: String,
        location: String,
        token: AccessToken,
    },
}

/// A streaming client for Google Gemini, on the Gemini API or on Vertex AI.
///
/// - Gemini API ([`GeminiClient::new`]): `POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`
///   with the key in the `x-goog-api-key` header (never in the URL); default base URL
///   `https://generativelanguage.googleapis.com`.
/// - Vertex AI ([`GeminiClient::vertex`]): `POST {base_url}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse`
///   with `authorization: Bearer {token}`; default base URL
///   `https://{location}-aiplatform.googleapis.com` (`https://aiplatform.googleapis.com` for
///   the `global` location). Call ids are not sent to Vertex AI: results are matched to
///   their calls by name and order.
///
/// ```no_run
/// use std::time::Duration;
/// use agent_loop::{GeminiClient};
/// use agent_loop::provider::transport::RetryPolicy;
///
/// let client = GeminiClient::new("AIza…")
///     .model("gemini-2.5-flash")
///     .idle_timeout(Duration::from_secs(60))
///     .retry_policy(RetryPolicy::default().max_retries(5));
/// // or: GeminiClient::from_env()? reads GEMINI_API_KEY (else GOOGLE_API_KEY),
/// //     GEMINI_BASE_URL and GEMINI_MODEL
/// # let _ = client;
/// ```
///
/// Both send `content-type: application/json` and `accept: text/event-stream`; the key or
/// token is marked sensitive and never appears in `Debug` output or errors. How the
/// conversation is encoded (tool schemas as `parametersJsonSchema`, thought signatures, ids of
/// calls Gemini sent without one) is described in the crate's Gemini modules; in short, every
/// `thoughtSignature` goes back on the part it came with, and tool results are matched to
/// their calls by name (and by id when Gemini gave one).
///
/// # What comes back
///
/// - Usage: [`Usage::input_tokens`](crate::Usage::input_tokens) is `promptTokenCount` (plus
///   `toolUsePromptTokenCount`) less `cachedContentTokenCount`, which is
///   `cache_read_input_tokens`, so [`Usage::total_input_tokens`](crate::Usage::total_input_tokens)
///   is the whole prompt, as with the other providers; `output_tokens` is
///   `candidatesTokenCount + thoughtsTokenCount` (Google bills thinking as output) and
///   `reasoning_tokens` is `thoughtsTokenCount`.
/// - Stop reasons: `STOP` is [`StopReason::EndTurn`](crate::StopReason::EndTurn), or
///   [`ToolUse`](crate::StopReason::ToolUse) when the response called functions; `MAX_TOKENS`
///   is [`MaxTokens`](crate::StopReason::MaxTokens); the safety reasons (`SAFETY`,
///   `RECITATION`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, `IMAGE_SAFETY` …) and a blocked
///   prompt (`promptFeedback.blockReason`, no candidate) are
///   [`ContentFilter`](crate::StopReason::ContentFilter), which ends an agent's run as
///   refused. `MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL` and `OTHER` are the model
///   failing its turn: the response fails with
///   [`LlmError::ModelFailure`] (its `finishMessage` in the
///   message), which is retried, and which an [`Agent`](crate::Agent) answers by sending the
///   turn again with a note to the model. The others (`LANGUAGE`, `TOO_MANY_TOOL_CALLS` …) are
///   kept as sent in [`StopReason::Other`](crate::StopReason::Other).
/// - Thought signatures: a `thoughtSignature` on a thought part is that
///   [`ContentBlock::Thinking`](crate::ContentBlock::Thinking)'s signature; on any other part
///   (a function call, a text part) it is kept as a `Thinking` block with empty text placed
///   right before that part's block, and sent back on the part that follows it. A signed part
///   with no text keeps a block of its own all the same (an empty
///   [`Text`](crate::ContentBlock::Text) block, or an empty `Thinking` block for a thought
///   part), so the signature goes back on that empty part, in its place, and not on the part
///   after it. Keep such blocks in the history, as the agent does, and every signature goes
///   back verbatim where it came from.
/// - Call ids: a function call without an `id` gets `gemini_call_{responseId}_{n}`, stable and
///   unique within the response; such ids are never sent back.
///
/// Used on its own, it retries transient failures (429 `RESOURCE_EXHAUSTED`, 5xx, in-stream
/// `UNAVAILABLE` / `INTERNAL` / `DEADLINE_EXCEEDED` errors) before any content arrived, per its
/// [`RetryPolicy`](crate::provider::transport::RetryPolicy); under an [`Agent`](crate::Agent) the agent decides and counts every retry.
///
/// Timeouts (each its own setting): connect 10 s, first byte (response headers) 120 s, idle
/// 120 s between content events, no total limit.
#[derive(Debug, Clone)]
pub struct GeminiClient {
    service: Service,
    /// Empty: the service's default.
    base_url: String,
    model: String,
    transport: Transport,
}

impl GeminiClient {
    /// A client for the Gemini API with this API key, the default base URL and no model.
    ///
    /// ```
    /// let client = agent_loop::GeminiClient::new("AIza…").model("gemini-2.5-flash");
    /// # let _ = client;
    /// ```
    pub fn new(api_key: impl Into<String>) -> Self {
        GeminiClient {
            service: Service::Gemini {
                api_key: Secret::new(api_key),
            },
            base_url: String::new(),
            model: String::new(),
            transport: Transport::new(HttpSettings::new(Duration::from_secs(120))),
        }
    }

    /// A client for Vertex AI in `project` and `location` (`us-central1`, `europe-west4`,
    /// `global` …), authenticated with `token`: a fixed access token (`String` / `&str`) or an
    /// [`AccessToken::refreshing`] source.
    ///
    /// ```
    /// let client = agent_loop::GeminiClient::vertex("my-project", "us-central1", "ya29.…")
    ///     .model("gemini-2.5-pro");
    /// # let _ = client;
    /// ```
    pub fn vertex(
        project: impl Into<String>,
        location: impl Into<String>,
        token: impl Into<AccessToken>,
    ) -> Self {
        GeminiClient {
            service: Service::Vertex {
                project: project.into(),
                location: location.into(),
                token: token.into(),
            },
            base_url: String::new(),
            model: String::new(),
            transport: Transport::new(HttpSettings::new(Duration::from_secs(120))),
        }
    }

    /// A Gemini API client configured from the environment: `GEMINI_API_KEY` (else
    /// `GOOGLE_API_KEY`; one is required), `GEMINI_BASE_URL` and `GEMINI_MODEL` (optional).
    ///
    /// With `GOOGLE_GENAI_USE_VERTEXAI` set to `true` or `1` (Google's switch to Vertex AI, as
    /// the google-genai SDKs read it), the environment asks for Vertex AI, which takes an
    /// access token rather than an API key: this fails with [`Error::Config`] naming
    /// `GOOGLE_GENAI_USE_VERTEXAI` and saying to build the client with
    /// [`GeminiClient::vertex_from_env`], which reads the project and location from the same
    /// environment and takes the token.
    ///
    /// Fails with [`Error::Config`] naming the variable when no key is set.
    ///
    /// ```no_run
    /// let client = agent_loop::GeminiClient::from_env()?;
    /// # let _ = client;
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// A Vertex AI client configured from the environment as Google's SDKs read it:
    /// `GOOGLE_CLOUD_PROJECT` (required) and `GOOGLE_CLOUD_LOCATION` (`us-central1`,
    /// `europe-west4` …; default `global`, as in google-genai), and `GEMINI_MODEL` (optional),
    /// authenticated with `token`: a fixed access token or an [`AccessToken::refreshing`]
    /// source (see [`AccessToken`] for how to get one; `gcloud auth print-access-token` prints
    /// one for your own account). `GOOGLE_GENAI_USE_VERTEXAI` is not needed here.
    ///
    /// Fails with [`Error::Config`] naming `GOOGLE_CLOUD_PROJECT` when it is not set.
    ///
    /// ```no_run
    /// // GOOGLE_CLOUD_PROJECT=my-project GOOGLE_CLOUD_LOCATION=us-central1
    /// let token = std::env::args().nth(1).unwrap_or_default(); // `gcloud auth print-access-token`
    /// let client = agent_loop::GeminiClient::vertex_from_env(token)?.model("gemini-2.5-pro");
    /// # let _ = client;
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn vertex_from_env(token: impl Into<AccessToken>) -> Result<Self, Error> {
        Self::vertex_from_lookup(|name| std::env::var(name).ok(), token.into())
    }

    fn vertex_from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        token: AccessToken,
    ) -> Result<Self, Error> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let project = get("GOOGLE_CLOUD_PROJECT").ok_or_else(|| {
            Error::Config(ConfigError::Env {
                variable: "GOOGLE_CLOUD_PROJECT",
                message: "not set: export the id of the Google Cloud project to use Vertex AI in"
                    .to_owned(),
            })
        })?;
        let location = get("GOOGLE_CLOUD_LOCATION").unwrap_or_else(|| "global".to_owned());
        let mut client = GeminiClient::vertex(project, location, token);
        if let Some(model) = get("GEMINI_MODEL") {
            client = client.model(model);
        }
        Ok(client)
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let vertex = get("GOOGLE_GENAI_USE_VERTEXAI")
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1"));
        if vertex {
            return Err(Error::Config(ConfigError::Env {
                variable: "GOOGLE_GENAI_USE_VERTEXAI",
                message: "asks for Vertex AI, which takes an OAuth access token, not an API key: \
                          build the client with GeminiClient::vertex_from_env(token) (it reads \
                          GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION; \
                          `gcloud auth print-access-token` prints a token), or unset the \
                          variable to use the Gemini API with GEMINI_API_KEY"
                    .to_owned(),
            }));
        }
        let key = get("GEMINI_API_KEY")
            .or_else(|| get("GOOGLE_API_KEY"))
            .ok_or_else(|| {
                Error::Config(ConfigError::Env {
                    variable: "GEMINI_API_KEY",
                    message: "not set (nor GOOGLE_API_KEY): export your Gemini API key in it"
                        .to_owned(),
                })
            })?;
        let mut client = GeminiClient::new(key.trim());
        if let Some(url) = get("GEMINI_BASE_URL") {
            client = client.base_url(url.trim());
        }
        if let Some(model) = get("GEMINI_MODEL") {
            client = client.model(model.trim());
        }
        Ok(client)
    }

    /// The server's base URL (default: the service's own, see [`GeminiClient`]); the API path
    /// is appended to it. A trailing slash is ignored.
    ///
    /// ```
    /// let client = agent_loop::GeminiClient::new("key").base_url("http://127.0.0.1:9000/");
    /// # let _ = client;
    /// ```
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The model used when a request names none (`gemini-2.5-flash`; a `models/` prefix is
    /// accepted and left out).
    ///
    /// ```
    /// let client = agent_loop::GeminiClient::new("key").model("gemini-2.5-flash");
    /// # let _ = client;
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    crate::provider::transport::http::transport_setters!(
        "for example `x-goog-user-project`",
        "120 s",
        "Gemini sends no keep-alives."
    );

    fn spec(&self) -> &'static ProviderSpec {
        match self.service {
            Service::Gemini { .. } => &GEMINI_SPEC,
            Service::Vertex { .. } => &VERTEX_SPEC,
        }
    }

    /// The URL of the streamed call for `model`.
    fn url(&self, model: &str) -> Result<String, LlmError> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        if model.is_empty() {
            return Err(LlmError::InvalidRequest {
                message: "no model: set one with GeminiClient::model(..) (or GEMINI_MODEL), or \
                          in ModelRequest::model"
                    .to_owned(),
            });
        }
        if !model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
        {
            return Err(LlmError::InvalidRequest {
                message: format!(
                    "the model name {model:?} has characters that cannot go in the URL path"
                ),
            });
        }
        let (default_base, path) = match &self.service {
            Service::Gemini { .. } => (
                DEFAULT_BASE_URL.to_owned(),
                format!("/v1beta/models/{model}:streamGenerateContent"),
            ),
            Service::Vertex {
                project, location, ..
            } => {
                let safe = |s: &str| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                };
                if !safe(project) || !safe(location) {
                    return Err(LlmError::InvalidRequest {
                        message: format!(
                            "the Vertex AI project {project:?} or location {location:?} is \
                             empty or has characters that cannot go in the URL path"
                        ),
                    });
                }
                let base = if location == "global" {
                    "https://aiplatform.googleapis.com".to_owned()
                } else {
                    format!("https://{location}-aiplatform.googleapis.com")
                };
                (
                    base,
                    format!(
                        "/v1/projects/{project}/locations/{location}/publishers/google/models/\
                         {model}:streamGenerateContent"
                    ),
                )
            }
        };
        let base = if self.base_url.is_empty() {
            default_base.as_str()
        } else {
            self.base_url.as_str()
        };
        Ok(match base.split_once('?') {
            Some((base, query)) => format!("{}{path}?alt=sse&{query}", base.trim_end_matches('/')),
            None => format!("{base}{path}?alt=sse"),
        })
    }

    fn build(&self, request: &ModelRequest) -> Result<HttpRequest, LlmError> {
        let model = request.model.as_deref().unwrap_or(&self.model);
        let url = self.url(model)?;
        let vertex = matches!(self.service, Service::Vertex { .. });
        let body = request::encode(request, !vertex)?;
        let mut headers = HeaderMap::new();
        match &self.service {
            Service::Gemini { api_key } => {
                headers.insert("x-goog-api-key", api_key.header_value("")?);
            }
            Service::Vertex { token, .. } => {
                headers.insert(
                    reqwest::header::AUTHORIZATION,
                    token.current()?.header_value("Bearer ")?,
                );
            }
        }
        HttpRequest::json(url, body, headers, &self.transport.settings().headers)
    }
}

// `gcp.gemini` on the Gemini API, `gcp.vertex_ai` on Vertex AI (OpenTelemetry GenAI names).
crate::provider::transport::http::llm_client!(
    GeminiClient,
    spec: |client| client.spec(),
    model: |client| client.model.strip_prefix("models/").unwrap_or(&client.model),
    provider: |client| match client.service {
        Service::Gemini { .. } => "gcp.gemini",
        Service::Vertex { .. } => "gcp.vertex_ai",
    },
    strict: None,
);

/// Google's error body: `{"error": {"code": 429, "message": "…", "status": "RESOURCE_EXHAUSTED"}}`,
/// or a one-element array of it (Vertex AI's streamed calls).
fn parse_error_body(body: &[u8], error: &mut ApiError) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let object = match value {
        serde_json::Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        other => other,
    };
    if !object
        .get("error")
        .is_some_and(serde_json::Value::is_object)
    {
        return false;
    }
    let Ok(parsed) = serde_json::from_value::<wire::ErrorBody>(object) else {
        return false;
    };
    if error.retry_after.is_none() {
        error.retry_after = parsed
            .error
            .details
            .iter()
            .flatten()
            .filter(|d| {
                d.get("@type")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
            })
            .find_map(|d| d.get("retryDelay")?.as_str().and_then(duration_of));
    }
    error.error_type = parsed.error.status;
    error.message = parsed.error.message.unwrap_or_default();
    true
}

/// A `google.protobuf.Duration` in JSON (`"37s"`, `"0.250s"`), up to a day.
fn duration_of(text: &str) -> Option<Duration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && (0.0..=86_400.0).contains(&seconds))
        .then(|| Duration::from_secs_f64(seconds))
}

/// Gemini refuses an oversized prompt with a 400 `INVALID_ARGUMENT`: "The input token count
/// (N) exceeds the maximum number of tokens allowed (M)."
fn is_context_overflow(error: &ApiError) -> bool {
    if error.status != 400 {
        return false;
    }
    let message = error.message.to_ascii_lowercase();
    [
        "input token count",
        "exceeds the maximum number of tokens",
        "context window",
        "too many tokens",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LlmClient;

    #[test]
    fn from_env_requires_a_key_and_reads_the_rest() {
        let err = GeminiClient::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("GEMINI_API_KEY"), "{err}");
        let client = GeminiClient::from_lookup(|name| match name {
            "GOOGLE_API_KEY" => Some("AIza-google".into()),
            _ => None,
        })
        .unwrap();
        assert!(matches!(&client.service, Service::Gemini { api_key } if !api_key.is_empty()));
        let client = GeminiClient::from_lookup(|name| match name {
            "GEMINI_API_KEY" => Some("AIza-secret".into()),
            "GOOGLE_API_KEY" => Some("AIza-other".into()),
            "GEMINI_BASE_URL" => Some("http://127.0.0.1:1/gemini/".into()),
            "GEMINI_MODEL" => Some("gemini-x".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(client.base_url, "http://127.0.0.1:1/gemini");
        assert_eq!(LlmClient::model(&client), "gemini-x");
        let debug = format!("{client:?}");
        assert!(!debug.contains("AIza"), "{debug}");
        let request = client.build(&ModelRequest::default()).unwrap();
        assert_eq!(
            request.url,
            "http://127.0.0.1:1/gemini/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
        );
        assert_eq!(request.headers["x-goog-api-key"], "AIza-secret");
    }

    #[test]
    fn vertex_from_the_environment_as_google_names_it() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        // Google's switch to Vertex AI: from_env says how to get there, key or not.
        for value in ["true", "TRUE", "1"] {
            let pairs: &'static [(&str, &str)] = match value {
                "true" => &[
                    ("GOOGLE_GENAI_USE_VERTEXAI", "true"),
                    ("GEMINI_API_KEY", "k"),
                ],
                "TRUE" => &[("GOOGLE_GENAI_USE_VERTEXAI", "TRUE")],
                _ => &[("GOOGLE_GENAI_USE_VERTEXAI", "1")],
            };
            let err = GeminiClient::from_lookup(env(pairs)).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("GOOGLE_GENAI_USE_VERTEXAI"), "{text}");
            assert!(text.contains("vertex_from_env"), "{text}");
        }
        // Off, the Gemini API as before.
        let client = GeminiClient::from_lookup(env(&[
            ("GOOGLE_GENAI_USE_VERTEXAI", "false"),
            ("GEMINI_API_KEY", "AIza-k"),
        ]))
        .unwrap();
        assert_eq!(client.provider_name(), "gcp.gemini");
        // The project and location as Google's SDKs read them; the token given.
        let client = GeminiClient::vertex_from_lookup(
            env(&[
                ("GOOGLE_CLOUD_PROJECT", " my-project "),
                ("GOOGLE_CLOUD_LOCATION", "europe-west4"),
                ("GEMINI_MODEL", "gemini-x"),
            ]),
            AccessToken::from("ya29.secret"),
        )
        .unwrap();
        let request = client.build(&ModelRequest::default()).unwrap();
        assert_eq!(
            request.url,
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/locations/\
             europe-west4/publishers/google/models/gemini-x:streamGenerateContent?alt=sse"
        );
        assert_eq!(request.headers["authorization"], "Bearer ya29.secret");
        // The location defaults to `global`, as in google-genai.
        let client = GeminiClient::vertex_from_lookup(
            env(&[("GOOGLE_CLOUD_PROJECT", "p")]),
            AccessToken::from("t"),
        )
        .unwrap()
        .model("g");
        assert!(client
            .url("g")
            .unwrap()
            .starts_with("https://aiplatform.googleapis.com/v1/projects/p/locations/global/"));
        let err = GeminiClient::vertex_from_lookup(env(&[]), AccessToken::from("t")).unwrap_err();
        assert!(err.to_string().contains("GOOGLE_CLOUD_PROJECT"), "{err}");
    }

    #[test]
    fn vertex_urls_and_tokens() {
        let client = GeminiClient::vertex("p-1", "us-central1", "ya29.secret").model("g");
        let request = client.build(&ModelRequest::default()).unwrap();
        assert_eq!(
            request.url,
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p-1/locations/\
             us-central1/publishers/google/models/g:streamGenerateContent?alt=sse"
        );
        assert_eq!(request.headers["authorization"], "Bearer ya29.secret");
        assert!(!format!("{client:?}").contains("ya29"));
        assert_eq!(client.provider_name(), "gcp.vertex_ai");
        let global =
            GeminiClient::vertex("p", "global", AccessToken::refreshing(|| Ok("t".into())))
                .model("g");
        assert!(global
            .url("g")
            .unwrap()
            .starts_with("https://aiplatform.googleapis.com/v1/projects/p/locations/global/"));
        let failing =
            GeminiClient::vertex("p", "global", AccessToken::refreshing(|| Err("no".into())))
                .model("g");
        assert!(failing.build(&ModelRequest::default()).is_err());
        assert!(GeminiClient::new("k").url("a/b").is_err());
        assert!(GeminiClient::new("k").url("").is_err());
    }

    #[test]
    fn error_bodies_and_overflow_are_recognized() {
        let mut e = ApiError::new(400, "");
        assert!(parse_error_body(
            br#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            &mut e
        ));
        assert_eq!(e.error_type.as_deref(), Some("INVALID_ARGUMENT"));
        assert!(is_context_overflow(&e));
        let mut e = ApiError::new(429, "");
        assert!(parse_error_body(
            br#"[{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}]"#,
            &mut e
        ));
        assert_eq!(e.error_type.as_deref(), Some("RESOURCE_EXHAUSTED"));
        assert!(!parse_error_body(b"<html>bad gateway</html>", &mut e));
        // Google's RetryInfo detail gives the wait when no retry-after header did.
        let mut e = ApiError::new(429, "");
        assert!(parse_error_body(
            br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#,
            &mut e
        ));
        assert_eq!(e.retry_after, Some(Duration::from_secs(37)));
        assert_eq!(duration_of("0.250s"), Some(Duration::from_millis(250)));
        assert_eq!(duration_of("-1s"), None);
        assert_eq!(duration_of("5m"), None);
    }
}
