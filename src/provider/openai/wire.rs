//! OpenAI Chat Completions request types (serde), borrowed from the canonical request.

use serde::Serialize;

/// The body of `POST /chat/completions`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<ChatTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(crate) stop: &'a [String],
    pub(crate) stream: bool,
    pub(crate) stream_options: StreamOptions,
}

/// `stream_options`.
#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

/// One chat message.
#[derive(Debug, Serialize)]
pub(crate) struct ChatMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: ChatContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<ChatToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<&'a str>,
    /// Signed thinking sent back on an assistant message, in the shape LiteLLM documents for
    /// Anthropic models behind the Chat Completions format.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) thinking_blocks: Vec<ThinkingBlock<'a>>,
}

/// One entry of an assistant message's `thinking_blocks`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ThinkingBlock<'a> {
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

/// A message's content: a plain string, content parts, or `null`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ChatContent<'a> {
    Text(String),
    Parts(Vec<ContentPart<'a>>),
    Null,
}

/// One content part: text, or a part the crate does not model sent verbatim.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ContentPart<'a> {
    Text {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    },
    Other(&'a serde_json::Value),
}

/// An assistant's tool call.
#[derive(Debug, Serialize)]
pub(crate) struct ChatToolCall<'a> {
    pub(crate) id: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: FunctionCall<'a>,
}

/// The function of a tool call; `arguments` is a JSON string.
#[derive(Debug, Serialize)]
pub(crate) struct FunctionCall<'a> {
    pub(crate) name: &'a str,
    pub(crate) arguments: String,
}

/// A tool definition.
#[derive(Debug, Serialize)]
pub(crate) struct ChatTool<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: FunctionSpec<'a>,
}

/// A function definition.
#[derive(Debug, Serialize)]
pub(crate) struct FunctionSpec<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) parameters: &'a serde_json::Value,
}
