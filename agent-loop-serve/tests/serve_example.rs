//! The `serve` example: one agent on one router, reached through each protocol; and its MCP
//! server over stdio, started as a child process by the workspace's MCP client.

mod common;

#[path = "../examples/serve.rs"]
mod serve;

use agent_loop::agent::RunOptions;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::{Agent, ContentBlock, Termination};
use agent_loop_mcp::McpServer;
use serde_json::{json, Value};

#[tokio::test]
async fn the_example_answers_over_every_protocol() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = serve::app(&serve::service(), &url);
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = reqwest::Client::new();

    let response: Value = http
        .post(format!("{url}/v1/responses"))
        .json(&json!({"model": "agent", "input": "What is 2 + 3?"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][2]["content"][0]["text"], "2 + 3 = 5");

    let card: Value = http
        .get(format!("{url}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let endpoint = card["supportedInterfaces"][0]["url"].as_str().unwrap();
    let task: Value = http
        .post(endpoint)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                "parts": [{"text": "What is 2 + 3?"}]}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        task["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    let mcp = McpServer::http("adder", format!("{url}/mcp"))
        .connect()
        .await
        .unwrap();
    assert_eq!(answer_through(mcp).await, "2 + 3 = 5");
}

/// What a calling agent reads from the MCP tool `ask_agent` of `connection`.
async fn answer_through(connection: agent_loop_mcp::McpConnection) -> String {
    let model = std::sync::Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("o1", "ask_agent", json!({"task": "Add 2 and 3."})),
        ScriptedResponse::text("done"),
    ]));
    let mut agent = Agent::builder(model.clone())
        .tool_source(connection)
        .build()
        .unwrap();
    let outcome = agent.run_to_end("go", RunOptions::new()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let last = model.last_request().unwrap();
    last.messages
        .last()
        .unwrap()
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn the_example_serves_mcp_over_stdio() {
    // `cargo test` builds the package's examples beside the test binaries' folder.
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join("serve"))
        .unwrap();
    assert!(
        example.exists(),
        "{} is missing: run the tests with `cargo test` (which builds the examples)",
        example.display()
    );
    let connection = McpServer::stdio("adder", example.to_string_lossy())
        .args(["--mcp-stdio"])
        .connect()
        .await
        .unwrap();
    assert_eq!(answer_through(connection).await, "2 + 3 = 5");
}
