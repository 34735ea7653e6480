//! The run's counters and the limits they are held to: turns, retries of a turn,
//! continuations, pauses, the final call, and the repeat and failure trackers.

use super::turn::{FailureTracker, RepeatTracker};
use crate::agent::events::Termination;

/// What the machine counts over a run, each against a limit of its
/// [`MachineConfig`](crate::machine::MachineConfig) (the machine compares; this part counts).
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Turns started so far: the turn in progress (1 for the first), 0 before the first.
    /// Only [`begin_turn`](Self::begin_turn) raises it (and a resume sets it).
    pub(super) turns: u32,
    /// The turn started and not yet ended: when set, it is `turns` (a `TurnStart` was
    /// emitted for it and its `TurnEnd` is still owed). Taken once, by whoever ends it.
    pub(super) open_turn: Option<u32>,
    /// Retries of this turn so far: the client's (before content) and the agent's (after).
    /// Back to 0 at each turn and at each fallback.
    pub(super) attempt: u32,
    /// Whether this turn compacted after a context overflow already (once per turn; reset
    /// with `attempt`).
    pub(super) compacted_for_overflow: bool,
    /// Responses continued after being cut off by `max_tokens`, over the whole run.
    pub(super) continuations: u32,
    /// The next call is the run's last (the turn limit or a budget was reached and a final
    /// answer was asked for); set once, never unset.
    pub(super) final_call: bool,
    /// Why the final call is made when a budget (not the turn limit) asked for it: how the
    /// run ends after it. Only set with `final_call`.
    pub(super) final_cause: Option<Termination>,
    /// The host asked to stop once the current turn ends.
    pub(super) stop_after_turn: bool,
    /// Pauses of this run so far (a resumed run counts its earlier ones).
    pub(super) pauses: u32,
    /// Consecutive turns that made exactly the same calls.
    pub(super) repeats: RepeatTracker,
    /// Consecutive turns whose every call failed.
    pub(super) failures: FailureTracker,
}

impl Counters {
    /// Starts the next turn: counts it, opens it, and resets the turn's retries. Returns its
    /// number.
    pub(super) fn begin_turn(&mut self) -> u32 {
        self.turns += 1;
        self.reset_attempts();
        self.open_turn = Some(self.turns);
        self.turns
    }

    /// A fresh count of retries (a new turn, or a new model after a fallback).
    pub(super) fn reset_attempts(&mut self) {
        self.attempt = 0;
        self.compacted_for_overflow = false;
    }

    /// Counts one more retry of the turn; returns its number.
    pub(super) fn retry(&mut self) -> u32 {
        self.attempt += 1;
        self.attempt
    }

    /// The next call becomes the final one, for `cause` (`None`: the turn limit). A second
    /// call changes nothing: the first cause stands.
    pub(super) fn make_final(&mut self, cause: Option<Termination>) {
        if !self.final_call {
            self.final_call = true;
            self.final_cause = cause;
        }
    }

    /// How the run ends after its final call: the budget that asked for it, else the turn
    /// limit.
    pub(super) fn final_termination(&self) -> Termination {
        self.final_cause.clone().unwrap_or(Termination::MaxTurns)
    }

    /// Ends the open turn, if one is open: its number, for the `TurnEnd`.
    pub(super) fn end_turn(&mut self) -> Option<u32> {
        self.open_turn.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_opens_once_and_resets_its_retries() {
        let mut counters = Counters::default();
        assert_eq!(counters.turns, 0);
        assert_eq!(counters.retry(), 1);
        counters.compacted_for_overflow = true;
        assert_eq!(counters.begin_turn(), 1);
        assert_eq!(counters.open_turn, Some(1));
        assert_eq!(counters.attempt, 0);
        assert!(!counters.compacted_for_overflow);
        assert_eq!(counters.end_turn(), Some(1));
        assert_eq!(counters.end_turn(), None, "a turn ends once");
        assert_eq!(counters.begin_turn(), 2);
    }

    #[test]
    fn the_first_cause_of_a_final_call_stands() {
        let mut counters = Counters::default();
        assert_eq!(counters.final_termination(), Termination::MaxTurns);
        let budget = Termination::TokenBudget {
            used: 90,
            next_call: 20,
            budget: 100,
        };
        counters.make_final(Some(budget.clone()));
        counters.make_final(None);
        assert!(counters.final_call);
        assert_eq!(counters.final_termination(), budget);
    }
}
