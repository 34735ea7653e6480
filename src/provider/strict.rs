//! Strict tool schemas: a tool's JSON Schema normalised to what a provider's strict mode
//! (grammar-constrained tool arguments) accepts, or the typed reason it cannot be.
//!
//! The agent sends strict tools when [`RequestSettings::strict_tools`] is on: Anthropic
//! `"strict": true` on the tool, OpenAI Chat Completions `function.strict` and Responses
//! `strict`. Each tool whose schema [`strict_schema`] can normalise goes out strict with the
//! normalised schema; any other goes out as it is, not strict, and [`strict_schema`] says why
//! ([`NotStrict`]).
//!
//! The rules, from the providers' documentation:
//!
//! - both: every object closed (`additionalProperties: false`; an object whose
//!   `additionalProperties` is `true` or a schema is an open map and cannot be made strict),
//!   local `$ref`s only (`#/$defs/…`, `#/definitions/…`), no `not`, `if`/`then`/`else`,
//!   `patternProperties`, `propertyNames`,
//!   `dependentRequired`/`dependentSchemas`, `unevaluatedProperties` or tuple `items`;
//!   `oneOf` becomes `anyOf`; `minLength`, `maxLength`, `uniqueItems`, `minProperties`,
//!   `maxProperties` and `contains` are moved into the description (as the SDKs' own
//!   `transform_schema` helpers do);
//! - OpenAI ("Supported schemas"): every property required, the optional ones made nullable
//!   (`"type": ["string", "null"]`, or `anyOf` with `{"type": "null"}`); no `allOf`; string
//!   `pattern` and `format` (date-time, time, date, duration, email, hostname, ipv4, ipv6,
//!   uuid), numeric `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`/`multipleOf`
//!   and array `minItems`/`maxItems` kept; objects nested at most 10 deep, at most 5,000
//!   properties in all, at most 1,000 enum values in all, at most 120,000 characters of
//!   property names, definition names, enum and const values (and 15,000 in one enum of more
//!   than 250 strings); `default` moved into the description; root recursion through `#`
//!   taken, as through `$defs`; no keyword beside a `$ref` ("$ref cannot have keywords"):
//!   the definition is inlined there instead, the keywords beside the `$ref` winning, as the
//!   official SDKs do (`ensure_strict_json_schema`). A reference on a cycle (`#`, or a
//!   definition inside its own inlined copy) cannot be inlined: it stays bare, and its
//!   description moves into the description of the schema around it, after the property's
//!   name (`next: The next node.`), where the model still reads it;
//! - Anthropic ("JSON Schema limitations"): `required` kept as it is; no recursive schemas
//!   (through `$defs` or `#`); a `description` kept beside a `$ref` (as the SDK's
//!   `transform_schema` keeps it), a `default` there moved into it, any other keyword beside
//!   a `$ref` inlined as for OpenAI;
//!   `enum` of strings, numbers, booleans and nulls only; `allOf` without `$ref`; string
//!   `format` (date-time, time, date, duration, email, hostname, uri, ipv4, ipv6, uuid) and
//!   `pattern` kept; numeric constraints, `maxItems` and a `minItems` other than 0 or 1 moved
//!   into the description.
//!
//! Definitions that no reference reaches once the walk is done (inlined wherever they were
//! used) are dropped: a provider reads, and bills, every definition sent. OpenAI's `required`
//! lists every property in sorted order, whatever the order of the properties map (serde_json's
//! `preserve_order` feature).
//!
//! The arguments a strict tool is called with are still checked against its own schema by
//! the [`ToolRegistry`](crate::tool::ToolRegistry), so a constraint moved into the
//! description is still enforced (as an error result the model reads). A `null` the model
//! sends for an optional property made nullable is dropped when the check fails for it.
//!
//! [`RequestSettings::strict_tools`]: crate::RequestSettings::strict_tools

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// Whose strict-mode rules a schema is normalised for.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrictDialect {
    /// Anthropic Messages, `"strict": true` on a tool.
    Anthropic,
    /// OpenAI Chat Completions (`function.strict`) and Responses (`strict`).
    OpenAi,
}

/// Why a tool's schema cannot be sent strict; the tool is then sent as it is, not strict.
/// `path` is a JSON pointer into the schema (`""` for its root).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotStrict {
    /// The schema's root is not an object schema (`"type": "object"`).
    #[error("the schema's root is not an object schema (\"type\": \"object\")")]
    RootNotObject,
    /// An object allows properties it does not name (`additionalProperties` is `true` or a
    /// schema, or `patternProperties` is set): strict mode needs closed objects.
    #[error("the object at {path:?} allows properties it does not name; strict mode needs additionalProperties: false")]
    OpenObject {
        /// Where the object is.
        path: String,
    },
    /// A keyword strict mode refuses and that cannot be dropped without changing what the
    /// schema means.
    #[error("the keyword {keyword:?} at {path:?} is not supported in strict mode")]
    Unsupported {
        /// Where the keyword is.
        path: String,
        /// The keyword.
        keyword: String,
    },
    /// A `$ref` that is not local (`#/$defs/…`, `#/definitions/…`, or OpenAI's `#` for the
    /// root), or that names nothing in the schema.
    #[error("the reference {reference:?} at {path:?} is not a local definition")]
    BadRef {
        /// Where the reference is.
        path: String,
        /// The reference.
        reference: String,
    },
    /// A definition refers to itself, through `$defs` or through `#` (the root): Anthropic
    /// strict mode refuses recursive schemas. (OpenAI takes both.)
    #[error("the schema is recursive through {reference:?}; Anthropic strict mode refuses recursive schemas")]
    Recursive {
        /// A reference on the cycle.
        reference: String,
    },
    /// An `enum` holds an object or an array (Anthropic takes primitive values only).
    #[error(
        "the enum at {path:?} holds an object or an array; strict mode takes primitive values only"
    )]
    ComplexEnum {
        /// Where the enum is.
        path: String,
    },
    /// Objects nest deeper than the provider allows.
    #[error("objects nest deeper than {limit} levels")]
    TooDeep {
        /// The provider's limit.
        limit: usize,
    },
    /// More properties in all than the provider allows.
    #[error("the schema has more than {limit} properties in all")]
    TooLarge {
        /// The provider's limit.
        limit: usize,
    },
    /// More enum values, or more text in property names, definition names, enum and const
    /// values, than OpenAI allows (`what` says which limit).
    #[error("the schema has more than {limit} {what}")]
    TooMuch {
        /// The limit passed: `"enum values in all"`, `"characters of names and values"`, or
        /// `"characters in one enum of more than 250 strings"`.
        what: &'static str,
        /// The provider's limit.
        limit: usize,
    },
    /// Inlining the `$ref`s that strict mode cannot send as they are (a `$ref` beside other
    /// keywords) would make the schema larger than this (a guard against schemas, from MCP
    /// servers say, whose references fan out exponentially).
    #[error("the schema expands to more than {limit} subschemas once its references are inlined")]
    TooComplex {
        /// The number of subschemas at which the walk stops.
        limit: usize,
    },
}

/// OpenAI: "A schema may have up to 5000 object properties total, with up to 10 levels of
/// nesting."
const OPENAI_MAX_DEPTH: usize = 10;
const OPENAI_MAX_PROPERTIES: usize = 5_000;
/// OpenAI: "A schema may have up to 1000 enum values across all enum properties", "the total
/// string length of all property names, definition names, enum values, and const values
/// cannot exceed 120,000 characters", and "for a single enum property with string values, the
/// total string length of all enum values cannot exceed 15,000 characters when there are more
/// than 250 enum values".
const OPENAI_MAX_ENUM_VALUES: usize = 1_000;
const OPENAI_MAX_TEXT: usize = 120_000;
const OPENAI_LONG_ENUM: usize = 250;
const OPENAI_LONG_ENUM_TEXT: usize = 15_000;
/// The most subschemas one walk visits, inlined copies included.
const MAX_NODES: usize = 100_000;
/// The walk stops here whatever the dialect (schemas come from MCP servers, too).
const MAX_SCHEMA_DEPTH: usize = 64;

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

/// Annotations dropped without a word (they constrain nothing).
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "title",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
];

/// Keywords that change what a schema accepts in ways strict mode cannot express.
const REFUSED: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "prefixItems",
    "additionalItems",
    "$dynamicRef",
    "$dynamicAnchor",
    "$anchor",
    "$recursiveRef",
];

/// `schema` normalised for `dialect`'s strict mode, or why it cannot be.
///
/// ```
/// use agent_loop::provider::strict::{strict_schema, NotStrict, StrictDialect};
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
///     "required": ["city"]
/// });
/// let openai = strict_schema(&schema, StrictDialect::OpenAi).unwrap();
/// assert_eq!(openai, json!({
///     "type": "object",
///     "properties": {"city": {"type": "string"},
///                    "days": {"type": ["integer", "null"], "minimum": 1}},
///     "required": ["city", "days"],
///     "additionalProperties": false
/// }));
/// let anthropic = strict_schema(&schema, StrictDialect::Anthropic).unwrap();
/// assert_eq!(anthropic["properties"]["days"],
///            json!({"type": "integer", "description": "{minimum: 1}"}));
/// assert_eq!(anthropic["required"], json!(["city"]));
///
/// let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
/// assert!(matches!(strict_schema(&map, StrictDialect::OpenAi), Err(NotStrict::OpenObject { .. })));
/// ```
pub fn strict_schema(schema: &Value, dialect: StrictDialect) -> Result<Value, NotStrict> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(NotStrict::RootNotObject);
    }
    let definitions = definitions(schema);
    let mut walk = Walk {
        dialect,
        definitions: &definitions,
        properties: 0,
        nodes: 0,
        enum_values: 0,
        text: 0,
        inlining: Vec::new(),
        carried: None,
    };
    let mut out = schema.clone();
    walk.node(&mut out, &mut String::new(), 0, 0)?;
    if dialect == StrictDialect::Anthropic {
        recursion(&out, &definitions)?;
    }
    prune_definitions(&mut out);
    Ok(out)
}

/// A tool's schema as a request carries it, and whether it goes strict: the normalised schema
/// when `on` and it can be made strict, else the schema as it is (the reason logged at debug
/// level, once per request and tool; an agent warns once per tool when it is built).
pub(crate) fn wire_schema<'a>(
    name: &str,
    schema: &'a Value,
    dialect: StrictDialect,
    on: bool,
) -> (std::borrow::Cow<'a, Value>, bool) {
    if !on {
        return (std::borrow::Cow::Borrowed(schema), false);
    }
    match strict_schema(schema, dialect) {
        Ok(strict) => (std::borrow::Cow::Owned(strict), true),
        Err(reason) => {
            tracing::debug!(tool = name, %reason, "tool sent without strict mode");
            (std::borrow::Cow::Borrowed(schema), false)
        }
    }
}

/// The local definitions a `$ref` may name: `#/$defs/x` and `#/definitions/x`, each with its
/// subschema.
fn definitions(schema: &Value) -> BTreeMap<String, &Value> {
    let mut found = BTreeMap::new();
    for key in ["$defs", "definitions"] {
        if let Some(map) = schema.get(key).and_then(Value::as_object) {
            for (name, sub) in map {
                found.insert(format!("#/{key}/{}", escape(name)), sub);
            }
        }
    }
    found
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The reference to the whole schema (root recursion), which OpenAI takes: "Recursive schemas
/// are supported … using `#` to indicate root recursion".
const ROOT_REF: &str = "#";

struct Walk<'a> {
    dialect: StrictDialect,
    definitions: &'a BTreeMap<String, &'a Value>,
    /// Properties seen so far, over the whole schema.
    properties: usize,
    /// Subschemas visited so far, inlined copies included (at most [`MAX_NODES`]).
    nodes: usize,
    /// OpenAI: enum values, and characters of names and values, so far.
    enum_values: usize,
    text: usize,
    /// The references being inlined, outermost first: one met again inside its own copy is
    /// a cycle, which is not inlined.
    inlining: Vec<String>,
    /// The description of a `$ref` that had to stay bare (on a cycle), for the schema around
    /// it to carry: set by [`node`](Self::node), taken by its caller.
    carried: Option<String>,
}

impl Walk<'_> {
    /// Normalises one subschema in place. `depth` counts schema nesting, `objects` the
    /// objects around this one.
    fn node(
        &mut self,
        node: &mut Value,
        path: &mut String,
        depth: usize,
        objects: usize,
    ) -> Result<(), NotStrict> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(NotStrict::TooDeep {
                limit: MAX_SCHEMA_DEPTH,
            });
        }
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(NotStrict::TooComplex { limit: MAX_NODES });
        }
        let Value::Object(map) = node else {
            // `true` / `false` schemas: `true` accepts anything, which strict mode cannot say.
            return Err(NotStrict::Unsupported {
                path: path.clone(),
                keyword: node.to_string(),
            });
        };
        let openai = self.dialect == StrictDialect::OpenAi;
        let mut moved: Vec<(String, Value)> = Vec::new();
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            let keyword = key.as_str();
            if DROPPED.contains(&keyword) {
                map.remove(keyword);
                continue;
            }
            if REFUSED.contains(&keyword) {
                if keyword == "patternProperties" {
                    return Err(NotStrict::OpenObject { path: path.clone() });
                }
                return Err(unsupported(path, keyword));
            }
            let keep = match keyword {
                "type"
                | "description"
                | "properties"
                | "required"
                | "additionalProperties"
                | "items"
                | "anyOf"
                | "oneOf"
                | "enum"
                | "const"
                | "$ref"
                | "$defs"
                | "definitions"
                | "pattern" => true,
                "allOf" => {
                    if openai {
                        return Err(unsupported(path, keyword));
                    }
                    true
                }
                "default" => !openai,
                "format" => {
                    let allowed = if openai {
                        OPENAI_FORMATS
                    } else {
                        ANTHROPIC_FORMATS
                    };
                    map.get(keyword)
                        .and_then(Value::as_str)
                        .is_some_and(|f| allowed.contains(&f))
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf"
                | "maxItems" => openai,
                "minItems" => {
                    openai || matches!(map.get(keyword).and_then(Value::as_u64), Some(0 | 1))
                }
                "minLength" | "maxLength" | "uniqueItems" | "minProperties" | "maxProperties"
                | "contains" | "minContains" | "maxContains" => false,
                _ => return Err(unsupported(path, keyword)),
            };
            if !keep {
                if let Some(value) = map.remove(keyword) {
                    moved.push((key, value));
                }
            }
        }
        if !moved.is_empty() {
            note(map, &moved);
        }
        if let Some(one_of) = map.remove("oneOf") {
            // Looser than `oneOf` (two matches pass); the registry still checks `oneOf`.
            map.insert("anyOf".to_owned(), one_of);
        }
        if let Some(reference) = map.get("$ref") {
            let Some(reference) = reference.as_str().map(str::to_owned) else {
                return Err(unsupported(path, "$ref"));
            };
            if reference == ROOT_REF && !openai {
                return Err(NotStrict::Recursive { reference });
            }
            if reference != ROOT_REF && !self.definitions.contains_key(reference.as_str()) {
                return Err(NotStrict::BadRef {
                    path: path.clone(),
                    reference,
                });
            }
            if map.len() > 1 {
                return self.reference(node, reference, path, depth, objects);
            }
        }
        if let Some(values) = map.get("enum") {
            let Some(values) = values.as_array() else {
                return Err(unsupported(path, "enum"));
            };
            if !openai && values.iter().any(|v| v.is_object() || v.is_array()) {
                return Err(NotStrict::ComplexEnum { path: path.clone() });
            }
            if openai {
                self.count_enum(values)?;
            }
        }
        if openai {
            if let Some(Value::String(value)) = map.get("const") {
                self.count_text(value.len())?;
            }
        }
        let is_object = map.get("type").is_some_and(|t| names_type(t, "object"))
            || map.contains_key("properties");
        if is_object {
            let objects = objects + 1;
            if openai && objects > OPENAI_MAX_DEPTH {
                return Err(NotStrict::TooDeep {
                    limit: OPENAI_MAX_DEPTH,
                });
            }
            match map.get("additionalProperties") {
                None | Some(Value::Bool(false)) => {}
                Some(_) => return Err(NotStrict::OpenObject { path: path.clone() }),
            }
            map.insert("additionalProperties".to_owned(), Value::Bool(false));
            self.object(map, path, depth, objects)?;
        } else if map.contains_key("additionalProperties") {
            return Err(unsupported(path, "additionalProperties"));
        }
        self.children(map, path, depth, objects)
    }

    /// A `$ref` beside other keywords, which strict mode does not take as it is: OpenAI
    /// refuses it ("$ref cannot have keywords"), and Anthropic's SDK keeps only a
    /// `description` there. Anthropic: a `description` stays beside the reference (a
    /// `default` is moved into it); anything else, and on OpenAI anything at all, is merged
    /// into a copy of the definition (the keywords beside the `$ref` winning), as the official
    /// SDKs do, and the copy normalised. A reference already being inlined (a cycle, `#`
    /// always) stays bare: its description goes to the schema around it
    /// ([`carried`](Self::carried)).
    fn reference(
        &mut self,
        node: &mut Value,
        reference: String,
        path: &mut String,
        depth: usize,
        objects: usize,
    ) -> Result<(), NotStrict> {
        let Value::Object(map) = node else {
            return Ok(());
        };
        let annotation = |k: &String| matches!(k.as_str(), "$ref" | "description" | "default");
        if self.dialect == StrictDialect::Anthropic && map.keys().all(annotation) {
            if let Some(default) = map.remove("default") {
                note(map, &[("default".to_owned(), default)]);
            }
            return Ok(());
        }
        let cycle = reference == ROOT_REF || self.inlining.contains(&reference);
        if cycle {
            if self.dialect == StrictDialect::Anthropic {
                return Err(NotStrict::Recursive { reference });
            }
            if let Some(default) = map.remove("default") {
                note(map, &[("default".to_owned(), default)]);
            }
            if let Some(other) = map.keys().find(|k| !annotation(k)) {
                // A constraint beside a reference that cannot be inlined.
                return Err(unsupported(path, other));
            }
            self.carried = map
                .remove("description")
                .and_then(|d| d.as_str().map(str::to_owned));
            return Ok(());
        }
        let target = self.definitions.get(reference.as_str()).copied();
        let Some(Value::Object(target)) = target else {
            return Err(NotStrict::BadRef {
                path: path.clone(),
                reference,
            });
        };
        let mut merged = target.clone();
        for (key, value) in std::mem::take(map) {
            if key != "$ref" {
                merged.insert(key, value);
            }
        }
        *node = Value::Object(merged);
        self.inlining.push(reference);
        let walked = self.node(node, path, depth + 1, objects);
        self.inlining.pop();
        walked
    }

    /// OpenAI's limits on enum values and their text.
    fn count_enum(&mut self, values: &[Value]) -> Result<(), NotStrict> {
        self.enum_values += values.len();
        if self.enum_values > OPENAI_MAX_ENUM_VALUES {
            return Err(NotStrict::TooMuch {
                what: "enum values in all",
                limit: OPENAI_MAX_ENUM_VALUES,
            });
        }
        let text: usize = values.iter().filter_map(Value::as_str).map(str::len).sum();
        if values.len() > OPENAI_LONG_ENUM && text > OPENAI_LONG_ENUM_TEXT {
            return Err(NotStrict::TooMuch {
                what: "characters in one enum of more than 250 strings",
                limit: OPENAI_LONG_ENUM_TEXT,
            });
        }
        self.count_text(text)
    }

    /// OpenAI's limit on the characters of names and values.
    fn count_text(&mut self, len: usize) -> Result<(), NotStrict> {
        self.text += len;
        if self.text > OPENAI_MAX_TEXT {
            return Err(NotStrict::TooMuch {
                what: "characters of names and values",
                limit: OPENAI_MAX_TEXT,
            });
        }
        Ok(())
    }

    /// An object's properties, and (OpenAI) every one of them required.
    fn object(
        &mut self,
        map: &mut Map<String, Value>,
        path: &mut String,
        depth: usize,
        objects: usize,
    ) -> Result<(), NotStrict> {
        let required: BTreeSet<String> = match map.get("required") {
            None => BTreeSet::new(),
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect(),
            Some(_) => return Err(unsupported(path, "required")),
        };
        let openai = self.dialect == StrictDialect::OpenAi;
        // A set on the wire: sorted, so the bytes do not depend on the map's order (serde_json's
        // `preserve_order` feature).
        let mut all = BTreeSet::new();
        let mut carried = Vec::new();
        if let Some(properties) = map.get_mut("properties") {
            let Some(properties) = properties.as_object_mut() else {
                return Err(unsupported(path, "properties"));
            };
            self.properties += properties.len();
            if openai && self.properties > OPENAI_MAX_PROPERTIES {
                return Err(NotStrict::TooLarge {
                    limit: OPENAI_MAX_PROPERTIES,
                });
            }
            for (name, property) in properties.iter_mut() {
                if openai {
                    self.count_text(name.len())?;
                }
                let len = path.len();
                path.push_str("/properties/");
                path.push_str(&escape(name));
                self.node(property, path, depth + 1, objects)?;
                path.truncate(len);
                if let Some(text) = self.carried.take() {
                    carried.push((name.clone(), text));
                }
                if openai && !required.contains(name) {
                    nullable(property);
                }
                all.insert(name.clone());
            }
        }
        carry(map, &carried);
        if openai {
            map.insert(
                "required".to_owned(),
                Value::Array(all.into_iter().map(Value::String).collect()),
            );
        }
        Ok(())
    }

    /// The subschemas under `items`, `anyOf`, `allOf` and the definitions.
    fn children(
        &mut self,
        map: &mut Map<String, Value>,
        path: &mut String,
        depth: usize,
        objects: usize,
    ) -> Result<(), NotStrict> {
        let mut carried = Vec::new();
        if let Some(items) = map.get_mut("items") {
            if items.is_array() {
                return Err(unsupported(path, "items"));
            }
            let len = path.len();
            path.push_str("/items");
            self.node(items, path, depth + 1, objects)?;
            path.truncate(len);
            if let Some(text) = self.carried.take() {
                carried.push(("items".to_owned(), text));
            }
        }
        for key in ["anyOf", "allOf"] {
            if let Some(list) = map.get_mut(key) {
                let Some(list) = list.as_array_mut() else {
                    return Err(unsupported(path, key));
                };
                if key == "allOf" && list.iter().any(|s| s.get("$ref").is_some()) {
                    return Err(unsupported(path, "allOf"));
                }
                for (i, sub) in list.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{key}/{i}"));
                    self.node(sub, path, depth + 1, objects)?;
                    path.truncate(len);
                    if let Some(text) = self.carried.take() {
                        carried.push((format!("{key}[{i}]"), text));
                    }
                }
            }
        }
        for key in ["$defs", "definitions"] {
            if let Some(defs) = map.get_mut(key) {
                let Some(defs) = defs.as_object_mut() else {
                    return Err(unsupported(path, key));
                };
                for (name, sub) in defs.iter_mut() {
                    if self.dialect == StrictDialect::OpenAi {
                        self.count_text(name.len())?;
                    }
                    let len = path.len();
                    path.push_str(&format!("/{key}/{}", escape(name)));
                    self.node(sub, path, depth + 1, objects)?;
                    path.truncate(len);
                    if let Some(text) = self.carried.take() {
                        carried.push((name.clone(), text));
                    }
                }
            }
        }
        carry(map, &carried);
        Ok(())
    }
}

/// Appends the descriptions of bare references below this schema to its own description, each
/// after the name of the property (or `items`, `anyOf[i]`) it describes: the model still reads
/// them, one level up.
fn carry(map: &mut Map<String, Value>, carried: &[(String, String)]) {
    if carried.is_empty() {
        return;
    }
    let mut description = map
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    for (name, text) in carried {
        if !description.is_empty() {
            description.push_str("\n\n");
        }
        description.push_str(&format!("{name}: {text}"));
    }
    map.insert("description".to_owned(), Value::String(description));
}

/// Drops the definitions no reference reaches any more (those inlined everywhere they were
/// used): a provider reads every definition sent, used or not.
fn prune_definitions(schema: &mut Value) {
    let mut reached: BTreeSet<String> = BTreeSet::new();
    let mut todo = Vec::new();
    refs_in(schema, &mut todo, 0);
    let definitions: BTreeMap<String, Value> = definitions(schema)
        .into_iter()
        .map(|(k, v)| (k, v.clone()))
        .collect();
    while let Some(reference) = todo.pop() {
        if reached.insert(reference.clone()) {
            if let Some(sub) = definitions.get(&reference) {
                refs_in(sub, &mut todo, 1);
            }
        }
    }
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(key) {
            defs.retain(|name, _| reached.contains(&format!("#/{key}/{}", escape(name))));
            if defs.is_empty() {
                map.remove(key);
            }
        }
    }
}

fn unsupported(path: &str, keyword: &str) -> NotStrict {
    NotStrict::Unsupported {
        path: path.to_owned(),
        keyword: keyword.to_owned(),
    }
}

/// Whether a `type` (a name or a list of names) names `name`.
fn names_type(t: &Value, name: &str) -> bool {
    match t {
        Value::String(s) => s == name,
        Value::Array(list) => list.iter().any(|v| v.as_str() == Some(name)),
        _ => false,
    }
}

/// Appends the moved constraints to the description, as the SDKs do: `{minimum: 1, …}`,
/// sorted by keyword (not in the map's order, which serde_json's `preserve_order` changes).
fn note(map: &mut Map<String, Value>, moved: &[(String, Value)]) {
    let mut list: Vec<String> = moved.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    list.sort();
    let text = format!("{{{}}}", list.join(", "));
    let description = match map.get("description").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => format!("{d}\n\n{text}"),
        _ => text,
    };
    map.insert("description".to_owned(), Value::String(description));
}

/// Makes an optional property accept `null` (OpenAI's way to say "optional" in strict mode),
/// a union by a `null` branch of its own (none when it has one: `Option<T>` of a definition).
fn nullable(property: &mut Value) {
    let null = Value::from("null");
    if let Some(branches) = property.get_mut("anyOf").and_then(Value::as_array_mut) {
        // A union: one branch more, not a union around it.
        if !branches.iter().any(|b| b.get("type") == Some(&null)) {
            branches.push(serde_json::json!({"type": "null"}));
        }
        return;
    }
    if let Some(map) = property.as_object_mut() {
        if map.get("const").is_none() {
            let typed = match map.get_mut("type") {
                Some(Value::String(t)) => {
                    if t != "null" {
                        let t = std::mem::take(t);
                        map.insert(
                            "type".to_owned(),
                            Value::Array(vec![t.into(), null.clone()]),
                        );
                    }
                    true
                }
                Some(Value::Array(list)) => {
                    if !list.contains(&null) {
                        list.push(null.clone());
                    }
                    true
                }
                _ => false,
            };
            if typed && !map.contains_key("anyOf") && !map.contains_key("$ref") {
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    if !values.contains(&Value::Null) {
                        values.push(Value::Null);
                    }
                }
                return;
            }
        }
    }
    let inner = std::mem::take(property);
    *property = serde_json::json!({"anyOf": [inner, {"type": "null"}]});
}

/// Anthropic refuses recursive schemas: a definition that reaches itself through `$ref`s.
fn recursion(schema: &Value, definitions: &BTreeMap<String, &Value>) -> Result<(), NotStrict> {
    let edges: BTreeMap<&str, Vec<String>> = definitions
        .iter()
        .map(|(name, sub)| {
            let mut refs = Vec::new();
            refs_in(sub, &mut refs, 0);
            (name.as_str(), refs)
        })
        .collect();
    // Depth-first search from every definition the root uses, with the path on a stack.
    let mut roots = Vec::new();
    refs_in(schema, &mut roots, 0);
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for root in &roots {
        let Some((start, _)) = edges.get_key_value(root.as_str()) else {
            continue;
        };
        let mut on_path: Vec<&str> = vec![start];
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        while let Some((node, next)) = stack.last_mut() {
            let targets = &edges[*node];
            if *next >= targets.len() {
                done.insert(node);
                stack.pop();
                on_path.pop();
                continue;
            }
            let target = targets[*next].as_str();
            *next += 1;
            if on_path.contains(&target) {
                return Err(NotStrict::Recursive {
                    reference: target.to_owned(),
                });
            }
            if let Some((target, _)) = edges.get_key_value(target) {
                if !done.contains(target) {
                    on_path.push(target);
                    stack.push((target, 0));
                }
            }
        }
    }
    Ok(())
}

/// The `$ref`s under `value`, not entering the definitions themselves (each is an edge
/// source of its own).
fn refs_in(value: &Value, out: &mut Vec<String>, depth: usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            for (key, sub) in map {
                match (key.as_str(), sub) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    ("$defs" | "definitions", _) if depth == 0 => {}
                    _ => refs_in(sub, out, depth + 1),
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| refs_in(v, out, depth + 1)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn openai(schema: Value) -> Result<Value, NotStrict> {
        strict_schema(&schema, StrictDialect::OpenAi)
    }
    fn anthropic(schema: Value) -> Result<Value, NotStrict> {
        strict_schema(&schema, StrictDialect::Anthropic)
    }

    #[test]
    fn nested_objects_are_closed_and_optional_properties_made_nullable() {
        let schema = json!({
            "type": "object",
            "title": "Input",
            "properties": {
                "q": {"type": "string", "minLength": 1, "description": "query"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "filter": {"type": "object", "properties": {"tag": {"type": "string"}},
                           "required": ["tag"]},
                "when": {"$ref": "#/$defs/When"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}
            },
            "required": ["q"],
            "$defs": {"When": {"oneOf": [{"type": "string", "format": "date"},
                                          {"type": "integer", "format": "int64"}]}}
        });
        let out = openai(schema.clone()).unwrap();
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "q": {"type": "string", "description": "query\n\n{minLength: 1}"},
                    "mode": {"type": ["string", "null"], "enum": ["a", "b", null]},
                    "filter": {"type": ["object", "null"], "properties": {"tag": {"type": "string"}},
                               "required": ["tag"], "additionalProperties": false},
                    "when": {"anyOf": [{"$ref": "#/$defs/When"}, {"type": "null"}]},
                    "tags": {"type": ["array", "null"], "items": {"type": "string"},
                             "description": "{uniqueItems: true}"}
                },
                "required": ["filter", "mode", "q", "tags", "when"],
                "additionalProperties": false,
                "$defs": {"When": {"anyOf": [{"type": "string", "format": "date"},
                                              {"type": "integer", "description": "{format: \"int64\"}"}]}}
            })
        );
        let out = anthropic(schema).unwrap();
        assert_eq!(out["required"], json!(["q"]));
        assert_eq!(
            out["properties"]["mode"],
            json!({"type": "string", "enum": ["a", "b"]})
        );
        assert_eq!(out["properties"]["filter"]["additionalProperties"], false);
        assert_eq!(out["additionalProperties"], false);
    }

    #[test]
    fn the_reasons_are_typed() {
        let obj = |p: Value| json!({"type": "object", "properties": {"x": p}});
        assert_eq!(
            openai(json!({"type": "string"})),
            Err(NotStrict::RootNotObject)
        );
        assert_eq!(
            openai(obj(json!({"type": "object", "additionalProperties": true}))),
            Err(NotStrict::OpenObject {
                path: "/properties/x".into()
            })
        );
        assert_eq!(
            anthropic(obj(json!({"not": {"type": "string"}}))),
            Err(NotStrict::Unsupported {
                path: "/properties/x".into(),
                keyword: "not".into()
            })
        );
        assert_eq!(
            openai(obj(json!({"allOf": [{"type": "string"}]}))),
            Err(NotStrict::Unsupported {
                path: "/properties/x".into(),
                keyword: "allOf".into()
            })
        );
        assert!(anthropic(obj(json!({"allOf": [{"type": "string"}]}))).is_ok());
        assert_eq!(
            openai(obj(json!({"$ref": "https://example.com/s.json"}))),
            Err(NotStrict::BadRef {
                path: "/properties/x".into(),
                reference: "https://example.com/s.json".into()
            })
        );
        assert_eq!(
            anthropic(obj(json!({"enum": [{"a": 1}]}))),
            Err(NotStrict::ComplexEnum {
                path: "/properties/x".into()
            })
        );
        assert!(openai(obj(json!({"enum": [{"a": 1}]}))).is_ok());
        assert_eq!(
            openai(obj(json!({"x-vendor": 1}))),
            Err(NotStrict::Unsupported {
                path: "/properties/x".into(),
                keyword: "x-vendor".into()
            })
        );
        assert!(matches!(
            openai(json!({"type": "object", "patternProperties": {}})),
            Err(NotStrict::OpenObject { .. })
        ));
    }

    #[test]
    fn recursion_is_refused_by_anthropic_only() {
        let tree = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "required": ["root"],
            "$defs": {"Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}
        });
        assert!(openai(tree.clone()).is_ok());
        assert_eq!(
            anthropic(tree),
            Err(NotStrict::Recursive {
                reference: "#/$defs/Node".into()
            })
        );
        // A definition used twice is not a cycle.
        let shared = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/P"}, "b": {"$ref": "#/$defs/P"}},
            "$defs": {"P": {"type": "string"}}
        });
        assert!(anthropic(shared).is_ok());
    }

    #[test]
    fn an_optional_union_gets_a_null_branch_once() {
        // What schemars writes for a documented `Option<Address>`.
        let schema = json!({
            "type": "object",
            "properties": {"bill_to": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}],
                                       "description": "Where to bill."},
                           "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            "$defs": {"A": {"type": "object", "properties": {}}}
        });
        let out = openai(schema).unwrap();
        assert_eq!(
            out["properties"]["bill_to"],
            json!({"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}],
                   "description": "Where to bill."})
        );
        assert_eq!(
            out["properties"]["either"],
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})
        );
    }

    #[test]
    fn root_recursion_is_strict_for_openai_and_recursive_for_anthropic() {
        // What schemars writes for `struct Node { name: String, children: Vec<Node> }`.
        let node = json!({
            "type": "object",
            "properties": {"name": {"type": "string"},
                           "children": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["name", "children"]
        });
        let out = openai(node.clone()).unwrap();
        assert_eq!(out["properties"]["children"]["items"], json!({"$ref": "#"}));
        assert_eq!(out["additionalProperties"], false);
        assert_eq!(
            anthropic(node),
            Err(NotStrict::Recursive {
                reference: "#".into()
            })
        );
        // Optional: nullable around the bare reference.
        let next = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
        assert_eq!(
            openai(next).unwrap()["properties"]["next"],
            json!({"anyOf": [{"$ref": "#"}, {"type": "null"}]})
        );
    }

    #[test]
    fn a_ref_beside_other_keywords_is_inlined_for_openai() {
        let order = json!({
            "type": "object",
            "properties": {
                "ship_to": {"$ref": "#/$defs/Address", "description": "Where to ship it."},
                "bill_to": {"$ref": "#/$defs/Address"}
            },
            "required": ["ship_to"],
            "$defs": {"Address": {"type": "object", "description": "A postal address.",
                                  "properties": {"city": {"type": "string", "minLength": 1}},
                                  "required": ["city"]}}
        });
        let out = openai(order.clone()).unwrap();
        assert_eq!(
            out["properties"]["ship_to"],
            json!({"type": "object", "description": "Where to ship it.",
                   "properties": {"city": {"type": "string", "description": "{minLength: 1}"}},
                   "required": ["city"], "additionalProperties": false})
        );
        // A bare reference stays a reference (made nullable, being optional), and the
        // definition it names stays.
        assert_eq!(
            out["properties"]["bill_to"],
            json!({"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]})
        );
        assert!(out["$defs"]["Address"].is_object());
        // Anthropic keeps a description beside the reference, as its SDK does.
        let out = anthropic(order).unwrap();
        assert_eq!(
            out["properties"]["ship_to"],
            json!({"$ref": "#/$defs/Address", "description": "Where to ship it."})
        );
    }

    #[test]
    fn anthropic_moves_a_default_beside_a_ref_into_its_description_and_inlines_the_rest() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/Mode", "default": "x"},
                "b": {"$ref": "#/$defs/Mode", "enum": ["x"]}
            },
            "$defs": {"Mode": {"type": "string", "enum": ["x", "y"]}}
        });
        let out = anthropic(schema).unwrap();
        assert_eq!(
            out["properties"]["a"],
            json!({"$ref": "#/$defs/Mode", "description": "{default: \"x\"}"})
        );
        assert_eq!(
            out["properties"]["b"],
            json!({"type": "string", "enum": ["x"]})
        );
    }

    #[test]
    fn definitions_no_reference_reaches_are_dropped() {
        let schema = json!({
            "type": "object",
            "properties": {"p": {"$ref": "#/definitions/P", "description": "a p"}},
            "definitions": {"P": {"type": "string"}, "Unused": {"type": "integer"}},
            "$defs": {"Chain": {"$ref": "#/$defs/End"}, "End": {"type": "string"}}
        });
        for out in [openai(schema.clone()).unwrap(), anthropic(schema).unwrap()] {
            assert!(out.get("$defs").is_none(), "{out}");
            assert!(out["definitions"].get("Unused").is_none(), "{out}");
        }
        // A definition reached only through another is kept.
        let chain = json!({
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/Chain"}},
            "$defs": {"Chain": {"type": "array", "items": {"$ref": "#/$defs/End"}},
                      "End": {"type": "string"}}
        });
        let out = openai(chain).unwrap();
        assert_eq!(
            out["$defs"].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["Chain", "End"]
        );
    }

    #[test]
    fn a_ref_on_a_cycle_stays_bare_and_its_description_moves_up() {
        // `struct Node { next: Box<Node> }` with a doc comment on `next`.
        let root = json!({
            "type": "object",
            "description": "A node.",
            "properties": {"next": {"$ref": "#", "description": "The next node."}},
            "required": ["next"]
        });
        let out = openai(root).unwrap();
        assert_eq!(out["properties"]["next"], json!({"$ref": "#"}));
        assert_eq!(out["description"], "A node.\n\nnext: The next node.");
        // Through a definition: inlined once, bare inside its own copy.
        let list = json!({
            "type": "object",
            "properties": {"head": {"$ref": "#/$defs/Cell", "description": "First."}},
            "required": ["head"],
            "$defs": {"Cell": {"type": "object", "properties": {
                "rest": {"type": "array", "items": {"$ref": "#/$defs/Cell", "description": "More."}}},
                "required": ["rest"]}}
        });
        let out = openai(list.clone()).unwrap();
        let head = &out["properties"]["head"];
        assert_eq!(head["description"], "First.");
        assert_eq!(
            head["properties"]["rest"]["items"],
            json!({"$ref": "#/$defs/Cell"})
        );
        assert_eq!(head["properties"]["rest"]["description"], "items: More.");
        assert_eq!(
            anthropic(list),
            Err(NotStrict::Recursive {
                reference: "#/$defs/Cell".into()
            })
        );
        // A definition that is itself a described reference to itself ends.
        let alias = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A", "description": "an a"}},
            "$defs": {"A": {"$ref": "#/$defs/A", "description": "itself"}}
        });
        assert!(openai(alias).is_ok());
        // A constraint beside a reference that cannot be inlined cannot be kept.
        let bound = json!({
            "type": "object",
            "properties": {"n": {"$ref": "#", "minItems": 1}}
        });
        assert_eq!(
            openai(bound),
            Err(NotStrict::Unsupported {
                path: "/properties/n".into(),
                keyword: "minItems".into()
            })
        );
    }

    #[test]
    fn inlining_that_fans_out_is_bounded() {
        // Each level names the next twice beside other keywords: 2^40 copies if unbounded.
        let mut defs = Map::new();
        for i in 0..40 {
            let next = format!("#/$defs/D{}", i + 1);
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {
                    "l": {"$ref": next, "description": "l", "minItems": 1},
                    "r": {"$ref": next, "description": "r", "minItems": 1}}}),
            );
        }
        defs.insert("D40".into(), json!({"type": "string"}));
        let schema = json!({"type": "object",
                            "properties": {"root": {"$ref": "#/$defs/D0", "description": "x"}},
                            "$defs": defs});
        for dialect in [StrictDialect::OpenAi, StrictDialect::Anthropic] {
            let err = strict_schema(&schema, dialect).unwrap_err();
            assert!(
                matches!(
                    err,
                    NotStrict::TooComplex { limit: 100_000 } | NotStrict::TooDeep { .. }
                ),
                "{err}"
            );
        }
        // Each inlining is a level deeper: a chain of 70 described references to the next
        // definition ends at the depth limit, though no schema in it nests another.
        let mut chain = Map::new();
        for i in 0..70 {
            chain.insert(
                format!("C{i}"),
                json!({"$ref": format!("#/$defs/C{}", i + 1), "description": "next"}),
            );
        }
        chain.insert("C70".into(), json!({"type": "string"}));
        let schema = json!({"type": "object",
                            "properties": {"p": {"$ref": "#/$defs/C0", "description": "x"}},
                            "$defs": chain});
        assert_eq!(openai(schema), Err(NotStrict::TooDeep { limit: 64 }));
        // The budget counts subschemas, the root included: 100,000 pass, one more does not.
        let flat = |n: usize| {
            let props: Map<String, Value> = (0..n)
                .map(|i| (format!("p{i}"), json!({"type": "string"})))
                .collect();
            json!({"type": "object", "properties": props})
        };
        assert!(anthropic(flat(99_999)).is_ok());
        assert_eq!(
            anthropic(flat(100_000)),
            Err(NotStrict::TooComplex { limit: 100_000 })
        );
        // Wide, through unions (no object to count): the node budget is what stops it.
        let mut wide = Map::new();
        for i in 0..20 {
            let next = format!("#/$defs/W{}", i + 1);
            let branches: Vec<Value> = (0..4)
                .map(|_| json!({"$ref": next, "description": "d", "minItems": 1}))
                .collect();
            wide.insert(format!("W{i}"), json!({"anyOf": branches}));
        }
        wide.insert("W20".into(), json!({"type": "string"}));
        let schema = json!({"type": "object",
                            "properties": {"root": {"$ref": "#/$defs/W0", "description": "x"}},
                            "$defs": wide});
        for dialect in [StrictDialect::OpenAi, StrictDialect::Anthropic] {
            assert_eq!(
                strict_schema(&schema, dialect),
                Err(NotStrict::TooComplex { limit: 100_000 })
            );
        }
    }

    #[test]
    fn openai_limits_enum_values_and_text() {
        let values = |n: usize, len: usize| -> Vec<Value> {
            (0..n)
                .map(|i| Value::String(format!("{i:0len$}")))
                .collect()
        };
        let with = |props: Vec<(String, Value)>| json!({"type": "object", "properties": props.into_iter().collect::<Map<_, _>>()});
        // 1,000 values in all pass; one more does not.
        let enums = |counts: &[usize]| {
            with(
                counts
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (format!("e{i}"), json!({"enum": values(*n, 4)})))
                    .collect(),
            )
        };
        assert!(openai(enums(&[500, 500])).is_ok());
        assert_eq!(
            openai(enums(&[500, 501])),
            Err(NotStrict::TooMuch {
                what: "enum values in all",
                limit: 1_000
            })
        );
        assert!(anthropic(enums(&[500, 501])).is_ok());
        // More than 250 strings: at most 15,000 characters; 250 may be longer.
        let long = |n: usize, len: usize| with(vec![("e".into(), json!({"enum": values(n, len)}))]);
        assert!(openai(long(251, 59)).is_ok());
        assert_eq!(
            openai(long(251, 60)),
            Err(NotStrict::TooMuch {
                what: "characters in one enum of more than 250 strings",
                limit: 15_000
            })
        );
        assert!(openai(long(250, 60)).is_ok());
        assert!(openai(long(250, 61)).is_ok(), "250 strings may be longer");
        // 251 strings of exactly 15,000 characters in all pass.
        let mut exact = values(250, 60);
        exact.push(json!(""));
        assert!(openai(with(vec![("e".into(), json!({"enum": exact}))])).is_ok());
        // Names and values: 120,000 characters in all.
        let text = |name_len: usize| {
            with(vec![(
                "n".repeat(name_len),
                json!({"const": "c".repeat(60_000)}),
            )])
        };
        assert!(openai(text(60_000)).is_ok());
        assert_eq!(
            openai(text(60_001)),
            Err(NotStrict::TooMuch {
                what: "characters of names and values",
                limit: 120_000
            })
        );
        // Definition names count too: 1 + 119,997 + 1 characters, and "DD".
        let def = |name: &str| {
            let reference = format!("#/$defs/{name}");
            json!({"type": "object",
                   "properties": {"c": {"const": "c".repeat(119_997)}, "d": {"$ref": reference}},
                   "$defs": {name: {"type": "string"}}})
        };
        assert!(openai(def("D")).is_ok());
        assert!(matches!(
            openai(def("DD")),
            Err(NotStrict::TooMuch { limit: 120_000, .. })
        ));
    }

    #[test]
    fn openai_limits_depth_and_size() {
        let mut deep = json!({"type": "object", "properties": {}});
        for _ in 0..10 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        assert_eq!(openai(deep.clone()), Err(NotStrict::TooDeep { limit: 10 }));
        assert!(anthropic(deep).is_ok());
        let many: Map<String, Value> = (0..5_001)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        let wide = json!({"type": "object", "properties": many});
        assert_eq!(openai(wide), Err(NotStrict::TooLarge { limit: 5_000 }));
    }

    fn arb_schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({"type": "string"})),
            Just(json!({"type": "integer", "minimum": 0, "format": "uint32"})),
            Just(json!({"type": "string", "enum": ["a", "b"]})),
            Just(json!({"type": "boolean", "default": true})),
            Just(json!({"type": "string", "maxLength": 3})),
            Just(json!({"type": "object", "additionalProperties": {"type": "string"}})),
            Just(json!({"not": {"type": "string"}})),
            Just(json!({"$ref": "#/$defs/D"})),
            Just(json!({"$ref": "#/$defs/D", "description": "a d", "default": {"x": "y"}})),
            Just(json!({"$ref": "#", "description": "the root again"})),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::btree_map("[a-c]{1,2}", inner.clone(), 0..4)
                    .prop_flat_map(|props| {
                        let names: Vec<String> = props.keys().cloned().collect();
                        (
                            Just(props),
                            prop::sample::subsequence(names.clone(), 0..=names.len()),
                        )
                    })
                    .prop_map(|(props, required)| {
                        json!({"type": "object", "properties": props, "required": required})
                    }),
                inner
                    .clone()
                    .prop_map(|i| json!({"type": "array", "items": i})),
                prop::collection::vec(inner, 1..3).prop_map(|v| json!({"anyOf": v})),
            ]
        })
    }

    /// What the providers check of a strict schema, written independently of the walk.
    fn closed_and_required(schema: &Value, openai: bool) -> bool {
        match schema {
            Value::Object(map) => {
                if let Some(props) = map.get("properties").and_then(Value::as_object) {
                    if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                        return false;
                    }
                    if openai {
                        let req: BTreeSet<&str> = map["required"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(Value::as_str)
                            .collect();
                        if req != props.keys().map(String::as_str).collect() {
                            return false;
                        }
                    }
                }
                // No keyword beside a `$ref` (OpenAI), none but a description (Anthropic).
                if map.contains_key("$ref")
                    && map
                        .keys()
                        .any(|k| k != "$ref" && (openai || k != "description"))
                {
                    return false;
                }
                let bad = ["minLength", "maxLength", "not", "oneOf"];
                if bad.iter().any(|k| map.contains_key(*k)) {
                    return false;
                }
                if !openai
                    && (map.contains_key("minimum")
                        || map.contains_key("format") && map["format"] == "uint32")
                {
                    return false;
                }
                map.values().all(|v| closed_and_required(v, openai))
            }
            Value::Array(list) => list.iter().all(|v| closed_and_required(v, openai)),
            _ => true,
        }
    }

    proptest! {
        #[test]
        fn normalised_schemas_are_strict_and_stable(props in prop::collection::btree_map("[a-d]{1,2}", arb_schema(), 0..5)) {
            let schema = json!({"type": "object", "properties": props,
                                "$defs": {"D": {"type": "object", "description": "A d.",
                                                "properties": {"x": {"type": "string"}}}}});
            for dialect in [StrictDialect::OpenAi, StrictDialect::Anthropic] {
                let text = schema.to_string();
                match strict_schema(&schema, dialect) {
                    Ok(out) => {
                        prop_assert!(closed_and_required(&out, dialect == StrictDialect::OpenAi), "{out}");
                        // Normalising twice changes nothing more.
                        let again = strict_schema(&out, dialect);
                        prop_assert_eq!(again, Ok(out));
                    }
                    Err(NotStrict::OpenObject { .. } | NotStrict::Unsupported { .. }) => {
                        prop_assert!(text.contains("additionalProperties") || text.contains("\"not\""));
                    }
                    Err(NotStrict::Recursive { reference }) => {
                        prop_assert_eq!(dialect, StrictDialect::Anthropic);
                        prop_assert_eq!(reference, "#");
                    }
                    Err(other) => prop_assert!(false, "{other}"),
                }
            }
        }
    }
}
