//! The Vercel AI SDK's UI message stream, v1: what `useChat` (React) and the `Chat` class of
//! the `ai` package read.
//!
//! STUB: the helper implementing this file replaces every body marked STUB; the public
//! signatures are the contract the example and the other files use.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::{sse_frame, UiRequest, UiRequestError, UiTurn};
use crate::agent::{AgentEvent, PausedRun, Resolutions};
use crate::message::Message;

/// The header that marks a response as a UI message stream, and its value.
pub const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// One chunk of the UI message stream (STUB: the full set comes with the encoder).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum UiMessageChunk {
    /// The message starts.
    Start {
        /// The assistant message's id.
        #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    /// The message is complete.
    Finish {},
}

/// Encodes a run's [`AgentEvent`]s as UI message chunks (STUB).
#[derive(Debug, Clone, Default)]
pub struct UiStreamEncoder {
    started: bool,
}

impl UiStreamEncoder {
    /// An encoder for a new run.
    pub fn new() -> Self {
        UiStreamEncoder::default()
    }

    /// An encoder for the resumption of `paused` with `answers`.
    pub fn resuming(self, paused: &PausedRun, answers: &Resolutions) -> Self {
        let _ = (paused, answers);
        self
    }

    /// The chunks for one event.
    pub fn encode(&mut self, event: &AgentEvent) -> Vec<UiMessageChunk> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(UiMessageChunk::Start { message_id: None });
        }
        if let AgentEvent::Finished(_) = event {
            out.push(UiMessageChunk::Finish {});
        }
        out
    }
}

/// `useChat`'s request body (STUB).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    id: String,
}

impl ChatRequest {
    /// Parses a request body.
    pub fn from_slice(body: &[u8]) -> Result<ChatRequest, UiRequestError> {
        let _ = body;
        Err(UiRequestError::new("STUB"))
    }

    /// The chat's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The conversation the client holds, before the message that starts this turn.
    pub fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        Ok(Vec::new())
    }

    /// What the request asks of an agent waiting in `paused` (or in none).
    pub fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        let _ = paused;
        Err(UiRequestError::new("STUB"))
    }
}

impl UiRequest for ChatRequest {
    fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        ChatRequest::history(self)
    }
    fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        ChatRequest::turn(self, paused)
    }
}

/// A run's events as UI message chunks.
pub fn encode_stream(
    events: impl Stream<Item = AgentEvent> + Send + 'static,
    mut encoder: UiStreamEncoder,
) -> impl Stream<Item = UiMessageChunk> + Send + 'static {
    events.flat_map(move |event| futures::stream::iter(encoder.encode(&event)))
}

/// The SSE body of a chunk stream: one `data:` frame per chunk, then `data: [DONE]`.
pub fn sse_body(
    chunks: impl Stream<Item = UiMessageChunk> + Send + 'static,
) -> impl Stream<Item = Bytes> + Send + 'static {
    chunks
        .map(|chunk| sse_frame(&chunk))
        .chain(futures::stream::once(async {
            Bytes::from_static(b"data: [DONE]\n\n")
        }))
}

/// Answers a `useChat` request with `agent`: parses `body`, runs or resumes the agent, and
/// streams the run as a UI message stream (with the [`STREAM_HEADER`]). A body that is not a
/// valid request gets a 400 with a JSON `{"error": "…"}` saying why, and nothing of the agent
/// or its session changes; a run already in flight gets a 409.
#[cfg(feature = "axum")]
pub async fn respond(agent: &mut crate::Agent, body: &[u8]) -> axum::response::Response {
    let request = match ChatRequest::from_slice(body) {
        Ok(request) => request,
        Err(e) => return super::http::refusal(super::StartError::Request(e)),
    };
    match super::start_turn(agent, &request).await {
        Ok(started) => {
            let mut encoder = UiStreamEncoder::new();
            if let Some((paused, answers)) = &started.resumed {
                encoder = encoder.resuming(paused, answers);
            }
            let frames = sse_body(encode_stream(started.events, encoder));
            super::http::sse_response(frames, &[STREAM_HEADER])
        }
        Err(e) => super::http::refusal(e),
    }
}
