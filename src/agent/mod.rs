//! The agent: the think → act → observe loop, exposed as a [`Stream`](futures::Stream) of
//! [`AgentEvent`]s.
//!
//! [`Agent::run`] sends the conversation to the model, forwards the streamed text as it
//! arrives, runs the tools the model asks for through the [`ToolRegistry`], feeds the results
//! back and repeats until the model answers without tools or a limit stops it. The last event
//! of every run is [`AgentEvent::Finished`] with the [`RunOutcome`].
//!
//! Every decision of the loop lives in [`AgentMachine`] (`machine.rs`), a sans-IO state
//! machine with a few pure helpers in `turn.rs`; `run.rs` is the tokio driver that carries
//! out the machine's actions (model calls, hooks, tools, timers, compaction) and feeds back
//! what happened.

// The `Agent` type's own file: named for what it holds, as the other files are.
#[allow(clippy::module_inception)]
mod agent;
mod builder;
mod driver;
mod events;
mod fallback;
mod handle;
mod hooks;
mod machine;
mod path;
mod shared;
mod team;

pub use agent::Agent;
pub use builder::AgentBuilder;
pub use driver::summarizer::LlmSummarizer;
pub use events::{AgentEvent, NestedEvent, RunError, RunOutcome, Termination};
pub use fallback::{Fallback, FallbackOn, FallbackTarget};
pub use handle::AgentHandle;
pub use hooks::{AgentHooks, HookAction, ToolDecision};
pub use machine::config::{HandoffTarget, MachineConfig};
pub use machine::handoff::{HandoffFilter, HandoffFilterFn};
pub use machine::output::{RunOptions, StructuredOutput, DEFAULT_OUTPUT_TOOL};
pub use machine::pause::{PausedRun, PendingCall, Resolution, Resolutions, WaitsFor};
pub use machine::{Action, AgentMachine, Handled, Input, MachineParts};
pub use path::{AgentPath, PathStep, SubAgentUsage};
pub use team::{AgentTool, Handoff, SubAgentTask, DEFAULT_MAX_DEPTH};
