//! OpenAI Responses server-side compaction (`RequestSettings::server_compaction`): the request
//! carries `context_management: [{"type": "compaction", "compact_threshold": n}]`; the
//! compaction item the server returns is kept whole in the history
//! (`ContentBlock::Compaction`) and sent back in later requests as it came, and the turns it
//! stands for, which the server no longer reads, are dropped (the first message keeps the task,
//! with a note); a fallback of another format leaves the item out and gets a valid request with
//! the task and the turns after the item; `MockServer` refuses what the API refuses. The body that sends the item back is golden
//! (tests/golden/responses_compaction_request.json, checked against the openai SDK's
//! `ResponseCreateParamsStreaming` by scripts/check-golden-requests.py).

use agent_loop::agent::{Fallback, RunPolicy};
use agent_loop::provider::context_editing::{ServerCompaction, SERVER_COMPACTED};
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::{Agent, AgentEvent, AnthropicClient, ContentBlock, OpenAiClient, RequestSettings};
use futures::StreamExt;
use serde_json::{json, Value};

fn builder(client: OpenAiClient) -> agent_loop::AgentBuilder {
    let read = crate::common::agent::path_reader();
    Agent::builder(client)
        .system("You read files.")
        .tool(read)
        .settings(RequestSettings::new().server_compaction(ServerCompaction::new(2_000)))
}

fn responses(server: &MockServer) -> OpenAiClient {
    OpenAiClient::new("sk-test")
        .base_url(server.openai_base_url())
        .model("gpt-5")
        .responses()
}

/// A tool turn, then a turn whose output starts with a compaction item.
fn script(server: &MockServer) {
    server.push(ScriptedResponse::tool_call(
        "c1",
        "read",
        json!({"path": "a"}),
    ));
    server.push(
        ScriptedResponse::new()
            .then_compaction(Some("cmp_1"), "gAAAAencrypted")
            .then_tool_call("c2", "read", json!({"path": "b"})),
    );
}

fn compaction_items(body: &Value) -> Vec<Value> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "compaction")
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_compaction_item_is_kept_and_sent_back_as_it_came() {
    let server = MockServer::start().await;
    script(&server);
    server.push(ScriptedResponse::text("Done."));
    let mut agent = builder(responses(&server)).build().unwrap();
    let events: Vec<AgentEvent> = agent.run("Read a and b").collect().await;
    assert!(server.history_violations().is_empty(), "{events:#?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{events:#?}");
    for request in &requests {
        assert_eq!(
            request.body["context_management"],
            json!([{"type": "compaction", "compact_threshold": 2000}])
        );
    }
    assert!(compaction_items(&requests[1].body).is_empty());
    // The body that sends the item back is golden (checked against the openai SDK's types).
    crate::common::assert_golden("responses_compaction_request.json", &requests[2].body);
    assert_eq!(
        compaction_items(&requests[2].body),
        [json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAencrypted"})]
    );
    // The history holds the item; the turns before it went, the first message kept with the
    // note.
    let history = agent.messages();
    let blocks: Vec<&ContentBlock> = history.iter().flat_map(|m| &m.content).collect();
    assert!(blocks.iter().any(|b| matches!(
        b,
        ContentBlock::Compaction { id: Some(id), encrypted_content }
            if id == "cmp_1" && encrypted_content == "gAAAAencrypted"
    )));
    assert!(!requests[2].body.to_string().contains("contents of a"));
    assert_eq!(
        history[0].content,
        [
            ContentBlock::text("Read a and b"),
            ContentBlock::text(SERVER_COMPACTED)
        ]
    );
    assert!(matches!(
        history[1].content[0],
        ContentBlock::Compaction { .. }
    ));
    assert!(agent.context().validate().is_ok());
    // Saved and restored, the item survives.
    let saved = serde_json::to_string(&agent.context().snapshot()).unwrap();
    assert!(saved.contains("gAAAAencrypted"));
}

#[tokio::test]
async fn a_fallback_of_another_format_leaves_the_item_out_and_reads_the_task() {
    let openai = MockServer::start().await;
    let anthropic = MockServer::start().await;
    script(&openai);
    openai.push(MockResponse::status(529).error_type("overloaded_error"));
    anthropic.push(ScriptedResponse::text("done on Anthropic"));
    let backup = AnthropicClient::new("k")
        .base_url(anthropic.anthropic_base_url())
        .model("claude-test");
    let mut agent = builder(responses(&openai))
        .policy(RunPolicy::new().retry(RetryPolicy::none()))
        .fallback(Fallback::new(backup))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Read a and b").collect().await;
    crate::common::agent::assert_fell_back(&events);
    let sent = anthropic.requests();
    assert_eq!(sent.len(), 1);
    let body = sent[0].body.to_string();
    assert!(!body.contains("gAAAAencrypted"), "{body}");
    assert!(body.contains("Read a and b") && body.contains(SERVER_COMPACTED));
    assert!(body.contains("contents of b") && !body.contains("contents of a"));
    assert!(anthropic.history_violations().is_empty());
}

#[tokio::test]
async fn the_mock_refuses_what_the_api_refuses() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let post = |body: Value| {
        let url = format!("{}/responses", server.openai_base_url());
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
    let body = |extra: Value| {
        let mut body = json!({"model": "gpt-5", "stream": true,
                              "input": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    for bad in [
        json!({"context_management": [{"type": "summarize", "compact_threshold": 10}]}),
        json!({"context_management": [{"type": "compaction", "compact_threshold": -1}]}),
        json!({"context_management": {"type": "compaction"}}),
        json!({"input": [{"role": "user", "content": "hi"},
                         {"type": "compaction", "id": "cmp_1"}]}),
    ] {
        assert_eq!(post(body(bad.clone())).await, 400, "{bad}");
    }
    let good = json!({"context_management": [{"type": "compaction", "compact_threshold": 10}]});
    assert_eq!(post(body(good)).await, 200);
    assert_eq!(server.remaining(), 0);
}

/// Anthropic's server compaction (`compact_20260112`, the same setting): the edit and its beta
/// go out, and the `compaction` block the server returns is kept and sent back verbatim.
#[tokio::test]
async fn anthropic_compaction_blocks_are_kept_and_sent_back_verbatim() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call(
        "c1",
        "read",
        json!({"path": "a"}),
    ));
    let block = json!({"type": "compaction", "content": "Summary: the user asked to read a and b; a was read."});
    server.push(
        ScriptedResponse::new()
            .then_other_block(block.clone())
            .then_tool_call("c2", "read", json!({"path": "b"})),
    );
    server.push(ScriptedResponse::text("Done."));
    let client = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let read = crate::common::agent::path_reader();
    let mut agent = Agent::builder(client)
        .tool(read)
        .settings(RequestSettings::new().server_compaction(ServerCompaction::new(50_000)))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Read a and b").collect().await;
    assert!(server.history_violations().is_empty(), "{events:#?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{events:#?}");
    for request in &requests {
        assert_eq!(
            request.header("anthropic-beta"),
            Some(agent_loop::provider::context_editing::COMPACT_BETA)
        );
        assert_eq!(
            request.body["context_management"],
            json!({"edits": [{"type": "compact_20260112",
                              "trigger": {"type": "input_tokens", "value": 50000}}]})
        );
    }
    // The turns before the block went; the first message keeps the task, the note and the
    // block's summary (for a fallback model, which cannot read the block).
    let messages = &requests[2].body["messages"];
    assert_eq!(
        messages.as_array().unwrap().len(),
        3,
        "{}",
        requests[2].body
    );
    assert_eq!(messages[1]["content"][0], block, "{}", requests[2].body);
    assert!(!requests[2].body.to_string().contains("contents of a"));
    assert!(agent
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| matches!(b, ContentBlock::Other(v) if *v == block)));
    // The body that sends the block back is golden (checked against the anthropic SDK's beta
    // `MessageCreateParamsStreaming` by scripts/check-golden-requests.py).
    crate::common::assert_golden("anthropic_compaction_request.json", &requests[2].body);
}

/// After an Anthropic compaction block, a fallback of another format gets a valid request
/// without the block, with the task and the block's summary (copied to the first message) and
/// the turns after it.
#[tokio::test]
async fn a_fallback_after_an_anthropic_compaction_block_reads_its_summary() {
    let anthropic = MockServer::start().await;
    let openai = MockServer::start().await;
    anthropic.push(ScriptedResponse::tool_call(
        "c1",
        "read",
        json!({"path": "a"}),
    ));
    let block = json!({"type": "compaction", "content": "Summary: a was read."});
    anthropic.push(
        ScriptedResponse::new()
            .then_other_block(block)
            .then_tool_call("c2", "read", json!({"path": "b"})),
    );
    anthropic.push(MockResponse::status(529).error_type("overloaded_error"));
    openai.push(ScriptedResponse::text("done on Chat Completions"));
    let primary = AnthropicClient::new("k")
        .base_url(anthropic.anthropic_base_url())
        .model("claude-test");
    let backup = OpenAiClient::new("k")
        .base_url(openai.openai_base_url())
        .model("gpt-test");
    let read = crate::common::agent::path_reader();
    let mut agent = Agent::builder(primary)
        .tool(read)
        .settings(RequestSettings::new().server_compaction(ServerCompaction::new(50_000)))
        .policy(RunPolicy::new().retry(RetryPolicy::none()))
        .fallback(Fallback::new(backup))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Read a and b").collect().await;
    crate::common::agent::assert_fell_back(&events);
    let sent = openai.requests();
    assert_eq!(sent.len(), 1, "{events:#?}");
    assert!(openai.history_violations().is_empty());
    let body = sent[0].body.to_string();
    assert!(
        body.contains("Read a and b") && body.contains(SERVER_COMPACTED),
        "{body}"
    );
    assert!(body.contains("Summary: a was read"), "{body}");
    assert!(
        body.contains("contents of b") && !body.contains("contents of a"),
        "{body}"
    );
}
