//! Model access: the provider-neutral event stream, the wire decoders and the [`LlmClient`] trait.
//!
//! ```text
//!  body bytes ─► SseDecoder ─► provider decoder ─► LlmEvent ─► StreamAssembler ─► ModelResponse
//!               └──────────── WireDecoder ───────────┘
//! ```

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::error::LlmError;
use crate::eventstream::EventStreamDecoder;
use crate::lines::LineDecoder;
use crate::message::{Message, StopReason, ToolSpec, Usage};
use crate::sse::{SseDecoder, SseLimits};

pub(crate) mod anthropic;
mod attempt;
pub(crate) mod bedrock;
mod cache;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod gemini;
pub(crate) mod http;
pub(crate) mod media_limits;
pub(crate) mod ollama;
pub(crate) mod openai;
pub(crate) mod pacing;
pub(crate) mod ratelimit;
pub(crate) mod responses;
pub(crate) mod retry;
mod settings;

pub use anthropic::AnthropicClient;
#[cfg(feature = "bedrock")]
pub use bedrock::{AwsCredentials, AwsCredentialsProvider, BedrockClient};
pub use cache::{CacheTtl, PromptCache, MAX_CACHE_BREAKPOINTS};
pub use gemini::{AccessToken, GeminiClient};
pub use http::redirect_policy;
pub use ollama::{OllamaClient, OllamaKeepAlive, OllamaThink};
pub use openai::{MaxTokensField, OpenAiClient};
pub use pacing::{Pace, Pacer, PacingLimits, RateLimiter};
pub use ratelimit::{Quota, RateLimits};
pub use retry::{Jitter, RetryPolicy};
pub use settings::RequestSettings;

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

impl WireFormat {
    /// The content type of the format's streamed response body.
    pub fn stream_content_type(self) -> &'static str {
        match self {
            WireFormat::Bedrock => "application/vnd.amazon.eventstream",
            WireFormat::Ollama => "application/x-ndjson",
            _ => "text/event-stream",
        }
    }
}

/// One provider-neutral event of a streamed model response.
///
/// `index` is the position of the content block in the response; events of several blocks can
/// interleave (parallel tool calls), so consumers key on it, never on the tool call id.
///
/// # Serialized form
///
/// An object tagged with `type`, the variant's name in snake case (`message_start`,
/// `text_delta`, `thinking_delta`, `signature_delta`, `redacted_thinking`, `reasoning`,
/// `tool_call_start`, `tool_call_delta`, `other_block`, `block_stop`, `usage`,
/// `stop_sequence`, `message_stop`, `rate_limits`), beside the variant's fields. `Usage` carries the
/// [`Usage`] fields inline and [`StopReason`] is its snake-case string. Read back, every event is equal to
/// the one written, so a recorded response can be replayed into a
/// [`StreamAssembler`](crate::StreamAssembler) or an agent machine:
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
    /// [`SseLimits::max_event_bytes`](crate::sse::SseLimits::max_event_bytes)).
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

/// The sans-IO decoder of one streamed response: SSE framing plus the provider's event format.
///
/// Feed it the body bytes in any chunking; it appends the completed [`LlmEvent`]s.
///
/// ```
/// use agent_loop::{LlmEvent, WireDecoder, WireFormat};
///
/// let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
///              data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
///              data: [DONE]\n\n";
/// let mut decoder = WireDecoder::new(WireFormat::OpenAiChat);
/// let mut events = Vec::new();
/// for chunk in body.chunks(7) {
///     decoder.push(chunk, &mut events)?;
/// }
/// decoder.finish(&mut events)?;
/// assert!(events.iter().any(|e| matches!(e, LlmEvent::TextDelta { text, .. } if text == "Hi")));
/// assert!(matches!(events.last(), Some(LlmEvent::MessageStop { .. })));
/// # Ok::<(), agent_loop::LlmError>(())
/// ```
#[derive(Debug)]
pub struct WireDecoder {
    framing: Framing,
    inner: ProviderDecoder,
    /// The first error; once set, every call returns it again.
    error: Option<LlmError>,
}

/// How the body is cut into the provider's events.
#[derive(Debug)]
enum Framing {
    /// Server-Sent Events (Anthropic, OpenAI, Gemini).
    Sse(SseDecoder),
    /// Newline-delimited JSON (Ollama): each line is one event's data.
    Lines(LineDecoder),
    /// The AWS binary event stream (Bedrock): each message is one event.
    EventStream(EventStreamDecoder),
}

#[derive(Debug)]
enum ProviderDecoder {
    Anthropic(anthropic::decode::Decoder),
    OpenAi(openai::decode::Decoder),
    Responses(responses::decode::Decoder),
    Gemini(gemini::decode::Decoder),
    Bedrock(bedrock::decode::Decoder),
    Ollama(ollama::decode::Decoder),
}

impl WireDecoder {
    /// A decoder for `format` with the default [`StreamLimits`].
    pub fn new(format: WireFormat) -> Self {
        Self::with_limits(format, StreamLimits::default())
    }

    /// A decoder for `format` with the given limits.
    pub fn with_limits(format: WireFormat, limits: StreamLimits) -> Self {
        let inner = match format {
            WireFormat::Anthropic => ProviderDecoder::Anthropic(anthropic::decode::Decoder::new()),
            WireFormat::OpenAiChat => ProviderDecoder::OpenAi(openai::decode::Decoder::new()),
            WireFormat::OpenAiResponses => {
                ProviderDecoder::Responses(responses::decode::Decoder::new())
            }
            WireFormat::Gemini => ProviderDecoder::Gemini(gemini::decode::Decoder::new()),
            WireFormat::Bedrock => ProviderDecoder::Bedrock(bedrock::decode::Decoder::new()),
            WireFormat::Ollama => ProviderDecoder::Ollama(ollama::decode::Decoder::new()),
        };
        let framing = match format {
            WireFormat::Bedrock => {
                Framing::EventStream(EventStreamDecoder::new(limits.max_event_bytes))
            }
            WireFormat::Ollama => Framing::Lines(LineDecoder::new(limits.max_line_bytes)),
            _ => Framing::Sse(SseDecoder::with_limits(limits.sse())),
        };
        WireDecoder {
            framing,
            inner,
            error: None,
        }
    }

    /// Decodes one chunk of the body, appending the events it completes. Never panics.
    ///
    /// After an error the decoder is spent: later calls return the same error.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let WireDecoder { framing, inner, .. } = self;
        let result = match framing {
            Framing::Sse(sse) => {
                sse.push_with(chunk, |event| inner.on_event(event.event, event.data, out))
            }
            Framing::Lines(lines) => lines.push_with(chunk, |line| inner.on_event("", line, out)),
            Framing::EventStream(messages) => {
                messages.push_with(chunk, |event, data| inner.on_event(event, data, out))
            }
        };
        self.remember(result)
    }

    fn remember(&mut self, result: Result<(), LlmError>) -> Result<(), LlmError> {
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    /// Ends the body: dispatches a pending last event and errors if the stream ended before
    /// the provider's end-of-message marker ([`LlmError::Incomplete`]).
    pub fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let WireDecoder { framing, inner, .. } = self;
        // An event dispatched only because the body ended was cut off in transit when it does
        // not parse: that is a truncated stream, not a malformed one.
        let cut_off = |e| match e {
            LlmError::Malformed { message } => {
                LlmError::incomplete(format!("the body ended inside an event ({message})"))
            }
            other => other,
        };
        let result = match framing {
            Framing::Sse(sse) => sse.finish_with(|event| {
                inner
                    .on_event(event.event, event.data, out)
                    .map_err(cut_off)
            }),
            Framing::Lines(lines) => {
                lines.finish_with(|line| inner.on_event("", line, out).map_err(cut_off))
            }
            Framing::EventStream(messages) => messages.finish(),
        };
        let result = result.and_then(|()| inner.finish(out));
        self.remember(result)
    }

    /// Decodes a whole, non-streamed response body: the JSON message (Anthropic
    /// `{"type":"message", …}`, OpenAI `{"object":"chat.completion", …}` or
    /// `{"object":"response", …}`) that some servers and
    /// proxies send in answer to a streaming request. Appends the same events a stream with
    /// the same content gives, ending with [`LlmEvent::MessageStop`]. A body that is the
    /// provider's error object gives the same error an in-stream error event would. Never
    /// panics.
    ///
    /// ```
    /// use agent_loop::{LlmEvent, StreamAssembler, WireDecoder, WireFormat};
    ///
    /// let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m",
    ///     "content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
    ///     "stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}"#;
    /// let mut events = Vec::new();
    /// WireDecoder::new(WireFormat::Anthropic).decode_json(body, &mut events)?;
    /// let mut assembler = StreamAssembler::new();
    /// for event in &events {
    ///     assembler.push(event)?;
    /// }
    /// assert_eq!(assembler.finish()?.message.text(), "Hi");
    /// # Ok::<(), agent_loop::LlmError>(())
    /// ```
    pub fn decode_json(&mut self, body: &[u8], out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = match std::str::from_utf8(body) {
            Err(e) => Err(LlmError::malformed(format!(
                "the JSON response body is not UTF-8: {e}"
            ))),
            Ok(text) => match &mut self.inner {
                ProviderDecoder::Anthropic(d) => d.decode_whole(text, out),
                ProviderDecoder::OpenAi(d) => d.decode_whole(text, out),
                ProviderDecoder::Responses(d) => d.decode_whole(text, out),
                ProviderDecoder::Gemini(d) => d.decode_whole(text, out),
                ProviderDecoder::Bedrock(d) => d.decode_whole(text, out),
                ProviderDecoder::Ollama(d) => d.decode_whole(text, out),
            },
        };
        self.remember(result)
    }

    /// Whether the provider's end-of-message marker has been seen.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            ProviderDecoder::Anthropic(d) => d.is_done(),
            ProviderDecoder::OpenAi(d) => d.is_done(),
            ProviderDecoder::Responses(d) => d.is_done(),
            ProviderDecoder::Gemini(d) => d.is_done(),
            ProviderDecoder::Bedrock(d) => d.is_done(),
            ProviderDecoder::Ollama(d) => d.is_done(),
        }
    }
}

impl ProviderDecoder {
    fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        match self {
            ProviderDecoder::Anthropic(d) => d.on_event(event, data, out),
            ProviderDecoder::OpenAi(d) => d.on_event(event, data, out),
            ProviderDecoder::Responses(d) => d.on_event(event, data, out),
            ProviderDecoder::Gemini(d) => d.on_event(event, data, out),
            ProviderDecoder::Bedrock(d) => d.on_event(event, data, out),
            ProviderDecoder::Ollama(d) => d.on_event(event, data, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        match self {
            ProviderDecoder::Anthropic(d) => d.finish(out),
            ProviderDecoder::OpenAi(d) => d.finish(out),
            ProviderDecoder::Responses(d) => d.finish(out),
            ProviderDecoder::Gemini(d) => d.finish(out),
            ProviderDecoder::Bedrock(d) => d.finish(out),
            ProviderDecoder::Ollama(d) => d.finish(out),
        }
    }
}

/// Which tool the model must (or must not) call.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Any,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    Tool(String),
}

/// A JSON string of a payload, borrowed when it has no escapes: the wire decoders' string
/// type, so a value is copied only when it becomes an event's own `String`.
#[derive(serde::Deserialize)]
pub(crate) struct CowStr<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);

impl CowStr<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn into_string(self) -> String {
        self.0.into_owned()
    }
}

/// One request for a model response, in provider-neutral form.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The model; `None` uses the client's configured model.
    pub model: Option<String>,
    /// The system prompt.
    pub system: Option<String>,
    /// The conversation, starting with a user message.
    ///
    /// Shared, not copied: the agent hands every turn's request the history its
    /// [`ContextManager`](crate::ContextManager) holds, so building a request costs the same
    /// at turn 1,000 as at turn 1. Read it through `Deref` (`request.messages.len()`,
    /// `&request.messages[..]`); change it with [`messages_mut`](Self::messages_mut), which
    /// copies only if the history is still shared.
    pub messages: Arc<Vec<Message>>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Which tool the model must call, if any.
    pub tool_choice: ToolChoice,
    /// The most tokens to generate.
    pub max_tokens: u32,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling: the probability mass sampled from.
    pub top_p: Option<f32>,
    /// Sequences that stop generation.
    pub stop_sequences: Vec<String>,
    /// Whether the model may call several tools in one response (`None`: the provider's
    /// default, which is yes). Anthropic: `tool_choice.disable_parallel_tool_use`; OpenAI:
    /// `parallel_tool_calls`. Sent only with tools.
    pub parallel_tool_calls: Option<bool>,
    /// An id for the end user, for the provider's abuse monitoring (Anthropic
    /// `metadata.user_id`, OpenAI `user`).
    pub user: Option<String>,
    /// Anthropic extended thinking: the token budget for reasoning (ignored by OpenAI).
    pub thinking_budget: Option<u32>,
    /// Provider-specific fields merged into the top level of the request body as they are
    /// (for example `{"top_k": 5}` or `{"reasoning_effort": "low"}`). A field the crate
    /// itself sends in this request (`model`, `messages`, `max_tokens`, `temperature` …) may
    /// not be set here: the request fails with [`LlmError::InvalidRequest`] naming it, rather
    /// than one of the two values silently winning. Use the typed field instead.
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Prompt caching: where Anthropic `cache_control` breakpoints go (ignored by OpenAI, which
    /// caches by itself). Default [`PromptCache::default()`]: the last tool, the system prompt
    /// and the two latest user messages, 5-minute TTL. `None` sends no breakpoint.
    pub prompt_cache: Option<PromptCache>,
    /// How the client retries this request when it fails before any content: `None` (the
    /// default) uses the client's own [`RetryPolicy`]. The agent sends
    /// `Some(RetryPolicy::none())`, because it decides and counts every retry of a run itself
    /// (with the same policy type), and reports each as an `AgentEvent::Retry`.
    pub retry: Option<RetryPolicy>,
}

impl Default for ModelRequest {
    fn default() -> Self {
        ModelRequest {
            model: None,
            system: None,
            messages: Arc::default(),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            max_tokens: 4096,
            temperature: None,
            top_p: None,
            stop_sequences: Vec::new(),
            parallel_tool_calls: None,
            user: None,
            thinking_budget: None,
            extra: serde_json::Map::new(),
            prompt_cache: Some(PromptCache::default()),
            retry: None,
        }
    }
}

impl ModelRequest {
    /// A request for `messages` with the defaults (4096 max tokens, no tools).
    pub fn new(messages: Vec<Message>) -> Self {
        ModelRequest {
            messages: Arc::new(messages),
            ..Default::default()
        }
    }

    /// The messages, to change (copied first if they are shared, as with the agent's history:
    /// a change to the request never changes the history).
    ///
    /// ```
    /// use agent_loop::{Message, ModelRequest};
    ///
    /// let mut request = ModelRequest::new(vec![Message::user("Hi")]);
    /// request.messages_mut().push(Message::assistant("Hello"));
    /// assert_eq!(request.messages.len(), 2);
    /// ```
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.messages)
    }
}

/// The stream of one model response: events, ending after [`LlmEvent::MessageStop`] or an error.
pub type LlmStream<'a> = Pin<Box<dyn Stream<Item = Result<LlmEvent, LlmError>> + Send + 'a>>;

/// Access to a model: streams one response for a request.
///
/// Implemented by [`AnthropicClient`](crate::AnthropicClient), [`OpenAiClient`](crate::OpenAiClient)
/// and the test clients; implement it for a custom provider or a recording/replaying client.
///
/// The returned stream is lazy: nothing is sent until it is first polled. It yields the
/// response's events as they arrive, ends after [`LlmEvent::MessageStop`], or yields one error
/// and ends. A client may retry a transient failure before any content arrived, as its
/// [`RetryPolicy`] (or the request's [`ModelRequest::retry`]) says; the stream then simply
/// goes on with the new attempt's events. Dropping the stream cancels the request and closes
/// the connection.
pub trait LlmClient: Send + Sync {
    /// Streams the response to `request`.
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a>;

    /// The model name the client sends when the request names none (used to look up the
    /// context window). Empty when unknown.
    fn model(&self) -> &str {
        ""
    }

    /// The limits on untrusted response data the client enforces; the agent assembles
    /// responses with the same limits (tool-argument and response sizes).
    fn stream_limits(&self) -> StreamLimits {
        StreamLimits::default()
    }

    /// The client's retry policy, if it retries: an agent built on the client adopts it
    /// (unless its builder sets one), and retries for the client instead (see
    /// [`ModelRequest::retry`]), so that one policy and one count govern a run's retries.
    fn retry_policy(&self) -> Option<RetryPolicy> {
        None
    }

    /// The provider, as OpenTelemetry's GenAI conventions name it (`gen_ai.provider.name`:
    /// `anthropic`, `openai` …), for the agent's spans. Empty when unknown (then left out).
    fn provider_name(&self) -> &str {
        ""
    }
}

impl<T: LlmClient + ?Sized> LlmClient for std::sync::Arc<T> {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
        (**self).stream(request)
    }
    fn model(&self) -> &str {
        (**self).model()
    }
    fn stream_limits(&self) -> StreamLimits {
        (**self).stream_limits()
    }
    fn retry_policy(&self) -> Option<RetryPolicy> {
        (**self).retry_policy()
    }
    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
}

impl<T: LlmClient + ?Sized> LlmClient for Box<T> {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
        (**self).stream(request)
    }
    fn model(&self) -> &str {
        (**self).model()
    }
    fn stream_limits(&self) -> StreamLimits {
        (**self).stream_limits()
    }
    fn retry_policy(&self) -> Option<RetryPolicy> {
        (**self).retry_policy()
    }
    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
}
