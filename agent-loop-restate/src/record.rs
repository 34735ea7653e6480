//! What the journal holds: serializable records of a model call and of a tool call.
//!
//! The core crate's event and error types are not serde types (they carry `&'static str`
//! and `Duration`s chosen for in-process use), so the journal stores these mirrors and turns
//! them back into the exact values the machine was fed the first time.

use std::sync::Arc;
use std::time::Duration;

use agent_loop::{
    ApiError, LlmClient, LlmError, LlmEvent, MediaSource, ModelRequest, StopReason, TimeoutKind,
    ToolCallResult, Usage,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// The most events one model step keeps; the client's own stream limits bound the bytes, and
/// coalescing deltas keeps the count near the number of content blocks.
const MAX_EVENTS: usize = 65_536;

/// One journaled model call: the response's events (deltas of a block merged) and how the
/// stream ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ModelStep {
    pub events: Vec<Event>,
    /// `None`: the stream ended cleanly (after `MessageStop`, or simply ended).
    pub error: Option<RecError>,
}

impl ModelStep {
    /// Whether the response ended with its `MessageStop` (the machine stops listening then).
    pub fn stopped(&self) -> bool {
        matches!(self.events.last(), Some(Event::MessageStop { .. }))
    }
}

/// Calls the model once and records what it said. Never fails: an error is part of the
/// record, for the machine to decide on (retry after a backoff, or end the run) exactly as
/// in-process.
pub(crate) async fn call_model(client: Arc<dyn LlmClient>, request: ModelRequest) -> ModelStep {
    let mut events: Vec<Event> = Vec::new();
    let mut error = None;
    let mut stream = client.stream(&request);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                let stop = matches!(event, LlmEvent::MessageStop { .. });
                if let Some(event) = Event::from_llm(&event) {
                    push_coalesced(&mut events, event);
                }
                if events.len() > MAX_EVENTS {
                    error = Some(RecError::from_llm(&LlmError::LimitExceeded {
                        what: "the response",
                        limit: MAX_EVENTS,
                        setting: "StreamLimits::max_response_bytes",
                    }));
                    break;
                }
                if stop {
                    break;
                }
            }
            Err(e) => {
                error = Some(RecError::from_llm(&e));
                break;
            }
        }
    }
    ModelStep { events, error }
}

/// Appends `event`, merging it into the last one when both are deltas of the same block: the
/// assembler sees the same text, the journal holds one entry per block instead of one per
/// token.
fn push_coalesced(events: &mut Vec<Event>, event: Event) {
    match (events.last_mut(), event) {
        (
            Some(Event::Text { index, text }),
            Event::Text {
                index: i,
                text: more,
            },
        ) if *index == i => text.push_str(&more),
        (
            Some(Event::Thinking { index, text }),
            Event::Thinking {
                index: i,
                text: more,
            },
        ) if *index == i => text.push_str(&more),
        (
            Some(Event::Signature { index, text }),
            Event::Signature {
                index: i,
                text: more,
            },
        ) if *index == i => text.push_str(&more),
        (
            Some(Event::ToolDelta { index, json }),
            Event::ToolDelta {
                index: i,
                json: more,
            },
        ) if *index == i => json.push_str(&more),
        (_, event) => events.push(event),
    }
}

/// A serializable [`LlmEvent`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "snake_case")]
pub(crate) enum Event {
    Start {
        id: String,
        model: String,
    },
    Text {
        index: usize,
        text: String,
    },
    Thinking {
        index: usize,
        text: String,
    },
    Signature {
        index: usize,
        text: String,
    },
    Redacted {
        index: usize,
        data: String,
    },
    ToolStart {
        index: usize,
        id: String,
        name: String,
    },
    ToolDelta {
        index: usize,
        json: String,
    },
    Other {
        index: usize,
        block: serde_json::Value,
    },
    BlockStop {
        index: usize,
    },
    Usage {
        usage: Usage,
    },
    StopSequence {
        sequence: String,
    },
    MessageStop {
        stop_reason: StopReason,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
        error: RecError,
    },
}

impl Event {
    fn from_llm(event: &LlmEvent) -> Option<Event> {
        Some(match event.clone() {
            LlmEvent::MessageStart { id, model } => Event::Start { id, model },
            LlmEvent::TextDelta { index, text } => Event::Text { index, text },
            LlmEvent::ThinkingDelta { index, thinking } => Event::Thinking {
                index,
                text: thinking,
            },
            LlmEvent::SignatureDelta { index, signature } => Event::Signature {
                index,
                text: signature,
            },
            LlmEvent::RedactedThinking { index, data } => Event::Redacted { index, data },
            LlmEvent::ToolCallStart { index, id, name } => Event::ToolStart { index, id, name },
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => Event::ToolDelta {
                index,
                json: partial_json,
            },
            LlmEvent::OtherBlock { index, block } => Event::Other { index, block },
            LlmEvent::BlockStop { index } => Event::BlockStop { index },
            LlmEvent::Usage(usage) => Event::Usage { usage },
            LlmEvent::StopSequence { sequence } => Event::StopSequence { sequence },
            LlmEvent::MessageStop { stop_reason } => Event::MessageStop { stop_reason },
            LlmEvent::Retry {
                attempt,
                delay,
                error,
            } => Event::Retry {
                attempt,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error: RecError::from_llm(&error),
            },
            // Pings and whatever a later version of the core adds: not needed to assemble.
            _ => return None,
        })
    }

    pub fn into_llm(self) -> LlmEvent {
        match self {
            Event::Start { id, model } => LlmEvent::MessageStart { id, model },
            Event::Text { index, text } => LlmEvent::TextDelta { index, text },
            Event::Thinking { index, text } => LlmEvent::ThinkingDelta {
                index,
                thinking: text,
            },
            Event::Signature { index, text } => LlmEvent::SignatureDelta {
                index,
                signature: text,
            },
            Event::Redacted { index, data } => LlmEvent::RedactedThinking { index, data },
            Event::ToolStart { index, id, name } => LlmEvent::ToolCallStart { index, id, name },
            Event::ToolDelta { index, json } => LlmEvent::ToolCallDelta {
                index,
                partial_json: json,
            },
            Event::Other { index, block } => LlmEvent::OtherBlock { index, block },
            Event::BlockStop { index } => LlmEvent::BlockStop { index },
            Event::Usage { usage } => LlmEvent::Usage(usage),
            Event::StopSequence { sequence } => LlmEvent::StopSequence { sequence },
            Event::MessageStop { stop_reason } => LlmEvent::MessageStop { stop_reason },
            Event::Retry {
                attempt,
                delay_ms,
                error,
            } => LlmEvent::Retry {
                attempt,
                delay: Duration::from_millis(delay_ms),
                error: error.into_llm(),
            },
        }
    }
}

/// A serializable [`ApiError`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RecApiError {
    status: u16,
    error_type: Option<String>,
    code: Option<String>,
    message: String,
    request_id: Option<String>,
    retry_after_ms: Option<u64>,
    should_retry: Option<bool>,
}

impl RecApiError {
    fn from_api(e: &ApiError) -> Self {
        RecApiError {
            status: e.status,
            error_type: e.error_type.clone(),
            code: e.code.clone(),
            message: e.message.clone(),
            request_id: e.request_id.clone(),
            retry_after_ms: e
                .retry_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            should_retry: e.should_retry,
        }
    }

    fn into_api(self) -> Box<ApiError> {
        let mut e = ApiError::new(self.status, self.message);
        e.error_type = self.error_type;
        e.code = self.code;
        e.request_id = self.request_id;
        e.retry_after = self.retry_after_ms.map(Duration::from_millis);
        e.should_retry = self.should_retry;
        Box::new(e)
    }
}

/// A serializable [`LlmError`]: replayed, it is the same error (same message, same
/// retryability), so the run ends with the same `Termination` as in-process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum RecError {
    Connect {
        message: String,
    },
    Timeout {
        which: String,
        after_ms: u64,
    },
    Api {
        error: RecApiError,
    },
    ContextOverflow {
        error: RecApiError,
    },
    Stream {
        error_type: String,
        message: String,
    },
    Incomplete {
        detail: String,
    },
    Transport {
        message: String,
    },
    Malformed {
        message: String,
    },
    LimitExceeded {
        what: String,
        limit: usize,
        setting: String,
    },
    InvalidRequest {
        message: String,
    },
    Redirected {
        location: String,
    },
    UnexpectedContentType {
        content_type: String,
        body_start: String,
    },
    /// A kind a later core version added: kept as text, not retried.
    Other {
        message: String,
    },
}

/// The `&'static str`s of [`LlmError::LimitExceeded`] the core uses; an unknown one replays
/// as a generic name (the limit and setting stay exact where known).
const LIMIT_NAMES: &[&str] = &[
    "a conversation summary",
    "a whole JSON response",
    "an SSE event",
    "an SSE line",
    "the arguments of one tool call",
    "the response",
    "LlmSummarizer::max_tokens",
    "StreamLimits::max_event_bytes",
    "StreamLimits::max_line_bytes",
    "StreamLimits::max_response_bytes",
    "StreamLimits::max_tool_args_bytes",
];

fn static_name(name: &str) -> &'static str {
    LIMIT_NAMES
        .iter()
        .find(|known| **known == name)
        .copied()
        .unwrap_or("a streamed value")
}

impl RecError {
    pub fn from_llm(error: &LlmError) -> RecError {
        match error {
            LlmError::Connect { message } => RecError::Connect {
                message: message.clone(),
            },
            LlmError::Timeout { kind, after } => RecError::Timeout {
                which: match kind {
                    TimeoutKind::Connect => "connect",
                    TimeoutKind::FirstByte => "first_byte",
                    TimeoutKind::Idle => "idle",
                    _ => "total",
                }
                .to_owned(),
                after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
            },
            LlmError::Api(e) => RecError::Api {
                error: RecApiError::from_api(e),
            },
            LlmError::ContextOverflow(e) => RecError::ContextOverflow {
                error: RecApiError::from_api(e),
            },
            LlmError::Stream {
                error_type,
                message,
            } => RecError::Stream {
                error_type: error_type.clone(),
                message: message.clone(),
            },
            LlmError::Incomplete { detail } => RecError::Incomplete {
                detail: detail.clone(),
            },
            LlmError::Transport { message } => RecError::Transport {
                message: message.clone(),
            },
            LlmError::Malformed { message } => RecError::Malformed {
                message: message.clone(),
            },
            LlmError::LimitExceeded {
                what,
                limit,
                setting,
            } => RecError::LimitExceeded {
                what: (*what).to_owned(),
                limit: *limit,
                setting: (*setting).to_owned(),
            },
            LlmError::InvalidRequest { message } => RecError::InvalidRequest {
                message: message.clone(),
            },
            LlmError::Redirected { location } => RecError::Redirected {
                location: location.clone(),
            },
            LlmError::UnexpectedContentType {
                content_type,
                body_start,
            } => RecError::UnexpectedContentType {
                content_type: content_type.clone(),
                body_start: body_start.clone(),
            },
            other => RecError::Other {
                message: other.to_string(),
            },
        }
    }

    pub fn into_llm(self) -> LlmError {
        match self {
            RecError::Connect { message } => LlmError::Connect { message },
            RecError::Timeout { which, after_ms } => LlmError::Timeout {
                kind: match which.as_str() {
                    "connect" => TimeoutKind::Connect,
                    "first_byte" => TimeoutKind::FirstByte,
                    "idle" => TimeoutKind::Idle,
                    _ => TimeoutKind::Total,
                },
                after: Duration::from_millis(after_ms),
            },
            RecError::Api { error } => LlmError::Api(error.into_api()),
            RecError::ContextOverflow { error } => LlmError::ContextOverflow(error.into_api()),
            RecError::Stream {
                error_type,
                message,
            } => LlmError::Stream {
                error_type,
                message,
            },
            RecError::Incomplete { detail } => LlmError::Incomplete { detail },
            RecError::Transport { message } => LlmError::Transport { message },
            RecError::Malformed { message } => LlmError::Malformed { message },
            RecError::LimitExceeded {
                what,
                limit,
                setting,
            } => LlmError::LimitExceeded {
                what: static_name(&what),
                limit,
                setting: static_name(&setting),
            },
            RecError::InvalidRequest { message } => LlmError::InvalidRequest { message },
            RecError::Redirected { location } => LlmError::Redirected { location },
            RecError::UnexpectedContentType {
                content_type,
                body_start,
            } => LlmError::UnexpectedContentType {
                content_type,
                body_start,
            },
            RecError::Other { message } => LlmError::InvalidRequest { message },
        }
    }
}

/// One journaled tool call: the result the model reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ToolStep {
    pub content: String,
    pub is_error: bool,
    pub duration_ms: u64,
    /// Images the tool returned with its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaSource>,
}

impl ToolStep {
    pub fn from_result(result: &ToolCallResult) -> Self {
        ToolStep {
            content: result.content.clone(),
            is_error: result.is_error,
            duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
            images: result.images.clone(),
        }
    }

    pub fn into_result(self, id: String, name: String) -> ToolCallResult {
        ToolCallResult::new(
            id,
            name,
            self.content,
            self.is_error,
            Duration::from_millis(self.duration_ms),
        )
        .with_images(self.images)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_replay_as_the_same_error() {
        let mut api = ApiError::new(529, "overloaded");
        api.error_type = Some("overloaded_error".into());
        api.retry_after = Some(Duration::from_millis(1500));
        let errors = [
            LlmError::Api(Box::new(api.clone())),
            LlmError::ContextOverflow(Box::new(ApiError::new(400, "too long"))),
            LlmError::Transport {
                message: "reset".into(),
            },
            LlmError::Timeout {
                kind: TimeoutKind::Idle,
                after: Duration::from_secs(30),
            },
            LlmError::LimitExceeded {
                what: "an SSE line",
                limit: 10,
                setting: "StreamLimits::max_line_bytes",
            },
        ];
        for error in errors {
            let json = serde_json::to_string(&RecError::from_llm(&error)).unwrap();
            let back: RecError = serde_json::from_str(&json).unwrap();
            let back = back.into_llm();
            assert_eq!(back, error);
            assert_eq!(back.is_retryable(), error.is_retryable());
        }
    }

    #[test]
    fn deltas_of_one_block_merge() {
        let mut events = Vec::new();
        for event in [
            LlmEvent::TextDelta {
                index: 0,
                text: "he".into(),
            },
            LlmEvent::TextDelta {
                index: 0,
                text: "llo".into(),
            },
            LlmEvent::BlockStop { index: 0 },
            LlmEvent::ToolCallStart {
                index: 1,
                id: "c".into(),
                name: "t".into(),
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: "{\"a\"".into(),
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: ":1}".into(),
            },
        ] {
            push_coalesced(&mut events, Event::from_llm(&event).unwrap());
        }
        let back: Vec<LlmEvent> = events.into_iter().map(Event::into_llm).collect();
        assert_eq!(back.len(), 4);
        assert_eq!(
            back[0],
            LlmEvent::TextDelta {
                index: 0,
                text: "hello".into()
            }
        );
        assert_eq!(
            back[3],
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: "{\"a\":1}".into()
            }
        );
    }
}
