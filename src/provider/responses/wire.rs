//! OpenAI Responses request types (serde), borrowed from the canonical request. Field names and
//! shapes follow the official SDK's `ResponseCreateParams` and its input item types.

use serde::Serialize;

/// The body of `POST /responses`.
#[derive(Debug, Serialize)]
pub(crate) struct ResponsesRequest<'a> {
    pub(crate) model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) instructions: Option<&'a str>,
    // `input` is not here: `request::encode` writes it first, from the bytes the
    // conversation's earlier requests already encoded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<serde_json::Value>,
    pub(crate) max_output_tokens: u32,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reasoning: Option<Reasoning<'a>>,
    pub(crate) store: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) include: Vec<&'static str>,
    /// `context_management: [{"type": "compaction", "compact_threshold": n}]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) context_management: Option<[ContextManagement; 1]>,
    pub(crate) stream: bool,
}

/// One entry of `context_management` (`response_create_params.ContextManagement`).
#[derive(Debug, Serialize)]
pub(crate) struct ContextManagement {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) compact_threshold: u32,
}

/// `reasoning: {effort, summary}`.
#[derive(Debug, Serialize)]
pub(crate) struct Reasoning<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<&'a str>,
}

/// One item of `input`: a typed one, or an item kept as it came (the hosted tool search's
/// `tool_search_call` and `tool_search_output`, `ToolSearchCall` and
/// `ResponseToolSearchOutputItemParamParam` in the SDK).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum AnyItem<'a> {
    Typed(InputItem<'a>),
    Verbatim(&'a serde_json::Value),
}

impl<'a> From<InputItem<'a>> for AnyItem<'a> {
    fn from(item: InputItem<'a>) -> Self {
        AnyItem::Typed(item)
    }
}

/// One typed item of `input`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum InputItem<'a> {
    /// `EasyInputMessageParam`: a user or assistant message.
    Message {
        role: &'static str,
        content: MessageContent<'a>,
    },
    /// `ResponseFunctionToolCallParam`.
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: String,
    },
    /// `FunctionCallOutput`: text, or text and images as input parts.
    FunctionCallOutput {
        call_id: &'a str,
        output: Output<'a>,
    },
    /// `ResponseReasoningItemParam`, sent back as it came.
    Reasoning {
        id: &'a str,
        summary: Vec<SummaryText<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
    },
    /// `ResponseCompactionItemParamParam`, sent back as it came.
    Compaction {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        encrypted_content: &'a str,
    },
}

/// A message's content: a string, or a list of input parts.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum MessageContent<'a> {
    Text(String),
    Parts(Vec<InputPart<'a>>),
}

/// A function call's output: a string, or a list of input parts (text and images).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Output<'a> {
    Text(String),
    Parts(Vec<InputPart<'a>>),
}

/// One input content part: `input_text`, `input_image`, `input_file`, or a part the crate does
/// not model sent verbatim.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum InputPart<'a> {
    Text {
        #[serde(rename = "type")]
        kind: &'static str,
        text: std::borrow::Cow<'a, str>,
    },
    /// `ResponseInputImageParam`: `detail` is required there.
    Image {
        #[serde(rename = "type")]
        kind: &'static str,
        image_url: SourceUrl<'a>,
        detail: &'static str,
    },
    /// `ResponseInputFileParam`: the bytes as a data URL, or a URL the server fetches.
    File {
        #[serde(rename = "type")]
        kind: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_data: Option<SourceUrl<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        file_url: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        filename: Option<&'a str>,
    },
    Other(&'a serde_json::Value),
}

/// A media source as OpenAI takes it: a `data:` URL for bytes (written straight into the body,
/// not copied first), the URL itself otherwise.
#[derive(Debug)]
pub(crate) struct SourceUrl<'a>(pub(crate) &'a crate::message::MediaSource);

impl Serialize for SourceUrl<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            crate::message::MediaSource::Base64 { media_type, data } => {
                serializer.collect_str(&format_args!("data:{media_type};base64,{data}"))
            }
            crate::message::MediaSource::Url { url } => serializer.serialize_str(url),
        }
    }
}

/// `{"type":"summary_text","text":…}`.
#[derive(Debug, Serialize)]
pub(crate) struct SummaryText<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) text: &'a str,
}

/// One entry of `tools`: a function, or the hosted tool search.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Tool<'a> {
    Function(FunctionTool<'a>),
    /// `ToolSearchToolParam`: `{"type": "tool_search"}`, executed by the server (the default
    /// `execution`), over the functions sent with `defer_loading: true`.
    Search {
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

/// `FunctionToolParam`: a flat function tool.
#[derive(Debug, Serialize)]
pub(crate) struct FunctionTool<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) parameters: std::borrow::Cow<'a, serde_json::Value>,
    /// Required by the type (nullable); `true` only for a schema normalised for strict mode
    /// (every property required, no additional properties), `false` otherwise.
    pub(crate) strict: bool,
    /// `true` for a function deferred to the hosted tool search; not sent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) defer_loading: Option<bool>,
}
