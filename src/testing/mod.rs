//! Test doubles for code built on this crate (and for the crate's own tests).
//!
//! - [`ScriptedClient`]: an in-process [`LlmClient`](crate::LlmClient) that plays
//!   [`ScriptedResponse`]s in order and records the requests it receives. No sockets, no
//!   serialization: the fastest way to test an agent.
//! - [`MockServer`]: a loopback HTTP/1.1 server that speaks every wire format (Anthropic
//!   Messages, OpenAI Chat Completions and OpenAI Responses; Ollama's `/api/chat` NDJSON) from the same script, with fault injection
//!   (error statuses, retry headers, chunking, stalls, disconnects, truncation). Point a real
//!   [`AnthropicClient`](crate::AnthropicClient) or [`OpenAiClient`](crate::OpenAiClient) at
//!   it to test the whole stack without network or API key. A
//!   [`GeminiClient`](crate::GeminiClient) with `base_url(server.url())` gets Gemini's
//!   `streamGenerateContent` chunks, Google's error bodies, and a `400 INVALID_ARGUMENT` for
//!   what Gemini refuses (an invalid function name or non-object schema, a function response
//!   that does not follow its function call, contents without parts).
//!
//! - [`CassetteRecorder`] and [`CassettePlayer`]: record a run's model exchanges through
//!   the real client to a [`Cassette`] file, and replay it with no network, each request
//!   checked against the recorded one (the first differing field named).
//!
//! Both check the history invariant on every request (every `tool_use` answered by exactly one
//! `tool_result` in the next user message) and record violations for the test to assert on.
//! The `MockServer` also refuses, with the provider's own `400`, a tool schema the real API
//! refuses (Anthropic: a top-level `oneOf`/`anyOf`/`allOf` or a non-object `input_schema`;
//! OpenAI: non-object `parameters`; OpenAI Responses: functions with `defer_loading` but no
//! `tool_search` tool, a deferred `tool_search`, tool search input items without their required
//! fields).
//!
//! Amazon Bedrock Converse is served on `{url}/model/{modelId}/converse-stream` as the AWS
//! event stream, with Bedrock's error bodies and its refusals (blank text blocks, tool blocks
//! without a `toolConfig`, non-object input schemas, roles that do not alternate): point a
//! `BedrockClient` (feature `bedrock`) at [`MockServer::url`] with `base_url`.

use crate::message::Message;

mod cassette;
mod mock;
mod rate_limit;
mod response;
mod scripted;
pub(crate) mod sse;
pub(crate) mod whole;

pub use cassette::{
    first_difference, Cassette, CassetteError, CassetteExchange, CassettePlayer, CassetteRecorder,
    MAX_RECORDED_BODY,
};
pub use mock::{MockServer, RecordedRequest};
pub use response::{Interruption, MockResponse, StreamPoint};
pub use scripted::{ScriptedClient, ScriptedResponse};

/// Checks the history invariant a provider enforces on a conversation and returns the first
/// violation, described, or `None` when the history is valid. It is the same check
/// [`ContextManager::validate`](crate::ContextManager::validate) runs:
///
/// - the first message is a user message and roles alternate; no message is empty;
/// - every `tool_use` of an assistant message is answered by exactly one `tool_result` in the
///   next message, which is a user message, in the same order as the calls;
/// - every `tool_result` answers a `tool_use` of the message just before it;
/// - tool call ids are unique.
pub fn history_violation(messages: &[Message]) -> Option<String> {
    crate::context::validate_history(messages)
        .err()
        .map(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ContentBlock, Role};
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
        assert!(history_violation(&unanswered).is_some());
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
        assert!(history_violation(&wrong_order).is_some());
        let assistant_first = vec![Message::assistant("x")];
        assert!(history_violation(&assistant_first).is_some());
    }
}
