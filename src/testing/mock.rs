//! [`MockServer`]: a loopback HTTP/1.1 model server that speaks both wire formats, with fault
//! injection.
//!
//! Built directly on a tokio `TcpListener`: the request line, headers and `Content-Length`
//! body are parsed with strict bounds; streamed answers use `Transfer-Encoding: chunked`, so a
//! connection dropped mid-body is a real body error for the client.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::error::LlmError;
use crate::message::{ContentBlock, Message, Role};
use crate::provider::WireFormat;

use super::scripted::{Ending, ScriptedResponse};
use super::sse::{self, Segment, SegmentKind, Tail};
use super::tool_schemas;

/// The largest request head (request line and headers) accepted.
const MAX_HEAD: usize = 64 << 10;
/// The largest request body accepted; larger ones get `413`.
const MAX_BODY: usize = 32 << 20;

/// Where in a streamed response an [`Interruption`] happens.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamPoint {
    /// After the preamble (`message_start` / the role chunk), before any content event.
    BeforeContent,
    /// Right after the first content event.
    AfterFirstContent,
    /// After all content, before the end-of-message marker.
    BeforeEnd,
    /// After this many bytes of the body.
    AfterBytes(usize),
}

/// What happens to a streamed response at a [`StreamPoint`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum Interruption {
    /// The connection is closed without ending the chunked body (a transport error).
    Disconnect,
    /// The body ends cleanly here, without the end-of-message marker (a truncated stream).
    End,
    /// Nothing more is sent and the connection stays open, with a keep-alive (Anthropic
    /// `event: ping`, OpenAI `: keep-alive`) every `keep_alive` when set.
    Stall {
        /// The interval of keep-alives, if any.
        keep_alive: Option<Duration>,
    },
    /// An in-stream `error` event in the provider's shape, then the body ends.
    ErrorEvent {
        /// The provider error type (for example `overloaded_error`).
        error_type: String,
        /// The message.
        message: String,
    },
}

/// One scripted answer of the [`MockServer`]: a streamed [`ScriptedResponse`] (optionally
/// chunked, delayed or interrupted), an error status, raw bytes, or silence.
///
/// A `ScriptedResponse` converts into a `MockResponse` (`server.push(ScriptedResponse::text("hi"))`).
/// Its failures map to the wire like this: [`ScriptedResponse::error`] with an
/// [`LlmError::Api`] or [`LlmError::ContextOverflow`] answers with that status, headers
/// (`retry-after[-ms]`, `x-should-retry`, `request-id`) and a provider-shaped error body, with
/// [`LlmError::Connect`] closes the connection without answering, with
/// [`LlmError::Timeout`] never sends headers; mid-stream (`then_fail`),
/// [`LlmError::Incomplete`] truncates the body, [`LlmError::Transport`] disconnects,
/// [`LlmError::Timeout`] stalls, [`LlmError::Malformed`] sends invalid JSON, and the others
/// send an in-stream error event.
#[derive(Debug, Clone)]
pub struct MockResponse {
    kind: Kind,
    headers: Vec<(String, String)>,
    chunk_size: Option<usize>,
    chunk_delay: Option<Duration>,
    terminator_delay: Option<Duration>,
    interrupt: Option<(StreamPoint, Interruption)>,
}

#[derive(Debug, Clone)]
enum Kind {
    Stream(ScriptedResponse),
    Status {
        status: u16,
        error_type: String,
        message: String,
        code: Option<String>,
    },
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// The scripted response as one whole JSON message (`content-type: application/json`).
    Json(ScriptedResponse),
    NoHeaders,
    Close,
}

impl From<ScriptedResponse> for MockResponse {
    fn from(response: ScriptedResponse) -> Self {
        MockResponse::stream(response)
    }
}

impl MockResponse {
    fn new(kind: Kind) -> Self {
        MockResponse {
            kind,
            headers: Vec::new(),
            chunk_size: None,
            chunk_delay: None,
            terminator_delay: None,
            interrupt: None,
        }
    }

    /// Streams `response` in the requesting client's wire format.
    pub fn stream(response: ScriptedResponse) -> Self {
        if response.preamble || response.ending == Ending::Raw {
            return MockResponse::new(Kind::Stream(response));
        }
        // ScriptedResponse::error: an immediate failure.
        let Ending::Fail(error) = &response.ending else {
            return MockResponse::new(Kind::Stream(response));
        };
        match error {
            LlmError::Api(api) | LlmError::ContextOverflow(api) => {
                let mut mock = MockResponse::status(api.status).error_message(api.message.clone());
                if let Some(t) = &api.error_type {
                    mock = mock.error_type(t.clone());
                }
                if let Some(c) = &api.code {
                    mock = mock.error_code(c.clone());
                }
                if let Some(delay) = api.retry_after {
                    mock = if delay.subsec_nanos() == 0 {
                        mock.retry_after(delay.as_secs())
                    } else {
                        mock.retry_after_ms(delay.as_millis().min(u64::MAX as u128) as u64)
                    };
                }
                if let Some(verdict) = api.should_retry {
                    mock = mock.should_retry(verdict);
                }
                if let Some(id) = &api.request_id {
                    mock = mock.header("request-id", id.clone());
                }
                mock
            }
            LlmError::Connect { .. } => MockResponse::new(Kind::Close),
            LlmError::Timeout { .. } => MockResponse::no_headers(),
            _ => MockResponse::new(Kind::Stream(response)),
        }
    }

    /// Answers with this error status and an error body in the provider's shape (Anthropic
    /// `{"type":"error","error":{"type","message"}}`, OpenAI
    /// `{"error":{"message","type","code"}}`). The error type defaults from the status
    /// (`rate_limit_error` for 429, `overloaded_error` for 529 …).
    pub fn status(status: u16) -> Self {
        let error_type = match status {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "error",
        };
        MockResponse::new(Kind::Status {
            status,
            error_type: error_type.to_owned(),
            message: format!("mock error {status}"),
            code: None,
        })
    }

    /// Answers with this status, content type and body, as they are.
    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        MockResponse::new(Kind::Raw {
            status,
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// Answers with `response` as one whole, non-streamed JSON message in the provider's shape
    /// (Anthropic `{"type":"message", …}`, OpenAI `{"object":"chat.completion", …}`) with
    /// `content-type: application/json`, as some proxies answer a streaming request (LiteLLM
    /// for its mock models, servers whose upstream does not stream). A scripted failure
    /// answers `500`.
    pub fn json(response: ScriptedResponse) -> Self {
        MockResponse::new(Kind::Json(response))
    }

    /// Redirects with `status` (301, 302, 303, 307 or 308) to `location`, as a load balancer
    /// or a moved endpoint does.
    pub fn redirect(status: u16, location: impl Into<String>) -> Self {
        MockResponse::raw(status, "text/plain", Vec::new()).header("location", location)
    }

    /// Reads the request and never answers (not even headers); the connection stays open.
    pub fn no_headers() -> Self {
        MockResponse::new(Kind::NoHeaders)
    }

    /// Reads the request and closes the connection without answering.
    pub fn close() -> Self {
        MockResponse::new(Kind::Close)
    }

    /// Sets the provider error type of a [`MockResponse::status`] answer.
    pub fn error_type(mut self, error_type: impl Into<String>) -> Self {
        if let Kind::Status { error_type: t, .. } = &mut self.kind {
            *t = error_type.into();
        }
        self
    }

    /// Sets the message of a [`MockResponse::status`] answer.
    pub fn error_message(mut self, message: impl Into<String>) -> Self {
        if let Kind::Status { message: m, .. } = &mut self.kind {
            *m = message.into();
        }
        self
    }

    /// Sets the OpenAI `code` of a [`MockResponse::status`] answer (for example
    /// `insufficient_quota` or `context_length_exceeded`).
    pub fn error_code(mut self, code: impl Into<String>) -> Self {
        if let Kind::Status { code: c, .. } = &mut self.kind {
            *c = Some(code.into());
        }
        self
    }

    /// Adds a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds `retry-after: <seconds>`.
    pub fn retry_after(self, seconds: u64) -> Self {
        self.header("retry-after", seconds.to_string())
    }

    /// Adds `retry-after-ms: <milliseconds>`.
    pub fn retry_after_ms(self, milliseconds: u64) -> Self {
        self.header("retry-after-ms", milliseconds.to_string())
    }

    /// Adds `x-should-retry: true|false`.
    pub fn should_retry(self, verdict: bool) -> Self {
        self.header("x-should-retry", verdict.to_string())
    }

    /// Sends the body in HTTP chunks of at most `bytes` bytes (default: one chunk per SSE
    /// event); 1 sends every byte on its own.
    pub fn chunk_size(mut self, bytes: u32) -> Self {
        self.chunk_size = Some((bytes as usize).max(1));
        self
    }

    /// Waits `delay` between HTTP chunks (the server uses `tokio::time`).
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Waits `delay` after the last event before the chunked body's terminator, as real
    /// servers do (the terminator of a streamed body often arrives a few milliseconds after
    /// the end-of-message event). A client that stops reading at the end-of-message event and
    /// drops the body loses the connection; one that reads on to the terminator keeps it.
    pub fn terminator_delay(mut self, delay: Duration) -> Self {
        self.terminator_delay = Some(delay);
        self
    }

    /// Interrupts the stream at `point` with `interruption`.
    pub fn interrupt(mut self, point: StreamPoint, interruption: Interruption) -> Self {
        self.interrupt = Some((point, interruption));
        self
    }

    /// Drops the connection after `bytes` bytes of the body.
    pub fn disconnect_after_bytes(self, bytes: usize) -> Self {
        self.interrupt(StreamPoint::AfterBytes(bytes), Interruption::Disconnect)
    }

    /// Drops the connection right after the first content event.
    pub fn disconnect_after_first_content(self) -> Self {
        self.interrupt(StreamPoint::AfterFirstContent, Interruption::Disconnect)
    }

    /// Drops the connection before any content event.
    pub fn disconnect_before_content(self) -> Self {
        self.interrupt(StreamPoint::BeforeContent, Interruption::Disconnect)
    }

    /// Stops sending at `point` and keeps the connection open, with keep-alives every
    /// `keep_alive` when set.
    pub fn stall_at(self, point: StreamPoint, keep_alive: Option<Duration>) -> Self {
        self.interrupt(point, Interruption::Stall { keep_alive })
    }

    /// Sends an in-stream error event (for example `overloaded_error`) at `point`.
    pub fn error_event_at(
        self,
        point: StreamPoint,
        error_type: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        self.interrupt(
            point,
            Interruption::ErrorEvent {
                error_type: error_type.into(),
                message: message.into(),
            },
        )
    }

    /// Ends the body cleanly after the content, without the end-of-message marker.
    pub fn truncated(self) -> Self {
        self.interrupt(StreamPoint::BeforeEnd, Interruption::End)
    }
}

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
        "authorization" | "proxy-authorization" | "x-api-key" | "api-key" | "x-goog-api-key"
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

#[derive(Debug, Default)]
struct ServerState {
    script: VecDeque<MockResponse>,
    requests: Vec<RecordedRequest>,
    violations: Vec<String>,
    connections: usize,
}

/// A loopback HTTP/1.1 model server for tests, serving both wire formats from one script.
///
/// `POST` to any path ending in `/v1/messages` is answered in Anthropic SSE, to any path
/// ending in `/chat/completions` in OpenAI SSE, each with the next scripted
/// [`MockResponse`]. Every request is recorded ([`MockServer::requests`]) and its history
/// checked ([`MockServer::history_violations`]). A request whose tool schemas the real API
/// refuses (Anthropic: a top-level `oneOf`/`anyOf`/`allOf` or a non-object `input_schema`;
/// OpenAI: non-object `parameters`) is answered `400` with the provider's message, without
/// using the script. When the script runs out the server answers `500` with
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
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Why a request could not be read.
enum ReadError {
    /// The peer went away or sent garbage: just close.
    Closed,
    /// Answer with this status and message, then close.
    Reply(u16, &'static str),
}

async fn read_request(socket: &mut TcpStream) -> Result<Request, ReadError> {
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
    let format = if route.ends_with("/v1/messages") {
        Some(WireFormat::Anthropic)
    } else if route.ends_with("/chat/completions") {
        Some(WireFormat::OpenAiChat)
    } else {
        None
    };
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let response = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let number = state.requests.len() + 1;
        if let Some(format) = format {
            if let Some(violation) = wire_history_violation(format, &body) {
                state
                    .violations
                    .push(format!("request #{number}: {violation}"));
            }
        }
        // A tool schema the real API refuses gets its 400; the script is not consumed.
        let refused = format
            .filter(|_| request.method == "POST")
            .and_then(|format| tool_schemas::rejection(format, &body));
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
        } else if format.is_some() && request.method == "POST" {
            Some(state.script.pop_front().unwrap_or_else(|| {
                MockResponse::status(500)
                    .error_message(format!(
                        "MockServer: the script ran out: request #{number} has no scripted \
                         response; push more"
                    ))
                    .should_retry(false)
            }))
        } else {
            None
        }
    };
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
    let reusable = answer(socket, format, response).await.unwrap_or(false);
    if reusable && client_closes {
        let _ = socket.shutdown().await;
        return false;
    }
    reusable
}

async fn write_simple(
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

fn reason(status: u16) -> &'static str {
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

async fn write_chunk(socket: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut frame = format!("{:x}\r\n", data.len()).into_bytes();
    frame.extend_from_slice(data);
    frame.extend_from_slice(b"\r\n");
    socket.write_all(&frame).await?;
    socket.flush().await
}

/// Answers with `response`; `Ok(true)` when the connection can take another request.
async fn answer(
    socket: &mut TcpStream,
    format: WireFormat,
    response: MockResponse,
) -> std::io::Result<bool> {
    let MockResponse {
        kind,
        headers,
        chunk_size,
        chunk_delay,
        terminator_delay,
        interrupt,
    } = response;
    let scripted = match kind {
        Kind::Close => return Ok(false),
        Kind::NoHeaders => {
            hold_open(socket).await;
            return Ok(false);
        }
        Kind::Raw {
            status,
            content_type,
            body,
        } => {
            write_simple(socket, status, &content_type, &headers, &body).await?;
            return Ok(false);
        }
        Kind::Json(scripted) => {
            let (status, body) = match super::whole::encode(format, &scripted) {
                Some(body) => (200, body),
                None => (
                    500,
                    json!({"error": {"type": "api_error",
                                      "message": "MockServer: a scripted failure has no whole-JSON form"}}),
                ),
            };
            write_simple(
                socket,
                status,
                "application/json",
                &headers,
                body.to_string().as_bytes(),
            )
            .await?;
            return Ok(false);
        }
        Kind::Status {
            status,
            error_type,
            message,
            code,
        } => {
            let body = match format {
                WireFormat::Anthropic => {
                    json!({"type": "error", "error": {"type": error_type, "message": message}})
                }
                _ => json!({"error": {"message": message, "type": error_type, "code": code,
                                       "param": null}}),
            };
            let mut headers = headers;
            if !headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("request-id"))
            {
                headers.push(("request-id".to_owned(), "req_mock".to_owned()));
            }
            write_simple(
                socket,
                status,
                "application/json",
                &headers,
                body.to_string().as_bytes(),
            )
            .await?;
            return Ok(false);
        }
        Kind::Stream(scripted) => scripted,
    };
    let (segments, tail) = sse::encode(format, &scripted);
    let (body, tail) = plan(format, &segments, tail, interrupt);
    // A body that ends cleanly leaves the connection open for the next request.
    let keep_alive = tail == Interruption::End;

    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
         transfer-encoding: chunked\r\nrequest-id: req_mock\r\n",
    );
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    for (name, value) in &headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;

    for (i, piece) in body.iter().enumerate() {
        let pieces: Vec<&[u8]> = match chunk_size {
            Some(n) => piece.chunks(n).collect(),
            None => vec![piece.as_slice()],
        };
        for (j, bytes) in pieces.into_iter().enumerate() {
            if let Some(delay) = chunk_delay {
                if i + j > 0 {
                    tokio::time::sleep(delay).await;
                }
            }
            write_chunk(socket, bytes).await?;
        }
    }
    match tail {
        Interruption::End => {
            if let Some(delay) = terminator_delay {
                tokio::time::sleep(delay).await;
            }
            socket.write_all(b"0\r\n\r\n").await?;
            socket.flush().await?;
        }
        Interruption::Disconnect => {
            // Dropping the socket without the terminating chunk: the client's body read fails.
        }
        Interruption::ErrorEvent {
            error_type,
            message,
        } => {
            write_chunk(socket, &sse::error_event(format, &error_type, &message)).await?;
            socket.write_all(b"0\r\n\r\n").await?;
            socket.flush().await?;
            let _ = socket.shutdown().await;
        }
        Interruption::Stall { keep_alive: None } => hold_open(socket).await,
        Interruption::Stall {
            keep_alive: Some(every),
        } => {
            let ping = sse::keep_alive(format);
            loop {
                tokio::time::sleep(every).await;
                write_chunk(socket, &ping).await?;
            }
        }
    }
    Ok(keep_alive)
}

/// Cuts the encoded segments at the interruption point: the body pieces to send and what
/// happens after them.
fn plan(
    format: WireFormat,
    segments: &[Segment],
    tail: Tail,
    interrupt: Option<(StreamPoint, Interruption)>,
) -> (Vec<Vec<u8>>, Interruption) {
    let mut pieces: Vec<Vec<u8>> = segments.iter().map(|s| s.bytes.clone()).collect();
    let natural = match tail {
        Tail::None => Interruption::End,
        Tail::Disconnect => Interruption::Disconnect,
        Tail::Stall => Interruption::Stall { keep_alive: None },
        Tail::ErrorEvent {
            error_type,
            message,
        } => Interruption::ErrorEvent {
            error_type,
            message,
        },
        Tail::Garbage => {
            pieces.push(match format {
                WireFormat::Anthropic => {
                    b"event: content_block_delta\ndata: {not json\n\n".to_vec()
                }
                _ => b"data: {not json\n\n".to_vec(),
            });
            Interruption::End
        }
    };
    let Some((point, interruption)) = interrupt else {
        return (pieces, natural);
    };
    let position = |pred: &dyn Fn(&Segment) -> bool| segments.iter().position(pred);
    // The number of whole segments to send, or a byte offset.
    let cut_segments = match point {
        StreamPoint::BeforeContent => {
            position(&|s| s.kind != SegmentKind::Preamble).unwrap_or(segments.len())
        }
        StreamPoint::AfterFirstContent => position(&|s| s.kind == SegmentKind::Content)
            .map(|i| i + 1)
            .unwrap_or(segments.len()),
        StreamPoint::BeforeEnd => {
            position(&|s| s.kind == SegmentKind::End).unwrap_or(segments.len())
        }
        StreamPoint::AfterBytes(n) => {
            let all: Vec<u8> = pieces.concat();
            let cut = n.min(all.len());
            return (
                vec![all.get(..cut).unwrap_or_default().to_vec()],
                interruption,
            );
        }
    };
    pieces.truncate(cut_segments);
    (pieces, interruption)
}

/// Checks the history invariant on a request body in `format`.
fn wire_history_violation(format: WireFormat, body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    let history = match format {
        WireFormat::Anthropic => anthropic_history(messages),
        _ => openai_history(messages),
    };
    super::history_violation(&history)
}

fn anthropic_history(messages: &[Value]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| {
            let role = if m.get("role").and_then(Value::as_str) == Some("assistant") {
                Role::Assistant
            } else {
                Role::User
            };
            let content = match m.get("content") {
                Some(Value::String(text)) => vec![ContentBlock::text(text.clone())],
                Some(Value::Array(blocks)) => blocks.iter().map(wire_block).collect(),
                _ => Vec::new(),
            };
            Message { role, content }
        })
        .collect()
}

fn wire_block(block: &Value) -> ContentBlock {
    let text = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match block.get("type").and_then(Value::as_str) {
        Some("tool_use") => ContentBlock::ToolUse {
            id: text("id"),
            name: text("name"),
            input: block.get("input").cloned().unwrap_or(Value::Null),
        },
        Some("tool_result") => ContentBlock::ToolResult {
            tool_use_id: text("tool_use_id"),
            content: "(result)".to_owned(),
            is_error: false,
        },
        _ => ContentBlock::Other(block.clone()),
    }
}

fn openai_history(messages: &[Value]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        match role {
            "assistant" => {
                let mut content = Vec::new();
                if let Some(Value::String(text)) = m.get("content") {
                    content.push(ContentBlock::text(text.clone()));
                }
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    content.push(ContentBlock::ToolUse {
                        id: call
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        name: String::new(),
                        input: Value::Null,
                    });
                }
                out.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => {
                let result = ContentBlock::tool_result(
                    m.get("tool_call_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    "(result)",
                    false,
                );
                match out.last_mut() {
                    Some(last)
                        if last.role == Role::User
                            && last
                                .content
                                .iter()
                                .all(|b| matches!(b, ContentBlock::ToolResult { .. })) =>
                    {
                        last.content.push(result)
                    }
                    _ => out.push(Message {
                        role: Role::User,
                        content: vec![result],
                    }),
                }
            }
            // Tool messages and a following user message form one user turn.
            "user" => match out.last_mut() {
                Some(last) if last.role == Role::User => {
                    last.content.push(ContentBlock::text("(user text)"))
                }
                _ => out.push(Message::user("(user text)")),
            },
            // system and developer messages are not part of the alternation.
            _ => {}
        }
    }
    out
}
