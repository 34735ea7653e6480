//! The [`MockServer`](super::MockServer)'s check of the tool schemas in a request: what the
//! real APIs refuse with a `400`, the mock refuses too, so a schema that only the mock would
//! accept fails in tests rather than in production.
//!
//! - Anthropic: a custom tool's `input_schema` must be an object schema (`"type": "object"`)
//!   without `oneOf`, `anyOf` or `allOf` at its top level.
//! - OpenAI: a function's `parameters`, when present, must be an object schema.
//!
//! The messages are the providers' own.

use serde_json::Value;

use crate::provider::WireFormat;

/// A request the real API would refuse: its error type, code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rejection {
    pub(super) error_type: &'static str,
    pub(super) code: Option<&'static str>,
    pub(super) message: String,
}

/// The first tool in `body` whose schema the provider refuses, described as the provider
/// does; `None` when every tool schema is acceptable.
pub(super) fn rejection(format: WireFormat, body: &Value) -> Option<Rejection> {
    let tools = body.get("tools")?.as_array()?;
    tools.iter().enumerate().find_map(|(i, tool)| match format {
        WireFormat::Anthropic => anthropic(i, tool),
        _ => openai(tool),
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

fn openai(tool: &Value) -> Option<Rejection> {
    let function = tool.get("function")?;
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
