//! Amazon Bedrock Converse through the public API: the ConverseStream decoder on bodies built
//! from the documented events (with an event-stream encoder of the test's own), botocore's raw
//! event-stream vectors, chunking, the request body the client sends (and its golden copy),
//! and `BedrockClient` against the loopback `MockServer`: answers, a tool round trip through
//! an `Agent`, retries, errors, secrets, SigV4 and bearer headers.

use crate::common;

use std::time::{Duration, SystemTime};

use agent_loop::media::MediaSource;
use agent_loop::provider::cache::{CacheTtl, PromptCache};
use agent_loop::provider::{ModelRequest, ToolChoice};
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse, StreamPoint};
use agent_loop::tool::ToolSpec;
use agent_loop::wire::{WireDecoder, WireFormat};
use agent_loop::{
    Agent, AgentEvent, BedrockClient, ContentBlock, LlmClient, LlmError, LlmEvent, Message, Role,
    StopReason, Usage,
};
use common::agent::add_tool;
use common::{decode, decode_split, fast_retries, fixture, Decoded};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// An AWS event-stream encoder of the test's own (string headers), so that the crate's decoder is
// checked against bytes it did not make.

fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (name, value) in headers {
        encoded.push(name.len() as u8);
        encoded.extend_from_slice(name.as_bytes());
        encoded.push(7);
        encoded.extend_from_slice(&(value.len() as u16).to_be_bytes());
        encoded.extend_from_slice(value.as_bytes());
    }
    let total = 16 + encoded.len() + payload.len();
    let mut out = (total as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out.extend_from_slice(&encoded);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A ConverseStream event as Bedrock sends it: padded with `p`.
fn ev(name: &str, mut payload: Value) -> Vec<u8> {
    payload["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0");
    frame(
        &[
            (":event-type", name),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn exception(name: &str, payload: Value) -> Vec<u8> {
    frame(
        &[
            (":exception-type", name),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn start() -> Vec<u8> {
    ev("messageStart", json!({"role": "assistant"}))
}

fn text(index: usize, text: &str) -> Vec<u8> {
    ev(
        "contentBlockDelta",
        json!({"contentBlockIndex": index, "delta": {"text": text}}),
    )
}

fn block_stop(index: usize) -> Vec<u8> {
    ev("contentBlockStop", json!({"contentBlockIndex": index}))
}

fn tool_start(index: usize, id: &str, name: &str) -> Vec<u8> {
    ev(
        "contentBlockStart",
        json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
    )
}

fn tool_input(index: usize, fragment: &str) -> Vec<u8> {
    ev(
        "contentBlockDelta",
        json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": fragment}}}),
    )
}

fn reasoning(index: usize, delta: Value) -> Vec<u8> {
    ev(
        "contentBlockDelta",
        json!({"contentBlockIndex": index, "delta": {"reasoningContent": delta}}),
    )
}

fn stop(reason: &str) -> Vec<u8> {
    ev("messageStop", json!({"stopReason": reason}))
}

fn metadata(usage: Value) -> Vec<u8> {
    ev(
        "metadata",
        json!({"usage": usage, "metrics": {"latencyMs": 412}}),
    )
}

fn usage_3_5() -> Value {
    json!({"inputTokens": 3, "outputTokens": 5, "totalTokens": 8})
}

fn body(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

fn bedrock(body: &[u8]) -> Decoded {
    decode(WireFormat::Bedrock, body)
}

// ---------------------------------------------------------------------------------------------
// The decoder.

#[test]
fn a_text_answer_decodes_with_its_usage_and_stop_reason() {
    let decoded = bedrock(&body(&[
        start(),
        text(0, "Hello"),
        text(0, ", world"),
        block_stop(0),
        stop("end_turn"),
        metadata(usage_3_5()),
    ]));
    assert_eq!(
        decoded.events,
        [
            LlmEvent::MessageStart {
                id: String::new(),
                model: String::new()
            },
            LlmEvent::TextDelta {
                index: 0,
                text: "Hello".into()
            },
            LlmEvent::TextDelta {
                index: 0,
                text: ", world".into()
            },
            LlmEvent::BlockStop { index: 0 },
            LlmEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 5,
                ..Usage::default()
            }),
            LlmEvent::MessageStop {
                stop_reason: StopReason::EndTurn
            },
        ]
    );
    let response = decoded.result.unwrap();
    assert_eq!(response.text(), "Hello, world");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
}

#[test]
fn reasoning_keeps_its_signature_and_redacted_reasoning_its_data() {
    let decoded = bedrock(&body(&[
        start(),
        reasoning(0, json!({"text": "Let me "})),
        reasoning(0, json!({"text": "think."})),
        reasoning(0, json!({"signature": "EqQBCkYIBxgCKkA"})),
        block_stop(0),
        reasoning(1, json!({"redactedContent": "b3BhcXVl"})),
        block_stop(1),
        text(2, "42"),
        block_stop(2),
        stop("end_turn"),
        metadata(usage_3_5()),
    ]));
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::Thinking {
                thinking: "Let me think.".into(),
                signature: "EqQBCkYIBxgCKkA".into()
            },
            ContentBlock::RedactedThinking {
                data: "b3BhcXVl".into()
            },
            ContentBlock::text("42"),
        ]
    );
}

#[test]
fn a_tool_call_streams_its_input_fragment_by_fragment() {
    let decoded = bedrock(&body(&[
        start(),
        text(0, "Adding."),
        block_stop(0),
        tool_start(1, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "add"),
        tool_input(1, "{\"a\": "),
        tool_input(1, "1, \"b\""),
        tool_input(1, ": 2}"),
        block_stop(1),
        stop("tool_use"),
        metadata(usage_3_5()),
    ]));
    let deltas: Vec<&str> = decoded
        .events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json,
            } => Some(partial_json.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["{\"a\": ", "1, \"b\"", ": 2}"]);
    assert!(decoded.events.contains(&LlmEvent::ToolCallStart {
        index: 1,
        id: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q".into(),
        name: "add".into()
    }));
    let response = decoded.result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let calls: Vec<_> = response.message.tool_uses().collect();
    assert_eq!(
        calls,
        [(
            "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
            "add",
            &json!({"a": 1, "b": 2})
        )]
    );
}

#[test]
fn two_tool_calls_get_their_own_blocks_in_order() {
    let decoded = bedrock(&body(&[
        start(),
        tool_start(0, "t1", "ls"),
        tool_input(0, "{\"path\":\".\"}"),
        block_stop(0),
        tool_start(1, "t2", "read"),
        tool_input(1, "{\"path\":"),
        tool_input(1, "\"a.txt\"}"),
        block_stop(1),
        stop("tool_use"),
        metadata(usage_3_5()),
    ]));
    let response = decoded.result.unwrap();
    let calls: Vec<_> = response
        .message
        .tool_uses()
        .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("t1".to_owned(), "ls".to_owned(), json!({"path": "."})),
            ("t2".to_owned(), "read".to_owned(), json!({"path": "a.txt"})),
        ]
    );
}

#[test]
fn every_documented_stop_reason_is_mapped_and_an_unknown_one_kept() {
    for (wire, want) in [
        ("end_turn", StopReason::EndTurn),
        ("tool_use", StopReason::ToolUse),
        ("max_tokens", StopReason::MaxTokens),
        ("stop_sequence", StopReason::StopSequence),
        ("guardrail_intervened", StopReason::ContentFilter),
        ("content_filtered", StopReason::ContentFilter),
        (
            "model_context_window_exceeded",
            StopReason::ModelContextWindowExceeded,
        ),
        (
            "malformed_model_output",
            StopReason::Other("malformed_model_output".into()),
        ),
        (
            "malformed_tool_use",
            StopReason::Other("malformed_tool_use".into()),
        ),
        (
            "brand_new_reason",
            StopReason::Other("brand_new_reason".into()),
        ),
    ] {
        let decoded = bedrock(&body(&[
            start(),
            text(0, "x"),
            block_stop(0),
            stop(wire),
            metadata(usage_3_5()),
        ]));
        assert_eq!(decoded.result.unwrap().stop_reason, want, "{wire}");
    }
    // The stop sequence Anthropic models report in additionalModelResponseFields.
    let decoded = bedrock(&body(&[
        start(),
        text(0, "x"),
        block_stop(0),
        ev(
            "messageStop",
            json!({"stopReason": "stop_sequence",
                   "additionalModelResponseFields": {"stop_sequence": "END"}}),
        ),
        metadata(usage_3_5()),
    ]));
    assert_eq!(
        decoded.result.unwrap().stop_sequence.as_deref(),
        Some("END")
    );
}

#[test]
fn usage_counts_cache_reads_and_writes_apart() {
    let decoded = bedrock(&body(&[
        start(),
        text(0, "x"),
        block_stop(0),
        stop("end_turn"),
        metadata(
            json!({"inputTokens": 12, "outputTokens": 7, "totalTokens": 1519,
                        "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 500}),
        ),
    ]));
    let usage = decoded.result.unwrap().usage;
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens
        ),
        (12, 7, 1000, 500)
    );
    assert_eq!(usage.total_input_tokens(), 1512);
}

#[test]
fn each_exception_is_a_stream_error_retried_when_transient() {
    for (name, retryable) in [
        ("throttlingException", true),
        ("serviceUnavailableException", true),
        ("internalServerException", true),
        ("modelStreamErrorException", true),
        ("modelTimeoutException", true),
        ("validationException", false),
    ] {
        let decoded = bedrock(&body(&[
            start(),
            text(0, "partial"),
            exception(name, json!({"message": "it went wrong"})),
        ]));
        let err = decoded.result.unwrap_err();
        match &err {
            LlmError::Stream {
                error_type,
                message,
            } => {
                assert_eq!(error_type, name);
                assert!(message.contains("it went wrong"), "{message}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(err.is_retryable(), retryable, "{name}");
    }
    let decoded = bedrock(&exception(
        "modelStreamErrorException",
        json!({"message": "model failed", "originalStatusCode": 424, "originalMessage": "boom"}),
    ));
    match decoded.result.unwrap_err() {
        LlmError::Stream { message, .. } => {
            assert!(
                message.contains("424") && message.contains("boom"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// The events one push of `body` gives, and whether the decoder then says the message is done.
fn push(body: &[u8]) -> (Result<Vec<LlmEvent>, LlmError>, bool) {
    let mut decoder = WireDecoder::new(WireFormat::Bedrock);
    let mut events = Vec::new();
    let result = decoder.push(body, &mut events).map(|()| events);
    (result, decoder.is_done())
}

#[test]
fn the_message_starts_at_message_start_or_at_the_first_event_and_ends_at_metadata() {
    let started = LlmEvent::MessageStart {
        id: String::new(),
        model: String::new(),
    };
    // messageStart alone already starts the message, once.
    assert_eq!(
        push(&body(&[start(), start()])),
        (Ok(vec![started.clone()]), false)
    );
    // A server that skips messageStart: the first event starts it.
    let (events, _) = push(&text(0, "Hi"));
    assert_eq!(
        events.unwrap(),
        [
            started.clone(),
            LlmEvent::TextDelta {
                index: 0,
                text: "Hi".into()
            }
        ]
    );
    // Done only once metadata follows messageStop.
    assert!(!push(&body(&[start(), text(0, "Hi"), stop("end_turn")])).1);
    assert!(
        push(&body(&[
            start(),
            text(0, "Hi"),
            stop("end_turn"),
            metadata(usage_3_5())
        ]))
        .1
    );
}

#[test]
fn a_block_left_open_closes_with_the_message_and_a_restarted_call_is_refused() {
    let (events, _) = push(&body(&[
        start(),
        tool_start(0, "tooluse_1", "add"),
        tool_input(0, "{}"),
        text(1, "and"),
        block_stop(1),
        stop("tool_use"),
    ]));
    let events = events.unwrap();
    let stops: Vec<&LlmEvent> = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::BlockStop { .. }))
        .collect();
    assert_eq!(
        stops,
        [
            &LlmEvent::BlockStop { index: 1 },
            &LlmEvent::BlockStop { index: 0 }
        ]
    );
    let (refused, _) = push(&body(&[
        start(),
        tool_start(0, "tooluse_1", "add"),
        tool_start(0, "tooluse_2", "add"),
    ]));
    assert!(
        matches!(&refused, Err(LlmError::Malformed { message }) if message.contains("already started")),
        "{refused:?}"
    );
}

#[test]
fn a_reasoning_block_opens_with_its_first_delta_never_empty() {
    let reasoning_start = ev(
        "contentBlockStart",
        json!({"contentBlockIndex": 0, "start": {"reasoningContent": {}}}),
    );
    let (events, _) = push(&body(&[start(), reasoning_start.clone(), block_stop(0)]));
    assert_eq!(events.unwrap().len(), 1, "only the MessageStart");
    let (events, _) = push(&body(&[
        start(),
        reasoning_start,
        reasoning(0, json!({"text": "Hmm."})),
        block_stop(0),
    ]));
    assert_eq!(
        events.unwrap()[1..],
        [
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "Hmm.".into()
            },
            LlmEvent::BlockStop { index: 0 }
        ]
    );
}

#[test]
fn a_truncated_body_is_incomplete_and_a_missing_metadata_is_tolerated() {
    let whole = body(&[
        start(),
        text(0, "Hello"),
        block_stop(0),
        stop("end_turn"),
        metadata(usage_3_5()),
    ]);
    // Cut inside a message, and between messages before messageStop.
    let before_stop = body(&[start(), text(0, "Hello"), block_stop(0)]);
    for cut in [
        &whole[..whole.len() - 3],
        &whole[..5],
        &before_stop[..],
        &b""[..],
    ] {
        let decoded = bedrock(cut);
        assert!(
            matches!(decoded.result, Err(LlmError::Incomplete { .. })),
            "{:?}",
            decoded.result
        );
    }
    // messageStop without the metadata after it: complete, usage unknown.
    let decoded = bedrock(&body(&[
        start(),
        text(0, "Hello"),
        block_stop(0),
        stop("end_turn"),
    ]));
    let response = decoded.result.unwrap();
    assert_eq!(response.text(), "Hello");
    assert_eq!(response.usage, Usage::default());
}

#[test]
fn a_corrupted_crc_is_refused() {
    let mut corrupted = body(&[start(), text(0, "Hello")]);
    let last = corrupted.len() - 1;
    corrupted[last] ^= 0x01;
    let decoded = bedrock(&corrupted);
    match decoded.result {
        Err(LlmError::Malformed { message }) => assert!(message.contains("CRC"), "{message}"),
        other => panic!("{other:?}"),
    }
    let mut prelude = start();
    prelude[2] ^= 0x10;
    assert!(matches!(
        bedrock(&prelude).result,
        Err(LlmError::Malformed { message }) if message.contains("prelude CRC")
    ));
}

#[test]
fn botocore_raw_messages_decode() {
    // Every header type is skipped by its length; the message has no event type, so it is
    // not a ConverseStream event.
    let mut decoder = WireDecoder::new(WireFormat::Bedrock);
    let mut events = Vec::new();
    decoder
        .push(
            &fixture("bedrock/botocore_all_header_types.bin"),
            &mut events,
        )
        .unwrap();
    assert!(events.is_empty());
    let err = decoder
        .push(&fixture("bedrock/botocore_error_message.bin"), &mut events)
        .unwrap_err();
    assert_eq!(
        err,
        LlmError::Stream {
            error_type: "code".into(),
            message: "message".into()
        }
    );
}

#[test]
fn what_aimock_sends_decodes() {
    // aimock opens text and reasoning blocks with an empty `start`, and sends no padding.
    let plain = |name: &str, payload: Value| {
        frame(
            &[
                (":content-type", "application/json"),
                (":event-type", name),
                (":message-type", "event"),
            ],
            payload.to_string().as_bytes(),
        )
    };
    let decoded = bedrock(&body(&[
        plain("messageStart", json!({"role": "assistant"})),
        plain(
            "contentBlockStart",
            json!({"contentBlockIndex": 0, "start": {"reasoningContent": {}}}),
        ),
        plain(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hmm"}}}),
        ),
        plain("contentBlockStop", json!({"contentBlockIndex": 0})),
        plain(
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {}}),
        ),
        plain(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"text": "Hi"}}),
        ),
        plain("contentBlockStop", json!({"contentBlockIndex": 1})),
        plain(
            "contentBlockStart",
            json!({"contentBlockIndex": 2, "start": {}}),
        ),
        plain("contentBlockStop", json!({"contentBlockIndex": 2})),
        plain("messageStop", json!({"stopReason": "end_turn"})),
        plain(
            "metadata",
            json!({"usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
                   "metrics": {"latencyMs": 0}}),
        ),
    ]));
    let response = decoded.result.unwrap();
    assert_eq!(
        response.message.content,
        [
            ContentBlock::Thinking {
                thinking: "hmm".into(),
                signature: String::new()
            },
            ContentBlock::text("Hi")
        ]
    );
}

#[test]
fn a_whole_converse_response_decodes_like_the_stream() {
    let whole = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}},
            {"text": "Adding."},
            {"toolUse": {"toolUseId": "t1", "name": "add", "input": {"a": 1, "b": 2}}}
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8},
        "metrics": {"latencyMs": 10}
    });
    let mut events = Vec::new();
    WireDecoder::new(WireFormat::Bedrock)
        .decode_json(whole.to_string().as_bytes(), &mut events)
        .unwrap();
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.text(), "Adding.");
    assert_eq!(response.usage.output_tokens, 5);
    assert_eq!(response.message.content.len(), 3);
    let mut events = Vec::new();
    let err = WireDecoder::new(WireFormat::Bedrock)
        .decode_json(
            br#"{"message":"The security token included in the request is invalid."}"#,
            &mut events,
        )
        .unwrap_err();
    assert!(matches!(err, LlmError::Stream { .. }), "{err:?}");
}

fn sample_bodies() -> Vec<Vec<u8>> {
    vec![
        body(&[
            start(),
            reasoning(0, json!({"text": "é🙂 thinking"})),
            reasoning(0, json!({"signature": "sig"})),
            block_stop(0),
            text(1, "Hello \"wörld\"\n"),
            block_stop(1),
            tool_start(2, "t1", "add"),
            tool_input(2, "{\"a\":"),
            tool_input(2, "1}"),
            block_stop(2),
            stop("tool_use"),
            metadata(usage_3_5()),
        ]),
        body(&[
            start(),
            text(0, "partial"),
            exception("throttlingException", json!({"message": "slow"})),
        ]),
        body(&[start(), text(0, "cut")]),
    ]
}

proptest! {
    /// Any chunking of a body, down to single bytes, gives the same events and result.
    #[test]
    fn chunking_never_matters(which in 0usize..3, cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let bodies = sample_bodies();
        let body = &bodies[which];
        let whole = bedrock(body);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        points.sort_unstable();
        prop_assert_eq!(decode_split(WireFormat::Bedrock, body, &points), whole.clone());
        let every_byte: Vec<usize> = (1..body.len()).collect();
        prop_assert_eq!(decode_split(WireFormat::Bedrock, body, &every_byte), whole);
    }

    /// Corrupted bodies never panic; a flipped bit is refused by the CRCs.
    #[test]
    fn corruption_never_panics(which in 0usize..3, at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut body = sample_bodies()[which].clone();
        let i = at.index(body.len());
        body[i] ^= 1 << bit;
        prop_assert!(bedrock(&body).result.is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// The client against the mock server.

const SECRET_KEY: &str = "wJalrXUtnFEMI-secret-access-key";
const SESSION_TOKEN: &str = "FwoGZXIvYXdzE-session-token";
const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS-api-key";
const MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

fn signed(server: &MockServer) -> BedrockClient {
    BedrockClient::new("us-east-1")
        .base_url(server.url())
        .model(MODEL)
        .credentials("AKIDEXAMPLE", SECRET_KEY, Some(SESSION_TOKEN.to_owned()))
        .retry_policy(fast_retries())
}

fn keyed(server: &MockServer) -> BedrockClient {
    BedrockClient::new("us-east-1")
        .base_url(server.url())
        .model(MODEL)
        .api_key(API_KEY)
        .retry_policy(fast_retries())
}

async fn collect(
    client: &BedrockClient,
    request: &ModelRequest,
) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream(request).collect().await
}

fn text_of(items: &[Result<LlmEvent, LlmError>]) -> String {
    items
        .iter()
        .filter_map(|item| match item {
            Ok(LlmEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_answer_through_an_agent() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("Hello from Bedrock").usage_tokens(11, 4));
    let client = signed(&server);
    assert_eq!(client.provider_name(), "aws.bedrock");
    let mut agent = Agent::builder(client).system("Be brief.").build().unwrap();
    let events: Vec<AgentEvent> = agent.run("hi").collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(outcome.final_text, "Hello from Bedrock");
    assert_eq!(outcome.usage.input_tokens, 11);
    assert_eq!(outcome.usage.output_tokens, 4);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].format, Some(WireFormat::Bedrock));
    assert_eq!(requests[0].body["system"][0], json!({"text": "Be brief."}));
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn a_tool_round_trip_through_an_agent() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::new()
            .then_text("Let me add.")
            .then_tool_call("tooluse_1", "add", json!({"a": 2, "b": 3}))
            .chunked(3),
    );
    server.push(ScriptedResponse::text("It is 5."));
    let mut agent = Agent::builder(signed(&server))
        .tool(add_tool())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("what is 2 + 3?").collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(outcome.final_text, "It is 5.");
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ToolResult { content, is_error: false, .. } if content == "5")));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );
    let second = &requests[1].body;
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1]["content"][1],
        json!({"toolUse": {"toolUseId": "tooluse_1", "name": "add", "input": {"a": 2, "b": 3}}})
    );
    assert_eq!(
        messages[2]["content"][0],
        json!({"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "5"}]}})
    );
    assert_eq!(
        second["toolConfig"]["tools"][0]["toolSpec"]["name"],
        json!("add")
    );
    assert_eq!(second["toolConfig"]["toolChoice"], json!({"auto": {}}));
}

#[tokio::test]
async fn throttling_and_unavailability_before_content_are_retried() {
    let server = MockServer::start().await;
    server.push(
        MockResponse::status(429)
            .error_message("Too many requests, please wait before trying again."),
    );
    server.push(
        MockResponse::status(503).error_message("Bedrock is unable to process your request."),
    );
    server.push(
        MockResponse::stream(ScriptedResponse::text("late but fine")).error_event_at(
            StreamPoint::BeforeContent,
            "throttlingException",
            "slow down",
        ),
    );
    server.push(ScriptedResponse::text("fine"));
    let client = signed(&server);
    let items = collect(&client, &ModelRequest::new(vec![Message::user("hi")])).await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(text_of(&items), "fine");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // Each attempt is the same signed request.
    assert_eq!(
        requests[0].header("authorization"),
        requests[3].header("authorization")
    );
}

#[tokio::test]
async fn errors_are_classified_and_never_show_a_secret() {
    let server = MockServer::start().await;
    server.push(MockResponse::status(400).error_message("Input is too long for requested model."));
    server.push(
        MockResponse::status(403)
            .error_type("UnrecognizedClientException")
            .error_message("The security token included in the request is invalid."),
    );
    server.push(MockResponse::status(400).error_message("Malformed input request"));
    let client = signed(&server);
    let request = ModelRequest::new(vec![Message::user("hi")]);

    let items = collect(&client, &request).await;
    let err = items.last().unwrap().clone().unwrap_err();
    match &err {
        LlmError::ContextOverflow(api) => {
            assert_eq!(api.error_type.as_deref(), Some("ValidationException"))
        }
        other => panic!("{other:?}"),
    }
    let items = collect(&client, &request).await;
    let denied = items.last().unwrap().clone().unwrap_err();
    match &denied {
        LlmError::Api(api) => {
            assert_eq!(api.status, 403);
            assert_eq!(
                api.error_type.as_deref(),
                Some("UnrecognizedClientException")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!denied.is_retryable());
    let items = collect(&client, &request).await;
    let invalid = items.last().unwrap().clone().unwrap_err();
    assert!(!invalid.is_retryable());
    assert_eq!(server.requests().len(), 3);

    for shown in [
        format!("{err} {err:?} {denied} {denied:?} {invalid} {invalid:?}"),
        format!("{client:?}"),
        format!("{:?}", keyed(&server)),
        format!("{:?}", server.requests()),
    ] {
        for secret in [SECRET_KEY, SESSION_TOKEN, API_KEY] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
}

#[tokio::test]
async fn requests_without_credentials_or_model_fail_before_sending() {
    let server = MockServer::start().await;
    let request = ModelRequest::new(vec![Message::user("hi")]);
    let bare = BedrockClient::new("us-east-1")
        .base_url(server.url())
        .model(MODEL);
    let items = collect(&bare, &request).await;
    assert!(
        matches!(&items[..], [Err(LlmError::InvalidRequest { message })] if message.contains("credentials"))
    );
    let no_model = BedrockClient::new("us-east-1")
        .base_url(server.url())
        .api_key(API_KEY);
    let items = collect(&no_model, &request).await;
    assert!(
        matches!(&items[..], [Err(LlmError::InvalidRequest { message })] if message.contains("model"))
    );
    assert!(server.requests().is_empty());
}

/// Seconds since the epoch of an `x-amz-date` (`20261204T214512Z`).
fn amz_date(text: &str) -> SystemTime {
    let n = |r: std::ops::Range<usize>| text[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(4..6), n(6..8));
    let (hh, mm, ss) = (n(9..11), n(11..13), n(13..15));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    SystemTime::UNIX_EPOCH + Duration::from_secs((days * 86_400 + hh * 3600 + mm * 60 + ss) as u64)
}

#[tokio::test]
async fn requests_are_signed_with_sigv4_and_the_signature_verifies() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = signed(&server);
    let items = collect(&client, &ModelRequest::new(vec![Message::user("hi")])).await;
    assert_eq!(text_of(&items), "ok");
    let requests = server.requests();
    let recorded = &requests[0];
    assert_eq!(recorded.method, "POST");
    assert_eq!(
        recorded.path,
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
    );
    assert_eq!(recorded.header("content-type"), Some("application/json"));
    assert_eq!(
        recorded.header("accept"),
        Some("application/vnd.amazon.eventstream")
    );
    assert_eq!(recorded.header("x-amz-security-token"), Some(SESSION_TOKEN));
    let date = recorded.header("x-amz-date").unwrap();
    assert_eq!(date.len(), 16);
    let authorization = recorded.header("authorization").unwrap();
    let prefix = format!(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{}/us-east-1/bedrock/aws4_request, SignedHeaders=",
        &date[..8]
    );
    assert!(authorization.starts_with(&prefix), "{authorization}");
    let (signed_headers, signature) = authorization[prefix.len()..]
        .split_once(", Signature=")
        .unwrap();
    assert_eq!(
        signed_headers,
        "accept;content-type;host;x-amz-date;x-amz-security-token"
    );
    assert_eq!(signature.len(), 64);
    let host = recorded.header("host").unwrap();
    assert_eq!(format!("http://{host}"), server.url());

    // Sign the recorded request again, independently, with the AWS SDK's signer.
    let identity = aws_credential_types::Credentials::new(
        "AKIDEXAMPLE",
        SECRET_KEY,
        Some(SESSION_TOKEN.to_owned()),
        None,
        "test",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("bedrock")
        .time(amz_date(date))
        .settings(aws_sigv4::http_request::SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let body = serde_json::to_vec(&recorded.body).unwrap();
    let headers: Vec<(&str, &str)> = ["accept", "content-type"]
        .iter()
        .map(|name| (*name, recorded.header(name).unwrap()))
        .collect();
    let url = format!("{}{}", server.url(), recorded.path);
    let signable = aws_sigv4::http_request::SignableRequest::new(
        "POST",
        url.as_str(),
        headers.into_iter(),
        aws_sigv4::http_request::SignableBody::Bytes(&body),
    )
    .unwrap();
    let (_, again) = aws_sigv4::http_request::sign(signable, &params)
        .unwrap()
        .into_parts();
    assert_eq!(again, signature);
}

#[tokio::test]
async fn an_api_key_is_sent_as_a_bearer_token_without_signing() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = keyed(&server)
        .credentials("AKIDEXAMPLE", SECRET_KEY, None)
        .model("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-x");
    let items = collect(&client, &ModelRequest::new(vec![Message::user("hi")])).await;
    assert_eq!(text_of(&items), "ok");
    let recorded = &server.requests()[0];
    assert_eq!(
        recorded.header("authorization").map(str::to_owned),
        Some(format!("Bearer {API_KEY}"))
    );
    assert!(recorded.header("x-amz-date").is_none());
    assert_eq!(
        recorded.path,
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-x/converse-stream"
    );
}

// ---------------------------------------------------------------------------------------------
// The request body.

/// The body the client sends for `request` (recorded by the mock server).
async fn sent_body(request: &ModelRequest) -> Value {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let items = collect(&keyed(&server), request).await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    server.requests()[0].body.clone()
}

async fn refusal(request: &ModelRequest) -> String {
    let server = MockServer::start().await;
    let items = collect(&keyed(&server), request).await;
    assert!(server.requests().is_empty());
    match &items[..] {
        [Err(LlmError::InvalidRequest { message })] => message.clone(),
        other => panic!("{other:?}"),
    }
}

fn png() -> MediaSource {
    // A 1×1 PNG.
    MediaSource::Base64 {
        media_type: "image/png".into(),
        data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==".into(),
    }
}

fn tool(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}},
                             "required": ["path"]}),
    }
}

/// The conversation of the golden request: a system prompt, two tools, user text and an
/// image, an assistant tool call (with its signed reasoning), its result, and a follow-up.
fn golden_request() -> ModelRequest {
    let mut request = ModelRequest::new(vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is in this picture, and in notes.txt?"),
                ContentBlock::Image { source: png() },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "The image is tiny; read the file.".into(),
                    signature: "EqQBCkYIBxgCKkAsig".into(),
                },
                ContentBlock::text("A single pixel. Reading the notes."),
                ContentBlock::ToolUse {
                    id: "tooluse_read_1".into(),
                    name: "read_file".into(),
                    input: json!({"path": "notes.txt"}),
                },
                ContentBlock::ToolUse {
                    id: "tooluse_list_1".into(),
                    name: "list_dir".into(),
                    input: json!({"path": "."}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("tooluse_read_1", "Buy milk.", false),
                // A structured result: a `json` block.
                ContentBlock::tool_result_json(
                    "tooluse_list_1",
                    json!({"entries": ["notes.txt"], "count": 1}),
                ),
            ],
        },
        Message::assistant("The notes say: buy milk."),
        Message::user("Thanks. Anything else?"),
    ]);
    request.system = Some("You are a careful assistant.".into());
    request.tools = vec![
        tool("read_file", "Reads a file."),
        tool("list_dir", "Lists a directory."),
    ];
    request.max_tokens = 2048;
    request.temperature = Some(1.0);
    request.top_p = Some(0.875);
    request.stop_sequences = vec!["END".into(), "STOP".into()];
    request.thinking_budget = Some(1024);
    request
}

#[tokio::test]
async fn the_request_body_matches_the_golden_file() {
    let body = sent_body(&golden_request()).await;
    crate::common::assert_golden("bedrock_request.json", &body);
}

#[tokio::test]
async fn the_body_carries_every_setting_under_its_converse_name() {
    let body = sent_body(&golden_request()).await;
    assert_eq!(
        body["inferenceConfig"],
        json!({"maxTokens": 2048, "temperature": 1.0, "topP": 0.875, "stopSequences": ["END", "STOP"]})
    );
    assert_eq!(
        body["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})
    );
    assert_eq!(
        body["system"],
        json!([{"text": "You are a careful assistant."}, {"cachePoint": {"type": "default"}}])
    );
    let tools = body["toolConfig"]["tools"].as_array().unwrap();
    // The system prompt's cache point caches the tools before it: they get none of their own.
    assert_eq!(tools.len(), 2);
    assert_eq!(
        tools[0]["toolSpec"]["inputSchema"]["json"]["type"],
        json!("object")
    );
    let mut no_system = golden_request();
    no_system.system = None;
    let tools = sent_body(&no_system).await["toolConfig"]["tools"].clone();
    assert_eq!(tools[2], json!({"cachePoint": {"type": "default"}}));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"][1]["image"]["format"], json!("png"));
    assert_eq!(
        messages[1]["content"][0],
        json!({"reasoningContent": {"reasoningText": {"text": "The image is tiny; read the file.",
                                                       "signature": "EqQBCkYIBxgCKkAsig"}}})
    );
    // Cache points after the last block of the two latest user messages, none elsewhere.
    let points: Vec<(usize, usize)> = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| {
            m["content"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .filter(|(_, b)| b.get("cachePoint").is_some())
                .map(move |(j, _)| (i, j))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(points, [(2, 2), (4, 1)]);
}

#[tokio::test]
async fn cache_points_follow_the_prompt_cache_setting() {
    let mut request = golden_request();
    request.prompt_cache = Some(
        PromptCache::default()
            .ttl(CacheTtl::OneHour)
            .message_breakpoints(1)
            .tools(false),
    );
    let body = sent_body(&request).await;
    let text = body.to_string();
    assert_eq!(text.matches("cachePoint").count(), 2, "{text}");
    assert_eq!(
        body["system"][1],
        json!({"cachePoint": {"type": "default", "ttl": "1h"}})
    );
    request.prompt_cache = None;
    assert!(!sent_body(&request).await.to_string().contains("cachePoint"));
}

#[tokio::test]
async fn documents_go_as_bytes_with_a_name_converse_accepts() {
    let request = ModelRequest::new(vec![Message {
        role: Role::User,
        content: vec![
            ContentBlock::text("Summarize."),
            ContentBlock::Document {
                source: MediaSource::Base64 {
                    media_type: "application/pdf".into(),
                    data: "JVBERi0xLjQK".into(),
                },
                title: Some("Q3 report.pdf".into()),
            },
        ],
    }]);
    let body = sent_body(&request).await;
    assert_eq!(
        body["messages"][0]["content"][1],
        json!({"document": {"format": "pdf", "name": "Q3 report pdf",
                            "source": {"bytes": "JVBERi0xLjQK"}}})
    );
}

#[tokio::test]
async fn tool_choices_map_to_converse() {
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.tools = vec![tool("read_file", "Reads a file.")];
    for (choice, want) in [
        (ToolChoice::Auto, Some(json!({"auto": {}}))),
        (ToolChoice::Any, Some(json!({"any": {}}))),
        (
            ToolChoice::Tool("read_file".into()),
            Some(json!({"tool": {"name": "read_file"}})),
        ),
    ] {
        request.tool_choice = choice;
        let body = sent_body(&request).await;
        assert_eq!(body["toolConfig"].get("toolChoice").cloned(), want);
    }
    // Converse has no `none`: without tool blocks in the history, the tools are left out.
    request.tool_choice = ToolChoice::None;
    assert!(sent_body(&request).await.get("toolConfig").is_none());
}

#[tokio::test]
async fn extra_fields_merge_but_may_not_override_the_crates() {
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.extra.insert(
        "guardrailConfig".into(),
        json!({"guardrailIdentifier": "g1", "guardrailVersion": "1"}),
    );
    assert_eq!(
        sent_body(&request).await["guardrailConfig"]["guardrailIdentifier"],
        json!("g1")
    );
    request
        .extra
        .insert("inferenceConfig".into(), json!({"maxTokens": 1}));
    let message = refusal(&request).await;
    assert!(message.contains("inferenceConfig"), "{message}");
}

#[tokio::test]
async fn media_converse_cannot_take_is_refused_clearly() {
    let image = |source| {
        ModelRequest::new(vec![Message {
            role: Role::User,
            content: vec![ContentBlock::Image { source }],
        }])
    };
    let message = refusal(&image(MediaSource::Url {
        url: "https://example.com/a.png".into(),
    }))
    .await;
    assert!(message.contains("not URLs"), "{message}");
    let message = refusal(&image(MediaSource::Base64 {
        media_type: "image/bmp".into(),
        data: "Qk0=".into(),
    }))
    .await;
    assert!(message.contains("image/bmp"), "{message}");
    let message = refusal(&image(MediaSource::Base64 {
        media_type: "image/png".into(),
        data: "A".repeat(6_000_000),
    }))
    .await;
    assert!(message.contains("3.75 MB"), "{message}");
    let document = ModelRequest::new(vec![Message {
        role: Role::User,
        content: vec![ContentBlock::Document {
            source: MediaSource::Base64 {
                media_type: "application/zip".into(),
                data: "UEsDBA==".into(),
            },
            title: None,
        }],
    }]);
    let message = refusal(&document).await;
    assert!(message.contains("application/zip"), "{message}");
}

#[tokio::test]
async fn the_mock_refuses_what_converse_refuses() {
    let server = MockServer::start().await;
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.tools = vec![ToolSpec {
        name: "bad".into(),
        description: "A schema that is not an object.".into(),
        input_schema: json!({"type": "string"}),
    }];
    let items = collect(&keyed(&server), &request).await;
    match items.last() {
        Some(Err(LlmError::Api(api))) => {
            assert_eq!(api.status, 400);
            assert_eq!(api.error_type.as_deref(), Some("ValidationException"));
            assert!(
                api.message.contains("inputSchema.json.type"),
                "{}",
                api.message
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_whole_json_answer_and_a_failure_after_content() {
    let server = MockServer::start().await;
    server.push(MockResponse::json(
        ScriptedResponse::thinking("hmm", "sig").then_text("whole answer"),
    ));
    server.push(
        MockResponse::stream(ScriptedResponse::text("partial answer")).error_event_at(
            StreamPoint::AfterFirstContent,
            "modelStreamErrorException",
            "the model stream broke",
        ),
    );
    let client = keyed(&server);
    let request = ModelRequest::new(vec![Message::user("hi")]);
    let items = collect(&client, &request).await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(text_of(&items), "whole answer");
    assert!(items.iter().any(|i| matches!(i,
        Ok(LlmEvent::SignatureDelta { signature, .. }) if signature == "sig")));
    // After content nothing is re-sent: the stream's error is the caller's, marked retryable.
    let items = collect(&client, &request).await;
    match items.last() {
        Some(Err(err @ LlmError::Stream { error_type, .. })) => {
            assert_eq!(error_type, "modelStreamErrorException");
            assert!(err.is_retryable());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_message_over_the_event_limit_is_refused_before_it_is_buffered() {
    let mut limits = agent_loop::wire::StreamLimits::default();
    limits.max_event_bytes = 256;
    let big = text(0, &"x".repeat(1000));
    let mut decoder = WireDecoder::with_limits(WireFormat::Bedrock, limits);
    let mut events = Vec::new();
    decoder.push(&start(), &mut events).unwrap();
    // The prelude alone says the message is too large.
    let err = decoder.push(&big[..12], &mut events).unwrap_err();
    match err {
        LlmError::LimitExceeded { limit, setting, .. } => {
            assert_eq!(limit, 256);
            assert_eq!(setting, "StreamLimits::max_event_bytes");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn blank_text_is_left_out_and_an_empty_result_says_so() {
    let request = ModelRequest::new(vec![
        Message::user("run it"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("\n\n"),
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "read_file".into(),
                    input: json!({"path": "empty.txt"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("t1", "", false)],
        },
    ]);
    let mut request = request;
    request.tools = vec![tool("read_file", "Reads a file.")];
    request.prompt_cache = None;
    // The mock refuses blank text anywhere, as Converse does: this body passes it.
    let body = sent_body(&request).await;
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"toolUse": {"toolUseId": "t1", "name": "read_file", "input": {"path": "empty.txt"}}}])
    );
    assert_eq!(
        body["messages"][2]["content"][0]["toolResult"]["content"],
        json!([{"text": "(no output)"}])
    );
}

/// A tool's JSON object result goes to Converse as a `json` block; another JSON value, as
/// its text.
#[tokio::test]
async fn a_json_tool_result_goes_as_a_json_block() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::tool_call("tu-1", "stats", json!({})).then_tool_call(
            "tu-2",
            "primes",
            json!({}),
        ),
    );
    server.push(ScriptedResponse::text("done"));
    let stats =
        agent_loop::tool::FnTool::new("stats", "Statistics.", |_: Value, _ctx| async move {
            Ok::<_, agent_loop::ToolError>(agent_loop::ToolOutput::json(
                json!({"mean": 2.5, "values": [2, 3]}),
            ))
        })
        .input_schema(json!({"type": "object", "properties": {}}));
    let primes = agent_loop::tool::FnTool::new("primes", "Primes.", |_: Value, _ctx| async move {
        Ok::<_, agent_loop::ToolError>(agent_loop::ToolOutput::json(json!([2, 3, 5])))
    })
    .input_schema(json!({"type": "object", "properties": {}}));
    let mut agent = Agent::builder(keyed(&server))
        .tool(stats)
        .tool(primes)
        .build()
        .unwrap();
    let (_, outcome) = common::agent::run(&mut agent, "stats").await;
    assert_eq!(outcome.final_text, "done");
    assert!(server.history_violations().is_empty());
    let body = &server.requests()[1].body;
    let results: Vec<&Value> = body["messages"][2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b.get("cachePoint").is_none())
        .collect();
    assert_eq!(
        json!(results),
        json!([
            {"toolResult": {"toolUseId": "tu-1",
                            "content": [{"json": {"mean": 2.5, "values": [2, 3]}}]}},
            {"toolResult": {"toolUseId": "tu-2", "content": [{"text": "[2,3,5]"}]}}
        ])
    );
}
