//! A durable run keeps the in-process loop's features: hooks, compaction's summary, tool
//! progress, and sessions saved by the earlier state format. The worker runs in the test
//! process (its hooks and summarizer are the test's), against a real restate-server.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::{AgentHooks, HookAction, ToolDecision};
use agent_loop::context::{ContextConfig, Summarizer};
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::{FnTool, ToolCall};
use agent_loop::{AnthropicClient, Error, Message, ToolContext, ToolError, ToolRegistry};
use agent_loop_restate::replay::RecordedRun;
use agent_loop_restate::DurableAgent;
use common::*;
use serde_json::{json, Value};

/// Serves `agent` in this process and registers it: new runs go to it.
async fn serve_in_process(restate: &Restate, agent: DurableAgent) {
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
}

fn mock_client(mock: &MockServer) -> AnthropicClient {
    AnthropicClient::new("mock-key")
        .base_url(mock.anthropic_base_url())
        .model("claude-mock")
}

/// The server, the mock model, and `agent` served in this process and registered.
async fn setup(
    test: &str,
    agent: impl FnOnce(AnthropicClient) -> DurableAgent,
) -> Option<(Restate, MockServer)> {
    let restate = restate_or_skip(test)?;
    restate.ready().await;
    let mock = MockServer::start().await;
    let client = mock_client(&mock);
    serve_in_process(&restate, agent(client)).await;
    Some((restate, mock))
}

fn step_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "step",
        "Does one labelled step.",
        |input: Value, _ctx| async move {
            Ok::<_, ToolError>(format!("did {}", input["label"].as_str().unwrap_or("?")))
        },
    )
}

/// The names of the journaled `run` steps of session `session`, in order.
async fn run_steps(restate: &Restate, session: &str) -> Vec<String> {
    restate
        .query(&format!(
            "SELECT j.name FROM sys_journal j JOIN sys_invocation i ON j.id = i.id WHERE \
             i.target = 'AgentSession/{session}/run' AND j.entry_type = 'Command: Run' \
             ORDER BY i.created_at, j.index"
        ))
        .await
        .iter()
        .filter_map(|row| row["name"].as_str().map(str::to_owned))
        .collect()
}

/// Hooks that deny the `forbidden` step, leave the `ask` step to a person, and stop the run
/// before a third model call; they count what they are asked.
#[derive(Default)]
struct Counts {
    tools_asked: AtomicUsize,
    models_asked: AtomicUsize,
}

#[derive(Clone, Default)]
struct Policy(Arc<Counts>);

impl std::ops::Deref for Policy {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.0
    }
}

#[agent_loop::async_trait]
impl AgentHooks for Policy {
    async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
        self.tools_asked.fetch_add(1, Ordering::SeqCst);
        match call.input["label"].as_str() {
            Some("forbidden") => ToolDecision::Deny("that step is not allowed".into()),
            Some("ask") => ToolDecision::Pause,
            _ => ToolDecision::Allow,
        }
    }

    async fn before_model_call(&self, _request: &mut ModelRequest, turn: u32) -> HookAction {
        self.models_asked.fetch_add(1, Ordering::SeqCst);
        if turn >= 3 {
            HookAction::Stop("three turns are enough".into())
        } else {
            HookAction::Continue
        }
    }
}

#[tokio::test]
async fn hooks_decide_in_journaled_steps() {
    let policy = Policy::default();
    let hooks = policy.clone();
    let Some((restate, mock)) = setup("hooks", move |client| {
        let tools = ToolRegistry::new().with(step_tool()).expect("tools");
        DurableAgent::new(client, tools).configure(move |b| b.hooks(hooks.clone()))
    })
    .await
    else {
        return;
    };
    mock.push(
        ScriptedResponse::tool_call("c1", "step", json!({"label": "forbidden"})).then_tool_call(
            "c2",
            "step",
            json!({"label": "ask"}),
        ),
    );
    mock.push(ScriptedResponse::tool_call(
        "c3",
        "step",
        json!({"label": "fine"}),
    ));
    let run = restate.run_raw("hooked", "Do the steps.");
    // The hook's Pause waits for a person, durably, as the policy's AskHuman does.
    wait_until("the ask step waits for approval", || async {
        let (_, state) = restate.call("hooked", "state", None).await;
        state["status"]["call_id"] == "c2"
    })
    .await;
    let (status, body) = restate
        .call(
            "hooked",
            "approve",
            Some(json!({"call_id": "c2", "allow": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, report) = run.await.expect("run");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["completed"], false, "{report}");
    assert_eq!(
        report["termination"], "stopped by a hook: three turns are enough",
        "{report}"
    );
    // Two model calls went out; the hook stopped the third before it was sent.
    assert_eq!(mock.requests().len(), 2);
    let (_, state) = restate.call("hooked", "state", None).await;
    let messages = state["conversation"]["messages"].to_string();
    assert!(messages.contains("that step is not allowed"), "{messages}");
    assert!(messages.contains("did ask"), "{messages}");
    assert!(messages.contains("did fine"), "{messages}");
    assert!(!messages.contains("did forbidden"), "{messages}");
    // Each verdict is a journaled step (asked once each), the model hook runs in the model
    // step (three asked: the third stopped the run).
    assert_eq!(
        run_steps(&restate, "hooked").await,
        [
            "model",
            "before_tool c1",
            "before_tool c2",
            "model",
            "before_tool c3",
            "model"
        ]
    );
    assert_eq!(policy.tools_asked.load(Ordering::SeqCst), 3);
    assert_eq!(policy.models_asked.load(Ordering::SeqCst), 3);
}

/// A summarizer that answers a fixed text and counts the calls.
struct Fixed(Arc<AtomicUsize>);

#[agent_loop::async_trait]
impl Summarizer for Fixed {
    async fn summarize(&self, span: &[Message]) -> Result<String, Error> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(format!("SUMMARY of {} messages", span.len()))
    }
}

#[tokio::test]
async fn compaction_summarizes_in_a_journaled_step() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let Some((restate, mock)) = setup("summary", move |client| {
        DurableAgent::new(client, ToolRegistry::new()).configure(move |b| {
            b.context(agent_loop::ContextManager::new(
                ContextConfig::default()
                    .context_window(3000)
                    .output_reserve(500)
                    .keep_recent_turns(1),
            ))
            .summarizer(Fixed(counted.clone()))
        })
    })
    .await
    else {
        return;
    };
    let mut compacted_at = None;
    for i in 0..8 {
        mock.push(ScriptedResponse::text(format!(
            "answer {i}: {}",
            "more ".repeat(150)
        )));
        let report = restate
            .run("sum", &format!("question {i}: {}", "words ".repeat(150)))
            .await
            .expect("run");
        assert_eq!(report["completed"], true, "{report}");
        if calls.load(Ordering::SeqCst) > 0 {
            compacted_at = Some(i);
            break;
        }
    }
    let compacted_at = compacted_at.expect("compaction asked for a summary");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(run_steps(&restate, "sum")
        .await
        .contains(&"summary".to_owned()));
    let (_, state) = restate.call("sum", "state", None).await;
    let messages = state["conversation"]["messages"]
        .as_array()
        .expect("messages");
    assert!(
        messages[0].to_string().contains("SUMMARY of"),
        "{}",
        messages[0]
    );
    // The model was sent the summary, not the old turns (the first message stays, for the
    // prompt cache, with the summary appended).
    let last = mock.requests().last().expect("a request").body.to_string();
    assert!(last.contains("SUMMARY of"), "{last}");
    assert!(!last.contains("question 1:"), "{last}");
    // The rewrite left no stale message behind: the state holds exactly the conversation.
    let keys = restate
        .query(
            "SELECT key FROM state WHERE service_name = 'AgentSession' AND service_key = 'sum' \
             AND key LIKE 'message/%'",
        )
        .await;
    assert_eq!(
        keys.len(),
        messages.len(),
        "after run {compacted_at}: {keys:?}"
    );
    let (_, events) = restate.call("sum", "eventsSince", Some(json!(0))).await;
    assert!(events.to_string().contains("\"compacted\""), "{events}");
    // The compacting run replays from its journal: the summary comes from it, the summarizer
    // is not asked again.
    let recorded = RecordedRun::fetch_last(&restate.admin, "sum")
        .await
        .expect("the journal");
    let counted = calls.clone();
    let agent = DurableAgent::new(mock_client(&mock), ToolRegistry::new()).configure(move |b| {
        b.context(agent_loop::ContextManager::new(
            ContextConfig::default()
                .context_window(3000)
                .output_reserve(500)
                .keep_recent_turns(1),
        ))
        .summarizer(Fixed(counted.clone()))
    });
    recorded.replay(&agent).await.expect("the same decisions");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tool_progress_reaches_the_progress_log_bounded() {
    let Some((restate, mock)) = setup("progress", |client| {
        let chatty = FnTool::new(
            "chatty",
            "Reports progress.",
            |_input: Value, ctx: ToolContext| async move {
                for n in 0..40 {
                    ctx.report_progress(format!("{n}: {}", "x".repeat(2000)));
                }
                Ok::<_, ToolError>("done")
            },
        );
        DurableAgent::new(client, ToolRegistry::new().with(chatty).expect("tools"))
    })
    .await
    else {
        return;
    };
    mock.push(ScriptedResponse::tool_call("p1", "chatty", json!({})));
    // A long answer: its text event is cut at 4 KiB (the conversation keeps all of it).
    let answer = format!("Finished. {}", "é".repeat(3000));
    mock.push(ScriptedResponse::text(answer.clone()));
    let report = restate.run("chat", "Go.").await.expect("run");
    assert_eq!(report["final_text"], answer.as_str());
    let mut events = Vec::new();
    loop {
        let (_, page) = restate
            .call("chat", "eventsSince", Some(json!(events.len())))
            .await;
        let page = page.as_array().cloned().unwrap_or_default();
        if page.is_empty() {
            break;
        }
        events.extend(page);
    }
    let notes: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_progress")
        .collect();
    assert_eq!(notes.len(), 16, "the first 16 notes of the call");
    assert!(notes
        .iter()
        .all(|n| n["id"] == "p1" && n["message"].as_str().is_some_and(|m| m.len() <= 1024)));
    assert!(notes[0]["message"].as_str().unwrap().starts_with("0: "));
    // Between its call and its result, as in-process.
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let call = kinds.iter().position(|k| *k == "tool_call").expect("call");
    let result = kinds
        .iter()
        .position(|k| *k == "tool_result")
        .expect("result");
    assert!(kinds[call + 1..result]
        .iter()
        .all(|k| *k == "tool_progress"));
}

#[tokio::test]
async fn a_session_in_the_earlier_format_loads_and_is_rewritten() {
    let Some((restate, mock)) = setup("legacy", |client| {
        DurableAgent::new(client, ToolRegistry::new()).configure(|b| b.system("Be brief."))
    })
    .await
    else {
        return;
    };
    // The earlier format: the whole conversation in one `conversation` value.
    let old = json!({
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "4"}]}
        ]
    });
    let bytes: Vec<u8> = serde_json::to_vec(&old).expect("json");
    let response = restate
        .http
        .post(format!("{}/services/AgentSession/state", restate.admin))
        .json(&json!({"object_key": "old", "new_state": {"conversation": bytes}}))
        .send()
        .await
        .expect("admin API");
    assert!(response.status().is_success(), "{response:?}");
    wait_until("the old state is in place", || async {
        let (_, state) = restate.call("old", "state", None).await;
        state["conversation"]["messages"].as_array().map(Vec::len) == Some(2)
    })
    .await;

    mock.push(ScriptedResponse::text("6"));
    let report = restate.run("old", "And 3 + 3?").await.expect("run");
    assert_eq!(report["final_text"], "6");
    // The model saw the old turns.
    let sent = mock.requests()[0].body.to_string();
    assert!(sent.contains("What is 2 + 2?"), "{sent}");
    let (_, state) = restate.call("old", "state", None).await;
    let texts: Vec<String> = state["conversation"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"][0]["text"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(texts, ["What is 2 + 2?", "4", "And 3 + 3?", "6"]);
    let keys: Vec<String> = restate
        .query(
            "SELECT key FROM state WHERE service_name = 'AgentSession' AND service_key = 'old' \
             ORDER BY key",
        )
        .await
        .iter()
        .filter_map(|row| row["key"].as_str().map(str::to_owned))
        .collect();
    assert!(!keys.contains(&"conversation".to_owned()), "{keys:?}");
    for key in ["message/0", "message/3", "messages", "system"] {
        assert!(keys.contains(&key.to_owned()), "{key} in {keys:?}");
    }
}

/// The bound on the saved conversation counts every saved message, the earlier turns' too, to
/// the byte: a conversation of exactly the bound is saved, one byte over is an error.
#[tokio::test]
async fn the_state_bound_counts_the_whole_conversation_exactly() {
    let agent = |client, bound| {
        let tools = ToolRegistry::new().with(step_tool()).expect("tools");
        DurableAgent::new(client, tools)
            .configure(|b| b.system("Be brief."))
            .max_state_bytes(bound)
    };
    let Some((restate, mock)) = setup("state_bound", |client| agent(client, usize::MAX)).await
    else {
        return;
    };
    let script = |mock: &MockServer| {
        mock.push(ScriptedResponse::tool_call(
            "c1",
            "step",
            json!({"label": "a"}),
        ));
        mock.push(ScriptedResponse::text("Done."));
    };
    script(&mock);
    let report = restate.run("b1", "Do a.").await.expect("run");
    assert_eq!(report["completed"], true, "{report}");
    let sizes = restate
        .query(
            "SELECT key, value_length FROM state WHERE service_name = 'AgentSession' AND \
             service_key = 'b1' AND (key LIKE 'message/%' OR key = 'system')",
        )
        .await;
    // The bound counts the messages' JSON and the prompt's text (not its JSON quotes).
    let total: u64 = sizes
        .iter()
        .map(|row| {
            let length = row["value_length"].as_u64().expect("length");
            if row["key"] == "system" {
                length - 2
            } else {
                length
            }
        })
        .sum();
    let total = usize::try_from(total).expect("size");

    // A worker whose bound is exactly that size, registered as a new deployment: new runs
    // go to it.
    serve_in_process(&restate, agent(mock_client(&mock), total)).await;
    script(&mock);
    let (status, report) = restate.run_raw("b2", "Do a.").await.expect("run");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["completed"], true, "{report}");

    serve_in_process(&restate, agent(mock_client(&mock), total - 1)).await;
    script(&mock);
    let (status, report) = restate.run_raw("b3", "Do a.").await.expect("run");
    assert_ne!(status, 200, "{report}");
    assert!(
        report.to_string().contains(&format!("is {total} bytes")),
        "{report}"
    );
}

/// Read-only calls start while the response streams; a result started early answers only
/// the call it ran as (a repeated call id, which the machine renames, gets its own).
#[tokio::test]
async fn early_results_answer_only_the_call_they_ran_as() {
    let Some((restate, mock)) = setup("early", |client| {
        let look = FnTool::new("look", "Looks.", |input: Value, _ctx| async move {
            Ok::<_, ToolError>(format!("saw {}", input["label"].as_str().unwrap_or("?")))
        })
        .read_only(true);
        DurableAgent::new(client, ToolRegistry::new().with(look).expect("tools"))
    })
    .await
    else {
        return;
    };
    mock.push(
        ScriptedResponse::tool_call("l1", "look", json!({"label": "a"})).then_tool_call(
            "l1",
            "look",
            json!({"label": "b"}),
        ),
    );
    mock.push(ScriptedResponse::text("Seen."));
    let report = restate.run("dup", "Look twice.").await.expect("run");
    assert_eq!(report["final_text"], "Seen.", "{report}");
    let (_, state) = restate.call("dup", "state", None).await;
    let messages = state["conversation"]["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let calls: Vec<(String, String)> = messages[1]["content"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap_or("").to_owned(),
                c["input"]["label"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let results = messages[2]["content"].as_array().expect("results");
    for (id, label) in &calls {
        let result = results
            .iter()
            .find(|r| r["tool_use_id"] == id.as_str())
            .unwrap_or_else(|| panic!("a result for {id}: {results:?}"));
        assert_eq!(
            result["content"],
            format!("saw {label}"),
            "{id}: {results:?}"
        );
    }
    assert_ne!(
        calls[0].0, calls[1].0,
        "the machine renamed the repeated id"
    );
}
