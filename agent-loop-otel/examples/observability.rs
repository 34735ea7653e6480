//! OpenTelemetry: an agent's run as GenAI spans (`invoke_agent`, `chat`, `execute_tool`).
//!
//! `cargo run -p agent-loop-otel --example observability` runs offline (the crate's loopback
//! mock server plays the model; the first call is refused with a 529 and retried) and prints
//! each span as it ends: its name, kind, parent and attributes. With
//! `OTEL_EXPORTER_OTLP_ENDPOINT` set (say `http://localhost:4318`, a collector or Jaeger),
//! it exports them there over OTLP/HTTP instead, through `agent_loop_otel::init()`.
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` adds the messages to the spans.

#[path = "../../examples/common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::testing::{MockResponse, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, ToolError};
use agent_loop_otel as otel;
use futures::StreamExt;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde::Deserialize;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct AddInput {
    /// The numbers to add.
    numbers: Vec<f64>,
}

/// Prints each finished span: the SDK hands it over as the span ends.
#[derive(Debug)]
struct PrintSpans;

impl SpanExporter for PrintSpans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        for span in batch {
            let mut line = format!(
                "span {:?} ({:?}) id {} parent {}",
                span.name,
                span.span_kind,
                span.span_context.span_id(),
                span.parent_span_id
            );
            for kv in &span.attributes {
                let _ = write!(line, "\n    {} = {}", kv.key, kv.value);
            }
            println!("{line}");
        }
        Ok(())
    }
}

/// Where the spans go, and how to flush them at the end.
enum Telemetry {
    Otlp(otel::OtelGuard),
    Stdout(SdkTracerProvider),
}

fn telemetry() -> Result<Telemetry, Box<dyn std::error::Error>> {
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        println!("Exporting spans over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT).");
        return Ok(Telemetry::Otlp(otel::init()?));
    }
    println!("OTEL_EXPORTER_OTLP_ENDPOINT is not set: printing the spans.");
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(PrintSpans)
        .build();
    let subscriber = tracing_subscriber::registry().with(otel::layer(&provider));
    tracing::subscriber::set_global_default(subscriber)?;
    Ok(Telemetry::Stdout(provider))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let telemetry = telemetry()?;

    // The mock model: busy (529) at first, then a tool call, then the answer.
    let script = vec![
        MockResponse::status(529),
        MockResponse::stream(
            ScriptedResponse::tool_call("call_1", "add", json!({"numbers": [1.5, 2.5, 38]}))
                .id("msg_1")
                .usage_tokens(180, 24),
        ),
        MockResponse::stream(
            ScriptedResponse::text("1.5 + 2.5 + 38 = 42.")
                .id("msg_2")
                .usage_tokens(230, 12),
        ),
    ];
    let model = common::model_with_responses(script).await;
    println!("Model: {}", model.description);

    let add = FnTool::new("add", "Adds numbers.", |input: AddInput, _ctx| async move {
        Ok::<_, ToolError>(common::format_number(input.numbers.iter().sum()))
    });
    let mut agent = Agent::builder(model.client.clone())
        .name("adder")
        .system("You add numbers with the add tool.")
        .tool(add)
        .policy(
            RunPolicy::new().retry(
                RetryPolicy::default()
                    .initial_backoff(Duration::from_millis(10))
                    .jitter(Jitter::None),
            ),
        )
        .build()?;
    let mut events = std::pin::pin!(agent.run("What is 1.5 + 2.5 + 38?"));
    while let Some(event) = events.next().await {
        if let Some(outcome) = common::render(&event) {
            println!("\n[{}]", outcome.termination);
            println!(
                "{} tokens, cost {} (of which failed attempts {})",
                outcome.usage.total_tokens(),
                outcome.cost,
                outcome.failed_cost
            );
        }
    }

    // Sends what is pending before the program ends.
    match telemetry {
        Telemetry::Otlp(guard) => guard.shutdown()?,
        Telemetry::Stdout(provider) => provider.shutdown()?,
    }
    Ok(())
}
