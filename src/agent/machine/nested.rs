//! Sub-agents' runs as their parent's machine sees them: [`NestedRuns`] records the nested
//! runs under its running calls, rolls their usage up, and closes the runs a cancelled call
//! leaves open, so that the event grammar holds at every level.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::message::{StopReason, Usage};

use super::budget::Spent;
use crate::agent::events::{AgentEvent, NestedEvent, RunOutcome, Termination, INTERRUPTED_STOP};
use crate::agent::path::{AgentPath, SubAgentUsage};
use crate::pricing::Cost;

/// The most nested runs open at once that a run keeps track of; beyond it, new ones are
/// reported but no longer closed for a cancelled call (memory stays bounded).
const MAX_OPEN: usize = 1024;

/// A nested run seen started and not yet finished.
#[derive(Debug, Default)]
struct OpenRun {
    /// Its turn in progress.
    turn: Option<u32>,
    /// Its turns so far.
    turns: u32,
    /// Its calls announced and not answered: id and name.
    calls: Vec<(String, String)>,
    /// What it spent so far: its turns', its failed attempts' and its finished sub-agents'.
    spent: Spent,
}

/// The nested runs below a run's calls, as their events pass through its machine.
#[derive(Debug, Default)]
pub(crate) struct NestedRuns {
    open: BTreeMap<AgentPath, OpenRun>,
    /// Every nested run finished so far, at any depth, in the order they finished.
    finished: Vec<SubAgentUsage>,
}

/// What a finished depth-1 run adds to its parent's run.
pub(crate) type RollUp = Option<Spent>;

impl NestedRuns {
    /// The nested runs finished so far.
    pub(crate) fn finished(&self) -> &[SubAgentUsage] {
        &self.finished
    }

    /// Restores the record of finished runs (a resumed run).
    pub(crate) fn restore(finished: Vec<SubAgentUsage>) -> Self {
        NestedRuns {
            open: BTreeMap::new(),
            finished,
        }
    }

    /// Notes `event` of the run at `path`; what it rolls up into the parent run, when it
    /// finishes a depth-1 run.
    pub(crate) fn observe(&mut self, path: &AgentPath, event: &AgentEvent) -> RollUp {
        if let AgentEvent::Finished(outcome) = event {
            self.open.remove(path);
            return self.finished_run(path, outcome);
        }
        if !self.open.contains_key(path) && self.open.len() >= MAX_OPEN {
            return None;
        }
        let run = self.open.entry(path.clone()).or_default();
        match event {
            AgentEvent::TurnStart { turn } => {
                run.turn = Some(*turn);
                run.turns += 1;
            }
            AgentEvent::TurnEnd { usage, cost, .. } => {
                run.turn = None;
                run.spent += Spent::call(*usage, *cost);
            }
            AgentEvent::Retry { usage, cost, .. } => run.spent += Spent::failed(*usage, *cost),
            AgentEvent::ToolCall { id, name, .. } => run.calls.push((id.clone(), name.clone())),
            AgentEvent::ToolResult { id, .. } => run.calls.retain(|(open, _)| open != id),
            // Nothing to roll up or to close later: content, progress, bookkeeping. A
            // nested event is never itself nested (`NestedEvent::new` flattens it), and the
            // run's end is taken above.
            AgentEvent::TextDelta { .. }
            | AgentEvent::ThinkingDelta { .. }
            | AgentEvent::ToolCallStart { .. }
            | AgentEvent::ToolInputDelta { .. }
            | AgentEvent::ToolProgress { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::SubAgent { .. }
            | AgentEvent::Fallback { .. }
            | AgentEvent::Handoff { .. }
            | AgentEvent::Steered { .. }
            | AgentEvent::RateLimits(_)
            | AgentEvent::Finished(_) => {}
        }
        None
    }

    /// The call `call_id` of this run is answered: every nested run below it still
    /// open is closed, deepest first, as a cancelled run closes (its open calls answered as
    /// cancelled, its open turn ended as interrupted, `Finished` with
    /// [`Termination::Cancelled`] and what it used so far). Gives the events to report and
    /// what the closed depth-1 runs roll up.
    pub(crate) fn close_under(&mut self, call_id: &str) -> (Vec<NestedEvent>, Spent) {
        let mut paths: Vec<AgentPath> = self
            .open
            .keys()
            .filter(|path| path.first().is_some_and(|step| step.call_id == call_id))
            .cloned()
            .collect();
        // Deepest first, so that a run's sub-agents close before the run does.
        paths.sort_by_key(|path| std::cmp::Reverse(path.depth()));
        let mut events = Vec::new();
        let mut spent = Spent::default();
        for path in paths {
            let Some(run) = self.open.remove(&path) else {
                continue;
            };
            for (id, name) in run.calls {
                events.push(NestedEvent::new(
                    path.clone(),
                    AgentEvent::ToolResult {
                        id,
                        name,
                        content: "cancelled".to_owned(),
                        is_error: true,
                        duration: Duration::ZERO,
                    },
                ));
            }
            if let Some(turn) = run.turn {
                events.push(NestedEvent::new(
                    path.clone(),
                    AgentEvent::TurnEnd {
                        turn,
                        stop_reason: StopReason::Other(INTERRUPTED_STOP.to_owned()),
                        usage: Usage::default(),
                        cost: Cost::default(),
                    },
                ));
            }
            let mut outcome = RunOutcome::new(Termination::Cancelled);
            outcome.turns = run.turns;
            run.spent.write_to(&mut outcome);
            if let Some(rolled) = self.finished_run(&path, &outcome) {
                spent += rolled;
            }
            events.push(NestedEvent::new(path, AgentEvent::Finished(outcome)));
        }
        (events, spent)
    }

    /// Records a finished run; its usage goes to its parent's open run, or, at depth 1, to
    /// the caller.
    fn finished_run(&mut self, path: &AgentPath, outcome: &RunOutcome) -> RollUp {
        self.finished.push(SubAgentUsage {
            path: path.clone(),
            turns: outcome.turns,
            usage: outcome.usage,
            failed_usage: outcome.failed_usage,
            cost: outcome.cost,
            failed_cost: outcome.failed_cost,
        });
        let spent = Spent::of(outcome);
        if path.depth() <= 1 {
            return Some(spent);
        }
        if let Some(parent) = self.open.get_mut(&path.parent()) {
            parent.spent += spent;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::path::PathStep;

    fn path(steps: &[(&str, &str)]) -> AgentPath {
        AgentPath::from(
            steps
                .iter()
                .map(|(a, c)| PathStep::new(*a, *c))
                .collect::<Vec<_>>(),
        )
    }

    fn usage(input: u64) -> Usage {
        Usage {
            input_tokens: input,
            ..Usage::default()
        }
    }

    #[test]
    fn a_finished_child_rolls_up_once_and_grandchildren_only_into_their_parent() {
        let mut runs = NestedRuns::default();
        let child = path(&[("w", "c1")]);
        let grandchild = path(&[("w", "c1"), ("g", "x")]);
        assert_eq!(
            runs.observe(&child, &AgentEvent::TurnStart { turn: 1 }),
            None
        );
        assert_eq!(
            runs.observe(&grandchild, &AgentEvent::TurnStart { turn: 1 }),
            None
        );
        let mut outcome = RunOutcome::new(Termination::Completed);
        outcome.usage = usage(5);
        assert_eq!(
            runs.observe(&grandchild, &AgentEvent::Finished(outcome.clone())),
            None
        );
        outcome.usage = usage(12);
        assert_eq!(
            runs.observe(&child, &AgentEvent::Finished(outcome)),
            Some(Spent::call(usage(12), Cost::default()))
        );
        let paths: Vec<_> = runs.finished().iter().map(|r| r.path.to_string()).collect();
        assert_eq!(paths, ["w#c1/g#x", "w#c1"]);
    }

    #[test]
    fn closing_a_call_closes_its_runs_deepest_first_with_what_they_used() {
        let mut runs = NestedRuns::default();
        let child = path(&[("w", "c1")]);
        let grandchild = path(&[("w", "c1"), ("g", "x")]);
        let other = path(&[("w", "c2")]);
        runs.observe(&child, &AgentEvent::TurnStart { turn: 1 });
        runs.observe(
            &child,
            &AgentEvent::TurnEnd {
                turn: 1,
                stop_reason: StopReason::ToolUse,
                usage: usage(3),
                cost: Cost::default(),
            },
        );
        runs.observe(&child, &AgentEvent::TurnStart { turn: 2 });
        let call = AgentEvent::ToolCall {
            id: "x".into(),
            name: "g".into(),
            input: serde_json::json!({}),
        };
        runs.observe(&child, &call);
        runs.observe(&grandchild, &AgentEvent::TurnStart { turn: 1 });
        runs.observe(&other, &AgentEvent::TurnStart { turn: 1 });

        let (events, rolled) = runs.close_under("c1");
        let shape: Vec<String> = events
            .iter()
            .map(|e| {
                let kind = match &e.event {
                    AgentEvent::ToolResult { id, is_error, .. } => {
                        format!("result {id} {is_error}")
                    }
                    AgentEvent::TurnEnd { turn, .. } => format!("end {turn}"),
                    AgentEvent::Finished(o) => format!("finished {} {}", o.termination, o.turns),
                    other => format!("{other:?}"),
                };
                format!("{} {kind}", e.path)
            })
            .collect();
        assert_eq!(
            shape,
            [
                "w#c1/g#x end 1",
                "w#c1/g#x finished cancelled 1",
                "w#c1 result x true",
                "w#c1 end 2",
                "w#c1 finished cancelled 2",
            ]
        );
        assert_eq!(rolled.usage, usage(3));
        // The other call's run stays open; closing again closes nothing.
        assert!(runs.close_under("c1").0.is_empty());
        assert_eq!(runs.close_under("c2").0.len(), 2);
    }

    #[test]
    fn an_answered_call_is_not_answered_again_when_its_run_closes() {
        let mut runs = NestedRuns::default();
        let child = path(&[("w", "c1")]);
        runs.observe(&child, &AgentEvent::TurnStart { turn: 1 });
        for id in ["x", "y"] {
            let call = AgentEvent::ToolCall {
                id: id.into(),
                name: "g".into(),
                input: serde_json::json!({}),
            };
            runs.observe(&child, &call);
        }
        let result = AgentEvent::ToolResult {
            id: "x".into(),
            name: "g".into(),
            content: "ok".into(),
            is_error: false,
            duration: Duration::ZERO,
        };
        runs.observe(&child, &result);
        let (events, _) = runs.close_under("c1");
        let results: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.event {
                AgentEvent::ToolResult { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(results, ["y"]);
    }

    #[test]
    fn at_most_max_open_runs_are_tracked_and_the_tracked_ones_go_on() {
        let mut runs = NestedRuns::default();
        for i in 0..MAX_OPEN {
            runs.observe(
                &path(&[("w", &format!("c{i}"))]),
                &AgentEvent::TurnStart { turn: 1 },
            );
        }
        // One more is reported but not tracked: closing its call closes nothing.
        let extra = path(&[("w", "extra")]);
        runs.observe(&extra, &AgentEvent::TurnStart { turn: 1 });
        assert!(runs.close_under("extra").0.is_empty());
        // A tracked one still takes its events: its turn ended, closing it ends no turn.
        let first = path(&[("w", "c0")]);
        runs.observe(
            &first,
            &AgentEvent::TurnEnd {
                turn: 1,
                stop_reason: StopReason::EndTurn,
                usage: usage(2),
                cost: Cost::default(),
            },
        );
        let (events, rolled) = runs.close_under("c0");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(rolled.usage, usage(2));
    }

    #[test]
    fn a_cancelled_run_keeps_what_its_failed_attempts_spent() {
        let mut runs = NestedRuns::default();
        let run = path(&[("w", "c1")]);
        runs.observe(&run, &AgentEvent::TurnStart { turn: 1 });
        let cost = Cost::priced(crate::pricing::Usd::from_picodollars(9));
        runs.observe(
            &run,
            &AgentEvent::Retry {
                attempt: 1,
                delay: Duration::ZERO,
                error: "overloaded".into(),
                usage: usage(3),
                cost,
            },
        );
        let (events, rolled) = runs.close_under("c1");
        assert_eq!((rolled.usage, rolled.failed_usage), (usage(3), usage(3)));
        assert_eq!((rolled.cost, rolled.failed_cost), (cost, cost));
        match events.last().map(|e| &e.event) {
            Some(AgentEvent::Finished(outcome)) => {
                assert_eq!(outcome.failed_usage, usage(3));
                assert_eq!(outcome.failed_cost, cost);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_restored_record_keeps_the_runs_finished_before() {
        let mut outcome = RunOutcome::new(Termination::Completed);
        outcome.usage = usage(4);
        let mut runs = NestedRuns::default();
        runs.observe(&path(&[("w", "c1")]), &AgentEvent::Finished(outcome));
        let restored = NestedRuns::restore(runs.finished().to_vec());
        assert_eq!(restored.finished(), runs.finished());
        assert_eq!(restored.finished().len(), 1);
    }

    #[test]
    fn a_nested_event_is_flattened() {
        let inner = AgentEvent::SubAgent {
            path: path(&[("g", "x")]),
            event: Box::new(AgentEvent::TurnStart { turn: 1 }),
        };
        let event = NestedEvent::new(path(&[("w", "c1")]), inner);
        assert_eq!(event.path, path(&[("w", "c1"), ("g", "x")]));
        assert_eq!(event.event, AgentEvent::TurnStart { turn: 1 });
    }
}
