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
//! | errors | [`Error`], [`LlmError`], [`ToolError`] |

#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

mod assemble;
mod context;
mod error;
mod message;
mod provider;
mod sse;
mod tool;

pub use assemble::{InvalidToolCall, InvalidToolCallReason, ModelResponse, StreamAssembler};
pub use context::{
    CharEstimateCounter, CompactionReport, CompactionStrategy, ContextConfig, ContextManager,
    Conversation, LlmSummarizer, Summarizer, TiktokenCounter, TokenCounter,
};
pub use error::{ApiError, Error, LlmError, TimeoutKind};
pub use message::{ContentBlock, Message, Role, StopReason, ToolSpec, Usage};
pub use provider::{
    LlmClient, LlmEvent, LlmStream, ModelRequest, StreamLimits, ToolChoice, WireDecoder, WireFormat,
};
pub use sse::{SseDecoder, SseEvent, SseEventRef, SseLimits};
pub use tool::ToolError;
