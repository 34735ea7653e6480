//! An agent's session: loading the conversation from its store, taking the run's lease,
//! saving each turn whole (and the run's end, which releases the lease), and claiming a
//! pause before resuming it. The driver calls these; the store decides nothing but
//! compare-and-swap.
//!
//! A run holds its session with a lease ([`SessionEntry::Lease`]) from its start to its
//! end, renewed with every turn it saves: another agent loading the session meanwhile
//! refuses to start ([`SessionError::Busy`]) instead of building on a run in flight. A
//! holder that died frees the session when its lease runs out (or a host ends it with
//! [`session::release_lease`]). Compare-and-swap stays the guarantee underneath: a run whose
//! lease ran out while another writer took over fails at its next save, having lost no
//! saved turn and written no half one.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::context::ContextManager;
use crate::error::{Error, ResumeError, SessionError};
use crate::session::{self, SessionEntry, SessionStore};

use crate::agent::handle::{lock, Shared};
use crate::agent::machine::pause::PausedRun;

/// The store an agent keeps its conversation in, and the session's id.
#[derive(Clone)]
pub(crate) struct SessionLink {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) id: String,
    /// The agent's id as a lease holder: unique per agent, per process.
    pub(crate) holder: String,
    /// How long a lease lasts unless renewed.
    pub(crate) lease: Duration,
}

impl SessionLink {
    /// A link to session `id` in `store`, for a new agent whose lease lasts `lease`.
    pub(crate) fn new(store: Arc<dyn SessionStore>, id: String, lease: Duration) -> Self {
        static AGENTS: AtomicU64 = AtomicU64::new(0);
        let holder = format!(
            "{}-{}-{}",
            std::process::id(),
            session::now_ms(),
            AGENTS.fetch_add(1, Ordering::Relaxed)
        );
        SessionLink {
            store,
            id,
            holder,
            lease,
        }
    }

    /// The lease entry that holds the session for one more lease period from now.
    fn lease_entry(&self) -> SessionEntry {
        let ms = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX);
        SessionEntry::Lease {
            holder: self.holder.clone(),
            until_ms: session::now_ms().saturating_add(ms),
        }
    }

    /// The entry that ends this agent's lease.
    fn released(&self) -> SessionEntry {
        SessionEntry::Released {
            holder: self.holder.clone(),
        }
    }
}

impl fmt::Debug for SessionLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLink")
            .field("store", &self.store)
            .field("id", &self.id)
            .field("holder", &self.holder)
            .field("lease", &self.lease)
            .finish()
    }
}

/// What a save ends with, after the messages.
pub(crate) enum Tail<'a> {
    /// The run goes on: its lease is renewed.
    Renew,
    /// The run ended: its lease is released.
    Release,
    /// The run paused: the pause, then the lease released.
    Pause(&'a PausedRun),
}

/// A run's link to its session: what it saved so far, and whether a save failed.
pub(crate) struct RunSession {
    link: SessionLink,
    /// How many of the run's turns reached the session.
    turns_saved: u32,
    /// Why a save failed, once one did: nothing more is saved, and the run ends with it.
    failed: Option<SessionError>,
}

impl RunSession {
    pub(crate) fn new(link: SessionLink) -> Self {
        RunSession {
            link,
            turns_saved: 0,
            failed: None,
        }
    }

    pub(crate) fn link(&self) -> &SessionLink {
        &self.link
    }

    /// Saves what the conversation gained since the last save, then `tail`, in one append:
    /// a whole turn (the run's input with the first) and the lease renewed, or the run's end.
    /// Returns why it failed, now or at an earlier save (nothing is saved after a failure).
    /// When another writer got there first, the error says which of the run's turns were
    /// saved, and the agent reads the session afresh before its next run.
    pub(crate) async fn save(
        &mut self,
        shared: &Mutex<Shared>,
        context: &mut ContextManager,
        tail: Tail<'_>,
    ) -> Option<SessionError> {
        if self.failed.is_some() {
            return self.failed.clone();
        }
        let renew = matches!(tail, Tail::Renew);
        let mut error = match save(&self.link, shared, context, tail).await {
            Ok(()) => {
                self.turns_saved += u32::from(renew);
                return None;
            }
            Err(error) => error,
        };
        if let SessionError::Conflict { found, .. } = error {
            // What this agent holds is not the session any more: read it again next run.
            lock(shared).session_version = None;
            error = SessionError::RunOvertaken {
                session: self.link.id.clone(),
                saved_turns: self.turns_saved,
                found: found.unwrap_or(0),
            };
        }
        tracing::error!(%error, session = %self.link.id, "saving the session failed; the run stops");
        self.failed = Some(error.clone());
        Some(error)
    }

    /// Saves the end of a run whose stream was dropped, from the conversation it gave back
    /// (its turn cut short, answered), and releases its lease. Nothing when a save failed
    /// already, or a new run took the conversation first (it saves and holds the session
    /// itself).
    pub(crate) async fn release_dropped(mut self, shared: Arc<Mutex<Shared>>) {
        let Some(mut context) = lock(&shared).context.clone() else {
            return;
        };
        if self
            .save(&shared, &mut context, Tail::Release)
            .await
            .is_none()
        {
            if let Some(held) = lock(&shared).context.as_mut() {
                held.mark_saved();
            }
        }
    }
}

/// Loads the session into `context`, unless it is loaded already: its conversation (the
/// agent keeps its own system prompt when the session has none) and the pause it waits in.
pub(crate) async fn open(
    link: &SessionLink,
    shared: &Mutex<Shared>,
    context: &mut ContextManager,
) -> Result<(), Error> {
    if lock(shared).session_version.is_some() {
        return Ok(());
    }
    let Some(session) = session::load(&*link.store, &link.id).await? else {
        let mut shared = lock(shared);
        shared.session_version = Some(0);
        shared.session_lease = None;
        return Ok(());
    };
    let corrupt = |message: String| SessionError::corrupt(&link.id, session.version, message);
    ContextManager::check_restorable(&session.conversation)
        .map_err(|e| corrupt(format!("its conversation cannot be restored: {e}")))?;
    let paused = match &session.pause {
        Some((_, state)) => Some(
            PausedRun::from_parts(session.conversation.clone(), state.clone()).map_err(corrupt)?,
        ),
        None => None,
    };
    let own_system = context.system().map(str::to_owned);
    let stored_system = session.conversation.system.is_some();
    context.restore_paused(session.conversation);
    context.mark_saved();
    if !stored_system {
        // Saved with the next turn (the session then has the agent's prompt).
        context.set_system(own_system);
    }
    let mut shared = lock(shared);
    shared.session_version = Some(session.version);
    shared.session_lease = session.lease;
    shared.paused = paused;
    Ok(())
}

/// Takes the session's lease for a run about to start, loading the session first when it
/// was not. Refused with [`SessionError::Busy`] while another agent's lease holds; another
/// writer between the load and the take is read again, once.
pub(crate) async fn acquire(
    link: &SessionLink,
    shared: &Mutex<Shared>,
    context: &mut ContextManager,
) -> Result<(), Error> {
    if lock(shared).session_lease.is_some() {
        // Another agent held the session when it was last read: read it again, it may be
        // free now.
        lock(shared).session_version = None;
    }
    for attempt in 0..2 {
        open(link, shared, context).await?;
        not_held_by_another(link, shared)?;
        match save(link, shared, context, Tail::Renew).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_conflict() && attempt == 0 => {
                // Another writer got there first: read the session again and look.
                lock(shared).session_version = None;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// [`SessionError::Busy`] while another agent's lease, as last loaded, holds the session.
fn not_held_by_another(link: &SessionLink, shared: &Mutex<Shared>) -> Result<(), SessionError> {
    match lock(shared).session_lease.clone() {
        Some(lease) if lease.holder != link.holder && lease.holds_at(session::now_ms()) => {
            Err(SessionError::Busy {
                session: link.id.clone(),
                holder: lease.holder,
                until_ms: lease.until_ms,
            })
        }
        _ => Ok(()),
    }
}

/// Appends what changed in `context` since it was last saved, then `tail`, in one append.
pub(crate) async fn save(
    link: &SessionLink,
    shared: &Mutex<Shared>,
    context: &mut ContextManager,
    tail: Tail<'_>,
) -> Result<(), SessionError> {
    let version = lock(shared).session_version.unwrap_or(0);
    let unsaved = context.unsaved();
    let mut entries = Vec::with_capacity(2);
    if unsaved.whole || version == 0 {
        entries.push(SessionEntry::Conversation {
            conversation: context.snapshot(),
        });
    } else if let Some(messages) = context.messages().get(unsaved.from..) {
        if !messages.is_empty() {
            entries.push(SessionEntry::Messages {
                start: unsaved.from as u64,
                messages: messages.to_vec(),
            });
        }
    }
    match tail {
        Tail::Renew => entries.push(link.lease_entry()),
        Tail::Release => entries.push(link.released()),
        Tail::Pause(pause) => {
            entries.push(SessionEntry::Paused {
                pause: pause.id().to_owned(),
                state: pause.state_json(),
            });
            entries.push(link.released());
        }
    }
    let version = link.store.append(&link.id, version, &entries).await?;
    let mut shared = lock(shared);
    shared.session_version = Some(version);
    shared.session_lease = None;
    context.mark_saved();
    Ok(())
}

/// Takes up the pause `paused` in the session, before anything of it runs, with the run's
/// lease: refused when the session does not wait in it, another process took it up first,
/// or another agent's run holds the session. Returns whether the
/// paused run's conversation is the session's (then nothing of it needs saving again).
pub(crate) async fn claim(
    link: &SessionLink,
    shared: &Mutex<Shared>,
    paused: &PausedRun,
) -> Result<bool, Error> {
    let already = || ResumeError::AlreadyResumed {
        pause: paused.id().to_owned(),
    };
    let found = {
        let shared = lock(shared);
        match &shared.paused {
            Some(waiting) if waiting.id() == paused.id() => {
                // The same id is not the same pause: a session rewound (or a fork) asked again
                // may wait under it for other calls. Only the calls it waits for now resume.
                if PausedRun::digests_of(&waiting.pending())
                    != PausedRun::digests_of(&paused.pending())
                {
                    return Err(ResumeError::Superseded {
                        pause: paused.id().to_owned(),
                    }
                    .into());
                }
                Some((
                    shared.session_version.unwrap_or(0),
                    waiting.conversation() == paused.conversation(),
                ))
            }
            // Another pause, or none: this one was taken up already, or rewound away.
            _ => None,
        }
    };
    let Some((version, same)) = found else {
        return Err(left_behind(link, paused).await.into());
    };
    not_held_by_another(link, shared)?;
    let resumed = SessionEntry::Resumed {
        pause: paused.id().to_owned(),
    };
    match link
        .store
        .append(&link.id, version, &[resumed, link.lease_entry()])
        .await
    {
        Ok(version) => {
            let mut shared = lock(shared);
            shared.session_version = Some(version);
            shared.session_lease = None;
            shared.paused = None;
            Ok(same)
        }
        Err(e) if e.is_conflict() => Err(already().into()),
        Err(e) => Err(e.into()),
    }
}

/// Why the session does not wait in `paused`, read from its log for the refusal: after the
/// pause's entry, a rewind came first ([`ResumeError::Superseded`]: nothing of it ran) or its
/// `resumed` entry did ([`ResumeError::AlreadyResumed`]). A pause the loaded entries do not
/// hold (older than the newest whole conversation), or a log that cannot be read, is taken as
/// resumed: its calls may have run.
async fn left_behind(link: &SessionLink, paused: &PausedRun) -> ResumeError {
    let pause = paused.id().to_owned();
    let entries = match link.store.load(&link.id).await {
        Ok(Some(stored)) => stored.entries,
        Ok(None) | Err(_) => Vec::new(),
    };
    let mut seen = false;
    for (_, entry) in &entries {
        match entry {
            SessionEntry::Paused { pause: p, .. } if *p == pause => seen = true,
            SessionEntry::Resumed { pause: p } if seen && *p == pause => break,
            SessionEntry::Rewound { .. } if seen => return ResumeError::Superseded { pause },
            _ => {}
        }
    }
    ResumeError::AlreadyResumed { pause }
}
