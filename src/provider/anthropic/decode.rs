//! Anthropic Messages stream decoding: SSE events → [`LlmEvent`]s.
//!
//! The documented sequence is `message_start`, then per content block `content_block_start`,
//! `content_block_delta`*, `content_block_stop`, then `message_delta` (stop reason, usage) and
//! `message_stop`; `ping` and `error` events may appear anywhere. Unknown event names, block
//! types and delta types are tolerated (the API's versioning policy adds them).
//!
//! Payloads are deserialized into flat borrowed structs: text and JSON fragments without
//! escapes are never copied before they become the event's own `String`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::LlmError;
use crate::message::{StopReason, Usage};
use crate::provider::LlmEvent;

/// A string borrowed from the payload when it has no escapes.
#[derive(Deserialize)]
struct CowStr<'a>(#[serde(borrow)] Cow<'a, str>);

impl CowStr<'_> {
    fn into_string(self) -> String {
        self.0.into_owned()
    }
}

/// Every Anthropic stream event in one flat shape; which fields are set depends on `type`.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<CowStr<'a>>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    content_block: Option<&'a RawValue>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    text: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    thinking: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    signature: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Usage as sent; absent fields leave the running figure unchanged.
#[derive(Deserialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Anthropic's usage figures are cumulative: a present field replaces the running one.
    fn apply(&self, usage: &mut Usage) {
        if let Some(v) = self.input_tokens {
            usage.input_tokens = v;
        }
        if let Some(v) = self.output_tokens {
            usage.output_tokens = v;
        }
        if let Some(v) = self.cache_read_input_tokens {
            usage.cache_read_input_tokens = v;
        }
        if let Some(v) = self.cache_creation_input_tokens {
            usage.cache_creation_input_tokens = v;
        }
    }
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    ty: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The start of a content block, for the types the crate models.
#[derive(Deserialize)]
struct BlockStart {
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

/// Decoder state: what has been seen of the message so far.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    done: bool,
    usage: Usage,
    stop_reason: Option<StopReason>,
}

fn required_index(index: Option<usize>, what: &str) -> Result<usize, LlmError> {
    index.ok_or_else(|| LlmError::malformed(format!("Anthropic {what} event without an index")))
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        if event == "ping" || self.done {
            // Keep-alives carry nothing; anything after message_stop is ignored.
            return Ok(());
        }
        let parsed: Event<'_> = serde_json::from_str(data).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in Anthropic `{event}` event: {e}"))
        })?;
        // The payload's `type` is authoritative; proxies that drop `event:` lines are tolerated.
        let ty = match &parsed.ty {
            Some(t) => t.0.as_ref(),
            None => event,
        };
        match ty {
            "content_block_delta" => {
                let index = required_index(parsed.index, ty)?;
                let Some(delta) = parsed.delta else {
                    return Err(LlmError::malformed(
                        "Anthropic content_block_delta without a delta",
                    ));
                };
                let delta_ty = delta.ty.as_ref().map(|t| t.0.as_ref()).unwrap_or("");
                match delta_ty {
                    "text_delta" => {
                        if let Some(text) = delta.text {
                            out.push(LlmEvent::TextDelta {
                                index,
                                text: text.into_string(),
                            });
                        }
                    }
                    "input_json_delta" => {
                        if let Some(json) = delta.partial_json {
                            out.push(LlmEvent::ToolCallDelta {
                                index,
                                partial_json: json.into_string(),
                            });
                        }
                    }
                    "thinking_delta" => {
                        if let Some(thinking) = delta.thinking {
                            out.push(LlmEvent::ThinkingDelta {
                                index,
                                thinking: thinking.into_string(),
                            });
                        }
                    }
                    "signature_delta" => {
                        if let Some(signature) = delta.signature {
                            out.push(LlmEvent::SignatureDelta {
                                index,
                                signature: signature.into_string(),
                            });
                        }
                    }
                    // citations_delta and future delta types carry nothing the crate models.
                    _ => {}
                }
            }
            "content_block_start" => {
                let index = required_index(parsed.index, ty)?;
                let Some(raw) = parsed.content_block else {
                    return Err(LlmError::malformed(
                        "Anthropic content_block_start without a content_block",
                    ));
                };
                self.block_start(index, raw, out)?;
            }
            "content_block_stop" => {
                let index = required_index(parsed.index, ty)?;
                out.push(LlmEvent::BlockStop { index });
            }
            "message_start" => {
                self.started = true;
                let message = parsed.message.unwrap_or(MessageStart {
                    id: None,
                    model: None,
                    usage: None,
                });
                out.push(LlmEvent::MessageStart {
                    id: message.id.unwrap_or_default(),
                    model: message.model.unwrap_or_default(),
                });
                if let Some(usage) = message.usage {
                    usage.apply(&mut self.usage);
                    out.push(LlmEvent::Usage(self.usage));
                }
            }
            "message_delta" => {
                if let Some(reason) = parsed.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(StopReason::from_wire(&reason.0));
                }
                if let Some(usage) = parsed.usage {
                    usage.apply(&mut self.usage);
                    out.push(LlmEvent::Usage(self.usage));
                }
            }
            "message_stop" => {
                if !self.started {
                    return Err(LlmError::malformed(
                        "Anthropic message_stop without a message_start",
                    ));
                }
                self.done = true;
                out.push(LlmEvent::MessageStop {
                    stop_reason: self.stop_reason.clone().unwrap_or(StopReason::EndTurn),
                });
            }
            "error" => {
                let error = parsed.error.unwrap_or(WireError {
                    ty: None,
                    message: None,
                });
                return Err(LlmError::Stream {
                    error_type: error.ty.unwrap_or_else(|| "error".to_owned()),
                    message: error
                        .message
                        .unwrap_or_else(|| data.chars().take(500).collect()),
                });
            }
            // "ping" with a `type` only, and event types added later.
            _ => {}
        }
        Ok(())
    }

    fn block_start(
        &mut self,
        index: usize,
        raw: &RawValue,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let block: BlockStart = serde_json::from_str(raw.get())
            .map_err(|e| LlmError::malformed(format!("invalid Anthropic content_block: {e}")))?;
        match block.ty.as_str() {
            "text" => {
                // Opens the block (usually with empty text); the assembler drops text blocks
                // that stay empty, which Anthropic would reject when the history is sent back.
                out.push(LlmEvent::TextDelta {
                    index,
                    text: block.text.unwrap_or_default(),
                });
            }
            "thinking" => {
                out.push(LlmEvent::ThinkingDelta {
                    index,
                    thinking: block.thinking.unwrap_or_default(),
                });
                if let Some(signature) = block.signature.filter(|s| !s.is_empty()) {
                    out.push(LlmEvent::SignatureDelta { index, signature });
                }
            }
            "redacted_thinking" => {
                out.push(LlmEvent::RedactedThinking {
                    index,
                    data: block.data.unwrap_or_default(),
                });
            }
            "tool_use" => {
                let (Some(id), Some(name)) = (block.id, block.name) else {
                    return Err(LlmError::malformed(
                        "Anthropic tool_use block without an id or a name",
                    ));
                };
                out.push(LlmEvent::ToolCallStart { index, id, name });
            }
            _ => {
                // server_tool_use, web_search_tool_result and future types: kept verbatim.
                let value: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| {
                    LlmError::malformed(format!("invalid Anthropic content_block: {e}"))
                })?;
                out.push(LlmEvent::OtherBlock {
                    index,
                    block: value,
                });
            }
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no message_stop event"
        } else {
            "no message_start event; the body was empty or not an Anthropic stream"
        }))
    }
}
