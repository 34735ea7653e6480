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
//! let app = router(&service, AgentCard::new("geographer", "Knows capitals.", &url));
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

use agent_loop::wire::sse::{SseDecoder, SseEvent, SseLimits};
use agent_loop::{async_trait, Tool, ToolContext, ToolError, ToolOutput};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

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
/// The most artifacts of one task kept apart (a peer could name any number).
const MAX_ARTIFACTS: usize = 256;
/// The most skills listed in the tool's description.
const MAX_SKILLS_LISTED: usize = 32;
/// The longest tool description made from a card (bytes).
const MAX_DESCRIPTION_BYTES: usize = 4096;
/// The most of a status message's text kept (bytes): a failure's reason, a question.
const MAX_STATUS_BYTES: usize = 64 * 1024;
/// The most of an HTTP error's body quoted in the error (bytes).
const MAX_ERROR_BODY_BYTES: usize = 1024;
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

/// A skill of a remote agent, from its card.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSkill {
    /// The skill's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Example requests.
    pub examples: Vec<String>,
}

/// What a remote agent's card says, as far as this client reads it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCard {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its version.
    pub version: String,
    /// Its skills.
    pub skills: Vec<RemoteSkill>,
    /// Whether it streams (`capabilities.streaming`): without it, calls use `SendMessage`.
    pub streaming: bool,
    /// The JSON-RPC endpoint calls go to: the card's first A2A 1.x JSON-RPC interface (or
    /// [`RemoteAgentBuilder::endpoint`]).
    pub endpoint: String,
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

/// The remote task a message goes to (for a reply to a task that asked).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TaskIds {
    task_id: String,
    context_id: Option<String>,
}

/// How a call's exchange with the remote agent ended.
#[derive(Debug, Clone, PartialEq)]
enum End {
    /// Completed, with the answer.
    Completed(String),
    /// Failed or rejected (the state, and the status message's text).
    Failed { state: String, why: Option<String> },
    /// Cancelled (by the remote side: ours does not get here).
    Canceled { why: Option<String> },
    /// Waits for input (`input-required`) or authorization (`auth-required`).
    Asks {
        state: String,
        question: Option<String>,
        task: TaskIds,
    },
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

/// The card's URL: `url` itself when it names a `.json` file, else the well-known path
/// under it.
fn card_url(url: &str) -> Result<reqwest::Url, String> {
    let parsed =
        reqwest::Url::parse(url.trim()).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?} is not an http(s) URL"));
    }
    if parsed.path().ends_with(".json") {
        return Ok(parsed);
    }
    let mut base = parsed;
    let path = format!(
        "{}/.well-known/agent-card.json",
        base.path().trim_end_matches('/')
    );
    base.set_path(&path);
    base.set_query(None);
    Ok(base)
}

/// Reads an agent card; an error saying what is wrong with it.
fn parse_card(body: &[u8], card_url: &reqwest::Url) -> Result<RemoteCard, String> {
    let card: Value = serde_json::from_slice(body).map_err(|e| format!("it is not JSON ({e})"))?;
    let Some(card) = card.as_object() else {
        return Err("it is not a JSON object".to_owned());
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let name = text(card.get("name"));
    if name.trim().is_empty() {
        return Err("it has no name".to_owned());
    }
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let skills = card
        .get("skills")
        .and_then(Value::as_array)
        .map(|skills| {
            skills
                .iter()
                .filter(|s| s.is_object())
                .map(|s| RemoteSkill {
                    id: text(s.get("id")),
                    name: text(s.get("name")),
                    description: text(s.get("description")),
                    tags: strings(s.get("tags")),
                    examples: strings(s.get("examples")),
                })
                .collect()
        })
        .unwrap_or_default();
    let streaming = card
        .get("capabilities")
        .and_then(|c| c.get("streaming"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let jsonrpc_1 = interfaces.iter().find(|i| {
        let binding = i.get("protocolBinding").and_then(Value::as_str);
        let version = i.get("protocolVersion").and_then(Value::as_str);
        binding.is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
            && version.is_none_or(|v| v == "1" || v.starts_with("1."))
            && i.get("url").is_some_and(Value::is_string)
    });
    let Some(interface) = jsonrpc_1 else {
        let offered: Vec<String> = interfaces
            .iter()
            .map(|i| {
                format!(
                    "{} {}",
                    i.get("protocolBinding")
                        .and_then(Value::as_str)
                        .unwrap_or("?"),
                    i.get("protocolVersion")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                )
            })
            .collect();
        let offered = if offered.is_empty() {
            "no supportedInterfaces (a pre-1.0 card?)".to_owned()
        } else {
            offered.join(", ")
        };
        return Err(format!(
            "it names no A2A 1.x JSON-RPC interface (it offers: {offered}); this client \
             speaks A2A 1.0 over JSON-RPC"
        ));
    };
    let url = text(interface.get("url"));
    let endpoint = card_url
        .join(&url)
        .map_err(|e| format!("its interface URL {url:?} is not a URL: {e}"))?;
    Ok(RemoteCard {
        name,
        description: text(card.get("description")),
        version: text(card.get("version")),
        skills,
        streaming,
        endpoint: endpoint.to_string(),
    })
}

/// Whether `name` fits the tool-name rule `^[a-zA-Z0-9_-]{1,64}$`.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A card's name made to fit the tool-name rule: each run of other characters becomes one
/// `_`, none at the ends, at most 64 bytes; `remote_agent` when nothing is left.
fn tool_name(card_name: &str) -> String {
    let mut name = String::new();
    let mut gap = false;
    for c in card_name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            if gap && !name.is_empty() {
                name.push('_');
            }
            gap = false;
            name.push(c);
        } else {
            gap = true;
        }
        if name.len() >= 64 {
            break;
        }
    }
    name.truncate(64);
    let name = name.trim_end_matches('_');
    if name.is_empty() {
        "remote_agent".to_owned()
    } else {
        name.to_owned()
    }
}

/// The tool's description made from the card: its description, then its skills.
fn describe(card: &RemoteCard) -> String {
    let mut text = String::new();
    let description = card.description.trim();
    if description.is_empty() {
        text.push_str(&format!("The remote agent {:?}.", card.name));
    } else {
        text.push_str(description);
    }
    text.push_str(&format!(
        "\n\n(A remote A2A agent, {:?}: give it the whole task in `task`; it sees nothing \
         else of this conversation.)",
        card.name
    ));
    if !card.skills.is_empty() {
        text.push_str("\nSkills:");
        for skill in card.skills.iter().take(MAX_SKILLS_LISTED) {
            let name = if skill.name.trim().is_empty() {
                &skill.id
            } else {
                &skill.name
            };
            text.push_str(&format!("\n- {}", name.trim()));
            if !skill.description.trim().is_empty() {
                text.push_str(&format!(": {}", skill.description.trim()));
            }
            if let Some(example) = skill.examples.first() {
                text.push_str(&format!(" (for example: {:?})", example));
            }
        }
        if card.skills.len() > MAX_SKILLS_LISTED {
            text.push_str(&format!(
                "\n- … and {} more",
                card.skills.len() - MAX_SKILLS_LISTED
            ));
        }
    }
    cut(&mut text, MAX_DESCRIPTION_BYTES);
    text
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

/// The result of one JSON-RPC response body; an error for a JSON-RPC error (its code and
/// message) or a body that is not a JSON-RPC response.
fn rpc_result(body: &[u8]) -> Result<Value, String> {
    let response: Value =
        serde_json::from_slice(body).map_err(|e| format!("its answer is not JSON ({e})"))?;
    rpc_value(response)
}

fn rpc_value(mut response: Value) -> Result<Value, String> {
    if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
        let code = error.get("code").and_then(Value::as_i64);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        let mut message = message.to_owned();
        cut(&mut message, MAX_ERROR_BODY_BYTES);
        return Err(match code {
            Some(code) => format!("it answered with error {code}: {message}"),
            None => format!("it answered with an error: {message}"),
        });
    }
    match response.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err("its answer is not a JSON-RPC response (no result, no error)".to_owned()),
    }
}

/// The result an SSE event carries (`None` for an event without data); an error for an
/// `error` event or a JSON-RPC error.
fn stream_result(event: &SseEvent) -> Result<Option<Value>, String> {
    if event.data.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(&event.data)
        .map_err(|e| format!("an event of its stream is not JSON ({e})"))?;
    if event.event == "error" && value.get("error").is_none() {
        return Err(format!("its stream sent an error: {}", value));
    }
    rpc_value(value).map(Some)
}

/// A task state's name in the spec's lower-case form: `TASK_STATE_INPUT_REQUIRED` and
/// `input-required` are both `input-required`.
fn state_name(state: &str) -> String {
    let state = state.strip_prefix("TASK_STATE_").unwrap_or(state);
    state.to_ascii_lowercase().replace('_', "-")
}

/// What happened in an event, for the nested events.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Note {
    /// A status message's text (the remote's progress).
    Status(String),
    /// Text added to an artifact; `new_artifact` when it starts another artifact.
    Text { text: String, new_artifact: bool },
}

/// The remote task as the events so far tell it (sans-IO).
#[derive(Debug)]
struct Progress {
    task_id: Option<String>,
    context_id: Option<String>,
    /// The state, in the lower-case form ([`state_name`]).
    state: Option<String>,
    /// The text of the latest status message.
    status_text: Option<String>,
    artifacts: Artifacts,
    /// The answer, when the remote answered with a message rather than a task.
    message: Option<String>,
}

impl Progress {
    fn new(max_answer_bytes: usize) -> Self {
        Progress {
            task_id: None,
            context_id: None,
            state: None,
            status_text: None,
            artifacts: Artifacts::new(max_answer_bytes),
            message: None,
        }
    }

    /// Takes one result: `{"task"}`, `{"message"}`, `{"statusUpdate"}` or
    /// `{"artifactUpdate"}` (A2A 1.0), or the same kinded by `"kind"` (before 1.0); the notes
    /// of what it adds go to `notes`.
    fn apply(&mut self, result: &Value, notes: &mut Vec<Note>) -> Result<(), String> {
        let kind = result.get("kind").and_then(Value::as_str);
        if let Some(task) = result.get("task").or(kinded(result, kind, "task")) {
            self.take_task(task, notes);
        } else if let Some(message) = result.get("message").or(kinded(result, kind, "message")) {
            let mut text = parts_text(message.get("parts"));
            cut(&mut text, self.artifacts.max_bytes);
            self.message = Some(text.clone());
            if !text.is_empty() {
                notes.push(Note::Text {
                    text,
                    new_artifact: false,
                });
            }
        } else if let Some(update) =
            result
                .get("statusUpdate")
                .or(kinded(result, kind, "status-update"))
        {
            self.take_ids(update, "taskId");
            self.take_status(update.get("status"), notes);
        } else if let Some(update) =
            result
                .get("artifactUpdate")
                .or(kinded(result, kind, "artifact-update"))
        {
            self.take_ids(update, "taskId");
            let append = update.get("append").and_then(Value::as_bool) == Some(true);
            if let Some(artifact) = update.get("artifact") {
                let id = artifact
                    .get("artifactId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let text = parts_text(artifact.get("parts"));
                if let Some(note) = self.artifacts.update(id, &text, append) {
                    notes.push(note);
                }
            }
        } else {
            return Err(format!(
                "an event is none of task, message, statusUpdate, artifactUpdate: {}",
                preview(result)
            ));
        }
        Ok(())
    }

    fn take_ids(&mut self, value: &Value, task_key: &str) {
        if let Some(id) = value.get(task_key).and_then(Value::as_str) {
            if self.task_id.is_none() && !id.is_empty() {
                self.task_id = Some(id.to_owned());
            }
        }
        if let Some(id) = value.get("contextId").and_then(Value::as_str) {
            if self.context_id.is_none() && !id.is_empty() {
                self.context_id = Some(id.to_owned());
            }
        }
    }

    fn take_task(&mut self, task: &Value, notes: &mut Vec<Note>) {
        self.take_ids(task, "id");
        if let Some(artifacts) = task.get("artifacts").and_then(Value::as_array) {
            self.artifacts.replace_all(artifacts);
        }
        self.take_status(task.get("status"), notes);
    }

    fn take_status(&mut self, status: Option<&Value>, notes: &mut Vec<Note>) {
        let Some(status) = status else {
            return;
        };
        if let Some(state) = status.get("state").and_then(Value::as_str) {
            self.state = Some(state_name(state));
        }
        if let Some(message) = status.get("message").filter(|m| m.is_object()) {
            let mut text = parts_text(message.get("parts"));
            cut(&mut text, MAX_STATUS_BYTES);
            if !text.is_empty() && self.status_text.as_ref() != Some(&text) {
                notes.push(Note::Status(text.clone()));
            }
            self.status_text = Some(text);
        }
    }

    /// How the task ended, once it has: a final state, a question, or a message answer.
    fn end(&self) -> Option<End> {
        if self.task_id.is_none() {
            return self.message.clone().map(End::Completed);
        }
        let why = self.status_text.clone().filter(|t| !t.is_empty());
        let state = self.state.as_deref()?;
        Some(match state {
            "completed" => {
                let answer = self.artifacts.joined();
                End::Completed(if answer.is_empty() {
                    why.or_else(|| self.message.clone()).unwrap_or_default()
                } else {
                    answer
                })
            }
            "failed" | "rejected" => End::Failed {
                state: state.to_owned(),
                why,
            },
            "canceled" | "cancelled" => End::Canceled { why },
            "input-required" | "auth-required" => End::Asks {
                state: state.to_owned(),
                question: why,
                task: TaskIds {
                    task_id: self.task_id.clone()?,
                    context_id: self.context_id.clone(),
                },
            },
            _ => return None,
        })
    }
}

/// `value` when its pre-1.0 `kind` is `wanted`.
fn kinded<'a>(value: &'a Value, kind: Option<&str>, wanted: &str) -> Option<&'a Value> {
    (kind == Some(wanted)).then_some(value)
}

/// The start of a value's JSON, for an error message.
fn preview(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > 200 {
        cut(&mut text, 200);
        text.push('…');
    }
    text
}

/// The text of a message's or artifact's parts: text parts' texts run together (an appended
/// chunk is a part of its own, so the streamed text and the stored artifact read the same),
/// each other part on a line of its own: a data part's JSON, a url part's URL; a raw part is
/// named, not copied.
fn parts_text(parts: Option<&Value>) -> String {
    let Some(parts) = parts.and_then(Value::as_array) else {
        return String::new();
    };
    let mut text = String::new();
    let mut after_text = false;
    for part in parts {
        if let Some(piece) = part.get("text").and_then(Value::as_str) {
            text.push_str(piece);
            after_text = true;
            continue;
        }
        let piece = if let Some(data) = part.get("data") {
            data.to_string()
        } else if let Some(url) = part.get("url").and_then(Value::as_str) {
            url.to_owned()
        } else if let Some(uri) = part
            .get("file")
            .and_then(|f| f.get("uri"))
            .and_then(Value::as_str)
        {
            uri.to_owned()
        } else if part.get("raw").is_some() || part.get("file").is_some() {
            let media = part
                .get("mediaType")
                .and_then(Value::as_str)
                .unwrap_or("a file");
            format!("[{media}: left out]")
        } else {
            continue;
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&piece);
        text.push('\n');
        after_text = false;
    }
    if !after_text && text.ends_with('\n') {
        text.pop();
    }
    text
}

/// A task's artifacts, joined as the chunks say (sans-IO, bounded).
#[derive(Debug)]
struct Artifacts {
    /// (artifact id, text), in the order they started. Invariant: at most [`MAX_ARTIFACTS`]
    /// entries, and the texts' bytes sum to at most `max_bytes`.
    items: Vec<(String, String)>,
    max_bytes: usize,
    /// Text was dropped to stay within `max_bytes` (or `MAX_ARTIFACTS`).
    cut: bool,
    /// The artifact the last text note was about.
    last: Option<String>,
}

impl Artifacts {
    fn new(max_bytes: usize) -> Self {
        Artifacts {
            items: Vec::new(),
            max_bytes,
            cut: false,
            last: None,
        }
    }

    fn bytes(&self) -> usize {
        self.items.iter().map(|(_, t)| t.len()).sum()
    }

    /// Takes a chunk of artifact `id`: appended to it with `append`, else replacing it (or
    /// starting it). The note of the text added.
    fn update(&mut self, id: &str, text: &str, append: bool) -> Option<Note> {
        let index = match self.items.iter().position(|(i, _)| i == id) {
            Some(index) => {
                if !append {
                    self.items[index].1.clear();
                }
                index
            }
            None => {
                if self.items.len() >= MAX_ARTIFACTS {
                    self.cut = true;
                    return None;
                }
                self.items.push((id.to_owned(), String::new()));
                self.items.len() - 1
            }
        };
        let room = self.max_bytes.saturating_sub(self.bytes());
        let mut added = text.to_owned();
        if added.len() > room {
            cut(&mut added, room);
            self.cut = true;
        }
        self.items[index].1.push_str(&added);
        if added.is_empty() {
            return None;
        }
        let new_artifact = self.last.as_deref() != Some(id);
        let first = self.last.is_none();
        self.last = Some(id.to_owned());
        Some(Note::Text {
            text: added,
            new_artifact: new_artifact && !first,
        })
    }

    /// Takes a task's whole list of artifacts (no notes: what was streamed stands).
    fn replace_all(&mut self, artifacts: &[Value]) {
        self.items.clear();
        for artifact in artifacts {
            let id = artifact
                .get("artifactId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let text = parts_text(artifact.get("parts"));
            let last = self.last.take();
            self.update(id, &text, false);
            self.last = last;
        }
    }

    /// The answer: the artifacts' texts, a blank line between two; a note at the end when
    /// some was cut.
    fn joined(&self) -> String {
        let texts: Vec<&str> = self
            .items
            .iter()
            .map(|(_, t)| t.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        let mut answer = texts.join("\n\n");
        if self.cut {
            answer.push_str(&format!(
                "\n[… the remote agent's answer was cut at {} bytes]",
                self.max_bytes
            ));
        }
        answer
    }
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
    use proptest::prelude::*;

    fn url() -> reqwest::Url {
        reqwest::Url::parse("http://127.0.0.1:9/.well-known/agent-card.json").unwrap()
    }

    #[test]
    fn the_card_url_is_the_well_known_path_or_the_url_given() {
        let at = |u: &str| card_url(u).unwrap().to_string();
        assert_eq!(at("http://h:1"), "http://h:1/.well-known/agent-card.json");
        assert_eq!(
            at("http://h:1/agents/x/"),
            "http://h:1/agents/x/.well-known/agent-card.json"
        );
        assert_eq!(at("https://h/card.json"), "https://h/card.json");
        assert!(card_url("ftp://h").is_err());
        assert!(card_url("not a url").is_err());
    }

    #[test]
    fn a_card_gives_the_name_skills_streaming_and_the_jsonrpc_interface() {
        let card = json!({
            "name": "Weather Oracle (python)", "description": "Answers about weather.",
            "version": "2.0",
            "supportedInterfaces": [
                {"url": "http://h/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "http://h/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                {"url": "/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": true},
            "skills": [{"id": "f", "name": "Forecast", "description": "Tomorrow.",
                        "tags": ["w"], "examples": ["Rain in Oslo?"]}]
        });
        let card = parse_card(card.to_string().as_bytes(), &url()).unwrap();
        assert_eq!(card.name, "Weather Oracle (python)");
        assert_eq!(card.endpoint, "http://127.0.0.1:9/a2a");
        assert!(card.streaming);
        assert_eq!(card.skills[0].examples, ["Rain in Oslo?"]);
        assert_eq!(tool_name(&card.name), "Weather_Oracle_python");
        let description = describe(&card);
        assert!(
            description.starts_with("Answers about weather."),
            "{description}"
        );
        assert!(
            description.contains("- Forecast: Tomorrow. (for example: \"Rain in Oslo?\")"),
            "{description}"
        );
        // No streaming capability said: SendMessage.
        let plain = json!({"name": "x", "supportedInterfaces":
            [{"url": "http://h/a2a", "protocolBinding": "JSONRPC"}], "capabilities": {}});
        assert!(
            !parse_card(plain.to_string().as_bytes(), &url())
                .unwrap()
                .streaming
        );
    }

    #[test]
    fn a_card_without_a_1_x_jsonrpc_interface_says_what_it_offers() {
        let legacy = json!({"name": "x", "url": "http://h/", "protocolVersion": "0.3.0"});
        let e = parse_card(legacy.to_string().as_bytes(), &url()).unwrap_err();
        assert!(e.contains("no supportedInterfaces"), "{e}");
        let grpc = json!({"name": "x", "supportedInterfaces":
            [{"url": "http://h", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]});
        let e = parse_card(grpc.to_string().as_bytes(), &url()).unwrap_err();
        assert!(e.contains("GRPC 1.0"), "{e}");
        assert!(parse_card(b"[]", &url())
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(parse_card(b"{\"name\": \" \"}", &url())
            .unwrap_err()
            .contains("no name"));
    }

    #[test]
    fn tool_names_fit_the_rule() {
        assert_eq!(tool_name("adder"), "adder");
        assert_eq!(tool_name("  Café — bot!! "), "Caf_bot");
        assert_eq!(tool_name("???"), "remote_agent");
        assert_eq!(tool_name(&"x".repeat(100)).len(), 64);
        assert_eq!(tool_name("a__b"), "a__b");
        assert!(valid_tool_name("ok-name_1"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name("a b"));
    }

    #[test]
    fn chunks_join_as_append_and_replace_say() {
        let mut artifacts = Artifacts::new(1000);
        let notes: Vec<_> = [
            artifacts.update("a", "The answer ", false),
            artifacts.update("a", "is 42.", true),
            artifacts.update("b", "Second.", false),
            artifacts.update("a", "Replaced.", false),
        ]
        .into_iter()
        .flatten()
        .collect();
        assert_eq!(artifacts.joined(), "Replaced.\n\nSecond.");
        assert_eq!(
            notes[2],
            Note::Text {
                text: "Second.".to_owned(),
                new_artifact: true
            }
        );
        assert_eq!(
            notes[0],
            Note::Text {
                text: "The answer ".to_owned(),
                new_artifact: false
            }
        );
    }

    #[test]
    fn the_answer_is_cut_at_its_limit_and_says_so() {
        let mut artifacts = Artifacts::new(10);
        artifacts.update("a", "0123456789abc", false);
        artifacts.update("a", "more", true);
        assert_eq!(
            artifacts.joined(),
            "0123456789\n[… the remote agent's answer was cut at 10 bytes]"
        );
        let mut many = Artifacts::new(1 << 20);
        for i in 0..MAX_ARTIFACTS + 10 {
            many.update(&i.to_string(), "x", false);
        }
        assert_eq!(many.items.len(), MAX_ARTIFACTS);
    }

    #[test]
    fn a_streamed_task_ends_with_its_state() {
        let mut progress = Progress::new(1000);
        let mut notes = Vec::new();
        let events = [
            json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            json!({"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING",
                "message": {"role": "ROLE_AGENT", "parts": [{"text": "Looking"}]}}}}),
            json!({"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "4"}]}}}),
            json!({"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "2"}]},
                "append": true, "lastChunk": true}}),
        ];
        for event in &events {
            progress.apply(event, &mut notes).unwrap();
            assert_eq!(progress.end(), None);
        }
        progress
            .apply(
                &json!({"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}}),
                &mut notes,
            )
            .unwrap();
        assert_eq!(progress.end(), Some(End::Completed("42".to_owned())));
        assert_eq!(notes[0], Note::Status("Looking".to_owned()));

        let mut asks = Progress::new(1000);
        asks.apply(
            &json!({"kind": "status-update", "taskId": "t2", "contextId": "c2",
                "status": {"state": "input-required", "message": {"parts": [{"kind": "text", "text": "Which city?"}]}}}),
            &mut notes,
        )
        .unwrap();
        assert_eq!(
            asks.end(),
            Some(End::Asks {
                state: "input-required".to_owned(),
                question: Some("Which city?".to_owned()),
                task: TaskIds {
                    task_id: "t2".to_owned(),
                    context_id: Some("c2".to_owned())
                }
            })
        );
        let mut message = Progress::new(1000);
        message
            .apply(
                &json!({"message": {"parts": [{"text": "Hi"}, {"data": {"a": 1}}]}}),
                &mut notes,
            )
            .unwrap();
        assert_eq!(
            message.end(),
            Some(End::Completed("Hi\n{\"a\":1}".to_owned()))
        );
        let parts = json!([{"text": "The answer "}, {"text": "is 42."}, {"url": "http://x"}, {"text": "!"}]);
        assert_eq!(parts_text(Some(&parts)), "The answer is 42.\nhttp://x\n!");
        assert!(Progress::new(10)
            .apply(&json!({"x": 1}), &mut notes)
            .is_err());
    }

    #[test]
    fn json_rpc_errors_and_stream_errors_are_errors() {
        let e = rpc_result(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"nope"}}"#)
            .unwrap_err();
        assert_eq!(e, "it answered with error -32001: nope");
        assert!(rpc_result(b"{}").is_err());
        assert!(rpc_result(b"nope").is_err());
        let event = SseEvent {
            event: "error".to_owned(),
            data: "{\"detail\": \"boom\"}".to_owned(),
            id: None,
            retry: None,
        };
        assert!(stream_result(&event).unwrap_err().contains("boom"));
    }

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

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-zA-Z0-9 ._-]{0,8}".prop_map(Value::from),
            prop::sample::select(vec![
                "TASK_STATE_COMPLETED",
                "TASK_STATE_INPUT_REQUIRED",
                "input-required",
                "failed",
                "TASK_STATE_WORKING",
                "JSONRPC",
                "1.0",
                "http://h/a2a",
                "/x",
            ])
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "task",
                        "message",
                        "statusUpdate",
                        "artifactUpdate",
                        "kind",
                        "id",
                        "taskId",
                        "contextId",
                        "status",
                        "state",
                        "artifacts",
                        "artifact",
                        "artifactId",
                        "parts",
                        "text",
                        "data",
                        "url",
                        "raw",
                        "append",
                        "lastChunk",
                        "name",
                        "description",
                        "skills",
                        "supportedInterfaces",
                        "protocolBinding",
                        "protocolVersion",
                        "capabilities",
                        "streaming",
                        "examples",
                        "result",
                        "error",
                        "code",
                    ])
                    .prop_map(str::to_owned),
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any bytes as a card, a JSON-RPC answer or an event: a value or an error, never a
        /// panic.
        #[test]
        fn any_bytes_parse_or_fail(body in prop::collection::vec(any::<u8>(), 0..96)) {
            let _ = parse_card(&body, &url());
            let _ = rpc_result(&body);
            let event = SseEvent {
                event: "message".to_owned(),
                data: String::from_utf8_lossy(&body).into_owned(),
                id: None,
                retry: None,
            };
            let _ = stream_result(&event);
        }

        /// Any JSON as a card: a card whose tool name fits the rule, or an error.
        #[test]
        fn any_card_json_is_a_card_or_an_error(value in json_value(), name in ".{0,80}") {
            let mut value = value;
            if let Some(object) = value.as_object_mut() {
                object.insert("name".to_owned(), Value::from(name));
            }
            if let Ok(card) = parse_card(value.to_string().as_bytes(), &url()) {
                prop_assert!(valid_tool_name(&tool_name(&card.name)));
                prop_assert!(describe(&card).len() <= MAX_DESCRIPTION_BYTES);
            }
        }

        /// Any events: no panic, and the answer kept stays within its limit (plus the note
        /// that says it was cut).
        #[test]
        fn any_events_keep_the_answer_bounded(events in prop::collection::vec(json_value(), 0..12)) {
            let mut progress = Progress::new(64);
            let mut notes = Vec::new();
            for event in &events {
                let _ = progress.apply(event, &mut notes);
                let _ = progress.end();
            }
            prop_assert!(progress.artifacts.bytes() <= 64);
            prop_assert!(progress.artifacts.items.len() <= MAX_ARTIFACTS);
            if let Some(End::Completed(answer)) = progress.end() {
                prop_assert!(answer.len() <= 64 + 80 || progress.message.is_some() || progress.status_text.is_some());
            }
        }

        /// Any names: the tool name fits the rule.
        #[test]
        fn any_name_makes_a_valid_tool_name(name in "\\PC{0,100}") {
            prop_assert!(valid_tool_name(&tool_name(&name)));
        }

        /// Chunks with append join to their concatenation, whatever their split.
        #[test]
        fn appended_chunks_join_to_the_whole(text in "[a-z ]{0,40}", cuts in prop::collection::vec(0usize..40, 0..5)) {
            let mut points: Vec<usize> = cuts.into_iter().filter(|&c| c <= text.len()).collect();
            points.sort_unstable();
            points.dedup();
            let mut artifacts = Artifacts::new(1000);
            let mut start = 0;
            for (i, &p) in points.iter().chain(std::iter::once(&text.len())).enumerate() {
                artifacts.update("a", &text[start..p], i > 0);
                start = p;
            }
            prop_assert_eq!(artifacts.joined(), text);
        }
    }
}
