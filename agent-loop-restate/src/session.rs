//! The `AgentSession` virtual object and the durable driver of the agent machine.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::machine::MachineParts;
use agent_loop::agent::{AgentHooks, SubAgentTask, ToolDecision};
use agent_loop::context::{ContextConfig, Conversation, Summarizer};
use agent_loop::tool::{FnTool, ToolCall};
use agent_loop::{
    Agent, AgentBuilder, ContextManager, LlmClient, Message, ToolError, ToolRegistry,
};
use bytes::Bytes;
use restate_sdk::context::RequestTarget;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::driver::{
    approval_key, event_key, message_key, sub_agent_result, Driver, Journal, ModelCall, Request,
    Stop, SubAgentRequest, ToolRequest, CONVERSATION, EVENT_COUNT, MESSAGE_COUNT, STATUS, SYSTEM,
};
use crate::inbox::{check_input, Inbox, INBOX_NAME};
use crate::record::{self, Journaled, ModelStep, ToolStep};

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
/// connection (the `eventsSince` handler). A step's events are recorded once the step is
/// journaled: a response's text one event per block (not token by token), a tool's progress
/// with its result.
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
    /// A running tool reported progress (recorded with its result: at most 16 notes a call,
    /// each at most 1 KiB).
    ToolProgress {
        /// The call id.
        id: String,
        /// What the tool said.
        message: String,
    },
    /// The model's text of one block of a response, recorded when the response's step is
    /// journaled (at most 4 KiB; the conversation has all of it).
    Text {
        /// The text.
        text: String,
    },
    /// A call of a sub-agent ([`DurableAgent::sub_agent`]) started: its run is the child
    /// session `session`, whose own `state` and `eventsSince` follow it (and whose `approve`
    /// answers its approvals).
    SubAgent {
        /// The call id.
        id: String,
        /// The sub-agent.
        name: String,
        /// The child session's key: `{session}/{call id}`.
        session: String,
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
    /// The host's words ([`steer`](crate#handlers-of-the-agentsession-object)) entered the
    /// history here, as a user message: between turns, before the model call that reads them.
    Steered {
        /// What the host said (at most 4 KiB; the conversation has all of it).
        text: String,
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
    /// The host's words (`steer`) the run took but never delivered, oldest first: it ended
    /// before its next safe point (stopped, at a limit, or the words came after its final
    /// answer). Words sent after the run's end wait in the session for its next run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undelivered: Vec<String>,
}

type Configure = dyn Fn(AgentBuilder) -> AgentBuilder + Send + Sync;

/// An agent to serve durably: the model client, the tools, how to configure each run's
/// machine, and which calls need a human's approval.
#[derive(Clone)]
pub struct DurableAgent {
    pub(crate) client: Arc<dyn LlmClient>,
    pub(crate) tools: ToolRegistry,
    configure: Arc<Configure>,
    pub(crate) approval: Arc<dyn ApprovalPolicy>,
    pub(crate) max_state_bytes: usize,
    journal_retention: Option<std::time::Duration>,
    /// Sub-agents by the name the model calls them by.
    sub_agents: Vec<(String, Arc<DurableAgent>)>,
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
            sub_agents: Vec::new(),
        }
    }

    /// Configures each run's machine (system prompt, limits, retry policy, context window,
    /// hooks, summarizer…) on a builder that already has the client and the tools. Keep it
    /// deterministic, like everything a replay runs again.
    ///
    /// What the builder's settings become in a durable run:
    /// - [`hooks`](AgentBuilder::hooks): `before_model_call` runs in the model call's
    ///   journaled step (its stop is journaled; its changes to the request need not be, the
    ///   response is); `before_tool` is a journaled step of its own per call, run after the
    ///   [`approval`](Self::approval) policy allowed the call. Its
    ///   [`ToolDecision::Pause`] waits for a human's [`ApprovalDecision`] durably, as the
    ///   policy's [`ApprovalRequest::AskHuman`] does.
    /// - the [`summarizer`](AgentBuilder::summarizer) (by default the agent's own model):
    ///   compaction's summary call is a journaled step.
    /// - [`early_read_only_tools`](agent_loop::agent::RunPolicy::early_read_only_tools) (on by default):
    ///   read-only calls the policy allows start while the response streams, inside the model
    ///   call's step, and their results are journaled with it. Not with hooks (each call's
    ///   `before_tool` step comes first then).
    /// - [`require_approval`](agent_loop::agent::RunPolicy::require_approval) and
    ///   [`DeferredTool`](agent_loop::tool::DeferredTool)s pause an in-process run for
    ///   [`Agent::resume`]; a durable run does not pause (it already outlives its process):
    ///   use the policy's [`ApprovalRequest::AskHuman`]. A run that pauses anyway ends, its
    ///   calls answered as interrupted.
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

    /// Adds `agent` as a sub-agent the model calls by `name` with `{"task": "…"}`, as
    /// [`Agent::as_tool`] does in-process: each call runs it on a fresh conversation and
    /// answers with its final text (a run that ends without one is an error result saying
    /// why). Its run is a durable call: the `AgentSession` object's `subAgent` handler on the
    /// child session `{session}/{call id}`, so its model calls and tools are journaled steps
    /// of their own (a crash inside it resumes inside it), its approvals wait in the child
    /// session, its tokens add to the caller's report, and the caller's progress log names
    /// the child session ([`ProgressEvent::SubAgent`]). Sub-agents may have sub-agents.
    ///
    /// Fails when `name` is not a valid tool name or the agent has a tool of that name.
    pub fn sub_agent(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        agent: DurableAgent,
    ) -> Result<Self, agent_loop::Error> {
        let name = name.into();
        let tool = FnTool::new(
            name.clone(),
            description.into(),
            |_task: SubAgentTask, _ctx| async move {
                Err::<String, _>(ToolError::new(
                    "a durable sub-agent runs as a call of its own session, not as a tool",
                ))
            },
        );
        self.tools = self.tools.with(tool)?;
        self.sub_agents.push((name, Arc::new(agent)));
        Ok(self)
    }

    /// Whether the model calls a sub-agent by `name`.
    pub(crate) fn has_sub_agent(&self, name: &str) -> bool {
        self.sub_agents.iter().any(|(n, _)| n == name)
    }

    /// The agent at `path` (sub-agent names from this one down): this one when empty.
    pub(crate) fn find(&self, path: &[String]) -> Option<&DurableAgent> {
        let Some((first, rest)) = path.split_first() else {
            return Some(self);
        };
        self.sub_agents
            .iter()
            .find(|(name, _)| name == first)
            .and_then(|(_, agent)| agent.find(rest))
    }

    /// How long Restate keeps the journal of a finished run (the server's default when not
    /// set). A kept journal can be read back with the admin API's `sys_journal` table, and
    /// turned into a test (see the replay module). Needs restate-server 1.4 or later.
    pub fn journal_retention(mut self, retention: std::time::Duration) -> Self {
        self.journal_retention = Some(retention);
        self
    }

    /// The run's machine, hooks and summarizer, on the stored conversation; `saved`: whether
    /// the state holds it as it is restored (then only what changes is saved).
    pub(crate) fn machine(
        &self,
        stored: Option<Conversation>,
        saved: bool,
    ) -> Result<MachineParts, TerminalError> {
        let new_builder = || Agent::builder(self.client.clone()).tools(self.tools.clone());
        let mut builder = (self.configure)(new_builder());
        let mut repaired = 0;
        let stored_system = stored.as_ref().and_then(|c| c.system.clone());
        if let Some(conversation) = stored {
            // The stored conversation goes into the context the configuration gives (its
            // window, its counter), not a default one: an agent built once as configured
            // lends its context.
            let mut context = (self.configure)(new_builder())
                .build()
                .map(|agent| agent.context())
                .unwrap_or_else(|_| {
                    ContextManager::new(ContextConfig::for_model(self.client.model()))
                });
            repaired = context
                .restore(conversation)
                .map_err(|e| TerminalError::new(format!("the saved conversation: {e}")))?;
            builder = builder.context(context);
        }
        let mut parts = builder
            .build_machine_parts()
            .map_err(|e| TerminalError::new(format!("building the agent: {e}")))?;
        // The state holds this conversation as it is, unless the restore repaired it or the
        // configuration changed its system prompt: then it is saved whole at the first turn.
        if saved && repaired == 0 && parts.machine.context().system() == stored_system.as_deref() {
            parts.machine.mark_saved();
        }
        let machine = &parts.machine;
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
        Ok(parts)
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
            .bind(crate::inbox::AgentInbox)
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

#[restate_sdk::service(name = "AgentTools")]
impl AgentTools {
    #[handler]
    async fn execute(
        &self,
        ctx: Context<'_>,
        Json(request): Json<ToolRequest>,
    ) -> HandlerResult<Journaled<ToolStep>> {
        let ToolRequest {
            session,
            id,
            name,
            input,
            agent,
        } = request;
        let Some(served) = self.agent.find(&agent) else {
            return Err(TerminalError::new(format!(
                "no sub-agent {} in the served agent: was the worker changed while the run was \
                 in flight?",
                agent.join("/")
            ))
            .into());
        };
        let tools = served.tools.clone();
        let step = format!("tool {name} {id}");
        let call = ToolCall::new(id, name, input);
        let session: Arc<str> = Arc::from(session);
        Ok(ctx
            .run(move || async move { Ok(Journaled(record::run_tool(tools, session, call).await)) })
            .name(step)
            .await?)
    }
}

/// Reads the session's conversation in either state format: `(conversation, legacy)`, where
/// `legacy` is a conversation of the earlier one-value format (replaced at the next save).
/// A macro, not a function: the SDK's state keys borrow for the context's lifetime, which a
/// function generic over both context kinds cannot name for its own key strings.
macro_rules! load_conversation {
    ($ctx:expr) => {
        async {
            let ctx = $ctx;
            match ctx.get::<u64>(MESSAGE_COUNT).await? {
                Some(count) => {
                    let system = ctx
                        .get::<Json<Option<String>>>(SYSTEM)
                        .await?
                        .and_then(|Json(system)| system);
                    let count = usize::try_from(count).unwrap_or(usize::MAX);
                    let mut messages = Vec::with_capacity(count.min(65_536));
                    for n in 0..count {
                        match ctx.get::<Json<Message>>(&message_key(n)).await? {
                            Some(Json(message)) => messages.push(message),
                            None => {
                                return Err::<_, HandlerError>(
                                    TerminalError::new(format!(
                                        "the session's state is incomplete: it counts {count} \
                                         messages, but message/{n} is missing"
                                    ))
                                    .into(),
                                )
                            }
                        }
                    }
                    Ok((Some(Conversation::new(system, messages)), false))
                }
                None => Ok(ctx
                    .get::<Json<Conversation>>(CONVERSATION)
                    .await?
                    .map_or((None, false), |Json(c)| (Some(c), true))),
            }
        }
    };
}

/// Runs `agent` (at `path` from the served one) on `input` in the session `session` of
/// `ctx`: its stored conversation loaded, each action a journaled step.
async fn run_agent(
    ctx: &ObjectContext<'_>,
    agent: &DurableAgent,
    path: Vec<String>,
    session: String,
    input: String,
) -> Result<RunReport, HandlerError> {
    let (conversation, legacy) = load_conversation!(ctx).await?;
    let events = ctx.get::<u64>(EVENT_COUNT).await?.unwrap_or(0);
    let (mut driver, machine) = Driver::new(
        RestateJournal { ctx },
        agent,
        path,
        Arc::from(session),
        conversation,
        legacy,
        events,
    )?;
    Ok(driver.drive(machine, input).await?)
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
        Ok(Json(
            run_agent(&ctx, &self.agent, Vec::new(), session, input).await?,
        ))
    }

    /// A sub-agent's run for one call of its caller: the object's key is
    /// `{caller session}/{call id}`, called by the caller's run only.
    #[handler(name = "subAgent")]
    async fn sub_agent(
        &self,
        ctx: ObjectContext<'_>,
        Json(request): Json<SubAgentRequest>,
    ) -> HandlerResult<Json<RunReport>> {
        let session = ctx.key().to_owned();
        if !session.contains('/') {
            return Err(TerminalError::new_with_code(
                400,
                "subAgent runs a sub-agent for its caller's run; start runs with `run`",
            )
            .into());
        }
        let Some(agent) = self.agent.find(&request.path) else {
            return Err(TerminalError::new_with_code(
                404,
                format!(
                    "no sub-agent {} in the served agent",
                    request.path.join("/")
                ),
            )
            .into());
        };
        Ok(Json(
            run_agent(&ctx, agent, request.path, session, request.task).await?,
        ))
    }

    #[handler]
    async fn state(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<SessionState>> {
        let status = ctx
            .get::<Json<SessionStatus>>(STATUS)
            .await?
            .map_or(SessionStatus::Idle, |Json(s)| s);
        let (conversation, _) = load_conversation!(&ctx).await?;
        let events = ctx.get::<u64>(EVENT_COUNT).await?.unwrap_or(0);
        Ok(Json(SessionState {
            status,
            conversation: conversation.unwrap_or_default(),
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

    /// Queues the host's words for the run in flight (or the next one): see the crate's
    /// handler table.
    #[handler]
    async fn steer(
        &self,
        ctx: SharedObjectContext<'_>,
        Json(text): Json<String>,
    ) -> HandlerResult<()> {
        let session = steerable_session(ctx.key())?;
        check_input(&text)?;
        ctx.request::<Json<String>, ()>(
            RequestTarget::object(INBOX_NAME, session, "steer"),
            Json(text),
        )
        .call()
        .await?;
        Ok(())
    }

    /// Asks the run in flight (or the next one) to stop after its turn.
    #[handler(name = "stopAfterTurn")]
    async fn stop_after_turn(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<()> {
        let session = steerable_session(ctx.key())?;
        ctx.request::<(), ()>(
            RequestTarget::object(INBOX_NAME, session, "stopAfterTurn"),
            (),
        )
        .call()
        .await?;
        Ok(())
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

/// The session a host may steer: a run's, not a sub-agent's child session (whose run does not
/// read its inbox).
fn steerable_session(key: &str) -> Result<String, TerminalError> {
    if key.is_empty() || key.len() > MAX_SESSION_ID || key.contains('/') {
        return Err(TerminalError::new_with_code(
            400,
            format!(
                "cannot steer {key:?}: steer a session a `run` runs in (1 to {MAX_SESSION_ID} \
                 bytes, without '/'), not a sub-agent's"
            ),
        ));
    }
    Ok(key.to_owned())
}

/// A state value written as the JSON bytes it already is.
struct RawJson(Bytes);

impl restate_sdk::serde::Serialize for RawJson {
    type Error = std::convert::Infallible;

    fn serialize(&self) -> Result<Bytes, Self::Error> {
        Ok(self.0.clone())
    }
}

impl restate_sdk::serde::Deserialize for RawJson {
    type Error = std::convert::Infallible;

    fn deserialize(bytes: &mut Bytes) -> Result<Self, Self::Error> {
        Ok(RawJson(bytes.clone()))
    }
}

impl restate_sdk::serde::PayloadMetadata for RawJson {}

/// The `run` handler's journal: each step a Restate step.
struct RestateJournal<'a, 'ctx> {
    ctx: &'a ObjectContext<'ctx>,
}

type Waiting<'ctx> = Pin<
    Box<
        dyn std::future::Future<Output = Result<Json<ApprovalDecision>, TerminalError>>
            + Send
            + 'ctx,
    >,
>;

impl<'ctx> Journal for RestateJournal<'_, 'ctx> {
    type Awakeable = Waiting<'ctx>;

    fn set(&mut self, key: &str, value: Bytes) {
        self.ctx.set(key, RawJson(value));
    }

    fn clear(&mut self, key: &str) {
        self.ctx.clear(key);
    }

    async fn model(&mut self, call: ModelCall) -> Result<ModelStep, Stop> {
        let Journaled(step) = self
            .ctx
            .run(|| async move { Ok(Journaled(call.call().await)) })
            .name("model")
            .await?;
        Ok(step)
    }

    async fn before_tool(
        &mut self,
        hooks: Arc<dyn AgentHooks>,
        call: ToolCall,
    ) -> Result<ToolDecision, Stop> {
        let name = format!("before_tool {}", call.id);
        let Journaled(verdict) = self
            .ctx
            .run(|| async move { Ok(Journaled(hooks.before_tool(&call).await)) })
            .name(name)
            .await?;
        Ok(verdict)
    }

    async fn summary(
        &mut self,
        summarizer: Arc<dyn Summarizer>,
        span: Vec<Message>,
    ) -> Result<Result<String, String>, Stop> {
        let Journaled(summary) = self
            .ctx
            .run(|| async move {
                Ok(Journaled(
                    summarizer.summarize(&span).await.map_err(|e| e.to_string()),
                ))
            })
            .name("summary")
            .await?;
        Ok(summary)
    }

    async fn sleep(&mut self, delay: Duration) -> Result<(), Stop> {
        self.ctx.sleep(delay).await
    }

    async fn inbox(&mut self) -> Result<Inbox, Stop> {
        let target = RequestTarget::object(INBOX_NAME, self.ctx.key(), "take");
        let Json(inbox) = self
            .ctx
            .request::<(), Json<Inbox>>(target, ())
            .call()
            .await?;
        Ok(inbox)
    }

    fn put_back(&mut self, inputs: Vec<String>) {
        let target = RequestTarget::object(INBOX_NAME, self.ctx.key(), "putBack");
        self.ctx
            .request::<Json<Vec<String>>, ()>(target, Json(inputs))
            .send();
    }

    fn awakeable(&mut self) -> (String, Self::Awakeable) {
        let (id, decision) = self.ctx.awakeable::<Json<ApprovalDecision>>();
        (id, Box::pin(decision))
    }

    async fn wait(&mut self, awakeable: Self::Awakeable) -> Result<ApprovalDecision, Stop> {
        awakeable.await.map(|Json(decision)| decision)
    }

    async fn run_tools(
        &mut self,
        requests: Vec<Request>,
        done: &mut (dyn FnMut(ToolStep) + Send),
    ) -> Result<(), Stop> {
        let mut steps = DurableFuturesUnordered::new();
        let mut answers = Vec::with_capacity(requests.len());
        for request in requests {
            let parameter = RawJson(request.parameter());
            let (target, key, answered) = match request {
                // The call is journaled, so it is sent once anyway; the key (unique per run,
                // since a model may use a call id again once compaction dropped the first)
                // names the invocation for operators.
                Request::Tool(request) => (
                    RequestTarget::service(TOOLS_NAME, "execute"),
                    Some(format!(
                        "{}/{}/{}",
                        request.session,
                        self.ctx.invocation_id(),
                        request.id
                    )),
                    None,
                ),
                Request::SubAgent {
                    id, name, session, ..
                } => (
                    RequestTarget::object(OBJECT_NAME, session, "subAgent"),
                    None,
                    Some((id, name)),
                ),
            };
            answers.push(answered);
            let call = self.ctx.request::<RawJson, RawJson>(target, parameter);
            steps.push(match key {
                Some(key) => call.idempotency_key(key).call(),
                None => call.call(),
            });
        }
        while let Some((i, result)) = steps.next().await? {
            let RawJson(bytes) = result?;
            let step = answer(answers.get(i).cloned().flatten(), bytes)?;
            done(step);
        }
        Ok(())
    }
}

/// A call's result as the driver takes it: a tool's step, or a sub-agent's report made
/// the call's result (`sub_agent`: the call's id and name).
pub(crate) fn answer(
    sub_agent: Option<(String, String)>,
    mut bytes: Bytes,
) -> Result<ToolStep, Stop> {
    let unreadable = |e: serde_json::Error| TerminalError::new(format!("a call's result: {e}"));
    match sub_agent {
        None => <Journaled<ToolStep> as restate_sdk::serde::Deserialize>::deserialize(&mut bytes)
            .map(|Journaled(step)| step)
            .map_err(unreadable),
        Some((id, name)) => {
            let report: RunReport = serde_json::from_slice(&bytes).map_err(unreadable)?;
            Ok(sub_agent_result(&id, &name, &report))
        }
    }
}
