//! What a tool asks the host mid-call and what comes back: [`Question`] (made by
//! [`ToolError::ask`](crate::ToolError::ask), defined beside it), [`Resolution`] (one answer
//! to a waiting call, an asking one or one waiting for approval or a result) and [`Reply`]
//! (the question and its answer, handed to the call run again).

use serde::{Deserialize, Serialize};

pub use crate::error::Question;

/// One answer to a waiting call. For a call that waits for approval or for its result, what
/// each variant says below; for a call whose tool [asked](crate::ToolError::ask), any answer
/// runs the tool again with it ([`Reply`]), and the tool decides what it means.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Resolution {
    /// Run it.
    Approve,
    /// Do not run it; the model reads the reason as the tool's error result.
    Deny {
        /// Why.
        reason: String,
    },
    /// Its result, from outside (the call is not run by the agent).
    Result {
        /// What the model reads.
        content: String,
        /// Whether it is an error result.
        is_error: bool,
    },
}

/// The host's answer to a tool's [`Question`], handed to the call run again
/// ([`ToolContext::reply`](crate::ToolContext::reply)).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// What the tool asked.
    pub question: Question,
    /// The host's answer.
    pub resolution: Resolution,
}

impl Reply {
    /// A reply to `question`.
    pub fn new(question: Question, resolution: Resolution) -> Self {
        Reply {
            question,
            resolution,
        }
    }
}
