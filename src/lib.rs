//! # agent-loop
//!
//! Runs an LLM agent's think → act → observe loop with no agent framework underneath: streams
//! a model response over HTTP (Anthropic Messages or OpenAI Chat Completions and every
//! OpenAI-compatible server), decodes the Server-Sent Events, assembles tool calls whose JSON
//! arguments arrive in fragments, runs the tools, feeds the results back, keeps the
//! conversation inside the context window, retries transient failures, and stops for the
//! right reason.
//!
//! ## Layers
//!
//! | layer | types |
//! |---|---|
//! | wire (sans-IO) | [`SseDecoder`], [`WireDecoder`], [`LlmEvent`], [`StreamAssembler`], [`ModelResponse`] |
//! | conversation | [`Message`], [`ContentBlock`], [`Role`], [`StopReason`], [`Usage`] |
//! | tools | [`Tool`], [`FnTool`], [`ToolRegistry`], [`ToolCall`], [`ToolCallResult`], [`ToolContext`], [`ToolOutput`] |
//! | errors | [`Error`], [`LlmError`], [`ToolError`] |

#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

mod agent;
mod assemble;
mod context;
mod error;
mod message;
mod provider;
mod sse;
pub mod testing;
mod tool;

pub use agent::{
    Agent, AgentBuilder, AgentEvent, AgentHandle, AgentHooks, HookAction, RunOutcome, Termination,
    ToolDecision,
};
pub use assemble::{InvalidToolCall, InvalidToolCallReason, ModelResponse, StreamAssembler};
pub use context::{
    CharEstimateCounter, CompactionReport, CompactionStrategy, ContextConfig, ContextManager,
    Conversation, LlmSummarizer, Summarizer, TiktokenCounter, TokenCounter,
};
pub use error::{ApiError, Error, LlmError, TimeoutKind};
pub use message::{ContentBlock, Message, Role, StopReason, ToolSpec, Usage};
pub use provider::{
    AnthropicClient, Jitter, LlmClient, LlmEvent, LlmStream, MaxTokensField, ModelRequest,
    OpenAiClient, RetryPolicy, StreamLimits, ToolChoice, WireDecoder, WireFormat,
};
pub use sse::{SseDecoder, SseEvent, SseEventRef, SseLimits};
pub use tool::{
    Concurrency, ExecOptions, FnTool, RegisteredTool, Tool, ToolCall, ToolCallResult, ToolContext,
    ToolError, ToolOutput, ToolProgress, ToolRegistry,
};

/// The `#[async_trait]` attribute, for implementing [`Tool`] without a direct dependency.
pub use async_trait::async_trait;
/// The schemars version whose `JsonSchema` tool inputs must derive.
pub use schemars;
/// The cancellation token of [`ExecOptions`] and [`ToolContext`].
pub use tokio_util::sync::CancellationToken;
