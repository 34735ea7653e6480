//! The digest of a call waiting in a pause: what was asked (call id, tool name, arguments),
//! so that an answer given for one call is never applied to another that only shares its id
//! (a session rewound and asked again, another branch of a forked session).
//!
//! The digest is `sha256:` and the lowercase hex SHA-256 of the canonical JSON of the array
//! `[id, name, arguments]`: object keys sorted (by their UTF-8 bytes), no whitespace, strings
//! escaped as `serde_json` escapes them, numbers as `serde_json` writes them. The same call
//! has the same digest in every process and every build; any change of id, name or an
//! argument changes it. A call whose tool asked a question has the question (prompt, answer
//! schema, data, as JSON) as a fourth element.

use sha2::{Digest, Sha256};

/// The digest's prefix: the hash it names.
const PREFIX: &str = "sha256:";

/// The digest of the call `id` of the tool `name` with `input` (see the module's docs).
pub(crate) fn call_digest(id: &str, name: &str, input: &serde_json::Value) -> String {
    digest_of(id, name, input, None)
}

/// The digest of a call whose tool asked `question` ([`ToolError::ask`](crate::ToolError::ask)):
/// the canonical JSON of `[id, name, arguments, question]`, so that an answer given to one
/// question is never applied to another the same call asks later.
pub(crate) fn asked_digest(
    id: &str,
    name: &str,
    input: &serde_json::Value,
    question: &crate::tool::Question,
) -> String {
    let question = serde_json::to_value(question).unwrap_or_default();
    digest_of(id, name, input, Some(&question))
}

fn digest_of(
    id: &str,
    name: &str,
    input: &serde_json::Value,
    question: Option<&serde_json::Value>,
) -> String {
    let mut canonical = String::new();
    canonical.push('[');
    write_canonical(&mut canonical, &serde_json::Value::String(id.to_owned()));
    canonical.push(',');
    write_canonical(&mut canonical, &serde_json::Value::String(name.to_owned()));
    canonical.push(',');
    write_canonical(&mut canonical, input);
    if let Some(question) = question {
        canonical.push(',');
        write_canonical(&mut canonical, question);
    }
    canonical.push(']');
    let hash = Sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(PREFIX.len() + 64);
    out.push_str(PREFIX);
    for byte in hash {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `value` as canonical JSON: keys sorted, no whitespace. Iterative, so that deeply
/// nested arguments cannot overflow the stack. Also the repeated-call guard's comparison
/// (`counters.rs`): equal inputs are equal whatever their keys' order.
pub(super) fn write_canonical(out: &mut String, value: &serde_json::Value) {
    enum Step<'a> {
        Value(&'a serde_json::Value),
        Text(&'static str),
        Key(&'a str),
    }
    let mut stack = vec![Step::Value(value)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Text(text) => out.push_str(text),
            Step::Key(key) => {
                push_string(out, key);
                out.push(':');
            }
            Step::Value(serde_json::Value::Array(items)) => {
                out.push('[');
                stack.push(Step::Text("]"));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Step::Value(item));
                    if i > 0 {
                        stack.push(Step::Text(","));
                    }
                }
            }
            Step::Value(serde_json::Value::Object(map)) => {
                out.push('{');
                stack.push(Step::Text("}"));
                let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                for (i, (key, item)) in entries.into_iter().enumerate().rev() {
                    stack.push(Step::Value(item));
                    stack.push(Step::Key(key));
                    if i > 0 {
                        stack.push(Step::Text(","));
                    }
                }
            }
            Step::Value(serde_json::Value::String(s)) => push_string(out, s),
            // Null, booleans and numbers as serde_json writes them.
            Step::Value(other) => out.push_str(&other.to_string()),
        }
    }
}

fn push_string(out: &mut String, s: &str) {
    // Serializing a string cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canonical(value: &serde_json::Value) -> String {
        let mut out = String::new();
        write_canonical(&mut out, value);
        out
    }

    #[test]
    fn the_canonical_form_sorts_keys_and_has_no_whitespace() {
        let value = json!({"b": [1, {"z": null, "a": true}], "a": "x\"y", "é": 1.5});
        assert_eq!(
            canonical(&value),
            r#"{"a":"x\"y","b":[1,{"a":true,"z":null}],"é":1.5}"#
        );
        assert_eq!(canonical(&json!([])), "[]");
        assert_eq!(canonical(&json!({})), "{}");
    }

    #[test]
    fn a_digest_is_stable_across_builds() {
        // Fixed here (computed apart: Python's hashlib over the canonical text): a change of
        // the canonical form or the hash breaks every stored pause.
        let digest = call_digest("c1", "delete", &json!({"path": "a.txt"}));
        assert_eq!(
            digest,
            "sha256:fa7473fd72b0d01792437fbe7e2be867d65c790aa272b78934cb685d41c4f4bd"
        );
    }

    #[test]
    fn deep_arguments_do_not_overflow_the_stack() {
        let mut value = json!(0);
        for _ in 0..100_000 {
            value = serde_json::Value::Array(vec![value]);
        }
        assert!(call_digest("c", "t", &value).starts_with(PREFIX));
        // Dropping so deep a value recursively is serde_json's own limit; leak it instead.
        std::mem::forget(value);
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z\"\\\\é ]{0,6}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-d]{1,2}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The object with its keys inserted in reverse order (where the map keeps order).
    fn reordered(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.iter()
                    .rev()
                    .map(|(k, v)| (k.clone(), reordered(v)))
                    .collect(),
            ),
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(reordered).collect())
            }
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn the_digest_depends_on_what_was_asked_not_on_key_order(
            input in json_value(),
            other in json_value(),
            id in "[a-z0-9]{1,8}",
            name in "[a-z_]{1,8}",
        ) {
            let digest = call_digest(&id, &name, &input);
            prop_assert_eq!(&digest, &call_digest(&id, &name, &reordered(&input)));
            // The canonical form reads back as the same value.
            let back: serde_json::Value = serde_json::from_str(&canonical(&input)).unwrap();
            prop_assert_eq!(&back, &input);
            prop_assert_ne!(&digest, &call_digest(&format!("{id}x"), &name, &input));
            prop_assert_ne!(&digest, &call_digest(&id, &format!("{name}x"), &input));
            if other != input {
                prop_assert_ne!(&digest, &call_digest(&id, &name, &other));
            }
        }
    }
}
