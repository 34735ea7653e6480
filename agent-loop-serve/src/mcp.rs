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
//!   hook's pause, a deferred tool) asks the client through **elicitation** (MCP 2025-06-18
//!   and later, form mode): one `elicitation/create` per waiting call, `{"approve": boolean,
//!   "reason": string}` for a verdict, `{"result": string}` for a deferred result; the answers
//!   resume the run. A client that declares no elicitation capability gets `isError: true`
//!   naming the calls that wait; a client that cancels the elicitation cancels the run.
//! - The client's `notifications/cancelled` for the call cancels the run.
//!
//! Protocol revisions: `rmcp` 3.11 speaks 2024-11-05 through 2026-07-28. The 2026-07-28
//! revision forbids server-to-client requests (elicitation among them) in favour of an
//! `input_required` result (`rmcp::model::InputRequiredResult`, multi-round-trip requests,
//! which rmcp 3.11 has); this server does not implement that flow yet, so it offers the
//! revisions up to **2025-11-25**, where a pause is an elicitation. Clients of 2026-07-28
//! negotiate down to 2025-11-25.
//!
//! Limits: each MCP session (one per `initialize` over HTTP) is rmcp's, closed after 5 minutes
//! idle (the crate sets no cap on how many are open at once); a request body past [`Limits::max_body_bytes`](crate::Limits::max_body_bytes) is
//! refused by the transport (413); a call while every run slot is taken answers
//! `isError: true` at once.

use std::borrow::Cow;
use std::sync::Arc;

use agent_loop::agent::{Resolutions, WaitsFor};
use agent_loop::{AgentEvent, Termination};
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, Peer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

use crate::AgentService;

/// The agent as an MCP server with one tool. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentMcpServer {
    service: AgentService,
    name: String,
    description: String,
}

/// The tool's name unless set.
pub const DEFAULT_TOOL_NAME: &str = "ask_agent";

impl AgentMcpServer {
    /// A server of `service`'s agent as the tool [`DEFAULT_TOOL_NAME`].
    pub fn new(service: &AgentService) -> Self {
        AgentMcpServer {
            service: service.clone(),
            name: DEFAULT_TOOL_NAME.to_owned(),
            description: "Gives the task to an agent and answers with its result.".to_owned(),
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
    pub fn router(&self, path: &str) -> axum::Router {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let server = self.clone();
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(self.service.current_limits().body_bytes());
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        axum::Router::new().route_service(path, service)
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

    /// Runs the agent on `task`, reporting progress to `peer` and asking it what a pause
    /// waits for; `Err` is the text of an error result.
    async fn run(
        &self,
        task: String,
        context: &RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let _slot = self.service.try_run_slot().ok_or_else(|| {
            format!(
                "the agent is busy: every run slot is taken ({} runs at once); try again later",
                self.service.current_limits().concurrent_runs()
            )
        })?;
        let mut agent = self
            .service
            .agent()
            .map_err(|e| format!("the agent could not be built: {e}"))?;
        let handle = agent.handle();
        let mut progress = Progress {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token().map(|t| json!(t)),
            count: 0,
        };
        let mut events = agent.run(task).boxed();
        loop {
            let event = tokio::select! {
                () = context.ct.cancelled() => {
                    handle.cancel();
                    return Err("cancelled by the client".to_owned());
                }
                event = events.next() => event,
            };
            let Some(event) = event else {
                return Err("the run ended without its outcome".to_owned());
            };
            let message = match &event {
                AgentEvent::TextDelta { text } => Some(text.clone()),
                AgentEvent::ToolCall { name, .. } => Some(format!("calling {name}")),
                AgentEvent::ToolProgress { message, .. } => Some(message.clone()),
                AgentEvent::ToolResult { name, is_error, .. } => Some(match is_error {
                    true => format!("{name} failed"),
                    false => format!("{name} done"),
                }),
                _ => None,
            };
            if let Some(message) = message {
                progress.send(message).await;
            }
            let AgentEvent::Finished(outcome) = event else {
                continue;
            };
            match outcome.termination {
                Termination::Completed => return Ok(outcome.final_text),
                Termination::Paused(paused) => {
                    let answers = tokio::select! {
                        () = context.ct.cancelled() => {
                            return Err("cancelled by the client".to_owned());
                        }
                        answers = ask(&context.peer, &paused) => answers?,
                    };
                    events = agent.resume(&paused, answers).boxed();
                }
                Termination::Error(e) => return Err(format!("the agent failed: {e}")),
                other => {
                    return Err(format!(
                        "the agent stopped before finishing: {other:?}; its text so far: {}",
                        outcome.final_text
                    ))
                }
            }
        }
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

/// Asks the client, one elicitation per waiting call, for what `paused` waits for.
async fn ask(
    peer: &Peer<RoleServer>,
    paused: &agent_loop::PausedRun,
) -> Result<Resolutions, String> {
    let pending = paused.pending();
    if peer.supported_elicitation_modes().is_empty() {
        return Err(format!(
            "the agent paused, waiting for {}; this client does not support elicitation, so \
             it cannot be asked",
            pending
                .iter()
                .map(|c| format!("{} (call {:?})", c.name, c.id))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut answers = Resolutions::new();
    for call in pending {
        let (message, schema) = match call.waits_for {
            WaitsFor::Approval => (
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
            _ => (
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
        let params: ElicitRequestParams = serde_json::from_value(params)
            .map_err(|e| format!("the elicitation could not be built: {e}"))?;
        let answer = peer
            .create_elicitation(params)
            .await
            .map_err(|e| format!("the client did not answer the elicitation: {e}"))?;
        let content = answer.content.unwrap_or(Value::Null);
        answers = match (answer.action, call.waits_for) {
            (ElicitationAction::Cancel, _) => {
                return Err("the run waited for an answer, and the user cancelled".to_owned())
            }
            (ElicitationAction::Accept, WaitsFor::Approval) if content["approve"] == true => {
                answers.approve(call.id)
            }
            (ElicitationAction::Accept, WaitsFor::Approval) => {
                let reason = content["reason"]
                    .as_str()
                    .filter(|r| !r.is_empty())
                    .unwrap_or("denied by the user");
                answers.deny(call.id, reason)
            }
            (ElicitationAction::Accept, _) => match content["result"].as_str() {
                Some(result) => answers.result(call.id, result),
                None => answers.error(call.id, "the user gave no result"),
            },
            (_, WaitsFor::Approval) => answers.deny(call.id, "declined by the user"),
            _ => answers.error(call.id, "declined by the user"),
        };
    }
    Ok(answers)
}

impl ServerHandler for AgentMcpServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .with_server_info(Implementation::new(
                "agent-loop-serve",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
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
        let result = match self.run(task.to_owned(), &context).await {
            Ok(answer) => CallToolResult::success(vec![ContentBlock::text(answer)]),
            Err(why) => CallToolResult::error(vec![ContentBlock::text(why)]),
        };
        Ok(result.into())
    }
}
