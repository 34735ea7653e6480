//! Ollama's native chat API (`POST /api/chat`, newline-delimited JSON): wire types, request
//! encoding, stream decoding and the client.

pub(crate) mod decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
pub(crate) mod request;
mod wire;

crate::provider::format::unit!(
    Ollama,
    "Ollama's chat API",
    encode: |request, model| request::encode(request, model, &request::EncodeOptions::default()),
    framing: Lines,
);

pub(crate) use decode::is_context_overflow;

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value};

use crate::error::{ApiError, Error, LlmError};
use crate::provider::transport::http::{
    join_url, HttpRequest, HttpSettings, ProviderSpec, Secret, Transport,
};
use crate::provider::ModelRequest;
use crate::wire::WireFormat;

use request::EncodeOptions;

const DEFAULT_BASE_URL: &str = "http://localhost:11434";
/// The port Ollama listens on unless told otherwise.
const DEFAULT_PORT: u16 = 11434;

static SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::Ollama,
    parse_error_body,
    is_context_overflow,
    auth_hint: "the API key: OLLAMA_API_KEY, or the key passed to OllamaClient::api_key \
                (ollama.com needs one; a local server needs none)",
};

/// Whether (and how hard) a thinking model thinks: Ollama's `think`, a boolean or a level.
///
/// ```
/// use agent_loop::provider::ollama::OllamaThink;
///
/// assert_eq!(OllamaThink::from(true), OllamaThink::Enabled(true));
/// assert_eq!(OllamaThink::from("high"), OllamaThink::Level("high".into()));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OllamaThink {
    /// `think: true` or `think: false`.
    Enabled(bool),
    /// `think: "low" | "medium" | "high" | "max"` (models that take levels, such as
    /// gpt-oss). Another level fails the request with [`LlmError::InvalidRequest`].
    Level(String),
}

impl From<bool> for OllamaThink {
    fn from(enabled: bool) -> Self {
        OllamaThink::Enabled(enabled)
    }
}

impl From<&str> for OllamaThink {
    fn from(level: &str) -> Self {
        OllamaThink::Level(level.to_owned())
    }
}

impl From<String> for OllamaThink {
    fn from(level: String) -> Self {
        OllamaThink::Level(level)
    }
}

/// How long the server keeps the model loaded after a request: Ollama's `keep_alive`.
///
/// ```
/// use std::time::Duration;
/// use agent_loop::provider::ollama::OllamaKeepAlive;
///
/// let ten_minutes = OllamaKeepAlive::from(Duration::from_secs(600)); // sent as 600
/// let text = OllamaKeepAlive::from("10m");                           // sent as "10m"
/// # let _ = (ten_minutes, text, OllamaKeepAlive::Forever);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OllamaKeepAlive {
    /// This long (sent as a number of seconds; zero unloads the model at once).
    For(Duration),
    /// A Go duration string as Ollama reads it (`"5m"`, `"1h30m"`, `"-1"`), sent as it is.
    Text(String),
    /// Keep the model loaded until the server stops (sent as `-1`).
    Forever,
}

impl From<Duration> for OllamaKeepAlive {
    fn from(duration: Duration) -> Self {
        OllamaKeepAlive::For(duration)
    }
}

impl From<&str> for OllamaKeepAlive {
    fn from(text: &str) -> Self {
        OllamaKeepAlive::Text(text.to_owned())
    }
}

impl From<String> for OllamaKeepAlive {
    fn from(text: String) -> Self {
        OllamaKeepAlive::Text(text)
    }
}

impl OllamaKeepAlive {
    fn to_json(&self) -> Value {
        match self {
            OllamaKeepAlive::For(d) if d.subsec_nanos() == 0 => Value::from(d.as_secs()),
            OllamaKeepAlive::For(d) => Value::from(d.as_secs_f64()),
            OllamaKeepAlive::Text(text) => Value::from(text.as_str()),
            OllamaKeepAlive::Forever => Value::from(-1),
        }
    }
}

/// A streaming client for Ollama's native chat API (`POST {base_url}/api/chat`, answered in
/// newline-delimited JSON), local (`http://localhost:11434`) or hosted (`https://ollama.com`
/// with an API key).
///
/// ```no_run
/// use std::time::Duration;
/// use agent_loop::{OllamaClient};
/// use agent_loop::provider::ollama::OllamaKeepAlive;
///
/// let local = OllamaClient::new()
///     .model("qwen3:8b")
///     .keep_alive(Duration::from_secs(600))
///     .options(serde_json::json!({"num_ctx": 32768, "seed": 7}).as_object().cloned().unwrap())
///     .think(true);
/// let hosted = OllamaClient::new().base_url("https://ollama.com").api_key("…").model("gpt-oss:120b");
/// // or: OllamaClient::from_env()? reads OLLAMA_HOST, OLLAMA_MODEL, OLLAMA_API_KEY
/// # let _ = (local, hosted);
/// ```
///
/// Sends `Authorization: Bearer <key>` when a key is set (marked sensitive; the key never
/// appears in `Debug` output or errors), `content-type: application/json` and
/// `accept: application/x-ndjson`. See the crate's request-encoding notes in
/// [`OllamaClient::options`] and [`OllamaClient::think`]; in short: Ollama has no tool choice
/// (none sends no tools; a named tool sends only that tool; "any" cannot be forced), no
/// documents (refused), no image URLs (refused), no call ids in its documented format (a
/// result is tied to its call by order, with `tool_name`), and no error flag on tool results
/// (the content of an error result starts with `Error: `).
///
/// Usage: `input_tokens` is `prompt_eval_count`, `output_tokens` `eval_count`. Ollama counts
/// only the prompt tokens it evaluated, so a prompt served from its cache counts less.
///
/// Retries, held events and timeouts work as for the other clients: connect 10 s, first byte
/// (response headers) 120 s, idle 300 s between content events (Ollama sends no
/// keep-alives), no total limit. A local server loads the model before it answers the first
/// request, and sends no headers until then: raise
/// [`first_byte_timeout`](Self::first_byte_timeout) for large models on slow disks.
#[derive(Debug, Clone)]
pub struct OllamaClient {
    api_key: Secret,
    base_url: String,
    model: String,
    settings: EncodeOptions,
    think: Option<OllamaThink>,
    transport: Transport,
}

impl Default for OllamaClient {
    fn default() -> Self {
        Self::new()
    }
}

impl OllamaClient {
    /// A client for a local server (`http://localhost:11434`), no key, no model.
    ///
    /// ```
    /// use agent_loop::{LlmClient, OllamaClient};
    ///
    /// let client = OllamaClient::new().model("llama3.2");
    /// assert_eq!(LlmClient::model(&client), "llama3.2");
    /// assert_eq!(client.provider_name(), "ollama");
    /// ```
    pub fn new() -> Self {
        OllamaClient {
            api_key: Secret::default(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            model: String::new(),
            settings: EncodeOptions::default(),
            think: None,
            transport: Transport::new(HttpSettings::new(Duration::from_secs(300))),
        }
    }

    /// A client configured from the environment, as Ollama's own clients read it:
    /// `OLLAMA_HOST` (`host`, `host:port`, `:port` or a URL with `http://` or `https://`, a
    /// path kept; a missing port is 11434, or 80/443 with a scheme), `OLLAMA_MODEL` and
    /// `OLLAMA_API_KEY`, all optional (a local server needs no key).
    ///
    /// ```no_run
    /// let client = agent_loop::OllamaClient::from_env()?;
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn from_env() -> Result<Self, Error> {
        Ok(Self::from_lookup(|name| std::env::var(name).ok()))
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut client = OllamaClient::new();
        if let Some(host) = get("OLLAMA_HOST") {
            client = client.base_url(parse_host(&host));
        }
        if let Some(model) = get("OLLAMA_MODEL") {
            client = client.model(model.trim());
        }
        if let Some(key) = get("OLLAMA_API_KEY") {
            client = client.api_key(key.trim());
        }
        client
    }

    /// The server's base URL (default `http://localhost:11434`; `https://ollama.com` for the
    /// hosted API); requests go to `{base_url}/api/chat`. A trailing slash is ignored.
    ///
    /// ```
    /// let client = agent_loop::OllamaClient::new().base_url("http://gpu-box:11434/");
    /// # let _ = client;
    /// ```
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The model used when a request names none (`llama3.2`, `qwen3:8b` …).
    ///
    /// ```
    /// use agent_loop::LlmClient;
    ///
    /// let client = agent_loop::OllamaClient::new().model("qwen3:8b");
    /// assert_eq!(LlmClient::model(&client), "qwen3:8b");
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// The API key, sent as `Authorization: Bearer <key>` (ollama.com's hosted API; a local
    /// server needs none). Never shown in `Debug` output or errors.
    ///
    /// ```
    /// let client = agent_loop::OllamaClient::new()
    ///     .base_url("https://ollama.com")
    ///     .api_key("my-ollama-key");
    /// assert!(!format!("{client:?}").contains("my-ollama-key"));
    /// ```
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Secret::new(key);
        self
    }

    /// How long the server keeps the model loaded after each request (`keep_alive`; the
    /// server's default is 5 minutes): a [`Duration`], a Go duration string (`"10m"`), or
    /// [`OllamaKeepAlive::Forever`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_loop::{OllamaClient};
    /// use agent_loop::provider::ollama::OllamaKeepAlive;
    ///
    /// let for_an_hour = OllamaClient::new().keep_alive(Duration::from_secs(3600));
    /// let as_text = OllamaClient::new().keep_alive("1h");
    /// let forever = OllamaClient::new().keep_alive(OllamaKeepAlive::Forever);
    /// # let _ = (for_an_hour, as_text, forever);
    /// ```
    pub fn keep_alive(mut self, keep_alive: impl Into<OllamaKeepAlive>) -> Self {
        self.settings.keep_alive = Some(keep_alive.into().to_json());
        self
    }

    /// Model options sent in `options` with every request (`num_ctx`, `seed`, `top_k`,
    /// `repeat_penalty` … as Ollama's Modelfile parameters name them). Later calls add to and
    /// replace keys of earlier ones.
    ///
    /// The request's own settings go in `options` too and replace the client's values of the
    /// same keys: `temperature`, `top_p`, `stop` (from [`ModelRequest::stop_sequences`]) when
    /// the request sets them, and `num_predict`, always, from [`ModelRequest::max_tokens`]
    /// (set it on the agent). An `options` field in [`ModelRequest::extra`] is refused as a
    /// clash.
    ///
    /// ```
    /// use agent_loop::OllamaClient;
    ///
    /// let mut options = serde_json::Map::new();
    /// options.insert("num_ctx".into(), 32768.into());
    /// options.insert("top_k".into(), 20.into());
    /// let client = OllamaClient::new().model("qwen3:8b").options(options);
    /// # let _ = client;
    /// ```
    pub fn options(mut self, options: Map<String, Value>) -> Self {
        self.settings.options.extend(options);
        self
    }

    /// Whether a thinking model thinks, and how hard (`think`): `true`, `false`, or a level
    /// (`"low"`, `"medium"`, `"high"`, `"max"`). Without it, a request's
    /// [`ModelRequest::thinking_budget`] decides: 0 sends `think: false`, any other budget
    /// `think: true` (Ollama has no budget), none sends no `think` (the model's default).
    /// This setting wins over the request's budget.
    ///
    /// ```
    /// use agent_loop::OllamaClient;
    ///
    /// let client = OllamaClient::new().model("gpt-oss:20b").think("low");
    /// # let _ = client;
    /// ```
    pub fn think(mut self, think: impl Into<OllamaThink>) -> Self {
        self.think = Some(think.into());
        self
    }

    /// Sends each tool call's `id` and each result's `tool_call_id` (default off).
    ///
    /// Ollama's documented request format (docs/api.md, and the Python client's `Message`)
    /// ties a result to its call by order and `tool_name` only; recent servers also read
    /// `tool_call_id` on tool messages and `id` on calls (`api.Message`, `api.ToolCall`) and
    /// hand them to model templates that use call ids. Turn it on for such a server and model;
    /// leave it off for servers and proxies that take only the documented fields.
    ///
    /// ```
    /// let client = agent_loop::OllamaClient::new().model("mistral-small3.2").send_call_ids(true);
    /// # let _ = client;
    /// ```
    pub fn send_call_ids(mut self, send: bool) -> Self {
        self.settings.call_ids = send;
        self
    }

    crate::provider::transport::http::transport_setters!(
        "for example a proxy's routing header",
        "300 s",
        "Ollama sends no keep-alives."
    );

    fn build(&self, request: &ModelRequest) -> Result<HttpRequest, LlmError> {
        let mut settings = self.settings.clone();
        settings.think = match &self.think {
            None => None,
            Some(OllamaThink::Enabled(on)) => Some(Value::Bool(*on)),
            Some(OllamaThink::Level(level)) => {
                if !matches!(level.as_str(), "low" | "medium" | "high" | "max") {
                    return Err(LlmError::InvalidRequest {
                        message: format!(
                            "Ollama's think level is \"low\", \"medium\", \"high\" or \"max\", \
                             not {level:?}"
                        ),
                    });
                }
                Some(Value::from(level.as_str()))
            }
        };
        let body = request::encode(request, &self.model, &settings)?;
        let mut headers = HeaderMap::new();
        if !self.api_key.is_empty() {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                self.api_key.header_value("Bearer ")?,
            );
        }
        let extra = &self.transport.settings().headers;
        let mut http =
            HttpRequest::json(join_url(&self.base_url, "/api/chat"), body, headers, extra)?;
        if !extra.iter().any(|(n, _)| n.eq_ignore_ascii_case("accept")) {
            http.headers.insert(
                reqwest::header::ACCEPT,
                HeaderValue::from_static("application/x-ndjson"),
            );
        }
        Ok(http)
    }
}

crate::provider::transport::http::llm_client!(
    OllamaClient,
    spec: |_client| &SPEC,
    model: |client| &client.model,
    provider: |_client| "ollama",
    strict: None,
);

/// `OLLAMA_HOST` as a base URL, the way Ollama's Python client reads it (`_parse_host`):
/// `http` unless a scheme is given; the port 11434 unless given (80 or 443 with an explicit
/// `http://` or `https://`); `127.0.0.1` for an empty host; a path kept, its trailing slash
/// dropped.
pub(crate) fn parse_host(host: &str) -> String {
    let host = host.trim();
    let (scheme, rest, default_port) = match host.split_once("://") {
        Some((scheme, rest)) => {
            let port = match scheme {
                "https" => 443,
                "http" => 80,
                _ => DEFAULT_PORT,
            };
            (scheme, rest, port)
        }
        None => ("http", host, DEFAULT_PORT),
    };
    let (hostport, path) = match rest.find('/') {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    let (name, port) = match hostport.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((address, after)) => (
                format!("[{address}]"),
                after.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()),
            ),
            None => (hostport.to_owned(), None),
        },
        None => match hostport.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), port.parse::<u16>().ok()),
            None => (hostport.to_owned(), None),
        },
    };
    let name = if name.is_empty() {
        "127.0.0.1".to_owned()
    } else {
        name
    };
    format!("{scheme}://{name}:{}{path}", port.unwrap_or(default_port))
}

/// Reads Ollama's `{"error":"…"}`, and `{"error":{"message","type"}}` as compatible servers
/// and mocks send it.
fn parse_error_body(body: &[u8], error: &mut ApiError) -> bool {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    match value.get("error") {
        Some(Value::String(message)) => {
            error.message = message.clone();
            true
        }
        Some(Value::Object(inner)) => {
            error.message = inner
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            error.error_type = inner.get("type").and_then(Value::as_str).map(str::to_owned);
            error.code = inner.get("code").and_then(|c| match c {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            });
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LlmClient;

    #[test]
    fn hosts_read_like_the_python_client() {
        for (host, url) in [
            ("", "http://127.0.0.1:11434"),
            ("1.2.3.4", "http://1.2.3.4:11434"),
            (":56789", "http://127.0.0.1:56789"),
            ("1.2.3.4:56789", "http://1.2.3.4:56789"),
            ("http://1.2.3.4", "http://1.2.3.4:80"),
            ("https://example.com", "https://example.com:443"),
            (
                "https://example.com:56789/path/",
                "https://example.com:56789/path",
            ),
            ("example.com/path", "http://example.com:11434/path"),
            (
                "[0001:002:003:0004::1]",
                "http://[0001:002:003:0004::1]:11434",
            ),
            (
                "https://[0001:002:003:0004::1]:56789/path",
                "https://[0001:002:003:0004::1]:56789/path",
            ),
        ] {
            assert_eq!(parse_host(host), url, "{host}");
        }
    }

    #[test]
    fn from_env_needs_nothing_and_reads_everything() {
        let client = OllamaClient::from_lookup(|_| None);
        assert_eq!(client.base_url, DEFAULT_BASE_URL);
        assert!(client.api_key.is_empty());
        let client = OllamaClient::from_lookup(|name| match name {
            "OLLAMA_HOST" => Some("0.0.0.0:1234".into()),
            "OLLAMA_MODEL" => Some(" llama3.2 ".into()),
            "OLLAMA_API_KEY" => Some("ollama-secret-key".into()),
            _ => None,
        });
        assert_eq!(client.base_url, "http://0.0.0.0:1234");
        assert_eq!(LlmClient::model(&client), "llama3.2");
        let debug = format!("{client:?}");
        assert!(!debug.contains("ollama-secret-key"), "{debug}");
    }

    #[test]
    fn error_bodies_and_overflow_are_recognized() {
        let mut e = ApiError::new(400, "");
        assert!(parse_error_body(
            br#"{"error":"the input length exceeds the context length"}"#,
            &mut e
        ));
        assert!(is_context_overflow(&e));
        let mut e = ApiError::new(404, "");
        assert!(parse_error_body(
            br#"{"error":{"message":"No fixture matched","type":"invalid_request_error"}}"#,
            &mut e
        ));
        assert_eq!(e.error_type.as_deref(), Some("invalid_request_error"));
        assert!(!is_context_overflow(&e));
        assert!(!parse_error_body(b"<html>", &mut e));
    }
}
