//! A host touching a durable run while it goes: steering (`AgentSession/{id}/steer`) and
//! stopping after the turn (`AgentSession/{id}/stopAfterTurn`), against a real
//! restate-server, each compared with the in-process (tokio) driver on the same script: the
//! same events where the words land, the same history, the same termination and the same
//! words handed back. The worker runs in the test process, so a tool can hold until the test
//! has spoken (no timing).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, AnthropicClient, Termination, ToolError, ToolRegistry};
use agent_loop_restate::replay::RecordedRun;
use agent_loop_restate::DurableAgent;
use common::*;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

/// A tool call of label `hold` says it started, then waits until the test releases it.
#[derive(Clone)]
struct Gate {
    started: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

fn gate() -> (Gate, mpsc::UnboundedReceiver<()>) {
    let (started, rx) = mpsc::unbounded_channel();
    (
        Gate {
            started,
            release: Arc::new(Semaphore::new(0)),
        },
        rx,
    )
}

fn tools(gate: Gate) -> ToolRegistry {
    let step = FnTool::new(
        "step",
        "Does one labelled step.",
        move |input: Value, _ctx| {
            let gate = gate.clone();
            async move {
                let label = input["label"].as_str().unwrap_or("?").to_owned();
                if label == "hold" {
                    let _ = gate.started.send(());
                    gate.release
                        .acquire()
                        .await
                        .map_err(|e| ToolError::new(e.to_string()))?
                        .forget();
                }
                Ok::<_, ToolError>(format!("did {label}"))
            }
        },
    );
    ToolRegistry::new().with(step).expect("tools")
}

fn mock_client(mock: &MockServer) -> AnthropicClient {
    AnthropicClient::new("mock-key")
        .base_url(mock.anthropic_base_url())
        .model("claude-mock")
}

/// The server, and `agent` served in this process and registered.
async fn setup(test: &str, agent: DurableAgent) -> Option<Restate> {
    let restate = restate_or_skip(test)?;
    restate.ready().await;
    let agent = agent.journal_retention(Duration::from_secs(3600));
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    tokio::spawn(agent_loop_restate::serve(agent, addr));
    wait_until("the worker listens", || async {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
    let registered = restate
        .register_uri(&format!("http://127.0.0.1:{port}"))
        .await;
    assert!(registered.status().is_success(), "{registered:?}");
    Some(restate)
}

/// Every progress event of `session`.
async fn all_events(restate: &Restate, session: &str) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let (_, page) = restate
            .call(session, "eventsSince", Some(json!(events.len())))
            .await;
        let page = page.as_array().cloned().unwrap_or_default();
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// The kinds of events both drivers report the same way (text is a delta in-process and a
/// block in the progress log), as the progress log names them.
fn kinds_of_progress(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|k| *k != "text")
        .map(str::to_owned)
        .collect()
}

fn kinds_in_process(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            Some(match e {
                AgentEvent::TurnStart { .. } => "turn_start",
                AgentEvent::ToolCall { .. } => "tool_call",
                AgentEvent::ToolResult { .. } => "tool_result",
                AgentEvent::Steered { .. } => "steered",
                AgentEvent::TurnEnd { .. } => "turn_end",
                AgentEvent::Finished(_) => "finished",
                _ => return None,
            })
        })
        .map(str::to_owned)
        .collect()
}

/// What the host does once the held tool has started.
#[derive(Clone, Copy)]
enum Act {
    Steer,
    StopAndSteer,
}

const WORDS: [&str; 2] = ["Also say hi.", "And be brief."];

/// The in-process run of the same script: `act` once the held tool started, then release it.
async fn in_process(script: Vec<ScriptedResponse>, act: Act) -> (Vec<AgentEvent>, Value) {
    let mock = MockServer::start().await;
    for response in script {
        mock.push(response);
    }
    let (gate, mut started) = gate();
    let release = gate.release.clone();
    let mut agent = Agent::builder(mock_client(&mock))
        .tools(tools(gate))
        .build()
        .expect("agent");
    let handle = agent.handle();
    let host = tokio::spawn(async move {
        started.recv().await.expect("the tool started");
        if matches!(act, Act::StopAndSteer) {
            handle.stop_after_turn();
        }
        for words in WORDS {
            handle.steer(words);
        }
        release.add_permits(1);
    });
    let events: Vec<AgentEvent> = agent.run("Do the step.").collect().await;
    host.await.expect("host");
    let messages = serde_json::to_value(agent.messages().as_slice()).expect("json");
    (events, messages)
}

fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::tool_call("c1", "step", json!({"label": "hold"})),
        ScriptedResponse::text("Done, and hi."),
    ]
}

/// A durable run of the script on a fresh server: `act` through the ingress once the held
/// tool started. Gives the report, the progress events, the conversation and the server.
async fn durable(test: &str, act: Act) -> Option<(Value, Vec<Value>, Value, Restate, MockServer)> {
    let mock = MockServer::start().await;
    let (gate, mut started) = gate();
    let release = gate.release.clone();
    let restate = setup(test, DurableAgent::new(mock_client(&mock), tools(gate))).await?;
    for response in script() {
        mock.push(response);
    }
    let run = restate.run_raw("s1", "Do the step.");
    started.recv().await.expect("the tool started");
    if matches!(act, Act::StopAndSteer) {
        let (status, body) = restate.call("s1", "stopAfterTurn", None).await;
        assert_eq!(status, 200, "{body}");
    }
    for words in WORDS {
        let (status, body) = restate.call("s1", "steer", Some(json!(words))).await;
        assert_eq!(status, 200, "{body}");
    }
    release.add_permits(1);
    let (status, report) = run.await.expect("run");
    assert_eq!(status, 200, "{report}");
    let events = all_events(&restate, "s1").await;
    let (_, state) = restate.call("s1", "state", None).await;
    Some((
        report,
        events,
        state["conversation"]["messages"].clone(),
        restate,
        mock,
    ))
}

#[tokio::test]
async fn steering_mid_tool_lands_where_it_lands_in_process() {
    let Some((report, events, messages, restate, mock)) =
        durable("steering_mid_tool", Act::Steer).await
    else {
        return;
    };
    let (local_events, local_messages) = in_process(script(), Act::Steer).await;

    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["final_text"], "Done, and hi.", "{report}");
    assert!(report.get("undelivered").is_none(), "{report}");
    // After the batch's results and the turn's end, before the next turn: as in-process.
    let kinds = kinds_of_progress(&events);
    assert_eq!(
        kinds,
        [
            "turn_start",
            "tool_call",
            "tool_result",
            "turn_end",
            "steered",
            "steered",
            "turn_start",
            "turn_end",
            "finished"
        ]
    );
    assert_eq!(kinds, kinds_in_process(&local_events));
    let steered: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "steered")
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(steered, WORDS);
    // The same history: the words in the user message after the call's result.
    assert_eq!(messages, local_messages);
    let last_user = messages[2].to_string();
    assert!(last_user.contains("tool_result") && last_user.contains("Also say hi."));
    // The second model call heard them.
    let second = mock.requests()[1].body.to_string();
    assert!(second.contains("And be brief."), "{second}");

    // The inbox reads are in the journal: the run replays with no server, fed the same
    // words at the same points.
    let recorded = RecordedRun::fetch_last(&restate.admin, "s1")
        .await
        .expect("the journal");
    let (gate, _started) = gate();
    let replayed = recorded
        .replay(&DurableAgent::new(mock_client(&mock), tools(gate)))
        .await
        .expect("the same decisions");
    assert_eq!(replayed.final_text, "Done, and hi.");
}

#[tokio::test]
async fn stop_after_turn_ends_the_run_and_hands_back_what_it_did_not_deliver() {
    let Some((report, events, messages, _restate, mock)) =
        durable("stop_after_turn", Act::StopAndSteer).await
    else {
        return;
    };
    let (local_events, local_messages) = in_process(script(), Act::StopAndSteer).await;
    let Some(AgentEvent::Finished(outcome)) = local_events.last() else {
        panic!("{local_events:#?}");
    };
    assert_eq!(outcome.termination, Termination::StoppedAfterTurn);

    assert_eq!(report["completed"], false, "{report}");
    assert_eq!(
        report["termination"],
        Termination::StoppedAfterTurn.to_string(),
        "{report}"
    );
    // The turn finished (its tool ran, its result is in the history); no model call after.
    assert_eq!(mock.requests().len(), 1);
    assert_eq!(messages, local_messages);
    assert!(messages.to_string().contains("did hold"));
    // The words it never delivered come back, in order, as in-process.
    let local_undelivered: Vec<String> = outcome
        .undelivered
        .iter()
        .map(|i| i.clone().into_message().text())
        .collect();
    assert_eq!(local_undelivered, WORDS);
    assert_eq!(report["undelivered"], json!(WORDS), "{report}");
    assert_eq!(kinds_of_progress(&events), kinds_in_process(&local_events));
    assert!(!kinds_of_progress(&events).contains(&"steered".to_owned()));
}

/// Words sent while no run goes on wait for the next run, after its own input (as
/// in-process); a steer is refused when empty, too long, or aimed at a sub-agent's session.
#[tokio::test]
async fn steering_between_runs_waits_for_the_next_run() {
    let mock = MockServer::start().await;
    let (gate, _started) = gate();
    let Some(restate) = setup(
        "steering_between_runs",
        DurableAgent::new(mock_client(&mock), tools(gate.clone())),
    )
    .await
    else {
        return;
    };
    mock.push(ScriptedResponse::text("Hello."));
    let report = restate.run("s2", "Hi.").await.expect("run");
    assert_eq!(report["completed"], true, "{report}");
    let (status, body) = restate
        .call("s2", "steer", Some(json!("Later words.")))
        .await;
    assert_eq!(status, 200, "{body}");
    // Not delivered yet: the conversation is as the run left it.
    let (_, state) = restate.call("s2", "state", None).await;
    assert_eq!(
        state["conversation"]["messages"].as_array().map(Vec::len),
        Some(2)
    );
    mock.push(ScriptedResponse::text("Answer."));
    let report = restate.run("s2", "Next question.").await.expect("run");
    assert_eq!(report["completed"], true, "{report}");
    let (_, state) = restate.call("s2", "state", None).await;
    let messages = state["conversation"]["messages"].clone();

    // In-process: the same two runs, the words given between them.
    let local = MockServer::start().await;
    local.push(ScriptedResponse::text("Hello."));
    local.push(ScriptedResponse::text("Answer."));
    let mut agent = Agent::builder(mock_client(&local))
        .tools(tools(gate))
        .build()
        .expect("agent");
    let _: Vec<AgentEvent> = agent.run("Hi.").collect().await;
    agent.handle().steer("Later words.");
    let events: Vec<AgentEvent> = agent.run("Next question.").collect().await;
    assert!(matches!(events.first(), Some(AgentEvent::Steered { .. })));
    assert_eq!(
        messages,
        serde_json::to_value(agent.messages().as_slice()).expect("json")
    );
    let sent = mock.requests()[1].body.to_string();
    assert!(sent.contains("Next question.") && sent.contains("Later words."));
    let durable_events = all_events(&restate, "s2").await;
    let second_run: Vec<&str> = durable_events
        .iter()
        .skip_while(|e| e["type"] != "finished")
        .skip(1)
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(second_run.first(), Some(&"steered"), "{second_run:?}");

    // Refused: empty, too long, a sub-agent's session.
    let (status, _) = restate.call("s2", "steer", Some(json!("  "))).await;
    assert_eq!(status, 400);
    let long = "x".repeat(64 * 1024 + 1);
    let (status, _) = restate.call("s2", "steer", Some(json!(long))).await;
    assert_eq!(status, 413);
    let (status, _) = restate
        .call("s2%2Fc1", "steer", Some(json!("to the helper")))
        .await;
    assert_eq!(status, 400);
    // The inbox is the server's own: hosts cannot take from it.
    let response = restate
        .http
        .post(format!("{}/AgentInbox/s2/take", restate.ingress))
        .send()
        .await
        .expect("ingress");
    assert!(!response.status().is_success(), "{response:?}");
}

/// Holds the run's first model call (inside its journaled step) until the test releases it.
#[derive(Clone)]
struct HoldFirstCall {
    gate: Gate,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

#[agent_loop::async_trait]
impl agent_loop::agent::AgentHooks for HoldFirstCall {
    async fn before_model_call(
        &self,
        _request: &mut agent_loop::provider::ModelRequest,
        _turn: u32,
    ) -> agent_loop::agent::HookAction {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            let _ = self.gate.started.send(());
            if let Ok(permit) = self.gate.release.acquire().await {
                permit.forget();
            }
        }
        agent_loop::agent::HookAction::Continue
    }
}

/// Words a run took but never delivered, when Restate cancels it (no report to hand them
/// back in), go back to the session's inbox: the next run hears them, nothing is lost.
#[tokio::test]
async fn words_a_cancelled_run_took_wait_for_the_next_run() {
    let mock = MockServer::start().await;
    let (model_gate, mut model_started) = gate();
    let (tool_gate, mut tool_started) = gate();
    let model_release = model_gate.release.clone();
    let hooks = HoldFirstCall {
        gate: model_gate,
        calls: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    };
    let agent = DurableAgent::new(mock_client(&mock), tools(tool_gate.clone()))
        .configure(move |b| b.hooks(hooks.clone()));
    let Some(restate) = setup("cancelled_run_puts_back", agent).await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "hold"}),
    ));
    let run = restate.run_raw("s3", "Do the step.");
    // Said while the first model call goes: taken after it, held for the next turn.
    model_started.recv().await.expect("the model call started");
    let (status, body) = restate
        .call("s3", "steer", Some(json!("Keep these words.")))
        .await;
    assert_eq!(status, 200, "{body}");
    model_release.add_permits(1);
    tool_started.recv().await.expect("the tool started");
    let rows = restate
        .query("SELECT id FROM sys_invocation WHERE target = 'AgentSession/s3/run'")
        .await;
    let id = rows[0]["id"].as_str().expect("invocation id").to_owned();
    restate.cancel(&id).await;
    let (status, _) = run.await.expect("run task");
    assert_eq!(status, 409, "a cancelled run answers 409");
    tool_gate.release.add_permits(1);
    // The putting back is in the run's journal: a one-way call of the inbox's `putBack`
    // with the words (a cancelled run does not replay: its journal has the cancel's
    // signals, which the replay does not read).
    wait_until("the cancelled run is completed", || async {
        RecordedRun::fetch(&restate.admin, &id).await.is_ok()
    })
    .await;
    let recorded = RecordedRun::fetch(&restate.admin, &id)
        .await
        .expect("the journal");
    let put_back: Vec<&Value> = recorded
        .entries
        .iter()
        .filter_map(|e| e["Command"].get("OneWayCall"))
        .filter(|call| {
            call["request"]["invocation_target"]
                .to_string()
                .contains("putBack")
        })
        .collect();
    assert_eq!(put_back.len(), 1, "{:?}", recorded.entries);
    let parameter: Vec<u8> =
        serde_json::from_value(put_back[0]["request"]["parameter"].clone()).expect("bytes");
    assert_eq!(
        serde_json::from_slice::<Value>(&parameter).expect("json"),
        json!(["Keep these words."])
    );
    let (_, state) = restate.call("s3", "state", None).await;
    assert!(
        !state["conversation"]
            .to_string()
            .contains("Keep these words."),
        "{state}"
    );

    mock.push(ScriptedResponse::text("Heard."));
    let report = restate.run("s3", "Next.").await.expect("run");
    assert_eq!(report["completed"], true, "{report}");
    let sent = mock.requests().last().expect("a request").body.to_string();
    assert!(sent.contains("Keep these words."), "{sent}");
    let events = all_events(&restate, "s3").await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "steered" && e["text"] == "Keep these words."),
        "{events:?}"
    );
}
