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
                },
                ContentBlock::tool_result("c2", "none", false),
            ],
        },
    ]
}
