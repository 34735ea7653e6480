//! Per-turn cost at 10, 100 and 1,000 turns of history, and one process's peak RSS: runs of
//! a replayed client (a tool call per turn, then text; it keeps nothing of the requests), each
//! rep a new agent, printing the mean time per turn. BENCHMARKS.md §20 has the figures.
//!
//! ```text
//! cargo run --release -p agent-loop-benches --example per_turn -- 1000 3
//! WARM=1 cargo run --release -p agent-loop-benches --example per_turn -- 10 300  # tokenizer built first
//! /usr/bin/time -f "%M KiB" target/release/examples/per_turn 10 1                # peak RSS
//! ```

use agent_loop::provider::{LlmStream, ModelRequest};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, LlmClient, LlmEvent, StopReason, ToolError, Usage};
use futures::StreamExt;
use std::collections::VecDeque;
use std::sync::Mutex;

#[derive(Debug)]
struct ReplayClient {
    turns: Mutex<VecDeque<Vec<LlmEvent>>>,
}
impl ReplayClient {
    fn new(turns: usize) -> Self {
        let mut script = VecDeque::new();
        for i in 1..=turns {
            let mut events = vec![LlmEvent::MessageStart {
                id: format!("msg_{i}"),
                model: "replay".into(),
            }];
            let stop_reason = if i < turns {
                events.push(LlmEvent::ToolCallStart {
                    index: 0,
                    id: format!("call_{i:05}"),
                    name: "step".into(),
                });
                events.push(LlmEvent::ToolCallDelta {
                    index: 0,
                    partial_json: format!("{{\"n\":{i}}}"),
                });
                StopReason::ToolUse
            } else {
                events.push(LlmEvent::TextDelta {
                    index: 0,
                    text: "All steps are done.".into(),
                });
                StopReason::EndTurn
            };
            events.push(LlmEvent::BlockStop { index: 0 });
            events.push(LlmEvent::Usage(Usage {
                input_tokens: 400 + 30 * i as u64,
                output_tokens: 20,
                ..Usage::default()
            }));
            events.push(LlmEvent::MessageStop { stop_reason });
            script.push_back(events);
        }
        ReplayClient {
            turns: Mutex::new(script),
        }
    }
}
impl LlmClient for ReplayClient {
    fn stream<'a>(&'a self, _request: &'a ModelRequest) -> LlmStream<'a> {
        let events = self
            .turns
            .lock()
            .map(|mut t| t.pop_front().unwrap_or_default())
            .unwrap_or_default();
        Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
    }
}

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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        let step = FnTool::new("step", "Does a step.", |_: serde_json::Value, _ctx| async {
            Ok::<_, ToolError>("ok")
        });
        let mut agent = Agent::builder(ReplayClient::new(turns))
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
