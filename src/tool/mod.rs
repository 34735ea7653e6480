//! Tools: the typed [`Tool`] trait users implement, and the registry that runs them.

/// A tool's own failure; becomes an `is_error` tool result the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
}

impl ToolError {
    /// A tool error with a message the model can act on.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}
