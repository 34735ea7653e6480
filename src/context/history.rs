//! The history invariant (ARCHITECTURE.md invariant 4), checked and repaired.
//!
//! A history is valid for every provider when:
//!
//! 1. the first message is a user message;
//! 2. roles alternate user / assistant (consecutive same-role messages are merged on push);
//! 3. no message is empty (no blocks, or only empty text blocks);
//! 4. tool calls and thinking appear only in assistant messages, tool results only in user
//!    messages;
//! 5. tool call ids are unique and not empty, and the tool calls of an assistant message are answered by
//!    exactly one tool result each at the start of the next user message, in the model's order;
//!    no tool result answers anything else.
//!
//! ```text
//!  user ──► assistant [text, tool_use a, tool_use b] ──► user [result a, result b, text?] ──► …
//! ```

use std::collections::{HashMap, HashSet, VecDeque};

use crate::error::{ContextError, Error};
use crate::message::{ContentBlock, Message, Role};

/// The content of the error result that [`repair`] gives an unanswered tool call.
pub(crate) const INTERRUPTED: &str = "interrupted: the tool call did not complete";

/// Whether a message carries nothing: no blocks, or only empty text blocks.
pub(crate) fn is_empty_message(message: &Message) -> bool {
    message
        .content
        .iter()
        .all(|b| matches!(b, ContentBlock::Text { text } if text.is_empty()))
}

fn has_tool_results(message: &Message) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

fn tool_use_ids(message: &Message) -> Vec<&str> {
    message.tool_uses().map(|(id, _, _)| id).collect()
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn invalid(message: String) -> Error {
    Error::Context(ContextError::InvalidHistory(message))
}

/// Checks the history invariant; the error names the first violation and where it is.
pub(crate) fn validate(messages: &[Message]) -> Result<(), Error> {
    let open = walk(messages, |_| {})?;
    if !open.is_empty() {
        return Err(invalid(format!(
            "the tool calls of message {} ({}) have no results; call repair()",
            messages.len() - 1,
            open.join(", ")
        )));
    }
    Ok(())
}

/// The cuts `k` (`0..=messages.len()`) at which `messages[..k]` is a valid history, in
/// order: where [`validate`] would accept the first `k` messages. One pass.
pub(crate) fn valid_cuts(messages: &[Message]) -> Vec<usize> {
    let mut cuts = vec![0];
    // Past the first violation no longer prefix is valid: the cuts before it are all there is.
    let _ = walk(messages, |i| cuts.push(i + 1));
    cuts
}

/// Checks every message in order, calling `answered(i)` after each message `i` that leaves
/// no call waiting for its result (so `messages[..=i]` is a valid history); returns the calls
/// of the last message that still wait, or the first violation.
fn walk(messages: &[Message], mut answered: impl FnMut(usize)) -> Result<Vec<&str>, Error> {
    let Some(first) = messages.first() else {
        return Ok(Vec::new());
    };
    if first.role != Role::User {
        return Err(invalid(format!(
            "the first message must be a user message, not {}",
            role_name(first.role)
        )));
    }
    let mut seen_ids: HashSet<&str> = HashSet::new();
    // The ids the previous assistant message asked for, in order.
    let mut expected: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        if is_empty_message(message) {
            return Err(invalid(format!("message {i} is empty")));
        }
        if i > 0 && messages[i - 1].role == message.role {
            return Err(invalid(format!(
                "messages {} and {i} are both {} messages; roles must alternate",
                i - 1,
                role_name(message.role)
            )));
        }
        match message.role {
            Role::Assistant => {
                for block in &message.content {
                    if let ContentBlock::ToolResult { tool_use_id, .. } = block {
                        return Err(invalid(format!(
                            "message {i} is an assistant message with a tool result ({tool_use_id})"
                        )));
                    }
                }
                expected = tool_use_ids(message);
                for id in &expected {
                    if id.is_empty() {
                        return Err(invalid(format!(
                            "a tool call in message {i} has an empty id"
                        )));
                    }
                    if !seen_ids.insert(id) {
                        return Err(invalid(format!(
                            "tool call id {id:?} in message {i} is not unique"
                        )));
                    }
                }
            }
            Role::User => {
                let mut results = Vec::new();
                let mut other_seen = false;
                for block in &message.content {
                    match block {
                        ContentBlock::ToolResult { tool_use_id, .. } => {
                            if other_seen {
                                return Err(invalid(format!(
                                    "in message {i} the tool result for {tool_use_id:?} comes \
                                     after other content; tool results must come first"
                                )));
                            }
                            results.push(tool_use_id.as_str());
                        }
                        ContentBlock::ToolUse { id, .. } => {
                            return Err(invalid(format!(
                                "message {i} is a user message with a tool call ({id})"
                            )));
                        }
                        ContentBlock::Thinking { .. }
                        | ContentBlock::RedactedThinking { .. }
                        | ContentBlock::Reasoning { .. }
                        | ContentBlock::Compaction { .. } => {
                            return Err(invalid(format!(
                                "message {i} is a user message with a thinking block"
                            )));
                        }
                        _ => other_seen = true,
                    }
                }
                if results != expected {
                    return Err(invalid(if expected.is_empty() {
                        format!(
                            "message {i} has tool results ({}) that answer no tool call",
                            results.join(", ")
                        )
                    } else {
                        format!(
                            "message {i} must answer the tool calls of message {} with one \
                             result each, in order ({}), but has results for ({})",
                            i - 1,
                            expected.join(", "),
                            results.join(", ")
                        )
                    }));
                }
                expected.clear();
            }
        }
        if expected.is_empty() {
            answered(i);
        }
    }
    Ok(expected)
}

/// Appends `incoming` to `target` (same role), keeping tool results ahead of other blocks.
pub(crate) fn merge_into(target: &mut Message, incoming: Vec<ContentBlock>) {
    if !incoming
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    {
        target.content.extend(incoming);
        return;
    }
    let existing = std::mem::take(&mut target.content);
    let (mut results, mut others): (Vec<_>, Vec<_>) = existing
        .into_iter()
        .partition(|b| matches!(b, ContentBlock::ToolResult { .. }));
    let (new_results, new_others): (Vec<_>, Vec<_>) = incoming
        .into_iter()
        .partition(|b| matches!(b, ContentBlock::ToolResult { .. }));
    results.extend(new_results);
    others.extend(new_others);
    results.extend(others);
    target.content = results;
}

/// Drops empty messages and merges neighbours of the same role.
fn normalize(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for message in messages {
        if is_empty_message(&message) {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == message.role => merge_into(last, message.content),
            _ => out.push(message),
        }
    }
    out
}

/// Makes the history valid where it can, returning it and the number of tool calls that were
/// given an "interrupted" error result.
///
/// - empty messages are dropped and same-role neighbours merged;
/// - every assistant message with tool calls is followed by a user message whose tool results
///   answer exactly those calls, in the model's order: missing results become
///   [`INTERRUPTED`] errors, duplicate and stray results are dropped;
/// - tool results that answer no tool call are dropped.
///
/// What it cannot fix (a history that starts with an assistant message, duplicate tool call
/// ids, blocks in the wrong role) is left for [`validate`] to report.
pub(crate) fn repair(messages: Vec<Message>) -> (Vec<Message>, usize) {
    let mut messages = normalize(messages);
    let mut repaired = 0;
    let mut i = 0;
    while i < messages.len() {
        let ids: Vec<String> = if messages[i].role == Role::Assistant {
            messages[i]
                .tool_uses()
                .map(|(id, _, _)| id.to_owned())
                .collect()
        } else {
            Vec::new()
        };
        if messages[i].role == Role::User {
            // A user message reached here follows no tool calls (the message after calls is
            // handled with them, below), so it must carry no tool results.
            if has_tool_results(&messages[i]) {
                tracing::warn!(
                    message = i,
                    "dropping tool results that answer no tool call"
                );
                messages[i]
                    .content
                    .retain(|b| !matches!(b, ContentBlock::ToolResult { .. }));
            }
            i += 1;
            continue;
        }
        if ids.is_empty() {
            i += 1;
            continue;
        }
        let next_is_user = messages.get(i + 1).is_some_and(|m| m.role == Role::User);
        if !next_is_user {
            messages.insert(
                i + 1,
                Message {
                    role: Role::User,
                    content: Vec::new(),
                },
            );
        }
        let next = &mut messages[i + 1];
        let (results, others): (Vec<_>, Vec<_>) = std::mem::take(&mut next.content)
            .into_iter()
            .partition(|b| matches!(b, ContentBlock::ToolResult { .. }));
        // Each call takes the first result left for its id: looked up, not scanned for, as a
        // response may hold very many calls.
        let mut by_id: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (p, block) in results.iter().enumerate() {
            if let ContentBlock::ToolResult { tool_use_id, .. } = block {
                by_id.entry(tool_use_id.clone()).or_default().push_back(p);
            }
        }
        let mut slots: Vec<Option<ContentBlock>> = results.into_iter().map(Some).collect();
        let mut answered = Vec::with_capacity(ids.len() + others.len());
        for id in &ids {
            let found = by_id
                .get_mut(id)
                .and_then(VecDeque::pop_front)
                .and_then(|p| slots[p].take());
            match found {
                Some(result) => answered.push(result),
                None => {
                    repaired += 1;
                    answered.push(ContentBlock::tool_result(id.clone(), INTERRUPTED, true));
                }
            }
        }
        let dropped = slots.iter().flatten().count();
        if dropped > 0 {
            tracing::warn!(
                message = i + 1,
                dropped,
                "dropping duplicate or stray tool results"
            );
        }
        answered.extend(others);
        next.content = answered;
        i += 2;
    }
    // Dropping stray results can empty a message; normalize again (this cannot separate a tool
    // call from its results: only messages not preceded by tool calls lost blocks).
    (normalize(messages), repaired)
}

/// The indices where turns start: 0, and every user message that carries no tool results
/// (a plain user request). Cutting the history just before a turn start keeps it valid.
pub(crate) fn turn_starts(messages: &[Message]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(i, m)| *i == 0 || (m.role == Role::User && !has_tool_results(m)))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "t".into(),
            input: json!({}),
        }
    }

    fn assistant(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content,
        }
    }

    fn user(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    #[test]
    fn turn_starts_skip_tool_result_messages() {
        let h = vec![
            Message::user("a"),
            assistant(vec![call("1")]),
            user(vec![ContentBlock::tool_result("1", "x", false)]),
            Message::assistant("done"),
            Message::user("b"),
            Message::assistant("ok"),
        ];
        assert_eq!(turn_starts(&h), vec![0, 4]);
        assert!(validate(&h).is_ok());
    }

    #[test]
    fn merge_keeps_results_first() {
        let mut m = user(vec![ContentBlock::text("hi")]);
        merge_into(&mut m, vec![ContentBlock::tool_result("1", "x", false)]);
        assert!(matches!(m.content[0], ContentBlock::ToolResult { .. }));
        assert_eq!(m.text(), "hi");
    }

    #[test]
    fn repair_inserts_between_two_assistant_messages() {
        let h = vec![
            Message::user("a"),
            assistant(vec![call("1"), call("2")]),
            Message::assistant("later"),
        ];
        let (h, n) = repair(h);
        assert_eq!(n, 2);
        assert!(validate(&h).is_ok(), "{:?}", validate(&h));
        // The two assistant messages merge; the results follow them.
        assert_eq!(h.len(), 3);
        assert_eq!(h[2].content.len(), 2);
    }

    /// The `dropped` field of each warning that says results were dropped.
    #[derive(Default)]
    struct Dropped(std::sync::Mutex<Vec<u64>>);

    struct DroppedField(Option<u64>);

    impl tracing::field::Visit for DroppedField {
        fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
            if field.name() == "dropped" {
                self.0 = Some(value);
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for &'static Dropped {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut field = DroppedField(None);
            event.record(&mut field);
            if let Some(n) = field.0 {
                self.0.lock().unwrap().push(n);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn repair_drops_results_that_follow_no_calls_and_keeps_the_rest_of_the_message() {
        let stray = |text: &str| {
            user(vec![
                ContentBlock::tool_result("9", "stray", false),
                ContentBlock::text(text),
            ])
        };
        let h = vec![
            stray("first"),
            Message::assistant("no calls here"),
            stray("second"),
        ];
        let (h, n) = repair(h);
        assert_eq!(n, 0);
        assert!(validate(&h).is_ok(), "{:?}", validate(&h));
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].content, [ContentBlock::text("first")]);
        assert_eq!(h[2].content, [ContentBlock::text("second")]);
    }

    #[test]
    fn the_valid_cuts_are_the_prefixes_validate_accepts() {
        let h = vec![
            Message::user("q"),
            assistant(vec![call("a"), call("b")]),
            user(vec![
                ContentBlock::tool_result("a", "1", false),
                ContentBlock::tool_result("b", "2", false),
            ]),
            Message::assistant("done"),
            Message::user("more"),
            assistant(vec![call("c")]),
        ];
        let cuts = valid_cuts(&h);
        assert_eq!(cuts, [0, 1, 3, 4, 5]);
        for k in 0..=h.len() {
            assert_eq!(cuts.contains(&k), validate(&h[..k]).is_ok(), "cut {k}");
        }
        // Past the first violation no cut is valid.
        let broken = vec![Message::assistant("first"), Message::user("q")];
        assert_eq!(valid_cuts(&broken), [0]);
    }

    #[test]
    fn validation_errors_name_the_roles() {
        let err = |h: &[Message]| validate(h).unwrap_err().to_string();
        assert!(
            err(&[Message::assistant("hi")]).contains("must be a user message, not assistant"),
            "{}",
            err(&[Message::assistant("hi")])
        );
        let twice = [Message::user("a"), Message::user("b")];
        assert!(
            err(&twice).contains("messages 0 and 1 are both user messages"),
            "{}",
            err(&twice)
        );
    }

    #[test]
    fn repair_matches_results_by_id_and_warns_of_what_it_dropped() {
        let result = |id: &str, text: &str| ContentBlock::tool_result(id, text, false);
        let h = vec![
            Message::user("a"),
            assistant(vec![call("1"), call("2"), call("3")]),
            // Out of order, one missing, one duplicate, one stray, and text after them.
            user(vec![
                result("2", "two"),
                result("1", "one"),
                result("2", "again"),
                result("9", "stray"),
                ContentBlock::text("note"),
            ]),
        ];
        let seen: &'static Dropped = Box::leak(Box::default());
        let (h, n) = tracing::subscriber::with_default(seen, || repair(h));
        assert_eq!(n, 1, "only call 3 was unanswered");
        assert!(validate(&h).is_ok(), "{:?}", validate(&h));
        let texts: Vec<&str> = h[2]
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::ToolResult { content, .. } => content.as_str(),
                ContentBlock::Text { text, .. } => text.as_str(),
                _ => "?",
            })
            .collect();
        assert_eq!(texts, ["one", "two", INTERRUPTED, "note"]);
        assert_eq!(*seen.0.lock().unwrap(), [2], "the duplicate and the stray");

        // Nothing to drop: no warning.
        let whole = vec![
            Message::user("a"),
            assistant(vec![call("1")]),
            user(vec![result("1", "one")]),
        ];
        let quiet: &'static Dropped = Box::leak(Box::default());
        let (_, n) = tracing::subscriber::with_default(quiet, || repair(whole));
        assert_eq!(n, 0);
        assert!(quiet.0.lock().unwrap().is_empty());
    }
}
