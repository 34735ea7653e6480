//! [`AgentBuilder`]: every setting of an agent, with its default, and the checks at build.

use std::fmt;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::context::{ContextConfig, ContextManager, Summarizer};
use crate::error::{ConfigError, Error};
use crate::provider::transport::RateLimiter;
use crate::provider::{LlmClient, RequestSettings, ToolChoice};
use crate::session::SessionStore;
use crate::tool::{check_name, Tool, ToolRegistry, ToolSource, ToolSources};

use super::agent::{Agent, Parts};
use super::driver::persist::SessionLink;
use super::driver::summarizer::LlmSummarizer;
use super::fallback::Fallback;
use super::handle::{lock, AgentHandle, Shared};
use super::hooks::{AgentHooks, NoHooks};
use super::machine::config::MachineConfig;
use super::machine::policy::RunPolicy;
use super::machine::{AgentMachine, MachineParts};
use super::team::Handoff;

impl Agent {
    /// Starts building an agent around a model client.
    pub fn builder(client: impl LlmClient + 'static) -> AgentBuilder {
        AgentBuilder::new(Arc::new(client))
    }
}

/// Builds an [`Agent`]. Every setting has a sensible default.
pub struct AgentBuilder {
    client: Arc<dyn LlmClient>,
    tools: ToolRegistry,
    sources: Vec<Arc<dyn ToolSource>>,
    tool_errors: Vec<Error>,
    system: Option<String>,
    context: Option<ContextManager>,
    config: MachineConfig,
    hooks: Arc<dyn AgentHooks>,
    /// Whether [`hooks`](Self::hooks) was called (a driver may skip asking the default ones).
    hooks_set: bool,
    summarizer: Option<Arc<dyn Summarizer>>,
    cancel: CancellationToken,
    session: Option<(Arc<dyn SessionStore>, String)>,
    handoffs: Vec<Handoff>,
    /// The fallbacks' clients, in the order of `config.fallbacks`.
    fallbacks: Vec<Arc<dyn LlmClient>>,
    limiter: Option<RateLimiter>,
    /// [`max_turns`](Self::max_turns), over the policy's whatever the order.
    max_turns: Option<u32>,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("tools", &self.tools)
            .field("system", &self.system)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    pub(crate) fn new(client: Arc<dyn LlmClient>) -> Self {
        AgentBuilder {
            client,
            tools: ToolRegistry::new(),
            sources: Vec::new(),
            tool_errors: Vec::new(),
            system: None,
            context: None,
            config: MachineConfig::default(),
            hooks: Arc::new(NoHooks),
            hooks_set: false,
            summarizer: None,
            cancel: CancellationToken::new(),
            session: None,
            handoffs: Vec::new(),
            fallbacks: Vec::new(),
            limiter: None,
            max_turns: None,
        }
    }

    /// The agent's name (default `"agent"`): what [`AgentEvent::Handoff`](crate::AgentEvent::Handoff)
    /// calls it, and, for an agent others hand conversations to, its handoff tool's name
    /// (`transfer_to_{name}`), so it must fit a tool name (`^[a-zA-Z0-9_-]{1,64}$` with the
    /// prefix).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.config.name = name.into();
        self
    }

    /// Lets the model hand the conversation to another agent ([`Handoff`], or an
    /// [`Agent`] as is): the crate adds the tool `transfer_to_{its name}` for it. Once the
    /// call is answered, that agent's system prompt, tools, settings and client apply from the
    /// next turn on. Two handoffs (or a handoff and a tool) with one name make
    /// [`build`](Self::build) fail.
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, AgentEvent};
    /// use agent_loop::agent::{HandoffFilter, Handoff};
    /// use futures::StreamExt;
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let billing = Agent::builder(ScriptedClient::new([ScriptedResponse::text("Refunded.")]))
    ///     .name("billing")
    ///     .system("You handle refunds.")
    ///     .build()?;
    /// let triage = ScriptedClient::new([ScriptedResponse::tool_call("h1", "transfer_to_billing", json!({}))]);
    /// let mut agent = Agent::builder(triage)
    ///     .name("triage")
    ///     .handoff(Handoff::new(billing).input_filter(HandoffFilter::All))
    ///     .build()?;
    /// let events: Vec<AgentEvent> = agent.run("Refund order 7").collect().await;
    /// assert!(events.contains(&AgentEvent::Handoff { from: "triage".into(), to: "billing".into() }));
    /// let Some(AgentEvent::Finished(outcome)) = events.last() else { panic!() };
    /// assert_eq!(outcome.final_text, "Refunded.");
    /// # Ok::<(), agent_loop::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn handoff(mut self, handoff: impl Into<Handoff>) -> Self {
        self.handoffs.push(handoff.into());
        self
    }

    /// Adds a model the run moves to when its model fails in the ways the [`Fallback`]
    /// names (by default: overloaded at once, server errors once the retries are spent).
    /// Several are tried in the order added, each after the one before it failed; the run
    /// keeps the one it moved to, and reports the move as
    /// [`AgentEvent::Fallback`](crate::AgentEvent::Fallback). The history goes to the new
    /// model as its provider wants it (another provider's thinking blocks are left out, tool
    /// calls and results carried over).
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.config.fallbacks.push(fallback.target);
        self.fallbacks.push(fallback.client);
        self
    }

    /// The system prompt.
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Adds a tool. A duplicate or invalid name makes [`build`](Self::build) fail.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        if let Err(e) = self.tools.register(tool) {
            self.tool_errors.push(e);
        }
        self
    }

    /// Adds a source of tools that can change while the agent runs (an MCP server's: an
    /// `agent_loop_mcp::McpConnection`). Its current tools are registered by [`build`](Self::build) (a name
    /// clash or a refused schema makes it fail). At the start of each run and at each turn
    /// boundary, a source that says it [changed](ToolSource::changed) is refreshed and the
    /// tools rebuilt (the builder's own, then every source's, in the order added), so the
    /// next model request lists the new set and its calls run with it. A refresh that fails,
    /// or new tools that cannot be registered, are logged (`tracing`) and the old tools stay.
    pub fn tool_source(mut self, source: impl ToolSource + 'static) -> Self {
        self.sources.push(Arc::new(source));
        self
    }

    /// Uses this registry (with its tools and execution settings) instead of the builder's
    /// (the tools of [tool sources](Self::tool_source) are added to it).
    pub fn tools(mut self, registry: ToolRegistry) -> Self {
        self.tools = registry;
        self
    }

    /// The model knobs of every request: the model, output length (default 8192 tokens),
    /// sampling, stop sequences, tool choice, thinking, prompt caching (default on) and
    /// provider-specific fields, replacing those set before. Checked by
    /// [`build`](Self::build); a named tool choice must be one of the agent's.
    ///
    /// ```
    /// use agent_loop::testing::ScriptedClient;
    /// use agent_loop::{Agent, RequestSettings};
    ///
    /// let agent = Agent::builder(ScriptedClient::new([]))
    ///     .settings(RequestSettings::new().model("claude-sonnet-4-5").max_tokens(2_048).temperature(0.2))
    ///     .build()?;
    /// assert!(Agent::builder(ScriptedClient::new([]))
    ///     .settings(RequestSettings::new().temperature(3.0))
    ///     .build()
    ///     .is_err());
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn settings(mut self, settings: RequestSettings) -> Self {
        self.config.settings = settings;
        self
    }

    /// The loop's policy: turns, budgets, failure and repeat limits, continuations, retries,
    /// approvals, early tools, sub-agent depth, the session lease ([`RunPolicy`]), replacing
    /// the one set before. A [`max_turns`](Self::max_turns) given on the builder holds over
    /// the policy's, before or after it.
    pub fn policy(mut self, policy: RunPolicy) -> Self {
        self.config.policy = policy;
        self
    }

    /// Most model turns per run (default 50; 0 counts as 1): the one limit nearly every
    /// agent sets, so it has a setter of its own. It holds over the
    /// [`policy`](Self::policy)'s [`max_turns`](RunPolicy::max_turns), whichever comes first.
    ///
    /// ```
    /// use agent_loop::agent::RunPolicy;
    /// use agent_loop::testing::ScriptedClient;
    /// use agent_loop::Agent;
    ///
    /// let agent = Agent::builder(ScriptedClient::new([]))
    ///     .max_turns(3)
    ///     .policy(RunPolicy::new().token_budget(10_000))
    ///     .build()?;
    /// assert_eq!(agent.policy().max_turns, 3);
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns.max(1));
        self
    }

    /// Starts from this context: a restored conversation, a custom token counter, or other
    /// window settings (default: an empty context with
    /// [`ContextConfig::for_model`](crate::context::ContextConfig::for_model) of the model).
    pub fn context(mut self, context: ContextManager) -> Self {
        self.context = Some(context);
        self
    }

    /// The summarizer used by compaction (default: the agent's own client). Compaction that
    /// never calls a model is a setting of the context:
    /// [`ContextConfig::summarize`](crate::context::ContextConfig::summarize).
    pub fn summarizer(mut self, summarizer: impl Summarizer + 'static) -> Self {
        self.summarizer = Some(Arc::new(summarizer));
        self
    }

    /// Keeps the conversation in `store` as the session `id`, on its own: the agent loads it
    /// before its first run (or at [`Agent::load_session`]), and appends each turn whole
    /// when it ends (the run's input with its first turn), and a pause, in one append each.
    /// Another process with the same store and id picks the session up where it stands,
    /// paused runs included.
    ///
    /// One run at a time: a run holds its session with a lease from its start to its end,
    /// renewed with every turn it saves. Another agent that starts a run on the session
    /// meanwhile is refused at once with [`SessionError::Busy`](crate::error::SessionError::Busy):
    /// nothing is sent to its model and nothing is written. A process that died leaves its
    /// lease until the lease runs out (two minutes after its last saved turn, by default:
    /// [`RunPolicy::session_lease`]), or until a host ends it with
    /// [`session::release_lease`](crate::session::release_lease). Should two writers still
    /// meet (a lease that ran out under a long turn), compare-and-swap decides: the loser's
    /// run ends with [`SessionError::RunOvertaken`](crate::error::SessionError::RunOvertaken),
    /// which says which of its turns were saved; nothing is stored half or twice.
    pub fn session(mut self, store: Arc<dyn SessionStore>, id: impl Into<String>) -> Self {
        self.session = Some((store, id.into()));
        self
    }

    /// Hooks before tools and model calls.
    pub fn hooks(mut self, hooks: impl AgentHooks + 'static) -> Self {
        self.hooks = Arc::new(hooks);
        self.hooks_set = true;
        self
    }

    /// A parent cancellation token: cancelling it cancels every run of the agent.
    pub fn cancellation_token(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Builds the loop as a sans-IO [`AgentMachine`] instead of an [`Agent`]: for a host
    /// that drives it from its own runtime or a durable-execution engine, carrying out its
    /// [`Action`](crate::agent::machine::Action)s itself (the client given to [`Agent::builder`] only names the model and
    /// its limits then; hooks and the summarizer are the driver's to apply).
    pub fn build_machine(self) -> Result<AgentMachine, Error> {
        let agent = self.build()?;
        let context = lock(&agent.shared).context.take().ok_or(Error::Busy)?;
        Ok(AgentMachine::new(
            agent.machine_config(),
            context,
            agent.parts.sources.current().catalog(),
        ))
    }

    /// Builds the loop as a sans-IO [`AgentMachine`], with the hooks and the summarizer the
    /// builder was given ([`hooks`](Self::hooks), [`summarizer`](Self::summarizer), or the
    /// default one on the agent's client), for a driver that applies them itself the way
    /// [`Agent::run`] does: a durable engine that journals each hook verdict and summary as
    /// a step.
    pub fn build_machine_parts(self) -> Result<MachineParts, Error> {
        let hooks_set = self.hooks_set;
        let agent = self.build()?;
        let context = lock(&agent.shared).context.take().ok_or(Error::Busy)?;
        let machine = AgentMachine::new(
            agent.machine_config(),
            context,
            agent.parts.sources.current().catalog(),
        );
        Ok(MachineParts {
            machine,
            hooks: hooks_set.then(|| agent.parts.hooks.clone()),
            summarizer: agent.parts.summarizer.clone(),
        })
    }

    /// Builds the agent; fails on an invalid tool set.
    pub fn build(mut self) -> Result<Agent, Error> {
        if let Some(e) = self.tool_errors.into_iter().next() {
            return Err(e);
        }
        if let Some(turns) = self.max_turns {
            self.config.policy.max_turns = turns;
        }
        if self.config.policy.retry.is_none() {
            self.config.policy.retry = Some(self.client.retry_policy().unwrap_or_default());
        }
        self.config.settings.validate()?;
        self.config.policy.validate()?;
        if let Some(context) = &self.context {
            context.config().validate()?;
        }
        let sources = ToolSources::new(self.tools, self.sources)?;
        let tools = sources.current();
        if let Some(ToolChoice::Tool(name)) = &self.config.settings.tool_choice {
            if !tools.contains(name) {
                return Err(ConfigError::UnknownTool {
                    setting: "tool_choice",
                    tool: name.clone(),
                }
                .into());
            }
        }
        let model = self
            .config
            .settings
            .model
            .clone()
            .unwrap_or_else(|| self.client.model().to_owned());
        let policy = &self.config.policy;
        if policy.cost_budget.is_some() && policy.pricing.price(&model).is_none() {
            return Err(ConfigError::setting(
                "cost_budget",
                format!("no price is known for the model {model:?}, so its calls cannot be kept within a budget: give its price (RunPolicy::pricing)"),
            )
            .into());
        }
        let mut context = self
            .context
            .unwrap_or_else(|| ContextManager::new(ContextConfig::for_model(&model)));
        let policy = &self.config.policy;
        if policy.token_budget.is_some() || policy.cost_budget.is_some() {
            // A budget decides before the first call: count that call exactly.
            context.count_exactly();
        }
        if self.system.is_some() {
            context.set_system(self.system);
        }
        context.set_tools(&tools.specs());
        let mut team = Vec::with_capacity(self.handoffs.len());
        for handoff in self.handoffs {
            let (target, member) = handoff.into_parts();
            let name = &target.tool.name;
            if check_name(name).is_err() {
                return Err(ConfigError::setting(
                    "handoff",
                    format!("the agent name {:?} makes the tool name {name:?}, which is not a valid tool name: name agents with letters, digits, '_' and '-' (AgentBuilder::name)", target.config.name),
                )
                .into());
            }
            let clash =
                tools.contains(name) || self.config.handoffs.iter().any(|h| &h.tool.name == name);
            if clash {
                return Err(ConfigError::setting(
                    "handoff",
                    format!("the tool {name:?} is there twice: two handoffs to agents of one name, or a tool named like a handoff's"),
                )
                .into());
            }
            self.config.handoffs.push(target);
            team.push(member);
        }
        if !team.is_empty() {
            let mut specs = tools.specs().to_vec();
            specs.extend(self.config.handoffs.iter().map(|h| h.tool.clone()));
            context.set_tools(&specs);
        }
        let summarizer = if !context.config().summarize {
            None
        } else {
            Some(self.summarizer.unwrap_or_else(|| {
                Arc::new(LlmSummarizer::new(self.client.clone())) as Arc<dyn Summarizer>
            }))
        };
        let session = self
            .session
            .map(|(store, id)| SessionLink::new(store, id, self.config.policy.session_lease));
        let max_depth = self.config.policy.max_depth;
        let shared = Arc::new(Mutex::new(Shared::new(context)));
        let agent = Agent {
            parts: Parts {
                client: self.client,
                sources,
                hooks: self.hooks,
                summarizer,
                team: Arc::new(team),
                fallbacks: Arc::new(self.fallbacks),
            },
            tools,
            config: self.config,
            handle: AgentHandle::new(self.cancel, shared.clone()),
            session,
            shared,
            depth: 0,
            max_depth,
            limiter: self.limiter,
        };
        if agent.config.settings.strict_tools == Some(true) {
            // Once per tool and agent: which tools its requests send without strict mode.
            for (tool, verdict) in agent.strict_check() {
                if let Err(reason) = verdict {
                    tracing::warn!(
                        tool = %tool,
                        %reason,
                        "strict tools are on, but this tool goes out without strict mode"
                    );
                }
            }
        }
        Ok(agent)
    }

    /// Records message content on the run's tracing spans (see the guide's observability
    /// page, `docs/guide/observability.md`): `gen_ai.input.messages`,
    /// `gen_ai.output.messages` and `gen_ai.system_instructions` on each `chat` span, `gen_ai.tool.call.arguments` and
    /// `gen_ai.tool.call.result` on each `execute_tool` span. Off by default: they hold user
    /// data. `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` turns it on too.
    pub fn trace_content(mut self, on: bool) -> Self {
        self.config.trace_content = on;
        self
    }

    /// Paces the agent's model calls with `limiter`, shared (cloned) with every agent that
    /// uses the same API key: before each model call (a retry's too) the run waits until the
    /// limiter lets it go, its tokens estimated as the conversation's token count plus the
    /// request's `max_tokens`; each response's rate-limit headers are reported back to it
    /// ([`RateLimiter::observe`]). Cancelling the run ends the wait. Sub-agents built from this
    /// agent ([`Agent::as_tool`](crate::Agent::as_tool)) share it.
    pub fn rate_limiter(mut self, limiter: RateLimiter) -> Self {
        self.limiter = Some(limiter);
        self
    }
}
