//! An A2A 1.0 client: a remote A2A agent as a [`Tool`] of an agent-loop agent.
//!
//! [`RemoteAgent::connect`] reads the remote agent's card (`/.well-known/agent-card.json`,
//! as A2A 1.0 says) and makes a tool of it: its name and description come from the card
//! (the description lists the card's skills), and its input is `{"task": "…"}`
//! ([`RemoteTask`]). Each call is one remote task, over the A2A JSON-RPC binding:
//!
//! ```text
//!  call ─► SendStreamingMessage ─┬─ task / statusUpdate / artifactUpdate events
//!          (SendMessage when the │    ─► nested events of the call (status text as thinking,
//!           card says it cannot  │       artifact text as text), progress notes "task …: working"
//!           stream)              ├─► COMPLETED ─────────► the result: the artifacts' text
//!                                ├─► FAILED / REJECTED ─► an error result saying so
//!                                ├─► CANCELED ──────────► an error result
//!                                └─► INPUT_REQUIRED / AUTH_REQUIRED
//!                                      ─► the call asks (ToolError::ask): our run pauses
//!  re-run with the host's answer (ctx.reply()):
//!     Result { content } ─► a message with the content to the same task, streamed on as above
//!     Approve            ─► a message "approved" to the same task
//!     Deny { reason }    ─► CancelTask; the result is the error "denied: {reason}"
//!  our cancel (run cancelled, call timed out, future dropped) ─► CancelTask (best effort)
//! ```
//!
//! The question a paused call asks carries the remote task's ids in its
//! [`data`](agent_loop::tool::Question::data) (`{"task_id": …, "context_id": …, "state": …}`),
//! so a [`PausedRun`](agent_loop::PausedRun) resumed in another process, with the same
//! `RemoteAgent` registered, answers the same remote task.
//!
//! Artifacts are joined as the spec says: a chunk with `append: true` continues its artifact,
//! one without replaces it; text parts run together (a server that stores appended chunks
//! keeps each as a part: the streamed text and `GetTask`'s read the same), the artifacts are
//! joined with a blank line. Non-text parts: a `data` part is its JSON, a `url` part its
//! URL, a `raw` part a note saying it was left out.
//!
//! The nested run: `TurnStart`, each status message's text as a `ThinkingDelta`, the artifacts'
//! text as `TextDelta`s, `TurnEnd` and `Finished` (completed with the answer, an error for a
//! failed task, `Refused` for a rejected one, cancelled for a cancelled one). A task that asks
//! leaves the turn open, as a paused run leaves its own: the re-run goes on with it (no
//! `TurnStart`), so the path's events across the pause are one run. The remote reports no
//! token usage: the nested run's is zero.
//!
//! Bounded: the card is read up to [`MAX_CARD_BYTES`], a streamed event up to
//! [`MAX_EVENT_BYTES`], the answer up to [`RemoteAgentBuilder::max_answer_bytes`] (past it the
//! answer is cut, and says so).
//!
//! HTTPS needs the core's `rustls` feature (on by default): this client is the core's own
//! `reqwest`, with the TLS the core builds it with. Only A2A 1.0's JSON-RPC binding is spoken
//! (the card must name a `JSONRPC` interface of version 1.x; every request says
//! `A2A-Version: 1.0`). Not done: the gRPC and HTTP+JSON bindings, push notifications,
//! `SubscribeToTask` after a broken stream (the task is asked for once with `GetTask`, then
//! cancelled), polling a task a non-streaming server answered before it finished, and a
//! cancel before the first event (the task's id is not known yet: the remote task goes on).
//!
//! An agent served over A2A on a loopback port (this crate's [`router`](super::router)), called
//! by another as a tool:
//!
//! ```
//! use agent_loop::testing::{ScriptedClient, ScriptedResponse};
//! use agent_loop::{Agent, AgentEvent, Tool};
//! use agent_loop_serve::a2a::client::RemoteAgent;
//! use agent_loop_serve::a2a::{router, AgentCard};
//! use agent_loop_serve::AgentService;
//! use futures::StreamExt;
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! // The remote side: an agent served over A2A (elsewhere, any A2A 1.0 server).
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}", listener.local_addr()?);
//! let service = AgentService::new(|| {
//!     Agent::builder(ScriptedClient::new([ScriptedResponse::text("Paris.")]))
//! });
//! let app = router(&service, AgentCard::new("geographer", "Knows capitals.", &url))
//!     // The peer's address: a service without an authenticator serves loopback peers only.
//!     .into_make_service_with_connect_info::<std::net::SocketAddr>();
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! // Our side: the remote agent is a tool named after its card.
//! let geographer = RemoteAgent::connect(&url).await?;
//! assert_eq!(geographer.name(), "geographer");
//! let model = ScriptedClient::new([
//!     ScriptedResponse::tool_call("c1", "geographer", json!({"task": "The capital of France?"})),
//!     ScriptedResponse::text("It is Paris."),
//! ]);
//! let mut agent = Agent::builder(model).tool(geographer).build()?;
//! let mut events = agent.run("What is the capital of France?");
//! while let Some(event) = events.next().await {
//!     match event {
//!         // The remote task's progress, under the call: path "geographer#c1".
//!         AgentEvent::SubAgent { path, event } => println!("{path}: {event:?}"),
//!         AgentEvent::ToolResult { content, .. } => assert_eq!(content, "Paris."),
//!         AgentEvent::Finished(outcome) => assert_eq!(outcome.final_text, "It is Paris."),
//!         _ => {}
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! A remote agent behind a token, with a time limit per call:
//!
//! ```no_run
//! use agent_loop_serve::a2a::client::RemoteAgent;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let weather = RemoteAgent::builder("https://weather.example.com")
//!     .bearer_token(std::env::var("WEATHER_AGENT_TOKEN")?)
//!     .timeout(Duration::from_secs(120))
//!     .connect()
//!     .await?;
//! println!("{} has {} skills", weather.card().name, weather.card().skills.len());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_loop::wire::sse::{SseDecoder, SseLimits};
use agent_loop::{async_trait, Tool, ToolContext, ToolError, ToolOutput};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

mod wire;

use wire::{
    card_url, describe, parse_card, rpc_result, stream_result, tool_name, valid_tool_name, End,
    Note, Progress, TaskIds, MAX_ERROR_BODY_BYTES,
};
pub use wire::{RemoteCard, RemoteSkill};

/// The largest agent card read (bytes).
pub const MAX_CARD_BYTES: usize = 256 * 1024;
/// The largest event of a remote task's stream read (bytes of its data), and the largest
/// JSON-RPC response of a method that does not stream.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// The default most of a remote answer kept (bytes).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// The longest a `CancelTask` sent on our cancel may take.
pub const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest the connection to the remote server may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest reading the card may take, when no [`RemoteAgentBuilder::timeout`] is set.
const CARD_TIMEOUT: Duration = Duration::from_secs(30);
/// The A2A version this client speaks (sent as the `A2A-Version` header).
const A2A_VERSION: &str = "1.0";

/// The input of a [`RemoteAgent`] tool: the task for the remote agent.
#[derive(Debug, Clone, serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct RemoteTask {
    /// The task, with everything needed to do it: the remote agent sees nothing else of the
    /// conversation.
    pub task: String,
}

/// Why [`RemoteAgent::connect`] failed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// An option is not valid: a URL that does not parse, a header that is not a valid HTTP
    /// header, a tool name that breaks the tool-name rule.
    #[error("{0}")]
    InvalidOption(String),
    /// The card could not be fetched: the server is unreachable, or it answered with an
    /// HTTP error.
    #[error("could not read the agent card at {url}: {message}")]
    Fetch {
        /// The card's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The card is not an A2A agent card this client can use (not JSON, no name, larger than
    /// [`MAX_CARD_BYTES`], no A2A 1.x JSON-RPC interface).
    #[error("the agent card at {url} cannot be used: {message}")]
    InvalidCard {
        /// The card's URL.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Options of a [`RemoteAgent`], read by [`connect`](RemoteAgentBuilder::connect).
///
/// ```
/// use agent_loop_serve::a2a::client::RemoteAgent;
/// use std::time::Duration;
///
/// let builder = RemoteAgent::builder("http://127.0.0.1:8080")
///     .bearer_token("s3cret")
///     .header("x-tenant", "acme")
///     .timeout(Duration::from_secs(60))
///     .name("weather")
///     .max_answer_bytes(64 * 1024);
/// // The token never shows in Debug output.
/// assert!(!format!("{builder:?}").contains("s3cret"));
/// ```
#[must_use = "a builder does nothing until `connect` is awaited"]
#[derive(Clone)]
pub struct RemoteAgentBuilder {
    url: String,
    bearer: Option<String>,
    headers: Vec<(String, String)>,
    timeout: Option<Duration>,
    name: Option<String>,
    description: Option<String>,
    endpoint: Option<String>,
    max_answer_bytes: usize,
}

impl fmt::Debug for RemoteAgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("RemoteAgentBuilder")
            .field("url", &self.url)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish_non_exhaustive()
    }
}

impl RemoteAgentBuilder {
    /// Sends `Authorization: Bearer {token}` with every request (the card's too).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Sends this header with every request (an API key, a tenant). Its value is kept out of
    /// `Debug` output.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The longest one call may run (the tool's [`Tool::timeout`]; past it the call is
    /// stopped, the remote task cancelled, and the model told), and the longest reading the
    /// card may take. Default: the registry's default timeout for calls, 30 s for the card.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The tool's name, instead of the card's name made to fit `^[a-zA-Z0-9_-]{1,64}$`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The tool's description, instead of the one made from the card.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The JSON-RPC endpoint to call, instead of the interface the card names (a server
    /// behind a proxy whose card names an inner address).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The most of a remote answer kept (bytes; default [`DEFAULT_MAX_ANSWER_BYTES`]): the
    /// rest is cut, and the answer says so.
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// Reads the agent card and makes the tool.
    pub async fn connect(self) -> Result<RemoteAgent, ConnectError> {
        let invalid = ConnectError::InvalidOption;
        let card_url = card_url(&self.url).map_err(invalid)?;
        let mut headers = HeaderMap::new();
        headers.insert("a2a-version", HeaderValue::from_static(A2A_VERSION));
        if let Some(token) = &self.bearer {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                invalid("the bearer token is not a valid HTTP header value".to_owned())
            })?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        for (name, value) in &self.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(format!("{name:?} is not a valid HTTP header name")))?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                invalid(format!(
                    "the value of header {name:?} is not a valid header value"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| invalid(format!("the HTTP client could not be built: {e}")))?;

        let fetch = |message: String| ConnectError::Fetch {
            url: card_url.to_string(),
            message,
        };
        let response = http
            .get(card_url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.timeout.unwrap_or(CARD_TIMEOUT))
            .send()
            .await
            .map_err(|e| fetch(describe_reqwest(&e)))?;
        let response = check_status(response).await.map_err(fetch)?;
        let body = read_capped(response, MAX_CARD_BYTES, "the agent card")
            .await
            .map_err(|e| match e {
                Capped::TooLarge(message) => ConnectError::InvalidCard {
                    url: card_url.to_string(),
                    message,
                },
                Capped::Read(message) => fetch(message),
            })?;
        let mut card =
            parse_card(&body, &card_url).map_err(|message| ConnectError::InvalidCard {
                url: card_url.to_string(),
                message,
            })?;
        if let Some(endpoint) = &self.endpoint {
            let url = reqwest::Url::parse(endpoint)
                .map_err(|e| invalid(format!("the endpoint {endpoint:?} is not a URL: {e}")))?;
            card.endpoint = url.to_string();
        }
        let endpoint =
            reqwest::Url::parse(&card.endpoint).map_err(|e| ConnectError::InvalidCard {
                url: card_url.to_string(),
                message: format!("its interface URL {:?} is not a URL: {e}", card.endpoint),
            })?;
        let name = match self.name {
            Some(name) if valid_tool_name(&name) => name,
            Some(name) => {
                return Err(invalid(format!(
                    "the tool name {name:?} breaks the rule ^[a-zA-Z0-9_-]{{1,64}}$"
                )))
            }
            None => tool_name(&card.name),
        };
        let description = self.description.unwrap_or_else(|| describe(&card));
        Ok(RemoteAgent {
            inner: Arc::new(Remote {
                http,
                endpoint,
                card,
                name,
                description,
                timeout: self.timeout,
                max_answer_bytes: self.max_answer_bytes,
                next_id: AtomicU64::new(1),
            }),
        })
    }
}

/// A remote A2A agent, as a [`Tool`]: each call sends the task to the remote agent and
/// answers with its answer (see the [module docs](self)). Cheap to clone.
///
/// ```no_run
/// use agent_loop_serve::a2a::client::RemoteAgent;
///
/// # async fn run() -> Result<(), agent_loop_serve::a2a::client::ConnectError> {
/// let remote = RemoteAgent::connect("http://127.0.0.1:8080").await?;
/// // The tool's name is the card's, made to fit the tool-name rule.
/// use agent_loop::Tool;
/// println!("{}: {}", remote.name(), remote.description());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RemoteAgent {
    inner: Arc<Remote>,
}

impl fmt::Debug for RemoteAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteAgent")
            .field("name", &self.inner.name)
            .field("endpoint", &self.inner.card.endpoint)
            .field("card", &self.inner.card.name)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl RemoteAgent {
    /// Reads the agent card of the A2A agent at `url` and makes a tool of it, with the
    /// default options ([`builder`](Self::builder) for a token, headers, a timeout).
    ///
    /// `url` is the agent's base URL (`https://host`, the card being at
    /// `/.well-known/agent-card.json` under it), or the card's own URL (ending in `.json`).
    pub async fn connect(url: impl Into<String>) -> Result<RemoteAgent, ConnectError> {
        Self::builder(url).connect().await
    }

    /// Options for the agent at `url` (see [`connect`](Self::connect)).
    pub fn builder(url: impl Into<String>) -> RemoteAgentBuilder {
        RemoteAgentBuilder {
            url: url.into(),
            bearer: None,
            headers: Vec::new(),
            timeout: None,
            name: None,
            description: None,
            endpoint: None,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        }
    }

    /// What the card says.
    pub fn card(&self) -> &RemoteCard {
        &self.inner.card
    }
}

/// The shared state of a [`RemoteAgent`].
struct Remote {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    card: RemoteCard,
    name: String,
    description: String,
    timeout: Option<Duration>,
    max_answer_bytes: usize,
    next_id: AtomicU64,
}

#[async_trait]
impl Tool for RemoteAgent {
    type Input = RemoteTask;

    fn name(&self) -> &str {
        &self.inner.name
    }

    fn description(&self) -> &str {
        &self.inner.description
    }

    fn timeout(&self) -> Option<Duration> {
        self.inner.timeout
    }

    async fn call(&self, input: RemoteTask, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let remote = &self.inner;
        let mut narrator = narrate::Narrator::new(&ctx, &remote.name);
        let (text, task) = match reply::read(&ctx) {
            reply::Next::Start => (input.task, None),
            reply::Next::Send { text, task } => (text, Some(task)),
            reply::Next::Cancel { task, error } => {
                let cancelled = remote.cancel_bounded(&task.task_id).await;
                narrator.cancelled().await;
                return Err(ToolError::new(match cancelled {
                    Ok(()) => error,
                    Err(e) => format!("{error} (the remote task could not be cancelled: {e})"),
                }));
            }
            reply::Next::Refuse(error) => return Err(ToolError::new(error)),
        };
        narrator.start().await;
        let live = Arc::new(Mutex::new(task.as_ref().map(|t| t.task_id.clone())));
        // Cancels the remote task unless disarmed: on our cancel, a timeout (the future is
        // dropped) or a failure that leaves the task running.
        let mut guard = CancelOnDrop {
            remote: self.inner.clone(),
            task: live.clone(),
            armed: true,
        };
        let mut exchange =
            Exchange::new(remote.max_answer_bytes, task, live.clone(), &ctx, narrator);
        let work = remote.exchange(text, &mut exchange);
        let ended = tokio::select! {
            biased;
            () = ctx.cancellation().cancelled() => None,
            ended = work => Some(ended),
        };
        let Some(ended) = ended else {
            // Armed until the cancel is answered: dropped meanwhile, it sends one again.
            let id = lock(&live).clone();
            let note = match id {
                Some(id) => match remote.cancel_bounded(&id).await {
                    Ok(()) => format!(": its task {id} was cancelled"),
                    Err(e) => format!(": its task {id} could not be cancelled ({e})"),
                },
                None => String::new(),
            };
            guard.armed = false;
            return Err(ToolError::new(format!(
                "the call to the remote agent was cancelled{note}"
            )));
        };
        let end = match ended {
            Ok(end) => end,
            Err(e) => {
                // The guard cancels a task that is still going.
                return Err(ToolError::new(format!(
                    "the remote agent {:?} failed: {e}",
                    remote.card.name
                )));
            }
        };
        guard.armed = false;
        exchange.narrator.close(&end).await;
        end.into_result(&remote.card.name)
    }
}

/// Cancels the remote task when dropped armed (the call's future dropped, or a failure).
struct CancelOnDrop {
    remote: Arc<Remote>,
    task: Arc<Mutex<Option<String>>>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(id) = lock(&self.task).take() else {
            return;
        };
        // Best effort: there is no runtime to send it on when the runtime itself is going.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let remote = self.remote.clone();
            runtime.spawn(async move {
                let _ = remote.cancel_bounded(&id).await;
            });
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl End {
    fn into_result(self, agent: &str) -> Result<ToolOutput, ToolError> {
        match self {
            End::Completed(answer) => Ok(ToolOutput::text(answer)),
            End::Failed { state, why } => {
                let verb = if state == "rejected" {
                    "rejected the task"
                } else {
                    "failed"
                };
                Err(ToolError::new(match why {
                    Some(why) => format!("the remote agent {agent:?} {verb}: {why}"),
                    None => format!("the remote agent {agent:?} {verb} (it gave no reason)"),
                }))
            }
            End::Canceled { why } => Err(ToolError::new(match why {
                Some(why) => format!("the remote agent {agent:?} cancelled the task: {why}"),
                None => format!("the remote agent {agent:?} cancelled the task"),
            })),
            End::Asks {
                state,
                question,
                task,
            } => Err(reply::ask(agent, &state, question, &task)),
        }
    }
}

/// What one call knows of its remote task so far, and where it reports it.
struct Exchange {
    progress: Progress,
    /// The task id, shared with the cancel guard.
    live: Arc<Mutex<Option<String>>>,
    /// The last state reported as a progress note.
    reported: Option<String>,
    ctx: ToolContext,
    narrator: narrate::Narrator,
}

impl Exchange {
    fn new(
        max_answer_bytes: usize,
        task: Option<TaskIds>,
        live: Arc<Mutex<Option<String>>>,
        ctx: &ToolContext,
        narrator: narrate::Narrator,
    ) -> Self {
        let mut progress = Progress::new(max_answer_bytes);
        if let Some(task) = task {
            progress.task_id = Some(task.task_id);
            progress.context_id = task.context_id;
        }
        Exchange {
            progress,
            live,
            reported: None,
            ctx: ctx.clone(),
            narrator,
        }
    }

    /// Takes one result (a `StreamResponse`, or a `SendMessage`/`GetTask` answer).
    async fn take(&mut self, result: &Value) -> Result<(), String> {
        let mut notes = Vec::new();
        self.progress.apply(result, &mut notes)?;
        if let Some(id) = &self.progress.task_id {
            let mut live = lock(&self.live);
            if live.as_deref() != Some(id) {
                *live = Some(id.clone());
            }
        }
        if let (Some(id), Some(state)) = (&self.progress.task_id, &self.progress.state) {
            if self.reported.as_ref() != Some(state) {
                self.reported = Some(state.clone());
                self.ctx.report_progress(format!("task {id}: {state}"));
            }
        }
        for note in notes {
            self.narrator.note(note).await;
        }
        Ok(())
    }
}

impl Remote {
    /// Sends `text` (to the task of `exchange`, when it has one) and follows the task until it
    /// ends or asks.
    async fn exchange(&self, text: String, exchange: &mut Exchange) -> Result<End, String> {
        let mut message = json!({
            "messageId": fresh_message_id(),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        });
        if let Some(id) = &exchange.progress.task_id {
            message["taskId"] = json!(id);
        }
        if let Some(id) = &exchange.progress.context_id {
            message["contextId"] = json!(id);
        }
        let params = json!({"message": message});
        if self.card.streaming {
            self.stream(params, exchange).await?;
        } else {
            let result = self.rpc("SendMessage", params).await?;
            exchange.take(&result).await?;
        }
        if let Some(end) = exchange.progress.end() {
            return Ok(end);
        }
        // The stream ended early: what the task is now.
        let state = exchange
            .progress
            .state
            .clone()
            .unwrap_or_else(|| "unknown".to_owned());
        let Some(id) = exchange.progress.task_id.clone() else {
            return Err("the remote agent answered with neither a task nor a message".to_owned());
        };
        if self.card.streaming {
            let task = self.rpc("GetTask", json!({"id": id})).await?;
            exchange.take(&json!({"task": task})).await?;
            if let Some(end) = exchange.progress.end() {
                return Ok(end);
            }
        }
        Err(format!(
            "the remote agent stopped answering while its task {id} was {state} (the task \
             is cancelled)"
        ))
    }

    /// A JSON-RPC request to the endpoint.
    fn request(&self, method: &str, params: Value) -> reqwest::RequestBuilder {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.http
            .post(self.endpoint.clone())
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }

    /// Calls a method that does not stream; its result.
    async fn rpc(&self, method: &str, params: Value) -> Result<Value, String> {
        let response = self
            .request(method, params)
            .send()
            .await
            .map_err(|e| describe_reqwest(&e))?;
        let response = check_status(response).await?;
        let body = read_capped(response, MAX_EVENT_BYTES, "the response")
            .await
            .map_err(Capped::into_message)?;
        rpc_result(&body)
    }

    /// `SendStreamingMessage`: takes each event until the task ends or asks.
    async fn stream(&self, params: Value, exchange: &mut Exchange) -> Result<(), String> {
        let response = self
            .request("SendStreamingMessage", params)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| describe_reqwest(&e))?;
        let mut response = check_status(response).await?;
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !is_sse {
            // An error answered at once (or a server that answers in one piece).
            let body = read_capped(response, MAX_EVENT_BYTES, "the response")
                .await
                .map_err(Capped::into_message)?;
            return exchange.take(&rpc_result(&body)?).await;
        }
        let mut decoder = SseDecoder::with_limits(SseLimits::new(MAX_EVENT_BYTES, MAX_EVENT_BYTES));
        let mut events = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| describe_reqwest(&e))?;
            let decoded = match &chunk {
                Some(chunk) => decoder.push(chunk, &mut events),
                None => decoder.finish(&mut events),
            };
            decoded.map_err(|e| format!("its event stream is not valid: {e}"))?;
            for event in std::mem::take(&mut events) {
                let Some(result) = stream_result(&event)? else {
                    continue;
                };
                exchange.take(&result).await?;
                if exchange.progress.end().is_some() {
                    return Ok(());
                }
            }
            if chunk.is_none() {
                return Ok(());
            }
        }
    }

    /// `CancelTask`, bounded by [`CANCEL_TIMEOUT`]; `Ok` when the task is cancelled (or
    /// was over already).
    async fn cancel_bounded(&self, task_id: &str) -> Result<(), String> {
        let cancel = self.rpc("CancelTask", json!({"id": task_id}));
        match tokio::time::timeout(CANCEL_TIMEOUT, cancel).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("no answer within {CANCEL_TIMEOUT:?}")),
        }
    }
}

/// A message id no other message of this process has.
fn fresh_message_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("msg-{nanos:x}-{:x}-{n:x}", std::process::id())
}

/// The text of a reqwest error with its causes (the connection refused, the timeout).
fn describe_reqwest(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    let mut depth = 0;
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
        depth += 1;
        if depth > 8 {
            break;
        }
    }
    text
}

/// The response when its status is a success; an error quoting the start of its body
/// otherwise.
async fn check_status(response: reqwest::Response) -> Result<reqwest::Response, String> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let hint = match status.as_u16() {
        401 | 403 => {
            " (the server wants credentials: set them with RemoteAgent::builder(..)\
             .bearer_token(..) or .header(..))"
        }
        _ => "",
    };
    let body = match read_capped(response, MAX_ERROR_BODY_BYTES, "").await {
        Ok(body) => String::from_utf8_lossy(&body).into_owned(),
        Err(_) => String::new(),
    };
    let body = body.trim();
    Err(if body.is_empty() {
        format!("HTTP {status}{hint}")
    } else {
        format!("HTTP {status}{hint}: {body}")
    })
}

/// Why a capped read failed.
enum Capped {
    TooLarge(String),
    Read(String),
}

impl Capped {
    fn into_message(self) -> String {
        match self {
            Capped::TooLarge(m) | Capped::Read(m) => m,
        }
    }
}

/// Reads the body, at most `limit` bytes (an error past it; for an empty `what`, the first
/// `limit` bytes).
async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
    what: &str,
) -> Result<Vec<u8>, Capped> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Capped::Read(describe_reqwest(&e)))?
    {
        if body.len() + chunk.len() > limit {
            if what.is_empty() {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..room]);
                return Ok(body);
            }
            return Err(Capped::TooLarge(format!(
                "{what} is larger than {limit} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The host's answer to a remote task's question: what the re-run of the call does.
mod reply {
    use super::*;
    use agent_loop::tool::{Question, Resolution};

    /// What the call does on its (re-)run.
    #[derive(Debug, PartialEq)]
    pub(super) enum Next {
        /// A first run: start a task with the input.
        Start,
        /// Send `text` to the task that asked.
        Send { text: String, task: TaskIds },
        /// Cancel the task that asked; the call's result is `error`.
        Cancel { task: TaskIds, error: String },
        /// The reply cannot be used (its question names no remote task).
        Refuse(String),
    }

    /// What the host's answer (if this is a re-run) means: a result is the text to send, an
    /// approval sends "approved", a denial (or an error result) cancels the remote task.
    pub(super) fn read(ctx: &ToolContext) -> Next {
        match ctx.reply() {
            None => Next::Start,
            Some(reply) => next(&reply.question.data, &reply.resolution),
        }
    }

    pub(super) fn next(data: &Value, resolution: &Resolution) -> Next {
        let text = |key: &str| {
            data.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let Some(task_id) = text("task_id") else {
            return Next::Refuse(
                "the answer is to a question that names no remote task (its data has no \
                 task_id): call the tool again to start a new task"
                    .to_owned(),
            );
        };
        let task = TaskIds {
            task_id,
            context_id: text("context_id"),
        };
        match resolution {
            Resolution::Approve => Next::Send {
                text: APPROVED.to_owned(),
                task,
            },
            Resolution::Result {
                content,
                is_error: false,
            } => Next::Send {
                text: content.clone(),
                task,
            },
            Resolution::Result {
                content,
                is_error: true,
            } => Next::Cancel {
                task,
                error: format!(
                    "the answer was an error, so the remote task was cancelled: {content}"
                ),
            },
            Resolution::Deny { reason } => Next::Cancel {
                task,
                error: format!("denied: {reason}"),
            },
            other => Next::Cancel {
                task,
                error: format!("the answer {other:?} is not one this tool knows"),
            },
        }
    }

    /// What an approval sends the remote agent.
    pub(super) const APPROVED: &str = "approved";

    /// The question of a remote task that waits: the remote's own words (for
    /// `auth-required`, saying that it asks for authorization), with the task's ids as data.
    pub(super) fn ask(
        agent: &str,
        state: &str,
        question: Option<String>,
        task: &TaskIds,
    ) -> ToolError {
        let words = question
            .unwrap_or_else(|| format!("The remote agent {agent:?} needs more input to go on."));
        let prompt = if state == "auth-required" {
            format!("The remote agent {agent:?} asks for authorization: {words}")
        } else {
            words
        };
        let data = json!({
            "task_id": task.task_id,
            "context_id": task.context_id,
            "state": state,
        });
        ToolError::ask(Question::new(prompt).data(data))
    }
}

/// The task's progress as nested events of the call, in the run grammar: `TurnStart`, the
/// status messages as `ThinkingDelta`, the artifacts' text as `TextDelta`, `TurnEnd` and
/// `Finished`. A task that asks leaves its turn open, as a paused run does: the re-run with
/// the answer continues it (no `TurnStart`), so the events of the call's path, across the
/// pause, are one run.
mod narrate {
    use super::*;
    use agent_loop::agent::NestedEvents;
    use agent_loop::{AgentEvent, RunOutcome, StopReason, Termination};

    /// The one turn of a remote task's nested run.
    const TURN: u32 = 1;

    /// Sends a call's nested events.
    pub(super) struct Narrator {
        events: Option<NestedEvents>,
        /// Whether this run continues a turn left open by a question.
        continuing: bool,
    }

    impl Narrator {
        pub(super) fn new(ctx: &ToolContext, name: &str) -> Self {
            Narrator {
                events: ctx.nested(name),
                continuing: ctx.reply().is_some(),
            }
        }

        async fn send(&self, event: AgentEvent) {
            if let Some(events) = &self.events {
                // `false`: the run stopped listening; the call goes on to its end.
                let _ = events.send(event).await;
            }
        }

        /// The task starts (or, after a question, goes on).
        pub(super) async fn start(&mut self) {
            if !self.continuing {
                self.send(AgentEvent::TurnStart { turn: TURN }).await;
                self.continuing = true;
            }
        }

        pub(super) async fn note(&mut self, note: Note) {
            let event = match note {
                Note::Status(mut text) => {
                    text.push('\n');
                    AgentEvent::ThinkingDelta { text }
                }
                Note::Text { text, new_artifact } => AgentEvent::TextDelta {
                    text: if new_artifact {
                        format!("\n\n{text}")
                    } else {
                        text
                    },
                },
            };
            self.send(event).await;
        }

        /// The task ended (or asks: then the turn stays open).
        pub(super) async fn close(&mut self, end: &End) {
            let (stop, termination, text) = match end {
                End::Asks { .. } => return,
                End::Completed(answer) => {
                    (StopReason::EndTurn, Termination::Completed, answer.clone())
                }
                End::Failed { state, .. } if state == "rejected" => {
                    (StopReason::EndTurn, Termination::Refused, String::new())
                }
                End::Failed { why, .. } => {
                    let why = why
                        .clone()
                        .unwrap_or_else(|| "the remote task failed".to_owned());
                    let error = agent_loop::Error::Tool(ToolError::new(why));
                    (
                        StopReason::EndTurn,
                        Termination::Error(error),
                        String::new(),
                    )
                }
                End::Canceled { .. } => (
                    StopReason::Other("interrupted".to_owned()),
                    Termination::Cancelled,
                    String::new(),
                ),
            };
            self.finish(stop, termination, text).await;
        }

        /// Our side cancelled the task (a denial).
        pub(super) async fn cancelled(&mut self) {
            self.finish(
                StopReason::Other("interrupted".to_owned()),
                Termination::Cancelled,
                String::new(),
            )
            .await;
        }

        async fn finish(&mut self, stop: StopReason, termination: Termination, text: String) {
            if self.events.is_none() {
                return;
            }
            self.start().await;
            self.send(AgentEvent::TurnEnd {
                turn: TURN,
                stop_reason: stop,
                usage: agent_loop::Usage::default(),
                cost: Default::default(),
            })
            .await;
            let mut outcome = RunOutcome::new(termination);
            outcome.final_text = text;
            outcome.turns = TURN;
            self.send(AgentEvent::Finished(outcome)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_to_a_remote_question_means_what_the_docs_say() {
        use agent_loop::tool::Resolution;
        use reply::Next;
        let data = json!({"task_id": "t1", "context_id": "c1", "state": "input-required"});
        let task = TaskIds {
            task_id: "t1".to_owned(),
            context_id: Some("c1".to_owned()),
        };
        assert_eq!(
            reply::next(&data, &Resolution::Approve),
            Next::Send {
                text: "approved".to_owned(),
                task: task.clone()
            }
        );
        let result = Resolution::Result {
            content: "Paris".to_owned(),
            is_error: false,
        };
        assert_eq!(
            reply::next(&data, &result),
            Next::Send {
                text: "Paris".to_owned(),
                task: task.clone()
            }
        );
        let deny = Resolution::Deny {
            reason: "not today".to_owned(),
        };
        assert_eq!(
            reply::next(&data, &deny),
            Next::Cancel {
                task: task.clone(),
                error: "denied: not today".to_owned()
            }
        );
        let error = Resolution::Result {
            content: "no idea".to_owned(),
            is_error: true,
        };
        assert!(matches!(reply::next(&data, &error), Next::Cancel { .. }));
        // A question that names no task (not this tool's, or mangled): refused, not guessed.
        for data in [json!(null), json!({"task_id": ""}), json!({"task_id": 7})] {
            assert!(matches!(
                reply::next(&data, &Resolution::Approve),
                Next::Refuse(_)
            ));
        }
        // Without a context id the task's id is enough.
        assert_eq!(
            reply::next(&json!({"task_id": "t2"}), &Resolution::Approve),
            Next::Send {
                text: "approved".to_owned(),
                task: TaskIds {
                    task_id: "t2".to_owned(),
                    context_id: None
                }
            }
        );
    }

    #[test]
    fn a_remote_question_is_asked_in_its_own_words_with_the_task_as_data() {
        let task = TaskIds {
            task_id: "t1".to_owned(),
            context_id: Some("c1".to_owned()),
        };
        let error = reply::ask(
            "Oracle",
            "input-required",
            Some("Which city?".into()),
            &task,
        );
        let question = error.question().unwrap();
        assert_eq!(question.prompt, "Which city?");
        assert_eq!(
            question.data,
            json!({"task_id": "t1", "context_id": "c1", "state": "input-required"})
        );
        let auth = reply::ask("Oracle", "auth-required", None, &task);
        let prompt = &auth.question().unwrap().prompt;
        assert!(
            prompt.contains("authorization") && prompt.contains("\"Oracle\""),
            "{prompt}"
        );
    }
}
