//! Strict tools (`RequestSettings::strict_tools`) through the three clients that offer them:
//! the bodies (golden files checked against the official SDKs' request types by
//! scripts/check-golden-requests.py), the mock server's strict-mode checks, and a strict
//! OpenAI call that leaves an optional property `null`.

use agent_loop::provider::strict::{strict_schema, NotStrict, StrictDialect};
use agent_loop::provider::ModelRequest;
use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::{FnTool, ToolSpec};
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, LlmClient, Message, OpenAiClient, RequestSettings,
    ToolError,
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::common;

const KEY: &str = "sk-test-strict";

/// Two tools: one whose schema can be made strict (an optional property, a bound, a length),
/// one that cannot (an open map of labels).
fn request() -> ModelRequest {
    let mut request = ModelRequest::new(vec![Message::user("Weather in Paris?")]);
    request.system = Some("You are terse.".into());
    request.tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 1},
                    "days": {"type": "integer", "minimum": 1, "format": "uint32"},
                    "unit": {"type": "string", "enum": ["c", "f"]}
                },
                "required": ["city"]
            }),
        },
        ToolSpec {
            name: "tag".into(),
            description: "Labels a thing".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"labels": {"type": "object",
                                          "additionalProperties": {"type": "string"}}}
            }),
        },
    ];
    request.max_tokens = 256;
    request.prompt_cache = None;
    RequestSettings::new()
        .strict_tools(true)
        .apply(&mut request);
    request
}

async fn body_of(client: &dyn LlmClient, server: &MockServer) -> Value {
    server.push(ScriptedResponse::text("ok"));
    let items: Vec<_> = client.stream(&request()).collect().await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    let requests = server.requests();
    requests.last().unwrap().body.clone()
}

#[tokio::test]
async fn anthropic_sends_strict_true_with_the_schema_normalised() {
    let server = MockServer::start().await;
    let client = AnthropicClient::new(KEY)
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let body = body_of(&client, &server).await;
    crate::common::assert_golden("anthropic_strict_request.json", &body);
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools[0]["strict"], true);
    assert_eq!(
        tools[0]["input_schema"],
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "{minLength: 1}"},
                "days": {"type": "integer", "description": "{format: \"uint32\", minimum: 1}"},
                "unit": {"type": "string", "enum": ["c", "f"]}
            },
            "required": ["city"],
            "additionalProperties": false
        })
    );
    // The open map cannot be strict: sent as written, without `strict`.
    assert!(tools[1].get("strict").is_none());
    assert_eq!(tools[1]["input_schema"], request().tools[1].input_schema);
}

#[tokio::test]
async fn openai_chat_sends_strict_functions_with_every_property_required() {
    let server = MockServer::start().await;
    let client = OpenAiClient::new(KEY)
        .base_url(server.openai_base_url())
        .model("gpt-test");
    let body = body_of(&client, &server).await;
    crate::common::assert_golden("openai_strict_request.json", &body);
    let function = &body["tools"][0]["function"];
    assert_eq!(function["strict"], true);
    assert_eq!(
        function["parameters"],
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "{minLength: 1}"},
                "days": {"type": ["integer", "null"], "minimum": 1,
                         "description": "{format: \"uint32\"}"},
                "unit": {"type": ["string", "null"], "enum": ["c", "f", null]}
            },
            "required": ["city", "days", "unit"],
            "additionalProperties": false
        })
    );
    assert!(body["tools"][1]["function"].get("strict").is_none());
}

#[tokio::test]
async fn responses_sends_strict_true_only_where_the_schema_allows() {
    let server = MockServer::start().await;
    let client = OpenAiClient::new(KEY)
        .base_url(server.openai_base_url())
        .model("gpt-5")
        .responses();
    let body = body_of(&client, &server).await;
    crate::common::assert_golden("responses_strict_request.json", &body);
    assert_eq!(body["tools"][0]["strict"], true);
    assert_eq!(
        body["tools"][0]["parameters"]["required"],
        json!(["city", "days", "unit"])
    );
    assert_eq!(body["tools"][1]["strict"], false);
}

#[test]
fn the_reason_a_schema_cannot_be_strict_is_typed() {
    let open = &request().tools[1].input_schema;
    for dialect in [StrictDialect::Anthropic, StrictDialect::OpenAi] {
        assert_eq!(
            strict_schema(open, dialect),
            Err(NotStrict::OpenObject {
                path: "/properties/labels".into()
            })
        );
    }
}

/// What the mock answers a hand-written Chat Completions request with one strict function.
async fn post_strict_function(name: &str, parameters: Value) -> (u16, Value) {
    let server = MockServer::start().await;
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.openai_base_url()))
        .bearer_auth(KEY)
        .json(&json!({
            "model": "gpt-test", "stream": true,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function",
                       "function": {"name": name, "strict": true, "parameters": parameters}}]
        }))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn the_mock_refuses_a_strict_tool_that_is_not_normalised() {
    // What a hand-written body with `strict: true` and an optional property gets from OpenAI.
    let (status, error) = post_strict_function(
        "f",
        json!({"type": "object", "properties": {"a": {"type": "string"}},
               "additionalProperties": false}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Missing 'a'"),
        "{error}"
    );
}

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct WeatherInput {
    /// The city.
    city: String,
    /// Celsius or Fahrenheit; Celsius when left out (optional, and not nullable in the
    /// tool's own schema: `{"type": "string", "default": "C"}`).
    #[serde(default = "celsius")]
    #[schemars(default = "celsius")]
    unit: String,
}

fn celsius() -> String {
    "C".into()
}

#[tokio::test]
async fn a_strict_call_with_a_null_optional_property_runs_the_tool() {
    let server = MockServer::start().await;
    // Strict mode makes `unit` nullable; the model sends `null` for it.
    server.push(ScriptedResponse::tool_call(
        "call_1",
        "weather",
        json!({"city": "Paris", "unit": null}),
    ));
    server.push(ScriptedResponse::text("18°C"));
    let client = OpenAiClient::new(KEY)
        .base_url(server.openai_base_url())
        .model("gpt-test");
    let tool = FnTool::new(
        "weather",
        "Current weather.",
        |i: WeatherInput, _ctx| async move { Ok::<_, ToolError>(format!("{} in {}", i.unit, i.city)) },
    );
    let mut agent = Agent::builder(client)
        .tool(tool)
        .settings(RequestSettings::new().strict_tools(true))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Weather?").collect().await;
    let result = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("a tool result");
    assert_eq!(result, ("C in Paris".to_owned(), false));
    let first = &server.requests()[0].body;
    assert_eq!(first["tools"][0]["function"]["strict"], true);
    assert_eq!(
        first["tools"][0]["function"]["parameters"]["properties"]["unit"]["type"],
        json!(["string", "null"])
    );
    assert!(server.history_violations().is_empty());
    common::agent::assert_valid(&agent);
}

#[tokio::test]
async fn the_mock_refuses_a_ref_beside_a_description_in_a_strict_function() {
    // What OpenAI answers a strict function whose documented field kept its `$ref`.
    let (status, error) = post_strict_function(
        "ship",
        json!({"type": "object", "additionalProperties": false,
               "properties": {"to": {"$ref": "#/$defs/Address",
                                     "description": "Where to ship it."}},
               "required": ["to"],
               "$defs": {"Address": {"type": "object", "additionalProperties": false,
                                     "properties": {"city": {"type": "string"}},
                                     "required": ["city"]}}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "invalid_function_parameters");
    assert_eq!(
        error["error"]["message"],
        "Invalid schema for function 'ship': In context=('properties.to'), $ref cannot have \
         keywords {'description'}."
    );
}
