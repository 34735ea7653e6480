//! [`MockServer`]: a loopback HTTP/1.1 model server that speaks every wire format, with fault
//! injection: the accept loop, connection handling and the record of requests. What it
//! answers is [`MockResponse`]'s business (`response.rs`); the history it checks is decoded by
//! each provider's request module.
//!
//! Built directly on a tokio `TcpListener`: the request line, headers and `Content-Length`
//! body are parsed with strict bounds; streamed answers use `Transfer-Encoding: chunked`, so a
//! connection dropped mid-body is a real body error for the client.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::provider;
use crate::provider::mock::{compact_on_server, media_checks, tool_schemas, Rejection, Route};
use crate::provider::transport::PacingLimits;
use crate::wire::WireFormat;

use super::rate_limit::MockLimit;
use super::response::{BodyEnd, MockResponse, Reply};

/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 << 10;
/// The largest request body accepted; larger ones get `413`.
const MAX_BODY: usize = 32 << 20;

/// One request the [`MockServer`] received.
#[non_exhaustive]
///
/// Its `Debug` output redacts credentials (`authorization`, `x-api-key`, `api-key`, …), so a
/// failing assertion never prints a key; [`RecordedRequest::header`] still returns them for
/// tests that check what was sent.
#[derive(Clone, PartialEq)]
pub struct RecordedRequest {
    /// The method (`POST`).
    pub method: String,
    /// The path, with the query.
    pub path: String,
    /// The headers in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
    /// The wire format the path selected, if any.
    pub format: Option<WireFormat>,
}

/// Whether a header carries a credential.
fn is_secret_header(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "authorization"
            | "proxy-authorization"
            | "x-api-key"
            | "api-key"
            | "x-goog-api-key"
            | "x-amz-security-token"
    )
}

impl fmt::Debug for RecordedRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if is_secret_header(name) {
                    "[redacted]"
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("RecordedRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("headers", &headers)
            .field("body", &self.body)
            .field("format", &self.format)
            .finish()
    }
}

impl RecordedRequest {
    /// The first value of the header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The per-request answerer of [`MockServer::respond_with`].
type Responder = Arc<dyn Fn(&RecordedRequest) -> Option<MockResponse> + Send + Sync>;

#[derive(Default)]
struct ServerState {
    responder: Option<Responder>,
    script: VecDeque<MockResponse>,
    requests: Vec<RecordedRequest>,
    violations: Vec<String>,
    connections: usize,
    limit: Option<MockLimit>,
}

impl fmt::Debug for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerState")
            .field("responder", &self.responder.as_ref().map(|_| "Fn"))
            .field("script", &self.script)
            .field("requests", &self.requests)
            .field("violations", &self.violations)
            .field("connections", &self.connections)
            .field("limit", &self.limit)
            .finish()
    }
}

impl ServerState {
    /// The answer to the request just recorded: the responder's, else the script's next.
    fn next_answer(&mut self, number: usize) -> MockResponse {
        let own = match (&self.responder, self.requests.last()) {
            (Some(responder), Some(request)) => responder(request),
            _ => None,
        };
        own.or_else(|| self.script.pop_front())
            .unwrap_or_else(|| script_ran_out(number))
    }
}

/// A loopback HTTP/1.1 model server for tests, serving every wire format from one script.
///
/// `POST` to any path ending in `/v1/messages` is answered in Anthropic SSE, to any path
/// ending in `/chat/completions` in OpenAI Chat Completions SSE, to any path ending in
/// `/responses` in OpenAI Responses SSE (likewise Gemini's `…/models/{model}:streamGenerateContent`,
/// Bedrock's `…/model/{id}/converse-stream` and Ollama's `…/api/chat`), each with the next
/// scripted [`MockResponse`]. `POST …/responses/compact` is answered as OpenAI's compaction
/// endpoint answers, without the script: the user messages of `input`, then a `compaction`
/// item (`encrypted_content` `mock-compaction-{n}`, `n` the request's number). A prefix before the API's path is allowed (a gateway's, or the
/// mock's own `/anthropic`), but a path the real API would not serve there is answered `404`
/// in the format's error shape, naming the path, without using the script: the API's path
/// twice or nested (`/v1/v1/messages`, `/v1beta/v1beta/models/…`, from a base URL that already
/// holds it), an empty segment, an unknown API version or Gemini method. Every request is recorded ([`MockServer::requests`]) and its history
/// checked ([`MockServer::history_violations`]). What the real API refuses is answered `400`
/// (`invalid_request_error`) without using the script: a history that breaks the invariant
/// (a `tool_use` without its result, a repeated or empty tool-call id, …; see
/// [`history_violation`](super::history_violation)), tool schemas the real API refuses
/// (Anthropic: a top-level `oneOf`/`anyOf`/`allOf` or a non-object `input_schema`; OpenAI:
/// non-object `parameters`), and media it refuses. When the script runs out the server answers `500` with
/// `x-should-retry: false` and a message saying so. The server stops when dropped.
///
/// ```no_run
/// use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
/// use agent_loop::AnthropicClient;
///
/// # async fn demo() {
/// let server = MockServer::start().await;
/// server.push(MockResponse::status(529).retry_after(1));
/// server.push(ScriptedResponse::text("hello"));
/// let client = AnthropicClient::new("test-key").base_url(server.anthropic_base_url()).model("m");
/// // … stream a request, then:
/// assert_eq!(server.requests().len(), 2);
/// # }
/// ```
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<Mutex<ServerState>>,
    shutdown: CancellationToken,
}

impl fmt::Debug for MockServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl MockServer {
    /// Starts a server on `127.0.0.1` with an ephemeral port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (a test environment problem).
    pub async fn start() -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("MockServer: cannot bind a loopback port");
        let addr = listener
            .local_addr()
            .expect("MockServer: the listener has no local address");
        let state = Arc::new(Mutex::new(ServerState::default()));
        let shutdown = CancellationToken::new();
        tokio::spawn(accept_loop(listener, state.clone(), shutdown.clone()));
        MockServer {
            addr,
            state,
            shutdown,
        }
    }

    /// The server's root URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for an [`AnthropicClient`](crate::AnthropicClient):
    /// `http://127.0.0.1:<port>/anthropic`.
    pub fn anthropic_base_url(&self) -> String {
        format!("{}/anthropic", self.url())
    }

    /// The base URL for an [`OpenAiClient`](crate::OpenAiClient): `http://127.0.0.1:<port>/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// Appends an answer to the script.
    pub fn push(&self, response: impl Into<MockResponse>) {
        self.lock().script.push_back(response.into());
    }

    /// Answers each model request with `responder`'s answer, computed from the request
    /// itself, before the script: when it gives `None`, the script's next answer is used.
    /// For many conversations at once (concurrent sessions, say), where a queue cannot tell
    /// which request comes first. It replaces an earlier responder; the request it sees is
    /// already recorded, and what the real API refuses (see [`MockServer`]) is still answered
    /// `400` without asking it. It runs under the server's lock, so it must not call the
    /// server.
    ///
    /// ```no_run
    /// use agent_loop::testing::{MockServer, ScriptedResponse};
    ///
    /// # async fn demo() {
    /// let server = MockServer::start().await;
    /// server.respond_with(|request| {
    ///     let question = request.body["messages"][0]["content"].to_string();
    ///     question
    ///         .contains("weather")
    ///         .then(|| ScriptedResponse::text("sunny").into())
    /// });
    /// # }
    /// ```
    pub fn respond_with(
        &self,
        responder: impl Fn(&RecordedRequest) -> Option<MockResponse> + Send + Sync + 'static,
    ) {
        self.lock().responder = Some(Arc::new(responder));
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// How many scripted answers have not been served yet.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    /// How many TCP connections clients have opened to the server so far. Streamed answers
    /// that end cleanly keep their connection open for the next request (HTTP/1.1
    /// keep-alive), so a client that reuses its connections opens one for many requests.
    pub fn connections(&self) -> usize {
        self.lock().connections
    }

    /// The history-invariant violations found in received requests (empty when every
    /// history was valid).
    pub fn history_violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Enforces a rate limit from now on, as the real APIs do: requests and tokens per
    /// period in a token bucket (full at first, refilled continuously). A model request
    /// counts its `max_tokens` plus a quarter of the bytes of its conversation. Every answer
    /// carries the provider's rate-limit headers (Anthropic's `anthropic-ratelimit-*` with a
    /// `date`, OpenAI's `x-ratelimit-*`); a request over the limit is answered `429` with the
    /// provider's error body, those headers and `retry-after` (OpenAI: `retry-after-ms`
    /// too), and does not use the script. Counted on tokio's clock.
    ///
    /// ```no_run
    /// use agent_loop::testing::MockServer;
    /// use agent_loop::provider::transport::PacingLimits;
    /// use std::time::Duration;
    ///
    /// # async fn demo() {
    /// let server = MockServer::start().await;
    /// server.rate_limit(PacingLimits::per(Duration::from_secs(1)).requests(5).tokens(10_000));
    /// // … run agents against it, then:
    /// assert_eq!(server.rate_limited(), 0);
    /// # }
    /// ```
    pub fn rate_limit(&self, limits: PacingLimits) {
        self.lock().limit = Some(MockLimit::new(limits));
    }

    /// How many requests were answered `429` for going over the
    /// [rate limit](MockServer::rate_limit).
    pub fn rate_limited(&self) -> usize {
        self.lock().limit.as_ref().map_or(0, |l| l.refused)
    }

    fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<Mutex<ServerState>>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((socket, _)) = accepted else { continue };
        state.lock().unwrap_or_else(|e| e.into_inner()).connections += 1;
        let state = state.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = serve(socket, state) => {}
            }
        });
    }
}

/// A parsed request.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

/// Why a request could not be read.
pub(super) enum ReadError {
    /// The peer went away or sent garbage: just close.
    Closed,
    /// Answer with this status and message, then close.
    Reply(u16, &'static str),
}

pub(super) async fn read_request(socket: &mut TcpStream) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(pos) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD {
            return Err(ReadError::Reply(431, "request head too large"));
        }
        let mut chunk = [0u8; 8192];
        let n = socket
            .read(&mut chunk)
            .await
            .map_err(|_| ReadError::Closed)?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    };
    let head = std::str::from_utf8(buf.get(..head_end).unwrap_or_default())
        .map_err(|_| ReadError::Reply(400, "request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Reply(400, "malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(ReadError::Reply(505, "only HTTP/1.x is supported"));
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(ReadError::Reply(400, "malformed header line"));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if header("transfer-encoding").is_some() {
        return Err(ReadError::Reply(
            411,
            "chunked request bodies are not supported",
        ));
    }
    let length = match header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| ReadError::Reply(400, "invalid content-length"))?,
    };
    if length > MAX_BODY {
        return Err(ReadError::Reply(413, "request body too large"));
    }
    let mut body = buf.get(head_end + 4..).unwrap_or_default().to_vec();
    if body.len() > length {
        body.truncate(length);
    }
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(64 << 10)];
        let n = socket
            .read(&mut chunk)
            .await
            .map_err(|_| ReadError::Closed)?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        body.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body,
    })
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<ServerState>>) {
    let _ = socket.set_nodelay(true);
    while serve_one(&mut socket, &state).await {}
}

/// Answers one request; true when the connection stays open for another.
async fn serve_one(socket: &mut TcpStream, state: &Mutex<ServerState>) -> bool {
    let request = match read_request(socket).await {
        Ok(request) => request,
        Err(ReadError::Closed) => return false,
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
            return false;
        }
    };
    let route = request.path.split('?').next().unwrap_or_default();
    if let Some(served) = compact_on_server::route(route) {
        return serve_compact(socket, state, request, served).await;
    }
    let endpoint = endpoint(route);
    // A path that names a format's endpoint but that the real API does not serve (a base URL
    // with the API's own path in it, say): a 404 in that format's error shape.
    let unserved = endpoint
        .filter(|(_, served)| !served)
        .map(|(format, _)| format);
    let format = endpoint
        .filter(|(_, served)| *served)
        .map(|(format, _)| format);
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let model = format.and_then(|format| provider::of(format).mock().requested_model(route, &body));
    let response = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let number = state.requests.len() + 1;
        let violation = format
            .and_then(|format| provider::of(format).mock().history(&body))
            .and_then(|history| super::history_violation(&history));
        if let Some(violation) = &violation {
            state
                .violations
                .push(format!("request #{number}: {violation}"));
        }
        // What the real API refuses gets its 400 (a history it would refuse, a tool schema,
        // a media block); the script is not consumed.
        let refused = format
            .filter(|_| request.method == "POST")
            .and_then(|format| {
                violation
                    .map(|violation| Rejection {
                        error_type: "invalid_request_error",
                        code: None,
                        message: format!(
                            "MockServer: the provider refuses this history: {violation}"
                        ),
                    })
                    .or_else(|| tool_schemas::rejection(format, &body))
                    .or_else(|| media_checks::rejection(format, &body))
                    .or_else(|| provider::of(format).mock().refusal(&body, &request.headers))
            });
        // Under a rate limit, a model request the API would take is counted against it.
        let admission = match (state.limit.as_mut(), format, request.method.as_str()) {
            (Some(limit), Some(format), "POST") if refused.is_none() => {
                Some(limit.admit(format, &body))
            }
            _ => None,
        };
        state.requests.push(RecordedRequest {
            method: request.method.clone(),
            path: request.path.clone(),
            headers: request.headers.clone(),
            body,
            format,
        });
        if let Some(refused) = refused {
            let mut response = MockResponse::status(400)
                .error_type(refused.error_type)
                .error_message(refused.message);
            if let Some(code) = refused.code {
                response = response.error_code(code);
            }
            Some(response)
        } else if let Some(admission) = admission {
            // Over the limit: the 429, the script not consumed; else the script's next
            // answer, with the figures.
            Some(match admission {
                Err(refusal) => *refusal,
                Ok(headers) => headers
                    .into_iter()
                    .fold(state.next_answer(number), |response, (name, value)| {
                        response.header(name, value)
                    }),
            })
        } else if format.is_some() && request.method == "POST" {
            Some(state.next_answer(number))
        } else {
            None
        }
    };
    if let Some(format) = unserved {
        let response = MockResponse::status(404)
            .error_type(provider::of(format).mock().not_found_type())
            .error_message(format!(
                "MockServer: {} {} is not a path the real API serves (is the API's own path \
                 in the base URL too?)",
                request.method, request.path
            ));
        let _ = answer(socket, response.into_reply(format)).await;
        return false;
    }
    let (Some(format), Some(response)) = (format, response) else {
        let body = json!({"error": {"type": "not_found_error",
                                    "message": format!("MockServer: no route for {} {}", request.method, request.path)}});
        let _ = write_simple(
            socket,
            404,
            "application/json",
            &[],
            body.to_string().as_bytes(),
        )
        .await;
        return false;
    };
    // HTTP/1.1: a client that says `connection: close` gets the connection closed.
    let client_closes = request
        .headers
        .iter()
        .any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close"));
    let reusable = answer(socket, response.answering_for(model).into_reply(format))
        .await
        .unwrap_or(false);
    if reusable && client_closes {
        let _ = socket.shutdown().await;
        return false;
    }
    reusable
}

/// `POST {prefix}/responses/compact`, answered by `provider/mock/compact_on_server.rs` (not from the script);
/// recorded like every request, with no format.
async fn serve_compact(
    socket: &mut TcpStream,
    state: &Mutex<ServerState>,
    request: Request,
    served: bool,
) -> bool {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let (status, reply) = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let number = state.requests.len() + 1;
        let violation = provider::of(WireFormat::OpenAiResponses)
            .mock()
            .history(&body)
            .and_then(|history| super::history_violation(&history));
        if let Some(violation) = &violation {
            state
                .violations
                .push(format!("request #{number}: {violation}"));
        }
        let reply = if served {
            compact_on_server::answer(&request.method, &body, violation, number)
        } else {
            (
                404,
                json!({"error": {"type": "invalid_request_error", "message": format!(
                    "MockServer: {} {} is not a path the real API serves (is the API's own \
                     path in the base URL too?)", request.method, request.path)}}),
            )
        };
        state.requests.push(RecordedRequest {
            method: request.method,
            path: request.path,
            headers: request.headers,
            body,
            format: None,
        });
        reply
    };
    let _ = write_simple(
        socket,
        status,
        "application/json",
        &[],
        reply.to_string().as_bytes(),
    )
    .await;
    false
}

/// The wire format whose endpoint `route` (a path without its query) names, and whether the
/// real API serves it there (each format's `MockFormat::route`).
fn endpoint(route: &str) -> Option<(WireFormat, bool)> {
    let route = Route::new(route);
    provider::ALL
        .into_iter()
        .find_map(|f| Some((f, provider::of(f).mock().route(&route)?)))
}

/// The answer when the script has none left: a 500 that says so, not to be retried.
fn script_ran_out(number: usize) -> MockResponse {
    MockResponse::status(500)
        .error_message(format!(
            "MockServer: the script ran out: request #{number} has no scripted response; push \
             more"
        ))
        .should_retry(false)
}

pub(super) async fn write_simple(
    socket: &mut TcpStream,
    status: u16,
    content_type: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        reason(status),
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await?;
    socket.flush().await?;
    let _ = socket.shutdown().await;
    Ok(())
}

pub(super) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Waits until the peer closes the connection (or forever, until the server stops).
async fn hold_open(socket: &mut TcpStream) {
    let mut scratch = [0u8; 1024];
    loop {
        match socket.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

pub(super) async fn write_chunk(socket: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut frame = format!("{:x}\r\n", data.len()).into_bytes();
    frame.extend_from_slice(data);
    frame.extend_from_slice(b"\r\n");
    socket.write_all(&frame).await?;
    socket.flush().await
}

/// Writes `reply`; `Ok(true)` when the connection can take another request.
async fn answer(socket: &mut TcpStream, reply: Reply) -> std::io::Result<bool> {
    let stream = match reply {
        Reply::Close => return Ok(false),
        Reply::Silence => {
            hold_open(socket).await;
            return Ok(false);
        }
        Reply::Whole {
            status,
            content_type,
            headers,
            body,
        } => {
            write_simple(socket, status, &content_type, &headers, &body).await?;
            return Ok(false);
        }
        Reply::Stream(stream) => stream,
    };
    // A body that ends cleanly leaves the connection open for the next request.
    let keep_alive = stream.end == BodyEnd::Terminator;

    let mut head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncache-control: no-cache\r\n\
         transfer-encoding: chunked\r\nrequest-id: req_mock\r\n",
        stream.content_type
    );
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    for (name, value) in &stream.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;

    for (i, piece) in stream.pieces.iter().enumerate() {
        let pieces: Vec<&[u8]> = match stream.chunk_size {
            Some(n) => piece.chunks(n).collect(),
            None => vec![piece.as_slice()],
        };
        for (j, bytes) in pieces.into_iter().enumerate() {
            if let Some(delay) = stream.chunk_delay {
                if i + j > 0 {
                    tokio::time::sleep(delay).await;
                }
            }
            write_chunk(socket, bytes).await?;
        }
    }
    match stream.end {
        BodyEnd::Terminator => {
            if let Some(delay) = stream.terminator_delay {
                tokio::time::sleep(delay).await;
            }
            socket.write_all(b"0\r\n\r\n").await?;
            socket.flush().await?;
        }
        BodyEnd::Disconnect => {
            // Dropping the socket without the terminating chunk: the client's body read fails.
        }
        BodyEnd::LastEvent(event) => {
            write_chunk(socket, &event).await?;
            socket.write_all(b"0\r\n\r\n").await?;
            socket.flush().await?;
            let _ = socket.shutdown().await;
        }
        BodyEnd::Stall => hold_open(socket).await,
        BodyEnd::KeepAlive { every, ping } => loop {
            tokio::time::sleep(every).await;
            write_chunk(socket, &ping).await?;
        },
    }
    Ok(keep_alive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedResponse;

    /// Posts an Anthropic request with one user message; the raw answer.
    async fn ask(server: &MockServer, text: &str) -> String {
        let body = json!({"model": "m", "max_tokens": 16, "stream": true,
                          "messages": [{"role": "user", "content": text}]})
        .to_string();
        let mut socket = TcpStream::connect(server.addr).await.expect("connect");
        let head = format!(
            "POST /anthropic/v1/messages HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.expect("write");
        socket.write_all(body.as_bytes()).await.expect("write");
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.expect("read");
        answer
    }

    #[tokio::test]
    async fn the_responder_answers_first_and_none_falls_back_to_the_script() {
        let server = MockServer::start().await;
        server.push(ScriptedResponse::text("from the script"));
        server.respond_with(|request| {
            let text = request.body["messages"][0]["content"].as_str()?;
            let n = text.strip_prefix("question ")?;
            Some(ScriptedResponse::text(format!("answer {n}")).into())
        });
        assert!(ask(&server, "question 7").await.contains("answer 7"));
        assert!(ask(&server, "question 3").await.contains("answer 3"));
        assert_eq!(server.remaining(), 1, "the responder answered");
        assert!(ask(&server, "hello").await.contains("from the script"));
        assert_eq!(server.remaining(), 0);
        assert!(ask(&server, "hello").await.contains("script ran out"));
        assert_eq!(server.requests().len(), 4);
    }
}
