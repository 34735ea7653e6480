//! Agents that use agents, on the driver's side: an agent as a tool ([`AgentTool`], from
//! [`Agent::as_tool`]), whose run's events go up to the caller's machine; the agents a
//! conversation can be handed to ([`Handoff`]), kept as the parts the driver switches to
//! (`Parts`, in `agent.rs`); and the link a run hands its tool calls ([`SubAgentLink`]).
//!
//! The decisions are the machine's: it reports the nested events and rolls their usage up
//! (`machine/nested.rs`), and it decides when a handoff happens (`machine/handoff.rs`).

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::Conversation;
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};

use super::agent::Agent;
use super::agent::Parts;
use super::events::{AgentEvent, NestedEvent};
use super::handle::{AgentHandle, Shared};
use super::machine::budget::Budget;
use super::machine::delegate;
use super::machine::handoff::HandoffFilter;
use super::path::{AgentPath, PathStep};

/// The longest a sub-agent's run may take by default ([`AgentTool::timeout`]).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What a run hands its tool calls, for the tools that run agents: how deep the run is, how
/// deep its sub-agents may go, and where their events go.
#[derive(Debug, Clone)]
pub(crate) struct SubAgentLink {
    /// The depth of the run making the calls (0 for a run the host started).
    pub(crate) depth: u32,
    /// The deepest a sub-agent may run.
    pub(crate) max_depth: u32,
    /// The run's channel for its sub-agents' events.
    pub(crate) events: mpsc::Sender<NestedEvent>,
    /// What the run's budgets have left: a sub-agent's run may spend no more.
    pub(crate) budget: Option<Budget>,
}

/// Where a tool sends the events of a run under its call: a remote agent's, a model it
/// calls itself (an MCP server's sampling request). From [`ToolContext::nested`].
///
/// The calling run reports each as [`AgentEvent::SubAgent`] with the path `{name}#{call id}`,
/// as it reports a sub-agent's ([`Agent::as_tool`]), and counts the usage of their
/// `TurnEnd` and `Retry` events toward its own spending and budgets once the nested run's
/// `Finished` comes (or, if none comes, when the call ends). Send them in the run's
/// grammar: `TurnStart`, the deltas, `TurnEnd`, and `Finished` last, with a
/// [`RunOutcome::new`](crate::RunOutcome::new) saying what the run did.
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::tool::FnTool;
/// use agent_loop::{Agent, AgentEvent, RunOutcome, StopReason, Termination, ToolContext, ToolError, Usage};
/// use futures::StreamExt;
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let oracle = FnTool::new("oracle", "Asks the oracle.", |_: serde_json::Value, ctx: ToolContext| async move {
///     let usage = Usage { input_tokens: 7, output_tokens: 2, ..Usage::default() };
///     if let Some(events) = ctx.nested("oracle") {
///         events.send(AgentEvent::TurnStart { turn: 1 }).await;
///         events.send(AgentEvent::TextDelta { text: "42".into() }).await;
///         events.send(AgentEvent::TurnEnd {
///             turn: 1,
///             stop_reason: StopReason::EndTurn,
///             usage,
///             cost: Default::default(),
///         }).await;
///         let mut outcome = RunOutcome::new(Termination::Completed);
///         outcome.usage = usage;
///         outcome.turns = 1;
///         events.send(AgentEvent::Finished(outcome)).await;
///     }
///     Ok::<_, ToolError>("42")
/// });
/// let model = ScriptedClient::new([
///     ScriptedResponse::tool_call("c1", "oracle", json!({})),
///     ScriptedResponse::text("The oracle says 42."),
/// ]);
/// let mut agent = Agent::builder(model).tool(oracle).build()?;
/// let events: Vec<AgentEvent> = agent.run("Ask the oracle").collect().await;
/// assert!(events.iter().any(|e| matches!(
///     e,
///     AgentEvent::SubAgent { path, event } if path.to_string() == "oracle#c1"
///         && matches!(**event, AgentEvent::TextDelta { .. })
/// )));
/// let Some(AgentEvent::Finished(outcome)) = events.last() else { panic!() };
/// assert_eq!(outcome.sub_agents[0].usage.input_tokens, 7);
/// # Ok::<(), agent_loop::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct NestedEvents {
    path: AgentPath,
    events: mpsc::Sender<NestedEvent>,
}

impl NestedEvents {
    /// The path the events are reported under: `{name}#{call id}`.
    pub fn path(&self) -> &AgentPath {
        &self.path
    }

    /// Sends one event. Waits while the calling run is busy (nothing is dropped); `false`
    /// once the run has stopped listening (it ended, or the call was abandoned).
    pub async fn send(&self, event: AgentEvent) -> bool {
        self.events
            .send(NestedEvent::new(self.path.clone(), event))
            .await
            .is_ok()
    }
}

impl ToolContext {
    /// Where to send the events of a run under this call (see [`NestedEvents`]), reported
    /// under the path `{name}#{call id}`; `None` when the call does not run inside an
    /// agent's run (a bare [`ToolRegistry`](crate::ToolRegistry)).
    pub fn nested(&self, name: impl Into<String>) -> Option<NestedEvents> {
        let link = self.extension::<SubAgentLink>()?;
        Some(NestedEvents {
            path: AgentPath::from(vec![PathStep::new(name, self.call_id())]),
            events: link.events.clone(),
        })
    }

    /// What the calling run's token budget
    /// ([`RunPolicy::token_budget`](crate::agent::RunPolicy::token_budget)) has left when
    /// the call started: what a model the tool calls itself may spend at most. `None` with
    /// no token budget, or outside an agent's run.
    pub fn tokens_left(&self) -> Option<u64> {
        self.extension::<SubAgentLink>()?.budget?.tokens
    }
}

/// An agent the conversation can be handed to, for
/// [`AgentBuilder::handoff`](crate::AgentBuilder::handoff): the model is offered a tool
/// `transfer_to_{name}` (the agent's [name](crate::AgentBuilder::name)), and calling it hands
/// the conversation over. From the next turn on, the agent's system prompt, tools, settings
/// and client apply; the history keeps the call and its answer (or what the
/// [input filter](Handoff::input_filter) lets through), and the run reports
/// [`AgentEvent::Handoff`].
///
/// The handoff lasts for the rest of the run; the agent's next run starts with the agent
/// itself again, on the whole history. The handoff call is answered by the agent itself: the
/// `before_tool` hook is not asked about it.
pub struct Handoff {
    agent: Agent,
    description: Option<String>,
    filter: HandoffFilter,
    keep: bool,
}

impl Handoff {
    /// A handoff to `agent`.
    pub fn new(agent: Agent) -> Self {
        Handoff {
            agent,
            description: None,
            filter: HandoffFilter::All,
            keep: false,
        }
    }

    /// Keeps the conversation with this agent after the run that handed it over: the
    /// agent's next runs start with it in charge (its system prompt, tools and settings)
    /// until it hands over again, as a customer stays with the specialist they were passed
    /// to. Without it (the default) a handoff lasts for its run, and the next run starts
    /// with the agent you built. The choice is the agent's, in this process: a session
    /// keeps the conversation, not who is in charge, so an agent that loads the session
    /// elsewhere starts with itself.
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent};
    /// use agent_loop::agent::Handoff;
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let billing = Agent::builder(ScriptedClient::new([
    ///     ScriptedResponse::text("Refunded."),
    ///     ScriptedResponse::text("Your invoice is attached."),
    /// ]))
    /// .name("billing")
    /// .build()?;
    /// let mut triage = Agent::builder(ScriptedClient::new([ScriptedResponse::tool_call(
    ///     "h1",
    ///     "transfer_to_billing",
    ///     json!({}),
    /// )]))
    /// .name("triage")
    /// .handoff(Handoff::new(billing).keep())
    /// .build()?;
    /// assert_eq!(triage.prompt("Refund order 7.").await?, "Refunded.");
    /// assert_eq!(triage.in_charge(), "billing");
    /// // The next question goes to billing at once: triage's model is not asked again.
    /// assert_eq!(triage.prompt("And the invoice?").await?, "Your invoice is attached.");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn keep(mut self) -> Self {
        self.keep = true;
        self
    }

    /// When the model should hand over, as the tool's description (default: "Hand the
    /// conversation over to the agent `name`.").
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// What history the agent sees (default: all of it).
    pub fn input_filter(mut self, filter: HandoffFilter) -> Self {
        self.filter = filter;
        self
    }

    /// The machine's view of the target and the driver's parts.
    pub(crate) fn into_parts(self) -> (super::machine::config::HandoffTarget, Parts) {
        let agent = self.agent;
        let target = super::machine::config::HandoffTarget::new(
            agent.machine_config(),
            agent.parts.sources.current().catalog(),
            agent.context().system().map(str::to_owned),
            self.description.as_deref(),
        )
        .filter(self.filter);
        let target = super::machine::config::HandoffTarget {
            keep: self.keep,
            ..target
        };
        (target, agent.parts)
    }
}

impl From<Agent> for Handoff {
    fn from(agent: Agent) -> Self {
        Handoff::new(agent)
    }
}

impl fmt::Debug for Handoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handoff")
            .field("agent", &self.agent.config.name)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

/// The default input of an agent used as a tool: the task.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
pub struct SubAgentTask {
    /// The task, with everything needed to do it: the agent sees nothing else of the
    /// conversation.
    pub task: String,
}

/// An agent used as a tool ([`Agent::as_tool`]): each call runs the agent on its own, fresh
/// conversation, with its own model, tools and limits, and answers with its final text.
///
/// - The call's events reach the host as [`AgentEvent::SubAgent`], tagged with their
///   [`AgentPath`]; the run's usage rolls up into the caller's outcome
///   ([`RunOutcome::sub_agents`](crate::RunOutcome::sub_agents) has it per sub-agent run).
/// - Several calls in one response run concurrently, each on its own conversation; their
///   results come back in the model's order.
/// - Cancelling the caller's run cancels the sub-agent's; a call past the
///   [depth limit](crate::agent::RunPolicy::max_depth) is answered with an error.
/// - A run that ends without an answer (a limit, a refusal, an error) is an error result
///   saying why; a sub-agent's run that pauses (for an approval or a deferred tool) is too:
///   pauses inside sub-agents are not supported.
///
/// Input: `{"task": "…"}` ([`SubAgentTask`]), or a type of yours with [`AgentTool::input`].
pub struct AgentTool<I = SubAgentTask> {
    template: Arc<Agent>,
    name: String,
    description: String,
    render: Arc<dyn Fn(I) -> String + Send + Sync>,
    timeout: Duration,
    on_finish: Option<Arc<FinishFn>>,
    _input: PhantomData<fn(I)>,
}

/// What [`AgentTool::on_finish`] is given each call's conversation with.
type FinishFn = dyn Fn(&str, Conversation) + Send + Sync;

/// A call's agent, whose conversation goes to the [`AgentTool::on_finish`] function when the
/// call ends, however it ends (its run's stream, dropped first, has left it valid).
struct CallAgent<'a> {
    agent: Agent,
    call_id: &'a str,
    on_finish: Option<&'a FinishFn>,
}

impl Drop for CallAgent<'_> {
    fn drop(&mut self) {
        if let Some(on_finish) = self.on_finish {
            on_finish(self.call_id, self.agent.snapshot());
        }
    }
}

impl Agent {
    /// This agent as a [`Tool`] named `name` (what the model calls it by, and what event
    /// paths call it) that runs it on a task: see [`AgentTool`].
    ///
    /// Each call starts from the conversation the agent holds now (usually none: give it a
    /// system prompt instead), never from another call's, and keeps it for itself: the
    /// agent's [session](crate::AgentBuilder::session), if it has one, is not used by its
    /// calls.
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, AgentEvent};
    /// use futures::StreamExt;
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let worker = Agent::builder(ScriptedClient::new([ScriptedResponse::text("Paris")]))
    ///     .system("Answer in one word.")
    ///     .build()?;
    /// let lead = ScriptedClient::new([
    ///     ScriptedResponse::tool_call("c1", "geographer", json!({"task": "Capital of France?"})),
    ///     ScriptedResponse::text("It is Paris."),
    /// ]);
    /// let mut agent = Agent::builder(lead)
    ///     .tool(worker.as_tool("geographer", "Answers geography questions."))
    ///     .build()?;
    /// let events: Vec<AgentEvent> = agent.run("Where is the Louvre?").collect().await;
    /// // The worker's own events come through, tagged with their path.
    /// assert!(events.iter().any(|e| matches!(
    ///     e,
    ///     AgentEvent::SubAgent { path, event } if path.to_string() == "geographer#c1"
    ///         && matches!(**event, AgentEvent::TextDelta { .. })
    /// )));
    /// let Some(AgentEvent::Finished(outcome)) = events.last() else { panic!() };
    /// assert_eq!(outcome.final_text, "It is Paris.");
    /// assert_eq!(outcome.sub_agents.len(), 1);
    /// # Ok::<(), agent_loop::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn as_tool(self, name: impl Into<String>, description: impl Into<String>) -> AgentTool {
        AgentTool {
            template: Arc::new(self),
            name: name.into(),
            description: description.into(),
            render: Arc::new(|task: SubAgentTask| task.task),
            timeout: DEFAULT_TIMEOUT,
            on_finish: None,
            _input: PhantomData,
        }
    }

    /// A new agent like this one, for one sub-agent call: the same client, tools, settings
    /// and hooks, a copy of the conversation, no session, cancelled with `cancel`.
    fn fresh(&self, depth: u32, max_depth: u32, cancel: CancellationToken) -> Agent {
        let shared = Arc::new(Mutex::new(Shared::new(self.context())));
        Agent {
            parts: self.parts.clone(),
            tools: self.tools.clone(),
            config: self.config.clone(),
            handle: AgentHandle::new(cancel, shared.clone()),
            session: None,
            shared,
            depth,
            max_depth,
            limiter: self.limiter.clone(),
        }
    }
}

impl<I> AgentTool<I> {
    /// Takes a typed input instead of `{"task": "…"}`: its JSON Schema is what the model sees,
    /// and `render` turns each call's input into the sub-agent's prompt.
    pub fn input<J>(self, render: impl Fn(J) -> String + Send + Sync + 'static) -> AgentTool<J> {
        AgentTool {
            template: self.template,
            name: self.name,
            description: self.description,
            render: Arc::new(render),
            timeout: self.timeout,
            on_finish: self.on_finish,
            _input: PhantomData,
        }
    }

    /// Hands each call's conversation (the sub-agent's own, with the call's id) to
    /// `on_finish` when the call ends: answered, failed, cancelled or timed out. It is always
    /// a valid history (a run cut short answers its open calls as interrupted), ready to
    /// save. Without it, a call's conversation is dropped with the call.
    pub fn on_finish(
        mut self,
        on_finish: impl Fn(&str, Conversation) + Send + Sync + 'static,
    ) -> Self {
        self.on_finish = Some(Arc::new(on_finish));
        self
    }

    /// The longest one call (the sub-agent's whole run) may take (default 10 minutes).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

impl<I> fmt::Debug for AgentTool<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentTool")
            .field("name", &self.name)
            .field("agent", &self.template)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<I> Tool for AgentTool<I>
where
    I: DeserializeOwned + schemars::JsonSchema + Send + 'static,
{
    type Input = I;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    async fn call(&self, input: I, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let link = ctx.extension::<SubAgentLink>();
        let caller = link.map(|l| (l.depth, l.max_depth));
        let (depth, max_depth) = delegate::depth(&self.name, caller, self.template.max_depth)?;
        let mut agent = self
            .template
            .fresh(depth, max_depth, ctx.cancellation().clone());
        if let Some(left) = link.and_then(|l| l.budget) {
            left.bound(&mut agent.config);
        }
        let mut call = CallAgent {
            agent,
            call_id: ctx.call_id(),
            on_finish: self.on_finish.as_deref(),
        };
        let path = AgentPath::from(vec![PathStep::new(self.name.clone(), ctx.call_id())]);
        let events = link.map(|l| l.events.clone());
        // Declared after `call`, so dropped before it: a cancelled call's run gives its
        // conversation back, repaired, before `on_finish` reads it.
        let mut run = call.agent.run((self.render)(input));
        let mut outcome = None;
        while let Some(event) = run.next().await {
            if let AgentEvent::Finished(finished) = &event {
                outcome = Some(finished.clone());
            }
            if let Some(events) = &events {
                // Waits while the caller's run is busy: nothing is dropped. A caller gone
                // has stopped listening; the run goes on to its end.
                let _ = events.send(NestedEvent::new(path.clone(), event)).await;
            }
        }
        drop(run);
        delegate::answer(&self.name, outcome)
    }
}
