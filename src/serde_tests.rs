//! The serialized forms of [`LlmEvent`], [`LlmError`] and [`ToolCallResult`]: every variant
//! survives a JSON round trip unchanged, the JSON is the form the rustdoc promises, and input
//! that is not that form is an error, never a panic.
//!
//! A durable driver (agent-loop-restate) journals these values and feeds them back to the
//! machine on replay, so "unchanged" is what keeps a replay making the decisions of the
//! first run.

use std::borrow::Cow;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use crate::error::{ApiError, LlmError, Quota, RateLimits, TimeoutKind};
use crate::message::{MediaSource, StopReason, Usage};
use crate::tool::ToolCallResult;
use crate::wire::LlmEvent;

/// The position of `event`'s variant in [`EVENT_VARIANTS`]. The match has no wildcard: a new
/// variant does not compile until it is given a number here and a sample in [`events`].
fn event_variant(event: &LlmEvent) -> usize {
    match event {
        LlmEvent::MessageStart { .. } => 0,
        LlmEvent::TextDelta { .. } => 1,
        LlmEvent::ThinkingDelta { .. } => 2,
        LlmEvent::SignatureDelta { .. } => 3,
        LlmEvent::RedactedThinking { .. } => 4,
        LlmEvent::Reasoning { .. } => 5,
        LlmEvent::ToolCallStart { .. } => 6,
        LlmEvent::ToolCallDelta { .. } => 7,
        LlmEvent::OtherBlock { .. } => 8,
        LlmEvent::BlockStop { .. } => 9,
        LlmEvent::Usage(_) => 10,
        LlmEvent::StopSequence { .. } => 11,
        LlmEvent::MessageStop { .. } => 12,
        LlmEvent::RateLimits(_) => 13,
        LlmEvent::ContextEdited { .. } => 14,
        LlmEvent::Compaction { .. } => 15,
    }
}
const EVENT_VARIANTS: usize = 16;

/// Like [`event_variant`], for [`LlmError`].
fn error_variant(error: &LlmError) -> usize {
    match error {
        LlmError::Connect { .. } => 0,
        LlmError::Timeout { .. } => 1,
        LlmError::Api(_) => 2,
        LlmError::ContextOverflow(_) => 3,
        LlmError::Stream { .. } => 4,
        LlmError::Incomplete { .. } => 5,
        LlmError::Transport { .. } => 6,
        LlmError::Malformed { .. } => 7,
        LlmError::LimitExceeded { .. } => 8,
        LlmError::InvalidRequest { .. } => 9,
        LlmError::Redirected { .. } => 10,
        LlmError::UnexpectedContentType { .. } => 11,
        LlmError::ModelFailure { .. } => 12,
    }
}
const ERROR_VARIANTS: usize = 13;

fn full_api_error() -> ApiError {
    let mut api = ApiError::new(529, "Overloaded");
    api.error_type = Some("overloaded_error".into());
    api.code = Some("overloaded".into());
    api.request_id = Some("req_1".into());
    api.retry_after = Some(Duration::new(1, 500_000_000));
    api.should_retry = Some(true);
    api.rate_limits = Some(full_rate_limits());
    api
}

fn full_rate_limits() -> RateLimits {
    let quota = |n: u64| Quota {
        limit: Some(n),
        remaining: Some(n - 1),
        reset: Some(Duration::from_millis(n)),
    };
    RateLimits {
        requests: quota(50),
        tokens: quota(90_000),
        input_tokens: quota(40_000),
        output_tokens: quota(8_000),
        retry_after: Some(Duration::from_secs(3)),
    }
}

/// At least one value of every [`LlmError`] variant, with every optional part both present and
/// absent somewhere.
fn errors() -> Vec<LlmError> {
    vec![
        LlmError::Connect {
            message: "connection refused".into(),
        },
        LlmError::Timeout {
            kind: TimeoutKind::Connect,
            after: Duration::from_secs(10),
        },
        LlmError::Timeout {
            kind: TimeoutKind::FirstByte,
            after: Duration::from_nanos(1),
        },
        LlmError::Timeout {
            kind: TimeoutKind::Idle,
            after: Duration::new(30, 123_456_789),
        },
        LlmError::Timeout {
            kind: TimeoutKind::Total,
            after: Duration::MAX,
        },
        LlmError::Api(Box::new(full_api_error())),
        LlmError::Api(Box::new(ApiError::new(401, "invalid x-api-key"))),
        LlmError::ContextOverflow(Box::new(ApiError::new(400, "prompt is too long"))),
        LlmError::Stream {
            error_type: "overloaded_error".into(),
            message: "Overloaded".into(),
        },
        LlmError::Incomplete {
            detail: "no message_stop".into(),
        },
        LlmError::Transport {
            message: "connection reset".into(),
        },
        LlmError::Malformed {
            message: "invalid JSON in event 3".into(),
        },
        LlmError::LimitExceeded {
            what: "an SSE line".into(),
            limit: 1024,
            setting: "StreamLimits::max_line_bytes".into(),
        },
        LlmError::LimitExceeded {
            what: Cow::Owned("a name a host chose".into()),
            limit: usize::MAX,
            setting: Cow::Owned("Host::limit".into()),
        },
        LlmError::InvalidRequest {
            message: "the first message is not a user message".into(),
        },
        LlmError::Redirected {
            location: "https://elsewhere.example/v1/messages".into(),
        },
        LlmError::UnexpectedContentType {
            content_type: "text/html".into(),
            body_start: "<!doctype html>\u{1F642}\"".into(),
        },
        LlmError::ModelFailure {
            reason: "MALFORMED_FUNCTION_CALL".into(),
            message: "the model wrote a malformed function call".into(),
        },
    ]
}

/// At least one value of every [`LlmEvent`] variant.
fn events() -> Vec<LlmEvent> {
    vec![
        LlmEvent::MessageStart {
            id: "msg_1".into(),
            model: "claude-sonnet-4-5".into(),
        },
        LlmEvent::TextDelta {
            index: 0,
            text: "Hello, \u{e9}\u{1F642}\n\"quoted\"".into(),
        },
        LlmEvent::ThinkingDelta {
            index: 0,
            thinking: "Let me think.".into(),
        },
        LlmEvent::SignatureDelta {
            index: 0,
            signature: "EqQBCgIYAhIM".into(),
        },
        LlmEvent::RedactedThinking {
            index: 1,
            data: "EmwKAhgBEgy3".into(),
        },
        LlmEvent::Reasoning {
            index: 2,
            id: "rs_1".into(),
            summary: vec!["plan".into(), "act".into()],
            encrypted_content: Some("gAAAA".into()),
        },
        LlmEvent::Reasoning {
            index: 2,
            id: "rs_2".into(),
            summary: Vec::new(),
            encrypted_content: None,
        },
        LlmEvent::ToolCallStart {
            index: 3,
            id: "toolu_1".into(),
            name: "get_weather".into(),
        },
        LlmEvent::ToolCallDelta {
            index: 3,
            partial_json: "{\"city\": \"Par".into(),
        },
        LlmEvent::OtherBlock {
            index: 4,
            block: json!({"type": "server_tool_use", "id": "srvtoolu_1", "input": {"q": [1, true, null]}}),
        },
        LlmEvent::BlockStop { index: usize::MAX },
        LlmEvent::Usage(Usage::default()),
        LlmEvent::Usage(Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_input_tokens: 3,
            cache_creation_input_tokens: 4,
            reasoning_tokens: 5,
        }),
        LlmEvent::StopSequence {
            sequence: "\n\nHuman:".into(),
        },
        LlmEvent::MessageStop {
            stop_reason: StopReason::ToolUse,
        },
        LlmEvent::MessageStop {
            stop_reason: StopReason::Other("a_new_reason".into()),
        },
        LlmEvent::RateLimits(Box::new(full_rate_limits())),
        LlmEvent::Compaction {
            index: 0,
            id: Some("cmp_1".into()),
            encrypted_content: "gAAAA".into(),
        },
        LlmEvent::Compaction {
            index: 2,
            id: None,
            encrypted_content: String::new(),
        },
        LlmEvent::ContextEdited {
            edits: vec![crate::provider::context_editing::AppliedEdit::new(
                "clear_tool_uses_20250919",
            )
            .cleared_tool_uses(2)
            .cleared_input_tokens(1200)],
        },
        LlmEvent::RateLimits(Box::new(RateLimits {
            requests: Quota {
                remaining: Some(0),
                ..Quota::default()
            },
            ..RateLimits::default()
        })),
    ]
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("serializes")
}

fn round_trip<T>(value: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let json = serde_json::to_string(value).expect("serializes");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json} reads back: {e}"))
}

#[test]
fn every_event_variant_has_a_sample_and_round_trips() {
    let samples = events();
    let mut seen = [false; EVENT_VARIANTS];
    for event in &samples {
        seen[event_variant(event)] = true;
        assert_eq!(&round_trip(event), event);
    }
    assert!(
        seen.iter().all(|s| *s),
        "a variant without a sample: {seen:?}"
    );
    // A recorded response, as one value.
    assert_eq!(round_trip(&samples), samples);
}

#[test]
fn every_error_variant_has_a_sample_and_round_trips_with_its_retryability() {
    let mut seen = [false; ERROR_VARIANTS];
    for error in errors() {
        seen[error_variant(&error)] = true;
        let back = round_trip(&error);
        assert_eq!(back, error);
        assert_eq!(back.is_retryable(), error.is_retryable(), "{error}");
        assert_eq!(back.retry_after(), error.retry_after(), "{error}");
        assert_eq!(back.to_string(), error.to_string());
    }
    assert!(
        seen.iter().all(|s| *s),
        "a variant without a sample: {seen:?}"
    );
}

#[test]
fn tool_call_results_round_trip() {
    for result in [
        ToolCallResult::new("call_1", "add", "3", false, Duration::ZERO),
        ToolCallResult::new("call_2", "fail", "boom", true, Duration::new(2, 5)).with_images(vec![
            MediaSource::Base64 {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            },
            MediaSource::Url {
                url: "https://example.com/a.png".into(),
            },
        ]),
    ] {
        assert_eq!(round_trip(&result), result);
    }
}

/// The forms the rustdoc documents, byte for byte where the order of fields is fixed.
#[test]
fn the_json_is_the_documented_form() {
    assert_eq!(
        json(&LlmEvent::MessageStart {
            id: "msg_1".into(),
            model: "m".into()
        }),
        r#"{"type":"message_start","id":"msg_1","model":"m"}"#
    );
    assert_eq!(
        json(&LlmEvent::ToolCallDelta {
            index: 1,
            partial_json: "{\"a\":".into()
        }),
        r#"{"type":"tool_call_delta","index":1,"partial_json":"{\"a\":"}"#
    );
    assert_eq!(
        json(&LlmEvent::Usage(Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        })),
        r#"{"type":"usage","input_tokens":10,"output_tokens":2,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}"#
    );
    assert_eq!(
        json(&LlmEvent::Reasoning {
            index: 0,
            id: "rs_1".into(),
            summary: vec![],
            encrypted_content: None
        }),
        r#"{"type":"reasoning","index":0,"id":"rs_1","summary":[]}"#
    );
    assert_eq!(
        json(&LlmEvent::MessageStop {
            stop_reason: StopReason::MaxTokens
        }),
        r#"{"type":"message_stop","stop_reason":"max_tokens"}"#
    );
    assert_eq!(
        json(&LlmEvent::RateLimits(Box::new(RateLimits {
            requests: Quota {
                limit: Some(50),
                remaining: Some(49),
                reset: Some(Duration::from_millis(1500)),
            },
            ..RateLimits::default()
        }))),
        concat!(
            r#"{"type":"rate_limits","requests":{"limit":50,"remaining":49,"#,
            r#""reset":{"secs":1,"nanos":500000000}}}"#
        )
    );
    assert_eq!(
        json(&LlmError::ContextOverflow(Box::new(ApiError::new(
            400,
            "prompt is too long"
        )))),
        r#"{"type":"context_overflow","status":400,"message":"prompt is too long"}"#
    );
    assert_eq!(
        json(&LlmError::Timeout {
            kind: TimeoutKind::FirstByte,
            after: Duration::from_secs(60)
        }),
        r#"{"type":"timeout","kind":"first_byte","after":{"secs":60,"nanos":0}}"#
    );
    assert_eq!(
        json(&LlmError::Stream {
            error_type: "overloaded_error".into(),
            message: "Overloaded".into()
        }),
        r#"{"type":"stream","error_type":"overloaded_error","message":"Overloaded"}"#
    );
    assert_eq!(
        json(
            &ToolCallResult::new("c", "t", "ok", true, Duration::from_nanos(7)).with_images(vec![
                MediaSource::Url {
                    url: "https://example.com/a.png".into()
                }
            ])
        ),
        concat!(
            r#"{"id":"c","name":"t","content":"ok","is_error":true,"#,
            r#""duration":{"secs":0,"nanos":7},"#,
            r#""images":[{"type":"url","url":"https://example.com/a.png"}]}"#
        )
    );
}

/// What another writer may leave out reads as empty, in any field order.
#[test]
fn optional_fields_may_be_missing() {
    let error: LlmError =
        serde_json::from_str(r#"{"message":"slow down","status":429,"type":"api"}"#).unwrap();
    assert_eq!(
        error,
        LlmError::Api(Box::new(ApiError::new(429, "slow down")))
    );
    assert!(error.is_retryable());
    let result: ToolCallResult = serde_json::from_str(
        r#"{"duration":{"secs":1,"nanos":0},"is_error":false,"content":"","name":"t","id":"c"}"#,
    )
    .unwrap();
    assert_eq!(
        result,
        ToolCallResult::new("c", "t", "", false, Duration::from_secs(1))
    );
}

/// Input that is not the documented form is a serde error naming what is wrong; none panics.
#[test]
fn malformed_input_is_an_error() {
    for (json, says) in [
        (r#"{"type":"text_delta","index":0}"#, "text"),
        (r#"{"index":0,"text":"a"}"#, "type"),
        (r#"{"type":"no_such_event"}"#, "no_such_event"),
        (r#"{"type":"block_stop","index":-1}"#, "-1"),
        // `Retry` left the data enum (the agent owns retries): an old journal's is refused.
        (
            r#"{"type":"retry","attempt":1,"delay":{"secs":1,"nanos":0},"error":{"type":"connect","message":""}}"#,
            "retry",
        ),
        ("[]", ""),
        ("null", ""),
    ] {
        let error = serde_json::from_str::<LlmEvent>(json).expect_err(json);
        assert!(error.to_string().contains(says), "{json}: {error}");
    }
    for (json, says) in [
        (
            r#"{"type":"timeout","kind":"idle","after":{"secs":18446744073709551615,"nanos":1000000000}}"#,
            "overflow",
        ),
        (
            r#"{"type":"timeout","kind":"forever","after":{"secs":1,"nanos":0}}"#,
            "forever",
        ),
    ] {
        let error = serde_json::from_str::<LlmError>(json).expect_err(json);
        assert!(error.to_string().contains(says), "{json}: {error}");
    }
    for json in [
        r#"{"type":"limit_exceeded","what":"x","limit":1}"#,
        r#"{"type":"api","status":70000,"message":""}"#,
        r#"{"type":"timeout","kind":"idle","after":30}"#,
    ] {
        assert!(serde_json::from_str::<LlmError>(json).is_err(), "{json}");
    }
    assert!(serde_json::from_str::<ToolCallResult>(
        r#"{"id":"c","name":"t","content":"","is_error":false,"duration_ms":5}"#
    )
    .is_err());
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,12}", "[\\x00-\\x7f]{0,6}", Just(String::new())]
}

fn duration() -> impl Strategy<Value = Duration> {
    (any::<u64>(), 0u32..1_000_000_000).prop_map(|(secs, nanos)| Duration::new(secs, nanos))
}

fn api_error() -> impl Strategy<Value = ApiError> {
    (
        any::<u16>(),
        text(),
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::option::of(duration()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(rate_limits()),
    )
        .prop_map(
            |(status, message, error_type, code, request_id, retry_after, should_retry, limits)| {
                let mut api = ApiError::new(status, message);
                api.rate_limits = limits;
                api.error_type = error_type;
                api.code = code;
                api.request_id = request_id;
                api.retry_after = retry_after;
                api.should_retry = should_retry;
                api
            },
        )
}

fn llm_error() -> impl Strategy<Value = LlmError> {
    let kind = prop_oneof![
        Just(TimeoutKind::Connect),
        Just(TimeoutKind::FirstByte),
        Just(TimeoutKind::Idle),
        Just(TimeoutKind::Total),
    ];
    prop_oneof![
        text().prop_map(|message| LlmError::Connect { message }),
        (kind, duration()).prop_map(|(kind, after)| LlmError::Timeout { kind, after }),
        api_error().prop_map(|api| LlmError::Api(Box::new(api))),
        api_error().prop_map(|api| LlmError::ContextOverflow(Box::new(api))),
        (text(), text()).prop_map(|(error_type, message)| LlmError::Stream {
            error_type,
            message
        }),
        text().prop_map(|detail| LlmError::Incomplete { detail }),
        text().prop_map(|message| LlmError::Transport { message }),
        text().prop_map(|message| LlmError::Malformed { message }),
        (text(), any::<usize>(), text()).prop_map(|(what, limit, setting)| {
            LlmError::LimitExceeded {
                what: what.into(),
                limit,
                setting: setting.into(),
            }
        }),
        text().prop_map(|message| LlmError::InvalidRequest { message }),
        text().prop_map(|location| LlmError::Redirected { location }),
        (text(), text()).prop_map(|(content_type, body_start)| {
            LlmError::UnexpectedContentType {
                content_type,
                body_start,
            }
        }),
        (text(), text()).prop_map(|(reason, message)| LlmError::ModelFailure { reason, message }),
    ]
}

/// JSON without floats (serde_json reads a float back to the nearest value it parses, which
/// is not always the one written, without its `float_roundtrip` feature).
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(text(), inner, 0..4)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        Just(StopReason::EndTurn),
        Just(StopReason::ToolUse),
        Just(StopReason::MaxTokens),
        Just(StopReason::StopSequence),
        Just(StopReason::Refusal),
        Just(StopReason::PauseTurn),
        Just(StopReason::ContentFilter),
        Just(StopReason::ModelContextWindowExceeded),
        // A known name in `Other` reads back as the known variant; providers' own names are
        // mapped by `StopReason::from_wire`, which never does that.
        "x_[a-z_]{0,8}".prop_map(StopReason::Other),
    ]
}

fn quota() -> impl Strategy<Value = Quota> {
    (
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of(duration()),
    )
        .prop_map(|(limit, remaining, reset)| Quota {
            limit,
            remaining,
            reset,
        })
}

fn rate_limits() -> impl Strategy<Value = RateLimits> {
    (
        quota(),
        quota(),
        quota(),
        quota(),
        proptest::option::of(duration()),
    )
        .prop_map(
            |(requests, tokens, input_tokens, output_tokens, retry_after)| RateLimits {
                requests,
                tokens,
                input_tokens,
                output_tokens,
                retry_after,
            },
        )
}

fn llm_event() -> impl Strategy<Value = LlmEvent> {
    let index = any::<usize>();
    prop_oneof![
        (text(), text()).prop_map(|(id, model)| LlmEvent::MessageStart { id, model }),
        (index, text()).prop_map(|(index, text)| LlmEvent::TextDelta { index, text }),
        (index, text()).prop_map(|(index, thinking)| LlmEvent::ThinkingDelta { index, thinking }),
        (index, text())
            .prop_map(|(index, signature)| LlmEvent::SignatureDelta { index, signature }),
        (index, text()).prop_map(|(index, data)| LlmEvent::RedactedThinking { index, data }),
        (
            index,
            text(),
            proptest::collection::vec(text(), 0..3),
            proptest::option::of(text())
        )
            .prop_map(
                |(index, id, summary, encrypted_content)| LlmEvent::Reasoning {
                    index,
                    id,
                    summary,
                    encrypted_content
                }
            ),
        (index, text(), text()).prop_map(|(index, id, name)| LlmEvent::ToolCallStart {
            index,
            id,
            name
        }),
        (index, text()).prop_map(|(index, partial_json)| LlmEvent::ToolCallDelta {
            index,
            partial_json
        }),
        (index, json_value()).prop_map(|(index, block)| LlmEvent::OtherBlock { index, block }),
        index.prop_map(|index| LlmEvent::BlockStop { index }),
        any::<[u64; 5]>().prop_map(|[a, b, c, d, e]| LlmEvent::Usage(Usage {
            input_tokens: a,
            output_tokens: b,
            cache_read_input_tokens: c,
            cache_creation_input_tokens: d,
            reasoning_tokens: e,
        })),
        text().prop_map(|sequence| LlmEvent::StopSequence { sequence }),
        stop_reason().prop_map(|stop_reason| LlmEvent::MessageStop { stop_reason }),
        rate_limits().prop_map(|r| LlmEvent::RateLimits(Box::new(r))),
        (any::<usize>(), proptest::option::of(text()), text()).prop_map(
            |(index, id, encrypted_content)| LlmEvent::Compaction {
                index,
                id,
                encrypted_content,
            }
        ),
        (text(), any::<u32>(), any::<u32>(), any::<u64>()).prop_map(
            |(kind, tools, turns, tokens)| {
                LlmEvent::ContextEdited {
                    edits: vec![crate::provider::context_editing::AppliedEdit::new(kind)
                        .cleared_tool_uses(tools)
                        .cleared_thinking_turns(turns)
                        .cleared_input_tokens(tokens)],
                }
            }
        ),
    ]
}

proptest! {
    #[test]
    fn any_event_round_trips(event in llm_event()) {
        prop_assert_eq!(round_trip(&event), event);
    }

    #[test]
    fn any_error_round_trips(error in llm_error()) {
        let back = round_trip(&error);
        prop_assert_eq!(back.is_retryable(), error.is_retryable());
        prop_assert_eq!(back, error);
    }

    #[test]
    fn any_tool_call_result_round_trips(
        (id, name, content) in (text(), text(), text()),
        is_error in any::<bool>(),
        duration in duration(),
        urls in proptest::collection::vec(text(), 0..3),
    ) {
        let result = ToolCallResult::new(id, name, content, is_error, duration)
            .with_images(urls.into_iter().map(|url| MediaSource::Url { url }).collect());
        prop_assert_eq!(round_trip(&result), result);
    }

    /// A serialized event cut short or with one byte changed reads as an error or as some
    /// value, never a panic.
    #[test]
    fn corrupted_input_never_panics(
        event in llm_event(),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let bytes = json(&event).into_bytes();
        let _ = serde_json::from_slice::<LlmEvent>(&bytes[..cut.index(bytes.len() + 1)]);
        let mut changed = bytes.clone();
        changed[at.index(bytes.len())] = byte;
        let _ = serde_json::from_slice::<LlmEvent>(&changed);
    }
}
