//! Both providers' request encoders on arbitrary conversations.
//!
//! A `ModelRequest` (history of user/assistant messages with every kind of content block, tools,
//! tool choice, sampling fields and `extra`) is built from the input with `arbitrary`; tool ids
//! come from a small set so that calls and results often match. Each request is encoded with
//! `agent_loop::__fuzz::encode_request` for both wire formats, which must never panic nor fail,
//! and the body is checked:
//!
//! - JSON round trip; `stream: true`; `extra` fields present and winning;
//! - Anthropic: roles strictly alternate, no empty message or text block, `tool_result`s first
//!   in user messages, `tool_use.input` an object, thinking blocks sent back unmodified, no
//!   block lost;
//! - OpenAI: `arguments` strings that parse to JSON objects, one `tool` message per result;
//! - OpenAI Responses: known item types only, `arguments` that parse to objects, one
//!   `function_call_output` per result, every assistant reasoning item sent back unmodified;
//! - invariant 4 carried through: when the history is valid (`testing::history_violation` is
//!   `None`), every call in the body is answered, in order, right after it.
//!
//! Needs the library hook `agent_loop::__fuzz::encode_request`, built only with `--cfg fuzzing`
//! (which cargo-fuzz sets); this target is built only with the crate feature `encode`.
#![no_main]

use agent_loop::testing::history_violation;
use agent_loop::{ContentBlock, Message, Role};
use agent_loop::provider::{ModelRequest, ToolChoice};
use agent_loop::tool::ToolSpec;
use agent_loop::wire::WireFormat;
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

#[derive(Arbitrary, Debug)]
enum FJson {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<FJson>),
    Obj(Vec<(String, FJson)>),
}

impl FJson {
    fn value(&self, depth: u32) -> Value {
        if depth > 24 {
            return Value::Null;
        }
        match self {
            FJson::Null => Value::Null,
            FJson::Bool(b) => json!(b),
            FJson::Int(i) => json!(i),
            // Non-finite floats have no JSON form: serde_json makes them null.
            FJson::Float(f) => json!(f),
            FJson::Str(s) => json!(s),
            FJson::Arr(items) => Value::Array(items.iter().map(|v| v.value(depth + 1)).collect()),
            FJson::Obj(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value(depth + 1)))
                    .collect(),
            ),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FBlock {
    Text(String),
    Thinking(String, String),
    Redacted(String),
    ToolUse {
        id: u8,
        name: String,
        input: FJson,
    },
    ToolResult {
        id: u8,
        content: String,
        is_error: bool,
    },
    Other(FJson),
    Reasoning {
        id: String,
        summary: Vec<String>,
        encrypted_content: Option<String>,
    },
}

#[derive(Arbitrary, Debug)]
struct FMessage {
    assistant: bool,
    blocks: Vec<FBlock>,
}

#[derive(Arbitrary, Debug)]
struct FRequest {
    model: Option<String>,
    system: Option<String>,
    messages: Vec<FMessage>,
    tools: Vec<(String, String, FJson)>,
    tool_choice: (u8, String),
    max_tokens: u32,
    temperature: Option<f32>,
    stop_sequences: Vec<String>,
    thinking_budget: Option<u32>,
    extra: Vec<(String, FJson)>,
}

fn tool_id(id: u8) -> String {
    format!("toolu_{}", id % 6)
}

impl FRequest {
    fn build(&self) -> ModelRequest {
        let messages = self
            .messages
            .iter()
            .map(|m| Message {
                role: if m.assistant {
                    Role::Assistant
                } else {
                    Role::User
                },
                content: m.blocks.iter().map(block).collect(),
            })
            .collect();
        let mut request = ModelRequest::new(messages);
        request.model = self.model.clone().filter(|m| !m.is_empty());
        request.system = self.system.clone();
        request.tools = self
            .tools
            .iter()
            .map(|(name, description, schema)| ToolSpec {
                name: name.clone(),
                description: description.clone(),
                input_schema: schema.value(0),
            })
            .collect();
        request.tool_choice = match self.tool_choice.0 % 4 {
            0 => ToolChoice::Auto,
            1 => ToolChoice::Any,
            2 => ToolChoice::None,
            _ => ToolChoice::Tool(self.tool_choice.1.clone()),
        };
        request.max_tokens = self.max_tokens;
        request.temperature = self.temperature;
        request.stop_sequences = self.stop_sequences.clone();
        request.thinking_budget = self.thinking_budget;
        request.extra = self
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.value(0)))
            .collect::<Map<String, Value>>();
        request
    }
}

fn block(block: &FBlock) -> ContentBlock {
    match block {
        FBlock::Text(text) => ContentBlock::Text { text: text.clone() },
        FBlock::Thinking(thinking, signature) => ContentBlock::Thinking {
            thinking: thinking.clone(),
            signature: signature.clone(),
        },
        FBlock::Redacted(data) => ContentBlock::RedactedThinking { data: data.clone() },
        FBlock::ToolUse { id, name, input } => ContentBlock::ToolUse {
            id: tool_id(*id),
            name: name.clone(),
            input: input.value(0),
        },
        FBlock::ToolResult {
            id,
            content,
            is_error,
        } => ContentBlock::tool_result(tool_id(*id), content.clone(), *is_error),
        FBlock::Other(value) => ContentBlock::Other(value.value(0)),
        FBlock::Reasoning {
            id,
            summary,
            encrypted_content,
        } => ContentBlock::Reasoning {
            id: id.clone(),
            summary: summary.clone(),
            encrypted_content: encrypted_content.clone(),
        },
    }
}

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The checks common to both formats; returns the `messages` array unless `extra` replaced it.
fn check_common<'a>(request: &ModelRequest, body: &'a Value) -> Option<&'a Vec<Value>> {
    let text = serde_json::to_vec(body).expect("the body serializes");
    let back: Value = serde_json::from_slice(&text).expect("the body parses back");
    assert_eq!(&back, body, "JSON round trip changed the body");
    let object = body.as_object().expect("the body is an object");
    for (key, value) in &request.extra {
        assert_eq!(
            object.get(key),
            Some(value),
            "extra field {key:?} lost or overridden"
        );
    }
    if !request.extra.contains_key("stream") {
        assert_eq!(object.get("stream"), Some(&json!(true)));
    }
    if request.extra.contains_key("messages") {
        return None;
    }
    Some(
        object
            .get("messages")
            .and_then(Value::as_array)
            .expect("messages is an array"),
    )
}

fn check_anthropic(request: &ModelRequest, body: &Value, valid_history: bool) {
    let Some(messages) = check_common(request, body) else {
        return;
    };
    let mut thinking_in: Vec<(&str, &str)> = Vec::new();
    let (mut calls_in, mut results_in, mut texts_in) = (0, 0, 0);
    for message in request.messages.iter() {
        for b in &message.content {
            match b {
                ContentBlock::Thinking {
                    thinking,
                    signature,
                } => thinking_in.push((thinking, signature)),
                ContentBlock::ToolUse { .. } => calls_in += 1,
                ContentBlock::ToolResult { .. } => results_in += 1,
                ContentBlock::Text { text } if !text.is_empty() => texts_in += 1,
                _ => {}
            }
        }
    }
    let mut thinking_out: Vec<(&str, &str)> = Vec::new();
    let (mut calls_out, mut results_out, mut texts_out) = (0, 0, 0);
    let mut previous_role = "";
    for (i, message) in messages.iter().enumerate() {
        let role = str_field(message, "role");
        assert!(role == "user" || role == "assistant", "role {role:?}");
        assert_ne!(
            role, previous_role,
            "message {i}: two {role} messages in a row"
        );
        previous_role = role;
        let content = message["content"].as_array().expect("content is an array");
        assert!(!content.is_empty(), "message {i} is empty");
        let mut seen_other = false;
        for b in content {
            match str_field(b, "type") {
                "text" => {
                    assert!(!str_field(b, "text").is_empty(), "empty text block");
                    texts_out += 1;
                }
                "tool_use" => {
                    assert!(b["input"].is_object(), "tool_use input {}", b["input"]);
                    calls_out += 1;
                }
                "tool_result" => {
                    assert!(
                        role != "user" || !seen_other,
                        "message {i}: tool_result after another block"
                    );
                    results_out += 1;
                }
                "thinking" => {
                    thinking_out.push((str_field(b, "thinking"), str_field(b, "signature")))
                }
                _ => {}
            }
            if str_field(b, "type") != "tool_result" {
                seen_other = true;
            }
        }
    }
    // Opaque (`Other`) blocks may carry any `type`, so counts are lower bounds there.
    assert!(calls_out >= calls_in && results_out >= results_in && texts_out >= texts_in);
    for pair in &thinking_in {
        assert!(
            thinking_out.contains(pair),
            "thinking block {pair:?} changed or lost"
        );
    }
    if valid_history {
        for (i, message) in messages.iter().enumerate() {
            let calls: Vec<&str> = message["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| str_field(b, "type") == "tool_use")
                .map(|b| str_field(b, "id"))
                .collect();
            if calls.is_empty() || str_field(message, "role") != "assistant" {
                continue;
            }
            let answers: Vec<&str> = messages
                .get(i + 1)
                .and_then(|m| m["content"].as_array())
                .into_iter()
                .flatten()
                .filter(|b| str_field(b, "type") == "tool_result")
                .map(|b| str_field(b, "tool_use_id"))
                .collect();
            assert_eq!(calls, answers, "message {i}: calls not answered in order");
        }
    }
}

fn check_openai(request: &ModelRequest, body: &Value, valid_history: bool) {
    let Some(messages) = check_common(request, body) else {
        return;
    };
    if request.system.as_deref().is_some_and(|s| !s.is_empty()) {
        assert_eq!(str_field(&messages[0], "role"), "system");
    }
    // Results in assistant messages (an invalid history) have no place in Chat Completions.
    let results_in = request
        .messages
        .iter()
        .filter(|m| m.role != Role::Assistant)
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolResult { .. }))
        .count();
    let mut results_out = 0;
    for (i, message) in messages.iter().enumerate() {
        let role = str_field(message, "role");
        assert!(
            ["system", "user", "assistant", "tool"].contains(&role),
            "role {role:?}"
        );
        if role == "tool" {
            results_out += 1;
            assert!(message["tool_call_id"].is_string(), "message {i}");
            assert!(message["content"].is_string(), "message {i}");
        }
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let arguments = call["function"]["arguments"]
                .as_str()
                .expect("arguments is a string");
            let parsed: Value = serde_json::from_str(arguments).expect("arguments parse");
            assert!(parsed.is_object(), "arguments {arguments}");
        }
    }
    assert_eq!(results_out, results_in, "one tool message per result");
    if valid_history {
        for (i, message) in messages.iter().enumerate() {
            let calls: Vec<&str> = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| str_field(c, "id"))
                .collect();
            if calls.is_empty() {
                continue;
            }
            let answers: Vec<&str> = messages[i + 1..]
                .iter()
                .take_while(|m| str_field(m, "role") == "tool")
                .map(|m| str_field(m, "tool_call_id"))
                .collect();
            assert_eq!(calls, answers, "message {i}: calls not answered in order");
        }
    }
}

fn check_responses(request: &ModelRequest, body: &Value, valid_history: bool) {
    let text = serde_json::to_vec(body).expect("the body serializes");
    let back: Value = serde_json::from_slice(&text).expect("the body parses back");
    assert_eq!(&back, body, "JSON round trip changed the body");
    let object = body.as_object().expect("the body is an object");
    for (key, value) in &request.extra {
        assert_eq!(object.get(key), Some(value), "extra field {key:?} lost");
    }
    if request.extra.contains_key("input") || request.extra.contains_key("previous_response_id") {
        return;
    }
    let items = object
        .get("input")
        .and_then(Value::as_array)
        .expect("input is an array");
    let mut results_out = 0;
    let mut reasoning_out: Vec<&Value> = Vec::new();
    for item in items {
        match str_field(item, "type") {
            "message" => assert!(["user", "assistant"].contains(&str_field(item, "role"))),
            "function_call" => {
                let parsed: Value =
                    serde_json::from_str(str_field(item, "arguments")).expect("arguments parse");
                assert!(parsed.is_object());
            }
            "function_call_output" => {
                results_out += 1;
                assert!(item["output"].is_string());
            }
            "reasoning" => reasoning_out.push(item),
            other => panic!("unknown input item type {other:?}"),
        }
    }
    let mut results_in = 0;
    let mut reasoning_in = 0;
    for message in request.messages.iter() {
        for b in &message.content {
            match (message.role, b) {
                (Role::User, ContentBlock::ToolResult { .. }) => results_in += 1,
                (
                    Role::Assistant,
                    ContentBlock::Reasoning {
                        id,
                        summary,
                        encrypted_content,
                    },
                ) => {
                    let sent = reasoning_out
                        .get(reasoning_in)
                        .expect("a reasoning item lost");
                    assert_eq!(str_field(sent, "id"), id);
                    let texts: Vec<&str> = sent["summary"]
                        .as_array()
                        .expect("summary")
                        .iter()
                        .map(|p| str_field(p, "text"))
                        .collect();
                    assert_eq!(
                        texts,
                        summary.iter().map(String::as_str).collect::<Vec<_>>()
                    );
                    assert_eq!(
                        sent["encrypted_content"].as_str(),
                        encrypted_content.as_deref()
                    );
                    reasoning_in += 1;
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        results_out, results_in,
        "one function_call_output per result"
    );
    assert_eq!(reasoning_out.len(), reasoning_in, "reasoning items added");
    if valid_history {
        // An assistant turn is a run of reasoning, assistant message and function_call items
        // (in the model's order); its calls are answered, in order, by the function_call_output
        // items right after it.
        let assistant = |n: &Value| match str_field(n, "type") {
            "reasoning" | "function_call" => true,
            "message" => str_field(n, "role") == "assistant",
            _ => false,
        };
        let mut i = 0;
        while i < items.len() {
            if !assistant(&items[i]) {
                i += 1;
                continue;
            }
            let end = items[i..]
                .iter()
                .position(|n| !assistant(n))
                .map_or(items.len(), |p| i + p);
            let calls: Vec<&str> = items[i..end]
                .iter()
                .filter(|n| str_field(n, "type") == "function_call")
                .map(|n| str_field(n, "call_id"))
                .collect();
            let answers: Vec<&str> = items[end..]
                .iter()
                .take_while(|n| str_field(n, "type") == "function_call_output")
                .map(|n| str_field(n, "call_id"))
                .collect();
            if !calls.is_empty() {
                assert_eq!(
                    calls, answers,
                    "items {i}..{end}: calls not answered in order"
                );
            }
            i = end;
        }
    }
}

fuzz_target!(|input: FRequest| {
    let request = input.build();
    let valid_history = history_violation(&request.messages).is_none();
    for format in [
        WireFormat::Anthropic,
        WireFormat::OpenAiChat,
        WireFormat::OpenAiResponses,
    ] {
        let body = agent_loop::__fuzz::encode_request(format, &request)
            .unwrap_or_else(|e| panic!("{format:?}: encoding failed: {e}"));
        match format {
            WireFormat::Anthropic => check_anthropic(&request, &body, valid_history),
            WireFormat::OpenAiResponses => check_responses(&request, &body, valid_history),
            _ => check_openai(&request, &body, valid_history),
        }
    }
});
