//! Flattening a tool input schema whose top level is a union into the one object schema both
//! providers accept.
//!
//! Anthropic rejects an `input_schema` with `oneOf`, `anyOf` or `allOf` at the top level, and
//! both providers want a top-level `"type": "object"`. schemars writes exactly that kind of
//! schema for an enum input (`#[serde(tag = "op")]`: a `oneOf` of one object per variant), for
//! an enum flattened into a struct, and for `Option<Struct>`. The schema the model is sent is
//! therefore rewritten into a single object:
//!
//! ```text
//!  {"oneOf": [                                   {"type": "object",
//!     {"properties": {"op":   {"const": "read"},    "properties": {
//!                     "path": {"type": "string"}},     "op":   {"type": "string", "enum": ["read", "delete"]},
//!      "required": ["op", "path"]},          ──►       "path": {"anyOf": [{"type": "string"},
//!     {"properties": {"op":   {"const": "delete"},                       {"type": "array", …}]}},
//!                     "path": {"type": "array", …}},  "required": ["op", "path"],
//!      "required": ["op", "path"]}]}                 "description": "…which fields go with which op…"}
//! ```
//!
//! - alternatives (`oneOf`/`anyOf`): properties are merged; a property whose schemas differ
//!   gets a property-level `anyOf` (string constants, such as the tag, become one `enum`);
//!   `required` is what every alternative requires; alternatives that only accept `null` are
//!   dropped (tool input is always an object);
//! - conjunctions (`allOf`, `$ref`): properties are merged (differing schemas get a
//!   property-level `allOf`); `required` is the union;
//! - `$defs` / `definitions` stay, so `$ref`s inside properties still resolve.
//!
//! The flattened schema only guides the model: it accepts more than the original (a field of
//! one variant next to the tag of another). Arguments are still checked against the original,
//! and for a tagged union against the variant its tag names, so such a call gets an error
//! result saying what that variant needs. A union with an alternative that is not an object
//! (`String | i64`, a unit variant of an externally tagged enum) cannot be flattened and is
//! refused.

use super::text;
use serde_json::{Map, Value};

/// Union and reference nesting deeper than this is refused (it is also how a `$ref` cycle
/// ends).
const MAX_DEPTH: usize = 32;
/// At most this many schema nodes are visited; a schema that needs more is refused
/// (`$ref`s can make a small document expand exponentially).
const MAX_NODES: usize = 10_000;
/// A variant's description is cut to this many bytes in the summary.
const MAX_VARIANT_DOC: usize = 200;

/// The keywords that make a top-level schema something Anthropic does not accept as is.
const COMBINATORS: [&str; 3] = ["oneOf", "anyOf", "allOf"];

/// A flattened schema, and the tag that picks a variant when the union was tagged.
#[derive(Debug)]
pub(crate) struct Flattened {
    /// The object schema sent to the model.
    pub(crate) schema: Value,
    /// The discriminating property, when every alternative of the top-level union fixes it
    /// to its own string constant (serde's `tag = "…"`).
    pub(crate) tag: Option<Tag>,
}

/// A tagged union's discriminator.
#[derive(Debug)]
pub(crate) struct Tag {
    /// The tag property's name.
    pub(crate) property: String,
    /// Each variant's tag value and the schema an input with that tag must satisfy: the
    /// original schema with its union replaced by that one alternative.
    pub(crate) variants: Vec<(String, Value)>,
}

/// Whether the schema's top level needs flattening: a `oneOf`, `anyOf`, `allOf` or `$ref`.
pub(crate) fn needs_flattening(schema: &Value) -> bool {
    schema.as_object().is_some_and(|map| {
        map.contains_key("$ref") || COMBINATORS.iter().any(|k| map.contains_key(*k))
    })
}

/// Flattens a top-level union into one object schema. The error says why it cannot be done
/// (without the tool's name, which the caller adds).
pub(crate) fn flatten(root: &Value) -> Result<Flattened, String> {
    let Some(root_map) = root.as_object() else {
        return Err("the input schema is not a JSON object".to_owned());
    };
    let mut walker = Walker { root, visited: 0 };
    let shape = match walker.node(root, 0)? {
        Node::Object(shape) => shape,
        Node::Null => {
            return Err("the input schema only accepts null; \
                        both providers require an object"
                .to_owned())
        }
        Node::Other(what) => return Err(not_an_object(&what)),
    };

    let mut out = Map::new();
    for (key, value) in root_map {
        let recomputed = matches!(
            key.as_str(),
            "type"
                | "properties"
                | "required"
                | "additionalProperties"
                | "unevaluatedProperties"
                | "$ref"
                | "oneOf"
                | "anyOf"
                | "allOf"
        );
        if !recomputed {
            out.insert(key.clone(), value.clone());
        }
    }
    out.insert("type".into(), Value::from("object"));
    let properties: Map<String, Value> = shape
        .properties
        .iter()
        .map(|(name, schemas)| (name.clone(), conjunction(schemas)))
        .collect();
    out.insert("properties".into(), Value::Object(properties));
    if !shape.required.is_empty() {
        out.insert("required".into(), Value::from(shape.required.clone()));
    }
    if shape.closed == Some(true) {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }

    // The tag walks the alternatives again, with a budget of its own.
    walker.visited = 0;
    let tag = match walker.tag(root_map)? {
        Some((tag, summary)) => {
            let description = match root_map.get("description").and_then(Value::as_str) {
                Some(text) if !text.trim().is_empty() => format!("{text}\n\n{summary}"),
                _ => summary,
            };
            out.insert("description".into(), Value::from(description));
            Some(tag)
        }
        None => None,
    };
    Ok(Flattened {
        schema: Value::Object(out),
        tag,
    })
}

/// Why an alternative makes the union impossible to flatten, and what to do instead.
fn not_an_object(what: &str) -> String {
    format!(
        "the input schema has a top-level union with {what}, which cannot be sent as one \
         object schema (both providers require the input to be an object); use a struct, an \
         enum with #[serde(tag = \"...\")] whose variants have named fields, or wrap the value \
         in a struct field (struct Input {{ value: YourType }})"
    )
}

/// What a schema node accepts, as far as flattening cares.
enum Node {
    /// Objects, with these properties.
    Object(Shape),
    /// Only `null` (or nothing at all: `false`); dropped from alternatives.
    Null,
    /// Something that is not an object, described for the error message.
    Other(String),
}

/// The properties an object schema declares.
#[derive(Default)]
struct Shape {
    /// Each property's schemas, all of which apply (an `allOf` when they differ), in the
    /// order first seen.
    properties: Vec<(String, Vec<Value>)>,
    /// Required property names, in the order first seen.
    required: Vec<String>,
    /// `Some(true)` when only the declared properties are allowed, `Some(false)` when others
    /// are, `None` when the node says nothing (no properties, no `additionalProperties`).
    closed: Option<bool>,
}

impl Shape {
    fn schemas_mut(&mut self, name: &str) -> &mut Vec<Value> {
        let index = match self.properties.iter().position(|(n, _)| n == name) {
            Some(index) => index,
            None => {
                self.properties.push((name.to_owned(), Vec::new()));
                self.properties.len() - 1
            }
        };
        &mut self.properties[index].1
    }

    /// Adds a property schema unless an equal one (ignoring descriptions) is there.
    fn add_property(&mut self, name: &str, schema: &Value) {
        let schemas = self.schemas_mut(name);
        add_distinct(schemas, schema);
    }

    fn require(&mut self, name: &str) {
        if !self.required.iter().any(|r| r == name) {
            self.required.push(name.to_owned());
        }
    }

    /// Both `self` and `other` apply (allOf).
    fn and(&mut self, other: Shape) {
        for (name, schemas) in other.properties {
            for schema in &schemas {
                self.add_property(&name, schema);
            }
        }
        for name in &other.required {
            self.require(name);
        }
        self.closed = combine_closed(self.closed, other.closed);
    }
}

/// Closed only when every part that says something says closed.
fn combine_closed(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), _) | (_, Some(true)) => Some(true),
        (None, None) => None,
    }
}

/// One of several object shapes applies (oneOf / anyOf): every property any of them declares,
/// the ones all of them require.
fn or(shapes: &[Shape]) -> Shape {
    let mut merged = Shape::default();
    for shape in shapes {
        for (name, schemas) in &shape.properties {
            // One alternative's schemas for a property, as one schema.
            let schema = conjunction(schemas);
            merged.add_property(name, &schema);
        }
        merged.closed = combine_closed(merged.closed, shape.closed);
    }
    // Under `or`, a property's schemas are alternatives, not conjuncts: fold them into one.
    for (_, schemas) in &mut merged.properties {
        if schemas.len() > 1 {
            *schemas = vec![disjunction(schemas)];
        }
    }
    if let Some((first, rest)) = shapes.split_first() {
        merged.required = first
            .required
            .iter()
            .filter(|name| rest.iter().all(|s| s.required.contains(name)))
            .cloned()
            .collect();
    }
    merged
}

/// `schema` with its top-level description removed, for comparing property schemas.
fn without_description(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut map = map.clone();
            map.remove("description");
            Value::Object(map)
        }
        other => other.clone(),
    }
}

/// Pushes `schema` unless an equal one (ignoring descriptions) is there; a described copy
/// replaces an undescribed one.
fn add_distinct(schemas: &mut Vec<Value>, schema: &Value) {
    let bare = without_description(schema);
    match schemas.iter_mut().find(|s| without_description(s) == bare) {
        Some(existing) => {
            if existing.get("description").is_none() && schema.get("description").is_some() {
                *existing = schema.clone();
            }
        }
        None => schemas.push(schema.clone()),
    }
}

/// Schemas that all apply, as one.
fn conjunction(schemas: &[Value]) -> Value {
    match schemas {
        [] => Value::Bool(true),
        [one] => one.clone(),
        many => serde_json::json!({ "allOf": many }),
    }
}

/// Schemas of which one applies, as one: string constants become one string `enum`,
/// anything else a property-level `anyOf`.
fn disjunction(schemas: &[Value]) -> Value {
    let mut literals: Vec<Value> = Vec::new();
    let mut description = None;
    for schema in schemas {
        match string_literals(schema) {
            Some(values) => {
                for value in values {
                    if !literals.contains(&value) {
                        literals.push(value);
                    }
                }
                if description.is_none() {
                    description = schema.get("description").cloned();
                }
            }
            None => return serde_json::json!({ "anyOf": schemas }),
        }
    }
    let mut out = Map::new();
    out.insert("type".into(), Value::from("string"));
    out.insert("enum".into(), Value::Array(literals));
    if let Some(description) = description {
        out.insert("description".into(), description);
    }
    Value::Object(out)
}

/// The strings a schema made only of `const` / `enum` string values (with an optional
/// `"type": "string"` and description) accepts.
fn string_literals(schema: &Value) -> Option<Vec<Value>> {
    let map = schema.as_object()?;
    let mut values = None;
    for (key, value) in map {
        match key.as_str() {
            "const" if value.is_string() => values = Some(vec![value.clone()]),
            "enum" => {
                let items = value.as_array()?;
                if items.is_empty() || !items.iter().all(Value::is_string) {
                    return None;
                }
                values = Some(items.clone());
            }
            "type" if value == "string" => {}
            "description" | "title" => {}
            _ => return None,
        }
    }
    values
}

/// The single string a schema fixes (`{"const": "x"}` or `{"enum": ["x"]}`).
fn string_constant(schema: &Value) -> Option<&str> {
    if let Some(value) = schema.get("const") {
        return value.as_str();
    }
    match schema.get("enum")?.as_array()?.as_slice() {
        [one] => one.as_str(),
        _ => None,
    }
}

/// Walks schema nodes within the node budget, resolving local `$ref`s against the root.
struct Walker<'a> {
    root: &'a Value,
    visited: usize,
}

impl<'a> Walker<'a> {
    fn node(&mut self, node: &'a Value, depth: usize) -> Result<Node, String> {
        self.visited += 1;
        if self.visited > MAX_NODES {
            return Err(format!(
                "the input schema is too complex to flatten (more than {MAX_NODES} nodes \
                 through its unions and $refs); simplify the input type"
            ));
        }
        if depth > MAX_DEPTH {
            return Err(format!(
                "the input schema nests unions or $refs more than {MAX_DEPTH} deep (a $ref \
                 cycle at the top level?); simplify the input type"
            ));
        }
        let map = match node {
            Value::Bool(true) => return Ok(Node::Object(Shape::default())),
            Value::Bool(false) => return Ok(Node::Null),
            Value::Object(map) => map,
            _ => return Err("the input schema has a part that is not a schema".to_owned()),
        };

        match map.get("type") {
            None => {
                if map.contains_key("const") || map.contains_key("enum") {
                    return Ok(Node::Other("a fixed value (const or enum)".to_owned()));
                }
            }
            Some(Value::String(t)) if t == "object" => {}
            Some(Value::String(t)) if t == "null" => return Ok(Node::Null),
            Some(Value::Array(types)) if types.iter().any(|t| t == "object") => {}
            Some(Value::Array(types)) if types.iter().all(|t| t == "null") => {
                return Ok(Node::Null)
            }
            Some(other) => return Ok(Node::Other(format!("an alternative of type {other}"))),
        }

        let mut shape = Shape::default();
        let mut says_something = false;
        if let Some(properties) = map.get("properties").and_then(Value::as_object) {
            for (name, schema) in properties {
                shape.add_property(name, schema);
            }
            says_something = true;
        }
        if let Some(required) = map.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                shape.require(name);
            }
        }
        let closed = |key: &str| map.get(key).map(|v| v == &Value::Bool(false));
        match (
            closed("additionalProperties"),
            closed("unevaluatedProperties"),
        ) {
            (Some(true), _) | (_, Some(true)) => shape.closed = Some(true),
            (Some(false), _) | (_, Some(false)) => shape.closed = Some(false),
            (None, None) if says_something => shape.closed = Some(false),
            (None, None) => {}
        }

        // Everything below applies together with the node's own properties.
        if let Some(reference) = map.get("$ref") {
            match self.reference(reference, depth)? {
                Node::Object(target) => shape.and(target),
                other => return Ok(other),
            }
        }
        if let Some(members) = map.get("allOf") {
            for member in members.as_array().map(Vec::as_slice).unwrap_or_default() {
                match self.node(member, depth + 1)? {
                    Node::Object(member) => shape.and(member),
                    other => return Ok(other),
                }
            }
        }
        for keyword in ["oneOf", "anyOf"] {
            let Some(alternatives) = map.get(keyword) else {
                continue;
            };
            let mut objects = Vec::new();
            let mut other = None;
            for alternative in alternatives
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                match self.node(alternative, depth + 1)? {
                    Node::Object(alternative) => objects.push(alternative),
                    Node::Null => {}
                    Node::Other(what) => {
                        other.get_or_insert(what);
                    }
                }
            }
            if let Some(what) = other {
                return Err(not_an_object(&what));
            }
            if objects.is_empty() {
                return Ok(Node::Null);
            }
            shape.and(or(&objects));
        }
        Ok(Node::Object(shape))
    }

    /// Resolves a local `$ref` (`#/$defs/Name`, any JSON pointer into the root) and walks it.
    fn reference(&mut self, reference: &Value, depth: usize) -> Result<Node, String> {
        let target = reference
            .as_str()
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| self.root.pointer(pointer));
        match target {
            Some(target) => self.node(target, depth + 1),
            None => Err(format!(
                "the input schema's $ref {reference} does not point into the schema itself; \
                 only local references (#/$defs/...) can be flattened"
            )),
        }
    }

    /// The discriminator of the root's `oneOf` / `anyOf`: a property every alternative
    /// requires and fixes to a string of its own. Returns it with the summary of the variants
    /// for the description.
    fn tag(&mut self, root: &'a Map<String, Value>) -> Result<Option<(Tag, String)>, String> {
        let Some((keyword, alternatives)) = ["oneOf", "anyOf"]
            .into_iter()
            .find_map(|k| Some((k, root.get(k)?.as_array()?)))
        else {
            return Ok(None);
        };
        let mut shapes = Vec::new();
        for alternative in alternatives {
            match self.node(alternative, 1)? {
                Node::Object(shape) => shapes.push((alternative, shape)),
                // A null alternative has no tag; the union is not a plain tagged one.
                _ => return Ok(None),
            }
        }
        let Some((_, first)) = shapes.first() else {
            return Ok(None);
        };
        let constant = |shape: &Shape, name: &str| -> Option<String> {
            if !shape.required.iter().any(|r| r == name) {
                return None;
            }
            let (_, schemas) = shape.properties.iter().find(|(n, _)| n == name)?;
            schemas
                .iter()
                .find_map(|s| string_constant(s))
                .map(str::to_owned)
        };
        let property = first.properties.iter().map(|(n, _)| n).find(|name| {
            let mut seen: Vec<String> = Vec::new();
            shapes.iter().all(|(_, shape)| match constant(shape, name) {
                Some(value) if !seen.contains(&value) => {
                    seen.push(value);
                    true
                }
                _ => false,
            })
        });
        let Some(property) = property.cloned() else {
            return Ok(None);
        };

        let mut variants = Vec::new();
        let mut summary = format!(
            "{} selects the form of the input:",
            Value::from(property.as_str())
        );
        for (alternative, shape) in &shapes {
            let Some(value) = constant(shape, &property) else {
                return Ok(None);
            };
            // The original, with the union narrowed to this alternative.
            let mut narrowed = root.clone();
            narrowed.remove(keyword);
            let mut all_of = match narrowed.remove("allOf") {
                Some(Value::Array(members)) => members,
                _ => Vec::new(),
            };
            all_of.push((*alternative).clone());
            narrowed.insert("allOf".into(), Value::Array(all_of));
            variants.push((value.clone(), Value::Object(narrowed)));

            summary.push_str(&format!("\n- {}", Value::from(value.as_str())));
            // Required fields first, then the optional ones; each sorted, so that the text
            // does not depend on the properties map's order (serde_json's `preserve_order`).
            let mut names: Vec<&String> = shape
                .properties
                .iter()
                .map(|(name, _)| name)
                .filter(|name| **name != property)
                .collect();
            names.sort();
            let others = || names.iter().copied();
            let fields: Vec<String> = others()
                .filter(|name| shape.required.contains(name))
                .cloned()
                .chain(
                    others()
                        .filter(|name| !shape.required.contains(name))
                        .map(|name| format!("{name} (optional)")),
                )
                .collect();
            if fields.is_empty() {
                summary.push_str(": no other fields");
            } else {
                summary.push_str(&format!(": {}", fields.join(", ")));
            }
            if let Some(doc) = alternative.get("description").and_then(Value::as_str) {
                let doc = text::cut(doc.trim().to_owned(), MAX_VARIANT_DOC);
                if !doc.is_empty() {
                    summary.push_str(&format!(". {doc}"));
                }
            }
        }
        Ok(Some((Tag { property, variants }, summary)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flat(schema: Value) -> Value {
        flatten(&schema).unwrap().schema
    }

    #[test]
    fn a_tagged_union_becomes_one_object() {
        let schema = json!({
            "description": "A file operation.",
            "$defs": {"Mode": {"type": "string", "enum": ["a", "b"]}},
            "oneOf": [
                {"description": "Reads a file.", "type": "object",
                 "properties": {"op": {"type": "string", "const": "read"},
                                "path": {"type": "string", "description": "The path."},
                                "offset": {"type": ["integer", "null"]}},
                 "required": ["op", "path"]},
                {"type": "object",
                 "properties": {"op": {"type": "string", "const": "write"},
                                "path": {"type": "string"},
                                "mode": {"$ref": "#/$defs/Mode"}},
                 "required": ["op", "path", "mode"]},
                {"type": "object",
                 "properties": {"op": {"type": "string", "const": "delete"},
                                "path": {"type": "array", "items": {"type": "string"}}},
                 "required": ["op", "path"]},
                {"type": "object", "properties": {"op": {"type": "string", "const": "noop"}},
                 "required": ["op"]}
            ]
        });
        let flattened = flatten(&schema).unwrap();
        let out = &flattened.schema;
        assert_eq!(out["type"], "object");
        for keyword in COMBINATORS {
            assert!(out.get(keyword).is_none(), "{out:#}");
        }
        assert_eq!(
            out["properties"]["op"],
            json!({"type": "string", "enum": ["read", "write", "delete", "noop"]})
        );
        // Equal schemas merge (the described one wins); different ones become an anyOf.
        assert_eq!(
            out["properties"]["path"],
            json!({"anyOf": [{"type": "string", "description": "The path."},
                             {"type": "array", "items": {"type": "string"}}]})
        );
        assert_eq!(out["properties"]["mode"], json!({"$ref": "#/$defs/Mode"}));
        assert_eq!(
            out["properties"]["offset"],
            json!({"type": ["integer", "null"]})
        );
        assert_eq!(out["required"], json!(["op"]));
        assert!(out.get("additionalProperties").is_none());
        assert_eq!(out["$defs"], schema["$defs"]);
        assert_eq!(
            out["description"],
            "A file operation.\n\n\"op\" selects the form of the input:\n\
             - \"read\": path, offset (optional). Reads a file.\n\
             - \"write\": mode, path\n\
             - \"delete\": path\n\
             - \"noop\": no other fields"
        );

        let tag = flattened.tag.unwrap();
        assert_eq!(tag.property, "op");
        let values: Vec<&str> = tag.variants.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(values, ["read", "write", "delete", "noop"]);
        // Each variant's schema is the original narrowed to that alternative.
        assert_eq!(tag.variants[0].1["allOf"][0], schema["oneOf"][0]);
        assert_eq!(tag.variants[0].1["$defs"], schema["$defs"]);
        assert!(tag.variants[0].1.get("oneOf").is_none());

        // The result is a schema, and every variant's valid input passes it.
        let sent = crate::tool::validator::Validator::new(out).unwrap();
        for input in [
            json!({"op": "read", "path": "a", "offset": 3}),
            json!({"op": "write", "path": "a", "mode": "b"}),
            json!({"op": "delete", "path": ["a", "b"]}),
            json!({"op": "noop"}),
        ] {
            assert!(sent.is_valid(&input), "{input}");
            let original = crate::tool::validator::Validator::new(&schema).unwrap();
            assert!(original.is_valid(&input), "{input}");
        }
        assert!(!sent.is_valid(&json!({"op": "move"})));
        assert!(!sent.is_valid(&json!({"path": "a"})));
    }

    #[test]
    fn closed_variants_stay_closed() {
        let closed = json!({"oneOf": [
            {"type": "object", "properties": {"k": {"const": "a"}, "x": {"type": "integer"}},
             "required": ["k", "x"], "additionalProperties": false},
            {"type": "object", "properties": {"k": {"const": "b"}},
             "required": ["k"], "additionalProperties": false}
        ]});
        assert_eq!(flat(closed.clone())["additionalProperties"], false);
        let mut open = closed;
        open["oneOf"][1]
            .as_object_mut()
            .unwrap()
            .remove("additionalProperties");
        assert!(flat(open).get("additionalProperties").is_none());
    }

    #[test]
    fn refs_all_of_and_own_properties_merge() {
        // A struct with an enum flattened into it, and a newtype variant holding a struct.
        let schema = json!({
            "$defs": {"Inner": {"type": "object", "properties": {"a": {"type": "integer"}},
                                "required": ["a"]}},
            "type": "object",
            "properties": {"common": {"type": "boolean"}},
            "required": ["common"],
            "oneOf": [
                {"$ref": "#/$defs/Inner", "type": "object",
                 "properties": {"t": {"type": "string", "const": "X"}}, "required": ["t"]},
                {"type": "object", "properties": {"t": {"type": "string", "const": "Y"},
                                                  "b": {"type": "string"}},
                 "required": ["t", "b"]}
            ]
        });
        let out = flat(schema);
        let mut names: Vec<&String> = out["properties"].as_object().unwrap().keys().collect();
        names.sort();
        assert_eq!(names, ["a", "b", "common", "t"]);
        assert_eq!(out["required"], json!(["common", "t"]));

        let all_of = json!({"allOf": [
            {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            {"type": "object", "properties": {"x": {"minimum": 0}, "y": {"type": "string"}},
             "required": ["y"]}
        ]});
        let out = flat(all_of);
        assert_eq!(
            out["properties"]["x"],
            json!({"allOf": [{"type": "integer"}, {"minimum": 0}]})
        );
        assert_eq!(out["required"], json!(["x", "y"]));
        assert!(flatten(&json!({"allOf": [{"type": "object"}]}))
            .unwrap()
            .tag
            .is_none());
    }

    #[test]
    fn null_alternatives_are_dropped() {
        // Option<Struct>.
        let schema = json!({
            "$defs": {"S": {"type": "object", "properties": {"a": {"type": "integer"}},
                            "required": ["a"]}},
            "anyOf": [{"$ref": "#/$defs/S"}, {"type": "null"}]
        });
        let out = flat(schema);
        assert_eq!(out["properties"]["a"], json!({"type": "integer"}));
        assert_eq!(out["required"], json!(["a"]));
    }

    #[test]
    fn unions_of_non_objects_are_refused() {
        for schema in [
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"oneOf": [{"type": "string", "enum": ["Y"]},
                             {"type": "object", "properties": {"X": {}}, "required": ["X"]}]}),
            json!({"oneOf": [{"const": 1}, {"type": "object"}]}),
        ] {
            let error = flatten(&schema).unwrap_err();
            assert!(
                error.contains("wrap the value in a struct field"),
                "{error}"
            );
        }
        let error = flatten(&json!({"anyOf": [{"type": "null"}]})).unwrap_err();
        assert!(error.contains("only accepts null"), "{error}");
        let error = flatten(&json!({"$ref": "other.json#/x"})).unwrap_err();
        assert!(error.contains("only local references"), "{error}");
    }

    #[test]
    fn ref_cycles_and_blowups_end_in_an_error() {
        let cycle = json!({"$defs": {"A": {"oneOf": [{"$ref": "#/$defs/A"}]}},
                           "$ref": "#/$defs/A"});
        assert!(flatten(&cycle).unwrap_err().contains("deep"));
        // Each level quadruples the work: 4^12 nodes without the budget, well within the
        // depth limit.
        let mut defs = Map::new();
        for i in 0..12 {
            let next = json!({"$ref": format!("#/$defs/D{}", i + 1)});
            defs.insert(format!("D{i}"), json!({"allOf": [next, next, next, next]}));
        }
        defs.insert("D12".into(), json!({"type": "object"}));
        let blowup = json!({"$defs": defs, "$ref": "#/$defs/D0"});
        assert!(flatten(&blowup).unwrap_err().contains("too complex"));
    }

    #[test]
    fn needs_flattening_only_for_top_level_combinators() {
        assert!(needs_flattening(&json!({"oneOf": []})));
        assert!(needs_flattening(&json!({"type": "object", "allOf": []})));
        assert!(needs_flattening(&json!({"$ref": "#/$defs/A"})));
        assert!(!needs_flattening(&json!({"type": "object",
                                           "properties": {"a": {"anyOf": []}}})));
        assert!(!needs_flattening(&json!(true)));
    }
}
