//! Replay as a test: a finished durable run's journal drives the agent machine again, with no
//! server, and a change in what the loop decides fails the replay.
//!
//! `recorded_run_replays_without_a_server` is the example: it needs nothing but the recorded
//! file `tests/recorded/deploy.json`, which `a_finished_run_is_recorded_and_replays` writes
//! when `AGENT_LOOP_RECORD_DIR` is set (against a real restate-server).

mod common;
#[path = "../src/bin/agent-loop-restate-worker.rs"]
#[allow(dead_code)]
mod worker;

use std::path::{Path, PathBuf};

use agent_loop::agent::RunPolicy;
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::AnthropicClient;
use agent_loop_restate::replay::{RecordedRun, ReplayError};
use agent_loop_restate::{ApprovalRequest, DurableAgent};
use common::*;
use serde_json::json;

/// The worker's agent, as it serves it (the client is never called in a replay: only its
/// model name matters, which sizes the context window).
fn served_agent() -> DurableAgent {
    let client = AnthropicClient::new("unused")
        .base_url("http://127.0.0.1:9")
        .model("claude-mock");
    worker::demo_agent(client, PathBuf::from("."), None)
}

fn recorded(name: &str) -> RecordedRun {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/recorded/{name}.json"));
    let json = std::fs::read_to_string(&path).expect("the recorded run");
    RecordedRun::from_json(&json).expect("a recorded run")
}

/// The example: a session recorded once (a read-only look and a step in one response, a
/// deploy a human approved, the answer) is replayed in-process. The same agent decides the
/// same way; an agent that decides otherwise fails, naming the journal entry.
#[tokio::test]
async fn recorded_run_replays_without_a_server() {
    let run = recorded("deploy");
    assert_eq!(
        run.input().expect("input"),
        "Look at the logs, then deploy."
    );
    let report = run
        .replay(&served_agent())
        .await
        .expect("the same decisions");
    assert!(report.completed, "{report:?}");
    assert_eq!(report.final_text, "Deployed.");
    assert_eq!(report.turns, 3);

    // A policy that no longer asks a human before deploying: the run would not wait.
    let no_approval =
        served_agent().approval(|_: &agent_loop::tool::ToolCall| ApprovalRequest::Allow);
    let error = run.replay(&no_approval).await.unwrap_err();
    assert!(
        matches!(&error, ReplayError::Diverged { recorded, .. } if recorded.contains("approval/")),
        "{error}"
    );

    // A new system prompt: the first save of the conversation writes it, where the recorded
    // run wrote only its new message.
    let new_prompt = served_agent().configure(|b| b.system("You are terse."));
    let error = run.replay(&new_prompt).await.unwrap_err();
    let ReplayError::Diverged {
        recorded, replayed, ..
    } = &error
    else {
        panic!("{error}");
    };
    assert!(recorded.contains("message/2"), "{error}");
    assert!(
        replayed.contains("\"system\" = \"You are terse.\""),
        "{error}"
    );

    // A tool the model used is gone: the call is answered with an error instead of running.
    let fewer_tools = DurableAgent::new(
        AnthropicClient::new("unused").model("claude-mock"),
        agent_loop::ToolRegistry::new(),
    )
    .configure(|b| b.system("You do tasks step by step with the tools."));
    assert!(run.replay(&fewer_tools).await.is_err());
}

/// More recorded runs: a call of a sub-agent (its answer comes from the recorded call), and a
/// model call that failed and was retried after a durable sleep.
#[tokio::test]
async fn recorded_sub_agent_call_and_retry_replay() {
    let report = recorded("helper")
        .replay(&served_agent())
        .await
        .expect("the same decisions");
    assert_eq!(report.final_text, "Helped.");
    let report = recorded("retry")
        .replay(&served_agent())
        .await
        .expect("the same decisions");
    assert_eq!(report.final_text, "Second time lucky.");
    // A retry policy that gives up at once decides otherwise: where the recorded run noted
    // its retry, this one ends and saves.
    let impatient = served_agent().configure(|b| {
        b.system("You do tasks step by step with the tools.")
            .policy(
                RunPolicy::new()
                    .retry(agent_loop::provider::transport::RetryPolicy::default().max_retries(0)),
            )
    });
    let error = recorded("retry").replay(&impatient).await.unwrap_err();
    // Two calls whose results came in the other order than the calls: fed as they came.
    let parallel = recorded("parallel");
    let results: Vec<&str> = parallel
        .entries
        .iter()
        .filter(|e| {
            e["Command"]["SetState"]["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("event/"))
        })
        .filter_map(|e| e["Command"]["SetState"]["value"].as_array())
        .filter_map(|v| {
            let text: Vec<u8> = v
                .iter()
                .filter_map(|b| b.as_u64())
                .map(|b| b as u8)
                .collect();
            let text = String::from_utf8(text).ok()?;
            text.contains("\"tool_result\"")
                .then(|| if text.contains("did y") { "y" } else { "x" })
        })
        .collect();
    assert_eq!(results, ["y", "x"]);
    let report = parallel
        .replay(&served_agent())
        .await
        .expect("the same decisions");
    assert_eq!(report.final_text, "Both.");
    assert!(
        matches!(&error, ReplayError::Diverged { recorded, .. } if recorded.contains("\"retry\"")),
        "{error}"
    );
}

/// A journal edited after the fact no longer replays: a step the run did not make, and a
/// recorded write the run would not make.
#[tokio::test]
async fn an_edited_journal_does_not_replay() {
    let run = recorded("deploy");
    let output = run
        .entries
        .iter()
        .position(|e| e["Command"].get("Output").is_some())
        .expect("an output entry");
    let mut extra = run.clone();
    extra.entries.insert(
        output,
        json!({"Command": {"SetState": {"key": "status", "value": [110, 117, 108, 108], "name": ""}}}),
    );
    let error = extra.replay(&served_agent()).await.unwrap_err();
    assert!(
        matches!(&error, ReplayError::Diverged { replayed, .. } if replayed.contains("the run ended")),
        "{error}"
    );
    // The recorded answer reads differently from what the run answers.
    let mut other = run.clone();
    let Some(answer) =
        other.entries[output]["Command"]["Output"]["result"]["Success"].as_array_mut()
    else {
        panic!("{}", other.entries[output]);
    };
    let text = String::from_utf8(answer.iter().map(|b| b.as_u64().unwrap() as u8).collect())
        .unwrap()
        .replace("Deployed.", "Deployed!");
    *answer = text.bytes().map(|b| json!(b)).collect();
    let error = other.replay(&served_agent()).await.unwrap_err();
    assert!(
        matches!(&error, ReplayError::Diverged { recorded, .. } if recorded.contains("Deployed!")),
        "{error}"
    );
    // A recorded write the run makes differently (its first progress event).
    let mut write = run.clone();
    let first_event = write
        .entries
        .iter()
        .position(|e| {
            e["Command"]["SetState"]["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("event/"))
        })
        .expect("an event write");
    write.entries[first_event]["Command"]["SetState"]["value"] = json!([110, 117, 108, 108]);
    let error = write.replay(&served_agent()).await.unwrap_err();
    let ReplayError::Diverged { entry, .. } = error else {
        panic!("{error}");
    };
    assert_eq!(entry as usize, first_event);
}

/// Ids that cannot be SQL literals are refused before anything is asked of the server.
#[tokio::test]
async fn an_id_with_a_quote_or_backslash_is_refused() {
    for id in ["inv_a'b", "inv_a\\b"] {
        let error = RecordedRun::fetch("http://127.0.0.1:9", id)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("cannot be an invocation id"),
            "{error}"
        );
        let error = RecordedRun::fetch_last("http://127.0.0.1:9", id)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("cannot be"), "{error}");
    }
}

/// A journal that is not a finished run's is refused with a reason.
#[test]
fn an_unfinished_or_foreign_journal_is_refused() {
    let mut run = recorded("deploy");
    let output = run
        .entries
        .iter()
        .position(|e| e["Command"].get("Output").is_some())
        .expect("an output entry");
    run.entries.truncate(output);
    let error = run.input().map(drop).unwrap_err();
    assert!(error.to_string().contains("not finished"), "{error}");
    let foreign = RecordedRun::new("s", "inv", vec![json!({"Command": {"Sleep": {}}})]);
    assert!(foreign
        .input()
        .unwrap_err()
        .to_string()
        .contains("no input"));
    assert!(RecordedRun::from_json("{").is_err());
}

/// Records a real run (a second one in its session, so the conversation comes from the
/// state) and replays it: the replay agrees with Restate's own journal.
#[tokio::test]
async fn a_finished_run_is_recorded_and_replays() {
    let Some(restate) = restate_or_skip("a_finished_run_is_recorded_and_replays") else {
        return;
    };
    restate.ready().await;
    let mock = MockServer::start().await;
    let tools = TempDir::new("replay");
    let worker = Worker::start_with(
        &mock.anthropic_base_url(),
        &tools.0,
        &[("JOURNAL_RETENTION_SECS", "3600")],
    )
    .await;
    assert!(restate.register(&worker).await.status().is_success());

    // A first run, so that the recorded one starts from a saved conversation.
    mock.push(ScriptedResponse::text("Hello."));
    let first = restate.run("rec", "Hi.").await.expect("first run");
    assert_eq!(first["final_text"], "Hello.");

    mock.push(
        ScriptedResponse::tool_call("l1", "look", json!({"label": "logs"})).then_tool_call(
            "s1",
            "step",
            json!({"label": "prepare"}),
        ),
    );
    mock.push(ScriptedResponse::tool_call(
        "d1",
        "deploy",
        json!({"label": "prod"}),
    ));
    mock.push(ScriptedResponse::text("Deployed."));
    let run = restate.run("rec", "Look at the logs, then deploy.");
    wait_until("the deploy waits for approval", || async {
        let (_, state) = restate.call("rec", "state", None).await;
        state["status"]["status"] == "waiting_for_approval"
    })
    .await;
    let (status, _) = restate
        .call(
            "rec",
            "approve",
            Some(json!({"call_id": "d1", "allow": true})),
        )
        .await;
    assert_eq!(status, 200);
    let report = run.await.expect("run");
    assert_eq!(report["final_text"], "Deployed.");
    // The read-only look ran inside the model step: no AgentTools invocation for it.
    let looks = restate
        .query("SELECT id FROM sys_invocation WHERE idempotency_key LIKE 'rec/%/l1'")
        .await;
    assert!(looks.is_empty(), "{looks:?}");
    assert_eq!(count(&tool_log(&tools.0), "look logs rec/l1"), 1);

    let recorded = RecordedRun::fetch_last(&restate.admin, "rec")
        .await
        .expect("the journal is kept");
    assert_eq!(recorded.session, "rec");
    let replayed = recorded.replay(&served_agent()).await.expect("replays");
    assert_eq!(serde_json::to_value(&replayed).expect("json"), report);
    let again = RecordedRun::from_json(&recorded.to_json()).expect("round trip");
    assert_eq!(again, recorded);
    if let Some(dir) = std::env::var_os("AGENT_LOOP_RECORD_DIR") {
        std::fs::write(Path::new(&dir).join("deploy.json"), recorded.to_json())
            .expect("write the recorded run");
    }
    // A run that calls the sub-agent: the caller's journal replays with the sub-agent's
    // answer as recorded, and the child session's with the sub-agent.
    mock.push(ScriptedResponse::tool_call(
        "h1",
        "helper",
        json!({"task": "Do step b."}),
    ));
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "b"}),
    ));
    mock.push(ScriptedResponse::text("b is done."));
    mock.push(ScriptedResponse::text("Helped."));
    let helped = restate.run("recsub", "Get help.").await.expect("run");
    // And a run whose first model call fails (overloaded): a durable backoff, then the
    // answer.
    mock.push(MockResponse::status(529).error_type("overloaded_error"));
    mock.push(ScriptedResponse::text("Second time lucky."));
    let retried = restate.run("recretry", "Try.").await.expect("run");
    assert_eq!(retried["final_text"], "Second time lucky.");
    // And two calls run together, the second finishing first: the results are fed in the
    // order they came.
    mock.push(
        ScriptedResponse::tool_call("p1", "step", json!({"label": "x"})).then_tool_call(
            "p2",
            "step",
            json!({"label": "y"}),
        ),
    );
    mock.push(ScriptedResponse::text("Both."));
    hold(&tools.0, "x");
    let both = restate.run("recpar", "Do x and y.");
    wait_for_log(&tools.0, "done y recpar/p2", 1).await;
    release(&tools.0, "x");
    assert_eq!(both.await.expect("run")["final_text"], "Both.");
    for (session, file) in [
        ("recsub", "helper"),
        ("recretry", "retry"),
        ("recpar", "parallel"),
    ] {
        let recorded = RecordedRun::fetch_last(&restate.admin, session)
            .await
            .expect("the journal is kept");
        recorded.replay(&served_agent()).await.expect("replays");
        if let Some(dir) = std::env::var_os("AGENT_LOOP_RECORD_DIR") {
            std::fs::write(
                Path::new(&dir).join(format!("{file}.json")),
                recorded.to_json(),
            )
            .expect("write the recorded run");
        }
    }
    for session in ["recsub", "recsub/h1"] {
        let recorded = RecordedRun::fetch_last(&restate.admin, session)
            .await
            .expect("the journal is kept");
        let replayed = recorded.replay(&served_agent()).await.expect("replays");
        if session == "recsub" {
            assert_eq!(serde_json::to_value(&replayed).expect("json"), helped);
        } else {
            assert_eq!(replayed.final_text, "b is done.");
            assert_eq!(recorded.input().expect("task"), "Do step b.");
        }
    }

    // A tool call's invocation is not a run.
    let tool = restate
        .query("SELECT id FROM sys_invocation WHERE idempotency_key LIKE 'rec/%/s1'")
        .await;
    let tool = tool[0]["id"].as_str().expect("the step's invocation");
    let error = RecordedRun::fetch(&restate.admin, tool).await.unwrap_err();
    assert!(error.to_string().contains("no AgentSession/run"), "{error}");
    let error = RecordedRun::fetch_last(&restate.admin, "nobody")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no finished run"), "{error}");
}
