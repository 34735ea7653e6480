//! Strict schemas from Rust input types (schemars), as users write them: documented nested
//! fields, optional and defaulted fields, tagged and untagged enums, recursion through `#`
//! and through `$defs`, open maps. What goes out for each is the golden file
//! tests/golden/strict_schemas.json, which scripts/check-strict-schemas.py holds against the
//! official strictifier (openai-agents' `ensure_strict_json_schema`); and the agent sends
//! them to the mock server, which refuses what strict mode refuses.

use std::collections::BTreeMap;

use agent_loop::provider::strict::{strict_schema, NotStrict, StrictDialect};
use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::schemars::{self, JsonSchema};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, AnthropicClient, LlmClient, OpenAiClient, RequestSettings};
use agent_loop::{Termination, ToolError};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

/// A postal address.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct Address {
    /// Street and number.
    street: String,
    /// The city.
    #[schemars(length(min = 1))]
    city: String,
}

/// A shape, tagged by its kind.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(dead_code)]
enum Shape {
    /// A circle.
    Circle {
        /// Its radius.
        radius: f64,
    },
    /// A square.
    Square { side: f64 },
}

/// A quantity, either a count or a text.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[serde(untagged)]
#[allow(dead_code)]
enum Quantity {
    Count(u32),
    Text(String),
}

/// What to do, externally tagged.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
enum Action {
    /// Stop.
    Stop,
    /// Move by so much.
    Move { dx: i32, dy: i32 },
}

/// An order to ship.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct Order {
    /// Where to ship it.
    ship_to: Address,
    /// Where to send the bill, when not to the shipping address.
    bill_to: Option<Address>,
    /// What it holds.
    shapes: Vec<Shape>,
    /// How many.
    quantity: Quantity,
    /// What to do next.
    action: Action,
    /// A gift: wrapped, no prices.
    #[serde(default)]
    gift: bool,
    /// Notes for the courier.
    notes: Option<String>,
}

/// A tree node: root recursion (schemars writes `{"$ref": "#"}`).
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct Node {
    /// The node's name.
    name: String,
    /// Its children, each a node.
    children: Vec<Node>,
}

/// A list cell, recursive through a definition.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct Cell {
    value: i64,
    /// The rest of the list.
    next: Option<Box<Cell>>,
}

/// A list, whose head is a documented recursive definition.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct List {
    /// The first cell.
    head: Cell,
}

/// Labels: an open map, which strict mode cannot say.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct Labels {
    /// The labels.
    labels: BTreeMap<String, String>,
}

/// Numbers of every width, with their formats.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
#[allow(dead_code)]
struct Numbers {
    small: u8,
    big: i64,
    ratio: f64,
    /// Between 1 and 10.
    #[schemars(range(min = 1, max = 10))]
    rating: u32,
}

fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap()
}

/// One case: a schema, what each dialect makes of it, and (for the differential check) how
/// and why openai-agents' `ensure_strict_json_schema` differs, where it does beyond the
/// differences every case has (see scripts/check-strict-schemas.py).
struct Case {
    name: &'static str,
    input: Value,
    sdk_differs: Option<&'static str>,
}

fn cases() -> Vec<Case> {
    let case = |name, input| Case {
        name,
        input,
        sdk_differs: None,
    };
    vec![
        case("order", schema_of::<Order>()),
        case("node_root_recursion", schema_of::<Node>()),
        case("list_recursion_through_defs", schema_of::<List>()),
        case("numbers", schema_of::<Numbers>()),
        Case {
            name: "labels_open_map",
            input: schema_of::<Labels>(),
            sdk_differs: None,
        },
        Case {
            name: "root_ref_beside_a_description",
            input: json!({"type": "object", "description": "A node.",
                          "properties": {"next": {"$ref": "#", "description": "The next node."}},
                          "required": ["next"]}),
            sdk_differs: Some(
                "the SDK cannot resolve `#` beside a keyword (ValueError); we keep the bare `#` \
                 (OpenAI takes root recursion) and move its description to the object around it",
            ),
        },
        Case {
            name: "all_of",
            input: json!({"type": "object", "properties": {
                "a": {"allOf": [{"type": "string"}, {"minLength": 1}]}}, "required": ["a"]}),
            sdk_differs: Some(
                "OpenAI's strict mode does not list `allOf`: we send the tool without strict; \
                 the SDK keeps it",
            ),
        },
        case(
            "defaults_and_constraints",
            json!({"type": "object", "title": "T", "properties": {
                "q": {"type": "string", "minLength": 1, "maxLength": 9, "pattern": "^[a-z]+$"},
                "n": {"type": "integer", "default": 3, "minimum": 0},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true,
                         "maxItems": 5},
                "none": {"type": ["string", "null"], "default": null}
            }, "required": ["q"]}),
        ),
        case(
            "one_of_and_enums",
            json!({"type": "object", "properties": {
                "mode": {"oneOf": [{"const": "fast"}, {"const": "slow"}]},
                "unit": {"enum": ["c", "f"], "type": "string"}
            }, "required": ["mode", "unit"]}),
        ),
        case(
            "chained_refs",
            json!({"type": "object", "properties": {
                "a": {"$ref": "#/$defs/A", "description": "An a."}},
                "required": ["a"],
                "$defs": {"A": {"$ref": "#/$defs/B"},
                          "B": {"type": "object", "properties": {"x": {"type": "string"}}}}}),
        ),
        case(
            "definitions_table",
            json!({"type": "object", "properties": {
                "p": {"$ref": "#/definitions/P", "description": "A p."},
                "q": {"$ref": "#/definitions/P"}},
                "required": ["p", "q"],
                "definitions": {"P": {"type": "object", "properties": {"v": {"type": "number"}},
                                      "required": ["v"]}}}),
        ),
    ]
}

fn verdict(schema: &Value, dialect: StrictDialect) -> Value {
    match strict_schema(schema, dialect) {
        Ok(out) => out,
        Err(reason) => json!({"not_strict": reason.to_string()}),
    }
}

#[test]
fn strict_schemas_of_rust_types_match_the_golden_file() {
    let cases: Vec<Value> = cases()
        .into_iter()
        .map(|c| {
            let mut case = json!({
                "name": c.name,
                "input": c.input,
                "openai": verdict(&c.input, StrictDialect::OpenAi),
                "anthropic": verdict(&c.input, StrictDialect::Anthropic),
            });
            if let Some(why) = c.sdk_differs {
                case["sdk_differs"] = json!(why);
            }
            case
        })
        .collect();
    crate::common::assert_golden("strict_schemas.json", &Value::Array(cases));
}

/// Every `$ref` in `value` with the keywords beside it.
fn refs_with_siblings(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if map.contains_key("$ref") && map.len() > 1 {
                out.push(value.clone());
            }
            map.values().for_each(|v| refs_with_siblings(v, out));
        }
        Value::Array(list) => list.iter().for_each(|v| refs_with_siblings(v, out)),
        _ => {}
    }
}

#[test]
fn documented_nested_fields_go_out_strict_with_no_keyword_beside_a_ref() {
    let order = schema_of::<Order>();
    // schemars writes the documented field as a `$ref` beside its description.
    assert_eq!(
        order["properties"]["ship_to"],
        json!({"$ref": "#/$defs/Address", "description": "Where to ship it."})
    );
    let out = strict_schema(&order, StrictDialect::OpenAi).unwrap();
    let mut found = Vec::new();
    refs_with_siblings(&out, &mut found);
    assert_eq!(found, Vec::<Value>::new());
    let ship_to = &out["properties"]["ship_to"];
    assert_eq!(ship_to["description"], "Where to ship it.");
    assert_eq!(ship_to["additionalProperties"], false);
    assert_eq!(ship_to["required"], json!(["city", "street"]));
    // Anthropic's SDK keeps a description beside a `$ref`; so do we.
    let out = strict_schema(&order, StrictDialect::Anthropic).unwrap();
    assert_eq!(
        out["properties"]["ship_to"],
        json!({"$ref": "#/$defs/Address", "description": "Where to ship it."})
    );
}

#[test]
fn root_recursion_is_strict_for_openai_and_named_recursive_for_anthropic() {
    let node = schema_of::<Node>();
    assert_eq!(
        node["properties"]["children"]["items"],
        json!({"$ref": "#"})
    );
    let out = strict_schema(&node, StrictDialect::OpenAi).unwrap();
    assert_eq!(out["properties"]["children"]["items"], json!({"$ref": "#"}));
    assert_eq!(
        strict_schema(&node, StrictDialect::Anthropic),
        Err(NotStrict::Recursive {
            reference: "#".into()
        })
    );
}

fn tool_named<T>(name: &str) -> impl agent_loop::Tool
where
    T: for<'de> Deserialize<'de> + JsonSchema + Send + 'static,
{
    FnTool::new(name, "Takes the input.", |_: T, _ctx| async move {
        Ok::<_, ToolError>("done")
    })
}

fn agent_on(client: impl LlmClient + 'static) -> Agent {
    Agent::builder(client)
        .tool(tool_named::<Order>("order"))
        .tool(tool_named::<Node>("tree"))
        .tool(tool_named::<List>("list"))
        .tool(tool_named::<Labels>("tag"))
        .settings(RequestSettings::new().strict_tools(true))
        .build()
        .unwrap()
}

/// Runs one scripted turn and returns the request's tools as (name, strict) pairs.
async fn strict_flags(server: &MockServer, agent: &mut Agent) -> Vec<(String, bool)> {
    server.push(ScriptedResponse::text("ok"));
    let events: Vec<AgentEvent> = agent.run("Go.").collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(outcome.termination, Termination::Completed, "{events:?}");
    let body = &server.requests()[0].body;
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let holder = t.get("function").unwrap_or(t);
            (
                holder["name"].as_str().unwrap().to_owned(),
                holder.get("strict") == Some(&json!(true)),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_mock_takes_what_the_agent_sends_strict_in_each_dialect() {
    let expected_openai = vec![
        ("order".to_owned(), true),
        ("tree".to_owned(), true),
        ("list".to_owned(), true),
        ("tag".to_owned(), false),
    ];
    for responses in [false, true] {
        let server = MockServer::start().await;
        let mut client = OpenAiClient::new("sk-test")
            .base_url(server.openai_base_url())
            .model("gpt-test");
        if responses {
            client = client.responses();
        }
        let mut agent = agent_on(client);
        assert_eq!(strict_flags(&server, &mut agent).await, expected_openai);
    }
    let server = MockServer::start().await;
    let client = AnthropicClient::new("sk-test")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let mut agent = agent_on(client);
    assert_eq!(
        strict_flags(&server, &mut agent).await,
        vec![
            ("order".to_owned(), true),
            ("tree".to_owned(), false),
            ("list".to_owned(), false),
            ("tag".to_owned(), false),
        ]
    );
}

#[test]
fn an_agent_says_which_tools_go_out_without_strict_mode() {
    let anthropic = agent_on(AnthropicClient::new("sk-test"));
    let report = anthropic.strict_check();
    let names: Vec<&str> = report.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["order", "tree", "list", "tag"]);
    assert_eq!(report[0].1, Ok(()));
    assert_eq!(
        report[1].1,
        Err(NotStrict::Recursive {
            reference: "#".into()
        })
    );
    assert!(matches!(report[2].1, Err(NotStrict::Recursive { .. })));
    assert!(matches!(report[3].1, Err(NotStrict::OpenObject { .. })));
    let openai = agent_on(OpenAiClient::new("sk-test"));
    let failing: Vec<String> = openai
        .strict_check()
        .into_iter()
        .filter(|(_, verdict)| verdict.is_err())
        .map(|(name, _)| name)
        .collect();
    assert_eq!(failing, ["tag"]);
}
