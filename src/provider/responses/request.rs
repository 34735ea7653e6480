//! Encodes a [`ModelRequest`] into an OpenAI Responses request body (`POST /responses`).
//!
//! - The system prompt is `instructions`; the conversation is `input`, a list of items.
//! - A user message's tool results become `function_call_output` items (placed first, with
//!   `call_id`; the content of an error result is prefixed with `Error: `, since the format has
//!   no error flag; a result with images has an output list: `input_text`, then an
//!   `input_image` per image); its text, images (`input_image`, `detail: auto`), PDF documents
//!   (`input_file`, bytes as a data URL or a `file_url`) and unmodelled parts (sent verbatim)
//!   a `message` item with role `user`.
//! - An assistant message becomes, in its blocks' order: its reasoning items verbatim
//!   ([`ContentBlock::Reasoning`]: id, summary, `encrypted_content`), `message` items with role
//!   `assistant` for its text, and `function_call` items (`call_id`, `name`, `arguments` as a
//!   JSON string) for its tool calls; OpenAI's hosted tool search items
//!   ([`ContentBlock::Other`] holding a `tool_search_call` or `tool_search_output`) go back
//!   verbatim in their place. Anthropic thinking and other unmodelled blocks are dropped: the
//!   format has no place for them.
//! - Tools are flat function tools (`{"type":"function","name","description","parameters",
//!   "strict"}`; `strict` is `true` with the schema normalised when strict tools are on and
//!   the schema allows it, see [`strict`](crate::provider::strict)); `tool_choice` is sent with tools only.
//!   With [`ModelRequest::deferred_tools`] (hosted tool search), those follow with
//!   `defer_loading: true`, then `{"type": "tool_search"}` (server execution), and the local
//!   `search_tools` is left out unless the history called it.
//! - `max_output_tokens`, `temperature`, `top_p`, `parallel_tool_calls` (with tools only),
//!   `user`, `reasoning: {effort, summary}` when set on the client,
//!   and `store: false` with `include: ["reasoning.encrypted_content"]` unless the client
//!   stores responses: the crate never relies on state kept by the server. Stop sequences
//!   have no field in this format and are not sent.
//! - `previous_response_id` in [`ModelRequest::extra`] continues a stored response: only the
//!   messages after the last assistant message are sent, as the server holds the rest.
//! - `extra` fields are merged last, at the top level.

use serde_json::Value;

use std::borrow::Cow;

use crate::error::LlmError;
use crate::message::{ContentBlock, MediaSource, Message, Role};
use crate::provider::media_limits::{self as media, Provider};
use crate::provider::transport::http;
use crate::provider::{ModelRequest, ToolChoice};

use super::wire::{
    AnyItem, ContextManagement, FunctionTool, InputItem, InputPart, MessageContent, Output,
    Reasoning, ResponsesRequest, SourceUrl, SummaryText, Tool,
};
use super::ResponsesOptions;

/// The prefix of the output of a tool result that is an error.
pub(crate) const ERROR_RESULT_PREFIX: &str = "Error: ";

/// The JSON body for `request`, using `default_model` when the request names none.
pub(crate) fn encode(
    request: &ModelRequest,
    default_model: &str,
    options: &ResponsesOptions,
) -> Result<Vec<u8>, LlmError> {
    let model = request.model.as_deref().unwrap_or(default_model);
    if model.is_empty() {
        return Err(LlmError::InvalidRequest {
            message: "no model: set one with OpenAiClient::model(..) (or OPENAI_MODEL), or in \
                      ModelRequest::model"
                .to_owned(),
        });
    }
    let continued = request
        .extra
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null());
    if request.extra.contains_key("input") {
        return Err(http::extra_clash("input"));
    }
    // `"input":[…]` first, each message's items copied from the conversation's cache when an
    // earlier request of this format wrote them, the rest of the body after it.
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"input":["#);
    let items = |message: &Message, buf: &mut Vec<u8>| -> Result<(), LlmError> {
        let mut input = Vec::with_capacity(1);
        match message.role {
            Role::Assistant => assistant(message, &mut input),
            _ => user(message, &mut input)?,
        }
        for (i, item) in input.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            serde_json::to_writer(&mut *buf, item).map_err(http::encode_error)?;
        }
        Ok(())
    };
    if continued {
        // Only what follows the last answer, which the server already holds.
        let after = request
            .messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map_or(0, |i| i + 1);
        let mut after_item = false;
        let mut piece = Vec::new();
        for message in request.messages.get(after..).unwrap_or_default() {
            piece.clear();
            items(message, &mut piece)?;
            if piece.is_empty() {
                continue;
            }
            if std::mem::replace(&mut after_item, true) {
                out.push(b',');
            }
            out.extend_from_slice(&piece);
        }
    } else {
        request.encoded.write_messages(
            &request.messages,
            request.messages.len(),
            ENCODED_KEY,
            false,
            &mut out,
            items,
        )?;
    }
    out.extend_from_slice(b"],");
    // Hosted tool search: the deferred functions with `defer_loading`, then OpenAI's
    // `tool_search` tool in place of the local one (kept only if the history called it).
    let hosted = !request.deferred_tools.is_empty();
    let local_search_used = hosted
        && request.messages.iter().any(|m| {
            m.content.iter().any(|b| {
                matches!(b, ContentBlock::ToolUse { name, .. }
                    if name == crate::tool::search::SEARCH_TOOL)
            })
        });
    let strict_tools = request.strict_tools;
    let function = |t, deferred| function_tool(t, deferred, strict_tools);
    let mut tools: Vec<Tool<'_>> = request
        .tools
        .iter()
        .filter(|t| !hosted || local_search_used || t.name != crate::tool::search::SEARCH_TOOL)
        .map(|t| function(t, false))
        .chain(request.deferred_tools.iter().map(|t| function(t, true)))
        .collect();
    if hosted {
        tools.push(Tool::Search {
            kind: "tool_search",
        });
    }
    let tool_choice = (!tools.is_empty()).then(|| match &request.tool_choice {
        ToolChoice::Auto => serde_json::json!("auto"),
        ToolChoice::Any => serde_json::json!("required"),
        ToolChoice::None => serde_json::json!("none"),
        ToolChoice::Tool(name) => serde_json::json!({"type": "function", "name": name}),
    });
    let reasoning = (options.reasoning_effort.is_some() || options.reasoning_summary.is_some())
        .then_some(Reasoning {
            effort: options.reasoning_effort.as_deref(),
            summary: options.reasoning_summary.as_deref(),
        });
    let parallel_tool_calls = request.parallel_tool_calls.filter(|_| !tools.is_empty());
    let body = ResponsesRequest {
        model,
        instructions: request.system.as_deref().filter(|s| !s.is_empty()),
        tools,
        tool_choice,
        max_output_tokens: request.max_tokens,
        temperature: request.temperature,
        top_p: request.top_p,
        // Refused without tools, as in Chat Completions.
        parallel_tool_calls,
        user: request.user.as_deref(),
        reasoning,
        store: options.store,
        include: if options.store {
            Vec::new()
        } else {
            vec!["reasoning.encrypted_content"]
        },
        context_management: request.server_compaction.map(|c| {
            [ContextManagement {
                kind: "compaction",
                compact_threshold: c.threshold,
            }]
        }),
        stream: true,
    };
    let rest = http::body_bytes(&body, &request.extra)?;
    // `rest` is an object with at least `model`: its fields follow `input`.
    out.extend_from_slice(rest.get(1..).unwrap_or_default());
    Ok(out)
}

/// A function tool, deferred to the hosted tool search or not.
fn function_tool(t: &crate::message::ToolSpec, deferred: bool, strict_tools: bool) -> Tool<'_> {
    let (parameters, strict) = crate::provider::strict::wire_schema(
        &t.name,
        &t.input_schema,
        crate::provider::strict::StrictDialect::OpenAi,
        strict_tools,
    );
    Tool::Function(FunctionTool {
        kind: "function",
        name: &t.name,
        description: &t.description,
        parameters,
        strict,
        defer_loading: deferred.then_some(true),
    })
}

/// The cache of encoded messages' key for this format.
const ENCODED_KEY: u32 = 4;

pub(super) fn assistant<'a>(message: &'a Message, out: &mut Vec<AnyItem<'a>>) {
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => out.push(
                InputItem::Message {
                    role: "assistant",
                    content: MessageContent::Text(text.clone()),
                }
                .into(),
            ),
            ContentBlock::Reasoning {
                id,
                summary,
                encrypted_content,
            } => out.push(
                InputItem::Reasoning {
                    id,
                    summary: summary
                        .iter()
                        .map(|text| SummaryText {
                            kind: "summary_text",
                            text,
                        })
                        .collect(),
                    encrypted_content: encrypted_content.as_deref(),
                }
                .into(),
            ),
            ContentBlock::Compaction {
                id,
                encrypted_content,
            } => out.push(
                InputItem::Compaction {
                    id: id.as_deref(),
                    encrypted_content,
                }
                .into(),
            ),
            ContentBlock::ToolUse { id, name, input } => out.push(
                InputItem::FunctionCall {
                    call_id: id,
                    name,
                    arguments: if input.is_object() {
                        input.to_string()
                    } else {
                        "{}".to_owned()
                    },
                }
                .into(),
            ),
            // OpenAI's hosted tool search items, sent back as they came, in their place.
            ContentBlock::Other(item) if super::decode::is_tool_search_item(item) => {
                out.push(AnyItem::Verbatim(item))
            }
            _ => {}
        }
    }
}

pub(super) fn user<'a>(message: &'a Message, out: &mut Vec<AnyItem<'a>>) -> Result<(), LlmError> {
    for block in &message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
            ..
        } = block
        {
            let text = if *is_error {
                format!("{ERROR_RESULT_PREFIX}{content}")
            } else {
                content.clone()
            };
            let output = if images.is_empty() {
                Output::Text(text)
            } else {
                let mut parts = Vec::with_capacity(images.len() + 1);
                parts.push(InputPart::Text {
                    kind: "input_text",
                    text: Cow::Owned(text),
                });
                for source in images {
                    parts.push(image_part(source)?);
                }
                Output::Parts(parts)
            };
            out.push(
                InputItem::FunctionCallOutput {
                    call_id: tool_use_id,
                    output,
                }
                .into(),
            );
        }
    }
    let has_parts = message.content.iter().any(|b| {
        matches!(
            b,
            ContentBlock::Other(_) | ContentBlock::Image { .. } | ContentBlock::Document { .. }
        )
    });
    let content = if has_parts {
        let mut parts = Vec::with_capacity(message.content.len());
        for b in &message.content {
            match b {
                ContentBlock::Text { text } if !text.is_empty() => parts.push(InputPart::Text {
                    kind: "input_text",
                    text: Cow::Borrowed(text),
                }),
                ContentBlock::Image { source } => parts.push(image_part(source)?),
                ContentBlock::Document { source, title } => {
                    parts.push(file_part(source, title.as_deref())?)
                }
                ContentBlock::Other(value) => parts.push(InputPart::Other(value)),
                _ => {}
            }
        }
        MessageContent::Parts(parts)
    } else {
        let texts: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if texts.is_empty() {
            return Ok(());
        }
        MessageContent::Text(texts.join("\n"))
    };
    out.push(
        InputItem::Message {
            role: "user",
            content,
        }
        .into(),
    );
    Ok(())
}

/// An `input_image` part, checked against OpenAI's documented limits (PNG, JPEG, WebP or GIF;
/// at most 20 MB).
fn image_part(source: &MediaSource) -> Result<InputPart<'_>, LlmError> {
    media::check_image(source, Provider::OpenAi)?;
    Ok(InputPart::Image {
        kind: "input_image",
        image_url: SourceUrl(source),
        detail: "auto",
    })
}

/// An `input_file` part for a PDF: its bytes as a data URL, or a URL the server fetches.
fn file_part<'a>(
    source: &'a MediaSource,
    title: Option<&'a str>,
) -> Result<InputPart<'a>, LlmError> {
    match source {
        MediaSource::Base64 { .. } => {
            media::check_document(source, Provider::OpenAi)?;
            Ok(InputPart::File {
                kind: "input_file",
                file_data: Some(SourceUrl(source)),
                file_url: None,
                filename: Some(title.unwrap_or("document.pdf")),
            })
        }
        MediaSource::Url { url } => Ok(InputPart::File {
            kind: "input_file",
            file_data: None,
            file_url: Some(url),
            filename: title,
        }),
    }
}

/// The conversation in a Responses request body, in the crate's shape: the inverse of
/// [`encode`] for the `input` field, for the mock server's history check. Tolerant of any JSON
/// (never panics).
///
/// System and developer messages are left out. Consecutive assistant items (reasoning,
/// messages, function calls) form one assistant message; `function_call_output` items and the
/// user message after them one user message, results first. An output starting with
/// [`ERROR_RESULT_PREFIX`] reads as an error result without it.
pub(crate) fn decode(body: &Value) -> Vec<Message> {
    let items: &[Value] = match body.get("input") {
        Some(Value::Array(items)) => items,
        Some(Value::String(text)) => return vec![Message::user(text.clone())],
        _ => &[],
    };
    let mut out: Vec<Message> = Vec::new();
    let str_of = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    for item in items {
        let ty = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let (role, block) = match ty {
            "message" => match item.get("role").and_then(Value::as_str) {
                Some("assistant") => (Role::Assistant, decode_content(item.get("content"))),
                Some("user") => (Role::User, decode_content(item.get("content"))),
                _ => continue,
            },
            "tool_search_call" | "tool_search_output" => {
                (Role::Assistant, vec![ContentBlock::Other(item.clone())])
            }
            "compaction" => (
                Role::Assistant,
                vec![ContentBlock::Compaction {
                    id: item.get("id").and_then(Value::as_str).map(str::to_owned),
                    encrypted_content: str_of(item, "encrypted_content"),
                }],
            ),
            "reasoning" => (
                Role::Assistant,
                vec![ContentBlock::Reasoning {
                    id: str_of(item, "id"),
                    summary: item
                        .get("summary")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|p| str_of(p, "text"))
                        .collect(),
                    encrypted_content: item
                        .get("encrypted_content")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                }],
            ),
            "function_call" => {
                let arguments = str_of(item, "arguments");
                (
                    Role::Assistant,
                    vec![ContentBlock::ToolUse {
                        id: str_of(item, "call_id"),
                        name: str_of(item, "name"),
                        input: serde_json::from_str(&arguments).unwrap_or(Value::String(arguments)),
                    }],
                )
            }
            "function_call_output" => {
                let mut images = Vec::new();
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => {
                        let mut text = String::new();
                        for part in parts {
                            match part.get("type").and_then(Value::as_str) {
                                Some("input_text") => text.push_str(&str_of(part, "text")),
                                Some("input_image") => {
                                    images.push(media_source(&str_of(part, "image_url")))
                                }
                                _ => {}
                            }
                        }
                        text
                    }
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                let (text, is_error) = match output.strip_prefix(ERROR_RESULT_PREFIX) {
                    Some(rest) => (rest.to_owned(), true),
                    None => (output, false),
                };
                (
                    Role::User,
                    vec![ContentBlock::ToolResult {
                        tool_use_id: str_of(item, "call_id"),
                        content: text,
                        is_error,
                        images,
                        json: None,
                    }],
                )
            }
            _ => continue,
        };
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(block),
            _ => out.push(Message {
                role,
                content: block,
            }),
        }
    }
    out
}

/// A `data:` URL as base64 bytes, any other URL as a URL.
fn media_source(url: &str) -> MediaSource {
    let base64 = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"));
    match base64 {
        Some((media_type, data)) => MediaSource::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        },
        None => MediaSource::Url {
            url: url.to_owned(),
        },
    }
}

/// Text content (a string) or content parts (text parts as text, images and files as theirs,
/// the others verbatim).
fn decode_content(content: Option<&Value>) -> Vec<ContentBlock> {
    match content {
        Some(Value::String(text)) => vec![ContentBlock::text(text.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("input_text" | "output_text" | "text"), Some(text)) => {
                        ContentBlock::text(text)
                    }
                    (Some("input_image"), _) => match part.get("image_url").and_then(Value::as_str)
                    {
                        Some(url) => ContentBlock::Image {
                            source: media_source(url),
                        },
                        None => ContentBlock::Other(part.clone()),
                    },
                    (Some("input_file"), _) => {
                        let source = part
                            .get("file_data")
                            .or_else(|| part.get("file_url"))
                            .and_then(Value::as_str);
                        match source {
                            Some(source) => ContentBlock::Document {
                                source: media_source(source),
                                title: part
                                    .get("filename")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned),
                            },
                            None => ContentBlock::Other(part.clone()),
                        }
                    }
                    _ => ContentBlock::Other(part.clone()),
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn encode_value(request: &ModelRequest, options: &ResponsesOptions) -> Value {
        serde_json::from_slice(&encode(request, "gpt-test", options).unwrap()).unwrap()
    }

    #[test]
    fn minimal_request_is_stateless_by_default() {
        let mut r = ModelRequest::new(vec![Message::user("hi")]);
        r.system = Some("be brief".into());
        r.stop_sequences = vec!["STOP".into()];
        assert_eq!(
            encode_value(&r, &ResponsesOptions::default()),
            json!({
                "model": "gpt-test",
                "instructions": "be brief",
                "input": [{"type": "message", "role": "user", "content": "hi"}],
                "max_output_tokens": 4096,
                "store": false,
                "include": ["reasoning.encrypted_content"],
                "stream": true
            })
        );
        let stored = ResponsesOptions {
            store: true,
            reasoning_effort: Some("low".into()),
            reasoning_summary: Some("auto".into()),
        };
        let v = encode_value(&r, &stored);
        assert_eq!(v["store"], true);
        assert!(v.get("include").is_none());
        assert_eq!(v["reasoning"], json!({"effort": "low", "summary": "auto"}));
    }

    fn tool_conversation() -> Vec<Message> {
        crate::provider::fixtures::tool_conversation(ContentBlock::Reasoning {
            id: "rs_1".into(),
            summary: vec!["Two calls.".into()],
            encrypted_content: Some("gAAA==".into()),
        })
    }

    #[test]
    fn decode_inverts_encode() {
        let history = tool_conversation();
        let bytes = encode(
            &ModelRequest::new(history.clone()),
            "m",
            &ResponsesOptions::default(),
        )
        .unwrap();
        assert_eq!(decode(&serde_json::from_slice(&bytes).unwrap()), history);
    }

    #[test]
    fn items_keep_the_blocks_order_and_drop_anthropic_thinking() {
        let mut history = tool_conversation();
        history[1].content.insert(
            0,
            ContentBlock::Thinking {
                thinking: "t".into(),
                signature: "s".into(),
            },
        );
        let v = encode_value(&ModelRequest::new(history), &ResponsesOptions::default());
        let types: Vec<&str> = v["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "message",
                "reasoning",
                "message",
                "function_call",
                "function_call",
                "function_call_output",
                "function_call_output",
                "message",
                "message",
                "message"
            ]
        );
        assert_eq!(
            v["input"][1],
            json!({"type": "reasoning", "id": "rs_1",
                   "summary": [{"type": "summary_text", "text": "Two calls."}],
                   "encrypted_content": "gAAA=="})
        );
        assert_eq!(
            v["input"][3],
            json!({"type": "function_call", "call_id": "call_1", "name": "ls",
                   "arguments": "{\"path\":\".\"}"})
        );
        assert_eq!(
            v["input"][6],
            json!({"type": "function_call_output", "call_id": "call_2",
                   "output": "Error: no such file"})
        );
    }

    #[test]
    fn images_documents_and_tool_images_are_input_parts() {
        let png = MediaSource::Base64 {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        };
        let history = vec![
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::text("what is this?"),
                    ContentBlock::Image {
                        source: png.clone(),
                    },
                    ContentBlock::Document {
                        source: MediaSource::Base64 {
                            media_type: "application/pdf".into(),
                            data: "JVBERi0=".into(),
                        },
                        title: Some("report.pdf".into()),
                    },
                    ContentBlock::Document {
                        source: MediaSource::Url {
                            url: "https://example.com/a.pdf".into(),
                        },
                        title: None,
                    },
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "chart".into(),
                    input: json!({}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: "here".into(),
                    is_error: false,
                    images: vec![png.clone()],
                    json: None,
                }],
            },
        ];
        let mut r = ModelRequest::new(history.clone());
        r.top_p = Some(0.5);
        r.user = Some("u-1".into());
        r.parallel_tool_calls = Some(false);
        let v = encode_value(&r, &ResponsesOptions::default());
        assert_eq!(
            v["input"][0]["content"],
            json!([
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "report.pdf"},
                {"type": "input_file", "file_url": "https://example.com/a.pdf"}
            ])
        );
        assert_eq!(
            v["input"][2],
            json!({"type": "function_call_output", "call_id": "call_1", "output": [
                {"type": "input_text", "text": "here"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}
            ]})
        );
        assert_eq!(v["top_p"], 0.5);
        assert_eq!(v["user"], "u-1");
        // No tools: parallel_tool_calls is not sent (OpenAI refuses it without tools).
        assert!(v.get("parallel_tool_calls").is_none());
        assert_eq!(decode(&v), history);

        let bad = ModelRequest::new(vec![Message {
            role: Role::User,
            content: vec![ContentBlock::Image {
                source: MediaSource::Base64 {
                    media_type: "image/tiff".into(),
                    data: "AA==".into(),
                },
            }],
        }]);
        assert!(matches!(
            encode(&bad, "m", &ResponsesOptions::default()),
            Err(LlmError::InvalidRequest { .. })
        ));
    }

    #[test]
    fn previous_response_id_sends_only_the_new_turn() {
        let mut r = ModelRequest::new(tool_conversation());
        r.extra
            .insert("previous_response_id".into(), json!("resp_123"));
        let v = encode_value(&r, &ResponsesOptions::default());
        assert_eq!(v["previous_response_id"], "resp_123");
        assert_eq!(
            v["input"],
            json!([{"type": "message", "role": "user", "content": "thanks"}])
        );
    }

    #[test]
    fn hosted_tool_search_defers_functions_and_sends_its_items_back_verbatim() {
        let spec = |name: &str| crate::message::ToolSpec {
            name: name.into(),
            description: format!("Does {name}"),
            input_schema: json!({"type": "object"}),
        };
        let call = json!({"type": "tool_search_call", "id": "tsc_1", "execution": "server",
                          "status": "completed", "arguments": {"query": "b"}});
        let output = json!({"type": "tool_search_output", "id": "tso_1", "execution": "server",
                            "status": "completed", "tools": [{"type": "function", "name": "b"}]});
        let history = vec![
            Message::user("do b"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Other(call.clone()),
                    ContentBlock::Other(output.clone()),
                    // Another format's unmodelled block has no place here.
                    ContentBlock::Other(json!({"type": "server_tool_use", "id": "srv_1"})),
                    ContentBlock::ToolUse {
                        id: "call_1".into(),
                        name: "b".into(),
                        input: json!({}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result("call_1", "done", false)],
            },
        ];
        let mut r = ModelRequest::new(history);
        r.tools = vec![spec(crate::tool::search::SEARCH_TOOL), spec("b")];
        r.deferred_tools = vec![spec("a"), spec("c")];
        let v = encode_value(&r, &ResponsesOptions::default());
        let tools = v["tools"].as_array().unwrap();
        let summary: Vec<(&str, Option<&str>, Option<bool>)> = tools
            .iter()
            .map(|t| {
                (
                    t["type"].as_str().unwrap(),
                    t["name"].as_str(),
                    t.get("defer_loading").and_then(Value::as_bool),
                )
            })
            .collect();
        // The local search tool is left out (never called); the search tool is last, bare.
        assert_eq!(
            summary,
            [
                ("function", Some("b"), None),
                ("function", Some("a"), Some(true)),
                ("function", Some("c"), Some(true)),
                ("tool_search", None, None)
            ]
        );
        assert_eq!(tools[3], json!({"type": "tool_search"}));
        let input = v["input"].as_array().unwrap();
        assert_eq!(input[1], call);
        assert_eq!(input[2], output);
        assert_eq!(input[3]["type"], "function_call");
        assert_eq!(input.len(), 5);
        // Without deferred tools nothing changes: no search tool, no defer_loading.
        r.deferred_tools.clear();
        let v = encode_value(&r, &ResponsesOptions::default());
        assert!(!v["tools"].to_string().contains("defer_loading"));
        assert_eq!(v["tools"].as_array().unwrap().len(), 2);
        // The mock's inverse reads the items back as the blocks they came from.
        let decoded = decode(&v);
        assert_eq!(decoded[1].content[0], ContentBlock::Other(call));
        assert_eq!(decoded[1].content[1], ContentBlock::Other(output));
    }

    #[test]
    fn decode_never_panics_on_odd_bodies() {
        for body in [
            json!(null),
            json!({"input": {}}),
            json!({"input": "hi"}),
            json!({"input": [1, {"type": "reasoning", "summary": [3]},
                             {"type": "function_call_output", "output": [1]},
                             {"role": "assistant", "content": [{"type": 1}]}]}),
        ] {
            let _ = decode(&body);
        }
    }
}
