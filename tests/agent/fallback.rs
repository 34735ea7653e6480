//! Fallback models through the public API: a run moves to another provider when its model is
//! overloaded (at once) or fails with server errors past its retries, or to a larger model on
//! a context overflow; the move is an event, the history stays valid for the new provider
//! (its mock server refuses what the real API refuses), and failures not chosen never move.

use std::sync::Arc;

use agent_loop::agent::RunPolicy;
use agent_loop::agent::{Fallback, FallbackOn};
use agent_loop::error::ApiError;
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::provider::ToolChoice;
use agent_loop::testing::{MockResponse, MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::RequestSettings;
use agent_loop::{Agent, AgentEvent, AnthropicClient, LlmError, OpenAiClient, Termination};
use serde_json::json;

use crate::common;
use common::agent::{echo_tool, run};
use common::grammar::grammar_violation;

fn fast() -> RetryPolicy {
    common::fast_retries().max_retries(2)
}

fn fallbacks(events: &[AgentEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Fallback { from, to, .. } => Some((from.clone(), to.clone())),
            _ => None,
        })
        .collect()
}

fn retries(events: &[AgentEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Retry { .. }))
        .count()
}

#[tokio::test]
async fn an_overloaded_model_moves_the_run_to_another_provider_at_once() {
    let anthropic = MockServer::start().await;
    let openai = MockServer::start().await;
    // A first turn on Anthropic calls a tool; the second is overloaded.
    anthropic.push(
        ScriptedResponse::tool_call("toolu_1", "echo", json!({"text": "hi"}))
            .model("claude-sonnet-4-5")
            .usage_tokens(1_000, 10),
    );
    anthropic.push(MockResponse::status(529).error_type("overloaded_error"));
    openai.push(
        ScriptedResponse::text("done on OpenAI")
            .model("gpt-4.1")
            .usage_tokens(2_000, 10),
    );
    let primary = AnthropicClient::new("k")
        .base_url(anthropic.anthropic_base_url())
        .model("claude-sonnet-4-5");
    let backup = OpenAiClient::new("k")
        .base_url(openai.openai_base_url())
        .model("gpt-4.1");
    let mut agent = Agent::builder(primary)
        .tool(echo_tool())
        .policy(RunPolicy::new().retry(fast()))
        .fallback(Fallback::new(backup))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed, "{events:#?}");
    assert_eq!(outcome.final_text, "done on OpenAI");
    assert_eq!(
        fallbacks(&events),
        [("claude-sonnet-4-5".to_owned(), "gpt-4.1".to_owned())]
    );
    // Overloaded: no retry of the overloaded model.
    assert_eq!(retries(&events), 0);
    assert_eq!(anthropic.requests().len(), 2);
    // OpenAI got the whole history, the Anthropic turn's call and result included, in its
    // own format, and found nothing wrong with it.
    let sent = openai.requests();
    assert_eq!(sent.len(), 1);
    let body = &sent[0].body;
    assert_eq!(body["model"], "gpt-4.1");
    let messages = body["messages"].as_array().unwrap();
    assert!(messages
        .iter()
        .any(|m| m["role"] == "tool" && m["tool_call_id"] == "toolu_1"));
    assert!(openai.history_violations().is_empty());
    assert!(anthropic.history_violations().is_empty());
    assert_eq!(grammar_violation(&events), None);
    // Each call is priced at its own model: $3 × 1,000 + $15 × 10 per million, then
    // $2 × 2,000 + $8 × 10 per million (the snapshot's prices).
    assert_eq!(
        outcome.cost.known().map(|c| c.picodollars()),
        Some(7_230_000_000)
    );
}

#[tokio::test]
async fn server_errors_move_the_run_once_the_retries_are_spent() {
    let primary = Arc::new(ScriptedClient::new((0..3).map(|_| {
        ScriptedResponse::error(LlmError::Api(Box::new(ApiError::new(500, "down"))))
    })));
    let backup = Arc::new(
        ScriptedClient::new([ScriptedResponse::text("backup answer")]).with_model("backup"),
    );
    let mut agent = Agent::builder(primary.clone())
        .settings(RequestSettings::new().model("primary"))
        .policy(RunPolicy::new().retry(fast()))
        .fallback(Fallback::new(backup.clone()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.final_text, "backup answer");
    // Two retries, then the move.
    assert_eq!(retries(&events), 2);
    assert_eq!(primary.requests().len(), 3);
    assert_eq!(
        fallbacks(&events),
        [("primary".to_owned(), "backup".to_owned())]
    );
    // The fallback's own model is asked for, not the primary's.
    assert_eq!(backup.requests()[0].model, None);
    assert_eq!(grammar_violation(&events), None);
}

#[tokio::test]
async fn a_context_overflow_moves_to_a_larger_model_instead_of_compacting() {
    let overflow = LlmError::ContextOverflow(Box::new(ApiError::new(400, "prompt is too long")));
    let primary = Arc::new(ScriptedClient::new([ScriptedResponse::error(overflow)]));
    let large = Arc::new(ScriptedClient::new([ScriptedResponse::text("read it all")]));
    let mut agent = Agent::builder(primary.clone())
        .settings(RequestSettings::new().model("small"))
        .fallback(
            Fallback::new(large.clone())
                .model("large")
                .on([FallbackOn::ContextOverflow]),
        )
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "a long document").await;
    assert_eq!(outcome.final_text, "read it all");
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::Compacted { .. })));
    assert_eq!(
        fallbacks(&events),
        [("small".to_owned(), "large".to_owned())]
    );
    assert_eq!(large.requests()[0].model.as_deref(), Some("large"));
    // The whole conversation went to the larger model.
    assert_eq!(large.requests()[0].messages.len(), 1);
}

#[tokio::test]
async fn fallbacks_are_tried_in_order_and_the_run_fails_when_they_all_do() {
    let overloaded =
        || ScriptedResponse::error(LlmError::Api(Box::new(ApiError::new(529, "busy"))));
    let a = Arc::new(ScriptedClient::new([overloaded()]).with_model("a"));
    let b = Arc::new(ScriptedClient::new([overloaded()]).with_model("b"));
    let c =
        Arc::new(ScriptedClient::new([overloaded(), overloaded(), overloaded()]).with_model("c"));
    let mut agent = Agent::builder(a)
        .policy(RunPolicy::new().retry(fast()))
        .fallback(Fallback::new(b))
        .fallback(Fallback::new(c.clone()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(
        fallbacks(&events),
        [
            ("a".to_owned(), "b".to_owned()),
            ("b".to_owned(), "c".to_owned())
        ]
    );
    // The last one has no fallback after it: its retries are spent, then the run fails.
    assert_eq!(retries(&events), 2);
    assert_eq!(c.requests().len(), 3);
    assert!(
        matches!(&outcome.termination, Termination::Error(e) if e.to_string().contains("529")),
        "{:?}",
        outcome.termination
    );
    assert_eq!(grammar_violation(&events), None);
}

#[tokio::test]
async fn failures_not_chosen_never_move_the_run() {
    // A bad request is no reason to move; nor is an overload when only server errors are.
    for (error, on) in [
        (
            ApiError::new(400, "bad"),
            vec![FallbackOn::Overloaded, FallbackOn::ServerError],
        ),
        (ApiError::new(529, "busy"), vec![FallbackOn::ServerError]),
    ] {
        let primary =
            Arc::new(ScriptedClient::new((0..3).map(|_| {
                ScriptedResponse::error(LlmError::Api(Box::new(error.clone())))
            })));
        let backup = Arc::new(ScriptedClient::new([ScriptedResponse::text("never")]));
        let mut agent = Agent::builder(primary)
            .policy(RunPolicy::new().retry(fast()))
            .fallback(Fallback::new(backup.clone()).on(on))
            .build()
            .unwrap();
        let (events, outcome) = run(&mut agent, "go").await;
        assert!(matches!(outcome.termination, Termination::Error(_)));
        assert!(fallbacks(&events).is_empty());
        assert!(backup.requests().is_empty());
    }
}

#[tokio::test]
async fn the_run_keeps_its_fallback_and_the_next_run_starts_on_its_own_model() {
    let primary = Arc::new(ScriptedClient::new([
        ScriptedResponse::error(LlmError::Api(Box::new(ApiError::new(529, "busy")))),
        ScriptedResponse::text("primary again"),
    ]));
    let backup = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("backup answer"),
    ]));
    let mut agent = Agent::builder(primary.clone())
        .tool(echo_tool())
        .fallback(Fallback::new(backup.clone()))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.final_text, "backup answer");
    // Both of the run's later turns went to the fallback.
    assert_eq!(backup.requests().len(), 2);
    assert_eq!(backup.requests()[1].tool_choice, ToolChoice::Auto);
    let (_, outcome) = run(&mut agent, "again").await;
    assert_eq!(outcome.final_text, "primary again");
    assert_eq!(primary.requests().len(), 2);
}

#[test]
fn a_fallback_shows_its_model_and_failures_when_debugged() {
    let fallback = Fallback::new(ScriptedClient::new([]).with_model("backup"))
        .model("big")
        .on([FallbackOn::ContextOverflow]);
    let shown = format!("{fallback:?}");
    assert!(shown.starts_with("Fallback"), "{shown}");
    assert!(
        shown.contains("\"big\"") && shown.contains("\"backup\""),
        "{shown}"
    );
    assert!(shown.contains("ContextOverflow"), "{shown}");
}
