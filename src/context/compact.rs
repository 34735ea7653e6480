//! Compaction: the strategies that bring a conversation back under its token budget.
//!
//! Applied in order, each only if the previous ones did not get under the target:
//!
//! ```text
//!  (0) DropOldReasoning      OpenAI Responses reasoning items of earlier turns go, oldest
//!                            first, just enough (the model uses only the current turn's)
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
//! (`compaction_target: None`). With a low-water mark (the default), compaction
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

use std::collections::HashMap;

use async_trait::async_trait;

use super::history::turn_starts;
use super::tokens::{ceil_char_boundary, floor_char_boundary};
use super::ContextManager;
use crate::error::{ContextError, Error};
use crate::message::{ContentBlock, Message, Role};

/// Turns a span of old messages into a summary that replaces them.
///
/// The span always starts at the beginning of the history and ends just before a turn start;
/// it may begin with the summary of an earlier compaction. [`LlmSummarizer`](crate::agent::LlmSummarizer) asks a model;
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
    /// (0) OpenAI Responses reasoning items of turns before the current one were dropped
    /// (their `encrypted_content` is large, and the model does not use the reasoning of
    /// earlier turns); the current turn's stay. Tried before every other strategy.
    DropOldReasoning,
    /// (a') Images and documents before the recent turns were replaced with a placeholder
    /// (each costs up to ~1,600 tokens, a PDF page ~2,000).
    DropOldImages,
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

/// Beginning of the placeholder of a tool result elided in the cache-aware order; it goes on
/// `"{n} bytes from `{tool}`; call the tool again if you need it]"`.
const CACHE_ELIDED_PREFIX: &str = "[tool result elided to save context: ";

/// Beginning of the note that says what the cache-aware order dropped.
const DROPPED_PREFIX: &str =
    "[Earlier messages of this conversation were removed to fit the context window: ";

/// Room kept for the cut marker, so a cut output never exceeds the cap.
const MARKER_RESERVE: usize = 96;

/// The smallest effective tool output cap.
const MIN_TOOL_OUTPUT_CAP: usize = 128;

/// What a compaction needs next, from [`ContextManager::begin_compaction`].
///
/// Compaction is sans-IO: it never calls a model itself. When the cheap strategies are not
/// enough and a summary would help, it stops with [`CompactionStep::Summarize`]; the caller
/// gets the summary (from a model, say) and hands it back to
/// [`ContextManager::finish_compaction`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum CompactionStep {
    /// The compaction is complete.
    Done(CompactionReport),
    /// Summarize these messages (the oldest turns) and call
    /// [`ContextManager::finish_compaction`] with the summary, or with `None` to go on
    /// without one. Change nothing in the conversation meanwhile.
    Summarize(Vec<Message>),
}

/// A compaction between its steps: what it aims at and what it did so far.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    target: usize,
    limit: usize,
    tokens_before: usize,
    strategy: CompactionStrategy,
    /// The span to summarize ends here, and the history has this many messages.
    cut: usize,
    len: usize,
    /// The cache-aware order (a low-water mark is set): the span is dropped after the head.
    cache_aware: bool,
}

/// The first steps: cut long outputs, elide old results; then either a summary is asked for
/// (when `summarize` and there is a span to summarize) or the compaction completes. With a
/// low-water mark the order is the cache-aware one (module docs).
pub(super) fn begin(
    cm: &mut ContextManager,
    target: usize,
    limit: usize,
    summarize: bool,
) -> Result<CompactionStep, Error> {
    let cache_aware = cm.config.compaction_target.is_some();
    let tokens_before = cm.token_count();
    let mut strategy = CompactionStrategy::TruncateToolOutputs;
    let keep = (cm.config.keep_recent_turns as usize).max(1);

    if drop_old_reasoning(cm, target) {
        strategy = CompactionStrategy::DropOldReasoning;
    }
    if cm.token_count() > target {
        let before = cm.token_count();
        truncate_tool_outputs(cm);
        if cm.token_count() < before {
            strategy = CompactionStrategy::TruncateToolOutputs;
        }
    }
    if cm.token_count() > target {
        let before = cm.token_count();
        drop_old_images(cm, keep, target);
        if cm.token_count() < before {
            strategy = CompactionStrategy::DropOldImages;
        }
    }
    if cm.token_count() > target {
        let before = cm.token_count();
        if cache_aware {
            elide_oldest_results(cm, target);
        } else {
            elide_old_tool_results(cm, keep, target);
        }
        if cm.token_count() < before {
            strategy = CompactionStrategy::ElideOldToolResults;
        }
    }
    if cm.token_count() > target {
        let cut = if cache_aware {
            head_cut(cm, target)
        } else {
            let starts = turn_starts(&cm.messages);
            (starts.len() > keep).then(|| starts[starts.len() - keep])
        };
        if let Some(cut) = cut {
            if summarize {
                cm.pending = Some(Pending {
                    target,
                    limit,
                    tokens_before,
                    strategy,
                    cut,
                    len: cm.messages.len(),
                    cache_aware,
                });
                return Ok(CompactionStep::Summarize(cm.messages[..cut].to_vec()));
            }
            if cache_aware {
                strategy = drop_after_head(cm, cut, None);
            }
        }
    }
    last_steps(cm, target, limit, tokens_before, strategy, cache_aware).map(CompactionStep::Done)
}

/// The last steps, after a summary was asked for: the span goes (replaced by the summary when
/// one is given), then whatever else must go.
pub(super) fn finish(
    cm: &mut ContextManager,
    summary: Option<String>,
) -> Result<CompactionReport, Error> {
    let Some(pending) = cm.pending.take() else {
        return Err(ContextError::Compaction(
            "finish_compaction was called with no compaction waiting for a summary".to_owned(),
        )
        .into());
    };
    let summary = summary.filter(|s| !s.trim().is_empty());
    if summary.is_some() && cm.messages.len() != pending.len {
        return Err(Error::Context(ContextError::Compaction(
            "the conversation changed while its summary was being written; the summary was \
             not used"
                .to_owned(),
        )));
    }
    let mut strategy = pending.strategy;
    if pending.cache_aware {
        if pending.cut < cm.messages.len() {
            strategy = drop_after_head(cm, pending.cut, summary.as_deref());
        }
    } else if let Some(summary) = summary {
        apply_summary(cm, pending.cut, &summary);
        strategy = CompactionStrategy::Summarize;
    }
    last_steps(
        cm,
        pending.target,
        pending.limit,
        pending.tokens_before,
        strategy,
        pending.cache_aware,
    )
}

/// The last resorts, down to `target`: whole old turns (in the classic order), then every
/// tool output but the latest, then the oldest tool steps of the current turn. Errs if the
/// count ends above `limit`.
fn last_steps(
    cm: &mut ContextManager,
    target: usize,
    limit: usize,
    tokens_before: usize,
    mut strategy: CompactionStrategy,
    cache_aware: bool,
) -> Result<CompactionReport, Error> {
    if !cache_aware && cm.token_count() > target && drop_oldest_turns(cm, target) {
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
    report(cm, strategy, tokens_before, target, limit)
}

/// Runs every step, asking `summarizer` when a summary is wanted: the async convenience over
/// [`begin`] and [`finish`]. An error from the summarizer is returned as it is (the cheap
/// strategies may have been applied).
pub(super) async fn run(
    cm: &mut ContextManager,
    target: usize,
    limit: usize,
    summarizer: Option<&dyn Summarizer>,
) -> Result<CompactionReport, Error> {
    match begin(cm, target, limit, summarizer.is_some())? {
        CompactionStep::Done(report) => Ok(report),
        CompactionStep::Summarize(span) => {
            let Some(summarizer) = summarizer else {
                return finish(cm, None);
            };
            match summarizer.summarize(&span).await {
                Ok(summary) => finish(cm, Some(summary)),
                Err(e) => {
                    cm.pending = None;
                    Err(e)
                }
            }
        }
    }
}

/// Drops the reasoning items of messages before the current turn, oldest message first, until
/// the count is at most `target`; true when one went. A message left with nothing but its
/// reasoning keeps it (an empty message is not a valid history).
fn drop_old_reasoning(cm: &mut ContextManager, target: usize) -> bool {
    let current = turn_starts(&cm.messages).last().copied().unwrap_or(0);
    let mut dropped = false;
    for i in 0..current {
        if cm.token_count() <= target {
            break;
        }
        cm.modify(i, |m| {
            let reasoning = m
                .content
                .iter()
                .filter(|b| matches!(b, ContentBlock::Reasoning { .. }))
                .count();
            if reasoning == 0 || reasoning == m.content.len() {
                return false;
            }
            m.content
                .retain(|b| !matches!(b, ContentBlock::Reasoning { .. }));
            dropped = true;
            true
        });
    }
    dropped
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

/// The tool names of the calls in `message`, by id (the first call of an id names it).
fn tool_names(message: Option<&Message>) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for (id, name, _) in message.into_iter().flat_map(Message::tool_uses) {
        names
            .entry(id.to_owned())
            .or_insert_with(|| name.to_owned());
    }
    names
}

/// Replaces the tool results of `message` with a stable placeholder that says what went and
/// how to get it back. Returns whether anything changed.
fn elide_for_cache(message: &mut Message, names: &HashMap<String, String>) -> bool {
    let mut changed = false;
    for block in &mut message.content {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            json,
            ..
        } = block
        {
            if content.starts_with(CACHE_ELIDED_PREFIX) || content.starts_with(ELIDED_PREFIX) {
                continue;
            }
            let name = names.get(tool_use_id).map_or("the tool", String::as_str);
            let placeholder = format!(
                "{CACHE_ELIDED_PREFIX}{} bytes from `{name}`; call the tool again if you need it]",
                content.len()
            );
            if placeholder.len() < content.len() {
                *content = placeholder;
                *json = None;
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

/// Where a cache-aware drop after the head ends: the fewest oldest messages after the first
/// one (the head, which stays word for word) that reach `target`, never the latest user input
/// or the latest tool step. `None` when nothing can go.
fn head_cut(cm: &ContextManager, target: usize) -> Option<usize> {
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
    let note_room = 64;
    let mut chosen = None;
    for cut in (2..len)
        .filter(|&cut| can_follow_head(cm, cut))
        .filter(|&cut| latest_input == 0 || cut <= latest_input)
        .filter(|&cut| cut <= latest_step)
    {
        chosen = Some(cut);
        let removed: usize = cm.counts[1..cut].iter().sum();
        if cm.count_without_range(1, cut, removed) + note_room <= target {
            break;
        }
    }
    chosen
}

/// Drops the messages in `[1, cut)` and appends one note to the head saying so, with the
/// summary of what went when there is one. A second drop replaces the note of the first.
fn drop_after_head(
    cm: &mut ContextManager,
    cut: usize,
    summary: Option<&str>,
) -> CompactionStrategy {
    let previous = previous_note(&cm.messages[0]);
    let dropped_now = cut - 1;
    let total_dropped = previous.map_or(0, |(_, n)| n) + dropped_now;
    let (note, strategy) = match summary {
        Some(summary) => (
            format!(
                "{DROPPED_PREFIX}{total_dropped} messages]\n{SUMMARY_HEADER}\n{}",
                summary.trim()
            ),
            CompactionStrategy::Summarize,
        ),
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
    strategy
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
fn report(
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
        return Err(ContextError::TooLarge {
            tokens: tokens_after,
            limit,
            context_window: cm.config.context_window as usize,
            output_reserve: cm.config.output_reserve as usize,
        }
        .into());
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
                if let ContentBlock::ToolResult { content, json, .. } = block {
                    if content.len() > cap {
                        *content = cut_middle(content, cap);
                        // What is left is text: the structure no longer matches it.
                        *json = None;
                        changed = true;
                    }
                }
            }
            changed
        });
    }
}

/// The text that replaces an image compaction removed.
pub(crate) const IMAGE_PLACEHOLDER: &str = "[image removed to save context]";

/// (a') Replaces the images and documents of the messages before the `keep` most recent turns
/// with placeholders, oldest first, until the conversation is within `target`.
fn drop_old_images(cm: &mut ContextManager, keep: usize, target: usize) {
    let starts = turn_starts(&cm.messages);
    let recent_start = if starts.len() > keep {
        starts[starts.len() - keep]
    } else {
        0
    };
    for i in 0..recent_start {
        if cm.token_count() <= target {
            return;
        }
        cm.modify(i, replace_media);
    }
}

fn replace_media(message: &mut Message) -> bool {
    let mut changed = false;
    for block in &mut message.content {
        match block {
            ContentBlock::Image { .. } => {
                *block = ContentBlock::text(IMAGE_PLACEHOLDER);
                changed = true;
            }
            ContentBlock::Document { title, .. } => {
                let what = match title {
                    Some(title) => format!("[document \"{title}\" removed to save context]"),
                    None => "[document removed to save context]".to_owned(),
                };
                *block = ContentBlock::text(what);
                changed = true;
            }
            ContentBlock::ToolResult {
                content, images, ..
            } if !images.is_empty() => {
                let n = images.len();
                images.clear();
                if !content.is_empty() {
                    content.push('\n');
                }
                content.push_str(&format!(
                    "[{n} image{} removed to save context]",
                    if n == 1 { "" } else { "s" }
                ));
                changed = true;
            }
            _ => {}
        }
    }
    changed
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
        if let ContentBlock::ToolResult { content, json, .. } = block {
            if content.starts_with(ELIDED_PREFIX) {
                continue;
            }
            let placeholder = format!("{ELIDED_PREFIX}{} bytes]", content.len());
            if placeholder.len() < content.len() {
                *content = placeholder;
                *json = None;
                changed = true;
            }
        }
    }
    changed
}

/// (c) Replaces the messages before `cut` (a turn start) with `summary`, merged into the first
/// kept user message.
fn apply_summary(cm: &mut ContextManager, cut: usize, summary: &str) {
    let Some(first_kept) = cm.messages.get(cut) else {
        return;
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

    /// A manager in the classic order (no low-water mark), which these tests pin down.
    fn manager(keep_recent_turns: u32) -> ContextManager {
        ContextManager::new(
            ContextConfig::default()
                .keep_recent_turns(keep_recent_turns)
                .compact_to_threshold(),
        )
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
    fn a_cache_placeholder_no_shorter_than_the_output_is_not_used() {
        let names = HashMap::from([("1".to_owned(), "read".to_owned())]);
        let placeholder = |len: usize| {
            format!(
                "{CACHE_ELIDED_PREFIX}{len} bytes from `read`; call the tool again if you need it]"
            )
        };
        // The output whose placeholder is exactly as long as it is.
        let same = (10..1000)
            .find(|&len| placeholder(len).len() == len)
            .unwrap();
        let mut m = results("1", &"y".repeat(same));
        assert!(!elide_for_cache(&mut m, &names));
        assert_eq!(m, results("1", &"y".repeat(same)));
        let mut m = results("1", &"y".repeat(same + 1));
        assert!(elide_for_cache(&mut m, &names));
        assert_eq!(m, results("1", &placeholder(same + 1)));
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
        assert!(
            matches!(err, Error::Context(ContextError::TooLarge { .. })),
            "{err:?}"
        );
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
    fn old_reasoning_goes_first_oldest_first_and_the_current_turn_keeps_its_own() {
        let reasoning = |id: &str| ContentBlock::Reasoning {
            id: id.into(),
            summary: vec!["thought".into()],
            encrypted_content: Some("e".repeat(4000)),
        };
        let mut cm = manager(1);
        for (t, id) in ["rs_1", "rs_2", "rs_3"].iter().enumerate() {
            cm.push(Message::user(format!("question {t}")));
            cm.push(Message {
                role: Role::Assistant,
                content: vec![reasoning(id), ContentBlock::text("answer")],
            });
        }
        cm.push(Message::user("last"));
        cm.push(Message {
            role: Role::Assistant,
            content: vec![reasoning("rs_4"), ContentBlock::text("now")],
        });
        let ids = |cm: &ContextManager| -> Vec<String> {
            cm.messages()
                .iter()
                .flat_map(|m| &m.content)
                .filter_map(|b| match b {
                    ContentBlock::Reasoning { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .collect()
        };
        let before = cm.token_count();
        // Just under one item less: the oldest goes, and only it.
        let target = before - 500;
        let report = futures::executor::block_on(run(&mut cm, target, before, None)).unwrap();
        assert_eq!(report.strategy, CompactionStrategy::DropOldReasoning);
        assert_eq!(ids(&cm), ["rs_2", "rs_3", "rs_4"]);
        assert!(report.tokens_after <= target);
        // Down to nothing old: the current turn's reasoning stays.
        let report = futures::executor::block_on(run(&mut cm, 1, before, None)).unwrap();
        assert!(ids(&cm).contains(&"rs_4".to_owned()), "{:?}", ids(&cm));
        assert!(!ids(&cm).contains(&"rs_3".to_owned()));
        assert!(report.tokens_after < before);
        assert!(cm.validate().is_ok());
    }

    #[test]
    fn dropping_old_reasoning_is_reported_and_an_exact_fit_ends_the_compaction_there() {
        let reasoning = |id: &str| ContentBlock::Reasoning {
            id: id.into(),
            summary: vec!["thought".into()],
            encrypted_content: Some("e".repeat(4000)),
        };
        // Two turns, both kept whole (keep 10): old reasoning is all compaction may drop,
        // besides cutting the long tool output.
        let build = |old_reasoning: bool, output: &str| {
            let mut cm = manager(10);
            cm.push(Message::user("q1"));
            let mut first = vec![ContentBlock::text("a1")];
            if old_reasoning {
                first.insert(0, reasoning("rs_1"));
            }
            cm.push(Message {
                role: Role::Assistant,
                content: first,
            });
            cm.push(Message::user("q2"));
            step(&mut cm, "c1", "in", output);
            cm.push(Message {
                role: Role::Assistant,
                content: vec![reasoning("rs_2"), ContentBlock::text("a2")],
            });
            cm
        };
        let long = "y".repeat(200_000);

        // The target is exactly the size without the old item: dropping it is enough, and the
        // long output is left alone.
        let target = build(false, &long).token_count();
        let mut cm = build(true, &long);
        let before = cm.token_count();
        let report = futures::executor::block_on(run(&mut cm, target, before, None)).unwrap();
        assert_eq!(report.strategy, CompactionStrategy::DropOldReasoning);
        assert_eq!(report.tokens_after, target);
        assert_eq!(outputs(&cm)[0].1, long);

        // One token less, and the output is cut (so it is long enough to be).
        let mut cm = build(true, &long);
        let report = futures::executor::block_on(run(&mut cm, target - 1, before, None)).unwrap();
        assert!(outputs(&cm)[0].1.len() < long.len());
        assert_eq!(report.strategy, CompactionStrategy::TruncateToolOutputs);

        // Still over after the reasoning goes, with nothing else the cache-aware order may
        // cut (no tool results, the head kept): the report names the step that did the work.
        let mut cm = ContextManager::new(
            ContextConfig::default()
                .keep_recent_turns(10)
                .compaction_target(0.5),
        )
        .with_counter(CharEstimateCounter);
        for (t, id) in ["rs_1", "rs_2"].iter().enumerate() {
            cm.push(Message::user(format!("q{t}")));
            cm.push(Message {
                role: Role::Assistant,
                content: vec![reasoning(id), ContentBlock::text("a")],
            });
        }
        let before = cm.token_count();
        let report = futures::executor::block_on(run(&mut cm, 1, before, None)).unwrap();
        assert_eq!(report.strategy, CompactionStrategy::DropOldReasoning);
        assert!(report.tokens_after < before);
    }

    /// A summarizer that always answers with this text.
    struct Fixed(&'static str);

    #[async_trait]
    impl Summarizer for Fixed {
        async fn summarize(&self, _span: &[Message]) -> Result<String, Error> {
            Ok(self.0.to_owned())
        }
    }

    fn cache_aware(keep_recent_turns: u32) -> ContextManager {
        ContextManager::new(
            ContextConfig::default()
                .keep_recent_turns(keep_recent_turns)
                .compaction_target(0.5),
        )
        .with_counter(CharEstimateCounter)
    }

    /// A cache-aware manager keeping one recent turn, holding six turns of 2,000 bytes each.
    fn six_cache_aware_turns() -> ContextManager {
        let mut cm = cache_aware(1);
        for t in 0..6 {
            turn(&mut cm, t, &"y".repeat(2_000));
        }
        cm
    }

    #[test]
    fn with_only_the_kept_turns_there_is_nothing_to_summarize() {
        let mut cm = manager(2);
        turn(&mut cm, 0, &"y".repeat(400));
        turn(&mut cm, 1, &"y".repeat(400));
        let before = cm.token_count();
        // `Unused` panics if asked: the two kept turns are not a span to summarize.
        futures::executor::block_on(run(&mut cm, before / 2, before, Some(&Unused))).unwrap();
        assert!(cm.validate().is_ok());
    }

    #[test]
    fn a_cache_aware_summary_replaces_the_span_after_the_head() {
        let mut cm = six_cache_aware_turns();
        let before = cm.token_count();
        let report = futures::executor::block_on(run(
            &mut cm,
            before / 4,
            before,
            Some(&Fixed("what happened")),
        ))
        .unwrap();
        assert_eq!(report.strategy, CompactionStrategy::Summarize);
        let head = cm.messages[0].text();
        assert!(head.starts_with("request 0"), "{head}");
        assert!(head.contains("what happened"), "{head}");
        assert!(cm.len() < 24);
        assert!(cm.validate().is_ok());
    }

    #[test]
    fn a_conversation_cut_back_to_the_span_while_summarizing_keeps_what_is_left() {
        // The span to summarize ends at `cut`; the conversation is rolled back to exactly
        // that meanwhile, and no summary came: there is nothing after the span to keep, so
        // nothing is dropped after the head.
        let mut cm = six_cache_aware_turns();
        let before = cm.token_count();
        let CompactionStep::Summarize(span) = begin(&mut cm, before / 4, before, true).unwrap()
        else {
            panic!("a summary is wanted");
        };
        cm.truncate(span.len());
        let kept = cm.messages.clone();
        finish(&mut cm, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cm.messages[1..], kept[1..]);
    }

    #[test]
    fn a_message_of_only_reasoning_keeps_it() {
        // Emptying it would leave an empty message; the cache-aware order drops nothing here
        // (the only possible cut would pass the latest input).
        let reasoning = |id: &str| ContentBlock::Reasoning {
            id: id.into(),
            summary: vec!["thought".into()],
            encrypted_content: Some("e".repeat(2000)),
        };
        let mut cm = cache_aware(10);
        cm.push(Message::user("q1"));
        cm.push(Message {
            role: Role::Assistant,
            content: vec![reasoning("rs_1")],
        });
        cm.push(Message::user("q2"));
        cm.push(Message {
            role: Role::Assistant,
            content: vec![reasoning("rs_2"), ContentBlock::text("a2")],
        });
        let before = cm.messages.clone();
        let count = cm.token_count();
        futures::executor::block_on(run(&mut cm, 1, count, None)).ok();
        assert_eq!(cm.messages, before);
    }

    #[test]
    fn a_cache_aware_cut_never_separates_a_call_from_its_results() {
        // The first call's input is most of the conversation: dropping that one message would
        // be enough, but its results would be left without it. The cut takes both.
        let mut cm = cache_aware(1);
        cm.push_user_text("do the task");
        step(&mut cm, "s0", &"x".repeat(8_000), "small");
        step(&mut cm, "s1", "in", "small");
        step(&mut cm, "s2", "in", "small");
        let before = cm.token_count();
        let report = futures::executor::block_on(run(&mut cm, before / 3, before, None)).unwrap();
        assert_eq!(report.strategy, CompactionStrategy::DropOldestTurns);
        assert!(cm.validate().is_ok(), "{:?}", cm.messages);
        // The head, then the second step on.
        assert_eq!(cm.len(), 5, "{:?}", cm.messages);
        assert!(cm.messages[1].tool_uses().any(|(id, _, _)| id == "s1"));
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
    fn only_the_steps_count_toward_what_dropping_them_saves() {
        // An earlier turn, then a long request: its tokens stay, so they must not count as
        // removed when deciding how many steps to drop.
        let mut cm = manager(4);
        cm.push_user_text("earlier");
        cm.push(Message::assistant("done"));
        cm.push_user_text(format!("do the task {}", "r".repeat(1_200))); // message 2
        for s in 0..4 {
            step(&mut cm, &format!("s{s}"), &"x".repeat(400), "ok");
        }
        let two_steps: usize = cm.counts[3..7].iter().sum();
        assert!(cm.counts[2] + cm.counts[3] + cm.counts[4] > two_steps);
        let target = cm.token_count() - two_steps;
        assert!(drop_oldest_steps(&mut cm, target));
        assert_eq!(call_ids(&cm), ["s2", "s3"]);
        assert_eq!(cm.messages()[0].text(), "earlier");
        assert!(cm.messages()[2]
            .text()
            .starts_with("[2 earlier tool step(s)"));
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
}
