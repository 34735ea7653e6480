//! Sessions: conversations and paused runs kept in a store, so a run can pause in one process
//! and resume in another, and many processes can share conversations.
//!
//! A session is an append-only log of [`SessionEntry`]s, each with a version: its place in
//! the log (1 for the first). An agent given a store and a session id
//! ([`AgentBuilder::session`](crate::AgentBuilder::session)) appends to it on its own, one
//! append per step: when a run starts, its [lease](SessionEntry::Lease); when a turn ends,
//! that whole turn (the run's input with the first) and the lease renewed; when the run
//! ends or pauses, what is left, the pause, and the lease released. No other writer ever
//! sees half a turn, and no other agent starts a run on a session while a lease holds it
//! ([`SessionError::Busy`]). Nothing is rewritten, so a turn costs what it adds; a
//! compaction records the messages it replaced as a new entry. Every append names the
//! version it builds on and is refused with [`SessionError::Conflict`] when another writer
//! got there first (compare-and-swap), so two writers never both win and nothing is lost
//! or stored twice.
//!
//! Backends: [`MemoryStore`] here (in-process, for tests and one process that needs no
//! restart); the SQL stores in the satellite crate `agent-loop-sql`: `SqliteStore` (the
//! embedded default: a file path is all it needs) and `PostgresStore` (for processes on
//! several machines). A store of your own implements [`SessionStore`], and reads and writes
//! entries with [`SessionEntry::encode`] and [`SessionEntry::decode`].
//!
//! ```
//! use std::sync::Arc;
//! use agent_loop::session::{MemoryStore, SessionStore};
//! use agent_loop::testing::{ScriptedClient, ScriptedResponse};
//! use agent_loop::{Agent, AgentEvent};
//! use futures::StreamExt;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
//! let mut agent = Agent::builder(client).session(store.clone(), "chat-1").build()?;
//! let _: Vec<AgentEvent> = agent.run("Hi").collect().await;
//!
//! // Saved on its own: another agent (in another process, with a database store) picks
//! // the conversation up where it stands.
//! let session = agent_loop::session::load(&*store, "chat-1").await?.expect("saved");
//! assert_eq!(session.conversation.messages.len(), 2);
//! # Ok::<(), agent_loop::Error>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::context::Conversation;
use crate::message::Message;

/// What a store's methods fail with (defined in [`error`](crate::error), re-exported beside them).
pub use crate::error::SessionError;

/// The newest format of the entries this build writes and reads. Entries of the four first
/// kinds are written in format 1; a [lease](SessionEntry::Lease) and its
/// [release](SessionEntry::Released) in format 2, so that a build older than leases refuses
/// them clearly instead of ignoring a run in flight; a [rewind](SessionEntry::Rewound) in
/// format 3, so that a build older than rewinds refuses it instead of reading the messages
/// it took back.
pub const ENTRY_FORMAT: u32 = 3;

/// One record of a session's log.
///
/// Serialized (in a store's rows) as JSON tagged by `type`:
/// `{"type":"messages","start":4,"messages":[…]}`.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionEntry {
    /// The whole conversation: the first entry of every session, and whenever its system
    /// prompt changed or it was replaced (a restore, a clear). Loading starts at the newest
    /// one.
    Conversation {
        /// The conversation.
        conversation: Conversation,
    },
    /// The messages from index `start` on are replaced by `messages`. `start` is usually the
    /// number of messages stored so far (an append), one less when the last stored message
    /// grew (a later message of the same role merged into it), or where a compaction began
    /// rewriting older turns.
    Messages {
        /// The index the messages replace from.
        start: u64,
        /// The messages.
        messages: Vec<Message>,
    },
    /// A run paused here, waiting for approvals or results from outside. `state` is the
    /// paused run's own state (turn counters, the calls waiting, …), read back by the agent
    /// that resumes it; the conversation is the session's.
    Paused {
        /// The pause's id: unique within the session (see [`PausedRun::id`](crate::PausedRun::id)).
        pause: String,
        /// The run's state, as the agent wrote it.
        state: serde_json::Value,
    },
    /// The pause `pause` was taken up by a resume: it is not resumed again.
    Resumed {
        /// The pause's id.
        pause: String,
    },
    /// A run of the agent `holder` holds the session until `until_ms` (milliseconds since
    /// the Unix epoch): no other agent starts a run on it before then. Taken when a run
    /// starts, renewed with every turn it saves, ended by [`Released`](Self::Released).
    Lease {
        /// The holding agent's id (unique per agent, per process).
        holder: String,
        /// When the lease runs out, if not renewed or released first.
        until_ms: u64,
    },
    /// The lease of `holder` ended: its run finished (or a host broke it with
    /// [`release_lease`]).
    Released {
        /// The agent that held the lease.
        holder: String,
    },
    /// The session was rewound ([`SessionStore::rewind`]): its conversation goes back to its
    /// first `to` messages, and the pause it waited in, if any, waits no more. The entries
    /// before it stay in the log as they were: the history before the rewind stays readable.
    Rewound {
        /// The number of messages kept.
        to: u64,
    },
}

/// A run's hold on a session ([`SessionEntry::Lease`]), as loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holding agent's id.
    pub holder: String,
    /// When the lease runs out (milliseconds since the Unix epoch).
    pub until_ms: u64,
}

impl Lease {
    /// Whether the lease still holds at `now_ms` (milliseconds since the Unix epoch).
    pub fn holds_at(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms
    }
}

/// The wall clock in milliseconds since the Unix epoch, as leases count time.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An entry as a store keeps it ([`SessionEntry::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedEntry {
    /// The entry's type (`conversation`, `messages`, `paused`, `resumed`): a store indexes
    /// `conversation` entries, where loading starts.
    pub kind: &'static str,
    /// The format it is written in ([`ENTRY_FORMAT`]).
    pub format: u32,
    /// The entry as JSON.
    pub body: String,
}

impl SessionEntry {
    /// The entry's type, as [`EncodedEntry::kind`] names it.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionEntry::Conversation { .. } => "conversation",
            SessionEntry::Messages { .. } => "messages",
            SessionEntry::Paused { .. } => "paused",
            SessionEntry::Resumed { .. } => "resumed",
            SessionEntry::Lease { .. } => "lease",
            SessionEntry::Released { .. } => "released",
            SessionEntry::Rewound { .. } => "rewound",
        }
    }

    /// The format this entry is written in: 1, 2 for the lease entries, 3 for a rewind.
    fn format(&self) -> u32 {
        match self {
            SessionEntry::Lease { .. } | SessionEntry::Released { .. } => 2,
            SessionEntry::Rewound { .. } => 3,
            _ => 1,
        }
    }

    /// The entry as a store keeps it.
    pub fn encode(&self) -> EncodedEntry {
        EncodedEntry {
            kind: self.kind(),
            format: self.format(),
            // Every field is a string, a number or JSON: serializing cannot fail.
            body: serde_json::to_string(self).unwrap_or_default(),
        }
    }

    /// Reads back an entry a store kept: entry `version` of `session`, written in `format`.
    /// A format newer than [`ENTRY_FORMAT`], or a body that is not an entry, is
    /// [`SessionError::Corrupt`], naming the session and the entry.
    pub fn decode(
        session: &str,
        version: u64,
        format: i64,
        body: &str,
    ) -> Result<SessionEntry, SessionError> {
        let corrupt = |message: String| SessionError::corrupt(session, version, message);
        if format < 1 || format > i64::from(ENTRY_FORMAT) {
            return Err(corrupt(format!(
                "written in format {format}; this build reads formats 1 to {ENTRY_FORMAT}: \
                 read it with the agent-loop version that wrote it, or newer"
            )));
        }
        serde_json::from_str(body).map_err(|e| corrupt(format!("not a session entry: {e}")))
    }
}

/// A session's entries as a store loaded them: from its newest
/// [`Conversation`](SessionEntry::Conversation) entry on, each with its version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The session's version: the version of its last entry.
    pub version: u64,
    /// The entries from the newest `Conversation` entry on, oldest first, with their
    /// versions.
    pub entries: Vec<(u64, SessionEntry)>,
}

/// A session as it stands: its conversation and the pause it waits in, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The session's id.
    pub id: String,
    /// Its version; the next append builds on it.
    pub version: u64,
    /// The conversation.
    pub conversation: Conversation,
    /// The pause it waits in: its id and state (`None` when it was resumed, or the
    /// conversation went on without it).
    pub pause: Option<(String, serde_json::Value)>,
    /// The last lease taken on it and not released, if any: a run in flight, unless it ran
    /// out ([`Lease::holds_at`]).
    pub lease: Option<Lease>,
}

impl StoredSession {
    /// Replays the entries into the session they describe. Entries that do not fit together
    /// (no `Conversation` entry first, messages replaced past the end) are
    /// [`SessionError::Corrupt`].
    pub fn into_session(self, id: &str) -> Result<Session, SessionError> {
        let corrupt = |version: u64, message: &str| SessionError::corrupt(id, version, message);
        let mut entries = self.entries.into_iter();
        let mut conversation = match entries.next() {
            Some((_, SessionEntry::Conversation { conversation })) => conversation,
            Some((version, _)) => {
                return Err(corrupt(
                    version,
                    "a session's log must start with its conversation",
                ))
            }
            None if self.version == 0 => Conversation::default(),
            None => return Err(corrupt(self.version, "the session's entries are missing")),
        };
        let mut pause = None;
        let mut lease = None;
        for (version, entry) in entries {
            match entry {
                // A lease changes who may write, not what the session holds.
                SessionEntry::Lease { holder, until_ms } => {
                    lease = Some(Lease { holder, until_ms });
                    continue;
                }
                SessionEntry::Released { holder } => {
                    if lease.as_ref().is_some_and(|l| l.holder == holder) {
                        lease = None;
                    }
                    continue;
                }
                _ => pause = None,
            }
            match entry {
                SessionEntry::Conversation { conversation: c } => conversation = c,
                SessionEntry::Messages { start, messages } => {
                    let start = usize::try_from(start).unwrap_or(usize::MAX);
                    if start > conversation.messages.len() {
                        return Err(corrupt(
                            version,
                            "messages replaced from past the end of the conversation",
                        ));
                    }
                    conversation.messages.truncate(start);
                    conversation.messages.extend(messages);
                }
                SessionEntry::Paused { pause: id, state } => pause = Some((id, state)),
                SessionEntry::Rewound { to } => {
                    let to = usize::try_from(to).unwrap_or(usize::MAX);
                    if to > conversation.messages.len() {
                        return Err(corrupt(
                            version,
                            "rewound to past the end of the conversation",
                        ));
                    }
                    conversation.messages.truncate(to);
                }
                SessionEntry::Resumed { .. }
                | SessionEntry::Lease { .. }
                | SessionEntry::Released { .. } => {}
            }
        }
        Ok(Session {
            id: id.to_owned(),
            version: self.version,
            conversation,
            pause,
            lease,
        })
    }
}

/// Loads a session from `store` and replays it; `None` when there is no such session.
pub async fn load(
    store: &dyn SessionStore,
    session: &str,
) -> Result<Option<Session>, SessionError> {
    load_from(store, session).await
}

/// Ends the lease a run holds on `session`, whoever holds it, so that another agent can
/// run on it at once: for a host that knows the holder is gone (its process died) and will
/// not wait for the lease to run out. Returns the lease it ended, or `None` when none held.
/// A run still going on under that lease is not stopped: it fails at its next save (another
/// writer got there first), having saved every turn it ended before.
pub async fn release_lease(
    store: &dyn SessionStore,
    session: &str,
) -> Result<Option<Lease>, SessionError> {
    let Some(loaded) = load(store, session).await? else {
        return Ok(None);
    };
    let Some(lease) = loaded.lease else {
        return Ok(None);
    };
    let released = SessionEntry::Released {
        holder: lease.holder.clone(),
    };
    store.append(session, loaded.version, &[released]).await?;
    Ok(Some(lease))
}

/// Where sessions are kept: an append-only log per session id, written with
/// compare-and-swap on its version.
///
/// A store of your own keeps, per session, its entries (each [`SessionEntry::encode`]d,
/// with its version) and its version, and must make [`append`](Self::append) atomic: all
/// the entries or none, and only if the version is the one expected.
#[async_trait]
pub trait SessionStore: Send + Sync + fmt::Debug {
    /// The session's entries from its newest `Conversation` entry on, with its version;
    /// `None` when the session does not exist.
    async fn load(&self, session: &str) -> Result<Option<StoredSession>, SessionError>;

    /// Appends `entries` (versions `expected + 1` on) if the session is at version
    /// `expected` (0: it must not exist yet), in one transaction; returns the new version.
    /// Another version found is [`SessionError::Conflict`], and nothing is written.
    async fn append(
        &self,
        session: &str,
        expected: u64,
        entries: &[SessionEntry],
    ) -> Result<u64, SessionError>;

    /// Deletes the session and its entries (nothing when it does not exist).
    async fn delete(&self, session: &str) -> Result<(), SessionError>;

    /// Forks the session `from` after its first `at` messages into the new session `into`,
    /// which starts with a copy of that conversation (its system prompt too) and shares
    /// nothing with `from`: what either appends later, the other never sees. Returns the new
    /// session's version (1).
    ///
    /// Refused, with nothing written: `from` does not exist ([`SessionError::NotFound`]);
    /// `at` past its end, or a cut that leaves a tool call without its result
    /// ([`SessionError::InvalidPoint`]); `into` exists already ([`SessionError::Conflict`]).
    /// A run in flight on `from` does not stop a fork: it copies what is saved.
    ///
    /// Built on [`load`](Self::load) and [`append`](Self::append), so every store has it;
    /// a store may do it in one statement of its own.
    async fn fork(&self, from: &str, at: u64, into: &str) -> Result<u64, SessionError> {
        let session = load_from(self, from)
            .await?
            .ok_or_else(|| SessionError::NotFound {
                session: from.to_owned(),
            })?;
        let messages = cut(&session, at)?;
        let conversation = Conversation::new(session.conversation.system.clone(), messages);
        self.append(into, 0, &[SessionEntry::Conversation { conversation }])
            .await
    }

    /// Rewinds the session to its first `to` messages, with a [`SessionEntry::Rewound`]
    /// appended to its log (the entries before stay as they were, readable), and drops the
    /// pause it waited in, if any: an answer to it is refused from now on. Returns the
    /// session's new version.
    ///
    /// Refused, with nothing written: no such session ([`SessionError::NotFound`]); `to`
    /// past its end, or a cut that leaves a tool call without its result
    /// ([`SessionError::InvalidPoint`]); a run in flight on it ([`SessionError::Busy`], its
    /// lease holds); another writer first ([`SessionError::Conflict`]).
    async fn rewind(&self, session: &str, to: u64) -> Result<u64, SessionError> {
        let loaded = load_from(self, session)
            .await?
            .ok_or_else(|| SessionError::NotFound {
                session: session.to_owned(),
            })?;
        if let Some(lease) = loaded.lease.as_ref().filter(|l| l.holds_at(now_ms())) {
            return Err(SessionError::Busy {
                session: session.to_owned(),
                holder: lease.holder.clone(),
                until_ms: lease.until_ms,
            });
        }
        cut(&loaded, to)?;
        self.append(session, loaded.version, &[SessionEntry::Rewound { to }])
            .await
    }
}

/// [`load`] from any store (a default method's `self` may be unsized).
async fn load_from<S: SessionStore + ?Sized>(
    store: &S,
    session: &str,
) -> Result<Option<Session>, SessionError> {
    match store.load(session).await? {
        Some(stored) => stored.into_session(session).map(Some),
        None => Ok(None),
    }
}

/// The first `at` messages of `session`, if that cut is a valid history; else the refusal
/// says why and names the valid cuts nearest to `at`, nearest first.
fn cut(session: &Session, at: u64) -> Result<Vec<Message>, SessionError> {
    let messages = &session.conversation.messages;
    let valid = crate::context::ContextManager::valid_cuts(messages);
    let end = usize::try_from(at)
        .ok()
        .filter(|&end| end <= messages.len());
    let why = match end {
        Some(end) if valid.binary_search(&end).is_ok() => return Ok(messages[..end].to_vec()),
        None => format!("it has {} messages", messages.len()),
        Some(end) => match messages[..end].last() {
            Some(last) if last.tool_uses().next().is_some() => {
                let ids = last.tool_uses().map(|(id, _, _)| id).collect::<Vec<_>>();
                let ids = ids.join(", ");
                if end < messages.len() {
                    format!(
                        "message {end} asks for tool calls ({ids}) whose results are in \
                         message {}, and a cut keeps each call with its result",
                        end + 1
                    )
                } else {
                    format!("message {end} asks for tool calls ({ids}) that wait for results")
                }
            }
            // The stored conversation itself breaks the history invariant at or before here.
            _ => match crate::context::ContextManager::check_valid(&messages[..end]) {
                Err(crate::Error::Context(crate::error::ContextError::InvalidHistory(why))) => {
                    format!("its first {end} messages are not a valid history: {why}")
                }
                _ => format!("its first {end} messages are not a valid history"),
            },
        },
    };
    Err(SessionError::InvalidPoint {
        session: session.id.clone(),
        at,
        message: format!("{why}; {}", nearest_cuts(&valid, at)),
    })
}

/// The valid cuts nearest to `at`, nearest first (of two as near, the later: it keeps more),
/// three at most, as a refusal names them.
fn nearest_cuts(valid: &[usize], at: u64) -> String {
    let mut nearest: Vec<u64> = valid
        .iter()
        .filter_map(|&k| u64::try_from(k).ok())
        .collect();
    nearest.sort_by_key(|&k| (k.abs_diff(at), std::cmp::Reverse(k)));
    nearest.truncate(3);
    let list: Vec<String> = nearest.iter().map(u64::to_string).collect();
    match nearest.as_slice() {
        [0] => "the only valid cut is after message 0 (an empty conversation)".to_owned(),
        _ => format!(
            "the valid cuts nearest to it, nearest first: after message {}",
            list.join(", ")
        ),
    }
}

/// A [`SessionStore`] in memory: for tests, and for one process that needs no restart.
/// Entries are kept encoded, as a database would keep them.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, Vec<EncodedEntry>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<EncodedEntry>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session: &str) -> Result<Option<StoredSession>, SessionError> {
        let sessions = self.lock();
        let Some(rows) = sessions.get(session) else {
            return Ok(None);
        };
        let from = rows
            .iter()
            .rposition(|row| row.kind == "conversation")
            .unwrap_or(0);
        let entries = rows[from..]
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let version = (from + i + 1) as u64;
                SessionEntry::decode(session, version, i64::from(row.format), &row.body)
                    .map(|entry| (version, entry))
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(StoredSession {
            version: rows.len() as u64,
            entries,
        }))
    }

    async fn append(
        &self,
        session: &str,
        expected: u64,
        entries: &[SessionEntry],
    ) -> Result<u64, SessionError> {
        let mut sessions = self.lock();
        let found = sessions.get(session).map(|rows| rows.len() as u64);
        if found.unwrap_or(0) != expected {
            return Err(SessionError::Conflict {
                session: session.to_owned(),
                expected,
                found,
            });
        }
        let rows = sessions.entry(session.to_owned()).or_default();
        rows.extend(entries.iter().map(SessionEntry::encode));
        Ok(rows.len() as u64)
    }

    async fn delete(&self, session: &str) -> Result<(), SessionError> {
        self.lock().remove(session);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    fn messages(start: u64, texts: &[&str]) -> SessionEntry {
        SessionEntry::Messages {
            start,
            messages: texts.iter().map(|t| Message::user(*t)).collect(),
        }
    }

    #[test]
    fn replaying_applies_appends_rewrites_and_pauses() {
        let stored = StoredSession {
            version: 5,
            entries: vec![
                (
                    1,
                    SessionEntry::Conversation {
                        conversation: Conversation::new(Some("sys".into()), vec![]),
                    },
                ),
                (2, messages(0, &["a", "b"])),
                (3, messages(1, &["c", "d"])),
                (
                    4,
                    SessionEntry::Paused {
                        pause: "p".into(),
                        state: serde_json::json!({}),
                    },
                ),
                (5, SessionEntry::Resumed { pause: "p".into() }),
            ],
        };
        let session = stored.clone().into_session("s").unwrap();
        let texts: Vec<String> = session
            .conversation
            .messages
            .iter()
            .map(Message::text)
            .collect();
        assert_eq!(texts, ["a", "c", "d"]);
        assert_eq!(session.conversation.system.as_deref(), Some("sys"));
        assert_eq!(session.version, 5);
        assert_eq!(session.pause, None, "a resumed pause waits no more");

        let mut paused = stored;
        paused.entries.pop();
        paused.version = 4;
        let session = paused.into_session("s").unwrap();
        assert_eq!(session.pause.map(|p| p.0).as_deref(), Some("p"));
    }

    #[test]
    fn leases_are_held_until_their_holder_releases_them_and_keep_the_pause() {
        let lease = |holder: &str, until_ms| SessionEntry::Lease {
            holder: holder.into(),
            until_ms,
        };
        let released = |holder: &str| SessionEntry::Released {
            holder: holder.into(),
        };
        let replay = |entries: Vec<SessionEntry>| {
            let mut all = vec![SessionEntry::Conversation {
                conversation: Conversation::default(),
            }];
            all.extend(entries);
            StoredSession {
                version: all.len() as u64,
                entries: (1..).zip(all).collect(),
            }
            .into_session("s")
            .unwrap()
        };
        let held = replay(vec![lease("a", 10), messages(0, &["q"]), lease("a", 20)]);
        assert_eq!(
            held.lease,
            Some(Lease {
                holder: "a".into(),
                until_ms: 20
            })
        );
        assert_eq!(held.conversation.messages.len(), 1);
        let held = held.lease.unwrap();
        assert!(held.holds_at(19));
        assert!(!held.holds_at(20));
        // Only its holder's release ends a lease.
        let other = replay(vec![lease("a", 10), released("b")]);
        assert_eq!(other.lease.map(|l| l.holder).as_deref(), Some("a"));
        let paused = replay(vec![
            lease("a", 10),
            SessionEntry::Paused {
                pause: "p".into(),
                state: serde_json::json!({}),
            },
            released("a"),
        ]);
        assert_eq!(paused.lease, None);
        assert_eq!(paused.pause.map(|p| p.0).as_deref(), Some("p"));
        // A lease taken over a pause leaves it waiting until the run writes.
        let taken = replay(vec![
            SessionEntry::Paused {
                pause: "p".into(),
                state: serde_json::json!({}),
            },
            lease("b", 10),
        ]);
        assert!(taken.pause.is_some());
        // Written in format 2, so a build before leases refuses them clearly.
        assert_eq!(lease("a", 1).encode().format, 2);
        assert_eq!(released("a").encode().kind, "released");
        assert_eq!(messages(0, &[]).encode().format, 1);
    }

    #[test]
    fn a_host_ends_whatever_lease_holds_and_nothing_when_none_does() {
        block_on(async {
            let store = MemoryStore::new();
            assert_eq!(
                release_lease(&store, "s").await.unwrap(),
                None,
                "no session"
            );
            let first = SessionEntry::Conversation {
                conversation: Conversation::default(),
            };
            store.append("s", 0, &[first]).await.unwrap();
            assert_eq!(release_lease(&store, "s").await.unwrap(), None, "no lease");
            assert_eq!(store.load("s").await.unwrap().unwrap().version, 1);
            let lease = SessionEntry::Lease {
                holder: "gone".into(),
                until_ms: u64::MAX,
            };
            store.append("s", 1, &[lease]).await.unwrap();
            let ended = release_lease(&store, "s").await.unwrap();
            assert_eq!(ended.map(|l| l.holder).as_deref(), Some("gone"));
            let now = load(&store, "s").await.unwrap().unwrap();
            assert_eq!((now.version, now.lease), (3, None));
        });
    }

    /// A session of four messages: a question, a call, its result, an answer.
    async fn called(store: &MemoryStore, id: &str) {
        let call = Message {
            role: crate::message::Role::Assistant,
            content: vec![crate::message::ContentBlock::ToolUse {
                id: "c1".into(),
                name: "add".into(),
                input: serde_json::json!({"a": 1}),
            }],
        };
        let result = Message {
            role: crate::message::Role::User,
            content: vec![crate::message::ContentBlock::tool_result("c1", "1", false)],
        };
        let conversation = Conversation::new(
            Some("sys".into()),
            vec![Message::user("q"), call, result, Message::assistant("a")],
        );
        store
            .append(id, 0, &[SessionEntry::Conversation { conversation }])
            .await
            .unwrap();
    }

    #[test]
    fn a_fork_copies_the_conversation_up_to_a_valid_point_into_a_new_session() {
        block_on(async {
            let store = MemoryStore::new();
            called(&store, "s").await;
            assert_eq!(store.fork("s", 3, "f").await.unwrap(), 1);
            let fork = load(&store, "f").await.unwrap().unwrap();
            assert_eq!(fork.conversation.messages.len(), 3);
            assert_eq!(fork.conversation.system.as_deref(), Some("sys"));
            // Nothing shared: the original goes on alone.
            store
                .append("s", 1, &[messages(4, &["more"])])
                .await
                .unwrap();
            let fork = load(&store, "f").await.unwrap().unwrap();
            assert_eq!(fork.conversation.messages.len(), 3);
            // A call cut from its result, a point past the end, a missing session, a taken id.
            // The refusal says why and where to cut instead, nearest first, with no advice
            // meant for a broken history.
            let err = store.fork("s", 2, "g").await.unwrap_err();
            assert!(
                matches!(&err, SessionError::InvalidPoint { at: 2, .. }),
                "{err}"
            );
            assert_eq!(
                err.to_string(),
                "session \"s\" cannot be cut after message 2: message 2 asks for tool calls \
                 (c1) whose results are in message 3, and a cut keeps each call with its \
                 result; the valid cuts nearest to it, nearest first: after message 3, 1, 4"
            );
            let err = store.fork("s", 9, "g").await.unwrap_err();
            assert!(
                matches!(&err, SessionError::InvalidPoint { at: 9, .. }),
                "{err}"
            );
            assert!(
                err.to_string().ends_with(
                    "after message 9: it has 5 messages; the valid cuts nearest to it, \
                     nearest first: after message 5, 4, 3"
                ),
                "{err}"
            );
            assert!(matches!(
                store.fork("nope", 0, "g").await,
                Err(SessionError::NotFound { .. })
            ));
            assert!(store.load("g").await.unwrap().is_none(), "nothing written");
            assert!(matches!(
                store.fork("s", 1, "f").await,
                Err(SessionError::Conflict { .. })
            ));
            // At 0: an empty conversation, its system prompt kept.
            store.fork("s", 0, "empty").await.unwrap();
            let empty = load(&store, "empty").await.unwrap().unwrap();
            assert!(empty.conversation.messages.is_empty());
        });
    }

    #[test]
    fn a_rewind_is_an_entry_that_keeps_the_history_before_it() {
        block_on(async {
            let store = MemoryStore::new();
            called(&store, "s").await;
            let paused = SessionEntry::Paused {
                pause: "p".into(),
                state: serde_json::json!({}),
            };
            store.append("s", 1, &[paused]).await.unwrap();
            assert!(matches!(
                store.rewind("s", 2).await,
                Err(SessionError::InvalidPoint { .. })
            ));
            assert_eq!(store.rewind("s", 1).await.unwrap(), 3);
            let now = load(&store, "s").await.unwrap().unwrap();
            assert_eq!(now.conversation.messages.len(), 1);
            assert_eq!(now.pause, None, "the pause waits no more");
            // The log keeps what came before, readable.
            let stored = store.load("s").await.unwrap().unwrap();
            assert_eq!(stored.entries.len(), 3);
            assert_eq!(stored.entries[2], (3, SessionEntry::Rewound { to: 1 }));
            let SessionEntry::Conversation { conversation } = &stored.entries[0].1 else {
                panic!("{stored:?}")
            };
            assert_eq!(conversation.messages.len(), 4);
            // Written in format 3: a build before rewinds refuses it.
            assert_eq!(SessionEntry::Rewound { to: 1 }.encode().format, 3);
            // A run in flight holds it.
            let lease = SessionEntry::Lease {
                holder: "run".into(),
                until_ms: u64::MAX,
            };
            store.append("s", 3, &[lease]).await.unwrap();
            assert!(matches!(
                store.rewind("s", 0).await,
                Err(SessionError::Busy { .. })
            ));
            assert!(matches!(
                store.rewind("nope", 0).await,
                Err(SessionError::NotFound { .. })
            ));
        });
    }

    #[test]
    fn a_rewind_past_the_end_is_corrupt_on_replay() {
        let stored = StoredSession {
            version: 2,
            entries: vec![
                (
                    1,
                    SessionEntry::Conversation {
                        conversation: Conversation::default(),
                    },
                ),
                (2, SessionEntry::Rewound { to: 1 }),
            ],
        };
        assert!(matches!(
            stored.into_session("s"),
            Err(SessionError::Corrupt { version: 2, .. })
        ));
    }

    #[test]
    fn leases_count_wall_clock_milliseconds() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let now = u128::from(now_ms());
        // After 2023-11-14 (1.7e12 ms), and no earlier than the clock just read.
        assert!(now >= before && now > 1_700_000_000_000, "{now} < {before}");
    }

    #[test]
    fn entries_that_do_not_fit_together_are_corrupt() {
        let no_start = StoredSession {
            version: 1,
            entries: vec![(1, messages(0, &["a"]))],
        };
        assert!(matches!(
            no_start.into_session("s"),
            Err(SessionError::Corrupt { version: 1, .. })
        ));
        let past_end = StoredSession {
            version: 2,
            entries: vec![
                (
                    1,
                    SessionEntry::Conversation {
                        conversation: Conversation::default(),
                    },
                ),
                (2, messages(3, &["a"])),
            ],
        };
        let err = past_end.into_session("s").unwrap_err();
        assert!(err.to_string().contains("entry 2"), "{err}");
        let missing = StoredSession {
            version: 3,
            entries: vec![],
        };
        assert!(missing.into_session("s").is_err());
    }

    #[test]
    fn decoding_refuses_newer_formats_and_garbage_without_panicking() {
        let entry = SessionEntry::Resumed { pause: "p".into() };
        let encoded = entry.encode();
        assert_eq!(encoded.kind, "resumed");
        assert_eq!(
            SessionEntry::decode("s", 1, encoded.format.into(), &encoded.body).unwrap(),
            entry
        );
        let newer = SessionEntry::decode("s", 7, 4, &encoded.body).unwrap_err();
        assert!(newer.to_string().contains("format 4"), "{newer}");
        assert!(SessionEntry::decode("s", 7, 0, &encoded.body).is_err());
        for garbage in ["", "{", "[]", r#"{"type":"nope"}"#, "\u{0}"] {
            let err = SessionEntry::decode("s", 3, 1, garbage).unwrap_err();
            assert!(matches!(err, SessionError::Corrupt { version: 3, .. }));
        }
    }

    #[test]
    fn the_memory_store_appends_with_compare_and_swap() {
        block_on(async {
            let store = MemoryStore::new();
            assert_eq!(store.load("s").await.unwrap(), None);
            let first = SessionEntry::Conversation {
                conversation: Conversation::default(),
            };
            let err = store
                .append("s", 1, std::slice::from_ref(&first))
                .await
                .unwrap_err();
            assert_eq!(
                err,
                SessionError::Conflict {
                    session: "s".into(),
                    expected: 1,
                    found: None
                }
            );
            assert_eq!(
                store
                    .append("s", 0, std::slice::from_ref(&first))
                    .await
                    .unwrap(),
                1
            );
            assert!(store
                .append("s", 0, std::slice::from_ref(&first))
                .await
                .is_err());
            assert_eq!(
                store
                    .append("s", 1, &[messages(0, &["a"]), first.clone()])
                    .await
                    .unwrap(),
                3
            );
            assert!(store.append("s", 2, &[messages(0, &["b"])]).await.is_err());
            let loaded = store.load("s").await.unwrap().unwrap();
            assert_eq!(loaded.version, 3);
            assert_eq!(
                loaded.entries,
                vec![(3, first)],
                "from the newest conversation"
            );
            store.delete("s").await.unwrap();
            assert_eq!(store.load("s").await.unwrap(), None);
        });
    }
}
