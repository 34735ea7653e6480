//! With content capture off (the default), nothing a caller or the model said reaches the
//! tracing data: no prompt, answer, tool argument, tool result or retry/repair text, in any
//! span's fields or any event's (the advisory GHSA-3gh4-cghq-f8v4, on another project's OTel
//! spans). The run goes through the served Open Responses endpoint, with every tracing
//! callsite enabled.

use std::sync::{Arc, Mutex};

use agent_loop::agent::RunPolicy;
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, LlmError, ToolError};
use agent_loop_serve::{responses, AgentService};
use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use tower::ServiceExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every field value recorded anywhere, as "where: field = value".
#[derive(Clone, Default)]
struct Everything(Arc<Mutex<Vec<String>>>);

struct Values<'a>(&'a str, &'a mut Vec<String>);

impl Visit for Values<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.1
            .push(format!("{}: {} = {value:?}", self.0, field.name()));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.1
            .push(format!("{}: {} = {value}", self.0, field.name()));
    }
}

impl Subscriber for Everything {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut seen = self.0.lock().unwrap();
        let name = attrs.metadata().name();
        attrs.record(&mut Values(name, &mut seen));
        Id::from_u64(seen.len() as u64 + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut Values("span record", &mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let name = event.metadata().target();
        event.record(&mut Values(name, &mut self.0.lock().unwrap()));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// What callers and the model say in the run below.
const SECRETS: [&str; 5] = [
    "PROMPT-SECRET",
    "ANSWER-SECRET",
    "ARGUMENT-SECRET",
    "RESULT-SECRET",
    "HISTORY-SECRET",
];

/// The model's own words, quoted by the provider in the error of a malformed call, which the
/// retry sends back as the repair note.
const REPAIR: &str = "REPAIR-SECRET";

/// Runs one request through the endpoint with every callsite enabled; gives what tracing saw.
fn traced_run() -> Vec<String> {
    let everything = Everything::default();
    let _guard = tracing::subscriber::set_default(everything.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = runtime.block_on(async {
        let service = AgentService::new(|| {
            let lookup = FnTool::new("lookup", "Looks up.", |_input: Value, _ctx| {
                std::future::ready(Ok::<_, ToolError>("RESULT-SECRET".to_owned()))
            });
            Agent::builder(ScriptedClient::new([
                // The model's malformed call, quoted by the provider: a repair note goes back.
                ScriptedResponse::error(LlmError::ModelFailure {
                    reason: "MALFORMED_FUNCTION_CALL".into(),
                    message: "Malformed function call: lookup(q='REPAIR-SECRET')".into(),
                }),
                ScriptedResponse::text("Let me look: ANSWER-SECRET").then_tool_call(
                    "call_1",
                    "lookup",
                    json!({"q": "ARGUMENT-SECRET"}),
                ),
                ScriptedResponse::text("Found it: ANSWER-SECRET."),
            ]))
            .tool(lookup)
            .policy(
                RunPolicy::new()
                    .retry(RetryPolicy::default().initial_backoff(std::time::Duration::ZERO)),
            )
        })
        .allow_anonymous();
        let request = json!({"model": "m", "input": [
            {"role": "user", "content": "HISTORY-SECRET question"},
            {"role": "assistant", "content": "HISTORY-SECRET answer"},
            {"role": "user", "content": "PROMPT-SECRET"},
        ]});
        let request = Request::post("/v1/responses")
            .header("content-type", "application/json")
            .body(Body::from(request.to_string()))
            .unwrap();
        let response = responses::router(&service).oneshot(request).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice::<Value>(&body).unwrap()
    });
    // The run did go through every part: the retry, the tool, the answer.
    assert_eq!(body["status"], "completed", "{body}");
    assert!(body.to_string().contains("RESULT-SECRET"), "{body}");
    let seen = everything.0.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|s| s.contains("execute_tool") || s.contains("lookup")),
        "the spans were recorded: {seen:#?}"
    );
    seen
}

#[test]
fn with_content_capture_off_no_content_reaches_a_span_or_an_event() {
    let seen = traced_run();
    let leaks: Vec<&String> = seen
        .iter()
        .filter(|s| SECRETS.iter().any(|secret| s.contains(secret)))
        .collect();
    assert!(leaks.is_empty(), "content reached tracing: {leaks:#?}");
}

/// A `ModelFailure`'s message quotes the model's malformed call (Gemini's `finishMessage`
/// does), and the core's warning when it re-sends the turn ("model stream broke; re-sending
/// the turn") is a span event under an OpenTelemetry layer: with content capture off it says
/// the provider's reason only.
#[test]
fn with_content_capture_off_no_repair_text_reaches_a_span_or_an_event() {
    let seen = traced_run();
    let leaks: Vec<&String> = seen.iter().filter(|s| s.contains(REPAIR)).collect();
    assert!(leaks.is_empty(), "repair text reached tracing: {leaks:#?}");
}
