//! The tool calls a driver was told to run: when each started, and which are answered.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::tool::ToolCall;

/// The most answered call ids remembered per run to filter late progress; beyond it, late
/// progress of older calls is no longer filtered (memory stays bounded).
const MAX_ANSWERED: usize = 65_536;

/// The run's calls in flight, as far as timing and late inputs go.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    /// Calls whose `ToolResult` was emitted: their late progress and nested events are
    /// dropped. At most [`MAX_ANSWERED`] ids: past it, answers are no longer noted.
    answered: HashSet<String>,
    /// When each call of the turn that the driver was told to run started, by id: a call
    /// answered without its result (cancelled, abandoned) reports how long it ran. Emptied
    /// when the turn ends.
    started: HashMap<String, Instant>,
}

impl InFlight {
    /// Notes that `calls` start at `now`.
    pub(super) fn start(&mut self, calls: &[ToolCall], now: Instant) {
        for call in calls {
            self.started.insert(call.id.clone(), now);
        }
    }

    /// How long the call `id` has run at `now`: from its start (zero for a call that never
    /// started).
    pub(super) fn ran_for(&self, id: &str, now: Instant) -> Duration {
        self.started.get(id).map_or(Duration::ZERO, |&start| {
            now.saturating_duration_since(start)
        })
    }

    /// Notes that the call `id` was answered (its `ToolResult` emitted).
    pub(super) fn answer(&mut self, id: &str) {
        if self.answered.len() < MAX_ANSWERED {
            self.answered.insert(id.to_owned());
        }
    }

    /// Whether the call `id` was answered.
    pub(super) fn is_answered(&self, id: &str) -> bool {
        self.answered.contains(id)
    }

    /// The turn ended: its calls' start times are no longer needed.
    pub(super) fn end_turn(&mut self) {
        self.started.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_runs_from_its_start_until_the_turn_ends() {
        let mut calls = InFlight::default();
        let t0 = Instant::now();
        let call = ToolCall::new("c1", "t", serde_json::json!({}));
        calls.start(std::slice::from_ref(&call), t0);
        let later = t0 + Duration::from_secs(2);
        assert_eq!(calls.ran_for("c1", later), Duration::from_secs(2));
        assert_eq!(calls.ran_for("c2", later), Duration::ZERO);
        // A clock that went backwards gives zero, not a panic.
        assert_eq!(
            calls.ran_for("c1", t0 - Duration::from_secs(1).min(t0.elapsed())),
            Duration::ZERO
        );
        calls.end_turn();
        assert_eq!(calls.ran_for("c1", later), Duration::ZERO);
    }

    #[test]
    fn answered_calls_are_remembered() {
        let mut calls = InFlight::default();
        assert!(!calls.is_answered("c1"));
        calls.answer("c1");
        assert!(calls.is_answered("c1"));
    }
}
