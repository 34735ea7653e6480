//! Agents that use agents: a lead agent fans a question out to three worker agents at once
//! (each an agent used as a tool, with its own model, system prompt and tool), then hands the
//! conversation to an editor agent, which writes the answer. The host prints every agent's
//! events as an indented tree, from the `AgentEvent::SubAgent` paths.
//!
//! `cargo run --example subagents` works with no API key: each agent's model is a loopback
//! mock server playing its own script over real HTTP and SSE. With `ANTHROPIC_API_KEY` (or
//! `OPENAI_API_KEY`) every agent asks a real model. Pass your own question as arguments.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use agent_loop::testing::ScriptedResponse;
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, LlmClient, RunOutcome, ToolError};
use futures::StreamExt;
use serde_json::{json, Value};

/// The question asked when none is given on the command line.
pub const QUESTION: &str = "Plan a Saturday in Lisbon: the weather, one museum and a dinner.";

/// The workers: name, what the lead is told they do, their system prompt, their tool's name,
/// and what it answers.
pub const WORKERS: [(&str, &str, &str, &str, &str); 3] = [
    (
        "weather",
        "Finds the weather forecast for a city and day.",
        "You find weather forecasts with the forecast tool. Answer in one sentence.",
        "forecast",
        "Saturday in Lisbon: 23 °C, sunny, light wind from the north-west.",
    ),
    (
        "museums",
        "Finds a museum worth visiting, with its opening hours.",
        "You recommend one museum, checking its hours with the opening_hours tool. One sentence.",
        "opening_hours",
        "Museu Nacional do Azulejo: open Saturday 10:00–18:00, tickets €8.",
    ),
    (
        "food",
        "Finds a restaurant for dinner.",
        "You recommend one restaurant, found with the find_restaurant tool. One sentence.",
        "find_restaurant",
        "Taberna da Rua das Flores: Portuguese small plates, opens 19:00, no bookings.",
    ),
];

/// The lead's script: the three workers at once, then the handoff to the editor.
pub fn lead_script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("I'll ask the three specialists at the same time.")
            .then_tool_call(
                "call_weather",
                "weather",
                json!({"task": "The forecast for Lisbon on Saturday."}),
            )
            .then_tool_call(
                "call_museums",
                "museums",
                json!({"task": "One museum in Lisbon open on Saturday, with its hours."}),
            )
            .then_tool_call(
                "call_food",
                "food",
                json!({"task": "One restaurant in Lisbon for Saturday dinner."}),
            )
            .usage_tokens(420, 90)
            .chunked(8),
        ScriptedResponse::text("I have everything; the editor will write the plan.")
            .then_tool_call("call_editor", "transfer_to_editor", json!({}))
            .usage_tokens(640, 30),
    ]
}

/// A worker's script: one call of its tool, then its answer.
pub fn worker_script(tool: &str, answer: &str) -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::tool_call("w1", tool, json!({"city": "Lisbon", "day": "Saturday"}))
            .usage_tokens(120, 20),
        ScriptedResponse::text(answer)
            .usage_tokens(160, 25)
            .chunked(12),
    ]
}

/// The final answer the editor writes.
pub const PLAN: &str = "Saturday in Lisbon (23 °C and sunny): the Azulejo museum from 10:00 \
                        (€8), a walk along the river in the afternoon, and dinner at Taberna da \
                        Rua das Flores from 19:00 — go early, they take no bookings.";

/// The editor's script: the plan, from the history it was handed.
pub fn editor_script() -> Vec<ScriptedResponse> {
    vec![ScriptedResponse::text(PLAN)
        .usage_tokens(900, 60)
        .chunked(10)]
}

/// A worker's tool: it answers `answer` (a stand-in for a real lookup).
fn worker_tool(name: &'static str, answer: &'static str) -> impl agent_loop::Tool {
    FnTool::new(name, "Looks it up.", move |_: Value, _ctx| async move {
        Ok::<_, ToolError>(answer)
    })
    .read_only(true)
}

/// The clients of the agents: the lead, the three workers (in [`WORKERS`]' order) and the
/// editor.
pub struct Clients {
    pub lead: Arc<dyn LlmClient>,
    pub workers: [Arc<dyn LlmClient>; 3],
    pub editor: Arc<dyn LlmClient>,
}

/// The lead, with the three workers as tools and the editor as its handoff.
pub fn build_lead(clients: Clients) -> Result<Agent, agent_loop::Error> {
    let mut lead = Agent::builder(clients.lead)
        .name("lead")
        .system(
            "You plan trips. Ask the specialists (all at once, in one turn), then hand the \
             conversation to the editor to write the plan.",
        )
        .max_turns(6);
    for ((name, description, system, tool, answer), client) in
        WORKERS.into_iter().zip(clients.workers)
    {
        let worker = Agent::builder(client)
            .name(name)
            .system(system)
            .tool(worker_tool(tool, answer))
            .max_turns(4)
            .build()?;
        lead = lead.tool(worker.as_tool(name, description));
    }
    let editor = Agent::builder(clients.editor)
        .name("editor")
        .system("You write short, friendly day plans from what the specialists found.")
        .build()?;
    lead.handoff(
        agent_loop::agent::Handoff::new(editor)
            .description("Hand over to the editor to write the plan."),
    )
    .build()
}

/// Turns a run's events into the lines of an indented tree: one level per sub-agent, text
/// gathered per agent and shown when its turn ends.
#[derive(Debug, Default)]
pub struct Tree {
    /// Text streamed so far, per agent path (as displayed).
    text: HashMap<String, String>,
    /// Who is speaking at the top level (the lead, until the handoff).
    top: String,
}

impl Tree {
    pub fn new(top: &str) -> Self {
        Tree {
            text: HashMap::new(),
            top: top.to_owned(),
        }
    }

    /// The lines `event` adds to the tree.
    pub fn lines(&mut self, event: &AgentEvent) -> Vec<String> {
        match event {
            AgentEvent::SubAgent { path, event } => {
                let agent = path.steps().last().map_or("?", |s| s.agent.as_str());
                self.describe(&path.to_string(), agent, path.depth(), event)
            }
            event => {
                let top = self.top.clone();
                self.describe("", &top, 0, event)
            }
        }
    }

    fn describe(
        &mut self,
        key: &str,
        agent: &str,
        depth: usize,
        event: &AgentEvent,
    ) -> Vec<String> {
        let lead = format!("{}{agent}", "    ".repeat(depth));
        let line = |text: String| vec![format!("{lead} {text}")];
        match event {
            AgentEvent::TurnStart { turn } => line(format!("▸ turn {turn}")),
            AgentEvent::TextDelta { text } => {
                self.text.entry(key.to_owned()).or_default().push_str(text);
                Vec::new()
            }
            AgentEvent::ToolCall { name, input, .. } => {
                let mut lines = self.said(key, &lead);
                lines.push(format!("{lead} → {name} {input}"));
                lines
            }
            AgentEvent::ToolResult {
                name,
                content,
                is_error,
                ..
            } => {
                let mark = if *is_error { "✗" } else { "←" };
                line(format!("{mark} {name}: {content}"))
            }
            AgentEvent::TurnEnd { .. } => self.said(key, &lead),
            AgentEvent::Handoff { to, .. } => {
                self.top = to.clone();
                line(format!("⇢ hands the conversation to {to}"))
            }
            AgentEvent::Finished(outcome) => {
                let mut lines = self.said(key, &lead);
                lines.push(format!(
                    "{lead} ■ {} in {} turn(s), {} tokens in, {} out",
                    outcome.termination,
                    outcome.turns,
                    outcome.usage.input_tokens,
                    outcome.usage.output_tokens
                ));
                lines
            }
            // The attempt's text is void: the turn starts again.
            AgentEvent::Retry { .. } | AgentEvent::Fallback { .. } => {
                self.text.remove(key);
                Vec::new()
            }
            // The tree shows turns, calls, results and what each agent said; not reasoning,
            // argument fragments, progress, compaction, steering or rate limits. A nested
            // event never nests again (its path is flattened).
            AgentEvent::ThinkingDelta { .. }
            | AgentEvent::ToolCallStart { .. }
            | AgentEvent::ToolInputDelta { .. }
            | AgentEvent::ToolProgress { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::SubAgent { .. }
            | AgentEvent::Steered { .. }
            | AgentEvent::RateLimits(_) => Vec::new(),
        }
    }

    /// The text the agent at `key` streamed since it last spoke, as one line.
    fn said(&mut self, key: &str, lead: &str) -> Vec<String> {
        match self.text.remove(key) {
            Some(text) if !text.trim().is_empty() => vec![format!("{lead} says: {}", text.trim())],
            _ => Vec::new(),
        }
    }
}

/// Runs the lead on `question`, handing each line of the tree to `print`; returns the
/// outcome.
pub async fn run(
    lead: &mut Agent,
    question: &str,
    mut print: impl FnMut(String),
) -> Option<RunOutcome> {
    let mut tree = Tree::new("lead");
    let mut events = lead.run(question.to_owned());
    let mut outcome = None;
    while let Some(event) = events.next().await {
        for line in tree.lines(&event) {
            print(line);
        }
        if let AgentEvent::Finished(done) = event {
            outcome = Some(done);
        }
    }
    outcome
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = common::args();
    let question = if args.is_empty() {
        QUESTION.to_owned()
    } else {
        args.join(" ")
    };
    // Each agent its own model (its own mock server when no key is set).
    let lead = common::model(lead_script()).await;
    let mut workers = Vec::new();
    for (_, _, _, tool, answer) in WORKERS {
        workers.push(common::model(worker_script(tool, answer)).await);
    }
    let editor = common::model(editor_script()).await;
    println!("Models: {}\n", lead.description);
    println!("Q: {question}\n");
    let clients = Clients {
        lead: lead.client.clone(),
        workers: [
            workers[0].client.clone(),
            workers[1].client.clone(),
            workers[2].client.clone(),
        ],
        editor: editor.client.clone(),
    };
    let mut agent = build_lead(clients)?;
    let outcome = run(&mut agent, &question, |line| println!("{line}"))
        .await
        .ok_or("the run ended without an outcome")?;
    println!("\nPer sub-agent run:");
    for sub in &outcome.sub_agents {
        println!(
            "  {:<28} {} turn(s), {} tokens in, {} out",
            sub.path.to_string(),
            sub.turns,
            sub.usage.input_tokens,
            sub.usage.output_tokens
        );
    }
    println!(
        "All together: {} tokens in, {} out.",
        outcome.usage.input_tokens, outcome.usage.output_tokens
    );
    if !outcome.termination.is_completed() {
        return Err(format!("the run did not complete: {}", outcome.termination).into());
    }
    Ok(())
}
