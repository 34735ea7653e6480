//! Handoffs, as the machine sees them: the tool the model calls to hand the conversation to
//! another agent ([`handoff_tool`]), the note that answers it, and the [`HandoffFilter`] that
//! decides what history the new agent sees. Plain data and pure functions; the agents
//! themselves are the driver's (`../team.rs`).

use std::fmt;
use std::sync::Arc;

use crate::message::{ContentBlock, Message, Role, ToolSpec};

/// The note a filter that drops the handoff's own exchange ends the history with, so that it
/// ends with a user message, as every request must.
pub(crate) const HANDED_OVER: &str = "The conversation was handed over to you: continue it.";

/// A function from the conversation to what the new agent sees ([`HandoffFilter::Custom`]).
pub type HandoffFilterFn = dyn Fn(&[Message]) -> Vec<Message> + Send + Sync;

/// What history the agent a conversation is handed to sees
/// ([`Handoff::input_filter`](crate::agent::Handoff::input_filter)).
///
/// The filtered history replaces the conversation from the handoff on: the agent's
/// [`messages`](crate::Agent::messages) are what the new agent saw and said.
///
/// ```
/// use agent_loop::{Message, Role};
/// use agent_loop::agent::HandoffFilter;
///
/// // From the user's last question on: that question, the handoff call and its answer.
/// let from_last_question = HandoffFilter::custom(|messages: &[Message]| {
///     let start = messages
///         .iter()
///         .rposition(|m| m.role == Role::User && !m.text().is_empty())
///         .unwrap_or(0);
///     messages[start..].to_vec()
/// });
/// # let _ = from_last_question;
/// ```
#[non_exhaustive]
#[derive(Clone, Default)]
pub enum HandoffFilter {
    /// The whole conversation, the handoff call and its answer included (the default).
    #[default]
    All,
    /// The conversation without tool calls and results: what the user and the agents said
    /// (text, thinking, media). Messages left empty go, neighbours of one role are joined,
    /// and the history ends with a user note saying it was handed over.
    WithoutTools,
    /// A function of yours: from the conversation (ending with the handoff call's answer) to
    /// what the new agent sees. It must be a valid history (starting with a user message,
    /// every tool call answered), or the run ends with an error saying why.
    Custom(Arc<HandoffFilterFn>),
}

impl HandoffFilter {
    /// A filter of your own (see [`HandoffFilter::Custom`]).
    pub fn custom(filter: impl Fn(&[Message]) -> Vec<Message> + Send + Sync + 'static) -> Self {
        HandoffFilter::Custom(Arc::new(filter))
    }

    /// What the new agent sees of `messages`.
    pub(crate) fn apply(&self, messages: &[Message]) -> Vec<Message> {
        match self {
            HandoffFilter::All => messages.to_vec(),
            HandoffFilter::WithoutTools => without_tools(messages),
            HandoffFilter::Custom(filter) => filter(messages),
        }
    }
}

impl fmt::Debug for HandoffFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandoffFilter::All => "All",
            HandoffFilter::WithoutTools => "WithoutTools",
            HandoffFilter::Custom(_) => "Custom(..)",
        })
    }
}

/// The conversation without its tool calls and results (see [`HandoffFilter::WithoutTools`]).
fn without_tools(messages: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
    for message in messages {
        let content: Vec<ContentBlock> = message
            .content
            .iter()
            .filter(|b| {
                !matches!(
                    b,
                    ContentBlock::ToolUse { .. } | ContentBlock::ToolResult { .. }
                )
            })
            .cloned()
            .collect();
        if content.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == message.role => last.content.extend(content),
            _ => out.push(Message {
                role: message.role,
                content,
            }),
        }
    }
    // A history starts with the user; an answer left first has lost its question.
    if out.first().is_some_and(|m| m.role == Role::Assistant) {
        out.insert(0, Message::user(HANDED_OVER));
    }
    if out.last().is_none_or(|m| m.role == Role::Assistant) {
        out.push(Message::user(HANDED_OVER));
    }
    out
}

/// The tool the model calls to hand the conversation to `agent`: `transfer_to_{agent}`, with
/// no arguments.
pub(crate) fn handoff_tool(agent: &str, description: Option<&str>) -> ToolSpec {
    let description = match description {
        Some(description) => description.to_owned(),
        None => format!("Hand the conversation over to the agent `{agent}`."),
    };
    ToolSpec {
        name: format!("transfer_to_{agent}"),
        description,
        input_schema: serde_json::json!({"type": "object", "properties": {}}),
    }
}

/// The answer to a handoff call, which the history keeps.
pub(crate) fn handed_to(agent: &str) -> String {
    format!("Transferred to {agent}: from here on, {agent} answers.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_turn() -> Vec<Message> {
        vec![
            Message::user("Refund my order"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("Handing you to billing."),
                    ContentBlock::ToolUse {
                        id: "h1".into(),
                        name: "transfer_to_billing".into(),
                        input: json!({}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result("h1", handed_to("billing"), false)],
            },
        ]
    }

    #[test]
    fn all_keeps_everything() {
        assert_eq!(HandoffFilter::All.apply(&tool_turn()), tool_turn());
    }

    #[test]
    fn without_tools_keeps_the_words_and_ends_with_the_user() {
        let out = HandoffFilter::WithoutTools.apply(&tool_turn());
        assert_eq!(
            out,
            vec![
                Message::user("Refund my order"),
                Message::assistant("Handing you to billing."),
                Message::user(HANDED_OVER),
            ]
        );
        // Only calls: nothing of the assistant is left, the user's messages join.
        let mut calls_only = tool_turn();
        calls_only[1].content.remove(0);
        calls_only.push(Message::user("Please hurry"));
        let out = HandoffFilter::WithoutTools.apply(&calls_only);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].text(), "Refund my orderPlease hurry");
        // An assistant message first gets a user note before it.
        let out = HandoffFilter::WithoutTools.apply(&[Message::assistant("hi")]);
        assert_eq!(out[0], Message::user(HANDED_OVER));
        assert_eq!(out.len(), 3);
        assert_eq!(
            HandoffFilter::WithoutTools.apply(&[]),
            vec![Message::user(HANDED_OVER)]
        );
    }

    #[test]
    fn the_tool_has_no_arguments_and_a_name_from_the_agent() {
        let spec = handoff_tool("billing", None);
        assert_eq!(spec.name, "transfer_to_billing");
        assert!(spec.description.contains("billing"));
        assert_eq!(
            spec.input_schema,
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(handoff_tool("b", Some("Refunds")).description, "Refunds");
        assert!(format!("{:?}", HandoffFilter::custom(|m| m.to_vec())).contains("Custom"));
    }
}
