//! The run's counters and the limits they are held to: turns, retries of a turn,
//! continuations, pauses, the final call, and the repeat and failure trackers.

use serde::{Deserialize, Serialize};

use crate::tool::{ToolCall, ToolCallResult};

/// What the machine counts over a run, each against a limit of its
/// [`MachineConfig`](crate::agent::machine::MachineConfig) (the machine compares; this part counts).
///
/// A paused run keeps the run's counts (serde: `turn`, `pauses`, `continuations`,
/// `final_call`, `repeats`, `failures`); the turn's own (retries, the overflow compaction, the
/// stop request) start afresh when it resumes, in its open turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Counters {
    /// Turns started so far: the turn in progress (1 for the first), 0 before the first.
    /// Only [`begin_turn`](Self::begin_turn) raises it (and a resume sets it).
    #[serde(rename = "turn")]
    pub(super) turns: u32,
    /// The turn started and not yet ended: when set, it is `turns` (a `TurnStart` was
    /// emitted for it and its `TurnEnd` is still owed). Taken once, by whoever ends it.
    #[serde(skip)]
    pub(super) open_turn: Option<u32>,
    /// Retries of this turn so far: the client's (before content) and the agent's (after).
    /// Back to 0 at each turn and at each fallback.
    #[serde(skip)]
    pub(super) attempt: u32,
    /// Whether this turn compacted after a context overflow already (once per turn; reset
    /// with `attempt`).
    #[serde(skip)]
    pub(super) compacted_for_overflow: bool,
    /// Responses continued after being cut off by `max_tokens`, over the whole run.
    pub(super) continuations: u32,
    /// The next call is the run's last (the turn limit or a budget was reached and a final
    /// answer was asked for); set once, never unset. (Why, when a budget asked for it, is the
    /// machine's `final_cause`.)
    pub(super) final_call: bool,
    /// The host asked to stop once the current turn ends.
    #[serde(skip)]
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

    /// The next call becomes the final one: `true` if it was not already (a second call
    /// changes nothing, so the first cause stands).
    pub(super) fn make_final(&mut self) -> bool {
        !std::mem::replace(&mut self.final_call, true)
    }

    /// What a paused run keeps: the run's counts, not the turn's.
    pub(super) fn paused(&self) -> Counters {
        Counters {
            turns: self.turns,
            continuations: self.continuations,
            final_call: self.final_call,
            pauses: self.pauses,
            repeats: self.repeats.clone(),
            failures: self.failures.clone(),
            ..Counters::default()
        }
    }

    /// The counts of a paused run, resumed: in its open turn.
    pub(super) fn resumed(paused: &Counters) -> Counters {
        Counters {
            open_turn: Some(paused.turns),
            ..paused.paused()
        }
    }

    /// Ends the open turn, if one is open: its number, for the `TurnEnd`.
    pub(super) fn end_turn(&mut self) -> Option<u32> {
        self.open_turn.take()
    }
}

/// Counts how many turns in a row asked for exactly the same calls. A paused run keeps it as
/// `[last signature, count]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "(Option<String>, u32)", into = "(Option<String>, u32)")]
pub(crate) struct RepeatTracker {
    last: Option<String>,
    count: u32,
}

impl From<(Option<String>, u32)> for RepeatTracker {
    fn from((last, count): (Option<String>, u32)) -> Self {
        RepeatTracker { last, count }
    }
}

impl From<RepeatTracker> for (Option<String>, u32) {
    fn from(tracker: RepeatTracker) -> Self {
        (tracker.last, tracker.count)
    }
}

impl RepeatTracker {
    /// Records a turn's calls; returns how many consecutive turns (this one included) made
    /// the same calls with the same inputs. A turn with no calls to count breaks the run
    /// (and counts 0).
    pub(crate) fn observe<'a>(&mut self, calls: impl Iterator<Item = &'a ToolCall>) -> u32 {
        // Canonical JSON (keys sorted): equal inputs compare equal whatever the order of
        // their keys, with or without serde_json's `preserve_order`.
        let mut signature = String::new();
        for call in calls {
            signature.push(if signature.is_empty() { '[' } else { ',' });
            super::digest::write_canonical(
                &mut signature,
                &serde_json::Value::String(call.name.clone()),
            );
            signature.push(':');
            super::digest::write_canonical(&mut signature, &call.input);
        }
        if signature.is_empty() {
            self.last = None;
            self.count = 0;
            return 0;
        }
        signature.push(']');
        if self.last.as_deref() == Some(signature.as_str()) {
            self.count += 1;
        } else {
            self.last = Some(signature);
            self.count = 1;
        }
        self.count
    }
}

/// Counts consecutive turns in which every tool call failed. A paused run keeps it as the
/// count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct FailureTracker {
    turns: u32,
}

impl FailureTracker {
    /// Records a turn's results; returns the number of consecutive all-failed turns.
    pub(crate) fn observe<'a>(&mut self, results: impl Iterator<Item = &'a ToolCallResult>) -> u32 {
        let (mut any, mut all_failed) = (false, true);
        for result in results {
            any = true;
            all_failed &= result.is_error;
        }
        if any && all_failed {
            self.turns += 1;
        } else {
            self.turns = 0;
        }
        self.turns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_keeps_the_runs_counts_and_resumes_in_its_open_turn() {
        let mut counters = Counters::default();
        counters.begin_turn();
        counters.retry();
        counters.continuations = 2;
        counters.pauses = 1;
        counters.stop_after_turn = true;
        let paused = counters.paused();
        let json = serde_json::to_value(&paused).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"turn": 1, "continuations": 2, "final_call": false, "pauses": 1,
                               "repeats": [null, 0], "failures": 0})
        );
        let back: Counters = serde_json::from_value(json).unwrap();
        assert_eq!(back, paused);
        let resumed = Counters::resumed(&back);
        assert_eq!(resumed.open_turn, Some(1));
        assert_eq!(resumed.attempt, 0, "a resumed turn's retries start afresh");
        assert!(!resumed.stop_after_turn);
    }

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
    fn a_call_is_made_final_once() {
        let mut counters = Counters::default();
        assert!(counters.make_final());
        assert!(!counters.make_final(), "already final");
        assert!(counters.final_call);
    }
}
