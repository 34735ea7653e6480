//! Wire-layer throughput, each figure beside its baseline from the same run:
//! - SSE decoding: ours vs `eventsource-stream` (the parser inside `reqwest-eventsource`) vs a
//!   plain `memchr` newline scan (the practical ceiling), at 16 B, 256 B, 4 KiB and 64 KiB chunks;
//! - the full pipeline (bytes → LlmEvents → assembled response) vs `eventsource-stream` +
//!   `serde_json::Value`, and our stages: SSE alone, SSE + JSON decoding, assembly alone;
//! - tool-call assembly of large arguments in small fragments (linear time);
//! - the OpenAI Responses decoder beside the Chat Completions decoder on the same content;
//! - every format's decoder (Anthropic, Chat, Responses, Gemini, Bedrock, Ollama) on the same
//!   content, beside the Anthropic decoder.
//!
//! Run: `cargo bench -p agent-loop-benches --bench wire`; results go to BENCHMARKS.md as ratios.

use std::hint::black_box;
use std::time::Duration;

use agent_loop::wire::sse::SseDecoder;
use agent_loop::wire::{StreamAssembler, WireDecoder, WireFormat};
use agent_loop::LlmEvent;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use eventsource_stream::Eventsource;
use futures::StreamExt;

/// Target size of each synthetic stream.
const STREAM_BYTES: usize = 20 << 20;

/// Deterministic pseudo-random words (no RNG dependency in the bench).
struct Words(u64);

impl Words {
    fn next(&mut self) -> &'static str {
        const WORDS: &[&str] = &[
            "the", "model", "streams", "tokens", "while", "a", "tool", "runs", "and", "returns",
            "JSON", "über", "naïve", "data", "context", "window", "é", "quickly", "🙂", "line",
        ];
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        WORDS[(self.0 % WORDS.len() as u64) as usize]
    }

    fn phrase(&mut self, n: usize) -> String {
        let mut s = String::new();
        for _ in 0..n {
            s.push(' ');
            s.push_str(self.next());
        }
        s
    }
}

/// An Anthropic stream: thinking deltas, text deltas, and a tool call with argument deltas,
/// repeated as whole messages until the target size.
pub fn anthropic_stream(target: usize) -> Vec<u8> {
    let mut w = Words(0x9E3779B97F4A7C15);
    let mut out = String::with_capacity(target + 4096);
    while out.len() < target {
        out.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":472,\"output_tokens\":1}}}\n\n");
        out.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n");
        for _ in 0..40 {
            let t = serde_json::to_string(&w.phrase(4)).unwrap();
            out.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"thinking_delta\",\"thinking\":{t}}}}}\n\n"));
        }
        out.push_str("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
        out.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
        for i in 0..120 {
            if i % 30 == 0 {
                out.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
            }
            let t = serde_json::to_string(&w.phrase(3)).unwrap();
            out.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"text_delta\",\"text\":{t}}}}}\n\n"));
        }
        out.push_str(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        );
        out.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"write_file\",\"input\":{}}}\n\n");
        let args = serde_json::json!({"path": "src/main.rs", "content": w.phrase(60)}).to_string();
        for piece in args.as_bytes().chunks(24) {
            let piece = String::from_utf8_lossy(piece);
            let p = serde_json::to_string(&piece).unwrap();
            out.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{p}}}}}\n\n"));
        }
        out.push_str(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
        );
        out.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":642}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    }
    out.into_bytes()
}

/// An OpenAI stream: content chunks and two interleaved tool calls with argument chunks.
pub fn openai_stream(target: usize) -> Vec<u8> {
    let mut w = Words(0xD1B54A32D192ED03);
    let mut out = String::with_capacity(target + 4096);
    let head = "{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{\"index\":0,\"delta\":";
    while out.len() < target {
        out.push_str(&format!("data: {head}{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"));
        for _ in 0..120 {
            let t = serde_json::to_string(&w.phrase(3)).unwrap();
            out.push_str(&format!(
                "data: {head}{{\"content\":{t}}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            ));
        }
        for (i, id) in ["call_a", "call_b"].iter().enumerate() {
            out.push_str(&format!("data: {head}{{\"tool_calls\":[{{\"index\":{i},\"id\":\"{id}\",\"type\":\"function\",\"function\":{{\"name\":\"get_weather\",\"arguments\":\"\"}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"));
        }
        let args = serde_json::json!({"city": w.phrase(20), "units": "c"}).to_string();
        for piece in args.as_bytes().chunks(12) {
            for i in 0..2 {
                let p = serde_json::to_string(&String::from_utf8_lossy(piece)).unwrap();
                out.push_str(&format!("data: {head}{{\"tool_calls\":[{{\"index\":{i},\"function\":{{\"arguments\":{p}}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"));
            }
        }
        out.push_str(&format!(
            "data: {head}{{}},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}}]}}\n\n"
        ));
        out.push_str("data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":149,\"completion_tokens\":60,\"total_tokens\":209}}\n\ndata: [DONE]\n\n");
    }
    out.into_bytes()
}

/// One message of "the same content" in both OpenAI formats: 120 text pieces of three words,
/// then two calls whose 12-byte argument pieces alternate, from the same word sequence.
struct SameContent {
    text: Vec<String>,
    args: String,
}

/// `text` in pieces of at most `n` bytes, cut at character boundaries (a stream's fragments
/// are always whole characters once decoded from JSON).
fn pieces(text: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + n).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == start {
            end = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

fn same_content(messages: usize) -> Vec<SameContent> {
    let mut w = Words(0xD1B54A32D192ED03);
    (0..messages)
        .map(|_| SameContent {
            text: (0..120).map(|_| w.phrase(3)).collect(),
            args: serde_json::json!({"city": w.phrase(20), "units": "c"}).to_string(),
        })
        .collect()
}

/// The Chat Completions bodies of `content`, one per message (as `openai_stream` writes them).
fn chat_bodies(content: &[SameContent]) -> Vec<Vec<u8>> {
    let head = "{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{\"index\":0,\"delta\":";
    content
        .iter()
        .map(|m| {
            let mut out = format!("data: {head}{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n");
            for t in &m.text {
                let t = serde_json::to_string(t).unwrap();
                out.push_str(&format!(
                    "data: {head}{{\"content\":{t}}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
                ));
            }
            for (i, id) in ["call_a", "call_b"].iter().enumerate() {
                out.push_str(&format!("data: {head}{{\"tool_calls\":[{{\"index\":{i},\"id\":\"{id}\",\"type\":\"function\",\"function\":{{\"name\":\"get_weather\",\"arguments\":\"\"}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"));
            }
            for piece in pieces(&m.args, 12) {
                for i in 0..2 {
                    let p = serde_json::to_string(piece).unwrap();
                    out.push_str(&format!("data: {head}{{\"tool_calls\":[{{\"index\":{i},\"function\":{{\"arguments\":{p}}}}}]}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"));
                }
            }
            out.push_str(&format!(
                "data: {head}{{}},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}}]}}\n\n"
            ));
            out.push_str("data: {\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":149,\"completion_tokens\":60,\"total_tokens\":209}}\n\ndata: [DONE]\n\n");
            out.into_bytes()
        })
        .collect()
}

/// The Responses bodies of `content`, one per message, with every event the API sends for it
/// (lifecycle events with the full response object, `sequence_number`, `obfuscation`, the
/// `*.done` events and the final output).
fn responses_bodies(content: &[SameContent]) -> Vec<Vec<u8>> {
    let response = |status: &str, output: &str, usage: &str| {
        format!("{{\"id\":\"resp_68af4030592c81938ec0a5fbab4a3e9f\",\"object\":\"response\",\"created_at\":1756315696,\"status\":\"{status}\",\"background\":false,\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"max_output_tokens\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[{output}],\"parallel_tool_calls\":true,\"previous_response_id\":null,\"reasoning\":{{\"effort\":null,\"summary\":null}},\"store\":false,\"temperature\":1.0,\"text\":{{\"format\":{{\"type\":\"text\"}},\"verbosity\":\"medium\"}},\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":{usage},\"user\":null,\"metadata\":{{}}}}")
    };
    content
        .iter()
        .map(|m| {
            let mut seq = 0;
            let mut out = String::new();
            let mut ev = |out: &mut String, ty: &str, rest: String| {
                out.push_str(&format!(
                    "event: {ty}\ndata: {{\"type\":\"{ty}\",{rest},\"sequence_number\":{seq}}}\n\n"
                ));
                seq += 1;
            };
            ev(&mut out, "response.created", format!("\"response\":{}", response("in_progress", "", "null")));
            ev(&mut out, "response.in_progress", format!("\"response\":{}", response("in_progress", "", "null")));
            let msg = "msg_68af4031b5d08193a1fd4a2c0e6b8e3c";
            ev(&mut out, "response.output_item.added", format!("\"output_index\":0,\"item\":{{\"id\":\"{msg}\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}"));
            ev(&mut out, "response.content_part.added", format!("\"item_id\":\"{msg}\",\"output_index\":0,\"content_index\":0,\"part\":{{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"}}"));
            for t in &m.text {
                let t = serde_json::to_string(t).unwrap();
                ev(&mut out, "response.output_text.delta", format!("\"item_id\":\"{msg}\",\"output_index\":0,\"content_index\":0,\"delta\":{t},\"logprobs\":[],\"obfuscation\":\"kX3p\""));
            }
            let text = serde_json::to_string(&m.text.concat()).unwrap();
            ev(&mut out, "response.output_text.done", format!("\"item_id\":\"{msg}\",\"output_index\":0,\"content_index\":0,\"text\":{text},\"logprobs\":[]"));
            let part = format!("{{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":{text}}}");
            ev(&mut out, "response.content_part.done", format!("\"item_id\":\"{msg}\",\"output_index\":0,\"content_index\":0,\"part\":{part}"));
            let message_item = format!("{{\"id\":\"{msg}\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{part}],\"role\":\"assistant\"}}");
            ev(&mut out, "response.output_item.done", format!("\"output_index\":0,\"item\":{message_item}"));
            let mut items = vec![message_item];
            for (i, id) in ["call_a", "call_b"].iter().enumerate() {
                ev(&mut out, "response.output_item.added", format!("\"output_index\":{},\"item\":{{\"id\":\"fc_{id}\",\"type\":\"function_call\",\"status\":\"in_progress\",\"arguments\":\"\",\"call_id\":\"{id}\",\"name\":\"get_weather\"}}", i + 1));
            }
            for piece in pieces(&m.args, 12) {
                for (i, id) in ["call_a", "call_b"].iter().enumerate() {
                    let p = serde_json::to_string(piece).unwrap();
                    ev(&mut out, "response.function_call_arguments.delta", format!("\"item_id\":\"fc_{id}\",\"output_index\":{},\"delta\":{p},\"obfuscation\":\"q9\"", i + 1));
                }
            }
            let args = serde_json::to_string(&m.args).unwrap();
            for (i, id) in ["call_a", "call_b"].iter().enumerate() {
                ev(&mut out, "response.function_call_arguments.done", format!("\"item_id\":\"fc_{id}\",\"output_index\":{},\"arguments\":{args}", i + 1));
                let item = format!("{{\"id\":\"fc_{id}\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":{args},\"call_id\":\"{id}\",\"name\":\"get_weather\"}}");
                ev(&mut out, "response.output_item.done", format!("\"output_index\":{},\"item\":{item}", i + 1));
                items.push(item);
            }
            let usage = "{\"input_tokens\":149,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":60,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":209}";
            ev(&mut out, "response.completed", format!("\"response\":{}", response("completed", &items.join(","), usage)));
            out.into_bytes()
        })
        .collect()
}

/// Decodes every body in 4 KiB chunks and assembles each response, as a client does; the
/// number of content blocks, so that nothing is optimized away.
fn decode_all(format: WireFormat, bodies: &[Vec<u8>]) -> usize {
    let mut blocks = 0;
    for body in bodies {
        let mut decoder = WireDecoder::new(format);
        let mut assembler = StreamAssembler::new();
        let mut events = Vec::new();
        for piece in body.chunks(4096) {
            decoder.push(piece, &mut events).unwrap();
            for e in events.drain(..) {
                assembler.push(&e).unwrap();
            }
        }
        decoder.finish(&mut events).unwrap();
        for e in events.drain(..) {
            assembler.push(&e).unwrap();
        }
        blocks += assembler.finish().unwrap().message.content.len();
    }
    blocks
}

/// The Chat and Responses decoders on the same content: bytes → events → assembled response,
/// per message, 4 KiB chunks.
fn bench_same_content(c: &mut Criterion) {
    let content = same_content(400);
    let chat = chat_bodies(&content);
    let responses = responses_bodies(&content);
    let assemble = |format: WireFormat, body: &[u8]| {
        let mut decoder = WireDecoder::new(format);
        let mut events = Vec::new();
        decoder.push(body, &mut events).unwrap();
        decoder.finish(&mut events).unwrap();
        let mut assembler = StreamAssembler::new();
        for e in &events {
            assembler.push(e).unwrap();
        }
        assembler.finish().unwrap()
    };
    // Same content in, same response out.
    for (a, b) in chat.iter().zip(&responses).take(3) {
        let (a, b) = (
            assemble(WireFormat::OpenAiChat, a),
            assemble(WireFormat::OpenAiResponses, b),
        );
        assert_eq!(a.message, b.message);
        assert_eq!(a.stop_reason, b.stop_reason);
    }
    let bytes = |bodies: &[Vec<u8>]| bodies.iter().map(Vec::len).sum::<usize>();
    println!(
        "same content, {} messages: chat {} bytes, responses {} bytes",
        content.len(),
        bytes(&chat),
        bytes(&responses)
    );
    let mut group = c.benchmark_group("same_content");
    group.throughput(Throughput::Elements(content.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for (name, format, bodies) in [
        ("chat", WireFormat::OpenAiChat, &chat),
        ("responses", WireFormat::OpenAiResponses, &responses),
    ] {
        group.bench_function(name, |b| b.iter(|| black_box(decode_all(format, bodies))));
    }
    group.finish();
}

/// The Anthropic bodies of `content`, one per message: a text block of the 120 pieces, then
/// the two calls one after the other (Anthropic does not interleave blocks), their arguments in
/// the same 12-byte pieces.
fn anthropic_bodies(content: &[SameContent]) -> Vec<Vec<u8>> {
    let ev = |out: &mut String, ty: &str, data: String| {
        out.push_str(&format!("event: {ty}\ndata: {data}\n\n"));
    };
    content
        .iter()
        .map(|m| {
            let mut out = String::new();
            ev(&mut out, "message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":149,\"output_tokens\":1}}}".into());
            ev(&mut out, "content_block_start", "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}".into());
            for t in &m.text {
                let t = serde_json::to_string(t).unwrap();
                ev(&mut out, "content_block_delta", format!("{{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{t}}}}}"));
            }
            ev(&mut out, "content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}".into());
            for (i, id) in ["call_a", "call_b"].iter().enumerate() {
                let i = i + 1;
                ev(&mut out, "content_block_start", format!("{{\"type\":\"content_block_start\",\"index\":{i},\"content_block\":{{\"type\":\"tool_use\",\"id\":\"{id}\",\"name\":\"get_weather\",\"input\":{{}}}}}}"));
                for piece in pieces(&m.args, 12) {
                    let p = serde_json::to_string(piece).unwrap();
                    ev(&mut out, "content_block_delta", format!("{{\"type\":\"content_block_delta\",\"index\":{i},\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{p}}}}}"));
                }
                ev(&mut out, "content_block_stop", format!("{{\"type\":\"content_block_stop\",\"index\":{i}}}"));
            }
            ev(&mut out, "message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":60}}".into());
            ev(&mut out, "message_stop", "{\"type\":\"message_stop\"}".into());
            out.into_bytes()
        })
        .collect()
}

/// The Gemini bodies of `content`: one SSE chunk per text piece (each repeating the candidate
/// envelope, as Gemini does), then one chunk with both calls whole (Gemini does not stream
/// arguments) and the finish reason and usage.
fn gemini_bodies(content: &[SameContent]) -> Vec<Vec<u8>> {
    let usage = "\"usageMetadata\":{\"promptTokenCount\":149,\"candidatesTokenCount\":60,\"totalTokenCount\":209},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"mG9vaLuQJpSWz7IPhJ3x4QE\"";
    content
        .iter()
        .map(|m| {
            let mut out = String::new();
            for t in &m.text {
                let t = serde_json::to_string(t).unwrap();
                out.push_str(&format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":{t}}}],\"role\":\"model\"}},\"index\":0}}],{usage}}}\r\n\r\n"));
            }
            let call = format!("{{\"functionCall\":{{\"name\":\"get_weather\",\"args\":{}}}}}", m.args);
            out.push_str(&format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{call},{call}],\"role\":\"model\"}},\"finishReason\":\"STOP\",\"index\":0}}],{usage}}}\r\n\r\n"));
            out.into_bytes()
        })
        .collect()
}

/// One AWS event-stream message: the prelude, the string headers, the payload, both CRC32s.
fn event_stream_message(event_type: &str, payload: &str) -> Vec<u8> {
    let mut headers = Vec::new();
    for (name, value) in [
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        headers.push(name.len() as u8);
        headers.extend_from_slice(name.as_bytes());
        headers.push(7);
        headers.extend_from_slice(&(value.len() as u16).to_be_bytes());
        headers.extend_from_slice(value.as_bytes());
    }
    let total = 12 + headers.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out.extend_from_slice(&headers);
    out.extend_from_slice(payload.as_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out
}

/// The Bedrock Converse bodies of `content`: binary event-stream messages as Bedrock sends them
/// (with its `p` padding field), the text deltas, then both calls' input fragments interleaved.
fn bedrock_bodies(content: &[SameContent]) -> Vec<Vec<u8>> {
    content
        .iter()
        .map(|m| {
            let mut out = event_stream_message("messageStart", "{\"p\":\"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0\",\"role\":\"assistant\"}");
            for t in &m.text {
                let t = serde_json::to_string(t).unwrap();
                out.extend(event_stream_message("contentBlockDelta", &format!("{{\"contentBlockIndex\":0,\"delta\":{{\"text\":{t}}},\"p\":\"abcdefghijklmnopqr\"}}")));
            }
            out.extend(event_stream_message("contentBlockStop", "{\"contentBlockIndex\":0,\"p\":\"abcdefghijklmnopqrstuvwxyzABCD\"}"));
            for (i, id) in ["call_a", "call_b"].iter().enumerate() {
                out.extend(event_stream_message("contentBlockStart", &format!("{{\"contentBlockIndex\":{},\"p\":\"abcdefghij\",\"start\":{{\"toolUse\":{{\"name\":\"get_weather\",\"toolUseId\":\"{id}\"}}}}}}", i + 1)));
            }
            for piece in pieces(&m.args, 12) {
                for i in 0..2 {
                    let p = serde_json::to_string(piece).unwrap();
                    out.extend(event_stream_message("contentBlockDelta", &format!("{{\"contentBlockIndex\":{},\"delta\":{{\"toolUse\":{{\"input\":{p}}}}},\"p\":\"abcdefghijklmnopqrstu\"}}", i + 1)));
                }
            }
            for i in 1..3 {
                out.extend(event_stream_message("contentBlockStop", &format!("{{\"contentBlockIndex\":{i},\"p\":\"abcdefghijklmnopqrstuvwxyzABCD\"}}")));
            }
            out.extend(event_stream_message("messageStop", "{\"p\":\"abcdefghijklmnopqrstuvwxyzABCDEFGH\",\"stopReason\":\"tool_use\"}"));
            out.extend(event_stream_message("metadata", "{\"metrics\":{\"latencyMs\":1234},\"p\":\"abcdefghijklmnopqrstuvwxyzABCDEF\",\"usage\":{\"inputTokens\":149,\"outputTokens\":60,\"totalTokens\":209}}"));
            out
        })
        .collect()
}

/// The Ollama bodies of `content`: one NDJSON line per text piece, one line with both calls
/// whole, and the `done` line with the counts and durations.
fn ollama_bodies(content: &[SameContent]) -> Vec<Vec<u8>> {
    let head = "{\"model\":\"qwen3:8b\",\"created_at\":\"2026-12-04T10:00:00.123456789Z\",\"message\":{\"role\":\"assistant\",";
    content
        .iter()
        .map(|m| {
            let mut out = String::new();
            for t in &m.text {
                let t = serde_json::to_string(t).unwrap();
                out.push_str(&format!("{head}\"content\":{t}}},\"done\":false}}\n"));
            }
            let call = format!("{{\"function\":{{\"name\":\"get_weather\",\"arguments\":{}}}}}", m.args);
            out.push_str(&format!("{head}\"content\":\"\",\"tool_calls\":[{call},{call}]}},\"done\":false}}\n"));
            out.push_str(&format!("{head}\"content\":\"\"}},\"done\":true,\"done_reason\":\"stop\",\"total_duration\":4883583458,\"load_duration\":1334875,\"prompt_eval_count\":149,\"prompt_eval_duration\":342546000,\"eval_count\":60,\"eval_duration\":4535599000}}\n"));
            out.into_bytes()
        })
        .collect()
}

/// Every format's decoder on the same content (the messages of [`same_content`]): bytes →
/// events → assembled response, per message, 4 KiB chunks. The bench first checks that every
/// format assembles the same text and the same two calls (names and inputs; Gemini and Ollama
/// make their own ids).
fn bench_formats(c: &mut Criterion) {
    let content = same_content(400);
    let bodies = [
        (
            "anthropic",
            WireFormat::Anthropic,
            anthropic_bodies(&content),
        ),
        ("chat", WireFormat::OpenAiChat, chat_bodies(&content)),
        (
            "responses",
            WireFormat::OpenAiResponses,
            responses_bodies(&content),
        ),
        ("gemini", WireFormat::Gemini, gemini_bodies(&content)),
        ("bedrock", WireFormat::Bedrock, bedrock_bodies(&content)),
        ("ollama", WireFormat::Ollama, ollama_bodies(&content)),
    ];
    let assemble = |format: WireFormat, body: &[u8]| {
        let mut decoder = WireDecoder::new(format);
        let mut events = Vec::new();
        decoder.push(body, &mut events).unwrap();
        decoder.finish(&mut events).unwrap();
        let mut assembler = StreamAssembler::new();
        for e in &events {
            assembler.push(e).unwrap();
        }
        let response = assembler.finish().unwrap();
        let calls: Vec<(String, serde_json::Value)> = response
            .message
            .tool_uses()
            .map(|(_, name, input)| (name.to_owned(), input.clone()))
            .collect();
        (response.message.text(), calls)
    };
    for (name, format, body) in &bodies {
        for (i, m) in content.iter().enumerate().take(3) {
            let (text, calls) = assemble(*format, &body[i]);
            assert_eq!(text, m.text.concat(), "{name}");
            let input: serde_json::Value = serde_json::from_str(&m.args).unwrap();
            assert_eq!(
                calls,
                vec![("get_weather".to_owned(), input.clone()); 2],
                "{name}"
            );
        }
        let bytes: usize = body.iter().map(Vec::len).sum();
        println!("formats/{name}: {} messages, {bytes} bytes", content.len());
    }
    if let Ok(path) = std::env::var("AGENT_LOOP_BEDROCK_BODY") {
        // The Bedrock bytes, for scripts/bench-botocore-eventstream.py.
        let all: Vec<u8> = bodies[4].2.concat();
        std::fs::write(&path, all).unwrap();
        println!("wrote the Bedrock bodies to {path}");
    }
    let mut group = c.benchmark_group("formats");
    group.throughput(Throughput::Elements(content.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    for (name, format, bodies) in &bodies {
        group.bench_function(*name, |b| b.iter(|| black_box(decode_all(*format, bodies))));
    }
    group.finish();
}

/// Splits a concatenation of whole messages back into per-message bodies (for the pipeline,
/// which assembles one response per message).
fn messages(body: &[u8], end_marker: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(pos) = memchr::memmem::find(&body[start..], end_marker) {
        let end = start + pos + end_marker.len();
        out.push(body[start..end].to_vec());
        start = end;
    }
    out
}

fn ours_sse(body: &[u8], chunk: usize) -> usize {
    let mut decoder = SseDecoder::new();
    let mut n = 0usize;
    for piece in body.chunks(chunk) {
        decoder
            .push_with(piece, |e| {
                n += e.data.len() & 1 | 1;
                Ok(())
            })
            .unwrap();
    }
    decoder
        .finish_with(|_| {
            n += 1;
            Ok(())
        })
        .unwrap();
    n
}

fn eventsource_sse(body: &[u8], chunk: usize) -> usize {
    let chunks: Vec<Result<bytes::Bytes, std::convert::Infallible>> = body
        .chunks(chunk)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    futures::executor::block_on(async {
        let mut stream = futures::stream::iter(chunks).eventsource();
        let mut n = 0usize;
        while let Some(event) = stream.next().await {
            let event = event.unwrap();
            n += event.data.len() & 1 | 1;
        }
        n
    })
}

fn newline_scan(body: &[u8], chunk: usize) -> usize {
    let mut n = 0;
    for piece in body.chunks(chunk) {
        n += memchr::memchr_iter(b'\n', piece).count();
    }
    n
}

fn bench_sse(c: &mut Criterion) {
    for (name, body) in [
        ("anthropic", anthropic_stream(STREAM_BYTES)),
        ("openai", openai_stream(STREAM_BYTES)),
    ] {
        let mut group = c.benchmark_group(format!("sse/{name}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(4));
        for chunk in [16usize, 256, 4096, 65536] {
            group.bench_with_input(
                BenchmarkId::new("agent_loop", chunk),
                &chunk,
                |b, &chunk| b.iter(|| black_box(ours_sse(&body, chunk))),
            );
            group.bench_with_input(
                BenchmarkId::new("eventsource_stream", chunk),
                &chunk,
                |b, &chunk| b.iter(|| black_box(eventsource_sse(&body, chunk))),
            );
            group.bench_with_input(
                BenchmarkId::new("memchr_newlines", chunk),
                &chunk,
                |b, &chunk| b.iter(|| black_box(newline_scan(&body, chunk))),
            );
        }
        group.finish();
    }
}

fn ours_pipeline(format: WireFormat, messages: &[Vec<u8>], chunk: usize) -> usize {
    let mut events = Vec::with_capacity(256);
    let mut blocks = 0;
    for body in messages {
        let mut decoder = WireDecoder::new(format);
        let mut assembler = StreamAssembler::new();
        for piece in body.chunks(chunk) {
            decoder.push(piece, &mut events).unwrap();
            for e in events.drain(..) {
                assembler.push(&e).unwrap();
            }
        }
        decoder.finish(&mut events).unwrap();
        for e in events.drain(..) {
            assembler.push(&e).unwrap();
        }
        blocks += assembler.finish().unwrap().message.content.len();
    }
    blocks
}

/// The straightforward pipeline: eventsource-stream events parsed into owned
/// `serde_json::Value`, text appended, tool arguments collected per index and parsed at the end.
fn baseline_pipeline(openai: bool, messages: &[Vec<u8>], chunk: usize) -> usize {
    let mut blocks = 0;
    for body in messages {
        let chunks: Vec<Result<bytes::Bytes, std::convert::Infallible>> = body
            .chunks(chunk)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect();
        blocks += futures::executor::block_on(async {
            let mut stream = futures::stream::iter(chunks).eventsource();
            let mut text = String::new();
            let mut args: std::collections::BTreeMap<u64, String> = Default::default();
            while let Some(event) = stream.next().await {
                let event = event.unwrap();
                if event.data == "[DONE]" {
                    break;
                }
                let v: serde_json::Value = serde_json::from_str(&event.data).unwrap();
                if openai {
                    let delta = &v["choices"][0]["delta"];
                    if let Some(t) = delta["content"].as_str() {
                        text.push_str(t);
                    }
                    if let Some(calls) = delta["tool_calls"].as_array() {
                        for call in calls {
                            let i = call["index"].as_u64().unwrap_or(0);
                            if let Some(a) = call["function"]["arguments"].as_str() {
                                args.entry(i).or_default().push_str(a);
                            }
                        }
                    }
                } else if v["type"] == "content_block_delta" {
                    let d = &v["delta"];
                    let i = v["index"].as_u64().unwrap_or(0);
                    if let Some(t) = d["text"].as_str().or(d["thinking"].as_str()) {
                        text.push_str(t);
                    } else if let Some(p) = d["partial_json"].as_str() {
                        args.entry(i).or_default().push_str(p);
                    }
                }
            }
            let parsed: Vec<serde_json::Value> = args
                .values()
                .map(|a| serde_json::from_str(a).unwrap())
                .collect();
            black_box(&text);
            parsed.len() + 1
        });
    }
    blocks
}

fn decode_only(format: WireFormat, messages: &[Vec<u8>], chunk: usize) -> usize {
    let mut events = Vec::with_capacity(256);
    let mut n = 0;
    for body in messages {
        let mut decoder = WireDecoder::new(format);
        for piece in body.chunks(chunk) {
            decoder.push(piece, &mut events).unwrap();
            n += events.len();
            events.clear();
        }
        decoder.finish(&mut events).unwrap();
        n += events.len();
        events.clear();
    }
    n
}

fn bench_pipeline(c: &mut Criterion) {
    for (name, format, body, marker) in [
        (
            "anthropic",
            WireFormat::Anthropic,
            anthropic_stream(STREAM_BYTES / 2),
            &b"{\"type\":\"message_stop\"}\n\n"[..],
        ),
        (
            "openai",
            WireFormat::OpenAiChat,
            openai_stream(STREAM_BYTES / 2),
            &b"data: [DONE]\n\n"[..],
        ),
    ] {
        let msgs = messages(&body, marker);
        // Each message's events, decoded once, for the assembly stage alone.
        let decoded: Vec<Vec<LlmEvent>> = msgs
            .iter()
            .map(|m| {
                let mut decoder = WireDecoder::new(format);
                let mut out = Vec::new();
                decoder.push(m, &mut out).unwrap();
                decoder.finish(&mut out).unwrap();
                out
            })
            .collect();
        let events: u64 = decoded.iter().map(|d| d.len() as u64).sum();
        let mut group = c.benchmark_group(format!("pipeline/{name}"));
        group.throughput(Throughput::Elements(events));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(4));
        let chunk = 4096;
        group.bench_function("agent_loop", |b| {
            b.iter(|| black_box(ours_pipeline(format, &msgs, chunk)))
        });
        group.bench_function("eventsource_serde_value", |b| {
            b.iter(|| {
                black_box(baseline_pipeline(
                    format == WireFormat::OpenAiChat,
                    &msgs,
                    chunk,
                ))
            })
        });
        group.bench_function("stage_sse_only", |b| {
            b.iter(|| black_box(ours_sse(&body, chunk)))
        });
        group.bench_function("stage_sse_and_json_decode", |b| {
            b.iter(|| black_box(decode_only(format, &msgs, chunk)))
        });
        group.bench_function("stage_assembly_only", |b| {
            b.iter(|| {
                let mut blocks = 0;
                for events in &decoded {
                    let mut assembler = StreamAssembler::new();
                    for e in events {
                        assembler.push(e).unwrap();
                    }
                    blocks += assembler.finish().unwrap().message.content.len();
                }
                black_box(blocks)
            })
        });
        group.finish();
    }
}

fn bench_assembly(c: &mut Criterion) {
    let mut group = c.benchmark_group("assembly/tool_arguments");
    group.sample_size(10);
    for mb in [1usize, 4, 10] {
        // A JSON object whose one string value fills `mb` MiB, cut into 1..=64-byte fragments.
        let value = "x".repeat(mb << 20);
        let args = format!("{{\"content\":\"{value}\"}}");
        let mut fragments = Vec::new();
        let mut rest = args.as_str();
        let mut k = 1usize;
        while !rest.is_empty() {
            let n = (k % 64 + 1).min(rest.len());
            fragments.push(LlmEvent::ToolCallDelta {
                index: 0,
                partial_json: rest[..n].to_owned(),
            });
            rest = &rest[n..];
            k = k.wrapping_mul(31).wrapping_add(7);
        }
        group.throughput(Throughput::Bytes(args.len() as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{mb}MiB")),
            &fragments,
            |b, fragments| {
                b.iter(|| {
                    let mut a = StreamAssembler::new();
                    a.push(&LlmEvent::ToolCallStart {
                        index: 0,
                        id: "t".into(),
                        name: "write".into(),
                    })
                    .unwrap();
                    for f in fragments {
                        a.push(f).unwrap();
                    }
                    a.push(&LlmEvent::BlockStop { index: 0 }).unwrap();
                    a.push(&LlmEvent::MessageStop {
                        stop_reason: agent_loop::StopReason::ToolUse,
                    })
                    .unwrap();
                    black_box(a.finish().unwrap())
                })
            },
        );
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_sse,
    bench_pipeline,
    bench_assembly,
    bench_same_content,
    bench_formats
);
criterion_main!(benches);
