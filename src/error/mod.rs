//! The crate's error types, grouped by what the caller can do about them.
//!
//! [`Error`] is the one error at the crate root. [`LlmError`] is everything that can go wrong
//! while talking to a model (transport, HTTP status, stream decoding, limits);
//! [`ToolError`] is a tool's own failure.
//!
//! # Which failure shape you meet, and where
//!
//! A run reports a failure in one of three shapes, one per way of running it:
//!
//! | you call | a failure arrives as | holds |
//! |---|---|---|
//! | anything that returns `Result` before a run starts ([`AgentBuilder::build`](crate::AgentBuilder::build), a client's `from_env`, [`ToolRegistry::register`](crate::ToolRegistry::register), a session store) | [`Error`] | what went wrong; nothing ran |
//! | [`Agent::run`](crate::Agent::run) (the event stream) | [`Termination::Error`](crate::Termination::Error) in the last event's [`RunOutcome`](crate::RunOutcome) | the same [`Error`], beside everything the run did before it (history, usage, cost) |
//! | a one-shot call ([`Agent::prompt`](crate::Agent::prompt) and the like) | [`RunError`](crate::agent::RunError) | [`RunError::Failed`](crate::agent::RunError::Failed) with the [`Error`], or [`RunError::Stopped`](crate::agent::RunError::Stopped) with the whole outcome of a run that ended without an answer (a limit, a budget, a cancel) |
//!
//! So there is one error, [`Error`]; the other two are where a run puts it so that nothing the
//! run produced is lost. A tool's [`ToolError`] never ends a run: it becomes an `is_error`
//! result the model reads.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) mod media;
pub(crate) mod rate_limits;
pub(crate) mod tool;

pub use media::MediaError;
pub use rate_limits::{Quota, RateLimits};
pub use tool::{Question, ToolError};

/// The crate's error: every fallible public function returns it or one of the errors inside it.
///
/// The one-shot calls ([`Agent::prompt`](crate::Agent::prompt) and the like) return a
/// [`RunError`](crate::agent::RunError), which holds this error or the outcome of a run that ended
/// without an answer.
#[non_exhaustive]
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Talking to the model failed; see [`LlmError::is_retryable`].
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// A tool failed outside of a model turn (tool failures inside a turn become tool results).
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A builder or registry was given a configuration that cannot work; the error names the
    /// setting. Fix the configuration; retrying does not help.
    #[error("configuration error: {0}")]
    Config(#[from] ConfigError),
    /// The conversation cannot be brought under the context budget, is not a valid history,
    /// or could not be summarized.
    #[error("context error: {0}")]
    Context(#[from] ContextError),
    /// An image or document was refused before anything was sent (unknown media type, bytes
    /// that are not the image they claim to be, over a size limit).
    #[error("invalid media: {0}")]
    Media(#[from] MediaError),
    /// A run of this agent is in flight: wait for its stream to end (or drop it) before
    /// starting another run or changing the conversation.
    #[error(
        "a run of this agent is in flight: wait for its stream to end (or drop it) before \
         starting another run or changing the conversation"
    )]
    Busy,
    /// A session store failed: a conflicting writer, a corrupt or unknown row, or the
    /// database itself. See [`SessionError`]; its message names the session itself, so it is
    /// shown as it is.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A paused run cannot be resumed as asked; nothing was run and the paused run is
    /// unchanged. See [`ResumeError`].
    #[error("resume: {0}")]
    Resume(#[from] ResumeError),
}

/// A configuration that cannot work, naming what to change. Retrying does not help.
///
/// ```
/// use agent_loop::{Error, RequestSettings};
/// use agent_loop::error::ConfigError;
///
/// let err = RequestSettings::new().temperature(7.0).validate().unwrap_err();
/// assert!(matches!(err, Error::Config(ConfigError::Setting { setting: "temperature", .. })));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An environment variable a client reads is not set, or holds a value it cannot use.
    #[error("{variable}: {message}")]
    Env {
        /// The variable (`ANTHROPIC_API_KEY`, `OPENAI_WIRE_API`, …).
        variable: &'static str,
        /// What is wrong and what to set.
        message: String,
    },
    /// A setting is out of its range, or does not fit with another setting.
    #[error("{setting}: {message}")]
    Setting {
        /// The setting, named as its setter is (`temperature`, `compaction_target`, …).
        setting: &'static str,
        /// What is wrong and what would work.
        message: String,
    },
    /// A tool cannot be registered: its name is invalid or taken, or its input schema cannot
    /// be used.
    #[error("{message}")]
    Tool {
        /// The tool's name (cut if very long).
        tool: String,
        /// What is wrong with it, naming the tool.
        message: String,
    },
    /// A setting names a tool the agent does not have (`tool_choice`).
    #[error("{setting} names the tool {tool:?}, which the agent does not have")]
    UnknownTool {
        /// The setting that names it.
        setting: &'static str,
        /// The tool it names.
        tool: String,
    },
}

impl ConfigError {
    /// A [`ConfigError::Setting`].
    pub(crate) fn setting(setting: &'static str, message: impl Into<String>) -> Self {
        ConfigError::Setting {
            setting,
            message: message.into(),
        }
    }
}

/// What went wrong with the conversation itself.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The messages are not a history a provider accepts (a restored conversation, or one
    /// built by hand); the message names the first violation and where it is.
    #[error("invalid history: {0}")]
    InvalidHistory(String),
    /// Even after compaction the conversation needs more tokens than it may use: only the
    /// current turn is left, and it cannot be cut further.
    #[error(
        "the conversation still needs {tokens} tokens after compaction, over the {limit} it \
         may use (context window {context_window} tokens, {output_reserve} reserved for \
         output); only the current turn is left and it cannot be cut further: shorten the \
         request or its tool outputs, lower `tool_output_cap`, or use a model with a larger \
         context window"
    )]
    TooLarge {
        /// Tokens the conversation still needs.
        tokens: usize,
        /// Tokens it may use (the window less the output reserve).
        limit: usize,
        /// The context window.
        context_window: usize,
        /// The tokens reserved for the answer.
        output_reserve: usize,
    },
    /// Summarizing old turns for compaction failed; compaction goes on without a summary.
    #[error("summary: {0}")]
    Summary(String),
    /// A compaction step was finished out of turn (no compaction waiting, or the
    /// conversation changed while its summary was written).
    #[error("compaction: {0}")]
    Compaction(String),
}

/// What went wrong with a [session store](crate::session::SessionStore).
///
/// ```
/// use agent_loop::error::SessionError;
///
/// let err = SessionError::Conflict { session: "chat-1".into(), expected: 3, found: Some(4) };
/// assert!(err.is_conflict());
/// assert!(err.to_string().contains("another writer"));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Another writer changed the session first: it is at `found` (`None`: it does not
    /// exist), not at the `expected` version this writer last saw. Nothing of this write was
    /// stored. Load the session again and decide (a paused run already resumed elsewhere
    /// is refused this way).
    #[error(
        "session {session:?} was changed by another writer: expected version {expected}, \
         found {}; nothing was written: load it again",
        match found { Some(v) => v.to_string(), None => "no session".to_owned() }
    )]
    Conflict {
        /// The session.
        session: String,
        /// The version this writer expected (0: a new session).
        expected: u64,
        /// The version found, if the session exists.
        found: Option<u64>,
    },
    /// Another agent's run holds the session (its lease, [`session::Lease`](crate::session::Lease),
    /// runs until `until_ms`, milliseconds since the Unix epoch): this run did not start,
    /// and nothing was sent or written. Try again when that run ends; if its process died,
    /// the lease runs out by itself, or a host that knows ends it with
    /// [`session::release_lease`](crate::session::release_lease).
    #[error(
        "session {session:?} is in use by another agent's run (holder {holder}, its lease \
         runs until {} unless renewed): nothing was sent or written; try again when that run \
         ends",
        http_date(*until_ms)
    )]
    Busy {
        /// The session.
        session: String,
        /// The holding agent's id.
        holder: String,
        /// When its lease runs out unless renewed (milliseconds since the Unix epoch).
        until_ms: u64,
    },
    /// An agent's run lost a race for its session: another writer appended to it while the
    /// run went on, so the run's turn in flight was not saved, and the run stopped there.
    /// What was saved is exact: the run's first `saved_turns` turns (each a whole turn, the
    /// run's input with the first); nothing of the turn that ended the run, nor after it.
    /// The agent reads the session afresh before its next run, so running again builds on
    /// what the other writer stored and stores nothing twice. The run's events (and its
    /// outcome's `final_text`) still hold what the lost turn said.
    #[error(
        "session {session:?} was changed by another writer during this run (found version \
         {found}): {}; the agent reads the session again before its next run, so running \
         again stores nothing twice",
        match saved_turns {
            0 => "nothing of this run was saved, not even its input".to_owned(),
            1 => "the run's first turn was saved, the turn in flight was not".to_owned(),
            n => format!("the run's first {n} turns were saved, the turn in flight was not"),
        }
    )]
    RunOvertaken {
        /// The session.
        session: String,
        /// How many of the run's turns were saved before the conflict.
        saved_turns: u32,
        /// The version the other writer left the session at.
        found: u64,
    },
    /// A stored entry cannot be read: not the JSON of an entry, a format newer than this
    /// build reads, or entries that do not fit together. The row is left as it is.
    #[error("session {session:?}, entry {version}: {message}")]
    Corrupt {
        /// The session.
        session: String,
        /// The entry's version (its place in the session's log).
        version: u64,
        /// What is wrong, and what to do.
        message: String,
    },
    /// The database's schema was written by a newer build (its version is past the
    /// migrations this build knows); upgrade agent-loop, or use another database.
    #[error(
        "the session database's schema is at version {found}, newer than the {supported} \
         this build of agent-loop knows: upgrade agent-loop"
    )]
    Schema {
        /// The schema version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The database failed (connection, I/O, a query); the message is the driver's.
    #[error("session store database: {0}")]
    Database(String),
    /// There is no such session (to fork or rewind).
    #[error("there is no session {session:?}")]
    NotFound {
        /// The session.
        session: String,
    },
    /// A session cannot be forked or rewound at this point: past its end, or where the
    /// history would not be valid (a tool call cut from its result). Nothing was written.
    /// The message says why, and names the valid cuts nearest to `at`, nearest first: fork
    /// or rewind at one of those.
    #[error("session {session:?} cannot be cut after message {at}: {message}")]
    InvalidPoint {
        /// The session.
        session: String,
        /// The number of messages the cut would keep.
        at: u64,
        /// Why not, and the valid cuts nearest to `at`.
        message: String,
    },
}

/// Milliseconds since the Unix epoch as an HTTP date (`Sun, 06 Dec 2026 04:05:42 GMT`).
/// A time past year 9999 (which an HTTP date cannot say) stays a number.
fn http_date(ms: u64) -> String {
    /// 10000-01-01T00:00:00Z, in milliseconds since the Unix epoch.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    if ms >= YEAR_10000_MS {
        return format!("{ms} ms after the Unix epoch");
    }
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_millis(ms))
}

impl SessionError {
    /// A [`SessionError::Corrupt`]: entry `version` of `session` (0: the session's own row),
    /// for a [`SessionStore`](crate::session::SessionStore) of your own that finds a row it
    /// cannot read.
    pub fn corrupt(session: &str, version: u64, message: impl Into<String>) -> Self {
        SessionError::Corrupt {
            session: session.to_owned(),
            version,
            message: message.into(),
        }
    }

    /// Whether another writer changed the session first ([`SessionError::Conflict`], or
    /// [`SessionError::RunOvertaken`] for an agent's run).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            SessionError::Conflict { .. } | SessionError::RunOvertaken { .. }
        )
    }
}

/// Why a [paused run](crate::PausedRun) cannot be resumed as asked. Nothing was run: the
/// paused run (and its session, if it has one) is as it was.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// This pause was resumed already (by this agent, or, with a session store, by any
    /// process): its calls may have run, so it is not resumed again.
    #[error(
        "the paused run {pause:?} was resumed already; its calls may have run, so it is not \
         resumed twice: read the conversation again to see where it stands (with a session, \
         `Agent::load_session`)"
    )]
    AlreadyResumed {
        /// The pause's id.
        pause: String,
    },
    /// A resolution names a call that is not waiting in this pause.
    #[error("no call {id:?} waits in this paused run (waiting: {waiting})")]
    UnknownCall {
        /// The id given.
        id: String,
        /// The ids that do wait, comma-separated.
        waiting: String,
    },
    /// A call waiting for approval names a tool the agent no longer has: approving it could
    /// not run it. Register the tool, or resolve the call with a result or a denial.
    #[error(
        "call {id:?} waits for approval of the tool {tool:?}, which the agent no longer has: \
         register it, or resolve the call with a result or a denial"
    )]
    MissingTool {
        /// The call's id.
        id: String,
        /// The tool it calls.
        tool: String,
    },
    /// The paused run was written in a format this build does not read.
    #[error(
        "the paused run is in format {found}; this build reads format {supported}: resume \
         it with the agent-loop version that paused it"
    )]
    Format {
        /// The format found.
        found: u32,
        /// The format this build reads.
        supported: u32,
    },
    /// The run's structured answer does not fit the paused one (another answer tool).
    #[error("{0}")]
    Output(String),
    /// An answer names the digest of another call than the one waiting under its id
    /// ([`PendingCall::digest`](crate::agent::PendingCall::digest)): it was given for a call
    /// that no longer waits (the session was rewound and the call asked again, or it came
    /// from another branch). Nothing was run; show the person the call that waits now.
    #[error(
        "the answer for call {id:?} was given for another call (digest {given}); the call \
         waiting under that id now has digest {waiting}: ask again"
    )]
    StaleAnswer {
        /// The call's id.
        id: String,
        /// The digest the answer was given for.
        given: String,
        /// The digest of the call that waits.
        waiting: String,
    },
    /// The session no longer waits in this pause, and did not resume it: it was rewound past
    /// it (and may wait in a pause asked anew; a session written before pause ids named the
    /// session's version may wait under this same id, for other calls). Nothing was run. Load
    /// the session again for the pause that waits, if any.
    #[error(
        "the session no longer waits in the paused run {pause:?}: it was rewound past it, and \
         nothing was run; load the session again for the pause that waits now, if any"
    )]
    Superseded {
        /// The pause's id.
        pause: String,
    },
    /// The paused run does not hold together (its state does not match its conversation):
    /// it was changed or damaged since it paused.
    #[error("the paused run does not hold together: {0}")]
    Damaged(String),
}

/// Which timeout fired; each one is its own setting on the clients.
///
/// Serialized as a snake-case string: `"connect"`, `"first_byte"`, `"idle"`, `"total"`.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutKind {
    /// Establishing the TCP/TLS connection took too long.
    Connect,
    /// The response headers did not arrive in time.
    FirstByte,
    /// No content event (text, thinking or tool-argument delta) arrived in time;
    /// keep-alive pings do not count as content.
    Idle,
    /// The whole response took longer than the configured total.
    Total,
}

impl fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutKind::Connect => "connect",
            TimeoutKind::FirstByte => "first-byte",
            TimeoutKind::Idle => "idle",
            TimeoutKind::Total => "total",
        })
    }
}

/// A non-2xx answer from a model server, with what the provider said about it.
///
/// Serialized as an object with the field names below; the optional fields are left out when
/// empty (and read as empty when missing), and `retry_after` is serde's form of a
/// [`Duration`], `{"secs": u64, "nanos": u32}`:
///
/// ```
/// use std::time::Duration;
/// use agent_loop::error::ApiError;
///
/// let mut error = ApiError::new(529, "Overloaded");
/// error.error_type = Some("overloaded_error".into());
/// error.retry_after = Some(Duration::from_millis(1500));
/// let json = serde_json::to_value(&error)?;
/// assert_eq!(
///     json,
///     serde_json::json!({
///         "status": 529,
///         "error_type": "overloaded_error",
///         "message": "Overloaded",
///         "retry_after": {"secs": 1, "nanos": 500_000_000},
///     })
/// );
/// assert_eq!(serde_json::from_value::<ApiError>(json)?, error);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// The HTTP status code.
    pub status: u16,
    /// The provider's error type (`overloaded_error`, `rate_limit_error`, `insufficient_quota` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// The provider's error code, where it sends one (OpenAI `code`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The provider's human-readable message (or the start of the body when it is not JSON).
    pub message: String,
    /// The request id header (`request-id`, `x-request-id`), for support tickets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// How long the server asked us to wait (`retry-after-ms` / `retry-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Duration>,
    /// The server's explicit `x-should-retry` verdict, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_retry: Option<bool>,
    /// The rate-limit figures of the answer's head, when it carried any (a 429's remaining
    /// figures and resets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<RateLimits>,
}

impl ApiError {
    /// A bare API error with a status and message; the other fields empty.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        ApiError {
            status,
            error_type: None,
            code: None,
            message: message.into(),
            request_id: None,
            retry_after: None,
            should_retry: None,
            rate_limits: None,
        }
    }

    /// Whether retrying the same request can succeed. 400, 401, 403, 404, 413 and 422 never
    /// can (the request itself is wrong), whatever the server says; otherwise
    /// `x-should-retry` when the server sent it, else 408, 409, 429 (but not an exhausted
    /// quota), 5xx and 529. This is the one place the crate decides it: the clients, the
    /// [`RetryPolicy`](crate::provider::transport::RetryPolicy) and the agent all ask here.
    pub fn is_retryable(&self) -> bool {
        if matches!(self.status, 400 | 401 | 403 | 404 | 413 | 422) {
            return false;
        }
        if let Some(verdict) = self.should_retry {
            return verdict;
        }
        let quota = self.error_type.as_deref() == Some("insufficient_quota")
            || self.code.as_deref() == Some("insufficient_quota");
        match self.status {
            408 | 409 => true,
            429 => !quota,
            500..=599 => true,
            _ => false,
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        if let Some(t) = &self.error_type {
            write!(f, " {t}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(id) = &self.request_id {
            write!(f, " (request id {id})")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong while getting one response from a model.
///
/// # Serialized form
///
/// An object tagged with `type`, the variant's name in snake case (`connect`, `timeout`,
/// `api`, `context_overflow`, `stream`, `incomplete`, `transport`, `malformed`,
/// `limit_exceeded`, `invalid_request`, `redirected`, `unexpected_content_type`,
/// `model_failure`), beside the
/// variant's fields. [`Api`](LlmError::Api) and [`ContextOverflow`](LlmError::ContextOverflow)
/// carry the [`ApiError`]'s fields inline; a [`Duration`] is serde's `{"secs", "nanos"}`
/// object, exact to the nanosecond. Read back, an error is equal to the one written, so it is
/// retried (or not) the same way:
///
/// ```
/// use std::time::Duration;
/// use agent_loop::{LlmError};
/// use agent_loop::error::TimeoutKind;
///
/// let error = LlmError::Timeout { kind: TimeoutKind::Idle, after: Duration::from_secs(30) };
/// let json = serde_json::to_string(&error)?;
/// assert_eq!(json, r#"{"type":"timeout","kind":"idle","after":{"secs":30,"nanos":0}}"#);
/// let back: LlmError = serde_json::from_str(&json)?;
/// assert_eq!(back, error);
/// assert!(back.is_retryable());
///
/// let limit = LlmError::LimitExceeded {
///     what: "an SSE line".into(),
///     limit: 1024,
///     setting: "StreamLimits::max_line_bytes".into(),
/// };
/// let json = serde_json::to_string(&limit)?;
/// assert_eq!(
///     json,
///     r#"{"type":"limit_exceeded","what":"an SSE line","limit":1024,"setting":"StreamLimits::max_line_bytes"}"#
/// );
/// assert_eq!(serde_json::from_str::<LlmError>(&json)?, limit);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LlmError {
    /// The request could not be sent (DNS, connection refused, TLS). Usually transient.
    #[error("could not reach the model server: {message}")]
    Connect {
        /// What the transport said.
        message: String,
    },
    /// A timeout fired; [`TimeoutKind`] says which setting to raise.
    #[error("{kind} timeout: nothing arrived within {after:?}")]
    Timeout {
        /// Which timeout.
        kind: TimeoutKind,
        /// Its configured value.
        after: Duration,
    },
    /// The server rejected the request with a non-2xx status.
    #[error("model API error: {0}")]
    Api(Box<ApiError>),
    /// The server rejected the request because the prompt does not fit the context window.
    /// Compact the conversation and send it again.
    #[error("the request is too long for the model's context window: {0}")]
    ContextOverflow(Box<ApiError>),
    /// The server sent an error event inside a successful (200) stream,
    /// such as Anthropic's `overloaded_error`.
    #[error("the model server reported an error mid-stream ({error_type}): {message}")]
    Stream {
        /// The provider's error type.
        error_type: String,
        /// The provider's message.
        message: String,
    },
    /// The body ended before the provider's end-of-message marker: the answer is cut short
    /// and must not be used as if it were complete.
    #[error("stream ended before the response was complete ({detail})")]
    Incomplete {
        /// What was missing.
        detail: String,
    },
    /// The connection broke while the body was being read.
    #[error("connection lost while reading the response: {message}")]
    Transport {
        /// What the transport said.
        message: String,
    },
    /// The stream carried something the provider's format does not allow
    /// (invalid JSON in an event, a delta for a block that never started …).
    #[error("malformed stream: {message}")]
    Malformed {
        /// What was wrong, and where.
        message: String,
    },
    /// Untrusted input went over a configured size limit and was refused.
    #[error("{what} exceeds the limit of {limit} bytes (raise `{setting}` if this is expected)")]
    LimitExceeded {
        /// What was too large ("an SSE line", "tool-call arguments" …). The crate's own
        /// errors borrow a static name; one read back from its serialized form owns it.
        what: Cow<'static, str>,
        /// The limit in bytes.
        limit: usize,
        /// The setting that controls it (`StreamLimits::max_line_bytes` …).
        setting: Cow<'static, str>,
    },
    /// The request could not be built (for example a history that is not valid for the provider).
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// What was wrong.
        message: String,
    },
    /// The server redirected the request to another origin (scheme, host or port). The
    /// redirect was not followed, so that neither the API key nor any header set with
    /// `header(..)` reaches a server the base URL does not name. Point the base URL at the
    /// new address if it is the right one. Not retried.
    #[error(
        "the model server redirected the request to another origin ({location}); it was not \
         followed, so that the API key is not sent there: set the base URL to that address if \
         it is the right one"
    )]
    Redirected {
        /// Where the server pointed (scheme, host, port and path; the query is left out).
        location: String,
    },
    /// A successful (2xx) answer that is neither an event stream nor a JSON message: an HTML
    /// page from a captive portal or a proxy's login, say. Check the base URL and the network
    /// path. Not retried.
    #[error(
        "the model server answered with content type `{content_type}`, which is neither an \
         event stream nor JSON (check the base URL and any proxy in between); the body starts \
         with: {body_start:?}"
    )]
    UnexpectedContentType {
        /// The `content-type` header as sent.
        content_type: String,
        /// The first bytes of the body (at most 200 characters, lossily decoded).
        body_start: String,
    },
    /// The model ended its response without a usable answer, by its own fault: a function
    /// call it wrote that does not parse or fit its declaration (Gemini
    /// `MALFORMED_FUNCTION_CALL`), a call of a tool it was not offered (`UNEXPECTED_TOOL_CALL`),
    /// or a stop for no stated reason (`OTHER`); llama.cpp's server failing to parse the
    /// model's output into text and tool calls (its HTTP 500 `server_error` "The model
    /// produced output that does not match the expected … format", reason `unparsed_output`).
    /// Nothing of the response is kept. A changed request can succeed, so it is retryable: an
    /// [`Agent`](crate::Agent) sends the turn again with a note telling the model what went
    /// wrong, within its retry policy and only while the note changes the request (the same
    /// failure twice in a row ends the run: the request would be the same again, and at
    /// temperature 0 so would the answer). A client on its own does not send it again.
    #[error("the model's response failed ({reason}): {message}")]
    ModelFailure {
        /// The provider's reason, as sent (`MALFORMED_FUNCTION_CALL` …).
        reason: String,
        /// What went wrong, with the provider's own explanation when it gave one.
        message: String,
    },
}

/// Whether an in-stream error's type names a transient failure: Anthropic's and OpenAI's own
/// names, and those OpenAI-compatible proxies use (LiteLLM's `internal_server_error` and
/// `throttling_error`, …). An in-stream error that carries an HTTP status is classified by
/// that status instead (it becomes [`LlmError::Api`]).
pub(crate) fn is_transient_error_type(error_type: &str) -> bool {
    transient_kind(error_type).is_some()
}

/// A kind of transient failure an in-stream error type names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transient {
    Overloaded,
    RateLimited,
    Server,
}

/// Which kind of transient failure an in-stream error's type names, if any (the names of
/// [`is_transient_error_type`]).
pub(crate) fn transient_kind(error_type: &str) -> Option<Transient> {
    match error_type {
        "overloaded_error"
        | "overloaded"
        | "service_unavailable"
        | "service_unavailable_error"
        // Gemini / Google APIs (`google.rpc.Code` names).
        | "UNAVAILABLE" => {
            Some(Transient::Overloaded)
        }
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "throttling_error"
        | "too_many_requests"
        | "RESOURCE_EXHAUSTED" => {
            Some(Transient::RateLimited)
        }
        // Bedrock's exceptions, as the event stream (`:exception-type`) and the
        // `x-amzn-ErrorType` header name them.
        "throttlingException" | "ThrottlingException" => Some(Transient::RateLimited),
        "serviceUnavailableException"
        | "ServiceUnavailableException"
        | "modelNotReadyException"
        | "ModelNotReadyException" => Some(Transient::Overloaded),
        "internalServerException"
        | "InternalServerException"
        | "modelStreamErrorException"
        | "ModelStreamErrorException"
        | "modelTimeoutException"
        | "ModelTimeoutException" => Some(Transient::Server),
        "api_error"
        | "server_error"
        | "timeout_error"
        | "internal_server_error"
        | "internal_error"
        | "bad_gateway"
        | "gateway_timeout"
        | "timeout"
        | "INTERNAL"
        | "DEADLINE_EXCEEDED" => Some(Transient::Server),
        _ => None,
    }
}

impl LlmError {
    /// Whether sending the same request again can succeed.
    ///
    /// Transient: connection failures, timeouts, 408/409/429/5xx/529 (unless the server said
    /// `x-should-retry: false`, or the quota is exhausted), in-stream overload and server errors,
    /// streams cut short or corrupted in transit, and a response the model failed
    /// ([`ModelFailure`](LlmError::ModelFailure)). Everything else surfaces at once.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connect { .. }
            | LlmError::Timeout { .. }
            | LlmError::Incomplete { .. }
            | LlmError::Transport { .. }
            | LlmError::Malformed { .. }
            | LlmError::ModelFailure { .. } => true,
            LlmError::Api(api) => api.is_retryable(),
            LlmError::Stream { error_type, .. } => is_transient_error_type(error_type),
            LlmError::ContextOverflow(_)
            | LlmError::LimitExceeded { .. }
            | LlmError::InvalidRequest { .. }
            | LlmError::Redirected { .. }
            | LlmError::UnexpectedContentType { .. } => false,
        }
    }

    /// What to tell the model when its turn is sent again after this error: for a
    /// [`ModelFailure`](LlmError::ModelFailure), which is the model's own doing, what went
    /// wrong; `None` for the others (a transport or server failure is not the model's to fix).
    pub(crate) fn note_for_model(&self) -> Option<String> {
        match self {
            LlmError::ModelFailure { reason, message } => Some(format!(
                "[Your previous response could not be used and was discarded: {message} \
                 ({reason}). Answer again: call only the functions you were given, with \
                 arguments that are valid for their parameters, or answer in text.]"
            )),
            _ => None,
        }
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Api(api) => api.retry_after,
            _ => None,
        }
    }

    /// The HTTP status, for errors that carry one.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Api(api) | LlmError::ContextOverflow(api) => Some(api.status),
            _ => None,
        }
    }

    pub(crate) fn malformed(message: impl Into<String>) -> Self {
        LlmError::Malformed {
            message: message.into(),
        }
    }

    pub(crate) fn incomplete(detail: impl Into<String>) -> Self {
        LlmError::Incomplete {
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod lease_time_tests {
    use super::*;

    #[test]
    fn a_busy_session_says_when_its_lease_runs_out_and_never_panics() {
        let busy = |until_ms| SessionError::Busy {
            session: "s".into(),
            holder: "h".into(),
            until_ms,
        };
        let said = busy(1_796_529_822_000).to_string();
        assert!(said.contains("runs until Sun, 06 Dec 2026"), "{said}");
        for until_ms in [0, 253_402_300_799_999, 253_402_300_800_000, u64::MAX] {
            assert!(busy(until_ms).to_string().contains("in use"));
        }
        assert!(busy(u64::MAX)
            .to_string()
            .contains("ms after the Unix epoch"));
    }
}
