//! OpenAI Chat Completions, the mock side (feature `testing`): what the
//! [`MockServer`](crate::testing::MockServer) needs to serve this format: its path, the
//! request read back into messages, what the API refuses, and a response's SSE bytes.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::message::{ContentBlock, MediaSource, Message, Role, StopReason, Usage};
use crate::provider::mock::{
    openai_error, sse, MockFormat, Rejection, Route, Segment, SegmentKind,
};
use crate::wire::{LlmEvent, ModelResponse};

use super::request::{ERROR_RESULT_PREFIX, TOOL_IMAGES_LABEL};

/// The mock side of OpenAI Chat Completions: `{prefix}/chat/completions`.
pub(crate) struct Mock;

impl MockFormat for Mock {
    fn route(&self, route: &Route<'_>) -> Option<bool> {
        route.ends(&["chat", "completions"], &["chat", "completions"])
    }

    fn history(&self, body: &Value) -> Option<Vec<Message>> {
        body.get("messages")?.as_array()?;
        Some(decode(body))
    }

    fn max_tokens_at(&self) -> &'static [&'static str] {
        &["/max_completion_tokens", "/max_tokens"]
    }

    fn prompt_at(&self) -> &'static [&'static str] {
        &["/messages"]
    }

    fn refusal(&self, _body: &Value, _headers: &[(String, String)]) -> Option<Rejection> {
        None
    }

    fn status_body(
        &self,
        _status: u16,
        error_type: &str,
        message: &str,
        code: Option<&str>,
    ) -> (Value, Vec<(String, String)>) {
        (openai_error(message, error_type, code), Vec::new())
    }

    fn encode_stream(&self, events: &[LlmEvent], _usage: Usage) -> Vec<Segment> {
        stream(events)
    }

    fn encode_whole(&self, response: &ModelResponse) -> Value {
        whole(response)
    }

    fn error_event(&self, error_type: &str, message: &str) -> Vec<u8> {
        sse(
            None,
            &json!({"error": {"message": message, "type": error_type, "code": null}}),
        )
    }

    fn keep_alive(&self) -> Vec<u8> {
        b": keep-alive\n\n".to_vec()
    }

    fn garbage(&self) -> Vec<u8> {
        b"data: {not json\n\n".to_vec()
    }
}

fn openai_finish_reason(reason: &StopReason) -> String {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence => "stop".to_owned(),
        StopReason::ToolUse => "tool_calls".to_owned(),
        StopReason::MaxTokens => "length".to_owned(),
        StopReason::ContentFilter | StopReason::Refusal => "content_filter".to_owned(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "stop".to_owned()),
    }
}

fn stream(events: &[LlmEvent]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut id = String::from("chatcmpl-mock");
    let mut model = String::from("mock-model");
    let mut tool_slots: HashMap<usize, usize> = HashMap::new();
    let mut usage: Option<Usage> = None;
    let chunk = |id: &str, model: &str, delta: Value, finish: Option<String>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    for event in events {
        let (kind, data) = match event {
            LlmEvent::MessageStart { id: i, model: m } => {
                id.clone_from(i);
                model.clone_from(m);
                (
                    SegmentKind::Preamble,
                    chunk(&id, &model, json!({"role": "assistant"}), None),
                )
            }
            LlmEvent::TextDelta { text, .. } => (
                SegmentKind::Content,
                chunk(&id, &model, json!({"content": text}), None),
            ),
            LlmEvent::ThinkingDelta { thinking, .. } => (
                SegmentKind::Content,
                chunk(&id, &model, json!({"reasoning_content": thinking}), None),
            ),
            LlmEvent::ToolCallStart {
                index,
                id: call,
                name,
            } => {
                let slot = tool_slots.len();
                tool_slots.insert(*index, slot);
                (
                    SegmentKind::Content,
                    chunk(
                        &id,
                        &model,
                        json!({"tool_calls": [{"index": slot, "id": call, "type": "function",
                                               "function": {"name": name, "arguments": ""}}]}),
                        None,
                    ),
                )
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => {
                let slot = tool_slots.get(index).copied().unwrap_or(0);
                (
                    SegmentKind::Content,
                    chunk(
                        &id,
                        &model,
                        json!({"tool_calls": [{"index": slot,
                                               "function": {"arguments": partial_json}}]}),
                        None,
                    ),
                )
            }
            LlmEvent::Usage(u) => {
                usage = Some(*u);
                continue;
            }
            LlmEvent::MessageStop { stop_reason } => {
                out.push(Segment {
                    bytes: sse(
                        None,
                        &chunk(
                            &id,
                            &model,
                            json!({}),
                            Some(openai_finish_reason(stop_reason)),
                        ),
                    ),
                    kind: SegmentKind::End,
                });
                if let Some(u) = usage {
                    let cached = u.cache_read_input_tokens;
                    let prompt = u.total_input_tokens();
                    out.push(Segment {
                        bytes: sse(
                            None,
                            &json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                                    "model": model, "choices": [],
                                    "usage": {"prompt_tokens": prompt,
                                              "completion_tokens": u.output_tokens,
                                              "total_tokens": prompt + u.output_tokens,
                                              "prompt_tokens_details": {"cached_tokens": cached},
                                              "completion_tokens_details":
                                                  {"reasoning_tokens": u.reasoning_tokens}}}),
                        ),
                        kind: SegmentKind::End,
                    });
                }
                out.push(Segment {
                    bytes: b"data: [DONE]\n\n".to_vec(),
                    kind: SegmentKind::End,
                });
                continue;
            }
            // Signatures, redacted thinking, unmodelled blocks and block stops have no
            // Chat Completions form.
            _ => continue,
        };
        out.push(Segment {
            bytes: sse(None, &data),
            kind,
        });
    }
    out
}

fn whole(response: &ModelResponse) -> Value {
    let text = response.message.text();
    let reasoning: String = response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    let tool_calls: Vec<Value> = response
        .message
        .tool_uses()
        .map(|(id, name, input)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": input.to_string()}})
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish_reason = match &response.stop_reason {
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
        _ => "stop",
    };
    let usage = response.usage;
    let prompt = usage.total_input_tokens();
    json!({
        "id": response.id,
        "object": "chat.completion",
        "created": 0,
        "model": response.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason,
                     "logprobs": null}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        },
    })
}

/// The conversation in a Chat Completions request body, in the crate's shape: the inverse of
/// [`encode`] for the `messages` field, for the mock server's history check. Tolerant of any
/// JSON (never panics).
///
/// System and developer messages are left out (they are not part of the alternation). The
/// `tool` messages after an assistant message and the user message after them form one user
/// message, results first, as [`encode`] split it. A result whose content starts with
/// [`ERROR_RESULT_PREFIX`] reads as an error result without it. Arguments that are not JSON
/// are kept as a JSON string.
pub(super) fn decode(body: &Value) -> Vec<Message> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<Message> = Vec::new();
    for m in messages {
        match m.get("role").and_then(Value::as_str).unwrap_or_default() {
            "assistant" => {
                let mut content = decode_thinking(m.get("thinking_blocks"));
                content.extend(decode_content(m.get("content")));
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    content.push(decode_tool_call(call));
                }
                out.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => {
                let text = m.get("content").and_then(Value::as_str).unwrap_or_default();
                let (text, is_error) = match text.strip_prefix(ERROR_RESULT_PREFIX) {
                    Some(rest) => (rest, true),
                    None => (text, false),
                };
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let result = ContentBlock::tool_result(id, text, is_error);
                match out.last_mut() {
                    Some(last) if last.role == Role::User && only_results(last) => {
                        last.content.push(result)
                    }
                    _ => out.push(Message {
                        role: Role::User,
                        content: vec![result],
                    }),
                }
            }
            "user" => {
                let content = decode_content(m.get("content"));
                // The images of tool results, each run after its label, go back to their
                // results.
                if let Some(last) = out.last_mut().filter(|l| only_results(l)) {
                    if attach_tool_images(last, &content) {
                        continue;
                    }
                }
                match out.last_mut() {
                    // The user part of a turn that began with tool results, or a user message
                    // after a user message (OpenAI accepts them; one user turn).
                    Some(last) if last.role == Role::User => last.content.extend(content),
                    _ => out.push(Message {
                        role: Role::User,
                        content,
                    }),
                }
            }
            _ => {}
        }
    }
    out
}

fn only_results(message: &Message) -> bool {
    message
        .content
        .iter()
        .all(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// Text content (a string) or content parts (text parts as text, the others verbatim).
fn decode_content(content: Option<&Value>) -> Vec<ContentBlock> {
    match content {
        Some(Value::String(text)) => vec![ContentBlock::text(text.clone())],
        Some(Value::Array(parts)) => parts.iter().map(decode_part).collect(),
        _ => Vec::new(),
    }
}

/// One content part: text, an `image_url` (a data: URL becomes base64 bytes), a PDF `file`;
/// anything else verbatim.
fn decode_part(part: &Value) -> ContentBlock {
    let source = |url: Option<&str>| -> Option<MediaSource> {
        let url = url?;
        Some(match url.strip_prefix("data:") {
            Some(rest) => {
                let (media_type, data) = rest.split_once(";base64,")?;
                MediaSource::Base64 {
                    media_type: media_type.to_owned(),
                    data: data.to_owned(),
                }
            }
            None => MediaSource::Url {
                url: url.to_owned(),
            },
        })
    };
    let decoded = match part.get("type").and_then(Value::as_str) {
        Some("text") => part
            .get("text")
            .and_then(Value::as_str)
            .map(ContentBlock::text),
        Some("image_url") => source(part.pointer("/image_url/url").and_then(Value::as_str))
            .map(|source| ContentBlock::Image { source }),
        Some("file") => {
            source(part.pointer("/file/file_data").and_then(Value::as_str)).map(|source| {
                ContentBlock::Document {
                    source,
                    title: part
                        .pointer("/file/filename")
                        .and_then(Value::as_str)
                        .filter(|name| *name != "document.pdf")
                        .map(str::to_owned),
                }
            })
        }
        _ => None,
    };
    decoded.unwrap_or_else(|| ContentBlock::Other(part.clone()))
}

/// Moves the images of a tool-images user message (label text, then images, per result) to
/// the results they belong to; `false` (and nothing moved) when `content` is not one.
fn attach_tool_images(results: &mut Message, content: &[ContentBlock]) -> bool {
    let mut groups: Vec<(String, Vec<MediaSource>)> = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text { text } => {
                let Some(id) = text
                    .strip_prefix(TOOL_IMAGES_LABEL)
                    .and_then(|rest| rest.strip_suffix(':'))
                else {
                    return false;
                };
                groups.push((id.to_owned(), Vec::new()));
            }
            ContentBlock::Image { source } => match groups.last_mut() {
                Some((_, images)) => images.push(source.clone()),
                None => return false,
            },
            _ => return false,
        }
    }
    if groups.is_empty() {
        return false;
    }
    for (id, group) in groups {
        for block in &mut results.content {
            if let ContentBlock::ToolResult {
                tool_use_id,
                images,
                ..
            } = block
            {
                if *tool_use_id == id {
                    images.extend(group.iter().cloned());
                }
            }
        }
    }
    true
}

fn decode_thinking(blocks: Option<&Value>) -> Vec<ContentBlock> {
    let text = |block: &Value, key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    blocks
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("redacted_thinking") => ContentBlock::RedactedThinking {
                data: text(block, "data"),
            },
            _ => ContentBlock::Thinking {
                thinking: text(block, "thinking"),
                signature: text(block, "signature"),
            },
        })
        .collect()
}

fn decode_tool_call(call: &Value) -> ContentBlock {
    let field =
        |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or_default().to_owned();
    let function = call.get("function");
    let arguments = field(function.and_then(|f| f.get("arguments")));
    ContentBlock::ToolUse {
        id: field(call.get("id")),
        name: field(function.and_then(|f| f.get("name"))),
        input: serde_json::from_str(&arguments).unwrap_or(Value::String(arguments)),
    }
}
