//! The model-backed [`Summarizer`]: the driver's tool for [`Action::Summarize`](crate::agent::Action::Summarize).
//!
//! Compaction itself (in `context/`) never calls a model: it asks for a summary as a step.
//! This summarizer answers that step by asking a model, so it lives beside the driver.

use std::fmt;

use async_trait::async_trait;
use futures::StreamExt;

use crate::context::{cut_middle, Summarizer};
use crate::error::{ContextError, Error, LlmError};
use crate::message::{ContentBlock, Message, Role, StopReason};
use crate::provider::{LlmClient, ModelRequest};
use crate::wire::LlmEvent;

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
                            what: "a conversation summary".into(),
                            limit: MAX_SUMMARY_BYTES,
                            setting: "LlmSummarizer::max_tokens".into(),
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
            Some(StopReason::EndTurn) => Err(ContextError::Summary(
                "the model returned an empty summary; the conversation was not summarized".into(),
            )
            .into()),
            Some(StopReason::MaxTokens) => Err(Error::Context(ContextError::Summary(format!(
                "the summary was cut off at max_tokens ({}) and was not used; raise \
                 LlmSummarizer::max_tokens",
                self.max_tokens
            )))),
            Some(other) => Err(Error::Context(ContextError::Summary(format!(
                "the summary did not finish normally (stop reason {other:?}) and was not used"
            )))),
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
                ContentBlock::Image { .. } => out.push_str(&format!("{who}: [an image]\n\n")),
                ContentBlock::Document { title, .. } => out.push_str(&format!(
                    "{who}: [a document{}]\n\n",
                    title
                        .as_deref()
                        .map(|t| format!(" titled \"{t}\""))
                        .unwrap_or_default()
                )),
                ContentBlock::Thinking { .. }
                | ContentBlock::RedactedThinking { .. }
                | ContentBlock::Reasoning { .. }
                | ContentBlock::Compaction { .. } => {}
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LlmStream;

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
            matches!(&err, Error::Context(ContextError::Summary(m)) if m.contains("empty summary")),
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
