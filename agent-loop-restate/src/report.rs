//! What a session says of its runs: its status, its state, the progress events it records
//! for hosts that follow along, and a run's report. Plain serde data, written by the driver
//! and read through the session's handlers.

use agent_loop::context::Conversation;
use serde::{Deserialize, Serialize};

/// What a session is doing.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SessionStatus {
    /// No run yet.
    Idle,
    /// A run is in progress.
    Running,
    /// The run waits for a human's approval of this call.
    WaitingForApproval {
        /// The call.
        call_id: String,
    },
    /// The last run ended.
    Finished {
        /// How it ended (the `Termination`, as text).
        termination: String,
    },
}

/// The session as the `state` handler gives it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// What the session is doing.
    pub status: SessionStatus,
    /// The conversation as of the last turn boundary.
    pub conversation: Conversation,
    /// How many progress events the session has recorded (read them with the `eventsSince`
    /// handler).
    pub events: u64,
}

/// One step of a run, recorded in the session's state for hosts that follow along without a
/// connection (the `eventsSince` handler). A step's events are recorded once the step is
/// journaled: a response's text one event per block (not token by token), a tool's progress
/// with its result.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProgressEvent {
    /// A model turn started.
    TurnStart {
        /// The turn number within the run.
        turn: u32,
    },
    /// A tool call is about to run.
    ToolCall {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: serde_json::Value,
    },
    /// A tool call needs a human's approval: resolve it with the `approve` handler, or
    /// resolve the awakeable with an [`ApprovalDecision`](crate::ApprovalDecision).
    ApprovalNeeded {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: serde_json::Value,
        /// The Restate awakeable the run waits on.
        awakeable_id: String,
    },
    /// A running tool reported progress (recorded with its result: at most 16 notes a call,
    /// each at most 1 KiB).
    ToolProgress {
        /// The call id.
        id: String,
        /// What the tool said.
        message: String,
    },
    /// The model's text of one block of a response, recorded when the response's step is
    /// journaled (at most 4 KiB; the conversation has all of it).
    Text {
        /// The text.
        text: String,
    },
    /// A call of a sub-agent ([`DurableAgent::sub_agent`](crate::DurableAgent::sub_agent)) started: its run is the child
    /// session `session`, whose own `state` and `eventsSince` follow it (and whose `approve`
    /// answers its approvals).
    SubAgent {
        /// The call id.
        id: String,
        /// The sub-agent.
        name: String,
        /// The child session's key: `{session}/{call id}`.
        session: String,
    },
    /// A tool call finished.
    ToolResult {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// The result (as shortened for events).
        content: String,
        /// Whether it failed.
        is_error: bool,
    },
    /// The model call failed and the turn is sent again after a durable sleep.
    Retry {
        /// 1 for the first retry of the turn.
        attempt: u32,
        /// What failed.
        error: String,
    },
    /// The conversation was compacted.
    Compacted {
        /// Estimated tokens before.
        tokens_before: usize,
        /// Estimated tokens after.
        tokens_after: usize,
    },
    /// The host's words ([`steer`](crate#handlers-of-the-agentsession-object)) entered the
    /// history here, as a user message: between turns, before the model call that reads them.
    Steered {
        /// What the host said (at most 4 KiB; the conversation has all of it).
        text: String,
    },
    /// A turn ended.
    TurnEnd {
        /// The turn number.
        turn: u32,
    },
    /// The run is over.
    Finished {
        /// How it ended (the `Termination`, as text).
        termination: String,
        /// The model's last answer.
        final_text: String,
    },
}

/// What `run` returns: how the run ended.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Whether the model was done (`Termination::Completed`).
    pub completed: bool,
    /// How it ended: the `Termination` as text, the same as an in-process run's.
    pub termination: String,
    /// The model's last answer.
    pub final_text: String,
    /// Model turns taken.
    pub turns: u32,
    /// Input tokens over the run.
    pub input_tokens: u64,
    /// Output tokens over the run.
    pub output_tokens: u64,
    /// The host's words (`steer`) the run took but never delivered, oldest first: it ended
    /// before its next safe point (stopped, at a limit, or the words came after its final
    /// answer). Words sent after the run's end wait in the session for its next run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undelivered: Vec<String>,
}
