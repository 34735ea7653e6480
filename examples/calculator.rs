//! The main example: an agent with one tool, a calculator.
//!
//! `cargo run --example calculator` works with no API key: the crate's loopback mock server
//! plays a scripted model over real HTTP and SSE. With `ANTHROPIC_API_KEY` (or
//! `OPENAI_API_KEY`, optionally with `OPENAI_BASE_URL` and `OPENAI_MODEL`) it asks a real model.
//! Pass your own question as arguments. `--responses` (or `OPENAI_WIRE_API=responses`) speaks
//! the OpenAI Responses API instead, with or without a key: the model's reasoning items of the
//! tool turn are sent back on the next turn. `--gemini`, `--bedrock` and `--ollama` speak those
//! providers' own formats: offline against the mock server, or against the real service when
//! its usual variables are set (`GEMINI_API_KEY`; `AWS_REGION` with `AWS_BEARER_TOKEN_BEDROCK`
//! or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`; `OLLAMA_HOST`). The first line names the
//! format spoken.

mod common;

use agent_loop::testing::ScriptedResponse;
use agent_loop::tool::FnTool;
use agent_loop::{Agent, Termination, ToolError};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

/// The calculator's input, as the model sees it (the JSON Schema is derived from this type).
#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct CalcInput {
    /// An arithmetic expression with + - * / ^, parentheses and decimal numbers, e.g. "(2 + 3) * 4".
    expression: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let question = common::args().join(" ");
    let question = if question.is_empty() {
        "What is (17 + 25) * 3, and what is that divided by 7?".to_owned()
    } else {
        question
    };

    // What the mock model answers when no API key is set.
    // Over the Responses API the scripted model reasons first, as a reasoning model does.
    let first = if common::wants_responses() {
        ScriptedResponse::new().then_reasoning(
            "rs_calc_1",
            ["**Two computations**\n\nThe second uses the first's result."],
            Some("gAAAA-scripted-encrypted-reasoning"),
        )
    } else {
        ScriptedResponse::new()
    };
    let script = vec![
        first
            .then_text("I'll compute both with the calculator.")
            .then_tool_call(
                "call_1",
                "calculator",
                json!({"expression": "(17 + 25) * 3"}),
            )
            .then_tool_call(
                "call_2",
                "calculator",
                json!({"expression": "(17 + 25) * 3 / 7"}),
            )
            .usage_tokens(412, 58)
            .chunked(4),
        ScriptedResponse::text("(17 + 25) × 3 = **126**, and 126 ÷ 7 = **18**.")
            .usage_tokens(520, 21)
            .chunked(4),
    ];
    let model = common::model(script).await;
    println!("Model: {}", model.description);
    println!("You: {question}");

    let calculator = FnTool::new(
        "calculator",
        "Evaluates an arithmetic expression exactly as written and returns the number.",
        |input: CalcInput, _ctx| async move {
            common::eval_arithmetic(&input.expression)
                .map(common::format_number)
                .map_err(|e| ToolError::new(format!("cannot evaluate {:?}: {e}", input.expression)))
        },
    )
    .read_only(true);

    let mut agent = Agent::builder(model.client.clone())
        .system("You are a careful assistant. Use the calculator for every computation.")
        .tool(calculator)
        .settings(model.settings.clone())
        .max_turns(8)
        .build()?;

    let mut events = agent.run(question);
    let mut outcome = None;
    while let Some(event) = events.next().await {
        outcome = common::render(&event).or(outcome);
    }
    match outcome.map(|o| o.termination) {
        Some(Termination::Completed) => Ok(()),
        Some(other) => Err(format!("the run ended: {other}").into()),
        None => Err("the run ended without an outcome".into()),
    }
}
