//! What a run reports: its events (with the written grammar), its outcome and why it ended.
//! Plain data, shared by the machine and every driver.

use std::fmt;
use std::time::Duration;

use crate::error::{ConfigError, Error, RateLimits};
use crate::input::UserInput;
use crate::message::{StopReason, Usage};
use crate::pricing::{Cost, Usd};

use super::machine::pause::PausedRun;
use super::path::{AgentPath, SubAgentUsage};

/// The stop reason of the `TurnEnd` of a turn that was cut short.
pub(crate) const INTERRUPTED_STOP: &str = "interrupted";

/// One event of an agent run, in the order things happened.
///
/// # The order of events
///
/// A run's events follow this grammar (property-tested over random scripts, with
/// cancellation at random points, on both tokio runtime flavours):
///
/// ```text
/// run  := turn* Finished
/// turn := TurnStart (Retry | Fallback | RateLimits | TextDelta | ThinkingDelta
///                    | ToolCallStart | ToolInputDelta | Compacted | call)* TurnEnd
/// call := ToolCall (ToolProgress | SubAgent)* ToolResult
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
/// - After a [`Retry`](AgentEvent::Retry) or a [`Fallback`](AgentEvent::Fallback), the turn's
///   text so far is void: the response is requested again from the start.
/// - A run that pauses ([`Termination::Paused`]) ends with `Finished` inside its open turn:
///   no `TurnEnd`, and its waiting calls without results (a deferred tool's call has its
///   `ToolCall`; a call waiting for approval has nothing yet). The resumed run
///   ([`Agent::resume`](crate::Agent::resume)) continues that turn, with no `TurnStart`: the
///   paused run's events without their `Finished`, followed by the resumed run's, are one
///   `run` of this grammar, the same events a run that never paused gives.
/// - A [`SubAgent`](AgentEvent::SubAgent) event carries an event of a sub-agent's run (an
///   agent used as a tool, [`Agent::as_tool`](crate::Agent::as_tool)), with the
///   [`AgentPath`] it comes from. The events of one path, in order, are one `run` of this
///   same grammar, and they all come between the `ToolCall` and the `ToolResult` of the call
///   their path starts with: at every level of nesting the grammar holds. A sub-agent's run
///   cut short by its call's end (cancelled, timed out) is closed as a cancelled run closes,
///   before that `ToolResult`.
/// - A [`Handoff`](AgentEvent::Handoff) comes between turns: after the `TurnEnd` of the turn
///   whose call asked for it (that turn was the old agent's), before the next `TurnStart`
///   (the new agent's). `run := (turn Handoff?)* Finished`.
/// - A [`Steered`](AgentEvent::Steered) comes between turns too, where the host's words
///   ([`AgentHandle::steer`](crate::agent::AgentHandle::steer)) entered the history: after a
///   `TurnEnd` (or a `Handoff`, or at the run's start), before the next `TurnStart`, one per
///   input, in the order they were given. With both:
///   `run := Steered* (turn Handoff? Steered*)* Finished`.
/// - At each `TurnEnd` the conversation is a valid history: [`AgentHandle::snapshot`](crate::agent::AgentHandle::snapshot) (or
///   [`Agent::snapshot`](crate::Agent::snapshot)) saves it while the run goes on.
///
/// # A new variant is a breaking change
///
/// The enum is exhaustive on purpose (no `#[non_exhaustive]`): a new event must fail to
/// compile until each protocol decides what to do with it. Every encoder of the workspace
/// (AG-UI and the AI SDK in `agent-loop-ui`; A2A, MCP and Open Responses in
/// `agent-loop-serve`) and the Restate driver match it without a `_` arm, each variant it
/// ignores listed with why; a `_` arm would drop a new event silently. So adding a variant
/// is a breaking change, released as a minor version while the crate is 0.x (and listed in
/// the changelog). Code of yours that only wants some events may keep a `_` arm; code that
/// must see every kind of event (an encoder, a journal) should list them all, to hear of a
/// new one from the compiler. Match with `..` in each variant
/// (`AgentEvent::ToolResult { id, content, .. }`): a new field then breaks none of your
/// matches.
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
        /// The result text (at most [`RunPolicy::event_content_limit`](crate::agent::RunPolicy::event_content_limit) bytes).
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
        /// What the failed call used (what the provider reported before it failed).
        usage: Usage,
        /// What the failed call cost ([`RunOutcome::failed_cost`] sums these).
        cost: Cost,
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
        /// What this turn's response cost, at the agent's
        /// [`Pricing`](crate::pricing::Pricing) (failed attempts of the turn are in their
        /// [`Retry`](AgentEvent::Retry) events).
        cost: Cost,
    },
    /// An event of a sub-agent's run (an agent used as a tool): `event` as that run reported
    /// it, never itself a `SubAgent`.
    SubAgent {
        /// Where it comes from: the call of this run that runs the sub-agent first.
        path: AgentPath,
        /// The sub-agent's event.
        event: Box<AgentEvent>,
    },
    /// The model failed in a way the agent has a fallback for
    /// ([`AgentBuilder::fallback`](crate::AgentBuilder::fallback)): the turn is sent again
    /// from its start to the fallback model, which the run keeps from now on. As after a
    /// [`Retry`](AgentEvent::Retry), drop any partial text of this turn.
    Fallback {
        /// The model that failed.
        from: String,
        /// The model the run moves to.
        to: String,
        /// What failed.
        error: String,
    },
    /// The conversation was handed to another agent
    /// ([`AgentBuilder::handoff`](crate::AgentBuilder::handoff)): its system prompt, tools
    /// and settings apply from the next turn on.
    Handoff {
        /// The agent that handed it over.
        from: String,
        /// The agent that takes it.
        to: String,
    },
    /// The host's words ([`AgentHandle::steer`](crate::agent::AgentHandle::steer)) entered
    /// the history here, as a user message: between turns, before the model call that reads
    /// them.
    Steered {
        /// What the host said.
        input: UserInput,
    },
    /// The run is over; always the last event.
    Finished(RunOutcome),
    /// The provider's rate-limit figures, from the head of a model response: inside a turn,
    /// before the response's content (like a [`Retry`](AgentEvent::Retry), it belongs to the
    /// attempt in progress). The latest is kept in [`RunOutcome::rate_limits`]; a refusal's
    /// figures are in its [`ApiError::rate_limits`](crate::error::ApiError::rate_limits).
    RateLimits(RateLimits),
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
    /// Usage summed over every model call of the run, failed and retried attempts included,
    /// its sub-agents' runs included.
    pub usage: Usage,
    /// Of [`usage`](Self::usage), what the attempts that failed and were sent again (or
    /// ended the run) used: the cost of retries, reported apart so that it can be seen.
    pub failed_usage: Usage,
    /// What the run cost, every model call of it at the agent's [`Pricing`](crate::pricing::Pricing),
    /// failed attempts and sub-agents' runs included. Calls to a model with no known price
    /// are counted in [`Cost::unpriced_calls`], never as free.
    pub cost: Cost,
    /// Of [`cost`](Self::cost), what the attempts that failed cost.
    pub failed_cost: Cost,
    /// The structured answer, when one was asked for ([`RunOptions::output`](crate::agent::RunOptions::output)) and given.
    pub output: Option<serde_json::Value>,
    /// What each sub-agent run used, at every depth, in the order they finished (each one's
    /// usage is part of [`usage`](Self::usage) already).
    pub sub_agents: Vec<SubAgentUsage>,
    /// The latest rate-limit figures a model response of the run reported, if any (boxed:
    /// they are larger than the rest of the outcome).
    pub rate_limits: Option<Box<RateLimits>>,
    /// What the host typed into the run
    /// ([`AgentHandle::steer`](crate::agent::AgentHandle::steer)) that it ended before
    /// delivering, in order: nothing typed is lost. Empty when every input was delivered
    /// (each had its [`AgentEvent::Steered`]).
    pub undelivered: Vec<UserInput>,
}

/// Why a run stopped.
///
/// Exhaustive on purpose, as [`AgentEvent`] is: each protocol maps a run's end to its own
/// status (an A2A task state, an AG-UI outcome, an AI SDK finish reason, an Open Responses
/// status), so a new way to end must fail to compile until each decides. Adding a variant is
/// a breaking change (a minor version while the crate is 0.x). Code that only tells a
/// completed run from the rest may keep a `_` arm. Match with `..` in variants with fields
/// (`Termination::InvalidOutput { error, .. }`): a new field then breaks none of your matches.
#[derive(Debug, Clone)]
pub enum Termination {
    /// The model answered without calling tools.
    Completed,
    /// The turn limit was reached.
    MaxTurns,
    /// The run was cancelled (by the token, the handle, or by dropping the stream).
    Cancelled,
    /// The host asked the run to stop after its turn
    /// ([`AgentHandle::stop_after_turn`](crate::agent::AgentHandle::stop_after_turn)): the
    /// turn finished (the model's answer, its tools' results), nothing was aborted, and no
    /// other model call was made.
    StoppedAfterTurn,
    /// The token budget ([`RunPolicy::token_budget`](crate::agent::RunPolicy::token_budget))
    /// would not hold the next model call: the run ends before it (or, with
    /// [`RunPolicy::final_answer_at_budget`](crate::agent::RunPolicy::final_answer_at_budget),
    /// after the last call that fits, made for a final answer).
    TokenBudget {
        /// Tokens used by the run so far (when the check was made).
        used: u64,
        /// The most the next call could use: its counted request plus its `max_tokens`.
        next_call: u64,
        /// The budget.
        budget: u64,
    },
    /// The cost budget ([`RunPolicy::cost_budget`](crate::agent::RunPolicy::cost_budget))
    /// would not hold the next model call: the run ends before it (or after the last call
    /// that fits, as with [`TokenBudget`](Termination::TokenBudget)).
    CostBudget {
        /// What the run cost so far (when the check was made).
        spent: Cost,
        /// The most the next call could cost: its counted request at the model's input
        /// price (or its cache-write price, when dearer) plus its `max_tokens` at the
        /// output price.
        next_call: Usd,
        /// The budget.
        budget: Usd,
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
    /// ([`StructuredOutput::max_retries`](crate::agent::StructuredOutput::max_retries)).
    InvalidOutput {
        /// The last answer: the answer tool's input, or the model's text when it answered in
        /// text.
        raw: serde_json::Value,
        /// What was wrong with it.
        error: String,
    },
    /// The run paused to wait for something from outside: a person's verdict on a call, or
    /// a deferred tool's result. The [`PausedRun`] holds everything needed to continue it
    /// with [`Agent::resume`](crate::Agent::resume), in this process or another.
    Paused(Box<PausedRun>),
    /// An error ended the run.
    Error(Error),
}

impl PartialEq for Termination {
    fn eq(&self, other: &Self) -> bool {
        use Termination::*;
        match (self, other) {
            (Completed, Completed) | (MaxTurns, MaxTurns) | (Cancelled, Cancelled) => true,
            (StoppedAfterTurn, StoppedAfterTurn) => true,
            (Refused, Refused) | (MaxTokens, MaxTokens) => true,
            (
                TokenBudget {
                    used: a,
                    next_call: b,
                    budget: c,
                },
                TokenBudget {
                    used: x,
                    next_call: y,
                    budget: z,
                },
            ) => (a, b, c) == (x, y, z),
            (
                CostBudget {
                    spent: a,
                    next_call: b,
                    budget: c,
                },
                CostBudget {
                    spent: x,
                    next_call: y,
                    budget: z,
                },
            ) => (a, b, c) == (x, y, z),
            (ToolFailures { turns: a }, ToolFailures { turns: b }) => a == b,
            (RepeatedToolCall { name: a, times: b }, RepeatedToolCall { name: c, times: d }) => {
                a == c && b == d
            }
            (StoppedByHook { reason: a }, StoppedByHook { reason: b }) => a == b,
            (InvalidOutput { raw: a, error: b }, InvalidOutput { raw: c, error: d }) => {
                a == c && b == d
            }
            (Paused(a), Paused(b)) => a == b,
            (Error(a), Error(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

/// Why a one-shot call ([`Agent::prompt`](crate::Agent::prompt),
/// [`Agent::prompt_typed`](crate::Agent::prompt_typed), [`RunOutcome::into_text`],
/// [`RunOutcome::parse_output`]) gave no answer.
///
/// It holds the crate's [`Error`] when the run failed, or the whole outcome when the run ended
/// without an answer, so that nothing the run produced is lost. (It is not an [`Error`]
/// variant: the error types sit below the agent, which reports them.)
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::{Agent, Termination};
/// use agent_loop::agent::RunError;
/// use serde_json::json;
///
/// let client = ScriptedClient::new([ScriptedResponse::tool_call("c1", "echo", json!({}))]);
/// let mut agent = Agent::builder(client).max_turns(1).build()?;
/// match agent.prompt("Loop forever").await {
///     Err(RunError::Stopped(outcome)) => assert_eq!(outcome.termination, Termination::MaxTurns),
///     other => panic!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// The run failed, or could not start; the error says why.
    #[error(transparent)]
    Failed(#[from] Error),
    /// The run ended without an answer: the turn limit, a budget, a refusal, an invalid
    /// structured answer … The outcome says which, with what the run produced.
    #[error("the run ended without an answer: {}", .0.termination)]
    Stopped(Box<RunOutcome>),
    /// The run completed, but its structured answer is not the type asked for (or none was
    /// asked for).
    #[error("{message}")]
    Output {
        /// What does not fit.
        message: String,
    },
}

impl RunError {
    /// The outcome of a run that ended without an answer.
    pub fn outcome(&self) -> Option<&RunOutcome> {
        match self {
            RunError::Stopped(outcome) => Some(outcome),
            _ => None,
        }
    }
}

impl From<ConfigError> for RunError {
    fn from(error: ConfigError) -> Self {
        RunError::Failed(error.into())
    }
}

impl RunOutcome {
    /// An outcome with this termination, and nothing done or spent: set what a run did
    /// through the fields. For a tool that reports a run of its own under its call
    /// ([`NestedEvents`](crate::agent::NestedEvents)), whose `Finished` event carries one.
    ///
    /// ```
    /// use agent_loop::{RunOutcome, Termination, Usage};
    ///
    /// let mut outcome = RunOutcome::new(Termination::Completed);
    /// outcome.final_text = "Paris".into();
    /// outcome.turns = 1;
    /// outcome.usage = Usage { input_tokens: 12, output_tokens: 3, ..Usage::default() };
    /// assert_eq!(outcome.usage.total_tokens(), 15);
    /// ```
    pub fn new(termination: Termination) -> RunOutcome {
        RunOutcome {
            termination,
            final_text: String::new(),
            turns: 0,
            usage: Usage::default(),
            failed_usage: Usage::default(),
            cost: Cost::default(),
            failed_cost: Cost::default(),
            output: None,
            sub_agents: Vec::new(),
            rate_limits: None,
            undelivered: Vec::new(),
        }
    }

    /// The structured answer as a `T`: the run must have completed with one.
    pub fn parse_output<T: serde::de::DeserializeOwned>(&self) -> Result<T, RunError> {
        match (&self.termination, &self.output) {
            (Termination::Completed, Some(value)) => {
                T::deserialize(value).map_err(|e| RunError::Output {
                    message: format!("the structured answer is not the type asked for: {e}"),
                })
            }
            (Termination::Completed, None) => Err(RunError::Output {
                message: "the run gave no structured answer: none was asked for \
                          (RunOptions::output)"
                    .to_owned(),
            }),
            (Termination::Error(e), _) => Err(RunError::Failed(e.clone())),
            _ => Err(RunError::Stopped(Box::new(self.clone()))),
        }
    }

    /// The final text, if the run completed; else why it did not.
    pub fn into_text(self) -> Result<String, RunError> {
        match self.termination {
            Termination::Completed => Ok(self.final_text),
            Termination::Error(e) => Err(RunError::Failed(e)),
            _ => Err(RunError::Stopped(Box::new(self))),
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
            Termination::StoppedAfterTurn => f.write_str("stopped after the turn, as asked"),
            Termination::TokenBudget {
                used,
                next_call,
                budget,
            } => write!(
                f,
                "token budget reached: {used} tokens used, the next call could use {next_call}, the budget is {budget}"
            ),
            Termination::CostBudget {
                spent,
                next_call,
                budget,
            } => write!(
                f,
                "cost budget reached: {spent} spent, the next call could cost {next_call}, the budget is {budget}"
            ),
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
            Termination::Paused(paused) => {
                write!(f, "paused for {} call(s)", paused.pending().len())
            }
            Termination::Error(e) => write!(f, "error: {e}"),
        }
    }
}

/// An event of a sub-agent's run on its way up: what a tool that runs an agent sends its
/// caller's machine ([`Input::Nested`](crate::agent::machine::Input::Nested)). `path` starts with
/// the step of the call that runs the sub-agent.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct NestedEvent {
    /// Where it comes from.
    pub path: AgentPath,
    /// The event, as the sub-agent's run reported it.
    pub event: AgentEvent,
}

impl NestedEvent {
    /// An event of the run at `path`. An event that is itself nested
    /// ([`AgentEvent::SubAgent`]) is flattened: its path goes below `path`.
    pub fn new(path: AgentPath, event: AgentEvent) -> Self {
        match event {
            AgentEvent::SubAgent { path: inner, event } => NestedEvent {
                path: path.join(&inner),
                event: *event,
            },
            event => NestedEvent { path, event },
        }
    }
}
