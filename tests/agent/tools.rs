//! The tool layer through the public API: typed tools, the registry's argument checks, and
//! batch execution (ordering, concurrency rules, limits, failures, cancellation).
//!
//! Time is tokio's paused clock: sleeps decide the order in which calls finish, never real
//! timing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_loop::error::ConfigError;
use agent_loop::tool::schemars::JsonSchema;
use agent_loop::tool::{
    Access, CancellationToken, Concurrency, ExecOptions, FnTool, ToolCall, ToolCallResult,
    ToolProgress,
};
use agent_loop::{async_trait, Error, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// A probe tool that records when each call runs.

#[derive(Debug, Deserialize, JsonSchema)]
struct ProbeInput {
    /// Sleep this long, in milliseconds.
    ms: u64,
    /// "exclusive", or absent for shared.
    #[serde(default)]
    mode: Option<String>,
    /// A key for keyed concurrency.
    #[serde(default)]
    key: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    call: usize,
    start: Duration,
    end: Duration,
}

#[derive(Default)]
struct ProbeLog {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    spans: Mutex<Vec<Span>>,
}

struct Probe {
    base: Instant,
    log: Arc<ProbeLog>,
}

impl Probe {
    fn new() -> (Probe, Arc<ProbeLog>) {
        let log = Arc::new(ProbeLog::default());
        (
            Probe {
                base: Instant::now(),
                log: Arc::clone(&log),
            },
            log,
        )
    }
}

#[async_trait]
impl Tool for Probe {
    type Input = ProbeInput;

    fn name(&self) -> &str {
        "probe"
    }

    fn description(&self) -> &str {
        "Sleeps and records when it ran."
    }

    fn concurrency(&self, input: &ProbeInput) -> Concurrency {
        match (&input.mode, &input.key) {
            (Some(mode), _) if mode == "exclusive" => Concurrency::Exclusive,
            (_, Some(key)) => Concurrency::Keyed(key.clone()),
            _ => Concurrency::Shared,
        }
    }

    async fn call(&self, input: ProbeInput, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let now = self.log.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.log.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let start = self.base.elapsed();
        tokio::time::sleep(Duration::from_millis(input.ms)).await;
        let end = self.base.elapsed();
        self.log.in_flight.fetch_sub(1, Ordering::SeqCst);
        let call = ctx.call_id().parse().unwrap_or(usize::MAX);
        self.log
            .spans
            .lock()
            .unwrap()
            .push(Span { call, start, end });
        Ok(ToolOutput::text(format!("slept {}", input.ms)))
    }
}

fn probe_call(index: usize, input: Value) -> ToolCall {
    ToolCall::new(index.to_string(), "probe", input)
}

fn span_of(log: &ProbeLog, call: usize) -> Span {
    *log.spans
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.call == call)
        .unwrap_or_else(|| panic!("call {call} did not run"))
}

fn overlap(a: Span, b: Span) -> bool {
    a.start < b.end && b.start < a.end
}

// ---------------------------------------------------------------------------------------------
// A calculator with a typed input, for the argument checks.

#[derive(Debug, Deserialize, JsonSchema)]
struct CalcInput {
    /// The left operand.
    x: f64,
    /// The right operand.
    y: f64,
}

struct Calc;

#[async_trait]
impl Tool for Calc {
    type Input = CalcInput;

    fn name(&self) -> &str {
        "calc"
    }

    fn description(&self) -> &str {
        "Adds x and y."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, input: CalcInput, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(json!({"sum": input.x + input.y})))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoInput {
    text: String,
}

fn echo() -> impl Tool {
    FnTool::new(
        "echo",
        "Echoes the text.",
        |input: EchoInput, _ctx| async move { Ok(input.text) },
    )
}

fn registry_with_calc() -> ToolRegistry {
    ToolRegistry::new()
        .with(Calc)
        .unwrap()
        .with(echo())
        .unwrap()
}

async fn run_one(registry: &ToolRegistry, call: ToolCall) -> ToolCallResult {
    registry.execute_one(call, &ExecOptions::default()).await
}

// ---------------------------------------------------------------------------------------------
// Ordering and concurrency.

#[tokio::test(start_paused = true)]
async fn results_come_back_in_the_models_order_whatever_order_calls_finish() {
    let (probe, log) = Probe::new();
    let registry = ToolRegistry::new().with(probe).unwrap();
    let calls = vec![
        probe_call(0, json!({"ms": 300})),
        probe_call(1, json!({"ms": 100})),
        probe_call(2, json!({"ms": 200})),
    ];

    let results = registry
        .execute_batch(calls.clone(), &ExecOptions::default())
        .await;
    let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2"]);
    assert_eq!(results[0].content, "slept 300");
    assert_eq!(results[1].content, "slept 100");
    assert!(results.iter().all(|r| !r.is_error && r.name == "probe"));
    assert_eq!(results[0].duration, Duration::from_millis(300));
    assert_eq!(results[1].duration, Duration::from_millis(100));
    // All three ran at once.
    assert_eq!(log.max_in_flight.load(Ordering::SeqCst), 3);

    // The stream yields in completion order, with each call's index.
    let streamed: Vec<(usize, ToolCallResult)> = registry
        .execute_stream(calls, ExecOptions::default())
        .collect()
        .await;
    let order: Vec<usize> = streamed.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [1, 2, 0]);
    assert_eq!(streamed[0].1.id, "1");
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_concurrency_calls_run_at_once() {
    let (probe, log) = Probe::new();
    let registry = ToolRegistry::new().max_concurrency(2).with(probe).unwrap();
    let calls = (0..7)
        .map(|i| probe_call(i, json!({"ms": 10 * (i as u64 % 3 + 1)})))
        .collect();
    let results = registry.execute_batch(calls, &ExecOptions::default()).await;
    assert_eq!(results.len(), 7);
    assert!(results.iter().all(|r| !r.is_error));
    assert_eq!(log.max_in_flight.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn exclusive_calls_run_alone_and_in_order() {
    let (probe, log) = Probe::new();
    let registry = ToolRegistry::new().with(probe).unwrap();
    let calls = vec![
        probe_call(0, json!({"ms": 50})),
        probe_call(1, json!({"ms": 200})),
        probe_call(2, json!({"ms": 10, "mode": "exclusive"})),
        probe_call(3, json!({"ms": 10})),
        probe_call(4, json!({"ms": 30, "key": "k"})),
        probe_call(5, json!({"ms": 10, "mode": "exclusive"})),
        probe_call(6, json!({"ms": 10, "mode": "exclusive"})),
        probe_call(7, json!({"ms": 5})),
    ];
    let results = registry.execute_batch(calls, &ExecOptions::default()).await;
    assert!(results.iter().all(|r| !r.is_error), "{results:?}");

    for exclusive in [2, 5, 6] {
        let x = span_of(&log, exclusive);
        for other in (0..8).filter(|&i| i != exclusive) {
            let o = span_of(&log, other);
            assert!(
                !overlap(x, o),
                "exclusive call {exclusive} overlaps call {other}"
            );
            if other < exclusive {
                assert!(
                    o.end <= x.start,
                    "call {other} ends after exclusive {exclusive} starts"
                );
            } else {
                assert!(
                    o.start >= x.end,
                    "call {other} starts before exclusive {exclusive} ends"
                );
            }
        }
    }
    // Shared neighbours still overlap each other.
    assert!(overlap(span_of(&log, 0), span_of(&log, 1)));
    assert!(overlap(span_of(&log, 3), span_of(&log, 4)));
}

#[tokio::test(start_paused = true)]
async fn same_key_calls_run_one_after_another_while_different_keys_overlap() {
    let (probe, log) = Probe::new();
    let registry = ToolRegistry::new().with(probe).unwrap();
    let calls = vec![
        probe_call(0, json!({"ms": 100, "key": "a.txt"})),
        probe_call(1, json!({"ms": 100, "key": "b.txt"})),
        probe_call(2, json!({"ms": 10, "key": "a.txt"})),
        probe_call(3, json!({"ms": 50})),
        probe_call(4, json!({"ms": 10, "key": "a.txt"})),
    ];
    let results = registry.execute_batch(calls, &ExecOptions::default()).await;
    assert!(results.iter().all(|r| !r.is_error));

    let (a0, b1, a2, s3, a4) = (
        span_of(&log, 0),
        span_of(&log, 1),
        span_of(&log, 2),
        span_of(&log, 3),
        span_of(&log, 4),
    );
    // Same key: one after another, in the model's order (the shorter later call waits).
    assert!(a0.end <= a2.start);
    assert!(a2.end <= a4.start);
    // Different keys and shared calls run beside them.
    assert!(overlap(a0, b1));
    assert!(overlap(a0, s3));
}

// ---------------------------------------------------------------------------------------------
// Failures become results; siblings still run.

#[tokio::test(start_paused = true)]
async fn a_panicking_tool_becomes_an_error_result_and_siblings_still_run() {
    #[derive(Deserialize, JsonSchema)]
    struct Empty {}
    let boom = FnTool::new("boom", "Panics.", |_: Empty, _ctx| async move {
        if true {
            panic!("kaboom");
        }
        Ok("unreachable")
    });
    let (probe, _log) = Probe::new();
    let registry = ToolRegistry::new().with(boom).unwrap().with(probe).unwrap();
    let results = registry
        .execute_batch(
            vec![
                probe_call(0, json!({"ms": 10})),
                ToolCall::new("1", "boom", json!({})),
                probe_call(2, json!({"ms": 20})),
            ],
            &ExecOptions::default(),
        )
        .await;
    assert_eq!(results.len(), 3);
    assert_eq!(results[1].content, r#"tool "boom" panicked: kaboom"#);
    assert!(results[1].is_error);
    assert_eq!(results[0].content, "slept 10");
    assert_eq!(results[2].content, "slept 20");
}

#[tokio::test(start_paused = true)]
async fn a_tool_error_is_passed_to_the_model_as_is() {
    #[derive(Deserialize, JsonSchema)]
    struct Path {
        path: String,
    }
    let read = FnTool::new("read", "Reads a file.", |input: Path, _ctx| async move {
        Err::<String, _>(ToolError::new(format!(
            "no such file: {}; list the directory first",
            input.path
        )))
    });
    let registry = ToolRegistry::new().with(read).unwrap();
    let result = run_one(&registry, ToolCall::new("c", "read", json!({"path": "x"}))).await;
    assert!(result.is_error);
    assert_eq!(result.content, "no such file: x; list the directory first");
}

#[tokio::test(start_paused = true)]
async fn calls_over_their_time_limit_are_stopped_with_the_limit_in_the_message() {
    #[derive(Deserialize, JsonSchema)]
    struct Secs {
        secs: u64,
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    let slow = FnTool::new("slow", "Sleeps.", move |input: Secs, _ctx| {
        let guard = DropFlag(Arc::clone(&flag));
        async move {
            let _guard = guard;
            tokio::time::sleep(Duration::from_secs(input.secs)).await;
            Ok("woke")
        }
    })
    .timeout(Duration::from_secs(2));
    let (probe, _log) = Probe::new();
    let registry = ToolRegistry::new()
        .default_timeout(Duration::from_millis(500))
        .with(slow)
        .unwrap()
        .with(probe)
        .unwrap();

    let results = registry
        .execute_batch(
            vec![
                ToolCall::new("a", "slow", json!({"secs": 60})),
                ToolCall::new("b", "slow", json!({"secs": 1})),
                probe_call(2, json!({"ms": 100})),
                probe_call(3, json!({"ms": 900})),
            ],
            &ExecOptions::default(),
        )
        .await;
    // The tool's own limit.
    assert_eq!(
        results[0].content,
        r#"tool "slow" timed out after 2s and was stopped"#
    );
    assert!(results[0].is_error);
    assert_eq!(results[0].duration, Duration::from_secs(2));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the timed-out future was dropped"
    );
    assert_eq!(results[1].content, "woke");
    // The registry's default for tools without one.
    assert_eq!(results[2].content, "slept 100");
    assert_eq!(
        results[3].content,
        r#"tool "probe" timed out after 500ms and was stopped"#
    );
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Cancellation.

#[tokio::test(start_paused = true)]
async fn cancelling_mid_batch_stops_running_tools_and_answers_every_call_once() {
    #[derive(Deserialize, JsonSchema)]
    struct Secs {
        secs: u64,
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&dropped);
    let slow = FnTool::new("slow", "Sleeps.", move |input: Secs, ctx: ToolContext| {
        let counter = Arc::clone(&counter);
        async move {
            let _guard = DropCount(counter);
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(input.secs)) => Ok("woke".to_owned()),
                () = ctx.cancellation().cancelled() => Ok("saw cancellation".to_owned()),
            }
        }
    })
    .concurrency(Concurrency::Keyed("one-at-a-time".into()));
    let registry = ToolRegistry::new().with(slow).unwrap().with(Calc).unwrap();

    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        canceller.cancel();
    });
    let calls = vec![
        ToolCall::new("a", "slow", json!({"secs": 1})),
        ToolCall::new("b", "slow", json!({"secs": 60})), // running at 5 s
        ToolCall::new("c", "slow", json!({"secs": 1})),  // waiting for b's key
        ToolCall::new("d", "calc", json!({"x": 1, "y": 2})),
        ToolCall::new("e", "nope", json!({})),
    ];
    let started = Instant::now();
    let results = registry
        .execute_batch(calls, &ExecOptions::new().cancel(cancel))
        .await;
    assert_eq!(started.elapsed(), Duration::from_secs(5));

    let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
    assert_eq!(results[0].content, "woke");
    assert_eq!(results[3].content, r#"{"sum":3.0}"#);
    assert!(results[4].content.starts_with("unknown tool"));
    for cancelled in &results[1..3] {
        assert_eq!(cancelled.content, "cancelled");
        assert!(cancelled.is_error);
    }
    assert_eq!(results[1].duration, Duration::from_secs(4));
    assert_eq!(results[2].duration, Duration::ZERO);
    // a finished, b was dropped while running; c never started.
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_batch_cancelled_before_it_starts_answers_every_call() {
    let (probe, log) = Probe::new();
    let registry = ToolRegistry::new().with(probe).unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let results = registry
        .execute_batch(
            (0..3).map(|i| probe_call(i, json!({"ms": 1}))).collect(),
            &ExecOptions::new().cancel(cancel),
        )
        .await;
    assert_eq!(results.len(), 3);
    assert!(results
        .iter()
        .all(|r| r.is_error && r.content == "cancelled"));
    assert!(log.spans.lock().unwrap().is_empty());
}

struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Output size limit and progress.

#[tokio::test(start_paused = true)]
async fn long_outputs_keep_head_and_tail_with_a_marker() {
    #[derive(Deserialize, JsonSchema)]
    struct Len {
        n: usize,
    }
    let big = FnTool::new("big", "Prints a lot.", |input: Len, _ctx| async move {
        Ok(format!("{}{}{}", "<", "é".repeat(input.n), ">"))
    });
    let registry = ToolRegistry::new().max_output_bytes(11).with(big).unwrap();

    let short = run_one(&registry, ToolCall::new("1", "big", json!({"n": 4}))).await;
    assert_eq!(short.content, "<éééé>");

    // 1 + 2000 + 1 bytes; 5 bytes of head budget cut back to "<éé", 6 of tail to "éé>".
    let long = run_one(&registry, ToolCall::new("2", "big", json!({"n": 1000}))).await;
    assert!(!long.is_error);
    assert_eq!(long.content, "<éé\n[... 1992 bytes removed ...]\néé>");
}

#[tokio::test(start_paused = true)]
async fn progress_notes_reach_the_host_with_the_call_id() {
    #[derive(Deserialize, JsonSchema)]
    struct Empty {}
    let chatty = FnTool::new(
        "chatty",
        "Reports progress.",
        |_: Empty, ctx: ToolContext| async move {
            ctx.report_progress("half way");
            Ok("done")
        },
    );
    let registry = ToolRegistry::new().with(chatty).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let result = registry
        .execute_one(
            ToolCall::new("call_9", "chatty", json!({})),
            &ExecOptions::new().progress(tx),
        )
        .await;
    assert_eq!(result.content, "done");
    assert_eq!(
        rx.recv().await,
        Some(ToolProgress::new("call_9", "half way"))
    );
}

// ---------------------------------------------------------------------------------------------
// Argument checks at the registry boundary: exact messages.

#[tokio::test(start_paused = true)]
async fn arguments_failing_the_schema_name_the_field_and_the_expectation() {
    let registry = registry_with_calc();
    let wrong_type = run_one(
        &registry,
        ToolCall::new("1", "calc", json!({"x": "abc", "y": 1})),
    )
    .await;
    assert!(wrong_type.is_error);
    assert_eq!(
        wrong_type.content,
        r#"invalid arguments for tool "calc": at /x: "abc" is not of type "number""#
    );

    let missing = run_one(&registry, ToolCall::new("2", "calc", json!({"x": 1}))).await;
    assert_eq!(
        missing.content,
        r#"invalid arguments for tool "calc": "y" is a required property"#
    );

    let not_object = run_one(&registry, ToolCall::new("3", "calc", json!([1, 2]))).await;
    assert_eq!(
        not_object.content,
        r#"invalid arguments for tool "calc": [1,2] is not of type "object""#
    );
}

#[tokio::test(start_paused = true)]
async fn arguments_that_do_not_deserialize_name_the_field() {
    // The schema (overridden, as for runtime-defined tools) lets through what serde refuses.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        level: u8,
    }
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Config {
        items: Vec<Inner>,
    }
    let loose = FnTool::new("configure", "Sets levels.", |_: Config, _ctx| async move {
        Ok("ok")
    })
    .input_schema(json!({"type": "object"}));
    let registry = ToolRegistry::new().with(loose).unwrap();

    let result = run_one(
        &registry,
        ToolCall::new(
            "1",
            "configure",
            json!({"items": [{"level": 1}, {"level": 300}]}),
        ),
    )
    .await;
    assert!(result.is_error);
    assert_eq!(
        result.content,
        "invalid arguments for tool \"configure\": at /items/1/level: \
         invalid value: integer `300`, expected u8"
    );

    let missing = run_one(
        &registry,
        ToolCall::new("2", "configure", json!({"items": [{}]})),
    )
    .await;
    assert_eq!(
        missing.content,
        "invalid arguments for tool \"configure\": at /items/0: missing field `level`"
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_tools_list_the_available_ones() {
    let registry = registry_with_calc();
    let result = run_one(&registry, ToolCall::new("1", "calculator", json!({}))).await;
    assert!(result.is_error);
    assert_eq!(
        result.content,
        r#"unknown tool "calculator"; available tools: "calc", "echo""#
    );
    let empty = ToolRegistry::new();
    let result = run_one(&empty, ToolCall::new("1", "calc", json!({}))).await;
    assert_eq!(
        result.content,
        r#"unknown tool "calc"; no tools are available"#
    );
}

#[tokio::test(start_paused = true)]
async fn raw_arguments_that_are_not_json_say_so() {
    let registry = registry_with_calc();
    let call = ToolCall::from_raw("1", "calc", r#"{"x": 1, "y": "#);
    assert!(call.has_invalid_json());
    let result = run_one(&registry, call).await;
    assert!(result.is_error);
    assert_eq!(
        result.content,
        r#"invalid arguments for tool "calc": not valid JSON (EOF while parsing a value at line 1 column 14)"#
    );

    let ok = run_one(
        &registry,
        ToolCall::from_raw("2", "calc", r#"{"x": 1, "y": 2}"#),
    )
    .await;
    assert_eq!(ok.content, r#"{"sum":3.0}"#);
    // Empty argument text (sent by some servers for tools without parameters) is `{}`.
    let empty = run_one(&registry, ToolCall::from_raw("3", "calc", "")).await;
    assert_eq!(
        empty.content,
        r#"invalid arguments for tool "calc": "x" is a required property; "y" is a required property"#
    );
}

// ---------------------------------------------------------------------------------------------
// Registration and the registry's view of its tools.

#[test]
fn registration_rejects_duplicates_bad_names_and_bad_schemas() {
    let mut registry = ToolRegistry::new();
    registry.register(Calc).unwrap();
    let duplicate = registry.register(Calc).unwrap_err();
    assert!(
        matches!(&duplicate, Error::Config(ConfigError::Tool { tool, .. }) if tool == "calc"),
        "{duplicate:?}"
    );
    assert_eq!(
        duplicate.to_string(),
        r#"configuration error: a tool named "calc" is already registered; tool names must be unique"#
    );

    #[derive(Deserialize, JsonSchema)]
    struct Empty {}
    let bad_name = FnTool::new("read file", "x", |_: Empty, _ctx| async move { Ok("") });
    let err = registry.register(bad_name).unwrap_err();
    assert_eq!(
        err.to_string(),
        "configuration error: invalid tool name \"read file\": names must match \
         ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, '_' and '-', at most 64)"
    );
    let too_long = FnTool::new("a".repeat(65), "x", |_: Empty, _ctx| async move { Ok("") });
    assert!(matches!(registry.register(too_long), Err(Error::Config(_))));

    let not_object = FnTool::new("s", "x", |_: String, _ctx| async move { Ok("") });
    let err = registry.register(not_object).unwrap_err();
    assert_eq!(
        err.to_string(),
        "configuration error: tool \"s\": the input schema must describe a JSON object \
         (\"type\": \"object\"), found type \"string\"; both providers require an object \
         input. Use a struct as the tool's Input, or wrap the value in a struct field \
         (struct Input { value: YourType })"
    );

    let invalid = FnTool::new("v", "x", |_: Value, _ctx| async move { Ok("") })
        .input_schema(json!({"type": "object", "properties": {"n": {"type": "integr"}}}));
    let err = registry.register(invalid).unwrap_err();
    assert!(matches!(err, Error::Config(_)));
    assert!(
        err.to_string()
            .starts_with("configuration error: tool \"v\": invalid input schema: "),
        "{err}"
    );

    // Failed registrations leave nothing behind.
    assert_eq!(registry.len(), 1);
}

#[test]
fn the_registry_lists_its_tools_in_registration_order() {
    let registry = ToolRegistry::new()
        .with(echo())
        .unwrap()
        .with(Calc)
        .unwrap();
    assert_eq!(registry.len(), 2);
    assert!(!registry.is_empty());
    assert!(ToolRegistry::new().is_empty());
    assert_eq!(registry.names().collect::<Vec<_>>(), ["echo", "calc"]);
    let specs = registry.specs();
    assert_eq!(specs[0].name, "echo");
    assert_eq!(specs[1].name, "calc");
    assert_eq!(specs[1].description, "Adds x and y.");
    assert!(registry.is_read_only("calc"));
    assert!(!registry.is_read_only("echo"));
    assert!(!registry.is_read_only("missing"));
    // `read_only` and `Access` are one fact, seen two ways.
    assert_eq!(registry.access("calc"), Some(Access::ReadOnly));
    assert_eq!(registry.access("echo"), Some(Access::SideEffects));
    assert_eq!(registry.access("missing"), None);
    assert_eq!(registry.spec("calc").map(|s| s.name.as_str()), Some("calc"));
    assert!(registry.spec("missing").is_none());
    assert_eq!(registry.timeout("missing"), None);

    // A clone shares the tools; registering on it leaves the original alone.
    let mut clone = registry.clone();
    clone
        .register(FnTool::new("extra", "x", |_: EchoInput, _ctx| async move {
            Ok("")
        }))
        .unwrap();
    assert_eq!(clone.len(), 3);
    assert_eq!(registry.len(), 2);
}

#[test]
fn the_derived_schema_is_a_provider_ready_object_schema() {
    /// Searches files.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct SearchInput {
        /// The pattern to look for.
        pattern: String,
        /// At most this many matches.
        limit: Option<u32>,
        /// Where to search.
        scope: Scope,
    }
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Scope {
        Workspace,
        OpenFiles,
    }
    let search = FnTool::new("search", "Searches.", |_: SearchInput, _ctx| async move {
        Ok("")
    });
    assert_eq!(
        Tool::input_schema(&search),
        json!({
            "description": "Searches files.",
            "type": "object",
            "properties": {
                "pattern": {"description": "The pattern to look for.", "type": "string"},
                "limit": {
                    "description": "At most this many matches.",
                    "type": ["integer", "null"],
                    "format": "uint32",
                    "minimum": 0
                },
                "scope": {"description": "Where to search.", "$ref": "#/$defs/Scope"}
            },
            "required": ["pattern", "scope"],
            "$defs": {"Scope": {"type": "string", "enum": ["workspace", "open_files"]}}
        })
    );
    // The registry compiles it, $refs included, and checks arguments against it.
    let registry = ToolRegistry::new().with(search).unwrap();
    assert_eq!(registry.specs()[0].input_schema["type"], "object");
}

#[tokio::test(start_paused = true)]
async fn the_derived_schema_is_enforced_including_refs() {
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct In {
        scope: Scope,
    }
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum Scope {
        A,
        B,
    }
    let t = FnTool::new("t", "x", |_: In, _ctx| async move { Ok("ok") });
    let registry = ToolRegistry::new().with(t).unwrap();
    let result = run_one(&registry, ToolCall::new("1", "t", json!({"scope": "C"}))).await;
    assert_eq!(
        result.content,
        r#"invalid arguments for tool "t": at /scope: "C" is not one of "A" or "B""#
    );
}

#[tokio::test]
async fn tools_can_be_called_directly_with_a_test_context() {
    let ctx = ToolContext::new("test-1");
    assert_eq!(ctx.call_id(), "test-1");
    assert!(!ctx.is_cancelled());
    let out = Calc.call(CalcInput { x: 1.5, y: 2.0 }, ctx).await.unwrap();
    assert_eq!(out.to_text(), r#"{"sum":3.5}"#);
}

#[test]
fn results_turn_into_tool_result_blocks() {
    let result = ToolCallResult::new("id1", "calc", "3", false, Duration::from_millis(5));
    assert_eq!(
        result.to_block(),
        agent_loop::ContentBlock::tool_result("id1", "3", false)
    );
}

#[test]
fn the_public_types_can_cross_threads() {
    fn send_sync<T: Send + Sync + std::fmt::Debug + 'static>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<ToolRegistry>();
    send_sync::<ToolCall>();
    send_sync::<ToolCallResult>();
    send_sync::<ExecOptions>();
    send_sync::<ToolContext>();
    send_sync::<ToolOutput>();
    send_sync::<ToolProgress>();
    send_sync::<Concurrency>();

    let registry = registry_with_calc();
    let opts = ExecOptions::default();
    send(&registry.execute_batch(Vec::new(), &opts));
    send(&registry.execute_one(ToolCall::new("1", "calc", json!({})), &opts));
    send(&registry.execute_stream(Vec::new(), ExecOptions::default()));
}

#[tokio::test(start_paused = true)]
async fn a_panic_while_preparing_a_call_is_contained_too() {
    struct PanicsInConcurrency;
    #[async_trait]
    impl Tool for PanicsInConcurrency {
        type Input = EchoInput;
        fn name(&self) -> &str {
            "fragile"
        }
        fn description(&self) -> &str {
            "Panics while deciding its concurrency."
        }
        fn concurrency(&self, _input: &EchoInput) -> Concurrency {
            panic!("no lock for you")
        }
        async fn call(&self, _: EchoInput, _: ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("unreachable"))
        }
    }
    let registry = registry_with_calc().with(PanicsInConcurrency).unwrap();
    let results = registry
        .execute_batch(
            vec![
                ToolCall::new("1", "fragile", json!({"text": "x"})),
                ToolCall::new("2", "echo", json!({"text": "still here"})),
            ],
            &ExecOptions::default(),
        )
        .await;
    assert_eq!(
        results[0].content,
        r#"tool "fragile" panicked: no lock for you"#
    );
    assert!(results[0].is_error);
    assert_eq!(results[1].content, "still here");
}

// ---------------------------------------------------------------------------------------------
// Enum inputs: a top-level union, sent flattened, checked per variant.

/// What to do with a file; serde's internally tagged enum, whose derived schema is a
/// top-level `oneOf` that Anthropic refuses.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
enum FileOp {
    /// Reads a file.
    Read { path: String },
    /// Writes a file.
    Write { path: String, content: String },
    /// Deletes files.
    Delete { paths: Vec<String> },
}

fn file_tool() -> impl Tool {
    FnTool::new("files", "Works on files.", |op: FileOp, _ctx| async move {
        Ok::<_, ToolError>(match op {
            FileOp::Read { path } => format!("read {path}"),
            FileOp::Write { path, content } => format!("wrote {} bytes to {path}", content.len()),
            FileOp::Delete { paths } => format!("deleted {}", paths.join(", ")),
        })
    })
}

fn assert_no_top_level_union(schema: &Value) {
    for keyword in ["oneOf", "anyOf", "allOf"] {
        assert!(schema.get(keyword).is_none(), "{keyword} in {schema:#}");
    }
    assert_eq!(schema["type"], "object", "{schema:#}");
}

#[tokio::test]
async fn an_enum_input_is_sent_as_one_object_and_checked_against_its_variant() {
    let registry = ToolRegistry::new().with(file_tool()).unwrap();
    let schema = &registry.specs()[0].input_schema;
    assert_no_top_level_union(schema);
    assert_eq!(
        schema["properties"]["op"],
        json!({"type": "string", "enum": ["read", "write", "delete"]})
    );
    assert_eq!(schema["required"], json!(["op"]));

    let results = registry
        .execute_batch(
            vec![
                ToolCall::new(
                    "1",
                    "files",
                    json!({"op": "write", "path": "a", "content": "hi"}),
                ),
                ToolCall::new("2", "files", json!({"op": "delete", "paths": ["a", "b"]})),
                // The fields of `write` under the tag of `read`.
                ToolCall::new("3", "files", json!({"op": "read", "content": "hi"})),
                ToolCall::new("4", "files", json!({"op": "rename", "path": "a"})),
            ],
            &ExecOptions::default(),
        )
        .await;
    let outcome: Vec<(&str, bool)> = results
        .iter()
        .map(|r| (r.content.as_str(), r.is_error))
        .collect();
    assert_eq!(
        outcome,
        [
            ("wrote 2 bytes to a", false),
            ("deleted a, b", false),
            (
                r#"invalid arguments for tool "files": with "op" = "read": "path" is a required property"#,
                true
            ),
            (
                r#"invalid arguments for tool "files": at /op: "rename" is not one of "read", "write", "delete""#,
                true
            ),
        ]
    );
}

#[tokio::test]
async fn an_agent_with_an_enum_tool_talks_to_both_wire_formats() {
    use agent_loop::testing::MockServer;
    use agent_loop::{AnthropicClient, OpenAiClient};

    let server = MockServer::start().await;
    let anthropic = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("m");
    run_enum_tool_agent(&server, anthropic, "input_schema").await;
    let openai = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("m");
    run_enum_tool_agent(&server, openai, "parameters").await;
    assert_eq!(server.history_violations(), Vec::<String>::new());
}

/// One run of an agent with [`file_tool`] against the mock server: a valid call and one whose
/// fields do not fit its variant. `schema_key` is where the request carries a tool's schema.
async fn run_enum_tool_agent(
    server: &agent_loop::testing::MockServer,
    client: impl agent_loop::LlmClient + 'static,
    schema_key: &str,
) {
    use agent_loop::testing::ScriptedResponse;
    use agent_loop::{Agent, AgentEvent};

    let before = server.requests().len();
    server.push(
        ScriptedResponse::tool_call("c1", "files", json!({"op": "read", "path": "a"}))
            .then_tool_call("c2", "files", json!({"op": "delete", "path": "a"})),
    );
    server.push(ScriptedResponse::text("done"));
    let mut agent = Agent::builder(client).tool(file_tool()).build().unwrap();
    let events: Vec<AgentEvent> = agent.run("go").collect().await;
    // Results are reported as they finish; sort them by call id.
    let mut results: Vec<(String, String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } => Some((id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    results.sort();
    assert_eq!(
        results,
        [
            ("c1".to_owned(), "read a".to_owned(), false),
            (
                "c2".to_owned(),
                r#"invalid arguments for tool "files": with "op" = "delete": "paths" is a required property"#
                    .to_owned(),
                true
            ),
        ],
        "{schema_key}: {events:#?}"
    );
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => {
            assert!(outcome.termination.is_completed(), "{outcome:?}");
            assert_eq!(outcome.final_text, "done");
        }
        other => panic!("{schema_key}: {other:?}"),
    }
    // The mock refuses what the real APIs refuse, so both requests being answered means the
    // schema was acceptable; check it as sent, too.
    let requests = &server.requests()[before..];
    assert_eq!(requests.len(), 2, "{schema_key}");
    for request in requests {
        let tool = &request.body["tools"][0];
        let schema = tool
            .get(schema_key)
            .unwrap_or(&tool["function"][schema_key]);
        assert_no_top_level_union(schema);
    }
}

#[tokio::test]
async fn the_mock_server_refuses_tool_schemas_the_real_apis_refuse() {
    use agent_loop::provider::ModelRequest;
    use agent_loop::testing::{MockServer, ScriptedResponse};
    use agent_loop::tool::ToolSpec;
    use agent_loop::{AnthropicClient, LlmClient, LlmError, Message, OpenAiClient};

    let server = MockServer::start().await;
    server.push(ScriptedResponse::text("kept for later"));
    let request = |schema: Value| {
        let mut request = ModelRequest::new(vec![Message::user("hi")]);
        request.tools = vec![ToolSpec {
            name: "t".into(),
            description: "x".into(),
            input_schema: schema,
        }];
        request
    };
    let api_error = |items: Vec<Result<agent_loop::LlmEvent, LlmError>>| match items.as_slice() {
        [Err(LlmError::Api(api))] => (api.status, api.message.clone(), api.code.clone()),
        other => panic!("expected one API error, got {other:?}"),
    };

    let anthropic = AnthropicClient::new("k")
        .base_url(server.anthropic_base_url())
        .model("m");
    let union = request(json!({"oneOf": [{"type": "object"}, {"type": "object"}]}));
    let items = anthropic.stream(&union).collect().await;
    assert_eq!(
        api_error(items),
        (
            400,
            "tools.0.custom.input_schema: input_schema does not support oneOf, allOf, or anyOf \
             at the top level"
                .to_owned(),
            None
        )
    );
    let string = request(json!({"type": "string"}));
    let items = anthropic.stream(&string).collect().await;
    assert_eq!(
        api_error(items).1,
        "tools.0.custom.input_schema.type: Input should be 'object'"
    );

    let openai = OpenAiClient::new("k")
        .base_url(server.openai_base_url())
        .model("m");
    let items = openai.stream(&string).collect().await;
    assert_eq!(
        api_error(items),
        (
            400,
            "Invalid schema for function 't': schema must be a JSON Schema of 'type: \"object\"', \
             got 'type: \"string\"'."
                .to_owned(),
            Some("invalid_function_parameters".to_owned())
        )
    );

    // Refused requests are recorded but do not use up the script.
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
    let fine = request(json!({"type": "object", "properties": {"a": {"anyOf": []}}}));
    let items: Vec<_> = anthropic.stream(&fine).collect().await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(server.remaining(), 0);
}

// ---------------------------------------------------------------------------------------------
// `?` in tools.

#[derive(Debug, Deserialize, JsonSchema)]
struct FallibleInput {
    /// Which failure to produce: "io", "json", "string" or "str".
    what: String,
}

/// A tool whose failures all come through `?`.
struct Fallible;

fn load_notes() -> std::io::Result<String> {
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "notes.txt does not exist; create it first",
    ))
}

fn check_name(what: &str) -> Result<(), String> {
    Err(format!("{what:?} is not a known failure"))
}

#[async_trait]
impl Tool for Fallible {
    type Input = FallibleInput;

    fn name(&self) -> &str {
        "fallible"
    }

    fn description(&self) -> &str {
        "Fails in the way it is told to."
    }

    async fn call(&self, input: FallibleInput, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        match input.what.as_str() {
            "io" => Ok(ToolOutput::text(load_notes()?)),
            "json" => Ok(ToolOutput::json(serde_json::from_str::<Value>("{\"a\":")?)),
            "str" => Err("told to fail".into()),
            _ => {
                check_name(&input.what)?;
                Ok(ToolOutput::text("unreachable"))
            }
        }
    }
}

#[tokio::test]
async fn tools_can_use_the_question_mark_and_the_model_reads_the_error() {
    let registry = ToolRegistry::new().with(Fallible).unwrap();
    let calls = ["io", "json", "string", "str"]
        .iter()
        .enumerate()
        .map(|(i, what)| ToolCall::new(i.to_string(), "fallible", json!({"what": what})))
        .collect();
    let results = registry.execute_batch(calls, &ExecOptions::default()).await;
    let outcome: Vec<(&str, bool)> = results
        .iter()
        .map(|r| (r.content.as_str(), r.is_error))
        .collect();
    assert_eq!(
        outcome,
        [
            ("notes.txt does not exist; create it first", true),
            ("EOF while parsing a value at line 1 column 5", true),
            (r#""string" is not a known failure"#, true),
            ("told to fail", true),
        ]
    );

    // The converted errors keep their source.
    use std::error::Error as _;
    let call = |what: &str| {
        Fallible.call(
            FallibleInput { what: what.into() },
            ToolContext::new("direct"),
        )
    };
    let io = call("io").await.unwrap_err();
    let source = io.source().and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(source.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    let json = call("json").await.unwrap_err();
    let source = json
        .source()
        .and_then(|s| s.downcast_ref::<serde_json::Error>());
    assert!(source.is_some_and(serde_json::Error::is_eof), "{json:?}");
    assert!(call("string").await.unwrap_err().source().is_none());
    // And a ToolError is still an Error of the crate.
    let error: Error = io.into();
    assert!(matches!(error, Error::Tool(_)));
}

#[tokio::test]
async fn the_idempotency_key_is_the_call_id_scoped_by_the_driver() {
    #[derive(Deserialize, JsonSchema)]
    struct Empty {}
    let key = FnTool::new(
        "key",
        "Says its idempotency key.",
        |_: Empty, ctx: ToolContext| async move { Ok::<_, ToolError>(ctx.idempotency_key()) },
    );
    let registry = ToolRegistry::new().with(key).unwrap();
    let call = || ToolCall::new("call_7", "key", json!({}));
    let plain = registry.execute_one(call(), &ExecOptions::new()).await;
    assert_eq!(plain.content, "call_7");
    let scoped = registry
        .execute_one(call(), &ExecOptions::new().idempotency_scope("session-1"))
        .await;
    assert_eq!(scoped.content, "session-1/call_7");
    assert_eq!(
        ToolContext::new("c")
            .idempotency_scope("s")
            .idempotency_key(),
        "s/c"
    );
}
