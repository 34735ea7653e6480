//! Encodes a [`ScriptedResponse`] into each provider's SSE body, as segments the mock server
//! can cut, chunk and interrupt.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::error::LlmError;
use crate::message::{StopReason, Usage};
use crate::wire::{LlmEvent, WireFormat};

use super::scripted::{Ending, ScriptedResponse, Step};
pub(crate) use super::segment::{Segment, SegmentKind};

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

/// The SSE bytes of an in-stream error event.
pub(crate) fn error_event(format: WireFormat, error_type: &str, message: &str) -> Vec<u8> {
    match format {
        WireFormat::Anthropic => sse(
            Some("error"),
            &json!({"type": "error", "error": {"type": error_type, "message": message}}),
        ),
        WireFormat::OpenAiResponses => sse(
            Some("error"),
            &json!({"type": "error", "code": error_type, "message": message, "param": null,
                    "sequence_number": 0}),
        ),
        WireFormat::Gemini => super::gemini::error_event(error_type, message),
        WireFormat::Bedrock => super::bedrock::error_event(error_type, message),
        WireFormat::Ollama => super::ollama::error_event(error_type, message),
        _ => sse(
            None,
            &json!({"error": {"message": message, "type": error_type, "code": null}}),
        ),
    }
}

/// The SSE bytes of a keep-alive.
pub(crate) fn keep_alive(format: WireFormat) -> Vec<u8> {
    match format {
        WireFormat::Anthropic => b"event: ping\ndata: {\"type\": \"ping\"}\n\n".to_vec(),
        WireFormat::Gemini => super::gemini::keep_alive(),
        WireFormat::Bedrock => super::bedrock::keep_alive(),
        WireFormat::Ollama => super::ollama::keep_alive(),
        _ => b": keep-alive\n\n".to_vec(),
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

pub(crate) fn sse(event: Option<&str>, data: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
    out
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
    let segments = match format {
        WireFormat::Anthropic => anthropic(&events, usage),
        WireFormat::OpenAiResponses => responses(&events),
        WireFormat::Gemini => super::gemini::encode(&events, usage),
        WireFormat::Bedrock => super::bedrock::encode(&events, usage),
        WireFormat::Ollama => super::ollama::encode(&events, usage),
        _ => openai(&events),
    };
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

fn anthropic(events: &[LlmEvent], usage: Usage) -> Vec<Segment> {
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

fn openai(events: &[LlmEvent]) -> Vec<Segment> {
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
                    let prompt = u.input_tokens.saturating_add(cached);
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
fn responses(events: &[LlmEvent]) -> Vec<Segment> {
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
                    let input = u.input_tokens.saturating_add(u.cache_read_input_tokens);
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

#[cfg(test)]
mod tests {
    use super::*;
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
