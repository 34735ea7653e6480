//! Shared harness of the fuzz targets: how an input is split into chunks, how each decoder is
//! driven, and the checks every run makes. Kept in a library so that `cargo test` (on stable,
//! without libFuzzer) can replay corpora and regressions through exactly the same code.
//!
//! Input layout of the chunking targets (`sse`, `anthropic`, `openai`):
//!
//! ```text
//!  byte 0        low 5 bits: k, the number of cut points (0..=31)
//!  bytes 1..1+2k k little-endian u16 offsets, each taken modulo (body length + 1)
//!  the rest      the body
//! ```
//!
//! `fuzz/seed.sh` writes seeds as a `0x00` byte (no cuts) followed by a real SSE body.

use std::collections::HashMap;
use std::sync::OnceLock;

use agent_loop::wire::sse::{SseDecoder, SseEvent, SseLimits};
use agent_loop::{ContentBlock, LlmError, LlmEvent, ModelResponse};
use agent_loop::wire::{InvalidToolCallReason, StreamAssembler, StreamLimits, WireDecoder, WireFormat};

/// A fuzz input taken apart: the body and where to cut it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split<'a> {
    /// The stream body.
    pub body: &'a [u8],
    /// Sorted cut offsets into `body` (repeats allowed: they make empty chunks).
    pub cuts: Vec<usize>,
}

impl<'a> Split<'a> {
    /// Decodes the input layout described in the crate docs.
    pub fn parse(data: &'a [u8]) -> Self {
        let Some((&head, rest)) = data.split_first() else {
            return Split {
                body: data,
                cuts: Vec::new(),
            };
        };
        let count = usize::from(head & 0x1f);
        let table_len = (2 * count).min(rest.len());
        let (table, body) = rest.split_at(table_len);
        let mut cuts: Vec<usize> = table
            .chunks_exact(2)
            .map(|pair| usize::from(u16::from_le_bytes([pair[0], pair[1]])) % (body.len() + 1))
            .collect();
        cuts.sort_unstable();
        Split { body, cuts }
    }

    /// The body cut at the offsets.
    pub fn chunks(&self) -> Vec<&'a [u8]> {
        let mut out = Vec::with_capacity(self.cuts.len() + 1);
        let mut start = 0;
        for &cut in &self.cuts {
            out.push(&self.body[start..cut]);
            start = cut;
        }
        out.push(&self.body[start..]);
        out
    }

    /// The body one byte per chunk.
    pub fn bytes(&self) -> Vec<&'a [u8]> {
        self.body.chunks(1).collect()
    }
}

/// SSE limits small enough that fuzz inputs reach them.
pub fn small_sse_limits() -> SseLimits {
    SseLimits::new(64, 160)
}

/// Stream limits small enough that fuzz inputs reach them.
pub fn small_stream_limits() -> StreamLimits {
    let mut limits = StreamLimits::default();
    limits.max_line_bytes = 256;
    limits.max_event_bytes = 512;
    limits.max_tool_args_bytes = 96;
    limits.max_response_bytes = 384;
    limits
}

/// What an [`SseDecoder`] makes of a chunked body: the events, and the first error.
pub fn decode_sse(limits: SseLimits, chunks: &[&[u8]]) -> (Vec<SseEvent>, Option<LlmError>) {
    let mut decoder = SseDecoder::with_limits(limits);
    let mut events = Vec::new();
    for chunk in chunks {
        if let Err(error) = decoder.push(chunk, &mut events) {
            check_spent_sse(&mut decoder, &error);
            return (events, Some(error));
        }
    }
    let error = decoder.finish(&mut events).err();
    if let Some(error) = &error {
        check_spent_sse(&mut decoder, error);
    }
    (events, error)
}

/// After an error the decoder is spent: it returns the same error and no event.
fn check_spent_sse(decoder: &mut SseDecoder, error: &LlmError) {
    let mut events = Vec::new();
    assert_eq!(
        decoder.push(b"data: x\n\n", &mut events).as_ref(),
        Err(error)
    );
    assert_eq!(decoder.finish(&mut events).as_ref(), Err(error));
    assert!(events.is_empty(), "a spent decoder dispatched {events:?}");
}

/// Properties every dispatched event has, whatever the input.
pub fn check_sse_events(events: &[SseEvent], limits: SseLimits) {
    for event in events {
        assert!(
            !event.data.contains('\r'),
            "CR inside event data: {event:?}"
        );
        assert!(
            !event.event.contains(['\r', '\n']),
            "line break in the event type: {event:?}"
        );
        assert!(!event.event.is_empty(), "empty event type: {event:?}");
        if let Some(id) = &event.id {
            assert!(!id.contains(['\r', '\n', '\0']), "bad id: {event:?}");
        }
        // Invalid UTF-8 becomes U+FFFD (3 bytes for 1), so the data may exceed the byte limit
        // by that factor, never more.
        assert!(
            event.data.len() <= 3 * limits.max_event_bytes,
            "event of {} bytes, limit {}",
            event.data.len(),
            limits.max_event_bytes
        );
    }
}

/// The `sse` target: the same events and error for every chunking, and sane events.
pub fn sse_target(data: &[u8]) {
    let split = Split::parse(data);
    for limits in [SseLimits::default(), small_sse_limits()] {
        let whole = decode_sse(limits, &[split.body]);
        let cut = decode_sse(limits, &split.chunks());
        assert_eq!(
            whole, cut,
            "chunking changed the SSE output (cuts {:?})",
            split.cuts
        );
        let bytes = decode_sse(limits, &split.bytes());
        assert_eq!(whole, bytes, "byte-by-byte feeding changed the SSE output");
        check_sse_events(&whole.0, limits);
    }
}

/// What the wire layer makes of a chunked body.
#[derive(Debug)]
pub struct Decoded {
    /// The events the decoder appended (up to its first error).
    pub events: Vec<LlmEvent>,
    /// The decoder's first error, or else the assembler's result.
    pub result: Result<ModelResponse, LlmError>,
}

/// Decodes `chunks` with a [`WireDecoder`], then assembles the events, as a client does.
pub fn decode_wire(format: WireFormat, limits: StreamLimits, chunks: &[&[u8]]) -> Decoded {
    let mut decoder = WireDecoder::with_limits(format, limits);
    let mut events = Vec::new();
    let mut error = None;
    for chunk in chunks {
        if let Err(e) = decoder.push(chunk, &mut events) {
            // Spent: the same error again, and nothing more.
            let mut more = Vec::new();
            assert_eq!(decoder.push(b"data: {}\n\n", &mut more).as_ref(), Err(&e));
            assert!(more.is_empty(), "a spent decoder produced {more:?}");
            error = Some(e);
            break;
        }
    }
    if error.is_none() {
        match decoder.finish(&mut events) {
            Ok(()) => assert!(decoder.is_done(), "finish succeeded before the end marker"),
            Err(e) => error = Some(e),
        }
    }
    let assembled = assemble(limits, &events);
    let result = match error {
        Some(error) => Err(error),
        None => assembled,
    };
    Decoded { events, result }
}

/// Feeds the events to a [`StreamAssembler`] (even after a decoder error, to exercise it).
fn assemble(limits: StreamLimits, events: &[LlmEvent]) -> Result<ModelResponse, LlmError> {
    let mut assembler = StreamAssembler::with_limits(limits);
    for event in events {
        assembler.push(event)?;
    }
    assembler.finish()
}

/// The prefix of the ids the OpenAI decoder generates for calls that have none, in this process.
fn generated_id_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\
                     \"function\":{\"name\":\"t\",\"arguments\":\"{}\"}}]}}]}\n\n";
        let mut decoder = WireDecoder::new(WireFormat::OpenAiChat);
        let mut events = Vec::new();
        let _ = decoder.push(body, &mut events);
        events
            .iter()
            .find_map(|e| match e {
                LlmEvent::ToolCallStart { id, .. } => Some(id.chars().take(13).collect()),
                _ => None,
            })
            .unwrap_or_else(|| "\u{0}never".to_owned())
    })
}

/// The decoded output as text, with generated tool-call ids (which differ from run to run)
/// replaced by their order of appearance.
pub fn normalized(decoded: &Decoded) -> String {
    let prefix = generated_id_prefix();
    let mut generated: Vec<&str> = Vec::new();
    for event in &decoded.events {
        if let LlmEvent::ToolCallStart { id, .. } = event {
            let is_generated = id.len() > prefix.len()
                && id.starts_with(prefix)
                && id[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit());
            if is_generated && !generated.contains(&id.as_str()) {
                generated.push(id);
            }
        }
    }
    let mut text = format!("{:?}\n{:?}", decoded.events, decoded.result);
    let mut order: Vec<(usize, &str)> = generated.into_iter().enumerate().collect();
    // Longest first, so that no id is replaced inside a longer one.
    order.sort_by_key(|(_, id)| std::cmp::Reverse(id.len()));
    for (n, id) in order {
        text = text.replace(id, &format!("<generated id {n}>"));
    }
    text
}

/// Invariants of a decoded response (DESIGN.md invariants 2 and 3).
pub fn check_wire(decoded: &Decoded, limits: StreamLimits) {
    let Ok(response) = &decoded.result else {
        return;
    };
    assert!(
        matches!(decoded.events.last(), Some(LlmEvent::MessageStop { .. })),
        "a complete response whose last event is not MessageStop: {:?}",
        decoded.events.last()
    );
    let invalid: HashMap<&str, &InvalidToolCallReason> = response
        .invalid_tool_calls
        .iter()
        .map(|c| (c.id.as_str(), &c.reason))
        .collect();
    let mut held = 0usize;
    for block in &response.message.content {
        match block {
            ContentBlock::ToolUse { id, input, .. } => {
                // A tool call is either runnable (an object) or listed invalid with `{}`.
                assert!(input.is_object(), "tool input is not an object: {input}");
                if invalid.contains_key(id.as_str()) {
                    assert_eq!(input, &serde_json::json!({}), "invalid call {id} has input");
                }
                held += serde_json::to_string(input).map_or(0, |s| s.len());
            }
            ContentBlock::Text { text } => held += text.len(),
            ContentBlock::Thinking {
                thinking,
                signature,
            } => held += thinking.len() + signature.len(),
            _ => {}
        }
    }
    for call in &response.invalid_tool_calls {
        assert!(
            call.raw_arguments.len() <= limits.max_tool_args_bytes,
            "tool arguments of {} bytes accepted, limit {}",
            call.raw_arguments.len(),
            limits.max_tool_args_bytes
        );
    }
    // Re-serialized input may be larger than the wire text (escapes), so allow a factor.
    assert!(
        held <= 8 * limits.max_response_bytes + 64,
        "response of {held} bytes accepted, limit {}",
        limits.max_response_bytes
    );
}

/// The `anthropic` and `openai` targets: chunking never changes the events or the result, and
/// a complete response is sound.
pub fn wire_target(format: WireFormat, data: &[u8]) {
    let split = Split::parse(data);
    for limits in [StreamLimits::default(), small_stream_limits()] {
        let whole = decode_wire(format, limits, &[split.body]);
        let cut = decode_wire(format, limits, &split.chunks());
        let bytes = decode_wire(format, limits, &split.bytes());
        let expected = normalized(&whole);
        assert_eq!(
            expected,
            normalized(&cut),
            "chunking changed the {format:?} output (cuts {:?})",
            split.cuts
        );
        assert_eq!(
            expected,
            normalized(&bytes),
            "byte-by-byte feeding changed the {format:?} output"
        );
        check_wire(&whole, limits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_layout() {
        let split = Split::parse(b"\x02\x03\x00\x01\x00abcdef");
        assert_eq!(split.body, b"abcdef");
        assert_eq!(split.cuts, vec![1, 3]);
        assert_eq!(split.chunks(), vec![&b"a"[..], b"bc", b"def"]);
        let split = Split::parse(b"\x00data: x\n\n");
        assert_eq!(split.chunks(), vec![&b"data: x\n\n"[..]]);
        assert_eq!(Split::parse(b"").chunks(), vec![&b""[..]]);
        // A table longer than the input: what is there is used.
        assert_eq!(Split::parse(b"\x1f\x05").body, b"");
    }

    #[test]
    fn targets_accept_simple_bodies() {
        sse_target(b"\x01\x04\x00data: a\r\n\r\ndata: b");
        wire_target(
            WireFormat::OpenAiChat,
            b"\x00data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\
              \"function\":{\"name\":\"t\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n\
              data: [DONE]\n\n",
        );
        wire_target(WireFormat::Anthropic, b"\x00event: ping\ndata: {}\n\n");
        wire_target(
            WireFormat::OpenAiResponses,
            b"\x00data: {\"type\":\"response.output_item.added\",\"output_index\":0,\
              \"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"t\"}}\n\n\
              data: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\
              \"delta\":\"{}\"}\n\n\
              data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\"}}\n\n",
        );
    }

    /// Replays every file of `corpus/<target>/` and `regressions/<target>/`, when present.
    #[test]
    fn replay_corpora() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        type Target = fn(&[u8]);
        let targets: [(&str, Target); 7] = [
            ("sse", sse_target),
            ("anthropic", |d| wire_target(WireFormat::Anthropic, d)),
            ("openai", |d| wire_target(WireFormat::OpenAiChat, d)),
            ("responses", |d| wire_target(WireFormat::OpenAiResponses, d)),
            ("gemini", |d| wire_target(WireFormat::Gemini, d)),
            ("bedrock", |d| wire_target(WireFormat::Bedrock, d)),
            ("ollama", |d| wire_target(WireFormat::Ollama, d)),
        ];
        for (name, target) in targets {
            for dir in ["corpus", "regressions"] {
                let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let data = std::fs::read(entry.path()).unwrap();
                    target(&data);
                }
            }
        }
    }
}
