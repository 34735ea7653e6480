//! Structured output: extract a typed record from free text.
//!
//! `cargo run --example structured_output` works with no API key: the loopback mock server
//! plays a scripted model over real HTTP. With `ANTHROPIC_API_KEY` (or `OPENAI_API_KEY`,
//! optionally with `OPENAI_BASE_URL` / `OPENAI_MODEL`) a real model does the extraction.
//!
//! The answer is asked for as a `final_answer` tool whose input schema is `Invoice`'s; a wrong
//! answer goes back to the model with what is wrong (the scripted model makes one mistake to
//! show it), and the outcome carries the parsed struct.

mod common;

use std::sync::Arc;

use agent_loop::agent::{RunOptions, StructuredOutput};
use agent_loop::testing::ScriptedResponse;
use agent_loop::RequestSettings;
use agent_loop::{Agent, LlmClient, RunOutcome};
use serde::Deserialize;
use serde_json::json;

/// The text the record is extracted from.
pub const TEXT: &str = "Invoice INV-2041 from Acme Tools Ltd, dated 3 March 2026: 4 claw \
                        hammers at 12.50 EUR each and 1 toolbox at 39.90 EUR. Total 89.90 EUR.";

/// The record.
#[derive(Debug, Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct Invoice {
    /// The invoice number, as written.
    pub number: String,
    /// Who issued it.
    pub vendor: String,
    /// The date, as YYYY-MM-DD.
    pub date: String,
    /// Every line of the invoice.
    pub lines: Vec<Line>,
    /// The total, in the invoice's currency.
    pub total: f64,
    /// ISO 4217 currency code.
    pub currency: String,
}

/// One line of an invoice.
#[derive(Debug, Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct Line {
    /// What was sold.
    pub item: String,
    /// How many.
    pub quantity: u32,
    /// Price of one.
    pub unit_price: f64,
}

/// What the mock model answers when no API key is set: first a record with the quantity as
/// text (refused by the schema), then the corrected one.
pub fn script() -> Vec<ScriptedResponse> {
    let lines = |quantity: serde_json::Value| {
        json!([
            {"item": "claw hammer", "quantity": quantity, "unit_price": 12.5},
            {"item": "toolbox", "quantity": 1, "unit_price": 39.9}
        ])
    };
    let invoice = |quantity| {
        json!({
            "number": "INV-2041", "vendor": "Acme Tools Ltd", "date": "2026-03-03",
            "lines": lines(quantity), "total": 89.9, "currency": "EUR"
        })
    };
    vec![
        ScriptedResponse::tool_call("call_1", "final_answer", invoice(json!("four"))),
        ScriptedResponse::tool_call("call_2", "final_answer", invoice(json!(4))),
    ]
}

pub fn build_agent(client: Arc<dyn LlmClient>) -> Result<Agent, agent_loop::Error> {
    Agent::builder(client)
        .system("You extract records from documents exactly as written.")
        .settings(RequestSettings::new().temperature(0.0))
        .max_turns(4)
        .build()
}

pub async fn run(
    agent: &mut Agent,
    on_event: impl FnMut(&agent_loop::AgentEvent) + Send,
) -> Result<RunOutcome, agent_loop::Error> {
    let output = StructuredOutput::of::<Invoice>()?
        .description("Give the extracted invoice by calling this tool once.");
    let prompt = format!("Extract the invoice:\n\n{TEXT}");
    Ok(agent
        .run_to_end_with(prompt, RunOptions::new().output(output), on_event)
        .await)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = common::model(script()).await;
    println!("Model: {}", model.description);
    println!("Text: {TEXT}");
    let mut agent = build_agent(model.client.clone())?;
    let outcome = run(&mut agent, |event| {
        common::render(event);
    })
    .await?;
    let invoice: Invoice = outcome.parse_output()?;
    println!("\nParsed: {invoice:#?}");
    Ok(())
}
