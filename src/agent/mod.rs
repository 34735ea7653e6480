//! The agent: the think → act → observe loop, exposed as a [`Stream`](futures::Stream) of
//! [`AgentEvent`]s.
//!
//! [`Agent::run`] sends the conversation to the model, forwards the streamed text as it
//! arrives, runs the tools the model asks for through the [`ToolRegistry`], feeds the results
//! back and repeats until the model answers without tools or a limit stops it. The last event
//! of every run is [`AgentEvent::Finished`] with the [`RunOutcome`].
//!
//! Every decision of the loop lives in [`AgentMachine`] (`machine.rs`), a sans-IO state
//! machine with a few pure helpers in `turn.rs`; `run.rs` is the tokio driver that carries
//! out the machine's actions (model calls, hooks, tools, timers, compaction) and feeds back
//! what happened.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::context::{ContextConfig, ContextManager, Conversation, Summarizer};
use crate::error::Error;
use crate::message::{Message, StopReason, Usage};
use crate::provider::{LlmClient, ModelRequest};
use crate::provider::{PromptCache, RequestSettings, RetryPolicy, ToolChoice};
use crate::tool::{Tool, ToolCall, ToolRegistry, ToolSource, ToolSources};

mod machine;
mod output;
mod run;
mod summarizer;
mod turn;

pub use machine::{Action, AgentMachine, Input};
pub use output::{RunOptions, StructuredOutput, DEFAULT_OUTPUT_TOOL};
pub use summarizer::LlmSummarizer;

/// One event of an agent run, in the order things happened.
///
/// # The order of events
///
/// A run's events follow this grammar (property-tested over random scripts, with
/// cancellation at random points, on both tokio runtime flavours):
///
/// ```text
/// run  := turn* Finished
/// turn := TurnStart (Retry | TextDelta | ThinkingDelta | ToolCallStart | ToolInputDelta
///                    | Compacted | call)* TurnEnd
/// call := ToolCall ToolProgress* ToolResult
/// ```
///
/// - [`Finished`](AgentEvent::Finished) comes exactly once, always last.
/// - Every [`ToolCall`](AgentEvent::ToolCall) is answered by exactly one
///   [`ToolResult`](AgentEvent::ToolResult), and every `ToolResult` follows its `ToolCall`.
///   A call the agent answers itself (arguments that are not valid, denied by a hook,
///   repeated too often, cancelled) gets both too, its result an error.
/// - A call's [`ToolProgress`](AgentEvent::ToolProgress) comes between its `ToolCall` and its
///   `ToolResult`, never after. Calls of one turn interleave with each other; a call's own
///   events never reorder.
/// - A read-only tool may start while the model is still streaming: its `ToolCall` (and even
///   its result) can come before the turn's last text delta.
/// - [`TurnEnd`](AgentEvent::TurnEnd) comes after the turn's last `ToolResult`. A turn cut
///   short (cancelled, failed, stopped by a hook) still ends with a `TurnEnd`, whose stop
///   reason is `StopReason::Other("interrupted")`.
/// - After a [`Retry`](AgentEvent::Retry), the turn's text so far is void: the response is
///   requested again from the start.
/// - At each `TurnEnd` the conversation is a valid history: [`AgentHandle::snapshot`] (or
///   [`Agent::snapshot`]) saves it while the run goes on.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A model turn starts (1 for the first).
    TurnStart {
        /// The turn number within this run.
        turn: u32,
    },
    /// Streamed answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// Streamed reasoning text.
    ThinkingDelta {
        /// The text.
        text: String,
    },
    /// The model started a tool call; its arguments follow as [`AgentEvent::ToolInputDelta`].
    ToolCallStart {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolInputDelta {
        /// The call id.
        id: String,
        /// The fragment.
        partial_json: String,
    },
    /// A tool call is assembled and about to run.
    ToolCall {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The arguments.
        input: serde_json::Value,
    },
    /// A tool reported progress while running.
    ToolProgress {
        /// The call id.
        id: String,
        /// What the tool said.
        message: String,
    },
    /// A tool call finished. `content` may be shortened for display (the history keeps what
    /// the model is sent).
    ToolResult {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The result text (at most [`AgentBuilder::event_content_limit`] bytes).
        content: String,
        /// Whether the call failed.
        is_error: bool,
        /// How long it ran.
        duration: Duration,
    },
    /// The model call failed transiently and is sent again from the start of the turn:
    /// drop any partial text of this turn.
    Retry {
        /// 1 for the first retry of this turn.
        attempt: u32,
        /// The wait before sending again.
        delay: Duration,
        /// What failed.
        error: String,
    },
    /// The conversation was compacted to fit the context window.
    Compacted {
        /// Estimated tokens before.
        tokens_before: usize,
        /// Estimated tokens after.
        tokens_after: usize,
    },
    /// A model turn ended: after its response and its tools' results.
    TurnEnd {
        /// The turn number.
        turn: u32,
        /// Why the model stopped.
        stop_reason: StopReason,
        /// Usage of this turn's response.
        usage: Usage,
    },
    /// The run is over; always the last event.
    Finished(RunOutcome),
}

/// How a run ended, with what it produced.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Why the run stopped.
    pub termination: Termination,
    /// The text of the model's last answer (empty if there was none).
    pub final_text: String,
    /// Model turns taken in this run.
    pub turns: u32,
    /// Usage summed over every model call of the run, failed and retried attempts included.
    pub usage: Usage,
    /// Of [`usage`](Self::usage), what the attempts that failed and were sent again (or
    /// ended the run) used: the cost of retries, reported apart so that it can be seen.
    pub failed_usage: Usage,
    /// The structured answer, when one was asked for ([`RunOptions::output`]) and given.
    pub output: Option<serde_json::Value>,
}

/// Why a run stopped.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub enum Termination {
    /// The model answered without calling tools.
    Completed,
    /// The turn limit was reached.
    MaxTurns,
    /// The run was cancelled (by the token, the handle, or by dropping the stream).
    Cancelled,
    /// The token budget was used up.
    TokenBudget {
        /// Tokens used by the run so far.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// Every tool call failed in this many consecutive turns.
    ToolFailures {
        /// Consecutive turns whose tools all failed.
        turns: u32,
    },
    /// The model asked for the same tool calls with the same input this many times in a row.
    RepeatedToolCall {
        /// The tool name (the first of the repeated calls).
        name: String,
        /// How many times in a row.
        times: u32,
    },
    /// A hook stopped the run.
    StoppedByHook {
        /// The hook's reason.
        reason: String,
    },
    /// The model refused (`StopReason::Refusal` or a content filter).
    Refused,
    /// The answer was cut off by `max_tokens` and no continuation was left.
    MaxTokens,
    /// The model gave no valid structured answer within the retries allowed
    /// ([`StructuredOutput::max_retries`]).
    InvalidOutput {
        /// The last answer: the answer tool's input, or the model's text when it answered in
        /// text.
        raw: serde_json::Value,
        /// What was wrong with it.
        error: String,
    },
    /// An error ended the run.
    Error(Error),
}

impl PartialEq for Termination {
    fn eq(&self, other: &Self) -> bool {
        use Termination::*;
        match (self, other) {
            (Completed, Completed) | (MaxTurns, MaxTurns) | (Cancelled, Cancelled) => true,
            (Refused, Refused) | (MaxTokens, MaxTokens) => true,
            (TokenBudget { used: a, budget: b }, TokenBudget { used: c, budget: d }) => {
                a == c && b == d
            }
            (ToolFailures { turns: a }, ToolFailures { turns: b }) => a == b,
            (RepeatedToolCall { name: a, times: b }, RepeatedToolCall { name: c, times: d }) => {
                a == c && b == d
            }
            (StoppedByHook { reason: a }, StoppedByHook { reason: b }) => a == b,
            (InvalidOutput { raw: a, error: b }, InvalidOutput { raw: c, error: d }) => {
                a == c && b == d
            }
            (Error(a), Error(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

impl RunOutcome {
    /// The structured answer as a `T`: the run must have completed with one.
    pub fn parse_output<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        match (&self.termination, &self.output) {
            (Termination::Completed, Some(value)) => T::deserialize(value).map_err(|e| {
                Error::Config(format!(
                    "the structured answer is not the type asked for: {e}"
                ))
            }),
            (Termination::Completed, None) => Err(Error::Config(
                "the run gave no structured answer: none was asked for (RunOptions::output)"
                    .to_owned(),
            )),
            _ => Err(Error::Stopped(Box::new(self.clone()))),
        }
    }

    /// The final text, if the run completed; else why it did not.
    pub fn into_text(self) -> Result<String, Error> {
        match self.termination {
            Termination::Completed => Ok(self.final_text),
            Termination::Error(e) => Err(e),
            _ => Err(Error::Stopped(Box::new(self))),
        }
    }

    /// The share of the run's input tokens served from the provider's prompt cache (cache
    /// reads over all input, 0 when there was no input). Each turn's own figure is
    /// `usage.cache_hit_ratio()` of its [`AgentEvent::TurnEnd`].
    pub fn cache_hit_ratio(&self) -> f64 {
        self.usage.cache_hit_ratio()
    }
}

impl Termination {
    /// Whether the run ended because the model was done.
    pub fn is_completed(&self) -> bool {
        matches!(self, Termination::Completed)
    }
}

impl fmt::Display for Termination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Termination::Completed => f.write_str("completed"),
            Termination::MaxTurns => f.write_str("stopped at the turn limit"),
            Termination::Cancelled => f.write_str("cancelled"),
            Termination::TokenBudget { used, budget } => {
                write!(f, "token budget used up ({used} of {budget})")
            }
            Termination::ToolFailures { turns } => {
                write!(f, "every tool call failed in {turns} consecutive turns")
            }
            Termination::RepeatedToolCall { name, times } => {
                write!(
                    f,
                    "the model repeated the same call of `{name}` {times} times"
                )
            }
            Termination::StoppedByHook { reason } => write!(f, "stopped by a hook: {reason}"),
            Termination::Refused => f.write_str("the model refused"),
            Termination::MaxTokens => f.write_str("the answer was cut off at max_tokens"),
            Termination::InvalidOutput { error, .. } => {
                write!(f, "no valid structured answer: {error}")
            }
            Termination::Error(e) => write!(f, "error: {e}"),
        }
    }
}

/// A hook's verdict on a tool call.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDecision {
    /// Run it.
    Allow,
    /// Do not run it; the model reads `reason` as the tool's error result.
    Deny(String),
    /// Do not run it and stop the run after answering this turn's calls.
    Stop(String),
}

/// A hook's verdict before a model call.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookAction {
    /// Go on.
    Continue,
    /// Stop the run before the call.
    Stop(String),
}

/// Hooks into the loop. Every method has a default that lets the loop go on.
///
/// ```
/// use agent_loop::{AgentHooks, ToolCall, ToolDecision};
///
/// struct NoDeletes;
///
/// #[agent_loop::async_trait]
/// impl AgentHooks for NoDeletes {
///     async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
///         if call.name == "delete_file" {
///             ToolDecision::Deny("deleting files is not allowed here".into())
///         } else {
///             ToolDecision::Allow
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait AgentHooks: Send + Sync {
    /// Called before each tool call runs (approval prompts, policies, logging).
    async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
        let _ = call;
        ToolDecision::Allow
    }

    /// Called before each model call with the request about to be sent; adjust the system
    /// prompt, the tools or any setting (a prepare-step hook), or stop the run.
    async fn before_model_call(&self, request: &mut ModelRequest, turn: u32) -> HookAction {
        let _ = (request, turn);
        HookAction::Continue
    }
}

#[derive(Debug, Default)]
struct NoHooks;

impl AgentHooks for NoHooks {}

/// Settings of the loop (see the [`AgentBuilder`] setters).
#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    pub(crate) model: Option<String>,
    pub(crate) max_tokens: u32,
    pub(crate) settings: RequestSettings,
    pub(crate) thinking_budget: Option<u32>,
    pub(crate) max_turns: u32,
    pub(crate) max_tool_failure_turns: u32,
    pub(crate) max_repeated_calls: u32,
    pub(crate) token_budget: Option<u64>,
    pub(crate) final_answer_at_max_turns: bool,
    pub(crate) max_continuations: u32,
    pub(crate) retry: RetryPolicy,
    pub(crate) event_content_limit: usize,
    pub(crate) early_read_only_tools: bool,
    pub(crate) prompt_cache: Option<PromptCache>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            model: None,
            max_tokens: 8192,
            settings: RequestSettings::default(),
            thinking_budget: None,
            max_turns: 50,
            max_tool_failure_turns: 3,
            max_repeated_calls: 3,
            token_budget: None,
            final_answer_at_max_turns: false,
            max_continuations: 0,
            retry: RetryPolicy::default(),
            event_content_limit: 4096,
            early_read_only_tools: true,
            prompt_cache: Some(PromptCache::default()),
        }
    }
}

/// Cancels runs from outside: from another task, a Ctrl-C handler, a UI button.
///
/// Obtained from [`Agent::handle`] before calling [`Agent::run`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    inner: Arc<HandleInner>,
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug)]
struct HandleInner {
    parent: CancellationToken,
    current: Mutex<CancellationToken>,
    stop_after_turn: std::sync::atomic::AtomicBool,
}

impl AgentHandle {
    fn new(parent: CancellationToken, shared: Arc<Mutex<Shared>>) -> Self {
        let current = parent.child_token();
        AgentHandle {
            inner: Arc::new(HandleInner {
                parent,
                current: Mutex::new(current),
                stop_after_turn: std::sync::atomic::AtomicBool::new(false),
            }),
            shared,
        }
    }

    /// The conversation as it stands: as of the last turn boundary of the run in flight, or
    /// the agent's whole conversation between runs. Always a valid history to save and
    /// resume from with [`Agent::restore`].
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, AgentEvent};
    /// use futures::StreamExt;
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let handle = agent.handle();
    /// // The run's stream owns what it needs: spawn it.
    /// let mut events = agent.run("Hi");
    /// let task = tokio::spawn(async move {
    ///     while let Some(event) = events.next().await {
    ///         if let AgentEvent::TurnEnd { .. } = event {
    ///             // Save after every turn while the run goes on.
    ///             let saved = handle.snapshot();
    ///             assert!(!saved.messages.is_empty());
    ///         }
    ///     }
    /// });
    /// task.await.unwrap();
    /// assert_eq!(agent.messages().len(), 2);
    /// # Ok::<(), agent_loop::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn snapshot(&self) -> Conversation {
        lock(&self.shared).conversation()
    }

    /// Cancels the current run at once: streaming stops, running tools are cancelled, and the
    /// run finishes with [`Termination::Cancelled`]. A cancel before a run starts cancels
    /// that run.
    pub fn cancel(&self) {
        self.token().cancel();
    }

    /// Lets the current turn finish (its tools run and their results are recorded), then
    /// ends the run with [`Termination::Cancelled`].
    pub fn stop_after_turn(&self) {
        self.inner
            .stop_after_turn
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn token(&self) -> CancellationToken {
        match self.inner.current.lock() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.inner
            .stop_after_turn
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Called when a run ends: the next run starts uncancelled (unless the parent token is).
    pub(crate) fn reset(&self) {
        let fresh = self.inner.parent.child_token();
        match self.inner.current.lock() {
            Ok(mut t) => *t = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        self.inner
            .stop_after_turn
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// An LLM agent: a model client, tools, and the conversation it holds.
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::{Agent, AgentEvent};
/// use futures::StreamExt;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
/// let mut agent = Agent::builder(client).system("Be brief.").build()?;
/// let events: Vec<AgentEvent> = agent.run("Hi").collect().await;
/// match events.last() {
///     Some(AgentEvent::Finished(outcome)) => assert_eq!(outcome.final_text, "Hello!"),
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok::<(), agent_loop::Error>(())
/// # }).unwrap();
/// ```
pub struct Agent {
    pub(crate) client: Arc<dyn LlmClient>,
    /// The tools as built.
    pub(crate) tools: ToolRegistry,
    /// The builder's own tools and the tool sources, with the newest registry.
    pub(crate) sources: ToolSources,
    pub(crate) config: AgentConfig,
    pub(crate) hooks: Arc<dyn AgentHooks>,
    pub(crate) summarizer: Option<Arc<dyn Summarizer>>,
    pub(crate) handle: AgentHandle,
    /// The conversation, shared with the run in flight (if any) and with the handles.
    pub(crate) shared: Arc<Mutex<Shared>>,
}

/// The conversation as the agent, its handles and a run in flight share it.
///
/// Invariant: `context` is `Some` exactly when no run is in flight. While a run holds the
/// context, `view` is the conversation as of the run's last turn boundary (or its start).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) context: Option<ContextManager>,
    pub(crate) view: Conversation,
}

impl Shared {
    /// The conversation as it stands: the context's when idle, else the run's last
    /// turn-boundary view.
    pub(crate) fn conversation(&self) -> Conversation {
        match &self.context {
            Some(context) => context.snapshot(),
            None => self.view.clone(),
        }
    }
}

/// Locks the shared state, whatever a panicking holder left (the state is always whole:
/// every change is a single assignment).
pub(crate) fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model_name())
            .field("tools", &self.tools)
            .field("messages", &self.messages().len())
            .field("running", &self.is_running())
            .field("max_turns", &self.config.max_turns)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts building an agent around a model client.
    pub fn builder(client: impl LlmClient + 'static) -> AgentBuilder {
        AgentBuilder::new(Arc::new(client))
    }

    /// The conversation so far. While a run is in flight: as of its last turn boundary (the
    /// end of a turn's tool results, or the run's start).
    pub fn messages(&self) -> Arc<Vec<Message>> {
        let shared = lock(&self.shared);
        match &shared.context {
            Some(context) => context.shared_messages(),
            None => Arc::new(shared.view.messages.clone()),
        }
    }

    /// A copy of the context manager holding the conversation (its settings, counts and
    /// messages). While a run is in flight the run holds the live one: this is the
    /// conversation as of the run's last turn boundary, counted afresh.
    pub fn context(&self) -> ContextManager {
        let shared = lock(&self.shared);
        match &shared.context {
            Some(context) => context.clone(),
            None => {
                let mut context = ContextManager::new(ContextConfig::default());
                let _ = context.restore(shared.view.clone());
                context
            }
        }
    }

    /// The conversation, for saving (serde); restore it with [`Agent::restore`]. Callable at
    /// any time, also while a run is in flight (from the event loop, or through
    /// [`AgentHandle::snapshot`] from another task): it then gives the conversation as of the
    /// run's last turn boundary, which is always a valid history to resume from.
    pub fn snapshot(&self) -> Conversation {
        lock(&self.shared).conversation()
    }

    /// Replaces the conversation with a saved one; unanswered tool calls of an interrupted
    /// run are answered as interrupted so the next request is valid.
    ///
    /// The system prompt: the saved conversation's, when it has one; otherwise the agent
    /// keeps its own (the builder's [`system`](AgentBuilder::system)). Fails while a run is
    /// in flight.
    pub fn restore(&mut self, mut conversation: Conversation) -> Result<(), Error> {
        let mut shared = lock(&self.shared);
        let context = shared.context.as_mut().ok_or_else(busy)?;
        if conversation.system.is_none() {
            conversation.system = context.system().map(str::to_owned);
        }
        context.restore(conversation).map(|_| ())
    }

    /// Forgets the conversation (the system prompt stays). Fails while a run is in flight.
    pub fn clear(&mut self) -> Result<(), Error> {
        let mut shared = lock(&self.shared);
        shared.context.as_mut().ok_or_else(busy)?.clear();
        Ok(())
    }

    /// Whether a run is in flight (its stream not yet finished or dropped).
    pub fn is_running(&self) -> bool {
        lock(&self.shared).context.is_none()
    }

    /// The tools, as built. With [tool sources](AgentBuilder::tool_source), a run uses the
    /// newest set, which may differ.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// A handle to cancel runs and read the conversation from elsewhere.
    pub fn handle(&self) -> AgentHandle {
        self.handle.clone()
    }

    fn model_name(&self) -> String {
        self.config
            .model
            .clone()
            .unwrap_or_else(|| self.client.model().to_owned())
    }
}

/// The error of an operation that needs the conversation while a run holds it.
pub(crate) fn busy() -> Error {
    Error::Config(
        "a run of this agent is in flight: wait for its stream to end (or drop it) before \
         starting another run or changing the conversation"
            .to_owned(),
    )
}

/// Builds an [`Agent`]. Every setting has a sensible default.
pub struct AgentBuilder {
    client: Arc<dyn LlmClient>,
    tools: ToolRegistry,
    sources: Vec<Arc<dyn ToolSource>>,
    tool_errors: Vec<Error>,
    system: Option<String>,
    context: Option<ContextManager>,
    context_config: Option<ContextConfig>,
    config: AgentConfig,
    hooks: Arc<dyn AgentHooks>,
    summarizer: Option<Option<Arc<dyn Summarizer>>>,
    cancel: CancellationToken,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("tools", &self.tools)
            .field("system", &self.system)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    fn new(client: Arc<dyn LlmClient>) -> Self {
        AgentBuilder {
            client,
            tools: ToolRegistry::new(),
            sources: Vec::new(),
            tool_errors: Vec::new(),
            system: None,
            context: None,
            context_config: None,
            config: AgentConfig::default(),
            hooks: Arc::new(NoHooks),
            summarizer: None,
            cancel: CancellationToken::new(),
        }
    }

    /// The system prompt.
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Adds a tool. A duplicate or invalid name makes [`build`](Self::build) fail.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        if let Err(e) = self.tools.register(tool) {
            self.tool_errors.push(e);
        }
        self
    }

    /// Adds a source of tools that can change while the agent runs (an MCP server's, see
    /// `mcp_tools`). Its current tools are registered by [`build`](Self::build) (a name
    /// clash or a refused schema makes it fail). At the start of each run and at each turn
    /// boundary, a source that says it [changed](ToolSource::changed) is refreshed and the
    /// tools rebuilt (the builder's own, then every source's, in the order added), so the
    /// next model request lists the new set and its calls run with it. A refresh that fails,
    /// or new tools that cannot be registered, are logged (`tracing`) and the old tools stay.
    pub fn tool_source(mut self, source: impl ToolSource + 'static) -> Self {
        self.sources.push(Arc::new(source));
        self
    }

    /// Uses this registry (with its tools and execution settings) instead of the builder's
    /// (the tools of [tool sources](Self::tool_source) are added to it).
    pub fn tools(mut self, registry: ToolRegistry) -> Self {
        self.tools = registry;
        self
    }

    /// The model name, overriding the client's.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = Some(model.into());
        self
    }

    /// Most tokens per response (default 8192).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.config.max_tokens = max_tokens;
        self
    }

    /// Sampling temperature (0.0 to 2.0; checked by [`build`](Self::build)).
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.config.settings.temperature = Some(temperature);
        self
    }

    /// Nucleus sampling (above 0.0, at most 1.0; checked by [`build`](Self::build)).
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.config.settings.top_p = Some(top_p);
        self
    }

    /// Sequences that stop generation.
    pub fn stop_sequences<S: Into<String>>(mut self, stops: impl IntoIterator<Item = S>) -> Self {
        self.config.settings.stop_sequences = Some(stops.into_iter().map(Into::into).collect());
        self
    }

    /// Which tool the model must (or must not) call on every turn (default
    /// [`ToolChoice::Auto`]). A named tool must be one of the agent's.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.config.settings.tool_choice = Some(choice);
        self
    }

    /// Whether the model may call several tools in one response (default: the provider's,
    /// which is yes).
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.config.settings.parallel_tool_calls = Some(parallel);
        self
    }

    /// An id of the end user, for the provider's abuse monitoring.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.config.settings.user = Some(user.into());
        self
    }

    /// A provider-specific body field (`top_k`, `reasoning_effort`, `service_tier` …). A
    /// field the crate sends itself is refused when the request is encoded, naming it.
    pub fn extra_body(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.config.settings.extra.insert(key.into(), value);
        self
    }

    /// All request settings at once (replacing those set before).
    pub fn settings(mut self, settings: RequestSettings) -> Self {
        let max_tokens = settings.max_tokens;
        self.config.settings = settings;
        if let Some(n) = max_tokens {
            self.config.max_tokens = n;
        }
        self
    }

    /// Anthropic extended thinking with this token budget.
    pub fn thinking_budget(mut self, tokens: u32) -> Self {
        self.config.thinking_budget = Some(tokens);
        self
    }

    /// Most model turns per run (default 50).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.config.max_turns = turns.max(1);
        self
    }

    /// Stop after this many consecutive turns in which every tool call failed (default 3).
    pub fn max_tool_failure_turns(mut self, turns: u32) -> Self {
        self.config.max_tool_failure_turns = turns.max(1);
        self
    }

    /// Stop when the model asks for the same calls with the same input this many times in a
    /// row (default 3); the repeated calls are answered with an error, not run.
    pub fn max_repeated_calls(mut self, times: u32) -> Self {
        self.config.max_repeated_calls = times.max(2);
        self
    }

    /// Stop when the run's total tokens (input + output, all calls) reach this budget.
    pub fn token_budget(mut self, tokens: u64) -> Self {
        self.config.token_budget = Some(tokens);
        self
    }

    /// At the turn limit, make one last model call with tools disabled for a final answer
    /// instead of stopping bare (default off).
    pub fn final_answer_at_max_turns(mut self, enabled: bool) -> Self {
        self.config.final_answer_at_max_turns = enabled;
        self
    }

    /// How many times a text answer cut off by `max_tokens` is continued (default 0).
    pub fn max_continuations(mut self, times: u32) -> Self {
        self.config.max_continuations = times;
        self
    }

    /// The policy for re-sending a turn whose response broke after it started
    /// (the clients retry failures before any content themselves).
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// Tool results in [`AgentEvent::ToolResult`] are cut to this many bytes (default 4096);
    /// the history keeps the full result.
    pub fn event_content_limit(mut self, bytes: usize) -> Self {
        self.config.event_content_limit = bytes;
        self
    }

    /// Whether read-only tools start as soon as their arguments are complete, while the
    /// model is still streaming (default on).
    pub fn early_read_only_tools(mut self, enabled: bool) -> Self {
        self.config.early_read_only_tools = enabled;
        self
    }

    /// Prompt-cache breakpoints on every request (default on, five-minute TTL: the tools,
    /// the system prompt and the two latest user messages are marked, so each turn reads the
    /// conversation so far from the provider's cache). `None` sends none. Anthropic needs
    /// them to cache at all; OpenAI caches by itself and ignores them. An invalid setting
    /// (more breakpoints than the API allows) fails [`build`](Self::build).
    pub fn prompt_cache(mut self, cache: Option<PromptCache>) -> Self {
        self.config.prompt_cache = cache;
        self
    }

    /// Context window settings (default: looked up from the model name).
    pub fn context_config(mut self, config: ContextConfig) -> Self {
        self.context_config = Some(config);
        self
    }

    /// Starts from this context (a restored conversation, a custom token counter).
    pub fn context(mut self, context: ContextManager) -> Self {
        self.context = Some(context);
        self
    }

    /// The summarizer used by compaction (default: the agent's own client).
    pub fn summarizer(mut self, summarizer: impl Summarizer + 'static) -> Self {
        self.summarizer = Some(Some(Arc::new(summarizer)));
        self
    }

    /// Compaction never calls a model: it elides and drops old turns instead.
    pub fn no_summarizer(mut self) -> Self {
        self.summarizer = Some(None);
        self
    }

    /// Hooks before tools and model calls.
    pub fn hooks(mut self, hooks: impl AgentHooks + 'static) -> Self {
        self.hooks = Arc::new(hooks);
        self
    }

    /// A parent cancellation token: cancelling it cancels every run of the agent.
    pub fn cancellation_token(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Builds the loop as a sans-IO [`AgentMachine`] instead of an [`Agent`]: for a host
    /// that drives it from its own runtime or a durable-execution engine, carrying out its
    /// [`Action`]s itself (the client given to [`Agent::builder`] only names the model and
    /// its limits then; hooks and the summarizer are the driver's to apply).
    pub fn build_machine(self) -> Result<AgentMachine, Error> {
        let agent = self.build()?;
        let context = lock(&agent.shared).context.take().ok_or_else(busy)?;
        Ok(AgentMachine::new(
            agent.config.clone(),
            context,
            agent.sources.current(),
            agent.client.stream_limits(),
            agent.summarizer.is_some(),
        ))
    }

    /// Builds the agent; fails on an invalid tool set.
    pub fn build(self) -> Result<Agent, Error> {
        if let Some(e) = self.tool_errors.into_iter().next() {
            return Err(e);
        }
        if let Some(cache) = &self.config.prompt_cache {
            cache.validate()?;
        }
        if let Some(config) = &self.context_config {
            config.validate()?;
        }
        self.config.settings.validate()?;
        if self.config.max_tokens == 0 {
            return Err(Error::Config("max_tokens must be at least 1".to_owned()));
        }
        let sources = ToolSources::new(self.tools, self.sources)?;
        let tools = sources.current();
        if let Some(ToolChoice::Tool(name)) = &self.config.settings.tool_choice {
            if !tools.contains(name) {
                return Err(Error::Config(format!(
                    "tool_choice names the tool \"{name}\", which the agent does not have"
                )));
            }
        }
        let model = self
            .config
            .model
            .clone()
            .unwrap_or_else(|| self.client.model().to_owned());
        let mut context = match (self.context, self.context_config) {
            (Some(mut ctx), Some(cfg)) => {
                ctx.set_config(cfg);
                ctx
            }
            (Some(ctx), None) => ctx,
            (None, cfg) => {
                ContextManager::new(cfg.unwrap_or_else(|| ContextConfig::for_model(&model)))
            }
        };
        if self.system.is_some() {
            context.set_system(self.system);
        }
        context.set_tools(&tools.specs());
        let summarizer = match self.summarizer {
            Some(choice) => choice,
            None => Some(Arc::new(LlmSummarizer::new(self.client.clone())) as Arc<dyn Summarizer>),
        };
        let shared = Arc::new(Mutex::new(Shared {
            context: Some(context),
            view: Conversation::default(),
        }));
        Ok(Agent {
            client: self.client,
            tools,
            sources,
            config: self.config,
            hooks: self.hooks,
            summarizer,
            handle: AgentHandle::new(self.cancel, shared.clone()),
            shared,
        })
    }
}
