//! Hooks into the loop: a verdict on each tool call and on each model call.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::provider::ModelRequest;
use crate::tool::ToolCall;

/// A hook's verdict on a tool call.
///
/// Serialized tagged by `type`: `{"type":"allow"}`, `{"type":"deny","reason":"…"}`.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "reason", rename_all = "snake_case")]
pub enum ToolDecision {
    /// Run it.
    Allow,
    /// Do not run it; the model reads `reason` as the tool's error result.
    Deny(String),
    /// Do not run it and stop the run after answering this turn's calls.
    Stop(String),
    /// Not now: a person decides. Nothing of this response's calls runs; the run ends with
    /// [`Termination::Paused`](crate::Termination::Paused), and
    /// [`Agent::resume`](crate::Agent::resume) continues it, with the verdict, in this
    /// process or another.
    Pause,
}

/// A hook's verdict before a model call.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookAction {
    /// Go on.
    Continue,
    /// Stop the run before the call.
    Stop(String),
}

/// Hooks into the loop. Every method has a default that lets the loop go on.
///
/// ```
/// use agent_loop::agent::{AgentHooks, ToolDecision};
/// use agent_loop::tool::ToolCall;
///
/// struct NoDeletes;
///
/// #[agent_loop::async_trait]
/// impl AgentHooks for NoDeletes {
///     async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
///         if call.name == "delete_file" {
///             ToolDecision::Deny("deleting files is not allowed here".into())
///         } else {
///             ToolDecision::Allow
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait AgentHooks: Send + Sync {
    /// Called before each tool call runs (approval prompts, policies, logging).
    async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
        let _ = call;
        ToolDecision::Allow
    }

    /// Called before each model call with the request about to be sent; adjust the system
    /// prompt, the tools or any setting (a prepare-step hook), or stop the run.
    async fn before_model_call(&self, request: &mut ModelRequest, turn: u32) -> HookAction {
        let _ = (request, turn);
        HookAction::Continue
    }
}

#[derive(Debug, Default)]
pub(crate) struct NoHooks;

impl AgentHooks for NoHooks {}
