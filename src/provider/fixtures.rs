//! Conversations shared by the request modules' tests.

use serde_json::json;

use crate::message::{ContentBlock, MediaSource, Message, Role};

/// A history with every kind of media: images (bytes and URL) and a document in a user
/// message, and a tool result with two images.
pub(crate) fn media_conversation() -> Vec<Message> {
    let png = MediaSource::Base64 {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    };
    vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("look"),
                ContentBlock::Image {
                    source: png.clone(),
                },
                ContentBlock::Image {
                    source: MediaSource::Url {
                        url: "https://x.test/a.jpg".into(),
                    },
                },
                ContentBlock::Document {
                    source: MediaSource::Base64 {
                        media_type: "application/pdf".into(),
                        data: "JVBERi0=".into(),
                    },
                    title: Some("Report".into()),
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "shot".into(),
                    input: json!({}),
                },
                ContentBlock::ToolUse {
                    id: "c2".into(),
                    name: "shot".into(),
                    input: json!({}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: "two shots".into(),
                    is_error: false,
                    images: vec![png.clone(), png.clone()],
                    json: None,
                },
                ContentBlock::tool_result("c2", "none", false),
            ],
        },
    ]
}

/// The tool conversation both OpenAI request modules round-trip, with `reasoning` (signed
/// thinking for Chat, a reasoning item for Responses) first in the assistant's tool turn.
pub(crate) fn tool_conversation(reasoning: ContentBlock) -> Vec<Message> {
    vec![
        Message::user("list and read"),
        Message {
            role: Role::Assistant,
            content: vec![
                reasoning,
                ContentBlock::text("Looking."),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "ls".into(),
                    input: json!({"path": "."}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "read".into(),
                    input: json!({"path": "a.txt", "lines": [1, 2]}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("call_1", "a.txt", false),
                ContentBlock::tool_result("call_2", "no such file", true),
                ContentBlock::text("hurry"),
            ],
        },
        Message::assistant("a.txt is missing."),
        Message::user("thanks"),
    ]
}
