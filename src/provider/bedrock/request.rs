//! Encodes a [`ModelRequest`] into a Bedrock Converse request body (the member names of
//! botocore's `ConverseStreamRequest`), and its inverse for the mock server's checks.
//!
//! - The model is not in the body: it is the URL's `{modelId}`.
//! - `system` is a list of blocks: the prompt's `text`, then a `cachePoint` when the
//!   [`PromptCache`] caches the system prompt.
//! - `inferenceConfig` carries `maxTokens`, `temperature`, `topP` and `stopSequences`;
//!   extended thinking (Anthropic models) goes in
//!   `additionalModelRequestFields.thinking {type: enabled, budget_tokens}`.
//! - `toolConfig.tools` holds one `toolSpec {name, description, inputSchema: {json}}` per
//!   tool, then a `cachePoint` when the cache says so; `toolChoice` is `auto`, `any` or
//!   `tool {name}`. Converse has no `none`: with [`ToolChoice::None`] the tools are left out,
//!   unless the history holds `toolUse`/`toolResult` blocks, which Converse accepts only with
//!   a `toolConfig` (then the tools are sent without a `toolChoice`, and the model may still
//!   call one).
//! - Messages: consecutive messages of one role are merged (Converse requires alternation), a
//!   user message's `toolResult`s come first, blank text blocks are dropped (Converse refuses
//!   them) and so are messages left empty; a tool result with no text and no image says
//!   `(no output)`, and a tool's JSON object result goes as a `json` block (other JSON values
//!   as their text). Thinking goes back as
//!   `reasoningContent.reasoningText {text, signature}`, redacted thinking as
//!   `reasoningContent.redactedContent`; OpenAI reasoning items have no Converse form and are
//!   left out.
//! - Images (`png`, `jpeg`, `gif`, `webp`) and documents (`pdf`, `csv`, `doc`, `docx`, `xls`,
//!   `xlsx`, `html`, `txt`, `md`) go as bytes; a URL source is refused (Converse takes bytes
//!   or S3 locations only), and so are other types and sizes over Bedrock's limits.
//! - Prompt caching puts `cachePoint` blocks where the Anthropic encoder puts `cache_control`:
//!   after the system prompt, and after the last block of each of the latest user messages,
//!   four at most; after the last tool only when the system prompt has none (the prompt is
//!   tools, then system: the system prompt's cache point caches the tools with it).
//! - `extra` fields are merged at the top level; one the crate sends is refused, naming it.
//! - Converse has no field for [`ModelRequest::parallel_tool_calls`] nor
//!   [`ModelRequest::user`]: they are not sent (set a model's own fields with
//!   `extra["additionalModelRequestFields"]` when no thinking budget is set).

// The encoder is the client's (feature `bedrock`); the mock server and the tests use the rest.
#![cfg_attr(not(feature = "bedrock"), allow(dead_code))]

use serde_json::{json, Map, Value};

use crate::error::LlmError;
use crate::media::{source_dimensions, ImageFormat};
use crate::message::{structured_result, ContentBlock, MediaSource, Role};
use crate::provider::cache::{CacheTtl, PromptCache, MAX_CACHE_BREAKPOINTS};
use crate::provider::{ModelRequest, ToolChoice};

/// Bedrock's limit on one image: 3.75 MB of bytes (as base64: 4/3 of that).
pub(crate) const MAX_IMAGE_BASE64: usize = 3_750_000 / 3 * 4 + 4;
/// Bedrock's limit on an image's width and height, in pixels.
pub(crate) const MAX_IMAGE_SIDE: u32 = 8000;
/// Bedrock's limit on one document: 4.5 MB of bytes.
pub(crate) const MAX_DOCUMENT_BASE64: usize = 4_500_000 / 3 * 4 + 4;

/// What an empty tool result says: Converse refuses blank text blocks, and a result without
/// content.
pub(crate) const EMPTY_RESULT: &str = "(no output)";

/// The document formats Converse takes, by media type.
pub(crate) const DOCUMENT_FORMATS: [(&str, &str); 9] = [
    ("application/pdf", "pdf"),
    ("text/csv", "csv"),
    ("application/msword", "doc"),
    (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "docx",
    ),
    ("application/vnd.ms-excel", "xls"),
    (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "xlsx",
    ),
    ("text/html", "html"),
    ("text/plain", "txt"),
    ("text/markdown", "md"),
];

/// The JSON body for `request`.
pub(crate) fn encode(request: &ModelRequest) -> Result<Vec<u8>, LlmError> {
    crate::provider::transport::http::merge_extra(encode_value(request)?, &request.extra)
}

/// The body as JSON, before `extra` is merged.
pub(crate) fn encode_value(request: &ModelRequest) -> Result<Value, LlmError> {
    let cache = request.prompt_cache;
    if let Some(cache) = &cache {
        cache.validate().map_err(|e| LlmError::InvalidRequest {
            message: e.to_string(),
        })?;
    }
    let point = cache.map(|c| cache_point(c.ttl));
    let mut body = Map::new();
    let mut placed = 0u32;

    let system = request.system.as_deref().filter(|s| !s.is_empty());
    let mut messages = messages(request)?;
    let history_uses_tools = messages.iter().any(|m| {
        m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some())
    });
    let send_tools = !request.tools.is_empty()
        && (request.tool_choice != ToolChoice::None || history_uses_tools);
    if send_tools {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                let mut spec = Map::new();
                spec.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    spec.insert("description".into(), json!(t.description));
                }
                spec.insert("inputSchema".into(), json!({"json": t.input_schema}));
                json!({"toolSpec": spec})
            })
            .collect();
        // The prompt is tools, then system, then messages: a cache point after the system
        // prompt caches the tools too, so the tools get their own only without one there.
        let system_point = system.is_some() && cache.is_some_and(|c| c.system);
        if let (Some(point), Some(PromptCache { tools: true, .. })) = (&point, &cache) {
            if !system_point {
                tools.push(json!({"cachePoint": point}));
                placed += 1;
            }
        }
        let mut config = Map::new();
        config.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => Some(json!({"auto": {}})),
            ToolChoice::Any => Some(json!({"any": {}})),
            ToolChoice::Tool(name) => Some(json!({"tool": {"name": name}})),
            _ => None,
        };
        if let Some(choice) = choice {
            config.insert("toolChoice".into(), choice);
        }
        body.insert("toolConfig".into(), Value::Object(config));
    }

    if let Some(text) = system {
        let mut system = vec![json!({"text": text})];
        if let (Some(point), Some(PromptCache { system: true, .. })) = (&point, &cache) {
            system.push(json!({"cachePoint": point}));
            placed += 1;
        }
        body.insert("system".into(), Value::Array(system));
    }

    if let (Some(cache), Some(point)) = (&cache, &point) {
        let verbatim = verbatim_cache_points(&messages);
        let room = MAX_CACHE_BREAKPOINTS.saturating_sub(placed.saturating_add(verbatim));
        mark_latest_user_messages(&mut messages, cache.message_breakpoints.min(room), point);
    }
    body.insert("messages".into(), Value::Array(messages));

    let mut inference = Map::new();
    inference.insert("maxTokens".into(), json!(request.max_tokens));
    if let Some(t) = request.temperature {
        inference.insert("temperature".into(), json!(t));
    }
    if let Some(p) = request.top_p {
        inference.insert("topP".into(), json!(p));
    }
    // Converse refuses an empty stop sequence.
    let stops: Vec<&String> = request
        .stop_sequences
        .iter()
        .filter(|s| !s.is_empty())
        .collect();
    if !stops.is_empty() {
        inference.insert("stopSequences".into(), json!(stops));
    }
    body.insert("inferenceConfig".into(), Value::Object(inference));

    if let Some(budget) = request.thinking_budget {
        body.insert(
            "additionalModelRequestFields".into(),
            json!({"thinking": {"type": "enabled", "budget_tokens": budget}}),
        );
    }
    Ok(Value::Object(body))
}

fn cache_point(ttl: CacheTtl) -> Value {
    match ttl {
        CacheTtl::FiveMinutes => json!({"type": "default"}),
        CacheTtl::OneHour => json!({"type": "default", "ttl": "1h"}),
    }
}

/// The `cachePoint` blocks already in unmodelled blocks, sent as they are.
fn verbatim_cache_points(messages: &[Value]) -> u32 {
    let n = messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b.get("cachePoint").is_some())
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Puts a `cachePoint` after the last block that may be cached (not reasoning) in each of
/// the `count` latest user messages.
fn mark_latest_user_messages(messages: &mut [Value], count: u32, point: &Value) {
    let mut left = count;
    for message in messages.iter_mut().rev() {
        if left == 0 {
            return;
        }
        if message["role"] != "user" {
            continue;
        }
        let Some(content) = message.get_mut("content").and_then(Value::as_array_mut) else {
            continue;
        };
        let last = content.iter().rposition(|b| {
            ["text", "image", "document", "toolUse", "toolResult"]
                .iter()
                .any(|k| b.get(*k).is_some())
        });
        if let Some(last) = last {
            content.insert(last + 1, json!({"cachePoint": point}));
            left -= 1;
        }
    }
}

fn messages(request: &ModelRequest) -> Result<Vec<Value>, LlmError> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(request.messages.len());
    for message in request.messages.iter() {
        let role = match message.role {
            Role::Assistant => "assistant",
            _ => "user",
        };
        let mut blocks = Vec::with_capacity(message.content.len());
        for b in &message.content {
            if let Some(b) = block(b)? {
                blocks.push(b);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    Ok(out
        .into_iter()
        .map(|(role, content)| {
            let content = if role == "user" {
                // Stable: results keep their order, and so do the other blocks.
                let (mut results, rest): (Vec<_>, Vec<_>) = content
                    .into_iter()
                    .partition(|b| b.get("toolResult").is_some());
                results.extend(rest);
                results
            } else {
                content
            };
            json!({"role": role, "content": content})
        })
        .collect())
}

fn refused(message: String) -> LlmError {
    LlmError::InvalidRequest { message }
}

/// An image block's `{format, source: {bytes}}`, checked against Bedrock's limits.
fn image(source: &MediaSource) -> Result<Value, LlmError> {
    let MediaSource::Base64 { media_type, data } = source else {
        return Err(refused(
            "Bedrock Converse takes images as bytes (or S3 locations), not URLs: download the \
             image and attach its bytes"
                .to_owned(),
        ));
    };
    let format = match ImageFormat::from_media_type(media_type) {
        Some(_) => media_type.trim_start_matches("image/"),
        None => {
            return Err(refused(format!(
                "Bedrock does not take images of type `{media_type}` (only image/png, \
                 image/jpeg, image/gif and image/webp)"
            )))
        }
    };
    if data.len() > MAX_IMAGE_BASE64 {
        return Err(refused(format!(
            "an image is {} bytes of base64, over Bedrock's limit of 3.75 MB; send it smaller",
            data.len()
        )));
    }
    if let Some((w, h)) = source_dimensions(source) {
        if w > MAX_IMAGE_SIDE || h > MAX_IMAGE_SIDE {
            return Err(refused(format!(
                "an image is {w}×{h} px, over Bedrock's limit of 8000 px a side"
            )));
        }
    }
    Ok(json!({"format": format, "source": {"bytes": data}}))
}

/// A document block's `{format, name, source: {bytes}}`, checked against Bedrock's limits.
fn document(source: &MediaSource, title: Option<&str>) -> Result<Value, LlmError> {
    let MediaSource::Base64 { media_type, data } = source else {
        return Err(refused(
            "Bedrock Converse takes documents as bytes (or S3 locations), not URLs: download \
             the document and attach its bytes"
                .to_owned(),
        ));
    };
    let Some((_, format)) = DOCUMENT_FORMATS.iter().find(|(t, _)| t == media_type) else {
        return Err(refused(format!(
            "Bedrock does not take documents of type `{media_type}` (pdf, csv, doc, docx, xls, \
             xlsx, html, txt and md only)"
        )));
    };
    if data.len() > MAX_DOCUMENT_BASE64 {
        return Err(refused(format!(
            "a document is {} bytes of base64, over Bedrock's limit of 4.5 MB",
            data.len()
        )));
    }
    Ok(json!({"format": format, "name": document_name(title), "source": {"bytes": data}}))
}

/// A document's `name`: Converse takes letters, digits, single spaces, hyphens, parentheses
/// and square brackets, 1 to 200 characters; anything else becomes a space.
fn document_name(title: Option<&str>) -> String {
    let mut name = String::new();
    for c in title.unwrap_or_default().chars() {
        let c = if c.is_alphanumeric() || matches!(c, '-' | '(' | ')' | '[' | ']') {
            c
        } else {
            ' '
        };
        if c == ' ' && (name.is_empty() || name.ends_with(' ')) {
            continue;
        }
        name.push(c);
    }
    let name: String = name.trim_end().chars().take(200).collect();
    if name.is_empty() {
        "document".to_owned()
    } else {
        name.trim_end().to_owned()
    }
}

/// The Converse content-block members an unmodelled block may be sent as, verbatim.
const BLOCK_MEMBERS: [&str; 14] = [
    "text",
    "image",
    "document",
    "video",
    "audio",
    "toolUse",
    "toolResult",
    "guardContent",
    "cachePoint",
    "reasoningContent",
    "citationsContent",
    "searchResult",
    "toolAddition",
    "toolRemoval",
];

fn block(block: &ContentBlock) -> Result<Option<Value>, LlmError> {
    Ok(Some(match block {
        ContentBlock::Text { text } if text.trim().is_empty() => return Ok(None),
        ContentBlock::Text { text } => json!({"text": text}),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => {
            let mut reasoning = Map::new();
            reasoning.insert("text".into(), json!(thinking));
            if !signature.is_empty() {
                reasoning.insert("signature".into(), json!(signature));
            }
            json!({"reasoningContent": {"reasoningText": reasoning}})
        }
        ContentBlock::RedactedThinking { data } => {
            json!({"reasoningContent": {"redactedContent": data}})
        }
        // OpenAI Responses reasoning has no Converse form.
        ContentBlock::Reasoning { .. } | ContentBlock::Compaction { .. } => return Ok(None),
        ContentBlock::ToolUse { id, name, input } => {
            let input = if input.is_object() {
                input.clone()
            } else {
                json!({})
            };
            json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
            json,
            ..
        } => {
            let mut parts = Vec::with_capacity(images.len() + 1);
            match structured_result(content, json.as_deref()) {
                // A JSON object result goes as structure, a `json` block.
                Some(object @ Value::Object(_)) => parts.push(json!({ "json": object })),
                _ if !content.trim().is_empty() => parts.push(json!({"text": content})),
                _ => {}
            }
            for source in images {
                parts.push(json!({"image": image(source)?}));
            }
            if parts.is_empty() {
                parts.push(json!({"text": EMPTY_RESULT}));
            }
            let mut result = Map::new();
            result.insert("toolUseId".into(), json!(tool_use_id));
            result.insert("content".into(), Value::Array(parts));
            if *is_error {
                result.insert("status".into(), json!("error"));
            }
            json!({"toolResult": result})
        }
        ContentBlock::Image { source } => json!({"image": image(source)?}),
        ContentBlock::Document { source, title } => {
            json!({"document": document(source, title.as_deref())?})
        }
        // A Converse block kept verbatim (one member of the union); another provider's
        // unmodelled block has no Converse form.
        ContentBlock::Other(value) => match value.as_object() {
            Some(map)
                if map.len() == 1 && map.keys().all(|k| BLOCK_MEMBERS.contains(&k.as_str())) =>
            {
                value.clone()
            }
            _ => return Ok(None),
        },
        #[allow(unreachable_patterns)]
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::mock::decode;
    use super::*;
    use crate::message::Message;
    use crate::message::ToolSpec;

    fn value(request: &ModelRequest) -> Value {
        serde_json::from_slice(&encode(request).unwrap()).unwrap()
    }

    #[test]
    fn minimal_request() {
        let v = value(&ModelRequest::new(vec![Message::user("hi")]));
        assert_eq!(
            v,
            json!({
                "messages": [{"role": "user", "content": [
                    {"text": "hi"}, {"cachePoint": {"type": "default"}}
                ]}],
                "inferenceConfig": {"maxTokens": 4096}
            })
        );
    }

    #[test]
    fn tool_choice_none_leaves_tools_out_unless_the_history_needs_them() {
        let mut r = ModelRequest::new(vec![Message::user("hi")]);
        r.tools = vec![ToolSpec {
            name: "t".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }];
        r.tool_choice = ToolChoice::None;
        r.prompt_cache = None;
        assert!(value(&r).get("toolConfig").is_none());
        r.messages_mut().extend([
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "t".into(),
                    input: json!(1),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result("a", "ok", false)],
            },
        ]);
        let v = value(&r);
        assert_eq!(
            v["toolConfig"],
            json!({"tools": [{"toolSpec": {"name": "t", "inputSchema": {"json": {"type": "object"}}}}]})
        );
        assert_eq!(
            v["messages"][1]["content"][0]["toolUse"]["input"],
            json!({})
        );
    }

    #[test]
    fn decode_inverts_encode() {
        let history = vec![
            Message::user("list"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: "sig".into(),
                    },
                    ContentBlock::RedactedThinking {
                        data: "b3BhcXVl".into(),
                    },
                    ContentBlock::text("Looking."),
                    ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "ls".into(),
                        input: json!({"path": "."}),
                    },
                    ContentBlock::ToolUse {
                        id: "t2".into(),
                        name: "read".into(),
                        input: json!({}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::tool_result("t1", "a.txt", false),
                    ContentBlock::tool_result("t2", "no such file", true),
                ],
            },
            Message::assistant("done"),
        ];
        let body = value(&ModelRequest::new(history.clone()));
        assert_eq!(decode(&body), history);
    }

    #[test]
    fn document_names_are_what_converse_accepts() {
        assert_eq!(
            document_name(Some("Q3 report: final.pdf")),
            "Q3 report final pdf"
        );
        assert_eq!(document_name(Some("  ")), "document");
        assert_eq!(document_name(None), "document");
        assert_eq!(document_name(Some(&"x".repeat(300))).len(), 200);
    }

    #[test]
    fn decode_never_panics_on_odd_bodies() {
        for body in [
            json!(null),
            json!({"messages": "no"}),
            json!({"messages": [1, null, {"role": 5, "content": {"x": 1}}]}),
            json!({"messages": [{"role": "assistant", "content": [
                7, {"toolUse": 1}, {"toolResult": {"content": [{"x": 1}, {"image": 2}]}},
                {"reasoningContent": 3}, {"document": {"format": 1}}, {"image": {}}
            ]}]}),
        ] {
            let _ = decode(&body);
        }
    }
}
