//! The durable driver of the agent machine: it carries out the machine's actions as steps of
//! a [`Journal`], which is Restate's (the `AgentSession` object's `run` handler) or a recorded
//! one ([`replay`](crate::replay)): the same code decides in both, so a replay checks exactly
//! what a run did.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_loop::agent::machine::{Action, AgentMachine, Input};
use agent_loop::agent::{AgentHooks, ToolDecision};
use agent_loop::context::{Conversation, Summarizer};
use agent_loop::provider::ModelRequest;
use agent_loop::tool::{ToolCall, ToolProgress};
use agent_loop::{AgentEvent, LlmClient, Message, UserInput};
use bytes::Bytes;
use restate_sdk::errors::TerminalError;
use serde::{Deserialize, Serialize};

use crate::agent::{ApprovalDecision, ApprovalRequest, DurableAgent};
use crate::inbox::Inbox;
use crate::record::{self, EarlyCalls, ModelStep, ToolStep};
use crate::report::{ProgressEvent, RunReport, SessionStatus};

/// The whole conversation in one value: the state format of earlier versions, read and
/// replaced by [`MESSAGE_COUNT`], [`SYSTEM`] and [`message_key`] at a session's next save.
pub(crate) const CONVERSATION: &str = "conversation";
/// How many messages the conversation has (`message/0` … `message/{n-1}`).
pub(crate) const MESSAGE_COUNT: &str = "messages";
/// The conversation's system prompt (JSON: a string or null).
pub(crate) const SYSTEM: &str = "system";
pub(crate) const STATUS: &str = "status";
pub(crate) const EVENT_COUNT: &str = "events";
/// The longest text of a [`ProgressEvent::Text`] (the conversation keeps all of it).
const MAX_TEXT_EVENT: usize = 4096;

pub(crate) fn message_key(n: usize) -> String {
    format!("message/{n}")
}

pub(crate) fn event_key(n: u64) -> String {
    format!("event/{n}")
}

pub(crate) fn approval_key(call_id: &str) -> String {
    format!("approval/{call_id}")
}

/// A state value as JSON.
fn json<T: Serialize + ?Sized>(value: &T) -> Bytes {
    // The values here (strings, numbers, the crate's own enums) always serialize.
    serde_json::to_vec(value).map_or_else(|_| Bytes::from_static(b"null"), Bytes::from)
}

/// One tool call, as the session sends it to `AgentTools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolRequest {
    pub session: String,
    pub id: String,
    pub name: String,
    pub input: serde_json::Value,
    /// The sub-agent whose tools run it ([`DurableAgent::sub_agent`] names, outermost
    /// first); empty for the served agent's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent: Vec<String>,
}

/// A sub-agent's run for one call, as the session sends it to the `subAgent` handler of the
/// child session `{session}/{call id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SubAgentRequest {
    /// The sub-agent, by its names from the served agent down.
    pub path: Vec<String>,
    /// The task, the sub-agent's prompt.
    pub task: String,
}

/// One call the driver makes: a tool, or a sub-agent's whole run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    Tool(ToolRequest),
    SubAgent {
        /// The call it answers.
        id: String,
        name: String,
        /// The child session's key: `{session}/{call id}`.
        session: String,
        request: SubAgentRequest,
    },
}

impl Request {
    /// What is sent (the invocation's parameter).
    pub fn parameter(&self) -> Bytes {
        match self {
            Request::Tool(request) => json(request),
            Request::SubAgent { request, .. } => json(request),
        }
    }
}

/// The call's result from a sub-agent's report: its answer, or why it has none (an error
/// result the model reads).
pub(crate) fn sub_agent_result(id: &str, name: &str, report: &RunReport) -> ToolStep {
    let (content, is_error) = if report.completed {
        (report.final_text.clone(), false)
    } else {
        (
            format!(
                "the sub-agent {name} ended without an answer: {}",
                report.termination
            ),
            true,
        )
    };
    ToolStep {
        result: agent_loop::tool::ToolCallResult::new(id, name, content, is_error, Duration::ZERO),
        input: None,
        progress: Vec::new(),
        usage: Some((report.input_tokens, report.output_tokens)),
    }
}

/// What a model step needs: the client, the request, the hooks (with the turn) and what
/// starts read-only calls early.
pub(crate) struct ModelCall {
    pub client: Arc<dyn LlmClient>,
    pub request: ModelRequest,
    pub hooks: Option<(Arc<dyn AgentHooks>, u32)>,
    pub early: Option<EarlyCalls>,
}

impl ModelCall {
    /// Makes the call (inside a journaled step).
    pub async fn call(self) -> ModelStep {
        record::call_model(self.client, self.request, self.hooks, self.early).await
    }
}

/// The steps a run is made of, and its state writes: Restate's journal in a live run, a
/// recorded one in a replay.
pub(crate) trait Journal {
    /// What an approval waits on.
    type Awakeable;

    /// Writes a state value (JSON bytes).
    fn set(&mut self, key: &str, value: Bytes);
    /// Clears a state value.
    fn clear(&mut self, key: &str);
    /// One model call, as a step.
    fn model(&mut self, call: ModelCall) -> impl Future<Output = Result<ModelStep, Stop>> + Send;
    /// The `before_tool` hook's verdict on one call, as a step.
    fn before_tool(
        &mut self,
        hooks: Arc<dyn AgentHooks>,
        call: ToolCall,
    ) -> impl Future<Output = Result<ToolDecision, Stop>> + Send;
    /// Compaction's summary, as a step (`Err`: why there is none).
    fn summary(
        &mut self,
        summarizer: Arc<dyn Summarizer>,
        span: Vec<Message>,
    ) -> impl Future<Output = Result<Result<String, String>, Stop>> + Send;
    /// The host's words and stop request since the last read, taken from the session's
    /// inbox (a journaled call).
    fn inbox(&mut self) -> impl Future<Output = Result<Inbox, Stop>> + Send;
    /// Puts words the run took back into the session's inbox (a journaled one-way call): the
    /// run ends without a report to hand them back in.
    fn put_back(&mut self, inputs: Vec<String>);
    /// A durable sleep.
    fn sleep(&mut self, delay: Duration) -> impl Future<Output = Result<(), Stop>> + Send;
    /// A new awakeable: its id and what to wait on.
    fn awakeable(&mut self) -> (String, Self::Awakeable);
    /// The human's decision the awakeable is resolved with.
    fn wait(
        &mut self,
        awakeable: Self::Awakeable,
    ) -> impl Future<Output = Result<ApprovalDecision, Stop>> + Send;
    /// Runs the calls concurrently, each `AgentTools` invocation a step, giving each result
    /// to `done` as it comes.
    fn run_tools(
        &mut self,
        requests: Vec<Request>,
        done: &mut (dyn FnMut(ToolStep) + Send),
    ) -> impl Future<Output = Result<(), Stop>> + Send;
}

/// A call's progress notes, then its result.
fn feed_tool(machine: &mut AgentMachine, epoch: Instant, step: ToolStep) {
    for note in step.progress {
        machine.handle(
            Input::ToolProgress(ToolProgress::new(step.result.id.clone(), note)),
            epoch,
        );
    }
    machine.handle(Input::ToolDone(step.result), epoch);
}

/// What the state holds of the conversation: the serialized size of each saved message, so
/// that a save writes only what changed and still knows the whole size.
pub(crate) struct Saved {
    /// Bytes of `message/{n}`, for each saved message.
    sizes: Vec<usize>,
    /// Whether the state is in the earlier one-value format (its next save rewrites it).
    legacy: bool,
}

impl Saved {
    pub fn of(conversation: Option<&Conversation>, legacy: bool) -> Saved {
        let size = |m: &Message| serde_json::to_vec(m).map_or(0, |b| b.len());
        Saved {
            sizes: conversation.map_or_else(Vec::new, |c| c.messages.iter().map(size).collect()),
            legacy,
        }
    }
}

/// Carries out the machine's actions as journaled steps of one `run` invocation.
pub(crate) struct DurableDriver<'a, J> {
    /// Its steps (read back by a replay, to see where it diverged).
    pub journal: J,
    agent: &'a DurableAgent,
    hooks: Option<Arc<dyn AgentHooks>>,
    summarizer: Option<Arc<dyn Summarizer>>,
    /// Whether read-only calls start inside the model step.
    early: bool,
    session: Arc<str>,
    /// The agent's path from the served agent (empty: the served agent).
    path: Vec<String>,
    /// Tokens the sub-agents' runs used (added to the run's report).
    sub_usage: (u64, u64),
    /// Progress events recorded so far (the index of the next).
    events: u64,
    saved: Saved,
    /// Inputs to feed the machine, one at a time, when it has no action: a response's events
    /// (so that what it asks for midway, early calls, is done in between, as in-process).
    pending: VecDeque<Input>,
    /// The calls the last model step ran early, by call id.
    started_early: HashMap<String, ToolStep>,
    /// Whether the run reads the session's inbox (steering, stop after turn): the served
    /// agent's runs do, a sub-agent's do not.
    steerable: bool,
    /// Whether a step that waited (a model call, tools, a human, a sleep) came since the
    /// last read of the inbox: only then can a new read find something.
    unread: bool,
    /// Words read from the inbox after the machine finished: handed back.
    undelivered: Vec<String>,
    epoch: Instant,
}

/// Why the run stopped listening to its own steps: Restate cancelled it (or failed a step for
/// good), or the conversation outgrew the state limit.
pub(crate) type Stop = TerminalError;

impl<'a, J: Journal> DurableDriver<'a, J> {
    /// The driver of a run of `agent` on the session's stored conversation (`legacy`: in the
    /// earlier one-value format) and its count of progress events, with its machine.
    pub fn new(
        journal: J,
        agent: &'a DurableAgent,
        path: Vec<String>,
        session: Arc<str>,
        conversation: Option<Conversation>,
        legacy: bool,
        events: u64,
    ) -> Result<(Self, AgentMachine), Stop> {
        let saved = Saved::of(conversation.as_ref(), legacy);
        let parts = agent.machine(conversation, !legacy)?;
        let steerable = path.is_empty();
        let driver = DurableDriver {
            journal,
            agent,
            early: parts.machine.config().policy.early_read_only_tools && parts.hooks.is_none(),
            hooks: parts.hooks,
            summarizer: parts.summarizer,
            session,
            path,
            sub_usage: (0, 0),
            events,
            saved,
            pending: VecDeque::new(),
            started_early: HashMap::new(),
            steerable,
            unread: true,
            undelivered: Vec::new(),
            // The machine's clock: fixed, so that a replay computes the same sleeps.
            epoch: Instant::now(),
        };
        Ok((driver, parts.machine))
    }

    pub async fn drive(
        &mut self,
        mut machine: AgentMachine,
        input: String,
    ) -> Result<RunReport, Stop> {
        self.journal.set(STATUS, json(&SessionStatus::Running));
        machine.start(input, self.epoch);
        // The first terminal error of a step (a Restate cancel): the machine is told to
        // cancel, finishes the run validly, and the error is returned after saving.
        let mut stopped: Option<Stop> = None;
        // What the host said while no run went on waits for this one, after its own input
        // (as in-process: the first turn delivers it).
        if let Err(e) = self.read_inbox(&mut machine).await {
            stopped = Some(e);
            machine.handle(Input::Cancel, self.epoch);
        }
        let mut stalled = false;
        loop {
            let Some(action) = machine.poll() else {
                if let Some(input) = self.pending.pop_front() {
                    machine.handle(input, self.epoch);
                    continue;
                }
                // Every action is answered before the next poll, so the machine waits only
                // for its timer (the backoff before re-sending a turn): a journaled sleep.
                if let Some(at) = machine.poll_timeout() {
                    let delay = at.saturating_duration_since(self.epoch);
                    self.unread = true;
                    match self.journal.sleep(delay).await {
                        Ok(()) => {
                            machine.handle_timeout(at);
                        }
                        Err(e) => {
                            stopped.get_or_insert(e);
                            machine.handle(Input::Cancel, self.epoch);
                        }
                    }
                    continue;
                }
                if stalled {
                    return Err(TerminalError::new("the agent machine stalled"));
                }
                stalled = true;
                machine.handle(Input::Cancel, self.epoch);
                continue;
            };
            let result = match action {
                Action::Emit(event) => self.record(&event, &mut machine),
                Action::CallModel(request) => self.call_model(&mut machine, request).await,
                Action::StopModel => {
                    self.pending.clear();
                    Ok(())
                }
                Action::Approve(calls) => self.approve(&mut machine, calls).await,
                Action::RunTools(calls) => self.run_tools(&mut machine, calls).await,
                Action::Summarize(span) => self.summarize(&mut machine, span).await,
                // Restate's journal keeps every step of the run already, and a replay
                // rebuilds the turn; the session's state is written once, at the run's end.
                // A turn's end is the safe point where the host's words go in: read them
                // (after the batch's results, before the next model call).
                Action::Checkpoint => self.read_inbox(&mut machine).await,
                Action::Finish(mut outcome) => {
                    // Words that came too late for the run are handed back, after those it
                    // did not reach (a run Restate stopped reads nothing more).
                    if stopped.is_none() {
                        if let Err(e) = self.read_inbox(&mut machine).await {
                            stopped = Some(e);
                        }
                    }
                    let mut undelivered: Vec<String> = outcome
                        .undelivered
                        .drain(..)
                        .map(|input| input.into_message().text())
                        .collect();
                    undelivered.append(&mut self.undelivered);
                    let termination = outcome.termination.to_string();
                    let report = RunReport {
                        completed: outcome.termination.is_completed(),
                        termination: termination.clone(),
                        final_text: outcome.final_text.clone(),
                        turns: outcome.turns,
                        input_tokens: outcome
                            .usage
                            .input_tokens
                            .saturating_add(self.sub_usage.0),
                        output_tokens: outcome
                            .usage
                            .output_tokens
                            .saturating_add(self.sub_usage.1),
                        undelivered: Vec::new(),
                    };
                    // A conversation too large to save keeps the last one that fit; the
                    // run ends with the error saying why.
                    let (termination, stopped) = match self.save(&mut machine) {
                        Ok(()) => (termination, stopped),
                        Err(too_large) => (
                            format!("error: {}", too_large.message()),
                            stopped.or(Some(too_large)),
                        ),
                    };
                    self.push(ProgressEvent::Finished {
                        termination: termination.clone(),
                        final_text: outcome.final_text,
                    });
                    self.journal
                        .set(STATUS, json(&SessionStatus::Finished { termination }));
                    return match stopped {
                        Some(stop) => {
                            // No report to hand them back in: back to the inbox, for the
                            // next run.
                            if self.steerable && !undelivered.is_empty() {
                                self.journal.put_back(undelivered);
                            }
                            Err(stop)
                        }
                        None => Ok(RunReport {
                            undelivered,
                            ..report
                        }),
                    };
                }
                Action::Handoff { to, .. } => Err(TerminalError::new(format!(
                    "the run was handed to {to}: durable runs do not support handoffs yet"
                ))),
                Action::Fallback { to, .. } => Err(TerminalError::new(format!(
                    "the run moved to the fallback model {to}: durable runs do not support fallback models yet"
                ))),
                // Tools run as journaled steps that finish inside `RunTools` (early ones
                // inside the model step): none is left running to abandon.
                Action::AbortTools => Ok(()),
            };
            if let Err(stop) = result {
                if stopped.is_none() {
                    self.pending.clear();
                    machine.handle(Input::Cancel, self.epoch);
                    stopped = Some(stop);
                }
            }
        }
    }

    /// Reads the session's inbox, when a step that waited came since the last read, and
    /// feeds the machine the host's stop request and words (which, once it is finished, are
    /// kept to hand back).
    async fn read_inbox(&mut self, machine: &mut AgentMachine) -> Result<(), Stop> {
        if !self.steerable || !self.unread {
            return Ok(());
        }
        self.unread = false;
        let inbox = self.journal.inbox().await?;
        if inbox.stop_after_turn {
            machine.handle(Input::StopAfterTurn, self.epoch);
        }
        for text in inbox.inputs {
            if machine.is_finished() {
                self.undelivered.push(text);
            } else {
                machine.handle(Input::Steer(UserInput::text(text)), self.epoch);
            }
        }
        Ok(())
    }

    /// One model call (the `before_model_call` hook first, read-only calls started while it
    /// streams), one journaled step; its record is fed to the machine an event at a time,
    /// after the host's words that came meanwhile (so that a final answer given while some
    /// wait goes on to a turn that hears them, as in-process).
    async fn call_model(
        &mut self,
        machine: &mut AgentMachine,
        request: agent_loop::provider::ModelRequest,
    ) -> Result<(), Stop> {
        let client = self.agent.client.clone();
        let hooks = self.hooks.clone().map(|hooks| (hooks, machine.turn()));
        let early = self.early.then(|| EarlyCalls {
            tools: self.agent.tools.clone(),
            policy: self.agent.approval.clone(),
            session: self.session.clone(),
        });
        let step = self
            .journal
            .model(ModelCall {
                client,
                request,
                hooks,
                early,
            })
            .await?;
        self.unread = true;
        self.read_inbox(machine).await?;
        let stopped = step.stopped();
        let ModelStep {
            events,
            error,
            hook_stopped,
            early,
        } = step;
        // By call id; of calls with the same id (the machine renames the repeats), the last
        // one: `early_result` checks the name and input, so a call never takes another's.
        self.started_early = early
            .into_iter()
            .map(|step| (step.result.id.clone(), step))
            .collect();
        if let Some(reason) = hook_stopped {
            self.pending.push_back(Input::HookStopped(reason));
            return Ok(());
        }
        self.pending
            .extend(events.into_iter().map(Input::ModelEvent));
        if !stopped {
            self.pending
                .push_back(Input::ModelEnded(error.map_or(Ok(()), Err)));
        }
        Ok(())
    }

    /// The early result of `call`, when the model step ran exactly this call.
    fn early_result(&self, call: &ToolCall) -> Option<&ToolStep> {
        self.started_early.get(&call.id).filter(|step| {
            step.result.name == call.name && step.input.as_ref() == Some(&call.input)
        })
    }

    /// The policy's verdicts, then the `before_tool` hook's (a journaled step per call); a
    /// call left to a human waits on a durable awakeable.
    async fn approve(
        &mut self,
        machine: &mut AgentMachine,
        calls: Vec<ToolCall>,
    ) -> Result<(), Stop> {
        let mut verdicts = Vec::with_capacity(calls.len());
        for call in &calls {
            if self.early_result(call).is_some() {
                // It ran: the policy allowed it inside the model step (and no hooks are set).
                verdicts.push(ToolDecision::Allow);
                continue;
            }
            let verdict = match self.agent.approval.check(call) {
                ApprovalRequest::Allow => self.before_tool(call).await?,
                ApprovalRequest::Deny(reason) => ToolDecision::Deny(reason),
                ApprovalRequest::AskHuman => self.ask_human(call).await?,
            };
            let verdict = match verdict {
                ToolDecision::Pause => self.ask_human(call).await?,
                verdict => verdict,
            };
            verdicts.push(verdict);
        }
        machine.handle(Input::Approved(verdicts), self.epoch);
        Ok(())
    }

    /// The `before_tool` hook's verdict, journaled (Allow when there are no hooks).
    async fn before_tool(&mut self, call: &ToolCall) -> Result<ToolDecision, Stop> {
        let Some(hooks) = self.hooks.clone() else {
            return Ok(ToolDecision::Allow);
        };
        let verdict = self.journal.before_tool(hooks, call.clone()).await?;
        Ok(verdict)
    }

    async fn ask_human(&mut self, call: &ToolCall) -> Result<ToolDecision, Stop> {
        let (awakeable_id, decision) = self.journal.awakeable();
        self.journal
            .set(&approval_key(&call.id), json(&awakeable_id));
        self.push(ProgressEvent::ApprovalNeeded {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
            awakeable_id,
        });
        self.journal.set(
            STATUS,
            json(&SessionStatus::WaitingForApproval {
                call_id: call.id.clone(),
            }),
        );
        self.unread = true;
        let decision = self.journal.wait(decision).await;
        self.journal.clear(&approval_key(&call.id));
        self.journal.set(STATUS, json(&SessionStatus::Running));
        let decision = decision?;
        Ok(if decision.allow {
            ToolDecision::Allow
        } else {
            ToolDecision::Deny(
                decision
                    .reason
                    .unwrap_or_else(|| "a human denied this call".to_owned()),
            )
        })
    }

    /// Compaction's summary, one journaled step (an error is part of the record: the
    /// compaction goes on without a summary, as in-process).
    async fn summarize(
        &mut self,
        machine: &mut AgentMachine,
        span: Vec<Message>,
    ) -> Result<(), Stop> {
        let summary = match self.summarizer.clone() {
            None => Err("no summarizer is configured".to_owned()),
            Some(summarizer) => {
                self.unread = true;
                self.journal.summary(summarizer, span).await?
            }
        };
        let summary = summary.map_err(|e| agent_loop::error::ContextError::Summary(e).into());
        machine.handle(Input::Summary(summary), self.epoch);
        Ok(())
    }

    /// Each call is one invocation of the `AgentTools` service (whose one journaled step runs
    /// the tool), all concurrently, their results fed as they come; a call the model step
    /// already ran is answered from its record. Calls, unlike `ctx.run` steps, are durable
    /// futures: they can be awaited together, and a Restate cancel of the run returns at once
    /// instead of waiting for a running tool (as an in-process cancel abandons it), even for a
    /// lone call.
    async fn run_tools(
        &mut self,
        machine: &mut AgentMachine,
        calls: Vec<ToolCall>,
    ) -> Result<(), Stop> {
        let mut requests = Vec::with_capacity(calls.len());
        for call in calls {
            if let Some(step) = self.early_result(&call).cloned() {
                self.started_early.remove(&call.id);
                self.feed_tool(machine, step);
                continue;
            }
            if self.agent.has_sub_agent(&call.name) {
                let Some(task) = call.input["task"].as_str().map(str::to_owned) else {
                    let error = agent_loop::tool::ToolCallResult::new(
                        &call.id,
                        &call.name,
                        "a sub-agent call needs a task: {\"task\": \"…\"}",
                        true,
                        Duration::ZERO,
                    );
                    self.feed_tool(
                        machine,
                        ToolStep {
                            result: error,
                            input: None,
                            progress: Vec::new(),
                            usage: None,
                        },
                    );
                    continue;
                };
                let session = format!("{}/{}", self.session, call.id);
                self.push(ProgressEvent::SubAgent {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    session: session.clone(),
                });
                let mut path = self.path.clone();
                path.push(call.name.clone());
                requests.push(Request::SubAgent {
                    id: call.id,
                    name: call.name,
                    session,
                    request: SubAgentRequest { path, task },
                });
                continue;
            }
            requests.push(Request::Tool(ToolRequest {
                session: self.session.to_string(),
                id: call.id,
                name: call.name,
                input: call.input,
                agent: self.path.clone(),
            }));
        }
        if requests.is_empty() {
            return Ok(());
        }
        let epoch = self.epoch;
        self.unread = true;
        let mut usage = (0, 0);
        let result = self
            .journal
            .run_tools(requests, &mut |step| {
                if let Some((input, output)) = step.usage {
                    usage.0 = u64::saturating_add(usage.0, input);
                    usage.1 = u64::saturating_add(usage.1, output);
                }
                feed_tool(machine, epoch, step);
            })
            .await;
        self.sub_usage.0 = self.sub_usage.0.saturating_add(usage.0);
        self.sub_usage.1 = self.sub_usage.1.saturating_add(usage.1);
        result
    }

    fn feed_tool(&mut self, machine: &mut AgentMachine, step: ToolStep) {
        feed_tool(machine, self.epoch, step);
    }

    /// Records what a host following the session needs; saves the conversation at turn ends.
    fn record(&mut self, event: &AgentEvent, machine: &mut AgentMachine) -> Result<(), Stop> {
        let progress = match event {
            AgentEvent::TurnStart { turn } => ProgressEvent::TurnStart { turn: *turn },
            AgentEvent::TextDelta { text } => ProgressEvent::Text {
                text: record::bounded(text.clone(), MAX_TEXT_EVENT),
            },
            AgentEvent::ToolCall { id, name, input } => ProgressEvent::ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            },
            AgentEvent::ToolProgress { id, message } => ProgressEvent::ToolProgress {
                id: id.clone(),
                message: message.clone(),
            },
            AgentEvent::ToolResult {
                id,
                name,
                content,
                is_error,
                ..
            } => ProgressEvent::ToolResult {
                id: id.clone(),
                name: name.clone(),
                content: content.clone(),
                is_error: *is_error,
            },
            AgentEvent::Retry { attempt, error, .. } => ProgressEvent::Retry {
                attempt: *attempt,
                error: error.clone(),
            },
            AgentEvent::Compacted {
                tokens_before,
                tokens_after,
            } => ProgressEvent::Compacted {
                tokens_before: *tokens_before,
                tokens_after: *tokens_after,
            },
            AgentEvent::Steered { input } => ProgressEvent::Steered {
                text: record::bounded(input.clone().into_message().text(), MAX_TEXT_EVENT),
            },
            AgentEvent::TurnEnd { turn, .. } => {
                self.save(machine)?;
                ProgressEvent::TurnEnd { turn: *turn }
            }
            // Not in the session's log: reasoning; a call's name and argument fragments
            // before it is assembled (its `ToolCall` is recorded); the provider's rate-limit
            // figures.
            AgentEvent::ThinkingDelta { .. }
            | AgentEvent::ToolCallStart { .. }
            | AgentEvent::ToolInputDelta { .. }
            | AgentEvent::RateLimits(_) => return Ok(()),
            // A sub-agent runs as a session of its own, with its own log (its call records
            // `ProgressEvent::SubAgent` naming it): this machine is fed none of its events.
            AgentEvent::SubAgent { .. } => return Ok(()),
            // Durable runs refuse a fallback or a handoff at the action that follows the
            // event (`Action::Fallback`, `Action::Handoff`): the run ends there, saying why.
            AgentEvent::Fallback { .. } | AgentEvent::Handoff { .. } => return Ok(()),
            // The machine never emits it: the driver reports the end at `Action::Finish`.
            AgentEvent::Finished(_) => return Ok(()),
        };
        self.push(progress);
        Ok(())
    }

    fn push(&mut self, event: ProgressEvent) {
        self.journal.set(&event_key(self.events), json(&event));
        self.events = self.events.saturating_add(1);
        self.journal.set(EVENT_COUNT, json(&self.events));
    }

    /// Saves what changed of the conversation since the last save (valid at a turn boundary
    /// and at the end): the messages from the first one changed on, one state value each, and
    /// the count. A turn writes its own messages (and the one before, when a push merged into
    /// it), not the conversation; a compaction, which rewrites the history, writes it again.
    fn save(&mut self, machine: &mut AgentMachine) -> Result<(), Stop> {
        let context = machine.context();
        let unsaved = context.unsaved();
        let messages = context.messages();
        // `whole`: never saved, restored, or a new system prompt (`set_system` marks it). A
        // session of the earlier format is never marked saved (`DurableAgent::machine`), so its
        // first save is whole.
        let whole = unsaved.whole;
        let from = if whole {
            0
        } else {
            unsaved.from.min(self.saved.sizes.len()).min(messages.len())
        };
        let mut encoded = Vec::with_capacity(messages.len() - from);
        for message in &messages[from..] {
            let bytes = serde_json::to_vec(message)
                .map_err(|e| TerminalError::new(format!("saving the conversation: {e}")))?;
            encoded.push(bytes::Bytes::from(bytes));
        }
        let system = context.system().map_or(0, str::len);
        let bytes = self.saved.sizes[..from].iter().sum::<usize>()
            + encoded.iter().map(bytes::Bytes::len).sum::<usize>()
            + system;
        if bytes > self.agent.max_state_bytes {
            return Err(TerminalError::new(format!(
                "the conversation is {bytes} bytes, over the {} the session may save: give the \
                 agent a context window that compacts before this",
                self.agent.max_state_bytes
            )));
        }
        if whole {
            self.journal.set(SYSTEM, json(&context.system()));
        }
        let count = messages.len();
        let stale = self.saved.sizes.len();
        self.saved.sizes.truncate(from);
        for (i, value) in encoded.into_iter().enumerate() {
            self.saved.sizes.push(value.len());
            self.journal.set(&message_key(from + i), value);
        }
        for n in count..stale {
            self.journal.clear(&message_key(n));
        }
        self.journal.set(MESSAGE_COUNT, json(&(count as u64)));
        if self.saved.legacy {
            self.journal.clear(CONVERSATION);
            self.saved.legacy = false;
        }
        machine.mark_saved();
        Ok(())
    }
}
