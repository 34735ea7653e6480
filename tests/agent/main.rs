//! The loop through the public API: the agent and its machine, the event grammar, tools,
//! context, pause and resume, sub-agents, fallback, budgets, structured output and the
//! 1,000-turn cache run.
//!
//! One test binary for the area (one link instead of one per file); each module is one
//! former test file, run alone with `cargo test --test agent <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod agent;
mod ask;
mod budgets;
mod cache_run;
mod coding_agent_tools;
mod context;
mod fallback;
mod grammar;
mod machine;
mod machine_props;
mod pause;
mod skills;
mod steering;
mod structured;
mod subagents;
mod tool_search;
mod tools;
