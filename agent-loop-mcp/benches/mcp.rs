//! The cost of a tool call through a stdio MCP server against a native tool doing the same
//! work (echo), both through `ToolRegistry::execute_one`, and the memory a connected server
//! holds. `cargo bench -p agent-loop-mcp --bench mcp` (needs node and `npm ci`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_loop::tool::{ExecOptions, FnTool, ToolCall};
use agent_loop::{ToolError, ToolRegistry};
use agent_loop_mcp::McpServer;
use serde::Deserialize;
use serde_json::json;

const CALLS: usize = 1_000;

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct EchoInput {
    message: String,
}

async fn time_calls(registry: &ToolRegistry, expect: &str) -> Vec<Duration> {
    let opts = ExecOptions::default();
    let mut times = Vec::with_capacity(CALLS);
    for i in 0..CALLS + 50 {
        let call = ToolCall::new(format!("c{i}"), "echo", json!({"message": "hello"}));
        let start = Instant::now();
        let result = registry.execute_one(call, &opts).await;
        let elapsed = start.elapsed();
        assert_eq!(result.content, expect);
        if i >= 50 {
            times.push(elapsed); // the first 50 warm up
        }
    }
    times.sort();
    times
}

fn report(name: &str, times: &[Duration]) -> (Duration, Duration) {
    let median = times[times.len() / 2];
    let p99 = times[times.len() * 99 / 100];
    println!(
        "{name:<28} median {median:>10.1?}   p99 {p99:>10.1?}   ({} calls)",
        times.len()
    );
    (median, p99)
}

/// Resident memory of a process, in KiB, from /proc.
fn rss_kib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::main]
async fn main() {
    let script = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !script.exists() {
        eprintln!(
            "SKIPPED the MCP benchmark: {} is missing (run `npm ci`)",
            script.display()
        );
        return;
    }
    let native = ToolRegistry::new()
        .with(FnTool::new(
            "echo",
            "Echoes.",
            |i: EchoInput, _ctx| async move { Ok::<_, ToolError>(format!("Echo: {}", i.message)) },
        ))
        .unwrap();
    let native_times = time_calls(&native, "Echo: hello").await;

    let ours_before = rss_kib("self").unwrap_or(0);
    let connection = McpServer::stdio("everything", "node")
        .args([script.display().to_string(), "stdio".into()])
        .only(["echo"])
        .connect()
        .await
        .unwrap();
    let mut mcp = ToolRegistry::new();
    connection.register(&mut mcp).unwrap();
    let mcp_times = time_calls(&mcp, "Echo: hello").await;
    let ours_after = rss_kib("self").unwrap_or(0);
    let child = connection.process_id().await.map(|p| p.to_string());
    let server_rss = child.as_deref().and_then(rss_kib).unwrap_or(0);

    let (native_median, native_p99) = report("native tool (FnTool echo)", &native_times);
    let (mcp_median, mcp_p99) = report("stdio MCP (everything echo)", &mcp_times);
    println!(
        "overhead of MCP             median {:>10.1?}   p99 {:>10.1?}",
        mcp_median.saturating_sub(native_median),
        mcp_p99.saturating_sub(native_p99)
    );
    println!(
        "memory: the node server process {} MiB resident; this process grew {} KiB with the \
         connection (and its {CALLS} calls)",
        server_rss / 1024,
        ours_after.saturating_sub(ours_before)
    );
    connection.close().await;
}
