//! Ollama `/api/chat` stream decoding: one JSON object per line (`application/x-ndjson`) →
//! [`LlmEvent`]s.
//!
//! Each line is a `ChatResponse` (docs/api.md, "Generate a chat completion"):
//!
//! ```text
//! {"model":"llama3.2","created_at":"…","message":{"role":"assistant","content":"The"},"done":false}
//! {"model":"llama3.2","created_at":"…","message":{"role":"assistant","content":"","thinking":"…",
//!   "tool_calls":[{"id":"call_x","function":{"index":0,"name":"get_weather","arguments":{"city":"Tokyo"}}}]},"done":false}
//! {"model":"llama3.2","created_at":"…","message":{"role":"assistant","content":""},"done":true,
//!   "done_reason":"stop","prompt_eval_count":26,"eval_count":282,"total_duration":…}
//! ```
//!
//! The end marker is a line with `"done": true`; a body that ends without one is
//! [`LlmError::Incomplete`]. A line `{"error":"…"}` (docs/api/errors.mdx, "Errors that occur
//! while streaming") is the stream's error.
//!
//! Ollama has no content blocks; the decoder makes them, as the OpenAI Chat decoder does:
//! thinking and text each open a block when they start after something else, and every tool
//! call is a block of its own. Tool calls arrive whole (arguments as a JSON object), so each is
//! `ToolCallStart`, one `ToolCallDelta` with the whole arguments, `BlockStop`.
//!
//! Lenient where servers differ: thinking may arrive as `thinking` (Ollama), `reasoning` or
//! `reasoning_content` (compatible mocks and proxies); arguments may be a JSON object or a JSON
//! string; a call without `id` gets `call_<n>`, `n` counting the calls of this response (unique
//! within it, never random: the agent renames ids repeated across turns); unknown fields are
//! ignored; lines after the end marker are ignored.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{ApiError, LlmError};
use crate::message::{StopReason, Usage};
use crate::provider::CowStr;
use crate::wire::LlmEvent;

/// The most tool calls one response may carry; beyond it the stream is refused.
const MAX_TOOL_CALLS: usize = 1024;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default)]
    model: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    message: Option<WireMessage<'a>>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(borrow, default)]
    done_reason: Option<CowStr<'a>>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    /// Not sent by Ollama itself (it drops the status of an error once the body started);
    /// some proxies keep it.
    #[serde(default)]
    status: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow, default)]
    content: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    thinking: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(borrow, default)]
    id: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(borrow, default)]
    name: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    Thinking,
}

/// Decoder state for one response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    done: bool,
    /// The block index the next new block gets.
    next_block: usize,
    /// The open text or thinking block, where text of the same kind is appended.
    current: Option<(BlockKind, usize)>,
    /// How many tool calls this response carried so far.
    calls: usize,
}

crate::wire::decoder::event_decoder!(Decoder);

impl Decoder {
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// One line of the body (without its newline).
    pub(crate) fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        if self.done || data.trim_ascii().is_empty() {
            return Ok(());
        }
        let line: Line<'_> = serde_json::from_str(data)
            .map_err(|e| LlmError::malformed(format!("invalid JSON in Ollama stream line: {e}")))?;
        if let Some(error) = &line.error {
            return Err(stream_error(error, line.status.as_ref()));
        }
        if !self.started {
            self.started = true;
            out.push(LlmEvent::MessageStart {
                id: String::new(),
                model: line.model.map(CowStr::into_string).unwrap_or_default(),
            });
        }
        if let Some(message) = line.message {
            self.message(message, out)?;
        }
        if line.done == Some(true) {
            self.close_current(out);
            if line.prompt_eval_count.is_some() || line.eval_count.is_some() {
                out.push(LlmEvent::Usage(Usage {
                    input_tokens: line.prompt_eval_count.unwrap_or(0),
                    output_tokens: line.eval_count.unwrap_or(0),
                    ..Usage::default()
                }));
            }
            let reason = match line.done_reason.as_ref().map(CowStr::as_str) {
                None | Some("") => StopReason::EndTurn,
                Some(reason) => StopReason::from_wire(reason),
            };
            // Ollama says `stop` when the model called tools: the calls are what matters.
            let reason = if reason == StopReason::EndTurn && self.calls > 0 {
                StopReason::ToolUse
            } else {
                reason
            };
            self.done = true;
            out.push(LlmEvent::MessageStop {
                stop_reason: reason,
            });
        }
        Ok(())
    }

    fn message(
        &mut self,
        message: WireMessage<'_>,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let thinking = [
            message.thinking,
            message.reasoning,
            message.reasoning_content,
        ]
        .into_iter()
        .flatten()
        .find(|t| !t.as_str().is_empty());
        if let Some(thinking) = thinking {
            let index = self.block_for(BlockKind::Thinking, out);
            out.push(LlmEvent::ThinkingDelta {
                index,
                thinking: thinking.into_string(),
            });
        }
        if let Some(text) = message.content.filter(|t| !t.as_str().is_empty()) {
            let index = self.block_for(BlockKind::Text, out);
            out.push(LlmEvent::TextDelta {
                index,
                text: text.into_string(),
            });
        }
        for call in message.tool_calls.into_iter().flatten() {
            self.tool_call(call, out)?;
        }
        Ok(())
    }

    /// The block text of `kind` goes to: the current block when it is of that kind, else a
    /// new one (the current one stops).
    fn block_for(&mut self, kind: BlockKind, out: &mut Vec<LlmEvent>) -> usize {
        match self.current {
            Some((k, index)) if k == kind => index,
            _ => {
                self.close_current(out);
                let index = self.open_block();
                self.current = Some((kind, index));
                index
            }
        }
    }

    fn open_block(&mut self) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        index
    }

    fn close_current(&mut self, out: &mut Vec<LlmEvent>) {
        if let Some((_, index)) = self.current.take() {
            out.push(LlmEvent::BlockStop { index });
        }
    }

    /// A whole tool call: its own block, started, given its arguments and stopped at once.
    fn tool_call(
        &mut self,
        call: WireToolCall<'_>,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let Some(function) = call.function else {
            return Err(LlmError::malformed(
                "Ollama tool call without a `function` object",
            ));
        };
        let Some(name) = function.name.filter(|n| !n.as_str().is_empty()) else {
            return Err(LlmError::malformed(
                "Ollama tool call without a function name",
            ));
        };
        if self.calls >= MAX_TOOL_CALLS {
            return Err(LlmError::malformed(format!(
                "more than {MAX_TOOL_CALLS} tool calls in one response"
            )));
        }
        let id = match call.id.filter(|id| !id.as_str().is_empty()) {
            Some(id) => id.into_string(),
            None => format!("call_{}", self.calls),
        };
        self.calls += 1;
        let arguments = match function.arguments {
            None => "{}".to_owned(),
            Some(raw) => {
                let text = raw.get();
                if text == "null" {
                    "{}".to_owned()
                } else if text.starts_with('"') {
                    // Arguments sent as a JSON string (OpenAI style): its text is the JSON.
                    match serde_json::from_str::<CowStr<'_>>(text) {
                        Ok(inner) => inner.into_string(),
                        Err(_) => text.to_owned(),
                    }
                } else {
                    text.to_owned()
                }
            }
        };
        self.close_current(out);
        let index = self.open_block();
        out.push(LlmEvent::ToolCallStart {
            index,
            id,
            name: name.into_string(),
        });
        out.push(LlmEvent::ToolCallDelta {
            index,
            partial_json: arguments,
        });
        out.push(LlmEvent::BlockStop { index });
        Ok(())
    }

    /// Decodes a whole, non-streamed response (`"stream": false`): one object with
    /// `"done": true`. A body of several lines (an NDJSON stream sent as `application/json`)
    /// is decoded line by line.
    pub(crate) fn decode_whole(
        &mut self,
        body: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let single = serde_json::from_str::<&RawValue>(body).is_ok();
        if single {
            self.on_event("", body, out)?;
        } else {
            for line in body.lines() {
                self.on_event("", line, out)?;
            }
        }
        if !self.done {
            if !self.started {
                return Err(LlmError::malformed(
                    "the JSON body is not an Ollama chat response",
                ));
            }
            // A whole response without `done` still is the whole answer.
            self.close_current(out);
            self.done = true;
            let stop_reason = if self.calls > 0 {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            };
            out.push(LlmEvent::MessageStop { stop_reason });
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no line with \"done\": true"
        } else {
            "no line at all; the body was empty or not an Ollama stream"
        }))
    }
}

/// An `{"error": …}` line in the stream.
///
/// Ollama sends `{"error":"<message>"}`; it would have answered the same failure with an HTTP
/// status (500 unless it knows better) had the body not started, so the error is classified
/// like that status: a server failure (`server_error`, retried), or an overload
/// (`overloaded_error`) or rate limit (`rate_limit_error`) when the message says so, or a
/// context overflow when the message says the input exceeds the context length. An error
/// object (`{"error":{"message","type"}}`, as compatible mocks send) keeps its type; a
/// `status` beside it (proxies) makes it the [`LlmError::Api`] of that status.
pub(crate) fn stream_error(
    error: &serde_json::Value,
    status: Option<&serde_json::Value>,
) -> LlmError {
    let (message, error_type) = match error {
        serde_json::Value::String(message) => (message.clone(), None),
        serde_json::Value::Object(inner) => (
            inner
                .get("message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            inner
                .get("type")
                .and_then(serde_json::Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
        ),
        other => (other.to_string().chars().take(500).collect(), None),
    };
    let status = status
        .and_then(|s| match s {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (400..=599).contains(s));
    if let Some(status) = status {
        let mut api = ApiError::new(status, message);
        api.error_type = error_type;
        return if is_context_overflow(&api) {
            LlmError::ContextOverflow(Box::new(api))
        } else {
            LlmError::Api(Box::new(api))
        };
    }
    let overflow = ApiError::new(400, message.clone());
    if error_type.is_none() && is_context_overflow(&overflow) {
        return LlmError::ContextOverflow(Box::new(overflow));
    }
    let error_type = error_type.unwrap_or_else(|| classify(&message).to_owned());
    LlmError::Stream {
        error_type,
        message,
    }
}

/// The error type an Ollama error message names, as `transient_kind` knows them.
fn classify(message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if ["overloaded", "server busy", "too busy", "unavailable"]
        .iter()
        .any(|needle| lower.contains(needle))
    {
        "overloaded_error"
    } else if ["rate limit", "too many requests", "quota"]
        .iter()
        .any(|needle| lower.contains(needle))
    {
        "rate_limit_error"
    } else {
        "server_error"
    }
}

/// Ollama refuses a prompt longer than the context with a 400 "the input length exceeds the
/// context length" or "the prompt is longer than the context length …" (and, when it cannot
/// truncate, "input exceeds maximum context length").
pub(crate) fn is_context_overflow(error: &ApiError) -> bool {
    if !(400..500).contains(&error.status) {
        return false;
    }
    let message = error.message.to_ascii_lowercase();
    [
        "exceeds the context length",
        "longer than the context length",
        "exceeds maximum context length",
        "context window",
        "maximum context length",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &str) -> Result<Vec<LlmEvent>, LlmError> {
        let mut decoder = Decoder::default();
        let mut out = Vec::new();
        for line in body.lines() {
            decoder.on_event("", line, &mut out)?;
        }
        decoder.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn thinking_text_and_a_call_get_their_own_blocks() {
        let body = r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}
{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}
{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}
{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":3}"#;
        let events = decode(body).unwrap();
        assert_eq!(
            events,
            vec![
                LlmEvent::MessageStart {
                    id: String::new(),
                    model: "m".into()
                },
                LlmEvent::ThinkingDelta {
                    index: 0,
                    thinking: "hm".into()
                },
                LlmEvent::BlockStop { index: 0 },
                LlmEvent::TextDelta {
                    index: 1,
                    text: "Hi".into()
                },
                LlmEvent::BlockStop { index: 1 },
                LlmEvent::ToolCallStart {
                    index: 2,
                    id: "call_0".into(),
                    name: "f".into()
                },
                LlmEvent::ToolCallDelta {
                    index: 2,
                    partial_json: r#"{"a":1}"#.into()
                },
                LlmEvent::BlockStop { index: 2 },
                LlmEvent::Usage(Usage {
                    input_tokens: 7,
                    output_tokens: 3,
                    ..Usage::default()
                }),
                LlmEvent::MessageStop {
                    stop_reason: StopReason::ToolUse
                },
            ]
        );
    }

    #[test]
    fn errors_are_classified() {
        let e =
            decode(r#"{"error":"an error was encountered while running the model"}"#).unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        let e = decode(r#"{"error":"the input length exceeds the context length"}"#).unwrap_err();
        assert!(matches!(e, LlmError::ContextOverflow(_)), "{e:?}");
        let e = decode(r#"{"error":"bad","status":400}"#).unwrap_err();
        assert!(
            matches!(&e, LlmError::Api(api) if api.status == 400),
            "{e:?}"
        );
        let e = decode(
            r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#,
        )
        .unwrap_err();
        assert!(
            matches!(&e, LlmError::Stream { error_type, .. } if error_type == "overloaded_error"),
            "{e:?}"
        );
        let e =
            decode(r#"{"error":{"message":"nope","type":"invalid_request_error"}}"#).unwrap_err();
        assert!(!e.is_retryable(), "{e:?}");
    }

    #[test]
    fn string_arguments_and_garbage() {
        let events = decode(
            r#"{"message":{"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{\"a\":2}"}}]},"done":true}"#,
        )
        .unwrap();
        assert!(events.contains(&LlmEvent::ToolCallDelta {
            index: 0,
            partial_json: r#"{"a":2}"#.into()
        }));
        assert!(matches!(decode("{nope"), Err(LlmError::Malformed { .. })));
        assert!(matches!(decode(""), Err(LlmError::Incomplete { .. })));
        assert!(matches!(
            decode(r#"{"message":{"tool_calls":[{"function":{}}]},"done":false}"#),
            Err(LlmError::Malformed { .. })
        ));
    }
}
