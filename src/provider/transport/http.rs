//! The reqwest transport shared by the clients: the async driver of the HTTP attempt.
//!
//! It decides nothing. `ExchangeMachine` (sans-IO, in `attempt.rs`) makes every decision about
//! a response and its retries: status, held events, timeouts, whole bodies, redirects, the
//! drain, the retry. This driver only moves bytes and time between reqwest and the machine:
//!
//! ```text
//!  LlmStream::poll_next
//!        │
//!        ▼
//!  ExchangeDriver::next ──► machine.poll() ──┬─ Emit(event) ─────► yield Ok(event)
//!        ▲                                   ├─ Fail(error) ─────► yield Err(error); the end
//!        │                                   ├─ Done ────────────► the end
//!        │                                   ├─ Send { deadline } ──► reqwest send, head or error
//!        │                                   ├─ Read / Drain { deadline } ─► the body's next chunk
//!        │                                   └─ SleepUntil(at) ─────► tokio sleep (a backoff)
//!        │                                                                │
//!        └── handle_head / handle_chunk / handle_end / handle_error / handle_timeout(now)
//! ```
//!
//! Every wait is `tokio::time::timeout_at` the machine's deadline, and `now` is read here
//! only, from tokio's clock (so that a paused test clock applies), to be passed in.
//!
//! The client modules only encode the request (URL, headers, JSON body) and describe how their
//! provider's error bodies look ([`ProviderSpec`]); everything else lives here and in the
//! machine, once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use crate::error::{LlmError, TimeoutKind};
pub(crate) use crate::provider::transport::exchange::ProviderSpec;
use crate::provider::transport::exchange::{
    display_url, Action, AttemptConfig, ExchangeMachine, ResponseHead, WholeBody,
};
use crate::provider::transport::retry::RetryPolicy;
use crate::provider::LlmStream;
use crate::wire::{LlmEvent, StreamLimits};

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

    /// Streams the response to the request `build` encodes (called on first poll); a failure
    /// before content is retried with `retry` when given, else with the client's policy.
    pub(crate) fn stream<'a>(
        &self,
        provider: &'static ProviderSpec,
        retry: Option<&RetryPolicy>,
        build: impl FnOnce() -> Result<HttpRequest, LlmError> + Send + 'a,
    ) -> LlmStream<'a> {
        let settings = &self.settings;
        let driver = ExchangeDriver {
            client: self.client(),
            connect_timeout: settings.connect_timeout,
            first_byte_timeout: settings.first_byte_timeout,
            build: Some(Box::new(build)),
            request: None,
            machine: ExchangeMachine::new(AttemptConfig {
                provider,
                first_byte_timeout: settings.first_byte_timeout,
                idle_timeout: settings.idle_timeout,
                total_timeout: settings.total_timeout,
                retry: retry.unwrap_or(&settings.retry).clone(),
                limits: settings.limits,
            }),
            body: None,
        };
        Box::pin(futures::stream::unfold(driver, |mut driver| async move {
            let item = driver.next().await?;
            Some((item, driver))
        }))
    }
}

impl Transport {
    /// Sends `request` and reads its whole JSON answer (not a stream), at most `max_body`
    /// bytes, for the endpoints that answer in one body (OpenAI's `/responses/compact`).
    ///
    /// The same timeouts as a stream (first byte, then idle between chunks, and the total if
    /// set), and the client's retry policy: a retryable failure is tried again after the
    /// policy's delay (a `retry-after` honoured), logged at INFO. What the answer means
    /// (its status, its size, its error) is [`WholeBody`]'s to decide; this only moves bytes.
    pub(crate) async fn post_json(
        &self,
        provider: &'static ProviderSpec,
        request: &HttpRequest,
        max_body: usize,
        setting: &'static str,
    ) -> Result<Vec<u8>, LlmError> {
        let client = self.client()?;
        let mut attempt = 0;
        loop {
            let once = self.post_once(&client, provider, request, max_body, setting);
            let outcome = match self.settings.total_timeout {
                Some(total) => {
                    tokio::time::timeout(total, once)
                        .await
                        .unwrap_or(Err(LlmError::Timeout {
                            kind: TimeoutKind::Total,
                            after: total,
                        }))
                }
                None => once.await,
            };
            let error = match outcome {
                Ok(body) => return Ok(body),
                Err(error) => error,
            };
            attempt += 1;
            let Some(delay) = self.settings.retry.delay_for(attempt, &error) else {
                return Err(error);
            };
            tracing::info!(attempt, ?delay, error = %error, "retrying the request");
            tokio::time::sleep(delay).await;
        }
    }

    async fn post_once(
        &self,
        client: &reqwest::Client,
        provider: &'static ProviderSpec,
        request: &HttpRequest,
        max_body: usize,
        setting: &'static str,
    ) -> Result<Vec<u8>, LlmError> {
        let settings = &self.settings;
        let mut headers = request.headers.clone();
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        let send = client
            .post(&request.url)
            .headers(headers)
            .body(request.body.clone())
            .send();
        let response = match tokio::time::timeout(settings.first_byte_timeout, send).await {
            Err(_) => {
                return Err(LlmError::Timeout {
                    kind: TimeoutKind::FirstByte,
                    after: settings.first_byte_timeout,
                })
            }
            Ok(Err(error)) => {
                return Err(transport_error(
                    error,
                    &request.url,
                    settings.connect_timeout,
                    settings.first_byte_timeout,
                ))
            }
            Ok(Ok(response)) => response,
        };
        let mut body = WholeBody::new(
            provider,
            response.status().as_u16(),
            response.headers(),
            SystemTime::now(),
            max_body,
            setting,
        );
        let mut chunks = response.bytes_stream();
        loop {
            let chunk = match tokio::time::timeout(settings.idle_timeout, chunks.next()).await {
                Err(_) => {
                    return Err(LlmError::Timeout {
                        kind: TimeoutKind::Idle,
                        after: settings.idle_timeout,
                    })
                }
                Ok(None) => break,
                Ok(Some(Err(error))) => {
                    return Err(LlmError::Transport {
                        message: error_chain(&error.without_url()),
                    })
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            if !body.push(&chunk)? {
                break;
            }
        }
        body.finish()
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

type BodyStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The async half of one streamed response: carries out the [`ExchangeMachine`]'s actions with
/// reqwest and feeds it what happened, with when. It decides nothing.
struct ExchangeDriver<'a> {
    client: Result<reqwest::Client, LlmError>,
    /// The timeouts a reqwest error may name (the connect timeout is reqwest's own).
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    build: Option<Box<dyn FnOnce() -> Result<HttpRequest, LlmError> + Send + 'a>>,
    /// The request, encoded on the first send and sent again as it is on a retry.
    request: Option<HttpRequest>,
    machine: ExchangeMachine,
    /// The body of the current attempt's response, while the machine reads it.
    body: Option<BodyStream>,
}

impl ExchangeDriver<'_> {
    /// Carries out the machine's actions until one gives the stream's next item.
    async fn next(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        if !self.machine.is_started() {
            self.machine.start(now());
        }
        loop {
            match self.machine.poll()? {
                Action::Emit(event) => return Some(Ok(event)),
                Action::Retry {
                    attempt,
                    delay,
                    error,
                } => {
                    tracing::info!(attempt, ?delay, %error, "retrying the model request");
                }
                Action::Fail(error) => return Some(Err(error)),
                Action::Done => return None,
                Action::Send { deadline } => self.send(deadline).await,
                Action::Read { deadline } | Action::Drain { deadline } => {
                    self.read(deadline).await;
                }
                Action::SleepUntil(at) => {
                    tokio::time::sleep_until(Instant::from_std(at)).await;
                    self.machine.handle_timeout(now());
                }
            }
            if !self.machine.reads_body() {
                // Read to its end, it has released its connection; otherwise this closes it.
                self.body = None;
            }
        }
    }

    /// Sends the request (encoding it first, once) and feeds the head, or why there is none.
    async fn send(&mut self, deadline: Option<std::time::Instant>) {
        let client = match &self.client {
            Ok(client) => client,
            Err(error) => return self.machine.handle_error(error.clone(), now()),
        };
        if self.request.is_none() {
            if let Some(build) = self.build.take() {
                match build() {
                    Ok(request) => self.request = Some(request),
                    Err(error) => return self.machine.handle_error(error, now()),
                }
            }
        }
        let Some(request) = &self.request else {
            let error = LlmError::InvalidRequest {
                message: "the request could not be encoded".to_owned(),
            };
            return self.machine.handle_error(error, now());
        };
        let builder = client
            .post(&request.url)
            .headers(request.headers.clone())
            .body(request.body.clone());
        match until(deadline, builder.send()).await {
            None => self.machine.handle_timeout(now()),
            Some(Err(error)) => {
                let error = transport_error(
                    error,
                    &request.url,
                    self.connect_timeout,
                    self.first_byte_timeout,
                );
                self.machine.handle_error(error, now());
            }
            Some(Ok(response)) => {
                let head = ResponseHead {
                    status: response.status().as_u16(),
                    headers: response.headers(),
                    requested: &request.url,
                    url: response.url(),
                    received: SystemTime::now(),
                };
                self.machine.handle_head(&head, now());
                if self.machine.reads_body() {
                    self.body = Some(Box::pin(response.bytes_stream()));
                }
            }
        }
    }

    /// Reads the body's next chunk (or its end, or why it broke) and feeds it.
    async fn read(&mut self, deadline: Option<std::time::Instant>) {
        let Some(body) = &mut self.body else {
            // The machine reads only after a head whose body the driver keeps.
            debug_assert!(self.body.is_some(), "a read without a body");
            let error = LlmError::Transport {
                message: "the response body is gone".to_owned(),
            };
            return self.machine.handle_error(error, now());
        };
        match until(deadline, body.next()).await {
            None => self.machine.handle_timeout(now()),
            Some(Some(Ok(chunk))) => self.machine.handle_chunk(&chunk, now()),
            Some(Some(Err(error))) => {
                let error = LlmError::Transport {
                    message: error_chain(&error.without_url()),
                };
                self.machine.handle_error(error, now());
            }
            Some(None) => self.machine.handle_end(now()),
        }
    }
}

/// The time to pass to the machine: tokio's clock, so that a paused test clock applies. The
/// only clock the transport reads (besides the wall-clock time of a response head).
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// `future`'s output, or `None` when `deadline` passed first (no deadline: never).
async fn until<F: Future>(deadline: Option<std::time::Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(Instant::from_std(deadline), future)
            .await
            .ok(),
        None => Some(future.await),
    }
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
/// let http = agent_loop::provider::reqwest::Client::builder()
///     .redirect(agent_loop::provider::transport::redirect_policy())
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

/// Maps a reqwest send error to the crate's error. The URL is named (without its query) where
/// it tells the user what to fix: a refused connection, a redirect.
/// Whether `url` asks for TLS.
fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
}

fn transport_error(
    error: reqwest::Error,
    url: &str,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
) -> LlmError {
    let message = error_chain(&error);
    let shown = reqwest::Url::parse(url).map_or_else(|_| url.to_owned(), |u| display_url(&u));
    if !cfg!(feature = "rustls") && is_https(url) {
        return LlmError::InvalidRequest {
            message: format!(
                "{shown} is an https URL, and agent-loop was built without TLS: turn on its \
                 `rustls` feature (on by default), or pass a reqwest client with TLS to \
                 `http_client` ({})",
                error_chain(&error.without_url())
            ),
        };
    }
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
            after: connect_timeout,
        }
    } else if error.is_connect() {
        LlmError::Connect {
            message: format!("{shown}: {}", error_chain(&error.without_url())),
        }
    } else if error.is_timeout() {
        LlmError::Timeout {
            kind: TimeoutKind::FirstByte,
            after: first_byte_timeout,
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

/// Merges `extra` into the top level of the encoded body and serializes it. A key the body
/// already has is a clash, refused with an error naming it: neither value silently wins.
/// The JSON bytes of `body` with `extra`'s fields merged in at the top level. With no extra
/// fields (the common case) the body is written straight to bytes, not built as a `Value`
/// tree first: for a long history that tree cost more than the bytes themselves.
pub(crate) fn body_bytes<T: serde::Serialize>(
    body: &T,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u8>, LlmError> {
    if extra.is_empty() {
        return serde_json::to_vec(body).map_err(encode_error);
    }
    merge_extra(serde_json::to_value(body).map_err(encode_error)?, extra)
}

pub(crate) fn merge_extra(
    mut body: serde_json::Value,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u8>, LlmError> {
    if let serde_json::Value::Object(map) = &mut body {
        for (key, value) in extra {
            if map.contains_key(key) {
                return Err(extra_clash(key));
            }
            map.insert(key.clone(), value.clone());
        }
    }
    serde_json::to_vec(&body).map_err(encode_error)
}

/// An extra body field that is one the crate sends itself.
pub(crate) fn extra_clash(key: &str) -> LlmError {
    LlmError::InvalidRequest {
        message: format!(
            "the extra body field `{key}` clashes with a field the crate sends in this request; \
             set it through its typed setting (ModelRequest / RequestSettings) instead"
        ),
    }
}

/// A request body serde could not write.
pub(crate) fn encode_error(e: serde_json::Error) -> LlmError {
    LlmError::InvalidRequest {
        message: format!("could not encode the request: {e}"),
    }
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
        /// [`agent_loop::provider::reqwest`](crate::provider::reqwest)) instead of one the crate builds: for a
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

        /// Which failures are retried, and how (default [`RetryPolicy::default`](crate::provider::transport::RetryPolicy::default)).
        pub fn retry_policy(mut self, policy: crate::provider::transport::RetryPolicy) -> Self {
            self.transport.settings_mut().retry = policy;
            self
        }

        /// Size limits on the streamed response (default [`StreamLimits::default`](crate::wire::StreamLimits::default)).
        pub fn stream_limits(mut self, limits: crate::wire::StreamLimits) -> Self {
            self.transport.settings_mut().limits = limits;
            self
        }

        /// The configured retry policy.
        pub fn get_retry_policy(&self) -> &crate::provider::transport::RetryPolicy {
            &self.transport.settings().retry
        }
    };
}
pub(crate) use transport_setters;

/// Implements [`LlmClient`](crate::provider::LlmClient) for an HTTP client of one format: the
/// stream goes through the client's `transport` with its `ProviderSpec` and its `build`, the
/// limits and retry policy come from the transport's settings. `spec`, `model` and `provider`
/// are expressions of the client (bound to the name between bars).
macro_rules! llm_client {
    (
        $client:ty,
        spec: |$s:ident| $spec:expr,
        model: |$m:ident| $model:expr,
        provider: |$p:ident| $provider:expr,
        strict: $strict:expr
        $(,)?
    ) => {
        impl $crate::provider::LlmClient for $client {
            fn stream<'a>(
                &'a self,
                request: &'a $crate::provider::ModelRequest,
            ) -> $crate::provider::LlmStream<'a> {
                let $s = self;
                self.transport
                    .stream($spec, request.retry.as_ref(), move || self.build(request))
            }

            fn model(&self) -> &str {
                let $m = self;
                $model
            }

            fn stream_limits(&self) -> $crate::wire::StreamLimits {
                self.transport.settings().limits
            }

            fn retry_policy(&self) -> Option<$crate::provider::transport::RetryPolicy> {
                Some(self.transport.settings().retry.clone())
            }

            fn provider_name(&self) -> &str {
                let $p = self;
                $provider
            }

            fn strict_dialect(&self) -> Option<$crate::provider::strict::StrictDialect> {
                $strict
            }
        }
    };
}
pub(crate) use llm_client;

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn https_is_told_by_its_scheme_in_any_case() {
        assert!(is_https("https://api.anthropic.com/v1/messages"));
        assert!(is_https("HTTPS://h"));
        assert!(!is_https("http://127.0.0.1:8080"));
        assert!(!is_https("https:/"));
        assert!(!is_https(""));
    }

    /// Without the `rustls` feature (`cargo test --lib --no-default-features`), an https URL
    /// fails at once with the feature named, not as a retryable connection error.
    #[cfg(not(feature = "rustls"))]
    #[test]
    fn an_https_url_without_tls_names_the_feature() {
        use futures::StreamExt;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let client = crate::AnthropicClient::new("key")
            .base_url("https://127.0.0.1:9")
            .model("m");
        let request = crate::provider::ModelRequest::default();
        let first = runtime.block_on(async {
            let mut stream = crate::LlmClient::stream(&client, &request);
            stream.next().await
        });
        match first {
            Some(Err(LlmError::InvalidRequest { message })) => {
                assert!(message.contains("`rustls` feature"), "{message}");
                assert!(message.contains("https://127.0.0.1:9"), "{message}");
            }
            other => panic!("expected an InvalidRequest naming the feature, got {other:?}"),
        }
    }
}
