//! The mock server's side of Ollama's chat API: a scripted response as the NDJSON lines
//! Ollama sends (docs/api.md, "Generate a chat completion"), its errors (`{"error":"…"}`, as a
//! body and as a line), its whole (`"stream": false`) form, and what it refuses.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::message::{ContentBlock, StopReason, Usage};
use crate::wire::{LlmEvent, ModelResponse};

use crate::media::ImageFormat;
use crate::message::Message;
use crate::message::{MediaSource, Role};
use crate::provider::mock::{MockFormat, Rejection, Route, Segment, SegmentKind};

use super::request::ERROR_RESULT_PREFIX;

const CREATED_AT: &str = "2025-07-07T20:22:19.184789Z";

fn line(value: &Value) -> Vec<u8> {
    let mut bytes = value.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

fn chunk(model: &str, message: Value) -> Value {
    json!({"model": model, "created_at": CREATED_AT, "message": message, "done": false})
}

/// Ollama's `done_reason` for a stop reason.
fn done_reason(reason: &StopReason) -> String {
    match reason {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence => "stop".to_owned(),
        StopReason::MaxTokens => "length".to_owned(),
        StopReason::Other(other) => other.clone(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "stop".to_owned()),
    }
}

/// The last line's fields: done, the reason and the counts (Ollama counts the whole prompt it
/// evaluated as `prompt_eval_count`).
fn final_fields(out: &mut Map<String, Value>, reason: &StopReason, usage: Usage) {
    out.insert("done".into(), json!(true));
    out.insert("done_reason".into(), json!(done_reason(reason)));
    out.insert("total_duration".into(), json!(182_242_375u64));
    out.insert("load_duration".into(), json!(41_295_167u64));
    out.insert(
        "prompt_eval_count".into(),
        json!(usage.total_input_tokens()),
    );
    out.insert("prompt_eval_duration".into(), json!(24_573_166u64));
    out.insert("eval_count".into(), json!(usage.output_tokens));
    out.insert("eval_duration".into(), json!(115_959_084u64));
}

/// A tool call as Ollama sends it: arguments as a JSON object (or, when the scripted text is
/// not JSON, as that text: Ollama itself never sends such a call).
fn tool_call(id: &str, position: usize, name: &str, arguments: &str) -> Value {
    let arguments = serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| json!(arguments));
    json!({"id": id, "function": {"index": position, "name": name, "arguments": arguments}})
}

/// The body's lines for `events` (ending with `Usage` and `MessageStop` when complete). A tool
/// call goes out whole, in one line, when its block stops (or at the end).
pub(crate) fn encode(events: &[LlmEvent], usage: Usage) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut model = String::from("mock-model");
    let mut usage = usage;
    // Calls started and not sent yet: block index, id, name, arguments so far.
    let mut calls: Vec<(usize, String, String, String)> = Vec::new();
    let mut sent_calls = 0usize;
    let mut flush = |out: &mut Vec<Segment>,
                     model: &str,
                     calls: &mut Vec<(usize, String, String, String)>,
                     only: Option<usize>| {
        let mut keep = Vec::new();
        for (index, id, name, arguments) in calls.drain(..) {
            if only.is_some_and(|i| i != index) {
                keep.push((index, id, name, arguments));
                continue;
            }
            let call = tool_call(&id, sent_calls, &name, &arguments);
            sent_calls += 1;
            out.push(Segment {
                bytes: line(&chunk(
                    model,
                    json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                )),
                kind: SegmentKind::Content,
            });
        }
        *calls = keep;
    };
    for event in events {
        match event {
            LlmEvent::MessageStart { model: m, .. } => model.clone_from(m),
            LlmEvent::TextDelta { text, .. } => out.push(Segment {
                bytes: line(&chunk(
                    &model,
                    json!({"role": "assistant", "content": text}),
                )),
                kind: SegmentKind::Content,
            }),
            LlmEvent::ThinkingDelta { thinking, .. } => out.push(Segment {
                bytes: line(&chunk(
                    &model,
                    json!({"role": "assistant", "content": "", "thinking": thinking}),
                )),
                kind: SegmentKind::Content,
            }),
            LlmEvent::ToolCallStart { index, id, name } => {
                calls.push((*index, id.clone(), name.clone(), String::new()))
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => {
                if let Some(call) = calls.iter_mut().find(|c| c.0 == *index) {
                    call.3.push_str(partial_json);
                }
            }
            LlmEvent::BlockStop { index } => flush(&mut out, &model, &mut calls, Some(*index)),
            LlmEvent::Usage(u) => usage = *u,
            LlmEvent::MessageStop { stop_reason } => {
                flush(&mut out, &model, &mut calls, None);
                let mut last = Map::new();
                last.insert("model".into(), json!(model));
                last.insert("created_at".into(), json!(CREATED_AT));
                last.insert(
                    "message".into(),
                    json!({"role": "assistant", "content": ""}),
                );
                final_fields(&mut last, stop_reason, usage);
                out.push(Segment {
                    bytes: line(&Value::Object(last)),
                    kind: SegmentKind::End,
                });
            }
            // Signatures, redacted thinking, reasoning items and unmodelled blocks have no
            // Ollama form.
            _ => {}
        }
    }
    out
}

/// The line of an in-stream error: Ollama sends the message only (its type is not on the
/// wire; the client classifies the message).
pub(crate) fn error_event(_error_type: &str, message: &str) -> Vec<u8> {
    line(&json!({"error": message}))
}

/// Ollama sends no keep-alives.
pub(crate) fn keep_alive() -> Vec<u8> {
    Vec::new()
}

/// Bytes the client cannot decode.
pub(crate) fn garbage() -> Vec<u8> {
    b"{not json\n".to_vec()
}

/// The whole, non-streamed response (`"stream": false`).
pub(crate) fn whole(response: &ModelResponse) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), json!(response.message.text()));
    let thinking: String = response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    if !thinking.is_empty() {
        message.insert("thinking".into(), json!(thinking));
    }
    let calls: Vec<Value> = response
        .message
        .tool_uses()
        .enumerate()
        .map(|(i, (id, name, input))| {
            json!({"id": id, "function": {"index": i, "name": name, "arguments": input}})
        })
        .collect();
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(response.model));
    out.insert("created_at".into(), json!(CREATED_AT));
    out.insert("message".into(), Value::Object(message));
    final_fields(&mut out, &response.stop_reason, response.usage);
    Value::Object(out)
}

/// The error body of a refusal with `status`: `{"error":"<message>"}`.
pub(crate) fn status_body(
    _status: u16,
    _error_type: &str,
    message: &str,
) -> (Value, Vec<(String, String)>) {
    (json!({"error": message}), Vec::new())
}

fn refused(message: String) -> Option<Rejection> {
    Some(Rejection {
        error_type: "invalid_request_error",
        code: None,
        message,
    })
}

/// What Ollama refuses in a chat request body, as it says so (its Go types' JSON decoding and
/// its handler's checks); `None` when it would take it: no model; a message that is not an
/// object, with a role other than system, user, assistant or tool, content that is not a
/// string (or, for a tool message, no content), images that are not base64 strings, tool
/// calls whose arguments are not an object; `think` that is neither a boolean nor a level;
/// `options` that is not an object; `keep_alive` that is neither a number nor a string.
pub(crate) fn rejection(body: &Value) -> Option<Rejection> {
    if body
        .get("model")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return refused("model is required".to_owned());
    }
    if let Some(messages) = body.get("messages").filter(|m| !m.is_null()) {
        let Some(messages) = messages.as_array() else {
            return refused(
                "json: cannot unmarshal object into Go struct field ChatRequest.messages of \
                 type []api.Message"
                    .to_owned(),
            );
        };
        for (i, m) in messages.iter().enumerate() {
            if let Some(refusal) = message_rejection(i, m) {
                return Some(refusal);
            }
        }
    }
    match body.get("think") {
        None | Some(Value::Null | Value::Bool(_)) => {}
        Some(Value::String(level))
            if matches!(level.as_str(), "low" | "medium" | "high" | "max") => {}
        Some(other) => {
            return refused(format!(
                "invalid think value: {other} (must be \"high\", \"medium\", \"low\", \"max\", \
                 true, or false)"
            ))
        }
    }
    if body
        .get("options")
        .is_some_and(|o| !o.is_null() && !o.is_object())
    {
        return refused(
            "json: cannot unmarshal into Go struct field ChatRequest.options of type \
             map[string]interface {}"
                .to_owned(),
        );
    }
    if body
        .get("keep_alive")
        .is_some_and(|k| !(k.is_null() || k.is_number() || k.is_string()))
    {
        return refused("invalid keep_alive: must be a number or a duration string".to_owned());
    }
    None
}

fn message_rejection(i: usize, m: &Value) -> Option<Rejection> {
    let Some(m) = m.as_object() else {
        return refused(format!("messages[{i}]: a message must be an object"));
    };
    let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
    if !matches!(
        role.to_ascii_lowercase().as_str(),
        "system" | "user" | "assistant" | "tool"
    ) {
        return refused(format!(
            "messages[{i}]: invalid role {role:?} (system, user, assistant or tool)"
        ));
    }
    match m.get("content") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) if role != "tool" => {}
        None | Some(Value::Null) => {
            return refused(format!("messages[{i}]: a tool message needs its content"))
        }
        Some(_) => {
            return refused(format!(
                "json: cannot unmarshal into Go struct field Message.messages.content of type \
                 string (messages[{i}])"
            ))
        }
    }
    if let Some(images) = m.get("images").filter(|v| !v.is_null()) {
        let ok = images.as_array().is_some_and(|images| {
            images.iter().all(|image| {
                image.as_str().is_some_and(|data| {
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .is_ok()
                })
            })
        });
        if !ok {
            return refused(format!(
                "messages[{i}]: illegal base64 data in images (bare base64 strings, no data: \
                 URL)"
            ));
        }
    }
    if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
        let ok = calls.as_array().is_some_and(|calls| {
            calls.iter().all(|call| {
                call.pointer("/function/name").is_some_and(Value::is_string)
                    && call
                        .pointer("/function/arguments")
                        .is_none_or(|a| a.is_object())
            })
        });
        if !ok {
            return refused(format!(
                "messages[{i}]: a tool call needs a function name and arguments that are a \
                 JSON object"
            ));
        }
    }
    None
}

/// The mock side of Ollama's chat API: `{prefix}/api/chat`.
pub(crate) struct Mock;

impl MockFormat for Mock {
    fn route(&self, route: &Route<'_>) -> Option<bool> {
        route.ends(&["api", "chat"], &["api", "chat"])
    }

    fn history(&self, body: &Value) -> Option<Vec<Message>> {
        Some(decode(body))
    }

    fn max_tokens_at(&self) -> &'static [&'static str] {
        &["/options/num_predict"]
    }

    fn prompt_at(&self) -> &'static [&'static str] {
        &["/messages"]
    }

    fn refusal(&self, body: &Value, _headers: &[(String, String)]) -> Option<Rejection> {
        rejection(body)
    }

    crate::provider::mock::by_functions!();
}

/// The conversation in an Ollama request body, in the crate's shape: the inverse of
/// [`encode`] for `messages`, for the mock server's history check. Tolerant of any JSON
/// (never panics).
///
/// System messages are left out. Calls keep their `id` when the body has one, else get
/// `call_<n>`, `n` counting the calls of the whole body. A `tool` message with a
/// `tool_call_id` answers that call; the others after an assistant message answer its calls
/// in order, the first the first call (one whose `tool_name` is not the name of the call in
/// its place gets an id that answers nothing, so the history check reports it); they and the user message
/// after them form one user message, results first, as [`encode`] split it. A result whose
/// content starts with [`ERROR_RESULT_PREFIX`] reads as an error result without it.
pub(super) fn decode(body: &Value) -> Vec<Message> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<Message> = Vec::new();
    let mut next_call = 0usize;
    // The calls of the last assistant message not answered yet, in order.
    let mut pending: std::collections::VecDeque<(String, String)> = Default::default();
    let text = |m: &Value| {
        m.get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    for m in messages {
        match m.get("role").and_then(Value::as_str).unwrap_or_default() {
            "assistant" => {
                pending.clear();
                let mut content = Vec::new();
                if let Some(thinking) = m.get("thinking").and_then(Value::as_str) {
                    if !thinking.is_empty() {
                        content.push(ContentBlock::Thinking {
                            thinking: thinking.to_owned(),
                            signature: String::new(),
                        });
                    }
                }
                let body_text = text(m);
                if !body_text.is_empty() {
                    content.push(ContentBlock::text(body_text));
                }
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    // The call's own id when the body carries call ids, else one by position.
                    let id = call
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| format!("call_{next_call}"), str::to_owned);
                    next_call += 1;
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    let input = call
                        .pointer("/function/arguments")
                        .cloned()
                        .unwrap_or(Value::Null);
                    pending.push_back((id.clone(), name.clone()));
                    content.push(ContentBlock::ToolUse { id, name, input });
                }
                out.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => {
                let content = text(m);
                let (content, is_error) = match content.strip_prefix(ERROR_RESULT_PREFIX) {
                    Some(rest) => (rest.to_owned(), true),
                    None => (content, false),
                };
                let name = m.get("tool_name").and_then(Value::as_str);
                let by_id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty());
                let id = match by_id {
                    // Answered by id: the history check sees whether it answers a call, once
                    // and in order.
                    Some(id) => {
                        pending.retain(|(pending, _)| pending != id);
                        id.to_owned()
                    }
                    None => match pending.pop_front() {
                        Some((id, call_name)) if name.is_none_or(|n| n == call_name) => id,
                        Some((_, call_name)) => format!(
                            "unmatched result of `{}` where `{call_name}` was called",
                            name.unwrap_or_default()
                        ),
                        None => format!(
                            "unmatched result of `{}` (no call left to answer)",
                            name.unwrap_or_default()
                        ),
                    },
                };
                let images = decode_images(m);
                let result = ContentBlock::tool_result_with_images(id, content, is_error, images);
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
                let mut content = Vec::new();
                let body_text = text(m);
                if !body_text.is_empty() {
                    content.push(ContentBlock::text(body_text));
                }
                content.extend(
                    decode_images(m)
                        .into_iter()
                        .map(|source| ContentBlock::Image { source }),
                );
                match out.last_mut() {
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

/// A message's `images` as base64 sources, their media type read from their first bytes
/// (PNG when unknown).
fn decode_images(m: &Value) -> Vec<MediaSource> {
    use base64::Engine as _;
    m.get("images")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .map(|data| {
            let head: String = data.chars().take(32).collect();
            let format = base64::engine::general_purpose::STANDARD
                .decode(head.as_bytes())
                .ok()
                .and_then(|bytes| ImageFormat::sniff(&bytes));
            MediaSource::Base64 {
                media_type: format
                    .map_or("image/png", ImageFormat::media_type)
                    .to_owned(),
                data: data.to_owned(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedResponse;
    use crate::wire::{WireDecoder, WireFormat};

    fn decode(body: &[u8]) -> Result<Vec<LlmEvent>, crate::error::LlmError> {
        let mut decoder = WireDecoder::new(WireFormat::Ollama);
        let mut events = Vec::new();
        decoder.push(body, &mut events)?;
        decoder.finish(&mut events)?;
        Ok(events)
    }

    #[test]
    fn a_scripted_response_goes_out_as_ollama_lines_and_comes_back() {
        let response = ScriptedResponse::thinking("hmm", "sig")
            .then_text("Hello")
            .then_tool_call("call_1", "add", json!({"a": 1}))
            .then_tool_call("call_2", "add", json!({"a": 2}))
            .chunked(3)
            .usage_tokens(10, 5);
        let (segments, _) = crate::testing::sse::encode(WireFormat::Ollama, &response);
        // Text and thinking in pieces, each call whole in one line, one end line.
        let lines: Vec<Value> = segments
            .iter()
            .map(|s| serde_json::from_slice(&s.bytes).unwrap())
            .collect();
        assert!(segments.iter().all(|s| s.bytes.ends_with(b"\n")));
        assert_eq!(
            lines[lines.len() - 2]["message"]["tool_calls"][0],
            json!({"id": "call_2", "function": {"index": 1, "name": "add", "arguments": {"a": 2}}})
        );
        let last = lines.last().unwrap();
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "stop");
        assert_eq!(last["prompt_eval_count"], 10);
        assert_eq!(last["eval_count"], 5);
        let body: Vec<u8> = segments.iter().flat_map(|s| s.bytes.clone()).collect();
        let events = decode(&body).unwrap();
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                LlmEvent::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Hello");
        let calls: Vec<(&str, &str)> = events
            .iter()
            .filter_map(|e| match e {
                LlmEvent::ToolCallStart { id, name, .. } => Some((id.as_str(), name.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(calls, [("call_1", "add"), ("call_2", "add")]);
        assert_eq!(
            events.last(),
            Some(&LlmEvent::MessageStop {
                stop_reason: StopReason::ToolUse
            })
        );
        // The whole form says the same.
        let whole = crate::testing::whole::encode(WireFormat::Ollama, &response).unwrap();
        let mut events = Vec::new();
        WireDecoder::new(WireFormat::Ollama)
            .decode_json(whole.to_string().as_bytes(), &mut events)
            .unwrap();
        assert!(events.contains(&LlmEvent::ToolCallDelta {
            index: 3,
            partial_json: r#"{"a":2}"#.into()
        }));
        assert_eq!(
            error_event("overloaded_error", "busy"),
            b"{\"error\":\"busy\"}\n"
        );
        assert_eq!(
            status_body(500, "api_error", "boom").0,
            json!({"error": "boom"})
        );
    }

    #[test]
    fn what_ollama_refuses() {
        let ok = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi", "images": ["iVBORw0KGgo="]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "f", "arguments": {"x": 1}}}]},
            {"role": "tool", "content": "1", "tool_name": "f"}],
            "think": "high", "options": {"num_ctx": 1}, "keep_alive": "5m"});
        assert_eq!(rejection(&ok), None);
        let with = |pointer: &str, value: Value| {
            let mut body = ok.clone();
            *body.pointer_mut(pointer).unwrap() = value;
            body
        };
        for bad in [
            with("/model", json!("")),
            with("/messages/0/role", json!("developer")),
            with(
                "/messages/0/content",
                json!([{"type": "text", "text": "hi"}]),
            ),
            with(
                "/messages/0/images/0",
                json!("data:image/png;base64,iVBORw0KGgo="),
            ),
            with(
                "/messages/1/tool_calls/0/function/arguments",
                json!("{\"x\":1}"),
            ),
            with("/messages/2", json!({"role": "tool", "tool_name": "f"})),
            with("/think", json!("extreme")),
            with("/options", json!([1])),
            with("/keep_alive", json!({"minutes": 5})),
        ] {
            assert!(rejection(&bad).is_some(), "{bad}");
        }
    }
}
