//! The wire layer on hand-written fixtures: the exact events and assembled responses of every
//! file in `tests/fixtures/`, and every way a stream can fail (truncation, garbage, invalid
//! JSON, error events, oversize input, illegal block transitions) ending in a clear error.

use crate::common;

use agent_loop::wire::{
    InvalidToolCallReason, StreamAssembler, StreamLimits, WireDecoder, WireFormat,
};
use agent_loop::{ContentBlock, LlmError, LlmEvent, ModelResponse, StopReason, Usage};
use common::Decoded;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// helpers

fn anthropic(name: &str) -> Decoded {
    common::decode(
        WireFormat::Anthropic,
        &common::fixture(&format!("anthropic/{name}.sse")),
    )
}

fn openai(name: &str) -> Decoded {
    common::decode(
        WireFormat::OpenAiChat,
        &common::fixture(&format!("openai/{name}.sse")),
    )
}

fn response<'a>(name: &str, decoded: &'a Decoded) -> &'a ModelResponse {
    decoded
        .result
        .as_ref()
        .unwrap_or_else(|e| panic!("{name}: expected a response, got {e:?}"))
}

fn text(s: &str) -> ContentBlock {
    ContentBlock::Text { text: s.into() }
}

fn tool(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

fn thinking(thinking: &str, signature: &str) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: thinking.into(),
        signature: signature.into(),
    }
}

fn usage(input: u64, output: u64, cache_read: u64, cache_creation: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_input_tokens: cache_read,
        cache_creation_input_tokens: cache_creation,
        ..Usage::default()
    }
}

/// What a successful fixture must assemble to.
struct Expect<'a> {
    id: &'a str,
    model: &'a str,
    content: Vec<ContentBlock>,
    stop_reason: StopReason,
    usage: Usage,
}

fn check(name: &str, decoded: &Decoded, expect: Expect<'_>) {
    let r = response(name, decoded);
    assert_eq!(r.message.role, agent_loop::Role::Assistant, "{name}");
    assert_eq!(r.message.content, expect.content, "{name}: content");
    assert_eq!(r.stop_reason, expect.stop_reason, "{name}: stop reason");
    assert_eq!(r.usage, expect.usage, "{name}: usage");
    assert_eq!(r.id, expect.id, "{name}: id");
    assert_eq!(r.model, expect.model, "{name}: model");
    assert!(
        r.invalid_tool_calls.is_empty(),
        "{name}: {:?}",
        r.invalid_tool_calls
    );
    // The stream-level invariants every successful decode keeps.
    assert!(
        matches!(decoded.events.first(), Some(LlmEvent::MessageStart { .. })),
        "{name}: first event {:?}",
        decoded.events.first()
    );
    assert!(
        matches!(decoded.events.last(), Some(LlmEvent::MessageStop { .. })),
        "{name}: last event {:?}",
        decoded.events.last()
    );
}

fn start(id: &str, model: &str) -> LlmEvent {
    LlmEvent::MessageStart {
        id: id.into(),
        model: model.into(),
    }
}

fn text_delta(index: usize, text: &str) -> LlmEvent {
    LlmEvent::TextDelta {
        index,
        text: text.into(),
    }
}

fn call_start(index: usize, id: &str, name: &str) -> LlmEvent {
    LlmEvent::ToolCallStart {
        index,
        id: id.into(),
        name: name.into(),
    }
}

fn args(index: usize, partial_json: &str) -> LlmEvent {
    LlmEvent::ToolCallDelta {
        index,
        partial_json: partial_json.into(),
    }
}

fn stop(index: usize) -> LlmEvent {
    LlmEvent::BlockStop { index }
}

fn message_stop(stop_reason: StopReason) -> LlmEvent {
    LlmEvent::MessageStop { stop_reason }
}

fn decode_str(format: WireFormat, body: &str) -> Decoded {
    common::decode(format, body.as_bytes())
}

fn malformed_message(result: &Result<ModelResponse, LlmError>) -> String {
    match result {
        Err(LlmError::Malformed { message }) => message.clone(),
        other => panic!("expected LlmError::Malformed, got {other:?}"),
    }
}

fn is_incomplete(result: &Result<ModelResponse, LlmError>) -> bool {
    matches!(result, Err(LlmError::Incomplete { .. }))
}

const SONNET: &str = "claude-sonnet-4-5";
const GPT: &str = "gpt-4o-2024-08-06";

/// A complete Anthropic body with the given events between message_start and message_delta.
fn anthropic_body(blocks: &str, stop_reason: &str) -> String {
    format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_x\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}}}\n\n\
         {blocks}\
         event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop_reason}\"}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
         event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    )
}

fn block_start(index: usize, block: &str) -> String {
    format!("event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{index},\"content_block\":{block}}}\n\n")
}

fn block_delta(index: usize, delta: &str) -> String {
    format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{delta}}}\n\n")
}

fn block_stop(index: usize) -> String {
    format!(
        "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":{index}}}\n\n"
    )
}

fn oa_chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

// ---------------------------------------------------------------------------------------------
// Anthropic fixtures

#[test]
fn anthropic_text_events_and_response() {
    let d = anthropic("text");
    assert_eq!(
        d.events,
        vec![
            start("msg_01TextFixture", SONNET),
            LlmEvent::Usage(usage(25, 1, 0, 0)),
            text_delta(0, ""),
            text_delta(0, "Hello"),
            text_delta(0, ", wörld — café ☕"),
            text_delta(0, " 🦀\n\"quoted\"."),
            stop(0),
            LlmEvent::Usage(usage(25, 12, 0, 0)),
            message_stop(StopReason::EndTurn),
        ]
    );
    check(
        "text",
        &d,
        Expect {
            id: "msg_01TextFixture",
            model: SONNET,
            content: vec![text("Hello, wörld — café ☕ 🦀\n\"quoted\".")],
            stop_reason: StopReason::EndTurn,
            usage: usage(25, 12, 0, 0),
        },
    );
    assert_eq!(
        response("text", &d).text(),
        "Hello, wörld — café ☕ 🦀\n\"quoted\"."
    );
}

#[test]
fn anthropic_tool_use_first_fragment_empty() {
    let d = anthropic("tool_use");
    assert_eq!(
        d.events,
        vec![
            start("msg_01ToolUse", SONNET),
            LlmEvent::Usage(usage(472, 2, 0, 0)),
            text_delta(0, ""),
            text_delta(0, "Let me check the weather."),
            stop(0),
            call_start(1, "toolu_01Weather", "get_weather"),
            args(1, ""),
            args(1, "{\"loc"),
            args(1, "ation\": \"Paris, "),
            args(1, "FR\", \"unit\": \"c"),
            args(1, "elsius\"}"),
            stop(1),
            LlmEvent::Usage(usage(472, 89, 0, 0)),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "tool_use",
        &d,
        Expect {
            id: "msg_01ToolUse",
            model: SONNET,
            content: vec![
                text("Let me check the weather."),
                tool(
                    "toolu_01Weather",
                    "get_weather",
                    json!({"location": "Paris, FR", "unit": "celsius"}),
                ),
            ],
            stop_reason: StopReason::ToolUse,
            usage: usage(472, 89, 0, 0),
        },
    );
}

#[test]
fn anthropic_two_tool_calls() {
    let d = anthropic("two_tool_calls");
    check(
        "two_tool_calls",
        &d,
        Expect {
            id: "msg_01TwoCalls",
            model: SONNET,
            content: vec![
                tool("toolu_01A", "get_weather", json!({"location": "Paris"})),
                tool(
                    "toolu_01B",
                    "get_time",
                    json!({"tz": "Europe/Paris", "h24": true}),
                ),
            ],
            stop_reason: StopReason::ToolUse,
            usage: usage(510, 61, 0, 0),
        },
    );
    let calls: Vec<_> = response("two_tool_calls", &d)
        .message
        .tool_uses()
        .map(|(id, name, _)| (id.to_owned(), name.to_owned()))
        .collect();
    assert_eq!(
        calls,
        [
            ("toolu_01A".to_owned(), "get_weather".to_owned()),
            ("toolu_01B".to_owned(), "get_time".to_owned())
        ]
    );
}

#[test]
fn anthropic_thinking_with_signature() {
    let d = anthropic("thinking");
    // The block start opens the thinking block; its empty signature is not an event.
    assert_eq!(
        d.events[2..7],
        [
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: String::new()
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "27 * 453: 27*400 = 10800,".into()
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: " 27*53 = 1431; sum 12231.".into()
            },
            LlmEvent::SignatureDelta {
                index: 0,
                signature: "EqQBCkYIARgCIkBzaWduYXR1cmU=".into()
            },
            stop(0),
        ]
    );
    check(
        "thinking",
        &d,
        Expect {
            id: "msg_01Thinking",
            model: SONNET,
            content: vec![
                thinking(
                    "27 * 453: 27*400 = 10800, 27*53 = 1431; sum 12231.",
                    "EqQBCkYIARgCIkBzaWduYXR1cmU=",
                ),
                text("27 * 453 = 12,231"),
            ],
            stop_reason: StopReason::EndTurn,
            usage: usage(40, 58, 0, 0),
        },
    );
}

#[test]
fn anthropic_redacted_thinking() {
    let d = anthropic("redacted_thinking");
    let data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";
    assert_eq!(
        d.events[2..4],
        [
            LlmEvent::RedactedThinking {
                index: 0,
                data: data.into()
            },
            stop(0)
        ]
    );
    check(
        "redacted_thinking",
        &d,
        Expect {
            id: "msg_01Redacted",
            model: SONNET,
            content: vec![
                ContentBlock::RedactedThinking { data: data.into() },
                text("Done."),
            ],
            stop_reason: StopReason::EndTurn,
            usage: usage(30, 20, 0, 0),
        },
    );
}

#[test]
fn anthropic_server_tool_blocks_kept_verbatim_with_assembled_input() {
    let d = anthropic("web_search");
    assert!(d.events.contains(&LlmEvent::OtherBlock {
        index: 1,
        block: json!({"type": "server_tool_use", "id": "srvtoolu_01Search", "name": "web_search", "input": {}}),
    }));
    assert!(d.events.contains(&args(1, "{\"query\": \"rust s")));
    let result_block = json!({
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01Search",
        "content": [{
            "type": "web_search_result",
            "title": "Server-sent events",
            "url": "https://example.com/sse",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAw",
            "page_age": "April 30, 2025"
        }]
    });
    check(
        "web_search",
        &d,
        Expect {
            id: "msg_01WebSearch",
            model: SONNET,
            content: vec![
                text("I'll search for that."),
                ContentBlock::Other(json!({
                    "type": "server_tool_use",
                    "id": "srvtoolu_01Search",
                    "name": "web_search",
                    "input": {"query": "rust sse parser"}
                })),
                ContentBlock::Other(result_block.clone()),
                text("Here is what I found."),
            ],
            stop_reason: StopReason::EndTurn,
            // message_delta's input_tokens replaces message_start's.
            usage: usage(10682, 510, 0, 0),
        },
    );
    // Verbatim also means it serializes back to exactly what was received.
    let r = response("web_search", &d);
    assert_eq!(
        serde_json::to_value(&r.message.content[2]).unwrap(),
        result_block
    );
    // Server tools are not client tool calls.
    assert_eq!(r.message.tool_uses().count(), 0);
}

#[test]
fn anthropic_citations_delta_is_tolerated() {
    let d = anthropic("citations_delta");
    assert_eq!(
        d.events[2..5],
        [
            text_delta(0, ""),
            text_delta(0, "the grass is green"),
            stop(0)
        ]
    );
    check(
        "citations_delta",
        &d,
        Expect {
            id: "msg_01Citations",
            model: SONNET,
            content: vec![text("the grass is green")],
            stop_reason: StopReason::EndTurn,
            usage: usage(900, 9, 0, 0),
        },
    );
}

#[test]
fn anthropic_unknown_delta_type_is_ignored() {
    let d = anthropic("unknown_delta_type");
    check(
        "unknown_delta_type",
        &d,
        Expect {
            id: "msg_01UnknownDelta",
            model: SONNET,
            content: vec![text("one two")],
            stop_reason: StopReason::EndTurn,
            usage: usage(10, 4, 0, 0),
        },
    );
    assert_eq!(d.events.len(), 8, "{:#?}", d.events);
}

#[test]
fn anthropic_unknown_block_type_is_kept_verbatim() {
    let d = anthropic("unknown_block_type");
    let block = json!({"type": "hologram", "payload": {"frames": [1, 2, 3]}, "label": "ß"});
    assert_eq!(
        d.events[2..4],
        [
            LlmEvent::OtherBlock {
                index: 0,
                block: block.clone()
            },
            stop(0)
        ]
    );
    check(
        "unknown_block_type",
        &d,
        Expect {
            id: "msg_01UnknownBlock",
            model: SONNET,
            content: vec![ContentBlock::Other(block), text("after")],
            stop_reason: StopReason::EndTurn,
            usage: usage(10, 7, 0, 0),
        },
    );
}

#[test]
fn anthropic_unknown_event_is_ignored() {
    let d = anthropic("unknown_event");
    assert_eq!(
        d.events,
        vec![
            start("msg_01UnknownEvent", SONNET),
            LlmEvent::Usage(usage(10, 1, 0, 0)),
            text_delta(0, ""),
            text_delta(0, "still here"),
            stop(0),
            LlmEvent::Usage(usage(10, 3, 0, 0)),
            message_stop(StopReason::EndTurn),
        ]
    );
    check(
        "unknown_event",
        &d,
        Expect {
            id: "msg_01UnknownEvent",
            model: SONNET,
            content: vec![text("still here")],
            stop_reason: StopReason::EndTurn,
            usage: usage(10, 3, 0, 0),
        },
    );
}

#[test]
fn anthropic_pings_everywhere_produce_nothing() {
    let d = anthropic("pings_everywhere");
    assert_eq!(
        d.events,
        vec![
            start("msg_01Pings", SONNET),
            LlmEvent::Usage(usage(10, 1, 0, 0)),
            call_start(0, "toolu_01Ping", "echo"),
            args(0, "{\"text\":"),
            args(0, " \"pong\"}"),
            stop(0),
            LlmEvent::Usage(usage(10, 11, 0, 0)),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "pings_everywhere",
        &d,
        Expect {
            id: "msg_01Pings",
            model: SONNET,
            content: vec![tool("toolu_01Ping", "echo", json!({"text": "pong"}))],
            stop_reason: StopReason::ToolUse,
            usage: usage(10, 11, 0, 0),
        },
    );
    assert!(d.events.iter().all(|e| e.is_content()
        || matches!(
            e,
            LlmEvent::MessageStart { .. }
                | LlmEvent::Usage(_)
                | LlmEvent::BlockStop { .. }
                | LlmEvent::MessageStop { .. }
        )));
}

#[test]
fn anthropic_usage_is_cumulative_and_input_tokens_may_be_updated() {
    let d = anthropic("usage_cumulative");
    let usages: Vec<Usage> = d
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .collect();
    assert_eq!(
        usages,
        [usage(2095, 1, 1800, 120), usage(2100, 15, 1800, 120)]
    );
    check(
        "usage_cumulative",
        &d,
        Expect {
            id: "msg_01Usage",
            model: SONNET,
            content: vec![text("ok")],
            stop_reason: StopReason::StopSequence,
            // output_tokens is the last figure (15), not a sum (16).
            usage: usage(2100, 15, 1800, 120),
        },
    );
    let r = response("usage_cumulative", &d);
    assert_eq!(r.usage.total_input_tokens(), 2100 + 1800 + 120);
    assert_eq!(r.usage.total_tokens(), 2100 + 1800 + 120 + 15);
}

#[test]
fn anthropic_error_event_is_a_stream_error() {
    let d = anthropic("error_overloaded");
    assert_eq!(
        d.events,
        vec![
            start("msg_01Overloaded", SONNET),
            LlmEvent::Usage(usage(10, 1, 0, 0)),
            text_delta(0, ""),
            text_delta(0, "Hel"),
        ]
    );
    let err = d.result.unwrap_err();
    assert_eq!(
        err,
        LlmError::Stream {
            error_type: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
    assert!(err.is_retryable());
    assert!(err.to_string().contains("overloaded_error"), "{err}");
    assert!(err.to_string().contains("Overloaded"), "{err}");
}

#[test]
fn anthropic_max_tokens_inside_tool_json_marks_the_call_incomplete() {
    let d = anthropic("max_tokens_in_tool_json");
    let r = response("max_tokens_in_tool_json", &d);
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.usage, usage(50, 32, 0, 0));
    // The half-assembled call is in the message with an empty input, and listed as invalid.
    assert_eq!(
        r.message.content,
        vec![
            text("Writing the file."),
            tool("toolu_01Cut", "make_file", json!({}))
        ]
    );
    assert_eq!(r.invalid_tool_calls.len(), 1);
    let call = &r.invalid_tool_calls[0];
    assert_eq!(call.id, "toolu_01Cut");
    assert_eq!(call.name, "make_file");
    assert_eq!(
        call.raw_arguments,
        "{\"filename\": \"notes.txt\", \"text\": \"first li"
    );
    assert_eq!(call.reason, InvalidToolCallReason::Incomplete);
    assert!(r.is_invalid_tool_call("toolu_01Cut"));
}

#[test]
fn anthropic_max_tokens_inside_tool_json_with_block_stopped_is_never_executed() {
    let d = anthropic("max_tokens_in_tool_json_block_stopped");
    let r = response("max_tokens_in_tool_json_block_stopped", &d);
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(
        r.message.content,
        vec![tool("toolu_01CutStop", "make_file", json!({}))]
    );
    assert_eq!(r.invalid_tool_calls.len(), 1);
    assert_eq!(r.invalid_tool_calls[0].id, "toolu_01CutStop");
    assert_eq!(
        r.invalid_tool_calls[0].raw_arguments,
        "{\"filename\": \"notes.txt\", \"text\": \"first li"
    );
}

#[test]

fn anthropic_max_tokens_inside_tool_json_with_block_stopped_is_incomplete() {
    let d = anthropic("max_tokens_in_tool_json_block_stopped");
    let r = response("max_tokens_in_tool_json_block_stopped", &d);
    assert_eq!(
        r.invalid_tool_calls[0].reason,
        InvalidToolCallReason::Incomplete
    );
}

#[test]
fn anthropic_crlf_line_endings_decode_like_lf() {
    let body = common::fixture("anthropic/crlf.sse");
    assert!(body.windows(2).filter(|w| w == b"\r\n").count() > 20);
    let d = common::decode(WireFormat::Anthropic, &body);
    check(
        "crlf",
        &d,
        Expect {
            id: "msg_01Crlf",
            model: SONNET,
            content: vec![
                text("Line endings: CRLF é"),
                tool("toolu_01Crlf", "echo", json!({"a": [1, 2]})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: usage(12, 20, 0, 0),
        },
    );
    let lf = String::from_utf8(body).unwrap().replace("\r\n", "\n");
    let cr = lf.replace('\n', "\r");
    assert_eq!(decode_str(WireFormat::Anthropic, &lf), d);
    assert_eq!(decode_str(WireFormat::Anthropic, &cr), d);
}

#[test]
fn anthropic_leading_bom_is_stripped() {
    let body = common::fixture("anthropic/bom.sse");
    assert_eq!(body[..3], [0xEF, 0xBB, 0xBF]);
    let d = common::decode(WireFormat::Anthropic, &body);
    check(
        "bom",
        &d,
        Expect {
            id: "msg_01Bom",
            model: "claude-haiku-4-5",
            content: vec![text("starts with a BOM")],
            stop_reason: StopReason::EndTurn,
            usage: usage(8, 5, 0, 0),
        },
    );
    assert_eq!(common::decode(WireFormat::Anthropic, &body[3..]), d);
}

#[test]
fn anthropic_body_without_final_newline_completes() {
    let body = common::fixture("anthropic/no_final_newline.sse");
    assert!(body.ends_with(b"{\"type\":\"message_stop\"}"));
    let d = common::decode(WireFormat::Anthropic, &body);
    check(
        "no_final_newline",
        &d,
        Expect {
            id: "msg_01NoNewline",
            model: "claude-haiku-4-5",
            content: vec![text("no final newline")],
            stop_reason: StopReason::EndTurn,
            usage: usage(8, 5, 0, 0),
        },
    );
    // Without finish() the last event is still pending.
    let mut decoder = WireDecoder::new(WireFormat::Anthropic);
    let mut events = Vec::new();
    decoder.push(&body, &mut events).unwrap();
    assert!(!decoder.is_done());
    assert!(!events
        .iter()
        .any(|e| matches!(e, LlmEvent::MessageStop { .. })));
    decoder.finish(&mut events).unwrap();
    assert!(decoder.is_done());
    assert_eq!(events, d.events);
}

// ---------------------------------------------------------------------------------------------
// OpenAI fixtures

#[test]
fn openai_content_deltas_after_role_only_chunk() {
    let d = openai("content_deltas");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-text01", GPT),
            text_delta(0, "Hello"),
            text_delta(0, ", wörld — café ☕"),
            text_delta(0, " 🦀\n\"quoted\"."),
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    );
    check(
        "content_deltas",
        &d,
        Expect {
            id: "chatcmpl-text01",
            model: GPT,
            content: vec![text("Hello, wörld — café ☕ 🦀\n\"quoted\".")],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_tool_call_id_and_name_only_in_first_fragment() {
    let d = openai("tool_call");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-tool01", GPT),
            call_start(0, "call_weather01", "get_weather"),
            args(0, "{\"loc"),
            args(0, "ation\": \"Paris, "),
            args(0, "FR\"}"),
            stop(0),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "tool_call",
        &d,
        Expect {
            id: "chatcmpl-tool01",
            model: GPT,
            content: vec![tool(
                "call_weather01",
                "get_weather",
                json!({"location": "Paris, FR"}),
            )],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_two_calls_interleaved_stay_apart() {
    let d = openai("two_calls_interleaved");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-inter01", GPT),
            call_start(0, "call_A", "get_weather"),
            call_start(1, "call_B", "get_time"),
            args(0, "{\"city\": "),
            args(1, "{\"tz\": "),
            args(0, "\"Oslo\"}"),
            args(1, "\"UTC\"}"),
            stop(0),
            stop(1),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "two_calls_interleaved",
        &d,
        Expect {
            id: "chatcmpl-inter01",
            model: GPT,
            content: vec![
                tool("call_A", "get_weather", json!({"city": "Oslo"})),
                tool("call_B", "get_time", json!({"tz": "UTC"})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_several_calls_in_one_chunk() {
    let d = openai("several_calls_one_chunk");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-multi01", GPT),
            call_start(0, "call_1", "add"),
            args(0, "{\"a\": 1, \"b\": 2}"),
            call_start(1, "call_2", "add"),
            args(1, "{\"a\": 3, \"b\": 4}"),
            call_start(2, "call_3", "noop"),
            stop(0),
            stop(1),
            stop(2),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "several_calls_one_chunk",
        &d,
        Expect {
            id: "chatcmpl-multi01",
            model: GPT,
            content: vec![
                tool("call_1", "add", json!({"a": 1, "b": 2})),
                tool("call_2", "add", json!({"a": 3, "b": 4})),
                tool("call_3", "noop", json!({})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_text_and_call_in_one_chunk() {
    let d = openai("text_and_call_one_chunk");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-mixed01", GPT),
            text_delta(0, "Checking."),
            // The text block is complete when the call starts.
            stop(0),
            call_start(1, "call_mix", "lookup"),
            args(1, "{\"q\": \"x\"}"),
            stop(1),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "text_and_call_one_chunk",
        &d,
        Expect {
            id: "chatcmpl-mixed01",
            model: GPT,
            content: vec![
                text("Checking."),
                tool("call_mix", "lookup", json!({"q": "x"})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_refusal_is_text_with_refusal_stop_reason() {
    let d = openai("refusal");
    check(
        "refusal",
        &d,
        Expect {
            id: "chatcmpl-refuse01",
            model: GPT,
            content: vec![text("I'm sorry, I can't help with that.")],
            stop_reason: StopReason::Refusal,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_reasoning_content_is_a_thinking_block() {
    let d = openai("reasoning_content");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-reason01", "deepseek-reasoner"),
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "The user greets; ".into()
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "answer briefly.".into()
            },
            // A reasoning block is complete when text starts.
            stop(0),
            text_delta(1, "Hi!"),
            stop(1),
            message_stop(StopReason::EndTurn),
        ]
    );
    check(
        "reasoning_content",
        &d,
        Expect {
            id: "chatcmpl-reason01",
            model: "deepseek-reasoner",
            content: vec![
                thinking("The user greets; answer briefly.", ""),
                text("Hi!"),
            ],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_reasoning_field_is_a_thinking_block() {
    let d = openai("reasoning");
    check(
        "reasoning",
        &d,
        Expect {
            id: "gen-reason02",
            model: "qwen/qwen3-32b",
            content: vec![thinking("Count: 1, 2, 3.", ""), text("Three.")],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_finish_reasons_map_to_stop_reasons() {
    for (name, id, content, reason) in [
        (
            "finish_length",
            "chatcmpl-length",
            vec![text("Partial")],
            StopReason::MaxTokens,
        ),
        (
            "finish_content_filter",
            "chatcmpl-contentfilter",
            vec![text("Partial")],
            StopReason::ContentFilter,
        ),
        (
            "finish_function_call",
            "chatcmpl-fncall01",
            vec![tool("call_fn", "get_weather", json!({"city": "Rome"}))],
            StopReason::ToolUse,
        ),
        (
            "finish_reason_empty_and_null",
            "chatcmpl-empty01",
            vec![text("No reason given.")],
            StopReason::EndTurn,
        ),
        (
            "content_deltas",
            "chatcmpl-text01",
            vec![text("Hello, wörld — café ☕ 🦀\n\"quoted\".")],
            StopReason::EndTurn,
        ),
        (
            "tool_call",
            "chatcmpl-tool01",
            vec![tool(
                "call_weather01",
                "get_weather",
                json!({"location": "Paris, FR"}),
            )],
            StopReason::ToolUse,
        ),
    ] {
        let d = openai(name);
        check(
            name,
            &d,
            Expect {
                id,
                model: GPT,
                content,
                stop_reason: reason,
                usage: Usage::default(),
            },
        );
    }
}

#[test]
fn openai_empty_and_null_finish_reason_are_absent() {
    // Ended by [DONE] (the fixture): complete, default stop reason.
    // Without [DONE], "" and null do not count as a finish: the stream is incomplete.
    let body = String::from_utf8(common::fixture("openai/finish_reason_empty_and_null.sse"))
        .unwrap()
        .replace("data: [DONE]\n\n", "");
    let d = decode_str(WireFormat::OpenAiChat, &body);
    assert!(is_incomplete(&d.result), "{:?}", d.result);
    assert!(!d
        .events
        .iter()
        .any(|e| matches!(e, LlmEvent::MessageStop { .. })));
}

#[test]
fn openai_usage_chunk_with_cached_tokens() {
    let d = openai("usage_cached");
    assert_eq!(
        d.events[d.events.len() - 3..],
        [
            // input = prompt (2006) - cached (1920); blocks close at [DONE], after the usage chunk
            LlmEvent::Usage(usage(86, 300, 1920, 0)),
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    );
    check(
        "usage_cached",
        &d,
        Expect {
            id: "chatcmpl-usage01",
            model: GPT,
            content: vec![text("Cached.")],
            stop_reason: StopReason::EndTurn,
            usage: usage(86, 300, 1920, 0),
        },
    );
    assert_eq!(
        response("usage_cached", &d).usage.total_input_tokens(),
        2006
    );
}

#[test]
fn openai_empty_and_null_usage_are_tolerated() {
    let d = openai("usage_empty_and_null");
    let usages: Vec<&LlmEvent> = d
        .events
        .iter()
        .filter(|e| matches!(e, LlmEvent::Usage(_)))
        .collect();
    assert_eq!(usages, [&LlmEvent::Usage(usage(9, 2, 0, 0))]);
    check(
        "usage_empty_and_null",
        &d,
        Expect {
            id: "chatcmpl-usage02",
            model: GPT,
            content: vec![text("AB")],
            stop_reason: StopReason::EndTurn,
            usage: usage(9, 2, 0, 0),
        },
    );
}

#[test]
fn openai_error_object_is_a_stream_error() {
    let d = openai("error_object");
    assert_eq!(
        d.events,
        vec![start("chatcmpl-err01", GPT), text_delta(0, "Hel")]
    );
    let err = d.result.unwrap_err();
    assert_eq!(
        err,
        LlmError::Stream {
            error_type: "server_error".into(),
            message: "The server had an error while processing your request.".into()
        }
    );
    assert!(err.is_retryable());
}

#[test]
fn openai_error_beside_choices_is_a_stream_error() {
    let d = openai("error_beside_choices");
    assert_eq!(
        d.events,
        vec![start("gen-err02", "openrouter/auto"), text_delta(0, "Hel")]
    );
    // OpenRouter puts the HTTP status in `code`: the error is classified as that status.
    let err = d.result.unwrap_err();
    let LlmError::Api(api) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(api.status, 502);
    assert_eq!(api.code.as_deref(), Some("502"));
    assert_eq!(api.message, "Upstream provider returned an error");
    assert!(err.is_retryable());
}

#[test]
fn openai_fragments_without_index_match_by_id_else_last_call() {
    let d = openai("lenient_no_index");
    assert_eq!(
        d.events,
        vec![
            start("cmpl-noidx01", "mistral-small"),
            call_start(0, "call_first", "read"),
            args(0, "{\"path\": "),
            call_start(1, "call_second", "read"),
            args(1, "{\"path\": "),
            args(0, "\"a.txt\"}"),
            args(1, "\"b.txt\"}"),
            stop(0),
            stop(1),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "lenient_no_index",
        &d,
        Expect {
            id: "cmpl-noidx01",
            model: "mistral-small",
            content: vec![
                tool("call_first", "read", json!({"path": "a.txt"})),
                tool("call_second", "read", json!({"path": "b.txt"})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_id_and_name_repeated_in_every_fragment() {
    let d = openai("lenient_repeated_id_name");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-repeat01", GPT),
            call_start(0, "call_rep", "search"),
            args(0, "{\"q\":"),
            args(0, " \"rust\""),
            args(0, "}"),
            stop(0),
            message_stop(StopReason::ToolUse),
        ]
    );
    check(
        "lenient_repeated_id_name",
        &d,
        Expect {
            id: "chatcmpl-repeat01",
            model: GPT,
            content: vec![tool("call_rep", "search", json!({"q": "rust"}))],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_all_arguments_in_one_fragment() {
    let d = openai("lenient_args_one_fragment");
    check(
        "lenient_args_one_fragment",
        &d,
        Expect {
            id: "chatcmpl-onefrag01",
            model: GPT,
            content: vec![tool("call_whole", "calc", json!({"expr": "6*7"}))],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_calls_without_id_get_unique_generated_ids() {
    let ids = |d: &Decoded| -> Vec<String> {
        let r = response("lenient_no_id", d);
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert!(r.invalid_tool_calls.is_empty());
        let calls: Vec<_> = r.message.tool_uses().collect();
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].1, calls[0].2), ("ping", &json!({"host": "a"})));
        assert_eq!((calls[1].1, calls[1].2), ("ping", &json!({"host": "b"})));
        calls.iter().map(|c| c.0.to_owned()).collect()
    };
    let first = ids(&openai("lenient_no_id"));
    let second = ids(&openai("lenient_no_id"));
    for id in first.iter().chain(&second) {
        assert!(id.starts_with("call_") && id.len() > 5, "{id}");
    }
    assert_ne!(first[0], first[1]);
    // Unique across responses too: history ids never collide.
    assert!(
        first.iter().all(|id| !second.contains(id)),
        "{first:?} {second:?}"
    );
}

#[test]
fn openai_stream_ending_after_finish_reason_without_done_is_complete() {
    let d = openai("lenient_no_done");
    check(
        "lenient_no_done",
        &d,
        Expect {
            id: "chatcmpl-nodone01",
            model: "local-model",
            content: vec![text("No DONE marker")],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    );
    // The message ends at finish(), not before.
    let body = common::fixture("openai/lenient_no_done.sse");
    let mut decoder = WireDecoder::new(WireFormat::OpenAiChat);
    let mut events = Vec::new();
    decoder.push(&body, &mut events).unwrap();
    assert!(!decoder.is_done());
    decoder.finish(&mut events).unwrap();
    assert!(decoder.is_done());
}

#[test]
fn openai_only_choice_zero_is_kept() {
    let d = openai("n2_choices");
    assert_eq!(
        d.events,
        vec![
            start("chatcmpl-n2", GPT),
            text_delta(0, "Zero"),
            text_delta(0, " first"),
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    );
    check(
        "n2_choices",
        &d,
        Expect {
            id: "chatcmpl-n2",
            model: GPT,
            content: vec![text("Zero first")],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    );
}

#[test]
fn openai_keep_alive_comments_are_ignored() {
    let d = openai("keep_alive");
    assert_eq!(
        d.events,
        vec![
            start("gen-keepalive01", "openrouter/auto"),
            text_delta(0, "Still"),
            text_delta(0, " alive"),
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    );
}

#[test]
fn every_fixture_is_covered_by_a_test() {
    // A new fixture file must get its own expectations above and a line in the README.
    let readme = String::from_utf8(common::fixture("README.md")).unwrap();
    for dir in ["anthropic", "openai"] {
        for (name, _) in common::fixtures(dir) {
            assert!(
                readme.contains(&format!("`{name}`")),
                "{dir}/{name} is not listed in tests/fixtures/README.md"
            );
        }
    }
    assert_eq!(common::fixtures("anthropic").len(), 18);
    assert_eq!(common::fixtures("openai").len(), 23);
}

// ---------------------------------------------------------------------------------------------
// truncation

/// Offsets just after each line terminator, and the body's end.
fn line_ends(body: &[u8]) -> Vec<usize> {
    let mut ends: Vec<usize> = body
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    ends.push(body.len());
    ends.dedup();
    ends
}

/// A prefix of a complete body either fails as Incomplete or, when it still holds the whole
/// message, gives the same content and stop reason.
fn check_prefix(format: WireFormat, name: &str, body: &[u8], cut: usize, full: &ModelResponse) {
    let d = common::decode(format, &body[..cut]);
    match &d.result {
        Ok(r) => {
            assert_eq!(r.message, full.message, "{name} cut at {cut}");
            assert_eq!(r.stop_reason, full.stop_reason, "{name} cut at {cut}");
        }
        Err(LlmError::Incomplete { .. }) => {}
        Err(e) => panic!("{name} cut at {cut}: expected Incomplete or success, got {e:?}"),
    }
}

fn successful_fixtures() -> Vec<(WireFormat, String, Vec<u8>, ModelResponse)> {
    let mut out = Vec::new();
    for (dir, format) in [
        ("anthropic", WireFormat::Anthropic),
        ("openai", WireFormat::OpenAiChat),
    ] {
        for (name, body) in common::fixtures(dir) {
            if name == "lenient_no_id.sse" {
                continue; // generated ids differ from run to run
            }
            if let Ok(r) = common::decode(format, &body).result {
                out.push((format, format!("{dir}/{name}"), body, r));
            }
        }
    }
    assert!(out.len() > 30);
    out
}

#[test]
fn truncation_at_every_line_end_is_incomplete_or_the_whole_message() {
    for (format, name, body, full) in successful_fixtures() {
        let mut successes = 0;
        for cut in line_ends(&body) {
            check_prefix(format, &name, &body, cut, &full);
            if common::decode(format, &body[..cut]).result.is_ok() {
                successes += 1;
            }
        }
        assert!(successes >= 1, "{name}: the full body must succeed");
        // The first half of the body is incomplete.
        let half = line_ends(&body)
            .into_iter()
            .filter(|&c| c <= body.len() / 2)
            .max()
            .unwrap_or(0);
        let d = common::decode(format, &body[..half]);
        assert!(is_incomplete(&d.result), "{name}: {:?}", d.result);
    }
}

#[test]

fn truncation_at_every_byte_is_incomplete_or_the_whole_message() {
    for (format, name, body, full) in successful_fixtures() {
        for cut in 0..=body.len() {
            check_prefix(format, &name, &body, cut, &full);
        }
    }
}

#[test]
fn no_prefix_is_ever_a_shorter_answer() {
    // Invariant 3: a cut anywhere either fails or still holds the whole message.
    for (format, name, body, full) in successful_fixtures() {
        for cut in 0..body.len() {
            if let Ok(r) = common::decode(format, &body[..cut]).result {
                assert_eq!(r.message, full.message, "{name} cut at {cut}");
                assert_eq!(r.stop_reason, full.stop_reason, "{name} cut at {cut}");
                assert_eq!(
                    r.invalid_tool_calls, full.invalid_tool_calls,
                    "{name} cut at {cut}"
                );
            }
        }
    }
}

#[test]
fn truncation_inside_a_json_line_is_an_error_never_a_shorter_answer() {
    // Whatever the error kind, a cut inside the last events never yields a response.
    for (format, name, body, _) in successful_fixtures() {
        let marker: &[u8] = match format {
            WireFormat::Anthropic => b"{\"type\":\"message_stop\"",
            _ => b"\"finish_reason\":\"",
        };
        let Some(at) = body.windows(marker.len()).position(|w| w == marker) else {
            continue;
        };
        for cut in [at + 1, at + marker.len() / 2, at + marker.len() - 1] {
            let d = common::decode(format, &body[..cut]);
            assert!(d.result.is_err(), "{name} cut at {cut}: {:?}", d.result);
        }
    }
}

#[test]
fn anthropic_truncation_points() {
    let body = String::from_utf8(common::fixture("anthropic/tool_use.sse")).unwrap();
    let cut_before = |needle: &str| {
        let at = body.find(needle).unwrap();
        decode_str(WireFormat::Anthropic, &body[..at])
    };
    // after message_start only
    let d = cut_before("event: content_block_start");
    assert_eq!(
        d.result,
        Err(LlmError::Incomplete {
            detail: "no message_stop event".into()
        })
    );
    // in the middle of the tool arguments
    assert!(is_incomplete(&cut_before("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"FR").result));
    // after the message_delta, before message_stop
    let d = cut_before("event: message_stop");
    assert!(is_incomplete(&d.result), "{:?}", d.result);
    assert!(d.events.contains(&LlmEvent::Usage(usage(472, 89, 0, 0))));
    // message_stop's data line complete but no blank line: the message is complete.
    let end = body.find("{\"type\":\"message_stop\"}").unwrap() + 23;
    let d = decode_str(WireFormat::Anthropic, &body[..end]);
    assert_eq!(d, anthropic("tool_use"));
    // nothing at all
    assert!(matches!(
        decode_str(WireFormat::Anthropic, "").result,
        Err(LlmError::Incomplete { detail }) if detail.contains("no message_start")
    ));
}

#[test]
fn openai_truncation_points() {
    let body = String::from_utf8(common::fixture("openai/tool_call.sse")).unwrap();
    let finish = body.find("data: {\"id\":\"chatcmpl-tool01\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_fixture\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]}").unwrap();
    // before the finish_reason chunk: incomplete, the half call is never returned
    let d = decode_str(WireFormat::OpenAiChat, &body[..finish]);
    assert_eq!(
        d.result,
        Err(LlmError::Incomplete {
            detail: "no finish_reason and no [DONE]".into()
        })
    );
    assert!(!d
        .events
        .iter()
        .any(|e| matches!(e, LlmEvent::BlockStop { .. })));
    // after the finish_reason chunk, before [DONE]: complete (lenient servers end there)
    let done = body.find("data: [DONE]").unwrap();
    assert_eq!(
        decode_str(WireFormat::OpenAiChat, &body[..done]),
        openai("tool_call")
    );
    // nothing at all
    assert!(matches!(
        decode_str(WireFormat::OpenAiChat, "").result,
        Err(LlmError::Incomplete { detail }) if detail.contains("no chunk at all")
    ));
}

// ---------------------------------------------------------------------------------------------
// garbage, invalid JSON, error events

#[test]
fn garbage_bodies_are_clear_errors() {
    let bodies: [&[u8]; 5] = [
        b"\x00\xff\xfe\x80\x81garbage\x00\x01\x02",
        b"<html><body><h1>502 Bad Gateway</h1></body></html>\n",
        b"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
        b"\r\n\r\n\n\n\r\r",
        b": only comments\n: and more\n\n",
    ];
    for body in bodies {
        for format in [WireFormat::Anthropic, WireFormat::OpenAiChat] {
            let d = common::decode(format, body);
            assert!(
                is_incomplete(&d.result),
                "{format:?} {body:?}: {:?}",
                d.result
            );
            assert!(d.events.is_empty());
        }
    }
    // Garbage inside data fields is malformed.
    for format in [WireFormat::Anthropic, WireFormat::OpenAiChat] {
        let d = common::decode(format, b"data: \xff\xfe not json\n\n");
        let message = malformed_message(&d.result);
        assert!(message.contains("invalid JSON"), "{message}");
    }
}

#[test]
fn invalid_json_names_the_event() {
    let body =
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\n\n";
    let d = decode_str(WireFormat::Anthropic, body);
    let message = malformed_message(&d.result);
    assert!(message.contains("`content_block_delta`"), "{message}");

    let body = anthropic_body(
        &format!(
            "{}event: content_block_delta\ndata: not json at all\n\n",
            block_start(0, "{\"type\":\"text\",\"text\":\"\"}")
        ),
        "end_turn",
    );
    let d = decode_str(WireFormat::Anthropic, &body);
    assert!(malformed_message(&d.result).contains("`content_block_delta`"));
    // The events before it were delivered.
    assert_eq!(d.events.len(), 3, "{:?}", d.events);

    let d = decode_str(
        WireFormat::OpenAiChat,
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\": [\n\n",
    );
    let message = malformed_message(&d.result);
    assert!(message.contains("OpenAI stream chunk"), "{message}");
    assert_eq!(d.events.len(), 2);

    // Wrong JSON types are malformed too, not panics.
    for bad in [
        "{\"type\":\"content_block_delta\",\"index\":\"zero\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}",
        "{\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{\"type\":\"text\"}}",
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":\"text\"}",
        "{\"type\":\"content_block_start\",\"index\":0}",
        "{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}",
        "[1, 2, 3]",
    ] {
        let d = decode_str(WireFormat::Anthropic, &format!("data: {bad}\n\n"));
        assert!(
            matches!(d.result, Err(LlmError::Malformed { .. })),
            "{bad}: {:?}",
            d.result
        );
    }
    for bad in [
        "{\"choices\":{\"index\":0}}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}",
        "\"just a string\"",
    ] {
        let d = decode_str(WireFormat::OpenAiChat, &format!("data: {bad}\n\n"));
        assert!(
            matches!(d.result, Err(LlmError::Malformed { .. })),
            "{bad}: {:?}",
            d.result
        );
    }
}

#[test]
fn error_events_in_every_position() {
    // Before anything else.
    let d = decode_str(
        WireFormat::Anthropic,
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n",
    );
    assert_eq!(
        d.result,
        Err(LlmError::Stream {
            error_type: "api_error".into(),
            message: "Internal server error".into()
        })
    );
    // Without details: the type defaults and the message is the payload.
    let d = decode_str(
        WireFormat::Anthropic,
        "event: error\ndata: {\"type\":\"error\"}\n\n",
    );
    assert_eq!(
        d.result,
        Err(LlmError::Stream {
            error_type: "error".into(),
            message: "{\"type\":\"error\"}".into()
        })
    );
    // An error after message_stop is ignored: the message was complete.
    let body = format!(
        "{}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"late\"}}}}\n\n",
        anthropic_body("", "end_turn")
    );
    assert!(decode_str(WireFormat::Anthropic, &body).result.is_ok());
    // OpenAI: an error with only a message, and one that is a bare string.
    let d = decode_str(
        WireFormat::OpenAiChat,
        "data: {\"error\":{\"message\":\"rate limited\"}}\n\n",
    );
    assert_eq!(
        d.result,
        Err(LlmError::Stream {
            error_type: "error".into(),
            message: "rate limited".into()
        })
    );
    let d = decode_str(WireFormat::OpenAiChat, "data: {\"error\":\"boom\"}\n\n");
    assert_eq!(
        d.result,
        Err(LlmError::Stream {
            error_type: "error".into(),
            message: "boom".into()
        })
    );
    // `error: null` beside choices is no error.
    let d = decode_str(
        WireFormat::OpenAiChat,
        &format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"error": null, "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]})
        ),
    );
    assert_eq!(response("error null", &d).text(), "x");
}

#[test]
fn a_spent_decoder_repeats_its_error() {
    let mut decoder = WireDecoder::new(WireFormat::Anthropic);
    let mut events = Vec::new();
    let body = common::fixture("anthropic/error_overloaded.sse");
    let err = decoder.push(&body, &mut events).unwrap_err();
    let n = events.len();
    assert_eq!(
        decoder.push(
            b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            &mut events
        ),
        Err(err.clone())
    );
    assert_eq!(decoder.finish(&mut events), Err(err));
    assert_eq!(events.len(), n);
}

// ---------------------------------------------------------------------------------------------
// limits

fn limits(line: usize, event: usize, tool_args: usize, response: usize) -> StreamLimits {
    let mut l = StreamLimits::default();
    l.max_line_bytes = line;
    l.max_event_bytes = event;
    l.max_tool_args_bytes = tool_args;
    l.max_response_bytes = response;
    l
}

fn decode_with(format: WireFormat, limits: StreamLimits, body: &[u8], chunk: usize) -> Decoded {
    let mut decoder = WireDecoder::with_limits(format, limits);
    let mut events = Vec::new();
    let mut error = None;
    for piece in body.chunks(chunk.max(1)) {
        if let Err(e) = decoder.push(piece, &mut events) {
            error = Some(e);
            break;
        }
    }
    if error.is_none() {
        error = decoder.finish(&mut events).err();
    }
    let result = match error {
        Some(e) => Err(e),
        None => {
            let mut assembler = StreamAssembler::with_limits(limits);
            events
                .iter()
                .try_for_each(|e| assembler.push(e))
                .and_then(|()| assembler.finish())
        }
    };
    Decoded { events, result }
}

#[test]
fn oversize_line_is_refused_with_the_limit_named() {
    let big = usize::MAX / 4;
    for (format, name) in [
        (WireFormat::Anthropic, "anthropic/text.sse"),
        (WireFormat::OpenAiChat, "openai/content_deltas.sse"),
    ] {
        let body = common::fixture(name);
        for chunk in [1, 7, body.len()] {
            let d = decode_with(format, limits(64, big, big, big), &body, chunk);
            let err = d.result.unwrap_err();
            assert_eq!(
                err,
                LlmError::LimitExceeded {
                    what: "an SSE line".into(),
                    limit: 64,
                    setting: "StreamLimits::max_line_bytes".into()
                },
                "{name} chunk {chunk}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains("64 bytes") && msg.contains("max_line_bytes"),
                "{msg}"
            );
            assert!(!err.is_retryable());
        }
        // The same body passes with a limit at its longest line.
        let longest = body.split(|&b| b == b'\n').map(<[u8]>::len).max().unwrap();
        let d = decode_with(format, limits(longest, big, big, big), &body, 5);
        assert_eq!(d, common::decode(format, &body), "{name}");
        let d = decode_with(format, limits(longest - 1, big, big, big), &body, 5);
        assert!(
            matches!(d.result, Err(LlmError::LimitExceeded { limit, .. }) if limit == longest - 1)
        );
    }
    // A line with no terminator at all is refused before it ends.
    let mut decoder = WireDecoder::with_limits(WireFormat::OpenAiChat, limits(100, big, big, big));
    let mut events = Vec::new();
    let mut refused = false;
    for _ in 0..1000 {
        if decoder.push(b"data: xxxxxxxxxx", &mut events).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused);
}

#[test]
fn oversize_event_is_refused_with_the_limit_named() {
    let big = usize::MAX / 4;
    // Many short data lines make one big event.
    let mut body = String::new();
    for _ in 0..50 {
        body.push_str("data: 0123456789\n");
    }
    body.push('\n');
    for format in [WireFormat::Anthropic, WireFormat::OpenAiChat] {
        let d = decode_with(format, limits(64, 200, big, big), body.as_bytes(), 3);
        assert_eq!(
            d.result,
            Err(LlmError::LimitExceeded {
                what: "an SSE event".into(),
                limit: 200,
                setting: "StreamLimits::max_event_bytes".into()
            })
        );
    }
}

#[test]
fn oversize_tool_arguments_are_refused_with_the_limit_named() {
    let big = usize::MAX / 4;
    // get_weather's arguments are 44 bytes.
    let a = common::fixture("anthropic/tool_use.sse");
    let o = common::fixture("openai/tool_call.sse");
    for (format, body, size) in [
        (WireFormat::Anthropic, &a, 44),
        (WireFormat::OpenAiChat, &o, 25),
    ] {
        let d = decode_with(format, limits(big, big, size - 1, big), body, 16);
        let err = d.result.unwrap_err();
        assert_eq!(
            err,
            LlmError::LimitExceeded {
                what: "the arguments of one tool call".into(),
                limit: size - 1,
                setting: "StreamLimits::max_tool_args_bytes".into()
            }
        );
        assert!(err.to_string().contains("max_tool_args_bytes"));
        // Exactly at the limit is fine.
        let d = decode_with(format, limits(big, big, size, big), body, 16);
        assert!(d.result.is_ok(), "{:?}", d.result);
    }
}

#[test]
fn oversize_response_is_refused_with_the_limit_named() {
    let big = usize::MAX / 4;
    let body = common::fixture("anthropic/text.sse");
    // "Hello, wörld — café ☕ 🦀\n\"quoted\"." is 41 bytes
    let text_len = "Hello, wörld — café ☕ 🦀\n\"quoted\".".len();
    let d = decode_with(
        WireFormat::Anthropic,
        limits(big, big, big, text_len - 1),
        &body,
        9,
    );
    assert_eq!(
        d.result,
        Err(LlmError::LimitExceeded {
            what: "the response".into(),
            limit: text_len - 1,
            setting: "StreamLimits::max_response_bytes".into()
        })
    );
    // The text plus a block's bookkeeping fits.
    let d = decode_with(
        WireFormat::Anthropic,
        limits(big, big, big, text_len + 1024),
        &body,
        9,
    );
    assert!(d.result.is_ok(), "{:?}", d.result);
}

// ---------------------------------------------------------------------------------------------
// illegal block transitions

#[test]
fn unterminated_tool_call_is_incomplete_and_never_executed() {
    // The tool block never stops, and the message ends with stop_reason tool_use.
    let body = anthropic_body(
        &format!(
            "{}{}",
            block_start(
                0,
                "{\"type\":\"tool_use\",\"id\":\"toolu_u\",\"name\":\"rm\",\"input\":{}}"
            ),
            block_delta(
                0,
                "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"/\\\"}\"}"
            ),
        ),
        "tool_use",
    );
    let d = decode_str(WireFormat::Anthropic, &body);
    let r = response("unterminated", &d);
    assert_eq!(r.message.content, vec![tool("toolu_u", "rm", json!({}))]);
    assert_eq!(r.invalid_tool_calls.len(), 1);
    assert_eq!(r.invalid_tool_calls[0].raw_arguments, "{\"path\": \"/\"}");
    assert_eq!(
        r.invalid_tool_calls[0].reason,
        InvalidToolCallReason::Incomplete
    );

    // An assembler that saw the call start but never the message end is Incomplete.
    let mut assembler = StreamAssembler::new();
    assembler.push(&call_start(0, "a", "f")).unwrap();
    assembler.push(&args(0, "{\"x\":")).unwrap();
    assert!(assembler.completed_tool_call(0).is_none());
    assert!(!assembler.is_complete());
    assert!(matches!(
        assembler.finish(),
        Err(LlmError::Incomplete { .. })
    ));
}

#[test]
fn tool_arguments_that_are_not_an_object_are_listed_as_malformed() {
    for (raw, what) in [
        ("[1, 2]", "an array"),
        ("\"str\"", "a string"),
        ("{\"a\": 1,}", ""),
        ("{\"a\": 1}}", ""),
    ] {
        let mut assembler = StreamAssembler::new();
        for e in [
            call_start(0, "c", "f"),
            args(0, raw),
            stop(0),
            message_stop(StopReason::ToolUse),
        ] {
            assembler.push(&e).unwrap();
        }
        let r = assembler.finish().unwrap();
        assert_eq!(r.invalid_tool_calls.len(), 1, "{raw}");
        assert_eq!(r.invalid_tool_calls[0].raw_arguments, raw);
        match &r.invalid_tool_calls[0].reason {
            InvalidToolCallReason::Malformed(m) => assert!(m.contains(what), "{raw}: {m}"),
            other => panic!("{raw}: {other:?}"),
        }
        assert_eq!(r.message.content, vec![tool("c", "f", json!({}))]);
    }
    // Empty arguments are an empty object.
    let body = anthropic_body(
        &format!(
            "{}{}{}",
            block_start(
                0,
                "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"now\",\"input\":{}}"
            ),
            block_delta(0, "{\"type\":\"input_json_delta\",\"partial_json\":\"\"}"),
            block_stop(0)
        ),
        "tool_use",
    );
    let d = decode_str(WireFormat::Anthropic, &body);
    assert_eq!(
        response("empty args", &d).message.content,
        vec![tool("t", "now", json!({}))]
    );
}

#[test]
fn delta_for_a_block_that_never_started_is_malformed() {
    let body = anthropic_body(
        &block_delta(3, "{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}"),
        "end_turn",
    );
    let d = decode_str(WireFormat::Anthropic, &body);
    let message = malformed_message(&d.result);
    assert!(
        message.contains("block 3") && message.contains("never started"),
        "{message}"
    );

    let body = anthropic_body(&block_stop(2), "end_turn");
    let message = malformed_message(&decode_str(WireFormat::Anthropic, &body).result);
    assert!(message.contains("block 2"), "{message}");

    // OpenAI: a fragment that names no function for a call that never started.
    let body = oa_chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        Value::Null,
    );
    let message = malformed_message(&decode_str(WireFormat::OpenAiChat, &body).result);
    assert!(message.contains("never started"), "{message}");
}

#[test]
fn delta_after_its_block_stopped_is_malformed() {
    let body = anthropic_body(
        &format!(
            "{}{}{}{}",
            block_start(0, "{\"type\":\"text\",\"text\":\"\"}"),
            block_delta(0, "{\"type\":\"text_delta\",\"text\":\"a\"}"),
            block_stop(0),
            block_delta(0, "{\"type\":\"text_delta\",\"text\":\"b\"}"),
        ),
        "end_turn",
    );
    let message = malformed_message(&decode_str(WireFormat::Anthropic, &body).result);
    assert!(
        message.contains("block 0") && message.contains("after it stopped"),
        "{message}"
    );

    let body = anthropic_body(
        &format!(
            "{}{}{}",
            block_start(
                0,
                "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}"
            ),
            block_stop(0),
            block_delta(0, "{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}"),
        ),
        "tool_use",
    );
    let message = malformed_message(&decode_str(WireFormat::Anthropic, &body).result);
    assert!(message.contains("after it stopped"), "{message}");

    // Stopped twice, started twice, and a delta of the wrong kind.
    let twice = anthropic_body(
        &format!(
            "{}{}{}",
            block_start(0, "{\"type\":\"text\",\"text\":\"x\"}"),
            block_stop(0),
            block_stop(0)
        ),
        "end_turn",
    );
    assert!(
        malformed_message(&decode_str(WireFormat::Anthropic, &twice).result)
            .contains("after it stopped")
    );
    let restarted = anthropic_body(
        &format!(
            "{}{}{}",
            block_start(
                0,
                "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}"
            ),
            block_stop(0),
            block_start(
                0,
                "{\"type\":\"tool_use\",\"id\":\"u\",\"name\":\"f\",\"input\":{}}"
            ),
        ),
        "tool_use",
    );
    assert!(
        malformed_message(&decode_str(WireFormat::Anthropic, &restarted).result)
            .contains("started twice")
    );
    let wrong_kind = anthropic_body(
        &format!(
            "{}{}",
            block_start(0, "{\"type\":\"text\",\"text\":\"\"}"),
            block_delta(0, "{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}"),
        ),
        "end_turn",
    );
    assert!(
        malformed_message(&decode_str(WireFormat::Anthropic, &wrong_kind).result)
            .contains("another kind")
    );
}

#[test]
fn done_before_any_chunk_never_panics() {
    for body in [
        "data: [DONE]\n\n",
        "data: [DONE]",
        ": hi\n\ndata:  [DONE] \n\n",
    ] {
        let d = decode_str(WireFormat::OpenAiChat, body);
        // Whatever it is, it is not a message with content.
        if let Ok(r) = &d.result {
            assert!(r.message.content.is_empty());
        }
    }
}

#[test]
fn done_before_any_chunk_is_an_error() {
    let d = decode_str(WireFormat::OpenAiChat, "data: [DONE]\n\n");
    assert!(is_incomplete(&d.result), "{:?}", d.result);
}

#[test]

fn anthropic_message_stop_without_message_start_is_an_error() {
    let d = decode_str(
        WireFormat::Anthropic,
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    assert!(d.result.is_err(), "{:?}", d.result);
}

#[test]
fn a_decoder_that_failed_at_finish_keeps_failing() {
    let mut decoder = WireDecoder::new(WireFormat::OpenAiChat);
    let mut out = Vec::new();
    decoder
        .push(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            &mut out,
        )
        .unwrap();
    let err = decoder.finish(&mut out).unwrap_err();
    assert!(matches!(err, LlmError::Incomplete { .. }), "{err}");
    assert_eq!(
        decoder.push(b"data: [DONE]\n\n", &mut out),
        Err(err.clone())
    );
    assert_eq!(decoder.finish(&mut out), Err(err));
}

#[test]
fn blocks_are_found_by_index_whatever_their_order_and_numbering() {
    // Indices out of order, sparse, huge, and one (1) equal to another block's position.
    let mut assembler = StreamAssembler::new();
    for e in [
        call_start(3, "c3", "f"),
        text_delta(1, "a"),
        call_start(usize::MAX, "cmax", "g"),
        call_start(0, "c0", "h"),
        args(0, "{\"i\":0}"),
        args(3, "{\"i\":"),
        text_delta(1, "b"),
        args(usize::MAX, "{\"i\":9}"),
        args(3, "3}"),
        stop(0),
        stop(1),
        stop(3),
        stop(usize::MAX),
        message_stop(StopReason::ToolUse),
    ] {
        assembler.push(&e).unwrap();
    }
    assert_eq!(
        assembler
            .completed_tool_call(3)
            .map(|(id, _, input)| (id, input.clone())),
        Some(("c3", json!({"i": 3})))
    );
    assert_eq!(
        assembler.completed_tool_call(usize::MAX).map(|(id, ..)| id),
        Some("cmax")
    );
    // A delta for a stopped block, and a second start of one, are still refused.
    assert!(assembler.push(&args(3, "x")).is_err());
    let mut again = StreamAssembler::new();
    again.push(&call_start(2, "a", "f")).unwrap();
    again.push(&text_delta(0, "x")).unwrap();
    assert!(again.push(&call_start(2, "b", "f")).is_err());
    assert!(again.push(&call_start(0, "b", "f")).is_err());
    assert!(again.push(&args(1, "{}")).is_err(), "block 1 never started");

    let r = assembler.finish().unwrap();
    assert_eq!(
        r.message.content,
        vec![
            tool("c3", "f", json!({"i": 3})),
            ContentBlock::Text { text: "ab".into() },
            tool("cmax", "g", json!({"i": 9})),
            tool("c0", "h", json!({"i": 0})),
        ]
    );
}

// ----- OpenAI edge cases found by mutation testing ------------------------------------------

/// Decodes Chat Completions chunks given as JSON values, then `[DONE]`.
fn openai_chunks(chunks: &[serde_json::Value]) -> common::Decoded {
    let mut body = String::new();
    for chunk in chunks {
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    common::decode(WireFormat::OpenAiChat, body.as_bytes())
}

#[test]
fn openai_finish_reason_stop_with_calls_is_tool_use_and_without_is_end_turn() {
    let call = serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
        "tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}]}}]});
    let stop = serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let text = serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]});
    let with_call = openai_chunks(&[call, stop.clone()]);
    assert_eq!(with_call.result.unwrap().stop_reason, StopReason::ToolUse);
    let plain = openai_chunks(&[text, stop]);
    assert_eq!(plain.result.unwrap().stop_reason, StopReason::EndTurn);
}

#[test]
fn openai_only_the_choice_with_index_0_counts_wherever_it_is() {
    let d = openai_chunks(&[serde_json::json!({"id": "c", "model": "m", "choices": [
        {"index": 1, "delta": {"content": "second"}},
        {"index": 0, "delta": {"content": "first"}, "finish_reason": "stop"}
    ]})]);
    assert_eq!(d.result.unwrap().text(), "first");
}

#[test]
fn openai_usage_with_one_figure_is_kept() {
    let d = openai_chunks(&[
        serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}),
        serde_json::json!({"id": "c", "model": "m", "choices": [], "usage": {"prompt_tokens": 12}}),
    ]);
    assert_eq!(d.result.unwrap().usage.input_tokens, 12);
}

#[test]
fn openai_calls_without_ids_get_distinct_generated_ids() {
    let d = openai_chunks(&[
        serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
        "tool_calls": [
            {"index": 0, "function": {"name": "f", "arguments": "{}"}},
            {"index": 1, "function": {"name": "g", "arguments": "{}"}}
        ]}, "finish_reason": "tool_calls"}]}),
    ]);
    let response = d.result.unwrap();
    let ids: Vec<&str> = response.message.tool_uses().map(|(id, _, _)| id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|id| !id.is_empty()), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn openai_thinking_blocks_text_is_taken_when_reasoning_content_is_absent() {
    // Some proxies send the thinking only inside `thinking_blocks`.
    let d = openai_chunks(&[
        serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
            "thinking_blocks": [{"type": "thinking", "thinking": "only here", "signature": "s1"}]}}]}),
        serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
            "content": "answer"}, "finish_reason": "stop"}]}),
    ]);
    let kinds: Vec<(&str, &str)> = d
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ThinkingDelta { thinking, .. } => Some(("thinking", thinking.as_str())),
            LlmEvent::SignatureDelta { signature, .. } => Some(("signature", signature.as_str())),
            LlmEvent::TextDelta { text, .. } => Some(("text", text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("thinking", "only here"),
            ("signature", "s1"),
            ("text", "answer")
        ]
    );
}

#[test]
fn openai_in_stream_error_with_empty_fields_falls_back_to_the_error_itself() {
    // Empty strings are not a message, a type or a code: the message is the error object and
    // the type the generic one.
    let error = serde_json::json!({"message": "", "type": "", "code": ""});
    let d = openai_chunks(&[serde_json::json!({ "error": error })]);
    match d.result {
        Err(LlmError::Stream {
            error_type,
            message,
        }) => {
            assert_eq!(error_type, "error");
            assert_eq!(message, error.to_string());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn openai_choices_that_are_not_an_array_are_refused_by_name() {
    let d = openai_chunks(&[serde_json::json!({"id": "c", "choices": {"index": 0}})]);
    let error = d.result.unwrap_err();
    assert!(matches!(error, LlmError::Malformed { .. }), "{error:?}");
    assert!(
        error.to_string().contains("expected an array of choices"),
        "{error}"
    );
}

#[test]
fn openai_thinking_blocks_text_is_taken_once_and_empty_parts_are_dropped() {
    // `reasoning_content` and `thinking_blocks` carry the same text: it is taken once.
    let d = openai_chunks(&[
        serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
            "reasoning_content": "think",
            "thinking_blocks": [{"type": "thinking", "thinking": "think", "signature": ""}]}}]}),
        serde_json::json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {
            "thinking_blocks": [{"type": "thinking", "thinking": "", "signature": "sig"},
                                {"type": "redacted_thinking", "data": ""}]},
            "finish_reason": "stop"}]}),
    ]);
    let thinking: String = d
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ThinkingDelta { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "think");
    assert!(!d
        .events
        .iter()
        .any(|e| matches!(e, LlmEvent::RedactedThinking { .. })));
    let signatures: Vec<&str> = d
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::SignatureDelta { signature, .. } => Some(signature.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(signatures, ["sig"]);
}
