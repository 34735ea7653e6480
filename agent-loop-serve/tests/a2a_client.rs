//! The A2A client (`a2a::client::RemoteAgent`): a remote A2A agent as a tool of an agent-loop
//! agent, against this crate's own A2A server and against a server written with the official
//! Python `a2a-sdk` (tests/py/a2a_server.py).

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_loop::agent::{Resolution, Resolutions, RunPolicy, WaitsFor};
use agent_loop::error::ApiError;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentBuilder, AgentEvent, LlmError, PausedRun, Termination, ToolError};
use agent_loop_serve::a2a::client::{ConnectError, RemoteAgent};
use agent_loop_serve::a2a::{router, AgentCard};
use agent_loop_serve::AgentService;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// A request the served A2A server received: its JSON-RPC method (or its path, for a GET)
/// and its headers.
#[derive(Debug)]
struct Seen {
    method: String,
    headers: HeaderMap,
}

/// Records each request once it is answered (for `CancelTask`, once the task is cancelled).
async fn record(
    State(seen): State<mpsc::UnboundedSender<Seen>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let method = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["method"].as_str().map(str::to_owned))
        .unwrap_or_else(|| parts.uri.path().to_owned());
    let headers = parts.headers.clone();
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let _ = seen.send(Seen { method, headers });
    response
}

/// Serves `service` over A2A on a loopback port, its card naming it "adder"; gives its base
/// URL and the requests it receives.
async fn served(service: AgentService) -> (String, mpsc::UnboundedReceiver<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = AgentCard::new("adder", "Adds numbers.", &url);
    let (tx, rx) = mpsc::unbounded_channel();
    let app = router(&service, card).layer(axum::middleware::from_fn_with_state(tx, record));
    // With the peer's address: a service with no authenticator serves loopback peers only.
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

/// Waits for the served server to have answered a request of `method`.
async fn answered(seen: &mut mpsc::UnboundedReceiver<Seen>, method: &str) -> Seen {
    loop {
        let next = seen.recv().await.expect("the server is up");
        if next.method == method {
            return next;
        }
    }
}

/// The served adder: one model for every request of the service (a resumed run asks it for
/// its next response), calling `add` then answering.
fn adder(policy: RunPolicy) -> impl Fn() -> AgentBuilder + Send + Sync {
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("2 + 3 = 5"),
    ]));
    move || {
        Agent::builder(model.clone())
            .tool(common::add_tool())
            .policy(policy.clone())
    }
}

/// The lead agent's model: calls the remote tool `tool` with `task`, then answers `answer`.
fn lead_model(tool: &str, task: &str, answer: &str) -> Arc<ScriptedClient> {
    Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("o1", tool, json!({ "task": task })),
        ScriptedResponse::text(answer),
    ]))
}

/// Every event of a run, and its outcome's termination and final text.
async fn collect(
    events: impl futures::Stream<Item = AgentEvent>,
) -> (Vec<AgentEvent>, Termination, String) {
    let events: Vec<AgentEvent> = events.collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("a run ends with Finished: {events:?}");
    };
    let (termination, text) = (outcome.termination.clone(), outcome.final_text.clone());
    (events, termination, text)
}

/// The result of call `id` in the events: its content and whether it is an error.
fn result_of(events: &[AgentEvent], id: &str) -> Option<(String, bool)> {
    events.iter().find_map(|e| match e {
        AgentEvent::ToolResult {
            id: i,
            content,
            is_error,
            ..
        } if i == id => Some((content.clone(), *is_error)),
        _ => None,
    })
}

/// The progress notes of call `id`.
fn progress_of(events: &[AgentEvent], id: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { id: i, message } if i == id => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// A JSON-RPC call to the served A2A endpoint, by hand (to check what the remote side holds).
async fn rpc(url: &str, method: &str, params: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The remote task id a progress note names (`task {id}: {state}`).
fn task_id(note: &str) -> &str {
    note.strip_prefix("task ")
        .and_then(|rest| rest.split(": ").next())
        .expect("a note `task {id}: {state}`")
}

/// The events reported under `path` (`{name}#{call id}`), in order.
fn nested(events: &[AgentEvent], path: &str) -> Vec<AgentEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::SubAgent { path: p, event } if p.to_string() == path => {
                Some((**event).clone())
            }
            _ => None,
        })
        .collect()
}

/// The text of the `TextDelta`s (or `ThinkingDelta`s) of nested events.
fn deltas(events: &[AgentEvent], thinking: bool) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta { text } if !thinking => Some(text.as_str()),
            AgentEvent::ThinkingDelta { text } if thinking => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Where each event of `path` sits between the call's `ToolCall` and `ToolResult`.
fn inside_the_call(events: &[AgentEvent], id: &str, path: &str) -> bool {
    let at = |f: &dyn Fn(&AgentEvent) -> bool| events.iter().position(f);
    let call = at(&|e| matches!(e, AgentEvent::ToolCall { id: i, .. } if i == id));
    let result = at(&|e| matches!(e, AgentEvent::ToolResult { id: i, .. } if i == id))
        .unwrap_or(events.len());
    let Some(call) = call else {
        // A resumed run: the call was announced before the pause.
        return true;
    };
    events.iter().enumerate().all(|(i, e)| match e {
        AgentEvent::SubAgent { path: p, .. } if p.to_string() == path => call < i && i < result,
        _ => true,
    })
}

/// The paused run an outcome ends with.
fn paused(termination: Termination) -> Box<PausedRun> {
    match termination {
        Termination::Paused(paused) => paused,
        other => panic!("the run did not pause: {other:?}"),
    }
}

#[tokio::test]
async fn the_card_names_the_tool_and_lists_its_skills() {
    let (url, _seen) = served(AgentService::new(adder(RunPolicy::new()))).await;
    let remote = RemoteAgent::connect(&url).await.unwrap();
    use agent_loop::Tool;
    assert_eq!(remote.name(), "adder");
    assert!(remote.description().starts_with("Adds numbers."));
    assert!(
        remote.description().contains("- adder: Adds numbers."),
        "{}",
        remote.description()
    );
    assert_eq!(remote.card().endpoint, format!("{url}/a2a"));
    assert!(remote.card().streaming);
    assert_eq!(remote.input_schema()["required"], json!(["task"]));

    // The card's own URL works too, and the name can be chosen.
    let named = RemoteAgent::builder(format!("{url}/.well-known/agent-card.json"))
        .name("math_helper")
        .description("Does sums.")
        .connect()
        .await
        .unwrap();
    assert_eq!(named.name(), "math_helper");
    assert_eq!(named.description(), "Does sums.");
}

#[tokio::test]
async fn a_lead_agent_calls_the_served_agent_and_gets_its_answer() {
    let (url, _seen) = served(AgentService::new(adder(RunPolicy::new()))).await;
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let model = lead_model("adder", "Add 2 and 3.", "The adder says 5.");
    let mut lead = Agent::builder(model.clone()).tool(remote).build().unwrap();
    let (events, termination, text) = collect(lead.run("What is 2 + 3?")).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(text, "The adder says 5.");
    assert_eq!(
        result_of(&events, "o1"),
        Some(("2 + 3 = 5".to_owned(), false))
    );
    let notes = progress_of(&events, "o1");
    assert!(
        notes.last().is_some_and(|n| n.ends_with(": completed")),
        "{notes:?}"
    );
    // The remote task's progress, as a nested run under the call.
    let remote = nested(&events, "adder#o1");
    assert_eq!(remote.first(), Some(&AgentEvent::TurnStart { turn: 1 }));
    assert_eq!(deltas(&remote, false), "2 + 3 = 5");
    assert!(matches!(
        remote[remote.len() - 2],
        AgentEvent::TurnEnd { turn: 1, .. }
    ));
    let Some(AgentEvent::Finished(outcome)) = remote.last() else {
        panic!("the nested run finishes: {remote:?}");
    };
    assert!(matches!(outcome.termination, Termination::Completed));
    assert_eq!(outcome.final_text, "2 + 3 = 5");
    assert!(inside_the_call(&events, "o1", "adder#o1"));
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        unreachable!()
    };
    assert_eq!(outcome.sub_agents.len(), 1);
    assert_eq!(outcome.sub_agents[0].path.to_string(), "adder#o1");
}

#[tokio::test]
async fn a_remote_question_pauses_our_run_and_a_fresh_agent_answers_it() {
    let (url, _seen) = served(AgentService::new(adder(
        RunPolicy::new().require_approval("add"),
    )))
    .await;
    // One model for the lead's two runs (the second asks it for its next response).
    let model = lead_model("adder", "Add 2 and 3.", "The adder says 5.");
    let saved = {
        let remote = RemoteAgent::connect(&url).await.unwrap();
        let mut lead = Agent::builder(model.clone()).tool(remote).build().unwrap();
        let (events, termination, _) = collect(lead.run("What is 2 + 3?")).await;
        let paused = paused(termination);
        let pending = paused.pending();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, "o1");
        assert_eq!(pending[0].waits_for, WaitsFor::Answer);
        let question = pending[0].question.as_ref().unwrap();
        // The remote's own words: the served agent's call waits for a verdict.
        assert!(
            question.prompt.contains("add") && question.prompt.contains("call_1"),
            "{}",
            question.prompt
        );
        assert_eq!(question.data["state"], "input-required");
        let task = question.data["task_id"].as_str().unwrap().to_owned();
        let got = rpc(&url, "GetTask", json!({ "id": task })).await;
        assert_eq!(
            got["result"]["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
        // The nested run stays open (no TurnEnd, no Finished), as a paused run does.
        let remote = nested(&events, "adder#o1");
        assert_eq!(remote.first(), Some(&AgentEvent::TurnStart { turn: 1 }));
        assert!(deltas(&remote, true).contains("waits for a verdict"));
        assert!(!remote
            .iter()
            .any(|e| matches!(e, AgentEvent::TurnEnd { .. } | AgentEvent::Finished(_))));
        // Another process: only the serialized pause goes there.
        serde_json::to_string(&*paused).unwrap()
    };

    let paused: PausedRun = serde_json::from_str(&saved).unwrap();
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let mut fresh = Agent::builder(model.clone()).tool(remote).build().unwrap();
    let waiting = &paused.pending()[0];
    let answer = Resolutions::new().for_call(
        waiting,
        Resolution::Result {
            content: "approve".to_owned(),
            is_error: false,
        },
    );
    let (events, termination, text) = collect(fresh.resume(&paused, answer)).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(text, "The adder says 5.");
    assert_eq!(
        result_of(&events, "o1"),
        Some(("2 + 3 = 5".to_owned(), false))
    );
    // The nested run goes on where it paused (no TurnStart) and finishes.
    let remote = nested(&events, "adder#o1");
    assert!(!remote
        .iter()
        .any(|e| matches!(e, AgentEvent::TurnStart { .. })));
    assert_eq!(deltas(&remote, false), "2 + 3 = 5");
    assert!(matches!(
        remote.last(),
        Some(AgentEvent::Finished(outcome)) if matches!(outcome.termination, Termination::Completed)
    ));
    assert!(inside_the_call(&events, "o1", "adder#o1"));
    let task = waiting.question.as_ref().unwrap().data["task_id"].clone();
    let got = rpc(&url, "GetTask", json!({ "id": task })).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
}

/// A served agent whose tool asks ([`ToolError::ask`]): its question is the task's
/// `input-required` text, so the lead's pause shows it, and the lead's answer reaches the
/// served tool's re-run.
#[tokio::test]
async fn a_served_tools_question_crosses_a2a_into_our_pause_and_its_answer_comes_back() {
    use agent_loop::tool::Question;
    let booker = || {
        FnTool::new(
            "book",
            "Books a table.",
            |_: Value, ctx: agent_loop::ToolContext| async move {
                match ctx.reply().map(|r| &r.resolution) {
                    None => Err(ToolError::ask(Question::new("For how many people?"))),
                    Some(Resolution::Result { content, .. }) => Ok(format!("booked for {content}")),
                    Some(other) => Err(ToolError::new(format!("not booked: {other:?}"))),
                }
            },
        )
    };
    let served_model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "book", json!({})),
        ScriptedResponse::text("Booked for 4."),
    ]));
    let (url, _seen) = served(AgentService::new(move || {
        Agent::builder(served_model.clone()).tool(booker())
    }))
    .await;
    let model = lead_model("adder", "Book a table.", "The table is booked.");
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let mut lead = Agent::builder(model.clone()).tool(remote).build().unwrap();
    let (_, termination, _) = collect(lead.run("Book a table")).await;
    let paused = paused(termination);
    let waiting = &paused.pending()[0];
    let prompt = &waiting.question.as_ref().unwrap().prompt;
    assert!(prompt.contains("For how many people?"), "{prompt}");

    let answer = Resolutions::new().for_call(
        waiting,
        Resolution::Result {
            content: "4".to_owned(),
            is_error: false,
        },
    );
    let (events, termination, text) = collect(lead.resume(&paused, answer)).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(text, "The table is booked.");
    assert_eq!(
        result_of(&events, "o1"),
        Some(("Booked for 4.".to_owned(), false))
    );
}

#[tokio::test]
async fn an_approval_of_a_remote_question_is_sent_as_approved() {
    let (url, mut seen) = served(AgentService::new(adder(
        RunPolicy::new().require_approval("add"),
    )))
    .await;
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let model = lead_model("adder", "Add 2 and 3.", "The adder says 5.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (_, termination, _) = collect(lead.run("What is 2 + 3?")).await;
    let paused = paused(termination);
    let (events, termination, _) =
        collect(lead.resume(&paused, Resolutions::new().approve("o1"))).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(
        result_of(&events, "o1"),
        Some(("2 + 3 = 5".to_owned(), false))
    );
    // Both messages were streamed: the task, then the approval.
    answered(&mut seen, "SendStreamingMessage").await;
    answered(&mut seen, "SendStreamingMessage").await;
}

#[tokio::test]
async fn a_denied_remote_question_cancels_the_remote_task() {
    let (url, _seen) = served(AgentService::new(adder(
        RunPolicy::new().require_approval("add"),
    )))
    .await;
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let model = lead_model("adder", "Add 2 and 3.", "The adder was stopped.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (_, termination, _) = collect(lead.run("What is 2 + 3?")).await;
    let paused = paused(termination);
    let task = paused.pending()[0].question.as_ref().unwrap().data["task_id"].clone();
    let (events, termination, text) =
        collect(lead.resume(&paused, Resolutions::new().deny("o1", "not today"))).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(text, "The adder was stopped.");
    assert_eq!(
        result_of(&events, "o1"),
        Some(("denied: not today".to_owned(), true))
    );
    // The task was cancelled before the call answered.
    let got = rpc(&url, "GetTask", json!({ "id": task })).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{got}"
    );
    let remote = nested(&events, "adder#o1");
    assert!(matches!(
        remote.last(),
        Some(AgentEvent::Finished(outcome)) if matches!(outcome.termination, Termination::Cancelled)
    ));
}

#[tokio::test]
async fn a_long_answer_is_cut_at_the_limit_and_says_so() {
    let (url, _seen) = served(AgentService::new(adder(RunPolicy::new()))).await;
    let remote = RemoteAgent::builder(&url)
        .max_answer_bytes(5)
        .connect()
        .await
        .unwrap();
    let model = lead_model("adder", "Add 2 and 3.", "Cut.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, _, _) = collect(lead.run("What is 2 + 3?")).await;
    assert_eq!(
        result_of(&events, "o1"),
        Some((
            "2 + 3\n[… the remote agent's answer was cut at 5 bytes]".to_owned(),
            false
        ))
    );
}

#[tokio::test]
async fn a_failed_remote_task_is_an_error_result_saying_why() {
    let (url, _seen) = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([ScriptedResponse::error(
            LlmError::Api(Box::new(ApiError::new(401, "bad key for the model"))),
        )]))
    }))
    .await;
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let model = lead_model("adder", "Add 2 and 3.", "It failed.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, _, _) = collect(lead.run("What is 2 + 3?")).await;
    let (content, is_error) = result_of(&events, "o1").unwrap();
    assert!(is_error);
    assert!(
        content.contains("\"adder\" failed") && content.contains("bad key for the model"),
        "{content}"
    );
}

#[tokio::test]
async fn our_cancel_cancels_the_remote_task() {
    let (url, mut seen) = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("thinking…").then_stall()
        ]))
    }))
    .await;
    let remote = RemoteAgent::connect(&url).await.unwrap();
    let model = lead_model("adder", "Think forever.", "unused");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let handle = lead.handle();
    let mut run = Box::pin(lead.run("Go."));
    let mut task = None;
    let mut last = None;
    while let Some(event) = run.next().await {
        if let AgentEvent::ToolProgress { message, .. } = &event {
            if message.ends_with(": working") && task.is_none() {
                task = Some(task_id(message).to_owned());
                handle.cancel();
            }
        }
        last = Some(event);
    }
    let Some(AgentEvent::Finished(outcome)) = last else {
        panic!("no Finished");
    };
    assert!(matches!(outcome.termination, Termination::Cancelled));
    let task = task.expect("the remote task was reported");
    answered(&mut seen, "CancelTask").await;
    let got = rpc(&url, "GetTask", json!({"id": task})).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{got}"
    );
}

#[tokio::test]
async fn a_call_past_its_timeout_cancels_the_remote_task() {
    let (url, mut seen) = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("thinking…").then_stall()
        ]))
    }))
    .await;
    // The remote never finishes: the call always times out, however fast the machine.
    let remote = RemoteAgent::builder(&url)
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let model = lead_model("adder", "Think forever.", "It took too long.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, termination, _) = collect(lead.run("Go.")).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    let (content, is_error) = result_of(&events, "o1").unwrap();
    assert!(is_error && content.contains("timed out"), "{content}");
    let notes = progress_of(&events, "o1");
    let task = task_id(notes.first().expect("a progress note")).to_owned();
    answered(&mut seen, "CancelTask").await;
    let got = rpc(&url, "GetTask", json!({"id": task})).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{got}"
    );
}

#[tokio::test]
async fn the_token_and_headers_go_with_every_request() {
    let (url, mut seen) = served(AgentService::new(adder(RunPolicy::new()))).await;
    let remote = RemoteAgent::builder(&url)
        .bearer_token("s3cret")
        .header("x-tenant", "acme")
        .connect()
        .await
        .unwrap();
    assert!(!format!("{remote:?}").contains("s3cret"));
    let card = answered(&mut seen, "/.well-known/agent-card.json").await;
    assert_eq!(card.headers["authorization"], "Bearer s3cret");
    assert_eq!(card.headers["x-tenant"], "acme");
    let model = lead_model("adder", "Add 2 and 3.", "5.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, _, _) = collect(lead.run("What is 2 + 3?")).await;
    assert_eq!(
        result_of(&events, "o1"),
        Some(("2 + 3 = 5".to_owned(), false))
    );
    let send = answered(&mut seen, "SendStreamingMessage").await;
    assert_eq!(send.headers["authorization"], "Bearer s3cret");
    assert_eq!(send.headers["x-tenant"], "acme");
    assert_eq!(send.headers["a2a-version"], "1.0");
}

#[tokio::test]
async fn connect_errors_say_what_is_wrong() {
    // Nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let error = RemoteAgent::connect(&closed).await.unwrap_err();
    assert!(matches!(error, ConnectError::Fetch { .. }), "{error}");

    // A card with no A2A 1.x JSON-RPC interface, a card that is no card, a 404.
    let app = axum::Router::new()
        .route(
            "/grpc/.well-known/agent-card.json",
            axum::routing::get(|| async {
                axum::Json(json!({"name": "g", "supportedInterfaces": [
                    {"url": "http://h", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]}))
            }),
        )
        .route(
            "/junk/.well-known/agent-card.json",
            axum::routing::get(|| async { "<html>" }),
        );
    let base = common::serve(app).await;
    let error = RemoteAgent::connect(format!("{base}/grpc"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ConnectError::InvalidCard { message, .. } if message.contains("GRPC 1.0")),
        "{error}"
    );
    let error = RemoteAgent::connect(format!("{base}/junk"))
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::InvalidCard { .. }), "{error}");
    let error = RemoteAgent::connect(format!("{base}/none"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("404"), "{error}");

    let (url, _seen) = served(AgentService::new(adder(RunPolicy::new()))).await;
    let error = RemoteAgent::builder(&url)
        .name("not a tool name")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::InvalidOption(_)), "{error}");
    let error = RemoteAgent::connect("not a url").await.unwrap_err();
    assert!(matches!(error, ConnectError::InvalidOption(_)), "{error}");
}

/// The Python A2A server of tests/py/a2a_server.py in `mode`, on a loopback port: its URL,
/// and the lines it prints after (`{"canceled": task_id}` when it cancels a task). Killed
/// when dropped.
struct PythonServer {
    url: String,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    _child: tokio::process::Child,
}

async fn python_server(mode: &str) -> Option<PythonServer> {
    let python = common::python("uvicorn, a2a.server.routes")?;
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut child = tokio::process::Command::new(python)
        .arg(root.join("tests/py/a2a_server.py"))
        .arg(mode)
        .current_dir(&root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = lines
        .next_line()
        .await
        .unwrap()
        .expect("tests/py/a2a_server.py prints its URL (see its standard error above)");
    let url = serde_json::from_str::<Value>(&first).unwrap()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    Some(PythonServer {
        url,
        lines,
        _child: child,
    })
}

#[tokio::test]
async fn the_python_sdk_server_streams_its_answer_to_the_tool() {
    let Some(server) = python_server("answer").await else {
        return;
    };
    let remote = RemoteAgent::connect(&server.url).await.unwrap();
    use agent_loop::Tool;
    assert_eq!(remote.name(), "Weather_Oracle_python");
    assert!(
        remote
            .description()
            .contains("- Forecast: Tells tomorrow's weather.")
            && remote.description().contains("- Climate:"),
        "{}",
        remote.description()
    );
    let model = lead_model(remote.name(), "The answer?", "It is 42.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, termination, text) = collect(lead.run("Ask the oracle.")).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(text, "It is 42.");
    // Two chunks, the second appended: one answer.
    assert_eq!(
        result_of(&events, "o1"),
        Some(("The answer is 42.".to_owned(), false))
    );
    let remote = nested(&events, "Weather_Oracle_python#o1");
    assert_eq!(deltas(&remote, true), "Looking up: The answer?\n");
    assert_eq!(deltas(&remote, false), "The answer is 42.");
    assert!(inside_the_call(&events, "o1", "Weather_Oracle_python#o1"));
}

#[tokio::test]
async fn a_python_sdk_server_that_cannot_stream_is_sent_the_message_whole() {
    let Some(server) = python_server("nostream").await else {
        return;
    };
    let remote = RemoteAgent::connect(&server.url).await.unwrap();
    assert!(!remote.card().streaming);
    let model = lead_model("Weather_Oracle_python", "The answer?", "It is 42.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, _, _) = collect(lead.run("Ask the oracle.")).await;
    assert_eq!(
        result_of(&events, "o1"),
        Some(("The answer is 42.".to_owned(), false))
    );
}

#[tokio::test]
async fn our_cancel_cancels_the_python_sdk_servers_task() {
    let Some(mut server) = python_server("slow").await else {
        return;
    };
    let remote = RemoteAgent::connect(&server.url).await.unwrap();
    let model = lead_model("Weather_Oracle_python", "Work.", "unused");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let handle = lead.handle();
    let task = Arc::new(Mutex::new(None));
    let (_, termination, _) = collect(lead.run("Go.").inspect(|event| {
        if let AgentEvent::ToolProgress { message, .. } = event {
            if message.ends_with(": working") {
                *task.lock().unwrap() = Some(task_id(message).to_owned());
                handle.cancel();
            }
        }
    }))
    .await;
    assert!(matches!(termination, Termination::Cancelled));
    let task = task.lock().unwrap().clone().expect("the task was reported");
    let line = server.lines.next_line().await.unwrap().expect("a line");
    assert_eq!(
        serde_json::from_str::<Value>(&line).unwrap(),
        json!({ "canceled": task })
    );
}

#[tokio::test]
async fn the_python_sdk_servers_question_pauses_our_run_and_the_answer_resumes_it() {
    let Some(server) = python_server("ask").await else {
        return;
    };
    let model = lead_model(
        "Weather_Oracle_python",
        "Weather tomorrow?",
        "Sunny, it says.",
    );
    let saved = {
        let remote = RemoteAgent::connect(&server.url).await.unwrap();
        let mut lead = Agent::builder(model.clone()).tool(remote).build().unwrap();
        let (_, termination, _) = collect(lead.run("Ask the oracle.")).await;
        let paused = paused(termination);
        let question = paused.pending()[0].question.clone().unwrap();
        assert_eq!(question.prompt, "Which city?");
        assert_eq!(question.data["state"], "input-required");
        serde_json::to_string(&*paused).unwrap()
    };
    let paused: PausedRun = serde_json::from_str(&saved).unwrap();
    let remote = RemoteAgent::connect(&server.url).await.unwrap();
    let mut fresh = Agent::builder(model).tool(remote).build().unwrap();
    let answer = Resolutions::new().for_call(
        &paused.pending()[0],
        Resolution::Result {
            content: "Paris".to_owned(),
            is_error: false,
        },
    );
    let (events, termination, text) = collect(fresh.resume(&paused, answer)).await;
    assert!(
        matches!(termination, Termination::Completed),
        "{termination:?}"
    );
    assert_eq!(text, "Sunny, it says.");
    assert_eq!(
        result_of(&events, "o1"),
        Some(("Sunny in Paris.".to_owned(), false))
    );
    let remote = nested(&events, "Weather_Oracle_python#o1");
    assert_eq!(deltas(&remote, false), "Sunny in Paris.");
}

#[tokio::test]
async fn the_python_sdk_servers_auth_request_is_a_question_too() {
    let Some(server) = python_server("auth").await else {
        return;
    };
    let remote = RemoteAgent::connect(&server.url).await.unwrap();
    let model = lead_model("Weather_Oracle_python", "Weather?", "Signed in.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (_, termination, _) = collect(lead.run("Ask the oracle.")).await;
    let paused = paused(termination);
    let question = paused.pending()[0].question.clone().unwrap();
    assert_eq!(
        question.prompt,
        "The remote agent \"Weather Oracle (python)\" asks for authorization: Sign in at \
         https://example.com/login."
    );
    assert_eq!(question.data["state"], "auth-required");
    let answer = Resolutions::new().result("o1", "token-123");
    let (events, _, _) = collect(lead.resume(&paused, answer)).await;
    assert_eq!(
        result_of(&events, "o1"),
        Some(("Signed in with token-123.".to_owned(), false))
    );
}

#[tokio::test]
async fn a_task_the_python_sdk_server_rejects_is_an_error_result() {
    let Some(server) = python_server("reject").await else {
        return;
    };
    let remote = RemoteAgent::connect(&server.url).await.unwrap();
    let model = lead_model("Weather_Oracle_python", "Sing.", "It will not sing.");
    let mut lead = Agent::builder(model).tool(remote).build().unwrap();
    let (events, _, _) = collect(lead.run("Ask the oracle to sing.")).await;
    assert_eq!(
        result_of(&events, "o1"),
        Some((
            "the remote agent \"Weather Oracle (python)\" rejected the task: I only do weather."
                .to_owned(),
            true
        ))
    );
    let remote = nested(&events, "Weather_Oracle_python#o1");
    assert!(matches!(
        remote.last(),
        Some(AgentEvent::Finished(outcome)) if matches!(outcome.termination, Termination::Refused)
    ));
}
