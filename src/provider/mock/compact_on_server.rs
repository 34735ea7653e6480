//! The mock's `POST {prefix}/responses/compact` (OpenAI Responses compaction on request): it
//! refuses what the real endpoint refuses and compacts as the real one answers, without using
//! the script.
//!
//! The request is the official SDK's `ResponseCompactParams`: `model` is required, `input`
//! holds the conversation's items (checked as `/responses` checks them), and no other field
//! than the documented ones is allowed (no `stream`, `tools`, `max_output_tokens` …). The
//! answer is a `CompactedResponse`: every user message of `input`, then one `compaction` item
//! whose `encrypted_content` names the request (`mock-compaction-{n}`), and the usage.

use serde_json::{json, Map, Value};

/// The fields `ResponseCompactParams` defines.
const FIELDS: [&str; 10] = [
    "model",
    "input",
    "instructions",
    "previous_response_id",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "image",
];

/// Whether `route` (a path without its query) is `{prefix}/responses/compact`, and whether the
/// real API serves it there (the prefix holds neither segment, no segment is empty or
/// repeated next to itself, as `/v1/v1/…` from a base URL that already holds the version).
pub(crate) fn route(route: &str) -> Option<bool> {
    let path = route.strip_suffix("/responses/compact")?;
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    Some(
        route.starts_with('/')
            && segments
                .iter()
                .all(|s| !s.is_empty() && *s != "responses" && *s != "compact")
            && segments.windows(2).all(|w| w[0] != w[1]),
    )
}

/// The status and JSON body answering request `number`; `violation` is what the history
/// check of `input` found, if anything.
pub(crate) fn answer(
    method: &str,
    body: &Value,
    violation: Option<String>,
    number: usize,
) -> (u16, Value) {
    let refuse = |status: u16, message: String| {
        (
            status,
            json!({"error": {"type": "invalid_request_error", "message": message,
                             "param": null, "code": null}}),
        )
    };
    if method != "POST" {
        return refuse(
            405,
            format!("{method} is not allowed on /responses/compact"),
        );
    }
    let Some(object) = body.as_object() else {
        return refuse(400, "the body must be a JSON object".to_owned());
    };
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return refuse(400, format!("Unknown parameter: '{unknown}'."));
    }
    if !object.get("model").is_some_and(Value::is_string) {
        return refuse(400, "Missing required parameter: 'model'.".to_owned());
    }
    let items = match object.get("input") {
        Some(Value::Array(items)) if !items.is_empty() => items.clone(),
        Some(Value::String(text)) if !text.is_empty() => {
            vec![json!({"type": "message", "role": "user", "content": text})]
        }
        _ => {
            return refuse(
                400,
                "'input' must be a non-empty string or list of items.".into(),
            )
        }
    };
    if object
        .get("instructions")
        .is_some_and(|i| !i.is_string() && !i.is_null())
    {
        return refuse(400, "'instructions' must be a string.".to_owned());
    }
    if let Some(violation) = violation {
        return refuse(
            400,
            format!("MockServer: the provider refuses this history: {violation}"),
        );
    }
    if let Some(rejection) = super::context_management::responses_rejection(body) {
        return refuse(400, rejection.message);
    }
    let mut output: Vec<Value> = items
        .iter()
        .filter(|item| {
            item.get("type")
                .and_then(Value::as_str)
                .unwrap_or("message")
                == "message"
                && item.get("role").and_then(Value::as_str) == Some("user")
        })
        .map(|item| {
            let content = match item.get("content") {
                Some(Value::String(text)) => json!([{"type": "input_text", "text": text}]),
                Some(other) => other.clone(),
                None => json!([]),
            };
            json!({"type": "message", "role": "user", "content": content})
        })
        .collect();
    output.push(json!({
        "type": "compaction",
        "id": format!("cmp_mock_{number}"),
        "encrypted_content": format!("mock-compaction-{number}"),
    }));
    let input_tokens = body.to_string().len() as u64 / 4;
    let mut response = Map::new();
    response.insert("id".into(), json!(format!("resp_cmp_mock_{number}")));
    response.insert("object".into(), json!("response.compaction"));
    response.insert("created_at".into(), json!(1_765_000_000));
    response.insert("output".into(), Value::Array(output));
    response.insert(
        "usage".into(),
        json!({"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 64, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": input_tokens + 64}),
    );
    (200, Value::Object(response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_compact_path_is_served() {
        assert_eq!(route("/v1/responses/compact"), Some(true));
        assert_eq!(route("/openai/v1/responses/compact"), Some(true));
        assert_eq!(route("/responses/compact"), Some(true));
        assert_eq!(route("/v1/responses/responses/compact"), Some(false));
        assert_eq!(route("/v1//responses/compact"), Some(false));
        assert_eq!(route("/v1/v1/responses/compact"), Some(false));
        assert_eq!(route("/v1/responses"), None);
        assert_eq!(route("/v1/responses/compactx"), None);
    }

    #[test]
    fn what_the_endpoint_refuses() {
        let ok = json!({"model": "m", "input": [{"role": "user", "content": "hi"}]});
        assert_eq!(answer("POST", &ok, None, 1).0, 200);
        assert_eq!(answer("GET", &ok, None, 1).0, 405);
        let mut streamed = ok.clone();
        streamed["stream"] = json!(true);
        assert_eq!(answer("POST", &streamed, None, 1).0, 400);
        assert_eq!(
            answer("POST", &json!({"input": ok["input"].clone()}), None, 1).0,
            400
        );
        assert_eq!(
            answer("POST", &json!({"model": "m", "input": []}), None, 1).0,
            400
        );
        assert_eq!(answer("POST", &ok, Some("orphan".into()), 1).0, 400);
        assert_eq!(answer("POST", &json!([1]), None, 1).0, 400);
        // `instructions` is a string or null.
        let with = |instructions: Value| {
            let mut body = ok.clone();
            body["instructions"] = instructions;
            answer("POST", &body, None, 1).0
        };
        assert_eq!(with(json!("sys")), 200);
        assert_eq!(with(Value::Null), 200);
        assert_eq!(with(json!(5)), 400);
        // A string input is one user message; an empty one is refused.
        assert_eq!(
            answer("POST", &json!({"model": "m", "input": ""}), None, 1).0,
            400
        );
        let (status, out) = answer("POST", &json!({"model": "m", "input": "hi"}), None, 2);
        assert_eq!(status, 200);
        assert_eq!(
            out["output"][0],
            json!({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "hi"}]})
        );
    }

    #[test]
    fn the_answer_keeps_the_user_messages_then_one_compaction_item() {
        let body = json!({"model": "m", "instructions": "sys", "input": [
            {"type": "message", "role": "user", "content": "one"},
            {"type": "message", "role": "assistant", "content": "reply"},
            {"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "r"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "two"}]}
        ]});
        let (status, out) = answer("POST", &body, None, 3);
        assert_eq!(status, 200);
        assert_eq!(out["object"], "response.compaction");
        let output = out["output"].as_array().unwrap();
        assert_eq!(output.len(), 3);
        assert_eq!(output[0]["content"][0]["text"], "one");
        assert_eq!(output[1]["content"][0]["text"], "two");
        assert_eq!(output[2]["type"], "compaction");
        assert_eq!(output[2]["encrypted_content"], "mock-compaction-3");
        // The usage: about a token per four bytes of the request.
        let input_tokens = body.to_string().len() as u64 / 4;
        assert_eq!(out["usage"]["input_tokens"], input_tokens);
        assert_eq!(out["usage"]["total_tokens"], input_tokens + 64);
    }
}
