//! One agent served three ways on loopback, offline: an Open Responses endpoint, an MCP server
//! (streamable HTTP, or stdio with `--mcp-stdio`) and an A2A 1.0 server. Its model is a
//! scripted one (no key, no network): each run calls the `add` tool with 2 and 3, then says
//! the sum.
//!
//! ```sh
//! cargo run -p agent-loop-serve --example serve            # http://127.0.0.1:8080
//! cargo run -p agent-loop-serve --example serve -- --port 0   # any free port (printed)
//! ```
//!
//! Then, from another shell:
//!
//! ```sh
//! # Open Responses, streamed and whole
//! curl -sN http://127.0.0.1:8080/v1/responses -H 'content-type: application/json' \
//!   -d '{"model": "agent", "input": "What is 2 + 3?", "stream": true}'
//! curl -s http://127.0.0.1:8080/v1/responses -H 'content-type: application/json' \
//!   -d '{"model": "agent", "input": "What is 2 + 3?"}'
//! python -c 'from openai import OpenAI; c = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="x");
//! print(c.responses.create(model="agent", input="What is 2 + 3?").output_text)'
//!
//! # MCP over streamable HTTP: initialize, then call the tool with the session id it gives
//! curl -si http://127.0.0.1:8080/mcp -H 'content-type: application/json' \
//!   -H 'accept: application/json, text/event-stream' -d '{"jsonrpc": "2.0", "id": 1,
//!   "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {},
//!   "clientInfo": {"name": "curl", "version": "1"}}}'
//! npx @modelcontextprotocol/inspector   # then connect to http://127.0.0.1:8080/mcp
//! # MCP over stdio (an MCP client starts it):
//! #   cargo run -q -p agent-loop-serve --example serve -- --mcp-stdio
//!
//! # A2A 1.0: the card, then a message
//! curl -s http://127.0.0.1:8080/.well-known/agent-card.json
//! curl -s http://127.0.0.1:8080/a2a -H 'content-type: application/json' -d '{"jsonrpc": "2.0",
//!   "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m1",
//!   "role": "ROLE_USER", "parts": [{"text": "What is 2 + 3?"}]}}}'
//! ```
#![allow(dead_code)]

use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentBuilder, ToolError};
use agent_loop_serve::a2a::{self, AgentCard};
use agent_loop_serve::mcp::AgentMcpServer;
use agent_loop_serve::{responses, AgentService, Limits};
use serde_json::{json, Value};

/// The agent of one run: a scripted model (offline) and an `add` tool.
pub fn agent() -> AgentBuilder {
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("2 + 3 = 5"),
    ]);
    let add = FnTool::new("add", "Adds a and b.", |input: Value, _ctx| async move {
        let sum = input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0);
        Ok::<_, ToolError>(sum.to_string())
    });
    Agent::builder(model).system("You add numbers.").tool(add)
}

/// The service: the agent, 256 KiB bodies at most, 8 runs at once.
pub fn service() -> AgentService {
    AgentService::new(agent).limits(
        Limits::new()
            .max_body_bytes(256 * 1024)
            .max_concurrent_runs(8),
    )
}

/// Every protocol on one router, for a server reached at `url`.
pub fn app(service: &AgentService, url: &str) -> axum::Router {
    responses::router(service)
        .merge(AgentMcpServer::new(service).router("/mcp"))
        .merge(a2a::router(
            service,
            AgentCard::new("adder", "Adds numbers.", url),
        ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--mcp-stdio") {
        AgentMcpServer::new(&service()).serve_stdio().await?;
        return Ok(());
    }
    let port = match args.iter().position(|a| a == "--port") {
        Some(i) => args.get(i + 1).ok_or("--port needs a number")?.parse()?,
        None => 8080u16,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("serving one agent at {url}: POST /v1/responses, /mcp, /a2a (card at /.well-known/agent-card.json)");
    // The peer's address lets the service (which has no authenticator) serve loopback only.
    let app = app(&service(), &url).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
