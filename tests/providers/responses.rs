//! The OpenAI Responses wire format: decoding of the documented stream events (fixtures in
//! tests/fixtures/responses/, written from OpenAI's streaming event reference), the mapping to
//! the crate's response, errors and truncation.

use crate::common;

use agent_loop::wire::{InvalidToolCallReason, StreamAssembler, WireDecoder, WireFormat};
use agent_loop::{ContentBlock, LlmError, LlmEvent, StopReason, Usage};
use serde_json::{json, Value};

const F: WireFormat = WireFormat::OpenAiResponses;

fn fixture(name: &str) -> Vec<u8> {
    common::fixture(&format!("responses/{name}"))
}

/// Decodes a fixture whole and in every chunking from 1 byte up; all must agree.
fn decode(name: &str) -> common::Decoded {
    let body = fixture(name);
    let whole = common::decode(F, &body);
    for size in [1, 2, 3, 5, 7, 16, 64, 4096] {
        assert_eq!(
            common::decode_chunked(F, &body, size),
            whole,
            "{name} at chunk size {size}"
        );
    }
    whole
}

fn tool_use(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

/// The blocks the official SDK's final response holds, mapped to the crate's blocks (a refusal
/// is a text block, a function call a tool use keyed by its `call_id`, items the crate does not
/// model are left out). The Python SDK's `ResponseStream.get_final_response()` returns the
/// response of the `response.completed` event (openai-python
/// `src/openai/lib/streaming/responses/_responses.py`: `accumulate_event` keeps
/// `event.response` as `_completed_response`); for `response.incomplete`, where the SDK raises,
/// the same field of that event is used.
fn sdk_final(body: &[u8]) -> (Vec<ContentBlock>, Value) {
    let text = String::from_utf8_lossy(body);
    let last = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .rfind(|v| {
            matches!(
                v["type"].as_str(),
                Some("response.completed" | "response.incomplete")
            )
        })
        .expect("a final event");
    let response = &last["response"];
    let mut blocks = Vec::new();
    for item in response["output"].as_array().unwrap() {
        match item["type"].as_str().unwrap() {
            "message" => {
                for part in item["content"].as_array().unwrap() {
                    let text = part["text"].as_str().or(part["refusal"].as_str()).unwrap();
                    // The SDK keeps an empty part as `""`; the crate leaves empty text blocks
                    // out of the message (Anthropic refuses them when the history goes back),
                    // so the message's text is the same.
                    if !text.is_empty() {
                        blocks.push(ContentBlock::text(text));
                    }
                }
            }
            "function_call" => blocks.push(tool_use(
                item["call_id"].as_str().unwrap(),
                item["name"].as_str().unwrap(),
                serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap(),
            )),
            "reasoning" => blocks.push(ContentBlock::Reasoning {
                id: item["id"].as_str().unwrap().into(),
                summary: item["summary"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["text"].as_str().unwrap().to_owned())
                    .collect(),
                encrypted_content: item["encrypted_content"].as_str().map(str::to_owned),
            }),
            _ => {}
        }
    }
    (blocks, response["usage"].clone())
}

#[test]
fn every_fixture_assembles_what_the_sdk_accumulates() {
    let all = common::fixtures("responses");
    assert!(all.len() >= 10, "{} fixtures", all.len());
    let mut compared = 0;
    for (name, body) in &all {
        let decoded = decode(name);
        let Ok(response) = decoded.result else {
            continue;
        };
        let (mut expected, usage) = sdk_final(body);
        if name == "incomplete_max_output_tokens.sse" {
            // The SDK's final output leaves out the call cut off by max_output_tokens; the
            // crate keeps it, with `{}` as input, listed as incomplete and never executed.
            expected.push(tool_use("call_len", "write_file", json!({})));
        }
        assert_eq!(response.message.content, expected, "{name}");
        assert_eq!(
            response.usage.total_input_tokens(),
            usage["input_tokens"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            response.usage.output_tokens,
            usage["output_tokens"].as_u64().unwrap()
        );
        assert_eq!(
            response.usage.cache_read_input_tokens,
            usage["input_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
        );
        assert_eq!(
            response.usage.reasoning_tokens,
            usage["output_tokens_details"]["reasoning_tokens"]
                .as_u64()
                .unwrap()
        );
        compared += 1;
    }
    assert_eq!(compared, 9, "fixtures that end in a final response");
}

#[test]
fn text_keeps_multibyte_text_usage_and_ids_and_ignores_annotations_and_comments() {
    let response = decode("text.sse").result.unwrap();
    assert_eq!(response.text(), "Hello, wörld — ok 🎉");
    assert_eq!(response.message.content.len(), 1);
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.id, "resp_text");
    assert_eq!(response.model, "gpt-5-2025-08-07");
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 176,
            cache_read_input_tokens: 1024,
            output_tokens: 12,
            ..Usage::default()
        }
    );
}

#[test]
fn events_without_event_lines_decode_the_same() {
    assert_eq!(
        decode("text_no_event_lines.sse").events,
        decode("text.sse").events
    );
}

#[test]
fn reasoning_is_kept_whole_and_streamed_as_thinking() {
    let decoded = decode("reasoning_tool_call.sse");
    let thinking: String = decoded
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ThinkingDelta { index: 0, thinking } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    // The two summary parts stream as one thinking text, a blank line between them.
    assert_eq!(
        thinking,
        "**Planning the lookup**\n\nI need the weather.\n\n**Calling the tool**"
    );
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::Reasoning {
                id: "rs_0a1b".into(),
                summary: vec![
                    "**Planning the lookup**\n\nI need the weather.".into(),
                    "**Calling the tool**".into()
                ],
                // The finished item's, not the partial one `output_item.added` carried.
                encrypted_content: Some("gAAAAABoEncryptedReasoningBlobQUJDRA==".into()),
            },
            // The call's id is its call_id, not the item id fc_77.
            tool_use("call_weather_1", "get_weather", json!({"city": "Paris"})),
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.usage.reasoning_tokens, 128);
    assert_eq!(response.usage.output_tokens, 180);
    // The reasoning block serializes in the crate's conversation model with its own tag.
    assert_eq!(
        serde_json::to_value(&response.message.content[0]).unwrap(),
        json!({"type": "reasoning", "id": "rs_0a1b",
               "summary": ["**Planning the lookup**\n\nI need the weather.", "**Calling the tool**"],
               "encrypted_content": "gAAAAABoEncryptedReasoningBlobQUJDRA=="})
    );
}

#[test]
fn interleaved_parallel_calls_are_keyed_by_output_index() {
    let decoded = decode("parallel_calls.sse");
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::text("Checking both."),
            tool_use("call_a", "get_weather", json!({"city": "Oslo"})),
            tool_use("call_b", "get_time", json!({"tz": "Europe/Oslo"})),
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    // The second call finished first: its block stops first, so it can start early.
    let stops: Vec<usize> = decoded
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::BlockStop { index } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(stops, [0, 2, 1]);
}

#[test]
fn a_refusal_is_text_with_the_refusal_stop_reason() {
    let response = decode("refusal.sse").result.unwrap();
    assert_eq!(response.text(), "I can't help with that.");
    assert_eq!(response.stop_reason, StopReason::Refusal);
}

#[test]
fn incomplete_responses_map_their_reason() {
    let response = decode("incomplete_max_output_tokens.sse").result.unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert_eq!(response.text(), "Let me write the file.");
    assert_eq!(response.invalid_tool_calls.len(), 1);
    assert_eq!(response.invalid_tool_calls[0].id, "call_len");
    assert_eq!(
        response.invalid_tool_calls[0].reason,
        InvalidToolCallReason::Incomplete
    );
    let response = decode("incomplete_content_filter.sse").result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ContentFilter);
    assert_eq!(response.text(), "Partial");
}

#[test]
fn failures_are_typed_and_classified_like_the_other_formats() {
    let failed = decode("failed_server_error.sse").result.unwrap_err();
    assert_eq!(
        failed,
        LlmError::Stream {
            error_type: "server_error".into(),
            message: "The server had an error while processing your request.".into()
        }
    );
    assert!(failed.is_retryable());
    let rate = decode("error_rate_limit.sse").result.unwrap_err();
    assert_eq!(
        rate,
        LlmError::Stream {
            error_type: "rate_limit_exceeded".into(),
            message: "Rate limit reached for gpt-5.".into()
        }
    );
    assert!(rate.is_retryable());

    let body = |data: Value| format!("data: {data}\n\n");
    let decode_str = |s: String| common::decode(F, s.as_bytes()).result;
    // Request errors surface at once.
    let bad = decode_str(body(json!({"type": "response.failed", "response": {
        "id": "r", "status": "failed",
        "error": {"code": "invalid_prompt", "message": "Invalid prompt."}}})))
    .unwrap_err();
    assert!(!bad.is_retryable(), "{bad:?}");
    // A context overflow is recognized as one, so the agent compacts.
    let overflow = decode_str(body(
        json!({"type": "error", "code": "context_length_exceeded",
               "message": "Your input exceeds the context window of this model.", "param": "input"}),
    ))
    .unwrap_err();
    assert!(
        matches!(overflow, LlmError::ContextOverflow(_)),
        "{overflow:?}"
    );
    // Proxies that put an HTTP status in the error are classified by it.
    let proxy = decode_str(body(
        json!({"type": "error", "error": {"message": "slow down", "type": "throttling_error", "code": "429"}}),
    ))
    .unwrap_err();
    assert_eq!(proxy.status(), Some(429));
    assert!(proxy.is_retryable());
    // An error event whose code and message are null still says what happened.
    let bare = decode_str(body(
        json!({"type": "error", "code": null, "message": null, "param": null}),
    ))
    .unwrap_err();
    assert_eq!(
        bare,
        LlmError::Stream {
            error_type: "error".into(),
            message: "the server sent an error event".into()
        }
    );
    // A proxy's message that is not a string is kept as its JSON text.
    let structured = decode_str(body(
        json!({"type": "error", "code": "upstream_error", "message": {"detail": "bad gateway"}}),
    ))
    .unwrap_err();
    assert_eq!(
        structured,
        LlmError::Stream {
            error_type: "upstream_error".into(),
            message: r#"{"detail":"bad gateway"}"#.into()
        }
    );
    // A failure whose error is null, or missing, still says what happened.
    for response in [
        json!({"id": "r", "status": "failed", "error": null}),
        json!({"id": "r", "status": "failed"}),
    ] {
        let failed = decode_str(body(
            json!({"type": "response.failed", "response": response}),
        ))
        .unwrap_err();
        assert_eq!(
            failed,
            LlmError::Stream {
                error_type: "response.failed".into(),
                message: "the response failed without an error object".into()
            }
        );
    }
}

#[test]
fn a_body_cut_anywhere_before_the_final_event_is_incomplete_never_shorter() {
    for name in [
        "text.sse",
        "reasoning_tool_call.sse",
        "parallel_calls.sse",
        "refusal.sse",
    ] {
        let body = fixture(name);
        let full = common::decode(F, &body).result.unwrap();
        let final_event = String::from_utf8_lossy(&body)
            .rfind("event: response.completed")
            .unwrap();
        for cut in 0..body.len() {
            let result = common::decode(F, &body[..cut]).result;
            match result {
                Err(LlmError::Incomplete { .. }) => {}
                // The last event's data line complete, only its blank line missing: the event
                // is whole and dispatched at the end of the body.
                Ok(response) if cut > final_event => assert_eq!(response, full, "{name} cut {cut}"),
                other => panic!("{name} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn lenient_servers_text_and_arguments_only_in_the_done_events() {
    let response = decode("lenient_done_only.sse").result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::text("Whole text."),
            tool_use("call_d", "lookup", json!({"q": 1})),
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

/// The text of every `TextDelta`, in order.
fn text_deltas(events: &[LlmEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A stream of just these events (no `event:` lines), framed by `response.created` and
/// `response.completed`.
fn minimal_stream(events: &[Value]) -> Vec<u8> {
    let mut body = String::new();
    let created = json!({"type": "response.created",
                         "response": {"id": "resp_m", "model": "m", "status": "in_progress"}});
    let completed = json!({"type": "response.completed",
                           "response": {"id": "resp_m", "model": "m", "status": "completed"}});
    for event in std::iter::once(&created).chain(events).chain([&completed]) {
        body.push_str(&format!("data: {event}\n\n"));
    }
    body.into_bytes()
}

#[test]
fn each_finishing_event_alone_carries_its_content() {
    // Servers that skip the deltas and `response.output_item.done` still send the content in
    // one of the other events: each is enough on its own.
    let message = json!({"type": "response.output_item.added", "output_index": 0,
                         "item": {"id": "msg_m", "type": "message", "role": "assistant",
                                  "status": "in_progress", "content": []}});
    let at = |mut event: Value| {
        event["item_id"] = json!("msg_m");
        event["output_index"] = json!(0);
        event["content_index"] = json!(0);
        event
    };
    let text_cases = [
        (
            at(json!({"type": "response.content_part.added",
                      "part": {"type": "output_text", "text": "Announced.", "annotations": []}})),
            "Announced.",
        ),
        (
            at(json!({"type": "response.output_text.done", "text": "Done text."})),
            "Done text.",
        ),
        (
            at(json!({"type": "response.content_part.done",
                      "part": {"type": "output_text", "text": "Part done.", "annotations": []}})),
            "Part done.",
        ),
    ];
    for (event, want) in text_cases {
        let decoded = common::decode(F, &minimal_stream(&[message.clone(), event.clone()]));
        let response = decoded.result.unwrap_or_else(|e| panic!("{event}: {e}"));
        assert_eq!(
            response.message.content,
            [ContentBlock::text(want)],
            "{event}"
        );
        assert_eq!(response.stop_reason, StopReason::EndTurn);
    }

    let refusal = at(json!({"type": "response.refusal.done", "refusal": "I won't."}));
    let response = common::decode(F, &minimal_stream(&[message.clone(), refusal]))
        .result
        .unwrap();
    assert_eq!(response.text(), "I won't.");
    assert_eq!(response.stop_reason, StopReason::Refusal);

    let call = json!({"type": "response.output_item.added", "output_index": 0,
                      "item": {"id": "fc_m", "type": "function_call", "call_id": "call_m",
                               "name": "lookup", "arguments": "", "status": "in_progress"}});
    let arguments = json!({"type": "response.function_call_arguments.done", "item_id": "fc_m",
                           "output_index": 0, "arguments": "{\"q\":1}"});
    let response = common::decode(F, &minimal_stream(&[call, arguments]))
        .result
        .unwrap();
    assert_eq!(
        response.message.content,
        [tool_use("call_m", "lookup", json!({"q": 1}))]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn a_part_announced_empty_is_filled_by_its_deltas_once() {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_m", "type": "message", "role": "assistant", "content": []}}),
        json!({"type": "response.content_part.added", "item_id": "msg_m", "output_index": 0,
               "content_index": 0, "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_m", "output_index": 0,
               "content_index": 0, "delta": "Hi"}),
    ];
    let decoded = common::decode(F, &minimal_stream(&events));
    assert_eq!(text_deltas(&decoded.events), ["Hi"]);
    assert_eq!(decoded.result.unwrap().text(), "Hi");
}

#[test]
fn deltas_are_not_doubled_by_the_done_events() {
    // Each piece of text arrives once as a delta and again in four finishing events.
    let decoded = decode("text.sse");
    assert_eq!(
        text_deltas(&decoded.events).concat(),
        "Hello, wörld — ok 🎉"
    );
}

#[test]
fn malformed_streams_are_errors_not_panics() {
    for (body, what) in [
        (
            "data: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"delta\":\"{}\"}\n\n",
            "never started",
        ),
        ("data: {not json\n\n", "invalid JSON"),
        // An event type the decoder reads, with a field of the wrong type.
        (
            "data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"content_index\":0,\"delta\":{\"text\":\"x\"}}\n\n",
            "invalid JSON",
        ),
        (
            "data: {\"type\":\"response.output_text.delta\",\"output_index\":99999999,\"delta\":\"x\"}\n\n",
            "limit",
        ),
    ] {
        match common::decode(F, body.as_bytes()).result {
            Err(LlmError::Malformed { message }) => {
                assert!(message.contains(what), "{message}")
            }
            other => panic!("{body}: {other:?}"),
        }
    }
    // An event the decoder does not read is ignored even when its fields have other types
    // than the same names have in the events it reads.
    let mut body = fixture("text.sse");
    body.splice(
        0..0,
        b"data: {\"type\":\"response.future.delta\",\"delta\":{\"x\":1},\"item\":7}\n\n"
            .iter()
            .copied(),
    );
    assert_eq!(
        common::decode(F, &body).result.unwrap().text(),
        "Hello, wörld — ok 🎉"
    );
    // A numeric error code is still a typed error.
    let numeric = common::decode(
        F,
        b"data: {\"type\":\"error\",\"code\":503,\"message\":\"unavailable\"}\n\n",
    )
    .result
    .unwrap_err();
    assert_eq!(numeric.status(), Some(503), "{numeric:?}");
    assert!(numeric.is_retryable());
    // An empty body, or one of another format, is incomplete.
    for body in ["", "data: {\"choices\":[]}\n\n"] {
        assert!(matches!(
            common::decode(F, body.as_bytes()).result,
            Err(LlmError::Incomplete { .. })
        ));
    }
}

#[test]
fn the_stream_ends_at_the_final_event() {
    let mut body = fixture("text.sse");
    body.extend_from_slice(b"data: [DONE]\n\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"late\"}\n\n");
    // Not done before the final event.
    let last = body
        .windows(b"response.completed".len())
        .position(|w| w == b"response.completed")
        .unwrap();
    let mut early = WireDecoder::new(F);
    early.push(&body[..last], &mut Vec::new()).unwrap();
    assert!(!early.is_done());
    // The decoder itself says the body was cut, and how, before any assembler looks.
    match early.finish(&mut Vec::new()) {
        Err(LlmError::Incomplete { detail }) => {
            assert!(detail.contains("no response.completed"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    match WireDecoder::new(F).finish(&mut Vec::new()) {
        Err(LlmError::Incomplete { detail }) => assert!(detail.contains("no event"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let mut decoder = WireDecoder::new(F);
    let mut events = Vec::new();
    decoder.push(&body, &mut events).unwrap();
    assert!(decoder.is_done());
    decoder.finish(&mut events).unwrap();
    let mut assembler = StreamAssembler::new();
    for e in &events {
        assembler.push(e).unwrap();
    }
    assert_eq!(assembler.finish().unwrap().text(), "Hello, wörld — ok 🎉");
}

#[test]
fn a_whole_response_object_decodes_like_its_stream() {
    let body = fixture("reasoning_tool_call.sse");
    let text = String::from_utf8_lossy(&body);
    let completed: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["type"] == "response.completed")
        .unwrap();
    let whole = serde_json::to_vec(&completed["response"]).unwrap();
    let mut events = Vec::new();
    WireDecoder::new(F)
        .decode_json(&whole, &mut events)
        .unwrap();
    let response = common::assemble(&events).unwrap();
    let streamed = decode("reasoning_tool_call.sse").result.unwrap();
    assert_eq!(response.message, streamed.message);
    assert_eq!(response.usage, streamed.usage);
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

/// Recorded Responses streams, when the transcripts folder has any (`openai_responses_*.sse`):
/// each must assemble what its final event's output holds (what the SDK returns), under every
/// chunking. None are recorded yet; the test says so loudly rather than pass in silence.
#[test]
fn recorded_responses_transcripts_match_their_final_output() {
    let dir = match std::env::var_os("AGENT_LOOP_TRANSCRIPTS") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/transcripts"),
    };
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("openai_responses_") && name.ends_with(".sse")) {
            continue;
        }
        let body = std::fs::read(&path).unwrap();
        let whole = common::decode(F, &body);
        for size in [1, 7, 64, 4096] {
            assert_eq!(
                common::decode_chunked(F, &body, size),
                whole,
                "{name} at {size}"
            );
        }
        if let Ok(response) = whole.result {
            let (expected, _) = sdk_final(&body);
            assert_eq!(response.message.content, expected, "{name}");
        }
        checked += 1;
    }
    if checked == 0 {
        // None are recorded yet, in CI either: said where it shows, not failed.
        crate::common::say_skipped(&format!(
            "NOTE: no openai_responses_*.sse transcripts in {}; \
             recorded_responses_transcripts_match_their_final_output checked nothing",
            dir.display()
        ));
    }
}

/// Checks the block discipline every consumer relies on: each block that got content stops
/// exactly once, gets nothing after its stop, and stops before the message does.
fn assert_blocks_stop_once(events: &[LlmEvent], what: &str) {
    use std::collections::BTreeMap;
    let mut stops: BTreeMap<usize, usize> = BTreeMap::new();
    let mut started = std::collections::BTreeSet::new();
    let mut message_stopped = false;
    for event in events {
        let content = match event {
            LlmEvent::TextDelta { index, .. }
            | LlmEvent::ThinkingDelta { index, .. }
            | LlmEvent::Reasoning { index, .. }
            | LlmEvent::ToolCallStart { index, .. }
            | LlmEvent::ToolCallDelta { index, .. } => Some(*index),
            LlmEvent::BlockStop { index } => {
                assert!(
                    !message_stopped,
                    "{what}: block {index} stopped after the message"
                );
                assert!(
                    started.contains(index),
                    "{what}: block {index} stopped, never started"
                );
                *stops.entry(*index).or_default() += 1;
                None
            }
            LlmEvent::MessageStop { .. } => {
                message_stopped = true;
                None
            }
            _ => None,
        };
        if let Some(index) = content {
            assert!(
                !stops.contains_key(&index),
                "{what}: content for block {index} after its stop: {event:?}"
            );
            started.insert(index);
        }
    }
    assert!(message_stopped, "{what}: no MessageStop");
    for index in &started {
        assert_eq!(stops.get(index), Some(&1), "{what}: stops of block {index}");
    }
}

#[test]
fn every_block_stops_once_before_the_message_stops() {
    for (name, _) in common::fixtures("responses") {
        let decoded = decode(&name);
        if decoded.result.is_ok() {
            assert_blocks_stop_once(&decoded.events, &name);
        }
    }
    // Servers that send neither `content_part.done` nor `output_item.done`: the final event
    // closes what is still open.
    let text = json!({"type": "response.output_text.delta", "item_id": "msg_m",
                      "output_index": 0, "content_index": 0, "delta": "Hi"});
    let message = json!({"type": "response.output_item.added", "output_index": 0,
                         "item": {"id": "msg_m", "type": "message", "role": "assistant",
                                  "content": []}});
    let call = json!({"type": "response.output_item.added", "output_index": 1,
                      "item": {"id": "fc_m", "type": "function_call", "call_id": "call_m",
                               "name": "lookup", "arguments": ""}});
    let arguments = json!({"type": "response.function_call_arguments.delta", "item_id": "fc_m",
                           "output_index": 1, "delta": "{\"q\":1}"});
    let reasoning = json!({"type": "response.output_item.added", "output_index": 0,
                           "item": {"id": "rs_m", "type": "reasoning", "summary": []}});
    let thinking = json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_m",
                          "output_index": 0, "summary_index": 0, "delta": "Thinking"});
    let cases = [
        ("text", vec![message.clone(), text.clone()]),
        ("call", vec![message, text, call, arguments]),
        ("reasoning", vec![reasoning, thinking]),
    ];
    for (what, events) in cases {
        let decoded = common::decode(F, &minimal_stream(&events));
        decoded.result.as_ref().unwrap();
        assert_blocks_stop_once(&decoded.events, what);
    }
}

#[test]
fn the_finished_item_alone_carries_its_content() {
    // Servers that announce an item, then send it finished with no part or delta events.
    let added = |output_index: u64, item: Value| json!({"type": "response.output_item.added", "output_index": output_index, "item": item});
    let done = |output_index: u64, item: Value| json!({"type": "response.output_item.done", "output_index": output_index, "item": item});
    let message = json!({"id": "msg_m", "type": "message", "role": "assistant",
                         "status": "in_progress", "content": []});
    let finished = json!({"id": "msg_m", "type": "message", "role": "assistant",
                          "status": "completed", "content": [
                              {"type": "output_text", "text": "First.", "annotations": []},
                              {"type": "output_text", "text": "Second.", "annotations": []}]});
    let call = json!({"id": "fc_m", "type": "function_call", "call_id": "call_m",
                      "name": "lookup", "arguments": "", "status": "in_progress"});
    let call_done = json!({"id": "fc_m", "type": "function_call", "call_id": "call_m",
                           "name": "lookup", "arguments": "{\"q\":1}", "status": "completed"});
    let decoded = common::decode(
        F,
        &minimal_stream(&[
            added(0, message.clone()),
            done(0, finished),
            added(1, call),
            done(1, call_done),
        ]),
    );
    assert_blocks_stop_once(&decoded.events, "finished items");
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::text("First."),
            ContentBlock::text("Second."),
            tool_use("call_m", "lookup", json!({"q": 1})),
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);

    let refused = json!({"id": "msg_m", "type": "message", "role": "assistant",
                         "status": "completed",
                         "content": [{"type": "refusal", "refusal": "I won't."}]});
    let response = common::decode(F, &minimal_stream(&[added(0, message), done(0, refused)]))
        .result
        .unwrap();
    assert_eq!(response.message.content, [ContentBlock::text("I won't.")]);
    assert_eq!(response.stop_reason, StopReason::Refusal);
}

#[test]
fn items_never_announced_get_their_own_blocks() {
    // Servers that skip `response.output_item.added`: the first event of an item opens it.
    let events = [
        json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_m",
               "output_index": 0, "summary_index": 0, "delta": "Thinking."}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "rs_m", "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": "Thinking."}]}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_m", "output_index": 1,
               "content_index": 0, "delta": "Hi"}),
    ];
    let decoded = common::decode(F, &minimal_stream(&events));
    assert_blocks_stop_once(&decoded.events, "never announced");
    let blocks: Vec<(usize, &str)> = decoded
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ThinkingDelta { index, thinking } => Some((*index, thinking.as_str())),
            LlmEvent::TextDelta { index, text } => Some((*index, text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(blocks, [(0, "Thinking."), (1, "Hi")]);
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::Reasoning {
                id: "rs_m".into(),
                summary: vec!["Thinking.".into()],
                encrypted_content: None,
            },
            ContentBlock::text("Hi"),
        ]
    );
}

#[test]
fn a_part_stops_at_its_content_part_done() {
    // The block is complete at `response.content_part.done`, before its item finishes.
    for name in ["text.sse", "refusal.sse"] {
        let body = fixture(name);
        let item_done = String::from_utf8_lossy(&body)
            .find("event: response.output_item.done")
            .unwrap();
        let mut decoder = WireDecoder::new(F);
        let mut events = Vec::new();
        decoder.push(&body[..item_done], &mut events).unwrap();
        assert_eq!(
            events.last(),
            Some(&LlmEvent::BlockStop { index: 0 }),
            "{name}"
        );
    }
}

#[test]
fn a_whole_response_object_keeps_its_status_error_and_parts() {
    let decode_json = |body: Value| {
        let mut events = Vec::new();
        WireDecoder::new(F).decode_json(body.to_string().as_bytes(), &mut events)?;
        common::assemble(&events)
    };
    let message = |content: Value| {
        json!([{"id": "msg_w", "type": "message", "role": "assistant", "status": "completed",
                "content": content}])
    };
    let text = message(
        json!([{"type": "output_text", "text": "Part one.", "annotations": []},
                              {"type": "output_text", "text": "Part two.", "annotations": []}]),
    );
    let response = decode_json(json!({"id": "resp_w", "object": "response", "model": "m",
                                      "status": "completed", "error": null, "output": text}))
    .unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::text("Part one."),
            ContentBlock::text("Part two.")
        ]
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);

    for (reason, stop) in [
        (
            json!({"reason": "max_output_tokens"}),
            StopReason::MaxTokens,
        ),
        (
            json!({"reason": "content_filter"}),
            StopReason::ContentFilter,
        ),
    ] {
        let response = decode_json(json!({"id": "resp_w", "object": "response", "model": "m",
            "status": "incomplete", "incomplete_details": reason,
            "output": message(json!([{"type": "output_text", "text": "Cut", "annotations": []}]))}))
        .unwrap();
        assert_eq!(response.stop_reason, stop, "{reason}");
        assert_eq!(response.text(), "Cut");
    }

    let refusal = decode_json(json!({"id": "resp_w", "object": "response", "model": "m",
        "status": "completed",
        "output": message(json!([{"type": "refusal", "refusal": "I can't help with that."}]))}))
    .unwrap();
    assert_eq!(refusal.text(), "I can't help with that.");
    assert_eq!(refusal.stop_reason, StopReason::Refusal);

    let failed = decode_json(json!({"id": "resp_w", "object": "response", "model": "m",
        "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "The server had an error."}}))
    .unwrap_err();
    assert_eq!(
        failed,
        LlmError::Stream {
            error_type: "server_error".into(),
            message: "The server had an error.".into()
        }
    );
}

/// Decodes `body` whole and in every chunking from 1 byte up; all must agree.
fn decode_body(body: &[u8], what: &str) -> common::Decoded {
    let whole = common::decode(F, body);
    for size in [1, 2, 3, 5, 7, 16, 64] {
        assert_eq!(
            common::decode_chunked(F, body, size),
            whole,
            "{what} at chunk size {size}"
        );
    }
    whole
}

#[test]
fn an_empty_text_part_between_reasoning_and_a_call_decodes_like_the_sdk() {
    // A message whose only `output_text` part stays empty: no delta at all, `"text": ""` in
    // `output_text.done`, `content_part.done` and the finished item. The SDK's final response
    // holds the part with text ""; the crate's message has no text, and everything around it
    // is intact.
    let body = fixture("empty_text_part.sse");
    let decoded = decode("empty_text_part.sse");
    assert_blocks_stop_once(&decoded.events, "empty text part");
    let response = decoded
        .result
        .unwrap_or_else(|e| panic!("an empty text part is valid: {e}"));
    assert_eq!(
        response.message.content,
        [
            ContentBlock::Reasoning {
                id: "rs_e1".into(),
                summary: vec!["**Checking the file**".into()],
                encrypted_content: Some("gAAAAABoEmptyTextCase==".into()),
            },
            tool_use("call_read_1", "read_file", json!({"path": "src/lib.rs"})),
        ]
    );
    assert_eq!(response.text(), "");
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert!(response.invalid_tool_calls.is_empty());
    assert_eq!(response.usage.total_input_tokens(), 812);
    assert_eq!(response.message.content, sdk_final(&body).0);
    // No text reaches a consumer, and no event names a block that never started.
    assert!(text_deltas(&decoded.events).concat().is_empty());
}

#[test]
fn empty_parts_and_arguments_decode_wherever_they_end() {
    let message = |i: u64| {
        json!({"type": "response.output_item.added", "output_index": i,
               "item": {"id": format!("msg_{i}"), "type": "message", "role": "assistant",
                        "status": "in_progress", "content": []}})
    };
    let at = |i: u64, c: u64, mut event: Value| {
        event["item_id"] = json!(format!("msg_{i}"));
        event["output_index"] = json!(i);
        event["content_index"] = json!(c);
        event
    };
    let text_part = json!({"type": "output_text", "text": "", "annotations": []});
    let added = |i: u64, c: u64| {
        at(
            i,
            c,
            json!({"type": "response.content_part.added", "part": text_part}),
        )
    };
    let text_done = |i: u64, c: u64| {
        at(
            i,
            c,
            json!({"type": "response.output_text.done", "text": ""}),
        )
    };
    let part_done = |i: u64, c: u64| {
        at(
            i,
            c,
            json!({"type": "response.content_part.done", "part": text_part}),
        )
    };
    let item_done = |i: u64, content: Value| {
        json!({"type": "response.output_item.done", "output_index": i,
               "item": {"id": format!("msg_{i}"), "type": "message", "role": "assistant",
                        "status": "completed", "content": content}})
    };
    let empty_message_done = |i: u64| item_done(i, json!([text_part]));

    let cases: Vec<(&str, Vec<Value>, Vec<ContentBlock>)> = vec![
        (
            "every finishing event",
            vec![
                message(0),
                added(0, 0),
                text_done(0, 0),
                part_done(0, 0),
                empty_message_done(0),
            ],
            vec![],
        ),
        (
            "closed by the finished item",
            vec![message(0), added(0, 0), empty_message_done(0)],
            vec![],
        ),
        (
            "closed by response.completed",
            vec![message(0), added(0, 0)],
            vec![],
        ),
        (
            "never announced",
            vec![text_done(0, 0), part_done(0, 0)],
            vec![],
        ),
        (
            "only in the finished item",
            vec![message(0), empty_message_done(0)],
            vec![],
        ),
        (
            "before a part with text",
            vec![
                message(0),
                added(0, 0),
                text_done(0, 0),
                part_done(0, 0),
                added(0, 1),
                at(
                    0,
                    1,
                    json!({"type": "response.output_text.delta", "delta": "After."}),
                ),
                at(
                    0,
                    1,
                    json!({"type": "response.output_text.done", "text": "After."}),
                ),
                item_done(
                    0,
                    json!([text_part, {"type": "output_text", "text": "After.", "annotations": []}]),
                ),
            ],
            vec![ContentBlock::text("After.")],
        ),
        (
            "after a part with text",
            vec![
                message(0),
                at(
                    0,
                    0,
                    json!({"type": "response.output_text.delta", "delta": "Before."}),
                ),
                added(0, 1),
                part_done(0, 1),
                at(
                    0,
                    0,
                    json!({"type": "response.content_part.done",
                           "part": {"type": "output_text", "text": "Before."}}),
                ),
            ],
            vec![ContentBlock::text("Before.")],
        ),
        (
            "two empty messages",
            vec![
                message(0),
                added(0, 0),
                part_done(0, 0),
                message(1),
                added(1, 0),
                text_done(1, 0),
            ],
            vec![],
        ),
    ];
    for (what, events, want) in cases {
        let decoded = decode_body(&minimal_stream(&events), what);
        assert_blocks_stop_once(&decoded.events, what);
        let response = decoded
            .result
            .unwrap_or_else(|e| panic!("{what}: an empty text part is valid: {e}"));
        assert_eq!(response.message.content, want, "{what}");
        assert_eq!(response.stop_reason, StopReason::EndTurn, "{what}");
    }
}

#[test]
fn an_empty_refusal_part_is_no_refusal_and_empty_arguments_are_an_empty_object() {
    // An empty refusal says nothing, as in Chat Completions (where an empty `refusal` delta is
    // ignored): the response ends as it would without it.
    let refusal_part = json!({"type": "refusal", "refusal": ""});
    let at = |mut event: Value| {
        event["item_id"] = json!("msg_r");
        event["output_index"] = json!(0);
        event["content_index"] = json!(0);
        event
    };
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"id": "msg_r", "type": "message", "role": "assistant", "content": []}}),
        at(json!({"type": "response.content_part.added", "part": refusal_part})),
        at(json!({"type": "response.refusal.done", "refusal": ""})),
        at(json!({"type": "response.content_part.done", "part": refusal_part})),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": {"id": "msg_r", "type": "message", "role": "assistant",
                        "content": [refusal_part]}}),
    ];
    let decoded = decode_body(&minimal_stream(&events), "empty refusal");
    assert_blocks_stop_once(&decoded.events, "empty refusal");
    let response = decoded.result.unwrap();
    assert_eq!(response.message.content, []);
    assert_eq!(response.stop_reason, StopReason::EndTurn);

    // A function call whose arguments are "" in every event: the assembler reads empty
    // arguments as `{}`, the same for every wire format.
    let call = |ty: &str| {
        json!({"type": ty, "output_index": 0,
               "item": {"id": "fc_e", "type": "function_call", "call_id": "call_e",
                        "name": "now", "arguments": ""}})
    };
    let events = [
        call("response.output_item.added"),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_e",
               "output_index": 0, "delta": ""}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_e",
               "output_index": 0, "arguments": ""}),
        call("response.output_item.done"),
    ];
    let decoded = decode_body(&minimal_stream(&events), "empty arguments");
    assert_blocks_stop_once(&decoded.events, "empty arguments");
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [tool_use("call_e", "now", json!({}))]
    );
    assert!(response.invalid_tool_calls.is_empty());
    assert_eq!(response.stop_reason, StopReason::ToolUse);

    // The same in a whole response object.
    let mut events = Vec::new();
    WireDecoder::new(F)
        .decode_json(
            json!({"id": "resp_w", "object": "response", "model": "m", "status": "completed",
                   "output": [
                       {"id": "msg_w", "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "", "annotations": []},
                                    {"type": "refusal", "refusal": ""}]},
                       {"id": "fc_w", "type": "function_call", "call_id": "call_w",
                        "name": "now", "arguments": ""}]})
            .to_string()
            .as_bytes(),
            &mut events,
        )
        .unwrap();
    let response = common::assemble(&events).unwrap();
    assert_eq!(
        response.message.content,
        [tool_use("call_w", "now", json!({}))]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}
