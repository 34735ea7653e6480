//! The tokio driver of a run: it carries out what the [`AgentMachine`] asks (call the model,
//! ask the hooks, run tools, sleep, compact) and feeds back what happened. It decides
//! nothing; every decision is the machine's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::error::Error;
use crate::input::UserInput;
use crate::message::Usage;

use super::agent::Agent;
use super::driver::Driver;
use super::events::{AgentEvent, RunOutcome, Termination};
use super::machine::AgentMachine;
use super::output::RunOptions;
use super::shared::lock;

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
    /// [`AgentHandle::snapshot`](crate::AgentHandle::snapshot) give the conversation as of the last turn boundary.
    ///
    /// One run at a time: a `run` started while another is in flight yields only
    /// `Finished` with a [`Termination::Error`] saying so, and leaves the conversation alone.
    ///
    /// Dropping the stream cancels the run at once; the history stays valid (unanswered tool
    /// calls are answered as interrupted, partial answer text is kept, marked as
    /// interrupted) and the next `run` works.
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
        let input = input.into();
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let context = {
            let mut shared = lock(&self.shared);
            let context = shared.context.take();
            if let Some(context) = &context {
                shared.view = context.snapshot();
            }
            context
        };
        let Some(context) = context else {
            let driver = async move {
                let _ = tx
                    .send(AgentEvent::Finished(RunOutcome {
                        termination: Termination::Error(Error::Busy),
                        final_text: String::new(),
                        turns: 0,
                        usage: Usage::default(),
                        failed_usage: Usage::default(),
                        output: None,
                    }))
                    .await;
            };
            return EventStream {
                driver: Some(Box::pin(driver)),
                rx,
            };
        };
        let span = tracing::info_span!(
            "agent.run",
            turns = tracing::field::Empty,
            input_tokens = tracing::field::Empty,
            output_tokens = tracing::field::Empty,
            termination = tracing::field::Empty,
        );
        let tools = self.sources.current();
        let machine = AgentMachine::new(self.machine_config(), context, tools.catalog());
        let driver = Driver::new(self, machine, tools, span.clone(), tx)
            .drive(input, options)
            .instrument(span);
        EventStream {
            driver: Some(Box::pin(driver)),
            rx,
        }
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
