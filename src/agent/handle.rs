//! [`AgentHandle`]: steer, stop or cancel a run, or read its conversation, from elsewhere;
//! and [`Shared`], the conversation as the agent, its handles and a run in flight share it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::context::{ContextManager, Conversation};
use crate::input::UserInput;

use super::machine::pause::PausedRun;

/// Steers, stops and cancels runs from outside: from another task, a Ctrl-C handler, a UI
/// button. What it asks goes to the run's machine as an input
/// ([`Input::Steer`](crate::agent::machine::Input::Steer),
/// [`Input::StopAfterTurn`](crate::agent::machine::Input::StopAfterTurn),
/// [`Input::Cancel`](crate::agent::machine::Input::Cancel)), so every driver applies it alike.
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
    /// The host's words not yet taken by a run, oldest first.
    steering: Mutex<VecDeque<UserInput>>,
    /// Wakes the run in flight when a steer or a stop request comes.
    wake: Notify,
}

impl AgentHandle {
    pub(crate) fn new(parent: CancellationToken, shared: Arc<Mutex<Shared>>) -> Self {
        let current = parent.child_token();
        AgentHandle {
            inner: Arc::new(HandleInner {
                parent,
                current: Mutex::new(current),
                stop_after_turn: std::sync::atomic::AtomicBool::new(false),
                steering: Mutex::new(VecDeque::new()),
                wake: Notify::new(),
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

    /// Lets the current turn finish (the model's answer, its tools run and their results
    /// recorded), then ends the run with
    /// [`Termination::StoppedAfterTurn`](crate::Termination::StoppedAfterTurn): nothing is
    /// aborted and the history is whole. A turn that ends the run anyway (a final answer)
    /// ends it as it would have. [`cancel`](Self::cancel) is the hard stop. The request
    /// applies to the run in flight (or the next one to start) only.
    pub fn stop_after_turn(&self) {
        self.inner
            .stop_after_turn
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.wake.notify_one();
    }

    /// Says something to the run in flight (steering): `input` is added to the history as
    /// the user's words at the run's next safe point (after the current response's tool
    /// calls are all answered, before the next model call; never between a call and its
    /// result), where [`AgentEvent::Steered`](crate::AgentEvent::Steered) marks it. Several
    /// are delivered in the order given. A model answering with its final answer meanwhile
    /// does not end the run: another turn hears the input. A run that ends before its next
    /// safe point (cancelled, stopped after its turn, paused, at a limit, or steered after
    /// its final answer) hands what it did not deliver back in
    /// [`RunOutcome::undelivered`](crate::RunOutcome::undelivered). Input given while no
    /// run is in flight waits for the next run, after its own input.
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, AgentEvent};
    /// use futures::StreamExt;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let client = ScriptedClient::new([
    ///     ScriptedResponse::text("Paris."),
    ///     ScriptedResponse::text("Lyon is second."),
    /// ]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let handle = agent.handle();
    /// let mut events = std::pin::pin!(agent.run("Largest French city?"));
    /// let mut steered = false;
    /// while let Some(event) = events.next().await {
    ///     match event {
    ///         // Said while the first answer streams: the run goes on to hear it.
    ///         AgentEvent::TextDelta { .. } if !steered => {
    ///             handle.steer("And the second?");
    ///             steered = true;
    ///         }
    ///         AgentEvent::Finished(outcome) => {
    ///             assert_eq!(outcome.final_text, "Lyon is second.");
    ///             assert!(outcome.undelivered.is_empty());
    ///         }
    ///         _ => {}
    ///     }
    /// }
    /// # Ok::<(), agent_loop::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn steer(&self, input: impl Into<UserInput>) {
        lock_queue(&self.inner.steering).push_back(input.into());
        self.inner.wake.notify_one();
    }

    /// The host's words not yet taken by a run, oldest first (taken: the caller owns them).
    pub(crate) fn take_steering(&self) -> Vec<UserInput> {
        lock_queue(&self.inner.steering).drain(..).collect()
    }

    /// Waits until a steer or a stop request comes (at once if one came since the last wait).
    pub(crate) async fn woken(&self) {
        self.inner.wake.notified().await;
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
    /// ([`Handoff::keep`](crate::agent::Handoff::keep)): where the next run starts (empty: the
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

/// Locks the steering queue, whatever a panicking holder left (each change is one push or
/// one drain).
fn lock_queue(
    queue: &Mutex<VecDeque<UserInput>>,
) -> std::sync::MutexGuard<'_, VecDeque<UserInput>> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks the shared state, whatever a panicking holder left (the state is always whole:
/// every change is a single assignment).
pub(crate) fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}
