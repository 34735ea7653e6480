//! The HTTP attempt as a sans-IO state machine: the response head, body bytes and timer
//! expiries in, what to do next out, time passed in.
//!
//! Like quinn-proto's `Connection` (and the crate's own agent machine), [`ExchangeMachine`]
//! makes every decision about one streamed model response and its retries, and does no I/O:
//! no socket, no clock, no `async`. The reqwest driver in `http.rs` feeds it what the network
//! gave ([`ExchangeMachine::handle_head`], [`handle_chunk`](ExchangeMachine::handle_chunk),
//! [`handle_end`](ExchangeMachine::handle_end), [`handle_error`](ExchangeMachine::handle_error),
//! [`handle_timeout`](ExchangeMachine::handle_timeout)), each with the time it happened, and
//! carries out the [`Action`]s that [`ExchangeMachine::poll`] gives.
//!
//! The decisions made here, once: which failures are retried and after how long, which
//! timeout fired (first-byte, idle, total), which events are held until content arrives, how
//! a non-2xx status becomes an error, how a 2xx body that is not an event stream is read,
//! which redirects are refused, and when the rest of a body is drained so that the connection
//! can be reused.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderMap;

use crate::error::{ApiError, LlmError, RateLimits, TimeoutKind};
use crate::provider::transport::retry::RetryPolicy;
use crate::wire::{LlmEvent, StreamLimits, WireDecoder, WireFormat};

/// The most bytes of an error response body that are read; the rest is discarded.
const MAX_ERROR_BODY: usize = 64 << 10;
/// The most characters of a non-JSON error body kept as the message.
const MAX_ERROR_TEXT: usize = 1000;
/// The most events held back before the first content event (see `ExchangeMachine::accept`).
const MAX_HELD_EVENTS: usize = 64;
/// The longest wait for the rest of a body after its end-of-message marker (or an in-stream
/// error).
const DRAIN_TIME: Duration = Duration::from_millis(300);
/// The most bytes read after the end-of-message marker (or an in-stream error) before the
/// connection is given up.
const DRAIN_BYTES: usize = 64 << 10;
/// How much of a body of an unexpected content type is read, and shown in the error.
const UNEXPECTED_BODY_PREFIX: usize = 200;

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

/// The settings the machine decides with (the client's transport settings, less what only
/// the driver uses).
#[derive(Debug, Clone)]
pub(crate) struct AttemptConfig {
    /// The provider: wire format and error bodies.
    pub(crate) provider: &'static ProviderSpec,
    /// The longest wait for the response head after sending.
    pub(crate) first_byte_timeout: Duration,
    /// The longest wait between two content events.
    pub(crate) idle_timeout: Duration,
    /// The longest time for the whole response, retries included.
    pub(crate) total_timeout: Option<Duration>,
    /// Which failures are retried, and after how long.
    pub(crate) retry: RetryPolicy,
    /// Size limits on the response.
    pub(crate) limits: StreamLimits,
}

/// The head of an HTTP response, as the driver received it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResponseHead<'a> {
    /// The status code.
    pub(crate) status: u16,
    /// The response headers (content type, location, request id, retry-after …).
    pub(crate) headers: &'a HeaderMap,
    /// The URL the request was sent to.
    pub(crate) requested: &'a str,
    /// The URL that answered, after any redirect the HTTP client followed.
    pub(crate) url: &'a reqwest::Url,
    /// The wall-clock time the head arrived: a `retry-after` given as an HTTP date is
    /// relative to it.
    pub(crate) received: SystemTime,
}

/// What the driver must do next, taken from [`ExchangeMachine::poll`].
///
/// `Send`, `Read`, `Drain` and `SleepUntil` each ask for one input; the driver feeds it
/// before it polls again (polling again first gives the same action). A deadline of `None`
/// is no deadline (a timeout too long to represent).
#[derive(Debug)]
pub(crate) enum Action {
    /// Send the request (again). Feed [`ExchangeMachine::handle_head`] with the response head,
    /// [`ExchangeMachine::handle_error`] with why it could not be sent, or
    /// [`ExchangeMachine::handle_timeout`] when no head came by `deadline`.
    Send {
        /// When to give up waiting for the head.
        deadline: Option<Instant>,
    },
    /// Read the next piece of the response body: feed [`ExchangeMachine::handle_chunk`],
    /// [`ExchangeMachine::handle_end`], [`ExchangeMachine::handle_error`], or
    /// [`ExchangeMachine::handle_timeout`] when nothing came by `deadline`.
    Read {
        /// When to give up waiting for the next piece.
        deadline: Option<Instant>,
    },
    /// Read the rest of the body without using it, so that the connection goes back to the
    /// pool: fed like [`Action::Read`]; the machine only counts the bytes, and stops at a
    /// bound of time and size.
    Drain {
        /// When to stop draining.
        deadline: Option<Instant>,
    },
    /// Wait (a retry's backoff; the body is no longer needed), then feed
    /// [`ExchangeMachine::handle_timeout`].
    SleepUntil(Instant),
    /// Yield this event of the response.
    Emit(LlmEvent),
    /// A failure before any content is retried: report it (the stream itself goes on with
    /// the next attempt's events). The [`Action::SleepUntil`] of the backoff follows.
    Retry {
        /// 1 for the first retry.
        attempt: u32,
        /// The backoff before sending again.
        delay: Duration,
        /// What failed.
        error: LlmError,
    },
    /// The response failed: yield this error. The last action.
    Fail(LlmError),
    /// The response is complete. The last action.
    Done,
}

/// What follows a drain.
#[derive(Debug)]
enum AfterDrain {
    /// The response is complete: emit its `MessageStop` (held so that the connection is
    /// released before the caller, who may stop reading there, sees the end).
    Stop(LlmEvent),
    /// The decoder refused the body: this failure, retried or not.
    Fail(LlmError),
}

/// What the machine waits for.
#[derive(Debug)]
enum State {
    /// Not started.
    Idle,
    /// The response head.
    Sending {
        /// The first-byte deadline, or the total one when it comes first.
        deadline: Option<Instant>,
        /// The error when `deadline` passes.
        timeout: LlmError,
    },
    /// The body of a non-2xx answer: read up to [`MAX_ERROR_BODY`] for its message.
    ErrorBody {
        /// The error, with what the head said (status, request id, retry-after).
        error: Box<ApiError>,
        /// The body so far; never longer than [`MAX_ERROR_BODY`].
        body: Vec<u8>,
        deadline: Option<Instant>,
    },
    /// The body of a 2xx answer that is not an event stream: read whole (JSON) or its start
    /// (anything else), up to the limit of its kind plus one byte.
    WholeBody {
        kind: BodyKind,
        /// The `content-type` header as sent.
        content_type: String,
        /// The body so far; never longer than `whole_limit(kind)`.
        body: Vec<u8>,
        deadline: Option<Instant>,
    },
    /// The event stream: decoded, its events held or emitted.
    Streaming {
        decoder: Box<WireDecoder>,
        /// The last content event (or the head) plus the idle timeout.
        idle_deadline: Option<Instant>,
    },
    /// The rest of the body, after the end-of-message marker or a decoder error: read and
    /// ignored, for connection reuse.
    Draining {
        /// Bytes read so far.
        read: usize,
        deadline: Option<Instant>,
        then: AfterDrain,
    },
    /// A retry's backoff.
    Backoff {
        /// When to send again.
        until: Instant,
    },
    /// `Done` or `Fail` was queued: nothing more.
    Finished,
}

impl State {
    /// The state's name, for the report of an input it does not expect.
    fn name(&self) -> &'static str {
        match self {
            State::Idle => "not started",
            State::Sending { .. } => "waiting for the response head",
            State::ErrorBody { .. } => "reading an error body",
            State::WholeBody { .. } => "reading a whole body",
            State::Streaming { .. } => "reading the event stream",
            State::Draining { .. } => "draining the body",
            State::Backoff { .. } => "backing off",
            State::Finished => "finished",
        }
    }

    /// Whether the state reads the response body.
    fn reads_body(&self) -> bool {
        matches!(
            self,
            State::ErrorBody { .. }
                | State::WholeBody { .. }
                | State::Streaming { .. }
                | State::Draining { .. }
        )
    }
}

/// One streamed model response, across its attempts, as a sans-IO state machine.
///
/// Its states, named after what each waits for:
///
/// ```text
///          start(now)
///              │
///              ▼
///   ┌──────► Sending ── send error, first-byte/total timeout, 3xx, another origin ──► failure
///   │          │
///   │          ├─ 4xx/5xx ─► ErrorBody ── end, 64 KiB, error, timeout ─► ApiError ──► failure
///   │          │
///   │          ├─ 2xx JSON or other ─► WholeBody ── end, limit, error, timeout
///   │          │                                     └─► Emit(events…), Done  |  Fail
///   │          │
///   │          └─ 2xx event stream ─► Streaming ◄── chunk: decode; events held until the
///   │                                  │  │  │       first content, then Emit; content (not
///   │                                  │  │  │       pings, usage or block ends) moves the
///   │                                  │  │  │       idle deadline
///   │                                  │  │  └─ MessageStop ─► Draining ─► Emit(MessageStop), Done
///   │                                  │  └──── decoder error ─► Draining ──────────────► failure
///   │                                  └─────── transport error, idle/total timeout,
///   │                                           end before the end marker ─────────────► failure
///   │
///   │   failure ─┬─ after content; not retryable; retries used up;
///   │            │  the backoff would end past the total deadline ────────────────────► Fail
///   │            └─ otherwise: held events dropped, Retry ─► Backoff
///   │                                                              │
///   └──────────────────────────── timer ───────────────────────────┘
/// ```
///
/// `Draining` ends at the body's end or break, past 64 KiB, or after 300 ms.
///
/// A failure before any content is retried, reported as [`Action::Retry`], as [`RetryPolicy`]
/// decides; after content it is final. `Done` and `Fail` end in `Finished`, where nothing is
/// expected any more. An input a state does not expect is a bug in the driver: a debug
/// assertion, and in a release build the response fails with an error naming it.
#[derive(Debug)]
pub(crate) struct ExchangeMachine {
    config: AttemptConfig,
    state: State,
    /// Retries done so far.
    retries: u32,
    /// When the whole response must be over; set at start.
    total_deadline: Option<Instant>,
    /// Whether the current attempt's stream has given a content event.
    content_seen: bool,
    /// Events of the current attempt that came before its first content event; held back so
    /// that an attempt that fails before content leaves no trace but the `Retry` action.
    /// Never longer than [`MAX_HELD_EVENTS`].
    held: Vec<LlmEvent>,
    /// The decoder's output for one chunk; kept to reuse its allocation.
    scratch: Vec<LlmEvent>,
    /// Actions ready to be polled.
    out: VecDeque<Action>,
}

impl ExchangeMachine {
    /// A machine for one response, not started.
    pub(crate) fn new(config: AttemptConfig) -> Self {
        ExchangeMachine {
            config,
            state: State::Idle,
            retries: 0,
            total_deadline: None,
            content_seen: false,
            held: Vec::new(),
            scratch: Vec::new(),
            out: VecDeque::new(),
        }
    }

    /// Starts the response at `now` (the total timeout counts from here): the first action
    /// is [`Action::Send`].
    pub(crate) fn start(&mut self, now: Instant) {
        self.state = match self.take_state() {
            State::Idle => {
                self.total_deadline = self
                    .config
                    .total_timeout
                    .and_then(|total| now.checked_add(total));
                self.send(now)
            }
            other => self.unexpected(other, "start"),
        };
    }

    /// Whether [`start`](Self::start) was called.
    pub(crate) fn is_started(&self) -> bool {
        !matches!(self.state, State::Idle)
    }

    /// Whether the machine still reads the response body: when not, the driver drops it (a
    /// body read to its end has released its connection already; any other is closed).
    pub(crate) fn reads_body(&self) -> bool {
        self.state.reads_body()
    }

    /// The next thing to do; `None` before [`start`](Self::start) and after the last action.
    pub(crate) fn poll(&mut self) -> Option<Action> {
        if let Some(action) = self.out.pop_front() {
            return Some(action);
        }
        match &self.state {
            State::Idle | State::Finished => None,
            State::Sending { deadline, .. } => Some(Action::Send {
                deadline: *deadline,
            }),
            State::ErrorBody { deadline, .. } | State::WholeBody { deadline, .. } => {
                Some(Action::Read {
                    deadline: *deadline,
                })
            }
            State::Streaming { idle_deadline, .. } => Some(Action::Read {
                deadline: self.bounded(*idle_deadline),
            }),
            State::Draining { deadline, .. } => Some(Action::Drain {
                deadline: *deadline,
            }),
            State::Backoff { until } => Some(Action::SleepUntil(*until)),
        }
    }

    /// The response head arrived at `now`.
    pub(crate) fn handle_head(&mut self, head: &ResponseHead<'_>, now: Instant) {
        self.state = match self.take_state() {
            State::Sending { .. } => self.on_head(head, now),
            other => self.unexpected(other, "a response head"),
        };
    }

    /// A piece of the body arrived at `now`.
    pub(crate) fn handle_chunk(&mut self, chunk: &[u8], now: Instant) {
        self.state = match self.take_state() {
            State::Streaming {
                decoder,
                idle_deadline,
            } => self.on_chunk(decoder, idle_deadline, chunk, now),
            State::ErrorBody {
                error,
                mut body,
                deadline,
            } => {
                if append(&mut body, chunk, MAX_ERROR_BODY) {
                    self.on_error_body(*error, &body, now)
                } else {
                    State::ErrorBody {
                        error,
                        body,
                        deadline,
                    }
                }
            }
            State::WholeBody {
                kind,
                content_type,
                mut body,
                deadline,
            } => {
                if append(&mut body, chunk, self.whole_limit(kind)) {
                    self.on_whole_body(kind, content_type, &body)
                } else {
                    State::WholeBody {
                        kind,
                        content_type,
                        body,
                        deadline,
                    }
                }
            }
            State::Draining {
                read,
                deadline,
                then,
            } => {
                let read = read.saturating_add(chunk.len());
                if read > DRAIN_BYTES {
                    self.on_drained(then, now)
                } else {
                    State::Draining {
                        read,
                        deadline,
                        then,
                    }
                }
            }
            other => self.unexpected(other, "a body chunk"),
        };
    }

    /// The body ended at `now` (cleanly, as far as HTTP is concerned).
    pub(crate) fn handle_end(&mut self, now: Instant) {
        self.state = match self.take_state() {
            State::Streaming { decoder, .. } => self.on_end(decoder, now),
            State::ErrorBody { error, body, .. } => self.on_error_body(*error, &body, now),
            State::WholeBody {
                kind,
                content_type,
                body,
                ..
            } => self.on_whole_body(kind, content_type, &body),
            State::Draining { then, .. } => self.on_drained(then, now),
            other => self.unexpected(other, "the end of the body"),
        };
    }

    /// Sending the request, or reading its body, failed at `now` with `error`: the request
    /// could not be built or sent, the connection broke.
    pub(crate) fn handle_error(&mut self, error: LlmError, now: Instant) {
        self.state = match self.take_state() {
            State::Sending { .. } => self.retry_or_fail(error, now),
            // Not drained: the connection is gone.
            State::Streaming { .. } => self.failed(error, now),
            // What was read is all there is; the error itself is not what the server said.
            State::ErrorBody { error, body, .. } => self.on_error_body(*error, &body, now),
            State::WholeBody {
                kind,
                content_type,
                body,
                ..
            } => self.on_whole_body(kind, content_type, &body),
            State::Draining { then, .. } => self.on_drained(then, now),
            other => self.unexpected(other, "an error"),
        };
    }

    /// The deadline of the last [`Action::Send`], [`Action::Read`], [`Action::Drain`] or
    /// [`Action::SleepUntil`] passed; `now` is when the driver noticed.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.state = match self.take_state() {
            State::Sending { timeout, .. } => self.retry_or_fail(timeout, now),
            // Not drained: waiting is what went wrong.
            State::Streaming { idle_deadline, .. } => {
                let idle = self.config.idle_timeout;
                let error = self.timeout(TimeoutKind::Idle, idle, idle_deadline);
                self.failed(error, now)
            }
            // A slow error body: what came is the message.
            State::ErrorBody { error, body, .. } => self.on_error_body(*error, &body, now),
            State::WholeBody {
                kind,
                content_type,
                body,
                ..
            } => self.on_whole_body(kind, content_type, &body),
            State::Draining { then, .. } => self.on_drained(then, now),
            State::Backoff { .. } => self.send(now),
            other => self.unexpected(other, "a timer expiry"),
        };
    }

    /// The state, leaving `Finished` in its place until the transition sets the next one.
    fn take_state(&mut self) -> State {
        std::mem::replace(&mut self.state, State::Finished)
    }

    /// An input `state` does not expect: a bug in the driver, never silently dropped. A debug
    /// assertion; in a release build the response fails (unless it is already over).
    fn unexpected(&mut self, state: State, input: &str) -> State {
        debug_assert!(false, "ExchangeMachine: {input} fed while {}", state.name());
        tracing::error!(
            input,
            state = state.name(),
            "the HTTP driver fed an unexpected input"
        );
        match state {
            State::Finished => State::Finished,
            state => self.fail(LlmError::Transport {
                message: format!(
                    "internal error: the HTTP driver fed {input} while {} (a bug in agent-loop)",
                    state.name()
                ),
            }),
        }
    }

    /// A new attempt: send, and wait for the head until the first-byte deadline.
    fn send(&mut self, now: Instant) -> State {
        let first_byte = self.config.first_byte_timeout;
        let at = now.checked_add(first_byte);
        State::Sending {
            deadline: self.bounded(at),
            timeout: self.timeout(TimeoutKind::FirstByte, first_byte, at),
        }
    }

    /// `at`, or the total deadline when it comes first.
    fn bounded(&self, at: Option<Instant>) -> Option<Instant> {
        match (self.total_deadline, at) {
            (Some(total), Some(at)) => Some(total.min(at)),
            (total, at) => total.or(at),
        }
    }

    /// The error when the deadline `bounded(at)` passes: the total timeout when it is the
    /// nearer one, else `kind`, configured to `after`.
    fn timeout(&self, kind: TimeoutKind, after: Duration, at: Option<Instant>) -> LlmError {
        match (self.total_deadline, at) {
            (Some(total), at) if at.is_none_or(|at| total < at) => LlmError::Timeout {
                kind: TimeoutKind::Total,
                after: self.config.total_timeout.unwrap_or_default(),
            },
            _ => LlmError::Timeout { kind, after },
        }
    }

    /// The head of the current attempt's response.
    fn on_head(&mut self, head: &ResponseHead<'_>, now: Instant) -> State {
        if let Some(location) = cross_origin(head.requested, head.url) {
            // Only a client of the user's own, with a redirect policy that follows across
            // origins, gets here: its answer is not used.
            tracing::warn!(
                %location,
                "the HTTP client followed a redirect to another origin; set \
                 `redirect(agent_loop::provider::transport::redirect_policy())` on it so that credentials never \
                 leave the base URL's origin"
            );
            return self.retry_or_fail(LlmError::Redirected { location }, now);
        }
        if (300..400).contains(&head.status) {
            // Not followed (another origin, or too many hops).
            let location = head
                .headers
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| head.url.join(v).ok())
                .map_or_else(|| "no location given".to_owned(), |url| display_url(&url));
            return self.retry_or_fail(LlmError::Redirected { location }, now);
        }
        // A non-2xx body, or one read whole, is read until the idle deadline at most.
        let read_deadline = self.bounded(now.checked_add(self.config.idle_timeout));
        if !(200..300).contains(&head.status) {
            return State::ErrorBody {
                error: Box::new(api_error_head(head.status, head.headers, head.received)),
                body: Vec::new(),
                deadline: read_deadline,
            };
        }
        if let Some(id) = request_id(head.headers) {
            tracing::debug!(request_id = %id, "model response started");
        }
        let content_type = head
            .headers
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        match body_kind(self.config.provider.format, content_type.as_deref()) {
            BodyKind::EventStream => {
                self.content_seen = false;
                self.held.clear();
                let limits = RateLimits::from_headers_at(head.headers, head.received);
                if !limits.is_empty() {
                    self.accept(LlmEvent::RateLimits(Box::new(limits)));
                }
                State::Streaming {
                    decoder: Box::new(WireDecoder::with_limits(
                        self.config.provider.format,
                        self.config.limits,
                    )),
                    idle_deadline: now.checked_add(self.config.idle_timeout),
                }
            }
            kind => State::WholeBody {
                kind,
                content_type: content_type.unwrap_or_default(),
                body: Vec::new(),
                deadline: read_deadline,
            },
        }
    }

    /// One chunk of the event stream: decoded, its events routed.
    fn on_chunk(
        &mut self,
        mut decoder: Box<WireDecoder>,
        idle_deadline: Option<Instant>,
        chunk: &[u8],
        now: Instant,
    ) -> State {
        let mut events = std::mem::take(&mut self.scratch);
        let result = decoder.push(chunk, &mut events);
        let mut idle_deadline = idle_deadline;
        let stop = self.route(&mut events, &mut idle_deadline, now);
        self.scratch = events;
        match (stop, result) {
            // The response is complete: what follows the end marker is read only to release
            // the connection, never decoded (an error after it is not the response's).
            (Some(stop), _) => self.drain(AfterDrain::Stop(stop), now),
            // The decoder refused what it read (the provider's in-stream error, a malformed
            // event), but the HTTP body is sound and usually ends right after: read it to its
            // end as after the end-of-message marker, so that a retry or the next request
            // reuses the connection.
            (None, Err(error)) => self.drain(AfterDrain::Fail(error), now),
            (None, Ok(())) => State::Streaming {
                decoder,
                idle_deadline,
            },
        }
    }

    /// The end of the event stream.
    fn on_end(&mut self, mut decoder: Box<WireDecoder>, now: Instant) -> State {
        let mut events = std::mem::take(&mut self.scratch);
        let result = decoder.finish(&mut events);
        let mut idle_deadline = None;
        let stop = self.route(&mut events, &mut idle_deadline, now);
        self.scratch = events;
        match (stop, result) {
            // Nothing left to drain.
            (Some(stop), _) => {
                self.out.push_back(Action::Emit(stop));
                self.done()
            }
            // Ended before the end-of-message marker (or inside an event): the held events
            // are of a failed attempt.
            (None, Err(error)) => self.failed(error, now),
            (None, Ok(())) => {
                self.release_held();
                self.done()
            }
        }
    }

    /// Routes decoded events until a `MessageStop`, which is returned (with the held events
    /// released before it); the events after it are dropped.
    fn route(
        &mut self,
        events: &mut Vec<LlmEvent>,
        idle_deadline: &mut Option<Instant>,
        now: Instant,
    ) -> Option<LlmEvent> {
        for event in events.drain(..) {
            if matches!(event, LlmEvent::MessageStop { .. }) {
                self.release_held();
                return Some(event);
            }
            if event.is_content() {
                self.content_seen = true;
                *idle_deadline = now.checked_add(self.config.idle_timeout);
            }
            self.accept(event);
        }
        None
    }

    /// Emits one event, or holds it while the attempt has given no content.
    fn accept(&mut self, event: LlmEvent) {
        if self.content_seen {
            self.release_held();
            self.out.push_back(Action::Emit(event));
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
                self.release_held();
                self.out.push_back(Action::Emit(event));
            }
        }
    }

    /// Emits the held events, in order.
    fn release_held(&mut self) {
        self.out.extend(self.held.drain(..).map(Action::Emit));
    }

    /// Starts reading the rest of the body without using it.
    fn drain(&mut self, then: AfterDrain, now: Instant) -> State {
        State::Draining {
            read: 0,
            deadline: now.checked_add(DRAIN_TIME),
            then,
        }
    }

    /// The drain is over (the body ended, broke, went over the bound or the time).
    fn on_drained(&mut self, then: AfterDrain, now: Instant) -> State {
        match then {
            AfterDrain::Stop(stop) => {
                self.out.push_back(Action::Emit(stop));
                self.done()
            }
            AfterDrain::Fail(error) => self.failed(error, now),
        }
    }

    /// A failure of the event stream: final after content, else retried if it may be.
    fn failed(&mut self, error: LlmError, now: Instant) -> State {
        let error = unparsed_output(error);
        if self.content_seen {
            // Never re-sent after content: the caller decides.
            self.fail(error)
        } else {
            self.retry_or_fail(error, now)
        }
    }

    /// Decides what a failure before any content means: a `Retry` action and a backoff, or
    /// the response's final error.
    ///
    /// A [`LlmError::ModelFailure`] is not re-sent here: the same request gives the same
    /// output at temperature 0 (llama.cpp's parse failure, see [`unparsed_output`]); the
    /// agent sends its turn again with a note to the model instead, which changes the request.
    fn retry_or_fail(&mut self, error: LlmError, now: Instant) -> State {
        self.held.clear();
        let error = unparsed_output(error);
        if matches!(error, LlmError::ModelFailure { .. }) {
            return self.fail(error);
        }
        let attempt = self.retries.saturating_add(1);
        let retry = self
            .config
            .retry
            .delay_for(attempt, &error)
            .and_then(|delay| Some((delay, now.checked_add(delay)?)))
            // A retry that cannot start before the total deadline is pointless.
            .filter(|(_, until)| self.total_deadline.is_none_or(|total| *until < total));
        match retry {
            Some((delay, until)) => {
                self.retries = attempt;
                self.out.push_back(Action::Retry {
                    attempt,
                    delay,
                    error,
                });
                State::Backoff { until }
            }
            None => self.fail(error),
        }
    }

    /// Ends the response with `error`.
    fn fail(&mut self, error: LlmError) -> State {
        self.held.clear();
        self.out.push_back(Action::Fail(error));
        State::Finished
    }

    /// Ends the response after its events.
    fn done(&mut self) -> State {
        self.out.push_back(Action::Done);
        State::Finished
    }

    /// The non-2xx answer's body was read (or as much of it as will be): its error, retried
    /// if it may be.
    fn on_error_body(&mut self, error: ApiError, body: &[u8], now: Instant) -> State {
        let error = api_error_body(self.config.provider, error, body);
        self.retry_or_fail(error, now)
    }

    /// How much of a whole body of `kind` is read: one byte over what is accepted, to tell a
    /// body at the limit from one over it.
    fn whole_limit(&self, kind: BodyKind) -> usize {
        match kind {
            BodyKind::Json => self.config.limits.max_response_bytes,
            _ => UNEXPECTED_BODY_PREFIX,
        }
        .saturating_add(1)
    }

    /// A 2xx answer that is not an event stream, read: a whole JSON message decodes into the
    /// events a stream would give; anything else is refused with its content type and first
    /// bytes. Neither is retried: the body was read whole, whatever it held.
    fn on_whole_body(&mut self, kind: BodyKind, content_type: String, body: &[u8]) -> State {
        if kind != BodyKind::Json {
            let start = body.get(..UNEXPECTED_BODY_PREFIX).unwrap_or(body);
            let body_start: String = String::from_utf8_lossy(start)
                .chars()
                .take(UNEXPECTED_BODY_PREFIX)
                .collect();
            return self.fail(LlmError::UnexpectedContentType {
                content_type,
                body_start,
            });
        }
        let limit = self.config.limits.max_response_bytes;
        if body.len() > limit {
            return self.fail(LlmError::LimitExceeded {
                what: "a whole JSON response".into(),
                limit,
                setting: "StreamLimits::max_response_bytes".into(),
            });
        }
        let mut events = std::mem::take(&mut self.scratch);
        let result = WireDecoder::with_limits(self.config.provider.format, self.config.limits)
            .decode_json(body, &mut events);
        let state = match result {
            Ok(()) => {
                for event in events.drain(..) {
                    let stop = matches!(event, LlmEvent::MessageStop { .. });
                    self.out.push_back(Action::Emit(event));
                    if stop {
                        break;
                    }
                }
                self.done()
            }
            Err(error) => self.fail(error),
        };
        events.clear();
        self.scratch = events;
        state
    }
}

/// Appends to `body` what of `chunk` fits under `limit`; true when the body is full.
fn append(body: &mut Vec<u8>, chunk: &[u8], limit: usize) -> bool {
    let room = limit.saturating_sub(body.len());
    body.extend_from_slice(chunk.get(..room).unwrap_or(chunk));
    body.len() >= limit
}

/// One request answered by one whole JSON body (not a stream; OpenAI's `/responses/compact`):
/// what the driver reads of it, decided here as the exchange machine decides for a stream.
/// A 2xx body is kept up to `limit` bytes (more is [`LlmError::LimitExceeded`]); a non-2xx
/// answer's body is read up to [`MAX_ERROR_BODY`] for its message, and classified as a
/// stream's error is.
#[derive(Debug)]
pub(crate) struct WholeBody {
    provider: &'static ProviderSpec,
    /// The error of a non-2xx answer, its body still to read.
    failed: Option<ApiError>,
    body: Vec<u8>,
    limit: usize,
    setting: &'static str,
}

impl WholeBody {
    /// The answer's head: its status and headers (read at wall-clock time `received`).
    pub(crate) fn new(
        provider: &'static ProviderSpec,
        status: u16,
        headers: &HeaderMap,
        received: SystemTime,
        limit: usize,
        setting: &'static str,
    ) -> Self {
        let failed =
            (!(200..300).contains(&status)).then(|| api_error_head(status, headers, received));
        WholeBody {
            provider,
            limit: if failed.is_some() {
                MAX_ERROR_BODY
            } else {
                limit
            },
            failed,
            body: Vec::new(),
            setting,
        }
    }

    /// A chunk of the body: `Ok(true)` to read on, `Ok(false)` when enough is read (an
    /// error's message), an error when a 2xx body goes over the limit.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<bool, LlmError> {
        if self.failed.is_some() {
            return Ok(!append(&mut self.body, chunk, self.limit));
        }
        if self.body.len().saturating_add(chunk.len()) > self.limit {
            return Err(LlmError::LimitExceeded {
                what: "a response body".into(),
                limit: self.limit,
                setting: self.setting.into(),
            });
        }
        self.body.extend_from_slice(chunk);
        Ok(true)
    }

    /// The body once read: the 2xx body, or the answer's error.
    pub(crate) fn finish(self) -> Result<Vec<u8>, LlmError> {
        match self.failed {
            Some(error) => Err(api_error_body(self.provider, error, &self.body)),
            None => Ok(self.body),
        }
    }
}

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

fn body_kind(format: WireFormat, content_type: Option<&str>) -> BodyKind {
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
        "" => BodyKind::EventStream,
        // Each format's own streaming type: SSE, AWS event stream (Bedrock), NDJSON (Ollama).
        essence if essence == format.stream_content_type() => BodyKind::EventStream,
        "application/json" => BodyKind::Json,
        other if other.ends_with("+json") => BodyKind::Json,
        _ => BodyKind::Unexpected,
    }
}

/// A URL as shown in errors and logs: scheme, host, port and path, never the query (where
/// some gateways take a key) or user information.
pub(crate) fn display_url(url: &reqwest::Url) -> String {
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

/// What the head of a non-2xx answer says: its status, request id, requested delay
/// (relative to `received`, the wall-clock time of the head) and `x-should-retry`.
fn api_error_head(status: u16, headers: &HeaderMap, received: SystemTime) -> ApiError {
    let mut error = ApiError::new(status, String::new());
    // AWS names the error in a header (`ThrottlingException:http://internal.amazon.com/…`);
    // a provider's error body may name it again.
    error.error_type = header(headers, "x-amzn-errortype")
        .and_then(|t| t.split(':').next().map(str::to_owned))
        .filter(|t| !t.is_empty());
    error.request_id = request_id(headers);
    error.retry_after = retry_after(headers, received);
    error.should_retry = match header(headers, "x-should-retry").as_deref() {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    let limits = RateLimits::from_headers_at(headers, received);
    error.rate_limits = (!limits.is_empty()).then_some(limits);
    error
}

/// Completes the error of a non-2xx answer with its body (the provider's JSON error, else the
/// start of the text, else the status's reason) and classifies it.
pub(crate) fn api_error_body(
    provider: &ProviderSpec,
    mut error: ApiError,
    body: &[u8],
) -> LlmError {
    if !(provider.parse_error_body)(body, &mut error) || error.message.is_empty() {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        error.message = if text.is_empty() {
            reqwest::StatusCode::from_u16(error.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no error message")
                .to_owned()
        } else {
            text.chars().take(MAX_ERROR_TEXT).collect()
        };
    }
    if error.status == 401 {
        error.message = format!("{} (check {})", error.message, provider.auth_hint);
    }
    if error.status == 413 || (provider.is_context_overflow)(&error) {
        LlmError::ContextOverflow(Box::new(error))
    } else {
        LlmError::Api(Box::new(error))
    }
}

/// How llama.cpp's server says that it could not parse the model's output into its chat
/// format (text and tool calls): `common_chat_parse` (common/chat.cpp) throws "The model
/// produced output that does not match the expected <format> format", which the server sends
/// as `{"error":{"code":500,"message":…,"type":"server_error"}}`: with status 500 when it
/// comes before the stream (tools/server/server.cpp, `ex_wrapper`), or as the stream's last
/// event after content (`data: {"error":…}` on `/v1/chat/completions`, `event: error` on
/// `/v1/messages`).
const UNPARSED_OUTPUT: &str = "The model produced output that does not match the expected";

/// The reason of the [`LlmError::ModelFailure`] that llama.cpp's parse failure becomes.
pub(crate) const UNPARSED_OUTPUT_REASON: &str = "unparsed_output";

/// llama.cpp's parse failure of the model's output (see [`UNPARSED_OUTPUT`]) as what it is: a
/// [`LlmError::ModelFailure`], the model's doing, not the server's. Its 500 is no transient
/// fault: at temperature 0 the same request gives the same output and the same failure, so
/// it is not sent again as it was; the agent sends the turn once more with a note to the
/// model. Any other error is returned as it is.
fn unparsed_output(error: LlmError) -> LlmError {
    let message = match &error {
        LlmError::Api(api) if api.status == 500 => &api.message,
        LlmError::Stream { message, .. } => message,
        _ => return error,
    };
    let Some(start) = message.find(UNPARSED_OUTPUT) else {
        return error;
    };
    // The message alone (an in-stream error whose data was not in the expected shape keeps
    // the whole JSON as its message): up to the string's end.
    let said = message.get(start..).unwrap_or_default();
    let said = said.split('"').next().unwrap_or(said).trim_end();
    LlmError::ModelFailure {
        reason: UNPARSED_OUTPUT_REASON.to_owned(),
        message: format!(
            "{said} (the server could not read the model's output as text or a tool call)"
        ),
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.chars().take(200).collect())
}

/// The server's requested delay: `retry-after-ms` (milliseconds), else `retry-after` (seconds
/// or an HTTP date, relative to `now`).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
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

#[cfg(test)]
mod tests {
    //! The machine driven by hand: no socket, no runtime, and every instant an explicit offset
    //! from an origin, so no timing decides a test.

    use reqwest::header::HeaderValue;

    use super::*;
    use crate::provider::transport::retry::Jitter;

    /// An Anthropic-shaped provider: `{"error":{"type":…,"message":…}}` bodies, overflow when
    /// a 400 says "prompt is too long".
    static SPEC: ProviderSpec = ProviderSpec {
        format: WireFormat::Anthropic,
        parse_error_body,
        is_context_overflow: |error| {
            error.status == 400 && error.message.contains("prompt is too long")
        },
        auth_hint: "the test key",
    };

    fn parse_error_body(body: &[u8], error: &mut ApiError) -> bool {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            return false;
        };
        let Some(inner) = value.get("error") else {
            return false;
        };
        error.error_type = inner["type"].as_str().map(str::to_owned);
        error.message = inner["message"].as_str().unwrap_or_default().to_owned();
        true
    }

    /// 10 s first byte, 5 s idle, no total; 3 retries from 100 ms, doubling, no jitter.
    fn config() -> AttemptConfig {
        AttemptConfig {
            provider: &SPEC,
            first_byte_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5),
            total_timeout: None,
            retry: RetryPolicy::default()
                .max_retries(3)
                .initial_backoff(Duration::from_millis(100))
                .jitter(Jitter::None),
            limits: StreamLimits::default(),
        }
    }

    const URL: &str = "https://api.test/v1/messages";

    /// A started machine and the origin of its time: `ms` arguments are offsets from it.
    struct Harness {
        machine: ExchangeMachine,
        t0: Instant,
    }

    impl Harness {
        fn new(config: AttemptConfig) -> Self {
            // Only an origin: every instant the test feeds is an offset from it.
            let t0 = Instant::now();
            let mut machine = ExchangeMachine::new(config);
            assert!(machine.poll().is_none(), "nothing to do before start");
            machine.start(t0);
            Harness { machine, t0 }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        /// An instant as an offset from the origin.
        fn offset(&self, at: Option<Instant>) -> String {
            match at {
                Some(at) => format!("{}ms", at.duration_since(self.t0).as_millis()),
                None => "never".to_owned(),
            }
        }

        /// The actions up to the next wait (included) or the end, compactly.
        fn next(&mut self) -> Vec<String> {
            let mut shown = Vec::new();
            while let Some(action) = self.machine.poll() {
                let wait = matches!(
                    action,
                    Action::Send { .. }
                        | Action::Read { .. }
                        | Action::Drain { .. }
                        | Action::SleepUntil(_)
                );
                shown.push(self.show(&action));
                if wait {
                    break;
                }
            }
            shown
        }

        fn show(&self, action: &Action) -> String {
            match action {
                Action::Send { deadline } => format!("Send by {}", self.offset(*deadline)),
                Action::Read { deadline } => format!("Read by {}", self.offset(*deadline)),
                Action::Drain { deadline } => format!("Drain by {}", self.offset(*deadline)),
                Action::SleepUntil(at) => format!("Sleep until {}", self.offset(Some(*at))),
                Action::Emit(event) => show_event(event),
                Action::Retry {
                    attempt,
                    delay,
                    error,
                } => format!("Retry {attempt} {delay:?}: {error}"),
                Action::Fail(error) => format!("Fail: {error}"),
                Action::Done => "Done".to_owned(),
            }
        }

        fn head(&mut self, ms: u64, status: u16, headers: &[(&'static str, &str)]) {
            self.head_from(ms, status, headers, URL);
        }

        /// A head answered by `url` (after redirects the HTTP client followed).
        fn head_from(&mut self, ms: u64, status: u16, headers: &[(&'static str, &str)], url: &str) {
            let headers = header_map(headers);
            let url = reqwest::Url::parse(url).unwrap();
            let head = ResponseHead {
                status,
                headers: &headers,
                requested: URL,
                url: &url,
                received: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000),
            };
            let now = self.at(ms);
            self.machine.handle_head(&head, now);
        }

        fn stream_head(&mut self, ms: u64) {
            self.head(ms, 200, &[("content-type", "text/event-stream")]);
        }

        fn chunk(&mut self, ms: u64, chunk: impl AsRef<[u8]>) {
            let now = self.at(ms);
            self.machine.handle_chunk(chunk.as_ref(), now);
        }

        fn end(&mut self, ms: u64) {
            let now = self.at(ms);
            self.machine.handle_end(now);
        }

        fn error(&mut self, ms: u64, error: LlmError) {
            let now = self.at(ms);
            self.machine.handle_error(error, now);
        }

        fn timeout(&mut self, ms: u64) {
            let now = self.at(ms);
            self.machine.handle_timeout(now);
        }
    }

    fn header_map(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn show_event(event: &LlmEvent) -> String {
        match event {
            LlmEvent::MessageStart { id, .. } => format!("MessageStart {id}"),
            LlmEvent::Usage(usage) => format!("Usage {}", usage.output_tokens),
            LlmEvent::TextDelta { text, .. } => format!("Text {text}"),
            LlmEvent::BlockStop { index } => format!("BlockStop {index}"),
            LlmEvent::MessageStop { stop_reason } => format!("Stop {stop_reason:?}"),
            LlmEvent::RateLimits(r) => format!("RateLimits {:?}", r.requests.remaining),
            other => format!("{other:?}"),
        }
    }

    fn connect_error() -> LlmError {
        LlmError::Connect {
            message: "refused".into(),
        }
    }

    // Anthropic stream pieces.

    fn message_start(id: &str) -> String {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\
             \"model\":\"m\",\"usage\":{{\"input_tokens\":3,\"output_tokens\":1}}}}}}\n\n"
        )
    }

    fn usage(output_tokens: u32) -> String {
        format!(
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{}},\
             \"usage\":{{\"output_tokens\":{output_tokens}}}}}\n\n"
        )
    }

    /// A text block whose start carries the text: one `TextDelta`.
    fn text(text: &str) -> String {
        format!(
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\
             \"content_block\":{{\"type\":\"text\",\"text\":\"{text}\"}}}}\n\n"
        )
    }

    const PING: &str = "event: ping\ndata: {\"type\":\"ping\"}\n\n: keep-alive comment\n\n";

    const STOP: &str = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\
         \"usage\":{\"output_tokens\":2}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    const OVERLOADED: &str = "event: error\ndata: {\"type\":\"error\",\"error\":\
         {\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";

    /// A whole response as one chunk.
    fn whole_stream(id: &str, words: &str) -> String {
        format!("{}{}{STOP}", message_start(id), text(words))
    }

    /// The expected actions of a complete response after its drain's end.
    const STOPPED: [&str; 2] = ["Stop EndTurn", "Done"];

    // ---------------------------------------------------------------------------------------
    // The happy path, and the machine's contract.

    #[test]
    fn a_stream_is_sent_read_decoded_drained_and_done() {
        let mut h = Harness::new(config());
        assert_eq!(h.next(), ["Send by 10000ms"]);
        assert_eq!(h.next(), ["Send by 10000ms"], "a wait repeats until fed");
        h.stream_head(40);
        assert!(h.machine.reads_body());
        assert_eq!(h.next(), ["Read by 5040ms"]);
        h.chunk(50, whole_stream("msg_1", "Hi"));
        assert_eq!(
            h.next(),
            [
                "MessageStart msg_1",
                "Usage 1",
                "Text Hi",
                "BlockStop 0",
                "Usage 2",
                "Drain by 350ms"
            ]
        );
        h.end(60);
        assert_eq!(h.next(), STOPPED);
        assert!(!h.machine.reads_body());
        assert!(h.machine.poll().is_none(), "nothing after Done");
    }

    // ---------------------------------------------------------------------------------------
    // Retry classification and backoff.

    #[test]
    fn a_transient_status_before_content_is_retried_after_the_backoff() {
        let mut h = Harness::new(config());
        h.next();
        h.head(100, 503, &[("request-id", "req_1")]);
        assert_eq!(h.next(), ["Read by 5100ms"], "the error body is read first");
        h.chunk(
            110,
            r#"{"error":{"type":"api_error","message":"try later"}}"#,
        );
        h.end(120);
        assert_eq!(
            h.next(),
            [
                "Retry 1 100ms: model API error: HTTP 503 api_error: try later (request id req_1)",
                "Sleep until 220ms"
            ]
        );
        assert!(
            !h.machine.reads_body(),
            "the body is let go during the backoff"
        );
        h.timeout(220);
        assert_eq!(h.next(), ["Send by 10220ms"], "then sent again");
        h.stream_head(300);
        h.chunk(310, whole_stream("msg_2", "ok"));
        h.end(320);
        let actions = h.next();
        assert_eq!(
            actions.first().map(String::as_str),
            Some("MessageStart msg_2")
        );
        assert_eq!(actions.last().map(String::as_str), Some("Done"));
    }

    #[test]
    fn the_backoff_grows_and_the_retries_run_out() {
        let mut h = Harness::new(config());
        let mut at = 0;
        for (attempt, delay) in [(1, 100), (2, 200), (3, 400)] {
            h.next();
            h.error(at, connect_error());
            assert_eq!(
                h.next(),
                [
                    format!(
                        "Retry {attempt} {:?}: could not reach the model server: refused",
                        Duration::from_millis(delay)
                    ),
                    format!("Sleep until {}ms", at + delay),
                ]
            );
            at += delay;
            h.timeout(at);
        }
        h.next();
        h.error(at, connect_error());
        assert_eq!(
            h.next(),
            ["Fail: could not reach the model server: refused"]
        );
        assert!(h.machine.poll().is_none());
    }

    #[test]
    fn client_errors_are_not_retried_and_carry_the_providers_message() {
        let cases: [(u16, &str, &str); 5] = [
            (
                400,
                r#"{"error":{"type":"invalid_request_error","message":"bad field"}}"#,
                "Fail: model API error: HTTP 400 invalid_request_error: bad field",
            ),
            (
                401,
                r#"{"error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
                "Fail: model API error: HTTP 401 authentication_error: invalid x-api-key \
                 (check the test key)",
            ),
            (
                400,
                r#"{"error":{"type":"invalid_request_error","message":"prompt is too long: 9 > 8"}}"#,
                "Fail: the request is too long for the model's context window: HTTP 400 \
                 invalid_request_error: prompt is too long: 9 > 8",
            ),
            (
                413,
                "request entity too large",
                "Fail: the request is too long for the model's context window: HTTP 413: \
                 request entity too large",
            ),
            (404, "", "Fail: model API error: HTTP 404: Not Found"),
        ];
        for (status, body, expected) in cases {
            let mut h = Harness::new(config());
            h.next();
            h.head(0, status, &[]);
            h.chunk(1, body);
            h.end(2);
            assert_eq!(h.next(), [expected], "{status} {body}");
        }
    }

    #[test]
    fn x_should_retry_overrides_the_status_but_never_for_a_client_error() {
        for (status, verdict, retried) in [
            (503, "false", false),
            (400, "true", false),
            (409, "false", false),
            (418, "true", true),
        ] {
            let mut h = Harness::new(config());
            h.next();
            h.head(0, status, &[("x-should-retry", verdict)]);
            h.end(1);
            let actions = h.next();
            assert_eq!(
                actions[0].starts_with("Retry 1"),
                retried,
                "{status} x-should-retry: {verdict}: {actions:?}"
            );
        }
    }

    #[test]
    fn rate_limit_headers_are_an_event_before_the_content_or_a_part_of_the_error() {
        let limits = [
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
        ];
        let mut h = Harness::new(config());
        h.next();
        h.head(
            0,
            200,
            &[&[("content-type", "text/event-stream")], &limits[..]].concat(),
        );
        h.next();
        h.chunk(1, whole_stream("msg_1", "Hi"));
        assert_eq!(
            h.next()[..3],
            ["RateLimits Some(59)", "MessageStart msg_1", "Usage 1"]
        );
        // A head without figures gives no event.
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.next();
        h.chunk(1, whole_stream("msg_1", "Hi"));
        assert_eq!(h.next()[0], "MessageStart msg_1");
        // An error's figures are kept on it.
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 429, &[&[("retry-after", "600")], &limits[..]].concat());
        h.end(1);
        let Some(Action::Fail(LlmError::Api(error))) = h.machine.poll() else {
            panic!("not a failure");
        };
        let figures = error.rate_limits.expect("the 429's figures");
        assert_eq!(figures.requests.remaining, Some(59));
        assert_eq!(figures.requests.reset, Some(Duration::from_secs(1)));
        assert_eq!(figures.retry_after, Some(Duration::from_secs(600)));
    }

    #[test]
    fn retry_after_is_honoured_in_every_form() {
        let date =
            httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + 30));
        for (headers, delay) in [
            (vec![("retry-after", "7")], "7s"),
            (
                vec![("retry-after", "7"), ("retry-after-ms", "1500")],
                "1.5s",
            ),
            // Relative to the wall-clock time of the head, which the driver passes in.
            (vec![("retry-after", date.as_str())], "30s"),
        ] {
            let mut h = Harness::new(config());
            h.next();
            h.head(0, 429, &headers);
            h.end(1);
            let actions = h.next();
            assert!(
                actions[0].starts_with(&format!("Retry 1 {delay}: ")),
                "{headers:?}: {actions:?}"
            );
        }
        // A wait longer than the policy honours is not retried; the error tells it.
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 429, &[("retry-after", "600")]);
        h.end(1);
        let Some(Action::Fail(LlmError::Api(error))) = h.machine.poll() else {
            panic!("not a failure");
        };
        assert_eq!(error.retry_after, Some(Duration::from_secs(600)));
    }

    #[test]
    fn not_retried_after_content() {
        // A broken connection, an idle timeout, an in-stream error, a truncation: all final
        // once text has been emitted.
        type Break = fn(&mut Harness);
        let breaks: [(&str, Break, &str); 4] = [
            ("transport", |h| h.error(3000, LlmError::Transport { message: "reset".into() }),
             "Fail: connection lost while reading the response: reset"),
            ("idle", |h| h.timeout(5010), "Fail: idle timeout: nothing arrived within 5s"),
            ("error event", |h| {
                h.chunk(3000, OVERLOADED);
                assert_eq!(h.next(), ["Drain by 3300ms"]);
                h.end(3010);
            }, "Fail: the model server reported an error mid-stream (overloaded_error): Overloaded"),
            ("truncation", |h| h.end(3000),
             "Fail: stream ended before the response was complete (no message_stop event)"),
        ];
        for (what, broken, expected) in breaks {
            let mut h = Harness::new(config());
            h.next();
            h.stream_head(0);
            h.chunk(10, format!("{}{}", message_start("m"), text("Hel")));
            assert_eq!(
                h.next(),
                ["MessageStart m", "Usage 1", "Text Hel", "Read by 5010ms"]
            );
            broken(&mut h);
            assert_eq!(h.next(), [expected], "{what}");
        }
    }

    #[test]
    fn not_retried_when_the_backoff_cannot_end_before_the_total_deadline() {
        let total = AttemptConfig {
            total_timeout: Some(Duration::from_secs(1)),
            ..config()
        };
        // A backoff of 100 ms after a failure at 899 ms ends before 1 s: retried.
        let mut h = Harness::new(total.clone());
        h.next();
        h.error(899, connect_error());
        assert_eq!(h.next()[1], "Sleep until 999ms");
        // At 900 ms it would end just at the deadline: pointless, so the failure is final.
        let mut h = Harness::new(total);
        h.next();
        h.error(900, connect_error());
        assert_eq!(
            h.next(),
            ["Fail: could not reach the model server: refused"]
        );
    }

    #[test]
    fn refusals_and_encoding_errors_are_never_retried() {
        for error in [
            LlmError::InvalidRequest {
                message: "could not encode".into(),
            },
            LlmError::Redirected {
                location: "https://elsewhere.test/".into(),
            },
        ] {
            let mut h = Harness::new(config());
            h.next();
            let expected = format!("Fail: {error}");
            h.error(0, error);
            assert_eq!(h.next(), [expected]);
        }
    }

    // ---------------------------------------------------------------------------------------
    // First-byte, idle and total timeouts.

    #[test]
    fn a_missing_head_is_a_first_byte_timeout_and_is_retried() {
        let mut h = Harness::new(config());
        assert_eq!(h.next(), ["Send by 10000ms"]);
        h.timeout(10_000);
        assert_eq!(
            h.next(),
            [
                "Retry 1 100ms: first-byte timeout: nothing arrived within 10s",
                "Sleep until 10100ms"
            ]
        );
        h.timeout(10_100);
        assert_eq!(
            h.next(),
            ["Send by 20100ms"],
            "a new first-byte deadline per attempt"
        );
    }

    #[test]
    fn the_idle_deadline_moves_with_content_only_never_with_pings_or_usage() {
        let mut h = Harness::new(AttemptConfig {
            retry: RetryPolicy::none(),
            ..config()
        });
        h.next();
        h.stream_head(0);
        assert_eq!(h.next(), ["Read by 5000ms"]);
        h.chunk(1000, format!("{}{}", message_start("m"), text("a")));
        assert_eq!(h.next().last().map(String::as_str), Some("Read by 6000ms"));
        // Keep-alives, usage and block ends are not content.
        for at in [2000, 3000, 4000, 5000, 5999] {
            h.chunk(at, PING);
            h.chunk(at, usage(7));
            h.chunk(at, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
            let actions = h.next();
            assert_eq!(
                actions.last().map(String::as_str),
                Some("Read by 6000ms"),
                "{actions:?}"
            );
        }
        h.timeout(6000);
        assert_eq!(h.next(), ["Fail: idle timeout: nothing arrived within 5s"]);
    }

    #[test]
    fn an_idle_timeout_before_content_is_retried_without_a_drain() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(100, format!("{}{PING}", message_start("m")));
        assert_eq!(
            h.next(),
            ["Read by 5000ms"],
            "pings before content move nothing either"
        );
        h.timeout(5000);
        assert_eq!(
            h.next(),
            [
                "Retry 1 100ms: idle timeout: nothing arrived within 5s",
                "Sleep until 5100ms"
            ]
        );
    }

    #[test]
    fn the_total_deadline_bounds_every_wait_and_is_named_when_it_is_the_nearer() {
        let mut h = Harness::new(AttemptConfig {
            total_timeout: Some(Duration::from_secs(8)),
            ..config()
        });
        assert_eq!(
            h.next(),
            ["Send by 8000ms"],
            "nearer than the first byte's 10 s"
        );
        h.error(1000, connect_error());
        assert_eq!(h.next()[1], "Sleep until 1100ms");
        h.timeout(1100);
        assert_eq!(
            h.next(),
            ["Send by 8000ms"],
            "the total counts across retries"
        );
        h.stream_head(2000);
        assert_eq!(h.next(), ["Read by 7000ms"], "the idle deadline is nearer");
        h.chunk(4000, format!("{}{}", message_start("m"), text("a")));
        assert_eq!(h.next().last().map(String::as_str), Some("Read by 8000ms"));
        h.timeout(8000);
        assert_eq!(h.next(), ["Fail: total timeout: nothing arrived within 8s"]);

        // Before content, a total timeout leaves no time for a retry either.
        let mut h = Harness::new(AttemptConfig {
            total_timeout: Some(Duration::from_secs(8)),
            ..config()
        });
        h.next();
        h.timeout(8000);
        assert_eq!(h.next(), ["Fail: total timeout: nothing arrived within 8s"]);
    }

    #[test]
    fn a_timeout_too_long_to_represent_is_no_deadline() {
        let mut h = Harness::new(AttemptConfig {
            first_byte_timeout: Duration::MAX,
            idle_timeout: Duration::MAX,
            ..config()
        });
        assert_eq!(h.next(), ["Send by never"]);
        h.stream_head(0);
        assert_eq!(h.next(), ["Read by never"]);
    }

    // ---------------------------------------------------------------------------------------
    // The early-event hold.

    #[test]
    fn events_before_content_are_held_then_released_in_order() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(10, message_start("m"));
        assert_eq!(h.next(), ["Read by 5000ms"], "held");
        h.chunk(20, text("Hi"));
        assert_eq!(
            h.next(),
            ["MessageStart m", "Usage 1", "Text Hi", "Read by 5020ms"]
        );
    }

    #[test]
    fn held_events_are_dropped_on_a_retry() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(10, format!("{}{OVERLOADED}", message_start("first")));
        assert_eq!(
            h.next(),
            ["Drain by 310ms"],
            "an in-stream error: drained first"
        );
        h.end(20);
        assert_eq!(
            h.next(),
            [
                "Retry 1 100ms: the model server reported an error mid-stream (overloaded_error): \
                 Overloaded",
                "Sleep until 120ms"
            ]
        );
        h.timeout(120);
        h.next();
        h.stream_head(130);
        h.chunk(140, whole_stream("second", "ok"));
        assert_eq!(
            h.next()[..2],
            ["MessageStart second", "Usage 1"],
            "no trace of the first"
        );
    }

    #[test]
    fn a_body_that_ends_without_its_marker_before_content_leaves_no_held_event() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(10, message_start("cut"));
        h.end(20);
        assert_eq!(
            h.next(),
            [
                "Retry 1 100ms: stream ended before the response was complete (no \
                 message_stop event)",
                "Sleep until 120ms"
            ]
        );
    }

    #[test]
    fn a_repeated_usage_or_message_start_replaces_the_held_one() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(10, format!("{}{}", message_start("a"), usage(5)));
        h.chunk(20, format!("{}{}", message_start("b"), usage(6)));
        assert_eq!(h.next(), ["Read by 5000ms"]);
        h.chunk(30, text("x"));
        assert_eq!(
            h.next(),
            ["MessageStart b", "Usage 6", "Text x", "Read by 5030ms"]
        );
    }

    #[test]
    fn the_hold_is_bounded_at_64_events() {
        let block_stop =
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n";
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(10, message_start("m"));
        // MessageStart and Usage are two of the 64.
        h.chunk(10, block_stop.repeat(MAX_HELD_EVENTS - 2));
        assert_eq!(h.next(), ["Read by 5000ms"], "64 held");
        assert_eq!(h.machine.held.len(), MAX_HELD_EVENTS);
        h.chunk(20, block_stop);
        let actions = h.next();
        assert_eq!(
            actions.len(),
            MAX_HELD_EVENTS + 2,
            "all released, in order: {actions:?}"
        );
        assert_eq!(actions[..3], ["MessageStart m", "Usage 1", "BlockStop 0"]);
        assert!(h.machine.held.is_empty());
    }

    #[test]
    fn a_message_stop_releases_the_held_events_of_an_empty_answer() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(
            10,
            format!(
                "{}{}",
                message_start("m"),
                &STOP[STOP.find("event: message_delta").unwrap()..]
            ),
        );
        assert_eq!(
            h.next(),
            ["MessageStart m", "Usage 2", "Drain by 310ms"],
            "the later usage replaced the held one"
        );
        h.end(20);
        assert_eq!(h.next(), STOPPED);
    }

    // ---------------------------------------------------------------------------------------
    // Bodies that are not event streams.

    #[test]
    fn the_content_type_chooses_how_a_2xx_body_is_read() {
        for (content_type, kind) in [
            (None, BodyKind::EventStream),
            (Some(""), BodyKind::EventStream),
            (
                Some("text/event-stream; charset=utf-8"),
                BodyKind::EventStream,
            ),
            (Some("Application/JSON"), BodyKind::Json),
            (Some("application/vnd.api+json"), BodyKind::Json),
            (Some("text/html"), BodyKind::Unexpected),
            (Some("text/plain; charset=utf-8"), BodyKind::Unexpected),
        ] {
            assert_eq!(
                body_kind(WireFormat::Anthropic, content_type),
                kind,
                "{content_type:?}"
            );
        }
        // Each format streams in its own type, and only in its own.
        for (format, content_type, kind) in [
            (
                WireFormat::Gemini,
                "text/event-stream",
                BodyKind::EventStream,
            ),
            (
                WireFormat::Bedrock,
                "application/vnd.amazon.eventstream",
                BodyKind::EventStream,
            ),
            (
                WireFormat::Bedrock,
                "text/event-stream",
                BodyKind::Unexpected,
            ),
            (
                WireFormat::Ollama,
                "application/x-ndjson; charset=utf-8",
                BodyKind::EventStream,
            ),
            (WireFormat::Ollama, "application/json", BodyKind::Json),
            (
                WireFormat::Anthropic,
                "application/x-ndjson",
                BodyKind::Unexpected,
            ),
            (
                WireFormat::OpenAiChat,
                "application/vnd.amazon.eventstream",
                BodyKind::Unexpected,
            ),
        ] {
            assert_eq!(
                body_kind(format, Some(content_type)),
                kind,
                "{format:?} {content_type}"
            );
        }
    }

    const WHOLE_JSON: &str = r#"{"id":"msg_j","type":"message","role":"assistant","model":"m",
        "content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
        "usage":{"input_tokens":3,"output_tokens":1}}"#;

    #[test]
    fn a_whole_json_body_is_decoded_into_the_events_of_a_stream() {
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 200, &[("content-type", "application/json")]);
        assert_eq!(h.next(), ["Read by 5000ms"]);
        for piece in WHOLE_JSON.as_bytes().chunks(16) {
            h.chunk(10, piece);
            assert_eq!(h.next(), ["Read by 5000ms"], "read whole before decoding");
        }
        h.end(20);
        let actions = h.next();
        assert_eq!(
            actions.first().map(String::as_str),
            Some("MessageStart msg_j")
        );
        assert!(actions.contains(&"Text Hi".to_owned()), "{actions:?}");
        assert_eq!(actions[actions.len() - 2..], STOPPED);
    }

    #[test]
    fn a_whole_json_body_over_the_size_limit_is_refused_without_reading_on() {
        let limits = StreamLimits {
            max_response_bytes: 100,
            ..StreamLimits::default()
        };
        let mut h = Harness::new(AttemptConfig { limits, ..config() });
        h.next();
        h.head(0, 200, &[("content-type", "application/json")]);
        h.chunk(10, [b' '; 100]);
        assert_eq!(h.next(), ["Read by 5000ms"], "100 bytes may still be all");
        h.chunk(20, b"{}");
        assert_eq!(
            h.next(),
            [
                "Fail: a whole JSON response exceeds the limit of 100 bytes (raise \
              `StreamLimits::max_response_bytes` if this is expected)"
            ]
        );
        assert!(!h.machine.reads_body());
    }

    #[test]
    fn a_whole_json_body_cut_short_is_malformed_and_not_retried() {
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 200, &[("content-type", "application/json")]);
        h.chunk(10, &WHOLE_JSON[..40]);
        h.timeout(5000);
        let actions = h.next();
        assert_eq!(actions.len(), 1, "{actions:?}");
        assert!(
            actions[0].starts_with("Fail: malformed stream: invalid JSON"),
            "{actions:?}"
        );
    }

    #[test]
    fn another_content_type_is_refused_with_the_start_of_its_body() {
        let page = format!("<html>{}</html>", "x".repeat(300));
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 200, &[("content-type", "text/html; charset=utf-8")]);
        h.chunk(10, &page[..150]);
        assert_eq!(h.next(), ["Read by 5000ms"]);
        h.chunk(20, &page[150..]);
        let Some(Action::Fail(LlmError::UnexpectedContentType {
            content_type,
            body_start,
        })) = h.machine.poll()
        else {
            panic!("not refused");
        };
        assert_eq!(content_type, "text/html; charset=utf-8");
        assert_eq!(body_start, page[..UNEXPECTED_BODY_PREFIX]);
        assert!(h.machine.poll().is_none(), "never retried");
    }

    #[test]
    fn an_error_body_is_read_up_to_its_bound_and_its_deadline() {
        // 64 KiB at most: the rest is not waited for.
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 500, &[]);
        h.chunk(10, vec![b'e'; MAX_ERROR_BODY - 1]);
        assert_eq!(h.next(), ["Read by 5000ms"]);
        h.chunk(20, b"ee");
        let actions = h.next();
        assert!(actions[0].starts_with("Retry 1 100ms: model API error: HTTP 500: eee"));
        assert!(
            actions[0].len() < MAX_ERROR_TEXT + 100,
            "the message is cut"
        );
        // A slow error body: what came by the deadline is the message.
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 502, &[]);
        h.chunk(10, "bad gate");
        h.timeout(5000);
        assert_eq!(
            h.next()[0],
            "Retry 1 100ms: model API error: HTTP 502: bad gate"
        );
        // A broken one, likewise.
        let mut h = Harness::new(config());
        h.next();
        h.head(0, 502, &[]);
        h.chunk(10, "bad");
        h.error(
            20,
            LlmError::Transport {
                message: "reset".into(),
            },
        );
        assert_eq!(h.next()[0], "Retry 1 100ms: model API error: HTTP 502: bad");
    }

    // ---------------------------------------------------------------------------------------
    // Redirects.

    #[test]
    fn a_redirect_not_followed_is_refused_and_never_retried() {
        for (location, shown) in [
            (
                Some("https://other.test/v1/messages?key=sk-1"),
                "https://other.test/v1/messages",
            ),
            (Some("/v2/messages"), "https://api.test/v2/messages"),
            (None, "no location given"),
        ] {
            let mut h = Harness::new(config());
            h.next();
            let headers: Vec<_> = location.map(|l| ("location", l)).into_iter().collect();
            h.head(0, 307, &headers);
            assert!(!h.machine.reads_body());
            assert_eq!(
                h.next(),
                [format!(
                    "Fail: the model server redirected the request to another origin ({shown}); \
                     it was not followed, so that the API key is not sent there: set the base \
                     URL to that address if it is the right one"
                )]
            );
        }
    }

    #[test]
    fn an_answer_from_another_origin_is_refused_whatever_its_status() {
        let mut h = Harness::new(config());
        h.next();
        h.head_from(
            0,
            200,
            &[("content-type", "text/event-stream")],
            "https://evil.test:8443/x?key=sk-1",
        );
        let actions = h.next();
        assert_eq!(actions.len(), 1);
        assert!(
            actions[0].starts_with(
                "Fail: the model server redirected the request to another \
                                    origin (https://evil.test:8443/x)"
            ),
            "{actions:?}"
        );
        // The same origin, another path (a redirect the policy followed): accepted.
        let mut h = Harness::new(config());
        h.next();
        h.head_from(
            0,
            200,
            &[("content-type", "text/event-stream")],
            "https://api.test/v2/messages",
        );
        assert_eq!(h.next(), ["Read by 5000ms"]);
    }

    // ---------------------------------------------------------------------------------------
    // The drain.

    #[test]
    fn after_message_stop_the_rest_is_drained_before_the_stop_is_emitted() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        // What follows the end marker in the same chunk is not decoded, nor an error after it.
        h.chunk(
            10,
            format!("{}{}{OVERLOADED}", whole_stream("m", "Hi"), text("late")),
        );
        let actions = h.next();
        assert_eq!(actions.last().map(String::as_str), Some("Drain by 310ms"));
        assert!(!actions.iter().any(|a| a.contains("late")), "{actions:?}");
        h.chunk(100, "0\r\n\r\n");
        assert_eq!(
            h.next(),
            ["Drain by 310ms"],
            "the drain's deadline does not move"
        );
        h.end(110);
        assert_eq!(h.next(), STOPPED);
    }

    #[test]
    fn the_drain_is_bounded_by_time_and_by_bytes() {
        let stopped = |h: &mut Harness| {
            h.next();
            h.stream_head(0);
            h.chunk(10, whole_stream("m", "Hi"));
            assert_eq!(h.next().last().map(String::as_str), Some("Drain by 310ms"));
        };
        // Time: 300 ms.
        let mut h = Harness::new(config());
        stopped(&mut h);
        h.timeout(310);
        assert_eq!(h.next(), STOPPED);
        // Bytes: up to 64 KiB are read; a byte more and the connection is given up.
        let mut h = Harness::new(config());
        stopped(&mut h);
        h.chunk(20, vec![0; DRAIN_BYTES - 1]);
        h.chunk(30, [0]);
        assert_eq!(
            h.next(),
            ["Drain by 310ms"],
            "exactly 64 KiB: still draining"
        );
        h.chunk(40, [0]);
        assert_eq!(h.next(), STOPPED);
        assert!(!h.machine.reads_body());
        // A break ends it too.
        let mut h = Harness::new(config());
        stopped(&mut h);
        h.error(
            20,
            LlmError::Transport {
                message: "reset".into(),
            },
        );
        assert_eq!(h.next(), STOPPED);
    }

    #[test]
    fn after_a_decoder_error_the_rest_is_drained_before_the_failure_is_decided() {
        let mut h = Harness::new(config());
        h.next();
        h.stream_head(0);
        h.chunk(10, format!("{}{}", message_start("m"), text("Hel")));
        h.next();
        h.chunk(20, "data: {not json}\n\n");
        assert_eq!(h.next(), ["Drain by 320ms"]);
        h.chunk(30, ": keep-alive\n\n");
        h.end(40);
        let actions = h.next();
        assert_eq!(actions.len(), 1);
        assert!(
            actions[0].starts_with("Fail: malformed stream"),
            "{actions:?}"
        );
    }

    #[test]
    fn nothing_is_drained_after_a_transport_error_or_a_timeout() {
        for broken in [
            (|h: &mut Harness| {
                h.error(
                    20,
                    LlmError::Transport {
                        message: "reset".into(),
                    },
                )
            }) as fn(&mut Harness),
            |h| h.timeout(5010),
        ] {
            // Before content: the retry's backoff follows at once.
            let mut h = Harness::new(config());
            h.next();
            h.stream_head(0);
            h.chunk(10, message_start("m"));
            h.next();
            broken(&mut h);
            let actions = h.next();
            assert!(actions[1].starts_with("Sleep until"), "{actions:?}");
            assert!(!h.machine.reads_body());
        }
    }

    // ---------------------------------------------------------------------------------------
    // Inputs a state does not expect.

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(
        expected = "ExchangeMachine: a body chunk fed while waiting for the response head"
    )]
    fn a_chunk_before_the_head_is_a_driver_bug() {
        let mut h = Harness::new(config());
        h.chunk(0, "data: x\n\n");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "ExchangeMachine: a response head fed while backing off")]
    fn a_head_during_a_backoff_is_a_driver_bug() {
        let mut h = Harness::new(config());
        h.error(0, connect_error());
        h.head(1, 200, &[]);
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn an_unexpected_input_fails_the_response_in_a_release_build() {
        let mut h = Harness::new(config());
        h.chunk(0, "data: x\n\n");
        let actions = h.next();
        assert_eq!(actions.len(), 1);
        assert!(actions[0].contains("internal error"), "{actions:?}");
    }

    // ---------------------------------------------------------------------------------------
    // Headers.

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let headers = |pairs: &[(&'static str, &str)]| header_map(pairs);
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
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &past)]), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-3")]), now), None);
    }

    #[test]
    fn the_error_head_keeps_the_request_id_and_the_servers_verdict() {
        let error = api_error_head(
            503,
            &header_map(&[
                ("x-request-id", "req_9"),
                ("x-should-retry", "false"),
                ("retry-after-ms", "250"),
            ]),
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(error.request_id.as_deref(), Some("req_9"));
        assert_eq!(error.should_retry, Some(false));
        assert_eq!(error.retry_after, Some(Duration::from_millis(250)));
    }

    /// The machine decides without a clock or a runtime (the driver passes `now` in).
    #[test]
    fn the_machine_reads_no_clock_and_is_not_async() {
        let source = include_str!("exchange.rs");
        let code = &source[..source.find("#[cfg(test)]").unwrap()];
        for forbidden in [
            "Instant::now",
            "SystemTime::now",
            "tokio",
            "async ",
            ".await",
        ] {
            assert!(!code.contains(forbidden), "attempt.rs uses {forbidden}");
        }
    }

    /// A whole JSON body: a 2xx body is kept up to its limit and refused past it; an error's
    /// body is read for its message (no more than `MAX_ERROR_BODY`) and classified.
    #[test]
    fn a_whole_body_is_bounded_and_an_errors_message_read() {
        let head = |status: u16, limit: usize| {
            WholeBody::new(
                &SPEC,
                status,
                &HeaderMap::new(),
                SystemTime::now(),
                limit,
                "the limit",
            )
        };
        let mut ok = head(200, 8);
        assert!(ok.push(b"{\"a\"").unwrap());
        assert!(ok.push(b":1}").unwrap());
        assert_eq!(ok.finish().unwrap(), b"{\"a\":1}");
        let mut at_limit = head(200, 4);
        assert!(at_limit.push(b"1234").unwrap());
        assert_eq!(at_limit.finish().unwrap(), b"1234");
        let mut over = head(200, 4);
        assert!(over.push(b"123").unwrap());
        match over.push(b"45") {
            Err(LlmError::LimitExceeded { limit, setting, .. }) => {
                assert_eq!((limit, setting.as_ref()), (4, "the limit"));
            }
            other => panic!("{other:?}"),
        }

        let mut refused = head(400, 8);
        let message =
            br#"{"error":{"type":"invalid_request_error","message":"prompt is too long"}}"#;
        assert!(
            refused.push(message).unwrap(),
            "an error body is not held to the 2xx limit"
        );
        assert!(matches!(
            refused.finish(),
            Err(LlmError::ContextOverflow(_))
        ));
        let mut busy = head(529, 8);
        assert!(busy
            .push(br#"{"error":{"type":"overloaded_error","message":"busy"}}"#)
            .unwrap());
        match busy.finish() {
            Err(LlmError::Api(error)) => {
                assert_eq!((error.status, error.message.as_str()), (529, "busy"));
            }
            other => panic!("{other:?}"),
        }
        // A huge error body: its first MAX_ERROR_BODY bytes, then no more reading.
        let mut huge = head(500, 8);
        assert!(huge.push(&vec![b'x'; MAX_ERROR_BODY - 1]).unwrap());
        assert!(!huge.push(b"yz").unwrap());
        match huge.finish() {
            Err(LlmError::Api(error)) => assert!(error.message.len() <= MAX_ERROR_BODY),
            other => panic!("{other:?}"),
        }
    }
}
