//! Request settings on the builder and per run, as each provider documents the fields:
//! temperature, top_p, stop sequences, tool choice, parallel tool calls, the end-user id and
//! provider-specific body fields (which may not clash with the crate's own).

use agent_loop::agent::RunOptions;
use agent_loop::error::ConfigError;
use agent_loop::provider::ToolChoice;
use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AgentBuilder, AnthropicClient, Error, LlmError, OpenAiClient, RequestSettings,
    Termination, ToolError,
};
use serde_json::{json, Value};

use crate::common;
use common::fast_retries;

fn tool() -> impl agent_loop::Tool {
    FnTool::new("lookup", "Looks up.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("found")
    })
}

fn configured(builder: AgentBuilder) -> AgentBuilder {
    builder.tool(tool()).settings(
        RequestSettings::new()
            .temperature(0.3)
            .top_p(0.9)
            .stop_sequences(["END"])
            .tool_choice(ToolChoice::Tool("lookup".into()))
            .parallel_tool_calls(false)
            .user("user-42")
            .extra("top_k", json!(40)),
    )
}

#[tokio::test]
async fn anthropic_gets_every_setting_in_its_documented_field() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("claude-test")
        .retry_policy(fast_retries());
    let mut agent = configured(Agent::builder(client)).build().unwrap();
    agent.prompt("hi").await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["temperature"], json!(0.3));
    assert_eq!(body["top_p"], json!(0.9));
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "lookup", "disable_parallel_tool_use": true})
    );
    assert_eq!(body["metadata"], json!({"user_id": "user-42"}));
    assert_eq!(body["top_k"], 40);
}

#[tokio::test]
async fn openai_gets_every_setting_in_its_documented_field() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("gpt-test")
        .retry_policy(fast_retries());
    let mut agent = configured(Agent::builder(client)).build().unwrap();
    agent.prompt("hi").await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["temperature"], json!(0.3));
    assert_eq!(body["top_p"], json!(0.9));
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "lookup"}})
    );
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["user"], "user-42");
    assert_eq!(body["top_k"], 40);
}

#[tokio::test]
async fn openai_gets_no_parallel_tool_calls_without_tools() {
    // OpenAI refuses `parallel_tool_calls` when no tools are given.
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("gpt-test");
    let mut agent = Agent::builder(client)
        .settings(RequestSettings::new().parallel_tool_calls(true))
        .build()
        .unwrap();
    agent.prompt("hi").await.unwrap();
    assert!(server.requests()[0]
        .body
        .get("parallel_tool_calls")
        .is_none());
}

#[tokio::test]
async fn per_run_settings_override_the_builders_for_that_run_only() {
    let client = ScriptedClient::new([ScriptedResponse::text("a"), ScriptedResponse::text("b")]);
    let mut agent = Agent::builder(client.clone())
        .settings(
            RequestSettings::new()
                .model("model-of-the-builder")
                .temperature(0.7)
                .user("builder"),
        )
        .build()
        .unwrap();
    let options = RunOptions::new().settings(
        RequestSettings::new()
            .temperature(0.0)
            .max_tokens(100)
            .tool_choice(ToolChoice::None),
    );
    agent.run_to_end("one", options).await;
    agent.prompt("two").await.unwrap();
    let requests = client.requests();
    assert_eq!(requests[0].temperature, Some(0.0));
    assert_eq!(requests[0].max_tokens, 100);
    assert_eq!(requests[0].tool_choice, ToolChoice::None);
    assert_eq!(requests[0].user.as_deref(), Some("builder"));
    assert_eq!(requests[1].temperature, Some(0.7));
    assert_eq!(requests[1].max_tokens, 8192);
    assert_eq!(requests[1].tool_choice, ToolChoice::Auto);
    for request in &requests {
        assert_eq!(request.model.as_deref(), Some("model-of-the-builder"));
    }
}

#[test]
fn build_checks_the_ranges_and_the_named_tool() {
    let build = |b: AgentBuilder| b.build().map(drop).unwrap_err();
    let client = || ScriptedClient::new([]);
    for (err, needle) in [
        (
            build(Agent::builder(client()).settings(RequestSettings::new().temperature(2.5))),
            "temperature",
        ),
        (
            build(Agent::builder(client()).settings(RequestSettings::new().top_p(0.0))),
            "top_p",
        ),
        (
            build(Agent::builder(client()).settings(RequestSettings::new().max_tokens(0))),
            "max_tokens",
        ),
        (
            build(Agent::builder(client()).settings(RequestSettings::new().stop_sequences([""]))),
            "stop sequence",
        ),
        (
            build(
                Agent::builder(client())
                    .settings(RequestSettings::new().tool_choice(ToolChoice::Tool("nope".into()))),
            ),
            "nope",
        ),
        (
            build(Agent::builder(client()).settings(RequestSettings::new().top_p(1.5))),
            "top_p",
        ),
    ] {
        assert!(
            matches!(&err, Error::Config(e) if e.to_string().contains(needle)),
            "{needle}: {err}"
        );
    }
}

#[tokio::test]
async fn a_bad_per_run_setting_ends_the_run_before_anything_is_sent() {
    let client = ScriptedClient::new([]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let options = RunOptions::new().settings(RequestSettings::new().temperature(-1.0));
    let outcome = agent.run_to_end("hi", options).await;
    assert!(matches!(
        &outcome.termination,
        Termination::Error(Error::Config(ConfigError::Setting {
            setting: "temperature",
            ..
        }))
    ));
    assert!(client.requests().is_empty());
}

#[tokio::test]
async fn an_extra_field_that_clashes_with_the_crates_own_is_an_error_naming_it() {
    for anthropic in [true, false] {
        let server = MockServer::start().await;
        let builder = if anthropic {
            Agent::builder(
                AnthropicClient::new("k")
                    .base_url(server.anthropic_base_url())
                    .model("claude-test"),
            )
        } else {
            Agent::builder(
                OpenAiClient::new("k")
                    .base_url(server.openai_base_url())
                    .model("gpt-test"),
            )
        };
        // `max_tokens` is always sent; an extra field the crate does not send this time
        // (`temperature` unset) goes through.
        let mut agent = builder
            .settings(RequestSettings::new().extra("max_tokens", json!(1)))
            .build()
            .unwrap();
        let outcome = agent.run_to_end("hi", RunOptions::new()).await;
        match &outcome.termination {
            Termination::Error(Error::Llm(LlmError::InvalidRequest { message })) => {
                assert!(message.contains("`max_tokens`"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(server.requests().is_empty(), "nothing was sent");
    }
}
