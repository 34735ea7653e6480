//! OpenAI Responses, the mock side (feature `testing`): what the
//! [`MockServer`](crate::testing::MockServer) needs to serve this format: its path, the
//! request read back into messages, what the API refuses, and a response's SSE bytes. (The
//! `/responses/compact` endpoint's mock is `provider/mock/compact.rs`.)

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::message::{ContentBlock, Message, StopReason, Usage};
use crate::provider::mock::{
    context_management, openai_error, sse, MockFormat, Rejection, Route, Segment, SegmentKind,
};
use crate::wire::{LlmEvent, ModelResponse};

/// The mock side of OpenAI Responses: `{prefix}/responses`.
pub(crate) struct Mock;

impl MockFormat for Mock {
    fn route(&self, route: &Route<'_>) -> Option<bool> {
        route.ends(&["responses"], &["responses"])
    }

    fn history(&self, body: &Value) -> Option<Vec<Message>> {
        body.get("input")?.as_array()?;
        if body
            .get("previous_response_id")
            .is_some_and(|id| !id.is_null())
        {
            // The server prepends the stored response this one continues (results answer
            // its calls), which the mock does not keep: only the server can check it.
            return None;
        }
        Some(super::request::decode(body))
    }

    fn max_tokens_at(&self) -> &'static [&'static str] {
        &["/max_output_tokens"]
    }

    fn prompt_at(&self) -> &'static [&'static str] {
        &["/instructions", "/input"]
    }

    fn refusal(&self, body: &Value, _headers: &[(String, String)]) -> Option<Rejection> {
        context_management::responses_rejection(body)
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
            Some("error"),
            &json!({"type": "error", "code": error_type, "message": message, "param": null,
                    "sequence_number": 0}),
        )
    }

    fn keep_alive(&self) -> Vec<u8> {
        b": keep-alive\n\n".to_vec()
    }

    fn garbage(&self) -> Vec<u8> {
        b"data: {not json\n\n".to_vec()
    }
}

/// What the Responses encoder knows of one block.
struct ResponsesBlock {
    output_index: usize,
    kind: ResponsesKind,
    /// Text, summary or arguments so far.
    text: String,
    /// For function calls: call id and name.
    call: Option<(String, String)>,
    done: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ResponsesKind {
    Message,
    Reasoning,
    Function,
    Compaction,
    /// An item given whole (the hosted tool search's `tool_search_call`, `tool_search_output`).
    Whole,
}

/// The OpenAI Responses stream of `events`: each block is an output item (in order of first
/// appearance), with the event sequence the API documents.
fn stream(events: &[LlmEvent]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut sequence = 0u64;
    let mut id = String::from("resp_mock");
    let mut model = String::from("mock-model");
    let mut blocks: HashMap<usize, ResponsesBlock> = HashMap::new();
    let mut items: Vec<Value> = Vec::new();
    let mut usage: Option<Usage> = None;
    let mut push = |out: &mut Vec<Segment>, kind: SegmentKind, mut data: Value| {
        let ty = data["type"].as_str().unwrap_or_default().to_owned();
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        out.push(Segment {
            bytes: sse(Some(&ty), &data),
            kind,
        });
    };
    let response_object = |id: &str, model: &str, status: &str, output: &[Value]| {
        json!({"id": id, "object": "response", "created_at": 0, "status": status,
               "model": model, "output": output, "error": null, "incomplete_details": null,
               "usage": null})
    };
    // The opening events of a new block's item; returns its output index.
    fn open(
        blocks: &mut HashMap<usize, ResponsesBlock>,
        items: &mut Vec<Value>,
        index: usize,
        kind: ResponsesKind,
        call: Option<(String, String)>,
    ) -> Option<(usize, Value, Option<Value>)> {
        if blocks.contains_key(&index) {
            return None;
        }
        let output_index = items.len();
        let (item, part) = match kind {
            ResponsesKind::Message => (
                json!({"type": "message", "id": format!("msg_{output_index}"),
                       "status": "in_progress", "role": "assistant", "content": []}),
                Some(json!({"type": "response.content_part.added",
                            "item_id": format!("msg_{output_index}"),
                            "output_index": output_index, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": []}})),
            ),
            ResponsesKind::Reasoning => (
                json!({"type": "reasoning", "id": format!("rs_{output_index}"), "summary": []}),
                Some(json!({"type": "response.reasoning_summary_part.added",
                            "item_id": format!("rs_{output_index}"),
                            "output_index": output_index, "summary_index": 0,
                            "part": {"type": "summary_text", "text": ""}})),
            ),
            ResponsesKind::Function => {
                let (call_id, name) = call.clone().unwrap_or_default();
                (
                    json!({"type": "function_call", "id": format!("fc_{output_index}"),
                           "call_id": call_id, "name": name, "arguments": "",
                           "status": "in_progress"}),
                    None,
                )
            }
            ResponsesKind::Compaction => (
                json!({"type": "compaction", "id": format!("cmp_{output_index}")}),
                None,
            ),
            // Never opened here: an item given whole has its own events.
            ResponsesKind::Whole => (Value::Null, None),
        };
        items.push(Value::Null);
        blocks.insert(
            index,
            ResponsesBlock {
                output_index,
                kind,
                text: String::new(),
                call,
                done: false,
            },
        );
        Some((
            output_index,
            json!({"type": "response.output_item.added", "output_index": output_index,
                   "item": item}),
            part,
        ))
    }
    for event in events {
        match event {
            LlmEvent::MessageStart { id: i, model: m } => {
                id.clone_from(i);
                model.clone_from(m);
                let response = response_object(&id, &model, "in_progress", &[]);
                push(
                    &mut out,
                    SegmentKind::Preamble,
                    json!({"type": "response.created", "response": response}),
                );
                push(
                    &mut out,
                    SegmentKind::Preamble,
                    json!({"type": "response.in_progress", "response": response}),
                );
            }
            LlmEvent::TextDelta { index, text }
            | LlmEvent::ThinkingDelta {
                index,
                thinking: text,
            } => {
                let kind = if matches!(event, LlmEvent::TextDelta { .. }) {
                    ResponsesKind::Message
                } else {
                    ResponsesKind::Reasoning
                };
                let mut bytes = Vec::new();
                if let Some((_, added, part)) = open(&mut blocks, &mut items, *index, kind, None) {
                    for data in std::iter::once(added).chain(part) {
                        push(&mut out, SegmentKind::Content, data);
                    }
                    // The announcements and the first delta are one content segment.
                    bytes = out.pop().map(|s| s.bytes).unwrap_or_default();
                    let added = out.pop().map(|s| s.bytes).unwrap_or_default();
                    bytes = [added, bytes].concat();
                }
                let Some(block) = blocks.get_mut(index) else {
                    continue;
                };
                block.text.push_str(text);
                let data = match block.kind {
                    ResponsesKind::Message => {
                        json!({"type": "response.output_text.delta",
                               "item_id": format!("msg_{}", block.output_index),
                               "output_index": block.output_index, "content_index": 0,
                               "delta": text, "logprobs": []})
                    }
                    _ => json!({"type": "response.reasoning_summary_text.delta",
                                "item_id": format!("rs_{}", block.output_index),
                                "output_index": block.output_index, "summary_index": 0,
                                "delta": text}),
                };
                push(&mut out, SegmentKind::Content, data);
                if let Some(last) = out.last_mut() {
                    bytes.extend_from_slice(&last.bytes);
                    last.bytes = bytes;
                }
            }
            LlmEvent::ToolCallStart {
                index,
                id: call_id,
                name,
            } => {
                if let Some((_, added, _)) = open(
                    &mut blocks,
                    &mut items,
                    *index,
                    ResponsesKind::Function,
                    Some((call_id.clone(), name.clone())),
                ) {
                    push(&mut out, SegmentKind::Content, added);
                }
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => {
                let Some(block) = blocks.get_mut(index) else {
                    continue;
                };
                block.text.push_str(partial_json);
                let data = json!({"type": "response.function_call_arguments.delta",
                                  "item_id": format!("fc_{}", block.output_index),
                                  "output_index": block.output_index, "delta": partial_json});
                push(&mut out, SegmentKind::Content, data);
            }
            LlmEvent::Reasoning {
                index,
                id: item_id,
                summary,
                encrypted_content,
            } => {
                if let Some((_, added, _)) = open(
                    &mut blocks,
                    &mut items,
                    *index,
                    ResponsesKind::Reasoning,
                    None,
                ) {
                    push(&mut out, SegmentKind::Content, added);
                }
                let Some(block) = blocks.get_mut(index) else {
                    continue;
                };
                block.done = true;
                let item = json!({"type": "reasoning", "id": item_id,
                                  "summary": summary.iter()
                                      .map(|t| json!({"type": "summary_text", "text": t}))
                                      .collect::<Vec<_>>(),
                                  "encrypted_content": encrypted_content});
                if let Some(slot) = items.get_mut(block.output_index) {
                    *slot = item.clone();
                }
                push(
                    &mut out,
                    SegmentKind::Other,
                    json!({"type": "response.output_item.done",
                           "output_index": block.output_index, "item": item}),
                );
            }
            LlmEvent::Compaction {
                index,
                id: item_id,
                encrypted_content,
            } => {
                if let Some((_, added, _)) = open(
                    &mut blocks,
                    &mut items,
                    *index,
                    ResponsesKind::Compaction,
                    None,
                ) {
                    push(&mut out, SegmentKind::Content, added);
                }
                let Some(block) = blocks.get_mut(index) else {
                    continue;
                };
                block.done = true;
                let id = item_id
                    .clone()
                    .unwrap_or_else(|| format!("cmp_{}", block.output_index));
                let item = json!({"type": "compaction", "id": id,
                                  "encrypted_content": encrypted_content});
                if let Some(slot) = items.get_mut(block.output_index) {
                    *slot = item.clone();
                }
                push(
                    &mut out,
                    SegmentKind::Other,
                    json!({"type": "response.output_item.done",
                           "output_index": block.output_index, "item": item}),
                );
            }
            // A scripted item of the format's own (`then_other_block` with a `tool_search_call`
            // or `tool_search_output`): `output_item.added` with it `in_progress`, then
            // `output_item.done` with it as given. Other formats' blocks have no place here.
            LlmEvent::OtherBlock { index, block } => {
                let is_item = block
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|ty| ty == "tool_search_call" || ty == "tool_search_output");
                if !is_item || blocks.contains_key(index) {
                    continue;
                }
                let output_index = items.len();
                items.push(block.clone());
                blocks.insert(
                    *index,
                    ResponsesBlock {
                        output_index,
                        kind: ResponsesKind::Whole,
                        text: String::new(),
                        call: None,
                        done: true,
                    },
                );
                let mut added = block.clone();
                if added.get("status").is_some() {
                    added["status"] = json!("in_progress");
                }
                push(
                    &mut out,
                    SegmentKind::Content,
                    json!({"type": "response.output_item.added",
                           "output_index": output_index, "item": added}),
                );
                push(
                    &mut out,
                    SegmentKind::Other,
                    json!({"type": "response.output_item.done",
                           "output_index": output_index, "item": block}),
                );
            }
            LlmEvent::BlockStop { index } => {
                let Some(block) = blocks.get_mut(index) else {
                    continue;
                };
                if block.done {
                    continue;
                }
                block.done = true;
                let n = block.output_index;
                let text = block.text.clone();
                let (closing, item) = match block.kind {
                    ResponsesKind::Message => {
                        let part = json!({"type": "output_text", "text": text, "annotations": []});
                        (
                            vec![
                                json!({"type": "response.output_text.done",
                                       "item_id": format!("msg_{n}"), "output_index": n,
                                       "content_index": 0, "text": text, "logprobs": []}),
                                json!({"type": "response.content_part.done",
                                       "item_id": format!("msg_{n}"), "output_index": n,
                                       "content_index": 0, "part": part}),
                            ],
                            json!({"type": "message", "id": format!("msg_{n}"),
                                   "status": "completed", "role": "assistant",
                                   "content": [part]}),
                        )
                    }
                    ResponsesKind::Reasoning => (
                        vec![
                            json!({"type": "response.reasoning_summary_text.done",
                                   "item_id": format!("rs_{n}"), "output_index": n,
                                   "summary_index": 0, "text": text}),
                            json!({"type": "response.reasoning_summary_part.done",
                                   "item_id": format!("rs_{n}"), "output_index": n,
                                   "summary_index": 0,
                                   "part": {"type": "summary_text", "text": text}}),
                        ],
                        json!({"type": "reasoning", "id": format!("rs_{n}"),
                               "summary": [{"type": "summary_text", "text": text}]}),
                    ),
                    // Sent whole when it came (`done` set): never reached.
                    ResponsesKind::Compaction | ResponsesKind::Whole => continue,
                    ResponsesKind::Function => {
                        let (call_id, name) = block.call.clone().unwrap_or_default();
                        (
                            vec![json!({"type": "response.function_call_arguments.done",
                                        "item_id": format!("fc_{n}"), "output_index": n,
                                        "arguments": text})],
                            json!({"type": "function_call", "id": format!("fc_{n}"),
                                   "call_id": call_id, "name": name, "arguments": text,
                                   "status": "completed"}),
                        )
                    }
                };
                for data in closing {
                    push(&mut out, SegmentKind::Other, data);
                }
                if let Some(slot) = items.get_mut(n) {
                    *slot = item.clone();
                }
                push(
                    &mut out,
                    SegmentKind::Other,
                    json!({"type": "response.output_item.done", "output_index": n,
                           "item": item}),
                );
            }
            LlmEvent::Usage(u) => usage = Some(*u),
            LlmEvent::MessageStop { stop_reason } => {
                let (ty, status, incomplete) = match stop_reason {
                    StopReason::MaxTokens => (
                        "response.incomplete",
                        "incomplete",
                        json!({"reason": "max_output_tokens"}),
                    ),
                    StopReason::ContentFilter | StopReason::Refusal => (
                        "response.incomplete",
                        "incomplete",
                        json!({"reason": "content_filter"}),
                    ),
                    _ => ("response.completed", "completed", Value::Null),
                };
                let mut response = response_object(&id, &model, status, &items);
                response["incomplete_details"] = incomplete;
                if let Some(u) = usage {
                    let input = u.total_input_tokens();
                    response["usage"] = json!({
                        "input_tokens": input,
                        "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
                        "output_tokens": u.output_tokens,
                        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                        "total_tokens": input.saturating_add(u.output_tokens)});
                }
                push(
                    &mut out,
                    SegmentKind::End,
                    json!({"type": ty, "response": response}),
                );
            }
            // Signatures, redacted thinking and unmodelled blocks have no Responses form.
            _ => {}
        }
    }
    out
}

/// A Responses object (`{"object":"response","output":[…]}`): reasoning items, one message
/// item per text block, function calls, in the response's order.
fn whole(response: &ModelResponse) -> Value {
    let output: Vec<Value> = response
        .message
        .content
        .iter()
        .enumerate()
        .filter_map(|(i, block)| match block {
            ContentBlock::Text { text } => Some(json!({
                "type": "message", "id": format!("msg_{i}"), "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]})),
            ContentBlock::Reasoning {
                id,
                summary,
                encrypted_content,
            } => Some(json!({
                "type": "reasoning", "id": id,
                "summary": summary.iter()
                    .map(|t| json!({"type": "summary_text", "text": t}))
                    .collect::<Vec<_>>(),
                "encrypted_content": encrypted_content})),
            ContentBlock::ToolUse { id, name, input } => Some(json!({
                "type": "function_call", "id": format!("fc_{i}"), "call_id": id,
                "name": name, "arguments": input.to_string(), "status": "completed"})),
            _ => None,
        })
        .collect();
    let (status, incomplete) = match &response.stop_reason {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter | StopReason::Refusal => {
            ("incomplete", json!({"reason": "content_filter"}))
        }
        _ => ("completed", Value::Null),
    };
    let usage = response.usage;
    let input = usage.total_input_tokens();
    json!({
        "id": response.id,
        "object": "response",
        "created_at": 0,
        "status": status,
        "incomplete_details": incomplete,
        "error": null,
        "model": response.model,
        "output": output,
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": input + usage.output_tokens,
        },
    })
}
