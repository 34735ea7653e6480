//! [`RunPolicy`]: the loop's limits and rules, in one type.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{ConfigError, Error};
use crate::pricing::{Pricing, Usd};
use crate::provider::transport::RetryPolicy;

/// How many levels of sub-agents may run below an agent's runs by default
/// ([`RunPolicy::max_depth`]).
pub const DEFAULT_MAX_DEPTH: u32 = 4;

/// The loop's policy: when a run stops (turns, budgets, failing or repeated calls), what it
/// does at a limit, how it retries a failed model call, which calls wait for approval, when
/// read-only tools start, and the depth of sub-agents below it. Model knobs live in
/// [`RequestSettings`](crate::RequestSettings); this type holds everything the loop decides.
///
/// Give it to [`AgentBuilder::policy`](crate::AgentBuilder::policy) (or to a
/// [`MachineConfig`](super::MachineConfig) of a driver of your own). Each setter documents its
/// default; [`validate`](Self::validate) (which `build` calls) refuses a value no run could
/// keep.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agent_loop::agent::{RunError, RunPolicy};
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::{Agent, RequestSettings, Termination};
///
/// let client = ScriptedClient::new([ScriptedResponse::text("Hi")]);
/// // max_tokens alone (1,000) is more than the token budget: no call is made.
/// let mut agent = Agent::builder(client)
///     .settings(RequestSettings::new().max_tokens(1_000))
///     .policy(RunPolicy::new().max_turns(10).token_budget(500))
///     .build()?;
/// match agent.prompt("Hello").await {
///     Err(RunError::Stopped(outcome)) => {
///         assert!(matches!(outcome.termination, Termination::TokenBudget { used: 0, budget: 500, .. }));
///         assert_eq!(outcome.turns, 0);
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct RunPolicy {
    /// The most model turns of a run (default 50, at least 1).
    pub max_turns: u32,
    /// At the turn limit, one more call with tools off for a final answer (default off).
    pub final_answer_at_max_turns: bool,
    /// Consecutive turns whose every tool call failed before the run stops (default 3, at
    /// least 1).
    pub max_tool_failure_turns: u32,
    /// Consecutive turns with exactly the same calls before the run stops (default 3, at
    /// least 2). The last turn's calls are answered with an error, not run, except a
    /// read-only call started early; see [`max_repeated_calls`](Self::max_repeated_calls).
    pub max_repeated_calls: u32,
    /// The most tokens (input and output, every model call) of a run, when capped.
    pub token_budget: Option<u64>,
    /// The most a run may cost, when capped, at [`pricing`](Self::pricing).
    pub cost_budget: Option<Usd>,
    /// When only one more call fits the budgets, make it with tools off, for a final answer
    /// (default off).
    pub final_answer_at_budget: bool,
    /// The prices calls are costed at (default: [`Pricing::snapshot`]).
    pub pricing: Arc<Pricing>,
    /// How often a text answer cut off by `max_tokens` is continued (default 0).
    pub max_continuations: u32,
    /// When and how often a failed model call is retried; `None` (the default) takes the
    /// client's own policy ([`LlmClient::retry_policy`](crate::LlmClient::retry_policy)),
    /// else [`RetryPolicy::default`].
    pub retry: Option<RetryPolicy>,
    /// Tools whose calls wait for a person's approval (default none).
    pub require_approval: Vec<String>,
    /// Read-only calls start while the model still streams (default on).
    pub early_read_only_tools: bool,
    /// Tool results in events are cut to this many bytes (default 4096); the history keeps
    /// them whole.
    pub event_content_limit: usize,
    /// How many levels of sub-agents may run below this agent's runs (default
    /// [`DEFAULT_MAX_DEPTH`]).
    pub max_depth: u32,
    /// How long a run's lease on its session lasts past its start and each saved turn
    /// (default two minutes).
    pub session_lease: Duration,
}

impl Default for RunPolicy {
    fn default() -> Self {
        RunPolicy {
            max_turns: 50,
            final_answer_at_max_turns: false,
            max_tool_failure_turns: 3,
            max_repeated_calls: 3,
            token_budget: None,
            cost_budget: None,
            final_answer_at_budget: false,
            pricing: Pricing::shared_snapshot(),
            max_continuations: 0,
            retry: None,
            require_approval: Vec::new(),
            early_read_only_tools: true,
            event_content_limit: 4096,
            max_depth: DEFAULT_MAX_DEPTH,
            session_lease: Duration::from_secs(120),
        }
    }
}

impl RunPolicy {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Most model turns per run (default 50; 0 counts as 1).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = turns.max(1);
        self
    }

    /// At the turn limit, make one last model call with tools disabled for a final answer
    /// instead of stopping bare (default off).
    pub fn final_answer_at_max_turns(mut self, enabled: bool) -> Self {
        self.final_answer_at_max_turns = enabled;
        self
    }

    /// Stop after this many consecutive turns in which every tool call failed (default 3;
    /// 0 counts as 1).
    pub fn max_tool_failure_turns(mut self, turns: u32) -> Self {
        self.max_tool_failure_turns = turns.max(1);
        self
    }

    /// Stop when the model asks for the same calls with the same input this many times in a
    /// row (default 3; less than 2 counts as 2), with
    /// [`Termination::RepeatedToolCall`](crate::Termination::RepeatedToolCall). The last
    /// response's calls are answered with an error that says why, and are not run; except a
    /// read-only call that started early, while the model still streamed
    /// ([`early_read_only_tools`](Self::early_read_only_tools)), before the response showed
    /// the repeat: it ran, and keeps its result if it finished by the response's end (one
    /// still running then is cancelled and answered with the error). The history keeps
    /// every call answered once either way.
    pub fn max_repeated_calls(mut self, times: u32) -> Self {
        self.max_repeated_calls = times.max(2);
        self
    }

    /// Caps a run's tokens (input and output, every model call, failed attempts and
    /// sub-agents' runs included). Checked **before** each model call against the most it
    /// could use (its counted request plus `max_tokens`): a call that could cross the budget
    /// is not made, and the run ends with
    /// [`Termination::TokenBudget`](crate::Termination::TokenBudget) and the figures.
    pub fn token_budget(mut self, tokens: u64) -> Self {
        self.token_budget = Some(tokens);
        self
    }

    /// Caps what a run may cost, in US dollars, at the policy's [`pricing`](Self::pricing)
    /// (failed attempts and sub-agents' runs included). Checked **before** each model call
    /// against the most it could cost (its counted request at the input price, or the
    /// cache-write price when dearer, plus `max_tokens` at the output price): a call that
    /// could cross the budget is not made, and the run ends with
    /// [`Termination::CostBudget`](crate::Termination::CostBudget) and the figures. A model
    /// with no known price cannot be kept within a budget: `build` refuses it, and a run that
    /// would call one (after a handoff) ends with an error saying so.
    ///
    /// A call is priced at the model its response names when that model has a price (a
    /// dated snapshot of the one asked for), else at the price of the model the request
    /// asked for, so a budget never stops counting. Names are matched leniently: a provider
    /// prefix (`anthropic/…`), Bedrock's inference-profile prefixes and version suffix
    /// (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`), dated snapshots, and dots in version
    /// numbers (`claude-sonnet-4.5`) all find the model's price.
    pub fn cost_budget(mut self, dollars: f64) -> Self {
        self.cost_budget = Some(Usd::from_dollars(dollars));
        self
    }

    /// When only one more model call fits the token or cost budget, make it with tools off,
    /// for a final answer; the run then ends with the budget's termination. Off by default:
    /// the run ends before the first call that does not fit.
    pub fn final_answer_at_budget(mut self, enabled: bool) -> Self {
        self.final_answer_at_budget = enabled;
        self
    }

    /// The prices model calls are costed at (default [`Pricing::snapshot`]): costs in
    /// [`AgentEvent::TurnEnd`](crate::AgentEvent::TurnEnd) and
    /// [`RunOutcome::cost`](crate::RunOutcome::cost), and the
    /// [`cost_budget`](Self::cost_budget) check.
    pub fn pricing(mut self, pricing: Pricing) -> Self {
        self.pricing = Arc::new(pricing);
        self
    }

    /// How many times a text answer cut off by `max_tokens` is continued (default 0).
    pub fn max_continuations(mut self, times: u32) -> Self {
        self.max_continuations = times;
        self
    }

    /// The policy for every retry of a model call in a run: a failure before any content (a
    /// 529, a reset connection) and a response that broke after it started (re-sent from the
    /// start of the turn while no tool of it has run). The run owns these retries: its
    /// requests ask the client for none, so one policy and one count govern them, and each
    /// is an [`AgentEvent::Retry`](crate::AgentEvent::Retry). Default: the client's own
    /// ([`LlmClient::retry_policy`](crate::LlmClient::retry_policy)), else
    /// [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Calls of the tool `name` wait for a person's approval: the run pauses before they
    /// run, ending with [`Termination::Paused`](crate::Termination::Paused), and
    /// [`Agent::resume`](crate::Agent::resume) continues it with the verdict, in this process
    /// or another. The `before_tool` hook is still asked first: its denial denies at once.
    /// Call it once per tool.
    pub fn require_approval(mut self, name: impl Into<String>) -> Self {
        self.require_approval.push(name.into());
        self
    }

    /// Whether read-only tools start as soon as their arguments are complete, while the
    /// model is still streaming (default on).
    pub fn early_read_only_tools(mut self, enabled: bool) -> Self {
        self.early_read_only_tools = enabled;
        self
    }

    /// Tool results in [`AgentEvent::ToolResult`](crate::AgentEvent::ToolResult) are cut to
    /// this many bytes (default 4096); the history keeps the full result.
    pub fn event_content_limit(mut self, bytes: usize) -> Self {
        self.event_content_limit = bytes;
        self
    }

    /// How many levels of sub-agents ([`Agent::as_tool`](crate::Agent::as_tool)) may run
    /// below this agent's runs (default [`DEFAULT_MAX_DEPTH`]); a call past it is answered
    /// with an error saying so. A sub-agent keeps the lowest limit of the agents above it.
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = depth;
        self
    }

    /// How long a run's lease on its [session](crate::AgentBuilder::session) lasts past its
    /// start and each saved turn (default two minutes): how long a session stays held after
    /// its process died. Make it longer than a turn (a model call and its tools) takes; a
    /// lease that runs out under a turn lets another agent in, and this run then fails at its
    /// next save. A lease is a wall-clock time: agents on several machines need their clocks
    /// in step (NTP) to well within this length.
    pub fn session_lease(mut self, lease: Duration) -> Self {
        self.session_lease = lease;
        self
    }

    /// Refuses what no run could keep: no turn, a failure or repeat limit below its
    /// minimum, a zero session lease.
    ///
    /// ```
    /// use agent_loop::agent::RunPolicy;
    ///
    /// assert!(RunPolicy::new().validate().is_ok());
    /// let mut policy = RunPolicy::new();
    /// policy.max_turns = 0;
    /// assert!(policy.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |setting, message: &str| Err(ConfigError::setting(setting, message).into());
        if self.max_turns == 0 {
            return bad("max_turns", "a run needs at least one turn");
        }
        if self.max_tool_failure_turns == 0 {
            return bad("max_tool_failure_turns", "must be at least 1");
        }
        if self.max_repeated_calls < 2 {
            return bad(
                "max_repeated_calls",
                "must be at least 2 (one call is no repeat)",
            );
        }
        if self.session_lease.is_zero() {
            return bad("session_lease", "a lease must last longer than zero");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_keep_the_minimums_and_validate_refuses_fields_below_them() {
        let policy = RunPolicy::new()
            .max_turns(0)
            .max_tool_failure_turns(0)
            .max_repeated_calls(1);
        assert_eq!(
            (
                policy.max_turns,
                policy.max_tool_failure_turns,
                policy.max_repeated_calls
            ),
            (1, 1, 2)
        );
        policy.validate().unwrap();
        let edits: [fn(&mut RunPolicy); 4] = [
            |p| p.max_turns = 0,
            |p| p.max_tool_failure_turns = 0,
            |p| p.max_repeated_calls = 1,
            |p| p.session_lease = Duration::ZERO,
        ];
        for edit in edits {
            let mut policy = RunPolicy::new();
            edit(&mut policy);
            assert!(matches!(policy.validate(), Err(Error::Config(_))));
        }
        let mut edge = RunPolicy::new();
        edge.max_repeated_calls = 2;
        edge.session_lease = Duration::from_millis(1);
        edge.validate().unwrap();
    }

    #[test]
    fn each_setter_sets_its_field() {
        let retry = RetryPolicy::default().max_retries(7);
        let p = RunPolicy::new()
            .max_turns(9)
            .final_answer_at_max_turns(true)
            .max_tool_failure_turns(4)
            .max_repeated_calls(5)
            .token_budget(1_000)
            .cost_budget(0.5)
            .final_answer_at_budget(true)
            .pricing(Pricing::empty())
            .max_continuations(2)
            .retry(retry.clone())
            .require_approval("a")
            .require_approval("b")
            .early_read_only_tools(false)
            .event_content_limit(10)
            .max_depth(1)
            .session_lease(Duration::from_secs(5));
        assert_eq!(
            (p.max_turns, p.max_tool_failure_turns, p.max_repeated_calls),
            (9, 4, 5)
        );
        assert!(p.final_answer_at_max_turns && p.final_answer_at_budget);
        assert_eq!(p.token_budget, Some(1_000));
        assert_eq!(p.cost_budget, Some(Usd::from_dollars(0.5)));
        assert!(p.pricing.price("claude-sonnet-4-5").is_none());
        assert_eq!(p.max_continuations, 2);
        assert_eq!(p.retry, Some(retry));
        assert_eq!(p.require_approval, ["a", "b"]);
        assert!(!p.early_read_only_tools);
        assert_eq!((p.event_content_limit, p.max_depth), (10, 1));
        assert_eq!(p.session_lease, Duration::from_secs(5));
        p.validate().unwrap();
    }

    #[test]
    fn defaults() {
        let p = RunPolicy::default();
        assert_eq!(
            (p.max_turns, p.max_tool_failure_turns, p.max_repeated_calls),
            (50, 3, 3)
        );
        assert_eq!(p.max_depth, DEFAULT_MAX_DEPTH);
        assert_eq!(p.session_lease, Duration::from_secs(120));
        assert!(p.early_read_only_tools && p.require_approval.is_empty());
    }
}
