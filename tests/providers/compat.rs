//! What real servers and proxies do that the providers' own APIs do not: redirects, errors
//! inside a stream with an HTTP status in `code`, a whole JSON message in answer to a stream
//! request, a chunk terminator that comes late, signed thinking over Chat Completions, Azure's
//! URL and key header. Each test reproduces the server's behaviour on the loopback mock server
//! and checks the result through the public API.

use std::time::Duration;

use agent_loop::provider::transport::RetryPolicy;
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{
    MockResponse, MockServer, ScriptedClient, ScriptedResponse, StreamPoint,
};
use agent_loop::tool::FnTool;
use agent_loop::wire::{WireDecoder, WireFormat};
use agent_loop::RequestSettings;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, LlmClient, LlmError, LlmEvent, Message,
    OpenAiClient, StopReason, Termination, ToolError,
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::common;
use common::fast_retries;

const KEY: &str = "sk-compat-0123456789-secret";
const HEADER_SECRET: &str = "hdr-secret-987";

fn anthropic(server: &MockServer) -> AnthropicClient {
    AnthropicClient::new(KEY)
        .base_url(server.anthropic_base_url())
        .model("claude-test")
        .header("x-custom-auth", HEADER_SECRET)
        .retry_policy(fast_retries())
}

fn openai(server: &MockServer) -> OpenAiClient {
    OpenAiClient::new(KEY)
        .base_url(server.openai_base_url())
        .model("gpt-test")
        .header("x-custom-auth", HEADER_SECRET)
        .retry_policy(fast_retries())
}

/// The path each client posts to, below the server root.
fn path(format: WireFormat) -> &'static str {
    match format {
        WireFormat::Anthropic => "/anthropic/v1/messages",
        _ => "/v1/chat/completions",
    }
}

fn client(format: WireFormat, server: &MockServer) -> Box<dyn LlmClient> {
    match format {
        WireFormat::Anthropic => Box::new(anthropic(server)),
        WireFormat::OpenAiResponses => Box::new(openai(server).responses()),
        _ => Box::new(openai(server)),
    }
}

const FORMATS: [WireFormat; 2] = [WireFormat::Anthropic, WireFormat::OpenAiChat];

async fn collect(client: &dyn LlmClient) -> Vec<Result<LlmEvent, LlmError>> {
    let request = ModelRequest::new(vec![Message::user("hello")]);
    client.stream(&request).collect().await
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

fn final_error(items: &[Result<LlmEvent, LlmError>]) -> LlmError {
    match items.last() {
        Some(Err(e)) => e.clone(),
        other => panic!("the stream did not end with an error: {other:?}"),
    }
}

/// How often the client sent a request again: a client on its own retries silently (its
/// stream goes on with the next attempt), so the server's count tells.
fn retries(server: &MockServer) -> usize {
    server.requests().len().saturating_sub(1)
}

// ---------------------------------------------------------------------------------------------
// 1. Redirects never carry a credential to another origin.

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_no_credential_reaches_it() {
    for format in FORMATS {
        for status in [301, 302, 303, 307, 308] {
            let server = MockServer::start().await;
            let elsewhere = MockServer::start().await;
            elsewhere.push(ScriptedResponse::text("stolen"));
            let target = format!("{}{}", elsewhere.url(), path(format));
            server.push(MockResponse::redirect(status, target.clone()));

            let items = collect(&*client(format, &server)).await;
            let error = final_error(&items);
            assert!(
                matches!(&error, LlmError::Redirected { location } if location == &target),
                "{format:?} {status}: {error:?}"
            );
            assert!(!error.is_retryable());
            assert!(error.to_string().contains(&target), "{error}");
            assert_eq!(
                server.requests().len(),
                1,
                "{format:?} {status}: not retried"
            );
            assert!(
                elsewhere.requests().is_empty(),
                "{format:?} {status}: the other origin was contacted: {:?}",
                elsewhere.requests()
            );
        }
    }
}

#[tokio::test]
async fn another_port_is_another_origin_and_the_query_is_not_shown() {
    let server = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    // Same host, another port: still another origin. The query may hold a key.
    let target = format!("{}/anthropic/v1/messages?key=leaked", elsewhere.url());
    server.push(MockResponse::redirect(307, target));
    let items = collect(&anthropic(&server)).await;
    let error = final_error(&items);
    let LlmError::Redirected { location } = &error else {
        panic!("{error:?}");
    };
    assert!(location.starts_with(&elsewhere.url()), "{location}");
    assert!(!error.to_string().contains("leaked"), "{error}");
    assert!(elsewhere.requests().is_empty());
}

#[tokio::test]
async fn a_redirect_within_the_origin_is_followed_with_the_key() {
    for format in FORMATS {
        let server = MockServer::start().await;
        // 307 and 308 keep the method and the body.
        for status in [307, 308] {
            server.push(MockResponse::redirect(
                status,
                format!("/moved{}", path(format)),
            ));
            server.push(ScriptedResponse::text("here"));
        }
        let client = client(format, &server);
        for _ in 0..2 {
            let items = collect(&*client).await;
            assert_eq!(text_of(&items), "here", "{format:?}: {items:?}");
        }
        let requests = server.requests();
        assert_eq!(requests.len(), 4);
        for moved in [&requests[1], &requests[3]] {
            assert_eq!(moved.path, format!("/moved{}", path(format)));
            assert_eq!(moved.header("x-custom-auth"), Some(HEADER_SECRET));
            let key = moved
                .header("x-api-key")
                .or(moved.header("authorization"))
                .unwrap_or_default();
            assert!(
                key.contains(KEY),
                "{format:?}: the key is sent within the origin"
            );
            assert_eq!(moved.body["messages"][0]["role"], "user");
        }
    }
}

#[tokio::test]
async fn a_users_own_client_with_the_crates_policy_is_as_safe() {
    let server = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    server.push(MockResponse::redirect(
        302,
        format!("{}/v1/chat/completions", elsewhere.url()),
    ));
    let http = agent_loop::provider::reqwest::Client::builder()
        .redirect(agent_loop::provider::transport::redirect_policy())
        .build()
        .unwrap();
    let items = collect(&openai(&server).http_client(http)).await;
    assert!(matches!(final_error(&items), LlmError::Redirected { .. }));
    assert!(elsewhere.requests().is_empty());
}

#[tokio::test]
async fn a_users_own_client_that_follows_anyway_gets_no_answer_from_the_other_origin() {
    let server = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    elsewhere.push(ScriptedResponse::text("from elsewhere"));
    server.push(MockResponse::redirect(
        307,
        format!("{}/v1/chat/completions", elsewhere.url()),
    ));
    // reqwest's default policy follows every redirect; the crate cannot stop that client
    // from sending its headers, but it does not use the answer.
    let items =
        collect(&openai(&server).http_client(agent_loop::provider::reqwest::Client::new())).await;
    assert!(matches!(final_error(&items), LlmError::Redirected { .. }));
    assert_eq!(text_of(&items), "");
}

// ---------------------------------------------------------------------------------------------
// 2. Errors inside an OpenAI-format stream are classified by the status in `code`, as LiteLLM
//    sends them, the same way as the same failure sent as a status.

fn litellm_error(error_type: &str, code: &str) -> MockResponse {
    let body = format!(
        "data: {}\n\n",
        json!({"error": {"message": format!("upstream {error_type}"), "type": error_type,
                         "param": null, "code": code}})
    );
    MockResponse::raw(200, "text/event-stream", body)
}

#[tokio::test]
async fn in_stream_errors_with_a_transient_status_in_code_are_retried() {
    for (error_type, code) in [
        ("internal_server_error", "500"),
        ("throttling_error", "429"),
        ("some_proxy_name", "503"),
    ] {
        let server = MockServer::start().await;
        server.push(litellm_error(error_type, code));
        server.push(ScriptedResponse::text("recovered"));
        let items = collect(&openai(&server)).await;
        assert_eq!(retries(&server), 1, "{error_type}: {items:?}");
        assert_eq!(text_of(&items), "recovered");
    }
}

#[tokio::test]
async fn in_stream_errors_with_a_client_status_in_code_surface_at_once() {
    let server = MockServer::start().await;
    server.push(litellm_error("bad_request_error", "400"));
    server.push(ScriptedResponse::text("never sent"));
    let items = collect(&openai(&server)).await;
    let error = final_error(&items);
    assert_eq!(error.status(), Some(400), "{error:?}");
    assert_eq!(retries(&server), 0);

    // A prompt that is too long, reported in-stream, is a context overflow.
    let server = MockServer::start().await;
    let body = format!(
        "data: {}\n\n",
        json!({"error": {"message": "prompt is too long: 300000 tokens > 200000 maximum",
                         "type": "invalid_request_error", "code": 400}})
    );
    server.push(MockResponse::raw(200, "text/event-stream", body));
    let error = final_error(&collect(&openai(&server)).await);
    assert!(matches!(error, LlmError::ContextOverflow(_)), "{error:?}");
}

#[tokio::test]
async fn in_stream_errors_without_a_status_are_classified_by_type_name() {
    let transient = |error_type: &str| LlmError::Stream {
        error_type: error_type.to_owned(),
        message: "x".to_owned(),
    };
    for name in [
        "internal_server_error",
        "throttling_error",
        "overloaded_error",
    ] {
        assert!(transient(name).is_retryable(), "{name}");
    }
    assert!(!transient("invalid_request_error").is_retryable());

    let server = MockServer::start().await;
    let body = format!(
        "data: {}\n\n",
        json!({"error": {"message": "busy", "type": "internal_server_error"}})
    );
    server.push(MockResponse::raw(200, "text/event-stream", body));
    server.push(ScriptedResponse::text("ok"));
    let items = collect(&openai(&server)).await;
    assert_eq!(retries(&server), 1, "{items:?}");
    assert_eq!(text_of(&items), "ok");
}

// ---------------------------------------------------------------------------------------------
// 3. A whole JSON message in answer to a stream request; an unexpected content type.

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct Add {
    a: i64,
    b: i64,
}

fn adder() -> impl agent_loop::Tool {
    FnTool::new("add", "Adds two integers.", |input: Add, _ctx| async move {
        Ok::<_, ToolError>((input.a + input.b).to_string())
    })
}

#[tokio::test]
async fn a_whole_json_answer_runs_the_loop_like_a_stream() {
    for format in FORMATS {
        let server = MockServer::start().await;
        server.push(MockResponse::json(
            ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3}))
                .usage_tokens(10, 4),
        ));
        server.push(MockResponse::json(
            ScriptedResponse::text("2 + 3 = 5").usage_tokens(20, 6),
        ));
        let mut agent = Agent::builder(client(format, &server))
            .tool(adder())
            .build()
            .unwrap();
        let events: Vec<AgentEvent> = agent.run("add 2 and 3").collect().await;
        let Some(AgentEvent::Finished(outcome)) = events.last() else {
            panic!("{events:?}");
        };
        assert_eq!(
            outcome.termination,
            Termination::Completed,
            "{format:?}: {events:?}"
        );
        assert_eq!(outcome.final_text, "2 + 3 = 5");
        assert_eq!(outcome.usage.output_tokens, 10, "{format:?}");
        assert!(events.iter().any(
            |e| matches!(e, AgentEvent::ToolResult { content, is_error: false, .. } if content == "5")
        ));
        assert!(!events.iter().any(|e| matches!(e, AgentEvent::Retry { .. })));
        assert_eq!(server.requests().len(), 2, "{format:?}: nothing re-sent");
        assert!(server.history_violations().is_empty());
    }
}

#[tokio::test]
async fn a_whole_json_error_body_is_the_providers_error() {
    // Anthropic's own shape, a proxy's `{"error": …}` without the `type`, and a bare
    // `{"type": "error"}`: each is the provider's error, never "not a message".
    let bad_thing = json!({"type": "invalid_request_error", "message": "bad thing"});
    let bodies = [
        (
            json!({"type": "error", "error": bad_thing}),
            "invalid_request_error",
            "bad thing",
        ),
        (
            json!({"error": bad_thing}),
            "invalid_request_error",
            "bad thing",
        ),
        (json!({"type": "error"}), "error", r#"{"type":"error"}"#),
    ];
    for (body, want_type, want_message) in bodies {
        let server = MockServer::start().await;
        server.push(MockResponse::raw(200, "application/json", body.to_string()));
        let error = final_error(&collect(&anthropic(&server)).await);
        assert!(
            matches!(&error, LlmError::Stream { error_type, message }
                if error_type == want_type && message == want_message),
            "{body}: {error:?}"
        );
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn an_html_page_is_refused_with_its_content_type_and_first_bytes() {
    for format in FORMATS {
        let server = MockServer::start().await;
        let page = format!(
            "<!DOCTYPE html><html><body>Please log in to the guest Wi-Fi{}</body></html>",
            "!".repeat(1000)
        );
        server.push(MockResponse::raw(200, "text/html; charset=utf-8", page));
        server.push(ScriptedResponse::text("never sent"));
        let items = collect(&*client(format, &server)).await;
        let error = final_error(&items);
        let LlmError::UnexpectedContentType {
            content_type,
            body_start,
        } = &error
        else {
            panic!("{format:?}: {error:?}");
        };
        assert_eq!(content_type, "text/html; charset=utf-8");
        assert!(body_start.starts_with("<!DOCTYPE html>"), "{body_start}");
        assert!(body_start.len() <= 200);
        let message = error.to_string();
        assert!(message.contains("text/html") && message.contains("guest Wi-Fi"));
        assert!(!error.is_retryable());
        assert_eq!(server.requests().len(), 1, "{format:?}: not retried");
    }
}

#[test]
fn whole_messages_decode_to_the_events_of_a_stream() {
    // Anthropic, with a tool call, thinking and a stop sequence.
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Let me add."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 3}
    });
    let mut events = Vec::new();
    WireDecoder::new(WireFormat::Anthropic)
        .decode_json(body.to_string().as_bytes(), &mut events)
        .unwrap();
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.id, "msg_1");
    assert_eq!(response.usage.input_tokens, 12);
    assert_eq!(response.usage.cache_read_input_tokens, 3);
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: "sig".into()
            },
            ContentBlock::text("Let me add."),
            ContentBlock::ToolUse {
                id: "toolu_1".into(),
                name: "add".into(),
                input: json!({"a": 1, "b": 2})
            },
        ]
    );

    // OpenAI, with two tool calls, reasoning and usage details.
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "reasoning_content": "think",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}},
                {"id": "call_b", "type": "function", "function": {"name": "add", "arguments": "{\"a\":3,\"b\":4}"}}
            ]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
                  "prompt_tokens_details": {"cached_tokens": 64},
                  "completion_tokens_details": {"reasoning_tokens": 25}}
    });
    let mut events = Vec::new();
    WireDecoder::new(WireFormat::OpenAiChat)
        .decode_json(body.to_string().as_bytes(), &mut events)
        .unwrap();
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let calls: Vec<(&str, &Value)> = response
        .message
        .tool_uses()
        .map(|(id, _, input)| (id, input))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_a", &json!({"a": 1, "b": 2})),
            ("call_b", &json!({"a": 3, "b": 4}))
        ]
    );
    assert_eq!(response.usage.input_tokens, 36);
    assert_eq!(response.usage.cache_read_input_tokens, 64);
    assert_eq!(response.usage.output_tokens, 40);
    assert_eq!(response.usage.reasoning_tokens, 25);

    // Bodies that are not messages are errors, never panics.
    for (format, body) in [
        (WireFormat::Anthropic, &b"{\"type\":\"nonsense\"}"[..]),
        (WireFormat::Anthropic, b"[1,2]"),
        (WireFormat::OpenAiChat, b"{\"choices\": 7}"),
        (WireFormat::OpenAiChat, b"\xff\xfe"),
    ] {
        let mut events = Vec::new();
        assert!(
            WireDecoder::new(format)
                .decode_json(body, &mut events)
                .is_err(),
            "{format:?} {body:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Connection reuse: a late chunk terminator is read, so one connection serves a whole run,
//    and one connection serves a failed attempt and the next, whatever the failure was.

#[tokio::test]
async fn a_twenty_turn_run_uses_one_connection() {
    for format in FORMATS {
        let server = MockServer::start().await;
        for turn in 0..19 {
            server.push(
                MockResponse::stream(ScriptedResponse::tool_call(
                    format!("call_{turn}"),
                    "add",
                    json!({"a": turn, "b": 1}),
                ))
                .terminator_delay(Duration::from_millis(20)),
            );
        }
        server.push(
            MockResponse::stream(ScriptedResponse::text("done"))
                .terminator_delay(Duration::from_millis(20)),
        );
        let mut agent = Agent::builder(client(format, &server))
            .tool(adder())
            .max_turns(25)
            .build()
            .unwrap();
        let events: Vec<AgentEvent> = agent.run("count").collect().await;
        let Some(AgentEvent::Finished(outcome)) = events.last() else {
            panic!("{events:?}");
        };
        assert_eq!(outcome.termination, Termination::Completed, "{events:?}");
        assert_eq!(outcome.turns, 20);
        assert_eq!(server.requests().len(), 20);
        assert_eq!(
            server.connections(),
            1,
            "{format:?}: one connection for 20 turns"
        );
    }
}

/// Every wire format the clients speak.
const ALL_FORMATS: [WireFormat; 3] = [
    WireFormat::Anthropic,
    WireFormat::OpenAiChat,
    WireFormat::OpenAiResponses,
];

/// A transient in-stream error of `format`, as its servers name it: Anthropic's
/// `overloaded_error`, OpenAI's `server_error` (a Chat chunk with an `error` object, a
/// Responses `error` event).
fn transient_error_type(format: WireFormat) -> &'static str {
    match format {
        WireFormat::Anthropic => "overloaded_error",
        _ => "server_error",
    }
}

/// The responses that end in an in-stream failure after some content, each body ending with
/// its chunk terminator late, as real servers end it.
fn failures_after_content(format: WireFormat) -> [(&'static str, MockResponse); 2] {
    [
        (
            "an error event",
            MockResponse::stream(ScriptedResponse::text("partial"))
                .error_event_at(
                    StreamPoint::AfterFirstContent,
                    transient_error_type(format),
                    "busy",
                )
                .keep_alive_after_error()
                .terminator_delay(Duration::from_millis(20)),
        ),
        (
            "a malformed event",
            MockResponse::stream(ScriptedResponse::text("partial").then_fail(
                LlmError::Malformed {
                    message: "garbage".into(),
                },
            ))
            .terminator_delay(Duration::from_millis(20)),
        ),
    ]
}

// The clock is paused: the late terminator and the drain's bound are virtual time, so the
// terminator always comes after the client has read the failure, and always within the bound.
// A client that drops the body at the failure opens a second connection (these tests saw 2
// before the driver drained after decoder errors).

#[tokio::test(start_paused = true)]
async fn an_in_stream_failure_after_content_keeps_the_connection_for_the_next_request() {
    for format in ALL_FORMATS {
        for (what, failing) in failures_after_content(format) {
            let server = MockServer::start().await;
            server.push(failing);
            server.push(
                MockResponse::stream(ScriptedResponse::text("whole"))
                    .terminator_delay(Duration::from_millis(20)),
            );
            let client = client(format, &server);

            let first = collect(&*client).await;
            assert_eq!(text_of(&first), "partial", "{format:?} {what}: {first:?}");
            let error = final_error(&first);
            assert_eq!(
                retries(&server),
                0,
                "{format:?} {what}: never re-sent after content"
            );
            match what {
                "an error event" => assert!(
                    error.to_string().contains("busy"),
                    "{format:?} {what}: {error:?}"
                ),
                _ => assert!(
                    matches!(error, LlmError::Malformed { .. }),
                    "{format:?} {what}: {error:?}"
                ),
            }

            let second = collect(&*client).await;
            assert_eq!(text_of(&second), "whole", "{format:?} {what}: {second:?}");
            assert!(second.iter().all(Result::is_ok), "{format:?} {what}");
            assert_eq!(server.requests().len(), 2, "{format:?} {what}");
            assert_eq!(
                server.connections(),
                1,
                "{format:?} {what}: the body was read to its terminator, so the second \
                 request reused the connection"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_an_in_stream_error_before_content_reuses_the_connection() {
    for format in ALL_FORMATS {
        let server = MockServer::start().await;
        server.push(
            MockResponse::stream(ScriptedResponse::text("never"))
                .error_event_at(
                    StreamPoint::BeforeContent,
                    transient_error_type(format),
                    "busy",
                )
                .keep_alive_after_error()
                .terminator_delay(Duration::from_millis(20)),
        );
        server.push(
            MockResponse::stream(ScriptedResponse::text("whole"))
                .terminator_delay(Duration::from_millis(20)),
        );

        let items = collect(&*client(format, &server)).await;
        assert_eq!(retries(&server), 1, "{format:?}: {items:?}");
        assert_eq!(text_of(&items), "whole", "{format:?}: {items:?}");
        assert!(items.iter().all(Result::is_ok), "{format:?}: {items:?}");
        assert_eq!(server.requests().len(), 2, "{format:?}");
        assert_eq!(
            server.connections(),
            1,
            "{format:?}: the client's retry reused the connection of the failed attempt"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5-6. Finish reasons, usage details, stop sequences, request ids.

#[test]
fn a_refusal_cut_off_by_length_reports_the_truncation() {
    let body =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can't help with\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
        data: [DONE]\n\n";
    let decoded = common::decode(WireFormat::OpenAiChat, body);
    let response = decoded.result.unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert_eq!(response.text(), "I can't help with");

    let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"No.\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
        data: [DONE]\n\n";
    let response = common::decode(WireFormat::OpenAiChat, body).result.unwrap();
    assert_eq!(response.stop_reason, StopReason::Refusal);
}

#[test]
fn openai_usage_keeps_reasoning_and_cached_tokens() {
    let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n\
        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2000,\"completion_tokens\":300,\
        \"prompt_tokens_details\":{\"cached_tokens\":1536,\"audio_tokens\":null},\
        \"completion_tokens_details\":{\"reasoning_tokens\":256,\"audio_tokens\":0}}}\n\n\
        data: [DONE]\n\n";
    let usage = common::decode(WireFormat::OpenAiChat, body)
        .result
        .unwrap()
        .usage;
    assert_eq!(usage.input_tokens, 464);
    assert_eq!(usage.cache_read_input_tokens, 1536);
    assert_eq!(usage.output_tokens, 300);
    assert_eq!(usage.reasoning_tokens, 256);
    assert_eq!(usage.total_tokens(), 2300);
}

#[test]
fn anthropic_stop_sequence_reaches_the_response() {
    let body = "event: message_start\n\
        data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":1}}}\n\n\
        event: content_block_start\n\
        data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"1, 2, 3\"}}\n\n\
        event: content_block_stop\n\
        data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: message_delta\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"4\"},\"usage\":{\"output_tokens\":5}}\n\n\
        event: message_stop\n\
        data: {\"type\":\"message_stop\"}\n\n";
    for size in [1, 7, body.len()] {
        let response = common::decode_chunked(WireFormat::Anthropic, body.as_bytes(), size)
            .result
            .unwrap();
        assert_eq!(response.stop_reason, StopReason::StopSequence);
        assert_eq!(response.stop_sequence.as_deref(), Some("4"));
    }
    let plain = body.replace(
        "\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"4\"",
        "\"stop_reason\":\"end_turn\",\"stop_sequence\":null",
    );
    let response = common::decode(WireFormat::Anthropic, plain.as_bytes())
        .result
        .unwrap();
    assert_eq!(response.stop_sequence, None);
}

#[tokio::test]
async fn the_request_id_is_read_from_the_headers_proxies_send() {
    for (header, id) in [
        ("request-id", "req_1"),
        ("x-request-id", "req_2"),
        ("x-litellm-call-id", "litellm-3"),
    ] {
        let server = MockServer::start().await;
        server.push(
            MockResponse::raw(
                400,
                "application/json",
                json!({"error": {"message": "bad", "type": "invalid_request_error"}}).to_string(),
            )
            .header(header, id),
        );
        let error = final_error(&collect(&openai(&server)).await);
        let LlmError::Api(api) = &error else {
            panic!("{error:?}")
        };
        assert_eq!(api.request_id.as_deref(), Some(id), "{header}");
        assert!(error.to_string().contains(id));
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Signed thinking over Chat Completions (LiteLLM in front of Claude).

fn litellm_thinking_tool_turn() -> MockResponse {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-l", "object": "chat.completion.chunk", "created": 1,
                   "model": "claude-sonnet", "choices": [{"index": 0, "delta": delta,
                   "finish_reason": finish}]})
        )
    };
    let body = [
        chunk(json!({"role": "assistant", "reasoning_content": "I should ",
                     "thinking_blocks": [{"type": "thinking", "thinking": "I should ", "signature": null}]}),
              Value::Null),
        chunk(json!({"reasoning_content": "add.",
                     "thinking_blocks": [{"type": "thinking", "thinking": "add.", "signature": null}]}),
              Value::Null),
        chunk(json!({"thinking_blocks": [{"type": "thinking", "thinking": "", "signature": "SIG=="}]}),
              Value::Null),
        chunk(json!({"tool_calls": [{"index": 0, "id": "toolu_9", "type": "function",
                                     "function": {"name": "add", "arguments": "{\"a\": 4, \"b\": 5}"}}]}),
              Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    MockResponse::raw(200, "text/event-stream", body)
}

#[tokio::test]
async fn signed_thinking_round_trips_over_chat_completions_when_asked() {
    for send in [true, false] {
        let server = MockServer::start().await;
        server.push(litellm_thinking_tool_turn());
        server.push(ScriptedResponse::text("9"));
        let client = openai(&server).send_thinking_blocks(send);
        let mut agent = Agent::builder(client).tool(adder()).build().unwrap();
        let events: Vec<AgentEvent> = agent.run("4 + 5?").collect().await;
        assert!(matches!(events.last(), Some(AgentEvent::Finished(o)) if o.final_text == "9"));
        let thinking = agent.messages()[1].content[0].clone();
        assert_eq!(
            thinking,
            ContentBlock::Thinking {
                thinking: "I should add.".into(),
                signature: "SIG==".into()
            }
        );
        let second = &server.requests()[1].body;
        let assistant = &second["messages"][1];
        assert_eq!(assistant["role"], "assistant");
        if send {
            assert_eq!(
                assistant["thinking_blocks"],
                json!([{"type": "thinking", "thinking": "I should add.", "signature": "SIG=="}])
            );
        } else {
            assert!(assistant.get("thinking_blocks").is_none(), "{assistant}");
        }
    }
}

#[tokio::test]
async fn unsigned_reasoning_is_never_sent_back() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::thinking("deepseek reasoning", "").then_tool_call(
            "call_1",
            "add",
            json!({"a": 1, "b": 1}),
        ),
    );
    server.push(ScriptedResponse::text("2"));
    let client = openai(&server).send_thinking_blocks(true);
    let mut agent = Agent::builder(client).tool(adder()).build().unwrap();
    let _: Vec<AgentEvent> = agent.run("1 + 1?").collect().await;
    let second = &server.requests()[1].body;
    let text = second.to_string();
    assert!(!text.contains("deepseek reasoning"), "{text}");
    assert!(second["messages"][1].get("thinking_blocks").is_none());
}

// ---------------------------------------------------------------------------------------------
// 11-12. Reasoning models' token field, Azure, keys, and errors that name the URL.

#[tokio::test]
async fn the_token_limit_field_follows_the_model_unless_set() {
    let server = MockServer::start().await;
    for model in ["o3-mini", "gpt-5", "gpt-4.1", "llama3"] {
        server.push(ScriptedResponse::text("ok"));
        let client = openai(&server).model(model);
        let _ = collect(&client).await;
    }
    server.push(ScriptedResponse::text("ok"));
    let forced = openai(&server)
        .model("o3-mini")
        .max_tokens_field(agent_loop::provider::openai::MaxTokensField::MaxTokens);
    let _ = collect(&forced).await;
    let fields: Vec<(bool, bool)> = server
        .requests()
        .iter()
        .map(|r| {
            (
                r.body.get("max_completion_tokens").is_some(),
                r.body.get("max_tokens").is_some(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        vec![
            (true, false),
            (true, false),
            (false, true),
            (false, true),
            (false, true)
        ]
    );
}

#[tokio::test]
async fn azure_openai_gets_its_query_and_key_header() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("hi from azure"));
    let client = OpenAiClient::new("azure-secret-key")
        .base_url(format!(
            "{}/openai/deployments/gpt-4o/?api-version=2024-10-21",
            server.url()
        ))
        .auth_header("api-key")
        .model("gpt-4o");
    let items = collect(&client).await;
    assert_eq!(text_of(&items), "hi from azure");
    let request = &server.requests()[0];
    assert_eq!(
        request.path,
        "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(request.header("api-key"), Some("azure-secret-key"));
    assert_eq!(request.header("authorization"), None);
    assert!(!format!("{client:?}").contains("azure-secret-key"));
}

#[tokio::test]
async fn an_empty_key_sends_no_authorization() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("local"));
    let client = OpenAiClient::new("")
        .base_url(server.openai_base_url())
        .model("qwen");
    assert_eq!(text_of(&collect(&client).await), "local");
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn a_connection_error_names_the_url_without_its_query() {
    // Bind a port, then free it: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = OpenAiClient::new(KEY)
        .base_url(format!("http://127.0.0.1:{port}/v1?token=hidden"))
        .model("m")
        .retry_policy(RetryPolicy::none());
    let error = final_error(&collect(&client).await);
    let message = error.to_string();
    assert!(matches!(error, LlmError::Connect { .. }), "{error:?}");
    assert!(
        message.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions")),
        "{message}"
    );
    assert!(
        !message.contains("hidden") && !message.contains(KEY),
        "{message}"
    );
}

#[test]
fn what_is_retryable_is_decided_in_one_place() {
    // They used to disagree: a 400 with `x-should-retry: true` was retryable to
    // LlmError::is_retryable and not to the retry policy.
    let api = |status: u16, should_retry: Option<bool>| {
        let mut error = agent_loop::error::ApiError::new(status, "x");
        error.should_retry = should_retry;
        LlmError::Api(Box::new(error))
    };
    let policy = RetryPolicy::default();
    for (status, verdict, retryable) in [
        (400, Some(true), false),
        (422, Some(true), false),
        (418, Some(true), true),
        (503, Some(false), false),
        (503, None, true),
        (429, None, true),
    ] {
        let error = api(status, verdict);
        assert_eq!(error.is_retryable(), retryable, "{status} {verdict:?}");
        assert_eq!(
            policy.delay_for(1, &error).is_some(),
            retryable,
            "{status} {verdict:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The agent's prompt cache and its settings.

#[tokio::test]
async fn the_agent_marks_cache_breakpoints_and_reports_the_hit_ratio() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::tool_call("c1", "add", json!({"a": 1, "b": 2})).usage(
            agent_loop::Usage {
                input_tokens: 100,
                cache_creation_input_tokens: 900,
                output_tokens: 5,
                ..Default::default()
            },
        ),
    );
    server.push(ScriptedResponse::text("3").usage(agent_loop::Usage {
        input_tokens: 100,
        cache_read_input_tokens: 900,
        output_tokens: 1,
        ..Default::default()
    }));
    let mut agent = Agent::builder(anthropic(&server))
        .system("You add.")
        .tool(adder())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("1 + 2?").collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}");
    };
    // 900 of 2,000 input tokens came from the cache.
    assert!(
        (outcome.cache_hit_ratio() - 0.45).abs() < 1e-9,
        "{outcome:?}"
    );
    for request in server.requests() {
        let body = request.body.to_string();
        let marks = body.matches("\"cache_control\"").count();
        assert!((2..=4).contains(&marks), "{marks} breakpoints in {body}");
    }

    // Off: no breakpoints at all.
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("hi"));
    let mut agent = Agent::builder(anthropic(&server))
        .system("You add.")
        .settings(
            RequestSettings::new().prompt_cache(agent_loop::provider::cache::PromptCache::off()),
        )
        .build()
        .unwrap();
    let _: Vec<AgentEvent> = agent.run("hello").collect().await;
    assert!(!server.requests()[0]
        .body
        .to_string()
        .contains("cache_control"));
}

#[test]
fn settings_the_api_would_refuse_fail_at_build() {
    let mut cache = agent_loop::provider::cache::PromptCache::default();
    cache.message_breakpoints = 9;
    let error = Agent::builder(ScriptedClient::new([]))
        .settings(RequestSettings::new().prompt_cache(cache))
        .build()
        .unwrap_err();
    assert!(matches!(error, agent_loop::Error::Config(_)), "{error}");

    let error = Agent::builder(ScriptedClient::new([]))
        .context(agent_loop::ContextManager::new(
            agent_loop::context::ContextConfig::default().compaction_target(0.99),
        ))
        .build()
        .unwrap_err();
    assert!(matches!(error, agent_loop::Error::Config(_)), "{error}");
}

// ----- 6. servers that repeat tool-call ids or send empty ones ---------------------------

#[tokio::test]
async fn repeated_and_empty_call_ids_from_a_server_still_make_a_valid_history() {
    // Some servers number the calls of each turn from 0, some proxies send empty ids. The
    // mock refuses (400) any request whose history a real API would refuse, so every request
    // after the first proves the history sent back is valid.
    for format in [
        WireFormat::Anthropic,
        WireFormat::OpenAiChat,
        WireFormat::OpenAiResponses,
    ] {
        let server = MockServer::start().await;
        server.push(
            ScriptedResponse::tool_call("call_0", "add", json!({"a": 1, "b": 2})).then_tool_call(
                "call_0",
                "add",
                json!({"a": 3, "b": 4}),
            ),
        );
        server.push(ScriptedResponse::tool_call(
            "call_0",
            "add",
            json!({"a": 5, "b": 6}),
        ));
        server.push(
            ScriptedResponse::tool_call("", "add", json!({"a": 7, "b": 8})).then_tool_call(
                "",
                "add",
                json!({"a": 9, "b": 10}),
            ),
        );
        server.push(ScriptedResponse::text("done"));
        let mut agent = Agent::builder(client(format, &server))
            .tool(adder())
            .build()
            .unwrap();
        // Two calls with one id used to hang the run: the second result never found a slot.
        let events: Vec<AgentEvent> =
            tokio::time::timeout(Duration::from_secs(60), agent.run("add").collect())
                .await
                .expect("the run ends");
        let Some(AgentEvent::Finished(outcome)) = events.last() else {
            panic!("{events:?}");
        };
        assert_eq!(
            outcome.termination,
            Termination::Completed,
            "{format:?}: {events:#?}"
        );
        assert_eq!(server.requests().len(), 4, "{format:?}");
        assert!(
            server.history_violations().is_empty(),
            "{format:?}: {:?}",
            server.history_violations()
        );
        let results: Vec<String> = agent
            .messages()
            .iter()
            .flat_map(|m| m.content.clone())
            .filter_map(|b| match b {
                ContentBlock::ToolResult { content, .. } => Some(content),
                _ => None,
            })
            .collect();
        assert_eq!(results, ["3", "7", "11", "15", "19"], "{format:?}");
    }
}
