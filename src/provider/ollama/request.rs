//! Encodes a [`ModelRequest`] into an Ollama `/api/chat` request body, and its inverse for
//! the mock server's checks.
//!
//! - The system prompt is the first message (`role: system`).
//! - A user message's text blocks are joined with `\n` into `content`; its images (base64
//!   only: Ollama takes no image URLs) go in `images`, as bare base64. Documents are refused:
//!   Ollama has no document input.
//! - An assistant message's text is `content`, its thinking `thinking` (Ollama's unsigned
//!   reasoning, sent back so the model's template can show it), its tool calls `tool_calls`
//!   with the arguments as a JSON object (a non-object input becomes `{}`). Signatures,
//!   redacted thinking, Responses reasoning items and unmodelled blocks have no Ollama form
//!   and are left out; an assistant message left with nothing is omitted.
//! - Each tool result becomes one `role: tool` message with `tool_name` (the name of the call
//!   it answers), placed before the rest of its user message, in the calls' order. Ollama
//!   has no call ids in its documented request format, so the order is what ties a result to
//!   its call. Ollama has no error flag: the content of an error result is prefixed with
//!   `Error: `. A result's images go in its tool message's `images` (Ollama reads the images
//!   of every message, whatever its role). With `OllamaClient::send_call_ids`, calls also
//!   carry their `id` and results their `tool_call_id` (fields of Ollama's Go types, not of
//!   its API docs nor of its Python client).
//! - Tools: `[{type: function, function: {name, description, parameters}}]`. Ollama has no
//!   tool choice: [`ToolChoice::None`] sends no tools (Ollama takes a history with tool calls
//!   without them), [`ToolChoice::Tool`] sends only the named tool (the model may still
//!   answer in text), [`ToolChoice::Any`] sends every tool (the model may still answer in
//!   text).
//! - `options`: the client's options, then `temperature`, `top_p`, `num_predict`
//!   (`max_tokens`) and `stop` from the request, which replace the client's values of the
//!   same keys.
//! - `think`: the client's setting when it has one; otherwise `false` for a
//!   [`ModelRequest::thinking_budget`] of 0, `true` for any other budget, absent without one.
//! - `keep_alive` when the client sets one; `stream: true`; `extra` fields merged last at the
//!   top level (`format` for structured output goes there), a clash refused.
//! - Not sent (Ollama has no field for them): `parallel_tool_calls`, `user`, prompt-cache
//!   breakpoints (Ollama caches the prompt prefix by itself).

use serde_json::{Map, Value as Json};

use crate::error::LlmError;
use crate::media::ImageFormat;
use crate::message::{ContentBlock, MediaSource, Message, Role};
use crate::provider::{ModelRequest, ToolChoice};

use super::wire::{CallFunction, ChatMessage, ChatRequest, FunctionSpec, Tool, ToolCall};

/// The prefix of the content of a tool result that is an error.
pub(crate) const ERROR_RESULT_PREFIX: &str = "Error: ";

/// The client's settings the body carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct EncodeOptions {
    /// `options` the client sends with every request (the request's own values win).
    pub(crate) options: Map<String, Json>,
    /// `keep_alive`, as sent.
    pub(crate) keep_alive: Option<Json>,
    /// `think`, as sent; `None`: from the request's thinking budget.
    pub(crate) think: Option<Json>,
    /// Whether calls carry their `id` and results their `tool_call_id`.
    pub(crate) call_ids: bool,
}

fn invalid(message: impl Into<String>) -> LlmError {
    LlmError::InvalidRequest {
        message: message.into(),
    }
}

/// The JSON body for `request`, using `default_model` when the request names none.
pub(crate) fn encode(
    request: &ModelRequest,
    default_model: &str,
    settings: &EncodeOptions,
) -> Result<Vec<u8>, LlmError> {
    let model = request.model.as_deref().unwrap_or(default_model);
    if model.is_empty() {
        return Err(invalid(
            "no model: set one with OllamaClient::model(..) (or OLLAMA_MODEL), or in \
             ModelRequest::model",
        ));
    }
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(message("system", system.to_owned()));
    }
    // The name of each call, for the `tool_name` of its result.
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for m in request.messages.iter() {
        match m.role {
            Role::Assistant => {
                for (id, name, _) in m.tool_uses() {
                    names.insert(id, name);
                }
                assistant(m, settings.call_ids, &mut messages);
            }
            _ => user(m, &names, settings.call_ids, &mut messages)?,
        }
    }
    let tools: Vec<Tool<'_>> = match &request.tool_choice {
        ToolChoice::None => Vec::new(),
        ToolChoice::Tool(name) => {
            let chosen: Vec<Tool<'_>> = request
                .tools
                .iter()
                .filter(|t| &t.name == name)
                .map(tool)
                .collect();
            if chosen.is_empty() {
                return Err(invalid(format!(
                    "the tool choice names `{name}`, which is not among the request's tools"
                )));
            }
            chosen
        }
        _ => request.tools.iter().map(tool).collect(),
    };
    let mut options = settings.options.clone();
    let mut set = |key: &str, value: Json| {
        options.insert(key.to_owned(), value);
    };
    if let Some(t) = request.temperature {
        set("temperature", decimal(t));
    }
    if let Some(p) = request.top_p {
        set("top_p", decimal(p));
    }
    set("num_predict", Json::from(request.max_tokens));
    if !request.stop_sequences.is_empty() {
        set("stop", Json::from(request.stop_sequences.clone()));
    }
    let think = settings
        .think
        .clone()
        .or_else(|| request.thinking_budget.map(|budget| Json::Bool(budget > 0)));
    let body = ChatRequest {
        model,
        messages,
        tools,
        stream: true,
        think,
        options,
        keep_alive: settings.keep_alive.clone(),
    };
    crate::provider::transport::http::body_bytes(&body, &request.extra)
}

/// An `f32` setting as the decimal it was written as (`0.1`, not `0.10000000149011612`).
fn decimal(v: f32) -> Json {
    let exact: f64 = v.to_string().parse().unwrap_or(f64::from(v));
    serde_json::Number::from_f64(exact).map_or(Json::Null, Json::Number)
}

fn message(role: &'static str, content: String) -> ChatMessage<'static> {
    ChatMessage {
        role,
        content,
        thinking: None,
        images: Vec::new(),
        tool_calls: Vec::new(),
        tool_name: None,
        tool_call_id: None,
    }
}

fn tool(spec: &crate::message::ToolSpec) -> Tool<'_> {
    Tool {
        kind: "function",
        function: FunctionSpec {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.input_schema,
        },
    }
}

fn joined_text(message: &Message) -> String {
    let texts: Vec<&str> = message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

fn assistant<'a>(m: &'a Message, call_ids: bool, out: &mut Vec<ChatMessage<'a>>) {
    let tool_calls: Vec<ToolCall<'a>> = m
        .tool_uses()
        .map(|(id, name, input)| ToolCall {
            id: call_ids.then_some(id),
            function: CallFunction {
                name,
                arguments: if input.is_object() {
                    std::borrow::Cow::Borrowed(input)
                } else {
                    std::borrow::Cow::Owned(Json::Object(Map::new()))
                },
            },
        })
        .collect();
    let thinking: Vec<&str> = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking { thinking, .. } if !thinking.is_empty() => {
                Some(thinking.as_str())
            }
            _ => None,
        })
        .collect();
    let content = joined_text(m);
    if content.is_empty() && tool_calls.is_empty() && thinking.is_empty() {
        return;
    }
    out.push(ChatMessage {
        role: "assistant",
        content,
        thinking: (!thinking.is_empty()).then(|| thinking.join("\n")),
        images: Vec::new(),
        tool_calls,
        tool_name: None,
        tool_call_id: None,
    });
}

/// The base64 data of an image Ollama takes (PNG, JPEG, GIF or WebP bytes).
fn image(source: &MediaSource) -> Result<&str, LlmError> {
    match source {
        MediaSource::Base64 { media_type, data } => {
            if ImageFormat::from_media_type(media_type).is_none() {
                return Err(invalid(format!(
                    "Ollama does not take images of type `{media_type}` (only image/png, \
                     image/jpeg, image/gif and image/webp)"
                )));
            }
            Ok(data)
        }
        MediaSource::Url { .. } => Err(invalid(
            "Ollama takes images as base64 bytes only, not URLs: fetch the image and give its \
             bytes (Image::from_bytes)",
        )),
        #[allow(unreachable_patterns)]
        _ => Err(invalid("Ollama cannot take this image source")),
    }
}

fn user<'a>(
    m: &'a Message,
    names: &std::collections::HashMap<&'a str, &'a str>,
    call_ids: bool,
    out: &mut Vec<ChatMessage<'a>>,
) -> Result<(), LlmError> {
    let mut images = Vec::new();
    for block in &m.content {
        match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                images: result_images,
                ..
            } => {
                let content = if *is_error {
                    format!("{ERROR_RESULT_PREFIX}{content}")
                } else {
                    content.clone()
                };
                // Ollama ties a result to its call by the function's name (and position): a
                // result for a call the conversation does not have would answer another.
                let Some(name) = names.get(tool_use_id.as_str()).copied() else {
                    return Err(invalid(format!(
                        "the tool result for call `{tool_use_id}` answers no tool call of the \
                         conversation; Ollama needs the function's name"
                    )));
                };
                let mut sent = Vec::with_capacity(result_images.len());
                for source in result_images {
                    sent.push(image(source)?);
                }
                out.push(ChatMessage {
                    role: "tool",
                    content,
                    thinking: None,
                    images: sent,
                    tool_calls: Vec::new(),
                    tool_name: Some(name),
                    tool_call_id: call_ids.then_some(tool_use_id.as_str()),
                });
            }
            ContentBlock::Image { source } => images.push(image(source)?),
            ContentBlock::Document { .. } => {
                return Err(invalid(
                    "Ollama's chat API takes no documents (PDF): extract the text and send it \
                     as text, or use a provider that reads documents",
                ))
            }
            _ => {}
        }
    }
    let content = joined_text(m);
    if content.is_empty() && images.is_empty() {
        return Ok(());
    }
    out.push(ChatMessage {
        role: "user",
        content,
        thinking: None,
        images,
        tool_calls: Vec::new(),
        tool_name: None,
        tool_call_id: None,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::mock::decode;
    use super::*;
    use serde_json::json;
    use serde_json::Value;

    fn body(request: &ModelRequest) -> Value {
        serde_json::from_slice(&encode(request, "m", &EncodeOptions::default()).unwrap()).unwrap()
    }

    #[test]
    fn a_tool_round_trip_decodes_back() {
        let history = vec![
            Message::user("add"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("sure"),
                    ContentBlock::ToolUse {
                        id: "a".into(),
                        name: "add".into(),
                        input: json!({"x": 1}),
                    },
                    ContentBlock::ToolUse {
                        id: "b".into(),
                        name: "mul".into(),
                        input: json!("not an object"),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::tool_result("a", "2", false),
                    ContentBlock::tool_result("b", "boom", true),
                    ContentBlock::text("thanks"),
                ],
            },
        ];
        let request = ModelRequest::new(history);
        let value = body(&request);
        assert_eq!(
            value["messages"][1]["tool_calls"][1]["function"]["arguments"],
            json!({})
        );
        assert_eq!(value["messages"][3]["tool_name"], "mul");
        assert_eq!(value["messages"][3]["content"], "Error: boom");
        let decoded = decode(&value);
        assert_eq!(decoded.len(), 3);
        let check = crate::context::validate_history(&decoded);
        assert!(check.is_ok(), "{check:?}");
        assert!(matches!(
            &decoded[2].content[1],
            ContentBlock::ToolResult { is_error: true, content, .. } if content == "boom"
        ));
    }

    #[test]
    fn the_inverse_reports_results_that_answer_no_call() {
        let history = |tool: Value| {
            json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "x1", "function": {"name": "add", "arguments": {}}}]},
                tool
            ]})
        };
        let valid = |body: Value| crate::context::validate_history(&decode(&body)).is_ok();
        assert!(valid(history(
            json!({"role": "tool", "content": "1", "tool_name": "add"})
        )));
        assert!(valid(history(
            json!({"role": "tool", "content": "1", "tool_call_id": "x1"})
        )));
        assert!(!valid(history(
            json!({"role": "tool", "content": "1", "tool_name": "mul"})
        )));
        assert!(!valid(history(
            json!({"role": "tool", "content": "1", "tool_call_id": "x2"})
        )));
        // A second result for the only call answers nothing.
        let mut twice = history(json!({"role": "tool", "content": "1"}));
        if let Some(messages) = twice["messages"].as_array_mut() {
            messages.push(json!({"role": "tool", "content": "2"}));
        }
        assert!(!valid(twice));
    }

    #[test]
    fn extra_clashes_and_documents_are_refused() {
        let mut request = ModelRequest::new(vec![Message::user("hi")]);
        request.extra.insert("options".into(), json!({}));
        let err = encode(&request, "m", &EncodeOptions::default()).unwrap_err();
        assert!(err.to_string().contains("`options`"), "{err}");
        let doc = ModelRequest::new(vec![Message {
            role: Role::User,
            content: vec![ContentBlock::Document {
                source: MediaSource::Url {
                    url: "https://x/y.pdf".into(),
                },
                title: None,
            }],
        }]);
        let err = encode(&doc, "m", &EncodeOptions::default()).unwrap_err();
        assert!(err.to_string().contains("Ollama"), "{err}");
    }
}
