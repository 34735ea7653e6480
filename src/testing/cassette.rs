//! Cassettes: a run's model exchanges recorded to a file and replayed with no network.
//!
//! Two loopback servers stand where the model's API stands, so the real client and its
//! decoder do the work in both directions:
//!
//! - [`CassetteRecorder`] forwards each request to an upstream base URL (a [`MockServer`],
//!   a local model server, a provider's API) and records the request body, the response
//!   status, the headers a client reads (content type, retry and rate-limit headers, request
//!   ids) and the response bytes cut where the upstream's chunks arrived;
//! - [`CassettePlayer`] answers each request with the next recorded response, in the same
//!   chunks, after checking the request against the recorded one: a request that differs is
//!   answered `400` naming the first differing field (`messages[2].content[0].text`), and
//!   [`CassettePlayer::check`] reports it.
//!
//! The file is JSON, the format of the real-model cassettes under
//! `tests/fixtures/real_model/` (an object with `exchanges`, each with `path`, `request`,
//! `status`, `content_type` and `chunks`; other top-level fields are ignored), with two
//! additions: `headers`, and a chunk that is not UTF-8 on its own written as
//! `{"base64": "…"}`.
//!
//! [`MockServer`]: super::MockServer

use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use futures::StreamExt;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::mock::{read_request, reason, write_chunk, write_simple, ReadError, Request};

/// The most response bytes one recorded exchange keeps; past it the recording fails
/// ([`CassetteError::TooLarge`]) rather than hold an unbounded body.
pub const MAX_RECORDED_BODY: usize = 32 << 20;

/// The longest value shown in a [`CassetteError::Mismatch`], in characters.
const PREVIEW: usize = 200;

/// A recorded run: its model exchanges, in the order the client made them.
///
/// ```
/// use agent_loop::testing::Cassette;
///
/// let cassette = Cassette::from_json(r#"{"exchanges": [{
///     "path": "/v1/chat/completions", "request": {"model": "m"}, "status": 200,
///     "content_type": "text/event-stream", "chunks": ["data: [DONE]", "\n\n"]}]}"#)?;
/// assert_eq!(cassette.exchanges[0].chunks, [b"data: [DONE]".to_vec(), b"\n\n".to_vec()]);
/// # Ok::<(), agent_loop::testing::CassetteError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cassette {
    /// The exchanges, in order.
    pub exchanges: Vec<CassetteExchange>,
}

/// One request and the response it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CassetteExchange {
    /// The request's path, with its query (`/v1/messages`).
    pub path: String,
    /// The request body as JSON (`null` when it was not JSON). Request headers are not
    /// recorded: they carry the credentials.
    pub request: Value,
    /// The response status.
    pub status: u16,
    /// The response's `content-type`.
    pub content_type: String,
    /// The response headers a client reads (retry and rate-limit headers, request ids,
    /// `date`), names in lower case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// The response body, cut where the upstream's chunks arrived. In the file a chunk is a
    /// string, or `{"base64": "…"}` when it is not UTF-8 on its own.
    #[serde(serialize_with = "chunks_out", deserialize_with = "chunks_in")]
    pub chunks: Vec<Vec<u8>>,
    /// The upstream broke the body off after these chunks (no end of the chunked body): the
    /// player breaks it off there too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub broken_off: bool,
}

impl CassetteExchange {
    /// An exchange with no kept headers.
    pub fn new(
        path: impl Into<String>,
        request: Value,
        status: u16,
        content_type: impl Into<String>,
        chunks: Vec<Vec<u8>>,
    ) -> CassetteExchange {
        CassetteExchange {
            path: path.into(),
            request,
            status,
            content_type: content_type.into(),
            headers: Vec::new(),
            chunks,
            broken_off: false,
        }
    }

    /// The whole response body.
    pub fn body(&self) -> Vec<u8> {
        self.chunks.concat()
    }
}

/// Why a cassette could not be read, written, recorded or replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// The cassette file could not be read or written.
    #[error("cassette file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The text is not a cassette.
    #[error("not a cassette: {0}")]
    Json(#[from] serde_json::Error),
    /// A replayed request differs from the recorded one; `field` is the first field that
    /// differs, as a path into the request body (`messages[2].content[0].text`), or `path`
    /// when the URL path differs. Fix the code under test, or record the cassette again.
    #[error(
        "request #{request} differs from the recorded one at {field}: recorded {recorded}, \
         sent {sent}"
    )]
    Mismatch {
        /// The request's number, from 1.
        request: usize,
        /// The first differing field.
        field: String,
        /// The recorded value (JSON, shortened), or `absent`.
        recorded: String,
        /// The sent value (JSON, shortened), or `absent`.
        sent: String,
    },
    /// The client made more requests than the cassette holds.
    #[error("request #{request} was not recorded: the cassette holds {recorded} exchanges")]
    Unrecorded {
        /// The request's number, from 1.
        request: usize,
        /// How many exchanges the cassette holds.
        recorded: usize,
    },
    /// The client made fewer requests than the cassette holds.
    #[error("only {played} of the cassette's {recorded} exchanges were played")]
    Unplayed {
        /// How many were played.
        played: usize,
        /// How many the cassette holds.
        recorded: usize,
    },
    /// A recorded response went past [`MAX_RECORDED_BODY`].
    #[error("request #{request}: the response is larger than {MAX_RECORDED_BODY} bytes")]
    TooLarge {
        /// The request's number, from 1.
        request: usize,
    },
}

impl Cassette {
    /// A cassette of these exchanges.
    pub fn new(exchanges: Vec<CassetteExchange>) -> Cassette {
        Cassette { exchanges }
    }

    /// Parses a cassette from its JSON text.
    pub fn from_json(text: &str) -> Result<Cassette, CassetteError> {
        Ok(serde_json::from_str(text)?)
    }

    /// The cassette as pretty JSON text, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Reads a cassette file.
    pub fn load(path: impl AsRef<Path>) -> Result<Cassette, CassetteError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| CassetteError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Cassette::from_json(&text)
    }

    /// Writes the cassette to a file (its parent folder must exist).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CassetteError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json()).map_err(|source| CassetteError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}

fn chunks_out<S: Serializer>(chunks: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    let items: Vec<Value> = chunks
        .iter()
        .map(|chunk| match std::str::from_utf8(chunk) {
            Ok(text) => Value::String(text.to_owned()),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(chunk) }),
        })
        .collect();
    items.serialize(s)
}

fn chunks_in<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Chunk {
        Text(String),
        Bytes { base64: String },
    }
    Vec::<Chunk>::deserialize(d)?
        .into_iter()
        .map(|chunk| match chunk {
            Chunk::Text(text) => Ok(text.into_bytes()),
            Chunk::Bytes { base64 } => base64::engine::general_purpose::STANDARD
                .decode(base64)
                .map_err(serde::de::Error::custom),
        })
        .collect()
}

/// The first field where `sent` differs from `recorded`, as a path into the JSON
/// (`messages[2].content[0].text`; `$` for the whole value), with both values there
/// (`None` where one has no such field); `None` when they are equal.
///
/// Objects are compared key by key in the recorded order, then the keys only `sent` has;
/// arrays index by index, then the longer one's first extra item. A key that is not a plain
/// identifier is written `["the key"]`.
///
/// ```
/// use agent_loop::testing::first_difference;
/// use serde_json::json;
///
/// let recorded = json!({"messages": [{"content": [{"text": "hi"}]}]});
/// let sent = json!({"messages": [{"content": [{"text": "hello"}]}]});
/// let (field, was, now) = first_difference(&recorded, &sent).unwrap();
/// assert_eq!(field, "messages[0].content[0].text");
/// assert_eq!((was, now), (Some(json!("hi")), Some(json!("hello"))));
/// assert_eq!(first_difference(&recorded, &recorded), None);
/// ```
pub fn first_difference(
    recorded: &Value,
    sent: &Value,
) -> Option<(String, Option<Value>, Option<Value>)> {
    let mut path = String::new();
    let (was, now) = diff(recorded, sent, &mut path)?;
    if path.is_empty() {
        path.push('$');
    }
    Some((path, was, now))
}

type Difference = (Option<Value>, Option<Value>);

fn diff(recorded: &Value, sent: &Value, path: &mut String) -> Option<Difference> {
    match (recorded, sent) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let at = path.len();
                push_key(path, key);
                let found = match b.get(key) {
                    Some(other) => diff(value, other, path),
                    None => Some((Some(value.clone()), None)),
                };
                if found.is_some() {
                    return found;
                }
                path.truncate(at);
            }
            let (key, value) = b.iter().find(|(key, _)| !a.contains_key(*key))?;
            push_key(path, key);
            Some((None, Some(value.clone())))
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let at = path.len();
                let _ = write!(path, "[{i}]");
                if let Some(found) = diff(x, y, path) {
                    return Some(found);
                }
                path.truncate(at);
            }
            let i = a.len().min(b.len());
            if a.len() == b.len() {
                return None;
            }
            let _ = write!(path, "[{i}]");
            Some((a.get(i).cloned(), b.get(i).cloned()))
        }
        _ if recorded == sent => None,
        _ => Some((Some(recorded.clone()), Some(sent.clone()))),
    }
}

fn push_key(path: &mut String, key: &str) {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        let _ = write!(path, "[{}]", Value::String(key.to_owned()));
    }
}

fn preview(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "absent".to_owned();
    };
    let text = value.to_string();
    if text.chars().count() <= PREVIEW {
        return text;
    }
    let cut: String = text.chars().take(PREVIEW).collect();
    format!("{cut}…")
}

/// The response headers a client reads, so a cassette keeps them.
fn kept_header(name: &str) -> bool {
    matches!(
        name,
        "retry-after"
            | "retry-after-ms"
            | "x-should-retry"
            | "request-id"
            | "x-request-id"
            | "date"
    ) || name.starts_with("x-ratelimit-")
        || name.starts_with("anthropic-ratelimit-")
}

/// A loopback server that binds and serves until dropped.
struct Loopback {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl Loopback {
    async fn start<F, Fut>(what: &str, serve: F) -> Loopback
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{what}: cannot bind a loopback port: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{what}: the listener has no local address: {e}"));
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = token.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((socket, _)) = accepted else { continue };
                let _ = socket.set_nodelay(true);
                let token = token.clone();
                let one = serve(socket);
                tokio::spawn(async move {
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = one => {}
                    }
                });
            }
        });
        Loopback { addr, stop }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Reads one request, or answers the malformed one and gives `None`.
async fn request_of(socket: &mut TcpStream) -> Option<Request> {
    match read_request(socket).await {
        Ok(request) => Some(request),
        Err(ReadError::Closed) => None,
        Err(ReadError::Reply(status, message)) => {
            let body = json!({"error": {"type": "invalid_request_error", "message": message}});
            let _ = write_simple(
                socket,
                status,
                "application/json",
                &[],
                body.to_string().as_bytes(),
            )
            .await;
            None
        }
    }
}

/// A loopback proxy that records a run's model exchanges into a [`Cassette`].
///
/// Point the client's base URL at [`url`](CassetteRecorder::url) plus the prefix the
/// upstream wants (for a [`MockServer`](super::MockServer), `/anthropic` or `/v1`): each
/// request is forwarded to the upstream URL with its path, and the response streamed back
/// as it arrives while it is recorded. One request per connection. Request headers are
/// forwarded, never recorded.
///
/// ```no_run
/// use agent_loop::testing::{CassetteRecorder, MockServer, ScriptedResponse};
/// use agent_loop::{Agent, AnthropicClient};
/// use futures::StreamExt;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let upstream = MockServer::start().await; // or a real model server
/// upstream.push(ScriptedResponse::text("hello"));
/// let recorder = CassetteRecorder::start(upstream.url()).await;
/// let client = AnthropicClient::new("key")
///     .base_url(format!("{}/anthropic", recorder.url()))
///     .model("m");
/// let mut agent = Agent::builder(client).build()?;
/// let _events: Vec<_> = agent.run("hi").collect().await;
/// recorder.cassette()?.save("tests/cassettes/hello.json")?;
/// # Ok(()) }
/// ```
pub struct CassetteRecorder {
    server: Loopback,
    log: Arc<Mutex<Recording>>,
}

#[derive(Default)]
struct Recording {
    cassette: Cassette,
    too_large: Option<usize>,
}

impl fmt::Debug for CassetteRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassetteRecorder")
            .field("addr", &self.server.addr)
            .finish_non_exhaustive()
    }
}

impl CassetteRecorder {
    /// Starts a recorder on `127.0.0.1` with an ephemeral port, forwarding to `upstream`
    /// (`http://127.0.0.1:<port>`, no trailing slash).
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (a test environment problem).
    pub async fn start(upstream: impl Into<String>) -> CassetteRecorder {
        let upstream: Arc<str> = upstream.into().trim_end_matches('/').into();
        let log = Arc::new(Mutex::new(Recording::default()));
        // No pooled connections (a server that closes idle ones would fail the next
        // request) and no redirects (a recording shows what the client got).
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let shared = log.clone();
        let server = Loopback::start("CassetteRecorder", move |socket| {
            let (upstream, http, log) = (upstream.clone(), http.clone(), shared.clone());
            async move {
                let _ = forward(socket, &upstream, &http, &log).await;
            }
        })
        .await;
        CassetteRecorder { server, log }
    }

    /// The recorder's root URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// What was recorded so far; an error when a response went past
    /// [`MAX_RECORDED_BODY`].
    pub fn cassette(&self) -> Result<Cassette, CassetteError> {
        let log = lock(&self.log);
        match log.too_large {
            Some(request) => Err(CassetteError::TooLarge { request }),
            None => Ok(log.cassette.clone()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

async fn forward(
    mut socket: TcpStream,
    upstream: &str,
    http: &reqwest::Client,
    log: &Mutex<Recording>,
) -> std::io::Result<()> {
    let Some(request) = request_of(&mut socket).await else {
        return Ok(());
    };
    let method =
        reqwest::Method::from_bytes(request.method.as_bytes()).unwrap_or(reqwest::Method::POST);
    let mut outgoing = http
        .request(method, format!("{upstream}{}", request.path))
        .body(request.body.clone());
    for (name, value) in &request.headers {
        if !matches!(
            name.as_str(),
            "host" | "content-length" | "connection" | "accept-encoding" | "transfer-encoding"
        ) {
            outgoing = outgoing.header(name, value);
        }
    }
    let response = match outgoing.send().await {
        Ok(response) => response,
        Err(e) => {
            let body = json!({"error": {"type": "api_error", "message":
                format!("CassetteRecorder: the upstream {upstream} failed: {e}")}});
            return write_simple(
                &mut socket,
                502,
                "application/json",
                &[],
                body.to_string().as_bytes(),
            )
            .await;
        }
    };
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let content_type = header("content-type");
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| kept_header(name.as_str()))
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
        .collect();
    write_head(&mut socket, status, &content_type, &headers).await?;
    let index = {
        let mut log = lock(log);
        log.cassette.exchanges.push(CassetteExchange {
            path: request.path.clone(),
            request: serde_json::from_slice(&request.body).unwrap_or(Value::Null),
            status,
            content_type,
            headers,
            chunks: Vec::new(),
            broken_off: false,
        });
        log.cassette.exchanges.len() - 1
    };
    let mut size = 0usize;
    let mut body = response.bytes_stream();
    while let Some(piece) = body.next().await {
        let Ok(bytes) = piece else {
            // The upstream broke the body off: so does the recorder (no terminating chunk),
            // and the cassette keeps what came and says so.
            if let Some(exchange) = lock(log).cassette.exchanges.get_mut(index) {
                exchange.broken_off = true;
            }
            return Ok(());
        };
        if bytes.is_empty() {
            continue;
        }
        size += bytes.len();
        {
            let mut log = lock(log);
            if size > MAX_RECORDED_BODY {
                log.too_large.get_or_insert(index + 1);
            } else if let Some(exchange) = log.cassette.exchanges.get_mut(index) {
                exchange.chunks.push(bytes.to_vec());
            }
        }
        write_chunk(&mut socket, &bytes).await?;
    }
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await
}

async fn write_head(
    socket: &mut TcpStream,
    status: u16,
    content_type: &str,
    headers: &[(String, String)],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\
         connection: close\r\n",
        reason(status)
    );
    for (name, value) in headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await
}

/// A loopback server that replays a [`Cassette`]: no network, the same responses in the
/// same chunks, every request checked against the recorded one.
///
/// Point the client where it pointed when recording, with the player's
/// [`url`](CassettePlayer::url) for the recorder's. Request `n` is compared with exchange
/// `n`: its path, then its body, field by field ([`first_difference`]). A match gets the
/// recorded status, headers and chunks, one HTTP chunk each (so the client's decoder sees
/// the recorded boundaries); a mismatch gets a `400` whose message names the first differing
/// field, and so does a request past the cassette's end. [`check`](CassettePlayer::check)
/// then says what went wrong, or that every exchange was played.
///
/// ```no_run
/// use agent_loop::testing::{Cassette, CassettePlayer};
/// use agent_loop::{Agent, AnthropicClient};
/// use futures::StreamExt;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let player = CassettePlayer::start(Cassette::load("tests/cassettes/hello.json")?).await;
/// let client = AnthropicClient::new("key")
///     .base_url(format!("{}/anthropic", player.url()))
///     .model("m");
/// let mut agent = Agent::builder(client).build()?;
/// let _events: Vec<_> = agent.run("hi").collect().await;
/// player.check()?; // every request as recorded, every exchange played
/// # Ok(()) }
/// ```
pub struct CassettePlayer {
    server: Loopback,
    state: Arc<Mutex<Playing>>,
}

struct Playing {
    cassette: Cassette,
    played: usize,
    failure: Option<CassetteError>,
}

impl fmt::Debug for CassettePlayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassettePlayer")
            .field("addr", &self.server.addr)
            .finish_non_exhaustive()
    }
}

impl CassettePlayer {
    /// Starts a player of `cassette` on `127.0.0.1` with an ephemeral port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (a test environment problem).
    pub async fn start(cassette: Cassette) -> CassettePlayer {
        let state = Arc::new(Mutex::new(Playing {
            cassette,
            played: 0,
            failure: None,
        }));
        let shared = state.clone();
        let server = Loopback::start("CassettePlayer", move |socket| {
            let state = shared.clone();
            async move {
                let _ = play(socket, &state).await;
            }
        })
        .await;
        CassettePlayer { server, state }
    }

    /// The player's root URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// How many exchanges were played.
    pub fn played(&self) -> usize {
        lock(&self.state).played
    }

    /// `Ok` when every request matched its recorded one and every exchange was played;
    /// else the first failure ([`CassetteError::Mismatch`], [`CassetteError::Unrecorded`])
    /// or [`CassetteError::Unplayed`].
    pub fn check(&self) -> Result<(), CassetteError> {
        let mut state = lock(&self.state);
        if let Some(failure) = state.failure.take() {
            return Err(failure);
        }
        let recorded = state.cassette.exchanges.len();
        if state.played < recorded {
            return Err(CassetteError::Unplayed {
                played: state.played,
                recorded,
            });
        }
        Ok(())
    }
}

/// What a request gets: the exchange to play, or the failure to answer with.
fn judge(state: &mut Playing, request: &Request) -> Result<CassetteExchange, String> {
    let number = state.played + 1;
    let recorded = state.cassette.exchanges.len();
    let failure = match state.cassette.exchanges.get(state.played) {
        None => CassetteError::Unrecorded {
            request: number,
            recorded,
        },
        Some(exchange) if exchange.path != request.path => CassetteError::Mismatch {
            request: number,
            field: "path".to_owned(),
            recorded: Value::String(exchange.path.clone()).to_string(),
            sent: Value::String(request.path.clone()).to_string(),
        },
        Some(exchange) => {
            let sent: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            match first_difference(&exchange.request, &sent) {
                None => {
                    state.played += 1;
                    return Ok(exchange.clone());
                }
                Some((field, was, now)) => CassetteError::Mismatch {
                    request: number,
                    field,
                    recorded: preview(was.as_ref()),
                    sent: preview(now.as_ref()),
                },
            }
        }
    };
    let message = format!("CassettePlayer: {failure}");
    state.failure.get_or_insert(failure);
    Err(message)
}

async fn play(mut socket: TcpStream, state: &Mutex<Playing>) -> std::io::Result<()> {
    let Some(request) = request_of(&mut socket).await else {
        return Ok(());
    };
    let judged = judge(&mut lock(state), &request);
    let exchange = match judged {
        Ok(exchange) => exchange,
        Err(message) => {
            let body = json!({"error": {"type": "invalid_request_error", "message": message}});
            return write_simple(
                &mut socket,
                400,
                "application/json",
                &[("x-should-retry".to_owned(), "false".to_owned())],
                body.to_string().as_bytes(),
            )
            .await;
        }
    };
    write_head(
        &mut socket,
        exchange.status,
        &exchange.content_type,
        &exchange.headers,
    )
    .await?;
    for chunk in &exchange.chunks {
        write_chunk(&mut socket, chunk).await?;
    }
    if exchange.broken_off {
        // Dropped without the terminating chunk: the client's body read fails, as it did.
        return Ok(());
    }
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paths_name_keys_and_indexes() {
        let a = json!({"a b": 1, "x": [1, 2]});
        assert_eq!(
            first_difference(&a, &json!({"a b": 2, "x": [1, 2]})).map(|d| d.0),
            Some(r#"["a b"]"#.to_owned())
        );
        assert_eq!(
            first_difference(&a, &json!({"a b": 1, "x": [1]})).unwrap(),
            ("x[1]".to_owned(), Some(json!(2)), None)
        );
        assert_eq!(
            first_difference(&a, &json!({"a b": 1, "x": [1, 2], "y": true})).unwrap(),
            ("y".to_owned(), None, Some(json!(true)))
        );
        assert_eq!(
            first_difference(&json!(1), &json!("1")).map(|d| d.0),
            Some("$".to_owned())
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z _]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Walks `path` (as `first_difference` writes it) into `value`.
    fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
        if path == "$" {
            return Some(value);
        }
        let mut here = value;
        let mut rest = path;
        while !rest.is_empty() {
            rest = rest.strip_prefix('.').unwrap_or(rest);
            if let Some(tail) = rest.strip_prefix("[\"") {
                let end = tail.find("\"]")?;
                here = here.get(&tail[..end])?;
                rest = &tail[end + 2..];
            } else if let Some(tail) = rest.strip_prefix('[') {
                let end = tail.find(']')?;
                here = here.get(tail[..end].parse::<usize>().ok()?)?;
                rest = &tail[end + 1..];
            } else {
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                here = here.get(&rest[..end])?;
                rest = &rest[end..];
            }
        }
        Some(here)
    }

    proptest! {
        /// Equal values have no difference; a difference names a field whose values there
        /// are the ones reported, and they differ.
        #[test]
        fn the_difference_found_is_real(a in json_value(), b in json_value()) {
            prop_assert_eq!(first_difference(&a, &a.clone()), None);
            match first_difference(&a, &b) {
                None => prop_assert_eq!(&a, &b),
                Some((field, was, now)) => {
                    prop_assert_ne!(&a, &b);
                    prop_assert_eq!(at(&a, &field).cloned(), was.clone());
                    prop_assert_eq!(at(&b, &field).cloned(), now.clone());
                    prop_assert_ne!(was, now);
                }
            }
        }

        /// Any chunks, UTF-8 or not, come back from the file as they were.
        #[test]
        fn chunks_survive_the_file(chunks in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 1..12), 0..6)) {
            let cassette = Cassette { exchanges: vec![CassetteExchange {
                path: "/v1/messages".into(), request: json!({}), status: 200,
                content_type: "text/event-stream".into(), headers: vec![], chunks,
                broken_off: false,
            }]};
            prop_assert_eq!(Cassette::from_json(&cassette.to_json()).unwrap(), cassette);
        }
    }
}
