//! AG-UI 1.0 (`agent_loop_ui::agui`): the encoder's sequences, the request's parsing, and the real
//! clients (`@ag-ui/core`'s schemas, `@ag-ui/client`'s `HttpAgent`) against `respond` served
//! on loopback with a session.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::Resolution;
use agent_loop::agent::RunPolicy;
use agent_loop::media::MediaSource;
use agent_loop::pricing::Cost;
use agent_loop::session::MemoryStore;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentEvent, ContentBlock, Message, PausedRun, Role, RunOutcome, StopReason, Termination,
    ToolError, Usage,
};
use agent_loop_ui::agui::{
    respond, respond_with, AgUiContent, AgUiEncoder, AgUiEvent, AgUiMessage, RunAgentInput,
    RunFinishedOutcome,
};
use agent_loop_ui::{NewMessageWhilePaused, RespondOptions, UiTurn};
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// Helpers

fn weather_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "get_weather",
        "The weather in a city.",
        |_: Value, _ctx| async move { Ok::<_, ToolError>("sunny") },
    )
}

fn delete_tool() -> impl agent_loop::Tool {
    FnTool::new("delete", "Deletes a file.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("deleted")
    })
}

fn agent(client: &ScriptedClient) -> Agent {
    Agent::builder(client.clone())
        .tool(weather_tool())
        .tool(delete_tool())
        .policy(RunPolicy::new().require_approval("delete"))
        .build()
        .expect("the agent builds")
}

async fn run_events(agent: &mut Agent, input: &str) -> Vec<AgentEvent> {
    agent.run(input).collect().await
}

fn outcome_of(events: &[AgentEvent]) -> RunOutcome {
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => outcome.clone(),
        other => panic!("the run did not finish: {other:?}"),
    }
}

/// A completed run's outcome, to build synthetic `Finished` events from.
fn completed_outcome() -> RunOutcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let client = ScriptedClient::new([ScriptedResponse::text("done")]);
        let mut agent = agent(&client);
        outcome_of(&run_events(&mut agent, "hi").await)
    })
}

/// A run that paused for the approval of `delete` (call `c9`): its events and the pause.
fn paused_run() -> (Vec<AgentEvent>, PausedRun, ScriptedClient, Agent) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let client = ScriptedClient::new([
        ScriptedResponse::text("I will delete it.").then_tool_call(
            "c9",
            "delete",
            json!({"path": "a.txt"}),
        ),
        ScriptedResponse::text("Deleted."),
    ]);
    let mut agent = agent(&client);
    let events = rt.block_on(run_events(&mut agent, "Delete a.txt"));
    let Termination::Paused(paused) = outcome_of(&events).termination else {
        panic!("the run did not pause")
    };
    (events, *paused, client, agent)
}

fn with(termination: Termination) -> AgentEvent {
    let mut outcome = COMPLETED.with(RunOutcome::clone);
    outcome.termination = termination;
    AgentEvent::Finished(outcome)
}

fn encode_all(encoder: &mut AgUiEncoder, events: &[AgentEvent]) -> Vec<AgUiEvent> {
    events.iter().flat_map(|e| encoder.encode(e)).collect()
}

/// One line per event: its type, its id and its text.
fn show(event: &AgUiEvent) -> String {
    let v = serde_json::to_value(event).expect("events serialize");
    let mut s = v["type"].as_str().unwrap_or("?").to_owned();
    for key in [
        "stepName",
        "messageId",
        "toolCallId",
        "toolCallName",
        "parentMessageId",
        "delta",
        "name",
        "content",
    ] {
        if let Some(x) = v.get(key).and_then(Value::as_str) {
            s.push(' ');
            s.push_str(x);
        }
    }
    if let Some(outcome) = v.get("outcome") {
        s.push(' ');
        s.push_str(outcome["type"].as_str().unwrap_or("?"));
    }
    if let Some(code) = v.get("code").and_then(Value::as_str) {
        s.push(' ');
        s.push_str(code);
    }
    s
}

fn shown(events: &[AgUiEvent]) -> Vec<String> {
    events.iter().map(show).collect()
}

fn is_terminal(event: &AgUiEvent) -> bool {
    matches!(
        event,
        AgUiEvent::RunFinished { .. } | AgUiEvent::RunError { .. }
    )
}

/// AG-UI's sequence rules (what `verifyEvents` of `@ag-ui/client` enforces, and more):
/// `RUN_STARTED` first; text, reasoning and tool-call content only inside their start and end;
/// no empty delta; no start of what is open; steps balanced; everything closed at the one
/// terminal event, which is last.
fn check_invariants(events: &[AgUiEvent]) -> Result<(), String> {
    let mut text = HashSet::new();
    let mut reasoning = HashSet::new();
    let mut spans = HashSet::new();
    let mut calls = HashSet::new();
    let mut steps = HashSet::new();
    match events.first() {
        Some(AgUiEvent::RunStarted { .. }) => {}
        other => return Err(format!("the first event is {other:?}")),
    }
    let terminals = events.iter().filter(|e| is_terminal(e)).count();
    if terminals > 1 {
        return Err(format!("{terminals} terminal events"));
    }
    if terminals == 1 && !events.last().is_some_and(is_terminal) {
        return Err("an event after the terminal one".into());
    }
    for (i, event) in events.iter().enumerate().skip(1) {
        let problem: Option<String> = match event {
            AgUiEvent::RunStarted { .. } => Some("a second RUN_STARTED".to_owned()),
            AgUiEvent::TextMessageStart { message_id, .. } => {
                (!text.insert(message_id.clone())).then(|| "already open".to_owned())
            }
            AgUiEvent::TextMessageContent { message_id, delta } => (!text.contains(message_id)
                || delta.is_empty())
            .then(|| "not open or empty".to_owned()),
            AgUiEvent::TextMessageEnd { message_id } => {
                (!text.remove(message_id)).then(|| "not open".to_owned())
            }
            AgUiEvent::ReasoningStart { message_id } => {
                (!spans.insert(message_id.clone())).then(|| "already open".to_owned())
            }
            AgUiEvent::ReasoningMessageStart { message_id, .. } => (!spans.contains(message_id)
                || !reasoning.insert(message_id.clone()))
            .then(|| "outside its span or already open".to_owned()),
            AgUiEvent::ReasoningMessageContent { message_id, delta } => {
                (!reasoning.contains(message_id) || delta.is_empty())
                    .then(|| "not open or empty".to_owned())
            }
            AgUiEvent::ReasoningMessageEnd { message_id } => {
                (!reasoning.remove(message_id)).then(|| "not open".to_owned())
            }
            AgUiEvent::ReasoningEnd { message_id } => (reasoning.contains(message_id)
                || !spans.remove(message_id))
            .then(|| "not open, or its message is".to_owned()),
            AgUiEvent::ToolCallStart { tool_call_id, .. } => {
                (!calls.insert(tool_call_id.clone())).then(|| "already open".to_owned())
            }
            AgUiEvent::ToolCallArgs {
                tool_call_id,
                delta,
            } => (!calls.contains(tool_call_id) || delta.is_empty())
                .then(|| "not open or empty".to_owned()),
            AgUiEvent::ToolCallEnd { tool_call_id } => {
                (!calls.remove(tool_call_id)).then(|| "not open".to_owned())
            }
            AgUiEvent::StepStarted { step_name } => {
                (!steps.insert(step_name.clone())).then(|| "already open".to_owned())
            }
            AgUiEvent::StepFinished { step_name } => {
                (!steps.remove(step_name)).then(|| "not open".to_owned())
            }
            e if is_terminal(e) => (!(text.is_empty()
                && reasoning.is_empty()
                && spans.is_empty()
                && calls.is_empty()
                && steps.is_empty()))
            .then(|| format!("left open: {text:?} {reasoning:?} {spans:?} {calls:?} {steps:?}")),
            _ => None,
        };
        if let Some(what) = problem {
            return Err(format!("event {i} ({}): {what}", show(event)));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The encoder's sequences

#[tokio::test]
async fn text_only() {
    let client = ScriptedClient::new([ScriptedResponse::text("Hello there").chunked(6)]);
    let events = run_events(&mut agent(&client), "Hi").await;
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_CONTENT r1:t1 Hello ",
            "TEXT_MESSAGE_CONTENT r1:t1 there",
            "TEXT_MESSAGE_END r1:t1",
            "STEP_FINISHED turn 1",
            "RUN_FINISHED success",
        ]
    );
    let Some(AgUiEvent::RunFinished { result, usage, .. }) = out.last() else {
        unreachable!()
    };
    assert_eq!(result, &Some(json!("Hello there")));
    assert_eq!(usage.as_ref().map(Vec::len), Some(1));
}

#[tokio::test]
async fn reasoning_then_text() {
    let client =
        ScriptedClient::new([ScriptedResponse::thinking("Let me think.", "sig").then_text("Hi!")]);
    let events = run_events(&mut agent(&client), "Hi").await;
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "REASONING_START r1:t1:reasoning",
            "REASONING_MESSAGE_START r1:t1:reasoning",
            "REASONING_MESSAGE_CONTENT r1:t1:reasoning Let me think.",
            "REASONING_MESSAGE_END r1:t1:reasoning",
            "REASONING_END r1:t1:reasoning",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_CONTENT r1:t1 Hi!",
            "TEXT_MESSAGE_END r1:t1",
            "STEP_FINISHED turn 1",
            "RUN_FINISHED success",
        ]
    );
}

#[tokio::test]
async fn tool_call_in_fragments_then_result_then_text() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Checking.")
            .then_tool_call("c1", "get_weather", json!({"city": "Paris"}))
            .chunked(8),
        ScriptedResponse::text("Sunny."),
    ]);
    let events = run_events(&mut agent(&client), "Weather?").await;
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    let lines = shown(&out);
    let args: String = out
        .iter()
        .filter_map(|e| match e {
            AgUiEvent::ToolCallArgs { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let arg_events = lines
        .iter()
        .filter(|l| l.starts_with("TOOL_CALL_ARGS"))
        .count();
    assert!(
        arg_events > 1,
        "the arguments come in fragments: {lines:#?}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "Paris"})
    );
    let without_args: Vec<&String> = lines
        .iter()
        .filter(|l| !l.starts_with("TOOL_CALL_ARGS") && !l.starts_with("TEXT_MESSAGE_CONTENT"))
        .collect();
    assert_eq!(
        without_args,
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_END r1:t1",
            "TOOL_CALL_START c1 get_weather r1:t1",
            "TOOL_CALL_END c1",
            "TOOL_CALL_RESULT r1:r:c1 c1 sunny",
            "STEP_FINISHED turn 1",
            "STEP_STARTED turn 2",
            "TEXT_MESSAGE_START r1:t2",
            "TEXT_MESSAGE_END r1:t2",
            "STEP_FINISHED turn 2",
            "RUN_FINISHED success",
        ]
    );
    // One END per call, however many events close it.
    assert_eq!(lines.iter().filter(|l| *l == "TOOL_CALL_END c1").count(), 1);
}

#[test]
fn a_retry_voids_the_text_and_the_next_attempt_is_a_new_message() {
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta { text: "Hel".into() },
        AgentEvent::Retry {
            attempt: 1,
            delay: Duration::from_millis(250),
            error: "overloaded".into(),
            usage: Usage::default(),
            cost: Cost::default(),
        },
        AgentEvent::TextDelta { text: "".into() },
        AgentEvent::TextDelta {
            text: "Hello".into(),
        },
        AgentEvent::TurnEnd {
            turn: 1,
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            cost: Cost::default(),
        },
        with(Termination::Completed),
    ];
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_CONTENT r1:t1 Hel",
            "TEXT_MESSAGE_END r1:t1",
            "CUSTOM agent_loop.retry",
            "TEXT_MESSAGE_START r1:t1.2",
            "TEXT_MESSAGE_CONTENT r1:t1.2 Hello",
            "TEXT_MESSAGE_END r1:t1.2",
            "STEP_FINISHED turn 1",
            "RUN_FINISHED success",
        ]
    );
    let AgUiEvent::Custom { value, .. } = &out[5] else {
        unreachable!()
    };
    assert_eq!(
        value,
        &json!({"attempt": 1, "delayMs": 250, "error": "overloaded"})
    );
}

#[test]
fn a_pause_for_approval_and_its_resumption() {
    let (events, paused, _client, mut agent) = paused_run();
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    let lines = shown(&out);
    assert_eq!(
        lines
            .iter()
            .filter(|l| !l.starts_with("TOOL_CALL_ARGS") && !l.starts_with("TEXT_MESSAGE_CONTENT"))
            .collect::<Vec<_>>(),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_END r1:t1",
            "TOOL_CALL_START c9 delete r1:t1",
            "TOOL_CALL_END c9",
            "STEP_FINISHED turn 1",
            "RUN_FINISHED interrupt",
        ]
    );
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = out.last()
    else {
        unreachable!()
    };
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].id, format!("{}:c9", paused.id()));
    assert_eq!(interrupts[0].reason, "tool_approval");
    assert_eq!(interrupts[0].tool_call_id.as_deref(), Some("c9"));

    // The resumed run: inside turn 1, no second announcement of c9.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resumed: Vec<AgentEvent> = rt.block_on(
        agent
            .resume(&paused, agent_loop::agent::Resolutions::new().approve("c9"))
            .collect(),
    );
    let out = encode_all(
        &mut AgUiEncoder::new("th", "r2").resuming(&paused),
        &resumed,
    );
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TOOL_CALL_RESULT r2:r:c9 c9 deleted",
            "STEP_FINISHED turn 1",
            "STEP_STARTED turn 2",
            "TEXT_MESSAGE_START r2:t2",
            "TEXT_MESSAGE_CONTENT r2:t2 Deleted.",
            "TEXT_MESSAGE_END r2:t2",
            "STEP_FINISHED turn 2",
            "RUN_FINISHED success",
        ]
    );
}

#[test]
fn an_error_ends_with_run_error_and_closes_what_is_open() {
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta {
            text: "Half".into(),
        },
        AgentEvent::ToolCallStart {
            id: "c1".into(),
            name: "get_weather".into(),
        },
        with(Termination::Error(agent_loop::Error::Busy)),
    ];
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_CONTENT r1:t1 Half",
            "TEXT_MESSAGE_END r1:t1",
            "TOOL_CALL_START c1 get_weather r1:t1",
            "TOOL_CALL_END c1",
            "STEP_FINISHED turn 1",
            "RUN_ERROR busy",
        ]
    );
    let mut limited = AgUiEncoder::new("th", "r1");
    let out = encode_all(&mut limited, &[with(Termination::MaxTurns)]);
    assert_eq!(shown(&out), ["RUN_STARTED", "RUN_ERROR max_turns"]);
}

#[test]
fn a_cancel_ends_with_the_cancelled_outcome_and_nothing_follows() {
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::ThinkingDelta { text: "Hmm".into() },
        with(Termination::Cancelled),
        AgentEvent::TextDelta {
            text: "late".into(),
        },
    ];
    let mut encoder = AgUiEncoder::new("th", "r1");
    let out = encode_all(&mut encoder, &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "REASONING_START r1:t1:reasoning",
            "REASONING_MESSAGE_START r1:t1:reasoning",
            "REASONING_MESSAGE_CONTENT r1:t1:reasoning Hmm",
            "REASONING_MESSAGE_END r1:t1:reasoning",
            "REASONING_END r1:t1:reasoning",
            "STEP_FINISHED turn 1",
            "RUN_FINISHED cancelled",
        ]
    );
}

#[test]
fn the_snapshot_converts_the_conversation() {
    let messages = vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is this?"),
                ContentBlock::Image {
                    source: MediaSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBO".into(),
                    },
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "A picture.".into(),
                    signature: "s".into(),
                },
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("c1", "no such city", true)],
        },
    ];
    let request = RunAgentInput::from_slice(
        br#"{"threadId":"th","runId":"r2","messages":[{"id":"u-client","role":"user","content":"x"}]}"#,
    )
    .unwrap();
    let encoder = AgUiEncoder::new("th", "r2").with_client_messages(&request);
    let AgUiEvent::MessagesSnapshot { messages } = encoder.messages_snapshot(&messages) else {
        panic!("not a snapshot")
    };
    let json = serde_json::to_value(&messages).unwrap();
    assert_eq!(
        json,
        json!([
            {"role": "user", "id": "u-client", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "data", "value": "iVBO", "mimeType": "image/png"}}
            ]},
            {"role": "reasoning", "id": "r2:m1:reasoning", "content": "A picture."},
            {"role": "assistant", "id": "r2:m1", "content": "Let me look.", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "id": "r2:r:c1", "content": "no such city", "toolCallId": "c1", "error": "no such city"}
        ])
    );
}

// ---------------------------------------------------------------------------------------
// The request

fn body(messages: Value) -> Vec<u8> {
    json!({"threadId": "th", "runId": "r1", "messages": messages})
        .to_string()
        .into_bytes()
}

fn refused(body: &[u8]) -> String {
    match RunAgentInput::from_slice(body) {
        Err(e) => e.message().to_owned(),
        Ok(r) => panic!("accepted: {r:?}"),
    }
}

#[test]
fn bad_bodies_are_refused_with_what_is_wrong() {
    assert!(refused(b"{not json").contains("not an AG-UI RunAgentInput"));
    assert!(refused(br#"{"runId":"r","messages":[]}"#).contains("threadId"));
    assert!(refused(br#"{"threadId":"t","messages":[]}"#).contains("runId"));
    assert!(refused(br#"{"threadId":"t","runId":"r"}"#).contains("messages"));
    assert!(refused(&body(json!([{"role": "user", "content": "hi"}]))).contains("no string `id`"));
    assert!(refused(&body(json!([{"id": "u1", "content": "hi"}]))).contains("no string `role`"));
    assert!(
        refused(&body(json!([{"id": "u1", "role": "user", "content": ""}])))
            .contains("a user message with no content")
    );
    assert!(
        refused(&body(json!([{"id": "u1", "role": "user", "content": []}])))
            .contains("a user message with no content")
    );
    assert!(refused(&body(json!([
        {"id": "a1", "role": "assistant", "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
        ]}
    ])))
    .contains("the arguments of the tool call `c1` are not JSON"));
    assert!(refused(&body(json!([
        {"id": "u1", "role": "user", "content": [
            {"type": "audio", "source": {"type": "data", "value": "AA", "mimeType": "audio/wav"}}
        ]}
    ])))
    .contains("audio parts are not supported"));
    assert!(refused(&body(
        json!([{"id": "u1", "role": "pirate", "content": "arr"}])
    ))
    .contains("not an AG-UI message"));
}

#[test]
fn a_good_body_gives_its_turn_and_history() {
    let request = RunAgentInput::from_slice(&body(json!([
        {"id": "s", "role": "system", "content": "Ignored: the server's prompt rules."},
        {"id": "u1", "role": "user", "content": "Weather in Paris?"},
        {"id": "a1", "role": "assistant", "content": "Checking.", "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
        ]},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "sunny"},
        {"id": "t2", "role": "tool", "toolCallId": "c2", "content": "", "error": "no city"},
        {"id": "x", "role": "activity", "activityType": "progress", "content": {}},
        {"id": "rs", "role": "reasoning", "content": "thinking"},
        {"id": "a2", "role": "assistant", "content": "Sunny."},
        {"id": "u2", "role": "user", "content": [
            {"type": "text", "text": "And this?"},
            {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}
        ], "unknownField": 1}
    ])))
    .unwrap();
    assert_eq!(request.thread_id(), "th");
    assert_eq!(request.run_id(), "r1");
    let history = request.history().unwrap();
    assert_eq!(
        history,
        vec![
            Message::user("Weather in Paris?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris"}),
                    },
                    ContentBlock::ToolUse {
                        id: "c2".into(),
                        name: "get_weather".into(),
                        input: json!({}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::tool_result("c1", "sunny", false),
                    ContentBlock::tool_result("c2", "no city", true),
                ],
            },
            Message::assistant("Sunny."),
        ]
    );
    let UiTurn::Run(input) = request.turn(None).unwrap() else {
        panic!("not a run")
    };
    assert_eq!(
        input.into_message().content,
        vec![
            ContentBlock::text("And this?"),
            ContentBlock::Image {
                source: MediaSource::Url {
                    url: "https://example.com/a.png".into()
                }
            },
        ]
    );
}

#[test]
fn turns_without_a_paused_run() {
    let last_assistant = RunAgentInput::from_slice(&body(json!([
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "a1", "role": "assistant", "content": "hello"}
    ])))
    .unwrap();
    assert!(last_assistant
        .turn(None)
        .unwrap_err()
        .message()
        .contains("is not a user message"));
    let empty = RunAgentInput::from_slice(&body(json!([]))).unwrap();
    assert!(empty
        .turn(None)
        .unwrap_err()
        .message()
        .contains("no user message"));
    let resume = RunAgentInput::from_slice(
        &serde_json::to_vec(&json!({"threadId": "t", "runId": "r", "messages": [
            {"id": "u1", "role": "user", "content": "hi"}
        ], "resume": [{"interruptId": "p:c1", "status": "resolved", "payload": {"approved": true}}]}))
        .unwrap(),
    )
    .unwrap();
    assert!(resume
        .turn(None)
        .unwrap_err()
        .message()
        .contains("no run waits for answers"));
}

fn resume_body(paused: &PausedRun, resume: Value, extra: Vec<Value>) -> RunAgentInput {
    let mut messages = vec![json!({"id": "u1", "role": "user", "content": "Delete a.txt"})];
    messages.extend(extra);
    RunAgentInput::from_slice(
        &serde_json::to_vec(&json!({
            "threadId": "t", "runId": "r2", "messages": messages, "resume": resume
        }))
        .unwrap(),
    )
    .unwrap_or_else(|e| panic!("{e} ({})", paused.id()))
}

#[test]
fn turns_with_a_paused_run() {
    let (_, paused, _, _) = paused_run();
    let id = format!("{}:c9", paused.id());
    let turn = |resume: Value| resume_body(&paused, resume, vec![]).turn(Some(&paused));

    let UiTurn::Resume(answers) =
        turn(json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]))
            .unwrap()
    else {
        panic!("not a resumption")
    };
    assert_eq!(answers.get("c9"), Some(&Resolution::Approve));

    let UiTurn::Resume(answers) = turn(json!([{"interruptId": id, "status": "resolved",
        "payload": {"approved": false, "reason": "not today"}}]))
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        answers.get("c9"),
        Some(&Resolution::Deny {
            reason: "not today".into()
        })
    );

    let UiTurn::Resume(answers) =
        turn(json!([{"interruptId": id, "status": "cancelled"}])).unwrap()
    else {
        panic!()
    };
    assert!(matches!(answers.get("c9"), Some(Resolution::Deny { .. })));

    // An interrupt of another pause, or another call: refused, naming what waits.
    let e = turn(json!([{"interruptId": "old-pause:c9", "status": "resolved",
        "payload": {"approved": true}}]))
    .unwrap_err();
    assert!(
        e.message().contains("names no call this run waits for"),
        "{e}"
    );
    assert!(e.message().contains(&id), "{e}");
    // An approval without `approved`.
    let e =
        turn(json!([{"interruptId": id, "status": "resolved", "payload": {"ok": 1}}])).unwrap_err();
    assert!(e.message().contains("\"approved\": bool"), "{e}");
    // No answer at all.
    let e = turn(json!([])).unwrap_err();
    assert!(
        e.message().contains("gives none") && e.message().contains(&id),
        "{e}"
    );
    // A tool message does not answer an approval.
    let e = resume_body(
        &paused,
        json!([]),
        vec![json!({"id": "t1", "role": "tool", "toolCallId": "c9", "content": "done"})],
    )
    .turn(Some(&paused))
    .unwrap_err();
    assert!(e.message().contains("gives none"), "{e}");
}

#[tokio::test]
async fn a_deferred_call_is_answered_by_a_resume_payload_or_a_tool_message() {
    let client = ScriptedClient::new([ScriptedResponse::tool_call("c5", "pick_color", json!({}))]);
    let mut agent = Agent::builder(client)
        .tool(agent_loop::tool::DeferredTool::new(
            "pick_color",
            "The user picks a color.",
        ))
        .build()
        .unwrap();
    let events = run_events(&mut agent, "Pick").await;
    let Termination::Paused(paused) = outcome_of(&events).termination else {
        panic!("no pause")
    };
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = out.last()
    else {
        panic!("{:?}", out.last())
    };
    assert_eq!(interrupts[0].reason, "tool_result");
    let id = format!("{}:c5", paused.id());

    let by_resume = resume_body(
        &paused,
        json!([{"interruptId": id, "status": "resolved", "payload": {"result": {"color": "blue"}}}]),
        vec![],
    );
    let UiTurn::Resume(answers) = by_resume.turn(Some(&paused)).unwrap() else {
        panic!()
    };
    assert_eq!(
        answers.get("c5"),
        Some(&Resolution::Result {
            content: r#"{"color":"blue"}"#.into(),
            is_error: false
        })
    );
    let by_message = resume_body(
        &paused,
        json!([]),
        vec![json!({"id": "t", "role": "tool", "toolCallId": "c5", "content": "red"})],
    );
    let UiTurn::Resume(answers) = by_message.turn(Some(&paused)).unwrap() else {
        panic!()
    };
    assert_eq!(
        answers.get("c5"),
        Some(&Resolution::Result {
            content: "red".into(),
            is_error: false
        })
    );
}

#[tokio::test]
async fn a_tools_question_is_an_interrupt_with_its_prompt_and_schema_answered_by_answer() {
    use agent_loop::tool::Question;
    let asks = FnTool::new(
        "book",
        "Books a table.",
        |_: Value, ctx: agent_loop::ToolContext| async move {
            match ctx.reply() {
                None => Err(agent_loop::ToolError::ask(
                    Question::new("For how many people?")
                        .schema(json!({"type": "integer", "minimum": 1})),
                )),
                Some(reply) => Ok(format!("booked: {:?}", reply.resolution)),
            }
        },
    );
    let client = ScriptedClient::new([ScriptedResponse::tool_call("c7", "book", json!({}))]);
    let mut agent = Agent::builder(client).tool(asks).build().unwrap();
    let events = run_events(&mut agent, "Book").await;
    let Termination::Paused(paused) = outcome_of(&events).termination else {
        panic!("no pause")
    };
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = out.last()
    else {
        panic!("{:?}", out.last())
    };
    assert_eq!(interrupts[0].reason, "tool_question");
    assert_eq!(
        interrupts[0].message.as_deref(),
        Some("For how many people?")
    );
    assert_eq!(
        interrupts[0].response_schema.as_ref().unwrap()["properties"]["answer"],
        json!({"type": "integer", "minimum": 1})
    );
    let id = format!("{}:c7", paused.id());
    let turn = |resume: Value| resume_body(&paused, resume, vec![]).turn(Some(&paused));
    let UiTurn::Resume(answers) =
        turn(json!([{"interruptId": id, "status": "resolved", "payload": {"answer": 4}}])).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        answers.get("c7"),
        Some(&Resolution::Result {
            content: "4".into(),
            is_error: false
        })
    );
    let UiTurn::Resume(answers) = turn(
        json!([{"interruptId": id, "status": "resolved", "payload": {"approved": false, "reason": "no"}}]),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        answers.get("c7"),
        Some(&Resolution::Deny {
            reason: "no".into()
        })
    );
    let e = turn(json!([{"interruptId": id, "status": "resolved", "payload": {"people": 4}}]))
        .unwrap_err();
    assert!(e.message().contains("answers a tool's question"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Over loopback, with the real clients

#[derive(Clone)]
struct App {
    client: ScriptedClient,
    store: Arc<MemoryStore>,
}

impl App {
    fn agent(&self, thread: &str) -> Agent {
        Agent::builder(self.client.clone())
            .tool(weather_tool())
            .tool(delete_tool())
            .policy(
                RunPolicy::new()
                    .require_approval("delete")
                    .retry(common::fast_retries()),
            )
            .session(self.store.clone(), thread)
            .build()
            .expect("the agent builds")
    }
}

async fn handler(State(app): State<App>, body: Bytes) -> axum::response::Response {
    let thread = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("threadId")?.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut agent = app.agent(&thread);
    respond(&mut agent, &body).await
}

async fn server(responses: Vec<ScriptedResponse>) -> (String, App) {
    let app = App {
        client: ScriptedClient::new(responses),
        store: Arc::new(MemoryStore::new()),
    };
    let router = axum::Router::new()
        .route("/agui", post(handler))
        .with_state(app.clone());
    (format!("{}/agui", common::web::serve(router).await), app)
}

fn messages(value: &Value) -> Vec<Value> {
    value
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut m| {
            if let Some(o) = m.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            m
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_a_run_passes_the_schema_and_the_sequence_checks() {
    if !common::web::node_available("AG-UI schema check", "@ag-ui/core") {
        return;
    }
    let (url, _app) = server(vec![
        ScriptedResponse::thinking("The user wants weather.", "sig")
            .then_text("Checking.")
            .then_tool_call("c1", "get_weather", json!({"city": "Paris"}))
            .chunked(5),
        ScriptedResponse::text("It is sunny.").chunked(4),
    ])
    .await;
    let body = json!({"threadId": "schema", "runId": "run-1", "messages": [
        {"id": "u1", "role": "user", "content": "Weather in Paris?"}
    ]})
    .to_string();
    let out = common::web::node_json("agui-client.mjs", &["raw", &url, &body]).await;
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["schemaFailures"], json!([]), "{out:#}");
    assert_eq!(out["verifyError"], Value::Null, "{out:#}");
    let types: Vec<&str> = out["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    for t in [
        "RUN_STARTED",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "MESSAGES_SNAPSHOT",
    ] {
        assert!(types.contains(&t), "no {t} in {types:?}");
    }
    assert_eq!(
        types[types.len() - 2..],
        ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_runs_text_and_a_tool_round_trip() {
    if !common::web::node_available("AG-UI HttpAgent run", "@ag-ui/client") {
        return;
    }
    let (url, _app) = server(vec![
        ScriptedResponse::thinking("Weather needs a tool.", "sig")
            .then_text("Checking.")
            .then_tool_call("c1", "get_weather", json!({"city": "Paris"}))
            .chunked(5),
        ScriptedResponse::text("It is sunny in Paris."),
    ])
    .await;
    let out =
        common::web::node_json("agui-client.mjs", &["chat", &url, "chat-1", "Weather?"]).await;
    assert_eq!(out["result"], "It is sunny in Paris.", "{out:#}");
    assert_eq!(
        messages(&out["messages"]),
        vec![
            json!({"id": "user-1", "role": "user", "content": "Weather?"}),
            json!({"id": "run-1:t1:reasoning", "role": "reasoning", "content": "Weather needs a tool."}),
            json!({"id": "run-1:t1", "role": "assistant", "content": "Checking.", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]}),
            json!({"id": "run-1:r:c1", "role": "tool", "toolCallId": "c1", "content": "sunny"}),
            json!({"id": "run-1:t2", "role": "assistant", "content": "It is sunny in Paris."}),
        ],
        "{out:#}"
    );
    assert_eq!(out["pendingInterrupts"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_approves_a_paused_call_and_the_run_goes_on() {
    if !common::web::node_available("AG-UI HttpAgent approval", "@ag-ui/client") {
        return;
    }
    let (url, app) = server(vec![
        ScriptedResponse::tool_call("c2", "delete", json!({"path": "a.txt"})),
        ScriptedResponse::text("Deleted a.txt."),
    ])
    .await;
    let out = common::web::node_json(
        "agui-client.mjs",
        &["approve", &url, "approve-1", "Delete a.txt"],
    )
    .await;
    let first = &out["first"];
    let interrupts = first["pendingInterrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1, "{out:#}");
    assert_eq!(interrupts[0]["reason"], "tool_approval");
    assert_eq!(interrupts[0]["toolCallId"], "c2");
    assert!(first["events"]
        .as_array()
        .unwrap()
        .contains(&json!("RUN_FINISHED")));
    // The approval carried back the interrupt's digest.
    let digest = &interrupts[0]["metadata"]["digest"];
    assert!(digest.as_str().unwrap().starts_with("sha256:"), "{out:#}");
    assert_eq!(out["resume"][0]["metadata"]["digest"], *digest, "{out:#}");
    let second = &out["second"];
    assert_eq!(second["result"], "Deleted a.txt.", "{out:#}");
    assert_eq!(second["pendingInterrupts"], json!([]));
    assert_eq!(
        messages(&second["messages"]),
        vec![
            json!({"id": "user-1", "role": "user", "content": "Delete a.txt"}),
            json!({"id": "run-1:t1", "role": "assistant", "toolCalls": [
                {"id": "c2", "type": "function", "function": {"name": "delete", "arguments": "{\"path\":\"a.txt\"}"}}
            ]}),
            json!({"id": "run-2:r:c2", "role": "tool", "toolCallId": "c2", "content": "deleted"}),
            json!({"id": "run-2:t2", "role": "assistant", "content": "Deleted a.txt."}),
        ],
        "{out:#}"
    );
    // The session holds the whole conversation, and no pause.
    let mut agent = app.agent("approve-1");
    assert_eq!(agent.load_session().await.unwrap(), None);
    assert_eq!(agent.messages().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_keeps_only_the_answer_that_was_not_voided_by_a_retry() {
    if !common::web::node_available("AG-UI HttpAgent retry", "@ag-ui/client") {
        return;
    }
    let (url, _app) = server(vec![
        ScriptedResponse::text("Hel").then_fail(agent_loop::LlmError::Transport {
            message: "reset".into(),
        }),
        ScriptedResponse::text("Hello!"),
    ])
    .await;
    let out = common::web::node_json("agui-client.mjs", &["chat", &url, "retry-1", "Hi"]).await;
    assert!(
        out["events"].as_array().unwrap().contains(&json!("CUSTOM")),
        "{out:#}"
    );
    // The voided attempt's message was streamed, then dropped by the snapshot.
    assert_eq!(
        messages(&out["messages"]),
        vec![
            json!({"id": "user-1", "role": "user", "content": "Hi"}),
            json!({"id": "run-1:t1.2", "role": "assistant", "content": "Hello!"}),
        ],
        "{out:#}"
    );
}

async fn post_json(url: &str, body: Vec<u8>) -> (u16, String) {
    let response = agent_loop::provider::reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

fn sse_events(text: &str) -> Vec<AgUiEvent> {
    text.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).expect("an AG-UI event"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_body_gets_a_400_and_the_paused_run_stays_resumable() {
    let (url, app) = server(vec![
        ScriptedResponse::tool_call("c3", "delete", json!({"path": "b.txt"})),
        ScriptedResponse::text("Deleted b.txt."),
    ])
    .await;
    let user = json!({"id": "u1", "role": "user", "content": "Delete b.txt"});
    let (status, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "bad-1", "runId": "r1", "messages": [user]}))
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let events = sse_events(&text);
    check_invariants(&events).unwrap();
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = events.last()
    else {
        panic!("{text}")
    };
    let interrupt = interrupts[0].id.clone();

    let bad_bodies = [
        b"{\"threadId\": \"bad-1\", ".to_vec(),
        serde_json::to_vec(
            &json!({"threadId": "bad-1", "runId": "r2", "messages": [user],
            "resume": [{"interruptId": "someone-else:c3", "status": "resolved",
                        "payload": {"approved": true}}]}),
        )
        .unwrap(),
        serde_json::to_vec(&json!({"threadId": "bad-1", "runId": "r2", "messages": [user]}))
            .unwrap(),
    ];
    for body in bad_bodies {
        let (status, text) = post_json(&url, body).await;
        assert_eq!(status, 400, "{text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(
            error["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{text}"
        );
        let mut agent = app.agent("bad-1");
        let paused = agent.load_session().await.unwrap().expect("still paused");
        assert_eq!(paused.pending()[0].id, "c3");
    }

    let (status, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "bad-1", "runId": "r3", "messages": [user],
            "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]}))
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = sse_events(&text);
    check_invariants(&events).unwrap();
    assert!(
        matches!(events.last(), Some(AgUiEvent::RunFinished { outcome: Some(RunFinishedOutcome::Success), result: Some(r), .. }) if r == "Deleted b.txt."),
        "{text}"
    );
    let Some(AgUiEvent::MessagesSnapshot { messages }) = events.iter().rev().nth(1) else {
        panic!("no snapshot before the end: {text}")
    };
    assert!(
        matches!(&messages[0], AgUiMessage::User { id, content: AgUiContent::Text(t) } if id == "u1" && t == "Delete b.txt")
    );
    assert_eq!(messages.len(), 4, "{messages:#?}");
}

/// A server like [`server`]'s answering with `respond_with(options)`.
async fn server_with(responses: Vec<ScriptedResponse>, options: RespondOptions) -> (String, App) {
    let app = App {
        client: ScriptedClient::new(responses),
        store: Arc::new(MemoryStore::new()),
    };
    let handler = move |State(app): State<App>, body: Bytes| {
        let options = options.clone();
        async move {
            let mut agent = app.agent("typed");
            respond_with(&mut agent, &body, &options).await
        }
    };
    let router = axum::Router::new()
        .route("/agui", post(handler))
        .with_state(app.clone());
    (format!("{}/agui", common::web::serve(router).await), app)
}

/// The thread "typed" after its first run paused on `delete` (call c3): the body of a new
/// user message typed instead of answering, as the client holds the thread (the paused
/// run's snapshot, then the new message).
async fn paused_thread(url: &str) -> (Vec<Value>, String) {
    let user = json!({"id": "u1", "role": "user", "content": "Delete b.txt"});
    let (status, text) = post_json(
        url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r1", "messages": [user]}))
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = sse_events(&text);
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = events.last()
    else {
        panic!("{text}")
    };
    let Some(AgUiEvent::MessagesSnapshot { messages }) = events.iter().rev().nth(1) else {
        panic!("no snapshot: {text}")
    };
    let mut held: Vec<Value> = messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    held.push(json!({"id": "u2", "role": "user", "content": "Never mind, keep it."}));
    (held, interrupts[0].id.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_while_a_call_waits_denies_it_and_the_run_goes_on() {
    let (url, app) = server(vec![
        ScriptedResponse::tool_call("c3", "delete", json!({"path": "b.txt"})),
        ScriptedResponse::text("OK, b.txt stays."),
        ScriptedResponse::tool_call("c4", "delete", json!({"path": "c.txt"})),
        ScriptedResponse::text("Deleted c.txt."),
    ])
    .await;
    let (messages, interrupt) = paused_thread(&url).await;
    let (status, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r2", "messages": messages}))
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "the new message was refused: {text}");
    let events = sse_events(&text);
    check_invariants(&events).unwrap();
    assert_eq!(
        events[1],
        AgUiEvent::Custom {
            name: "agent_loop.calls_denied".into(),
            value: json!({"toolCallIds": ["c3"],
                "reason": "Not run: the user sent a new message instead of answering this call."}),
        },
        "{text}"
    );
    assert!(
        matches!(events.last(), Some(AgUiEvent::RunFinished { outcome: Some(RunFinishedOutcome::Success), result: Some(r), .. }) if r == "OK, b.txt stays."),
        "{text}"
    );
    // The snapshot has the denial as c3's tool message; the history is valid.
    let Some(AgUiEvent::MessagesSnapshot { messages: snapshot }) = events.iter().rev().nth(1)
    else {
        panic!("no snapshot: {text}")
    };
    assert!(
        snapshot.iter().any(|m| matches!(m, AgUiMessage::Tool { tool_call_id, content: AgUiContent::Text(t), .. }
            if tool_call_id == "c3" && t.contains("the user sent a new message instead of answering"))),
        "{snapshot:#?}"
    );
    let sent = app.client.last_request().unwrap();
    assert_eq!(agent_loop::testing::history_violation(&sent.messages), None);
    assert_eq!(sent.messages.last().unwrap().text(), "Never mind, keep it.");
    // The pause is left behind: its interrupt is no longer answerable.
    let mut agent = app.agent("typed");
    assert_eq!(agent.load_session().await.unwrap(), None);
    let (status, _) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r3", "messages": messages,
            "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]}))
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400);

    // A further approval flow works.
    let user = json!({"id": "u3", "role": "user", "content": "Delete c.txt"});
    let (_, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r4", "messages": [user]}))
            .unwrap(),
    )
    .await;
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = sse_events(&text).last().cloned()
    else {
        panic!("{text}")
    };
    let (status, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r5", "messages": [user],
            "resume": [{"interruptId": interrupts[0].id, "status": "resolved", "payload": {"approved": true}}]}))
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        matches!(sse_events(&text).last(), Some(AgUiEvent::RunFinished { result: Some(r), .. }) if r == "Deleted c.txt."),
        "{text}"
    );
    let sent = app.client.last_request().unwrap();
    assert_eq!(agent_loop::testing::history_violation(&sent.messages), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refuse_policy_answers_a_new_message_while_a_call_waits_with_a_400() {
    let (url, app) = server_with(
        vec![
            ScriptedResponse::tool_call("c3", "delete", json!({"path": "b.txt"})),
            ScriptedResponse::text("Deleted b.txt."),
        ],
        RespondOptions::new().while_paused(NewMessageWhilePaused::Refuse),
    )
    .await;
    let (messages, interrupt) = paused_thread(&url).await;
    let (status, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r2", "messages": messages}))
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    let error = error["error"].as_str().unwrap();
    assert!(
        error.contains("delete (call \"c3\") waits for a verdict")
            && error.contains("Answer them (approve or deny)"),
        "{error}"
    );
    assert_eq!(app.client.requests().len(), 1, "nothing ran");
    // The pause still waits, and its answer resumes the run.
    let (status, text) = post_json(
        &url,
        serde_json::to_vec(&json!({"threadId": "typed", "runId": "r3", "messages": messages,
            "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]}))
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        matches!(sse_events(&text).last(), Some(AgUiEvent::RunFinished { result: Some(r), .. }) if r == "Deleted b.txt."),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Properties

/// AG-UI's words and keys, for [`common::ui::any_json`].
const WORDS: &[&str] = &[
    "",
    "user",
    "assistant",
    "tool",
    "activity",
    "text",
    "image",
    "data",
    "url",
    "c1",
    "resolved",
    "cancelled",
    "{",
    "x:c1",
];
const KEYS: &[&str] = &[
    "threadId",
    "runId",
    "messages",
    "resume",
    "id",
    "role",
    "content",
    "toolCalls",
    "toolCallId",
    "function",
    "name",
    "arguments",
    "type",
    "source",
    "value",
    "mimeType",
    "interruptId",
    "status",
    "payload",
    "approved",
    "result",
    "error",
];

fn json_strategy() -> impl Strategy<Value = Value> {
    common::ui::any_json(WORDS, KEYS)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_encoder_keeps_the_sequence_rules(
        events in prop::collection::vec(common::ui::any_event(), 0..40),
        end in 0usize..5,
    ) {
        let finished = match end {
            0 => with(Termination::Completed),
            1 => with(Termination::Cancelled),
            2 => with(Termination::Error(agent_loop::Error::Busy)),
            3 => with(Termination::MaxTurns),
            _ => PAUSED.with(|p| p.0.last().cloned().unwrap()),
        };
        let mut encoder = AgUiEncoder::new("th", "r1");
        let mut out = encode_all(&mut encoder, &events);
        out.extend(encoder.encode(&finished));
        out.extend(encoder.encode(&AgentEvent::TextDelta { text: "after".into() }));
        if let Err(e) = check_invariants(&out) {
            return Err(TestCaseError::fail(format!("{e}\n{:#?}", shown(&out))));
        }
        prop_assert!(out.last().is_some_and(is_terminal));
        for event in &out {
            let json = serde_json::to_value(event).unwrap();
            prop_assert_eq!(&serde_json::from_value::<AgUiEvent>(json).unwrap(), event);
        }
    }

    #[test]
    fn the_request_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(request) = RunAgentInput::from_slice(&bytes) {
            let _ = request.history();
            let _ = request.turn(None);
        }
    }

    #[test]
    fn the_request_parser_never_panics_on_json(
        value in json_strategy(),
        messages in prop::collection::vec(json_strategy(), 0..4),
    ) {
        let paused = PAUSED.with(|p| p.1.clone());
        for body in [
            value.clone(),
            json!({"threadId": "t", "runId": "r", "messages": messages, "resume": value}),
        ] {
            if let Ok(request) = RunAgentInput::from_slice(&serde_json::to_vec(&body).unwrap()) {
                let _ = request.history();
                let _ = request.turn(None);
                let _ = request.turn(Some(&paused));
            }
        }
    }
}

thread_local! {
    /// A paused run's events and pause (made once per test thread).
    static PAUSED: (Vec<AgentEvent>, PausedRun) = {
        let (events, paused, _, _) = paused_run();
        (events, paused)
    };
    /// A completed run's outcome.
    static COMPLETED: RunOutcome = completed_outcome();
}

// ---------------------------------------------------------------------------------------
// What mutation testing found unchecked

/// The snapshot gives every message the id the client knows it by, in place: user messages
/// and text-only assistant messages by their order, messages with calls by their calls, tool
/// messages by their call; this run's messages keep the ids they were streamed with, and any
/// other message gets a fresh id of its own, never one of those.
#[test]
fn the_snapshot_puts_each_client_id_back_in_place() {
    let request = RunAgentInput::from_slice(&body(json!([
        {"id": "u1", "role": "user", "content": "first"},
        {"id": "a1", "role": "assistant", "content": "one"},
        {"id": "u2", "role": "user", "content": "second"},
        {"id": "a2", "role": "assistant", "content": "two"},
        {"id": "a3", "role": "assistant", "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ]},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "sunny"},
        {"id": "u3", "role": "user", "content": "third"}
    ])))
    .unwrap();
    let mut encoder = AgUiEncoder::new("th", "r1").with_client_messages(&request);
    // This run streamed two turns: text and a call, then text alone.
    let ran = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta {
            text: "four".into(),
        },
        AgentEvent::ToolCallStart {
            id: "c2".into(),
            name: "get_weather".into(),
        },
        AgentEvent::ToolCall {
            id: "c2".into(),
            name: "get_weather".into(),
            input: json!({}),
        },
        AgentEvent::TurnStart { turn: 2 },
        AgentEvent::TextDelta {
            text: "five".into(),
        },
    ];
    encode_all(&mut encoder, &ran);
    let call = |id: &str| ContentBlock::ToolUse {
        id: id.into(),
        name: "get_weather".into(),
        input: json!({}),
    };
    let assistant = |content: Vec<ContentBlock>| Message {
        role: Role::Assistant,
        content,
    };
    let user = |content: Vec<ContentBlock>| Message {
        role: Role::User,
        content,
    };
    let conversation = vec![
        Message::user("first"),
        Message::assistant("one"),
        Message::user("second"),
        Message::assistant("two"),
        assistant(vec![call("c0")]), // neither the client's nor this run's
        assistant(vec![call("c1")]),
        user(vec![ContentBlock::tool_result("c1", "sunny", false)]),
        user(vec![
            ContentBlock::text("third"),
            ContentBlock::Document {
                source: MediaSource::Url {
                    url: "https://example.com/a.pdf".into(),
                },
                title: None,
            },
        ]),
        assistant(vec![ContentBlock::text("four"), call("c2")]),
        user(vec![ContentBlock::tool_result("c2", "rainy", false)]),
        Message::assistant("five"),
    ];
    let AgUiEvent::MessagesSnapshot { messages } = encoder.messages_snapshot(&conversation) else {
        panic!("not a snapshot")
    };
    let json = serde_json::to_value(&messages).unwrap();
    let ids: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["u1", "a1", "u2", "a2", "r1:m4", "a3", "t1", "u3", "r1:t1", "r1:r:c2", "r1:t2"]
    );
    assert_eq!(
        json[7]["content"],
        json!([
            {"type": "text", "text": "third"},
            {"type": "document", "source": {"type": "url", "value": "https://example.com/a.pdf"}}
        ])
    );
}

/// Each reasoning block of a message is a reasoning message of its own, before it: Anthropic's
/// thinking and OpenAI Responses' reasoning summaries alike, numbered after the first.
#[test]
fn every_reasoning_block_is_its_own_reasoning_message() {
    let message = Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::Thinking {
                thinking: "First thought.".into(),
                signature: "s1".into(),
            },
            ContentBlock::Thinking {
                thinking: "Second thought.".into(),
                signature: "s2".into(),
            },
            ContentBlock::Reasoning {
                id: "rs_1".into(),
                summary: vec!["A summary.".into(), "Its second part.".into()],
                encrypted_content: None,
            },
            ContentBlock::text("Answer."),
        ],
    };
    let encoder = AgUiEncoder::new("th", "r1");
    let AgUiEvent::MessagesSnapshot { messages } =
        encoder.messages_snapshot(&[Message::user("q"), message])
    else {
        panic!("not a snapshot")
    };
    let json = serde_json::to_value(&messages).unwrap();
    assert_eq!(
        json,
        json!([
            {"role": "user", "id": "r1:m0", "content": "q"},
            {"role": "reasoning", "id": "r1:m1:reasoning", "content": "First thought."},
            {"role": "reasoning", "id": "r1:m1:reasoning2", "content": "Second thought."},
            {"role": "reasoning", "id": "r1:m1:reasoning3", "content": "A summary.\n\nIts second part."},
            {"role": "assistant", "id": "r1:m1", "content": "Answer."}
        ])
    );
}

/// `RUN_FINISHED` carries the run's usage in AG-UI's accounting: input is the whole prompt,
/// cache reads and writes are parts of it, reasoning a part of the output (left out at 0).
#[test]
fn run_finished_carries_the_usage() {
    let mut outcome = COMPLETED.with(RunOutcome::clone);
    outcome.usage = Usage {
        input_tokens: 10,
        output_tokens: 7,
        cache_read_input_tokens: 100,
        cache_creation_input_tokens: 20,
        reasoning_tokens: 3,
    };
    let mut encoder = AgUiEncoder::new("th", "r1");
    let events = encoder.encode(&AgentEvent::Finished(outcome.clone()));
    let usage = |events: &[AgUiEvent]| {
        let last = serde_json::to_value(events.last().unwrap()).unwrap();
        assert_eq!(last["type"], "RUN_FINISHED");
        last["usage"].clone()
    };
    assert_eq!(
        usage(&events),
        json!([{"inputTokens": 130, "outputTokens": 7, "totalTokens": 137,
                "reasoningTokens": 3, "cachedInputTokens": 100, "cacheWriteInputTokens": 20}])
    );
    outcome.usage.reasoning_tokens = 0;
    let events = AgUiEncoder::new("th", "r1").encode(&AgentEvent::Finished(outcome));
    assert_eq!(
        usage(&events),
        json!([{"inputTokens": 130, "outputTokens": 7, "totalTokens": 137,
                "cachedInputTokens": 100, "cacheWriteInputTokens": 20}])
    );
}

/// Every way a run stops without an answer is a `RUN_ERROR` whose code names it.
#[test]
fn each_stop_has_its_own_error_code() {
    let stops = [
        (Termination::MaxTurns, "max_turns"),
        (
            Termination::TokenBudget {
                used: 1,
                next_call: 2,
                budget: 2,
            },
            "token_budget",
        ),
        (
            Termination::CostBudget {
                spent: Cost::default(),
                next_call: agent_loop::pricing::Usd::from_dollars(1.0),
                budget: agent_loop::pricing::Usd::from_dollars(1.0),
            },
            "cost_budget",
        ),
        (Termination::ToolFailures { turns: 3 }, "tool_failures"),
        (
            Termination::RepeatedToolCall {
                name: "x".into(),
                times: 3,
            },
            "repeated_tool_call",
        ),
        (
            Termination::StoppedByHook {
                reason: "no".into(),
            },
            "stopped_by_hook",
        ),
        (Termination::Refused, "refused"),
        (Termination::MaxTokens, "max_tokens"),
        (
            Termination::InvalidOutput {
                raw: json!({}),
                error: "bad".into(),
            },
            "invalid_output",
        ),
    ];
    for (termination, code) in stops {
        let text = termination.to_string();
        let events = AgUiEncoder::new("th", "r1").encode(&with(termination));
        let last = serde_json::to_value(events.last().unwrap()).unwrap();
        assert_eq!(last["type"], "RUN_ERROR", "{text}");
        assert_eq!(last["code"], code, "{text}");
        assert_eq!(last["message"], text);
    }
}

/// A sub-agent's steps, calls, results and end reach the client as `agent_loop.sub_agent`
/// custom events with their path; its text does not (it is not the parent's answer).
#[test]
fn a_sub_agents_steps_are_custom_events_and_its_text_is_not_streamed() {
    let path: agent_loop::agent::AgentPath = serde_json::from_value(json!([
        {"call_id": "c1", "agent": "researcher"}
    ]))
    .expect("a path of one step");
    assert_eq!(path.depth(), 1);
    let nested = |event: AgentEvent| AgentEvent::SubAgent {
        path: path.clone(),
        event: Box::new(event),
    };
    let mut outcome = COMPLETED.with(RunOutcome::clone);
    outcome.final_text = "Found it.".into();
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        nested(AgentEvent::TurnStart { turn: 1 }),
        nested(AgentEvent::TextDelta {
            text: "thinking aloud".into(),
        }),
        nested(AgentEvent::ToolCall {
            id: "s1".into(),
            name: "search".into(),
            input: json!({"q": "x"}),
        }),
        nested(AgentEvent::ToolResult {
            id: "s1".into(),
            name: "search".into(),
            content: "a hit".into(),
            is_error: false,
            duration: Duration::from_millis(1),
        }),
        nested(AgentEvent::Finished(outcome)),
    ];
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    let customs: Vec<Value> = out
        .iter()
        .filter_map(|e| match e {
            AgUiEvent::Custom { name, value } if name == "agent_loop.sub_agent" => {
                Some(value.clone())
            }
            _ => None,
        })
        .collect();
    let shown = path.to_string();
    assert_eq!(
        customs,
        [
            json!({"path": shown, "type": "turn_start", "turn": 1}),
            json!({"path": shown, "type": "tool_call", "toolCallId": "s1", "toolCallName": "search", "input": {"q": "x"}}),
            json!({"path": shown, "type": "tool_result", "toolCallId": "s1", "content": "a hit", "isError": false}),
            json!({"path": shown, "type": "finished", "termination": "completed", "text": "Found it."}),
        ]
    );
    assert!(
        !out.iter()
            .any(|e| matches!(e, AgUiEvent::TextMessageContent { .. })),
        "{out:?}"
    );
}

/// A paused run whose waiting call was never streamed (a provider that sends calls whole)
/// still announces it in full before its interrupt: start, arguments, end.
#[test]
fn a_pending_call_never_streamed_is_announced_whole_at_the_pause() {
    let (events, paused, _, _) = paused_run();
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("no Finished")
    };
    let out = encode_all(
        &mut AgUiEncoder::new("th", "r1"),
        &[
            AgentEvent::TurnStart { turn: 1 },
            AgentEvent::Finished(outcome.clone()),
        ],
    );
    let shown = shown(&out);
    let start = shown
        .iter()
        .position(|s| s.starts_with("TOOL_CALL_START c9 delete"))
        .unwrap_or_else(|| panic!("{shown:#?}"));
    assert_eq!(shown[start + 1], r#"TOOL_CALL_ARGS c9 {"path":"a.txt"}"#);
    assert_eq!(shown[start + 2], "TOOL_CALL_END c9");
    assert!(shown.last().unwrap().ends_with("interrupt"), "{shown:#?}");
    assert_eq!(paused.pending()[0].id, "c9");
}

/// Tool messages answer the calls of the assistant message before them: a tool message after
/// a user's own words is a message of its own, never merged into the user's text.
#[test]
fn a_tool_message_after_user_text_is_not_merged_into_it() {
    let request = RunAgentInput::from_slice(&body(json!([
        {"id": "u1", "role": "user", "content": "Weather?"},
        {"id": "a1", "role": "assistant", "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ]},
        {"id": "u2", "role": "user", "content": "Hurry."},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "sunny"},
        {"id": "u3", "role": "user", "content": "And tomorrow?"}
    ])))
    .unwrap();
    let history = request.history().unwrap();
    assert_eq!(history.len(), 4, "{history:#?}");
    assert_eq!(history[2], Message::user("Hurry."));
    assert_eq!(
        history[3].content,
        [ContentBlock::tool_result("c1", "sunny", false)]
    );
}

/// Reasoning that comes back after text within one turn is a second reasoning message, with
/// an id of its own (the first keeps its own).
#[test]
fn a_second_reasoning_span_in_a_turn_has_its_own_id() {
    let think = |text: &str| AgentEvent::ThinkingDelta { text: text.into() };
    let out = encode_all(
        &mut AgUiEncoder::new("th", "r1"),
        &[
            AgentEvent::TurnStart { turn: 1 },
            think("First."),
            AgentEvent::TextDelta {
                text: "So far.".into(),
            },
            think("Second."),
        ],
    );
    let starts: Vec<String> = out
        .iter()
        .filter_map(|e| match e {
            AgUiEvent::ReasoningStart { message_id } => Some(message_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(starts, ["r1:t1:reasoning", "r1:t1:reasoning2"]);
}

/// The client's media are checked as they enter, like any image or document: an image part
/// must be an image whose bytes are what its type says, a document part a PDF; each refusal
/// says what is wrong.
#[test]
fn media_parts_are_checked_as_they_enter() {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0, 0, 0, 0]);
    let pdf = b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF";
    let part = |kind: &str, mime: &str, value: String| {
        body(json!([{"id": "u1", "role": "user", "content": [
            {"type": "text", "text": "Look."},
            {"type": kind, "source": {"type": "data", "value": value, "mimeType": mime}}
        ]}]))
    };
    let outcome = |body: Vec<u8>| match RunAgentInput::from_slice(&body) {
        Err(e) => Err(e.message().to_owned()),
        Ok(request) => match request.turn(None) {
            Err(e) => Err(e.message().to_owned()),
            Ok(UiTurn::Run(input)) => Ok(input.into_message()),
            Ok(turn) => panic!("not a run: {turn:?}"),
        },
    };
    let image = outcome(part("image", "image/png", b64(&png))).expect("a PNG is an image");
    assert!(
        matches!(image.content[1], ContentBlock::Image { .. }),
        "{image:?}"
    );
    let document = outcome(part("document", "application/pdf", b64(pdf))).expect("a PDF");
    assert!(
        matches!(document.content[1], ContentBlock::Document { .. }),
        "{document:?}"
    );
    for (body, says) in [
        (
            part("image", "application/pdf", b64(&png)),
            "an image part of type `application/pdf`",
        ),
        (
            part("image", "image/png", "iVBO".to_owned()),
            "an image part: the bytes are not image/png",
        ),
        (
            part("image", "image/png", "not base64!".to_owned()),
            "an image part: the data is not valid base64",
        ),
        (
            part("document", "application/pdf", b64(b"not a pdf")),
            "a document part:",
        ),
        (
            part("document", "text/plain", b64(b"hello")),
            "a document part of type `text/plain`",
        ),
    ] {
        let refused = outcome(body).expect_err(says);
        assert!(refused.contains(says), "{refused} does not say {says}");
    }
}

/// A server whose agents hold nothing (no session) gets the conversation from the client:
/// `respond` gives a fresh agent the history before the new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_runs_on_the_clients_history() {
    let client = ScriptedClient::new([ScriptedResponse::text("Still sunny.")]);
    let recorded = client.clone();
    let app = axum::Router::new().route(
        "/agui",
        post(move |body: Bytes| {
            let client = client.clone();
            async move {
                let mut agent = Agent::builder(client).build().expect("the agent builds");
                respond(&mut agent, &body).await
            }
        }),
    );
    let url = common::web::serve(app).await;
    let (status, text) = post_json(
        &format!("{url}/agui"),
        body(json!([
            {"id": "u1", "role": "user", "content": "Weather?"},
            {"id": "a1", "role": "assistant", "content": "Sunny."},
            {"id": "u2", "role": "user", "content": "And now?"}
        ])),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("Still sunny."), "{text}");
    let requests = recorded.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        *requests[0].messages,
        [
            Message::user("Weather?"),
            Message::assistant("Sunny."),
            Message::user("And now?"),
        ]
    );
}

/// A fallback, a compaction, a tool's progress and a handoff reach the client as this crate's
/// `CUSTOM` events with their figures; a fallback also ends the text it voids.
#[test]
fn the_runs_other_events_are_custom_events() {
    let out = encode_all(
        &mut AgUiEncoder::new("th", "r1"),
        &common::ui::run_status_events(),
    );
    let tail: Vec<Value> = out[out.len() - 5..]
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(
        tail,
        [
            json!({"type": "TEXT_MESSAGE_END", "messageId": "r1:t1"}),
            json!({"type": "CUSTOM", "name": "agent_loop.fallback",
                   "value": {"from": "big", "to": "small", "error": "overloaded"}}),
            json!({"type": "CUSTOM", "name": "agent_loop.compacted",
                   "value": {"tokensBefore": 900, "tokensAfter": 300}}),
            json!({"type": "CUSTOM", "name": "agent_loop.tool_progress",
                   "value": {"toolCallId": "c1", "message": "halfway"}}),
            json!({"type": "CUSTOM", "name": "agent_loop.handoff",
                   "value": {"from": "triage", "to": "billing"}}),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// A run the host stops after its turn.

fn weather_then_answer() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("Checking.").then_tool_call(
            "c1",
            "get_weather",
            json!({"city": "Paris"}),
        ),
        ScriptedResponse::text("Never asked for."),
    ]
}

#[tokio::test]
async fn a_run_stopped_after_its_turn_finishes_with_success() {
    let client = ScriptedClient::new(weather_then_answer());
    let mut agent = agent(&client);
    agent.handle().stop_after_turn();
    let events = run_events(&mut agent, "Weather?").await;
    assert_eq!(
        outcome_of(&events).termination,
        Termination::StoppedAfterTurn
    );
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        shown(&out)
            .into_iter()
            .filter(|l| !l.starts_with("TOOL_CALL_ARGS"))
            .collect::<Vec<_>>(),
        [
            "RUN_STARTED",
            "STEP_STARTED turn 1",
            "TEXT_MESSAGE_START r1:t1",
            "TEXT_MESSAGE_CONTENT r1:t1 Checking.",
            "TEXT_MESSAGE_END r1:t1",
            "TOOL_CALL_START c1 get_weather r1:t1",
            "TOOL_CALL_END c1",
            "TOOL_CALL_RESULT r1:r:c1 c1 sunny",
            "STEP_FINISHED turn 1",
            "RUN_FINISHED success",
        ]
    );
    assert_eq!(client.requests().len(), 1, "no second model call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_after_its_turn_passes_the_clients_checks_as_a_finished_run() {
    if !common::web::node_available("AG-UI stopped run", "@ag-ui/client") {
        return;
    }
    let app = App {
        client: ScriptedClient::new(weather_then_answer()),
        store: Arc::new(MemoryStore::new()),
    };
    let handler = |State(app): State<App>, body: Bytes| async move {
        let mut agent = app.agent("stopped");
        agent.handle().stop_after_turn();
        respond(&mut agent, &body).await
    };
    let router = axum::Router::new()
        .route("/agui", post(handler))
        .with_state(app);
    let url = format!("{}/agui", common::web::serve(router).await);
    let body = json!({"threadId": "stopped", "runId": "run-1", "messages": [
        {"id": "u1", "role": "user", "content": "Weather?"}
    ]})
    .to_string();
    let out = common::web::node_json("agui-client.mjs", &["raw", &url, &body]).await;
    assert_eq!(out["schemaFailures"], json!([]), "{out:#}");
    assert_eq!(out["verifyError"], Value::Null, "{out:#}");
    let events = out["events"].as_array().unwrap();
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{out:#}");
    assert_eq!(
        events.last().unwrap()["outcome"],
        json!({"type": "success"})
    );
    assert_eq!(events.last().unwrap()["result"], "Checking.");
    assert!(!events.iter().any(|e| e["type"] == "RUN_ERROR"), "{out:#}");
}

// ---------------------------------------------------------------------------------------
// Approvals bound to their call by its digest.

/// The digest of the call `id` of `delete` on `path`, as a pause gives it (another call than
/// the one a test's run waits in, when the path differs).
fn digest_of(id: &str, path: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        id,
        "delete",
        json!({ "path": path }),
    )]);
    let events = rt.block_on(run_events(&mut agent(&client), "Delete it"));
    let Termination::Paused(paused) = outcome_of(&events).termination else {
        panic!("the run did not pause")
    };
    paused.pending()[0].digest.clone()
}

#[test]
fn an_interrupt_carries_its_calls_digest_and_an_answer_for_another_call_is_refused() {
    let (events, paused, _client, mut agent) = paused_run();
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    let Some(AgUiEvent::RunFinished {
        outcome: Some(RunFinishedOutcome::Interrupt { interrupts }),
        ..
    }) = out.last()
    else {
        panic!("not an interrupt")
    };
    let digest = paused.pending()[0].digest.clone();
    assert!(digest.starts_with("sha256:"), "{digest}");
    assert_eq!(interrupts[0].metadata, Some(json!({ "digest": digest })));

    let id = format!("{}:c9", paused.id());
    let answer = |digest: &str| {
        let resume = json!([{"interruptId": id, "status": "resolved",
            "payload": {"approved": true}, "metadata": {"digest": digest}}]);
        match resume_body(&paused, resume, vec![])
            .turn(Some(&paused))
            .unwrap()
        {
            UiTurn::Resume(answers) => answers,
            other => panic!("{other:?}"),
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // The same id, other arguments: refused, as the protocol's error; nothing ran.
    let other = digest_of("c9", "b.txt");
    assert_ne!(other, digest);
    let stale = answer(&other);
    assert_eq!(stale.digest("c9"), Some(other.as_str()));
    let refused: Vec<AgentEvent> = rt.block_on(agent.resume(&paused, stale).collect());
    let out = encode_all(
        &mut AgUiEncoder::new("th", "r2").resuming(&paused),
        &refused,
    );
    check_invariants(&out).unwrap();
    let Some(AgUiEvent::RunError { message, code, .. }) = out.last() else {
        panic!("{:#?}", shown(&out))
    };
    assert_eq!(code.as_deref(), Some("stale_answer"), "{message}");
    assert!(
        message.contains(&other) && message.contains(&digest),
        "{message}"
    );
    assert!(!out
        .iter()
        .any(|e| matches!(e, AgUiEvent::ToolCallResult { .. })));

    // The answer for this very call: the run goes on.
    let resumed: Vec<AgentEvent> = rt.block_on(agent.resume(&paused, answer(&digest)).collect());
    let out = encode_all(
        &mut AgUiEncoder::new("th", "r3").resuming(&paused),
        &resumed,
    );
    assert!(shown(&out).contains(&"TOOL_CALL_RESULT r3:r:c9 c9 deleted".to_owned()));
    assert!(matches!(
        out.last(),
        Some(AgUiEvent::RunFinished {
            outcome: Some(RunFinishedOutcome::Success),
            ..
        })
    ));

    // A digest that is not a string is the request's fault.
    let resume = json!([{"interruptId": id, "status": "resolved",
        "payload": {"approved": true}, "metadata": {"digest": 7}}]);
    let e = resume_body(&paused, resume, vec![])
        .turn(Some(&paused))
        .unwrap_err();
    assert!(
        e.message().contains("`metadata.digest` must be a string"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_with_another_calls_digest_is_refused_then_approves_with_its_own() {
    if !common::web::node_available("AG-UI HttpAgent stale approval", "@ag-ui/client") {
        return;
    }
    let (url, app) = server(vec![
        ScriptedResponse::tool_call("c2", "delete", json!({"path": "a.txt"})),
        ScriptedResponse::text("Deleted a.txt."),
    ])
    .await;
    let other = tokio::task::spawn_blocking(|| digest_of("c2", "b.txt"))
        .await
        .unwrap();
    let out = common::web::node_json(
        "agui-client.mjs",
        &["approve-stale", &url, "stale-1", "Delete a.txt", &other],
    )
    .await;
    let interrupts = out["first"]["pendingInterrupts"].as_array().unwrap();
    let digest = interrupts[0]["metadata"]["digest"].as_str().unwrap();
    assert!(digest.starts_with("sha256:") && digest != other, "{out:#}");
    let stale = &out["stale"];
    assert_eq!(stale["runError"]["code"], "stale_answer", "{out:#}");
    assert!(
        !strings(&stale["events"]).contains(&"TOOL_CALL_RESULT".to_owned()),
        "{out:#}"
    );
    let fresh = &out["fresh"];
    assert_eq!(fresh["result"], "Deleted a.txt.", "{out:#}");
    assert_eq!(fresh["pendingInterrupts"], json!([]));
    let mut agent = app.agent("stale-1");
    assert_eq!(agent.load_session().await.unwrap(), None, "resumed once");
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// The host's steering.

#[tokio::test]
async fn steered_words_are_a_user_message_between_the_turns_and_keep_their_id() {
    let client = ScriptedClient::new(weather_then_answer());
    let mut agent = agent(&client);
    let handle = agent.handle();
    let mut run = std::pin::pin!(agent.run("Weather?"));
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.steer("In Celsius, please.");
        }
        events.push(event);
    }
    let request = RunAgentInput::from_slice(&body(json!([
        {"id": "u-client", "role": "user", "content": "Weather?"}
    ])))
    .unwrap();
    let mut encoder = AgUiEncoder::new("th", "r1").with_client_messages(&request);
    let out = encode_all(&mut encoder, &events);
    check_invariants(&out).unwrap();
    let lines = shown(&out);
    let at = lines
        .iter()
        .position(|l| l == "TEXT_MESSAGE_START r1:s1")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(
        lines[at - 1..at + 4],
        [
            "STEP_FINISHED turn 1",
            "TEXT_MESSAGE_START r1:s1",
            "TEXT_MESSAGE_CONTENT r1:s1 In Celsius, please.",
            "TEXT_MESSAGE_END r1:s1",
            "STEP_STARTED turn 2",
        ]
    );
    assert!(matches!(&out[at], AgUiEvent::TextMessageStart { role, .. } if role == "user"));
    let AgUiEvent::MessagesSnapshot { messages } = encoder.messages_snapshot(&agent.messages())
    else {
        unreachable!()
    };
    let users: Vec<Value> = messages
        .iter()
        .filter(|m| matches!(m, AgUiMessage::User { .. }))
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(
        users,
        [
            json!({"role": "user", "id": "u-client", "content": "Weather?"}),
            json!({"role": "user", "id": "r1:s1", "content": "In Celsius, please."}),
        ]
    );
}

#[tokio::test]
async fn words_a_run_never_heard_are_handed_back_before_its_end() {
    let client = ScriptedClient::new(weather_then_answer());
    let mut agent = agent(&client);
    let handle = agent.handle();
    let mut run = std::pin::pin!(agent.run("Weather?"));
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.steer("In Celsius, please.");
            handle.stop_after_turn();
        }
        events.push(event);
    }
    let out = encode_all(&mut AgUiEncoder::new("th", "r1"), &events);
    check_invariants(&out).unwrap();
    assert_eq!(
        out[out.len() - 2],
        AgUiEvent::Custom {
            name: "agent_loop.undelivered".into(),
            value: json!({"texts": ["In Celsius, please."]}),
        }
    );
    assert!(!shown(&out).iter().any(|l| l.contains("r1:s1")));
}
