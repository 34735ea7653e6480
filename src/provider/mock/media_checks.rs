//! The [`MockServer`](super::MockServer)'s check of images and documents in a request: what
//! the real APIs refuse with a `400`, the mock refuses too, so a block shape that only the
//! mock would accept fails in tests rather than in production.
//!
//! Anthropic (Messages API, vision and PDF support docs):
//! - `image` blocks only in user messages (and inside `tool_result` content); the source is
//!   `base64` with a media type of `image/jpeg`, `image/png`, `image/gif` or `image/webp`,
//!   data that decodes, matches that type and is at most 5 MB, or a `url`.
//! - `document` blocks only in user messages, `application/pdf` base64 or a `url`.
//! - `tool_result` content is a string or an array of `text`, `image` and `document` blocks.
//!
//! OpenAI (Chat Completions):
//! - `image_url` parts only in user messages; the URL is `http(s)` or a base64 `data:` URL of
//!   one of the four image types.
//! - `file` parts only in user messages, with a `filename` and base64 `file_data`.
//! - `tool` messages carry a string or `text` parts only.
//!
//! OpenAI (Responses, `ResponseInputImageParam` / `ResponseInputFileParam`):
//! - `input_image` and `input_file` parts only in user messages and in a
//!   `function_call_output`'s output list (which holds `input_text`, `input_image` and
//!   `input_file` parts only); `input_image` has a `detail` and an `http(s)` or base64 image
//!   `data:` URL; `input_file` has a PDF `data:` URL in `file_data`, a `file_url` or a
//!   `file_id`.

use base64::Engine as _;
use serde_json::Value;

use super::Rejection;
use crate::media::ImageFormat;
use crate::provider::media_limits::ANTHROPIC_MAX_IMAGE_BASE64;
use crate::wire::WireFormat;

/// The first image or document block in `body` the provider refuses, described as it does.
pub(crate) fn rejection(format: WireFormat, body: &Value) -> Option<Rejection> {
    if format == WireFormat::OpenAiResponses {
        return responses(body);
    }
    let messages = body.get("messages")?.as_array()?;
    messages.iter().enumerate().find_map(|(i, m)| {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = m.get("content")?.as_array()?;
        content.iter().enumerate().find_map(|(j, block)| {
            let at = format!("messages.{i}.content.{j}");
            match format {
                WireFormat::Anthropic => anthropic_block(&at, role, block, false),
                _ => openai_part(&at, role, block),
            }
        })
    })
}

fn invalid(message: String) -> Option<Rejection> {
    Some(Rejection {
        error_type: "invalid_request_error",
        code: None,
        message,
    })
}

fn anthropic_block(at: &str, role: &str, block: &Value, in_result: bool) -> Option<Rejection> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "image" | "document" if role != "user" => invalid(format!(
            "{at}.type: `{kind}` blocks are only allowed in user messages"
        )),
        "image" => anthropic_source(at, block.get("source"), true),
        "document" => anthropic_source(at, block.get("source"), false),
        "tool_result" if !in_result => match block.get("content") {
            None | Some(Value::String(_)) => None,
            Some(Value::Array(parts)) => parts.iter().enumerate().find_map(|(k, part)| {
                let at = format!("{at}.content.{k}");
                match part.get("type").and_then(Value::as_str) {
                    Some("text" | "image" | "document" | "search_result") => {
                        anthropic_block(&at, role, part, true)
                    }
                    other => invalid(format!(
                        "{at}.type: tool_result content may hold text, image and document \
                         blocks, not {}",
                        other.unwrap_or("(none)")
                    )),
                }
            }),
            Some(_) => invalid(format!(
                "{at}.content: Input should be a valid string or list"
            )),
        },
        _ => None,
    }
}

fn anthropic_source(at: &str, source: Option<&Value>, image: bool) -> Option<Rejection> {
    let Some(source) = source else {
        return invalid(format!("{at}.source: Field required"));
    };
    match source.get("type").and_then(Value::as_str) {
        Some("url") => match source.get("url").and_then(Value::as_str) {
            Some(url) if url.starts_with("https://") || url.starts_with("http://") => None,
            _ => invalid(format!("{at}.source.url: must be an http(s) URL")),
        },
        Some("base64") => {
            let media_type = source
                .get("media_type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let data = source
                .get("data")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if image {
                let Some(format) = ImageFormat::from_media_type(media_type)
                    .filter(|f| f.media_type() == media_type)
                else {
                    return invalid(format!(
                        "{at}.source.media_type: Input should be 'image/jpeg', 'image/png', \
                         'image/gif' or 'image/webp'"
                    ));
                };
                if data.len() > ANTHROPIC_MAX_IMAGE_BASE64 {
                    return invalid(format!(
                        "{at}.source.base64: image exceeds 5 MB maximum: {} bytes > {} bytes",
                        data.len(),
                        ANTHROPIC_MAX_IMAGE_BASE64
                    ));
                }
                let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
                    return invalid(format!("{at}.source.base64: invalid base64 data"));
                };
                if ImageFormat::sniff(&bytes) != Some(format) {
                    return invalid(format!(
                        "{at}.source.base64.data: Image does not match the provided media \
                         type {media_type}"
                    ));
                }
                None
            } else if media_type != "application/pdf" {
                invalid(format!(
                    "{at}.source.media_type: Input should be 'application/pdf'"
                ))
            } else if base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_or(true, |b| !b.starts_with(b"%PDF-"))
            {
                invalid(format!(
                    "{at}.source.base64.data: The PDF specified was not valid"
                ))
            } else {
                None
            }
        }
        _ => invalid(format!(
            "{at}.source.type: Input tag does not match any of the expected tags: 'base64', \
             'url'"
        )),
    }
}

/// An OpenAI image URL (Chat `image_url.url`, Responses `image_url`): `http(s)`, or a base64
/// `data:` URL of one of the four image types that decodes.
fn image_url(at: &str, url: Option<&str>) -> Option<Rejection> {
    let url = url.unwrap_or_default();
    if url.starts_with("https://") || url.starts_with("http://") {
        return None;
    }
    let data = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
        .filter(|(media_type, _)| ImageFormat::from_media_type(media_type).is_some())
        .map(|(_, data)| data);
    match data {
        Some(data)
            if base64::engine::general_purpose::STANDARD
                .decode(data)
                .is_ok() =>
        {
            None
        }
        _ => invalid(format!(
            "Invalid '{at}': expected a URL or a base64 data URL of image/png, image/jpeg, \
             image/gif or image/webp"
        )),
    }
}

fn openai_part(at: &str, role: &str, part: &Value) -> Option<Rejection> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    if role == "tool" && kind != "text" {
        return invalid(format!(
            "Invalid '{at}.type': tool messages may only contain text parts, not '{kind}'"
        ));
    }
    match kind {
        "image_url" | "file" if role != "user" => invalid(format!(
            "Invalid '{at}': '{kind}' parts are only allowed for messages with role 'user', \
             not '{role}'"
        )),
        "image_url" => {
            let url = part.pointer("/image_url/url").and_then(Value::as_str);
            image_url(&format!("{at}.image_url.url"), url)
        }
        "file" => {
            let data = part
                .pointer("/file/file_data")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if part
                .pointer("/file/filename")
                .and_then(Value::as_str)
                .is_none()
            {
                return invalid(format!("Missing required parameter: '{at}.file.filename'"));
            }
            if !data.starts_with("data:application/pdf;base64,") {
                return invalid(format!(
                    "Invalid '{at}.file.file_data': expected a base64 data URL of a PDF"
                ));
            }
            None
        }
        _ => None,
    }
}

fn responses(body: &Value) -> Option<Rejection> {
    let items = body.get("input")?.as_array()?;
    items.iter().enumerate().find_map(|(i, item)| {
        let at = format!("input[{i}]");
        match item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message")
        {
            "message" => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
                let parts = item.get("content")?.as_array()?;
                parts.iter().enumerate().find_map(|(j, part)| {
                    responses_part(&format!("{at}.content[{j}]"), role == "user", part)
                })
            }
            "function_call_output" => {
                let parts = item.get("output")?.as_array()?;
                parts.iter().enumerate().find_map(|(j, part)| {
                    let at = format!("{at}.output[{j}]");
                    match part.get("type").and_then(Value::as_str) {
                        Some("input_text" | "input_image" | "input_file") => {
                            responses_part(&at, true, part)
                        }
                        other => invalid(format!(
                            "Invalid value for '{at}.type': expected 'input_text', \
                             'input_image' or 'input_file', got {:?}",
                            other.unwrap_or_default()
                        )),
                    }
                })
            }
            _ => None,
        }
    })
}

fn responses_part(at: &str, user: bool, part: &Value) -> Option<Rejection> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "input_image" | "input_file" if !user => invalid(format!(
            "Invalid '{at}': '{kind}' parts are only allowed in user messages and function \
             call outputs"
        )),
        "input_image" => {
            if part.get("detail").and_then(Value::as_str).is_none() {
                return invalid(format!("Missing required parameter: '{at}.detail'"));
            }
            if part.get("file_id").and_then(Value::as_str).is_some() {
                return None;
            }
            let url = part.get("image_url").and_then(Value::as_str);
            image_url(&format!("{at}.image_url"), url)
        }
        "input_file" => {
            let data = part.get("file_data").and_then(Value::as_str);
            let url = part.get("file_url").and_then(Value::as_str);
            let id = part.get("file_id").and_then(Value::as_str);
            match (data, url, id) {
                (Some(data), _, _) if !data.starts_with("data:application/pdf;base64,") => invalid(
                    format!("Invalid '{at}.file_data': expected a base64 data URL of a PDF"),
                ),
                (Some(_), _, _) | (_, Some(_), _) | (_, _, Some(_)) => None,
                _ => invalid(format!(
                    "Invalid '{at}': one of 'file_data', 'file_url' or 'file_id' is required"
                )),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn responses_refuses_what_its_types_refuse() {
        let user = |part: Value| json!({"input": [{"type": "message", "role": "user", "content": [part]}]});
        let png = format!("data:image/png;base64,{}", png_b64());
        let ok = [
            user(json!({"type": "input_image", "image_url": png, "detail": "auto"})),
            user(
                json!({"type": "input_image", "image_url": "https://e.com/a.png", "detail": "low"}),
            ),
            user(
                json!({"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=",
                        "filename": "a.pdf"}),
            ),
            user(json!({"type": "input_file", "file_url": "https://e.com/a.pdf"})),
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": [
                {"type": "input_text", "text": "t"},
                {"type": "input_image", "image_url": png, "detail": "auto"}]}]}),
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "text"}]}),
        ];
        for body in ok {
            assert!(
                rejection(WireFormat::OpenAiResponses, &body).is_none(),
                "{body}"
            );
        }
        let bad = [
            user(json!({"type": "input_image", "image_url": png})),
            user(
                json!({"type": "input_image", "image_url": "data:image/tiff;base64,AA==", "detail": "auto"}),
            ),
            user(json!({"type": "input_file", "file_data": "data:text/plain;base64,AA=="})),
            user(json!({"type": "input_file", "filename": "a.pdf"})),
            json!({"input": [{"type": "message", "role": "assistant", "content": [
                {"type": "input_image", "image_url": "https://e.com/a.png", "detail": "auto"}]}]}),
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": [
                {"type": "output_text", "text": "t"}]}]}),
        ];
        for body in bad {
            assert!(
                rejection(WireFormat::OpenAiResponses, &body).is_some(),
                "{body}"
            );
        }
    }

    fn png_b64() -> String {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0, 0, 0, 0]);
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    #[test]
    fn anthropic_refuses_what_its_docs_refuse() {
        let body =
            |role: &str, block: Value| json!({"messages": [{"role": role, "content": [block]}]});
        let image = |media_type: &str, data: String| json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}});
        let ok = body("user", image("image/png", png_b64()));
        assert_eq!(rejection(WireFormat::Anthropic, &ok), None);
        for bad in [
            body("assistant", image("image/png", png_b64())),
            body("user", image("image/jpeg", png_b64())),
            body("user", image("image/bmp", png_b64())),
            body("user", image("image/png", "%%%".into())),
            body("user", json!({"type": "image", "source": {"type": "file"}})),
            body(
                "user",
                json!({"type": "image", "source": {"type": "url", "url": "ftp://x"}}),
            ),
            body(
                "user",
                json!({"type": "document", "source": {"type": "base64",
                        "media_type": "application/pdf", "data": png_b64()}}),
            ),
            body(
                "user",
                json!({"type": "tool_result", "tool_use_id": "t",
                        "content": [{"type": "tool_use", "id": "x"}]}),
            ),
            body(
                "user",
                json!({"type": "tool_result", "tool_use_id": "t",
                        "content": [image("image/gif", png_b64())]}),
            ),
        ] {
            assert!(rejection(WireFormat::Anthropic, &bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn openai_refuses_what_its_docs_refuse() {
        let part = |url: String| json!({"type": "image_url", "image_url": {"url": url}});
        let body = |role: &str, p: Value| json!({"messages": [{"role": role, "content": [p]}]});
        let data = format!("data:image/png;base64,{}", png_b64());
        assert_eq!(
            rejection(WireFormat::OpenAiChat, &body("user", part(data.clone()))),
            None
        );
        assert_eq!(
            rejection(
                WireFormat::OpenAiChat,
                &body("user", part("https://x/y.png".into()))
            ),
            None
        );
        for bad in [
            body("assistant", part(data.clone())),
            body("tool", part(data.clone())),
            body("user", part("data:image/bmp;base64,AAAA".into())),
            body("user", part("file:///etc/passwd".into())),
            body(
                "user",
                json!({"type": "file", "file": {"file_data": "data:application/pdf;base64,AA"}}),
            ),
            body(
                "user",
                json!({"type": "file", "file": {"filename": "a", "file_data": "JVBERi0="}}),
            ),
        ] {
            assert!(rejection(WireFormat::OpenAiChat, &bad).is_some(), "{bad}");
        }
    }
}
