//! The wire layer, sans-IO: body bytes → provider events → one response.
//!
//! ```text
//!  body bytes ─► SseDecoder ─► provider decoder ─► LlmEvent ─► StreamAssembler ─► ModelResponse
//!               └──────────── WireDecoder ───────────┘
//! ```
//!
//! Framing ([`sse`], newline-delimited JSON, AWS event stream) and assembly live here; the
//! provider formats' decoders live in [`provider`](crate::provider), one folder per format,
//! and [`WireDecoder`] puts a framing and a provider decoder together. Nothing here does I/O,
//! reads a clock or knows of tools or the agent.

use serde::{Deserialize, Serialize};

use crate::error::RateLimits;
use crate::message::{StopReason, Usage};
use sse::SseLimits;

mod assemble;
pub(crate) mod decoder;
pub(crate) mod eventstream;
pub(crate) mod lines;
pub mod sse;

pub use assemble::{InvalidToolCall, InvalidToolCallReason, ModelResponse, StreamAssembler};
pub use decoder::WireDecoder;

/// A provider's streaming wire format.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireFormat {
    /// Anthropic Messages (`POST /v1/messages`, `stream: true`).
    Anthropic,
    /// OpenAI Chat Completions (`POST /chat/completions`, `stream: true`) and every
    /// OpenAI-compatible server.
    OpenAiChat,
    /// OpenAI Responses (`POST /responses`, `stream: true`), with reasoning items carried
    /// across tool turns; also served by compatible servers (LiteLLM, vLLM …).
    OpenAiResponses,
    /// Google Gemini (`POST …/models/{model}:streamGenerateContent?alt=sse`), on the Gemini
    /// API and on Vertex AI.
    Gemini,
    /// Amazon Bedrock Converse (`POST /model/{modelId}/converse-stream`): the AWS binary event
    /// stream (`application/vnd.amazon.eventstream`).
    Bedrock,
    /// Ollama's native chat API (`POST /api/chat`): newline-delimited JSON
    /// (`application/x-ndjson`).
    Ollama,
}

/// One provider-neutral event of a streamed model response.
///
/// `index` is the position of the content block in the response; events of several blocks can
/// interleave (parallel tool calls), so consumers key on it, never on the tool call id.
///
/// # Serialized form
///
/// An object tagged with `type`, the variant's name in snake case (`message_start`,
/// `text_delta`, `thinking_delta`, `signature_delta`, `redacted_thinking`, `reasoning`, `compaction`,
/// `tool_call_start`, `tool_call_delta`, `other_block`, `block_stop`, `usage`,
/// `stop_sequence`, `message_stop`, `rate_limits`, `context_edited`), beside the variant's fields. `Usage` carries the
/// [`Usage`] fields inline and [`StopReason`] is its snake-case string. Read back, every event is equal to
/// the one written, so a recorded response can be replayed into a
/// [`StreamAssembler`] or an agent machine:
///
/// ```
/// use agent_loop::{LlmEvent, StopReason};
///
/// let events = vec![
///     LlmEvent::TextDelta { index: 0, text: "Hi".into() },
///     LlmEvent::MessageStop { stop_reason: StopReason::EndTurn },
/// ];
/// let json = serde_json::to_string(&events)?;
/// assert_eq!(
///     json,
///     r#"[{"type":"text_delta","index":0,"text":"Hi"},{"type":"message_stop","stop_reason":"end_turn"}]"#
/// );
/// assert_eq!(serde_json::from_str::<Vec<LlmEvent>>(&json)?, events);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LlmEvent {
    /// The response started.
    MessageStart {
        /// The provider's response id (may be empty).
        id: String,
        /// The model that answers.
        model: String,
    },
    /// A piece of text for the text block at `index`.
    TextDelta {
        /// Block index.
        index: usize,
        /// The text.
        text: String,
    },
    /// A piece of reasoning for the thinking block at `index`.
    ThinkingDelta {
        /// Block index.
        index: usize,
        /// The reasoning text.
        thinking: String,
    },
    /// A piece of the signature of the thinking block at `index`.
    SignatureDelta {
        /// Block index.
        index: usize,
        /// The signature text.
        signature: String,
    },
    /// A complete redacted-thinking block.
    RedactedThinking {
        /// Block index.
        index: usize,
        /// The opaque payload.
        data: String,
    },
    /// A complete OpenAI Responses reasoning item at `index`. Replaces the summary text
    /// streamed as [`LlmEvent::ThinkingDelta`]s for the same index, if any: the item is what
    /// goes back to the model, as [`ContentBlock::Reasoning`](crate::ContentBlock::Reasoning).
    Reasoning {
        /// Block index.
        index: usize,
        /// The item id.
        id: String,
        /// The summary texts.
        summary: Vec<String>,
        /// The encrypted reasoning, when the server sent it (left out of the serialized form
        /// when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
    /// A complete OpenAI Responses compaction item at `index` (server-side compaction), as
    /// [`ContentBlock::Compaction`](crate::ContentBlock::Compaction) goes back to the model.
    Compaction {
        /// Block index.
        index: usize,
        /// The item id, when the server gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The encrypted compacted state.
        encrypted_content: String,
    },
    /// A tool call starts at `index`.
    ToolCallStart {
        /// Block index.
        index: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
    /// A fragment of the JSON arguments of the tool call (or opaque block) at `index`.
    ToolCallDelta {
        /// Block index.
        index: usize,
        /// The JSON fragment; fragments concatenate to the arguments.
        partial_json: String,
    },
    /// A block the crate does not model starts at `index`, kept verbatim.
    OtherBlock {
        /// Block index.
        index: usize,
        /// The block's JSON, as sent in the stream.
        block: serde_json::Value,
    },
    /// The block at `index` is complete.
    BlockStop {
        /// Block index.
        index: usize,
    },
    /// The usage of this response so far (replaces earlier `Usage` events).
    Usage(Usage),
    /// The stop sequence that ended the response (Anthropic `stop_sequence`); comes right
    /// before [`LlmEvent::MessageStop`] with [`StopReason::StopSequence`].
    StopSequence {
        /// The sequence, as the provider reported it.
        sequence: String,
    },
    /// The response is complete.
    MessageStop {
        /// Why the model stopped.
        stop_reason: StopReason,
    },
    /// The rate-limit figures of the response's head (`rate_limits`), when it carried any:
    /// before the response's first content. Not content; the assembler ignores it. Boxed:
    /// the figures are larger than any other event.
    RateLimits(Box<RateLimits>),
    /// The edits the server applied to the request's context before the model read it
    /// (Anthropic context editing: `context_management.applied_edits`). Not content; the
    /// assembler gathers them into
    /// [`ModelResponse::context_edits`](crate::ModelResponse::context_edits).
    ContextEdited {
        /// The applied edits, in the server's order.
        edits: Vec<AppliedEdit>,
    },
}

impl LlmEvent {
    /// Whether the event carries generated content (text, thinking or tool-argument deltas and
    /// block starts). Idle timeouts are reset only by content events, never by pings.
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            LlmEvent::TextDelta { .. }
                | LlmEvent::ThinkingDelta { .. }
                | LlmEvent::SignatureDelta { .. }
                | LlmEvent::RedactedThinking { .. }
                | LlmEvent::Reasoning { .. }
                | LlmEvent::Compaction { .. }
                | LlmEvent::ToolCallStart { .. }
                | LlmEvent::ToolCallDelta { .. }
                | LlmEvent::OtherBlock { .. }
        )
    }
}

/// Limits on untrusted stream input. Every limit is in bytes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Longest SSE line (default 4 MiB).
    pub max_line_bytes: usize,
    /// Largest SSE event data (default 8 MiB), counted as decoded (see
    /// [`SseLimits::max_event_bytes`](crate::wire::sse::SseLimits::max_event_bytes)).
    pub max_event_bytes: usize,
    /// Largest arguments of one tool call (default 16 MiB).
    pub max_tool_args_bytes: usize,
    /// Largest text of one response, all blocks together (default 64 MiB).
    pub max_response_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_line_bytes: 4 << 20,
            max_event_bytes: 8 << 20,
            max_tool_args_bytes: 16 << 20,
            max_response_bytes: 64 << 20,
        }
    }
}

impl StreamLimits {
    pub(crate) fn sse(&self) -> SseLimits {
        SseLimits {
            max_line_bytes: self.max_line_bytes,
            max_event_bytes: self.max_event_bytes,
        }
    }
}

/// One edit the server applied to a request, as the response reports it
/// (`context_management.applied_edits[]`).
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppliedEdit {
    /// The edit type (`clear_tool_uses_20250919`, `clear_thinking_20251015`, or one added later).
    #[serde(rename = "type")]
    pub kind: String,
    /// Tool uses cleared (tool-result clearing).
    pub cleared_tool_uses: u32,
    /// Assistant turns whose thinking was cleared (thinking clearing).
    pub cleared_thinking_turns: u32,
    /// Input tokens the edit cleared.
    pub cleared_input_tokens: u64,
}

impl AppliedEdit {
    /// An applied edit of `kind`.
    pub fn new(kind: impl Into<String>) -> Self {
        AppliedEdit {
            kind: kind.into(),
            ..Self::default()
        }
    }

    /// Sets the tool uses cleared.
    pub fn cleared_tool_uses(mut self, n: u32) -> Self {
        self.cleared_tool_uses = n;
        self
    }

    /// Sets the thinking turns cleared.
    pub fn cleared_thinking_turns(mut self, n: u32) -> Self {
        self.cleared_thinking_turns = n;
        self
    }

    /// Sets the input tokens cleared.
    pub fn cleared_input_tokens(mut self, n: u64) -> Self {
        self.cleared_input_tokens = n;
        self
    }
}

/// The most applied edits read from one response (there are two edit types today).
pub(crate) const MAX_APPLIED_EDITS: usize = 16;
