//! Parallel tool calls: the model asks for two weather lookups and a calculation in the same
//! turn, and the agent runs them concurrently.
//!
//! `cargo run --example parallel_tools` works with no API key: the crate's loopback mock
//! server plays a scripted model over real HTTP and SSE. With `ANTHROPIC_API_KEY` (or
//! `OPENAI_API_KEY`, optionally with `OPENAI_BASE_URL` and `OPENAI_MODEL`) it asks a real model.
//! Pass your own question as arguments.
//!
//! The weather tool is fake and read-only, and takes 0.4–0.9 s per city (a simulated network
//! call). Read-only tools start as soon as their arguments are complete, while the model is
//! still streaming the rest of its answer; results are shown as they arrive, and the history
//! keeps them in the model's order. At the end the example compares the time the tools took
//! together with the wall time of the batch.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::testing::ScriptedResponse;
use agent_loop::{Agent, AgentEvent, ContentBlock, LlmClient, Message, RunOutcome, Termination};
use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

/// The question asked when none is given on the command line.
pub const QUESTION: &str = "What's the weather in Paris and in Tokyo right now? \
                            And how many hours is a 9700 km flight at 850 km/h?";

/// What the mock model answers when no API key is set: three tool calls in one turn, then
/// an answer built from their results.
pub fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text(
            "I'll look up both cities and do the flight maths at the same time.",
        )
        .then_tool_call("call_paris", "get_weather", json!({"city": "Paris"}))
        .then_tool_call("call_tokyo", "get_weather", json!({"city": "Tokyo"}))
        .then_tool_call(
            "call_flight",
            "calculator",
            json!({"expression": "9700 / 850"}),
        )
        .usage_tokens(530, 96)
        .chunked(6),
        ScriptedResponse::text(
            "Paris: 18 °C with light rain. Tokyo: 24 °C and sunny. \
             A 9700 km flight at 850 km/h takes about 11.4 hours.",
        )
        .usage_tokens(702, 38)
        .chunked(6),
    ]
}

/// The agent of this example: a weather lookup and a calculator.
pub fn build_agent(client: Arc<dyn LlmClient>) -> Result<Agent, agent_loop::Error> {
    Agent::builder(client)
        .system(
            "You are a helpful assistant. When several independent lookups or computations are \
             needed, call all the tools in the same turn so they run in parallel.",
        )
        .tool(common::weather_tool())
        .tool(common::calculator_tool())
        .max_turns(6)
        .build()
}

/// One tool call of a run, with its result, in the model's order.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReport {
    /// The tool name.
    pub name: String,
    /// The arguments.
    pub input: serde_json::Value,
    /// The result the model read.
    pub content: String,
    /// Whether it failed.
    pub is_error: bool,
    /// How long the tool ran.
    pub duration: Duration,
}

/// The timing of one turn's tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchTiming {
    /// The model turn.
    pub turn: u32,
    /// How many calls the turn made.
    pub calls: usize,
    /// The sum of the calls' durations: the time they would take one after another.
    pub sequential: Duration,
    /// From the first call starting to the last result arriving.
    pub wall: Duration,
}

/// Watches the event stream and measures each turn's batch of tool calls.
#[derive(Debug, Default)]
pub struct Timer {
    turn: u32,
    /// Per turn: (first call seen, last result seen, durations summed, calls).
    batches: Vec<(u32, Instant, Instant, Duration, usize)>,
    durations: HashMap<String, Duration>,
}

impl Timer {
    /// Records one event.
    pub fn observe(&mut self, event: &AgentEvent) {
        let now = Instant::now();
        match event {
            AgentEvent::TurnStart { turn } => self.turn = *turn,
            AgentEvent::ToolCall { .. } => match self.batches.last_mut() {
                Some(batch) if batch.0 == self.turn => {}
                _ => self.batches.push((self.turn, now, now, Duration::ZERO, 0)),
            },
            AgentEvent::ToolResult { id, duration, .. } => {
                self.durations.insert(id.clone(), *duration);
                if let Some(batch) = self.batches.last_mut() {
                    batch.2 = now;
                    batch.3 += *duration;
                    batch.4 += 1;
                }
            }
            // Nothing to time: only calls and results are.
            AgentEvent::TextDelta { .. }
            | AgentEvent::ThinkingDelta { .. }
            | AgentEvent::ToolCallStart { .. }
            | AgentEvent::ToolInputDelta { .. }
            | AgentEvent::ToolProgress { .. }
            | AgentEvent::Retry { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::TurnEnd { .. }
            | AgentEvent::SubAgent { .. }
            | AgentEvent::Fallback { .. }
            | AgentEvent::Handoff { .. }
            | AgentEvent::Steered { .. }
            | AgentEvent::Finished(_)
            | AgentEvent::RateLimits(_) => {}
        }
    }

    /// The timing of every turn that ran tools.
    pub fn batches(&self) -> Vec<BatchTiming> {
        self.batches
            .iter()
            .map(|&(turn, first, last, sequential, calls)| BatchTiming {
                turn,
                calls,
                sequential,
                wall: last.saturating_duration_since(first),
            })
            .collect()
    }

    /// Every tool call of the conversation with its result, in the model's order (the order
    /// the history keeps them in, whatever order they finished in).
    pub fn calls_in_order(&self, messages: &[Message]) -> Vec<CallReport> {
        let mut reports = Vec::new();
        for pair in messages.windows(2) {
            let [asked, answered] = pair else { continue };
            for (id, name, input) in asked.tool_uses() {
                let result = answered.content.iter().find_map(|b| match b {
                    ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                        ..
                    } if tool_use_id == id => Some((content.clone(), *is_error)),
                    _ => None,
                });
                let Some((content, is_error)) = result else {
                    continue;
                };
                reports.push(CallReport {
                    name: name.to_owned(),
                    input: input.clone(),
                    content,
                    is_error,
                    duration: self.durations.get(id).copied().unwrap_or_default(),
                });
            }
        }
        reports
    }
}

/// Runs `question`, passing every event to `on_event`; returns the outcome and the timer.
pub async fn run(
    agent: &mut Agent,
    question: &str,
    mut on_event: impl FnMut(&AgentEvent),
) -> (Option<RunOutcome>, Timer) {
    let mut timer = Timer::default();
    let mut outcome = None;
    let mut events = agent.run(question);
    while let Some(event) = events.next().await {
        timer.observe(&event);
        on_event(&event);
        if let AgentEvent::Finished(o) = event {
            outcome = Some(o);
        }
    }
    (outcome, timer)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let question = common::args().join(" ");
    let question = if question.is_empty() {
        QUESTION.to_owned()
    } else {
        question
    };

    let model = common::model(script()).await;
    println!("Model: {}", model.description);
    println!("You: {question}");

    let mut agent = build_agent(model.client.clone())?;
    let (outcome, timer) = run(&mut agent, &question, |event| {
        common::render(event);
    })
    .await;

    println!("\nTool results in the model's order (as the history keeps them):");
    for (i, call) in timer.calls_in_order(&agent.messages()).iter().enumerate() {
        let mark = if call.is_error { "✗" } else { "←" };
        println!(
            "  {}. {}({}) [{:.1?}] {mark} {}",
            i + 1,
            call.name,
            call.input,
            call.duration,
            call.content
        );
    }
    let batches = timer.batches();
    for batch in &batches {
        let verdict = if batch.calls > 1 && batch.wall < batch.sequential {
            "they ran concurrently"
        } else {
            "no overlap"
        };
        println!(
            "Turn {}: {} tool call(s) took {:.2?} together, in {:.2?} of wall time: {verdict}.",
            batch.turn, batch.calls, batch.sequential, batch.wall
        );
    }
    if !batches.iter().any(|b| b.calls > 1) {
        println!(
            "(The model made no more than one call per turn this time, so nothing overlapped.)"
        );
    }

    match outcome.map(|o| o.termination) {
        Some(Termination::Completed) => Ok(()),
        Some(other) => Err(format!("the run ended: {other}").into()),
        None => Err("the run ended without an outcome".into()),
    }
}
