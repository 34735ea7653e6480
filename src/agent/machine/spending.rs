//! What the run spent: tokens and money over the run and for the turn in progress, and what
//! the provider last said of its rate limits.

use crate::message::Usage;
use crate::pricing::Cost;
use crate::provider::RateLimits;

use super::spend::Spent;

/// What a run spent, as its attempts end.
#[derive(Debug, Default)]
pub(super) struct Spending {
    /// What the run used and cost, the failed attempts' part apart, its sub-agents' rolled
    /// up. Only grows.
    pub(super) spent: Spent,
    /// What the turn's response cost, for its `TurnEnd`: set when the response is taken,
    /// taken by the `TurnEnd` (zero between turns).
    pub(super) turn_cost: Cost,
    /// The latest rate-limit figures a response reported; taken by the outcome.
    pub(super) rate_limits: Option<Box<RateLimits>>,
}

impl Spending {
    /// A response was taken whole: its usage and cost count, and are the turn's.
    pub(super) fn response(&mut self, usage: Usage, cost: Cost) {
        self.spent += Spent::call(usage, cost);
        self.turn_cost = cost;
    }

    /// An attempt failed (or was cancelled): what it used counts, apart.
    pub(super) fn failed(&mut self, usage: Usage, cost: Cost) {
        self.spent += Spent::failed(usage, cost);
    }

    /// The turn's cost, for its `TurnEnd`, leaving zero.
    pub(super) fn take_turn_cost(&mut self) -> Cost {
        std::mem::take(&mut self.turn_cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_costs_its_turn_and_a_failure_counts_apart() {
        let mut spending = Spending::default();
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        };
        spending.failed(usage, Cost::default());
        assert_eq!(spending.spent.failed_usage.input_tokens, 10);
        spending.response(usage, Cost::default());
        assert_eq!(
            spending.spent.usage.output_tokens, 10,
            "a failed attempt's usage counts in the run's"
        );
        assert_eq!(spending.take_turn_cost(), Cost::default());
    }
}
