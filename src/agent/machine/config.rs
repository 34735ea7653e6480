//! The loop's settings, as the builder collects them and the machine reads them.

use crate::message::ToolSpec;
use crate::provider::RequestSettings;
use crate::tool::ToolCatalog;
use crate::wire::StreamLimits;

use super::handoff::HandoffFilter;
use super::policy::RunPolicy;
use crate::agent::fallback::FallbackTarget;

/// The most tokens of one response when [`RequestSettings::max_tokens`] is not set.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Every setting of a run's machine, made of the same types the builder takes: the model
/// knobs ([`RequestSettings`]), the loop's policy ([`RunPolicy`]), and what the agent is
/// composed of (its name, handoffs, fallbacks). [`AgentBuilder`](crate::AgentBuilder) fills
/// it; a driver of its own builds one for
/// [`AgentMachine::new`](crate::agent::machine::AgentMachine::new).
///
/// ```
/// use agent_loop::agent::machine::MachineConfig;
/// use agent_loop::agent::RunPolicy;
/// use agent_loop::RequestSettings;
///
/// let mut config = MachineConfig::default();
/// config.policy = RunPolicy::new().max_turns(5);
/// config.settings = RequestSettings::new().model("claude-sonnet-4-5");
/// assert_eq!(config.max_tokens(), 8192);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct MachineConfig {
    /// The agent's name: what events and handoffs call it (default `"agent"`).
    pub name: String,
    /// The model knobs of every request (model, output length, sampling, thinking, prompt
    /// cache …); a run's [`RunOptions`](crate::agent::RunOptions) settings go over them.
    pub settings: RequestSettings,
    /// The loop's limits and rules (turns, budgets, retries, approvals …).
    pub policy: RunPolicy,
    /// The model the client calls when the settings name none (the agent sets it from
    /// [`LlmClient::model`](crate::LlmClient::model)): what a call is priced at before its
    /// response names its model.
    pub client_model: String,
    /// The limits the model's stream is assembled within (the client's).
    pub stream_limits: StreamLimits,
    /// Whether the driver can summarize (answer [`Action::Summarize`](crate::agent::machine::Action::Summarize));
    /// without it compaction never asks for a summary.
    pub summarizer: bool,
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

impl MachineConfig {
    /// The most tokens of one response: the settings', else [`DEFAULT_MAX_TOKENS`].
    pub fn max_tokens(&self) -> u32 {
        self.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
    }
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
            name: "agent".to_owned(),
            settings: RequestSettings::default(),
            policy: RunPolicy::default(),
            client_model: String::new(),
            stream_limits: StreamLimits::default(),
            summarizer: false,
            handoffs: Vec::new(),
            fallbacks: Vec::new(),
            trace_content: false,
        }
    }
}
