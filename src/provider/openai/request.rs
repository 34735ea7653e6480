//! Encodes a [`ModelRequest`] into an OpenAI Chat Completions request body.
//!
//! - The system prompt is the first message (`role: system`).
//! - Text-only content is a plain string (several text blocks joined with `\n`); a user
//!   message with unmodelled (`Other`) blocks becomes content parts, those blocks sent verbatim
//!   (for example `image_url` parts).
//! - An assistant's tool calls become `tool_calls` with the arguments as a JSON string (a
//!   non-object input becomes `{}`), with `content: null` when there is no text.
//! - Each tool result becomes one `role: tool` message with its `tool_call_id`, placed before
//!   the rest of its user message. OpenAI has no error flag, so the content of an error result
//!   is prefixed with `Error: ` to tell the model the tool failed.
//! - Signed thinking and redacted-thinking blocks of an assistant message go back as
//!   `thinking_blocks` (the shape LiteLLM documents for Anthropic models behind this format)
//!   when the client is set to send them; otherwise, and for unsigned reasoning always, they
//!   are dropped: OpenAI rejects unknown message fields, and compatible servers document no
//!   request field for unsigned reasoning.
//!   Unmodelled blocks in assistant messages are dropped; an assistant message with neither
//!   text nor tool calls is omitted.
//! - `max_tokens` is sent by default ([`MaxTokensField`]); `stream_options.include_usage` is
//!   always set; `extra` fields are merged last, at the top level.

use crate::error::LlmError;
use crate::message::{ContentBlock, MediaSource, Message, Role};
use crate::provider::media_limits::{self as media, Provider};
use crate::provider::transport::http;
use crate::provider::{ModelRequest, ToolChoice};

use super::wire::{
    ChatContent, ChatMessage, ChatRequest, ChatTool, ChatToolCall, ContentPart, FilePart,
    FunctionCall, FunctionSpec, ImageUrl, SourceUrl, StreamOptions, ThinkingBlock,
};
use super::MaxTokensField;

/// The prefix of the content of a tool result that is an error.
pub(crate) const ERROR_RESULT_PREFIX: &str = "Error: ";

/// The JSON body for `request`, using `default_model` when the request names none.
pub(crate) fn encode(
    request: &ModelRequest,
    default_model: &str,
    max_tokens_field: MaxTokensField,
    thinking_blocks: bool,
) -> Result<Vec<u8>, LlmError> {
    let model = request.model.as_deref().unwrap_or(default_model);
    if model.is_empty() {
        return Err(LlmError::InvalidRequest {
            message: "no model: set one with OpenAiClient::model(..) (or OPENAI_MODEL), or in \
                      ModelRequest::model"
                .to_owned(),
        });
    }
    if request.extra.contains_key("messages") {
        return Err(http::extra_clash("messages"));
    }
    // `"messages":[…]` first, each message's bytes copied from the conversation's cache when
    // an earlier request of this format wrote them, the rest of the body after it.
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"messages":["#);
    let system = request.system.as_deref().filter(|s| !s.is_empty());
    if let Some(system) = system {
        let message = ChatMessage {
            role: "system",
            content: ChatContent::Text(system.to_owned()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking_blocks: Vec::new(),
        };
        serde_json::to_writer(&mut out, &message).map_err(http::encode_error)?;
    }
    let key = if thinking_blocks { 2 } else { 1 };
    request.encoded.write_messages(
        &request.messages,
        request.messages.len(),
        key,
        system.is_some(),
        &mut out,
        |message, buf| {
            let mut wire = Vec::with_capacity(1);
            match message.role {
                Role::Assistant => assistant(message, thinking_blocks, &mut wire),
                _ => user(message, &mut wire)?,
            }
            for (i, m) in wire.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                serde_json::to_writer(&mut *buf, m).map_err(http::encode_error)?;
            }
            Ok(())
        },
    )?;
    out.extend_from_slice(b"],");
    let tools: Vec<ChatTool<'_>> = request
        .tools
        .iter()
        .map(|t| {
            let (parameters, strict) = crate::provider::strict::wire_schema(
                &t.name,
                &t.input_schema,
                crate::provider::strict::StrictDialect::OpenAi,
                request.strict_tools,
            );
            ChatTool {
                kind: "function",
                function: FunctionSpec {
                    name: &t.name,
                    description: &t.description,
                    parameters,
                    strict: strict.then_some(true),
                },
            }
        })
        .collect();
    let tool_choice = (!tools.is_empty()).then(|| match &request.tool_choice {
        ToolChoice::Auto => serde_json::json!("auto"),
        ToolChoice::Any => serde_json::json!("required"),
        ToolChoice::None => serde_json::json!("none"),
        ToolChoice::Tool(name) => {
            serde_json::json!({"type": "function", "function": {"name": name}})
        }
    });
    let (max_tokens, max_completion_tokens) = match max_tokens_field {
        MaxTokensField::MaxCompletionTokens => (None, Some(request.max_tokens)),
        MaxTokensField::MaxTokens => (Some(request.max_tokens), None),
    };
    let body = ChatRequest {
        model,
        max_tokens,
        max_completion_tokens,
        // OpenAI refuses `parallel_tool_calls` without tools.
        parallel_tool_calls: request.parallel_tool_calls.filter(|_| !tools.is_empty()),
        tools,
        tool_choice,
        temperature: request.temperature,
        top_p: request.top_p,
        stop: &request.stop_sequences,
        user: request.user.as_deref(),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    };
    let rest = http::body_bytes(&body, &request.extra)?;
    // `rest` is an object with at least `model`: its fields follow `messages`.
    out.extend_from_slice(rest.get(1..).unwrap_or_default());
    Ok(out)
}

fn joined_text(message: &Message) -> Option<String> {
    let texts: Vec<&str> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

fn assistant<'a>(message: &'a Message, thinking_blocks: bool, out: &mut Vec<ChatMessage<'a>>) {
    let tool_calls: Vec<ChatToolCall<'a>> = message
        .tool_uses()
        .map(|(id, name, input)| ChatToolCall {
            id,
            kind: "function",
            function: FunctionCall {
                name,
                arguments: if input.is_object() {
                    input.to_string()
                } else {
                    "{}".to_owned()
                },
            },
        })
        .collect();
    let content = match joined_text(message) {
        Some(text) => ChatContent::Text(text),
        None if !tool_calls.is_empty() => ChatContent::Null,
        None => return,
    };
    out.push(ChatMessage {
        role: "assistant",
        content,
        tool_calls,
        tool_call_id: None,
        thinking_blocks: if thinking_blocks {
            signed_thinking(message)
        } else {
            Vec::new()
        },
    });
}

/// The assistant message's thinking, to send back where it is signed (when the client is set
/// to, see `OpenAiClient::send_thinking_blocks`). Signed thinking comes only from servers that
/// front Anthropic models (LiteLLM's `thinking_blocks`), and they need it back in tool turns.
/// Unsigned reasoning (`reasoning_content` from DeepSeek, vLLM, Ollama …) is never sent: those
/// servers document no field for it in requests, and some reject one.
fn signed_thinking(message: &Message) -> Vec<ThinkingBlock<'_>> {
    let signed = message.content.iter().any(|b| match b {
        ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
        ContentBlock::RedactedThinking { .. } => true,
        _ => false,
    });
    if !signed {
        return Vec::new();
    }
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking {
                thinking,
                signature,
            } if !signature.is_empty() => Some(ThinkingBlock::Thinking {
                thinking,
                signature,
            }),
            ContentBlock::RedactedThinking { data } => {
                Some(ThinkingBlock::RedactedThinking { data })
            }
            _ => None,
        })
        .collect()
}

/// The label of the user message that carries a tool result's images (OpenAI tool messages
/// take text only): `Images returned by tool call <id>:`.
pub(crate) const TOOL_IMAGES_LABEL: &str = "Images returned by tool call ";

fn user<'a>(message: &'a Message, out: &mut Vec<ChatMessage<'a>>) -> Result<(), LlmError> {
    let mut tool_images: Vec<ContentPart<'a>> = Vec::new();
    for block in &message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
            ..
        } = block
        {
            let content = if *is_error {
                format!("{ERROR_RESULT_PREFIX}{content}")
            } else {
                content.clone()
            };
            out.push(ChatMessage {
                role: "tool",
                content: ChatContent::Text(content),
                tool_calls: Vec::new(),
                tool_call_id: Some(tool_use_id),
                thinking_blocks: Vec::new(),
            });
            if !images.is_empty() {
                tool_images.push(ContentPart::Text {
                    kind: "text",
                    text: format!("{TOOL_IMAGES_LABEL}{tool_use_id}:").into(),
                });
                for source in images {
                    tool_images.push(image_part(source)?);
                }
            }
        }
    }
    if !tool_images.is_empty() {
        out.push(ChatMessage {
            role: "user",
            content: ChatContent::Parts(tool_images),
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking_blocks: Vec::new(),
        });
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
                ContentBlock::Text { text } if !text.is_empty() => parts.push(ContentPart::Text {
                    kind: "text",
                    text: text.as_str().into(),
                }),
                ContentBlock::Image { source } => parts.push(image_part(source)?),
                ContentBlock::Document { source, title } => {
                    parts.push(file_part(source, title.as_deref())?)
                }
                ContentBlock::Other(value) => parts.push(ContentPart::Other(value)),
                _ => {}
            }
        }
        ChatContent::Parts(parts)
    } else {
        match joined_text(message) {
            Some(text) => ChatContent::Text(text),
            None => return Ok(()),
        }
    };
    out.push(ChatMessage {
        role: "user",
        content,
        tool_calls: Vec::new(),
        tool_call_id: None,
        thinking_blocks: Vec::new(),
    });
    Ok(())
}

/// An `image_url` part, checked against OpenAI's documented limits (PNG, JPEG, WebP or GIF;
/// at most 20 MB).
fn image_part(source: &MediaSource) -> Result<ContentPart<'_>, LlmError> {
    media::check_image(source, Provider::OpenAi)?;
    Ok(ContentPart::ImageUrl {
        kind: "image_url",
        image_url: ImageUrl {
            url: SourceUrl(source),
        },
    })
}

/// A `file` part for a PDF: Chat Completions takes file bytes, not URLs.
fn file_part<'a>(
    source: &'a MediaSource,
    title: Option<&'a str>,
) -> Result<ContentPart<'a>, LlmError> {
    match source {
        MediaSource::Base64 { .. } => {
            media::check_document(source, Provider::OpenAi)?;
            Ok(ContentPart::File {
                kind: "file",
                file: FilePart {
                    filename: title.unwrap_or("document.pdf"),
                    file_data: SourceUrl(source),
                },
            })
        }
        _ => Err(LlmError::InvalidRequest {
            message: "OpenAI Chat Completions cannot fetch a document from a URL: give the \
                      PDF's bytes (Document::pdf)"
                .to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::mock::decode;
    use super::*;
    use serde_json::{json, Value};

    fn encode_value(request: &ModelRequest, field: MaxTokensField) -> Value {
        serde_json::from_slice(&encode(request, "gpt-test", field, false).unwrap()).unwrap()
    }

    #[test]
    fn minimal_request() {
        let mut r = ModelRequest::new(vec![Message::user("hi")]);
        r.system = Some("be brief".into());
        let v = encode_value(&r, MaxTokensField::MaxTokens);
        assert_eq!(
            v,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"}
                ],
                "max_tokens": 4096,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        let v = encode_value(&r, MaxTokensField::MaxCompletionTokens);
        assert_eq!(v["max_completion_tokens"], 4096);
        assert!(v.get("max_tokens").is_none());
    }

    #[test]
    fn thinking_only_assistant_messages_are_omitted_and_parts_kept() {
        let r = ModelRequest::new(vec![
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::text("look"),
                    ContentBlock::Other(json!({"type": "image_url", "image_url": {"url": "u"}})),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::Thinking {
                    thinking: "t".into(),
                    signature: "s".into(),
                }],
            },
        ]);
        let v = encode_value(&r, MaxTokensField::MaxTokens);
        assert_eq!(v["messages"].as_array().unwrap().len(), 1);
        assert_eq!(
            v["messages"][0]["content"],
            json!([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}])
        );
    }

    fn decode_round_trip(history: Vec<Message>, thinking_blocks: bool) -> Vec<Message> {
        let bytes = encode(
            &ModelRequest::new(history),
            "gpt-test",
            MaxTokensField::MaxTokens,
            thinking_blocks,
        )
        .unwrap();
        decode(&serde_json::from_slice(&bytes).unwrap())
    }

    fn tool_conversation() -> Vec<Message> {
        crate::provider::fixtures::tool_conversation(ContentBlock::Thinking {
            thinking: "two calls".into(),
            signature: "sig".into(),
        })
    }

    #[test]
    fn decode_inverts_encode() {
        let history = tool_conversation();
        assert_eq!(decode_round_trip(history.clone(), true), history);
    }

    #[test]
    fn media_round_trip_through_the_body() {
        let history = crate::provider::fixtures::media_conversation();
        assert_eq!(decode_round_trip(history.clone(), false), history);
    }

    #[test]
    fn decode_sees_what_was_sent_without_thinking_blocks() {
        let mut expected = tool_conversation();
        expected[1].content.remove(0);
        assert_eq!(decode_round_trip(tool_conversation(), false), expected);
    }

    #[test]
    fn decode_skips_system_and_keeps_odd_arguments() {
        let body = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "look"},
                                         {"type": "image_url", "image_url": {"url": "u"}},
                                         {"type": "input_audio", "input_audio": {}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{oops"}}
            ]},
            {"role": "tool", "tool_call_id": "c", "content": "Error: bad"},
        ]});
        assert_eq!(
            decode(&body),
            [
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("look"),
                        // An image part reads back as an image, whatever its URL.
                        ContentBlock::Image {
                            source: MediaSource::Url { url: "u".into() }
                        },
                        // A part the crate does not model is kept as it is.
                        ContentBlock::Other(json!({"type": "input_audio", "input_audio": {}})),
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "c".into(),
                        name: "t".into(),
                        input: json!("{oops"),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::tool_result("c", "bad", true)],
                },
            ]
        );
    }

    #[test]
    fn decode_never_panics_on_odd_bodies() {
        for body in [
            json!(null),
            json!({"messages": {}}),
            json!({"messages": [1, {"role": "tool"}, {"role": "assistant", "tool_calls": [1, {"function": 2}],
                                                     "thinking_blocks": [3]}]}),
        ] {
            let _ = decode(&body);
        }
    }
}
