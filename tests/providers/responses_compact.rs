//! Compaction on request (`OpenAiClient::compact_on_server`, OpenAI Responses `POST
//! /responses/compact`): the body is `model`, `input` and `instructions` (golden:
//! tests/golden/responses_compact_request.json, checked against the openai SDK's
//! `ResponseCompactParams` by scripts/check-golden-requests.py); the compacted conversation
//! (the user's messages, then the compaction item) is restored into the agent and sent back
//! as it came; a fallback of another format gets a valid request; a transient failure is
//! retried; `MockServer` refuses what the endpoint refuses.

use std::time::Duration;

use agent_loop::agent::{Fallback, RunPolicy};
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::{Agent, AgentEvent, AnthropicClient, ContentBlock, LlmError, OpenAiClient, Role};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn client(base_url: String) -> OpenAiClient {
    OpenAiClient::new("sk-test")
        .base_url(base_url)
        .model("gpt-5.4")
        .responses()
}

fn builder(client: OpenAiClient) -> agent_loop::AgentBuilder {
    let read = crate::common::agent::path_reader();
    Agent::builder(client).system("You read files.").tool(read)
}

/// A first run: a tool turn, then an answer.
async fn first_run(server: &MockServer, agent: &mut Agent) {
    server.push(ScriptedResponse::tool_call(
        "c1",
        "read",
        json!({"path": "a.rs"}),
    ));
    server.push(ScriptedResponse::text("a.rs defines a."));
    let events: Vec<AgentEvent> = agent.run("Read a.rs").collect().await;
    assert!(server.history_violations().is_empty(), "{events:#?}");
}

#[tokio::test]
async fn a_compacted_conversation_is_restored_and_sent_back_as_it_came() {
    let server = MockServer::start().await;
    let openai = client(server.openai_base_url());
    let mut agent = builder(openai.clone()).build().unwrap();
    first_run(&server, &mut agent).await;

    let compacted = openai.compact_on_server(&agent.snapshot()).await.unwrap();
    let requests = server.requests();
    let sent = &requests.last().unwrap();
    assert!(
        sent.path.ends_with("/v1/responses/compact"),
        "{}",
        sent.path
    );
    assert!(sent.format.is_none());
    assert!(sent
        .headers
        .iter()
        .any(|(n, v)| n == "accept" && v == "application/json"));
    // The body is golden (checked against the openai SDK's `ResponseCompactParams`).
    crate::common::assert_golden("responses_compact_request.json", &sent.body);
    assert_eq!(sent.body["instructions"], "You read files.");

    // The user's words, then the compaction item; the usage the server reported.
    let number = requests.len();
    let messages = &compacted.conversation.messages;
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(messages[0].role, Role::User);
    assert_eq!(messages[0].content, vec![ContentBlock::text("Read a.rs")]);
    let item = ContentBlock::Compaction {
        id: Some(format!("cmp_mock_{number}")),
        encrypted_content: format!("mock-compaction-{number}"),
    };
    assert_eq!(messages[1].content, vec![item.clone()]);
    assert!(compacted.usage.input_tokens > 0);
    assert_eq!(compacted.id, Some(format!("resp_cmp_mock_{number}")));

    // Restored, the next run sends the window: the user's words, the item, the new input.
    agent.restore(compacted.conversation).unwrap();
    server.push(ScriptedResponse::text("b.rs defines b."));
    let events: Vec<AgentEvent> = agent.run("Now b.rs").collect().await;
    assert!(server.history_violations().is_empty(), "{events:#?}");
    let next = server.requests().last().unwrap().body.clone();
    let input = next["input"].as_array().unwrap();
    assert_eq!(input.len(), 3, "{input:#?}");
    assert_eq!(input[0]["role"], "user");
    assert_eq!(
        input[1],
        json!({"type": "compaction", "id": format!("cmp_mock_{number}"),
               "encrypted_content": format!("mock-compaction-{number}")})
    );
    assert_eq!(input[2]["role"], "user");
    assert!(!next.to_string().contains("contents of a.rs"));
    // A saved session keeps the item.
    let saved = serde_json::to_string(&agent.snapshot()).unwrap();
    assert!(saved.contains(&format!("mock-compaction-{number}")));
}

#[tokio::test]
async fn a_fallback_of_another_format_gets_a_valid_request_after_compaction() {
    let openai = MockServer::start().await;
    let anthropic = MockServer::start().await;
    let primary = client(openai.openai_base_url());
    let backup = AnthropicClient::new("k")
        .base_url(anthropic.anthropic_base_url())
        .model("claude-test");
    let mut agent = builder(primary.clone())
        .policy(RunPolicy::new().retry(RetryPolicy::none()))
        .fallback(Fallback::new(backup))
        .build()
        .unwrap();
    first_run(&openai, &mut agent).await;
    let compacted = primary.compact_on_server(&agent.snapshot()).await.unwrap();
    agent.restore(compacted.conversation).unwrap();

    openai.push(MockResponse::status(529).error_type("overloaded_error"));
    anthropic.push(ScriptedResponse::text("done on Anthropic"));
    let events: Vec<AgentEvent> = agent.run("Now b.rs").collect().await;
    crate::common::agent::assert_fell_back(&events);
    let sent = anthropic.requests();
    assert_eq!(sent.len(), 1, "{events:#?}");
    assert!(anthropic.history_violations().is_empty());
    let body = sent[0].body.to_string();
    assert!(!body.contains("compaction"), "{body}");
    assert!(
        body.contains("Read a.rs") && body.contains("Now b.rs"),
        "{body}"
    );
}

#[tokio::test]
async fn what_the_endpoint_refuses_the_mock_refuses() {
    let server = MockServer::start().await;
    let url = format!("{}/responses/compact", server.openai_base_url());
    let post = |body: Value| {
        let url = url.clone();
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth("k")
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let input = json!([{"role": "user", "content": "hi"}]);
    for bad in [
        json!({"input": input}),
        json!({"model": "m", "input": input, "stream": true}),
        json!({"model": "m", "input": input, "tools": []}),
        json!({"model": "m", "input": []}),
        json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "x",
                                         "output": "orphan"}]}),
        json!({"model": "m", "input": [{"role": "user", "content": "hi"},
                                        {"type": "compaction", "id": "cmp_1"}]}),
    ] {
        assert_eq!(post(bad.clone()).await, 400, "{bad}");
    }
    assert_eq!(post(json!({"model": "m", "input": input})).await, 200);
    // The API's path twice is not served.
    let doubled = format!("{}/v1/responses/compact", server.openai_base_url());
    let status = reqwest::Client::new()
        .post(doubled)
        .json(&json!({"model": "m", "input": input}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404);
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn nothing_is_sent_for_an_empty_conversation() {
    let server = MockServer::start().await;
    let empty = agent_loop::context::Conversation::new(None, Vec::new());
    let error = client(server.openai_base_url())
        .compact_on_server(&empty)
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::InvalidRequest { .. }), "{error}");
    assert!(server.requests().is_empty());
}

/// A one-route HTTP server: answers each connection with the next of `answers` (status, body).
async fn answering(answers: Vec<(u16, String)>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for (status, body) in answers {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 64 << 10];
            let mut read = 0;
            // The head, then the body its content-length announces.
            loop {
                let n = socket.read(&mut buf[read..]).await.unwrap();
                read += n;
                let text = String::from_utf8_lossy(&buf[..read]);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if read >= end + 4 + length || n == 0 {
                        break;
                    }
                }
            }
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(reply.as_bytes()).await.unwrap();
            let _ = socket.shutdown().await;
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn a_transient_failure_is_retried_and_a_bad_answer_is_an_error() {
    let compacted = json!({"id": "resp_1", "object": "response.compaction", "output": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "enc"}]})
    .to_string();
    let overloaded = json!({"error": {"type": "server_error", "message": "busy"}}).to_string();
    let url = answering(vec![(503, overloaded), (200, compacted)]).await;
    let conversation =
        agent_loop::context::Conversation::new(None, vec![agent_loop::Message::user("hi")]);
    let retrying = client(url).retry_policy(
        RetryPolicy::default()
            .max_retries(2)
            .initial_backoff(Duration::from_millis(1))
            .max_backoff(Duration::from_millis(1)),
    );
    let out = retrying.compact_on_server(&conversation).await.unwrap();
    assert_eq!(out.conversation.messages.len(), 2);

    // A 400 is not retried, and names the server's message.
    let refused =
        json!({"error": {"type": "invalid_request_error", "message": "bad model"}}).to_string();
    let url = answering(vec![(400, refused)]).await;
    let error = client(url)
        .compact_on_server(&conversation)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("bad model"), "{error}");

    // An answer without a compaction item would lose the conversation: an error.
    let lossy =
        json!({"output": [{"type": "message", "role": "user", "content": "hi"}]}).to_string();
    let url = answering(vec![(200, lossy)]).await;
    let error = client(url)
        .compact_on_server(&conversation)
        .await
        .unwrap_err();
    assert!(matches!(error, LlmError::Malformed { .. }), "{error}");

    // An answer over the size limit is refused, not held.
    let big = json!({"output": [{"type": "compaction", "encrypted_content": "x".repeat(4096)}]})
        .to_string();
    let url = answering(vec![(200, big)]).await;
    let mut limits = agent_loop::wire::StreamLimits::default();
    limits.max_response_bytes = 1024;
    let limited = client(url).stream_limits(limits);
    let error = limited.compact_on_server(&conversation).await.unwrap_err();
    assert!(matches!(error, LlmError::LimitExceeded { .. }), "{error}");
}
