//! Test doubles for code built on this crate (and for the crate's own tests).
//!
//! - [`ScriptedClient`]: an in-process [`LlmClient`](crate::LlmClient) that plays
//!   [`ScriptedResponse`]s in order and records the requests it receives. No sockets, no
//!   serialization: the fastest way to test an agent.
//! - [`MockServer`]: a loopback HTTP/1.1 server that speaks both wire formats (Anthropic
//!   Messages and OpenAI Chat Completions) from the same script, with fault injection
//!   (error statuses, retry headers, chunking, stalls, disconnects, truncation). Point a real
//!   [`AnthropicClient`](crate::AnthropicClient) or [`OpenAiClient`](crate::OpenAiClient) at
//!   it to test the whole stack without network or API key.
//!
//! Both check the history invariant on every request (every `tool_use` answered by exactly one
//! `tool_result` in the next user message) and record violations for the test to assert on.

use std::collections::HashSet;

use crate::message::{ContentBlock, Message, Role};

mod mock;
mod scripted;
mod sse;

pub use mock::{Interruption, MockResponse, MockServer, RecordedRequest, StreamPoint};
pub use scripted::{ScriptedClient, ScriptedResponse};

/// Checks the history invariant a provider enforces on a conversation and returns the first
/// violation, described, or `None` when the history is valid:
///
/// - the first message is a user message;
/// - every `tool_use` of an assistant message is answered by exactly one `tool_result` in the
///   next message, which is a user message, in the same order as the calls;
/// - every `tool_result` answers a `tool_use` of the message just before it;
/// - tool call ids are unique.
pub fn history_violation(messages: &[Message]) -> Option<String> {
    let first = messages.first()?;
    if first.role != Role::User {
        return Some("the first message is not a user message".to_owned());
    }
    let mut seen_ids = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        let calls: Vec<&str> = message.tool_uses().map(|(id, _, _)| id).collect();
        let results: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        if message.role == Role::User && !calls.is_empty() {
            return Some(format!("message {i}: a user message contains tool_use"));
        }
        if message.role == Role::Assistant && !results.is_empty() {
            return Some(format!(
                "message {i}: an assistant message contains tool_result"
            ));
        }
        for id in &calls {
            if !seen_ids.insert(*id) {
                return Some(format!("message {i}: tool call id {id:?} is used twice"));
            }
        }
        // Results must answer the calls of the message before, one to one, in order.
        if !results.is_empty() {
            let previous: Vec<&str> = match i.checked_sub(1).and_then(|p| messages.get(p)) {
                Some(prev) => prev.tool_uses().map(|(id, _, _)| id).collect(),
                None => Vec::new(),
            };
            if results != previous {
                return Some(format!(
                    "message {i}: tool results {results:?} do not answer the calls {previous:?} \
                     of the message before"
                ));
            }
        }
        if !calls.is_empty() {
            let Some(next) = messages.get(i + 1) else {
                return Some(format!(
                    "message {i}: tool calls {calls:?} are never answered (the history ends)"
                ));
            };
            let answered = next
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }));
            if next.role != Role::User || !answered {
                return Some(format!(
                    "message {i}: tool calls {calls:?} are not answered by the next message"
                ));
            }
        }
    }
    None
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

    fn msg(role: Role, content: Vec<ContentBlock>) -> Message {
        Message { role, content }
    }

    #[test]
    fn valid_history_passes() {
        let h = vec![
            Message::user("hi"),
            msg(Role::Assistant, vec![call("a"), call("b")]),
            msg(
                Role::User,
                vec![
                    ContentBlock::tool_result("a", "1", false),
                    ContentBlock::tool_result("b", "2", true),
                ],
            ),
            Message::assistant("done"),
        ];
        assert_eq!(history_violation(&h), None);
    }

    #[test]
    fn violations_are_described() {
        let unanswered = vec![Message::user("hi"), msg(Role::Assistant, vec![call("a")])];
        assert!(history_violation(&unanswered)
            .unwrap()
            .contains("never answered"));
        let wrong_order = vec![
            Message::user("hi"),
            msg(Role::Assistant, vec![call("a"), call("b")]),
            msg(
                Role::User,
                vec![
                    ContentBlock::tool_result("b", "2", false),
                    ContentBlock::tool_result("a", "1", false),
                ],
            ),
        ];
        assert!(history_violation(&wrong_order)
            .unwrap()
            .contains("do not answer"));
        let assistant_first = vec![Message::assistant("x")];
        assert!(history_violation(&assistant_first).is_some());
    }
}
