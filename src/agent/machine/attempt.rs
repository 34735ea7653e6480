//! One attempt at a model response, and the read-only calls it started early.

use std::collections::{HashMap, HashSet};

use crate::message::Usage;
use crate::tool::{ToolCall, ToolCallResult};
use crate::wire::StreamAssembler;

/// One attempt at a model response.
#[derive(Debug)]
pub(super) struct Attempt {
    pub(super) assembler: StreamAssembler,
    pub(super) content_seen: bool,
    pub(super) usage: Usage,
    /// The model the response says answers (empty until it says).
    pub(super) model: String,
    /// Block index → tool call id, for `ToolInputDelta` events.
    pub(super) ids: HashMap<usize, String>,
    pub(super) early: Early,
    /// Calls waiting for the hook's verdict before starting early.
    pub(super) approving: Vec<ToolCall>,
    /// The tool-call ids this response has used so far (after renaming).
    pub(super) call_ids: HashSet<String>,
}

impl Attempt {
    /// A fresh attempt, its response read with `assembler`.
    pub(super) fn new(assembler: StreamAssembler) -> Attempt {
        Attempt {
            assembler,
            content_seen: false,
            usage: Usage::default(),
            model: String::new(),
            ids: HashMap::new(),
            early: Early::default(),
            approving: Vec::new(),
            call_ids: HashSet::new(),
        }
    }
}

/// Read-only calls started while the model was still streaming.
#[derive(Debug, Default)]
pub(super) struct Early {
    /// Id and name of each call started (its `ToolCall` emitted).
    pub(super) started: Vec<(String, String)>,
    /// The ids in `started`.
    pub(super) started_ids: HashSet<String>,
    /// Their results so far, one per call (a second result of a call is ignored).
    pub(super) done: Vec<ToolCallResult>,
    /// The ids in `done`.
    pub(super) done_ids: HashSet<String>,
    /// Whether the response asked for a call that is not read-only: calls after it wait for
    /// the end of the message.
    pub(super) blocked: bool,
}

impl Early {
    /// Notes that `call` started.
    pub(super) fn start(&mut self, call: &ToolCall) {
        self.started_ids.insert(call.id.clone());
        self.started.push((call.id.clone(), call.name.clone()));
    }

    /// Takes the first result of a started call; gives back any other.
    // The result is handed back as it came (moved, once per stray result), not boxed anew.
    #[allow(clippy::result_large_err)]
    pub(super) fn finish(&mut self, result: ToolCallResult) -> Result<(), ToolCallResult> {
        if !self.started_ids.contains(&result.id) || !self.done_ids.insert(result.id.clone()) {
            return Err(result);
        }
        self.done.push(result);
        Ok(())
    }

    pub(super) fn running(&self) -> usize {
        self.started.len().saturating_sub(self.done.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_early_call_takes_its_first_result_only() {
        let mut early = Early::default();
        early.start(&ToolCall::new("c1", "read", serde_json::json!({})));
        assert_eq!(early.running(), 1);
        let result = |id: &str| ToolCallResult::new(id, "read", "ok", false, Duration::ZERO);
        assert!(early.finish(result("c2")).is_err(), "never started");
        assert!(early.finish(result("c1")).is_ok());
        assert!(early.finish(result("c1")).is_err(), "a second result");
        assert_eq!(early.running(), 0);
    }
}
