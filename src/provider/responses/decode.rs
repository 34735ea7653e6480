//! OpenAI Responses stream decoding: `response.*` events → [`LlmEvent`]s.
//!
//! The stream is a sequence of typed events (the event reference:
//! <https://platform.openai.com/docs/api-reference/responses-streaming>). Each event's type is
//! read from the data's `type` field, so a stream with or without `event:` lines decodes the
//! same; only when the data has no `type` does the SSE event name stand in.
//!
//! ```text
//!  response.created ─► output_item.added ─► content_part.added ─► output_text.delta* ─►
//!      output_text.done ─► content_part.done ─► output_item.done ─► … ─► response.completed
//!                                                                 └──► response.incomplete
//!                                                                 └──► response.failed / error
//! ```
//!
//! Output items are keyed by `output_index` (never by item id alone), and each content part of a
//! message by `(output_index, content_index)`. Every part, function call and reasoning item gets
//! its own block, numbered in order of first appearance:
//!
//! - an `output_text` part is a text block; a `refusal` part is a text block too, and the
//!   response then stops with [`StopReason::Refusal`];
//! - a `function_call` item is a tool call whose id is its `call_id` (the item id `fc_…` is
//!   another thing);
//! - a `reasoning` item streams its summary as thinking deltas and ends, at
//!   `output_item.done`, in one [`LlmEvent::Reasoning`] holding the whole item (id, summary,
//!   `encrypted_content`), which goes back to the model verbatim;
//! - a hosted tool search item (`tool_search_call`, `tool_search_output`) is one
//!   [`LlmEvent::OtherBlock`] at `output_item.done` holding the item's JSON as it came (a
//!   [`ContentBlock::Other`](crate::ContentBlock::Other), sent back as an input item); one
//!   without what an input item of its type requires (`arguments`; a `tools` list) is left
//!   out, and its fields are never an error, whatever their types. Its size is bounded by the
//!   SSE event limit and counted against the response's.
//!
//! Endings: `response.completed` stops with `ToolUse` when the response called a function, else
//! `EndTurn`; `response.incomplete` with `max_output_tokens` gives `MaxTokens`, with
//! `content_filter` `ContentFilter` (as every format's content filter); `response.failed` and `error` are typed errors classified like
//! the other formats' (a `server_error` or a rate limit is retryable). A body that ends
//! without one of them is [`LlmError::Incomplete`].
//!
//! Lenient where servers differ: text and arguments that arrive only in the `*.done` events (or
//! in the finished item) are taken from there; a text delta for a part that was never announced
//! opens one; unknown event types (annotations, tool progress, audio …) are ignored.
//!
//! A part may stay empty (no delta, `""` in every finishing event; the SDK gives it as `""`):
//! its block starts with an empty text delta when it closes, like an Anthropic text block, and
//! the assembler leaves the empty block out. Empty function-call arguments are `{}`.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{ApiError, LlmError};
use crate::message::{StopReason, Usage};
use crate::provider::CowStr;
use crate::wire::LlmEvent;

/// The most output items one response may have; beyond it the stream is refused.
const MAX_ITEMS: u64 = 4096;
/// The most content parts one message item may have.
const MAX_PARTS: usize = 64;

/// One stream event; every field the decoder reads from any event type, all optional.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<CowStr<'a>>,
    #[serde(default)]
    output_index: Option<u64>,
    /// The item a delta or part event belongs to (read when `output_index` is missing).
    #[serde(borrow, default)]
    item_id: Option<CowStr<'a>>,
    #[serde(default)]
    content_index: Option<u64>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<CowStr<'a>>,
    /// `output_text.done`, `reasoning_summary_text.done`.
    #[serde(borrow, default)]
    text: Option<CowStr<'a>>,
    /// `refusal.done`.
    #[serde(borrow, default)]
    refusal: Option<CowStr<'a>>,
    /// `function_call_arguments.done`.
    #[serde(borrow, default)]
    arguments: Option<CowStr<'a>>,
    #[serde(borrow, default, deserialize_with = "item_with_raw")]
    item: Option<Item<'a>>,
    #[serde(borrow, default)]
    part: Option<Part<'a>>,
    #[serde(borrow, default)]
    response: Option<ResponseObject<'a>>,
    /// The `error` event: `code`, `message` at the top level (some servers nest them in
    /// `error`).
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(default)]
    message: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// An output item, as `output_item.added` / `.done` carry it.
#[derive(Deserialize, Default)]
pub(crate) struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) ty: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    pub(crate) id: Option<CowStr<'a>>,
    // function_call
    #[serde(borrow, default)]
    pub(crate) call_id: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    pub(crate) name: Option<CowStr<'a>>,
    /// A function call's arguments (a JSON string); a `tool_search_call`'s are an object,
    /// read as none here (the item is kept whole, see `raw`).
    #[serde(borrow, default, deserialize_with = "lenient_str")]
    pub(crate) arguments: Option<CowStr<'a>>,
    // reasoning
    #[serde(borrow, default)]
    pub(crate) summary: Option<Vec<Part<'a>>>,
    #[serde(borrow, default)]
    pub(crate) encrypted_content: Option<CowStr<'a>>,
    // message
    #[serde(borrow, default)]
    pub(crate) content: Option<Vec<Part<'a>>>,
    /// The item's JSON as it came (set by [`item_with_raw`]): the hosted tool search's items
    /// are kept whole.
    #[serde(skip)]
    pub(crate) raw: Option<&'a RawValue>,
}

/// An output item, read into [`Item`] with its JSON kept in `raw`.
fn item_with_raw<'de, D>(deserializer: D) -> Result<Option<Item<'de>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let Some(raw) = Option::<&'de RawValue>::deserialize(deserializer)? else {
        return Ok(None);
    };
    Ok(Some(item_of(raw).map_err(serde::de::Error::custom)?))
}

/// The item in `raw`. A hosted tool search item whose fields have unexpected types is read as
/// its type alone (it is judged whole at `.done`); any other item must read.
fn item_of(raw: &RawValue) -> Result<Item<'_>, serde_json::Error> {
    match serde_json::from_str::<Item<'_>>(raw.get()) {
        Ok(mut item) => {
            item.raw = Some(raw);
            Ok(item)
        }
        Err(e) => {
            #[derive(Deserialize)]
            struct TypeOnly<'a> {
                #[serde(rename = "type", borrow, default)]
                ty: Option<CowStr<'a>>,
            }
            match serde_json::from_str::<TypeOnly<'_>>(raw.get()) {
                Ok(TypeOnly { ty: Some(ty) }) if TOOL_SEARCH_ITEMS.contains(&ty.as_str()) => {
                    Ok(Item {
                        ty: Some(ty),
                        raw: Some(raw),
                        ..Item::default()
                    })
                }
                _ => Err(e),
            }
        }
    }
}

/// A string, or `None` for any other JSON value.
fn lenient_str<'de, D>(deserializer: D) -> Result<Option<CowStr<'de>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StrOrOther<'a> {
        Str(#[serde(borrow)] CowStr<'a>),
        Other(serde::de::IgnoredAny),
    }
    Ok(
        match Option::<StrOrOther<'de>>::deserialize(deserializer)? {
            Some(StrOrOther::Str(s)) => Some(s),
            _ => None,
        },
    )
}

/// The output item types of OpenAI's hosted tool search, kept whole in a
/// [`ContentBlock::Other`](crate::ContentBlock::Other) and sent back as input items.
pub(crate) const TOOL_SEARCH_ITEMS: [&str; 2] = ["tool_search_call", "tool_search_output"];

/// Whether `block` is an item only the Responses format carries (a hosted tool search item):
/// the other formats' encoders leave it out.
pub(crate) fn is_responses_only(block: &serde_json::Value) -> bool {
    block
        .get("type")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|ty| TOOL_SEARCH_ITEMS.contains(&ty))
}

/// Whether `block` is a hosted tool search item (`tool_search_call`, `tool_search_output`)
/// with the fields an input item of its type requires (`arguments`; `tools`, a list).
pub(crate) fn is_tool_search_item(block: &serde_json::Value) -> bool {
    match block.get("type").and_then(serde_json::Value::as_str) {
        Some("tool_search_call") => block.get("arguments").is_some_and(|a| !a.is_null()),
        Some("tool_search_output") => block.get("tools").is_some_and(serde_json::Value::is_array),
        _ => false,
    }
}

/// A content part (`output_text`, `refusal`) or a summary part (`summary_text`).
#[derive(Deserialize)]
pub(crate) struct Part<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(crate) ty: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    pub(crate) text: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    pub(crate) refusal: Option<CowStr<'a>>,
}

/// The `response` object of the lifecycle events; only what the decoder needs (the output
/// items are skipped: the item events delivered them).
#[derive(Deserialize)]
pub(crate) struct ResponseObject<'a> {
    #[serde(borrow, default)]
    pub(crate) id: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    pub(crate) model: Option<CowStr<'a>>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    #[serde(default)]
    pub(crate) incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    pub(crate) error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub(crate) struct IncompleteDetails {
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

/// `response.usage`.
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    output_tokens_details: Option<TokenDetails>,
}

#[derive(Deserialize)]
struct TokenDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// The crate's usage: `input_tokens` counts the uncached prompt (OpenAI's `input_tokens`
    /// includes the cached ones), reasoning tokens are part of the output.
    pub(crate) fn to_usage(&self) -> Usage {
        let cached = self
            .input_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        let input = self.input_tokens.unwrap_or(0);
        let output = self.output_tokens.unwrap_or(0);
        Usage {
            input_tokens: input.saturating_sub(cached),
            cache_read_input_tokens: cached.min(input),
            output_tokens: output,
            reasoning_tokens: self
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0)
                .min(output),
            ..Usage::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartKind {
    Text,
    Refusal,
}

#[derive(Debug)]
struct PartSlot {
    content_index: u64,
    block: usize,
    kind: PartKind,
    /// Whether any text arrived for it (else the `.done` text is taken); equally, whether its
    /// block has started.
    filled: bool,
    open: bool,
}

impl PartSlot {
    /// Starts the block of a part that got no text at all (an empty part is valid: the SDK
    /// gives it as `""`), with an empty `TextDelta` as Anthropic's empty text blocks start:
    /// the assembler then never sees a stop for a block that never started, and drops the
    /// empty block. An empty refusal refuses nothing (as in Chat Completions).
    fn start_if_empty(&mut self, out: &mut Vec<LlmEvent>) {
        if !self.filled {
            self.filled = true;
            out.push(LlmEvent::TextDelta {
                index: self.block,
                text: String::new(),
            });
        }
    }

    /// Stops the part's block, once, starting it first if it stayed empty.
    fn close(&mut self, out: &mut Vec<LlmEvent>) {
        if self.open {
            self.start_if_empty(out);
            self.open = false;
            out.push(LlmEvent::BlockStop { index: self.block });
        }
    }
}

#[derive(Debug)]
enum ItemState {
    Message {
        parts: Vec<PartSlot>,
    },
    Function {
        block: usize,
        /// Whether any argument text arrived (else the `.done` arguments are taken).
        filled: bool,
        open: bool,
    },
    Reasoning {
        block: usize,
        /// Whether a thinking delta opened the block.
        streamed: bool,
        /// The last summary part that got text, to separate parts with a blank line.
        last_summary: Option<u64>,
        done: bool,
    },
    /// A compaction item (server-side compaction): one block, sent whole at `.done`.
    Compaction {
        block: usize,
        done: bool,
    },
    /// A hosted tool search item (`tool_search_call`, `tool_search_output`): one block, the
    /// item kept whole at `.done`.
    ToolSearch {
        block: usize,
        done: bool,
    },
    /// An item the crate does not model (web search, file search …): ignored.
    Other,
}

/// Decoder state for one response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    done: bool,
    refused: bool,
    calls: usize,
    next_block: usize,
    /// Output items by `output_index`. Invariant: `items.len() <= MAX_ITEMS`.
    items: Vec<Option<ItemState>>,
    /// Item ids and the index each was given, for servers that send no `output_index`
    /// (llama.cpp). Bounded with `items`.
    item_ids: std::collections::HashMap<String, u64>,
}

crate::wire::decoder::event_decoder!(Decoder);

impl Decoder {
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if data.trim_ascii() == "[DONE]" {
            // Some proxies end with the Chat Completions marker; the final event decides.
            return Ok(());
        }
        let mut ev: Event<'_> = match serde_json::from_str(data) {
            Ok(ev) => ev,
            Err(e) => {
                // An event of a type the decoder does not read may use the field names it
                // reads for other things (a future event's `delta` as an object, say): it is
                // ignored like any unknown event. Only the event types handled here, and
                // invalid JSON, are errors. This second parse runs on the error path only.
                #[derive(Deserialize)]
                struct TypeOnly<'a> {
                    #[serde(rename = "type", borrow, default)]
                    ty: Option<CowStr<'a>>,
                }
                let ty = serde_json::from_str::<TypeOnly<'_>>(data).ok().map(|t| {
                    t.ty.map(CowStr::into_string)
                        .unwrap_or_else(|| event.to_owned())
                });
                if ty.is_some_and(|ty| !is_handled(&ty)) {
                    return Ok(());
                }
                return Err(LlmError::malformed(format!(
                    "invalid JSON in OpenAI Responses stream event: {e}"
                )));
            }
        };
        let ty = match &ev.ty {
            Some(ty) => ty.as_str(),
            None => event,
        };
        if ty == "error" {
            return Err(error_event(&ev));
        }
        if !ty.starts_with("response.") {
            // Not an event of this format (a proxy's own, or a future one).
            return Ok(());
        }
        self.start(ev.response.as_ref(), out);
        if ev.output_index.is_none() {
            let index = self.index_without_output_index(ty, &ev);
            ev.output_index = index;
        }
        match ty {
            "response.output_item.added" => self.item_added(&ev, out),
            "response.output_item.done" => self.item_done(&ev, out),
            "response.content_part.added" => {
                if let (Some(part), Some(kind)) = (&ev.part, ev.part.as_ref().and_then(part_kind)) {
                    let text = part_text(part);
                    let slot = self.part(&ev, kind)?;
                    if let Some(slot) = slot {
                        // A part announced with text already in it.
                        if let Some(text) = text.filter(|t| !t.is_empty()) {
                            self.part_text(slot, text.to_owned(), out);
                        }
                    }
                }
                Ok(())
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let kind = if ty == "response.refusal.delta" {
                    PartKind::Refusal
                } else {
                    PartKind::Text
                };
                if let Some(delta) = ev.delta.as_ref().filter(|d| !d.as_str().is_empty()) {
                    if let Some(slot) = self.part(&ev, kind)? {
                        self.part_text(slot, delta.as_str().to_owned(), out);
                    }
                }
                Ok(())
            }
            "response.output_text.done" | "response.refusal.done" => {
                let (kind, text) = if ty == "response.refusal.done" {
                    (PartKind::Refusal, ev.refusal.as_ref().or(ev.text.as_ref()))
                } else {
                    (PartKind::Text, ev.text.as_ref())
                };
                if let Some(slot) = self.part(&ev, kind)? {
                    if let Some(text) = text.filter(|t| !t.as_str().is_empty()) {
                        if !self.part_filled(slot) {
                            self.part_text(slot, text.as_str().to_owned(), out);
                        }
                    }
                }
                Ok(())
            }
            "response.content_part.done" => {
                if let (Some(part), Some(kind)) = (&ev.part, ev.part.as_ref().and_then(part_kind)) {
                    if let Some(slot) = self.part(&ev, kind)? {
                        if let Some(text) = part_text(part).filter(|t| !t.is_empty()) {
                            if !self.part_filled(slot) {
                                self.part_text(slot, text.to_owned(), out);
                            }
                        }
                        self.close_part(slot, out);
                    }
                }
                Ok(())
            }
            "response.function_call_arguments.delta" => {
                let delta = ev.delta.as_ref().filter(|d| !d.as_str().is_empty());
                self.arguments(&ev, delta, false, out)
            }
            "response.function_call_arguments.done" => {
                self.arguments(&ev, ev.arguments.as_ref(), true, out)
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(delta) = ev.delta.as_ref().filter(|d| !d.as_str().is_empty()) {
                    let summary = ev.summary_index_or_content();
                    self.thinking(&ev, summary, delta.as_str(), out)?;
                }
                Ok(())
            }
            "response.completed" => self.complete(ev.response.as_ref(), None, out),
            "response.incomplete" => {
                let reason = ev
                    .response
                    .as_ref()
                    .and_then(|r| r.incomplete_details.as_ref())
                    .and_then(|d| d.reason.as_deref());
                let stop = match reason {
                    Some("max_output_tokens") | None => StopReason::MaxTokens,
                    Some("content_filter") => StopReason::ContentFilter,
                    Some(other) => StopReason::Other(other.to_owned()),
                };
                self.complete(ev.response.as_ref(), Some(stop), out)
            }
            "response.failed" => {
                let error = ev.response.as_ref().and_then(|r| r.error.as_ref());
                // serde reads `"error": null` as `None`.
                Err(match error {
                    Some(error) => stream_error(error),
                    None => LlmError::Stream {
                        error_type: "response.failed".to_owned(),
                        message: "the response failed without an error object".to_owned(),
                    },
                })
            }
            // response.created / in_progress / queued, summary part boundaries, annotations,
            // built-in tool progress and future events carry nothing to keep.
            _ => Ok(()),
        }
    }

    /// Emits `MessageStart` before the first content, from the event's response if it has one.
    fn start(&mut self, response: Option<&ResponseObject<'_>>, out: &mut Vec<LlmEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(LlmEvent::MessageStart {
            id: response
                .and_then(|r| r.id.as_ref())
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            model: response
                .and_then(|r| r.model.as_ref())
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
        });
    }

    fn new_block(&mut self) -> usize {
        let block = self.next_block;
        self.next_block += 1;
        block
    }

    /// The index of an item event that has no `output_index` (llama.cpp's `/v1/responses`
    /// sends none): the index its item id was given; else, for a new item, the next one;
    /// else the last item. `None` when there is no item to give it to.
    fn index_without_output_index(&mut self, ty: &str, ev: &Event<'_>) -> Option<u64> {
        let id = ev
            .item
            .as_ref()
            .and_then(|item| item.id.as_ref())
            .or(ev.item_id.as_ref())
            .map(CowStr::as_str);
        if let Some(&known) = id.and_then(|id| self.item_ids.get(id)) {
            return Some(known);
        }
        let index = if ty == "response.output_item.added"
            || (ty == "response.output_item.done" && ev.item.is_some())
        {
            self.items.len() as u64
        } else {
            (self.items.len() as u64).checked_sub(1)?
        };
        if let Some(id) = id {
            if self.item_ids.len() < MAX_ITEMS as usize {
                self.item_ids.insert(id.to_owned(), index);
            }
        }
        Some(index)
    }

    /// The slot of `output_index`, growing the table (bounded by [`MAX_ITEMS`]).
    fn slot(&mut self, output_index: Option<u64>) -> Result<&mut Option<ItemState>, LlmError> {
        let Some(index) = output_index else {
            return Err(LlmError::malformed(
                "OpenAI Responses item event without output_index",
            ));
        };
        if index >= MAX_ITEMS {
            return Err(LlmError::malformed(format!(
                "output_index {index} is beyond the limit of {MAX_ITEMS} output items"
            )));
        }
        let index = index as usize;
        if self.items.len() <= index {
            self.items.resize_with(index + 1, || None);
        }
        Ok(&mut self.items[index])
    }

    fn item_added(&mut self, ev: &Event<'_>, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        let Some(item) = &ev.item else {
            return Ok(());
        };
        if self.slot(ev.output_index)?.is_some() {
            return Err(LlmError::malformed(format!(
                "output item {} added twice",
                ev.output_index.unwrap_or_default()
            )));
        }
        let state = match item.ty.as_ref().map(CowStr::as_str) {
            Some("message") => ItemState::Message { parts: Vec::new() },
            Some("function_call") => {
                let block = self.new_block();
                self.calls += 1;
                out.push(LlmEvent::ToolCallStart {
                    index: block,
                    id: call_id(item),
                    name: item
                        .name
                        .as_ref()
                        .map(|n| n.as_str().to_owned())
                        .unwrap_or_default(),
                });
                let arguments = item.arguments.as_ref().filter(|a| !a.as_str().is_empty());
                if let Some(arguments) = arguments {
                    out.push(LlmEvent::ToolCallDelta {
                        index: block,
                        partial_json: arguments.as_str().to_owned(),
                    });
                }
                ItemState::Function {
                    block,
                    filled: arguments.is_some(),
                    open: true,
                }
            }
            Some("reasoning") => ItemState::Reasoning {
                block: self.new_block(),
                streamed: false,
                last_summary: None,
                done: false,
            },
            Some("compaction") => ItemState::Compaction {
                block: self.new_block(),
                done: false,
            },
            Some(ty) if TOOL_SEARCH_ITEMS.contains(&ty) => ItemState::ToolSearch {
                block: self.new_block(),
                done: false,
            },
            _ => ItemState::Other,
        };
        *self.slot(ev.output_index)? = Some(state);
        Ok(())
    }

    fn item_done(&mut self, ev: &Event<'_>, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        let Some(item) = &ev.item else {
            return Ok(());
        };
        if self.slot(ev.output_index)?.is_none() {
            // Announced only now: treat it as added, then done.
            self.item_added(ev, out)?;
        }
        let slot = self.slot(ev.output_index)?;
        match slot {
            Some(ItemState::Message { .. }) => {
                // Parts whose text came only in the finished item.
                for (content_index, part) in item.content.iter().flatten().enumerate() {
                    let (Some(kind), Some(text)) = (part_kind(part), part_text(part)) else {
                        continue;
                    };
                    if text.is_empty() {
                        continue;
                    }
                    let part_ev = Event::part_event(ev.output_index, content_index as u64);
                    if let Some(slot) = self.part(&part_ev, kind)? {
                        if !self.part_filled(slot) {
                            self.part_text(slot, text.to_owned(), out);
                        }
                    }
                }
                if let Some(Some(ItemState::Message { parts })) = self
                    .items
                    .get_mut(ev.output_index.unwrap_or_default() as usize)
                {
                    for part in parts.iter_mut() {
                        part.close(out);
                    }
                }
            }
            Some(ItemState::Function {
                block,
                filled,
                open,
            }) => {
                if *open {
                    if !*filled {
                        if let Some(arguments) =
                            item.arguments.as_ref().filter(|a| !a.as_str().is_empty())
                        {
                            *filled = true;
                            out.push(LlmEvent::ToolCallDelta {
                                index: *block,
                                partial_json: arguments.as_str().to_owned(),
                            });
                        }
                    }
                    *open = false;
                    out.push(LlmEvent::BlockStop { index: *block });
                }
            }
            Some(ItemState::Reasoning { block, done, .. }) => {
                if !*done {
                    *done = true;
                    out.push(LlmEvent::Reasoning {
                        index: *block,
                        id: item
                            .id
                            .as_ref()
                            .map(|s| s.as_str().to_owned())
                            .unwrap_or_default(),
                        summary: item
                            .summary
                            .iter()
                            .flatten()
                            .filter_map(|p| p.text.as_ref().map(|t| t.as_str().to_owned()))
                            .collect(),
                        encrypted_content: item
                            .encrypted_content
                            .as_ref()
                            .map(|c| c.as_str().to_owned()),
                    });
                    out.push(LlmEvent::BlockStop { index: *block });
                }
            }
            Some(ItemState::Compaction { block, done }) => {
                // Without its encrypted content the item carries nothing to send back.
                if let (false, Some(content)) = (*done, &item.encrypted_content) {
                    *done = true;
                    out.push(LlmEvent::Compaction {
                        index: *block,
                        id: item.id.as_ref().map(|s| s.as_str().to_owned()),
                        encrypted_content: content.as_str().to_owned(),
                    });
                    out.push(LlmEvent::BlockStop { index: *block });
                }
            }
            Some(ItemState::ToolSearch { block, done }) => {
                // Kept whole, to go back as an input item; an item without the fields an input
                // item needs (or not an object) carries nothing to send back and is left out.
                let value = item
                    .raw
                    .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
                    .filter(is_tool_search_item);
                if let (false, Some(value)) = (*done, value) {
                    *done = true;
                    out.push(LlmEvent::OtherBlock {
                        index: *block,
                        block: value,
                    });
                    out.push(LlmEvent::BlockStop { index: *block });
                }
            }
            Some(ItemState::Other) | None => {}
        }
        Ok(())
    }

    /// The block of the content part `(output_index, content_index)` of kind `kind`: the
    /// part's slot as `(item, part)` positions, opening the part (and its message) if it was
    /// never announced. `None` when the item is not a message.
    fn part(&mut self, ev: &Event<'_>, kind: PartKind) -> Result<Option<(usize, usize)>, LlmError> {
        let content_index = ev.content_index.unwrap_or(0);
        let next_block = self.next_block;
        let slot = self.slot(ev.output_index)?;
        let item = ev.output_index.unwrap_or_default() as usize;
        if slot.is_none() {
            // Text for an item never announced: it is a message.
            *slot = Some(ItemState::Message { parts: Vec::new() });
        }
        let Some(ItemState::Message { parts }) = slot else {
            return Ok(None);
        };
        if let Some(p) = parts.iter().position(|p| p.content_index == content_index) {
            if parts[p].kind != kind {
                return Err(LlmError::malformed(format!(
                    "content part {content_index} of output item {item} changed kind"
                )));
            }
            return Ok(Some((item, p)));
        }
        if parts.len() >= MAX_PARTS {
            return Err(LlmError::malformed(format!(
                "more than {MAX_PARTS} content parts in output item {item}"
            )));
        }
        parts.push(PartSlot {
            content_index,
            block: next_block,
            kind,
            filled: false,
            open: true,
        });
        let p = parts.len() - 1;
        self.next_block += 1;
        Ok(Some((item, p)))
    }

    fn part_slot(&mut self, (item, part): (usize, usize)) -> Option<&mut PartSlot> {
        match self.items.get_mut(item)? {
            Some(ItemState::Message { parts }) => parts.get_mut(part),
            _ => None,
        }
    }

    fn part_filled(&mut self, slot: (usize, usize)) -> bool {
        self.part_slot(slot).is_some_and(|p| p.filled)
    }

    fn part_text(&mut self, slot: (usize, usize), text: String, out: &mut Vec<LlmEvent>) {
        let Some(part) = self.part_slot(slot) else {
            return;
        };
        if !part.open {
            // Text after the part closed: the part is complete, ignore repeats.
            return;
        }
        part.filled = true;
        let (block, kind) = (part.block, part.kind);
        if kind == PartKind::Refusal {
            self.refused = true;
        }
        out.push(LlmEvent::TextDelta { index: block, text });
    }

    fn close_part(&mut self, slot: (usize, usize), out: &mut Vec<LlmEvent>) {
        if let Some(part) = self.part_slot(slot) {
            part.close(out);
        }
    }

    fn arguments(
        &mut self,
        ev: &Event<'_>,
        arguments: Option<&CowStr<'_>>,
        whole: bool,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let index = ev.output_index.unwrap_or_default();
        match self.slot(ev.output_index)? {
            Some(ItemState::Function {
                block,
                filled,
                open,
            }) => {
                if !*open || (whole && *filled) {
                    return Ok(());
                }
                if let Some(arguments) = arguments.filter(|a| !a.as_str().is_empty()) {
                    *filled = true;
                    out.push(LlmEvent::ToolCallDelta {
                        index: *block,
                        partial_json: arguments.as_str().to_owned(),
                    });
                }
                Ok(())
            }
            None => Err(LlmError::malformed(format!(
                "function-call arguments for output item {index}, which never started"
            ))),
            Some(_) => Err(LlmError::malformed(format!(
                "function-call arguments for output item {index}, which is not a function call"
            ))),
        }
    }

    /// A piece of reasoning summary (or raw reasoning text) for the reasoning item at
    /// `output_index`; summary parts after the first are separated by a blank line.
    fn thinking(
        &mut self,
        ev: &Event<'_>,
        part: Option<u64>,
        delta: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let index = ev.output_index.unwrap_or_default();
        let next_block = self.next_block;
        let slot = self.slot(ev.output_index)?;
        if slot.is_none() {
            // A summary for an item never announced: it is a reasoning item.
            *slot = Some(ItemState::Reasoning {
                block: next_block,
                streamed: false,
                last_summary: None,
                done: false,
            });
            self.next_block += 1;
        }
        let Some(ItemState::Reasoning {
            block,
            streamed,
            last_summary,
            done,
        }) = self.slot(ev.output_index)?
        else {
            return Err(LlmError::malformed(format!(
                "reasoning text for output item {index}, which is not a reasoning item"
            )));
        };
        if *done {
            return Ok(());
        }
        let mut thinking = String::with_capacity(delta.len() + 2);
        if *streamed && *last_summary != part {
            thinking.push_str("\n\n");
        }
        thinking.push_str(delta);
        *streamed = true;
        *last_summary = part;
        out.push(LlmEvent::ThinkingDelta {
            index: *block,
            thinking,
        });
        Ok(())
    }

    /// Ends the message: closes every open block, reports usage and the stop reason.
    fn complete(
        &mut self,
        response: Option<&ResponseObject<'_>>,
        stop: Option<StopReason>,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        self.done = true;
        let mut open = Vec::new();
        for item in self.items.iter_mut().flatten() {
            match item {
                ItemState::Message { parts } => {
                    for part in parts.iter_mut().filter(|p| p.open) {
                        part.start_if_empty(out);
                        part.open = false;
                        open.push(part.block);
                    }
                }
                ItemState::Function { block, open: o, .. } if *o => {
                    *o = false;
                    open.push(*block);
                }
                ItemState::Reasoning {
                    block,
                    streamed: true,
                    done: false,
                    ..
                } => open.push(*block),
                _ => {}
            }
        }
        open.sort_unstable();
        for index in open {
            out.push(LlmEvent::BlockStop { index });
        }
        if let Some(usage) = response.and_then(|r| r.usage.as_ref()) {
            out.push(LlmEvent::Usage(usage.to_usage()));
        }
        let stop_reason = match stop {
            // A refusal cut off keeps the explicit reason: it says more.
            Some(reason) => reason,
            None if self.refused => StopReason::Refusal,
            None if self.calls > 0 => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        out.push(LlmEvent::MessageStop { stop_reason });
        Ok(())
    }

    /// Decodes a whole, non-streamed response object (`{"object":"response","output":[…]}`):
    /// the events a stream of the same content gives.
    pub(crate) fn decode_whole(
        &mut self,
        body: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        #[derive(Deserialize)]
        struct Whole<'a> {
            #[serde(borrow, flatten)]
            response: ResponseObject<'a>,
            #[serde(default)]
            status: Option<String>,
            #[serde(borrow, default)]
            output: Option<Vec<&'a RawValue>>,
        }
        let whole: Whole<'_> = serde_json::from_str(body).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in OpenAI Responses body: {e}"))
        })?;
        // serde reads `"error": null` as `None`.
        if let Some(error) = whole.response.error.as_ref() {
            return Err(stream_error(error));
        }
        self.start(Some(&whole.response), out);
        for (i, raw) in whole.output.into_iter().flatten().enumerate() {
            let item = item_of(raw).map_err(|e| {
                LlmError::malformed(format!("invalid OpenAI Responses output item: {e}"))
            })?;
            let ev = Event::item_event(i as u64, item);
            self.item_added(&ev, out)?;
            self.item_done(&ev, out)?;
        }
        let stop = match whole.status.as_deref() {
            Some("incomplete") => Some(
                match whole
                    .response
                    .incomplete_details
                    .as_ref()
                    .and_then(|d| d.reason.as_deref())
                {
                    Some("content_filter") => StopReason::ContentFilter,
                    Some("max_output_tokens") | None => StopReason::MaxTokens,
                    Some(other) => StopReason::Other(other.to_owned()),
                },
            ),
            _ => None,
        };
        self.complete(Some(&whole.response), stop, out)
    }

    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no response.completed, response.incomplete or response.failed event"
        } else {
            "no event at all; the body was empty or not an OpenAI Responses stream"
        }))
    }
}

impl<'a> Event<'a> {
    fn empty() -> Self {
        Event {
            ty: None,
            output_index: None,
            item_id: None,
            content_index: None,
            summary_index: None,
            delta: None,
            text: None,
            refusal: None,
            arguments: None,
            item: None,
            part: None,
            response: None,
            code: None,
            message: None,
            error: None,
        }
    }

    fn part_event(output_index: Option<u64>, content_index: u64) -> Self {
        Event {
            output_index,
            content_index: Some(content_index),
            ..Self::empty()
        }
    }

    fn item_event(output_index: u64, item: Item<'a>) -> Self {
        Event {
            output_index: Some(output_index),
            item: Some(item),
            ..Self::empty()
        }
    }

    /// The summary part a reasoning delta belongs to (`summary_index`, read from
    /// `content_index` for raw reasoning text).
    fn summary_index_or_content(&self) -> Option<u64> {
        self.summary_index.or(self.content_index)
    }
}

/// Whether the decoder reads events of this type (the others are ignored).
fn is_handled(ty: &str) -> bool {
    matches!(
        ty,
        "error"
            | "response.created"
            | "response.in_progress"
            | "response.queued"
            | "response.output_item.added"
            | "response.output_item.done"
            | "response.content_part.added"
            | "response.content_part.done"
            | "response.output_text.delta"
            | "response.output_text.done"
            | "response.refusal.delta"
            | "response.refusal.done"
            | "response.function_call_arguments.delta"
            | "response.function_call_arguments.done"
            | "response.reasoning_summary_text.delta"
            | "response.reasoning_text.delta"
            | "response.completed"
            | "response.incomplete"
            | "response.failed"
    )
}

fn part_kind(part: &Part<'_>) -> Option<PartKind> {
    match part.ty.as_ref().map(CowStr::as_str) {
        Some("output_text") => Some(PartKind::Text),
        Some("refusal") => Some(PartKind::Refusal),
        _ => None,
    }
}

fn part_text<'p>(part: &'p Part<'_>) -> Option<&'p str> {
    match part_kind(part)? {
        PartKind::Text => part.text.as_ref().map(CowStr::as_str),
        PartKind::Refusal => part
            .refusal
            .as_ref()
            .or(part.text.as_ref())
            .map(CowStr::as_str),
    }
}

/// A function call's id in the history: its `call_id`; the item id when a server sends none.
fn call_id(item: &Item<'_>) -> String {
    item.call_id
        .as_ref()
        .or(item.id.as_ref())
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default()
}

/// The `error` event: `{"type":"error","code","message","param"}` (some servers nest the
/// object in `error`).
fn error_event(ev: &Event<'_>) -> LlmError {
    if let Some(error) = ev.error.as_ref().filter(|e| e.is_object()) {
        return stream_error(error);
    }
    let mut error = serde_json::Map::new();
    // serde reads `"code": null` as `None`.
    if let Some(code) = &ev.code {
        error.insert("code".to_owned(), code.clone());
    }
    error.insert(
        "message".to_owned(),
        match &ev.message {
            Some(serde_json::Value::String(m)) => m.as_str().into(),
            // serde reads `"message": null` as `None`.
            Some(other) => other.to_string().into(),
            None => "the server sent an error event".into(),
        },
    );
    stream_error(&serde_json::Value::Object(error))
}

/// A Responses error object (`{"code","message"}`, or the Chat shape with `type`), classified
/// like the other formats: a context overflow by its code, an HTTP status in `code`/`status`
/// as that status, else an [`LlmError::Stream`] by its code (so `server_error` and
/// `rate_limit_exceeded` are retryable).
pub(crate) fn stream_error(error: &serde_json::Value) -> LlmError {
    let code = error.get("code").and_then(serde_json::Value::as_str);
    if code == Some("context_length_exceeded") {
        let mut api = ApiError::new(
            400,
            error
                .get("message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default(),
        );
        api.code = code.map(str::to_owned);
        return LlmError::ContextOverflow(Box::new(api));
    }
    crate::provider::openai::decode::stream_error(error)
}

#[cfg(test)]
mod tests {
    use crate::message::ContentBlock;
    use crate::wire::{StreamAssembler, WireDecoder, WireFormat};

    /// Observed from llama.cpp b11434's `/v1/responses` (Qwen2.5-Coder-1.5B, a forced tool
    /// call): no `output_index` and no `sequence_number` on any event; the deltas name their
    /// item by `item_id`. (The final event is cut to the fields read here.)
    #[test]
    fn llama_cpp_item_events_without_output_index_are_placed_by_item_id() {
        let body = concat!(
            "event: response.created\n",
            r#"data: {"type":"response.created","response":{"id":"resp_oCso","object":"response","status":"in_progress"}}"#,
            "\n\nevent: response.output_item.added\n",
            r#"data: {"type":"response.output_item.added","item":{"id":"fc_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy","arguments":"","call_id":"call_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy","name":"add","type":"function_call","status":"in_progress"}}"#,
            "\n\nevent: response.function_call_arguments.delta\n",
            r#"data: {"type":"response.function_call_arguments.delta","delta":"{\"a\": 1","item_id":"fc_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy"}"#,
            "\n\nevent: response.function_call_arguments.delta\n",
            r#"data: {"type":"response.function_call_arguments.delta","delta":"7, \"b\": 25}","item_id":"fc_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy"}"#,
            "\n\nevent: response.output_item.done\n",
            r#"data: {"type":"response.output_item.done","item":{"id":"fc_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy","type":"function_call","status":"completed","arguments":"{\"a\": 17, \"b\": 25}","call_id":"call_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy","name":"add"}}"#,
            "\n\nevent: response.completed\n",
            r#"data: {"type":"response.completed","response":{"id":"resp_oCso","object":"response","status":"completed","model":"qwen2.5-coder-1.5b-instruct","output":[{"id":"fc_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy","type":"function_call","status":"completed","arguments":"{\"a\": 17, \"b\": 25}","call_id":"call_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy","name":"add"}]}}"#,
            "\n\n",
        );
        let mut decoder = WireDecoder::new(WireFormat::OpenAiResponses);
        let mut events = Vec::new();
        decoder.push(body.as_bytes(), &mut events).unwrap();
        decoder.finish(&mut events).unwrap();
        let mut assembler = StreamAssembler::new();
        for event in &events {
            assembler.push(event).unwrap();
        }
        let response = assembler.finish().unwrap();
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse {
                id: "call_parq0OYjpYVFK3SEkOruUvRyxNzg6BIy".into(),
                name: "add".into(),
                input: serde_json::json!({"a": 17, "b": 25}),
            }]
        );
    }

    fn decode(body: &str) -> Result<crate::ModelResponse, crate::error::LlmError> {
        let mut decoder = WireDecoder::new(WireFormat::OpenAiResponses);
        let mut events = Vec::new();
        decoder.push(body.as_bytes(), &mut events)?;
        decoder.finish(&mut events)?;
        let mut assembler = StreamAssembler::new();
        for event in &events {
            assembler.push(event)?;
        }
        assembler.finish()
    }

    fn event(data: serde_json::Value) -> String {
        format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap_or("")
        )
    }

    /// A stream with the given output items, each `added` then `done`, then `completed`.
    fn stream(items: &[serde_json::Value]) -> String {
        let mut body = event(json!({"type": "response.created", "response": {"id": "resp_1"}}));
        for (i, item) in items.iter().enumerate() {
            body.push_str(&event(json!({"type": "response.output_item.added",
                                        "output_index": i, "item": item})));
            body.push_str(&event(json!({"type": "response.output_item.done",
                                        "output_index": i, "item": item})));
        }
        body.push_str(&event(json!({"type": "response.completed",
                                    "response": {"id": "resp_1", "status": "completed"}})));
        body
    }

    use serde_json::json;

    fn search_items() -> (serde_json::Value, serde_json::Value) {
        (
            json!({"type": "tool_search_call", "id": "tsc_1", "call_id": null,
                   "execution": "server", "status": "completed",
                   "arguments": {"query": "invoice"}}),
            json!({"type": "tool_search_output", "id": "tso_1", "call_id": null,
                   "execution": "server", "status": "completed",
                   "tools": [{"type": "function", "name": "export_invoice",
                              "description": "Exports", "parameters": {"type": "object"},
                              "strict": false, "defer_loading": true}]}),
        )
    }

    #[test]
    fn hosted_tool_search_items_are_kept_whole_beside_the_call() {
        let (call, output) = search_items();
        let function = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
                              "name": "export_invoice", "arguments": "{\"id\":\"a\"}",
                              "status": "completed"});
        let response = decode(&stream(&[call.clone(), output.clone(), function.clone()])).unwrap();
        let want = vec![
            ContentBlock::Other(call.clone()),
            ContentBlock::Other(output.clone()),
            ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "export_invoice".into(),
                input: json!({"id": "a"}),
            },
        ];
        assert_eq!(response.message.content, want);
        assert_eq!(response.stop_reason, crate::message::StopReason::ToolUse);

        // The same items in a whole (non-streamed) response.
        let body = json!({"id": "resp_1", "object": "response", "status": "completed",
                          "output": [call, output, function]});
        let mut decoder = super::Decoder::default();
        let mut events = Vec::new();
        decoder
            .decode_whole(&body.to_string(), &mut events)
            .unwrap();
        let mut assembler = StreamAssembler::new();
        for event in &events {
            assembler.push(event).unwrap();
        }
        assert_eq!(assembler.finish().unwrap().message.content, want);
    }

    #[test]
    fn only_search_items_are_responses_only_and_kept_with_their_required_fields() {
        use super::{is_responses_only, is_tool_search_item};
        let (call, output) = search_items();
        for item in [&call, &output] {
            assert!(
                is_responses_only(item) && is_tool_search_item(item),
                "{item}"
            );
        }
        let anthropic = json!({"type": "server_tool_use", "id": "srv_1", "arguments": {}});
        assert!(!is_responses_only(&anthropic) && !is_tool_search_item(&anthropic));
        assert!(!is_responses_only(&json!("tool_search_call")));
        let mut call = call;
        call["arguments"] = json!(null);
        assert!(is_responses_only(&call) && !is_tool_search_item(&call));
        // A call's `tools` do not stand for its arguments, nor an output's arguments for tools.
        let crossed = json!({"type": "tool_search_call", "tools": []});
        assert!(!is_tool_search_item(&crossed));
        let crossed = json!({"type": "tool_search_output", "arguments": {}});
        assert!(!is_tool_search_item(&crossed));
    }

    #[test]
    fn only_search_items_are_read_whatever_their_fields_hold() {
        // A function call whose fields have the wrong types is malformed, as before; a search
        // item with the same fields is judged whole (and kept here: it has its arguments).
        let odd = |ty: &str| json!({"type": ty, "id": 5, "call_id": ["x"], "name": {}, "arguments": {"q": 1}});
        assert!(decode(&stream(&[odd("function_call")])).is_err());
        let response = decode(&stream(&[odd("tool_search_call")])).unwrap();
        assert_eq!(
            response.message.content,
            [ContentBlock::Other(odd("tool_search_call"))]
        );
    }

    #[test]
    fn search_items_without_what_an_input_item_needs_are_left_out() {
        let (mut call, mut output) = search_items();
        call.as_object_mut().unwrap().remove("arguments");
        output["tools"] = json!("none");
        let text = json!({"type": "message", "id": "msg_1", "role": "assistant",
                          "content": [{"type": "output_text", "text": "hi"}]});
        let response = decode(&stream(&[call, output, text])).unwrap();
        assert_eq!(response.message.content, vec![ContentBlock::text("hi")]);
        assert_eq!(response.stop_reason, crate::message::StopReason::EndTurn);
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(|b| json!(b)),
            any::<i64>().prop_map(|n| json!(n)),
            "\\PC{0,12}".prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// A hosted tool search item with any values in its fields (and any extra ones) never
        /// fails the stream nor panics: it is kept whole when it has what an input item of its
        /// type needs, left out otherwise; the function call after it is decoded either way.
        #[test]
        fn malformed_search_items_are_kept_or_left_out(
            output in proptest::bool::ANY,
            fields in proptest::collection::btree_map(
                proptest::sample::select(vec!["id", "call_id", "execution", "status",
                                              "arguments", "tools", "summary", "content",
                                              "name", "encrypted_content", "extra"]),
                json_value(), 0..7),
        ) {
            let mut item: serde_json::Map<String, serde_json::Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            let ty = if output { "tool_search_output" } else { "tool_search_call" };
            item.insert("type".into(), json!(ty));
            let item = serde_json::Value::Object(item);
            let function = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
                                  "name": "f", "arguments": "{}", "status": "completed"});
            let response = decode(&stream(&[item.clone(), function])).unwrap();
            let mut want = Vec::new();
            if super::is_tool_search_item(&item) {
                want.push(ContentBlock::Other(item));
            }
            want.push(ContentBlock::ToolUse { id: "call_1".into(), name: "f".into(), input: json!({}) });
            proptest::prop_assert_eq!(response.message.content, want);
        }
    }
}
