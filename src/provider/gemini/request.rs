//! Encodes a [`ModelRequest`] into a Gemini `GenerateContentRequest` body (the REST form of
//! google-genai's types, camelCase), and its inverse for the mock server's checks.
//!
//! - `contents`: roles `user` and `model`; consecutive messages of one role are merged into
//!   one content; empty text is dropped, and contents left without parts.
//! - `systemInstruction: {parts: [{text}]}`.
//! - Tools: `tools: [{functionDeclarations: [{name, description, parametersJsonSchema}]}]`.
//!   `parametersJsonSchema` takes the tool's JSON Schema as it is (`$defs`/`$ref`, `anyOf`,
//!   `additionalProperties`, nullable types …), which the older OpenAPI-subset `parameters`
//!   field refuses or would need a lossy conversion for; it is what current models (Gemini 2.5
//!   and later, on the Gemini API and Vertex AI) read. Only `$schema` is left out. A schema that
//!   is not an object schema is refused here, as Gemini refuses it; a tool with no parameters
//!   (`{"type":"object"}` without properties) is sent without a schema.
//! - `toolConfig.functionCallingConfig`: `mode` `AUTO` / `ANY` / `NONE`, and
//!   `allowedFunctionNames: [name]` with `ANY` for a named tool; sent only with tools.
//! - Tool calls are `functionCall {name, args, id}` parts and results `functionResponse {name,
//!   id, response: {"result": text}}` (`{"error": text}` when the tool failed; a JSON result
//!   goes as structure: an object as the `response` itself, another value as
//!   `{"result": value}`), the `id` sent
//!   only when the model gave the call one (ids the decoder made up start with
//!   `gemini_call_`), and never to Vertex AI (Google's SDKs refuse a `functionResponse.id` for
//!   Vertex AI): Gemini then matches results to calls by name and order. Images a tool returned
//!   follow the results as `inlineData` parts of the same content.
//! - Thinking: a thinking block with text is a `{text, thought: true}` part with its
//!   `thoughtSignature`; a thinking block with only a signature puts it on the next part of the
//!   message (as the decoder found it), or on an empty text part when none follows. The next
//!   part may be an empty text block or an empty thinking block: the decoder's form of a
//!   signature that came on an empty text part (`{"text": "", "thoughtSignature"}`) or an
//!   empty thought part, which go back as such, in their place.
//!   Redacted-thinking, OpenAI reasoning and unmodelled blocks have no Gemini form and are left
//!   out.
//! - Images (PNG, JPEG, WebP, HEIC, HEIF) and PDF documents: `inlineData {mimeType, data}`, or
//!   `fileData {mimeType, fileUri}` for URL sources (an image URL's type is read from its file
//!   extension). GIF and other types are refused, and inline data over 20 MB in one request.
//!   A document's title has no Gemini field and is not sent.
//! - `generationConfig`: `maxOutputTokens`, `temperature`, `topP`, `stopSequences`, and
//!   `thinkingConfig {thinkingBudget, includeThoughts: true}` from `thinking_budget` (a budget
//!   of 0, thinking off, without `includeThoughts`).
//! - Not sent (no Gemini field): `parallel_tool_calls`, `user`; `prompt_cache` does not apply
//!   (Gemini caches implicitly).
//! - `extra`: merged into the top level; an object value merges one level into the object the
//!   crate sends under the same key (`{"generationConfig": {"topK": 40}}`), and a field the
//!   crate sends is refused with [`LlmError::InvalidRequest`] naming it.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::error::LlmError;
use crate::message::{structured_result, ContentBlock, MediaSource, Message, Role};
use crate::provider::{ModelRequest, ToolChoice};

use super::decode::GENERATED_ID_PREFIX;

/// The documented limit on a request's inline data (20 MB), as base64.
pub(crate) const MAX_INLINE_BASE64: usize = 20 * 1024 * 1024 / 3 * 4 + 4;

/// Image types Gemini reads.
const IMAGE_TYPES: [&str; 5] = [
    "image/png",
    "image/jpeg",
    "image/webp",
    "image/heic",
    "image/heif",
];

fn invalid(message: impl Into<String>) -> LlmError {
    LlmError::InvalidRequest {
        message: message.into(),
    }
}

/// The JSON body for `request`; `ids`: whether call ids may be sent (not to Vertex AI).
pub(crate) fn encode(request: &ModelRequest, ids: bool) -> Result<Vec<u8>, LlmError> {
    let body = encode_value(request, ids)?;
    serde_json::to_vec(&body).map_err(|e| invalid(format!("could not encode the request: {e}")))
}

/// The body as a JSON value, `extra` merged.
pub(crate) fn encode_value(request: &ModelRequest, ids: bool) -> Result<Value, LlmError> {
    let mut body = Map::new();
    body.insert(
        "contents".into(),
        Value::Array(contents(&request.messages, ids)?),
    );
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    if !request.tools.is_empty() {
        let mut declarations = Vec::with_capacity(request.tools.len());
        for tool in &request.tools {
            let mut declaration = Map::new();
            declaration.insert("name".into(), Value::String(tool.name.clone()));
            if !tool.description.is_empty() {
                declaration.insert(
                    "description".into(),
                    Value::String(tool.description.clone()),
                );
            }
            if let Some(schema) = parameters(&tool.name, &tool.input_schema)? {
                declaration.insert("parametersJsonSchema".into(), schema);
            }
            declarations.push(Value::Object(declaration));
        }
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
        let config = match &request.tool_choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::Any => json!({"mode": "ANY"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        };
        body.insert(
            "toolConfig".into(),
            json!({ "functionCallingConfig": config }),
        );
    }
    let mut generation = Map::new();
    generation.insert("maxOutputTokens".into(), json!(request.max_tokens));
    if let Some(t) = request.temperature {
        generation.insert("temperature".into(), decimal(t));
    }
    if let Some(p) = request.top_p {
        generation.insert("topP".into(), decimal(p));
    }
    if !request.stop_sequences.is_empty() {
        generation.insert("stopSequences".into(), json!(request.stop_sequences));
    }
    if let Some(budget) = request.thinking_budget {
        // A budget of 0 turns thinking off (where the model allows it): no thoughts to include.
        let config = if budget == 0 {
            json!({"thinkingBudget": 0})
        } else {
            json!({"thinkingBudget": budget, "includeThoughts": true})
        };
        generation.insert("thinkingConfig".into(), config);
    }
    body.insert("generationConfig".into(), Value::Object(generation));
    merge_extra(&mut body, &request.extra)?;
    Ok(Value::Object(body))
}

/// An `f32` setting as the decimal it was written as (0.7, not 0.699999988079071).
fn decimal(value: f32) -> Value {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(|v| serde_json::Number::from_f64(v).map(Value::Number))
        .unwrap_or(Value::Null)
}

/// Merges `extra`: new keys at the top level; an object into the crate's object of the same
/// key, one level deep; any key the crate sends is a clash, refused naming it.
fn merge_extra(body: &mut Map<String, Value>, extra: &Map<String, Value>) -> Result<(), LlmError> {
    let clash = |key: &str| {
        invalid(format!(
            "the extra body field `{key}` clashes with a field the crate sends in this \
             request; set it through its typed setting (ModelRequest / RequestSettings) instead"
        ))
    };
    for (key, value) in extra {
        match (body.get_mut(key), value) {
            (None, _) => {
                body.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(ours)), Value::Object(theirs)) => {
                for (inner, value) in theirs {
                    if ours.contains_key(inner) {
                        return Err(clash(&format!("{key}.{inner}")));
                    }
                    ours.insert(inner.clone(), value.clone());
                }
            }
            (Some(_), _) => return Err(clash(key)),
        }
    }
    Ok(())
}

/// A tool's `parametersJsonSchema`: the schema without `$schema`; `None` for a tool without
/// parameters.
fn parameters(name: &str, schema: &Value) -> Result<Option<Value>, LlmError> {
    let Value::Object(map) = schema else {
        return Err(invalid(format!(
            "the input schema of tool `{name}` is not a JSON object; Gemini takes an object \
             schema (\"type\": \"object\") for a function's parameters"
        )));
    };
    if map.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid(format!(
            "the input schema of tool `{name}` is not an object schema (\"type\": \"object\"), \
             which Gemini requires for a function's parameters"
        )));
    }
    let empty = map
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    if empty {
        return Ok(None);
    }
    let mut map = map.clone();
    map.remove("$schema");
    Ok(Some(Value::Object(map)))
}

/// `contents` for the conversation.
fn contents(messages: &[Message], ids: bool) -> Result<Vec<Value>, LlmError> {
    // Which tool each call id names: a functionResponse carries the function's name.
    let mut names: HashMap<&str, &str> = HashMap::new();
    for message in messages {
        for (id, name, _) in message.tool_uses() {
            names.insert(id, name);
        }
    }
    let mut inline = 0usize;
    let mut out: Vec<(Role, Vec<Value>)> = Vec::new();
    for message in messages {
        let parts = parts(message, &names, ids, &mut inline)?;
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((role, existing)) if *role == message.role => existing.extend(parts),
            _ => out.push((message.role, parts)),
        }
    }
    if inline > MAX_INLINE_BASE64 {
        return Err(invalid(format!(
            "the request carries {inline} bytes of base64 images and documents, over Gemini's \
             limit of 20 MB of inline data per request; send fewer or smaller files"
        )));
    }
    Ok(out
        .into_iter()
        .map(|(role, parts)| {
            let role = if role == Role::Assistant {
                "model"
            } else {
                "user"
            };
            json!({"role": role, "parts": parts})
        })
        .collect())
}

/// Whether `id` goes in the body: ids may be sent, and the decoder did not make this one up.
fn sent_id(id: &str, ids: bool) -> bool {
    ids && !id.is_empty() && !id.starts_with(GENERATED_ID_PREFIX)
}

fn parts(
    message: &Message,
    names: &HashMap<&str, &str>,
    ids: bool,
    inline: &mut usize,
) -> Result<Vec<Value>, LlmError> {
    let mut parts: Vec<Value> = Vec::new();
    let mut after: Vec<Value> = Vec::new();
    // A signature that goes on the next part.
    let mut pending: Option<&str> = None;
    let push = |parts: &mut Vec<Value>, pending: &mut Option<&str>, mut part: Value| {
        if let (Some(signature), Value::Object(map)) = (pending.take(), &mut part) {
            map.insert("thoughtSignature".into(), Value::String(signature.into()));
        }
        parts.push(part);
    };
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() || pending.is_some() => {
                push(&mut parts, &mut pending, json!({"text": text}));
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => {
                if thinking.is_empty() && signature.is_empty() {
                    // The empty thought part a signature came on (the decoder's form).
                    if pending.is_some() {
                        push(
                            &mut parts,
                            &mut pending,
                            json!({"text": "", "thought": true}),
                        );
                    }
                    continue;
                }
                if thinking.is_empty() {
                    if !signature.is_empty() {
                        if let Some(earlier) = pending.replace(signature) {
                            parts.push(json!({"text": "", "thoughtSignature": earlier}));
                        }
                    }
                    continue;
                }
                if let Some(earlier) = pending.take() {
                    parts.push(json!({"text": "", "thoughtSignature": earlier}));
                }
                let mut part = json!({"text": thinking, "thought": true});
                if !signature.is_empty() {
                    part["thoughtSignature"] = Value::String(signature.clone());
                }
                parts.push(part);
            }
            ContentBlock::ToolUse { id, name, input } => {
                let args = match input {
                    Value::Object(_) => input.clone(),
                    _ => json!({}),
                };
                let mut call = json!({"name": name, "args": args});
                if sent_id(id, ids) {
                    call["id"] = Value::String(id.clone());
                }
                push(&mut parts, &mut pending, json!({ "functionCall": call }));
            }
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                images,
                json,
                ..
            } => {
                let Some(name) = names.get(tool_use_id.as_str()) else {
                    return Err(invalid(format!(
                        "the tool result for call `{tool_use_id}` answers no tool call of the \
                         conversation; Gemini needs the function's name"
                    )));
                };
                let answer = match structured_result(content, json.as_deref()) {
                    // `response` is an object: a JSON object result goes as it is, another
                    // value under `result`.
                    Some(object @ Value::Object(_)) if !*is_error => object.clone(),
                    Some(value) if !*is_error => json!({ "result": value }),
                    _ => {
                        let key = if *is_error { "error" } else { "result" };
                        json!({ key: content })
                    }
                };
                let mut response = json!({"name": name, "response": answer});
                if sent_id(tool_use_id, ids) {
                    response["id"] = Value::String(tool_use_id.clone());
                }
                push(
                    &mut parts,
                    &mut pending,
                    json!({ "functionResponse": response }),
                );
                for image in images {
                    after.push(media(image, false, inline)?);
                }
            }
            ContentBlock::Image { source } => {
                let part = media(source, false, inline)?;
                push(&mut parts, &mut pending, part);
            }
            ContentBlock::Document { source, .. } => {
                let part = media(source, true, inline)?;
                push(&mut parts, &mut pending, part);
            }
            // Empty text; redacted thinking (Anthropic), reasoning items (OpenAI Responses) and unmodelled
            // blocks have no Gemini form.
            _ => {}
        }
    }
    if let Some(signature) = pending {
        parts.push(json!({"text": "", "thoughtSignature": signature}));
    }
    parts.extend(after);
    Ok(parts)
}

/// An image or PDF document as an `inlineData` or `fileData` part, checked against what Gemini
/// takes.
fn media(source: &MediaSource, document: bool, inline: &mut usize) -> Result<Value, LlmError> {
    match source {
        MediaSource::Base64 { media_type, data } => {
            if document {
                if media_type != "application/pdf" {
                    return Err(invalid(format!(
                        "Gemini takes documents of type application/pdf, not `{media_type}`"
                    )));
                }
            } else if !IMAGE_TYPES.contains(&media_type.as_str()) {
                return Err(invalid(format!(
                    "Gemini does not take images of type `{media_type}` (only image/png, \
                     image/jpeg, image/webp, image/heic and image/heif)"
                )));
            }
            *inline = inline.saturating_add(data.len());
            Ok(json!({"inlineData": {"mimeType": media_type, "data": data}}))
        }
        MediaSource::Url { url } => {
            let mime = if document {
                "application/pdf"
            } else {
                image_type_of_url(url).ok_or_else(|| {
                    invalid(format!(
                        "Gemini needs the media type of an image URL, and `{url}` does not end \
                         in .png, .jpg, .jpeg, .webp, .heic or .heif; send the image's bytes \
                         instead"
                    ))
                })?
            };
            Ok(json!({"fileData": {"mimeType": mime, "fileUri": url}}))
        }
    }
}

/// The image type an URL's file extension names.
fn image_type_of_url(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    })
}
