//! MCP tools against real MCP servers started from `node_modules` (pinned by package.json,
//! installed with `npm ci`): the reference servers `@modelcontextprotocol/server-everything`
//! (stdio and streamable HTTP) and `@modelcontextprotocol/server-filesystem`, and
//! tests/fixtures/mcp/fixture-server.mjs (the official TypeScript SDK) for the behaviours the
//! reference servers do not show. With `CI` set, a missing `node` or package fails the test;
//! elsewhere the test says on stderr what it skipped and why.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_loop::agent::RunOptions;
use agent_loop::media::MediaSource;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::{Access, CancellationToken, ExecOptions, ToolCall, ToolCallResult};
use agent_loop::{Agent, AgentEvent, ContentBlock, Tool, ToolRegistry};
use agent_loop_mcp::{McpConnection, McpServer};
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The script to run with node, or `None` (after saying so) when the test must be skipped.
fn script(relative: &str) -> Option<PathBuf> {
    let path = root().join(relative);
    let node = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let problem = if !node {
        Some("`node` is not on PATH".to_owned())
    } else if !path.exists() {
        Some(format!("{} is missing (run `npm ci`)", path.display()))
    } else {
        None
    };
    match problem {
        None => Some(path),
        Some(problem) if std::env::var_os("CI").is_some() => {
            panic!("MCP tests need node and the pinned npm packages under CI: {problem}")
        }
        Some(problem) => {
            say_skipped(&format!(
                "!!! SKIPPED an MCP test: {problem}. Install Node.js and run `npm ci` in the \
                 repository root to run it."
            ));
            None
        }
    }
}

const EVERYTHING: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
const FILESYSTEM: &str = "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js";
const FIXTURE: &str = "tests/fixtures/mcp/fixture-server.mjs";

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. Under CI the test fails instead.
fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

async fn stdio(name: &str, script: &Path, args: &[&str]) -> McpConnection {
    McpServer::stdio(name, "node")
        .arg(script.display().to_string())
        .args(args.iter().copied())
        .connect()
        .await
        .expect("the server starts and lists its tools")
}

fn registry(connection: &McpConnection) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    connection
        .register(&mut registry)
        .expect("the tools register");
    registry
}

async fn call(registry: &ToolRegistry, name: &str, input: serde_json::Value) -> ToolCallResult {
    registry
        .execute_one(
            ToolCall::new("call_1", name, input),
            &ExecOptions::default(),
        )
        .await
}

/// Whether the process is gone (not running and not a zombie).
fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits (at most 20 s) for `done`; a condition, never a duration, is what tests assert.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..400 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[tokio::test]
async fn the_everything_server_lists_its_tools_over_stdio() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let names: Vec<String> = connection
        .tools()
        .iter()
        .map(|t| t.name().to_owned())
        .collect();
    for expected in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "trigger-long-running-operation",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    let registry = registry(&connection);
    let echo = registry.spec("echo").unwrap();
    assert!(echo.description.to_lowercase().contains("echo"));
    assert_eq!(echo.input_schema["type"], "object");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
    assert!(echo.input_schema.get("$schema").is_none());
    // readOnlyHint feeds the scheduler.
    assert_eq!(registry.access("get-tiny-image"), Some(Access::ReadOnly));
    assert_eq!(
        registry.access("toggle-simulated-logging"),
        Some(Access::SideEffects)
    );
}

#[tokio::test]
async fn a_prefix_and_a_filter_pick_and_rename_tools() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = McpServer::stdio("everything", "node")
        .args([everything.display().to_string(), "stdio".into()])
        .prefix("ev.")
        .only(["echo", "get-sum"])
        .connect()
        .await
        .unwrap();
    let registry = registry(&connection);
    assert_eq!(
        registry.names().collect::<Vec<_>>(),
        ["ev_echo", "ev_get-sum"]
    );
    let result = call(&registry, "ev_get-sum", json!({"a": 2, "b": 40})).await;
    assert!(!result.is_error, "{}", result.content);
    assert!(result.content.contains("42"), "{}", result.content);
}

#[tokio::test]
async fn a_text_tool_answers_with_the_servers_text_and_bad_arguments_never_reach_it() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let registry = registry(&connection);
    let result = call(&registry, "echo", json!({"message": "hello over stdio"})).await;
    assert!(!result.is_error, "{}", result.content);
    assert_eq!(result.content, "Echo: hello over stdio");
    // Arguments are checked against the server's schema before anything is sent.
    let bad = call(&registry, "echo", json!({"message": 7})).await;
    assert!(bad.is_error);
    assert!(
        bad.content
            .starts_with("invalid arguments for tool \"echo\""),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn an_image_result_is_kept_and_named() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let result = call(&registry(&connection), "get-tiny-image", json!({})).await;
    assert!(!result.is_error, "{}", result.content);
    assert!(
        result.content.contains("Here's the image you requested:"),
        "{}",
        result.content
    );
    assert!(
        result.content.contains("[image: image/png, "),
        "{}",
        result.content
    );
    // The image itself goes on to the model.
    match result.images.as_slice() {
        [MediaSource::Base64 { media_type, data }] => {
            assert_eq!(media_type, "image/png");
            assert!(data.starts_with("iVBORw0KGgo"), "{data}");
        }
        other => panic!("expected one PNG, got {other:?}"),
    }
}

#[tokio::test]
async fn structured_content_comes_back_as_json() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let result = call(
        &registry(&connection),
        "get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert!(!result.is_error, "{}", result.content);
    let value: serde_json::Value = serde_json::from_str(&result.content).unwrap();
    assert_eq!(value["temperature"], 36);
}

#[tokio::test]
async fn progress_notifications_become_tool_progress() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let registry = registry(&connection);
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let result = registry
        .execute_one(
            ToolCall::new(
                "p1",
                "trigger-long-running-operation",
                json!({"duration": 0.3, "steps": 3}),
            ),
            &ExecOptions::default().progress(tx),
        )
        .await;
    assert!(!result.is_error, "{}", result.content);
    assert!(result.content.contains("Steps: 3"), "{}", result.content);
    let mut notes = Vec::new();
    while let Ok(note) = rx.try_recv() {
        assert_eq!(note.call_id, "p1");
        notes.push(note.message);
    }
    // The last note and the answer race inside the client (the answer may win); the notes
    // sent well before it are all there, in order.
    assert!(
        notes == ["1/3", "2/3", "3/3"] || notes == ["1/3", "2/3"],
        "{notes:?}"
    );
}

#[tokio::test]
async fn cancelling_a_call_sends_notifications_cancelled() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = stdio("fixture", &fixture, &[]).await;
    let registry = registry_of(&connection, &["wait_for_cancel", "cancelled_count"]);
    let cancel = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let opts = ExecOptions::default().cancel(cancel.clone()).progress(tx);
    let running = registry.execute_one(ToolCall::new("w", "wait_for_cancel", json!({})), &opts);
    let canceller = async {
        // The server's progress note says the call is in flight.
        assert_eq!(rx.recv().await.unwrap().message, "1: waiting");
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(running, canceller);
    assert!(result.is_error);
    // The server saw notifications/cancelled (its abort signal fired).
    let counted = eventually_async(|| async {
        call(&registry, "cancelled_count", json!({})).await.content == "1"
    })
    .await;
    assert!(counted, "the server never saw the cancellation");
}

async fn eventually_async<F, Fut>(mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn registry_of(connection: &McpConnection, names: &[&str]) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in connection.tools() {
        if names.contains(&tool.remote_name()) {
            registry.register(tool).unwrap();
        }
    }
    registry
}

#[tokio::test]
async fn the_tool_timeout_applies_and_cancels_the_call() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = McpServer::stdio("fixture", "node")
        .arg(fixture.display().to_string())
        .timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&connection, &["wait_for_cancel", "cancelled_count"]);
    let result = call(&registry, "wait_for_cancel", json!({})).await;
    assert!(result.is_error);
    assert!(result.content.contains("timed out"), "{}", result.content);
    let counted = eventually_async(|| async {
        call(&registry, "cancelled_count", json!({})).await.content == "1"
    })
    .await;
    assert!(
        counted,
        "the server never saw the cancellation of the timed-out call"
    );
}

#[tokio::test]
async fn a_server_killed_mid_call_gives_an_error_result_and_is_restarted() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let registry = registry(&connection);
    let pid = connection.process_id().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let opts = ExecOptions::default().progress(tx);
    let running = registry.execute_one(
        ToolCall::new(
            "long",
            "trigger-long-running-operation",
            json!({"duration": 60, "steps": 600}),
        ),
        &opts,
    );
    let killer = async {
        rx.recv().await.expect("a first progress note");
        kill(pid);
    };
    let (result, ()) = tokio::join!(running, killer);
    assert!(result.is_error, "{}", result.content);
    assert!(
        result.content.contains("MCP server \"everything\""),
        "{}",
        result.content
    );
    assert!(
        result.content.contains("started again"),
        "{}",
        result.content
    );
    // The run goes on: the next call starts a new server.
    let again = call(&registry, "echo", json!({"message": "back"})).await;
    assert_eq!(again.content, "Echo: back");
    let new_pid = connection.process_id().await.unwrap();
    assert_ne!(new_pid, pid);
    assert!(
        eventually(|| gone(pid)).await,
        "the killed server was never reaped"
    );
}

#[tokio::test]
async fn a_server_that_exits_mid_call_gives_an_error_and_is_restarted() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = stdio("fixture", &fixture, &[]).await;
    let registry = registry_of(&connection, &["exit", "dotted.echo"]);
    let result = call(&registry, "exit", json!({})).await;
    assert!(result.is_error);
    assert!(result.content.contains("closed"), "{}", result.content);
    let echo = call(&registry, "dotted_echo", json!({"text": "hi"})).await;
    assert_eq!(echo.content, "echo: hi");
}

#[tokio::test]
async fn restarting_a_server_is_tried_a_bounded_number_of_times() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    // The fixture starts once; with this file present, every later start fails.
    let marker = std::env::temp_dir().join(format!("agent-loop-mcp-once-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let connection = McpServer::stdio("once", "node")
        .arg(fixture.display().to_string())
        .env("FIXTURE_START_ONCE", marker.display().to_string())
        .max_reconnects(2)
        .connect()
        .await
        .unwrap();
    let registry = registry_of(&connection, &["exit"]);
    assert!(call(&registry, "exit", json!({})).await.is_error);
    for _ in 0..2 {
        let failed = call(&registry, "exit", json!({})).await;
        assert!(failed.is_error);
        assert!(
            failed.content.contains("MCP handshake failed"),
            "{}",
            failed.content
        );
    }
    let given_up = call(&registry, "exit", json!({})).await;
    assert!(
        given_up
            .content
            .contains("restarting it failed 2 times in a row"),
        "{}",
        given_up.content
    );
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test]
async fn the_fixture_server_paginates_renames_and_flattens() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = stdio("fixture", &fixture, &[]).await;
    // Ten tools over five pages.
    let remote: Vec<String> = connection
        .tools()
        .iter()
        .map(|t| t.remote_name().to_owned())
        .collect();
    assert_eq!(remote.len(), 10, "{remote:?}");
    let registry = registry_of(&connection, &["dotted.echo", "either"]);
    assert_eq!(
        registry.names().collect::<Vec<_>>(),
        ["dotted_echo", "either"]
    );
    let echo = call(&registry, "dotted_echo", json!({"text": "hi"})).await;
    assert_eq!(echo.content, "echo: hi");
    // A top-level oneOf of objects is sent flattened and still checked as written.
    let either = registry.spec("either").unwrap();
    assert_eq!(either.input_schema["type"], "object");
    assert!(either.input_schema.get("oneOf").is_none());
    assert_eq!(
        call(&registry, "either", json!({"b": 2})).await.content,
        r#"{"b":2}"#
    );
    assert!(
        call(&registry, "either", json!({"b": "two"}))
            .await
            .is_error
    );
}

#[tokio::test]
async fn a_schema_the_providers_reject_is_refused_naming_server_and_tool() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = McpServer::stdio("fixture", "node")
        .arg(fixture.display().to_string())
        .only(["scalar_union"])
        .connect()
        .await
        .unwrap();
    let error = connection
        .register(&mut ToolRegistry::new())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("MCP server \"fixture\", tool \"scalar_union\""),
        "{error}"
    );
    let built = Agent::builder(ScriptedClient::new([]))
        .tool_source(connection.clone())
        .build();
    let error = built.unwrap_err().to_string();
    assert!(error.contains("tool \"scalar_union\""), "{error}");
}

#[tokio::test]
async fn bad_output_from_a_server_gives_clear_errors() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    // Lines that are not JSON-RPC are skipped; the answer after them still arrives.
    let connection = McpServer::stdio("fixture", "node")
        .arg(fixture.display().to_string())
        .max_message_bytes(64 * 1024)
        .connect()
        .await
        .unwrap();
    let registry = registry_of(
        &connection,
        &["garbage_then_answer", "big", "strange_content"],
    );
    let garbage = call(&registry, "garbage_then_answer", json!({})).await;
    assert_eq!(garbage.content, "still here");
    // A content type this crate does not know is named, and the rest kept.
    let strange = call(&registry, "strange_content", json!({})).await;
    assert!(!strange.is_error, "{}", strange.content);
    assert_eq!(
        strange.content,
        "before\n[content of unknown type \"hologram\", not shown]"
    );
    // A message over the limit closes the connection, and the call says why.
    let big = call(&registry, "big", json!({"bytes": 100_000})).await;
    assert!(big.is_error);
    assert!(big.content.contains("65536-byte limit"), "{}", big.content);
    // The next call starts the server again.
    let fine = call(&registry, "big", json!({"bytes": 10})).await;
    assert_eq!(fine.content, "x".repeat(10));
}

#[tokio::test]
async fn a_server_that_pages_forever_is_read_a_bounded_number_of_pages() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = McpServer::stdio("endless", "node")
        .arg(fixture.display().to_string())
        .env("FIXTURE_ENDLESS_PAGES", "1")
        .connect()
        .await
        .unwrap();
    // 100 pages of two tools each, then the listing stops.
    assert_eq!(connection.tools().len(), 200);
}

#[tokio::test]
async fn a_changed_tool_list_is_noticed_and_refreshed() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = stdio("fixture", &fixture, &[]).await;
    assert!(!connection.tools_changed());
    let registry = registry_of(&connection, &["add_tool"]);
    assert_eq!(
        call(&registry, "add_tool", json!({})).await.content,
        "added"
    );
    assert!(eventually(|| connection.tools_changed()).await);
    connection.refresh().await.unwrap();
    assert!(!connection.tools_changed());
    assert!(connection.tools().iter().any(|t| t.name() == "late_tool"));
}

#[tokio::test]
async fn an_agent_offers_the_tools_a_server_added_mid_run_from_the_next_turn() {
    let Some(fixture) = script(FIXTURE) else {
        return;
    };
    let connection = McpServer::stdio("fixture", "node")
        .arg(fixture.display().to_string())
        .only(["add_tool", "late_tool"])
        .connect()
        .await
        .unwrap();
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add_tool", json!({})),
        ScriptedResponse::tool_call("call_2", "late_tool", json!({})),
        ScriptedResponse::text("Both worked."),
        ScriptedResponse::text("Done again."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool_source(connection.clone())
        .build()
        .unwrap();
    assert!(!agent.tools().contains("late_tool"));
    let events: Vec<AgentEvent> = agent.run("Add a tool, then use it.").collect().await;
    let results: Vec<(String, String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } => Some((id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("call_1".to_owned(), "added".to_owned(), false),
            ("call_2".to_owned(), "late and here".to_owned(), false),
        ],
        "{events:#?}"
    );
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => {
            assert!(outcome.termination.is_completed(), "{outcome:?}");
            assert_eq!(outcome.final_text, "Both worked.");
        }
        other => panic!("{other:?}"),
    }
    // Turn 1 was offered the tools as built; turn 2, after the server's
    // notifications/tools/list_changed, the new list.
    let requests = client.requests();
    let names =
        |i: usize| -> Vec<String> { requests[i].tools.iter().map(|t| t.name.clone()).collect() };
    assert_eq!(names(0), ["add_tool"]);
    assert_eq!(names(1), ["add_tool", "late_tool"]);
    assert_eq!(names(2), ["add_tool", "late_tool"]);
    assert!(!connection.tools_changed());
    // The next run starts from the newest tools, without listing them again.
    let again = agent.run_to_end("Again.", RunOptions::new()).await;
    assert_eq!(again.final_text, "Done again.", "{again:?}");
    let requests = client.requests();
    assert_eq!(requests.len(), 4);
    let last: Vec<&str> = requests[3].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(last, ["add_tool", "late_tool"]);
}

#[tokio::test]
async fn dropping_the_connection_kills_and_reaps_the_child() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = stdio("everything", &everything, &["stdio"]).await;
    let pid = connection.process_id().await.unwrap();
    assert!(!gone(pid));
    let registry = registry(&connection);
    drop(connection);
    // The registry's tools still hold the connection.
    assert_eq!(
        call(&registry, "echo", json!({"message": "x"}))
            .await
            .content,
        "Echo: x"
    );
    drop(registry);
    assert!(
        eventually(|| gone(pid)).await,
        "server {pid} outlived its connection"
    );

    let connection = stdio("everything", &everything, &["stdio"]).await;
    let pid = connection.process_id().await.unwrap();
    connection.close().await;
    assert!(gone(pid), "close() waits for the child to exit");
}

#[tokio::test]
async fn the_filesystem_server_is_confined_to_its_directory() {
    let Some(filesystem) = script(FILESYSTEM) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("agent-loop-mcp-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    std::fs::write(dir.join("notes.txt"), "remember the milk\n").unwrap();
    let connection = stdio("files", &filesystem, &[dir.to_str().unwrap()]).await;
    let registry = registry(&connection);
    let inside = call(
        &registry,
        "read_text_file",
        json!({"path": dir.join("notes.txt")}),
    )
    .await;
    assert!(!inside.is_error, "{}", inside.content);
    assert_eq!(inside.content, "remember the milk\n");
    let outside = call(
        &registry,
        "read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert!(outside.is_error, "{}", outside.content);
    assert!(outside.content.contains("denied"), "{}", outside.content);
    let listed = call(&registry, "list_directory", json!({"path": dir})).await;
    assert!(
        listed.content.contains("[FILE] notes.txt"),
        "{}",
        listed.content
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Starts the everything server over streamable HTTP on a free loopback port; returns the
/// child (killed on drop) and the port once it listens.
async fn everything_over_http(script: &Path) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("listening on port") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, port)
}

#[tokio::test]
async fn the_everything_server_works_over_streamable_http() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let (_server, port) = everything_over_http(&everything).await;
    let connection = McpServer::http("everything-http", format!("http://127.0.0.1:{port}/mcp"))
        .header("X-Test", "1")
        .connect()
        .await
        .unwrap();
    let registry = registry(&connection);
    assert!(registry.contains("echo") && registry.contains("get-tiny-image"));
    assert_eq!(
        call(&registry, "echo", json!({"message": "over http"}))
            .await
            .content,
        "Echo: over http"
    );
    let image = call(&registry, "get-tiny-image", json!({})).await;
    assert!(
        image.content.contains("[image: image/png"),
        "{}",
        image.content
    );
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let progress = registry
        .execute_one(
            ToolCall::new(
                "p",
                "trigger-long-running-operation",
                json!({"duration": 0.2, "steps": 2}),
            ),
            &ExecOptions::default().progress(tx),
        )
        .await;
    assert!(!progress.is_error, "{}", progress.content);
    assert_eq!(rx.recv().await.unwrap().message, "1/2");
    assert!(connection.process_id().await.is_none());
}

#[tokio::test]
async fn an_agent_run_calls_an_mcp_tool_and_the_model_reads_the_real_result() {
    let Some(everything) = script(EVERYTHING) else {
        return;
    };
    let connection = McpServer::stdio("everything", "node")
        .args([everything.display().to_string(), "stdio".into()])
        .prefix("mcp_")
        .connect()
        .await
        .unwrap();
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "mcp_echo", json!({"message": "from the model"}))
            .then_tool_call("call_2", "mcp_get-tiny-image", json!({})),
        ScriptedResponse::text("The server said it back."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool_source(connection.clone())
        .build()
        .unwrap();
    drop(connection); // the agent's tools keep the server running
    let events: Vec<AgentEvent> = agent.run("Echo something.").collect().await;
    let result = events.iter().find_map(|e| match e {
        AgentEvent::ToolResult {
            id,
            content,
            is_error,
            ..
        } if id == "call_1" => Some((content.clone(), *is_error)),
        _ => None,
    });
    assert_eq!(
        result,
        Some(("Echo: from the model".to_owned(), false)),
        "{events:#?}"
    );
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => {
            assert!(outcome.termination.is_completed(), "{outcome:?}");
            assert_eq!(outcome.final_text, "The server said it back.");
        }
        other => panic!("{other:?}"),
    }
    // The model was offered the server's tools and read the server's answer.
    let requests = client.requests();
    assert!(requests[0].tools.iter().any(|t| t.name == "mcp_echo"));
    let sent_back = requests[1]
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .any(|b| {
            matches!(b, ContentBlock::ToolResult { tool_use_id, content, .. }
            if tool_use_id == "call_1" && content.contains("Echo: from the model"))
        });
    assert!(sent_back, "{:#?}", requests[1].messages);
    // The image a tool returned reaches the model too.
    let image_sent = requests[1]
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .any(|b| {
            matches!(b, ContentBlock::ToolResult { tool_use_id, images, .. }
            if tool_use_id == "call_2" && images.len() == 1)
        });
    assert!(image_sent, "{:#?}", requests[1].messages);
}

/// Tool search over the reference servers' real tools (everything and filesystem, about 30
/// tools, searched above a threshold of 8): the first request carries only the search tool,
/// the agent's BM25 search finds the filesystem server's reading tools by their own
/// descriptions, and the one called runs on the real server.
#[tokio::test]
async fn tool_search_finds_the_reference_servers_tools_by_their_descriptions() {
    use agent_loop::tool::search::{ToolSearch, SEARCH_TOOL};
    use agent_loop::RequestSettings;
    let (Some(everything), Some(filesystem)) = (script(EVERYTHING), script(FILESYSTEM)) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("agent-loop-mcp-search-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    std::fs::write(dir.join("notes.txt"), "remember the milk\n").unwrap();
    let everything = stdio("everything", &everything, &["stdio"]).await;
    let files = stdio("files", &filesystem, &[dir.to_str().unwrap()]).await;
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call(
            "s1",
            SEARCH_TOOL,
            json!({"query": "read the contents of a text file"}),
        ),
        ScriptedResponse::tool_call(
            "c1",
            "read_text_file",
            json!({"path": dir.join("notes.txt")}),
        ),
        ScriptedResponse::text("It says to remember the milk."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool_source(everything)
        .tool_source(files)
        .settings(RequestSettings::new().tool_search(ToolSearch::new().threshold(8)))
        .build()
        .unwrap();
    let total = agent.tools().len();
    assert!(total > 20, "{total} tools");
    let events: Vec<AgentEvent> = agent.run("What do my notes say?").collect().await;
    let results: Vec<(String, String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                name,
                content,
                is_error,
                ..
            } => Some((name.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    let found = &results[0].1;
    assert!(!results[0].2, "{found}");
    // The two reading tools lead (the deprecated `read_file`'s short description first).
    let best: Vec<&str> = found
        .lines()
        .skip(1)
        .take(2)
        .filter_map(|l| l.split_once(": ").map(|(name, _)| name))
        .collect();
    assert_eq!(best, ["read_file", "read_text_file"], "{found}");
    assert_eq!(
        results[1],
        (
            "read_text_file".to_owned(),
            "remember the milk\n".to_owned(),
            false
        )
    );
    let requests = client.requests();
    let carried =
        |i: usize| -> Vec<String> { requests[i].tools.iter().map(|t| t.name.clone()).collect() };
    assert_eq!(carried(0), [SEARCH_TOOL]);
    assert!(
        carried(1).contains(&"read_text_file".to_owned()),
        "{:?}",
        carried(1)
    );
    assert!(carried(1).len() <= 6, "{:?}", carried(1));
    std::fs::remove_dir_all(&dir).unwrap();
}
