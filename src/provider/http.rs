//! The reqwest transport shared by both clients: send, status handling, streaming decode,
//! timeouts and retries.
//!
//! ```text
//!            ┌──────────── retry (RetryPolicy::delay_for, LlmEvent::Retry) ◄──────────┐
//!            ▼                                                                     │ failure before
//!  Start ─► send (first-byte timeout) ─► 2xx ─► Body: chunks ─► WireDecoder ─► events │ any content
//!                 │                                │  idle timeout between content events
//!                 └► non-2xx: bounded body ─► ApiError / ContextOverflow ──────────┘
//! ```
//!
//! The client modules only encode the request (URL, headers, JSON body) and describe how their
//! provider's error bodies look ([`ProviderSpec`]); everything else lives here, once.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use crate::error::{ApiError, LlmError, TimeoutKind};
use crate::provider::retry::RetryPolicy;
use crate::provider::{LlmEvent, LlmStream, StreamLimits, WireDecoder, WireFormat};

/// The most bytes of an error response body that are read; the rest is discarded.
const MAX_ERROR_BODY: usize = 64 << 10;
/// The most characters of a non-JSON error body kept as the message.
const MAX_ERROR_TEXT: usize = 1000;

/// A secret (an API key) that never shows in `Debug` output.
#[derive(Clone, Default)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The secret as a header value marked sensitive (so reqwest and hyper never log it), or
    /// an error that does not repeat the value.
    pub(crate) fn header_value(&self, prefix: &str) -> Result<HeaderValue, LlmError> {
        let mut value = HeaderValue::try_from(format!("{prefix}{}", self.0)).map_err(|_| {
            LlmError::InvalidRequest {
                message: "the API key contains characters that are not allowed in an HTTP \
                          header (check for a stray newline)"
                    .to_owned(),
            }
        })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"[redacted]\"")
    }
}

/// The transport settings both clients share; each is its own setter on the clients.
#[derive(Debug, Clone)]
pub(crate) struct HttpSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) first_byte_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) total_timeout: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    pub(crate) limits: StreamLimits,
    /// Extra headers sent with every request (not sensitive).
    pub(crate) headers: Vec<(String, String)>,
    /// A reqwest client the user built (proxy, TLS roots, pool settings), used as it is.
    pub(crate) http_client: Option<reqwest::Client>,
}

impl HttpSettings {
    pub(crate) fn new(idle_timeout: Duration) -> Self {
        HttpSettings {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout,
            total_timeout: None,
            retry: RetryPolicy::default(),
            limits: StreamLimits::default(),
            headers: Vec::new(),
            http_client: None,
        }
    }
}

/// The settings plus the reqwest client built from them on first use.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    settings: HttpSettings,
    client: Arc<OnceLock<Result<reqwest::Client, String>>>,
}

impl Transport {
    pub(crate) fn new(settings: HttpSettings) -> Self {
        Transport {
            settings,
            client: Arc::new(OnceLock::new()),
        }
    }

    pub(crate) fn settings(&self) -> &HttpSettings {
        &self.settings
    }

    /// The settings, for a builder setter; the reqwest client is rebuilt on next use.
    pub(crate) fn settings_mut(&mut self) -> &mut HttpSettings {
        self.client = Arc::new(OnceLock::new());
        &mut self.settings
    }

    fn client(&self) -> Result<reqwest::Client, LlmError> {
        if let Some(client) = &self.settings.http_client {
            return Ok(client.clone());
        }
        let built = self.client.get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(self.settings.connect_timeout)
                .redirect(redirect_policy())
                .build()
                .map_err(|e| error_chain(&e.without_url()))
        });
        built.clone().map_err(|message| LlmError::InvalidRequest {
            message: format!("could not build the HTTP client: {message}"),
        })
    }

    /// Streams the response to the request `build` encodes (called on first poll).
    pub(crate) fn stream<'a>(
        &self,
        provider: &'static ProviderSpec,
        build: impl FnOnce() -> Result<HttpRequest, LlmError> + Send + 'a,
    ) -> LlmStream<'a> {
        let driver = Driver {
            client: self.client(),
            settings: self.settings.clone(),
            provider,
            build: Some(Box::new(build)),
            request: None,
            retries: 0,
            total_deadline: None,
            phase: Phase::Start,
            out: VecDeque::new(),
            held: Vec::new(),
            content_seen: false,
            pending_error: None,
        };
        Box::pin(futures::stream::unfold(driver, |mut driver| async move {
            let item = driver.next().await?;
            Some((item, driver))
        }))
    }
}

/// One encoded HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct HttpRequest {
    pub(crate) url: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl HttpRequest {
    /// A JSON POST with `accept: text/event-stream`; `extra` headers added last.
    pub(crate) fn json(
        url: String,
        body: Vec<u8>,
        mut headers: HeaderMap,
        extra: &[(String, String)],
    ) -> Result<Self, LlmError> {
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        for (name, value) in extra {
            let name =
                HeaderName::try_from(name.as_str()).map_err(|_| LlmError::InvalidRequest {
                    message: format!("invalid header name {name:?}"),
                })?;
            let value =
                HeaderValue::try_from(value.as_str()).map_err(|_| LlmError::InvalidRequest {
                    message: format!("invalid value for header {name}"),
                })?;
            headers.insert(name, value);
        }
        Ok(HttpRequest {
            url,
            headers,
            body: Bytes::from(body),
        })
    }
}

/// What the transport needs to know about a provider.
#[derive(Debug)]
pub(crate) struct ProviderSpec {
    /// The stream's wire format.
    pub(crate) format: WireFormat,
    /// Fills `error_type`, `code` and `message` of `error` from a JSON error body; returns
    /// false when the body is not in the provider's shape.
    pub(crate) parse_error_body: fn(body: &[u8], error: &mut ApiError) -> bool,
    /// Whether the error says the prompt does not fit the context window.
    pub(crate) is_context_overflow: fn(error: &ApiError) -> bool,
    /// Where the user should look when the key is rejected (HTTP 401).
    pub(crate) auth_hint: &'static str,
}

type BodyStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

enum Phase {
    /// The request is (re)sent on the next poll.
    Start,
    /// A retry was reported; wait this long, then send again.
    Backoff(Duration),
    /// Reading and decoding a 2xx body.
    Body {
        body: BodyStream,
        decoder: Box<WireDecoder>,
        idle_deadline: Instant,
    },
    /// Nothing more to read.
    Finished,
}

/// The state of one streamed response across its attempts.
struct Driver<'a> {
    client: Result<reqwest::Client, LlmError>,
    settings: HttpSettings,
    provider: &'static ProviderSpec,
    build: Option<Box<dyn FnOnce() -> Result<HttpRequest, LlmError> + Send + 'a>>,
    request: Option<HttpRequest>,
    /// Retries done so far.
    retries: u32,
    total_deadline: Option<Instant>,
    phase: Phase,
    /// Events ready to be yielded.
    out: VecDeque<LlmEvent>,
    /// Events of the current attempt that came before its first content event; held back so
    /// that an attempt that fails before content leaves no trace but the `Retry` event.
    held: Vec<LlmEvent>,
    content_seen: bool,
    /// An error to yield after `out` is drained; it ends the stream.
    pending_error: Option<LlmError>,
}

impl Driver<'_> {
    async fn next(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        loop {
            if let Some(event) = self.out.pop_front() {
                if matches!(event, LlmEvent::MessageStop { .. }) {
                    // The response is complete: what follows the end marker is read only to
                    // release the connection, never decoded.
                    self.out.clear();
                    self.pending_error = None;
                    self.drain().await;
                }
                return Some(Ok(event));
            }
            if let Some(error) = self.pending_error.take() {
                self.phase = Phase::Finished;
                return Some(Err(error));
            }
            match &mut self.phase {
                Phase::Finished => return None,
                Phase::Start => {
                    if self.total_deadline.is_none() {
                        self.total_deadline =
                            self.settings.total_timeout.map(|t| Instant::now() + t);
                    }
                    if let Err(error) = self.send().await {
                        if let Some(retry) = self.retry_or_fail(error) {
                            return Some(retry);
                        }
                    }
                }
                Phase::Backoff(delay) => {
                    let delay = *delay;
                    tokio::time::sleep(delay).await;
                    self.phase = Phase::Start;
                }
                Phase::Body { .. } => {
                    if let Err(error) = self.read_chunk().await {
                        if self.content_seen {
                            // Never re-sent after content: the caller decides.
                            self.pending_error = Some(error);
                        } else if let Some(retry) = self.retry_or_fail(error) {
                            return Some(retry);
                        }
                    }
                }
            }
        }
    }

    /// Decides what a failure before any content means: a `Retry` event (and a backoff), or
    /// the stream's final error.
    fn retry_or_fail(&mut self, error: LlmError) -> Option<Result<LlmEvent, LlmError>> {
        self.held.clear();
        let attempt = self.retries + 1;
        let delay = self
            .settings
            .retry
            .delay_for(attempt, &error)
            .filter(|delay| {
                // A retry that cannot start before the total deadline is pointless.
                self.total_deadline
                    .is_none_or(|deadline| Instant::now() + *delay < deadline)
            });
        match delay {
            Some(delay) => {
                self.retries = attempt;
                tracing::debug!(attempt, ?delay, error = %error, "retrying the model request");
                self.phase = Phase::Backoff(delay);
                Some(Ok(LlmEvent::Retry {
                    attempt,
                    delay,
                    error,
                }))
            }
            None => {
                self.phase = Phase::Finished;
                self.pending_error = Some(error);
                None
            }
        }
    }

    /// Which deadline is nearer: `kind` at `at`, or the total deadline.
    fn deadline(&self, kind: TimeoutKind, after: Duration, at: Instant) -> (Instant, LlmError) {
        match self.total_deadline {
            Some(total) if total < at => (
                total,
                LlmError::Timeout {
                    kind: TimeoutKind::Total,
                    after: self.settings.total_timeout.unwrap_or_default(),
                },
            ),
            _ => (at, LlmError::Timeout { kind, after }),
        }
    }

    /// Sends the request; on a 2xx response enters the body phase.
    async fn send(&mut self) -> Result<(), LlmError> {
        let client = self.client.clone()?;
        if self.request.is_none() {
            if let Some(build) = self.build.take() {
                match build() {
                    Ok(request) => self.request = Some(request),
                    // Encoding errors are not retryable, so they are final.
                    Err(error) => return Err(error),
                }
            }
        }
        let Some(request) = &self.request else {
            return Err(LlmError::InvalidRequest {
                message: "the request could not be encoded".to_owned(),
            });
        };
        let builder = client
            .post(&request.url)
            .headers(request.headers.clone())
            .body(request.body.clone());
        let first_byte = self.settings.first_byte_timeout;
        let (deadline, timeout) = self.deadline(
            TimeoutKind::FirstByte,
            first_byte,
            Instant::now() + first_byte,
        );
        let response = match tokio::time::timeout_at(deadline, builder.send()).await {
            Err(_) => return Err(timeout),
            Ok(Err(error)) => return Err(transport_error(error, &request.url, &self.settings)),
            Ok(Ok(response)) => response,
        };
        if let Some(location) = cross_origin(&request.url, response.url()) {
            // Only a client of the user's own, with a redirect policy that follows across
            // origins, gets here: its answer is not used.
            tracing::warn!(
                %location,
                "the HTTP client followed a redirect to another origin; set \
                 `redirect(agent_loop::redirect_policy())` on it so that credentials never \
                 leave the base URL's origin"
            );
            return Err(LlmError::Redirected { location });
        }
        let status = response.status();
        let idle = self.settings.idle_timeout;
        if status.is_redirection() {
            // Not followed (another origin, or too many hops).
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| response.url().join(v).ok())
                .map_or_else(|| "no location given".to_owned(), |url| display_url(&url));
            return Err(LlmError::Redirected { location });
        }
        if !status.is_success() {
            let headers = response.headers().clone();
            let (deadline, _) = self.deadline(TimeoutKind::Idle, idle, Instant::now() + idle);
            let body = read_bounded(response, deadline, MAX_ERROR_BODY).await;
            return Err(api_error(self.provider, status.as_u16(), &headers, &body));
        }
        if let Some(id) = request_id(response.headers()) {
            tracing::debug!(request_id = %id, "model response started");
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let kind = body_kind(content_type.as_deref());
        if kind != BodyKind::EventStream {
            let (deadline, _) = self.deadline(TimeoutKind::Idle, idle, Instant::now() + idle);
            let limit = match kind {
                BodyKind::Json => self.settings.limits.max_response_bytes,
                _ => UNEXPECTED_BODY_PREFIX,
            };
            let body = read_bounded(response, deadline, limit.saturating_add(1)).await;
            self.whole_body(kind, content_type.unwrap_or_default(), &body);
            return Ok(());
        }
        self.content_seen = false;
        self.held.clear();
        self.phase = Phase::Body {
            body: Box::pin(response.bytes_stream()),
            decoder: Box::new(WireDecoder::with_limits(
                self.provider.format,
                self.settings.limits,
            )),
            idle_deadline: Instant::now() + idle,
        };
        Ok(())
    }

    /// A 2xx answer that is not an event stream: a whole JSON message decodes into the
    /// events a stream would give; anything else is refused with its content type and first
    /// bytes. Neither is retried.
    fn whole_body(&mut self, kind: BodyKind, content_type: String, body: &[u8]) {
        self.phase = Phase::Finished;
        if kind == BodyKind::Unexpected {
            let start = body.get(..UNEXPECTED_BODY_PREFIX).unwrap_or(body);
            let body_start: String = String::from_utf8_lossy(start)
                .chars()
                .take(UNEXPECTED_BODY_PREFIX)
                .collect();
            self.pending_error = Some(LlmError::UnexpectedContentType {
                content_type,
                body_start,
            });
            return;
        }
        let limit = self.settings.limits.max_response_bytes;
        let mut events = Vec::new();
        let result = if body.len() > limit {
            Err(LlmError::LimitExceeded {
                what: "a whole JSON response".into(),
                limit,
                setting: "StreamLimits::max_response_bytes".into(),
            })
        } else {
            WireDecoder::with_limits(self.provider.format, self.settings.limits)
                .decode_json(body, &mut events)
        };
        // The body was read whole: nothing is re-sent for it, whatever it held.
        match result {
            Ok(()) => self.out.extend(events),
            Err(error) => self.pending_error = Some(error),
        }
    }

    /// Reads what is left of a body after its end-of-message marker or an error the decoder
    /// found in it (the chunked terminator, usually a few milliseconds later), for a bounded
    /// time and size, without decoding it, so that the connection goes back to the pool
    /// instead of being closed.
    async fn drain(&mut self) {
        let Phase::Body { body, .. } = &mut self.phase else {
            return;
        };
        let deadline = Instant::now() + DRAIN_TIME;
        let mut drained = 0usize;
        while drained <= DRAIN_BYTES {
            match tokio::time::timeout_at(deadline, body.next()).await {
                Ok(Some(Ok(chunk))) => drained += chunk.len(),
                _ => break,
            }
        }
        self.phase = Phase::Finished;
    }

    /// Reads one chunk of the body (or its end) and decodes it.
    async fn read_chunk(&mut self) -> Result<(), LlmError> {
        let idle = self.settings.idle_timeout;
        let Phase::Body { idle_deadline, .. } = &self.phase else {
            return Ok(());
        };
        let (deadline, timeout) = self.deadline(TimeoutKind::Idle, idle, *idle_deadline);
        let Phase::Body { body, decoder, .. } = &mut self.phase else {
            return Ok(());
        };
        let mut events = Vec::new();
        let (result, ended) = match tokio::time::timeout_at(deadline, body.next()).await {
            Err(_) => return Err(timeout),
            Ok(Some(Ok(chunk))) => (decoder.push(&chunk, &mut events), false),
            Ok(Some(Err(error))) => {
                return Err(LlmError::Transport {
                    message: error_chain(&error.without_url()),
                })
            }
            Ok(None) => (decoder.finish(&mut events), true),
        };
        for event in events {
            self.accept(event);
        }
        if ended {
            self.out.extend(self.held.drain(..));
            self.phase = Phase::Finished;
        } else if result.is_err() {
            // The decoder refused what it read (the provider's in-stream error, a malformed
            // event), but the HTTP body is sound and usually ends right after: read it to its
            // end as after the end-of-message marker, so that a retry or the next request
            // reuses the connection. Not after a transport error or a timeout (above): there
            // is nothing to read, or waiting is what went wrong.
            self.drain().await;
        }
        result
    }

    /// Routes one decoded event: content resets the idle timer and releases the held events.
    fn accept(&mut self, event: LlmEvent) {
        if event.is_content() {
            self.content_seen = true;
            if let Phase::Body { idle_deadline, .. } = &mut self.phase {
                *idle_deadline = Instant::now() + self.settings.idle_timeout;
            }
        }
        if self.content_seen || matches!(event, LlmEvent::MessageStop { .. }) {
            self.out.extend(self.held.drain(..));
            self.out.push_back(event);
            return;
        }
        // Held events stay bounded: a later usage figure or message start replaces the earlier
        // one (they are cumulative), and a stream that sends many other events before any
        // content has them released rather than held without bound.
        let same_kind = |held: &LlmEvent| {
            matches!(
                (held, &event),
                (LlmEvent::Usage(_), LlmEvent::Usage(_))
                    | (LlmEvent::MessageStart { .. }, LlmEvent::MessageStart { .. })
            )
        };
        match self.held.iter().position(same_kind) {
            Some(i) => self.held[i] = event,
            None if self.held.len() < MAX_HELD_EVENTS => self.held.push(event),
            None => {
                self.out.extend(self.held.drain(..));
                self.out.push_back(event);
            }
        }
    }
}

/// The most events held back before the first content event (see `Driver::accept`).
const MAX_HELD_EVENTS: usize = 64;

/// The longest wait for the rest of a body after its end-of-message marker (or an in-stream
/// error).
const DRAIN_TIME: Duration = Duration::from_millis(300);
/// The most bytes read after the end-of-message marker (or an in-stream error) before the
/// connection is given up.
const DRAIN_BYTES: usize = 64 << 10;
/// How much of a body of an unexpected content type is read, and shown in the error.
const UNEXPECTED_BODY_PREFIX: usize = 200;

/// How a 2xx body is read, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// `text/event-stream`, or no content type at all (lenient: some servers send none).
    EventStream,
    /// `application/json` or `…+json`: one whole message.
    Json,
    /// Anything else (an HTML page, say): refused.
    Unexpected,
}

fn body_kind(content_type: Option<&str>) -> BodyKind {
    let Some(content_type) = content_type else {
        return BodyKind::EventStream;
    };
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "" | "text/event-stream" => BodyKind::EventStream,
        "application/json" => BodyKind::Json,
        other if other.ends_with("+json") => BodyKind::Json,
        _ => BodyKind::Unexpected,
    }
}

/// Reads at most `limit` bytes of a response body before `deadline`.
async fn read_bounded(response: reqwest::Response, deadline: Instant, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < limit {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                let room = limit - body.len();
                body.extend_from_slice(chunk.get(..room).unwrap_or(&chunk));
            }
            _ => break,
        }
    }
    body
}

/// The redirect policy of the clients the crate builds: a redirect within the base URL's
/// origin (scheme, host and port) is followed, up to 5 hops; one to another origin is not, so
/// that neither the API key (`x-api-key`, `Authorization`, `api-key`) nor any header set with
/// `header(..)` is ever sent to a server the base URL does not name. The request then fails
/// with [`LlmError::Redirected`], naming the target.
///
/// reqwest itself strips only `Authorization` and cookies on a cross-origin redirect. When you
/// pass your own client with `http_client(..)`, build it with this policy:
///
/// ```
/// let http = agent_loop::reqwest::Client::builder()
///     .redirect(agent_loop::redirect_policy())
///     .build()
///     .expect("a client");
/// let client = agent_loop::AnthropicClient::new("sk-…").http_client(http);
/// # let _ = client;
/// ```
///
/// A client of your own that does follow a redirect to another origin has already sent its
/// headers there; its answer is still refused with [`LlmError::Redirected`].
pub fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let origin = attempt.previous().first().map(reqwest::Url::origin);
        if origin.is_some_and(|origin| origin != attempt.url().origin()) {
            let location = display_url(attempt.url());
            attempt.error(CrossOriginRedirect(location))
        } else if attempt.previous().len() > 5 {
            let location = format!("{} (more than 5 redirects)", display_url(attempt.url()));
            attempt.error(CrossOriginRedirect(location))
        } else {
            attempt.follow()
        }
    })
}

/// The error the redirect policy stops a redirect with; its text is the target.
#[derive(Debug)]
struct CrossOriginRedirect(String);

impl fmt::Display for CrossOriginRedirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CrossOriginRedirect {}

/// A URL as shown in errors and logs: scheme, host, port and path, never the query (where
/// some gateways take a key) or user information.
fn display_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// The target of a redirect the client followed to another origin than `requested`'s.
fn cross_origin(requested: &str, answered: &reqwest::Url) -> Option<String> {
    let requested = reqwest::Url::parse(requested).ok()?;
    (requested.origin() != answered.origin()).then(|| display_url(answered))
}

/// The request id of a response, from the headers providers and proxies use for it.
fn request_id(headers: &HeaderMap) -> Option<String> {
    REQUEST_ID_HEADERS
        .iter()
        .find_map(|name| header(headers, name))
}

/// Where servers put the request id, most specific first: Anthropic `request-id`, OpenAI and
/// most proxies `x-request-id`, LiteLLM `x-litellm-call-id`, Azure `apim-request-id`, AWS
/// `x-amzn-requestid`.
const REQUEST_ID_HEADERS: [&str; 6] = [
    "request-id",
    "x-request-id",
    "x-litellm-call-id",
    "apim-request-id",
    "x-amzn-requestid",
    "x-correlation-id",
];

/// Maps a reqwest send error to the crate's error. The URL is named (without its query) where
/// it tells the user what to fix: a refused connection, a redirect.
fn transport_error(error: reqwest::Error, url: &str, settings: &HttpSettings) -> LlmError {
    let message = error_chain(&error);
    let shown = reqwest::Url::parse(url).map_or_else(|_| url.to_owned(), |u| display_url(&u));
    if error.is_redirect() {
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            if let Some(redirect) = cause.downcast_ref::<CrossOriginRedirect>() {
                return LlmError::Redirected {
                    location: redirect.0.clone(),
                };
            }
            source = cause.source();
        }
        return LlmError::Redirected {
            location: format!("from {shown}: {}", error_chain(&error.without_url())),
        };
    }
    if error.is_connect() && (error.is_timeout() || message.contains("timed out")) {
        LlmError::Timeout {
            kind: TimeoutKind::Connect,
            after: settings.connect_timeout,
        }
    } else if error.is_connect() {
        LlmError::Connect {
            message: format!("{shown}: {}", error_chain(&error.without_url())),
        }
    } else if error.is_timeout() {
        LlmError::Timeout {
            kind: TimeoutKind::FirstByte,
            after: settings.first_byte_timeout,
        }
    } else {
        LlmError::Transport {
            message: error_chain(&error.without_url()),
        }
    }
}

/// An error and its sources, joined with `: `.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Builds the error of a non-2xx response.
pub(crate) fn api_error(
    provider: &ProviderSpec,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
) -> LlmError {
    let mut error = ApiError::new(status, String::new());
    error.request_id = request_id(headers);
    error.retry_after = retry_after(headers, SystemTime::now());
    error.should_retry = match header(headers, "x-should-retry").as_deref() {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    if !(provider.parse_error_body)(body, &mut error) || error.message.is_empty() {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        error.message = if text.is_empty() {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no error message")
                .to_owned()
        } else {
            text.chars().take(MAX_ERROR_TEXT).collect()
        };
    }
    if status == 401 {
        error.message = format!("{} (check {})", error.message, provider.auth_hint);
    }
    if status == 413 || (provider.is_context_overflow)(&error) {
        LlmError::ContextOverflow(Box::new(error))
    } else {
        LlmError::Api(Box::new(error))
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.chars().take(200).collect())
}

/// The server's requested delay: `retry-after-ms` (milliseconds), else `retry-after` (seconds
/// or an HTTP date, relative to `now`).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = header(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Ok(delay) = Duration::try_from_secs_f64(ms / 1000.0) {
            return Some(delay);
        }
    }
    let value = header(headers, "retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let date = httpdate::parse_http_date(&value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Merges `extra` into the top level of the encoded body and serializes it. A key the body
/// already has is a clash, refused with an error naming it: neither value silently wins.
pub(crate) fn merge_extra(
    mut body: serde_json::Value,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u8>, LlmError> {
    if let serde_json::Value::Object(map) = &mut body {
        for (key, value) in extra {
            if map.contains_key(key) {
                return Err(LlmError::InvalidRequest {
                    message: format!(
                        "the extra body field `{key}` clashes with a field the crate sends in \
                         this request; set it through its typed setting (ModelRequest / \
                         RequestSettings) instead"
                    ),
                });
            }
            map.insert(key.clone(), value.clone());
        }
    }
    serde_json::to_vec(&body).map_err(|e| LlmError::InvalidRequest {
        message: format!("could not encode the request: {e}"),
    })
}

/// Joins a base URL (trailing slashes trimmed) and a path. A query on the base URL (Azure
/// OpenAI's `?api-version=…`) stays at the end.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    match base.split_once('?') {
        Some((base, query)) => format!("{}{path}?{query}", base.trim_end_matches('/')),
        None => format!("{}{path}", base.trim_end_matches('/')),
    }
}

/// The transport setters both clients share (each client keeps its own docs' details: an
/// example header, the idle-timeout default and what keep-alives look like).
macro_rules! transport_setters {
    ($header_example:literal, $idle_default:literal, $keep_alive:literal) => {
        #[doc = concat!("An extra header sent with every request (", $header_example, ").")]
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.transport
                .settings_mut()
                .headers
                .push((name.into(), value.into()));
            self
        }

        /// Sends requests through this reqwest client (reqwest 0.12, re-exported as
        /// [`agent_loop::reqwest`](crate::reqwest)) instead of one the crate builds: for a
        /// proxy, extra root certificates, or one connection pool shared with the rest of the
        /// application. Its own connect timeout applies, not
        /// [`connect_timeout`](Self::connect_timeout); the other timeouts, the retry policy
        /// and the stream limits still apply.
        pub fn http_client(mut self, client: reqwest::Client) -> Self {
            self.transport.settings_mut().http_client = Some(client);
            self
        }

        /// The longest wait to establish the connection (default 10 s) when the crate builds
        /// the HTTP client.
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.transport.settings_mut().connect_timeout = timeout;
            self
        }

        /// The longest wait for the response headers after sending (default 120 s).
        pub fn first_byte_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.transport.settings_mut().first_byte_timeout = timeout;
            self
        }

        #[doc = concat!(
                    "The longest wait between two content events (text, thinking or tool-argument ",
                    "deltas) of one response (default ", $idle_default, "). ", $keep_alive
                )]
        pub fn idle_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.transport.settings_mut().idle_timeout = timeout;
            self
        }

        /// The longest time for a whole response, retries included (default: none).
        pub fn total_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.transport.settings_mut().total_timeout = Some(timeout);
            self
        }

        /// Which failures are retried, and how (default [`RetryPolicy::default`](crate::RetryPolicy::default)).
        pub fn retry_policy(mut self, policy: crate::provider::RetryPolicy) -> Self {
            self.transport.settings_mut().retry = policy;
            self
        }

        /// Size limits on the streamed response (default [`StreamLimits::default`](crate::StreamLimits::default)).
        pub fn stream_limits(mut self, limits: crate::provider::StreamLimits) -> Self {
            self.transport.settings_mut().limits = limits;
            self
        }

        /// The configured retry policy.
        pub fn get_retry_policy(&self) -> &crate::provider::RetryPolicy {
            &self.transport.settings().retry
        }
    };
}
pub(crate) use transport_setters;

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "7"), ("retry-after-ms", "1500")]),
                now
            ),
            Some(Duration::from_millis(1500))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &date)]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-3")]), now), None);
    }

    #[test]
    fn secret_debug_is_redacted() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s:?}"), "\"[redacted]\"");
        let v = s.header_value("Bearer ").unwrap();
        assert!(v.is_sensitive());
        assert!(!format!("{v:?}").contains("very-secret"));
        let bad = Secret::new("sk\nx").header_value("").unwrap_err();
        assert!(!bad.to_string().contains("sk"));
    }

    #[test]
    fn join_url_trims_slashes() {
        assert_eq!(
            join_url("http://h/x/", "/v1/messages"),
            "http://h/x/v1/messages"
        );
        assert_eq!(join_url("http://h", "/chat"), "http://h/chat");
    }
}
