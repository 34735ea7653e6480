//! Anthropic Messages request and error types (serde), borrowed from the canonical request.

use serde::{Deserialize, Serialize, Serializer};

use crate::message::MediaSource;

/// The body of `POST /v1/messages`.
#[derive(Debug, Serialize)]
pub(crate) struct MessagesRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) system: Option<WireSystem<'a>>,
    // `messages` is not here: `request::encode` writes it first, from the bytes the
    // conversation's earlier requests already encoded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<WireToolChoice<'a>>,
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
    pub(crate) stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<WireMetadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thinking: Option<WireThinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) context_management: Option<serde_json::Value>,
    pub(crate) stream: bool,
}

/// `system`: a string, or text blocks when the system prompt carries a cache breakpoint.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum WireSystem<'a> {
    Text(&'a str),
    Blocks([WireSystemBlock<'a>; 1]),
}

/// A text block of `system`.
#[derive(Debug, Serialize)]
pub(crate) struct WireSystemBlock<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) text: &'a str,
    pub(crate) cache_control: WireCacheControl,
}

/// `cache_control`: `{"type": "ephemeral"}`, with `"ttl": "1h"` for the long TTL (the 5-minute
/// default is sent without a `ttl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct WireCacheControl {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ttl: Option<&'static str>,
}

/// One message: a role and content blocks (always the array form).
#[derive(Debug, Serialize)]
pub(crate) struct WireMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: Vec<WireBlock<'a>>,
}

/// One content block as Anthropic expects it.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WireBlock<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<WireCacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ObjectOrEmpty<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<WireCacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: WireToolContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<WireCacheControl>,
    },
    /// `{"type":"image","source":{"type":"base64"|"url",…}}`
    Image {
        source: &'a MediaSource,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<WireCacheControl>,
    },
    /// `{"type":"document","source":{…},"title":…}`
    Document {
        source: &'a MediaSource,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<WireCacheControl>,
    },
    /// A block the crate does not model, sent back verbatim.
    #[serde(untagged)]
    Other(&'a serde_json::Value),
}

/// A `tool_result`'s content: a string, or text and image blocks when the tool returned
/// images.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum WireToolContent<'a> {
    Text(&'a str),
    Blocks(Vec<WireBlock<'a>>),
}

/// A JSON object, or `{}` for anything that is not one (Anthropic requires an object).
#[derive(Debug)]
pub(crate) struct ObjectOrEmpty<'a>(pub(crate) &'a serde_json::Value);

impl Serialize for ObjectOrEmpty<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            serde_json::Value::Object(map) => map.serialize(serializer),
            _ => serde_json::Map::new().serialize(serializer),
        }
    }
}

/// A tool definition: a custom tool (`type` left out), or a server tool (its `type` and
/// `name` only: the hosted tool search).
#[derive(Debug, Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<&'static str>,
    pub(crate) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_schema: Option<std::borrow::Cow<'a, serde_json::Value>>,
    /// `true` for a strict tool (its schema normalised); not sent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) strict: Option<bool>,
    /// `true` for a tool deferred to the hosted tool search; not sent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) defer_loading: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_control: Option<WireCacheControl>,
}

/// `metadata`: the end user's id.
#[derive(Debug, Serialize)]
pub(crate) struct WireMetadata<'a> {
    pub(crate) user_id: &'a str,
}

/// `tool_choice`; `disable_parallel_tool_use` is sent only when set.
#[derive(Debug, Serialize)]
pub(crate) struct WireToolChoice<'a> {
    #[serde(flatten)]
    pub(crate) choice: WireChoice<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) disable_parallel_tool_use: Option<bool>,
}

/// The kind of `tool_choice`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WireChoice<'a> {
    Auto,
    Any,
    None,
    Tool { name: &'a str },
}

/// `thinking`: extended thinking with a token budget.
#[derive(Debug, Serialize)]
pub(crate) struct WireThinking {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) budget_tokens: u32,
}

/// An error body: `{"type":"error","error":{"type":…,"message":…}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorBody {
    pub(crate) error: ErrorDetail,
}

/// The inner error object.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorDetail {
    #[serde(rename = "type", default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
}
