//! AG-UI 1.0 (`@ag-ui/core`, `@ag-ui/client`): `RunAgentInput` in, AG-UI events out.
//!
//! - [`RunAgentInput`] parses the request body leniently (unknown fields are ignored) and
//!   says what the client asks: a new run on its last user message, or the resumption of the
//!   agent's paused run with the answers in its `resume` entries ([`RunAgentInput::turn`]).
//! - [`AgUiEncoder`] turns a run's [`AgentEvent`]s into [`AgUiEvent`]s: a sans-IO,
//!   deterministic state machine whose ids are made from the request's run id.
//! - [`encode_stream`] and [`sse_body`] make the response body; with the feature `axum`,
//!   [`respond`] is the whole handler.
//!
//! # How the agent's run maps to AG-UI
//!
//! | agent                     | AG-UI |
//! |---------------------------|-------|
//! | (first event)             | `RUN_STARTED` |
//! | `TurnStart`/`TurnEnd`     | `STEP_STARTED`/`STEP_FINISHED` `"turn N"` |
//! | `TextDelta`               | `TEXT_MESSAGE_START` (once, id `{runId}:t{turn}`), `TEXT_MESSAGE_CONTENT` |
//! | `ThinkingDelta`           | `REASONING_START`, `REASONING_MESSAGE_START`, `REASONING_MESSAGE_CONTENT` (id `{message}:reasoning`) |
//! | `ToolCallStart`, `ToolInputDelta`, `ToolCall` | `TOOL_CALL_START` (parent: the turn's assistant message), `TOOL_CALL_ARGS`, `TOOL_CALL_END` |
//! | `ToolResult`              | `TOOL_CALL_RESULT` (id `{runId}:r:{callId}`) |
//! | `Steered` (the host's words, [`AgentHandle::steer`]) | a user message: `TEXT_MESSAGE_START` (`role: "user"`, id `{runId}:s{n}`), `TEXT_MESSAGE_CONTENT`, `TEXT_MESSAGE_END` |
//! | `Retry`, `Fallback`, `Compacted`, `Handoff`, `ToolProgress`, `RateLimits`, `SubAgent` | `CUSTOM` `agent_loop.retry`, … |
//! | `Finished`                | `CUSTOM` `agent_loop.undelivered` `{"texts": […]}` when the run ended before hearing some of the host's words ([`RunOutcome::undelivered`]), `MESSAGES_SNAPSHOT` ([`encode_stream`]), then `RUN_FINISHED` or `RUN_ERROR` |
//!
//! Choices the protocol leaves open:
//!
//! - A run that completed gives `RUN_FINISHED` with the outcome `success` and the final text
//!   (or the structured answer) as its `result`. So does a run the host stopped after its
//!   turn ([`AgentHandle::stop_after_turn`], [`Termination::StoppedAfterTurn`]): its turn
//!   finished, nothing was aborted, and nothing waits. A paused run gives the outcome `interrupt`,
//!   one interrupt per waiting call, with the id `{pauseId}:{callId}`: the pause id makes an
//!   answer to an older pause of the same call an error rather than a verdict on the new one.
//!   Each interrupt's `metadata` is `{"digest": "sha256:…"}`, the call's
//!   [digest](agent_loop::agent::PendingCall::digest) (its id, tool and arguments); a
//!   `resume` entry whose `metadata` gives it back binds its answer to that very call, and is
//!   refused (`RUN_ERROR` with the code `stale_answer`, nothing run, the run still waiting)
//!   if another call waits under that id by then (after a rewind, or from another branch).
//!   A cancelled run gives the outcome `cancelled`. An error gives `RUN_ERROR` with a `code`
//!   naming its kind (`llm`, `tool`, `session`…).
//! - A run stopped by a limit or a refusal (turn limit, token or cost budget, repeated or
//!   failing calls, a hook, a refusal, `max_tokens`, no valid structured answer) did not do
//!   what it was asked and was not cancelled by whoever ran it: it ends with `RUN_ERROR`
//!   whose `code` names why (`max_turns`, `token_budget`, `cost_budget`, `tool_failures`,
//!   `repeated_tool_call`, `stopped_by_hook`, `refused`, `max_tokens`, `invalid_output`) and
//!   whose message is the [`Termination`]'s text. Its usage is there as for any end.
//! - `RateLimits` becomes `CUSTOM` `agent_loop.rate_limits` (the figures as JSON). A
//!   sub-agent's run is not streamed into the conversation (its text is not the parent's
//!   answer): its turn starts, calls, results and end become `CUSTOM` `agent_loop.sub_agent`
//!   events `{path, type, …}`; its deltas are left out.
//! - The text of an attempt voided by a `Retry` or `Fallback` stays in the message the client
//!   built from it; the next attempt's text goes in a new message (`{runId}:t{turn}.{n}`), and
//!   the `MESSAGES_SNAPSHOT` at the end (which the client applies as the conversation) has
//!   only what the agent kept.
//! - `MESSAGES_SNAPSHOT` keeps the client's ids: a message the request carried keeps its id
//!   (found by tool call id, else by its place among the messages of its role), a message of
//!   this run the id it was streamed with; any other gets `{runId}:m{index}`.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agent_loop::agent::{AgentHandle, PendingCall, Resolution, Resolutions, WaitsFor};
use agent_loop::media::{Document, Image, MediaSource};
use agent_loop::{
    AgentEvent, ContentBlock, Error, Message, PausedRun, Role, RunOutcome, Termination, Usage,
    UserInput,
};

use super::{sse_frame, UiRequestError, UiTurn};

/// One AG-UI event, as `@ag-ui/core` 1.0 defines it (the subset this crate sends): JSON with
/// a `type` tag in SCREAMING_SNAKE_CASE and camelCase fields; optional fields are left out
/// when `None`.
///
/// ```
/// use agent_loop_ui::agui::AgUiEvent;
///
/// let event = AgUiEvent::TextMessageContent {
///     message_id: "run-1:t1".into(),
///     delta: "Hello".into(),
/// };
/// let json = serde_json::to_value(&event)?;
/// assert_eq!(
///     json,
///     serde_json::json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "run-1:t1", "delta": "Hello"})
/// );
/// assert_eq!(serde_json::from_value::<AgUiEvent>(json)?, event);
/// # Ok::<(), serde_json::Error>(())
/// ```
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
    /// The run ended without failing.
    #[serde(rename_all = "camelCase")]
    RunFinished {
        /// The thread.
        thread_id: String,
        /// The run.
        run_id: String,
        /// What the run produced (a completed run: its final text or structured answer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// How it ended (absent: success).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<RunFinishedOutcome>,
        /// The tokens it used.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Vec<TokenUsage>>,
    },
    /// The run failed (or was stopped by a limit: see the [module docs](self)).
    #[serde(rename_all = "camelCase")]
    RunError {
        /// What happened.
        message: String,
        /// Its kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        /// The tokens the run used.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Vec<TokenUsage>>,
    },
    /// A step (a model turn) starts.
    #[serde(rename_all = "camelCase")]
    StepStarted {
        /// `turn N`.
        step_name: String,
    },
    /// A step ends.
    #[serde(rename_all = "camelCase")]
    StepFinished {
        /// `turn N`.
        step_name: String,
    },
    /// A streamed text message opens.
    #[serde(rename_all = "camelCase")]
    TextMessageStart {
        /// The message.
        message_id: String,
        /// `assistant`.
        #[serde(default = "assistant")]
        role: String,
    },
    /// Text of an open message.
    #[serde(rename_all = "camelCase")]
    TextMessageContent {
        /// The message.
        message_id: String,
        /// The text (never empty).
        delta: String,
    },
    /// A streamed text message closes.
    #[serde(rename_all = "camelCase")]
    TextMessageEnd {
        /// The message.
        message_id: String,
    },
    /// A tool call opens.
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_call_name: String,
        /// The assistant message that carries the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    /// A fragment of a call's JSON arguments.
    #[serde(rename_all = "camelCase")]
    ToolCallArgs {
        /// The call.
        tool_call_id: String,
        /// The fragment.
        delta: String,
    },
    /// A call's arguments are complete.
    #[serde(rename_all = "camelCase")]
    ToolCallEnd {
        /// The call.
        tool_call_id: String,
    },
    /// A call's result: a new tool message.
    #[serde(rename_all = "camelCase")]
    ToolCallResult {
        /// The tool message.
        message_id: String,
        /// The call.
        tool_call_id: String,
        /// What the tool returned.
        content: String,
        /// `tool`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
    },
    /// A span of reasoning opens.
    #[serde(rename_all = "camelCase")]
    ReasoningStart {
        /// The span (the id of the reasoning message inside it).
        message_id: String,
    },
    /// A reasoning message opens.
    #[serde(rename_all = "camelCase")]
    ReasoningMessageStart {
        /// The message.
        message_id: String,
        /// `reasoning`.
        role: String,
    },
    /// Reasoning text.
    #[serde(rename_all = "camelCase")]
    ReasoningMessageContent {
        /// The message.
        message_id: String,
        /// The text (never empty).
        delta: String,
    },
    /// A reasoning message closes.
    #[serde(rename_all = "camelCase")]
    ReasoningMessageEnd {
        /// The message.
        message_id: String,
    },
    /// A span of reasoning closes.
    #[serde(rename_all = "camelCase")]
    ReasoningEnd {
        /// The span.
        message_id: String,
    },
    /// The whole conversation, as the agent keeps it.
    #[serde(rename_all = "camelCase")]
    MessagesSnapshot {
        /// The messages, oldest first.
        messages: Vec<AgUiMessage>,
    },
    /// An event of this crate's own: `agent_loop.retry`, `agent_loop.fallback`,
    /// `agent_loop.compacted`, `agent_loop.handoff`, `agent_loop.tool_progress`,
    /// `agent_loop.rate_limits`, `agent_loop.sub_agent`.
    #[serde(rename_all = "camelCase")]
    Custom {
        /// Its name.
        name: String,
        /// Its fields.
        value: Value,
    },
}

fn assistant() -> String {
    "assistant".to_owned()
}

/// How a run ended (`RUN_FINISHED.outcome`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunFinishedOutcome {
    /// The run completed.
    Success,
    /// The run waits for answers: resume it with a new run whose `resume` entries answer
    /// these.
    Interrupt {
        /// What it waits for (at least one).
        interrupts: Vec<Interrupt>,
    },
    /// The run was cancelled.
    Cancelled,
}

/// Something a paused run waits for: one call's approval or result.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    /// `{pauseId}:{callId}`: what a `resume` entry's `interruptId` names.
    pub id: String,
    /// `tool_approval` or `tool_result`.
    pub reason: String,
    /// What to show the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The call that waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The JSON schema of the `payload` of the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// `{"digest": "sha256:…"}`: the [digest](agent_loop::agent::PendingCall::digest) of
    /// the call that waits (its id, tool and arguments). A `resume` entry that gives it back
    /// in its own `metadata` (`buildResumeArray` of `@ag-ui/client` carries a response's
    /// `metadata`) is refused if the call waiting under that id is no longer this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// Token counts (`RUN_FINISHED.usage`), in AG-UI's accounting: `input_tokens` is the whole
/// prompt, cache reads and writes included; `cached_input_tokens`,
/// `cache_write_input_tokens` (and `reasoning_tokens` of the output) are parts of the totals.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Every prompt token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input plus output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Of the output, the reasoning tokens (when the provider says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Of the input, the tokens read from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Of the input, the tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_input_tokens: Option<u64>,
}

impl From<&Usage> for TokenUsage {
    fn from(usage: &Usage) -> Self {
        TokenUsage {
            input_tokens: Some(usage.total_input_tokens()),
            output_tokens: Some(usage.output_tokens),
            total_tokens: Some(usage.total_tokens()),
            reasoning_tokens: (usage.reasoning_tokens > 0).then_some(usage.reasoning_tokens),
            cached_input_tokens: Some(usage.cache_read_input_tokens),
            cache_write_input_tokens: Some(usage.cache_creation_input_tokens),
        }
    }
}

/// One message of an AG-UI conversation (`MESSAGES_SNAPSHOT`, `RunAgentInput.messages`),
/// tagged by `role`.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum AgUiMessage {
    /// The person's message.
    #[serde(rename_all = "camelCase")]
    User {
        /// Its id.
        id: String,
        /// Text, or content parts (text, images, documents).
        content: AgUiContent,
    },
    /// The model's message: its text and its tool calls.
    #[serde(rename_all = "camelCase")]
    Assistant {
        /// Its id.
        id: String,
        /// Its text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Its calls.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<AgUiToolCall>,
    },
    /// A tool call's result.
    #[serde(rename_all = "camelCase")]
    Tool {
        /// Its id.
        id: String,
        /// What the tool returned.
        content: AgUiContent,
        /// The call it answers.
        tool_call_id: String,
        /// Set when the call failed: what went wrong.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Instructions from the system.
    #[serde(rename_all = "camelCase")]
    System {
        /// Its id.
        id: String,
        /// The instructions.
        content: String,
    },
    /// Instructions from the application's developer.
    #[serde(rename_all = "camelCase")]
    Developer {
        /// Its id.
        id: String,
        /// The instructions.
        content: String,
    },
    /// The model's reasoning, before the assistant message it belongs to.
    #[serde(rename_all = "camelCase")]
    Reasoning {
        /// Its id.
        id: String,
        /// The reasoning text.
        content: String,
    },
}

/// A message's content: a string, or content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AgUiContent {
    /// Plain text.
    Text(String),
    /// Parts.
    Parts(Vec<AgUiContentPart>),
}

/// One content part.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum AgUiContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Its bytes.
        source: AgUiSource,
    },
    /// A document (PDF).
    Document {
        /// Its bytes.
        source: AgUiSource,
    },
    /// Audio (not read by this crate: a request carrying it is refused).
    Audio {
        /// Its bytes.
        source: AgUiSource,
    },
    /// Video (not read by this crate: a request carrying it is refused).
    Video {
        /// Its bytes.
        source: AgUiSource,
    },
}

/// Where a part's bytes are.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum AgUiSource {
    /// Inline, base64.
    #[serde(rename_all = "camelCase")]
    Data {
        /// The base64 text.
        value: String,
        /// The media type.
        mime_type: String,
    },
    /// A URL.
    #[serde(rename_all = "camelCase")]
    Url {
        /// The URL.
        value: String,
        /// The media type, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A file at a provider (not read by this crate: a request carrying it is refused).
    #[serde(rename_all = "camelCase")]
    File {
        /// The provider's handle.
        value: String,
    },
}

/// A tool call of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgUiToolCall {
    /// The call's id.
    pub id: String,
    /// `function`.
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    /// The tool and its arguments.
    pub function: AgUiFunctionCall,
}

fn function() -> String {
    "function".to_owned()
}

/// The tool and arguments of an [`AgUiToolCall`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgUiFunctionCall {
    /// The tool.
    pub name: String,
    /// The arguments, as JSON text.
    pub arguments: String,
}

/// What the encoder knows of one call of the run.
#[derive(Debug, Clone, Default)]
struct CallState {
    started: bool,
    args_sent: bool,
    ended: bool,
}

/// An assistant message this run streamed: its id, the calls it carries and its text (to
/// find it again in the conversation for the snapshot).
#[derive(Debug, Clone)]
struct Streamed {
    id: String,
    calls: Vec<String>,
    text: String,
}

/// The ids the client gave the messages it sent, for the snapshot.
#[derive(Debug, Clone, Default)]
struct ClientIds {
    /// User messages, in order.
    user: Vec<String>,
    /// Assistant messages without tool calls, in order.
    plain: Vec<String>,
    /// Assistant messages, by the ids of their calls.
    by_call: HashMap<String, String>,
    /// Tool messages, by the call they answer.
    results: HashMap<String, String>,
}

/// Encodes a run's [`AgentEvent`]s as AG-UI events: a sans-IO, deterministic state machine
/// (its ids are made from the run id). It keeps AG-UI's sequence rules: `RUN_STARTED` first,
/// every message, reasoning span, tool call and step closed before the run's last event,
/// nothing after it.
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop_ui::agui::{AgUiEncoder, AgUiEvent};
/// use agent_loop::{Agent, AgentEvent};
/// use futures::StreamExt;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
/// let mut agent = Agent::builder(client).build()?;
/// let events: Vec<AgentEvent> = agent.run("Hi").collect().await;
///
/// let mut encoder = AgUiEncoder::new("thread-1", "run-1");
/// let out: Vec<AgUiEvent> = events.iter().flat_map(|e| encoder.encode(e)).collect();
/// assert!(matches!(&out[0], AgUiEvent::RunStarted { run_id, .. } if run_id == "run-1"));
/// assert!(out.contains(&AgUiEvent::TextMessageContent {
///     message_id: "run-1:t1".into(),
///     delta: "Hello!".into(),
/// }));
/// assert!(matches!(out.last(), Some(AgUiEvent::RunFinished { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct AgUiEncoder {
    thread_id: String,
    run_id: String,
    /// `RUN_STARTED` was sent.
    started: bool,
    /// The run's last event was sent: nothing more.
    finished: bool,
    /// The open step's name.
    step: Option<String>,
    /// The turn in progress.
    turn: u32,
    /// Attempts of this turn voided by a retry or a fallback.
    voided: u32,
    /// The assistant message of the turn's attempt was opened (text, reasoning or a call).
    message_opened: bool,
    /// A text message is open.
    text_open: bool,
    /// The open reasoning message's id.
    reasoning: Option<String>,
    /// Reasoning messages of the current assistant message so far.
    reasoning_count: u32,
    /// Calls, by id.
    calls: BTreeMap<String, CallState>,
    /// The turn the resumed run continues (no `TurnStart` for it).
    resumed_turn: Option<u32>,
    /// The assistant messages this run streamed, in order.
    streamed: Vec<Streamed>,
    /// What the client's request said of its messages' ids.
    client: ClientIds,
    /// What a run that left a pause behind says of the calls it denied, sent after
    /// `RUN_STARTED`.
    left: Option<Value>,
    /// The ids of the user messages the host's steering streamed, in order (for the
    /// snapshot).
    steered: Vec<String>,
}

impl AgUiEncoder {
    /// An encoder for the run `run_id` of the thread `thread_id` (the request's).
    pub fn new(thread_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        AgUiEncoder {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            started: false,
            finished: false,
            step: None,
            turn: 0,
            voided: 0,
            message_opened: false,
            text_open: false,
            reasoning: None,
            reasoning_count: 0,
            calls: BTreeMap::new(),
            resumed_turn: None,
            streamed: Vec::new(),
            client: ClientIds::default(),
            left: None,
            steered: Vec::new(),
        }
    }

    /// An encoder for the resumption of `paused`: the run starts inside the paused turn
    /// (`STEP_STARTED "turn N"` right after `RUN_STARTED`), and the calls of the paused
    /// response, which the paused run announced, are not announced again.
    pub fn resuming(mut self, paused: &PausedRun) -> Self {
        self.resumed_turn = Some(paused.turn());
        self.turn = paused.turn();
        if let Some(last) = paused.conversation().messages.last() {
            for (id, _, _) in last.tool_uses() {
                self.calls.insert(
                    id.to_owned(),
                    CallState {
                        started: true,
                        args_sent: true,
                        ended: true,
                    },
                );
            }
        }
        self
    }

    /// An encoder for a run on a new message that left `paused` behind, its waiting calls
    /// denied ([`NewMessageWhilePaused::DenyAndContinue`](super::NewMessageWhilePaused)):
    /// right after `RUN_STARTED`, a `CUSTOM` `agent_loop.calls_denied` event
    /// `{"toolCallIds": […], "reason": "…"}`; the `MESSAGES_SNAPSHOT` at the end has their
    /// tool messages.
    pub fn leaving(mut self, paused: &PausedRun) -> Self {
        self.left = Some(super::calls_denied(paused));
        self
    }

    /// Reuses the ids the client gave the messages of `request` in
    /// [`messages_snapshot`](Self::messages_snapshot), so that the snapshot updates the
    /// client's messages in place rather than replacing them.
    pub fn with_client_messages(mut self, request: &RunAgentInput) -> Self {
        let mut client = ClientIds::default();
        for message in &request.messages {
            match &message.kind {
                Parsed::User(_) => client.user.push(message.id.clone()),
                Parsed::Assistant { calls, .. } if calls.is_empty() => {
                    client.plain.push(message.id.clone())
                }
                Parsed::Assistant { calls, .. } => {
                    for (call, _, _) in calls {
                        client.by_call.insert(call.clone(), message.id.clone());
                    }
                }
                Parsed::Tool { call_id, .. } => {
                    client.results.insert(call_id.clone(), message.id.clone());
                }
                Parsed::Skipped => {}
            }
        }
        self.client = client;
        self
    }

    /// The id of the current turn's assistant message.
    fn message_id(&self) -> String {
        if self.voided == 0 {
            format!("{}:t{}", self.run_id, self.turn)
        } else {
            format!("{}:t{}.{}", self.run_id, self.turn, self.voided + 1)
        }
    }

    /// The id of a call's tool message.
    fn result_id(&self, call_id: &str) -> String {
        format!("{}:r:{call_id}", self.run_id)
    }

    /// Records that the turn's assistant message exists (once per attempt).
    fn open_message(&mut self) {
        if !self.message_opened {
            self.message_opened = true;
            let id = self.message_id();
            self.streamed.push(Streamed {
                id,
                calls: Vec::new(),
                text: String::new(),
            });
        }
    }

    fn close_text(&mut self, out: &mut Vec<AgUiEvent>) {
        if self.text_open {
            self.text_open = false;
            out.push(AgUiEvent::TextMessageEnd {
                message_id: self.message_id(),
            });
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<AgUiEvent>) {
        if let Some(id) = self.reasoning.take() {
            out.push(AgUiEvent::ReasoningMessageEnd {
                message_id: id.clone(),
            });
            out.push(AgUiEvent::ReasoningEnd { message_id: id });
        }
    }

    /// Ends every call that started and did not end.
    fn end_open_calls(&mut self, out: &mut Vec<AgUiEvent>) {
        for (id, call) in &mut self.calls {
            if call.started && !call.ended {
                call.ended = true;
                out.push(AgUiEvent::ToolCallEnd {
                    tool_call_id: id.clone(),
                });
            }
        }
    }

    fn close_step(&mut self, out: &mut Vec<AgUiEvent>) {
        if let Some(step_name) = self.step.take() {
            out.push(AgUiEvent::StepFinished { step_name });
        }
    }

    fn start_call(&mut self, id: &str, name: &str, out: &mut Vec<AgUiEvent>) {
        self.close_text(out);
        self.open_message();
        let parent = self.message_id();
        if let Some(message) = self.streamed.last_mut() {
            message.calls.push(id.to_owned());
        }
        self.calls.insert(
            id.to_owned(),
            CallState {
                started: true,
                ..CallState::default()
            },
        );
        out.push(AgUiEvent::ToolCallStart {
            tool_call_id: id.to_owned(),
            tool_call_name: name.to_owned(),
            parent_message_id: Some(parent),
        });
    }

    /// Announces a whole call (START, ARGS, END), or what of it is missing.
    fn announce_call(&mut self, id: &str, name: &str, input: &Value, out: &mut Vec<AgUiEvent>) {
        let started = self.calls.get(id).is_some_and(|c| c.started);
        if !started {
            self.start_call(id, name, out);
        }
        let call = self.calls.entry(id.to_owned()).or_default();
        if !call.args_sent && !call.ended {
            call.args_sent = true;
            out.push(AgUiEvent::ToolCallArgs {
                tool_call_id: id.to_owned(),
                delta: input.to_string(),
            });
        }
        if !call.ended {
            call.ended = true;
            out.push(AgUiEvent::ToolCallEnd {
                tool_call_id: id.to_owned(),
            });
        }
    }

    /// The events for one agent event. After the run's `Finished`, none.
    pub fn encode(&mut self, event: &AgentEvent) -> Vec<AgUiEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        if !self.started {
            self.started = true;
            out.push(AgUiEvent::RunStarted {
                thread_id: self.thread_id.clone(),
                run_id: self.run_id.clone(),
            });
            if let Some(left) = self.left.take() {
                out.push(custom("agent_loop.calls_denied", left));
            }
            if let Some(turn) = self.resumed_turn {
                let step_name = format!("turn {turn}");
                self.step = Some(step_name.clone());
                out.push(AgUiEvent::StepStarted { step_name });
            }
        }
        if !matches!(event, AgentEvent::ThinkingDelta { .. }) {
            self.close_reasoning(&mut out);
        }
        match event {
            AgentEvent::TurnStart { turn } => {
                self.close_text(&mut out);
                self.end_open_calls(&mut out);
                self.close_step(&mut out);
                self.turn = *turn;
                self.voided = 0;
                self.message_opened = false;
                self.reasoning_count = 0;
                let step_name = format!("turn {turn}");
                self.step = Some(step_name.clone());
                out.push(AgUiEvent::StepStarted { step_name });
            }
            AgentEvent::TextDelta { text } if !text.is_empty() => {
                self.open_message();
                if !self.text_open {
                    self.text_open = true;
                    out.push(AgUiEvent::TextMessageStart {
                        message_id: self.message_id(),
                        role: assistant(),
                    });
                }
                if let Some(message) = self.streamed.last_mut() {
                    message.text.push_str(text);
                }
                out.push(AgUiEvent::TextMessageContent {
                    message_id: self.message_id(),
                    delta: text.clone(),
                });
            }
            AgentEvent::ThinkingDelta { text } if !text.is_empty() => {
                if self.reasoning.is_none() {
                    self.close_text(&mut out);
                    self.open_message();
                    self.reasoning_count += 1;
                    let id = reasoning_id(&self.message_id(), self.reasoning_count);
                    self.reasoning = Some(id.clone());
                    out.push(AgUiEvent::ReasoningStart {
                        message_id: id.clone(),
                    });
                    out.push(AgUiEvent::ReasoningMessageStart {
                        message_id: id,
                        role: "reasoning".to_owned(),
                    });
                }
                if let Some(id) = &self.reasoning {
                    out.push(AgUiEvent::ReasoningMessageContent {
                        message_id: id.clone(),
                        delta: text.clone(),
                    });
                }
            }
            AgentEvent::ToolCallStart { id, name } => {
                let known = self.calls.get(id.as_str()).is_some_and(|c| c.started);
                if !known {
                    self.start_call(id, name, &mut out);
                }
            }
            AgentEvent::ToolInputDelta { id, partial_json } => {
                if let Some(call) = self.calls.get_mut(id.as_str()) {
                    if call.started && !call.ended && !partial_json.is_empty() {
                        call.args_sent = true;
                        out.push(AgUiEvent::ToolCallArgs {
                            tool_call_id: id.clone(),
                            delta: partial_json.clone(),
                        });
                    }
                }
            }
            AgentEvent::ToolCall { id, name, input } => {
                self.announce_call(id, name, input, &mut out);
            }
            AgentEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } => {
                // A result always follows its call; end it if its END is missing.
                if let Some(call) = self.calls.get_mut(id.as_str()) {
                    if call.started && !call.ended {
                        call.ended = true;
                        out.push(AgUiEvent::ToolCallEnd {
                            tool_call_id: id.clone(),
                        });
                    }
                }
                let _ = is_error;
                out.push(AgUiEvent::ToolCallResult {
                    message_id: self.result_id(id),
                    tool_call_id: id.clone(),
                    content: content.clone(),
                    role: Some("tool".to_owned()),
                });
            }
            AgentEvent::Retry { .. } | AgentEvent::Fallback { .. } => {
                self.void_attempt(&mut out);
                out.extend(status_event(event));
            }
            AgentEvent::ToolProgress { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::Handoff { .. } => out.extend(status_event(event)),
            AgentEvent::RateLimits(limits) => out.push(custom(
                "agent_loop.rate_limits",
                serde_json::to_value(limits).unwrap_or_else(|_| serde_json::json!({})),
            )),
            AgentEvent::SubAgent { path, event } => {
                if let Some(value) = sub_agent_value(&path.to_string(), event) {
                    out.push(custom("agent_loop.sub_agent", value));
                }
            }
            AgentEvent::TurnEnd { .. } => {
                self.close_text(&mut out);
                self.end_open_calls(&mut out);
                self.close_step(&mut out);
            }
            AgentEvent::Steered { input } => {
                self.close_text(&mut out);
                self.end_open_calls(&mut out);
                let message_id = format!("{}:s{}", self.run_id, self.steered.len() + 1);
                self.steered.push(message_id.clone());
                let text = input.clone().into_message().text();
                out.push(AgUiEvent::TextMessageStart {
                    message_id: message_id.clone(),
                    role: "user".to_owned(),
                });
                if !text.is_empty() {
                    out.push(AgUiEvent::TextMessageContent {
                        message_id: message_id.clone(),
                        delta: text,
                    });
                }
                out.push(AgUiEvent::TextMessageEnd { message_id });
            }
            AgentEvent::Finished(outcome) => {
                self.close_text(&mut out);
                self.end_open_calls(&mut out);
                if !outcome.undelivered.is_empty() {
                    out.push(custom(
                        "agent_loop.undelivered",
                        super::undelivered(&outcome.undelivered),
                    ));
                }
                if let Termination::Paused(paused) = &outcome.termination {
                    if let Some(last) = paused.conversation().messages.last() {
                        for (id, name, input) in last.tool_uses() {
                            self.announce_call(id, name, input, &mut out);
                        }
                    }
                }
                self.close_step(&mut out);
                out.push(self.terminal(outcome));
                self.finished = true;
            }
            // An empty delta says nothing: AG-UI's content events carry a non-empty delta.
            AgentEvent::TextDelta { .. } | AgentEvent::ThinkingDelta { .. } => {}
        }
        out
    }

    /// A retry or a fallback: the attempt's text is void; what comes next is a new message.
    fn void_attempt(&mut self, out: &mut Vec<AgUiEvent>) {
        self.close_text(out);
        self.end_open_calls(out);
        if self.message_opened {
            self.message_opened = false;
            self.voided += 1;
            self.reasoning_count = 0;
            // The voided attempt is not in the conversation: forget it for the snapshot.
            self.streamed.pop();
        }
    }

    /// The run's last event.
    fn terminal(&self, outcome: &RunOutcome) -> AgUiEvent {
        let usage = Some(vec![TokenUsage::from(&outcome.usage)]);
        let finished = |result, outcome| AgUiEvent::RunFinished {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            result,
            outcome: Some(outcome),
            usage: usage.clone(),
        };
        match &outcome.termination {
            // A run stopped after its turn at the host's request did what it was let do:
            // nothing was aborted, nothing waits.
            Termination::Completed | Termination::StoppedAfterTurn => {
                let result = outcome.output.clone().or_else(|| {
                    (!outcome.final_text.is_empty())
                        .then(|| Value::String(outcome.final_text.clone()))
                });
                finished(result, RunFinishedOutcome::Success)
            }
            Termination::Paused(paused) => {
                let interrupts: Vec<Interrupt> = paused
                    .pending()
                    .iter()
                    .map(|call| interrupt(paused.id(), call))
                    .collect();
                if interrupts.is_empty() {
                    // A pause waits for something by construction; should it not, the run
                    // has nothing to ask and ends as a completed one.
                    finished(None, RunFinishedOutcome::Success)
                } else {
                    finished(None, RunFinishedOutcome::Interrupt { interrupts })
                }
            }
            Termination::Cancelled => finished(None, RunFinishedOutcome::Cancelled),
            Termination::Error(error) => AgUiEvent::RunError {
                message: error.to_string(),
                code: Some(error_code(error).to_owned()),
                usage,
            },
            // Stopped by a limit, a budget, a hook or the model: the run did not do what
            // it was asked, and says why.
            other @ (Termination::MaxTurns
            | Termination::TokenBudget { .. }
            | Termination::CostBudget { .. }
            | Termination::ToolFailures { .. }
            | Termination::RepeatedToolCall { .. }
            | Termination::StoppedByHook { .. }
            | Termination::Refused
            | Termination::MaxTokens
            | Termination::InvalidOutput { .. }) => AgUiEvent::RunError {
                message: other.to_string(),
                code: Some(termination_code(other).to_owned()),
                usage,
            },
        }
    }

    /// `MESSAGES_SNAPSHOT` of a conversation: thinking becomes a reasoning message before
    /// its assistant message, each tool result a tool message, images and documents of user
    /// messages content parts. Ids: see the [module docs](self).
    pub fn messages_snapshot(&self, messages: &[Message]) -> AgUiEvent {
        let mut out = Vec::new();
        let mut used: HashSet<String> = HashSet::new();
        let mut users = 0usize;
        let mut plains = 0usize;
        let mut streamed_used = vec![false; self.streamed.len()];
        for (index, message) in messages.iter().enumerate() {
            let fallback = format!("{}:m{index}", self.run_id);
            match message.role {
                Role::User => {
                    let mut parts = Vec::new();
                    for block in &message.content {
                        match block {
                            ContentBlock::ToolResult {
                                tool_use_id,
                                content,
                                is_error,
                                ..
                            } => {
                                let id = self
                                    .client
                                    .results
                                    .get(tool_use_id)
                                    .cloned()
                                    .unwrap_or_else(|| self.result_id(tool_use_id));
                                let id =
                                    unique(id, &mut used, || format!("{fallback}:{tool_use_id}"));
                                out.push(AgUiMessage::Tool {
                                    id,
                                    content: AgUiContent::Text(content.clone()),
                                    tool_call_id: tool_use_id.clone(),
                                    error: is_error.then(|| content.clone()),
                                });
                            }
                            ContentBlock::Text { text } => {
                                parts.push(AgUiContentPart::Text { text: text.clone() })
                            }
                            ContentBlock::Image { source } => {
                                if let Some(source) = to_source(source) {
                                    parts.push(AgUiContentPart::Image { source })
                                }
                            }
                            ContentBlock::Document { source, .. } => {
                                if let Some(source) = to_source(source) {
                                    parts.push(AgUiContentPart::Document { source })
                                }
                            }
                            _ => {}
                        }
                    }
                    if parts.is_empty() {
                        continue;
                    }
                    // The client's user messages first, then those the host's steering
                    // streamed in this run, in order.
                    let id = self.client.user.get(users).cloned().or_else(|| {
                        let steered = users.checked_sub(self.client.user.len())?;
                        self.steered.get(steered).cloned()
                    });
                    users += 1;
                    let id = unique(id.unwrap_or_else(|| fallback.clone()), &mut used, || {
                        fallback.clone()
                    });
                    let content = if parts
                        .iter()
                        .all(|p| matches!(p, AgUiContentPart::Text { .. }))
                    {
                        AgUiContent::Text(
                            parts
                                .iter()
                                .filter_map(|p| match p {
                                    AgUiContentPart::Text { text } => Some(text.as_str()),
                                    _ => None,
                                })
                                .collect(),
                        )
                    } else {
                        AgUiContent::Parts(parts)
                    };
                    out.push(AgUiMessage::User { id, content });
                }
                Role::Assistant => {
                    let calls: Vec<AgUiToolCall> = message
                        .tool_uses()
                        .map(|(id, name, input)| AgUiToolCall {
                            id: id.to_owned(),
                            kind: function(),
                            function: AgUiFunctionCall {
                                name: name.to_owned(),
                                arguments: input.to_string(),
                            },
                        })
                        .collect();
                    let text = message.text();
                    let id = self.assistant_id(&calls, &text, &mut streamed_used, &mut plains);
                    let id = unique(id.unwrap_or_else(|| fallback.clone()), &mut used, || {
                        fallback.clone()
                    });
                    let mut count = 0;
                    for block in &message.content {
                        let reasoning = match block {
                            ContentBlock::Thinking { thinking, .. } => thinking.clone(),
                            ContentBlock::Reasoning { summary, .. } => summary.join("\n\n"),
                            _ => continue,
                        };
                        if reasoning.is_empty() {
                            continue;
                        }
                        count += 1;
                        let rid = reasoning_id(&id, count);
                        let rid = unique(rid, &mut used, || format!("{fallback}:reasoning{count}"));
                        out.push(AgUiMessage::Reasoning {
                            id: rid,
                            content: reasoning,
                        });
                    }
                    out.push(AgUiMessage::Assistant {
                        id,
                        content: (!text.is_empty()).then_some(text),
                        tool_calls: calls,
                    });
                }
                // A role newer than this encoder (`Role` is non-exhaustive): not in the snapshot.
                _ => {}
            }
        }
        AgUiEvent::MessagesSnapshot { messages: out }
    }

    /// The id of an assistant message of the conversation: the client's (by call id), this
    /// run's (by call id or text), or the client's by its place among text-only messages.
    fn assistant_id(
        &self,
        calls: &[AgUiToolCall],
        text: &str,
        streamed_used: &mut [bool],
        plains: &mut usize,
    ) -> Option<String> {
        if let Some(first) = calls.first() {
            if let Some(id) = self.client.by_call.get(&first.id) {
                return Some(id.clone());
            }
            for (i, s) in self.streamed.iter().enumerate() {
                if s.calls.contains(&first.id) && !streamed_used[i] {
                    streamed_used[i] = true;
                    return Some(s.id.clone());
                }
            }
            return None;
        }
        for (i, s) in self.streamed.iter().enumerate() {
            if s.calls.is_empty() && s.text == text && !streamed_used[i] {
                streamed_used[i] = true;
                return Some(s.id.clone());
            }
        }
        let id = self.client.plain.get(*plains).cloned();
        *plains += 1;
        id
    }
}

/// The id of the `n`th reasoning message of the assistant message `message`.
fn reasoning_id(message: &str, n: u32) -> String {
    if n <= 1 {
        format!("{message}:reasoning")
    } else {
        format!("{message}:reasoning{n}")
    }
}

/// `id`, or `fallback()` when `id` is taken (ids are unique in a snapshot).
fn unique(id: String, used: &mut HashSet<String>, fallback: impl FnOnce() -> String) -> String {
    let id = if used.contains(&id) { fallback() } else { id };
    used.insert(id.clone());
    id
}

/// AG-UI's source of a medium; `None` for a kind of source AG-UI has no form for (the
/// part is left out of the snapshot).
fn to_source(source: &MediaSource) -> Option<AgUiSource> {
    Some(match source {
        MediaSource::Base64 { media_type, data } => AgUiSource::Data {
            value: data.clone(),
            mime_type: media_type.clone(),
        },
        MediaSource::Url { url } => AgUiSource::Url {
            value: url.clone(),
            mime_type: None,
        },
        _ => return None,
    })
}

/// `CUSTOM` `agent_loop.{name}` of an event about the run itself ([`super::run_status`]).
fn status_event(event: &AgentEvent) -> Option<AgUiEvent> {
    super::run_status(event).map(|(name, value)| custom(&format!("agent_loop.{name}"), value))
}

fn custom(name: &str, value: Value) -> AgUiEvent {
    AgUiEvent::Custom {
        name: name.to_owned(),
        value,
    }
}

/// What a sub-agent's event says, for `agent_loop.sub_agent` (deltas: nothing).
fn sub_agent_value(path: &str, event: &AgentEvent) -> Option<Value> {
    use serde_json::json;
    match event {
        AgentEvent::TurnStart { turn } => {
            Some(json!({"path": path, "type": "turn_start", "turn": turn}))
        }
        AgentEvent::ToolCall { id, name, input } => Some(
            json!({"path": path, "type": "tool_call", "toolCallId": id, "toolCallName": name, "input": input}),
        ),
        AgentEvent::ToolResult {
            id,
            content,
            is_error,
            ..
        } => Some(
            json!({"path": path, "type": "tool_result", "toolCallId": id, "content": content, "isError": is_error}),
        ),
        AgentEvent::Finished(outcome) => Some(json!({
            "path": path,
            "type": "finished",
            "termination": outcome.termination.to_string(),
            "text": outcome.final_text,
        })),
        // A sub-agent's streaming (text, reasoning, call arguments) and its bookkeeping
        // (turn ends, retries, fallbacks, compaction, handoffs, steering, rate limits,
        // progress) stay inside its call: the front-end sees its steps, not its stream.
        AgentEvent::TextDelta { .. }
        | AgentEvent::ThinkingDelta { .. }
        | AgentEvent::ToolCallStart { .. }
        | AgentEvent::ToolInputDelta { .. }
        | AgentEvent::ToolProgress { .. }
        | AgentEvent::Retry { .. }
        | AgentEvent::Compacted { .. }
        | AgentEvent::TurnEnd { .. }
        | AgentEvent::Fallback { .. }
        | AgentEvent::Handoff { .. }
        | AgentEvent::Steered { .. }
        | AgentEvent::RateLimits(_) => None,
        // Never nested twice: a nested event's path is flattened (`NestedEvent::new`).
        AgentEvent::SubAgent { .. } => None,
    }
}

fn interrupt(pause_id: &str, call: &PendingCall) -> Interrupt {
    let name = &call.name;
    let (reason, message, schema) = match (&call.question, call.waits_for) {
        // A tool asked: its question, answered with `answer` (or approved or denied).
        (Some(question), _) => (
            "tool_question",
            question.prompt.clone(),
            serde_json::json!({
                "type": "object",
                "properties": {
                    "answer": question.schema.clone().unwrap_or_else(|| serde_json::json!({})),
                    "approved": {"type": "boolean"},
                    "reason": {"type": "string"},
                },
            }),
        ),
        (None, WaitsFor::Result) => (
            "tool_result",
            format!("The call of `{name}` waits for its result."),
            serde_json::json!({
                "type": "object",
                "properties": {"result": {}, "isError": {"type": "boolean"}},
                "required": ["result"],
            }),
        ),
        (None, _) => (
            "tool_approval",
            format!("The call of `{name}` waits for your approval."),
            serde_json::json!({
                "type": "object",
                "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
                "required": ["approved"],
            }),
        ),
    };
    Interrupt {
        id: format!("{pause_id}:{}", call.id),
        reason: reason.to_owned(),
        message: Some(message),
        tool_call_id: Some(call.id.clone()),
        response_schema: Some(schema),
        metadata: Some(serde_json::json!({ "digest": call.digest })),
    }
}

fn error_code(error: &Error) -> &'static str {
    match error {
        Error::Llm(_) => "llm",
        Error::Tool(_) => "tool",
        Error::Config(_) => "config",
        Error::Context(_) => "context",
        Error::Media(_) => "media",
        Error::Busy => "busy",
        Error::Session(_) => "session",
        Error::Resume(agent_loop::error::ResumeError::StaleAnswer { .. }) => "stale_answer",
        Error::Resume(_) => "resume",
        _ => "error",
    }
}

fn termination_code(termination: &Termination) -> &'static str {
    match termination {
        Termination::MaxTurns => "max_turns",
        Termination::TokenBudget { .. } => "token_budget",
        Termination::CostBudget { .. } => "cost_budget",
        Termination::ToolFailures { .. } => "tool_failures",
        Termination::RepeatedToolCall { .. } => "repeated_tool_call",
        Termination::StoppedByHook { .. } => "stopped_by_hook",
        Termination::Refused => "refused",
        Termination::MaxTokens => "max_tokens",
        Termination::InvalidOutput { .. } => "invalid_output",
        // Not errors (`terminal` ends these runs with `RUN_FINISHED`); named for completeness.
        Termination::Completed => "completed",
        Termination::Cancelled => "cancelled",
        Termination::StoppedAfterTurn => "stopped_after_turn",
        Termination::Paused(_) => "paused",
        Termination::Error(_) => "error",
    }
}

/// A message of the request, checked and converted.
#[derive(Debug, Clone, PartialEq)]
struct InMessage {
    id: String,
    kind: Parsed,
}

#[derive(Debug, Clone, PartialEq)]
enum Parsed {
    /// A user message's blocks (never empty).
    User(Vec<ContentBlock>),
    /// An assistant message: text and calls (id, name, input).
    Assistant {
        text: String,
        calls: Vec<(String, String, Value)>,
    },
    /// A tool message.
    Tool {
        call_id: String,
        content: String,
        is_error: bool,
    },
    /// System, developer, reasoning and activity messages: not part of the history.
    Skipped,
}

/// A `resume` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: ResumeStatus,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
}

impl ResumeEntry {
    /// The digest of the call the entry answers, if its `metadata` names one.
    fn digest(&self) -> Result<Option<&str>, UiRequestError> {
        match self.metadata.as_ref().and_then(|m| m.get("digest")) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(digest)) => Ok(Some(digest)),
            Some(_) => Err(UiRequestError::new(format!(
                "the resume entry `{}`: `metadata.digest` must be a string",
                self.interrupt_id
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// The shape of the body, before its messages are checked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    thread_id: String,
    run_id: String,
    messages: Vec<Value>,
    #[serde(default)]
    resume: Option<Vec<ResumeEntry>>,
}

/// A `RunAgentInput` request body, checked: what an AG-UI client (`HttpAgent`) posts.
///
/// Parsing is lenient (unknown fields are ignored; `threadId`, `runId` and `messages` are
/// required) and checks everything [`history`](Self::history) and [`turn`](Self::turn) need,
/// so a body that parses is refused later only for what the agent's state says.
///
/// - The client's `tools` (front-end tools) are not registered with the agent: the agent
///   runs the tools its server gave it. A front-end tool is a
///   [deferred tool](agent_loop::tool::DeferredTool) on the server, whose result the client sends back
///   as a tool message or a `resume` entry.
/// - `system`, `developer`, `reasoning` and `activity` messages are not part of the
///   history: the server's system prompt rules, and reasoning is the model's own.
/// - `state`, `context` and `forwardedProps` are not read.
///
/// ```
/// use agent_loop_ui::agui::RunAgentInput;
/// use agent_loop_ui::UiTurn;
///
/// let body = br#"{"threadId": "t", "runId": "r1", "messages": [
///     {"id": "u1", "role": "user", "content": "What is 2 + 2?"},
///     {"id": "a1", "role": "assistant", "content": "4."},
///     {"id": "u2", "role": "user", "content": "And 3 + 3?"}
/// ]}"#;
/// let request = RunAgentInput::from_slice(body)?;
/// assert_eq!(request.history()?.len(), 2);
/// assert!(matches!(request.turn(None)?, UiTurn::Run(_)));
/// # Ok::<(), agent_loop_ui::UiRequestError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RunAgentInput {
    thread_id: String,
    run_id: String,
    messages: Vec<InMessage>,
    resume: Vec<ResumeEntry>,
}

impl RunAgentInput {
    /// Parses and checks a request body: a 400 with what is wrong when it is not a valid
    /// `RunAgentInput` (bad JSON, a required field missing, a user message without content,
    /// tool call arguments that are not JSON, parts this crate does not read).
    pub fn from_slice(body: &[u8]) -> Result<RunAgentInput, UiRequestError> {
        let wire: Wire = serde_json::from_slice(body).map_err(|e| {
            UiRequestError::new(format!("the body is not an AG-UI RunAgentInput: {e}"))
        })?;
        let mut messages = Vec::with_capacity(wire.messages.len());
        for (index, value) in wire.messages.into_iter().enumerate() {
            messages.push(parse_message(index, value)?);
        }
        Ok(RunAgentInput {
            thread_id: wire.thread_id,
            run_id: wire.run_id,
            messages,
            resume: wire.resume.unwrap_or_default(),
        })
    }

    /// The thread's id.
    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The conversation the client holds, before its last user message (the one that starts
    /// this run), as the agent's messages: user text and images, assistant text and calls,
    /// consecutive tool messages as one user message of tool results (a tool message with an
    /// `error` is an error result). System, developer, reasoning and activity messages are
    /// left out.
    pub fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        let end = self
            .messages
            .iter()
            .rposition(|m| matches!(m.kind, Parsed::User(_)))
            .unwrap_or(self.messages.len());
        let mut out: Vec<Message> = Vec::new();
        for message in self.messages.iter().take(end) {
            match &message.kind {
                Parsed::User(blocks) => out.push(Message {
                    role: Role::User,
                    content: blocks.clone(),
                }),
                Parsed::Assistant { text, calls } => {
                    let mut content = Vec::new();
                    if !text.is_empty() {
                        content.push(ContentBlock::text(text.clone()));
                    }
                    for (id, name, input) in calls {
                        content.push(ContentBlock::ToolUse {
                            id: id.clone(),
                            name: name.clone(),
                            input: input.clone(),
                        });
                    }
                    if !content.is_empty() {
                        out.push(Message {
                            role: Role::Assistant,
                            content,
                        });
                    }
                }
                Parsed::Tool {
                    call_id,
                    content,
                    is_error,
                } => {
                    let block =
                        ContentBlock::tool_result(call_id.clone(), content.clone(), *is_error);
                    match out.last_mut() {
                        Some(last)
                            if last.role == Role::User
                                && last
                                    .content
                                    .iter()
                                    .all(|b| matches!(b, ContentBlock::ToolResult { .. })) =>
                        {
                            last.content.push(block)
                        }
                        _ => out.push(Message {
                            role: Role::User,
                            content: vec![block],
                        }),
                    }
                }
                Parsed::Skipped => {}
            }
        }
        Ok(out)
    }

    /// What the request asks of an agent waiting in `paused` (or in none).
    ///
    /// - With a paused run: its answers, from the `resume` entries (an `interruptId` must be
    ///   `{pauseId}:{callId}` of a call this pause waits for; `status: "cancelled"` denies
    ///   the call; the `payload` of an approval is `{"approved": bool, "reason"?: string}`,
    ///   of a result `{"result": any, "isError"?: bool}`; a `metadata.digest`, the
    ///   interrupt's own, binds the answer to the call it was asked for:
    ///   [`Resolutions::with_digest`]) and from tool messages answering a
    ///   call that waits for its result. A request that answers nothing is refused, naming
    ///   the calls that wait.
    ///   A request that answers nothing and ends with a user message, after the assistant
    ///   message with a waiting call, is a new message while the calls wait,
    ///   [`UiTurn::RunLeavingPause`] (what becomes of the waiting calls is the
    ///   host's [`NewMessageWhilePaused`](super::NewMessageWhilePaused)).
    /// - Without one: a new run on the last message, which must be a user message; `resume`
    ///   entries are refused.
    ///
    /// The body that resumes a paused run carries the messages and one `resume` entry per
    /// answered interrupt (the `interrupts` of the paused run's `RUN_FINISHED`, whose ids are
    /// `{pauseId}:{callId}`). Each entry needs its `status` (`@ag-ui/core` 1.0's
    /// `ResumeEntrySchema`, and this parser, require it): `"resolved"` for an answer,
    /// `"cancelled"` to deny the call. An approval's payload is
    /// `{"approved": bool, "reason"?: string}`, a deferred tool's result
    /// `{"result": any, "isError"?: bool}` (never `null`):
    ///
    /// ```json
    /// {
    ///   "threadId": "thread-1",
    ///   "runId": "run-2",
    ///   "messages": [
    ///     {"id": "u1", "role": "user", "content": "Tidy up the logs."},
    ///     {"id": "run-1:t1", "role": "assistant", "toolCalls": [
    ///       {"id": "call_1", "type": "function",
    ///        "function": {"name": "delete_file", "arguments": "{\"path\":\"logs/old.log\"}"}}
    ///     ]}
    ///   ],
    ///   "tools": [], "context": [], "state": {}, "forwardedProps": {},
    ///   "resume": [
    ///     {"interruptId": "t1-p1-call_1:call_1", "status": "resolved",
    ///      "payload": {"approved": true},
    ///      "metadata": {"digest": "sha256:9f2c…"}}
    ///   ]
    /// }
    /// ```
    ///
    /// A result for a deferred call can also come as a tool message answering it (no
    /// `status` there: `status` belongs to the `resume` entry, and a tool message has none):
    /// `{"id": "r1", "role": "tool", "toolCallId": "call_2", "content": "blue"}`, with
    /// `"error": "…"` for an error result.
    pub fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        let Some(paused) = paused else {
            if let Some(entry) = self.resume.first() {
                return Err(UiRequestError::new(format!(
                    "the request resumes the interrupt `{}`, but {}",
                    entry.interrupt_id,
                    super::NO_RUN_WAITS
                )));
            }
            return self.new_message().map(UiTurn::Run);
        };
        let pending = paused.pending();
        let waiting = || {
            pending
                .iter()
                .map(|c| format!("`{}:{}` ({})", paused.id(), c.id, c.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut answers = Resolutions::new();
        for entry in &self.resume {
            let call = entry
                .interrupt_id
                .strip_prefix(paused.id())
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|call_id| pending.iter().find(|c| c.id == call_id));
            let Some(call) = call else {
                return Err(UiRequestError::new(format!(
                    "the resume entry `{}` names no call this run waits for; it waits for: {}",
                    entry.interrupt_id,
                    waiting()
                )));
            };
            let resolution = resolution(entry, call.waits_for)?;
            // With the digest it was given for, the agent refuses it if another call waits
            // under this id now (`ResumeError::StaleAnswer`, a `RUN_ERROR`).
            answers = match entry.digest()? {
                Some(digest) => answers.with_digest(call.id.clone(), digest, resolution),
                None => answers.with(call.id.clone(), resolution),
            };
        }
        for message in &self.messages {
            if let Parsed::Tool {
                call_id,
                content,
                is_error,
            } = &message.kind
            {
                let waits = pending
                    .iter()
                    .any(|c| &c.id == call_id && c.waits_for == WaitsFor::Result);
                if waits && answers.get(call_id).is_none() {
                    answers = answers.with(
                        call_id.clone(),
                        Resolution::Result {
                            content: content.clone(),
                            is_error: *is_error,
                        },
                    );
                }
            }
        }
        if answers.is_empty() {
            // The person typed instead of answering: a user message last, after the assistant
            // message with a waiting call (the client saw the interrupt).
            let shown = self.messages.iter().any(|m| match &m.kind {
                Parsed::Assistant { calls, .. } => calls
                    .iter()
                    .any(|(id, _, _)| pending.iter().any(|c| &c.id == id)),
                _ => false,
            });
            if let (
                true,
                Some(InMessage {
                    kind: Parsed::User(_),
                    ..
                }),
            ) = (shown, self.last_message())
            {
                return self.new_message().map(UiTurn::RunLeavingPause);
            }
            return Err(UiRequestError::new(format!(
                "the run waits for answers and the request gives none: answer {} with `resume` \
                 entries (or a tool message with the result)",
                waiting()
            )));
        }
        Ok(UiTurn::Resume(answers))
    }

    /// The last message that is part of the history (system, developer, reasoning and
    /// activity messages skipped).
    fn last_message(&self) -> Option<&InMessage> {
        self.messages
            .iter()
            .rev()
            .find(|m| !matches!(m.kind, Parsed::Skipped))
    }

    /// The last message's content, as the input of a run: it must be a user message.
    fn new_message(&self) -> Result<UserInput, UiRequestError> {
        match self.last_message() {
            Some(InMessage {
                kind: Parsed::User(blocks),
                ..
            }) => Ok(UserInput::from(blocks.clone())),
            Some(other) => Err(UiRequestError::new(format!(
                "the last message (`{}`) is not a user message: there is nothing to run on",
                other.id
            ))),
            None => Err(UiRequestError::new(
                "the request has no user message to run on",
            )),
        }
    }
}

/// The answer a `resume` entry gives a call that waits for `waits_for`.
fn resolution(entry: &ResumeEntry, waits_for: WaitsFor) -> Result<Resolution, UiRequestError> {
    let id = &entry.interrupt_id;
    let payload = entry.payload.as_ref();
    let reason = payload
        .and_then(|p| p.get("reason"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if entry.status == ResumeStatus::Cancelled {
        return Ok(Resolution::Deny {
            reason: reason.unwrap_or_else(|| "The user cancelled this call.".to_owned()),
        });
    }
    // An answer to a tool's question: the answer, as text the tool reads.
    if let (WaitsFor::Answer, Some(answer)) = (waits_for, payload.and_then(|p| p.get("answer"))) {
        let content = match answer {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        return Ok(Resolution::Result {
            content,
            is_error: false,
        });
    }
    match waits_for {
        WaitsFor::Result => {
            let Some(result) = payload.and_then(|p| p.get("result")) else {
                return Err(UiRequestError::new(format!(
                    "the resume entry `{id}` answers a call that waits for its result: its \
                     payload must be {{\"result\": …, \"isError\"?: bool}}"
                )));
            };
            let is_error = match payload.and_then(|p| p.get("isError")) {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(UiRequestError::new(format!(
                        "the resume entry `{id}`: `isError` must be a boolean"
                    )))
                }
            };
            let content = match result {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Ok(Resolution::Result { content, is_error })
        }
        _ => match payload.and_then(|p| p.get("approved")) {
            Some(Value::Bool(true)) => Ok(Resolution::Approve),
            Some(Value::Bool(false)) => Ok(Resolution::Deny {
                reason: reason.unwrap_or_else(|| "The user denied this call.".to_owned()),
            }),
            _ if waits_for == WaitsFor::Answer => Err(UiRequestError::new(format!(
                "the resume entry `{id}` answers a tool's question: its payload must be \
                 {{\"answer\": …}} or {{\"approved\": bool, \"reason\"?: string}}"
            ))),
            _ => Err(UiRequestError::new(format!(
                "the resume entry `{id}` answers a call that waits for approval: its payload \
                 must be {{\"approved\": bool, \"reason\"?: string}}"
            ))),
        },
    }
}

/// Checks and converts the message at `index` of the request.
fn parse_message(index: usize, value: Value) -> Result<InMessage, UiRequestError> {
    let role = value.get("role").and_then(Value::as_str).map(str::to_owned);
    let id = value.get("id").and_then(Value::as_str).map(str::to_owned);
    let Some(id) = id else {
        return Err(UiRequestError::new(format!(
            "message {index} has no string `id`"
        )));
    };
    let bad = |what: String| UiRequestError::new(format!("message `{id}` (#{index}): {what}"));
    match role.as_deref() {
        Some("activity") => {
            return Ok(InMessage {
                id,
                kind: Parsed::Skipped,
            })
        }
        None => return Err(bad("it has no string `role`".to_owned())),
        _ => {}
    }
    let message: AgUiMessage =
        serde_json::from_value(value).map_err(|e| bad(format!("not an AG-UI message: {e}")))?;
    let kind = match message {
        AgUiMessage::User { content, .. } => {
            let blocks = user_blocks(content).map_err(bad)?;
            if blocks.is_empty() {
                return Err(bad("a user message with no content".to_owned()));
            }
            Parsed::User(blocks)
        }
        AgUiMessage::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let mut calls = Vec::with_capacity(tool_calls.len());
            for call in tool_calls {
                let arguments = call.function.arguments.trim();
                let input = if arguments.is_empty() {
                    Value::Object(serde_json::Map::new())
                } else {
                    serde_json::from_str(arguments).map_err(|e| {
                        bad(format!(
                            "the arguments of the tool call `{}` are not JSON: {e}",
                            call.id
                        ))
                    })?
                };
                calls.push((call.id, call.function.name, input));
            }
            Parsed::Assistant {
                text: content.unwrap_or_default(),
                calls,
            }
        }
        AgUiMessage::Tool {
            content,
            tool_call_id,
            error,
            ..
        } => {
            let mut text = match content {
                AgUiContent::Text(text) => text,
                AgUiContent::Parts(parts) => parts
                    .into_iter()
                    .filter_map(|p| match p {
                        AgUiContentPart::Text { text } => Some(text),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            };
            if text.is_empty() {
                if let Some(error) = &error {
                    text = error.clone();
                }
            }
            Parsed::Tool {
                call_id: tool_call_id,
                content: text,
                is_error: error.is_some(),
            }
        }
        _ => Parsed::Skipped,
    };
    Ok(InMessage { id, kind })
}

/// A user message's content as blocks (empty text left out).
fn user_blocks(content: AgUiContent) -> Result<Vec<ContentBlock>, String> {
    let parts = match content {
        AgUiContent::Text(text) => vec![AgUiContentPart::Text { text }],
        AgUiContent::Parts(parts) => parts,
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            AgUiContentPart::Text { text } => {
                if !text.is_empty() {
                    blocks.push(ContentBlock::text(text))
                }
            }
            AgUiContentPart::Image { source } => {
                if let AgUiSource::Data { mime_type, .. } = &source {
                    if !mime_type.starts_with("image/") {
                        return Err(format!("an image part of type `{mime_type}`"));
                    }
                }
                let image = match media_source(source, "image")? {
                    Inline::Data { value, mime_type } => Image::from_base64(&mime_type, &value),
                    Inline::Url(url) => Image::from_url(&url),
                };
                blocks.push(image.map_err(|e| format!("an image part: {e}"))?.into())
            }
            AgUiContentPart::Document { source } => {
                let document = match media_source(source, "document")? {
                    Inline::Data { value, mime_type } if mime_type == "application/pdf" => {
                        Document::pdf_base64(&value)
                    }
                    Inline::Data { mime_type, .. } => {
                        return Err(format!("a document part of type `{mime_type}` (PDFs are)"))
                    }
                    Inline::Url(url) => Document::from_url(&url),
                };
                blocks.push(
                    document
                        .map_err(|e| format!("a document part: {e}"))?
                        .into(),
                )
            }
            AgUiContentPart::Audio { .. } => return Err("audio parts are not supported".to_owned()),
            AgUiContentPart::Video { .. } => return Err("video parts are not supported".to_owned()),
        }
    }
    Ok(blocks)
}

/// Where a media part's bytes are, as the media layer takes them.
enum Inline {
    /// Base64 text and its media type.
    Data { value: String, mime_type: String },
    /// An http(s) (or `data:`) URL.
    Url(String),
}

fn media_source(source: AgUiSource, what: &str) -> Result<Inline, String> {
    match source {
        AgUiSource::Data { value, mime_type } => Ok(Inline::Data { value, mime_type }),
        AgUiSource::Url { value, .. } => Ok(Inline::Url(value)),
        AgUiSource::File { .. } => Err(format!(
            "an {what} part with a `file` source (a provider's handle) is not supported"
        )),
    }
}

#[cfg(feature = "axum")]
impl super::http::UiRequest for RunAgentInput {
    fn history(&self) -> Result<Vec<Message>, UiRequestError> {
        RunAgentInput::history(self)
    }
    fn turn(&self, paused: Option<&PausedRun>) -> Result<UiTurn, UiRequestError> {
        RunAgentInput::turn(self, paused)
    }
}

/// A run's events as AG-UI events; `MESSAGES_SNAPSHOT` (of `handle`'s conversation, or of a
/// paused run's) comes right before the run's last event.
pub fn encode_stream(
    events: impl Stream<Item = AgentEvent> + Send + 'static,
    mut encoder: AgUiEncoder,
    handle: AgentHandle,
) -> impl Stream<Item = AgUiEvent> + Send + 'static {
    events.flat_map(move |event| {
        let mut out = encoder.encode(&event);
        if let AgentEvent::Finished(outcome) = &event {
            if let Some(last) = out.pop() {
                // A paused run's conversation is in its pause; any other run's, in the agent.
                let snapshot = if let Termination::Paused(paused) = &outcome.termination {
                    encoder.messages_snapshot(&paused.conversation().messages)
                } else {
                    encoder.messages_snapshot(&handle.snapshot().messages)
                };
                out.push(snapshot);
                out.push(last);
            }
        }
        futures::stream::iter(out)
    })
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
///
/// A new user message while the run waits for answers denies the waiting calls and goes on
/// ([`NewMessageWhilePaused::DenyAndContinue`](super::NewMessageWhilePaused)); choose
/// otherwise with [`respond_with`].
///
/// Dropping the response's body (the client aborted the request, or went away) drops the
/// run's stream, which cancels the run; unless the run is kept for reconnects
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
    let request = match RunAgentInput::from_slice(body) {
        Ok(request) => request,
        Err(e) => return super::http::refusal(super::http::StartError::Request(e)),
    };
    let key = options.stream_key(request.thread_id());
    if let Some(streams) = options.streams() {
        // The same run asked again (a client that reconnects with no `Last-Event-ID`): its
        // frames from the first, not a second run.
        if streams.find(&key, Some(request.run_id())).is_some() {
            return super::http::reconnect_response(
                streams,
                &key,
                Some(request.run_id()),
                None,
                &[],
            );
        }
    }
    let handle = agent.handle();
    match super::http::start_turn(agent, &request, options).await {
        Ok(started) => {
            let mut encoder = AgUiEncoder::new(request.thread_id(), request.run_id())
                .with_client_messages(&request);
            if let Some((paused, _)) = &started.resumed {
                encoder = encoder.resuming(paused);
            }
            if let Some(paused) = &started.left {
                encoder = encoder.leaving(paused);
            }
            let frames = sse_body(encode_stream(started.events, encoder, handle.clone()));
            super::http::run_response(frames, options, &key, request.run_id(), handle, &[])
        }
        Err(e) => super::http::refusal(e),
    }
}

/// Answers an AG-UI client that reconnects to a run kept in `streams` (by [`respond_with`]
/// with [`RespondOptions::resumable`](super::RespondOptions::resumable)): AG-UI 1.0 defines
/// no resumption, so the reconnect is the run's own request sent again (the same `threadId`
/// and `runId`) with the standard SSE `Last-Event-ID` header naming the last event the
/// client got (`@ag-ui/client`'s `HttpAgent` sends the headers it is given). `None` when the
/// body names no run the streams keep: answer it with [`respond_with`].
///
/// The answer: the run's events after that id (all of them without the header), then the
/// live ones, each once; `410 Gone` when they are no longer kept, `400` for an id the run
/// never sent. Every frame carries its id (`id: 7`).
#[cfg(feature = "axum")]
pub fn reconnect(
    streams: &super::RunStreams,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Option<axum::response::Response> {
    reconnect_key(streams, headers, body, |thread| thread.to_owned())
}

/// [`reconnect`] to a run kept by [`respond_with`] with these `options`: in their streams,
/// under their [caller](super::RespondOptions::caller)'s key (another caller's run of the same
/// thread id is not found). `None` when the options keep no streams or the body names no run
/// kept for this caller.
#[cfg(feature = "axum")]
pub fn reconnect_with(
    options: &super::RespondOptions,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Option<axum::response::Response> {
    let streams = options.streams()?;
    reconnect_key(streams, headers, body, |thread| options.stream_key(thread))
}

#[cfg(feature = "axum")]
fn reconnect_key(
    streams: &super::RunStreams,
    headers: &axum::http::HeaderMap,
    body: &[u8],
    key: impl FnOnce(&str) -> String,
) -> Option<axum::response::Response> {
    let request = RunAgentInput::from_slice(body).ok()?;
    let key = key(request.thread_id());
    streams.find(&key, Some(request.run_id()))?;
    Some(super::http::reconnect_response(
        streams,
        &key,
        Some(request.run_id()),
        super::http::last_event_id(headers),
        &[],
    ))
}
