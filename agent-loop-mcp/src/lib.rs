//! Model Context Protocol tools for [`agent_loop`]: connect to an MCP server and give the
//! agent its tools.
//!
//! ```text
//!  McpServer::stdio(..) / ::http(..)  ──connect──►  McpConnection  (one live session; restarted
//!   (command, args, env, cwd | URL,                  │              on the next call after a
//!    headers; prefix, filter, timeout)               │              crash, a bounded number of
//!                                                    │              times; the child is killed
//!                                                    ▼              and reaped when dropped)
//!                                        tools/list (all pages) → McpTool per tool
//!                                                    │  name (prefixed, made provider-safe),
//!                                                    │  description, inputSchema (the registry's
//!                                                    ▼  schema rules; unions flattened)
//!                                        ToolRegistry / AgentBuilder::tool_source
//!                                                    │
//!  tools/call ◄── McpTool::call (progress token; progress → ToolProgress; dropped on cancel or
//!                                timeout → notifications/cancelled)
//!      │
//!      ▼  text → text, images → images, resources inlined, structuredContent as JSON,
//!         isError → error result
//!
//!  during a tools/call, the server may ask (each off unless the host turns it on):
//!    elicitation/create      ──► the call asks (ToolError::ask): the run pauses, the tools/call
//!    (McpServer::elicitation)     waits in the connection; the resumed run's answer goes to
//!                                 the server (accept / decline / cancel) and the call goes on
//!    sampling/createMessage  ──► the host's model answers, under the run's token budget; its
//!    (McpServer::sampling)        usage is a nested run of the call (SubAgent events)
//! ```
//!
//! # Servers that ask
//!
//! A server may send a request back while it serves a tool call: a question for a person
//! ([`Elicitation`]) or a completion from the client's model ([`Sampling`]). The client
//! declares and serves each only when the host gives it the part; otherwise questions are
//! declined and sampling requests refused. A request is served as part of the tool call it
//! belongs to (over streamable HTTP, the one whose response stream it came on; over stdio,
//! the one call in flight), never for another call; one that belongs to no call is refused.
//!
//! ```no_run
//! use agent_loop::agent::{Resolutions, Termination};
//! use agent_loop::{Agent, AgentEvent, AnthropicClient};
//! use agent_loop_mcp::{Elicitation, McpServer, Sampling};
//! use futures::StreamExt;
//!
//! # async fn demo() -> Result<(), agent_loop::Error> {
//! let bookings = McpServer::http("bookings", "http://127.0.0.1:3001/mcp")
//!     .elicitation(Elicitation::new())
//!     .sampling(Sampling::new(AnthropicClient::from_env()?.model("claude-haiku-4-5")))
//!     .connect()
//!     .await?;
//! let mut agent = Agent::builder(AnthropicClient::from_env()?)
//!     .tool_source(bookings)
//!     .build()?;
//! let events: Vec<AgentEvent> = agent.run("Book a table for Friday.").collect().await;
//! if let Some(AgentEvent::Finished(outcome)) = events.last() {
//!     if let Termination::Paused(paused) = &outcome.termination {
//!         let call = &paused.pending()[0];
//!         let question = call.question.as_ref().expect("the server asked");
//!         println!("{}", question.prompt); // "How many seats on Friday?"
//!         // The person's answer, as JSON matching question.schema:
//!         let answer = Resolutions::new().result(&call.id, r#"{"seats": 4}"#);
//!         let _resumed: Vec<AgentEvent> = agent.resume(paused, answer).collect().await;
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Example
//!
//! ```no_run
//! use agent_loop::{Agent, AnthropicClient};
//! use agent_loop_mcp::McpServer;
//!
//! # async fn demo() -> Result<(), agent_loop::Error> {
//! let files = McpServer::stdio("files", "npx")
//!     .args(["-y", "@modelcontextprotocol/server-filesystem", "/tmp/work"])
//!     .prefix("fs_")
//!     .connect()
//!     .await?;
//! let agent = Agent::builder(AnthropicClient::from_env()?)
//!     .tool_source(files)
//!     .build()?;
//! # let _ = agent;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs, unreachable_pub)]

mod call;
mod convert;
mod elicit;
mod route;
mod sampling;
mod server;
mod session;

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
#[allow(deprecated)] // sampling: see sampling.rs
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, CreateMessageRequestParams,
    CreateMessageResult, CustomResult, ElicitationAction, ErrorData, PaginatedRequestParams,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;

use agent_loop::error::ConfigError;
use agent_loop::tool::{Concurrency, Question, Reply, ToolSource};
use agent_loop::Error;
use agent_loop::{
    AgentEvent, RunOutcome, StopReason, Termination, Tool, ToolContext, ToolError, ToolOutput,
    ToolRegistry, Usage,
};
use call::{CancelOnDrop, Flight};
use convert::quote;
pub use elicit::Elicitation;
use elicit::{Asked, Missing, Parked, Verdict};
use route::{InFlight, ServerAsk};
pub use sampling::Sampling;
pub use server::McpServer;
use session::{Handler, Session};

/// At most this many tools are taken from one server.
const MAX_TOOLS: usize = 1024;
/// At most this many pages of `tools/list` are read.
const MAX_PAGES: usize = 100;

impl McpServer {
    /// Starts the server, runs the MCP handshake and lists its tools (every page).
    ///
    /// # Errors
    ///
    /// [`Error::Tool`] when the server cannot be started or reached, the handshake fails or
    /// times out, or listing the tools fails; [`Error::Config`] for an invalid header.
    pub async fn connect(self) -> Result<McpConnection, Error> {
        let handler = Handler {
            server: Arc::from(self.name.as_str()),
            progress: Default::default(),
            tools_changed: Default::default(),
            elicitation: self.elicitation.clone(),
            sampling: self.sampling.is_some(),
            in_flight: Default::default(),
        };
        let session = session::connect(&self, &handler).await?;
        let parked = self.elicitation.clone().map(Parked::new);
        let inner = Arc::new(Inner {
            server: self,
            handler,
            parked,
            session: tokio::sync::Mutex::new(Some(session)),
            failed_connects: AtomicU32::new(0),
            tools: Mutex::new(Vec::new()),
        });
        let connection = McpConnection { inner };
        connection.refresh().await?;
        Ok(connection)
    }
}

/// `tools/list`, every page, bounded: at most [`MAX_PAGES`] pages and [`MAX_TOOLS`] tools
/// (a server that pages on and on keeps what was listed, with a warning).
async fn list_tools(
    peer: &Peer<RoleClient>,
    server: &str,
) -> Result<Vec<rmcp::model::Tool>, ServiceError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer.list_tools(Some(params)).await?;
        tools.extend(page.tools);
        if tools.len() >= MAX_TOOLS {
            tracing::warn!(
                server,
                "MCP server lists over {MAX_TOOLS} tools; taking the first {MAX_TOOLS}"
            );
            tools.truncate(MAX_TOOLS);
            return Ok(tools);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(tools),
        }
    }
    tracing::warn!(
        server,
        "MCP server lists tools over more than {MAX_PAGES} pages; taking those"
    );
    Ok(tools)
}

/// The state of one connection, shared by its [`McpConnection`] clones and its tools.
struct Inner {
    server: McpServer,
    handler: Handler,
    /// The calls waiting for the host's answer to a server's question (elicitation on).
    parked: Option<Arc<Parked>>,
    session: tokio::sync::Mutex<Option<Session>>,
    failed_connects: AtomicU32,
    /// The listed tools (no handle on the connection: tools hold `Inner`, `Inner` holds these).
    tools: Mutex<Vec<ToolInfo>>,
}

impl Inner {
    fn name(&self) -> String {
        quote(&self.server.name)
    }

    /// The live session's peer and calls in flight; starts the server again when the
    /// session has died (at most `max_reconnects` failed starts in a row).
    async fn peer(&self) -> Result<(Peer<RoleClient>, Arc<InFlight>), ToolError> {
        let mut guard = self.session.lock().await;
        if let Some(session) = guard.as_mut() {
            if !session.is_closed() {
                return Ok((session.peer(), session.in_flight()));
            }
            tracing::warn!(server = %self.server.name, "MCP server connection lost; restarting it");
        }
        if let Some(old) = guard.take() {
            old.close().await;
        }
        let failed = self.failed_connects.load(Ordering::Acquire);
        if failed >= self.server.max_reconnects {
            return Err(ToolError::new(format!(
                "MCP server {} is down: restarting it failed {failed} times in a row",
                self.name()
            )));
        }
        match session::connect(&self.server, &self.handler).await {
            Ok(session) => {
                self.failed_connects.store(0, Ordering::Release);
                let peer = (session.peer(), session.in_flight());
                *guard = Some(session);
                Ok(peer)
            }
            Err(e) => {
                self.failed_connects.fetch_add(1, Ordering::AcqRel);
                Err(ToolError::new(format!("{e}")))
            }
        }
    }

    /// Why the session failed, for an error message.
    async fn failure_reason(&self) -> Option<String> {
        let mut guard = self.session.lock().await;
        let session = guard.as_mut()?;
        if session.oversized() {
            Some(format!(
                "it sent a message over the {}-byte limit, so the connection was closed",
                self.server.max_message_bytes
            ))
        } else if session.is_closed() {
            Some("the connection closed (the server exited or crashed)".to_owned())
        } else {
            None
        }
    }
}

/// A live connection to an MCP server, with the tools it offers. Cheap to clone.
///
/// Dropping the last clone (and the last of its tools, which hold the connection) ends the
/// session: a child process is killed and reaped by tokio. [`close`](Self::close) does the
/// same and waits for the child to exit.
#[derive(Clone)]
pub struct McpConnection {
    inner: Arc<Inner>,
}

impl McpConnection {
    /// The server's name, as given to [`McpServer::stdio`] or [`McpServer::http`].
    pub fn name(&self) -> &str {
        &self.inner.server.name
    }

    /// The server's tools (the ones that pass the filter), as of the last listing.
    pub fn tools(&self) -> Vec<McpTool> {
        self.inner
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|info| McpTool {
                info: info.clone(),
                connection: self.inner.clone(),
            })
            .collect()
    }

    /// Registers the server's tools in `registry`; returns how many.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the server and the tool when a tool's name is taken or its
    /// input schema breaks the registry's rules (see [`ToolRegistry::register`]; a top-level
    /// `oneOf` of object schemas is flattened, other unions are refused). Tools registered
    /// before the failing one stay registered.
    pub fn register(&self, registry: &mut ToolRegistry) -> Result<usize, Error> {
        let tools = self.tools();
        for tool in &tools {
            registry
                .register(tool.clone())
                .map_err(|e| self.explain(tool, e))?;
        }
        Ok(tools.len())
    }

    fn explain(&self, tool: &McpTool, e: Error) -> Error {
        match e {
            Error::Config(ConfigError::Tool {
                tool: name,
                message,
            }) => Error::Config(ConfigError::Tool {
                tool: name,
                message: format!(
                    "MCP server {}, tool {}: {message}",
                    quote(self.name()),
                    quote(&tool.info.remote)
                ),
            }),
            other => other,
        }
    }

    /// Whether the server said its tool list changed (`notifications/tools/list_changed`)
    /// since the last [`refresh`](Self::refresh). Tools already registered keep working
    /// (calls go by the server's name). An agent given the connection with
    /// [`AgentBuilder::tool_source`](agent_loop::AgentBuilder::tool_source) refreshes it between turns by itself (see
    /// [`ToolSource`]); elsewhere, refresh and register the tools in a new registry.
    ///
    /// The flag is set as the notification is read, before any message the server sent
    /// after it (such as the result of the call that changed the list) is handled. One
    /// connection has one flag: when several agents share it, the first to refresh clears
    /// it for all.
    pub fn tools_changed(&self) -> bool {
        self.inner.handler.tools_changed.load(Ordering::Acquire)
    }

    /// Lists the server's tools again (every page).
    ///
    /// # Errors
    ///
    /// [`Error::Tool`] when the server cannot be reached or the listing fails.
    pub async fn refresh(&self) -> Result<(), Error> {
        let inner = &self.inner;
        let (peer, _) = inner.peer().await?;
        inner.handler.tools_changed.store(false, Ordering::Release);
        let listed = list_tools(&peer, &inner.server.name).await.map_err(|e| {
            Error::Tool(ToolError::new(format!(
                "MCP server {}: listing its tools failed: {e}",
                inner.name()
            )))
        })?;
        let filter = inner.server.filter.clone();
        let tools: Vec<ToolInfo> = listed
            .into_iter()
            .filter(|t| filter.as_ref().is_none_or(|keep| keep(&t.name)))
            .map(|t| ToolInfo {
                name: convert::tool_name(&inner.server.prefix, &t.name),
                remote: t.name.to_string(),
                description: t
                    .description
                    .as_deref()
                    .or(t.title.as_deref())
                    .unwrap_or_default()
                    .to_owned(),
                schema: convert::input_schema(&t.input_schema),
                read_only: t
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            })
            .collect();
        *inner.tools.lock().unwrap_or_else(PoisonError::into_inner) = tools;
        Ok(())
    }

    /// The process id of the server's child process (stdio servers, while running).
    pub async fn process_id(&self) -> Option<u32> {
        self.inner.session.lock().await.as_ref()?.process_id()
    }

    /// Ends the session now: closes the connection, kills a child process and waits for it.
    /// Calls waiting for the answer to a server's question are given up (the server is
    /// answered `cancel`; resuming them gives an error result saying so). A later call of one
    /// of its tools starts the server again.
    pub async fn close(&self) {
        if let Some(parked) = &self.inner.parked {
            parked.give_up_all("the connection to the server was closed");
        }
        if let Some(session) = self.inner.session.lock().await.take() {
            session.close().await;
        }
    }
}

impl fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpConnection")
            .field("server", &self.inner.server)
            .field(
                "tools",
                &self
                    .inner
                    .tools
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .map(|t| t.name.clone())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What the server says about one tool.
#[derive(Debug, Clone)]
struct ToolInfo {
    name: String,
    remote: String,
    description: String,
    schema: Value,
    read_only: bool,
}

/// One tool of an MCP server, as the registry takes it: a [`Tool`] with JSON input, the
/// server's description and input schema, and [read-only](Tool::read_only) when the server
/// annotates it `readOnlyHint`. It holds its connection: the server runs while any of its
/// tools (or a [`McpConnection`] clone) is alive.
///
/// A call sends a progress token (the server's progress notifications become
/// [`ToolProgress`](agent_loop::tool::ToolProgress) notes), and a call stopped by cancellation or its
/// timeout sends `notifications/cancelled`. Content maps as follows: text as text; an image
/// is sent to the model as an image (see [`ToolOutput::with_images`]) and named in the text
/// where it came (`[image: image/png, 1234 bytes]`); audio is named; an embedded text resource is
/// inlined under its URI, a binary one named with its size; `structuredContent` is added as
/// JSON unless a text block already holds the same JSON; `isError` makes an error result. A
/// server that crashes or hangs answers the call with an error, and the next call starts it
/// again.
///
/// When the server asks during the call: a question ([`Elicitation`], when turned on) makes
/// the call [ask](ToolError::ask), so the run pauses, and the call's re-run (with
/// [`ToolContext::reply`]) answers the server and goes on; a sampling request ([`Sampling`],
/// when given) is served by the host's model as part of the call.
#[derive(Clone)]
pub struct McpTool {
    info: ToolInfo,
    connection: Arc<Inner>,
}

impl McpTool {
    /// The tool's name on the server (the model sees [`Tool::name`], with the prefix).
    pub fn remote_name(&self) -> &str {
        &self.info.remote
    }

    /// The name of the server the tool belongs to.
    pub fn server_name(&self) -> &str {
        &self.connection.server.name
    }

    /// The error for a call whose connection failed.
    async fn lost(&self, error: ServiceError) -> ToolError {
        let reason = self
            .connection
            .failure_reason()
            .await
            .unwrap_or_else(|| error.to_string());
        self.fail(format_args!(
            "{reason}; the server is started again on the next call"
        ))
    }

    fn fail(&self, what: impl fmt::Display) -> ToolError {
        ToolError::new(format!(
            "MCP server {}, tool {}: {what}",
            self.connection.name(),
            quote(&self.info.remote)
        ))
    }
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.info.name)
            .field("remote", &self.info.remote)
            .field("server", &self.connection.server.name)
            .field("read_only", &self.info.read_only)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Tool for McpTool {
    type Input = Value;

    fn name(&self) -> &str {
        &self.info.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn input_schema(&self) -> Value {
        self.info.schema.clone()
    }

    fn read_only(&self) -> bool {
        self.info.read_only
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        self.connection.server.concurrency.clone()
    }

    fn timeout(&self) -> Option<Duration> {
        self.connection.server.timeout
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let flight = match ctx.reply() {
            // The re-run of a call that paused for the server's question: answer it.
            Some(reply) => self.answer(reply, &ctx)?,
            None => self.start(input).await?,
        };
        self.fly(flight, &ctx).await
    }
}

/// Whether a call that got a question waits for the host's answer.
enum Parking {
    /// It waits: the run pauses with this question.
    Asked(ToolError),
    /// It cannot wait (the question was declined): the call goes on.
    GoOn(Flight),
}

/// What happened next in a call in flight.
enum Next {
    Done(Result<ServerResult, ServiceError>),
    Progress(rmcp::model::ProgressNotificationParam),
    Ask(ServerAsk),
}

impl McpTool {
    /// Sends the `tools/call`.
    async fn start(&self, input: Value) -> Result<Flight, ToolError> {
        let (peer, in_flight) = self.connection.peer().await?;
        let mut params = CallToolRequestParams::new(self.info.remote.clone());
        if let Value::Object(arguments) = input {
            params = params.with_arguments(arguments);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // Sent and registered under the gate: the server's requests for this call cannot be
        // routed before it is registered.
        let gate = in_flight.gate().await;
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                drop(gate);
                return Err(self.lost(e).await);
            }
        };
        let (registered, asks) = gate.register(handle.id.clone());
        // rmcp gives every request its own progress token; subscribe before the server can
        // have read the request (it is only queued for the transport so far).
        let progress_token = handle.progress_token.clone();
        let progress = self
            .connection
            .handler
            .progress
            .subscribe(progress_token.clone())
            .await;
        // Until the answer arrives, dropping the flight (cancellation, timeout, a question
        // given up) sends `notifications/cancelled` for the request.
        let cancel = CancelOnDrop {
            peer,
            id: Some(handle.id.clone()),
        };
        Ok(Flight {
            response: Box::pin(handle.await_response()),
            progress_token,
            progress: Some(progress),
            asks,
            _registered: registered,
            cancel,
        })
    }

    /// Drives the call until its answer comes (or the server asks a question: the call then
    /// waits in `Parked`, and the run pauses).
    async fn fly(&self, mut flight: Flight, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let connection = &self.connection;
        let mut progress = match flight.progress.take() {
            Some(progress) => progress,
            None => {
                connection
                    .handler
                    .progress
                    .subscribe(flight.progress_token.clone())
                    .await
            }
        };
        // What this call's sampling spent so far: `tokens_left` is what the budget had left
        // when the call started.
        let mut sampled: u64 = 0;
        let result = loop {
            let next = tokio::select! {
                result = &mut flight.response => Next::Done(result),
                Some(note) = progress.next() => Next::Progress(note),
                Some(ask) = flight.asks.recv() => Next::Ask(ask),
            };
            match next {
                Next::Done(result) => break result,
                Next::Progress(note) => {
                    ctx.report_progress(convert::progress_text(
                        note.progress,
                        note.total,
                        note.message.as_deref(),
                    ));
                }
                Next::Ask(ServerAsk::Sample { params, reply }) => {
                    let answer = self.sample(params, ctx, &mut sampled).await;
                    let _ = reply.send(answer);
                }
                Next::Ask(ServerAsk::Elicit { params, reply }) => {
                    let asked = Asked {
                        params,
                        reply,
                        asks: 1,
                    };
                    // Notes that come while the call waits are dropped, not piled up.
                    drop(progress);
                    match self.park(flight, asked, ctx, None) {
                        Parking::Asked(question) => return Err(question),
                        Parking::GoOn(back) => {
                            flight = back;
                            progress = connection
                                .handler
                                .progress
                                .subscribe(flight.progress_token.clone())
                                .await;
                        }
                    }
                }
            }
        };
        flight.cancel.disarm();
        // Notes that came in with the answer.
        while let Some(Some(note)) = progress.next().now_or_never() {
            ctx.report_progress(convert::progress_text(
                note.progress,
                note.total,
                note.message.as_deref(),
            ));
        }
        let json = match result {
            Ok(ServerResult::CallToolResult(result)) => {
                serde_json::to_value(&result).map_err(|e| self.fail(e))?
            }
            // A result rmcp could not read as a CallToolResult (a content type it does not
            // know): read the JSON here.
            Ok(ServerResult::CustomResult(CustomResult(json))) => json,
            Ok(_) => {
                return Err(self.fail("the server answered with something other than a tool result"))
            }
            Err(ServiceError::McpError(e)) => {
                return Err(self.fail(format_args!("the server refused the call: {}", e.message)))
            }
            Err(e) => return Err(self.lost(e).await),
        };
        convert::into_output(convert::map_result(&json))
    }

    /// Parks the call until the host answers the server's question; gives the flight back
    /// (after declining the question) when the call cannot wait: elicitation off, no run to
    /// pause, or too many calls waiting.
    fn park(&self, flight: Flight, asked: Asked, ctx: &ToolContext, note: Option<&str>) -> Parking {
        let decline = |asked: Asked, why: &str| {
            tracing::warn!(
                server = %self.connection.server.name,
                tool = %self.info.remote,
                "MCP elicitation declined: {why}"
            );
            asked.answer(elicit::action(ElicitationAction::Decline));
        };
        let Some(parked) = &self.connection.parked else {
            decline(asked, "elicitation is not turned on");
            return Parking::GoOn(flight);
        };
        // A call run outside an agent run (a bare registry) has no host to ask.
        if ctx.nested("elicitation").is_none() {
            decline(
                asked,
                "the call runs outside an agent run, so no one can answer the question",
            );
            return Parking::GoOn(flight);
        }
        let ticket = elicit::new_ticket();
        let question = elicit::question(
            &self.connection.server.name,
            &self.info.remote,
            &asked.params,
            &ticket,
            note,
        );
        match parked.park(ticket, ctx.call_id().to_owned(), flight, asked) {
            None => Parking::Asked(ToolError::ask(question)),
            Some((flight, asked)) => {
                decline(
                    asked,
                    &format!(
                        "{} calls already wait for answers on this connection \
                         (Elicitation::max_parked)",
                        parked.config.max_parked
                    ),
                );
                Parking::GoOn(flight)
            }
        }
    }

    /// The re-run of a call that paused: gives the host's answer to the server and takes up
    /// the call again; asks again when the answer does not fit the question; an error when no
    /// call waits for the answer.
    fn answer(&self, reply: &Reply, ctx: &ToolContext) -> Result<Flight, ToolError> {
        let Some(ticket) = elicit::ticket_of(&reply.question) else {
            return Err(self.unanswerable(
                &reply.question,
                "the question did not come from this server's elicitation",
            ));
        };
        let Some(parked) = &self.connection.parked else {
            return Err(self.unanswerable(
                &reply.question,
                "this connection does not take elicitation (McpServer::elicitation is not set), \
                 so no call waits on it",
            ));
        };
        let waiting =
            match parked.take(ticket, ctx.call_id()) {
                Ok(waiting) => waiting,
                Err(Missing::OtherProcess) => return Err(self.unanswerable(
                    &reply.question,
                    "the run was resumed in another process (or after a restart), and the call \
                     waited for the answer in the process that paused the run, on its \
                     connection to the server",
                )),
                Err(Missing::Gone(why)) => return Err(self.unanswerable(&reply.question, &why)),
                Err(Missing::Unknown) => {
                    return Err(self.unanswerable(
                        &reply.question,
                        "no call waits for it on this connection (it was answered already, or the \
                     run was paused on another connection to the server)",
                    ))
                }
            };
        let flight = waiting.flight;
        let mut asked = waiting.asked;
        match elicit::verdict(&asked.params, &reply.resolution) {
            Verdict::Answer(result) => asked.answer(result),
            Verdict::AskAgain(note) if asked.asks < elicit::MAX_ASKS => {
                asked.asks += 1;
                return match self.park(flight, asked, ctx, Some(&note)) {
                    Parking::Asked(question) => Err(question),
                    Parking::GoOn(flight) => Ok(flight),
                };
            }
            Verdict::AskAgain(note) => {
                tracing::warn!(
                    server = %self.connection.server.name,
                    tool = %self.info.remote,
                    "MCP elicitation declined after {} answers that did not fit: {note}",
                    elicit::MAX_ASKS
                );
                asked.answer(elicit::action(ElicitationAction::Decline));
            }
        }
        Ok(flight)
    }

    /// The error result of a re-run that cannot answer the server's question.
    fn unanswerable(&self, question: &Question, why: &str) -> ToolError {
        let (prompt, cut) = convert::cut_at(&question.prompt, 200);
        let prompt = if cut {
            format!("{prompt}…")
        } else {
            prompt.to_owned()
        };
        self.fail(format_args!(
            "the server asked {} during this call, and that question can no longer be \
             answered: {why}. The server did not get the answer and the call did not finish; \
             call the tool again to start over",
            quote(&prompt)
        ))
    }

    /// Serves a sampling request of this call with the host's model, under the run's budget.
    #[allow(deprecated)] // sampling: see sampling.rs
    async fn sample(
        &self,
        params: CreateMessageRequestParams,
        ctx: &ToolContext,
        sampled: &mut u64,
    ) -> Result<CreateMessageResult, ErrorData> {
        let Some(config) = &self.connection.server.sampling else {
            return Err(sampling::refuse(
                "this client serves no sampling requests: its host gave it no model \
                 (McpServer::sampling)"
                    .to_owned(),
            ));
        };
        let prepared = sampling::prepare(config, &params).map_err(sampling::refuse)?;
        let mut request = prepared.request;
        request.max_tokens = sampling::max_tokens(
            params.max_tokens,
            config.max_tokens,
            ctx.tokens_left().map(|left| left.saturating_sub(*sampled)),
            prepared.input_tokens,
        )
        .map_err(sampling::refuse)?;
        let nested = ctx.nested("sampling");
        let report = |event: AgentEvent| {
            let nested = nested.clone();
            async move {
                if let Some(nested) = nested {
                    nested.send(event).await;
                }
            }
        };
        report(AgentEvent::TurnStart { turn: 1 }).await;
        let response = sampling::complete(&*config.client, &request, |text| {
            Box::pin(report(AgentEvent::TextDelta {
                text: text.to_owned(),
            }))
        })
        .await;
        // The nested run's end: its turn's usage, then `Finished` (the calling run counts
        // the usage toward its spending and budgets).
        let (stop_reason, usage, termination, answer) = match response {
            Ok(response) => (
                response.stop_reason.clone(),
                response.usage,
                Termination::Completed,
                Ok(sampling::into_result(&response, config.client.model())),
            ),
            Err(e) => {
                let answer = Err(ErrorData::internal_error(
                    format!("the client's model failed: {e}"),
                    None,
                ));
                (
                    StopReason::Other("interrupted".to_owned()),
                    Usage::default(),
                    Termination::Error(Error::from(e)),
                    answer,
                )
            }
        };
        *sampled = sampled.saturating_add(usage.total_tokens());
        report(AgentEvent::TurnEnd {
            turn: 1,
            stop_reason,
            usage,
            cost: Default::default(),
        })
        .await;
        let mut outcome = RunOutcome::new(termination);
        outcome.usage = usage;
        outcome.turns = 1;
        if let Ok(result) = &answer {
            outcome.final_text = sampling::text_of(result);
        }
        report(AgentEvent::Finished(outcome)).await;
        answer
    }
}

/// The server's tools as a source the agent refreshes between turns when the server says
/// its list changed.
impl ToolSource for McpConnection {
    fn changed(&self) -> bool {
        self.tools_changed()
    }

    fn refresh(&self) -> futures::future::BoxFuture<'_, Result<(), Error>> {
        Box::pin(McpConnection::refresh(self))
    }

    fn register(&self, registry: &mut ToolRegistry) -> Result<usize, Error> {
        McpConnection::register(self, registry)
    }
}

#[cfg(test)]
mod tests {
    use super::server::Transport;
    use super::*;

    #[test]
    fn debug_output_shows_no_secrets() {
        let http = McpServer::http("remote", "http://127.0.0.1:9/mcp")
            .header("Authorization", "Bearer sk-secret-1")
            .prefix("r_");
        let debug = format!("{http:?}");
        assert!(
            debug.contains("Authorization") && debug.contains("r_"),
            "{debug}"
        );
        assert!(!debug.contains("sk-secret-1"), "{debug}");
        let stdio = McpServer::stdio("local", "server")
            .args(["--root", "/tmp"])
            .env("API_TOKEN", "tok-secret-2")
            .current_dir("/tmp");
        let debug = format!("{stdio:?}");
        assert!(
            debug.contains("API_TOKEN") && debug.contains("--root"),
            "{debug}"
        );
        assert!(!debug.contains("tok-secret-2"), "{debug}");
    }

    #[test]
    fn settings_for_one_transport_leave_the_other_alone() {
        let http = McpServer::http("h", "http://127.0.0.1:9/mcp")
            .arg("x")
            .env("K", "V")
            .current_dir("/");
        assert!(matches!(&http.transport, Transport::Http { headers, .. } if headers.is_empty()));
        let stdio = McpServer::stdio("s", "cmd").header("K", "V");
        match &stdio.transport {
            Transport::Stdio { args, env, cwd, .. } => {
                assert!(args.is_empty() && env.is_empty() && cwd.is_none())
            }
            Transport::Http { .. } => panic!("stdio became http"),
        }
        assert_eq!(
            McpServer::stdio("s", "c")
                .max_message_bytes(0)
                .max_message_bytes,
            1
        );
    }

    #[tokio::test]
    async fn a_command_that_does_not_exist_is_a_clear_error() {
        let error = McpServer::stdio("ghost", "/nonexistent/agent-loop-mcp-server")
            .connect()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("MCP server \"ghost\": could not start"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_program_that_is_no_mcp_server_fails_the_handshake() {
        // `true` exits at once without a word: the handshake cannot complete.
        let error = McpServer::stdio("silent", "true")
            .connect()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("MCP server \"silent\": the MCP handshake failed"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_invalid_header_is_a_configuration_error() {
        let error = McpServer::http("h", "http://127.0.0.1:9/mcp")
            .header("Bad Header", "v")
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Config(_)), "{error}");
    }
}
