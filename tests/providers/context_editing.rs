//! Anthropic context editing (`RequestSettings::context_editing`): the request carries
//! `context_management` and the beta header; the edits the response reports are replayed on
//! the agent's history (the oldest tool results cleared, excluded tools kept), which later
//! requests, the saved history and a fallback model of another format all see; `MockServer`
//! refuses what the API refuses. The first body is golden
//! (tests/golden/anthropic_context_editing_request.json, checked against the anthropic SDK's
//! beta request types by scripts/check-golden-requests.py).

use agent_loop::agent::{Fallback, RunPolicy};
use agent_loop::provider::context_editing::{
    AppliedEdit, ClearToolUses, ContextEditing, KeepThinking, Trigger, BETA, CLEARED_TOOL_RESULT,
    CLEAR_TOOL_USES,
};
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, LlmEvent, Message, OpenAiClient,
    RequestSettings, ToolError,
};
use futures::StreamExt;
use serde_json::{json, Value};

fn editing() -> ContextEditing {
    ContextEditing::new().clear_tool_uses(
        ClearToolUses::new()
            .trigger(Trigger::InputTokens(1_000))
            .keep_tool_uses(1)
            .clear_at_least(100)
            .exclude_tools(["memory"]),
    )
}

fn builder(client: AnthropicClient) -> agent_loop::AgentBuilder {
    let read = FnTool::new("read", "Reads a file.", |input: Value, _ctx| async move {
        let path = input["path"].as_str().unwrap_or("?").to_owned();
        Ok::<_, ToolError>(format!("contents of {path}: {}", "data ".repeat(400)))
    })
    .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
    let memory = FnTool::new("memory", "Recalls notes.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("notes: keep going".to_owned())
    })
    .input_schema(json!({"type": "object", "properties": {}}));
    Agent::builder(client)
        .system("You read files.")
        .tool(read)
        .tool(memory)
        .settings(RequestSettings::new().context_editing(editing()))
}

/// Three tool turns; the third response reports that the server cleared one tool use.
fn script(server: &MockServer) {
    server.push(ScriptedResponse::tool_call(
        "c1",
        "read",
        json!({"path": "a"}),
    ));
    server.push(ScriptedResponse::tool_call("c2", "memory", json!({})));
    server.push(
        ScriptedResponse::tool_call("c3", "read", json!({"path": "b"})).then_event(
            LlmEvent::ContextEdited {
                edits: vec![AppliedEdit::new(CLEAR_TOOL_USES)
                    .cleared_tool_uses(1)
                    .cleared_input_tokens(500)],
            },
        ),
    );
}

fn result_of<'a>(messages: &'a [Message], id: &str) -> &'a str {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } if tool_use_id == id => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test]
async fn anthropic_edits_are_sent_and_replayed_on_the_history() {
    let server = MockServer::start().await;
    script(&server);
    server.push(ScriptedResponse::text("Done."));
    let client = AnthropicClient::new("sk-test")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let mut agent = builder(client).build().unwrap();
    let events: Vec<AgentEvent> = agent.run("Read a and b").collect().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Finished { .. })),
        "{events:#?}"
    );
    assert!(server.history_violations().is_empty());
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{events:#?}");
    for request in &requests {
        assert_eq!(request.header("anthropic-beta"), Some(BETA));
        assert_eq!(request.body["context_management"], editing().wire());
    }
    let first = &requests[0].body;
    crate::common::assert_golden("anthropic_context_editing_request.json", first);

    // The oldest result is cleared; the excluded tool's and the latest are not.
    let history = agent.messages();
    assert_eq!(result_of(&history, "c1"), CLEARED_TOOL_RESULT);
    assert_eq!(result_of(&history, "c2"), "notes: keep going");
    assert!(result_of(&history, "c3").starts_with("contents of b"));
    assert!(agent.context().validate().is_ok());
    // A saved session holds the edited history, and restores it.
    let saved = agent.context().snapshot();
    let text = serde_json::to_string(&saved).unwrap();
    assert!(text.contains(CLEARED_TOOL_RESULT) && !text.contains("contents of a"));
    let mut restored = agent_loop::ContextManager::default();
    restored.restore(saved).unwrap();
    assert_eq!(result_of(restored.messages(), "c1"), CLEARED_TOOL_RESULT);
    // The request after the edit sends the cleared history.
    let last = requests[3].body.to_string();
    assert!(last.contains(CLEARED_TOOL_RESULT));
    assert!(!last.contains("contents of a"));
    assert!(requests[2].body.to_string().contains("contents of a"));
}

#[tokio::test]
async fn a_fallback_of_another_format_gets_the_edited_history() {
    let anthropic = MockServer::start().await;
    let openai = MockServer::start().await;
    script(&anthropic);
    anthropic.push(MockResponse::status(529).error_type("overloaded_error"));
    openai.push(ScriptedResponse::text("done on OpenAI"));
    let client = AnthropicClient::new("k")
        .base_url(anthropic.anthropic_base_url())
        .model("claude-test");
    let backup = OpenAiClient::new("k")
        .base_url(openai.openai_base_url())
        .model("gpt-4.1");
    let mut agent = builder(client)
        .policy(RunPolicy::new().retry(RetryPolicy::none()))
        .fallback(Fallback::new(backup))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Read a and b").collect().await;
    crate::common::agent::assert_fell_back(&events);
    let sent = openai.requests();
    assert_eq!(sent.len(), 1);
    let body = &sent[0].body;
    assert!(body.get("context_management").is_none());
    let tool = |id: &str| {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .map(|m| m["content"].clone())
    };
    assert_eq!(tool("c1"), Some(json!(CLEARED_TOOL_RESULT)));
    assert_eq!(tool("c2"), Some(json!("notes: keep going")));
    assert!(openai.history_violations().is_empty());
    assert!(anthropic.history_violations().is_empty());
}

/// Posts `body` with `beta` (or no) `anthropic-beta` header straight to the mock's Messages
/// endpoint and returns the status.
async fn post(server: &MockServer, body: Value, beta: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.anthropic_base_url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&body);
    if let Some(beta) = beta {
        request = request.header("anthropic-beta", beta);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn the_mock_refuses_what_the_api_refuses() {
    let server = MockServer::start().await;
    for _ in 0..2 {
        server.push(ScriptedResponse::text("ok"));
    }
    let body = |managed: Value| {
        json!({"model": "claude-test", "max_tokens": 10, "stream": true,
               "messages": [{"role": "user", "content": "hi"}],
               "context_management": managed})
    };
    let good = json!({"edits": [{"type": "clear_tool_uses_20250919",
                                 "trigger": {"type": "tool_uses", "value": 5}}]});
    assert_eq!(post(&server, body(good.clone()), Some(BETA)).await, 200);
    // The beta header joined to another one counts.
    let both = format!("files-api-2025-04-14,{BETA}");
    assert_eq!(post(&server, body(good.clone()), Some(&both)).await, 200);
    assert_eq!(post(&server, body(good), None).await, 400);
    for bad in [
        json!({"edits": [{"type": "clear_everything_20990101"}]}),
        json!({"edits": [{"trigger": {"type": "input_tokens", "value": 5}}]}),
        json!({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"value": 5}}]}),
        json!({"edits": [{"type": "clear_tool_uses_20250919",
                          "keep": {"type": "tool_uses", "value": -1}}]}),
        json!({"edits": [{"type": "clear_thinking_20251015"}]}),
    ] {
        assert_eq!(
            post(&server, body(bad.clone()), Some(BETA)).await,
            400,
            "{bad}"
        );
    }
    assert_eq!(server.remaining(), 0);
}

#[test]
fn settings_the_api_would_refuse_fail_validation() {
    let zero = RequestSettings::new()
        .context_editing(ContextEditing::new().clear_thinking(KeepThinking::Turns(0)));
    assert!(zero.validate().is_err());
    let ok = RequestSettings::new().context_editing(editing());
    assert!(ok.validate().is_ok());
}
