//! One conformance suite, run for every [`WireFormat`]: the same cases, written once in
//! [`cases`], instantiated per format by [`conformance_suite!`] as rustls-test instantiates
//! its API suite per crypto provider. A new format gets the whole suite by being listed at
//! the bottom of this file with its [`Format`] table.
//!
//! Each case talks to the loopback [`MockServer`] through the format's real client and the
//! public API only (`LlmClient::stream`, [`WireDecoder`](agent_loop::wire::WireDecoder),
//! [`StreamAssembler`](agent_loop::wire::StreamAssembler)), so it holds however the provider
//! modules are laid out inside. What a format truly cannot express (thinking signatures, a
//! stop sequence's name, cache-write counts …) is a field of its [`Format`] table, and the
//! case asserts the documented loss: nothing is skipped.
//!
//! The cases, each `conformance::<format>::<case>`:
//! - request encoding: a full request (system, text, image, tools with schemas, a tool call
//!   and its result, tool choice, max tokens, temperature, stop sequences) as the mock
//!   received it; invalid histories refused with the provider's `400`, not retried;
//! - events: text, thinking, one and several tool calls with arguments in fragments, usage,
//!   every stop reason, through the mock's encoding and the client's decoding, and through
//!   the format's `WireDecoder` at random chunkings, to one assembled `ModelResponse`;
//! - faults: a body cut anywhere (an error, never a shorter answer), a clean end without the
//!   end marker, a mid-stream error event (retried before content only), bad JSON,
//!   disconnects, an oversize event and oversize tool arguments (the limit named), every
//!   HTTP error status (retried or surfaced; 429 after its `retry-after`), retries bounded,
//!   and the mock's rate limit.

mod cases;

use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::MockServer;
use agent_loop::wire::{StreamLimits, WireFormat};
use agent_loop::{
    AnthropicClient, BedrockClient, GeminiClient, LlmClient, OllamaClient, OpenAiClient, StopReason,
};

/// How a format carries the model's reasoning (`ScriptedResponse::thinking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Thinking {
    /// A thinking block with its signature (Anthropic, Gemini, Bedrock).
    Signed,
    /// The thinking text, no signature (Chat Completions `reasoning_content`, Ollama).
    Unsigned,
    /// An OpenAI Responses reasoning item (`ContentBlock::Reasoning`) whose summary is the
    /// text; the signature has no place.
    Summary,
}

/// What one wire format can express, and how its client is built. The suite's cases read
/// these fields instead of matching on the format.
pub(crate) struct Format {
    pub wire: WireFormat,
    /// The model the client asks for.
    pub model: &'static str,
    /// The real client, aimed at the mock server.
    pub client: fn(&MockServer, RetryPolicy, StreamLimits) -> Box<dyn LlmClient>,
    pub thinking: Thinking,
    /// Whether the response carries an id (`ModelResponse::id`).
    pub response_id: bool,
    /// Whether the stream names the model that answered (`ModelResponse::model`).
    pub names_model: bool,
    /// Usage: cache reads counted apart from input tokens.
    pub cache_read: bool,
    /// Usage: cache writes counted apart (else they count as input tokens).
    pub cache_write: bool,
    /// Usage: reasoning tokens reported.
    pub reasoning_tokens: bool,
    /// Whether the response says which stop sequence ended it (`ModelResponse::stop_sequence`).
    pub names_stop_sequence: bool,
    /// Each scripted stop reason and what the client reports for it (a format without a
    /// word for a reason reports the nearest it has).
    pub stop_reasons: &'static [(StopReason, StopReason)],
    /// Whether user messages may carry images.
    pub images: bool,
    /// Whether requests carry stop sequences (the OpenAI Responses API has none).
    pub stop_sequences: bool,
    /// Whether a named tool choice is sent as only that tool (Ollama has no tool choice).
    pub only_chosen_tool: bool,
    /// Whether a tool result goes by its call's function name, so the client itself refuses
    /// a result for a call the history does not have (it cannot name the function).
    pub result_needs_call_name: bool,
    /// Whether the usage comes after the end marker (Chat Completions' usage chunk after
    /// `finish_reason`, Bedrock's `metadata` after `messageStop`), and a body without it is
    /// complete (servers that never send it): a body cut there loses only the usage.
    pub usage_after_end: bool,
    /// The provider's error type of a refused request (`400`), as the client reports it
    /// (`None`: the format's errors carry no type).
    pub invalid_request_type: Option<&'static str>,
    /// The error type the client reports for an in-stream "overloaded" error event (each
    /// provider's own word for it).
    pub overloaded_event_type: &'static str,
    /// Where the request body carries each setting of the suite's request, as a JSON pointer
    /// and the JSON text expected there: max tokens 321, temperature 0.25, stop sequence
    /// `HALT-9`, tool choice: the tool `lookup`.
    pub settings: &'static [(&'static str, &'static str)],
}

const KEY: &str = "sk-conformance-0123456789-secret";

fn anthropic(server: &MockServer, retry: RetryPolicy, limits: StreamLimits) -> Box<dyn LlmClient> {
    Box::new(
        AnthropicClient::new(KEY)
            .base_url(server.anthropic_base_url())
            .model(ANTHROPIC.model)
            .retry_policy(retry)
            .stream_limits(limits),
    )
}

fn openai_chat(
    server: &MockServer,
    retry: RetryPolicy,
    limits: StreamLimits,
) -> Box<dyn LlmClient> {
    Box::new(
        OpenAiClient::new(KEY)
            .base_url(server.openai_base_url())
            .model(OPENAI_CHAT.model)
            .retry_policy(retry)
            .stream_limits(limits),
    )
}

fn openai_responses(
    server: &MockServer,
    retry: RetryPolicy,
    limits: StreamLimits,
) -> Box<dyn LlmClient> {
    Box::new(
        OpenAiClient::new(KEY)
            .base_url(server.openai_base_url())
            .model(OPENAI_RESPONSES.model)
            .responses()
            .retry_policy(retry)
            .stream_limits(limits),
    )
}

fn gemini(server: &MockServer, retry: RetryPolicy, limits: StreamLimits) -> Box<dyn LlmClient> {
    Box::new(
        GeminiClient::new(KEY)
            .base_url(server.url())
            .model(GEMINI.model)
            .retry_policy(retry)
            .stream_limits(limits),
    )
}

fn bedrock(server: &MockServer, retry: RetryPolicy, limits: StreamLimits) -> Box<dyn LlmClient> {
    Box::new(
        BedrockClient::new("us-east-1")
            .base_url(server.url())
            .model(BEDROCK.model)
            .api_key(KEY)
            .retry_policy(retry)
            .stream_limits(limits),
    )
}

fn ollama(server: &MockServer, retry: RetryPolicy, limits: StreamLimits) -> Box<dyn LlmClient> {
    Box::new(
        OllamaClient::new()
            .base_url(format!("{}/", server.url()))
            .model(OLLAMA.model)
            .retry_policy(retry)
            .stream_limits(limits),
    )
}

use StopReason::{ContentFilter, EndTurn, MaxTokens, Refusal, StopSequence, ToolUse};

pub(crate) const ANTHROPIC: Format = Format {
    wire: WireFormat::Anthropic,
    model: "claude-conformance",
    client: anthropic,
    thinking: Thinking::Signed,
    response_id: true,
    names_model: true,
    cache_read: true,
    cache_write: true,
    reasoning_tokens: false,
    names_stop_sequence: true,
    stop_reasons: &[
        (EndTurn, EndTurn),
        (ToolUse, ToolUse),
        (MaxTokens, MaxTokens),
        (StopSequence, StopSequence),
        (Refusal, Refusal),
        (ContentFilter, ContentFilter),
    ],
    images: true,
    stop_sequences: true,
    only_chosen_tool: false,
    result_needs_call_name: false,
    usage_after_end: false,
    invalid_request_type: Some("invalid_request_error"),
    overloaded_event_type: "overloaded_error",
    settings: &[
        ("/max_tokens", "321"),
        ("/temperature", "0.25"),
        ("/stop_sequences", r#"["HALT-9"]"#),
        ("/tool_choice", r#"{"type":"tool","name":"lookup"}"#),
    ],
};

pub(crate) const OPENAI_CHAT: Format = Format {
    wire: WireFormat::OpenAiChat,
    model: "gpt-conformance",
    client: openai_chat,
    thinking: Thinking::Unsigned,
    response_id: true,
    names_model: true,
    cache_read: true,
    cache_write: false,
    reasoning_tokens: true,
    names_stop_sequence: false,
    stop_reasons: &[
        (EndTurn, EndTurn),
        (ToolUse, ToolUse),
        (MaxTokens, MaxTokens),
        // `finish_reason: "stop"` for both.
        (StopSequence, EndTurn),
        (Refusal, ContentFilter),
        (ContentFilter, ContentFilter),
    ],
    images: true,
    stop_sequences: true,
    only_chosen_tool: false,
    result_needs_call_name: false,
    usage_after_end: true,
    invalid_request_type: Some("invalid_request_error"),
    overloaded_event_type: "overloaded_error",
    settings: &[
        ("/max_tokens", "321"),
        ("/temperature", "0.25"),
        ("/stop", r#"["HALT-9"]"#),
        (
            "/tool_choice",
            r#"{"type":"function","function":{"name":"lookup"}}"#,
        ),
    ],
};

pub(crate) const OPENAI_RESPONSES: Format = Format {
    wire: WireFormat::OpenAiResponses,
    model: "gpt-5-conformance",
    client: openai_responses,
    thinking: Thinking::Summary,
    response_id: true,
    names_model: true,
    cache_read: true,
    cache_write: false,
    reasoning_tokens: true,
    names_stop_sequence: false,
    stop_reasons: &[
        (EndTurn, EndTurn),
        (ToolUse, ToolUse),
        (MaxTokens, MaxTokens),
        (StopSequence, EndTurn),
        (Refusal, ContentFilter),
        (ContentFilter, ContentFilter),
    ],
    images: true,
    stop_sequences: false,
    only_chosen_tool: false,
    result_needs_call_name: false,
    usage_after_end: false,
    invalid_request_type: Some("invalid_request_error"),
    overloaded_event_type: "overloaded_error",
    settings: &[
        ("/max_output_tokens", "321"),
        ("/temperature", "0.25"),
        ("/tool_choice", r#"{"type":"function","name":"lookup"}"#),
    ],
};

pub(crate) const GEMINI: Format = Format {
    wire: WireFormat::Gemini,
    model: "gemini-conformance",
    client: gemini,
    thinking: Thinking::Signed,
    response_id: true,
    names_model: true,
    cache_read: true,
    cache_write: false,
    reasoning_tokens: true,
    names_stop_sequence: false,
    stop_reasons: &[
        (EndTurn, EndTurn),
        (ToolUse, ToolUse),
        (MaxTokens, MaxTokens),
        (StopSequence, EndTurn),
        (Refusal, ContentFilter),
        (ContentFilter, ContentFilter),
    ],
    images: true,
    stop_sequences: true,
    only_chosen_tool: false,
    result_needs_call_name: true,
    usage_after_end: false,
    invalid_request_type: Some("INVALID_ARGUMENT"),
    overloaded_event_type: "UNAVAILABLE",
    settings: &[
        ("/generationConfig/maxOutputTokens", "321"),
        ("/generationConfig/temperature", "0.25"),
        ("/generationConfig/stopSequences", r#"["HALT-9"]"#),
        (
            "/toolConfig/functionCallingConfig",
            r#"{"mode":"ANY","allowedFunctionNames":["lookup"]}"#,
        ),
    ],
};

pub(crate) const BEDROCK: Format = Format {
    wire: WireFormat::Bedrock,
    model: "anthropic.claude-conformance-v1:0",
    client: bedrock,
    thinking: Thinking::Signed,
    response_id: false,
    names_model: false,
    cache_read: true,
    cache_write: true,
    reasoning_tokens: false,
    names_stop_sequence: true,
    stop_reasons: &[
        (EndTurn, EndTurn),
        (ToolUse, ToolUse),
        (MaxTokens, MaxTokens),
        (StopSequence, StopSequence),
        (Refusal, Refusal),
        (ContentFilter, ContentFilter),
    ],
    images: true,
    stop_sequences: true,
    only_chosen_tool: false,
    result_needs_call_name: false,
    usage_after_end: true,
    invalid_request_type: Some("ValidationException"),
    overloaded_event_type: "serviceUnavailableException",
    settings: &[
        ("/inferenceConfig/maxTokens", "321"),
        ("/inferenceConfig/temperature", "0.25"),
        ("/inferenceConfig/stopSequences", r#"["HALT-9"]"#),
        ("/toolConfig/toolChoice", r#"{"tool":{"name":"lookup"}}"#),
    ],
};

pub(crate) const OLLAMA: Format = Format {
    wire: WireFormat::Ollama,
    model: "llama-conformance",
    client: ollama,
    thinking: Thinking::Unsigned,
    response_id: false,
    names_model: true,
    cache_read: false,
    cache_write: false,
    reasoning_tokens: false,
    names_stop_sequence: false,
    stop_reasons: &[
        (EndTurn, EndTurn),
        (ToolUse, ToolUse),
        (MaxTokens, MaxTokens),
        (StopSequence, EndTurn),
        (Refusal, Refusal),
        (ContentFilter, ContentFilter),
    ],
    images: true,
    stop_sequences: true,
    only_chosen_tool: true,
    result_needs_call_name: true,
    usage_after_end: false,
    invalid_request_type: None,
    overloaded_event_type: "server_error",
    settings: &[
        ("/options/num_predict", "321"),
        ("/options/temperature", "0.25"),
        ("/options/stop", r#"["HALT-9"]"#),
        ("/tools/0/function/name", r#""lookup""#),
    ],
};

/// Instantiates every case of [`cases`] once per listed format, as
/// `conformance::<format>::<case>`. The cases are listed once, here; a format is one line
/// of the invocation below.
macro_rules! conformance_suite {
    ($($name:ident => $format:expr),+ $(,)?) => {$(
        mod $name {
            use super::cases;
            const F: &super::Format = &$format;

            #[tokio::test]
            async fn request_encoding() { cases::request_encoding(F).await }
            #[tokio::test]
            async fn invalid_histories_are_refused_with_a_400() {
                cases::invalid_histories_are_refused(F).await
            }
            #[tokio::test]
            async fn text() { cases::text(F).await }
            #[tokio::test]
            async fn thinking() { cases::thinking(F).await }
            #[tokio::test]
            async fn one_tool_call() { cases::one_tool_call(F).await }
            #[tokio::test]
            async fn several_tool_calls() { cases::several_tool_calls(F).await }
            #[tokio::test]
            async fn usage() { cases::usage(F).await }
            #[tokio::test]
            async fn stop_reasons() { cases::stop_reasons(F).await }
            #[test]
            fn any_chunking_assembles_the_same_response() { cases::any_chunking(F) }
            #[test]
            fn a_body_cut_short_is_an_error_never_a_shorter_answer() {
                cases::cut_short(F)
            }
            #[tokio::test]
            async fn truncation_is_incomplete() { cases::truncation(F).await }
            #[tokio::test]
            async fn a_mid_stream_error_event() { cases::mid_stream_error(F).await }
            #[tokio::test]
            async fn bad_json() { cases::bad_json(F).await }
            #[tokio::test]
            async fn an_oversize_event_names_the_limit() { cases::oversize_event(F).await }
            #[tokio::test]
            async fn oversize_tool_arguments_name_the_limit() {
                cases::oversize_tool_args(F).await
            }
            #[tokio::test(start_paused = true)]
            async fn a_429_waits_retry_after_and_is_retried() { cases::status_429(F).await }
            #[tokio::test]
            async fn every_status_is_retried_or_surfaced() { cases::statuses(F).await }
            #[tokio::test]
            async fn retries_are_bounded() { cases::retries_are_bounded(F).await }
            #[tokio::test]
            async fn disconnects_are_retried_only_before_content() {
                cases::disconnects(F).await
            }
            #[tokio::test]
            async fn the_rate_limit_counts_max_tokens() { cases::rate_limit(F).await }
        }
    )+};
}

conformance_suite! {
    anthropic => super::ANTHROPIC,
    openai_chat => super::OPENAI_CHAT,
    openai_responses => super::OPENAI_RESPONSES,
    gemini => super::GEMINI,
    bedrock => super::BEDROCK,
    ollama => super::OLLAMA,
}
