//! Replays what a server did to the prompt on the local history, so the history, its token
//! count, a saved session and a fallback model of another format see what the server showed
//! the model: the context edits it applied (Anthropic context editing), and the turns a server
//! compaction item stands for (OpenAI Responses and Anthropic compaction), dropped.

use std::collections::{HashMap, HashSet};

use crate::message::{ContentBlock, Message, Role};
use crate::provider::context_editing::{
    AppliedEdit, ContextEditing, CLEARED_TOOL_RESULT, CLEAR_THINKING, CLEAR_TOOL_USES,
    SERVER_COMPACTED,
};

use super::ContextManager;

/// What starts the copy of a server compaction's readable summary on the first message.
const SERVER_SUMMARY: &str = "Summary of the earlier turns, by the server: ";

/// Whether `block` is a server compaction item: OpenAI's
/// [`ContentBlock::Compaction`], or Anthropic's `compaction` block (kept as
/// [`ContentBlock::Other`]).
pub(crate) fn is_server_compaction(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Compaction { .. } => true,
        ContentBlock::Other(value) => {
            value.get("type").and_then(serde_json::Value::as_str) == Some("compaction")
        }
        _ => false,
    }
}

impl ContextManager {
    /// Drops the turns a server compaction item stands for: once a response brings one
    /// (OpenAI Responses' [`ContentBlock::Compaction`], Anthropic's `compaction` block, see
    /// [`ServerCompaction`](crate::provider::context_editing::ServerCompaction)), the server
    /// reads the prompt from the latest item on and ignores what came before, so the
    /// messages between the first one and the one holding the latest item go. The first
    /// message stays, followed by [`SERVER_COMPACTED`], the item's summary when it is readable
    /// (Anthropic's block; OpenAI's item is encrypted), and the text of the latest user input
    /// among the dropped messages (what an earlier drop copied there is replaced), so the
    /// history stays valid and a fallback model of another format, which cannot read the
    /// item, still has the task and what the server summarized. Returns how many messages were dropped (none when the
    /// latest item is already in the first two messages).
    ///
    /// The token count then is an estimate (the last usage stood for the prompt before the
    /// drop) until the next response's usage. The agent calls this after every response that
    /// holds an item, and does not anchor the count on that response's usage (it counts a
    /// prompt the server rewrote, and on Anthropic the compaction pass too); without it the local history would keep every compacted turn, grow past
    /// the input budget, and be counted against the server's figures for the compacted one
    /// (BENCHMARKS.md §8).
    ///
    /// ```
    /// use agent_loop::provider::context_editing::SERVER_COMPACTED;
    /// use agent_loop::{ContentBlock, ContextManager, Message, Role};
    ///
    /// let mut context = ContextManager::default();
    /// context.push_user_text("fix the parser");
    /// context.push(Message::assistant("Looking."));
    /// context.push_user_text("and the lexer");
    /// context.push(Message {
    ///     role: Role::Assistant,
    ///     content: vec![
    ///         ContentBlock::Compaction { id: None, encrypted_content: "gAAA…".into() },
    ///         ContentBlock::text("On it."),
    ///     ],
    /// });
    /// assert_eq!(context.apply_server_compaction(), 2);
    /// let first = &context.messages()[0];
    /// assert_eq!(
    ///     first.content,
    ///     [
    ///         ContentBlock::text("fix the parser"),
    ///         ContentBlock::text(SERVER_COMPACTED),
    ///         ContentBlock::text("and the lexer"),
    ///     ]
    /// );
    /// assert_eq!(context.len(), 2);
    /// assert!(context.validate().is_ok());
    /// assert_eq!(context.apply_server_compaction(), 0);
    /// ```
    pub fn apply_server_compaction(&mut self) -> usize {
        let messages = self.messages();
        let Some(at) = messages
            .iter()
            .rposition(|m| m.role == Role::Assistant && m.content.iter().any(is_server_compaction))
        else {
            return 0;
        };
        if at < 2 {
            return 0;
        }
        // The first message's own blocks; what an earlier drop copied after the note.
        let first: Vec<ContentBlock> = messages[0]
            .content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::ToolResult { .. }))
            .cloned()
            .collect();
        let note = first
            .iter()
            .position(|b| matches!(b, ContentBlock::Text { text } if text == SERVER_COMPACTED));
        let (own, copied) = match note {
            Some(p) => (first[..p].to_vec(), first[p + 1..].to_vec()),
            None => (first, Vec::new()),
        };
        // The latest user input among the dropped messages, else the one copied before.
        let input = messages[1..at]
            .iter()
            .rev()
            .filter(|m| m.role == Role::User)
            .find_map(|m| {
                let texts: Vec<ContentBlock> = m
                    .content
                    .iter()
                    .filter(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
                    .cloned()
                    .collect();
                (!texts.is_empty()).then_some(texts)
            })
            .unwrap_or_else(|| {
                copied
                    .into_iter()
                    .filter(|b| {
                        !matches!(b, ContentBlock::Text { text } if text.starts_with(SERVER_SUMMARY))
                    })
                    .collect()
            });
        // A readable summary (Anthropic's block has one) goes beside the note, for a
        // fallback model that cannot read the item; the server ignores what precedes it.
        let summary = messages[at]
            .content
            .iter()
            .rev()
            .find(|b| is_server_compaction(b))
            .and_then(|b| match b {
                ContentBlock::Other(value) => value.get("content")?.as_str(),
                _ => None,
            })
            .filter(|text| !text.is_empty())
            .map(|text| ContentBlock::text(format!("{SERVER_SUMMARY}{text}")));
        let mut head = own;
        head.push(ContentBlock::text(SERVER_COMPACTED));
        head.extend(summary);
        head.extend(input);
        let head = Message {
            role: Role::User,
            content: head,
        };
        self.pending = None;
        self.splice(0..at, vec![head]);
        self.anchor = None;
        at - 1
    }

    /// Replays `edits` (a response's
    /// [`context_edits`](crate::ModelResponse::context_edits)) on the history, as asked for
    /// by `editing`, and returns the blocks changed:
    ///
    /// - `clear_tool_uses_20250919` clearing `n` tool uses: the oldest `n` tool results
    ///   (the tools in `exclude_tools` skipped, results cleared before counted again, as the
    ///   server sees them) get [`CLEARED_TOOL_RESULT`] as their content, their images and JSON
    ///   dropped; with `clear_tool_inputs`, their calls' inputs become `{}`.
    /// - `clear_thinking_20251015` clearing `n` turns: the thinking blocks of the oldest `n`
    ///   assistant messages that hold thinking go (a message left with nothing else keeps them).
    ///
    /// Other edit types are ignored. Call it before
    /// [`record_usage`](Self::record_usage) of the same response, whose input tokens count
    /// the edited prompt. The history stays valid: calls and results stay paired.
    ///
    /// ```
    /// use agent_loop::provider::context_editing::{
    ///     AppliedEdit, ClearToolUses, ContextEditing, CLEARED_TOOL_RESULT,
    /// };
    /// use agent_loop::{ContentBlock, ContextManager, Message, Role};
    ///
    /// let mut context = ContextManager::default();
    /// context.push_user_text("read both files");
    /// for id in ["a", "b"] {
    ///     context.push(Message {
    ///         role: Role::Assistant,
    ///         content: vec![ContentBlock::ToolUse {
    ///             id: id.into(),
    ///             name: "read".into(),
    ///             input: serde_json::json!({"path": id}),
    ///         }],
    ///     });
    ///     context.push_tool_results(vec![ContentBlock::tool_result(id, "x".repeat(5_000), false)]);
    /// }
    /// let before = context.token_count();
    /// let editing = ContextEditing::new().clear_tool_uses(ClearToolUses::new());
    /// let edits = [AppliedEdit::new("clear_tool_uses_20250919").cleared_tool_uses(1)];
    /// assert_eq!(context.apply_context_edits(&edits, &editing), 1);
    /// let ContentBlock::ToolResult { content, .. } = &context.messages()[2].content[0] else {
    ///     unreachable!()
    /// };
    /// assert_eq!(content, CLEARED_TOOL_RESULT);
    /// assert!(context.token_count() < before);
    /// assert!(context.validate().is_ok());
    /// ```
    pub fn apply_context_edits(
        &mut self,
        edits: &[AppliedEdit],
        editing: &ContextEditing,
    ) -> usize {
        let mut changed = 0;
        for edit in edits {
            changed += match edit.kind.as_str() {
                CLEAR_TOOL_USES => self.clear_tool_uses(edit.cleared_tool_uses, editing),
                CLEAR_THINKING => self.clear_thinking(edit.cleared_thinking_turns),
                _ => 0,
            };
        }
        changed
    }

    fn clear_tool_uses(&mut self, n: u32, editing: &ContextEditing) -> usize {
        let (exclude, inputs) = match &editing.clear_tool_uses {
            Some(c) => (
                c.exclude_tools
                    .iter()
                    .map(String::as_str)
                    .collect::<HashSet<_>>(),
                c.clear_tool_inputs,
            ),
            None => (HashSet::new(), false),
        };
        // Tool call id → name, and the ids of the oldest `n` results that may be cleared.
        let mut names: HashMap<&str, &str> = HashMap::new();
        let mut chosen: HashSet<String> = HashSet::new();
        let mut left = usize::try_from(n).unwrap_or(usize::MAX);
        'scan: for message in self.messages.iter() {
            for block in &message.content {
                match block {
                    ContentBlock::ToolUse { id, name, .. } => {
                        names.insert(id, name);
                    }
                    ContentBlock::ToolResult { tool_use_id, .. } => {
                        if left == 0 {
                            break 'scan;
                        }
                        let name = names.get(tool_use_id.as_str()).copied().unwrap_or("");
                        if !exclude.contains(name) {
                            chosen.insert(tool_use_id.clone());
                            left -= 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        if chosen.is_empty() {
            return 0;
        }
        let mut changed = 0;
        for i in 0..self.messages.len() {
            self.modify(i, |message| {
                let mut any = false;
                for block in &mut message.content {
                    match block {
                        ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            images,
                            json,
                            ..
                        } if chosen.contains(tool_use_id.as_str())
                            && (content != CLEARED_TOOL_RESULT
                                || !images.is_empty()
                                || json.is_some()) =>
                        {
                            *content = CLEARED_TOOL_RESULT.to_owned();
                            images.clear();
                            *json = None;
                            any = true;
                            changed += 1;
                        }
                        ContentBlock::ToolUse { id, input, .. }
                            if inputs
                                && chosen.contains(id.as_str())
                                && input.as_object().is_none_or(|o| !o.is_empty()) =>
                        {
                            *input = serde_json::Value::Object(serde_json::Map::new());
                            any = true;
                            changed += 1;
                        }
                        _ => {}
                    }
                }
                any
            });
        }
        changed
    }

    fn clear_thinking(&mut self, turns: u32) -> usize {
        let thinking = |b: &ContentBlock| {
            matches!(
                b,
                ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. }
            )
        };
        let mut left = usize::try_from(turns).unwrap_or(usize::MAX);
        let mut changed = 0;
        for i in 0..self.messages.len() {
            if left == 0 {
                break;
            }
            let message = &self.messages[i];
            if message.role != Role::Assistant || !message.content.iter().any(thinking) {
                continue;
            }
            left -= 1;
            if message.content.iter().all(thinking) {
                continue;
            }
            self.modify(i, |message| {
                let before = message.content.len();
                message.content.retain(|b| !thinking(b));
                changed += before - message.content.len();
                true
            });
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::CharEstimateCounter;
    use serde_json::json;

    fn anthropic(summary: &str) -> ContentBlock {
        ContentBlock::Other(json!({"type": "compaction", "content": summary}))
    }

    fn openai() -> ContentBlock {
        ContentBlock::Compaction {
            id: None,
            encrypted_content: "enc".into(),
        }
    }

    fn assistant(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content,
        }
    }

    fn context(messages: Vec<Message>) -> ContextManager {
        let mut cm = ContextManager::default().with_counter(CharEstimateCounter);
        for m in messages {
            cm.push(m);
        }
        cm
    }

    fn texts(m: &Message) -> Vec<String> {
        m.content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn only_compaction_blocks_count_as_items() {
        assert!(is_server_compaction(&openai()));
        assert!(is_server_compaction(&anthropic("s")));
        assert!(!is_server_compaction(&ContentBlock::Other(
            json!({"type": "compactionx"})
        )));
        assert!(!is_server_compaction(&ContentBlock::Other(
            json!({"content": "s"})
        )));
        assert!(!is_server_compaction(&ContentBlock::text("compaction")));
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read".into(),
            input: json!({}),
        }
    }

    fn results(id: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(id, "out", false)],
        }
    }

    #[test]
    fn the_first_message_keeps_its_words_the_note_the_summary_and_the_latest_input() {
        let mut cm = context(vec![
            Message::user("task one"),
            assistant(vec![ContentBlock::text("ok")]),
            Message::user("task two"),
            assistant(vec![ContentBlock::text("ok")]),
            Message::user("task three"),
            assistant(vec![anthropic("what happened"), call("c1")]),
            results("c1"),
        ]);
        assert_eq!(cm.apply_server_compaction(), 4);
        assert_eq!(
            texts(&cm.messages()[0]),
            [
                "task one".to_owned(),
                SERVER_COMPACTED.to_owned(),
                format!("{SERVER_SUMMARY}what happened"),
                "task three".to_owned()
            ]
        );
        // A later item: the summary replaced; with no new input among the dropped messages
        // (tool steps only), the copied one stays.
        cm.push(assistant(vec![call("c2")]));
        cm.push(results("c2"));
        cm.push(assistant(vec![anthropic("later"), ContentBlock::text("n")]));
        assert_eq!(cm.apply_server_compaction(), 4);
        assert_eq!(
            texts(&cm.messages()[0]),
            [
                "task one".to_owned(),
                SERVER_COMPACTED.to_owned(),
                format!("{SERVER_SUMMARY}later"),
                "task three".to_owned()
            ]
        );
        // An encrypted item: no summary; a new input replaces the copied one.
        cm.push(Message::user("task four"));
        cm.push(assistant(vec![ContentBlock::text("a")]));
        cm.push(Message::user("go"));
        cm.push(assistant(vec![openai(), ContentBlock::text("b")]));
        assert_eq!(cm.apply_server_compaction(), 4);
        assert_eq!(
            texts(&cm.messages()[0]),
            [
                "task one".to_owned(),
                SERVER_COMPACTED.to_owned(),
                "go".to_owned()
            ]
        );
        assert!(cm.validate().is_ok());
    }

    #[test]
    fn nothing_goes_when_the_item_is_in_the_first_two_messages_or_absent() {
        let mut cm = context(vec![
            Message::user("task"),
            assistant(vec![openai(), ContentBlock::text("x")]),
        ]);
        let before = cm.messages().to_vec();
        assert_eq!(cm.apply_server_compaction(), 0);
        assert_eq!(cm.messages(), &before[..], "the first message gets no note");
        let mut plain = context(vec![
            Message::user("task"),
            assistant(vec![ContentBlock::text("x")]),
            Message::user("more"),
            assistant(vec![ContentBlock::text("y")]),
        ]);
        assert_eq!(plain.apply_server_compaction(), 0);
        assert_eq!(plain.len(), 4);
        // An item in a user message is not one the server returned.
        let mut odd = context(vec![
            Message::user("task"),
            assistant(vec![ContentBlock::text("x")]),
            Message {
                role: Role::User,
                content: vec![ContentBlock::text("y"), openai()],
            },
            assistant(vec![ContentBlock::text("z")]),
        ]);
        assert_eq!(odd.apply_server_compaction(), 0);
    }

    #[test]
    fn the_latest_item_decides_and_the_first_messages_results_never_stay() {
        let mut cm = context(vec![
            Message::user("task"),
            assistant(vec![openai(), ContentBlock::text("a")]),
            Message::user("more"),
            assistant(vec![anthropic("s"), ContentBlock::text("b")]),
            Message::user("again"),
            assistant(vec![ContentBlock::text("c")]),
        ]);
        assert_eq!(cm.apply_server_compaction(), 2);
        assert_eq!(cm.len(), 4);
        assert!(matches!(
            &cm.messages()[1].content[0],
            ContentBlock::Other(_)
        ));
        assert_eq!(
            texts(&cm.messages()[0]),
            [
                "task".to_owned(),
                SERVER_COMPACTED.to_owned(),
                format!("{SERVER_SUMMARY}s"),
                "more".to_owned()
            ]
        );
        // The count follows the estimate.
        assert_eq!(cm.token_count(), cm.estimated_tokens());
    }
}
