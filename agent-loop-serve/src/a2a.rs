//! An [A2A](https://a2a-protocol.org) 1.0 server, its JSON-RPC binding: the agent card at
//! `/.well-known/agent-card.json` and one JSON-RPC endpoint (`POST /a2a`) with the methods
//! `SendMessage`, `SendStreamingMessage` (Server-Sent Events), `GetTask` and `CancelTask`.
//! (A2A 1.0 names its JSON-RPC methods after the gRPC service's. The pre-1.0 names
//! `message/send`, `message/stream`, `tasks/get` and `tasks/cancel` are taken too, as aliases
//! of those four: the same params, the same 1.0-shaped answers; the card and this
//! documentation name only the 1.0 methods.)
//!
//! Each message the client sends without a `taskId` starts a task: a run of the agent in the
//! session named by the message's `contextId` (one is made when it has none), kept in the
//! service's [session store](crate::AgentService::sessions), so the messages of one context
//! are one conversation.
//!
//! Callers: `POST /a2a` is behind the service's
//! [authenticator](crate::AgentService::authenticate) (HTTP 401 when refused; the card stays
//! public and declares the scheme). A task belongs to the principal that started it: another
//! principal's `GetTask`, `CancelTask` or message to it gets -32001, as for a task that does
//! not exist. A context too: the session's key in the store is
//! `a2a:{hex SHA-256 of the principal's id}:{contextId}`, so a `contextId` a client chooses
//! (at most [`MAX_CONTEXT_ID_BYTES`]) names a conversation of its own, whatever another caller
//! named. Task and context ids the server makes are 128 bits from the OS's CSPRNG.
//!
//! `CancelTask` answers once the run has stopped: no tool of it starts after the answer, and a
//! stream of the task ends with the one terminal state, `TASK_STATE_CANCELED`. The answer is
//! streamed as the artifact `answer`: a turn's first chunk has `append: false` (a new turn's
//! text replaces the turn before's), the others `append: true`, and the run's end sends
//! `lastChunk: true` (an empty part, or the whole answer when what was streamed differs from
//! it), so the joined chunks are what `GetTask` gives. The task's states follow the run:
//!
//! ```text
//!  SendMessage ─► SUBMITTED ─► WORKING ─┬─► COMPLETED        (the answer is the artifact "answer")
//!                                       ├─► FAILED           (the status message says why)
//!                                       ├─► CANCELED         (CancelTask)
//!                                       └─► INPUT_REQUIRED ──► a message with the taskId answers
//!                                             (a paused run)     it: WORKING again, the run resumed
//! ```
//!
//! A paused run (an approval, a deferred tool's result) is `TASK_STATE_INPUT_REQUIRED`, its
//! status message naming the calls that wait. The client's next message to the task answers
//! them: `approve` (or `yes`, `ok`) approves every waiting call, any other text denies them
//! with that text as the reason; a call that waits for its result gets the text as its result.
//! The pause itself is kept in the session store, so another process sharing the store can
//! take the answer; the task records (state, answer, status message) are this process's, at
//! most [`MAX_TASKS`] of them (the oldest finished ones are forgotten first).
//!
//! Not served: push notifications, `ListTasks`, `SubscribeToTask`, the extended card, and
//! `configuration.returnImmediately` and `historyLength` (a `SendMessage` answers once the
//! task stops: completed, failed, canceled or input-required; the task's history holds the
//! user's messages to it).
//!
//! Errors are JSON-RPC's and A2A's codes: -32700 (not JSON), -32600 (not a JSON-RPC request),
//! -32601 (unknown method), -32602 (bad params: no message, no text, a task that takes no
//! message), -32001 (no such task), -32002 (a task that is over cannot be cancelled), -32009
//! (an `A2A-Version` other than 1.x), -32603 (every run slot taken, or the agent could not
//! start). A body past [`Limits::max_body_bytes`](crate::Limits::max_body_bytes) is refused
//! with HTTP 413.
//!
//! ```sh
//! curl -s http://127.0.0.1:8080/.well-known/agent-card.json
//! curl -s http://127.0.0.1:8080/a2a -H 'content-type: application/json' -d '{"jsonrpc": "2.0",
//!   "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m1",
//!   "role": "ROLE_USER", "parts": [{"text": "What is 2+2?"}]}}}'
//! ```

pub mod client;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use agent_loop::agent::{AgentHandle, Resolutions, WaitsFor};
use agent_loop::{AgentEvent, PausedRun, Termination};
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use crate::auth::{Access, Principal, Refusal};
use crate::AgentService;

/// The most task records a server keeps.
pub const MAX_TASKS: usize = 1024;

/// The longest `contextId` a client may choose, in bytes.
pub const MAX_CONTEXT_ID_BYTES: usize = 256;

/// What the agent card says of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentCard {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The URL clients reach the server at (`http://host:port`, no trailing slash): the card
    /// names `{url}/a2a` as its JSON-RPC interface.
    pub url: String,
    /// The agent's version.
    pub version: String,
    /// The card's `securitySchemes` and `securityRequirements` (A2A 1.0 JSON), when set with
    /// [`security`](Self::security). Unset, a service with an
    /// [authenticator](crate::AgentService::authenticate) declares HTTP bearer
    /// authentication: `{"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}`,
    /// required by `[{"schemes": {"bearer": {"list": []}}}]`.
    pub security: Option<(Value, Value)>,
}

impl AgentCard {
    /// A card for the agent `name` doing `description`, served at `url`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        url: impl Into<String>,
    ) -> Self {
        AgentCard {
            name: name.into(),
            description: description.into(),
            url: url.into().trim_end_matches('/').to_owned(),
            version: "1.0.0".to_owned(),
            security: None,
        }
    }

    /// The schemes the card declares (`securitySchemes`, a map of names to A2A 1.0
    /// `SecurityScheme`s) and which of them a request needs (`securityRequirements`): for an
    /// authenticator that takes something else than a bearer token (an API key header,
    /// OAuth 2.0 …).
    ///
    /// ```
    /// use agent_loop_serve::a2a::AgentCard;
    /// use serde_json::json;
    /// let card = AgentCard::new("adder", "Adds.", "http://127.0.0.1:8080").security(
    ///     json!({"key": {"apiKeySecurityScheme": {"location": "header", "name": "x-api-key"}}}),
    ///     json!([{"schemes": {"key": {"list": []}}}]),
    /// );
    /// assert_eq!(card.to_json()["securityRequirements"][0]["schemes"]["key"]["list"], json!([]));
    /// ```
    pub fn security(mut self, schemes: Value, requirements: Value) -> Self {
        self.security = Some((schemes, requirements));
        self
    }

    /// The card's JSON (A2A 1.0 `AgentCard`).
    pub fn to_json(&self) -> Value {
        let mut card = json!({
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "supportedInterfaces": [{
                "url": format!("{}/a2a", self.url),
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
            }],
            "capabilities": {"streaming": true, "pushNotifications": false},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{
                "id": "ask",
                "name": self.name,
                "description": self.description,
                "tags": ["agent"],
            }],
        });
        if let Some((schemes, requirements)) = &self.security {
            card["securitySchemes"] = schemes.clone();
            card["securityRequirements"] = requirements.clone();
        }
        card
    }
}

/// The A2A server's router: `GET /.well-known/agent-card.json` and `POST /a2a`.
///
/// `POST /a2a` is behind the service's [authenticator](crate::AgentService::authenticate):
/// a refused caller gets HTTP 401 (or 403), as A2A says of authentication failures, with a
/// JSON-RPC error body (code -32600, the message saying why). The card stays public, and with
/// an authenticator it declares the scheme (see [`AgentCard::security`]), which the
/// official clients read to send their credentials (`a2a-sdk`'s `AuthInterceptor`).
pub fn router(service: &AgentService, mut card: AgentCard) -> Router {
    if card.security.is_none() && matches!(service.access(), Access::Authenticated(_)) {
        card.security = Some((
            json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer",
                "description": "Authorization: Bearer <token>"}}}),
            json!([{"schemes": {"bearer": {"list": []}}}]),
        ));
    }
    let state = A2a {
        service: service.clone(),
        card: Arc::new(card.to_json()),
        tasks: Arc::new(Mutex::new(Tasks::default())),
    };
    let rpc_route = Router::new()
        .route("/a2a", post(rpc))
        .with_state(state.clone());
    let rpc_route = crate::auth::guard(rpc_route, service.access().clone(), refused);
    Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .with_state(state)
        .merge(rpc_route)
}

/// A refused caller's answer: the HTTP status, and a JSON-RPC error saying why.
fn refused(refusal: &Refusal) -> Response {
    let error = RpcError(-32600, refusal.message().to_owned());
    (refusal.status(), axum::Json(rpc_error(&Value::Null, error))).into_response()
}

#[derive(Clone)]
struct A2a {
    service: AgentService,
    card: Arc<Value>,
    tasks: Arc<Mutex<Tasks>>,
}

/// A task's state, as A2A names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl TaskState {
    fn name(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    fn is_over(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled
        )
    }
}

/// What the server keeps of a task.
struct TaskRecord {
    /// The id of the principal that made it: only it may read, answer or cancel it.
    owner: String,
    context_id: String,
    state: TaskState,
    /// The status message's text (why it failed, what it waits for).
    status: Option<String>,
    /// The answer so far.
    answer: String,
    /// The user's messages to the task, as sent.
    history: Vec<Value>,
    /// The run in flight (to cancel it, and to wait for it to stop).
    run: Option<RunControl>,
}

/// A task's run in flight, shared by the task that drives it and the `CancelTask` that stops
/// it: the cancel request, the agent's handle, and whether the run has stopped.
///
/// ```text
///  CancelTask: request_cancel() ──► the run's driver stops forwarding events, the agent
///              wait_stopped()          is cancelled; its events end (no tool starts after),
///                   ▲                  the record becomes CANCELED, then mark_stopped()
///                   └──────────────────────────────────────────────┘
///  CancelTask answers; the stream then sends the one terminal status.
/// ```
#[derive(Clone)]
struct RunControl {
    inner: Arc<RunControlInner>,
}

struct RunControlInner {
    cancel: watch::Sender<bool>,
    stopped: watch::Sender<bool>,
    handle: Mutex<Option<AgentHandle>>,
}

impl RunControl {
    fn new() -> Self {
        RunControl {
            inner: Arc::new(RunControlInner {
                cancel: watch::channel(false).0,
                stopped: watch::channel(false).0,
                handle: Mutex::new(None),
            }),
        }
    }

    fn handle(&self) -> std::sync::MutexGuard<'_, Option<AgentHandle>> {
        self.inner
            .handle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The agent's handle, once it runs (cancelled at once when a cancel came first).
    fn set_handle(&self, handle: AgentHandle) {
        // Under the handle's lock, as in `request_cancel`: a cancel is never missed.
        let mut slot = self.handle();
        if *self.inner.cancel.borrow() {
            handle.cancel();
        }
        *slot = Some(handle);
    }

    fn request_cancel(&self) {
        let slot = self.handle();
        self.inner.cancel.send_replace(true);
        if let Some(handle) = slot.as_ref() {
            handle.cancel();
        }
    }

    fn is_cancelled(&self) -> bool {
        *self.inner.cancel.borrow()
    }

    /// Resolves once a cancel is requested.
    async fn cancelled(&self) {
        let mut cancel = self.inner.cancel.subscribe();
        let _ = cancel.wait_for(|c| *c).await;
    }

    fn mark_stopped(&self) {
        self.inner.stopped.send_replace(true);
    }

    /// Resolves once the run has stopped.
    async fn wait_stopped(&self) {
        let mut stopped = self.inner.stopped.subscribe();
        let _ = stopped.wait_for(|s| *s).await;
    }
}

/// Marks the run stopped when its driver ends, however it ends.
struct StoppedOnDrop(RunControl);

impl Drop for StoppedOnDrop {
    fn drop(&mut self) {
        self.0.mark_stopped();
    }
}

/// The task records, the oldest first.
#[derive(Default)]
struct Tasks {
    records: HashMap<String, TaskRecord>,
    order: VecDeque<String>,
}

impl Tasks {
    /// Adds a record, forgetting the oldest finished ones past [`MAX_TASKS`]; `false` when
    /// every record is of a task still going.
    fn insert(&mut self, id: String, record: TaskRecord) -> bool {
        while self.records.len() >= MAX_TASKS {
            let over = self.order.iter().position(|id| {
                self.records
                    .get(id)
                    .is_none_or(|r| r.state.is_over() || r.state == TaskState::InputRequired)
            });
            match over {
                Some(i) => {
                    if let Some(id) = self.order.remove(i) {
                        self.records.remove(&id);
                    }
                }
                None => return false,
            }
        }
        self.order.push_back(id.clone());
        self.records.insert(id, record);
        true
    }
}

fn lock(tasks: &Mutex<Tasks>) -> std::sync::MutexGuard<'_, Tasks> {
    tasks.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An A2A message of the agent with this text.
fn agent_message(task_id: &str, context_id: &str, text: &str) -> Value {
    json!({"messageId": crate::fresh_id("msg-"), "role": "ROLE_AGENT", "taskId": task_id,
        "contextId": context_id, "parts": [{"text": text}]})
}

fn status_json(task_id: &str, record: &TaskRecord) -> Value {
    let mut status = json!({"state": record.state.name()});
    if let Some(text) = &record.status {
        status["message"] = agent_message(task_id, &record.context_id, text);
    }
    status
}

fn task_json(task_id: &str, record: &TaskRecord) -> Value {
    let mut task = json!({"id": task_id, "contextId": record.context_id,
        "status": status_json(task_id, record), "history": record.history});
    if !record.answer.is_empty() {
        task["artifacts"] =
            json!([{"artifactId": "answer", "name": "answer", "parts": [{"text": record.answer}]}]);
    }
    task
}

/// A JSON-RPC error: its code and message.
#[derive(Debug)]
struct RpcError(i64, String);

impl RpcError {
    fn params(message: impl Into<String>) -> Self {
        RpcError(-32602, message.into())
    }
}

fn rpc_error(id: &Value, error: RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.0, "message": error.1}})
}

fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

async fn agent_card(State(a2a): State<A2a>) -> Response {
    axum::Json(a2a.card.as_ref().clone()).into_response()
}

/// `POST /a2a`: one JSON-RPC request.
async fn rpc(
    State(a2a): State<A2a>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = a2a.service.current_limits().body_bytes();
    let Ok(body) = axum::body::to_bytes(body, limit).await else {
        let error = RpcError(-32600, format!("the request is larger than {limit} bytes"));
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            axum::Json(rpc_error(&Value::Null, error)),
        )
            .into_response();
    };
    let version = headers.get("a2a-version").and_then(|v| v.to_str().ok());
    let Request { id, method, params } = match parse(&body, version) {
        Ok(request) => request,
        Err((id, error)) => return axum::Json(rpc_error(&id, error)).into_response(),
    };
    let result = match method_1_0(&method) {
        "SendMessage" => match a2a.send(&params, &principal).await {
            Ok(mut run) => {
                while run.events.recv().await.is_some() {}
                let tasks = lock(&a2a.tasks);
                match tasks.records.get(&run.task_id) {
                    Some(record) => Ok(json!({"task": task_json(&run.task_id, record)})),
                    None => Err(RpcError(-32001, "the task was forgotten".to_owned())),
                }
            }
            Err(e) => Err(e),
        },
        "SendStreamingMessage" => {
            return match a2a.send(&params, &principal).await {
                Ok(run) => sse(id, run),
                Err(e) => axum::Json(rpc_error(&id, e)).into_response(),
            }
        }
        "GetTask" => a2a.get(&params, &principal),
        "CancelTask" => a2a.cancel(&params, &principal).await,
        other => Err(RpcError(
            -32601,
            format!(
                "method {other:?} not found: this server has SendMessage, \
                 SendStreamingMessage, GetTask and CancelTask"
            ),
        )),
    };
    let response = match result {
        Ok(result) => rpc_result(&id, result),
        Err(e) => rpc_error(&id, e),
    };
    axum::Json(response).into_response()
}

/// The A2A 1.0 name of `method`: a pre-1.0 name (`message/send`, `message/stream`,
/// `tasks/get`, `tasks/cancel`) is taken as an alias of its 1.0 method; any other name is
/// itself.
fn method_1_0(method: &str) -> &str {
    match method {
        "message/send" => "SendMessage",
        "message/stream" => "SendStreamingMessage",
        "tasks/get" => "GetTask",
        "tasks/cancel" => "CancelTask",
        other => other,
    }
}

/// A JSON-RPC request, checked.
#[derive(Debug)]
struct Request {
    id: Value,
    method: String,
    params: Value,
}

/// Reads a JSON-RPC 2.0 request from `body`, sent with the `A2A-Version` header `version`;
/// the error to answer with (and the request's id, when it has one) otherwise.
fn parse(body: &[u8], version: Option<&str>) -> Result<Request, (Value, RpcError)> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        let error = RpcError(-32700, format!("the body is not JSON: {e}"));
        (Value::Null, error)
    })?;
    let id = match request.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        _ => Value::Null,
    };
    let method = match (request.get("jsonrpc"), request.get("method")) {
        (Some(v), Some(Value::String(method))) if v == "2.0" => method.clone(),
        _ => {
            let error = RpcError(
                -32600,
                "not a JSON-RPC 2.0 request: it needs \"jsonrpc\": \"2.0\" and a method name"
                    .to_owned(),
            );
            return Err((id, error));
        }
    };
    if let Some(version) = version {
        if !(version == "1" || version.starts_with("1.")) {
            let error = RpcError(
                -32009,
                format!("A2A version {version} is not supported: this server speaks 1.0"),
            );
            return Err((id, error));
        }
    }
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    Ok(Request { id, method, params })
}

/// A run started for a message: its task, and its stream events (`StreamResponse`s).
struct Run {
    task_id: String,
    events: mpsc::Receiver<Value>,
}

/// The SSE response of a streamed run: each event a JSON-RPC response carrying a
/// `StreamResponse`.
fn sse(id: Value, run: Run) -> Response {
    let frames = futures::stream::unfold(run.events, |mut events| async move {
        events.recv().await.map(|event| (event, events))
    })
    .map(move |event| {
        let data = rpc_result(&id, event).to_string();
        let frame = agent_loop::wire::sse::SseFrame::new(&data).to_string();
        Ok::<_, std::convert::Infallible>(Bytes::from(frame))
    });
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The text of a message's parts; an error for a message with no text part.
fn message_text(message: &Value) -> Result<String, RpcError> {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::params("the message has no parts"))?;
    let text: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    if text.is_empty() {
        return Err(RpcError::params(
            "the message has no text part: this agent reads text",
        ));
    }
    Ok(text.join("\n"))
}

/// What a person's reply to a paused run means for each waiting call (its id, and what it
/// waits for): `approve` (or `approved`, `yes`, `y`, `ok`, in any case) approves the calls
/// that wait for a verdict, any other reply denies them with the reply as the reason; a call
/// that waits for its result gets the reply as its result.
fn answers(pending: impl IntoIterator<Item = (String, WaitsFor)>, reply: &str) -> Resolutions {
    let approve = matches!(
        reply.trim().to_ascii_lowercase().as_str(),
        "approve" | "approved" | "yes" | "y" | "ok"
    );
    let mut answers = Resolutions::new();
    for (id, waits_for) in pending {
        answers = match waits_for {
            WaitsFor::Approval if approve => answers.approve(id),
            WaitsFor::Approval => answers.deny(id, reply),
            _ => answers.result(id, reply),
        };
    }
    answers
}

/// What the status message of a paused task says.
fn waiting(paused: &PausedRun) -> String {
    let calls: Vec<String> = paused
        .pending()
        .iter()
        .map(|c| {
            let what = match (&c.question, c.waits_for) {
                (Some(question), _) => format!("your answer to {:?}", question.prompt),
                (None, WaitsFor::Approval) => "a verdict".to_owned(),
                (None, _) => "its result".to_owned(),
            };
            format!(
                "{} (call {:?}) with {} waits for {what}",
                c.name, c.id, c.input
            )
        })
        .collect();
    format!(
        "The agent waits: {}. Reply `approve` to approve, anything else to deny (your text is \
         the reason); a call that waits for its result, or for an answer, takes your text.",
        calls.join("; ")
    )
}

/// The store session of `principal`'s context `context_id`: a client-chosen context id names a
/// conversation of its own caller only, whatever another caller named.
fn session_key(principal: &Principal, context_id: &str) -> String {
    format!("a2a:{}:{context_id}", principal.key_hex())
}

/// The error for a task that is not there, or not the caller's (the same: another caller's
/// task is never confirmed to exist).
fn not_found(id: &str) -> RpcError {
    RpcError(-32001, format!("task {id:?} not found"))
}

/// What a run's stream has told its client of the answer artifact, so that the chunks the
/// client joins (`append`, `lastChunk`) end equal to the task's answer (what `GetTask` gives).
///
/// Each text delta goes out at once. A new turn's text (or a retried turn's) replaces the
/// artifact: its first chunk has `append: false`. The run's end sends the last chunk
/// (`lastChunk: true`): an empty text part appended when what was streamed is the answer,
/// else the whole answer replacing it.
#[derive(Debug, Default)]
struct AnswerChunks {
    /// The artifact as the client holds it, from the chunks sent.
    sent: String,
    /// A chunk was sent.
    started: bool,
    /// The next chunk replaces the artifact.
    replace_next: bool,
    /// A chunk was not sent (the run was being cancelled): the client's copy is behind.
    lost: bool,
}

impl AnswerChunks {
    /// A text delta: the chunk to send, and whether it appends.
    fn push(&mut self, text: &str) -> (String, bool) {
        let append = self.started && !self.replace_next;
        self.started = true;
        self.replace_next = false;
        if append {
            self.sent.push_str(text);
        } else {
            self.sent = text.to_owned();
        }
        (text.to_owned(), append)
    }

    /// The artifact as the client holds it.
    fn current(&self) -> &str {
        &self.sent
    }

    /// The last chunk pushed did not reach the client.
    fn lost(&mut self) {
        self.lost = true;
    }

    /// A new turn, or a turn sent again: its text replaces what was streamed.
    fn new_turn(&mut self) {
        if self.started {
            self.replace_next = true;
        }
    }

    /// The last chunk, making the artifact `answer`; none when nothing was streamed and there
    /// is no answer.
    fn last(&mut self, answer: &str) -> Option<(String, bool)> {
        if !self.started && answer.is_empty() {
            return None;
        }
        let last = if self.started && !self.lost && self.sent == answer {
            (String::new(), true)
        } else {
            (answer.to_owned(), false)
        };
        self.started = true;
        self.sent = answer.to_owned();
        Some(last)
    }

    /// A chunk as a stream event.
    fn event(task_id: &str, context_id: &str, (text, append): (String, bool), last: bool) -> Value {
        json!({"artifactUpdate": {"taskId": task_id, "contextId": context_id,
            "artifact": {"artifactId": "answer", "name": "answer", "parts": [{"text": text}]},
            "append": append, "lastChunk": last}})
    }
}

/// Forwards `event` to the stream's client, unless the run is being cancelled: then nothing
/// more but the last chunk and the terminal status go out, and a client that does not read
/// does not hold the run up. `false` when the event was not sent for that.
async fn forward(tx: &mpsc::Sender<Value>, control: &RunControl, event: Value) -> bool {
    if control.is_cancelled() {
        return false;
    }
    tokio::select! {
        // A client gone away does not stop the task: sends to it are ignored.
        _ = tx.send(event) => true,
        () = control.cancelled() => false,
    }
}

impl A2a {
    fn get(&self, params: &Value, principal: &Principal) -> Result<Value, RpcError> {
        let id = params
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::params("`id` (the task's id) is required"))?;
        let tasks = lock(&self.tasks);
        let record = tasks
            .records
            .get(id)
            .filter(|r| r.owner == principal.id())
            .ok_or_else(|| not_found(id))?;
        Ok(task_json(id, record))
    }

    /// Cancels a task, and answers once its run has stopped: no tool of it starts after the
    /// answer.
    async fn cancel(&self, params: &Value, principal: &Principal) -> Result<Value, RpcError> {
        let id = params
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::params("`id` (the task's id) is required"))?;
        let run = {
            let mut tasks = lock(&self.tasks);
            let record = tasks
                .records
                .get_mut(id)
                .filter(|r| r.owner == principal.id())
                .ok_or_else(|| not_found(id))?;
            if record.state.is_over() {
                return Err(RpcError(
                    -32002,
                    format!(
                        "task {id:?} is over ({}): it cannot be cancelled",
                        record.state.name()
                    ),
                ));
            }
            match record.run.clone() {
                Some(run) => run,
                None => {
                    // Nothing runs (a pause waiting for its answer): cancelled at once.
                    record.state = TaskState::Canceled;
                    record.status = Some("cancelled by the client".to_owned());
                    return Ok(task_json(id, record));
                }
            }
        };
        run.request_cancel();
        run.wait_stopped().await;
        let tasks = lock(&self.tasks);
        let record = tasks.records.get(id).ok_or_else(|| not_found(id))?;
        Ok(task_json(id, record))
    }

    /// The agent of the context's session, and its events: the paused run resumed with the
    /// reply, or a new run on the message.
    async fn start(
        &self,
        session: &str,
        resuming: bool,
        task_id: &str,
        text: &str,
    ) -> Result<(futures::stream::BoxStream<'static, AgentEvent>, AgentHandle), RpcError> {
        let internal = |e: agent_loop::Error| RpcError(-32603, format!("the agent: {e}"));
        let mut agent = self.service.agent_in_session(session).map_err(internal)?;
        let paused = agent.load_session().await.map_err(internal)?;
        let events = match (resuming, paused) {
            (true, Some(paused)) => {
                let pending = paused.pending().into_iter().map(|c| (c.id, c.waits_for));
                agent.resume(&paused, answers(pending, text)).boxed()
            }
            (true, None) => {
                return Err(RpcError::params(format!(
                    "task {task_id:?} waits for no answer any more"
                )))
            }
            (false, _) => agent.run(text.to_owned()).boxed(),
        };
        Ok((events, agent.handle()))
    }

    /// Starts the run a message asks for: a new task, or the answer to a paused one.
    async fn send(&self, params: &Value, principal: &Principal) -> Result<Run, RpcError> {
        let message = params
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| RpcError::params("`message` is required"))?;
        let text = message_text(message)?;
        let slot = self.service.try_run_slot().ok_or_else(|| {
            RpcError(
                -32603,
                format!(
                    "every run slot is taken ({} runs at once): try again when a task ends",
                    self.service.current_limits().concurrent_runs()
                ),
            )
        })?;
        let control = RunControl::new();
        let (task_id, context_id, resuming) = match message.get("taskId").and_then(Value::as_str) {
            Some(task_id) if !task_id.is_empty() => {
                let mut tasks = lock(&self.tasks);
                let record = tasks
                    .records
                    .get_mut(task_id)
                    .filter(|r| r.owner == principal.id())
                    .ok_or_else(|| not_found(task_id))?;
                if record.state != TaskState::InputRequired {
                    return Err(RpcError::params(format!(
                        "task {task_id:?} takes no message: it is {} (send a message without \
                         a taskId for a new task)",
                        record.state.name()
                    )));
                }
                // Claimed: a second answer arriving meanwhile is refused, and a cancel
                // waits for this run.
                record.state = TaskState::Working;
                record.run = Some(control.clone());
                (task_id.to_owned(), record.context_id.clone(), true)
            }
            _ => {
                let context = match message.get("contextId").and_then(Value::as_str) {
                    Some(c) if c.len() > MAX_CONTEXT_ID_BYTES => {
                        return Err(RpcError::params(format!(
                            "the contextId is longer than {MAX_CONTEXT_ID_BYTES} bytes"
                        )))
                    }
                    Some(c) if !c.is_empty() => c.to_owned(),
                    _ => crate::fresh_id("ctx-"),
                };
                (crate::fresh_id("task-"), context, false)
            }
        };
        let session = session_key(principal, &context_id);
        let started = self.start(&session, resuming, &task_id, &text).await;
        let (events, handle) = match started {
            Ok(started) => started,
            Err(e) => {
                if resuming {
                    if let Some(record) = lock(&self.tasks).records.get_mut(&task_id) {
                        record.run = None;
                        if record.state == TaskState::Working {
                            record.state = TaskState::InputRequired;
                        }
                    }
                }
                control.mark_stopped();
                return Err(e);
            }
        };
        control.set_handle(handle);
        let mut user = message.clone();
        user["taskId"] = json!(task_id);
        user["contextId"] = json!(context_id);
        {
            let mut tasks = lock(&self.tasks);
            match tasks.records.get_mut(&task_id) {
                Some(record) => {
                    // Cancelled while it started: the run is (its handle was cancelled).
                    if record.state != TaskState::Canceled {
                        record.state = TaskState::Working;
                        record.status = None;
                    }
                    record.history.push(user);
                }
                None => {
                    let record = TaskRecord {
                        owner: principal.id().to_owned(),
                        context_id: context_id.clone(),
                        state: TaskState::Submitted,
                        status: None,
                        answer: String::new(),
                        history: vec![user],
                        run: Some(control.clone()),
                    };
                    if !tasks.insert(task_id.clone(), record) {
                        control.mark_stopped();
                        return Err(RpcError(
                            -32603,
                            format!("{MAX_TASKS} tasks are still going: try again later"),
                        ));
                    }
                }
            }
        }
        let (tx, rx) = mpsc::channel(64);
        let tasks = self.tasks.clone();
        let (id, context) = (task_id.clone(), context_id);
        let first = {
            let tasks = lock(&tasks);
            tasks.records.get(&id).map(|r| task_json(&id, r))
        };
        tokio::spawn(async move {
            let _slot = slot;
            let _stopped = StoppedOnDrop(control.clone());
            if let Some(task) = first {
                forward(&tx, &control, json!({ "task": task })).await;
            }
            let status = |state: TaskState, text: Option<&str>| {
                let mut status = json!({"state": state.name()});
                if let Some(text) = text {
                    status["message"] = agent_message(&id, &context, text);
                }
                json!({"statusUpdate": {"taskId": id, "contextId": context, "status": status}})
            };
            forward(&tx, &control, status(TaskState::Working, None)).await;
            if let Some(record) = lock(&tasks).records.get_mut(&id) {
                if record.state == TaskState::Submitted {
                    record.state = TaskState::Working;
                }
            }
            let mut chunks = AnswerChunks::default();
            let mut events = events;
            while let Some(event) = events.next().await {
                match event {
                    AgentEvent::TextDelta { text } if !text.is_empty() => {
                        let chunk = chunks.push(&text);
                        if let Some(record) = lock(&tasks).records.get_mut(&id) {
                            record.answer = chunks.current().to_owned();
                        }
                        let event = AnswerChunks::event(&id, &context, chunk, false);
                        if !forward(&tx, &control, event).await {
                            chunks.lost();
                        }
                    }
                    // A turn's text replaces the turn before's; a turn sent again, what was
                    // streamed of it.
                    AgentEvent::TurnStart { .. }
                    | AgentEvent::Retry { .. }
                    | AgentEvent::Fallback { .. } => chunks.new_turn(),
                    AgentEvent::Finished(outcome) => {
                        let cancelled = control.is_cancelled();
                        let (state, why) = match &outcome.termination {
                            _ if cancelled => (
                                TaskState::Canceled,
                                Some("cancelled by the client".to_owned()),
                            ),
                            Termination::Completed => (TaskState::Completed, None),
                            Termination::Cancelled => {
                                (TaskState::Canceled, Some("cancelled".to_owned()))
                            }
                            Termination::Paused(paused) => {
                                (TaskState::InputRequired, Some(waiting(paused)))
                            }
                            Termination::Error(e) => {
                                (TaskState::Failed, Some(format!("the agent failed: {e}")))
                            }
                            // Stopped short of an answer (a limit, a budget, a hook, the
                            // model, the host): the task failed, and says why.
                            other @ (Termination::MaxTurns
                            | Termination::StoppedAfterTurn
                            | Termination::TokenBudget { .. }
                            | Termination::CostBudget { .. }
                            | Termination::ToolFailures { .. }
                            | Termination::RepeatedToolCall { .. }
                            | Termination::StoppedByHook { .. }
                            | Termination::Refused
                            | Termination::MaxTokens
                            | Termination::InvalidOutput { .. }) => (
                                TaskState::Failed,
                                Some(format!("the agent stopped before finishing: {other:?}")),
                            ),
                        };
                        let answer = match state {
                            TaskState::Canceled => chunks.current().to_owned(),
                            _ => outcome.final_text.clone(),
                        };
                        let last = chunks.last(&answer);
                        {
                            let mut tasks = lock(&tasks);
                            if let Some(record) = tasks.records.get_mut(&id) {
                                record.run = None;
                                record.state = state;
                                record.status = why.clone();
                                record.answer = answer;
                            }
                        }
                        // Stopped: a waiting CancelTask answers now, and the stream's client
                        // gets the rest, the terminal status last.
                        control.mark_stopped();
                        if let Some(chunk) = last {
                            let _ = tx
                                .send(AnswerChunks::event(&id, &context, chunk, true))
                                .await;
                        }
                        let _ = tx.send(status(state, why.as_deref())).await;
                    }
                    // An A2A agent is opaque: its task carries the answer's text and its
                    // state, not how the agent worked (reasoning, tool calls and their
                    // progress, sub-agents, compaction, handoffs, steering, rate limits).
                    // An empty delta adds nothing; a turn's end changes nothing until the
                    // next turn starts.
                    AgentEvent::TextDelta { .. }
                    | AgentEvent::ThinkingDelta { .. }
                    | AgentEvent::ToolCallStart { .. }
                    | AgentEvent::ToolInputDelta { .. }
                    | AgentEvent::ToolCall { .. }
                    | AgentEvent::ToolProgress { .. }
                    | AgentEvent::ToolResult { .. }
                    | AgentEvent::Compacted { .. }
                    | AgentEvent::TurnEnd { .. }
                    | AgentEvent::SubAgent { .. }
                    | AgentEvent::Handoff { .. }
                    | AgentEvent::Steered { .. }
                    | AgentEvent::RateLimits(_) => {}
                }
            }
        });
        Ok(Run {
            task_id: task_id.clone(),
            events: rx,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_loop::agent::Resolution;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-zA-Z0-9/ ._-]{0,12}".prop_map(Value::from),
            Just(json!("2.0")),
            Just(json!("SendMessage")),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec!["jsonrpc", "id", "method", "params", "x"])
                        .prop_map(str::to_owned),
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn the_pre_1_0_method_names_are_aliases_and_nothing_else_is() {
        let aliases = [
            ("message/send", "SendMessage"),
            ("message/stream", "SendStreamingMessage"),
            ("tasks/get", "GetTask"),
            ("tasks/cancel", "CancelTask"),
        ];
        for (old, new) in aliases {
            assert_eq!(method_1_0(old), new);
            assert_eq!(method_1_0(new), new);
        }
        for other in [
            "message/sendd",
            "Message/Send",
            "tasks/list",
            "tasks/resubscribe",
            "",
        ] {
            assert_eq!(method_1_0(other), other);
        }
    }

    proptest! {
        /// Any method name other than the four pre-1.0 ones is itself (an unknown one stays
        /// unknown: -32601).
        #[test]
        fn any_other_method_name_is_itself(name in "[a-zA-Z/]{0,16}") {
            let old = ["message/send", "message/stream", "tasks/get", "tasks/cancel"];
            prop_assume!(!old.contains(&name.as_str()));
            prop_assert_eq!(method_1_0(&name), name.as_str());
        }

        /// Any bytes: a request or an error with a JSON-RPC code, never a panic.
        #[test]
        fn any_bytes_parse_or_get_a_code(body in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Err((_, RpcError(code, _))) = parse(&body, None) {
                prop_assert!([-32700, -32600].contains(&code));
            }
        }

        /// Any JSON: a request exactly when it is a JSON-RPC 2.0 one with a method name and
        /// a 1.x version; the error keeps the request's id when it has a valid one.
        #[test]
        fn any_json_is_judged_by_the_spec(value in json_value(), v1 in any::<bool>()) {
            let body = value.to_string();
            let version = if v1 { "1.0" } else { "0.3" };
            let valid = value.get("jsonrpc") == Some(&json!("2.0"))
                && value.get("method").is_some_and(Value::is_string);
            match parse(body.as_bytes(), Some(version)) {
                Ok(request) => {
                    prop_assert!(valid && v1);
                    prop_assert_eq!(Some(request.method.as_str()), value["method"].as_str());
                }
                Err((id, RpcError(code, _))) => {
                    prop_assert_eq!(code, if valid { -32009 } else { -32600 });
                    if matches!(value.get("id"), Some(Value::String(_) | Value::Number(_))) {
                        prop_assert_eq!(&id, &value["id"]);
                    }
                }
            }
        }

        /// Any reply to a paused run answers every waiting call: `approve` and its synonyms
        /// approve, any other reply denies with the reply as the reason; a deferred call takes
        /// the reply as its result.
        #[test]
        fn a_reply_answers_every_waiting_call(
            reply in "(approve|Approved| yes |y|OK|no|because [a-z ]{0,10}|)",
            kinds in prop::collection::vec(any::<bool>(), 0..4),
        ) {
            let pending: Vec<(String, WaitsFor)> = kinds
                .iter()
                .enumerate()
                .map(|(i, verdict)| {
                    let waits = if *verdict { WaitsFor::Approval } else { WaitsFor::Result };
                    (format!("c{i}"), waits)
                })
                .collect();
            let resolved = answers(pending.clone(), &reply);
            prop_assert_eq!(resolved.len(), pending.len());
            let approve = ["approve", "approved", "yes", "y", "ok"]
                .contains(&reply.trim().to_lowercase().as_str());
            for (id, waits) in &pending {
                let got = resolved.get(id).cloned();
                let want = match (waits, approve) {
                    (WaitsFor::Approval, true) => Resolution::Approve,
                    (WaitsFor::Approval, false) => Resolution::Deny { reason: reply.clone() },
                    _ => Resolution::Result { content: reply.clone(), is_error: false },
                };
                prop_assert_eq!(got, Some(want));
            }
        }
    }

    fn record(state: TaskState) -> TaskRecord {
        TaskRecord {
            owner: "local".to_owned(),
            context_id: "ctx".to_owned(),
            state,
            status: None,
            answer: String::new(),
            history: Vec::new(),
            run: None,
        }
    }

    #[test]
    fn the_task_records_are_bounded_and_the_oldest_finished_go_first() {
        let mut tasks = Tasks::default();
        assert!(tasks.insert("working".to_owned(), record(TaskState::Working)));
        for i in 1..MAX_TASKS {
            assert!(tasks.insert(format!("t{i}"), record(TaskState::Completed)));
        }
        assert!(tasks.insert("new".to_owned(), record(TaskState::Working)));
        assert_eq!(tasks.records.len(), MAX_TASKS);
        assert!(
            tasks.records.contains_key("working"),
            "a running task is kept"
        );
        assert!(
            !tasks.records.contains_key("t1"),
            "the oldest finished one went"
        );
        assert!(tasks.records.contains_key("t2"));
        // Every record of a task still going: a new one is refused, none forgotten.
        let mut busy = Tasks::default();
        for i in 0..MAX_TASKS {
            assert!(busy.insert(format!("w{i}"), record(TaskState::Working)));
        }
        assert!(!busy.insert("one more".to_owned(), record(TaskState::Working)));
        assert_eq!(busy.records.len(), MAX_TASKS);
    }

    #[test]
    fn a_message_without_text_is_refused() {
        let error = message_text(&json!({"parts": [{"url": "https://x"}]})).unwrap_err();
        assert_eq!(error.0, -32602);
        assert_eq!(message_text(&json!({})).unwrap_err().0, -32602);
        assert_eq!(
            message_text(&json!({"parts": [{"text": "a"}, {"text": "b"}]})).unwrap(),
            "a\nb"
        );
    }
}
