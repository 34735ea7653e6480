//! JSON Schema validation of tool arguments (draft 2020-12 unless the schema's `$schema` names
//! another draft), through `boon`, with each violation worded as the model reads it: the value,
//! then what the schema wanted (`"abc" is not of type "number"`, `"y" is a required property`).
//!
//! A schema is one self-contained document: a `$ref` to anything outside it (a file, a URL)
//! fails at registration, as nothing is fetched. Formats are annotations, not assertions
//! (the draft's default), and so are `contentEncoding` and `contentMediaType`.

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};

use boon::{ErrorKind, Type, ValidationError};
use serde_json::Value;

/// The name the schema is compiled under; errors and `$ref`s resolve against it.
const LOCATION: &str = "urn:agent-loop:tool-input";
/// At most this many options of an `enum` are quoted in a message.
const MAX_QUOTED_OPTIONS: usize = 3;

/// One compiled schema.
pub(crate) struct Validator {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
    /// The schema as written, for the messages that quote part of it (`not`).
    schema: Value,
}

/// One violation: the JSON pointer of the value at fault (empty for the root), and what is
/// wrong with it.
#[derive(Default)]
pub(crate) struct Violation {
    pub(crate) pointer: String,
    pub(crate) message: String,
}

/// Loads nothing: a tool's schema must not send the registry to a file or the network.
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn StdError>> {
        Err(format!(
            "{url} is outside the schema: nothing is fetched, so put what it refers to in the \
             schema's own \"$defs\""
        )
        .into())
    }
}

impl Validator {
    /// Compiles `schema`; the error says why the schema is not a valid JSON Schema.
    ///
    /// A schema may come from a peer (an MCP server's tool): a panic in the validator is
    /// caught and reported as an error, never let through.
    pub(crate) fn new(schema: &Value) -> Result<Self, String> {
        catch_unwind(AssertUnwindSafe(|| Self::compile(schema))).unwrap_or_else(|_| {
            Err("the validator failed on this schema; simplify it (a pattern, a $ref)".to_owned())
        })
    }

    fn compile(schema: &Value) -> Result<Self, String> {
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler.use_loader(Box::new(NoLoader));
        let mut schemas = boon::Schemas::new();
        compiler
            .add_resource(LOCATION, schema.clone())
            .map_err(|e| format!("{e:#}"))?;
        let index = compiler
            .compile(LOCATION, &mut schemas)
            .map_err(|e| format!("{e:#}"))?;
        Ok(Self {
            schemas,
            index,
            schema: schema.clone(),
        })
    }

    /// Arguments come from the model: a panic in the validator counts as a violation.
    pub(crate) fn is_valid(&self, input: &Value) -> bool {
        catch_unwind(AssertUnwindSafe(|| {
            self.schemas.validate(input, self.index).is_ok()
        }))
        .unwrap_or(false)
    }

    /// Every violation of the schema by `input`: the whole object's (a missing required
    /// property, an unexpected one) where the schema's keywords put them, its members' in the
    /// order of their paths (an array's by index), so that the order never depends on how
    /// serde_json orders a map (`preserve_order` or not).
    pub(crate) fn violations(&self, input: &Value) -> Vec<Violation> {
        catch_unwind(AssertUnwindSafe(|| {
            let mut out = Vec::new();
            if let Err(error) = self.schemas.validate(input, self.index) {
                self.collect(&error, input, &mut out);
            }
            in_path_order(&mut out);
            out
        }))
        .unwrap_or_else(|_| {
            vec![Violation {
                pointer: String::new(),
                message: "the arguments could not be checked against the schema (the \
                          validator failed); send them again in a simpler form"
                    .to_owned(),
            }]
        })
    }

    /// Walks the error tree: groups (a schema's several failed keywords, `$ref`, `allOf`)
    /// open into their causes; a failed `anyOf` or `oneOf` is one violation, as no single
    /// branch's errors say what was meant.
    fn collect(&self, error: &ValidationError<'_, '_>, input: &Value, out: &mut Vec<Violation>) {
        let pointer = error.instance_location.to_string();
        let instance = || {
            input
                .pointer(&pointer)
                .map_or_else(String::new, Value::to_string)
        };
        let mut push = |message: String| {
            out.push(Violation {
                pointer: pointer.clone(),
                message,
            })
        };
        match &error.kind {
            ErrorKind::Group
            | ErrorKind::Schema { .. }
            | ErrorKind::Reference { .. }
            | ErrorKind::AllOf
            | ErrorKind::ContentSchema => {
                for cause in &error.causes {
                    self.collect(cause, input, out);
                }
            }
            ErrorKind::AnyOf => push(format!(
                "{} is not valid under any of the schemas listed in the 'anyOf' keyword",
                instance()
            )),
            ErrorKind::OneOf(None) => push(format!(
                "{} is not valid under any of the schemas listed in the 'oneOf' keyword",
                instance()
            )),
            ErrorKind::OneOf(Some(_)) => push(format!(
                "{} is valid under more than one of the schemas listed in the 'oneOf' keyword",
                instance()
            )),
            ErrorKind::PropertyName { prop } => push(format!(
                "{} is not a valid property name (see the schema's \"propertyNames\")",
                Value::from(prop.as_str())
            )),
            ErrorKind::RefCycle { .. } => push(error.kind.to_string()),
            ErrorKind::FalseSchema => {
                // `unevaluatedProperties: false` checks each leftover property against
                // `false`: say it as the keyword does.
                if error.schema_url.ends_with("/unevaluatedProperties") {
                    let (parent, name) = split_last(&pointer);
                    out.push(Violation {
                        pointer: parent.to_owned(),
                        message: format!(
                            "Unevaluated properties are not allowed ('{name}' was unexpected)"
                        ),
                    });
                } else if error.schema_url.ends_with("/unevaluatedItems") {
                    let (parent, index) = split_last(&pointer);
                    out.push(Violation {
                        pointer: parent.to_owned(),
                        message: format!(
                            "Unevaluated items are not allowed (item {index} was unexpected)"
                        ),
                    });
                } else {
                    push(format!("False schema does not allow {}", instance()));
                }
            }
            ErrorKind::Type { want, .. } => {
                // In jsonschema's order, which the messages have always used.
                let order = [
                    Type::Null,
                    Type::Boolean,
                    Type::Integer,
                    Type::Number,
                    Type::String,
                    Type::Array,
                    Type::Object,
                ];
                let names: Vec<String> = order
                    .iter()
                    .filter(|t| want.contains(**t))
                    .map(|t| format!("\"{t}\""))
                    .collect();
                if names.len() == 1 {
                    push(format!("{} is not of type {}", instance(), names[0]));
                } else {
                    push(format!(
                        "{} is not of types {}",
                        instance(),
                        names.join(", ")
                    ));
                }
            }
            ErrorKind::Enum { want } => push(enum_message(&instance(), want)),
            ErrorKind::Const { want } => push(format!("{want} was expected")),
            ErrorKind::Format { want, .. } => push(format!("{} is not a \"{want}\"", instance())),
            ErrorKind::MinProperties { want, .. } => push(format!(
                "{} has less than {want} propert{}",
                instance(),
                if *want == 1 { "y" } else { "ies" }
            )),
            ErrorKind::MaxProperties { want, .. } => push(format!(
                "{} has more than {want} propert{}",
                instance(),
                if *want == 1 { "y" } else { "ies" }
            )),
            ErrorKind::AdditionalProperties { got } => {
                let names: Vec<String> = got.iter().map(|name| format!("'{name}'")).collect();
                push(format!(
                    "Additional properties are not allowed ({} {} unexpected)",
                    names.join(", "),
                    if got.len() == 1 { "was" } else { "were" }
                ));
            }
            ErrorKind::Required { want } => {
                for name in want {
                    push(format!("{} is a required property", Value::from(*name)));
                }
            }
            ErrorKind::Dependency { missing, .. }
            | ErrorKind::DependentRequired { missing, .. } => {
                for name in missing {
                    push(format!("{} is a required property", Value::from(*name)));
                }
            }
            ErrorKind::MinItems { want, .. } => push(format!(
                "{} has less than {want} item{}",
                instance(),
                plural(*want)
            )),
            ErrorKind::MaxItems { want, .. } => push(format!(
                "{} has more than {want} item{}",
                instance(),
                plural(*want)
            )),
            ErrorKind::Contains => push(format!(
                "None of {} are valid under the given schema",
                instance()
            )),
            ErrorKind::MinContains { got, want } => push(format!(
                "{} has {} item{} valid under the \"contains\" schema, fewer than {want}",
                instance(),
                got.len(),
                plural(got.len())
            )),
            ErrorKind::MaxContains { got, want } => push(format!(
                "{} has {} items valid under the \"contains\" schema, more than {want}",
                instance(),
                got.len()
            )),
            ErrorKind::UniqueItems { .. } => {
                push(format!("{} has non-unique elements", instance()))
            }
            ErrorKind::AdditionalItems { got } => push(format!(
                "Additional items are not allowed ({got} item{})",
                plural(*got)
            )),
            ErrorKind::MinLength { want, .. } => push(format!(
                "{} is shorter than {want} character{}",
                instance(),
                plural(*want)
            )),
            ErrorKind::MaxLength { want, .. } => push(format!(
                "{} is longer than {want} character{}",
                instance(),
                plural(*want)
            )),
            ErrorKind::Pattern { want, .. } => {
                push(format!("{} does not match \"{want}\"", instance()))
            }
            ErrorKind::ContentEncoding { want, .. } => push(format!(
                "{} is not compliant with \"{want}\" content encoding",
                instance()
            )),
            ErrorKind::ContentMediaType { want, .. } => push(format!(
                "{} is not compliant with \"{want}\" media type",
                instance()
            )),
            ErrorKind::Minimum { want, .. } => {
                push(format!("{} is less than the minimum of {want}", instance()))
            }
            ErrorKind::Maximum { want, .. } => push(format!(
                "{} is greater than the maximum of {want}",
                instance()
            )),
            ErrorKind::ExclusiveMinimum { want, .. } => push(format!(
                "{} is less than or equal to the minimum of {want}",
                instance()
            )),
            ErrorKind::ExclusiveMaximum { want, .. } => push(format!(
                "{} is greater than or equal to the maximum of {want}",
                instance()
            )),
            ErrorKind::MultipleOf { want, .. } => {
                push(format!("{} is not a multiple of {want}", instance()))
            }
            ErrorKind::Not => {
                let not = self
                    .keyword(error.schema_url, "not")
                    .map_or_else(|| "the \"not\" schema".to_owned(), Value::to_string);
                push(format!("{not} is not allowed for {}", instance()));
            }
        }
    }

    /// The keyword `name` of the subschema at `url`, when `url` points into this schema.
    fn keyword(&self, url: &str, name: &str) -> Option<&Value> {
        let fragment = url.strip_prefix(LOCATION)?.strip_prefix('#').unwrap_or("");
        self.schema.pointer(fragment)?.get(name)
    }
}

/// Sorts the violations below the root by their paths (stable; an array index by its number),
/// leaving the root's own where they are.
fn in_path_order(violations: &mut [Violation]) {
    fn key(pointer: &str) -> Vec<(u8, u64, &str)> {
        pointer
            .split('/')
            .skip(1)
            .map(|segment| match segment.parse::<u64>() {
                Ok(n) => (0, n, ""),
                Err(_) => (1, 0, segment),
            })
            .collect()
    }
    let slots: Vec<usize> = (0..violations.len())
        .filter(|&i| !violations[i].pointer.is_empty())
        .collect();
    let mut members: Vec<Violation> = slots
        .iter()
        .map(|&i| std::mem::take(&mut violations[i]))
        .collect();
    members.sort_by(|a, b| key(&a.pointer).cmp(&key(&b.pointer)));
    for (slot, violation) in slots.into_iter().zip(members) {
        violations[slot] = violation;
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `/a/b` → (`/a`, `b`), unescaped.
fn split_last(pointer: &str) -> (&str, String) {
    match pointer.rfind('/') {
        Some(i) => (
            &pointer[..i],
            pointer[i + 1..].replace("~1", "/").replace("~0", "~"),
        ),
        None => (pointer, String::new()),
    }
}

/// `"x" is not one of "a", "b" or "c"`, or the first two and how many others.
fn enum_message(instance: &str, options: &[Value]) -> String {
    let mut message = format!("{instance} is not one of ");
    if options.len() <= MAX_QUOTED_OPTIONS {
        for (i, option) in options.iter().enumerate() {
            let sep = match i {
                0 => "",
                _ if i + 1 == options.len() => " or ",
                _ => ", ",
            };
            let _ = write!(message, "{sep}{option}");
        }
    } else {
        let shown = MAX_QUOTED_OPTIONS - 1;
        for (i, option) in options.iter().take(shown).enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(message, "{sep}{option}");
        }
        let _ = write!(message, " or {} other candidates", options.len() - shown);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(schema: Value, input: Value) -> Vec<String> {
        Validator::new(&schema)
            .unwrap()
            .violations(&input)
            .into_iter()
            .map(|v| {
                if v.pointer.is_empty() {
                    v.message
                } else {
                    format!("at {}: {}", v.pointer, v.message)
                }
            })
            .collect()
    }

    #[test]
    fn members_are_sorted_by_path_and_the_roots_stay_in_place() {
        let at = |pointer: &str| Violation {
            pointer: pointer.to_owned(),
            message: pointer.to_owned(),
        };
        let mut violations = vec![
            at(""),
            at("/b"),
            at("/10"),
            at("/a/x"),
            at("/2"),
            at("/a"),
            at(""),
        ];
        in_path_order(&mut violations);
        let order: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
        // Indexes by number before names; a path before its members; the root's in place.
        assert_eq!(order, ["", "/2", "/10", "/a", "/a/x", "/b", ""]);
    }

    #[test]
    fn subschemas_report_in_path_order() {
        let schema = json!({"allOf": [
            {"properties": {"b": {"type": "string"}}},
            {"properties": {"a": {"type": "string"}}}
        ]});
        assert_eq!(
            messages(schema, json!({"a": 1, "b": 2})),
            [
                "at /a: 1 is not of type \"string\"",
                "at /b: 2 is not of type \"string\""
            ]
        );
    }

    #[test]
    fn an_arrays_violations_come_in_index_order() {
        let schema = json!({"type": "array", "items": {"type": "integer", "minimum": 1}});
        let input = json!([1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0]);
        assert_eq!(
            messages(schema, input),
            [
                "at /2: 0 is less than the minimum of 1",
                "at /10: 0 is less than the minimum of 1"
            ]
        );
    }

    #[test]
    fn violations_are_worded_for_the_model() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1, "maximum": 9},
                "s": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
                "e": {"enum": ["a", "b", "c", "d"]},
                "c": {"const": 3},
                "t": {"type": ["string", "null"]},
                "l": {"type": "array", "maxItems": 1, "uniqueItems": true},
                "x": {"not": {"type": "string"}},
                "u": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "m": {"multipleOf": 2}
            },
            "required": ["n", "q"],
            "additionalProperties": false
        });
        assert_eq!(
            messages(
                schema,
                json!({"n": 0, "s": "A", "e": "z", "c": 4, "t": 1, "l": [1, 1],
                       "x": "str", "u": true, "m": 3, "extra": 1})
            ),
            [
                "\"q\" is a required property",
                "at /c: 3 was expected",
                "at /e: \"z\" is not one of \"a\", \"b\" or 2 other candidates",
                "at /l: [1,1] has more than 1 item",
                "at /l: [1,1] has non-unique elements",
                "at /m: 3 is not a multiple of 2",
                "at /n: 0 is less than the minimum of 1",
                "at /s: \"A\" is shorter than 2 characters",
                "at /s: \"A\" does not match \"^[a-z]+$\"",
                "at /t: 1 is not of types \"null\", \"string\"",
                "at /u: true is not valid under any of the schemas listed in the 'anyOf' keyword",
                "at /x: {\"type\":\"string\"} is not allowed for \"str\"",
                "Additional properties are not allowed ('extra' was unexpected)",
            ]
        );
    }

    #[test]
    fn refs_resolve_inside_the_schema_only() {
        let local = json!({
            "$defs": {"P": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/P"}}
        });
        assert_eq!(
            messages(local, json!({"p": {"a": "x"}})),
            ["at /p/a: \"x\" is not of type \"integer\""]
        );
        for outside in [
            "https://example.com/s.json",
            "file:///etc/passwd",
            "other.json",
        ] {
            let schema = json!({"type": "object", "properties": {"p": {"$ref": outside}}});
            assert!(Validator::new(&schema).is_err(), "{outside}");
        }
    }

    #[test]
    fn bad_schemas_are_refused_and_formats_are_annotations() {
        let error = Validator::new(&json!({"type": "integr"})).err().unwrap();
        assert!(!error.is_empty());
        let email = Validator::new(&json!({"type": "string", "format": "email"})).unwrap();
        assert!(email.is_valid(&json!("not an email")));
        let closed = json!({"type": "object", "unevaluatedProperties": false,
                            "properties": {"a": {}}});
        assert_eq!(
            messages(closed, json!({"a": 1, "b/c": 2})),
            ["Unevaluated properties are not allowed ('b/c' was unexpected)"]
        );
    }
}
