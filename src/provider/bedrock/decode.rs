//! Bedrock ConverseStream decoding: event-stream messages → [`LlmEvent`]s.
//!
//! The documented sequence (botocore's `ConverseStreamOutput`) is `messageStart {role}`, then
//! per content block an optional `contentBlockStart` (sent for tool calls, with
//! `start.toolUse {toolUseId, name}`; some servers send an empty `start` for text and
//! reasoning too), `contentBlockDelta`s (`delta.text`, `delta.toolUse.input` (a fragment of
//! the JSON arguments), `delta.reasoningContent.{text | signature | redactedContent}`) and
//! `contentBlockStop`, each with its `contentBlockIndex`; then `messageStop {stopReason}` and,
//! after it, `metadata {usage, metrics}`. The response is complete at `metadata`; a body that
//! ends right after `messageStop` is accepted too (leniently), one that ends before it is
//! [`LlmError::Incomplete`].
//!
//! Exceptions (`throttlingException`, `modelStreamErrorException`, `validationException`,
//! `serviceUnavailableException`, `internalServerException` …) arrive as event-stream messages
//! of type `exception`, named by their `:exception-type`: each becomes
//! [`LlmError::Stream`] with that name as its type (the transient ones are retried, see
//! `transient_kind`). Unknown events, unknown fields (Bedrock pads payloads with a `p` field),
//! unknown block and delta kinds are ignored.
//!
//! Usage: `inputTokens` counts the prompt tokens neither read from nor written to the cache
//! (as Anthropic's `input_tokens`), so it maps to [`Usage::input_tokens`] as it is;
//! `cacheReadInputTokens` and `cacheWriteInputTokens` to the two cache fields.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::LlmError;
use crate::message::{StopReason, Usage};
use crate::provider::CowStr;
use crate::wire::LlmEvent;

/// The most bytes of redacted reasoning held for one block (the default response limit).
const MAX_REDACTED_BYTES: usize = 64 << 20;

/// Every ConverseStream event payload in one flat shape; which fields are set depends on the
/// event.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    #[serde(default)]
    content_block_index: Option<usize>,
    #[serde(borrow, default)]
    start: Option<Start<'a>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    additional_model_response_fields: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Start<'a> {
    #[serde(borrow, default)]
    tool_use: Option<ToolStart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolStart<'a> {
    #[serde(borrow, default)]
    tool_use_id: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    name: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(borrow, default)]
    text: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    tool_use: Option<ToolDelta<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<ReasoningDelta<'a>>,
}

#[derive(Deserialize)]
struct ToolDelta<'a> {
    #[serde(borrow, default)]
    input: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta<'a> {
    #[serde(borrow, default)]
    text: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    signature: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    redacted_content: Option<CowStr<'a>>,
}

/// `TokenUsage` as sent.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_input_tokens: self.cache_read_input_tokens.unwrap_or(0),
            cache_creation_input_tokens: self.cache_write_input_tokens.unwrap_or(0),
            ..Usage::default()
        }
    }
}

/// An exception's payload (`{"message": …}`; `modelStreamErrorException` adds the model's
/// own status and message).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireException {
    #[serde(default, alias = "Message")]
    message: Option<String>,
    #[serde(default)]
    original_status_code: Option<u64>,
    #[serde(default)]
    original_message: Option<String>,
}

/// What kind of block an index holds, once opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Tool,
}

/// Decoder state: what has been seen of the message so far.
#[derive(Debug)]
pub(crate) struct Decoder {
    started: bool,
    /// `messageStop` seen (its reason kept until `metadata`).
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    done: bool,
    /// The blocks opened (an event sent for them), by index.
    open: HashMap<usize, Kind>,
    /// Blocks already stopped: a late delta for one is ignored, a second stop too.
    closed: HashSet<usize>,
    /// Redacted reasoning of a block, held until its stop (it arrives as one base64 blob,
    /// possibly in pieces).
    redacted: HashMap<usize, String>,
    /// The most redacted reasoning held for one block ([`MAX_REDACTED_BYTES`]).
    max_redacted: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            started: false,
            stop_reason: None,
            stop_sequence: None,
            done: false,
            open: HashMap::new(),
            closed: HashSet::new(),
            redacted: HashMap::new(),
            max_redacted: MAX_REDACTED_BYTES,
        }
    }
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
            // Anything after the end of the message is not the message's.
            return Ok(());
        }
        if event.to_ascii_lowercase().ends_with("exception") {
            return Err(exception(event, data));
        }
        match event {
            "messageStart" => {
                self.ensure_started(out);
                Ok(())
            }
            "contentBlockStart" | "contentBlockDelta" | "contentBlockStop" | "messageStop"
            | "metadata" => {
                let parsed: Event<'_> = serde_json::from_str(data).map_err(|e| {
                    LlmError::malformed(format!("invalid JSON in Bedrock `{event}` event: {e}"))
                })?;
                self.ensure_started(out);
                match event {
                    "contentBlockStart" => self.block_start(parsed, out),
                    "contentBlockDelta" => self.block_delta(parsed, out),
                    "contentBlockStop" => self.block_stop(parsed.content_block_index, out),
                    "messageStop" => {
                        self.message_stop(parsed, out);
                        Ok(())
                    }
                    _ => {
                        if let Some(usage) = parsed.usage {
                            out.push(LlmEvent::Usage(usage.to_usage()));
                        }
                        if self.stop_reason.is_some() {
                            self.end(out);
                        }
                        Ok(())
                    }
                }
            }
            // Events added later (and the initial-response of other AWS streams).
            _ => Ok(()),
        }
    }

    /// Servers that skip `messageStart` are tolerated: the first event starts the message.
    fn ensure_started(&mut self, out: &mut Vec<LlmEvent>) {
        if !self.started {
            self.started = true;
            out.push(LlmEvent::MessageStart {
                id: String::new(),
                model: String::new(),
            });
        }
    }

    fn index(index: Option<usize>, what: &str) -> Result<usize, LlmError> {
        index.ok_or_else(|| {
            LlmError::malformed(format!("Bedrock {what} event without a contentBlockIndex"))
        })
    }

    fn block_start(&mut self, parsed: Event<'_>, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        let index = Self::index(parsed.content_block_index, "contentBlockStart")?;
        let Some(start) = parsed.start else {
            return Ok(());
        };
        if let Some(tool) = start.tool_use {
            let (Some(id), Some(name)) = (tool.tool_use_id, tool.name) else {
                return Err(LlmError::malformed(
                    "Bedrock contentBlockStart.toolUse without a toolUseId or a name",
                ));
            };
            if self.open.contains_key(&index) || self.closed.contains(&index) {
                return Err(LlmError::malformed(format!(
                    "Bedrock contentBlockStart for block {index}, which has already started"
                )));
            }
            self.open.insert(index, Kind::Tool);
            out.push(LlmEvent::ToolCallStart {
                index,
                id: id.into_string(),
                name: name.into_string(),
            });
        }
        // An empty start (a text block), a reasoning start (aimock sends one) or a kind the
        // crate does not model (server-side tool results, images): the deltas say what the
        // block is, and open it, so that a block without content never becomes an empty one.
        Ok(())
    }

    fn block_delta(&mut self, parsed: Event<'_>, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        let index = Self::index(parsed.content_block_index, "contentBlockDelta")?;
        let Some(delta) = parsed.delta else {
            return Err(LlmError::malformed(
                "Bedrock contentBlockDelta without a delta",
            ));
        };
        if self.closed.contains(&index) {
            return Err(LlmError::malformed(format!(
                "Bedrock contentBlockDelta for block {index} after its contentBlockStop"
            )));
        }
        if let Some(text) = delta.text {
            self.open.entry(index).or_insert(Kind::Text);
            out.push(LlmEvent::TextDelta {
                index,
                text: text.into_string(),
            });
        } else if let Some(tool) = delta.tool_use {
            if self.open.get(&index) != Some(&Kind::Tool) {
                return Err(LlmError::malformed(format!(
                    "Bedrock toolUse delta for block {index}, which is not a tool call"
                )));
            }
            if let Some(input) = tool.input {
                out.push(LlmEvent::ToolCallDelta {
                    index,
                    partial_json: input.into_string(),
                });
            }
        } else if let Some(reasoning) = delta.reasoning_content {
            if let Some(text) = reasoning.text {
                self.open.entry(index).or_insert(Kind::Thinking);
                out.push(LlmEvent::ThinkingDelta {
                    index,
                    thinking: text.into_string(),
                });
            }
            if let Some(signature) = reasoning.signature {
                self.open.entry(index).or_insert(Kind::Thinking);
                out.push(LlmEvent::SignatureDelta {
                    index,
                    signature: signature.into_string(),
                });
            }
            if let Some(data) = reasoning.redacted_content {
                let held = self.redacted.entry(index).or_default();
                if held.len().saturating_add(data.as_str().len()) > self.max_redacted {
                    return Err(LlmError::LimitExceeded {
                        what: "a Bedrock redacted reasoning block".into(),
                        limit: self.max_redacted,
                        setting: "StreamLimits::max_response_bytes".into(),
                    });
                }
                held.push_str(data.as_str());
            }
        }
        // citation, toolResult and image deltas (server-side features): nothing the crate models.
        Ok(())
    }

    fn block_stop(
        &mut self,
        index: Option<usize>,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let index = Self::index(index, "contentBlockStop")?;
        if let Some(data) = self.redacted.remove(&index) {
            if self.open.contains_key(&index) {
                return Err(LlmError::malformed(format!(
                    "Bedrock block {index} holds both reasoning text and redacted content"
                )));
            }
            self.open.insert(index, Kind::Thinking);
            out.push(LlmEvent::RedactedThinking { index, data });
        }
        if self.open.contains_key(&index) && self.closed.insert(index) {
            out.push(LlmEvent::BlockStop { index });
        }
        Ok(())
    }

    fn message_stop(&mut self, parsed: Event<'_>, out: &mut Vec<LlmEvent>) {
        // Blocks still open (a server that sends no contentBlockStop) close with the message.
        let mut open: Vec<usize> = self.redacted.keys().copied().collect();
        open.extend(self.open.keys().filter(|i| !self.closed.contains(i)));
        open.sort_unstable();
        open.dedup();
        for index in open {
            let _ = self.block_stop(Some(index), out);
        }
        let reason = parsed
            .stop_reason
            .as_ref()
            .map_or("end_turn", CowStr::as_str);
        self.stop_reason = Some(stop_reason(reason));
        self.stop_sequence = parsed
            .additional_model_response_fields
            .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
            .and_then(|v| v.get("stop_sequence")?.as_str().map(str::to_owned));
    }

    /// The message is complete: its stop sequence, then `MessageStop`.
    fn end(&mut self, out: &mut Vec<LlmEvent>) {
        self.done = true;
        let stop_reason = self.stop_reason.take().unwrap_or(StopReason::EndTurn);
        if stop_reason == StopReason::StopSequence {
            if let Some(sequence) = self.stop_sequence.take() {
                out.push(LlmEvent::StopSequence { sequence });
            }
        }
        out.push(LlmEvent::MessageStop { stop_reason });
    }

    /// Decodes a whole `Converse` response (`{"output": {"message": …}, "stopReason", "usage"}`)
    /// into the events a stream with the same content gives. A body without `output` that
    /// carries a `message` is the service's error.
    pub(crate) fn decode_whole(
        &mut self,
        text: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let whole: Whole<'_> = serde_json::from_str(text).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in a Bedrock Converse body: {e}"))
        })?;
        let Some(message) = whole.output.and_then(|o| o.message) else {
            let error_type = whole
                .error_type
                .map(|t| t.split(':').next().unwrap_or_default().to_owned())
                .unwrap_or_else(|| "error".to_owned());
            return match whole.message {
                Some(message) => Err(LlmError::Stream {
                    error_type,
                    message,
                }),
                None => Err(LlmError::malformed(
                    "a JSON body that is neither a Bedrock Converse response nor an error \
                     (no `output.message`)",
                )),
            };
        };
        self.ensure_started(out);
        for (index, block) in message.content.unwrap_or_default().into_iter().enumerate() {
            if let Some(text) = block.text {
                out.push(LlmEvent::TextDelta { index, text });
            } else if let Some(tool) = block.tool_use {
                out.push(LlmEvent::ToolCallStart {
                    index,
                    id: tool.tool_use_id.unwrap_or_default(),
                    name: tool.name.unwrap_or_default(),
                });
                out.push(LlmEvent::ToolCallDelta {
                    index,
                    partial_json: tool.input.map_or("{}", RawValue::get).to_owned(),
                });
            } else if let Some(reasoning) = block.reasoning_content {
                if let Some(data) = reasoning.redacted_content {
                    out.push(LlmEvent::RedactedThinking { index, data });
                } else {
                    let reasoning = reasoning.reasoning_text.unwrap_or_default();
                    out.push(LlmEvent::ThinkingDelta {
                        index,
                        thinking: reasoning.text.unwrap_or_default(),
                    });
                    if let Some(signature) = reasoning.signature.filter(|s| !s.is_empty()) {
                        out.push(LlmEvent::SignatureDelta { index, signature });
                    }
                }
            } else {
                continue;
            }
            out.push(LlmEvent::BlockStop { index });
        }
        if let Some(usage) = whole.usage {
            out.push(LlmEvent::Usage(usage.to_usage()));
        }
        self.stop_reason = Some(stop_reason(
            whole.stop_reason.as_deref().unwrap_or("end_turn"),
        ));
        self.stop_sequence = whole
            .additional_model_response_fields
            .and_then(|v| v.get("stop_sequence")?.as_str().map(str::to_owned));
        self.end(out);
        Ok(())
    }

    pub(crate) fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if self.stop_reason.is_some() {
            // messageStop without the metadata that follows it: complete, usage unknown.
            self.end(out);
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no messageStop event"
        } else {
            "no messageStart event; the body was empty or not a Bedrock ConverseStream"
        }))
    }
}

/// A `stopReason` as the crate names it; one it does not know is kept.
pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        other => StopReason::from_wire(other),
    }
}

/// An exception message (`:message-type: exception`), as the crate's error.
fn exception(name: &str, data: &str) -> LlmError {
    let parsed: WireException = serde_json::from_str(data).unwrap_or_default();
    let mut message = parsed
        .message
        .unwrap_or_else(|| data.chars().take(500).collect());
    if let Some(status) = parsed.original_status_code {
        message.push_str(&format!(" (the model answered {status}"));
        if let Some(original) = parsed.original_message {
            message.push_str(": ");
            message.push_str(&original.chars().take(500).collect::<String>());
        }
        message.push(')');
    }
    LlmError::Stream {
        error_type: name.to_owned(),
        message,
    }
}

/// A whole `Converse` response, or an error body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Whole<'a> {
    #[serde(borrow, default)]
    output: Option<WholeOutput<'a>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    additional_model_response_fields: Option<serde_json::Value>,
    #[serde(default, alias = "Message")]
    message: Option<String>,
    #[serde(default, rename = "__type", alias = "code")]
    error_type: Option<String>,
}

#[derive(Deserialize)]
struct WholeOutput<'a> {
    #[serde(borrow, default)]
    message: Option<WholeMessage<'a>>,
}

#[derive(Deserialize)]
struct WholeMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<WholeBlock<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WholeBlock<'a> {
    #[serde(default)]
    text: Option<String>,
    #[serde(borrow, default)]
    tool_use: Option<WholeTool<'a>>,
    #[serde(default)]
    reasoning_content: Option<WholeReasoning>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WholeTool<'a> {
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WholeReasoning {
    #[serde(default)]
    reasoning_text: Option<WholeReasoningText>,
    #[serde(default)]
    redacted_content: Option<String>,
}

#[derive(Deserialize, Default)]
struct WholeReasoningText {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    signature: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_reasoning_is_held_up_to_its_bound_and_no_further() {
        let delta = |data: &str| {
            format!(
                r#"{{"contentBlockIndex":0,"delta":{{"reasoningContent":{{"redactedContent":"{data}"}}}}}}"#
            )
        };
        let mut out = Vec::new();
        let mut decoder = Decoder {
            max_redacted: 6,
            ..Decoder::default()
        };
        decoder
            .on_event("contentBlockDelta", &delta("abc"), &mut out)
            .unwrap();
        decoder
            .on_event("contentBlockDelta", &delta("def"), &mut out)
            .unwrap();
        let over = decoder.on_event("contentBlockDelta", &delta("g"), &mut out);
        assert!(
            matches!(over, Err(LlmError::LimitExceeded { limit: 6, .. })),
            "{over:?}"
        );
        let mut decoder = Decoder {
            max_redacted: 6,
            ..Decoder::default()
        };
        let over = decoder.on_event("contentBlockDelta", &delta("abcdefgh"), &mut out);
        assert!(
            matches!(over, Err(LlmError::LimitExceeded { .. })),
            "{over:?}"
        );
        assert_eq!(Decoder::default().max_redacted, MAX_REDACTED_BYTES);
    }
}
