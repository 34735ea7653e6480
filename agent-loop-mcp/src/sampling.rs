//! [`Sampling`]: a server's `sampling/createMessage` answered by a model the host chose, under
//! the budget of the run whose tool call the request came in.
//!
//! ```text
//!  sampling/createMessage ─► limits (messages, bytes, no tools, first message the user's)
//!    (during our tools/call)   │
//!                              ▼
//!                           ModelRequest (systemPrompt, messages, temperature, stopSequences;
//!                              │           maxTokens capped by the host's cap and by what the
//!                              │           run's token budget has left after the prompt)
//!                              ▼
//!                           the host's LlmClient ─► events of the call's "sampling" run
//!                              │                    (TurnStart, TextDelta, TurnEnd with usage:
//!                              ▼                     it counts toward the run's spending)
//!                           CreateMessageResult (assistant text, model, stopReason)
//! ```
// rmcp marks sampling deprecated (SEP-2577 deprecates it from protocol 2026-07-28 on); servers
// on 2025-11-25, the revision this client speaks, still use it.
#![allow(deprecated)]

use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ErrorData, Role as McpRole, SamplingContent,
    SamplingMessage, SamplingMessageContentBlock, TextContent,
};

use agent_loop::media::Image;
use agent_loop::provider::ModelRequest;
use agent_loop::wire::StreamAssembler;
use agent_loop::{ContentBlock, LlmClient, LlmEvent, Message, ModelResponse, Role, StopReason};

/// Tokens counted for each message beyond its content (role markers, separators).
const MESSAGE_TOKENS: u64 = 4;

/// A text's tokens, estimated on the high side: three bytes a token, rounded up (real
/// tokenizers give 3.5–4.5 bytes a token for prose and code; CJK text is about three).
fn text_tokens(text: &str) -> u64 {
    text.len().div_ceil(3) as u64
}

/// Tokens counted for an image in the budget estimate of a sampling request (about what a
/// 1000×1000 image costs at Anthropic's rule).
const IMAGE_TOKENS: u64 = 1_500;

/// Serves a server's sampling requests (`sampling/createMessage`) with a model the host
/// chose; give it to [`McpServer::sampling`](crate::McpServer::sampling).
///
/// With it, the client declares the `sampling` capability. A request is served only as part
/// of one of the server's tool calls (the one it belongs to), and within an agent run, as
/// part of that run:
///
/// - **The run's budget.** `maxTokens` is capped by [`max_tokens`](Self::max_tokens) and by
///   what the run's token budget has left once the request's prompt (estimated) is counted;
///   when the prompt alone takes what is left, the request is refused and the server gets an
///   error. The response's usage is reported as the events of a nested run under the call
///   (`AgentEvent::SubAgent` with the path `sampling#<call id>`), so it counts toward the
///   calling run's spending and budgets as a sub-agent's does.
/// - **Limits.** At most [`max_messages`](Self::max_messages) messages and
///   [`max_request_bytes`](Self::max_request_bytes) of text and image data; text and images
///   only (audio, and the tool use of sampling with tools, are refused: the client does not
///   declare `sampling.tools`); the first message must be the user's.
/// - **The model.** The host's client answers with its own model: the server's
///   `modelPreferences` are hints the spec lets a client ignore, and `includeContext` is
///   ignored (no context from other servers is added). The client's retry policy applies.
///
/// A request that arrives outside a tool call (or, over stdio, while several calls are in
/// flight, so that it cannot be told which one it belongs to) is refused. Without `Sampling`
/// the capability is not declared and every request is refused with an error saying so.
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop_mcp::{McpServer, Sampling};
///
/// // In a real host: AnthropicClient::from_env()?.model("claude-haiku-4-5"), say.
/// let summarizer = ScriptedClient::new([ScriptedResponse::text("A short summary.")]);
/// let server = McpServer::http("docs", "http://127.0.0.1:3001/mcp")
///     .sampling(Sampling::new(summarizer).max_tokens(1024).max_messages(16));
/// # let _ = server;
/// ```
#[derive(Clone)]
pub struct Sampling {
    pub(crate) client: Arc<dyn LlmClient>,
    pub(crate) max_tokens: u32,
    pub(crate) max_messages: u32,
    pub(crate) max_request_bytes: usize,
}

impl Sampling {
    /// Serves sampling requests with `client` (any [`LlmClient`], an `Arc<dyn LlmClient>`
    /// too), with its own model. Defaults: at most 4096 tokens a response, 64 messages and
    /// 1 MiB a request.
    pub fn new(client: impl LlmClient + 'static) -> Self {
        Sampling {
            client: Arc::new(client),
            max_tokens: 4096,
            max_messages: 64,
            max_request_bytes: 1024 * 1024,
        }
    }

    /// The most tokens one response may generate, whatever the server asks for (default
    /// 4096; at least 1).
    pub fn max_tokens(mut self, tokens: u32) -> Self {
        self.max_tokens = tokens.max(1);
        self
    }

    /// The most messages one request may hold (default 64; at least 1).
    pub fn max_messages(mut self, messages: u32) -> Self {
        self.max_messages = messages.max(1);
        self
    }

    /// The most bytes of text and image data one request may hold, the system prompt
    /// included (default 1 MiB).
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }
}

impl fmt::Debug for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sampling")
            .field("model", &self.client.model())
            .field("max_tokens", &self.max_tokens)
            .field("max_messages", &self.max_messages)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

/// A sampling request, checked and turned into a model request.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) request: ModelRequest,
    /// The prompt's tokens, estimated on the high side (text at three bytes a token, rounded
    /// up; [`MESSAGE_TOKENS`] a message; images at [`IMAGE_TOKENS`]), so the budget is not
    /// overrun.
    pub(crate) input_tokens: u64,
}

/// Checks `params` against the limits and builds the model request (its `max_tokens` is set
/// by [`max_tokens`]). The error is the refusal, for the server.
pub(crate) fn prepare(
    sampling: &Sampling,
    params: &CreateMessageRequestParams,
) -> Result<Prepared, String> {
    if params.tools.as_ref().is_some_and(|t| !t.is_empty()) || params.tool_choice.is_some() {
        return Err(
            "this client does not take tools in sampling requests (it did not declare \
             sampling.tools): send the request without tools"
                .to_owned(),
        );
    }
    let count = params.messages.len();
    if count == 0 {
        return Err("the sampling request has no messages".to_owned());
    }
    if count > sampling.max_messages as usize {
        return Err(format!(
            "the sampling request has {count} messages; this client takes at most {}",
            sampling.max_messages
        ));
    }
    if params.max_tokens == 0 {
        return Err("maxTokens is 0: ask for at least one token".to_owned());
    }
    let mut bytes = params.system_prompt.as_deref().map_or(0, str::len);
    let mut input_tokens = params.system_prompt.as_deref().map_or(0, text_tokens);
    let mut messages: Vec<Message> = Vec::with_capacity(count);
    for (i, message) in params.messages.iter().enumerate() {
        let role = match message.role {
            McpRole::User => Role::User,
            McpRole::Assistant => Role::Assistant,
        };
        if i == 0 && role != Role::User {
            return Err("the first message of a sampling request must be the user's".to_owned());
        }
        let blocks = match &message.content {
            SamplingContent::Single(block) => std::slice::from_ref(block),
            SamplingContent::Multiple(blocks) => blocks.as_slice(),
        };
        let mut content = Vec::with_capacity(blocks.len());
        input_tokens += MESSAGE_TOKENS;
        for block in blocks {
            match block {
                SamplingMessageContentBlock::Text(text) => {
                    bytes = bytes.saturating_add(text.text.len());
                    input_tokens += text_tokens(&text.text);
                    content.push(ContentBlock::text(text.text.clone()));
                }
                SamplingMessageContentBlock::Image(image) => {
                    bytes = bytes.saturating_add(image.data.len());
                    if role != Role::User {
                        return Err(format!(
                            "message {}: images go in the user's messages only",
                            i + 1
                        ));
                    }
                    let image = Image::from_base64(&image.mime_type, &image.data)
                        .map_err(|e| format!("message {}: {e}", i + 1))?;
                    input_tokens += IMAGE_TOKENS;
                    content.push(ContentBlock::from(image));
                }
                SamplingMessageContentBlock::Audio(_) => {
                    return Err(format!(
                        "message {}: this client's model takes no audio",
                        i + 1
                    ))
                }
                _ => {
                    return Err(format!(
                        "message {}: tool use and tool results are not taken (the client did \
                         not declare sampling.tools)",
                        i + 1
                    ))
                }
            }
            if bytes > sampling.max_request_bytes {
                return Err(format!(
                    "the sampling request is over {} bytes, this client's limit",
                    sampling.max_request_bytes
                ));
            }
        }
        // Two messages of one role in a row become one (providers want turns to alternate).
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => messages.push(Message { role, content }),
        }
    }
    let mut request = ModelRequest::new(messages);
    request.system = params.system_prompt.clone().filter(|s| !s.is_empty());
    request.temperature = params.temperature;
    request.stop_sequences = params.stop_sequences.clone().unwrap_or_default();
    request.max_tokens = params.max_tokens;
    Ok(Prepared {
        request,
        input_tokens,
    })
}

/// The `max_tokens` of the request: what the server asks for, capped by the host's cap and
/// by what the run's token budget (`left`, `None` when it has none) leaves after the prompt.
/// The error is the refusal.
pub(crate) fn max_tokens(
    asked: u32,
    cap: u32,
    left: Option<u64>,
    input_tokens: u64,
) -> Result<u32, String> {
    let mut tokens = asked.min(cap);
    if let Some(left) = left {
        let room = left.saturating_sub(input_tokens);
        if room == 0 {
            return Err(format!(
                "the run's token budget has {left} tokens left, and this request's prompt \
                 alone is about {input_tokens} tokens: refused (the budget is the host's)"
            ));
        }
        tokens = tokens.min(u32::try_from(room).unwrap_or(u32::MAX));
    }
    Ok(tokens)
}

/// The model's response as the result of `sampling/createMessage`: the assistant's text
/// (thinking left out), the model that answered, and why it stopped.
pub(crate) fn into_result(response: &ModelResponse, default_model: &str) -> CreateMessageResult {
    let text: String = response
        .message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let model = if response.model.is_empty() {
        default_model.to_owned()
    } else {
        response.model.clone()
    };
    let model = if model.is_empty() {
        "unknown".to_owned()
    } else {
        model
    };
    let message = SamplingMessage::new(
        McpRole::Assistant,
        SamplingMessageContentBlock::Text(TextContent::new(text)),
    );
    CreateMessageResult::new(message, model).with_stop_reason(stop_reason(&response.stop_reason))
}

/// The text of a result (for the nested run's outcome).
pub(crate) fn text_of(result: &CreateMessageResult) -> String {
    match &result.message.content {
        SamplingContent::Single(SamplingMessageContentBlock::Text(text)) => text.text.clone(),
        _ => String::new(),
    }
}

/// The spec's stop reasons (`endTurn`, `stopSequence`, `maxTokens`, `toolUse`); others as
/// the provider named them.
fn stop_reason(reason: &StopReason) -> String {
    match reason {
        StopReason::EndTurn => CreateMessageResult::STOP_REASON_END_TURN.to_owned(),
        StopReason::StopSequence => CreateMessageResult::STOP_REASON_END_SEQUENCE.to_owned(),
        StopReason::MaxTokens => CreateMessageResult::STOP_REASON_END_MAX_TOKEN.to_owned(),
        StopReason::ToolUse => CreateMessageResult::STOP_REASON_TOOL_USE.to_owned(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "other".to_owned()),
    }
}

/// Streams one response from the host's model; `on_text` sees each piece of text as it
/// comes. The error is the model's failure, for the server.
pub(crate) async fn complete(
    client: &dyn LlmClient,
    request: &ModelRequest,
    mut on_text: impl FnMut(&str) -> futures::future::BoxFuture<'static, ()>,
) -> Result<ModelResponse, agent_loop::LlmError> {
    let mut assembler = StreamAssembler::with_limits(client.stream_limits());
    let mut stream = client.stream(request);
    while let Some(event) = stream.next().await {
        let event = event?;
        if let LlmEvent::TextDelta { text, .. } = &event {
            on_text(text).await;
        }
        assembler.push(&event)?;
    }
    assembler.finish()
}

/// An error answer for the server.
pub(crate) fn refuse(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_loop::testing::ScriptedClient;
    use serde_json::json;

    fn sampling() -> Sampling {
        Sampling::new(ScriptedClient::new([]))
    }

    fn params(value: serde_json::Value) -> CreateMessageRequestParams {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_request_becomes_a_model_request() {
        let p = params(json!({
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "Summarize: cats sleep."}},
                {"role": "assistant", "content": {"type": "text", "text": "Cats sleep."}},
                {"role": "user", "content": [{"type": "text", "text": "Shorter."}]},
                {"role": "user", "content": {"type": "text", "text": "Please."}}
            ],
            "systemPrompt": "Be brief.",
            "maxTokens": 100,
            "temperature": 0.5,
            "stopSequences": ["END"],
            "modelPreferences": {"hints": [{"name": "claude"}]},
            "includeContext": "thisServer"
        }));
        let prepared = prepare(&sampling(), &p).unwrap();
        let request = prepared.request;
        assert_eq!(request.system.as_deref(), Some("Be brief."));
        assert_eq!(request.max_tokens, 100);
        assert_eq!(request.temperature, Some(0.5));
        assert_eq!(request.stop_sequences, ["END"]);
        assert!(request.tools.is_empty());
        // The two user messages in a row are one.
        assert_eq!(request.messages.len(), 3);
        assert_eq!(request.messages[2].text(), "Shorter.Please.");
        assert_eq!(request.messages[1].role, Role::Assistant);
        // 9 + 22 + 11 + 8 + 7 bytes at three a token, each rounded up (3 + 8 + 4 + 3 + 3),
        // and 4 a message.
        assert_eq!(prepared.input_tokens, 21 + 16);
    }

    #[test]
    fn requests_over_the_limits_or_with_what_the_client_does_not_take_are_refused() {
        let text = |t: &str| json!({"role": "user", "content": {"type": "text", "text": t}});
        let many: Vec<_> = (0..65).map(|_| text("x")).collect();
        let cases = [
            (
                json!({"messages": many, "maxTokens": 5}),
                "65 messages; this client takes at most 64",
            ),
            (json!({"messages": [], "maxTokens": 5}), "no messages"),
            (
                json!({"messages": [text("x")], "maxTokens": 0}),
                "maxTokens is 0",
            ),
            (
                json!({"messages": [{"role": "assistant", "content": {"type": "text", "text": "x"}}], "maxTokens": 5}),
                "the first message of a sampling request must be the user's",
            ),
            (
                json!({"messages": [text("x")], "maxTokens": 5, "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}),
                "does not take tools",
            ),
            (
                json!({"messages": [{"role": "user", "content": {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}}], "maxTokens": 5}),
                "takes no audio",
            ),
            (
                json!({"messages": [{"role": "user", "content": {"type": "image", "data": "bm90IGFuIGltYWdl", "mimeType": "image/png"}}], "maxTokens": 5}),
                "message 1:",
            ),
        ];
        for (value, expected) in cases {
            let error = prepare(&sampling(), &params(value.clone())).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
        }
        let big = "y".repeat(1000);
        let small = sampling().max_request_bytes(999);
        let error = prepare(
            &small,
            &params(json!({"messages": [text(&big)], "maxTokens": 5})),
        )
        .unwrap_err();
        assert!(error.contains("over 999 bytes"), "{error}");
    }

    #[test]
    fn max_tokens_is_capped_by_the_host_and_the_budget() {
        assert_eq!(max_tokens(500, 4096, None, 10), Ok(500));
        assert_eq!(max_tokens(5000, 4096, None, 10), Ok(4096));
        // 100 left, 30 of them the prompt's: 70 to generate.
        assert_eq!(max_tokens(500, 4096, Some(100), 30), Ok(70));
        assert_eq!(max_tokens(50, 4096, Some(100), 30), Ok(50));
        let refused = max_tokens(500, 4096, Some(30), 30).unwrap_err();
        assert!(refused.contains("30 tokens left"), "{refused}");
        assert!(max_tokens(500, 4096, Some(0), 0).is_err());
    }

    #[test]
    fn a_response_becomes_the_result() {
        let response: ModelResponse = {
            let mut assembler = StreamAssembler::new();
            for event in [
                LlmEvent::TextDelta {
                    index: 0,
                    text: "Cats ".into(),
                },
                LlmEvent::TextDelta {
                    index: 0,
                    text: "nap.".into(),
                },
                LlmEvent::MessageStop {
                    stop_reason: StopReason::MaxTokens,
                },
            ] {
                assembler.push(&event).unwrap();
            }
            assembler.finish().unwrap()
        };
        let result = into_result(&response, "haiku");
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(
            json,
            json!({
                "model": "haiku",
                "stopReason": "maxTokens",
                "role": "assistant",
                "content": {"type": "text", "text": "Cats nap."}
            })
        );
        assert_eq!(stop_reason(&StopReason::Refusal), "refusal");
    }
}
