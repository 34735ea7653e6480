//! OpenAI Chat Completions stream decoding: `data: {chunk}` … `data: [DONE]` → [`LlmEvent`]s.
//!
//! OpenAI has no content blocks; the decoder makes them: reasoning, text and refusal text each
//! open a block when they start after something else, and every tool call (keyed by its
//! `index` in `delta.tool_calls`) gets its own block, so interleaved parallel calls stay apart.
//!
//! Lenient where compatible servers differ: a tool-call fragment without `index` is matched by
//! id, else to the last open call; ids and names repeated in every fragment are ignored; a call
//! with no id gets a generated unique one; a stream that ends after `finish_reason` without
//! `[DONE]` is complete; `finish_reason` `""` counts as absent; reasoning arrives under
//! `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama).

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::{ApiError, LlmError};
use crate::message::{StopReason, Usage};
use crate::provider::CowStr;
use crate::wire::LlmEvent;

/// The most tool calls one response may open; beyond it the stream is refused.
const MAX_TOOL_CALLS: usize = 1024;

#[derive(Deserialize)]
struct Chunk<'a> {
    // Borrowed: every chunk repeats them, and only the first one's are kept.
    #[serde(borrow, default)]
    id: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    model: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    choices: Option<FirstChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// The choice with index 0 of a `choices` array; other choices (n > 1) are skipped without
/// keeping them, so a chunk costs no allocation for the array.
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChoicesVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for ChoicesVisitor<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut first = None;
                while let Some(choice) = seq.next_element::<Choice<'a>>()? {
                    if first.is_none() && choice.index.unwrap_or(0) == 0 {
                        first = Some(choice);
                    }
                }
                Ok(FirstChoice(first))
            }
        }
        deserializer.deserialize_seq(ChoicesVisitor(PhantomData))
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    // A whole (non-streamed) completion carries `message` where a chunk carries `delta`.
    #[serde(borrow, default, alias = "message")]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    refusal: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
    /// Signed thinking from proxies in front of Anthropic models (LiteLLM): the text also
    /// arrives as `reasoning_content`, so only the signatures and redacted blocks are read here.
    #[serde(borrow, default)]
    thinking_blocks: Option<Vec<ThinkingBlock<'a>>>,
}

#[derive(Deserialize)]
struct ThinkingBlock<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    thinking: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    signature: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    data: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    arguments: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    completion_tokens_details: Option<TokenDetails>,
}

/// `prompt_tokens_details` / `completion_tokens_details`; servers send `null` for either
/// figure, or leave it out.
#[derive(Deserialize)]
struct TokenDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// `usage: {}` carries nothing; otherwise the figures replace the running ones
    /// (servers that send usage on every chunk send cumulative figures).
    fn apply(&self, usage: &mut Usage) -> bool {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() {
            return false;
        }
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        if let Some(prompt) = self.prompt_tokens {
            usage.input_tokens = prompt.saturating_sub(cached);
            usage.cache_read_input_tokens = cached;
        }
        if let Some(completion) = self.completion_tokens {
            usage.output_tokens = completion;
            usage.reasoning_tokens = self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0)
                .min(completion);
        }
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    Reasoning,
    Redacted,
    Refusal,
    Tool,
}

#[derive(Debug)]
struct ToolSlot {
    /// The `index` the server gave the call, while it can still receive fragments by it.
    wire_index: Option<u64>,
    id: String,
    block: usize,
}

/// Decoder state for one response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    done: bool,
    finish_reason: Option<StopReason>,
    refused: bool,
    usage: Option<Usage>,
    /// The block index the next new block gets.
    next_block: usize,
    /// The most recently opened block, where text of the same kind is appended.
    current: Option<(BlockKind, usize)>,
    /// Blocks opened and not yet stopped, in opening order.
    open: Vec<usize>,
    tools: Vec<ToolSlot>,
}

static GENERATED_IDS: AtomicU64 = AtomicU64::new(0);

/// A call id for servers that send none: unique in this process and unlikely to collide with
/// ids of other processes (a per-process random prefix).
fn generated_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let prefix = *PREFIX.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    let n = GENERATED_IDS.fetch_add(1, Ordering::Relaxed);
    format!("call_{:08x}{n:x}", prefix as u32)
}

crate::wire::decoder::event_decoder!(Decoder);

impl Decoder {
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if data.trim_ascii() == "[DONE]" {
            if !self.started {
                return Err(LlmError::incomplete("[DONE] arrived before any chunk"));
            }
            self.complete(out);
            return Ok(());
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in OpenAI stream chunk: {e}"))
        })?;
        if let Some(error) = chunk.error {
            return Err(stream_error(&error));
        }
        if !self.started {
            self.started = true;
            out.push(LlmEvent::MessageStart {
                id: chunk.id.map(CowStr::into_string).unwrap_or_default(),
                model: chunk.model.map(CowStr::into_string).unwrap_or_default(),
            });
        }
        if let Some(choice) = chunk.choices.and_then(|c| c.0) {
            if let Some(delta) = choice.delta {
                self.delta(delta, out)?;
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.as_str().is_empty()) {
                self.finish_reason = Some(StopReason::from_wire(reason.as_str()));
            }
        }
        if let Some(wire) = chunk.usage {
            let usage = self.usage.get_or_insert_with(Usage::default);
            if wire.apply(usage) {
                out.push(LlmEvent::Usage(*usage));
            }
        }
        Ok(())
    }

    fn delta(&mut self, delta: Delta<'_>, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        let had_reasoning = reasoning.is_some();
        if let Some(thinking) = reasoning.filter(|t| !t.as_str().is_empty()) {
            let index = self.block_for(BlockKind::Reasoning, out);
            out.push(LlmEvent::ThinkingDelta {
                index,
                thinking: thinking.into_string(),
            });
        }
        for block in delta.thinking_blocks.into_iter().flatten() {
            self.thinking_block(block, had_reasoning, out);
        }
        if let Some(text) = delta.content.filter(|t| !t.as_str().is_empty()) {
            let index = self.block_for(BlockKind::Text, out);
            out.push(LlmEvent::TextDelta {
                index,
                text: text.into_string(),
            });
        }
        if let Some(text) = delta.refusal.filter(|t| !t.as_str().is_empty()) {
            self.refused = true;
            let index = self.block_for(BlockKind::Refusal, out);
            out.push(LlmEvent::TextDelta {
                index,
                text: text.into_string(),
            });
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.tool_call(call, out)?;
        }
        Ok(())
    }

    /// One entry of `thinking_blocks`. Its text is taken only when the same delta had no
    /// `reasoning_content` (which carries the same text); a signature ends the current
    /// reasoning block's signature; a redacted block is a block of its own.
    fn thinking_block(
        &mut self,
        block: ThinkingBlock<'_>,
        had_reasoning: bool,
        out: &mut Vec<LlmEvent>,
    ) {
        match block.ty.as_ref().map(CowStr::as_str) {
            Some("redacted_thinking") => {
                if let Some(data) = block.data.filter(|d| !d.as_str().is_empty()) {
                    let index = self.open_block(BlockKind::Redacted, out);
                    out.push(LlmEvent::RedactedThinking {
                        index,
                        data: data.into_string(),
                    });
                }
            }
            Some("thinking") | None => {
                if !had_reasoning {
                    if let Some(thinking) = block.thinking.filter(|t| !t.as_str().is_empty()) {
                        let index = self.block_for(BlockKind::Reasoning, out);
                        out.push(LlmEvent::ThinkingDelta {
                            index,
                            thinking: thinking.into_string(),
                        });
                    }
                }
                if let Some(signature) = block.signature.filter(|s| !s.as_str().is_empty()) {
                    let index = self.block_for(BlockKind::Reasoning, out);
                    out.push(LlmEvent::SignatureDelta {
                        index,
                        signature: signature.into_string(),
                    });
                }
            }
            Some(_) => {}
        }
    }

    /// The block text of `kind` goes to: the current block when it is of that kind, else a new one.
    fn block_for(&mut self, kind: BlockKind, out: &mut Vec<LlmEvent>) -> usize {
        match self.current {
            Some((k, index)) if k == kind => index,
            _ => self.open_block(kind, out),
        }
    }

    /// Opens a block. A text, reasoning or refusal block that was current is complete once
    /// another block opens, so it stops here: only tool calls (bounded by `MAX_TOOL_CALLS`)
    /// stay open until the end, and alternating text kinds hold constant memory.
    fn open_block(&mut self, kind: BlockKind, out: &mut Vec<LlmEvent>) -> usize {
        if let Some((current, index)) = self.current {
            if current != BlockKind::Tool {
                self.open.retain(|&i| i != index);
                out.push(LlmEvent::BlockStop { index });
            }
        }
        let index = self.next_block;
        self.next_block += 1;
        self.current = Some((kind, index));
        self.open.push(index);
        index
    }

    fn tool_call(
        &mut self,
        call: ToolCallDelta<'_>,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let id = call
            .id
            .as_ref()
            .map(CowStr::as_str)
            .filter(|id| !id.is_empty());
        let found = match (call.index, id) {
            (Some(i), _) => self.tools.iter().position(|t| t.wire_index == Some(i)),
            (None, Some(id)) => self.tools.iter().position(|t| t.id == id),
            (None, None) => self.tools.len().checked_sub(1),
        };
        // A server that reuses one index for several calls gives each its own id.
        let found = found.filter(|&slot| id.is_none_or(|id| self.tools[slot].id == id));
        let (name, arguments) = match call.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let block = match found {
            Some(slot) => self.tools[slot].block,
            None => {
                let Some(name) = name.filter(|n| !n.as_str().is_empty()) else {
                    return Err(LlmError::malformed(
                        "OpenAI tool-call fragment for a call that never started (no function name)",
                    ));
                };
                if self.tools.len() >= MAX_TOOL_CALLS {
                    return Err(LlmError::malformed(format!(
                        "more than {MAX_TOOL_CALLS} tool calls in one response"
                    )));
                }
                // A reused index now belongs to the new call only.
                if let Some(i) = call.index {
                    for slot in self.tools.iter_mut().filter(|t| t.wire_index == Some(i)) {
                        slot.wire_index = None;
                    }
                }
                let id = id.map_or_else(generated_id, str::to_owned);
                let block = self.open_block(BlockKind::Tool, out);
                self.tools.push(ToolSlot {
                    wire_index: call.index,
                    id: id.clone(),
                    block,
                });
                out.push(LlmEvent::ToolCallStart {
                    index: block,
                    id,
                    name: name.into_string(),
                });
                block
            }
        };
        if let Some(arguments) = arguments.filter(|a| !a.as_str().is_empty()) {
            out.push(LlmEvent::ToolCallDelta {
                index: block,
                partial_json: arguments.into_string(),
            });
        }
        Ok(())
    }

    /// Closes every open block and ends the message.
    fn complete(&mut self, out: &mut Vec<LlmEvent>) {
        self.done = true;
        for index in self.open.drain(..) {
            out.push(LlmEvent::BlockStop { index });
        }
        let mut reason = self.finish_reason.take().unwrap_or(StopReason::EndTurn);
        if self.refused && reason == StopReason::EndTurn {
            // A refusal cut off by `length` (or stopped by a content filter) keeps that
            // explicit reason: it says more than the refusal does.
            reason = StopReason::Refusal;
        } else if reason == StopReason::EndTurn && !self.tools.is_empty() {
            // OpenAI answers a forced tool_choice with finish_reason "stop", and some
            // compatible servers always do: the calls are what matters.
            reason = StopReason::ToolUse;
        }
        out.push(LlmEvent::MessageStop {
            stop_reason: reason,
        });
    }

    /// Decodes a whole, non-streamed completion (`choices[].message` where a chunk has
    /// `delta`) as one chunk, then ends the message.
    pub(crate) fn decode_whole(
        &mut self,
        body: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        self.on_event("", body, out)?;
        if !self.done {
            // A completion without a finish_reason still is the whole answer.
            self.complete(out);
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if self.finish_reason.is_some() {
            // Some compatible servers end after finish_reason without `[DONE]`.
            self.complete(out);
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no finish_reason and no [DONE]"
        } else {
            "no chunk at all; the body was empty or not an OpenAI stream"
        }))
    }
}

/// An `{"error": …}` object inside the stream (or a 200 JSON body that is one).
///
/// OpenAI sends `{"message","type","code"}`; compatible proxies put an HTTP status in `code`
/// (LiteLLM: `{"type":"throttling_error","code":"429"}`) or in `status`. An error with a
/// status becomes the [`LlmError::Api`] of that status, so it is classified (retried,
/// surfaced, or recognized as a context overflow) exactly like the same failure sent as an
/// HTTP status; without one it is an [`LlmError::Stream`] classified by its type name.
pub(crate) fn stream_error(error: &serde_json::Value) -> LlmError {
    let text = |key: &str| match error.get(key) {
        Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = text("message").unwrap_or_else(|| match error {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string().chars().take(500).collect(),
    });
    let status = ["code", "status", "status_code"]
        .iter()
        .filter_map(|key| text(key)?.trim().parse::<u16>().ok())
        .find(|status| (400..=599).contains(status));
    if let Some(status) = status {
        let mut api = ApiError::new(status, message);
        api.error_type = text("type");
        api.code = text("code");
        return if is_context_overflow(&api) {
            LlmError::ContextOverflow(Box::new(api))
        } else {
            LlmError::Api(Box::new(api))
        };
    }
    let error_type = text("type")
        .or_else(|| text("code"))
        .unwrap_or_else(|| "error".to_owned());
    LlmError::Stream {
        error_type,
        message,
    }
}

/// OpenAI says `code: context_length_exceeded`; compatible servers say "maximum context
/// length" in the message.
pub(crate) fn is_context_overflow(error: &ApiError) -> bool {
    if error.code.as_deref() == Some("context_length_exceeded")
        || error.error_type.as_deref() == Some("context_length_exceeded")
    {
        return true;
    }
    if !(400..500).contains(&error.status) {
        return false;
    }
    let message = error.message.to_ascii_lowercase();
    [
        "maximum context length",
        "context_length_exceeded",
        "context window",
        "prompt is too long",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}
