//! The cost of durability per turn: the same 20-turn run (a tool call each turn, then an
//! answer) in-process and through Restate, five times each; prints the median per turn.
//! Ignored by default (it measures, it asserts nothing about speed):
//! `cargo test -p agent-loop-restate --test overhead -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, AnthropicClient, ToolError};
use common::*;
use futures::StreamExt;
use serde_json::json;

const TURNS: usize = 20;
const RUNS: usize = 5;

fn script(mock: &MockServer) {
    for i in 0..TURNS - 1 {
        mock.push(ScriptedResponse::tool_call(
            format!("c{i}"),
            "step",
            json!({"label": format!("t{i}")}),
        ));
    }
    mock.push(ScriptedResponse::text("done"));
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn overhead_per_turn() {
    let Some(restate) = restate_or_skip("overhead_per_turn") else {
        return;
    };
    restate.ready().await;
    let mock = MockServer::start().await;
    let tools = TempDir::new("overhead");

    let mut local = Vec::new();
    for _ in 0..RUNS {
        script(&mock);
        let client = AnthropicClient::new("k")
            .base_url(mock.anthropic_base_url())
            .model("claude-mock");
        let step = FnTool::new("step", "A step.", |_: serde_json::Value, _| async {
            Ok::<_, ToolError>("did it")
        });
        let mut agent = Agent::builder(client).tool(step).build().expect("agent");
        let start = Instant::now();
        let mut events = std::pin::pin!(agent.run("go"));
        while let Some(event) = events.next().await {
            if let AgentEvent::Finished(outcome) = event {
                assert_eq!(outcome.turns as usize, TURNS);
            }
        }
        local.push(start.elapsed() / TURNS as u32);
    }

    let worker = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    assert!(restate.register(&worker).await.status().is_success());
    let mut durable = Vec::new();
    for run in 0..RUNS {
        script(&mock);
        let start = Instant::now();
        let report = restate.run(&format!("o{run}"), "go").await.expect("run");
        assert_eq!(report["turns"], TURNS);
        durable.push(start.elapsed() / TURNS as u32);
    }
    if std::env::var_os("OVERHEAD_JOURNAL").is_some() {
        for row in restate
            .query(
                "SELECT j.index, j.entry_type, j.name, j.appended_at FROM sys_journal j JOIN \
                 sys_invocation i ON j.id = i.id WHERE i.target = 'AgentSession/o0/run' ORDER BY \
                 j.index LIMIT 40",
            )
            .await
        {
            println!("{row}");
        }
    }
    let (local, durable) = (median(local), median(durable));
    println!(
        "per turn (median of {RUNS} runs of {TURNS} turns): in-process {local:?}, on Restate \
         {durable:?}, overhead {:?}",
        durable.saturating_sub(local)
    );
}
