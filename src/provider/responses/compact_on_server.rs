//! Compaction on request: OpenAI Responses `POST {base_url}/responses/compact`
//! ([`OpenAiClient::compact_on_server`](crate::OpenAiClient::compact_on_server)).
//!
//! The body is the official SDK's `ResponseCompactParams`: `model`, `input` (the
//! conversation's items, encoded as `/responses` encodes them) and `instructions` (the system
//! prompt). The answer is a `CompactedResponse` (`object: "response.compaction"`): `output`
//! holds every user message, then one `compaction` item whose `encrypted_content` stands for
//! the rest; it becomes the new conversation.

use serde_json::Value;

use crate::error::LlmError;
#[cfg(test)]
use crate::message::Message;
use crate::message::{ContentBlock, Conversation, Role, Usage};
use crate::provider::transport::http;

use super::decode::WireUsage;
use super::request::{assistant, user};

/// What [`OpenAiClient::compact_on_server`](crate::OpenAiClient::compact_on_server) returns: the compacted
/// conversation, to [`restore`](crate::Agent::restore) in place of the old one, and what the
/// compaction cost.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct CompactedConversation {
    /// The same system prompt, then the compacted messages: every user message of the old
    /// conversation (merged into one user message), then an assistant message holding the
    /// [`ContentBlock::Compaction`] item that stands for the rest.
    pub conversation: Conversation,
    /// The tokens the compaction pass used.
    pub usage: Usage,
    /// The compacted response's id, when the server gave one.
    pub id: Option<String>,
}

/// The `/responses/compact` body for `conversation`, asking `model`.
pub(crate) fn encode(conversation: &Conversation, model: &str) -> Result<Vec<u8>, LlmError> {
    if model.is_empty() {
        return Err(LlmError::InvalidRequest {
            message: "no model: set one with OpenAiClient::model(..) (or OPENAI_MODEL)".to_owned(),
        });
    }
    let mut input = Vec::new();
    for message in &conversation.messages {
        match message.role {
            Role::Assistant => assistant(message, &mut input),
            _ => user(message, &mut input)?,
        }
    }
    if input.is_empty() {
        return Err(LlmError::InvalidRequest {
            message: "nothing to compact: the conversation has no messages".to_owned(),
        });
    }
    #[derive(serde::Serialize)]
    struct Body<'a> {
        model: &'a str,
        input: Vec<super::wire::AnyItem<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        instructions: Option<&'a str>,
    }
    serde_json::to_vec(&Body {
        model,
        input,
        instructions: conversation.system.as_deref().filter(|s| !s.is_empty()),
    })
    .map_err(http::encode_error)
}

/// The compacted conversation in a `CompactedResponse` body; `system` is kept as it was.
///
/// Lenient in the fields it does not need, strict in what would lose the conversation: an
/// answer without an `output` list, or whose output holds no compaction item (the messages
/// alone would silently drop everything but the user's words), is an error.
pub(crate) fn decode(
    body: &[u8],
    system: Option<String>,
) -> Result<CompactedConversation, LlmError> {
    let malformed = |message: &str| LlmError::Malformed {
        message: format!("the /responses/compact answer {message}"),
    };
    let value: Value =
        serde_json::from_slice(body).map_err(|e| malformed(&format!("is not JSON ({e})")))?;
    let output = match value.get("output") {
        Some(Value::Array(items)) => items.clone(),
        _ => return Err(malformed("has no `output` list")),
    };
    let messages = super::request::decode(&serde_json::json!({ "input": output }));
    let compacted = messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| matches!(b, ContentBlock::Compaction { encrypted_content, .. } if !encrypted_content.is_empty()));
    if !compacted {
        return Err(malformed("holds no compaction item"));
    }
    let usage = value
        .get("usage")
        .and_then(|u| serde_json::from_value::<WireUsage>(u.clone()).ok())
        .map(|u| u.to_usage())
        .unwrap_or_default();
    Ok(CompactedConversation {
        conversation: Conversation::new(system, messages),
        usage,
        id: value.get("id").and_then(Value::as_str).map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conversation() -> Conversation {
        Conversation::new(
            Some("Be brief.".into()),
            vec![
                Message::user("Read a.rs"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "call_1".into(),
                        name: "read".into(),
                        input: json!({"path": "a.rs"}),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::tool_result("call_1", "fn a() {}", false)],
                },
                Message::assistant("It defines a."),
                Message::user("Now b.rs"),
            ],
        )
    }

    #[test]
    fn the_body_is_model_input_and_instructions() {
        let body: Value =
            serde_json::from_slice(&encode(&conversation(), "gpt-5.4").unwrap()).unwrap();
        assert_eq!(body["model"], "gpt-5.4");
        assert_eq!(body["instructions"], "Be brief.");
        let types: Vec<&str> = body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "message",
                "function_call",
                "function_call_output",
                "message",
                "message"
            ]
        );
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3, "no streaming or tool fields: {keys:?}");
    }

    #[test]
    fn an_empty_conversation_or_model_is_refused_before_sending() {
        let empty = Conversation::new(None, Vec::new());
        assert!(matches!(
            encode(&empty, "gpt-5.4"),
            Err(LlmError::InvalidRequest { .. })
        ));
        assert!(matches!(
            encode(&conversation(), ""),
            Err(LlmError::InvalidRequest { .. })
        ));
    }

    #[test]
    fn the_answer_becomes_user_messages_then_the_compaction_item() {
        let body = json!({
            "id": "resp_cmp_1", "object": "response.compaction", "created_at": 1,
            "output": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Read a.rs"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now b.rs"}]},
                {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA…"}
            ],
            "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20},
                      "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 150}
        });
        let out = decode(body.to_string().as_bytes(), Some("Be brief.".into())).unwrap();
        assert_eq!(out.id.as_deref(), Some("resp_cmp_1"));
        assert_eq!(out.conversation.system.as_deref(), Some("Be brief."));
        let messages = &out.conversation.messages;
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].role, Role::User);
        assert_eq!(
            messages[0].content,
            vec![
                ContentBlock::text("Read a.rs"),
                ContentBlock::text("Now b.rs")
            ]
        );
        assert_eq!(
            messages[1],
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::Compaction {
                    id: Some("cmp_1".into()),
                    encrypted_content: "gAAA…".into()
                }]
            }
        );
        assert_eq!(out.usage.input_tokens, 100);
        assert_eq!(out.usage.cache_read_input_tokens, 20);
        assert_eq!(out.usage.output_tokens, 30);
    }

    #[test]
    fn an_answer_that_would_lose_the_conversation_is_an_error() {
        for body in [
            "not json".to_owned(),
            json!({"object": "response.compaction"}).to_string(),
            json!({"output": "x"}).to_string(),
            json!({"output": [{"type": "message", "role": "user", "content": "hi"}]}).to_string(),
            json!({"output": [{"type": "compaction", "id": "cmp_1"}]}).to_string(),
        ] {
            assert!(
                matches!(
                    decode(body.as_bytes(), None),
                    Err(LlmError::Malformed { .. })
                ),
                "{body}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever the server answers, decoding never panics, and a success always holds a
        /// compaction item.
        #[test]
        fn decoding_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
                                 items in proptest::collection::vec(
                                     proptest::prop_oneof![
                                         proptest::prelude::Just(json!({"type": "compaction", "encrypted_content": "e"})),
                                         proptest::prelude::Just(json!({"type": "compaction"})),
                                         proptest::prelude::Just(json!({"type": "message", "role": "user", "content": 3})),
                                         proptest::prelude::Just(json!({"type": "message", "role": "user", "content": [{"type": "input_text"}]})),
                                         proptest::prelude::Just(json!({"type": "function_call"})),
                                         proptest::prelude::Just(json!(null)),
                                         proptest::prelude::Just(json!([1, 2])),
                                     ], 0..8)) {
            let _ = decode(&body, None);
            let value = json!({"output": items, "usage": {"input_tokens": -1}});
            if let Ok(out) = decode(value.to_string().as_bytes(), None) {
                let compacted = out
                    .conversation
                    .messages
                    .iter()
                    .flat_map(|m| &m.content)
                    .any(|b| matches!(b, ContentBlock::Compaction { encrypted_content, .. } if !encrypted_content.is_empty()));
                proptest::prop_assert!(compacted, "a success without a compaction item");
            }
        }
    }
}
