//! The mock server's side of the Gemini format: a scripted response as the SSE chunks
//! `streamGenerateContent?alt=sse` sends (each a whole `GenerateContentResponse`, no event
//! name, the last with `finishReason` and `usageMetadata`), Google's error bodies, the whole
//! (`generateContent`) form, and what the real API refuses.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::message::{ContentBlock, StopReason, Usage};
use crate::wire::{LlmEvent, ModelResponse};

use crate::message::Message;
use crate::message::{MediaSource, Role};
use crate::provider::mock::{MockFormat, Rejection, Route, Segment, SegmentKind};

use super::decode::GENERATED_ID_PREFIX;

/// One SSE event as Gemini writes it, with CRLF line ends (kept apart from the crate's
/// `SseFrame`, which writes LF, so that the decoder meets both).
fn data(value: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.extend_from_slice(value.to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// Gemini's `finishReason` for a stop reason.
fn finish_reason(reason: &StopReason) -> String {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence | StopReason::ToolUse => "STOP".into(),
        StopReason::MaxTokens => "MAX_TOKENS".into(),
        StopReason::ContentFilter | StopReason::Refusal => "SAFETY".into(),
        StopReason::Other(other) => other.clone(),
        _ => "OTHER".into(),
    }
}

/// `usageMetadata` for a usage (the inverse of the decoder's mapping).
fn usage_metadata(usage: &Usage) -> Value {
    let prompt = usage
        .input_tokens
        .saturating_add(usage.cache_read_input_tokens)
        .saturating_add(usage.cache_creation_input_tokens);
    let thoughts = usage.reasoning_tokens.min(usage.output_tokens);
    let candidates = usage.output_tokens - thoughts;
    let mut meta = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt.saturating_add(usage.output_tokens),
    });
    if usage.cache_read_input_tokens > 0 {
        meta["cachedContentTokenCount"] = json!(usage.cache_read_input_tokens);
    }
    if thoughts > 0 {
        meta["thoughtsTokenCount"] = json!(thoughts);
    }
    meta
}

/// What the encoder knows of one scripted block.
#[derive(Default)]
struct Block {
    thinking: bool,
    /// Thinking text was sent for it.
    thought_text: bool,
    call: Option<(String, String, String)>,
}

/// The body's segments for `events` (ending with `Usage` and `MessageStop` when complete).
pub(crate) fn encode(events: &[LlmEvent], usage: Usage) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut id = String::from("mock-response");
    let mut model = String::from("mock-model");
    let mut blocks: HashMap<usize, Block> = HashMap::new();
    // A signature waiting for the part after it.
    let mut pending: Option<String> = None;
    let mut last_usage = usage;
    let chunk = |id: &str, model: &str, parts: Vec<Value>| {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
               "responseId": id, "modelVersion": model})
    };
    let with_pending = |pending: &mut Option<String>, mut part: Value| {
        if let Some(signature) = pending.take() {
            part["thoughtSignature"] = Value::String(signature);
        }
        part
    };
    for event in events {
        match event {
            LlmEvent::MessageStart { id: i, model: m } => {
                id.clone_from(i);
                model.clone_from(m);
            }
            LlmEvent::TextDelta { text, .. } => {
                let part = with_pending(&mut pending, json!({ "text": text }));
                out.push(Segment {
                    bytes: data(&chunk(&id, &model, vec![part])),
                    kind: SegmentKind::Content,
                });
            }
            LlmEvent::ThinkingDelta { index, thinking } => {
                let block = blocks.entry(*index).or_default();
                block.thinking = true;
                block.thought_text = true;
                out.push(Segment {
                    bytes: data(&chunk(
                        &id,
                        &model,
                        vec![json!({"text": thinking, "thought": true})],
                    )),
                    kind: SegmentKind::Content,
                });
            }
            LlmEvent::SignatureDelta { index, signature } => {
                let block = blocks.entry(*index).or_default();
                block.thinking = true;
                if block.thought_text {
                    out.push(Segment {
                        bytes: data(&chunk(
                            &id,
                            &model,
                            vec![json!({"text": "", "thought": true,
                                        "thoughtSignature": signature})],
                        )),
                        kind: SegmentKind::Content,
                    });
                } else {
                    pending.get_or_insert_with(String::new).push_str(signature);
                }
            }
            LlmEvent::ToolCallStart {
                index,
                id: call,
                name,
            } => {
                blocks.entry(*index).or_default().call =
                    Some((call.clone(), name.clone(), String::new()));
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => {
                if let Some((_, _, args)) = blocks.entry(*index).or_default().call.as_mut() {
                    args.push_str(partial_json);
                }
            }
            LlmEvent::BlockStop { index } => {
                let Some((call, name, args)) = blocks.get_mut(index).and_then(|b| b.call.take())
                else {
                    continue;
                };
                // Gemini sends whole calls; arguments that are not JSON go as a string, which
                // the client reports as invalid.
                let args = serde_json::from_str::<Value>(&args).unwrap_or(Value::String(args));
                let part = with_pending(
                    &mut pending,
                    json!({"functionCall": {"id": call, "name": name, "args": args}}),
                );
                out.push(Segment {
                    bytes: data(&chunk(&id, &model, vec![part])),
                    kind: SegmentKind::Content,
                });
            }
            LlmEvent::Usage(u) => last_usage = *u,
            LlmEvent::MessageStop { stop_reason } => {
                let part = with_pending(&mut pending, json!({"text": ""}));
                let mut last = chunk(&id, &model, vec![part]);
                last["candidates"][0]["finishReason"] = Value::String(finish_reason(stop_reason));
                last["usageMetadata"] = usage_metadata(&last_usage);
                out.push(Segment {
                    bytes: data(&last),
                    kind: SegmentKind::End,
                });
            }
            // Redacted thinking, reasoning items and unmodelled blocks have no Gemini form.
            _ => {}
        }
    }
    out
}

/// The bytes of an in-stream error: Google's error object as one event.
pub(crate) fn error_event(error_type: &str, message: &str) -> Vec<u8> {
    let (body, _) = status_body(0, error_type, message);
    data(&body)
}

/// Gemini sends no keep-alives.
pub(crate) fn keep_alive() -> Vec<u8> {
    Vec::new()
}

/// Bytes the client cannot decode: an event whose data is not JSON.
pub(crate) fn garbage() -> Vec<u8> {
    b"data: {not json\r\n\r\n".to_vec()
}

/// The whole, non-streamed response (`generateContent`).
pub(crate) fn whole(response: &ModelResponse) -> Value {
    let mut parts = Vec::new();
    let mut pending: Option<&str> = None;
    let push = |parts: &mut Vec<Value>, pending: &mut Option<&str>, mut part: Value| {
        if let Some(signature) = pending.take() {
            part["thoughtSignature"] = Value::String(signature.to_owned());
        }
        parts.push(part);
    };
    let mut calls = false;
    for block in &response.message.content {
        match block {
            ContentBlock::Text { text } => push(&mut parts, &mut pending, json!({ "text": text })),
            ContentBlock::Thinking {
                thinking,
                signature,
            } if thinking.is_empty() => {
                pending = Some(signature.as_str())
                    .filter(|s| !s.is_empty())
                    .or(pending);
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => {
                let mut part = json!({"text": thinking, "thought": true});
                if !signature.is_empty() {
                    part["thoughtSignature"] = json!(signature);
                }
                parts.push(part);
            }
            ContentBlock::ToolUse { id, name, input } => {
                calls = true;
                push(
                    &mut parts,
                    &mut pending,
                    json!({"functionCall": {"id": id, "name": name, "args": input}}),
                );
            }
            _ => {}
        }
    }
    if let Some(signature) = pending {
        parts.push(json!({"text": "", "thoughtSignature": signature}));
    }
    let reason = match &response.stop_reason {
        StopReason::ToolUse if calls => "STOP".to_owned(),
        other => finish_reason(other),
    };
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason,
                        "index": 0}],
        "usageMetadata": usage_metadata(&response.usage),
        "modelVersion": response.model,
        "responseId": response.id,
    })
}

/// Google's status name for an HTTP status.
fn status_name(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        500 => "INTERNAL",
        503 | 529 => "UNAVAILABLE",
        _ => "UNKNOWN",
    }
}

/// The HTTP status of a Google status name.
fn status_code(name: &str) -> u16 {
    match name {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "RESOURCE_EXHAUSTED" => 429,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => 500,
    }
}

/// The error body of a refusal with `status`: `{"error": {"code", "message", "status"}}`. A
/// Google status name (`RESOURCE_EXHAUSTED`) as the error type is kept; another type (the
/// mock's provider-neutral `rate_limit_error` …) becomes the status's name. For an in-stream
/// error (`status` 0), the code is the status name's.
pub(crate) fn status_body(
    status: u16,
    error_type: &str,
    message: &str,
) -> (Value, Vec<(String, String)>) {
    let is_google = !error_type.is_empty()
        && error_type
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_');
    let name = if is_google {
        error_type.to_owned()
    } else if status == 0 {
        match crate::error::transient_kind(error_type) {
            Some(crate::error::Transient::RateLimited) => "RESOURCE_EXHAUSTED".to_owned(),
            Some(crate::error::Transient::Overloaded) => "UNAVAILABLE".to_owned(),
            Some(crate::error::Transient::Server) => "INTERNAL".to_owned(),
            None => "INVALID_ARGUMENT".to_owned(),
        }
    } else {
        status_name(status).to_owned()
    };
    let code = if status == 0 {
        status_code(&name)
    } else {
        status
    };
    (
        json!({"error": {"code": code, "message": message, "status": name}}),
        Vec::new(),
    )
}

fn invalid(message: String) -> Option<Rejection> {
    Some(Rejection {
        error_type: "INVALID_ARGUMENT",
        code: None,
        message,
    })
}

/// What the real API refuses in a request body, as it says so; `None` when it would take it:
/// function declarations with an invalid name, with both `parameters` and
/// `parametersJsonSchema`, with a `parametersJsonSchema` that is not an object schema, or with
/// OpenAPI `parameters` carrying JSON Schema keywords the Schema type does not have; contents
/// without parts; a function-response turn that does not follow a function-call turn with as
/// many calls; a function-call turn that follows neither a user turn nor a function-response
/// turn; inline data of a type Gemini does not read.
pub(crate) fn rejection(body: &Value) -> Option<Rejection> {
    declarations(body).or_else(|| contents(body))
}

fn declarations(body: &Value) -> Option<Rejection> {
    let tools = body.get("tools")?.as_array()?;
    for (t, tool) in tools.iter().enumerate() {
        let Some(declarations) = tool.get("functionDeclarations").and_then(Value::as_array) else {
            continue;
        };
        for (d, declaration) in declarations.iter().enumerate() {
            let at = format!("tools[{t}].function_declarations[{d}]");
            let name = declaration
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
            if !valid_name {
                return invalid(format!(
                    "* GenerateContentRequest.{at}.name: Invalid function name. Must start with \
                     a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores \
                     (_), dots (.), colons (:) or dashes (-), with a maximum length of 64."
                ));
            }
            let json_schema = declaration.get("parametersJsonSchema");
            let parameters = declaration.get("parameters");
            if json_schema.is_some() && parameters.is_some() {
                return invalid(format!(
                    "* GenerateContentRequest.{at}: parameters and parameters_json_schema are \
                     mutually exclusive."
                ));
            }
            if let Some(schema) = json_schema {
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return invalid(format!(
                        "* GenerateContentRequest.{at}.parameters_json_schema: the schema must \
                         describe an object (\"type\": \"object\")."
                    ));
                }
            }
            if let Some(schema) = parameters {
                if let Some(refused) = openapi_schema(schema, &format!("{at}.parameters")) {
                    return Some(refused);
                }
            }
        }
    }
    None
}

/// The OpenAPI-subset `Schema` of `parameters`: JSON Schema keywords it lacks are unknown
/// fields, a type array is not a type, and an object needs properties.
fn openapi_schema(schema: &Value, at: &str) -> Option<Rejection> {
    let map = schema.as_object()?;
    for key in [
        "$schema",
        "$ref",
        "$defs",
        "definitions",
        "const",
        "oneOf",
        "allOf",
        "additionalProperties",
    ] {
        if map.contains_key(key) {
            return invalid(format!(
                "Invalid JSON payload received. Unknown name \"{key}\" at \
                 'GenerateContentRequest.{at}': Cannot find field."
            ));
        }
    }
    if let Some(ty) = map.get("type") {
        if !ty.is_string() {
            return invalid(format!(
                "Invalid JSON payload received. Invalid value at 'GenerateContentRequest.{at}.type'"
            ));
        }
        if ty
            .as_str()
            .is_some_and(|t| t.eq_ignore_ascii_case("object"))
            && map
                .get("properties")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty)
        {
            return invalid(format!(
                "* GenerateContentRequest.{at}.properties: should be non-empty for OBJECT type"
            ));
        }
    }
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            if let Some(refused) = openapi_schema(property, &format!("{at}.properties[{name}]")) {
                return Some(refused);
            }
        }
    }
    if let Some(items) = map.get("items") {
        return openapi_schema(items, &format!("{at}.items"));
    }
    None
}

fn contents(body: &Value) -> Option<Rejection> {
    let contents = body.get("contents")?.as_array()?;
    let count = |content: &Value, key: &str| {
        content
            .get("parts")
            .and_then(Value::as_array)
            .map_or(0, |parts| {
                parts.iter().filter(|p| p.get(key).is_some()).count()
            })
    };
    for (i, content) in contents.iter().enumerate() {
        let parts = content.get("parts").and_then(Value::as_array);
        if parts.is_none_or(Vec::is_empty) {
            return invalid(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            ));
        }
        for (j, part) in parts.into_iter().flatten().enumerate() {
            let mime = part
                .get("inlineData")
                .and_then(|d| d.get("mimeType"))
                .and_then(Value::as_str);
            if let Some(mime) = mime {
                let known = mime.starts_with("image/")
                    && !matches!(mime, "image/gif" | "image/svg+xml" | "image/bmp")
                    || mime == "application/pdf"
                    || mime.starts_with("audio/")
                    || mime.starts_with("video/")
                    || mime.starts_with("text/");
                if !known {
                    return invalid(format!(
                        "* GenerateContentRequest.contents[{i}].parts[{j}].inline_data: \
                         Unsupported MIME type: {mime}"
                    ));
                }
            }
        }
        let previous = i.checked_sub(1).and_then(|p| contents.get(p));
        let responses = count(content, "functionResponse");
        if responses > 0 {
            let calls = previous.map_or(0, |p| count(p, "functionCall"));
            let after_calls = previous
                .is_some_and(|p| p.get("role").and_then(Value::as_str) == Some("model"))
                && calls > 0;
            if !after_calls {
                return invalid(
                    "Please ensure that function response turn comes immediately after a \
                     function call turn."
                        .to_owned(),
                );
            }
            if calls != responses {
                return invalid(
                    "Please ensure that the number of function response parts is equal to the \
                     number of function call parts of the function call turn."
                        .to_owned(),
                );
            }
        }
        if count(content, "functionCall") > 0 {
            let ok =
                previous.is_some_and(|p| p.get("role").and_then(Value::as_str) != Some("model"));
            if !ok {
                return invalid(
                    "Please ensure that function call turn comes immediately after a user turn \
                     or after a function response turn."
                        .to_owned(),
                );
            }
        }
    }
    None
}

/// The mock side of Gemini: `{prefix}/{version}/models/{model}:{method}` and Vertex AI's paths.
pub(crate) struct Mock;

impl MockFormat for Mock {
    fn route(&self, route: &Route<'_>) -> Option<bool> {
        let last = route.last();
        (last.ends_with(":streamGenerateContent") || last.ends_with(":generateContent"))
            .then(|| route.well_formed && serves(&route.segments))
    }

    /// The model is in the path (`…/models/{model}:…`).
    fn requested_model(&self, route: &str, _body: &Value) -> Option<String> {
        let (_, rest) = route.split_once("/models/")?;
        let model = rest.split([':', '/']).next().unwrap_or(rest);
        (!model.is_empty()).then(|| model.to_owned())
    }

    fn history(&self, body: &Value) -> Option<Vec<Message>> {
        Some(decode(body))
    }

    fn max_tokens_at(&self) -> &'static [&'static str] {
        &["/generationConfig/maxOutputTokens"]
    }

    fn prompt_at(&self) -> &'static [&'static str] {
        &["/systemInstruction", "/contents"]
    }

    fn refusal(&self, body: &Value, _headers: &[(String, String)]) -> Option<Rejection> {
        rejection(body)
    }

    fn not_found_type(&self) -> &'static str {
        "NOT_FOUND"
    }

    crate::provider::mock::by_functions!();
}

/// The conversation a request body carries (the mock server checks the history invariant on
/// it): the inverse of [`encode`]. Calls without an id get `gemini_call_{n}`, and a
/// `functionResponse` without an id answers the earliest unanswered call of the same name in
/// the content before it (as Gemini matches them); one that answers none gets an id no call
/// has, so the history check reports it.
pub(super) fn decode(body: &Value) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut generated = 0usize;
    // The calls of the latest model content not yet answered: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for content in contents {
        let role = if content.get("role").and_then(Value::as_str) == Some("model") {
            Role::Assistant
        } else {
            Role::User
        };
        if role == Role::Assistant {
            pending.clear();
        }
        let mut blocks = Vec::new();
        let parts = content
            .get("parts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for part in parts {
            let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
            let signature = text(part.get("thoughtSignature"));
            let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
            if !signature.is_empty() && !thought {
                blocks.push(ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: signature.clone(),
                });
            }
            if let Some(call) = part.get("functionCall") {
                let id = match call.get("id").and_then(Value::as_str) {
                    Some(id) => id.to_owned(),
                    None => {
                        generated += 1;
                        format!("{GENERATED_ID_PREFIX}{generated}")
                    }
                };
                let name = text(call.get("name"));
                pending.push((id.clone(), name.clone()));
                blocks.push(ContentBlock::ToolUse {
                    id,
                    name,
                    input: call.get("args").cloned().unwrap_or_else(|| json!({})),
                });
            } else if let Some(response) = part.get("functionResponse") {
                let name = text(response.get("name"));
                let id = match response.get("id").and_then(Value::as_str) {
                    Some(id) => {
                        pending.retain(|(p, _)| p != id);
                        id.to_owned()
                    }
                    None => match pending.iter().position(|(_, n)| *n == name) {
                        Some(i) => pending.remove(i).0,
                        None => {
                            generated += 1;
                            format!("unmatched_{name}_{generated}")
                        }
                    },
                };
                let answer = response.get("response");
                let error = answer.and_then(|r| r.get("error"));
                let result = answer
                    .and_then(Value::as_object)
                    .filter(|map| map.len() == 1)
                    .and_then(|map| map.get("result"));
                let shown = |v: Option<&Value>| match v {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                blocks.push(match (error, result, answer) {
                    (Some(error), _, _) => ContentBlock::tool_result(id, shown(Some(error)), true),
                    (None, Some(Value::String(text)), _) => {
                        ContentBlock::tool_result(id, text.clone(), false)
                    }
                    (None, Some(value), _) => ContentBlock::tool_result_json(id, value.clone()),
                    // A structured result: the object itself.
                    (None, None, Some(object)) => {
                        ContentBlock::tool_result_json(id, object.clone())
                    }
                    (None, None, None) => ContentBlock::tool_result(id, String::new(), false),
                });
            } else if let Some(t) = part.get("text").and_then(Value::as_str) {
                if thought {
                    blocks.push(ContentBlock::Thinking {
                        thinking: t.to_owned(),
                        signature,
                    });
                } else if !t.is_empty() {
                    blocks.push(ContentBlock::text(t));
                }
            } else if let Some(data) = part.get("inlineData") {
                let media_type = text(data.get("mimeType"));
                let source = MediaSource::Base64 {
                    media_type: media_type.clone(),
                    data: text(data.get("data")),
                };
                blocks.push(media_block(&media_type, source));
            } else if let Some(file) = part.get("fileData") {
                let media_type = text(file.get("mimeType"));
                let source = MediaSource::Url {
                    url: text(file.get("fileUri")),
                };
                blocks.push(media_block(&media_type, source));
            }
        }
        messages.push(Message {
            role,
            content: blocks,
        });
    }
    messages
}

fn media_block(media_type: &str, source: MediaSource) -> ContentBlock {
    if media_type == "application/pdf" {
        ContentBlock::Document {
            source,
            title: None,
        }
    } else {
        ContentBlock::Image { source }
    }
}

/// Whether the Gemini API or Vertex AI serves a `…:{method}` path (see `MockFormat::route`).
fn serves(segments: &[&str]) -> bool {
    const VERSIONS: [&str; 4] = ["v1", "v1beta", "v1alpha", "v1beta1"];
    let Some((last, rest)) = segments.split_last() else {
        return false;
    };
    let model = last.split(':').next().unwrap_or_default();
    let method = last.rsplit(':').next().unwrap_or_default();
    if model.is_empty() || !matches!(method, "streamGenerateContent" | "generateContent") {
        return false;
    }
    // Where the API's own path starts: the last version segment.
    let Some(at) = rest.iter().rposition(|s| VERSIONS.contains(s)) else {
        return false;
    };
    let (prefix, path) = rest.split_at(at);
    let own = |s: &&str| VERSIONS.contains(s) || matches!(*s, "models" | "projects" | "publishers");
    if prefix.iter().any(own) {
        return false;
    }
    match path {
        // The Gemini API.
        [version, "models"] => *version != "v1beta1",
        // Vertex AI, with a project and location or without (express mode).
        [version, "projects", _, "locations", _, "publishers", "google", "models"]
        | [version, "publishers", "google", "models"] => matches!(*version, "v1" | "v1beta1"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_gemini_refuses() {
        let tool = |decl: Value| {
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                        "tools": [{"functionDeclarations": [decl]}]})
        };
        assert!(rejection(&tool(json!({"name": "ok", "parametersJsonSchema":
            {"type": "object", "properties": {"a": {"type": "string"}}}})))
        .is_none());
        assert!(rejection(&tool(json!({"name": "1bad"}))).is_some());
        assert!(rejection(&tool(
            json!({"name": "t", "parametersJsonSchema": {"type": "string"}})
        ))
        .is_some());
        let refused = rejection(&tool(json!({"name": "t", "parameters":
            {"type": "object", "properties": {"a": {"type": "string"}},
             "additionalProperties": false}})))
        .unwrap();
        assert!(
            refused.message.contains("additionalProperties"),
            "{refused:?}"
        );
        let orphan = json!({"contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "t", "response": {}}}]}]});
        assert!(rejection(&orphan)
            .unwrap()
            .message
            .contains("function call turn"));
        let empty = json!({"contents": [{"role": "user", "parts": []}]});
        assert!(rejection(&empty).is_some());
    }

    #[test]
    fn status_bodies_use_google_names() {
        let (body, _) = status_body(429, "rate_limit_error", "slow down");
        assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(body["error"]["code"], 429);
        let (body, _) = status_body(0, "overloaded_error", "busy");
        assert_eq!(body["error"]["status"], "UNAVAILABLE");
        assert_eq!(body["error"]["code"], 503);
    }
}
