//! OpenAI Responses (`POST {base_url}/responses`): wire types, request encoding and stream
//! decoding. The client is [`OpenAiClient`](crate::OpenAiClient) in its Responses mode
//! ([`OpenAiClient::responses`](crate::OpenAiClient::responses)): the same server, key,
//! headers and transport as Chat Completions, another path and body.

pub(crate) mod compact_on_server;
pub(crate) mod decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
pub(crate) mod request;
mod wire;

crate::provider::format::unit!(
    OpenAiResponses,
    "OpenAI Responses",
    encode: |request, model| request::encode(request, model, &ResponsesOptions::default()),
);

/// The Responses-only settings of an [`OpenAiClient`](crate::OpenAiClient) in Responses mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ResponsesOptions {
    /// `reasoning.effort` (`minimal`, `low`, `medium`, `high` …).
    pub(crate) reasoning_effort: Option<String>,
    /// `reasoning.summary` (`auto`, `concise`, `detailed`).
    pub(crate) reasoning_summary: Option<String>,
    /// `store`; when false (the default) `include: ["reasoning.encrypted_content"]` is sent so
    /// reasoning can go back without server-side state.
    pub(crate) store: bool,
}
