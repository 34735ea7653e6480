//! Ollama `/api/chat` request types (serde), borrowed from the canonical request. The field
//! names are those of Ollama's `api.ChatRequest` / `api.Message` and of the Python client's
//! `ChatRequest` / `Message` (`ollama/_types.py`).

use serde::Serialize;
use serde_json::{Map, Value};

/// The body of `POST /api/chat`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<Tool<'a>>,
    pub(crate) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) think: Option<Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub(crate) options: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) keep_alive: Option<Value>,
}

/// One chat message (`system`, `user`, `assistant` or `tool`).
#[derive(Debug, Serialize)]
pub(crate) struct ChatMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thinking: Option<String>,
    /// Base64 image data, no `data:` prefix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) images: Vec<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<ToolCall<'a>>,
    /// The tool whose result a `tool` message carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_name: Option<&'a str>,
    /// The call a `tool` message answers (Ollama's `api.Message.ToolCallID`; sent only when
    /// the client is set to send call ids).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<&'a str>,
}

/// An assistant message's tool call: the arguments as a JSON object.
#[derive(Debug, Serialize)]
pub(crate) struct ToolCall<'a> {
    /// The call's id (Ollama's `api.ToolCall.ID`; sent only when the client is set to send
    /// call ids).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<&'a str>,
    pub(crate) function: CallFunction<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct CallFunction<'a> {
    pub(crate) name: &'a str,
    pub(crate) arguments: std::borrow::Cow<'a, Value>,
}

/// A tool definition.
#[derive(Debug, Serialize)]
pub(crate) struct Tool<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: FunctionSpec<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionSpec<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) parameters: &'a Value,
}
