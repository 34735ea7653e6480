//! [`ModelRequest`]: one request for a model response, in provider-neutral form, and
//! [`ToolChoice`]; the decoders' borrowed string type.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::message::{Message, ToolSpec};
use crate::provider::cache::PromptCache;
use crate::provider::transport::RetryPolicy;
use crate::provider::{context_editing, encoded};

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
    /// not be set here: the request fails with [`LlmError::InvalidRequest`](crate::LlmError::InvalidRequest) naming it, rather
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
    /// The conversation's cache of encoded messages, when the request was built from one
    /// (by the agent): a client copies what it holds instead of encoding those messages again.
    pub(crate) encoded: encoded::EncodedRef,
    /// Strict tools (Anthropic `strict: true`, OpenAI strict function schemas): each tool
    /// whose schema [`strict::strict_schema`](crate::provider::strict::strict_schema) can normalise is sent strict, with the
    /// normalised schema; any other is sent as it is. Ignored by the other formats.
    /// Default `false`.
    pub strict_tools: bool,
    /// Tools the request defers to the provider's hosted tool search (see
    /// [`ToolSearch::hosted`](crate::tool::search::ToolSearch::hosted)): Anthropic and
    /// OpenAI Responses send them with `defer_loading: true` beside their hosted search tool
    /// (`tool_search_tool_bm25`, `tool_search`), in place of the local search tool; the
    /// other formats ignore them (the local search tool in
    /// [`tools`](Self::tools) finds them). Default empty.
    pub deferred_tools: Vec<ToolSpec>,
    /// Anthropic context editing (see [`context_editing`]): sent as `context_management`
    /// with its beta header; ignored by the other formats. Default `None`.
    pub context_editing: Option<context_editing::ContextEditing>,
    /// Server-side compaction (see [`context_editing::ServerCompaction`]): OpenAI Responses
    /// sends `context_management` with its threshold, Anthropic a `compact_20260112` edit;
    /// ignored by the other formats. Default `None`.
    pub server_compaction: Option<context_editing::ServerCompaction>,
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
            encoded: encoded::EncodedRef::default(),
            strict_tools: false,
            deferred_tools: Vec::new(),
            context_editing: None,
            server_compaction: None,
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
    /// use agent_loop::{Message};
    /// use agent_loop::provider::ModelRequest;
    ///
    /// let mut request = ModelRequest::new(vec![Message::user("Hi")]);
    /// request.messages_mut().push(Message::assistant("Hello"));
    /// assert_eq!(request.messages.len(), 2);
    /// ```
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        self.encoded = encoded::EncodedRef::default();
        Arc::make_mut(&mut self.messages)
    }
}
