//! The test doubles themselves: ScriptedClient and MockServer.

use std::time::Duration;

use agent_loop::provider::transport::RetryPolicy;
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{
    history_violation, MockResponse, MockServer, ScriptedClient, ScriptedResponse,
};
use agent_loop::{
    AnthropicClient, ContentBlock, LlmClient, LlmError, LlmEvent, Message, OpenAiClient, Role,
    StopReason, Usage,
};
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn request(text: &str) -> ModelRequest {
    ModelRequest::new(vec![Message::user(text)])
}

async fn collect(
    client: &dyn LlmClient,
    request: &ModelRequest,
) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream(request).collect().await
}

#[tokio::test]
async fn scripted_client_plays_in_order_and_records_requests() {
    let client = ScriptedClient::new([
        ScriptedResponse::thinking("hmm", "sig")
            .then_tool_call("c1", "lookup", json!({"q": "x"}))
            .usage_tokens(5, 7),
        ScriptedResponse::text("done").stop_reason(StopReason::MaxTokens),
    ])
    .with_model("scripted");
    let handle = client.clone();
    assert_eq!(client.model(), "scripted");

    let first = collect(&client, &request("one")).await;
    let events: Vec<LlmEvent> = first.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events,
        vec![
            LlmEvent::MessageStart {
                id: "msg_scripted".into(),
                // The model asked for (the client's): a scripted response names it.
                model: "scripted".into()
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "hmm".into()
            },
            LlmEvent::SignatureDelta {
                index: 0,
                signature: "sig".into()
            },
            LlmEvent::BlockStop { index: 0 },
            LlmEvent::ToolCallStart {
                index: 1,
                id: "c1".into(),
                name: "lookup".into()
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: "{\"q\":\"x\"}".into()
            },
            LlmEvent::BlockStop { index: 1 },
            LlmEvent::Usage(Usage {
                input_tokens: 5,
                output_tokens: 7,
                ..Usage::default()
            }),
            LlmEvent::MessageStop {
                stop_reason: StopReason::ToolUse
            },
        ]
    );
    let second = collect(&client, &request("two")).await;
    assert!(matches!(
        second.last(),
        Some(Ok(LlmEvent::MessageStop {
            stop_reason: StopReason::MaxTokens
        }))
    ));
    // The clone sees the same requests.
    let texts: Vec<String> = handle
        .requests()
        .iter()
        .map(|r| r.messages[0].text())
        .collect();
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(handle.remaining(), 0);

    // The script ran out: one clear, non-retryable error.
    let third = collect(&client, &request("three")).await;
    assert_eq!(third.len(), 1);
    let Err(error) = &third[0] else { panic!() };
    assert!(error.to_string().contains("script ran out"), "{error}");
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn scripted_failures_chunking_and_laziness() {
    let client = ScriptedClient::new([
        ScriptedResponse::error(LlmError::Connect {
            message: "refused".into(),
        }),
        ScriptedResponse::text("héllo")
            .chunked(2)
            .then_fail(LlmError::Incomplete {
                detail: "cut".into(),
            }),
    ]);
    let req = request("x");
    let stream = client.stream(&req);
    assert!(
        client.requests().is_empty(),
        "nothing happens before the first poll"
    );
    drop(stream);

    let items = collect(&client, &req).await;
    assert_eq!(
        items,
        vec![Err(LlmError::Connect {
            message: "refused".into()
        })]
    );
    let items = collect(&client, &req).await;
    let texts: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["hé", "ll", "o"]);
    assert!(matches!(
        items.last(),
        Some(Err(LlmError::Incomplete { .. }))
    ));
}

#[tokio::test(start_paused = true)]
async fn scripted_pauses_and_stalls_use_tokio_time() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("a")
            .then_pause(Duration::from_secs(30))
            .then_text("b"),
        ScriptedResponse::text("a").then_stall(),
    ]);
    let req = request("x");
    let start = tokio::time::Instant::now();
    let items = collect(&client, &req).await;
    assert!(matches!(
        items.last(),
        Some(Ok(LlmEvent::MessageStop { .. }))
    ));
    assert!(start.elapsed() >= Duration::from_secs(30));

    let stalled = tokio::time::timeout(Duration::from_secs(3600), collect(&client, &req)).await;
    assert!(stalled.is_err(), "a stalled response never ends");
}

#[tokio::test]
async fn history_violations_are_recorded_not_raised() {
    let client = ScriptedClient::new([ScriptedResponse::text("ok")]);
    let bad = ModelRequest::new(vec![
        Message::user("hi"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "t".into(),
                input: json!({}),
            }],
        },
        Message::user("no result"),
    ]);
    assert!(history_violation(&bad.messages).is_some());
    let items = collect(&client, &bad).await;
    assert!(matches!(
        items.last(),
        Some(Ok(LlmEvent::MessageStop { .. }))
    ));
    let violations = client.history_violations();
    assert_eq!(violations.len(), 1);
    assert!(violations[0].starts_with("request #1"), "{violations:?}");

    // The mock server checks the wire form of both providers.
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    server.push(ScriptedResponse::text("ok"));
    let anthropic = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("m");
    let openai = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("m");
    // A real API refuses such a history: so does the mock, with a 400 that is not retried,
    // and without using the script.
    for items in [
        collect(&anthropic, &bad).await,
        collect(&openai, &bad).await,
    ] {
        match items.last() {
            Some(Err(LlmError::Api(api))) if api.status == 400 => {
                assert!(api.message.contains("refuses this history"), "{api:?}")
            }
            other => panic!("expected a 400, got {other:?}"),
        }
    }
    assert_eq!(
        server.history_violations().len(),
        2,
        "{:?}",
        server.history_violations()
    );

    let good = ModelRequest::new(vec![
        Message::user("hi"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "t".into(),
                input: json!({}),
            }],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("c1", "r", false)],
        },
    ]);
    collect(&anthropic, &good).await;
    collect(&openai, &good).await;
    assert_eq!(server.history_violations().len(), 2);
    assert_eq!(server.requests().len(), 4);
}

/// Sends raw bytes to the server and returns everything it answers until it closes.
async fn raw_exchange(server: &MockServer, request: &[u8]) -> String {
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn the_server_is_strict_and_bounded() {
    let server = MockServer::start().await;
    let answer = raw_exchange(&server, b"garbage\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    let answer = raw_exchange(
        &server,
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 40000000\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    let answer = raw_exchange(
        &server,
        b"POST /elsewhere HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

    // The script is empty: a 500 that says so and must not be retried.
    let answer = raw_exchange(
        &server,
        b"POST /x/v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
    assert!(answer.contains("x-should-retry: false"), "{answer}");
    assert!(answer.contains("script ran out"), "{answer}");

    let recorded = server.requests();
    assert_eq!(recorded.len(), 2, "only parsed requests are recorded");
    assert_eq!(recorded[1].path, "/x/v1/chat/completions");
    assert_eq!(recorded[1].body, json!({}));
    assert_eq!(recorded[1].header("HOST"), Some("x"));
}

#[tokio::test]
async fn streams_are_chunked_and_byte_chunking_decodes() {
    let server = MockServer::start().await;
    server.push(MockResponse::stream(ScriptedResponse::text("ab")).chunk_size(1));
    let answer = raw_exchange(
        &server,
        b"POST /anthropic/v1/messages HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("transfer-encoding: chunked"));
    assert!(answer.contains("content-type: text/event-stream"));
    assert!(answer.contains("\r\n1\r\ne\r\n"), "one byte per chunk");
    assert!(answer.ends_with("0\r\n\r\n"));

    let client = OpenAiClient::new("")
        .base_url(server.openai_base_url())
        .model("m")
        .retry_policy(RetryPolicy::none());
    server.push(MockResponse::stream(ScriptedResponse::text("chunk by chunk")).chunk_size(1));
    let items = collect(&client, &request("x")).await;
    let text: String = items
        .iter()
        .filter_map(|i| match i {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "chunk by chunk");
    // No key: no Authorization header.
    assert_eq!(server.requests()[1].header("authorization"), None);
}

#[tokio::test]
async fn scripted_api_errors_become_statuses() {
    let server = MockServer::start().await;
    let mut api = agent_loop::error::ApiError::new(429, "slow down");
    api.error_type = Some("rate_limit_error".into());
    api.retry_after = Some(Duration::from_millis(1));
    server.push(ScriptedResponse::error(LlmError::Api(Box::new(api))));
    server.push(ScriptedResponse::text("ok"));
    let client = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("m");
    let items = collect(&client, &request("x")).await;
    // Retried (silently: the stream goes on), after the delay the error asked for.
    assert_eq!(server.requests().len(), 2, "{items:?}");
    assert!(matches!(
        items.last(),
        Some(Ok(LlmEvent::MessageStop { .. }))
    ));
}

#[tokio::test]
async fn the_server_stops_when_dropped() {
    let server = MockServer::start().await;
    let addr = server.url().trim_start_matches("http://").to_owned();
    drop(server);
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "the listener is closed after drop");
}

/// A client pointed at a base URL that doubles the API's own path prefix gets the 404 the
/// real API would give, naming the path, in the format's error shape; the script is not used.
#[tokio::test]
async fn a_path_the_real_api_does_not_serve_is_a_404() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("never"));
    let url = server.url();
    let none = RetryPolicy::none();
    let clients: Vec<(Box<dyn LlmClient>, &str)> = vec![
        (
            Box::new(
                agent_loop::GeminiClient::new("key")
                    .base_url(format!("{url}/v1beta"))
                    .model("gemini-test")
                    .retry_policy(none.clone()),
            ),
            "/v1beta/v1beta/models/gemini-test:streamGenerateContent",
        ),
        (
            Box::new(
                agent_loop::GeminiClient::vertex("p", "us-central1", "token")
                    .base_url(format!("{url}/v1"))
                    .model("gemini-test")
                    .retry_policy(none.clone()),
            ),
            "/v1/v1/projects/p/locations/us-central1",
        ),
        (
            Box::new(
                AnthropicClient::new("key")
                    .base_url(format!("{}/v1", server.anthropic_base_url()))
                    .model("m")
                    .retry_policy(none.clone()),
            ),
            "/anthropic/v1/v1/messages",
        ),
        (
            Box::new(
                OpenAiClient::new("key")
                    .base_url(format!("{}/v1", server.openai_base_url()))
                    .model("m")
                    .retry_policy(none.clone()),
            ),
            "/v1/v1/chat/completions",
        ),
        (
            Box::new(
                OpenAiClient::new("key")
                    .base_url(format!("{}/v1", server.openai_base_url()))
                    .model("m")
                    .retry_policy(none.clone())
                    .responses(),
            ),
            "/v1/v1/responses",
        ),
        (
            Box::new(
                agent_loop::OllamaClient::new()
                    .base_url(format!("{url}/api"))
                    .model("m")
                    .retry_policy(none.clone()),
            ),
            "/api/api/chat",
        ),
        (
            Box::new(
                agent_loop::BedrockClient::new("us-east-1")
                    .api_key("key")
                    .base_url(format!("{url}/model/m"))
                    .model("m")
                    .retry_policy(none.clone()),
            ),
            "/model/m/model/m/converse-stream",
        ),
    ];
    for (client, path) in clients {
        let items = collect(client.as_ref(), &request("hi")).await;
        match items.as_slice() {
            [Err(LlmError::Api(api))] => {
                assert_eq!(api.status, 404, "{path}: {api:?}");
                assert!(api.message.contains(path), "{path}: {api:?}");
            }
            other => panic!("{path}: {other:?}"),
        }
    }
    assert_eq!(server.remaining(), 1, "no wrong path used the script");
    // The right paths are still served.
    let gemini = agent_loop::GeminiClient::new("key")
        .base_url(url)
        .model("gemini-test")
        .retry_policy(none);
    let items = collect(&gemini, &request("hi")).await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(server.remaining(), 0);
}

/// A scripted response that names no model answers as the model the request asked for, in
/// every format that names one (the body's `model`, Gemini's path), so a run over the mock is
/// priced at that model; one that names its own keeps it.
#[tokio::test]
async fn the_mock_names_the_model_the_request_asked_for() {
    let server = MockServer::start().await;
    let url = server.url();
    let none = RetryPolicy::none();
    let clients: Vec<Box<dyn LlmClient>> = vec![
        Box::new(
            AnthropicClient::new("key")
                .base_url(server.anthropic_base_url())
                .model("claude-asked")
                .retry_policy(none.clone()),
        ),
        Box::new(
            OpenAiClient::new("key")
                .base_url(server.openai_base_url())
                .model("gpt-asked")
                .retry_policy(none.clone()),
        ),
        Box::new(
            OpenAiClient::new("key")
                .base_url(server.openai_base_url())
                .model("gpt-asked")
                .retry_policy(none.clone())
                .responses(),
        ),
        Box::new(
            agent_loop::GeminiClient::new("key")
                .base_url(url.clone())
                .model("gemini-asked")
                .retry_policy(none.clone()),
        ),
        Box::new(
            agent_loop::OllamaClient::new()
                .base_url(url.clone())
                .model("llama-asked")
                .retry_policy(none.clone()),
        ),
        // (Bedrock's Converse stream names no model: a run over it is priced at the
        // requested model by the agent itself.)
    ];
    for client in clients {
        server.push(ScriptedResponse::text("hi"));
        let items = collect(client.as_ref(), &request("hi")).await;
        let named = items.iter().find_map(|item| match item {
            Ok(LlmEvent::MessageStart { model, .. }) => Some(model.clone()),
            _ => None,
        });
        assert_eq!(named.as_deref(), Some(client.model()), "{items:?}");
    }
    server.push(ScriptedResponse::text("hi").model("its-own"));
    let anthropic = AnthropicClient::new("key")
        .base_url(server.anthropic_base_url())
        .model("claude-asked");
    let items = collect(&anthropic, &request("hi")).await;
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(LlmEvent::MessageStart { model, .. }) if model == "its-own")),
        "{items:?}"
    );
}
