//! Anthropic Messages, the mock side (feature `testing`): what the
//! [`MockServer`](crate::testing::MockServer) needs to serve this format: its path, the
//! request read back into messages, what the API refuses, and a response's SSE bytes.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::message::{ContentBlock, Message, Role, Usage};
use crate::provider::mock::{
    context_management, sse, MockFormat, Rejection, Route, Segment, SegmentKind,
};
use crate::wire::{LlmEvent, ModelResponse};

/// The mock side of Anthropic Messages: `{prefix}/v1/messages`.
pub(crate) struct Mock;

impl MockFormat for Mock {
    fn route(&self, route: &Route<'_>) -> Option<bool> {
        route.ends(&["v1", "messages"], &["v1", "messages"])
    }

    fn history(&self, body: &Value) -> Option<Vec<Message>> {
        body.get("messages")?.as_array()?;
        Some(decode(body))
    }

    fn max_tokens_at(&self) -> &'static [&'static str] {
        &["/max_tokens"]
    }

    fn prompt_at(&self) -> &'static [&'static str] {
        &["/system", "/messages"]
    }

    fn refusal(&self, body: &Value, headers: &[(String, String)]) -> Option<Rejection> {
        context_management::rejection(body, headers)
    }

    fn not_found_type(&self) -> &'static str {
        "not_found_error"
    }

    fn status_body(
        &self,
        _status: u16,
        error_type: &str,
        message: &str,
        _code: Option<&str>,
    ) -> (Value, Vec<(String, String)>) {
        let body = json!({"type": "error", "error": {"type": error_type, "message": message}});
        (body, Vec::new())
    }

    fn encode_stream(&self, events: &[LlmEvent], usage: Usage) -> Vec<Segment> {
        stream(events, usage)
    }

    fn encode_whole(&self, response: &ModelResponse) -> Value {
        whole(response)
    }

    fn error_event(&self, error_type: &str, message: &str) -> Vec<u8> {
        sse(
            Some("error"),
            &json!({"type": "error", "error": {"type": error_type, "message": message}}),
        )
    }

    fn keep_alive(&self) -> Vec<u8> {
        b"event: ping\ndata: {\"type\": \"ping\"}\n\n".to_vec()
    }

    fn garbage(&self) -> Vec<u8> {
        b"event: content_block_delta\ndata: {not json\n\n".to_vec()
    }
}

/// One content segment of an Anthropic stream: the block's start (with empty content) when this
/// is its first delta, then the delta, so that "after the first content event" includes some
/// real content.
fn delta_segment(first: bool, index: usize, block: Value, delta: Value) -> Segment {
    let mut bytes = Vec::new();
    if first {
        bytes = sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
    }
    bytes.extend(sse(
        Some("content_block_delta"),
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    ));
    Segment {
        bytes,
        kind: SegmentKind::Content,
    }
}

fn stream(events: &[LlmEvent], usage: Usage) -> Vec<Segment> {
    let mut out = Vec::new();
    fn push(out: &mut Vec<Segment>, kind: SegmentKind, event: &str, data: Value) {
        out.push(Segment {
            bytes: sse(Some(event), &data),
            kind,
        })
    }
    let mut started: HashMap<usize, ()> = HashMap::new();
    let mut last_usage = usage;
    let mut stop_sequence: Option<&str> = None;
    let mut context_edits: Vec<crate::provider::context_editing::AppliedEdit> = Vec::new();
    for event in events {
        match event {
            LlmEvent::MessageStart { id, model } => {
                push(
                    &mut out,
                    SegmentKind::Preamble,
                    "message_start",
                    json!({"type": "message_start", "message": {
                        "id": id, "type": "message", "role": "assistant", "model": model,
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": {
                            "input_tokens": usage.input_tokens,
                            "cache_read_input_tokens": usage.cache_read_input_tokens,
                            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                            "output_tokens": 1
                        }
                    }}),
                );
                push(
                    &mut out,
                    SegmentKind::Preamble,
                    "ping",
                    json!({"type": "ping"}),
                );
            }
            LlmEvent::TextDelta { index, text } => out.push(delta_segment(
                started.insert(*index, ()).is_none(),
                *index,
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": text}),
            )),
            LlmEvent::ThinkingDelta { index, thinking } => out.push(delta_segment(
                started.insert(*index, ()).is_none(),
                *index,
                json!({"type": "thinking", "thinking": ""}),
                json!({"type": "thinking_delta", "thinking": thinking}),
            )),
            LlmEvent::SignatureDelta { index, signature } => {
                if started.insert(*index, ()).is_none() {
                    push(
                        &mut out,
                        SegmentKind::Content,
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "thinking", "thinking": ""}}),
                    );
                }
                push(
                    &mut out,
                    SegmentKind::Content,
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "signature_delta", "signature": signature}}),
                );
            }
            LlmEvent::RedactedThinking { index, data } => {
                started.insert(*index, ());
                push(
                    &mut out,
                    SegmentKind::Content,
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "redacted_thinking", "data": data}}),
                );
            }
            LlmEvent::ToolCallStart { index, id, name } => {
                started.insert(*index, ());
                push(
                    &mut out,
                    SegmentKind::Content,
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": id, "name": name,
                                             "input": {}}}),
                );
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => push(
                &mut out,
                SegmentKind::Content,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": partial_json}}),
            ),
            LlmEvent::OtherBlock { index, block } => {
                started.insert(*index, ());
                push(
                    &mut out,
                    SegmentKind::Content,
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": block}),
                );
            }
            LlmEvent::BlockStop { index } => push(
                &mut out,
                SegmentKind::Other,
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ),
            LlmEvent::Usage(usage) => last_usage = *usage,
            LlmEvent::StopSequence { sequence } => stop_sequence = Some(sequence),
            LlmEvent::ContextEdited { edits } => context_edits.extend(edits.iter().cloned()),
            LlmEvent::MessageStop { stop_reason } => {
                let mut delta = json!({"type": "message_delta",
                       "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                       "usage": {"output_tokens": last_usage.output_tokens}});
                // Context editing: what the server cleared rides on `message_delta`.
                if !context_edits.is_empty() {
                    delta["context_management"] = json!({ "applied_edits": context_edits
                        .iter()
                        .map(|e| if e.kind == crate::provider::context_editing::CLEAR_THINKING {
                            json!({"type": e.kind, "cleared_thinking_turns": e.cleared_thinking_turns,
                                   "cleared_input_tokens": e.cleared_input_tokens})
                        } else {
                            json!({"type": e.kind, "cleared_tool_uses": e.cleared_tool_uses,
                                   "cleared_input_tokens": e.cleared_input_tokens})
                        })
                        .collect::<Vec<_>>() });
                }
                push(&mut out, SegmentKind::End, "message_delta", delta);
                push(
                    &mut out,
                    SegmentKind::End,
                    "message_stop",
                    json!({"type": "message_stop"}),
                );
            }
            // Retry events are the client's, never the wire's; future events are skipped.
            _ => {}
        }
    }
    out
}

fn whole(response: &ModelResponse) -> Value {
    let usage = response.usage;
    json!({
        "id": response.id,
        "type": "message",
        "role": "assistant",
        "model": response.model,
        "content": response.message.content,
        "stop_reason": response.stop_reason,
        "stop_sequence": response.stop_sequence,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        },
    })
}

/// The conversation in an Anthropic Messages request body: the inverse of [`encode`] for the
/// `messages` field, for the mock server's history check. Tolerant of any JSON (never
/// panics): a missing field reads as empty, an unknown block is kept as
/// [`ContentBlock::Other`], a role other than `assistant` reads as user.
pub(super) fn decode(body: &Value) -> Vec<Message> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    messages
        .iter()
        .map(|m| {
            let role = if m.get("role").and_then(Value::as_str) == Some("assistant") {
                Role::Assistant
            } else {
                Role::User
            };
            let content = match m.get("content") {
                Some(Value::String(text)) => vec![ContentBlock::text(text.clone())],
                Some(Value::Array(blocks)) => blocks.iter().map(decode_block).collect(),
                _ => Vec::new(),
            };
            Message { role, content }
        })
        .collect()
}

fn decode_block(block: &Value) -> ContentBlock {
    let text = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match block.get("type").and_then(Value::as_str) {
        Some("text") => ContentBlock::text(text("text")),
        Some("thinking") => ContentBlock::Thinking {
            thinking: text("thinking"),
            signature: text("signature"),
        },
        Some("redacted_thinking") => ContentBlock::RedactedThinking { data: text("data") },
        Some("tool_use") => ContentBlock::ToolUse {
            id: text("id"),
            name: text("name"),
            input: block.get("input").cloned().unwrap_or(Value::Null),
        },
        Some("tool_result") => ContentBlock::ToolResult {
            tool_use_id: text("tool_use_id"),
            content: match block.get("content") {
                Some(Value::String(content)) => content.clone(),
                // Content blocks: their texts, joined.
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            },
            is_error: block
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            images: match block.get("content") {
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("image"))
                    .filter_map(|p| serde_json::from_value(p.get("source")?.clone()).ok())
                    .collect(),
                _ => Vec::new(),
            },
            json: None,
        },
        Some("image") => match block
            .get("source")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
        {
            Some(source) => ContentBlock::Image { source },
            None => ContentBlock::Other(block.clone()),
        },
        Some("document") => match block
            .get("source")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
        {
            Some(source) => ContentBlock::Document {
                source,
                title: block
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            None => ContentBlock::Other(block.clone()),
        },
        _ => ContentBlock::Other(block.clone()),
    }
}
