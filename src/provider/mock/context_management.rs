//! What Anthropic refuses in a request's `context_management` (context editing), as the
//! anthropic SDK's `BetaContextManagementConfigParam` types it and the API enforces it:
//!
//! - `context_management` without the `anthropic-beta: context-management-2025-06-27` header
//!   (the field is a beta one);
//! - anything but an object whose only key is `edits`, a list;
//! - an edit that is not an object, has no `type`, or a `type` that is not
//!   `clear_tool_uses_20250919` or `clear_thinking_20251015`; the same type twice;
//! - a key an edit type does not take; a `trigger` that is not `{type: "input_tokens" |
//!   "tool_uses", value: n ≥ 1}`, a `keep` of tool uses that is not `{type: "tool_uses",
//!   value: n ≥ 0}`, a `clear_at_least` that is not `{type: "input_tokens", value: n ≥ 0}`,
//!   `exclude_tools` that is not a list of strings, `clear_tool_inputs` that is not a boolean
//!   or a list of strings;
//! - a thinking `keep` that is not `"all"`, `{type: "all"}` or `{type: "thinking_turns",
//!   value: n ≥ 1}`; the thinking edit not first in `edits`; the thinking edit without
//!   extended thinking on (`thinking.type` `enabled`).

use serde_json::Value;

use crate::provider::context_editing::{
    BETA, CLEAR_THINKING, CLEAR_TOOL_USES, COMPACT, COMPACT_BETA,
};

use super::Rejection;

/// The 400 the API answers an Anthropic request's `context_management` with, if any.
pub(crate) fn rejection(body: &Value, headers: &[(String, String)]) -> Option<Rejection> {
    let managed = body.get("context_management")?;
    let refuse = |message: String| {
        Some(Rejection {
            error_type: "invalid_request_error",
            code: None,
            message,
        })
    };
    let has = |beta: &str| {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("anthropic-beta"))
            .any(|(_, v)| v.split(',').any(|b| b.trim() == beta))
    };
    if !has(BETA) && !has(COMPACT_BETA) {
        return refuse("context_management: Extra inputs are not permitted".to_owned());
    }
    // Each edit type needs its own beta.
    let kinds = managed
        .get("edits")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.get("type").and_then(Value::as_str));
    for kind in kinds {
        let beta = if kind == COMPACT { COMPACT_BETA } else { BETA };
        if !has(beta) && [COMPACT, CLEAR_THINKING, CLEAR_TOOL_USES].contains(&kind) {
            return refuse(format!(
                "context_management: {kind} needs the anthropic-beta header {beta}"
            ));
        }
    }
    match check(managed, body) {
        Ok(()) => None,
        Err(message) => refuse(format!("context_management: {message}")),
    }
}

fn check(managed: &Value, body: &Value) -> Result<(), String> {
    let object = managed.as_object().ok_or("must be an object")?;
    if let Some(key) = object.keys().find(|k| *k != "edits") {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    let Some(edits) = object.get("edits") else {
        return Ok(());
    };
    let edits = edits
        .as_array()
        .ok_or("edits: Input should be a valid list")?;
    let mut seen = Vec::new();
    for (i, edit) in edits.iter().enumerate() {
        let at = format!("edits.{i}");
        let edit = edit
            .as_object()
            .ok_or(format!("{at}: Input should be an object"))?;
        let kind = edit
            .get("type")
            .ok_or(format!("{at}.type: Field required"))?
            .as_str()
            .ok_or(format!("{at}.type: Input should be a valid string"))?;
        if seen.contains(&kind) {
            return Err(format!("{at}: duplicate edit type {kind}"));
        }
        seen.push(kind);
        let allowed: &[&str] = match kind {
            CLEAR_TOOL_USES => &[
                "type",
                "trigger",
                "keep",
                "clear_at_least",
                "exclude_tools",
                "clear_tool_inputs",
            ],
            CLEAR_THINKING => &["type", "keep"],
            COMPACT => &["type", "trigger", "instructions", "pause_after_compaction"],
            other => {
                return Err(format!(
                    "{at}.type: Input tag '{other}' found using 'type' does not match any of \
                     the expected tags: '{CLEAR_TOOL_USES}', '{CLEAR_THINKING}', '{COMPACT}'"
                ))
            }
        };
        if let Some(key) = edit.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!("{at}.{key}: Extra inputs are not permitted"));
        }
        if kind == CLEAR_THINKING {
            if i != 0 {
                return Err(format!(
                    "{at}: {CLEAR_THINKING} must be the first edit in edits"
                ));
            }
            let thinking_on =
                body.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
            if !thinking_on {
                return Err(format!(
                    "{at}: {CLEAR_THINKING} requires thinking to be enabled"
                ));
            }
            if let Some(keep) = edit.get("keep") {
                let ok = keep == "all"
                    || tagged(keep, &["all"], None).is_ok()
                    || tagged(keep, &["thinking_turns"], Some(1)).is_ok();
                if !ok {
                    return Err(format!(
                        "{at}.keep: expected \"all\", {{type: \"all\"}} or {{type: \
                         \"thinking_turns\", value: n >= 1}}"
                    ));
                }
            }
            continue;
        }
        if kind == COMPACT {
            if let Some(trigger) = edit.get("trigger").filter(|v| !v.is_null()) {
                tagged(trigger, &["input_tokens"], Some(1))
                    .map_err(|m| format!("{at}.trigger: {m}"))?;
            }
            if edit
                .get("instructions")
                .is_some_and(|v| !v.is_null() && !v.is_string())
            {
                return Err(format!("{at}.instructions: Input should be a valid string"));
            }
            if edit
                .get("pause_after_compaction")
                .is_some_and(|v| !v.is_boolean())
            {
                return Err(format!(
                    "{at}.pause_after_compaction: Input should be a valid boolean"
                ));
            }
            continue;
        }
        if let Some(trigger) = edit.get("trigger") {
            tagged(trigger, &["input_tokens", "tool_uses"], Some(1))
                .map_err(|m| format!("{at}.trigger: {m}"))?;
        }
        if let Some(keep) = edit.get("keep") {
            tagged(keep, &["tool_uses"], Some(0)).map_err(|m| format!("{at}.keep: {m}"))?;
        }
        if let Some(least) = edit.get("clear_at_least").filter(|v| !v.is_null()) {
            tagged(least, &["input_tokens"], Some(0))
                .map_err(|m| format!("{at}.clear_at_least: {m}"))?;
        }
        let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if let Some(tools) = edit.get("exclude_tools").filter(|v| !v.is_null()) {
            if !strings(tools) {
                return Err(format!(
                    "{at}.exclude_tools: Input should be a valid list of strings"
                ));
            }
        }
        if let Some(inputs) = edit.get("clear_tool_inputs").filter(|v| !v.is_null()) {
            if !inputs.is_boolean() && !strings(inputs) {
                return Err(format!(
                    "{at}.clear_tool_inputs: Input should be a boolean or a list of strings"
                ));
            }
        }
    }
    Ok(())
}

/// `{type: one of kinds, value: integer ≥ min}` (no `value` when `min` is `None`).
fn tagged(value: &Value, kinds: &[&str], min: Option<u64>) -> Result<(), String> {
    let object = value.as_object().ok_or("Input should be an object")?;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or("type: Field required")?;
    if !kinds.contains(&kind) {
        return Err(format!("type: Input should be one of {kinds:?}"));
    }
    let keys: &[&str] = if min.is_some() {
        &["type", "value"]
    } else {
        &["type"]
    };
    if let Some(key) = object.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!("{key}: Extra inputs are not permitted"));
    }
    if let Some(min) = min {
        let n = object
            .get("value")
            .ok_or("value: Field required")?
            .as_u64()
            .ok_or("value: Input should be a valid integer")?;
        if n < min {
            return Err(format!(
                "value: Input should be greater than or equal to {min}"
            ));
        }
    }
    Ok(())
}

/// The 400 OpenAI Responses answers a request's `context_management` or compaction input
/// items with, if any: `context_management` must be a list of `{"type": "compaction",
/// "compact_threshold": n ≥ 1 | null}` (no other type or key); an input item of type
/// `compaction` must carry a string `encrypted_content` (its `id` a string if present, no
/// other key).
pub(crate) fn responses_rejection(body: &Value) -> Option<Rejection> {
    let refuse = |message: String| {
        Some(Rejection {
            error_type: "invalid_request_error",
            code: None,
            message,
        })
    };
    if let Some(managed) = body.get("context_management").filter(|v| !v.is_null()) {
        let Some(entries) = managed.as_array() else {
            return refuse("Invalid type for 'context_management': expected an array".to_owned());
        };
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("context_management[{i}]");
            let Some(entry) = entry.as_object() else {
                return refuse(format!("Invalid type for '{at}': expected an object"));
            };
            match entry.get("type").and_then(Value::as_str) {
                Some("compaction") => {}
                Some(other) => {
                    return refuse(format!(
                        "Invalid value for '{at}.type': '{other}'; only 'compaction' is supported"
                    ))
                }
                None => return refuse(format!("Missing required parameter: '{at}.type'")),
            }
            if let Some(key) = entry
                .keys()
                .find(|k| !matches!(k.as_str(), "type" | "compact_threshold"))
            {
                return refuse(format!("Unknown parameter: '{at}.{key}'"));
            }
            let threshold = entry.get("compact_threshold").filter(|v| !v.is_null());
            if threshold.is_some_and(|t| t.as_u64().is_none_or(|n| n == 0)) {
                return refuse(format!(
                    "Invalid value for '{at}.compact_threshold': expected a positive integer"
                ));
            }
        }
    }
    let items = body.get("input").and_then(Value::as_array)?;
    for (i, item) in items.iter().enumerate() {
        if item.get("type").and_then(Value::as_str) != Some("compaction") {
            continue;
        }
        let at = format!("input[{i}]");
        if !item.get("encrypted_content").is_some_and(Value::is_string) {
            return refuse(format!(
                "Missing required parameter: '{at}.encrypted_content'"
            ));
        }
        if item
            .get("id")
            .is_some_and(|id| !id.is_string() && !id.is_null())
        {
            return refuse(format!("Invalid type for '{at}.id': expected a string"));
        }
        let known = |k: &String| matches!(k.as_str(), "type" | "id" | "encrypted_content");
        if let Some(key) = item.as_object().and_then(|o| o.keys().find(|k| !known(k))) {
            return refuse(format!("Unknown parameter: '{at}.{key}'"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn beta() -> Vec<(String, String)> {
        vec![("anthropic-beta".into(), format!("other-beta, {BETA}"))]
    }

    fn refused(managed: Value, thinking: bool) -> bool {
        let mut body = json!({"model": "m", "context_management": managed});
        if thinking {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        }
        rejection(&body, &beta()).is_some()
    }

    #[test]
    fn the_documented_shapes_pass_and_the_rest_is_refused() {
        let full = json!({"edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            {"type": "clear_tool_uses_20250919",
             "trigger": {"type": "input_tokens", "value": 30000},
             "keep": {"type": "tool_uses", "value": 3},
             "clear_at_least": {"type": "input_tokens", "value": 5000},
             "exclude_tools": ["web_search"],
             "clear_tool_inputs": true},
        ]});
        assert!(!refused(full.clone(), true));
        assert!(!refused(
            json!({"edits": [{"type": "clear_tool_uses_20250919"}]}),
            false
        ));
        assert!(!refused(
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
            true
        ));
        // Without the beta header.
        let body = json!({"context_management": {"edits": []}});
        assert!(rejection(&body, &[]).is_some());
        // Server compaction, with its own beta.
        let compact = json!({"model": "m", "context_management": {"edits": [
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50000}}]}});
        let compact_beta = vec![("anthropic-beta".to_owned(), COMPACT_BETA.to_owned())];
        assert!(rejection(&compact, &compact_beta).is_none());
        assert!(rejection(&compact, &beta()).is_some());
        assert!(refused(
            json!({"edits": [{"type": "compact_20260112", "keep": 1}]}),
            false
        ));
        for bad in [
            json!([]),
            json!({"edits": {}}),
            json!({"edits": [], "other": 1}),
            json!({"edits": [{}]}),
            json!({"edits": [{"type": "clear_everything"}]}),
            json!({"edits": [{"type": 7}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_tool_uses_20250919"}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"value": 5}}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 0}}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "turns", "value": 5}}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "input_tokens", "value": 5}}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": "x"}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "clear_tool_inputs": 1}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919", "bogus": 1}]}),
            json!({"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}]}),
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}]}),
        ] {
            assert!(refused(bad.clone(), true), "{bad}");
        }
        // The thinking edit needs thinking on.
        assert!(refused(
            json!({"edits": [{"type": "clear_thinking_20251015"}]}),
            false
        ));
    }

    #[test]
    fn responses_compaction_is_held_to_its_shape() {
        let ok = |body: Value| responses_rejection(&body).is_none();
        assert!(ok(
            json!({"context_management": [{"type": "compaction", "compact_threshold": 1000}]})
        ));
        assert!(ok(json!({"context_management": [{"type": "compaction"}]})));
        assert!(ok(
            json!({"input": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "e"}]})
        ));
        for bad in [
            json!({"context_management": {"type": "compaction"}}),
            json!({"context_management": [{"type": "clear_tool_uses"}]}),
            json!({"context_management": [{"compact_threshold": 5}]}),
            json!({"context_management": [{"type": "compaction", "compact_threshold": 0}]}),
            json!({"context_management": [{"type": "compaction", "compact_threshold": "5"}]}),
            json!({"context_management": [{"type": "compaction", "keep": 5}]}),
            json!({"input": [{"type": "compaction", "id": "cmp_1"}]}),
            json!({"input": [{"type": "compaction", "encrypted_content": "e", "created_by": "x"}]}),
        ] {
            assert!(!ok(bad.clone()), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_json_is_judged_without_panicking(text in ".{0,64}", n in any::<i64>()) {
            for managed in [
                json!({"edits": [{"type": text, "trigger": {"type": text, "value": n}}]}),
                json!({"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": n}}]}),
                json!(text),
            ] {
                let _ = refused(managed.clone(), n % 2 == 0);
                let _ = responses_rejection(&json!({"context_management": [managed.clone()],
                                                    "input": [{"type": "compaction", "id": managed}]}));
            }
        }
    }
}
