//! The conversation model: one shape for every provider.
//!
//! A conversation is a list of [`Message`]s, each a [`Role`] and a list of type-tagged
//! [`ContentBlock`]s. The provider encoders translate it into each wire format; the stream
//! decoders and the [`StreamAssembler`](crate::wire::StreamAssembler) build it from responses.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user, including tool results sent back to the model.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message with one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// An assistant message with one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// The concatenated text of the message's text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls in this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &serde_json::Value)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// One block of a message's content.
///
/// Variants with fields may gain fields (as `ToolResult` gained `images`): match them with
/// `..` (`ContentBlock::Text { text, .. }`), and build a `ToolResult` with
/// [`ContentBlock::tool_result`] or [`ContentBlock::tool_result_with_images`] (it is
/// `#[non_exhaustive]`), so that a new field breaks none of your code.
///
/// Serialized with a `type` tag in snake case (`{"type":"text","text":"…"}`), the same shape
/// Anthropic uses. Blocks the crate does not model (Anthropic `server_tool_use`,
/// `web_search_tool_result`, future types) are kept verbatim in [`ContentBlock::Other`] and
/// sent back unmodified.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// The model's visible reasoning, with the provider's signature that must be sent back
    /// unmodified in tool turns.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The provider's signature over it (empty when the provider sends none).
        #[serde(default)]
        signature: String,
    },
    /// Reasoning the provider encrypted; sent back unmodified.
    RedactedThinking {
        /// The opaque payload.
        data: String,
    },
    /// A call of a tool by the model.
    ToolUse {
        /// The provider's call id; the result refers to it.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments (a JSON object).
        input: serde_json::Value,
    },
    /// The result of a tool call, sent back in a user message.
    #[non_exhaustive]
    ToolResult {
        /// The id of the call this answers.
        tool_use_id: String,
        /// What the tool returned, as text the model reads.
        content: String,
        /// Whether the tool failed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// Images the tool returned with its text. Anthropic carries them inside the
        /// `tool_result`; OpenAI Chat cannot, so they go in a user message right after the
        /// tool messages.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<MediaSource>,
        /// The result as structure, when the tool returned JSON
        /// ([`ToolOutput::json`](crate::ToolOutput::json)); `content` is then its compact text.
        /// Gemini gets it as the `functionResponse.response` object (a value that is not an
        /// object as `{"result": value}`), Bedrock as a `json` block when it is an object; the
        /// other formats take text and get `content`. Sent only while `content` is still its
        /// text (a result cut down by compaction goes as the text it became).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        json: Option<Box<serde_json::Value>>,
    },
    /// An image (PNG, JPEG, GIF or WebP) in a user message. Build one with
    /// [`Image`](crate::media::Image), which checks the bytes.
    Image {
        /// Where the image is: its bytes (base64) or a URL.
        source: MediaSource,
    },
    /// A document (PDF) in a user message. Anthropic reads it natively; OpenAI Chat gets it as
    /// a `file` part. Build one with [`Document`](crate::media::Document).
    Document {
        /// Where the document is: its bytes (base64) or a URL.
        source: MediaSource,
        /// A title shown to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    /// An OpenAI Responses reasoning item, kept whole so it can be sent back verbatim in
    /// later turns (a reasoning model keeps its chain of thought across tool calls only when
    /// its reasoning items come back). Other providers' encoders leave it out.
    Reasoning {
        /// The item id (`rs_…`).
        id: String,
        /// The summary texts, one per summary part.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// The encrypted reasoning (`include: ["reasoning.encrypted_content"]`), when sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
    /// An OpenAI Responses compaction item (server-side compaction, `context_management`
    /// with a `compact_threshold`): the opaque, encrypted state of the turns the server
    /// compacted, kept whole so it goes back in later requests as reasoning items do. The
    /// turns it stands for, which the server no longer reads, leave the history
    /// ([`ContextManager::apply_server_compaction`](crate::ContextManager::apply_server_compaction));
    /// other providers' encoders leave the item out, so a fallback model of another format
    /// reads the first message (the task), a note and the turns after the item.
    Compaction {
        /// The item id (`cmp_…`), when the server gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The encrypted compacted state.
        encrypted_content: String,
    },
    /// A block type the crate does not model, kept verbatim (including its `type`).
    #[serde(untagged)]
    Other(serde_json::Value),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A tool result block.
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error,
            images: Vec::new(),
            json: None,
        }
    }

    /// A successful tool result that is JSON: `content` is its compact text, and the formats
    /// that take structure get the value itself (see [`ContentBlock::ToolResult`]'s `json`).
    pub fn tool_result_json(tool_use_id: impl Into<String>, value: serde_json::Value) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: value.to_string(),
            is_error: false,
            images: Vec::new(),
            json: Some(Box::new(value)),
        }
    }

    /// A tool result with images (say, a screenshot) beside its text.
    pub fn tool_result_with_images(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
        images: Vec<MediaSource>,
    ) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error,
            images,
            json: None,
        }
    }
}

/// The structured form of a tool result to send, when it has one that still matches its
/// text: `json` while `content` is its compact JSON text (compaction or a hand edit that
/// changed the text leaves the text to send).
pub(crate) fn structured_result<'a>(
    content: &str,
    json: Option<&'a serde_json::Value>,
) -> Option<&'a serde_json::Value> {
    json.filter(|value| serde_json::to_string(value).ok().as_deref() == Some(content))
}

/// Where an image's or a document's bytes are.
///
/// Serialized with a `type` tag, the shape of Anthropic's `source`:
/// `{"type":"base64","media_type":"image/png","data":"…"}` or `{"type":"url","url":"…"}`.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MediaSource {
    /// The bytes, base64-encoded (standard alphabet, padded), with their media type.
    Base64 {
        /// `image/png`, `image/jpeg`, `image/gif`, `image/webp` or `application/pdf`.
        media_type: String,
        /// The base64 text.
        data: String,
    },
    /// An `https://` (or `http://`) URL the provider fetches itself.
    Url {
        /// The URL.
        url: String,
    },
}

impl MediaSource {
    /// The media type, where the source says it (URLs do not).
    pub fn media_type(&self) -> Option<&str> {
        match self {
            MediaSource::Base64 { media_type, .. } => Some(media_type),
            MediaSource::Url { .. } => None,
        }
    }

    /// A `data:` URL for base64 sources (OpenAI's form), the URL itself otherwise.
    pub fn to_url(&self) -> String {
        match self {
            MediaSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
            MediaSource::Url { url } => url.clone(),
        }
    }
}

/// Why the model stopped.
///
/// Serialized as a snake-case string. Anthropic's values map one to one; OpenAI's
/// `stop` → `end_turn`, `tool_calls`/`function_call` → `tool_use`, `length` → `max_tokens`,
/// `content_filter` → `content_filter`. Values neither provider documents are kept in
/// [`StopReason::Other`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model wants tools called.
    ToolUse,
    /// The output hit `max_tokens`; the answer is cut off.
    MaxTokens,
    /// A stop sequence was produced.
    StopSequence,
    /// The model refused.
    Refusal,
    /// A long-running server-side turn was paused; send the conversation back to continue.
    PauseTurn,
    /// The provider's content filter stopped the output.
    ContentFilter,
    /// The context window was exhausted while generating.
    ModelContextWindowExceeded,
    /// A value the crate does not know, kept as sent.
    #[serde(untagged)]
    Other(String),
}

impl StopReason {
    /// Maps a provider's stop/finish reason string (Anthropic or OpenAI spelling).
    pub fn from_wire(s: &str) -> StopReason {
        match s {
            "end_turn" | "stop" => StopReason::EndTurn,
            "tool_use" | "tool_calls" | "function_call" => StopReason::ToolUse,
            "max_tokens" | "length" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "refusal" => StopReason::Refusal,
            "pause_turn" => StopReason::PauseTurn,
            "content_filter" => StopReason::ContentFilter,
            "model_context_window_exceeded" => StopReason::ModelContextWindowExceeded,
            other => StopReason::Other(other.to_owned()),
        }
    }
}

/// Token usage of one response, or summed over a run.
///
/// `input_tokens` counts uncached prompt tokens (Anthropic's meaning; for OpenAI it is
/// `prompt_tokens` minus `cached_tokens`), so the four fields add up to what was processed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens not read from the cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Of `output_tokens`, those a reasoning model spent thinking (OpenAI
    /// `completion_tokens_details.reasoning_tokens`; 0 where the provider does not say).
    /// Already counted in `output_tokens`, so [`Usage::total_tokens`] does not add it again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// All prompt tokens: uncached, cache reads and cache writes.
    pub fn total_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
    }

    /// The share of the prompt read from the provider's cache: `cache_read_input_tokens` over
    /// [`total_input_tokens`](Self::total_input_tokens), from 0.0 to 1.0; 0.0 when there was no
    /// input. On a run's summed usage it is the share of all input tokens served from cache.
    ///
    /// ```
    /// use agent_loop::Usage;
    ///
    /// let usage = Usage {
    ///     input_tokens: 100,
    ///     cache_read_input_tokens: 800,
    ///     cache_creation_input_tokens: 100,
    ///     ..Usage::default()
    /// };
    /// assert_eq!(usage.cache_hit_ratio(), 0.8);
    /// assert_eq!(Usage::default().cache_hit_ratio(), 0.0);
    /// ```
    pub fn cache_hit_ratio(&self) -> f64 {
        let total = self.total_input_tokens();
        if total == 0 {
            return 0.0;
        }
        self.cache_read_input_tokens as f64 / total as f64
    }

    /// Prompt plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.total_input_tokens().saturating_add(self.output_tokens)
    }

    /// Adds another usage to this one, field by field (saturating).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        self.add(&rhs);
    }
}

/// A tool as the model sees it: name, description and JSON Schema of its input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: serde_json::Value,
}

/// A conversation as stored: the system prompt and the messages. The persistence format of a
/// [`ContextManager`](crate::ContextManager) ([`snapshot`](crate::ContextManager::snapshot) /
/// [`restore`](crate::ContextManager::restore)); serializes as
/// `{"system": "…", "messages": [ … ]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The messages, oldest first.
    #[serde(default)]
    pub messages: Vec<Message>,
}

impl Conversation {
    /// A conversation with the given system prompt and messages.
    pub fn new(system: Option<String>, messages: Vec<Message>) -> Self {
        Conversation { system, messages }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_blocks_round_trip_with_type_tags() {
        let blocks = vec![
            ContentBlock::text("hi"),
            ContentBlock::Thinking {
                thinking: "t".into(),
                signature: "s".into(),
            },
            ContentBlock::RedactedThinking { data: "d".into() },
            ContentBlock::ToolUse {
                id: "1".into(),
                name: "n".into(),
                input: json!({"a": 1}),
            },
            ContentBlock::tool_result("1", "out", true),
            ContentBlock::Other(
                json!({"type": "server_tool_use", "id": "x", "name": "web_search", "input": {}}),
            ),
        ];
        let v = serde_json::to_value(&blocks).unwrap();
        assert_eq!(v[0], json!({"type": "text", "text": "hi"}));
        assert_eq!(
            v[4],
            json!({"type": "tool_result", "tool_use_id": "1", "content": "out", "is_error": true})
        );
        assert_eq!(v[5]["type"], "server_tool_use");
        let back: Vec<ContentBlock> = serde_json::from_value(v).unwrap();
        assert_eq!(back, blocks);
    }

    #[test]
    fn cache_hit_ratio_is_reads_over_all_input() {
        let u = |input, read, write| Usage {
            input_tokens: input,
            cache_read_input_tokens: read,
            cache_creation_input_tokens: write,
            output_tokens: 999,
            ..Usage::default()
        };
        assert_eq!(u(0, 0, 0).cache_hit_ratio(), 0.0);
        assert_eq!(u(10, 0, 0).cache_hit_ratio(), 0.0);
        assert_eq!(u(0, 10, 0).cache_hit_ratio(), 1.0);
        // Writes are input too, not hits.
        assert_eq!(u(25, 50, 25).cache_hit_ratio(), 0.5);
        // Saturated totals stay within 0..=1.
        let r = u(u64::MAX, u64::MAX, 0).cache_hit_ratio();
        assert!((0.0..=1.0).contains(&r), "{r}");
        // Summed over turns, it is the share of all input served from cache.
        let mut run = u(100, 0, 900);
        run += u(100, 900, 0);
        assert_eq!(run.cache_hit_ratio(), 0.45);
    }

    #[test]
    fn stop_reason_serializes_snake_case_and_keeps_unknown_values() {
        assert_eq!(
            serde_json::to_string(&StopReason::EndTurn).unwrap(),
            "\"end_turn\""
        );
        assert_eq!(
            serde_json::to_string(&StopReason::MaxTokens).unwrap(),
            "\"max_tokens\""
        );
        let other: StopReason = serde_json::from_str("\"brand_new\"").unwrap();
        assert_eq!(other, StopReason::Other("brand_new".into()));
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"brand_new\"");
        assert_eq!(StopReason::from_wire("length"), StopReason::MaxTokens);
        assert_eq!(StopReason::from_wire("tool_calls"), StopReason::ToolUse);
    }
}
