//! The agent loop against a real server that nobody here wrote: `@copilotkit/aimock` (npm,
//! pinned in package.json and package-lock.json, installed by `npm ci`). It serves Gemini
//! `streamGenerateContent` (SSE), Bedrock `converse-stream` (the AWS binary event stream, with
//! its CRCs) and Ollama `/api/chat` (NDJSON) from one fixture file,
//! tests/fixtures/aimock/agent.json. In each format the agent runs a text answer and a tool
//! round trip: the tool's result must reach the server (the answer's fixture matches on it).
//!
//! With `CI` set, a missing `node` or package fails the test; elsewhere the test says on
//! stderr what it skipped and why.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentEvent, BedrockClient, GeminiClient, LlmClient, OllamaClient, Termination, ToolError,
};
use futures::StreamExt;
use serde::Deserialize;

const CLI: &str = "node_modules/@copilotkit/aimock/dist/cli.js";
const FIXTURES: &str = "tests/fixtures/aimock/agent.json";

/// A running aimock, killed on drop.
struct Aimock {
    child: Child,
    url: String,
}

impl Drop for Aimock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts aimock on a free loopback port, or `None` (after saying so) when the test must be
/// skipped.
fn aimock() -> Option<Aimock> {
    if !common::web::node_available("an aimock test", "@copilotkit/aimock/dist/cli.js") {
        return None;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cli = root.join(CLI);
    let mut child = Command::new("node")
        .arg(&cli)
        .args(["--port", "0", "--host", "127.0.0.1", "--fixtures"])
        .arg(root.join(FIXTURES))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node starts aimock");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    // aimock prints "[aimock] aimock server listening on http://127.0.0.1:PORT" once bound.
    let url = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("aimock exited before it listened");
        };
        if let Some(at) = line.find("listening on ") {
            break line[at + "listening on ".len()..].trim().to_owned();
        }
    };
    // Keep draining its log so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Some(Aimock { child, url })
}

#[derive(Deserialize, schemars::JsonSchema)]
struct AddInput {
    a: i64,
    b: i64,
}

/// The `add` tool, counting its calls and remembering its arguments.
fn add_tool(calls: Arc<AtomicU32>) -> impl agent_loop::Tool {
    FnTool::new("add", "Adds two integers.", move |i: AddInput, _ctx| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>((i.a + i.b).to_string())
        }
    })
}

/// A text answer, then a tool round trip, through `Agent` in the client's format.
async fn text_and_tool_round_trip(client: Arc<dyn LlmClient>, format: &str) {
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let events: Vec<AgentEvent> = agent.run("Say hello.").collect().await;
    let outcome = finished(&events, format);
    assert_eq!(outcome.0, "Hello from aimock!", "{format}");

    let calls = Arc::new(AtomicU32::new(0));
    // With a system prompt, as agents have. (Without one, Bedrock's encoder gives the tools
    // their own cache point, `{"cachePoint": …}` in `toolConfig.tools`, which Converse
    // documents and aimock 1.43 answers with a 500: "Cannot read properties of undefined".)
    let mut agent = Agent::builder(client)
        .system("You add numbers with the add tool.")
        .tool(add_tool(calls.clone()))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("What is 2 + 3?").collect().await;
    let (text, turns) = finished(&events, format);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "{format}: the tool ran once"
    );
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallStart { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["add"], "{format}");
    // The answer's fixture matches only a request whose last message is the tool's result
    // holding "5": the result went back in a shape the server read.
    assert_eq!(text, "2 + 3 = 5.", "{format}");
    assert_eq!(turns, 2, "{format}");
    assert!(
        agent_loop::testing::history_violation(&agent.messages()).is_none(),
        "{format}"
    );
}

/// The run's final text and turns; fails on anything but a completed run.
fn finished(events: &[AgentEvent], format: &str) -> (String, u32) {
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => {
            assert!(
                matches!(outcome.termination, Termination::Completed),
                "{format}: {:?}",
                outcome.termination
            );
            (outcome.final_text.clone(), outcome.turns)
        }
        other => panic!("{format}: the run did not finish: {other:?}"),
    }
}

#[tokio::test]
async fn gemini_against_aimock() {
    let Some(server) = aimock() else { return };
    let client = GeminiClient::new("aimock-key")
        .base_url(&server.url)
        .model("gemini-2.5-flash");
    text_and_tool_round_trip(Arc::new(client), "gemini").await;
    let vertex = GeminiClient::vertex("test-project", "us-central1", "aimock-token")
        .base_url(&server.url)
        .model("gemini-2.5-flash");
    text_and_tool_round_trip(Arc::new(vertex), "vertex").await;
}

#[tokio::test]
async fn bedrock_against_aimock() {
    let Some(server) = aimock() else { return };
    // aimock does not check signatures; the request is SigV4-signed all the same.
    let client = BedrockClient::new("us-east-1")
        .base_url(&server.url)
        .credentials(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
        )
        .model("anthropic.claude-sonnet-4-5-20250929-v1:0");
    text_and_tool_round_trip(Arc::new(client), "bedrock").await;
}

#[tokio::test]
async fn ollama_against_aimock() {
    let Some(server) = aimock() else { return };
    let client = OllamaClient::new().base_url(&server.url).model("llama3.2");
    text_and_tool_round_trip(Arc::new(client), "ollama").await;
}
