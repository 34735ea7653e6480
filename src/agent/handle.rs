//! [`AgentHandle`]: cancel a run or read its conversation from elsewhere.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::context::Conversation;

use super::shared::{lock, Shared};

/// Cancels runs from outside: from another task, a Ctrl-C handler, a UI button.
///
/// Obtained from [`Agent::handle`](crate::Agent::handle) before calling [`Agent::run`](crate::Agent::run); cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    inner: Arc<HandleInner>,
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug)]
struct HandleInner {
    parent: CancellationToken,
    current: Mutex<CancellationToken>,
    stop_after_turn: std::sync::atomic::AtomicBool,
}

impl AgentHandle {
    pub(crate) fn new(parent: CancellationToken, shared: Arc<Mutex<Shared>>) -> Self {
        let current = parent.child_token();
        AgentHandle {
            inner: Arc::new(HandleInner {
                parent,
                current: Mutex::new(current),
                stop_after_turn: std::sync::atomic::AtomicBool::new(false),
            }),
            shared,
        }
    }

    /// The conversation as it stands: as of the last turn boundary of the run in flight, or
    /// the agent's whole conversation between runs. Always a valid history to save and
    /// resume from with [`Agent::restore`](crate::Agent::restore).
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, AgentEvent};
    /// use futures::StreamExt;
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let handle = agent.handle();
    /// // The run's stream owns what it needs: spawn it.
    /// let mut events = agent.run("Hi");
    /// let task = tokio::spawn(async move {
    ///     while let Some(event) = events.next().await {
    ///         if let AgentEvent::TurnEnd { .. } = event {
    ///             // Save after every turn while the run goes on.
    ///             let saved = handle.snapshot();
    ///             assert!(!saved.messages.is_empty());
    ///         }
    ///     }
    /// });
    /// task.await.unwrap();
    /// assert_eq!(agent.messages().len(), 2);
    /// # Ok::<(), agent_loop::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn snapshot(&self) -> Conversation {
        lock(&self.shared).conversation()
    }

    /// Cancels the current run at once: streaming stops, running tools are cancelled, and the
    /// run finishes with [`Termination::Cancelled`](crate::Termination::Cancelled). A cancel before a run starts cancels
    /// that run.
    pub fn cancel(&self) {
        self.token().cancel();
    }

    /// Lets the current turn finish (its tools run and their results are recorded), then
    /// ends the run with [`Termination::Cancelled`](crate::Termination::Cancelled).
    pub fn stop_after_turn(&self) {
        self.inner
            .stop_after_turn
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn token(&self) -> CancellationToken {
        match self.inner.current.lock() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.inner
            .stop_after_turn
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Called when a run ends: the next run starts uncancelled (unless the parent token is).
    pub(crate) fn reset(&self) {
        let fresh = self.inner.parent.child_token();
        match self.inner.current.lock() {
            Ok(mut t) => *t = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        self.inner
            .stop_after_turn
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
