//! A web chat over the agent: one binary, an axum server on a loopback port that serves a
//! small HTML/JS page (no build step, no CDN) and the agent's endpoints.
//!
//! ```sh
//! cargo run -p agent-loop-ui --example web_chat               # http://127.0.0.1:3000, a scripted model
//! cargo run -p agent-loop-ui --example web_chat -- --port 0   # any free port (printed on the first line)
//! ```
//!
//! - `POST /api/chat` speaks the Vercel AI SDK's UI message stream (what `useChat` sends and
//!   reads), through [`agent_loop_ui::ai_sdk::respond`]; the page uses it.
//! - `GET /api/chat/{id}` gives the chat's conversation as the AI SDK's `UIMessage`s, from
//!   its session: the page loads it on start, so a reload keeps the chat (the page keeps
//!   only the chat's id, in `sessionStorage`).
//! - `POST /agui` speaks AG-UI 1.0 (what `@ag-ui/client`'s `HttpAgent` and CopilotKit send
//!   and read), through [`agent_loop_ui::agui::respond_with`], for the same agent.
//! - Streams survive a reconnect: each run is kept in a [`RunStreams`] and goes on when its
//!   page goes away (for 30 s). A page whose stream was cut reconnects with
//!   `GET /api/chat/{id}/stream` and `Last-Event-ID` ([`agent_loop_ui::ai_sdk::reconnect`]) and
//!   gets what it missed; a page reloaded mid-answer loads the conversation as it was sent
//!   (`"streaming": true`) and the run's stream from its start, so the answer continues.
//!   `POST /api/chat/{id}/steer` takes what the person writes while the answer streams into
//!   the running run ([`RunStreams::steer`]): the page shows it where the run heard it.
//!   `POST /api/chat/{id}/stop` (the Stop button) cancels the run; an AG-UI client that
//!   sends its run's request again (with `Last-Event-ID`) gets the rest of it.
//!
//! The page streams the answer and the model's reasoning, shows each tool call with its
//! arguments as they stream, and shows approve and deny buttons for `delete_file`, which
//! needs a person's approval: the run pauses, the paused run waits in the session store, and
//! the button's request resumes it. Typing a message instead of answering denies the waiting
//! call and goes on (the library's default, [`agent_loop_ui::NewMessageWhilePaused`]). The
//! Stop button asks the server to cancel the run, then closes the stream. Each
//! chat is a session (its id is the chat's), so any number of tabs can chat at once.
//!
//! The page renders the answer's Markdown itself (bold, italics, code, code blocks, lists,
//! http(s) links), building DOM nodes from text: nothing the model or a tool says is ever
//! parsed as HTML.
//!
//! With no API key the model is scripted: ask it to tidy up the logs (or for a long story, to
//! try the Stop button). With
//! `ANTHROPIC_API_KEY` (or `OPENAI_API_KEY`, or a `--gemini`, `--bedrock`, `--ollama` flag and
//! its variables) a real model decides, with the same tools over a pretend folder.

#[path = "../../../examples/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::agent::WaitsFor;
use agent_loop::provider::{LlmStream, ModelRequest};
use agent_loop::session::{MemoryStore, SessionStore};
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AnthropicClient, ContentBlock, LlmClient, Message, PausedRun, Role, ToolError,
};
use agent_loop_ui::{agui, ai_sdk, RespondOptions, RunStreams};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;

/// The page: one file, its script and style inline.
pub const PAGE: &str = include_str!("page.html");

/// The reason the page gives when the person clicks Deny (the model reads it).
pub const PAGE_DENIAL: &str = "Denied in the web chat.";

/// How many model responses are streaming now (the scripted model's): 0 once every run is
/// over or cancelled.
pub type ModelStreams = watch::Receiver<usize>;

/// What every request's agent shares: the model and the sessions; and the runs kept for
/// reconnects, with the conversation each chat's running request sent (what a page reloaded
/// mid-answer starts from).
#[derive(Clone)]
pub struct App {
    client: Arc<dyn LlmClient>,
    sessions: Arc<dyn SessionStore>,
    streams: RunStreams,
    sent: Arc<Mutex<HashMap<String, Value>>>,
    /// The scripted model's gate: its counting answer waits halfway while it is closed.
    gate: Arc<watch::Sender<bool>>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = common::args();
    let port = match args.iter().position(|a| a == "--port") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--port needs a number")?
            .parse::<u16>()?,
        None => 3000,
    };
    let (app, description, _mock) = app().await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("Web chat on http://{}", listener.local_addr()?);
    println!("Model: {description}");
    axum::serve(listener, router(app)).await?;
    Ok(())
}

/// The app with a real model when a key is set, else the scripted one (whose mock server the
/// third value keeps alive).
pub async fn app() -> (App, String, Option<Arc<MockServer>>) {
    let model = common::model(Vec::new()).await;
    if common::is_scripted(&model) {
        let (app, mock, _) = scripted_app().await;
        let description = format!(
            "a scripted model behind the loopback mock server at {} (set ANTHROPIC_API_KEY or OPENAI_API_KEY for a real one); ask it to tidy up the logs",
            mock.url()
        );
        return (app, description, Some(mock));
    }
    let app = App::new(model.client.clone(), Arc::new(watch::channel(true).0));
    (app, model.description.clone(), None)
}

/// The app with the scripted model, over the real Anthropic client and HTTP stack against
/// the loopback mock server (kept alive by the second value); the third counts the model
/// responses streaming.
pub async fn scripted_app() -> (App, Arc<MockServer>, ModelStreams) {
    let mock = Arc::new(MockServer::start().await);
    let inner = AnthropicClient::new("mock-key")
        .base_url(mock.anthropic_base_url())
        .model("scripted");
    let (streams, watching) = watch::channel(0);
    let gate = Arc::new(watch::channel(true).0);
    let client = Arc::new(ScriptedModel {
        inner,
        mock: mock.clone(),
        streams: Arc::new(streams),
        gate: gate.clone(),
    });
    (App::new(client, gate), mock, watching)
}

/// The routes: the page, the AI SDK endpoint and the chat's conversation, the AG-UI endpoint.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/chat", post(chat))
        .route("/api/chat/{id}", get(conversation))
        .route("/api/chat/{id}/stream", get(reconnect))
        .route("/api/chat/{id}/stop", post(stop))
        .route("/api/chat/{id}/steer", post(steer))
        .route("/agui", post(agui_run))
        .with_state(app)
}

/// `POST /api/chat`: the AI SDK's UI message stream; the chat's id names its session. The
/// run is kept for reconnects, and the conversation the request sent too, while it runs.
async fn chat(State(app): State<App>, body: Bytes) -> Response {
    let id = match ai_sdk::ChatRequest::from_slice(&body) {
        Ok(request) => request.id().to_owned(),
        Err(e) => return bad_request(&e.to_string()),
    };
    let mut agent = match app.agent(&id) {
        Ok(agent) => agent,
        Err(e) => return server_error(&e.to_string()),
    };
    let response = ai_sdk::respond_with(&mut agent, &body, &app.options()).await;
    if response.status().is_success() {
        let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let mut kept = app.sent.lock().unwrap_or_else(|e| e.into_inner());
        // Only the chats whose run goes on: the map stays as small as the running chats.
        kept.retain(|chat, _| app.streams.is_live(chat));
        kept.insert(id, sent["messages"].clone());
    }
    response
}

/// `GET /api/chat/{id}/stream`: the AI SDK's reconnect, answered from the kept run.
async fn reconnect(State(app): State<App>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    ai_sdk::reconnect(&app.streams, &id, &headers)
}

/// `POST /api/chat/{id}/stop`: the Stop button; answers once the run has ended.
async fn stop(State(app): State<App>, Path(id): Path<String>) -> Response {
    let stopped = app.streams.cancel(&id);
    app.streams.finished(&id).await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "stopped": stopped }).to_string(),
    )
        .into_response()
}

/// `POST /api/chat/{id}/steer` with `{"text": "…"}`: the person wrote while the answer
/// streams; the words go into the running run at its next safe point, and its stream shows
/// them there (a `data-steered` part). `{"steered": false}` when no run goes on (the page
/// sends the words as a new message instead).
async fn steer(State(app): State<App>, Path(id): Path<String>, body: Bytes) -> Response {
    let text = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("text")?.as_str().map(str::trim).map(str::to_owned))
        .filter(|text| !text.is_empty());
    let Some(text) = text else {
        return bad_request("the body must be {\"text\": \"…\"} with some text");
    };
    let steered = app.streams.steer(&id, text);
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "steered": steered }).to_string(),
    )
        .into_response()
}

/// `GET /api/chat/{id}`: the chat's conversation, `{"messages": [UIMessage…]}`, from its
/// session (none yet: no messages); while a run goes on, the conversation its request sent,
/// with `"streaming": true`: the page then follows the run's stream from its start.
async fn conversation(State(app): State<App>, Path(id): Path<String>) -> Response {
    if app.streams.is_live(&id) {
        let sent = app
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned();
        if let Some(messages) = sent {
            return (
                [(header::CONTENT_TYPE, "application/json")],
                json!({ "messages": messages, "streaming": true }).to_string(),
            )
                .into_response();
        }
    }
    let mut agent = match app.agent(&id) {
        Ok(agent) => agent,
        Err(e) => return server_error(&e.to_string()),
    };
    let paused = match agent.load_session().await {
        Ok(paused) => paused,
        Err(e) => return server_error(&e.to_string()),
    };
    let messages = ui_messages(&agent.messages(), paused.as_ref());
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "messages": messages }).to_string(),
    )
        .into_response()
}

/// The agent's conversation as the AI SDK's `UIMessage`s, as the page built them from the
/// stream: a user message per question; an assistant message per answer, a `step-start`
/// per model response, its reasoning, text and tool parts, each call in the state its
/// result gives it (a denial as `output-denied`), the calls `paused` waits for in
/// `approval-requested`.
fn ui_messages(messages: &[Message], paused: Option<&PausedRun>) -> Vec<Value> {
    let denials = [
        PAGE_DENIAL,
        ai_sdk::DEFAULT_DENIAL,
        agent_loop_ui::NEW_MESSAGE_DENIAL,
    ];
    let mut out: Vec<Value> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let mut parts: Vec<Value> = Vec::new();
        for block in &message.content {
            match block {
                ContentBlock::Text { text, .. } if !text.is_empty() => {
                    // Text blocks in a row are one part, as the stream shows them.
                    match parts.last_mut() {
                        Some(last) if last["type"] == "text" => {
                            let joined = format!("{}{text}", last["text"].as_str().unwrap_or(""));
                            last["text"] = json!(joined);
                        }
                        _ => parts.push(json!({"type": "text", "text": text, "state": "done"})),
                    }
                }
                ContentBlock::Thinking { thinking, .. } if !thinking.is_empty() => {
                    parts.push(json!({"type": "reasoning", "text": thinking, "state": "done"}))
                }
                ContentBlock::ToolUse {
                    id, name, input, ..
                } => parts.push(json!({
                    "type": format!("tool-{name}"), "toolCallId": id,
                    "state": "input-available", "input": input,
                })),
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } => {
                    // A result goes on its call's part, in the answer it belongs to.
                    let part = out
                        .iter_mut()
                        .rev()
                        .filter(|m| m["role"] == "assistant")
                        .flat_map(|m| m["parts"].as_array_mut().into_iter().flatten())
                        .find(|p| p["toolCallId"] == tool_use_id.as_str());
                    if let Some(part) = part {
                        if !is_error {
                            part["state"] = json!("output-available");
                            part["output"] = json!(content);
                        } else if denials.contains(&content.as_str()) {
                            part["state"] = json!("output-denied");
                            part["approval"] =
                                json!({"id": tool_use_id, "approved": false, "reason": content});
                        } else {
                            part["state"] = json!("output-error");
                            part["errorText"] = json!(content);
                        }
                    }
                }
                _ => {}
            }
        }
        if parts.is_empty() {
            continue;
        }
        match message.role {
            Role::User => out.push(json!({"id": format!("m{i}"), "role": "user", "parts": parts})),
            _ => {
                let mut step = vec![json!({"type": "step-start"})];
                step.extend(parts);
                // A response after tool results goes on the answer they belong to.
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        if let Some(all) = last["parts"].as_array_mut() {
                            all.extend(step);
                        }
                    }
                    _ => {
                        out.push(json!({"id": format!("m{i}"), "role": "assistant", "parts": step}))
                    }
                }
            }
        }
    }
    for call in paused.map(PausedRun::pending).unwrap_or_default() {
        if call.waits_for != WaitsFor::Approval {
            continue;
        }
        let part = out
            .iter_mut()
            .flat_map(|m| m["parts"].as_array_mut().into_iter().flatten())
            .find(|p| p["toolCallId"] == call.id.as_str());
        if let Some(part) = part {
            part["state"] = json!("approval-requested");
            part["approval"] = json!({"id": call.id});
        }
    }
    out
}

/// `POST /agui`: AG-UI; the thread's id names its session. The run's request sent again
/// (with `Last-Event-ID`) is a reconnect.
async fn agui_run(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(response) = agui::reconnect(&app.streams, &headers, &body) {
        return response;
    }
    let id = match agui::RunAgentInput::from_slice(&body) {
        Ok(request) => request.thread_id().to_owned(),
        Err(e) => return bad_request(&e.to_string()),
    };
    match app.agent(&id) {
        Ok(mut agent) => agui::respond_with(&mut agent, &body, &app.options()).await,
        Err(e) => server_error(&e.to_string()),
    }
}

fn bad_request(message: &str) -> Response {
    let body = json!({ "error": message }).to_string();
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn server_error(message: &str) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, message.to_owned()).into_response()
}

impl App {
    fn new(client: Arc<dyn LlmClient>, gate: Arc<watch::Sender<bool>>) -> App {
        App {
            client,
            sessions: Arc::new(MemoryStore::new()),
            streams: RunStreams::new(),
            sent: Arc::default(),
            gate,
        }
    }

    /// How the handlers answer: runs kept for reconnects.
    fn options(&self) -> RespondOptions {
        RespondOptions::new().resumable(self.streams.clone())
    }

    /// The runs kept for reconnects.
    pub fn streams(&self) -> &RunStreams {
        &self.streams
    }

    /// The scripted model's gate (open at first): while it is closed, the answer to
    /// "count …" stops after its first words, until it opens. Tests close it to cut or
    /// reload the page mid-answer.
    pub fn gate(&self) -> Arc<watch::Sender<bool>> {
        self.gate.clone()
    }

    /// A fresh agent for one request, on the chat's session: it loads the conversation and
    /// the paused run (if any) from the store, so requests can land on any process that
    /// shares the store.
    fn agent(&self, chat: &str) -> Result<Agent, agent_loop::Error> {
        Agent::builder(self.client.clone())
            .system(
                "You tidy up a folder of log files. List the files before you delete any; \
                 delete only what the user asked for. Be brief.",
            )
            .tool(list_files())
            .tool(delete_file())
            .policy(RunPolicy::new().require_approval("delete_file"))
            .session(self.sessions.clone(), chat)
            .build()
    }
}

/// Lists a pretend folder (read-only: the agent may start it while the model still streams).
fn list_files() -> impl agent_loop::Tool {
    FnTool::new(
        "list_files",
        "Lists the files of a folder with their ages.",
        |input: serde_json::Value, _ctx| async move {
            let dir = input["dir"].as_str().unwrap_or("logs").to_owned();
            Ok::<_, ToolError>(format!(
                "{dir}/old.log (92 days old, 48 MB)\n{dir}/today.log (0 days old, 2 MB)"
            ))
        },
    )
    .read_only(true)
}

/// Deletes a file of the pretend folder (nothing is deleted: a demo); needs approval.
fn delete_file() -> impl agent_loop::Tool {
    FnTool::new(
        "delete_file",
        "Deletes one file. A person must approve each call.",
        |input: serde_json::Value, _ctx| async move {
            let path = input["path"].as_str().unwrap_or("?").to_owned();
            Ok::<_, ToolError>(format!("deleted {path}"))
        },
    )
}

/// The offline model: a script that answers by where the conversation stands, played by the
/// mock server through the real client (HTTP, SSE, the decoder), so the page sees a real
/// stream: reasoning, text, a call's arguments in fragments.
struct ScriptedModel {
    inner: AnthropicClient,
    mock: Arc<MockServer>,
    /// How many of its responses are streaming now.
    streams: Arc<watch::Sender<usize>>,
    /// While false, the counting answer waits after its first words.
    gate: Arc<watch::Sender<bool>>,
}

/// Counts one streaming response while it lives.
struct Streaming(Arc<watch::Sender<usize>>);

impl Streaming {
    fn new(streams: &Arc<watch::Sender<usize>>) -> Self {
        streams.send_modify(|n| *n += 1);
        Streaming(streams.clone())
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The counting answer's first words, then (after the gate) the rest.
pub const COUNT_FIRST: &str = "Counting: one, two, three,";
/// The counting answer after the gate.
pub const COUNT_REST: &str = " four, five, six, seven, eight, nine, ten.";

/// What the user said last (a message the agent never answered, a stopped run's, is joined
/// with the next one: the newest text decides).
fn said(request: &ModelRequest) -> &str {
    let Some(last) = request.messages.last() else {
        return "";
    };
    last.content
        .iter()
        .rev()
        .find_map(|block| match block {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

impl ScriptedModel {
    /// The next response, from the request's last message.
    fn next(request: &ModelRequest) -> ScriptedResponse {
        let Some(last) = request.messages.last() else {
            return ScriptedResponse::text("Hello!");
        };
        let result = last.content.iter().find_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => Some((tool_use_id.as_str(), content.as_str(), *is_error)),
            _ => None,
        });
        let said = said(request);
        match (last.role, result) {
            (Role::User, Some((id, _, _))) if id.starts_with("call_list") => {
                ScriptedResponse::text("`old.log` is 92 days old and takes 48 MB; ")
                    .then_text("I'll delete it and keep `today.log`.")
                    .then_tool_call(
                        format!("call_delete_{}", request.messages.len()),
                        "delete_file",
                        json!({"path": "logs/old.log"}),
                    )
            }
            (Role::User, Some((_, _, true))) => ScriptedResponse::text(
                "Understood: I left `old.log` where it is. Nothing was deleted.",
            ),
            (Role::User, Some(_)) => ScriptedResponse::text(
                "Done: `logs/old.log` is deleted, 48 MB freed. `today.log` stays.",
            ),
            (Role::User, None) if said.starts_with("echo ") => {
                // Says back what it was told, Markdown and all: the page must show any HTML in
                // it as text.
                ScriptedResponse::text(format!("You wrote: {}", &said["echo ".len()..]))
            }
            (Role::User, None) if said.to_lowercase().contains("story") => {
                // Starts, then goes silent: the run waits on the model until it is stopped.
                ScriptedResponse::text("Once upon a time, a log file grew and grew")
                    .then_text(" and grew…")
                    .then_stall()
            }
            (Role::User, None) if said.to_lowercase().starts_with("count") => {
                ScriptedResponse::text(COUNT_FIRST)
                    .then_text(COUNT_REST)
                    .then_text(" Done counting.")
            }
            (Role::User, None) if said.to_lowercase().contains("tidy") => {
                ScriptedResponse::thinking(
                    "The user wants the logs tidied. I should list the folder before deleting anything.",
                    "sig-demo",
                )
                .then_text("Let me look at the logs folder first.")
                .then_tool_call(
                    format!("call_list_{}", request.messages.len()),
                    "list_files",
                    json!({"dir": "logs"}),
                )
            }
            _ => ScriptedResponse::text(
                "I'm a *scripted* demo model. Ask me to **tidy up the logs** to see a tool call \
                 that needs your approval, or for a `long story` to try the Stop button.",
            ),
        }
    }
}

impl LlmClient for ScriptedModel {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
        // Text and arguments in small deltas, sent a little apart: the page visibly streams.
        self.mock.push(
            MockResponse::stream(Self::next(request).chunked(8))
                .chunk_size(96)
                .chunk_delay(Duration::from_millis(10)),
        );
        let streaming = Streaming::new(&self.streams);
        // The counting answer waits at the gate once its first words are out.
        let counting = request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::User)
            && said(request).to_lowercase().starts_with("count");
        let gate = self.gate.subscribe();
        let mut shown = 0usize;
        Box::pin(self.inner.stream(request).then(move |event| {
            let _counted = &streaming;
            let mut gate = gate.clone();
            let hold = match &event {
                Ok(agent_loop::LlmEvent::TextDelta { text, .. }) if counting => {
                    let before = shown;
                    shown += text.len();
                    before >= COUNT_FIRST.len()
                }
                _ => false,
            };
            async move {
                if hold {
                    let _ = gate.wait_for(|open| *open).await;
                }
                event
            }
        }))
    }

    fn model(&self) -> &str {
        LlmClient::model(&self.inner)
    }
}
