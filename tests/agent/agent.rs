//! The agent loop through the public API, against the in-process scripted client.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::agent::{AgentHooks, HookAction, ToolDecision};
use agent_loop::error::ApiError;
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::{FnTool, ToolCall};
use agent_loop::RequestSettings;
use agent_loop::{
    Agent, AgentEvent, ContentBlock, LlmError, Role, StopReason, Termination, ToolError, Usage,
};
use futures::StreamExt;
use serde_json::json;

use crate::common;
use common::agent::{add_tool, assert_valid, echo_tool, result_in_history, run, run_cancelling};

fn failing_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "fail",
        "Always fails.",
        |_: serde_json::Value, _ctx| async move { Err::<String, _>(ToolError::new("disk on fire")) },
    )
}

/// Event kinds, without durations, for exact sequence checks.
fn kinds(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            AgentEvent::TurnStart { turn } => format!("TurnStart {turn}"),
            AgentEvent::TextDelta { text } => format!("Text {text}"),
            AgentEvent::ThinkingDelta { text } => format!("Thinking {text}"),
            AgentEvent::ToolCallStart { id, name } => format!("CallStart {id} {name}"),
            AgentEvent::ToolInputDelta { id, partial_json } => format!("Input {id} {partial_json}"),
            AgentEvent::ToolCall { id, input, .. } => format!("Call {id} {input}"),
            AgentEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } => format!("Result {id} {content} {is_error}"),
            AgentEvent::Retry { attempt, .. } => format!("Retry {attempt}"),
            AgentEvent::Compacted { .. } => "Compacted".to_owned(),
            AgentEvent::TurnEnd {
                turn, stop_reason, ..
            } => format!("TurnEnd {turn} {stop_reason:?}"),
            AgentEvent::Finished(o) => format!("Finished {:?}", o.termination),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn a_multi_tool_run_emits_the_exact_event_sequence() {
    let client = ScriptedClient::new([
        ScriptedResponse::thinking("Two sums.", "sig")
            .then_text("Let me add.")
            .then_tool_call("c1", "add", json!({"a": 1, "b": 2}))
            .then_tool_call("c2", "add", json!({"a": 3, "b": 4}))
            .usage_tokens(100, 20),
        ScriptedResponse::text("3 and 7.").usage_tokens(150, 5),
    ]);
    let mut agent = Agent::builder(client.clone())
        .system("You add.")
        .tool(add_tool())
        .policy(RunPolicy::new().early_read_only_tools(false))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "Add 1+2 and 3+4").await;
    assert_eq!(
        kinds(&events),
        [
            "TurnStart 1",
            "Thinking Two sums.",
            "Text Let me add.",
            "CallStart c1 add",
            r#"Input c1 {"a":1,"b":2}"#,
            "CallStart c2 add",
            r#"Input c2 {"a":3,"b":4}"#,
            r#"Call c1 {"a":1,"b":2}"#,
            r#"Call c2 {"a":3,"b":4}"#,
            "Result c1 3 false",
            "Result c2 7 false",
            "TurnEnd 1 ToolUse",
            "TurnStart 2",
            "Text 3 and 7.",
            "TurnEnd 2 EndTurn",
            "Finished Completed",
        ]
    );
    assert_eq!(outcome.final_text, "3 and 7.");
    assert_eq!(outcome.turns, 2);
    assert_eq!(outcome.usage.input_tokens, 250);
    assert_eq!(outcome.usage.output_tokens, 25);

    // The second request carried the assistant turn (thinking kept with its signature) and
    // both results in order.
    let requests = client.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].system.as_deref(), Some("You add."));
    assert_eq!(requests[0].tools.len(), 1);
    let second = &requests[1].messages;
    assert_eq!(second.len(), 3);
    assert!(
        matches!(&second[1].content[0], ContentBlock::Thinking { signature, .. } if signature == "sig")
    );
    assert_eq!(
        second[2].content,
        vec![
            ContentBlock::tool_result("c1", "3", false),
            ContentBlock::tool_result("c2", "7", false)
        ]
    );
    assert!(client.history_violations().is_empty());
    assert_valid(&agent);
}

#[tokio::test]
async fn the_conversation_continues_across_runs_and_survives_a_snapshot() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Paris."),
        ScriptedResponse::text("About 2.1 million."),
    ]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    run(&mut agent, "Capital of France?").await;
    let saved = serde_json::to_string(&agent.snapshot()).unwrap();

    let mut restored = Agent::builder(client.clone()).build().unwrap();
    restored
        .restore(serde_json::from_str(&saved).unwrap())
        .unwrap();
    let (_, outcome) = run(&mut restored, "Population?").await;
    assert_eq!(outcome.final_text, "About 2.1 million.");
    let last = client.last_request().unwrap();
    let texts: Vec<String> = last.messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["Capital of France?", "Paris.", "Population?"]);
}

#[tokio::test]
async fn max_turns_stops_and_can_ask_for_a_final_answer() {
    let looping = || ScriptedResponse::tool_call("x", "echo", json!({"text": "again"}));
    let client = ScriptedClient::new([
        looping(),
        ScriptedResponse::tool_call("y", "echo", json!({"text": "more"})),
    ]);
    let mut agent = Agent::builder(client)
        .tool(echo_tool())
        .max_turns(2)
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::MaxTurns);
    assert_eq!(outcome.turns, 2);
    assert_valid(&agent);

    let client = ScriptedClient::new([looping(), ScriptedResponse::text("Final: done.")]);
    let mut agent = Agent::builder(client.clone())
        .tool(echo_tool())
        .max_turns(1)
        .policy(RunPolicy::new().final_answer_at_max_turns(true))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::MaxTurns);
    assert_eq!(outcome.final_text, "Final: done.");
    assert_eq!(
        client.last_request().unwrap().tool_choice,
        agent_loop::provider::ToolChoice::None
    );
    assert_valid(&agent);
}

#[tokio::test]
async fn repeated_identical_calls_stop_the_run_without_running_the_last_one() {
    let runs = Arc::new(AtomicU32::new(0));
    let counter = runs.clone();
    let tool = FnTool::new("look", "Looks.", move |_: serde_json::Value, _ctx| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("nothing")
        }
    });
    let same = |id: &str| ScriptedResponse::tool_call(id, "look", json!({"q": "same"}));
    let client = ScriptedClient::new([same("1"), same("2"), same("3")]);
    let mut agent = Agent::builder(client)
        .tool(tool)
        .policy(RunPolicy::new().max_repeated_calls(3))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "look").await;
    assert_eq!(
        outcome.termination,
        Termination::RepeatedToolCall {
            name: "look".into(),
            times: 3
        }
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the third identical call is not run"
    );
    // The repeated call is announced and answered with an error, not run.
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolCall { id, .. } if id == "3")));
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ToolResult { id, is_error: true, content, .. }
            if id == "3" && content.starts_with("not run"))));
    assert_valid(&agent);
}

#[tokio::test]
async fn a_repeated_read_only_call_started_early_is_announced_once() {
    // The third identical call starts while the model streams (read-only), before the
    // response shows it repeated: its one ToolCall gets one result, the one it has.
    let tool = FnTool::new("look", "Looks.", |_: serde_json::Value, _ctx| async {
        Ok::<_, ToolError>("nothing")
    })
    .read_only(true);
    let same = |id: &str| {
        ScriptedResponse::tool_call(id, "look", json!({"q": "same"})).then_text("Looking.")
    };
    let client = ScriptedClient::new([same("1"), same("2"), same("3")]);
    let mut agent = Agent::builder(client)
        .tool(tool)
        .policy(
            RunPolicy::new()
                .max_repeated_calls(3)
                .early_read_only_tools(true),
        )
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "look").await;
    assert!(matches!(
        outcome.termination,
        Termination::RepeatedToolCall { times: 3, .. }
    ));
    let announced = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolCall { id, .. } if id == "3"))
        .count();
    assert_eq!(announced, 1, "{events:#?}");
    assert_eq!(common::grammar::grammar_violation(&events), None);
    assert_valid(&agent);
}

/// Three identical responses calling the read-only `look`, each pausing (on tokio's paused
/// clock) after the call: a call that starts early has the pause to finish in, or not.
fn repeated_early(tool: impl agent_loop::Tool) -> Agent {
    let same = |id: &str| {
        ScriptedResponse::tool_call(id, "look", json!({"q": "same"}))
            .then_pause(Duration::from_secs(1))
            .then_text("Looking.")
    };
    let client = ScriptedClient::new([same("1"), same("2"), same("3")]);
    Agent::builder(client)
        .tool(tool)
        .policy(
            RunPolicy::new()
                .max_repeated_calls(3)
                .early_read_only_tools(true),
        )
        .build()
        .unwrap()
}

/// A read-only tool `look` that counts its calls in `runs` and answers `look N`; call
/// `never_ends` (when given) never finishes.
fn counting_look(runs: Arc<AtomicU32>, never_ends: Option<u32>) -> impl agent_loop::Tool {
    FnTool::new("look", "Looks.", move |_: serde_json::Value, _ctx| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if Some(n) == never_ends {
                std::future::pending::<()>().await;
            }
            Ok::<_, ToolError>(format!("look {n}"))
        }
    })
    .read_only(true)
}

#[tokio::test(start_paused = true)]
async fn a_repeated_read_only_call_that_ran_early_keeps_its_result() {
    // As `RunPolicy::max_repeated_calls` says: the third call started while the model
    // streamed, before the repeat showed, and finished: it ran, and its result stands.
    let runs = Arc::new(AtomicU32::new(0));
    let mut agent = repeated_early(counting_look(runs.clone(), None));
    let (events, outcome) = run(&mut agent, "look").await;
    assert!(matches!(
        outcome.termination,
        Termination::RepeatedToolCall { times: 3, .. }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 3, "the third call ran");
    assert_eq!(result_in_history(&agent, "3"), ("look 3".to_owned(), false));
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ToolResult { id, is_error: false, content, .. }
            if id == "3" && content == "look 3")));
    assert_eq!(common::grammar::grammar_violation(&events), None);
    assert_valid(&agent);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_read_only_call_still_running_is_answered_as_not_run() {
    // The third call started early but has not finished when the response ends: it is
    // cancelled and answered with the repeat's error, as a call that never started.
    let runs = Arc::new(AtomicU32::new(0));
    let mut agent = repeated_early(counting_look(runs.clone(), Some(3)));
    let (events, outcome) = run(&mut agent, "look").await;
    assert!(matches!(
        outcome.termination,
        Termination::RepeatedToolCall { times: 3, .. }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 3, "the third call started");
    let (content, is_error) = result_in_history(&agent, "3");
    assert!(is_error && content.starts_with("not run"), "{content}");
    assert_eq!(common::grammar::grammar_violation(&events), None);
    assert_valid(&agent);
}

#[tokio::test]
async fn consecutive_all_failed_turns_stop_the_run_and_failures_reach_the_model() {
    let client = ScriptedClient::new(
        (0..3).map(|i| ScriptedResponse::tool_call(format!("f{i}"), "fail", json!({"n": i}))),
    );
    let mut agent = Agent::builder(client.clone())
        .tool(failing_tool())
        .policy(RunPolicy::new().max_tool_failure_turns(3))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "try").await;
    assert_eq!(outcome.termination, Termination::ToolFailures { turns: 3 });
    let second = &client.requests()[1].messages;
    assert_eq!(
        second.last().unwrap().content,
        vec![ContentBlock::tool_result("f0", "disk on fire", true)]
    );
    assert_valid(&agent);
}

#[tokio::test]
async fn tool_failures_of_every_kind_become_error_results_and_the_loop_goes_on() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("u", "no_such_tool", json!({}))
            .then_tool_call_raw("j", "add", "{\"a\": 1,")
            .then_tool_call("s", "add", json!({"a": "one", "b": 2}))
            .then_tool_call("ok", "add", json!({"a": 2, "b": 2})),
        ScriptedResponse::text("Recovered."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed);
    let requests = client.requests();
    let results = &requests[1].messages.last().unwrap().content;
    let texts: Vec<(String, bool)> = results
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => (content.clone(), *is_error),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        texts[0].0.contains("unknown tool \"no_such_tool\"") && texts[0].1,
        "{texts:?}"
    );
    assert!(
        texts[1].0.contains("invalid arguments for tool \"add\"") && texts[1].1,
        "{texts:?}"
    );
    assert!(texts[2].0.contains("/a") && texts[2].1, "{texts:?}");
    assert_eq!(texts[3], ("4".to_owned(), false));
    assert_valid(&agent);
}

struct DenyEcho;

#[agent_loop::async_trait]
impl AgentHooks for DenyEcho {
    async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
        if call.name == "echo" {
            ToolDecision::Deny("echo is disabled by policy".into())
        } else {
            ToolDecision::Allow
        }
    }

    async fn before_model_call(&self, request: &mut ModelRequest, turn: u32) -> HookAction {
        request.system = Some(format!("turn {turn}"));
        // A change to the request's messages goes to the model, never into the history.
        if let Some(last) = request.messages_mut().last_mut() {
            last.content
                .push(ContentBlock::text(format!("(reminder {turn})")));
        }
        HookAction::Continue
    }
}

#[tokio::test]
async fn hooks_deny_tools_and_prepare_each_request() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("e", "echo", json!({"text": "hi"})).then_tool_call(
            "a",
            "add",
            json!({"a": 1, "b": 1}),
        ),
        ScriptedResponse::text("ok"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(echo_tool())
        .tool(add_tool())
        .hooks(DenyEcho)
        .build()
        .unwrap();
    run(&mut agent, "go").await;
    let requests = client.requests();
    assert_eq!(requests[0].system.as_deref(), Some("turn 1"));
    assert_eq!(requests[1].system.as_deref(), Some("turn 2"));
    assert_eq!(
        requests[1].messages.last().unwrap().content,
        vec![
            ContentBlock::tool_result("e", "denied: echo is disabled by policy", true),
            ContentBlock::tool_result("a", "2", false),
            ContentBlock::text("(reminder 2)"),
        ]
    );
    assert_eq!(requests[0].messages[0].text(), "go(reminder 1)");
    // The history has none of the hook's additions.
    let context = agent.context();
    let history = context.messages();
    assert_eq!(history[0].content, vec![ContentBlock::text("go")]);
    assert_eq!(history[2].content.len(), 2);
    assert!(history.iter().all(|m| !m.text().contains("reminder")));
}

struct StopAll;

#[agent_loop::async_trait]
impl AgentHooks for StopAll {
    async fn before_model_call(&self, _request: &mut ModelRequest, turn: u32) -> HookAction {
        if turn > 1 {
            HookAction::Stop("enough".into())
        } else {
            HookAction::Continue
        }
    }
}

#[tokio::test]
async fn a_hook_can_stop_the_run() {
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "a",
        "add",
        json!({"a": 1, "b": 1}),
    )]);
    let mut agent = Agent::builder(client)
        .tool(add_tool())
        .hooks(StopAll)
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(
        outcome.termination,
        Termination::StoppedByHook {
            reason: "enough".into()
        }
    );
    assert_valid(&agent);
}

#[tokio::test]
async fn the_token_budget_stops_the_run() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("a", "add", json!({"a": 1, "b": 1})).usage_tokens(900, 200),
        ScriptedResponse::text("never"),
    ]);
    let mut agent = Agent::builder(client)
        .tool(add_tool())
        .policy(RunPolicy::new().token_budget(1000))
        .settings(RequestSettings::new().max_tokens(50))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    // 1,100 used: the next call (at least its 50 max tokens) cannot fit.
    assert!(
        matches!(
            outcome.termination,
            Termination::TokenBudget {
                used: 1100,
                next_call,
                budget: 1000
            } if next_call > 50
        ),
        "{:?}",
        outcome.termination
    );
    assert_eq!(outcome.turns, 1);
    assert_valid(&agent);
}

#[tokio::test]
async fn refusals_and_cut_off_answers_never_run_tools() {
    let client = ScriptedClient::new([ScriptedResponse::text("I can't help with that.")
        .then_tool_call("a", "add", json!({"a": 1, "b": 1}))
        .stop_reason(StopReason::Refusal)]);
    let mut agent = Agent::builder(client).tool(add_tool()).build().unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Refused);
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolResult { .. })));
    assert_valid(&agent);

    let client = ScriptedClient::new([
        ScriptedResponse::text("Once upon").stop_reason(StopReason::MaxTokens)
    ]);
    let mut agent = Agent::builder(client).build().unwrap();
    let (_, outcome) = run(&mut agent, "story").await;
    assert_eq!(outcome.termination, Termination::MaxTokens);
    assert_eq!(outcome.final_text, "Once upon");
}

#[tokio::test]
async fn a_cut_off_answer_is_continued_when_asked() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Once upon").stop_reason(StopReason::MaxTokens),
        ScriptedResponse::text(" a time."),
    ]);
    let mut agent = Agent::builder(client)
        .policy(RunPolicy::new().max_continuations(1))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "story").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Once upon a time.");
    assert_valid(&agent);
}

#[tokio::test(start_paused = true)]
async fn a_stream_broken_after_content_is_retried_from_the_start_of_the_turn() {
    let broken = LlmError::Transport {
        message: "connection reset".into(),
    };
    let client = ScriptedClient::new([
        ScriptedResponse::text("Hel").then_fail(broken),
        ScriptedResponse::text("Hello!"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .policy(
            RunPolicy::new()
                .retry(RetryPolicy::default().initial_backoff(Duration::from_millis(100))),
        )
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_eq!(
        kinds(&events),
        [
            "TurnStart 1",
            "Text Hel",
            "Retry 1",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed"
        ]
    );
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(client.requests().len(), 2);
    assert_eq!(agent.messages().len(), 2, "one clean answer in the history");
}

#[tokio::test]
async fn a_stream_broken_with_retries_exhausted_ends_in_an_error() {
    let broken = || {
        ScriptedResponse::text("Hel").then_fail(LlmError::Transport {
            message: "reset".into(),
        })
    };
    let client = ScriptedClient::new([broken(), broken()]);
    let mut agent = Agent::builder(client)
        .policy(
            RunPolicy::new().retry(
                RetryPolicy::default()
                    .max_retries(1)
                    .initial_backoff(Duration::from_millis(1)),
            ),
        )
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "hi").await;
    assert!(
        matches!(outcome.termination, Termination::Error(_)),
        "{:?}",
        outcome.termination
    );
    assert_valid(&agent);
    // The history keeps the user message; the next run works.
}

#[tokio::test]
async fn a_context_overflow_compacts_harder_and_retries_once() {
    let overflow = LlmError::ContextOverflow(Box::new(ApiError::new(
        400,
        "prompt is too long: 210000 tokens > 200000",
    )));
    let mut script = vec![];
    for i in 0..6 {
        script.push(ScriptedResponse::tool_call(
            format!("t{i}"),
            "echo",
            json!({"text": format!("{i}{}", "x".repeat(2000))}),
        ));
    }
    script.push(ScriptedResponse::error(overflow));
    script.push(ScriptedResponse::text("fits now"));
    let client = ScriptedClient::new(script);
    let mut agent = Agent::builder(client.clone())
        .tool(echo_tool())
        .context(agent_loop::ContextManager::new(
            agent_loop::context::ContextConfig::default().summarize(false),
        ))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "fits now");
    let compacted = events.iter().find_map(|e| match e {
        AgentEvent::Compacted {
            tokens_before,
            tokens_after,
        } => Some((*tokens_before, *tokens_after)),
        _ => None,
    });
    let (before, after) = compacted.expect("a Compacted event");
    assert!(after < before, "{before} -> {after}");
    let requests = client.requests();
    assert_eq!(requests.len(), 8);
    let last = requests.last().unwrap();
    let elided = last.messages.iter().flat_map(|m| &m.content).filter(
        |b| matches!(b, ContentBlock::ToolResult { content, .. } if content.contains("elided")),
    );
    assert!(
        elided.count() >= 1,
        "old tool results were elided in the re-sent request"
    );
    assert_valid(&agent);
}

#[tokio::test(start_paused = true)]
async fn cancelling_while_streaming_keeps_partial_text_and_the_next_run_works() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Partial answ").then_stall(),
        ScriptedResponse::text("Fresh."),
    ]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let handle = agent.handle();
    let mut events = Vec::new();
    {
        let mut stream = std::pin::pin!(agent.run("long question"));
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::TextDelta { .. }) {
                handle.cancel();
            }
            events.push(event);
        }
    }
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_valid(&agent);
    let messages = agent.messages();
    let last = messages.last().unwrap();
    assert_eq!(last.role, Role::Assistant);
    assert!(last.text().starts_with("Partial answ") && last.text().contains("[interrupted]"));

    let (_, outcome) = run(&mut agent, "again").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Fresh.");
    assert_valid(&agent);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_mid_run_leaves_a_valid_history() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Half").then_stall(),
        ScriptedResponse::text("Whole."),
    ]);
    let mut agent = Agent::builder(client).build().unwrap();
    {
        let mut stream = std::pin::pin!(agent.run("q"));
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::TextDelta { .. }) {
                break; // drop the stream mid-answer
            }
        }
    }
    assert_valid(&agent);
    assert!(agent
        .messages()
        .last()
        .unwrap()
        .text()
        .contains("[interrupted]"));
    let (_, outcome) = run(&mut agent, "again").await;
    assert_eq!(outcome.final_text, "Whole.");
    assert_valid(&agent);
}

#[tokio::test(start_paused = true)]
async fn cancelling_while_tools_run_answers_every_call_and_the_next_run_works() {
    let slow = FnTool::new(
        "slow",
        "Sleeps.",
        |_: serde_json::Value, ctx: agent_loop::ToolContext| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(3600)) => Ok::<_, ToolError>("woke"),
                _ = ctx.cancellation().cancelled() => Err(ToolError::new("stopped")),
            }
        },
    );
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("s1", "slow", json!({})).then_tool_call(
            "a1",
            "add",
            json!({"a": 1, "b": 1}),
        ),
        ScriptedResponse::text("after"),
    ]);
    let mut agent = Agent::builder(client)
        .tool(slow)
        .tool(add_tool())
        .build()
        .unwrap();
    let (_, outcome) = run_cancelling(
        &mut agent,
        "go",
        |event| matches!(event, AgentEvent::ToolResult { id, .. } if id == "a1"),
    )
    .await;
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_valid(&agent);
    let messages = agent.messages();
    let results = &messages.last().unwrap().content;
    assert_eq!(results.len(), 2);
    assert!(
        matches!(&results[0], ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "s1")
    );
    assert_eq!(results[1], ContentBlock::tool_result("a1", "2", false));
    let (_, outcome) = run(&mut agent, "next").await;
    assert_eq!(outcome.final_text, "after");
    assert_valid(&agent);
}

#[tokio::test(start_paused = true)]
async fn read_only_tools_start_while_the_model_is_still_streaming() {
    let lookup = FnTool::new(
        "lookup",
        "Reads.",
        |_: serde_json::Value, _ctx| async move { Ok::<_, ToolError>("found") },
    )
    .read_only(true);
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("r", "lookup", json!({"k": 1}))
            .then_pause(Duration::from_secs(1))
            .then_tool_call("w", "add", json!({"a": 1, "b": 1}))
            .then_text("tail"),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(client)
        .tool(lookup)
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed);
    let k = kinds(&events);
    let pos = |needle: &str| {
        k.iter()
            .position(|e| e.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} in {k:?}"))
    };
    assert!(
        pos("Call r") < pos("CallStart w"),
        "read-only call starts before the next block: {k:?}"
    );
    // The message's last content is "tail": the side-effecting call runs after it, and
    // the turn ends after both results.
    assert!(
        pos("Call w") > pos("Text tail"),
        "side-effecting call waits for the end of the message: {k:?}"
    );
    assert!(pos("TurnEnd 1") > pos("Result w"), "{k:?}");
    assert!(pos("TurnEnd 1") > pos("Result r"), "{k:?}");
    assert_valid(&agent);
}

#[tokio::test]
async fn usage_counts_failed_attempts_too() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Hel")
            .then_event(agent_loop::LlmEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 1,
                ..Usage::default()
            }))
            .then_fail(LlmError::Transport {
                message: "x".into(),
            }),
        ScriptedResponse::text("Hello").usage_tokens(10, 2),
    ]);
    let mut agent = Agent::builder(client)
        .policy(
            RunPolicy::new()
                .retry(RetryPolicy::default().initial_backoff(Duration::from_millis(1))),
        )
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "hi").await;
    assert_eq!(
        outcome.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 3,
            ..Usage::default()
        }
    );
    // What the broken attempt cost is reported apart.
    assert_eq!(
        outcome.failed_usage,
        Usage {
            input_tokens: 10,
            output_tokens: 1,
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn an_error_before_content_surfaces_with_the_provider_message() {
    let client = ScriptedClient::new([ScriptedResponse::error(LlmError::Api(Box::new(
        ApiError::new(401, "invalid x-api-key"),
    )))]);
    let mut agent = Agent::builder(client).build().unwrap();
    let (_, outcome) = run(&mut agent, "hi").await;
    match outcome.termination {
        Termination::Error(e) => assert!(e.to_string().contains("invalid x-api-key"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_valid(&agent);
}

#[test]
fn the_builder_rejects_duplicate_tools() {
    let err = Agent::builder(ScriptedClient::new([]))
        .tool(add_tool())
        .tool(add_tool())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("add"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_read_only_call_after_a_side_effecting_one_waits_for_it() {
    let lookup = FnTool::new(
        "lookup",
        "Reads.",
        |_: serde_json::Value, ctx: agent_loop::ToolContext| async move {
            ctx.report_progress("looking");
            Ok::<_, ToolError>("found")
        },
    )
    .read_only(true);
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("w", "add", json!({"a": 1, "b": 1}))
            .then_tool_call("r", "lookup", json!({"k": 1}))
            .then_pause(Duration::from_secs(1))
            .then_text("waiting"),
        ScriptedResponse::tool_call("r2", "lookup", json!({"k": 2}))
            .then_pause(Duration::from_secs(1)),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(client)
        .tool(lookup)
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, _) = run(&mut agent, "go").await;
    let k = kinds(&events);
    let pos = |needle: &str| {
        k.iter()
            .position(|e| e.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} in {k:?}"))
    };
    assert!(
        pos("Text waiting") < pos("Call r "),
        "the read waits for the end of the message, after the write before it: {k:?}"
    );
    assert!(pos("Call w") < pos("Call r "), "{k:?}");
    // An early read-only call reports progress too.
    assert!(pos("Call r2") < pos("TurnEnd 2"), "{k:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolProgress { id, message } if id == "r2" && message == "looking")));
    assert_valid(&agent);
}

#[tokio::test]
async fn stop_after_turn_lets_the_current_turn_finish_its_tools() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("a1", "add", json!({"a": 1, "b": 1})),
        ScriptedResponse::text("never asked"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let handle = agent.handle();
    let mut events = Vec::new();
    {
        let mut stream = std::pin::pin!(agent.run("go"));
        while let Some(event) = stream.next().await {
            if matches!(event, AgentEvent::TurnStart { turn: 1 }) {
                handle.stop_after_turn();
            }
            events.push(event);
        }
    }
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(outcome.termination, Termination::StoppedAfterTurn);
    assert_eq!(client.requests().len(), 1, "no second model call");
    assert_eq!(
        agent.messages().last().unwrap().content,
        vec![ContentBlock::tool_result("a1", "2", false)]
    );
    assert_valid(&agent);
    // The request to stop applied to that run only.
    let (_, outcome) = run(&mut agent, "again").await;
    assert_eq!(outcome.final_text, "never asked");
}

/// A long run on a current-thread runtime exhausts tokio's cooperative budget; the stream must
/// still deliver every event, `Finished` last (found by the agent benchmark).
#[test]
fn a_long_run_delivers_every_event_on_a_current_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut script: Vec<ScriptedResponse> = (0..99)
            .map(|i| ScriptedResponse::tool_call(format!("c{i}"), "add", json!({"a": i, "b": 1})))
            .collect();
        script.push(ScriptedResponse::text("done"));
        let mut agent = Agent::builder(ScriptedClient::new(script))
            .tool(add_tool())
            .max_turns(200)
            .build()
            .unwrap();
        let (events, outcome) = run(&mut agent, "go").await;
        assert_eq!(outcome.termination, Termination::Completed);
        assert_eq!(outcome.turns, 100);
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, AgentEvent::TurnEnd { .. }))
                .count(),
            100
        );
    });
}

/// The run's stream can move to another thread (`Agent::run`: "the stream is Send").
#[test]
fn the_run_stream_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let mut agent = Agent::builder(ScriptedClient::new([])).build().unwrap();
    let stream = agent.run("hi");
    assert_send(&stream);
}

/// A tool source whose first refresh fails and whose second brings the tool `late`.
#[derive(Default)]
struct LateSource {
    changed: std::sync::atomic::AtomicBool,
    refreshes: AtomicU32,
}

impl agent_loop::tool::ToolSource for LateSource {
    fn changed(&self) -> bool {
        self.changed.load(Ordering::Acquire)
    }

    fn refresh(&self) -> futures::future::BoxFuture<'_, Result<(), agent_loop::Error>> {
        Box::pin(async move {
            self.changed.store(false, Ordering::Release);
            match self.refreshes.fetch_add(1, Ordering::AcqRel) {
                0 => Err(agent_loop::Error::Tool(ToolError::new(
                    "the source is down",
                ))),
                _ => Ok(()),
            }
        })
    }

    fn register(
        &self,
        registry: &mut agent_loop::ToolRegistry,
    ) -> Result<usize, agent_loop::Error> {
        if self.refreshes.load(Ordering::Acquire) < 2 {
            return Ok(0);
        }
        registry.register(FnTool::new(
            "late",
            "Came late.",
            |_: serde_json::Value, _ctx| async move { Ok::<_, ToolError>("late result") },
        ))?;
        Ok(1)
    }
}

/// A source that changes is refreshed between turns: a failed refresh keeps the old tools,
/// a good one gives the next request (and the tool runner) the new ones.
#[tokio::test]
async fn a_tool_source_that_changes_is_refreshed_between_turns() {
    let source = Arc::new(LateSource::default());
    let poke = {
        let source = source.clone();
        FnTool::new(
            "poke",
            "Changes the source.",
            move |_: serde_json::Value, _ctx| {
                let source = source.clone();
                async move {
                    source.changed.store(true, Ordering::Release);
                    Ok::<_, ToolError>("poked")
                }
            },
        )
    };
    struct Shared(Arc<LateSource>);
    impl agent_loop::tool::ToolSource for Shared {
        fn changed(&self) -> bool {
            self.0.changed()
        }
        fn refresh(&self) -> futures::future::BoxFuture<'_, Result<(), agent_loop::Error>> {
            self.0.refresh()
        }
        fn register(
            &self,
            registry: &mut agent_loop::ToolRegistry,
        ) -> Result<usize, agent_loop::Error> {
            self.0.register(registry)
        }
    }
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "poke", json!({})),
        ScriptedResponse::tool_call("c2", "poke", json!({})),
        ScriptedResponse::tool_call("c3", "late", json!({})),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(poke)
        .tool_source(Shared(source.clone()))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("go").collect().await;
    assert_valid(&agent);
    let late = events.iter().find_map(|e| match e {
        AgentEvent::ToolResult {
            id,
            content,
            is_error,
            ..
        } if id == "c3" => Some((content.clone(), *is_error)),
        _ => None,
    });
    assert_eq!(late, Some(("late result".to_owned(), false)), "{events:#?}");
    let names: Vec<Vec<String>> = client
        .requests()
        .iter()
        .map(|r| r.tools.iter().map(|t| t.name.clone()).collect())
        .collect();
    assert_eq!(
        names,
        [
            vec!["poke"],
            vec!["poke"], // the first refresh failed: the old tools stay
            vec!["poke", "late"],
            vec!["poke", "late"],
        ]
    );
    assert_eq!(source.refreshes.load(Ordering::Acquire), 2);
}

// ----- tool-call ids the model repeats or leaves empty (issue 25) ----------------------

/// Every tool-call id in the agent's history, in order.
fn history_call_ids(agent: &Agent) -> Vec<String> {
    agent
        .messages()
        .iter()
        .flat_map(|m| {
            m.tool_uses()
                .map(|(id, _, _)| id.to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `(id, content)` of every tool result in the agent's history, in order.
fn history_results(agent: &Agent) -> Vec<(String, String)> {
    agent
        .messages()
        .iter()
        .flat_map(|m| m.content.clone())
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => Some((tool_use_id, content)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn two_calls_with_the_same_id_in_one_response_both_run_and_the_run_ends() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("x", "add", json!({"a": 1, "b": 2})).then_tool_call(
            "x",
            "add",
            json!({"a": 3, "b": 4}),
        ),
        ScriptedResponse::text("3 and 7"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    // A hang here was the bug: the second result was dropped and the batch never completed.
    let (events, outcome) = tokio::time::timeout(Duration::from_secs(60), run(&mut agent, "?"))
        .await
        .expect("the run ends");
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "3 and 7");
    let ids = history_call_ids(&agent);
    assert_eq!(ids[0], "x", "the first keeps the model's id");
    assert_ne!(ids[1], "x", "the second gets its own");
    assert_eq!(
        history_results(&agent),
        vec![(ids[0].clone(), "3".into()), (ids[1].clone(), "7".into())],
        "each result answers its own call, in order"
    );
    // The renamed id is the call's id in every event too.
    let k = kinds(&events);
    for id in &ids {
        assert!(k.contains(&format!("CallStart {id} add")), "{k:#?}");
        assert!(
            k.iter().any(|e| e.starts_with(&format!("Result {id} "))),
            "{k:#?}"
        );
    }
    assert_valid(&agent);
    assert!(
        client.history_violations().is_empty(),
        "{:?}",
        client.history_violations()
    );
}

#[tokio::test]
async fn an_id_reused_in_a_later_turn_gets_a_fresh_one() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("call_0", "add", json!({"a": 1, "b": 1})),
        ScriptedResponse::tool_call("call_0", "add", json!({"a": 2, "b": 2})),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    // This panicked in debug builds ("tool call id "call_0" in message 3 is not unique").
    let (_, outcome) = run(&mut agent, "?").await;
    assert_eq!(outcome.termination, Termination::Completed);
    let ids = history_call_ids(&agent);
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], "call_0");
    assert_ne!(ids[1], "call_0");
    assert_eq!(
        history_results(&agent),
        vec![(ids[0].clone(), "2".into()), (ids[1].clone(), "4".into())]
    );
    assert_valid(&agent);
    assert!(
        client.history_violations().is_empty(),
        "{:?}",
        client.history_violations()
    );

    // A second run on the same conversation: the model starts numbering from 0 again.
    client.push(ScriptedResponse::tool_call(
        "call_0",
        "add",
        json!({"a": 3, "b": 3}),
    ));
    client.push(ScriptedResponse::text("again"));
    let (_, outcome) = run(&mut agent, "more").await;
    assert_eq!(outcome.termination, Termination::Completed);
    let ids = history_call_ids(&agent);
    assert_eq!(ids.len(), 3);
    assert!(!ids[..2].contains(&ids[2]), "{ids:?}");
    assert_valid(&agent);
    assert!(
        client.history_violations().is_empty(),
        "{:?}",
        client.history_violations()
    );
}

#[tokio::test]
async fn empty_call_ids_get_ids_of_their_own() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("", "add", json!({"a": 1, "b": 2})).then_tool_call(
            "",
            "add",
            json!({"a": 5, "b": 5}),
        ),
        ScriptedResponse::tool_call("", "add", json!({"a": 0, "b": 0})),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "?").await;
    assert_eq!(outcome.termination, Termination::Completed);
    let ids = history_call_ids(&agent);
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|id| !id.is_empty()), "{ids:?}");
    let results = history_results(&agent);
    let contents: Vec<&str> = results.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(contents, ["3", "10", "0"]);
    assert_eq!(
        results.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
        ids
    );
    assert_valid(&agent);
    assert!(
        client.history_violations().is_empty(),
        "{:?}",
        client.history_violations()
    );
}
