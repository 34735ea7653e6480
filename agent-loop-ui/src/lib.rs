//! Web front-ends for [`agent_loop`]: an agent's runs streamed to a browser, in the two
//! protocols front-ends speak:
//!
//! - [`agui`]: [AG-UI](https://docs.ag-ui.com) 1.0 (`@ag-ui/core`, `@ag-ui/client`, used by
//!   CopilotKit and others): `RunAgentInput` in, AG-UI events out;
//! - [`ai_sdk`]: the Vercel AI SDK's UI message stream, v1 (what React's `useChat` and the
//!   `Chat` class of the `ai` package read): `useChat`'s request body in, UI message chunks out.
//!
//! Each protocol has three parts, usable on their own:
//!
//! 1. the request body, parsed leniently and checked ([`UiRequestError`] says what is wrong,
//!    for a 400), and turned into what the agent does: a new run on the user's message, or
//!    the resumption of a paused run with the person's verdicts and the client's tool results
//!    ([`UiTurn`]);
//! 2. an encoder, a small sans-IO state machine from [`AgentEvent`]s to the
//!    protocol's events (no clock, no randomness: ids are made from the request's);
//! 3. the SSE body ([`sse_frame`]); with the feature `axum` (on by default), a whole
//!    handler: [`agui::respond`] and [`ai_sdk::respond`] take an [`Agent`](agent_loop::Agent)
//!    and a request body and give the response, a 400 for a bad body. A host on another web
//!    framework turns the default features off and keeps the request types and encoders.
//!
//! Streams survive a reconnect: every frame carries its id (`id: 7`), and with
//! [`RespondOptions::resumable`] (feature `axum`) each run is kept in a [`RunStreams`]: a
//! bounded [`ReplayBuffer`] per run, the run driven by a task of its own and cancelled after
//! a grace time without clients; [`ai_sdk::reconnect`] and [`agui::reconnect`] give a client
//! that comes back (with `Last-Event-ID`) what it missed, then the live stream. The host's
//! own routes act on a kept run by its chat's or thread's id: [`RunStreams::steer`] (the
//! person's words enter the run at its next safe point, and its clients see them there: an
//! AG-UI user text message, an AI SDK `data-steered` part), [`RunStreams::stop_after_turn`]
//! (the run ends as a finished one after its turn) and [`RunStreams::cancel`].
//!
//! Approvals use the agent's pauses: a tool in
//! [`RunPolicy::require_approval`](agent_loop::agent::RunPolicy::require_approval) (or a hook's
//! [`ToolDecision::Pause`](agent_loop::agent::ToolDecision::Pause)) ends the run paused; the front-end
//! shows the call with approve and deny buttons, and its next request carries the verdict,
//! which resumes the run ([`Agent::resume`](agent_loop::Agent::resume)). Each waiting call
//! goes to the client with its [digest](agent_loop::agent::PendingCall::digest) (AG-UI: the
//! interrupt's `metadata.digest`; the AI SDK: the approval request's `signature`), which
//! comes back with the verdict and binds it to that very call: a verdict for another call
//! under the same id is refused with the protocol's error, nothing run. With a [session](agent_loop::AgentBuilder::session)
//! the paused run is kept in the store, so the next request may reach another process. A
//! person who types a new message instead of answering does not wedge the chat: by default
//! the waiting calls are denied and the run goes on with the message
//! ([`NewMessageWhilePaused`], set with [`RespondOptions`] and `respond_with`).
//!
//! A verdict finds its run where the pause is kept: in the [`Agent`](agent_loop::Agent) value
//! that ran it, or in its session store. A server that builds a new `Agent` for each request
//! (as the AI SDK's own stateless route handlers do) must give it a session, keyed by the
//! chat's id, or the approval is refused (400) for want of a run to resume. The client's
//! copy of the conversation is not trusted to carry the pause: it could name any call and
//! "approve" it.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_loop::agent::RunPolicy;
//! use agent_loop::session::{MemoryStore, SessionStore};
//! use agent_loop::{Agent, AnthropicClient};
//!
//! # async fn handler(body: &[u8], chat_id: &str) -> Result<(), Box<dyn std::error::Error>> {
//! // Once per process (across processes: `agent_loop_sql::SqliteStore` or `PostgresStore`):
//! let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
//! // Per request: the same chat id finds the same conversation, and its pause.
//! let mut agent = Agent::builder(AnthropicClient::from_env()?)
//!     .policy(RunPolicy::new().require_approval("delete_file"))
//!     .session(store.clone(), chat_id)
//!     .build()?;
//! let response = agent_loop_ui::ai_sdk::respond(&mut agent, body).await;
//! # let _ = response;
//! # Ok(())
//! # }
//! ```
//!
//! # A chat server
//!
//! One axum route for `useChat`, each chat its own session, so any process that shares the
//! store can answer the chat's next request ([`agui::respond`] is the same for AG-UI, the
//! thread's id naming the session):
//!
//! ```
//! use std::sync::Arc;
//!
//! use agent_loop::session::{MemoryStore, SessionStore};
//! use agent_loop::testing::{ScriptedClient, ScriptedResponse};
//! use agent_loop::{Agent, LlmClient};
//! use agent_loop_ui::ai_sdk;
//! use axum::body::Bytes;
//! use axum::extract::State;
//! use axum::http::StatusCode;
//! use axum::response::{IntoResponse, Response};
//! use axum::routing::post;
//! use axum::Router;
//!
//! #[derive(Clone)]
//! struct App {
//!     model: Arc<dyn LlmClient>,
//!     sessions: Arc<dyn SessionStore>,
//! }
//!
//! /// `POST /api/chat`, what `useChat` calls: the chat's id names its session.
//! async fn chat(State(app): State<App>, body: Bytes) -> Response {
//!     let chat = match ai_sdk::ChatRequest::from_slice(&body) {
//!         Ok(request) => request.id().to_owned(),
//!         Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
//!     };
//!     let agent = Agent::builder(app.model.clone())
//!         .system("Be brief.")
//!         .session(app.sessions.clone(), chat)
//!         .build();
//!     match agent {
//!         Ok(mut agent) => ai_sdk::respond(&mut agent, &body).await,
//!         Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
//!     }
//! }
//!
//! let app = App {
//!     model: Arc::new(ScriptedClient::new([ScriptedResponse::text("Hello!")])),
//!     sessions: Arc::new(MemoryStore::new()),
//! };
//! let router: Router = Router::new().route("/api/chat", post(chat)).with_state(app);
//! // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, router).await?;
//! # drop(router);
//! ```

#![warn(missing_docs, unreachable_pub)]

pub mod agui;
pub mod ai_sdk;
mod resume;

#[cfg(feature = "axum")]
pub use resume::RunStreams;
pub use resume::{ReplayBuffer, ReplayError, ReplayLimits};

use agent_loop::agent::{Resolutions, WaitsFor};
use agent_loop::{AgentEvent, PausedRun, UserInput};
use bytes::Bytes;
use serde::Serialize;

/// What the refusal of an answer says when no paused run is there to take it.
pub(crate) const NO_RUN_WAITS: &str = "no run waits for answers";

/// What such a refusal adds for an agent with no session: where its pause would have been.
#[cfg(feature = "axum")]
pub(crate) const NO_SESSION_HINT: &str = "; this agent has no session store, so a paused \
    run lives only in the Agent value that ran it. A server that builds a new Agent for each \
    request (as a stateless AI SDK route does) must give it a session keyed by the chat's id, \
    `AgentBuilder::session(store, chat_id)` with a store of the `agent-loop-sql` crate, \
    where the next request finds the pause (see the docs of `agent_loop_ui`)";

/// Why a request body cannot become a run: answer it with a 400 and this message. Nothing of
/// the agent or its session has changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UiRequestError {
    message: String,
}

impl UiRequestError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        UiRequestError {
            message: message.into(),
        }
    }

    /// What is wrong with the request.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// What a front-end's request asks the agent to do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum UiTurn {
    /// Run the agent on the user's new message.
    Run(UserInput),
    /// Resume the agent's paused run with these answers to its waiting calls (approvals,
    /// denials, results of tools the client ran).
    Resume(Resolutions),
    /// Run the agent on the user's new message while its paused run waits for answers the
    /// request does not give: the person typed instead of approving. What happens is the
    /// host's choice ([`NewMessageWhilePaused`]): by default the waiting calls are denied
    /// ([`NEW_MESSAGE_DENIAL`]) and the run goes on with the new message.
    RunLeavingPause(UserInput),
}

/// What the model reads as the result of each call a paused run waited for, when the person
/// sent a new message instead of answering ([`NewMessageWhilePaused::DenyAndContinue`]).
pub const NEW_MESSAGE_DENIAL: &str =
    "Not run: the user sent a new message instead of answering this call.";

/// What [`agui::respond_with`] and [`ai_sdk::respond_with`] do with a new user message that
/// arrives while the agent's run waits for answers to tool calls (an approval, a client's
/// result) and the request gives none ([`UiTurn::RunLeavingPause`]).
///
/// ```
/// use agent_loop_ui::{NewMessageWhilePaused, RespondOptions};
///
/// // A chat: typing instead of clicking Approve denies the waiting calls and goes on.
/// assert_eq!(RespondOptions::default().new_message_while_paused(), NewMessageWhilePaused::DenyAndContinue);
/// // A strict host: the calls must be answered first (400).
/// let strict = RespondOptions::new().while_paused(NewMessageWhilePaused::Refuse);
/// assert_eq!(strict.new_message_while_paused(), NewMessageWhilePaused::Refuse);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NewMessageWhilePaused {
    /// Deny every waiting call (the model reads [`NEW_MESSAGE_DENIAL`] as its error
    /// result; a call of the paused batch that had finished keeps its result) and run on
    /// the new message. The paused run is left behind: a later answer to it is refused. The
    /// stream tells the client which calls were denied (the AI SDK: a transient
    /// `data-calls-denied` chunk; AG-UI: a `CUSTOM` `agent_loop.calls_denied` event), each
    /// `{"toolCallIds": […], "reason": "…"}`. The default: what a chat wants.
    #[default]
    DenyAndContinue,
    /// Refuse the request with a 400 saying which calls wait; the agent, its session and the
    /// pause are unchanged, so the calls can still be answered.
    Refuse,
}

/// How [`agui::respond_with`] and [`ai_sdk::respond_with`] answer a request (the plain
/// `respond` uses the default).
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RespondOptions {
    while_paused: NewMessageWhilePaused,
    #[cfg(feature = "axum")]
    streams: Option<RunStreams>,
    caller: Option<String>,
}

impl RespondOptions {
    /// The defaults: [`NewMessageWhilePaused::DenyAndContinue`].
    pub fn new() -> Self {
        RespondOptions::default()
    }

    /// What a new user message does while the run waits for answers.
    pub fn while_paused(mut self, policy: NewMessageWhilePaused) -> Self {
        self.while_paused = policy;
        self
    }

    /// The policy for a new user message while the run waits for answers.
    pub fn new_message_while_paused(&self) -> NewMessageWhilePaused {
        self.while_paused
    }

    /// Keeps each run in `streams`, so that its client can reconnect
    /// ([`ai_sdk::reconnect`], [`agui::reconnect`]) and get what it missed, then the live
    /// stream; the run goes on when its client goes away, for the streams'
    /// [grace time](RunStreams::grace).
    #[cfg(feature = "axum")]
    pub fn resumable(mut self, streams: RunStreams) -> Self {
        self.streams = Some(streams);
        self
    }

    /// The streams runs are kept in, if resumable.
    #[cfg(feature = "axum")]
    pub fn streams(&self) -> Option<&RunStreams> {
        self.streams.as_ref()
    }

    /// The caller these requests come from (an authenticated user's key, such as
    /// `agent_loop_serve`'s `Principal::key_hex()`): runs kept for reconnects are then kept
    /// under the caller and the chat's or thread's id ([`stream_key`](Self::stream_key)), so
    /// another caller who names the same id reconnects to nothing. Without it runs are kept
    /// under the id the client chose alone: anyone who knows a chat id can replay its run.
    ///
    /// ```
    /// use agent_loop_ui::RespondOptions;
    /// let alice = RespondOptions::new().caller("alice-key");
    /// let bob = RespondOptions::new().caller("bob-key");
    /// assert_ne!(alice.stream_key("chat-1"), bob.stream_key("chat-1"));
    /// assert_eq!(RespondOptions::new().stream_key("chat-1"), "chat-1");
    /// ```
    pub fn caller(mut self, key: impl Into<String>) -> Self {
        self.caller = Some(key.into());
        self
    }

    /// The key a run of the chat or thread `id` is kept under in the [`RunStreams`]: `id`,
    /// or with a [`caller`](Self::caller), the caller's key and `id`. Pass it to
    /// [`ai_sdk::reconnect`] and to [`RunStreams::steer`], [`RunStreams::stop_after_turn`] and
    /// [`RunStreams::cancel`] (AG-UI's reconnect: [`agui::reconnect_with`]).
    pub fn stream_key(&self, id: &str) -> String {
        match &self.caller {
            // The caller's length first: no caller and id can run into another pair's key.
            Some(caller) => format!("{}:{caller}/{id}", caller.len()),
            None => id.to_owned(),
        }
    }
}

/// `frames` (SSE frames without ids) numbered from 1, `id: {n}` before each: what a
/// response that is not kept for reconnects sends.
pub fn numbered_frames(
    frames: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    use futures::StreamExt;
    let mut next = 0u64;
    frames.map(move |frame| {
        next += 1;
        resume::with_id(next, &frame)
    })
}

/// The calls `paused` waits for, for an error message: `delete_file (call "c1") waits for
/// a verdict; …`.
pub(crate) fn waiting_calls(paused: &PausedRun) -> String {
    paused
        .pending()
        .iter()
        .map(|c| {
            let what = match (&c.question, c.waits_for) {
                (Some(question), _) => format!("an answer to {:?}", question.prompt),
                (None, WaitsFor::Approval) => "a verdict".to_owned(),
                (None, _) => "a result".to_owned(),
            };
            format!("{} (call {:?}) waits for {what}", c.name, c.id)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the stream of a run that left `paused` behind says of it: the calls it denied and
/// why, `{"toolCallIds": […], "reason": "…"}`.
pub(crate) fn calls_denied(paused: &PausedRun) -> serde_json::Value {
    let ids: Vec<String> = paused.pending().into_iter().map(|c| c.id).collect();
    serde_json::json!({ "toolCallIds": ids, "reason": NEW_MESSAGE_DENIAL })
}

/// The conversation of `paused` with every call of its paused response answered: a call of
/// the batch that finished keeps its result, every other one (those that wait) gets
/// [`NEW_MESSAGE_DENIAL`] as an error result. The agent restores it (which checks and
/// repairs it as any restored history) and runs on the new message from there.
#[cfg(feature = "axum")]
pub(crate) fn left_behind(paused: &PausedRun) -> agent_loop::context::Conversation {
    use agent_loop::{ContentBlock, Message, Role};
    let mut conversation = paused.conversation().clone();
    let finished = paused.finished();
    let answers: Vec<ContentBlock> = conversation
        .messages
        .last()
        .map(|m| {
            m.tool_uses()
                .map(|(id, _, _)| match finished.iter().find(|r| r.id == id) {
                    Some(result) => result.to_block(),
                    None => ContentBlock::tool_result(id, NEW_MESSAGE_DENIAL, true),
                })
                .collect()
        })
        .unwrap_or_default();
    if !answers.is_empty() {
        conversation.messages.push(Message {
            role: Role::User,
            content: answers,
        });
    }
    conversation
}

/// The ids of the calls of the response `paused` paused in (answered or waiting), in the
/// model's order.
pub(crate) fn paused_call_ids(paused: &PausedRun) -> Vec<String> {
    paused
        .conversation()
        .messages
        .last()
        .map(|m| m.tool_uses().map(|(id, _, _)| id.to_owned()).collect())
        .unwrap_or_default()
}

/// One Server-Sent Event carrying `event` as JSON: `data: {…}\n\n`, written by the core's
/// [`SseFrame`](agent_loop::wire::sse::SseFrame). JSON never contains a raw line break, so
/// one `data:` line always holds the whole event.
pub fn sse_frame(event: &impl Serialize) -> Bytes {
    let json = serde_json::to_string(event).unwrap_or_else(|e| {
        // Only a map with non-string keys or a failing `Serialize` impl can fail here; the
        // protocol types have neither. Say so on the wire rather than panic.
        serde_json::json!({ "type": "error", "errorText": e.to_string() }).to_string()
    });
    Bytes::from(agent_loop::wire::sse::SseFrame::new(&json).to_string())
}

/// What a run's outcome says of the host's words it never delivered
/// ([`RunOutcome::undelivered`](agent_loop::RunOutcome::undelivered)), so that the client can
/// offer them again: `{"texts": […]}`, each input's text.
pub(crate) fn undelivered(inputs: &[UserInput]) -> serde_json::Value {
    let texts: Vec<String> = inputs
        .iter()
        .map(|input| input.clone().into_message().text())
        .collect();
    serde_json::json!({ "texts": texts })
}

/// What an event about the run itself (not conversation content) says: its name in snake
/// case and its fields in camelCase, for the events of a run's own that both protocols carry
/// (AG-UI as `CUSTOM` `agent_loop.{name}`, the AI SDK as a transient `data-{name}` part, with
/// dashes). `None` for every other event.
pub(crate) fn run_status(event: &AgentEvent) -> Option<(&'static str, serde_json::Value)> {
    use serde_json::json;
    Some(match event {
        AgentEvent::ToolProgress { id, message } => (
            "tool_progress",
            json!({"toolCallId": id, "message": message}),
        ),
        AgentEvent::Retry {
            attempt,
            delay,
            error,
            ..
        } => (
            "retry",
            json!({
                "attempt": attempt,
                "delayMs": u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "error": error,
            }),
        ),
        AgentEvent::Fallback { from, to, error } => {
            ("fallback", json!({"from": from, "to": to, "error": error}))
        }
        AgentEvent::Compacted {
            tokens_before,
            tokens_after,
        } => (
            "compacted",
            json!({"tokensBefore": tokens_before, "tokensAfter": tokens_after}),
        ),
        AgentEvent::Handoff { from, to } => ("handoff", json!({"from": from, "to": to})),
        // Conversation content, turns, steering, sub-agents, rate limits and the run's end:
        // each protocol encodes them its own way.
        AgentEvent::TurnStart { .. }
        | AgentEvent::TextDelta { .. }
        | AgentEvent::ThinkingDelta { .. }
        | AgentEvent::ToolCallStart { .. }
        | AgentEvent::ToolInputDelta { .. }
        | AgentEvent::ToolCall { .. }
        | AgentEvent::ToolResult { .. }
        | AgentEvent::TurnEnd { .. }
        | AgentEvent::SubAgent { .. }
        | AgentEvent::Steered { .. }
        | AgentEvent::Finished(_)
        | AgentEvent::RateLimits(_) => return None,
    })
}

#[cfg(feature = "axum")]
pub(crate) mod http {
    //! The axum side: how a request's turn starts, the SSE response, and the refusals.
    use agent_loop::agent::Resolutions;
    use agent_loop::context::Conversation;
    use agent_loop::{Agent, Error, Message, PausedRun};
    use axum::body::Body;
    use axum::http::{header, HeaderValue, StatusCode};
    use axum::response::Response;
    use bytes::Bytes;
    use futures::{Stream, StreamExt};

    use super::{NewMessageWhilePaused, RespondOptions, UiRequestError, UiTurn};

    /// What a protocol's request gives the shared start of a turn.
    pub(crate) trait UiRequest {
        /// The conversation the client holds, up to (not including) the message that starts this
        /// turn: used only for an agent whose own conversation is empty.
        fn history(&self) -> Result<Vec<Message>, UiRequestError>;
        /// What the request asks, given the run the agent waits in (if any).
        fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError>;
    }

    /// Why a turn could not start.
    #[derive(Debug)]
    pub(crate) enum StartError {
        /// The request is wrong (400).
        Request(UiRequestError),
        /// The agent could not start (its session failed to load, a run in flight): 409 for
        /// busy, else 500.
        Agent(Error),
    }

    /// A turn about to stream: the paused run it resumes (for the encoders), the answers, and the
    /// agent's event stream.
    pub(crate) struct Started<S> {
        pub(crate) resumed: Option<(PausedRun, Resolutions)>,
        /// The paused run a new message left behind, its waiting calls denied.
        pub(crate) left: Option<PausedRun>,
        pub(crate) events: S,
    }

    /// Starts what `request` asks on `agent`: reads the run it waits in (from its session, when it
    /// has one), decides, gives the agent the client's history when its own conversation is
    /// empty, and runs or resumes. A new message while the run waits goes as `options` say:
    /// refused, or run with the waiting calls denied. Nothing changes when the request is
    /// refused.
    pub(crate) async fn start_turn(
        agent: &mut Agent,
        request: &impl UiRequest,
        options: &RespondOptions,
    ) -> Result<
        Started<impl futures::Stream<Item = agent_loop::AgentEvent> + Send + 'static>,
        StartError,
    > {
        let paused = if agent.has_session() {
            agent.load_session().await.map_err(StartError::Agent)?
        } else {
            agent.paused()
        };
        let turn = request.turn(paused.as_ref()).map_err(|e| {
            let lost = e.message().contains(super::NO_RUN_WAITS) && !agent.has_session();
            StartError::Request(match lost {
                true => UiRequestError::new(format!("{}{}", e.message(), super::NO_SESSION_HINT)),
                false => e,
            })
        })?;
        if let (UiTurn::RunLeavingPause(_), Some(paused)) = (&turn, &paused) {
            if options.new_message_while_paused() == NewMessageWhilePaused::Refuse {
                return Err(StartError::Request(UiRequestError::new(format!(
                    "the agent waits for answers to its tool calls, and new messages are not \
                     taken until they are answered: {}. Answer them (approve or deny), then \
                     send the message again",
                    super::waiting_calls(paused)
                ))));
            }
        }
        if paused.is_none() && agent.messages().is_empty() {
            let history = request.history().map_err(StartError::Request)?;
            if !history.is_empty() {
                agent
                    .restore(Conversation::new(None, history))
                    .map_err(|e| {
                        StartError::Request(UiRequestError::new(format!(
                            "the conversation the request carries is not a valid history: {e}"
                        )))
                    })?;
            }
        }
        let (events, resumed, left): (futures::stream::BoxStream<'static, _>, _, _) =
            match (turn, paused) {
                (UiTurn::Run(input) | UiTurn::RunLeavingPause(input), None) => {
                    (Box::pin(agent.run(input)), None, None)
                }
                (UiTurn::Run(input), Some(_)) => (Box::pin(agent.run(input)), None, None),
                (UiTurn::RunLeavingPause(input), Some(paused)) => {
                    // The waiting calls answered (denied) in the conversation the agent holds;
                    // the run then leaves the pause behind as any new run does (the agent
                    // forgets it, the session's next entry supersedes it).
                    agent
                        .restore(super::left_behind(&paused))
                        .map_err(StartError::Agent)?;
                    (Box::pin(agent.run(input)), None, Some(paused))
                }
                (UiTurn::Resume(answers), Some(paused)) => (
                    Box::pin(agent.resume(&paused, answers.clone())),
                    Some((paused, answers)),
                    None,
                ),
                (UiTurn::Resume(_), None) => {
                    return Err(StartError::Request(UiRequestError::new(format!(
                        "the request answers tool calls, but {}",
                        super::NO_RUN_WAITS
                    ))))
                }
            };
        Ok(Started {
            resumed,
            left,
            events,
        })
    }

    /// A `text/event-stream` response of `frames`, not buffered by proxies, with `extra`
    /// headers.
    pub(crate) fn sse_response(
        frames: impl Stream<Item = Bytes> + Send + 'static,
        extra: &[(&'static str, &'static str)],
    ) -> Response {
        let body = Body::from_stream(frames.map(Ok::<_, std::convert::Infallible>));
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        for (name, value) in extra {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        response
    }

    /// The response of a run's frames (SSE frames without ids): kept in `options`' streams
    /// under `key` (and `run_id`) when resumable, else numbered and sent.
    pub(crate) fn run_response(
        frames: impl Stream<Item = Bytes> + Send + 'static,
        options: &RespondOptions,
        key: &str,
        run_id: &str,
        handle: agent_loop::agent::AgentHandle,
        extra: &[(&'static str, &'static str)],
    ) -> Response {
        match options.streams() {
            Some(streams) => sse_response(streams.start(key, run_id, frames, handle), extra),
            None => sse_response(super::numbered_frames(frames), extra),
        }
    }

    /// The answer to a reconnect: the run's frames after `last_event_id`, then the live
    /// ones; `410` when they are no longer kept, `400` for an id the run never sent, `404`
    /// when no such run is kept.
    pub(crate) fn reconnect_response(
        streams: &super::RunStreams,
        key: &str,
        run_id: Option<&str>,
        last_event_id: Option<&str>,
        extra: &[(&'static str, &'static str)],
    ) -> Response {
        use super::ReplayError;
        match streams.subscribe(key, run_id, last_event_id) {
            Ok(frames) => sse_response(frames, extra),
            Err(e) => {
                let status = match e {
                    ReplayError::Evicted { .. } => StatusCode::GONE,
                    ReplayError::NoRun(_) => StatusCode::NOT_FOUND,
                    _ => StatusCode::BAD_REQUEST,
                };
                json_error(status, &e.to_string())
            }
        }
    }

    /// The `Last-Event-ID` header, if any.
    pub(crate) fn last_event_id(headers: &axum::http::HeaderMap) -> Option<&str> {
        headers.get("last-event-id").and_then(|v| v.to_str().ok())
    }

    /// A JSON `{"error": "…"}` response.
    pub(crate) fn json_error(status: StatusCode, message: &str) -> Response {
        let body = serde_json::json!({ "error": message }).to_string();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }

    /// The refusal of a turn that could not start: 400 with the request's fault, 409 while
    /// another run is in flight, 500 for the rest; a JSON body `{"error": "…"}`.
    pub(crate) fn refusal(error: StartError) -> Response {
        let (status, message) = match error {
            StartError::Request(e) => (StatusCode::BAD_REQUEST, e.to_string()),
            StartError::Agent(e @ Error::Busy) => (StatusCode::CONFLICT, e.to_string()),
            StartError::Agent(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let body = serde_json::json!({ "error": message }).to_string();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}
