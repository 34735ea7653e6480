//! `StreamAssembler` decisions that a broken implementation would get wrong quietly: which tool
//! calls are invalid and why, what counts against `max_response_bytes`, where exactly the limits
//! lie, and what the assembler reports before and after the message ends.

use agent_loop::wire::{InvalidToolCallReason, StreamAssembler, StreamLimits};
use agent_loop::{ContentBlock, LlmError, LlmEvent, ModelResponse, StopReason};
use serde_json::{json, Value};

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

fn text(index: usize, text: &str) -> LlmEvent {
    LlmEvent::TextDelta {
        index,
        text: text.into(),
    }
}

fn stop(index: usize) -> LlmEvent {
    LlmEvent::BlockStop { index }
}

fn message_stop(stop_reason: StopReason) -> LlmEvent {
    LlmEvent::MessageStop { stop_reason }
}

fn assemble_with(limits: StreamLimits, events: &[LlmEvent]) -> Result<ModelResponse, LlmError> {
    let mut assembler = StreamAssembler::with_limits(limits);
    for event in events {
        assembler.push(event)?;
    }
    assembler.finish()
}

fn assemble(events: &[LlmEvent]) -> ModelResponse {
    assemble_with(StreamLimits::default(), events).expect("a valid response")
}

/// One tool call at block 0 with these arguments, closed, then the message stops.
fn one_call(raw: &str, stop_reason: StopReason) -> ModelResponse {
    assemble(&[
        call_start(0, "call_1", "edit"),
        args(0, raw),
        stop(0),
        message_stop(stop_reason),
    ])
}

fn reason(response: &ModelResponse) -> &InvalidToolCallReason {
    assert_eq!(response.invalid_tool_calls.len(), 1, "{response:?}");
    &response.invalid_tool_calls[0].reason
}

fn response_limit(max_response_bytes: usize) -> StreamLimits {
    let mut limits = StreamLimits::default();
    limits.max_response_bytes = max_response_bytes;
    limits
}

/// The smallest `max_response_bytes` under which `events` assemble, found by bisection
/// (the limit is monotonic: a response that fits under a limit fits under any larger one).
fn smallest_response_limit(events: &[LlmEvent]) -> usize {
    let fits = |limit: usize| assemble_with(response_limit(limit), events).is_ok();
    let (mut refused, mut fits_at) = (0, 1 << 20);
    assert!(fits(fits_at), "does not fit in 1 MiB");
    assert!(!fits(refused), "fits in 0 bytes");
    while fits_at - refused > 1 {
        let mid = refused + (fits_at - refused) / 2;
        if fits(mid) {
            fits_at = mid;
        } else {
            refused = mid;
        }
    }
    // Just below the smallest limit the error names the response limit.
    assert_eq!(
        assemble_with(response_limit(refused), events).unwrap_err(),
        LlmError::LimitExceeded {
            what: "the response".into(),
            limit: refused,
            setting: "StreamLimits::max_response_bytes".into(),
        }
    );
    fits_at
}

// ---------------------------------------------------------------------------------------------
// valid and invalid tool calls

#[test]
fn a_complete_tool_call_in_a_max_tokens_response_is_valid() {
    // The model closed the call and was then cut off (in its text, say): the call is whole.
    let r = one_call("{\"path\":\"a.rs\"}", StopReason::MaxTokens);
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert!(r.invalid_tool_calls.is_empty(), "{r:?}");
    assert!(!r.is_invalid_tool_call("call_1"));
    assert_eq!(
        r.message.content,
        [ContentBlock::ToolUse {
            id: "call_1".into(),
            name: "edit".into(),
            input: json!({"path": "a.rs"}),
        }]
    );
}

#[test]
fn cut_off_arguments_are_malformed_unless_the_response_hit_max_tokens() {
    // Under tool_use the model said it was done, so JSON ending mid-value is a malformed call.
    let r = one_call("{\"path\":\"a.", StopReason::ToolUse);
    assert!(r.is_invalid_tool_call("call_1"));
    match reason(&r) {
        InvalidToolCallReason::Malformed(m) => assert!(m.contains("EOF"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Under max_tokens the same text was cut off.
    let r = one_call("{\"path\":\"a.", StopReason::MaxTokens);
    assert_eq!(reason(&r), &InvalidToolCallReason::Incomplete);
    assert_eq!(r.invalid_tool_calls[0].raw_arguments, "{\"path\":\"a.");
}

#[test]
fn a_syntax_error_is_malformed_even_in_a_max_tokens_response() {
    // Not a prefix of any JSON value: no amount of further tokens would have fixed it.
    for raw in ["{\"path\" \"a\"}", "{\"a\":1}}", "[1]"] {
        let r = one_call(raw, StopReason::MaxTokens);
        assert!(
            matches!(reason(&r), InvalidToolCallReason::Malformed(_)),
            "{raw}: {r:?}"
        );
    }
}

#[test]
fn invalid_calls_are_flagged_by_id_and_others_are_not() {
    let r = assemble(&[
        call_start(0, "good", "read"),
        call_start(1, "bad", "read"),
        args(0, "{\"path\":\"x\"}"),
        args(1, "[\"x\"]"),
        stop(0),
        stop(1),
        message_stop(StopReason::ToolUse),
    ]);
    assert!(r.is_invalid_tool_call("bad"));
    assert!(!r.is_invalid_tool_call("good"));
    assert!(!r.is_invalid_tool_call("missing"));
    assert_eq!(r.invalid_tool_calls[0].id, "bad");
    assert_eq!(r.invalid_tool_calls[0].name, "read");
    // The invalid call stays in the message, with an empty object as input.
    let inputs: Vec<&Value> = r.message.tool_uses().map(|(_, _, input)| input).collect();
    assert_eq!(inputs, [&json!({"path": "x"}), &json!({})]);
}

#[test]
fn the_reason_tells_the_model_what_is_wrong() {
    let r = one_call("[1, 2]", StopReason::ToolUse);
    assert_eq!(
        reason(&r),
        &InvalidToolCallReason::Malformed("expected a JSON object, got an array".into())
    );
    assert_eq!(
        reason(&r).to_string(),
        "the arguments are not a valid JSON object (expected a JSON object, got an array)"
    );
    for (raw, kind) in [
        ("null", "null"),
        ("true", "a boolean"),
        ("12", "a number"),
        ("\"s\"", "a string"),
    ] {
        let r = one_call(raw, StopReason::ToolUse);
        assert_eq!(
            reason(&r),
            &InvalidToolCallReason::Malformed(format!("expected a JSON object, got {kind}")),
            "{raw}"
        );
    }
    assert_eq!(
        InvalidToolCallReason::Incomplete.to_string(),
        "the arguments were cut off before they were complete"
    );
}

#[test]
fn a_call_is_available_early_only_once_closed_with_valid_arguments() {
    let mut assembler = StreamAssembler::new();
    for event in [
        text(0, "Let me look."),
        call_start(1, "c1", "read"),
        args(1, "{\"path\":"),
    ] {
        assembler.push(&event).unwrap();
    }
    assert_eq!(assembler.completed_tool_call(1), None, "still open");
    assert_eq!(assembler.completed_tool_call(0), None, "a text block");
    assert_eq!(assembler.completed_tool_call(7), None, "no such block");
    assembler.push(&args(1, "\"a.rs\"}")).unwrap();
    assembler.push(&stop(1)).unwrap();
    assert_eq!(
        assembler.completed_tool_call(1),
        Some(("c1", "read", &json!({"path": "a.rs"})))
    );
    for event in [call_start(2, "c2", "read"), args(2, "[]"), stop(2)] {
        assembler.push(&event).unwrap();
    }
    assert_eq!(assembler.completed_tool_call(2), None, "invalid arguments");
}

#[test]
fn complete_only_after_the_message_stop() {
    let mut assembler = StreamAssembler::new();
    assert!(!assembler.is_complete());
    assembler.push(&text(0, "Hi")).unwrap();
    assembler.push(&stop(0)).unwrap();
    assert!(!assembler.is_complete(), "a block stop is not the end");
    assembler.push(&message_stop(StopReason::EndTurn)).unwrap();
    assert!(assembler.is_complete());
    assert_eq!(assembler.finish().unwrap().text(), "Hi");
}

#[test]
fn a_delta_of_another_kind_than_its_block_names_both() {
    for (first, second, what) in [
        (
            call_start(0, "c", "f"),
            text(0, "x"),
            "text delta for block 0",
        ),
        (
            text(0, "x"),
            args(0, "{}"),
            "tool-argument delta for block 0",
        ),
        (
            call_start(0, "c", "f"),
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "hm".into(),
            },
            "thinking delta for block 0",
        ),
        (
            text(0, "x"),
            LlmEvent::SignatureDelta {
                index: 0,
                signature: "sig".into(),
            },
            "signature delta for block 0",
        ),
    ] {
        let mut assembler = StreamAssembler::new();
        assembler.push(&first).unwrap();
        match assembler.push(&second) {
            Err(LlmError::Malformed { message }) => {
                assert!(message.contains(what), "{message}");
                assert!(message.contains("another kind"), "{message}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// limits

#[test]
fn tool_arguments_may_reach_their_limit_exactly() {
    let mut limits = StreamLimits::default();
    limits.max_tool_args_bytes = 12;
    // Two fragments of 6 bytes: 12 in all.
    let events = |last: &str| {
        vec![
            call_start(0, "c", "f"),
            args(0, "{\"a\":1"),
            args(0, last),
            stop(0),
            message_stop(StopReason::ToolUse),
        ]
    };
    let r = assemble_with(limits, &events("     }")).unwrap();
    assert_eq!(
        r.message.tool_uses().next().map(|(_, _, input)| input),
        Some(&json!({"a": 1}))
    );
    assert_eq!(
        assemble_with(limits, &events(",\"bb\":}")).unwrap_err(),
        LlmError::LimitExceeded {
            what: "the arguments of one tool call".into(),
            limit: 12,
            setting: "StreamLimits::max_tool_args_bytes".into(),
        }
    );
}

#[test]
fn every_byte_of_text_counts_against_the_response_limit() {
    let base = smallest_response_limit(&[text(0, "abc"), message_stop(StopReason::EndTurn)]);
    let more = smallest_response_limit(&[text(0, "abcdefgh"), message_stop(StopReason::EndTurn)]);
    assert_eq!(more - base, 5);
    // A second block costs its text and its bookkeeping.
    let two = smallest_response_limit(&[
        text(0, "abc"),
        text(1, "abc"),
        message_stop(StopReason::EndTurn),
    ]);
    assert_eq!(two, 2 * base);
}

#[test]
fn tool_call_ids_and_names_count_against_the_response_limit() {
    let call = |id: &str, name: &str| {
        vec![
            call_start(0, id, name),
            stop(0),
            message_stop(StopReason::ToolUse),
        ]
    };
    let base = smallest_response_limit(&call("i", "n"));
    assert_eq!(smallest_response_limit(&call("i2345", "n")), base + 4);
    assert_eq!(smallest_response_limit(&call("i", "n234567")), base + 6);
    assert_eq!(
        smallest_response_limit(&call("i2345", "n234567")),
        base + 10
    );
    // Arguments count too.
    let with_args = smallest_response_limit(&[
        call_start(0, "i", "n"),
        args(0, "{\"k\":1}"),
        stop(0),
        message_stop(StopReason::ToolUse),
    ]);
    assert_eq!(with_args, base + 7);
}

#[test]
fn unmodelled_blocks_count_against_the_response_limit() {
    let block = |payload: &str| {
        vec![
            LlmEvent::OtherBlock {
                index: 0,
                block: json!({"type": "web_search_tool_result", "content": payload}),
            },
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    };
    let base = smallest_response_limit(&block(""));
    assert_eq!(smallest_response_limit(&block("0123456789")), base + 10);
}

#[test]
fn every_byte_of_a_reasoning_item_counts_against_the_response_limit() {
    // The id, each summary part and the encrypted content all count, one for one.
    let item = |id: &str, summary: &[&str], encrypted: Option<&str>| {
        vec![
            LlmEvent::Reasoning {
                index: 0,
                id: id.into(),
                summary: summary.iter().map(|s| s.to_string()).collect(),
                encrypted_content: encrypted.map(str::to_owned),
            },
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    };
    let base = smallest_response_limit(&item("r", &[], None));
    assert_eq!(smallest_response_limit(&item("r2345", &[], None)), base + 4);
    assert_eq!(
        smallest_response_limit(&item("r", &["abc", "de"], None)),
        base + 5
    );
    assert_eq!(
        smallest_response_limit(&item("r", &[], Some("0123456"))),
        base + 7
    );
    assert_eq!(
        smallest_response_limit(&item("r2345", &["abc", "de"], Some("0123456"))),
        base + 16
    );
}

#[test]
fn every_byte_of_a_compaction_item_counts_against_the_response_limit() {
    // The id and the encrypted content both count, one for one (added, not multiplied).
    let item = |id: Option<&str>, encrypted: &str| {
        vec![
            LlmEvent::Compaction {
                index: 0,
                id: id.map(str::to_owned),
                encrypted_content: encrypted.into(),
            },
            stop(0),
            message_stop(StopReason::EndTurn),
        ]
    };
    let base = smallest_response_limit(&item(None, "e"));
    assert_eq!(smallest_response_limit(&item(None, "e234567")), base + 6);
    assert_eq!(smallest_response_limit(&item(Some("cmp"), "e")), base + 3);
    assert_eq!(
        smallest_response_limit(&item(Some("cmp45"), "e234567")),
        base + 11
    );
}
