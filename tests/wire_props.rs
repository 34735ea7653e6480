//! Properties of the wire layer: chunking never matters (every fixture and recorded transcript,
//! cut anywhere, down to single bytes, inside UTF-8 characters and CRLF pairs); arbitrary and
//! mutated bodies never panic and never make the decoder hold more memory than its limits
//! allow; and `SseDecoder` agrees with a small reference model of the WHATWG rules.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::OnceLock;

use agent_loop::wire::sse::{SseDecoder, SseEvent, SseLimits};
use agent_loop::wire::{StreamAssembler, StreamLimits, WireDecoder, WireFormat};
use agent_loop::{ContentBlock, LlmError, LlmEvent};
use common::Decoded;
use proptest::prelude::*;
use proptest::test_runner::Config;

// ---------------------------------------------------------------------------------------------
// A counting allocator: how many bytes this thread holds, and the peak since a reset. Tests run
// on several threads, so the figures are per thread (a decoder is driven by one thread).

struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = HELD.try_with(|held| {
        let now = held.get() + delta;
        held.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes this thread held above its starting point while `f` ran.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = HELD.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as usize)
}

// ---------------------------------------------------------------------------------------------
// the corpus: every fixture, and the recorded transcripts when they are present

struct Body {
    name: String,
    format: WireFormat,
    bytes: Vec<u8>,
    /// The one-piece decode, normalized.
    expected: Decoded,
    /// Cut points that matter most: inside multi-byte characters, between CR and LF, inside
    /// the BOM, at line ends.
    special: Vec<usize>,
}

fn transcripts_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("AGENT_LOOP_TRANSCRIPTS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/transcripts"),
    };
    dir.is_dir().then_some(dir)
}

fn special_cuts(body: &[u8]) -> Vec<usize> {
    let mut out = vec![1, 2];
    for i in 1..body.len() {
        let utf8_continuation = body[i] & 0xC0 == 0x80;
        let inside_crlf = body[i - 1] == b'\r' && body[i] == b'\n';
        let line_end = body[i - 1] == b'\n';
        if utf8_continuation || inside_crlf || line_end {
            out.push(i);
        }
    }
    out.retain(|&c| c < body.len());
    out
}

fn corpus() -> &'static [Body] {
    static CORPUS: OnceLock<Vec<Body>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut raw: Vec<(String, WireFormat, Vec<u8>)> = Vec::new();
        for (dir, format) in [
            ("anthropic", WireFormat::Anthropic),
            ("openai", WireFormat::OpenAiChat),
        ] {
            for (name, bytes) in common::fixtures(dir) {
                raw.push((format!("{dir}/{name}"), format, bytes));
            }
        }
        if let Some(dir) = transcripts_dir() {
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
                .unwrap_or_default();
            paths.sort();
            for path in paths {
                if path.extension().is_some_and(|e| e == "sse") {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    let format = if name.starts_with("openai") {
                        WireFormat::OpenAiChat
                    } else {
                        WireFormat::Anthropic
                    };
                    raw.push((
                        format!("transcripts/{name}"),
                        format,
                        std::fs::read(&path).unwrap(),
                    ));
                }
            }
        }
        raw.into_iter()
            .map(|(name, format, bytes)| {
                let expected = normalize(common::decode(format, &bytes), &bytes);
                let special = special_cuts(&bytes);
                Body {
                    name,
                    format,
                    bytes,
                    expected,
                    special,
                }
            })
            .collect()
    })
}

/// Replaces tool-call ids the decoder generated (they appear nowhere in the body, and differ
/// on every decode) by stable placeholders, in order of appearance.
fn normalize(mut decoded: Decoded, body: &[u8]) -> Decoded {
    let mut generated: Vec<String> = Vec::new();
    let mut rename = |id: &mut String| {
        let present = body.windows(id.len().max(1)).any(|w| w == id.as_bytes());
        if id.is_empty() || present {
            return;
        }
        let n = match generated.iter().position(|g| g == id) {
            Some(n) => n,
            None => {
                generated.push(id.clone());
                generated.len() - 1
            }
        };
        *id = format!("<generated {n}>");
    };
    for event in &mut decoded.events {
        if let LlmEvent::ToolCallStart { id, .. } = event {
            rename(id);
        }
    }
    if let Ok(response) = &mut decoded.result {
        for block in &mut response.message.content {
            if let ContentBlock::ToolUse { id, .. } = block {
                rename(id);
            }
        }
        for call in &mut response.invalid_tool_calls {
            rename(&mut call.id);
        }
    }
    decoded
}

fn decode_at(body: &Body, cuts: &[usize]) -> Decoded {
    normalize(
        common::decode_split(body.format, &body.bytes, cuts),
        &body.bytes,
    )
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------------
// chunking never matters

#[test]
fn the_corpus_is_complete() {
    let all = corpus();
    assert!(
        all.iter()
            .filter(|b| b.name.starts_with("anthropic/"))
            .count()
            >= 18
    );
    assert!(all.iter().filter(|b| b.name.starts_with("openai/")).count() >= 23);
    if transcripts_dir().is_none() {
        // The fixtures are checked all the same; the transcripts only add bodies.
        common::say_skipped(
            "NOTE: no transcripts folder: the wire properties run on the fixtures only",
        );
    }
    // The corpus exercises what the properties are about.
    assert!(all.iter().any(|b| b.bytes.windows(2).any(|w| w == b"\r\n")));
    assert!(all.iter().any(|b| b.bytes.starts_with(&[0xEF, 0xBB, 0xBF])));
    assert!(all
        .iter()
        .any(|b| b.bytes.iter().any(|&c| c & 0xC0 == 0x80)));
    assert!(all.iter().any(|b| b.expected.result.is_err()));
}

#[test]
fn every_byte_split_and_small_chunks_change_nothing() {
    for body in corpus() {
        for size in [1, 2, 3, 5, 8, 13] {
            let d = normalize(
                common::decode_chunked(body.format, &body.bytes, size),
                &body.bytes,
            );
            assert_eq!(d, body.expected, "{} in chunks of {size}", body.name);
        }
        // Cutting at every special point at once: every UTF-8 character and CRLF pair split.
        assert_eq!(
            decode_at(body, &body.special),
            body.expected,
            "{} split inside every character and CRLF",
            body.name
        );
    }
}

#[test]
fn every_single_cut_point_changes_nothing_on_small_fixtures() {
    for body in corpus().iter().filter(|b| b.bytes.len() <= 1500) {
        for cut in 0..=body.bytes.len() {
            assert_eq!(
                decode_at(body, &[cut]),
                body.expected,
                "{} cut once at {cut}",
                body.name
            );
        }
    }
}

fn cuts_for(body: &Body, picks: &[(bool, usize)]) -> Vec<usize> {
    let mut cuts: Vec<usize> = picks
        .iter()
        .map(|&(special, x)| {
            if special && !body.special.is_empty() {
                body.special[x % body.special.len()]
            } else {
                x % (body.bytes.len() + 1)
            }
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn random_rechunking_gives_identical_events_and_results(
        which in any::<prop::sample::Index>(),
        picks in prop::collection::vec((any::<bool>(), any::<usize>()), 0..48),
    ) {
        let body = which.get(corpus());
        let cuts = cuts_for(body, &picks);
        prop_assert_eq!(&decode_at(body, &cuts), &body.expected, "{} at {:?}", body.name, cuts);
    }
}

// ---------------------------------------------------------------------------------------------
// arbitrary and mutated bodies: no panic, chunking still does not matter, memory stays bounded

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, xor: u8 },
    Truncate { at: usize },
    Duplicate { start: usize, len: usize, at: usize },
    Delete { start: usize, len: usize },
    Insert { at: usize, bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), 1..512usize, any::<usize>())
            .prop_map(|(start, len, at)| Mutation::Duplicate { start, len, at }),
        (any::<usize>(), 1..64usize).prop_map(|(start, len)| Mutation::Delete { start, len }),
        (
            any::<usize>(),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 1..16),
                Just(b"\n\n".to_vec()),
                Just(b"\r".to_vec()),
                Just(b"data: [DONE]\n\n".to_vec()),
                Just(b"event: error\n".to_vec()),
                Just("é€🦀".as_bytes().to_vec()),
            ]
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
    ]
}

fn mutate(body: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = body.to_vec();
    for m in mutations {
        let n = b.len();
        match m {
            Mutation::Flip { at, xor } if n > 0 => b[at % n] ^= xor,
            Mutation::Truncate { at } => b.truncate(at % (n + 1)),
            Mutation::Duplicate { start, len, at } if n > 0 => {
                let s = start % n;
                let e = (s + len).min(n);
                let piece = b[s..e].to_vec();
                let at = at % (n + 1);
                b.splice(at..at, piece);
            }
            Mutation::Delete { start, len } if n > 0 => {
                let s = start % n;
                let e = (s + len).min(n);
                b.drain(s..e);
            }
            Mutation::Insert { at, bytes } => {
                let at = at % (n + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            _ => {}
        }
    }
    b
}

fn small_limits() -> StreamLimits {
    let mut l = StreamLimits::default();
    l.max_line_bytes = 256;
    l.max_event_bytes = 1024;
    l.max_tool_args_bytes = 512;
    l.max_response_bytes = 2048;
    l
}

/// What a decoder may hold with `limits`, generously: buffers that double as they grow, a
/// lossy UTF-8 copy of an event (up to 3× its bytes), its parsed JSON, the chunk's events.
fn memory_bound(limits: &StreamLimits, chunk: usize) -> usize {
    32 * (limits.max_line_bytes + limits.max_event_bytes) + 64 * chunk + 16 * 1024
}

/// Decodes with `limits` in `chunk`-byte pieces, dropping the events of each piece, and
/// returns the result and the peak bytes held meanwhile.
fn decode_bounded(
    format: WireFormat,
    limits: StreamLimits,
    body: &[u8],
    chunk: usize,
) -> (Result<(), LlmError>, usize) {
    let mut decoder = WireDecoder::with_limits(format, limits);
    let mut events = Vec::with_capacity(1024);
    peak_during(|| {
        for piece in body.chunks(chunk.max(1)) {
            decoder.push(piece, &mut events)?;
            events.clear();
        }
        decoder.finish(&mut events)
    })
}

/// A limit error must name the limit that was configured.
fn check_limit_error(result: &Result<(), LlmError>, limits: &StreamLimits) {
    if let Err(LlmError::LimitExceeded { limit, setting, .. }) = result {
        let expected = match setting.as_ref() {
            "StreamLimits::max_line_bytes" => limits.max_line_bytes,
            "StreamLimits::max_event_bytes" => limits.max_event_bytes,
            other => panic!("the wire decoder reported a limit it does not own: {other}"),
        };
        assert_eq!(*limit, expected);
    }
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded(
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
        chunk in 1..600usize,
        openai in any::<bool>(),
    ) {
        let format = if openai { WireFormat::OpenAiChat } else { WireFormat::Anthropic };
        let limits = small_limits();
        let (result, peak) = decode_bounded(format, limits, &bytes, chunk);
        check_limit_error(&result, &limits);
        prop_assert!(peak <= memory_bound(&limits, chunk), "held {} bytes", peak);
        // With default limits the decode is chunking-independent, even on garbage.
        let whole = normalize(common::decode(format, &bytes), &bytes);
        prop_assert_eq!(normalize(common::decode_chunked(format, &bytes, chunk), &bytes), whole);
    }

    #[test]
    fn arbitrary_sse_shaped_bytes_never_panic(
        lines in prop::collection::vec(
            prop_oneof![
                Just("data: [DONE]".to_owned()),
                Just("event: error".to_owned()),
                Just("event: message_stop".to_owned()),
                Just(String::new()),
                "data: \\{[\"a-z:,0-9 \\[\\]{}]{0,40}",
                "[a-z: ]{0,12}",
            ],
            0..40,
        ),
        chunk in 1..64usize,
        openai in any::<bool>(),
    ) {
        let format = if openai { WireFormat::OpenAiChat } else { WireFormat::Anthropic };
        let body = lines.join("\n");
        let whole = normalize(common::decode(format, body.as_bytes()), body.as_bytes());
        let chunked = normalize(common::decode_chunked(format, body.as_bytes(), chunk), body.as_bytes());
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn mutated_fixtures_never_panic_stay_bounded_and_chunking_still_does_not_matter(
        which in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..5),
        picks in prop::collection::vec((any::<bool>(), any::<usize>()), 0..24),
        chunk in 1..600usize,
    ) {
        let original = which.get(corpus());
        let bytes = mutate(&original.bytes, &mutations);
        let special = special_cuts(&bytes);
        let body = Body {
            name: original.name.clone(),
            format: original.format,
            expected: normalize(common::decode(original.format, &bytes), &bytes),
            bytes,
            special,
        };
        let cuts = cuts_for(&body, &picks);
        prop_assert_eq!(&decode_at(&body, &cuts), &body.expected, "{} at {:?}", body.name, cuts);

        let limits = small_limits();
        let (result, peak) = decode_bounded(body.format, limits, &body.bytes, chunk);
        check_limit_error(&result, &limits);
        prop_assert!(peak <= memory_bound(&limits, chunk), "held {} bytes", peak);

        // The assembler with small limits refuses, never panics, never exceeds its limits.
        if body.expected.result.is_ok() {
            let events = &body.expected.events;
            let mut assembler = StreamAssembler::with_limits(limits);
            let outcome = events.iter().try_for_each(|e| assembler.push(e)).and_then(|()| assembler.finish());
            if let Err(LlmError::LimitExceeded { limit, .. }) = outcome {
                prop_assert!(limit == limits.max_tool_args_bytes || limit == limits.max_response_bytes);
            }
        }
    }
}

#[test]
fn the_counting_allocator_counts() {
    let (v, peak) = peak_during(|| vec![1u8; 10_000]);
    assert!(peak >= 10_000, "{peak}");
    let (_, peak) = peak_during(|| drop(v));
    assert_eq!(peak, 0);
    // An unbounded decoder would be caught: holding a 1 MiB line shows up.
    let line = vec![b'x'; 1 << 20];
    let mut d = SseDecoder::with_limits(SseLimits::new(2 << 20, 2 << 20));
    let (_, peak) = peak_during(|| d.push(&line, &mut Vec::new()).unwrap());
    assert!(peak >= 1 << 20, "{peak}");
}

/// Endless streams that never error (keep-alives, pings, ids, unknown fields, complete small
/// events) must not make the decoder hold more as they go on.
#[test]
fn long_streams_hold_constant_memory() {
    let limits = small_limits();
    let mut anthropic_pings = Vec::new();
    anthropic_pings.extend_from_slice(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\"}}\n\n");
    let mut openai_text = Vec::new();
    let mut comments = Vec::new();
    let mut unknown_fields = Vec::new();
    let mut anthropic_deltas = Vec::new();
    anthropic_deltas.extend_from_slice(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\"}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..12_000 {
        anthropic_pings.extend_from_slice(b"event: ping\ndata: {\"type\": \"ping\"}\n\n");
        anthropic_deltas.extend_from_slice(
            format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word {i} \"}}}}\n\n").as_bytes(),
        );
        openai_text.extend_from_slice(
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}}}}]}}\n\n"
            )
            .as_bytes(),
        );
        comments.extend_from_slice(b": keep-alive\r\n\r\n");
        unknown_fields
            .extend_from_slice(format!("id: {i}\nretry: {i}\nfoo: bar\nevent: x\n\n").as_bytes());
    }
    for (name, format, body) in [
        ("anthropic pings", WireFormat::Anthropic, &anthropic_pings),
        (
            "anthropic text deltas",
            WireFormat::Anthropic,
            &anthropic_deltas,
        ),
        ("openai text", WireFormat::OpenAiChat, &openai_text),
        ("comments", WireFormat::OpenAiChat, &comments),
        ("unknown fields", WireFormat::Anthropic, &unknown_fields),
    ] {
        assert!(body.len() > 150_000, "{name}");
        let (short, short_peak) = decode_bounded(format, limits, &body[..body.len() / 8], 4096);
        let (long, long_peak) = decode_bounded(format, limits, body, 4096);
        // Neither ended in a limit error: the input is well-formed, only long.
        assert!(
            !matches!(short, Err(LlmError::LimitExceeded { .. })),
            "{name}: {short:?}"
        );
        assert!(
            !matches!(long, Err(LlmError::LimitExceeded { .. })),
            "{name}: {long:?}"
        );
        assert!(
            long_peak <= memory_bound(&limits, 4096),
            "{name}: held {long_peak} bytes"
        );
        assert!(
            long_peak <= short_peak + 4096,
            "{name}: held {short_peak} bytes after {} bytes of input, {long_peak} after {}",
            body.len() / 8,
            body.len()
        );
    }
}

#[test]
fn huge_lines_and_events_are_refused_early() {
    let limits = small_limits();
    let line = vec![b'x'; 1 << 20];
    let mut event = Vec::new();
    for _ in 0..20_000 {
        event.extend_from_slice(b"data: 0123456789abcdef\n");
    }
    for body in [&line, &event] {
        for format in [WireFormat::Anthropic, WireFormat::OpenAiChat] {
            let (result, peak) = decode_bounded(format, limits, body, 4096);
            assert!(
                matches!(result, Err(LlmError::LimitExceeded { .. })),
                "{result:?}"
            );
            assert!(peak <= memory_bound(&limits, 4096), "held {peak} bytes");
        }
    }
}

#[test]
fn openai_alternating_blocks_hold_constant_memory() {
    let limits = small_limits();
    let mut body = Vec::new();
    for i in 0..40_000 {
        let field = if i % 2 == 0 {
            "reasoning_content"
        } else {
            "content"
        };
        body.extend_from_slice(
            format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"{field}\":\"x\"}}}}]}}\n\n")
                .as_bytes(),
        );
    }
    let (_, short_peak) = decode_bounded(
        WireFormat::OpenAiChat,
        limits,
        &body[..body.len() / 8],
        4096,
    );
    let (_, long_peak) = decode_bounded(WireFormat::OpenAiChat, limits, &body, 4096);
    assert!(
        long_peak <= short_peak + 4096,
        "held {short_peak} bytes after {} bytes of input, {long_peak} after {}",
        body.len() / 8,
        body.len()
    );
}

#[test]

fn many_empty_blocks_are_refused_by_the_assembler() {
    // 20 000 empty text block starts (or tool calls with tiny ids) carry no text, so
    // max_response_bytes never trips, yet every one of them is held until finish().
    let limits = small_limits();
    let mut assembler = StreamAssembler::with_limits(limits);
    let (result, peak) = peak_during(|| {
        for index in 0..20_000 {
            assembler.push(&LlmEvent::TextDelta {
                index,
                text: String::new(),
            })?;
        }
        Ok::<(), LlmError>(())
    });
    assert!(
        result.is_err() || peak <= memory_bound(&limits, 0),
        "held {peak} bytes without an error"
    );
}

// ---------------------------------------------------------------------------------------------
// SseDecoder against a reference model

/// One line of a generated event stream.
#[derive(Debug, Clone)]
enum Line {
    /// `name: value` or `name:value` (the space is optional and stripped once).
    Field {
        name: &'static str,
        space: bool,
        value: Vec<u8>,
    },
    /// A field name alone, with no colon.
    Bare(&'static str),
    /// `:comment`.
    Comment(Vec<u8>),
    /// An empty line: dispatch.
    Blank,
}

fn value_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            8 => prop::sample::select(b"ab z:019{}\"".to_vec()).prop_map(|b| vec![b]),
            2 => Just(b" ".to_vec()),
            2 => prop::sample::select(vec!["\u{e9}", "\u{20ac}", "\u{1F980}"]).prop_map(|s| s.as_bytes().to_vec()),
            1 => Just(vec![0u8]),
            1 => Just(vec![0xFF]),
            1 => Just(vec![0xE2, 0x82]),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        6 => (prop::sample::select(vec!["data", "data", "data", "event", "id", "retry", "foo", "dat", "Data"]), any::<bool>(), value_bytes())
            .prop_map(|(name, space, value)| Line::Field { name, space, value }),
        1 => (prop::sample::select(vec!["retry", "id"]), any::<bool>(), "[0-9]{1,25}")
            .prop_map(|(name, space, v)| Line::Field { name, space, value: v.into_bytes() }),
        // Event types from a tiny set, so that a line often repeats the current type (which
        // the decoder recognises without a search) or extends it.
        2 => (any::<bool>(), prop::sample::select(vec![&b"a"[..], b"ab", b"", b" a", b"a\xFF"]))
            .prop_map(|(space, v)| Line::Field { name: "event", space, value: v.to_vec() }),
        1 => prop::sample::select(vec!["data", "event", "id", "retry", "x"]).prop_map(Line::Bare),
        1 => value_bytes().prop_map(Line::Comment),
        4 => Just(Line::Blank),
    ]
}

/// The model: WHATWG "Interpreting an event stream" on whole lines, with the crate's two
/// documented choices: `retry` travels with the event it was sent with, and a pending event is
/// dispatched at the end of the body.
#[derive(Default)]
struct Model {
    data: Option<Vec<u8>>,
    event_type: Vec<u8>,
    last_id: Option<String>,
    retry: Option<u64>,
    out: Vec<SseEvent>,
}

/// Splits a non-empty, non-comment line into field name and value (one leading space removed).
fn field_of(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b':') {
        Some(i) => {
            let v = &line[i + 1..];
            (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
        }
        None => (line, &b""[..]),
    }
}

impl Model {
    fn line(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = field_of(line);
        match field {
            b"data" => match &mut self.data {
                Some(data) => {
                    data.push(b'\n');
                    data.extend_from_slice(value);
                }
                None => self.data = Some(value.to_vec()),
            },
            b"event" => self.event_type = value.to_vec(),
            b"id" if !value.contains(&0) => {
                self.last_id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Ok(ms) = std::str::from_utf8(value).unwrap().parse::<u64>() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        if let Some(data) = self.data.take() {
            let event = if self.event_type.is_empty() {
                "message".to_owned()
            } else {
                String::from_utf8_lossy(&self.event_type).into_owned()
            };
            self.out.push(SseEvent {
                event,
                data: String::from_utf8_lossy(&data).into_owned(),
                id: self.last_id.clone(),
                retry: self.retry,
            });
        }
        self.event_type.clear();
        self.retry = None;
    }
}

/// Encodes the lines with the given terminators; the last line may be left unterminated.
/// A blank line right after a CR-terminated line never uses LF alone (CR then LF would be
/// read as one CRLF terminator, which is the wire's rule, not a model difference).
fn encode(lines: &[(Line, u8)], bom: bool, last_unterminated: bool) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut bytes = Vec::new();
    let mut model_lines = Vec::new();
    if bom {
        bytes.extend_from_slice(&[0xEF, 0xBB, 0xBF]);
    }
    let mut prev_cr = false;
    for (i, (line, ending)) in lines.iter().enumerate() {
        let mut text = Vec::new();
        match line {
            Line::Field { name, space, value } => {
                text.extend_from_slice(name.as_bytes());
                text.push(b':');
                if *space {
                    text.push(b' ');
                }
                text.extend_from_slice(value);
            }
            Line::Bare(name) => text.extend_from_slice(name.as_bytes()),
            Line::Comment(c) => {
                text.push(b':');
                text.extend_from_slice(c);
            }
            Line::Blank => {}
        }
        let last = i + 1 == lines.len();
        let ending: &[u8] = if last && last_unterminated {
            b""
        } else {
            match ending % 3 {
                0 if prev_cr && text.is_empty() => b"\r\n",
                0 => b"\n",
                1 => b"\r\n",
                _ => b"\r",
            }
        };
        // A BOM-less body whose first line is empty and unterminated is no line at all.
        bytes.extend_from_slice(&text);
        bytes.extend_from_slice(ending);
        if !(ending.is_empty() && text.is_empty()) {
            model_lines.push(text);
        }
        prev_cr = ending == b"\r";
    }
    (bytes, model_lines)
}

fn model_events(lines: &[Vec<u8>]) -> Vec<SseEvent> {
    let mut model = Model::default();
    for line in lines {
        model.line(line);
    }
    model.dispatch();
    model.out
}

fn sse_decode(bytes: &[u8], cuts: &[usize]) -> Result<Vec<SseEvent>, LlmError> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(start, bytes.len());
        decoder.push(&bytes[start..cut], &mut out)?;
        start = cut;
    }
    decoder.finish(&mut out)?;
    Ok(out)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn sse_decoder_matches_the_reference_model(
        lines in prop::collection::vec((line(), any::<u8>()), 0..24),
        bom in any::<bool>(),
        last_unterminated in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let (bytes, model_lines) = encode(&lines, bom, last_unterminated);
        let expected = model_events(&model_lines);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(sse_decode(&bytes, &cuts).unwrap(), expected.clone(), "{:?}", String::from_utf8_lossy(&bytes));
        // and one byte at a time
        let every: Vec<usize> = (1..bytes.len()).collect();
        prop_assert_eq!(sse_decode(&bytes, &every).unwrap(), expected);
    }

    #[test]
    fn sse_limits_are_exact_and_two_sided(
        lines in prop::collection::vec((line(), any::<u8>()), 0..24),
        max_line in 1..40usize,
        max_event in 1..60usize,
        chunk in 1..32usize,
    ) {
        let (bytes, model_lines) = encode(&lines, false, false);
        let mut decoder = SseDecoder::with_limits(SseLimits::new(max_line, max_event));
        let mut out = Vec::new();
        let mut result = Ok(());
        for piece in bytes.chunks(chunk) {
            result = decoder.push(piece, &mut out);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = decoder.finish(&mut out);
        }
        let longest = model_lines.iter().map(Vec::len).max().unwrap_or(0);
        match result {
            Ok(()) => {
                // Success means every line and every event was within its limit …
                prop_assert!(longest <= max_line);
                prop_assert!(out.iter().all(|e| e.data.len() <= 3 * max_event));
                // … and the events are the model's.
                prop_assert_eq!(out, model_events(&model_lines));
            }
            Err(LlmError::LimitExceeded { limit, setting, .. }) => {
                // Refusal means some line or event really was over.
                let raw_event_over = {
                    let mut over = false;
                    let mut size: Option<usize> = None;
                    for line in &model_lines {
                        if line.is_empty() {
                            size = None;
                            continue;
                        }
                        if line.len() > max_line {
                            break;
                        }
                        let (field, v) = field_of(line);
                        if line[0] != b':' && field == b"data" {
                            // Event data is counted as it is held: decoded, with U+FFFD
                            // (3 bytes) for each invalid sequence.
                            let v = String::from_utf8_lossy(v);
                            let s = size.map_or(v.len(), |s| s + 1 + v.len());
                            if s > max_event {
                                over = true;
                                break;
                            }
                            size = Some(s);
                        }
                    }
                    over
                };
                match setting.as_ref() {
                    "StreamLimits::max_line_bytes" => {
                        prop_assert_eq!(limit, max_line);
                        prop_assert!(longest > max_line);
                    }
                    "StreamLimits::max_event_bytes" => {
                        prop_assert_eq!(limit, max_event);
                        prop_assert!(raw_event_over);
                    }
                    other => prop_assert!(false, "unexpected setting {}", other),
                }
            }
            Err(e) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }
}
