//! Durability against the real restate-server: the worker is SIGKILLed mid-run and
//! restarted; the run completes with the same answer, and nothing completed is done twice.

mod common;

use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse, StreamPoint};
use common::*;
use serde_json::json;

/// The mock model, the server and one registered worker.
async fn setup(test: &str) -> Option<(Restate, MockServer, Worker, TempDir)> {
    let restate = restate_or_skip(test)?;
    restate.ready().await;
    let mock = MockServer::start().await;
    let tools = TempDir::new(test);
    let worker = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    let registered = restate.register(&worker).await;
    assert!(
        registered.status().is_success(),
        "registration failed: {registered:?}"
    );
    Some((restate, mock, worker, tools))
}

#[tokio::test]
async fn sigkill_mid_tool_reruns_only_that_tool_with_the_same_key() {
    let Some((restate, mock, mut worker, tools)) = setup("mid_tool").await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "a"}),
    ));
    mock.push(ScriptedResponse::text("All done."));
    hold(&tools.0, "a");
    let run = restate.run("s1", "Do step a.");

    wait_for_log(&tools.0, "start a s1/c1", 1).await;
    worker.kill();
    worker.restart().await;
    // The interrupted call runs again on the new worker, with the same idempotency key.
    wait_for_log(&tools.0, "start a s1/c1", 2).await;
    release(&tools.0, "a");

    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "All done.");
    assert_eq!(report["completed"], true);
    assert_eq!(report["turns"], 2);
    // The first model call completed before the crash: it was not sent again.
    assert_eq!(mock.requests().len(), 2);
    let log = tool_log(&tools.0);
    assert_eq!(count(&log, "start a s1/c1"), 2, "{log:?}");
    assert_eq!(count(&log, "done a s1/c1"), 1, "{log:?}");
    assert!(mock.history_violations().is_empty());
    // The model saw the tool's result once, in a valid history.
    let last = &mock.requests()[1];
    assert!(last.body.to_string().contains("did a"), "{}", last.body);
}

#[tokio::test]
async fn sigkill_between_two_parallel_tools_keeps_the_finished_one() {
    let Some((restate, mock, mut worker, tools)) = setup("parallel").await else {
        return;
    };
    mock.push(
        ScriptedResponse::tool_call("c1", "step", json!({"label": "a"})).then_tool_call(
            "c2",
            "step",
            json!({"label": "b"}),
        ),
    );
    mock.push(ScriptedResponse::text("Both done."));
    hold(&tools.0, "b");
    let run = restate.run("s2", "Do a and b.");

    // `a` finished and its result is journaled; `b` is still running.
    restate.wait_tool_completed("s2", "c1").await;
    wait_for_log(&tools.0, "start b s2/c2", 1).await;
    worker.kill();
    worker.restart().await;
    wait_for_log(&tools.0, "start b s2/c2", 2).await;
    release(&tools.0, "b");

    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "Both done.");
    assert_eq!(mock.requests().len(), 2);
    let log = tool_log(&tools.0);
    assert_eq!(count(&log, "start a s2/c1"), 1, "{log:?}");
    assert_eq!(count(&log, "done a s2/c1"), 1, "{log:?}");
    assert_eq!(count(&log, "start b s2/c2"), 2, "{log:?}");
    assert_eq!(count(&log, "done b s2/c2"), 1, "{log:?}");
    let body = mock.requests()[1].body.to_string();
    assert!(body.contains("did a") && body.contains("did b"), "{body}");
    assert!(mock.history_violations().is_empty());
}

#[tokio::test]
async fn sigkill_after_a_model_call_does_not_send_it_again() {
    let Some((restate, mock, mut worker, tools)) = setup("after_model").await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "a"}),
    ));
    // The second model call hangs mid-stream until the worker dies; its retry answers.
    mock.push(
        MockResponse::stream(ScriptedResponse::text("Finished."))
            .stall_at(StreamPoint::AfterFirstContent, None),
    );
    mock.push(ScriptedResponse::text("Finished."));
    let run = restate.run("s3", "Do step a.");

    wait_until("the second model call is in flight", || async {
        mock.requests().len() == 2
    })
    .await;
    worker.kill();
    worker.restart().await;

    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "Finished.");
    assert_eq!(report["completed"], true);
    // Call 1 (completed before the crash) once; call 2 (interrupted) twice; nothing more.
    assert_eq!(mock.requests().len(), 3);
    let log = tool_log(&tools.0);
    assert_eq!(count(&log, "start a s3/c1"), 1, "{log:?}");
    assert_eq!(count(&log, "done a s3/c1"), 1, "{log:?}");
    assert_eq!(mock.requests()[1].body, mock.requests()[2].body);
}

#[tokio::test]
async fn a_durable_approval_survives_a_worker_restart() {
    let Some((restate, mock, mut worker, tools)) = setup("approval").await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "d1",
        "deploy",
        json!({"label": "prod"}),
    ));
    mock.push(ScriptedResponse::text("Deployed."));
    let run = restate.run("s4", "Deploy to prod.");

    // A host follows along through the shared `state` handler while the run waits.
    wait_until("the run waits for approval", || async {
        let (_, state) = restate.call("s4", "state", None).await;
        state["status"]["status"] == "waiting_for_approval"
    })
    .await;
    let (_, state) = restate.call("s4", "state", None).await;
    assert_eq!(state["status"]["call_id"], "d1");
    worker.kill();
    worker.restart().await;
    assert!(
        tool_log(&tools.0).is_empty(),
        "the deploy ran before its approval"
    );

    let (status, body) = restate
        .call(
            "s4",
            "approve",
            Some(json!({"call_id": "d1", "allow": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "Deployed.");
    let log = tool_log(&tools.0);
    assert_eq!(count(&log, "done prod s4/d1"), 1, "{log:?}");
    assert_eq!(mock.requests().len(), 2);

    // The progress log tells the whole story, in order.
    let (_, events) = restate.call("s4", "eventsSince", Some(json!(0))).await;
    let kinds: Vec<&str> = events
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "turn_start",
            "approval_needed",
            "tool_call",
            "tool_result",
            "turn_end",
            "turn_start",
            "text",
            "turn_end",
            "finished"
        ]
    );
    // The answer's text, recorded once its model step is journaled.
    assert_eq!(events[6]["text"], "Deployed.", "{events}");
    let (_, later) = restate.call("s4", "eventsSince", Some(json!(7))).await;
    assert_eq!(later.as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn a_denied_approval_is_the_tool_result_and_an_unknown_call_is_refused() {
    let Some((restate, mock, _worker, tools)) = setup("deny").await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "d1",
        "deploy",
        json!({"label": "prod"}),
    ));
    mock.push(ScriptedResponse::text("Not deployed."));
    let run = restate.run("s5", "Deploy to prod.");
    wait_until("the run waits for approval", || async {
        let (_, state) = restate.call("s5", "state", None).await;
        state["status"]["status"] == "waiting_for_approval"
    })
    .await;
    let (status, _) = restate
        .call(
            "s5",
            "approve",
            Some(json!({"call_id": "nope", "allow": true})),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = restate
        .call(
            "s5",
            "approve",
            Some(json!({"call_id": "d1", "allow": false, "reason": "not on a Friday"})),
        )
        .await;
    assert_eq!(status, 200);
    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "Not deployed.");
    assert!(tool_log(&tools.0).is_empty());
    let body = mock.requests()[1].body.to_string();
    assert!(body.contains("not on a Friday"), "{body}");
}

#[tokio::test]
async fn a_non_retryable_error_ends_the_run_as_in_process() {
    let Some((restate, mock, _worker, _tools)) = setup("error").await else {
        return;
    };
    mock.push(MockResponse::status(400).error_message("bad request: no such model"));
    mock.push(MockResponse::status(400).error_message("bad request: no such model"));
    let report = restate.run("s6", "Hello?").await.expect("run task");

    let client = agent_loop::AnthropicClient::new("mock-key")
        .base_url(mock.anthropic_base_url())
        .model("claude-mock");
    let mut agent = agent_loop::Agent::builder(client).build().expect("agent");
    let mut events = std::pin::pin!(agent.run("Hello?"));
    let mut outcome = None;
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        if let agent_loop::AgentEvent::Finished(done) = event {
            outcome = Some(done);
        }
    }
    let outcome = outcome.expect("a Finished event");
    assert!(!outcome.termination.is_completed());
    assert_eq!(report["completed"], false);
    assert_eq!(report["termination"], outcome.termination.to_string());
    // Not retryable: one request each, no retry by the client, the agent or Restate.
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn restate_cancel_stops_the_run_and_leaves_a_valid_history() {
    let Some((restate, mock, _worker, tools)) = setup("cancel").await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "slow"}),
    ));
    hold(&tools.0, "slow");
    let run = restate.run_raw("s7", "Do the slow step.");
    wait_for_log(&tools.0, "start slow s7/c1", 1).await;
    let rows = restate
        .query("SELECT id FROM sys_invocation WHERE target = 'AgentSession/s7/run'")
        .await;
    let id = rows[0]["id"].as_str().expect("invocation id").to_owned();
    restate.cancel(&id).await;
    let (status, _) = run.await.expect("run task");
    assert_eq!(status, 409, "a cancelled run answers 409");
    release(&tools.0, "slow");

    let (_, state) = restate.call("s7", "state", None).await;
    assert_eq!(state["status"]["termination"], "cancelled");
    let conversation: agent_loop::context::Conversation =
        serde_json::from_value(state["conversation"].clone()).expect("conversation");
    assert_eq!(
        agent_loop::testing::history_violation(&conversation.messages),
        None
    );
    // The session goes on: the next run continues the (valid) history.
    mock.push(ScriptedResponse::text("Still here."));
    let report = restate.run("s7", "Are you there?").await.expect("run task");
    assert_eq!(report["final_text"], "Still here.");
    assert!(mock.history_violations().is_empty());
}

#[tokio::test]
async fn an_invalid_session_id_is_a_clear_error() {
    let Some((restate, _mock, _worker, _tools)) = setup("bad_id").await else {
        return;
    };
    let long = "x".repeat(300);
    let (status, body) = restate.call(&long, "run", Some(json!("hi"))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("invalid session id"), "{body}");
}

#[tokio::test]
async fn a_conversation_over_the_state_limit_is_a_clear_error() {
    let Some(restate) = restate_or_skip("state_limit") else {
        return;
    };
    restate.ready().await;
    let mock = MockServer::start().await;
    let tools = TempDir::new("state_limit");
    let worker = Worker::start_with(
        &mock.anthropic_base_url(),
        &tools.0,
        &[("MAX_STATE_BYTES", "400")],
    )
    .await;
    assert!(restate.register(&worker).await.status().is_success());
    mock.push(ScriptedResponse::text("short"));
    let report = restate.run("small", "hi").await.expect("run task");
    assert_eq!(report["final_text"], "short");

    mock.push(ScriptedResponse::text("x".repeat(1000)));
    let (status, body) = restate.run_raw("big", "hi").await.expect("run task");
    assert!(status >= 400, "{status} {body}");
    assert!(
        body.to_string()
            .contains("over the 400 the session may save"),
        "{body}"
    );
    let (_, state) = restate.call("big", "state", None).await;
    assert!(
        state["status"]["termination"]
            .as_str()
            .is_some_and(|t| t.contains("context window")),
        "{state}"
    );
}

#[tokio::test]
async fn registering_the_same_worker_twice_is_idempotent() {
    let Some((restate, _mock, worker, _tools)) = setup("register_twice").await else {
        return;
    };
    // setup registered it once; the same address again names the same deployment.
    let again = restate.register(&worker).await;
    assert!(again.status().is_success(), "{again:?}");
    let rows = restate.query("SELECT id FROM sys_deployment").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
}

/// A sub-agent's run is a durable call of its own: a worker killed inside it resumes inside
/// it, and neither the caller's model call nor the sub-agent's is made again.
#[tokio::test]
async fn sigkill_inside_a_sub_agent_resumes_inside_it() {
    let Some((restate, mock, mut worker, tools)) = setup("sub_agent").await else {
        return;
    };
    mock.push(
        ScriptedResponse::tool_call("h1", "helper", json!({"task": "Do step a."}))
            .usage_tokens(100, 10),
    );
    mock.push(ScriptedResponse::tool_call("c1", "step", json!({"label": "a"})).usage_tokens(20, 2));
    mock.push(ScriptedResponse::text("Step a is done.").usage_tokens(30, 3));
    mock.push(ScriptedResponse::text("All done.").usage_tokens(200, 20));
    hold(&tools.0, "a");
    let run = restate.run("s9", "Have the helper do step a.");

    // The sub-agent's tool runs with the child session's key: `{session}/{call}/{its call}`.
    wait_for_log(&tools.0, "start a s9/h1/c1", 1).await;
    worker.kill();
    worker.restart().await;
    wait_for_log(&tools.0, "start a s9/h1/c1", 2).await;
    release(&tools.0, "a");

    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "All done.", "{report}");
    assert_eq!(report["turns"], 2, "{report}");
    // The sub-agent's tokens add to the caller's.
    assert_eq!(report["input_tokens"], 100 + 20 + 30 + 200, "{report}");
    assert_eq!(report["output_tokens"], 10 + 2 + 3 + 20, "{report}");
    // Four model calls, none twice: the caller's first, the sub-agent's two, the caller's last.
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests[1].body.to_string().contains("Do step a."));
    assert!(requests[1].body.to_string().contains("one sub-task"));
    assert_eq!(count(&tool_log(&tools.0), "done a s9/h1/c1"), 1);
    assert!(mock.history_violations().is_empty());

    // The caller's conversation has the sub-agent's answer as the call's result; its
    // progress log names the child session, which holds the sub-agent's own conversation.
    let (_, state) = restate.call("s9", "state", None).await;
    let messages = state["conversation"]["messages"].to_string();
    assert!(messages.contains("Step a is done."), "{messages}");
    let (_, events) = restate.call("s9", "eventsSince", Some(json!(0))).await;
    let sub = events
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "sub_agent"))
        .cloned()
        .expect("a sub_agent event");
    assert_eq!(sub["session"], "s9/h1", "{sub}");
    let (_, child) = restate.call("s9%2Fh1", "state", None).await;
    let texts = child["conversation"]["messages"].to_string();
    assert!(
        texts.contains("Do step a.") && texts.contains("did a"),
        "{child}"
    );
    assert_eq!(child["status"]["status"], "finished", "{child}");
    // A child session cannot be run as a session of its own.
    let (status, _) = restate.call("s9%2Fh1", "run", Some(json!("hi"))).await;
    assert_eq!(status, 400);
}
