//! The tokio driver of a run: it carries out what the [`AgentMachine`] asks (call the model,
//! ask the hooks, run tools, sleep, compact) and feeds back what happened. It decides
//! nothing; every decision is the machine's. What it waits for and hears (the host's
//! controls, the model's stream, tools, the timer) is `listen.rs`; the parts it switches
//! mid-run (refreshed tools, a handoff, a fallback) are `switch.rs`.

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::ContextManager;
use crate::error::{ContextError, Error, SessionError};
use crate::message::Message;
use crate::provider::transport::RateLimiter;
use crate::tool::{ExecOptions, ToolRegistry};

use super::io::Io;
use super::persist::{RunSession, Tail};
use super::start::{self, Start};
use super::telemetry::Telemetry;
use crate::agent::agent::{Agent, Parts};
use crate::agent::events::{AgentEvent, RunOutcome, Termination};
use crate::agent::handle::{lock, AgentHandle, Shared};
use crate::agent::hooks::HookAction;
use crate::agent::machine::config::MachineConfig;
use crate::agent::machine::{Action, AgentMachine, Input};
use crate::agent::team::SubAgentLink;

/// Carries out a machine's actions with tokio, the client, the tools and the hooks.
pub(crate) struct Driver {
    /// The run's spans (`invoke_agent`, and `chat` per model call).
    pub(super) telemetry: Telemetry,
    /// `Some` until the conversation goes back to the agent.
    pub(crate) machine: Option<AgentMachine>,
    /// The conversation until the machine is built (after the session is loaded).
    context: Option<ContextManager>,
    config: MachineConfig,
    session: Option<RunSession>,
    /// The parts of the agent in charge (the client, after a fallback, the fallback's):
    /// where new tools come from between turns, the hooks, the summarizer, its handoff
    /// targets' parts and its fallbacks' clients.
    pub(crate) parts: Parts,
    /// The tools calls run with: always the machine's.
    pub(crate) tools: ToolRegistry,
    pub(super) handle: AgentHandle,
    shared: Arc<Mutex<Shared>>,
    pub(crate) cancel: CancellationToken,
    tx: mpsc::Sender<AgentEvent>,
    /// How many messages the published view holds (0: publish everything next time).
    published: usize,
    /// Whether the machine was told of the cancel, or of the stop request.
    pub(crate) told_cancel: bool,
    pub(crate) told_stop: bool,
    /// The host's words that came after the machine finished: handed back in the outcome.
    pub(super) undelivered: Vec<crate::input::UserInput>,
    /// What the run's tool calls get, for the calls that run agents (its channel excepted).
    depth: u32,
    max_depth: u32,
    limiter: Option<RateLimiter>,
}

impl Drop for Driver {
    /// The stream was dropped mid-run: cancel, so the history is left valid, and give it back.
    /// With a session, the run's end is saved as a cancel's is, on a task of its own (a drop
    /// cannot wait): the turn cut short, answered, and the lease released, so the session
    /// is free at once (a web client that went away must not hold it until the lease runs
    /// out).
    fn drop(&mut self) {
        let running = self.machine.is_some();
        if let Some(machine) = self.machine.as_mut() {
            machine.handle(Input::Cancel, now());
        }
        self.give_back();
        let session = self.session.take().filter(|_| running);
        if let (Some(session), Ok(runtime)) = (session, tokio::runtime::Handle::try_current()) {
            let shared = self.shared.clone();
            runtime.spawn(session.release_dropped(shared));
        }
    }
}

/// The clock the machine is given: tokio's (so paused test time applies).
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Driver {
    /// A driver for `agent`'s run of `machine`, reporting on `tx`.
    pub(crate) fn new(
        agent: &Agent,
        context: ContextManager,
        tools: ToolRegistry,
        span: tracing::Span,
        tx: mpsc::Sender<AgentEvent>,
    ) -> Driver {
        Driver {
            telemetry: Telemetry::new(span, &agent.config),
            machine: None,
            context: Some(context),
            config: agent.machine_config(),
            session: agent.session.clone().map(RunSession::new),
            parts: agent.parts.clone(),
            tools,
            handle: agent.handle.clone(),
            shared: agent.shared.clone(),
            cancel: agent.handle.token(),
            tx,
            published: 0,
            told_cancel: false,
            told_stop: false,
            undelivered: Vec::new(),
            depth: agent.depth,
            max_depth: agent.max_depth,
            limiter: agent.limiter.clone(),
        }
    }

    async fn emit(&self, event: AgentEvent) {
        // The receiver lives in the stream that owns this driver: it is gone only when the
        // driver is being dropped too.
        let _ = self.tx.send(event).await;
        // Then waits until the host has taken it: what the host decides on seeing it (a
        // steer, a stop, a cancel) applies before anything else happens. The stream polls
        // this driver itself, so the wait costs no task switch.
        drop(self.tx.reserve().await);
    }

    /// Gives the conversation back to the agent (once), valid: the agent can run again.
    fn give_back(&mut self) {
        let context = match self.machine.take() {
            Some(machine) => Some(machine.into_context()),
            None => self.context.take(),
        };
        if let Some(context) = context {
            lock(&self.shared).context = Some(context);
            self.handle.reset();
        }
    }

    /// Publishes the conversation as of this turn boundary for snapshots.
    fn publish(&mut self) {
        if let Some(machine) = &self.machine {
            self.published = lock(&self.shared).publish(machine.context(), self.published);
        }
    }

    /// Feeds one input to the machine.
    pub(crate) fn tell(&mut self, input: Input) {
        if let Some(machine) = self.machine.as_mut() {
            machine.handle(input, now());
        }
    }

    pub(crate) async fn drive(mut self, start: Start) {
        // Sources that changed since the last run (or during it, after its last turn).
        if self.parts.sources.changed() {
            if let Some(tools) = self.parts.sources.refresh().await {
                self.tools = tools;
            }
        }
        match self.build_machine(start).await {
            Ok(machine) => {
                self.machine = Some(machine);
                // What the host asked between runs applies from the first turn.
                self.take_controls();
            }
            Err(error) => {
                return self
                    .finish(RunOutcome::new(Termination::Error(error)))
                    .await
            }
        }
        // Nothing is saved before the first turn ends: the run's input reaches the session
        // with the turn that answers it, so no other writer ever loads half a turn.
        let mut io = Io::new();
        loop {
            while let Some(action) = self.machine.as_mut().and_then(AgentMachine::poll) {
                if self.carry_out(action, &mut io).await.is_break() {
                    return;
                }
            }
            if self.machine.is_none() {
                return;
            }
            if let Some(input) = self.next_input(&mut io).await {
                self.tell(input);
            }
        }
    }

    async fn build_machine(&mut self, start: Start) -> Result<AgentMachine, Error> {
        match &start {
            // A run paused after a handoff goes on with the agent it was handed to.
            Start::Resume { paused, .. } => self.hand_off(paused.route()),
            // A kept handoff leaves its agent in charge of the next runs.
            Start::Run { .. } => {
                let route = lock(&self.shared).route.clone();
                self.hand_off(&route);
            }
        }
        let context = self.context.take().ok_or(Error::Busy)?;
        let catalog = self.tools.catalog();
        let config = self.config.clone();
        let link = self.session.as_ref().map(RunSession::link);
        start::machine(start, context, config, catalog, link, &self.shared, now())
            .await
            .map_err(|(error, context)| {
                self.context = Some(context);
                error
            })
    }

    /// Saves to the session, if the agent has one (see [`RunSession::save`]); a failure
    /// stops the run (nothing unsaved goes on).
    async fn save(&mut self, tail: Tail<'_>) -> Option<SessionError> {
        let (Some(session), Some(machine)) = (&mut self.session, self.machine.as_mut()) else {
            return None;
        };
        let error = session
            .save(&self.shared, machine.context_mut(), tail)
            .await?;
        if !machine.is_finished() {
            machine.handle(Input::Abort(error.clone().into()), now());
        }
        Some(error)
    }

    /// Carries out one action of the machine; `Break` when the run is over.
    async fn carry_out(&mut self, action: Action, io: &mut Io) -> ControlFlow<()> {
        match action {
            Action::Emit(event) => self.report(event).await,
            Action::CallModel(mut request) => {
                let turn = self.machine.as_ref().map_or(0, AgentMachine::turn);
                match self.parts.hooks.before_model_call(&mut request, turn).await {
                    HookAction::Stop(reason) => self.tell(Input::HookStopped(reason)),
                    HookAction::Continue => {
                        let span = self
                            .telemetry
                            .call_model(&request, &*self.parts.client, turn);
                        let tokens = self.machine.as_ref().map(|m| m.context().token_count());
                        let pace = self.limiter.clone().zip(tokens);
                        io.call_model(self.parts.client.clone(), request, span, pace);
                    }
                }
            }
            Action::StopModel => io.stop_model(),
            Action::Approve(calls) => {
                let mut verdicts = Vec::with_capacity(calls.len());
                for call in &calls {
                    verdicts.push(self.parts.hooks.before_tool(call).await);
                }
                self.tell(Input::Approved(verdicts));
            }
            Action::RunTools(calls) => {
                let link = SubAgentLink {
                    depth: self.depth,
                    max_depth: self.max_depth,
                    events: io.nested_tx.clone(),
                    budget: self.machine.as_ref().map(AgentMachine::budget_left),
                };
                let opts = ExecOptions::new()
                    .cancel(self.cancel.clone())
                    .progress(io.progress_tx.clone())
                    .extension(Arc::new(link))
                    .trace_content(self.telemetry.content());
                io.run_tools(self.tools.clone(), calls, opts, self.telemetry.run.clone());
            }
            Action::AbortTools => io.tools = FuturesUnordered::new(),
            Action::Handoff { route, .. } => self.hand_off(&route),
            Action::Fallback { index, from, to } => {
                self.telemetry.fallback(&from, &to);
                self.fall_back(index);
            }
            Action::Summarize(span) => self.summarize(span).await,
            Action::Checkpoint => {
                self.save(Tail::Renew).await;
            }
            Action::Finish(outcome) => {
                self.finish(outcome).await;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// Reports an event. Once the host has seen it, a cancel or stop it decided on applies
    /// before anything else happens.
    async fn report(&mut self, event: AgentEvent) {
        if matches!(event, AgentEvent::Compacted { .. }) {
            // The history was rewritten: the next publication copies it whole.
            self.published = 0;
        }
        let turn_end = matches!(event, AgentEvent::TurnEnd { .. });
        if turn_end {
            // Published before the host sees the turn's end: a snapshot taken on it has it.
            self.publish();
        }
        self.emit(event).await;
        self.take_controls();
        if turn_end {
            self.refresh_tools().await;
        }
    }

    /// Asks the summarizer for a summary of `span`, unless the run is cancelled meanwhile.
    async fn summarize(&mut self, span: Vec<Message>) {
        let summary = match &self.parts.summarizer {
            None => Err(ContextError::Summary("no summarizer is configured".to_owned()).into()),
            Some(summarizer) => {
                tokio::select! {
                    _ = self.cancel.cancelled() => {
                        self.told_cancel = true;
                        return self.tell(Input::Cancel);
                    }
                    summary = summarizer.summarize(&span) => summary,
                }
            }
        };
        self.tell(Input::Summary(summary));
    }

    /// The run is over: the conversation goes back to the agent before `Finished` is
    /// reported, so whoever sees it can run again at once.
    async fn finish(&mut self, mut outcome: RunOutcome) {
        if let Termination::Paused(paused) = &outcome.termination {
            lock(&self.shared).paused = Some((**paused).clone());
            if let Some(error) = self.save(Tail::Pause(paused)).await {
                // Not kept in the session: the host learns it; the pause stays with the
                // agent ([`Agent::paused`]).
                outcome.termination = Termination::Error(error.into());
            }
        } else if let Some(error) = self.save(Tail::Release).await {
            if !matches!(outcome.termination, Termination::Error(_)) {
                outcome.termination = Termination::Error(error.into());
            }
        }
        if let Some(machine) = &self.machine {
            lock(&self.shared).route = machine.kept_route().to_vec();
        }
        // Words that came too late for the run: handed back, after those it did not reach.
        outcome.undelivered.append(&mut self.undelivered);
        outcome.undelivered.extend(self.handle.take_steering());
        self.give_back();
        self.telemetry.finish(&outcome);
        tracing::info!(termination = %outcome.termination, turns = outcome.turns, "agent run finished");
        self.emit(AgentEvent::Finished(outcome)).await;
    }
}
