//! The [`MockServer`](super::MockServer)'s check of the tool schemas in a request: what the
//! real APIs refuse with a `400`, the mock refuses too, so a schema that only the mock would
//! accept fails in tests rather than in production.
//!
//! - Anthropic: a custom tool's `input_schema` must be an object schema (`"type": "object"`)
//!   without `oneOf`, `anyOf` or `allOf` at its top level.
//! - OpenAI: a function's `parameters`, when present, must be an object schema.
//! - Anthropic: a request whose messages hold `tool_use` or `tool_result` blocks must define
//!   tools ("Requests which include `tool_use` or `tool_result` blocks must define tools.").
//! - Anthropic prompt caching: at most four `cache_control` breakpoints in one request (tools,
//!   system blocks, message content blocks and the blocks inside tool results), each of type
//!   `ephemeral` with a `ttl` of `5m` or `1h` when it has one.
//!
//! The messages are the providers' own.

use serde_json::Value;

use crate::wire::WireFormat;

/// A request the real API would refuse: its error type, code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) error_type: &'static str,
    pub(crate) code: Option<&'static str>,
    pub(crate) message: String,
}

/// The first tool in `body` whose schema the provider refuses, described as the provider
/// does; `None` when every tool schema is acceptable.
pub(super) fn rejection(format: WireFormat, body: &Value) -> Option<Rejection> {
    if format == WireFormat::Anthropic {
        if let Some(refused) = cache_control(body).or_else(|| undefined_tools(body)) {
            return Some(refused);
        }
    }
    let tools = body.get("tools")?.as_array()?;
    tools.iter().enumerate().find_map(|(i, tool)| match format {
        WireFormat::Anthropic => anthropic(i, tool),
        _ => openai(tool),
    })
}

/// Anthropic refuses tool blocks in the history of a request that defines no tools.
fn undefined_tools(body: &Value) -> Option<Rejection> {
    let defined = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| !tools.is_empty());
    let uses_tools = body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .any(|b| matches!(b["type"].as_str(), Some("tool_use" | "tool_result")));
    (uses_tools && !defined).then(|| Rejection {
        error_type: "invalid_request_error",
        code: None,
        message: "Requests which include `tool_use` or `tool_result` blocks must define tools."
            .to_owned(),
    })
}

fn anthropic(index: usize, tool: &Value) -> Option<Rejection> {
    // Server tools (`web_search_…`, `bash_…`) have a type of their own and no schema.
    if tool
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "custom")
    {
        return None;
    }
    let field = format!("tools.{index}.custom.input_schema");
    let invalid = |message: String| {
        Some(Rejection {
            error_type: "invalid_request_error",
            code: None,
            message,
        })
    };
    let Some(schema) = tool.get("input_schema") else {
        return invalid(format!("{field}: Field required"));
    };
    let Some(map) = schema.as_object() else {
        return invalid(format!("{field}: Input should be a valid dictionary"));
    };
    if ["oneOf", "anyOf", "allOf"]
        .iter()
        .any(|k| map.contains_key(*k))
    {
        return invalid(format!(
            "{field}: input_schema does not support oneOf, allOf, or anyOf at the top level"
        ));
    }
    if map.get("type").and_then(Value::as_str) != Some("object") {
        return invalid(format!("{field}.type: Input should be 'object'"));
    }
    None
}

/// The most `cache_control` breakpoints Anthropic accepts in one request.
const MAX_BREAKPOINTS: usize = 4;

/// Anthropic's checks of the `cache_control` breakpoints: each one's shape (field paths as the
/// API names them, e.g. `messages.0.content.1.text.cache_control.ttl`), then their number.
fn cache_control(body: &Value) -> Option<Rejection> {
    fn visit<'v>(found: &mut Vec<(String, &'v Value)>, path: String, block: &'v Value) {
        if let Some(control) = block.get("cache_control") {
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("text");
            found.push((format!("{path}.{kind}.cache_control"), control));
        }
    }
    let mut found: Vec<(String, &Value)> = Vec::new();
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        for (i, tool) in tools.iter().enumerate() {
            if let Some(control) = tool.get("cache_control") {
                found.push((format!("tools.{i}.custom.cache_control"), control));
            }
        }
    }
    if let Some(system) = body.get("system").and_then(Value::as_array) {
        for (i, block) in system.iter().enumerate() {
            visit(&mut found, format!("system.{i}"), block);
        }
    }
    for (i, message) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, block) in message
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            visit(&mut found, format!("messages.{i}.content.{j}"), block);
            // A tool result's content may be blocks too.
            for (k, inner) in block
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                visit(
                    &mut found,
                    format!("messages.{i}.content.{j}.tool_result.content.{k}"),
                    inner,
                );
            }
        }
    }
    let invalid = |message: String| {
        Some(Rejection {
            error_type: "invalid_request_error",
            code: None,
            message,
        })
    };
    for (path, control) in &found {
        if control.get("type").and_then(Value::as_str) != Some("ephemeral") {
            return invalid(format!("{path}.type: Input should be 'ephemeral'"));
        }
        match control.get("ttl") {
            None => {}
            Some(Value::String(ttl)) if ttl == "5m" || ttl == "1h" => {}
            Some(_) => return invalid(format!("{path}.ttl: Input should be '5m' or '1h'")),
        }
    }
    if found.len() > MAX_BREAKPOINTS {
        return invalid(format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
            found.len()
        ));
    }
    None
}

/// A Chat Completions tool (`{"type":"function","function":{…}}`) or a flat Responses one
/// (`{"type":"function","name","parameters",…}`).
fn openai(tool: &Value) -> Option<Rejection> {
    let function = tool.get("function").unwrap_or(tool);
    let parameters = function.get("parameters")?;
    let found = match parameters.get("type") {
        Some(Value::String(t)) if t == "object" => return None,
        Some(Value::String(t)) => t.clone(),
        Some(other) => other.to_string(),
        None => "None".to_owned(),
    };
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some(Rejection {
        error_type: "invalid_request_error",
        code: Some("invalid_function_parameters"),
        message: format!(
            "Invalid schema for function '{name}': schema must be a JSON Schema of \
             'type: \"object\"', got 'type: \"{found}\"'."
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn anthropic_body(schema: Value) -> Value {
        json!({"tools": [
            {"name": "ok", "description": "", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},
            {"name": "t", "description": "", "input_schema": schema}
        ]})
    }

    #[test]
    fn anthropic_refuses_top_level_unions_and_non_objects() {
        let message =
            |schema| rejection(WireFormat::Anthropic, &anthropic_body(schema)).map(|r| r.message);
        assert_eq!(message(json!({"type": "object", "properties": {}})), None);
        // A union inside a property is fine.
        assert_eq!(
            message(json!({"type": "object", "properties": {"a": {"anyOf": []}}})),
            None
        );
        for keyword in ["oneOf", "anyOf", "allOf"] {
            assert_eq!(
                message(json!({"type": "object", keyword: []})).as_deref(),
                Some(
                    "tools.2.custom.input_schema: input_schema does not support oneOf, allOf, \
                     or anyOf at the top level"
                )
            );
        }
        assert_eq!(
            message(json!({"type": "string"})).as_deref(),
            Some("tools.2.custom.input_schema.type: Input should be 'object'")
        );
        assert_eq!(
            message(json!(true)).as_deref(),
            Some("tools.2.custom.input_schema: Input should be a valid dictionary")
        );
        assert_eq!(
            rejection(WireFormat::Anthropic, &json!({"messages": []})),
            None
        );
    }

    #[test]
    fn anthropic_counts_breakpoints_everywhere_and_checks_their_shape() {
        let eph = json!({"type": "ephemeral"});
        let body = |extra: Value| {
            json!({
                "tools": [{"name": "t", "input_schema": {"type": "object"}, "cache_control": eph}],
                "system": [{"type": "text", "text": "s", "cache_control": eph}],
                "messages": [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "1", "content": [
                        {"type": "text", "text": "r", "cache_control": eph}
                    ]},
                    extra
                ]}]
            })
        };
        let message =
            |extra: Value| rejection(WireFormat::Anthropic, &body(extra)).map(|r| r.message);
        // Three plus one: at the limit.
        assert_eq!(
            message(json!({"type": "text", "text": "x", "cache_control": eph})),
            None
        );
        assert_eq!(message(json!({"type": "text", "text": "x"})), None);
        // The nested one counts: three plus two is five.
        let five = json!({"type": "tool_result", "tool_use_id": "2", "cache_control": eph,
                          "content": [{"type": "text", "text": "r", "cache_control": eph}]});
        assert_eq!(
            message(five).as_deref(),
            Some("A maximum of 4 blocks with cache_control may be provided. Found 5.")
        );
        assert_eq!(
            message(json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": 300}}))
                .as_deref(),
            Some("messages.0.content.1.text.cache_control.ttl: Input should be '5m' or '1h'")
        );
        assert_eq!(
            message(json!({"type": "image", "cache_control": {}})).as_deref(),
            Some("messages.0.content.1.image.cache_control.type: Input should be 'ephemeral'")
        );
        // OpenAI bodies are not checked for it.
        let many = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "x", "cache_control": {"type": "bogus"}}
        ]}]});
        assert_eq!(rejection(WireFormat::OpenAiChat, &many), None);
    }

    #[test]
    fn anthropic_refuses_tool_blocks_without_tools() {
        let history = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "x"}]}
        ]);
        let refused = rejection(WireFormat::Anthropic, &json!({"messages": history})).unwrap();
        assert!(refused.message.contains("must define tools"), "{refused:?}");
        let empty = json!({"messages": history, "tools": []});
        assert!(rejection(WireFormat::Anthropic, &empty).is_some());
        let defined = json!({"messages": history, "tools": [{"name": "t", "input_schema": {"type": "object"}}]});
        assert_eq!(rejection(WireFormat::Anthropic, &defined), None);
        let plain = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(rejection(WireFormat::Anthropic, &plain), None);
        // OpenAI accepts such a history.
        assert_eq!(
            rejection(WireFormat::OpenAiChat, &json!({"messages": history})),
            None
        );
    }

    #[test]
    fn openai_refuses_parameters_that_are_not_objects() {
        let body = |parameters: Value| {
            json!({"tools": [{"type": "function",
                              "function": {"name": "t", "parameters": parameters}}]})
        };
        assert_eq!(
            rejection(WireFormat::OpenAiChat, &body(json!({"type": "object"}))),
            None
        );
        let refused = rejection(WireFormat::OpenAiChat, &body(json!({"type": "array"}))).unwrap();
        assert_eq!(refused.code, Some("invalid_function_parameters"));
        assert_eq!(
            refused.message,
            "Invalid schema for function 't': schema must be a JSON Schema of \
             'type: \"object\"', got 'type: \"array\"'."
        );
        let untyped = rejection(WireFormat::OpenAiChat, &body(json!({"oneOf": []}))).unwrap();
        assert!(untyped.message.ends_with("got 'type: \"None\"'."));
        // Parameters are optional.
        let no_parameters = json!({"tools": [{"type": "function", "function": {"name": "t"}}]});
        assert_eq!(rejection(WireFormat::OpenAiChat, &no_parameters), None);
    }
}
