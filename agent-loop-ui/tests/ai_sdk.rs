//! The AI SDK UI message stream (`agent_loop_ui::ai_sdk`): the encoder's chunk sequences for
//! real runs, the request parser, the stream's invariants over any events (proptest), and the
//! `ai` package's own client reading `respond` over loopback (tests/js/ai-sdk-client.mjs).

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::agent::{Resolution, Resolutions};
use agent_loop::media::MediaSource;
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::session::MemoryStore;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentEvent, ContentBlock, LlmError, PausedRun, Role, Termination, ToolError, UserInput,
};
use agent_loop_ui::ai_sdk::{
    encode_stream, respond, respond_with, sse_body, ChatRequest, DataChunk, FinishReason,
    UiMessageChunk, UiStreamEncoder, DEFAULT_DENIAL, STREAM_HEADER,
};
use agent_loop_ui::{NewMessageWhilePaused, RespondOptions, UiTurn};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// Helpers.

/// A chunk in one line: its type, then its fields' values in a fixed order.
fn show(chunk: &UiMessageChunk) -> String {
    let value = serde_json::to_value(chunk).expect("a chunk serializes");
    let mut out = value["type"].as_str().unwrap_or("?").to_owned();
    for key in [
        "messageId",
        "id",
        "toolCallId",
        "toolName",
        "approvalId",
        "delta",
        "inputTextDelta",
        "input",
        "output",
        "errorText",
        "finishReason",
        "reason",
        "data",
    ] {
        match value.get(key) {
            None => {}
            Some(Value::String(s)) => {
                out.push(' ');
                out.push_str(s);
            }
            Some(other) => {
                out.push(' ');
                out.push_str(&other.to_string());
            }
        }
    }
    out
}

fn shows(chunks: &[UiMessageChunk]) -> Vec<String> {
    chunks.iter().map(show).collect()
}

fn encode_all(encoder: &mut UiStreamEncoder, events: &[AgentEvent]) -> Vec<UiMessageChunk> {
    events.iter().flat_map(|e| encoder.encode(e)).collect()
}

fn delete_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "delete",
        "Deletes a file.",
        |input: Value, _ctx| async move {
            Ok::<_, ToolError>(format!("deleted {}", input["path"].as_str().unwrap_or("?")))
        },
    )
}

fn lookup_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "lookup",
        "Looks a word up.",
        |input: Value, _ctx| async move {
            Ok::<_, ToolError>(format!(
                "{} means a greeting",
                input["word"].as_str().unwrap_or("?")
            ))
        },
    )
}

fn failing_tool() -> impl agent_loop::Tool {
    FnTool::new("fail", "Always fails.", |_: Value, _ctx| async move {
        Err::<String, _>(ToolError::new("the disk is full"))
    })
}

async fn run_events(agent: &mut Agent, input: &str) -> Vec<AgentEvent> {
    agent.run(input).collect().await
}

fn paused_of(events: &[AgentEvent]) -> PausedRun {
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => match &outcome.termination {
            Termination::Paused(paused) => (**paused).clone(),
            other => panic!("the run did not pause: {other:?}"),
        },
        other => panic!("no Finished: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The encoder, on real runs.

#[tokio::test]
async fn text_only_is_one_step_with_one_text_part() {
    let client = ScriptedClient::new([ScriptedResponse::text("Hello there").chunked(5)]);
    let mut agent = Agent::builder(client).build().unwrap();
    let events = run_events(&mut agent, "hi").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    assert_eq!(
        shows(&chunks),
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Hello",
            "text-delta text-1  ther",
            "text-delta text-1 e",
            "text-end text-1",
            "finish-step",
            "finish stop",
        ]
    );
}

#[tokio::test]
async fn the_message_id_is_sent_when_set() {
    let client = ScriptedClient::new([ScriptedResponse::text("Hi")]);
    let mut agent = Agent::builder(client).build().unwrap();
    let events = run_events(&mut agent, "hi").await;
    let chunks = encode_all(&mut UiStreamEncoder::new().message_id("m-7"), &events);
    assert_eq!(
        chunks[0],
        UiMessageChunk::Start {
            message_id: Some("m-7".into())
        }
    );
}

#[tokio::test]
async fn reasoning_then_text_are_two_parts_the_first_closed_when_the_second_starts() {
    let client =
        ScriptedClient::new([ScriptedResponse::thinking("Think.", "sig").then_text("Answer.")]);
    let mut agent = Agent::builder(client).build().unwrap();
    let events = run_events(&mut agent, "hi").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    assert_eq!(
        shows(&chunks),
        [
            "start",
            "start-step",
            "reasoning-start reasoning-1",
            "reasoning-delta reasoning-1 Think.",
            "reasoning-end reasoning-1",
            "text-start text-1",
            "text-delta text-1 Answer.",
            "text-end text-1",
            "finish-step",
            "finish stop",
        ]
    );
}

#[tokio::test]
async fn a_streamed_tool_call_its_result_and_the_final_text_make_two_steps() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Let me look.")
            .then_tool_call("c1", "lookup", json!({"word": "hi"}))
            .chunked(6),
        ScriptedResponse::text("It is a greeting."),
    ]);
    let mut agent = Agent::builder(client).tool(lookup_tool()).build().unwrap();
    let events = run_events(&mut agent, "What is hi?").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown = shows(&chunks);
    // The arguments arrive in fragments, which the client reassembles: they add up to the
    // call's JSON.
    let fragments: String = chunks
        .iter()
        .filter_map(|c| match c {
            UiMessageChunk::ToolInputDelta {
                input_text_delta, ..
            } => Some(input_text_delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        shown
            .iter()
            .filter(|s| s.starts_with("tool-input-delta"))
            .count()
            > 1,
        "{shown:#?}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&fragments).unwrap(),
        json!({"word": "hi"})
    );
    let without_fragments: Vec<&str> = shown
        .iter()
        .map(String::as_str)
        .filter(|s| !s.starts_with("tool-input-delta") && !s.starts_with("text-delta"))
        .collect();
    assert_eq!(
        without_fragments,
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-end text-1",
            "tool-input-start c1 lookup",
            "tool-input-available c1 lookup {\"word\":\"hi\"}",
            "tool-output-available c1 hi means a greeting",
            "finish-step",
            "start-step",
            "text-start text-2",
            "text-end text-2",
            "finish-step",
            "finish stop",
        ]
    );
}

#[tokio::test]
async fn a_failing_tool_ends_in_tool_output_error() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "fail", json!({})),
        ScriptedResponse::text("Sorry."),
    ]);
    let mut agent = Agent::builder(client).tool(failing_tool()).build().unwrap();
    let events = run_events(&mut agent, "go").await;
    let shown = shows(&encode_all(&mut UiStreamEncoder::new(), &events));
    let error = shown
        .iter()
        .find(|s| s.starts_with("tool-output-error c1"))
        .unwrap_or_else(|| panic!("{shown:#?}"));
    assert!(error.contains("the disk is full"), "{error}");
}

#[tokio::test]
async fn a_retry_mid_text_closes_the_voided_part_and_the_new_text_is_a_new_part() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Hel").then_fail(LlmError::Transport {
            message: "connection reset".into(),
        }),
        ScriptedResponse::text("Hello!"),
    ]);
    let mut agent = Agent::builder(client)
        .policy(
            RunPolicy::new()
                .retry(RetryPolicy::default().initial_backoff(Duration::from_millis(1))),
        )
        .build()
        .unwrap();
    let events = run_events(&mut agent, "hi").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown = shows(&chunks);
    assert_eq!(
        shown[..5],
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Hel",
            "text-end text-1",
        ]
    );
    let UiMessageChunk::Data(retry) = &chunks[5] else {
        panic!("{shown:#?}")
    };
    assert_eq!(retry.name, "retry");
    assert_eq!(retry.transient, Some(true));
    assert_eq!(retry.data["attempt"], 1);
    assert!(retry.data["error"]
        .as_str()
        .unwrap()
        .contains("connection reset"));
    assert!(retry.data["delayMs"].is_u64());
    assert_eq!(
        shown[6..],
        [
            "text-start text-2",
            "text-delta text-2 Hello!",
            "text-end text-2",
            "finish-step",
            "finish stop",
        ]
    );
}

/// The agent of the approval tests: `delete` needs a person's verdict.
fn approval_agent(client: ScriptedClient) -> Agent {
    Agent::builder(client)
        .tool(delete_tool())
        .policy(RunPolicy::new().require_approval("delete"))
        .build()
        .unwrap()
}

fn approval_script() -> ScriptedClient {
    ScriptedClient::new([
        ScriptedResponse::text("I will delete it.").then_tool_call(
            "c1",
            "delete",
            json!({"path": "a.txt"}),
        ),
        ScriptedResponse::text("Done."),
    ])
}

#[tokio::test]
async fn a_pause_for_approval_asks_for_it_and_its_approval_continues_the_same_step() {
    let mut agent = approval_agent(approval_script());
    let events = run_events(&mut agent, "Delete a.txt").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown = shows(&chunks);
    assert_eq!(
        shown
            .iter()
            .filter(|s| !s.starts_with("tool-input-delta"))
            .collect::<Vec<_>>(),
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 I will delete it.",
            "text-end text-1",
            "tool-input-start c1 delete",
            "tool-input-available c1 delete {\"path\":\"a.txt\"}",
            "tool-approval-request c1 c1",
            "finish-step",
            "finish tool-calls",
        ]
    );

    let paused = paused_of(&events);
    let answers = Resolutions::new().approve("c1");
    let resumed: Vec<AgentEvent> = agent.resume(&paused, answers.clone()).collect().await;
    let chunks = encode_all(
        &mut UiStreamEncoder::new().resuming(&paused, &answers),
        &resumed,
    );
    assert_eq!(
        shows(&chunks),
        [
            // No start-step: the paused step goes on, and the call's input is not sent again.
            "start",
            "tool-output-available c1 deleted a.txt",
            "finish-step",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Done.",
            "text-end text-1",
            "finish-step",
            "finish stop",
        ]
    );
}

#[tokio::test]
async fn a_denied_call_ends_in_tool_output_denied() {
    let mut agent = approval_agent(approval_script());
    let events = run_events(&mut agent, "Delete a.txt").await;
    let paused = paused_of(&events);
    let answers = Resolutions::new().deny("c1", "not that file");
    let resumed: Vec<AgentEvent> = agent.resume(&paused, answers.clone()).collect().await;
    let chunks = encode_all(
        // A resumption continues the client's message: no id of ours.
        &mut UiStreamEncoder::new()
            .message_id("ignored")
            .resuming(&paused, &answers),
        &resumed,
    );
    assert_eq!(
        shows(&chunks),
        [
            "start",
            "tool-output-denied c1",
            "finish-step",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Done.",
            "text-end text-1",
            "finish-step",
            "finish stop",
        ]
    );
}

#[tokio::test]
async fn an_error_closes_the_parts_and_the_step_before_the_error_chunk() {
    let client =
        ScriptedClient::new([
            ScriptedResponse::text("Hal").then_fail(LlmError::Api(Box::new(
                agent_loop::error::ApiError::new(401, "invalid x-api-key"),
            ))),
        ]);
    let mut agent = Agent::builder(client).build().unwrap();
    let events = run_events(&mut agent, "hi").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown = shows(&chunks);
    assert_eq!(
        shown[..5],
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Hal",
            "text-end text-1",
        ],
        "{shown:#?}"
    );
    assert_eq!(shown[5], "finish-step");
    assert!(
        shown[6].starts_with("error ") && shown[6].contains("invalid x-api-key"),
        "{shown:#?}"
    );
    assert_eq!(shown[7..], ["finish error"]);
}

#[tokio::test]
async fn a_cancelled_run_ends_in_abort() {
    let client = ScriptedClient::new([ScriptedResponse::text("Partial answ").then_stall()]);
    let mut agent = Agent::builder(client).build().unwrap();
    let (events, _) = common::run_cancelling(&mut agent, "long question", |event| {
        matches!(event, AgentEvent::TextDelta { .. })
    })
    .await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    assert_eq!(
        shows(&chunks),
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Partial answ",
            "text-end text-1",
            "finish-step",
            "abort",
            "finish other",
        ]
    );
}

#[tokio::test]
async fn nothing_comes_after_finish_and_a_stream_cut_short_is_closed() {
    let client = ScriptedClient::new([ScriptedResponse::text("Hi")]);
    let mut agent = Agent::builder(client).build().unwrap();
    let events = run_events(&mut agent, "hi").await;
    let mut encoder = UiStreamEncoder::new();
    encode_all(&mut encoder, &events);
    assert!(encoder.is_finished());
    assert!(encoder
        .encode(&AgentEvent::TextDelta {
            text: "late".into()
        })
        .is_empty());
    assert!(encoder.finish().is_empty());

    // Events that stop before Finished (the last two dropped: TurnEnd and Finished).
    let cut = &events[..events.len() - 2];
    let chunks: Vec<UiMessageChunk> =
        encode_stream(futures::stream::iter(cut.to_vec()), UiStreamEncoder::new())
            .collect()
            .await;
    assert_eq!(
        shows(&chunks),
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Hi",
            "text-end text-1",
            "finish-step",
            "finish other",
        ]
    );
}

#[test]
fn a_call_left_open_by_its_step_is_a_new_part_in_the_next() {
    // Not the grammar (a turn that starts before the last ended), but the client must never
    // see a call's input or output without its part in the step.
    let mut encoder = UiStreamEncoder::new();
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::ToolCallStart {
            id: "c1".into(),
            name: "t".into(),
        },
        AgentEvent::TurnStart { turn: 2 },
        AgentEvent::ToolCall {
            id: "c1".into(),
            name: "t".into(),
            input: json!({}),
        },
        AgentEvent::ToolResult {
            id: "c2".into(),
            name: "u".into(),
            content: "r".into(),
            is_error: false,
            duration: Duration::ZERO,
        },
    ];
    assert_eq!(
        shows(&encode_all(&mut encoder, &events)),
        [
            "start",
            "start-step",
            "tool-input-start c1 t",
            "finish-step",
            "start-step",
            "tool-input-start c1 t",
            "tool-input-available c1 t {}",
            // A result of a call never seen gets its part first (no input known).
            "tool-input-start c2 u",
            "tool-input-available c2 u null",
            "tool-output-available c2 r",
        ]
    );
}

#[tokio::test]
async fn the_sse_body_is_one_data_frame_per_chunk_then_done() {
    let chunks = vec![
        UiMessageChunk::Start { message_id: None },
        UiMessageChunk::Data(DataChunk::new("note", json!({"a": 1})).id("n1")),
    ];
    let frames: Vec<bytes::Bytes> = sse_body(futures::stream::iter(chunks)).collect().await;
    let text: String = frames
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    assert_eq!(
        text,
        "data: {\"type\":\"start\"}\n\n\
         data: {\"type\":\"data-note\",\"id\":\"n1\",\"data\":{\"a\":1}}\n\n\
         data: [DONE]\n\n"
    );
}

#[test]
fn chunks_deserialize_as_the_client_sends_them() {
    let chunk: UiMessageChunk = serde_json::from_value(json!({
        "type": "finish", "finishReason": "tool-calls", "messageMetadata": {"x": 1}
    }))
    .unwrap();
    assert_eq!(
        chunk,
        UiMessageChunk::Finish {
            finish_reason: Some(FinishReason::ToolCalls)
        }
    );
    let chunk: UiMessageChunk = serde_json::from_value(json!({
        "type": "tool-approval-request", "approvalId": "a1", "toolCallId": "c1"
    }))
    .unwrap();
    assert_eq!(
        chunk,
        UiMessageChunk::ToolApprovalRequest {
            approval_id: "a1".into(),
            tool_call_id: "c1".into(),
            signature: None,
        }
    );
    assert!(serde_json::from_value::<UiMessageChunk>(json!({"type": "no-such"})).is_err());
    assert!(serde_json::from_value::<UiMessageChunk>(json!({"type": "text-delta"})).is_err());
}

// ---------------------------------------------------------------------------------------
// The request.

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn body(messages: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({"id": "chat", "messages": messages, "trigger": "submit-message"}))
        .unwrap()
}

fn refusal(body: &[u8]) -> String {
    match ChatRequest::from_slice(body) {
        Err(e) => e.message().to_owned(),
        Ok(request) => match request.turn(None) {
            Err(e) => e.message().to_owned(),
            Ok(turn) => panic!("accepted: {turn:?}"),
        },
    }
}

#[test]
fn bad_bodies_are_refused_saying_what_is_wrong() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not JSON"),
        (b"[1, 2]".to_vec(), "JSON object"),
        (br#"{"id": "chat"}"#.to_vec(), "no `messages`"),
        (
            br#"{"messages": {}}"#.to_vec(),
            "`messages` must be an array",
        ),
        (
            br#"{"messages": [], "id": 5}"#.to_vec(),
            "`id` must be a string",
        ),
        (br#"{"messages": []}"#.to_vec(), "`messages` is empty"),
        (
            br#"{"messages": [7]}"#.to_vec(),
            "messages[0] must be an object",
        ),
        (
            br#"{"messages": [{"role": "robot", "parts": []}]}"#.to_vec(),
            "`role` must be",
        ),
        (
            br#"{"messages": [{"role": "user"}]}"#.to_vec(),
            "messages[0]: `parts` is missing",
        ),
        (
            br#"{"messages": [{"role": "user", "parts": [{"type": "text"}]}]}"#.to_vec(),
            "messages[0].parts[0]: `text` is missing",
        ),
        (
            br#"{"messages": [{"role": "user", "parts": [{"type": "text", "text": 3}]}]}"#.to_vec(),
            "`text` must be a string",
        ),
        (
            body(vec![
                user("u1", "hi"),
                json!({"id": "a1", "role": "assistant", "parts": []}),
            ]),
            "the last message must be a user message",
        ),
        (
            body(vec![
                json!({"id": "u1", "role": "user", "parts": [{"type": "reasoning", "text": "x"}]}),
            ]),
            "no text and no file",
        ),
        (
            body(vec![json!({"id": "u1", "role": "user", "parts": [
                {"type": "file", "mediaType": "text/plain", "url": "data:text/plain;base64,aGk="}]})]),
            "\"text/plain\" are not supported",
        ),
        (
            body(vec![json!({"id": "u1", "role": "user", "parts": [
                {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,aGk="}]})]),
            "messages[0].parts[0]",
        ),
        (
            body(vec![json!({"id": "u1", "role": "user", "parts": [
                {"type": "file", "mediaType": "image/png", "url": "ftp://x/y.png"}]})]),
            "an image must be",
        ),
        (
            body(vec![json!({"id": "u1", "role": "user", "parts": [
                {"type": "file", "mediaType": "application/pdf", "url": "data:application/pdf;base64,aGk="}]})]),
            "messages[0].parts[0]",
        ),
        (
            body(vec![
                json!({"id": "a1", "role": "assistant", "parts": [
                {"type": "tool-delete", "toolCallId": "c1", "state": "thinking"}]}),
                user("u1", "x"),
            ]),
            "\"thinking\" is not a tool part state",
        ),
        (
            body(vec![
                json!({"id": "a1", "role": "assistant", "parts": [
                {"type": "tool-delete", "state": "input-available"}]}),
                user("u1", "x"),
            ]),
            "`toolCallId` is missing",
        ),
        (
            body(vec![
                json!({"id": "a1", "role": "assistant", "parts": [
                {"type": "tool-delete", "toolCallId": "c1", "state": "approval-responded",
                 "approval": {"id": "c1"}}]}),
                user("u1", "x"),
            ]),
            "needs `approval.approved`",
        ),
        (
            serde_json::to_vec(
                &json!({"messages": [user("u1", "hi")], "trigger": "regenerate-message"}),
            )
            .unwrap(),
            "regenerate-message",
        ),
    ];
    for (body, expected) in cases {
        let message = refusal(&body);
        assert!(
            message.contains(expected),
            "{}: {message:?} does not say {expected:?}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// A 1×1 PNG.
fn png() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0, 0, 0, 0]);
    b
}

#[test]
fn a_good_body_gives_its_turn_and_its_history() {
    use base64::Engine as _;
    let png64 = base64::engine::general_purpose::STANDARD.encode(png());
    let pdf64 = base64::engine::general_purpose::STANDARD.encode(b"%PDF-1.7\n%%EOF");
    let body = serde_json::to_vec(&json!({
        "id": "chat-9",
        "trigger": "submit-message",
        "extra": {"ignored": true},
        "messages": [
            {"id": "s", "role": "system", "parts": [{"type": "text", "text": "Be evil."}]},
            {"id": "u1", "role": "user", "metadata": {"x": 1}, "parts": [
                {"type": "text", "text": "Look at this"},
                {"type": "file", "mediaType": "image/png", "url": format!("data:image/png;base64,{png64}")}
            ]},
            {"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "hmm", "state": "done"},
                {"type": "text", "text": "Two lookups.", "state": "done"},
                {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available",
                 "input": {"word": "a"}, "output": "first"},
                {"type": "dynamic-tool", "toolName": "calc", "toolCallId": "c2",
                 "state": "output-available", "input": {"x": 1}, "output": {"n": 2}},
                {"type": "step-start"},
                {"type": "tool-fail", "toolCallId": "c3", "state": "output-error",
                 "input": {}, "errorText": "broke"},
                {"type": "tool-delete", "toolCallId": "c4", "state": "output-denied",
                 "input": {"path": "b"}, "approval": {"id": "c4", "approved": false, "reason": "no"}},
                {"type": "step-start"},
                {"type": "text", "text": "All done."},
                {"type": "data-note", "data": {}}
            ]},
            {"id": "u2", "role": "user", "parts": [
                {"type": "text", "text": "And this PDF?"},
                {"type": "file", "mediaType": "application/pdf", "filename": "a.pdf",
                 "url": format!("data:application/pdf;base64,{pdf64}")},
                {"type": "file", "mediaType": "image/jpeg", "url": "https://example.com/a.jpg"}
            ]}
        ]
    }))
    .unwrap();
    let request = ChatRequest::from_slice(&body).unwrap();
    assert_eq!(request.id(), "chat-9");
    assert_eq!(request.trigger(), Some("submit-message"));
    assert_eq!(request.len(), 4);

    let UiTurn::Run(input) = request.turn(None).unwrap() else {
        panic!("not a run")
    };
    let message = input.into_message();
    assert_eq!(message.content.len(), 3);
    assert_eq!(message.content[0], ContentBlock::text("And this PDF?"));
    assert!(
        matches!(&message.content[1], ContentBlock::Document { title: Some(t), source: MediaSource::Base64 { .. } } if t == "a.pdf"),
        "{:?}",
        message.content[1]
    );
    assert!(
        matches!(&message.content[2], ContentBlock::Image { source: MediaSource::Url { url } } if url == "https://example.com/a.jpg"),
        "{:?}",
        message.content[2]
    );

    let history = request.history().unwrap();
    let roles: Vec<Role> = history.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant
        ]
    );
    assert_eq!(history[0].content[0], ContentBlock::text("Look at this"));
    assert!(
        matches!(&history[0].content[1], ContentBlock::Image { source: MediaSource::Base64 { media_type, .. } } if media_type == "image/png")
    );
    assert_eq!(
        history[1].content,
        [
            ContentBlock::text("Two lookups."),
            ContentBlock::ToolUse {
                id: "c1".into(),
                name: "lookup".into(),
                input: json!({"word": "a"})
            },
            ContentBlock::ToolUse {
                id: "c2".into(),
                name: "calc".into(),
                input: json!({"x": 1})
            },
        ]
    );
    assert_eq!(
        history[2].content,
        [
            ContentBlock::tool_result("c1", "first", false),
            ContentBlock::tool_result("c2", "{\"n\":2}", false),
        ]
    );
    assert_eq!(
        history[3].content,
        [
            ContentBlock::ToolUse {
                id: "c3".into(),
                name: "fail".into(),
                input: json!({})
            },
            ContentBlock::ToolUse {
                id: "c4".into(),
                name: "delete".into(),
                input: json!({"path": "b"})
            },
        ]
    );
    assert_eq!(
        history[4].content,
        [
            ContentBlock::tool_result("c3", "broke", true),
            ContentBlock::tool_result("c4", "no", true),
        ]
    );
    assert_eq!(history[5].content, [ContentBlock::text("All done.")]);
    assert_eq!(agent_loop::testing::history_violation(&history), None);
}

/// A paused run (c1 `delete` waiting for a verdict), and the agent that holds it.
async fn paused_run() -> (Agent, PausedRun) {
    let mut agent = approval_agent(approval_script());
    let events = run_events(&mut agent, "Delete a.txt").await;
    let paused = paused_of(&events);
    (agent, paused)
}

fn approval_body(part: Value) -> Vec<u8> {
    body(vec![
        user("u1", "Delete a.txt"),
        json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "I will delete it."},
            part,
            // A part of a call that does not wait is ignored.
            {"type": "tool-lookup", "toolCallId": "other", "state": "output-available",
             "input": {}, "output": "x"}
        ]}),
    ])
}

#[tokio::test]
async fn the_last_assistant_message_answers_the_waiting_calls() {
    let (_agent, paused) = paused_run().await;
    let part = |state: &str, extra: Value| {
        let mut p = json!({"type": "tool-delete", "toolCallId": "c1", "state": state,
                           "input": {"path": "a.txt"}});
        if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
            p.extend(extra);
        }
        p
    };
    let cases = [
        (
            part(
                "approval-responded",
                json!({"approval": {"id": "c1", "approved": true}}),
            ),
            Resolution::Approve,
        ),
        (
            part(
                "approval-responded",
                json!({"approval": {"id": "c1", "approved": false, "reason": "no way"}}),
            ),
            Resolution::Deny {
                reason: "no way".into(),
            },
        ),
        (
            part(
                "approval-responded",
                json!({"approval": {"id": "c1", "approved": false}}),
            ),
            Resolution::Deny {
                reason: DEFAULT_DENIAL.into(),
            },
        ),
        (
            part("output-available", json!({"output": "ran it myself"})),
            Resolution::Result {
                content: "ran it myself".into(),
                is_error: false,
            },
        ),
        (
            part("output-available", json!({"output": {"ok": true}})),
            Resolution::Result {
                content: "{\"ok\":true}".into(),
                is_error: false,
            },
        ),
        (
            part("output-error", json!({"errorText": "it broke"})),
            Resolution::Result {
                content: "it broke".into(),
                is_error: true,
            },
        ),
        (
            part("output-denied", json!({})),
            Resolution::Deny {
                reason: DEFAULT_DENIAL.into(),
            },
        ),
    ];
    for (part, expected) in cases {
        let request = ChatRequest::from_slice(&approval_body(part.clone())).unwrap();
        let turn = request.turn(Some(&paused)).unwrap();
        let UiTurn::Resume(answers) = turn else {
            panic!("{part}: not a resumption")
        };
        assert_eq!(answers.len(), 1, "{part}");
        assert_eq!(answers.get("c1"), Some(&expected), "{part}");
    }

    // Still waiting, or a new user message from a client that never saw the call: refused,
    // naming the call.
    for request in [
        approval_body(part(
            "approval-requested",
            json!({"approval": {"id": "c1"}}),
        )),
        body(vec![user("u1", "Delete a.txt"), user("u2", "never mind")]),
    ] {
        let request = ChatRequest::from_slice(&request).unwrap();
        let error = request.turn(Some(&paused)).unwrap_err();
        assert!(
            error
                .message()
                .contains("delete (call \"c1\") waits for a verdict"),
            "{error}"
        );
    }

    // A new user message after the call was shown: the person typed instead of answering.
    let mut typed: Value = serde_json::from_slice(&approval_body(part(
        "approval-requested",
        json!({"approval": {"id": "c1"}}),
    )))
    .unwrap();
    typed["messages"]
        .as_array_mut()
        .unwrap()
        .push(user("u2", "never mind"));
    let request = ChatRequest::from_slice(&serde_json::to_vec(&typed).unwrap()).unwrap();
    assert_eq!(
        request.turn(Some(&paused)).unwrap(),
        UiTurn::RunLeavingPause(UserInput::text("never mind"))
    );
}

#[test]
fn a_body_without_id_parses_and_an_empty_user_message_is_left_out_of_the_history() {
    let request = ChatRequest::from_slice(
        &serde_json::to_vec(&json!({"messages": [
            {"role": "user", "parts": []},
            {"role": "assistant", "parts": [{"type": "text", "text": "Hello?"}]},
            {"role": "user", "parts": [{"type": "text", "text": "Hi"}]}
        ]}))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(request.id(), "");
    assert_eq!(
        request.history().unwrap(),
        [agent_loop::Message::assistant("Hello?")]
    );
    assert_eq!(
        request.turn(None).unwrap(),
        UiTurn::Run(UserInput::text("Hi"))
    );
}

// ---------------------------------------------------------------------------------------
// Over loopback, read by the `ai` package.

/// A server answering POST /chat with `respond`, a fresh agent per request over `client`,
/// its conversation in `store` as the session "chat".
async fn server(client: ScriptedClient, store: Arc<MemoryStore>) -> String {
    serve_chat(client, store, None).await
}

/// [`server`] with `respond_with(options)`.
async fn server_with(
    client: ScriptedClient,
    store: Arc<MemoryStore>,
    options: RespondOptions,
) -> String {
    serve_chat(client, store, Some(options)).await
}

async fn serve_chat(
    client: ScriptedClient,
    store: Arc<MemoryStore>,
    options: Option<RespondOptions>,
) -> String {
    let app = axum::Router::new().route(
        "/chat",
        axum::routing::post(move |body: bytes::Bytes| {
            let client = client.clone();
            let store = store.clone();
            let options = options.clone();
            async move {
                let mut agent = Agent::builder(client)
                    .tool(delete_tool())
                    .tool(lookup_tool())
                    .policy(RunPolicy::new().require_approval("delete"))
                    .session(store, "chat")
                    .build()
                    .expect("the agent builds");
                match options {
                    Some(options) => respond_with(&mut agent, &body, &options).await,
                    None => respond(&mut agent, &body).await,
                }
            }
        }),
    );
    common::web::serve(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_package_reads_a_run_with_reasoning_text_and_a_tool_call() {
    if !common::web::node_available("the ai package reading a UI message stream", "ai") {
        return;
    }
    let client = ScriptedClient::new([
        ScriptedResponse::thinking("The user wants a lookup.", "sig")
            .then_text("Looking it up.")
            .then_tool_call("c1", "lookup", json!({"word": "hi"}))
            .chunked(4),
        ScriptedResponse::text("It means a greeting.").chunked(4),
    ]);
    let url = server(client, Arc::new(MemoryStore::new())).await;
    let seen = common::web::node_json("ai-sdk-client.mjs", &["read", &format!("{url}/chat")]).await;

    assert_eq!(seen["status"], 200, "{seen:#}");
    assert_eq!(seen["header"], STREAM_HEADER.1);
    assert_eq!(seen["contentType"], "text/event-stream");
    assert_eq!(
        seen["invalid"],
        json!([]),
        "every chunk validates: {seen:#}"
    );
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
    let chunks = seen["chunks"].as_array().unwrap();
    assert_eq!(chunks.first().unwrap()["type"], "start");
    assert_eq!(
        chunks.last().unwrap(),
        &json!({"type": "finish", "finishReason": "stop"})
    );

    let message = &seen["message"];
    assert_eq!(message["role"], "assistant");
    let parts: Vec<&Value> = message["parts"].as_array().unwrap().iter().collect();
    let types: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "step-start",
            "reasoning",
            "text",
            "tool-lookup",
            "step-start",
            "text"
        ],
        "{message:#}"
    );
    assert_eq!(parts[1]["text"], "The user wants a lookup.");
    assert_eq!(parts[1]["state"], "done");
    assert_eq!(parts[2]["text"], "Looking it up.");
    assert_eq!(parts[2]["state"], "done");
    assert_eq!(parts[3]["toolCallId"], "c1");
    assert_eq!(parts[3]["state"], "output-available");
    assert_eq!(parts[3]["input"], json!({"word": "hi"}));
    assert_eq!(parts[3]["output"], "hi means a greeting");
    assert_eq!(parts[5]["text"], "It means a greeting.");
    assert_eq!(parts[5]["state"], "done");
}

/// What the `ai` package's chat holds after sending one message to a server over `client`
/// (and, when the answer asks for an approval, after giving `verdict` and its resending).
async fn chat_round_trip(client: ScriptedClient, verdict: &str) -> Value {
    let url = server(client, Arc::new(MemoryStore::new())).await;
    common::web::node_json(
        "ai-sdk-client.mjs",
        &["chat", &format!("{url}/chat"), verdict],
    )
    .await
}

async fn approval_round_trip(verdict: &str) -> Value {
    chat_round_trip(approval_script(), verdict).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_error_the_ai_chat_keeps_the_message_with_its_parts_closed() {
    if !common::web::node_available("the ai package's chat reading an error", "ai") {
        return;
    }
    let client =
        ScriptedClient::new([
            ScriptedResponse::text("Half an answ").then_fail(LlmError::Api(Box::new(
                agent_loop::error::ApiError::new(401, "invalid x-api-key"),
            ))),
        ]);
    let seen = chat_round_trip(client, "none").await;
    // The chat stops reading at the `error` chunk: its status is `error`, with our text.
    assert_eq!(seen["status"], "error", "{seen:#}");
    assert!(
        seen["error"]
            .as_str()
            .unwrap()
            .contains("invalid x-api-key"),
        "{seen:#}"
    );
    assert_eq!(
        seen["finishes"],
        json!([{"finishReason": null, "isError": true}])
    );
    // The message it holds is whole: its text part closed (the encoder closed it before).
    let first = seen["first"].as_array().unwrap();
    assert_eq!(first.len(), 2, "{seen:#}");
    let parts = first[1]["parts"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "step-start");
    assert_eq!(parts[1]["type"], "text");
    assert_eq!(parts[1]["text"], "Half an answ");
    assert_eq!(parts[1]["state"], "done", "{seen:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_chat_client_approves_a_call_and_resends_by_itself() {
    if !common::web::node_available("the ai package's chat approving a call", "ai") {
        return;
    }
    let seen = approval_round_trip("approve").await;

    // The first answer: the call waits for a verdict.
    let first = seen["first"].as_array().unwrap();
    assert_eq!(first.len(), 2, "{seen:#}");
    let part = first[1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-delete")
        .unwrap_or_else(|| panic!("{seen:#}"));
    assert_eq!(part["state"], "approval-requested");
    assert_eq!(part["approval"]["id"], "c1");
    assert_eq!(part["input"], json!({"path": "a.txt"}));
    // The approval is signed with the call's digest, and the chat sends it back.
    let signature = part["approval"]["signature"].as_str().unwrap_or_default();
    assert!(signature.starts_with("sha256:"), "{seen:#}");

    // The chat sent the verdict by itself, and the run went on in the same message.
    let requests = seen["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "{seen:#}");
    assert_eq!(requests[1]["roles"], json!(["user", "assistant"]));
    let sent = requests[1]["lastParts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-delete")
        .unwrap();
    assert_eq!(sent["approval"]["signature"], signature, "{seen:#}");
    assert_eq!(seen["status"], "ready", "{seen:#}");
    assert_eq!(seen["error"], Value::Null);
    let last = seen["final"].as_array().unwrap();
    assert_eq!(last.len(), 2, "one assistant message: {seen:#}");
    assert_eq!(last[1]["id"], first[1]["id"]);
    let parts = last[1]["parts"].as_array().unwrap();
    let types: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["step-start", "text", "tool-delete", "step-start", "text"],
        "{seen:#}"
    );
    assert_eq!(parts[2]["state"], "output-available");
    assert_eq!(parts[2]["output"], "deleted a.txt");
    assert_eq!(parts[2]["approval"]["approved"], true);
    assert_eq!(parts[4]["text"], "Done.");
    assert_eq!(
        seen["finishes"],
        json!([
            {"finishReason": "tool-calls", "isError": false},
            {"finishReason": "stop", "isError": false}
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_chat_client_denies_a_call() {
    if !common::web::node_available("the ai package's chat denying a call", "ai") {
        return;
    }
    let seen = approval_round_trip("deny").await;
    assert_eq!(seen["status"], "ready", "{seen:#}");
    let last = seen["final"].as_array().unwrap();
    assert_eq!(last.len(), 2, "{seen:#}");
    let parts = last[1]["parts"].as_array().unwrap();
    let delete = parts.iter().find(|p| p["type"] == "tool-delete").unwrap();
    assert_eq!(delete["state"], "output-denied", "{seen:#}");
    assert_eq!(delete["approval"]["reason"], "not that file");
    assert_eq!(parts.last().unwrap()["text"], "Done.");
}

#[tokio::test]
async fn a_bad_body_gets_a_400_and_the_paused_run_stays_resumable() {
    let client = approval_script();
    let store = Arc::new(MemoryStore::new());
    let url = format!("{}/chat", server(client.clone(), store.clone()).await);
    let http = agent_loop::provider::reqwest::Client::new();

    // The first request pauses for the verdict.
    let response = http
        .post(&url)
        .body(body(vec![user("u1", "Delete a.txt")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get(STREAM_HEADER.0).unwrap(),
        STREAM_HEADER.1
    );
    let text = response.text().await.unwrap();
    assert!(
        text.contains("\"type\":\"tool-approval-request\""),
        "{text}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");

    // Bad bodies: refused, saying why.
    for (bad, says) in [
        (b"{\"messages\": 3}".to_vec(), "`messages` must be an array"),
        (
            approval_body(json!({"type": "tool-delete", "toolCallId": "c1",
                                 "state": "approval-requested", "input": {}})),
            "waits for a verdict",
        ),
    ] {
        let response = http.post(&url).body(bad).send().await.unwrap();
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert!(error["error"].as_str().unwrap().contains(says), "{error}");
    }

    // The paused run is still in the session.
    let mut agent_in_session = Agent::builder(client.clone())
        .tool(delete_tool())
        .policy(RunPolicy::new().require_approval("delete"))
        .session(store.clone(), "chat")
        .build()
        .unwrap();
    let paused = agent_in_session
        .load_session()
        .await
        .unwrap()
        .expect("still paused");
    assert_eq!(paused.pending()[0].id, "c1");

    // And the verdict resumes it.
    let response = http
        .post(&url)
        .body(approval_body(
            json!({"type": "tool-delete", "toolCallId": "c1",
            "state": "approval-responded", "input": {"path": "a.txt"},
            "approval": {"id": "c1", "approved": true}}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("{\"type\":\"tool-output-available\",\"toolCallId\":\"c1\",\"output\":\"deleted a.txt\"}"),
        "{text}"
    );
    assert!(text.contains("\"finishReason\":\"stop\""), "{text}");
    // The resumption continues the paused step: the call's output comes before any new step.
    let output = text.find("tool-output-available").unwrap();
    let step = text.find("\"type\":\"start-step\"").unwrap();
    assert!(output < step, "{text}");
}

/// The body of a new message `text` typed while c1 waits for its verdict (the client shows
/// the call, as the paused stream left it).
fn typed_instead_body(text: &str) -> Vec<u8> {
    let mut typed: Value = serde_json::from_slice(&approval_body(
        json!({"type": "tool-delete", "toolCallId": "c1", "state": "approval-requested",
               "input": {"path": "a.txt"}, "approval": {"id": "c1"}}),
    ))
    .unwrap();
    typed["messages"]
        .as_array_mut()
        .unwrap()
        .push(user("u2", text));
    serde_json::to_vec(&typed).unwrap()
}

/// The data chunks of an SSE body.
fn data_chunks(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("a chunk"))
        .collect()
}

#[tokio::test]
async fn a_new_message_while_a_call_waits_denies_it_and_the_chat_goes_on() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("I will delete it.").then_tool_call(
            "c1",
            "delete",
            json!({"path": "a.txt"}),
        ),
        ScriptedResponse::text("OK, I left a.txt alone."),
        ScriptedResponse::tool_call("c2", "delete", json!({"path": "b.txt"})),
        ScriptedResponse::text("Deleted b.txt."),
    ]);
    let store = Arc::new(MemoryStore::new());
    let url = format!("{}/chat", server(client.clone(), store.clone()).await);
    let http = agent_loop::provider::reqwest::Client::new();
    let post = |body: Vec<u8>| http.post(&url).body(body).send();

    let paused = post(body(vec![user("u1", "Delete a.txt")])).await.unwrap();
    assert_eq!(paused.status(), 200);
    assert!(paused
        .text()
        .await
        .unwrap()
        .contains("tool-approval-request"));

    // The person types instead of clicking Approve: the chat goes on.
    let response = post(typed_instead_body("Never mind, keep it."))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the new message was refused");
    let chunks = data_chunks(&response.text().await.unwrap());
    assert_eq!(
        chunks[1],
        json!({"type": "data-calls-denied", "transient": true, "data": {
            "toolCallIds": ["c1"],
            "reason": "Not run: the user sent a new message instead of answering this call."}}),
        "{chunks:#?}"
    );
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .filter_map(|c| c["delta"].as_str())
        .collect();
    assert_eq!(text, "OK, I left a.txt alone.");
    assert_eq!(
        chunks.last().unwrap(),
        &json!({"type": "finish", "finishReason": "stop"})
    );

    // The model read the waiting call as denied, the new message after it; every call of
    // the history is answered once.
    let sent = client.last_request().unwrap();
    assert_eq!(agent_loop::testing::history_violation(&sent.messages), None);
    assert_eq!(client.history_violations(), Vec::<String>::new());
    let results: Vec<(String, String, bool)> = sent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [(
            "c1".to_owned(),
            "Not run: the user sent a new message instead of answering this call.".to_owned(),
            true
        )]
    );
    assert_eq!(sent.messages.last().unwrap().text(), "Never mind, keep it.");

    // The session waits for nothing, and the old verdict is refused (the call never runs).
    let mut agent_in_session = Agent::builder(client.clone())
        .tool(delete_tool())
        .policy(RunPolicy::new().require_approval("delete"))
        .session(store.clone(), "chat")
        .build()
        .unwrap();
    assert_eq!(agent_in_session.load_session().await.unwrap(), None);
    let late = post(approval_body(
        json!({"type": "tool-delete", "toolCallId": "c1", "state": "approval-responded",
               "input": {"path": "a.txt"}, "approval": {"id": "c1", "approved": true}}),
    ))
    .await
    .unwrap();
    assert_eq!(late.status(), 400);

    // A further approval flow works.
    let paused = post(body(vec![user("u3", "Delete b.txt")])).await.unwrap();
    assert!(paused
        .text()
        .await
        .unwrap()
        .contains("tool-approval-request"));
    let approved = post(body(vec![
        user("u3", "Delete b.txt"),
        json!({"id": "a3", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-delete", "toolCallId": "c2", "state": "approval-responded",
             "input": {"path": "b.txt"}, "approval": {"id": "c2", "approved": true}}]}),
    ]))
    .await
    .unwrap();
    assert_eq!(approved.status(), 200);
    let text = approved.text().await.unwrap();
    assert!(
        text.contains(
            r#"{"type":"tool-output-available","toolCallId":"c2","output":"deleted b.txt"}"#
        ),
        "{text}"
    );
    assert!(text.contains(r#""finishReason":"stop""#), "{text}");
    let history = client.last_request().unwrap().messages;
    assert_eq!(agent_loop::testing::history_violation(&history), None);
}

#[tokio::test]
async fn a_new_message_keeps_the_result_of_a_call_that_finished_before_the_pause() {
    // `lookup` is read-only and starts while the model streams: it is done when the batch
    // pauses for `delete`'s verdict. Leaving the pause keeps its result.
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c0", "lookup", json!({"word": "hi"})).then_tool_call(
            "c1",
            "delete",
            json!({"path": "a.txt"}),
        ),
        ScriptedResponse::text("OK."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(lookup_tool_read_only())
        .tool(delete_tool())
        .policy(RunPolicy::new().require_approval("delete"))
        .build()
        .unwrap();
    let first = respond(
        &mut agent,
        &body(vec![user("u1", "Look hi up, delete a.txt")]),
    )
    .await;
    assert_eq!(first.status(), 200);
    let _ = axum::body::to_bytes(first.into_body(), usize::MAX)
        .await
        .unwrap();
    let paused = agent.paused().expect("paused");
    assert_eq!(paused.pending().len(), 1, "only delete waits");

    let typed = body(vec![
        user("u1", "Look hi up, delete a.txt"),
        json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-lookup", "toolCallId": "c0", "state": "output-available",
             "input": {"word": "hi"}, "output": "hi means a greeting"},
            {"type": "tool-delete", "toolCallId": "c1", "state": "approval-requested",
             "input": {"path": "a.txt"}, "approval": {"id": "c1"}}]}),
        user("u2", "Stop, just that."),
    ]);
    let response = respond(&mut agent, &typed).await;
    assert_eq!(response.status(), 200);
    let text = String::from_utf8(
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(text.contains(r#""toolCallIds":["c1"]"#), "{text}");
    let sent = client.last_request().unwrap();
    assert_eq!(agent_loop::testing::history_violation(&sent.messages), None);
    let results: Vec<(String, String, bool)> = sent
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("c0".to_owned(), "hi means a greeting".to_owned(), false),
            (
                "c1".to_owned(),
                agent_loop_ui::NEW_MESSAGE_DENIAL.to_owned(),
                true
            ),
        ]
    );
    assert_eq!(agent.paused(), None);
}

fn lookup_tool_read_only() -> impl agent_loop::Tool {
    FnTool::new(
        "lookup",
        "Looks a word up.",
        |input: Value, _ctx| async move {
            Ok::<_, ToolError>(format!(
                "{} means a greeting",
                input["word"].as_str().unwrap_or("?")
            ))
        },
    )
    .read_only(true)
}

#[tokio::test]
async fn the_refuse_policy_answers_a_new_message_while_a_call_waits_with_a_400() {
    let client = approval_script();
    let store = Arc::new(MemoryStore::new());
    let options = RespondOptions::new().while_paused(NewMessageWhilePaused::Refuse);
    let url = format!(
        "{}/chat",
        server_with(client.clone(), store.clone(), options).await
    );
    let http = agent_loop::provider::reqwest::Client::new();
    let post = |body: Vec<u8>| http.post(&url).body(body).send();

    let paused = post(body(vec![user("u1", "Delete a.txt")])).await.unwrap();
    assert!(paused
        .text()
        .await
        .unwrap()
        .contains("tool-approval-request"));

    let refused = post(typed_instead_body("Never mind.")).await.unwrap();
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    let error = error["error"].as_str().unwrap();
    assert!(
        error.contains("delete (call \"c1\") waits for a verdict")
            && error.contains("Answer them (approve or deny)"),
        "{error}"
    );
    assert_eq!(client.requests().len(), 1, "nothing ran");

    // Nothing changed: the verdict still resumes the run.
    let response = post(approval_body(
        json!({"type": "tool-delete", "toolCallId": "c1", "state": "approval-responded",
               "input": {"path": "a.txt"}, "approval": {"id": "c1", "approved": true}}),
    ))
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains(r#""output":"deleted a.txt""#), "{text}");
}

// ---------------------------------------------------------------------------------------
// Properties.

/// Real `Finished` events of each kind, and the paused run of one of them.
struct Ends {
    finished: Vec<AgentEvent>,
    paused: PausedRun,
}

fn real_ends() -> &'static Ends {
    static ENDS: std::sync::OnceLock<Ends> = std::sync::OnceLock::new();
    ENDS.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let last = |events: Vec<AgentEvent>| events.last().cloned().unwrap();
            let completed = {
                let client = ScriptedClient::new([ScriptedResponse::text("x")]);
                let mut agent = Agent::builder(client).build().unwrap();
                last(run_events(&mut agent, "x").await)
            };
            let paused = {
                let mut agent = approval_agent(approval_script());
                last(run_events(&mut agent, "Delete a.txt").await)
            };
            let failed = {
                let client = ScriptedClient::new([ScriptedResponse::error(LlmError::Api(
                    Box::new(agent_loop::error::ApiError::new(401, "invalid x-api-key")),
                ))]);
                let mut agent = Agent::builder(client).build().unwrap();
                last(run_events(&mut agent, "x").await)
            };
            let cancelled = {
                let client = ScriptedClient::new([ScriptedResponse::text("x").then_stall()]);
                let mut agent = Agent::builder(client).build().unwrap();
                let handle = agent.handle();
                let mut stream = std::pin::pin!(agent.run("x"));
                let mut end = None;
                while let Some(event) = stream.next().await {
                    if matches!(event, AgentEvent::TextDelta { .. }) {
                        handle.cancel();
                    }
                    end = Some(event);
                }
                end.unwrap()
            };
            let paused_run = paused_of(std::slice::from_ref(&paused));
            Ends {
                finished: vec![completed, paused, failed, cancelled],
                paused: paused_run,
            }
        })
    })
}

/// Checks the stream's invariants; panics saying which one broke. `resumed`: the call of
/// the paused run a resumption continues (its part is the client's already).
fn check_invariants(chunks: &[UiMessageChunk], resumed: Option<&str>) {
    use std::collections::{BTreeMap, BTreeSet};
    assert!(
        matches!(chunks.first(), Some(UiMessageChunk::Start { .. })),
        "starts with start"
    );
    let starts = chunks
        .iter()
        .filter(|c| matches!(c, UiMessageChunk::Start { .. }))
        .count();
    assert_eq!(starts, 1, "one start");
    assert!(
        matches!(chunks.last(), Some(UiMessageChunk::Finish { .. })),
        "ends with finish"
    );
    let finishes = chunks
        .iter()
        .filter(|c| matches!(c, UiMessageChunk::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "one finish");
    // A resumption continues the paused step.
    let mut step = resumed.is_some();
    let mut open_text: BTreeSet<String> = BTreeSet::new();
    let mut used: BTreeSet<String> = BTreeSet::new();
    // Per call: 1 input started, 2 input available.
    let mut calls: BTreeMap<String, u8> =
        resumed.map(|id| (id.to_owned(), 2)).into_iter().collect();
    for chunk in chunks {
        let json = serde_json::to_value(chunk).unwrap();
        let back: UiMessageChunk = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(&back, chunk, "round trip of {json}");
        match chunk {
            UiMessageChunk::StartStep {} => {
                assert!(!step, "steps do not nest");
                step = true;
            }
            UiMessageChunk::FinishStep {} => {
                assert!(step, "finish-step closes an open step");
                assert!(open_text.is_empty(), "parts closed before finish-step");
                step = false;
            }
            UiMessageChunk::TextStart { id } | UiMessageChunk::ReasoningStart { id } => {
                assert!(step, "parts inside a step");
                assert!(used.insert(id.clone()), "part ids are not reused: {id}");
                assert!(open_text.is_empty(), "one text or reasoning part at a time");
                open_text.insert(id.clone());
            }
            UiMessageChunk::TextDelta { id, delta }
            | UiMessageChunk::ReasoningDelta { id, delta } => {
                assert!(open_text.contains(id), "delta inside its part");
                assert!(!delta.is_empty(), "no empty delta");
            }
            UiMessageChunk::TextEnd { id } | UiMessageChunk::ReasoningEnd { id } => {
                assert!(open_text.remove(id), "end of an open part");
            }
            UiMessageChunk::ToolInputStart { tool_call_id, .. } => {
                assert!(step, "tool parts inside a step");
                assert!(open_text.is_empty(), "text closed when a call starts");
                assert_eq!(
                    calls.insert(tool_call_id.clone(), 1),
                    None,
                    "one start per call"
                );
            }
            UiMessageChunk::ToolInputDelta {
                tool_call_id,
                input_text_delta,
            } => {
                assert_eq!(
                    calls.get(tool_call_id),
                    Some(&1),
                    "input delta while streaming"
                );
                assert!(!input_text_delta.is_empty());
            }
            UiMessageChunk::ToolInputAvailable { tool_call_id, .. } => {
                assert_eq!(
                    calls.insert(tool_call_id.clone(), 2),
                    Some(1),
                    "start before input"
                );
            }
            UiMessageChunk::ToolApprovalRequest { tool_call_id, .. }
            | UiMessageChunk::ToolOutputAvailable { tool_call_id, .. }
            | UiMessageChunk::ToolOutputError { tool_call_id, .. }
            | UiMessageChunk::ToolOutputDenied { tool_call_id } => {
                assert_eq!(
                    calls.get(tool_call_id),
                    Some(&2),
                    "the call's input before its output"
                );
            }
            UiMessageChunk::Finish { .. }
            | UiMessageChunk::Error { .. }
            | UiMessageChunk::Abort { .. } => {
                assert!(!step, "the step is closed at the end");
                assert!(open_text.is_empty(), "parts are closed at the end");
            }
            _ => {}
        }
        if matches!(chunk, UiMessageChunk::FinishStep {}) {
            // A step's calls end with it: a later chunk of one is a new part.
            calls.clear();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_encoder_keeps_the_stream_well_formed_for_any_events(
        events in prop::collection::vec(common::ui::any_event(), 0..40),
        end in 0usize..5,
        resumed in any::<bool>(),
    ) {
        let ends = real_ends();
        let mut encoder = if resumed {
            UiStreamEncoder::new().resuming(&ends.paused, &Resolutions::new().deny("c1", "no"))
        } else {
            UiStreamEncoder::new()
        };
        let mut chunks: Vec<UiMessageChunk> =
            events.iter().flat_map(|e| encoder.encode(e)).collect();
        // A real end (completed, paused, failed, cancelled), after which nothing comes; or
        // none: the stream stops short.
        if let Some(finished) = ends.finished.get(end) {
            chunks.extend(encoder.encode(finished));
            chunks.extend(encoder.encode(&AgentEvent::TextDelta { text: "after".into() }));
        }
        chunks.extend(encoder.finish());
        check_invariants(&chunks, resumed.then_some("c1"));
    }

    #[test]
    fn the_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = ChatRequest::from_slice(&bytes).map(|r| (r.history(), r.turn(None)));
    }

    #[test]
    fn the_parser_never_panics_on_json(value in prop_oneof![any_json(), near_messages()]) {
        let body = serde_json::to_vec(&json!({"id": "x", "messages": value})).unwrap();
        if let Ok(request) = ChatRequest::from_slice(&body) {
            let _ = request.history();
            let _ = request.turn(None);
            let _ = request.turn(Some(&real_ends().paused));
        }
    }
}

/// Message arrays close to real ones: real parts, some of whose fields are removed or
/// given another value (so that most parse, and the turn and history code runs on them).
fn near_messages() -> impl Strategy<Value = Value> {
    let templates = vec![
        json!({"type": "text", "text": "hi"}),
        json!({"type": "step-start"}),
        json!({"type": "reasoning", "text": "hmm"}),
        json!({"type": "file", "mediaType": "image/png", "url": "https://example.com/a.png"}),
        json!({"type": "file", "mediaType": "application/pdf", "url": "data:application/pdf;base64,JVBERi0xLjcK"}),
        json!({"type": "tool-delete", "toolCallId": "c1", "state": "approval-responded",
               "input": {"path": "a"}, "approval": {"id": "c1", "approved": true}}),
        json!({"type": "tool-delete", "toolCallId": "c1", "state": "output-available",
               "input": {}, "output": {"x": [1]}}),
        json!({"type": "dynamic-tool", "toolName": "delete", "toolCallId": "c1",
               "state": "output-error", "input": 3, "errorText": "e"}),
        json!({"type": "tool-x", "toolCallId": "c2", "state": "output-denied", "input": null}),
        json!({"type": "data-x", "data": {}}),
    ];
    let part = (
        prop::sample::select(templates),
        prop::option::of((
            prop::sample::select(vec![
                "type",
                "text",
                "url",
                "mediaType",
                "toolCallId",
                "state",
                "input",
                "output",
                "approval",
                "toolName",
                "errorText",
            ]),
            any_json(),
            any::<bool>(),
        )),
    )
        .prop_map(|(mut part, change)| {
            if let (Some((key, value, remove)), Value::Object(fields)) = (change, &mut part) {
                if remove {
                    fields.remove(key);
                } else {
                    fields.insert(key.to_owned(), value);
                }
            }
            part
        });
    let message = (
        prop::sample::select(vec!["user", "assistant", "system"]),
        prop::collection::vec(part, 0..5),
    )
        .prop_map(|(role, parts)| json!({"id": "m", "role": role, "parts": parts}));
    prop::collection::vec(message, 0..5).prop_map(Value::Array)
}

/// JSON shaped like a `messages` array, with wrong types and states mixed in.
/// The UI message stream's words and keys, for [`common::ui::any_json`].
const WORDS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "text",
    "file",
    "step-start",
    "tool-x",
    "dynamic-tool",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
    "input-streaming",
    "image/png",
    "application/pdf",
    "data:image/png;base64,AAAA",
    "https://example.com/a.png",
    "tool-delete",
    "c1",
    "data:application/pdf;base64,JVBERi0=",
];
const KEYS: &[&str] = &[
    "role",
    "parts",
    "type",
    "text",
    "url",
    "mediaType",
    "toolCallId",
    "toolName",
    "state",
    "input",
    "output",
    "errorText",
    "approval",
    "approved",
    "reason",
    "id",
];

fn any_json() -> impl Strategy<Value = Value> {
    common::ui::any_json(WORDS, KEYS)
}

// ---------------------------------------------------------------------------------------
// What mutation testing found unchecked

/// A step is closed at its turn's end, not later at the next turn's start: the client shows
/// the step done while the next model call is still on its way.
#[test]
fn a_step_closes_at_its_turns_end() {
    let mut encoder = UiStreamEncoder::new();
    encode_all(
        &mut encoder,
        &[
            AgentEvent::TurnStart { turn: 1 },
            AgentEvent::TextDelta { text: "Hi.".into() },
        ],
    );
    let usage = agent_loop::Usage::default();
    let end = encoder.encode(&AgentEvent::TurnEnd {
        turn: 1,
        stop_reason: agent_loop::StopReason::EndTurn,
        usage,
        cost: agent_loop::pricing::Cost::default(),
    });
    assert_eq!(shows(&end), ["text-end text-1", "finish-step"]);
    assert!(!encoder.is_finished());
}

/// `is_finished` says whether `finish` was sent; nothing comes after it.
#[tokio::test]
async fn the_encoder_says_when_it_is_finished() {
    let client = ScriptedClient::new([ScriptedResponse::text("Hi.")]);
    let mut agent = Agent::builder(client).build().unwrap();
    let events = run_events(&mut agent, "hello").await;
    let mut encoder = UiStreamEncoder::new();
    let (last, rest) = events.split_last().unwrap();
    encode_all(&mut encoder, rest);
    assert!(!encoder.is_finished());
    let end = encoder.encode(last);
    assert_eq!(end.last().map(show).as_deref(), Some("finish stop"));
    assert!(encoder.is_finished());
    assert!(encoder.finish().is_empty());
}

/// A fallback, a compaction, a handoff and a tool's progress reach the client as transient
/// data parts with their figures; a fallback also closes the text it voids.
#[test]
fn the_runs_other_events_are_transient_data_parts() {
    let mut encoder = UiStreamEncoder::new();
    let chunks = encode_all(&mut encoder, &common::ui::run_status_events());
    assert_eq!(
        shows(&chunks),
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Par",
            "text-end text-1",
            r#"data-fallback {"error":"overloaded","from":"big","to":"small"}"#,
            r#"data-compacted {"tokensAfter":300,"tokensBefore":900}"#,
            r#"data-tool-progress {"message":"halfway","toolCallId":"c1"}"#,
            r#"data-handoff {"from":"triage","to":"billing"}"#,
        ]
    );
    for chunk in &chunks[5..] {
        let json = serde_json::to_value(chunk).unwrap();
        assert_eq!(json["transient"], true, "{json}");
    }
}

/// Tool parts left open in the client's history are read, not refused: a call whose input was
/// complete is kept without a result (the agent answers it as interrupted); one whose input was
/// still streaming has no arguments to keep, and is left out.
#[test]
fn tool_parts_in_every_open_state_are_read_into_the_history() {
    for state in ["input-streaming", "input-available"] {
        let request = ChatRequest::from_slice(&body(vec![
            user("u1", "Look it up."),
            json!({"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-lookup", "toolCallId": "c1", "state": state, "input": {"q": "x"}}
            ]}),
            user("u2", "Never mind."),
        ]))
        .unwrap_or_else(|e| panic!("{state}: {e}"));
        let history = request.history().unwrap_or_else(|e| panic!("{state}: {e}"));
        if state == "input-streaming" {
            assert_eq!(history, [agent_loop::Message::user("Look it up.")]);
            continue;
        }
        assert_eq!(history.len(), 2, "{state}: {history:#?}");
        assert_eq!(
            history[1].content,
            [ContentBlock::ToolUse {
                id: "c1".into(),
                name: "lookup".into(),
                input: json!({"q": "x"}),
            }],
            "{state}"
        );
    }
}

/// A denial whose reason is blank reads as the default denial, not as an empty reason.
#[tokio::test]
async fn a_blank_denial_reason_is_the_default_one() {
    let (_agent, paused) = paused_run().await;
    let request = ChatRequest::from_slice(&approval_body(json!({
        "type": "tool-delete", "toolCallId": "c1", "state": "approval-responded",
        "input": {"path": "a.txt"}, "approval": {"id": "c1", "approved": false, "reason": "  "}
    })))
    .unwrap();
    let Ok(UiTurn::Resume(answers)) = request.turn(Some(&paused)) else {
        panic!("no resume")
    };
    assert_eq!(
        answers.get("c1"),
        Some(&Resolution::Deny {
            reason: DEFAULT_DENIAL.into()
        })
    );
}

/// What the request carries besides its messages, as the transport sends it.
#[test]
fn the_requests_fields_are_read() {
    let request = ChatRequest::from_slice(
        &serde_json::to_vec(&json!({
            "id": "chat-7",
            "messages": [user("u1", "Hi.")],
            "trigger": "submit-message",
            "messageId": "a-9",
            "extra": {"any": "thing"}
        }))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(request.id(), "chat-7");
    assert_eq!(request.trigger(), Some("submit-message"));
    assert_eq!(request.message_id(), Some("a-9"));
    assert_eq!(request.len(), 1);
    assert!(!request.is_empty());
    let bare = ChatRequest::from_slice(br#"{"messages": []}"#).unwrap();
    assert_eq!(
        (bare.id(), bare.trigger(), bare.message_id()),
        ("", None, None)
    );
    assert_eq!(bare.len(), 0);
    assert!(bare.is_empty());
}

/// A verdict answers only a call that waits for one: a client-run (deferred) tool's call
/// waits for its result, and an approval of it is no answer.
#[tokio::test]
async fn a_verdict_does_not_answer_a_call_that_waits_for_its_result() {
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "pick_color",
        json!({"options": ["red", "blue"]}),
    )]);
    let mut agent = Agent::builder(client)
        .tool(agent_loop::tool::DeferredTool::new(
            "pick_color",
            "The user picks a color.",
        ))
        .build()
        .unwrap();
    let events = run_events(&mut agent, "Pick a color").await;
    let paused = paused_of(&events);
    let part = |extra: Value| {
        let mut p = json!({"type": "tool-pick_color", "toolCallId": "c1",
                           "input": {"options": ["red", "blue"]}});
        if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
            p.extend(extra);
        }
        p
    };
    let verdict = ChatRequest::from_slice(&approval_body(part(json!({
        "state": "approval-responded", "approval": {"id": "c1", "approved": true}
    }))))
    .unwrap();
    let refused = verdict.turn(Some(&paused)).unwrap_err();
    assert!(refused.message().contains("c1"), "{refused}");
    let output = ChatRequest::from_slice(&approval_body(part(json!({
        "state": "output-available", "output": "blue"
    }))))
    .unwrap();
    let Ok(UiTurn::Resume(answers)) = output.turn(Some(&paused)) else {
        panic!("the output is no answer")
    };
    assert_eq!(
        answers.get("c1"),
        Some(&Resolution::Result {
            content: "blue".into(),
            is_error: false
        })
    );
}

/// Empty text parts are nothing: not a block of the history, and a user message of nothing
/// but them is refused as empty.
#[test]
fn empty_text_parts_are_nothing() {
    let request = ChatRequest::from_slice(&body(vec![
        user("u1", "Look it up."),
        json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "text", "text": ""},
            {"type": "text", "text": "Found."}
        ]}),
        user("u2", "Thanks."),
    ]))
    .unwrap();
    let history = request.history().unwrap();
    assert_eq!(history[1].content, [ContentBlock::text("Found.")]);
    let blank = refusal(&body(vec![
        json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": ""}]}),
    ]));
    assert_eq!(
        blank,
        "messages[0]: the user message has no text and no file"
    );
}

/// A PDF's file name is its title; an empty file name is no title.
#[test]
fn a_pdfs_empty_file_name_is_no_title() {
    let pdf = |filename: &str| {
        let request = ChatRequest::from_slice(&body(vec![json!({
            "id": "u1", "role": "user", "parts": [
                {"type": "text", "text": "Read this."},
                {"type": "file", "mediaType": "application/pdf",
                 "url": "https://example.com/a.pdf", "filename": filename}
            ]
        })]))
        .unwrap();
        let Ok(UiTurn::Run(input)) = request.turn(None) else {
            panic!("no run")
        };
        let message = input.into_message();
        message
            .content
            .iter()
            .find_map(|b| match b {
                ContentBlock::Document { title, .. } => Some(title.clone()),
                _ => None,
            })
            .expect("a document")
    };
    assert_eq!(pdf("a.pdf"), Some("a.pdf".to_owned()));
    assert_eq!(pdf(""), None);
}

/// A server whose agents hold nothing (no session) gets the conversation from the client:
/// `respond` gives a fresh agent the history before the new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_runs_on_the_clients_history() {
    let client = ScriptedClient::new([ScriptedResponse::text("Still sunny.")]);
    let recorded = client.clone();
    let app = axum::Router::new().route(
        "/chat",
        axum::routing::post(move |body: bytes::Bytes| {
            let client = client.clone();
            async move {
                let mut agent = Agent::builder(client).build().expect("the agent builds");
                respond(&mut agent, &body).await
            }
        }),
    );
    let url = common::web::serve(app).await;
    let body = body(vec![
        user("u1", "Weather?"),
        json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"}, {"type": "text", "text": "Sunny."}
        ]}),
        user("u2", "And now?"),
    ]);
    let response = agent_loop::provider::reqwest::Client::new()
        .post(format!("{url}/chat"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("Still sunny."), "{text}");
    let requests = recorded.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        *requests[0].messages,
        [
            agent_loop::Message::user("Weather?"),
            agent_loop::Message::assistant("Sunny."),
            agent_loop::Message::user("And now?"),
        ]
    );
}

/// A stateless server (a new agent per request, no session): the approval finds no run to
/// resume, and the refusal says why and what to set up, instead of a bare "no run waits".
#[tokio::test]
async fn an_approval_to_an_agent_without_a_session_says_a_session_store_is_needed() {
    let mut fresh = approval_agent(approval_script());
    let body = approval_body(json!({"type": "tool-delete", "toolCallId": "c1",
        "state": "approval-responded", "input": {"path": "a.txt"},
        "approval": {"id": "c1", "approved": true}}));
    let response = respond(&mut fresh, &body).await;
    assert_eq!(response.status(), 400);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    let error: Value = serde_json::from_slice(&bytes).unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("no run waits for answers"), "{message}");
    assert!(message.contains("no session store"), "{message}");
    assert!(
        message.contains("AgentBuilder::session(store, chat_id)"),
        "{message}"
    );
    assert!(fresh.messages().is_empty(), "nothing ran");

    // With a session, a new agent per request finds the pause in the store.
    let store = Arc::new(MemoryStore::new());
    let script = approval_script();
    let with_session = |client: ScriptedClient| {
        Agent::builder(client)
            .tool(delete_tool())
            .policy(RunPolicy::new().require_approval("delete"))
            .session(store.clone(), "chat-1")
            .build()
            .unwrap()
    };
    let first = respond(&mut with_session(script.clone()), &body_of_question()).await;
    assert_eq!(first.status(), 200);
    let _ = axum::body::to_bytes(first.into_body(), 1 << 20).await;
    let approved = respond(&mut with_session(script.clone()), &body).await;
    assert_eq!(approved.status(), 200);
    let text = axum::body::to_bytes(approved.into_body(), 1 << 20)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&text).contains("Done."));
}

fn body_of_question() -> Vec<u8> {
    body(vec![user("u1", "Delete a.txt")])
}

// ---------------------------------------------------------------------------------------
// A run the host stops after its turn.

/// A lookup, then an answer the run never asks for: the host stops it after its first turn.
fn lookup_then_answer() -> ScriptedClient {
    ScriptedClient::new([
        ScriptedResponse::text("Looking it up.").then_tool_call(
            "c1",
            "lookup",
            json!({"word": "hi"}),
        ),
        ScriptedResponse::text("Never asked for."),
    ])
}

#[tokio::test]
async fn a_run_stopped_after_its_turn_finishes_normally_with_its_steps_reason() {
    let client = lookup_then_answer();
    let mut agent = Agent::builder(client.clone())
        .tool(lookup_tool())
        .build()
        .unwrap();
    agent.handle().stop_after_turn();
    let events = run_events(&mut agent, "What does hi mean?").await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("no Finished")
    };
    assert_eq!(outcome.termination, Termination::StoppedAfterTurn);
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown: Vec<String> = shows(&chunks)
        .into_iter()
        .filter(|s| !s.starts_with("tool-input-delta"))
        .collect();
    assert_eq!(
        shown,
        [
            "start",
            "start-step",
            "text-start text-1",
            "text-delta text-1 Looking it up.",
            "text-end text-1",
            "tool-input-start c1 lookup",
            "tool-input-available c1 lookup {\"word\":\"hi\"}",
            "tool-output-available c1 hi means a greeting",
            "finish-step",
            // No `abort`, no `data-stopped`: a normal end, with the last step's reason.
            "finish tool-calls",
        ]
    );
    assert_eq!(client.requests().len(), 1, "no second model call");
}

/// A server answering POST /chat with `respond`, its agent asked to stop after its turn.
async fn stopping_server(client: ScriptedClient) -> String {
    let app = axum::Router::new().route(
        "/chat",
        axum::routing::post(move |body: bytes::Bytes| {
            let client = client.clone();
            async move {
                let mut agent = Agent::builder(client)
                    .tool(lookup_tool())
                    .build()
                    .expect("the agent builds");
                agent.handle().stop_after_turn();
                respond(&mut agent, &body).await
            }
        }),
    );
    format!("{}/chat", common::web::serve(app).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_package_reads_a_run_stopped_after_its_turn_as_a_finished_message() {
    if !common::web::node_available("the ai package reading a stopped run", "ai") {
        return;
    }
    let url = stopping_server(lookup_then_answer()).await;
    let seen = common::web::node_json("ai-sdk-client.mjs", &["read", &url]).await;
    assert_eq!(seen["invalid"], json!([]), "{seen:#}");
    assert_eq!(seen["errors"], json!([]), "{seen:#}");
    let chunks = seen["chunks"].as_array().unwrap();
    assert!(
        !chunks
            .iter()
            .any(|c| c["type"] == "abort" || c["type"] == "error" || c["type"] == "data-stopped"),
        "{seen:#}"
    );
    assert_eq!(
        chunks.last().unwrap(),
        &json!({"type": "finish", "finishReason": "tool-calls"})
    );
    let parts = seen["message"]["parts"].as_array().unwrap();
    let lookup = parts.iter().find(|p| p["type"] == "tool-lookup").unwrap();
    assert_eq!(lookup["state"], "output-available", "{seen:#}");
    assert_eq!(lookup["output"], "hi means a greeting");
}

// ---------------------------------------------------------------------------------------
// Approvals bound to their call by its digest.

/// The digest of the call `c1` of `delete` on `path`, as a pause gives it.
async fn digest_of(path: &str) -> String {
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "delete",
        json!({ "path": path }),
    )]);
    let mut agent = approval_agent(client);
    let events = run_events(&mut agent, "Delete it").await;
    paused_of(&events).pending()[0].digest.clone()
}

/// The body answering c1 with `approved`, the approval signed with `signature`.
fn signed_approval(signature: &str, approved: bool) -> Vec<u8> {
    approval_body(json!({"type": "tool-delete", "toolCallId": "c1",
        "state": "approval-responded", "input": {"path": "a.txt"},
        "approval": {"id": "c1", "approved": approved, "signature": signature}}))
}

#[tokio::test]
async fn an_approval_request_is_signed_with_its_calls_digest_and_the_signature_comes_back() {
    let (_agent, paused) = paused_run().await;
    let digest = paused.pending()[0].digest.clone();
    assert!(digest.starts_with("sha256:"), "{digest}");
    let mut agent = approval_agent(approval_script());
    let events = run_events(&mut agent, "Delete a.txt").await;
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let request = chunks
        .iter()
        .find(|c| matches!(c, UiMessageChunk::ToolApprovalRequest { .. }))
        .unwrap();
    assert_eq!(
        serde_json::to_value(request).unwrap(),
        json!({"type": "tool-approval-request", "approvalId": "c1", "toolCallId": "c1",
               "signature": digest})
    );
    for approved in [true, false] {
        let request = ChatRequest::from_slice(&signed_approval(&digest, approved)).unwrap();
        let UiTurn::Resume(answers) = request.turn(Some(&paused)).unwrap() else {
            panic!("not a resumption")
        };
        assert_eq!(answers.digest("c1"), Some(digest.as_str()));
    }
}

/// Over loopback: a verdict signed with another call's digest is refused as the stream's
/// `error` (nothing runs, the run stays paused); the verdict signed with its own goes on.
#[tokio::test]
async fn a_verdict_signed_for_another_call_is_refused_and_the_right_one_goes_on() {
    let store = Arc::new(MemoryStore::new());
    let url = format!("{}/chat", server(approval_script(), store.clone()).await);
    let http = agent_loop::provider::reqwest::Client::new();
    let first = http
        .post(&url)
        .body(body(vec![user("u1", "Delete a.txt")]))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let digest = sse_chunks(&first)
        .iter()
        .find_map(|c| match c {
            UiMessageChunk::ToolApprovalRequest { signature, .. } => signature.clone(),
            _ => None,
        })
        .expect("a signed approval request");
    let other = digest_of("b.txt").await;
    assert_ne!(other, digest);

    let refused = http
        .post(&url)
        .body(signed_approval(&other, true))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 200);
    let chunks = sse_chunks(&refused.text().await.unwrap());
    check_invariants(&chunks, Some("c1"));
    let error = chunks
        .iter()
        .find_map(|c| match c {
            UiMessageChunk::Error { error_text } => Some(error_text.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{chunks:?}"));
    assert!(error.contains(&other) && error.contains(&digest), "{error}");
    assert!(!chunks
        .iter()
        .any(|c| matches!(c, UiMessageChunk::ToolOutputAvailable { .. })));
    assert_eq!(
        chunks.last(),
        Some(&UiMessageChunk::Finish {
            finish_reason: Some(FinishReason::Error)
        })
    );

    let accepted = http
        .post(&url)
        .body(signed_approval(&digest, true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks = sse_chunks(&accepted);
    assert!(
        chunks.contains(&UiMessageChunk::ToolOutputAvailable {
            tool_call_id: "c1".into(),
            output: json!("deleted a.txt"),
        }),
        "{chunks:?}"
    );
    assert_eq!(
        chunks.last(),
        Some(&UiMessageChunk::Finish {
            finish_reason: Some(FinishReason::Stop)
        })
    );
}

/// The chunks of an SSE body (`[DONE]` left out).
fn sse_chunks(text: &str) -> Vec<UiMessageChunk> {
    text.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("a chunk"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// The host's steering.

#[tokio::test]
async fn steered_words_are_a_data_part_between_the_steps_and_come_back_as_history() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Looking it up.").then_tool_call(
            "c1",
            "lookup",
            json!({"word": "hi"}),
        ),
        ScriptedResponse::text("A greeting."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(lookup_tool())
        .build()
        .unwrap();
    let handle = agent.handle();
    let mut run = std::pin::pin!(agent.run("What does hi mean?"));
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.steer("Be brief.");
        }
        events.push(event);
    }
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown: Vec<String> = shows(&chunks)
        .into_iter()
        .filter(|s| !s.starts_with("tool-input-delta"))
        .collect();
    assert_eq!(
        shown[7..],
        [
            "tool-output-available c1 hi means a greeting",
            "finish-step",
            "data-steered {\"text\":\"Be brief.\"}",
            "start-step",
            "text-start text-2",
            "text-delta text-2 A greeting.",
            "text-end text-2",
            "finish-step",
            "finish stop",
        ],
        "{shown:#?}"
    );
    assert_eq!(
        serde_json::to_value(
            chunks
                .iter()
                .find(|c| matches!(c, UiMessageChunk::Data(_)))
                .unwrap()
        )
        .unwrap(),
        json!({"type": "data-steered", "data": {"text": "Be brief."}}),
        "kept in the message: no transient flag, no id"
    );

    // The client's copy of the message, sent back, is the history the agent kept.
    let request = ChatRequest::from_slice(&body(vec![
        user("u1", "What does hi mean?"),
        json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "Looking it up."},
            {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available",
             "input": {"word": "hi"}, "output": "hi means a greeting"},
            {"type": "data-steered", "data": {"text": "Be brief."}},
            {"type": "step-start"},
            {"type": "text", "text": "A greeting."}
        ]}),
        user("u2", "Thanks"),
    ]))
    .unwrap();
    assert_eq!(request.history().unwrap(), *agent.messages());
}

#[test]
fn words_steered_before_any_step_join_the_users_message() {
    let request = ChatRequest::from_slice(&body(vec![
        user("u1", "Hi"),
        json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "data-steered", "data": {"text": "In French."}},
            {"type": "data-steered", "data": {"text": 7}},
            {"type": "step-start"},
            {"type": "text", "text": "Bonjour."}
        ]}),
        user("u2", "Merci"),
    ]))
    .unwrap();
    let history = request.history().unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(
        history[0].content,
        [ContentBlock::text("Hi"), ContentBlock::text("In French.")]
    );
    assert_eq!(history[1].text(), "Bonjour.");
}

#[tokio::test]
async fn words_a_run_never_heard_are_handed_back_before_its_end() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Looking it up.").then_tool_call(
            "c1",
            "lookup",
            json!({"word": "hi"}),
        ),
        ScriptedResponse::text("Never asked for."),
    ]);
    let mut agent = Agent::builder(client).tool(lookup_tool()).build().unwrap();
    let handle = agent.handle();
    let mut run = std::pin::pin!(agent.run("What does hi mean?"));
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.steer("Be brief.");
            handle.stop_after_turn();
        }
        events.push(event);
    }
    let chunks = encode_all(&mut UiStreamEncoder::new(), &events);
    let shown = shows(&chunks);
    assert_eq!(
        shown[shown.len() - 3..],
        [
            "finish-step",
            "data-undelivered {\"texts\":[\"Be brief.\"]}",
            "finish tool-calls",
        ]
    );
    assert!(!shown.iter().any(|s| s.starts_with("data-steered")));
}
