//! Memory: the conversation history, its token count, and compaction.
//!
//! [`ContextManager`] holds the system prompt and the messages, keeps them valid for every
//! provider (ARCHITECTURE.md invariant 4, see [`validate`](ContextManager::validate)), counts their
//! tokens incrementally, anchors that count to the provider's reported usage, and compacts the
//! history when it nears the context window.
//!
//! ```text
//!  push ──► merge same-role ──► count the new message (cached per message)
//!                                      │
//!  record_usage ──► anchor: provider's figure for the prefix it saw
//!                                      │
//!  token_count = anchored prefix + estimates of later messages
//!                                      │ > threshold
//!  compact: (a) cut long tool outputs ─► (b) elide old tool outputs ─► (c) summarize old turns
//!           ─► (d) drop oldest turns      (each only if the previous did not suffice)
//! ```

use std::ops::Range;
use std::sync::Arc;

use crate::error::Error;
use crate::message::{ContentBlock, Message, Role, ToolSpec, Usage};
use crate::provider::encoded::{EncodedHistory, EncodedRef};

mod compact;
mod config;
mod history;
mod server_edits;

#[cfg(any(test, feature = "testing"))]
pub(crate) use history::validate as validate_history;
mod tokens;

/// What an invalid history, an oversize conversation or a failed compaction reports, inside
/// [`Error::Context`] (defined in [`error`](crate::error), re-exported beside the methods
/// that return it).
pub use crate::error::ContextError;
pub(crate) use compact::cut_middle;
pub use compact::{CompactionReport, CompactionStep, CompactionStrategy, Summarizer};
pub use config::ContextConfig;
pub(crate) use server_edits::is_server_compaction;
pub use tokens::{CharEstimateCounter, TiktokenCounter, TokenCounter};

pub use crate::message::Conversation;

/// The provider's token figure for a prefix of the history, and how it relates to our estimate.
///
/// `token_count = real × est_now / est_at_record + estimates of messages after the prefix`.
/// While the prefix is untouched, `est_now == est_at_record` and the anchored part is exactly
/// the provider's figure; when compaction rewrites the prefix, the provider's ratio of real to
/// estimated tokens is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Anchor {
    /// How many messages the prefix covers.
    len: usize,
    /// The provider's input-token figure when it was recorded.
    real: usize,
    /// Our estimate of the prefix (system, tools, `len` messages) when it was recorded; > 0.
    est_at_record: usize,
    /// Our estimate of the prefix now.
    est_now: usize,
}

impl Anchor {
    fn tokens(&self) -> usize {
        let scaled =
            (self.real as u128).saturating_mul(self.est_now as u128) / self.est_at_record as u128;
        usize::try_from(scaled).unwrap_or(usize::MAX)
    }
}

/// The conversation an agent holds: system prompt, messages, token count, compaction.
///
/// Pushing keeps roles alternating: a user message pushed after a user message (or an
/// assistant message after an assistant message) is merged into it, tool results first.
/// Token counts are cached per message, so a push costs time in proportion to what it adds.
///
/// ```
/// use agent_loop::{ContextManager, Message, Usage};
/// use agent_loop::context::{CharEstimateCounter, ContextConfig};
///
/// let mut context = ContextManager::new(ContextConfig::for_model("gpt-4o"))
///     .with_counter(CharEstimateCounter)
///     .with_system("You are terse.");
/// context.push_user_text("What is 2 + 2?");
/// context.push(Message::assistant("4"));
/// context.validate()?;
///
/// // After a response, the provider's usage is the exact count of what it was sent.
/// let usage = Usage { input_tokens: 21, ..Usage::default() };
/// context.record_usage(&usage, 1);
/// context.push_user_text("And 3 + 3?");
/// assert!(context.token_count() > 21);
/// assert!(!context.needs_compaction());
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ContextManager {
    config: ContextConfig,
    counter: Arc<dyn TokenCounter>,
    system: Option<String>,
    /// Invariant: `counts.len() == messages.len()` and
    /// `counts[i] == tokens::message_tokens(counter, &messages[i])`.
    /// Shared with the requests built from it ([`ModelRequest::messages`]); changed through
    /// `Arc::make_mut`, which copies only while a request still holds it.
    messages: Arc<Vec<Message>>,
    counts: Vec<usize>,
    /// Invariant: the sum of `counts`.
    total: usize,
    /// Invariant: `tokens::system_tokens(counter, system)`.
    system_tokens: usize,
    /// Estimated tokens of the tool definitions sent with each request (0 if not set).
    tools_tokens: usize,
    /// Invariant: `anchor.len <= messages.len()`, and `anchor.est_now` is the estimate of the
    /// system prompt, tools and the first `anchor.len` messages.
    anchor: Option<Anchor>,
    /// Whether tokens are still estimated ([`tokens::LazyEstimate`]) until the conversation
    /// grows past [`exact_from`](Self::exact_from): the default counter's way of not building
    /// the tokenizer (tens of megabytes) for a conversation that never comes near the window.
    lazy: bool,
    /// The tool definitions while `lazy`, to count them again exactly at the switch.
    lazy_tools: Vec<ToolSpec>,
    /// A compaction waiting for its summary ([`ContextManager::finish_compaction`]).
    pending: Option<compact::Pending>,
    /// What changed since [`mark_saved`](Self::mark_saved), for a session store.
    /// Invariant: `unsaved.from <= messages.len()`.
    unsaved: Unsaved,
    /// The messages as the last request's wire format encoded them.
    /// Invariant: told of every change to `messages` but an append
    /// ([`EncodedHistory::changed_from`]), so its entries are those of `messages` as they are.
    encoded: EncodedHistory,
}

/// What of a [`ContextManager`] changed since it was last
/// [marked saved](ContextManager::mark_saved): for a store that saves each turn's changes
/// instead of the whole conversation (the crate's session stores, a durable engine's state).
///
/// ```
/// use agent_loop::{ContextManager, Message};
///
/// let mut context = ContextManager::default();
/// context.push_user_text("Hi");
/// context.push(Message::assistant("Hello"));
/// context.mark_saved();
/// context.push_user_text("How are you?");
/// let unsaved = context.unsaved();
/// assert_eq!((unsaved.from, unsaved.whole), (2, false));
/// // Save `context.messages()[unsaved.from..]`, then:
/// context.mark_saved();
/// assert_eq!(context.unsaved().from, context.len());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsaved {
    /// The first message that changed (was added, merged into or rewritten) since the last
    /// save; `len()` when none did. Messages from here on replace the stored ones from here
    /// on, and stored ones past the end are gone.
    pub from: usize,
    /// Whether the system prompt changed or everything must be saved again (a conversation
    /// never saved, or one [restored](ContextManager::restore)).
    pub whole: bool,
}

impl Default for ContextManager {
    fn default() -> Self {
        ContextManager::new(ContextConfig::default())
    }
}

impl ContextManager {
    /// An empty conversation with this budget, counting tokens with [`TiktokenCounter`] once
    /// the conversation passes a quarter of the compaction threshold, and estimating them
    /// (a byte count, on the high side for prose and code) before that: the tokenizer is
    /// built only for a conversation that grows that far, or after
    /// [`count_exactly`](Self::count_exactly). What decides something is exact either way:
    /// compaction starts past the threshold, and after each response the count stands on
    /// the provider's own figure ([`record_usage`](Self::record_usage)).
    ///
    /// ```
    /// use agent_loop::context::ContextConfig;
    /// use agent_loop::ContextManager;
    ///
    /// let mut context = ContextManager::new(ContextConfig::for_model("gpt-4o"));
    /// context.push_user_text("Hello");
    /// assert!(!context.counts_exactly());
    /// context.count_exactly();
    /// assert!(context.counts_exactly());
    /// ```
    pub fn new(config: ContextConfig) -> Self {
        ContextManager {
            config,
            counter: Arc::new(tokens::LazyEstimate),
            lazy: true,
            lazy_tools: Vec::new(),
            system: None,
            messages: Arc::default(),
            counts: Vec::new(),
            total: 0,
            system_tokens: 0,
            tools_tokens: 0,
            anchor: None,
            pending: None,
            unsaved: Unsaved {
                from: 0,
                whole: true,
            },
            encoded: EncodedHistory::default(),
        }
    }

    /// Uses `counter` to count tokens (everything held is counted again; call
    /// [`set_tools`](Self::set_tools) after this, not before).
    pub fn with_counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.counter = Arc::new(counter);
        self.lazy = false;
        self.lazy_tools = Vec::new();
        self.recount_all();
        self
    }

    /// Sets the system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.set_system(Some(system.into()));
        self
    }

    /// Replaces (or removes) the system prompt.
    pub fn set_system(&mut self, system: Option<String>) {
        if system != self.system {
            self.unsaved.whole = true;
        }
        let new = tokens::system_tokens(&*self.counter, system.as_deref());
        let old = std::mem::replace(&mut self.system_tokens, new);
        self.system = system;
        self.adjust_anchor_prefix(old, new);
        self.count_exactly_if_grown();
    }

    /// The system prompt.
    pub fn system(&self) -> Option<&str> {
        self.system.as_deref()
    }

    /// Counts the tool definitions sent with every request into the token count.
    pub fn set_tools(&mut self, tools: &[ToolSpec]) {
        if self.lazy {
            self.lazy_tools = tools.to_vec();
        }
        let mut new = 0;
        for tool in tools {
            new += tokens::TOOL_BLOCK_OVERHEAD
                + self.counter.count(&tool.name)
                + self.counter.count(&tool.description)
                + self.counter.count(&tool.input_schema.to_string());
        }
        let old = std::mem::replace(&mut self.tools_tokens, new);
        self.adjust_anchor_prefix(old, new);
        self.count_exactly_if_grown();
    }

    /// Whether tokens are counted by the counter itself (exactly, for the default one), not
    /// estimated: after [`with_counter`](Self::with_counter), after
    /// [`count_exactly`](Self::count_exactly), or once the conversation passed a quarter of
    /// the compaction threshold.
    pub fn counts_exactly(&self) -> bool {
        !self.lazy
    }

    /// Counts with the exact tokenizer from now on, counting what is held again (the
    /// provider's last figure is kept). An agent with a token or cost budget does this at
    /// build, so that its budget checks use exact counts from the first call.
    pub fn count_exactly(&mut self) {
        if !self.lazy {
            return;
        }
        self.lazy = false;
        self.counter = Arc::new(TiktokenCounter::new());
        let anchor = self.anchor.take();
        let tools = std::mem::take(&mut self.lazy_tools);
        self.recount_all();
        self.set_tools(&tools);
        if let Some(a) = anchor {
            // The provider's figure stays; our estimate of its prefix is rescaled so the
            // ratio of real to estimated tokens holds as it did.
            let now = self.system_tokens
                + self.tools_tokens
                + self
                    .counts
                    .get(..a.len)
                    .unwrap_or_default()
                    .iter()
                    .sum::<usize>();
            let at_record = (a.est_at_record as u128)
                .saturating_mul(now as u128)
                .checked_div(a.est_now as u128)
                .and_then(|v| usize::try_from(v).ok())
                .unwrap_or(now);
            self.anchor = Some(Anchor {
                len: a.len,
                real: a.real,
                // Never 0: `Anchor::tokens` divides by it.
                est_at_record: at_record.max(1),
                est_now: now,
            });
        }
    }

    /// Where the default counter stops estimating: a quarter of the compaction threshold.
    fn exact_from(&self) -> usize {
        self.config.threshold_tokens() / 4
    }

    /// Switches to exact counts once the estimate passes [`exact_from`](Self::exact_from),
    /// starting the tokenizer's build in the background at half that.
    fn count_exactly_if_grown(&mut self) {
        if !self.lazy {
            return;
        }
        let estimate = self.estimated_tokens();
        if estimate >= self.exact_from() {
            self.count_exactly();
        } else {
            self.prepare_tokenizer(estimate);
        }
    }

    /// Starts building the tokenizer in the background once the estimate is half way to the
    /// switch, so that the switch does not wait for it. It changes when the tables are ready,
    /// never a count.
    fn prepare_tokenizer(&self, estimate: usize) {
        if estimate >= self.exact_from() / 2 {
            TiktokenCounter::new();
        }
    }

    /// The budget.
    pub fn config(&self) -> &ContextConfig {
        &self.config
    }

    /// Replaces the budget (for example after switching models).
    pub fn set_config(&mut self, config: ContextConfig) {
        let recount = config.image_tokens != self.config.image_tokens;
        self.config = config;
        if recount {
            let tools_tokens = self.tools_tokens;
            self.recount_all();
            self.tools_tokens = tools_tokens;
        }
    }

    /// Appends a message. A message of the same role as the last one is merged into it (tool
    /// results ahead of other blocks), so roles keep alternating.
    pub fn push(&mut self, message: Message) {
        match self.messages.last() {
            Some(last) if last.role == message.role => {
                let i = self.messages.len() - 1;
                self.modify(i, |m| {
                    history::merge_into(m, message.content);
                    true
                });
            }
            _ => {
                let count =
                    tokens::message_tokens(&*self.counter, self.config.image_tokens, &message);
                Arc::make_mut(&mut self.messages).push(message);
                self.counts.push(count);
                self.total += count;
            }
        }
        self.count_exactly_if_grown();
    }

    /// Appends a user message with one text block (merged into a trailing user message).
    pub fn push_user_text(&mut self, text: impl Into<String>) {
        self.push(Message::user(text));
    }

    /// Appends a user message carrying tool results (merged into a trailing user message).
    pub fn push_tool_results(&mut self, results: Vec<ContentBlock>) {
        self.push(Message {
            role: Role::User,
            content: results,
        });
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages, shared rather than copied (for a [`ModelRequest`](crate::provider::ModelRequest)).
    pub(crate) fn shared_messages(&self) -> Arc<Vec<Message>> {
        Arc::clone(&self.messages)
    }

    /// The messages for a request, shared, with the link to their encoded bytes: a client
    /// encodes only the messages its format has not encoded before.
    pub(crate) fn request_messages(&self) -> (Arc<Vec<Message>>, EncodedRef) {
        let messages = Arc::clone(&self.messages);
        let encoded = self.encoded.for_request(&messages);
        (messages, encoded)
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are no messages.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Drops the messages from index `len` on (no-op if there are fewer), for example to roll
    /// back a turn that failed.
    pub fn truncate(&mut self, len: usize) {
        if len < self.messages.len() {
            self.splice(len..self.messages.len(), Vec::new());
        }
    }

    /// Removes every message (the system prompt stays).
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// The tokens the next request will use for the system prompt, tool definitions and
    /// messages: the provider's figure for the prefix it last reported on
    /// ([`record_usage`](Self::record_usage)) plus estimates for the messages added since.
    pub fn token_count(&self) -> usize {
        let estimate = self.estimated_tokens();
        match &self.anchor {
            Some(a) => a
                .tokens()
                .saturating_add(estimate.saturating_sub(a.est_now)),
            None => estimate,
        }
    }

    /// Our own estimate of the tokens of the system prompt, tool definitions and messages,
    /// ignoring the provider's reported usage. Kept up to date incrementally.
    pub fn estimated_tokens(&self) -> usize {
        self.system_tokens + self.tools_tokens + self.total
    }

    /// Anchors the token count to a response's usage: `usage.total_input_tokens()` is the exact
    /// count of the request that produced it, which held the system prompt, the tool
    /// definitions and the first `messages_sent` messages. Call it right after the response,
    /// before compacting. Ignored when the usage reports no input tokens or `messages_sent` is
    /// more than the messages held.
    pub fn record_usage(&mut self, usage: &Usage, messages_sent: usize) {
        let real = usize::try_from(usage.total_input_tokens()).unwrap_or(usize::MAX);
        if real == 0 || messages_sent > self.messages.len() {
            return;
        }
        let est = self.system_tokens
            + self.tools_tokens
            + self.counts[..messages_sent].iter().sum::<usize>();
        if est == 0 {
            return;
        }
        self.anchor = Some(Anchor {
            len: messages_sent,
            real,
            est_at_record: est,
            est_now: est,
        });
    }

    /// Whether the token count is past the compaction threshold.
    pub fn needs_compaction(&self) -> bool {
        self.token_count() > self.config.threshold_tokens()
    }

    /// Checks the history invariant: the first message is a user message; roles alternate; no
    /// message is empty; tool calls and thinking only in assistant messages, tool results only
    /// in user messages; tool call ids are unique and each tool call is answered by exactly one
    /// tool result at the start of the next user message, in the model's order; no tool result
    /// answers nothing. An empty history is valid.
    ///
    /// The error ([`Error::Context`]) names the first violation and the message it is in.
    pub fn validate(&self) -> Result<(), Error> {
        history::validate(&self.messages)
    }

    /// In debug builds, panics if the history is invalid (a bug in the crate: the machine
    /// keeps it valid whatever the model sends); in release builds does nothing.
    #[track_caller]
    pub(crate) fn debug_assert_valid(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.validate() {
            panic!("{e}");
        }
    }

    /// Makes the history valid for the next request after an interruption: every tool call
    /// without a result gets an error result `"interrupted: the tool call did not complete"` in
    /// the next user message (inserted or extended, answered in the model's order); empty
    /// messages (such as a trailing empty assistant message) are dropped, same-role neighbours
    /// merged, and tool results that answer no call dropped. Returns how many tool calls were
    /// given an error result.
    ///
    /// It cannot fix a history that starts with an assistant message or repeats a tool call id;
    /// [`validate`](Self::validate) still reports those.
    pub fn repair(&mut self) -> usize {
        let (new, repaired) = history::repair(self.messages.to_vec());
        if new == *self.messages {
            return repaired;
        }
        let first_diff = self
            .messages
            .iter()
            .zip(&new)
            .position(|(a, b)| a != b)
            .unwrap_or(self.messages.len().min(new.len()));
        let tail = new[first_diff..].to_vec();
        self.splice(first_diff..self.messages.len(), tail);
        repaired
    }

    /// The conversation, for persistence.
    pub fn snapshot(&self) -> Conversation {
        Conversation {
            system: self.system.clone(),
            messages: self.messages.to_vec(),
        }
    }

    /// Replaces the conversation with a stored one. Tool calls left unanswered by an
    /// interrupted run are [repaired](Self::repair) (the number is returned); if the result is
    /// still not a valid history, nothing changes and [`Error::Context`] says why.
    pub fn restore(&mut self, conversation: Conversation) -> Result<usize, Error> {
        let (messages, repaired) = history::repair(conversation.messages);
        history::validate(&messages)?;
        self.set_system(conversation.system);
        self.anchor = None;
        self.counts = messages
            .iter()
            .map(|m| tokens::message_tokens(&*self.counter, self.config.image_tokens, m))
            .collect();
        self.total = self.counts.iter().sum();
        self.messages = Arc::new(messages);
        self.encoded.changed_from(0);
        self.unsaved = Unsaved {
            from: 0,
            whole: true,
        };
        self.count_exactly_if_grown();
        Ok(repaired)
    }

    /// Replaces the conversation with a paused run's, as it is: its last response's calls
    /// stay unanswered (the resumed run answers them). Not checked: the machine checks the
    /// paused run holds together.
    pub(crate) fn restore_paused(&mut self, conversation: Conversation) {
        self.set_system(conversation.system);
        self.anchor = None;
        self.pending = None;
        self.counts = conversation
            .messages
            .iter()
            .map(|m| tokens::message_tokens(&*self.counter, self.config.image_tokens, m))
            .collect();
        self.total = self.counts.iter().sum();
        self.messages = Arc::new(conversation.messages);
        self.encoded.changed_from(0);
        // Whole, unless the caller knows the session holds it
        // ([`restored_is_saved`](Self::restored_is_saved)); what changes after this is
        // tracked from its end.
        self.unsaved = Unsaved {
            from: self.messages.len(),
            whole: true,
        };
        self.count_exactly_if_grown();
    }

    /// Notes that the conversation last restored ([`restore_paused`](Self::restore_paused))
    /// is what the session holds: only what changed since needs saving.
    pub(crate) fn restored_is_saved(&mut self) {
        self.unsaved.whole = false;
    }

    /// What changed since the last [`mark_saved`](Self::mark_saved).
    pub fn unsaved(&self) -> Unsaved {
        self.unsaved
    }

    /// Notes that everything held is saved: [`unsaved`](Self::unsaved) starts again from
    /// here.
    pub fn mark_saved(&mut self) {
        self.unsaved = Unsaved {
            from: self.messages.len(),
            whole: false,
        };
    }

    /// Whether `messages` are a valid history as they are (every call answered, roles
    /// alternating). The error names the first violation.
    pub(crate) fn check_valid(messages: &[Message]) -> Result<(), Error> {
        history::validate(messages)
    }

    /// The numbers of first messages that make a valid history (0 always), in order: where
    /// a conversation may be cut.
    pub(crate) fn valid_cuts(messages: &[Message]) -> Vec<usize> {
        history::valid_cuts(messages)
    }

    /// Whether `conversation` can be restored: once repaired (its unanswered calls answered
    /// as interrupted), a valid history. The error names the first violation.
    pub(crate) fn check_restorable(conversation: &Conversation) -> Result<(), Error> {
        let (messages, _) = history::repair(conversation.messages.clone());
        history::validate(&messages)
    }

    /// Compacts the history if it is past the compaction threshold (the high-water mark),
    /// bringing it down to [`compaction_target`](ContextConfig::compaction_target) (the
    /// low-water mark, default 40% of the input budget).
    ///
    /// With the low-water mark (the default), compaction is cache-aware: the system prompt,
    /// tools and first user message stay byte-identical; tool outputs are elided oldest first
    /// (each replaced by a stable placeholder naming the tool, so earlier placeholders never
    /// change again) until the mark is reached; if that is not enough, the oldest steps and
    /// turns after the first message go, with one note appended to it (a summary, with a
    /// `summarizer`), never the current request or the latest tool step. A request then shares
    /// the provider's prompt cache with the one before up to the first elided output, and
    /// compaction fires rarely. Call it before every request, as the agent does.
    ///
    /// With [`compact_to_threshold`](ContextConfig::compact_to_threshold), the strategies of
    /// old bring the history just under the threshold:
    ///
    /// The strategies run in order, each only if the previous ones did not get under the
    /// threshold: (a) cut long tool outputs to their head and tail
    /// ([`tool_output_cap`](ContextConfig::tool_output_cap)); (b) replace the outputs of tool
    /// calls older than the [`keep_recent_turns`](ContextConfig::keep_recent_turns) most recent
    /// turns, then of all but the most recent tool calls, with a short placeholder; (c) with a
    /// `summarizer`, replace the turns older than the recent ones with a summary; (d) drop the
    /// oldest whole turns. The system prompt and the current turn are always kept, and the
    /// history stays valid throughout: a tool call and its result are never separated, thinking
    /// blocks go with their whole turn, and the first message stays a user message.
    ///
    /// Returns `None` when under the threshold. Returns [`Error::Context`] when even (d) cannot
    /// bring the conversation within the input budget (the current turn alone is too large);
    /// the history is then left compacted as far as it goes, and valid. An error from the
    /// summarizer is returned as it is (strategies (a) and (b) may have been applied); call
    /// again without a summarizer to fall back to dropping turns.
    pub async fn compact(
        &mut self,
        summarizer: Option<&dyn Summarizer>,
    ) -> Result<Option<CompactionReport>, Error> {
        if self.token_count() <= self.config.threshold_tokens() {
            return Ok(None);
        }
        let target = self.config.target_tokens();
        let limit = self.config.input_budget();
        compact::run(self, target, limit, summarizer)
            .await
            .map(Some)
    }

    /// Starts a compaction without doing any I/O: the sans-IO form of [`compact`](Self::compact)
    /// (`reactive: false`) and [`compact_harder`](Self::compact_harder) (`reactive: true`).
    ///
    /// Returns `Ok(None)` when a non-reactive compaction is not needed. Otherwise the cheap
    /// strategies run at once; then, when `summarize` is set and old turns could be
    /// summarized, it returns [`CompactionStep::Summarize`] with the span to summarize, and
    /// the caller hands the summary to [`finish_compaction`](Self::finish_compaction);
    /// else the compaction completes ([`CompactionStep::Done`]).
    ///
    /// ```
    /// use agent_loop::context::CompactionStep;
    /// use agent_loop::{ContextManager, Message};
    /// use agent_loop::context::{CharEstimateCounter, ContextConfig};
    ///
    /// let config = ContextConfig::default().context_window(2_000).output_reserve(500).keep_recent_turns(1);
    /// let mut cm = ContextManager::new(config).with_counter(CharEstimateCounter);
    /// for i in 0..20 {
    ///     cm.push_user_text(format!("question {i}: {}", "words ".repeat(40)));
    ///     cm.push(Message::assistant(format!("answer {i}: {}", "more ".repeat(40))));
    /// }
    /// cm.push_user_text("the latest question");
    /// match cm.begin_compaction(false, true)? {
    ///     Some(CompactionStep::Summarize(span)) => {
    ///         // Ask a model (or anything else) for a summary of `span`, then:
    ///         let summary = format!("{} earlier messages about questions", span.len());
    ///         let report = cm.finish_compaction(Some(summary))?;
    ///         assert!(report.tokens_after < report.tokens_before);
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// assert!(cm.token_count() <= cm.config().threshold_tokens());
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn begin_compaction(
        &mut self,
        reactive: bool,
        summarize: bool,
    ) -> Result<Option<CompactionStep>, Error> {
        self.pending = None;
        let (target, limit) = if reactive {
            self.reactive_targets()
        } else {
            if self.token_count() <= self.config.threshold_tokens() {
                return Ok(None);
            }
            (self.config.target_tokens(), self.config.input_budget())
        };
        compact::begin(self, target, limit, summarize).map(Some)
    }

    /// Completes the compaction [`begin_compaction`](Self::begin_compaction) left waiting for
    /// a summary: `Some(summary)` replaces the old turns with it; `None` (the summary could
    /// not be had) goes on without one, dropping old turns instead. Errs when no compaction
    /// is waiting, when the conversation changed meanwhile, or when it cannot get within the
    /// budget ([`Error::Context`]; the history stays valid).
    pub fn finish_compaction(
        &mut self,
        summary: Option<String>,
    ) -> Result<CompactionReport, Error> {
        compact::finish(self, summary)
    }

    /// What a reactive compaction aims for, and the most it may end with: the reactive
    /// target (of the budget or of the count now, whichever is lower); with a low-water mark,
    /// down to the mark too, so the next compaction is as far off as usual.
    fn reactive_targets(&self) -> (usize, usize) {
        let now = self.token_count();
        let target = self
            .config
            .reactive_tokens()
            .min(config::fraction_of(now, self.config.reactive_target));
        if self.config.compaction_target.is_some() {
            (target.min(self.config.target_tokens()), target)
        } else {
            (target, target)
        }
    }

    /// Reactive compaction, after the provider rejected a request as too long for its context
    /// window: our count was too low, so this compacts to
    /// [`reactive_target`](ContextConfig::reactive_target) of the input budget or of the
    /// current count, whichever is lower, with the same strategies as
    /// [`compact`](Self::compact). Errs with [`Error::Context`] when it cannot get there.
    pub async fn compact_harder(
        &mut self,
        summarizer: Option<&dyn Summarizer>,
    ) -> Result<CompactionReport, Error> {
        let (target, limit) = self.reactive_targets();
        compact::run(self, target, limit, summarizer).await
    }

    // ----- mutation primitives; every change to `messages` goes through these -----

    /// Counts everything again (after the counter changed).
    fn recount_all(&mut self) {
        self.system_tokens = tokens::system_tokens(&*self.counter, self.system.as_deref());
        self.counts = self
            .messages
            .iter()
            .map(|m| tokens::message_tokens(&*self.counter, self.config.image_tokens, m))
            .collect();
        self.total = self.counts.iter().sum();
        self.tools_tokens = 0;
        self.anchor = None;
    }

    /// Applies `f` to message `i`; when it reports a change, the message is counted again.
    fn modify(&mut self, i: usize, f: impl FnOnce(&mut Message) -> bool) {
        if i >= self.messages.len() {
            return;
        }
        let Some(message) = Arc::make_mut(&mut self.messages).get_mut(i) else {
            return;
        };
        if !f(message) {
            return;
        }
        self.encoded.changed_from(i);
        self.unsaved.from = self.unsaved.from.min(i);
        let new = tokens::message_tokens(&*self.counter, self.config.image_tokens, message);
        let old = std::mem::replace(&mut self.counts[i], new);
        self.total = self.total - old + new;
        if self.anchor.is_some_and(|a| i < a.len) {
            self.adjust_anchor_prefix(old, new);
        }
    }

    /// Replaces the messages in `range` with `replacement`, keeping counts and anchor in step.
    fn splice(&mut self, range: Range<usize>, replacement: Vec<Message>) {
        let new_counts: Vec<usize> = replacement
            .iter()
            .map(|m| tokens::message_tokens(&*self.counter, self.config.image_tokens, m))
            .collect();
        let added: usize = new_counts.iter().sum();
        let removed: usize = self.counts[range.clone()].iter().sum();
        if let Some(a) = &mut self.anchor {
            if range.start < a.len {
                if range.end <= a.len {
                    a.len = a.len - range.len() + replacement.len();
                    a.est_now = a.est_now - removed + added;
                } else {
                    let dropped: usize = self.counts[range.start..a.len].iter().sum();
                    a.len = range.start;
                    a.est_now -= dropped;
                }
                if a.est_now == 0 {
                    self.anchor = None;
                }
            }
        }
        self.total = self.total - removed + added;
        self.unsaved.from = self.unsaved.from.min(range.start);
        self.encoded.changed_from(range.start);
        self.counts.splice(range.clone(), new_counts);
        Arc::make_mut(&mut self.messages).splice(range, replacement);
    }

    /// What [`token_count`](Self::token_count) would be after removing the first `p` messages,
    /// whose estimates sum to `removed` (mirrors [`splice`](Self::splice)).
    fn count_without_prefix(&self, p: usize, removed: usize) -> usize {
        self.count_without_range(0, p, removed)
    }

    /// What [`token_count`](Self::token_count) would be after removing the messages
    /// `start..end`, whose estimates sum to `removed` (mirrors [`splice`](Self::splice)).
    fn count_without_range(&self, start: usize, end: usize, removed: usize) -> usize {
        let estimate = self.estimated_tokens() - removed;
        let Some(a) = self.anchor else {
            return estimate;
        };
        let est_now = if start >= a.len {
            a.est_now
        } else if end <= a.len {
            a.est_now - removed
        } else {
            a.est_now - self.counts[start..a.len].iter().sum::<usize>()
        };
        if est_now == 0 {
            return estimate;
        }
        let anchored = Anchor { est_now, ..a };
        anchored
            .tokens()
            .saturating_add(estimate.saturating_sub(est_now))
    }

    /// The estimate of the anchored prefix changed from `old` to `new` tokens in one place.
    fn adjust_anchor_prefix(&mut self, old: usize, new: usize) {
        if let Some(a) = &mut self.anchor {
            a.est_now = a.est_now - old + new;
            if a.est_now == 0 {
                self.anchor = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager() -> ContextManager {
        ContextManager::new(ContextConfig::default()).with_counter(CharEstimateCounter)
    }

    #[test]
    fn the_default_counter_estimates_until_a_quarter_of_the_threshold_then_counts_exactly() {
        // A 10,000-token window: the threshold is 85% of (10,000 - 1,000), 7,650; exact
        // counting starts at 1,912 estimated tokens.
        let config = ContextConfig::default()
            .context_window(10_000)
            .output_reserve(1_000);
        let mut cm = ContextManager::new(config.clone());
        let tool = ToolSpec {
            name: "look".into(),
            description: "Looks.".into(),
            input_schema: serde_json::json!({"type": "object"}),
        };
        cm.set_tools(std::slice::from_ref(&tool));
        cm.push_user_text("hello there");
        assert!(!cm.counts_exactly());
        // Estimated as bytes/3 (and the message overhead).
        assert_eq!(cm.counts[0], tokens::MESSAGE_OVERHEAD + 11usize.div_ceil(3));
        cm.push(Message::assistant("hi"));
        let usage = Usage {
            input_tokens: 40,
            ..Usage::default()
        };
        cm.record_usage(&usage, 1);
        let anchored = cm.token_count();
        // Past a quarter of the threshold: every count is the tokenizer's now.
        cm.push_user_text("word ".repeat(1_200));
        assert!(cm.counts_exactly());
        let mut exact = ContextManager::new(config).with_counter(TiktokenCounter::new());
        exact.set_tools(std::slice::from_ref(&tool));
        exact.push_user_text("hello there");
        exact.push(Message::assistant("hi"));
        exact.push_user_text("word ".repeat(1_200));
        assert_eq!(cm.counts, exact.counts);
        assert_eq!(cm.tools_tokens, exact.tools_tokens);
        assert_eq!(cm.estimated_tokens(), exact.estimated_tokens());
        // The provider's figure for the first message still stands under the new counts.
        let a = cm.anchor.expect("the anchor is kept");
        assert_eq!((a.len, a.real, a.tokens()), (1, 40, 40));
        let prefix = cm.system_tokens + cm.tools_tokens + cm.counts[0];
        assert_eq!(a.est_now, prefix);
        assert_eq!(cm.token_count(), 40 + cm.estimated_tokens() - prefix);
        assert!(cm.token_count() > anchored);
    }

    #[test]
    fn a_counter_given_or_asked_for_counts_from_the_start() {
        let mut cm = ContextManager::default();
        cm.push_user_text("hello there");
        cm.count_exactly();
        assert!(cm.counts_exactly());
        assert_eq!(
            cm.counts[0],
            tokens::message_tokens(
                &TiktokenCounter::new(),
                cm.config.image_tokens,
                &cm.messages[0]
            )
        );
        let cm = ContextManager::default().with_counter(CharEstimateCounter);
        assert!(cm.counts_exactly());
        // The switch never happens below a quarter of the threshold.
        let mut lazy = ContextManager::new(ContextConfig::default());
        lazy.push_user_text("x".repeat(3 * (lazy.exact_from() - 10)));
        assert!(!lazy.counts_exactly(), "{}", lazy.estimated_tokens());
        lazy.push_user_text("x".repeat(60));
        assert!(lazy.counts_exactly(), "{}", lazy.estimated_tokens());
    }

    #[test]
    fn a_request_keeps_the_messages_it_was_given() {
        let mut cm = manager();
        cm.push_user_text("one");
        let shared = cm.shared_messages();
        // Shared, not copied …
        assert!(Arc::ptr_eq(&shared, &cm.shared_messages()));
        // … and a later change to the history leaves the request's messages as they were:
        // an append, a merge into the last message, a splice.
        cm.push(Message::assistant("two"));
        cm.push(Message::assistant("three"));
        let len = cm.len();
        cm.splice(0..1, vec![Message::user("ONE")]);
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].text(), "one");
        assert_eq!(cm.len(), len);
        assert_eq!(cm.messages()[0].text(), "ONE");
        assert_eq!(cm.messages()[1].text(), "twothree");
        assert_consistent(&cm);
        // Once no request holds them, changes happen in place.
        drop(shared);
        let before = Arc::as_ptr(&cm.messages);
        cm.push_user_text("four");
        assert_eq!(Arc::as_ptr(&cm.messages), before);
    }

    fn assert_consistent(cm: &ContextManager) {
        assert_eq!(cm.counts.len(), cm.messages.len());
        for (m, c) in cm.messages.iter().zip(&cm.counts) {
            assert_eq!(
                *c,
                tokens::message_tokens(
                    &CharEstimateCounter,
                    crate::media::ImageTokenRule::Larger,
                    m
                )
            );
        }
        assert_eq!(cm.total, cm.counts.iter().sum::<usize>());
        if let Some(a) = cm.anchor {
            let est = cm.system_tokens + cm.tools_tokens + cm.counts[..a.len].iter().sum::<usize>();
            assert_eq!(a.est_now, est);
        }
    }

    #[test]
    fn anchor_follows_prefix_edits() {
        let mut cm = manager().with_system("sys");
        cm.push_user_text("hello there");
        cm.push(Message::assistant("general kenobi"));
        cm.record_usage(
            &Usage {
                input_tokens: 100,
                ..Usage::default()
            },
            1,
        );
        assert_consistent(&cm);
        assert_eq!(cm.token_count(), 100 + cm.counts[1]);
        cm.set_system(Some("a much longer system prompt".into()));
        assert_consistent(&cm);
        cm.truncate(1);
        assert_consistent(&cm);
        cm.push_user_text("merged");
        assert_consistent(&cm);
        cm.truncate(0);
        assert_consistent(&cm);
    }
}
