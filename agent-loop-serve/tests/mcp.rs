//! The MCP server against its clients: the official TypeScript SDK (a node script per mode)
//! and the workspace's own MCP client (`agent-loop-mcp`: another agent calls the served one as
//! a tool).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_loop::agent::{RunOptions, RunPolicy};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, ContentBlock, Termination, ToolError};
use agent_loop_mcp::McpServer;
use agent_loop_serve::mcp::AgentMcpServer;
use agent_loop_serve::{AgentService, Limits};
use serde_json::{json, Value};

fn add_tool() -> FnTool<
    Value,
    impl Fn(Value, agent_loop::ToolContext) -> std::future::Ready<Result<String, ToolError>>
        + Send
        + Sync,
> {
    FnTool::new("add", "Adds a and b.", |input: Value, _ctx| {
        let sum = input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0);
        std::future::ready(Ok::<_, ToolError>(sum.to_string()))
    })
}

/// An agent that adds: the model calls `add` with 2 and 3, then says what it read.
fn adder(
    policy: RunPolicy,
    answer: &'static str,
) -> impl Fn() -> agent_loop::AgentBuilder + Send + Sync {
    move || {
        let model = ScriptedClient::new([
            ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
            ScriptedResponse::text(answer),
        ]);
        Agent::builder(model)
            .tool(add_tool())
            .policy(policy.clone())
    }
}

async fn served(server: AgentMcpServer) -> String {
    let url = common::serve(server.router("/mcp")).await;
    format!("{url}/mcp")
}

#[tokio::test]
async fn the_typescript_client_calls_the_agent_with_progress() {
    if !common::node() {
        return;
    }
    let service = AgentService::new(adder(RunPolicy::new(), "2 + 3 = 5"));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "call"]).await;
    assert_eq!(
        seen["tools"],
        json!([{"name": "ask_agent", "required": ["task"]}])
    );
    assert_eq!(
        seen["result"],
        json!({"text": "2 + 3 = 5", "isError": false})
    );
    assert_eq!(
        seen["progress"],
        json!(["calling add", "add done", "2 + 3 = 5"])
    );
    assert_eq!(seen["bad"]["isError"], true);
    assert!(seen["bad"]["text"]
        .as_str()
        .unwrap()
        .contains("`task` is required"));
    // JSON-RPC's invalid params for a tool the server does not have.
    assert_eq!(seen["unknown"]["code"], -32602);
    assert_eq!(seen["elicitations"], json!([]));
}

#[tokio::test]
async fn a_paused_run_asks_by_elicitation_and_the_answer_resumes_it() {
    if !common::node() {
        return;
    }
    let approval = RunPolicy::new().require_approval("add");
    let service = AgentService::new(adder(approval.clone(), "It is 5."));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "approve"]).await;
    assert_eq!(
        seen["result"],
        json!({"text": "It is 5.", "isError": false})
    );
    let asked = seen["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1);
    let message = asked[0]["message"].as_str().unwrap();
    assert!(
        message.contains("add") && message.contains("\"a\":2"),
        "{message}"
    );
    assert_eq!(asked[0]["schema"]["required"], json!(["approve"]));
    assert!(seen["progress"]
        .as_array()
        .unwrap()
        .contains(&json!("add done")));

    // Denied: the tool does not run, and the model reads the reason.
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("Not added."),
    ]));
    let seen_model = model.clone();
    let policy = approval.clone();
    let service = AgentService::new(move || {
        Agent::builder(model.clone())
            .tool(add_tool())
            .policy(policy.clone())
    });
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "deny"]).await;
    assert_eq!(
        seen["result"],
        json!({"text": "Not added.", "isError": false})
    );
    assert!(!seen["progress"]
        .as_array()
        .unwrap()
        .contains(&json!("add done")));
    let last = seen_model.last_request().unwrap();
    let denial = last
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    let (content, is_error) = denial.expect("the call is answered");
    assert!(is_error && content.contains("not today"), "{content}");

    // A client that cannot be asked gets an error naming the waiting call.
    let service = AgentService::new(adder(approval, "unreachable"));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "noelicit"]).await;
    assert_eq!(seen["result"]["isError"], true);
    let text = seen["result"]["text"].as_str().unwrap();
    assert!(
        text.contains("elicitation") && text.contains("add"),
        "{text}"
    );
}

#[tokio::test]
async fn the_clients_cancellation_cancels_the_run() {
    if !common::node() {
        return;
    }
    let built = Arc::new(AtomicUsize::new(0));
    let service = AgentService::new(move || {
        let script = match built.fetch_add(1, Ordering::SeqCst) {
            0 => ScriptedResponse::text("thinking…").then_stall(),
            _ => ScriptedResponse::text("second run"),
        };
        Agent::builder(ScriptedClient::new([script]))
    })
    .limits(Limits::new().max_concurrent_runs(1));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "cancel"]).await;
    assert_eq!(seen["first"], "aborted");
    assert_eq!(seen["progress"], json!(["thinking…"]));
    // The stalled run held the only slot: a second run starts only once it was cancelled.
    assert_eq!(seen["second"]["text"], "second run", "{seen}");
    assert_eq!(seen["second"]["isError"], false);
}

#[tokio::test]
async fn an_agent_calls_a_served_agent_as_an_mcp_tool() {
    let service = AgentService::new(adder(RunPolicy::new(), "2 + 3 = 5"));
    let url = served(AgentMcpServer::new(&service).tool("helper", "Adds numbers.")).await;
    let helper = McpServer::http("helper", url).connect().await.unwrap();
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("o1", "helper", json!({"task": "Add 2 and 3."})),
        ScriptedResponse::text("The helper says 5."),
    ]));
    let mut agent = Agent::builder(model.clone())
        .tool_source(helper)
        .build()
        .unwrap();
    let outcome = agent.run_to_end("What is 2 + 3?", RunOptions::new()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "The helper says 5.");
    let last = model.last_request().unwrap();
    let result = last
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    assert_eq!(result, Some(("2 + 3 = 5".to_owned(), false)));
}
