//! The Vercel AI SDK's UI message stream, v1: what `useChat` (React) and the `Chat` class of
//! the `ai` package read.
//!
//! - [`ChatRequest`]: the body the `ai` package's `DefaultChatTransport` posts
//!   (`{id, messages, trigger, messageId, …}`), with the conversation as `UIMessage`s;
//! - [`UiStreamEncoder`]: a run's [`AgentEvent`]s as [`UiMessageChunk`]s;
//! - [`sse_body`] and, with the feature `axum`, [`respond`]: the response, with the
//!   [`STREAM_HEADER`].
//!
//! # Approvals
//!
//! A run that pauses for a person's verdict ends its stream with the waiting calls as tool
//! parts in the state `approval-requested` (a `tool-approval-request` chunk whose
//! `approvalId` is the call's id, and whose `signature` is the call's
//! [digest](agent_loop::agent::PendingCall::digest), `sha256:…` of its id, tool and
//! arguments) and `finishReason: "tool-calls"`. The client keeps the signature in the part's
//! `approval` and sends it back with the verdict: a verdict signed for another call than the
//! one waiting under that id (after a rewind, from another branch) is refused, the stream's
//! `error` chunk saying so, nothing run and the call still waiting. The client's
//! `addToolApprovalResponse({id, approved, reason})` sets the part to `approval-responded`;
//! with `sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses` it sends
//! the conversation again, and [`ChatRequest::turn`] reads the verdicts from the last
//! assistant message: the run resumes, its stream continuing that same assistant message
//! (denied calls end in `output-denied`). A tool the client runs itself (a
//! [deferred](agent_loop::tool::DeferredTool) tool) is answered the same way, by the client's
//! `addToolOutput`. A new user message instead of an answer denies the waiting calls and
//! starts a new assistant message (or is refused:
//! [`NewMessageWhilePaused`](super::NewMessageWhilePaused)).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agent_loop::agent::{Resolution, Resolutions, WaitsFor};
use agent_loop::media::{Document, Image};
use agent_loop::{
    AgentEvent, ContentBlock, Message, PausedRun, Role, StopReason, Termination, UserInput,
};

use super::{sse_frame, UiRequestError, UiTurn};

/// The header that marks a response as a UI message stream, and its value.
pub const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// The name of the data part that shows the host's words steering the run
/// ([`AgentEvent::Steered`]): `{"type": "data-steered", "data": {"text": "…"}}`, kept in the
/// assistant message where they landed (between two steps). A request that carries it back
/// has it read into the history as the user's words.
pub const STEERED: &str = "steered";

/// The reason the model reads when a person denies a call without giving one.
pub const DEFAULT_DENIAL: &str = "The user denied this tool call.";

/// One chunk of the UI message stream (the `uiMessageChunkSchema` of the `ai` package), as
/// JSON: `{"type": "text-delta", "id": "text-1", "delta": "Hel"}`.
///
/// Serialized with a `type` tag in kebab case and camelCase fields; optional fields are left
/// out when `None`. Deserializing ignores fields it does not model (`providerMetadata`,
/// `messageMetadata`, …), as the client does.
///
/// ```
/// use agent_loop_ui::ai_sdk::{DataChunk, UiMessageChunk};
/// use serde_json::json;
///
/// let chunk = UiMessageChunk::ToolInputAvailable {
///     tool_call_id: "c1".into(),
///     tool_name: "delete".into(),
///     input: json!({"path": "a.txt"}),
/// };
/// assert_eq!(
///     serde_json::to_value(&chunk)?,
///     json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "delete",
///            "input": {"path": "a.txt"}})
/// );
/// let data: UiMessageChunk =
///     serde_json::from_value(json!({"type": "data-retry", "data": {"attempt": 1}, "transient": true}))?;
/// assert_eq!(
///     data,
///     UiMessageChunk::Data(DataChunk::new("retry", json!({"attempt": 1})).transient())
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum UiMessageChunk {
    /// The message starts.
    Start {
        /// The assistant message's id (when `None`, the client makes its own, or keeps the id
        /// of the assistant message the stream continues).
        #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    /// A step (one model response and its tools' results) starts: a `step-start` part.
    StartStep {},
    /// The step ends.
    FinishStep {},
    /// A text part starts.
    TextStart {
        /// The part's id, unique within the stream (`text-1`, `text-2`, …).
        id: String,
    },
    /// Text of the open text part `id`.
    TextDelta {
        /// The part's id.
        id: String,
        /// The text (never empty).
        delta: String,
    },
    /// The text part `id` is complete.
    TextEnd {
        /// The part's id.
        id: String,
    },
    /// A reasoning part starts.
    ReasoningStart {
        /// The part's id, unique within the stream (`reasoning-1`, …).
        id: String,
    },
    /// Reasoning text of the open reasoning part `id`.
    ReasoningDelta {
        /// The part's id.
        id: String,
        /// The text (never empty).
        delta: String,
    },
    /// The reasoning part `id` is complete.
    ReasoningEnd {
        /// The part's id.
        id: String,
    },
    /// The model started a tool call: a tool part in the state `input-streaming`.
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        /// The call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
    },
    /// A fragment of the call's JSON arguments.
    #[serde(rename_all = "camelCase")]
    ToolInputDelta {
        /// The call's id.
        tool_call_id: String,
        /// The fragment.
        input_text_delta: String,
    },
    /// The call's arguments are complete: the state `input-available`.
    #[serde(rename_all = "camelCase")]
    ToolInputAvailable {
        /// The call's id.
        tool_call_id: String,
        /// The tool's name.
        tool_name: String,
        /// The arguments.
        #[serde(default)]
        input: Value,
    },
    /// The call waits for a person's verdict: the state `approval-requested`.
    #[serde(rename_all = "camelCase")]
    ToolApprovalRequest {
        /// The approval's id: the encoder uses the call's id.
        approval_id: String,
        /// The call's id.
        tool_call_id: String,
        /// What binds the approval to its call: the encoder sends the call's
        /// [digest](agent_loop::agent::PendingCall::digest) (`sha256:…`). The client keeps
        /// it in the part's `approval.signature` and sends it back with the verdict, which
        /// is refused if another call waits under that id by then.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// The call's result: the state `output-available`.
    #[serde(rename_all = "camelCase")]
    ToolOutputAvailable {
        /// The call's id.
        tool_call_id: String,
        /// The result (the encoder sends the result text as a JSON string).
        #[serde(default)]
        output: Value,
    },
    /// The call failed: the state `output-error`.
    #[serde(rename_all = "camelCase")]
    ToolOutputError {
        /// The call's id.
        tool_call_id: String,
        /// What failed.
        error_text: String,
    },
    /// The call was denied: the state `output-denied`.
    #[serde(rename_all = "camelCase")]
    ToolOutputDenied {
        /// The call's id.
        tool_call_id: String,
    },
    /// The run failed. The `Chat` client stops reading the stream at this chunk (its status
    /// becomes `error`), so the encoder closes every part and the step before it.
    #[serde(rename_all = "camelCase")]
    Error {
        /// What failed.
        error_text: String,
    },
    /// The message is complete.
    #[serde(rename_all = "camelCase")]
    Finish {
        /// Why the run ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<FinishReason>,
    },
    /// The run was cancelled.
    Abort {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A data part (`data-{name}`).
    #[serde(untagged)]
    Data(DataChunk),
}

/// Why a UI message ended (`finish`'s `finishReason`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// The model was done ([`Termination::Completed`]).
    Stop,
    /// The answer was cut off at `max_tokens` ([`Termination::MaxTokens`]).
    Length,
    /// The model refused ([`Termination::Refused`]).
    ContentFilter,
    /// The run waits for tool calls to be approved or answered ([`Termination::Paused`]), or
    /// was stopped after a step with calls ([`Termination::StoppedAfterTurn`]).
    ToolCalls,
    /// An error ended the run ([`Termination::Error`]).
    Error,
    /// Any other end: the turn limit, a budget, a hook, a cancellation …
    Other,
}

/// A data chunk: `{"type": "data-{name}", "id"?, "data", "transient"?}`. A transient one is
/// handed to the client's `onData` and not kept in the message; one with an id replaces the
/// message's earlier part of the same type and id.
#[derive(Debug, Clone, PartialEq)]
pub struct DataChunk {
    /// The name after `data-`.
    pub name: String,
    /// The part's id, if any.
    pub id: Option<String>,
    /// The data.
    pub data: Value,
    /// Whether the client only passes it to `onData` (not kept in the message).
    pub transient: Option<bool>,
}

impl DataChunk {
    /// A data chunk `data-{name}` carrying `data`.
    pub fn new(name: impl Into<String>, data: Value) -> Self {
        DataChunk {
            name: name.into(),
            id: None,
            data,
            transient: None,
        }
    }

    /// Marks it transient.
    pub fn transient(mut self) -> Self {
        self.transient = Some(true);
        self
    }

    /// Gives it an id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

#[derive(Serialize)]
struct DataChunkOut<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    data: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    transient: Option<bool>,
}

#[derive(Deserialize)]
struct DataChunkIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    transient: Option<bool>,
}

impl Serialize for DataChunk {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DataChunkOut {
            kind: format!("data-{}", self.name),
            id: self.id.as_deref(),
            data: &self.data,
            transient: self.transient,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for DataChunk {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = DataChunkIn::deserialize(deserializer)?;
        let Some(name) = raw.kind.strip_prefix("data-") else {
            return Err(serde::de::Error::custom(format!(
                "unknown UI message chunk type {:?}",
                raw.kind
            )));
        };
        Ok(DataChunk {
            name: name.to_owned(),
            id: raw.id,
            data: raw.data,
            transient: raw.transient,
        })
    }
}

/// What the encoder knows of a tool call.
#[derive(Debug, Clone, Default)]
struct CallState {
    /// `tool-input-start` was sent (the client has the part).
    started: bool,
    /// `tool-input-available` was sent.
    available: bool,
}

/// Encodes a run's [`AgentEvent`]s as UI message chunks: a small sans-IO state machine, with
/// ids made from counters (`text-1`, `reasoning-1`), so the same events always give the same
/// chunks.
///
/// What it sends:
///
/// - `start` before anything else (with the id set by [`message_id`](Self::message_id), else
///   none: the client names the message), then per turn `start-step` … `finish-step`;
/// - text and reasoning as `text-*` and `reasoning-*` parts, each closed when the other
///   starts, when a tool call starts, at the turn's end, at a retry or fallback (whose
///   voided text stays on screen: the stream cannot take it back; later text is a new part)
///   and at the end;
/// - tool calls as `tool-input-start`, `tool-input-delta`, `tool-input-available`, then
///   `tool-output-available` (the result text as a JSON string), `tool-output-error`, or
///   `tool-output-denied` for a call the person denied ([`resuming`](Self::resuming));
/// - [`Retry`](AgentEvent::Retry), [`Fallback`](AgentEvent::Fallback),
///   [`Compacted`](AgentEvent::Compacted), [`Handoff`](AgentEvent::Handoff) and
///   [`ToolProgress`](AgentEvent::ToolProgress) as transient data chunks (`data-retry`
///   `{attempt, delayMs, error}`, `data-fallback` `{from, to, error}`, `data-compacted`
///   `{tokensBefore, tokensAfter}`, `data-handoff` `{from, to}`, `data-tool-progress`
///   `{toolCallId, message}`): the client's `onData` sees them, the message keeps none;
/// - [`Steered`](AgentEvent::Steered) (the host's words,
///   [`AgentHandle::steer`](agent_loop::agent::AgentHandle::steer)): a data part
///   `data-steered` `{text}` ([`STEERED`]), kept in the message between the step before and
///   the step after; the host's words a run ended without delivering
///   ([`RunOutcome::undelivered`](agent_loop::RunOutcome::undelivered)): a transient
///   `data-undelivered` `{texts}` before the end, for the client to offer them again;
/// - [`RateLimits`](AgentEvent::RateLimits): nothing (they are the server's business);
///   [`SubAgent`](AgentEvent::SubAgent): nothing (a sub-agent's work shows as its call's
///   result);
/// - for a run that left a pause behind ([`leaving`](Self::leaving)): a transient
///   `data-calls-denied` `{toolCallIds, reason}` right after `start`;
/// - at the end: the paused run's waiting calls (their input, and a `tool-approval-request`
///   whose `approvalId` is the call's id for those waiting for a verdict), `finish-step`,
///   then `error` for a failed run, `abort` for a cancelled one, a transient `data-stopped`
///   `{reason}` for a run stopped by a limit, a budget or a hook, and `finish` with its
///   [`FinishReason`]. Nothing after it. A run the host stopped after its turn
///   ([`AgentHandle::stop_after_turn`](agent_loop::agent::AgentHandle::stop_after_turn))
///   ends normally: `finish` alone, with the reason of its last step (`tool-calls` after a
///   step with calls, as `streamText` ends when its `stopWhen` stops it).
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop_ui::ai_sdk::{FinishReason, UiMessageChunk, UiStreamEncoder};
/// use agent_loop::{Agent, AgentEvent};
/// use futures::StreamExt;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("Hi!")])).build()?;
/// let events: Vec<AgentEvent> = agent.run("Hello").collect().await;
/// let mut encoder = UiStreamEncoder::new().message_id("msg-1");
/// let chunks: Vec<UiMessageChunk> = events.iter().flat_map(|e| encoder.encode(e)).collect();
/// assert_eq!(
///     chunks,
///     [
///         UiMessageChunk::Start { message_id: Some("msg-1".into()) },
///         UiMessageChunk::StartStep {},
///         UiMessageChunk::TextStart { id: "text-1".into() },
///         UiMessageChunk::TextDelta { id: "text-1".into(), delta: "Hi!".into() },
///         UiMessageChunk::TextEnd { id: "text-1".into() },
///         UiMessageChunk::FinishStep {},
///         UiMessageChunk::Finish { finish_reason: Some(FinishReason::Stop) },
///     ]
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Default)]
pub struct UiStreamEncoder {
    message_id: Option<String>,
    /// A resumption: the client's last assistant message and its step go on.
    resumed: bool,
    started: bool,
    finished: bool,
    step_open: bool,
    /// The open text part's id.
    text: Option<String>,
    /// The open reasoning part's id.
    reasoning: Option<String>,
    texts: u64,
    reasonings: u64,
    /// The calls of the open turn (or of the paused turn a resumption continues).
    calls: BTreeMap<String, CallState>,
    /// The calls the person denied (a resumption's answers).
    denied: BTreeSet<String>,
    /// Why the last turn's response ended (for a run stopped after its turn).
    last_stop: Option<StopReason>,
    /// What a run that left a pause behind says of the calls it denied, sent after `start`.
    left: Option<Value>,
}

impl UiStreamEncoder {
    /// An encoder for a new run.
    pub fn new() -> Self {
        UiStreamEncoder::default()
    }

    /// Names the assistant message in the `start` chunk (by default the client names it).
    /// Not sent by an encoder for a resumption, which continues the client's message.
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    /// An encoder for the resumption of `paused` with `answers`: the stream continues the
    /// client's last assistant message and its open step (no `start-step` until the next
    /// turn), the waiting calls' inputs are not sent again, and the calls `answers` deny end
    /// in `tool-output-denied`.
    pub fn resuming(mut self, paused: &PausedRun, answers: &Resolutions) -> Self {
        self.resumed = true;
        self.step_open = true;
        for id in super::paused_call_ids(paused) {
            self.calls.insert(
                id,
                CallState {
                    started: true,
                    available: true,
                },
            );
        }
        self.denied = answers
            .iter()
            .filter(|(_, r)| matches!(r, agent_loop::agent::Resolution::Deny { .. }))
            .map(|(id, _)| id.to_owned())
            .collect();
        self
    }

    /// An encoder for a run on a new message that left `paused` behind, its waiting calls
    /// denied ([`NewMessageWhilePaused::DenyAndContinue`](super::NewMessageWhilePaused)):
    /// right after `start`, a transient `data-calls-denied` chunk
    /// `{"toolCallIds": […], "reason": "…"}` tells the client which calls of its earlier
    /// assistant message were denied (this stream is a new message: it cannot touch their
    /// parts).
    pub fn leaving(mut self, paused: &PausedRun) -> Self {
        self.left = Some(super::calls_denied(paused));
        self
    }

    /// Whether the stream is over (`finish` was sent).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The chunks for one event (none after [`Finished`](AgentEvent::Finished)).
    pub fn encode(&mut self, event: &AgentEvent) -> Vec<UiMessageChunk> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.start(&mut out);
        match event {
            AgentEvent::TurnStart { .. } => {
                self.close_parts(&mut out);
                self.close_step(&mut out);
                out.push(UiMessageChunk::StartStep {});
                self.step_open = true;
            }
            AgentEvent::TurnEnd { stop_reason, .. } => {
                self.last_stop = Some(stop_reason.clone());
                self.close_parts(&mut out);
                self.close_step(&mut out);
            }
            AgentEvent::TextDelta { text } => self.text_delta(text, &mut out),
            AgentEvent::ThinkingDelta { text } => self.reasoning_delta(text, &mut out),
            AgentEvent::ToolCallStart { id, name } => {
                self.close_parts(&mut out);
                self.input_start(id, name, &mut out);
            }
            AgentEvent::ToolInputDelta { id, partial_json } => {
                // A fragment of a call never started (its name unknown) or complete already
                // has no place in the client's part: it is dropped.
                let open = self
                    .calls
                    .get(id)
                    .is_some_and(|c| c.started && !c.available);
                if open && !partial_json.is_empty() {
                    out.push(UiMessageChunk::ToolInputDelta {
                        tool_call_id: id.clone(),
                        input_text_delta: partial_json.clone(),
                    });
                }
            }
            AgentEvent::ToolCall { id, name, input } => {
                self.close_parts(&mut out);
                self.input_available(id, name, input, &mut out);
            }
            AgentEvent::ToolResult {
                id,
                name,
                content,
                is_error,
                ..
            } => {
                // The client needs the call's part before its output.
                if !self.calls.get(id).is_some_and(|c| c.available) {
                    self.close_parts(&mut out);
                    self.input_available(id, name, &Value::Null, &mut out);
                }
                out.push(if self.denied.contains(id) {
                    UiMessageChunk::ToolOutputDenied {
                        tool_call_id: id.clone(),
                    }
                } else if *is_error {
                    UiMessageChunk::ToolOutputError {
                        tool_call_id: id.clone(),
                        error_text: content.clone(),
                    }
                } else {
                    UiMessageChunk::ToolOutputAvailable {
                        tool_call_id: id.clone(),
                        output: Value::String(content.clone()),
                    }
                });
            }
            AgentEvent::Retry { .. } | AgentEvent::Fallback { .. } => {
                self.close_parts(&mut out);
                out.extend(status_chunk(event));
            }
            AgentEvent::ToolProgress { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::Handoff { .. } => out.extend(status_chunk(event)),
            AgentEvent::Steered { input } => {
                // Between steps: the host's words, kept in the message where they landed.
                self.close_parts(&mut out);
                self.close_step(&mut out);
                let text = input.clone().into_message().text();
                out.push(UiMessageChunk::Data(DataChunk::new(
                    STEERED,
                    serde_json::json!({ "text": text }),
                )));
            }
            AgentEvent::Finished(outcome) => {
                if !outcome.undelivered.is_empty() {
                    self.start(&mut out);
                    out.push(data(
                        "undelivered",
                        super::undelivered(&outcome.undelivered),
                    ));
                }
                self.finish_with(&outcome.termination, &mut out)
            }
            // The provider's figures are the server's business; a sub-agent's work shows as
            // its call's result.
            AgentEvent::RateLimits(_) | AgentEvent::SubAgent { .. } => {}
        }
        out
    }

    /// The chunks that end a stream whose events stopped without
    /// [`Finished`](AgentEvent::Finished) (none if it came): every part and the step closed,
    /// then `finish` with the reason `other`.
    pub fn finish(&mut self) -> Vec<UiMessageChunk> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.start(&mut out);
        self.close_parts(&mut out);
        self.close_step(&mut out);
        out.push(UiMessageChunk::Finish {
            finish_reason: Some(FinishReason::Other),
        });
        self.finished = true;
        out
    }

    fn start(&mut self, out: &mut Vec<UiMessageChunk>) {
        if !self.started {
            self.started = true;
            out.push(UiMessageChunk::Start {
                message_id: if self.resumed {
                    None
                } else {
                    self.message_id.clone()
                },
            });
            if let Some(left) = self.left.take() {
                out.push(data("calls-denied", left));
            }
        }
    }

    fn open_step(&mut self, out: &mut Vec<UiMessageChunk>) {
        if !self.step_open {
            self.step_open = true;
            out.push(UiMessageChunk::StartStep {});
        }
    }

    /// Closes the open step; its calls are done with (a later chunk of one of them starts
    /// a new part, in the step it comes in).
    fn close_step(&mut self, out: &mut Vec<UiMessageChunk>) {
        if self.step_open {
            self.step_open = false;
            out.push(UiMessageChunk::FinishStep {});
        }
        self.calls.clear();
    }

    fn close_text(&mut self, out: &mut Vec<UiMessageChunk>) {
        if let Some(id) = self.text.take() {
            out.push(UiMessageChunk::TextEnd { id });
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<UiMessageChunk>) {
        if let Some(id) = self.reasoning.take() {
            out.push(UiMessageChunk::ReasoningEnd { id });
        }
    }

    fn close_parts(&mut self, out: &mut Vec<UiMessageChunk>) {
        self.close_text(out);
        self.close_reasoning(out);
    }

    fn text_delta(&mut self, text: &str, out: &mut Vec<UiMessageChunk>) {
        if text.is_empty() {
            return;
        }
        self.close_reasoning(out);
        self.open_step(out);
        let id = match &self.text {
            Some(id) => id.clone(),
            None => {
                self.texts += 1;
                let id = format!("text-{}", self.texts);
                out.push(UiMessageChunk::TextStart { id: id.clone() });
                self.text = Some(id.clone());
                id
            }
        };
        out.push(UiMessageChunk::TextDelta {
            id,
            delta: text.to_owned(),
        });
    }

    fn reasoning_delta(&mut self, text: &str, out: &mut Vec<UiMessageChunk>) {
        if text.is_empty() {
            return;
        }
        self.close_text(out);
        self.open_step(out);
        let id = match &self.reasoning {
            Some(id) => id.clone(),
            None => {
                self.reasonings += 1;
                let id = format!("reasoning-{}", self.reasonings);
                out.push(UiMessageChunk::ReasoningStart { id: id.clone() });
                self.reasoning = Some(id.clone());
                id
            }
        };
        out.push(UiMessageChunk::ReasoningDelta {
            id,
            delta: text.to_owned(),
        });
    }

    fn input_start(&mut self, id: &str, name: &str, out: &mut Vec<UiMessageChunk>) {
        self.open_step(out);
        let call = self.calls.entry(id.to_owned()).or_default();
        if !call.started {
            call.started = true;
            out.push(UiMessageChunk::ToolInputStart {
                tool_call_id: id.to_owned(),
                tool_name: name.to_owned(),
            });
        }
    }

    fn input_available(
        &mut self,
        id: &str,
        name: &str,
        input: &Value,
        out: &mut Vec<UiMessageChunk>,
    ) {
        self.input_start(id, name, out);
        let call = self.calls.entry(id.to_owned()).or_default();
        if !call.available {
            call.available = true;
            out.push(UiMessageChunk::ToolInputAvailable {
                tool_call_id: id.to_owned(),
                tool_name: name.to_owned(),
                input: input.clone(),
            });
        }
    }

    fn finish_with(&mut self, termination: &Termination, out: &mut Vec<UiMessageChunk>) {
        self.close_parts(out);
        if let Termination::Paused(paused) = termination {
            for call in paused.pending() {
                self.input_available(&call.id, &call.name, &call.input, out);
                if call.waits_for == WaitsFor::Approval {
                    out.push(UiMessageChunk::ToolApprovalRequest {
                        approval_id: call.id.clone(),
                        tool_call_id: call.id.clone(),
                        signature: Some(call.digest.clone()),
                    });
                }
            }
        }
        self.close_step(out);
        let reason = match termination {
            Termination::Completed => FinishReason::Stop,
            Termination::MaxTokens => FinishReason::Length,
            Termination::Refused => FinishReason::ContentFilter,
            Termination::Paused(_) => FinishReason::ToolCalls,
            // Stopped after its turn at the host's request: a normal end, as `streamText`
            // ends when its `stopWhen` stops it after a step, with the step's own reason.
            Termination::StoppedAfterTurn => match self.last_stop {
                Some(StopReason::ToolUse) => FinishReason::ToolCalls,
                Some(StopReason::MaxTokens) => FinishReason::Length,
                _ => FinishReason::Stop,
            },
            Termination::Error(e) => {
                out.push(UiMessageChunk::Error {
                    error_text: e.to_string(),
                });
                FinishReason::Error
            }
            Termination::Cancelled => {
                out.push(UiMessageChunk::Abort { reason: None });
                FinishReason::Other
            }
            // Stopped by a limit, a budget, a hook or the model: said in `data-stopped`.
            other @ (Termination::MaxTurns
            | Termination::TokenBudget { .. }
            | Termination::CostBudget { .. }
            | Termination::ToolFailures { .. }
            | Termination::RepeatedToolCall { .. }
            | Termination::StoppedByHook { .. }
            | Termination::InvalidOutput { .. }) => {
                out.push(data(
                    "stopped",
                    serde_json::json!({ "reason": other.to_string() }),
                ));
                FinishReason::Other
            }
        };
        out.push(UiMessageChunk::Finish {
            finish_reason: Some(reason),
        });
        self.finished = true;
    }
}

/// A transient data chunk.
/// The transient `data-{name}` part of an event about the run itself ([`super::run_status`]).
fn status_chunk(event: &AgentEvent) -> Option<UiMessageChunk> {
    super::run_status(event).map(|(name, value)| data(&name.replace('_', "-"), value))
}

fn data(name: &str, value: Value) -> UiMessageChunk {
    UiMessageChunk::Data(DataChunk::new(name, value).transient())
}

// ---------------------------------------------------------------------------------------
// The request.

/// Who wrote a `UIMessage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UiRole {
    System,
    User,
    Assistant,
}

/// A tool part's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolState {
    InputStreaming,
    InputAvailable,
    ApprovalRequested,
    ApprovalResponded,
    OutputAvailable,
    OutputError,
    OutputDenied,
}

impl ToolState {
    fn parse(s: &str) -> Option<ToolState> {
        Some(match s {
            "input-streaming" => ToolState::InputStreaming,
            "input-available" => ToolState::InputAvailable,
            "approval-requested" => ToolState::ApprovalRequested,
            "approval-responded" => ToolState::ApprovalResponded,
            "output-available" => ToolState::OutputAvailable,
            "output-error" => ToolState::OutputError,
            "output-denied" => ToolState::OutputDenied,
            _ => return None,
        })
    }
}

/// A tool part (`tool-{name}` or `dynamic-tool`).
#[derive(Debug, Clone, PartialEq)]
struct ToolPart {
    name: String,
    call_id: String,
    state: ToolState,
    input: Value,
    output: Value,
    error_text: Option<String>,
    approved: Option<bool>,
    reason: Option<String>,
    /// `approval.signature`: the digest of the call the approval was asked for.
    signature: Option<String>,
}

impl ToolPart {
    /// The reason the model reads for a denial.
    fn denial(&self) -> String {
        match &self.reason {
            Some(reason) if !reason.trim().is_empty() => reason.clone(),
            _ => DEFAULT_DENIAL.to_owned(),
        }
    }

    /// The result text of an output.
    fn output_text(&self) -> String {
        match &self.output {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// Its result, for the history, when it has one.
    fn result(&self) -> Option<ContentBlock> {
        let (content, is_error) = match self.state {
            ToolState::OutputAvailable => (self.output_text(), false),
            ToolState::OutputError => (
                self.error_text
                    .clone()
                    .unwrap_or_else(|| "the tool failed".to_owned()),
                true,
            ),
            ToolState::OutputDenied => (self.denial(), true),
            _ => return None,
        };
        Some(ContentBlock::tool_result(
            self.call_id.clone(),
            content,
            is_error,
        ))
    }
}

/// One part of a `UIMessage`, as far as the agent reads it.
#[derive(Debug, Clone, PartialEq)]
enum UiPart {
    Text(String),
    File {
        media_type: String,
        url: String,
        filename: Option<String>,
    },
    StepStart,
    Tool(ToolPart),
    /// The host's words that steered the run (a `data-steered` part).
    Steered(String),
    /// Reasoning (no provider signature to send back), sources, data parts, types to come.
    Ignored,
}

/// A `UIMessage`.
#[derive(Debug, Clone, PartialEq)]
struct UiMessage {
    role: UiRole,
    parts: Vec<UiPart>,
}

/// The body `useChat` (the `ai` package's `DefaultChatTransport`) posts:
/// `{id, messages, trigger, messageId, …}`, with the whole conversation as `UIMessage`s.
///
/// Parsed leniently: fields it does not read are ignored (a `body` option's extra fields,
/// message metadata, parts of types it does not know). What it reads must have the right
/// shape, else [`from_slice`](Self::from_slice) says what is wrong (for a 400).
///
/// - [`turn`](Self::turn): a new run on the last message, a user message; or, when the
///   agent waits in a paused run, the answers the last assistant message's tool parts give
///   to the waiting calls;
/// - [`history`](Self::history): the conversation before the last user message, for an
///   agent that holds none (without a session, the client holds the conversation).
///
/// System messages are skipped: the server's system prompt rules, and a client cannot set
/// it. Reasoning parts are skipped too: without the provider's signature the model cannot
/// take them back.
///
/// ```
/// use agent_loop_ui::ai_sdk::ChatRequest;
/// use agent_loop_ui::UiTurn;
/// use agent_loop::UserInput;
///
/// let body = br#"{"id": "chat-1", "trigger": "submit-message", "messages": [
///     {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]},
///     {"id": "m2", "role": "assistant", "parts": [
///         {"type": "step-start"}, {"type": "text", "text": "Hello!", "state": "done"}]},
///     {"id": "m3", "role": "user", "parts": [{"type": "text", "text": "How are you?"}]}
/// ]}"#;
/// let request = ChatRequest::from_slice(body)?;
/// assert_eq!(request.id(), "chat-1");
/// assert_eq!(request.turn(None)?, UiTurn::Run(UserInput::text("How are you?")));
/// let history = request.history()?;
/// assert_eq!(history.len(), 2);
/// assert_eq!(history[1].text(), "Hello!");
///
/// let bad = ChatRequest::from_slice(br#"{"id": "chat-1"}"#).unwrap_err();
/// assert!(bad.message().contains("messages"));
/// # Ok::<(), agent_loop_ui::UiRequestError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    id: String,
    trigger: Option<String>,
    message_id: Option<String>,
    messages: Vec<UiMessage>,
}

impl ChatRequest {
    /// Parses a request body. `messages` is required; `id` (the chat's id, which the
    /// transport always sends) is read when present.
    pub fn from_slice(body: &[u8]) -> Result<ChatRequest, UiRequestError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| UiRequestError::new(format!("the body is not JSON: {e}")))?;
        let Value::Object(body) = value else {
            return Err(UiRequestError::new(
                "the body must be a JSON object with `messages`",
            ));
        };
        let id = optional_string(&body, "id", "the body")?.unwrap_or_default();
        let trigger = optional_string(&body, "trigger", "the body")?;
        let message_id = optional_string(&body, "messageId", "the body")?;
        let messages = match body.get("messages") {
            None | Some(Value::Null) => {
                return Err(UiRequestError::new("the body has no `messages`"))
            }
            Some(Value::Array(messages)) => messages
                .iter()
                .enumerate()
                .map(|(i, m)| parse_message(m, &format!("messages[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(UiRequestError::new("`messages` must be an array")),
        };
        Ok(ChatRequest {
            id,
            trigger,
            message_id,
            messages,
        })
    }

    /// The chat's id (empty when the body has none).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the client asks (`submit-message`, `regenerate-message`), if it says.
    pub fn trigger(&self) -> Option<&str> {
        self.trigger.as_deref()
    }

    /// The `messageId` the client sent: the message a `submit-message` continues or replaces.
    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    /// The number of messages the request carries.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it carries no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The conversation the client holds, before the last user message: user messages with
    /// their text and files; each assistant message split at its `step-start` parts, one
    /// model response per step (its text and tool calls) followed by a user message with
    /// the results of its calls that have one (errors and denials as error results). A call
    /// without a result is answered by the agent as interrupted when it restores the
    /// history. System messages and reasoning parts are skipped.
    ///
    /// The results are what the client holds: what the stream sent it, which
    /// [`RunPolicy::event_content_limit`](agent_loop::agent::RunPolicy::event_content_limit) may
    /// have shortened. An agent with a [session](agent_loop::AgentBuilder::session) keeps its own
    /// conversation, whole, and does not read this.
    pub fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        let end = self
            .messages
            .iter()
            .rposition(|m| m.role == UiRole::User)
            .unwrap_or(0);
        let mut out = Vec::new();
        for (i, message) in self.messages.iter().take(end).enumerate() {
            match message.role {
                UiRole::System => {}
                UiRole::User => {
                    if let Some(input) = user_input(message, &format!("messages[{i}]"))? {
                        out.push(input.into_message());
                    }
                }
                UiRole::Assistant => assistant_history(message, &mut out),
            }
        }
        Ok(out)
    }

    /// What the request asks of an agent waiting in `paused` (or in none).
    ///
    /// - With a paused run and a user message last, after the assistant message that shows
    ///   a waiting call: the person typed instead of answering, [`UiTurn::RunLeavingPause`]
    ///   with that message's text and files (what becomes of the waiting calls is the host's
    ///   [`NewMessageWhilePaused`](super::NewMessageWhilePaused)).
    /// - With a paused run otherwise: the last assistant message's tool parts answer the
    ///   calls that wait (parts of other calls are ignored): `approval-responded`
    ///   approves, or denies with the person's reason ([`DEFAULT_DENIAL`] when none);
    ///   `output-available` is the call's result (a string output as it is, any other as its
    ///   JSON text); `output-error` an error result; `output-denied` a denial. A request
    ///   that answers none of them is refused, naming the calls that wait.
    /// - Without: the last message must be a user message; its text and files (images as
    ///   `data:` or `http(s)` URLs, PDFs) are the run's input.
    ///
    /// The body that resumes a paused run is the conversation again, as the client's
    /// `addToolApprovalResponse({id, approved, reason})` left it: the last assistant message
    /// with the waiting call's part in the state `approval-responded` and its `approval`
    /// (`id` is the `approvalId` of the stream's `tool-approval-request`, which this crate
    /// makes the call's id; `reason` is what the model reads of a denial, optional;
    /// `signature`, the request's own, binds the verdict to the call it was asked for:
    /// [`Resolutions::with_digest`]):
    ///
    /// ```json
    /// {
    ///   "id": "chat-1",
    ///   "trigger": "submit-message",
    ///   "messages": [
    ///     {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Tidy up the logs."}]},
    ///     {"id": "m2", "role": "assistant", "parts": [
    ///       {"type": "step-start"},
    ///       {"type": "tool-delete_file", "toolCallId": "call_1", "state": "approval-responded",
    ///        "input": {"path": "logs/old.log"},
    ///        "approval": {"id": "call_1", "approved": false, "reason": "Keep it.",
    ///                     "signature": "sha256:9f2c…"}}
    ///     ]}
    ///   ]
    /// }
    /// ```
    ///
    /// A deferred tool's result comes the same way, as the part in the state
    /// `output-available` with its `output` (or `output-error` with its `errorText`).
    ///
    /// `trigger: "regenerate-message"` is refused: the agent's conversation cannot drop its
    /// last answer to give another.
    pub fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        if self.trigger.as_deref() == Some("regenerate-message") {
            return Err(UiRequestError::new(
                "`trigger: \"regenerate-message\"` is not supported: the agent cannot take back \
                 an answer; send a new message instead",
            ));
        }
        match paused {
            Some(paused) if self.typed_instead(paused) => {
                self.new_message().map(UiTurn::RunLeavingPause)
            }
            Some(paused) => self.answers(paused).map(UiTurn::Resume),
            None => {
                if self.messages.last().is_some_and(|m| m.role != UiRole::User) {
                    return Err(UiRequestError::new(format!(
                        "the last message must be a user message: {}",
                        super::NO_RUN_WAITS
                    )));
                }
                self.new_message().map(UiTurn::Run)
            }
        }
    }

    /// Whether the person typed instead of answering: the last message is a user message,
    /// after an assistant message that shows a call `paused` waits for (the client saw the
    /// request for an answer).
    fn typed_instead(&self, paused: &PausedRun) -> bool {
        let Some((last, before)) = self.messages.split_last() else {
            return false;
        };
        let pending = paused.pending();
        last.role == UiRole::User
            && before.iter().any(|m| {
                m.role == UiRole::Assistant
                    && m.parts.iter().any(|p| match p {
                        UiPart::Tool(t) => pending.iter().any(|c| c.id == t.call_id),
                        _ => false,
                    })
            })
    }

    /// The last message's text and files, as the input of a run.
    fn new_message(&self) -> Result<UserInput, UiRequestError> {
        let Some(last) = self.messages.last() else {
            return Err(UiRequestError::new("`messages` is empty"));
        };
        let path = format!("messages[{}]", self.messages.len() - 1);
        user_input(last, &path)?.ok_or_else(|| {
            UiRequestError::new(format!("{path}: the user message has no text and no file"))
        })
    }

    /// The answers the last assistant message gives the calls `paused` waits for.
    fn answers(&self, paused: &PausedRun) -> Result<Resolutions, UiRequestError> {
        let pending = paused.pending();
        let parts: Vec<&ToolPart> = self
            .messages
            .iter()
            .rev()
            .find(|m| m.role == UiRole::Assistant)
            .map(|m| {
                m.parts
                    .iter()
                    .filter_map(|p| match p {
                        UiPart::Tool(t) => Some(t),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut answers = Resolutions::new();
        for call in &pending {
            let Some(part) = parts.iter().rev().find(|p| p.call_id == call.id) else {
                continue;
            };
            let resolution = match part.state {
                ToolState::ApprovalResponded if call.waits_for == WaitsFor::Approval => {
                    if part.approved == Some(true) {
                        Resolution::Approve
                    } else {
                        Resolution::Deny {
                            reason: part.denial(),
                        }
                    }
                }
                ToolState::OutputAvailable => Resolution::Result {
                    content: part.output_text(),
                    is_error: false,
                },
                ToolState::OutputError => Resolution::Result {
                    content: part
                        .error_text
                        .clone()
                        .unwrap_or_else(|| "the tool failed".to_owned()),
                    is_error: true,
                },
                ToolState::OutputDenied => Resolution::Deny {
                    reason: part.denial(),
                },
                _ => continue,
            };
            // With the digest the approval was asked for (its signature), the agent refuses
            // the answer if another call waits under this id now (`ResumeError::StaleAnswer`).
            answers = match &part.signature {
                Some(digest) => answers.with_digest(call.id.clone(), digest.clone(), resolution),
                None => answers.with(call.id.clone(), resolution),
            };
        }
        if answers.is_empty() {
            return Err(UiRequestError::new(format!(
                "the run waits for answers, and the last assistant message gives none: {}",
                super::waiting_calls(paused)
            )));
        }
        Ok(answers)
    }
}

#[cfg(feature = "axum")]
impl super::http::UiRequest for ChatRequest {
    fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        ChatRequest::history(self)
    }
    fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        ChatRequest::turn(self, paused)
    }
}

/// Appends an assistant `UIMessage` to a history: per step, its response, then its results.
fn assistant_history(message: &UiMessage, out: &mut Vec<Message>) {
    let mut response = Vec::new();
    let mut results = Vec::new();
    let flush = |response: &mut Vec<ContentBlock>,
                 results: &mut Vec<ContentBlock>,
                 out: &mut Vec<Message>| {
        if !response.is_empty() {
            out.push(Message {
                role: Role::Assistant,
                content: std::mem::take(response),
            });
        }
        if !results.is_empty() {
            out.push(Message {
                role: Role::User,
                content: std::mem::take(results),
            });
        }
    };
    for part in &message.parts {
        match part {
            UiPart::StepStart => flush(&mut response, &mut results, out),
            // The host's words, after the step's results (the core adds them to the user
            // message that carries those), or after the user message before the step.
            UiPart::Steered(text) => {
                if response.is_empty() && results.is_empty() {
                    match out.last_mut() {
                        Some(last) if last.role == Role::User => {
                            last.content.push(ContentBlock::text(text.clone()))
                        }
                        _ => out.push(Message::user(text.clone())),
                    }
                } else {
                    results.push(ContentBlock::text(text.clone()));
                }
            }
            UiPart::Text(text) if !text.is_empty() => response.push(ContentBlock::text(text)),
            UiPart::Tool(tool) if tool.state != ToolState::InputStreaming => {
                response.push(ContentBlock::ToolUse {
                    id: tool.call_id.clone(),
                    name: tool.name.clone(),
                    input: match &tool.input {
                        Value::Null => Value::Object(Default::default()),
                        input => input.clone(),
                    },
                });
                results.extend(tool.result());
            }
            _ => {}
        }
    }
    flush(&mut response, &mut results, out);
}

/// The text and files of a user message, as the agent's input (`None` when it has neither).
fn user_input(message: &UiMessage, path: &str) -> Result<Option<UserInput>, UiRequestError> {
    let mut input = UserInput::default();
    let mut blank = true;
    for (j, part) in message.parts.iter().enumerate() {
        match part {
            UiPart::Text(text) if !text.is_empty() => {
                blank = false;
                input = input.and_text(text.clone());
            }
            UiPart::File {
                media_type,
                url,
                filename,
            } => {
                let at = format!("{path}.parts[{j}]");
                blank = false;
                input = input.block(file_block(media_type, url, filename.as_deref(), &at)?);
            }
            _ => {}
        }
    }
    Ok((!blank).then_some(input))
}

/// A file part as an image or a document.
fn file_block(
    media_type: &str,
    url: &str,
    filename: Option<&str>,
    at: &str,
) -> Result<ContentBlock, UiRequestError> {
    let bad = |e: &dyn std::fmt::Display| UiRequestError::new(format!("{at}: {e}"));
    let web = url.starts_with("https://") || url.starts_with("http://");
    if media_type.starts_with("image/") {
        if !web && !url.starts_with("data:") {
            return Err(UiRequestError::new(format!(
                "{at}: an image must be a `data:` URL or an http(s) URL"
            )));
        }
        return Image::from_url(url).map(Into::into).map_err(|e| bad(&e));
    }
    if media_type == "application/pdf" {
        if !web && !url.starts_with("data:") {
            return Err(UiRequestError::new(format!(
                "{at}: a PDF must be a base64 `data:` URL or an http(s) URL"
            )));
        }
        let document = Document::from_url(url).map_err(|e| bad(&e))?;
        let document = match filename {
            Some(name) if !name.is_empty() => document.title(name),
            _ => document,
        };
        return Ok(document.into());
    }
    Err(UiRequestError::new(format!(
        "{at}: files of type {media_type:?} are not supported (images and PDFs are)"
    )))
}

/// A string field, if present (`null` counts as absent).
fn optional_string(
    object: &serde_json::Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<Option<String>, UiRequestError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(UiRequestError::new(format!(
            "{at}: `{key}` must be a string"
        ))),
    }
}

/// A string field that must be there.
fn required_string(
    object: &serde_json::Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<String, UiRequestError> {
    optional_string(object, key, at)?
        .ok_or_else(|| UiRequestError::new(format!("{at}: `{key}` is missing")))
}

fn parse_message(value: &Value, at: &str) -> Result<UiMessage, UiRequestError> {
    let Value::Object(message) = value else {
        return Err(UiRequestError::new(format!("{at} must be an object")));
    };
    let role = match required_string(message, "role", at)?.as_str() {
        "user" => UiRole::User,
        "assistant" => UiRole::Assistant,
        "system" => UiRole::System,
        other => {
            return Err(UiRequestError::new(format!(
                "{at}: `role` must be \"user\", \"assistant\" or \"system\", not {other:?}"
            )))
        }
    };
    let parts = match message.get("parts") {
        None | Some(Value::Null) => {
            return Err(UiRequestError::new(format!("{at}: `parts` is missing")))
        }
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| parse_part(p, &format!("{at}.parts[{j}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(UiRequestError::new(format!(
                "{at}: `parts` must be an array"
            )))
        }
    };
    Ok(UiMessage { role, parts })
}

fn parse_part(value: &Value, at: &str) -> Result<UiPart, UiRequestError> {
    let Value::Object(part) = value else {
        return Err(UiRequestError::new(format!("{at} must be an object")));
    };
    let kind = required_string(part, "type", at)?;
    Ok(match kind.as_str() {
        "text" => UiPart::Text(required_string(part, "text", at)?),
        "file" => UiPart::File {
            media_type: required_string(part, "mediaType", at)?,
            url: required_string(part, "url", at)?,
            filename: optional_string(part, "filename", at)?,
        },
        "step-start" => UiPart::StepStart,
        "data-steered" => match part.get("data").and_then(|d| d.get("text")) {
            Some(Value::String(text)) if !text.is_empty() => UiPart::Steered(text.clone()),
            _ => UiPart::Ignored,
        },
        "dynamic-tool" => {
            let name = required_string(part, "toolName", at)?;
            UiPart::Tool(parse_tool(part, name, at)?)
        }
        kind => match kind.strip_prefix("tool-") {
            Some(name) => UiPart::Tool(parse_tool(part, name.to_owned(), at)?),
            None => UiPart::Ignored,
        },
    })
}

fn parse_tool(
    part: &serde_json::Map<String, Value>,
    name: String,
    at: &str,
) -> Result<ToolPart, UiRequestError> {
    let call_id = required_string(part, "toolCallId", at)?;
    let state = required_string(part, "state", at)?;
    let state = ToolState::parse(&state)
        .ok_or_else(|| UiRequestError::new(format!("{at}: {state:?} is not a tool part state")))?;
    let (approved, reason, signature) = match part.get("approval") {
        None | Some(Value::Null) => (None, None, None),
        Some(Value::Object(approval)) => {
            let at = format!("{at}.approval");
            let approved = match approval.get("approved") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(b)) => Some(*b),
                Some(_) => {
                    return Err(UiRequestError::new(format!(
                        "{at}: `approved` must be a boolean"
                    )))
                }
            };
            (
                approved,
                optional_string(approval, "reason", &at)?,
                optional_string(approval, "signature", &at)?,
            )
        }
        Some(_) => {
            return Err(UiRequestError::new(format!(
                "{at}: `approval` must be an object"
            )))
        }
    };
    if state == ToolState::ApprovalResponded && approved.is_none() {
        return Err(UiRequestError::new(format!(
            "{at}: an `approval-responded` part needs `approval.approved`"
        )));
    }
    Ok(ToolPart {
        name,
        call_id,
        state,
        input: part.get("input").cloned().unwrap_or(Value::Null),
        output: part.get("output").cloned().unwrap_or(Value::Null),
        error_text: optional_string(part, "errorText", at)?,
        approved,
        reason,
        signature,
    })
}

/// A run's events as UI message chunks. A stream that ends without
/// [`Finished`](AgentEvent::Finished) is closed by [`UiStreamEncoder::finish`].
pub fn encode_stream(
    events: impl Stream<Item = AgentEvent> + Send + 'static,
    mut encoder: UiStreamEncoder,
) -> impl Stream<Item = UiMessageChunk> + Send + 'static {
    events
        .map(Some)
        .chain(futures::stream::once(async { None }))
        .flat_map(move |event| {
            futures::stream::iter(match event {
                Some(event) => encoder.encode(&event),
                None => encoder.finish(),
            })
        })
}

/// The SSE body of a chunk stream: one `data:` frame per chunk, then `data: [DONE]`.
pub fn sse_body(
    chunks: impl Stream<Item = UiMessageChunk> + Send + 'static,
) -> impl Stream<Item = Bytes> + Send + 'static {
    chunks
        .map(|chunk| sse_frame(&chunk))
        .chain(futures::stream::once(async {
            Bytes::from(agent_loop::wire::sse::SseFrame::new("[DONE]").to_string())
        }))
}

/// Answers a `useChat` request with `agent`: parses `body`, runs or resumes the agent, and
/// streams the run as a UI message stream (with the [`STREAM_HEADER`]). A body that is not a
/// valid request gets a 400 with a JSON `{"error": "…"}` saying why, and nothing of the agent
/// or its session changes; a run already in flight gets a 409.
///
/// A new user message while the run waits for approvals denies the waiting calls and goes
/// on ([`NewMessageWhilePaused::DenyAndContinue`](super::NewMessageWhilePaused)); choose
/// otherwise with [`respond_with`].
///
/// Dropping the response's body (the client aborted the fetch, or went away) drops the run's
/// stream, which cancels the run; unless the run is kept for reconnects
/// ([`RespondOptions::resumable`](super::RespondOptions::resumable), [`reconnect`]), when it
/// goes on for the grace time. Each SSE frame carries its id (`id: 1`, `id: 2`, …).
#[cfg(feature = "axum")]
pub async fn respond(agent: &mut agent_loop::Agent, body: &[u8]) -> axum::response::Response {
    respond_with(agent, body, &super::RespondOptions::default()).await
}

/// [`respond`] with options: what a new user message does while the run waits for answers
/// ([`RespondOptions::while_paused`](super::RespondOptions::while_paused)).
#[cfg(feature = "axum")]
pub async fn respond_with(
    agent: &mut agent_loop::Agent,
    body: &[u8],
    options: &super::RespondOptions,
) -> axum::response::Response {
    let request = match ChatRequest::from_slice(body) {
        Ok(request) => request,
        Err(e) => return super::http::refusal(super::http::StartError::Request(e)),
    };
    let handle = agent.handle();
    match super::http::start_turn(agent, &request, options).await {
        Ok(started) => {
            let mut encoder = UiStreamEncoder::new();
            if let Some((paused, answers)) = &started.resumed {
                encoder = encoder.resuming(paused, answers);
            }
            if let Some(paused) = &started.left {
                encoder = encoder.leaving(paused);
            }
            let frames = sse_body(encode_stream(started.events, encoder));
            let key = options.stream_key(request.id());
            super::http::run_response(frames, options, &key, "", handle, &[STREAM_HEADER])
        }
        Err(e) => super::http::refusal(e),
    }
}

/// Answers the AI SDK's reconnect, `GET {api}/{chatId}/stream` (what `useChat({ resume:
/// true })` and `Chat.resumeStream()` send, with no `Last-Event-ID`: the `ai` package replays
/// the stream from its start), for runs kept in `streams` by
/// [`respond_with`] with [`RespondOptions::resumable`](super::RespondOptions::resumable):
///
/// - the chat's run is going: its frames from the first (or after the request's
///   `Last-Event-ID`), then the live ones, each once;
/// - it has ended: with a `Last-Event-ID`, the frames after it (the client was cut off);
///   without one, `204 No Content`, as when no run is kept (the client loads the
///   conversation instead);
/// - the frames the client needs are no longer kept ([`ReplayLimits`](crate::ReplayLimits)):
///   `410 Gone`; an id the run never sent: `400`.
///
/// Every frame carries its id (`id: 7`). Runs kept by [`respond_with`] with a
/// [caller](super::RespondOptions::caller) are found under
/// [`stream_key`](super::RespondOptions::stream_key)`(chat_id)`: pass that as `chat_id`.
#[cfg(feature = "axum")]
pub fn reconnect(
    streams: &super::RunStreams,
    chat_id: &str,
    headers: &axum::http::HeaderMap,
) -> axum::response::Response {
    let last = super::http::last_event_id(headers);
    match streams.find(chat_id, None) {
        Some(true) => {}
        Some(false) if last.is_some() => {}
        _ => {
            let mut response = axum::response::Response::default();
            *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
            return response;
        }
    }
    super::http::reconnect_response(streams, chat_id, None, last, &[STREAM_HEADER])
}
