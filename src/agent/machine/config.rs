//! The loop's settings, as the builder collects them and the machine reads them.

use std::sync::Arc;

use crate::message::ToolSpec;
use crate::pricing::{Pricing, Usd};
use crate::provider::cache::PromptCache;
use crate::provider::transport::RetryPolicy;
use crate::provider::RequestSettings;
use crate::tool::ToolCatalog;
use crate::wire::StreamLimits;

use super::handoff::HandoffFilter;
use crate::agent::fallback::FallbackTarget;

/// Every setting of a run's machine; [`AgentBuilder`](crate::AgentBuilder)'s setters fill it,
/// and a driver of its own builds one for [`AgentMachine::new`](crate::agent::machine::AgentMachine::new).
///
/// ```
/// use agent_loop::agent::machine::MachineConfig;
///
/// let mut config = MachineConfig::default();
/// config.max_turns = 5;
/// config.model = Some("claude-sonnet-4-5".into());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct MachineConfig {
    /// The model asked for; `None` leaves it to the client.
    pub model: Option<String>,
    /// The most tokens of one response (default 8192).
    pub max_tokens: u32,
    /// Request settings (temperature, top-p, stop sequences, tool choice …).
    pub settings: RequestSettings,
    /// Extended thinking's budget, when on.
    pub thinking_budget: Option<u32>,
    /// The most model turns of a run (default 50).
    pub max_turns: u32,
    /// Consecutive turns whose every tool call failed before the run stops (default 3).
    pub max_tool_failure_turns: u32,
    /// Consecutive turns with exactly the same calls before the run stops (default 3).
    pub max_repeated_calls: u32,
    /// The most tokens (input and output, every model call) of a run, when capped: checked
    /// before each call against what it could use at most.
    pub token_budget: Option<u64>,
    /// The most a run may cost, when capped: checked before each call against what it could
    /// cost at most, at [`pricing`](Self::pricing).
    pub cost_budget: Option<Usd>,
    /// When only one more call fits the budgets, make it with tools off, for a final answer.
    pub final_answer_at_budget: bool,
    /// The prices calls are costed at (default: [`Pricing::snapshot`]).
    pub pricing: Arc<Pricing>,
    /// The model the client calls when [`model`](Self::model) is `None` (the agent sets it
    /// from [`LlmClient::model`](crate::LlmClient::model)): what a call is priced at before
    /// its response names its model.
    pub client_model: String,
    /// At the turn limit, one more call with tools off for a final answer.
    pub final_answer_at_max_turns: bool,
    /// How often a response cut off by `max_tokens` is continued (default 0).
    pub max_continuations: u32,
    /// When and how often a failed model call is retried (before content or after: the
    /// machine decides every retry of a run).
    pub retry: RetryPolicy,
    /// Tool results in events are cut to this many bytes (default 4096).
    pub event_content_limit: usize,
    /// Read-only calls start while the model still streams (default on).
    pub early_read_only_tools: bool,
    /// Prompt caching (Anthropic cache breakpoints); `None` turns it off.
    pub prompt_cache: Option<PromptCache>,
    /// The limits the model's stream is assembled within (the client's).
    pub stream_limits: StreamLimits,
    /// Whether the driver can summarize (answer [`Action::Summarize`](crate::agent::machine::Action::Summarize));
    /// without it compaction never asks for a summary.
    pub summarizer: bool,
    /// Tools whose calls wait for a person's approval: the run pauses
    /// ([`Termination::Paused`](crate::Termination::Paused)) where the `before_tool` hook
    /// would allow one of them (a hook's denial still denies).
    pub require_approval: Vec<String>,
    /// The agent's name: what events and handoffs call it (default `"agent"`).
    pub name: String,
    /// The agents the conversation can be handed to; the model is offered one tool per
    /// target ([`HandoffTarget::tool`]).
    pub handoffs: Vec<HandoffTarget>,
    /// The models a run moves to, in order, when its model fails in a chosen way
    /// ([`Action::Fallback`](crate::agent::machine::Action::Fallback) tells the driver which).
    pub fallbacks: Vec<FallbackTarget>,
    /// Whether the run's spans carry content: the messages sent and received, the system
    /// prompt, tool arguments and results (default `false`: they are user data). The
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` environment variable turns
    /// it on too. The machine ignores it; its drivers read it.
    pub trace_content: bool,
}

/// An agent a conversation can be handed to, as the machine needs it: the tool that asks for
/// it, and what applies once it has the conversation.
/// [`AgentBuilder::handoff`](crate::AgentBuilder::handoff) builds one from an [`Agent`](crate::Agent).
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct HandoffTarget {
    /// The tool the model calls to hand over (`transfer_to_{name}`, no arguments).
    pub tool: ToolSpec,
    /// Its system prompt.
    pub system: Option<String>,
    /// Its settings (its name, model, limits, and the agents it can hand to in turn).
    pub config: MachineConfig,
    /// Its tools.
    pub tools: ToolCatalog,
    /// What history it sees.
    pub filter: HandoffFilter,
    /// Whether the conversation stays with it after the run: the agent's next runs start
    /// with it in charge ([`Handoff::keep`](crate::agent::Handoff::keep)).
    pub keep: bool,
}

impl HandoffTarget {
    /// A target with these settings, tools and system prompt, asked for with the tool
    /// `transfer_to_{config.name}` (`description` says when to, or a default does).
    pub fn new(
        config: MachineConfig,
        tools: ToolCatalog,
        system: Option<String>,
        description: Option<&str>,
    ) -> Self {
        HandoffTarget {
            tool: super::handoff::handoff_tool(&config.name, description),
            system,
            config,
            tools,
            filter: HandoffFilter::All,
            keep: false,
        }
    }

    /// Uses this filter for what history the target sees.
    pub fn filter(mut self, filter: HandoffFilter) -> Self {
        self.filter = filter;
        self
    }
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            model: None,
            max_tokens: 8192,
            settings: RequestSettings::default(),
            thinking_budget: None,
            max_turns: 50,
            max_tool_failure_turns: 3,
            max_repeated_calls: 3,
            token_budget: None,
            cost_budget: None,
            final_answer_at_budget: false,
            pricing: Pricing::shared_snapshot(),
            client_model: String::new(),
            final_answer_at_max_turns: false,
            max_continuations: 0,
            retry: RetryPolicy::default(),
            event_content_limit: 4096,
            early_read_only_tools: true,
            prompt_cache: Some(PromptCache::default()),
            stream_limits: StreamLimits::default(),
            summarizer: false,
            require_approval: Vec::new(),
            name: "agent".to_owned(),
            handoffs: Vec::new(),
            fallbacks: Vec::new(),
            trace_content: false,
        }
    }
}
