//! Stub.
use crate::error::LlmError;
use crate::message::{Message, StopReason, Usage};
use crate::provider::LlmEvent;

/// Stub.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelResponse {
    /// The assembled assistant message.
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Token usage.
    pub usage: Usage,
    /// Tool calls that must not run.
    pub invalid_tool_calls: Vec<InvalidToolCall>,
}
/// Stub.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidToolCall {
    /// id
    pub id: String,
}
/// Stub.
#[derive(Debug, Clone, PartialEq)]
pub enum InvalidToolCallReason {
    /// x
    Incomplete,
}
/// Stub.
#[derive(Debug, Default)]
pub struct StreamAssembler;
impl StreamAssembler {
    /// Stub.
    pub fn new() -> Self {
        StreamAssembler
    }
    /// Stub.
    pub fn push(&mut self, _e: &LlmEvent) -> Result<(), LlmError> {
        Ok(())
    }
    /// Stub.
    pub fn finish(self) -> Result<ModelResponse, LlmError> {
        Err(LlmError::incomplete("stub"))
    }
}
