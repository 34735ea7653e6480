//! Sessions across processes, on both database backends: a run paused in one process and
//! resumed in another ends with the history of a run that never paused, and is resumed only
//! once; a run holds its session against another process while it goes on; a process killed
//! between two turns leaves its session whole, and once its lease is ended the next process
//! goes on from it.
//!
//! The processes are this test binary run again (`child_process`, ignored unless a test
//! starts it), told by environment variables what to do.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use agent_loop::agent::Resolutions;
use agent_loop::agent::RunPolicy;
use agent_loop::context::ContextConfig;
use agent_loop::error::SessionError;
use agent_loop::session::{self, SessionStore};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, ContextManager, RunOutcome, Termination, ToolError};
use agent_loop_sql::SqliteStore;
use futures::StreamExt;
use serde_json::json;

mod common;
use common::read_tool;
use common::stores::{postgres_url, unique, TempFile};

const ROLE: &str = "AGENT_LOOP_TEST_ROLE";
const STORE: &str = "AGENT_LOOP_TEST_STORE";
const SESSION: &str = "AGENT_LOOP_TEST_SESSION";

/// Where a child keeps its session: `sqlite:<path>` or `postgres:<url>`.
async fn open(spec: &str) -> Arc<dyn SessionStore> {
    if let Some(path) = spec.strip_prefix("sqlite:") {
        Arc::new(
            SqliteStore::open(path)
                .await
                .expect("the SQLite file opens"),
        )
    } else if let Some(url) = spec.strip_prefix("postgres:") {
        Arc::new(
            agent_loop_sql::PostgresStore::connect(url)
                .await
                .expect("the PostgreSQL server answers"),
        )
    } else {
        panic!("unknown store {spec}")
    }
}

/// The model of every process: it reads, deletes (which needs approval), then answers; a
/// second question is answered in text.
fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("Let me look.")
            .then_tool_call("c1", "read", json!({"path": "a.txt"}))
            .then_tool_call("c2", "delete", json!({"path": "a.txt"})),
        ScriptedResponse::text("Deleted a.txt."),
        ScriptedResponse::text("You are welcome."),
    ]
}

fn builder(client: ScriptedClient) -> agent_loop::AgentBuilder {
    let read = read_tool();
    let delete = FnTool::new(
        "delete",
        "Deletes a file.",
        |_: serde_json::Value, _ctx| async { Ok::<_, ToolError>("deleted") },
    );
    let block = FnTool::new(
        "block",
        "Never returns.",
        |_: serde_json::Value, _ctx| async {
            // The parent kills this process once it reads the line.
            println!("BLOCKING");
            std::future::pending::<()>().await;
            Ok::<_, ToolError>("unreachable")
        },
    );
    Agent::builder(client)
        .tool(read)
        .tool(delete)
        .tool(block)
        .policy(RunPolicy::new().early_read_only_tools(false))
}

async fn finish(stream: impl futures::Stream<Item = AgentEvent>) -> RunOutcome {
    let events: Vec<AgentEvent> = stream.collect().await;
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => outcome.clone(),
        other => panic!("no Finished: {other:?}"),
    }
}

/// A child process's work; it prints one result line and exits.
#[tokio::test]
#[ignore = "a child process of the tests in this file: they start it with its role"]
async fn child_process() {
    let (Ok(role), Ok(spec), Ok(id)) = (
        std::env::var(ROLE),
        std::env::var(STORE),
        std::env::var(SESSION),
    ) else {
        panic!("run only by the tests of this file, which set {ROLE}, {STORE} and {SESSION}");
    };
    let store = open(&spec).await;
    match role.as_str() {
        "pause" => {
            let client = ScriptedClient::new(script());
            let mut agent = builder(client)
                .policy(
                    RunPolicy::new()
                        .early_read_only_tools(false)
                        .require_approval("delete"),
                )
                .session(store, id)
                .build()
                .unwrap();
            let outcome = finish(agent.run("Delete a.txt")).await;
            match outcome.termination {
                Termination::Paused(paused) => println!("PAUSED {}", paused.id()),
                other => println!("UNEXPECTED {other}"),
            }
        }
        "resume" => {
            // The model's first answer was given in the other process.
            let client = ScriptedClient::new(script().split_off(1));
            let mut agent = builder(client)
                .policy(
                    RunPolicy::new()
                        .early_read_only_tools(false)
                        .require_approval("delete"),
                )
                .session(store, id)
                .build()
                .unwrap();
            let Some(paused) = agent.load_session().await.unwrap() else {
                println!("NOTHING");
                return;
            };
            let outcome = finish(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
            match outcome.termination {
                Termination::Completed => println!("DONE {}", outcome.final_text),
                other => println!("REFUSED {other}"),
            }
        }
        "block" => {
            let client = ScriptedClient::new([
                ScriptedResponse::tool_call("c1", "read", json!({"path": "a.txt"})),
                ScriptedResponse::tool_call("c2", "block", json!({})),
            ]);
            let mut agent = builder(client).session(store, id).build().unwrap();
            let outcome = finish(agent.run("Read a.txt, then wait")).await;
            println!("UNEXPECTED {}", outcome.termination);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Runs this binary's `child_process` as `role` on `spec`'s session `id`; returns its result
/// line. With `kill_at`, kills it once it prints that line.
fn child(role: &str, spec: &str, id: &str, kill_at: Option<&str>) -> String {
    let (process, line) = spawn_child(role, spec, id);
    if kill_at.is_some_and(|at| line.starts_with(at)) {
        kill(process);
    } else {
        let status = wait(process);
        assert!(status.success(), "the {role} child failed: {status}");
    }
    line
}

/// A child still running, and the rest of its output.
type Running = (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
);

/// SIGKILLs a running child and reaps it.
fn kill(mut process: Running) {
    process.0.kill().expect("SIGKILL");
    wait(process);
}

/// Waits for a child to end, reading the rest of its output (libtest's report) so that it
/// never writes to a closed pipe.
fn wait((mut process, lines): Running) -> std::process::ExitStatus {
    lines.for_each(drop);
    process.wait().expect("the child ends")
}

/// Starts this binary's `child_process` as `role` on `spec`'s session `id`, and reads its
/// output up to its result line; the child may still be running.
fn spawn_child(role: &str, spec: &str, id: &str) -> (Running, String) {
    let mut process = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "child_process",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(ROLE, role)
        .env(STORE, spec)
        .env(SESSION, id)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child starts");
    let stdout = process.stdout.take().expect("piped");
    let markers = [
        "PAUSED",
        "DONE",
        "REFUSED",
        "NOTHING",
        "UNEXPECTED",
        "BLOCKING",
    ];
    let mut found = None;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.expect("a line of the child's output");
        // libtest may start the line with `test child_process ... `.
        if let Some(at) = markers.iter().filter_map(|m| line.find(m)).min() {
            found = Some(line[at..].to_owned());
            break;
        }
    }
    let line = found.unwrap_or_else(|| panic!("the {role} child printed no result"));
    ((process, lines), line)
}

/// The history of the run that never paused: the delete approved at once, in process.
async fn uninterrupted() -> Vec<agent_loop::Message> {
    let mut agent = builder(ScriptedClient::new(script())).build().unwrap();
    let outcome = finish(agent.run("Delete a.txt")).await;
    assert_eq!(outcome.termination, Termination::Completed);
    agent.messages().to_vec()
}

async fn pause_here_resume_there(spec: &str) {
    let id = unique("pause");
    let paused = child("pause", spec, &id, None);
    assert!(paused.starts_with("PAUSED "), "{paused}");
    let store = open(spec).await;
    let waiting = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(
        waiting.pause.as_ref().map(|(pause, _)| pause.as_str()),
        paused.strip_prefix("PAUSED ")
    );

    let done = child("resume", spec, &id, None);
    assert_eq!(done, "DONE Deleted a.txt.");
    let finished = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(finished.conversation.messages, uninterrupted().await);
    assert_eq!(finished.pause, None);

    // A second resume, in a third process: refused, and nothing is added.
    let again = child("resume", spec, &id, None);
    assert_eq!(again, "NOTHING", "the session waits in no pause any more");
    let after = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(after.version, finished.version);
}

async fn killed_between_turns(spec: &str) {
    let id = unique("killed");
    let (running, line) = spawn_child("block", spec, &id);
    assert_eq!(line, "BLOCKING");
    let store = open(spec).await;

    // While the other process's run goes on (its second turn's tool), this one may not
    // start a run on the session: refused at once, nothing asked, nothing written.
    let before = session::load(&*store, &id).await.unwrap().unwrap();
    let busy = |outcome: &RunOutcome| {
        matches!(
            &outcome.termination,
            Termination::Error(agent_loop::Error::Session(SessionError::Busy { .. }))
        )
    };
    let client = ScriptedClient::new([ScriptedResponse::text("Too soon.")]);
    let mut early = builder(client.clone())
        .session(store.clone(), id.clone())
        .build()
        .unwrap();
    let refused = finish(early.run("Are you there?")).await;
    assert!(busy(&refused), "{}", refused.termination);
    assert!(client.requests().is_empty(), "the model was not asked");
    let after = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(after.version, before.version, "nothing was written");

    // Killed: its lease holds until it runs out, or a host that knows ends it.
    kill(running);
    let refused = finish(early.run("Are you there?")).await;
    assert!(busy(&refused), "{}", refused.termination);
    let ended = session::release_lease(&*store, &id).await.unwrap();
    assert!(ended.is_some(), "the dead process's lease");

    // The first turn is in the session, whole; the second never ended.
    let kept = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(kept.lease, None);
    let mut context = ContextManager::new(ContextConfig::default());
    context
        .restore(kept.conversation.clone())
        .expect("a valid history");
    assert_eq!(kept.conversation.messages.len(), 3, "{kept:?}");
    assert_eq!(
        kept.conversation.messages[0].text(),
        "Read a.txt, then wait"
    );

    // The next process goes on from it.
    let mut agent = builder(ScriptedClient::new([ScriptedResponse::text("Back.")]))
        .session(store.clone(), id.clone())
        .build()
        .unwrap();
    let outcome = finish(agent.run("Are you there?")).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let now = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(now.conversation.messages, *agent.messages());
    // The question joins the first turn's results in one user message.
    assert_eq!(now.conversation.messages.len(), 4);
    assert_eq!(now.conversation.messages[3].text(), "Back.");
}

fn sqlite_spec(file: &TempFile) -> String {
    format!("sqlite:{}", file.0.display())
}

#[tokio::test]
async fn sqlite_pause_in_one_process_and_resume_in_another() {
    let file = TempFile::new("processes");
    pause_here_resume_there(&sqlite_spec(&file)).await;
}

#[tokio::test]
async fn sqlite_a_process_killed_between_turns_leaves_its_session_whole() {
    let file = TempFile::new("killed");
    killed_between_turns(&sqlite_spec(&file)).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_LOOP_POSTGRES_URL (scripts/postgres-test-server start DIR)"]
async fn postgres_pause_in_one_process_and_resume_in_another() {
    let url = postgres_url();
    pause_here_resume_there(&format!("postgres:{url}")).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_LOOP_POSTGRES_URL (scripts/postgres-test-server start DIR)"]
async fn postgres_a_process_killed_between_turns_leaves_its_session_whole() {
    let url = postgres_url();
    killed_between_turns(&format!("postgres:{url}")).await;
}
