//! The loop itself as a sans-IO state machine: inputs in, actions out, time passed in.
//!
//! Like quinn-proto's `Connection`, [`AgentMachine`] owns the conversation and makes every
//! decision of a run, and does no I/O: no sockets, no clock, no tasks, no channels, no
//! `async`. Whoever drives it feeds [`Input`]s with [`AgentMachine::handle`] and carries out
//! the [`Action`]s that [`AgentMachine::poll`] gives: call the model, ask the hooks, run
//! tools, emit an event, sleep, summarize for compaction, finish. The tokio driver behind
//! [`Agent::run`](crate::Agent::run) is one such driver; a durable engine can carry out the
//! same actions as journaled steps.
//!
//! See [`AgentMachine`] for its states.

// What the machine reads and makes: its settings, the pure decisions of a turn, the
// structured answer, sub-agents' runs, a paused run, spend and budgets, handoffs, and what a
// sub-agent call decides.
pub(super) mod budget;
pub(super) mod config;
pub(super) mod delegate;
pub(super) mod digest;
pub(super) mod handoff;
pub(super) mod nested;
pub(super) mod output;
pub(super) mod pause;
pub(crate) mod policy;
pub(super) mod turn;

pub use self::config::{HandoffTarget, MachineConfig, DEFAULT_MAX_TOKENS};
pub use self::policy::RunPolicy;
pub use crate::agent::fallback::FallbackTarget;

// The machine's own state, in owned parts.
mod attempt;
mod batch;
mod counters;
mod ids;
mod in_flight;
mod routing;
mod spending;
mod steering;
mod structured;
mod text;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::context::{CompactionReport, CompactionStep, ContextManager, Conversation};
use crate::error::{ConfigError, Error, LlmError, ResumeError};
use crate::input::UserInput;
use crate::message::{ContentBlock, Message, Role, StopReason, Usage};
use crate::pricing::Cost;
use crate::provider::cache::PromptCache;
use crate::provider::transport::RetryPolicy;
use crate::provider::{ModelRequest, RequestSettings, ToolChoice};
use crate::tool::{Reply, ToolCall, ToolCallResult, ToolCatalog, ToolProgress};
use crate::wire::LlmEvent;
use crate::wire::{ModelResponse, StreamAssembler};

use self::budget::{Budget, Estimate, Verdict};
use self::handoff::HandoffFilter;
use self::nested::NestedRuns;
use self::output::{RunOptions, StructuredOutput};
use self::pause::{PauseState, PausedRun, Resolution, Resolutions, Waiting, PAUSE_FORMAT};
use self::turn::Next;
use crate::agent::events::{AgentEvent, NestedEvent, RunOutcome, Termination, INTERRUPTED_STOP};
use crate::agent::hooks::ToolDecision;

use attempt::{Attempt, Early};
use batch::Batch;
use counters::Counters;
use ids::CallIds;
use in_flight::InFlight;
use routing::Routing;
use spending::Spending;
use steering::Steering;
use structured::Answer;
use text::AnswerText;

/// Marker appended to answer text that a cancellation cut short.
const INTERRUPTED_MARK: &str = "\n\n[interrupted]";
/// The most tool-call block ids remembered per response (for `ToolInputDelta` events).
const MAX_BLOCK_IDS: usize = 4096;

/// Something that happened, fed to [`AgentMachine::handle`].
// An input is made, moved once into `handle` and dropped: a sub-agent's event (the largest,
// an `AgentEvent` with its path) is kept inline rather than boxed, which would cost an
// allocation per nested event for no saving.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
#[derive(Debug)]
pub enum Input {
    /// An event of the model response asked for by the last [`Action::CallModel`].
    ModelEvent(LlmEvent),
    /// The model response's stream ended: `Ok` when it simply ended, `Err` with why it
    /// failed. Not needed after [`LlmEvent::MessageStop`] (the machine stops listening then,
    /// and says so with [`Action::StopModel`]).
    ModelEnded(Result<(), LlmError>),
    /// The `before_model_call` hook stopped the run instead of the model call.
    HookStopped(String),
    /// The verdicts on the calls of the last [`Action::Approve`], in its order.
    Approved(Vec<ToolDecision>),
    /// A tool call of an [`Action::RunTools`] finished.
    ToolDone(ToolCallResult),
    /// A running tool reported progress.
    ToolProgress(ToolProgress),
    /// An event of a sub-agent's run, from a running call that runs an agent
    /// ([`Agent::as_tool`](crate::Agent::as_tool)): reported as [`AgentEvent::SubAgent`], its
    /// usage rolled up into the run's. Feed a call's nested events before its result (its
    /// result closes what is left open of its nested runs). Ignored unless the path's first
    /// step names a call that runs.
    Nested(NestedEvent),
    /// The summary asked for by the last [`Action::Summarize`], or why there is none (the
    /// compaction then goes on without one).
    Summary(Result<String, Error>),
    /// Stop at once: running tools are abandoned and answered as cancelled.
    Cancel,
    /// Let the current turn finish (the model's answer and its tools' results), then end
    /// with [`Termination::StoppedAfterTurn`]. Nothing is aborted; a run that ends anyway at
    /// this turn's end (a final answer) ends as it would have.
    StopAfterTurn,
    /// The host's words for a run in flight (steering): queued, in order, and added to the
    /// history as a user message at the next safe point, a turn boundary (after the last
    /// response's calls are all answered, before the next model call), each reported there
    /// with [`AgentEvent::Steered`]. A response that would end the run with a final answer
    /// while some wait goes on to another turn that delivers them. What the run never
    /// delivers (it ended first: cancelled, stopped, paused, at a limit) is handed back in
    /// [`RunOutcome::undelivered`]. Ignored once the run is over (the driver hands it back
    /// itself then).
    Steer(UserInput),
    /// Stop at once with this error, as [`Cancel`](Input::Cancel) stops (running tools are
    /// abandoned and answered as cancelled): the driver cannot go on (a session it could
    /// not save). The run ends with [`Termination::Error`].
    Abort(Error),
    /// The agent's tools changed (a [`ToolSource`](crate::tool::ToolSource) such as an MCP server
    /// added or removed some): this catalog ([`ToolRegistry::catalog`](crate::ToolRegistry::catalog))
    /// replaces the machine's. The next [`Action::CallModel`] lists these tools, and the
    /// machine judges calls by them from now on (read-only or not); the driver runs the calls
    /// with the registry it came from. Feed it between turns (after a `TurnEnd`, before
    /// polling for the next turn); it is taken in any state and never changes the state, so a
    /// late one breaks nothing (a request already sent keeps the tools it listed). Ignored
    /// once the run is over, and when the catalog has a tool named like the run's answer tool
    /// ([`RunOptions::output`]).
    ToolsChanged(ToolCatalog),
}

impl Input {
    /// The input's name, for logs.
    fn kind(&self) -> &'static str {
        match self {
            Input::ModelEvent(_) => "ModelEvent",
            Input::ModelEnded(_) => "ModelEnded",
            Input::HookStopped(_) => "HookStopped",
            Input::Approved(_) => "Approved",
            Input::ToolDone(_) => "ToolDone",
            Input::ToolProgress(_) => "ToolProgress",
            Input::Nested(_) => "Nested",
            Input::Summary(_) => "Summary",
            Input::Cancel => "Cancel",
            Input::StopAfterTurn => "StopAfterTurn",
            Input::Steer(_) => "Steer",
            Input::Abort(_) => "Abort",
            Input::ToolsChanged(_) => "ToolsChanged",
        }
    }
}

/// A machine and what its driver applies around it: the agent's hooks and summarizer
/// ([`AgentBuilder::build_machine_parts`](crate::AgentBuilder::build_machine_parts)).
#[non_exhaustive]
pub struct MachineParts {
    /// The machine.
    pub machine: AgentMachine,
    /// The hooks, when the builder was given some: ask `before_model_call` on each
    /// [`Action::CallModel`] and `before_tool` on each call of an [`Action::Approve`].
    /// `None`: every call is allowed and every model call goes on.
    pub hooks: Option<std::sync::Arc<dyn crate::agent::hooks::AgentHooks>>,
    /// What answers [`Action::Summarize`]; `None` when the agent has none (answer
    /// [`Input::Summary`] with an error then).
    pub summarizer: Option<std::sync::Arc<dyn crate::context::Summarizer>>,
}

impl std::fmt::Debug for MachineParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineParts")
            .field("machine", &self.machine)
            .field("hooks", &self.hooks.is_some())
            .field("summarizer", &self.summarizer.is_some())
            .finish_non_exhaustive()
    }
}

/// What [`AgentMachine::handle`] (or [`AgentMachine::handle_timeout`]) made of an input.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The machine took it.
    Taken,
    /// It came too late or out of place (the result of a call already answered or
    /// abandoned, an answer to nothing asked, anything after the run ended) and changed
    /// nothing. Normal for a driver whose tools and model run concurrently with a cancel;
    /// anything else is a driver bug worth a look.
    Ignored,
}

/// Something the driver must do, taken from [`AgentMachine::poll`].
///
/// # A new variant is a breaking change
///
/// The enum is exhaustive on purpose (no `#[non_exhaustive]`): a driver that does not carry
/// out an action breaks the run (a tool left running, a conversation never saved), so a new
/// action must fail to compile until each driver decides what to do with it. The drivers of
/// the workspace (the tokio driver behind [`Agent::run`](crate::Agent::run) and the Restate
/// driver) match it without a `_` arm. Adding a variant is a breaking change, released as a
/// minor version while the crate is 0.x (and listed in the changelog); a driver of yours
/// should match every action too, with `..` in variants with fields (a new field then breaks
/// none of your matches).
#[derive(Debug)]
pub enum Action {
    /// Report this event to the host.
    Emit(AgentEvent),
    /// Ask the model for a response to this request (after the `before_model_call` hook,
    /// which may change it or answer with [`Input::HookStopped`]); feed its events as
    /// [`Input::ModelEvent`] and its end as [`Input::ModelEnded`].
    CallModel(ModelRequest),
    /// Stop reading the model response in flight: the machine has what it needs (or gave up
    /// on it).
    StopModel,
    /// Ask the `before_tool` hook about these calls; answer with [`Input::Approved`].
    Approve(Vec<ToolCall>),
    /// Run these calls (concurrently where their tools allow); answer each with
    /// [`Input::ToolDone`], and forward their progress as [`Input::ToolProgress`] before
    /// their results.
    RunTools(Vec<ToolCall>),
    /// Abandon every tool call still running: their results are no longer wanted.
    AbortTools,
    /// The conversation was handed to another agent: from now on, call the model with its
    /// client and run calls with its tools (the machine's requests carry its settings
    /// already). `route` finds it from the agent the run started with: the index of each
    /// handoff in [`MachineConfig::handoffs`], outermost first.
    Handoff {
        /// The new agent's name.
        to: String,
        /// Where it is among the agents' handoffs.
        route: Vec<usize>,
    },
    /// From now on, call the model with the fallback at `index` of
    /// [`MachineConfig::fallbacks`] (the config in force: after a handoff, the new agent's);
    /// the machine's requests ask for its model already.
    Fallback {
        /// Its position in the fallbacks.
        index: usize,
        /// The model that failed.
        from: String,
        /// The fallback's model.
        to: String,
    },
    /// Summarize these messages (the oldest turns, which compaction replaces with the
    /// summary); answer with [`Input::Summary`].
    Summarize(Vec<Message>),
    /// A turn has ended whole (right after its [`AgentEvent::TurnEnd`]): the conversation
    /// is valid here (every call answered), so a driver that keeps it in a store saves it
    /// now. The machine says where to save; a driver never decides it from the events.
    /// A driver without a store (or one whose journal already keeps each step) does nothing.
    Checkpoint,
    /// The run is over; this is the last action. The conversation is left valid
    /// ([`AgentMachine::into_context`]). The driver reports
    /// [`AgentEvent::Finished`] with this outcome once it has released what the run held.
    Finish(RunOutcome),
}

/// What the machine waits for.
#[derive(Debug)]
enum State {
    /// Not started.
    Idle,
    /// The summary a compaction asked for (then the model call, or the re-sent one).
    Summarizing,
    /// The model's response (or the hook's verdict before it).
    ModelCall(Box<Attempt>),
    /// The backoff before re-sending the turn, until this instant
    /// ([`AgentMachine::poll_timeout`]).
    Backoff(Instant),
    /// The hook's verdicts on a response's calls.
    Approving(Box<Batch>),
    /// The results of a response's calls.
    RunningTools(Box<Batch>),
    /// Nothing: the next turn starts when the driver next polls, so that a stop request the
    /// host made on seeing `TurnEnd` applies before it.
    NextTurn,
    /// The run is over.
    Finished,
}

/// The agent loop as a sans-IO state machine. Build one with
/// [`AgentBuilder::build_machine`](crate::AgentBuilder::build_machine); feed it [`Input`]s,
/// carry out its [`Action`]s. It owns the conversation and makes every decision of a run;
/// it reads no clock (time comes in with each input), opens no socket, spawns nothing.
///
/// Its states, named after what each waits for:
///
/// ```text
///            start
///              │
///              ▼
///   ┌──► next turn ──(limit, stop request)──────────────────────────────► Finished
///   │          │
///   │          ├─(over the threshold: compact; a summary wanted)──► Summarizing
///   │          ▼                                                       │ Summary
///   │    ModelCall ◄─────────────────────────────────────────────────────┘
///   │     │  ▲   events: deltas, early read-only calls (Approve → RunTools)
///   │     │  ├── Backoff ◄──(failed, retryable, retries left)── timeout
///   │     │  └── compact (Summarizing) ◄──(context overflow, once per turn)
///   │     ▼ response
///   │  (refused, cut off, final call) ───────────────────────────────────► Finished
///   │  (pause_turn, continuation) ──► next turn
///   │     ▼ tool calls
///   │  Approving ──Approved──► RunningTools ──ToolDone…──┐
///   └──────────────────────────────(all answered)────────┘
/// ```
///
/// Any state goes to `Finished` on [`Input::Cancel`], leaving the history valid. The host's
/// words ([`Input::Steer`]) wait in any state and go into the history at "next turn" only,
/// where every call of the last response is answered.
///
/// One full tool round trip, driven by hand with no runtime:
///
/// ```
/// use std::time::Instant;
/// use agent_loop::agent::machine::{Action, Input};
/// use agent_loop::testing::ScriptedClient;
/// use agent_loop::{Agent, AgentEvent, LlmEvent, StopReason, Termination, ToolError};
/// use agent_loop::tool::{FnTool, ToolCallResult};
/// use serde_json::json;
///
/// let add = FnTool::new("add", "Adds.", |x: serde_json::Value, _ctx| async move {
///     Ok::<_, ToolError>("unused: the host runs the tool itself here")
/// });
/// let mut machine = Agent::builder(ScriptedClient::new([])).tool(add).build_machine()?;
/// machine.start("What is 2 + 3?", Instant::now());
///
/// // Two model responses, as the events a stream gives.
/// let call = vec![
///     LlmEvent::ToolCallStart { index: 0, id: "c1".into(), name: "add".into() },
///     LlmEvent::ToolCallDelta { index: 0, partial_json: r#"{"a":2,"b":3}"#.into() },
///     LlmEvent::BlockStop { index: 0 },
///     LlmEvent::MessageStop { stop_reason: StopReason::ToolUse },
/// ];
/// let answer = vec![
///     LlmEvent::TextDelta { index: 0, text: "5".into() },
///     LlmEvent::BlockStop { index: 0 },
///     LlmEvent::MessageStop { stop_reason: StopReason::EndTurn },
/// ];
/// let mut responses = vec![call, answer].into_iter();
/// let mut events = Vec::new();
/// // What the machine waits for: `None` from `poll()` means "feed me an input".
/// let mut stream = Vec::new().into_iter();
/// let mut waiting: std::collections::VecDeque<Input> = Default::default();
/// let outcome = loop {
///     let Some(action) = machine.poll() else {
///         // A timer set (a backoff before re-sending the turn): a real driver sleeps
///         // until then.
///         if let Some(at) = machine.poll_timeout() {
///             machine.handle_timeout(at);
///             continue;
///         }
///         // Feed the next input: an answer it asked for, else the model's next event.
///         let input = match waiting.pop_front() {
///             Some(input) => input,
///             None => match stream.next() {
///                 Some(event) => Input::ModelEvent(event),
///                 None => Input::ModelEnded(Ok(())),
///             },
///         };
///         machine.handle(input, Instant::now());
///         continue;
///     };
///     match action {
///         Action::Emit(event) => events.push(event),
///         Action::CallModel(_request) => {
///             stream = responses.next().expect("a scripted response").into_iter();
///         }
///         Action::StopModel => stream = Vec::new().into_iter(),
///         Action::Approve(calls) => {
///             let verdicts = calls.iter().map(|_| agent_loop::agent::ToolDecision::Allow).collect();
///             waiting.push_back(Input::Approved(verdicts));
///         }
///         Action::RunTools(calls) => {
///             for call in calls {
///                 let sum = call.input["a"].as_i64().unwrap_or(0) + call.input["b"].as_i64().unwrap_or(0);
///                 let result = ToolCallResult::new(call.id, call.name, sum.to_string(), false,
///                                                  std::time::Duration::ZERO);
///                 waiting.push_back(Input::ToolDone(result));
///             }
///         }
///         // A real driver aborts its running tools here; these run at once.
///         Action::AbortTools => {}
///         // A real driver asks a model for a summary of these messages.
///         Action::Summarize(_messages) => waiting.push_back(Input::Summary(Ok("…".into()))),
///         // A turn ended whole: a driver with a session store saves the conversation here.
///         Action::Checkpoint => {}
///         Action::Finish(outcome) => break outcome,
///         // A real driver switches to the new agent's or the fallback's client and tools here
///         // (this one configures neither). Every action is listed: a new one will not compile
///         // until the driver decides what to do with it.
///         Action::Handoff { .. } | Action::Fallback { .. } => {}
///     }
/// };
/// assert_eq!(outcome.termination, Termination::Completed);
/// assert_eq!(outcome.final_text, "5");
/// assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolResult { content, .. } if content == "5")));
/// assert_eq!(machine.context().messages().len(), 4);
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[derive(Debug)]
pub struct AgentMachine {
    /// The settings of the agent in charge (after a handoff, the new agent's; after a
    /// fallback, with its model).
    config: MachineConfig,
    /// The conversation: valid for every provider between inputs (see `finish`).
    context: ContextManager,
    /// What the model may call (the agent in charge's tools).
    tools: ToolCatalog,
    state: State,
    /// The actions not yet polled, in order.
    out: VecDeque<Action>,
    /// This run's request settings (the run's over the builder's).
    settings: RequestSettings,
    /// The turn, retry, continuation and pause counts, and the final call.
    counters: Counters,
    /// Why the final call is made when a budget (not the turn limit) asked for it: how the
    /// run ends after it. Only set with `counters.final_call`; not kept by a pause (a resumed
    /// final call ends as the turn limit ends it).
    final_cause: Option<Termination>,
    /// The answer text so far, and the attempt in flight's.
    text: AnswerText,
    /// The structured answer asked for, and how it goes.
    answer: Answer,
    /// The tool-call ids of the conversation, and the renaming of repeated ones.
    ids: CallIds,
    /// What the run spent, and the turn's cost.
    spending: Spending,
    /// Which agent and which model have the run.
    routing: Routing,
    /// When the calls started, and which are answered.
    in_flight: InFlight,
    /// Sub-agents' runs under this run's calls.
    nested: NestedRuns,
    /// What the host typed into the run, until the next turn boundary.
    steering: Steering,
    /// Why the input being handled changed nothing, if it did not.
    ignored: Option<&'static str>,
    /// The version of the session the run started from, when it has one: named in the ids
    /// of its pauses ([`set_session_version`](Self::set_session_version)).
    session_version: Option<u64>,
}

impl AgentMachine {
    /// A machine for one run over `context`, with `tools` (what the model may call; the
    /// driver runs the calls) and these settings.
    /// [`AgentBuilder::build_machine`](crate::AgentBuilder::build_machine) builds one from an
    /// agent's settings; this is for a driver that has no [`Agent`](crate::Agent).
    ///
    /// ```
    /// use std::time::Instant;
    /// use agent_loop::agent::machine::{Action, AgentMachine, MachineConfig};
    /// use agent_loop::{ContextManager};
    /// use agent_loop::context::ContextConfig;
    /// use agent_loop::tool::ToolCatalog;
    ///
    /// let mut machine = AgentMachine::new(
    ///     MachineConfig::default(),
    ///     ContextManager::new(ContextConfig::default()),
    ///     ToolCatalog::new(),
    /// );
    /// machine.start("Hi", Instant::now());
    /// let first: Vec<Action> = std::iter::from_fn(|| machine.poll()).collect();
    /// assert!(first.iter().any(|a| matches!(a, Action::CallModel(_))));
    /// ```
    pub fn new(config: MachineConfig, context: ContextManager, tools: ToolCatalog) -> Self {
        AgentMachine {
            config,
            context,
            tools,
            state: State::Idle,
            out: VecDeque::new(),
            settings: RequestSettings::default(),
            counters: Counters::default(),
            final_cause: None,
            text: AnswerText::default(),
            answer: Answer::default(),
            ids: CallIds::default(),
            spending: Spending::default(),
            routing: Routing::default(),
            in_flight: InFlight::default(),
            nested: NestedRuns::default(),
            steering: Steering::default(),
            ignored: None,
            session_version: None,
        }
    }

    /// Tells a new run's machine the version of the session it starts from (a driver with a
    /// session store calls it once the run holds the session, before
    /// [`start`](Self::start)): its pauses' ids name it (`v7-t1-p1-call_1`), and a resumed
    /// run's pauses go on naming it (the [`PausedRun`] keeps it). A session's log only grows,
    /// so a run that pauses after a rewind never takes the id of a pause before it, though its
    /// turn, its pause count and its call's id may be the same. Without it (an agent with no
    /// session), an id is `t1-p1-call_1`: unique within its conversation, which nothing
    /// rewinds.
    pub fn set_session_version(&mut self, version: u64) {
        self.session_version = Some(version);
    }

    /// A machine that continues a [`PausedRun`] with the host's answers to its waiting
    /// calls, over `context` (whose settings and counter it keeps; the paused run's
    /// conversation replaces its messages), with `tools`. It is started already: poll it.
    /// Calls left without an answer keep waiting (the run pauses again once everything else
    /// is done). `options` give the typed answer back (the paused run keeps only its
    /// schema) and settings over the paused run's.
    ///
    /// Refused, with nothing run: an answer for a call that does not wait, an approval of a
    /// tool the agent had when it paused and the catalog lacks (a call of a tool it never
    /// had is answered as unknown, as it would have been), another answer tool, a paused run of another format or one
    /// that does not hold together.
    pub fn resume(
        config: MachineConfig,
        mut context: ContextManager,
        tools: ToolCatalog,
        paused: &PausedRun,
        resolutions: &Resolutions,
        options: RunOptions,
        now: Instant,
    ) -> Result<AgentMachine, ResumeError> {
        // The paused run, deserialized already, is checked against this agent and the answers.
        let calls = paused.check(resolutions, &tools)?;
        let state = &paused.state;
        let answer = Answer::resumed(state.output.as_ref(), options.output)?;

        // The agent in charge when it paused: the handoffs taken, in order.
        let Some((config, routing)) =
            Routing::resumed(&state.routing.route, config, context.system())
        else {
            return Err(ResumeError::Damaged(
                "it was handed to an agent this one cannot hand to".to_owned(),
            ));
        };
        context.restore_paused(paused.conversation.clone());
        let mut machine = AgentMachine::new(config, context, tools);
        machine.routing = routing;
        machine.nested = NestedRuns::restore(state.sub_agents.clone());
        machine.counters = Counters::resumed(&state.counters);
        machine.spending = state.spending.paused();
        machine.text = state.text.paused();
        machine.ids = CallIds::resumed(&state.ids, machine.context.messages());
        // Its pauses go on naming the session version the run started from.
        machine.session_version = state.session_version;
        machine.settings = options.settings.over(&state.settings);
        machine.answer = answer;

        let message = machine
            .context
            .messages()
            .last()
            .cloned()
            .unwrap_or_else(|| Message::assistant(""));
        let mut batch = Box::new(Batch::resumed(message, calls, state));
        for result in batch.results.iter().flatten() {
            machine.in_flight.answer(&result.id);
        }
        machine.state = match &state.waiting {
            Waiting::Approval { verdicts } => {
                let mut decided = Vec::with_capacity(verdicts.len());
                for (i, verdict) in verdicts {
                    let i = *i;
                    let verdict = match verdict {
                        Some(verdict) => Some(verdict.clone()),
                        None => match resolutions.get(&batch.calls[i].id) {
                            Some(Resolution::Approve) => Some(ToolDecision::Allow),
                            Some(Resolution::Deny { reason }) => {
                                Some(ToolDecision::Deny(reason.clone()))
                            }
                            // The host ran it: its result answers it.
                            Some(Resolution::Result { content, is_error }) => {
                                machine.answer_with(&mut batch, i, content, *is_error, now);
                                continue;
                            }
                            None => None,
                        },
                    };
                    decided.push((i, verdict));
                }
                let stops = decided
                    .iter()
                    .any(|(_, v)| matches!(v, Some(ToolDecision::Stop(_))));
                if !stops && decided.iter().any(|(_, v)| v.is_none()) {
                    batch.paused_verdicts = Some(decided);
                    machine.launch(batch, now)
                } else {
                    let decided = decided
                        .into_iter()
                        .map(|(i, v)| (i, v.unwrap_or(ToolDecision::Pause)))
                        .collect();
                    machine.apply_verdicts(batch, decided, now)
                }
            }
            Waiting::Results { calls: waiting } => {
                for &i in waiting {
                    if let Some(question) = state.asked.get(&batch.calls[i].id) {
                        // An asking call runs again with its answer, or keeps waiting.
                        match resolutions.get(&batch.calls[i].id) {
                            Some(resolution) => {
                                let reply = Reply::new(question.clone(), resolution.clone());
                                batch.calls[i] = batch.calls[i].clone().with_reply(reply);
                                batch.held.push(i);
                            }
                            None => {
                                batch.asked.insert(i, question.clone());
                                batch.outside.push(i);
                            }
                        }
                        continue;
                    }
                    match resolutions.get(&batch.calls[i].id) {
                        Some(Resolution::Result { content, is_error }) => {
                            machine.answer_with(&mut batch, i, content, *is_error, now);
                        }
                        Some(Resolution::Deny { reason }) => {
                            machine.answer(&mut batch, i, &format!("denied: {reason}"), now);
                        }
                        _ => batch.outside.push(i),
                    }
                }
                machine.launch(batch, now)
            }
        };
        Ok(machine)
    }

    /// Starts a run on `input`, continuing the conversation the machine holds. A machine
    /// runs once; starting it again does nothing.
    pub fn start(&mut self, input: impl Into<UserInput>, now: Instant) {
        self.start_with(input, RunOptions::default(), now);
    }

    /// Starts a run on `input` with per-run options (request settings over the builder's, a
    /// structured answer). Options that cannot work (a setting out of range, an answer tool
    /// named like one of the agent's tools, a forced tool the agent does not have) end the run
    /// at once with [`Termination::Error`], before the input is added.
    pub fn start_with(&mut self, input: impl Into<UserInput>, options: RunOptions, now: Instant) {
        // Nothing at the start waits on the clock (the first turn starts at the next poll);
        // the instant is taken so that every input to the machine comes with its time.
        let _ = now;
        if !matches!(self.state, State::Idle) {
            return;
        }
        let settings = options.settings.over(&self.config.settings);
        if let Err(e) = self.check_options(&settings, options.output.as_ref()) {
            self.finish(Termination::Error(e));
            return;
        }
        self.settings = settings;
        self.answer.asked = options.output;
        self.context.repair();
        self.context.push(input.into().into_message());
        self.ids.reset(self.context.messages());
        self.state = State::NextTurn;
    }

    fn check_options(
        &self,
        settings: &RequestSettings,
        output: Option<&StructuredOutput>,
    ) -> Result<(), Error> {
        settings.validate()?;
        if let Some(output) = output {
            if self.tools.contains(output.tool_name()) {
                return Err(ConfigError::Tool {
                    tool: output.tool_name().to_owned(),
                    message: format!(
                        "the answer tool's name \"{}\" is taken by one of the agent's tools; \
                         name it otherwise (StructuredOutput::name)",
                        output.tool_name()
                    ),
                }
                .into());
            }
        }
        if let Some(ToolChoice::Tool(name)) = &settings.tool_choice {
            let known = self.tools.contains(name) || output.is_some_and(|o| o.tool_name() == name);
            if !known {
                return Err(ConfigError::UnknownTool {
                    setting: "tool_choice",
                    tool: name.clone(),
                }
                .into());
            }
        }
        Ok(())
    }

    /// The next thing to do, or `None` when the machine waits for an input (or is done).
    pub fn poll(&mut self) -> Option<Action> {
        if self.out.is_empty() && matches!(self.state, State::NextTurn) {
            self.state = self.begin_turn();
        }
        self.out.pop_front()
    }

    /// Whether the run is over (its [`Action::Finish`] was queued).
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Finished)
    }

    /// The conversation.
    pub fn context(&self) -> &ContextManager {
        &self.context
    }

    /// The conversation, to mark it saved.
    pub(crate) fn context_mut(&mut self) -> &mut ContextManager {
        &mut self.context
    }

    /// Notes that the conversation as it is now is saved, for a driver that saves each
    /// turn's changes ([`ContextManager::unsaved`]) in a store of its own.
    pub fn mark_saved(&mut self) {
        self.context.mark_saved();
    }

    /// The conversation, once the run is over (or to abandon the machine): left valid.
    pub fn into_context(mut self) -> ContextManager {
        self.context.repair();
        self.context
    }

    /// The settings in force: the agent's, or, after a handoff, the agent's it was handed to.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// The turn in progress (1 for the first), 0 before the first.
    pub fn turn(&self) -> u32 {
        self.counters.turns
    }

    /// Takes one input, at `now`. An input that comes too late or out of place (a result of
    /// a call already answered or abandoned, an answer to nothing asked, anything after the
    /// run ended) changes nothing and is reported as [`Handled::Ignored`] (and logged at
    /// debug level), never silently dropped.
    pub fn handle(&mut self, input: Input, now: Instant) -> Handled {
        self.ignored = None;
        match input {
            Input::Cancel => self.cancel(Termination::Cancelled, now),
            Input::Abort(error) => self.cancel(Termination::Error(error), now),
            Input::StopAfterTurn => self.counters.stop_after_turn = true,
            Input::Steer(input) => self.steer(input),
            Input::ToolProgress(progress) => self.progress(progress),
            Input::Nested(nested) => self.nested_event(nested),
            Input::ToolsChanged(tools) => self.set_tools(tools),
            input => {
                let state = std::mem::replace(&mut self.state, State::Finished);
                self.state = match (state, input) {
                    (State::ModelCall(attempt), input) => self.on_model(attempt, input, now),
                    (State::Summarizing, Input::Summary(summary)) => self.on_summary(summary),
                    (State::Approving(batch), Input::Approved(verdicts)) => {
                        self.on_approved(batch, verdicts, now)
                    }
                    (State::RunningTools(batch), Input::ToolDone(result)) => {
                        self.on_tool_done(batch, result, now)
                    }
                    (state, input) => {
                        self.ignore(&input, "the machine does not wait for it now");
                        state
                    }
                };
            }
        }
        match self.ignored.take() {
            Some(_) => Handled::Ignored,
            None => Handled::Taken,
        }
    }

    /// When the machine wants [`handle_timeout`](Self::handle_timeout): the end of the
    /// backoff before a turn is re-sent. `None` when no timer is set.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Backoff(until) => Some(*until),
            _ => None,
        }
    }

    /// The time has come to `now`: a backoff that has run out re-sends the turn. Early (before
    /// [`poll_timeout`](Self::poll_timeout)), or with no timer set, it changes nothing and is
    /// reported as [`Handled::Ignored`].
    pub fn handle_timeout(&mut self, now: Instant) -> Handled {
        match self.state {
            State::Backoff(until) if now >= until => {
                self.state = self.call_model();
                Handled::Taken
            }
            _ => {
                tracing::debug!("a timeout the machine did not set, or before its time; ignored");
                Handled::Ignored
            }
        }
    }

    /// Notes that the input being handled changes nothing.
    fn ignore(&mut self, input: &Input, why: &'static str) {
        tracing::debug!(input = input.kind(), why, "input ignored");
        self.ignored = Some(why);
    }

    /// Queues the host's words for the next turn boundary (see [`Input::Steer`]).
    fn steer(&mut self, input: UserInput) {
        if matches!(self.state, State::Finished) {
            self.ignored = Some("steering after the run ended");
            return;
        }
        self.steering.push(input);
    }

    /// Whether the host's words wait for the next turn boundary (see [`Input::Steer`]).
    pub fn has_steering(&self) -> bool {
        !self.steering.is_empty()
    }

    /// Replaces the tools (see [`Input::ToolsChanged`]).
    fn set_tools(&mut self, tools: ToolCatalog) {
        if matches!(self.state, State::Finished) {
            self.ignored = Some("tools changed after the run ended");
            return;
        }
        if let Some(output) = &self.answer.asked {
            if tools.contains(output.tool_name()) {
                tracing::warn!(
                    tool = output.tool_name(),
                    "the changed tools include one named like the answer tool; keeping the old tools"
                );
                self.ignored = Some("the changed tools include one named like the answer tool");
                return;
            }
        }
        self.context.set_tools(tools.specs());
        self.tools = tools;
    }

    // ----- turns ---------------------------------------------------------------------

    fn emit(&mut self, event: AgentEvent) {
        self.out.push_back(Action::Emit(event));
    }

    fn begin_turn(&mut self) -> State {
        if self.counters.turns > 0 && self.counters.stop_after_turn {
            return self.finish(Termination::StoppedAfterTurn);
        }
        if self.counters.turns >= self.config.policy.max_turns {
            if (self.config.policy.final_answer_at_max_turns || self.answer.asked.is_some())
                && !self.counters.final_call
            {
                self.counters.make_final();
            } else {
                return self.finish(Termination::MaxTurns);
            }
        }
        // The safe point: the last response's calls are all answered, the next call is not
        // made. The host's words go in here, before the budgets and compaction see the request.
        for input in self.steering.deliver(&mut self.context) {
            self.emit(AgentEvent::Steered { input });
        }
        // Checked before the turn starts, unless compaction comes first (it can only make
        // the request smaller): then after it.
        let compacting = self.context.needs_compaction();
        if !compacting {
            if let Some(stop) = self.budget_gate() {
                return self.finish(stop);
            }
        }
        let turn = self.counters.begin_turn();
        self.emit(AgentEvent::TurnStart { turn });
        if compacting {
            return self.compact(false);
        }
        self.call_model()
    }

    /// The budgets' check before a call: the termination if the call could cross one; else,
    /// when only this call fits and the agent asks for it, this call is the final one.
    fn budget_gate(&mut self) -> Option<Termination> {
        match self.budget_verdict() {
            Verdict::Go => None,
            Verdict::Stop(stop) => Some(stop),
            Verdict::Last(limit) => {
                let forced =
                    self.config.policy.final_answer_at_budget || self.answer.asked.is_some();
                if forced && self.counters.make_final() {
                    self.final_cause = Some(limit);
                }
                None
            }
        }
    }

    /// Calls the model once the budgets allow it (after a compaction).
    fn call_model_within_budget(&mut self) -> State {
        match self.budget_gate() {
            Some(stop) => self.finish(stop),
            None => self.call_model(),
        }
    }

    /// Compacts before a call (or, `reactive`, after the provider refused the prompt as too
    /// long); asks for a summary when one would help, then calls the model.
    fn compact(&mut self, reactive: bool) -> State {
        match self
            .context
            .begin_compaction(reactive, self.config.summarizer)
        {
            Ok(Some(CompactionStep::Done(report))) => self.compacted(&report),
            Ok(Some(CompactionStep::Summarize(span))) => {
                self.out.push_back(Action::Summarize(span));
                State::Summarizing
            }
            Ok(_) => self.call_model_within_budget(),
            Err(e) => self.finish(Termination::Error(e)),
        }
    }

    fn on_summary(&mut self, summary: Result<String, Error>) -> State {
        let summary = match summary {
            Ok(summary) => Some(summary),
            // A failed summary is not fatal: compaction goes on without one.
            Err(e) => {
                tracing::warn!(error = %e, "summarizing failed; compacting without a summary");
                None
            }
        };
        match self.context.finish_compaction(summary) {
            Ok(report) => self.compacted(&report),
            Err(e) => self.finish(Termination::Error(e)),
        }
    }

    fn compacted(&mut self, report: &CompactionReport) -> State {
        self.emit(AgentEvent::Compacted {
            tokens_before: report.tokens_before,
            tokens_after: report.tokens_after,
        });
        self.call_model_within_budget()
    }

    /// The model the requests ask for: the run's settings', else the client's own.
    fn asked_model(&self) -> &str {
        self.settings
            .model
            .as_deref()
            .or(self.config.settings.model.as_deref())
            .unwrap_or(&self.config.client_model)
    }

    /// What a call cost: at the price of the model its response named (a dated snapshot of
    /// the model asked for, say), else at the asked model's. A name with no known price (a
    /// proxy's alias, a test double's) never makes a call free: a budget never stops
    /// counting.
    fn cost_of(&self, named: &str, usage: &Usage) -> Cost {
        let pricing = &self.config.policy.pricing;
        let model = if pricing.price(named).is_some() {
            named
        } else {
            self.asked_model()
        };
        pricing.cost(model, usage)
    }

    /// What the budgets say of the next model call: its counted request and `max_tokens`,
    /// at the prices of the model it asks for.
    fn budget_verdict(&self) -> Verdict {
        if self.config.policy.token_budget.is_none() && self.config.policy.cost_budget.is_none() {
            return Verdict::Go;
        }
        let model = self.asked_model();
        let input = u64::try_from(self.context.token_count()).unwrap_or(u64::MAX);
        let next = Estimate::new(
            &self.config,
            model,
            input,
            u64::from(self.settings.max_tokens.unwrap_or(self.config.max_tokens())),
        );
        budget::check(&self.config, &self.spending.spent, &next)
    }

    /// What the run's budgets have left (for its sub-agents' runs).
    pub(crate) fn budget_left(&self) -> Budget {
        Budget::left(&self.config, &self.spending.spent)
    }

    /// How the run ends after its final call: the budget that asked for it, else the turn
    /// limit.
    fn final_termination(&self) -> Termination {
        self.final_cause.clone().unwrap_or(Termination::MaxTurns)
    }

    fn build_request(&self) -> ModelRequest {
        let config = &self.config;
        let mut tools = self.tools.specs().to_vec();
        let mut deferred = Vec::new();
        if let Some(search) = &self.settings.tool_search {
            // Over its threshold: the search tool and the tools used or found (tool::search).
            let keep = match &self.settings.tool_choice {
                Some(ToolChoice::Tool(name)) => Some(name.as_str()),
                _ => None,
            };
            let (carried, others) = search.split(tools, self.context.messages(), keep);
            tools = carried;
            if search.hosted {
                deferred = others;
            }
        }
        tools.extend(config.handoffs.iter().map(|h| h.tool.clone()));
        if let Some(output) = &self.answer.asked {
            tools.push(output.spec.clone());
        }
        // A history with tool calls needs tools defined (Anthropic, Bedrock): an agent
        // without tools, handed a conversation with a handoff call, keeps that tool defined.
        let retired = tools.is_empty() && !self.routing.retired.is_empty();
        if retired {
            tools = self.routing.retired.clone();
        }
        let (messages, encoded) = self.context.request_messages();
        let mut request = ModelRequest {
            // Shared with the context, not copied, and linked to the bytes the client's
            // format already wrote for them: a turn costs what it adds.
            messages,
            encoded,
            system: self.context.system().map(str::to_owned),
            tools,
            max_tokens: DEFAULT_MAX_TOKENS,
            prompt_cache: Some(PromptCache::default()),
            // The machine decides and counts every retry of the run (`attempt_failed`).
            retry: Some(RetryPolicy::none()),
            deferred_tools: deferred,
            ..ModelRequest::default()
        };
        // The run's settings are the agent's with the run's options over them.
        self.settings.apply(&mut request);
        // Anthropic refuses a forced tool choice with extended thinking on; there the
        // model is only told (in the history) to call the answer tool.
        let can_force = request.thinking_budget.is_none();
        match &self.answer.asked {
            Some(output) if (self.counters.final_call || self.answer.force) && can_force => {
                request.tool_choice = ToolChoice::Tool(output.spec.name.clone());
            }
            // Tools stay defined (the history refers to them) but may not be called.
            _ if self.counters.final_call || retired => request.tool_choice = ToolChoice::None,
            _ => {}
        }
        request
    }

    fn call_model(&mut self) -> State {
        if cfg!(debug_assertions) {
            self.context.debug_assert_valid();
        }
        self.text.partial.clear();
        self.out.push_back(Action::CallModel(self.build_request()));
        State::ModelCall(Box::new(Attempt::new(StreamAssembler::with_limits(
            self.config.stream_limits,
        ))))
    }

    // ----- the model's response ------------------------------------------------------

    fn on_model(&mut self, mut attempt: Box<Attempt>, input: Input, now: Instant) -> State {
        match input {
            Input::ModelEvent(event) => {
                attempt.content_seen |= event.is_content();
                let event = match event {
                    LlmEvent::ToolCallStart { index, id, name } => LlmEvent::ToolCallStart {
                        index,
                        id: self.ids.unique(&mut attempt.call_ids, id),
                        name,
                    },
                    event => event,
                };
                if let Err(error) = attempt.assembler.push(&event) {
                    self.out.push_back(Action::StopModel);
                    return self.attempt_failed(attempt, error, now);
                }
                match event {
                    LlmEvent::TextDelta { text, .. } if !text.is_empty() => {
                        self.text.partial.push_str(&text);
                        self.emit(AgentEvent::TextDelta { text });
                    }
                    LlmEvent::ThinkingDelta { thinking, .. } if !thinking.is_empty() => {
                        self.emit(AgentEvent::ThinkingDelta { text: thinking });
                    }
                    LlmEvent::ToolCallStart { index, id, name } => {
                        attempt.early.blocked |= !self.tools.is_read_only(&name);
                        if attempt.ids.len() < MAX_BLOCK_IDS {
                            attempt.ids.insert(index, id.clone());
                        }
                        self.emit(AgentEvent::ToolCallStart { id, name });
                    }
                    LlmEvent::ToolCallDelta {
                        index,
                        partial_json,
                    } => {
                        if let Some(id) = attempt.ids.get(&index) {
                            self.emit(AgentEvent::ToolInputDelta {
                                id: id.clone(),
                                partial_json,
                            });
                        }
                    }
                    LlmEvent::BlockStop { index } => self.maybe_start_early(&mut attempt, index),
                    LlmEvent::Usage(usage) => attempt.usage = usage,
                    LlmEvent::MessageStart { model, .. } => attempt.model = model,
                    LlmEvent::MessageStop { .. } => {
                        self.out.push_back(Action::StopModel);
                        return self.attempt_ended(attempt, now);
                    }
                    LlmEvent::RateLimits(limits) => {
                        self.emit(AgentEvent::RateLimits(*limits));
                        self.spending.rate_limits = Some(limits);
                    }
                    _ => {}
                }
                State::ModelCall(attempt)
            }
            Input::ModelEnded(Ok(())) => self.attempt_ended(attempt, now),
            Input::ModelEnded(Err(error)) => self.attempt_failed(attempt, error, now),
            Input::HookStopped(reason) => self.finish(Termination::StoppedByHook { reason }),
            Input::Approved(verdicts) => {
                let calls = std::mem::take(&mut attempt.approving);
                for (call, verdict) in calls.into_iter().zip(verdicts) {
                    // A call the hook does not allow now is decided again, and answered,
                    // with the rest of the batch.
                    if verdict == ToolDecision::Allow && !self.needs_approval(&call.name) {
                        self.emit_call(&call);
                        attempt.early.start(&call);
                        self.run_tools(vec![call], now);
                    }
                }
                State::ModelCall(attempt)
            }
            Input::ToolDone(mut result) => {
                cannot_pause(&mut result);
                if let Err(result) = attempt.early.finish(result) {
                    self.ignore(
                        &Input::ToolDone(result),
                        "a result of no call started in this response, or a second one",
                    );
                }
                State::ModelCall(attempt)
            }
            input => {
                self.ignore(&input, "the machine waits for the model's response");
                State::ModelCall(attempt)
            }
        }
    }

    /// A read-only call whose arguments are complete starts while the model still streams
    /// (after the hook allows it), unless a side-effecting call came before it.
    fn maybe_start_early(&mut self, attempt: &mut Attempt, index: usize) {
        if !self.config.policy.early_read_only_tools
            || self.counters.final_call
            || attempt.early.blocked
        {
            return;
        }
        let Some((id, name, input)) = attempt.assembler.completed_tool_call(index) else {
            return;
        };
        if !self.tools.is_read_only(name) {
            return;
        }
        let call = ToolCall::new(id, name, input.clone());
        attempt.approving.push(call.clone());
        self.out.push_back(Action::Approve(vec![call]));
    }

    /// The response stream ended (cleanly, or after `MessageStop`).
    fn attempt_ended(&mut self, attempt: Box<Attempt>, now: Instant) -> State {
        let Attempt {
            assembler,
            content_seen,
            usage,
            model,
            early,
            call_ids,
            ..
        } = *attempt;
        match assembler.finish() {
            Ok(response) => {
                let cost = self.cost_of(&response.model, &usage);
                self.spending.response(usage, cost);
                self.ids.take(call_ids);
                self.on_response(response, early, now)
            }
            Err(error) => self.attempt_failed(
                Box::new(Attempt {
                    content_seen,
                    usage,
                    model,
                    early,
                    call_ids,
                    ..Attempt::new(StreamAssembler::new())
                }),
                error,
                now,
            ),
        }
    }

    /// The attempt failed: compact and re-send on an overflow (once per turn), re-send after
    /// a backoff when it broke after content and retries remain, else end the run.
    fn attempt_failed(&mut self, attempt: Box<Attempt>, error: LlmError, now: Instant) -> State {
        let cost = self.cost_of(&attempt.model, &attempt.usage);
        self.spending.failed(attempt.usage, cost);
        self.abandon_early(
            attempt.early,
            "not run: the model's response broke off; it is requested again",
            now,
        );
        self.text.partial.clear();
        if self.takes_fallback(&error, false) {
            return self.fall_back(&error);
        }
        if matches!(error, LlmError::ContextOverflow(_)) && !self.counters.compacted_for_overflow {
            self.counters.compacted_for_overflow = true;
            return self.compact(true);
        }
        // The machine owns every retry of a run, before content or after (its requests ask
        // the client for none): one policy, one count, one `Retry` event each.
        let retry = self.counters.retry();
        // A response the model got wrong goes again with a note saying what was wrong, and
        // only while the note changes the request: once it ends the history already, the
        // request would be the one that just failed (at temperature 0, the same output).
        let note = error.note_for_model();
        let noted = note.as_ref().is_some_and(|note| {
            self.context.messages().last().is_some_and(|m| {
                m.role == Role::User && m.content.last() == Some(&ContentBlock::text(note))
            })
        });
        let delay = match &self.config.policy.retry {
            _ if noted => None,
            Some(policy) => policy.delay_for(retry, &error),
            None => RetryPolicy::default().delay_for(retry, &error),
        };
        let Some(delay) = delay else {
            if self.takes_fallback(&error, true) {
                return self.fall_back(&error);
            }
            return self.finish(Termination::Error(Error::Llm(error)));
        };
        let logged = loggable(&error, self.config.trace_content);
        tracing::warn!(error = %logged, attempt = retry, ?delay, "model stream broke; re-sending the turn");
        // The note ends the last user message, so the history stays valid.
        if let Some(note) = note {
            self.context.push(Message::user(note));
        }
        self.emit(AgentEvent::Retry {
            attempt: retry,
            delay,
            error: error.to_string(),
            usage: attempt.usage,
            cost,
        });
        // The budgets hold for the call sent again too.
        if let Some(stop) = self.budget_gate() {
            return self.finish(stop);
        }
        State::Backoff(now + delay)
    }

    /// Whether the next fallback is for `error` (at once, or once `retries_spent`).
    fn takes_fallback(&self, error: &LlmError, retries_spent: bool) -> bool {
        self.routing
            .takes_fallback(&self.config.fallbacks, error, retries_spent)
    }

    /// Moves the run to the next fallback model and sends the turn again, at once.
    fn fall_back(&mut self, error: &LlmError) -> State {
        let Some((index, target)) = self
            .routing
            .next_fallback(&self.config.fallbacks)
            .map(|(index, target)| (index, target.clone()))
        else {
            return self.finish(Termination::Error(Error::Llm(error.clone())));
        };
        let from = self.asked_model().to_owned();
        let to = target.name().to_owned();
        let logged = loggable(error, self.config.trace_content);
        tracing::warn!(error = %logged, %from, %to, "the model failed; moving to the fallback");
        self.emit(AgentEvent::Fallback {
            from: from.clone(),
            to: to.clone(),
            error: error.to_string(),
        });
        self.out.push_back(Action::Fallback { index, from, to });
        self.settings.model.clone_from(&target.model);
        self.config.settings.model = target.model;
        self.config.client_model = target.client_model;
        self.counters.reset_attempts();
        if let Some(stop) = self.budget_gate() {
            return self.finish(stop);
        }
        self.call_model()
    }

    /// Answers each call started early of an abandoned attempt: its result if it finished,
    /// else `why`; the ones still running are abandoned. Returns the results given, by id.
    fn abandon_early(
        &mut self,
        early: Early,
        why: &str,
        now: Instant,
    ) -> HashMap<String, ToolCallResult> {
        if early.running() > 0 {
            self.out.push_back(Action::AbortTools);
        }
        let mut done: HashMap<String, ToolCallResult> = HashMap::new();
        for result in early.done {
            done.entry(result.id.clone()).or_insert(result);
        }
        let mut given = HashMap::with_capacity(early.started.len());
        for (id, name) in early.started {
            let result = match done.remove(&id) {
                Some(result) => result,
                None => {
                    let ran_for = self.in_flight.ran_for(&id, now);
                    ToolCallResult::new(id, name, why, true, ran_for)
                }
            };
            self.emit_result(&result);
            given.insert(result.id.clone(), result);
        }
        given
    }

    fn on_response(&mut self, response: ModelResponse, early: Early, now: Instant) -> State {
        let sent = self.context.len();
        // Edits the server made to the prompt (Anthropic context editing) go into the
        // history first: the usage counts the edited prompt.
        if let (false, Some(editing)) = (
            response.context_edits.is_empty(),
            &self.settings.context_editing,
        ) {
            self.context
                .apply_context_edits(&response.context_edits, editing);
        }
        // A response that compacted on the server reports a prompt the server rewrote (and,
        // on Anthropic, the compaction pass): it anchors nothing.
        let compacted = response
            .message
            .content
            .iter()
            .any(crate::context::is_server_compaction);
        if !compacted {
            self.context.record_usage(&response.usage, sent);
        }
        if !response.message.content.is_empty() {
            self.context.push(response.message.clone());
        }
        // The item stands for the turns before it, which the server no longer reads: they go
        // (the first message keeps the task).
        if compacted {
            self.context.apply_server_compaction();
        }
        let has_calls = response.message.tool_uses().next().is_some();
        self.text.response(response.text(), has_calls);

        if self.counters.final_call && !self.answer.called_in(&response) {
            self.answer_unrun(&response, early, "not run: the turn limit was reached", now);
            self.end_turn(&response);
            let termination = self.final_termination();
            return self.finish(termination);
        }
        let continuations_left = self.counters.continuations < self.config.policy.max_continuations;
        match turn::after_response(&response, continuations_left) {
            // A completed response has no calls; without an answer tool this finishes.
            Next::Stop(Termination::Completed) => {
                self.end_turn(&response);
                // The host said more while the model answered: the run goes on to hear it
                // (within the turn limit; past it, the words are handed back).
                let turns_left = self.counters.turns < self.config.policy.max_turns;
                if !self.steering.is_empty() && !self.counters.stop_after_turn && turns_left {
                    return State::NextTurn;
                }
                self.missing_output(&response)
            }
            Next::Stop(termination) => {
                self.answer_unrun(
                    &response,
                    early,
                    "not run: the response was cut off or refused",
                    now,
                );
                self.end_turn(&response);
                self.finish(termination)
            }
            Next::Resend => {
                self.answer_unrun(
                    &response,
                    early,
                    "not run: the response was paused; it is continued",
                    now,
                );
                self.end_turn(&response);
                State::NextTurn
            }
            Next::Continue => {
                self.counters.continuations += 1;
                if has_calls {
                    self.answer_unrun(
                        &response,
                        early,
                        "not run: your response was cut off by the max_tokens limit before this \
                         call was complete; make smaller calls",
                        now,
                    );
                } else {
                    self.text.continuing = true;
                    self.context.push(Message::user(
                        "Continue exactly where you stopped, without repeating anything.",
                    ));
                }
                self.end_turn(&response);
                State::NextTurn
            }
            Next::RunTools => self.start_batch(response, early, now),
        }
    }

    /// Answers every tool call of a response that will not run, so the history stays valid:
    /// a call started early keeps the result it has (or, still running, is abandoned and
    /// answered with `why`, like the rest).
    fn answer_unrun(&mut self, response: &ModelResponse, early: Early, why: &str, now: Instant) {
        let mut early = self.abandon_early(early, why, now);
        let results: Vec<ContentBlock> = response
            .message
            .tool_uses()
            .map(|(id, _, _)| match early.remove(id) {
                Some(result) => result.to_block(),
                None => ContentBlock::tool_result(id, why, true),
            })
            .collect();
        if !results.is_empty() {
            self.context.push_tool_results(results);
        }
    }

    fn end_turn(&mut self, response: &ModelResponse) {
        self.end_turn_as(response, response.stop_reason.clone());
    }

    /// Ends the turn of `response` with `stop_reason` (the response's, or
    /// [`INTERRUPTED_STOP`] for a turn cut short after its response came).
    fn end_turn_as(&mut self, response: &ModelResponse, stop_reason: StopReason) {
        self.in_flight.end_turn();
        if let Some(turn) = self.counters.end_turn() {
            let cost = self.spending.take_turn_cost();
            self.end_turn_event(AgentEvent::TurnEnd {
                turn,
                stop_reason,
                usage: response.usage,
                cost,
            });
        }
    }

    /// Reports a turn's end, and asks the driver to save the conversation there.
    fn end_turn_event(&mut self, event: AgentEvent) {
        self.emit(event);
        self.out.push_back(Action::Checkpoint);
    }

    /// Tells the driver to run `calls`, noting when they started.
    fn run_tools(&mut self, calls: Vec<ToolCall>, now: Instant) {
        self.in_flight.start(&calls, now);
        self.out.push_back(Action::RunTools(calls));
    }

    // ----- tools ---------------------------------------------------------------------

    /// A response's calls: repeated ones stop the run, invalid ones are answered at once, the
    /// rest go to the hook (all but those started early).
    fn start_batch(&mut self, response: ModelResponse, early: Early, now: Instant) -> State {
        let calls: Vec<ToolCall> = response
            .message
            .tool_uses()
            .map(|(id, name, input)| ToolCall::new(id, name, input.clone()))
            .collect();
        let n = calls.len();
        let mut batch = Box::new(Batch::new(response, calls));

        // Calls of the answer tool are not repeats to stop: a wrong answer has its own count
        // of retries and ends with `InvalidOutput`, carrying the answer and what is wrong.
        let answer_tool = self.answer.tool_name();
        let times = self.counters.repeats.observe(
            batch
                .calls
                .iter()
                .filter(|call| Some(call.name.as_str()) != answer_tool),
        );
        if times >= self.config.policy.max_repeated_calls {
            let name = batch
                .calls
                .first()
                .map(|c| c.name.clone())
                .unwrap_or_default();
            let message = format!(
                "not run: you made exactly this call {times} times in a row with the same input; \
                 the result will not change"
            );
            // A call started early was announced already: it keeps the result it has, or,
            // still running, is abandoned and answered like the rest.
            let mut early = self.abandon_early(early, &message, now);
            for i in 0..n {
                match early.remove(&batch.calls[i].id) {
                    Some(result) => {
                        batch.announced[i] = true;
                        batch.set_result(i, result);
                    }
                    None => self.answer(&mut batch, i, &message, now),
                }
            }
            batch.stop = Some(Termination::RepeatedToolCall { name, times });
            return self.complete_batch(batch);
        }

        // Calls started early: announced already; their results so far count.
        for (id, _) in &early.started {
            if let Some(i) = batch.position(id) {
                batch.announced[i] = true;
            }
        }
        for result in early.done {
            if let Some(i) = batch.position(&result.id) {
                if batch.results[i].is_none() {
                    self.emit_result(&result);
                    batch.set_result(i, result);
                }
            }
        }
        batch.early_pending = early
            .started
            .iter()
            .filter_map(|(id, _)| batch.position(id))
            .filter(|&i| batch.results[i].is_none())
            .collect();
        // What is wrong with each invalid call (the first report for its id), by id: the
        // reason, and the start of the arguments received.
        let mut invalid: HashMap<String, (String, String)> = HashMap::new();
        for call in &batch.response.invalid_tool_calls {
            invalid.entry(call.id.clone()).or_insert_with(|| {
                let raw: String = call.raw_arguments.chars().take(200).collect();
                (call.reason.to_string(), raw)
            });
        }
        self.answer_output_calls(&mut batch, &invalid, now);
        if self.counters.final_call && batch.stop.is_none() {
            batch.stop = Some(self.final_termination());
        }
        if batch.stop.is_some() {
            // The run ends with this batch: the other calls are not run.
            for i in 0..n {
                if !batch.announced[i] && batch.results[i].is_none() {
                    self.answer(
                        &mut batch,
                        i,
                        "not run: the run ended with this response",
                        now,
                    );
                }
            }
        }
        self.answer_handoffs(&mut batch, now);
        self.answer_tool_search(&mut batch, now);

        for i in 0..n {
            if batch.announced[i] || batch.results[i].is_some() {
                continue;
            }
            if let Some((reason, raw)) = invalid.get(&batch.calls[i].id) {
                let message = format!(
                    "invalid arguments for tool \"{}\": {reason}; received: {raw}",
                    batch.calls[i].name
                );
                self.answer(&mut batch, i, &message, now);
                continue;
            }
            batch.approving.push(i);
        }
        if batch.approving.is_empty() {
            return self.launch(batch, now);
        }
        let calls = batch
            .approving
            .iter()
            .map(|&i| batch.calls[i].clone())
            .collect();
        self.out.push_back(Action::Approve(calls));
        State::Approving(batch)
    }

    fn on_approved(
        &mut self,
        mut batch: Box<Batch>,
        verdicts: Vec<ToolDecision>,
        now: Instant,
    ) -> State {
        let positions = std::mem::take(&mut batch.approving);
        let mut verdicts = verdicts.into_iter();
        let verdicts: Vec<(usize, ToolDecision)> = positions
            .into_iter()
            .map(|i| {
                // A verdict the driver did not give is a denial: nothing runs unapproved.
                let verdict = verdicts
                    .next()
                    .unwrap_or_else(|| ToolDecision::Deny("no verdict from the hooks".into()));
                // A tool that needs a person's approval: the hook's allowing is not enough.
                match verdict {
                    ToolDecision::Allow if self.needs_approval(&batch.calls[i].name) => {
                        (i, ToolDecision::Pause)
                    }
                    verdict => (i, verdict),
                }
            })
            .collect();
        let stops = verdicts
            .iter()
            .any(|(_, v)| matches!(v, ToolDecision::Stop(_)));
        if !stops && verdicts.iter().any(|(_, v)| *v == ToolDecision::Pause) {
            // Nothing of the batch runs before the person decides: the verdicts given wait
            // with the undecided ones, so the resumed run applies them all at once, as an
            // uninterrupted run would.
            batch.paused_verdicts = Some(
                verdicts
                    .into_iter()
                    .map(|(i, v)| (i, (v != ToolDecision::Pause).then_some(v)))
                    .collect(),
            );
            return self.launch(batch, now);
        }
        self.apply_verdicts(batch, verdicts, now)
    }

    /// Whether calls of the tool `name` wait for a person's approval.
    fn needs_approval(&self, name: &str) -> bool {
        self.config
            .policy
            .require_approval
            .iter()
            .any(|n| n == name)
    }

    /// Answers the denied calls, announces the allowed ones and starts them.
    fn apply_verdicts(
        &mut self,
        mut batch: Box<Batch>,
        verdicts: Vec<(usize, ToolDecision)>,
        now: Instant,
    ) -> State {
        let mut allowed = Vec::new();
        for (i, verdict) in verdicts {
            match verdict {
                // A pause beside a stop: stopped with the rest.
                ToolDecision::Allow | ToolDecision::Pause => allowed.push(i),
                ToolDecision::Deny(reason) => {
                    self.answer(&mut batch, i, &format!("denied: {reason}"), now)
                }
                ToolDecision::Stop(reason) => {
                    self.answer(&mut batch, i, &format!("not run: {reason}"), now);
                    batch
                        .stop
                        .get_or_insert(Termination::StoppedByHook { reason });
                }
            }
        }
        // A stopping hook stops the whole batch: nothing else of it runs.
        if batch.stop.is_some() {
            for i in allowed.drain(..) {
                self.answer(&mut batch, i, "not run: the run was stopped", now);
            }
        }
        for &i in &allowed {
            if !batch.announced[i] {
                batch.announced[i] = true;
                let call = batch.calls[i].clone();
                self.emit_call(&call);
            }
        }
        batch.held_side_effects = allowed
            .iter()
            .any(|&i| !self.tools.is_read_only(&batch.calls[i].name));
        batch.held = allowed;
        self.launch(batch, now)
    }

    /// Starts the allowed calls: after the early read-only calls still running when any of
    /// them has side effects (they may touch the same resource).
    fn launch(&mut self, mut batch: Box<Batch>, now: Instant) -> State {
        if batch.paused_verdicts.is_none()
            && (!batch.held_side_effects || batch.early_pending.is_empty())
        {
            let mut calls = Vec::new();
            for i in std::mem::take(&mut batch.held) {
                // A deferred tool's result comes from outside: the run pauses for it.
                if self.tools.is_deferred(&batch.calls[i].name) {
                    batch.outside.push(i);
                } else {
                    calls.push(batch.calls[i].clone());
                }
            }
            if !calls.is_empty() {
                self.run_tools(calls, now);
            }
        }
        if batch.unanswered == 0 {
            return self.complete_batch(batch);
        }
        // Pause once nothing of the batch runs: its early calls are done, and every call
        // not waiting for outside is answered.
        let waits_outside = batch.paused_verdicts.is_some()
            || (!batch.outside.is_empty()
                && batch.held.is_empty()
                && batch.unanswered == batch.outside.len());
        if waits_outside && batch.early_pending.is_empty() {
            return self.pause(batch);
        }
        State::RunningTools(batch)
    }

    /// Ends the run paused: the batch waits for verdicts or results from outside. The turn
    /// stays open (no `TurnEnd`): the resumed run finishes it.
    fn pause(&mut self, batch: Box<Batch>) -> State {
        let Batch {
            response,
            calls,
            results,
            announced,
            paused_verdicts,
            outside,
            handoff,
            asked,
            ..
        } = *batch;
        let asked = asked
            .into_iter()
            .filter_map(|(i, question)| Some((calls.get(i)?.id.clone(), question)))
            .collect();
        let waiting = match paused_verdicts {
            Some(verdicts) => Waiting::Approval { verdicts },
            None => Waiting::Results { calls: outside },
        };
        // The id names the pause by its first waiting call: ids are unique in a conversation.
        let first = match &waiting {
            Waiting::Approval { verdicts } => {
                verdicts.iter().find(|(_, v)| v.is_none()).map(|&(i, _)| i)
            }
            Waiting::Results { calls: waiting } => waiting.first().copied(),
        }
        .and_then(|i| calls.get(i))
        .map_or("", |call| call.id.as_str());
        self.counters.pauses += 1;
        let output = self.answer.paused();
        let state = PauseState {
            format: PAUSE_FORMAT,
            id: match self.session_version {
                Some(v) => format!(
                    "v{v}-t{}-p{}-{first}",
                    self.counters.turns, self.counters.pauses
                ),
                None => format!("t{}-p{}-{first}", self.counters.turns, self.counters.pauses),
            },
            counters: self.counters.paused(),
            spending: self.spending.paused(),
            text: self.text.paused(),
            ids: self.ids.paused(),
            routing: self.routing.paused(),
            settings: self.settings.clone(),
            output,
            stop_reason: response.stop_reason.clone(),
            response_usage: response.usage,
            results,
            announced,
            waiting,
            tools: self.tools.specs().iter().map(|s| s.name.clone()).collect(),
            handoff,
            sub_agents: self.nested.finished().to_vec(),
            digests: std::collections::BTreeMap::new(),
            session_version: self.session_version,
            asked,
        };
        let mut paused = PausedRun {
            conversation: self.context.snapshot(),
            state,
        };
        // What each waiting call asked, recorded: an answer given for another call under
        // the same id is refused when the run resumes.
        paused.state.digests = PausedRun::digests_of(&paused.pending());
        // The turn goes on when the run resumes: it does not end here.
        self.counters.open_turn = None;
        self.finish(Termination::Paused(Box::new(paused)))
    }

    fn on_tool_done(
        &mut self,
        mut batch: Box<Batch>,
        mut result: ToolCallResult,
        now: Instant,
    ) -> State {
        let Some(i) = batch
            .position(&result.id)
            .filter(|&i| batch.results[i].is_none() && batch.announced[i])
        else {
            self.ignore(
                &Input::ToolDone(result),
                "a result of no call waiting for one (unknown, answered or abandoned)",
            );
            return State::RunningTools(batch);
        };
        if batch.early_pending.remove(&i) {
            cannot_pause(&mut result);
        } else if let Some(question) = result.take_question() {
            // The tool asked: the call waits for the host's answer, as a deferred one waits
            // for its result, and runs again with it.
            batch.outside.push(i);
            batch.asked.insert(i, question);
            return self.launch(batch, now);
        }
        self.emit_result(&result);
        batch.set_result(i, result);
        // Starts the held calls once no early call is left, and completes the batch when
        // every call is answered.
        self.launch(batch, now)
    }

    /// Every call is answered: the results go into the history, the turn ends, and the run
    /// stops or goes on.
    fn complete_batch(&mut self, batch: Box<Batch>) -> State {
        let Batch {
            response,
            calls,
            results,
            stop,
            handoff,
            ..
        } = *batch;
        let results: Vec<ToolCallResult> = results
            .into_iter()
            .zip(&calls)
            .map(|(r, call)| r.unwrap_or_else(|| error_result(call, "cancelled")))
            .collect();
        // Wrong final answers have their own count (see `answer_output_calls`).
        let answer_tool = self.answer.tool_name();
        let all_failed = self.counters.failures.observe(
            results
                .iter()
                .filter(|r| Some(r.name.as_str()) != answer_tool),
        );
        self.context
            .push_tool_results(results.iter().map(ToolCallResult::to_block).collect());
        // The turn ends as the agent that ran it; the handoff comes between turns.
        self.end_turn(&response);
        if let (Some(target), None) = (handoff, &stop) {
            if let Err(e) = self.hand_off(target) {
                return self.finish(Termination::Error(e));
            }
        }
        if let Some(stop) = stop {
            return self.finish(stop);
        }
        if all_failed >= self.config.policy.max_tool_failure_turns {
            return self.finish(Termination::ToolFailures { turns: all_failed });
        }
        State::NextTurn
    }

    /// Answers call `i` of the batch itself (not run): its `ToolCall`, if not announced yet,
    /// then an error result.
    fn answer(&mut self, batch: &mut Batch, i: usize, message: &str, now: Instant) {
        self.answer_with(batch, i, message, true, now);
    }

    fn answer_with(
        &mut self,
        batch: &mut Batch,
        i: usize,
        message: &str,
        is_error: bool,
        now: Instant,
    ) {
        let call = batch.calls[i].clone();
        if !batch.announced[i] {
            batch.announced[i] = true;
            self.emit_call(&call);
        }
        // A call that never ran took no time; one cut short (cancelled) ran until now.
        let result = ToolCallResult::new(
            call.id.clone(),
            call.name.clone(),
            message,
            is_error,
            self.in_flight.ran_for(&call.id, now),
        );
        self.emit_result(&result);
        batch.set_result(i, result);
    }

    // ----- structured output ---------------------------------------------------------

    /// The model answered in text where a call of the answer tool was asked for: it is told
    /// so and made to call it, or, out of retries, the run ends.
    fn missing_output(&mut self, response: &ModelResponse) -> State {
        let Some(output) = &self.answer.asked else {
            return self.finish(Termination::Completed);
        };
        let name = output.spec.name.clone();
        if self.answer.reject() {
            let raw = serde_json::Value::String(response.text());
            return self.finish(Termination::InvalidOutput {
                raw,
                error: format!("the model answered in text without calling {name}"),
            });
        }
        self.context.push(Message::user(format!(
            "Give your final answer by calling the {name} tool with it."
        )));
        State::NextTurn
    }

    /// Answers the calls of the answer tool: a valid answer ends the run with this batch; a
    /// wrong one is answered with what is wrong, and the next call is forced to the tool (or,
    /// out of retries, the run ends).
    fn answer_output_calls(
        &mut self,
        batch: &mut Batch,
        invalid: &HashMap<String, (String, String)>,
        now: Instant,
    ) {
        let Some(output) = self.answer.asked.clone() else {
            return;
        };
        for i in 0..batch.calls.len() {
            if batch.calls[i].name != output.spec.name || batch.results[i].is_some() {
                continue;
            }
            if batch.stop.is_some() {
                self.answer(batch, i, "not run: the final answer was already given", now);
                continue;
            }
            let verdict = match invalid.get(&batch.calls[i].id) {
                Some((reason, _)) => Err(format!("the answer is not valid JSON: {reason}")),
                None => output.check(&batch.calls[i].input),
            };
            match verdict {
                Ok(()) => {
                    self.answer.accept(batch.calls[i].input.clone());
                    self.answer_with(batch, i, "Final answer received.", false, now);
                    batch.stop = Some(Termination::Completed);
                }
                Err(why) => {
                    let spent = self.answer.reject();
                    self.answer(
                        batch,
                        i,
                        &format!(
                            "invalid final answer: {why}. Call {} again with a corrected answer.",
                            output.spec.name
                        ),
                        now,
                    );
                    if spent {
                        batch.stop = Some(Termination::InvalidOutput {
                            raw: batch.calls[i].input.clone(),
                            error: why,
                        });
                    }
                }
            }
        }
    }

    fn emit_call(&mut self, call: &ToolCall) {
        self.emit(AgentEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        });
    }

    fn emit_result(&mut self, result: &ToolCallResult) {
        // What is left open of the call's sub-agents' runs closes before its result.
        let (closing, spent) = self.nested.close_under(&result.id);
        self.spending.spent += spent;
        for nested in closing {
            self.emit(AgentEvent::SubAgent {
                path: nested.path,
                event: Box::new(nested.event),
            });
        }
        self.in_flight.answer(&result.id);
        self.emit(AgentEvent::ToolResult {
            id: result.id.clone(),
            name: result.name.clone(),
            content: turn::display_content(&result.content, self.config.policy.event_content_limit),
            is_error: result.is_error,
            duration: result.duration,
        });
    }

    /// A tool's progress, unless its call is already answered.
    fn progress(&mut self, progress: ToolProgress) {
        if matches!(self.state, State::Finished) || self.in_flight.is_answered(&progress.call_id) {
            self.ignored = Some("progress of a call already answered, or after the run");
            return;
        }
        self.emit(AgentEvent::ToolProgress {
            id: progress.call_id,
            message: progress.message,
        });
    }

    /// A sub-agent's event, if it comes through a call that runs: reported, and its usage
    /// rolled up when it finishes a sub-agent's run.
    fn nested_event(&mut self, nested: NestedEvent) {
        let NestedEvent { path, event } = NestedEvent::new(nested.path, nested.event);
        let Some(call_id) = path.first().map(|step| step.call_id.as_str()) else {
            self.ignored = Some("a nested event without a path");
            return;
        };
        let runs = match &self.state {
            State::RunningTools(batch) | State::Approving(batch) => batch
                .position(call_id)
                .is_some_and(|i| batch.announced[i] && batch.results[i].is_none()),
            State::ModelCall(attempt) => attempt.early.started_ids.contains(call_id),
            _ => false,
        };
        if !runs || self.in_flight.is_answered(call_id) {
            self.ignored = Some("a nested event of no running call");
            return;
        }
        if let Some(spent) = self.nested.observe(&path, &event) {
            self.spending.spent += spent;
        }
        self.emit(AgentEvent::SubAgent {
            path,
            event: Box::new(event),
        });
    }

    /// Answers the calls of the search tool (`tool::search`), when the tools are searched:
    /// the machine runs the search itself (no I/O).
    fn answer_tool_search(&mut self, batch: &mut Batch, now: Instant) {
        let Some(search) = self.settings.tool_search else {
            return;
        };
        if !search.applies(self.tools.specs().len()) {
            return;
        }
        for i in 0..batch.calls.len() {
            if batch.announced[i]
                || batch.results[i].is_some()
                || batch.calls[i].name != crate::tool::search::SEARCH_TOOL
            {
                continue;
            }
            let (text, is_error) = search.answer(self.tools.specs(), &batch.calls[i].input);
            self.answer_with(batch, i, &text, is_error, now);
        }
    }

    // ----- handoffs ------------------------------------------------------------------

    /// Answers the calls of handoff tools (not run by the driver): the first hands the
    /// conversation over once the batch is complete; any other is refused.
    fn answer_handoffs(&mut self, batch: &mut Batch, now: Instant) {
        for i in 0..batch.calls.len() {
            if batch.announced[i] || batch.results[i].is_some() {
                continue;
            }
            let Some(target) = self
                .config
                .handoffs
                .iter()
                .position(|h| h.tool.name == batch.calls[i].name)
            else {
                continue;
            };
            let to = self.config.handoffs[target].config.name.clone();
            match batch.handoff {
                None => {
                    batch.handoff = Some(target);
                    self.answer_with(batch, i, &handoff::handed_to(&to), false, now);
                }
                Some(first) => {
                    let first = self.config.handoffs[first].config.name.clone();
                    let message = format!(
                        "not done: the conversation is handed to {first} already (one handoff \
                         per response)"
                    );
                    self.answer(batch, i, &message, now);
                }
            }
        }
    }

    /// Hands the conversation to the `target`-th handoff: its settings, tools and system
    /// prompt from the next turn on, and the history its filter lets it see.
    fn hand_off(&mut self, index: usize) -> Result<(), Error> {
        let Some(target) = self.config.handoffs.get(index).cloned() else {
            return Ok(());
        };
        let to = target.config.name.clone();
        self.routing.keep_root_system(self.context.system());
        if matches!(target.filter, HandoffFilter::All) {
            self.context.set_system(target.system.clone());
        } else {
            let filtered = target.filter.apply(self.context.messages());
            let conversation = Conversation::new(target.system.clone(), filtered);
            ContextManager::check_restorable(&conversation).map_err(|e| {
                ConfigError::setting(
                    "handoff input filter",
                    format!("the history it gave {to} is not valid: {e}"),
                )
            })?;
            self.context.restore(conversation)?;
        }
        let from = std::mem::take(&mut self.config.name);
        self.emit(AgentEvent::Handoff {
            from,
            to: to.clone(),
        });
        self.routing
            .hand_off(&self.config.handoffs, index, target.keep);
        self.switch(target);
        self.out.push_back(Action::Handoff {
            to,
            route: self.routing.route.clone(),
        });
        Ok(())
    }

    /// Puts the agent at `route` in charge before the run starts: the handoffs an earlier
    /// run took and [kept](crate::agent::Handoff::keep), each the index of a handoff of the agent
    /// before it. Its system prompt, settings and tools apply from the first turn; the
    /// conversation gets the agent's own prompt back when the run ends. Returns `false`, and
    /// changes nothing, for a route this agent cannot follow or once the run started.
    pub fn start_in_charge(&mut self, route: &[usize]) -> bool {
        if !matches!(self.state, State::Idle) || !self.routing.route.is_empty() {
            return false;
        }
        let mut config = &self.config;
        let mut targets = Vec::with_capacity(route.len());
        for &index in route {
            let Some(target) = config.handoffs.get(index) else {
                return false;
            };
            targets.push(target.clone());
            config = &target.config;
        }
        let Some(last) = targets.last() else {
            return true;
        };
        self.routing.keep_root_system(self.context.system());
        self.context.set_system(last.system.clone());
        self.routing.keep = last.keep;
        for target in targets {
            self.routing.retire(&self.config.handoffs);
            self.switch(target);
        }
        self.routing.route = route.to_vec();
        true
    }

    /// The route to the agent in charge when the run ended, if its handoff was
    /// [kept](crate::agent::Handoff::keep) (empty otherwise): where the agent's next run starts.
    pub fn kept_route(&self) -> &[usize] {
        self.routing.kept()
    }

    /// The agent in charge becomes `target`: its settings and tools.
    fn switch(&mut self, target: self::config::HandoffTarget) {
        let mut specs = target.tools.specs().to_vec();
        specs.extend(target.config.handoffs.iter().map(|h| h.tool.clone()));
        self.context.set_tools(&specs);
        self.settings = target.config.settings.clone();
        self.tools = target.tools;
        let mut config = target.config;
        // The run's budgets hold whichever agent has the conversation.
        budget::keep_budgets(&self.config, &mut config);
        self.config = config;
        self.routing.fallback = 0;
    }

    // ----- the end -------------------------------------------------------------------

    /// Stops at once: calls in flight are answered as cancelled (in events and history),
    /// answer text cut short is kept, marked.
    fn cancel(&mut self, termination: Termination, now: Instant) {
        let state = std::mem::replace(&mut self.state, State::Finished);
        match state {
            State::Finished => {
                self.ignored = Some("a cancel after the run ended");
                return;
            }
            State::ModelCall(attempt) => {
                self.out.push_back(Action::StopModel);
                let cost = self.cost_of(&attempt.model, &attempt.usage);
                self.spending.failed(attempt.usage, cost);
                self.abandon_early(attempt.early, "cancelled", now);
            }
            State::Approving(mut batch) | State::RunningTools(mut batch) => {
                self.out.push_back(Action::AbortTools);
                batch.held.clear();
                for i in 0..batch.calls.len() {
                    if batch.results[i].is_none() {
                        self.answer(&mut batch, i, "cancelled", now);
                    }
                }
                let Batch {
                    response, results, ..
                } = *batch;
                let blocks = results
                    .iter()
                    .flatten()
                    .map(ToolCallResult::to_block)
                    .collect();
                self.context.push_tool_results(blocks);
                // The model asked for tools; the turn was cut short while they ran.
                self.end_turn_as(&response, StopReason::Other(INTERRUPTED_STOP.to_owned()));
            }
            State::Idle | State::Summarizing | State::Backoff(_) | State::NextTurn => {}
        }
        self.keep_interrupted_text();
        self.state = self.finish(termination);
    }

    /// Keeps answer text that was cut short, marked, as the assistant's message.
    fn keep_interrupted_text(&mut self) {
        let text = self.text.take_partial();
        if text.trim().is_empty() {
            return;
        }
        let last_is_user = self
            .context
            .messages()
            .last()
            .is_some_and(|m| m.role == Role::User);
        if last_is_user {
            self.context
                .push(Message::assistant(format!("{text}{INTERRUPTED_MARK}")));
        }
    }

    fn finish(&mut self, termination: Termination) -> State {
        if let Some(turn) = self.counters.open_turn.take() {
            // A turn cut short (cancelled, failed, stopped by a hook) still ends.
            self.end_turn_event(AgentEvent::TurnEnd {
                turn,
                stop_reason: StopReason::Other(INTERRUPTED_STOP.to_owned()),
                usage: Usage::default(),
                cost: Cost::default(),
            });
        }
        self.text.partial.clear();
        // A paused run's calls stay unanswered: the paused run (and a session) keeps them as
        // they are; `into_context` answers them for a run that leaves the pause behind.
        if !matches!(termination, Termination::Paused(_)) {
            self.context.repair();
        }
        // A handoff lasts for the run: the agent's next run starts with its own prompt.
        if let Some(system) = self.routing.root_system.take() {
            self.context.set_system(system);
        }
        let mut outcome = RunOutcome::new(termination);
        outcome.final_text = std::mem::take(&mut self.text.final_text);
        outcome.turns = self.counters.turns;
        self.spending.spent.write_to(&mut outcome);
        outcome.output = self.answer.value.take();
        outcome.sub_agents = self.nested.finished().to_vec();
        outcome.rate_limits = self.spending.rate_limits.take();
        outcome.undelivered = self.steering.take_undelivered();
        self.out.push_back(Action::Finish(outcome));
        State::Finished
    }
}

/// What a log line says of `error`: all of it with content capture on
/// ([`MachineConfig::trace_content`]); without it, nothing the model wrote (a model failure's
/// message quotes its output, a malformed call's arguments say), only the provider's reason.
fn loggable(error: &LlmError, content: bool) -> String {
    match error {
        LlmError::ModelFailure { reason, .. } if !content => {
            format!("the model's response failed ({reason})")
        }
        _ => error.to_string(),
    }
}

/// A question from a call started early (a read-only call, while the model streamed) cannot
/// pause the run: the result stays the error saying what the tool asked, and says why.
fn cannot_pause(result: &mut ToolCallResult) {
    if result.take_question().is_some() {
        result.content.push_str(
            " (it cannot wait for an answer: it started while the model was still writing, as \
             read-only tools do)",
        );
    }
}

fn error_result(call: &ToolCall, message: &str) -> ToolCallResult {
    ToolCallResult::new(
        call.id.clone(),
        call.name.clone(),
        message,
        true,
        Duration::ZERO,
    )
}
