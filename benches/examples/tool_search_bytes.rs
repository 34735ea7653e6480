//! Request bytes per turn with and without tool search, 500 tools: a four-turn run (search,
//! two calls, the answer; without search the same calls, three turns) against the loopback
//! mock server, for Anthropic Messages, OpenAI Chat Completions and OpenAI Responses, each
//! request body measured as compact JSON. BENCHMARKS.md §21 has the figures.
//!
//! ```text
//! cargo run --release -p agent-loop-benches --example tool_search_bytes
//! ```

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::search::{ToolSearch, SEARCH_TOOL};
use agent_loop::{Agent, AgentEvent, AnthropicClient, OpenAiClient, RequestSettings};
use futures::StreamExt;
use serde_json::json;

#[path = "../../tests/common/many_tools.rs"]
mod many_tools;
use many_tools::with_tools;

#[derive(Clone, Copy)]
enum Format {
    Anthropic,
    Chat,
    Responses,
}

async fn bytes(format: Format, search: bool) -> Vec<usize> {
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
    let builder = match format {
        Format::Anthropic => Agent::builder(
            AnthropicClient::new("sk-test")
                .base_url(server.anthropic_base_url())
                .model("claude-test"),
        ),
        Format::Chat => Agent::builder(
            OpenAiClient::new("sk-test")
                .base_url(server.openai_base_url())
                .model("gpt-test"),
        ),
        Format::Responses => Agent::builder(
            OpenAiClient::new("sk-test")
                .base_url(server.openai_base_url())
                .model("gpt-5")
                .responses(),
        ),
    };
    let mut settings = RequestSettings::new();
    if search {
        settings = settings.tool_search(ToolSearch::new());
    }
    let mut agent = with_tools(builder)
        .settings(settings)
        .build()
        .expect("agent");
    let events: Vec<AgentEvent> = agent
        .run("List and watch the GitHub weather reports")
        .collect()
        .await;
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, AgentEvent::ToolResult { is_error: true, .. })),
        "a call failed"
    );
    server
        .requests()
        .iter()
        .map(|r| serde_json::to_vec(&r.body).expect("json").len())
        .collect()
}

#[tokio::main]
async fn main() {
    println!("| format | turn | without search (bytes) | with search (bytes) |");
    println!("|---|---|---:|---:|");
    for (name, format) in [
        ("Anthropic Messages", Format::Anthropic),
        ("OpenAI Chat Completions", Format::Chat),
        ("OpenAI Responses", Format::Responses),
    ] {
        let full = bytes(format, false).await;
        let searched = bytes(format, true).await;
        for turn in 0..searched.len().max(full.len()) {
            let cell = |v: &Vec<usize>| v.get(turn).map_or("—".to_owned(), |b| b.to_string());
            println!(
                "| {name} | {} | {} | {} |",
                turn + 1,
                cell(&full),
                cell(&searched)
            );
        }
        let total = |v: &Vec<usize>| v.iter().sum::<usize>();
        println!("| {name} | all | {} | {} |", total(&full), total(&searched));
    }
}
