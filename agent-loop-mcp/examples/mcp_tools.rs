//! An agent with the tools of an MCP server: the reference filesystem server
//! (`@modelcontextprotocol/server-filesystem`), confined to a fresh temp directory.
//!
//! `cargo run -p agent-loop-mcp --example mcp_tools` works with no API key: the loopback mock
//! server plays a scripted model that lists the directory and reads a file through the real
//! MCP server. With `ANTHROPIC_API_KEY` (or `OPENAI_API_KEY`) a real model decides. Needs
//! Node.js; the server comes from `node_modules` (`npm ci` in the repository root) or else
//! from `npx`.

#[path = "../../examples/common/mod.rs"]
mod common;

use std::path::PathBuf;

use agent_loop::testing::ScriptedResponse;
use agent_loop::{Agent, Termination, Tool};
use agent_loop_mcp::McpServer;
use futures::StreamExt;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A directory with something to find.
    let dir = std::env::temp_dir().join(format!("agent-loop-mcp-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    std::fs::write(
        dir.join("todo.txt"),
        "- water the plants\n- call Ada about the MCP demo\n",
    )?;
    std::fs::write(dir.join("readme.md"), "# Scratch space\n")?;

    // The filesystem server, allowed to touch `dir` only; its tools get the prefix `fs_`.
    let local = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let server = if local.exists() {
        McpServer::stdio("filesystem", "node").arg(local.display().to_string())
    } else {
        McpServer::stdio("filesystem", "npx")
            .args(["-y", "@modelcontextprotocol/server-filesystem"])
    };
    let files = server
        .arg(dir.display().to_string())
        .prefix("fs_")
        .connect()
        .await?;
    println!("MCP server {:?} offers:", files.name());
    for tool in files.tools() {
        println!("  {}", tool.name());
    }

    // What the mock model does when no API key is set.
    let script = vec![
        ScriptedResponse::text("Let me look at the directory first.")
            .then_tool_call("call_1", "fs_list_directory", json!({"path": dir}))
            .chunked(8),
        ScriptedResponse::text("There is a todo list; I'll read it.")
            .then_tool_call(
                "call_2",
                "fs_read_text_file",
                json!({"path": dir.join("todo.txt")}),
            )
            .chunked(8),
        ScriptedResponse::text(
            "Your todo list has two items: water the plants, and call Ada about the MCP demo.",
        )
        .chunked(8),
    ];
    let model = common::model(script).await;
    println!("Model: {}", model.description);
    let question = format!(
        "What is on my todo list? My files are in {}.",
        dir.display()
    );
    println!("You: {question}");

    let mut agent = Agent::builder(model.client.clone())
        .system("You help with the user's files. Use the fs_ tools; never guess a file's content.")
        .tool_source(files.clone())
        .max_turns(8)
        .build()?;
    let mut events = agent.run(question);
    let mut outcome = None;
    while let Some(event) = events.next().await {
        outcome = common::render(&event).or(outcome);
    }
    drop(events);
    drop(agent);
    files.close().await; // stops the server and waits for it
    std::fs::remove_dir_all(&dir)?;
    match outcome.map(|o| o.termination) {
        Some(Termination::Completed) => Ok(()),
        Some(other) => Err(format!("the run ended: {other}").into()),
        None => Err("the run ended without an outcome".into()),
    }
}
