//! Pause for a person, resume in another process: a run that needs approval saves itself to
//! SQLite and the process exits; a second process of the same binary loads it, approves,
//! resumes and prints the answer.
//!
//! `cargo run -p agent-loop-sql --example pause_resume` runs both halves, each in its own process, with no API
//! key (the loopback mock plays a scripted model; with `ANTHROPIC_API_KEY` or
//! `OPENAI_API_KEY` a real model decides). Run the halves yourself:
//!
//! ```sh
//! cargo run -p agent-loop-sql --example pause_resume -- pause  /tmp/agent.db
//! cargo run -p agent-loop-sql --example pause_resume -- resume /tmp/agent.db          # approves
//! cargo run -p agent-loop-sql --example pause_resume -- resume /tmp/agent.db deny     # or denies
//! ```

#[path = "../../examples/common/mod.rs"]
mod common;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_loop::agent::Resolutions;
use agent_loop::agent::RunPolicy;
use agent_loop::testing::ScriptedResponse;
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, RunOutcome, Termination, ToolError};
use agent_loop_sql::SqliteStore;
use futures::{Stream, StreamExt};
use serde_json::json;

/// The session both processes share.
const SESSION: &str = "pause-resume-demo";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = common::args();
    let db = |i: usize| {
        args.get(i)
            .map(PathBuf::from)
            .ok_or("give the database's path")
    };
    match args.first().map(String::as_str) {
        Some("pause") => {
            pause_half(&db(1)?).await?;
        }
        Some("resume") => {
            let approve = args.get(2).is_none_or(|v| v != "deny");
            resume_half(&db(1)?, approve).await?;
        }
        _ => both_halves()?,
    }
    Ok(())
}

/// Runs each half in a process of its own, on a fresh database.
fn both_halves() -> Result<(), Box<dyn Error>> {
    let db = std::env::temp_dir().join(format!("agent-loop-pause-{}.db", std::process::id()));
    let me = std::env::current_exe()?;
    for half in ["pause", "resume"] {
        println!("\n━━ process {half} ━━");
        let status = std::process::Command::new(&me)
            .arg(half)
            .arg(&db)
            .args(std::env::args().filter(|a| a == "--responses"))
            .status()?;
        if !status.success() {
            return Err(format!("the {half} process failed: {status}").into());
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    Ok(())
}

/// The agent of both halves: one tool that needs a person's approval, and a session in the
/// SQLite file at `db`; with the model (keep it: it holds the mock server).
async fn agent(
    db: &Path,
    script: Vec<ScriptedResponse>,
) -> Result<(Agent, common::Model), Box<dyn Error>> {
    let model = common::model(script).await;
    println!("Model: {}", model.description);
    let store = Arc::new(SqliteStore::open(db).await?);
    let delete = FnTool::new(
        "delete_file",
        "Deletes a file.",
        |input: serde_json::Value, _ctx| async move {
            // A demo: nothing is deleted.
            let path = input["path"].as_str().unwrap_or("?").to_owned();
            Ok::<_, ToolError>(format!("deleted {path}"))
        },
    );
    let agent = Agent::builder(model.client.clone())
        .system("You are a careful file assistant.")
        .tool(delete)
        .policy(RunPolicy::new().require_approval("delete_file"))
        .session(store, SESSION)
        .build()?;
    Ok((agent, model))
}

/// The first process: runs until the call waits for approval; the session keeps the pause.
/// Returns the pause's id (`None` when the model asked for nothing that needs approval).
pub async fn pause_half(db: &Path) -> Result<Option<String>, Box<dyn Error>> {
    let script = vec![ScriptedResponse::text("I'll delete it.").then_tool_call(
        "call_1",
        "delete_file",
        json!({"path": "old.log"}),
    )];
    let (mut agent, _model) = agent(db, script).await?;
    println!("You: Please delete old.log.");
    let outcome = render(agent.run("Please delete old.log.")).await?;
    match outcome.termination {
        Termination::Paused(paused) => {
            for call in paused.pending() {
                println!("\n⏸ {}({}) waits for approval", call.name, call.input);
            }
            println!(
                "The paused run is saved in {}; this process exits.",
                db.display()
            );
            Ok(Some(paused.id().to_owned()))
        }
        other => {
            println!("\nThe run ended without a pause: {other}");
            Ok(None)
        }
    }
}

/// The second process: loads the session, approves (or denies) what waits, resumes.
/// Returns the final answer.
pub async fn resume_half(db: &Path, approve: bool) -> Result<String, Box<dyn Error>> {
    let script = vec![ScriptedResponse::text("Done: old.log is deleted.")];
    let (mut agent, _model) = agent(db, script).await?;
    let Some(paused) = agent.load_session().await? else {
        println!("Nothing waits in the session.");
        return Ok(String::new());
    };
    let mut answers = Resolutions::new();
    for call in paused.pending() {
        let verdict = if approve { "approved" } else { "denied" };
        println!("A person {verdict} {}({}).", call.name, call.input);
        answers = if approve {
            answers.approve(call.id)
        } else {
            answers.deny(call.id, "the person said no")
        };
    }
    let outcome = render(agent.resume(&paused, answers)).await?;
    println!("\nFinal answer: {}", outcome.final_text);
    Ok(outcome.final_text)
}

/// Prints a run's events; its outcome, or the error that ended it.
async fn render(events: impl Stream<Item = AgentEvent>) -> Result<RunOutcome, Box<dyn Error>> {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        if let Some(outcome) = common::render(&event) {
            if let Termination::Error(e) = &outcome.termination {
                return Err(e.to_string().into());
            }
            return Ok(outcome);
        }
    }
    Err("the run ended without Finished".into())
}
