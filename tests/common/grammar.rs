//! The event grammar of a run (`AgentEvent`'s docs), checked on a run's events.
//!
//! ```text
//! run  := Steered* (turn Handoff? Steered*)* Finished
//! turn := TurnStart (Retry | Fallback | RateLimits | TextDelta | ThinkingDelta
//!                    | ToolCallStart | ToolInputDelta | Compacted | call-event)* TurnEnd
//! call := ToolCall ToolProgress* ToolResult      (calls interleave; a call's own never reorder)
//! ```
//!
//! A run that pauses (`Termination::Paused`) ends with `Finished` inside its open turn, its
//! waiting calls without results; the resumed run's events continue that turn, so a paused
//! run's events (without its `Finished`) followed by the resumed run's are a `run`.
//!
//! Sub-agents' events (`SubAgent { path, event }`): the events of each path are a `run` of
//! their own, and every event below a run comes between the `ToolCall` and the `ToolResult`
//! of the call of that run its path goes through.

use std::collections::{BTreeSet, HashMap};

use agent_loop::agent::PathStep;
use agent_loop::{AgentEvent, Termination};

/// Checks `events` against the grammar, at every level of nesting; returns the first
/// violation.
pub fn grammar_violation(events: &[AgentEvent]) -> Option<String> {
    let mut paths: BTreeSet<Vec<PathStep>> = BTreeSet::new();
    paths.insert(Vec::new());
    for event in events {
        if let AgentEvent::SubAgent { path, event } = event {
            if matches!(**event, AgentEvent::SubAgent { .. }) {
                return Some(format!("a SubAgent event inside another at {path}"));
            }
            paths.insert(path.steps().to_vec());
        }
    }
    for path in paths {
        // The run at `path` as it sees itself: its own events, and each event below it as
        // progress of the call it goes through (so it must come inside that call).
        let view: Vec<AgentEvent> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::SubAgent { path: p, event } => {
                    let steps = p.steps();
                    if steps == path.as_slice() {
                        Some((**event).clone())
                    } else if steps.len() > path.len() && steps.starts_with(&path) {
                        Some(AgentEvent::ToolProgress {
                            id: steps[path.len()].call_id.clone(),
                            message: "(a sub-agent's event)".to_owned(),
                        })
                    } else {
                        None
                    }
                }
                e if path.is_empty() => Some(e.clone()),
                _ => None,
            })
            .collect();
        if let Some(violation) = run_violation(&view) {
            let at: Vec<String> = path
                .iter()
                .map(|s| format!("{}#{}", s.agent, s.call_id))
                .collect();
            return Some(format!("at [{}]: {violation}", at.join("/")));
        }
    }
    None
}

/// Checks the events of one run against the grammar; returns the first violation.
fn run_violation(events: &[AgentEvent]) -> Option<String> {
    #[derive(PartialEq, Debug)]
    enum Call {
        Announced,
        Answered,
    }
    let mut calls: HashMap<String, Call> = HashMap::new();
    let mut in_turn: Option<u32> = None;
    let mut turns = 0u32;
    for (i, event) in events.iter().enumerate() {
        let at = format!("event {i} ({event:?})");
        let is_last = i + 1 == events.len();
        match event {
            AgentEvent::Finished(outcome) => {
                if !is_last {
                    return Some(format!("{at}: Finished is not last"));
                }
                let paused = matches!(outcome.termination, Termination::Paused(_));
                if in_turn.is_some() && !paused {
                    return Some(format!("{at}: Finished inside a turn"));
                }
                if paused {
                    // Its waiting calls are answered when it resumes.
                    calls.clear();
                }
                if outcome.turns != turns {
                    return Some(format!(
                        "{at}: {} turns reported, {turns} seen",
                        outcome.turns
                    ));
                }
            }
            _ if is_last => return Some(format!("{at}: the last event is not Finished")),
            AgentEvent::TurnStart { turn } => {
                if in_turn.is_some() {
                    return Some(format!("{at}: TurnStart inside a turn"));
                }
                turns += 1;
                if *turn != turns {
                    return Some(format!("{at}: turn {turn}, expected {turns}"));
                }
                in_turn = Some(*turn);
            }
            AgentEvent::TurnEnd { turn, .. } => {
                if in_turn != Some(*turn) {
                    return Some(format!("{at}: TurnEnd outside its turn"));
                }
                if let Some((id, _)) = calls.iter().find(|(_, c)| **c == Call::Announced) {
                    return Some(format!("{at}: TurnEnd before the result of {id}"));
                }
                in_turn = None;
            }
            AgentEvent::Steered { .. } => {
                // The host's words enter between turns: never inside one (never between a
                // call and its result).
                if in_turn.is_some() {
                    return Some(format!("{at}: Steered inside a turn"));
                }
            }
            AgentEvent::Handoff { .. } => {
                if in_turn.is_some() {
                    return Some(format!("{at}: a Handoff inside a turn"));
                }
                if !matches!(
                    events.get(i.wrapping_sub(1)),
                    Some(AgentEvent::TurnEnd { .. })
                ) {
                    return Some(format!("{at}: a Handoff not right after a TurnEnd"));
                }
            }
            other => {
                if in_turn.is_none() {
                    return Some(format!("{at}: outside a turn"));
                }
                match other {
                    // A re-sent turn may bring a call with an id already answered.
                    AgentEvent::ToolCall { id, .. }
                        if calls.insert(id.clone(), Call::Announced) == Some(Call::Announced) =>
                    {
                        return Some(format!("{at}: {id} announced twice"));
                    }
                    AgentEvent::ToolProgress { id, .. }
                        if calls.get(id) != Some(&Call::Announced) =>
                    {
                        return Some(format!("{at}: progress of {id} outside its call"));
                    }
                    AgentEvent::ToolResult { id, .. }
                        if calls.insert(id.clone(), Call::Answered) != Some(Call::Announced) =>
                    {
                        return Some(format!("{at}: result of {id} without its ToolCall"));
                    }
                    _ => {}
                }
            }
        }
    }
    if !matches!(events.last(), Some(AgentEvent::Finished(_))) {
        return Some("no Finished event".to_owned());
    }
    if let Some((id, _)) = calls.iter().find(|(_, c)| **c == Call::Announced) {
        return Some(format!("{id} has no result"));
    }
    None
}
