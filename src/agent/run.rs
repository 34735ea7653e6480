//! The tokio driver of a run: it carries out what the [`AgentMachine`] asks (call the model,
//! ask the hooks, run tools, sleep, compact) and feeds back what happened. It decides
//! nothing; every decision is the machine's.

use std::future::Future;
use std::ops::ControlFlow;
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
use crate::error::Error;
use crate::error::LlmError;
use crate::message::{Message, Usage, UserInput};
use crate::provider::{LlmClient, LlmEvent, ModelRequest};
use crate::tool::{ExecOptions, ToolCall, ToolCallResult, ToolProgress, ToolRegistry, ToolSources};

use super::machine::{Action, AgentMachine, Input};
use super::output::{RunOptions, StructuredOutput};
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
                        termination: Termination::Error(busy()),
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
        let machine = AgentMachine::new(
            self.config.clone(),
            context,
            tools.clone(),
            self.client.stream_limits(),
            self.summarizer.is_some(),
        );
        let driver = Driver {
            span: span.clone(),
            machine: Some(machine),
            client: self.client.clone(),
            tools,
            sources: self.sources.clone(),
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
            told_cancel: false,
            told_stop: false,
        }
        .drive(input, options)
        .instrument(span);
        EventStream {
            driver: Some(Box::pin(driver)),
            rx,
        }
    }
}

impl Agent {
    /// Runs the whole loop on `input` and returns how it ended; the events are dropped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), agent_loop::Error> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, RunOptions};
    ///
    /// let client = ScriptedClient::new([ScriptedResponse::text("Paris.")]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let outcome = agent.run_to_end("Capital of France?", RunOptions::new()).await;
    /// assert_eq!(outcome.final_text, "Paris.");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_to_end(
        &mut self,
        input: impl Into<UserInput>,
        options: RunOptions,
    ) -> RunOutcome {
        self.run_to_end_with(input, options, |_| {}).await
    }

    /// [`run_to_end`](Self::run_to_end), handing each event to `on_event` as it comes (to
    /// print the answer as it streams, log tool calls …).
    pub async fn run_to_end_with(
        &mut self,
        input: impl Into<UserInput>,
        options: RunOptions,
        mut on_event: impl FnMut(&AgentEvent) + Send,
    ) -> RunOutcome {
        let mut events = std::pin::pin!(self.run_with(input, options));
        let mut outcome = None;
        while let Some(event) = events.next().await {
            on_event(&event);
            if let AgentEvent::Finished(done) = event {
                outcome = Some(done);
            }
        }
        // The stream always ends with `Finished`; this is only for a broken invariant.
        outcome.unwrap_or_else(|| RunOutcome {
            termination: Termination::Error(Error::Config(
                "the run ended without an outcome".to_owned(),
            )),
            final_text: String::new(),
            turns: 0,
            usage: Usage::default(),
            failed_usage: Usage::default(),
            output: None,
        })
    }

    /// Runs the whole loop on `input` and returns the final answer's text; a run that ends
    /// any other way is an error ([`Error::Stopped`] with the outcome, or the error that ended
    /// it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), agent_loop::Error> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::Agent;
    ///
    /// let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("4")])).build()?;
    /// assert_eq!(agent.prompt("2 + 2?").await?, "4");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prompt(&mut self, input: impl Into<UserInput>) -> Result<String, Error> {
        self.run_to_end(input, RunOptions::default())
            .await
            .into_text()
    }

    /// Runs the whole loop on `input` asking for a typed answer (a structured answer through
    /// the `final_answer` tool, see [`StructuredOutput`]) and returns it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), agent_loop::Error> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::Agent;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, agent_loop::schemars::JsonSchema)]
    /// #[schemars(crate = "agent_loop::schemars")] // so that you need no schemars dependency
    /// struct City { name: String, country: String }
    ///
    /// let client = ScriptedClient::new([ScriptedResponse::tool_call(
    ///     "c1", "final_answer", json!({"name": "Paris", "country": "France"}),
    /// )]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let city: City = agent.prompt_typed("Capital of France?").await?;
    /// assert_eq!(city.name, "Paris");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prompt_typed<T>(&mut self, input: impl Into<UserInput>) -> Result<T, Error>
    where
        T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static,
    {
        let options = RunOptions::new().output(StructuredOutput::of::<T>()?);
        self.run_to_end(input, options).await.parse_output()
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
    /// The tools calls run with: always the machine's.
    tools: ToolRegistry,
    /// Where new tools come from between turns.
    sources: ToolSources,
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
    /// Whether the machine was told of the cancel, or of the stop request.
    told_cancel: bool,
    told_stop: bool,
}

/// What runs outside the machine on its behalf, and the channels it reports through.
struct Io {
    progress_tx: mpsc::Sender<ToolProgress>,
    progress_rx: mpsc::Receiver<ToolProgress>,
    results_tx: mpsc::UnboundedSender<ToolCallResult>,
    results_rx: mpsc::UnboundedReceiver<ToolCallResult>,
    /// The model call in flight: it forwards the response's items into `model_rx`.
    model: Option<BoxFuture<'static, ()>>,
    model_rx: mpsc::Receiver<ModelItem>,
    /// Whether the machine still listens to `model_rx`.
    model_live: bool,
    /// Running tool batches; each sends its results into `results_tx`.
    tools: FuturesUnordered<BoxFuture<'static, ()>>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Io {
    fn new() -> Self {
        let (progress_tx, progress_rx) = mpsc::channel(64);
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        let (_, model_rx) = mpsc::channel(1);
        Io {
            progress_tx,
            progress_rx,
            results_tx,
            results_rx,
            model: None,
            model_rx,
            model_live: false,
            tools: FuturesUnordered::new(),
            timer: None,
        }
    }

    /// Starts a model call whose items arrive on a fresh channel, so nothing of an
    /// abandoned response ever does.
    fn call_model(
        &mut self,
        client: Arc<dyn LlmClient>,
        request: ModelRequest,
        span: tracing::Span,
    ) {
        let (tx, rx) = mpsc::channel::<ModelItem>(1);
        self.model_rx = rx;
        self.model_live = true;
        self.model = Some(Box::pin(
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

    fn stop_model(&mut self) {
        self.model = None;
        self.model_live = false;
    }

    fn run_tools(
        &mut self,
        registry: ToolRegistry,
        calls: Vec<ToolCall>,
        opts: ExecOptions,
        span: tracing::Span,
    ) {
        let results = self.results_tx.clone();
        self.tools.push(Box::pin(
            async move {
                let mut batch = std::pin::pin!(registry.execute_stream(calls, opts));
                while let Some((_, result)) = batch.next().await {
                    let _ = results.send(result);
                }
            }
            .instrument(span),
        ));
    }
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

    /// Feeds one input to the machine.
    fn tell(&mut self, input: Input) {
        if let Some(machine) = self.machine.as_mut() {
            machine.handle(input, now());
        }
    }

    async fn drive(mut self, input: UserInput, options: RunOptions) {
        // Sources that changed since the last run (or during it, after its last turn).
        self.refresh_tools().await;
        if let Some(machine) = self.machine.as_mut() {
            machine.start_with(input, options, now());
        }
        let mut io = Io::new();
        loop {
            while let Some(action) = self.machine.as_mut().and_then(AgentMachine::poll) {
                if self.carry_out(action, &mut io).await.is_break() {
                    return;
                }
            }
            if self.machine.is_none() {
                return;
            }
            if let Some(input) = self.next_input(&mut io).await {
                self.tell(input);
            }
        }
    }

    /// Carries out one action of the machine; `Break` when the run is over.
    async fn carry_out(&mut self, action: Action, io: &mut Io) -> ControlFlow<()> {
        match action {
            Action::Emit(event) => self.report(event).await,
            Action::CallModel(mut request) => {
                let turn = self.machine.as_ref().map_or(0, AgentMachine::turn);
                match self.hooks.before_model_call(&mut request, turn).await {
                    HookAction::Stop(reason) => self.tell(Input::HookStopped(reason)),
                    HookAction::Continue => {
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
                        io.call_model(self.client.clone(), request, span);
                    }
                }
            }
            Action::StopModel => io.stop_model(),
            Action::Approve(calls) => {
                let mut verdicts = Vec::with_capacity(calls.len());
                for call in &calls {
                    verdicts.push(self.hooks.before_tool(call).await);
                }
                self.tell(Input::Approved(verdicts));
            }
            Action::RunTools(calls) => {
                let opts = ExecOptions::new()
                    .cancel(self.cancel.clone())
                    .progress(io.progress_tx.clone());
                io.run_tools(self.tools.clone(), calls, opts, self.turn_span.clone());
            }
            Action::AbortTools => io.tools = FuturesUnordered::new(),
            Action::SleepUntil(at) => {
                io.timer = Some(Box::pin(tokio::time::sleep_until(
                    tokio::time::Instant::from_std(at),
                )));
            }
            Action::Summarize(span) => self.summarize(span).await,
            Action::Finish(outcome) => {
                self.finish(outcome).await;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// Reports an event. Once the host has seen it, a cancel or stop it decided on applies
    /// before anything else happens.
    async fn report(&mut self, event: AgentEvent) {
        if let AgentEvent::TurnStart { turn } = event {
            self.turn_span = tracing::info_span!(parent: &self.span, "agent.turn", turn);
            self.attempts = 0;
        }
        if matches!(event, AgentEvent::Compacted { .. }) {
            // The history was rewritten: the next publication copies it whole.
            self.published = 0;
        }
        let turn_end = matches!(event, AgentEvent::TurnEnd { .. });
        self.emit(event).await;
        if turn_end {
            self.publish();
        }
        if !self.told_cancel && self.cancel.is_cancelled() {
            self.told_cancel = true;
            self.tell(Input::Cancel);
        } else if !self.told_stop && self.handle.stop_requested() {
            self.told_stop = true;
            self.tell(Input::StopAfterTurn);
        }
        if turn_end {
            self.refresh_tools().await;
        }
    }

    /// Between turns: when a tool source changed, refreshes it and gives the machine (and
    /// the tool runner) the rebuilt registry. One atomic load per source when none changed;
    /// nothing once the run is over or stopping. A cancel during the refresh cancels the run at once.
    async fn refresh_tools(&mut self) {
        let over = self.machine.as_ref().is_none_or(AgentMachine::is_finished);
        // A run told to stop after this turn needs no new tools.
        if over || self.told_stop || !self.sources.changed() {
            return;
        }
        let refreshed = tokio::select! {
            _ = self.cancel.cancelled(), if !self.told_cancel => {
                self.told_cancel = true;
                return self.tell(Input::Cancel);
            }
            refreshed = self.sources.refresh() => refreshed,
        };
        if let Some(tools) = refreshed {
            tracing::debug!(tools = tools.len(), "the agent's tools changed");
            self.tools = tools.clone();
            self.tell(Input::ToolsChanged(tools));
        }
    }

    /// Waits for the next thing that happens; `None` when it is nothing the machine needs
    /// to hear (a finished future). Progress before results: a tool that reports and returns
    /// at once has its progress shown first.
    async fn next_input(&mut self, io: &mut Io) -> Option<Input> {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled(), if !self.told_cancel => {
                self.told_cancel = true;
                Some(Input::Cancel)
            }
            Some(progress) = io.progress_rx.recv() => Some(Input::ToolProgress(progress)),
            Some(result) = io.results_rx.recv() => Some(Input::ToolDone(result)),
            item = io.model_rx.recv(), if io.model_live => Some(match item {
                Some(Some(Ok(event))) => {
                    if let LlmEvent::Usage(usage) = &event {
                        self.llm_span.record("input_tokens", usage.total_input_tokens());
                        self.llm_span.record("output_tokens", usage.output_tokens);
                    }
                    Input::ModelEvent(event)
                }
                Some(Some(Err(error))) => {
                    io.model_live = false;
                    Input::ModelEnded(Err(error))
                }
                Some(None) | None => {
                    io.model_live = false;
                    Input::ModelEnded(Ok(()))
                }
            }),
            () = async { if let Some(m) = io.model.as_mut() { m.await } }, if io.model.is_some() => {
                io.model = None;
                None
            }
            _ = io.tools.next(), if !io.tools.is_empty() => None,
            () = async { if let Some(t) = io.timer.as_mut() { t.await } }, if io.timer.is_some() => {
                io.timer = None;
                Some(Input::Timer)
            }
        }
    }

    /// Asks the summarizer for a summary of `span`, unless the run is cancelled meanwhile.
    async fn summarize(&mut self, span: Vec<Message>) {
        let summary = match &self.summarizer {
            None => Err(Error::Context("no summarizer is configured".to_owned())),
            Some(summarizer) => {
                tokio::select! {
                    _ = self.cancel.cancelled() => {
                        self.told_cancel = true;
                        return self.tell(Input::Cancel);
                    }
                    summary = summarizer.summarize(&span) => summary,
                }
            }
        };
        self.tell(Input::Summary(summary));
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
