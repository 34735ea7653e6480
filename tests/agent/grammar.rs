//! The event grammar of a run, checked over random scripts (and over random sub-agents'
//! runs under random calls, at every level of nesting), and the owned run stream:
//! a run can be spawned, saved at every turn boundary, and a second run while one is in
//! flight is refused.
//!
//! ```text
//! run  := Steered* (turn Handoff? Steered*)* Finished
//! turn := TurnStart (Retry | Fallback | TextDelta | ThinkingDelta | ToolCallStart
//!                    | ToolInputDelta | Compacted | call-event)* TurnEnd
//! call := ToolCall (ToolProgress | SubAgent)* ToolResult   (calls interleave; a call's own never reorder)
//! ```

use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::context::Conversation;
use agent_loop::testing::{history_violation, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, LlmError, Message, Termination, ToolError};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::common;
use common::grammar::grammar_violation;

/// What a scripted tool call does.
#[derive(Debug, Clone)]
enum Behaviour {
    Ok { reports: u8 },
    Fail,
    Panic,
    Slow { reports: u8 },
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        (0u8..3).prop_map(|reports| Behaviour::Ok { reports }),
        Just(Behaviour::Fail),
        Just(Behaviour::Panic),
        (0u8..3).prop_map(|reports| Behaviour::Slow { reports }),
    ]
}

/// One scripted model turn: tool calls (each with a behaviour, read-only or not) or a final
/// text; optionally broken once after content (the agent re-sends it).
#[derive(Debug, Clone)]
struct TurnScript {
    calls: Vec<(Behaviour, bool)>,
    broken_first: bool,
}

fn turn_script() -> impl Strategy<Value = TurnScript> {
    (
        prop::collection::vec((behaviour(), any::<bool>()), 0..4),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(calls, broken_first)| TurnScript {
            calls,
            broken_first,
        })
}

fn tool(read_only: bool) -> impl agent_loop::Tool {
    let name = if read_only { "look" } else { "act" };
    FnTool::new(name, "Scripted.", |input: Value, ctx| async move {
        let reports = input["reports"].as_u64().unwrap_or(0);
        for n in 0..reports {
            ctx.report_progress(format!("step {n}"));
        }
        match input["do"].as_str() {
            Some("fail") => Err(ToolError::new("scripted failure")),
            Some("panic") => panic!("scripted panic"),
            Some("slow") => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, ToolError>("slow done".to_owned())
            }
            _ => Ok("done".to_owned()),
        }
    })
    .read_only(read_only)
}

fn responses(script: &[TurnScript]) -> Vec<ScriptedResponse> {
    let mut out = Vec::new();
    for (t, turn) in script.iter().enumerate() {
        let mut response = ScriptedResponse::text(format!("turn {t}"));
        for (c, (behaviour, read_only)) in turn.calls.iter().enumerate() {
            let (what, reports) = match behaviour {
                Behaviour::Ok { reports } => ("ok", *reports),
                Behaviour::Fail => ("fail", 0),
                Behaviour::Panic => ("panic", 0),
                Behaviour::Slow { reports } => ("slow", *reports),
            };
            response = response.then_tool_call(
                format!("t{t}c{c}"),
                if *read_only { "look" } else { "act" },
                json!({"do": what, "reports": reports, "turn": t, "call": c}),
            );
        }
        if turn.broken_first {
            out.push(response.clone().then_fail(LlmError::Transport {
                message: "scripted break".into(),
            }));
        }
        out.push(response);
    }
    out.push(ScriptedResponse::text("all done"));
    // The answer to words the host steered in before "all done" ended the run.
    out.push(ScriptedResponse::text("heard you"));
    out
}

/// What the host does while a run goes on, each after so many events (when set).
#[derive(Debug, Clone, Copy, Default)]
struct Host {
    cancel_after: Option<usize>,
    steer_after: Option<usize>,
    stop_after: Option<usize>,
}

/// Runs the script, cancelling after `cancel_after` events when set; returns the events and
/// the agent.
async fn play(script: Vec<TurnScript>, cancel_after: Option<usize>) -> (Vec<AgentEvent>, Agent) {
    play_hosted(
        script,
        Host {
            cancel_after,
            ..Host::default()
        },
    )
    .await
}

/// Runs the script with the host doing what `host` says; returns the events and the agent.
async fn play_hosted(script: Vec<TurnScript>, host: Host) -> (Vec<AgentEvent>, Agent) {
    let client = ScriptedClient::new(responses(&script));
    let agent = Agent::builder(client)
        .tool(tool(true))
        .tool(tool(false))
        .max_turns(20)
        .policy(
            RunPolicy::new()
                .max_repeated_calls(50)
                .max_tool_failure_turns(50)
                .retry(
                    agent_loop::provider::transport::RetryPolicy::default()
                        .initial_backoff(Duration::from_millis(1))
                        .jitter(agent_loop::provider::transport::Jitter::None),
                ),
        )
        .build()
        .unwrap();
    drive(agent, host).await
}

/// Runs `agent` on "go", the host doing what `host` says; returns the events and the agent.
async fn drive(mut agent: Agent, host: Host) -> (Vec<AgentEvent>, Agent) {
    let handle = agent.handle();
    let mut stream = agent.run("go");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        let last = matches!(event, AgentEvent::Finished(_));
        events.push(event);
        let n = Some(events.len());
        if host.steer_after == n && !last {
            handle.steer("also this");
        }
        if host.stop_after == n {
            handle.stop_after_turn();
        }
        if host.cancel_after == n {
            handle.cancel();
        }
    }
    drop(stream);
    (events, agent)
}

fn check(events: &[AgentEvent], agent: &Agent) -> Result<(), TestCaseError> {
    if let Some(violation) = grammar_violation(events) {
        return Err(TestCaseError::fail(format!("{violation}\n{events:#?}")));
    }
    if let Some(violation) = history_violation(&agent.messages()) {
        return Err(TestCaseError::fail(format!("history: {violation}")));
    }
    prop_assert!(!agent.is_running());
    Ok(())
}

fn runtime(multi_thread: bool) -> tokio::runtime::Runtime {
    if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_run_follows_the_grammar(
        script in prop::collection::vec(turn_script(), 0..4),
        cancel_after in prop::option::weighted(0.4, 1usize..40),
        multi_thread in any::<bool>(),
    ) {
        let (events, agent) = runtime(multi_thread).block_on(play(script, cancel_after));
        check(&events, &agent)?;
        if cancel_after.is_none() {
            let Some(AgentEvent::Finished(outcome)) = events.last() else { unreachable!() };
            prop_assert_eq!(&outcome.termination, &Termination::Completed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The host steers, stops after a turn and cancels at random points: the grammar holds
    /// (each `Steered` between turns), the history is valid, and the words steered in are
    /// either delivered once (one `Steered`, in the history as the user's) or handed back in
    /// the outcome, never both, never lost.
    #[test]
    fn steering_and_stopping_keep_the_grammar_and_lose_nothing(
        script in prop::collection::vec(turn_script(), 0..4),
        cancel_after in prop::option::weighted(0.3, 1usize..40),
        steer_after in prop::option::weighted(0.8, 1usize..30),
        stop_after in prop::option::weighted(0.3, 1usize..40),
        multi_thread in any::<bool>(),
    ) {
        let host = Host { cancel_after, steer_after, stop_after };
        let (events, agent) = runtime(multi_thread).block_on(play_hosted(script, host));
        check(&events, &agent)?;
        let Some(AgentEvent::Finished(outcome)) = events.last() else { unreachable!() };
        let steered_at = steer_after.filter(|&n| n < events.len());
        let delivered = events.iter().filter(|e| matches!(e, AgentEvent::Steered { .. })).count();
        let in_history = agent
            .messages()
            .iter()
            .flat_map(|m| m.content.iter())
            .filter(|b| **b == agent_loop::ContentBlock::text("also this"))
            .count();
        prop_assert_eq!(delivered, in_history);
        prop_assert_eq!(
            delivered + outcome.undelivered.len(),
            usize::from(steered_at.is_some()),
            "{:#?}", events
        );
        if let Some(n) = steered_at {
            // Delivered after the host said it, never before.
            if let Some(at) = events.iter().position(|e| matches!(e, AgentEvent::Steered { .. })) {
                prop_assert!(at >= n);
            }
        }
        if cancel_after.is_none() && stop_after.is_none() {
            prop_assert_eq!(&outcome.termination, &Termination::Completed);
        }
        if cancel_after.is_none() && stop_after.is_some() {
            prop_assert!(matches!(
                outcome.termination,
                Termination::Completed | Termination::StoppedAfterTurn
            ), "{:?}", outcome.termination);
        }
    }
}

/// A lead's call: a scripted tool call, or a task for the sub-agent `helper`.
fn lead_call() -> impl Strategy<Value = Option<(Behaviour, bool)>> {
    prop::option::weighted(0.6, (behaviour(), any::<bool>()))
}

fn lead_responses(script: &[Vec<Option<(Behaviour, bool)>>]) -> Vec<ScriptedResponse> {
    let mut out = Vec::new();
    for (t, calls) in script.iter().enumerate() {
        let mut response = ScriptedResponse::text(format!("turn {t}"));
        for (c, call) in calls.iter().enumerate() {
            let id = format!("t{t}c{c}");
            response = match call {
                None => {
                    response.then_tool_call(id, "helper", json!({"task": format!("task {t}.{c}")}))
                }
                Some((behaviour, read_only)) => {
                    let (what, reports) = match behaviour {
                        Behaviour::Ok { reports } => ("ok", *reports),
                        Behaviour::Fail => ("fail", 0),
                        Behaviour::Panic => ("panic", 0),
                        Behaviour::Slow { reports } => ("slow", *reports),
                    };
                    response.then_tool_call(
                        id,
                        if *read_only { "look" } else { "act" },
                        json!({"do": what, "reports": reports}),
                    )
                }
            };
        }
        out.push(response);
    }
    out.push(ScriptedResponse::text("all done"));
    out
}

/// The lead runs its script with the sub-agent `helper` (the same tools, its own script,
/// shared by all its calls), cancelled after `cancel_after` events when set.
async fn play_nested(
    lead: Vec<Vec<Option<(Behaviour, bool)>>>,
    inner: Vec<TurnScript>,
    cancel_after: Option<usize>,
) -> (Vec<AgentEvent>, Agent) {
    let helper = Agent::builder(ScriptedClient::new(responses(&inner)))
        .tool(tool(true))
        .tool(tool(false))
        .policy(
            RunPolicy::new()
                .max_repeated_calls(50)
                .max_tool_failure_turns(50),
        )
        .build()
        .unwrap()
        .as_tool("helper", "Does a task.");
    let agent = Agent::builder(ScriptedClient::new(lead_responses(&lead)))
        .tool(tool(true))
        .tool(tool(false))
        .tool(helper)
        .policy(
            RunPolicy::new()
                .max_repeated_calls(50)
                .max_tool_failure_turns(50),
        )
        .build()
        .unwrap();
    drive(
        agent,
        Host {
            cancel_after,
            ..Host::default()
        },
    )
    .await
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Sub-agents' runs, each a random script, under a lead's random calls, cancelled at a
    /// random point: the grammar holds at every level, the lead's history is valid, and the
    /// outcome lists every sub-agent run the events finished.
    #[test]
    fn nested_runs_follow_the_grammar_at_every_level(
        lead in prop::collection::vec(prop::collection::vec(lead_call(), 0..4), 0..3),
        inner in prop::collection::vec(turn_script(), 0..3),
        cancel_after in prop::option::weighted(0.4, 1usize..80),
        multi_thread in any::<bool>(),
    ) {
        let (events, agent) = runtime(multi_thread).block_on(play_nested(lead, inner, cancel_after));
        check(&events, &agent)?;
        let Some(AgentEvent::Finished(outcome)) = events.last() else { unreachable!() };
        let finished = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::SubAgent { event, .. } if matches!(**event, AgentEvent::Finished(_))))
            .count();
        prop_assert_eq!(outcome.sub_agents.len(), finished);
        if cancel_after.is_none() {
            prop_assert_eq!(&outcome.termination, &Termination::Completed);
        }
    }
}

#[test]
fn the_checker_catches_what_it_should() {
    // A real run: one call with progress, then an answer.
    let script = vec![TurnScript {
        calls: vec![(Behaviour::Ok { reports: 1 }, false)],
        broken_first: false,
    }];
    let (good, _) = runtime(false).block_on(play(script, None));
    assert_eq!(grammar_violation(&good), None, "{good:#?}");
    let position = |pred: &dyn Fn(&AgentEvent) -> bool| good.iter().position(pred).unwrap();
    let progress = position(&|e| matches!(e, AgentEvent::ToolProgress { .. }));
    let result = position(&|e| matches!(e, AgentEvent::ToolResult { .. }));
    let call = position(&|e| matches!(e, AgentEvent::ToolCall { .. }));
    let turn_end = position(&|e| matches!(e, AgentEvent::TurnEnd { .. }));

    let mut progress_after_result = good.clone();
    progress_after_result.swap(progress, result);
    let mut end_before_result = good.clone();
    end_before_result.swap(result, turn_end);
    let mut result_without_call = good.clone();
    result_without_call.remove(call);
    result_without_call.retain(|e| !matches!(e, AgentEvent::ToolProgress { .. }));
    let mut no_finished = good.clone();
    no_finished.pop();
    let mut finished_twice = good.clone();
    finished_twice.push(good.last().unwrap().clone());
    for case in [
        progress_after_result,
        end_before_result,
        result_without_call,
        no_finished,
        finished_twice,
    ] {
        assert!(grammar_violation(&case).is_some(), "{case:#?}");
    }
}

#[test]
fn the_checker_catches_what_it_should_in_nested_runs() {
    let inner = vec![TurnScript {
        calls: vec![(Behaviour::Ok { reports: 0 }, false)],
        broken_first: false,
    }];
    let (good, _) = runtime(false).block_on(play_nested(vec![vec![None]], inner, None));
    assert_eq!(grammar_violation(&good), None, "{good:#?}");
    let is_nested = |e: &AgentEvent| matches!(e, AgentEvent::SubAgent { .. });
    let first_nested = good.iter().position(is_nested).unwrap();
    let last_nested = good.iter().rposition(is_nested).unwrap();
    let parent_result = good
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolResult { .. }))
        .unwrap();
    assert!(last_nested < parent_result);

    // A sub-agent's event after its call's result.
    let mut after_result = good.clone();
    let moved = after_result.remove(last_nested);
    after_result.insert(parent_result, moved);
    // A sub-agent's run without its Finished.
    let mut unfinished = good.clone();
    unfinished.remove(last_nested);
    // A sub-agent's run whose turn never ends: its TurnEnd gone.
    let mut open_turn = good.clone();
    let inner_end = open_turn
        .iter()
        .rposition(|e| matches!(e, AgentEvent::SubAgent { event, .. } if matches!(**event, AgentEvent::TurnEnd { .. })))
        .unwrap();
    open_turn.remove(inner_end);
    // A sub-agent's event before its call.
    let mut before_call = good.clone();
    let moved = before_call.remove(first_nested);
    before_call.insert(0, moved);
    for case in [after_result, unfinished, open_turn, before_call] {
        assert!(grammar_violation(&case).is_some(), "{case:#?}");
    }
}

/// A tool that reports progress and returns at once: its progress comes before its result,
/// on both runtime flavours, every time.
#[test]
fn progress_reported_just_before_returning_comes_before_the_result() {
    for multi_thread in [false, true] {
        for _ in 0..25 {
            let script = vec![TurnScript {
                calls: vec![(Behaviour::Ok { reports: 2 }, false); 3],
                broken_first: false,
            }];
            let (events, agent) = runtime(multi_thread).block_on(play(script, None));
            if let Some(v) = grammar_violation(&events) {
                panic!("{v}\n{events:#?}");
            }
            let progress = events
                .iter()
                .filter(|e| matches!(e, AgentEvent::ToolProgress { .. }))
                .count();
            assert_eq!(progress, 6, "every report is shown");
            assert!(!agent.is_running());
        }
    }
}

#[test]
fn a_spawned_run_saves_at_every_turn_boundary_and_refuses_a_second_run() {
    runtime(true).block_on(async {
        let client = ScriptedClient::new([
            ScriptedResponse::tool_call("c1", "act", json!({"do": "slow"})),
            ScriptedResponse::tool_call("c2", "act", json!({"do": "ok"})),
            ScriptedResponse::text("finished"),
        ]);
        let mut agent = Agent::builder(client)
            .system("the builder's prompt")
            .tool(tool(false))
            .build()
            .unwrap();
        let handle = agent.handle();
        let stream = agent.run("go");
        // A second run while the first is in flight: refused, with a clear error.
        let second: Vec<AgentEvent> = agent.run("again").collect().await;
        match second.as_slice() {
            [AgentEvent::Finished(outcome)] => {
                assert!(
                    matches!(&outcome.termination, Termination::Error(e)
                        if e.to_string().contains("in flight")),
                    "{outcome:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(agent.is_running());
        assert!(agent.restore(Conversation::default()).is_err());

        let saves = Arc::new(std::sync::Mutex::new(Vec::<Conversation>::new()));
        let task = {
            let saves = saves.clone();
            let handle = handle.clone();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                let mut events = Vec::new();
                while let Some(event) = stream.next().await {
                    if matches!(event, AgentEvent::TurnEnd { .. }) {
                        saves.lock().unwrap().push(handle.snapshot());
                    }
                    events.push(event);
                }
                events
            })
        };
        let events = task.await.unwrap();
        assert_eq!(grammar_violation(&events), None, "{events:#?}");
        let saves = saves.lock().unwrap();
        let lengths: Vec<usize> = saves.iter().map(|c| c.messages.len()).collect();
        // user; +assistant(call) +results; again; +final answer.
        assert_eq!(lengths, [3, 5, 6]);
        for save in saves.iter() {
            assert_eq!(history_violation(&save.messages), None);
            assert_eq!(save.system.as_deref(), Some("the builder's prompt"));
        }
        // The conversation is back with the agent; it runs again.
        assert!(!agent.is_running());
        assert_eq!(agent.messages().len(), 6);
        assert_eq!(agent.snapshot(), saves[2]);
    });
}

#[test]
fn restore_keeps_the_builders_system_prompt_unless_the_saved_one_has_its_own() {
    let client = ScriptedClient::new([]);
    let mut agent = Agent::builder(client).system("builder").build().unwrap();
    let messages = vec![Message::user("hi"), Message::assistant("hello")];
    agent
        .restore(Conversation::new(None, messages.clone()))
        .unwrap();
    assert_eq!(agent.snapshot().system.as_deref(), Some("builder"));
    agent
        .restore(Conversation::new(Some("saved".into()), messages))
        .unwrap();
    assert_eq!(agent.snapshot().system.as_deref(), Some("saved"));
}
