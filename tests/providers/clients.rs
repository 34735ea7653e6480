//! The HTTP clients against the loopback mock server: request encoding, status handling,
//! retries, timeouts and secrets.

use std::time::Duration;

use agent_loop::error::TimeoutKind;
use agent_loop::provider::cache::{CacheTtl, PromptCache};
use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::provider::{ModelRequest, ToolChoice};
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse, StreamPoint};
use agent_loop::tool::ToolSpec;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, LlmClient, LlmError, LlmEvent, Message,
    OpenAiClient, Role,
};
use futures::StreamExt;
use serde_json::json;

use crate::common;
use common::fast_retries;

const KEY: &str = "sk-test-0123456789-secret";

fn anthropic(server: &MockServer) -> AnthropicClient {
    AnthropicClient::new(KEY)
        .base_url(server.anthropic_base_url())
        .model("claude-test")
        .retry_policy(fast_retries())
}

fn openai(server: &MockServer) -> OpenAiClient {
    OpenAiClient::new(KEY)
        .base_url(format!("{}/", server.openai_base_url()))
        .model("gpt-test")
        .retry_policy(fast_retries())
}

/// Both clients, boxed, with a name for assertion messages.
fn clients(server: &MockServer) -> Vec<(&'static str, Box<dyn LlmClient>)> {
    vec![
        ("anthropic", Box::new(anthropic(server))),
        ("openai", Box::new(openai(server))),
    ]
}

async fn collect(
    client: &dyn LlmClient,
    request: &ModelRequest,
) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream(request).collect().await
}

fn hello() -> ModelRequest {
    ModelRequest::new(vec![Message::user("hello")])
}

fn text_of(items: &[Result<LlmEvent, LlmError>]) -> String {
    items
        .iter()
        .filter_map(|item| match item {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The retries an agent over `client` reports for one prompt (the agent decides every retry
/// of a run, with the client's policy): (attempt, delay, what failed), and how the run ended.
async fn agent_retries(
    client: impl LlmClient + 'static,
) -> (Vec<(u32, Duration, String)>, agent_loop::RunOutcome) {
    let mut agent = Agent::builder(client).build().unwrap();
    let events: Vec<AgentEvent> = agent.run("hello").collect().await;
    let retries = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retry {
                attempt,
                delay,
                error,
                ..
            } => Some((*attempt, *delay, error.clone())),
            _ => None,
        })
        .collect();
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}");
    };
    (retries, outcome.clone())
}

fn ends_complete(items: &[Result<LlmEvent, LlmError>]) -> bool {
    matches!(items.last(), Some(Ok(LlmEvent::MessageStop { .. })))
}

fn final_error(items: &[Result<LlmEvent, LlmError>]) -> Option<&LlmError> {
    match items.last() {
        Some(Err(error)) => Some(error),
        _ => None,
    }
}

/// A conversation with a system prompt, text, thinking, parallel tool calls and tool results
/// (one an error).
fn conversation() -> ModelRequest {
    let mut request = ModelRequest::new(vec![
        Message::user("Weather and time in Paris?"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Two tools.".into(),
                    signature: "sig-abc".into(),
                },
                ContentBlock::text("Checking."),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "get_time".into(),
                    input: json!({"tz": "Europe/Paris"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("call_1", "18°C, sunny", false),
                ContentBlock::tool_result("call_2", "unknown timezone", true),
            ],
        },
    ]);
    request.system = Some("You are terse.".into());
    request.tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Current time".into(),
            input_schema: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
        },
    ];
    request.tool_choice = ToolChoice::Auto;
    request.max_tokens = 1024;
    request.temperature = Some(0.5);
    request.stop_sequences = vec!["STOP".into()];
    request.thinking_budget = Some(512);
    request
        .extra
        .insert("metadata".into(), json!({"user_id": "u1"}));
    request
}

#[tokio::test]
async fn anthropic_request_golden() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("Sunny, time unknown."));
    let items = collect(&anthropic(&server), &conversation()).await;
    assert!(ends_complete(&items), "{items:?}");
    assert_eq!(text_of(&items), "Sunny, time unknown.");

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/anthropic/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(r.header("authorization"), None);
    assert_eq!(
        r.body,
        json!({
            "model": "claude-test",
            "max_tokens": 1024,
            // Prompt caching is on by default: breakpoints on the system prompt (as a text
            // block), the last tool and the two latest user messages.
            "system": [{"type": "text", "text": "You are terse.",
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?",
                                              "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Two tools.", "signature": "sig-abc"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {"tz": "Europe/Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18°C, sunny"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "unknown timezone", "is_error": true,
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [
                {"name": "get_weather", "description": "Current weather",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"name": "get_time", "description": "Current time",
                 "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}},
                 "cache_control": {"type": "ephemeral"}}
            ],
            "tool_choice": {"type": "auto"},
            "temperature": 0.5,
            "stop_sequences": ["STOP"],
            "thinking": {"type": "enabled", "budget_tokens": 512},
            "stream": true,
            "metadata": {"user_id": "u1"}
        })
    );
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn openai_request_golden() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("Sunny, time unknown."));
    let client = openai(&server).organization("org-1").project("proj-1");
    let items = collect(&client, &conversation()).await;
    assert!(ends_complete(&items), "{items:?}");
    assert_eq!(text_of(&items), "Sunny, time unknown.");

    let requests = server.requests();
    let r = &requests[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("openai-organization"), Some("org-1"));
    assert_eq!(r.header("openai-project"), Some("proj-1"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(r.header("x-api-key"), None);
    assert_eq!(
        r.body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather and time in Paris?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\"}"}}
                ]},
                {"role": "tool", "content": "18°C, sunny", "tool_call_id": "call_1"},
                {"role": "tool", "content": "Error: unknown timezone", "tool_call_id": "call_2"}
            ],
            "max_tokens": 1024,
            "tools": [
                {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "get_time", "description": "Current time",
                 "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}
            ],
            "tool_choice": "auto",
            "temperature": 0.5,
            "stop": ["STOP"],
            "stream": true,
            "stream_options": {"include_usage": true},
            "metadata": {"user_id": "u1"}
        })
    );
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn openai_assistant_tool_calls_without_text_send_null_content() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let mut request = conversation();
    request.messages_mut()[1]
        .content
        .retain(|b| matches!(b, ContentBlock::ToolUse { .. }));
    request.tool_choice = ToolChoice::Tool("get_time".into());
    let client = openai(&server)
        .max_tokens_field(agent_loop::provider::openai::MaxTokensField::MaxCompletionTokens);
    collect(&client, &request).await;
    let body = &server.requests()[0].body;
    assert_eq!(body["messages"][2]["content"], serde_json::Value::Null);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "get_time"}})
    );
    assert_eq!(body["max_completion_tokens"], 1024);
    assert!(body.get("max_tokens").is_none());
}

#[tokio::test]
async fn api_errors_carry_the_provider_details() {
    let server = MockServer::start().await;
    let client = anthropic(&server);
    server.push(
        MockResponse::status(401)
            .error_message("invalid x-api-key")
            .header("request-id", "req_123"),
    );
    let items = collect(&client, &hello()).await;
    let Some(LlmError::Api(api)) = final_error(&items) else {
        panic!("{items:?}")
    };
    assert_eq!(api.error_type.as_deref(), Some("authentication_error"));
    assert_eq!(api.request_id.as_deref(), Some("req_123"));
    assert!(api.message.contains("invalid x-api-key"));
    assert!(api.message.contains("ANTHROPIC_API_KEY"), "{}", api.message);

    server.push(
        MockResponse::status(400)
            .error_message("prompt is too long: 210000 tokens > 200000 maximum"),
    );
    let items = collect(&client, &hello()).await;
    assert!(
        matches!(final_error(&items), Some(LlmError::ContextOverflow(_))),
        "{items:?}"
    );

    server
        .push(MockResponse::raw(502, "text/html", "<html>Bad gateway</html>").should_retry(false));
    let items = collect(&client, &hello()).await;
    let Some(LlmError::Api(api)) = final_error(&items) else {
        panic!("{items:?}")
    };
    assert_eq!(api.message, "<html>Bad gateway</html>");
    assert_eq!(api.should_retry, Some(false));

    let client = openai(&server);
    server.push(
        MockResponse::status(400)
            .error_code("context_length_exceeded")
            .error_message("This model's maximum context length is 8192 tokens."),
    );
    let items = collect(&client, &hello()).await;
    assert!(
        matches!(final_error(&items), Some(LlmError::ContextOverflow(_))),
        "{items:?}"
    );

    server.push(
        MockResponse::status(429)
            .error_type("insufficient_quota")
            .error_code("insufficient_quota")
            .error_message("You exceeded your current quota."),
    );
    let items = collect(&client, &hello()).await;
    assert_eq!(items.len(), 1, "quota errors are not retried: {items:?}");

    server.push(MockResponse::status(401).error_message("Incorrect API key provided"));
    let items = collect(&client, &hello()).await;
    assert!(final_error(&items)
        .unwrap()
        .to_string()
        .contains("OPENAI_API_KEY"));
}

#[tokio::test(start_paused = true)]
async fn retry_after_headers_are_honoured() {
    let server = MockServer::start().await;
    let client = anthropic(&server);

    server.push(MockResponse::status(429).retry_after(7));
    server.push(ScriptedResponse::text("ok"));
    let items = collect(&client, &hello()).await;
    assert!(ends_complete(&items), "{items:?}");
    // The agent, which owns a run's retries, waits what the server asked.
    server.push(MockResponse::status(429).retry_after(7));
    server.push(ScriptedResponse::text("ok"));
    let (retries, outcome) = agent_retries(client.clone()).await;
    assert_eq!(outcome.termination, agent_loop::Termination::Completed);
    assert_eq!(retries[0].1, Duration::from_secs(7));
    assert!(retries[0].2.contains("429"), "{retries:?}");

    server.push(
        MockResponse::status(529)
            .retry_after(7)
            .retry_after_ms(1500),
    );
    server.push(ScriptedResponse::text("ok"));
    let (retries, _) = agent_retries(client.clone()).await;
    assert_eq!(retries[0].1, Duration::from_millis(1500));

    // Longer than the policy's cap (60 s): surfaced, with the requested delay.
    server.push(MockResponse::status(429).retry_after(600));
    let items = collect(&client, &hello()).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        final_error(&items).unwrap().retry_after(),
        Some(Duration::from_secs(600))
    );

    // x-should-retry overrides the status both ways (but never forces a 4xx like 400).
    server.push(MockResponse::status(503).should_retry(false));
    assert_eq!(collect(&client, &hello()).await.len(), 1);
    server.push(MockResponse::status(400).should_retry(true));
    assert_eq!(collect(&client, &hello()).await.len(), 1);
    server.push(MockResponse::status(418).should_retry(true));
    server.push(ScriptedResponse::text("ok"));
    assert!(ends_complete(&collect(&client, &hello()).await));
}

#[tokio::test(start_paused = true)]
async fn retries_are_bounded_and_back_off_exponentially() {
    let server = MockServer::start().await;
    let client = openai(&server).retry_policy(
        RetryPolicy::default()
            .max_retries(3)
            .initial_backoff(Duration::from_millis(100))
            .jitter(Jitter::None),
    );
    for _ in 0..4 {
        server.push(MockResponse::status(503));
    }
    let items = collect(&client, &hello()).await;
    assert_eq!(final_error(&items).unwrap().status(), Some(503));
    assert_eq!(server.requests().len(), 4);
    // Under an agent, with the client's policy: the same bound, the backoff in its events.
    for _ in 0..4 {
        server.push(MockResponse::status(503));
    }
    let (retries, outcome) = agent_retries(client).await;
    let delays: Vec<Duration> = retries.iter().map(|r| r.1).collect();
    assert_eq!(delays, [100, 200, 400].map(Duration::from_millis));
    assert!(matches!(
        outcome.termination,
        agent_loop::Termination::Error(_)
    ));
    assert_eq!(server.requests().len(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_stall_with_keep_alives_ends_in_an_idle_timeout() {
    let server = MockServer::start().await;
    let response = ScriptedResponse::text("partial").then_text(" more");
    let clients: Vec<(&str, Box<dyn LlmClient>)> = vec![
        (
            "anthropic",
            Box::new(anthropic(&server).idle_timeout(Duration::from_secs(2))),
        ),
        (
            "openai",
            Box::new(openai(&server).idle_timeout(Duration::from_secs(2))),
        ),
    ];
    for (name, client) in clients {
        server.push(MockResponse::stream(response.clone()).stall_at(
            StreamPoint::AfterFirstContent,
            Some(Duration::from_millis(200)),
        ));
        let before = server.requests().len();
        let items = collect(client.as_ref(), &hello()).await;
        // Content arrived, so the failure is not retried: it is the stream's error.
        assert!(text_of(&items).starts_with("partial"), "{name}: {items:?}");
        assert_eq!(server.requests().len(), before + 1, "{name}");
        assert_eq!(
            final_error(&items),
            Some(&LlmError::Timeout {
                kind: TimeoutKind::Idle,
                after: Duration::from_secs(2)
            }),
            "{name}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stall_before_content_is_retried() {
    let server = MockServer::start().await;
    let client = anthropic(&server).idle_timeout(Duration::from_secs(2));
    server.push(
        MockResponse::stream(ScriptedResponse::text("never"))
            .stall_at(StreamPoint::BeforeContent, Some(Duration::from_millis(300))),
    );
    server.push(ScriptedResponse::text("second"));
    let items = collect(&client, &hello()).await;
    assert!(ends_complete(&items), "{items:?}");
    assert_eq!(text_of(&items), "second");
    assert_eq!(server.requests().len(), 2);
    // The failed attempt leaves no trace but the Retry event: one MessageStart in all.
    let starts = items
        .iter()
        .filter(|i| matches!(i, Ok(LlmEvent::MessageStart { .. })))
        .count();
    assert_eq!(starts, 1);
}

#[tokio::test(start_paused = true)]
async fn no_headers_is_a_first_byte_timeout() {
    let server = MockServer::start().await;
    let client = openai(&server)
        .first_byte_timeout(Duration::from_secs(5))
        .retry_policy(RetryPolicy::none());
    server.push(MockResponse::no_headers());
    let items = collect(&client, &hello()).await;
    assert_eq!(
        final_error(&items),
        Some(&LlmError::Timeout {
            kind: TimeoutKind::FirstByte,
            after: Duration::from_secs(5)
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_total_timeout_bounds_a_slow_stream() {
    let server = MockServer::start().await;
    let client = anthropic(&server).total_timeout(Duration::from_secs(3));
    server.push(
        MockResponse::stream(ScriptedResponse::text("abcdefghij").chunked(1))
            .chunk_delay(Duration::from_secs(1)),
    );
    let items = collect(&client, &hello()).await;
    assert!(
        matches!(
            final_error(&items),
            Some(LlmError::Timeout {
                kind: TimeoutKind::Total,
                ..
            })
        ),
        "{items:?}"
    );
}

#[tokio::test]
async fn connection_refused_is_a_retryable_connect_error() {
    // Bind and drop a listener to find a port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = AnthropicClient::new(KEY)
        .base_url(format!("http://127.0.0.1:{port}"))
        .model("m")
        .retry_policy(fast_retries().max_retries(2));
    let items = collect(&client, &hello()).await;
    let error = final_error(&items).unwrap();
    assert!(matches!(error, LlmError::Connect { .. }), "{error:?}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn keys_never_appear_in_debug_or_errors() {
    let server = MockServer::start().await;
    let a = anthropic(&server);
    let o = openai(&server);
    for debug in [format!("{a:?}"), format!("{o:?}")] {
        assert!(!debug.contains(KEY), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
    }
    server.push(MockResponse::status(401));
    server.push(MockResponse::status(401));
    for (_, client) in clients(&server) {
        let items = collect(client.as_ref(), &hello()).await;
        let error = final_error(&items).unwrap();
        assert!(!error.to_string().contains(KEY));
        assert!(!format!("{error:?}").contains(KEY));
    }
    // A key that cannot be a header value is refused without repeating it.
    let bad = AnthropicClient::new("sk-line\nbreak")
        .base_url(server.anthropic_base_url())
        .model("m");
    let items = collect(&bad, &hello()).await;
    let error = final_error(&items).unwrap();
    assert!(matches!(error, LlmError::InvalidRequest { .. }));
    assert!(!error.to_string().contains("sk-line"));
}

#[tokio::test]
async fn a_request_without_a_model_is_refused_before_sending() {
    let server = MockServer::start().await;
    let client = AnthropicClient::new(KEY).base_url(server.anthropic_base_url());
    let items = collect(&client, &hello()).await;
    assert!(matches!(
        final_error(&items),
        Some(LlmError::InvalidRequest { .. })
    ));
    assert!(server.requests().is_empty());
    let mut request = hello();
    request.model = Some("from-request".into());
    server.push(ScriptedResponse::text("ok"));
    assert!(ends_complete(&collect(&client, &request).await));
    assert_eq!(server.requests()[0].body["model"], "from-request");
}

#[tokio::test]
async fn the_stream_is_lazy() {
    let server = MockServer::start().await;
    let client = openai(&server);
    let request = hello();
    let stream = client.stream(&request);
    tokio::task::yield_now().await;
    assert!(server.requests().is_empty());
    drop(stream);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn recorded_requests_redact_keys_in_debug_output() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("hi"));
    let client = AnthropicClient::new("sk-ant-secret-123")
        .base_url(server.anthropic_base_url())
        .model("m");
    let request = ModelRequest::new(vec![Message::user("hi")]);
    let events: Vec<_> = client.stream(&request).collect().await;
    assert!(events.iter().all(|e| e.is_ok()), "{events:?}");
    let recorded = server.requests();
    assert_eq!(recorded[0].header("x-api-key"), Some("sk-ant-secret-123"));
    let debug = format!("{:?}", recorded[0]);
    assert!(!debug.contains("sk-ant-secret-123"), "{debug}");
    assert!(debug.contains("[redacted]"));
}

#[tokio::test]
async fn a_reqwest_client_of_the_users_is_used_as_it_is() {
    let server = MockServer::start().await;
    let mut headers = agent_loop::provider::reqwest::header::HeaderMap::new();
    headers.insert("x-from-users-client", "yes".parse().unwrap());
    let http = agent_loop::provider::reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    for (name, client) in [
        (
            "anthropic",
            Box::new(anthropic(&server).http_client(http.clone())) as Box<dyn LlmClient>,
        ),
        // Setters after `http_client` keep it.
        (
            "openai",
            Box::new(
                openai(&server)
                    .http_client(http.clone())
                    .connect_timeout(Duration::from_secs(3)),
            ),
        ),
    ] {
        server.push(ScriptedResponse::text("ok"));
        let items = collect(client.as_ref(), &conversation()).await;
        assert!(ends_complete(&items), "{name}: {items:?}");
        let requests = server.requests();
        let last = requests.last().unwrap();
        assert_eq!(last.header("x-from-users-client"), Some("yes"), "{name}");
        // The crate's own headers are still sent.
        assert_eq!(last.header("accept"), Some("text/event-stream"), "{name}");
    }
    // Without it, the crate's own client sends no such header.
    server.push(ScriptedResponse::text("ok"));
    collect(&anthropic(&server), &conversation()).await;
    assert_eq!(
        server
            .requests()
            .last()
            .unwrap()
            .header("x-from-users-client"),
        None
    );
}

// ----- prompt caching (issue 16) -----

/// Every `cache_control` in a recorded Anthropic body, as (JSON pointer, value).
fn breakpoints(body: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    fn walk(v: &serde_json::Value, path: String, out: &mut Vec<(String, serde_json::Value)>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map {
                    if k == "cache_control" {
                        out.push((path.clone(), child.clone()));
                    } else {
                        walk(child, format!("{path}/{k}"), out);
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), &mut out);
    out
}

fn tool_step(id: &str, output: &str) -> [Message; 2] {
    [
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Read it.".into(),
                    signature: "sig".into(),
                },
                ContentBlock::ToolUse {
                    id: id.into(),
                    name: "read_file".into(),
                    input: json!({"path": "a.rs"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(id, output, false)],
        },
    ]
}

#[tokio::test]
async fn anthropic_breakpoints_move_with_the_conversation() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("one"));
    server.push(ScriptedResponse::text("two"));
    let client = anthropic(&server);
    let mut request = conversation();
    request.thinking_budget = None;
    collect(&client, &request).await;
    // The next turn repeats the history and adds a step.
    let [call, result] = tool_step("call_3", "fn main() {}");
    request.messages_mut().extend([call, result]);
    collect(&client, &request).await;

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "both accepted");
    let eph = json!({"type": "ephemeral"});
    assert_eq!(
        breakpoints(&requests[0].body),
        [
            ("/messages/0/content/0".to_owned(), eph.clone()),
            ("/messages/2/content/1".to_owned(), eph.clone()),
            ("/system/0".to_owned(), eph.clone()),
            ("/tools/1".to_owned(), eph.clone()),
        ]
    );
    // Request 2: the breakpoint of request 1's last message (which request 1 wrote) is read
    // back, and the new last message gets one; the oldest moved off.
    assert_eq!(
        breakpoints(&requests[1].body),
        [
            ("/messages/2/content/1".to_owned(), eph.clone()),
            ("/messages/4/content/0".to_owned(), eph.clone()),
            ("/system/0".to_owned(), eph.clone()),
            ("/tools/1".to_owned(), eph),
        ]
    );
    // Apart from the moved breakpoint, request 2 starts with request 1 byte for byte.
    let strip = |mut v: serde_json::Value| {
        v["messages"][0]["content"][0]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        v["messages"].as_array_mut().unwrap().truncate(3);
        v
    };
    assert_eq!(
        strip(requests[1].body.clone())["messages"],
        strip(requests[0].body.clone())["messages"]
    );
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn anthropic_cache_ttl_and_switches() {
    let server = MockServer::start().await;
    for _ in 0..3 {
        server.push(ScriptedResponse::text("ok"));
    }
    let client = anthropic(&server);

    let mut one_hour = conversation();
    one_hour.prompt_cache = Some(PromptCache::default().ttl(CacheTtl::OneHour));
    collect(&client, &one_hour).await;

    let mut off = conversation();
    off.prompt_cache = None;
    collect(&client, &off).await;

    let mut only_messages = conversation();
    only_messages.prompt_cache = Some(
        PromptCache::default()
            .tools(false)
            .system(false)
            .message_breakpoints(1),
    );
    collect(&client, &only_messages).await;

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let marks = breakpoints(&requests[0].body);
    assert_eq!(marks.len(), 4);
    assert!(
        marks
            .iter()
            .all(|(_, v)| *v == json!({"type": "ephemeral", "ttl": "1h"})),
        "{marks:?}"
    );
    // Off: no breakpoint, and the system prompt is the plain string again.
    assert!(breakpoints(&requests[1].body).is_empty());
    assert_eq!(requests[1].body["system"], "You are terse.");
    assert_eq!(
        breakpoints(&requests[2].body),
        [(
            "/messages/2/content/1".to_owned(),
            json!({"type": "ephemeral"})
        )]
    );
    assert_eq!(requests[2].body["system"], "You are terse.");
}

#[tokio::test]
async fn breakpoints_skip_blocks_that_may_not_carry_one() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    // The latest user message ends with an unmodelled block and an empty text block; the one
    // before has only a block of an unmodelled type that already carries a breakpoint.
    let mut request = ModelRequest::new(vec![
        Message {
            role: Role::User,
            content: vec![ContentBlock::Other(json!({
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "doc"},
                "cache_control": {"type": "ephemeral"}
            }))],
        },
        Message::assistant("Read."),
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("question"),
                ContentBlock::Other(json!({
                    "type": "image",
                    "source": {"type": "url", "url": "https://example.com/a.png"}
                })),
                ContentBlock::text(""),
            ],
        },
    ]);
    request.system = Some("sys".into());
    collect(&anthropic(&server), &request).await;
    let body = &server.requests()[0].body;
    let eph = json!({"type": "ephemeral"});
    // The question carries it; the verbatim document keeps its own and counts against the
    // limit; nothing is put on the image.
    assert_eq!(
        breakpoints(body),
        [
            ("/messages/0/content/0".to_owned(), eph.clone()),
            ("/messages/2/content/0".to_owned(), eph.clone()),
            ("/system/0".to_owned(), eph),
        ]
    );
}

#[tokio::test]
async fn a_cache_setting_over_the_limit_is_refused_before_sending() {
    let server = MockServer::start().await;
    let mut request = conversation();
    request.prompt_cache = Some(PromptCache::default().message_breakpoints(3));
    let items = collect(&anthropic(&server), &request).await;
    assert!(
        matches!(final_error(&items), Some(LlmError::InvalidRequest { message })
            if message.contains("5 cache_control breakpoints")),
        "{items:?}"
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_mock_refuses_what_the_api_refuses_about_cache_control() {
    let server = MockServer::start().await;
    let post = |body: serde_json::Value| {
        let url = format!("{}/v1/messages", server.anthropic_base_url());
        async move {
            agent_loop::provider::reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let text = |cc: serde_json::Value| json!({"type": "text", "text": "x", "cache_control": cc});
    let eph = json!({"type": "ephemeral"});
    let body = |blocks: Vec<serde_json::Value>| {
        json!({"model": "m", "max_tokens": 10, "stream": true,
               "messages": [{"role": "user", "content": blocks}]})
    };
    for (blocks, expected) in [
        (
            vec![text(eph.clone()); 5],
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            vec![text(json!({"type": "persistent"}))],
            "messages.0.content.0.text.cache_control.type: Input should be 'ephemeral'",
        ),
        (
            vec![text(json!({"type": "ephemeral", "ttl": "10m"}))],
            "messages.0.content.0.text.cache_control.ttl: Input should be '5m' or '1h'",
        ),
    ] {
        let response = post(body(blocks)).await;
        assert_eq!(response.status(), 400);
        let error: serde_json::Value = response.json().await.unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error["error"]["message"], expected);
    }
    // Four, with both TTLs spelled out (the longer first), are accepted (the script answers).
    server.push(ScriptedResponse::text("ok"));
    let four = vec![
        text(json!({"type": "ephemeral", "ttl": "1h"})),
        text(json!({"type": "ephemeral", "ttl": "5m"})),
        text(eph.clone()),
        text(eph),
    ];
    assert_eq!(post(body(four)).await.status(), 200);
}
