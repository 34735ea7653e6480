//! A real model: llama.cpp's `llama-server` with Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), started
//! by `scripts/real-model-server start`, through the public API on both of its endpoints:
//! `/v1/chat/completions` (`OpenAiClient`) and `/v1/messages` (`AnthropicClient`); and a round
//! trip on `/v1/responses` (`OpenAiClient::responses`), which this build serves too.
//!
//! The server's URL comes from `AGENT_LOOP_REAL_MODEL_URL`. The tests are `#[ignore]`d, with
//! the reason, so that a plain `cargo test` lists them as ignored rather than as passes that
//! ran nothing; `.ci/run` starts the server and runs them (`--ignored real_model::`). A test
//! run without the variable fails: it was asked for and cannot run.
//!
//! The tests assert the protocol, never the answer's quality: a call arrives, its arguments
//! parse and validate, the run ends with a documented termination, the event grammar holds,
//! the history is valid, and nothing hangs (every run is bounded). Temperature 0, a
//! `max_tokens` on every request, and `tool_choice` where a test must get a call. The server
//! serves one request at a time, so the tests take turns (a lock).
//!
//! Each test is a named [`scenario`] (the agent and its input), run on each endpoint; with
//! `AGENT_LOOP_RECORD_CASSETTES=1` the runs go through a recording proxy and are written as
//! cassettes, which `cassettes` replays with no server.
//!
//! Run them: `scripts/real-model-server start` prints the URL, then
//! `AGENT_LOOP_REAL_MODEL_URL=<url> cargo test --test providers -- --ignored real_model::`.

use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::provider::ToolChoice;
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, LlmClient, OpenAiClient, RequestSettings,
    RunOutcome, Termination, ToolError,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cassettes::{termination_kind, Recorder};
use crate::common;
use common::agent::{add_tool, assert_valid, echo_tool, finished};
use common::grammar::grammar_violation;

/// The variable holding the server's URL (`http://127.0.0.1:<port>`).
const URL_VAR: &str = "AGENT_LOOP_REAL_MODEL_URL";

/// The model name sent (the server serves the one model it loaded, whatever the name).
pub(crate) const MODEL: &str = "qwen2.5-coder-1.5b-instruct";

/// The longest a whole run may take before the test fails as a hang: a few model calls, each
/// capped by `max_tokens`, at 3–8 tokens/s on two idle cores but under 0.5 on busy ones
/// (measured), so a hang guard, never a speed check.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// The server runs one request at a time: the tests take turns, so that none waits for
/// another's generation inside its own timeouts.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server's URL; a test asked to run without it fails, saying how to start one.
fn server_url() -> String {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_owned(),
        _ => panic!(
            "{URL_VAR} is not set: start the server with `scripts/real-model-server start` and \
             export the URL it prints"
        ),
    }
}

/// The endpoint a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Endpoint {
    /// `/v1/chat/completions`.
    OpenAi,
    /// `/v1/messages`.
    Anthropic,
    /// `/v1/responses` (`OpenAiClient::responses`).
    Responses,
}

impl Endpoint {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Endpoint::OpenAi => "openai",
            Endpoint::Anthropic => "anthropic",
            Endpoint::Responses => "responses",
        }
    }
}

const ENDPOINTS: [Endpoint; 2] = [Endpoint::OpenAi, Endpoint::Anthropic];

/// A client for `endpoint` of the server at `url`: no key (the server needs none), two
/// quick retries (for a connection the server closed as it was reused; a failure inside a
/// stream is the agent's to retry, and the scenarios that look at one turn that off), and
/// the default timeouts, which a slow local model must fit.
fn client(url: &str, endpoint: Endpoint) -> Box<dyn LlmClient> {
    match endpoint {
        Endpoint::OpenAi => Box::new(
            OpenAiClient::new("")
                .base_url(format!("{url}/v1"))
                .model(MODEL)
                .retry_policy(retries()),
        ),
        Endpoint::Anthropic => Box::new(
            AnthropicClient::new("no-key")
                .base_url(url)
                .model(MODEL)
                .retry_policy(retries()),
        ),
        Endpoint::Responses => Box::new(
            OpenAiClient::new("")
                .base_url(format!("{url}/v1"))
                .model(MODEL)
                .retry_policy(retries())
                .responses(),
        ),
    }
}

/// The clients' retries (also the replay's, so that both send the same).
pub(crate) fn retries() -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(2)
        .initial_backoff(Duration::from_millis(100))
}

fn settings(max_tokens: u32) -> RequestSettings {
    RequestSettings::new()
        .temperature(0.0)
        .max_tokens(max_tokens)
}

/// The input of a tool that takes none: every call is `{}`, so calls repeat exactly.
#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct NoInput {}

/// The input of `weather`.
#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct CityInput {
    /// The city.
    city: String,
}

/// The agent and the input of a named scenario, on `client` (the real server's, or the mock
/// server's replaying a cassette).
pub(crate) fn scenario(name: &str, client: Box<dyn LlmClient>) -> (Agent, &'static str) {
    let builder = Agent::builder(client);
    let (builder, input) = match name {
        "tool_round_trip" => (
            builder
                .system("You are a calculator. Use the add tool for every sum.")
                .tool(add_tool())
                .settings(settings(96).tool_choice(ToolChoice::Tool("add".into())))
                .policy(RunPolicy::new().max_turns(2)),
            "What is 17 + 25?",
        ),
        "two_tools" => (
            builder
                .system("Use the tools. Call add for sums and echo to repeat text.")
                .tool(add_tool())
                .tool(echo_tool())
                .settings(settings(96).tool_choice(ToolChoice::Any))
                .policy(RunPolicy::new().max_turns(2)),
            "First add 2 and 3 with the add tool, then echo the word done with the echo tool.",
        ),
        "tool_error" => (
            builder
                .tool(FnTool::new(
                    "weather",
                    "The weather in a city.",
                    |input: CityInput, _ctx| async move {
                        Err::<String, _>(ToolError::new(format!(
                            "the weather service is down in {}; try later",
                            input.city
                        )))
                    },
                ))
                .settings(settings(64).tool_choice(ToolChoice::Tool("weather".into())))
                .policy(RunPolicy::new().max_turns(2).max_tool_failure_turns(2)),
            "What is the weather in Paris?",
        ),
        "max_tokens" => (
            builder.settings(settings(8)),
            "Count from 1 to 100, separated by commas.",
        ),
        "cancel" => (
            builder.settings(settings(400)),
            "Count from 1 to 300, separated by commas.",
        ),
        "repeated_call" => (
            builder
                .tool(FnTool::new(
                    "answer",
                    "The answer to the question.",
                    |_: NoInput, _ctx| async move { Ok::<_, ToolError>("42") },
                ))
                .settings(settings(48).tool_choice(ToolChoice::Tool("answer".into())))
                .policy(RunPolicy::new().max_turns(4).max_repeated_calls(2)),
            "What is the answer?",
        ),
        "usage" => (builder.settings(settings(16)), "Say hello."),
        // Prose with `{` while tools are declared: the server's tool-call parser fails on it.
        // No retries: the failure itself is what the test looks at.
        "parse_failure_mid_stream" => (
            builder
                .tool(add_tool())
                .settings(settings(64))
                .policy(RunPolicy::new().max_turns(1).retry(RetryPolicy::none())),
            "Write one sentence that explains what the JSON object {\"a\": 1} is.",
        ),
        other => panic!("no scenario {other}"),
    };
    (builder.build().unwrap(), input)
}

/// Runs the agent to its end within [`RUN_LIMIT`]; checks the event grammar, the one
/// `Finished` and the history. `cancel_on`: cancel through the handle after the first event
/// it accepts.
pub(crate) async fn run_checked(
    agent: &mut Agent,
    input: &str,
    cancel_on: Option<fn(&AgentEvent) -> bool>,
) -> (Vec<AgentEvent>, RunOutcome) {
    let handle = agent.handle();
    let collect = async {
        let mut events = Vec::new();
        let mut stream = std::pin::pin!(agent.run(input));
        let mut cancelled = false;
        while let Some(event) = stream.next().await {
            if !cancelled && cancel_on.is_some_and(|f| f(&event)) {
                handle.cancel();
                cancelled = true;
            }
            events.push(event);
        }
        events
    };
    let events = tokio::time::timeout(RUN_LIMIT, collect)
        .await
        .unwrap_or_else(|_| panic!("the run did not end within {RUN_LIMIT:?} (a hang)"));
    let (events, outcome) = finished(events);
    if let Some(violation) = grammar_violation(&events) {
        panic!("event grammar: {violation}\n{events:#?}");
    }
    assert_valid(agent);
    (events, outcome)
}

/// Runs `name` on `endpoint` of the real server, through a recording proxy when
/// `AGENT_LOOP_RECORD_CASSETTES` is set (the cassette is written after the run).
async fn live(
    url: &str,
    name: &str,
    endpoint: Endpoint,
    cancel_on: Option<fn(&AgentEvent) -> bool>,
) -> (Agent, Vec<AgentEvent>, RunOutcome) {
    let recorder = match std::env::var_os("AGENT_LOOP_RECORD_CASSETTES") {
        Some(_) if cancel_on.is_none() => Some(Recorder::start(url).await),
        _ => None,
    };
    let base = recorder.as_ref().map_or(url, |r| r.url());
    let (mut agent, input) = scenario(name, client(base, endpoint));
    let (events, outcome) = run_checked(&mut agent, input, cancel_on).await;
    eprintln!("real_model {name} {endpoint:?}: {:?}", outcome.termination);
    if let Some(recorder) = recorder {
        recorder.save(name, endpoint, termination_kind(&outcome.termination));
    }
    (agent, events, outcome)
}

/// The `ToolCall` events: (id, name, input).
fn calls(events: &[AgentEvent]) -> Vec<(String, String, serde_json::Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCall { id, name, input } => {
                Some((id.clone(), name.clone(), input.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The `ToolResult` events: (id, name, is_error).
fn results(events: &[AgentEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                id, name, is_error, ..
            } => Some((id.clone(), name.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// A run that ended as a loop may: the model answered, or a limit of the policy stopped it.
#[track_caller]
fn assert_ended_normally(outcome: &RunOutcome, events: &[AgentEvent]) {
    assert!(
        matches!(
            outcome.termination,
            Termination::Completed
                | Termination::MaxTurns
                | Termination::MaxTokens
                | Termination::RepeatedToolCall { .. }
        ),
        "unexpected termination {:?}\n{events:#?}",
        outcome.termination
    );
}

/// Each call's id is unique and non-empty, names a declared tool, and its input is a JSON
/// object.
#[track_caller]
fn assert_calls_well_formed(events: &[AgentEvent], declared: &[&str]) {
    let calls = calls(events);
    let mut ids: Vec<&str> = calls.iter().map(|(id, _, _)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), calls.len(), "call ids repeat: {calls:?}");
    for (id, name, input) in &calls {
        assert!(!id.is_empty(), "a call without an id: {calls:?}");
        assert!(declared.contains(&name.as_str()), "undeclared tool {name}");
        assert!(input.is_object(), "arguments are not an object: {input}");
    }
}

/// A tool round trip: the model must call `add` (tool_choice), the arguments validate
/// against its schema, the tool runs, and the result goes back; then the model answers.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn tool_round_trip() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (_, events, outcome) = live(&url, "tool_round_trip", endpoint, None).await;
        assert_calls_well_formed(&events, &["add"]);
        let results = results(&events);
        assert!(
            !results.is_empty(),
            "{endpoint:?}: no tool call\n{events:#?}"
        );
        assert!(
            results
                .iter()
                .all(|(_, name, failed)| name == "add" && !failed),
            "{endpoint:?}: the arguments did not validate: {events:#?}"
        );
        assert_ended_normally(&outcome, &events);
    }
}

/// Two tools in one task: every call names one of them, validates and runs; the run makes at
/// least two calls (the model must call a tool on every turn) and ends as a loop may.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn two_tools_in_one_task() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (_, events, outcome) = live(&url, "two_tools", endpoint, None).await;
        assert_calls_well_formed(&events, &["add", "echo"]);
        let results = results(&events);
        assert!(results.len() >= 2, "{endpoint:?}: {events:#?}");
        assert!(
            results.iter().all(|(_, _, failed)| !failed),
            "{endpoint:?}: a call did not validate: {events:#?}"
        );
        assert_ended_normally(&outcome, &events);
    }
}

/// A tool error fed back: the tool fails, its error goes back to the model as an error
/// result (in the history, `is_error`), and the model is called again with it.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn tool_error_fed_back() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (agent, events, outcome) = live(&url, "tool_error", endpoint, None).await;
        assert_calls_well_formed(&events, &["weather"]);
        let results = results(&events);
        assert!(!results.is_empty(), "{endpoint:?}: {events:#?}");
        assert!(results.iter().all(|(_, _, failed)| *failed), "{events:#?}");
        // The error went back: a second model turn ran after it, with the error in history.
        assert_eq!(outcome.turns, 2, "{endpoint:?}: {outcome:?}");
        let fed_back = agent.messages().iter().flat_map(|m| &m.content).any(|b| {
            matches!(b, ContentBlock::ToolResult { content, is_error: true, .. }
                if content.contains("weather service is down"))
        });
        assert!(fed_back, "{:#?}", agent.messages());
        assert!(
            matches!(
                outcome.termination,
                Termination::ToolFailures { turns: 2 } | Termination::MaxTurns
            ),
            "{endpoint:?}: {:?}",
            outcome.termination
        );
    }
}

/// A `max_tokens` cut: the answer stops at the limit, the run ends with
/// `Termination::MaxTokens`, and the usage counts the limit's tokens at most.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn max_tokens_cut() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (_, events, outcome) = live(&url, "max_tokens", endpoint, None).await;
        assert_eq!(
            outcome.termination,
            Termination::MaxTokens,
            "{endpoint:?}: {events:#?}"
        );
        assert!(
            (1..=8).contains(&outcome.usage.output_tokens),
            "{endpoint:?}: {:?}",
            outcome.usage
        );
    }
}

/// Cancel mid-stream: cancelled at its first text, a 400-token answer ends `Cancelled` a
/// few deltas later, with a valid history; the server then answers the next request (it
/// stopped generating for the dropped connection).
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn cancel_mid_stream() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (_, events, outcome) = live(
            &url,
            "cancel",
            endpoint,
            Some(|e| matches!(e, AgentEvent::TextDelta { .. })),
        )
        .await;
        assert_eq!(outcome.termination, Termination::Cancelled, "{events:#?}");
        let deltas = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::TextDelta { .. }))
            .count();
        assert!(
            deltas < 50,
            "{endpoint:?}: {deltas} text deltas after the cancel"
        );
        // The server is free again: the next request is answered.
        let (_, events, outcome) = live(&url, "usage", endpoint, None).await;
        assert_ended_normally(&outcome, &events);
    }
}

/// The repeated-call guard against a model that calls again: made to call a tool whose
/// every call is the same (`{}`), the run stops at the policy's limit with
/// `RepeatedToolCall`; the repeated call is answered with an error, not run.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn repeated_call_guard() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (_, events, outcome) = live(&url, "repeated_call", endpoint, None).await;
        assert_calls_well_formed(&events, &["answer"]);
        assert_eq!(
            outcome.termination,
            Termination::RepeatedToolCall {
                name: "answer".into(),
                times: 2
            },
            "{endpoint:?}: {events:#?}"
        );
        // The calls before the repeated one ran; the repeated one was answered with an error.
        let results = results(&events);
        let (last, ran) = results.split_last().expect("tool results");
        assert!(last.2, "{results:?}");
        assert!(ran.iter().all(|r| !r.2), "{results:?}");
    }
}

/// Usage figures: the prompt's and the answer's tokens, in the turn's `TurnEnd` and in the
/// outcome, the answer's within `max_tokens`.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn usage_figures() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for endpoint in ENDPOINTS {
        let (_, events, outcome) = live(&url, "usage", endpoint, None).await;
        assert_ended_normally(&outcome, &events);
        let usage = outcome.usage;
        assert!(usage.input_tokens > 0, "{endpoint:?}: {usage:?}");
        assert!(
            (1..=16).contains(&usage.output_tokens),
            "{endpoint:?}: {usage:?}"
        );
        let turn_usage: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::TurnEnd { usage, .. } => Some(*usage),
                _ => None,
            })
            .collect();
        assert_eq!(turn_usage, [usage], "{endpoint:?}");
    }
}

/// The server's parse failure: prose with `{` while tools are declared makes llama.cpp's
/// tool-call parser fail, as an HTTP 500 before the stream or as an SSE `{"error": …}` event
/// in it with no `[DONE]`. Either way the run ends at once with an error that says what the
/// server said, the failed turn leaves nothing in the history but the question, and nothing
/// hangs.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn parse_failure_is_a_clear_error() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    for name in ["parse_failure_mid_stream"] {
        for endpoint in ENDPOINTS {
            let (agent, events, outcome) = live(&url, name, endpoint, None).await;
            let Termination::Error(error) = &outcome.termination else {
                panic!("{name} {endpoint:?}: not an error: {events:#?}");
            };
            let text = error.to_string();
            assert!(
                text.contains("500") || text.to_lowercase().contains("pars"),
                "{name} {endpoint:?}: {text}"
            );
            assert_eq!(
                agent.messages().len(),
                1,
                "{name} {endpoint:?}: {:#?}",
                agent.messages()
            );
        }
    }
}

/// The same round trip on `/v1/responses`, which this build serves too: the call arrives as
/// a `function_call` item, the result goes back as its output, and the run ends as a loop may.
#[tokio::test]
#[ignore = "needs a real model: set AGENT_LOOP_REAL_MODEL_URL (scripts/real-model-server start)"]
async fn tool_round_trip_on_responses() {
    let url = server_url();
    let _turn = SERVER.lock().await;
    let (_, events, outcome) = live(&url, "tool_round_trip", Endpoint::Responses, None).await;
    assert_calls_well_formed(&events, &["add"]);
    let results = results(&events);
    assert!(!results.is_empty(), "no tool call\n{events:#?}");
    assert!(
        results
            .iter()
            .all(|(_, name, failed)| name == "add" && !failed),
        "{events:#?}"
    );
    assert_ended_normally(&outcome, &events);
}
