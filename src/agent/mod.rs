//! The agent: the think → act → observe loop, exposed as a [`Stream`](futures::Stream) of
//! [`AgentEvent`]s.
//!
//! [`Agent::run`] sends the conversation to the model, forwards the streamed text as it
//! arrives, runs the tools the model asks for through the [`ToolRegistry`](crate::ToolRegistry), feeds the results
//! back and repeats until the model answers without tools or a limit stops it. The last event
//! of every run is [`AgentEvent::Finished`] with the [`RunOutcome`].
//!
//! The folder has three rooms, cut by concept:
//!
//! - `machine/`: every decision of the loop, in [`AgentMachine`](machine::AgentMachine), a sans-IO state machine
//!   made of owned parts (its counters, answer text, structured answer, call ids, spending,
//!   routing, calls in flight), with what it reads and makes (its config, the pure decisions
//!   of a turn, a paused run, budgets, handoff filters). It imports nothing async and nothing
//!   from `driver/` (`tests/architecture.rs` checks).
//! - `driver/`: the tokio driver that carries out the machine's actions (model calls, hooks,
//!   tools, timers, compaction, the session) and feeds back what happened.
//! - the facade, here: [`Agent`], [`AgentBuilder`], the events, hooks, handle, and agents
//!   that use agents ([`AgentTool`], [`Handoff`]).

// The `Agent` type's own file: named for what it holds, as the other files are.
#[allow(clippy::module_inception)]
mod agent;
mod builder;
mod driver;
mod events;
mod fallback;
mod handle;
mod hooks;
pub mod machine;
mod path;
mod team;

/// Why a paused run cannot be resumed, inside [`Error::Resume`](crate::Error::Resume) (defined
/// in [`error`](crate::error), re-exported beside [`Agent::resume`]).
pub use crate::error::ResumeError;
pub use agent::Agent;
pub use builder::AgentBuilder;
pub use driver::summarizer::LlmSummarizer;
pub use events::{AgentEvent, NestedEvent, RunError, RunOutcome, Termination};
pub use fallback::{Fallback, FallbackOn};
pub use handle::AgentHandle;
pub use hooks::{AgentHooks, HookAction, ToolDecision};
pub use machine::handoff::{HandoffFilter, HandoffFilterFn};
pub use machine::output::{RunOptions, StructuredOutput, DEFAULT_OUTPUT_TOOL};
pub use machine::pause::{PausedRun, PendingCall, Resolution, Resolutions, WaitsFor};
pub use machine::policy::{RunPolicy, DEFAULT_MAX_DEPTH};
pub use path::{AgentPath, PathStep, SubAgentUsage};
pub use team::{AgentTool, Handoff, NestedEvents, SubAgentTask};
