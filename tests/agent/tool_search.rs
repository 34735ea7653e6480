//! Tool search over 500 generated tools: the requests carry the search tool and the tools
//! found or used, the agent answers searches itself (BM25, no model call), a found tool is
//! callable in the next turn, and the encoded requests are much smaller than with every tool.
//! With `ToolSearch::hosted` on OpenAI Responses: the functions go deferred beside OpenAI's
//! `tool_search` tool, the search's items come back whole and go back in their place, and a
//! fallback of another format leaves them out.

use agent_loop::agent::{Fallback, RunPolicy};
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{MockResponse, MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::search::{ToolSearch, SEARCH_TOOL};
use agent_loop::{Agent, AgentEvent, AnthropicClient, LlmClient, OpenAiClient, RequestSettings};
use futures::StreamExt;
use serde_json::json;

#[path = "../common/many_tools.rs"]
mod many_tools;
use many_tools::with_tools;

fn results(events: &[AgentEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                name,
                content,
                is_error,
                ..
            } => Some((name.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_found_tool_is_carried_and_callable_from_the_next_turn() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("s1", SEARCH_TOOL, json!({"query": "export invoice Stripe"})),
        ScriptedResponse::tool_call("c1", "stripe_export_invoice", json!({"id": "in_1"})),
        ScriptedResponse::text("Exported."),
    ]);
    let settings = RequestSettings::new().tool_search(ToolSearch::new().max_results(3));
    let mut agent = with_tools(Agent::builder(client.clone()))
        .settings(settings)
        .build()
        .unwrap();
    assert_eq!(agent.tools().len(), 500);
    let events: Vec<AgentEvent> = agent.run("Export invoice in_1 from Stripe").collect().await;
    let results = results(&events);
    assert_eq!(results.len(), 2, "{results:?}");
    let (name, found, error) = &results[0];
    assert_eq!(name, SEARCH_TOOL);
    assert!(!error);
    let first = found.lines().nth(1).unwrap();
    assert_eq!(first, "stripe_export_invoice: exports a invoice in Stripe");
    assert_eq!(found.lines().count(), 4, "{found}");
    assert_eq!(
        results[1],
        (
            "stripe_export_invoice".into(),
            "exportd the invoice".into(),
            false
        )
    );

    let requests = client.requests();
    let names =
        |i: usize| -> Vec<String> { requests[i].tools.iter().map(|t| t.name.clone()).collect() };
    assert_eq!(names(0), [SEARCH_TOOL]);
    assert!(requests[0].tools[0].description.contains("500 tools"));
    // The next request carries the three found (in the agent's order), the one after also
    // the one called (already among them).
    let second = names(1);
    assert_eq!(second.len(), 4, "{second:?}");
    assert_eq!(second[0], SEARCH_TOOL);
    assert!(second.contains(&"stripe_export_invoice".to_owned()));
    assert_eq!(names(2), second);
}

#[tokio::test]
async fn under_the_threshold_every_tool_is_sent() {
    let client = ScriptedClient::new([ScriptedResponse::text("ok")]);
    let settings = RequestSettings::new().tool_search(ToolSearch::new().threshold(500));
    let mut agent = with_tools(Agent::builder(client.clone()))
        .settings(settings)
        .build()
        .unwrap();
    let _: Vec<AgentEvent> = agent.run("hi").collect().await;
    assert_eq!(client.requests()[0].tools.len(), 500);
}

/// The request bytes of a four-turn run against the mock server: search, call, call, answer.
async fn request_bytes(search: bool) -> Vec<usize> {
    let server = MockServer::start().await;
    if search {
        server.push(ScriptedResponse::tool_call(
            "s1",
            SEARCH_TOOL,
            json!({"query": "weather report GitHub"}),
        ));
    }
    server.push(ScriptedResponse::tool_call(
        "c1",
        "github_list_weather_report",
        json!({"id": "a"}),
    ));
    server.push(ScriptedResponse::tool_call(
        "c2",
        "github_watch_weather_report",
        json!({"id": "b"}),
    ));
    server.push(ScriptedResponse::text("Done."));
    let client = AnthropicClient::new("sk-test")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let _: &dyn LlmClient = &client;
    let mut settings = RequestSettings::new();
    if search {
        settings = settings.tool_search(ToolSearch::new());
    }
    let mut agent = with_tools(Agent::builder(client))
        .settings(settings)
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .run("List and watch the GitHub weather reports")
        .collect()
        .await;
    assert!(
        results(&events).iter().all(|r| !r.2),
        "{:?}",
        results(&events)
    );
    assert!(server.history_violations().is_empty());
    server
        .requests()
        .iter()
        .map(|r| serde_json::to_vec(&r.body).unwrap().len())
        .collect()
}

#[tokio::test]
async fn searched_requests_are_a_fraction_of_the_full_ones() {
    let full = request_bytes(false).await;
    let searched = request_bytes(true).await;
    assert_eq!(full.len(), 3);
    assert_eq!(searched.len(), 4);
    // Every schema in every request: over 100 KB each. With search: a few KB.
    assert!(full.iter().all(|&b| b > 100_000), "{full:?}");
    assert!(searched.iter().all(|&b| b < 8_000), "{searched:?}");
    println!("request bytes per turn, 500 tools: full {full:?}, searched {searched:?}");
}

// ---------------------------------------------------------------- OpenAI Responses, hosted

/// The items OpenAI's hosted search gives back: the call (its `arguments` an object) and the
/// output with the definition it loaded.
fn hosted_search_items(name: &str, description: &str) -> (serde_json::Value, serde_json::Value) {
    let call = json!({"type": "tool_search_call", "id": "tsc_1", "call_id": null,
                      "execution": "server", "status": "completed",
                      "arguments": {"query": description}});
    let output = json!({"type": "tool_search_output", "id": "tso_1", "call_id": null,
                        "execution": "server", "status": "completed",
                        "tools": [{"type": "function", "name": name,
                                   "description": description,
                                   "parameters": {"type": "object"},
                                   "strict": false, "defer_loading": true}]});
    (call, output)
}

fn responses_client(server: &MockServer) -> OpenAiClient {
    OpenAiClient::new("sk-test")
        .base_url(server.openai_base_url())
        .model("gpt-5.4")
        .responses()
}

fn hosted() -> RequestSettings {
    RequestSettings::new().tool_search(ToolSearch::new().hosted(true))
}

/// Each function tool's name and whether it is deferred; the other tools by their type.
fn tool_summary(body: &serde_json::Value) -> Vec<(String, bool)> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| match t["type"].as_str().unwrap() {
            "function" => (
                t["name"].as_str().unwrap().to_owned(),
                t.get("defer_loading") == Some(&json!(true)),
            ),
            other => (format!("<{other}>"), t.get("defer_loading").is_some()),
        })
        .collect()
}

/// The first turn of a hosted-search run: the search's two items, then a call of the tool it
/// found, in one response.
fn push_search_turn(server: &MockServer) -> (serde_json::Value, serde_json::Value) {
    let (call, output) =
        hosted_search_items("stripe_export_invoice", "exports a invoice in Stripe");
    server.push(
        ScriptedResponse::new()
            .then_other_block(call.clone())
            .then_other_block(output.clone())
            .then_tool_call("call_1", "stripe_export_invoice", json!({"id": "in_1"})),
    );
    (call, output)
}

#[tokio::test]
async fn responses_hosted_search_defers_the_tools_and_carries_its_items_across_turns() {
    let server = MockServer::start().await;
    let (call, output) = push_search_turn(&server);
    server.push(ScriptedResponse::text("Exported."));
    let mut agent = with_tools(Agent::builder(responses_client(&server)))
        .settings(hosted())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Export invoice in_1 from Stripe").collect().await;
    // The call of the tool found in the same response ran.
    assert_eq!(
        results(&events),
        [(
            "stripe_export_invoice".to_owned(),
            "exportd the invoice".to_owned(),
            false
        )]
    );
    assert!(server.history_violations().is_empty());
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the mock refused a request: {events:#?}");

    // First request: all 500 functions deferred, then the hosted search tool, not deferred;
    // no local search_tools.
    let first = tool_summary(&requests[0].body);
    assert_eq!(first.len(), 501);
    assert!(
        first[..500].iter().all(|(_, deferred)| *deferred),
        "{first:?}"
    );
    assert_eq!(first[500], ("<tool_search>".to_owned(), false));
    assert_eq!(
        requests[0].body["tools"][500],
        json!({"type": "tool_search"})
    );
    assert!(!requests[0].body.to_string().contains(SEARCH_TOOL));

    // Second: the search's items back as they came, in their place before the call; the tool
    // found and used is loaded (first, not deferred), the other 499 still deferred.
    let second = &requests[1].body;
    let input = second["input"].as_array().unwrap();
    let types: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "message",
            "tool_search_call",
            "tool_search_output",
            "function_call",
            "function_call_output"
        ]
    );
    assert_eq!(input[1], call);
    assert_eq!(input[2], output);
    let tools = tool_summary(second);
    assert_eq!(tools[0], ("stripe_export_invoice".to_owned(), false));
    assert_eq!(tools.iter().filter(|(_, deferred)| *deferred).count(), 499);
    assert_eq!(tools[500], ("<tool_search>".to_owned(), false));
}

/// After a hosted-search turn on Responses, the model is overloaded and the run falls back to
/// `backup`, which answers; the backup's mock refuses what its API refuses, so the run only
/// completes if the request it got was valid. Returns that request's body.
async fn fall_back_after_a_search(
    backup: Box<dyn LlmClient>,
    backup_server: &MockServer,
) -> serde_json::Value {
    let server = MockServer::start().await;
    push_search_turn(&server);
    server.push(MockResponse::status(529).error_type("overloaded_error"));
    backup_server.push(ScriptedResponse::text("Exported, on the backup."));
    let mut agent = with_tools(Agent::builder(responses_client(&server)))
        .settings(hosted())
        .policy(RunPolicy::new().retry(RetryPolicy::none()))
        .fallback(Fallback::new(backup))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Export invoice in_1 from Stripe").collect().await;
    crate::common::agent::assert_fell_back(&events);
    let end = events.iter().find_map(|e| match e {
        AgentEvent::Finished(outcome) => Some(outcome.final_text.clone()),
        _ => None,
    });
    assert_eq!(
        end.as_deref(),
        Some("Exported, on the backup."),
        "{events:#?}"
    );
    assert!(server.history_violations().is_empty());
    assert!(backup_server.history_violations().is_empty());
    let requests = backup_server.requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].body.clone();
    assert!(!body.to_string().contains("tool_search_call"), "{body}");
    assert!(!body.to_string().contains("tool_search_output"), "{body}");
    assert!(body.to_string().contains("stripe_export_invoice"));
    body
}

#[tokio::test]
async fn a_fallback_after_a_responses_search_leaves_its_items_out() {
    // Anthropic, hosted search too: its own search tool, the tool used loaded.
    let anthropic = MockServer::start().await;
    let client = AnthropicClient::new("sk-test")
        .base_url(anthropic.anthropic_base_url())
        .model("claude-test");
    let body = fall_back_after_a_search(Box::new(client), &anthropic).await;
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools[0]["name"], "stripe_export_invoice");
    assert!(tools[0].get("defer_loading").is_none());
    assert_eq!(
        tools.last().unwrap()["type"],
        "tool_search_tool_bm25_20251119"
    );
    let assistant = &body["messages"][1]["content"];
    assert_eq!(assistant.as_array().unwrap().len(), 1, "{assistant}");
    assert_eq!(assistant[0]["type"], "tool_use");

    // Chat Completions: the local search tool and the tool used.
    let chat = MockServer::start().await;
    let client = OpenAiClient::new("sk-test")
        .base_url(chat.openai_base_url())
        .model("gpt-4.1");
    let body = fall_back_after_a_search(Box::new(client), &chat).await;
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [SEARCH_TOOL, "stripe_export_invoice"]);
}

/// The second request of a hosted-search run on Responses (five tools, threshold 3): the
/// search's items sent back, the tool used loaded, the others deferred beside `tool_search`.
/// Golden (tests/golden/responses_tool_search_request.json, checked against the openai SDK's
/// `ResponseCreateParamsStreaming` by scripts/check-golden-requests.py).
#[tokio::test]
async fn the_responses_hosted_search_body_is_golden() {
    let server = MockServer::start().await;
    let (call, output) = hosted_search_items("tool_2", "Does thing number 2");
    server.push(
        ScriptedResponse::new()
            .then_other_block(call)
            .then_other_block(output)
            .then_tool_call("call_1", "tool_2", json!({"x": "a"})),
    );
    server.push(ScriptedResponse::text("Done."));
    let mut builder = Agent::builder(responses_client(&server)).system("You are terse.");
    for i in 0..5 {
        builder = builder.tool(
            agent_loop::tool::FnTool::new(
                format!("tool_{i}"),
                format!("Does thing number {i}"),
                move |_: serde_json::Value, _ctx| async move {
                    Ok::<_, agent_loop::ToolError>(format!("did {i}"))
                },
            )
            .input_schema(json!({"type": "object", "properties": {"x": {"type": "string"}}})),
        );
    }
    let mut agent = builder
        .settings(RequestSettings::new().tool_search(ToolSearch::new().threshold(3).hosted(true)))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Do thing 2").collect().await;
    assert_eq!(results(&events), [("tool_2".into(), "did 2".into(), false)]);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1].body;
    crate::common::assert_golden("responses_tool_search_request.json", second);
    let summary = tool_summary(second);
    let want: Vec<(String, bool)> = [
        ("tool_2", false),
        ("tool_0", true),
        ("tool_1", true),
        ("tool_3", true),
        ("tool_4", true),
        ("<tool_search>", false),
    ]
    .iter()
    .map(|(n, d)| (n.to_string(), *d))
    .collect();
    assert_eq!(summary, want);
}
