//! The tokio driver of a run: it carries out what the [`AgentMachine`] asks (call the model,
//! ask the hooks, run tools, sleep, compact) and feeds back what happened. It decides
//! nothing; every decision is the machine's.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Summarizer;
use crate::error::LlmError;
use crate::message::Usage;
use crate::provider::{LlmClient, LlmEvent};
use crate::tool::{ExecOptions, ToolCallResult, ToolProgress, ToolRegistry};

use super::machine::{Action, AgentMachine, Input};
use super::{busy, lock, Agent, AgentEvent, AgentHandle, AgentHooks, HookAction, RunOutcome};
use super::{Shared, Termination};

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
    /// [`AgentHandle::snapshot`] give the conversation as of the last turn boundary.
    ///
    /// One run at a time: a `run` started while another is in flight yields only
    /// `Finished` with a [`Termination::Error`] saying so, and leaves the conversation alone.
    ///
    /// Dropping the stream cancels the run at once; the history stays valid (unanswered tool
    /// calls are answered as interrupted, partial answer text is kept, marked as
    /// interrupted) and the next `run` works.
    pub fn run(
        &mut self,
        input: impl Into<String>,
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
                        termination: Termination::Error(busy()),
                        final_text: String::new(),
                        turns: 0,
                        usage: Usage::default(),
                        failed_usage: Usage::default(),
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
        let machine = AgentMachine::new(
            self.config.clone(),
            context,
            self.tools.clone(),
            self.client.stream_limits(),
            self.summarizer.is_some(),
        );
        let driver = Driver {
            span: span.clone(),
            machine: Some(machine),
            client: self.client.clone(),
            tools: self.tools.clone(),
            hooks: self.hooks.clone(),
            summarizer: self.summarizer.clone(),
            handle: self.handle.clone(),
            shared: self.shared.clone(),
            cancel: self.handle.token(),
            tx,
            published: 0,
            turn_span: tracing::Span::none(),
            llm_span: tracing::Span::none(),
            attempts: 0,
        }
        .drive(input)
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

/// What one item of the model's stream says.
type ModelItem = Option<Result<LlmEvent, LlmError>>;

/// Carries out a machine's actions with tokio, the client, the tools and the hooks.
struct Driver {
    /// The `agent.run` span; the outcome is recorded on it.
    span: tracing::Span,
    /// `Some` until the conversation goes back to the agent.
    machine: Option<AgentMachine>,
    client: Arc<dyn LlmClient>,
    tools: ToolRegistry,
    hooks: Arc<dyn AgentHooks>,
    summarizer: Option<Arc<dyn Summarizer>>,
    handle: AgentHandle,
    shared: Arc<Mutex<Shared>>,
    cancel: CancellationToken,
    tx: mpsc::Sender<AgentEvent>,
    /// How many messages the published view holds (0: publish everything next time).
    published: usize,
    /// The `agent.turn` span of the turn in progress: the parent of its model calls and tools.
    turn_span: tracing::Span,
    /// The `llm.call` span of the model call in progress; usage is recorded on it.
    llm_span: tracing::Span,
    /// Model calls made in the turn in progress.
    attempts: u32,
}

impl Drop for Driver {
    /// The stream was dropped mid-run: cancel, so the history is left valid, and give it back.
    fn drop(&mut self) {
        if let Some(machine) = self.machine.as_mut() {
            machine.handle(Input::Cancel, now());
        }
        self.give_back();
    }
}

/// The clock the machine is given: tokio's (so paused test time applies).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Driver {
    async fn emit(&self, event: AgentEvent) {
        // The receiver lives in the stream that owns this driver: it is gone only when the
        // driver is being dropped too.
        let _ = self.tx.send(event).await;
    }

    /// Gives the conversation back to the agent (once), valid: the agent can run again.
    fn give_back(&mut self) {
        if let Some(machine) = self.machine.take() {
            lock(&self.shared).context = Some(machine.into_context());
            self.handle.reset();
        }
    }

    /// Publishes the conversation as of this turn boundary for snapshots, copying only what
    /// changed since the last publication (the last published message too, since a push can
    /// merge into it) unless the history was rewritten.
    fn publish(&mut self) {
        let Some(machine) = &self.machine else {
            return;
        };
        let context = machine.context();
        let messages = context.messages();
        let mut shared = lock(&self.shared);
        let view = &mut shared.view;
        if self.published == 0 || self.published > messages.len() {
            view.messages = messages.to_vec();
        } else {
            let keep = self.published.saturating_sub(1);
            view.messages.truncate(keep);
            view.messages
                .extend_from_slice(messages.get(keep..).unwrap_or_default());
        }
        view.system = context.system().map(str::to_owned);
        self.published = messages.len();
    }

    async fn drive(mut self, input: String) {
        let Some(machine) = self.machine.as_mut() else {
            return;
        };
        machine.start(input, now());
        let (progress_tx, mut progress_rx) = mpsc::channel::<ToolProgress>(64);
        let (results_tx, mut results_rx) = mpsc::unbounded_channel::<ToolCallResult>();
        let (_, mut model_rx) = mpsc::channel::<ModelItem>(1);
        let mut model: Option<BoxFuture<'static, ()>> = None;
        let mut model_live = false;
        let mut tools: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
        let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
        let mut told_stop = false;
        let mut told_cancel = false;
        loop {
            // Carry out what the machine asks, in order.
            while let Some(action) = self.machine.as_mut().and_then(AgentMachine::poll) {
                match action {
                    Action::Emit(event) => {
                        if let AgentEvent::TurnStart { turn } = event {
                            self.turn_span =
                                tracing::info_span!(parent: &self.span, "agent.turn", turn);
                            self.attempts = 0;
                        }
                        let turn_end = matches!(event, AgentEvent::TurnEnd { .. });
                        self.emit(event).await;
                        if turn_end {
                            self.publish();
                        }
                        // The host has seen the event: a cancel or stop it decided on now
                        // applies before anything else happens.
                        let machine = self.machine.as_mut();
                        if let Some(machine) = machine {
                            if !told_cancel && self.cancel.is_cancelled() {
                                told_cancel = true;
                                machine.handle(Input::Cancel, now());
                            } else if !told_stop && self.handle.stop_requested() {
                                told_stop = true;
                                machine.handle(Input::StopAfterTurn, now());
                            }
                        }
                    }
                    Action::CallModel(mut request) => {
                        let turn = self.machine.as_ref().map_or(0, AgentMachine::turn);
                        let verdict = self.hooks.before_model_call(&mut request, turn).await;
                        let Some(machine) = self.machine.as_mut() else {
                            return;
                        };
                        if let HookAction::Stop(reason) = verdict {
                            machine.handle(Input::HookStopped(reason), now());
                            continue;
                        }
                        // A fresh channel per response: nothing of an abandoned one arrives.
                        let (tx, rx) = mpsc::channel::<ModelItem>(1);
                        model_rx = rx;
                        model_live = true;
                        let client = self.client.clone();
                        let span = tracing::info_span!(
                            parent: &self.turn_span,
                            "llm.call",
                            turn,
                            attempt = self.attempts,
                            input_tokens = tracing::field::Empty,
                            output_tokens = tracing::field::Empty,
                        );
                        self.attempts += 1;
                        self.llm_span = span.clone();
                        model = Some(Box::pin(
                            async move {
                                let mut stream = client.stream(&request);
                                while let Some(item) = stream.next().await {
                                    if tx.send(Some(item)).await.is_err() {
                                        return;
                                    }
                                }
                                let _ = tx.send(None).await;
                            }
                            .instrument(span),
                        ));
                    }
                    Action::StopModel => {
                        model = None;
                        model_live = false;
                    }
                    Action::Approve(calls) => {
                        let mut verdicts = Vec::with_capacity(calls.len());
                        for call in &calls {
                            verdicts.push(self.hooks.before_tool(call).await);
                        }
                        if let Some(machine) = self.machine.as_mut() {
                            machine.handle(Input::Approved(verdicts), now());
                        }
                    }
                    Action::RunTools(calls) => {
                        let registry = self.tools.clone();
                        let opts = ExecOptions::new()
                            .cancel(self.cancel.clone())
                            .progress(progress_tx.clone());
                        let results = results_tx.clone();
                        tools.push(Box::pin(
                            async move {
                                let mut batch =
                                    std::pin::pin!(registry.execute_stream(calls, opts));
                                while let Some((_, result)) = batch.next().await {
                                    let _ = results.send(result);
                                }
                            }
                            .instrument(self.turn_span.clone()),
                        ));
                    }
                    Action::AbortTools => tools = FuturesUnordered::new(),
                    Action::SleepUntil(at) => {
                        timer = Some(Box::pin(tokio::time::sleep_until(
                            tokio::time::Instant::from_std(at),
                        )));
                    }
                    Action::Compact {
                        reactive,
                        summarize,
                    } => self.compact(reactive, summarize).await,
                    Action::Finish(outcome) => {
                        self.finish(outcome).await;
                        return;
                    }
                }
            }
            let Some(machine) = self.machine.as_mut() else {
                return;
            };
            // Wait for the next thing that happens. Progress before results: a tool that
            // reports and returns at once has its progress shown first.
            let input = tokio::select! {
                biased;
                _ = self.cancel.cancelled(), if !told_cancel => {
                    told_cancel = true;
                    Input::Cancel
                }
                Some(progress) = progress_rx.recv() => Input::ToolProgress(progress),
                Some(result) = results_rx.recv() => Input::ToolDone(result),
                item = model_rx.recv(), if model_live => match item {
                    Some(Some(Ok(event))) => {
                        if let LlmEvent::Usage(usage) = &event {
                            self.llm_span.record("input_tokens", usage.total_input_tokens());
                            self.llm_span.record("output_tokens", usage.output_tokens);
                        }
                        Input::ModelEvent(event)
                    }
                    Some(Some(Err(error))) => {
                        model_live = false;
                        Input::ModelEnded(Err(error))
                    }
                    Some(None) | None => {
                        model_live = false;
                        Input::ModelEnded(Ok(()))
                    }
                },
                () = async { if let Some(m) = model.as_mut() { m.await } }, if model.is_some() => {
                    model = None;
                    continue;
                }
                _ = tools.next(), if !tools.is_empty() => continue,
                () = async { if let Some(t) = timer.as_mut() { t.await } }, if timer.is_some() => {
                    timer = None;
                    Input::Timer
                }
            };
            machine.handle(input, now());
        }
    }

    /// Compacts the machine's conversation (a model call when summarizing), unless the run is
    /// cancelled meanwhile.
    async fn compact(&mut self, reactive: bool, summarize: bool) {
        self.published = 0;
        let summarizer = if summarize {
            self.summarizer.clone()
        } else {
            None
        };
        let cancel = self.cancel.clone();
        let Some(machine) = self.machine.as_mut() else {
            return;
        };
        let context = machine.context_mut();
        let result = tokio::select! {
            _ = cancel.cancelled() => None,
            result = async {
                if reactive {
                    context.compact_harder(summarizer.as_deref()).await.map(Some)
                } else {
                    context.compact(summarizer.as_deref()).await
                }
            } => Some(result),
        };
        match result {
            Some(result) => machine.handle(Input::Compacted(result), now()),
            None => machine.handle(Input::Cancel, now()),
        }
    }

    /// The run is over: the conversation goes back to the agent before `Finished` is
    /// reported, so whoever sees it can run again at once.
    async fn finish(&mut self, outcome: RunOutcome) {
        self.give_back();
        let span = &self.span;
        span.record("turns", outcome.turns);
        span.record("input_tokens", outcome.usage.total_input_tokens());
        span.record("output_tokens", outcome.usage.output_tokens);
        span.record("termination", tracing::field::display(&outcome.termination));
        tracing::info!(termination = %outcome.termination, turns = outcome.turns, "agent run finished");
        self.emit(AgentEvent::Finished(outcome)).await;
    }
}
