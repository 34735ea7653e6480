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
//! - Strict tools (Anthropic `"strict": true`, OpenAI `function.strict` / Responses
//!   `strict: true`): every object schema must say `additionalProperties: false`; OpenAI's
//!   `required` must name every property; only the keywords each provider's strict mode
//!   supports may appear (OpenAI: no `allOf`, `minLength`, `maxLength`…; Anthropic: no
//!   numeric or length constraints, `minItems` 0 or 1 only), string formats from each
//!   provider's list, Anthropic enums of primitive values only; local references only
//!   (`#`, or a definition at the top level: "reference can only point to definitions defined
//!   at the top level of the schema"); OpenAI: no keyword beside a `$ref` ("$ref cannot have
//!   keywords {'description'}"), objects nested at most 10 deep, at most 5,000 properties,
//!   1,000 enum values and 120,000 characters of names and values in all (15,000 in one enum
//!   of more than 250 strings); Anthropic: no recursive schema (`#`, or a definition that
//!   reaches itself).
//!
//! The messages are the providers' own.

use serde_json::Value;

use crate::wire::WireFormat;

use super::Rejection;

/// The first tool in `body` whose schema the provider refuses, described as the provider
/// does; `None` when every tool schema is acceptable.
pub(crate) fn rejection(format: WireFormat, body: &Value) -> Option<Rejection> {
    if format == WireFormat::Anthropic {
        if let Some(refused) = cache_control(body)
            .or_else(|| undefined_tools(body))
            .or_else(|| deferred_tools(body))
        {
            return Some(refused);
        }
    }
    if format == WireFormat::OpenAiResponses {
        if let Some(message) = super::tool_search::responses_rejection(body) {
            return Some(Rejection {
                error_type: "invalid_request_error",
                code: None,
                message,
            });
        }
    }
    let tools = body.get("tools")?.as_array()?;
    tools.iter().enumerate().find_map(|(i, tool)| match format {
        WireFormat::Anthropic => anthropic(i, tool).or_else(|| strict(format, i, tool)),
        _ => openai(tool).or_else(|| strict(format, i, tool)),
    })
}

/// A strict tool whose schema its provider's strict mode refuses.
fn strict(format: WireFormat, index: usize, tool: &Value) -> Option<Rejection> {
    let openai = format != WireFormat::Anthropic;
    let (holder, schema_key) = if openai {
        (tool.get("function").unwrap_or(tool), "parameters")
    } else {
        (tool, "input_schema")
    };
    if holder.get("strict") != Some(&Value::Bool(true)) {
        return None;
    }
    let schema = holder.get(schema_key)?;
    let name = holder
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if openai {
        if let Some(problem) = openai_limits(schema) {
            return Some(Rejection {
                error_type: "invalid_request_error",
                code: Some("invalid_function_parameters"),
                message: format!("Invalid schema for function '{name}': {problem}"),
            });
        }
    }
    let mut context = Vec::new();
    let problem = strict_problem(schema, schema, openai, &mut context, 0)?;
    let message = if openai {
        format!(
            "Invalid schema for function '{name}': In context=({}), {problem}",
            context
                .iter()
                .map(|c| format!("'{c}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        format!(
            "tools.{index}.custom: strict tool schema: {problem} (at {})",
            if context.is_empty() {
                "the root".to_owned()
            } else {
                context.join(".")
            }
        )
    };
    Some(Rejection {
        error_type: "invalid_request_error",
        code: openai.then_some("invalid_function_parameters"),
        message,
    })
}

/// The first thing a provider's strict mode refuses in `schema`, with where it is in
/// `context`. Written from the providers' documented lists, independently of the crate's
/// own normalisation.
fn strict_problem(
    root: &Value,
    schema: &Value,
    openai: bool,
    context: &mut Vec<String>,
    depth: usize,
) -> Option<String> {
    const COMMON: &[&str] = &[
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
        "$ref",
        "$defs",
        "definitions",
        "pattern",
        "format",
        "title",
    ];
    const OPENAI: &[&str] = &[
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    ];
    const ANTHROPIC: &[&str] = &["allOf", "default", "minItems"];
    const OPENAI_FORMATS: &[&str] = &[
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "uuid",
    ];
    const ANTHROPIC_FORMATS: &[&str] = &[
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "uri",
        "ipv4",
        "ipv6",
        "uuid",
    ];
    if depth > 64 {
        return Some("the schema nests too deeply".to_owned());
    }
    let map = schema.as_object()?;
    for key in map.keys() {
        let dialect = if openai { OPENAI } else { ANTHROPIC };
        if !COMMON.contains(&key.as_str()) && !dialect.contains(&key.as_str()) {
            return Some(format!("'{key}' is not permitted."));
        }
    }
    if let Some(reference) = map.get("$ref") {
        let reference = reference.as_str().unwrap_or_default();
        if reference != "#" && definition(root, reference).is_none() {
            return Some(
                "reference can only point to definitions defined at the top level of the schema."
                    .to_owned(),
            );
        }
        if openai {
            // OpenAI: "$ref cannot have keywords {'description'}."
            let others: Vec<String> = map
                .keys()
                .filter(|k| *k != "$ref")
                .map(|k| format!("'{k}'"))
                .collect();
            if !others.is_empty() {
                return Some(format!(
                    "$ref cannot have keywords {{{}}}.",
                    others.join(", ")
                ));
            }
        } else if recursive(root, reference) {
            return Some("recursive schemas are not supported.".to_owned());
        }
    }
    if let Some(format) = map.get("format").and_then(Value::as_str) {
        let formats = if openai {
            OPENAI_FORMATS
        } else {
            ANTHROPIC_FORMATS
        };
        if !formats.contains(&format) {
            return Some(format!("format '{format}' is not supported."));
        }
    }
    if !openai {
        if let Some(n) = map.get("minItems") {
            if !matches!(n.as_u64(), Some(0 | 1)) {
                return Some(format!("minItems {n} is not supported (only 0 or 1)."));
            }
        }
        if let Some(values) = map.get("enum").and_then(Value::as_array) {
            if values.iter().any(|v| v.is_object() || v.is_array()) {
                return Some("enum values must be strings, numbers, booleans or null.".to_owned());
            }
        }
    }
    let object = map.get("type").is_some_and(|t| {
        t == "object"
            || t.as_array()
                .is_some_and(|l| l.iter().any(|v| v == "object"))
    }) || map.contains_key("properties");
    if object {
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Some(
                "'additionalProperties' is required to be supplied and to be false.".to_owned(),
            );
        }
        if openai {
            let required: Vec<&str> = map
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let missing = map
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, _)| k.as_str())
                .find(|k| !required.contains(k));
            if let Some(missing) = missing {
                return Some(format!(
                    "'required' is required to be supplied and to be an array including every \
                     key in properties. Missing '{missing}'."
                ));
            }
        }
    }
    let mut children: Vec<(String, &Value)> = Vec::new();
    for key in ["properties", "$defs", "definitions"] {
        if let Some(subs) = map.get(key).and_then(Value::as_object) {
            children.extend(subs.iter().map(|(k, v)| (format!("{key}.{k}"), v)));
        }
    }
    if let Some(items) = map.get("items") {
        children.push(("items".to_owned(), items));
    }
    for key in ["anyOf", "allOf"] {
        if let Some(list) = map.get(key).and_then(Value::as_array) {
            children.extend(
                list.iter()
                    .enumerate()
                    .map(|(i, v)| (format!("{key}.{i}"), v)),
            );
        }
    }
    for (step, child) in children {
        context.push(step);
        if let Some(problem) = strict_problem(root, child, openai, context, depth + 1) {
            return Some(problem);
        }
        context.pop();
    }
    None
}

/// The definition a local reference (`#/$defs/x`, `#/definitions/x`) names at the top level.
fn definition<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let (table, name) = reference.strip_prefix("#/")?.split_once('/')?;
    if table != "$defs" && table != "definitions" {
        return None;
    }
    root.get(table)?
        .get(name.replace("~1", "/").replace("~0", "~"))
}

/// Whether `reference` reaches itself: `#` always does (it names the root, which holds it).
fn recursive(root: &Value, reference: &str) -> bool {
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>, depth: usize) {
        match value {
            _ if depth > 64 => {}
            Value::Object(map) => {
                for (key, sub) in map {
                    match (key.as_str(), sub) {
                        ("$ref", Value::String(r)) => out.push(r),
                        ("$defs" | "definitions", _) => {}
                        _ => refs(sub, out, depth + 1),
                    }
                }
            }
            Value::Array(list) => list.iter().for_each(|v| refs(v, out, depth + 1)),
            _ => {}
        }
    }
    if reference == "#" {
        return true;
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut todo = vec![reference];
    while let Some(next) = todo.pop() {
        let Some(target) = definition(root, next) else {
            continue;
        };
        let mut found = Vec::new();
        refs(target, &mut found, 0);
        for r in found {
            if r == reference || r == "#" {
                return true;
            }
            if !seen.contains(&r) {
                seen.push(r);
                todo.push(r);
            }
        }
    }
    false
}

/// OpenAI's limits on a whole strict schema ("Objects have limitations on nesting depth and
/// size"; "Limitations on total string size"; "Limitations on enum size").
fn openai_limits(schema: &Value) -> Option<String> {
    #[derive(Default)]
    struct Totals {
        properties: usize,
        enum_values: usize,
        text: usize,
        deepest: usize,
        long_enum: usize,
    }
    fn walk(value: &Value, objects: usize, depth: usize, totals: &mut Totals) {
        let Value::Object(map) = value else {
            if let Value::Array(list) = value {
                list.iter()
                    .for_each(|v| walk(v, objects, depth + 1, totals));
            }
            return;
        };
        if depth > 64 {
            return;
        }
        let mut objects = objects;
        if let Some(Value::Object(properties)) = map.get("properties") {
            objects += 1;
            totals.deepest = totals.deepest.max(objects);
            totals.properties += properties.len();
            totals.text += properties.keys().map(String::len).sum::<usize>();
        }
        for table in ["$defs", "definitions"] {
            if let Some(Value::Object(defs)) = map.get(table) {
                totals.text += defs.keys().map(String::len).sum::<usize>();
            }
        }
        if let Some(Value::Array(values)) = map.get("enum") {
            totals.enum_values += values.len();
            let text: usize = values.iter().filter_map(Value::as_str).map(str::len).sum();
            totals.text += text;
            if values.len() > 250 {
                totals.long_enum = totals.long_enum.max(text);
            }
        }
        if let Some(Value::String(value)) = map.get("const") {
            totals.text += value.len();
        }
        for (key, sub) in map {
            if key != "enum" && key != "const" {
                walk(sub, objects, depth + 1, totals);
            }
        }
    }
    let mut totals = Totals::default();
    walk(schema, 0, 0, &mut totals);
    if totals.deepest > 10 {
        Some(format!(
            "objects are nested {} levels deep; a schema may have up to 10 levels of nesting.",
            totals.deepest
        ))
    } else if totals.properties > 5_000 {
        Some(format!(
            "the schema has {} object properties; a schema may have up to 5000 object properties total.",
            totals.properties
        ))
    } else if totals.enum_values > 1_000 {
        Some(format!(
            "the schema has {} enum values; a schema may have up to 1000 enum values across all enum properties.",
            totals.enum_values
        ))
    } else if totals.long_enum > 15_000 {
        Some(format!(
            "an enum of more than 250 values has {} characters; the limit is 15000.",
            totals.long_enum
        ))
    } else if totals.text > 120_000 {
        Some(format!(
            "the total string length of property names, definition names, enum values and const values is {}; the limit is 120000.",
            totals.text
        ))
    } else {
        None
    }
}

/// Anthropic's tool search: a tool with `defer_loading` needs a tool search tool in the
/// request, and the search tool itself may not be deferred.
fn deferred_tools(body: &Value) -> Option<Rejection> {
    let tools = body.get("tools")?.as_array()?;
    let is_search = |t: &Value| {
        t.get("type")
            .and_then(Value::as_str)
            .is_some_and(|k| k.starts_with("tool_search_tool_"))
    };
    let deferred = |t: &Value| t.get("defer_loading") == Some(&Value::Bool(true));
    let invalid = |message: &str| {
        Some(Rejection {
            error_type: "invalid_request_error",
            code: None,
            message: message.to_owned(),
        })
    };
    if !tools.iter().any(deferred) {
        return None;
    }
    if !tools.iter().any(is_search) {
        return invalid(
            "Tools with defer_loading require a tool search tool (tool_search_tool_regex or \
             tool_search_tool_bm25) in the request.",
        );
    }
    if tools.iter().any(|t| is_search(t) && deferred(t)) {
        return invalid("The tool search tool cannot have defer_loading set.");
    }
    None
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
    fn anthropic_deferred_tools_need_a_search_tool_not_deferred() {
        let custom = |name: &str, deferred: bool| json!({"name": name, "input_schema": {"type": "object"}, "defer_loading": deferred});
        let search =
            json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"});
        let message = |tools: Value| {
            rejection(WireFormat::Anthropic, &json!({"tools": tools})).map(|r| r.message)
        };
        assert_eq!(
            message(json!([custom("a", false), custom("b", true), search])),
            None
        );
        assert_eq!(
            message(json!([custom("a", true), search])),
            None,
            "the search tool is loaded"
        );
        assert!(message(json!([custom("a", false), custom("b", true)]))
            .unwrap()
            .contains("require a tool search tool"));
        let mut deferred_search = search.clone();
        deferred_search["defer_loading"] = json!(true);
        assert!(message(json!([custom("a", true), deferred_search]))
            .unwrap()
            .contains("cannot have defer_loading"));
        assert_eq!(message(json!([custom("a", false)])), None);
    }

    #[test]
    fn strict_tools_are_held_to_strict_mode() {
        let closed = json!({"type": "object", "properties": {"a": {"type": "string"}},
                            "required": ["a"], "additionalProperties": false});
        let anthropic = |schema: &Value, strict: bool| {
            let body = json!({"tools": [{"name": "t", "input_schema": schema, "strict": strict}]});
            rejection(WireFormat::Anthropic, &body).map(|r| r.message)
        };
        let chat = |schema: &Value| {
            let body = json!({"tools": [{"type": "function", "function":
                {"name": "t", "parameters": schema, "strict": true}}]});
            rejection(WireFormat::OpenAiChat, &body).map(|r| r.message)
        };
        let responses = |schema: &Value| {
            let body = json!({"tools": [{"type": "function", "name": "t",
                                          "parameters": schema, "strict": true}]});
            rejection(WireFormat::OpenAiResponses, &body).map(|r| r.message)
        };
        assert_eq!(anthropic(&closed, true), None);
        assert_eq!(chat(&closed), None);
        assert_eq!(responses(&closed), None);
        let open = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(anthropic(&open, false), None, "not strict: not checked");
        assert!(anthropic(&open, true)
            .unwrap()
            .contains("additionalProperties"));
        assert!(chat(&open).unwrap().contains("additionalProperties"));
        let optional = json!({"type": "object", "properties": {"a": {"type": "string"}},
                              "additionalProperties": false});
        assert_eq!(anthropic(&optional, true), None);
        assert_eq!(
            responses(&optional).as_deref(),
            Some(
                "Invalid schema for function 't': In context=(), 'required' is required to be \
                  supplied and to be an array including every key in properties. Missing 'a'."
            )
        );
        let length = json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}},
                            "required": ["a"], "additionalProperties": false});
        assert_eq!(
            chat(&length).as_deref(),
            Some("Invalid schema for function 't': In context=('properties.a'), 'maxLength' is not permitted.")
        );
        assert!(anthropic(&length, true).is_some());
        let minimum = json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}},
                             "required": ["a"], "additionalProperties": false});
        assert_eq!(chat(&minimum), None);
        assert!(anthropic(&minimum, true).unwrap().contains("minimum"));
        let nested = json!({"type": "object", "properties": {"a": {"type": "array", "items":
            {"type": "object", "properties": {}}}}, "required": ["a"], "additionalProperties": false});
        assert!(chat(&nested).unwrap().contains("'properties.a', 'items'"));
        // A `$ref` beside a description: OpenAI refuses it, Anthropic takes it.
        let described = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"$ref": "#/$defs/A", "description": "An a."}}, "required": ["a"],
            "$defs": {"A": {"type": "string"}}});
        assert_eq!(
            chat(&described).as_deref(),
            Some("Invalid schema for function 't': In context=('properties.a'), $ref cannot have keywords {'description'}.")
        );
        assert_eq!(anthropic(&described, true), None);
        let bare = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
            "$defs": {"A": {"type": "string"}}});
        assert_eq!(responses(&bare), None);
        // References: local, to a definition that is there.
        let mut missing = bare.clone();
        missing["properties"]["a"]["$ref"] = json!("#/$defs/B");
        assert!(chat(&missing).unwrap().contains("top level of the schema"));
        assert!(anthropic(&missing, true)
            .unwrap()
            .contains("top level of the schema"));
        let mut remote = bare.clone();
        remote["properties"]["a"]["$ref"] = json!("https://example.com/a.json");
        assert!(chat(&remote).unwrap().contains("top level of the schema"));
        // Root recursion: OpenAI takes it, Anthropic refuses any recursion.
        let tree = json!({"type": "object", "additionalProperties": false, "required": ["kids"],
            "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}});
        assert_eq!(chat(&tree), None);
        assert!(anthropic(&tree, true).unwrap().contains("recursive"));
        let cycle = json!({"type": "object", "additionalProperties": false, "required": ["n"],
            "properties": {"n": {"$ref": "#/$defs/N"}},
            "$defs": {"N": {"type": "object", "additionalProperties": false, "required": ["m"],
                            "properties": {"m": {"$ref": "#/$defs/M"}}},
                      "M": {"type": "array", "items": {"$ref": "#/$defs/N"}}}});
        assert_eq!(chat(&cycle), None);
        assert!(anthropic(&cycle, true).unwrap().contains("recursive"));
        assert_eq!(anthropic(&bare, true), None, "a reference is not a cycle");
    }

    #[test]
    fn openai_strict_schemas_are_held_to_the_size_limits() {
        let chat = |schema: Value| {
            let body = json!({"tools": [{"type": "function", "function":
                {"name": "t", "parameters": schema, "strict": true}}]});
            rejection(WireFormat::OpenAiChat, &body).map(|r| r.message)
        };
        let object = |properties: serde_json::Map<String, Value>| {
            let required: Vec<Value> = properties.keys().map(|k| json!(k)).collect();
            json!({"type": "object", "properties": properties, "required": required,
                   "additionalProperties": false})
        };
        let mut deep = object(serde_json::Map::new());
        for _ in 0..9 {
            deep = object([("x".to_owned(), deep)].into_iter().collect());
        }
        assert_eq!(chat(deep.clone()), None, "ten levels");
        let deeper = object([("x".to_owned(), deep)].into_iter().collect());
        assert!(chat(deeper).unwrap().contains("up to 10 levels"));
        let many = |n: usize| {
            object(
                (0..n)
                    .map(|i| (format!("p{i}"), json!({"type": "string"})))
                    .collect(),
            )
        };
        assert_eq!(chat(many(5_000)), None);
        assert!(chat(many(5_001))
            .unwrap()
            .contains("5000 object properties"));
        let values = |n: usize, len: usize| -> Vec<Value> {
            (0..n).map(|i| json!(format!("{i:0len$}"))).collect()
        };
        let enums = |a: usize, b: usize, len: usize| {
            object(
                [
                    (
                        "a".to_owned(),
                        json!({"type": "string", "enum": values(a, len)}),
                    ),
                    (
                        "b".to_owned(),
                        json!({"type": "string", "enum": values(b, len)}),
                    ),
                ]
                .into_iter()
                .collect(),
            )
        };
        assert_eq!(chat(enums(500, 500, 4)), None);
        assert!(chat(enums(500, 501, 4))
            .unwrap()
            .contains("1000 enum values"));
        assert_eq!(chat(enums(251, 0, 59)), None);
        assert!(chat(enums(251, 0, 60))
            .unwrap()
            .contains("more than 250 values"));
        let text = object(
            [(
                "c".to_owned(),
                json!({"type": "string", "const": "x".repeat(119_999)}),
            )]
            .into_iter()
            .collect(),
        );
        assert_eq!(chat(text), None);
        let text = object(
            [(
                "cc".to_owned(),
                json!({"type": "string", "const": "x".repeat(119_999)}),
            )]
            .into_iter()
            .collect(),
        );
        assert!(chat(text).unwrap().contains("total string length"));
        // Anthropic has none of these limits.
        let body = json!({"tools": [{"name": "t", "input_schema": many(5_001), "strict": true}]});
        assert_eq!(rejection(WireFormat::Anthropic, &body), None);
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
