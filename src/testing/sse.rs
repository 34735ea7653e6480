//! Encodes a [`ScriptedResponse`] into a format's streamed body (each format's own encoder,
//! `provider/<format>/mock.rs`, writes the bytes), as segments the mock server can cut, chunk
//! and interrupt.

use crate::error::LlmError;
use crate::wire::{LlmEvent, WireFormat};

use super::scripted::{Ending, ScriptedResponse, Step};
use crate::provider;
pub(crate) use crate::provider::mock::Segment;

/// What happens after the encoded segments when the response does not end normally.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tail {
    /// The body ends (cleanly, or after a truncation).
    None,
    /// An in-stream error event.
    ErrorEvent { error_type: String, message: String },
    /// A malformed event.
    Garbage,
    /// The connection drops without the terminating chunk.
    Disconnect,
    /// Nothing more is sent; the connection stays open.
    Stall,
}

/// The bytes of an in-stream error event in `format`.
pub(crate) fn error_event(format: WireFormat, error_type: &str, message: &str) -> Vec<u8> {
    provider::of(format).mock().error_event(error_type, message)
}

/// The bytes of a keep-alive in `format`.
pub(crate) fn keep_alive(format: WireFormat) -> Vec<u8> {
    provider::of(format).mock().keep_alive()
}

/// Encodes `response` for `format`: the segments, and what follows them.
pub(crate) fn encode(format: WireFormat, response: &ScriptedResponse) -> (Vec<Segment>, Tail) {
    let mut events: Vec<LlmEvent> = Vec::new();
    if response.preamble {
        events.push(LlmEvent::MessageStart {
            id: response.id.clone(),
            model: response.model_or("scripted-model").to_owned(),
        });
    }
    let mut index = 0usize;
    for step in &response.steps {
        match step {
            Step::Block(block) => {
                events.extend(response.block_events(index, block));
                index += 1;
            }
            Step::Event(event) => events.push(event.clone()),
            Step::Pause(_) => {}
        }
    }
    let usage = response.usage.unwrap_or_default();
    let tail = match &response.ending {
        Ending::Complete => {
            events.push(LlmEvent::Usage(usage));
            events.push(LlmEvent::MessageStop {
                stop_reason: response.effective_stop_reason(),
            });
            Tail::None
        }
        Ending::Raw => Tail::None,
        Ending::Stall => Tail::Stall,
        Ending::Fail(error) => tail_for(error),
    };
    let segments = provider::of(format).mock().encode_stream(&events, usage);
    (segments, tail)
}

/// How a scripted mid-stream failure is reproduced on the wire.
fn tail_for(error: &LlmError) -> Tail {
    match error {
        LlmError::Incomplete { .. } => Tail::None,
        LlmError::Transport { .. } | LlmError::Connect { .. } => Tail::Disconnect,
        LlmError::Timeout { .. } => Tail::Stall,
        LlmError::Malformed { .. } => Tail::Garbage,
        LlmError::Stream {
            error_type,
            message,
        } => Tail::ErrorEvent {
            error_type: error_type.clone(),
            message: message.clone(),
        },
        LlmError::Api(api) | LlmError::ContextOverflow(api) => Tail::ErrorEvent {
            error_type: api
                .error_type
                .clone()
                .unwrap_or_else(|| "api_error".to_owned()),
            message: api.message.clone(),
        },
        other => Tail::ErrorEvent {
            error_type: "api_error".to_owned(),
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{StopReason, Usage};
    use crate::wire::WireDecoder;
    use serde_json::json;

    fn decode(format: WireFormat, segments: &[Segment]) -> Result<Vec<LlmEvent>, LlmError> {
        let mut decoder = WireDecoder::new(format);
        let mut events = Vec::new();
        for s in segments {
            decoder.push(&s.bytes, &mut events)?;
        }
        decoder.finish(&mut events)?;
        Ok(events)
    }

    #[test]
    fn both_encodings_decode_to_the_scripted_content() {
        let response = ScriptedResponse::thinking("hmm", "sig")
            .then_text("Hello")
            .then_tool_call("call_1", "add", json!({"a": 1}))
            .then_tool_call("call_2", "add", json!({"a": 2}))
            .chunked(3)
            .usage_tokens(10, 5);
        for format in [
            WireFormat::Anthropic,
            WireFormat::OpenAiChat,
            WireFormat::OpenAiResponses,
        ] {
            let (segments, tail) = encode(format, &response);
            assert_eq!(tail, Tail::None);
            let events = decode(format, &segments).unwrap();
            let text: String = events
                .iter()
                .filter_map(|e| match e {
                    LlmEvent::TextDelta { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(text, "Hello", "{format:?}");
            let calls: Vec<&str> = events
                .iter()
                .filter_map(|e| match e {
                    LlmEvent::ToolCallStart { id, .. } => Some(id.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(calls, ["call_1", "call_2"], "{format:?}");
            assert_eq!(
                events.last(),
                Some(&LlmEvent::MessageStop {
                    stop_reason: StopReason::ToolUse
                }),
                "{format:?}"
            );
            assert!(events.contains(&LlmEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            })));
        }
    }
}
