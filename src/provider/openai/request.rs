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
use crate::message::{ContentBlock, Message, Role};
use crate::provider::{ModelRequest, ToolChoice};

use super::wire::{
    ChatContent, ChatMessage, ChatRequest, ChatTool, ChatToolCall, ContentPart, FunctionCall,
    FunctionSpec, StreamOptions, ThinkingBlock,
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
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(ChatMessage {
            role: "system",
            content: ChatContent::Text(system.to_owned()),
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking_blocks: Vec::new(),
        });
    }
    for message in request.messages.iter() {
        match message.role {
            Role::Assistant => assistant(message, thinking_blocks, &mut messages),
            _ => user(message, &mut messages),
        }
    }
    let tools: Vec<ChatTool<'_>> = request
        .tools
        .iter()
        .map(|t| ChatTool {
            kind: "function",
            function: FunctionSpec {
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
            },
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
        messages,
        max_tokens,
        max_completion_tokens,
        tools,
        tool_choice,
        temperature: request.temperature,
        stop: &request.stop_sequences,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    };
    let value = serde_json::to_value(&body).map_err(|e| LlmError::InvalidRequest {
        message: format!("could not encode the request: {e}"),
    })?;
    crate::provider::http::merge_extra(value, &request.extra)
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

fn user<'a>(message: &'a Message, out: &mut Vec<ChatMessage<'a>>) {
    for block in &message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
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
        }
    }
    let has_parts = message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::Other(_)));
    let content = if has_parts {
        let parts = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } if !text.is_empty() => {
                    Some(ContentPart::Text { kind: "text", text })
                }
                ContentBlock::Other(value) => Some(ContentPart::Other(value)),
                _ => None,
            })
            .collect();
        ChatContent::Parts(parts)
    } else {
        match joined_text(message) {
            Some(text) => ChatContent::Text(text),
            None => return,
        }
    };
    out.push(ChatMessage {
        role: "user",
        content,
        tool_calls: Vec::new(),
        tool_call_id: None,
        thinking_blocks: Vec::new(),
    });
}

#[cfg(test)]
mod tests {
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
}
