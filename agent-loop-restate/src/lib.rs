//! Durable [`agent_loop`] runs on [Restate](https://restate.dev): a run survives the crash of
//! the process that drives it, and sessions spread over as many worker processes as needed.
//!
//! The agent core is a sans-IO machine ([`agent_loop::AgentMachine`]): it says what to do
//! (call the model, run these tools, wait) and is told what happened. This crate is a driver
//! for it whose every action is a step in Restate's journal:
//!
//! - each model call is one `ctx.run` step whose result is the response (its events, deltas of
//!   a block merged) or the error that ended it;
//! - each tool call is one invocation of the `AgentTools` service (served by the same workers)
//!   whose one `ctx.run` step runs the tool; the calls of a turn run concurrently (the Rust
//!   SDK's `ctx.run` steps cannot be awaited together, calls can), and a Restate cancel of the
//!   run does not wait for a running tool;
//! - a backoff before re-sending a turn is a durable `ctx.sleep`;
//! - an approval a human must give is a Restate awakeable, which may be resolved days later;
//! - the conversation is the virtual object's state, saved at every turn boundary.
//!
//! After a crash Restate re-invokes the handler on a live worker and replays the journal: the
//! machine is fed the same inputs, so it makes the same decisions, completed model calls are
//! not sent again, completed tools do not run again, and the run goes on where it stopped. A
//! tool that was running when its worker died runs again, with the same
//! [`ToolContext::idempotency_key`](agent_loop::ToolContext::idempotency_key)
//! (`{session}/{call id}`), so the external system it calls can drop the repeat.
//!
//! # Why a virtual object keyed by session id (and not a workflow)
//!
//! A session is a conversation that outlives one run: the user asks, the agent answers, the
//! user asks again. A virtual object keeps state per key across invocations and runs one
//! exclusive handler per key at a time, which is exactly "one run per session at a time,
//! the history carried over". A workflow runs once per id and its state is scoped to that
//! one run (and expires with it), so every follow-up question would need a new workflow and a
//! hand-made copy of the history. Shared handlers of the object read the state (`state`,
//! `events_since`) while a run holds the exclusive lock, so a host follows progress without
//! holding a connection open.
//!
//! # Handlers of the `AgentSession` object
//!
//! | handler | kind | input → output |
//! |---|---|---|
//! | `run` | exclusive | the user's message (JSON string) → [`RunReport`] |
//! | `state` | shared | → [`SessionState`] |
//! | `events_since` | shared | index `n` → up to 100 [`ProgressEvent`]s from `n` on |
//! | `approve` | shared | [`ApprovalDecision`] → resolves the pending approval of that call |
//!
//! The `AgentTools` service has one handler, `execute`, which the session calls with an
//! Restate idempotency key `{session}/{run invocation id}/{call id}`; it is not meant to be
//! called by hosts.
//!
//! Cancel a run with Restate's own cancel (`restate invocations cancel`, or the admin API): the
//! run stops as an in-process cancel does (unanswered calls answered as cancelled, the
//! history left valid and saved).
//!
//! # What a Restate cluster adds for scale
//!
//! One `restate-server` on one machine is enough for tests and small deployments. In
//! production Restate runs as a cluster: its log is replicated across nodes, so a lost node
//! loses no journal; the key space is split into partitions, each led by one node and
//! followed by others, so sessions spread over the cluster; and the workers (this crate's
//! [`serve`]) are stateless replicas behind a load balancer, any of which can continue any
//! session. Adding workers adds throughput for model and tool calls; adding partitions adds
//! journal throughput.
//!
//! # Overhead
//!
//! Measured on one machine with a debug build (`tests/overhead.rs`, median of five 20-turn
//! runs, a mock model and a tool each turn): about 1.5 ms per turn in-process, about 14 ms
//! per turn on a local restate-server, so roughly 12 ms per turn for the journal (the model
//! step, the tool invocation and its step, state writes). Against a real model's seconds per
//! turn it is noise.
//!
//! # Limits
//!
//! Restate bounds one message (journal entry or state value). The conversation is saved as one
//! state value: keep it well under the server's limit by giving the agent a context window
//! ([`agent_loop::ContextConfig`]) so that the machine compacts before it grows past it; a
//! run whose conversation would exceed [`DurableAgent::max_state_bytes`] ends with a clear
//! error instead of failing in Restate.

#![warn(missing_docs)]

mod record;
mod session;

pub use session::{
    serve, ApprovalDecision, ApprovalPolicy, ApprovalRequest, DurableAgent, ProgressEvent,
    RunReport, SessionState, SessionStatus, OBJECT_NAME,
};
