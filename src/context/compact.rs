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
//! That is the order when compaction brings the conversation just under its threshold
//! (`compaction_target: None`). With a low-water mark (the default), [`run_cache_aware`]
//! compacts for the prompt cache instead: a request shares the provider's cache with the
//! previous one only up to the first byte that changed, so it keeps the head (system prompt,
//! tools, the first user message) byte-identical and changes the history as late as it can:
//!
//! ```text
//!  (a) TruncateToolOutputs    as above
//!  (b) ElideOldToolResults    oldest first, just enough: earlier placeholders stay as they were,
//!                             so the prefix runs through them; the latest results stay
//!  (c) Summarize / (d) drop   the oldest steps and turns after the first user message go, down
//!                             to the low-water mark, with one note (or summary) appended to
//!                             that message, after its own blocks; the latest user input and
//!                             the latest tool step stay
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

/// Beginning of the placeholder of a tool result elided by [`run_cache_aware`]; it goes on
/// `"{n} bytes from `{tool}`; call the tool again if you need it]"`.
const CACHE_ELIDED_PREFIX: &str = "[tool result elided to save context: ";

/// Beginning of the note that says what [`run_cache_aware`] dropped.
const DROPPED_PREFIX: &str =
    "[Earlier messages of this conversation were removed to fit the context window: ";

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
    finish(cm, strategy, tokens_before, target, limit)
}

/// Compaction for the prompt cache, down to `target` (the low-water mark); errs if it ends
/// above `limit`. See the module docs for the order.
pub(super) async fn run_cache_aware(
    cm: &mut ContextManager,
    target: usize,
    limit: usize,
    summarizer: Option<&dyn Summarizer>,
) -> Result<CompactionReport, Error> {
    let tokens_before = cm.token_count();
    let mut strategy = CompactionStrategy::TruncateToolOutputs;
    truncate_tool_outputs(cm);
    if cm.token_count() > target {
        let before = cm.token_count();
        elide_oldest_results(cm, target);
        if cm.token_count() < before {
            strategy = CompactionStrategy::ElideOldToolResults;
        }
    }
    if cm.token_count() > target {
        if let Some(dropped) = drop_after_head(cm, target, summarizer).await? {
            strategy = dropped;
        }
    }
    // Still over: the old last resorts (they may rewrite the head).
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
    finish(cm, strategy, tokens_before, target, limit)
}

/// The indexes of the messages that carry tool results, oldest first.
fn result_messages(cm: &ContextManager) -> Vec<usize> {
    (0..cm.messages.len())
        .filter(|&i| {
            cm.messages[i]
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .collect()
}

/// Elides tool results, oldest message first, until the count is at most `target`; the latest
/// message with results keeps them.
fn elide_oldest_results(cm: &mut ContextManager, target: usize) {
    let with_results = result_messages(cm);
    let Some((_, older)) = with_results.split_last() else {
        return;
    };
    for &i in older {
        if cm.token_count() <= target {
            return;
        }
        let names = tool_names(cm.messages.get(i.wrapping_sub(1)));
        cm.modify(i, |m| elide_for_cache(m, &names));
    }
}

/// The tool names of the calls in `message`, by id.
fn tool_names(message: Option<&Message>) -> Vec<(String, String)> {
    message
        .map(|m| {
            m.tool_uses()
                .map(|(id, name, _)| (id.to_owned(), name.to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Replaces the tool results of `message` with a stable placeholder that says what went and
/// how to get it back. Returns whether anything changed.
fn elide_for_cache(message: &mut Message, names: &[(String, String)]) -> bool {
    let mut changed = false;
    for block in &mut message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } = block
        {
            if content.starts_with(CACHE_ELIDED_PREFIX) || content.starts_with(ELIDED_PREFIX) {
                continue;
            }
            let name = names
                .iter()
                .find(|(id, _)| id == tool_use_id)
                .map_or("the tool", |(_, name)| name.as_str());
            let placeholder = format!(
                "{CACHE_ELIDED_PREFIX}{} bytes from `{name}`; call the tool again if you need it]",
                content.len()
            );
            if placeholder.len() < content.len() {
                *content = placeholder;
                changed = true;
            }
        }
    }
    changed
}

/// Whether message `i` may directly follow the first message once the messages between them
/// are gone: an assistant message after a user message. A cut there never separates a tool
/// call from its results (they are in the assistant message and the user message after it).
fn can_follow_head(cm: &ContextManager, i: usize) -> bool {
    i >= 2
        && cm
            .messages
            .get(i)
            .is_some_and(|m| m.role == Role::Assistant)
        && cm.messages[i - 1].role == Role::User
}

/// Drops the oldest messages after the first one (the head, which stays word for word),
/// just enough to reach `target` but never the latest user input or the latest tool step, and
/// appends one note to the head saying so (a summary of what went, with a summarizer). A
/// second drop replaces the note of the first. Returns the strategy when it dropped anything.
async fn drop_after_head(
    cm: &mut ContextManager,
    target: usize,
    summarizer: Option<&dyn Summarizer>,
) -> Result<Option<CompactionStrategy>, Error> {
    let len = cm.messages.len();
    // The current turn's request (the latest turn start) stays, with all after it (so the
    // latest user input does too), and so does the latest tool step.
    let latest_input = turn_starts(&cm.messages).last().copied().unwrap_or(0);
    let latest_step = (0..len)
        .rev()
        .find(|&i| cm.messages[i].tool_uses().next().is_some())
        .unwrap_or(len);
    // Cuts [1, cut) with `cut` an assistant message; none may pass the latest input unless
    // that is the head itself, and none may reach the latest step.
    let candidates: Vec<usize> = (2..len)
        .filter(|&cut| can_follow_head(cm, cut))
        .filter(|&cut| latest_input == 0 || cut <= latest_input)
        .filter(|&cut| cut <= latest_step)
        .collect();
    let mut chosen = None;
    let note_room = 64;
    for &cut in &candidates {
        chosen = Some(cut);
        let removed: usize = cm.counts[1..cut].iter().sum();
        if cm.count_without_range(1, cut, removed) + note_room <= target {
            break;
        }
    }
    let Some(cut) = chosen else {
        return Ok(None);
    };
    let previous = previous_note(&cm.messages[0]);
    let dropped_now = cut - 1;
    let total_dropped = previous.map_or(0, |(_, n)| n) + dropped_now;
    let (note, strategy) = match summarizer {
        Some(summarizer) => {
            let summary = summarizer.summarize(&cm.messages[..cut]).await?;
            (
                format!(
                    "{DROPPED_PREFIX}{total_dropped} messages]\n{SUMMARY_HEADER}\n{}",
                    summary.trim()
                ),
                CompactionStrategy::Summarize,
            )
        }
        None => (
            format!(
                "{DROPPED_PREFIX}{total_dropped} messages; ask the user or call the tools again \
                 for anything they held]"
            ),
            CompactionStrategy::DropOldestTurns,
        ),
    };
    cm.splice(1..cut, Vec::new());
    cm.modify(0, |head| {
        if let Some((at, _)) = previous_note(head) {
            head.content.truncate(at);
        }
        head.content.push(ContentBlock::text(note));
        true
    });
    Ok(Some(strategy))
}

/// The note a previous [`drop_after_head`] left at the end of the head: its block index and how
/// many messages it says went.
fn previous_note(head: &Message) -> Option<(usize, usize)> {
    let at = head.content.len().checked_sub(1)?;
    let ContentBlock::Text { text } = &head.content[at] else {
        return None;
    };
    let rest = text.strip_prefix(DROPPED_PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((at, digits.parse().unwrap_or(0)))
}

/// Checks the limit and reports, for both orders.
fn finish(
    cm: &ContextManager,
    strategy: CompactionStrategy,
    tokens_before: usize,
    target: usize,
    limit: usize,
) -> Result<CompactionReport, Error> {
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

    use crate::context::{CharEstimateCounter, ContextConfig};
    use crate::provider::LlmStream;

    fn manager(keep_recent_turns: u32) -> ContextManager {
        ContextManager::new(ContextConfig::default().keep_recent_turns(keep_recent_turns))
            .with_counter(CharEstimateCounter)
    }

    fn call(id: &str, input: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "tool".into(),
                input: serde_json::json!({ "data": input }),
            }],
        }
    }

    fn results(id: &str, output: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(id, output, false)],
        }
    }

    /// A request, one tool step with `output`, and an answer.
    fn turn(cm: &mut ContextManager, t: usize, output: &str) {
        cm.push_user_text(format!("request {t}"));
        cm.push(call(&format!("t{t}"), "in"));
        cm.push(results(&format!("t{t}"), output));
        cm.push(Message::assistant(format!("answer {t}")));
    }

    fn step(cm: &mut ContextManager, id: &str, input: &str, output: &str) {
        cm.push(call(id, input));
        cm.push(results(id, output));
    }

    /// The content of every tool result, in order, as (message index, content).
    fn outputs(cm: &ContextManager) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (i, m) in cm.messages.iter().enumerate() {
            for b in &m.content {
                if let ContentBlock::ToolResult { content, .. } = b {
                    out.push((i, content.clone()));
                }
            }
        }
        out
    }

    fn elided(content: &str) -> bool {
        content.starts_with(ELIDED_PREFIX)
    }

    /// A summarizer that must not be asked.
    struct Unused;

    #[async_trait]
    impl Summarizer for Unused {
        async fn summarize(&self, _span: &[Message]) -> Result<String, Error> {
            panic!("the summarizer was asked although the count was at the target");
        }
    }

    #[test]
    fn cut_middle_keeps_an_exact_head_and_tail_and_counts_the_cut() {
        let text = "h".repeat(500) + &"t".repeat(500);
        // cap 296 keeps 200 bytes: 100 of head, 100 of tail.
        assert_eq!(
            cut_middle(&text, MARKER_RESERVE + 200),
            format!(
                "{}\n[... 800 bytes of tool output cut to save context ...]\n{}",
                "h".repeat(100),
                "t".repeat(100)
            )
        );
        // An odd number of bytes kept: the extra one goes to the tail.
        assert_eq!(
            cut_middle(&text, MARKER_RESERVE + 201),
            format!(
                "{}\n[... 799 bytes of tool output cut to save context ...]\n{}",
                "h".repeat(100),
                "t".repeat(101)
            )
        );
    }

    #[test]
    fn a_placeholder_no_shorter_than_the_output_is_not_used() {
        // A 46-byte output has a 46-byte placeholder: eliding it would save nothing.
        assert_eq!(format!("{ELIDED_PREFIX}46 bytes]").len(), 46);
        let mut m = results("1", &"y".repeat(46));
        assert!(!elide_results(&mut m));
        assert_eq!(m, results("1", &"y".repeat(46)));
        let mut m = results("1", &"y".repeat(47));
        assert!(elide_results(&mut m));
        assert_eq!(
            m,
            results("1", "[tool output elided to save context: 47 bytes]")
        );
    }

    #[test]
    fn an_output_exactly_at_the_cap_is_kept_whole() {
        let mut cm = ContextManager::new(ContextConfig::default().tool_output_cap(200))
            .with_counter(CharEstimateCounter);
        cm.push_user_text("go");
        cm.push(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::ToolUse {
                    id: "a".into(),
                    name: "tool".into(),
                    input: serde_json::json!({}),
                },
                ContentBlock::ToolUse {
                    id: "b".into(),
                    name: "tool".into(),
                    input: serde_json::json!({}),
                },
            ],
        });
        cm.push(Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("a", "x".repeat(200), false),
                ContentBlock::tool_result("b", "x".repeat(201), false),
            ],
        });
        truncate_tool_outputs(&mut cm);
        let out = outputs(&cm);
        assert_eq!(out[0].1, "x".repeat(200));
        assert_ne!(out[1].1, "x".repeat(201));
        assert!(out[1].1.len() <= 200, "{}", out[1].1.len());
    }

    #[tokio::test]
    async fn a_conversation_exactly_at_its_target_is_left_alone() {
        let mut cm = manager(1);
        for t in 0..3 {
            turn(&mut cm, t, &"x".repeat(400));
        }
        cm.push_user_text("current");
        step(&mut cm, "s0", "in", &"y".repeat(400));
        step(&mut cm, "s1", "in", &"y".repeat(400));
        let before = cm.messages().to_vec();
        let count = cm.token_count();
        let report = run(&mut cm, count, count, Some(&Unused)).await.unwrap();
        assert_eq!(
            report,
            CompactionReport {
                strategy: CompactionStrategy::TruncateToolOutputs,
                tokens_before: count,
                tokens_after: count,
            }
        );
        assert_eq!(cm.messages(), &before[..]);
    }

    #[tokio::test]
    async fn when_nothing_can_go_the_report_says_so_and_the_limit_is_inclusive() {
        // One turn, no tool outputs: over the target, nothing to remove.
        let mut cm = manager(4);
        cm.push_user_text("w".repeat(4_000));
        let count = cm.token_count();
        let report = run(&mut cm, count - 10, count, None).await.unwrap();
        assert_eq!(report.strategy, CompactionStrategy::TruncateToolOutputs);
        assert_eq!(report.tokens_after, count);
        // One token more than the limit allows is an error.
        let err = run(&mut cm, count - 10, count - 1, None).await.unwrap_err();
        assert!(matches!(err, Error::Context(_)), "{err:?}");
    }

    /// Three old turns with tool outputs, one recent turn, and a current turn of three steps.
    fn elidable() -> ContextManager {
        let mut cm = manager(2);
        for t in 0..4 {
            turn(&mut cm, t, &"x".repeat(600));
        }
        cm.push_user_text("current"); // message 16
        for s in 0..3 {
            step(&mut cm, &format!("s{s}"), "in", &"y".repeat(600));
        }
        cm
    }

    #[tokio::test]
    async fn old_turns_lose_their_outputs_first_and_just_enough() {
        let mut cm = elidable();
        let len = cm.len();
        let count = cm.token_count();
        let report = run(&mut cm, count - 1, count, None).await.unwrap();
        assert_eq!(report.strategy, CompactionStrategy::ElideOldToolResults);
        // Turns 0-2 are before the two recent turns: their outputs go. The recent turn (3,
        // message 14) and the current turn's steps keep theirs.
        let out = outputs(&cm);
        let gone: Vec<usize> = out
            .iter()
            .filter(|(_, c)| elided(c))
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(gone, [2, 6, 10]);
        assert_eq!(cm.len(), len);
        assert_eq!(report.tokens_after, cm.token_count());
        assert!(report.tokens_after < count - 1);
    }

    #[test]
    fn then_all_but_the_most_recent_tool_outputs_go() {
        let mut cm = elidable();
        elide_old_tool_results(&mut cm, 2, 0);
        let out = outputs(&cm);
        let kept: Vec<usize> = out
            .iter()
            .filter(|(_, c)| !elided(c))
            .map(|(i, _)| *i)
            .collect();
        // keep = 2: the two most recent tool-result messages.
        assert_eq!(kept, [20, 22]);
    }

    #[tokio::test]
    async fn within_one_long_turn_all_but_the_latest_output_are_elided() {
        let mut cm = manager(4);
        cm.push_user_text("do the task");
        for s in 0..4 {
            step(&mut cm, &format!("s{s}"), "in", &"y".repeat(800));
        }
        let count = cm.token_count();
        let report = run(&mut cm, count - 1, count, None).await.unwrap();
        assert_eq!(report.strategy, CompactionStrategy::ElideOldToolResults);
        let out = outputs(&cm);
        let flags: Vec<bool> = out.iter().map(|(_, c)| elided(c)).collect();
        assert_eq!(flags, [true, true, true, false]);
        assert_eq!(cm.len(), 9, "no step dropped");
    }

    #[test]
    fn the_fewest_oldest_turns_are_dropped() {
        let mut cm = manager(1);
        for t in 0..5 {
            cm.push_user_text(format!("request {t} {}", "w".repeat(400)));
            cm.push(Message::assistant(format!("answer {t}")));
        }
        cm.push_user_text("latest");
        let two_turns: usize = cm.counts[..4].iter().sum();
        let target = cm.token_count() - two_turns;
        assert!(drop_oldest_turns(&mut cm, target));
        assert_eq!(cm.len(), 7);
        assert!(cm.messages()[0].text().starts_with("request 2"));
        assert_eq!(cm.token_count(), target);
        // A single turn cannot be dropped.
        let mut cm = manager(1);
        cm.push_user_text("only");
        assert!(!drop_oldest_turns(&mut cm, 0));
    }

    fn long_turn() -> ContextManager {
        let mut cm = manager(4);
        cm.push_user_text("do the task");
        for s in 0..5 {
            step(&mut cm, &format!("s{s}"), &"x".repeat(400), "ok");
        }
        cm
    }

    fn call_ids(cm: &ContextManager) -> Vec<String> {
        cm.messages()
            .iter()
            .flat_map(|m| m.tool_uses().map(|(id, _, _)| id.to_owned()))
            .collect()
    }

    #[test]
    fn the_fewest_oldest_steps_are_dropped_with_a_note() {
        let mut cm = long_turn();
        let two_steps: usize = cm.counts[1..5].iter().sum();
        let target = cm.token_count() - two_steps;
        assert!(drop_oldest_steps(&mut cm, target));
        assert_eq!(call_ids(&cm), ["s2", "s3", "s4"]);
        assert_eq!(
            cm.messages()[0].content,
            [
                ContentBlock::text(
                    "[2 earlier tool step(s) of this task were removed to fit the context window]"
                ),
                ContentBlock::text("do the task"),
            ]
        );
        cm.validate().unwrap();
    }

    #[test]
    fn the_latest_step_always_stays() {
        let mut cm = long_turn();
        assert!(drop_oldest_steps(&mut cm, 0));
        assert_eq!(call_ids(&cm), ["s4"]);
        assert!(cm.messages()[0]
            .text()
            .starts_with("[4 earlier tool step(s)"));
        // A turn with one step (or none) has nothing to drop.
        assert!(!drop_oldest_steps(&mut cm, 0));
        let mut cm = manager(4);
        cm.push_user_text("just a question");
        assert!(!drop_oldest_steps(&mut cm, 0));
    }

    #[test]
    fn a_results_message_with_more_than_results_ends_the_steps_that_can_go() {
        let mut cm = manager(4);
        cm.push_user_text("do the task");
        step(&mut cm, "s0", &"x".repeat(400), "ok");
        cm.push(call("s1", &"x".repeat(400)));
        cm.push(Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("s1", "ok", false),
                ContentBlock::text("also look at the tests"),
            ],
        });
        step(&mut cm, "s2", &"x".repeat(400), "ok");
        step(&mut cm, "s3", &"x".repeat(400), "ok");
        assert!(drop_oldest_steps(&mut cm, 0));
        assert_eq!(call_ids(&cm), ["s1", "s2", "s3"]);
        cm.validate().unwrap();
    }

    #[test]
    fn transcript_blocks_are_capped_at_eight_kib() {
        let whole = "a".repeat(8 * 1024);
        let transcript = render_transcript(&[Message::user(whole.clone())]);
        assert_eq!(transcript, format!("User: {whole}\n\n"));
        let long = "a".repeat(8 * 1024 + 1);
        let transcript = render_transcript(&[Message::user(long)]);
        assert!(
            transcript.contains("bytes of tool output cut"),
            "{}",
            transcript.len()
        );
        assert!(transcript.len() <= 8 * 1024 + "User: \n\n".len());
    }

    /// Streams one text delta and a stop.
    struct OneDelta {
        text: String,
    }

    impl OneDelta {
        fn new(text: String) -> Self {
            OneDelta { text }
        }
    }

    impl LlmClient for OneDelta {
        fn stream<'a>(&'a self, _request: &'a ModelRequest) -> LlmStream<'a> {
            Box::pin(futures::stream::iter([
                Ok::<_, LlmError>(LlmEvent::TextDelta {
                    index: 0,
                    text: self.text.clone(),
                }),
                Ok(LlmEvent::MessageStop {
                    stop_reason: StopReason::EndTurn,
                }),
            ]))
        }
    }

    #[tokio::test]
    async fn a_summary_may_reach_its_size_limit_exactly() {
        let span = [Message::user("hi")];
        // 1 MiB is accepted, one byte more is not.
        let exact = LlmSummarizer::new(OneDelta::new("s".repeat(1 << 20)));
        assert_eq!(exact.summarize(&span).await.unwrap().len(), 1 << 20);
        let over = LlmSummarizer::new(OneDelta::new("s".repeat((1 << 20) + 1)));
        assert!(matches!(
            over.summarize(&span).await,
            Err(Error::Llm(LlmError::LimitExceeded { .. }))
        ));
    }

    #[tokio::test]
    async fn a_blank_summary_is_refused() {
        let blank = LlmSummarizer::new(OneDelta::new(" \n ".into()));
        let err = blank.summarize(&[Message::user("hi")]).await.unwrap_err();
        assert!(
            matches!(&err, Error::Context(m) if m.contains("empty summary")),
            "{err:?}"
        );
    }

    #[test]
    fn the_summarizer_debug_shows_its_settings_not_its_client() {
        let s = LlmSummarizer::new(OneDelta::new(String::new()))
            .model("small")
            .max_tokens(77)
            .prompt("custom prompt");
        let debug = format!("{s:?}");
        assert!(debug.starts_with("LlmSummarizer"), "{debug}");
        assert!(debug.contains("small") && debug.contains("77"), "{debug}");
    }
}
