//! The history's messages as a wire format encodes them, kept once they are final, so that a
//! request body is assembled from cached bytes plus the new messages instead of encoding the
//! whole history again every turn.
//!
//! The cache belongs to the conversation: a [`ContextManager`](crate::ContextManager) owns an
//! [`EncodedHistory`] and tells it what changed ([`EncodedHistory::changed_from`]) whenever a
//! message other than a new last one is changed, removed or replaced (a merge, a compaction, a
//! restore). Appending keeps every entry. Each request built from the conversation carries an
//! [`EncodedRef`]: the cache, the generation it was built at and the message vector it was built
//! from. A client uses the cached bytes of message `i` only when all three still hold, so a
//! request whose messages were replaced or edited since ([`ModelRequest::messages_mut`]), or
//! one built before a change, is encoded in full and leaves the cache alone.
//!
//! ```text
//!   messages:  m0  m1  m2  m3  m4        (the conversation, shared with the request)
//!   entries:   b0  b1  b2                (bytes of m0..m2 in the cached format)
//!   request:   b0 , b1 , b2 , enc(m3) , enc(m4)   → entries b0..b4
//!   changed_from(1): entries b0          (m1 and later are encoded again)
//! ```
//!
//! [`ModelRequest::messages_mut`]: crate::provider::ModelRequest::messages_mut

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::message::Message;

/// The most bytes kept: past this, new messages are encoded each time rather than cached (a
/// bound on memory for a conversation whose context window is larger than any real one).
const MAX_CACHED_BYTES: usize = 64 << 20;

/// Which encoding the entries are in: a wire format and the client options that change how a
/// message is written. Entries in another key are dropped on first use.
pub(crate) type FormatKey = u32;

#[derive(Debug)]
struct Entries {
    /// The most bytes kept ([`MAX_CACHED_BYTES`]; smaller in tests).
    limit: usize,
    /// Bumped by every [`EncodedHistory::changed_from`]: a request built before it may not
    /// write.
    generation: u64,
    key: FormatKey,
    /// Invariant: `ends` is non-decreasing and its last value is `bytes.len()`; the bytes of
    /// message `i` are `bytes[ends[i-1]..ends[i]]` (from 0 for `i == 0`), and they are what the
    /// format `key` writes for message `i` of the conversation as it is now.
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Default for Entries {
    fn default() -> Self {
        Entries {
            limit: MAX_CACHED_BYTES,
            generation: 0,
            key: 0,
            bytes: Vec::new(),
            ends: Vec::new(),
        }
    }
}

impl Entries {
    fn truncate(&mut self, len: usize) {
        if len < self.ends.len() {
            self.ends.truncate(len);
            self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
        }
    }
}

/// The cache a conversation owns. Cloning a conversation starts an empty cache for the copy:
/// two copies that go on differently must not share entries.
pub(crate) struct EncodedHistory {
    entries: Arc<Mutex<Entries>>,
}

impl Default for EncodedHistory {
    fn default() -> Self {
        EncodedHistory {
            entries: Arc::new(Mutex::new(Entries::default())),
        }
    }
}

impl Clone for EncodedHistory {
    fn clone(&self) -> Self {
        EncodedHistory::default()
    }
}

impl fmt::Debug for EncodedHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = lock(&self.entries).ends.len();
        f.debug_struct("EncodedHistory")
            .field("cached", &cached)
            .finish()
    }
}

impl EncodedHistory {
    /// Message `index` and every later one changed (or went): their entries go, and requests
    /// built before now no longer write.
    pub(crate) fn changed_from(&self, index: usize) {
        let mut entries = lock(&self.entries);
        entries.generation += 1;
        entries.truncate(index);
    }

    /// The reference a request built from `messages` (the conversation's own vector) carries.
    pub(crate) fn for_request(&self, messages: &Arc<Vec<Message>>) -> EncodedRef {
        let generation = lock(&self.entries).generation;
        EncodedRef(Some(Inner {
            entries: Arc::clone(&self.entries),
            generation,
            messages: Arc::clone(messages),
        }))
    }
}

#[derive(Clone)]
struct Inner {
    entries: Arc<Mutex<Entries>>,
    generation: u64,
    /// The vector the request was built with, held so that it stays shared: a change to the
    /// request's messages (`Arc::make_mut`) then copies them, and the copy is not this one.
    messages: Arc<Vec<Message>>,
}

/// A request's link to its conversation's cache of encoded messages (none for a request built
/// by hand). Requests compare equal whatever their links.
#[derive(Clone, Default)]
pub(crate) struct EncodedRef(Option<Inner>);

impl PartialEq for EncodedRef {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for EncodedRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "EncodedRef(linked)"
        } else {
            "EncodedRef(none)"
        })
    }
}

impl EncodedRef {
    /// How many messages the linked cache holds (tests).
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |inner| lock(&inner.entries).ends.len())
    }

    /// Writes the first `end` messages of `messages` into `out` as the format `key` encodes
    /// them, each by `encode` (which appends one message's bytes, or nothing, to the buffer it
    /// is given), with a `,` between two non-empty ones, and before the first when
    /// `after_item` (the list already has an item, a system message say). Cached bytes are
    /// copied for the messages the cache holds; the rest are encoded and, when this request
    /// may write, cached. Returns whether the list has an item now.
    pub(crate) fn write_messages<E>(
        &self,
        messages: &Arc<Vec<Message>>,
        end: usize,
        key: FormatKey,
        after_item: bool,
        out: &mut Vec<u8>,
        mut encode: impl FnMut(&Message, &mut Vec<u8>) -> Result<(), E>,
    ) -> Result<bool, E> {
        let vector = messages;
        let messages = messages.get(..end).unwrap_or(&messages[..]);
        let whole = &self.0;
        let mut first = !after_item;
        let mut push = |out: &mut Vec<u8>, piece: &[u8]| {
            if piece.is_empty() {
                return;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(piece);
        };
        let mut scratch = Vec::new();
        let linked = whole
            .as_ref()
            .filter(|inner| Arc::ptr_eq(&inner.messages, vector));
        let Some(inner) = linked else {
            for message in messages.iter() {
                scratch.clear();
                encode(message, &mut scratch)?;
                push(out, &scratch);
            }
            return Ok(!first);
        };
        let mut entries = lock(&inner.entries);
        let mut writable = entries.generation == inner.generation;
        if writable && entries.key != key {
            entries.key = key;
            entries.truncate(0);
        }
        let cached = if writable {
            entries.ends.len().min(messages.len())
        } else {
            0
        };
        let mut start = 0;
        for &end in &entries.ends[..cached] {
            push(out, &entries.bytes[start..end]);
            start = end;
        }
        for message in &messages[cached..] {
            scratch.clear();
            encode(message, &mut scratch)?;
            push(out, &scratch);
            // Only a prefix is cached: once one message does not fit, none after it is kept.
            writable = writable && entries.bytes.len() + scratch.len() <= entries.limit;
            if writable {
                entries.bytes.extend_from_slice(&scratch);
                let end = entries.bytes.len();
                entries.ends.push(end);
            }
        }
        Ok(!first)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(m: &Message, out: &mut Vec<u8>) -> Result<(), ()> {
        serde_json::to_writer(out, &m.text()).map_err(|_| ())
    }

    fn written(r: &EncodedRef, messages: &Arc<Vec<Message>>, key: FormatKey) -> String {
        let mut out = Vec::new();
        r.write_messages(messages, messages.len(), key, false, &mut out, encode)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn cached(h: &EncodedHistory) -> usize {
        lock(&h.entries).ends.len()
    }

    #[test]
    fn appends_reuse_and_changes_invalidate_from_where_they_start() {
        let history = EncodedHistory::default();
        let mut messages = Arc::new(vec![Message::user("a"), Message::assistant("b")]);
        let r = history.for_request(&messages);
        assert_eq!(written(&r, &messages, 1), r#""a","b""#);
        assert_eq!(cached(&history), 2);
        drop(r);
        Arc::make_mut(&mut messages).push(Message::user("c"));
        let r = history.for_request(&messages);
        assert_eq!(written(&r, &messages, 1), r#""a","b","c""#);
        assert_eq!(cached(&history), 3);
        drop(r);
        // An edit of message 1: its entry and later ones go.
        Arc::make_mut(&mut messages)[1] = Message::assistant("B");
        history.changed_from(1);
        assert_eq!(cached(&history), 1);
        let r = history.for_request(&messages);
        assert_eq!(written(&r, &messages, 1), r#""a","B","c""#);
        // Another format drops the entries of the first.
        assert_eq!(written(&r, &messages, 2), r#""a","B","c""#);
        assert_eq!(cached(&history), 3);
    }

    #[test]
    fn a_stale_or_unlinked_request_is_encoded_whole_and_writes_nothing() {
        let history = EncodedHistory::default();
        let messages = Arc::new(vec![Message::user("a")]);
        let stale = history.for_request(&messages);
        history.changed_from(0);
        assert_eq!(written(&stale, &messages, 1), r#""a""#);
        assert_eq!(cached(&history), 0);
        // A request whose messages were replaced: its own vector is not the one linked.
        let other = Arc::new(vec![Message::user("x")]);
        let r = history.for_request(&messages);
        assert_eq!(written(&r, &other, 1), r#""x""#);
        assert_eq!(cached(&history), 0);
        assert_eq!(written(&EncodedRef::default(), &messages, 1), r#""a""#);
        assert_eq!(written(&r, &messages, 1), r#""a""#);
        assert_eq!(cached(&history), 1);
    }

    #[test]
    fn a_stale_request_of_another_format_leaves_the_entries_alone() {
        let history = EncodedHistory::default();
        let messages = Arc::new(vec![Message::user("a"), Message::assistant("b")]);
        let stale = history.for_request(&messages);
        history.changed_from(2);
        let fresh = history.for_request(&messages);
        written(&fresh, &messages, 1);
        assert_eq!(cached(&history), 2);
        written(&stale, &messages, 2);
        assert_eq!(cached(&history), 2);
    }

    #[test]
    fn past_the_byte_bound_only_a_prefix_is_kept() {
        // Each message is 5 bytes ("abc" with its quotes); the bound here is 16.
        let history = EncodedHistory::default();
        lock(&history.entries).limit = 16;
        let messages = Arc::new(vec![
            Message::user("abc"),
            Message::assistant("abc"),
            Message::user("abc"),
            Message::assistant("x"),
        ]);
        let r = history.for_request(&messages);
        assert_eq!(written(&r, &messages, 1), r#""abc","abc","abc","x""#);
        // 15 bytes fit; the fourth (3 bytes) would pass 16, and nothing after a miss is kept.
        assert_eq!(cached(&history), 3);
        assert_eq!(written(&r, &messages, 1), r#""abc","abc","abc","x""#);
    }

    #[test]
    fn requests_compare_equal_whatever_their_links() {
        let history = EncodedHistory::default();
        let messages = Arc::new(vec![Message::user("a")]);
        let linked = history.for_request(&messages);
        assert_eq!(linked, history.for_request(&messages));
        assert_eq!(linked, EncodedRef::default());
        assert_eq!(format!("{linked:?}"), "EncodedRef(linked)");
        assert_eq!(format!("{:?}", EncodedRef::default()), "EncodedRef(none)");
    }

    #[test]
    fn a_cloned_history_starts_empty() {
        let history = EncodedHistory::default();
        let messages = Arc::new(vec![Message::user("a")]);
        written(&history.for_request(&messages), &messages, 1);
        assert_eq!(cached(&history.clone()), 0);
        assert_eq!(cached(&history), 1);
    }

    #[test]
    fn empty_pieces_take_no_separator() {
        let history = EncodedHistory::default();
        let messages = Arc::new(vec![
            Message::user("a"),
            Message::assistant(""),
            Message::user("c"),
        ]);
        let r = history.for_request(&messages);
        let mut out = Vec::new();
        let skip_empty = |m: &Message, out: &mut Vec<u8>| -> Result<(), ()> {
            if !m.text().is_empty() {
                serde_json::to_writer(out, &m.text()).map_err(|_| ())?;
            }
            Ok(())
        };
        r.write_messages(&messages, 3, 1, false, &mut out, skip_empty)
            .unwrap();
        assert_eq!(out, br#""a","c""#);
        out.clear();
        r.write_messages(&messages, 3, 1, false, &mut out, skip_empty)
            .unwrap();
        assert_eq!(out, br#""a","c""#);
    }
}

/// The property: whatever a conversation goes through (appends, merges, truncations,
/// restores), a body built with its cache is the body built without one, for a request
/// built now and for one built before the change; and Anthropic's split (cached messages up
/// to the first breakpoint, the rest encoded) is the plain encoding of every message.
#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use crate::context::{ContextManager, Conversation};
    use crate::message::{ContentBlock, Message, Role};
    use crate::provider::cache::PromptCache;
    use crate::provider::openai::MaxTokensField;
    use crate::provider::responses::ResponsesOptions;
    use crate::provider::{anthropic, openai, responses, ModelRequest};

    use super::EncodedRef;

    #[derive(Debug, Clone)]
    enum Op {
        Push(bool, Vec<ContentBlock>),
        Truncate(usize),
        Restore,
    }

    fn block() -> impl Strategy<Value = ContentBlock> {
        prop_oneof![
            4 => "[a-c]{0,3}".prop_map(ContentBlock::text),
            2 => (0u8..4).prop_map(|i| ContentBlock::ToolUse {
                id: format!("call_{i}"),
                name: "step".into(),
                input: json!({"n": i}),
            }),
            2 => (0u8..4, any::<bool>()).prop_map(|(i, e)| ContentBlock::tool_result(
                format!("call_{i}"),
                "ok",
                e
            )),
            1 => Just(ContentBlock::Reasoning {
                id: "rs_1".into(),
                summary: vec![],
                encrypted_content: None,
            }),
            1 => Just(ContentBlock::Compaction {
                id: Some("cmp_1".into()),
                encrypted_content: "e".into(),
            }),
            1 => any::<bool>().prop_map(|c| ContentBlock::Other(if c {
                json!({"type": "x", "cache_control": {"type": "ephemeral"}})
            } else {
                json!({"type": "x"})
            })),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (any::<bool>(), prop::collection::vec(block(), 0..3))
                .prop_map(|(a, b)| Op::Push(a, b)),
            1 => (0usize..8).prop_map(Op::Truncate),
            1 => Just(Op::Restore),
        ]
    }

    fn request(context: &ContextManager, cache: Option<PromptCache>) -> ModelRequest {
        let (messages, encoded) = context.request_messages();
        ModelRequest {
            messages,
            encoded,
            prompt_cache: cache,
            system: Some("sys".into()),
            ..ModelRequest::default()
        }
    }

    fn bodies(request: &ModelRequest) -> [Result<Vec<u8>, String>; 4] {
        [
            anthropic::request::encode(request, "m").map_err(|e| e.to_string()),
            responses::request::encode(request, "m", &ResponsesOptions::default())
                .map_err(|e| e.to_string()),
            openai::request::encode(request, "m", MaxTokensField::MaxTokens, false)
                .map_err(|e| e.to_string()),
            openai::request::encode(request, "m", MaxTokensField::MaxTokens, true)
                .map_err(|e| e.to_string()),
        ]
    }

    fn unlinked(request: &ModelRequest) -> ModelRequest {
        ModelRequest {
            encoded: EncodedRef::default(),
            ..request.clone()
        }
    }

    fn user(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    fn assistant(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content,
        }
    }

    /// Anthropic's cached part: up to the first message that takes a breakpoint, and nothing
    /// when the history is not one wire message per message.
    #[test]
    fn anthropic_caches_up_to_the_first_breakpoint_of_a_plain_history() {
        let cases: [(Vec<Message>, usize); 4] = [
            // u0 a1 u2 a3 u4: the two latest user messages (u4, u2) take breakpoints.
            (
                vec![
                    Message::user("0"),
                    Message::assistant("1"),
                    Message::user("2"),
                    Message::assistant("3"),
                    Message::user("4"),
                ],
                2,
            ),
            // An unmodelled block with a breakpoint of its own: encoded whole.
            (
                vec![
                    Message::user("0"),
                    assistant(vec![ContentBlock::Other(
                        json!({"type": "x", "cache_control": {"type": "ephemeral"}}),
                    )]),
                    Message::user("2"),
                ],
                0,
            ),
            // A message that sends nothing (empty text): its neighbours merge, encoded whole.
            (
                vec![
                    Message::user("0"),
                    assistant(vec![ContentBlock::text("")]),
                    Message::user("2"),
                ],
                0,
            ),
            // An unmodelled block without a breakpoint is sent as it is, and cached.
            (
                vec![
                    Message::user("0"),
                    assistant(vec![ContentBlock::Other(json!({"type": "x"}))]),
                    Message::user("2"),
                    Message::assistant("3"),
                    user(vec![ContentBlock::text("4")]),
                ],
                2,
            ),
        ];
        for (messages, cached) in cases {
            let mut context = ContextManager::default();
            let _ = context.restore(Conversation {
                system: None,
                messages: messages.clone(),
            });
            let request = request(&context, Some(PromptCache::default()));
            anthropic::request::encode(&request, "m").unwrap();
            assert_eq!(request.encoded.cached(), cached, "{messages:?}");
        }
    }

    proptest! {
        #[test]
        fn a_cached_body_is_the_body_encoded_whole(
            ops in prop::collection::vec(op(), 1..24),
            breakpoints in prop::option::of(0u32..4),
        ) {
            let cache = breakpoints.map(|n| PromptCache { message_breakpoints: n, ..PromptCache::default() });
            let mut context = ContextManager::default();
            let mut earlier: Option<ModelRequest> = None;
            for op in ops {
                match op {
                    Op::Push(assistant, content) => context.push(Message {
                        role: if assistant { Role::Assistant } else { Role::User },
                        content,
                    }),
                    Op::Truncate(n) => context.truncate(n),
                    Op::Restore => {
                        let snapshot: Conversation = context.snapshot();
                        let _ = context.restore(snapshot);
                    }
                }
                let now = request(&context, cache);
                // Twice: the second body comes from what the first cached.
                for _ in 0..2 {
                    prop_assert_eq!(bodies(&now), bodies(&unlinked(&now)));
                }
                if let Some(before) = &earlier {
                    prop_assert_eq!(bodies(before), bodies(&unlinked(before)));
                }
                if let Ok(body) = anthropic::request::encode(&now, "m") {
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    prop_assert_eq!(
                        &v["messages"],
                        &anthropic::request::plain_messages(&now, 1)
                    );
                }
                earlier = Some(now);
            }
        }
    }
}
