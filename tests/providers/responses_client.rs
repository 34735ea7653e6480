//! The OpenAI Responses client (`OpenAiClient::responses()`) over loopback HTTP against the
//! crate's `MockServer`, and the agent loop running on it unchanged.

use crate::common;

use agent_loop::media::MediaSource;
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{MockResponse, MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::ToolSpec;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, LlmClient, LlmError, LlmEvent, Message,
    OpenAiClient, Role, StopReason,
};
use futures::StreamExt;
use serde_json::{json, Value};

use common::agent::{assert_valid, echo_tool, run};

const KEY: &str = "sk-test-responses-key";

fn client(server: &MockServer) -> OpenAiClient {
    OpenAiClient::new(KEY)
        .base_url(server.openai_base_url())
        .model("gpt-5")
        .responses()
        .retry_policy(common::fast_retries())
}

fn reasoning_block() -> ContentBlock {
    ContentBlock::Reasoning {
        id: "rs_1".into(),
        summary: vec!["Two tools.".into()],
        encrypted_content: Some("gAAAA-opaque==".into()),
    }
}

/// A conversation with reasoning, text, parallel calls, an error result and an image part.
fn conversation() -> ModelRequest {
    let mut request = ModelRequest::new(vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("Weather and time in Paris?"),
                ContentBlock::Image {
                    source: MediaSource::Url {
                        url: "https://example.com/a.png".into(),
                    },
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                reasoning_block(),
                ContentBlock::text("Checking."),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "get_time".into(),
                    input: json!({"tz": "Europe/Paris"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result_with_images(
                    "call_1",
                    "18°C, sunny",
                    false,
                    vec![MediaSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    }],
                ),
                ContentBlock::tool_result("call_2", "unknown timezone", true),
            ],
        },
    ]);
    request.system = Some("You are terse.".into());
    request.top_p = Some(0.25);
    request.parallel_tool_calls = Some(true);
    request.user = Some("user-7".into());
    request.max_tokens = 1024;
    request.temperature = Some(0.5);
    request.tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Current time".into(),
            input_schema: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
        },
    ];
    request
}

async fn collect(
    client: &impl LlmClient,
    request: &ModelRequest,
) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream(request).collect().await
}

fn text_of(items: &[Result<LlmEvent, LlmError>]) -> String {
    items
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The keys and item shapes the official SDK's `ResponseCreateParams` types allow (openai-python
/// src/openai/types/responses/response_create_params.py and the input item types): a body with
/// any other key, or an item missing a required key, is refused.
fn check_create_params(body: &Value) {
    const TOP: &[&str] = &[
        "background",
        "context_management",
        "conversation",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
        "stream",
    ];
    let object = body.as_object().expect("an object");
    for key in object.keys() {
        assert!(
            TOP.contains(&key.as_str()),
            "ResponseCreateParams has no {key:?}"
        );
    }
    assert!(body["model"].is_string());
    assert_eq!(body["stream"], true);
    let check = |item: &Value, required: &[&str], optional: &[&str]| {
        let keys: Vec<&str> = item
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for r in required {
            assert!(keys.contains(r), "{item} lacks {r}");
        }
        for k in keys {
            assert!(
                required.contains(&k) || optional.contains(&k),
                "{item}: unknown key {k}"
            );
        }
    };
    for item in body["input"].as_array().expect("input items") {
        match item["type"].as_str().unwrap() {
            // EasyInputMessageParam
            "message" => {
                check(item, &["content", "role", "type"], &[]);
                assert!(matches!(
                    item["role"].as_str(),
                    Some("user" | "assistant" | "system" | "developer")
                ));
                match &item["content"] {
                    Value::String(_) => {}
                    Value::Array(parts) => {
                        for part in parts {
                            match part["type"].as_str().unwrap() {
                                "input_text" => check(part, &["text", "type"], &[]),
                                "input_image" => {
                                    check(part, &["detail", "type"], &["file_id", "image_url"])
                                }
                                other => panic!("unknown input part {other}"),
                            }
                        }
                    }
                    other => panic!("content {other}"),
                }
            }
            // ResponseFunctionToolCallParam
            "function_call" => {
                check(
                    item,
                    &["arguments", "call_id", "name", "type"],
                    &["id", "status"],
                );
                let arguments = item["arguments"].as_str().unwrap();
                assert!(serde_json::from_str::<Value>(arguments)
                    .unwrap()
                    .is_object());
            }
            // FunctionCallOutput
            "function_call_output" => {
                check(item, &["call_id", "output", "type"], &["id", "status"]);
                match &item["output"] {
                    Value::String(_) => {}
                    // ResponseFunctionCallOutputItemListParam
                    Value::Array(parts) => {
                        for part in parts {
                            match part["type"].as_str().unwrap() {
                                "input_text" => check(part, &["text", "type"], &[]),
                                "input_image" => {
                                    check(part, &["type"], &["detail", "file_id", "image_url"])
                                }
                                other => panic!("unknown output part {other}"),
                            }
                        }
                    }
                    other => panic!("output {other}"),
                }
            }
            // ResponseReasoningItemParam
            "reasoning" => {
                check(
                    item,
                    &["id", "summary", "type"],
                    &["content", "encrypted_content", "status"],
                );
                for part in item["summary"].as_array().unwrap() {
                    check(part, &["text", "type"], &[]);
                    assert_eq!(part["type"], "summary_text");
                }
            }
            other => panic!("unknown input item {other}"),
        }
    }
    for tool in body["tools"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        // FunctionToolParam
        check(
            tool,
            &["name", "parameters", "strict", "type"],
            &[
                "description",
                "defer_loading",
                "output_schema",
                "allowed_callers",
            ],
        );
    }
    if let Some(choice) = body.get("tool_choice") {
        match choice {
            Value::String(s) => assert!(["none", "auto", "required"].contains(&s.as_str())),
            other => check(other, &["name", "type"], &[]),
        }
    }
    if let Some(reasoning) = body.get("reasoning") {
        check(
            reasoning,
            &[],
            &["effort", "summary", "generate_summary", "context", "mode"],
        );
    }
    if let Some(include) = body.get("include") {
        for i in include.as_array().unwrap() {
            assert_eq!(i, "reasoning.encrypted_content");
        }
    }
}

#[tokio::test]
async fn request_golden_and_valid_under_the_sdk_types() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("Sunny, time unknown."));
    let client = client(&server)
        .reasoning_effort("low")
        .reasoning_summary("auto")
        .organization("org-1");
    let items = collect(&client, &conversation()).await;
    assert_eq!(text_of(&items), "Sunny, time unknown.");
    assert!(matches!(
        items.last(),
        Some(Ok(LlmEvent::MessageStop {
            stop_reason: StopReason::EndTurn
        }))
    ));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/responses");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("openai-organization"), Some("org-1"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(
        r.body,
        json!({
            "model": "gpt-5",
            "instructions": "You are terse.",
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Weather and time in Paris?"},
                    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
                ]},
                {"type": "reasoning", "id": "rs_1",
                 "summary": [{"type": "summary_text", "text": "Two tools."}],
                 "encrypted_content": "gAAAA-opaque=="},
                {"type": "message", "role": "assistant", "content": "Checking."},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time",
                 "arguments": "{\"tz\":\"Europe/Paris\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": [
                    {"type": "input_text", "text": "18°C, sunny"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=",
                     "detail": "auto"}
                ]},
                {"type": "function_call_output", "call_id": "call_2",
                 "output": "Error: unknown timezone"}
            ],
            "tools": [
                {"type": "function", "name": "get_weather", "description": "Current weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                 "strict": false},
                {"type": "function", "name": "get_time", "description": "Current time",
                 "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
                 "strict": false}
            ],
            "tool_choice": "auto",
            "max_output_tokens": 1024,
            "temperature": 0.5,
            "top_p": 0.25,
            "parallel_tool_calls": true,
            "user": "user-7",
            "reasoning": {"effort": "low", "summary": "auto"},
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "stream": true
        })
    );
    check_create_params(&r.body);
    // The mock server read the history back out of the body and found it valid.
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn agent_tool_round_trip_sends_the_reasoning_back() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::new()
            .then_reasoning(
                "rs_turn1",
                ["Echo it.", "Then answer."],
                Some("gAAAA-turn1=="),
            )
            .then_tool_call("call_e1", "echo", json!({"text": "ping"}))
            .chunked(3)
            .usage_tokens(50, 20),
    );
    server.push(ScriptedResponse::text("It said ping.").chunked(4));
    let mut agent = Agent::builder(client(&server))
        .system("Use the tool.")
        .tool(echo_tool())
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "Echo ping").await;
    assert_eq!(outcome.final_text, "It said ping.");
    assert_eq!(outcome.turns, 2);
    let thinking: String = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ThinkingDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "Echo it.\n\nThen answer.");
    assert_valid(&agent);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.path, "/v1/responses");
        check_create_params(&r.body);
    }
    // Turn 2 carries turn 1's reasoning item verbatim, before its call and the call's output.
    assert_eq!(
        requests[1].body["input"],
        json!([
            {"type": "message", "role": "user", "content": "Echo ping"},
            {"type": "reasoning", "id": "rs_turn1",
             "summary": [{"type": "summary_text", "text": "Echo it."},
                         {"type": "summary_text", "text": "Then answer."}],
             "encrypted_content": "gAAAA-turn1=="},
            {"type": "function_call", "call_id": "call_e1", "name": "echo",
             "arguments": "{\"text\":\"ping\"}"},
            {"type": "function_call_output", "call_id": "call_e1", "output": "ping"}
        ])
    );
    assert!(server.history_violations().is_empty());
    // The history keeps the item whole.
    assert_eq!(
        agent.messages()[1].content[0],
        ContentBlock::Reasoning {
            id: "rs_turn1".into(),
            summary: vec!["Echo it.".into(), "Then answer.".into()],
            encrypted_content: Some("gAAAA-turn1==".into()),
        }
    );
}

#[tokio::test]
async fn the_scripted_client_carries_reasoning_through_the_agent() {
    let scripted = ScriptedClient::new([
        ScriptedResponse::new()
            .then_reasoning("rs_a", ["Plan."], None::<String>)
            .then_tool_call("call_a", "echo", json!({"text": "x"})),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(scripted.clone())
        .tool(echo_tool())
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.final_text, "done");
    let second = &scripted.requests()[1];
    assert_eq!(
        second.messages[1].content,
        [
            ContentBlock::Reasoning {
                id: "rs_a".into(),
                summary: vec!["Plan.".into()],
                encrypted_content: None,
            },
            ContentBlock::ToolUse {
                id: "call_a".into(),
                name: "echo".into(),
                input: json!({"text": "x"}),
            },
        ]
    );
    assert!(scripted.history_violations().is_empty());
}

#[tokio::test]
async fn transient_failures_are_retried_and_request_errors_surface() {
    let server = MockServer::start().await;
    server.push(MockResponse::status(500).error_type("server_error"));
    server.push(MockResponse::status(429).error_type("rate_limit_exceeded"));
    server.push(ScriptedResponse::text("finally"));
    let items = collect(
        &client(&server),
        &ModelRequest::new(vec![Message::user("hi")]),
    )
    .await;
    assert_eq!(text_of(&items), "finally");
    // Two retries, silent: the stream goes on with the next attempt.
    assert_eq!(server.requests().len(), 3);

    server.push(
        MockResponse::status(400)
            .error_type("invalid_request_error")
            .error_message("Unknown parameter: 'input[0].foo'."),
    );
    let items = collect(
        &client(&server),
        &ModelRequest::new(vec![Message::user("hi")]),
    )
    .await;
    match items.last() {
        Some(Err(LlmError::Api(api))) => {
            assert_eq!(api.status, 400);
            assert!(api.message.contains("Unknown parameter"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 4);
    // The key appears in no error.
    assert!(!format!("{items:?}").contains(KEY));
}

#[tokio::test]
async fn a_mid_stream_server_error_event_is_typed_and_retryable() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::text("partial").then_fail(LlmError::Stream {
            error_type: "server_error".into(),
            message: "boom".into(),
        }),
    );
    let items = collect(
        &client(&server),
        &ModelRequest::new(vec![Message::user("hi")]),
    )
    .await;
    match items.last() {
        Some(Err(e @ LlmError::Stream { error_type, .. })) => {
            assert_eq!(error_type, "server_error");
            assert!(e.is_retryable());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_whole_json_response_object_is_accepted() {
    let server = MockServer::start().await;
    server.push(MockResponse::json(
        ScriptedResponse::new()
            .then_reasoning("rs_w", ["Think."], Some("enc"))
            .then_tool_call("call_w", "echo", json!({"text": "w"}))
            .usage_tokens(7, 3),
    ));
    let items = collect(
        &client(&server),
        &ModelRequest::new(vec![Message::user("hi")]),
    )
    .await;
    let events: Vec<LlmEvent> = items.into_iter().map(Result::unwrap).collect();
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content[0],
        ContentBlock::Reasoning {
            id: "rs_w".into(),
            summary: vec!["Think.".into()],
            encrypted_content: Some("enc".into()),
        }
    );
    assert_eq!(response.usage.output_tokens, 3);
}

#[tokio::test]
async fn other_formats_leave_reasoning_items_out() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("a"));
    server.push(ScriptedResponse::text("b"));
    let request = conversation();
    let anthropic = AnthropicClient::new(KEY)
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let chat = OpenAiClient::new(KEY)
        .base_url(server.openai_base_url())
        .model("gpt-4.1");
    assert_eq!(text_of(&collect(&anthropic, &request).await), "a");
    assert_eq!(text_of(&collect(&chat, &request).await), "b");
    for r in server.requests() {
        let body = r.body.to_string();
        assert!(!body.contains("rs_1"), "{}: {body}", r.path);
        assert!(!body.contains("gAAAA-opaque"), "{}: {body}", r.path);
        assert!(body.contains("call_1"), "{}: {body}", r.path);
    }
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn stored_mode_and_previous_response_id() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let mut request = conversation();
    request
        .extra
        .insert("previous_response_id".into(), json!("resp_prev"));
    let items = collect(&client(&server).store(true), &request).await;
    assert_eq!(text_of(&items), "ok");
    let body = &server.requests()[0].body;
    assert_eq!(body["store"], true);
    assert!(body.get("include").is_none());
    assert_eq!(body["previous_response_id"], "resp_prev");
    // Only what follows the last assistant message: the server holds the rest.
    let types: Vec<&str> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["function_call_output", "function_call_output"]);
    check_create_params(body);
}
