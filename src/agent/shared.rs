//! The conversation as an agent, its handles and a run in flight share it.

use std::sync::Mutex;

use crate::context::{ContextManager, Conversation};

use super::machine::pause::PausedRun;

/// The conversation as the agent, its handles and a run in flight share it.
///
/// Invariant: `context` is `Some` exactly when no run is in flight. While a run holds the
/// context, `view` is the conversation as of the run's last turn boundary (or its start).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) context: Option<ContextManager>,
    pub(crate) view: Conversation,
    /// The pause the agent's last run ended in, until a run starts or resumes.
    pub(crate) paused: Option<PausedRun>,
    /// Whether a run was started or resumed (an agent that never ran may resume any pause).
    pub(crate) ran: bool,
    /// The version of the agent's session as it last read or wrote it; `None` until it is
    /// loaded (or with no session).
    pub(crate) session_version: Option<u64>,
    /// The lease another agent held on the session when it was last loaded (`None` once
    /// this agent wrote: its own write ends any lease it was allowed to pass).
    pub(crate) session_lease: Option<crate::session::Lease>,
    /// The handoffs to the agent in charge, kept from the last run
    /// ([`Handoff::keep`](crate::Handoff::keep)): where the next run starts (empty: the
    /// agent itself).
    pub(crate) route: Vec<usize>,
}

impl Shared {
    /// Shared state around a conversation, with no run yet.
    pub(crate) fn new(context: ContextManager) -> Self {
        Shared {
            context: Some(context),
            view: Conversation::default(),
            paused: None,
            ran: false,
            session_version: None,
            session_lease: None,
            route: Vec::new(),
        }
    }

    /// Publishes `context` as the view of a run in flight, copying only what changed since
    /// the last publication of `published` messages (the last of them too, since a push can
    /// merge into it; everything when `published` is 0 or the history shrank). Returns the
    /// number published.
    pub(crate) fn publish(&mut self, context: &ContextManager, published: usize) -> usize {
        let messages = context.messages();
        let view = &mut self.view;
        if published == 0 || published > messages.len() {
            view.messages = messages.to_vec();
        } else {
            let keep = published.saturating_sub(1);
            view.messages.truncate(keep);
            view.messages
                .extend_from_slice(messages.get(keep..).unwrap_or_default());
        }
        view.system = context.system().map(str::to_owned);
        messages.len()
    }

    /// The conversation as it stands: the context's when idle, else the run's last
    /// turn-boundary view.
    pub(crate) fn conversation(&self) -> Conversation {
        match &self.context {
            Some(context) => context.snapshot(),
            None => self.view.clone(),
        }
    }
}

/// Locks the shared state, whatever a panicking holder left (the state is always whole:
/// every change is a single assignment).
pub(crate) fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}
