//! Rate limits through the public API: the providers' headers reach the host as
//! `AgentEvent::RateLimits` with their exact figures, a refusal keeps them, a shared
//! `RateLimiter` paces runs so that a server enforcing the same limit refuses none, and a
//! cancelled run stops waiting for its turn.

use crate::common;
use agent_loop::agent::RunPolicy;
use agent_loop::RequestSettings;

use std::time::Duration;

use agent_loop::provider::transport::{PacingLimits, Quota, RateLimiter, RateLimits, RetryPolicy};
use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::{Agent, AgentEvent, AnthropicClient, Error, LlmError, OpenAiClient, Termination};
use common::agent::{run, run_cancelling};
use common::grammar::grammar_violation;

#[derive(Clone, Copy, Debug)]
enum Format {
    Anthropic,
    OpenAi,
}

fn agent(format: Format, server: &MockServer) -> agent_loop::AgentBuilder {
    match format {
        Format::Anthropic => Agent::builder(
            AnthropicClient::new("test-key")
                .base_url(server.anthropic_base_url())
                .model("m"),
        ),
        Format::OpenAi => Agent::builder(
            OpenAiClient::new("test-key")
                .base_url(server.openai_base_url())
                .model("m"),
        ),
    }
}

/// The mock's count of a request's tokens: its `max_tokens` plus a quarter of the bytes of its
/// conversation (MockServer::rate_limit).
fn counted_tokens(body: &serde_json::Value) -> u64 {
    let max_tokens = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|n| body.get(n).and_then(|v| v.as_u64()))
        .unwrap();
    let bytes: usize = ["system", "messages"]
        .iter()
        .filter_map(|n| body.get(n))
        .map(|v| serde_json::to_string(v).unwrap().len())
        .sum();
    max_tokens + bytes.div_ceil(4) as u64
}

fn limits_event(events: &[AgentEvent]) -> Vec<RateLimits> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::RateLimits(r) => Some(*r),
            _ => None,
        })
        .collect()
}

async fn headers_become_an_event_with_exact_figures(format: Format) {
    let server = MockServer::start().await;
    server.rate_limit(PacingLimits::per_minute().requests(60).tokens(600_000));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = agent(format, &server)
        .settings(RequestSettings::new().max_tokens(1000))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(grammar_violation(&events), None);
    let tokens = counted_tokens(&server.requests()[0].body);
    let seen = limits_event(&events);
    assert_eq!(seen.len(), 1, "{events:#?}");
    let r = seen[0];
    // 60 a minute: one per second back. 600,000 a minute: 10 per millisecond.
    let mut expected = RateLimits::default();
    expected.requests = quota(60, 59, Duration::from_secs(1));
    expected.tokens = quota(
        600_000,
        600_000 - tokens,
        Duration::from_millis(tokens.div_ceil(10)),
    );
    assert_eq!(r, expected, "{format:?}");
    // Inside the turn, before the answer's text.
    let at = |f: &dyn Fn(&AgentEvent) -> bool| events.iter().position(f).unwrap();
    assert!(
        at(&|e| matches!(e, AgentEvent::TurnStart { .. }))
            < at(&|e| matches!(e, AgentEvent::RateLimits(_)))
    );
    assert!(
        at(&|e| matches!(e, AgentEvent::RateLimits(_)))
            < at(&|e| matches!(e, AgentEvent::TextDelta { .. }))
    );
    assert_eq!(outcome.rate_limits.as_deref(), Some(&expected));
    assert_eq!(server.rate_limited(), 0);
}

fn quota(limit: u64, remaining: u64, reset: Duration) -> Quota {
    let mut q = Quota::default();
    q.limit = Some(limit);
    q.remaining = Some(remaining);
    q.reset = Some(reset);
    q
}

#[tokio::test]
async fn anthropic_headers_become_an_event_with_exact_figures() {
    headers_become_an_event_with_exact_figures(Format::Anthropic).await;
}

#[tokio::test]
async fn openai_headers_become_an_event_with_exact_figures() {
    headers_become_an_event_with_exact_figures(Format::OpenAi).await;
}

/// Over the limit: a 429 with the provider's error, `retry-after` and the figures, which the
/// client's error keeps.
async fn a_refusal_keeps_its_figures(format: Format) {
    let server = MockServer::start().await;
    server.rate_limit(PacingLimits::per_minute().requests(1));
    server.push(ScriptedResponse::text("first"));
    server.push(ScriptedResponse::text("never"));
    let no_retry = RetryPolicy::none();
    let mut first = agent(format, &server)
        .policy(RunPolicy::new().retry(no_retry.clone()))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut first, "hi").await;
    assert_eq!(outcome.termination, Termination::Completed);
    let mut second = agent(format, &server)
        .policy(RunPolicy::new().retry(no_retry))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut second, "hi").await;
    let Termination::Error(Error::Llm(LlmError::Api(error))) = &outcome.termination else {
        panic!("{:?}", outcome.termination);
    };
    assert_eq!(error.status, 429);
    assert_eq!(error.error_type.as_deref(), Some("rate_limit_error"));
    let figures = error.rate_limits.expect("the 429's figures");
    assert_eq!(figures.requests.limit, Some(1));
    assert_eq!(figures.requests.remaining, Some(0));
    // The one request comes back a minute after the first: 60 s, less the time between.
    let reset = figures.requests.reset.unwrap();
    assert!(
        reset > Duration::from_secs(50) && reset <= Duration::from_secs(60),
        "{reset:?}"
    );
    assert_eq!(figures.retry_after, error.retry_after);
    assert!(figures.retry_after.unwrap() > Duration::from_secs(50));
    assert!(limits_event(&events).is_empty(), "a refusal is no response");
    assert_eq!(server.rate_limited(), 1);
    assert_eq!(server.remaining(), 1, "a refusal does not use the script");
}

#[tokio::test]
async fn an_anthropic_refusal_keeps_its_figures() {
    a_refusal_keeps_its_figures(Format::Anthropic).await;
}

#[tokio::test]
async fn an_openai_refusal_keeps_its_figures() {
    a_refusal_keeps_its_figures(Format::OpenAi).await;
}

/// Runs `n` agents at once against `server`, each on its own conversation; the outcomes.
async fn run_many(
    format: Format,
    server: &MockServer,
    n: usize,
    limiter: Option<&RateLimiter>,
) -> Vec<Termination> {
    let runs = (0..n).map(|_| {
        let mut builder = agent(format, server).settings(RequestSettings::new().max_tokens(100));
        if let Some(limiter) = limiter {
            builder = builder.rate_limiter(limiter.clone());
        }
        let mut agent = builder.build().unwrap();
        async move { run(&mut agent, "hi").await.1.termination }
    });
    futures::future::join_all(runs).await
}

/// Two requests per half second: six runs at once. Unpaced, the server refuses some (they are
/// retried after its `retry-after`); paced by one limiter with the same limit, none.
#[tokio::test]
async fn a_shared_limiter_paces_runs_so_that_none_is_refused() {
    let limits = PacingLimits::per(Duration::from_millis(500))
        .requests(2)
        .tokens(100_000);
    for format in [Format::Anthropic, Format::OpenAi] {
        let server = MockServer::start().await;
        server.rate_limit(limits);
        for _ in 0..6 {
            server.push(ScriptedResponse::text("ok"));
        }
        let limiter = RateLimiter::new(limits);
        let outcomes = run_many(format, &server, 6, Some(&limiter)).await;
        assert!(
            outcomes.iter().all(|t| *t == Termination::Completed),
            "{outcomes:?}"
        );
        assert_eq!(server.rate_limited(), 0, "{format:?}");
        assert_eq!(server.requests().len(), 6);

        // The same runs unpaced: refused, then retried.
        let server = MockServer::start().await;
        server.rate_limit(limits);
        for _ in 0..6 {
            server.push(ScriptedResponse::text("ok"));
        }
        let outcomes = run_many(format, &server, 6, None).await;
        assert!(server.rate_limited() > 0, "{format:?}: {outcomes:?}");
        let completed = outcomes
            .iter()
            .filter(|t| **t == Termination::Completed)
            .count();
        assert_eq!(server.requests().len(), completed + server.rate_limited());
    }
}

/// With tokio's clock paused: six runs sharing a limiter of two calls per ten seconds take
/// twenty seconds of that clock (two at once, then one every five), and no less.
#[tokio::test(start_paused = true)]
async fn runs_sharing_a_limiter_wait_their_turn() {
    let limiter = RateLimiter::new(PacingLimits::per(Duration::from_secs(10)).requests(2));
    let start = tokio::time::Instant::now();
    let runs = (0..6).map(|_| {
        let client = ScriptedClient::new([ScriptedResponse::text("ok")]);
        let mut agent = Agent::builder(client)
            .rate_limiter(limiter.clone())
            .build()
            .unwrap();
        async move {
            let (_, outcome) = run(&mut agent, "hi").await;
            (outcome.termination, start.elapsed())
        }
    });
    let mut done = futures::future::join_all(runs).await;
    done.sort_by_key(|(_, at)| *at);
    assert!(done.iter().all(|(t, _)| *t == Termination::Completed));
    let at: Vec<u64> = done.iter().map(|(_, at)| at.as_secs()).collect();
    assert_eq!(at, [0, 0, 5, 10, 15, 20]);
}

/// A run waiting for its turn stops waiting when cancelled: it ends at once, and its request
/// is never sent.
#[tokio::test]
async fn a_cancelled_run_stops_waiting() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("never"));
    let limiter = RateLimiter::new(PacingLimits::per(Duration::from_secs(3600)).requests(1));
    limiter.acquire(0).await;
    let mut agent = agent(Format::Anthropic, &server)
        .rate_limiter(limiter)
        .build()
        .unwrap();
    let run = run_cancelling(&mut agent, "hi", |e| {
        matches!(e, AgentEvent::TurnStart { .. })
    });
    // An hour's wait if the cancel did not end it.
    let (events, outcome) = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the cancel ended the wait");
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_eq!(grammar_violation(&events), None);
    assert!(server.requests().is_empty(), "the request was sent");
}
