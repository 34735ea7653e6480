//! The tool-call ids of a conversation: each call goes by an id no earlier call used.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::message::Message;

/// Every tool-call id the conversation has used, so that a model repeating an id (or giving
/// none) gets a fresh one. A paused run keeps the renaming's count (serde: `renamed_ids`);
/// the ids used are the conversation's, read again when it resumes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct CallIds {
    /// The ids of the calls in the conversation's responses taken so far (a response's own
    /// ids join once the response is taken whole; a failed attempt's never do).
    #[serde(skip)]
    pub(super) used: HashSet<String>,
    /// Ids given in place of repeated or empty ones so far: the next one's number. Only
    /// grows, so a fresh id is never given twice in a run (a paused run keeps it).
    #[serde(rename = "renamed_ids")]
    pub(super) renamed: u64,
}

impl CallIds {
    /// The ids of `messages`' calls, in place of any known so far (at the start of a run,
    /// over the conversation it continues).
    pub(super) fn reset(&mut self, messages: &[Message]) {
        self.used = messages
            .iter()
            .flat_map(|m| m.tool_uses().map(|(id, _, _)| id.to_owned()))
            .collect();
    }

    /// The id a tool call of a response goes by: the model's own, unless it is empty or
    /// already taken (earlier in the conversation, or earlier in this response: `response`
    /// holds the response's ids so far, and gets this one), in which case a fresh one
    /// (`call_N` for an empty id, `<id>_N` for a repeated one). Models and compatible
    /// servers do repeat ids (some number the calls of each turn from 0) and some proxies
    /// send empty ones; a repeated id would make the history invalid for every provider, and
    /// two calls of one response with the same id could not be told apart. The renamed id
    /// is the call's id everywhere from then on (events, the tool's call, its result, the
    /// history), so results match their calls.
    pub(super) fn unique(&mut self, response: &mut HashSet<String>, id: String) -> String {
        let used = &self.used;
        let taken = |id: &str| used.contains(id) || response.contains(id);
        let id = if !id.is_empty() && !taken(&id) {
            id
        } else {
            let base = if id.is_empty() { "call" } else { id.as_str() };
            let fresh = loop {
                self.renamed += 1;
                let candidate = format!("{base}_{}", self.renamed);
                if !taken(&candidate) {
                    break candidate;
                }
            };
            tracing::debug!(from = %id, to = %fresh, "renamed a repeated or empty tool-call id");
            fresh
        };
        response.insert(id.clone());
        id
    }

    /// What a paused run keeps: the renaming's count.
    pub(super) fn paused(&self) -> CallIds {
        CallIds {
            renamed: self.renamed,
            ..CallIds::default()
        }
    }

    /// The ids of a paused run's conversation, `messages`, with its renaming's count.
    pub(super) fn resumed(paused: &CallIds, messages: &[Message]) -> CallIds {
        let mut ids = paused.paused();
        ids.reset(messages);
        ids
    }

    /// A response was taken whole: its ids are the conversation's.
    pub(super) fn take(&mut self, response: HashSet<String>) {
        self.used.extend(response);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_and_empty_ids_get_fresh_ones() {
        let mut ids = CallIds::default();
        let call = Message {
            role: crate::message::Role::Assistant,
            content: vec![crate::message::ContentBlock::ToolUse {
                id: "a".into(),
                name: "t".into(),
                input: json!({}),
            }],
        };
        ids.reset(&[call]);
        let mut response = HashSet::new();
        assert_eq!(ids.unique(&mut response, "b".into()), "b");
        assert_eq!(ids.unique(&mut response, "a".into()), "a_1");
        assert_eq!(ids.unique(&mut response, "b".into()), "b_2");
        assert_eq!(ids.unique(&mut response, String::new()), "call_3");
        ids.take(response);
        let mut next = HashSet::new();
        assert_eq!(
            ids.unique(&mut next, "b".into()),
            "b_4",
            "taken in an earlier response"
        );
        assert_eq!(ids.unique(&mut next, "c".into()), "c");
    }

    #[test]
    fn a_pause_keeps_the_renaming_count_and_forgets_the_ids() {
        // The ids come back from the conversation on resume (`reset`); the count must not,
        // or a resumed run could give a fresh id a pre-pause one already had.
        let mut ids = CallIds::default();
        let mut response = HashSet::new();
        assert_eq!(ids.unique(&mut response, String::new()), "call_1");
        assert_eq!(ids.unique(&mut response, String::new()), "call_2");
        ids.take(response);
        let paused = ids.paused();
        assert_eq!(paused.renamed, 2);
        assert!(paused.used.is_empty());
        let stored = serde_json::to_value(&paused).expect("serializable");
        assert_eq!(stored, json!({"renamed_ids": 2}));
    }
}
