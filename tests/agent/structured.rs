//! Structured output and the one-shot calls, through the public API: the answer tool in
//! both wire formats, validation errors fed back to the model, forced tool choice, the
//! bounded retries and their typed termination.

use agent_loop::agent::{RunError, RunOptions, StructuredOutput};
use agent_loop::error::ConfigError;
use agent_loop::provider::ToolChoice;
use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::RequestSettings;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, Error, OpenAiClient, Termination, ToolError,
    UserInput,
};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::common;
use common::fast_retries;

#[derive(Debug, PartialEq, Deserialize, schemars::JsonSchema)]
struct Contact {
    /// Full name.
    name: String,
    /// Age in years.
    age: u32,
    email: Option<String>,
}

fn contact_options() -> RunOptions {
    RunOptions::new().output(StructuredOutput::of::<Contact>().unwrap())
}

/// The content of the tool result for call `id` in the agent's history.
fn result_text(agent: &Agent, id: &str) -> (String, bool) {
    agent
        .messages()
        .iter()
        .flat_map(|m| m.content.clone())
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } if tool_use_id == id => Some((content, is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[tokio::test]
async fn a_typed_answer_comes_back_parsed() {
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "final_answer",
        json!({"name": "Ada Lovelace", "age": 36, "email": null}),
    )]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let contact: Contact = agent
        .prompt_typed("Ada Lovelace, 36, no email.")
        .await
        .unwrap();
    assert_eq!(
        contact,
        Contact {
            name: "Ada Lovelace".into(),
            age: 36,
            email: None
        }
    );
    // The model was offered the answer tool with the type's schema.
    let request = client.last_request().unwrap();
    let tool = request
        .tools
        .iter()
        .find(|t| t.name == "final_answer")
        .unwrap();
    assert_eq!(tool.input_schema["type"], "object");
    assert_eq!(tool.input_schema["required"], json!(["name", "age"]));
    // The call is answered, so the history stays valid for the next run.
    assert_eq!(
        result_text(&agent, "c1"),
        ("Final answer received.".into(), false)
    );
}

#[tokio::test]
async fn a_wrong_answer_goes_back_to_the_model_and_the_next_call_is_forced() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "final_answer", json!({"name": "Ada", "age": "old"})),
        ScriptedResponse::tool_call("c2", "final_answer", json!({"name": "Ada", "age": 36})),
    ]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let outcome = agent.run_to_end("Ada, 36", contact_options()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.output, Some(json!({"name": "Ada", "age": 36})));
    let (why, is_error) = result_text(&agent, "c1");
    assert!(is_error);
    assert!(
        why.contains("/age") && why.contains("invalid final answer"),
        "{why}"
    );
    let requests = client.requests();
    assert_eq!(requests[0].tool_choice, ToolChoice::Auto);
    assert_eq!(
        requests[1].tool_choice,
        ToolChoice::Tool("final_answer".into())
    );
}

#[tokio::test]
async fn a_text_answer_is_asked_again_through_the_tool() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Ada, 36."),
        ScriptedResponse::tool_call("c1", "final_answer", json!({"name": "Ada", "age": 36})),
    ]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let outcome = agent.run_to_end("Ada, 36", contact_options()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.parse_output::<Contact>().unwrap().age, 36);
    let second = &client.requests()[1];
    assert_eq!(second.tool_choice, ToolChoice::Tool("final_answer".into()));
    let last_user = second.messages.last().unwrap();
    assert!(last_user.text().contains("final_answer"), "{last_user:?}");
    assert!(client.history_violations().is_empty());
}

#[tokio::test]
async fn out_of_retries_the_run_ends_with_the_raw_answer() {
    let bad = |id: &str| ScriptedResponse::tool_call(id, "final_answer", json!({"name": 5}));
    let client = ScriptedClient::new([bad("c1"), bad("c2")]);
    let mut agent = Agent::builder(client).build().unwrap();
    let options =
        RunOptions::new().output(StructuredOutput::of::<Contact>().unwrap().max_retries(1));
    let outcome = agent.run_to_end("?", options).await;
    match &outcome.termination {
        Termination::InvalidOutput { raw, error } => {
            assert_eq!(raw, &json!({"name": 5}));
            assert!(error.contains("name"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(outcome.turns, 2);
    assert!(matches!(
        outcome.parse_output::<Contact>(),
        Err(RunError::Stopped(_))
    ));
}

#[tokio::test]
async fn a_model_that_only_talks_ends_with_invalid_output_carrying_its_text() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("one"),
        ScriptedResponse::text("two"),
        ScriptedResponse::text("three"),
    ]);
    let mut agent = Agent::builder(client).build().unwrap();
    let outcome = agent.run_to_end("?", contact_options()).await;
    assert!(
        matches!(&outcome.termination, Termination::InvalidOutput { raw, .. } if raw == "three"),
        "{:?}",
        outcome.termination
    );
}

#[tokio::test]
async fn other_calls_beside_a_valid_answer_are_not_run() {
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ran.clone();
    let tool = FnTool::new("side", "Has an effect.", move |_: Value, _ctx| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, ToolError>("done")
        }
    });
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "final_answer",
        json!({"name": "Ada", "age": 1}),
    )
    .then_tool_call("c2", "side", json!({}))]);
    let mut agent = Agent::builder(client).tool(tool).build().unwrap();
    let outcome = agent.run_to_end("?", contact_options()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(
        result_text(&agent, "c1"),
        ("Final answer received.".into(), false)
    );
    assert_eq!(
        result_text(&agent, "c2"),
        ("not run: the run ended with this response".into(), true)
    );
}

#[tokio::test]
async fn an_answer_whose_json_is_cut_off_is_answered_as_invalid_json() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call_raw("c1", "final_answer", r#"{"name": "Ada", "#),
        ScriptedResponse::tool_call("c2", "final_answer", json!({"name": "Ada", "age": 36})),
    ]);
    let mut agent = Agent::builder(client).build().unwrap();
    let outcome = agent.run_to_end("Ada, 36", contact_options()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let (why, is_error) = result_text(&agent, "c1");
    assert!(is_error);
    assert!(
        why.starts_with("invalid final answer: the answer is not valid JSON"),
        "{why}"
    );
}

#[tokio::test]
async fn at_the_turn_limit_the_last_call_is_forced_to_the_answer_tool() {
    let tool = FnTool::new("look", "Looks.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("nothing")
    });
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "look", json!({})),
        ScriptedResponse::tool_call("c2", "final_answer", json!({"name": "Ada", "age": 2})),
    ]);
    let mut agent = Agent::builder(client.clone())
        .tool(tool)
        .max_turns(1)
        .build()
        .unwrap();
    let outcome = agent.run_to_end("?", contact_options()).await;
    assert_eq!(outcome.termination, Termination::Completed, "{outcome:?}");
    assert_eq!(
        client.requests()[1].tool_choice,
        ToolChoice::Tool("final_answer".into())
    );
}

#[tokio::test]
async fn with_extended_thinking_the_tool_is_not_forced() {
    // Anthropic refuses a forced tool choice while thinking is on.
    let client = ScriptedClient::new([
        ScriptedResponse::text("Ada"),
        ScriptedResponse::tool_call("c1", "final_answer", json!({"name": "Ada", "age": 3})),
    ]);
    let mut agent = Agent::builder(client.clone())
        .settings(RequestSettings::new().thinking_budget(1024))
        .build()
        .unwrap();
    let outcome = agent.run_to_end("?", contact_options()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(client.requests()[1].tool_choice, ToolChoice::Auto);
    assert!(client
        .requests()
        .iter()
        .all(|r| r.thinking_budget == Some(1024)));
}

#[tokio::test]
async fn an_answer_tool_named_like_an_agent_tool_is_refused() {
    let tool = FnTool::new("final_answer", "Mine.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("x")
    });
    let client = ScriptedClient::new([]);
    let mut agent = Agent::builder(client.clone()).tool(tool).build().unwrap();
    let outcome = agent.run_to_end("?", contact_options()).await;
    assert!(
        matches!(&outcome.termination, Termination::Error(Error::Config(ConfigError::Tool { tool, .. })) if tool == "final_answer"),
        "{:?}",
        outcome.termination
    );
    assert!(client.requests().is_empty());
    assert!(agent.messages().is_empty(), "the input was not added");
    // A renamed answer tool works.
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "respond",
        json!({"name": "A", "age": 1}),
    )]);
    let tool = FnTool::new("final_answer", "Mine.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("x")
    });
    let mut agent = Agent::builder(client).tool(tool).build().unwrap();
    let output = StructuredOutput::of::<Contact>()
        .unwrap()
        .name("respond")
        .unwrap();
    let outcome = agent
        .run_to_end("?", RunOptions::new().output(output))
        .await;
    assert_eq!(outcome.termination, Termination::Completed);
}

#[tokio::test]
async fn the_answer_tool_may_be_forced_from_the_first_call() {
    let client = ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "final_answer",
        json!({"name": "Ada", "age": 36}),
    )]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let options = contact_options().settings(
        agent_loop::RequestSettings::new().tool_choice(ToolChoice::Tool("final_answer".into())),
    );
    let outcome = agent.run_to_end("Ada, 36", options).await;
    assert_eq!(outcome.termination, Termination::Completed, "{outcome:?}");
    assert_eq!(
        client.requests()[0].tool_choice,
        ToolChoice::Tool("final_answer".into())
    );
    // A forced tool the agent does not have is refused before anything is sent.
    let client = ScriptedClient::new([]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let options = contact_options()
        .settings(agent_loop::RequestSettings::new().tool_choice(ToolChoice::Tool("other".into())));
    let outcome = agent.run_to_end("?", options).await;
    assert!(
        matches!(&outcome.termination, Termination::Error(Error::Config(ConfigError::UnknownTool { setting: "tool_choice", tool })) if tool == "other"),
        "{:?}",
        outcome.termination
    );
    assert!(client.requests().is_empty());
}

#[test]
fn an_answer_type_that_is_not_an_object_is_refused_with_advice() {
    let err = StructuredOutput::of::<Vec<String>>().unwrap_err();
    assert!(err.to_string().contains("object"), "{err}");
    // A hand-written schema works too.
    let output = StructuredOutput::from_schema(json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}},
        "required": ["n"]
    }))
    .unwrap();
    assert!(output.check(&json!({"n": 1})).is_ok());
    assert!(output.check(&json!({"n": -1})).unwrap_err().contains("/n"));
}

/// The answer tool and the forced choice as each provider documents them.
#[tokio::test]
async fn both_wire_formats_send_the_answer_tool_and_force_it() {
    for anthropic in [true, false] {
        let server = MockServer::start().await;
        server.push(ScriptedResponse::text("Ada, 36"));
        server.push(ScriptedResponse::tool_call(
            "c1",
            "final_answer",
            json!({"name": "Ada", "age": 36}),
        ));
        let mut agent = if anthropic {
            let client = AnthropicClient::new("k")
                .base_url(server.anthropic_base_url())
                .model("claude-test")
                .retry_policy(fast_retries());
            Agent::builder(client).build().unwrap()
        } else {
            let client = OpenAiClient::new("k")
                .base_url(server.openai_base_url())
                .model("gpt-test")
                .retry_policy(fast_retries());
            Agent::builder(client).build().unwrap()
        };
        let contact: Contact = agent
            .prompt_typed(UserInput::text("Ada, 36"))
            .await
            .unwrap();
        assert_eq!(contact.age, 36);
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        let (first, second) = (&requests[0].body, &requests[1].body);
        if anthropic {
            assert_eq!(first["tools"][0]["name"], "final_answer");
            assert_eq!(first["tools"][0]["input_schema"]["type"], "object");
            assert_eq!(first["tool_choice"], json!({"type": "auto"}));
            assert_eq!(
                second["tool_choice"],
                json!({"type": "tool", "name": "final_answer"})
            );
        } else {
            assert_eq!(first["tools"][0]["type"], "function");
            assert_eq!(first["tools"][0]["function"]["name"], "final_answer");
            assert_eq!(first["tool_choice"], "auto");
            assert_eq!(
                second["tool_choice"],
                json!({"type": "function", "function": {"name": "final_answer"}})
            );
        }
        assert!(server.history_violations().is_empty());
    }
}

#[tokio::test]
async fn one_shot_calls_return_the_text_or_why_there_is_none() {
    let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("4")]))
        .build()
        .unwrap();
    assert_eq!(agent.prompt("2 + 2?").await.unwrap(), "4");

    // A run that stops at the turn limit is an error carrying the outcome.
    let tool = FnTool::new("look", "Looks.", |_: Value, _ctx| async move {
        Ok::<_, ToolError>("nothing")
    });
    let client = ScriptedClient::new([ScriptedResponse::tool_call("c1", "look", json!({}))]);
    let mut agent = Agent::builder(client)
        .tool(tool)
        .max_turns(1)
        .build()
        .unwrap();
    match agent.prompt("?").await {
        Err(RunError::Stopped(outcome)) => assert_eq!(outcome.termination, Termination::MaxTurns),
        other => panic!("{other:?}"),
    }

    // The callback sees every event, Finished last.
    let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("hi")]))
        .build()
        .unwrap();
    let mut seen = Vec::new();
    let outcome = agent
        .run_to_end_with("hello", RunOptions::new(), |e| seen.push(e.clone()))
        .await;
    assert_eq!(outcome.final_text, "hi");
    assert!(matches!(seen.last(), Some(AgentEvent::Finished(_))));
    assert!(seen
        .iter()
        .any(|e| matches!(e, AgentEvent::TextDelta { .. })));
}

#[tokio::test]
async fn the_same_wrong_answer_three_times_ends_with_invalid_output_not_a_repeat() {
    // The defaults: max_retries 2 and max_repeated_calls 3. The repeat detector used to win
    // and end the run with RepeatedToolCall, losing the answer and what was wrong with it.
    let bad = |id: &str| ScriptedResponse::tool_call(id, "final_answer", json!({"name": 5}));
    let client = ScriptedClient::new([bad("c1"), bad("c2"), bad("c3")]);
    let mut agent = Agent::builder(client.clone()).build().unwrap();
    let outcome = agent.run_to_end("?", contact_options()).await;
    match &outcome.termination {
        Termination::InvalidOutput { raw, error } => {
            assert_eq!(raw, &json!({"name": 5}));
            assert!(error.contains("name"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(outcome.turns, 3);
    assert!(client.history_violations().is_empty());
}

#[tokio::test]
async fn wrong_answers_do_not_count_as_failing_tool_turns() {
    // More retries than max_tool_failure_turns (3): every wrong answer is an error result,
    // but the answer's own retries decide, not the tool-failure guard.
    let bad = |id: &str| ScriptedResponse::tool_call(id, "final_answer", json!({"age": id}));
    let client = ScriptedClient::new([
        bad("c1"),
        bad("c2"),
        bad("c3"),
        bad("c4"),
        ScriptedResponse::tool_call("c5", "final_answer", json!({"name": "Ada", "age": 36})),
    ]);
    let mut agent = Agent::builder(client).build().unwrap();
    let options =
        RunOptions::new().output(StructuredOutput::of::<Contact>().unwrap().max_retries(5));
    let outcome = agent.run_to_end("?", options).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.turns, 5);
    assert_eq!(
        outcome.parse_output::<Contact>().unwrap(),
        Contact {
            name: "Ada".into(),
            age: 36,
            email: None
        }
    );
}
