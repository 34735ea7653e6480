//! Running a batch of prepared tool calls: the planner's order, the concurrency limit,
//! timeouts, panics, cancellation and the output cap.
//!
//! Every call is one future in a `FuturesUnordered` polled by the stream itself (no spawned
//! tasks, so dropping the stream or cancelling stops every tool at once). A call first waits
//! for the calls [`plan`] says it must follow, then for a permit of the batch's semaphore,
//! then runs.
//!
//! Calls that failed before running (unknown tool, bad arguments) are answered at once.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::call::{ExecOptions, Extension, Prepared, ToolCall, ToolCallResult};
use super::plan::plan;
use super::text::{cut, quote};
use super::{ToolContext, ToolOutput};

/// The registry's limits that apply to a whole batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// At most this many calls run at once (0 counts as 1).
    pub(crate) max_concurrency: u32,
    /// The longest result text.
    pub(crate) max_output_bytes: usize,
}

type CallFuture<'a> = BoxFuture<'a, (usize, ToolCallResult)>;

/// The stream's state between two results.
struct Batch<'a> {
    /// Results ready to be yielded before polling the running calls again.
    ready: VecDeque<(usize, ToolCallResult)>,
    running: FuturesUnordered<CallFuture<'a>>,
    /// Per call: whether its result has been yielded (or queued in `ready`).
    answered: Vec<bool>,
    /// Per call: id and name, to answer calls stopped by cancellation.
    calls: Vec<(String, String)>,
    /// Per call: when it started running.
    started: Arc<Vec<OnceLock<Instant>>>,
    cancel: CancellationToken,
}

enum Next {
    Result((usize, ToolCallResult)),
    Cancelled,
    Done,
}

/// Runs the calls, each with what the registry made of it (an `Err` is answered at once with
/// that text), and yields each result with the call's index as it arrives.
pub(crate) fn run<'a>(
    calls: Vec<(ToolCall, Result<Prepared<'a>, String>)>,
    limits: Limits,
    opts: ExecOptions,
) -> impl Stream<Item = (usize, ToolCallResult)> + Send + 'a {
    let count = calls.len();
    let semaphore = Arc::new(Semaphore::new(limits.max_concurrency.max(1) as usize));
    let done: Vec<CancellationToken> = (0..count).map(|_| CancellationToken::new()).collect();
    let started: Arc<Vec<OnceLock<Instant>>> =
        Arc::new((0..count).map(|_| OnceLock::new()).collect());
    let schedules: Vec<_> = calls
        .iter()
        .map(|(_, prepared)| prepared.as_ref().ok().map(|p| p.schedule.clone()))
        .collect();
    let plan = plan(&schedules);

    let mut batch = Batch {
        ready: VecDeque::new(),
        running: FuturesUnordered::new(),
        answered: vec![false; count],
        calls: Vec::with_capacity(count),
        started: Arc::clone(&started),
        cancel: opts.cancel.clone(),
    };

    for (index, (call, prepared)) in calls.into_iter().enumerate() {
        batch.calls.push((call.id.clone(), call.name.clone()));
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(message) => {
                let content = truncate_middle(message, limits.max_output_bytes);
                batch.answered[index] = true;
                batch.ready.push_back((
                    index,
                    ToolCallResult::new(call.id, call.name, content, true, Duration::ZERO),
                ));
                continue;
            }
        };
        let call_run = CallRun {
            index,
            call,
            limit: prepared.timeout,
            prepared,
            max_output_bytes: limits.max_output_bytes,
            deps: plan
                .deps(index)
                .iter()
                .filter_map(|&d| done.get(d).cloned())
                .collect(),
            done: done.get(index).cloned().unwrap_or_default(),
            semaphore: Arc::clone(&semaphore),
            started: Arc::clone(&started),
            cancel: opts.cancel.child_token(),
            progress: opts.progress.clone(),
            idempotency_scope: opts.idempotency_scope.clone(),
            extension: opts.extension.clone(),
            trace_content: opts.trace_content,
        };
        batch.running.push(call_run.run().boxed());
    }

    futures::stream::unfold(batch, |mut batch| async move {
        if let Some(item) = batch.ready.pop_front() {
            return Some((item, batch));
        }
        if batch.running.is_empty() {
            return None;
        }
        let next = tokio::select! {
            biased;
            () = batch.cancel.cancelled() => Next::Cancelled,
            item = batch.running.next() => item.map_or(Next::Done, Next::Result),
        };
        match next {
            Next::Result((index, result)) => {
                if let Some(answered) = batch.answered.get_mut(index) {
                    *answered = true;
                }
                Some(((index, result), batch))
            }
            Next::Done => None,
            Next::Cancelled => {
                // Dropping the futures stops the running tools.
                batch.running = FuturesUnordered::new();
                for (index, (id, name)) in batch.calls.iter().enumerate() {
                    if batch.answered.get(index).copied().unwrap_or(true) {
                        continue;
                    }
                    let duration = batch
                        .started
                        .get(index)
                        .and_then(OnceLock::get)
                        .map_or(Duration::ZERO, Instant::elapsed);
                    batch.ready.push_back((
                        index,
                        ToolCallResult::cancelled(id.clone(), name.clone(), duration),
                    ));
                }
                batch.answered.iter_mut().for_each(|a| *a = true);
                let item = batch.ready.pop_front()?;
                Some((item, batch))
            }
        }
    })
}

/// One runnable call and what it needs to run.
struct CallRun<'a> {
    index: usize,
    call: ToolCall,
    prepared: Prepared<'a>,
    limit: Duration,
    max_output_bytes: usize,
    /// Cancelled when the calls this one must follow have finished.
    deps: Vec<CancellationToken>,
    /// Cancelled when this call has finished.
    done: CancellationToken,
    semaphore: Arc<Semaphore>,
    started: Arc<Vec<OnceLock<Instant>>>,
    cancel: CancellationToken,
    progress: Option<tokio::sync::mpsc::Sender<super::ToolProgress>>,
    idempotency_scope: Option<Arc<str>>,
    extension: Option<Extension>,
    trace_content: bool,
}

impl CallRun<'_> {
    /// Runs the call inside an `execute_tool` span (OpenTelemetry's GenAI conventions: named
    /// `execute_tool {tool}`, kind internal) that records its duration and outcome, and with
    /// [`ExecOptions::trace_content`] its arguments and result. A tool that runs an agent
    /// runs it inside this span, so that agent's `invoke_agent` span is its child.
    async fn run(self) -> (usize, ToolCallResult) {
        use tracing::field::Empty;
        use tracing::Instrument;
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = format!("execute_tool {}", self.call.name),
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %self.call.name,
            gen_ai.tool.call.id = %self.call.id,
            gen_ai.tool.type = "function",
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            "error.type" = Empty,
            otel.status_code = Empty,
            duration_ms = Empty,
            is_error = Empty,
        );
        let content = self.trace_content;
        if content {
            span.record("gen_ai.tool.call.arguments", self.call.input.to_string());
        }
        let (index, result, error) = self.run_inner().instrument(span.clone()).await;
        span.record("duration_ms", result.duration.as_secs_f64() * 1000.0);
        span.record("is_error", result.is_error);
        if let Some(error) = error {
            span.record("error.type", error);
            span.record("otel.status_code", "error");
        } else if content {
            span.record("gen_ai.tool.call.result", result.content.as_str());
        }
        (index, result)
    }

    /// Runs the call; the error kind is `error.type` on its span: `tool_error` (the tool
    /// returned an error), `panic`, `timeout`.
    async fn run_inner(self) -> (usize, ToolCallResult, Option<&'static str>) {
        for dep in &self.deps {
            dep.cancelled().await;
        }
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self.semaphore.acquire().await.ok();
        let start = Instant::now();
        if let Some(slot) = self.started.get(self.index) {
            let _ = slot.set(start);
        }

        let mut ctx =
            ToolContext::new(self.call.id.clone()).cancellation_token(self.cancel.clone());
        if let Some(progress) = self.progress {
            ctx = ctx.progress_sender(progress);
        }
        if let Some(scope) = self.idempotency_scope {
            ctx = ctx.idempotency_scope(scope);
        }
        if let Some(Extension(value)) = self.extension {
            ctx = ctx.with_extension(value);
        }
        if let Some(reply) = self.call.reply() {
            ctx = ctx.with_reply(reply.clone());
        }
        let run = self.prepared.run;
        let future = AssertUnwindSafe(async move { run(ctx).await }).catch_unwind();
        let name = quote(&self.call.name);
        let mut images = Vec::new();
        let mut json = None;
        let mut question = None;
        let (content, error) = match tokio::time::timeout(self.limit, future).await {
            Ok(Ok(Ok(ToolOutput::Json(value)))) => {
                let text = value.to_string();
                json = Some(Box::new(value));
                (text, None)
            }
            Ok(Ok(Ok(output))) => {
                let (text, output_images) = output.into_parts();
                images = output_images;
                (text, None)
            }
            // A question pauses the run: not a failure of the tool.
            Ok(Ok(Err(error))) if error.question().is_some() => {
                question = error.question().cloned();
                (error.model_text(), None)
            }
            Ok(Ok(Err(error))) => (error.model_text(), Some("tool_error")),
            Ok(Err(panic)) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(tool = %self.call.name, call_id = %self.call.id, "tool panicked: {message}");
                (format!("tool {name} panicked: {message}"), Some("panic"))
            }
            Err(_elapsed) => {
                self.cancel.cancel();
                let text = format!(
                    "tool {name} timed out after {:?} and was stopped",
                    self.limit
                );
                (text, Some("timeout"))
            }
        };
        let duration = start.elapsed();
        self.done.cancel();
        // Output cut to the limit is text: its structure is gone.
        if content.len() > self.max_output_bytes {
            json = None;
        }
        let content = truncate_middle(content, self.max_output_bytes);
        let is_error = error.is_some() || question.is_some();
        let mut result =
            ToolCallResult::new(self.call.id, self.call.name, content, is_error, duration)
                .with_images(images);
        result.json = json;
        if let Some(question) = question {
            result = result.with_question(question);
        }
        (self.index, result, error)
    }
}

/// The text of a panic's payload, cut to 500 bytes.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    };
    cut(message, 500)
}

/// Keeps the first and last `max / 2` bytes (on char boundaries) of a text longer than `max`,
/// with a marker saying how many bytes were removed between them.
pub(crate) fn truncate_middle(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut head_end = max / 2;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - (max - max / 2);
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let head = text.get(..head_end).unwrap_or_default();
    let tail = text.get(tail_start..).unwrap_or_default();
    let removed = text.len() - head.len() - tail.len();
    format!("{head}\n[... {removed} bytes removed ...]\n{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolRegistry;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate_middle("abc".into(), 3), "abc");
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        let text = format!("{}{}{}", "a".repeat(10), "b".repeat(100), "c".repeat(10));
        assert_eq!(
            truncate_middle(text, 20),
            format!(
                "{}\n[... 100 bytes removed ...]\n{}",
                "a".repeat(10),
                "c".repeat(10)
            )
        );
    }

    #[test]
    fn cuts_fall_on_char_boundaries() {
        // 'é' is two bytes; every cut position must round away from the middle of a char.
        for max in 0..12 {
            let text = "ééééééééé".to_owned();
            let out = truncate_middle(text.clone(), max);
            if text.len() > max {
                let (head, rest) = out.split_once("\n[... ").unwrap();
                let (marker, tail) = rest.split_once(" ...]\n").unwrap();
                let removed: usize = marker.trim_end_matches(" bytes removed").parse().unwrap();
                assert_eq!(head.len() + removed + tail.len(), text.len());
                assert!(head.len() + tail.len() <= max);
            }
        }
    }

    /// Collects the `duration_ms` recorded on `execute_tool` spans (the only spans it enables).
    struct DurationRecorder(Arc<std::sync::Mutex<Vec<f64>>>);

    struct DurationField<'a>(&'a std::sync::Mutex<Vec<f64>>);

    impl tracing::field::Visit for DurationField<'_> {
        fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
            if field.name() == "duration_ms" {
                self.0.lock().unwrap().push(value);
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for DurationRecorder {
        fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
            metadata.name() == "execute_tool"
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
            values.record(&mut DurationField(&self.0));
        }
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    // The clock is tokio's paused test clock: the tool's sleep moves it exactly 250 ms.
    #[tokio::test(start_paused = true)]
    async fn the_tool_span_records_the_duration_in_milliseconds() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Empty {}
        let wait = crate::tool::FnTool::new("wait", "Waits.", |_: Empty, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            Ok("done")
        });
        let registry = ToolRegistry::new().with(wait).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let _guard = tracing::subscriber::set_default(DurationRecorder(Arc::clone(&seen)));
        let call = ToolCall::new("1", "wait", serde_json::json!({}));
        let result = registry.execute_one(call, &ExecOptions::new()).await;
        assert_eq!(result.content, "done");
        assert_eq!(result.duration, Duration::from_millis(250));
        assert_eq!(*seen.lock().unwrap(), [250.0]);
    }
}
