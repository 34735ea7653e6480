//! Conformance with the official SDKs, on real recorded streams.
//!
//! `../shared/transcripts/` (or `$AGENT_LOOP_TRANSCRIPTS`) holds raw SSE bodies and what the
//! official Python SDK assembles from each (`*.sdk.json`). They are read at run time and never
//! copied into the repository. Where we differ from the SDK on purpose, the difference is
//! written down in `expected_from_sdk`.

use crate::common;

use std::path::PathBuf;

use agent_loop::wire::{InvalidToolCallReason, WireFormat};
use agent_loop::StopReason;
use serde_json::{json, Value};

fn transcripts_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("AGENT_LOOP_TRANSCRIPTS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/transcripts"),
    };
    dir.is_dir().then_some(dir)
}

fn transcripts() -> Option<Vec<(String, Vec<u8>, Value)>> {
    let dir = transcripts_dir()?;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).ok()? {
        let path = entry.ok()?.path();
        if path.extension().is_some_and(|e| e == "sse") {
            let name = path.file_stem()?.to_string_lossy().into_owned();
            if name.starts_with("openai_responses_") {
                // Responses transcripts are checked by tests/providers/responses.rs.
                continue;
            }
            let body = std::fs::read(&path).ok()?;
            let sdk: Value =
                serde_json::from_slice(&std::fs::read(path.with_extension("sdk.json")).ok()?)
                    .ok()?;
            out.push((name, body, sdk));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Some(out)
}

/// The SDK's result, adjusted where the crate differs from the SDK by design.
fn expected_from_sdk(name: &str, sdk: &Value) -> Value {
    let mut content: Vec<Value> = sdk["content"].as_array().cloned().unwrap_or_default();
    content.retain(|b| {
        // Empty text blocks are dropped: Anthropic rejects them when the history is sent back.
        !(b["type"] == "text" && b["text"] == "")
    });
    for block in &mut content {
        // An OpenAI refusal becomes a text block (with StopReason::Refusal), as `StopReason::Refusal` says.
        if block["type"] == "refusal" {
            *block = json!({"type": "text", "text": block["refusal"].clone()});
        }
    }
    if name == "anthropic_sdkpy_incomplete_partial_json_response" {
        // The SDK parses the cut-off arguments leniently into a partial object; the crate
        // never hands out a half-assembled tool call: its input stays {} and the call is
        // listed as incomplete (checked separately below).
        content[1]["input"] = json!({});
    }
    if name == "anthropic_sdkpy_compaction_response" {
        // The SDK's (non-beta) accumulator leaves a `compaction` block as it started (content
        // null): it does not apply `compaction_delta`. The crate gathers the deltas, so the
        // block sent back carries the server's summary and encrypted content (a block with
        // null content is a no-op to the server, the summary lost).
        content[0]["content"] = json!("Earlier conversation summarized.");
        content[0]["encrypted_content"] = json!("EpwBCioIDxgCEAEYASJALd_opaque_compaction_payload");
    }
    let raw_reason = sdk["stop_reason"].as_str().unwrap_or("");
    let mut stop_reason = StopReason::from_wire(raw_reason);
    if sdk["content"]
        .as_array()
        .is_some_and(|c| c.iter().any(|b| b["type"] == "refusal"))
    {
        stop_reason = StopReason::Refusal;
    }
    json!({
        "content": content,
        "stop_reason": stop_reason,
        "usage": sdk["usage"],
    })
}

fn format_of(name: &str) -> WireFormat {
    if name.starts_with("openai") {
        WireFormat::OpenAiChat
    } else {
        WireFormat::Anthropic
    }
}

#[test]
fn transcripts_match_the_official_sdks() {
    let Some(all) = transcripts() else {
        let why = "no transcripts folder (set AGENT_LOOP_TRANSCRIPTS, or keep them in \
                   ../shared/transcripts); nothing was checked";
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must check the transcripts: {why}"
        );
        crate::common::say_skipped(&format!(
            "!!! SKIPPED transcripts_match_the_official_sdks: {why}"
        ));
        return;
    };
    assert!(
        all.len() >= 20,
        "expected the full transcript set, found {}",
        all.len()
    );
    for (name, body, sdk) in &all {
        let format = format_of(name);
        let decoded = common::decode(format, body);
        // Chunking never matters.
        for size in [1, 2, 3, 7, 64, 4096] {
            assert_eq!(
                common::decode_chunked(format, body, size),
                decoded,
                "{name} at chunk size {size}"
            );
        }
        let response = decoded.result.unwrap_or_else(|e| panic!("{name}: {e}"));
        if sdk.get("sdk_exception").is_some() {
            // anthropic_docs_thinking: the docs' abridged example has no `usage` at all and the
            // SDK raises AttributeError on it. The stream is valid; the crate assembles it.
            assert_eq!(
                name, "anthropic_docs_thinking",
                "unexpected SDK failure in {name}"
            );
            let types: Vec<&str> = response
                .message
                .content
                .iter()
                .map(|b| match b {
                    agent_loop::ContentBlock::Thinking { .. } => "thinking",
                    agent_loop::ContentBlock::Text { .. } => "text",
                    _ => "other",
                })
                .collect();
            assert_eq!(types, ["thinking", "text"], "{name}");
            assert_eq!(response.text(), "27 * 453 = 12,231");
            continue;
        }
        let ours = json!({
            "content": response.message.content,
            "stop_reason": response.stop_reason,
            "usage": {"input_tokens": response.usage.total_input_tokens(), "output_tokens": response.usage.output_tokens},
        });
        assert_eq!(ours, expected_from_sdk(name, sdk), "{name}");
        if name == "anthropic_sdkpy_incomplete_partial_json_response" {
            assert_eq!(response.invalid_tool_calls.len(), 1);
            assert_eq!(
                response.invalid_tool_calls[0].reason,
                InvalidToolCallReason::Incomplete
            );
            assert!(response.invalid_tool_calls[0]
                .raw_arguments
                .starts_with("{\"filename\": \"taxes.txt\""));
        } else {
            assert!(
                response.invalid_tool_calls.is_empty(),
                "{name}: {:?}",
                response.invalid_tool_calls
            );
        }
    }
    println!("checked {} transcripts", all.len());
}
