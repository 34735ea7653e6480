//! The registry boundary's pure logic: deriving input schemas, checking tool names and
//! schemas at registration, and turning bad arguments into short messages the model can act on.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::flatten;
use super::text::{cut, quote};
use super::validator::Validator;

/// At most this many schema violations are listed in one error result.
const MAX_LISTED_ERRORS: usize = 3;
/// One violation's description is cut to this many bytes (it may quote a huge argument).
const MAX_ERROR_BYTES: usize = 300;
/// Deeper arguments are not searched for the failing field (serde_json stops at 128 too).
const MAX_LOCATE_DEPTH: usize = 128;

/// The schemars schema of `T`, shaped for a provider's tool input: no `$schema` or `title`, and a
/// top-level `"type": "object"` when the schema names no type (`true`, the schema of
/// `serde_json::Value`, becomes `{"type": "object"}`). A top-level union (`oneOf`, `anyOf`,
/// `allOf`, `$ref`) is left as it is: the registry checks arguments against it and sends the
/// model a flattened copy (see [`prepare`]).
pub(crate) fn input_schema_for<T: schemars::JsonSchema>() -> Value {
    let mut value = schemars::schema_for!(T).to_value();
    let untyped = value.get("type").is_none() && !flatten::needs_flattening(&value);
    match &mut value {
        Value::Object(map) => {
            map.remove("$schema");
            // The title is the Rust type's name: tokens that tell the model nothing.
            map.remove("title");
            if untyped {
                map.insert("type".into(), Value::from("object"));
            }
        }
        _ => value = serde_json::json!({"type": "object"}),
    }
    value
}

/// Checks a tool name against `^[a-zA-Z0-9_-]{1,64}$`, which both providers require.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !name.is_empty() && name.len() <= 64 && valid_chars {
        Ok(())
    } else {
        Err(format!(
            "invalid tool name {}: names must match ^[a-zA-Z0-9_-]{{1,64}}$ \
             (letters, digits, '_' and '-', at most 64)",
            quote(name)
        ))
    }
}

/// A tool's argument check: the tool's own schema, and for a tagged union the schema of each
/// variant, so that arguments that do not fit the variant their tag names get that variant's
/// errors rather than "not valid under any of the schemas".
pub(crate) struct InputValidator {
    whole: Validator,
    tagged: Option<TaggedValidators>,
}

struct TaggedValidators {
    /// The tag property.
    property: String,
    /// Each tag value and the schema of its variant.
    variants: Vec<(String, Validator)>,
}

/// Checks a tool's input schema and returns the schema to send to the model with the
/// validator for its arguments.
///
/// The schema must be an object schema, or a top-level union of object schemas: such a union
/// (which Anthropic rejects at the top level) is sent flattened into one object schema, and
/// arguments are still checked against the schema as written (see `flatten`).
pub(crate) fn prepare(name: &str, schema: Value) -> Result<(Value, InputValidator), String> {
    let compile = |schema: &Value| {
        Validator::new(schema).map_err(|e| {
            format!(
                "tool {}: invalid input schema: {}",
                quote(name),
                cut(e, MAX_ERROR_BYTES)
            )
        })
    };
    if flatten::needs_flattening(&schema) {
        let whole = compile(&schema)?;
        let flattened = flatten::flatten(&schema)
            .map_err(|reason| format!("tool {}: {reason}", quote(name)))?;
        // The sent schema must itself be valid (and an object schema) for the providers.
        compile(&flattened.schema)?;
        let tagged = match flattened.tag {
            Some(tag) => Some(TaggedValidators {
                property: tag.property,
                variants: tag
                    .variants
                    .iter()
                    .map(|(value, schema)| Ok((value.clone(), compile(schema)?)))
                    .collect::<Result<_, String>>()?,
            }),
            None => None,
        };
        return Ok((flattened.schema, InputValidator { whole, tagged }));
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        found => {
            let found = found.map_or_else(|| "no \"type\"".to_owned(), |t| format!("type {t}"));
            return Err(format!(
                "tool {}: the input schema must describe a JSON object (\"type\": \"object\"), \
                 found {found}; both providers require an object input. Use a struct as the \
                 tool's Input, or wrap the value in a struct field (struct Input {{ value: \
                 YourType }})",
                quote(name)
            ));
        }
    }
    let whole = compile(&schema)?;
    Ok((
        schema,
        InputValidator {
            whole,
            tagged: None,
        },
    ))
}

/// Parses raw argument text; whitespace-only text is an empty object (OpenAI-compatible
/// servers send `""` for tools without parameters).
pub(crate) fn parse_raw(raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(raw).map_err(|e| format!("not valid JSON ({e})"))
}

/// `invalid arguments for tool "name": detail`.
pub(crate) fn invalid_arguments(tool: &str, detail: &str) -> String {
    format!("invalid arguments for tool {}: {detail}", quote(tool))
}

/// Checks arguments against the tool's schema; the error lists the first violations, each
/// with its JSON pointer. For a tagged union the violations are those of the variant the tag
/// names, or a note that the tag is missing or names no variant.
pub(crate) fn check_arguments(validator: &InputValidator, input: &Value) -> Result<(), String> {
    if validator.whole.is_valid(input) {
        return Ok(());
    }
    if let Some(tagged) = &validator.tagged {
        let property = Value::from(tagged.property.as_str());
        let names = || {
            let values: Vec<String> = tagged
                .variants
                .iter()
                .map(|(value, _)| Value::from(value.as_str()).to_string())
                .collect();
            values.join(", ")
        };
        match input.get(&tagged.property) {
            None if input.is_object() => {
                return Err(format!(
                    "{property} is a required property; it selects the form of the input: one \
                     of {}",
                    names()
                ))
            }
            Some(found) => {
                let variant = tagged
                    .variants
                    .iter()
                    .find(|(value, _)| found.as_str() == Some(value.as_str()));
                let Some((value, variant)) = variant else {
                    return Err(at(
                        &format!("/{}", tagged.property.replace('~', "~0").replace('/', "~1")),
                        format!(
                            "{} is not one of {}",
                            cut(found.to_string(), MAX_ERROR_BYTES),
                            names()
                        ),
                    ));
                };
                if let Err(message) = list_errors(variant, input) {
                    return Err(format!(
                        "with {property} = {}: {message}",
                        Value::from(value.as_str())
                    ));
                }
            }
            None => {}
        }
    }
    list_errors(&validator.whole, input)?;
    Err("the arguments do not match the tool's input schema".to_owned())
}

/// Drops the `null`s a strict OpenAI tool call carries for optional properties (made nullable
/// in its strict schema) where the tool's own schema does not take `null`, so the call is
/// checked and deserialized as if they were absent. Follows `properties` only; `None` when
/// nothing was dropped.
pub(crate) fn drop_optional_nulls(schema: &Value, input: &Value) -> Option<Value> {
    let mut out = input.clone();
    dropped(schema, &mut out, 0).then_some(out)
}

fn dropped(schema: &Value, input: &mut Value, depth: usize) -> bool {
    if depth > MAX_LOCATE_DEPTH {
        return false;
    }
    let (Some(properties), Some(object)) = (
        schema.get("properties").and_then(Value::as_object),
        input.as_object_mut(),
    ) else {
        return false;
    };
    let required: std::collections::BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut changed = false;
    object.retain(|name, value| {
        let Some(property) = properties.get(name) else {
            return true;
        };
        if value.is_null() && !required.contains(name.as_str()) && !takes_null(property) {
            changed = true;
            return false;
        }
        changed |= dropped(property, value, depth + 1);
        true
    });
    changed
}

/// Whether a schema plainly accepts `null` (its type, its enum, or an `anyOf` branch).
fn takes_null(schema: &Value) -> bool {
    schema.get("type").is_some_and(|t| match t {
        Value::String(s) => s == "null",
        Value::Array(list) => list.iter().any(|v| v.as_str() == Some("null")),
        _ => false,
    }) || schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|v| v.contains(&Value::Null))
        || schema.get("const").is_some_and(Value::is_null)
        || ["anyOf", "oneOf"].iter().any(|k| {
            schema
                .get(*k)
                .and_then(Value::as_array)
                .is_some_and(|list| list.iter().any(takes_null))
        })
        || !schema.is_object()
        || schema.as_object().is_some_and(serde_json::Map::is_empty)
}

/// The first violations of `validator` by `input`, each with its JSON pointer.
fn list_errors(validator: &Validator, input: &Value) -> Result<(), String> {
    let mut listed = Vec::new();
    let mut total = 0usize;
    for violation in validator.violations(input) {
        total += 1;
        if listed.len() < MAX_LISTED_ERRORS {
            listed.push(at(
                &violation.pointer,
                cut(violation.message, MAX_ERROR_BYTES),
            ));
        }
    }
    if total == 0 {
        return Ok(());
    }
    let mut message = listed.join("; ");
    if total > listed.len() {
        message.push_str(&format!(" (and {} more)", total - listed.len()));
    }
    Err(message)
}

/// Deserializes arguments into a tool's input type; the error names the failing field's
/// JSON pointer and what was expected.
pub(crate) fn deserialize<T: DeserializeOwned>(input: &Value) -> Result<T, String> {
    match T::deserialize(input) {
        Ok(value) => Ok(value),
        Err(error) => {
            let message = cut(error.to_string(), MAX_ERROR_BYTES);
            Err(at(&locate::<T>(input), message))
        }
    }
}

/// Finds the JSON pointer of the value a deserialization error is about: serde_json reports
/// only a line and column, so the arguments are written out compactly, parsed again, and the
/// error's column is mapped back to the innermost value spanning it.
fn locate<T: DeserializeOwned>(input: &Value) -> String {
    let Ok(text) = serde_json::to_string(input) else {
        return String::new();
    };
    let Err(error) = serde_json::from_str::<T>(&text) else {
        return String::new();
    };
    if error.line() != 1 || error.column() == 0 {
        return String::new();
    }
    // serde_json's column is 1-based and points at the last byte it read.
    let mut locator = Locator {
        text: text.as_bytes(),
        pos: 0,
        target: error.column() - 1,
        path: Vec::new(),
        found: None,
    };
    locator.value(0);
    locator.found.unwrap_or_default()
}

/// Walks compact JSON (as written by `serde_json::to_string`: no whitespace) keeping the path
/// to the current value; records the pointer of the innermost value whose bytes include
/// `target`. Children are finished before their parent, so the first match is the innermost.
struct Locator<'a> {
    text: &'a [u8],
    pos: usize,
    target: usize,
    path: Vec<String>,
    found: Option<String>,
}

impl Locator<'_> {
    /// Steps over one value starting at `pos`; `None` stops the walk (match found, or text
    /// not in the expected shape).
    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_LOCATE_DEPTH {
            return None;
        }
        let start = self.pos;
        match *self.text.get(self.pos)? {
            b'{' => {
                self.pos += 1;
                if self.peek()? == b'}' {
                    self.pos += 1;
                } else {
                    loop {
                        let key_start = self.pos;
                        self.string()?;
                        let key: String =
                            serde_json::from_slice(self.text.get(key_start..self.pos)?).ok()?;
                        if self.peek()? != b':' {
                            return None;
                        }
                        self.pos += 1;
                        self.path.push(key);
                        self.value(depth + 1)?;
                        self.path.pop();
                        if !self.separator(b'}')? {
                            break;
                        }
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                if self.peek()? == b']' {
                    self.pos += 1;
                } else {
                    let mut index = 0usize;
                    loop {
                        self.path.push(index.to_string());
                        self.value(depth + 1)?;
                        self.path.pop();
                        index += 1;
                        if !self.separator(b']')? {
                            break;
                        }
                    }
                }
            }
            b'"' => self.string()?,
            _ => {
                while let Some(&b) = self.text.get(self.pos) {
                    if matches!(b, b',' | b'}' | b']') {
                        break;
                    }
                    self.pos += 1;
                }
            }
        }
        if start <= self.target && self.target < self.pos {
            let mut pointer = String::new();
            for segment in &self.path {
                pointer.push('/');
                pointer.push_str(&segment.replace('~', "~0").replace('/', "~1"));
            }
            self.found = Some(pointer);
            return None;
        }
        Some(())
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// After a member: `,` continues (true), `close` ends the container (false).
    fn separator(&mut self, close: u8) -> Option<bool> {
        let b = self.peek()?;
        self.pos += 1;
        if b == b',' {
            Some(true)
        } else if b == close {
            Some(false)
        } else {
            None
        }
    }

    /// Steps over a string literal starting at `pos`.
    fn string(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.pos += 1;
        loop {
            match self.peek()? {
                b'\\' => self.pos += 2,
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => self.pos += 1,
            }
        }
    }
}

/// `at /a/b: message`, or just the message for the root.
fn at(pointer: &str, message: String) -> String {
    if pointer.is_empty() {
        message
    } else {
        format!("at {pointer}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, serde::Serialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        n: u32,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: String,
        items: Vec<Inner>,
        #[serde(default)]
        weird_key: Option<std::collections::BTreeMap<String, Inner>>,
    }

    fn err(input: Value) -> String {
        deserialize::<Outer>(&input).unwrap_err()
    }

    #[test]
    fn deserialization_errors_name_the_field() {
        assert_eq!(
            err(json!({"name": 5, "items": []})),
            "at /name: invalid type: integer `5`, expected a string"
        );
        assert_eq!(
            err(json!({"name": "a", "items": [{"n": 1}, {"n": -1}]})),
            "at /items/1/n: invalid value: integer `-1`, expected u32"
        );
        assert_eq!(
            err(json!({"name": "a", "items": [{"n": 1}, {}]})),
            "at /items/1: missing field `n`"
        );
        assert_eq!(
            err(json!({"name": "a", "items": [], "weird_key": {"a/b~c": {"n": "x"}}})),
            "at /weird_key/a~1b~0c/n: invalid type: string \"x\", expected u32"
        );
        assert_eq!(err(json!({"items": []})), "missing field `name`");
        assert!(
            err(json!({"name": "a", "items": [], "extra": 1})).starts_with("unknown field `extra`")
        );
        assert_eq!(
            err(json!([1])),
            "at /0: invalid type: integer `1`, expected a string"
        );
        assert_eq!(
            err(json!("x")),
            "invalid type: string \"x\", expected struct Outer"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("read_file-2").is_ok());
        assert!(check_name(&"a".repeat(64)).is_ok());
        assert!(check_name(&"a".repeat(65)).is_err());
        assert!(check_name("").is_err());
        assert!(check_name("has space").is_err());
        assert!(check_name("dotted.name").is_err());
        assert!(check_name("ünï").is_err());
    }

    #[test]
    fn cut_respects_char_boundaries() {
        assert_eq!(cut("héllo".into(), 2), "h…");
        assert_eq!(cut("abc".into(), 3), "abc");
    }

    #[test]
    fn empty_raw_arguments_are_an_empty_object() {
        assert_eq!(parse_raw("  "), Ok(json!({})));
        assert!(parse_raw("{\"a\":")
            .unwrap_err()
            .starts_with("not valid JSON ("));
    }

    #[test]
    fn value_input_gets_an_object_schema() {
        assert_eq!(input_schema_for::<Value>(), json!({"type": "object"}));
    }

    /// An operation on a file (serde's internally tagged enum: a top-level oneOf).
    #[derive(Debug, Deserialize, serde::Serialize, schemars::JsonSchema)]
    #[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
    enum FileOp {
        /// Reads a file.
        Read { path: String, offset: Option<u32> },
        /// Deletes files.
        Delete { paths: Vec<String> },
        /// Wraps a struct.
        Stat(Inner),
    }

    fn prepared<T: schemars::JsonSchema>() -> Result<(Value, InputValidator), String> {
        prepare("t", input_schema_for::<T>())
    }

    #[test]
    fn tagged_enums_are_sent_flat_and_checked_per_variant() {
        let (sent, validator) = prepared::<FileOp>().unwrap();
        for keyword in ["oneOf", "anyOf", "allOf"] {
            assert!(sent.get(keyword).is_none(), "{sent:#}");
        }
        assert_eq!(sent["type"], "object");
        assert_eq!(
            sent["properties"]["op"],
            json!({"type": "string", "enum": ["read", "delete", "stat"]})
        );
        assert_eq!(sent["required"], json!(["op"]));
        let description = sent["description"].as_str().unwrap();
        assert!(
            description.contains("- \"read\": path, offset (optional). Reads a file."),
            "{description}"
        );

        for input in [
            FileOp::Read {
                path: "a".into(),
                offset: None,
            },
            FileOp::Delete {
                paths: vec!["a".into()],
            },
            FileOp::Stat(Inner { n: 3 }),
        ] {
            let input = serde_json::to_value(input).unwrap();
            assert_eq!(check_arguments(&validator, &input), Ok(()), "{input}");
            assert!(deserialize::<FileOp>(&input).is_ok());
        }
        // The fields of another variant: the error is about the variant the tag names.
        assert_eq!(
            check_arguments(&validator, &json!({"op": "read", "paths": ["a"]})).unwrap_err(),
            "with \"op\" = \"read\": \"path\" is a required property; \
             Additional properties are not allowed ('paths' was unexpected)"
        );
        assert_eq!(
            check_arguments(&validator, &json!({"op": "stat", "n": "x"})).unwrap_err(),
            "with \"op\" = \"stat\": at /n: \"x\" is not of type \"integer\""
        );
        assert_eq!(
            check_arguments(&validator, &json!({"op": "move"})).unwrap_err(),
            "at /op: \"move\" is not one of \"read\", \"delete\", \"stat\""
        );
        assert_eq!(
            check_arguments(&validator, &json!({"path": "a"})).unwrap_err(),
            "\"op\" is a required property; it selects the form of the input: one of \
             \"read\", \"delete\", \"stat\""
        );
        assert!(check_arguments(&validator, &json!([1])).is_err());
    }

    #[test]
    fn inputs_that_are_not_objects_are_refused() {
        #[derive(Deserialize, schemars::JsonSchema)]
        #[serde(untagged)]
        #[allow(dead_code)]
        enum Scalar {
            Text(String),
            Number(i64),
        }
        #[derive(Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        enum External {
            Unit,
            Named { a: u32 },
        }
        for error in [
            prepared::<String>().err().unwrap(),
            prepared::<Vec<u32>>().err().unwrap(),
            prepared::<Scalar>().err().unwrap(),
            prepared::<External>().err().unwrap(),
        ] {
            assert!(error.starts_with("tool \"t\": "), "{error}");
            assert!(
                error.contains("wrap the value in a struct field"),
                "{error}"
            );
        }
        assert!(prepared::<String>()
            .err()
            .unwrap()
            .contains("found type \"string\""));
        // Option<Struct>: the null alternative is dropped; the model always sends an object.
        let (sent, validator) = prepared::<Option<Inner>>().unwrap();
        assert_eq!(sent["required"], json!(["n"]));
        assert!(check_arguments(&validator, &json!({"n": 1})).is_ok());
        assert!(check_arguments(&validator, &json!({"n": -1})).is_err());
    }
    #[test]
    fn optional_nulls_are_dropped_where_the_schema_takes_no_null() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": ["string", "null"]},
            "c": {"type": "string"},
            "o": {"type": "object", "properties": {"d": {"type": "integer"}}}
        }, "required": ["c"]});
        let input = serde_json::json!({"a": null, "b": null, "c": null, "o": {"d": null}});
        assert_eq!(
            drop_optional_nulls(&schema, &input),
            Some(serde_json::json!({"b": null, "c": null, "o": {}}))
        );
        assert_eq!(
            drop_optional_nulls(&schema, &serde_json::json!({"a": "x"})),
            None
        );
    }
}
