//! Compaction: the strategies that bring a conversation back under its token budget.
//!
//! Applied in order, each only if the previous ones did not get under the target:
//!
//! ```text
//!  (a) TruncateToolOutputs   tool outputs longer than the cap keep head + tail around a marker
//!  (b) ElideOldToolResults   outputs of tool calls before the recent turns, then of all but the
//!                            most recent tool calls, become "[tool output elided …]"
//!  (c) Summarize             the turns before the recent ones become one summary, merged into
//!                            the first kept user message (needs a Summarizer)
//!  (d) DropOldestTurns       whole turns go, oldest first, down to the current one
//!  (e) within the current turn (an agent run is often one long turn): every tool output but
//!      the latest is elided, then the oldest tool steps (a call message and its results)
//!      are dropped, keeping the request and the latest step, with a note in the request
//! ```
//!
//! (a) and (b) only rewrite the text of tool results, so the structure of the history is
//! untouched. (c) and (d) cut the history just before a turn start (a user message that carries
//! no tool results), so a tool call is never separated from its result, thinking blocks go with
//! their whole turn, and the first message stays a user message. The current turn is only ever
//! cut by (e), a whole tool step at a time.

use std::fmt;

use async_trait::async_trait;
use futures::StreamExt;

use super::history::turn_starts;
use super::tokens::{ceil_char_boundary, floor_char_boundary};
use super::ContextManager;
use crate::error::{Error, LlmError};
use crate::message::{ContentBlock, Message, Role, StopReason};
use crate::provider::{LlmClient, LlmEvent, ModelRequest};

/// Turns a span of old messages into a summary that replaces them.
///
/// The span always starts at the beginning of the history and ends just before a turn start;
/// it may begin with the summary of an earlier compaction. [`LlmSummarizer`] asks a model;
/// implement this trait to summarize some other way (or to record calls in tests).
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// A summary of `span`, in words the model will read in place of it.
    async fn summarize(&self, span: &[Message]) -> Result<String, Error>;
}

/// One compaction strategy, in the order they are tried.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompactionStrategy {
    /// (a) Long tool outputs were cut to their head and tail.
    TruncateToolOutputs,
    /// (b) The outputs of older tool calls were replaced with a placeholder.
    ElideOldToolResults,
    /// (c) The oldest turns were replaced with a model-written summary.
    Summarize,
    /// (d) The oldest whole turns were dropped.
    DropOldestTurns,
}

/// What a compaction did.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    /// The strongest strategy that changed the history (the later ones were not needed).
    /// When nothing could be removed (the conversation is over the threshold but within the
    /// budget, and only the current turn is left), it is `TruncateToolOutputs` and
    /// `tokens_after == tokens_before`.
    pub strategy: CompactionStrategy,
    /// The token count before compacting.
    pub tokens_before: usize,
    /// The token count after compacting.
    pub tokens_after: usize,
}

/// Marks the text that replaces a summarized span.
pub(crate) const SUMMARY_HEADER: &str =
    "[Summary of the earlier conversation, which was compacted to save context]";

/// Beginning of the placeholder of an elided tool output.
const ELIDED_PREFIX: &str = "[tool output elided to save context: ";

/// Room kept for the cut marker, so a cut output never exceeds the cap.
const MARKER_RESERVE: usize = 96;

/// The smallest effective tool output cap.
const MIN_TOOL_OUTPUT_CAP: usize = 128;

/// Runs the strategies until the count is at most `target`; errs if it ends above `limit`.
pub(super) async fn run(
    cm: &mut ContextManager,
    target: usize,
    limit: usize,
    summarizer: Option<&dyn Summarizer>,
) -> Result<CompactionReport, Error> {
    let tokens_before = cm.token_count();
    let mut strategy = CompactionStrategy::TruncateToolOutputs;
    let keep = (cm.config.keep_recent_turns as usize).max(1);

    truncate_tool_outputs(cm);
    if cm.token_count() > target {
        let before = cm.token_count();
        elide_old_tool_results(cm, keep, target);
        if cm.token_count() < before {
            strategy = CompactionStrategy::ElideOldToolResults;
        }
    }
    if cm.token_count() > target {
        if let Some(summarizer) = summarizer {
            if summarize_old_turns(cm, keep, summarizer).await? {
                strategy = CompactionStrategy::Summarize;
            }
        }
    }
    if cm.token_count() > target && drop_oldest_turns(cm, target) {
        strategy = CompactionStrategy::DropOldestTurns;
    }
    // An agent run is often one long turn: its oldest tool steps go too, last of all.
    if cm.token_count() > target {
        let before = cm.token_count();
        elide_all_but_latest_results(cm);
        if cm.token_count() < before {
            strategy = CompactionStrategy::ElideOldToolResults;
        }
    }
    if cm.token_count() > target && drop_oldest_steps(cm, target) {
        strategy = CompactionStrategy::DropOldestTurns;
    }
    let tokens_after = cm.token_count();
    tracing::debug!(
        ?strategy,
        tokens_before,
        tokens_after,
        target,
        "compacted the conversation"
    );
    if tokens_after > limit {
        return Err(Error::Context(format!(
            "the conversation still needs {tokens_after} tokens after compaction, over the \
             {limit} it may use (context window {} tokens, {} reserved for output); only the \
             current turn is left and it cannot be cut further: shorten the request or its tool \
             outputs, lower `tool_output_cap`, or use a model with a larger context window",
            cm.config.context_window, cm.config.output_reserve
        )));
    }
    Ok(CompactionReport {
        strategy,
        tokens_before,
        tokens_after,
    })
}

/// (a) Cuts every tool output longer than the cap to its head and tail.
fn truncate_tool_outputs(cm: &mut ContextManager) {
    let cap = (cm.config.tool_output_cap as usize).max(MIN_TOOL_OUTPUT_CAP);
    for i in 0..cm.messages.len() {
        cm.modify(i, |message| {
            let mut changed = false;
            for block in &mut message.content {
                if let ContentBlock::ToolResult { content, .. } = block {
                    if content.len() > cap {
                        *content = cut_middle(content, cap);
                        changed = true;
                    }
                }
            }
            changed
        });
    }
}

/// `text` cut to at most `cap` bytes (`cap >= MARKER_RESERVE`): its head and tail around a
/// marker saying how much was cut.
pub(crate) fn cut_middle(text: &str, cap: usize) -> String {
    let keep = cap.saturating_sub(MARKER_RESERVE);
    let head_end = floor_char_boundary(text, keep / 2);
    let tail_start = ceil_char_boundary(text, text.len() - (keep - keep / 2).min(text.len()));
    let tail_start = tail_start.max(head_end);
    let cut = tail_start - head_end;
    format!(
        "{}\n[... {cut} bytes of tool output cut to save context ...]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

/// (b) Replaces tool outputs with a placeholder: first those before the `keep` most recent
/// turns; then, if still over `target`, those of all but the `keep` most recent tool-result
/// messages.
fn elide_old_tool_results(cm: &mut ContextManager, keep: usize, target: usize) {
    let starts = turn_starts(&cm.messages);
    let recent_start = if starts.len() > keep {
        starts[starts.len() - keep]
    } else {
        0
    };
    for i in 0..recent_start {
        cm.modify(i, elide_results);
    }
    if cm.token_count() <= target {
        return;
    }
    let result_messages: Vec<usize> = (recent_start..cm.messages.len())
        .filter(|&i| {
            cm.messages[i]
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .collect();
    let older = result_messages.len().saturating_sub(keep);
    for &i in &result_messages[..older] {
        cm.modify(i, elide_results);
    }
}

fn elide_results(message: &mut Message) -> bool {
    let mut changed = false;
    for block in &mut message.content {
        if let ContentBlock::ToolResult { content, .. } = block {
            if content.starts_with(ELIDED_PREFIX) {
                continue;
            }
            let placeholder = format!("{ELIDED_PREFIX}{} bytes]", content.len());
            if placeholder.len() < content.len() {
                *content = placeholder;
                changed = true;
            }
        }
    }
    changed
}

/// (c) Replaces the turns before the `keep` most recent ones with a summary, merged into the
/// first kept user message. Returns whether it did.
async fn summarize_old_turns(
    cm: &mut ContextManager,
    keep: usize,
    summarizer: &dyn Summarizer,
) -> Result<bool, Error> {
    let starts = turn_starts(&cm.messages);
    if starts.len() <= keep {
        return Ok(false);
    }
    let cut = starts[starts.len() - keep];
    let summary = summarizer.summarize(&cm.messages[..cut]).await?;
    let Some(first_kept) = cm.messages.get(cut) else {
        return Ok(false);
    };
    let mut content = Vec::with_capacity(first_kept.content.len() + 1);
    content.push(ContentBlock::text(format!(
        "{SUMMARY_HEADER}\n{}",
        summary.trim()
    )));
    content.extend(first_kept.content.iter().cloned());
    cm.splice(
        0..cut + 1,
        vec![Message {
            role: Role::User,
            content,
        }],
    );
    Ok(true)
}

/// (d) Drops the fewest oldest whole turns that bring the count to `target` (all but the
/// current turn if none do). Returns whether it dropped any.
/// Elides the outputs of every tool-result message but the latest.
fn elide_all_but_latest_results(cm: &mut ContextManager) {
    let with_results: Vec<usize> = (0..cm.messages.len())
        .filter(|&i| {
            cm.messages[i]
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .collect();
    for &i in with_results.iter().rev().skip(1) {
        cm.modify(i, elide_results);
    }
}

/// Drops the oldest tool steps (an assistant message with tool calls and the user message
/// with their results) of the current turn, keeping the turn's request and its latest step,
/// and notes in the request how many steps went. Returns whether it dropped any.
fn drop_oldest_steps(cm: &mut ContextManager, target: usize) -> bool {
    let Some(&start) = turn_starts(&cm.messages).last() else {
        return false;
    };
    let is_step = |cm: &ContextManager, i: usize| {
        let (Some(call), Some(results)) = (cm.messages.get(i), cm.messages.get(i + 1)) else {
            return false;
        };
        call.role == Role::Assistant
            && call.tool_uses().next().is_some()
            && results.role == Role::User
            && results
                .content
                .iter()
                .all(|b| matches!(b, ContentBlock::ToolResult { .. }))
    };
    // Pairs after the request, oldest first; the newest step always stays.
    let mut end = start + 1;
    let mut steps = 0usize;
    while is_step(cm, end) && end + 2 < cm.messages.len() {
        end += 2;
        steps += 1;
        let removed: usize = cm.counts[start + 1..end].iter().sum();
        if cm.token_count().saturating_sub(removed) <= target {
            break;
        }
    }
    if steps == 0 {
        return false;
    }
    cm.splice(start + 1..end, Vec::new());
    cm.modify(start, |request| {
        // Before the request's own blocks, which stay word for word.
        request.content.insert(
            0,
            ContentBlock::text(format!(
            "[{steps} earlier tool step(s) of this task were removed to fit the context window]"
        )),
        );
        true
    });
    true
}

fn drop_oldest_turns(cm: &mut ContextManager, target: usize) -> bool {
    let starts = turn_starts(&cm.messages);
    if starts.len() <= 1 {
        return false;
    }
    let mut removed = 0;
    let mut cut = 0;
    for &next in &starts[1..] {
        removed += cm.counts[cut..next].iter().sum::<usize>();
        cut = next;
        if cm.count_without_prefix(cut, removed) <= target {
            break;
        }
    }
    cm.splice(0..cut, Vec::new());
    true
}

/// The default [`Summarizer`]: asks a model for the summary through any [`LlmClient`].
///
/// The span is sent as a plain-text transcript in one user message (tool calls and results
/// rendered as text, long ones cut, thinking left out), under a system prompt asking for a
/// summary that keeps what the conversation needs to go on. The summary is used only if the
/// model finished it (`end_turn`); one cut off by `max_tokens` is an error.
pub struct LlmSummarizer {
    client: Box<dyn LlmClient>,
    model: Option<String>,
    max_tokens: u32,
    prompt: String,
}

impl fmt::Debug for LlmSummarizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmSummarizer")
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

/// The default system prompt of [`LlmSummarizer`].
const SUMMARY_PROMPT: &str = "You compact the history of a conversation between a user and an \
AI assistant that uses tools. The transcript you are given will be replaced by your summary, \
and the assistant will continue the work from it, so keep everything it needs: the user's \
goals, requests and constraints; decisions made and why; important facts, names, file paths, \
identifiers, commands and values, and the results of tool calls; errors met and how they were \
resolved; and what remains to be done. Be concise and concrete, invent nothing, and write the \
summary only, with no preamble.";

/// Longest text of one block in the transcript sent for summarizing.
const TRANSCRIPT_BLOCK_CAP: usize = 8 * 1024;

/// Largest summary accepted, in bytes.
const MAX_SUMMARY_BYTES: usize = 1 << 20;

impl LlmSummarizer {
    /// A summarizer asking `client` (with its default model), with up to 2048 output tokens.
    pub fn new(client: impl LlmClient + 'static) -> Self {
        LlmSummarizer {
            client: Box::new(client),
            model: None,
            max_tokens: 2048,
            prompt: SUMMARY_PROMPT.to_owned(),
        }
    }

    /// Asks this model instead of the client's default (a smaller, cheaper one works well).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The most tokens the summary may take.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Replaces the system prompt that asks for the summary.
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = prompt.into();
        self
    }
}

#[async_trait]
impl Summarizer for LlmSummarizer {
    async fn summarize(&self, span: &[Message]) -> Result<String, Error> {
        let request = ModelRequest {
            model: self.model.clone(),
            system: Some(self.prompt.clone()),
            messages: std::sync::Arc::new(vec![Message::user(format!(
                "Summarize this conversation:\n\n{}",
                render_transcript(span)
            ))]),
            max_tokens: self.max_tokens,
            ..ModelRequest::default()
        };
        let mut stream = self.client.stream(&request);
        let mut summary = String::new();
        let mut stop = None;
        while let Some(event) = stream.next().await {
            match event? {
                LlmEvent::TextDelta { text, .. } => {
                    if summary.len() + text.len() > MAX_SUMMARY_BYTES {
                        return Err(LlmError::LimitExceeded {
                            what: "a conversation summary",
                            limit: MAX_SUMMARY_BYTES,
                            setting: "LlmSummarizer::max_tokens",
                        }
                        .into());
                    }
                    summary.push_str(&text);
                }
                LlmEvent::MessageStop { stop_reason } => {
                    stop = Some(stop_reason);
                    break;
                }
                _ => {}
            }
        }
        match stop {
            Some(StopReason::EndTurn) if !summary.trim().is_empty() => Ok(summary),
            Some(StopReason::EndTurn) => Err(Error::Context(
                "the model returned an empty summary; the conversation was not summarized".into(),
            )),
            Some(StopReason::MaxTokens) => Err(Error::Context(format!(
                "the summary was cut off at max_tokens ({}) and was not used; raise \
                 LlmSummarizer::max_tokens",
                self.max_tokens
            ))),
            Some(other) => Err(Error::Context(format!(
                "the summary did not finish normally (stop reason {other:?}) and was not used"
            ))),
            None => Err(LlmError::incomplete("the summary stream ended without a stop").into()),
        }
    }
}

/// The span as a plain-text transcript, each block capped at [`TRANSCRIPT_BLOCK_CAP`] bytes.
pub(crate) fn render_transcript(span: &[Message]) -> String {
    let capped = |s: &str| -> String {
        if s.len() > TRANSCRIPT_BLOCK_CAP {
            cut_middle(s, TRANSCRIPT_BLOCK_CAP)
        } else {
            s.to_owned()
        }
    };
    let mut out = String::new();
    for message in span {
        let who = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => {
                    out.push_str(&format!("{who}: {}\n\n", capped(text)));
                }
                ContentBlock::ToolUse { name, input, .. } => {
                    out.push_str(&format!(
                        "Assistant called tool `{name}` with {}\n\n",
                        capped(&input.to_string())
                    ));
                }
                ContentBlock::ToolResult {
                    content, is_error, ..
                } => {
                    let kind = if *is_error {
                        "Tool error"
                    } else {
                        "Tool result"
                    };
                    out.push_str(&format!("{kind}: {}\n\n", capped(content)));
                }
                ContentBlock::Other(value) => {
                    out.push_str(&format!(
                        "{who} ({}): {}\n\n",
                        value
                            .get("type")
                            .and_then(|t| t.as_str())
                            .unwrap_or("block"),
                        capped(&value.to_string())
                    ));
                }
                ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_middle_respects_the_cap_and_char_boundaries() {
        let text = "é".repeat(1000) + &"x".repeat(1001);
        for cap in [96, 128, 500, 1001, 2999] {
            let cut = cut_middle(&text, cap);
            assert!(
                cut.len() <= cap.max(MARKER_RESERVE),
                "cap {cap}: {}",
                cut.len()
            );
            assert!(cut.contains("bytes of tool output cut"));
        }
        let cut = cut_middle(&text, 400);
        assert!(cut.starts_with("éé"));
        assert!(cut.ends_with("xx"));
    }

    #[test]
    fn elided_placeholder_is_stable() {
        let mut m = Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("1", "y".repeat(500), false)],
        };
        assert!(elide_results(&mut m));
        assert!(!elide_results(&mut m));
        assert_eq!(
            m.content[0],
            ContentBlock::tool_result(
                "1",
                "[tool output elided to save context: 500 bytes]",
                false
            )
        );
    }
}
