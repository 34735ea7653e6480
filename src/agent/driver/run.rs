//! The tokio driver of a run: it carries out what the [`AgentMachine`] asks (call the model,
//! ask the hooks, run tools, sleep, compact) and feeds back what happened. It decides
//! nothing; every decision is the machine's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::context::ContextManager;
use crate::error::{Error, ResumeError};
use crate::input::UserInput;

use super::driver::Driver;
use super::start::Start;
use super::telemetry;
use crate::agent::agent::Agent;
use crate::agent::events::{AgentEvent, RunOutcome, Termination};
use crate::agent::handle::lock;
use crate::agent::machine::output::RunOptions;
use crate::agent::machine::pause::{PausedRun, Resolutions};

/// Events buffered between the driver and the consumer; the driver waits when it is full.
/// One: the run never gets ahead of what the host has seen, so a cancel or stop the host
/// decides on after an event applies right there (both live in the same task, so waiting
/// costs no task switch).
const EVENT_BUFFER: usize = 1;

impl Agent {
    /// Runs the agent on `input`, continuing the conversation it holds.
    ///
    /// The stream yields events as they happen, in the order [`AgentEvent`] describes, and
    /// always ends with [`AgentEvent::Finished`]. It owns what the run needs (`Send +
    /// 'static`), so it can be handed to `tokio::spawn`; the conversation comes back to the
    /// agent when the run ends. While it runs, [`Agent::snapshot`] and
    /// [`AgentHandle::snapshot`](crate::agent::AgentHandle::snapshot) give the conversation as of the last turn boundary.
    ///
    /// One run at a time: a `run` started while another is in flight yields only
    /// `Finished` with a [`Termination::Error`] saying so, and leaves the conversation alone.
    ///
    /// Dropping the stream cancels the run at once; the history stays valid (unanswered tool
    /// calls are answered as interrupted, partial answer text is kept, marked as
    /// interrupted) and the next `run` works.
    ///
    /// The run goes on in whichever task polls the stream; the crate spawns none. On a
    /// multi-thread runtime, poll it from a spawned task (`tokio::spawn`) rather than from
    /// `block_on` on the main thread: the HTTP connection is driven by the runtime's workers,
    /// and a run on the main thread wakes across threads for every response chunk (about five
    /// times the context switches per model call; BENCHMARKS.md §22).
    pub fn run(
        &mut self,
        input: impl Into<UserInput>,
    ) -> impl Stream<Item = AgentEvent> + Send + 'static {
        self.run_with(input, RunOptions::default())
    }

    /// [`run`](Self::run) with per-run options: request settings over the builder's, and a
    /// structured answer ([`RunOptions::output`]), which the outcome then carries in
    /// [`RunOutcome::output`].
    pub fn run_with(
        &mut self,
        input: impl Into<UserInput>,
        options: RunOptions,
    ) -> impl Stream<Item = AgentEvent> + Send + 'static {
        self.start(Start::Run {
            input: input.into(),
            options,
        })
    }

    /// Continues a [`PausedRun`] with the host's answers to its waiting calls
    /// ([`Resolutions`]), in this process or another: the paused run is plain data, and the
    /// agent needs only the same tools (and, for a typed answer, [`resume_with`](Self::resume_with)).
    /// The stream gives the same events as a run that never paused would have from the pause
    /// on (the rest of the paused turn first, no `TurnStart`), and the same final history.
    ///
    /// Refused, with only `Finished` carrying [`Error::Resume`] and nothing run or changed:
    /// a pause resumed already (by this agent; with a [session](crate::AgentBuilder::session),
    /// by any process), an answer for a call that does not wait, an approval of a tool the
    /// agent no longer has, a paused run of another format. A call left without an answer
    /// keeps waiting: the run pauses again once everything else is done.
    pub fn resume(
        &mut self,
        paused: &PausedRun,
        resolutions: Resolutions,
    ) -> impl Stream<Item = AgentEvent> + Send + 'static {
        self.resume_with(paused, resolutions, RunOptions::default())
    }

    /// [`resume`](Self::resume) with per-run options: the typed answer the paused run was
    /// asked for (a paused run keeps only its schema), and settings over the paused run's.
    pub fn resume_with(
        &mut self,
        paused: &PausedRun,
        resolutions: Resolutions,
        options: RunOptions,
    ) -> impl Stream<Item = AgentEvent> + Send + 'static {
        self.start(Start::Resume {
            paused: Box::new(paused.clone()),
            resolutions,
            options,
        })
    }

    fn start(&mut self, start: Start) -> EventStream {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let context = match self.take_context(&start) {
            Ok(context) => context,
            Err(error) => {
                let driver = async move {
                    let outcome = RunOutcome::new(Termination::Error(error));
                    let _ = tx.send(AgentEvent::Finished(outcome)).await;
                };
                return EventStream {
                    driver: Some(Box::pin(driver)),
                    rx,
                };
            }
        };
        let span = telemetry::run_span(&self.config, &*self.parts.client);
        let tools = self.parts.sources.current();
        let driver = Driver::new(self, context, tools, span.clone(), tx)
            .drive(start)
            .instrument(span);
        EventStream {
            driver: Some(Box::pin(driver)),
            rx,
        }
    }
}

impl Agent {
    /// Takes the conversation for a run, unless one is in flight or the pause cannot be
    /// resumed here.
    fn take_context(&self, start: &Start) -> Result<ContextManager, Error> {
        let mut shared = lock(&self.shared);
        if shared.context.is_none() {
            return Err(Error::Busy);
        }
        if let Start::Resume { paused, .. } = start {
            // Without a session, this agent knows only its own pauses: the one it waits in,
            // or, for an agent that never ran (a new process), any.
            let waits = match &shared.paused {
                Some(waiting) => waiting.id() == paused.id(),
                None => !shared.ran,
            };
            if self.session.is_none() && !waits {
                return Err(ResumeError::AlreadyResumed {
                    pause: paused.id().to_owned(),
                }
                .into());
            }
        }
        let context = shared.context.take().ok_or(Error::Busy)?;
        shared.view = context.snapshot();
        Ok(context)
    }
}

/// A stream fed by a driver future that it polls itself: no task is spawned, and dropping
/// the stream drops (cancels) the driver.
struct EventStream {
    driver: Option<Pin<Box<dyn Future<Output = ()> + Send + 'static>>>,
    rx: mpsc::Receiver<AgentEvent>,
}

impl Stream for EventStream {
    type Item = AgentEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        let this = self.get_mut();
        if let Poll::Ready(Some(event)) = this.rx.poll_recv(cx) {
            return Poll::Ready(Some(event));
        }
        if let Some(driver) = this.driver.as_mut() {
            if driver.as_mut().poll(cx).is_ready() {
                this.driver = None;
            }
        }
        // The driver owns the only sender, so the channel ends by itself once the driver is
        // done and every event is taken. `Pending` never means "ended": tokio's cooperative
        // budget can make a receive pending (and wake the task) while events remain.
        this.rx.poll_recv(cx)
    }
}
