//! One live connection to an MCP server: starting it (a child process over stdio, or
//! streamable HTTP), the client handler that takes its notifications, the child's stderr
//! sent to `tracing`, and the size limit on what it sends.

// rmcp marks sampling deprecated (SEP-2577, from protocol 2026-07-28 on); servers on
// 2025-11-25, the revision this client speaks, still send it.
#![allow(deprecated)]

use std::collections::HashMap;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::StreamExt;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, ErrorCode,
    ErrorData, FormElicitationCapability, Implementation, JsonRpcMessage,
    ProgressNotificationParam, SamplingCapability, ServerNotification, UrlElicitationCapability,
};
use rmcp::service::{
    NotificationContext, RequestContext, RunningService, RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport as RmcpTransport};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStderr};
use tokio::sync::oneshot;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use super::server::{McpServer, Transport};
use crate::convert::quote;
use crate::elicit::Elicitation;
use crate::route::{InFlight, Route, ServerAsk};
use agent_loop::error::ConfigError;
use agent_loop::Error;
use agent_loop::ToolError;

/// A stderr line longer than this is logged cut.
const MAX_STDERR_LINE: usize = 8 * 1024;

/// What the server tells us between calls, and what it asks of us during them. The
/// notification state is shared by every session of one connection, so progress
/// subscriptions and the list-changed flag survive a reconnect; the calls in flight are each
/// session's own.
#[derive(Clone)]
pub(crate) struct Handler {
    pub(crate) server: Arc<str>,
    pub(crate) progress: ProgressDispatcher,
    pub(crate) tools_changed: Arc<AtomicBool>,
    /// Elicitation, when the host turned it on.
    pub(crate) elicitation: Option<Elicitation>,
    /// Whether the host gave a sampling model.
    pub(crate) sampling: bool,
    /// This session's tools/call requests in flight.
    pub(crate) in_flight: Arc<InFlight>,
}

impl Handler {
    /// The handler of a new session: a fresh map of calls in flight (request ids start over).
    fn for_session(&self) -> Handler {
        Handler {
            in_flight: Arc::default(),
            ..self.clone()
        }
    }

    /// The call a server request belongs to; `None` (after saying why in the log) when it
    /// belongs to none or to one that cannot be told.
    async fn route(
        &self,
        what: &str,
        context: &RequestContext<RoleClient>,
    ) -> Result<tokio::sync::mpsc::Sender<ServerAsk>, String> {
        match self.in_flight.route(&context.extensions).await {
            Route::Call(tx) => Ok(tx),
            Route::Outside => Err(format!(
                "the server sent {what} outside any tool call of this client; it is served only \
                 as part of a tool call"
            )),
            Route::Ambiguous(calls) => Err(format!(
                "the server sent {what} while {calls} tool calls were in flight, over a \
                 transport that does not say which call it belongs to (stdio); refused rather \
                 than answered for the wrong call (give the server Concurrency::Exclusive, or \
                 use streamable HTTP)"
            )),
        }
    }
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // The flag was set as the notification was read (`WatchListChanged`).
        tracing::debug!(server = %self.server, "MCP server changed its tool list");
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let decline = |why: &str| {
            tracing::warn!(server = %self.server, "MCP elicitation declined: {why}");
            Ok(ElicitResult::new(ElicitationAction::Decline))
        };
        let Some(elicitation) = &self.elicitation else {
            return decline(
                "elicitation is not turned on for this server (McpServer::elicitation)",
            );
        };
        if matches!(request, ElicitRequestParams::UrlElicitationParams { .. }) && !elicitation.url {
            return decline("URL mode is turned off (Elicitation::url_mode)");
        }
        let call = match self.route("a question", &context).await {
            Ok(call) => call,
            Err(why) => return decline(&why),
        };
        let (reply, answer) = oneshot::channel();
        if call
            .try_send(ServerAsk::Elicit {
                params: request,
                reply,
            })
            .is_err()
        {
            return decline("the tool call it belongs to has ended, or has questions waiting");
        }
        tokio::select! {
            // A call that ends without answering (given up, cancelled) drops `reply`.
            answer = answer => Ok(answer.unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel))),
            // The server withdrew the question.
            () = context.ct.cancelled() => Ok(ElicitResult::new(ElicitationAction::Cancel)),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let refuse = |code: ErrorCode, why: String| {
            tracing::warn!(server = %self.server, "MCP sampling request refused: {why}");
            Err(ErrorData::new(code, why, None))
        };
        if !self.sampling {
            return refuse(
                ErrorCode::METHOD_NOT_FOUND,
                "this client serves no sampling requests: its host gave it no model \
                 (McpServer::sampling)"
                    .to_owned(),
            );
        }
        let call = match self.route("a sampling request", &context).await {
            Ok(call) => call,
            Err(why) => return refuse(ErrorCode::INVALID_REQUEST, why),
        };
        let (reply, answer) = oneshot::channel();
        if call.try_send(ServerAsk::Sample { params, reply }).is_err() {
            return refuse(
                ErrorCode::INVALID_REQUEST,
                "the tool call it belongs to has ended, or has requests waiting".to_owned(),
            );
        }
        tokio::select! {
            answer = answer => answer.unwrap_or_else(|_| Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                "the tool call this request belongs to ended before it was served",
                None,
            ))),
            () = context.ct.cancelled() => Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                "cancelled by the server",
                None,
            )),
        }
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if let Some(elicitation) = &self.elicitation {
            let mut declared =
                ElicitationCapability::new().with_form(FormElicitationCapability::new());
            if elicitation.url {
                declared = declared.with_url(UrlElicitationCapability::new());
            }
            capabilities.elicitation = Some(declared);
        }
        if self.sampling {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        ClientConfig::new(
            capabilities,
            Implementation::new("agent-loop", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A running connection: the rmcp service and, for stdio, the child process.
pub(crate) struct Session {
    service: RunningService<RoleClient, Handler>,
    /// The session's tools/call requests in flight.
    in_flight: Arc<InFlight>,
    /// Killed when dropped (`kill_on_drop`); tokio reaps it.
    child: Option<Child>,
    /// Set when the server sent a message over the size limit (the connection is then closed).
    oversized: Arc<AtomicBool>,
}

impl Session {
    pub(crate) fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    pub(crate) fn in_flight(&self) -> Arc<InFlight> {
        self.in_flight.clone()
    }

    /// Whether the connection is gone: the service ended, its transport closed, or the child
    /// process exited.
    pub(crate) fn is_closed(&mut self) -> bool {
        let exited = match &mut self.child {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => false,
        };
        exited || self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    pub(crate) fn oversized(&self) -> bool {
        self.oversized.load(Ordering::Acquire)
    }

    pub(crate) fn process_id(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Ends the session: stops the service, kills the child and waits for it (no zombie).
    pub(crate) async fn close(mut self) {
        let _ = self.service.cancel().await;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// Starts the server and runs the MCP handshake.
pub(crate) async fn connect(server: &McpServer, handler: &Handler) -> Result<Session, Error> {
    let handler = &handler.for_session();
    let in_flight = handler.in_flight.clone();
    let name = quote(&server.name);
    let oversized = Arc::new(AtomicBool::new(false));
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::Tool(ToolError::new(format!("MCP server {name}: {what}: {e}")))
    };
    let connecting = async {
        match &server.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args)
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let mut child = cmd
                    .spawn()
                    .map_err(|e| fail(&format!("could not start {}", quote(command)), &e))?;
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(fail("could not start it", &"no stdio pipes"));
                };
                if let Some(stderr) = child.stderr.take() {
                    tokio::spawn(forward_stderr(handler.server.clone(), stderr));
                }
                let stdout = LineLimit::new(stdout, server.max_message_bytes, oversized.clone());
                let transport = WatchListChanged {
                    inner: AsyncRwTransport::new_client(stdout, stdin)
                        .with_max_line_length(server.max_message_bytes.saturating_add(1)),
                    flag: handler.tools_changed.clone(),
                };
                let service = handler
                    .clone()
                    .serve(transport)
                    .await
                    .map_err(|e| fail("the MCP handshake failed", &e))?;
                Ok(Session {
                    service,
                    in_flight: in_flight.clone(),
                    child: Some(child),
                    oversized: oversized.clone(),
                })
            }
            Transport::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (key, value) in headers {
                    let key = http::HeaderName::from_bytes(key.as_bytes()).map_err(|e| {
                        Error::Config(ConfigError::Setting {
                            setting: "McpServer::header",
                            message: format!("MCP server {name}: header name: {e}"),
                        })
                    })?;
                    let value = http::HeaderValue::from_str(value).map_err(|_| {
                        Error::Config(ConfigError::Setting {
                            setting: "McpServer::header",
                            message: format!(
                                "MCP server {name}: the value of header {} is not a valid header \
                                 value",
                                quote(key.as_str())
                            ),
                        })
                    })?;
                    custom.insert(key, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom)
                    .max_sse_event_size(server.max_message_bytes)
                    .max_json_response_size(server.max_message_bytes);
                // reqwest 0.13 (rmcp's HTTP client) builds without a crypto provider of its own
                // and panics without a process default: install ring's, unless the host
                // installed one.
                if rustls::crypto::CryptoProvider::get_default().is_none() {
                    let _ = rustls::crypto::ring::default_provider().install_default();
                }
                let transport = WatchListChanged {
                    inner: StreamableHttpClientTransport::from_config(config),
                    flag: handler.tools_changed.clone(),
                };
                let service = handler
                    .clone()
                    .serve(transport)
                    .await
                    .map_err(|e| fail("the MCP handshake failed", &e))?;
                Ok(Session {
                    service,
                    in_flight: in_flight.clone(),
                    child: None,
                    oversized: oversized.clone(),
                })
            }
        }
    };
    match tokio::time::timeout(server.connect_timeout, connecting).await {
        Ok(result) => result,
        Err(_) => Err(Error::Tool(ToolError::new(format!(
            "MCP server {name}: no answer to the MCP handshake within {:?}",
            server.connect_timeout
        )))),
    }
}

/// Sends each stderr line of the server to `tracing` (target `agent_loop_mcp::stderr`),
/// never to the terminal; long lines are cut.
async fn forward_stderr(server: Arc<str>, stderr: ChildStderr) {
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(MAX_STDERR_LINE));
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => {
                tracing::info!(target: "agent_loop_mcp::stderr", server = %server, "{line}")
            }
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                tracing::info!(target: "agent_loop_mcp::stderr", server = %server, "[a stderr line over {MAX_STDERR_LINE} bytes was dropped]");
            }
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}

/// The server's stdout, ended (EOF) at the first line longer than the limit, with the flag
/// set: the connection closes and the pending calls fail, saying why, instead of waiting for
/// an answer that was dropped.
struct LineLimit<R> {
    inner: R,
    max: usize,
    line: usize,
    tripped: Arc<AtomicBool>,
}

impl<R> LineLimit<R> {
    fn new(inner: R, max: usize, tripped: Arc<AtomicBool>) -> Self {
        LineLimit {
            inner,
            max,
            line: 0,
            tripped,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimit<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.tripped.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &poll {
            let new = buf.filled().get(before..).unwrap_or(&[]);
            for &byte in new {
                if byte == b'\n' {
                    this.line = 0;
                } else {
                    this.line += 1;
                    if this.line > this.max {
                        this.tripped.store(true, Ordering::Release);
                        // Hide what was read: the transport sees the end of the stream.
                        buf.set_filled(before);
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
        poll
    }
}

/// A transport that sets the list-changed flag as soon as it reads
/// `notifications/tools/list_changed`. rmcp hands notifications to the handler on a task of
/// their own, so the handler could set the flag after the answer the server sent next (the
/// result of the call that changed the list) is delivered; here, reading is in order.
struct WatchListChanged<T> {
    inner: T,
    flag: Arc<AtomicBool>,
}

impl<T: RmcpTransport<RoleClient>> RmcpTransport<RoleClient> for WatchListChanged<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(note)) = &message {
            if matches!(
                note.notification,
                ServerNotification::ToolListChangedNotification(_)
            ) {
                self.flag.store(true, Ordering::Release);
            }
        }
        message
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
