//! The cases of the conformance suite, each a function of the format's [`Format`] table;
//! `mod.rs` instantiates them per format.

use std::time::Duration;

use agent_loop::media::MediaSource;
use agent_loop::provider::transport::{Jitter, PacingLimits, RetryPolicy};
use agent_loop::provider::{ModelRequest, ToolChoice};
use agent_loop::testing::{
    MockResponse, MockServer, ScriptedClient, ScriptedResponse, StreamPoint,
};
use agent_loop::tool::ToolSpec;
use agent_loop::wire::{StreamAssembler, StreamLimits, WireDecoder};
use agent_loop::{
    ContentBlock, LlmClient, LlmError, LlmEvent, Message, ModelResponse, Role, StopReason, Usage,
};
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

use super::{Format, Thinking};

// ---------------------------------------------------------------------------------------------
// Clients and streams
// ---------------------------------------------------------------------------------------------

/// Three retries, 1 ms apart, no jitter: what is retried, not how long it waits.
fn retries() -> RetryPolicy {
    RetryPolicy::default()
        .max_retries(3)
        .initial_backoff(Duration::from_millis(1))
        .jitter(Jitter::None)
}

fn client(f: &Format, server: &MockServer) -> Box<dyn LlmClient> {
    (f.client)(server, retries(), StreamLimits::default())
}

fn hello() -> ModelRequest {
    ModelRequest::new(vec![Message::user("hello")])
}

async fn collect(
    client: &dyn LlmClient,
    request: &ModelRequest,
) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream(request).collect().await
}

/// Assembles a client's stream items: the response, or the first error.
fn assemble(items: &[Result<LlmEvent, LlmError>]) -> Result<ModelResponse, LlmError> {
    let mut assembler = StreamAssembler::new();
    for item in items {
        assembler.push(item.as_ref().map_err(Clone::clone)?)?;
    }
    assembler.finish()
}

fn assemble_events(events: &[LlmEvent]) -> Result<ModelResponse, LlmError> {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event)?;
    }
    assembler.finish()
}

/// The error a stream ended with; panics (naming the format) when it ended cleanly.
fn final_error<'a>(f: &Format, items: &'a [Result<LlmEvent, LlmError>]) -> &'a LlmError {
    match items.last() {
        Some(Err(e)) => e,
        other => panic!(
            "{:?}: expected the stream to end in an error, it ended with {other:?}",
            f.wire
        ),
    }
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

/// `script` streamed through the mock and the format's real client, assembled.
async fn through_client(f: &Format, script: MockResponse) -> Result<ModelResponse, LlmError> {
    let server = MockServer::start().await;
    server.push(script);
    let client = client(f, &server);
    let items = collect(&*client, &hello()).await;
    assert_eq!(server.requests().len(), 1, "{:?}: one request", f.wire);
    assert_eq!(
        server.requests()[0].format,
        Some(f.wire),
        "{:?}: routed",
        f.wire
    );
    assemble(&items)
}

/// The raw body the mock streams for `script` in the format's wire form: the client's
/// request, sent again by hand, and the answer's bytes as they are.
async fn raw_body(f: &Format, script: ScriptedResponse) -> Vec<u8> {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("first"));
    server.push(script);
    let client = client(f, &server);
    let first = collect(&*client, &hello()).await;
    assert!(first.iter().all(Result::is_ok), "{:?}: {first:?}", f.wire);
    let sent = server.requests().remove(0);
    let answer = reqwest::Client::new()
        .post(format!("{}{}", server.url(), sent.path))
        .header("content-type", "application/json")
        .body(sent.body.to_string())
        .send()
        .await
        .expect("the mock answers");
    assert_eq!(answer.status(), 200, "{:?}", f.wire);
    answer.bytes().await.expect("the whole body").to_vec()
}

/// Decodes `body` with the format's `WireDecoder`, split at `cuts`.
fn decode_split(f: &Format, body: &[u8], cuts: &[usize]) -> Result<ModelResponse, LlmError> {
    let mut decoder = WireDecoder::new(f.wire);
    let mut events = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        let cut = cut.clamp(start, body.len());
        decoder.push(&body[start..cut], &mut events)?;
        start = cut;
    }
    decoder.finish(&mut events)?;
    assemble_events(&events)
}

// ---------------------------------------------------------------------------------------------
// What a scripted response must come back as, in a format
// ---------------------------------------------------------------------------------------------

/// The response the in-process `ScriptedClient` assembles for `script` (the format-neutral
/// meaning of the script), changed only where the format's table says it cannot carry it.
async fn expected(f: &Format, script: &ScriptedResponse) -> ModelResponse {
    let scripted = ScriptedClient::new([script.clone()]).with_model(f.model);
    let items = collect(&scripted, &hello()).await;
    let mut response = assemble(&items).expect("the script assembles");
    if !f.response_id {
        response.id = String::new();
    }
    response.model = if f.names_model {
        f.model.to_owned()
    } else {
        String::new()
    };
    for (position, block) in response.message.content.iter_mut().enumerate() {
        if let ContentBlock::Thinking {
            thinking,
            signature,
        } = block
        {
            match f.thinking {
                Thinking::Signed => {}
                Thinking::Unsigned => signature.clear(),
                Thinking::Summary => {
                    *block = ContentBlock::Reasoning {
                        id: format!("rs_{position}"),
                        summary: vec![std::mem::take(thinking)],
                        encrypted_content: None,
                    }
                }
            }
        }
    }
    let usage = &mut response.usage;
    if !f.cache_read {
        usage.input_tokens += std::mem::take(&mut usage.cache_read_input_tokens);
    }
    if !f.cache_write {
        usage.input_tokens += std::mem::take(&mut usage.cache_creation_input_tokens);
    }
    if !f.reasoning_tokens {
        usage.reasoning_tokens = 0;
    }
    response.stop_reason = reported_stop(f, &response.stop_reason);
    if !f.names_stop_sequence {
        response.stop_sequence = None;
    }
    response
}

/// The stop reason the format reports for a scripted one (its table).
fn reported_stop(f: &Format, scripted: &StopReason) -> StopReason {
    f.stop_reasons
        .iter()
        .find(|(s, _)| s == scripted)
        .map(|(_, reported)| reported.clone())
        .unwrap_or_else(|| panic!("{:?}: no stop reason for {scripted:?}", f.wire))
}

/// `script` through the real client, in one HTTP chunk per event (`None`) and in HTTP chunks
/// of each size of `chunks`, equals what the format's table says it must be; returns it.
/// (Random chunkings of the body go through the format's `WireDecoder` in `any_chunking`,
/// without a socket.)
async fn round_trip_chunked(
    f: &Format,
    script: ScriptedResponse,
    chunks: &[Option<u32>],
) -> ModelResponse {
    let want = expected(f, &script).await;
    for &chunk in chunks {
        let mut mock = MockResponse::stream(script.clone());
        if let Some(bytes) = chunk {
            mock = mock.chunk_size(bytes);
        }
        let got = through_client(f, mock)
            .await
            .unwrap_or_else(|e| panic!("{:?} (HTTP chunks {chunk:?}): {e}", f.wire));
        assert_eq!(got, want, "{:?} (HTTP chunks {chunk:?})", f.wire);
    }
    want
}

/// [`round_trip_chunked`] whole and in HTTP chunks of 7 bytes.
async fn round_trip(f: &Format, script: ScriptedResponse) -> ModelResponse {
    round_trip_chunked(f, script, &[None, Some(7)]).await
}

const UNICODE: &str = "Hello, wörld — naïve café ✓ 日本語 🦀!";

fn scripts() -> Vec<(&'static str, ScriptedResponse)> {
    vec![
        (
            "text",
            ScriptedResponse::text(UNICODE)
                .chunked(3)
                .usage_tokens(11, 7),
        ),
        (
            "thinking",
            ScriptedResponse::thinking("Let me think about it.", "sig-Zm9v")
                .then_text("Forty-two.")
                .chunked(4)
                .usage_tokens(9, 30),
        ),
        (
            "calls",
            ScriptedResponse::text("Looking.")
                .then_tool_call("call_a", "lookup", json!({"query": "Paris ✓", "n": 3}))
                .then_tool_call(
                    "call_b",
                    "clock",
                    json!({"tz": "Europe/Paris", "exact": true}),
                )
                .chunked(5)
                .usage_tokens(40, 12),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Request encoding
// ---------------------------------------------------------------------------------------------

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "lookup".into(),
            description: "TOOLDESC-lookup finds a place.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"]
            }),
        },
        ToolSpec {
            name: "clock".into(),
            description: "TOOLDESC-clock tells the time.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"tz": {"type": "string", "enum": ["UTC", "Europe/Paris"]}},
                "required": ["tz"],
                "additionalProperties": false
            }),
        },
    ]
}

/// The markers of the conversation, in the order the messages carry them.
const CONVERSATION: [&str; 6] = [
    "USER-1", "ASSIST-1", "ARG-1", "RESULT-1", "ASSIST-2", "USER-2",
];

/// A request with every part the suite checks: system, user text (and an image where the
/// format takes one), tools with schemas, an assistant tool call and its result, tool
/// choice, max tokens, temperature and a stop sequence.
fn full_request(f: &Format) -> ModelRequest {
    let mut first = vec![ContentBlock::text("USER-1 where is this?")];
    if f.images {
        first.push(ContentBlock::Image {
            source: MediaSource::Base64 {
                media_type: "image/png".into(),
                data: PNG.into(),
            },
        });
    }
    let mut request = ModelRequest::new(vec![
        Message {
            role: Role::User,
            content: first,
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("ASSIST-1 let me look."),
                ContentBlock::ToolUse {
                    id: "call_conf_1".into(),
                    name: "lookup".into(),
                    input: json!({"query": "ARG-1"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "call_conf_1",
                "RESULT-1 Paris",
                false,
            )],
        },
        Message::assistant("ASSIST-2 It is Paris."),
        Message::user("USER-2 And the time?"),
    ]);
    request.system = Some("SYSTEM-1 You are terse.".into());
    request.tools = tools();
    request.tool_choice = ToolChoice::Tool("lookup".into());
    request.max_tokens = 321;
    request.temperature = Some(0.25);
    request.stop_sequences = vec!["HALT-9".into()];
    request
}

/// The request goes out whole: every part in the body where the format's API takes it, the
/// conversation in order and each part once, and the mock reads it as a valid history.
///
/// `RecordedRequest` gives the body as JSON, not the mock's own reading of it (the inverse
/// decoders that feed its history check are private), so the body is checked by its
/// markers and the table's JSON pointers, and the mock's reading by its verdict: no
/// violation here, the provider's `400` for each invalid history in the next case.
pub(crate) async fn request_encoding(f: &Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = client(f, &server);
    let items = collect(&*client, &full_request(f)).await;
    assert_eq!(text_of(&items), "ok", "{:?}: {items:?}", f.wire);
    assert!(
        server.history_violations().is_empty(),
        "{:?}: {:?}",
        f.wire,
        server.history_violations()
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{:?}", f.wire);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].format, Some(f.wire));
    let body = &requests[0].body;
    let text = body.to_string();

    for (pointer, want) in f.settings {
        let want: Value = serde_json::from_str(want).unwrap();
        assert_eq!(
            body.pointer(pointer),
            Some(&want),
            "{:?}: {pointer} in {body:#}",
            f.wire
        );
    }
    assert_eq!(
        text.contains("HALT-9"),
        f.stop_sequences,
        "{:?}: the stop sequence is sent where the API takes one",
        f.wire
    );

    let once = |marker: &str| {
        let n = text.matches(marker).count();
        assert_eq!(n, 1, "{:?}: {marker} appears {n} times in {body:#}", f.wire);
        text.find(marker).unwrap()
    };
    once("SYSTEM-1 You are terse.");
    once("TOOLDESC-lookup finds a place.");
    if f.only_chosen_tool {
        assert!(
            !text.contains("TOOLDESC-clock"),
            "{:?}: only the chosen tool",
            f.wire
        );
    } else {
        once("TOOLDESC-clock tells the time.");
        assert!(
            text.contains("Europe/Paris"),
            "{:?}: the schema's enum",
            f.wire
        );
    }
    assert!(
        text.contains(r#""required":["query"]"#),
        "{:?}: the schema",
        f.wire
    );
    assert_eq!(once(PNG) > 0, f.images);
    let positions: Vec<usize> = CONVERSATION.iter().map(|m| once(m)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "{:?}: the conversation out of order ({CONVERSATION:?} at {positions:?}) in {body:#}",
        f.wire
    );
}

/// Histories a provider refuses, each sent by the real client: the mock answers the
/// provider's `400` (not retried, the script untouched) and records the violation.
pub(crate) async fn invalid_histories_are_refused(f: &Format) {
    let call = |id: &str, name: &str| ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input: json!({"query": "x"}),
    };
    let assistant = |content| Message {
        role: Role::Assistant,
        content,
    };
    let user = |content| Message {
        role: Role::User,
        content,
    };
    let histories: Vec<(&str, Vec<Message>)> = vec![
        (
            "a call without its result",
            vec![
                Message::user("hi"),
                assistant(vec![call("c1", "lookup")]),
                Message::user("no result"),
            ],
        ),
        (
            "results in the wrong order",
            vec![
                Message::user("hi"),
                assistant(vec![call("c1", "lookup"), call("c2", "clock")]),
                user(vec![
                    ContentBlock::tool_result("c2", "two", false),
                    ContentBlock::tool_result("c1", "one", false),
                ]),
            ],
        ),
        (
            "a result for another call",
            vec![
                Message::user("hi"),
                assistant(vec![call("c1", "lookup")]),
                user(vec![ContentBlock::tool_result("c9", "nine", false)]),
            ],
        ),
    ];
    for (what, history) in histories {
        let server = MockServer::start().await;
        server.push(ScriptedResponse::text("never"));
        let client = client(f, &server);
        let mut request = ModelRequest::new(history);
        request.tools = tools();
        let items = collect(&*client, &request).await;
        if what == "a result for another call" && f.result_needs_call_name {
            // The client cannot name the function the result answers: refused before sending.
            let error = final_error(f, &items);
            assert!(
                matches!(error, LlmError::InvalidRequest { .. }),
                "{:?}: {error:?}",
                f.wire
            );
            assert!(error.to_string().contains("c9"), "{:?}: {error}", f.wire);
            assert!(server.requests().is_empty(), "{:?}", f.wire);
            continue;
        }
        match final_error(f, &items) {
            LlmError::Api(api) => {
                assert_eq!(api.status, 400, "{:?}, {what}: {api:?}", f.wire);
                assert_eq!(
                    api.error_type.as_deref(),
                    f.invalid_request_type,
                    "{:?}, {what}",
                    f.wire
                );
                assert!(
                    api.message.contains("refuses this history"),
                    "{:?}: {api:?}",
                    f.wire
                );
                assert!(!api.is_retryable(), "{:?}, {what}", f.wire);
            }
            other => panic!(
                "{:?}, {what}: expected the provider's 400, got {other:?}",
                f.wire
            ),
        }
        assert_eq!(
            server.requests().len(),
            1,
            "{:?}, {what}: not retried",
            f.wire
        );
        assert_eq!(
            server.remaining(),
            1,
            "{:?}, {what}: the script untouched",
            f.wire
        );
        assert_eq!(
            server.history_violations().len(),
            1,
            "{:?}, {what}: {:?}",
            f.wire,
            server.history_violations()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

pub(crate) async fn text(f: &Format) {
    // Every byte its own HTTP chunk, once: multi-byte characters split across reads.
    let got = round_trip_chunked(f, scripts().remove(0).1, &[None, Some(1), Some(7)]).await;
    assert_eq!(got.text(), UNICODE);
    assert_eq!(got.message.role, Role::Assistant);
}

pub(crate) async fn thinking(f: &Format) {
    let got = round_trip(f, scripts().remove(1).1).await;
    assert_eq!(got.text(), "Forty-two.");
    let reasoning: Vec<&ContentBlock> = got
        .message
        .content
        .iter()
        .filter(|b| !matches!(b, ContentBlock::Text { .. }))
        .collect();
    let want = match f.thinking {
        Thinking::Signed => ContentBlock::Thinking {
            thinking: "Let me think about it.".into(),
            signature: "sig-Zm9v".into(),
        },
        Thinking::Unsigned => ContentBlock::Thinking {
            thinking: "Let me think about it.".into(),
            signature: String::new(),
        },
        Thinking::Summary => ContentBlock::Reasoning {
            id: "rs_0".into(),
            summary: vec!["Let me think about it.".into()],
            encrypted_content: None,
        },
    };
    assert_eq!(reasoning, [&want], "{:?}", f.wire);
}

fn calls(response: &ModelResponse) -> Vec<(String, String, Value)> {
    response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => {
                Some((id.clone(), name.clone(), input.clone()))
            }
            _ => None,
        })
        .collect()
}

pub(crate) async fn one_tool_call(f: &Format) {
    let args = json!({"query": "a \"quoted\" ✓ place", "limit": 5, "nested": {"deep": [1, 2]}});
    let got = round_trip(
        f,
        ScriptedResponse::tool_call("call_one", "lookup", args.clone()).chunked(2),
    )
    .await;
    assert_eq!(calls(&got), [("call_one".into(), "lookup".into(), args)]);
    assert_eq!(got.stop_reason, StopReason::ToolUse);
    assert!(
        got.invalid_tool_calls.is_empty(),
        "{:?}",
        got.invalid_tool_calls
    );
}

pub(crate) async fn several_tool_calls(f: &Format) {
    let got = round_trip(f, scripts().remove(2).1).await;
    assert_eq!(got.text(), "Looking.");
    assert_eq!(
        calls(&got),
        [
            (
                "call_a".into(),
                "lookup".into(),
                json!({"query": "Paris ✓", "n": 3})
            ),
            (
                "call_b".into(),
                "clock".into(),
                json!({"tz": "Europe/Paris", "exact": true})
            ),
        ],
        "{:?}",
        f.wire
    );
    assert_eq!(got.stop_reason, StopReason::ToolUse);
}

pub(crate) async fn usage(f: &Format) {
    let usage = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_input_tokens: 30,
        cache_creation_input_tokens: 40,
        reasoning_tokens: 5,
    };
    let got = round_trip(f, ScriptedResponse::text("counted").usage(usage)).await;
    // However the format splits them, no input token is lost or counted twice.
    assert_eq!(
        got.usage.total_input_tokens(),
        170,
        "{:?}: {:?}",
        f.wire,
        got.usage
    );
    assert_eq!(got.usage.output_tokens, 20, "{:?}", f.wire);
    assert_eq!(
        got.usage.cache_read_input_tokens,
        if f.cache_read { 30 } else { 0 }
    );
    assert_eq!(
        got.usage.cache_creation_input_tokens,
        if f.cache_write { 40 } else { 0 }
    );
    assert_eq!(
        got.usage.reasoning_tokens,
        if f.reasoning_tokens { 5 } else { 0 }
    );
}

pub(crate) async fn stop_reasons(f: &Format) {
    for (scripted, _) in f.stop_reasons {
        let reported = &reported_stop(f, scripted);
        let mut script = if *scripted == StopReason::ToolUse {
            ScriptedResponse::tool_call("call_s", "lookup", json!({"query": "q"}))
        } else {
            ScriptedResponse::text("stopped")
        };
        if *scripted == StopReason::StopSequence {
            script = script.then_event(LlmEvent::StopSequence {
                sequence: "HALT-9".into(),
            });
        }
        let got = round_trip_chunked(f, script.stop_reason(scripted.clone()), &[None]).await;
        assert_eq!(&got.stop_reason, reported, "{:?}: {scripted:?}", f.wire);
        let named = f.names_stop_sequence && *scripted == StopReason::StopSequence;
        assert_eq!(
            got.stop_sequence.as_deref(),
            named.then_some("HALT-9"),
            "{:?}: {scripted:?}",
            f.wire
        );
    }
}

/// Every scripted response's body, split anywhere by the format's `WireDecoder`, assembles
/// to the response the client assembles.
pub(crate) fn any_chunking(f: &Format) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (name, script) in scripts() {
        let body = runtime.block_on(raw_body(f, script.clone()));
        let want = runtime.block_on(expected(f, &script));
        assert_eq!(
            decode_split(f, &body, &[]).as_ref(),
            Ok(&want),
            "{:?} {name}",
            f.wire
        );
        let mut runner = TestRunner::new(Config {
            cases: 48,
            failure_persistence: None,
            ..Config::default()
        });
        let len = body.len();
        runner
            .run(&prop::collection::vec(0..=len, 0..24), |mut cuts| {
                cuts.sort_unstable();
                let got = decode_split(f, &body, &cuts);
                prop_assert_eq!(
                    got.as_ref(),
                    Ok(&want),
                    "{:?} {} cut at {:?}",
                    f.wire,
                    name,
                    cuts
                );
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------

/// A body cut at any byte before its end: the decoder reports an error, or (when only bytes
/// after the end marker were lost) the whole response; never a shorter answer.
pub(crate) fn cut_short(f: &Format) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (name, script) in scripts() {
        let body = runtime.block_on(raw_body(f, script.clone()));
        let whole = runtime.block_on(expected(f, &script));
        let step = (body.len() / 200).max(1);
        let mut errors = 0;
        for end in (0..body.len()).step_by(step) {
            match decode_split(f, &body[..end], &[end / 2]) {
                Err(_) => errors += 1,
                Ok(got) => {
                    let mut want = whole.clone();
                    if f.usage_after_end && got.usage == Usage::default() {
                        // Cut between the end marker and the usage after it.
                        want.usage = Usage::default();
                    }
                    assert_eq!(
                        got,
                        want,
                        "{:?} {name}: the body cut at {end} of {} gave a shorter answer",
                        f.wire,
                        body.len()
                    )
                }
            }
        }
        assert!(errors > 0, "{:?} {name}: no cut was an error", f.wire);
    }
}

/// The body ends cleanly without the end-of-message marker: `Incomplete`, not retried
/// after content (the client cannot know the answer was whole).
pub(crate) async fn truncation(f: &Format) {
    for (name, script) in scripts() {
        let server = MockServer::start().await;
        server.push(MockResponse::stream(script).truncated());
        let client = client(f, &server);
        let items = collect(&*client, &hello()).await;
        let error = final_error(f, &items);
        assert!(
            matches!(error, LlmError::Incomplete { .. }),
            "{:?} {name}: {error:?}",
            f.wire
        );
        assert!(assemble(&items).is_err());
        assert_eq!(server.requests().len(), 1, "{:?} {name}", f.wire);
    }
}

/// An error event after the first content: the stream's error, with the provider's
/// message, retryable (an overloaded server); the content before it stays content.
pub(crate) async fn mid_stream_error(f: &Format) {
    let server = MockServer::start().await;
    server.push(
        MockResponse::stream(ScriptedResponse::text("partial answer").chunked(4)).error_event_at(
            StreamPoint::AfterFirstContent,
            "overloaded_error",
            "MOCK-BUSY the server is busy",
        ),
    );
    let client = client(f, &server);
    let items = collect(&*client, &hello()).await;
    let error = final_error(f, &items);
    let LlmError::Stream { error_type, .. } = error else {
        panic!("{:?}: {error:?}", f.wire)
    };
    assert_eq!(error_type, f.overloaded_event_type, "{:?}", f.wire);
    assert!(
        error.to_string().contains("MOCK-BUSY"),
        "{:?}: {error}",
        f.wire
    );
    assert!(error.is_retryable(), "{:?}: {error:?}", f.wire);
    assert_eq!(text_of(&items), "part", "{:?}", f.wire);
    assert_eq!(
        server.requests().len(),
        1,
        "{:?}: not retried after content",
        f.wire
    );

    // Before any content the same event is retried, unseen.
    let server = MockServer::start().await;
    server.push(
        MockResponse::stream(ScriptedResponse::text("x")).error_event_at(
            StreamPoint::BeforeContent,
            "overloaded_error",
            "MOCK-BUSY",
        ),
    );
    server.push(ScriptedResponse::text("retried"));
    let client = self::client(f, &server);
    let items = collect(&*client, &hello()).await;
    assert!(items.iter().all(Result::is_ok), "{:?}: {items:?}", f.wire);
    assert_eq!(text_of(&items), "retried", "{:?}", f.wire);
    assert_eq!(server.requests().len(), 2, "{:?}", f.wire);
}

/// An event whose data is not JSON, after content: `Malformed`.
pub(crate) async fn bad_json(f: &Format) {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::text("Hel").then_fail(LlmError::Malformed {
            message: "scripted".into(),
        }),
    );
    let client = client(f, &server);
    let items = collect(&*client, &hello()).await;
    let error = final_error(f, &items);
    assert!(
        matches!(error, LlmError::Malformed { .. }),
        "{:?}: {error:?}",
        f.wire
    );
    assert_eq!(text_of(&items), "Hel", "{:?}", f.wire);
}

fn limited(
    f: &Format,
    server: &MockServer,
    edit: impl FnOnce(&mut StreamLimits),
) -> Box<dyn LlmClient> {
    let mut limits = StreamLimits::default();
    edit(&mut limits);
    (f.client)(server, retries(), limits)
}

/// One event (or line) over the limit: `LimitExceeded` naming the limit and its setting,
/// before the oversize event is buffered whole; not retried.
pub(crate) async fn oversize_event(f: &Format) {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("y".repeat(4096)));
    let client = limited(f, &server, |l| {
        l.max_event_bytes = 1024;
        l.max_line_bytes = 1024;
    });
    let items = collect(&*client, &hello()).await;
    let error = final_error(f, &items);
    let LlmError::LimitExceeded { limit, setting, .. } = error else {
        panic!("{:?}: {error:?}", f.wire)
    };
    assert_eq!(*limit, 1024, "{:?}", f.wire);
    assert!(
        setting == "StreamLimits::max_event_bytes" || setting == "StreamLimits::max_line_bytes",
        "{:?}: {setting}",
        f.wire
    );
    assert!(error.to_string().contains(&**setting), "{error}");
    assert!(!error.is_retryable(), "{:?}", f.wire);
    assert_eq!(server.requests().len(), 1, "{:?}", f.wire);
}

/// Tool arguments over `max_tool_args_bytes` (the events themselves small where the format
/// streams them in fragments): `LimitExceeded` naming the setting.
pub(crate) async fn oversize_tool_args(f: &Format) {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::tool_call("c1", "lookup", json!({"query": "x".repeat(500)})).chunked(50),
    );
    let client = limited(f, &server, |l| l.max_tool_args_bytes = 128);
    let items = collect(&*client, &hello()).await;
    // The client's stream carries the fragments; the assembler, with the client's limits
    // (as the agent assembles), refuses them.
    let mut assembler = StreamAssembler::with_limits(client.stream_limits());
    let error = items
        .iter()
        .find_map(|item| match item {
            Ok(event) => assembler.push(event).err(),
            Err(e) => Some(e.clone()),
        })
        .or_else(|| assembler.finish().err())
        .unwrap_or_else(|| panic!("{:?}: the oversize arguments were taken", f.wire));
    let error = &error;
    let LlmError::LimitExceeded { limit, setting, .. } = error else {
        panic!("{:?}: {error:?}", f.wire)
    };
    assert_eq!(*limit, 128, "{:?}", f.wire);
    assert_eq!(setting, "StreamLimits::max_tool_args_bytes", "{:?}", f.wire);
    assert!(!error.is_retryable(), "{:?}", f.wire);
    assert_eq!(server.requests().len(), 1, "{:?}", f.wire);
}

/// A 429 with `retry-after: 3` before content: the client waits (at least) the three seconds
/// the server asked for, on tokio's paused clock, then the retry succeeds.
pub(crate) async fn status_429(f: &Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::status(429).retry_after(3));
    server.push(ScriptedResponse::text("after the wait"));
    let client = client(f, &server);
    let start = tokio::time::Instant::now();
    let items = collect(&*client, &hello()).await;
    assert_eq!(text_of(&items), "after the wait", "{:?}: {items:?}", f.wire);
    assert!(items.iter().all(Result::is_ok), "{:?}: {items:?}", f.wire);
    assert!(
        start.elapsed() >= Duration::from_secs(3),
        "{:?}: retried after {:?}",
        f.wire,
        start.elapsed()
    );
    assert_eq!(server.requests().len(), 2, "{:?}", f.wire);
}

/// Every error status before content: retried once (the stream goes on with the next
/// attempt, its failed attempt unseen) or surfaced at once with its status and the
/// provider's message; a 413 is a context overflow.
pub(crate) async fn statuses(f: &Format) {
    let table: &[(u16, bool)] = &[
        (400, false),
        (401, false),
        (403, false),
        (404, false),
        (408, true),
        (409, true),
        (413, false),
        (422, false),
        (429, true),
        (500, true),
        (502, true),
        (503, true),
        (504, true),
        (529, true),
    ];
    for &(status, retried) in table {
        let server = MockServer::start().await;
        server.push(MockResponse::status(status).error_message(format!("MOCK-BOOM {status}")));
        server.push(ScriptedResponse::text("recovered"));
        let client = client(f, &server);
        let items = collect(&*client, &hello()).await;
        let sent = server.requests().len();
        if retried {
            assert!(
                items.iter().all(Result::is_ok),
                "{:?} {status}: {items:?}",
                f.wire
            );
            assert_eq!(text_of(&items), "recovered", "{:?} {status}", f.wire);
            let starts = items
                .iter()
                .filter(|i| matches!(i, Ok(LlmEvent::MessageStart { .. })))
                .count();
            assert_eq!(
                starts, 1,
                "{:?} {status}: the failed attempt unseen",
                f.wire
            );
            assert_eq!(sent, 2, "{:?} {status}: retried once", f.wire);
            continue;
        }
        assert_eq!(items.len(), 1, "{:?} {status}: {items:?}", f.wire);
        let error = final_error(f, &items);
        assert_eq!(error.status(), Some(status), "{:?}: {error:?}", f.wire);
        assert!(
            error.to_string().contains(&format!("MOCK-BOOM {status}")),
            "{:?}: {error}",
            f.wire
        );
        assert!(!error.is_retryable(), "{:?} {status}", f.wire);
        assert_eq!(
            matches!(error, LlmError::ContextOverflow(_)),
            status == 413,
            "{:?} {status}: {error:?}",
            f.wire
        );
        assert_eq!(sent, 1, "{:?} {status}: not retried", f.wire);
        assert_eq!(server.remaining(), 1, "{:?} {status}", f.wire);
    }
}

/// Past the policy's three retries the last status is the error.
pub(crate) async fn retries_are_bounded(f: &Format) {
    let server = MockServer::start().await;
    for _ in 0..5 {
        server.push(MockResponse::status(503));
    }
    let client = client(f, &server);
    let items = collect(&*client, &hello()).await;
    assert_eq!(items.len(), 1, "{:?}: {items:?}", f.wire);
    assert_eq!(final_error(f, &items).status(), Some(503), "{:?}", f.wire);
    assert_eq!(server.requests().len(), 4, "{:?}", f.wire);
}

/// A connection lost before content is retried; after content it is the stream's
/// `Transport` error (the client cannot resume), with the content before it kept.
pub(crate) async fn disconnects(f: &Format) {
    let server = MockServer::start().await;
    server.push(MockResponse::stream(ScriptedResponse::text("lost")).disconnect_before_content());
    server.push(ScriptedResponse::text("found"));
    let client = client(f, &server);
    let items = collect(&*client, &hello()).await;
    assert!(items.iter().all(Result::is_ok), "{:?}: {items:?}", f.wire);
    assert_eq!(text_of(&items), "found", "{:?}", f.wire);
    assert_eq!(server.requests().len(), 2, "{:?}: retried once", f.wire);

    // Five bytes into the body: still before content.
    let server = MockServer::start().await;
    server.push(MockResponse::stream(ScriptedResponse::text("abc")).disconnect_after_bytes(5));
    server.push(ScriptedResponse::text("again"));
    let client = self::client(f, &server);
    let items = collect(&*client, &hello()).await;
    assert_eq!(text_of(&items), "again", "{:?}: {items:?}", f.wire);
    assert_eq!(server.requests().len(), 2, "{:?}: retried once", f.wire);

    let server = MockServer::start().await;
    server.push(
        MockResponse::stream(ScriptedResponse::text("half").then_text(" never"))
            .disconnect_after_first_content(),
    );
    server.push(ScriptedResponse::text("unused"));
    let client = self::client(f, &server);
    let items = collect(&*client, &hello()).await;
    assert_eq!(text_of(&items), "half", "{:?}: {items:?}", f.wire);
    let error = final_error(f, &items);
    assert!(
        matches!(error, LlmError::Transport { .. }),
        "{:?}: {error:?}",
        f.wire
    );
    assert_eq!(
        server.requests().len(),
        1,
        "{:?}: not retried after content",
        f.wire
    );

    // The scripted failure says the same on the wire.
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("a").then_fail(LlmError::Transport {
        message: "gone".into(),
    }));
    let client = self::client(f, &server);
    let items = collect(&*client, &hello()).await;
    let error = final_error(f, &items);
    assert!(
        matches!(error, LlmError::Transport { .. }),
        "{:?}: {error:?}",
        f.wire
    );
}

/// Under the mock's rate limit a request counts the tokens it may generate: two requests
/// of 1,500 max tokens do not fit a budget of 2,000 tokens a minute, and the second is
/// answered `429` with `retry-after`, without using the script.
pub(crate) async fn rate_limit(f: &Format) {
    let server = MockServer::start().await;
    server.rate_limit(PacingLimits::per_minute().tokens(2_000));
    server.push(ScriptedResponse::text("first"));
    server.push(ScriptedResponse::text("second"));
    let client = (f.client)(&server, RetryPolicy::none(), StreamLimits::default());
    let mut request = hello();
    request.max_tokens = 1_500;
    let first = collect(&*client, &request).await;
    assert_eq!(text_of(&first), "first", "{:?}: {first:?}", f.wire);
    let second = collect(&*client, &request).await;
    match final_error(f, &second) {
        LlmError::Api(api) => {
            assert_eq!(api.status, 429, "{:?}: {api:?}", f.wire);
            assert!(api.retry_after.is_some(), "{:?}: {api:?}", f.wire);
        }
        other => panic!("{:?}: {other:?}", f.wire),
    }
    assert_eq!(server.rate_limited(), 1, "{:?}", f.wire);
    assert_eq!(server.remaining(), 1, "{:?}", f.wire);
}
