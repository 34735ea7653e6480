//! Model access: the provider-neutral event stream, the wire decoders and the [`LlmClient`] trait.
//!
//! ```text
//!  body bytes ─► SseDecoder ─► provider decoder ─► LlmEvent ─► StreamAssembler ─► ModelResponse
//!               └──────────── WireDecoder ───────────┘
//! ```
//!
//! One folder per wire format (`anthropic`, `openai`, `responses`, `gemini`, `bedrock`,
//! `ollama`), each registered here once: its arm in `of` and its entry in `ALL`.

use crate::wire::{StreamLimits, WireDecoder, WireFormat};
use format::Format;

pub mod anthropic;
pub mod bedrock;
pub mod cache;
mod client;
pub mod context_editing;
pub(crate) mod encoded;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod format;
pub mod gemini;
pub(crate) mod media_limits;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
mod model_request;
pub mod ollama;
pub mod openai;
pub(crate) mod responses;
mod settings;
pub mod strict;

pub use client::{LlmClient, LlmStream};
pub(crate) use model_request::CowStr;
pub use model_request::{ModelRequest, ToolChoice};
pub use settings::RequestSettings;

pub mod transport;

/// The reqwest version whose `Client` the clients' `http_client` setters take (for example
/// [`AnthropicClient::http_client`](crate::AnthropicClient::http_client)).
pub use reqwest;

/// The unit of `format`: the registration (a new variant fails to compile until it is here,
/// and in [`ALL`]).
pub(crate) fn of(format: WireFormat) -> &'static dyn Format {
    match format {
        WireFormat::Anthropic => &anthropic::Anthropic,
        WireFormat::OpenAiChat => &openai::OpenAiChat,
        WireFormat::OpenAiResponses => &responses::OpenAiResponses,
        WireFormat::Gemini => &gemini::Gemini,
        WireFormat::Bedrock => &bedrock::Bedrock,
        WireFormat::Ollama => &ollama::Ollama,
    }
}

/// Every format, for what goes through them all (the mock server finding a path's format).
#[cfg(any(test, feature = "testing"))]
pub(crate) const ALL: [WireFormat; 6] = [
    WireFormat::Anthropic,
    WireFormat::OpenAiChat,
    WireFormat::OpenAiResponses,
    WireFormat::Gemini,
    WireFormat::Bedrock,
    WireFormat::Ollama,
];

impl WireFormat {
    /// The content type of the format's streamed response body.
    pub fn stream_content_type(self) -> &'static str {
        of(self).framing().content_type()
    }
}

impl WireDecoder {
    /// A decoder for `format` with the default [`StreamLimits`].
    pub fn new(format: WireFormat) -> Self {
        Self::with_limits(format, StreamLimits::default())
    }

    /// A decoder for `format` with the given limits.
    pub fn with_limits(format: WireFormat, limits: StreamLimits) -> Self {
        let unit = of(format);
        WireDecoder::from_parts(unit.framing(), unit.decoder(), limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_is_listed_once() {
        for format in ALL {
            assert_eq!(
                ALL.iter().filter(|f| **f == format).count(),
                1,
                "{format:?}"
            );
            // Each format's decoder is its own (a `MessageStop` only its own end marker gives).
            assert!(!WireDecoder::new(format).is_done(), "{format:?}");
        }
        assert_eq!(
            WireFormat::Bedrock.stream_content_type(),
            "application/vnd.amazon.eventstream"
        );
        assert_eq!(
            WireFormat::Ollama.stream_content_type(),
            "application/x-ndjson"
        );
        assert_eq!(
            WireFormat::Gemini.stream_content_type(),
            "text/event-stream"
        );
    }

    /// Each format's mock reads back what its encoder sends: the conversation, tool calls and
    /// results included (the mock server's history check stands on this). Ollama's wire has no
    /// call ids: its calls are read back numbered by position.
    #[test]
    fn every_format_reads_back_the_conversation_it_sends() {
        use crate::message::{ContentBlock, Message, Role};
        let conversation = |id: &str| {
            vec![
                Message::user("What is 2 + 2?"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text("Let me add."),
                        ContentBlock::ToolUse {
                            id: id.into(),
                            name: "add".into(),
                            input: serde_json::json!({"a": 2, "b": 2}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::tool_result(id, "4", false)],
                },
                Message::assistant("It is 4."),
                Message::user("Thanks"),
            ]
        };
        let messages = conversation("call_1");
        for format in ALL {
            let unit = of(format);
            let body = unit
                .encode(&ModelRequest::new(messages.clone()), "m")
                .unwrap_or_else(|e| panic!("{format:?}: {e}"));
            let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            let back = unit.mock().history(&body).expect("a history");
            let expected = match format {
                WireFormat::Ollama => conversation("call_0"),
                _ => messages.clone(),
            };
            assert_eq!(back, expected, "{format:?}");
        }
    }
}
