//! The types of one call and one batch: [`ToolCall`] in, [`ToolCallResult`] out,
//! [`ExecOptions`] per batch, and [`Prepared`], a call the registry has checked and bound to
//! its tool, ready for `exec` to run.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::plan::Schedule;
use super::{schema, Question, Reply, ToolContext, ToolError, ToolOutput, ToolProgress};
use crate::message::{ContentBlock, MediaSource};

/// The content of the result of a call stopped by cancellation.
const CANCELLED: &str = "cancelled";

/// A call whose arguments have been checked and deserialized, ready to run.
pub(crate) struct Prepared<'a> {
    /// How it may be scheduled.
    pub(crate) schedule: Schedule,
    /// The longest it may run.
    pub(crate) timeout: Duration,
    pub(crate) run: Box<dyn FnOnce(ToolContext) -> ToolFuture<'a> + Send + 'a>,
}

pub(crate) type ToolFuture<'a> = BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// One tool call requested by the model.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id; the result answers it.
    pub id: String,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The arguments (`Null` when they were not valid JSON; see [`ToolCall::from_raw`]).
    pub input: serde_json::Value,
    /// Why the raw argument text could not be parsed, when it could not.
    parse_error: Option<String>,
    /// The host's answer, for the re-run of a call whose tool asked.
    reply: Option<Box<Reply>>,
}

impl ToolCall {
    /// A call with arguments already parsed.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: serde_json::Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            input,
            parse_error: None,
            reply: None,
        }
    }

    /// A call with its raw argument text, as the model streamed it. Text that is not valid
    /// JSON makes the call an error result saying so; empty text counts as `{}`.
    pub fn from_raw(id: impl Into<String>, name: impl Into<String>, raw: &str) -> Self {
        let (input, parse_error) = match schema::parse_raw(raw) {
            Ok(input) => (input, None),
            Err(error) => (serde_json::Value::Null, Some(error)),
        };
        ToolCall {
            id: id.into(),
            name: name.into(),
            input,
            parse_error,
            reply: None,
        }
    }

    /// The call a `tool_use` block asks for, if it is one.
    pub fn from_block(block: &ContentBlock) -> Option<Self> {
        match block {
            ContentBlock::ToolUse { id, name, input } => {
                Some(ToolCall::new(id.clone(), name.clone(), input.clone()))
            }
            _ => None,
        }
    }

    /// Whether the arguments were given as text that is not valid JSON.
    pub fn has_invalid_json(&self) -> bool {
        self.parse_error.is_some()
    }

    pub(crate) fn parse_error(&self) -> Option<&str> {
        self.parse_error.as_deref()
    }

    /// The same call, run again with the host's answer to what its tool asked.
    pub(crate) fn with_reply(mut self, reply: Reply) -> Self {
        self.reply = Some(Box::new(reply));
        self
    }

    /// The host's answer it runs with, if it is a re-run.
    pub(crate) fn reply(&self) -> Option<&Reply> {
        self.reply.as_deref()
    }
}

/// The outcome of one tool call, as the model will read it.
///
/// Serialized as an object with the field names below; `duration` is serde's form of a
/// [`Duration`], `{"secs": u64, "nanos": u32}`, exact to the nanosecond, and `images` is left
/// out when empty (and read as empty when missing). Read back, a result is equal to the one
/// written:
///
/// ```
/// use std::time::Duration;
/// use agent_loop::tool::ToolCallResult;
///
/// let result = ToolCallResult::new("call_1", "add", "3", false, Duration::from_millis(12));
/// let json = serde_json::to_string(&result)?;
/// assert_eq!(
///     json,
///     r#"{"id":"call_1","name":"add","content":"3","is_error":false,"duration":{"secs":0,"nanos":12000000}}"#
/// );
/// assert_eq!(serde_json::from_str::<ToolCallResult>(&json)?, result);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallResult {
    /// The id of the call this answers.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// What the tool returned, or what went wrong, as text for the model.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// How long the call ran (zero when it never started).
    pub duration: Duration,
    /// Images the tool returned with its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaSource>,
    /// The result as structure, when the tool returned JSON
    /// ([`ToolOutput::json`](crate::ToolOutput::json)): `content` is its compact text. Left
    /// out of the serialized form when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<Box<serde_json::Value>>,
    /// What the tool asked instead of answering ([`ToolError::ask`]): an agent's run pauses
    /// for it; see [`question`](Self::question).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    question: Option<Box<Question>>,
}

impl ToolCallResult {
    /// A result.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
        duration: Duration,
    ) -> Self {
        ToolCallResult {
            id: id.into(),
            name: name.into(),
            content: content.into(),
            is_error,
            duration,
            images: Vec::new(),
            json: None,
            question: None,
        }
    }

    /// What the tool asked instead of answering, when it returned [`ToolError::ask`]: the
    /// result is then an error saying so (`content`), and an agent's run pauses for the
    /// host's answer rather than send it to the model.
    pub fn question(&self) -> Option<&Question> {
        self.question.as_deref()
    }

    /// The same result, as the tool's question.
    pub(crate) fn with_question(mut self, question: Question) -> Self {
        self.question = Some(Box::new(question));
        self
    }

    /// Takes the question out (the result becomes a plain error result).
    pub(crate) fn take_question(&mut self) -> Option<Question> {
        self.question.take().map(|q| *q)
    }

    /// The `tool_result` block that answers the call.
    pub fn to_block(&self) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: self.id.clone(),
            content: self.content.clone(),
            is_error: self.is_error,
            images: self.images.clone(),
            json: self.json.clone(),
        }
    }

    /// The same result as this JSON value: `content` becomes its compact text, and the
    /// formats that take structure get the value (see
    /// [`ContentBlock::ToolResult`](crate::ContentBlock::ToolResult)).
    pub fn with_json(mut self, value: serde_json::Value) -> Self {
        self.content = value.to_string();
        self.json = Some(Box::new(value));
        self
    }

    /// The same result with these images.
    pub fn with_images(mut self, images: Vec<MediaSource>) -> Self {
        self.images = images;
        self
    }

    /// The result of a call stopped (or never started) because its batch was cancelled.
    pub(crate) fn cancelled(id: String, name: String, duration: Duration) -> Self {
        ToolCallResult::new(id, name, CANCELLED, true, duration)
    }
}

/// Per-batch options: cancellation and where progress notes go.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// Cancelling it stops the running calls; every unfinished call is answered `cancelled`.
    pub cancel: CancellationToken,
    /// Where the tools' progress notes go (dropped when the channel is full).
    pub progress: Option<mpsc::Sender<ToolProgress>>,
    /// Prefixes each call's [`ToolContext::idempotency_key`] (a durable driver sets the
    /// session id here).
    pub idempotency_scope: Option<std::sync::Arc<str>>,
    /// What the driver hands every call of the batch ([`ToolContext::extension`]).
    pub(crate) extension: Option<Extension>,
    /// Whether each call's `execute_tool` span records its arguments and result.
    pub(crate) trace_content: bool,
}

/// A value a driver hands to every call of a batch, whatever its type: the agent's link for
/// tools that run agents (the tool layer knows nothing of agents).
#[derive(Clone)]
pub(crate) struct Extension(pub(crate) std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extension")
    }
}

impl ExecOptions {
    /// Options with a fresh token and no progress channel.
    pub fn new() -> Self {
        ExecOptions::default()
    }

    /// Uses this cancellation token.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Sends progress notes to this channel.
    pub fn progress(mut self, sender: mpsc::Sender<ToolProgress>) -> Self {
        self.progress = Some(sender);
        self
    }

    /// Scopes the calls' idempotency keys: each call's key becomes `{scope}/{call id}`.
    pub fn idempotency_scope(mut self, scope: impl Into<std::sync::Arc<str>>) -> Self {
        self.idempotency_scope = Some(scope.into());
        self
    }

    /// Records each call's arguments and result on its `execute_tool` tracing span
    /// (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`); off by default, as they
    /// may hold user data.
    pub fn trace_content(mut self, on: bool) -> Self {
        self.trace_content = on;
        self
    }

    /// Hands `value` to every call of the batch.
    pub(crate) fn extension(
        mut self,
        value: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        self.extension = Some(Extension(value));
        self
    }
}
