//! # agent-loop
//!
//! Runs an LLM agent's think → act → observe loop with no agent framework underneath: streams
//! a model response over HTTP (Anthropic Messages, OpenAI Responses, or OpenAI Chat
//! Completions and every OpenAI-compatible server), decodes the Server-Sent Events, assembles tool calls whose JSON
//! arguments arrive in fragments, runs the tools, feeds the results back, keeps the
//! conversation inside the context window, retries transient failures, and stops for the
//! right reason.
//!
//! ## Quick start
//!
//! An agent with one tool, run against the in-process [`testing::ScriptedClient`] so this
//! example needs no network; swap in [`AnthropicClient::from_env`] or
//! [`OpenAiClient::from_env`] for a real model.
//!
//! ```
//! use agent_loop::testing::{ScriptedClient, ScriptedResponse};
//! use agent_loop::{Agent, AgentEvent, Termination, ToolError};
//! use agent_loop::tool::FnTool;
//! use futures::StreamExt;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
//! #[schemars(crate = "agent_loop::tool::schemars")]
//! struct Add {
//!     a: f64,
//!     b: f64,
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let client = ScriptedClient::new([
//!     ScriptedResponse::tool_call("call_1", "add", json!({"a": 2.5, "b": 4})),
//!     ScriptedResponse::text("2.5 + 4 = 6.5"),
//! ]);
//! let add = FnTool::new("add", "Adds two numbers.", |input: Add, _ctx| async move {
//!     Ok::<_, ToolError>((input.a + input.b).to_string())
//! });
//! let mut agent = Agent::builder(client).system("Be concise.").tool(add).build()?;
//!
//! let mut events = agent.run("What is 2.5 + 4?");
//! let mut outcome = None;
//! while let Some(event) = events.next().await {
//!     match event {
//!         AgentEvent::TextDelta { text } => print!("{text}"),
//!         AgentEvent::ToolResult { name, content, .. } => println!("{name} -> {content}"),
//!         AgentEvent::Finished(o) => outcome = Some(o),
//!         _ => {}
//!     }
//! }
//! let outcome = outcome.expect("Finished is always the last event");
//! assert_eq!(outcome.termination, Termination::Completed);
//! assert_eq!(outcome.final_text, "2.5 + 4 = 6.5");
//! # Ok::<(), agent_loop::Error>(())
//! # }).unwrap();
//! ```
//!
//! ## Layers
//!
//! | room | what is there |
//! |---|---|
//! | [`agent`] | [`Agent`], [`AgentBuilder`], [`AgentEvent`], [`RunOutcome`], [`Termination`], [`PausedRun`]; hooks, handles, sub-agents and handoffs in the same room; sans-IO: [`agent::machine::AgentMachine`] |
//! | [`provider`] | [`LlmClient`], [`RequestSettings`], the clients ([`AnthropicClient`], [`OpenAiClient`], [`GeminiClient`], [`OllamaClient`], `BedrockClient` with feature `bedrock`), each format's own knobs under `provider::<format>`, retries and pacing under [`provider::transport`] |
//! | [`wire`] (sans-IO) | [`wire::sse::SseDecoder`], [`wire::WireDecoder`], [`LlmEvent`], [`wire::StreamAssembler`], [`ModelResponse`] |
//! | [`tool`] | [`Tool`], [`ToolRegistry`], [`ToolContext`], [`ToolOutput`], [`ToolError`]; [`tool::FnTool`], [`tool::ToolCall`], [`tool::ToolCallResult`], [`tool::ToolSource`] |
//! | [`context`] | [`ContextManager`], [`context::ContextConfig`], [`context::TokenCounter`], [`context::Summarizer`] |
//! | conversation | [`Message`], [`ContentBlock`], [`Role`], [`StopReason`], [`Usage`], [`UserInput`]; images and documents in [`media`] |
//! | [`session`], [`pricing`] | saved conversations ([`session::SessionStore`], [`session::MemoryStore`]); model prices and costs |
//! | [`error`] | [`Error`] and [`LlmError`] here; their parts ([`error::ApiError`], [`error::ConfigError`] …) there |
//! | testing (feature `testing`) | `testing::ScriptedClient`, `testing::MockServer` |
//!
//! The lower layers are sans-IO: plain structs fed with bytes or events, usable and testable
//! on their own. Only the clients and the agent touch the network, the clock and tokio.

#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

pub mod agent;
pub mod context;
pub mod error;
mod input;
pub mod media;
mod message;
pub mod pricing;
pub mod provider;
#[cfg(test)]
mod serde_tests;
pub mod session;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tool;
pub mod wire;

pub use agent::{Agent, AgentBuilder, AgentEvent, PausedRun, RunOutcome, Termination};
pub use context::ContextManager;
pub use error::{Error, LlmError};
pub use input::UserInput;
pub use message::{ContentBlock, Message, Role, StopReason, Usage};
#[cfg(feature = "bedrock")]
pub use provider::bedrock::BedrockClient;
pub use provider::{
    anthropic::AnthropicClient, gemini::GeminiClient, ollama::OllamaClient, openai::OpenAiClient,
    LlmClient, RequestSettings,
};
pub use tool::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
pub use wire::{LlmEvent, ModelResponse};

/// Entry points for the fuzz targets in `fuzz/`; built only with `--cfg fuzzing` (cargo-fuzz
/// sets it). Not part of the public API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod __fuzz {
    use crate::provider::ModelRequest;
    use crate::wire::WireFormat;
    use crate::LlmError;

    /// The JSON body a client would send for `request` in `format` (model `fuzz-model` when the
    /// request names none).
    pub fn encode_request(
        format: WireFormat,
        request: &ModelRequest,
    ) -> Result<serde_json::Value, LlmError> {
        let body = crate::provider::of(format).encode(request, "fuzz-model")?;
        serde_json::from_slice(&body).map_err(|e| LlmError::InvalidRequest {
            message: format!("the encoded body is not JSON: {e}"),
        })
    }
}

/// The `#[async_trait]` attribute, for implementing [`Tool`] without a direct dependency.
pub use async_trait::async_trait;

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (docs/guide/), compiled as doctests: one item per page.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/README.md")]
pub struct GuideIndexDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/getting-started.md")]
pub struct GuideGettingStartedDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/tools.md")]
pub struct GuideToolsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/events.md")]
pub struct GuideEventsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/structured-output.md")]
pub struct GuideStructuredOutputDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/requests.md")]
pub struct GuideRequestsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/providers.md")]
pub struct GuideProvidersDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/cost-and-rate-limits.md")]
pub struct GuideCostAndRateLimitsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/context.md")]
pub struct GuideContextDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/sub-agents.md")]
pub struct GuideSubAgentsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/sessions.md")]
pub struct GuideSessionsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/web-front-ends.md")]
pub struct GuideWebFrontEndsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/durability.md")]
pub struct GuideDurabilityDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/observability.md")]
pub struct GuideObservabilityDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/testing.md")]
pub struct GuideTestingDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/contributing.md")]
pub struct GuideContributingDoctests;
