//! A worker process serving a demo agent as the `AgentSession` Restate object: the worker
//! the `durable` example and the durability tests start (and kill).
//!
//! Configuration, from the environment:
//! - `WORKER_ADDR`: where to listen (default `127.0.0.1:9080`);
//! - `MODEL_BASE_URL`: an Anthropic-compatible server (the tests' mock); without it the real
//!   Anthropic API with `ANTHROPIC_API_KEY`;
//! - `TOOL_DIR`: a directory the demo tools log to, one line when a call starts and one when
//!   it ends, with its idempotency key. A call of label `L` waits while the file `hold-L`
//!   exists there, so a test can kill the worker while it runs;
//! - `MAX_STATE_BYTES`: [`DurableAgent::max_state_bytes`](agent_loop_restate::DurableAgent::max_state_bytes);
//! - `JOURNAL_RETENTION_SECS`: [`DurableAgent::journal_retention`](agent_loop_restate::DurableAgent::journal_retention);
//! - `MAX_TURNS`: [`AgentBuilder::max_turns`](agent_loop::AgentBuilder::max_turns) of each run
//!   (default: the builder's), so a test can drive a run of a thousand turns.
//!
//! Tools: `step` (does one labelled step), `deploy` (the same, but needs a human's approval
//! first) and `look` (read-only: logs `look LABEL KEY`, answers `saw LABEL`); and the
//! sub-agent `helper`, whose own tool is `step`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agent_loop::tool::FnTool;
use agent_loop::{AnthropicClient, ToolContext, ToolError, ToolRegistry};
use agent_loop_restate::{ApprovalRequest, DurableAgent};
use serde::Deserialize;

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct Step {
    /// A label for the step.
    label: String,
}

/// Appends one line to the tools' log. The line goes out in one `write` on an `O_APPEND`
/// file, so lines of tools running at once never interleave (`writeln!` would write the text
/// and its newline separately, and another tool's line could land between them).
fn log(dir: &std::path::Path, line: &str) -> Result<(), ToolError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("tools.log"))
        .map_err(|e| ToolError::new(e.to_string()))?;
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| ToolError::new(e.to_string()))?;
    file.sync_all().map_err(|e| ToolError::new(e.to_string()))
}

async fn step(dir: PathBuf, input: Step, ctx: ToolContext) -> Result<String, ToolError> {
    let key = ctx.idempotency_key();
    log(&dir, &format!("start {} {key}", input.label))?;
    let hold = dir.join(format!("hold-{}", input.label));
    while hold.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log(&dir, &format!("done {} {key}", input.label))?;
    Ok(format!("did {}", input.label))
}

/// The demo agent: tools `step` and `deploy` (a human approves each deploy) logging to `dir`,
/// and `look`, read-only. The replay test builds it as the worker does.
#[allow(dead_code)] // Each file that includes this one uses part of it.
pub fn demo_agent(
    client: impl agent_loop::LlmClient + Clone + 'static,
    dir: PathBuf,
    max_turns: Option<u32>,
) -> DurableAgent {
    let helper_tools = ToolRegistry::new()
        .with({
            let dir = dir.clone();
            FnTool::new(
                "step",
                "Does one labelled step of the task.",
                move |input: Step, ctx| step(dir.clone(), input, ctx),
            )
        })
        .expect("valid tools");
    let helper = DurableAgent::new(client.clone(), helper_tools)
        .configure(|b| b.system("You do one sub-task with the step tool."));
    let (d1, d2, d3) = (dir.clone(), dir.clone(), dir);
    let tools = ToolRegistry::new()
        .with(FnTool::new(
            "step",
            "Does one labelled step of the task.",
            move |input: Step, ctx| step(d1.clone(), input, ctx),
        ))
        .and_then(|r| {
            r.with(FnTool::new(
                "deploy",
                "Deploys; a human approves each deploy first.",
                move |input: Step, ctx| step(d2.clone(), input, ctx),
            ))
        })
        .and_then(|r| {
            r.with(
                FnTool::new(
                    "look",
                    "Looks at a labelled thing (read-only: starts while the answer streams).",
                    move |input: Step, ctx: ToolContext| {
                        let dir = d3.clone();
                        async move {
                            log(
                                &dir,
                                &format!("look {} {}", input.label, ctx.idempotency_key()),
                            )?;
                            Ok::<_, ToolError>(format!("saw {}", input.label))
                        }
                    },
                )
                .read_only(true),
            )
        })
        .expect("valid tools");
    DurableAgent::new(client, tools)
        .configure(move |b| {
            let b = b.system("You do tasks step by step with the tools.");
            match max_turns {
                Some(turns) => b.max_turns(turns),
                None => b,
            }
        })
        .approval(|call: &agent_loop::tool::ToolCall| {
            if call.name == "deploy" {
                ApprovalRequest::AskHuman
            } else {
                ApprovalRequest::Allow
            }
        })
        .sub_agent("helper", "Does a sub-task with steps of its own.", helper)
        .expect("a valid sub-agent")
}

/// Serves the demo agent until the process ends (the `durable` example calls it too).
#[tokio::main]
pub async fn main() {
    let addr: SocketAddr = std::env::var("WORKER_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9080".into())
        .parse()
        .expect("WORKER_ADDR is host:port");
    let dir = PathBuf::from(std::env::var("TOOL_DIR").unwrap_or_else(|_| ".".into()));
    let client = match std::env::var("MODEL_BASE_URL") {
        Ok(url) => AnthropicClient::new("mock-key")
            .base_url(url)
            .model("claude-mock"),
        Err(_) => AnthropicClient::from_env().expect("ANTHROPIC_API_KEY or MODEL_BASE_URL"),
    };
    let max_turns: Option<u32> = std::env::var("MAX_TURNS").ok().and_then(|v| v.parse().ok());
    let agent = demo_agent(client, dir, max_turns);
    let agent = match std::env::var("MAX_STATE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(bytes) => agent.max_state_bytes(bytes),
        None => agent,
    };
    let agent = match std::env::var("JOURNAL_RETENTION_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(secs) => agent.journal_retention(Duration::from_secs(secs)),
        None => agent,
    };
    eprintln!("worker listening on {addr}");
    if let Err(e) = agent_loop_restate::serve(agent, addr).await {
        eprintln!("cannot listen on {addr}: {e}");
        std::process::exit(1);
    }
}
