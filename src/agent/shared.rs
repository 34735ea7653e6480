//! The conversation as an agent, its handles and a run in flight share it.

use std::sync::Mutex;

use crate::context::{ContextManager, Conversation};

/// The conversation as the agent, its handles and a run in flight share it.
///
/// Invariant: `context` is `Some` exactly when no run is in flight. While a run holds the
/// context, `view` is the conversation as of the run's last turn boundary (or its start).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) context: Option<ContextManager>,
    pub(crate) view: Conversation,
}

impl Shared {
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
