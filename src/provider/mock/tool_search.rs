//! The [`MockServer`](super::MockServer)'s check of OpenAI Responses hosted tool search, as
//! the SDK's types define it (`ToolSearchToolParam`, `FunctionToolParam.defer_loading`, the
//! input items `ToolSearchCall` and `ResponseToolSearchOutputItemParamParam`):
//!
//! - a function with `defer_loading: true` needs a `{"type": "tool_search"}` tool in `tools`;
//! - the `tool_search` tool takes `type`, `description`, `execution` (`server` or `client`)
//!   and `parameters` only: a deferred search tool is an unknown parameter;
//! - a `tool_search_call` input item needs `arguments`, a `tool_search_output` one a `tools`
//!   list; their `execution` and `status`, when present, are among the documented values.

use serde_json::Value;

fn refuse(message: String) -> Option<String> {
    Some(message)
}

/// What the real API refuses about tool search in a Responses request body, if anything: the
/// message of its `400 invalid_request_error`.
pub(crate) fn responses_rejection(body: &Value) -> Option<String> {
    tools(body).or_else(|| items(body))
}

fn tools(body: &Value) -> Option<String> {
    let tools = body.get("tools").and_then(Value::as_array)?;
    let kind = |t: &Value| t.get("type").and_then(Value::as_str).map(str::to_owned);
    let mut search = false;
    for (i, tool) in tools.iter().enumerate() {
        if kind(tool).as_deref() != Some("tool_search") {
            continue;
        }
        search = true;
        let Some(fields) = tool.as_object() else {
            continue;
        };
        if let Some(key) = fields.keys().find(|k| {
            !matches!(
                k.as_str(),
                "type" | "description" | "execution" | "parameters"
            )
        }) {
            return refuse(format!("Unknown parameter: 'tools[{i}].{key}'."));
        }
        if let Some(problem) = execution(tool, &format!("tools[{i}]")) {
            return Some(problem);
        }
    }
    for (i, tool) in tools.iter().enumerate() {
        match tool.get("defer_loading") {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) if search => {}
            Some(Value::Bool(true)) => {
                return refuse(format!(
                    "Invalid value for 'tools[{i}].defer_loading': deferred tools require a \
                     'tool_search' tool in 'tools'."
                ))
            }
            Some(_) => {
                return refuse(format!(
                    "Invalid type for 'tools[{i}].defer_loading': expected a boolean."
                ))
            }
        }
    }
    None
}

fn execution(item: &Value, at: &str) -> Option<String> {
    match item.get("execution") {
        None => None,
        Some(Value::String(e)) if e == "server" || e == "client" => None,
        Some(other) => refuse(format!(
            "Invalid value for '{at}.execution': {other}; expected 'server' or 'client'."
        )),
    }
}

fn items(body: &Value) -> Option<String> {
    let items = body.get("input").and_then(Value::as_array)?;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let required = match item.get("type").and_then(Value::as_str) {
            Some("tool_search_call") => "arguments",
            Some("tool_search_output") => "tools",
            _ => continue,
        };
        match item.get(required) {
            None | Some(Value::Null) => {
                return refuse(format!("Missing required parameter: '{at}.{required}'."))
            }
            Some(tools) if required == "tools" && !tools.is_array() => {
                return refuse(format!(
                    "Invalid type for '{at}.tools': expected an array of tools."
                ))
            }
            Some(_) => {}
        }
        if let Some(problem) = execution(item, &at) {
            return Some(problem);
        }
        match item.get("status") {
            None | Some(Value::Null) => {}
            Some(Value::String(s))
                if matches!(s.as_str(), "in_progress" | "completed" | "incomplete") => {}
            Some(other) => {
                return refuse(format!(
                    "Invalid value for '{at}.status': {other}; expected 'in_progress', \
                     'completed' or 'incomplete'."
                ))
            }
        }
        for key in ["id", "call_id"] {
            if item
                .get(key)
                .is_some_and(|v| !v.is_string() && !v.is_null())
            {
                return refuse(format!("Invalid type for '{at}.{key}': expected a string."));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn refused(body: Value) -> Option<String> {
        responses_rejection(&body)
    }

    fn function(name: &str, deferred: bool) -> Value {
        json!({"type": "function", "name": name, "parameters": {"type": "object"},
               "strict": false, "defer_loading": deferred})
    }

    #[test]
    fn deferred_functions_need_a_search_tool_that_is_not_deferred() {
        let search = json!({"type": "tool_search"});
        assert_eq!(
            refused(json!({"tools": [function("a", false), search.clone()]})),
            None
        );
        assert_eq!(
            refused(json!({"tools": [function("a", true), search.clone()]})),
            None
        );
        let message = refused(json!({"tools": [function("a", true)]})).unwrap();
        assert!(message.contains("tools[0].defer_loading"), "{message}");
        let deferred_search = json!({"type": "tool_search", "defer_loading": true});
        let message = refused(json!({"tools": [function("a", true), deferred_search]})).unwrap();
        assert_eq!(message, "Unknown parameter: 'tools[1].defer_loading'.");
        let client = json!({"type": "tool_search", "execution": "elsewhere"});
        assert!(refused(json!({"tools": [client]})).is_some());
        assert!(
            refused(json!({"tools": [{"type": "function", "name": "a", "defer_loading": 1}]}))
                .is_some()
        );
    }

    #[test]
    fn search_items_need_their_required_fields() {
        let call = json!({"type": "tool_search_call", "id": "tsc_1", "call_id": null,
                          "execution": "server", "status": "completed",
                          "arguments": {"query": "x"}});
        let output = json!({"type": "tool_search_output", "id": "tso_1", "execution": "server",
                            "status": "completed", "tools": [function("a", true)]});
        assert_eq!(
            refused(json!({"input": [call.clone(), output.clone()]})),
            None
        );
        let mut no_arguments = call.clone();
        no_arguments.as_object_mut().unwrap().remove("arguments");
        assert_eq!(
            refused(json!({"input": [no_arguments]})).unwrap(),
            "Missing required parameter: 'input[0].arguments'."
        );
        let mut no_tools = output.clone();
        no_tools.as_object_mut().unwrap().remove("tools");
        assert_eq!(
            refused(
                json!({"input": [{"type": "message", "role": "user", "content": "hi"}, no_tools]})
            )
            .unwrap(),
            "Missing required parameter: 'input[1].tools'."
        );
        let mut bad_status = output;
        bad_status["status"] = json!("done");
        assert!(refused(json!({"input": [bad_status]})).is_some());
        let mut bad_tools = call;
        bad_tools["type"] = json!("tool_search_output");
        bad_tools["tools"] = json!({});
        assert!(refused(json!({"input": [bad_tools]})).is_some());
    }

    proptest! {
        /// Any JSON in the places the check reads is judged without panicking.
        #[test]
        fn any_json_is_judged_without_panicking(text in ".{0,32}", n in any::<i64>(), b in any::<bool>()) {
            let odd = [json!(text), json!(n), json!(b), json!(null), json!([n]), json!({"k": text})];
            for value in &odd {
                let _ = responses_rejection(&json!({"tools": [value, {"type": "tool_search", "execution": value}],
                                                   "input": [value]}));
                let _ = responses_rejection(&json!({"tools": value, "input": value}));
                let _ = responses_rejection(&json!({"input": [{"type": "tool_search_call", "arguments": value,
                                                               "status": value, "id": value, "execution": value},
                                                              {"type": "tool_search_output", "tools": value}]}));
                let _ = responses_rejection(&json!({"tools": [{"type": "function", "defer_loading": value}]}));
            }
        }
    }
}
