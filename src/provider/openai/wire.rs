//! OpenAI Chat Completions request types (serde), borrowed from the canonical request.

use serde::Serialize;

use crate::message::MediaSource;

/// The body of `POST /chat/completions`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    // `messages` is not here: `request::encode` writes it first, from the bytes the
    // conversation's earlier requests already encoded.
    pub(crate) model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<ChatTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parallel_tool_calls: Option<bool>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::provider::settings::decimal"
    )]
    pub(crate) temperature: Option<f32>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::provider::settings::decimal"
    )]
    pub(crate) top_p: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(crate) stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<&'a str>,
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

/// One content part: text, an image, a file, or a part the crate does not model sent
/// verbatim.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ContentPart<'a> {
    Text {
        #[serde(rename = "type")]
        kind: &'static str,
        text: std::borrow::Cow<'a, str>,
    },
    /// `{"type":"image_url","image_url":{"url":"data:…" | "https://…"}}`
    ImageUrl {
        #[serde(rename = "type")]
        kind: &'static str,
        image_url: ImageUrl<'a>,
    },
    /// `{"type":"file","file":{"filename":…,"file_data":"data:application/pdf;base64,…"}}`
    File {
        #[serde(rename = "type")]
        kind: &'static str,
        file: FilePart<'a>,
    },
    Other(&'a serde_json::Value),
}

/// `image_url`: the URL (a base64 source is written as a `data:` URL without a copy).
#[derive(Debug, Serialize)]
pub(crate) struct ImageUrl<'a> {
    pub(crate) url: SourceUrl<'a>,
}

/// A `file` part's fields.
#[derive(Debug, Serialize)]
pub(crate) struct FilePart<'a> {
    pub(crate) filename: &'a str,
    pub(crate) file_data: SourceUrl<'a>,
}

/// A media source as a URL: its own URL, or a `data:` URL written straight into the body.
#[derive(Debug)]
pub(crate) struct SourceUrl<'a>(pub(crate) &'a MediaSource);

impl Serialize for SourceUrl<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            MediaSource::Base64 { media_type, data } => {
                serializer.collect_str(&format_args!("data:{media_type};base64,{data}"))
            }
            MediaSource::Url { url } => serializer.serialize_str(url),
        }
    }
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
    pub(crate) parameters: std::borrow::Cow<'a, serde_json::Value>,
    /// `true` for a strict function (its schema normalised); not sent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) strict: Option<bool>,
}
