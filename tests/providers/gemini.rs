//! Google Gemini through the public API: the stream decoder on fixtures written from the
//! documented `streamGenerateContent?alt=sse` format, chunking, the request body (and its
//! golden file), and `GeminiClient` against the loopback mock server, alone and under an
//! `Agent`.

use crate::common;

use agent_loop::media::MediaSource;
use agent_loop::provider::gemini::AccessToken;
use agent_loop::provider::{ModelRequest, ToolChoice};
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::tool::ToolSpec;
use agent_loop::wire::WireFormat;
use agent_loop::{
    Agent, AgentEvent, ContentBlock, LlmClient, LlmError, LlmEvent, Message, Role, StopReason,
    Termination, Usage,
};
use common::agent::add_tool;
use common::{decode, decode_split, fast_retries, fixture, Decoded};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{json, Value};

const KEY: &str = "AIza-test-0123456789-secret";

fn gemini(name: &str) -> Decoded {
    decode(WireFormat::Gemini, &fixture(&format!("gemini/{name}")))
}

// ----- the decoder on fixtures -----------------------------------------------------------

#[test]
fn text_arrives_in_chunks_of_one_block() {
    let decoded = gemini("text.sse");
    let response = decoded.result.unwrap();
    assert_eq!(response.text(), "The capital of France is Paris.");
    assert_eq!(response.message.content.len(), 1);
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.id, "resp-text-1");
    assert_eq!(response.model, "gemini-2.5-flash");
    assert_eq!(response.usage.input_tokens, 12);
    assert_eq!(response.usage.output_tokens, 7);
    assert!(matches!(
        decoded.events.first(),
        Some(LlmEvent::MessageStart { id, model }) if id == "resp-text-1" && model == "gemini-2.5-flash"
    ));
}

#[test]
fn thoughts_and_a_trailing_signature() {
    let response = gemini("thinking.sse").result.unwrap();
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "**Weighing the question**\n\nThe user asks for a number.".into(),
                signature: String::new(),
            },
            ContentBlock::text("It is 42."),
            // The signature of the last (empty) text part, and that part, kept to go back
            // as they came.
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: "CiQB0e2Kb7sigTEXT==".into(),
            },
            ContentBlock::text(""),
        ]
    );
    // Thoughts are billed as output.
    assert_eq!(response.usage.output_tokens, 125);
    assert_eq!(response.usage.reasoning_tokens, 120);
}

/// Decodes one body of `data:` chunks; the events, and whether the decoder says it is done.
fn gemini_chunks(chunks: &[Value]) -> (Vec<LlmEvent>, bool) {
    let mut decoder = agent_loop::wire::WireDecoder::new(WireFormat::Gemini);
    let mut events = Vec::new();
    for chunk in chunks {
        decoder
            .push(format!("data: {chunk}\r\n\r\n").as_bytes(), &mut events)
            .unwrap();
    }
    (events, decoder.is_done())
}

#[test]
fn each_signed_thought_is_its_own_block_and_keeps_its_text() {
    let thought = |text: &str, signature: &str| {
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": text, "thought": true, "thoughtSignature": signature}
        ]}, "index": 0}]})
    };
    let (events, done) = gemini_chunks(&[
        thought("First.", "c2lnMQ=="),
        thought("Second.", "c2lnMg=="),
    ]);
    assert!(!done, "no finishReason yet");
    let thinking: Vec<(usize, String)> = events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ThinkingDelta { index, thinking } => Some((*index, thinking.clone())),
            LlmEvent::SignatureDelta { index, signature } => Some((*index, signature.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        thinking,
        [
            (0, "First.".to_owned()),
            (0, "c2lnMQ==".to_owned()),
            (1, "Second.".to_owned()),
            (1, "c2lnMg==".to_owned()),
        ]
    );
    let finish = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Done."}]},
        "finishReason": "STOP", "index": 0}]});
    let (_, done) = gemini_chunks(&[thought("First.", "c2lnMQ=="), finish]);
    assert!(done, "a finishReason ends the response");
}

#[test]
fn a_whole_function_call_with_its_signature() {
    let decoded = gemini("tool_call.sse");
    let tool_events: Vec<&LlmEvent> = decoded
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                LlmEvent::ToolCallStart { .. }
                    | LlmEvent::ToolCallDelta { .. }
                    | LlmEvent::BlockStop { index: 1 }
            )
        })
        .collect();
    assert_eq!(
        tool_events,
        vec![
            &LlmEvent::ToolCallStart {
                index: 1,
                id: "gemini_call_resp-text-1_0".into(),
                name: "get_weather".into()
            },
            &LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: r#"{"city":"Paris","unit":"celsius"}"#.into()
            },
            &LlmEvent::BlockStop { index: 1 },
        ]
    );
    let response = decoded.result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content[0],
        ContentBlock::Thinking {
            thinking: String::new(),
            signature: "CiQB0e2Kb7sigCALL==".into()
        }
    );
    let calls: Vec<_> = response.message.tool_uses().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].2, &json!({"city": "Paris", "unit": "celsius"}));
    assert_eq!(response.usage.output_tokens, 48);
}

#[test]
fn parallel_calls_get_their_own_blocks_and_ids() {
    let response = gemini("parallel_tool_calls.sse").result.unwrap();
    let calls: Vec<_> = response
        .message
        .tool_uses()
        .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input["city"].clone()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("fc-1".into(), "get_weather".into(), json!("Paris")),
            ("fc-2".into(), "get_weather".into(), json!("Tokyo")),
        ]
    );
    assert_eq!(response.text(), "Checking both cities.");
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[test]
fn usage_with_cached_and_thought_tokens() {
    let response = gemini("usage_cached.sse").result.unwrap();
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 500,
            output_tokens: 13,
            cache_read_input_tokens: 1500,
            cache_creation_input_tokens: 0,
            reasoning_tokens: 10,
        }
    );
    assert_eq!(response.usage.total_input_tokens(), 2000);
}

#[test]
fn an_in_stream_error_is_a_retryable_stream_error() {
    let error = gemini("error_unavailable.sse").result.unwrap_err();
    match &error {
        LlmError::Stream {
            error_type,
            message,
        } => {
            assert_eq!(error_type, "UNAVAILABLE");
            assert!(message.contains("overloaded"));
        }
        other => panic!("{other:?}"),
    }
    assert!(error.is_retryable());
    for (status, retryable) in [
        ("RESOURCE_EXHAUSTED", true),
        ("INTERNAL", true),
        ("DEADLINE_EXCEEDED", true),
        ("INVALID_ARGUMENT", false),
    ] {
        let body = format!(
            "data: {{\"error\":{{\"code\":1,\"message\":\"m\",\"status\":\"{status}\"}}}}\n\n"
        );
        let error = decode(WireFormat::Gemini, body.as_bytes())
            .result
            .unwrap_err();
        assert_eq!(error.is_retryable(), retryable, "{status}");
    }
}

#[test]
fn a_truncated_body_is_incomplete() {
    let decoded = gemini("truncated.sse");
    assert!(
        matches!(decoded.result, Err(LlmError::Incomplete { .. })),
        "{:?}",
        decoded.result
    );
    let empty = decode(WireFormat::Gemini, b"");
    assert!(matches!(empty.result, Err(LlmError::Incomplete { .. })));
}

#[test]
fn a_blocked_prompt_is_a_content_filter_stop() {
    let response = gemini("blocked_prompt.sse").result.unwrap();
    assert_eq!(response.stop_reason, StopReason::ContentFilter);
    assert!(response.message.content.is_empty());
    assert_eq!(response.usage.input_tokens, 8);
}

#[test]
fn max_tokens() {
    let response = gemini("max_tokens.sse").result.unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert_eq!(response.text(), "A long story that stops");
}

#[test]
fn every_documented_finish_reason_is_mapped() {
    let other = |s: &str| StopReason::Other(s.to_owned());
    let table = [
        ("STOP", StopReason::EndTurn),
        ("MAX_TOKENS", StopReason::MaxTokens),
        ("SAFETY", StopReason::ContentFilter),
        ("RECITATION", StopReason::ContentFilter),
        ("BLOCKLIST", StopReason::ContentFilter),
        ("PROHIBITED_CONTENT", StopReason::ContentFilter),
        ("SPII", StopReason::ContentFilter),
        ("IMAGE_SAFETY", StopReason::ContentFilter),
        ("LANGUAGE", other("LANGUAGE")),
        // MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL and OTHER are errors (the model
        // failed): `a_failed_call_is_a_retryable_error_not_a_stop`.
        ("TOO_MANY_TOOL_CALLS", other("TOO_MANY_TOOL_CALLS")),
        (
            "FINISH_REASON_UNSPECIFIED",
            other("FINISH_REASON_UNSPECIFIED"),
        ),
        ("SOMETHING_NEW", other("SOMETHING_NEW")),
    ];
    for (reason, expected) in table {
        let body = format!(
            "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"x\"}}]}},\"finishReason\":\"{reason}\"}}]}}\n\n"
        );
        let response = decode(WireFormat::Gemini, body.as_bytes()).result.unwrap();
        assert_eq!(response.stop_reason, expected, "{reason}");
    }
}

#[test]
fn lenient_in_what_it_reads() {
    // Unknown fields and parts, a second candidate, events after the end: ignored.
    let body = concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"executableCode\":{\"code\":\"1\"}},{\"text\":\"a\",\"future\":1}]},\"safetyRatings\":[]},{\"index\":1,\"content\":{\"parts\":[{\"text\":\"other\"}]}}],\"newField\":{}}\n\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}]}\n\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"late\"}]}}]}\n\n",
    );
    let response = decode(WireFormat::Gemini, body.as_bytes()).result.unwrap();
    assert_eq!(response.text(), "ab");
    let garbage = decode(WireFormat::Gemini, b"data: {not json\n\n");
    assert!(matches!(garbage.result, Err(LlmError::Malformed { .. })));
}

const FIXTURES: [&str; 9] = [
    "text.sse",
    "thinking.sse",
    "tool_call.sse",
    "parallel_tool_calls.sse",
    "usage_cached.sse",
    "error_unavailable.sse",
    "truncated.sse",
    "blocked_prompt.sse",
    "max_tokens.sse",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Chunking never matters: any cut points give the same events and the same result.
    #[test]
    fn any_chunking_gives_the_same_events(
        which in 0..FIXTURES.len(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let body = fixture(&format!("gemini/{}", FIXTURES[which]));
        let mut offsets: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        offsets.sort_unstable();
        let whole = decode(WireFormat::Gemini, &body);
        let split = decode_split(WireFormat::Gemini, &body, &offsets);
        prop_assert_eq!(split, whole);
    }
}

#[test]
fn single_bytes_give_the_same_events() {
    for name in FIXTURES {
        let body = fixture(&format!("gemini/{name}"));
        let cuts: Vec<usize> = (1..body.len()).collect();
        assert_eq!(
            decode_split(WireFormat::Gemini, &body, &cuts),
            decode(WireFormat::Gemini, &body),
            "{name}"
        );
    }
}

// ----- the request body ------------------------------------------------------------------

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "add".into(),
            description: "Adds two integers.".into(),
            input_schema: json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"]
            }),
        },
        ToolSpec {
            name: "describe_image".into(),
            description: "Describes an image in more or less detail.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"detail": {"type": "string", "enum": ["low", "high"]}},
                "required": ["detail"],
                "additionalProperties": false
            }),
        },
    ]
}

/// The fixed request of the golden file: system prompt, two tools, user text and an image, an
/// assistant tool call (with a thought and a signature), its result, an answer and a
/// follow-up; every generation setting.
fn golden_request() -> ModelRequest {
    let messages = vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is in this picture, and what is 2 + 3?"),
                ContentBlock::Image {
                    source: MediaSource::Base64 {
                        media_type: "image/png".into(),
                        data: PNG.into(),
                    },
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "The user wants a sum.".into(),
                    signature: String::new(),
                },
                ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: "CiQB0e2Kb7sigCALL==".into(),
                },
                ContentBlock::ToolUse {
                    id: "fc-7d2a".into(),
                    name: "add".into(),
                    input: json!({"a": 2, "b": 3}),
                },
                ContentBlock::ToolUse {
                    id: "fc-8e3b".into(),
                    name: "describe_image".into(),
                    input: json!({"detail": "low"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("fc-7d2a", "5", false),
                // A structured result: the `response` object itself.
                ContentBlock::tool_result_json(
                    "fc-8e3b",
                    json!({"colour": "red", "width": 1, "height": 1}),
                ),
            ],
        },
        Message::assistant("A red pixel, and 2 + 3 = 5."),
        Message::user("Thanks! Now multiply them."),
    ];
    let mut request = ModelRequest::new(messages);
    request.system = Some("You are a careful assistant.".into());
    request.tools = tools();
    request.max_tokens = 1024;
    request.temperature = Some(0.7);
    request.top_p = Some(0.9);
    request.stop_sequences = vec!["END".into()];
    request.thinking_budget = Some(512);
    request
}

/// The body a `GeminiClient` sends for `request`, as the mock server received it.
async fn sent_body(request: &ModelRequest) -> Value {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("ok"));
    let client = client(&server);
    let items: Vec<_> = client.stream(request).collect().await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );
    server.requests()[0].body.clone()
}

fn client(server: &MockServer) -> agent_loop::GeminiClient {
    agent_loop::GeminiClient::new(KEY)
        .base_url(server.url())
        .model("gemini-test")
        .retry_policy(fast_retries())
}

#[tokio::test]
async fn golden_request_body() {
    let body = sent_body(&golden_request()).await;
    crate::common::assert_golden("gemini_request.json", &body);
}

#[tokio::test]
async fn the_request_body_in_detail() {
    let body = sent_body(&golden_request()).await;
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "You are a careful assistant."}]})
    );
    let contents = body["contents"].as_array().unwrap();
    let roles: Vec<&str> = contents
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "model", "user", "model", "user"]);
    assert_eq!(
        contents[0]["parts"][1],
        json!({"inlineData": {"mimeType": "image/png", "data": PNG}})
    );
    // The thought goes back as a thought part; the signature on the call it came with.
    assert_eq!(
        contents[1]["parts"],
        json!([
            {"text": "The user wants a sum.", "thought": true},
            {"functionCall": {"id": "fc-7d2a", "name": "add", "args": {"a": 2, "b": 3}},
             "thoughtSignature": "CiQB0e2Kb7sigCALL=="},
            {"functionCall": {"id": "fc-8e3b", "name": "describe_image",
                              "args": {"detail": "low"}}}
        ])
    );
    assert_eq!(
        contents[2]["parts"],
        json!([
            {"functionResponse": {"id": "fc-7d2a", "name": "add",
                                  "response": {"result": "5"}}},
            {"functionResponse": {"id": "fc-8e3b", "name": "describe_image",
                                  "response": {"colour": "red", "width": 1, "height": 1}}}
        ])
    );
    let declarations = &body["tools"][0]["functionDeclarations"];
    assert_eq!(declarations[0]["name"], "add");
    assert!(declarations[0]["parametersJsonSchema"]
        .get("$schema")
        .is_none());
    assert_eq!(
        declarations[1]["parametersJsonSchema"]["additionalProperties"],
        false
    );
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 1024, "temperature": 0.7, "topP": 0.9,
               "stopSequences": ["END"],
               "thinkingConfig": {"thinkingBudget": 512, "includeThoughts": true}})
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    assert!(body.get("model").is_none() && body.get("stream").is_none());
}

#[tokio::test]
async fn tool_choice_errors_and_generated_ids() {
    let mut request = golden_request();
    request.tool_choice = ToolChoice::Tool("add".into());
    let body = sent_body(&request).await;
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["add"]}})
    );
    // A failed tool's result is an `error`; ids the decoder made up are not sent.
    let messages = vec![
        Message::user("go"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "gemini_call_r_0".into(),
                name: "add".into(),
                input: json!({}),
            }],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("gemini_call_r_0", "boom", true)],
        },
    ];
    let mut request = ModelRequest::new(messages);
    request.tools = tools();
    let body = sent_body(&request).await;
    assert_eq!(
        body["contents"][1]["parts"][0],
        json!({"functionCall": {"name": "add", "args": {}}})
    );
    assert_eq!(
        body["contents"][2]["parts"][0],
        json!({"functionResponse": {"name": "add", "response": {"error": "boom"}}})
    );
}

async fn refused(request: &ModelRequest) -> String {
    let server = MockServer::start().await;
    let client = client(&server);
    let items: Vec<_> = client.stream(request).collect().await;
    assert!(server.requests().is_empty(), "nothing is sent");
    match items.as_slice() {
        [Err(LlmError::InvalidRequest { message })] => message.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn extra_may_not_override_what_the_crate_sends() {
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request
        .extra
        .insert("generationConfig".into(), json!({"temperature": 1.0}));
    request.temperature = Some(0.5);
    let message = refused(&request).await;
    assert!(
        message.contains("generationConfig.temperature"),
        "{message}"
    );
    request.extra.clear();
    request.extra.insert("contents".into(), json!([]));
    assert!(refused(&request).await.contains("`contents`"));
    // New fields are merged, also into the crate's objects.
    request.extra.clear();
    request
        .extra
        .insert("generationConfig".into(), json!({"topK": 40}));
    request.extra.insert("safetySettings".into(), json!([]));
    let body = sent_body(&request).await;
    assert_eq!(body["generationConfig"]["topK"], 40);
    assert_eq!(body["generationConfig"]["temperature"], 0.5);
    assert_eq!(body["safetySettings"], json!([]));
}

#[tokio::test]
async fn unsupported_media_and_schemas_are_refused_clearly() {
    let image = |media_type: &str| {
        ModelRequest::new(vec![Message {
            role: Role::User,
            content: vec![ContentBlock::Image {
                source: MediaSource::Base64 {
                    media_type: media_type.into(),
                    data: "R0lGODlhAQABAAAAACw=".into(),
                },
            }],
        }])
    };
    let message = refused(&image("image/gif")).await;
    assert!(message.contains("image/gif"), "{message}");
    let url = ModelRequest::new(vec![Message {
        role: Role::User,
        content: vec![ContentBlock::Image {
            source: MediaSource::Url {
                url: "https://example.com/picture".into(),
            },
        }],
    }]);
    assert!(refused(&url).await.contains("media type"));
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.tools = vec![ToolSpec {
        name: "t".into(),
        description: String::new(),
        input_schema: json!({"type": "string"}),
    }];
    assert!(refused(&request).await.contains("object schema"));
    // A PDF, and an image by URL, go as inlineData and fileData.
    let request = ModelRequest::new(vec![Message {
        role: Role::User,
        content: vec![
            ContentBlock::Document {
                source: MediaSource::Base64 {
                    media_type: "application/pdf".into(),
                    data: "JVBERi0xLjQK".into(),
                },
                title: Some("Report".into()),
            },
            ContentBlock::Image {
                source: MediaSource::Url {
                    url: "https://example.com/a.JPG?x=1".into(),
                },
            },
        ],
    }]);
    let body = sent_body(&request).await;
    assert_eq!(
        body["contents"][0]["parts"],
        json!([
            {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0xLjQK"}},
            {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/a.JPG?x=1"}}
        ])
    );
}

// ----- the client against the mock server ----------------------------------------------

#[tokio::test]
async fn path_and_headers() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("hi"));
    let client = client(&server);
    let items: Vec<_> = client
        .stream(&ModelRequest::new(vec![Message::user("hello")]))
        .collect()
        .await;
    assert!(items.iter().all(Result::is_ok));
    let request = &server.requests()[0];
    assert_eq!(
        request.path,
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    );
    assert_eq!(request.format, Some(WireFormat::Gemini));
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("x-goog-api-key"), Some(KEY));
    assert_eq!(header("content-type"), Some("application/json"));
    assert_eq!(header("accept"), Some("text/event-stream"));
    assert_eq!(header("authorization"), None);
    assert_eq!(client.provider_name(), "gcp.gemini");

    // Vertex AI: the project's path, a bearer token from the source, asked per request.
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("one"));
    server.push(ScriptedResponse::text("two"));
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = calls.clone();
    let token = AccessToken::refreshing(move || {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(format!("ya29.token-{n}"))
    });
    let vertex = agent_loop::GeminiClient::vertex("my-project", "europe-west4", token)
        .base_url(server.url())
        .model("gemini-test");
    for _ in 0..2 {
        let items: Vec<_> = vertex
            .stream(&ModelRequest::new(vec![Message::user("hello")]))
            .collect()
            .await;
        assert!(items.iter().all(Result::is_ok), "{items:?}");
    }
    let requests = server.requests();
    assert_eq!(
        requests[0].path,
        "/v1/projects/my-project/locations/europe-west4/publishers/google/models/gemini-test:streamGenerateContent?alt=sse"
    );
    let auth: Vec<&str> = requests
        .iter()
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(n, _)| n == "authorization")
                .map(|(_, v)| v.as_str())
        })
        .collect();
    assert_eq!(auth, ["Bearer ya29.token-0", "Bearer ya29.token-1"]);
    assert!(!format!("{vertex:?}").contains("ya29"));
    assert_eq!(vertex.provider_name(), "gcp.vertex_ai");
}

#[tokio::test]
async fn errors_carry_google_status_and_never_the_key() {
    let server = MockServer::start().await;
    server.push(
        MockResponse::status(400)
            .error_type("INVALID_ARGUMENT")
            .error_message("API key not valid. Please pass a valid API key."),
    );
    let client = client(&server);
    let items: Vec<_> = client
        .stream(&ModelRequest::new(vec![Message::user("hello")]))
        .collect()
        .await;
    let error = match items.as_slice() {
        [Err(error)] => error.clone(),
        other => panic!("{other:?}"),
    };
    match &error {
        LlmError::Api(api) => {
            assert_eq!(api.status, 400);
            assert_eq!(api.error_type.as_deref(), Some("INVALID_ARGUMENT"));
        }
        other => panic!("{other:?}"),
    }
    assert!(!error.is_retryable());
    for shown in [
        error.to_string(),
        format!("{error:?}"),
        format!("{client:?}"),
        format!("{:?}", server.requests()),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
    }
    // A connection refused names the URL, which has no key in it.
    let closed = agent_loop::GeminiClient::new(KEY)
        .base_url("http://127.0.0.1:1")
        .model("m")
        .retry_policy(agent_loop::provider::transport::RetryPolicy::none());
    let items: Vec<_> = closed
        .stream(&ModelRequest::new(vec![Message::user("hello")]))
        .collect()
        .await;
    let shown = format!("{items:?}");
    assert!(!shown.contains(KEY), "{shown}");
}

#[tokio::test]
async fn an_in_stream_error_after_content_reaches_the_caller() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::text("partial").then_fail(LlmError::Stream {
            error_type: "INTERNAL".into(),
            message: "An internal error has occurred.".into(),
        }),
    );
    let client = client(&server);
    let items: Vec<_> = client
        .stream(&ModelRequest::new(vec![Message::user("hello")]))
        .collect()
        .await;
    match items.last() {
        Some(Err(LlmError::Stream { error_type, .. })) => assert_eq!(error_type, "INTERNAL"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_whole_json_answer_is_decoded() {
    let server = MockServer::start().await;
    server.push(MockResponse::json(
        ScriptedResponse::text("whole").then_tool_call("c1", "add", json!({"a": 1})),
    ));
    let client = client(&server);
    let items: Vec<_> = client
        .stream(&ModelRequest::new(vec![Message::user("hello")]))
        .collect()
        .await;
    let events: Vec<LlmEvent> = items.into_iter().map(Result::unwrap).collect();
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.text(), "whole");
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.tool_uses().count(), 1);
}

#[tokio::test]
async fn an_agent_answers_in_text() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("Hello from Gemini").usage_tokens(5, 3));
    let mut agent = Agent::builder(client(&server)).build().unwrap();
    let (events, outcome) = common::agent::run(&mut agent, "hi").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Hello from Gemini");
    assert_eq!(outcome.usage.input_tokens, 5);
    assert_eq!(outcome.usage.output_tokens, 3);
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::TextDelta { text } if text.contains("Gemini"))));
}

#[tokio::test]
async fn an_agent_round_trips_a_tool_call_with_its_signature() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::thinking("I should add.", "sig-thought")
            .then_thinking("", "sig-call")
            .then_tool_call("fc-1", "add", json!({"a": 2, "b": 3})),
    );
    server.push(ScriptedResponse::text("2 + 3 = 5"));
    let mut agent = Agent::builder(client(&server))
        .tool(add_tool())
        .build()
        .unwrap();
    let (_, outcome) = common::agent::run(&mut agent, "add 2 and 3").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "2 + 3 = 5");
    assert!(
        server.history_violations().is_empty(),
        "{:?}",
        server.history_violations()
    );
    common::agent::assert_valid(&agent);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let contents = requests[1].body["contents"].as_array().unwrap().clone();
    assert_eq!(
        contents[1]["parts"],
        json!([
            {"text": "I should add.", "thought": true, "thoughtSignature": "sig-thought"},
            {"functionCall": {"id": "fc-1", "name": "add", "args": {"a": 2, "b": 3}},
             "thoughtSignature": "sig-call"}
        ])
    );
    assert_eq!(
        contents[2]["parts"],
        json!([{"functionResponse": {"id": "fc-1", "name": "add",
                                     "response": {"result": "5"}}}])
    );
}

#[tokio::test]
async fn the_mock_refuses_what_gemini_refuses() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("never"));
    let client = client(&server).retry_policy(agent_loop::provider::transport::RetryPolicy::none());
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.tools = vec![ToolSpec {
        name: "9lives".into(),
        description: String::new(),
        input_schema: json!({"type": "object", "properties": {"a": {"type": "string"}}}),
    }];
    let items: Vec<_> = client.stream(&request).collect().await;
    match items.as_slice() {
        [Err(LlmError::Api(api))] => {
            assert_eq!(api.status, 400);
            assert_eq!(api.error_type.as_deref(), Some("INVALID_ARGUMENT"));
            assert!(api.message.contains("Invalid function name"), "{api:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.remaining(), 1);
}

// ----- untrusted input ------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes never panic: they decode to events or to an error.
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(WireFormat::Gemini, &body);
    }

    /// Fixtures with bytes changed never panic either, and JSON that parses but has fields
    /// of the wrong type is an error, not a crash.
    #[test]
    fn mutated_fixtures_never_panic(
        which in 0..FIXTURES.len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut body = fixture(&format!("gemini/{}", FIXTURES[which]));
        for (at, byte) in edits {
            let i = at.index(body.len());
            body[i] = byte;
        }
        let _ = decode(WireFormat::Gemini, &body);
    }
}

#[test]
fn wrong_types_and_oversize_events_are_clear_errors() {
    let body =
        b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":7}}]}}]}\n\n";
    assert!(matches!(
        decode(WireFormat::Gemini, body).result,
        Err(LlmError::Malformed { .. })
    ));
    let mut limits = agent_loop::wire::StreamLimits::default();
    limits.max_event_bytes = 64;
    let mut decoder = agent_loop::wire::WireDecoder::with_limits(WireFormat::Gemini, limits);
    let big = format!(
        "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{}\"}}]}}}}]}}\n\n",
        "x".repeat(500)
    );
    let mut events = Vec::new();
    let error = decoder.push(big.as_bytes(), &mut events).unwrap_err();
    assert!(matches!(error, LlmError::LimitExceeded { .. }), "{error:?}");
}

#[tokio::test]
async fn a_zero_thinking_budget_turns_thinking_off() {
    let mut request = ModelRequest::new(vec![Message::user("hi")]);
    request.thinking_budget = Some(0);
    let body = sent_body(&request).await;
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 0})
    );
}

#[tokio::test]
async fn vertex_gets_no_call_ids() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call(
        "fc-1",
        "add",
        json!({"a": 1, "b": 2}),
    ));
    server.push(ScriptedResponse::text("3"));
    let client = agent_loop::GeminiClient::vertex("p", "us-central1", "ya29.t")
        .base_url(server.url())
        .model("gemini-test");
    let mut agent = Agent::builder(client).tool(add_tool()).build().unwrap();
    let (_, outcome) = common::agent::run(&mut agent, "add").await;
    assert_eq!(outcome.final_text, "3");
    assert!(server.history_violations().is_empty());
    let body = &server.requests()[1].body;
    assert_eq!(
        body["contents"][1]["parts"][0],
        json!({"functionCall": {"name": "add", "args": {"a": 1, "b": 2}}})
    );
    assert_eq!(
        body["contents"][2]["parts"][0],
        json!({"functionResponse": {"name": "add", "response": {"result": "3"}}})
    );
}

#[tokio::test]
async fn an_agent_retries_a_stream_cut_after_content() {
    let server = MockServer::start().await;
    server.push(
        MockResponse::stream(ScriptedResponse::text("Hello there, partial").chunked(4))
            .disconnect_after_first_content(),
    );
    server.push(ScriptedResponse::text("Hello again, whole"));
    let mut agent = Agent::builder(client(&server)).build().unwrap();
    let (events, outcome) = common::agent::run(&mut agent, "hi").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Hello again, whole");
    let retries: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retry { error, .. } => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 1, "{events:?}");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn whole_bodies_object_array_and_error() {
    let decode_json = |body: &str| {
        let mut events = Vec::new();
        agent_loop::wire::WireDecoder::new(WireFormat::Gemini)
            .decode_json(body.as_bytes(), &mut events)
            .map(|()| events)
    };
    // generateContent: one response object.
    let events = decode_json(
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"},{"functionCall":{"name":"f","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2},"responseId":"r9"}"#,
    )
    .unwrap();
    let response = common::assemble(&events).unwrap();
    assert_eq!(response.text(), "Hi");
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.tool_uses().next().unwrap().0,
        "gemini_call_r9_0"
    );
    // streamGenerateContent without alt=sse: a JSON array of chunks.
    let events = decode_json(
        r#"[{"candidates":[{"content":{"parts":[{"text":"a"}]}}]},{"candidates":[{"content":{"parts":[{"text":"b"}]},"finishReason":"STOP"}]}]"#,
    )
    .unwrap();
    assert_eq!(common::assemble(&events).unwrap().text(), "ab");
    // An error body, and a body that is not a complete answer.
    let error =
        decode_json(r#"{"error":{"code":500,"message":"boom","status":"INTERNAL"}}"#).unwrap_err();
    assert!(matches!(error, LlmError::Stream { ref error_type, .. } if error_type == "INTERNAL"));
    assert!(decode_json(r#"{"candidates":[]}"#).is_err());
    assert!(decode_json("42").is_err());
}

// ----- thought signatures back on their parts (issue 42) ----------------------------------

/// The assistant message a Gemini body decodes to, sent back in the next request (after the
/// user's question, with an answer for each of its calls): that request's model content.
fn resent_parts(body: &[u8], cuts: &[usize]) -> Option<Value> {
    let response = decode_split(WireFormat::Gemini, body, cuts)
        .result
        .expect("the body decodes");
    if response.message.content.is_empty() {
        return None;
    }
    let calls: Vec<(String, String)> = response
        .message
        .tool_uses()
        .map(|(id, name, _)| (id.to_owned(), name.to_owned()))
        .collect();
    let mut messages = vec![Message::user("go"), response.message.clone()];
    let mut after = Message::user("next");
    if !calls.is_empty() {
        after.content = calls
            .iter()
            .map(|(id, _)| ContentBlock::tool_result(id.clone(), "ok", false))
            .collect();
    }
    messages.push(after);
    let mut request = ModelRequest::new(messages);
    let mut names: Vec<&str> = calls.iter().map(|(_, n)| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    request.tools = names
        .iter()
        .map(|name| ToolSpec {
            name: (*name).to_owned(),
            description: String::new(),
            input_schema: json!({"type": "object",
                                 "properties": {"x": {"type": "integer"}}}),
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sent = runtime.block_on(sent_body(&request));
    let model = sent["contents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["role"] == "model")
        .map_or(json!([]), |c| c["parts"].clone());
    Some(model)
}

#[test]
fn a_signature_on_an_empty_text_part_stays_on_it() {
    let body = concat!(
        "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[",
        "{\"text\":\"\",\"thoughtSignature\":\"sig1\"},",
        "{\"functionCall\":{\"name\":\"add\",\"args\":{\"x\":1}}}",
        "]},\"finishReason\":\"STOP\"}],\"responseId\":\"r\"}\r\n\r\n"
    );
    let parts = resent_parts(body.as_bytes(), &[]).unwrap();
    assert_eq!(
        parts,
        json!([
            {"text": "", "thoughtSignature": "sig1"},
            {"functionCall": {"name": "add", "args": {"x": 1}}}
        ])
    );
}

/// One part of a generated Gemini response.
#[derive(Debug, Clone, PartialEq)]
enum GPart {
    Text(String, Option<String>),
    Thought(String, Option<String>),
    Call(String, Value, Option<String>),
}

impl GPart {
    fn to_json(&self) -> Value {
        let (mut part, signature) = match self {
            GPart::Text(text, s) => (json!({ "text": text }), s),
            GPart::Thought(text, s) => (json!({"text": text, "thought": true}), s),
            GPart::Call(name, args, s) => {
                (json!({"functionCall": {"name": name, "args": args}}), s)
            }
        };
        if let Some(signature) = signature {
            part["thoughtSignature"] = json!(signature);
        }
        part
    }

    fn from_json(part: &Value) -> GPart {
        let signature = part["thoughtSignature"].as_str().map(str::to_owned);
        if let Some(call) = part.get("functionCall") {
            return GPart::Call(
                call["name"].as_str().unwrap().to_owned(),
                call["args"].clone(),
                signature,
            );
        }
        let text = part["text"].as_str().expect("a text part").to_owned();
        if part["thought"] == json!(true) {
            GPart::Thought(text, signature)
        } else {
            GPart::Text(text, signature)
        }
    }

    fn signed(&self) -> bool {
        matches!(
            self,
            GPart::Text(_, Some(_)) | GPart::Thought(_, Some(_)) | GPart::Call(_, _, Some(_))
        )
    }
}

/// Parts as Gemini means them, whatever the streaming: unsigned empty text and thought parts
/// carry nothing; consecutive unsigned text parts are one text; unsigned thought parts are
/// one thought with the thought part after them (the part that closes the run carries its
/// signature). Signed parts are never merged with what follows them.
fn normalized(parts: &[GPart]) -> Vec<GPart> {
    let mut out: Vec<GPart> = Vec::new();
    for part in parts {
        let empty_unsigned = match part {
            GPart::Text(t, None) | GPart::Thought(t, None) => t.is_empty(),
            _ => false,
        };
        if empty_unsigned {
            continue;
        }
        match (out.last_mut(), part) {
            (Some(GPart::Text(a, None)), GPart::Text(b, None)) => a.push_str(b),
            (Some(GPart::Thought(a, None)), GPart::Thought(b, signature)) => {
                a.push_str(b);
                let merged = GPart::Thought(std::mem::take(a), signature.clone());
                *out.last_mut().unwrap() = merged;
            }
            _ => out.push(part.clone()),
        }
    }
    out
}

fn gpart() -> impl Strategy<Value = GPart> {
    let text = prop_oneof![Just(String::new()), "[a-z ]{1,6}"];
    let signature = prop::option::of("[A-Za-z0-9+/]{1,8}=?");
    prop_oneof![
        3 => (text.clone(), signature.clone()).prop_map(|(t, s)| GPart::Text(t, s)),
        2 => (text, signature.clone()).prop_map(|(t, s)| GPart::Thought(t, s)),
        2 => ("add|mul|look_up", any::<i8>(), signature)
            .prop_map(|(n, x, s)| GPart::Call(n, json!({ "x": x }), s)),
    ]
}

/// The SSE body of `parts` sent in chunks that end after the given part counts, the last
/// one with `finishReason`.
fn gemini_body(parts: &[GPart], ends: &[usize]) -> Vec<u8> {
    let mut bounds: Vec<usize> = ends.iter().map(|e| e % (parts.len() + 1)).collect();
    bounds.push(parts.len());
    bounds.sort_unstable();
    bounds.dedup();
    let mut body = Vec::new();
    let mut start = 0;
    for (i, end) in bounds.iter().enumerate() {
        let chunk: Vec<Value> = parts[start..*end].iter().map(GPart::to_json).collect();
        let mut candidate = json!({"content": {"role": "model", "parts": chunk}, "index": 0});
        if i + 1 == bounds.len() {
            candidate["finishReason"] = json!("STOP");
        }
        let event = json!({"candidates": [candidate], "responseId": "r-1"});
        body.extend_from_slice(format!("data: {event}\r\n\r\n").as_bytes());
        start = *end;
    }
    body
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The differential check: any stream of text, empty text, thought and call parts, with and
    /// without signatures, chunked into events and bytes at random, decoded, assembled and
    /// sent back in the next request, gives back every part that carries something, and
    /// every signature on the part it came with, in order.
    #[test]
    fn every_signature_goes_back_on_its_part(
        parts in proptest::collection::vec(gpart(), 1..8),
        ends in proptest::collection::vec(any::<usize>(), 0..4),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let body = gemini_body(&parts, &ends);
        let mut offsets: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        offsets.sort_unstable();
        let expected = normalized(&parts);
        let Some(sent) = resent_parts(&body, &offsets) else {
            prop_assert!(expected.is_empty(), "nothing came back of {:?}", parts);
            return Ok(());
        };
        let sent: Vec<GPart> = sent.as_array().unwrap().iter().map(GPart::from_json).collect();
        prop_assert_eq!(normalized(&sent), expected.clone());
        let signatures = |p: &[GPart]| p.iter().filter(|p| p.signed()).count();
        prop_assert_eq!(signatures(&sent), signatures(&parts));
    }
}

// ----- a function call the model got wrong (issue 42) -------------------------------------

/// A Gemini body that ends with `reason` and nothing usable.
fn failed_body(reason: &str) -> Vec<u8> {
    format!(
        "data: {{\"candidates\":[{{\"content\":{{\"role\":\"model\",\"parts\":[]}},\
         \"finishReason\":\"{reason}\",\"finishMessage\":\"Malformed function call: \
         print(default_api.add(a=2, b=))\",\"index\":0}}],\"responseId\":\"r-bad\"}}\r\n\r\n"
    )
    .into_bytes()
}

#[test]
fn a_failed_call_is_a_retryable_error_not_a_stop() {
    for reason in ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "OTHER"] {
        let decoded = decode(WireFormat::Gemini, &failed_body(reason));
        let error = decoded.result.unwrap_err();
        assert!(error.is_retryable(), "{reason}: {error:?}");
        assert!(error.to_string().contains(reason), "{error}");
    }
}

#[tokio::test]
async fn a_malformed_call_is_sent_again_with_a_note() {
    let server = MockServer::start().await;
    server.push(MockResponse::raw(
        200,
        "text/event-stream",
        failed_body("MALFORMED_FUNCTION_CALL"),
    ));
    server.push(ScriptedResponse::text("2 + 3 = 5"));
    let mut agent = Agent::builder(client(&server))
        .tool(add_tool())
        .build()
        .unwrap();
    let (events, outcome) = common::agent::run(&mut agent, "add 2 and 3").await;
    assert_eq!(outcome.termination, Termination::Completed, "{events:#?}");
    assert_eq!(outcome.final_text, "2 + 3 = 5");
    let retries: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Retry { error, .. } => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 1, "{events:#?}");
    assert!(
        retries[0].contains("MALFORMED_FUNCTION_CALL"),
        "{retries:?}"
    );
    assert!(server.history_violations().is_empty());
    common::agent::assert_valid(&agent);
    // The turn went again with a note that names what went wrong.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let last = requests[1].body["contents"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    let note = last["parts"].as_array().unwrap().last().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(note.contains("malformed"), "{note}");
}

#[tokio::test]
async fn a_call_that_stays_malformed_ends_the_run_saying_so() {
    let server = MockServer::start().await;
    for _ in 0..12 {
        server.push(MockResponse::raw(
            200,
            "text/event-stream",
            failed_body("MALFORMED_FUNCTION_CALL"),
        ));
    }
    let mut agent = Agent::builder(client(&server))
        .tool(add_tool())
        .build()
        .unwrap();
    let (_, outcome) = common::agent::run(&mut agent, "add 2 and 3").await;
    match &outcome.termination {
        Termination::Error(error) => {
            let text = error.to_string();
            assert!(text.contains("MALFORMED_FUNCTION_CALL"), "{text}");
            assert!(text.contains("malformed"), "{text}");
        }
        other => panic!("not an error: {other:?}"),
    }
    common::agent::assert_valid(&agent);
}

// ----- structured tool results (issue 42) -------------------------------------------------

#[tokio::test]
async fn a_json_tool_result_goes_as_the_response_object() {
    let server = MockServer::start().await;
    server.push(
        ScriptedResponse::tool_call("fc-1", "stats", json!({})).then_tool_call(
            "fc-2",
            "primes",
            json!({}),
        ),
    );
    server.push(ScriptedResponse::text("done"));
    let stats =
        agent_loop::tool::FnTool::new("stats", "Statistics.", |_: Value, _ctx| async move {
            Ok::<_, agent_loop::ToolError>(agent_loop::ToolOutput::json(
                json!({"mean": 2.5, "values": [2, 3], "label": "x"}),
            ))
        })
        .input_schema(json!({"type": "object", "properties": {}}));
    let primes = agent_loop::tool::FnTool::new("primes", "Primes.", |_: Value, _ctx| async move {
        Ok::<_, agent_loop::ToolError>(agent_loop::ToolOutput::json(json!([2, 3, 5])))
    })
    .input_schema(json!({"type": "object", "properties": {}}));
    let mut agent = Agent::builder(client(&server))
        .tool(stats)
        .tool(primes)
        .build()
        .unwrap();
    let (_, outcome) = common::agent::run(&mut agent, "stats").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert!(server.history_violations().is_empty());
    let body = &server.requests()[1].body;
    assert_eq!(
        body["contents"][2]["parts"],
        json!([
            {"functionResponse": {"id": "fc-1", "name": "stats",
                                  "response": {"mean": 2.5, "values": [2, 3], "label": "x"}}},
            {"functionResponse": {"id": "fc-2", "name": "primes",
                                  "response": {"result": [2, 3, 5]}}}
        ])
    );
    // The history keeps the text form for the formats that take only text.
    let (content, _) = common::agent::result_in_history(&agent, "fc-2");
    assert_eq!(content, "[2,3,5]");
}
