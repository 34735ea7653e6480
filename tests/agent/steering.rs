//! A host touching a live run through its handle: steering (`AgentHandle::steer`) at each
//! point of a turn, and stopping after the turn (`AgentHandle::stop_after_turn`) during a
//! model call and during tools.

use agent_loop::agent::AgentHandle;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::{Agent, AgentEvent, ContentBlock, Role, RunOutcome, Termination, UserInput};
use futures::StreamExt;
use serde_json::json;

use crate::common;
use common::agent::{add_tool, assert_valid, finished};
use common::grammar::grammar_violation;

/// Runs `agent` on "go"; `act` sees each event (before the run goes on) with the handle.
async fn run_acting(
    agent: &mut Agent,
    mut act: impl FnMut(&AgentEvent, &AgentHandle),
) -> (Vec<AgentEvent>, RunOutcome) {
    let handle = agent.handle();
    let mut events = Vec::new();
    {
        let mut stream = std::pin::pin!(agent.run("go"));
        while let Some(event) = stream.next().await {
            act(&event, &handle);
            events.push(event);
        }
    }
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    assert_valid(agent);
    finished(events)
}

/// Where the first event `pred` accepts is.
fn at(events: &[AgentEvent], pred: impl Fn(&AgentEvent) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("{events:#?}"))
}

fn steered(events: &[AgentEvent]) -> Vec<UserInput> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Steered { input } => Some(input.clone()),
            _ => None,
        })
        .collect()
}

fn text(s: &str) -> ContentBlock {
    ContentBlock::text(s)
}

/// A tool turn, then an answer.
fn tool_then_answer() -> ScriptedClient {
    ScriptedClient::new([
        ScriptedResponse::tool_call("a1", "add", json!({"a": 1, "b": 1})),
        ScriptedResponse::text("done"),
    ])
}

#[tokio::test]
async fn steering_while_the_final_answer_streams_goes_on_to_another_turn() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Paris").then_text(" it is."),
        ScriptedResponse::text("Lyon."),
    ]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let mut said = false;
    let (events, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::TextDelta { .. }) && !said {
            handle.steer("And the second city?");
            said = true;
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Lyon.");
    assert!(outcome.undelivered.is_empty());
    assert_eq!(
        steered(&events),
        vec![UserInput::text("And the second city?")]
    );
    // Between the turns: after the first's end, before the second's start.
    let landed = at(&events, |e| matches!(e, AgentEvent::Steered { .. }));
    assert!(matches!(
        events[landed - 1],
        AgentEvent::TurnEnd { turn: 1, .. }
    ));
    assert!(matches!(
        events[landed + 1],
        AgentEvent::TurnStart { turn: 2 }
    ));
    // In the history as the user's words, and sent with the second call.
    let messages = agent.messages();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    assert_eq!(messages[2].role, Role::User);
    assert_eq!(messages[2].content, vec![text("And the second city?")]);
    let second = &client.requests()[1];
    assert_eq!(
        second.messages.last().unwrap().content,
        vec![text("And the second city?")]
    );
}

#[tokio::test]
async fn steering_during_tools_lands_after_the_batch_results() {
    let client = tool_then_answer();
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.steer("use base 10");
            handle.steer("and be brief");
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert!(outcome.undelivered.is_empty());
    // Several, in the order given, after the call's result and its turn's end.
    assert_eq!(
        steered(&events),
        vec![
            UserInput::text("use base 10"),
            UserInput::text("and be brief")
        ]
    );
    let result = at(&events, |e| matches!(e, AgentEvent::ToolResult { .. }));
    let first = at(&events, |e| matches!(e, AgentEvent::Steered { .. }));
    let turn_end = at(&events, |e| {
        matches!(e, AgentEvent::TurnEnd { turn: 1, .. })
    });
    assert!(result < turn_end && turn_end < first, "{events:#?}");
    // Never between the call and its result: the results first, then the user's words.
    let messages = agent.messages();
    assert_eq!(
        messages[2].content,
        vec![
            ContentBlock::tool_result("a1", "2", false),
            text("use base 10"),
            text("and be brief")
        ]
    );
    assert_eq!(client.requests().len(), 2);
    assert_eq!(
        client.requests()[1].messages.last().unwrap().content,
        messages[2].content
    );
}

#[tokio::test]
async fn steering_between_turns_reaches_the_next_call() {
    let client = tool_then_answer();
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::TurnEnd { turn: 1, .. }) {
            handle.steer("one more thing");
        }
    })
    .await;
    assert!(outcome.undelivered.is_empty());
    let landed = at(&events, |e| matches!(e, AgentEvent::Steered { .. }));
    assert!(matches!(
        events[landed + 1],
        AgentEvent::TurnStart { turn: 2 }
    ));
    let second = &client.requests()[1];
    assert_eq!(
        second.messages.last().unwrap().content.last(),
        Some(&text("one more thing"))
    );
}

#[tokio::test]
async fn steering_after_the_final_answer_is_handed_back() {
    let client = ScriptedClient::new([ScriptedResponse::text("done")]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let (events, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::TurnEnd { .. }) {
            handle.steer("too late");
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.undelivered, vec![UserInput::text("too late")]);
    assert!(steered(&events).is_empty());
    assert_eq!(client.requests().len(), 1);
    assert_eq!(agent.messages().len(), 2, "not in the history");
}

#[tokio::test]
async fn a_cancelled_run_hands_back_what_it_did_not_deliver() {
    let client = tool_then_answer();
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.steer("first");
            handle.steer("second");
            handle.cancel();
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_eq!(
        outcome.undelivered,
        vec![UserInput::text("first"), UserInput::text("second")]
    );
    assert!(steered(&events).is_empty());
}

#[tokio::test]
async fn steering_between_runs_waits_for_the_next_run() {
    let client =
        ScriptedClient::new([ScriptedResponse::text("one"), ScriptedResponse::text("two")]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let _ = run_acting(&mut agent, |_, _| {}).await;
    agent.handle().steer("meanwhile");
    let (events, outcome) = run_acting(&mut agent, |_, _| {}).await;
    assert!(outcome.undelivered.is_empty());
    // Before the first turn, after the run's own input.
    assert!(
        matches!(events[0], AgentEvent::Steered { .. }),
        "{events:#?}"
    );
    assert_eq!(
        client.requests()[1].messages.last().unwrap().content,
        vec![text("go"), text("meanwhile")]
    );
}

#[tokio::test]
async fn stop_after_turn_during_a_model_call_finishes_the_turn_and_its_tools() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("a1", "add", json!({"a": 2, "b": 2})),
        ScriptedResponse::text("never asked"),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, outcome) = run_acting(&mut agent, |event, handle| {
        // The model is still streaming its call.
        if matches!(event, AgentEvent::ToolCallStart { .. }) {
            handle.stop_after_turn();
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::StoppedAfterTurn);
    assert_eq!(client.requests().len(), 1, "no second model call");
    // Nothing aborted: the call ran and its result is in the history.
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolResult { id, content, is_error: false, .. } if id == "a1" && content == "4"
    )));
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::TurnEnd { turn: 1, stop_reason, .. } if *stop_reason == agent_loop::StopReason::ToolUse
    )));
    assert_eq!(
        agent.messages().last().unwrap().content,
        vec![ContentBlock::tool_result("a1", "4", false)]
    );
}

#[tokio::test]
async fn stop_after_turn_during_tools_lets_them_finish() {
    let client = tool_then_answer();
    let mut agent = Agent::builder(client.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let (_, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            handle.stop_after_turn();
            // Words for a turn that will not come: handed back.
            handle.steer("later");
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::StoppedAfterTurn);
    assert_eq!(outcome.undelivered, vec![UserInput::text("later")]);
    assert_eq!(client.requests().len(), 1);
    assert_eq!(
        agent.messages().last().unwrap().content,
        vec![ContentBlock::tool_result("a1", "2", false)]
    );
    // The request applied to that run only.
    let (_, outcome) = run_acting(&mut agent, |_, _| {}).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "done");
}

#[tokio::test]
async fn stop_after_turn_on_a_final_answer_ends_as_completed() {
    let client = ScriptedClient::new([ScriptedResponse::text("a").then_text("b")]);
    let mut agent = Agent::builder(client).build().unwrap();
    let (_, outcome) = run_acting(&mut agent, |event, handle| {
        if matches!(event, AgentEvent::TextDelta { .. }) {
            handle.stop_after_turn();
        }
    })
    .await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "ab");
}
