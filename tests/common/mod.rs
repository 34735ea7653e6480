//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod agent;
pub mod grammar;
pub mod web;

use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::wire::{StreamAssembler, WireDecoder, WireFormat};
use agent_loop::{LlmError, LlmEvent, ModelResponse};

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. Under CI the test fails instead.
pub fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

/// Retries at once (1 ms, no jitter): for tests of what is retried, not of how long it waits.
pub fn fast_retries() -> RetryPolicy {
    RetryPolicy::default()
        .initial_backoff(std::time::Duration::from_millis(1))
        .jitter(Jitter::None)
}

/// Compares `body` with tests/golden/`name` (a request body the official SDKs' types check,
/// scripts/check-golden-requests.py); with AGENT_LOOP_BLESS=1 it rewrites the file first.
pub fn assert_golden(name: &str, body: &serde_json::Value) {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("AGENT_LOOP_BLESS").is_some() {
        let mut text = serde_json::to_string_pretty(body).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
    }
    let want: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e} (write it with AGENT_LOOP_BLESS=1)")),
    )
    .unwrap();
    assert_eq!(
        body, &want,
        "the request body differs from {path}; AGENT_LOOP_BLESS=1 rewrites it if the change is meant"
    );
}

/// What decoding a whole body gives: the events, and the assembled response or the first error.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub events: Vec<LlmEvent>,
    pub result: Result<ModelResponse, LlmError>,
}

/// Decodes `body` split at the given cut points (sorted offsets into `body`).
pub fn decode_split(format: WireFormat, body: &[u8], cuts: &[usize]) -> Decoded {
    let mut decoder = WireDecoder::new(format);
    let mut events = Vec::new();
    let mut start = 0;
    let mut error = None;
    for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        let cut = cut.clamp(start, body.len());
        if let Err(e) = decoder.push(&body[start..cut], &mut events) {
            error = Some(e);
            break;
        }
        start = cut;
    }
    if error.is_none() {
        if let Err(e) = decoder.finish(&mut events) {
            error = Some(e);
        }
    }
    let result = match error {
        Some(e) => Err(e),
        None => assemble(&events),
    };
    Decoded { events, result }
}

/// Decodes `body` in chunks of `size` bytes.
pub fn decode_chunked(format: WireFormat, body: &[u8], size: usize) -> Decoded {
    let cuts: Vec<usize> = (1..)
        .map(|i| i * size.max(1))
        .take_while(|&c| c < body.len())
        .collect();
    decode_split(format, body, &cuts)
}

/// Decodes `body` in one piece.
pub fn decode(format: WireFormat, body: &[u8]) -> Decoded {
    decode_split(format, body, &[])
}

pub fn assemble(events: &[LlmEvent]) -> Result<ModelResponse, LlmError> {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event)?;
    }
    assembler.finish()
}

/// Reads a fixture from tests/fixtures/.
pub fn fixture(path: &str) -> Vec<u8> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("cannot read fixture {full}: {e}"))
}

/// All fixtures of a provider folder: (file name, bytes).
pub fn fixtures(dir: &str) -> Vec<(String, Vec<u8>)> {
    let full = format!("{}/tests/fixtures/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&full)
        .unwrap_or_else(|e| panic!("cannot list {full}: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}
