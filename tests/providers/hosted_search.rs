//! Anthropic's hosted tool search (`ToolSearch::hosted`): the tools not yet used go with
//! `defer_loading: true` beside `tool_search_tool_bm25`, the search's server blocks come back
//! verbatim in the next request, and the tool found and called is loaded from then on. The
//! body is golden (tests/golden/anthropic_tool_search_request.json, checked against the
//! anthropic SDK's request types by scripts/check-golden-requests.py).

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::search::{ToolSearch, SEARCH_TOOL};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, AnthropicClient, OpenAiClient, RequestSettings, ToolError};
use futures::StreamExt;
use serde_json::{json, Value};

fn with_tools(mut builder: agent_loop::AgentBuilder, n: usize) -> agent_loop::AgentBuilder {
    for i in 0..n {
        let tool = FnTool::new(
            format!("tool_{i}"),
            format!("Does thing number {i}"),
            move |_: Value, _ctx| async move { Ok::<_, ToolError>(format!("did {i}")) },
        )
        .input_schema(json!({"type": "object", "properties": {"x": {"type": "string"}}}));
        builder = builder.tool(tool);
    }
    builder
}

fn settings() -> RequestSettings {
    RequestSettings::new().tool_search(ToolSearch::new().threshold(3).hosted(true))
}

#[tokio::test]
async fn anthropic_defers_the_tools_to_its_bm25_search() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::new()
            .then_other_block(json!({"type": "server_tool_use", "id": "srvtoolu_1",
                                      "name": "tool_search_tool_bm25",
                                      "input": {"query": "thing number 2"}}))
            .then_other_block(
                json!({"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1",
                                      "content": {"type": "tool_search_tool_search_result",
                                                  "tool_references": [{"type": "tool_reference",
                                                                       "tool_name": "tool_2"}]}}),
            )
            .then_tool_call("c1", "tool_2", json!({"x": "a"})),
    );
    server.push(ScriptedResponse::text("Done."));
    let client = AnthropicClient::new("sk-test")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let mut agent = with_tools(Agent::builder(client), 5)
        .system("You are terse.")
        .settings(settings())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Do thing 2").collect().await;
    let result = events.iter().find_map(|e| match e {
        AgentEvent::ToolResult {
            content, is_error, ..
        } => Some((content.clone(), *is_error)),
        _ => None,
    });
    assert_eq!(result, Some(("did 2".to_owned(), false)), "{events:#?}");
    assert!(server.history_violations().is_empty());

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0].body;
    crate::common::assert_golden("anthropic_tool_search_request.json", first);

    let summary = |body: &Value| -> Vec<(String, bool)> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_owned(),
                    t.get("defer_loading") == Some(&json!(true)),
                )
            })
            .collect()
    };
    let deferred = |names: &[&str]| -> Vec<(String, bool)> {
        names.iter().map(|n| (n.to_string(), true)).collect()
    };
    // First request: every tool deferred, the hosted search last (no local search_tools).
    let mut want = deferred(&["tool_0", "tool_1", "tool_2", "tool_3", "tool_4"]);
    want.push(("tool_search_tool_bm25".into(), false));
    assert_eq!(summary(first), want);
    assert_eq!(first["tools"][5]["type"], "tool_search_tool_bm25_20251119");
    // Second: tool_2 (called) loaded, the rest deferred; the search's blocks sent back as they
    // came.
    let second = &requests[1].body;
    let mut want = vec![("tool_2".to_owned(), false)];
    want.extend(deferred(&["tool_0", "tool_1", "tool_3", "tool_4"]));
    want.push(("tool_search_tool_bm25".into(), false));
    assert_eq!(summary(second), want);
    let assistant = &second["messages"][1]["content"];
    assert_eq!(assistant[0]["type"], "server_tool_use");
    assert_eq!(assistant[1]["type"], "tool_search_tool_result");
    assert_eq!(
        assistant[1]["content"]["tool_references"][0]["tool_name"],
        "tool_2"
    );
    assert!(!second.to_string().contains(SEARCH_TOOL));
}

#[tokio::test]
async fn other_formats_search_locally_even_when_hosted_is_asked() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = OpenAiClient::new("sk-test")
        .base_url(server.openai_base_url())
        .model("gpt-test");
    let mut agent = with_tools(Agent::builder(client), 5)
        .settings(settings())
        .build()
        .unwrap();
    let _: Vec<AgentEvent> = agent.run("hi").collect().await;
    let body = &server.requests()[0].body;
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [SEARCH_TOOL]);
}
