//! The Open Responses endpoint against its clients: the official `openai` Python SDK, the
//! core's own Responses client (`OpenAiClient::responses`), and raw HTTP for the refusals.

mod common;

use agent_loop::agent::RunOptions;
use agent_loop::error::ApiError;
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentEvent, LlmClient, LlmError, LlmEvent, Message, OpenAiClient, RunOutcome,
    StopReason, Termination, ToolError,
};
use agent_loop_serve::responses::{router, ResponsesEncoder, ResponsesRequest};
use agent_loop_serve::{AgentService, Limits};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An agent that adds: the model calls `add` with 2 and 3, then says the sum.
fn adder() -> agent_loop::AgentBuilder {
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("2 + 3 = 5"),
    ]);
    let add = FnTool::new("add", "Adds a and b.", |input: Value, _ctx| async move {
        let sum = input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0);
        Ok::<_, ToolError>(sum.to_string())
    });
    Agent::builder(model).tool(add)
}

async fn served(service: AgentService) -> String {
    common::serve(router(&service)).await
}

#[tokio::test]
async fn the_openai_python_client_streams_and_reads_whole_responses() {
    let Some(python) = common::python("openai") else {
        return;
    };
    let url = served(AgentService::new(adder)).await;
    let seen = common::python_json(&python, "openai_responses.py", &[&format!("{url}/v1")]).await;

    let stream = &seen["stream"];
    let types: Vec<&str> = stream["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"response.created"));
    assert_eq!(types.last(), Some(&"response.completed"));
    for expected in [
        "response.output_item.added",
        "response.function_call_arguments.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
    ] {
        assert!(
            types.contains(&expected),
            "{expected} missing from {types:?}"
        );
    }
    assert_eq!(stream["text"], "2 + 3 = 5");
    assert_eq!(
        stream["calls"],
        json!([{"call_id": "call_1", "name": "add", "arguments": "{\"a\":2,\"b\":3}"}])
    );
    assert_eq!(
        stream["outputs"],
        json!([{"call_id": "call_1", "output": "5"}])
    );
    assert_eq!(stream["status"], "completed");
    assert_eq!(stream["output_text"], "2 + 3 = 5");
    assert_eq!(
        stream["output_types"],
        json!(["function_call", "function_call_output", "message"])
    );

    let whole = &seen["whole"];
    assert_eq!(whole["status"], "completed");
    assert_eq!(whole["model"], "served-agent");
    assert_eq!(whole["output_text"], "2 + 3 = 5");

    let bad = &seen["bad"];
    assert_eq!(bad["status"], 400);
    assert_eq!(bad["type"], "invalid_request_error");
    assert_eq!(bad["param"], "input");
}

#[tokio::test]
async fn the_crates_own_responses_client_reads_the_calls_and_the_text() {
    let url = served(AgentService::new(adder)).await;
    let client = OpenAiClient::new("unused")
        .base_url(format!("{url}/v1"))
        .model("served-agent")
        .responses();
    let request = ModelRequest::new(vec![Message::user("What is 2 + 3?")]);
    let events: Vec<_> = client.stream(&request).collect().await;
    let events: Vec<LlmEvent> = events.into_iter().map(|e| e.unwrap()).collect();
    let calls: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ToolCallStart { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(calls, [("call_1", "add")]);
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "2 + 3 = 5");
    assert!(matches!(
        events.last(),
        Some(LlmEvent::MessageStop {
            stop_reason: StopReason::ToolUse
        })
    ));
}

#[tokio::test]
async fn an_agent_uses_a_served_agent_as_its_model() {
    let url = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([ScriptedResponse::text(
            "Paris is the capital.",
        )]))
    }))
    .await;
    let model = OpenAiClient::new("unused")
        .base_url(format!("{url}/v1"))
        .model("served-agent")
        .responses();
    let mut agent = Agent::builder(model).build().unwrap();
    let outcome = agent
        .run_to_end("Capital of France?", RunOptions::new())
        .await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Paris is the capital.");
}

async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/responses"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn bad_requests_get_the_spec_error_body() {
    let url = served(AgentService::new(adder).limits(Limits::new().max_body_bytes(1000))).await;
    let cases: [(&str, u16, Option<&str>); 7] = [
        ("{not json", 400, None),
        ("[]", 400, None),
        (r#"{"model": "m"}"#, 400, Some("input")),
        (
            r#"{"input": "hi", "tools": [{"type": "function", "name": "x"}]}"#,
            400,
            Some("tools"),
        ),
        (
            r#"{"input": "hi", "previous_response_id": "resp_1"}"#,
            400,
            Some("previous_response_id"),
        ),
        (
            r#"{"input": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]}"#,
            400,
            Some("input[0].role"),
        ),
        (
            r#"{"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}"#,
            400,
            Some("input"),
        ),
    ];
    for (body, status, param) in cases {
        let (got, error) = post(&url, body).await;
        assert_eq!(got, status, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{body}");
        assert!(error["error"]["message"].as_str().unwrap().len() > 10);
        assert_eq!(error["error"]["param"], json!(param), "{body}");
    }
    let big = format!(r#"{{"input": "{}"}}"#, "x".repeat(2000));
    let (status, error) = post(&url, big).await;
    assert_eq!(status, 413);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1000 bytes"));
}

#[tokio::test]
async fn a_run_past_the_limit_is_refused_with_429() {
    let service = AgentService::new(|| {
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("thinking…").then_stall()
        ]))
    })
    .limits(Limits::new().max_concurrent_runs(1));
    let url = served(service).await;
    let first = reqwest::Client::new()
        .post(format!("{url}/v1/responses"))
        .json(&json!({"input": "go", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let mut body = first.bytes_stream();
    let opening = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&opening).contains("response.created"));
    let (status, error) = post(&url, r#"{"input": "me too"}"#).await;
    assert_eq!(status, 429);
    assert_eq!(error["error"]["type"], "rate_limit_error");
}

/// Sends on its channel when dropped: a tool's future, dropped when its run is cancelled.
struct OnDrop(tokio::sync::mpsc::UnboundedSender<()>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

// A current-thread runtime (tokio::test's): the server drops the response stream (the run, its
// tool, the run slot) in one go before this test's task runs again.
#[tokio::test]
async fn a_client_leaving_a_stream_cancels_the_run_and_frees_its_slot() {
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (dropped_tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let runs = Arc::new(AtomicUsize::new(0));
    let service = AgentService::new(move || {
        let (started_tx, dropped_tx) = (started_tx.clone(), dropped_tx.clone());
        // The first run's tool waits forever (until dropped); the second run just answers.
        let wait = FnTool::new("wait", "Waits.", move |_: Value, _ctx| {
            let guard = OnDrop(dropped_tx.clone());
            let _ = started_tx.send(());
            async move {
                let _guard = guard;
                std::future::pending::<Result<String, ToolError>>().await
            }
        });
        let model = match runs.fetch_add(1, Ordering::SeqCst) {
            0 => ScriptedClient::new([
                ScriptedResponse::tool_call("c1", "wait", json!({})),
                ScriptedResponse::text("unreachable"),
            ]),
            _ => ScriptedClient::new([ScriptedResponse::text("second run")]),
        };
        Agent::builder(model).tool(wait)
    })
    .limits(Limits::new().max_concurrent_runs(1));
    let url = served(service).await;

    let first = reqwest::Client::new()
        .post(format!("{url}/v1/responses"))
        .json(&json!({"input": "wait", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let mut body = first.bytes_stream();
    assert!(body.next().await.is_some());
    // The run is in its tool, holding the only slot: another run is refused meanwhile.
    started.recv().await.unwrap();
    let (status, _) = post(&url, r#"{"input": "me too"}"#).await;
    assert_eq!(status, 429);

    // The client goes away mid-stream: the server drops the run, its tool's future with it.
    drop(body);
    dropped.recv().await.unwrap();
    assert!(started.try_recv().is_err(), "the tool ran once");

    // The slot is free again: the next run is served to its end.
    let (status, response) = post(&url, r#"{"input": "again"}"#).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0]["text"], "second run");
}

#[tokio::test]
async fn a_failed_run_is_a_failed_response_with_its_error() {
    let url = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([ScriptedResponse::error(
            LlmError::Api(Box::new(ApiError::new(401, "bad key for the model"))),
        )]))
    }))
    .await;
    let (status, response) = post(&url, r#"{"input": "hi"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(response["status"], "failed");
    assert!(response["error"]["message"]
        .as_str()
        .unwrap()
        .contains("bad key for the model"));
}

// ---- sans-IO properties ----

/// The outcome of a completed run (made by running one: the type has no public constructor).
fn completed() -> RunOutcome {
    static OUTCOME: std::sync::OnceLock<RunOutcome> = std::sync::OnceLock::new();
    OUTCOME
        .get_or_init(|| {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("ok")]))
                    .build()
                    .unwrap();
                agent.run_to_end("hi", RunOptions::new()).await
            })
        })
        .clone()
}

fn any_event() -> impl Strategy<Value = AgentEvent> {
    let id = prop::sample::select(vec!["c0", "c1", "c2"]).prop_map(str::to_owned);
    let text = prop::sample::select(vec!["", "a", "bc", "{\"x\":", "1}"]).prop_map(str::to_owned);
    prop_oneof![
        (1u32..4).prop_map(|turn| AgentEvent::TurnStart { turn }),
        text.clone().prop_map(|text| AgentEvent::TextDelta { text }),
        id.clone().prop_map(|id| AgentEvent::ToolCallStart {
            id,
            name: "add".into()
        }),
        (id.clone(), text.clone())
            .prop_map(|(id, partial_json)| AgentEvent::ToolInputDelta { id, partial_json }),
        id.clone().prop_map(|id| AgentEvent::ToolCall {
            id,
            name: "add".into(),
            input: json!({"a": 1})
        }),
        (id, any::<bool>()).prop_map(|(id, is_error)| AgentEvent::ToolResult {
            id,
            name: "add".into(),
            content: "2".into(),
            is_error,
            duration: std::time::Duration::ZERO,
        }),
        (1u32..4).prop_map(|turn| AgentEvent::TurnEnd {
            turn,
            stop_reason: StopReason::EndTurn,
            usage: Default::default(),
            cost: Default::default(),
        }),
    ]
}

proptest! {
    /// Whatever the events, in any order: sequence numbers count up from 0, every item added
    /// is done exactly once (after it was added, before the end), the terminal event comes
    /// exactly once and last, and the final response lists every item done, in order.
    #[test]
    fn the_stream_is_well_formed_for_any_events(events in prop::collection::vec(any_event(), 0..40)) {
        let mut encoder = ResponsesEncoder::new("resp_t", "m", 0);
        let mut out = encoder.start();
        for event in &events {
            out.extend(encoder.push(event));
        }
        out.extend(encoder.push(&AgentEvent::Finished(completed())));
        out.extend(encoder.push(&AgentEvent::TextDelta { text: "late".into() }));
        let mut open = std::collections::BTreeSet::new();
        let mut done = Vec::new();
        for (n, event) in out.iter().enumerate() {
            prop_assert_eq!(event["sequence_number"].as_u64(), Some(n as u64));
            let index = event["output_index"].as_u64();
            match event["type"].as_str().unwrap() {
                "response.output_item.added" => prop_assert!(open.insert(index.unwrap())),
                "response.output_item.done" => {
                    prop_assert!(open.remove(&index.unwrap()));
                    done.push(event["item"].clone());
                }
                "response.output_text.delta" | "response.function_call_arguments.delta" => {
                    prop_assert!(open.contains(&index.unwrap()))
                }
                _ => {}
            }
        }
        prop_assert!(open.is_empty());
        let last = out.last().unwrap();
        prop_assert!(last["type"] == "response.incomplete" || last["type"] == "response.completed");
        let terminal = out.iter().filter(|e| e["response"]["status"] != "in_progress" && e.get("response").is_some()).count();
        prop_assert_eq!(terminal, 1);
        let mut output: Vec<Value> = last["response"]["output"].as_array().unwrap().clone();
        output.sort_by_key(|i| i["id"].as_str().unwrap().to_owned());
        done.sort_by_key(|i| i["id"].as_str().unwrap().to_owned());
        prop_assert_eq!(output, done);
    }

    /// Any bytes: a request or a 4xx error, never a panic.
    #[test]
    fn any_body_parses_or_is_refused(body in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Err(e) = ResponsesRequest::from_slice(&body) {
            prop_assert_eq!(e.status, 400);
        }
    }

    /// Any JSON input list of plausible items: a request whose new message is the last item's
    /// text, or a 400 naming a field.
    #[test]
    fn any_input_list_parses_or_names_its_fault(items in prop::collection::vec(prop_oneof![
        Just(json!({"role": "user", "content": "u"})),
        Just(json!({"role": "assistant", "content": [{"type": "output_text", "text": "a"}]})),
        Just(json!({"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"})),
        Just(json!({"type": "function_call", "call_id": "c", "name": "n", "arguments": "{"})),
        Just(json!({"type": "function_call_output", "call_id": "c", "output": "o"})),
        Just(json!({"type": "reasoning"})),
        Just(json!({"role": "developer", "content": "d"})),
        Just(json!(42)),
    ], 0..8)) {
        let body = json!({"input": items}).to_string();
        match ResponsesRequest::from_slice(body.as_bytes()) {
            Ok(request) => {
                prop_assert_eq!(items.last().unwrap()["role"].as_str(), Some("user"));
                prop_assert_eq!(request.input.len(), 1);
            }
            Err(e) => {
                prop_assert_eq!(e.status, 400);
                prop_assert!(e.param.is_some());
            }
        }
    }
}
