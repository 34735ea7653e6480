//! The HTTP attempt as a sans-IO state machine: the response head, body bytes and timer
//! expiries in, what to do next out, time passed in.
//!
//! Like quinn-proto's `Connection` (and the crate's own agent machine), [`AttemptMachine`]
//! makes every decision about one streamed model response and its retries, and does no I/O:
//! no socket, no clock, no `async`. The reqwest driver in `http.rs` feeds it what the network
//! gave ([`AttemptMachine::handle_head`], [`handle_chunk`](AttemptMachine::handle_chunk),
//! [`handle_end`](AttemptMachine::handle_end), [`handle_error`](AttemptMachine::handle_error),
//! [`handle_timeout`](AttemptMachine::handle_timeout)), each with the time it happened, and
//! carries out the [`Action`]s that [`AttemptMachine::poll`] gives.
//!
//! The decisions made here, once: which failures are retried and after how long, which
//! timeout fired (first-byte, idle, total), which events are held until content arrives, how
//! a non-2xx status becomes an error, how a 2xx body that is not an event stream is read,
//! which redirects are refused, and when the rest of a body is drained so that the connection
//! can be reused.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderMap;

use crate::error::{ApiError, LlmError, TimeoutKind};
use crate::provider::retry::RetryPolicy;
use crate::provider::{LlmEvent, StreamLimits, WireDecoder, WireFormat};

/// The most bytes of an error response body that are read; the rest is discarded.
const MAX_ERROR_BODY: usize = 64 << 10;
/// The most characters of a non-JSON error body kept as the message.
const MAX_ERROR_TEXT: usize = 1000;
/// The most events held back before the first content event (see `AttemptMachine::accept`).
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

/// What the driver must do next, taken from [`AttemptMachine::poll`].
///
/// `Send`, `Read`, `Drain` and `SleepUntil` each ask for one input; the driver feeds it
/// before it polls again (polling again first gives the same action). A deadline of `None`
/// is no deadline (a timeout too long to represent).
#[derive(Debug)]
pub(crate) enum Action {
    /// Send the request (again). Feed [`AttemptMachine::handle_head`] with the response head,
    /// [`AttemptMachine::handle_error`] with why it could not be sent, or
    /// [`AttemptMachine::handle_timeout`] when no head came by `deadline`.
    Send {
        /// When to give up waiting for the head.
        deadline: Option<Instant>,
    },
    /// Read the next piece of the response body: feed [`AttemptMachine::handle_chunk`],
    /// [`AttemptMachine::handle_end`], [`AttemptMachine::handle_error`], or
    /// [`AttemptMachine::handle_timeout`] when nothing came by `deadline`.
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
    /// [`AttemptMachine::handle_timeout`].
    SleepUntil(Instant),
    /// Yield this event of the response.
    Emit(LlmEvent),
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
///              ▼                 3xx not followed, redirected to another origin,
///   ┌──────► Sending ────────── send error, first-byte (or total) timeout ───────────────┐
///   │         │  │ │                                                                     │
///   │         │  │ └─ head 4xx/5xx ─► ErrorBody ── end, 64 KiB, error, timeout ─ ApiError┤
///   │         │  └─ head 2xx, JSON or other ─► WholeBody ── end, limit, error, timeout   │
///   │         │                                  └─► Emit(events…) Done  |  Fail       │
///   │         ▼ head 2xx event stream                                                    │
///   │     Streaming ◄── chunk: decode; events held until content, then Emit;            │
///   │      │  │  │        content moves the idle deadline (pings and usage do not)      │
///   │      │  │  └─ MessageStop ─► Draining ── end, > 64 KiB, 300 ms ─► Emit(MessageStop) Done
///   │      │  └──── decoder error ─► Draining ── end, > 64 KiB, 300 ms ──────────────────┤
///   │      └─────── transport error, idle (or total) timeout, end before the marker ─────┤
///   │                                                                                    ▼
///   │                                   after content ─────────────────────────────► Fail
///   │                                   not retryable, retries used up, or the     ▲
///   │                                   backoff ends after the total deadline ─────┘
///   └─ timer ── Backoff ◄── Emit(Retry) ◄── otherwise (held events dropped)
/// ```
///
/// A failure before any content is retried with [`LlmEvent::Retry`] as [`RetryPolicy`]
/// decides; after content it is final. `Done` and `Fail` end in `Finished`, where nothing is
/// expected any more. An input a state does not expect is a bug in the driver: a debug
/// assertion, and in a release build the response fails with an error naming it.
#[derive(Debug)]
pub(crate) struct AttemptMachine {
    config: AttemptConfig,
    state: State,
    /// Retries done so far.
    retries: u32,
    /// When the whole response must be over; set at start.
    total_deadline: Option<Instant>,
    /// Whether the current attempt's stream has given a content event.
    content_seen: bool,
    /// Events of the current attempt that came before its first content event; held back so
    /// that an attempt that fails before content leaves no trace but the `Retry` event.
    /// Never longer than [`MAX_HELD_EVENTS`].
    held: Vec<LlmEvent>,
    /// The decoder's output for one chunk; kept to reuse its allocation.
    scratch: Vec<LlmEvent>,
    /// Actions ready to be polled.
    out: VecDeque<Action>,
}

impl AttemptMachine {
    /// A machine for one response, not started.
    pub(crate) fn new(config: AttemptConfig) -> Self {
        AttemptMachine {
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
                let error = self.timeout(TimeoutKind::Idle, idle_deadline);
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
        debug_assert!(false, "AttemptMachine: {input} fed while {}", state.name());
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
            timeout: self.timeout(TimeoutKind::FirstByte, at),
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
    /// nearer one, else `kind`.
    fn timeout(&self, kind: TimeoutKind, at: Option<Instant>) -> LlmError {
        match (self.total_deadline, at) {
            (Some(total), at) if at.is_none_or(|at| total < at) => LlmError::Timeout {
                kind: TimeoutKind::Total,
                after: self.config.total_timeout.unwrap_or_default(),
            },
            _ => LlmError::Timeout {
                kind,
                after: match kind {
                    TimeoutKind::Idle => self.config.idle_timeout,
                    _ => self.config.first_byte_timeout,
                },
            },
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
                 `redirect(agent_loop::redirect_policy())` on it so that credentials never \
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
        match body_kind(content_type.as_deref()) {
            BodyKind::EventStream => {
                self.content_seen = false;
                self.held.clear();
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
        if self.content_seen {
            // Never re-sent after content: the caller decides.
            self.fail(error)
        } else {
            self.retry_or_fail(error, now)
        }
    }

    /// Decides what a failure before any content means: a `Retry` event and a backoff, or
    /// the response's final error.
    fn retry_or_fail(&mut self, error: LlmError, now: Instant) -> State {
        self.held.clear();
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
                tracing::debug!(attempt, ?delay, error = %error, "retrying the model request");
                self.out.push_back(Action::Emit(LlmEvent::Retry {
                    attempt,
                    delay,
                    error,
                }));
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
    error.request_id = request_id(headers);
    error.retry_after = retry_after(headers, received);
    error.should_retry = match header(headers, "x-should-retry").as_deref() {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    error
}

/// Completes the error of a non-2xx answer with its body (the provider's JSON error, else the
/// start of the text, else the status's reason) and classifies it.
fn api_error_body(provider: &ProviderSpec, mut error: ApiError, body: &[u8]) -> LlmError {
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
