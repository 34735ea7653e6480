//! A response's calls on their way to results: the batch the machine approves, runs,
//! pauses and completes.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::message::Message;
use crate::tool::{Question, ToolCall, ToolCallResult};
use crate::wire::ModelResponse;

use super::pause::PauseState;

use crate::agent::events::Termination;
use crate::agent::hooks::ToolDecision;

/// A response's calls on their way to results.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) response: ModelResponse,
    pub(super) calls: Vec<ToolCall>,
    pub(super) results: Vec<Option<ToolCallResult>>,
    /// Whether each call's `ToolCall` was emitted.
    pub(super) announced: Vec<bool>,
    /// Calls waiting for the hook's verdict (positions in `calls`).
    pub(super) approving: Vec<usize>,
    /// Calls allowed to run and not yet started (positions), held while early read-only
    /// calls still run and these have side effects.
    pub(super) held: Vec<usize>,
    /// Whether any held call has side effects.
    pub(super) held_side_effects: bool,
    /// Calls started early that are still running (positions).
    pub(super) early_pending: HashSet<usize>,
    pub(super) stop: Option<Termination>,
    /// Each call id's position in `calls` (ids are unique: the machine renames repeated
    /// ones as they arrive), so a result finds its call without a scan: a response may hold
    /// very many calls.
    pub(super) positions: HashMap<String, usize>,
    /// Calls without a result yet.
    pub(super) unanswered: usize,
    /// The verdicts on the calls asked about, when some wait for a person (`None`): the
    /// batch pauses once its early calls are done, and nothing else of it runs.
    pub(super) paused_verdicts: Option<Vec<(usize, Option<ToolDecision>)>>,
    /// Allowed calls of deferred tools (positions): their results come from outside.
    pub(super) outside: Vec<usize>,
    /// The handoff one of the calls asked for (its index in the config's handoffs): it
    /// applies once the batch is complete.
    pub(super) handoff: Option<usize>,
    /// What the tools of calls waiting among `outside` asked, by position.
    pub(super) asked: BTreeMap<usize, Question>,
}

impl Batch {
    pub(super) fn new(response: ModelResponse, calls: Vec<ToolCall>) -> Batch {
        let n = calls.len();
        let mut positions = HashMap::with_capacity(n);
        for (i, call) in calls.iter().enumerate() {
            positions.entry(call.id.clone()).or_insert(i);
        }
        Batch {
            results: vec![None; n],
            announced: vec![false; n],
            approving: Vec::new(),
            held: Vec::new(),
            held_side_effects: false,
            early_pending: HashSet::new(),
            stop: None,
            positions,
            unanswered: n,
            paused_verdicts: None,
            outside: Vec::new(),
            handoff: None,
            asked: BTreeMap::new(),
            calls,
            response,
        }
    }

    /// The paused batch of `state`, over the response `message` (the conversation's last)
    /// and its `calls` (checked against it: [`PausedRun::check`](super::pause::PausedRun::check)).
    pub(super) fn resumed(message: Message, calls: Vec<ToolCall>, state: &PauseState) -> Batch {
        let response = ModelResponse {
            message,
            stop_reason: state.stop_reason.clone(),
            stop_sequence: None,
            usage: state.response_usage,
            id: String::new(),
            model: String::new(),
            invalid_tool_calls: Vec::new(),
            context_edits: Vec::new(),
        };
        let mut batch = Batch::new(response, calls);
        batch.handoff = state.handoff;
        batch.results = state.results.clone();
        batch.announced = state.announced.clone();
        batch.unanswered = batch.results.iter().filter(|r| r.is_none()).count();
        batch
    }

    /// The position of the call with this id.
    pub(super) fn position(&self, id: &str) -> Option<usize> {
        self.positions.get(id).copied()
    }

    /// Records call `i`'s result (the first one given; callers check it has none).
    pub(super) fn set_result(&mut self, i: usize, result: ToolCallResult) {
        if self.results[i].is_none() {
            self.unanswered -= 1;
        }
        self.results[i] = Some(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{StopReason, Usage};
    use std::time::Duration;

    #[test]
    fn a_result_finds_its_call_and_counts_once() {
        let response = ModelResponse {
            message: Message::assistant(""),
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage::default(),
            id: String::new(),
            model: String::new(),
            invalid_tool_calls: Vec::new(),
            context_edits: Vec::new(),
        };
        let calls = vec![
            ToolCall::new("a", "t", serde_json::json!({})),
            ToolCall::new("b", "t", serde_json::json!({})),
        ];
        let mut batch = Batch::new(response, calls);
        assert_eq!(batch.unanswered, 2);
        assert_eq!(batch.position("b"), Some(1));
        assert_eq!(batch.position("c"), None);
        let result = ToolCallResult::new("b", "t", "ok", false, Duration::ZERO);
        batch.set_result(1, result.clone());
        batch.set_result(1, result);
        assert_eq!(batch.unanswered, 1, "a second result of a call counts once");
    }
}
