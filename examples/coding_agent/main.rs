//! A small coding agent: `bash`, `read_file`, `write_file` and `edit_file`, confined to one
//! working directory (see `tools.rs` for how paths are checked).
//!
//! ```text
//! cargo run --example coding_agent                      # scripted scenario, fresh temp dir
//! cargo run --example coding_agent -- --dir ./scratch   # work in ./scratch (created if missing)
//! cargo run --example coding_agent -- --dir ./scratch "write a fizzbuzz in python and run it"
//! ```
//!
//! With no API key, the crate's loopback mock server plays a scripted model: it writes a file,
//! reads it back (and tries to read outside the directory, which is refused), runs `ls` and
//! `wc` through bash, edits the file and checks it with `cat`, then summarizes. With
//! `ANTHROPIC_API_KEY` (or `OPENAI_API_KEY`) a real model does the task you give it.
//!
//! The bash tool only *starts* in the working directory; it is not a sandbox. Use a
//! throwaway directory, or a container, when you let a real model run commands.

#[path = "../common/mod.rs"]
mod common;
pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_loop::testing::ScriptedResponse;
use agent_loop::{Agent, LlmClient, Termination};
use futures::StreamExt;
use serde_json::json;

use tools::Workspace;

/// The task when none is given.
pub const TASK: &str = "Create notes.md with a short todo list (write the parser, add tests), \
                        check it, then mark the first item as done.";

/// The file the scripted scenario works on, and its content after each step.
pub const NOTES: &str = "notes.md";
/// The content `write_file` creates.
pub const NOTES_WRITTEN: &str = "# Todo\n\n- [ ] write the parser\n- [ ] add tests\n";
/// The content after `edit_file`.
pub const NOTES_EDITED: &str = "# Todo\n\n- [x] write the parser\n- [ ] add tests\n";

/// What the mock model does when no API key is set.
pub fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("I'll start by writing the todo list.")
            .then_tool_call(
                "call_write",
                "write_file",
                json!({"path": NOTES, "content": NOTES_WRITTEN}),
            )
            .usage_tokens(812, 74)
            .chunked(8),
        ScriptedResponse::text(
            "Let me read it back. (I'll also check that files outside the working directory \
             are off limits.)",
        )
        .then_tool_call("call_read", "read_file", json!({"path": NOTES}))
        .then_tool_call(
            "call_escape",
            "read_file",
            json!({"path": "../../etc/passwd"}),
        )
        .usage_tokens(930, 61)
        .chunked(8),
        ScriptedResponse::text("Good. Now a look at the directory:")
            .then_tool_call(
                "call_ls",
                "bash",
                json!({"command": "ls && wc -l notes.md"}),
            )
            .usage_tokens(1051, 30)
            .chunked(8),
        ScriptedResponse::text("Marking the first item as done, then checking the result.")
            .then_tool_call(
                "call_edit",
                "edit_file",
                json!({
                    "path": NOTES,
                    "old_string": "- [ ] write the parser",
                    "new_string": "- [x] write the parser",
                }),
            )
            .then_tool_call("call_cat", "bash", json!({"command": "cat notes.md"}))
            .usage_tokens(1140, 88)
            .chunked(8),
        ScriptedResponse::text(
            "Done. I created `notes.md` with two todo items, read it back, listed the \
             directory (one file, 4 lines), and marked \"write the parser\" as done. Reading \
             `../../etc/passwd` was refused because it is outside the working directory.",
        )
        .usage_tokens(1290, 52)
        .chunked(8),
    ]
}

/// The coding agent working in `ws`.
pub fn build_agent(
    client: Arc<dyn LlmClient>,
    ws: &Arc<Workspace>,
) -> Result<Agent, agent_loop::Error> {
    let system = format!(
        "You are a careful coding agent. You work in the directory {} and can only touch files \
         inside it: use paths relative to it. Read a file before editing it; prefer edit_file \
         for small changes. Run commands with bash to check your work. When done, summarize \
         what you did in a few sentences.",
        ws.root().display()
    );
    tools::add_tools(Agent::builder(client), ws)
        .system(system)
        .max_turns(20)
        .build()
}

/// A fresh, uniquely named directory under the system's temp directory.
pub fn fresh_temp_dir(prefix: &str) -> std::io::Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

struct Args {
    dir: Option<PathBuf>,
    task: String,
}

fn parse_args() -> Result<Args, String> {
    let mut dir = None;
    let mut words = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" | "-d" => {
                dir = Some(PathBuf::from(args.next().ok_or("--dir needs a directory")?));
            }
            "--help" | "-h" => {
                return Err("usage: coding_agent [--dir DIR] [TASK...]".into());
            }
            _ => words.push(arg),
        }
    }
    let task = if words.is_empty() {
        TASK.to_owned()
    } else {
        words.join(" ")
    };
    Ok(Args { dir, task })
}

fn list_files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let (dir, fresh) = match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            (dir, false)
        }
        None => (fresh_temp_dir("agent-loop-coding")?, true),
    };
    let ws = Arc::new(Workspace::new(&dir)?);

    let model = common::model(script()).await;
    println!("Model: {}", model.description);
    println!("Working directory: {}", ws.root().display());
    println!("You: {}", args.task);

    let mut agent = build_agent(model.client.clone(), &ws)?;
    let mut events = agent.run(args.task);
    let mut outcome = None;
    while let Some(event) = events.next().await {
        outcome = common::render(&event).or(outcome);
    }
    drop(events);

    println!(
        "\nFiles in {}: {:?}",
        ws.root().display(),
        list_files(ws.root())
    );
    if fresh {
        if common::is_scripted(&model) {
            std::fs::remove_dir_all(ws.root())?;
            println!("(removed the temporary directory; pass --dir DIR to keep the files)");
        } else {
            println!("(the files stay there; remove the directory when you are done)");
        }
    }
    match outcome.map(|o| o.termination) {
        Some(Termination::Completed) => Ok(()),
        Some(other) => Err(format!("the run ended: {other}").into()),
        None => Err("the run ended without an outcome".into()),
    }
}
