//! Images and documents through the public API: the request bodies both clients send (checked
//! against the shapes the providers document, and by the mock server, which refuses what the
//! real APIs refuse), tool results with images, snapshot and restore, token counting, and
//! compaction dropping old images first.

use agent_loop::context::{CompactionStrategy, ContextConfig};
use agent_loop::media::{Document, Image, ImageTokenRule, MediaError, MediaSource};
use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{
    Agent, AnthropicClient, ContentBlock, ContextManager, Error, LlmError, Message, OpenAiClient,
    Role, Termination, ToolError, ToolOutput, UserInput,
};
use base64::Engine as _;
use serde_json::{json, Value};

use crate::common;
use common::agent::run_input;
use common::fast_retries;

/// A PNG header of a `w`×`h` image (all the crate and the mock read).
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    b
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

const PDF: &[u8] = b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF";

/// A tool that returns a chart image with its text.
fn chart_tool() -> impl agent_loop::Tool {
    FnTool::new("chart", "Draws a chart.", |_: Value, _ctx| async move {
        let chart = Image::png(&png(64, 32)).map_err(|e| ToolError::new(e.to_string()))?;
        Ok::<_, ToolError>(ToolOutput::with_images("the chart", vec![chart]))
    })
}

fn question() -> UserInput {
    UserInput::text("What is in these?")
        .image(Image::png(&png(10, 20)).unwrap())
        .image(Image::from_url("https://example.com/cat.jpg").unwrap())
        .document(Document::pdf(PDF).unwrap().title("Invoice"))
}

/// `value` without its `cache_control` fields (prompt caching puts them on the last block of
/// the latest user messages; they are checked elsewhere).
fn without_cache_control(mut value: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("cache_control");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}

#[tokio::test]
async fn anthropic_bodies_carry_image_and_document_blocks_as_documented() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call("toolu_1", "chart", json!({})));
    server.push(ScriptedResponse::text("A cat, an invoice and a chart."));
    let client = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("claude-test")
        .retry_policy(fast_retries());
    let mut agent = Agent::builder(client).tool(chart_tool()).build().unwrap();
    let (_, outcome) = run_input(&mut agent, question()).await;
    assert_eq!(outcome.termination, Termination::Completed, "{outcome:?}");

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the mock refused nothing");
    let first = without_cache_control(requests[0].body["messages"][0].clone());
    // https://docs.anthropic.com/en/docs/build-with-claude/vision and /pdf-support
    assert_eq!(
        first,
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(&png(10, 20))}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": b64(PDF)}, "title": "Invoice"}
        ]})
    );
    // A tool's image goes inside its tool_result, after the text.
    let result = without_cache_control(requests[1].body["messages"][2]["content"][0].clone());
    assert_eq!(
        result,
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "the chart"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(&png(64, 32))}}
        ]})
    );
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn openai_bodies_carry_image_url_and_file_parts_and_tool_images_after_the_results() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call("call_1", "chart", json!({})));
    server.push(ScriptedResponse::text("A cat, an invoice and a chart."));
    let client = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("gpt-test")
        .retry_policy(fast_retries());
    let mut agent = Agent::builder(client).tool(chart_tool()).build().unwrap();
    let (_, outcome) = run_input(&mut agent, question()).await;
    assert_eq!(outcome.termination, Termination::Completed, "{outcome:?}");

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "the mock refused nothing");
    // https://platform.openai.com/docs/guides/images-vision and /pdf-files
    assert_eq!(
        requests[0].body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&png(10, 20)))}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            {"type": "file", "file": {"filename": "Invoice",
                                      "file_data": format!("data:application/pdf;base64,{}", b64(PDF))}}
        ]})
    );
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    // Tool messages take text only: the image follows in a user message, labelled.
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "the chart"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Images returned by tool call call_1:"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&png(64, 32)))}}
        ]})
    );
    assert!(server.history_violations().is_empty());
}

#[tokio::test]
async fn an_image_over_anthropics_limit_fails_before_anything_is_sent() {
    let server = MockServer::start().await;
    let client = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    let mut agent = Agent::builder(client).build().unwrap();
    // 6 MB of base64: Image accepts it (under 32 MB), Anthropic's 5 MB limit does not.
    let mut big = png(100, 100);
    big.resize(4_600_000, 0);
    let input = UserInput::text("look").image(Image::png(&big).unwrap());
    let (_, outcome) = run_input(&mut agent, input).await;
    match &outcome.termination {
        Termination::Error(Error::Llm(LlmError::InvalidRequest { message })) => {
            assert!(message.contains("5 MB"), "{message}")
        }
        other => panic!("expected an invalid request, got {other:?}"),
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn the_mock_refuses_an_image_whose_bytes_are_not_its_media_type_as_anthropic_does() {
    // A block built by hand (not through Image) that claims JPEG but holds PNG bytes.
    let server = MockServer::start().await;
    let client = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("claude-test")
        .retry_policy(fast_retries());
    let mut agent = Agent::builder(client).build().unwrap();
    let forged = ContentBlock::Image {
        source: MediaSource::Base64 {
            media_type: "image/jpeg".into(),
            data: b64(&png(1, 1)),
        },
    };
    let (_, outcome) = run_input(&mut agent, UserInput::text("look").block(forged)).await;
    match &outcome.termination {
        Termination::Error(Error::Llm(LlmError::Api(api))) => {
            assert_eq!(api.status, 400);
            assert!(api.message.contains("does not match"), "{}", api.message);
        }
        other => panic!("expected the mock's 400, got {other:?}"),
    }
}

#[tokio::test]
async fn openai_cannot_fetch_a_document_url_and_says_so() {
    let server = MockServer::start().await;
    let client = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("gpt-test");
    let mut agent = Agent::builder(client).build().unwrap();
    let input =
        UserInput::text("read").document(Document::from_url("https://x.test/a.pdf").unwrap());
    let (_, outcome) = run_input(&mut agent, input).await;
    assert!(
        matches!(&outcome.termination, Termination::Error(Error::Llm(LlmError::InvalidRequest { message })) if message.contains("URL")),
        "{:?}",
        outcome.termination
    );
    assert!(server.requests().is_empty());
}

#[test]
fn bad_media_gets_a_clear_error_before_anything_is_sent() {
    let p = png(2, 2);
    let err = Image::from_bytes("image/jpeg", &p).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the bytes are not image/jpeg: their header says image/png"
    );
    assert!(matches!(
        Image::from_bytes("image/svg+xml", &p),
        Err(MediaError::UnsupportedMediaType(t)) if t == "image/svg+xml"
    ));
    assert!(matches!(
        Image::png(b"GIF89a\x01\0\x01\0"),
        Err(MediaError::Mismatch { .. })
    ));
    assert!(matches!(
        Document::pdf(&p),
        Err(MediaError::Mismatch { .. })
    ));
    assert!(matches!(
        Image::from_url("javascript:alert(1)"),
        Err(MediaError::InvalidUrl(_))
    ));
    // The crate error converts from it.
    let e: Error = err.into();
    assert!(matches!(e, Error::Media(_)));
}

#[tokio::test]
async fn history_snapshot_and_restore_carry_images_faithfully() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "chart", json!({})),
        ScriptedResponse::text("done"),
    ]);
    let mut agent = Agent::builder(client).tool(chart_tool()).build().unwrap();
    let (_, outcome) = run_input(&mut agent, question()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let messages = agent.messages();
    assert!(matches!(
        &messages[0].content[1],
        ContentBlock::Image { .. }
    ));
    let ContentBlock::ToolResult { images, .. } = &messages[2].content[0] else {
        panic!("{:?}", messages[2]);
    };
    assert_eq!(images.len(), 1);

    let stored = serde_json::to_string(&agent.snapshot()).unwrap();
    let mut other = Agent::builder(ScriptedClient::new([])).build().unwrap();
    other
        .restore(serde_json::from_str(&stored).unwrap())
        .unwrap();
    assert_eq!(*other.messages(), *messages);
}

#[test]
fn token_counts_follow_each_providers_image_rule() {
    let with_image = |rule: ImageTokenRule, w: u32, h: u32| {
        let mut cm = ContextManager::new(ContextConfig::default().image_tokens(rule));
        let before = {
            let mut plain = cm.clone();
            plain.push(Message::user("x"));
            plain.token_count()
        };
        cm.push(
            UserInput::text("x")
                .image(Image::png(&png(w, h)).unwrap())
                .into_message(),
        );
        cm.token_count() - before
    };
    assert_eq!(with_image(ImageTokenRule::Anthropic, 1000, 1000), 1334);
    assert_eq!(with_image(ImageTokenRule::OpenAi, 1024, 1024), 765);
    assert_eq!(with_image(ImageTokenRule::OpenAi, 4096, 2048), 1105);
    // By model name.
    assert_eq!(
        ContextConfig::for_model("claude-sonnet-4-5").image_tokens,
        ImageTokenRule::Anthropic
    );
    assert_eq!(
        ContextConfig::for_model("gpt-4.1").image_tokens,
        ImageTokenRule::OpenAi
    );
}

#[tokio::test]
async fn compaction_drops_old_images_first_and_leaves_a_placeholder() {
    let config = ContextConfig::default()
        .context_window(6_000)
        .output_reserve(1_000)
        .keep_recent_turns(1)
        .image_tokens(ImageTokenRule::Anthropic);
    let mut cm = ContextManager::new(config);
    for turn in 0..4 {
        let input =
            UserInput::text(format!("look {turn}")).image(Image::png(&png(1000, 1000)).unwrap());
        cm.push(input.into_message());
        cm.push(Message::assistant(format!("seen {turn}")));
    }
    assert!(cm.needs_compaction(), "{} tokens", cm.token_count());
    let report = cm.compact(None).await.unwrap().expect("a compaction");
    assert_eq!(report.strategy, CompactionStrategy::DropOldImages);
    let images: Vec<usize> = cm
        .messages()
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::Image { .. }))
        })
        .map(|(i, _)| i)
        .collect();
    // The latest turn keeps its image; the older ones lost theirs, their text stayed.
    assert_eq!(images, [6]);
    assert_eq!(cm.messages()[0].role, Role::User);
    assert_eq!(
        cm.messages()[0].text(),
        "look 0[image removed to save context]"
    );
    assert!(report.tokens_after < report.tokens_before);
}

/// One old turn with an image, a titled PDF and a tool result with an image; a newer turn
/// with a small image; and the current turn.
fn media_history(target: f32) -> ContextManager {
    let config = ContextConfig::default()
        .context_window(6_000)
        .output_reserve(1_000)
        .keep_recent_turns(1)
        .compaction_target(target)
        .image_tokens(ImageTokenRule::Anthropic);
    let mut cm = ContextManager::new(config);
    let big = || Image::png(&png(1000, 1000)).unwrap();
    cm.push(
        UserInput::text("read")
            .image(big())
            .document(Document::pdf(PDF).unwrap().title("Q3"))
            .into_message(),
    );
    cm.push(Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: "c1".into(),
            name: "shot".into(),
            input: json!({}),
        }],
    });
    cm.push_tool_results(vec![ContentBlock::tool_result_with_images(
        "c1",
        "result",
        false,
        vec![big().into_source()],
    )]);
    cm.push(Message::assistant("seen"));
    cm.push(
        UserInput::text("and this")
            .image(Image::png(&png(400, 400)).unwrap())
            .into_message(),
    );
    cm.push(Message::assistant("small"));
    cm.push(Message::user("now"));
    cm
}

#[tokio::test]
async fn compaction_drops_media_oldest_first_and_only_as_much_as_needed() {
    // Dropping the first message's image and document is enough.
    let mut cm = media_history(0.4);
    let before = cm.token_count();
    let report = cm.compact(None).await.unwrap().expect("a compaction");
    assert_eq!(report.strategy, CompactionStrategy::DropOldImages);
    assert_eq!(
        cm.messages()[0].content,
        [
            ContentBlock::text("read"),
            ContentBlock::text("[image removed to save context]"),
            ContentBlock::text("[document \"Q3\" removed to save context]"),
        ]
    );
    let ContentBlock::ToolResult { images, .. } = &cm.messages()[2].content[0] else {
        panic!()
    };
    assert_eq!(
        images.len(),
        1,
        "the next media stays: the target was reached"
    );
    assert!(matches!(
        cm.messages()[4].content[1],
        ContentBlock::Image { .. }
    ));
    // The count follows what was removed (1334 + 2250 tokens of media).
    assert!(
        before - cm.token_count() > 3_000,
        "{before} -> {}",
        cm.token_count()
    );
    assert_eq!(report.tokens_after, cm.token_count());

    // A lower target takes every old image, the tool's too; the text stays.
    let mut cm = media_history(0.05);
    cm.compact(None).await.unwrap().expect("a compaction");
    let ContentBlock::ToolResult {
        images, content, ..
    } = &cm.messages()[2].content[0]
    else {
        panic!()
    };
    assert!(images.is_empty());
    assert!(content.starts_with("result\n[1 image removed"), "{content}");
    assert_eq!(
        cm.messages()[4].text(),
        "and this[image removed to save context]"
    );
    // The current turn is never touched.
    assert_eq!(cm.messages().last().unwrap().text(), "now");
}
