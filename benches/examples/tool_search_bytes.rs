//! Request bytes per turn with and without tool search, 500 tools: a four-turn run (search,
//! two calls, the answer; without search the same calls, three turns) against the loopback
//! mock server, for Anthropic Messages, OpenAI Chat Completions and OpenAI Responses, each
//! request body measured as compact JSON; and, for Anthropic and Responses, the provider's
//! hosted search (`ToolSearch::hosted`): the first response holds the search's items and the
//! first call, so the run has three requests. BENCHMARKS.md §21 has the figures.
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

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Full,
    Local,
    Hosted,
}

/// The hosted search's blocks (Anthropic) or items (Responses) for the first response.
fn hosted_blocks(format: Format) -> [serde_json::Value; 2] {
    match format {
        Format::Responses => [
            json!({"type": "tool_search_call", "id": "tsc_1", "call_id": null,
                   "execution": "server", "status": "completed",
                   "arguments": {"query": "weather report GitHub"}}),
            json!({"type": "tool_search_output", "id": "tso_1", "call_id": null,
                   "execution": "server", "status": "completed",
                   "tools": [{"type": "function", "name": "github_list_weather_report",
                              "description": "lists a weather report in GitHub",
                              "parameters": {"type": "object"}, "strict": false,
                              "defer_loading": true}]}),
        ],
        _ => [
            json!({"type": "server_tool_use", "id": "srvtoolu_1",
                   "name": "tool_search_tool_bm25",
                   "input": {"query": "weather report GitHub"}}),
            json!({"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1",
                   "content": {"type": "tool_search_tool_search_result",
                               "tool_references": [{"type": "tool_reference",
                                                    "tool_name": "github_list_weather_report"}]}}),
        ],
    }
}

async fn bytes(format: Format, mode: Mode) -> Vec<usize> {
    let server = MockServer::start().await;
    let search = mode != Mode::Full;
    if mode == Mode::Hosted {
        let [call, output] = hosted_blocks(format);
        server.push(
            ScriptedResponse::new()
                .then_other_block(call)
                .then_other_block(output)
                .then_tool_call("c1", "github_list_weather_report", json!({"id": "a"})),
        );
    } else if search {
        server.push(ScriptedResponse::tool_call(
            "s1",
            SEARCH_TOOL,
            json!({"query": "weather report GitHub"}),
        ));
    }
    if mode != Mode::Hosted {
        server.push(ScriptedResponse::tool_call(
            "c1",
            "github_list_weather_report",
            json!({"id": "a"}),
        ));
    }
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
        settings = settings.tool_search(ToolSearch::new().hosted(mode == Mode::Hosted));
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
    // A request the mock refused would end the run without the answer.
    let answer = events.iter().find_map(|e| {
        if let AgentEvent::Finished(outcome) = e {
            Some(outcome.final_text.as_str())
        } else {
            None
        }
    });
    assert_eq!(answer, Some("Done."), "the run did not complete");
    let requests = server.requests();
    assert_eq!(requests.len(), 3 + usize::from(mode == Mode::Local));
    requests
        .iter()
        .map(|r| serde_json::to_vec(&r.body).expect("json").len())
        .collect()
}

#[tokio::main]
async fn main() {
    println!(
        "| format | turn | without search (bytes) | with search (bytes) | hosted search (bytes) |"
    );
    println!("|---|---|---:|---:|---:|");
    for (name, format) in [
        ("Anthropic Messages", Format::Anthropic),
        ("OpenAI Chat Completions", Format::Chat),
        ("OpenAI Responses", Format::Responses),
    ] {
        let full = bytes(format, Mode::Full).await;
        let searched = bytes(format, Mode::Local).await;
        // Chat Completions has no hosted search (it searches locally either way).
        let hosted = match format {
            Format::Chat => Vec::new(),
            _ => bytes(format, Mode::Hosted).await,
        };
        let cell = |v: &Vec<usize>, turn: usize| v.get(turn).map_or("—".to_owned(), group);
        for turn in 0..searched.len().max(full.len()) {
            println!(
                "| {name} | {} | {} | {} | {} |",
                turn + 1,
                cell(&full, turn),
                cell(&searched, turn),
                cell(&hosted, turn)
            );
        }
        let total = |v: &Vec<usize>| match v.is_empty() {
            true => "—".to_owned(),
            false => group(&v.iter().sum::<usize>()),
        };
        println!(
            "| {name} | all | {} | {} | {} |",
            total(&full),
            total(&searched),
            total(&hosted)
        );
    }
}

/// `1234567` as `1,234,567`.
fn group(n: &usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
