//! AG-UI 1.0 (`@ag-ui/core`, `@ag-ui/client`): `RunAgentInput` in, AG-UI events out.
//!
//! STUB: the helper implementing this file replaces every body marked STUB; the public
//! signatures are the contract the example and the other files use.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::{sse_frame, UiRequest, UiRequestError, UiTurn};
use crate::agent::{AgentEvent, AgentHandle, PausedRun};
use crate::message::Message;

/// One AG-UI event (STUB: the full set comes with the encoder).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgUiEvent {
    /// The run starts.
    #[serde(rename_all = "camelCase")]
    RunStarted {
        /// The thread.
        thread_id: String,
        /// The run.
        run_id: String,
    },
}

/// Encodes a run's [`AgentEvent`]s as AG-UI events (STUB).
#[derive(Debug, Clone)]
pub struct AgUiEncoder {
    thread_id: String,
    run_id: String,
}

impl AgUiEncoder {
    /// An encoder for the run `run_id` of the thread `thread_id` (the request's).
    pub fn new(thread_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        AgUiEncoder {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
        }
    }

    /// An encoder for the resumption of `paused`.
    pub fn resuming(self, paused: &PausedRun) -> Self {
        let _ = paused;
        self
    }

    /// The events for one agent event.
    pub fn encode(&mut self, event: &AgentEvent) -> Vec<AgUiEvent> {
        let _ = event;
        vec![AgUiEvent::RunStarted {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
        }]
    }

    /// `MESSAGES_SNAPSHOT` of a conversation (STUB).
    pub fn messages_snapshot(&self, messages: &[Message]) -> AgUiEvent {
        let _ = messages;
        AgUiEvent::RunStarted {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
        }
    }
}

/// A `RunAgentInput` request body (STUB).
#[derive(Debug, Clone, PartialEq)]
pub struct RunAgentInput {
    thread_id: String,
    run_id: String,
}

impl RunAgentInput {
    /// Parses a request body.
    pub fn from_slice(body: &[u8]) -> Result<RunAgentInput, UiRequestError> {
        let _ = body;
        Err(UiRequestError::new("STUB"))
    }

    /// The thread's id.
    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The conversation the client holds, before the message that starts this run.
    pub fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        Ok(Vec::new())
    }

    /// What the request asks of an agent waiting in `paused` (or in none).
    pub fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        let _ = paused;
        Err(UiRequestError::new("STUB"))
    }
}

impl UiRequest for RunAgentInput {
    fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        RunAgentInput::history(self)
    }
    fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        RunAgentInput::turn(self, paused)
    }
}

/// A run's events as AG-UI events; `MESSAGES_SNAPSHOT` (of `handle`'s conversation, or of a
/// paused run's) comes right before the run's last event (STUB).
pub fn encode_stream(
    events: impl Stream<Item = AgentEvent> + Send + 'static,
    mut encoder: AgUiEncoder,
    handle: AgentHandle,
) -> impl Stream<Item = AgUiEvent> + Send + 'static {
    let _ = handle;
    events.flat_map(move |event| futures::stream::iter(encoder.encode(&event)))
}

/// The SSE body of an event stream: one `data:` frame per event.
pub fn sse_body(
    events: impl Stream<Item = AgUiEvent> + Send + 'static,
) -> impl Stream<Item = Bytes> + Send + 'static {
    events.map(|event| sse_frame(&event))
}

/// Answers an AG-UI `RunAgentInput` request with `agent`: parses `body`, runs or resumes the
/// agent, and streams the run as AG-UI events. A body that is not a valid request gets a 400
/// with a JSON `{"error": "…"}` saying why, and nothing of the agent or its session changes;
/// a run already in flight gets a 409.
#[cfg(feature = "axum")]
pub async fn respond(agent: &mut crate::Agent, body: &[u8]) -> axum::response::Response {
    let request = match RunAgentInput::from_slice(body) {
        Ok(request) => request,
        Err(e) => return super::http::refusal(super::StartError::Request(e)),
    };
    let handle = agent.handle();
    match super::start_turn(agent, &request).await {
        Ok(started) => {
            let mut encoder = AgUiEncoder::new(request.thread_id(), request.run_id());
            if let Some((paused, _)) = &started.resumed {
                encoder = encoder.resuming(paused);
            }
            let frames = sse_body(encode_stream(started.events, encoder, handle));
            super::http::sse_response(frames, &[])
        }
        Err(e) => super::http::refusal(e),
    }
}
