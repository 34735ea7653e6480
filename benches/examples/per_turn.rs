//! Per-turn cost at 10, 100 and 1,000 turns of history, and one process's peak RSS: runs of
//! a replayed client (a tool call per turn, then text; it keeps nothing of the requests), each
//! rep a new agent, printing the mean time per turn. BENCHMARKS.md §20 has the figures.
//!
//! ```text
//! cargo run --release -p agent-loop-benches --example per_turn -- 1000 3
//! WARM=1 cargo run --release -p agent-loop-benches --example per_turn -- 10 300  # tokenizer built first
//! HTTP=1 cargo run --release -p agent-loop-benches --example per_turn -- 1000 3  # OpenAiClient over loopback
//! MT=1 HTTP=1 cargo run --release -p agent-loop-benches --example per_turn -- 10 30  # multi-thread runtime
//! /usr/bin/time -f "%M KiB" target/release/examples/per_turn 10 1                # peak RSS
//! ```

use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, ToolError};
use futures::StreamExt;

#[path = "../replay.rs"]
mod replay;
use replay::ReplayClient;
#[path = "../loopback.rs"]
mod loopback;
use loopback::LoopbackServer;

fn main() {
    let turns: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let reps: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    if std::env::var_os("WARM").is_some() {
        agent_loop::context::TiktokenCounter::warm_up();
    }
    // MT=1: the multi-thread runtime, the run on the main thread (`block_on`) and the
    // server's tasks on its workers, as in a user's `#[tokio::main]`.
    let rt = if std::env::var_os("MT").is_some() {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
    .enable_all()
    .build()
    .unwrap();
    // Over HTTP: an OpenAiClient against a server that only skips the requests it reads.
    let http = std::env::var_os("HTTP").is_some().then(|| {
        let server = rt.block_on(LoopbackServer::start());
        let client = agent_loop::OpenAiClient::new("k")
            .base_url(server.base_url())
            .model("m");
        (server, client)
    });
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        let step = FnTool::new("step", "Does a step.", |_: serde_json::Value, _ctx| async {
            Ok::<_, ToolError>("ok")
        });
        let builder = match &http {
            Some((server, client)) => {
                server.push_run(turns);
                Agent::builder(client.clone())
            }
            None => Agent::builder(ReplayClient::new(turns)),
        };
        let mut agent = builder
            .tool(step)
            .max_turns(turns as u32 + 1)
            .build()
            .unwrap();
        rt.block_on(tokio::task::unconstrained(async {
            let mut ev = agent.run("Go.");
            while let Some(e) = ev.next().await {
                if let AgentEvent::Finished(o) = e {
                    assert_eq!(o.turns as usize, turns);
                }
            }
        }));
    }
    let el = t0.elapsed();
    println!(
        "{turns} turns x{reps}: {:?} per turn",
        el / (turns * reps) as u32
    );
}
