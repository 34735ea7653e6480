//! The agent loop as a sans-IO machine, driven by hand: no runtime, no sockets, time passed
//! in. Each test feeds inputs and checks the actions and events the machine gives.

use std::time::{Duration, Instant};

use agent_loop::agent::machine::{Action, AgentMachine, Handled, Input};
use agent_loop::agent::RunPolicy;
use agent_loop::agent::ToolDecision;
use agent_loop::context::{CharEstimateCounter, ContextConfig, Conversation};
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{history_violation, ScriptedClient};
use agent_loop::tool::{FnTool, ToolCall, ToolCallResult, ToolProgress};
use agent_loop::RequestSettings;
use agent_loop::{
    Agent, AgentEvent, ContextManager, LlmError, LlmEvent, Message, StopReason, Termination,
    ToolError,
};
use serde_json::{json, Value};

fn machine() -> AgentMachine {
    let tool = FnTool::new("act", "Acts.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("unused")
    });
    let look = FnTool::new("look", "Looks.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("unused")
    })
    .read_only(true);
    Agent::builder(ScriptedClient::new([]))
        .tool(tool)
        .tool(look)
        .policy(
            RunPolicy::new().retry(
                RetryPolicy::default()
                    .initial_backoff(Duration::from_secs(2))
                    .jitter(agent_loop::provider::transport::Jitter::None),
            ),
        )
        .build_machine()
        .unwrap()
}

/// Everything the machine asks for right now.
/// A `machine()` whose run has started, its first actions drained.
fn started(now: Instant) -> AgentMachine {
    let mut m = machine();
    m.start("go", now);
    drain(&mut m);
    m
}

fn drain(m: &mut AgentMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll()).collect()
}

fn events(actions: &[Action]) -> Vec<&AgentEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// `(id, content)` of every `ToolResult` event among the actions, in order.
fn tool_results(actions: &[Action]) -> Vec<(&str, &str)> {
    events(actions)
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { id, content, .. } => Some((id.as_str(), content.as_str())),
            _ => None,
        })
        .collect()
}

fn call_events(id: &str, name: &str, input: &str) -> Vec<LlmEvent> {
    call_block(0, id, name, input)
}

/// A whole tool-call block at `index`: start, arguments, stop.
fn call_block(index: usize, id: &str, name: &str, input: &str) -> Vec<LlmEvent> {
    vec![
        LlmEvent::ToolCallStart {
            index,
            id: id.into(),
            name: name.into(),
        },
        LlmEvent::ToolCallDelta {
            index,
            partial_json: input.into(),
        },
        LlmEvent::BlockStop { index },
    ]
}

fn feed(m: &mut AgentMachine, events: Vec<LlmEvent>, now: Instant) -> Vec<Action> {
    let mut actions = Vec::new();
    for event in events {
        m.handle(Input::ModelEvent(event), now);
        actions.extend(drain(m));
    }
    actions
}

fn stop(reason: StopReason) -> LlmEvent {
    LlmEvent::MessageStop {
        stop_reason: reason,
    }
}

/// A successful result of call `id`.
fn done(id: &str, name: &str, content: &str) -> Input {
    Input::ToolDone(ToolCallResult::new(
        id,
        name,
        content,
        false,
        Duration::ZERO,
    ))
}

fn outcome(actions: &[Action]) -> Option<&agent_loop::RunOutcome> {
    actions.iter().find_map(|a| match a {
        Action::Finish(o) => Some(o),
        _ => None,
    })
}

#[test]
fn a_tool_turn_asks_the_hooks_runs_the_tools_then_calls_again() {
    let now = Instant::now();
    let mut m = machine();
    m.start("go", now);
    let first = drain(&mut m);
    assert!(
        matches!(first.as_slice(), [Action::Emit(AgentEvent::TurnStart { turn: 1 }), Action::CallModel(r)] if r.messages.len() == 1)
    );

    let mut stream = call_events("c1", "act", r#"{"x":1}"#);
    stream.push(stop(StopReason::ToolUse));
    let actions = feed(&mut m, stream, now);
    let approve = actions
        .iter()
        .find_map(|a| match a {
            Action::Approve(calls) => Some(calls.clone()),
            _ => None,
        })
        .expect("the hooks are asked");
    assert_eq!(approve.len(), 1);
    assert!(actions.iter().any(|a| matches!(a, Action::StopModel)));

    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    let actions = drain(&mut m);
    let run: Vec<ToolCall> = actions
        .iter()
        .find_map(|a| match a {
            Action::RunTools(calls) => Some(calls.clone()),
            _ => None,
        })
        .expect("the tools run");
    assert_eq!(run[0].input, json!({"x": 1}));
    assert!(matches!(events(&actions)[0], AgentEvent::ToolCall { .. }));

    // Progress, then the result; the turn ends after it and the next call goes out.
    m.handle(Input::ToolProgress(progress("c1", "half way")), now);
    m.handle(done("c1", "act", "done"), now);
    // Late progress of an answered call is dropped.
    m.handle(Input::ToolProgress(progress("c1", "late")), now);
    let actions = drain(&mut m);
    let kinds: Vec<String> = events(&actions)
        .iter()
        .map(|e| {
            format!("{e:?}")
                .split([' ', '('])
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        ["ToolProgress", "ToolResult", "TurnEnd", "TurnStart"],
        "{actions:#?}"
    );
    let Some(Action::CallModel(request)) = actions.last() else {
        panic!("{actions:#?}");
    };
    assert_eq!(request.messages.len(), 3);
    assert_eq!(history_violation(&request.messages), None);

    let actions = feed(
        &mut m,
        vec![
            LlmEvent::TextDelta {
                index: 0,
                text: "all done".into(),
            },
            stop(StopReason::EndTurn),
        ],
        now,
    );
    let outcome = outcome(&actions).expect("finished");
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "all done");
    assert!(m.is_finished());
    assert_eq!(m.context().messages().len(), 4);
}

fn progress(id: &str, message: &str) -> ToolProgress {
    ToolProgress::new(id, message)
}

/// A machine whose first model response has streamed `text` so far.
fn streaming_text(text: &str, now: Instant) -> AgentMachine {
    let mut m = started(now);
    feed(
        &mut m,
        vec![LlmEvent::TextDelta {
            index: 0,
            text: text.into(),
        }],
        now,
    );
    m
}

#[test]
fn a_response_broken_after_content_is_re_sent_after_a_backoff_from_the_given_time() {
    let now = Instant::now();
    let mut m = streaming_text("Hel", now);
    m.handle(
        Input::ModelEnded(Err(LlmError::Transport {
            message: "reset".into(),
        })),
        now,
    );
    let actions = drain(&mut m);
    assert!(matches!(
        events(&actions).as_slice(),
        [AgentEvent::Retry { attempt: 1, .. }]
    ));
    assert!(!actions.iter().any(|a| matches!(a, Action::CallModel(_))));
    let at = m.poll_timeout().expect("a backoff");
    assert_eq!(
        at,
        now + Duration::from_secs(2),
        "time comes in, it is not read"
    );
    // Nothing happens until the timer fires: not before its time either.
    assert!(drain(&mut m).is_empty());
    assert_eq!(
        m.handle_timeout(at - Duration::from_millis(1)),
        Handled::Ignored
    );
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.handle_timeout(at), Handled::Taken);
    assert_eq!(m.poll_timeout(), None);
    let actions = drain(&mut m);
    assert!(
        matches!(actions.as_slice(), [Action::CallModel(_)]),
        "{actions:#?}"
    );
}

/// A machine whose conversation is already over its small window: compaction comes first.
fn crowded_machine() -> AgentMachine {
    crowded(3_000, true)
}

/// 30 old turns in a `window`-token context, with or without a summarizer.
fn crowded(window: u32, summarizer: bool) -> AgentMachine {
    let mut context = ContextManager::new(
        ContextConfig::default()
            .context_window(window)
            .output_reserve(500)
            .keep_recent_turns(1)
            .summarize(summarizer),
    )
    .with_counter(CharEstimateCounter);
    let mut messages = Vec::new();
    for i in 0..30 {
        messages.push(Message::user(format!(
            "question {i}: {}",
            "words ".repeat(40)
        )));
        messages.push(Message::assistant(format!(
            "answer {i}: {}",
            "more ".repeat(40)
        )));
    }
    context.restore(Conversation::new(None, messages)).unwrap();
    Agent::builder(ScriptedClient::new([]))
        .context(context)
        .build_machine()
        .unwrap()
}

#[test]
fn compaction_asks_for_a_summary_as_a_step_and_goes_on_without_one() {
    let now = Instant::now();
    let mut m = crowded_machine();
    let before = m.context().token_count();
    m.start("the latest question", now);
    let actions = drain(&mut m);
    let Some(Action::Summarize(span)) = actions.last() else {
        panic!("{actions:#?}");
    };
    // The oldest messages, as many as the low-water mark needs gone; never the latest input.
    assert!(
        (10..61).contains(&span.len()),
        "the old turns are the span: {}",
        span.len()
    );
    // The summary could not be had: compaction goes on without one (drops old turns).
    m.handle(
        Input::Summary(Err(
            agent_loop::error::ContextError::Summary("down".into()).into()
        )),
        now,
    );
    let actions = drain(&mut m);
    assert!(
        matches!(events(&actions).as_slice(),
            [AgentEvent::Compacted { tokens_before, tokens_after }]
                if *tokens_before > before && tokens_after < tokens_before),
        "{actions:#?}"
    );
    let Some(Action::CallModel(request)) = actions.last() else {
        panic!("{actions:#?}");
    };
    assert!(request.messages.len() < 61);
    assert_eq!(
        request.messages.last().unwrap().text(),
        "the latest question"
    );
    assert!(m.context().token_count() <= m.context().config().threshold_tokens());
}

#[test]
fn a_summary_replaces_the_old_turns() {
    let now = Instant::now();
    let mut m = crowded_machine();
    m.start("the latest question", now);
    drain(&mut m);
    m.handle(Input::Summary(Ok("they asked 30 questions".into())), now);
    let actions = drain(&mut m);
    let Some(Action::CallModel(request)) = actions.last() else {
        panic!("{actions:#?}");
    };
    assert!(request.messages[0]
        .text()
        .contains("they asked 30 questions"));
    assert_eq!(history_violation(&request.messages), None);
}

#[test]
fn a_context_overflow_compacts_once_and_re_sends() {
    let now = Instant::now();
    // Within its window by our count; the provider says otherwise.
    let mut m = crowded(100_000, false);
    m.start("go", now);
    assert!(matches!(drain(&mut m).last(), Some(Action::CallModel(_))));
    let overflow = || {
        LlmError::ContextOverflow(Box::new(agent_loop::error::ApiError::new(
            400,
            "prompt is too long",
        )))
    };
    m.handle(Input::ModelEnded(Err(overflow())), now);
    let actions = drain(&mut m);
    assert!(
        matches!(
            actions.as_slice(),
            [
                Action::Emit(AgentEvent::Compacted { .. }),
                Action::CallModel(_)
            ]
        ),
        "{actions:#?}"
    );
    // A second overflow in the same turn ends the run: compaction is not a loop.
    m.handle(Input::ModelEnded(Err(overflow())), now);
    let actions = drain(&mut m);
    assert!(matches!(
        outcome(&actions).map(|o| &o.termination),
        Some(Termination::Error(_))
    ));
}

/// A started machine whose first response asked for two `act` calls, `c1` and `c2`: the
/// hooks are asked about them.
fn two_calls_asked(now: Instant) -> AgentMachine {
    let mut m = started(now);
    let mut stream = call_events("c1", "act", "{}");
    stream.extend(call_block(1, "c2", "act", "{}"));
    stream.push(stop(StopReason::ToolUse));
    feed(&mut m, stream, now);
    m
}

#[test]
fn cancel_while_tools_run_answers_every_call_and_leaves_a_valid_history() {
    let now = Instant::now();
    let mut m = two_calls_asked(now);
    m.handle(
        Input::Approved(vec![ToolDecision::Allow, ToolDecision::Allow]),
        now,
    );
    drain(&mut m);
    m.handle(done("c1", "act", "ok"), now);
    drain(&mut m);
    // Cancelled 3 s after the calls started: the cut call reports how long it ran, and the
    // turn ends as interrupted, not with the model's `tool_use`.
    m.handle(Input::Cancel, now + Duration::from_secs(3));
    let actions = drain(&mut m);
    assert!(actions.iter().any(|a| matches!(a, Action::AbortTools)));
    let evs = events(&actions);
    assert!(
        matches!(evs[0], AgentEvent::ToolResult { id, is_error: true, content, duration, .. } if id == "c2" && content == "cancelled" && *duration == Duration::from_secs(3)),
        "{:?}",
        evs[0]
    );
    assert!(
        matches!(evs[1], AgentEvent::TurnEnd { stop_reason: StopReason::Other(r), .. } if r == "interrupted"),
        "{:?}",
        evs[1]
    );
    assert_eq!(
        outcome(&actions).map(|o| &o.termination),
        Some(&Termination::Cancelled)
    );
    let context = m.into_context();
    assert_eq!(history_violation(context.messages()), None);
    assert_eq!(context.messages().len(), 3);
}

#[test]
fn early_read_only_calls_start_while_streaming_and_side_effects_wait_for_them() {
    let now = Instant::now();
    let mut m = started(now);
    // A read-only call completes mid-stream: the hooks are asked, and it starts at once.
    let actions = feed(&mut m, call_events("r1", "look", "{}"), now);
    assert!(matches!(actions.last(), Some(Action::Approve(calls)) if calls[0].id == "r1"));
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    let actions = drain(&mut m);
    assert!(matches!(actions.last(), Some(Action::RunTools(calls)) if calls[0].id == "r1"));
    // Then a side-effecting call, and the message ends.
    let mut stream = call_block(1, "w1", "act", "{}");
    stream.push(stop(StopReason::ToolUse));
    let actions = feed(&mut m, stream, now);
    assert!(
        matches!(actions.last(), Some(Action::Approve(calls)) if calls.len() == 1 && calls[0].id == "w1")
    );
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    let actions = drain(&mut m);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::RunTools(_))),
        "the write waits for the read still running: {actions:#?}"
    );
    m.handle(done("r1", "look", "seen"), now);
    let actions = drain(&mut m);
    assert!(matches!(actions.last(), Some(Action::RunTools(calls)) if calls[0].id == "w1"));
}

#[test]
fn a_stop_request_lets_the_turn_finish_then_stops() {
    let now = Instant::now();
    let mut m = started(now);
    let mut stream = call_events("c1", "act", "{}");
    stream.push(stop(StopReason::ToolUse));
    feed(&mut m, stream, now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    m.handle(Input::StopAfterTurn, now);
    m.handle(done("c1", "act", "ok"), now);
    let actions = drain(&mut m);
    assert!(!actions.iter().any(|a| matches!(a, Action::CallModel(_))));
    assert_eq!(
        outcome(&actions).map(|o| &o.termination),
        Some(&Termination::StoppedAfterTurn)
    );
    assert_eq!(
        m.context().messages().len(),
        3,
        "the turn's results are kept"
    );
}

#[test]
fn steering_waits_for_the_batch_results_then_goes_in_before_the_next_call() {
    let now = Instant::now();
    let mut m = started(now);
    let mut stream = call_events("c1", "act", "{}");
    stream.push(stop(StopReason::ToolUse));
    // Said while the model streams its call.
    m.handle(Input::Steer("careful".into()), now);
    assert!(m.has_steering());
    feed(&mut m, stream, now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    // And while the tool runs: nothing goes into the history yet.
    assert_eq!(
        m.handle(Input::Steer("then stop".into()), now),
        Handled::Taken
    );
    assert_eq!(m.context().messages().len(), 2);
    m.handle(done("c1", "act", "ok"), now);
    let actions = drain(&mut m);
    let kinds: Vec<String> = events(&actions)
        .iter()
        .map(|e| match e {
            AgentEvent::Steered { input } => format!("Steered {input:?}"),
            AgentEvent::TurnEnd { turn, .. } => format!("TurnEnd {turn}"),
            AgentEvent::TurnStart { turn } => format!("TurnStart {turn}"),
            AgentEvent::ToolResult { id, .. } => format!("Result {id}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
    assert_eq!(kinds[0], "Result c1");
    assert_eq!(kinds[1], "TurnEnd 1");
    assert!(
        kinds[2].starts_with("Steered") && kinds[2].contains("careful"),
        "{kinds:?}"
    );
    assert!(kinds[3].contains("then stop"), "{kinds:?}");
    assert_eq!(kinds[4], "TurnStart 2");
    let Some(Action::CallModel(request)) =
        actions.iter().find(|a| matches!(a, Action::CallModel(_)))
    else {
        panic!("{actions:#?}")
    };
    let last = request.messages.last().unwrap();
    assert_eq!(
        last.content.len(),
        3,
        "the result, then the two inputs: {last:?}"
    );
    assert!(!m.has_steering());
    assert_eq!(history_violation(m.context().messages()), None);
}

#[test]
fn steering_during_a_final_answer_takes_another_turn_and_a_cancel_hands_it_back() {
    let now = Instant::now();
    let mut m = started(now);
    m.handle(Input::Steer("more".into()), now);
    let actions = feed(
        &mut m,
        vec![
            LlmEvent::TextDelta {
                index: 0,
                text: "an answer".into(),
            },
            LlmEvent::BlockStop { index: 0 },
            stop(StopReason::EndTurn),
        ],
        now,
    );
    assert!(outcome(&actions).is_none(), "the run goes on: {actions:#?}");
    assert!(actions.iter().any(|a| matches!(a, Action::CallModel(_))));
    // Said during the second call, then cancelled: handed back, not in the history.
    m.handle(Input::Steer("never mind".into()), now);
    m.handle(Input::Cancel, now);
    let actions = drain(&mut m);
    let outcome = outcome(&actions).unwrap();
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_eq!(outcome.undelivered, vec!["never mind".into()]);
    // After the end: ignored (the driver hands it back itself).
    assert_eq!(m.handle(Input::Steer("late".into()), now), Handled::Ignored);
}

#[test]
fn a_broken_response_abandons_its_early_calls_still_running_and_answers_them() {
    let now = Instant::now();
    let mut m = started(now);
    // Two read-only calls start early; one finishes, one is still running.
    for (index, id) in [(0, "r1"), (1, "r2")] {
        feed(&mut m, call_block(index, id, "look", "{}"), now);
        m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
        drain(&mut m);
    }
    assert_eq!(m.handle(done("r1", "look", "seen"), now), Handled::Taken);
    // A second result of a finished call, and one of a call nobody made, change nothing (and
    // say so): r2 is still running, and is abandoned below, not taken for finished.
    assert_eq!(m.handle(done("r1", "look", "again"), now), Handled::Ignored);
    assert_eq!(m.handle(done("nobody", "look", "?"), now), Handled::Ignored);
    drain(&mut m);
    m.handle(
        Input::ModelEnded(Err(LlmError::Transport {
            message: "reset".into(),
        })),
        now,
    );
    let actions = drain(&mut m);
    assert!(
        actions.iter().any(|a| matches!(a, Action::AbortTools)),
        "the running early call is abandoned: {actions:#?}"
    );
    let results = tool_results(&actions);
    assert_eq!(results[0], ("r1", "seen"));
    assert_eq!(results[1].0, "r2");
    assert!(results[1].1.starts_with("not run"), "{results:?}");

    // When every early call had finished, nothing is abandoned.
    let mut m = started(now);
    feed(&mut m, call_events("r1", "look", "{}"), now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    m.handle(done("r1", "look", "seen"), now);
    drain(&mut m);
    m.handle(
        Input::ModelEnded(Err(LlmError::Transport {
            message: "reset".into(),
        })),
        now,
    );
    let actions = drain(&mut m);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::AbortTools)),
        "{actions:#?}"
    );
}

#[test]
fn a_stop_asked_before_the_first_turn_still_lets_that_turn_run() {
    let now = Instant::now();
    let mut m = machine();
    assert!(!m.is_finished());
    m.start("go", now);
    m.handle(Input::StopAfterTurn, now);
    let actions = drain(&mut m);
    assert!(
        actions.iter().any(|a| matches!(a, Action::CallModel(_))),
        "the first turn runs: {actions:#?}"
    );
    assert!(!m.is_finished());
    let actions = feed(
        &mut m,
        vec![
            LlmEvent::TextDelta {
                index: 0,
                text: "hi".into(),
            },
            stop(StopReason::EndTurn),
        ],
        now,
    );
    assert_eq!(
        outcome(&actions).map(|o| &o.termination),
        Some(&Termination::Completed)
    );
    assert!(m.is_finished());
}

/// Polls up to and including the next `TurnEnd`: what a driver sees before the turn boundary.
fn until_turn_end(m: &mut AgentMachine) -> Vec<Action> {
    let mut actions = Vec::new();
    while let Some(action) = m.poll() {
        let end = matches!(action, Action::Emit(AgentEvent::TurnEnd { .. }));
        actions.push(action);
        if end {
            break;
        }
    }
    actions
}

fn tool_names(request: &agent_loop::provider::ModelRequest) -> Vec<&str> {
    request.tools.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn tools_changed_between_turns_are_what_the_next_request_lists() {
    let now = Instant::now();
    let mut m = machine();
    m.start("go", now);
    let first = drain(&mut m);
    let Some(Action::CallModel(request)) = first.last() else {
        panic!("{first:#?}");
    };
    assert_eq!(tool_names(request), ["act", "look"]);

    // Tools that change mid-response do not disturb it.
    let mut replacement = agent_loop::ToolRegistry::new();
    replacement
        .register(
            FnTool::new("fresh", "New.", |_: Value, _ctx| async move {
                Ok::<_, ToolError>("unused")
            })
            .read_only(true),
        )
        .unwrap();
    replacement
        .register(FnTool::new("act", "Acts.", |_: Value, _ctx| async move {
            Ok::<_, ToolError>("unused")
        }))
        .unwrap();
    let mut stream = call_events("c1", "act", "{}");
    stream.push(stop(StopReason::ToolUse));
    let (head, tail) = stream.split_at(1);
    let mut actions = feed(&mut m, head.to_vec(), now);
    m.handle(Input::ToolsChanged(replacement.catalog()), now);
    actions.extend(feed(&mut m, tail.to_vec(), now));
    assert!(
        actions.iter().any(|a| matches!(a, Action::Approve(_))),
        "{actions:#?}"
    );
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    m.handle(done("c1", "act", "done"), now);
    let actions = until_turn_end(&mut m);
    assert!(
        matches!(
            actions.last(),
            Some(Action::Emit(AgentEvent::TurnEnd { turn: 1, .. }))
        ),
        "{actions:#?}"
    );

    // At the turn boundary: `look` is gone, `fresh` came.
    let mut newer = agent_loop::ToolRegistry::new();
    newer
        .register(
            FnTool::new("fresh", "New.", |_: Value, _ctx| async move {
                Ok::<_, ToolError>("unused")
            })
            .read_only(true),
        )
        .unwrap();
    m.handle(Input::ToolsChanged(newer.catalog()), now);
    let actions = drain(&mut m);
    let Some(Action::CallModel(request)) = actions.last() else {
        panic!("{actions:#?}");
    };
    assert_eq!(tool_names(request), ["fresh"]);
    assert_eq!(history_violation(&request.messages), None);

    // The new tool is judged by the new registry: read-only, so it starts early.
    let mut stream = call_events("c2", "fresh", "{}");
    stream.push(stop(StopReason::ToolUse));
    let (head, tail) = stream.split_at(3);
    let early = feed(&mut m, head.to_vec(), now);
    assert!(
        early
            .iter()
            .any(|a| matches!(a, Action::Approve(calls) if calls[0].name == "fresh")),
        "a read-only call starts while streaming: {early:#?}"
    );
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    m.handle(done("c2", "fresh", "fresh result"), now);
    for event in tail.iter().cloned() {
        m.handle(Input::ModelEvent(event), now);
    }
    let actions = until_turn_end(&mut m);
    assert!(
        matches!(
            actions.last(),
            Some(Action::Emit(AgentEvent::TurnEnd { turn: 2, .. }))
        ),
        "{actions:#?}"
    );
    let actions = drain(&mut m);
    let Some(Action::CallModel(request)) = actions.last() else {
        panic!("{actions:#?}");
    };
    assert_eq!(tool_names(request), ["fresh"]);

    // After the run, a late change is ignored and breaks nothing.
    let actions = feed(
        &mut m,
        vec![
            LlmEvent::TextDelta {
                index: 0,
                text: "ok".into(),
            },
            stop(StopReason::EndTurn),
        ],
        now,
    );
    assert!(outcome(&actions).is_some_and(|o| o.termination == Termination::Completed));
    m.handle(Input::ToolsChanged(replacement.catalog()), now);
    assert!(m.is_finished());
    assert!(m.poll().is_none());
}

/// A machine like `machine()` with the given builder changes.
fn machine_with(
    configure: impl FnOnce(agent_loop::AgentBuilder) -> agent_loop::AgentBuilder,
) -> AgentMachine {
    let act = FnTool::new("act", "Acts.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("unused")
    });
    let look = FnTool::new("look", "Looks.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("unused")
    })
    .read_only(true);
    let builder =
        Agent::builder(ScriptedClient::new([]))
            .tool(act)
            .tool(look)
            .policy(RunPolicy::new().retry(
                RetryPolicy::default().jitter(agent_loop::provider::transport::Jitter::None),
            ));
    configure(builder).build_machine().unwrap()
}

fn model_request(actions: &[Action]) -> Option<&agent_loop::provider::ModelRequest> {
    actions.iter().find_map(|a| match a {
        Action::CallModel(request) => Some(request),
        _ => None,
    })
}

/// One tool turn of `act` call `id`: the stream (then a `tool_use` stop), the hooks allow
/// it, it finishes with "done". The actions after its result.
fn act_turn(
    m: &mut AgentMachine,
    mut stream: Vec<LlmEvent>,
    id: &str,
    now: Instant,
) -> Vec<Action> {
    stream.push(stop(StopReason::ToolUse));
    feed(m, stream, now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(m);
    m.handle(done(id, "act", "done"), now);
    drain(m)
}

#[test]
fn the_request_carries_the_agents_prompt_cache_settings() {
    let cache = agent_loop::provider::cache::PromptCache::default()
        .ttl(agent_loop::provider::cache::CacheTtl::OneHour);
    let mut m = machine_with(|b| b.settings(RequestSettings::new().prompt_cache(cache)));
    m.start("go", Instant::now());
    let actions = drain(&mut m);
    assert_eq!(model_request(&actions).unwrap().prompt_cache, Some(cache));
}

#[test]
fn empty_text_and_thinking_deltas_are_not_events() {
    let now = Instant::now();
    let mut m = started(now);
    let delta = |text: &str| LlmEvent::TextDelta {
        index: 1,
        text: text.into(),
    };
    let thinking = |text: &str| LlmEvent::ThinkingDelta {
        index: 0,
        thinking: text.into(),
    };
    let actions = feed(
        &mut m,
        vec![
            thinking(""),
            delta(""),
            delta("Hi"),
            stop(StopReason::EndTurn),
        ],
        now,
    );
    let streamed: Vec<&AgentEvent> = events(&actions)
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                AgentEvent::TextDelta { .. } | AgentEvent::ThinkingDelta { .. }
            )
        })
        .collect();
    assert!(
        matches!(streamed.as_slice(), [AgentEvent::TextDelta { text }] if text == "Hi"),
        "{streamed:#?}"
    );
    assert_eq!(outcome(&actions).unwrap().final_text, "Hi");
}

#[test]
fn a_stream_that_ends_without_its_stop_event_is_broken_and_re_sent() {
    let now = Instant::now();
    let mut m = streaming_text("Hel", now);
    // The transport ended cleanly, but the message never did.
    m.handle(Input::ModelEnded(Ok(())), now);
    let actions = drain(&mut m);
    assert!(
        matches!(
            events(&actions).as_slice(),
            [AgentEvent::Retry { attempt: 1, .. }]
        ),
        "{actions:#?}"
    );
    assert!(m.poll_timeout().is_some(), "{actions:#?}");
}

#[test]
fn only_retryable_failures_after_content_are_re_sent_by_the_agent() {
    let now = Instant::now();
    // After content, a failure the API would give again ends the run.
    let mut m = streaming_text("Hel", now);
    let refused = LlmError::Stream {
        error_type: "invalid_request_error".into(),
        message: "no".into(),
    };
    assert!(!refused.is_retryable());
    m.handle(Input::ModelEnded(Err(refused)), now);
    let actions = drain(&mut m);
    assert!(!events(&actions)
        .iter()
        .any(|e| matches!(e, AgentEvent::Retry { .. })));
    assert!(
        matches!(
            outcome(&actions).map(|o| &o.termination),
            Some(Termination::Error(_))
        ),
        "{actions:#?}"
    );

    // Before any content too, the machine owns the retry (its requests ask the client for
    // none): a transient failure is retried after the policy's backoff.
    let mut m = started(now);
    let transient = LlmError::Transport {
        message: "reset".into(),
    };
    assert!(transient.is_retryable());
    m.handle(Input::ModelEnded(Err(transient)), now);
    let actions = drain(&mut m);
    assert!(
        matches!(
            events(&actions).as_slice(),
            [AgentEvent::Retry { attempt: 1, .. }]
        ),
        "{actions:#?}"
    );
    assert_eq!(m.poll_timeout(), Some(now + Duration::from_secs(2)));
}

#[test]
fn the_machines_requests_ask_the_client_for_no_retries() {
    let now = Instant::now();
    let mut m = machine();
    m.start("go", now);
    let request = drain(&mut m)
        .into_iter()
        .find_map(|a| match a {
            Action::CallModel(request) => Some(request),
            _ => None,
        })
        .expect("a model call");
    assert_eq!(request.retry, Some(RetryPolicy::none()));
}

#[test]
fn the_final_call_at_the_turn_limit_starts_no_tool_early() {
    let now = Instant::now();
    let mut m = machine_with(|b| {
        b.max_turns(1)
            .policy(RunPolicy::new().final_answer_at_max_turns(true))
    });
    m.start("go", now);
    drain(&mut m);
    let actions = act_turn(&mut m, call_events("c1", "act", "{}"), "c1", now);
    let request = model_request(&actions).expect("the final call");
    assert_eq!(request.tool_choice, agent_loop::provider::ToolChoice::None);
    // The model calls a read-only tool anyway: it is not started, early or late.
    let mut stream = call_events("r1", "look", "{}");
    stream.push(stop(StopReason::ToolUse));
    let actions = feed(&mut m, stream, now);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Approve(_) | Action::RunTools(_))),
        "{actions:#?}"
    );
    assert_eq!(
        outcome(&actions).unwrap().termination,
        Termination::MaxTurns
    );
    // The call is answered, so the history stays valid.
    let messages = m.context().messages();
    assert_eq!(history_violation(messages), None);
    let last = messages.last().unwrap();
    assert!(
        last.content.iter().any(|b| matches!(b,
            agent_loop::ContentBlock::ToolResult { tool_use_id, content, is_error: true, .. }
                if tool_use_id == "r1" && content.contains("turn limit"))),
        "{last:?}"
    );
}

#[test]
fn cut_off_answers_are_continued_up_to_the_limit() {
    let now = Instant::now();
    let mut m = machine_with(|b| b.policy(RunPolicy::new().max_continuations(1)));
    m.start("go", now);
    drain(&mut m);
    let cut = |text: &str| {
        vec![
            LlmEvent::TextDelta {
                index: 0,
                text: text.into(),
            },
            stop(StopReason::MaxTokens),
        ]
    };
    let actions = feed(&mut m, cut("Once upon"), now);
    let request = model_request(&actions).expect("continued");
    assert!(request
        .messages
        .last()
        .unwrap()
        .text()
        .starts_with("Continue"));
    let actions = feed(&mut m, cut(" a time"), now);
    assert!(model_request(&actions).is_none(), "{actions:#?}");
    let outcome = outcome(&actions).expect("finished");
    assert_eq!(outcome.termination, Termination::MaxTokens);
    assert_eq!(outcome.final_text, "Once upon a time");
}

#[test]
fn tool_input_deltas_name_their_call_for_the_first_4096_calls_of_a_response() {
    // Block ids are remembered for a bounded number of calls; memory stays bounded.
    let now = Instant::now();
    let mut m = started(now);
    for index in 0..=4096 {
        m.handle(
            Input::ModelEvent(LlmEvent::ToolCallStart {
                index,
                id: format!("c{index}"),
                name: "act".into(),
            }),
            now,
        );
    }
    drain(&mut m);
    let delta = |index| {
        Input::ModelEvent(LlmEvent::ToolCallDelta {
            index,
            partial_json: "{".into(),
        })
    };
    m.handle(delta(4095), now);
    let actions = drain(&mut m);
    assert!(
        matches!(events(&actions).as_slice(), [AgentEvent::ToolInputDelta { id, .. }] if id == "c4095"),
        "{actions:#?}"
    );
    m.handle(delta(4096), now);
    assert!(events(&drain(&mut m)).is_empty());
}

#[test]
fn the_final_text_is_the_last_text_the_model_wrote() {
    // Turn 1 writes text beside a call; turn 2 (the last) only calls. The run ends at the
    // turn limit with turn 1's text, not an empty one.
    let now = Instant::now();
    let mut m = machine_with(|b| b.max_turns(2));
    m.start("go", now);
    drain(&mut m);
    let mut stream = vec![LlmEvent::TextDelta {
        index: 0,
        text: "Let me check.".into(),
    }];
    stream.extend(call_block(1, "c1", "act", "{}"));
    assert!(model_request(&act_turn(&mut m, stream, "c1", now)).is_some());
    let actions = act_turn(&mut m, call_events("c2", "act", "{}"), "c2", now);
    let outcome = outcome(&actions).expect("finished");
    assert_eq!(outcome.termination, Termination::MaxTurns);
    assert_eq!(outcome.final_text, "Let me check.");
}

#[test]
fn a_second_result_for_an_answered_call_is_ignored() {
    let now = Instant::now();
    let mut m = started(now);
    let mut stream = call_block(0, "c1", "act", "{}");
    stream.extend(call_block(1, "c2", "act", "{}"));
    stream.push(stop(StopReason::ToolUse));
    feed(&mut m, stream, now);
    m.handle(
        Input::Approved(vec![ToolDecision::Allow, ToolDecision::Allow]),
        now,
    );
    drain(&mut m);
    m.handle(done("c1", "act", "first"), now);
    m.handle(done("c1", "act", "again"), now);
    let actions = drain(&mut m);
    let results: Vec<&AgentEvent> = events(&actions)
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::ToolResult { .. }))
        .collect();
    assert!(
        matches!(results.as_slice(), [AgentEvent::ToolResult { id, content, .. }] if id == "c1" && content == "first"),
        "{results:#?}"
    );
    // The turn still waits for c2, then carries c1's first result.
    assert!(model_request(&actions).is_none());
    m.handle(done("c2", "act", "second"), now);
    let actions = drain(&mut m);
    let request = model_request(&actions).expect("next turn");
    let texts: Vec<String> = request
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            agent_loop::ContentBlock::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["first", "second"]);
}

#[test]
fn a_final_answer_beside_an_early_call_still_running_waits_for_its_real_result() {
    let now = Instant::now();
    let mut m = machine();
    let options = agent_loop::agent::RunOptions::new().output(
        agent_loop::agent::StructuredOutput::from_schema(json!({"type": "object"})).unwrap(),
    );
    m.start_with("go", options, now);
    drain(&mut m);
    // A read-only call completes mid-stream and starts early.
    feed(&mut m, call_events("r1", "look", "{}"), now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    let actions = drain(&mut m);
    assert!(matches!(actions.last(), Some(Action::RunTools(calls)) if calls[0].id == "r1"));
    // Then a valid final answer, and the message ends: the run ends with this batch, but the
    // running call is answered by its own result, not as "not run".
    let mut stream = call_block(1, "f1", "final_answer", "{}");
    stream.push(stop(StopReason::ToolUse));
    let actions = feed(&mut m, stream, now);
    assert!(
        !events(&actions)
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolResult { id, .. } if id == "r1")),
        "{actions:#?}"
    );
    m.handle(done("r1", "look", "seen"), now);
    let actions = drain(&mut m);
    assert!(
        events(&actions)
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolResult { id, content, .. } if id == "r1" && content == "seen")),
        "{actions:#?}"
    );
    assert_eq!(
        outcome(&actions).map(|o| &o.termination),
        Some(&Termination::Completed)
    );
}

#[test]
fn answered_call_ids_are_remembered_for_the_first_65536_calls_of_a_run() {
    // Late progress is dropped by the ids of answered calls. That set is bounded: beyond
    // 65,536 ids a late progress is shown (harmless) instead of remembered. A response this
    // large also shows that results find their calls without a scan: quadratic work here
    // would take minutes.
    let now = Instant::now();
    let mut m = started(now);
    let calls = 65_538;
    for index in 0..calls {
        for event in call_block(index, &format!("c{index}"), "look", "{}") {
            m.handle(Input::ModelEvent(event), now);
        }
    }
    m.handle(Input::ModelEvent(stop(StopReason::ToolUse)), now);
    drain(&mut m);
    m.handle(Input::Approved(vec![ToolDecision::Allow; calls]), now);
    drain(&mut m);
    // c2 … c65537 fill the set; c1 is answered beyond it; c0 keeps the batch open.
    for index in (1..calls).rev() {
        m.handle(done(&format!("c{index}"), "look", "seen"), now);
    }
    let answered = events(&drain(&mut m))
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::ToolResult { .. }))
        .count();
    assert_eq!(answered, calls - 1);
    m.handle(Input::ToolProgress(progress("c2", "late")), now);
    assert!(events(&drain(&mut m)).is_empty());
    m.handle(Input::ToolProgress(progress("c1", "late")), now);
    let shown = drain(&mut m);
    assert!(
        matches!(events(&shown).as_slice(), [AgentEvent::ToolProgress { id, .. }] if id == "c1"),
        "{shown:#?}"
    );
    // c0's result completes the batch and ends the turn.
    m.handle(done("c0", "look", "seen"), now);
    assert!(events(&drain(&mut m))
        .iter()
        .any(|e| matches!(e, AgentEvent::TurnEnd { turn: 1, .. })));
}

#[test]
fn a_response_cut_off_after_an_early_call_answers_it_with_its_own_result() {
    // Found by tests/agent/machine_props.rs: a read-only call started early, then the response hit
    // max_tokens. The call was announced but never got its ToolResult event, and the history
    // said "not run" for a call that ran.
    let now = Instant::now();
    let mut m = started(now);
    feed(&mut m, call_events("r1", "look", "{}"), now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    m.handle(done("r1", "look", "seen"), now);
    // A second early call, still running when the response ends.
    feed(&mut m, call_block(1, "r2", "look", "{}"), now);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    let mut stream = call_block(2, "a1", "act", "{");
    stream.push(stop(StopReason::MaxTokens));
    let actions = feed(&mut m, stream, now);
    assert!(
        actions.iter().any(|a| matches!(a, Action::AbortTools)),
        "{actions:#?}"
    );
    let results = tool_results(&actions);
    assert_eq!(
        results,
        [
            ("r1", "seen"),
            ("r2", "not run: the response was cut off or refused")
        ]
    );
    assert_eq!(
        outcome(&actions).map(|o| &o.termination),
        Some(&Termination::MaxTokens)
    );
    let context = m.into_context();
    assert_eq!(history_violation(context.messages()), None);
    let history: Vec<(String, String)> = context.messages()[2]
        .content
        .iter()
        .filter_map(|b| match b {
            agent_loop::ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => Some((tool_use_id.clone(), content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(history[0], ("r1".into(), "seen".into()));
    assert_eq!(history[1].0, "r2");
    assert_eq!(history[2].0, "a1");
}

/// A sub-agent's event of call `id` (a path one step down).
fn nested(id: &str, event: AgentEvent) -> Input {
    Input::Nested(agent_loop::agent::NestedEvent::new(
        agent_loop::agent::AgentPath::from(vec![agent_loop::agent::PathStep::new("worker", id)]),
        event,
    ))
}

#[test]
fn sub_agents_events_are_taken_only_from_a_running_call_and_its_result_closes_them() {
    let now = Instant::now();
    let mut m = two_calls_asked(now);
    // Waiting for the hooks, no call runs: nothing nested is taken.
    let turn = AgentEvent::TurnStart { turn: 1 };
    assert_eq!(m.handle(nested("c1", turn.clone()), now), Handled::Ignored);
    m.handle(Input::Approved(vec![ToolDecision::Allow; 2]), now);
    drain(&mut m);
    // Running: taken and reported; an unknown call's is not.
    assert_eq!(m.handle(nested("c1", turn.clone()), now), Handled::Taken);
    assert_eq!(m.handle(nested("zz", turn.clone()), now), Handled::Ignored);
    let usage = agent_loop::Usage {
        input_tokens: 7,
        ..agent_loop::Usage::default()
    };
    m.handle(
        nested(
            "c1",
            AgentEvent::TurnEnd {
                turn: 1,
                stop_reason: StopReason::EndTurn,
                usage,
                cost: Default::default(),
            },
        ),
        now,
    );
    m.handle(nested("c2", turn.clone()), now);
    let reported = drain(&mut m);
    assert_eq!(events(&reported).len(), 3, "{reported:#?}");
    // c1's result closes its sub-agent's run (what it used rolls up); c2's run is still open.
    m.handle(done("c1", "act", "ok"), now);
    let closing = drain(&mut m);
    let shapes: Vec<String> = events(&closing)
        .iter()
        .map(|e| match e {
            AgentEvent::SubAgent { path, event } => match &**event {
                AgentEvent::Finished(o) => format!("{path} finished {}", o.termination),
                other => format!("{path} {other:?}"),
            },
            AgentEvent::ToolResult { id, .. } => format!("result {id}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(shapes, ["worker#c1 finished cancelled", "result c1"]);
    // After its result, the call's events are not taken.
    assert_eq!(m.handle(nested("c1", turn), now), Handled::Ignored);
    m.handle(done("c2", "act", "ok"), now);
    let actions = drain(&mut m);
    assert!(events(&actions)
        .iter()
        .any(|e| matches!(e, AgentEvent::SubAgent { .. })));
    m.handle(Input::Cancel, now);
    let actions = drain(&mut m);
    let outcome = outcome(&actions).expect("finished");
    assert_eq!(outcome.usage.input_tokens, 7);
    assert_eq!(outcome.sub_agents.len(), 2);
}

/// A driver of its own may run agents in read-only calls started early: their nested events
/// are taken while the model still streams, and only theirs.
#[test]
fn nested_events_of_a_call_started_early_are_taken_while_the_model_streams() {
    let now = Instant::now();
    let mut m = started(now);
    let turn = AgentEvent::TurnStart { turn: 1 };
    feed(&mut m, call_events("r1", "look", "{}"), now);
    // Asked about, not started yet.
    assert_eq!(m.handle(nested("r1", turn.clone()), now), Handled::Ignored);
    m.handle(Input::Approved(vec![ToolDecision::Allow]), now);
    drain(&mut m);
    assert_eq!(m.handle(nested("r1", turn.clone()), now), Handled::Taken);
    assert_eq!(m.handle(nested("r2", turn), now), Handled::Ignored);
    let actions = drain(&mut m);
    assert!(matches!(
        events(&actions).as_slice(),
        [AgentEvent::SubAgent { path, .. }] if path.to_string() == "worker#r1"
    ));
}

/// A driver puts the agent a kept handoff left in charge before the run starts: once, on a
/// route the agent can follow, and never after the run started.
#[test]
fn start_in_charge_follows_a_known_route_once_and_only_before_the_run() {
    let build = || {
        let billing = Agent::builder(ScriptedClient::new([]))
            .name("billing")
            .system("You handle refunds.")
            .build()
            .unwrap();
        Agent::builder(ScriptedClient::new([]))
            .name("triage")
            .system("You route.")
            .handoff(agent_loop::agent::Handoff::new(billing).keep())
            .build_machine()
            .unwrap()
    };
    let mut m = build();
    assert!(!m.start_in_charge(&[5]), "no such handoff");
    assert_eq!(m.config().name, "triage");
    assert!(m.start_in_charge(&[0]));
    assert_eq!(m.config().name, "billing");
    assert_eq!(m.context().system(), Some("You handle refunds."));
    assert_eq!(m.kept_route(), [0]);
    assert!(!m.start_in_charge(&[0]), "in charge already");
    let mut started = build();
    started.start("go", Instant::now());
    assert!(!started.start_in_charge(&[0]), "the run started");
    assert_eq!(started.config().name, "triage");
}
