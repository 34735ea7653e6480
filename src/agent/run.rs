//! The async driver of a run: model calls, tools, events. Every decision is asked of
//! `turn.rs`; this file only moves events between the model, the tools and the context.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::assemble::{ModelResponse, StreamAssembler};
use crate::error::{Error, LlmError};
use crate::message::{ContentBlock, Message, Role, StopReason, Usage};
use crate::provider::{LlmClient, LlmEvent, ModelRequest, ToolChoice};
use crate::tool::{ExecOptions, ToolCall, ToolCallResult, ToolProgress, ToolRegistry};

use super::turn::{self, FailureTracker, Next, RepeatTracker};
use super::{
    busy, lock, Agent, AgentConfig, AgentEvent, AgentHandle, AgentHooks, HookAction, RunOutcome,
    Shared, Termination, ToolDecision,
};
use crate::context::{ContextConfig, ContextManager, Summarizer};
use std::sync::{Arc, Mutex};

/// Events buffered between the driver and the consumer; the driver waits when it is full.
/// One: the run never gets ahead of what the host has seen, so a cancel or stop the host
/// decides on after an event applies right there (both live in the same task, so waiting
/// costs no task switch).
const EVENT_BUFFER: usize = 1;
/// The stop reason of the `TurnEnd` of a turn that was cut short.
pub(crate) const INTERRUPTED_STOP: &str = "interrupted";
/// Marker appended to answer text that a cancellation cut short.
const INTERRUPTED_MARK: &str = "\n\n[interrupted]";

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
        let cancel = self.handle.token();
        let driver = Run {
            span: span.clone(),
            agent: Parts {
                client: self.client.clone(),
                tools: self.tools.clone(),
                context,
                config: self.config.clone(),
                hooks: self.hooks.clone(),
                summarizer: self.summarizer.clone(),
                handle: self.handle.clone(),
            },
            shared: self.shared.clone(),
            published: 0,
            rewritten: true,
            returned: false,
            answered: std::collections::HashSet::new(),
            open_turn: None,
            tx,
            cancel,
            usage: Usage::default(),
            turns: 0,
            final_text: String::new(),
            partial_text: String::new(),
            finished: false,
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

/// Why one attempt at a model response failed.
enum AttemptError {
    Cancelled,
    Failed { error: LlmError, content_seen: bool },
}

type EarlyTools<'t> = FuturesUnordered<BoxFuture<'t, ToolCallResult>>;

/// What the model turn produced besides the response: read-only calls started early, and the
/// progress channel every tool of the turn reports into.
struct Early<'t> {
    running: EarlyTools<'t>,
    done: Vec<ToolCallResult>,
    /// The calls started early: id and name.
    started: Vec<(String, String)>,
    /// Whether the response has asked for a call that is not read-only: calls after it wait
    /// for the end of the message, so they never run before it.
    blocked: bool,
    progress_tx: mpsc::Sender<ToolProgress>,
    progress_rx: mpsc::Receiver<ToolProgress>,
}

impl Early<'_> {
    fn new() -> Self {
        let (progress_tx, progress_rx) = mpsc::channel(64);
        Early {
            running: FuturesUnordered::new(),
            done: Vec::new(),
            started: Vec::new(),
            blocked: false,
            progress_tx,
            progress_rx,
        }
    }
}

/// What a run owns of its agent: shared handles to the client, tools and hooks, and the
/// conversation itself until the run gives it back.
struct Parts {
    client: Arc<dyn LlmClient>,
    tools: ToolRegistry,
    context: ContextManager,
    config: AgentConfig,
    hooks: Arc<dyn AgentHooks>,
    summarizer: Option<Arc<dyn Summarizer>>,
    handle: AgentHandle,
}

/// The state of one run. If it is dropped before the run finished (the stream was dropped),
/// `Drop` leaves the history valid and gives it back to the agent.
struct Run {
    /// The `agent.run` span; the outcome is recorded on it.
    span: tracing::Span,
    agent: Parts,
    /// Where the conversation goes back to, and where turn-boundary views are published.
    shared: Arc<Mutex<Shared>>,
    /// How many messages of the context the published view holds.
    published: usize,
    /// Whether the context was rewritten (compacted, repaired) since the last publication.
    rewritten: bool,
    /// Whether the context went back to the agent.
    returned: bool,
    /// The turn started and not yet ended.
    open_turn: Option<u32>,
    /// The calls whose `ToolResult` was emitted: their late progress is not reported.
    answered: std::collections::HashSet<String>,
    tx: mpsc::Sender<AgentEvent>,
    cancel: CancellationToken,
    usage: Usage,
    turns: u32,
    final_text: String,
    /// Answer text streamed in the current attempt.
    partial_text: String,
    finished: bool,
}

impl Drop for Run {
    fn drop(&mut self) {
        if !self.finished {
            self.keep_interrupted_text();
        }
        self.give_back();
    }
}

impl Run {
    /// Leaves the history valid and gives it back to the agent (once): from then on the
    /// agent can run again.
    fn give_back(&mut self) {
        if self.returned {
            return;
        }
        self.returned = true;
        self.agent.context.repair();
        let placeholder = ContextManager::new(ContextConfig::default());
        let context = std::mem::replace(&mut self.agent.context, placeholder);
        lock(&self.shared).context = Some(context);
        self.agent.handle.reset();
    }

    /// Publishes the conversation as of this turn boundary for [`Agent::snapshot`] and
    /// [`AgentHandle::snapshot`]. Copies only what changed since the last publication (the
    /// last published message too, since a push can merge into it), unless the history was
    /// rewritten.
    fn publish(&mut self) {
        let messages = self.agent.context.messages();
        let mut shared = lock(&self.shared);
        let view = &mut shared.view;
        if self.rewritten || self.published > messages.len() {
            view.messages = messages.to_vec();
        } else {
            let keep = self.published.saturating_sub(1);
            view.messages.truncate(keep);
            view.messages
                .extend_from_slice(messages.get(keep..).unwrap_or_default());
        }
        view.system = self.agent.context.system().map(str::to_owned);
        self.published = messages.len();
        self.rewritten = false;
    }

    async fn emit(&self, event: AgentEvent) {
        // The receiver lives in the stream that owns this driver: it is gone only when the
        // driver is being dropped too.
        let _ = self.tx.send(event).await;
    }

    /// Keeps answer text that was cut short, marked, as the assistant's message.
    fn keep_interrupted_text(&mut self) {
        let text = std::mem::take(&mut self.partial_text);
        if !text.trim().is_empty() {
            let last_is_user = self
                .agent
                .context
                .messages()
                .last()
                .is_some_and(|m| m.role == Role::User);
            if last_is_user {
                self.agent
                    .context
                    .push(Message::assistant(format!("{text}{INTERRUPTED_MARK}")));
            }
        }
    }

    async fn drive(mut self, input: String) {
        let client = self.agent.client.clone();
        let tools = self.agent.tools.clone();
        let termination = self.run_loop(&*client, &tools, input).await;
        if matches!(termination, Termination::Cancelled) {
            self.keep_interrupted_text();
        }
        self.partial_text.clear();
        if let Some(turn) = self.open_turn.take() {
            // A turn cut short (cancelled, failed, stopped by a hook) still ends.
            self.emit(AgentEvent::TurnEnd {
                turn,
                stop_reason: StopReason::Other(INTERRUPTED_STOP.to_owned()),
                usage: Usage::default(),
            })
            .await;
        }
        self.finished = true;
        // Back to the agent before `Finished`: whoever sees it can run again at once.
        self.give_back();
        let span = &self.span;
        span.record("turns", self.turns);
        span.record("input_tokens", self.usage.total_input_tokens());
        span.record("output_tokens", self.usage.output_tokens);
        span.record("termination", tracing::field::display(&termination));
        tracing::info!(%termination, turns = self.turns, "agent run finished");
        let outcome = RunOutcome {
            termination,
            final_text: std::mem::take(&mut self.final_text),
            turns: self.turns,
            usage: self.usage,
        };
        self.emit(AgentEvent::Finished(outcome)).await;
    }

    async fn run_loop(
        &mut self,
        client: &dyn LlmClient,
        tools: &ToolRegistry,
        input: String,
    ) -> Termination {
        self.agent.context.repair();
        self.agent.context.push(Message::user(input));
        let mut repeats = RepeatTracker::default();
        let mut failures = FailureTracker::default();
        let mut continuations = 0u32;
        let mut continuing = false;
        let mut final_call = false;
        loop {
            if self.cancel.is_cancelled() || (self.turns > 0 && self.agent.handle.stop_requested())
            {
                return Termination::Cancelled;
            }
            if let Some(stop) = turn::before_model_call(&self.agent.config, self.turns, &self.usage)
            {
                if matches!(stop, Termination::MaxTurns)
                    && self.agent.config.final_answer_at_max_turns
                    && !final_call
                {
                    final_call = true;
                } else {
                    return stop;
                }
            }
            self.turns += 1;
            let turn = self.turns;
            self.emit(AgentEvent::TurnStart { turn }).await;
            self.open_turn = Some(turn);
            if let Err(stop) = self.compact_if_needed().await {
                return stop;
            }
            let turn_span = tracing::info_span!("agent.turn", turn);
            let (response, mut early) = match self
                .model_turn(client, tools, turn, final_call)
                .instrument(turn_span)
                .await
            {
                Ok(r) => r,
                Err(stop) => return stop,
            };
            let sent = self.agent.context.len();
            self.agent.context.record_usage(&response.usage, sent);
            self.partial_text.clear();
            if !response.message.content.is_empty() {
                self.agent.context.push(response.message.clone());
            }
            let text = response.text();
            if continuing {
                self.final_text.push_str(&text);
            } else if !text.is_empty() || response.message.tool_uses().next().is_none() {
                self.final_text = text;
            }
            continuing = false;

            if final_call {
                self.answer_unrun(&response, "not run: the turn limit was reached");
                self.end_turn(turn, &response).await;
                return Termination::MaxTurns;
            }
            let continuations_left = continuations < self.agent.config.max_continuations;
            match turn::after_response(&response, continuations_left) {
                Next::Stop(termination) => {
                    self.answer_unrun(&response, "not run: the response was cut off or refused");
                    self.end_turn(turn, &response).await;
                    return termination;
                }
                Next::Resend => {
                    self.end_turn(turn, &response).await;
                    continue;
                }
                Next::Continue => {
                    continuations += 1;
                    if response.message.tool_uses().next().is_some() {
                        self.answer_unrun(
                            &response,
                            "not run: your response was cut off by the max_tokens limit before this \
                             call was complete; make smaller calls",
                        );
                    } else {
                        continuing = true;
                        self.agent.context.push(Message::user(
                            "Continue exactly where you stopped, without repeating anything.",
                        ));
                    }
                    self.end_turn(turn, &response).await;
                    continue;
                }
                Next::RunTools => {}
            }
            let step = self
                .run_tools(tools, &response, &mut early, &mut repeats)
                .await;
            let all_failed = failures.observe(&step.results);
            self.agent
                .context
                .push_tool_results(step.results.iter().map(ToolCallResult::to_block).collect());
            self.end_turn(turn, &response).await;
            if let Some(stop) = step.stop {
                return stop;
            }
            if self.cancel.is_cancelled() {
                return Termination::Cancelled;
            }
            if all_failed >= self.agent.config.max_tool_failure_turns {
                return Termination::ToolFailures { turns: all_failed };
            }
        }
    }

    /// Ends a turn: `TurnEnd` after the turn's last tool result, and the conversation as of
    /// this boundary published for snapshots.
    async fn end_turn(&mut self, turn: u32, response: &ModelResponse) {
        self.open_turn = None;
        self.emit(AgentEvent::TurnEnd {
            turn,
            stop_reason: response.stop_reason.clone(),
            usage: response.usage,
        })
        .await;
        self.publish();
    }

    /// Answers every tool call of a response that will not run, so the history stays valid.
    fn answer_unrun(&mut self, response: &ModelResponse, why: &str) {
        let results: Vec<ContentBlock> = response
            .message
            .tool_uses()
            .map(|(id, _, _)| ContentBlock::tool_result(id, why, true))
            .collect();
        if !results.is_empty() {
            self.agent.context.push_tool_results(results);
        }
    }

    async fn compact_if_needed(&mut self) -> Result<(), Termination> {
        if !self.agent.context.needs_compaction() {
            return Ok(());
        }
        let summarizer = self.agent.summarizer.clone();
        let result = tokio::select! {
            _ = self.cancel.cancelled() => return Err(Termination::Cancelled),
            r = self.agent.context.compact(summarizer.as_deref()) => r,
        };
        let report = match result {
            Ok(report) => report,
            // A failed summary is not fatal: compact again without one (elide, drop turns).
            Err(e) if summarizer.is_some() => {
                tracing::warn!(error = %e, "summarizing failed; compacting without a summary");
                self.agent
                    .context
                    .compact(None)
                    .await
                    .map_err(Termination::Error)?
            }
            Err(e) => return Err(Termination::Error(e)),
        };
        self.rewritten = true;
        if let Some(report) = report {
            self.emit(AgentEvent::Compacted {
                tokens_before: report.tokens_before,
                tokens_after: report.tokens_after,
            })
            .await;
        }
        Ok(())
    }

    fn build_request(&self, tools: &ToolRegistry, final_call: bool) -> ModelRequest {
        let config = &self.agent.config;
        ModelRequest {
            // Shared with the context, not copied: a turn costs the same at any length.
            messages: self.agent.context.shared_messages(),
            model: config.model.clone(),
            system: self.agent.context.system().map(str::to_owned),
            tools: tools.specs(),
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            thinking_budget: config.thinking_budget,
            // Tools stay defined (the history refers to them) but may not be called.
            tool_choice: if final_call {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            },
            ..ModelRequest::default()
        }
    }

    /// One model turn: sends the request, streams the response (forwarding deltas and
    /// starting read-only tools early), and re-sends from the start after a failure that
    /// broke the stream, while retries remain.
    async fn model_turn<'t>(
        &mut self,
        client: &dyn LlmClient,
        tools: &'t ToolRegistry,
        turn: u32,
        final_call: bool,
    ) -> Result<(ModelResponse, Early<'t>), Termination> {
        let mut attempt = 0u32;
        let mut compacted_for_overflow = false;
        loop {
            let mut request = self.build_request(tools, final_call);
            if let HookAction::Stop(reason) =
                self.agent.hooks.before_model_call(&mut request, turn).await
            {
                return Err(Termination::StoppedByHook { reason });
            }
            if cfg!(debug_assertions) {
                self.agent.context.debug_assert_valid();
            }
            let mut early = Early::new();
            let span = tracing::info_span!(
                "llm.call",
                turn,
                attempt,
                input_tokens = tracing::field::Empty,
                output_tokens = tracing::field::Empty
            );
            let result = self
                .stream_once(client, tools, &request, &mut early, final_call)
                .instrument(span.clone())
                .await;
            match result {
                Ok(response) => {
                    span.record("input_tokens", response.usage.total_input_tokens());
                    span.record("output_tokens", response.usage.output_tokens);
                    return Ok((response, early));
                }
                Err(AttemptError::Cancelled) => {
                    self.abandon_early(early, "cancelled").await;
                    return Err(Termination::Cancelled);
                }
                Err(AttemptError::Failed {
                    error,
                    content_seen,
                }) => {
                    // Read-only calls started early are dropped: they are safe to run again.
                    // Each was announced, so each is answered.
                    self.abandon_early(
                        early,
                        "not run: the model's response broke off; it is requested again",
                    )
                    .await;
                    self.partial_text.clear();
                    if matches!(error, LlmError::ContextOverflow(_)) && !compacted_for_overflow {
                        compacted_for_overflow = true;
                        self.compact_harder().await?;
                        continue;
                    }
                    // Clients retry failures before any content themselves; the agent re-sends
                    // the turn when a response broke after it started.
                    attempt += 1;
                    let delay = if content_seen && error.is_retryable() {
                        self.agent.config.retry.delay_for(attempt, &error)
                    } else {
                        None
                    };
                    let Some(delay) = delay else {
                        return Err(Termination::Error(Error::Llm(error)));
                    };
                    tracing::warn!(%error, attempt, ?delay, "model stream broke; re-sending the turn");
                    self.emit(AgentEvent::Retry {
                        attempt,
                        delay,
                        error: error.to_string(),
                    })
                    .await;
                    tokio::select! {
                        _ = self.cancel.cancelled() => return Err(Termination::Cancelled),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    async fn compact_harder(&mut self) -> Result<(), Termination> {
        let summarizer = self.agent.summarizer.clone();
        let result = tokio::select! {
            _ = self.cancel.cancelled() => return Err(Termination::Cancelled),
            r = self.agent.context.compact_harder(summarizer.as_deref()) => r,
        };
        let report = match result {
            Ok(report) => report,
            Err(_) if summarizer.is_some() => self
                .agent
                .context
                .compact_harder(None)
                .await
                .map_err(Termination::Error)?,
            Err(e) => return Err(Termination::Error(e)),
        };
        self.rewritten = true;
        self.emit(AgentEvent::Compacted {
            tokens_before: report.tokens_before,
            tokens_after: report.tokens_after,
        })
        .await;
        Ok(())
    }

    async fn stream_once<'t>(
        &mut self,
        client: &dyn LlmClient,
        tools: &'t ToolRegistry,
        request: &ModelRequest,
        early: &mut Early<'t>,
        final_call: bool,
    ) -> Result<ModelResponse, AttemptError> {
        let mut stream = client.stream(request);
        let mut assembler = StreamAssembler::with_limits(client.stream_limits());
        let mut content_seen = false;
        let mut usage = Usage::default();
        let mut ids: HashMap<usize, String> = HashMap::new();
        let start_early = self.agent.config.early_read_only_tools && !final_call;
        self.partial_text.clear();
        let outcome = loop {
            let next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break Err(AttemptError::Cancelled),
                Some(result) = early.running.next(), if !early.running.is_empty() => {
                    early.done.push(result);
                    continue;
                }
                next = stream.next() => next,
            };
            let event = match next {
                None => break Ok(()),
                Some(Err(error)) => {
                    break Err(AttemptError::Failed {
                        error,
                        content_seen,
                    })
                }
                Some(Ok(event)) => event,
            };
            if let LlmEvent::Retry {
                attempt,
                delay,
                error,
            } = &event
            {
                self.partial_text.clear();
                self.emit(AgentEvent::Retry {
                    attempt: *attempt,
                    delay: *delay,
                    error: error.to_string(),
                })
                .await;
                continue;
            }
            content_seen |= event.is_content();
            if let Err(error) = assembler.push(&event) {
                break Err(AttemptError::Failed {
                    error,
                    content_seen,
                });
            }
            match event {
                LlmEvent::TextDelta { text, .. } if !text.is_empty() => {
                    self.partial_text.push_str(&text);
                    self.emit(AgentEvent::TextDelta { text }).await;
                }
                LlmEvent::ThinkingDelta { thinking, .. } if !thinking.is_empty() => {
                    self.emit(AgentEvent::ThinkingDelta { text: thinking })
                        .await;
                }
                LlmEvent::ToolCallStart { index, id, name } => {
                    early.blocked |= !tools.is_read_only(&name);
                    if ids.len() < 4096 {
                        ids.insert(index, id.clone());
                    }
                    self.emit(AgentEvent::ToolCallStart { id, name }).await;
                }
                LlmEvent::ToolCallDelta {
                    index,
                    partial_json,
                } => {
                    if let Some(id) = ids.get(&index) {
                        self.emit(AgentEvent::ToolInputDelta {
                            id: id.clone(),
                            partial_json,
                        })
                        .await;
                    }
                }
                LlmEvent::BlockStop { index } if start_early && !early.blocked => {
                    if let Some((id, name, input)) = assembler.completed_tool_call(index) {
                        if tools.is_read_only(name) {
                            let call = ToolCall::new(id, name, input.clone());
                            self.start_early(tools, call, early).await;
                        }
                    }
                }
                LlmEvent::Usage(u) => usage = u,
                LlmEvent::MessageStop { .. } => break Ok(()),
                _ => {}
            }
        };
        self.usage += usage;
        outcome?;
        assembler.finish().map_err(|error| AttemptError::Failed {
            error,
            content_seen,
        })
    }

    /// Drops the calls started early (cancelling those still running) and answers each one
    /// that was announced with a `ToolCall`: its result if it finished, else `why`.
    async fn abandon_early(&mut self, mut early: Early<'_>, why: &str) {
        let finished = std::mem::take(&mut early.done);
        let started = std::mem::take(&mut early.started);
        drop(early.running);
        let mut progress = early.progress_rx;
        for (id, name) in started {
            let result = match finished.iter().find(|r| r.id == id) {
                Some(result) => result.clone(),
                None => ToolCallResult::new(id, name, why, true, std::time::Duration::ZERO),
            };
            self.emit_result(&result, &mut progress).await;
        }
    }

    async fn start_early<'t>(
        &mut self,
        tools: &'t ToolRegistry,
        call: ToolCall,
        early: &mut Early<'t>,
    ) {
        if self.agent.hooks.before_tool(&call).await != ToolDecision::Allow {
            return; // decided again, and answered, with the rest of the batch
        }
        self.emit(AgentEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        })
        .await;
        early.started.push((call.id.clone(), call.name.clone()));
        let opts = ExecOptions::new()
            .cancel(self.cancel.clone())
            .progress(early.progress_tx.clone());
        early.running.push(Box::pin(
            async move { tools.execute_one(call, &opts).await },
        ));
    }

    /// Runs a response's tool calls: invalid ones and those a hook denies are answered with
    /// errors, the rest run through the registry (together with those started early).
    /// Results come back in the model's order.
    ///
    /// Events: every call of the response that was not started early gets its `ToolCall`
    /// (also a call that is not run: denied, invalid, repeated) and exactly one `ToolResult`;
    /// a call's progress comes between the two, never after its result.
    async fn run_tools<'t>(
        &mut self,
        tools: &'t ToolRegistry,
        response: &ModelResponse,
        early: &mut Early<'t>,
        repeats: &mut RepeatTracker,
    ) -> ToolStep {
        let calls: Vec<ToolCall> = response
            .message
            .tool_uses()
            .map(|(id, name, input)| ToolCall::new(id, name, input.clone()))
            .collect();
        let mut results: Vec<Option<ToolCallResult>> = vec![None; calls.len()];
        let mut stop = None;

        let times = repeats.observe(&calls);
        if times >= self.agent.config.max_repeated_calls {
            let name = calls.first().map(|c| c.name.clone()).unwrap_or_default();
            let message = format!(
                "not run: you made exactly this call {times} times in a row with the same input; \
                 the result will not change"
            );
            let results = calls
                .iter()
                .map(|c| error_result(c, &message))
                .collect::<Vec<_>>();
            for (call, result) in calls.iter().zip(&results) {
                self.emit_call(call).await;
                self.emit_result(result, &mut early.progress_rx).await;
            }
            return ToolStep {
                results,
                stop: Some(Termination::RepeatedToolCall { name, times }),
            };
        }

        let mut to_run = Vec::new();
        let mut positions = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            if early.started.iter().any(|(id, _)| *id == call.id) {
                continue;
            }
            if let Some(invalid) = response.invalid_tool_calls.iter().find(|c| c.id == call.id) {
                let raw: String = invalid.raw_arguments.chars().take(200).collect();
                results[i] = Some(error_result(
                    call,
                    &format!(
                        "invalid arguments for tool \"{}\": {}; received: {raw}",
                        call.name, invalid.reason
                    ),
                ));
                continue;
            }
            match self.agent.hooks.before_tool(call).await {
                ToolDecision::Allow => {
                    positions.push(i);
                    to_run.push(call.clone());
                }
                ToolDecision::Deny(reason) => {
                    results[i] = Some(error_result(call, &format!("denied: {reason}")));
                }
                ToolDecision::Stop(reason) => {
                    results[i] = Some(error_result(call, &format!("not run: {reason}")));
                    stop.get_or_insert(Termination::StoppedByHook { reason });
                }
            }
        }
        // A stopping hook stops the whole batch: nothing else of it runs.
        if stop.is_some() {
            for (pos, call) in positions.iter().zip(&to_run) {
                results[*pos] = Some(error_result(call, "not run: the run was stopped"));
            }
            to_run.clear();
        }

        // Every call the agent answered itself (invalid arguments, denied, stopped) is
        // reported like a call the registry ran.
        for (call, result) in calls.iter().zip(&results) {
            if let Some(result) = result {
                self.emit_call(call).await;
                self.emit_result(result, &mut early.progress_rx).await;
            }
        }
        for call in &to_run {
            self.emit_call(call).await;
        }

        // Results of calls started early that already finished.
        let index_of = |id: &str| calls.iter().position(|c| c.id == id);
        for result in std::mem::take(&mut early.done) {
            self.emit_result(&result, &mut early.progress_rx).await;
            if let Some(i) = index_of(&result.id) {
                results[i] = Some(result);
            }
        }

        // Side-effecting calls never overlap read-only calls still running from the stream
        // (they may touch the same resource): those finish first.
        let side_effects = to_run.iter().any(|c| !tools.is_read_only(&c.name));
        while side_effects && !early.running.is_empty() {
            tokio::select! {
                biased;
                Some(progress) = early.progress_rx.recv() => self.emit_progress(progress).await,
                Some(result) = early.running.next() => {
                    self.emit_result(&result, &mut early.progress_rx).await;
                    if let Some(i) = index_of(&result.id) {
                        results[i] = Some(result);
                    }
                }
            }
        }
        let opts = ExecOptions::new()
            .cancel(self.cancel.clone())
            .progress(early.progress_tx.clone());
        let mut batch = std::pin::pin!(tools.execute_stream(to_run, opts));
        let mut batch_done = false;
        while !batch_done || !early.running.is_empty() {
            tokio::select! {
                biased;
                Some(progress) = early.progress_rx.recv() => self.emit_progress(progress).await,
                item = batch.next(), if !batch_done => match item {
                    Some((k, result)) => {
                        self.emit_result(&result, &mut early.progress_rx).await;
                        if let Some(&i) = positions.get(k) {
                            results[i] = Some(result);
                        }
                    }
                    None => batch_done = true,
                },
                Some(result) = early.running.next(), if !early.running.is_empty() => {
                    self.emit_result(&result, &mut early.progress_rx).await;
                    if let Some(i) = index_of(&result.id) {
                        results[i] = Some(result);
                    }
                }
            }
        }
        // Calls that never finished (the run was cancelled) are answered too, in history
        // and in events.
        let mut answered = Vec::with_capacity(calls.len());
        for (result, call) in results.into_iter().zip(&calls) {
            let result = match result {
                Some(result) => result,
                None => {
                    let result = error_result(call, "cancelled");
                    self.emit_result(&result, &mut early.progress_rx).await;
                    result
                }
            };
            answered.push(result);
        }
        ToolStep {
            results: answered,
            stop,
        }
    }

    async fn emit_call(&self, call: &ToolCall) {
        self.emit(AgentEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
        })
        .await;
    }

    /// Reports a tool's progress, unless its call is already answered (a tool that kept its
    /// context and reported after it returned).
    async fn emit_progress(&mut self, progress: ToolProgress) {
        if self.answered.contains(&progress.call_id) {
            return;
        }
        self.emit(AgentEvent::ToolProgress {
            id: progress.call_id,
            message: progress.message,
        })
        .await;
    }

    /// Reports a call's result, after any progress the tools reported before it: a tool
    /// that reports and returns at once has its progress shown first.
    async fn emit_result(
        &mut self,
        result: &ToolCallResult,
        progress: &mut mpsc::Receiver<ToolProgress>,
    ) {
        while let Ok(pending) = progress.try_recv() {
            self.emit_progress(pending).await;
        }
        if self.answered.len() < MAX_ANSWERED {
            self.answered.insert(result.id.clone());
        }
        self.emit(AgentEvent::ToolResult {
            id: result.id.clone(),
            name: result.name.clone(),
            content: turn::display_content(&result.content, self.agent.config.event_content_limit),
            is_error: result.is_error,
            duration: result.duration,
        })
        .await;
    }
}

/// The most answered call ids remembered per run to filter late progress; beyond it, late
/// progress of older calls is no longer filtered (memory stays bounded).
const MAX_ANSWERED: usize = 65_536;

struct ToolStep {
    results: Vec<ToolCallResult>,
    stop: Option<Termination>,
}

fn error_result(call: &ToolCall, message: &str) -> ToolCallResult {
    ToolCallResult::new(
        call.id.clone(),
        call.name.clone(),
        message,
        true,
        std::time::Duration::ZERO,
    )
}
