//! The fault suite: full agent runs (`Agent::builder(client)…run(..)`) against the loopback
//! [`MockServer`] with the real `AnthropicClient` and `OpenAiClient`, one test per fault, each
//! written once and run for both wire formats where the fault applies.
//!
//! Every test asserts:
//! - the recovery or termination (`RunOutcome::termination`, final text);
//! - the exact sequence of events, retries with their reported delay (`Retry 1 10ms`);
//! - the number of requests the server saw;
//! - a valid history afterwards, with nothing lost and nothing half-received kept: the
//!   agent's own check (`history_violation`), the server's check of every request it received,
//!   and the exact messages of `agent.messages()`.
//!
//! Two retry layers are visible here. The clients retry failures *before any content* per
//! their own [`RetryPolicy`] (here 10 ms, doubling, no jitter); the agent re-sends the turn
//! when a stream broke *after content* per the agent's policy (here 50 ms, doubling, no
//! jitter). The delays in `Retry` events tell which layer acted.
//!
//! Time is tokio's paused clock: timeouts and backoffs auto-advance while every task waits,
//! so a test takes a few milliseconds of wall time whatever the configured durations.
//! Tests that found bugs assert what should happen; the bugs they found are fixed.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent_loop::agent::RunPolicy;
use agent_loop::context::{CharEstimateCounter, ContextConfig};
use agent_loop::error::TimeoutKind;
use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse, StreamPoint};
use agent_loop::tool::FnTool;
use agent_loop::wire::StreamLimits;
use agent_loop::{
    Agent, AgentBuilder, AgentEvent, AnthropicClient, ContentBlock, ContextManager, Error,
    LlmClient, LlmError, Message, OpenAiClient, Role, RunOutcome, Termination, ToolContext,
    ToolError, ToolRegistry,
};
use serde_json::json;

use crate::common;
use common::agent::{
    assert_valid, echo_tool, result_event, result_in_history, run, run_cancelling,
};

const KEY: &str = "sk-fault-suite-0123456789-secret";

/// The wire format a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Anthropic,
    OpenAi,
}

/// Generates one `#[tokio::test]` per wire format for `async fn $body(format: Format)`, in a
/// module named after the fault: `fault_name::anthropic`, `fault_name::openai`.
/// `anthropic_only` generates only the Anthropic test; attributes (such as
/// `#[ignore = "BUG: …"]`) apply to every generated test.
macro_rules! fault {
    ($(#[$attr:meta])* $name:ident => $body:ident) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(#[$attr])*
            #[tokio::test(start_paused = true)]
            async fn anthropic() {
                super::$body(Format::Anthropic).await
            }
            $(#[$attr])*
            #[tokio::test(start_paused = true)]
            async fn openai() {
                super::$body(Format::OpenAi).await
            }
        }
    };
    (anthropic_only $(#[$attr:meta])* $name:ident => $body:ident) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(#[$attr])*
            #[tokio::test(start_paused = true)]
            async fn anthropic() {
                super::$body(Format::Anthropic).await
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Clients, agents, runs
// ---------------------------------------------------------------------------------------------

/// The clients' retry policy: 10, 20, 40 ms, then give up. An agent adopts its client's
/// policy and owns every retry of a run with it (before content and after).
fn client_retries() -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(3)
        .initial_backoff(Duration::from_millis(10))
        .jitter(Jitter::None)
}

const IDLE: Duration = Duration::from_millis(200);
const FIRST_BYTE: Duration = Duration::from_millis(300);

/// Client settings a test may change.
struct Opts {
    retry: RetryPolicy,
    limits: Option<StreamLimits>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            retry: client_retries(),
            limits: None,
        }
    }
}

fn base_url(format: Format, server: &MockServer) -> String {
    match format {
        Format::Anthropic => server.anthropic_base_url(),
        Format::OpenAi => server.openai_base_url(),
    }
}

/// The real client for `format`, pointed at `base_url`, with small timeouts.
fn client_at(format: Format, base_url: String, opts: Opts) -> Box<dyn LlmClient> {
    match format {
        Format::Anthropic => {
            let mut c = AnthropicClient::new(KEY)
                .base_url(base_url)
                .model("claude-test")
                .idle_timeout(IDLE)
                .first_byte_timeout(FIRST_BYTE)
                .retry_policy(opts.retry);
            if let Some(limits) = opts.limits {
                c = c.stream_limits(limits);
            }
            Box::new(c)
        }
        Format::OpenAi => {
            let mut c = OpenAiClient::new(KEY)
                .base_url(base_url)
                .model("gpt-test")
                .idle_timeout(IDLE)
                .first_byte_timeout(FIRST_BYTE)
                .retry_policy(opts.retry);
            if let Some(limits) = opts.limits {
                c = c.stream_limits(limits);
            }
            Box::new(c)
        }
    }
}

fn client(format: Format, server: &MockServer) -> Box<dyn LlmClient> {
    client_at(format, base_url(format, server), Opts::default())
}

/// An agent builder with the suite's retry policy and the `echo` tool (no tools: `bare`).
fn builder(client: Box<dyn LlmClient>) -> AgentBuilder {
    bare(client).tool(echo_tool())
}

/// An agent builder (with its client's retry policy). Tokens are estimated from characters:
/// the suite is about faults, and building the tiktoken encoder costs about a second of CPU
/// per test process in debug builds.
fn bare(client: Box<dyn LlmClient>) -> AgentBuilder {
    let context = ContextManager::new(ContextConfig::for_model(client.model()))
        .with_counter(CharEstimateCounter);
    Agent::builder(client)
        .system("You are under test.")
        .context(context)
}

/// A tool that counts its calls (to prove a call did or did not run).
fn counting_tool(name: &'static str, runs: Arc<AtomicU32>) -> impl agent_loop::Tool {
    FnTool::new(name, "Counts.", move |_: serde_json::Value, _ctx| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("counted")
        }
    })
}

/// The events in a compact form: kinds with the data that identifies them. `Retry` carries
/// its attempt and reported delay; `ToolResult` its id and whether it is an error.
fn kinds(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            AgentEvent::TurnStart { turn } => format!("TurnStart {turn}"),
            AgentEvent::TextDelta { text } => format!("Text {text}"),
            AgentEvent::ThinkingDelta { text } => format!("Thinking {text}"),
            AgentEvent::ToolCallStart { id, name } => format!("CallStart {id} {name}"),
            AgentEvent::ToolInputDelta { id, .. } => format!("Input {id}"),
            AgentEvent::ToolCall { id, name, .. } => format!("Call {id} {name}"),
            AgentEvent::ToolResult { id, is_error, .. } => {
                format!("Result {id}{}", if *is_error { " error" } else { "" })
            }
            AgentEvent::Retry { attempt, delay, .. } => format!("Retry {attempt} {delay:?}"),
            AgentEvent::Compacted { .. } => "Compacted".to_owned(),
            AgentEvent::TurnEnd {
                turn, stop_reason, ..
            } => format!("TurnEnd {turn} {stop_reason:?}"),
            AgentEvent::Finished(o) => format!("Finished {}", termination_kind(&o.termination)),
            other => format!("{other:?}"),
        })
        .collect()
}

fn termination_kind(t: &Termination) -> String {
    match t {
        Termination::Completed => "Completed".into(),
        Termination::Cancelled => "Cancelled".into(),
        Termination::MaxTurns => "MaxTurns".into(),
        Termination::Error(_) => "Error".into(),
        Termination::RepeatedToolCall { name, times } => format!("RepeatedToolCall {name} {times}"),
        Termination::ToolFailures { turns } => format!("ToolFailures {turns}"),
        other => format!("{other:?}"),
    }
}

#[track_caller]
fn assert_events(events: &[AgentEvent], expected: &[&str]) {
    assert_eq!(kinds(events), expected, "events: {events:#?}");
}

/// The `error` strings of the `Retry` events.
fn retry_errors(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retry { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect()
}

/// The error that ended the run.
#[track_caller]
fn run_error(outcome: &RunOutcome) -> &Error {
    match &outcome.termination {
        Termination::Error(e) => e,
        other => panic!("expected Termination::Error, got {other:?}"),
    }
}

#[track_caller]
fn llm_error(outcome: &RunOutcome) -> &LlmError {
    match run_error(outcome) {
        Error::Llm(e) => e,
        other => panic!("expected Error::Llm, got {other:?}"),
    }
}

/// The history in a compact form, one line per message, for exact comparison: nothing lost,
/// nothing duplicated, nothing half-received.
fn history(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                _ => "other",
            };
            let blocks: Vec<String> = m
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { text } => format!("text {text:?}"),
                    ContentBlock::ToolUse { id, name, input } => {
                        format!("tool_use {id} {name} {input}")
                    }
                    ContentBlock::ToolResult {
                        tool_use_id,
                        is_error,
                        ..
                    } => format!(
                        "tool_result {tool_use_id}{}",
                        if *is_error { " error" } else { "" }
                    ),
                    other => format!("{other:?}"),
                })
                .collect();
            format!("{role}: {}", blocks.join(" | "))
        })
        .collect()
}

/// The history is valid for the agent and for every request the server received, and is
/// exactly `expected`.
#[track_caller]
fn assert_history(agent: &Agent, server: Option<&MockServer>, expected: &[&str]) {
    assert_valid(agent);
    if let Some(server) = server {
        assert_eq!(server.history_violations(), Vec::<String>::new());
    }
    assert_eq!(
        history(&agent.messages()),
        expected,
        "{:#?}",
        agent.messages()
    );
}

/// A re-sent turn sends exactly what the first attempt sent: nothing of the broken attempt
/// leaks into the request.
#[track_caller]
fn assert_resent_unchanged(server: &MockServer) {
    let requests = server.requests();
    for r in &requests[1..] {
        assert_eq!(r.body, requests[0].body, "a retry changed the request");
    }
}

// ---------------------------------------------------------------------------------------------
// Status codes and retry headers (retried by the client, before any content)
// ---------------------------------------------------------------------------------------------

/// 429 with `retry-after: 1`: the client waits the requested second and succeeds.
async fn rate_limited_retry_after_seconds(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(429).retry_after(1));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 1s",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert!(retry_errors(&events)[0].contains("429"), "{events:?}");
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_resent_unchanged(&server);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(rate_limited_429_retry_after => rate_limited_retry_after_seconds);

/// 429 with `retry-after-ms: 250` (and a coarser `retry-after: 5`): the milliseconds win.
async fn rate_limited_retry_after_ms(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(429).retry_after(5).retry_after_ms(250));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 250ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(rate_limited_429_retry_after_ms => rate_limited_retry_after_ms);

/// 503 with `retry-after` as an HTTP date about 3 s ahead: the client waits until then.
async fn retry_after_http_date(format: Format) {
    let server = MockServer::start().await;
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3));
    server.push(MockResponse::status(503).header("retry-after", date));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    let k = kinds(&events);
    assert_eq!(k.len(), 5, "{k:?}");
    assert_eq!(k[0], "TurnStart 1");
    assert!(k[1].starts_with("Retry 1 "), "{k:?}");
    assert_eq!(
        &k[2..],
        ["Text Hello!", "TurnEnd 1 EndTurn", "Finished Completed"]
    );
    // HTTP dates have a one-second resolution: the delay is between 2 and 3 seconds.
    let delay = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Retry { delay, .. } => Some(*delay),
            _ => None,
        })
        .unwrap();
    assert!(
        delay > Duration::from_millis(1500) && delay <= Duration::from_secs(3),
        "{delay:?}"
    );
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(retry_after_http_date_503 => retry_after_http_date);

/// 503 with `x-should-retry: false`: the server's verdict wins; the run ends at once.
async fn should_retry_false_on_503(format: Format) {
    let server = MockServer::start().await;
    server.push(
        MockResponse::status(503)
            .error_message("maintenance, do not retry")
            .should_retry(false),
    );
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    let error = llm_error(&outcome);
    assert_eq!(error.status(), Some(503));
    assert!(!error.is_retryable());
    assert!(
        error.to_string().contains("maintenance, do not retry"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);
}
fault!(should_retry_false_on_503 => should_retry_false_on_503);

/// 400 with `x-should-retry: true`: by policy 400 is never retried (a resend cannot succeed),
/// whatever the header says. The provider's message surfaces.
async fn should_retry_true_on_400(format: Format) {
    let server = MockServer::start().await;
    server.push(
        MockResponse::status(400)
            .error_message("messages: field required")
            .should_retry(true),
    );
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    let error = llm_error(&outcome);
    assert_eq!(error.status(), Some(400));
    assert!(
        error.to_string().contains("messages: field required"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);
}
fault!(should_retry_true_on_400 => should_retry_true_on_400);

/// Anthropic 529 `overloaded_error` twice: retried with exponential backoff, then success.
async fn overloaded_529(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(529).error_message("Overloaded"));
    server.push(MockResponse::status(529).error_message("Overloaded"));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Retry 2 20ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert!(retry_errors(&events)
        .iter()
        .all(|e| e.contains("529") && e.contains("Overloaded")));
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 3);
    assert_resent_unchanged(&server);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(anthropic_only overloaded_529 => overloaded_529);

/// 500 once, then success.
async fn server_error_then_success(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(500));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert!(retry_errors(&events)[0].contains("500"), "{events:?}");
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(server_error_500_then_success => server_error_then_success);

/// 500 on every attempt: three retries (10, 20, 40 ms), then the error surfaces.
async fn server_error_exhausted(format: Format) {
    let server = MockServer::start().await;
    for _ in 0..4 {
        server.push(MockResponse::status(500).error_message("boom"));
    }
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Retry 2 20ms",
            "Retry 3 40ms",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    assert_eq!(llm_error(&outcome).status(), Some(500));
    assert_eq!(server.requests().len(), 4);
    assert_eq!(server.remaining(), 0);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);
}
fault!(server_error_500_retries_exhausted => server_error_exhausted);

/// 401: never retried; the message names the key variable to check, never the key.
async fn unauthorized_401(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(401).error_message("invalid x-api-key"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    let message = run_error(&outcome).to_string();
    let variable = match format {
        Format::Anthropic => "ANTHROPIC_API_KEY",
        Format::OpenAi => "OPENAI_API_KEY",
    };
    assert!(message.contains(variable), "{message}");
    assert!(message.contains("invalid x-api-key"), "{message}");
    assert!(!message.contains(KEY), "{message}");
    assert!(!format!("{:?}", outcome.termination).contains(KEY));
    assert_eq!(server.requests().len(), 1);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);
}
fault!(unauthorized_401 => unauthorized_401);

// ---------------------------------------------------------------------------------------------
// Connection faults before any content (retried by the client)
// ---------------------------------------------------------------------------------------------

/// A closed port: connection refused, retried three times, then a `Connect` error.
async fn connection_refused(format: Format) {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let base = match format {
        Format::Anthropic => format!("http://127.0.0.1:{port}/anthropic"),
        Format::OpenAi => format!("http://127.0.0.1:{port}/v1"),
    };
    let mut agent = builder(client_at(format, base, Opts::default()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Retry 2 20ms",
            "Retry 3 40ms",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    let error = llm_error(&outcome);
    assert!(matches!(error, LlmError::Connect { .. }), "{error:?}");
    assert_history(&agent, None, &["user: text \"hi\""]);
}
fault!(connection_refused => connection_refused);

/// A server that reads the request and never sends headers: first-byte timeout, retried.
async fn no_headers(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::no_headers());
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    let expected = LlmError::Timeout {
        kind: TimeoutKind::FirstByte,
        after: FIRST_BYTE,
    };
    assert_eq!(retry_errors(&events), [expected.to_string()]);
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_resent_unchanged(&server);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(no_headers_first_byte_timeout => no_headers);

/// The connection drops after the preamble, before any content: the client retries.
async fn disconnect_before_content(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::stream(ScriptedResponse::text("lost")).disconnect_before_content());
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert!(
        retry_errors(&events)[0].contains("connection lost"),
        "{events:?}"
    );
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(disconnect_before_content => disconnect_before_content);

// ---------------------------------------------------------------------------------------------
// Faults after content (the agent re-sends the turn)
// ---------------------------------------------------------------------------------------------

/// The expected events of a turn that broke after "Hel" and was re-sent once by the agent.
const RESENT_ONCE: [&str; 6] = [
    "TurnStart 1",
    "Text Hel",
    "Retry 1 10ms",
    "Text Hello!",
    "TurnEnd 1 EndTurn",
    "Finished Completed",
];

/// Checks a turn re-sent once after `broken` failed after its first content.
async fn resent_after_content(format: Format, broken: MockResponse, error_contains: &str) {
    let server = MockServer::start().await;
    server.push(broken);
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(&events, &RESENT_ONCE);
    let errors = retry_errors(&events);
    assert!(errors[0].contains(error_contains), "{errors:?}");
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(outcome.turns, 1);
    assert_eq!(server.requests().len(), 2);
    assert_resent_unchanged(&server);
    // One clean answer: nothing of the broken attempt is kept.
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}

fn hel_lo() -> MockResponse {
    MockResponse::stream(ScriptedResponse::text("Hel").then_text("lo, world"))
}

/// The connection drops right after the first content event: the agent re-sends the turn.
async fn disconnect_after_content(format: Format) {
    resent_after_content(
        format,
        hel_lo().disconnect_after_first_content(),
        "connection lost",
    )
    .await;
}
fault!(disconnect_after_content => disconnect_after_content);

/// After some content the server stalls, sending keep-alives: the idle timeout fires (pings
/// do not reset it), then the agent re-sends the turn.
async fn stall_with_keep_alives(format: Format) {
    let broken = hel_lo().stall_at(
        StreamPoint::AfterFirstContent,
        Some(Duration::from_millis(50)),
    );
    let timeout = LlmError::Timeout {
        kind: TimeoutKind::Idle,
        after: IDLE,
    };
    resent_after_content(format, broken, &timeout.to_string()).await;
}
fault!(stall_after_content_with_keep_alives => stall_with_keep_alives);

/// An `overloaded_error` event inside a 200 stream before any content: the client retries.
async fn error_event_before_content(format: Format) {
    let server = MockServer::start().await;
    server.push(
        MockResponse::stream(ScriptedResponse::text("never")).error_event_at(
            StreamPoint::BeforeContent,
            "overloaded_error",
            "Overloaded",
        ),
    );
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert!(
        retry_errors(&events)[0].contains("overloaded_error"),
        "{events:?}"
    );
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(error_event_before_content => error_event_before_content);

/// An `overloaded_error` event inside a 200 stream after content: the agent re-sends.
async fn error_event_after_content(format: Format) {
    let broken = hel_lo().error_event_at(
        StreamPoint::AfterFirstContent,
        "overloaded_error",
        "Overloaded",
    );
    resent_after_content(format, broken, "overloaded_error").await;
}
fault!(error_event_after_content => error_event_after_content);

/// The body ends cleanly after the content but without the end-of-message marker: an
/// `Incomplete` error, never a silently shorter answer; the agent re-sends.
async fn truncated(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::stream(ScriptedResponse::text("Hel")).truncated());
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(&events, &RESENT_ONCE);
    assert!(
        retry_errors(&events)[0].contains("stream ended before the response was complete"),
        "{events:?}"
    );
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_resent_unchanged(&server);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(clean_end_without_end_marker => truncated);

/// A truncated tool call (arguments complete, end marker missing) is never executed: the
/// agent re-sends the turn and runs only the complete call.
async fn truncated_tool_call_not_run(format: Format) {
    let server = MockServer::start().await;
    let runs = Arc::new(AtomicU32::new(0));
    server.push(
        MockResponse::stream(ScriptedResponse::tool_call("c1", "count", json!({}))).truncated(),
    );
    server.push(ScriptedResponse::tool_call("c1", "count", json!({})));
    server.push(ScriptedResponse::text("Counted once."));
    let mut agent = builder(client(format, &server))
        .tool(counting_tool("count", runs.clone()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "count").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "CallStart c1 count",
            "Input c1",
            "Retry 1 10ms",
            "CallStart c1 count",
            "Input c1",
            "Call c1 count",
            "Result c1",
            "TurnEnd 1 ToolUse",
            "TurnStart 2",
            "Text Counted once.",
            "TurnEnd 2 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the truncated call never ran"
    );
    assert_eq!(server.requests().len(), 3);
    assert_history(
        &agent,
        Some(&server),
        &[
            "user: text \"count\"",
            "assistant: tool_use c1 count {}",
            "user: tool_result c1",
            "assistant: text \"Counted once.\"",
        ],
    );
}
fault!(truncated_tool_call_is_not_run => truncated_tool_call_not_run);

/// A corrupted JSON event after content: `Malformed`, and the agent re-sends the turn.
async fn corrupted_json_after_content(format: Format) {
    let broken = MockResponse::stream(ScriptedResponse::text("Hel").then_fail(
        LlmError::Malformed {
            message: "corrupted".into(),
        },
    ));
    resent_after_content(format, broken, "malformed stream").await;
}
fault!(corrupted_json_event_after_content => corrupted_json_after_content);

/// A corrupted JSON event before any content: the client retries.
async fn corrupted_json_before_content(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::stream(ScriptedResponse::new().then_fail(
        LlmError::Malformed {
            message: "corrupted".into(),
        },
    )));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert!(
        retry_errors(&events)[0].contains("malformed stream"),
        "{events:?}"
    );
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(corrupted_json_event_before_content => corrupted_json_before_content);

/// Every attempt breaks after content: the agent re-sends three times (10, 20, 40 ms), then
/// gives up. The partial answers are not kept; the user message is.
async fn broken_after_content_exhausted(format: Format) {
    let server = MockServer::start().await;
    for _ in 0..4 {
        server.push(hel_lo().disconnect_after_first_content());
    }
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Text Hel",
            "Retry 1 10ms",
            "Text Hel",
            "Retry 2 20ms",
            "Text Hel",
            "Retry 3 40ms",
            "Text Hel",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    assert!(matches!(llm_error(&outcome), LlmError::Transport { .. }));
    assert_eq!(outcome.final_text, "");
    assert_eq!(server.requests().len(), 4);
    assert_resent_unchanged(&server);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);
}
fault!(broken_after_content_retries_exhausted => broken_after_content_exhausted);

/// Failures before and after content in one turn: a 500, then a stream broken after content,
/// then a 503, then success. The agent owns every retry of the run, so the turn counts them
/// once, with one policy: 10, 20, 40 ms.
async fn both_layers(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(500));
    server.push(hel_lo().disconnect_after_first_content());
    server.push(MockResponse::status(503));
    server.push(ScriptedResponse::text("Hello!"));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 10ms",
            "Text Hel",
            "Retry 2 20ms",
            "Retry 3 40ms",
            "Text Hello!",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(outcome.final_text, "Hello!");
    assert_eq!(server.requests().len(), 4);
    assert_resent_unchanged(&server);
    assert_history(
        &agent,
        Some(&server),
        &["user: text \"hi\"", "assistant: text \"Hello!\""],
    );
}
fault!(retries_in_both_layers_in_one_turn => both_layers);

// ---------------------------------------------------------------------------------------------
// Limits on untrusted input
// ---------------------------------------------------------------------------------------------

fn small_limits(tool_args: usize, event: usize) -> StreamLimits {
    let mut limits = StreamLimits::default();
    limits.max_tool_args_bytes = tool_args;
    limits.max_event_bytes = event;
    limits
}

/// Tool arguments over the client's `max_tool_args_bytes`: a clear `LimitExceeded` naming
/// the setting; not retried (a resend would be as large); the call is never run.
async fn oversize_tool_args(format: Format) {
    let server = MockServer::start().await;
    let runs = Arc::new(AtomicU32::new(0));
    server.push(
        ScriptedResponse::tool_call("c1", "count", json!({"blob": "x".repeat(500)})).chunked(50),
    );
    let opts = Opts {
        limits: Some(small_limits(128, 1 << 20)),
        ..Opts::default()
    };
    let mut agent = builder(client_at(format, base_url(format, &server), opts))
        .tool(counting_tool("count", runs.clone()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    let error = llm_error(&outcome);
    assert!(
        matches!(error, LlmError::LimitExceeded { limit: 128, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("max_tool_args_bytes"), "{error}");
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::Retry { .. } | AgentEvent::ToolCall { .. })));
    assert_eq!(kinds(&events).last().unwrap(), "Finished Error");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(server.requests().len(), 1);
    assert_history(&agent, Some(&server), &["user: text \"go\""]);
}
fault!(
    oversize_tool_arguments => oversize_tool_args
);

/// One SSE event over the client's `max_event_bytes`: `LimitExceeded` naming the setting,
/// not retried.
async fn oversize_event(format: Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("y".repeat(4096)));
    let opts = Opts {
        limits: Some(small_limits(1 << 20, 1024)),
        ..Opts::default()
    };
    let mut agent = builder(client_at(format, base_url(format, &server), opts))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "hi").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Error",
        ],
    );
    let error = llm_error(&outcome);
    assert!(
        matches!(error, LlmError::LimitExceeded { limit: 1024, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("max_event_bytes"), "{error}");
    assert_eq!(server.requests().len(), 1);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);
}
fault!(oversize_event => oversize_event);

// ---------------------------------------------------------------------------------------------
// Tool faults (an is_error result the model reads; the loop goes on)
// ---------------------------------------------------------------------------------------------

/// Checks a two-turn run whose only tool call `c1` failed with a message containing
/// `contains`, then the model answered "Recovered.".
#[track_caller]
fn assert_tool_failed_then_recovered(
    agent: &Agent,
    server: &MockServer,
    outcome: &RunOutcome,
    call: &str,
    contains: &str,
) {
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Recovered.");
    assert_eq!(outcome.turns, 2);
    assert_eq!(server.requests().len(), 2);
    let (content, is_error) = result_in_history(agent, "c1");
    assert!(is_error && content.contains(contains), "{content}");
    // The model read the failure in the second request.
    let sent = server.requests()[1].body.to_string();
    assert!(sent.contains(&contains.replace('"', "\\\"")), "{sent}");
    assert_history(
        agent,
        Some(server),
        &[
            "user: text \"go\"",
            &format!("assistant: tool_use c1 {call}"),
            "user: tool_result c1 error",
            "assistant: text \"Recovered.\"",
        ],
    );
}

/// Tool arguments that are not JSON: the call is not run; an error result quotes them.
async fn tool_args_not_json(format: Format) {
    let server = MockServer::start().await;
    let runs = Arc::new(AtomicU32::new(0));
    server.push(ScriptedResponse::tool_call_raw("c1", "count", "{\"n\": 1,"));
    server.push(ScriptedResponse::text("Recovered."));
    let mut agent = builder(client(format, &server))
        .tool(counting_tool("count", runs.clone()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // The history keeps the call with an empty input (the raw text is not JSON) and answers
    // it with an error quoting what was received.
    assert_tool_failed_then_recovered(
        &agent,
        &server,
        &outcome,
        "count {}",
        "invalid arguments for tool \"count\"",
    );
    let (content, _) = result_in_history(&agent, "c1");
    assert!(content.contains("received: {\"n\": 1,"), "{content}");
    // The host sees the failure too: the call is announced and answered, never run.
    assert_eq!(
        kinds(&events),
        [
            "TurnStart 1",
            "CallStart c1 count",
            "Input c1",
            "Call c1 count",
            "Result c1 error",
            "TurnEnd 1 ToolUse",
            "TurnStart 2",
            "Text Recovered.",
            "TurnEnd 2 EndTurn",
            "Finished Completed",
        ],
        "{events:#?}"
    );
    assert!(result_event(&events, "c1").contains("invalid arguments for tool \"count\""));
}
fault!(
    tool_arguments_not_json => tool_args_not_json
);

/// A call of a tool that does not exist: an error result listing the available tools.
async fn unknown_tool(format: Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call("c1", "nope", json!({"q": 1})));
    server.push(ScriptedResponse::text("Recovered."));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "CallStart c1 nope",
            "Input c1",
            "Call c1 nope",
            "Result c1 error",
            "TurnEnd 1 ToolUse",
            "TurnStart 2",
            "Text Recovered.",
            "TurnEnd 2 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(
        result_event(&events, "c1"),
        "unknown tool \"nope\"; available tools: \"echo\""
    );
    assert_tool_failed_then_recovered(
        &agent,
        &server,
        &outcome,
        "nope {\"q\":1}",
        "unknown tool \"nope\"",
    );
}
fault!(unknown_tool => unknown_tool);

/// A tool that panics: the panic is contained and becomes an error result.
async fn tool_panics(format: Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call("c1", "boom", json!({})));
    server.push(ScriptedResponse::text("Recovered."));
    let boom = FnTool::new("boom", "Panics.", |_: serde_json::Value, _ctx| async move {
        if true {
            panic!("kaboom at the tool");
        }
        Ok::<_, ToolError>("never")
    });
    let mut agent = builder(client(format, &server)).tool(boom).build().unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "CallStart c1 boom",
            "Input c1",
            "Call c1 boom",
            "Result c1 error",
            "TurnEnd 1 ToolUse",
            "TurnStart 2",
            "Text Recovered.",
            "TurnEnd 2 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(
        result_event(&events, "c1"),
        "tool \"boom\" panicked: kaboom at the tool"
    );
    assert_tool_failed_then_recovered(
        &agent,
        &server,
        &outcome,
        "boom {}",
        "panicked: kaboom at the tool",
    );
}
fault!(tool_panics => tool_panics);

/// A tool that hangs past the registry's default timeout: stopped, answered as timed out.
async fn tool_hangs(format: Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call("c1", "hang", json!({})));
    server.push(ScriptedResponse::text("Recovered."));
    let stopped = Arc::new(AtomicU32::new(0));
    let seen = stopped.clone();
    let hang = FnTool::new(
        "hang",
        "Hangs.",
        move |_: serde_json::Value, ctx: ToolContext| {
            let seen = seen.clone();
            async move {
                // Counts the cancellation the timeout sends, if the future is still polled.
                struct OnDrop(Arc<AtomicU32>);
                impl Drop for OnDrop {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _guard = OnDrop(seen);
                ctx.cancellation().cancelled().await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, ToolError>("never")
            }
        },
    );
    let registry = ToolRegistry::new()
        .default_timeout(Duration::from_millis(100))
        .with(echo_tool())
        .unwrap()
        .with(hang)
        .unwrap();
    let mut agent = bare(client(format, &server))
        .tools(registry)
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "CallStart c1 hang",
            "Input c1",
            "Call c1 hang",
            "Result c1 error",
            "TurnEnd 1 ToolUse",
            "TurnStart 2",
            "Text Recovered.",
            "TurnEnd 2 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(
        result_event(&events, "c1"),
        "tool \"hang\" timed out after 100ms and was stopped"
    );
    let duration = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { duration, .. } => Some(*duration),
            _ => None,
        })
        .unwrap();
    assert!(duration >= Duration::from_millis(100), "{duration:?}");
    assert_eq!(
        stopped.load(Ordering::SeqCst),
        1,
        "the hung call was dropped"
    );
    assert_tool_failed_then_recovered(
        &agent,
        &server,
        &outcome,
        "hang {}",
        "timed out after 100ms",
    );
}
fault!(tool_hangs_past_timeout => tool_hangs);

/// The model asks for the same call with the same input again and again: the third is not
/// run and the run stops with `RepeatedToolCall`.
async fn repeated_tool_call(format: Format) {
    let server = MockServer::start().await;
    let runs = Arc::new(AtomicU32::new(0));
    for id in ["c1", "c2", "c3"] {
        server.push(ScriptedResponse::tool_call(
            id,
            "count",
            json!({"q": "same"}),
        ));
    }
    let mut agent = builder(client(format, &server))
        .tool(counting_tool("count", runs.clone()))
        .policy(RunPolicy::new().max_repeated_calls(3))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(
        outcome.termination,
        Termination::RepeatedToolCall {
            name: "count".into(),
            times: 3
        }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the third call is not run");
    assert_eq!(server.requests().len(), 3);
    let (content, is_error) = result_in_history(&agent, "c3");
    assert!(
        is_error && content.contains("3 times in a row"),
        "{content}"
    );
    assert_history(
        &agent,
        Some(&server),
        &[
            "user: text \"go\"",
            "assistant: tool_use c1 count {\"q\":\"same\"}",
            "user: tool_result c1",
            "assistant: tool_use c2 count {\"q\":\"same\"}",
            "user: tool_result c2",
            "assistant: tool_use c3 count {\"q\":\"same\"}",
            "user: tool_result c3 error",
        ],
    );
    // Last: the host sees the refused call answered too.
    let mut expected = Vec::new();
    for (turn, id) in [(1, "c1"), (2, "c2")] {
        expected.extend([
            format!("TurnStart {turn}"),
            format!("CallStart {id} count"),
            format!("Input {id}"),
            format!("Call {id} count"),
            format!("Result {id}"),
            format!("TurnEnd {turn} ToolUse"),
        ]);
    }
    expected.extend(
        [
            "TurnStart 3",
            "CallStart c3 count",
            "Input c3",
            "Call c3 count",
            "Result c3 error",
            "TurnEnd 3 ToolUse",
            "Finished RepeatedToolCall count 3",
        ]
        .map(String::from),
    );
    assert_eq!(kinds(&events), expected, "{events:#?}");
}
fault!(
    repeated_tool_call => repeated_tool_call
);

// ---------------------------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------------------------

/// Cancelled while the model streams (the server stalls after "Hel"): the run ends at once,
/// the partial answer is kept marked as interrupted, and the next run works.
async fn cancel_while_streaming(format: Format) {
    let server = MockServer::start().await;
    server.push(hel_lo().stall_at(StreamPoint::AfterFirstContent, None));
    server.push(ScriptedResponse::text("Fresh."));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let (events, outcome) = run_cancelling(&mut agent, "hi", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Text Hel",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Cancelled",
        ],
    );
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_eq!(server.requests().len(), 1);
    assert_history(
        &agent,
        Some(&server),
        &[
            "user: text \"hi\"",
            "assistant: text \"Hel\\n\\n[interrupted]\"",
        ],
    );

    let (events, outcome) = run(&mut agent, "again").await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Text Fresh.",
            "TurnEnd 1 EndTurn",
            "Finished Completed",
        ],
    );
    assert_eq!(outcome.final_text, "Fresh.");
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &[
            "user: text \"hi\"",
            "assistant: text \"Hel\\n\\n[interrupted]\"",
            "user: text \"again\"",
            "assistant: text \"Fresh.\"",
        ],
    );
}
fault!(cancel_during_streaming => cancel_while_streaming);

/// Cancelled while the client waits out a 30 s `retry-after`: the run ends at once, nothing
/// is re-sent, and the next run works.
async fn cancel_while_backing_off(format: Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(429).retry_after(30));
    server.push(ScriptedResponse::text("Fresh."));
    let mut agent = builder(client(format, &server)).build().unwrap();
    let started = tokio::time::Instant::now();
    let (events, outcome) =
        run_cancelling(&mut agent, "hi", |e| matches!(e, AgentEvent::Retry { .. })).await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "Retry 1 30s",
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Cancelled",
        ],
    );
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(30), "did not wait");
    assert_eq!(server.requests().len(), 1);
    assert_history(&agent, Some(&server), &["user: text \"hi\""]);

    let (_, outcome) = run(&mut agent, "again").await;
    assert_eq!(outcome.final_text, "Fresh.");
    assert_eq!(server.requests().len(), 2);
    assert_history(
        &agent,
        Some(&server),
        &[
            "user: text \"hi\" | text \"again\"",
            "assistant: text \"Fresh.\"",
        ],
    );
}
fault!(cancel_during_retry_backoff => cancel_while_backing_off);

/// Cancelled while a tool runs: the tool is stopped, its call is answered as cancelled (so
/// the history stays valid), and the next run works.
async fn cancel_while_tools_run(format: Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call("c1", "wait", json!({})));
    server.push(ScriptedResponse::text("Fresh."));
    let wait = FnTool::new(
        "wait",
        "Waits.",
        |_: serde_json::Value, _ctx: ToolContext| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>("woke")
        },
    );
    let mut agent = builder(client(format, &server)).tool(wait).build().unwrap();
    let (events, outcome) = run_cancelling(&mut agent, "go", |e| {
        matches!(e, AgentEvent::ToolCall { .. })
    })
    .await;
    assert_events(
        &events,
        &[
            "TurnStart 1",
            "CallStart c1 wait",
            "Input c1",
            "Call c1 wait",
            "Result c1 error",
            // Cut short while its tools ran: interrupted, as every cut turn ends.
            "TurnEnd 1 Other(\"interrupted\")",
            "Finished Cancelled",
        ],
    );
    assert_eq!(result_event(&events, "c1"), "cancelled");
    assert_eq!(outcome.termination, Termination::Cancelled);
    assert_eq!(server.requests().len(), 1);
    assert_history(
        &agent,
        Some(&server),
        &[
            "user: text \"go\"",
            "assistant: tool_use c1 wait {}",
            "user: tool_result c1 error",
        ],
    );

    let (_, outcome) = run(&mut agent, "again").await;
    assert_eq!(outcome.final_text, "Fresh.");
    assert_eq!(server.requests().len(), 2);
    // The cancelled call's answer reached the model with the new question.
    let sent = server.requests()[1].body.to_string();
    assert!(
        sent.contains("cancelled") && sent.contains("again"),
        "{sent}"
    );
    assert_valid(&agent);
    assert_eq!(server.history_violations(), Vec::<String>::new());
    assert_eq!(
        history(&agent.messages()).last().unwrap(),
        "assistant: text \"Fresh.\""
    );
}
fault!(cancel_during_tools => cancel_while_tools_run);
