//! What the [`MockServer`](crate::testing::MockServer) needs of a wire format (feature
//! `testing`): the [`MockFormat`] trait each format's `mock.rs` implements (the inverse of its
//! client: its path, the request decoded back into messages, what the real API refuses, a
//! response's bytes), and the pieces they share. The mock server itself (`testing/`) knows no
//! format: it asks `provider::of(format).mock()`.

use serde_json::{json, Value};

pub(crate) mod compact_on_server;
pub(crate) mod context_management;
pub(crate) mod media_checks;
pub(crate) mod tool_schemas;
pub(crate) mod tool_search;

use crate::message::{Message, Usage};
use crate::wire::sse::SseFrame;
use crate::wire::{LlmEvent, ModelResponse};

/// One format's mock side.
pub(crate) trait MockFormat: Sync {
    /// Whether `route` names this format's endpoint: `None` when it does not, else whether the
    /// real API serves that path (a base URL with the API's own path in it does not).
    fn route(&self, route: &Route<'_>) -> Option<bool>;

    /// The model a request asks for (by default the body's `model`).
    fn requested_model(&self, _route: &str, body: &Value) -> Option<String> {
        body.get("model")?.as_str().map(str::to_owned)
    }

    /// The request's conversation read back from its body, the inverse of the format's
    /// encoder, for the history check; `None` when the body carries none to check.
    fn history(&self, body: &Value) -> Option<Vec<Message>>;

    /// What the real API refuses in this request beyond the history, the tool schemas and
    /// the media (which the mock server checks for every format with `tool_schemas` and
    /// `media_checks`): its own rules, as it says so; `None` when it would take it.
    fn refusal(&self, body: &Value, headers: &[(String, String)]) -> Option<Rejection>;

    /// Where a request body says the most tokens to generate (JSON pointers, the first found
    /// counts), for the mock server's rate limit.
    fn max_tokens_at(&self) -> &'static [&'static str];

    /// Where a request body holds the prompt (JSON pointers), for the rate limit's estimate.
    fn prompt_at(&self) -> &'static [&'static str];

    /// The error type of the 404 for a path of this format the API does not serve.
    fn not_found_type(&self) -> &'static str {
        "invalid_request_error"
    }

    /// An error response's body, and headers it adds, for `status`.
    fn status_body(
        &self,
        status: u16,
        error_type: &str,
        message: &str,
        code: Option<&str>,
    ) -> (Value, Vec<(String, String)>);

    /// A response's events as the format streams them.
    fn encode_stream(&self, events: &[LlmEvent], usage: Usage) -> Vec<Segment>;

    /// A whole response as the format's non-streamed JSON body.
    fn encode_whole(&self, response: &ModelResponse) -> Value;

    /// The bytes of an in-stream error event.
    fn error_event(&self, error_type: &str, message: &str) -> Vec<u8>;

    /// The bytes of a keep-alive.
    fn keep_alive(&self) -> Vec<u8>;

    /// The bytes of a malformed event.
    fn garbage(&self) -> Vec<u8>;
}

/// The [`MockFormat`] methods a format's `mock.rs` implements with free functions of its own
/// of the same names (`status_body`, `encode`, `whole`, `error_event`, `keep_alive`,
/// `garbage`), in its `impl MockFormat` block.
macro_rules! by_functions {
    () => {
        fn status_body(
            &self,
            status: u16,
            error_type: &str,
            message: &str,
            _code: Option<&str>,
        ) -> (serde_json::Value, Vec<(String, String)>) {
            status_body(status, error_type, message)
        }

        fn encode_stream(
            &self,
            events: &[$crate::wire::LlmEvent],
            usage: $crate::message::Usage,
        ) -> Vec<$crate::provider::mock::Segment> {
            encode(events, usage)
        }

        fn encode_whole(&self, response: &$crate::wire::ModelResponse) -> serde_json::Value {
            whole(response)
        }

        fn error_event(&self, error_type: &str, message: &str) -> Vec<u8> {
            error_event(error_type, message)
        }

        fn keep_alive(&self) -> Vec<u8> {
            keep_alive()
        }

        fn garbage(&self) -> Vec<u8> {
            garbage()
        }
    };
}
pub(crate) use by_functions;

/// A request's path (without its query) cut into segments, for [`MockFormat::route`]. A path
/// may start with a prefix of the host's choosing (the mock's own `/anthropic`, a gateway's
/// `/openai/v1`, …), but the API's own path must be whole and appear once: no segment
/// repeated next to itself (`/v1/v1/…`), no empty segment, and none of the API's own segments
/// in the prefix.
#[derive(Debug)]
pub(crate) struct Route<'a> {
    /// The path's segments.
    pub(crate) segments: Vec<&'a str>,
    /// No empty segment, none repeated next to itself, a leading slash.
    pub(crate) well_formed: bool,
}

impl<'a> Route<'a> {
    /// Cuts `route` into its segments.
    pub(crate) fn new(route: &'a str) -> Self {
        let segments: Vec<&str> = route
            .strip_prefix('/')
            .unwrap_or(route)
            .split('/')
            .collect();
        let well_formed = route.starts_with('/')
            && segments.iter().all(|s| !s.is_empty())
            && segments.windows(2).all(|w| w[0] != w[1]);
        Route {
            segments,
            well_formed,
        }
    }

    /// Whether the path ends with `tail`: `None` when it does not, else whether it is well
    /// formed and the prefix before `tail` is free of the API's `own` segments.
    pub(crate) fn ends(&self, tail: &[&str], own: &[&str]) -> Option<bool> {
        let at = self.segments.len().checked_sub(tail.len())?;
        (self.segments.get(at..)? == tail).then(|| {
            self.well_formed
                && self
                    .segments
                    .get(..at)
                    .unwrap_or_default()
                    .iter()
                    .all(|s| !own.contains(s))
        })
    }

    /// The last segment.
    pub(crate) fn last(&self) -> &'a str {
        self.segments.last().copied().unwrap_or_default()
    }
}

/// A request the real API would refuse: its error type, code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) error_type: &'static str,
    pub(crate) code: Option<&'static str>,
    pub(crate) message: String,
}

/// One SSE event's bytes: an optional event name and `data`'s JSON (written by the crate's
/// one SSE writer, [`SseFrame`](crate::wire::sse::SseFrame)).
pub(crate) fn sse(event: Option<&str>, data: &Value) -> Vec<u8> {
    let data = data.to_string();
    let mut frame = SseFrame::new(&data);
    if let Some(event) = event {
        frame = frame.event(event);
    }
    let mut out = Vec::new();
    frame.write_to(&mut out);
    out
}

/// The OpenAI error body (OpenAI Chat, Responses and their compatible servers).
pub(crate) fn openai_error(message: &str, error_type: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": error_type, "code": code, "param": null}})
}

/// What a segment of the body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    /// Before content: `message_start`, pings, the role chunk.
    Preamble,
    /// Carries content (a block start or a delta).
    Content,
    /// A block stop, or anything between content events that is not content.
    Other,
    /// Part of the end-of-message marker (`message_delta`, `message_stop`; the finish chunk,
    /// the usage chunk, `[DONE]`).
    End,
}

/// One event's bytes (an SSE event, an NDJSON line, an event-stream message) and what it
/// is.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) bytes: Vec<u8>,
    pub(crate) kind: SegmentKind,
}
