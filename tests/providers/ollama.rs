//! Ollama's native chat API (`POST /api/chat`, NDJSON) through the public API: the decoder on
//! bodies written from Ollama's documented stream format (tests/fixtures/ollama/), chunking,
//! the request body (against tests/golden/ollama_request.json), and `OllamaClient` against the
//! loopback `MockServer`, alone and under an `Agent`.

use crate::common;

use agent_loop::media::MediaSource;
use agent_loop::provider::ollama::OllamaKeepAlive;
use agent_loop::provider::{ModelRequest, ToolChoice};
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse, StreamPoint};
use agent_loop::tool::ToolSpec;
use agent_loop::wire::{WireDecoder, WireFormat};
use agent_loop::{
    Agent, AgentEvent, ContentBlock, LlmClient, LlmError, LlmEvent, Message, OllamaClient, Role,
    StopReason, Termination, Usage,
};
use common::agent::add_tool;
use common::{fast_retries, Decoded};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};

const KEY: &str = "ollama-test-key-0123456789-secret";

/// A 1×1 PNG, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn decode(name: &str) -> Decoded {
    common::decode(
        WireFormat::Ollama,
        &common::fixture(&format!("ollama/{name}")),
    )
}

fn start(model: &str) -> LlmEvent {
    LlmEvent::MessageStart {
        id: String::new(),
        model: model.into(),
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

fn usage(input_tokens: u64, output_tokens: u64) -> LlmEvent {
    LlmEvent::Usage(Usage {
        input_tokens,
        output_tokens,
        ..Usage::default()
    })
}

fn end(stop_reason: StopReason) -> LlmEvent {
    LlmEvent::MessageStop { stop_reason }
}

fn call(index: usize, id: &str, name: &str, arguments: &str) -> [LlmEvent; 3] {
    [
        LlmEvent::ToolCallStart {
            index,
            id: id.into(),
            name: name.into(),
        },
        LlmEvent::ToolCallDelta {
            index,
            partial_json: arguments.into(),
        },
        stop(index),
    ]
}

// ---------------------------------------------------------------------------------------------
// the decoder, on the documented stream format

#[test]
fn text_stream() {
    let d = decode("text.ndjson");
    assert_eq!(
        d.events,
        vec![
            start("llama3.2"),
            text(0, "The"),
            text(0, " sky is blue \"because\"\n"),
            text(0, "of Rayleigh — 散乱 🌈."),
            stop(0),
            usage(26, 282),
            end(StopReason::EndTurn),
        ]
    );
    let response = d.result.unwrap();
    assert_eq!(
        response.message.text(),
        "The sky is blue \"because\"\nof Rayleigh — 散乱 🌈."
    );
    assert_eq!(response.model, "llama3.2");
}

#[test]
fn thinking_then_text() {
    let d = decode("thinking.ndjson");
    assert_eq!(
        d.events,
        vec![
            start("qwen3"),
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "The user asks ".into()
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                thinking: "about 2+2.".into()
            },
            stop(0),
            text(1, "It is "),
            text(1, "4."),
            stop(1),
            usage(15, 40),
            end(StopReason::EndTurn),
        ]
    );
    let response = d.result.unwrap();
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "The user asks about 2+2.".into(),
                signature: String::new()
            },
            ContentBlock::text("It is 4."),
        ]
    );
}

#[test]
fn a_tool_call_arrives_whole_and_stop_means_tool_use() {
    let d = decode("tool_call.ndjson");
    let mut expected = vec![start("llama3.2")];
    expected.extend(call(0, "call_0", "get_weather", r#"{"city":"Tokyo"}"#));
    expected.extend([usage(169, 15), end(StopReason::ToolUse)]);
    assert_eq!(d.events, expected);
    let response = d.result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.tool_uses().collect::<Vec<_>>(),
        vec![("call_0", "get_weather", &json!({"city": "Tokyo"}))]
    );
}

#[test]
fn two_tool_calls_keep_their_ids_and_get_their_own_blocks() {
    let d = decode("two_tool_calls.ndjson");
    let mut expected = vec![
        start("qwen3"),
        LlmEvent::ThinkingDelta {
            index: 0,
            thinking: "Two lookups.".into(),
        },
        stop(0),
        text(1, "Checking both."),
        stop(1),
    ];
    expected.extend(call(
        2,
        "call_k2x9q1ab",
        "get_weather",
        r#"{"city":"Paris","unit":"celsius"}"#,
    ));
    expected.extend(call(
        3,
        "call_7hd0m2zc",
        "get_time",
        r#"{"tz":"Europe/Paris"}"#,
    ));
    expected.extend([usage(210, 33), end(StopReason::ToolUse)]);
    assert_eq!(d.events, expected);
    let response = d.result.unwrap();
    assert_eq!(response.message.tool_uses().count(), 2);
}

#[test]
fn every_done_reason_is_mapped_or_kept() {
    for (name, reason) in [
        ("text.ndjson", StopReason::EndTurn),
        ("length.ndjson", StopReason::MaxTokens),
        ("load.ndjson", StopReason::Other("load".into())),
        ("unload.ndjson", StopReason::Other("unload".into())),
    ] {
        let d = decode(name);
        assert_eq!(d.events.last(), Some(&end(reason.clone())), "{name}");
        assert_eq!(d.result.unwrap().stop_reason, reason, "{name}");
    }
    // load and unload carry no counts: no Usage event.
    assert!(!decode("load.ndjson")
        .events
        .iter()
        .any(|e| matches!(e, LlmEvent::Usage(_))));
    assert_eq!(
        decode("length.ndjson").result.unwrap().usage,
        Usage {
            input_tokens: 12,
            output_tokens: 3,
            ..Usage::default()
        }
    );
}

#[test]
fn an_error_line_is_the_streams_error_and_is_retryable() {
    let d = decode("error_mid_stream.ndjson");
    assert_eq!(
        d.events,
        vec![start("gemma4"), text(0, " Yes"), text(0, ".")]
    );
    let error = d.result.unwrap_err();
    assert!(
        matches!(&error, LlmError::Stream { error_type, message }
            if error_type == "server_error"
                && message == "an error was encountered while running the model"),
        "{error:?}"
    );
    assert!(error.is_retryable());
}

#[test]
fn the_done_line_ends_the_message_and_nothing_after_it_counts() {
    let line = |content: &str, done: &str| {
        format!(
            "{{\"model\":\"m\",\"message\":{{\"role\":\"assistant\",\"content\":\"{content}\"}},{done}}}\n"
        )
    };
    let mut decoder = WireDecoder::new(WireFormat::Ollama);
    let mut events = Vec::new();
    decoder
        .push(line("Hi", "\"done\":false").as_bytes(), &mut events)
        .unwrap();
    assert!(!decoder.is_done());
    // A done line that counts only the output (a prompt served whole from the cache has no
    // prompt_eval_count): the usage still comes.
    decoder
        .push(
            line(
                "",
                "\"done\":true,\"done_reason\":\"stop\",\"eval_count\":4",
            )
            .as_bytes(),
            &mut events,
        )
        .unwrap();
    assert!(decoder.is_done());
    decoder
        .push(line(" more", "\"done\":false").as_bytes(), &mut events)
        .unwrap();
    decoder.finish(&mut events).unwrap();
    let texts: Vec<&LlmEvent> = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::TextDelta { .. }))
        .collect();
    assert_eq!(texts, [&text(0, "Hi")]);
    assert!(events.contains(&usage(0, 4)), "{events:?}");
}

#[test]
fn a_body_without_done_is_incomplete() {
    let d = decode("truncated.ndjson");
    assert!(
        matches!(d.result, Err(LlmError::Incomplete { .. })),
        "{:?}",
        d.result
    );
    // Cut anywhere before its last byte, a complete body is incomplete too (or, cut inside
    // the last line, still incomplete rather than malformed).
    let body = common::fixture("ollama/text.ndjson");
    for cut in [1, body.len() / 2, body.len() - 2] {
        let d = common::decode(WireFormat::Ollama, &body[..cut]);
        assert!(
            matches!(d.result, Err(LlmError::Incomplete { .. })),
            "cut at {cut}: {:?}",
            d.result
        );
    }
}

#[test]
fn framing_variants_and_unknown_fields_are_taken() {
    for name in ["no_final_newline.ndjson", "crlf_and_blank_lines.ndjson"] {
        let d = decode(name);
        assert_eq!(
            d.events,
            vec![
                start("llama3.2"),
                text(0, "Hi"),
                stop(0),
                usage(5, 1),
                end(StopReason::EndTurn)
            ],
            "{name}"
        );
    }
    let d = decode("unknown_fields.ndjson");
    assert_eq!(d.result.unwrap().message.text(), "Hi");
    // What aimock sends: reasoning as `reasoning_content`.
    let d = decode("aimock_reasoning.ndjson");
    let response = d.result.unwrap();
    assert_eq!(
        response.message.content[0],
        ContentBlock::Thinking {
            thinking: "Let me think".into(),
            signature: String::new()
        }
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn a_whole_response_decodes_like_its_stream() {
    let body = br#"{"model":"llama3.2","created_at":"2024-07-22T20:33:28.123648Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_current_weather","arguments":{"format":"celsius","location":"Paris, FR"}}}]},"done_reason":"stop","done":true,"total_duration":885095291,"load_duration":3753500,"prompt_eval_count":122,"prompt_eval_duration":328493000,"eval_count":33,"eval_duration":552222000}"#;
    let mut events = Vec::new();
    WireDecoder::new(WireFormat::Ollama)
        .decode_json(body, &mut events)
        .unwrap();
    let stops = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::MessageStop { .. }))
        .count();
    assert_eq!(stops, 1, "{events:?}");
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.usage.input_tokens, 122);
    assert_eq!(
        response.message.tool_uses().next(),
        Some((
            "call_0",
            "get_current_weather",
            &json!({"format": "celsius", "location": "Paris, FR"})
        ))
    );
    // A whole answer without `done` (some compatible servers) is still the whole answer.
    let mut events = Vec::new();
    WireDecoder::new(WireFormat::Ollama)
        .decode_json(
            br#"{"model":"m","message":{"role":"assistant","content":"Hi"}}"#,
            &mut events,
        )
        .unwrap();
    let response = common::assemble(&events).unwrap();
    assert_eq!(
        (response.text(), response.stop_reason),
        ("Hi".to_owned(), StopReason::EndTurn)
    );
    let mut events = Vec::new();
    WireDecoder::new(WireFormat::Ollama)
        .decode_json(
            br#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]}}"#,
            &mut events,
        )
        .unwrap();
    assert_eq!(
        common::assemble(&events).unwrap().stop_reason,
        StopReason::ToolUse
    );
    // JSON that is no chat response at all is refused, not taken for an empty answer.
    let mut events = Vec::new();
    let error = WireDecoder::new(WireFormat::Ollama)
        .decode_json(br#"[1, 2]"#, &mut events)
        .unwrap_err();
    assert!(matches!(error, LlmError::Malformed { .. }), "{error:?}");
    // An error line with its status as a string is classified by that status.
    let mut events = Vec::new();
    let error = WireDecoder::new(WireFormat::Ollama)
        .decode_json(
            br#"{"error":"model not found","status":"404"}"#,
            &mut events,
        )
        .unwrap_err();
    assert!(
        matches!(&error, LlmError::Api(api) if api.status == 404),
        "{error:?}"
    );
    let mut events = Vec::new();
    let error = WireDecoder::new(WireFormat::Ollama)
        .decode_json(br#"{"error":"model 'nope' not found"}"#, &mut events)
        .unwrap_err();
    assert!(matches!(error, LlmError::Stream { .. }), "{error:?}");
}

// ---------------------------------------------------------------------------------------------
// chunking never matters

fn corpus() -> Vec<(String, Vec<u8>, Decoded)> {
    let dir = format!("{}/tests/fixtures/ollama", env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<(String, Vec<u8>, Decoded)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            let whole = common::decode(WireFormat::Ollama, &bytes);
            (p.display().to_string(), bytes, whole)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 13, "{} fixtures", out.len());
    out
}

#[test]
fn every_byte_split_changes_nothing() {
    for (name, bytes, whole) in corpus() {
        for size in [1, 2, 3, 7] {
            assert_eq!(
                common::decode_chunked(WireFormat::Ollama, &bytes, size),
                whole,
                "{name} in chunks of {size}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_chunking_gives_the_same_events(
        which in any::<prop::sample::Index>(),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let corpus = corpus();
        let (name, bytes, whole) = which.get(&corpus);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let split = common::decode_split(WireFormat::Ollama, bytes, &cuts);
        prop_assert_eq!(&split, whole, "{} at {:?}", name, cuts);
    }

    #[test]
    fn arbitrary_lines_never_panic_and_chunking_still_does_not_matter(
        lines in prop::collection::vec(prop_oneof![
            Just(r#"{"message":{"content":"a"},"done":false}"#.to_owned()),
            Just(r#"{"message":{"thinking":"t"}}"#.to_owned()),
            Just(r#"{"message":{"tool_calls":[{"function":{"name":"f","arguments":{"x":[1]}}}]}}"#.to_owned()),
            Just(r#"{"message":{"tool_calls":[{"function":{"name":"f","arguments":"{\"x\":"}}]}}"#.to_owned()),
            Just(r#"{"done":true,"done_reason":"length","eval_count":1}"#.to_owned()),
            Just(r#"{"error":"boom"}"#.to_owned()),
            "[ -~]{0,20}",
        ], 0..12),
        chunk in 1..20usize,
    ) {
        let body = lines.join("\n").into_bytes();
        let whole = common::decode(WireFormat::Ollama, &body);
        prop_assert_eq!(common::decode_chunked(WireFormat::Ollama, &body, chunk), whole);
    }
}

// ---------------------------------------------------------------------------------------------
// the request body

fn client(server: &MockServer) -> OllamaClient {
    OllamaClient::new()
        .base_url(format!("{}/", server.url()))
        .model("llama3.2")
        .retry_policy(fast_retries())
}

async fn collect(
    client: &dyn LlmClient,
    request: &ModelRequest,
) -> Vec<Result<LlmEvent, LlmError>> {
    client.stream(request).collect().await
}

fn final_error(items: &[Result<LlmEvent, LlmError>]) -> Option<LlmError> {
    items.iter().find_map(|i| i.as_ref().err().cloned())
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

fn png() -> MediaSource {
    MediaSource::Base64 {
        media_type: "image/png".into(),
        data: PNG.into(),
    }
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather in a city".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Current time in a time zone".into(),
            input_schema: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
        },
    ]
}

/// The golden request: system prompt, two tools, user text and an image, an assistant tool
/// call with thinking, its result (one an error), a follow-up; every setting.
fn conversation() -> ModelRequest {
    let mut request = ModelRequest::new(vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is the weather where this photo was taken?"),
                ContentBlock::Image { source: png() },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "It looks like Paris.".into(),
                    signature: String::new(),
                },
                ContentBlock::text("Checking Paris."),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "get_time".into(),
                    input: json!({"tz": "Europe/Paris"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("call_1", "18°C, sunny", false),
                ContentBlock::tool_result("call_2", "unknown time zone", true),
            ],
        },
        Message::assistant("It is 18°C and sunny in Paris."),
        Message::user("And tomorrow?"),
    ]);
    request.system = Some("You are terse.".into());
    request.tools = tools();
    request.max_tokens = 1024;
    request.temperature = Some(0.2);
    request.top_p = Some(0.9);
    request.stop_sequences = vec!["STOP".into()];
    request.thinking_budget = Some(2048);
    request
}

fn golden_client(server: &MockServer) -> OllamaClient {
    let options = json!({"num_ctx": 8192, "seed": 42, "top_k": 20, "temperature": 1.0});
    client(server)
        .keep_alive(OllamaKeepAlive::from("10m"))
        .options(options.as_object().cloned().unwrap())
}

#[tokio::test]
async fn the_request_body_matches_the_golden_file() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("Rain."));
    let items = collect(&golden_client(&server), &conversation()).await;
    assert_eq!(text_of(&items), "Rain.", "{items:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );

    crate::common::assert_golden("ollama_request.json", body);

    // What the golden file must say, written out, so that a wrong blessing fails too.
    assert_eq!(body["model"], "llama3.2");
    assert_eq!(body["stream"], true);
    assert_eq!(body["think"], true);
    assert_eq!(body["keep_alive"], "10m");
    assert_eq!(
        body["options"],
        json!({"num_ctx": 8192, "seed": 42, "top_k": 20, "temperature": 0.2, "top_p": 0.9,
               "num_predict": 1024, "stop": ["STOP"]})
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is the weather where this photo was taken?",
             "images": [PNG]},
            {"role": "assistant", "content": "Checking Paris.", "thinking": "It looks like Paris.",
             "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}}]},
            {"role": "tool", "content": "18°C, sunny", "tool_name": "get_weather"},
            {"role": "tool", "content": "Error: unknown time zone", "tool_name": "get_time"},
            {"role": "assistant", "content": "It is 18°C and sunny in Paris."},
            {"role": "user", "content": "And tomorrow?"}
        ])
    );
    assert_eq!(body["tools"][1]["type"], "function");
    assert_eq!(body["tools"][1]["function"]["name"], "get_time");
    // Only the field names of Ollama's ChatRequest and Message.
    let allowed = [
        "model",
        "messages",
        "tools",
        "format",
        "options",
        "keep_alive",
        "think",
        "stream",
    ];
    for key in body.as_object().unwrap().keys() {
        assert!(allowed.contains(&key.as_str()), "{key}");
    }
    for message in body["messages"].as_array().unwrap() {
        for key in message.as_object().unwrap().keys() {
            assert!(
                [
                    "role",
                    "content",
                    "thinking",
                    "images",
                    "tool_name",
                    "tool_calls"
                ]
                .contains(&key.as_str()),
                "{key}"
            );
        }
    }
}

#[tokio::test]
async fn headers_path_and_key() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("hi"));
    server.push(ScriptedResponse::text("hi"));
    let keyed = client(&server).api_key(KEY).header("x-trace", "t1");
    let request = ModelRequest::new(vec![Message::user("hello")]);
    assert_eq!(text_of(&collect(&keyed, &request).await), "hi");
    assert_eq!(text_of(&collect(&client(&server), &request).await), "hi");
    let requests = server.requests();
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/api/chat");
    assert_eq!(r.format, Some(WireFormat::Ollama));
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("application/x-ndjson"));
    assert_eq!(r.header("x-trace"), Some("t1"));
    assert!(!format!("{r:?}").contains(KEY));
    // No key, no authorization header.
    assert_eq!(requests[1].header("authorization"), None);
    assert_eq!(keyed.provider_name(), "ollama");
    assert_eq!(LlmClient::model(&keyed), "llama3.2");
}

#[tokio::test]
async fn tool_choice_extra_and_unsupported_content() {
    let server = MockServer::start().await;
    let c = client(&server);
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.tools = tools();

    // Named: only that tool; none: no tools.
    server.push(ScriptedResponse::text("a"));
    server.push(ScriptedResponse::text("b"));
    request.tool_choice = ToolChoice::Tool("get_time".into());
    assert_eq!(text_of(&collect(&c, &request).await), "a");
    request.tool_choice = ToolChoice::None;
    assert_eq!(text_of(&collect(&c, &request).await), "b");
    let requests = server.requests();
    assert_eq!(requests[0].body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(requests[0].body["tools"][0]["function"]["name"], "get_time");
    assert!(requests[1].body.get("tools").is_none());

    // Refused before anything is sent.
    let refused = |request: ModelRequest| {
        let c = c.clone();
        async move {
            let items = collect(&c, &request).await;
            final_error(&items).expect("an error")
        }
    };
    let mut clash = ModelRequest::new(vec![Message::user("hi")]);
    clash.extra.insert("options".into(), json!({"num_ctx": 1}));
    let error = refused(clash).await;
    assert!(
        matches!(&error, LlmError::InvalidRequest { message } if message.contains("`options`")),
        "{error}"
    );
    let mut clash = ModelRequest::new(vec![Message::user("hi")]);
    clash.extra.insert("model".into(), json!("other"));
    assert!(refused(clash).await.to_string().contains("`model`"));
    let document = ModelRequest::new(vec![Message {
        role: Role::User,
        content: vec![ContentBlock::Document {
            source: MediaSource::Url {
                url: "https://example.com/a.pdf".into(),
            },
            title: None,
        }],
    }]);
    let error = refused(document).await;
    assert!(
        matches!(&error, LlmError::InvalidRequest { message }
            if message.contains("Ollama") && message.contains("document")),
        "{error}"
    );
    let url_image = ModelRequest::new(vec![Message {
        role: Role::User,
        content: vec![ContentBlock::Image {
            source: MediaSource::Url {
                url: "https://example.com/a.png".into(),
            },
        }],
    }]);
    assert!(matches!(
        refused(url_image).await,
        LlmError::InvalidRequest { .. }
    ));
    assert_eq!(server.requests().len(), 2, "nothing more was sent");

    // `format` for structured output passes through `extra`.
    server.push(ScriptedResponse::text("{}"));
    let mut structured = ModelRequest::new(vec![Message::user("json")]);
    structured
        .extra
        .insert("format".into(), json!({"type": "object"}));
    assert_eq!(text_of(&collect(&c, &structured).await), "{}");
    assert_eq!(
        server.requests()[2].body["format"],
        json!({"type": "object"})
    );
}

// ---------------------------------------------------------------------------------------------
// the client against the mock server

#[tokio::test]
async fn statuses_errors_and_truncation() {
    let server = MockServer::start().await;
    let request = ModelRequest::new(vec![Message::user("hi")]);
    let c = client(&server);

    // A 404 (model not found) surfaces at once with Ollama's message.
    server.push(MockResponse::status(404).error_message("model 'llama9' not found"));
    let error = final_error(&collect(&c, &request).await).unwrap();
    assert!(
        matches!(&error, LlmError::Api(api) if api.status == 404 && api.message == "model 'llama9' not found"),
        "{error:?}"
    );
    assert_eq!(server.requests().len(), 1);

    // A context overflow is recognized.
    server.push(
        MockResponse::status(400).error_message("the input length exceeds the context length"),
    );
    let error = final_error(&collect(&c, &request).await).unwrap();
    assert!(matches!(error, LlmError::ContextOverflow(_)), "{error:?}");

    // An error line after content ends the stream with a retryable error, after the text.
    server.push(
        MockResponse::stream(ScriptedResponse::text("partial")).error_event_at(
            StreamPoint::AfterFirstContent,
            "server_error",
            "an error was encountered while running the model",
        ),
    );
    let items = collect(&c, &request).await;
    assert_eq!(text_of(&items), "partial");
    let error = final_error(&items).unwrap();
    assert!(
        matches!(error, LlmError::Stream { .. }) && error.is_retryable(),
        "{error:?}"
    );

    // A body without its done line is incomplete.
    server.push(MockResponse::stream(ScriptedResponse::text("cut")).truncated());
    let error = final_error(&collect(&c, &request).await).unwrap();
    assert!(matches!(error, LlmError::Incomplete { .. }), "{error:?}");

    // A whole JSON answer (`stream: false` behind a proxy) is taken.
    server.push(MockResponse::json(
        ScriptedResponse::thinking("hm", "").then_text("whole"),
    ));
    let items = collect(&c, &request).await;
    assert_eq!(text_of(&items), "whole", "{items:?}");
    assert!(items
        .iter()
        .any(|i| matches!(i, Ok(LlmEvent::ThinkingDelta { thinking, .. }) if thinking == "hm")));
}

#[tokio::test]
async fn the_key_never_shows() {
    let server = MockServer::start().await;
    let c = client(&server).api_key(KEY);
    assert!(!format!("{c:?}").contains(KEY));
    server.push(MockResponse::status(401).error_message("unauthorized"));
    let error =
        final_error(&collect(&c, &ModelRequest::new(vec![Message::user("hi")])).await).unwrap();
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{error:?}").contains(KEY));
    let bad = client(&server).api_key("ollama\nkey");
    let error =
        final_error(&collect(&bad, &ModelRequest::new(vec![Message::user("hi")])).await).unwrap();
    assert!(matches!(error, LlmError::InvalidRequest { .. }));
    assert!(!error.to_string().contains("ollama\nkey"));
}

#[tokio::test]
async fn an_agent_answers_in_text() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::thinking("Easy.", "").then_text("Hello!"));
    let mut agent = Agent::builder(client(&server)).build().unwrap();
    let events: Vec<AgentEvent> = agent.run("hi").collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Hello!");
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::ThinkingDelta { text } if text == "Easy.")));
}

#[tokio::test]
async fn an_agent_runs_a_tool_round_trip() {
    let server = MockServer::start().await;
    // Ollama sends no ids: the mock's calls carry the scripted ones, as current Ollama does;
    // the second turn's call reuses the first one's id, as servers that number calls do.
    server.push(ScriptedResponse::tool_call(
        "call_0",
        "add",
        json!({"a": 1, "b": 2}),
    ));
    server.push(ScriptedResponse::tool_call(
        "call_0",
        "add",
        json!({"a": 3, "b": 4}),
    ));
    server.push(ScriptedResponse::text("3 and 7."));
    let mut agent = Agent::builder(client(&server))
        .tool(add_tool())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("add 1 and 2, then 3 and 4").collect().await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}");
    };
    assert_eq!(outcome.termination, Termination::Completed, "{events:#?}");
    assert_eq!(outcome.final_text, "3 and 7.");
    let results: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["3", "7"]);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );
    let last = requests[2].body["messages"].as_array().unwrap();
    let tool_messages: Vec<&Value> = last.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(
        tool_messages,
        [
            &json!({"role": "tool", "content": "3", "tool_name": "add"}),
            &json!({"role": "tool", "content": "7", "tool_name": "add"})
        ]
    );
    assert_eq!(requests[0].body["tools"][0]["function"]["name"], "add");
}

#[tokio::test]
async fn think_keep_alive_and_tool_result_images() {
    let server = MockServer::start().await;
    let mut request = ModelRequest::new(vec![
        Message::user("screenshot?"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "screenshot".into(),
                input: json!({}),
            }],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result_with_images(
                "c1",
                "here",
                false,
                vec![png()],
            )],
        },
    ]);
    let cases: Vec<(OllamaClient, Option<u32>, Value, Value)> = vec![
        // The request's budget: 0 is off, anything else on; no budget, no `think`.
        (client(&server), Some(0), json!(false), Value::Null),
        (client(&server), None, Value::Null, Value::Null),
        // The client's setting wins over the budget.
        (
            client(&server)
                .think("low")
                .keep_alive(std::time::Duration::from_secs(600)),
            Some(0),
            json!("low"),
            json!(600),
        ),
        (
            client(&server)
                .think(true)
                .keep_alive(std::time::Duration::from_millis(1500)),
            None,
            json!(true),
            json!(1.5),
        ),
        (
            client(&server).keep_alive(OllamaKeepAlive::Forever),
            Some(10),
            json!(true),
            json!(-1),
        ),
    ];
    for (i, (c, budget, think, keep_alive)) in cases.into_iter().enumerate() {
        server.push(ScriptedResponse::text("ok"));
        request.thinking_budget = budget;
        assert_eq!(text_of(&collect(&c, &request).await), "ok", "case {i}");
        let body = server.requests()[i].body.clone();
        assert_eq!(
            body.get("think").cloned().unwrap_or(Value::Null),
            think,
            "case {i}"
        );
        assert_eq!(
            body.get("keep_alive").cloned().unwrap_or(Value::Null),
            keep_alive,
            "case {i}"
        );
        assert_eq!(
            body["messages"][2],
            json!({"role": "tool", "content": "here", "tool_name": "screenshot", "images": [PNG]}),
            "case {i}"
        );
    }
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );
    // An unknown level is refused before sending.
    let items = collect(&client(&server).think("extreme"), &request).await;
    assert!(matches!(
        final_error(&items),
        Some(LlmError::InvalidRequest { .. })
    ));
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test]
async fn call_ids_are_sent_only_when_asked() {
    let server = MockServer::start().await;
    let request = conversation();
    server.push(ScriptedResponse::text("a"));
    server.push(ScriptedResponse::text("b"));
    assert_eq!(text_of(&collect(&client(&server), &request).await), "a");
    let with_ids = client(&server).send_call_ids(true);
    assert_eq!(text_of(&collect(&with_ids, &request).await), "b");
    let requests = server.requests();
    let plain = &requests[0].body["messages"];
    assert!(plain[2]["tool_calls"][0].get("id").is_none());
    assert!(plain[3].get("tool_call_id").is_none());
    let ids = &requests[1].body["messages"];
    assert_eq!(ids[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(ids[2]["tool_calls"][1]["id"], "call_2");
    assert_eq!(ids[3]["tool_call_id"], "call_1");
    assert_eq!(ids[4]["tool_call_id"], "call_2");
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );
}

#[test]
fn an_oversize_line_is_refused_naming_the_limit() {
    let mut limits = agent_loop::wire::StreamLimits::default();
    limits.max_line_bytes = 256;
    let mut decoder = WireDecoder::with_limits(WireFormat::Ollama, limits);
    let mut events = Vec::new();
    let long = format!(
        "{{\"message\":{{\"content\":\"{}\"}},\"done\":false}}\n",
        "x".repeat(300)
    );
    let mut result = Ok(());
    for chunk in long.as_bytes().chunks(16) {
        result = decoder.push(chunk, &mut events);
        if result.is_err() {
            break;
        }
    }
    let error = result.unwrap_err();
    assert!(matches!(error, LlmError::LimitExceeded { .. }), "{error:?}");
    assert!(error.to_string().contains("256"), "{error}");
    assert!(events.is_empty());
}
