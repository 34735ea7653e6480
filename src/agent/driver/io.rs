//! What a run's driver keeps outside the machine: the model call in flight, the running tools,
//! the timer, and the channels they report through. It moves data; it decides nothing.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::error::LlmError;
use crate::provider::transport::RateLimiter;
use crate::provider::{LlmClient, ModelRequest};
use crate::tool::{ExecOptions, ToolCall, ToolCallResult, ToolProgress, ToolRegistry};
use crate::wire::LlmEvent;

use crate::agent::events::NestedEvent;

/// What one item of the model's stream says.
pub(crate) type ModelItem = Option<Result<LlmEvent, LlmError>>;

/// What runs outside the machine on its behalf, and the channels it reports through.
pub(crate) struct Io {
    pub(crate) progress_tx: mpsc::Sender<ToolProgress>,
    pub(crate) progress_rx: mpsc::Receiver<ToolProgress>,
    /// Sub-agents' events, from the calls that run agents; bounded, and their senders wait.
    pub(crate) nested_tx: mpsc::Sender<NestedEvent>,
    pub(crate) nested_rx: mpsc::Receiver<NestedEvent>,
    pub(crate) results_tx: mpsc::UnboundedSender<ToolCallResult>,
    pub(crate) results_rx: mpsc::UnboundedReceiver<ToolCallResult>,
    /// The model call in flight: it forwards the response's items into `model_rx`.
    pub(crate) model: Option<BoxFuture<'static, ()>>,
    pub(crate) model_rx: mpsc::Receiver<ModelItem>,
    /// Whether the machine still listens to `model_rx`.
    pub(crate) model_live: bool,
    /// Running tool batches; each sends its results into `results_tx`.
    pub(crate) tools: FuturesUnordered<BoxFuture<'static, ()>>,
}

impl Io {
    pub(crate) fn new() -> Self {
        let (progress_tx, progress_rx) = mpsc::channel(64);
        let (nested_tx, nested_rx) = mpsc::channel(64);
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        let (_, model_rx) = mpsc::channel(1);
        Io {
            progress_tx,
            progress_rx,
            nested_tx,
            nested_rx,
            results_tx,
            results_rx,
            model: None,
            model_rx,
            model_live: false,
            tools: FuturesUnordered::new(),
        }
    }

    /// Starts a model call whose items arrive on a fresh channel, so nothing of an
    /// abandoned response ever does. With a limiter (and the context's token count), the call
    /// first waits for its turn, and the limiter hears the response's rate-limit figures;
    /// stopping the call ends the wait.
    pub(crate) fn call_model(
        &mut self,
        client: Arc<dyn LlmClient>,
        request: ModelRequest,
        span: tracing::Span,
        pace: Option<(RateLimiter, usize)>,
    ) {
        let (tx, rx) = mpsc::channel::<ModelItem>(1);
        self.model_rx = rx;
        self.model_live = true;
        self.model = Some(Box::pin(
            async move {
                if let Some((limiter, context_tokens)) = &pace {
                    let tokens = *context_tokens as u64 + u64::from(request.max_tokens);
                    limiter.acquire(tokens).await;
                }
                let mut stream = client.stream(&request);
                while let Some(item) = stream.next().await {
                    if let Some((limiter, _)) = &pace {
                        limiter.observe_response(&item, tokio::time::Instant::now().into_std());
                    }
                    if tx.send(Some(item)).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(None).await;
            }
            .instrument(span),
        ));
    }

    pub(crate) fn stop_model(&mut self) {
        self.model = None;
        self.model_live = false;
    }

    pub(crate) fn run_tools(
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
