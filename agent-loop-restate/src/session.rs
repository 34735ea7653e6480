//! The `AgentSession` virtual object and the durable driver of the agent machine.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use agent_loop::machine::{Action, AgentMachine, Input};
use agent_loop::{
    Agent, AgentBuilder, AgentEvent, ContextConfig, ContextManager, Conversation, ExecOptions,
    LlmClient, ToolCall, ToolCallResult, ToolDecision, ToolRegistry,
};
use restate_sdk::context::RequestTarget;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::record::{self, Journaled, ModelStep};

/// The name the object is registered under in Restate: runs are started at
/// `{ingress}/AgentSession/{session id}/run`.
pub const OBJECT_NAME: &str = "AgentSession";

/// The longest session id accepted (bytes). Restate keys may be longer; ids this long are a
/// mistake, and they end up in every idempotency key.
const MAX_SESSION_ID: usize = 256;
/// The most events one `eventsSince` call returns.
const EVENTS_PAGE: u64 = 100;
/// Default bound on the saved conversation (Restate's default message limit is larger; the
/// margin leaves room for the rest of the journal entry).
const DEFAULT_MAX_STATE_BYTES: usize = 16 * 1024 * 1024;

const CONVERSATION: &str = "conversation";
const STATUS: &str = "status";
const EVENT_COUNT: &str = "events";

fn event_key(n: u64) -> String {
    format!("event/{n}")
}

fn approval_key(call_id: &str) -> String {
    format!("approval/{call_id}")
}

/// What the approval policy says about a tool call before it runs.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalRequest {
    /// Run it.
    Allow,
    /// Do not run it; the model reads the reason as the tool's error result.
    Deny(String),
    /// Wait, durably, for a human's [`ApprovalDecision`] (through the `approve` handler or by
    /// resolving the awakeable named in the [`ProgressEvent::ApprovalNeeded`] event).
    AskHuman,
}

/// Decides which tool calls need a human's approval. Any
/// `Fn(&ToolCall) -> ApprovalRequest` is one.
///
/// It must be deterministic (decide from the call alone): Restate replays a run after a crash
/// by running the handler again, and a different verdict on replay is a journal mismatch.
pub trait ApprovalPolicy: Send + Sync + 'static {
    /// The verdict on one call.
    fn check(&self, call: &ToolCall) -> ApprovalRequest;
}

impl<F> ApprovalPolicy for F
where
    F: Fn(&ToolCall) -> ApprovalRequest + Send + Sync + 'static,
{
    fn check(&self, call: &ToolCall) -> ApprovalRequest {
        self(call)
    }
}

/// A human's verdict on a call waiting for approval: the body of the `approve` handler, or
/// the value an awakeable is resolved with.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The call decided on.
    pub call_id: String,
    /// Whether it may run.
    pub allow: bool,
    /// Why not (the model reads it), when denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// Allows the call.
    pub fn allow(call_id: impl Into<String>) -> Self {
        ApprovalDecision {
            call_id: call_id.into(),
            allow: true,
            reason: None,
        }
    }

    /// Denies the call, telling the model why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        ApprovalDecision {
            call_id: call_id.into(),
            allow: false,
            reason: Some(reason.into()),
        }
    }
}

/// What a session is doing.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SessionStatus {
    /// No run yet.
    Idle,
    /// A run is in progress.
    Running,
    /// The run waits for a human's approval of this call.
    WaitingForApproval {
        /// The call.
        call_id: String,
    },
    /// The last run ended.
    Finished {
        /// How it ended (the `Termination`, as text).
        termination: String,
    },
}

/// The session as the `state` handler gives it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// What the session is doing.
    pub status: SessionStatus,
    /// The conversation as of the last turn boundary.
    pub conversation: Conversation,
    /// How many progress events the session has recorded (read them with the `eventsSince`
    /// handler).
    pub events: u64,
}

/// One step of a run, recorded in the session's state for hosts that follow along without a
/// connection (the `eventsSince` handler). Streamed deltas are not recorded, only what a turn
/// did.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProgressEvent {
    /// A model turn started.
    TurnStart {
        /// The turn number within the run.
        turn: u32,
    },
    /// A tool call is about to run.
    ToolCall {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: serde_json::Value,
    },
    /// A tool call needs a human's approval: resolve it with the `approve` handler, or
    /// resolve the awakeable with an [`ApprovalDecision`].
    ApprovalNeeded {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: serde_json::Value,
        /// The Restate awakeable the run waits on.
        awakeable_id: String,
    },
    /// A tool call finished.
    ToolResult {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// The result (as shortened for events).
        content: String,
        /// Whether it failed.
        is_error: bool,
    },
    /// The model call failed and the turn is sent again after a durable sleep.
    Retry {
        /// 1 for the first retry of the turn.
        attempt: u32,
        /// What failed.
        error: String,
    },
    /// The conversation was compacted.
    Compacted {
        /// Estimated tokens before.
        tokens_before: usize,
        /// Estimated tokens after.
        tokens_after: usize,
    },
    /// A turn ended.
    TurnEnd {
        /// The turn number.
        turn: u32,
    },
    /// The run is over.
    Finished {
        /// How it ended (the `Termination`, as text).
        termination: String,
        /// The model's last answer.
        final_text: String,
    },
}

/// What `run` returns: how the run ended.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Whether the model was done (`Termination::Completed`).
    pub completed: bool,
    /// How it ended: the `Termination` as text, the same as an in-process run's.
    pub termination: String,
    /// The model's last answer.
    pub final_text: String,
    /// Model turns taken.
    pub turns: u32,
    /// Input tokens over the run.
    pub input_tokens: u64,
    /// Output tokens over the run.
    pub output_tokens: u64,
}

type Configure = dyn Fn(AgentBuilder) -> AgentBuilder + Send + Sync;

/// An agent to serve durably: the model client, the tools, how to configure each run's
/// machine, and which calls need a human's approval.
#[derive(Clone)]
pub struct DurableAgent {
    client: Arc<dyn LlmClient>,
    tools: ToolRegistry,
    configure: Arc<Configure>,
    approval: Arc<dyn ApprovalPolicy>,
    max_state_bytes: usize,
    journal_retention: Option<std::time::Duration>,
}

impl std::fmt::Debug for DurableAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableAgent")
            .field("tools", &self.tools.names().collect::<Vec<_>>())
            .field("max_state_bytes", &self.max_state_bytes)
            .finish_non_exhaustive()
    }
}

impl DurableAgent {
    /// An agent on this client with these tools; every call allowed.
    pub fn new(client: impl LlmClient + 'static, tools: ToolRegistry) -> Self {
        DurableAgent {
            client: Arc::new(client),
            tools,
            configure: Arc::new(|builder| builder),
            approval: Arc::new(|_: &ToolCall| ApprovalRequest::Allow),
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            journal_retention: None,
        }
    }

    /// Configures each run's machine (system prompt, limits, retry policy, context window…)
    /// on a builder that already has the client and the tools. Keep it deterministic, like
    /// everything a replay runs again. Hooks and the summarizer of the builder are not used:
    /// approvals go through [`approval`](Self::approval), and compaction drops or elides
    /// without a summary.
    pub fn configure(
        mut self,
        configure: impl Fn(AgentBuilder) -> AgentBuilder + Send + Sync + 'static,
    ) -> Self {
        self.configure = Arc::new(configure);
        self
    }

    /// Which tool calls need a human's approval (all are allowed by default).
    pub fn approval(mut self, policy: impl ApprovalPolicy) -> Self {
        self.approval = Arc::new(policy);
        self
    }

    /// The largest conversation, serialized, the session saves (default 16 MiB, under
    /// Restate's message limit). A run whose conversation grows past it ends with an error
    /// saying so; configure a context window so that the machine compacts long before.
    pub fn max_state_bytes(mut self, bytes: usize) -> Self {
        self.max_state_bytes = bytes;
        self
    }

    /// How long Restate keeps the journal of a finished run (the server's default when not
    /// set). A kept journal can be read back with the admin API's `sys_journal` table, and
    /// turned into a test (see the replay module). Needs restate-server 1.4 or later.
    pub fn journal_retention(mut self, retention: std::time::Duration) -> Self {
        self.journal_retention = Some(retention);
        self
    }

    fn machine(&self, conversation: Option<Conversation>) -> Result<AgentMachine, TerminalError> {
        let builder = Agent::builder(self.client.clone()).tools(self.tools.clone());
        let mut builder = (self.configure)(builder)
            // Early read-only calls would interleave with the model step; each response is one
            // journaled step, so its calls start after it.
            .early_read_only_tools(false)
            .no_summarizer();
        if let Some(conversation) = conversation {
            let mut context = ContextManager::new(ContextConfig::for_model(self.client.model()));
            context
                .restore(conversation)
                .map_err(|e| TerminalError::new(format!("the saved conversation: {e}")))?;
            builder = builder.context(context);
        }
        let machine = builder
            .build_machine()
            .map_err(|e| TerminalError::new(format!("building the agent: {e}")))?;
        if !machine.config().handoffs.is_empty() {
            return Err(TerminalError::new(
                "durable runs do not support handoffs yet: configure the agent without \
                 AgentBuilder::handoff",
            ));
        }
        if !machine.config().fallbacks.is_empty() {
            return Err(TerminalError::new(
                "durable runs do not support fallback models yet: configure the agent without \
                 AgentBuilder::fallback",
            ));
        }
        Ok(machine)
    }
}

/// Serves the agent's `AgentSession` object (and the `AgentTools` service its tool calls go
/// through) on `addr`, HTTP/2 as restate-server calls it, until the process ends. Register the
/// address with the server's admin API (`POST /deployments {"uri": "http://host:port"}`).
///
/// Fails only when `addr` cannot be bound.
pub async fn serve(agent: DurableAgent, addr: SocketAddr) -> std::io::Result<()> {
    let mut options = restate_sdk::endpoint::ServiceOptions::new();
    if let Some(retention) = agent.journal_retention {
        options = options.journal_retention(retention);
    }
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(
        Endpoint::builder()
            .bind(
                restate_sdk::service::IntoServiceDefinition::into_service_definition(
                    AgentSession {
                        agent: agent.clone(),
                    },
                )
                .options(options),
            )
            .bind(AgentTools { agent })
            .build(),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait a little, keep serving.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Every journaled step is a small frame answered by a small frame: with Nagle's
        // algorithm on, each waits for the peer's delayed ACK.
        let _ = stream.set_nodelay(true);
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let connection =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint);
            if let Err(error) = connection.await {
                tracing::debug!(%error, %remote, "connection from restate-server ended");
            }
        });
    }
}

struct AgentSession {
    agent: DurableAgent,
}

/// The service that runs one tool call as one journaled step.
struct AgentTools {
    agent: DurableAgent,
}

/// The name of the tool-running service.
const TOOLS_NAME: &str = "AgentTools";

/// One tool call, as the session sends it to `AgentTools`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ToolRequest {
    session: String,
    id: String,
    name: String,
    input: serde_json::Value,
}

#[restate_sdk::service(name = "AgentTools")]
impl AgentTools {
    #[handler]
    async fn execute(
        &self,
        ctx: Context<'_>,
        Json(request): Json<ToolRequest>,
    ) -> HandlerResult<Journaled<ToolCallResult>> {
        let tools = self.agent.tools.clone();
        let ToolRequest {
            session,
            id,
            name,
            input,
        } = request;
        let step = format!("tool {name} {id}");
        let call = ToolCall::new(id, name, input);
        let session: Arc<str> = Arc::from(session);
        Ok(ctx
            .run(move || async move { Ok(Journaled(execute(tools, session, call).await)) })
            .name(step)
            .await?)
    }
}

/// Runs one tool call with its idempotency key scoped to the session.
async fn execute(tools: ToolRegistry, session: Arc<str>, call: ToolCall) -> ToolCallResult {
    let opts = ExecOptions::new().idempotency_scope(session);
    tools.execute_one(call, &opts).await
}

#[restate_sdk::object(name = "AgentSession")]
impl AgentSession {
    #[handler]
    async fn run(
        &self,
        ctx: ObjectContext<'_>,
        Json(input): Json<String>,
    ) -> HandlerResult<Json<RunReport>> {
        let session = ctx.key().to_owned();
        if session.is_empty() || session.len() > MAX_SESSION_ID || session.contains('/') {
            return Err(TerminalError::new_with_code(
                400,
                format!(
                    "invalid session id {session:?}: use 1 to {MAX_SESSION_ID} bytes, without '/'"
                ),
            )
            .into());
        }
        let conversation = ctx.get::<Json<Conversation>>(CONVERSATION).await?;
        let events = ctx.get::<u64>(EVENT_COUNT).await?.unwrap_or(0);
        let machine = self.agent.machine(conversation.map(|Json(c)| c))?;
        let driver = Driver {
            ctx: &ctx,
            agent: &self.agent,
            session: Arc::from(session),
            events,
            // The machine's clock: fixed, so that a replay computes the same sleeps.
            epoch: Instant::now(),
        };
        Ok(Json(driver.drive(machine, input).await?))
    }

    #[handler]
    async fn state(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<SessionState>> {
        let status = ctx
            .get::<Json<SessionStatus>>(STATUS)
            .await?
            .map_or(SessionStatus::Idle, |Json(s)| s);
        let conversation = ctx
            .get::<Json<Conversation>>(CONVERSATION)
            .await?
            .map(|Json(c)| c)
            .unwrap_or_default();
        let events = ctx.get::<u64>(EVENT_COUNT).await?.unwrap_or(0);
        Ok(Json(SessionState {
            status,
            conversation,
            events,
        }))
    }

    #[handler(name = "eventsSince")]
    async fn events_since(
        &self,
        ctx: SharedObjectContext<'_>,
        from: u64,
    ) -> HandlerResult<Json<Vec<ProgressEvent>>> {
        let count = ctx.get::<u64>(EVENT_COUNT).await?.unwrap_or(0);
        let mut out = Vec::new();
        for n in from..count.min(from.saturating_add(EVENTS_PAGE)) {
            if let Some(Json(event)) = ctx.get::<Json<ProgressEvent>>(&event_key(n)).await? {
                out.push(event);
            }
        }
        Ok(Json(out))
    }

    #[handler]
    async fn approve(
        &self,
        ctx: SharedObjectContext<'_>,
        Json(decision): Json<ApprovalDecision>,
    ) -> HandlerResult<()> {
        let Some(awakeable) = ctx.get::<String>(&approval_key(&decision.call_id)).await? else {
            return Err(TerminalError::new_with_code(
                404,
                format!("no call {:?} waits for approval", decision.call_id),
            )
            .into());
        };
        ctx.resolve_awakeable(&awakeable, Json(decision));
        Ok(())
    }
}

/// Carries out the machine's actions as journaled steps of one `run` invocation.
struct Driver<'a, 'ctx> {
    ctx: &'a ObjectContext<'ctx>,
    agent: &'a DurableAgent,
    session: Arc<str>,
    /// Progress events recorded so far (the index of the next).
    events: u64,
    epoch: Instant,
}

/// Why the run stopped listening to its own steps: Restate cancelled it (or failed a step for
/// good), or the conversation outgrew the state limit.
type Stop = TerminalError;

impl Driver<'_, '_> {
    async fn drive(mut self, mut machine: AgentMachine, input: String) -> Result<RunReport, Stop> {
        self.ctx.set(STATUS, Json(SessionStatus::Running));
        machine.start(input, self.epoch);
        // The first terminal error of a step (a Restate cancel): the machine is told to
        // cancel, finishes the run validly, and the error is returned after saving.
        let mut stopped: Option<Stop> = None;
        loop {
            let Some(action) = machine.poll() else {
                // Every action is answered before the next poll, so the machine waits only
                // for its timer (the backoff before re-sending a turn): a journaled sleep.
                if let Some(at) = machine.poll_timeout() {
                    let delay = at.saturating_duration_since(self.epoch);
                    match self.ctx.sleep(delay).await {
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
                machine.handle(Input::Cancel, self.epoch);
                if machine.poll().is_none() {
                    return Err(TerminalError::new("the agent machine stalled"));
                }
                continue;
            };
            let result = match action {
                Action::Emit(event) => self.record(&event, &machine),
                Action::CallModel(request) => self.call_model(&mut machine, request).await,
                Action::Approve(calls) => self.approve(&mut machine, calls).await,
                Action::RunTools(calls) => self.run_tools(&mut machine, calls).await,
                Action::Summarize(_) => {
                    machine.handle(
                        Input::Summary(Err(agent_loop::ContextError::Summary(
                            "no summarizer in a durable run".into(),
                        )
                        .into())),
                        self.epoch,
                    );
                    Ok(())
                }
                Action::Finish(outcome) => {
                    let termination = outcome.termination.to_string();
                    let report = RunReport {
                        completed: outcome.termination.is_completed(),
                        termination: termination.clone(),
                        final_text: outcome.final_text.clone(),
                        turns: outcome.turns,
                        input_tokens: outcome.usage.input_tokens,
                        output_tokens: outcome.usage.output_tokens,
                    };
                    // A conversation too large to save keeps the last one that fit; the
                    // run ends with the error saying why.
                    let (termination, stopped) = match self.save(&machine) {
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
                    self.ctx
                        .set(STATUS, Json(SessionStatus::Finished { termination }));
                    return match stopped {
                        Some(stop) => Err(stop),
                        None => Ok(report),
                    };
                }
                Action::Handoff { to, .. } => Err(TerminalError::new(format!(
                    "the run was handed to {to}: durable runs do not support handoffs yet"
                ))),
                Action::Fallback { to, .. } => Err(TerminalError::new(format!(
                    "the run moved to the fallback model {to}: durable runs do not support fallback models yet"
                ))),
                _ => Ok(()),
            };
            if let Err(stop) = result {
                if stopped.is_none() {
                    machine.handle(Input::Cancel, self.epoch);
                    stopped = Some(stop);
                }
            }
        }
    }

    /// One model call, one journaled step; its record is fed to the machine.
    async fn call_model(
        &mut self,
        machine: &mut AgentMachine,
        request: agent_loop::ModelRequest,
    ) -> Result<(), Stop> {
        let client = self.agent.client.clone();
        let Journaled(step) = self
            .ctx
            .run(|| async move { Ok(Journaled(record::call_model(client, request).await)) })
            .name("model")
            .await?;
        let stopped = step.stopped();
        let ModelStep { events, error } = step;
        for event in events {
            machine.handle(Input::ModelEvent(event), self.epoch);
        }
        if !stopped {
            machine.handle(Input::ModelEnded(error.map_or(Ok(()), Err)), self.epoch);
        }
        Ok(())
    }

    /// The policy's verdicts; a call it leaves to a human waits on a durable awakeable.
    async fn approve(
        &mut self,
        machine: &mut AgentMachine,
        calls: Vec<ToolCall>,
    ) -> Result<(), Stop> {
        let mut verdicts = Vec::with_capacity(calls.len());
        for call in &calls {
            let verdict = match self.agent.approval.check(call) {
                ApprovalRequest::Allow => ToolDecision::Allow,
                ApprovalRequest::Deny(reason) => ToolDecision::Deny(reason),
                ApprovalRequest::AskHuman => self.ask_human(call).await?,
            };
            verdicts.push(verdict);
        }
        machine.handle(Input::Approved(verdicts), self.epoch);
        Ok(())
    }

    async fn ask_human(&mut self, call: &ToolCall) -> Result<ToolDecision, Stop> {
        let (awakeable_id, decision) = self.ctx.awakeable::<Json<ApprovalDecision>>();
        self.ctx.set(&approval_key(&call.id), awakeable_id.clone());
        self.push(ProgressEvent::ApprovalNeeded {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
            awakeable_id,
        });
        self.ctx.set(
            STATUS,
            Json(SessionStatus::WaitingForApproval {
                call_id: call.id.clone(),
            }),
        );
        let decision = decision.await;
        self.ctx.clear(&approval_key(&call.id));
        self.ctx.set(STATUS, Json(SessionStatus::Running));
        let Json(decision) = decision?;
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

    /// Each call is one invocation of the `AgentTools` service (whose one journaled step runs
    /// the tool), all concurrently, their results fed as they come. Calls, unlike `ctx.run`
    /// steps, are durable futures: they can be awaited together, and a Restate cancel of the
    /// run returns at once instead of waiting for a running tool (as an in-process cancel
    /// abandons it), even for a lone call.
    async fn run_tools(
        &mut self,
        machine: &mut AgentMachine,
        calls: Vec<ToolCall>,
    ) -> Result<(), Stop> {
        let mut steps = DurableFuturesUnordered::new();
        for call in calls {
            // The call is journaled, so it is sent once anyway; the key (unique per run, since
            // a model may use a call id again once compaction dropped the first) names the
            // invocation for operators.
            let key = format!("{}/{}/{}", self.session, self.ctx.invocation_id(), call.id);
            let request = ToolRequest {
                session: self.session.to_string(),
                id: call.id,
                name: call.name,
                input: call.input,
            };
            steps.push(
                self.ctx
                    .request::<Json<ToolRequest>, Journaled<ToolCallResult>>(
                        RequestTarget::service(TOOLS_NAME, "execute"),
                        Json(request),
                    )
                    .idempotency_key(key)
                    .call(),
            );
        }
        while let Some((_, step)) = steps.next().await? {
            // The result of the call it answers: `execute_one` keeps the call's id and name.
            let Journaled(result) = step?;
            machine.handle(Input::ToolDone(result), self.epoch);
        }
        Ok(())
    }

    /// Records what a host following the session needs; saves the conversation at turn ends.
    fn record(&mut self, event: &AgentEvent, machine: &AgentMachine) -> Result<(), Stop> {
        let progress = match event {
            AgentEvent::TurnStart { turn } => ProgressEvent::TurnStart { turn: *turn },
            AgentEvent::ToolCall { id, name, input } => ProgressEvent::ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
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
            AgentEvent::TurnEnd { turn, .. } => {
                self.save(machine)?;
                ProgressEvent::TurnEnd { turn: *turn }
            }
            _ => return Ok(()),
        };
        self.push(progress);
        Ok(())
    }

    fn push(&mut self, event: ProgressEvent) {
        self.ctx.set(&event_key(self.events), Json(event));
        self.events = self.events.saturating_add(1);
        self.ctx.set(EVENT_COUNT, self.events);
    }

    /// Saves the conversation (valid at a turn boundary and at the end) as the object's state.
    fn save(&self, machine: &AgentMachine) -> Result<(), Stop> {
        let conversation = machine.context().snapshot();
        let bytes = serde_json::to_vec(&conversation)
            .map(|b| b.len())
            .unwrap_or(0);
        if bytes > self.agent.max_state_bytes {
            return Err(TerminalError::new(format!(
                "the conversation is {bytes} bytes, over the {} the session may save: give the \
                 agent a context window that compacts before this",
                self.agent.max_state_bytes
            )));
        }
        self.ctx.set(CONVERSATION, Json(conversation));
        Ok(())
    }
}
