//! Tools: the typed [`Tool`] trait users implement, and the registry that runs them.
//!
//! ```text
//!  user code                    registry boundary                        model
//!  ─────────                    ─────────────────                        ─────
//!  impl Tool for X  ──register──► RegisteredTool (type-erased, schema    ToolSpec ──► request
//!  FnTool::new(..)                compiled once, name checked,           (a top-level union
//!                                 object input required)                  sent flattened)
//!                                        │
//!  ToolCall { id, name, input } ─────────┤ lookup → JSON Schema → serde → Tool::call
//!                                        ▼        (every failure is an is_error result)
//!                                 plan: a Schedule per call (Access + Concurrency:
//!                                 Shared / Exclusive / Keyed), ordered by a pure planner
//!                                        │
//!                                        ▼
//!                                 exec: max concurrency, timeouts, panics contained,
//!                                 cancellation, output cap
//!                                        │
//!                                        ▼
//!                                 ToolCallResult, one per call, in the model's order
//! ```

mod ask;
mod call;
mod catalog;
mod deferred;
mod exec;
mod flatten;
mod fn_tool;
mod plan;
mod registry;
pub(crate) mod schema;
pub mod search;
pub mod skills;
mod source;
mod text;
mod validator;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::media::Image;
use crate::message::MediaSource;

pub use crate::error::ToolError;
pub use ask::{Question, Reply, Resolution};
pub use call::{ExecOptions, ToolCall, ToolCallResult};
pub use catalog::ToolCatalog;
pub use deferred::DeferredTool;
pub use fn_tool::FnTool;
pub use plan::{Access, Concurrency};
pub use registry::ToolRegistry;
pub(crate) use schema::check_name;
pub use skills::{Skill, SkillError, Skills};
pub use source::ToolSource;

pub use crate::message::ToolSpec;
/// The schemars version whose `JsonSchema` tool inputs must derive.
pub use schemars;
pub(crate) use source::ToolSources;
/// The cancellation token of [`ExecOptions`] and [`ToolContext`].
pub use tokio_util::sync::CancellationToken;

/// A tool the model can call, with a typed input.
///
/// The registry derives the JSON Schema the model sees from [`Tool::Input`], checks every
/// call's arguments against it, deserializes them into `Input` and only then calls
/// [`Tool::call`]; a call whose arguments do not fit never reaches your code, and the model
/// gets an error result naming the field at fault.
///
/// Register tools with [`ToolRegistry::register`] (or `Agent::builder(..).tool(..)`); for a
/// quick tool without a type of its own, see [`FnTool`].
///
/// # Example
///
/// ```
/// use agent_loop::tool::schemars::JsonSchema;
/// use agent_loop::{async_trait, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
/// use agent_loop::tool::{ExecOptions, ToolCall};
/// use serde::Deserialize;
///
/// /// Arguments of the `add` tool.
/// #[derive(Deserialize, JsonSchema)]
/// #[schemars(crate = "agent_loop::tool::schemars")] // needed without a schemars dependency of your own
/// struct AddInput {
///     /// The first addend.
///     a: f64,
///     /// The second addend.
///     b: f64,
/// }
///
/// struct Add;
///
/// #[async_trait]
/// impl Tool for Add {
///     type Input = AddInput;
///
///     fn name(&self) -> &str {
///         "add"
///     }
///
///     fn description(&self) -> &str {
///         "Adds two numbers and returns the sum."
///     }
///
///     fn read_only(&self) -> bool {
///         true // no side effects
///     }
///
///     async fn call(&self, input: AddInput, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
///         ctx.report_progress("adding");
///         let sum = input.a + input.b;
///         if !sum.is_finite() {
///             return Err(ToolError::new("the sum is not a finite number; use smaller values"));
///         }
///         Ok(ToolOutput::text(sum.to_string()))
///     }
/// }
///
/// # fn main() -> Result<(), agent_loop::Error> {
/// let mut tools = ToolRegistry::new();
/// tools.register(Add)?;
/// assert_eq!(tools.specs()[0].input_schema["properties"]["a"]["type"], "number");
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// let results = rt.block_on(tools.execute_batch(
///     vec![
///         ToolCall::new("call_1", "add", serde_json::json!({"a": 2, "b": 3})),
///         ToolCall::new("call_2", "add", serde_json::json!({"a": "two", "b": 3})),
///     ],
///     &ExecOptions::default(),
/// ));
/// assert_eq!(results[0].content, "5");
/// assert!(!results[0].is_error);
/// assert_eq!(
///     results[1].content,
///     r#"invalid arguments for tool "add": at /a: "two" is not of type "number""#
/// );
/// assert!(results[1].is_error);
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's arguments. Its [`schemars::JsonSchema`] is what the model sees (doc comments
    /// on fields become descriptions); it must describe a JSON object: a struct, an enum with
    /// `#[serde(tag = "...")]` whose variants have named fields (sent flattened, see
    /// [`ToolRegistry::register`]), or `serde_json::Value` with an overridden
    /// [`Tool::input_schema`]. A `String`, a `Vec` or an untagged enum of plain values is
    /// refused at registration: wrap it in a struct field.
    ///
    /// Without a `schemars` dependency of your own, derive it as
    /// `#[derive(agent_loop::tool::schemars::JsonSchema)]` with
    /// `#[schemars(crate = "agent_loop::tool::schemars")]`; without that attribute the derive fails
    /// with "cannot find module or crate `schemars`" (older compilers: "failed to resolve: use
    /// of undeclared crate or module `schemars`").
    type Input: serde::de::DeserializeOwned + schemars::JsonSchema + Send;

    /// The name the model calls the tool by; must match `^[a-zA-Z0-9_-]{1,64}$`.
    fn name(&self) -> &str;

    /// What the tool does and when to use it, written for the model.
    fn description(&self) -> &str;

    /// The JSON Schema of the input object. Arguments are checked against it; the model is
    /// sent it as Anthropic `input_schema` / OpenAI `parameters`, flattened into one object
    /// schema when its top level is a `oneOf`, `anyOf`, `allOf` or `$ref` (see
    /// [`ToolRegistry::register`]).
    ///
    /// The default derives it from [`Tool::Input`] with schemars (without `$schema` and the
    /// type's name as `title`; with `"type": "object"` when it names no type). Override it for
    /// tools whose input is only known at run time (`Input = serde_json::Value`).
    fn input_schema(&self) -> serde_json::Value {
        schema::input_schema_for::<Self::Input>()
    }

    /// Runs the tool. An `Err` becomes an `is_error` result carrying its message, so say what
    /// went wrong and what the model can do about it.
    ///
    /// The call is stopped (its future dropped) when it times out or the run is cancelled;
    /// long-running work can also watch [`ToolContext::cancellation`].
    async fn call(&self, input: Self::Input, ctx: ToolContext) -> Result<ToolOutput, ToolError>;

    /// How this call may overlap the other calls of the same batch; see [`Concurrency`].
    /// Default: [`Concurrency::Shared`]. With [`Tool::read_only`] it makes the call's
    /// schedule.
    fn concurrency(&self, input: &Self::Input) -> Concurrency {
        let _ = input;
        Concurrency::Shared
    }

    /// Whether the tool has no side effects, so it is safe to start early and to run again:
    /// `true` is [`Access::ReadOnly`], `false` [`Access::SideEffects`]. Default: `false`.
    fn read_only(&self) -> bool {
        false
    }

    /// The longest one call may run before it is stopped and answered with a timeout error.
    /// `None` (the default) uses the registry's default timeout.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Whether the tool's result comes from outside the agent (a person, a webhook, a UI)
    /// rather than from [`call`](Tool::call): a run with calls of it pauses once the rest of
    /// the response's calls are answered, ending with
    /// [`Termination::Paused`](crate::Termination::Paused), and
    /// [`Agent::resume`](crate::Agent::resume) continues it with the results. Default:
    /// `false`. [`DeferredTool`] is a ready-made one.
    fn deferred(&self) -> bool {
        false
    }
}

/// What a tool returns to the model.
///
/// Text, JSON, or text with images (a screenshot, a chart, a page of a scan). Images reach the
/// model as the provider allows: inside the tool result for Anthropic; for OpenAI Chat, whose
/// tool messages carry text only, in a user message right after the tool results.
///
/// ```
/// use agent_loop::{ToolOutput};
/// use agent_loop::media::Image;
///
/// # let png = {
/// #     let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
/// #     b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0, 0, 0, 0]);
/// #     b
/// # };
/// let chart = Image::png(&png)?;
/// let output = ToolOutput::with_images("the chart of March", vec![chart]);
/// assert_eq!(output.images().len(), 1);
/// # Ok::<(), agent_loop::media::MediaError>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    /// Plain text, sent as is.
    Text(String),
    /// A JSON value, sent as compact JSON text.
    Json(serde_json::Value),
    /// Text with images.
    WithImages {
        /// The text (may be empty).
        text: String,
        /// The images, in order.
        images: Vec<MediaSource>,
    },
}

impl ToolOutput {
    /// A text output.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput::Text(text.into())
    }

    /// A JSON output.
    pub fn json(value: serde_json::Value) -> Self {
        ToolOutput::Json(value)
    }

    /// An image alone.
    pub fn image(image: Image) -> Self {
        Self::with_images(String::new(), vec![image])
    }

    /// Text with images.
    pub fn with_images(text: impl Into<String>, images: Vec<Image>) -> Self {
        ToolOutput::WithImages {
            text: text.into(),
            images: images.into_iter().map(Image::into_source).collect(),
        }
    }

    /// The images of the output (none for text and JSON).
    pub fn images(&self) -> &[MediaSource] {
        match self {
            ToolOutput::WithImages { images, .. } => images,
            _ => &[],
        }
    }

    /// The text the model reads.
    pub fn to_text(&self) -> String {
        match self {
            ToolOutput::Text(text) | ToolOutput::WithImages { text, .. } => text.clone(),
            ToolOutput::Json(value) => value.to_string(),
        }
    }

    /// The text the model reads, without copying text outputs.
    pub fn into_text(self) -> String {
        self.into_parts().0
    }

    /// The text and the images.
    pub fn into_parts(self) -> (String, Vec<MediaSource>) {
        match self {
            ToolOutput::Text(text) => (text, Vec::new()),
            ToolOutput::Json(value) => (value.to_string(), Vec::new()),
            ToolOutput::WithImages { text, images } => (text, images),
        }
    }
}

impl From<Image> for ToolOutput {
    fn from(image: Image) -> Self {
        ToolOutput::image(image)
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::Text(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::Text(text.to_owned())
    }
}

impl From<serde_json::Value> for ToolOutput {
    fn from(value: serde_json::Value) -> Self {
        ToolOutput::Json(value)
    }
}

/// A progress note from a running tool, for the host to display.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolProgress {
    /// The id of the call that reported it.
    pub call_id: String,
    /// The note.
    pub message: String,
}

impl ToolProgress {
    /// A progress note for a call.
    pub fn new(call_id: impl Into<String>, message: impl Into<String>) -> Self {
        ToolProgress {
            call_id: call_id.into(),
            message: message.into(),
        }
    }
}

/// What a running tool call can see of its surroundings: its call id, the cancellation
/// token, and a channel for progress notes.
#[derive(Clone)]
pub struct ToolContext {
    call_id: String,
    cancel: CancellationToken,
    progress: Option<mpsc::Sender<ToolProgress>>,
    idempotency_scope: Option<std::sync::Arc<str>>,
    /// What the driver handed the call (see [`ToolContext::extension`]).
    extension: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
    /// The host's answer, for the re-run of a call that asked.
    reply: Option<Box<Reply>>,
}

impl ToolContext {
    /// A context for a call with this id, with a fresh cancellation token and no progress
    /// channel; for testing your tools directly.
    pub fn new(call_id: impl Into<String>) -> Self {
        ToolContext {
            call_id: call_id.into(),
            cancel: CancellationToken::new(),
            progress: None,
            idempotency_scope: None,
            extension: None,
            reply: None,
        }
    }

    /// Hands the call the host's answer to what it asked (see [`ToolContext::reply`]); for
    /// testing a tool that [asks](ToolError::ask) directly.
    pub fn with_reply(mut self, reply: Reply) -> Self {
        self.reply = Some(Box::new(reply));
        self
    }

    /// The host's answer, when this call is the re-run of a call whose tool
    /// [asked](ToolError::ask) and whose run was resumed with an answer for it: the
    /// question (with the tool's [`data`](Question::data)) and the answer. `None` on a
    /// call's first run.
    pub fn reply(&self) -> Option<&Reply> {
        self.reply.as_deref()
    }

    /// Hands the call `value`, which [`extension`](Self::extension) gives back.
    pub(crate) fn with_extension(
        mut self,
        value: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        self.extension = Some(value);
        self
    }

    /// What the driver handed the call, if it is a `T`: the agent's link for a tool that runs
    /// an agent ([`Agent::as_tool`](crate::Agent::as_tool)).
    pub(crate) fn extension<T: std::any::Any>(&self) -> Option<&T> {
        self.extension.as_deref()?.downcast_ref()
    }

    /// Scopes [`idempotency_key`](Self::idempotency_key) (a session id, say).
    pub fn idempotency_scope(mut self, scope: impl Into<std::sync::Arc<str>>) -> Self {
        self.idempotency_scope = Some(scope.into());
        self
    }

    /// A key that names this call for the external systems a tool with side effects calls:
    /// `{scope}/{call id}` under a durable driver (the session id is the scope), else the call
    /// id. A call run again after a crash gets the same key, so the external system can drop
    /// the repeat.
    pub fn idempotency_key(&self) -> String {
        match &self.idempotency_scope {
            Some(scope) => format!("{scope}/{}", self.call_id),
            None => self.call_id.clone(),
        }
    }

    /// Uses this cancellation token.
    pub fn cancellation_token(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Sends progress notes to this channel.
    pub fn progress_sender(mut self, sender: mpsc::Sender<ToolProgress>) -> Self {
        self.progress = Some(sender);
        self
    }

    /// The provider's id of this call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Cancelled when the run is cancelled or this call timed out. The registry also drops a
    /// cancelled call's future, so watching it is only needed to stop work the future does
    /// not own (a spawned task, a child process).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Reports progress to the host, if it listens. Never blocks: the note is dropped when the
    /// channel is full or closed. Returns whether it was delivered.
    pub fn report_progress(&self, message: impl Into<String>) -> bool {
        match &self.progress {
            Some(tx) => tx
                .try_send(ToolProgress {
                    call_id: self.call_id.clone(),
                    message: message.into(),
                })
                .is_ok(),
            None => false,
        }
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call_id)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("progress", &self.progress.is_some())
            .field("extension", &self.extension.is_some())
            .field("reply", &self.reply)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_is_compact_text() {
        let out = ToolOutput::json(serde_json::json!({"a": [1, 2]}));
        assert_eq!(out.to_text(), r#"{"a":[1,2]}"#);
        assert_eq!(ToolOutput::text("hi").into_text(), "hi");
    }

    #[tokio::test]
    async fn progress_never_blocks_and_drops_when_full() {
        let (tx, mut rx) = mpsc::channel(1);
        let ctx = ToolContext::new("c1").progress_sender(tx);
        assert!(ctx.report_progress("one"));
        assert!(!ctx.report_progress("two"));
        assert_eq!(rx.recv().await, Some(ToolProgress::new("c1", "one")));
        assert!(!ToolContext::new("c2").report_progress("nobody listens"));
    }
}
