//! The `AgentSession` virtual object (and the `AgentTools` service its tool calls go
//! through): the Restate handlers that run the durable driver of the agent machine.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::{AgentHooks, ToolDecision};
use agent_loop::context::{Conversation, Summarizer};
use agent_loop::tool::ToolCall;
use agent_loop::Message;
use bytes::Bytes;
use restate_sdk::context::RequestTarget;
use restate_sdk::prelude::*;

use crate::agent::{ApprovalDecision, DurableAgent};
use crate::driver::{
    approval_key, event_key, message_key, sub_agent_result, DurableDriver, Journal, ModelCall,
    Request, Stop, SubAgentRequest, ToolRequest, CONVERSATION, EVENT_COUNT, MESSAGE_COUNT, STATUS,
    SYSTEM,
};
use crate::inbox::{check_input, Inbox, INBOX_NAME};
use crate::record::{self, Journaled, ModelStep, ToolStep};
use crate::report::{ProgressEvent, RunReport, SessionState, SessionStatus};

/// The name the object is registered under in Restate: runs are started at
/// `{ingress}/AgentSession/{session id}/run`.
pub const OBJECT_NAME: &str = "AgentSession";

/// The longest session id accepted (bytes). Restate keys may be longer; ids this long are a
/// mistake, and they end up in every idempotency key.
const MAX_SESSION_ID: usize = 256;
/// The most events one `eventsSince` call returns.
const EVENTS_PAGE: u64 = 100;
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
    let (mut driver, machine) = DurableDriver::new(
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
