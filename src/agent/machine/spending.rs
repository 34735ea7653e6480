//! What the run spent: tokens and money over the run and for the turn in progress, and what
//! the provider last said of its rate limits.

use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

use crate::error::RateLimits;
use crate::message::Usage;
use crate::pricing::Cost;

/// Usage and cost, with the part of each that failed attempts spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Spent {
    pub(crate) usage: Usage,
    pub(crate) failed_usage: Usage,
    /// The cost, and the failed attempts' part (absent from paused runs made before costs
    /// were kept: zero).
    #[serde(default)]
    pub(crate) cost: Cost,
    #[serde(default)]
    pub(crate) failed_cost: Cost,
}

impl Spent {
    /// A model call that gave its response.
    pub(crate) fn call(usage: Usage, cost: Cost) -> Spent {
        Spent {
            usage,
            cost,
            ..Spent::default()
        }
    }

    /// A model call that failed (and was sent again, or ended the run).
    pub(crate) fn failed(usage: Usage, cost: Cost) -> Spent {
        Spent {
            usage,
            failed_usage: usage,
            cost,
            failed_cost: cost,
        }
    }
}

impl AddAssign for Spent {
    fn add_assign(&mut self, other: Spent) {
        self.usage += other.usage;
        self.failed_usage += other.failed_usage;
        self.cost += other.cost;
        self.failed_cost += other.failed_cost;
    }
}

/// What a run spent, as its attempts end. A paused run keeps what it spent (serde: `usage`,
/// `failed_usage`, `cost`, `failed_cost`) and its open turn's cost (`response_cost`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Spending {
    /// What the run used and cost, the failed attempts' part apart, its sub-agents' rolled
    /// up. Only grows.
    #[serde(flatten)]
    pub(super) spent: Spent,
    /// What the turn's response cost, for its `TurnEnd`: set when the response is taken,
    /// taken by the `TurnEnd` (zero between turns). Absent from paused runs made before
    /// costs were kept: zero.
    #[serde(rename = "response_cost", default)]
    pub(super) turn_cost: Cost,
    /// The latest rate-limit figures a response reported; taken by the outcome. Not kept by
    /// a pause.
    #[serde(skip)]
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

    /// What a paused run keeps: all but the rate limits.
    pub(super) fn paused(&self) -> Spending {
        Spending {
            spent: self.spent,
            turn_cost: self.turn_cost,
            rate_limits: None,
        }
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
