//! The pure half of MCP support: tool names, input schemas and call results, from the
//! server's JSON to what the registry and the model take. No I/O; every input is untrusted.

use serde_json::{Map, Value};

use agent_loop::media::Image;
use agent_loop::{ToolError, ToolOutput};

/// Longest tool name both providers take.
const MAX_NAME: usize = 64;
/// A text resource longer than this is cut (the registry's output cap applies on top).
const MAX_INLINE_RESOURCE: usize = 256 * 1024;

/// The name the model calls an MCP tool by: `prefix` + the server's name, with every
/// character outside `[a-zA-Z0-9_-]` replaced by `_`, cut to 64 characters. MCP allows dots
/// and slashes in names; the providers do not.
pub(crate) fn tool_name(prefix: &str, name: &str) -> String {
    let mut out: String = prefix
        .chars()
        .chain(name.chars())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// The input schema as the registry takes it: `$schema` dropped (providers need none, and
/// the registry checks arguments with its own draft), `"type": "object"` added when the
/// schema names no type and is no union (`{}` is a tool without parameters).
pub(crate) fn input_schema(schema: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    schema.remove("$schema");
    let union = ["oneOf", "anyOf", "allOf", "$ref"]
        .iter()
        .any(|k| schema.contains_key(*k));
    if !schema.contains_key("type") && !union {
        schema.insert("type".into(), Value::from("object"));
    }
    Value::Object(schema)
}

/// A progress notification as a note: `3/5`, `3` without a total, then the message.
pub(crate) fn progress_text(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let mut text = match total {
        Some(total) => format!("{progress}/{total}"),
        None => format!("{progress}"),
    };
    if let Some(message) = message.filter(|m| !m.is_empty()) {
        let (message, _) = cut_at(message, 1024);
        text.push_str(": ");
        text.push_str(message);
    }
    text
}

/// An image from a call result, as the server sent it (base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct McpImage {
    pub(crate) mime_type: String,
    pub(crate) data: String,
}

/// What a call result becomes: the text the model reads, the images it returned, and
/// whether the server flagged it as an error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mapped {
    pub(crate) text: String,
    pub(crate) images: Vec<McpImage>,
    pub(crate) is_error: bool,
    /// `structuredContent`, when the text does not already say the same.
    pub(crate) structured: Option<Value>,
}

/// Maps an MCP `CallToolResult` (as JSON) to text, images and the error flag.
///
/// Text content is kept as is; images are collected (and named in the text, so a model
/// that is not sent the image knows one came back); audio is named; embedded text resources
/// are inlined under their URI, binary ones named with their size; resource links are
/// named; content of a type this crate does not know is named by its type.
/// `structuredContent` is passed on as JSON unless a text block already holds the same JSON
/// (servers are asked to send both).
pub(crate) fn map_result(result: &Value) -> Mapped {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let content = result.get("content").and_then(Value::as_array);
    let mut texts_as_json: Vec<Value> = Vec::new();
    for block in content.into_iter().flatten() {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let str_field = |name: &str| block.get(name).and_then(Value::as_str);
        match kind {
            "text" => {
                let text = str_field("text").unwrap_or("");
                if let Ok(json) = serde_json::from_str::<Value>(text) {
                    texts_as_json.push(json);
                }
                parts.push(text.to_owned());
            }
            "image" => {
                let mime_type = str_field("mimeType").unwrap_or("application/octet-stream");
                let data = str_field("data").unwrap_or("");
                parts.push(format!(
                    "[image: {mime_type}, {} bytes]",
                    base64_decoded_len(data)
                ));
                images.push(McpImage {
                    mime_type: mime_type.to_owned(),
                    data: data.to_owned(),
                });
            }
            "audio" => {
                let mime_type = str_field("mimeType").unwrap_or("application/octet-stream");
                let data = str_field("data").unwrap_or("");
                parts.push(format!(
                    "[audio: {mime_type}, {} bytes, not shown]",
                    base64_decoded_len(data)
                ));
            }
            "resource" => parts.push(embedded_resource(block.get("resource"))),
            "resource_link" => {
                let uri = str_field("uri").unwrap_or("");
                let name = str_field("name").unwrap_or("");
                let mut line = format!("[resource link: {uri}");
                if !name.is_empty() {
                    line.push_str(&format!(" ({name})"));
                }
                if let Some(mime) = str_field("mimeType") {
                    line.push_str(&format!(", {mime}"));
                }
                line.push(']');
                parts.push(line);
            }
            other => parts.push(format!(
                "[content of unknown type {}, not shown]",
                quote(other)
            )),
        }
    }
    let text = parts.join("\n");
    let structured = result
        .get("structuredContent")
        .filter(|s| !texts_as_json.iter().any(|t| t == *s) && !says_it_all(&text, s))
        .cloned();
    Mapped {
        text,
        images,
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        structured,
    }
}

/// Whether `text` already carries the structured content: it has string values and every
/// one of them is in the text (the filesystem server's `{"content": <the text>}`).
fn says_it_all(text: &str, structured: &Value) -> bool {
    fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>, depth: usize) {
        match value {
            Value::String(s) => out.push(s),
            Value::Array(items) if depth < 32 => {
                items.iter().for_each(|v| strings(v, out, depth + 1))
            }
            Value::Object(map) if depth < 32 => {
                map.values().for_each(|v| strings(v, out, depth + 1))
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    strings(structured, &mut found, 0);
    !text.is_empty() && !found.is_empty() && found.iter().all(|s| text.contains(s))
}

fn embedded_resource(resource: Option<&Value>) -> String {
    let Some(resource) = resource else {
        return "[resource without contents]".to_owned();
    };
    let field = |name: &str| resource.get(name).and_then(Value::as_str);
    let uri = field("uri").unwrap_or("");
    let mime = field("mimeType")
        .map(|m| format!(", {m}"))
        .unwrap_or_default();
    if let Some(text) = field("text") {
        let (text, cut) = cut_at(text, MAX_INLINE_RESOURCE);
        let more = if cut { "\n[... resource cut ...]" } else { "" };
        format!("[resource: {uri}{mime}]\n{text}{more}")
    } else if let Some(blob) = field("blob") {
        format!(
            "[resource: {uri}{mime}, binary, {} bytes, not shown]",
            base64_decoded_len(blob)
        )
    } else {
        format!("[resource: {uri}{mime}, no contents]")
    }
}

/// The length of the bytes a base64 text decodes to (padding and whitespace aside).
fn base64_decoded_len(data: &str) -> usize {
    let digits = data
        .bytes()
        .filter(|b| {
            b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/' || *b == b'-' || *b == b'_'
        })
        .count();
    digits * 3 / 4
}

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
pub(crate) fn cut_at(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text.get(..end).unwrap_or(""), true)
}

/// The tool's answer: text (with structured content as JSON after it) and the images, or an
/// error. An image that fails the crate's checks (bad base64, a format the providers do not
/// take, too large) is not sent; the text says why.
pub(crate) fn into_output(mapped: Mapped) -> Result<ToolOutput, ToolError> {
    let Mapped {
        mut text,
        images,
        is_error,
        structured,
    } = mapped;
    let mut valid = Vec::new();
    for image in images {
        match Image::from_base64(&image.mime_type, &image.data) {
            Ok(image) => valid.push(image),
            Err(e) => text.push_str(&format!(
                "\n[an image ({}) was not sent: {e}]",
                image.mime_type
            )),
        }
    }
    if let Some(structured) = structured {
        if text.is_empty() && !is_error {
            return Ok(ToolOutput::Json(structured));
        }
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&structured.to_string());
    }
    if is_error {
        if text.is_empty() {
            text = "the tool reported an error without a message".to_owned();
        }
        return Err(ToolError::new(text));
    }
    if valid.is_empty() {
        Ok(ToolOutput::Text(text))
    } else {
        Ok(ToolOutput::with_images(text, valid))
    }
}

/// A name in double quotes, JSON-escaped and cut to 100 bytes (names from a server are
/// untrusted text).
pub(crate) fn quote(name: &str) -> String {
    let mut quoted = Value::from(name).to_string();
    if quoted.len() > 100 {
        let mut end = 100;
        while !quoted.is_char_boundary(end) {
            end -= 1;
        }
        quoted.truncate(end);
        quoted.push('…');
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn names_are_made_valid_for_the_providers() {
        assert_eq!(tool_name("", "echo"), "echo");
        assert_eq!(tool_name("fs_", "read.file/v2"), "fs_read_file_v2");
        assert_eq!(tool_name("", ""), "_");
        assert_eq!(tool_name("", "é"), "_");
        let long = "x".repeat(100);
        assert_eq!(tool_name("p_", &long).len(), 64);
        assert!(tool_name("p_", &long).starts_with("p_x"));
    }

    #[test]
    fn schemas_lose_dollar_schema_and_gain_an_object_type() {
        let raw = json!({"$schema": "http://json-schema.org/draft-07/schema#", "properties": {}});
        let Value::Object(raw) = raw else {
            unreachable!()
        };
        assert_eq!(
            input_schema(&raw),
            json!({"type": "object", "properties": {}})
        );
        let union = json!({"oneOf": [{"type": "object"}]});
        let Value::Object(union) = union else {
            unreachable!()
        };
        assert_eq!(input_schema(&union), json!({"oneOf": [{"type": "object"}]}));
    }

    #[test]
    fn every_content_kind_is_kept() {
        let result = json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAAAAAA"}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"},
                {"type": "hologram"}
            ]
        });
        let mapped = map_result(&result);
        assert_eq!(
            mapped.text,
            "hello\n[image: image/png, 8 bytes]\n[audio: audio/wav, 3 bytes, not shown]\n\
             [resource: file:///a.txt, text/plain]\ninside\n\
             [resource: file:///b.bin, binary, 6 bytes, not shown]\n\
             [resource link: file:///c (c)]\n[content of unknown type \"hologram\", not shown]"
        );
        assert_eq!(
            mapped.images,
            [McpImage {
                mime_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            }]
        );
        assert!(!mapped.is_error);
        // "iVBORw0KGgo=" is a PNG signature alone: not an image the providers take.
        let output = into_output(mapped.clone()).unwrap();
        assert!(output.images().is_empty());
        let text = output.into_text();
        assert!(text.starts_with(&mapped.text), "{text}");
        assert!(
            text.contains("\n[an image (image/png) was not sent: "),
            "{text}"
        );
    }

    #[test]
    fn structured_content_is_passed_on_once() {
        // Sent beside the same JSON as text: the text says it already.
        let both = json!({"content": [{"type": "text", "text": "{\"t\":33}"}], "structuredContent": {"t": 33}});
        assert_eq!(
            into_output(map_result(&both)).unwrap(),
            ToolOutput::text("{\"t\":33}")
        );
        // Alone: JSON output.
        let alone = json!({"structuredContent": {"t": 33}});
        assert_eq!(
            into_output(map_result(&alone)).unwrap(),
            ToolOutput::json(json!({"t": 33}))
        );
        // Beside text that holds its strings: the text says it.
        let wrapped = json!({"content": [{"type": "text", "text": "milk\n"}], "structuredContent": {"content": "milk\n"}});
        assert_eq!(
            into_output(map_result(&wrapped)).unwrap(),
            ToolOutput::text("milk\n")
        );
        // Beside other text: appended.
        let other = json!({"content": [{"type": "text", "text": "weather"}], "structuredContent": {"t": 33}});
        assert_eq!(
            into_output(map_result(&other)).unwrap(),
            ToolOutput::text("weather\n{\"t\":33}")
        );
    }

    #[test]
    fn is_error_becomes_an_error() {
        let failed =
            json!({"content": [{"type": "text", "text": "no such file"}], "isError": true});
        assert_eq!(
            into_output(map_result(&failed)).unwrap_err().message(),
            "no such file"
        );
        let silent = json!({"isError": true});
        assert!(into_output(map_result(&silent))
            .unwrap_err()
            .message()
            .contains("without a message"));
    }

    #[test]
    fn long_text_resources_are_cut_on_a_char_boundary() {
        let text = "é".repeat(MAX_INLINE_RESOURCE);
        let result =
            json!({"content": [{"type": "resource", "resource": {"uri": "u", "text": text}}]});
        let mapped = map_result(&result);
        assert!(mapped.text.len() < MAX_INLINE_RESOURCE + 100);
        assert!(mapped.text.ends_with("[... resource cut ...]"));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            ".{0,20}".prop_map(Value::from),
            prop_oneof![
                Just("text"),
                Just("image"),
                Just("audio"),
                Just("resource"),
                Just("resource_link"),
                Just("content"),
                Just("isError"),
                Just("structuredContent"),
                Just("type"),
                Just("data"),
                Just("uri")
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("type".to_owned()),
                        Just("text".to_owned()),
                        Just("content".to_owned()),
                        Just("resource".to_owned()),
                        Just("data".to_owned()),
                        Just("mimeType".to_owned()),
                        Just("isError".to_owned()),
                        Just("structuredContent".to_owned()),
                        Just("blob".to_owned()),
                        ".{0,6}".prop_map(String::from)
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever a server sends, mapping never panics and an error flag is never lost.
        #[test]
        fn any_result_maps_without_panicking(result in arb_json()) {
            let mapped = map_result(&result);
            let flagged = result.get("isError") == Some(&Value::Bool(true));
            prop_assert_eq!(mapped.is_error, flagged);
            prop_assert_eq!(into_output(mapped).is_err(), flagged);
        }

        #[test]
        fn names_always_pass_the_registry(prefix in ".{0,10}", name in ".{0,80}") {
            let name = tool_name(&prefix, &name);
            let tool = agent_loop::tool::FnTool::new(name.clone(), "A tool.", |_: Value, _ctx| async {
                Ok::<_, ToolError>("")
            });
            prop_assert!(agent_loop::ToolRegistry::new().register(tool).is_ok(), "{}", name);
        }
    }
}
