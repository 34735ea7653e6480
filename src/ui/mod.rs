//! Runs streamed to web front-ends, in the two protocols they speak:
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
//! 3. the SSE body ([`sse_frame`]); with the feature `axum`, a whole handler:
//!    [`agui::respond`] and [`ai_sdk::respond`] take an [`Agent`](crate::Agent) and a request body and give
//!    the response, a 400 for a bad body.
//!
//! Approvals use the agent's pauses: a tool in
//! [`AgentBuilder::require_approval`](crate::AgentBuilder::require_approval) (or a hook's
//! [`ToolDecision::Pause`](crate::ToolDecision::Pause)) ends the run paused; the front-end
//! shows the call with approve and deny buttons, and its next request carries the verdict,
//! which resumes the run ([`Agent::resume`](crate::Agent::resume)). With a [session](crate::AgentBuilder::session)
//! the paused run is kept in the store, so the next request may reach another process.

pub mod agui;
pub mod ai_sdk;

use bytes::Bytes;
use serde::Serialize;

use crate::agent::{AgentEvent, Resolutions};
use crate::input::UserInput;

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
}

/// One Server-Sent Event carrying `event` as JSON: `data: {…}\n\n`. JSON never contains a raw
/// line break, so one `data:` line always holds the whole event.
pub fn sse_frame(event: &impl Serialize) -> Bytes {
    let json = serde_json::to_vec(event).unwrap_or_else(|e| {
        // Only a map with non-string keys or a failing `Serialize` impl can fail here; the
        // protocol types have neither. Say so on the wire rather than panic.
        serde_json::to_vec(&serde_json::json!({ "type": "error", "errorText": e.to_string() }))
            .unwrap_or_default()
    });
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
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
        _ => return None,
    })
}

#[cfg(feature = "axum")]
pub(crate) mod http {
    //! The axum side: how a request's turn starts, the SSE response, and the refusals.
    use axum::body::Body;
    use axum::http::{header, HeaderValue, StatusCode};
    use axum::response::Response;
    use bytes::Bytes;
    use futures::{Stream, StreamExt};

    use super::{UiRequestError, UiTurn};
    use crate::agent::{Agent, PausedRun, Resolutions};
    use crate::context::Conversation;
    use crate::error::Error;
    use crate::message::Message;

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
        pub(crate) events: S,
    }

    /// Starts what `request` asks on `agent`: reads the run it waits in (from its session, when it
    /// has one), decides, gives the agent the client's history when its own conversation is
    /// empty, and runs or resumes. Nothing changes when the request is refused.
    pub(crate) async fn start_turn(
        agent: &mut Agent,
        request: &impl UiRequest,
    ) -> Result<
        Started<impl futures::Stream<Item = crate::agent::AgentEvent> + Send + 'static>,
        StartError,
    > {
        let paused = if agent.session.is_some() {
            agent.load_session().await.map_err(StartError::Agent)?
        } else {
            agent.paused()
        };
        let turn = request.turn(paused.as_ref()).map_err(StartError::Request)?;
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
        let (events, resumed): (futures::stream::BoxStream<'static, _>, _) = match (turn, paused) {
            (UiTurn::Run(input), _) => (Box::pin(agent.run(input)), None),
            (UiTurn::Resume(answers), Some(paused)) => (
                Box::pin(agent.resume(&paused, answers.clone())),
                Some((paused, answers)),
            ),
            (UiTurn::Resume(_), None) => {
                return Err(StartError::Request(UiRequestError::new(
                    "the request answers tool calls, but no run waits for answers",
                )))
            }
        };
        Ok(Started { resumed, events })
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
