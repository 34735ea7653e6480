//! Servers that ask the client things during a tool call, written with the official Python
//! SDK (`mcp`, pinned in scripts/mcp-requirements.txt; tests/py/asking_server.py), driven by
//! an agent whose model is scripted: elicitation becomes a pause of the run and the host's
//! answer reaches the server; sampling is answered by the host's model under the run's budget.
//!
//! The tests find the venv's python in `AGENT_LOOP_MCP_PYTHON` (`.ci/run` makes it). With `CI`
//! set, a missing one fails the test; elsewhere the test says loudly what it skipped.

use std::path::PathBuf;
use std::process::Stdio;

use agent_loop::agent::{PausedRun, Resolutions, RunPolicy, WaitsFor};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::{Agent, AgentEvent, RequestSettings, RunOutcome, Termination};
use agent_loop_mcp::{Elicitation, McpConnection, McpServer, Sampling};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. Under CI the test fails instead.
fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

/// The python of the venv with the pinned `mcp` (`AGENT_LOOP_MCP_PYTHON`), or `None` after
/// saying why the test is skipped. In CI (`CI=true`) a missing one fails the test.
fn python() -> Option<String> {
    // Checked once per test binary (starting python and importing the SDK takes seconds).
    static CHECKED: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    let why = match CHECKED.get_or_init(check_python) {
        Ok(python) => return Some(python.clone()),
        Err(why) => why,
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{why}: CI must run this test against a server written with the official Python \
             SDK. Make the venv: python3 -m venv v && v/bin/pip install -r \
             scripts/mcp-requirements.txt, and export AGENT_LOOP_MCP_PYTHON=$PWD/v/bin/python"
        );
    }
    say_skipped(&format!(
        "!!!!! SKIPPED an agent-loop-mcp test: {why}, so the Python mcp server is not run. Make \
         the venv (python3 -m venv v && v/bin/pip install -r scripts/mcp-requirements.txt) and \
         set AGENT_LOOP_MCP_PYTHON=$PWD/v/bin/python to run it. !!!!!"
    ));
    None
}

/// The venv's python, or why it cannot run the server.
fn check_python() -> Result<String, String> {
    let python = std::env::var("AGENT_LOOP_MCP_PYTHON").ok();
    let why = match &python {
        None => "AGENT_LOOP_MCP_PYTHON is not set".to_owned(),
        Some(p) => match std::process::Command::new(p)
            .args(["-c", "import mcp.server.mcpserver, uvicorn"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Ok(s) if s.success() => return Ok(p.clone()),
            _ => format!("{p} cannot import mcp (the official Python MCP SDK)"),
        },
    };
    Err(why)
}

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py/asking_server.py")
        .display()
        .to_string()
}

/// The asking server over streamable HTTP on a free loopback port: the child (killed when
/// dropped) and its MCP URL, once it listens.
async fn http_server(python: &str) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(python)
        .args([script(), "http".to_owned()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("python starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let port = loop {
        match lines.next_line().await.expect("the server's stdout") {
            Some(line) => {
                if let Some(port) = line.strip_prefix("PORT ") {
                    break port.trim().to_owned();
                }
            }
            None => panic!("the asking server exited before listening"),
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

async fn connect(server: McpServer) -> McpConnection {
    server
        .connect()
        .await
        .expect("the server starts and lists its tools")
}

fn agent(model: &ScriptedClient, connection: &McpConnection) -> Agent {
    Agent::builder(model.clone())
        .tool_source(connection.clone())
        .build()
        .expect("the agent builds")
}

async fn run(stream: impl futures::Stream<Item = AgentEvent>) -> (Vec<AgentEvent>, RunOutcome) {
    use futures::StreamExt;
    let events: Vec<AgentEvent> = stream.collect().await;
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => {
            let outcome = outcome.clone();
            (events, outcome)
        }
        other => panic!("the run did not finish: {other:?}"),
    }
}

fn paused(outcome: &RunOutcome) -> PausedRun {
    match &outcome.termination {
        Termination::Paused(paused) => (**paused).clone(),
        other => panic!("the run did not pause: {other:?}"),
    }
}

/// The content of call `id`'s result, and whether it is an error.
fn result_of(events: &[AgentEvent], id: &str) -> (String, bool) {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult {
                id: call,
                content,
                is_error,
                ..
            } if call == id => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}: {events:#?}"))
}

/// What the server's tool received, from its result (`<tool> <json>`).
fn received(content: &str, prefix: &str) -> Value {
    let json = content
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{content:?} does not start with {prefix:?}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn booking_model() -> ScriptedClient {
    ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "book_table", json!({"date": "Friday"})),
        ScriptedResponse::text("Booked."),
    ])
}

#[tokio::test]
async fn a_question_pauses_the_run_and_the_answer_reaches_the_server() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let model = booking_model();
    let mut agent = agent(&model, &connection);

    let (_, outcome) = run(agent.run("Book a table for Friday.")).await;
    let paused = paused(&outcome);
    let pending = paused.pending();
    assert_eq!(pending.len(), 1, "{pending:#?}");
    let call = &pending[0];
    assert_eq!(call.id, "call_1");
    assert_eq!(call.waits_for, WaitsFor::Answer);
    assert!(call.digest.starts_with("sha256:"), "{}", call.digest);
    // The server's message and requestedSchema, as it sent them.
    let question = call.question.as_ref().expect("the call asks a question");
    assert_eq!(question.prompt, "How many seats on Friday?");
    let schema = question.schema.as_ref().expect("a schema");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["seats"]["type"], "integer");
    assert_eq!(schema["properties"]["seats"]["minimum"], 1);
    assert_eq!(schema["properties"]["window"]["type"], "boolean");
    assert_eq!(schema["required"], json!(["seats"]));
    // The model got no result yet: one request so far.
    assert_eq!(model.requests().len(), 1);

    // The run goes through serde, as a host that stores it does.
    let stored: PausedRun = serde_json::from_str(&serde_json::to_string(&paused).unwrap()).unwrap();
    let (events, outcome) = run(agent.resume(
        &stored,
        Resolutions::new().result("call_1", r#"{"seats": 4}"#),
    ))
    .await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(!is_error, "{content}");
    assert_eq!(
        received(&content, "booking"),
        json!({"action": "accept", "content": {"seats": 4, "window": false}})
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
    assert_eq!(outcome.final_text, "Booked.");
    // The model read the server's result.
    let last = model.last_request().unwrap();
    assert!(
        last.messages
            .iter()
            .any(|m| m.content.iter().any(|b| matches!(
                b,
                agent_loop::ContentBlock::ToolResult { tool_use_id, content, .. }
                    if tool_use_id == "call_1" && content.contains("\"seats\": 4")
            ))),
        "{:#?}",
        last.messages
    );
}

#[tokio::test]
async fn a_denied_question_is_declined_and_an_error_result_cancels() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "book_table", json!({"date": "Friday"})),
        ScriptedResponse::tool_call("call_2", "book_table", json!({"date": "Monday"})),
        ScriptedResponse::text("Not booked."),
    ]);
    let mut agent = agent(&model, &connection);
    let (_, outcome) = run(agent.run("Book a table.")).await;
    let (events, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().deny("call_1", "not now"),
    ))
    .await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(!is_error, "{content}");
    assert_eq!(
        received(&content, "booking"),
        json!({"action": "decline", "content": null})
    );
    let (events, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().error("call_2", "the form was closed"),
    ))
    .await;
    let (content, _) = result_of(&events, "call_2");
    assert_eq!(
        received(&content, "booking"),
        json!({"action": "cancel", "content": null})
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

#[tokio::test]
async fn an_answer_that_does_not_fit_the_schema_is_asked_again() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let model = booking_model();
    let mut agent = agent(&model, &connection);
    let (_, outcome) = run(agent.run("Book.")).await;
    // Out of range: asked again, saying why; the server is not answered.
    let (_, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().result("call_1", r#"{"seats": 40}"#),
    ))
    .await;
    let again = paused(&outcome).pending().remove(0);
    let prompt = again.question.unwrap().prompt;
    assert!(
        prompt.starts_with("How many seats on Friday?\n\n("),
        "{prompt}"
    );
    assert!(
        prompt.contains("40 is greater than the maximum of 12"),
        "{prompt}"
    );
    // An approval alone does not answer a question that requires a field.
    let (_, outcome) =
        run(agent.resume(&paused(&outcome), Resolutions::new().approve("call_1"))).await;
    let prompt = paused(&outcome)
        .pending()
        .remove(0)
        .question
        .unwrap()
        .prompt;
    assert!(
        prompt.contains("\"seats\" is a required property"),
        "{prompt}"
    );
    let (events, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().result("call_1", r#"{"seats": 2, "window": true}"#),
    ))
    .await;
    assert_eq!(
        received(&result_of(&events, "call_1").0, "booking"),
        json!({"action": "accept", "content": {"seats": 2, "window": true}})
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

#[tokio::test]
async fn two_calls_in_flight_each_get_their_own_question_and_answer() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "book_table", json!({"date": "Friday"}))
            .then_tool_call("call_2", "book_table", json!({"date": "Saturday"})),
        ScriptedResponse::text("Both booked."),
    ]);
    let mut agent = agent(&model, &connection);
    let (_, outcome) = run(agent.run("Book two tables.")).await;
    let paused = paused(&outcome);
    let mut prompts: Vec<(String, String)> = paused
        .pending()
        .into_iter()
        .map(|p| (p.id.clone(), p.question.unwrap().prompt))
        .collect();
    prompts.sort();
    assert_eq!(
        prompts,
        [
            ("call_1".to_owned(), "How many seats on Friday?".to_owned()),
            (
                "call_2".to_owned(),
                "How many seats on Saturday?".to_owned()
            )
        ]
    );
    let (events, outcome) = run(agent.resume(
        &paused,
        Resolutions::new()
            .result("call_1", r#"{"seats": 1}"#)
            .result("call_2", r#"{"seats": 2}"#),
    ))
    .await;
    assert_eq!(
        received(&result_of(&events, "call_1").0, "booking")["content"]["seats"],
        1
    );
    assert_eq!(
        received(&result_of(&events, "call_2").0, "booking")["content"]["seats"],
        2
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

#[tokio::test]
async fn a_call_that_asks_twice_pauses_twice() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "book_twice", json!({})),
        ScriptedResponse::text("Done."),
    ]);
    let mut agent = agent(&model, &connection);
    let (_, outcome) = run(agent.run("Lunch and dinner.")).await;
    let first = paused(&outcome).pending().remove(0).question.unwrap();
    assert_eq!(first.prompt, "Seats for lunch?");
    let (_, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().result("call_1", r#"{"seats": 3}"#),
    ))
    .await;
    let second = paused(&outcome).pending().remove(0).question.unwrap();
    assert_eq!(second.prompt, "Seats for dinner?");
    let (events, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().result("call_1", r#"{"seats": 5}"#),
    ))
    .await;
    let content = result_of(&events, "call_1").0;
    assert!(
        content.contains("\"seats\": 3") && content.contains("\"seats\": 5"),
        "{content}"
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

#[tokio::test]
async fn a_run_resumed_where_no_call_waits_gets_a_clear_error_result() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let first =
        connect(McpServer::http("bookings", url.clone()).elicitation(Elicitation::new())).await;
    let model = booking_model();
    let mut agent_one = agent(&model, &first);
    let (_, outcome) = run(agent_one.run("Book.")).await;
    let stored = serde_json::to_string(&paused(&outcome)).unwrap();
    drop(agent_one);

    // Another client (as another process would have): no call waits there.
    let second = connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let mut agent_two = agent(&model, &second);
    let paused: PausedRun = serde_json::from_str(&stored).unwrap();
    let (events, outcome) = run(agent_two.resume(
        &paused,
        Resolutions::new().result("call_1", r#"{"seats": 4}"#),
    ))
    .await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(is_error, "{content}");
    assert!(
        content.starts_with(
            "MCP server \"bookings\", tool \"book_table\": the server asked \"How many seats on \
             Friday?\" during this call, and that question can no longer be answered: no call \
             waits for it on this connection"
        ),
        "{content}"
    );
    assert!(
        content.ends_with("call the tool again to start over"),
        "{content}"
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");

    // The first client, closed, gave its waiting call up; resuming there says so.
    first.close().await;
    let mut agent_three = agent(&ScriptedClient::new([ScriptedResponse::text("ok")]), &first);
    let (events, _) = run(agent_three.resume(
        &serde_json::from_str(&stored).unwrap(),
        Resolutions::new().result("call_1", r#"{"seats": 4}"#),
    ))
    .await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(is_error, "{content}");
    assert!(
        content.contains("can no longer be answered: the connection to the server was closed"),
        "{content}"
    );
}

/// What the client declared, as the server read it.
async fn declared(connection: &McpConnection) -> Value {
    use agent_loop::tool::{ExecOptions, ToolCall};
    let mut registry = agent_loop::ToolRegistry::new();
    connection.register(&mut registry).unwrap();
    let result = registry
        .execute_one(
            ToolCall::new("c", "client_capabilities", json!({})),
            &ExecOptions::default(),
        )
        .await;
    received(&result.content, "capabilities")
}

#[tokio::test]
async fn the_capabilities_are_declared_only_when_turned_on() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let off = connect(McpServer::http("plain", url.clone())).await;
    assert_eq!(declared(&off).await, json!({}));
    let on = connect(
        McpServer::http("asking", url.clone())
            .elicitation(Elicitation::new())
            .sampling(Sampling::new(ScriptedClient::new([]))),
    )
    .await;
    assert_eq!(
        declared(&on).await,
        json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}})
    );
    let form_only =
        connect(McpServer::http("form", url).elicitation(Elicitation::new().url_mode(false))).await;
    assert_eq!(
        declared(&form_only).await,
        json!({"elicitation": {"form": {}}})
    );
}

#[tokio::test]
async fn a_question_is_declined_when_elicitation_is_off_or_it_belongs_to_no_call() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    // Elicitation not turned on: the server's question is declined, the run never pauses.
    let off = connect(McpServer::http("bookings", url.clone())).await;
    let model = booking_model();
    let (events, outcome) = run(agent(&model, &off).run("Book.")).await;
    assert_eq!(
        received(&result_of(&events, "call_1").0, "booking"),
        json!({"action": "decline", "content": null})
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");

    // Turned on, but the question comes on the standalone stream, tied to no call.
    let on = connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "ask_unrelated", json!({})),
        ScriptedResponse::text("ok"),
    ]);
    let (events, outcome) = run(agent(&model, &on).run("Ask.")).await;
    assert_eq!(
        received(&result_of(&events, "call_1").0, "unrelated"),
        json!({"action": "decline"})
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

#[tokio::test]
async fn a_url_question_shows_the_url_and_an_approval_accepts() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("calendar", url).elicitation(Elicitation::new())).await;
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "link_account", json!({})),
        ScriptedResponse::text("Linked."),
    ]);
    let mut agent = agent(&model, &connection);
    let (_, outcome) = run(agent.run("Link my calendar.")).await;
    let question = paused(&outcome).pending().remove(0).question.unwrap();
    assert_eq!(
        question.prompt,
        "Sign in to the calendar service.\n\nOpen this URL to go on: \
         https://calendar.example/connect?s=1"
    );
    assert_eq!(question.schema, None);
    let (events, outcome) =
        run(agent.resume(&paused(&outcome), Resolutions::new().approve("call_1"))).await;
    assert_eq!(
        received(&result_of(&events, "call_1").0, "link"),
        json!({"action": "accept"})
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

#[tokio::test]
async fn a_question_over_stdio_pauses_the_run_too() {
    let Some(python) = python() else { return };
    let connection = connect(
        McpServer::stdio("bookings", python)
            .args([script(), "stdio".to_owned()])
            .elicitation(Elicitation::new()),
    )
    .await;
    let model = booking_model();
    let mut agent = agent(&model, &connection);
    let (_, outcome) = run(agent.run("Book.")).await;
    let (events, outcome) = run(agent.resume(
        &paused(&outcome),
        Resolutions::new().result("call_1", r#"{"seats": 6}"#),
    ))
    .await;
    assert_eq!(
        received(&result_of(&events, "call_1").0, "booking")["content"]["seats"],
        6
    );
    assert!(outcome.termination.is_completed(), "{outcome:?}");
}

fn summarize_model(max_tokens: u32) -> ScriptedClient {
    ScriptedClient::new([
        ScriptedResponse::tool_call(
            "call_1",
            "summarize",
            json!({"text": "Cats sleep most of the day and hunt at dusk.", "max_tokens": max_tokens}),
        )
        .usage_tokens(100, 10),
        ScriptedResponse::text("Done.").usage_tokens(120, 5),
    ])
}

#[tokio::test]
async fn a_sampling_request_is_answered_by_the_hosts_model_and_counts_toward_the_run() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let sampler = ScriptedClient::new([ScriptedResponse::text("Cats nap by day.")
        .usage_tokens(30, 7)
        .model("haiku-test")]);
    let connection =
        connect(McpServer::http("docs", url).sampling(Sampling::new(sampler.clone()))).await;
    let model = summarize_model(50);
    let (events, outcome) = run(agent(&model, &connection).run("Summarize.")).await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(!is_error, "{content}");
    assert_eq!(
        received(&content, "summary"),
        json!({"text": "Cats nap by day.", "model": "haiku-test", "stop": "endTurn", "role": "assistant"})
    );
    // What the server asked for reached the host's model.
    let request = sampler
        .last_request()
        .expect("the sampling model was called");
    assert_eq!(
        request.system.as_deref(),
        Some("Summarize in one sentence.")
    );
    assert_eq!(request.max_tokens, 50);
    assert_eq!(
        request.messages[0].text(),
        "Cats sleep most of the day and hunt at dusk."
    );
    // The sampling call's usage is the run's: 100+120+30 in, 10+5+7 out.
    assert!(outcome.termination.is_completed(), "{outcome:?}");
    assert_eq!(outcome.usage.input_tokens, 250, "{:?}", outcome.usage);
    assert_eq!(outcome.usage.output_tokens, 22, "{:?}", outcome.usage);
    // Reported as a nested run under the call.
    assert!(
        events.iter().any(|e| matches!(
            e,
            AgentEvent::SubAgent { path, .. } if path.to_string() == "sampling#call_1"
        )),
        "{events:#?}"
    );
}

#[tokio::test]
async fn sampling_over_the_runs_budget_or_without_a_model_is_refused() {
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let sampler = ScriptedClient::new([]);
    let connection = connect(
        McpServer::http("docs", url.clone())
            .only(["summarize"])
            .sampling(Sampling::new(sampler.clone())),
    )
    .await;
    // The first call (its prompt, with the one tool, well under 300 tokens; at most 1
    // generated) fits a budget of 330, and spends 320 + 5: 5 are left, less than the
    // sampling request's prompt.
    let model = ScriptedClient::new([
        ScriptedResponse::tool_call(
            "call_1",
            "summarize",
            json!({"text": "Cats sleep most of the day and hunt at dusk.", "max_tokens": 50}),
        )
        .usage_tokens(320, 5),
        ScriptedResponse::text("Done."),
    ]);
    let mut budgeted = Agent::builder(model.clone())
        .tool_source(connection.clone())
        .settings(RequestSettings::new().max_tokens(1))
        .policy(RunPolicy::new().token_budget(330))
        .build()
        .unwrap();
    let (events, _) = run(budgeted.run("Summarize.")).await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(is_error, "{content}");
    assert!(
        content.contains("the run's token budget has 5 tokens left, and this request's prompt alone is about 28 tokens"),
        "{content}"
    );
    assert!(
        sampler.requests().is_empty(),
        "the host's model was not called"
    );

    // No sampling model: the capability is not declared and the request refused.
    let without = connect(McpServer::http("docs", url)).await;
    let (events, _) = run(agent(&summarize_model(50), &without).run("Summarize.")).await;
    let (content, is_error) = result_of(&events, "call_1");
    assert!(is_error, "{content}");
    assert!(content.contains("its host gave it no model"), "{content}");
}

#[tokio::test]
async fn a_question_asked_outside_an_agent_run_is_declined_at_once() {
    use agent_loop::tool::{ExecOptions, ToolCall};
    use agent_loop::ToolRegistry;
    let Some(python) = python() else { return };
    let (_server, url) = http_server(&python).await;
    let connection =
        connect(McpServer::http("bookings", url).elicitation(Elicitation::new())).await;
    // A bare registry has no run to pause and no host to ask.
    let mut registry = ToolRegistry::new();
    connection.register(&mut registry).unwrap();
    let result = registry
        .execute_one(
            ToolCall::new("c1", "book_table", json!({"date": "Friday"})),
            &ExecOptions::default(),
        )
        .await;
    assert!(!result.is_error, "{}", result.content);
    assert_eq!(
        received(&result.content, "booking"),
        json!({"action": "decline", "content": null})
    );
}
