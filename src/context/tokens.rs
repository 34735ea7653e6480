//! Token counting: the [`TokenCounter`] trait, a tiktoken-based counter and a cheap estimate.
//!
//! Counts are estimates of what a provider will bill: every provider tokenizes differently, and
//! only OpenAI publishes its tokenizer. The [`ContextManager`](crate::ContextManager) anchors the
//! estimate to the provider's own `usage` figures after every response, so the estimate only has
//! to be close for the messages added since the last response.

use std::fmt;
use std::sync::{Arc, LazyLock};

use tiktoken_rs::CoreBPE;

use crate::media::{self, ImageTokenRule};
use crate::message::{ContentBlock, MediaSource, Message};

/// Counts the tokens of a text.
///
/// Implementations must be cheap to call repeatedly and must never panic on any input.
pub trait TokenCounter: Send + Sync + fmt::Debug {
    /// The number of tokens `text` encodes to.
    fn count(&self, text: &str) -> usize;
}

impl<T: TokenCounter + ?Sized> TokenCounter for Arc<T> {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }
}

impl<T: TokenCounter + ?Sized> TokenCounter for Box<T> {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }
}

impl<T: TokenCounter + ?Sized> TokenCounter for &T {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }
}

/// The `o200k_base` encoder (GPT-4o, GPT-4.1, GPT-5, o-series), built once per process on first
/// use and shared by every [`TiktokenCounter`]. `None` if the embedded vocabulary failed to load
/// (it cannot, short of a broken build); counting then falls back to the byte estimate.
static O200K: LazyLock<Option<CoreBPE>> = LazyLock::new(|| match tiktoken_rs::o200k_base() {
    Ok(bpe) => Some(bpe),
    Err(e) => {
        tracing::warn!(error = %e, "could not build the o200k_base tokenizer; estimating tokens as bytes/4");
        None
    }
});

/// Longest piece of text handed to the tokenizer in one call. Longer texts are counted in
/// pieces cut at whitespace (or, failing that, at a character boundary), which bounds the work
/// the tokenizer's regex can do on adversarial input; the sum differs from a one-piece count by
/// at most a token per cut.
const MAX_PIECE_BYTES: usize = 64 * 1024;

/// Counts tokens with OpenAI's `o200k_base` BPE (via `tiktoken-rs`).
///
/// Exact for GPT-4o, GPT-4.1, GPT-5 and the o-series; a close estimate for other models (Claude
/// tokenizes somewhat more finely; the [`ContextManager`](crate::ContextManager) corrects for
/// that with the provider's reported usage). The encoder is built once per process, in the
/// background from the first [`TiktokenCounter::new`] (about 0.2 s in release builds, see
/// BENCHMARKS.md; about 1 s in an unoptimized build, which the README's profile lines avoid);
/// call [`TiktokenCounter::warm_up`] to wait for it up front.
#[derive(Debug, Clone, Copy)]
pub struct TiktokenCounter {
    _private: (),
}

impl Default for TiktokenCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl TiktokenCounter {
    /// A counter using the shared `o200k_base` encoder.
    ///
    /// The first counter of a process starts building the encoder on a background thread,
    /// so the build overlaps with whatever the program does before it first counts (an
    /// agent counts just before its first model call). A count that comes before the build
    /// is done waits for it: counts never depend on timing.
    pub fn new() -> Self {
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            let spawned = std::thread::Builder::new()
                .name("agent-loop-tokenizer".to_owned())
                .spawn(|| LazyLock::force(&O200K).is_some());
            if let Err(e) = spawned {
                // No thread to be had: the first count builds the encoder instead.
                tracing::debug!(error = %e, "could not start the tokenizer build thread");
            }
        });
        TiktokenCounter { _private: () }
    }

    /// Builds the shared encoder now, if it is not built yet.
    pub fn warm_up() {
        LazyLock::force(&O200K);
    }
}

impl TokenCounter for TiktokenCounter {
    fn count(&self, text: &str) -> usize {
        let Some(bpe) = O200K.as_ref() else {
            return CharEstimateCounter.count(text);
        };
        let mut total = 0;
        for piece in pieces(text, MAX_PIECE_BYTES) {
            total += bpe.encode_ordinary(piece).len();
        }
        total
    }
}

/// Splits `text` into pieces of at most `max` bytes (more only when a single character is
/// longer, which cannot happen for `max >= 4`), cutting after whitespace where possible.
fn pieces(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= max {
            let piece = rest;
            rest = "";
            return Some(piece);
        }
        let hard = floor_char_boundary(rest, max.max(4));
        // Prefer to cut right after the last whitespace in the second half of the window.
        let cut = rest.as_bytes()[hard / 2..hard]
            .iter()
            .rposition(|b| b.is_ascii_whitespace())
            .map(|p| hard / 2 + p + 1)
            .unwrap_or(hard);
        let cut = if cut == 0 { rest.len() } else { cut };
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece)
    })
}

/// The largest index `<= at` that is a character boundary of `s`.
pub(crate) fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest index `>= at` that is a character boundary of `s`.
pub(crate) fn ceil_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A cheap estimate: one token per four bytes, rounded up.
///
/// Good enough for English prose and code (real tokenizers give 3.5–4.5 bytes per token there),
/// too low for CJK text (about one token per character, three bytes each). Use it where speed
/// matters more than accuracy; the provider's reported usage corrects it after every response.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharEstimateCounter;

impl TokenCounter for CharEstimateCounter {
    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(4)
    }
}

/// The default counter's estimate before it counts exactly: one token per three bytes,
/// rounded up: on the high side for prose and code (3.5–4.5 bytes a token), about right for
/// CJK text (three bytes a character, about a token each). See
/// [`ContextManager::new`](crate::ContextManager::new).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LazyEstimate;

impl TokenCounter for LazyEstimate {
    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(3)
    }
}

/// Fixed tokens every message costs beyond its content (role markers, separators).
pub(crate) const MESSAGE_OVERHEAD: usize = 4;
/// Fixed tokens a tool call or tool result block costs beyond its text (ids, framing).
pub(crate) const TOOL_BLOCK_OVERHEAD: usize = 8;
/// Fixed tokens of the system prompt's framing.
pub(crate) const SYSTEM_OVERHEAD: usize = 4;

/// The estimated tokens of one message: a fixed overhead plus its blocks. Tool inputs and blocks
/// the crate does not model are counted through their JSON text; thinking signatures and
/// redacted thinking are opaque and counted as bytes/4.
pub(crate) fn message_tokens(
    counter: &dyn TokenCounter,
    images: ImageTokenRule,
    message: &Message,
) -> usize {
    let mut total = MESSAGE_OVERHEAD;
    for block in &message.content {
        total += block_tokens(counter, images, block);
    }
    total
}

/// The estimated tokens of an image: the provider's rule applied to the size read from the
/// image's header (a URL counts as the largest image).
pub(crate) fn image_tokens(rule: ImageTokenRule, source: &MediaSource) -> usize {
    rule.image_tokens(media::source_dimensions(source))
}

fn block_tokens(counter: &dyn TokenCounter, images: ImageTokenRule, block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => counter.count(text),
        ContentBlock::Thinking {
            thinking,
            signature,
        } => counter.count(thinking) + signature.len().div_ceil(4),
        ContentBlock::RedactedThinking { data } => data.len().div_ceil(4),
        ContentBlock::Reasoning {
            id,
            summary,
            encrypted_content,
        } => {
            id.len().div_ceil(4)
                + summary.iter().map(|s| counter.count(s)).sum::<usize>()
                + encrypted_content
                    .as_ref()
                    .map_or(0, |c| c.len().div_ceil(4))
        }
        ContentBlock::Compaction {
            id,
            encrypted_content,
        } => id.as_ref().map_or(0, |id| id.len().div_ceil(4)) + encrypted_content.len().div_ceil(4),
        ContentBlock::ToolUse { id: _, name, input } => {
            TOOL_BLOCK_OVERHEAD + counter.count(name) + counter.count(&input.to_string())
        }
        ContentBlock::ToolResult {
            content,
            images: sources,
            ..
        } => {
            TOOL_BLOCK_OVERHEAD
                + counter.count(content)
                + sources
                    .iter()
                    .map(|s| image_tokens(images, s))
                    .sum::<usize>()
        }
        ContentBlock::Image { source } => image_tokens(images, source),
        ContentBlock::Document { source, title } => {
            let pages = media::source_pages(source).unwrap_or(media::UNKNOWN_DOCUMENT_PAGES);
            pages.saturating_mul(media::DOCUMENT_PAGE_TOKENS)
                + title.as_deref().map_or(0, |t| counter.count(t))
        }
        ContentBlock::Other(value) => counter.count(&value.to_string()),
    }
}

/// The estimated tokens of the system prompt, 0 when there is none.
pub(crate) fn system_tokens(counter: &dyn TokenCounter, system: Option<&str>) -> usize {
    match system {
        Some(s) => SYSTEM_OVERHEAD + counter.count(s),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_estimate_rounds_up() {
        assert_eq!(CharEstimateCounter.count(""), 0);
        assert_eq!(CharEstimateCounter.count("a"), 1);
        assert_eq!(CharEstimateCounter.count("abcd"), 1);
        assert_eq!(CharEstimateCounter.count("abcde"), 2);
    }

    #[test]
    fn pieces_cover_the_text_at_char_boundaries() {
        let text = "héllo wörld ".repeat(50) + &"日本語".repeat(40);
        for max in [4, 5, 7, 16, 100, 10_000] {
            let parts: Vec<&str> = pieces(&text, max).collect();
            assert_eq!(parts.concat(), text);
            assert!(parts.iter().all(|p| p.len() <= max.max(4)), "max {max}");
        }
        assert_eq!(pieces("", 8).count(), 0);
    }

    #[test]
    fn char_boundaries() {
        let s = "aé日";
        assert_eq!(floor_char_boundary(s, 2), 1);
        assert_eq!(ceil_char_boundary(s, 2), 3);
        assert_eq!(floor_char_boundary(s, 99), s.len());
        assert_eq!(ceil_char_boundary(s, 4), 6);
    }
}
