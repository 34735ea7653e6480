//! ContextManager through the public API: the history invariant, token counting, usage
//! anchoring, compaction, summarization, persistence and repair.

use std::sync::{Arc, Mutex};

use agent_loop::agent::LlmSummarizer;
use agent_loop::context::{
    CharEstimateCounter, CompactionStrategy, ContextConfig, Conversation, Summarizer,
    TiktokenCounter, TokenCounter,
};
use agent_loop::provider::{LlmStream, ModelRequest};
use agent_loop::{
    ContentBlock, ContextManager, Error, LlmClient, LlmEvent, Message, Role, StopReason, Usage,
};
use async_trait::async_trait;
use proptest::prelude::*;
use serde_json::json;

// ----- helpers -----

fn manager(config: ContextConfig) -> ContextManager {
    ContextManager::new(config).with_counter(CharEstimateCounter)
}

fn call(id: &str) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: "read_file".into(),
        input: json!({"path": format!("/src/{id}.rs")}),
    }
}

fn result(id: &str, content: impl Into<String>) -> ContentBlock {
    ContentBlock::tool_result(id, content, false)
}

fn assistant(content: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::Assistant,
        content,
    }
}

fn user(content: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::User,
        content,
    }
}

fn thinking(text: &str) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: text.into(),
        signature: "sig-abc".into(),
    }
}

/// The message of a context error (its `Display`, which names what is wrong).
fn context_error(e: &Error) -> String {
    match e {
        Error::Context(e) => e.to_string(),
        other => panic!("expected Error::Context, got {other:?}"),
    }
}

/// Indices of plain user requests (user messages with no tool results), i.e. turn starts.
fn turn_starts(messages: &[Message]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(i, m)| {
            *i == 0
                || (m.role == Role::User
                    && !m
                        .content
                        .iter()
                        .any(|b| matches!(b, ContentBlock::ToolResult { .. })))
        })
        .map(|(i, _)| i)
        .collect()
}

/// A fresh manager holding the same conversation: its estimate is a full recount.
fn recount(cm: &ContextManager) -> usize {
    let mut fresh = manager(cm.config().clone());
    fresh.set_system(cm.system().map(str::to_owned));
    for m in cm.messages() {
        fresh.push(m.clone());
    }
    assert_eq!(fresh.messages(), cm.messages());
    fresh.estimated_tokens()
}

/// Summarizes with a fixed text and records every span it was given.
#[derive(Default)]
struct RecordingSummarizer {
    spans: Mutex<Vec<Vec<Message>>>,
}

#[async_trait]
impl Summarizer for RecordingSummarizer {
    async fn summarize(&self, span: &[Message]) -> Result<String, Error> {
        self.spans.lock().unwrap().push(span.to_vec());
        Ok(format!(
            "The user and assistant exchanged {} messages.",
            span.len()
        ))
    }
}

/// An LlmClient that answers every request with the same scripted events.
struct ScriptedClient {
    events: Vec<LlmEvent>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedClient {
    fn new(events: Vec<LlmEvent>) -> Arc<Self> {
        Arc::new(ScriptedClient {
            events,
            requests: Mutex::new(Vec::new()),
        })
    }

    fn text_reply(text: &str, stop_reason: StopReason) -> Arc<Self> {
        Self::new(vec![
            LlmEvent::MessageStart {
                id: "msg_1".into(),
                model: "m".into(),
            },
            LlmEvent::TextDelta {
                index: 0,
                text: text.into(),
            },
            LlmEvent::BlockStop { index: 0 },
            LlmEvent::Usage(Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            }),
            LlmEvent::MessageStop { stop_reason },
        ])
    }
}

impl LlmClient for ScriptedClient {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
        self.requests.lock().unwrap().push(request.clone());
        Box::pin(futures::stream::iter(
            self.events.clone().into_iter().map(Ok),
        ))
    }
}

/// A conversation of `turns` turns, each a request, one tool round trip and an answer.
fn conversation(cm: &mut ContextManager, turns: usize, output_bytes: usize) {
    for t in 0..turns {
        cm.push_user_text(format!("request {t}: please look at file {t}"));
        let id = format!("call_{t}");
        cm.push(assistant(vec![
            thinking("let me read it"),
            ContentBlock::text("Reading."),
            call(&id),
        ]));
        cm.push_tool_results(vec![result(&id, "x".repeat(output_bytes))]);
        cm.push(Message::assistant(format!("answer {t}")));
    }
}

// ----- the history invariant -----

#[test]
fn a_well_formed_history_validates() {
    let mut cm = manager(ContextConfig::default());
    assert!(cm.validate().is_ok(), "an empty history is valid");
    cm.push_user_text("list the files");
    cm.push(assistant(vec![thinking("two calls"), call("a"), call("b")]));
    cm.push_tool_results(vec![result("a", "1"), result("b", "2")]);
    cm.push(Message::assistant("done"));
    cm.validate().unwrap();
}

#[test]
fn push_merges_same_role_messages_keeping_results_first() {
    let mut cm = manager(ContextConfig::default());
    cm.push_user_text("one");
    cm.push_user_text("two");
    assert_eq!(cm.len(), 1);
    assert_eq!(cm.messages()[0].text(), "onetwo");
    cm.push(assistant(vec![call("a")]));
    // The user interjects before the tool result arrives: the result still goes first.
    cm.push_user_text("hurry up");
    cm.push_tool_results(vec![result("a", "ok")]);
    assert_eq!(cm.len(), 3);
    assert!(matches!(
        cm.messages()[2].content[0],
        ContentBlock::ToolResult { .. }
    ));
    cm.validate().unwrap();
}

fn rejects(build: impl FnOnce(&mut ContextManager), needle: &str) {
    let mut cm = manager(ContextConfig::default());
    build(&mut cm);
    let err = cm.validate().expect_err(needle);
    let msg = context_error(&err);
    assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
}

#[test]
fn validate_rejects_each_kind_of_invalid_history() {
    rejects(|cm| cm.push(Message::assistant("hi")), "first message");
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![]));
        },
        "empty",
    );
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(Message::assistant(""));
        },
        "empty",
    );
    // An unanswered tool call followed by plain user text.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a")]));
            cm.push_user_text("never mind");
        },
        "must answer",
    );
    // Parallel calls partly answered.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a"), call("b")]));
            cm.push_tool_results(vec![result("a", "1")]);
        },
        "must answer",
    );
    // Answered out of order.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a"), call("b")]));
            cm.push_tool_results(vec![result("b", "2"), result("a", "1")]);
        },
        "in order",
    );
    // Answered twice.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a")]));
            cm.push_tool_results(vec![result("a", "1"), result("a", "1")]);
        },
        "must answer",
    );
    // A result without its call.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(Message::assistant("no tools"));
            cm.push_tool_results(vec![result("z", "1")]);
        },
        "answer no tool call",
    );
    rejects(
        |cm| cm.push_tool_results(vec![result("z", "1")]),
        "answer no tool call",
    );
    // Duplicate tool call ids across the history.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a")]));
            cm.push_tool_results(vec![result("a", "1")]);
            cm.push(assistant(vec![call("a")]));
            cm.push_tool_results(vec![result("a", "1")]);
        },
        "not unique",
    );
    // The last message calls tools that have no results.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a")]));
        },
        "no results",
    );
    // A tool result after text in the same message.
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![call("a")]));
            cm.push(user(vec![ContentBlock::text("note"), result("a", "1")]));
        },
        "must come first",
    );
    // Blocks in the wrong role.
    rejects(
        |cm| cm.push(user(vec![call("a")])),
        "user message with a tool call",
    );
    rejects(|cm| cm.push(user(vec![thinking("hm")])), "thinking");
    rejects(
        |cm| {
            cm.push_user_text("hi");
            cm.push(assistant(vec![result("a", "1")]));
        },
        "assistant message with a tool result",
    );
}

// ----- repair -----

#[test]
fn repair_answers_parallel_calls_partly_answered_in_model_order() {
    let mut cm = manager(ContextConfig::default());
    cm.push_user_text("do three things");
    cm.push(assistant(vec![
        thinking("three calls"),
        call("a"),
        call("b"),
        call("c"),
    ]));
    cm.push_tool_results(vec![result("b", "B done")]);
    assert!(cm.validate().is_err());
    assert_eq!(cm.repair(), 2);
    cm.validate().unwrap();
    let results = &cm.messages()[2].content;
    assert_eq!(
        results,
        &vec![
            ContentBlock::tool_result("a", "interrupted: the tool call did not complete", true),
            result("b", "B done"),
            ContentBlock::tool_result("c", "interrupted: the tool call did not complete", true),
        ]
    );
    // The thinking block goes back unmodified.
    assert_eq!(cm.messages()[1].content[0], thinking("three calls"));
    assert_eq!(cm.repair(), 0, "repair is idempotent");
}

#[test]
fn repair_adds_a_result_message_after_a_trailing_tool_call_and_drops_an_empty_answer() {
    let mut cm = manager(ContextConfig::default());
    cm.push_user_text("go");
    cm.push(assistant(vec![call("a"), call("b")]));
    assert_eq!(cm.repair(), 2);
    cm.validate().unwrap();
    assert_eq!(cm.len(), 3);
    assert_eq!(cm.messages()[2].role, Role::User);

    // A response that was cancelled before any content leaves an empty assistant message.
    let mut cm = manager(ContextConfig::default());
    cm.push_user_text("go");
    cm.push(assistant(vec![]));
    assert_eq!(cm.repair(), 0);
    assert_eq!(cm.len(), 1);
    cm.validate().unwrap();
    // The count follows the repair.
    assert_eq!(cm.estimated_tokens(), recount(&cm));
}

#[test]
fn repair_keeps_user_text_sent_after_an_interrupted_call() {
    let mut cm = manager(ContextConfig::default());
    cm.push_user_text("go");
    cm.push(assistant(vec![call("a")]));
    cm.push_user_text("stop, do something else");
    assert_eq!(cm.repair(), 1);
    cm.validate().unwrap();
    let last = &cm.messages()[2];
    assert!(matches!(
        &last.content[0],
        ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id == "a"
    ));
    assert_eq!(last.text(), "stop, do something else");
}

// ----- persistence -----

#[test]
fn snapshot_round_trips_through_json_losslessly() {
    let mut cm = manager(ContextConfig::default()).with_system("be brief");
    cm.push_user_text("héllo 日本");
    cm.push(assistant(vec![
        thinking("hmm"),
        ContentBlock::RedactedThinking {
            data: "opaque==".into(),
        },
        ContentBlock::Other(json!({"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"q": "x"}})),
        call("a"),
    ]));
    cm.push(user(vec![ContentBlock::tool_result("a", "boom", true)]));
    cm.push(Message::assistant("sorry"));
    let json = serde_json::to_string(&cm.snapshot()).unwrap();
    let back: Conversation = serde_json::from_str(&json).unwrap();
    assert_eq!(back, cm.snapshot());

    let mut restored = manager(ContextConfig::default());
    assert_eq!(restored.restore(back).unwrap(), 0);
    assert_eq!(restored.snapshot(), cm.snapshot());
    assert_eq!(restored.system(), Some("be brief"));
    assert_eq!(restored.estimated_tokens(), cm.estimated_tokens());
}

#[test]
fn restore_repairs_an_interrupted_run_and_refuses_what_it_cannot_fix() {
    let conversation =
        Conversation::new(None, vec![Message::user("go"), assistant(vec![call("a")])]);
    let mut cm = manager(ContextConfig::default());
    assert_eq!(cm.restore(conversation).unwrap(), 1);
    cm.validate().unwrap();

    let before = cm.snapshot();
    let bad = Conversation::new(Some("sys".into()), vec![Message::assistant("hi")]);
    let err = cm.restore(bad).unwrap_err();
    assert!(context_error(&err).contains("first message"));
    assert_eq!(cm.snapshot(), before, "a refused restore changes nothing");
}

// ----- token counting -----

#[test]
fn tiktoken_counts_o200k_tokens() {
    let counter = TiktokenCounter::new();
    TiktokenCounter::warm_up();
    assert_eq!(counter.count(""), 0);
    assert_eq!(counter.count("hello world"), 2);
    assert!(counter.count("日本語のテキスト") >= 3);
    // Long texts are counted in pieces; the total stays close to a one-piece count.
    let prose = "The quick brown fox jumps over the lazy dog. ".repeat(3000);
    let n = counter.count(&prose);
    assert!((29_000..=31_000).contains(&n), "{n}");
    // Adversarial input neither panics nor takes long.
    assert!(counter.count(&" ".repeat(200_000)) > 0);
    assert!(counter.count(&"a".repeat(200_000)) > 0);

    // A new context estimates (bytes/3) until it grows or is asked to count exactly.
    let mut cm = ContextManager::new(ContextConfig::default());
    cm.push_user_text("hello world");
    assert!(!cm.counts_exactly());
    assert_eq!(cm.estimated_tokens(), 4 + 4);
    cm.count_exactly();
    assert_eq!(
        cm.estimated_tokens(),
        2 + 4,
        "text plus the per-message overhead"
    );
}

#[test]
fn cached_count_after_many_appends_equals_a_full_recount() {
    let mut cm = manager(ContextConfig::default()).with_system("system prompt");
    conversation(&mut cm, 50, 300);
    // Merges, truncation and repair along the way.
    cm.push_user_text("a");
    cm.push_user_text("b");
    cm.truncate(150);
    cm.push(assistant(vec![call("late")]));
    cm.repair();
    assert_eq!(cm.estimated_tokens(), recount(&cm));
    assert_eq!(cm.token_count(), cm.estimated_tokens(), "no usage recorded");
}

#[test]
fn usage_anchors_the_count_of_the_prefix_the_provider_saw() {
    let mut cm = manager(ContextConfig::default()).with_system("sys");
    cm.push_user_text("first question");
    let usage = Usage {
        input_tokens: 700,
        cache_read_input_tokens: 250,
        cache_creation_input_tokens: 50,
        output_tokens: 99,
        ..Usage::default()
    };
    // The response to a request holding 1 message.
    cm.push(Message::assistant("first answer"));
    cm.record_usage(&usage, 1);
    assert_eq!(
        cm.token_count(),
        1000 + (cm.estimated_tokens() - recount_prefix(&cm, 1))
    );

    // Messages added since are estimated on top of the provider's figure.
    cm.push_user_text("second question, a longer one");
    let added = cm.estimated_tokens() - recount_prefix(&cm, 1);
    assert_eq!(cm.token_count(), 1000 + added);

    // A later response re-anchors.
    cm.record_usage(
        &Usage {
            input_tokens: 2000,
            ..Usage::default()
        },
        3,
    );
    assert_eq!(cm.token_count(), 2000);

    // Unusable figures are ignored.
    cm.record_usage(&Usage::default(), 3);
    cm.record_usage(
        &Usage {
            input_tokens: 5,
            ..Usage::default()
        },
        99,
    );
    assert_eq!(cm.token_count(), 2000);
}

/// The estimate of the system prompt plus the first `n` messages.
fn recount_prefix(cm: &ContextManager, n: usize) -> usize {
    let mut fresh = manager(cm.config().clone());
    fresh.set_system(cm.system().map(str::to_owned));
    for m in &cm.messages()[..n] {
        fresh.push(m.clone());
    }
    fresh.estimated_tokens()
}

// ----- compaction -----

#[tokio::test]
async fn under_the_threshold_nothing_happens() {
    let mut cm = manager(ContextConfig::default());
    conversation(&mut cm, 3, 100);
    let before = cm.snapshot();
    assert!(!cm.needs_compaction());
    assert!(cm.compact(None).await.unwrap().is_none());
    assert_eq!(cm.snapshot(), before);
}

#[tokio::test]
async fn long_tool_outputs_are_cut_first() {
    let config = ContextConfig::default()
        .context_window(10_000)
        .output_reserve(1_000)
        .tool_output_cap(2_000);
    let mut cm = manager(config);
    cm.push_user_text("read the log");
    cm.push(assistant(vec![call("a")]));
    cm.push_tool_results(vec![result("a", format!("HEAD{}TAIL", "x".repeat(60_000)))]);
    assert!(cm.needs_compaction());
    let report = cm.compact(None).await.unwrap().unwrap();
    assert_eq!(report.strategy, CompactionStrategy::TruncateToolOutputs);
    assert!(report.tokens_after < report.tokens_before);
    assert_eq!(report.tokens_after, cm.token_count());
    let ContentBlock::ToolResult { content, .. } = &cm.messages()[2].content[0] else {
        panic!("tool result expected");
    };
    assert!(content.len() <= 2_000);
    assert!(content.starts_with("HEAD") && content.ends_with("TAIL"));
    assert!(content.contains("bytes of tool output cut to save context"));
    cm.validate().unwrap();
}

#[tokio::test]
async fn old_tool_outputs_are_elided_before_anything_is_summarized() {
    let config = ContextConfig::default()
        .context_window(12_000)
        .output_reserve(2_000)
        .keep_recent_turns(2)
        // The strategies of old, just under the threshold.
        .compact_to_threshold();
    let mut cm = manager(config);
    conversation(&mut cm, 9, 4_000);
    cm.push_user_text("and now?");
    assert!(cm.needs_compaction());
    let summarizer = RecordingSummarizer::default();
    let report = cm.compact(Some(&summarizer)).await.unwrap().unwrap();
    assert_eq!(report.strategy, CompactionStrategy::ElideOldToolResults);
    assert!(summarizer.spans.lock().unwrap().is_empty());
    assert!(report.tokens_after <= cm.config().threshold_tokens());
    let elided = cm
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolResult { content, .. } if content == "[tool output elided to save context: 4000 bytes]"))
        .count();
    assert!(elided >= 1);
    // The recent turns keep their outputs.
    let last_result = cm.messages()[cm.len() - 3].content[0].clone();
    assert_eq!(last_result, result("call_8", "x".repeat(4_000)));
    cm.validate().unwrap();
}

#[tokio::test]
async fn the_summarizer_receives_exactly_the_span_it_replaces() {
    let config = ContextConfig::default()
        .context_window(3_000)
        .output_reserve(500)
        .keep_recent_turns(2)
        .compact_to_threshold();
    let mut cm = manager(config).with_system("system stays");
    // Long texts (not tool outputs), so (a) and (b) cannot help.
    for t in 0..6 {
        cm.push_user_text(format!("request {t} {}", "words ".repeat(200)));
        cm.push(assistant(vec![thinking("plan"), call(&format!("c{t}"))]));
        cm.push_tool_results(vec![result(&format!("c{t}"), "ok")]);
        cm.push(Message::assistant(format!(
            "answer {t} {}",
            "more ".repeat(100)
        )));
    }
    cm.push_user_text("the latest request, kept word for word");
    let original = cm.messages().to_vec();
    let starts = turn_starts(&original);
    let cut = starts[starts.len() - 2];

    let summarizer = RecordingSummarizer::default();
    let report = cm.compact(Some(&summarizer)).await.unwrap().unwrap();
    assert_eq!(report.strategy, CompactionStrategy::Summarize);
    let spans = summarizer.spans.lock().unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0], original[..cut]);

    // The summary opens the first kept user message; everything after is untouched.
    let first = &cm.messages()[0];
    assert_eq!(first.role, Role::User);
    let ContentBlock::Text { text } = &first.content[0] else {
        panic!("summary text expected");
    };
    assert!(text.contains(&format!("exchanged {cut} messages")));
    assert_eq!(first.content[1..], original[cut].content[..]);
    assert_eq!(cm.messages()[1..], original[cut + 1..]);
    assert_eq!(cm.system(), Some("system stays"));
    assert_eq!(
        cm.messages().last().unwrap().text(),
        "the latest request, kept word for word"
    );
    cm.validate().unwrap();
    assert_eq!(cm.estimated_tokens(), recount(&cm));
}

#[tokio::test]
async fn without_a_summarizer_the_oldest_turns_are_dropped() {
    let config = ContextConfig::default()
        .context_window(3_000)
        .output_reserve(500)
        .keep_recent_turns(2);
    let mut cm = manager(config);
    for t in 0..6 {
        cm.push_user_text(format!("request {t} {}", "words ".repeat(300)));
        cm.push(Message::assistant(format!("answer {t}")));
    }
    cm.push_user_text("latest");
    let report = cm.compact(None).await.unwrap().unwrap();
    assert_eq!(report.strategy, CompactionStrategy::DropOldestTurns);
    assert!(report.tokens_after <= cm.config().threshold_tokens());
    assert!(cm.messages()[0].text().starts_with("request "));
    assert_eq!(cm.messages().last().unwrap().text(), "latest");
    cm.validate().unwrap();
}

#[tokio::test]
async fn a_current_turn_too_large_for_the_window_is_an_error_that_says_why() {
    let config = ContextConfig::default()
        .context_window(1_000)
        .output_reserve(200)
        .compact_to_threshold();
    let mut cm = manager(config);
    cm.push_user_text("old");
    cm.push(Message::assistant("old answer"));
    cm.push_user_text("x".repeat(10_000));
    let err = cm.compact(None).await.unwrap_err();
    let msg = context_error(&err);
    assert!(msg.contains("current turn"), "{msg}");
    assert!(msg.contains("800"), "names the budget: {msg}");
    // What could go went; the history is still valid.
    assert_eq!(cm.len(), 1);
    cm.validate().unwrap();
}

#[tokio::test]
async fn compact_harder_goes_below_the_reactive_target() {
    let config = ContextConfig::default()
        .context_window(20_000)
        .output_reserve(2_000)
        .keep_recent_turns(1);
    let mut cm = manager(config);
    conversation(&mut cm, 10, 1_000);
    cm.push_user_text("next");
    // Under our threshold, yet the provider said the prompt is too long.
    assert!(!cm.needs_compaction());
    let before = cm.token_count();
    let report = cm.compact_harder(None).await.unwrap();
    assert_eq!(report.tokens_before, before);
    assert!(report.tokens_after <= before * 6 / 10, "{report:?}");
    cm.validate().unwrap();
}

#[tokio::test]
async fn compaction_keeps_the_anchor_ratio() {
    let config = ContextConfig::default()
        .context_window(10_000)
        .output_reserve(1_000)
        .keep_recent_turns(1);
    let mut cm = manager(config);
    conversation(&mut cm, 6, 3_000);
    cm.push_user_text("next");
    // The provider counts twice what we estimate.
    let est = cm.estimated_tokens();
    cm.record_usage(
        &Usage {
            input_tokens: 2 * est as u64,
            ..Usage::default()
        },
        cm.len(),
    );
    assert_eq!(cm.token_count(), 2 * est);
    let report = cm.compact(None).await.unwrap().unwrap();
    assert_eq!(report.tokens_before, 2 * est);
    let after_est = cm.estimated_tokens();
    assert!(
        report.tokens_after.abs_diff(2 * after_est) <= 1,
        "{report:?} vs {after_est}"
    );
}

// ----- LlmSummarizer -----

#[tokio::test]
async fn llm_summarizer_sends_a_transcript_and_returns_the_finished_summary() {
    let client = ScriptedClient::text_reply("They talked about files.", StopReason::EndTurn);
    let summarizer = LlmSummarizer::new(client.clone())
        .model("small-model")
        .max_tokens(500);
    let span = vec![
        Message::user("please read main.rs"),
        assistant(vec![thinking("secret plan"), call("a")]),
        user(vec![result("a", "fn main() {}")]),
        Message::assistant("It is empty."),
    ];
    let summary = summarizer.summarize(&span).await.unwrap();
    assert_eq!(summary, "They talked about files.");
    let requests = client.requests.lock().unwrap();
    let request = &requests[0];
    assert_eq!(request.model.as_deref(), Some("small-model"));
    assert_eq!(request.max_tokens, 500);
    assert!(request.system.is_some());
    assert!(request.tools.is_empty());
    assert_eq!(request.messages.len(), 1);
    let transcript = request.messages[0].text();
    assert!(transcript.contains("please read main.rs"));
    assert!(transcript.contains("read_file"));
    assert!(transcript.contains("fn main() {}"));
    assert!(!transcript.contains("secret plan"));
}

#[tokio::test]
async fn a_summary_cut_off_by_max_tokens_is_refused() {
    let client = ScriptedClient::text_reply("They talked ab", StopReason::MaxTokens);
    let summarizer = LlmSummarizer::new(client);
    let err = summarizer
        .summarize(&[Message::user("hi"), Message::assistant("hello")])
        .await
        .unwrap_err();
    assert!(context_error(&err).contains("max_tokens"));

    // Compaction surfaces the error and does not use the partial summary.
    let config = ContextConfig::default()
        .context_window(3_000)
        .output_reserve(500)
        .keep_recent_turns(1);
    let mut cm = manager(config);
    for t in 0..4 {
        cm.push_user_text(format!("request {t} {}", "words ".repeat(400)));
        cm.push(Message::assistant(format!("answer {t}")));
    }
    cm.push_user_text("latest");
    let before = cm.snapshot();
    let err = cm.compact(Some(&summarizer)).await.unwrap_err();
    assert!(context_error(&err).contains("max_tokens"));
    assert_eq!(cm.snapshot(), before);
    assert!(!cm
        .messages()
        .iter()
        .any(|m| m.text().contains("They talked ab")));
}

#[tokio::test]
async fn a_summary_stream_that_fails_or_ends_early_is_an_error() {
    let client = ScriptedClient::new(vec![LlmEvent::TextDelta {
        index: 0,
        text: "partial".into(),
    }]);
    let err = LlmSummarizer::new(client)
        .summarize(&[Message::user("hi")])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Llm(_)), "{err:?}");
}

#[test]
fn compaction_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let mut cm = manager(ContextConfig::default());
    let summarizer = RecordingSummarizer::default();
    let fut = cm.compact(Some(&summarizer));
    assert_send(&fut);
    drop(fut);
    let fut = cm.compact_harder(None);
    assert_send(&fut);
}

// ----- the property: compaction keeps the history valid and within budget -----

#[derive(Debug, Clone)]
enum Block {
    Text(usize),
    Thinking(usize),
}

#[derive(Debug, Clone)]
struct Step {
    /// Assistant blocks before its tool calls.
    prelude: Vec<Block>,
    /// Sizes of the outputs of the parallel tool calls (0 calls = a final answer).
    outputs: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Turn {
    request: usize,
    steps: Vec<Step>,
    answered: bool,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 1usize..200, 2 => 200usize..3_000, 1 => 3_000usize..40_000]
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        size().prop_map(Block::Text),
        (1usize..500).prop_map(Block::Thinking)
    ]
}

fn turn() -> impl Strategy<Value = Turn> {
    let step = (
        prop::collection::vec(block(), 0..3),
        prop::collection::vec(size(), 1..4),
    )
        .prop_map(|(prelude, outputs)| Step { prelude, outputs });
    (size(), prop::collection::vec(step, 0..4), any::<bool>()).prop_map(
        |(request, steps, answered)| Turn {
            request,
            steps,
            answered,
        },
    )
}

fn build(cm: &mut ContextManager, turns: &[Turn]) {
    let mut next_id = 0;
    for (t, turn) in turns.iter().enumerate() {
        cm.push_user_text(format!("request {t}: {}", "r".repeat(turn.request)));
        for step in &turn.steps {
            let mut content: Vec<ContentBlock> = step
                .prelude
                .iter()
                .map(|b| match b {
                    Block::Text(n) => ContentBlock::text("t".repeat(*n)),
                    Block::Thinking(n) => thinking(&"h".repeat(*n)),
                })
                .collect();
            let ids: Vec<String> = step
                .outputs
                .iter()
                .map(|_| {
                    next_id += 1;
                    format!("toolu_{next_id}")
                })
                .collect();
            content.extend(ids.iter().map(|id| call(id)));
            cm.push(assistant(content));
            cm.push_tool_results(
                ids.iter()
                    .zip(&step.outputs)
                    .map(|(id, n)| result(id, "o".repeat(*n)))
                    .collect(),
            );
        }
        // The last turn is the current request: answered only if it is not the last.
        if turn.answered && t + 1 < turns.len() {
            cm.push(Message::assistant(format!("answer {t}")));
        }
    }
}

fn budget() -> impl Strategy<Value = ContextConfig> {
    (
        300u32..60_000,
        0u32..40,
        50u32..=95,
        0u32..5,
        prop_oneof![Just(256u32), Just(2_048), Just(16_384)],
    )
        .prop_map(|(window, reserve_pct, threshold, keep, cap)| {
            ContextConfig::default()
                .context_window(window)
                .output_reserve(window * reserve_pct / 100)
                .compaction_threshold(threshold as f32 / 100.0)
                .keep_recent_turns(keep)
                .tool_output_cap(cap)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_history_valid_and_within_budget(
        turns in prop::collection::vec(turn(), 1..10),
        config in budget(),
        use_summarizer in any::<bool>(),
        anchor_factor in prop::option::of(50u64..200),
        harder in any::<bool>(),
        water_marks in any::<bool>(),
    ) {
        let config = if water_marks { config } else { config.compact_to_threshold() };
        let mut cm = manager(config.clone()).with_system("You are a careful agent.");
        build(&mut cm, &turns);
        prop_assert!(cm.validate().is_ok(), "{:?}", cm.validate());
        prop_assert_eq!(cm.estimated_tokens(), recount(&cm));
        if let Some(f) = anchor_factor {
            let real = cm.estimated_tokens() as u64 * f / 100;
            cm.record_usage(&Usage { input_tokens: real, ..Usage::default() }, cm.len());
        }
        let original = cm.messages().to_vec();
        let original_starts = turn_starts(&original);
        let current = *original_starts.last().unwrap();
        let latest_request = original[current].clone();

        let summarizer = RecordingSummarizer::default();
        let s: Option<&dyn Summarizer> = if use_summarizer { Some(&summarizer) } else { None };
        let threshold = config.threshold_tokens();
        let budget = config.input_budget();
        let outcome = futures::executor::block_on(async {
            if harder {
                cm.compact_harder(s).await.map(Some)
            } else {
                cm.compact(s).await
            }
        });

        // Whatever happened, the history is valid and the count consistent.
        prop_assert!(cm.validate().is_ok(), "{:?}", cm.validate());
        prop_assert_eq!(cm.estimated_tokens(), recount(&cm));
        let starts = turn_starts(cm.messages());
        let last_start = &cm.messages()[*starts.last().unwrap()];
        if water_marks {
            // The current request is kept word for word, with at most a note before or after.
            prop_assert!(last_start
                .content
                .windows(latest_request.content.len())
                .any(|w| w == &latest_request.content[..]));
            // The head is kept word for word, with at most a note after it, unless the oldest
            // steps of the current turn had to go and the head is that turn's request.
            if original_starts.len() > 1 || cm.messages()[0].content.len() <= original[0].content.len() + 1 {
                prop_assert_eq!(
                    &cm.messages()[0].content[..original[0].content.len()],
                    &original[0].content[..]
                );
            }
            match outcome {
                Ok(Some(report)) => {
                    prop_assert_eq!(report.tokens_after, cm.token_count());
                    let limit = if harder { config.reactive_tokens() } else { budget };
                    prop_assert!(cm.token_count() <= limit, "{:?} over {}", report, limit);
                }
                Ok(None) => {
                    prop_assert!(cm.token_count() <= threshold);
                    prop_assert_eq!(cm.messages(), &original[..]);
                }
                Err(e) => prop_assert!(context_error(&e).contains("current turn")),
            }
            return Ok(());
        }
        // The current request is kept word for word (a summary may precede it).
        prop_assert!(last_start.content.ends_with(&latest_request.content));
        // The current turn loses at most whole tool steps from its start (a call message and
        // its results); the assistant messages that stay are untouched.
        let kept_tail = &cm.messages()[*starts.last().unwrap() + 1..];
        let original_tail = &original[current + 1..];
        prop_assert!(kept_tail.len() <= original_tail.len());
        let dropped = original_tail.len() - kept_tail.len();
        prop_assert_eq!(dropped % 2, 0);
        for (now, was) in kept_tail.iter().zip(&original_tail[dropped..]) {
            if now.role == Role::Assistant {
                prop_assert_eq!(now, was);
            }
        }
        match outcome {
            Ok(None) => {
                prop_assert!(!harder);
                prop_assert!(cm.token_count() <= threshold);
                prop_assert_eq!(cm.messages(), &original[..]);
            }
            Ok(Some(report)) => {
                prop_assert_eq!(report.tokens_after, cm.token_count());
                let limit = if harder { config.reactive_tokens() } else { budget };
                prop_assert!(cm.token_count() <= limit, "{:?} over {}", report, limit);
                if !harder && starts.len() > 1 {
                    // More than the current turn is left: the target was reached.
                    prop_assert!(cm.token_count() <= threshold, "{:?}", report);
                }
            }
            Err(e) => {
                let msg = context_error(&e);
                prop_assert!(msg.contains("current turn"), "{}", msg);
                // Only the current turn is left, and it does not fit.
                prop_assert_eq!(starts.len(), 1);
                if !harder {
                    prop_assert!(cm.token_count() > budget);
                }
            }
        }
        // The summarizer only ever saw whole turns from the start of the history (their tool
        // outputs possibly cut or elided by the earlier strategies).
        for span in summarizer.spans.lock().unwrap().iter() {
            prop_assert!(!span.is_empty());
            prop_assert!(original_starts.contains(&span.len()));
            for (seen, was) in span.iter().zip(&original) {
                prop_assert_eq!(seen.role, was.role);
                if seen.role == Role::Assistant {
                    prop_assert_eq!(seen, was);
                }
            }
        }
    }

    #[test]
    fn incremental_count_matches_a_recount(turns in prop::collection::vec(turn(), 1..8), cut in any::<prop::sample::Index>()) {
        let mut cm = manager(ContextConfig::default()).with_system("sys");
        build(&mut cm, &turns);
        prop_assert_eq!(cm.estimated_tokens(), recount(&cm));
        let n = cut.index(cm.len() + 1);
        cm.truncate(n);
        cm.repair();
        prop_assert_eq!(cm.estimated_tokens(), recount(&cm));
    }
}

/// An agent run is often one long turn: its oldest tool steps can be elided and dropped.
#[tokio::test]
async fn one_long_turn_is_compacted_by_eliding_and_dropping_its_oldest_steps() {
    use agent_loop::{ContentBlock, Message, Role};
    let step = |cm: &mut ContextManager, i: usize, input: &str, output: &str| {
        cm.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: format!("t{i}"),
                name: "tool".into(),
                input: serde_json::json!({ "data": input }),
            }],
        });
        cm.push(Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(format!("t{i}"), output, false)],
        });
    };
    // Large outputs: eliding all but the latest result is enough.
    let mut cm = ContextManager::new(ContextConfig::default().compact_to_threshold())
        .with_counter(CharEstimateCounter);
    cm.push(Message::user("do the task"));
    for i in 0..6 {
        step(&mut cm, i, "small", &"log line\n".repeat(500));
    }
    let before = cm.token_count();
    let report = cm.compact_harder(None).await.unwrap();
    assert!(report.tokens_after <= before * 6 / 10, "{report:?}");
    cm.validate().unwrap();
    assert_eq!(cm.messages().len(), 13, "nothing dropped");

    // Large inputs: the oldest steps themselves must go; the request and the latest step stay.
    let mut cm = ContextManager::new(ContextConfig::default().compact_to_threshold())
        .with_counter(CharEstimateCounter);
    cm.push(Message::user("do the task"));
    for i in 0..6 {
        step(&mut cm, i, &"x".repeat(4000), "ok");
    }
    let report = cm.compact_harder(None).await.unwrap();
    assert_eq!(report.strategy, CompactionStrategy::DropOldestTurns);
    cm.validate().unwrap();
    let first = &cm.messages()[0];
    assert!(first.text().ends_with("do the task"));
    assert!(
        first
            .text()
            .contains("earlier tool step(s) of this task were removed"),
        "{}",
        first.text()
    );
    let last_call = cm
        .messages()
        .iter()
        .rev()
        .find_map(|m| m.tool_uses().next().map(|(id, _, _)| id.to_owned()));
    assert_eq!(last_call.as_deref(), Some("t5"), "the latest step is kept");
}

// ----- cache-aware compaction (water marks) -----

/// A task with `steps` tool steps of `bytes`-byte outputs, in one turn.
fn long_task(cm: &mut ContextManager, steps: usize, bytes: usize) {
    cm.push_user_text("the first task, kept word for word");
    for i in 0..steps {
        cm.push(assistant(vec![call(&format!("s{i}"))]));
        cm.push_tool_results(vec![result(&format!("s{i}"), "y".repeat(bytes))]);
    }
}

#[tokio::test]
async fn water_marks_elide_the_oldest_results_first_and_keep_the_prefix_before_them() {
    let config = ContextConfig::default()
        .context_window(10_000)
        .output_reserve(0)
        .compaction_threshold(0.8)
        .compaction_target(0.5);
    let mut cm = manager(config).with_system("sys");
    long_task(&mut cm, 9, 4_000); // ~9 × 1,000 tokens
    assert!(cm.needs_compaction());
    let before = cm.messages().to_vec();
    let report = cm.compact(None).await.unwrap().unwrap();
    assert_eq!(report.strategy, CompactionStrategy::ElideOldToolResults);
    // Down to the low-water mark, not just under the threshold …
    assert!(report.tokens_after <= 5_000, "{report:?}");
    assert!(report.tokens_after > 4_000, "just enough went: {report:?}");
    // … by eliding the oldest outputs, with a placeholder that says how to get them back.
    let placeholder = "[tool result elided to save context: 4000 bytes from `read_file`; \
                       call the tool again if you need it]";
    assert_eq!(cm.messages()[2].content[0], result("s0", placeholder));
    let elided: Vec<bool> = cm
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content == placeholder),
            _ => None,
        })
        .collect();
    assert_eq!(
        elided,
        [true, true, true, true, true, false, false, false, false]
    );
    // Everything before the first elided output is byte-identical: the cached prefix holds.
    assert_eq!(cm.messages()[..2], before[..2]);
    assert_eq!(cm.len(), before.len());
    cm.validate().unwrap();

    // The next compaction starts where this one stopped: earlier placeholders are untouched.
    let after_first = cm.messages().to_vec();
    for i in 9..13 {
        cm.push(assistant(vec![call(&format!("s{i}"))]));
        cm.push_tool_results(vec![result(&format!("s{i}"), "y".repeat(4_000))]);
    }
    assert!(cm.compact(None).await.unwrap().is_some());
    assert_eq!(cm.messages()[..11], after_first[..11]);
    cm.validate().unwrap();
}

#[tokio::test]
async fn water_marks_drop_old_steps_after_the_head_with_one_note() {
    let config = ContextConfig::default()
        .context_window(10_000)
        .output_reserve(0)
        .compaction_threshold(0.8)
        .compaction_target(0.4);
    let mut cm = manager(config);
    // Large tool inputs: eliding outputs cannot help, steps must go.
    cm.push_user_text("the first task, kept word for word");
    let step = |cm: &mut ContextManager, i: usize| {
        cm.push(assistant(vec![ContentBlock::ToolUse {
            id: format!("s{i}"),
            name: "edit_file".into(),
            input: json!({"patch": "p".repeat(4_000)}),
        }]));
        cm.push_tool_results(vec![result(&format!("s{i}"), "ok")]);
    };
    for i in 0..9 {
        step(&mut cm, i);
    }
    let report = cm.compact(None).await.unwrap().unwrap();
    assert_eq!(report.strategy, CompactionStrategy::DropOldestTurns);
    assert!(report.tokens_after <= 4_000, "{report:?}");
    let head = &cm.messages()[0];
    assert_eq!(
        head.content[0],
        ContentBlock::text("the first task, kept word for word")
    );
    assert_eq!(head.content.len(), 2);
    let ContentBlock::Text { text: note } = &head.content[1] else {
        panic!("a note after the head");
    };
    assert!(
        note.contains("were removed to fit the context window"),
        "{note}"
    );
    let dropped: usize = note
        .split(": ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(cm.len(), 19 - dropped);
    cm.validate().unwrap();

    // A second drop replaces the note (with the running total) instead of adding one.
    for i in 9..15 {
        step(&mut cm, i);
    }
    assert!(cm.compact(None).await.unwrap().is_some());
    let head = &cm.messages()[0];
    assert_eq!(head.content.len(), 2, "{head:?}");
    let total: usize = head
        .text()
        .split(": ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert_eq!(cm.len(), 1 + 2 * 15 - total);
    assert!(total > dropped);
    let last_call = cm.messages()[cm.len() - 2]
        .tool_uses()
        .next()
        .map(|(id, _, _)| id.to_owned());
    assert_eq!(last_call.as_deref(), Some("s14"), "the latest step stays");
    cm.validate().unwrap();
}

#[tokio::test]
async fn with_water_marks_compact_harder_is_one_compaction_below_both_targets() {
    let config = ContextConfig::default()
        .context_window(20_000)
        .output_reserve(2_000)
        .compaction_target(0.4);
    let mut cm = manager(config);
    long_task(&mut cm, 12, 4_000);
    // Under our threshold, yet the provider said the prompt is too long.
    assert!(!cm.needs_compaction());
    let before = cm.token_count();
    let report = cm.compact_harder(None).await.unwrap();
    assert_eq!(report.tokens_before, before);
    assert!(report.tokens_after <= before * 6 / 10, "{report:?}");
    assert!(report.tokens_after <= 18_000 * 4 / 10, "{report:?}");
    // One call did it: nothing is left for a second compaction to do before the next request.
    assert!(!cm.needs_compaction());
    assert_eq!(
        cm.messages()[0].content,
        [ContentBlock::text("the first task, kept word for word")]
    );
    cm.validate().unwrap();
}

// ----- server compaction -----

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Rounds of tool steps, each ending in a response that holds a server compaction item
    /// (OpenAI's encrypted one or Anthropic's readable block): what precedes the item goes,
    /// the first message keeps its own words, the note, the readable summary and the latest
    /// input; the history stays valid, its count consistent, and a second call changes
    /// nothing.
    #[test]
    fn server_compaction_drops_what_the_item_stands_for(
        rounds in prop::collection::vec((0usize..4, any::<bool>(), any::<bool>(), any::<bool>()), 1..5),
    ) {
        use agent_loop::provider::context_editing::SERVER_COMPACTED;
        let mut cm = manager(ContextConfig::default()).with_system("sys");
        cm.push_user_text("the first task");
        let mut id = 0;
        for (r, &(steps, anthropic, call_after, new_task)) in rounds.iter().enumerate() {
            if new_task || cm.messages().last().is_some_and(|m| m.role == Role::Assistant) {
                cm.push_user_text(format!("task {r}"));
            }
            for _ in 0..steps {
                id += 1;
                cm.push(assistant(vec![call(&format!("c{id}"))]));
                cm.push_tool_results(vec![result(&format!("c{id}"), "o".repeat(80))]);
            }
            let item = if anthropic {
                ContentBlock::Other(json!({"type": "compaction", "content": format!("summary {r}")}))
            } else {
                ContentBlock::Compaction { id: None, encrypted_content: format!("enc {r}") }
            };
            let mut content = vec![item];
            if call_after {
                id += 1;
                content.push(call(&format!("c{id}")));
            } else {
                content.push(ContentBlock::text("done"));
            }
            let before = cm.messages().to_vec();
            // The latest user input: the last user text before the item.
            let latest = before
                .iter()
                .rev()
                .flat_map(|m| m.content.iter().rev())
                .find_map(|b| match b {
                    ContentBlock::Text { text } if text.starts_with("task") || text == "the first task" => Some(text.clone()),
                    _ => None,
                })
                .unwrap();
            let at = before.len();
            cm.push(assistant(content.clone()));
            let dropped = cm.apply_server_compaction();
            if at >= 2 {
                prop_assert_eq!(dropped, at - 1);
                prop_assert_eq!(cm.len(), 2);
            } else {
                prop_assert_eq!(dropped, 0);
            }
            prop_assert_eq!(&cm.messages().last().unwrap().content, &content);
            let first = &cm.messages()[0].content;
            prop_assert_eq!(&first[0], &ContentBlock::text("the first task"));
            prop_assert!(first.contains(&ContentBlock::text(latest.clone())), "{:?} lacks {}", first, latest);
            let results = first.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. }));
            prop_assert!(!results, "{:?}", first);
            let summaries: Vec<&ContentBlock> = first
                .iter()
                .filter(|b| matches!(b, ContentBlock::Text { text } if text.contains("summary ")))
                .collect();
            if dropped > 0 {
                prop_assert!(first.contains(&ContentBlock::text(SERVER_COMPACTED)));
                // The note once, the latest summary only, and nothing else piles up.
                let notes: Vec<usize> = first
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == ContentBlock::text(SERVER_COMPACTED))
                    .map(|(i, _)| i)
                    .collect();
                prop_assert_eq!(notes.len(), 1, "{:?}", first);
                prop_assert!(first.len() - notes[0] - 1 <= 2, "{:?}", first);
                if anthropic {
                    prop_assert_eq!(summaries.len(), 1);
                    let latest_summary = matches!(summaries[0], ContentBlock::Text { text } if text.ends_with(&format!("summary {r}")));
                    prop_assert!(latest_summary, "{:?}", summaries);
                }
            }
            prop_assert!(summaries.len() <= 1, "{:?}", first);
            let now = cm.messages().to_vec();
            prop_assert_eq!(cm.apply_server_compaction(), 0);
            prop_assert_eq!(cm.messages(), &now[..]);
            if call_after {
                cm.push_tool_results(vec![result(&format!("c{id}"), "o")]);
            }
            prop_assert!(cm.validate().is_ok(), "{:?}", cm.validate());
            prop_assert_eq!(cm.estimated_tokens(), recount(&cm));
        }
    }
}

#[test]
fn server_compaction_resets_the_count_to_the_estimate_and_marks_what_to_save() {
    let mut cm = manager(ContextConfig::default());
    cm.push_user_text("task");
    cm.push(assistant(vec![call("c1")]));
    cm.push_tool_results(vec![result("c1", "o".repeat(4_000))]);
    let sent = cm.len();
    cm.record_usage(
        &Usage {
            input_tokens: 50_000,
            ..Usage::default()
        },
        sent,
    );
    cm.mark_saved();
    cm.push(assistant(vec![
        ContentBlock::Compaction {
            id: Some("cmp_1".into()),
            encrypted_content: "enc".into(),
        },
        ContentBlock::text("done"),
    ]));
    assert!(cm.token_count() > 50_000);
    assert_eq!(cm.apply_server_compaction(), 2);
    assert_eq!(cm.token_count(), cm.estimated_tokens());
    assert!(cm.token_count() < 1_000);
    // The session saves the whole rewritten history from its first message.
    assert_eq!(cm.unsaved().from, 0);
}

/// A response that compacted on the server reports the usage of a prompt the server rewrote
/// (and, on Anthropic, of the compaction pass): the agent's count does not anchor on it.
#[tokio::test]
async fn a_compacting_response_does_not_anchor_the_count() {
    use agent_loop::provider::context_editing::ServerCompaction;
    use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    use futures::StreamExt;

    let client = ScriptedClient::new([ScriptedResponse::new()
        .then_compaction(Some("cmp_1"), "enc")
        .then_text("done")
        .usage_tokens(1_000_000, 10)]);
    let mut agent = agent_loop::Agent::builder(client)
        .settings(
            agent_loop::RequestSettings::new().server_compaction(ServerCompaction::new(1_000)),
        )
        .build()
        .unwrap();
    let _ = agent.run("hello").collect::<Vec<_>>().await;
    let context = agent.context();
    assert_eq!(context.len(), 2);
    assert_eq!(context.token_count(), context.estimated_tokens());
    assert!(context.token_count() < 1_000, "{}", context.token_count());
}
