//! The agent as an MCP server: one tool whose input is the task and whose result is the
//! agent's answer, over stdio ([`AgentMcpServer::serve_stdio`]) or streamable HTTP
//! ([`AgentMcpServer::router`]), with the official Rust SDK's server side (`rmcp` 3.11).
//!
//! - The tool (`ask_agent` unless [`AgentMcpServer::tool`] names it otherwise) takes
//!   `{"task": "…"}` and answers with the run's final text; a run that fails or stops short
//!   answers with `isError: true` and why, which the calling model can read.
//! - When the call carries a `progressToken`, the run's text and its tools' calls, progress
//!   and results go out as `notifications/progress`, their `message` saying what happened
//!   (`progress` counts the notifications).
//! - A paused run (a tool in
//!   [`RunPolicy::require_approval`](agent_loop::agent::RunPolicy::require_approval), a
//!   hook's pause, a deferred tool) asks the client for what it waits for, in the mechanism of
//!   the protocol revision the request speaks (below). Either way the questions are forms:
//!   `{"approve": boolean, "reason": string}` for a verdict, `{"result": string}` for a
//!   deferred result; a client that declares no elicitation capability gets `isError: true`
//!   naming the calls that wait; a client that cancels the form cancels the run.
//! - The client's `notifications/cancelled` for the call cancels the run.
//!
//! Protocol revisions: the server offers every revision `rmcp` 3.11 speaks, 2024-11-05
//! through **2026-07-28**, and a pause takes the form of the one negotiated:
//!
//! | Revision | How a paused run asks |
//! |---|---|
//! | 2025-06-18, 2025-11-25 (`initialize`) | **elicitation**: one `elicitation/create` request to the client per waiting call, while the `tools/call` stays open; the answers resume the run and the call ends with its result |
//! | 2026-07-28 (`server/discover`, no sessions) | the **`input_required` result** (multi round-trip requests): the `tools/call` answers at once with `resultType: "input_required"`, one `elicitation/create` in `inputRequests` per waiting call (keyed by the call's id) and a `requestState`; the client retries the same `tools/call` with `inputResponses` (an elicitation result per key) and that `requestState`, and the run resumes |
//!
//! The 2026-07-28 revision forbids server-to-client requests, so there the run is parked
//! between the two requests: in this process's memory, at most [`MAX_PARKED_RUNS`] at once
//! (the oldest dropped first), holding no run slot; several server processes behind one
//! address need the retry routed to the process that parked the run. The `requestState` names the parked run
//! (128 bits from the OS's CSPRNG, not the run itself) and belongs to the principal whose call
//! parked it; one that names no parked run of the caller's (forged, already answered,
//! dropped, or another principal's) is refused with JSON-RPC invalid params. A retry whose `inputResponses`
//! lack an answer asks again (under a new `requestState`); one while every run slot is taken
//! answers `isError: true` and leaves the run parked under the same `requestState`, to retry.
//! A retry's `arguments` are not read: the run is the parked one. The official TypeScript SDK 1.32.2 speaks up to 2025-11-25 (it
//! gets elicitation); `rmcp`'s client with `ClientLifecycleMode::Discover` speaks 2026-07-28.
//!
//! Callers: over HTTP, the service's [authenticator](crate::AgentService::authenticate) names
//! the caller of every request (see [`AgentMcpServer::router`]); a session and a parked run
//! belong to the principal that made them, and another principal is told they do not exist.
//!
//! Limits: each MCP session (one per `initialize` over HTTP) is rmcp's, closed after 5 minutes
//! idle, at most [`MAX_SESSIONS`] open at once (the oldest closed first); a request body past [`Limits::max_body_bytes`](crate::Limits::max_body_bytes) is
//! refused by the transport (413); a call while every run slot is taken answers
//! `isError: true` at once.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use agent_loop::agent::{AgentHandle, PendingCall, Resolutions, WaitsFor};
use agent_loop::{Agent, AgentEvent, PausedRun, Termination};
use futures::stream::BoxStream;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, InitializeResult,
    InputRequest, InputRequests, InputRequiredResult, InputResponses, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, Peer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::{Owners, Principal, Refusal};
use crate::AgentService;

/// How many MCP sessions (over streamable HTTP) a router keeps, at most: past it the oldest is
/// closed (its client gets 404 and starts a new one, as the spec says).
pub const MAX_SESSIONS: usize = 1024;

/// How many runs paused on a 2026-07-28 `input_required` result are kept, waiting for the
/// client's retry, at most; past it the oldest is dropped (its `requestState` is then refused).
pub const MAX_PARKED_RUNS: usize = 256;

/// The agent as an MCP server with one tool. Cheap to clone (clones share the parked runs).
#[derive(Debug, Clone)]
pub struct AgentMcpServer {
    service: AgentService,
    name: String,
    description: String,
    parked: Arc<Mutex<Parked>>,
}

/// The tool's name unless set.
pub const DEFAULT_TOOL_NAME: &str = "ask_agent";

/// A run paused on an `input_required` result: its agent (holding the conversation) and what
/// it waits for.
struct ParkedRun {
    /// The id of the principal whose call parked it: only its retry resumes it.
    owner: String,
    agent: Agent,
    paused: PausedRun,
}

/// The parked runs by `requestState`, oldest first, at most [`MAX_PARKED_RUNS`].
#[derive(Default)]
struct Parked {
    runs: VecDeque<(String, ParkedRun)>,
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked")
            .field("runs", &self.runs.len())
            .finish()
    }
}

impl Parked {
    /// Keeps `run` under a fresh handle, dropping the oldest past the bound.
    fn park(&mut self, run: ParkedRun) -> String {
        let state = unguessable_id();
        self.keep(state.clone(), run);
        state
    }

    /// Keeps `run` under `state`, dropping the oldest past the bound.
    fn keep(&mut self, state: String, run: ParkedRun) {
        while self.runs.len() >= MAX_PARKED_RUNS {
            self.runs.pop_front();
        }
        self.runs.push_back((state, run));
    }

    /// Takes the run `principal` parked under `state`, if any (another principal's is left
    /// where it is, and not found).
    fn take(&mut self, state: &str, principal: &Principal) -> Option<ParkedRun> {
        let at = self
            .runs
            .iter()
            .position(|(s, run)| s == state && run.owner == principal.id())?;
        self.runs.remove(at).map(|(_, run)| run)
    }
}

/// A handle another client cannot guess: 128 bits from the OS's CSPRNG.
fn unguessable_id() -> String {
    crate::fresh_id("run_")
}

/// The caller of an MCP request: the principal the router's authenticator put in the HTTP
/// request (rmcp hands the request's head to the handler); over stdio, the one client that
/// started the process, [`Principal::local`].
fn principal_of(context: &RequestContext<RoleServer>) -> Principal {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .unwrap_or_else(Principal::local)
}

/// Where a stretch of a run ended.
enum Step {
    /// Its answer, or the text of an error result.
    Done(Result<String, String>),
    /// It paused for answers.
    Paused(Box<PausedRun>),
}

impl AgentMcpServer {
    /// A server of `service`'s agent as the tool [`DEFAULT_TOOL_NAME`].
    pub fn new(service: &AgentService) -> Self {
        AgentMcpServer {
            service: service.clone(),
            name: DEFAULT_TOOL_NAME.to_owned(),
            description: "Gives the task to an agent and answers with its result.".to_owned(),
            parked: Arc::default(),
        }
    }

    /// The tool's name and description (what the calling model reads).
    pub fn tool(mut self, name: impl Into<String>, description: impl Into<String>) -> Self {
        self.name = name.into();
        self.description = description.into();
        self
    }

    /// The streamable HTTP transport at `path` (e.g. `/mcp`), as an axum router. Each MCP
    /// session gets its own handler; requests are bounded by the service's body limit, and
    /// only loopback `Host` headers are taken (rmcp's DNS-rebinding guard; put the server
    /// behind a proxy that sets them to serve further).
    ///
    /// Every request is first given to the service's
    /// [authenticator](crate::AgentService::authenticate); a refused one gets 401 (or 403)
    /// with `WWW-Authenticate: Bearer error="invalid_token", error_description="…"`, as the
    /// MCP authorization spec asks. A session belongs to the principal that opened it: a
    /// request naming another principal's session (`Mcp-Session-Id`) gets 404, as an unknown
    /// session does, and at most [`MAX_SESSIONS`] are open at once (the oldest closed first).
    /// `DELETE` of a session answers 200 (rmcp's own answer is 202, which the Python `mcp`
    /// client reports as a failed termination).
    pub fn router(&self, path: &str) -> axum::Router {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::session::SessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let server = self.clone();
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(self.service.current_limits().body_bytes());
        let sessions = Arc::new(LocalSessionManager::default());
        let service =
            StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
        let owners = Arc::new(Mutex::new(Owners::new(MAX_SESSIONS)));
        let router = axum::Router::new()
            .route_service(path, service)
            .route_layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let (owners, sessions) = (owners.clone(), sessions.clone());
                    async move {
                        let lock = || owners.lock().unwrap_or_else(|e| e.into_inner());
                        let principal = request
                            .extensions()
                            .get::<Principal>()
                            .cloned()
                            .unwrap_or_else(Principal::local);
                        let session = request
                            .headers()
                            .get(SESSION_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        if let Some(id) = &session {
                            if !lock().is_owned_by(id, &principal) {
                                return session_not_found();
                            }
                        }
                        let delete = request.method() == axum::http::Method::DELETE;
                        let mut response = next.run(request).await;
                        match &session {
                            None => {
                                let opened = response
                                    .headers()
                                    .get(SESSION_HEADER)
                                    .and_then(|v| v.to_str().ok());
                                if let Some(opened) = opened {
                                    let closed = lock().insert(opened.to_owned(), &principal);
                                    for id in closed {
                                        let sessions = sessions.clone();
                                        tokio::spawn(async move {
                                            let _ = sessions.close_session(&id.into()).await;
                                        });
                                    }
                                }
                            }
                            Some(id) if delete && response.status().is_success() => {
                                lock().remove(id);
                                if response.status() == axum::http::StatusCode::ACCEPTED {
                                    *response.status_mut() = axum::http::StatusCode::OK;
                                }
                            }
                            Some(_) => {}
                        }
                        response
                    }
                },
            ));
        crate::auth::guard(router, self.service.access().clone(), refused)
    }

    /// Serves one client over this process's standard input and output until it closes.
    pub async fn serve_stdio(self) -> Result<(), std::io::Error> {
        let running = self
            .serve(rmcp::transport::io::stdio())
            .await
            .map_err(std::io::Error::other)?;
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok(())
    }

    /// The tool's definition.
    fn definition(&self) -> Tool {
        let schema = json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the agent should do."}},
            "required": ["task"],
        });
        let schema = match schema {
            Value::Object(map) => Arc::new(map),
            _ => Arc::default(),
        };
        Tool::new(self.name.clone(), self.description.clone(), schema)
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Parked> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A run slot, or the text of the error result saying the agent is busy.
    fn slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
        self.service.try_run_slot().ok_or_else(|| {
            format!(
                "the agent is busy: every run slot is taken ({} runs at once); try again later",
                self.service.current_limits().concurrent_runs()
            )
        })
    }

    /// Runs the agent on `task`, reporting progress to the client and asking it what a pause
    /// waits for, by elicitation (before 2026-07-28) or an `input_required` result.
    async fn run(&self, task: String, context: &RequestContext<RoleServer>) -> CallToolResponse {
        let slot = match self.slot() {
            Ok(slot) => slot,
            Err(why) => return error_result(why),
        };
        let mut agent = match self.service.agent() {
            Ok(agent) => agent,
            Err(e) => return error_result(format!("the agent could not be built: {e}")),
        };
        let events = agent.run(task).boxed();
        let step = drive(events, &agent.handle(), context).await;
        self.go_on(agent, step, slot, context).await
    }

    /// Answers a 2026-07-28 retry: resumes the run parked under `state` with the client's
    /// `responses`.
    async fn retry(
        &self,
        state: &str,
        responses: Option<&InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let slot = self.slot();
        let principal = principal_of(context);
        let Some(ParkedRun {
            owner,
            mut agent,
            paused,
        }) = self.parked().take(state, &principal)
        else {
            return Err(McpError::invalid_params(
                "requestState names no paused run here: it was answered already, dropped, or \
                 never issued by this server",
                None,
            ));
        };
        let slot = match slot {
            Ok(slot) => slot,
            Err(why) => {
                // Parked again under the same state: the same retry works once a slot is free.
                self.parked().keep(
                    state.to_owned(),
                    ParkedRun {
                        owner,
                        agent,
                        paused,
                    },
                );
                return Ok(error_result(why));
            }
        };
        let waiting: Vec<_> = paused
            .pending()
            .into_iter()
            .map(|c| (c.id, c.waits_for))
            .collect();
        let answers = match answers_from(&waiting, responses) {
            Answers::All(answers) => answers,
            Answers::Missing => return Ok(self.park(agent, paused, context)),
            Answers::Cancelled => {
                return Ok(error_result(
                    "the run waited for an answer, and the user cancelled".to_owned(),
                ))
            }
        };
        let events = agent.resume(&paused, answers).boxed();
        let step = drive(events, &agent.handle(), context).await;
        Ok(self.go_on(agent, step, slot, context).await)
    }

    /// Takes a run from `step` to its end: asks for what each pause waits for and resumes,
    /// or (2026-07-28) parks it and answers `input_required`.
    async fn go_on(
        &self,
        mut agent: Agent,
        mut step: Step,
        slot: tokio::sync::OwnedSemaphorePermit,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        loop {
            let paused = match step {
                Step::Done(Ok(answer)) => {
                    return CallToolResult::success(vec![ContentBlock::text(answer)]).into()
                }
                Step::Done(Err(why)) => return error_result(why),
                Step::Paused(paused) => paused,
            };
            if let Err(why) = can_ask(&paused, context) {
                return error_result(why);
            }
            if speaks_input_required(context) {
                drop(slot);
                return self.park(agent, *paused, context);
            }
            let answers = tokio::select! {
                () = context.ct.cancelled() => {
                    return error_result("cancelled by the client".to_owned());
                }
                answers = ask(&context.peer, &paused) => answers,
            };
            let answers = match answers {
                Ok(answers) => answers,
                Err(why) => return error_result(why),
            };
            let events = agent.resume(&paused, answers).boxed();
            step = drive(events, &agent.handle(), context).await;
        }
    }

    /// Parks `agent` paused at `paused` and answers with the `input_required` result asking
    /// for what it waits for.
    fn park(
        &self,
        agent: Agent,
        paused: PausedRun,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let requests = input_requests(&paused);
        match requests {
            Ok(requests) => {
                let owner = principal_of(context).id().to_owned();
                let state = self.parked().park(ParkedRun {
                    owner,
                    agent,
                    paused,
                });
                InputRequiredResult::new(Some(requests), Some(state)).into()
            }
            Err(why) => error_result(why),
        }
    }
}

/// The header naming an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// What rmcp answers for a session it does not know; the same for another principal's.
fn session_not_found() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::NOT_FOUND,
        "Not Found: Session not found",
    )
        .into_response()
}

/// A refused caller's answer: 401 (with the `WWW-Authenticate` the guard adds) or 403, and a
/// JSON body saying why (RFC 6750's error names).
fn refused(refusal: &Refusal) -> axum::response::Response {
    use axum::response::IntoResponse;
    let error = match refusal.kind() {
        crate::auth::RefusalKind::Unauthenticated => "invalid_token",
        _ => "insufficient_scope",
    };
    let body = json!({"error": error, "error_description": refusal.message()});
    (refusal.status(), axum::Json(body)).into_response()
}

fn error_result(why: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(why)]).into()
}

/// Whether the request speaks 2026-07-28 or later, where a pause is an `input_required`
/// result rather than a request to the client.
fn speaks_input_required(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// `Err` naming the waiting calls when the client declares no elicitation capability (per
/// request in 2026-07-28, at `initialize` before).
fn can_ask(paused: &PausedRun, context: &RequestContext<RoleServer>) -> Result<(), String> {
    let can = match context.meta.client_capabilities() {
        Some(capabilities) if speaks_input_required(context) => capabilities.elicitation.is_some(),
        _ => !context.peer.supported_elicitation_modes().is_empty(),
    };
    if can {
        return Ok(());
    }
    Err(format!(
        "the agent paused, waiting for {}; this client does not support elicitation, so it \
         cannot be asked",
        paused
            .pending()
            .iter()
            .map(|c| format!("{} (call {:?})", c.name, c.id))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Follows a run's `events` to where it ends or pauses, reporting progress to the client;
/// the client's cancellation cancels it.
async fn drive(
    mut events: BoxStream<'static, AgentEvent>,
    handle: &AgentHandle,
    context: &RequestContext<RoleServer>,
) -> Step {
    let mut progress = Progress {
        peer: context.peer.clone(),
        token: context.meta.get_progress_token().map(|t| json!(t)),
        count: 0,
    };
    loop {
        let event = tokio::select! {
            () = context.ct.cancelled() => {
                handle.cancel();
                return Step::Done(Err("cancelled by the client".to_owned()));
            }
            event = events.next() => event,
        };
        let Some(event) = event else {
            return Step::Done(Err("the run ended without its outcome".to_owned()));
        };
        let message = match &event {
            AgentEvent::TextDelta { text } => Some(text.clone()),
            AgentEvent::ToolCall { name, .. } => Some(format!("calling {name}")),
            AgentEvent::ToolProgress { message, .. } => Some(message.clone()),
            AgentEvent::ToolResult { name, is_error, .. } => Some(match is_error {
                true => format!("{name} failed"),
                false => format!("{name} done"),
            }),
            // Progress is a line of what the agent does: its answer's text and its tools.
            // The rest (turns, reasoning, call arguments, retries, compaction, sub-agents,
            // fallbacks, handoffs, steering, rate limits) is how it works, and the end is
            // the call's result.
            AgentEvent::TurnStart { .. }
            | AgentEvent::ThinkingDelta { .. }
            | AgentEvent::ToolCallStart { .. }
            | AgentEvent::ToolInputDelta { .. }
            | AgentEvent::Retry { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::TurnEnd { .. }
            | AgentEvent::SubAgent { .. }
            | AgentEvent::Fallback { .. }
            | AgentEvent::Handoff { .. }
            | AgentEvent::Steered { .. }
            | AgentEvent::Finished(_)
            | AgentEvent::RateLimits(_) => None,
        };
        if let Some(message) = message {
            progress.send(message).await;
        }
        let AgentEvent::Finished(outcome) = event else {
            continue;
        };
        return match outcome.termination {
            Termination::Completed => Step::Done(Ok(outcome.final_text)),
            Termination::Paused(paused) => Step::Paused(paused),
            Termination::Error(e) => Step::Done(Err(format!("the agent failed: {e}"))),
            // Stopped short of an answer: the call fails, with the text so far.
            other @ (Termination::MaxTurns
            | Termination::Cancelled
            | Termination::StoppedAfterTurn
            | Termination::TokenBudget { .. }
            | Termination::CostBudget { .. }
            | Termination::ToolFailures { .. }
            | Termination::RepeatedToolCall { .. }
            | Termination::StoppedByHook { .. }
            | Termination::Refused
            | Termination::MaxTokens
            | Termination::InvalidOutput { .. }) => Step::Done(Err(format!(
                "the agent stopped before finishing: {other:?}; its text so far: {}",
                outcome.final_text
            ))),
        };
    }
}

/// Progress notifications of one call (none without a token).
struct Progress {
    peer: Peer<RoleServer>,
    token: Option<Value>,
    count: u64,
}

impl Progress {
    async fn send(&mut self, message: String) {
        let Some(token) = &self.token else {
            return;
        };
        self.count += 1;
        let param = json!({"progressToken": token, "progress": self.count, "message": message});
        if let Ok(param) = serde_json::from_value::<ProgressNotificationParam>(param) {
            // A client gone away is noticed by the call's cancellation, not here.
            let _ = self.peer.notify_progress(param).await;
        }
    }
}

/// The form asking for what `call` waits for.
fn question(call: &PendingCall) -> Result<ElicitRequestParams, String> {
    let (message, schema) = match (&call.question, call.waits_for) {
        // A tool asked: its question, the answer as text (an elicitation's form takes flat
        // fields only, whatever shape the tool's own schema has).
        (Some(asked), _) => (
            asked.prompt.clone(),
            json!({"type": "object",
                "properties": {"result": {"type": "string", "title": "Answer"}},
                "required": ["result"]}),
        ),
        (None, WaitsFor::Approval) => (
            format!(
                "The agent wants to call {} with {}. Approve?",
                call.name, call.input
            ),
            json!({"type": "object",
                "properties": {
                    "approve": {"type": "boolean", "title": "Approve",
                        "description": "Let the call run."},
                    "reason": {"type": "string", "title": "Reason",
                        "description": "Why not (told to the agent)."}},
                "required": ["approve"]}),
        ),
        (None, _) => (
            format!(
                "The agent waits for the result of {} with {}.",
                call.name, call.input
            ),
            json!({"type": "object",
                "properties": {"result": {"type": "string", "title": "Result"}},
                "required": ["result"]}),
        ),
    };
    let params = json!({"mode": "form", "message": message, "requestedSchema": schema});
    serde_json::from_value(params).map_err(|e| format!("the elicitation could not be built: {e}"))
}

/// What the client's `answer` to the question about the call `id` (waiting for `waits_for`)
/// adds to `answers`; `None` when the user cancelled.
fn resolve(
    answers: Resolutions,
    id: &str,
    waits_for: WaitsFor,
    answer: ElicitResult,
) -> Option<Resolutions> {
    let content = answer.content.unwrap_or(Value::Null);
    Some(match (answer.action, waits_for) {
        (ElicitationAction::Cancel, _) => return None,
        (ElicitationAction::Accept, WaitsFor::Approval) if content["approve"] == true => {
            answers.approve(id)
        }
        (ElicitationAction::Accept, WaitsFor::Approval) => {
            let reason = content["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
                .unwrap_or("denied by the user");
            answers.deny(id, reason)
        }
        (ElicitationAction::Accept, _) => match content["result"].as_str() {
            Some(result) => answers.result(id, result),
            None => answers.error(id, "the user gave no result"),
        },
        (_, WaitsFor::Approval) => answers.deny(id, "declined by the user"),
        _ => answers.error(id, "declined by the user"),
    })
}

/// Asks the client, one elicitation per waiting call, for what `paused` waits for.
async fn ask(peer: &Peer<RoleServer>, paused: &PausedRun) -> Result<Resolutions, String> {
    let mut answers = Resolutions::new();
    for call in paused.pending() {
        let answer = peer
            .create_elicitation(question(&call)?)
            .await
            .map_err(|e| format!("the client did not answer the elicitation: {e}"))?;
        answers = resolve(answers, &call.id, call.waits_for, answer)
            .ok_or("the run waited for an answer, and the user cancelled")?;
    }
    Ok(answers)
}

/// The `inputRequests` of an `input_required` result: one elicitation per waiting call, keyed
/// by the call's id.
fn input_requests(paused: &PausedRun) -> Result<InputRequests, String> {
    paused
        .pending()
        .iter()
        .map(|call| {
            let request = InputRequest::Elicitation(ElicitRequest::new(question(call)?));
            Ok((call.id.clone(), request))
        })
        .collect()
}

/// What a 2026-07-28 retry's `inputResponses` say.
#[derive(Debug)]
enum Answers {
    /// An answer for every waiting call.
    All(Resolutions),
    /// Some call has no answer (or one that is not an elicitation result): ask again.
    Missing,
    /// The user cancelled a question.
    Cancelled,
}

/// Reads the client's `responses` to the questions about the `waiting` calls (id, what it
/// waits for), in order.
fn answers_from(waiting: &[(String, WaitsFor)], responses: Option<&InputResponses>) -> Answers {
    let mut answers = Resolutions::new();
    for (id, waits_for) in waiting {
        let answer = responses
            .and_then(|r| r.get(id))
            .and_then(|v| ElicitResult::deserialize(v).ok());
        let Some(answer) = answer else {
            return Answers::Missing;
        };
        answers = match resolve(answers, id, *waits_for, answer) {
            Some(answers) => answers,
            None => return Answers::Cancelled,
        };
    }
    Answers::All(answers)
}

impl ServerHandler for AgentMcpServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            .with_server_info(Implementation::new(
                "agent-loop-serve",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![self.definition()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == self.name).then(|| self.definition())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != self.name {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}: this server has {:?}",
                    request.name, self.name
                ),
                None,
            ));
        }
        if let Some(state) = &request.request_state {
            return self
                .retry(state, request.input_responses.as_ref(), &context)
                .await;
        }
        let task = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("task"))
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty());
        let Some(task) = task else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "`task` is required: a non-empty string saying what the agent should do",
            )])
            .into());
        };
        Ok(self.run(task.to_owned(), &context).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_loop::agent::Resolution;
    use proptest::prelude::*;

    /// A client's response: an elicitation result of any action with any verdict, or junk.
    fn response() -> impl Strategy<Value = Value> {
        prop_oneof![
            (
                prop::sample::select(vec!["accept", "decline", "cancel"]),
                prop::option::of(any::<bool>()),
                prop::option::of("[a-z ]{0,8}"),
            )
                .prop_map(|(action, approve, text)| {
                    json!({"action": action,
                        "content": {"approve": approve, "reason": text, "result": text}})
                }),
            Just(json!({"action": "maybe"})),
            Just(json!("accept")),
            Just(json!(null)),
        ]
    }

    proptest! {
        /// Any responses to any waiting calls: every call answered (none cancelled) resumes
        /// with exactly one resolution per call, an approval only where the user accepted with
        /// `approve: true`; a call left without a readable answer asks again; a cancel cancels.
        #[test]
        fn the_responses_of_a_retry_answer_each_waiting_call_or_ask_again(
            waiting in prop::collection::btree_map(
                "c[0-9]", prop::sample::select(vec![WaitsFor::Approval, WaitsFor::Result]), 1..4),
            responses in prop::collection::btree_map("c[0-9]", response(), 0..6),
        ) {
            let waiting: Vec<(String, WaitsFor)> = waiting.into_iter().collect();
            let read = |id: &str| {
                responses.get(id).and_then(|v| ElicitResult::deserialize(v).ok())
            };
            // The first call, in order, without a readable answer or with a cancel decides.
            let first_stop = waiting.iter().find_map(|(id, _)| match read(id) {
                None => Some("missing"),
                Some(r) if r.action == ElicitationAction::Cancel => Some("cancelled"),
                Some(_) => None,
            });
            match (answers_from(&waiting, Some(&responses)), first_stop) {
                (Answers::Missing, Some("missing")) | (Answers::Cancelled, Some("cancelled")) => {}
                (Answers::All(answers), None) => {
                    prop_assert_eq!(answers.len(), waiting.len());
                    for (id, waits_for) in &waiting {
                        let r = read(id).unwrap();
                        let approved = *waits_for == WaitsFor::Approval
                            && r.action == ElicitationAction::Accept
                            && r.content.as_ref().is_some_and(|c| c["approve"] == true);
                        prop_assert_eq!(
                            answers.get(id) == Some(&Resolution::Approve),
                            approved
                        );
                    }
                }
                (got, expected) => prop_assert!(false, "{got:?} where {expected:?}"),
            }
            // No responses at all: asked again.
            prop_assert!(matches!(answers_from(&waiting, None), Answers::Missing));
        }
    }
}
