//! The mock server's side of Bedrock Converse: a scripted response as the AWS event stream
//! ConverseStream sends (`:event-type`, `:content-type: application/json`,
//! `:message-type: event` headers; payloads padded with a `p` field as Bedrock pads them),
//! exceptions as `:message-type: exception` messages, error answers as `{"message": …}` with
//! the type in `x-amzn-ErrorType`, the whole `Converse` response, and what Converse refuses.

use serde_json::{json, Value};

use crate::message::{ContentBlock, StopReason, Usage};
use crate::wire::eventstream::encode_message;
use crate::wire::{LlmEvent, ModelResponse};

use crate::message::Message;
use crate::message::{MediaSource, Role};
use crate::provider::mock::{MockFormat, Rejection, Route, Segment, SegmentKind};

use super::request::DOCUMENT_FORMATS;

/// The padding Bedrock adds to each event payload (its length varies; its content means
/// nothing).
const PADDING: &str = "abcdefghijklmnopqrstuvwxyzABCDEF";

fn event(name: &str, mut payload: Value) -> Vec<u8> {
    if let Value::Object(map) = &mut payload {
        map.insert("p".into(), json!(PADDING));
    }
    encode_message(
        &[
            (":event-type", name),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// The `stopReason` Converse sends for `reason`.
fn stop_reason(reason: &StopReason) -> String {
    match reason {
        StopReason::ContentFilter => "content_filtered".to_owned(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "end_turn".to_owned()),
    }
}

fn usage_json(usage: &Usage) -> Value {
    let total = usage
        .total_input_tokens()
        .saturating_add(usage.output_tokens);
    json!({
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": total,
        "cacheReadInputTokens": usage.cache_read_input_tokens,
        "cacheWriteInputTokens": usage.cache_creation_input_tokens,
    })
}

/// The body's segments for `events` (ending with `Usage` and `MessageStop` when complete).
pub(crate) fn encode(events: &[LlmEvent], usage: Usage) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut push = |kind: SegmentKind, bytes: Vec<u8>| out.push(Segment { bytes, kind });
    let mut last_usage = usage;
    let mut stop_sequence: Option<&str> = None;
    let delta = |index: &usize, delta: Value| {
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": delta}),
        )
    };
    for e in events {
        match e {
            LlmEvent::MessageStart { .. } => {
                push(
                    SegmentKind::Preamble,
                    event("messageStart", json!({"role": "assistant"})),
                );
            }
            LlmEvent::TextDelta { index, text } => {
                push(SegmentKind::Content, delta(index, json!({"text": text})));
            }
            LlmEvent::ThinkingDelta { index, thinking } => push(
                SegmentKind::Content,
                delta(index, json!({"reasoningContent": {"text": thinking}})),
            ),
            LlmEvent::SignatureDelta { index, signature } => push(
                SegmentKind::Content,
                delta(index, json!({"reasoningContent": {"signature": signature}})),
            ),
            LlmEvent::RedactedThinking { index, data } => push(
                SegmentKind::Content,
                delta(
                    index,
                    json!({"reasoningContent": {"redactedContent": data}}),
                ),
            ),
            LlmEvent::ToolCallStart { index, id, name } => push(
                SegmentKind::Content,
                event(
                    "contentBlockStart",
                    json!({"contentBlockIndex": index,
                           "start": {"toolUse": {"toolUseId": id, "name": name}}}),
                ),
            ),
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => push(
                SegmentKind::Content,
                delta(index, json!({"toolUse": {"input": partial_json}})),
            ),
            LlmEvent::BlockStop { index } => push(
                SegmentKind::Other,
                event("contentBlockStop", json!({"contentBlockIndex": index})),
            ),
            LlmEvent::Usage(u) => last_usage = *u,
            LlmEvent::StopSequence { sequence } => stop_sequence = Some(sequence),
            LlmEvent::MessageStop {
                stop_reason: reason,
            } => {
                let mut stop = json!({"stopReason": stop_reason(reason)});
                if let Some(sequence) = stop_sequence {
                    stop["additionalModelResponseFields"] = json!({"stop_sequence": sequence});
                }
                push(SegmentKind::End, event("messageStop", stop));
                push(
                    SegmentKind::End,
                    event(
                        "metadata",
                        json!({"usage": usage_json(&last_usage), "metrics": {"latencyMs": 0}}),
                    ),
                );
            }
            // Unmodelled blocks have no Converse form; retry and rate-limit events are the
            // client's, never the wire's.
            _ => {}
        }
    }
    out
}

/// The ConverseStream exception a scripted error type stands for (Bedrock's own names pass
/// as they are).
fn exception_name(error_type: &str) -> String {
    match error_type {
        "overloaded_error" | "overloaded" | "service_unavailable" => {
            "serviceUnavailableException".to_owned()
        }
        "rate_limit_error" | "rate_limit_exceeded" => "throttlingException".to_owned(),
        "api_error" | "server_error" | "internal_server_error" => {
            "internalServerException".to_owned()
        }
        "invalid_request_error" => "validationException".to_owned(),
        other => other.to_owned(),
    }
}

/// The bytes of an in-stream error: an exception message.
pub(crate) fn error_event(error_type: &str, message: &str) -> Vec<u8> {
    encode_message(
        &[
            (":exception-type", &exception_name(error_type)),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({"message": message}).to_string().as_bytes(),
    )
}

/// ConverseStream has no keep-alive.
pub(crate) fn keep_alive() -> Vec<u8> {
    Vec::new()
}

/// Bytes the client cannot decode: a well-framed delta whose payload is not JSON.
pub(crate) fn garbage() -> Vec<u8> {
    encode_message(
        &[
            (":event-type", "contentBlockDelta"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        b"{not json",
    )
}

/// The whole `Converse` response.
pub(crate) fn whole(response: &ModelResponse) -> Value {
    let content: Vec<Value> = response
        .message
        .content
        .iter()
        .filter_map(|block| {
            Some(match block {
                ContentBlock::Text { text } => json!({"text": text}),
                ContentBlock::Thinking {
                    thinking,
                    signature,
                } => json!({"reasoningContent": {"reasoningText":
                                {"text": thinking, "signature": signature}}}),
                ContentBlock::RedactedThinking { data } => {
                    json!({"reasoningContent": {"redactedContent": data}})
                }
                ContentBlock::ToolUse { id, name, input } => {
                    json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})
                }
                _ => return None,
            })
        })
        .collect();
    let mut body = json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason(&response.stop_reason),
        "usage": usage_json(&response.usage),
        "metrics": {"latencyMs": 0},
    });
    if let Some(sequence) = &response.stop_sequence {
        body["additionalModelResponseFields"] = json!({"stop_sequence": sequence});
    }
    body
}

/// The AWS exception a scripted error type stands for, by name and status.
fn error_shape(status: u16, error_type: &str) -> String {
    match error_type {
        "invalid_request_error" | "request_too_large" => "ValidationException",
        "authentication_error" => "UnrecognizedClientException",
        "permission_error" => "AccessDeniedException",
        "not_found_error" => "ResourceNotFoundException",
        "rate_limit_error" => "ThrottlingException",
        "overloaded_error" => "ServiceUnavailableException",
        "api_error" if status == 503 => "ServiceUnavailableException",
        "api_error" => "InternalServerException",
        other => return other.to_owned(),
    }
    .to_owned()
}

/// The error body of a refusal with `status` (`{"message": …}`), and the `x-amzn-ErrorType`
/// header that names it.
pub(crate) fn status_body(
    status: u16,
    error_type: &str,
    message: &str,
) -> (Value, Vec<(String, String)>) {
    let shape = error_shape(status, error_type);
    (
        json!({"message": message}),
        vec![(
            "x-amzn-ErrorType".to_owned(),
            format!("{shape}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        )],
    )
}

fn invalid(message: String) -> Option<Rejection> {
    Some(Rejection {
        error_type: "ValidationException",
        code: None,
        message,
    })
}

/// What Converse refuses in a request body, as it says so; `None` when it would take it.
pub(crate) fn rejection(body: &Value) -> Option<Rejection> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return invalid("1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null".to_owned());
    };
    let mut uses_tools = false;
    let mut cache_points = 0usize;
    let mut previous_role = "";
    for (i, message) in messages.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if i == 0 && role != "user" {
            return invalid(
                "A conversation must start with a user message. Try again with a conversation \
                 that starts with a user message."
                    .to_owned(),
            );
        }
        if role == previous_role {
            return invalid(
                "A conversation must alternate between user and assistant roles. Make sure the \
                 conversation alternates between user and assistant roles and try again."
                    .to_owned(),
            );
        }
        previous_role = role;
        let content = message
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if content.is_empty() {
            return invalid(format!(
                "The content field in the Message object at messages.{i} is empty. Add a \
                 ContentBlock object to the content field and try again."
            ));
        }
        for (j, block) in content.iter().enumerate() {
            let Some(map) = block.as_object().filter(|m| m.len() == 1) else {
                return invalid(format!(
                    "The ContentBlock object at messages.{i}.content.{j} must set exactly one \
                     of its members."
                ));
            };
            if let Some(text) = map.get("text") {
                if text.as_str().is_none_or(|t| t.trim().is_empty()) {
                    return invalid(format!(
                        "The text field in the ContentBlock object at messages.{i}.content.{j} \
                         is blank. Add text to the text field, and try again."
                    ));
                }
            }
            let result = map.get("toolResult").and_then(|r| r.get("content"));
            if let Some(parts) = result {
                let parts = parts.as_array().map(Vec::as_slice).unwrap_or_default();
                if parts.is_empty() {
                    return invalid(format!(
                        "The content field in the ToolResultBlock object at \
                         messages.{i}.content.{j}.toolResult is empty."
                    ));
                }
                if parts.iter().any(|p| {
                    p.get("text")
                        .is_some_and(|t| t.as_str().is_none_or(|t| t.trim().is_empty()))
                }) {
                    return invalid(format!(
                        "The text field in the ToolResultContentBlock object at \
                         messages.{i}.content.{j}.toolResult is blank. Add text to the text \
                         field, and try again."
                    ));
                }
            }
            if map.contains_key("toolUse") || map.contains_key("toolResult") {
                uses_tools = true;
            }
            if map.contains_key("cachePoint") {
                cache_points += 1;
            }
            if (map.contains_key("image") || map.contains_key("document")) && role != "user" {
                return invalid(format!(
                    "messages.{i}.content.{j}: images and documents are only allowed in user \
                     messages."
                ));
            }
        }
    }
    let tools = body.pointer("/toolConfig/tools").and_then(Value::as_array);
    if uses_tools && tools.is_none_or(|t| t.is_empty()) {
        return invalid(
            "The toolConfig field must be defined when using toolUse and toolResult content \
             blocks."
                .to_owned(),
        );
    }
    for (i, tool) in tools.into_iter().flatten().enumerate() {
        if tool.get("cachePoint").is_some() {
            cache_points += 1;
            continue;
        }
        let Some(spec) = tool.get("toolSpec") else {
            continue;
        };
        let name = spec.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return invalid(format!(
                "1 validation error detected: Value '{name}' at \
                 'toolConfig.tools.{i}.member.toolSpec.name' failed to satisfy constraint: \
                 Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+"
            ));
        }
        let schema = spec.pointer("/inputSchema/json");
        if schema.and_then(|s| s.get("type")).and_then(Value::as_str) != Some("object") {
            return invalid(format!(
                "The value at toolConfig.tools.{i}.toolSpec.inputSchema.json.type must be one \
                 of the following: object."
            ));
        }
    }
    for block in body
        .get("system")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if block.get("cachePoint").is_some() {
            cache_points += 1;
        }
        if block
            .get("text")
            .is_some_and(|t| t.as_str().is_none_or(str::is_empty))
        {
            return invalid("The text field in the SystemContentBlock is blank.".to_owned());
        }
    }
    if cache_points > 4 {
        return invalid(format!(
            "The number of cachePoint blocks in the request ({cache_points}) exceeds the \
             maximum of 4."
        ));
    }
    None
}

/// The mock side of Bedrock Converse: `{prefix}/model/{modelId}/converse-stream` (or `/converse`).
pub(crate) struct Mock;

impl MockFormat for Mock {
    fn route(&self, route: &Route<'_>) -> Option<bool> {
        let segments = &route.segments;
        matches!(route.last(), "converse-stream" | "converse").then(|| {
            route.well_formed
                && segments.len() >= 3
                && segments[segments.len() - 3] == "model"
                && !segments[..segments.len() - 3].contains(&"model")
        })
    }

    fn history(&self, body: &Value) -> Option<Vec<Message>> {
        Some(decode(body))
    }

    fn max_tokens_at(&self) -> &'static [&'static str] {
        &["/inferenceConfig/maxTokens"]
    }

    fn prompt_at(&self) -> &'static [&'static str] {
        &["/system", "/messages"]
    }

    fn refusal(&self, body: &Value, _headers: &[(String, String)]) -> Option<Rejection> {
        rejection(body)
    }

    fn not_found_type(&self) -> &'static str {
        "UnknownOperationException"
    }

    crate::provider::mock::by_functions!();
}

/// The conversation in a Converse request body: the inverse of [`encode`] for `messages`,
/// for the mock server's history check. Tolerant of any JSON (never panics): a missing field
/// reads as empty, `cachePoint` blocks are skipped, an unknown block is kept as
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
            let content = m
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|b| b.get("cachePoint").is_none())
                .map(decode_block)
                .collect();
            Message { role, content }
        })
        .collect()
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn decode_image(image: &Value) -> Option<MediaSource> {
    let format = image.get("format")?.as_str()?;
    let data = image.pointer("/source/bytes")?.as_str()?;
    Some(MediaSource::Base64 {
        media_type: format!("image/{format}"),
        data: data.to_owned(),
    })
}

fn decode_block(block: &Value) -> ContentBlock {
    if let Some(text) = block.get("text").and_then(Value::as_str) {
        return ContentBlock::text(text);
    }
    if let Some(tool) = block.get("toolUse") {
        return ContentBlock::ToolUse {
            id: str_at(tool, "/toolUseId").to_owned(),
            name: str_at(tool, "/name").to_owned(),
            input: tool.get("input").cloned().unwrap_or(Value::Null),
        };
    }
    if let Some(result) = block.get("toolResult") {
        let parts = result
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let content = parts
            .iter()
            .filter_map(|p| match (p.get("text"), p.get("json")) {
                (Some(Value::String(text)), _) => Some(text.clone()),
                (_, Some(json)) => Some(json.to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let images = parts
            .iter()
            .filter_map(|p| decode_image(p.get("image")?))
            .collect();
        let is_error = result.get("status").and_then(Value::as_str) == Some("error");
        return ContentBlock::tool_result_with_images(
            str_at(result, "/toolUseId"),
            content,
            is_error,
            images,
        );
    }
    if let Some(reasoning) = block.get("reasoningContent") {
        if let Some(data) = reasoning.get("redactedContent").and_then(Value::as_str) {
            return ContentBlock::RedactedThinking {
                data: data.to_owned(),
            };
        }
        if let Some(text) = reasoning.get("reasoningText") {
            return ContentBlock::Thinking {
                thinking: str_at(text, "/text").to_owned(),
                signature: str_at(text, "/signature").to_owned(),
            };
        }
    }
    if let Some(source) = block.get("image").and_then(decode_image) {
        return ContentBlock::Image { source };
    }
    if let Some(document) = block.get("document") {
        let format = str_at(document, "/format");
        let media_type = DOCUMENT_FORMATS
            .iter()
            .find(|(_, f)| *f == format)
            .map(|(t, _)| *t);
        if let (Some(media_type), Some(data)) = (
            media_type,
            document.pointer("/source/bytes").and_then(Value::as_str),
        ) {
            return ContentBlock::Document {
                source: MediaSource::Base64 {
                    media_type: media_type.to_owned(),
                    data: data.to_owned(),
                },
                title: document
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            };
        }
    }
    ContentBlock::Other(block.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{WireDecoder, WireFormat};

    #[test]
    fn a_scripted_stream_decodes_to_its_events() {
        let events = vec![
            LlmEvent::MessageStart {
                id: String::new(),
                model: String::new(),
            },
            LlmEvent::TextDelta {
                index: 0,
                text: "Hi".into(),
            },
            LlmEvent::BlockStop { index: 0 },
            LlmEvent::ToolCallStart {
                index: 1,
                id: "t".into(),
                name: "add".into(),
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: "{\"a\":1}".into(),
            },
            LlmEvent::BlockStop { index: 1 },
            LlmEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2,
                ..Usage::default()
            }),
            LlmEvent::MessageStop {
                stop_reason: StopReason::ToolUse,
            },
        ];
        let body: Vec<u8> = encode(&events, Usage::default())
            .into_iter()
            .flat_map(|s| s.bytes)
            .collect();
        let mut decoder = WireDecoder::new(WireFormat::Bedrock);
        let mut out = Vec::new();
        decoder.push(&body, &mut out).unwrap();
        decoder.finish(&mut out).unwrap();
        assert_eq!(out, events);
    }

    #[test]
    fn rejections_name_what_converse_refuses() {
        let ok = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
        assert_eq!(rejection(&ok), None);
        for (body, needle) in [
            (
                json!({"messages": [{"role": "user", "content": [{"text": ""}]}]}),
                "is blank",
            ),
            (
                json!({"messages": [{"role": "assistant", "content": [{"text": "x"}]}]}),
                "start with a user",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"toolResult": {"toolUseId": "a", "content": [{"text": "ok"}]}}]}]}),
                "toolConfig field must be defined",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "x"}]}],
                       "toolConfig": {"tools": [{"toolSpec": {"name": "t", "inputSchema": {"json": {"type": "string"}}}}]}}),
                "must be one of the following: object",
            ),
        ] {
            let refused = rejection(&body).expect("refused");
            assert!(refused.message.contains(needle), "{}", refused.message);
            assert_eq!(refused.error_type, "ValidationException");
        }
    }
}
