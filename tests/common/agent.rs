//! Helpers for the tests that run an [`Agent`] (tests/agent/agent.rs, tests/providers/faults.rs).

use agent_loop::testing::history_violation;
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, ContentBlock, RunOutcome, ToolError};
use futures::StreamExt;
use serde::Deserialize;

/// Runs the agent to the end; checks that `Finished` is the last event and the only one.
pub async fn run(agent: &mut Agent, input: &str) -> (Vec<AgentEvent>, RunOutcome) {
    let events: Vec<AgentEvent> = agent.run(input).collect().await;
    finished(events)
}

/// [`run`] with any input (text, images, documents).
pub async fn run_input(
    agent: &mut Agent,
    input: impl Into<agent_loop::UserInput>,
) -> (Vec<AgentEvent>, RunOutcome) {
    let events: Vec<AgentEvent> = agent.run(input).collect().await;
    finished(events)
}

/// Runs the agent, calling `handle.cancel()` right after the first event `cancel_on` accepts.
pub async fn run_cancelling(
    agent: &mut Agent,
    input: &str,
    cancel_on: impl Fn(&AgentEvent) -> bool,
) -> (Vec<AgentEvent>, RunOutcome) {
    let handle = agent.handle();
    let mut events = Vec::new();
    {
        let mut stream = std::pin::pin!(agent.run(input));
        let mut cancelled = false;
        while let Some(event) = stream.next().await {
            if !cancelled && cancel_on(&event) {
                handle.cancel();
                cancelled = true;
            }
            events.push(event);
        }
    }
    finished(events)
}

/// The outcome of a run's events; checks that `Finished` is the last event and the only one.
pub fn finished(events: Vec<AgentEvent>) -> (Vec<AgentEvent>, RunOutcome) {
    let outcome = match events.last() {
        Some(AgentEvent::Finished(o)) => o.clone(),
        other => panic!("the last event is not Finished: {other:?}\n{events:#?}"),
    };
    let count = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Finished(_)))
        .count();
    assert_eq!(count, 1, "exactly one Finished event: {events:#?}");
    (events, outcome)
}

/// The agent's history is valid for a provider (the invariant every request relies on).
#[track_caller]
pub fn assert_valid(agent: &Agent) {
    if let Some(v) = history_violation(&agent.messages()) {
        panic!("invalid history: {v}\n{:#?}", agent.messages());
    }
}

/// The content of the tool result answering `id` in the history.
#[track_caller]
pub fn result_in_history(agent: &Agent, id: &str) -> (String, bool) {
    agent
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } if tool_use_id == id => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool result for {id} in {:#?}", agent.messages()))
}

/// The content of the `ToolResult` event of call `id`.
#[track_caller]
pub fn result_event(events: &[AgentEvent], id: &str) -> String {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { id: i, content, .. } if i == id => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ToolResult event for {id}: {events:#?}"))
}

/// `read`: a read-only tool that answers "hello" (the pause and session tests' file reader).
pub fn read_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "read",
        "Reads a file.",
        |_: serde_json::Value, _ctx| async move { Ok::<_, ToolError>("hello") },
    )
    .read_only(true)
}

/// `read`: answers `contents of {path}` for its `path` (the compaction tests' file reader).
pub fn path_reader() -> impl agent_loop::Tool {
    FnTool::new(
        "read",
        "Reads a file.",
        |input: serde_json::Value, _ctx| async move {
            let path = input["path"].as_str().unwrap_or("?").to_owned();
            Ok::<_, ToolError>(format!("contents of {path}"))
        },
    )
    .input_schema(serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}))
}

/// Asserts that the run moved to its fallback model.
#[track_caller]
pub fn assert_fell_back(events: &[AgentEvent]) {
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Fallback { .. })),
        "{events:#?}"
    );
}

/// The input of [`echo_tool`].
#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct EchoInput {
    /// The text to echo.
    pub text: String,
}

/// `echo`: returns its `text`.
pub fn echo_tool() -> impl agent_loop::Tool {
    FnTool::new("echo", "Echoes text.", |i: EchoInput, _ctx| async move {
        Ok::<_, ToolError>(i.text)
    })
}

/// The input of [`add_tool`].
#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct AddInput {
    /// The first addend.
    pub a: i64,
    /// The second addend.
    pub b: i64,
}

/// `add`: adds two integers.
pub fn add_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "add",
        "Adds two integers.",
        |i: AddInput, _ctx| async move { Ok::<_, ToolError>((i.a + i.b).to_string()) },
    )
}
