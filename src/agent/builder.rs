//! [`AgentBuilder`]: every setting of an agent, with its default, and the checks at build.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::context::{ContextConfig, ContextManager, Summarizer};
use crate::error::{ConfigError, Error};
use crate::pricing::{Pricing, Usd};
use crate::provider::cache::PromptCache;
use crate::provider::transport::{RateLimiter, RetryPolicy};
use crate::provider::{LlmClient, RequestSettings, ToolChoice};
use crate::session::SessionStore;
use crate::tool::{check_name, Tool, ToolRegistry, ToolSource, ToolSources};

use super::agent::Agent;
use super::driver::persist::SessionLink;
use super::driver::summarizer::LlmSummarizer;
use super::fallback::Fallback;
use super::handle::{lock, AgentHandle, Shared};
use super::hooks::{AgentHooks, NoHooks};
use super::machine::config::MachineConfig;
use super::machine::{AgentMachine, MachineParts};
use super::team::{Handoff, DEFAULT_MAX_DEPTH};

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
    context_config: Option<ContextConfig>,
    config: MachineConfig,
    /// The retry policy set on the builder (else the client's).
    retry: Option<RetryPolicy>,
    hooks: Arc<dyn AgentHooks>,
    /// Whether [`hooks`](Self::hooks) was called (a driver may skip asking the default ones).
    hooks_set: bool,
    summarizer: Option<Option<Arc<dyn Summarizer>>>,
    cancel: CancellationToken,
    session: Option<SessionLink>,
    session_lease: Option<Duration>,
    handoffs: Vec<Handoff>,
    /// The fallbacks' clients, in the order of `config.fallbacks`.
    fallbacks: Vec<Arc<dyn LlmClient>>,
    max_depth: u32,
    limiter: Option<RateLimiter>,
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
            context_config: None,
            config: MachineConfig::default(),
            retry: None,
            hooks: Arc::new(NoHooks),
            hooks_set: false,
            summarizer: None,
            cancel: CancellationToken::new(),
            session: None,
            session_lease: None,
            handoffs: Vec::new(),
            fallbacks: Vec::new(),
            max_depth: DEFAULT_MAX_DEPTH,
            limiter: None,
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

    /// How many levels of sub-agents ([`Agent::as_tool`]) may run below this agent's runs
    /// (default [`DEFAULT_MAX_DEPTH`]); a call past it is answered with an error saying so.
    /// A sub-agent keeps the lowest limit of the agents above it.
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = depth;
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

    /// The model name, overriding the client's.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = Some(model.into());
        self
    }

    /// Most tokens per response (default 8192).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.config.max_tokens = max_tokens;
        self
    }

    /// Sampling temperature (0.0 to 2.0; checked by [`build`](Self::build)).
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.config.settings.temperature = Some(temperature);
        self
    }

    /// Nucleus sampling (above 0.0, at most 1.0; checked by [`build`](Self::build)).
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.config.settings.top_p = Some(top_p);
        self
    }

    /// Sequences that stop generation.
    pub fn stop_sequences<S: Into<String>>(mut self, stops: impl IntoIterator<Item = S>) -> Self {
        self.config.settings.stop_sequences = Some(stops.into_iter().map(Into::into).collect());
        self
    }

    /// Which tool the model must (or must not) call on every turn (default
    /// [`ToolChoice::Auto`]). A named tool must be one of the agent's.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.config.settings.tool_choice = Some(choice);
        self
    }

    /// Whether the model may call several tools in one response (default: the provider's,
    /// which is yes).
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.config.settings.parallel_tool_calls = Some(parallel);
        self
    }

    /// An id of the end user, for the provider's abuse monitoring.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.config.settings.user = Some(user.into());
        self
    }

    /// A provider-specific body field (`top_k`, `reasoning_effort`, `service_tier` …). A
    /// field the crate sends itself is refused when the request is encoded, naming it.
    pub fn extra_body(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.config.settings.extra.insert(key.into(), value);
        self
    }

    /// All request settings at once (replacing those set before).
    pub fn settings(mut self, settings: RequestSettings) -> Self {
        let max_tokens = settings.max_tokens;
        self.config.settings = settings;
        if let Some(n) = max_tokens {
            self.config.max_tokens = n;
        }
        self
    }

    /// Anthropic extended thinking with this token budget.
    pub fn thinking_budget(mut self, tokens: u32) -> Self {
        self.config.thinking_budget = Some(tokens);
        self
    }

    /// Most model turns per run (default 50).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.config.max_turns = turns.max(1);
        self
    }

    /// Stop after this many consecutive turns in which every tool call failed (default 3).
    pub fn max_tool_failure_turns(mut self, turns: u32) -> Self {
        self.config.max_tool_failure_turns = turns.max(1);
        self
    }

    /// Stop when the model asks for the same calls with the same input this many times in a
    /// row (default 3); the repeated calls are answered with an error, not run.
    pub fn max_repeated_calls(mut self, times: u32) -> Self {
        self.config.max_repeated_calls = times.max(2);
        self
    }

    /// Caps a run's tokens (input and output, every model call, failed attempts and
    /// sub-agents' runs included). Checked **before** each model call against the most it
    /// could use (its counted request plus `max_tokens`): a call that could cross the budget
    /// is not made, and the run ends with [`Termination::TokenBudget`](crate::Termination::TokenBudget) and the figures.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, Termination};
    /// use agent_loop::agent::RunError;
    ///
    /// let client = ScriptedClient::new([ScriptedResponse::text("Hi")]);
    /// // max_tokens alone (1,000) is more than the budget: no call is made.
    /// let mut agent = Agent::builder(client).max_tokens(1_000).token_budget(500).build()?;
    /// match agent.prompt("Hello").await {
    ///     Err(RunError::Stopped(outcome)) => {
    ///         assert!(matches!(outcome.termination, Termination::TokenBudget { used: 0, budget: 500, .. }));
    ///         assert_eq!(outcome.turns, 0);
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn token_budget(mut self, tokens: u64) -> Self {
        self.config.token_budget = Some(tokens);
        self
    }

    /// Caps what a run may cost, in US dollars, at the agent's [`pricing`](Self::pricing)
    /// (failed attempts and sub-agents' runs included). Checked **before** each model call
    /// against the most it could cost (its counted request at the input price, or the
    /// cache-write price when dearer, plus `max_tokens` at the output price): a call that
    /// could cross the budget is not made, and the run ends with
    /// [`Termination::CostBudget`](crate::Termination::CostBudget) and the figures. A model with no known price cannot be
    /// kept within a budget: `build` refuses it, and a run that would call one (after a
    /// handoff) ends with an error saying so.
    ///
    /// A call is priced at the model its response names when that model has a price (a
    /// dated snapshot of the one asked for), else at the price of the model the request
    /// asked for: a response naming a model with no known price (a proxy's alias such as
    /// OpenRouter's `anthropic/claude-sonnet-4.5` when unlisted, a test double) still
    /// counts at the requested model's price, so a budget never stops counting. Names are
    /// matched leniently: a provider prefix (`anthropic/…`, `openai/…`), Bedrock's
    /// inference-profile and vendor prefixes and version suffix
    /// (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`), dated snapshots, and dots in
    /// version numbers (`claude-sonnet-4.5`) all find the model's price.
    pub fn cost_budget(mut self, dollars: f64) -> Self {
        self.config.cost_budget = Some(Usd::from_dollars(dollars));
        self
    }

    /// When only one more model call fits the token or cost budget, make it with tools off,
    /// for a final answer (as [`final_answer_at_max_turns`](Self::final_answer_at_max_turns)
    /// does at the turn limit); the run then ends with the budget's termination. Off by
    /// default: the run ends before the first call that does not fit.
    pub fn final_answer_at_budget(mut self, enabled: bool) -> Self {
        self.config.final_answer_at_budget = enabled;
        self
    }

    /// The prices model calls are costed at (default [`Pricing::snapshot`]): costs in
    /// [`AgentEvent::TurnEnd`](crate::AgentEvent::TurnEnd), [`AgentEvent::Retry`](crate::AgentEvent::Retry)
    /// and [`RunOutcome::cost`](crate::RunOutcome::cost), and the
    /// [`cost_budget`](Self::cost_budget) check.
    pub fn pricing(mut self, pricing: Pricing) -> Self {
        self.config.pricing = Arc::new(pricing);
        self
    }

    /// At the turn limit, make one last model call with tools disabled for a final answer
    /// instead of stopping bare (default off).
    pub fn final_answer_at_max_turns(mut self, enabled: bool) -> Self {
        self.config.final_answer_at_max_turns = enabled;
        self
    }

    /// How many times a text answer cut off by `max_tokens` is continued (default 0).
    pub fn max_continuations(mut self, times: u32) -> Self {
        self.config.max_continuations = times;
        self
    }

    /// The policy for every retry of a model call in a run: a failure before any content (a
    /// 529, a reset connection) and a response that broke after it started (re-sent from the
    /// start of the turn while no tool of it has run). The agent owns these retries: its
    /// requests ask the client for none ([`ModelRequest::retry`](crate::provider::ModelRequest::retry)),
    /// so one policy and one count govern them, and each is an
    /// [`AgentEvent::Retry`](crate::AgentEvent::Retry). Default: the client's own
    /// [`LlmClient::retry_policy`](crate::LlmClient::retry_policy), else
    /// `RetryPolicy::default()`.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Tool results in [`AgentEvent::ToolResult`](crate::AgentEvent::ToolResult) are cut to this many bytes (default 4096);
    /// the history keeps the full result.
    pub fn event_content_limit(mut self, bytes: usize) -> Self {
        self.config.event_content_limit = bytes;
        self
    }

    /// Whether read-only tools start as soon as their arguments are complete, while the
    /// model is still streaming (default on).
    pub fn early_read_only_tools(mut self, enabled: bool) -> Self {
        self.config.early_read_only_tools = enabled;
        self
    }

    /// Prompt-cache breakpoints on every request (default on, five-minute TTL: the tools,
    /// the system prompt and the two latest user messages are marked, so each turn reads the
    /// conversation so far from the provider's cache). `None` sends none. Anthropic needs
    /// them to cache at all; OpenAI caches by itself and ignores them. An invalid setting
    /// (more breakpoints than the API allows) fails [`build`](Self::build).
    pub fn prompt_cache(mut self, cache: Option<PromptCache>) -> Self {
        self.config.prompt_cache = cache;
        self
    }

    /// Context window settings (default: looked up from the model name).
    pub fn context_config(mut self, config: ContextConfig) -> Self {
        self.context_config = Some(config);
        self
    }

    /// Starts from this context (a restored conversation, a custom token counter).
    pub fn context(mut self, context: ContextManager) -> Self {
        self.context = Some(context);
        self
    }

    /// The summarizer used by compaction (default: the agent's own client).
    pub fn summarizer(mut self, summarizer: impl Summarizer + 'static) -> Self {
        self.summarizer = Some(Some(Arc::new(summarizer)));
        self
    }

    /// Compaction never calls a model: it elides and drops old turns instead.
    pub fn no_summarizer(mut self) -> Self {
        self.summarizer = Some(None);
        self
    }

    /// Calls of the tool `name` wait for a person's approval: the run pauses before they
    /// run, ending with [`Termination::Paused`](crate::Termination::Paused), and
    /// [`Agent::resume`](crate::Agent::resume) continues it with the verdict, in this process
    /// or another. The `before_tool` hook is still asked first: its denial denies at once.
    /// Call it once per tool.
    pub fn require_approval(mut self, name: impl Into<String>) -> Self {
        self.config.require_approval.push(name.into());
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
    /// [`session_lease`](Self::session_lease)), or until a host ends it with
    /// [`session::release_lease`](crate::session::release_lease). Should two writers still
    /// meet (a lease that ran out under a long turn), compare-and-swap decides: the loser's
    /// run ends with [`SessionError::RunOvertaken`](crate::error::SessionError::RunOvertaken),
    /// which says which of its turns were saved; nothing is stored half or twice.
    pub fn session(mut self, store: Arc<dyn SessionStore>, id: impl Into<String>) -> Self {
        let mut link = SessionLink::new(store, id.into());
        link.lease = self.session_lease.unwrap_or(link.lease);
        self.session = Some(link);
        self
    }

    /// How long a run's lease on its [session](Self::session) lasts past its start and each
    /// saved turn (default two minutes): how long a session stays held after its process
    /// died. Make it longer than a turn (a model call and its tools) takes; a lease that runs
    /// out under a turn lets another agent in, and this run then fails at its next save.
    /// A lease is a wall-clock time: agents on several machines need their clocks in step
    /// (NTP) to well within this length.
    pub fn session_lease(mut self, lease: Duration) -> Self {
        self.session_lease = Some(lease);
        if let Some(link) = self.session.as_mut() {
            link.lease = lease;
        }
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
            agent.sources.current().catalog(),
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
            agent.sources.current().catalog(),
        );
        Ok(MachineParts {
            machine,
            hooks: hooks_set.then(|| agent.hooks.clone()),
            summarizer: agent.summarizer.clone(),
        })
    }

    /// Builds the agent; fails on an invalid tool set.
    pub fn build(mut self) -> Result<Agent, Error> {
        if let Some(e) = self.tool_errors.into_iter().next() {
            return Err(e);
        }
        self.config.retry = self
            .retry
            .take()
            .or_else(|| self.client.retry_policy())
            .unwrap_or_default();
        if let Some(cache) = &self.config.prompt_cache {
            cache.validate()?;
        }
        if let Some(config) = &self.context_config {
            config.validate()?;
        }
        self.config.settings.validate()?;
        if self.config.max_tokens == 0 {
            return Err(ConfigError::setting("max_tokens", "must be at least 1").into());
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
            .model
            .clone()
            .unwrap_or_else(|| self.client.model().to_owned());
        if self.config.cost_budget.is_some() && self.config.pricing.price(&model).is_none() {
            return Err(ConfigError::setting(
                "cost_budget",
                format!("no price is known for the model {model:?}, so its calls cannot be kept within a budget: give its price (AgentBuilder::pricing)"),
            )
            .into());
        }
        let mut context = match (self.context, self.context_config) {
            (Some(mut ctx), Some(cfg)) => {
                ctx.set_config(cfg);
                ctx
            }
            (Some(ctx), None) => ctx,
            (None, cfg) => {
                ContextManager::new(cfg.unwrap_or_else(|| ContextConfig::for_model(&model)))
            }
        };
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
        let summarizer = match self.summarizer {
            Some(choice) => choice,
            None => Some(Arc::new(LlmSummarizer::new(self.client.clone())) as Arc<dyn Summarizer>),
        };
        let shared = Arc::new(Mutex::new(Shared::new(context)));
        Ok(Agent {
            client: self.client,
            tools,
            sources,
            config: self.config,
            hooks: self.hooks,
            summarizer,
            handle: AgentHandle::new(self.cancel, shared.clone()),
            session: self.session,
            shared,
            team: Arc::new(team),
            fallbacks: Arc::new(self.fallbacks),
            depth: 0,
            max_depth: self.max_depth,
            limiter: self.limiter,
        })
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
