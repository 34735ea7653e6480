//! Durable [`agent_loop`] runs on [Restate](https://restate.dev): a run survives the crash of
//! the process that drives it, and sessions spread over as many worker processes as needed.
//!
//! The agent core is a sans-IO machine ([`agent_loop::agent::machine::AgentMachine`]): it says what to do
//! (call the model, run these tools, wait) and is told what happened. This crate is a driver
//! for it whose every action is a step in Restate's journal:
//!
//! - each model call is one `ctx.run` step whose result is the response (its events, deltas of
//!   a block merged) or the error that ended it. The `before_model_call` hook, when the agent
//!   has hooks, runs inside it; read-only calls the approval policy allows start while the
//!   response streams, inside it too, and their results are part of its record (as
//!   in-process, calls after one that is not read-only wait for the response's end);
//! - each tool call is one invocation of the `AgentTools` service (served by the same workers)
//!   whose one `ctx.run` step runs the tool, and keeps its first progress notes; the calls of
//!   a turn run concurrently (the Rust SDK's `ctx.run` steps cannot be awaited together, calls
//!   can), and a Restate cancel of the run does not wait for a running tool;
//! - the `before_tool` hook's verdict on a call is a `ctx.run` step of its own, and so is
//!   compaction's summary call;
//! - a backoff before re-sending a turn is a durable `ctx.sleep`;
//! - an approval a human must give is a Restate awakeable, which may be resolved days later
//!   (so the core's in-process pause, `RunPolicy::require_approval`, `DeferredTool` and
//!   `Agent::resume`, is not used here: a durable run already outlives its process; give the
//!   [`DurableAgent`] an approval policy, or have the `before_tool` hook answer
//!   [`ToolDecision::Pause`](agent_loop::agent::ToolDecision::Pause). A run that pauses anyway
//!   ends, paused calls answered as interrupted);
//! - the conversation is the virtual object's state, one value per message, and each turn
//!   end saves only what the turn changed (its new messages), so storage grows with the
//!   work, not with turns × conversation (BENCHMARKS.md: about 1.5 KB of journal and 0.4 KB
//!   of state per tool turn, flat from 10 to 1,000 turns; about 1.7 KB of journal since the
//!   run reads its steering inbox twice a tool turn, `tests/journal_growth.rs`);
//! - a sub-agent ([`DurableAgent::sub_agent`]) is a durable call of its own: each call runs
//!   it in the child session `{session}/{call id}`, whose model calls and tools are journaled
//!   steps, so a crash inside it resumes inside it. (An in-process sub-agent,
//!   [`Agent::as_tool`](agent_loop::Agent::as_tool), given as a tool still works, as one
//!   journaled tool call whose inner steps are not journaled.);
//! - handoffs ([`AgentBuilder::handoff`](agent_loop::AgentBuilder::handoff)) are not supported
//!   yet, nor are fallback models ([`AgentBuilder::fallback`](agent_loop::AgentBuilder::fallback)):
//!   an agent configured with either is refused when the run starts, with an error saying so.
//!
//! [`DurableAgent::configure`] says what each of the builder's settings becomes.
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
//! `eventsSince`) while a run holds the exclusive lock, so a host follows progress without
//! holding a connection open.
//!
//! # Handlers of the `AgentSession` object
//!
//! Restate's ingress (port 8080 by default) serves each at
//! `POST /AgentSession/{session id}/{handler}`; a body is JSON, sent with
//! `content-type: application/json` (the ingress refuses any other type). The names are the
//! ones Restate serves, so the Rust method `events_since` is the handler `eventsSince`.
//!
//! | handler | kind | body → answer |
//! |---|---|---|
//! | `run` | exclusive | the user's message (JSON string) → [`RunReport`] |
//! | `state` | shared | none → [`SessionState`] |
//! | `eventsSince` | shared | index `n` (JSON number) → up to 100 [`ProgressEvent`]s from `n` on |
//! | `approve` | shared | [`ApprovalDecision`] → empty (404 when no such call waits) |
//! | `steer` | shared | the host's words (JSON string) → empty, once queued for the run |
//! | `stopAfterTurn` | shared | none → empty, once the run is asked to stop after its turn |
//! | `subAgent` | exclusive | called by a run for a sub-agent's call, on the child session |
//!
//! `approve` resolves the pending approval of that call. `run` answers when the run ends;
//! `POST /AgentSession/{session id}/run/send` starts it and answers at once with the
//! invocation id.
//!
//! `steer` and `stopAfterTurn` are the in-process `AgentHandle::steer` and
//! `AgentHandle::stop_after_turn`, through the same machine inputs: the words go into the
//! history as the user's at the run's next safe point (after the batch's results, before the
//! next model call; a final answer given meanwhile goes on to a turn that hears them), where
//! a [`ProgressEvent::Steered`] marks them; several keep their order; words the run took but
//! never delivered come back in [`RunReport::undelivered`]; words sent while no run goes on
//! wait for the next run, after its own input; a stop request ends the run after its turn
//! with `Termination::StoppedAfterTurn` (its text in [`RunReport::termination`]). Only a
//! `run`'s session is steered (not a sub-agent's child session). A steer is at most 64 KiB
//! of text, and at most 16 wait at once (413 and 429 past them).
//!
//! Why they go through another object: the run holds the session object's exclusive lock,
//! and Restate lets only exclusive handlers write state, so the shared `steer` cannot write
//! the session's state while the run goes. It calls the exclusive handler of an
//! `AgentInbox` object of the same key (private to the server, `ingress_private`), whose
//! handlers only read and write its queue, so they never wait long; the run takes what is
//! queued with a journaled call of that object at each point where the machine decides with
//! it: after each model response (before the machine reads it) and at each turn's end,
//! when a step that waited (the model, tools, a human, a sleep) came since its last look,
//! and once at its end. A replay is fed the same words at the same points. (An awakeable
//! would not do: a run cannot look at one without waiting for it.) Words a run took and
//! cannot hand back, because Restate cancelled it or it failed, go back to the inbox for
//! the next run. Each look is one call of the inbox: about 90 bytes of journal (three
//! entries) and a round trip through the server; a tool turn looks twice (after the model's
//! response, after the tools).
//!
//! The `AgentTools` service has one handler, `execute`, which the session calls with a
//! Restate idempotency key `{session}/{run invocation id}/{call id}`; it is not meant to be
//! called by hosts.
//!
//! # Example
//!
//! A worker serving an agent whose `deploy` tool waits for a human's approval (it needs
//! `agent-loop`, `agent-loop-restate`, `serde` and `tokio` as dependencies, and a running
//! `restate-server` to be useful):
//!
//! ```no_run
//! use std::net::SocketAddr;
//!
//! use agent_loop::{AnthropicClient, ToolError, ToolRegistry};
//! use agent_loop::tool::{FnTool, ToolCall};
//! use agent_loop_restate::{ApprovalRequest, DurableAgent};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
//! #[schemars(crate = "agent_loop::tool::schemars")]
//! struct Deploy {
//!     /// The environment to deploy to.
//!     env: String,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = AnthropicClient::from_env()?.model("claude-sonnet-4-5");
//!     let deploy = FnTool::new("deploy", "Deploys the service.", |input: Deploy, ctx| async move {
//!         // The same key if the tool runs again after a crash: `{session}/{call id}`.
//!         let key = ctx.idempotency_key();
//!         Ok::<_, ToolError>(format!("deployed to {} (request {key})", input.env))
//!     });
//!     let tools = ToolRegistry::new().with(deploy)?;
//!     let agent = DurableAgent::new(client, tools)
//!         .configure(|b| b.system("You are careful.").max_turns(20))
//!         .approval(|call: &ToolCall| {
//!             if call.name == "deploy" {
//!                 ApprovalRequest::AskHuman
//!             } else {
//!                 ApprovalRequest::Allow
//!             }
//!         });
//!     let addr: SocketAddr = "127.0.0.1:9080".parse()?;
//!     agent_loop_restate::serve(agent, addr).await?; // serves until the process ends
//!     Ok(())
//! }
//! ```
//!
//! Register the worker with the server's admin API (port 9070 by default), then drive a
//! session (here `demo`) through the ingress:
//!
//! ```sh
//! curl localhost:9070/deployments -H 'content-type: application/json' \
//!   -d '{"uri": "http://127.0.0.1:9080"}'
//!
//! # Run a prompt: the answer (a RunReport) comes when the run ends ...
//! curl localhost:8080/AgentSession/demo/run -H 'content-type: application/json' \
//!   -d '"Deploy to staging."'
//! # ... or start it and return at once with Restate's /send:
//! curl localhost:8080/AgentSession/demo/run/send -H 'content-type: application/json' \
//!   -d '"Deploy to staging."'
//!
//! # Follow it: the SessionState (status, conversation, event count), and the events from 0 on
//! curl -X POST localhost:8080/AgentSession/demo/state
//! curl localhost:8080/AgentSession/demo/eventsSince -H 'content-type: application/json' -d '0'
//!
//! # Approve or deny the call the run waits on (the call_id of the state's
//! # waiting_for_approval status, or of the approval_needed event)
//! curl localhost:8080/AgentSession/demo/approve -H 'content-type: application/json' \
//!   -d '{"call_id": "toolu_01", "allow": true}'
//! curl localhost:8080/AgentSession/demo/approve -H 'content-type: application/json' \
//!   -d '{"call_id": "toolu_01", "allow": false, "reason": "not on a Friday"}'
//! ```
//!
//! Cancel a run with Restate's own cancel (`restate invocations cancel`, or the admin API): the
//! run stops as an in-process cancel does (unanswered calls answered as cancelled, the
//! history left valid and saved).
//!
//! # What the journal holds, and upgrading
//!
//! A model step's result is the response's events and the error that ended it, as the core's
//! own serde forms ([`agent_loop::LlmEvent`], [`agent_loop::LlmError`]), with the hook's stop
//! and the early calls' results when there are any; a tool step's is the
//! [`agent_loop::tool::ToolCallResult`] with the call's first progress notes. Replayed, each reads
//! back equal to what the first run saw.
//!
//! The session's state: `messages` (the count), `system` and `message/{n}` (one JSON message
//! each) hold the conversation; `status`, `events` and `event/{n}` the progress; `approval/{call
//! id}` the awakeable of a call waiting for a human. The `AgentInbox` object of the same key
//! holds `queue` (the words not taken yet) and `stop`. Runs journaled by the version before
//! steering have no reads of the inbox: they replay (with [`replay::RecordedRun`]) as runs
//! that were told nothing. Sessions saved by earlier versions hold the
//! whole conversation in one `conversation` value: they load as they are, and their first save
//! rewrites them in the new form (tested in `tests/parity.rs`).
//!
//! Earlier builds of this crate journaled hand-made mirrors of the core's types, which this
//! version does not replay: an invocation that meets such an entry fails with an error that
//! says so and names the way out (Restate retries it until it is cancelled). So upgrade as
//! Restate recommends: register the new worker as a new deployment and keep the old one
//! serving until the invocations it started have finished (Restate keeps an invocation on the
//! deployment it started on), rather than replacing a deployment in place while runs are in
//! flight.
//!
//! # Replay as a test
//!
//! A finished run's journal, kept with [`DurableAgent::journal_retention`], can be read back
//! from the admin API and replayed with no server: [`replay::RecordedRun`]. The replay runs the
//! same driver on the recorded model responses, tool results and human decisions, and fails at
//! the first call or state write that differs from the recorded one: a test that the loop
//! still decides as it did. `tests/replay.rs` has the example, on `tests/recorded/deploy.json`.
//!
//! # What a Restate cluster adds for scale
//!
//! One `restate-server` on one machine is enough for tests and small deployments. In
//! production Restate runs as a cluster: its log is replicated across nodes, so a lost node
//! loses no journal; the key space is split into partitions, each led by one node and
//! followed by others, so sessions spread over the cluster; and the workers (this crate's
//! [`serve`]) are stateless replicas behind a load balancer, any of which can continue any
//! session. `tests/cluster.rs` runs 100 sessions over two workers on a three-node cluster on
//! loopback (replicated log and metadata, replication 2), SIGKILLs a node and a worker
//! mid-way, and checks that every run answers once and nothing completed runs twice;
//! `CLUSTER.md` shows the same layout on separate machines, and the client pattern (send with
//! an idempotency key, then attach) that survives losing the node it talked to.
//!
//! # Overhead
//!
//! Measured on one machine with a debug build (`tests/overhead.rs`, median of five 20-turn
//! runs, a mock model and a tool each turn): about 1.5 ms per turn in-process, about 21 ms
//! per turn on a local restate-server, so roughly 19 ms per turn for the journal (the model
//! step, the tool invocation and its step, state writes, and the two reads of the steering
//! inbox, about 7 ms of it: 14 ms per turn without them, measured interleaved on the same
//! loaded machine). Against a real model's seconds per turn it is noise.
//!
//! # Limits
//!
//! Restate bounds one message (journal entry or state value). Each message of the
//! conversation is its own state value, and a run reads the whole conversation when it
//! starts: keep it well under the server's limits by giving the agent a context window
//! ([`agent_loop::context::ContextConfig`]) so that the machine compacts before it grows past it; a
//! run whose conversation would exceed [`DurableAgent::max_state_bytes`] ends with a clear
//! error instead of failing in Restate. The progress log keeps a response's text one event per
//! block, cut at 4 KiB, and a call's first 16 progress notes, cut at 1 KiB each: its growth
//! per turn is bounded; it is not trimmed.

#![warn(missing_docs)]

// Imports go one way, down this list: a replay plays a recorded journal through the
// session's driver; the session (the Restate handlers) drives the driver, which journals
// through record; what is served and what a session reports are plain data below them all.
mod agent;
mod driver;
mod inbox;
mod record;
pub mod replay;
mod report;
mod session;

pub use agent::{ApprovalDecision, ApprovalPolicy, ApprovalRequest, DurableAgent};
pub use report::{ProgressEvent, RunReport, SessionState, SessionStatus};
pub use session::{serve, OBJECT_NAME};
