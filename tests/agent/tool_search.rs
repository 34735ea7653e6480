//! Tool search over 500 generated tools: the requests carry the search tool and the tools
//! found or used, the agent answers searches itself (BM25, no model call), a found tool is
//! callable in the next turn, and the encoded requests are much smaller than with every tool.

use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::search::{ToolSearch, SEARCH_TOOL};
use agent_loop::{Agent, AgentEvent, AnthropicClient, LlmClient, RequestSettings};
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
