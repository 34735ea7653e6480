//! An agent's session: loading the conversation from its store, saving what each turn added,
//! and claiming a pause before resuming it. The driver calls these; the store decides
//! nothing but compare-and-swap.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::context::ContextManager;
use crate::error::{Error, ResumeError, SessionError};
use crate::session::{self, SessionEntry, SessionStore};

use super::pause::PausedRun;
use super::shared::{lock, Shared};

/// The store an agent keeps its conversation in, and the session's id.
#[derive(Clone)]
pub(crate) struct SessionLink {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) id: String,
}

impl fmt::Debug for SessionLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLink")
            .field("store", &self.store)
            .field("id", &self.id)
            .finish()
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
        lock(shared).session_version = Some(0);
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
    shared.paused = paused;
    Ok(())
}

/// Appends what changed in `context` since it was last saved, and `pause` if given.
pub(crate) async fn save(
    link: &SessionLink,
    shared: &Mutex<Shared>,
    context: &mut ContextManager,
    pause: Option<&PausedRun>,
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
    if let Some(pause) = pause {
        entries.push(SessionEntry::Paused {
            pause: pause.id().to_owned(),
            state: pause.state_json(),
        });
    }
    if entries.is_empty() {
        return Ok(());
    }
    let version = link.store.append(&link.id, version, &entries).await?;
    lock(shared).session_version = Some(version);
    context.mark_saved();
    Ok(())
}

/// Takes up the pause `paused` in the session, before anything of it runs: refused when the
/// session does not wait in it, or another process took it up first. Returns whether the
/// paused run's conversation is the session's (then nothing of it needs saving again).
pub(crate) async fn claim(
    link: &SessionLink,
    shared: &Mutex<Shared>,
    paused: &PausedRun,
) -> Result<bool, Error> {
    let already = || ResumeError::AlreadyResumed {
        pause: paused.id().to_owned(),
    };
    let (version, same) = {
        let shared = lock(shared);
        match &shared.paused {
            Some(waiting) if waiting.id() == paused.id() => (
                shared.session_version.unwrap_or(0),
                waiting.conversation() == paused.conversation(),
            ),
            _ => return Err(already().into()),
        }
    };
    let resumed = SessionEntry::Resumed {
        pause: paused.id().to_owned(),
    };
    match link.store.append(&link.id, version, &[resumed]).await {
        Ok(version) => {
            let mut shared = lock(shared);
            shared.session_version = Some(version);
            shared.paused = None;
            Ok(same)
        }
        Err(e) if e.is_conflict() => Err(already().into()),
        Err(e) => Err(e.into()),
    }
}
