//! [`StreamAssembler`]: builds a [`ModelResponse`] from a response's [`LlmEvent`]s.
//!
//! Blocks are keyed by their index in the response, never by tool-call id, so interleaved
//! parallel tool calls assemble correctly. Each block is a small state machine:
//!
//! ```text
//!            first event for index                    BlockStop
//!   (none) ───────────────────────► Open(kind) ───────────────────► Closed
//!                                     │  ▲                            │
//!                                     └──┘ delta of the same kind      └─ any delta: error
//! ```
//!
//! A delta of another kind than the block's, or for a closed block, is
//! [`LlmError::Malformed`]. Tool arguments are appended as they come (amortized linear time)
//! and parsed once, when the block closes. Arguments that are not a JSON object do not abort
//! the response: the call is listed in [`ModelResponse::invalid_tool_calls`] with its raw text,
//! so the agent can tell the model. A tool call still open when the message ends (cut off by
//! `max_tokens`) is listed there as incomplete and is never executed.

use std::collections::HashMap;

use crate::error::LlmError;
use crate::message::{ContentBlock, Message, Role, StopReason, Usage};
use crate::wire::{LlmEvent, StreamLimits};

/// One complete model response.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// The assistant message, its blocks in the model's order. Tool calls listed in
    /// `invalid_tool_calls` appear here with an empty object as input.
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// The stop sequence that ended the response, when [`StopReason::StopSequence`] is why
    /// (Anthropic reports which one).
    pub stop_sequence: Option<String>,
    /// Token usage of this response.
    pub usage: Usage,
    /// The provider's response id (empty when it sent none).
    pub id: String,
    /// The model that answered (empty when the provider did not say).
    pub model: String,
    /// Tool calls whose arguments are unusable: not valid JSON, not an object, or cut off.
    /// They must not be executed; answer each with an error result.
    pub invalid_tool_calls: Vec<InvalidToolCall>,
    /// The edits the server applied to the request's context (Anthropic context editing,
    /// from [`LlmEvent::ContextEdited`]); empty when none.
    pub context_edits: Vec<super::AppliedEdit>,
}

impl ModelResponse {
    /// The concatenated text of the response.
    pub fn text(&self) -> String {
        self.message.text()
    }

    /// Whether the tool call with this id is listed as invalid.
    pub fn is_invalid_tool_call(&self, id: &str) -> bool {
        self.invalid_tool_calls.iter().any(|c| c.id == id)
    }
}

/// A tool call that must not be executed, with why.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidToolCall {
    /// The call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments text as received.
    pub raw_arguments: String,
    /// What is wrong with it.
    pub reason: InvalidToolCallReason,
}

/// Why a tool call cannot be executed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum InvalidToolCallReason {
    /// The arguments are not valid JSON, or not a JSON object; the parser's message.
    Malformed(String),
    /// The response ended (e.g. at `max_tokens`) before the call's arguments were complete.
    Incomplete,
}

impl std::fmt::Display for InvalidToolCallReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidToolCallReason::Malformed(e) => {
                write!(f, "the arguments are not a valid JSON object ({e})")
            }
            InvalidToolCallReason::Incomplete => {
                f.write_str("the arguments were cut off before they were complete")
            }
        }
    }
}

#[derive(Debug)]
enum Body {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    Reasoning {
        id: String,
        summary: Vec<String>,
        encrypted_content: Option<String>,
    },
    Tool {
        id: String,
        name: String,
        args: String,
    },
    Compaction {
        id: Option<String>,
        encrypted_content: String,
    },
    Other {
        block: serde_json::Value,
        args: String,
    },
}

#[derive(Debug)]
struct Slot {
    /// The block's index in the response.
    index: usize,
    closed: bool,
    body: Body,
    /// Set at close for tool calls: the parsed input, or why it is unusable.
    parsed: Option<Result<serde_json::Value, InvalidToolCallReason>>,
}

/// The tool-call JSON assembly state machine.
///
/// Blocks are keyed by their index in the response, never by tool-call id, so interleaved
/// parallel tool calls assemble correctly. Each block is a small state machine:
///
/// ```text
///            first event for index                    BlockStop
///   (none) ───────────────────────► Open(kind) ───────────────────► Closed
///                                     │  ▲                            │
///                                     └──┘ delta of the same kind      └─ any delta: error
/// ```
///
/// A delta of another kind than the block's, or for a closed block, is
/// [`LlmError::Malformed`]. Tool arguments are appended as they come (amortized linear time)
/// and parsed once, when the block closes. Arguments that are not a JSON object do not abort
/// the response: the call is listed in [`ModelResponse::invalid_tool_calls`] with its raw text,
/// so the agent can tell the model. A tool call still open when the message ends (cut off by
/// `max_tokens`) is listed there as incomplete and is never executed.
///
/// ```
/// use agent_loop::{LlmEvent, StopReason};
/// use agent_loop::wire::StreamAssembler;
///
/// let mut assembler = StreamAssembler::new();
/// for event in [
///     LlmEvent::ToolCallStart { index: 0, id: "a".into(), name: "add".into() },
///     LlmEvent::ToolCallStart { index: 1, id: "b".into(), name: "add".into() },
///     LlmEvent::ToolCallDelta { index: 1, partial_json: "{\"x\":".into() },
///     LlmEvent::ToolCallDelta { index: 0, partial_json: "{\"x\":1}".into() },
///     LlmEvent::ToolCallDelta { index: 1, partial_json: "2}".into() },
///     LlmEvent::BlockStop { index: 0 },
///     LlmEvent::BlockStop { index: 1 },
///     LlmEvent::MessageStop { stop_reason: StopReason::ToolUse },
/// ] {
///     assembler.push(&event)?;
/// }
/// let response = assembler.finish()?;
/// let calls: Vec<_> = response.message.tool_uses().map(|(id, _, input)| (id, input["x"].clone())).collect();
/// assert_eq!(calls, [("a", 1.into()), ("b", 2.into())]);
/// # Ok::<(), agent_loop::LlmError>(())
/// ```
#[derive(Debug, Default)]
pub struct StreamAssembler {
    /// Blocks in order of first appearance. Invariant: `index` values are unique.
    slots: Vec<Slot>,
    /// Block index → position in `slots`, for the blocks whose index is not their position,
    /// so a lookup costs O(1) however many blocks come and in whatever order.
    positions: HashMap<usize, usize>,
    id: String,
    model: String,
    usage: Usage,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    context_edits: Vec<super::AppliedEdit>,
    /// Bytes of text, thinking and arguments held, all blocks together.
    total_bytes: usize,
    limits: StreamLimits,
}

impl StreamAssembler {
    /// An assembler with the default [`StreamLimits`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An assembler with the given limits (tool-argument and response size).
    pub fn with_limits(limits: StreamLimits) -> Self {
        StreamAssembler {
            limits,
            ..Self::default()
        }
    }

    /// Takes one event. Errors on an illegal transition or a limit; never panics.
    pub fn push(&mut self, event: &LlmEvent) -> Result<(), LlmError> {
        match event {
            LlmEvent::MessageStart { id, model } => {
                self.id.clone_from(id);
                self.model.clone_from(model);
            }
            LlmEvent::TextDelta { index, text } => {
                self.grow(text.len())?;
                match &mut self
                    .open_or_create(*index, || Body::Text(String::new()))?
                    .body
                {
                    Body::Text(t) => t.push_str(text),
                    _ => return Err(kind_mismatch(*index, "text")),
                }
            }
            LlmEvent::ThinkingDelta { index, thinking } => {
                self.grow(thinking.len())?;
                let slot = self.open_or_create(*index, || Body::Thinking {
                    thinking: String::new(),
                    signature: String::new(),
                })?;
                match &mut slot.body {
                    Body::Thinking { thinking: t, .. } => t.push_str(thinking),
                    _ => return Err(kind_mismatch(*index, "thinking")),
                }
            }
            LlmEvent::SignatureDelta { index, signature } => {
                self.grow(signature.len())?;
                let slot = self.open_or_create(*index, || Body::Thinking {
                    thinking: String::new(),
                    signature: String::new(),
                })?;
                match &mut slot.body {
                    Body::Thinking { signature: s, .. } => s.push_str(signature),
                    _ => return Err(kind_mismatch(*index, "signature")),
                }
            }
            LlmEvent::Compaction {
                index,
                id,
                encrypted_content,
            } => {
                self.grow(encrypted_content.len() + id.as_ref().map_or(0, String::len))?;
                self.create(
                    *index,
                    Body::Compaction {
                        id: id.clone(),
                        encrypted_content: encrypted_content.clone(),
                    },
                )?;
            }
            LlmEvent::RedactedThinking { index, data } => {
                self.grow(data.len())?;
                self.create(*index, Body::Redacted(data.clone()))?;
            }
            LlmEvent::Reasoning {
                index,
                id,
                summary,
                encrypted_content,
            } => {
                let size = id.len()
                    + summary.iter().map(String::len).sum::<usize>()
                    + encrypted_content.as_ref().map_or(0, String::len);
                self.grow(size)?;
                let body = Body::Reasoning {
                    id: id.clone(),
                    summary: summary.clone(),
                    encrypted_content: encrypted_content.clone(),
                };
                // The item completes the summary streamed for the same index, if any.
                match self.position(*index) {
                    Some(_) => {
                        let slot = self.open_slot(*index)?;
                        match slot.body {
                            Body::Thinking { .. } => slot.body = body,
                            _ => return Err(kind_mismatch(*index, "reasoning")),
                        }
                    }
                    None => self.create(*index, body)?,
                }
            }
            LlmEvent::ToolCallStart { index, id, name } => {
                self.create(
                    *index,
                    Body::Tool {
                        id: id.clone(),
                        name: name.clone(),
                        args: String::new(),
                    },
                )?;
            }
            LlmEvent::OtherBlock { index, block } => {
                self.create(
                    *index,
                    Body::Other {
                        block: block.clone(),
                        args: String::new(),
                    },
                )?;
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => {
                self.grow(partial_json.len())?;
                let max = self.limits.max_tool_args_bytes;
                let slot = self.open_slot(*index)?;
                let args = match &mut slot.body {
                    Body::Tool { args, .. } | Body::Other { args, .. } => args,
                    _ => return Err(kind_mismatch(*index, "tool-argument")),
                };
                if args.len() + partial_json.len() > max {
                    return Err(LlmError::LimitExceeded {
                        what: "the arguments of one tool call".into(),
                        limit: max,
                        setting: "StreamLimits::max_tool_args_bytes".into(),
                    });
                }
                args.push_str(partial_json);
            }
            LlmEvent::BlockStop { index } => {
                let slot = self.open_slot(*index)?;
                slot.closed = true;
                if let Body::Tool { args, .. } = &slot.body {
                    slot.parsed = Some(parse_arguments(args));
                }
            }
            LlmEvent::Usage(usage) => self.usage = *usage,
            LlmEvent::StopSequence { sequence } => self.stop_sequence = Some(sequence.clone()),
            LlmEvent::MessageStop { stop_reason } => self.stop_reason = Some(stop_reason.clone()),
            // Transport figures, not part of the response.
            LlmEvent::RateLimits(_) => {}
            LlmEvent::ContextEdited { edits } => {
                let room = super::MAX_APPLIED_EDITS.saturating_sub(self.context_edits.len());
                self.context_edits.extend(edits.iter().take(room).cloned());
            }
        }
        Ok(())
    }

    /// The assembled input of the tool call at block `index`, once its block has closed with
    /// valid arguments: `(id, name, input)`. Lets a caller start a tool before the message ends.
    pub fn completed_tool_call(&self, index: usize) -> Option<(&str, &str, &serde_json::Value)> {
        let slot = self.slots.get(self.position(index)?)?;
        match (&slot.body, &slot.parsed) {
            (Body::Tool { id, name, .. }, Some(Ok(input))) => Some((id, name, input)),
            _ => None,
        }
    }

    /// Whether the end-of-message event has been seen.
    pub fn is_complete(&self) -> bool {
        self.stop_reason.is_some()
    }

    /// The response; errors if the message never ended ([`LlmError::Incomplete`]).
    pub fn finish(self) -> Result<ModelResponse, LlmError> {
        let Some(stop_reason) = self.stop_reason else {
            return Err(LlmError::incomplete("the message never ended"));
        };
        let mut content = Vec::with_capacity(self.slots.len());
        let mut invalid_tool_calls = Vec::new();
        for slot in self.slots {
            match slot.body {
                Body::Text(text) => {
                    // An empty text block is dropped, unless it is the part a signature-only
                    // thinking block signs (Gemini sends signatures on empty text parts):
                    // then it marks where that signature goes back.
                    let signs = matches!(
                        content.last(),
                        Some(ContentBlock::Thinking { thinking, signature })
                            if thinking.is_empty() && !signature.is_empty()
                    );
                    if !text.is_empty() || signs {
                        content.push(ContentBlock::Text { text });
                    }
                }
                Body::Thinking {
                    thinking,
                    signature,
                } => {
                    content.push(ContentBlock::Thinking {
                        thinking,
                        signature,
                    });
                }
                Body::Redacted(data) => content.push(ContentBlock::RedactedThinking { data }),
                Body::Compaction {
                    id,
                    encrypted_content,
                } => content.push(ContentBlock::Compaction {
                    id,
                    encrypted_content,
                }),
                Body::Reasoning {
                    id,
                    summary,
                    encrypted_content,
                } => content.push(ContentBlock::Reasoning {
                    id,
                    summary,
                    encrypted_content,
                }),
                Body::Tool { id, name, args } => {
                    let mut parsed = slot
                        .parsed
                        .unwrap_or(Err(InvalidToolCallReason::Incomplete));
                    // Arguments that end mid-value in a response cut off by max_tokens were
                    // cut off, not malformed (some servers still close the block).
                    if stop_reason == StopReason::MaxTokens
                        && matches!(parsed, Err(InvalidToolCallReason::Malformed(_)))
                        && serde_json::from_str::<serde_json::Value>(&args)
                            .is_err_and(|e| e.classify() == serde_json::error::Category::Eof)
                    {
                        parsed = Err(InvalidToolCallReason::Incomplete);
                    }
                    let input = match parsed {
                        Ok(input) => input,
                        Err(reason) => {
                            invalid_tool_calls.push(InvalidToolCall {
                                id: id.clone(),
                                name: name.clone(),
                                raw_arguments: args,
                                reason,
                            });
                            serde_json::Value::Object(serde_json::Map::new())
                        }
                    };
                    content.push(ContentBlock::ToolUse { id, name, input });
                }
                Body::Other { mut block, args } => {
                    // Server tools stream their input like client tools; keep it in the block.
                    if !args.trim().is_empty() {
                        if let (Ok(input), Some(obj)) = (
                            serde_json::from_str::<serde_json::Value>(&args),
                            block.as_object_mut(),
                        ) {
                            obj.insert("input".to_owned(), input);
                        }
                    }
                    content.push(ContentBlock::Other(block));
                }
            }
        }
        Ok(ModelResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason,
            stop_sequence: self.stop_sequence,
            usage: self.usage,
            id: self.id,
            model: self.model,
            invalid_tool_calls,
            context_edits: self.context_edits,
        })
    }

    fn grow(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.total_bytes = self.total_bytes.saturating_add(bytes);
        if self.total_bytes > self.limits.max_response_bytes {
            return Err(LlmError::LimitExceeded {
                what: "the response".into(),
                limit: self.limits.max_response_bytes,
                setting: "StreamLimits::max_response_bytes".into(),
            });
        }
        Ok(())
    }

    fn position(&self, index: usize) -> Option<usize> {
        // Providers number blocks 0, 1, 2… in order, so a block's index is usually its
        // position, found without hashing; the map holds the others.
        match self.slots.get(index) {
            Some(slot) if slot.index == index => Some(index),
            _ => self.positions.get(&index).copied(),
        }
    }

    fn create(&mut self, index: usize, body: Body) -> Result<(), LlmError> {
        if self.position(index).is_some() {
            return Err(LlmError::malformed(format!("block {index} started twice")));
        }
        // Every block costs memory even when empty: it counts against the response limit.
        let size = SLOT_OVERHEAD
            + match &body {
                Body::Tool { id, name, .. } => id.len() + name.len(),
                Body::Other { block, .. } => block.to_string().len(),
                _ => 0,
            };
        self.grow(size)?;
        if index != self.slots.len() {
            self.positions.insert(index, self.slots.len());
        }
        self.slots.push(Slot {
            index,
            closed: false,
            body,
            parsed: None,
        });
        Ok(())
    }

    fn open_slot(&mut self, index: usize) -> Result<&mut Slot, LlmError> {
        let Some(pos) = self.position(index) else {
            return Err(LlmError::malformed(format!(
                "event for block {index}, which never started"
            )));
        };
        let slot = &mut self.slots[pos];
        if slot.closed {
            return Err(LlmError::malformed(format!(
                "event for block {index} after it stopped"
            )));
        }
        Ok(slot)
    }

    /// Text and thinking deltas may open their block themselves (OpenAI has no block starts).
    fn open_or_create(
        &mut self,
        index: usize,
        body: impl FnOnce() -> Body,
    ) -> Result<&mut Slot, LlmError> {
        if self.position(index).is_none() {
            self.create(index, body())?;
        }
        self.open_slot(index)
    }
}

/// What one block costs against [`StreamLimits::max_response_bytes`] besides its content.
const SLOT_OVERHEAD: usize = 128;

fn kind_mismatch(index: usize, what: &str) -> LlmError {
    LlmError::malformed(format!(
        "{what} delta for block {index}, which is of another kind"
    ))
}

/// Parses complete tool arguments: empty means `{}`; anything but an object is refused.
fn parse_arguments(args: &str) -> Result<serde_json::Value, InvalidToolCallReason> {
    if args.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<serde_json::Value>(args) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(other) => Err(InvalidToolCallReason::Malformed(format!(
            "expected a JSON object, got {}",
            json_kind(&other)
        ))),
        Err(e) => Err(InvalidToolCallReason::Malformed(e.to_string())),
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(index: usize, text: &str) -> LlmEvent {
        LlmEvent::TextDelta {
            index,
            text: text.into(),
        }
    }

    fn response_limit(max_response_bytes: usize) -> StreamLimits {
        StreamLimits {
            max_response_bytes,
            ..StreamLimits::default()
        }
    }

    #[test]
    fn a_response_exactly_at_its_limit_is_accepted() {
        // One text block costs its bookkeeping and its bytes: 10 bytes fill the limit exactly.
        let mut assembler = StreamAssembler::with_limits(response_limit(SLOT_OVERHEAD + 10));
        assembler.push(&text(0, "01234")).unwrap();
        assembler.push(&text(0, "56789")).unwrap();
        assert_eq!(
            assembler.push(&text(0, "a")),
            Err(LlmError::LimitExceeded {
                what: "the response".into(),
                limit: SLOT_OVERHEAD + 10,
                setting: "StreamLimits::max_response_bytes".into(),
            })
        );
        // A tool call's id and name count like text.
        let mut assembler = StreamAssembler::with_limits(response_limit(SLOT_OVERHEAD + 10));
        assembler
            .push(&LlmEvent::ToolCallStart {
                index: 0,
                id: "id_01".into(),
                name: "name5".into(),
            })
            .unwrap();
        assert!(assembler
            .push(&LlmEvent::ToolCallDelta {
                index: 0,
                partial_json: "{".into(),
            })
            .is_err());
    }
}
