//! Agent loop overhead: what the loop itself costs per turn when the model and the tools take
//! no time, and how many whole runs one process serves at once over real HTTP.
//!
//! - `agent/scripted`: runs of 10, 100 and 1,000 turns (a trivial tool call per turn, then a
//!   final text) against the in-process [`ScriptedClient`]. Throughput is in turns, so
//!   criterion's time per element is the per-turn overhead. Beside it, the same runs against
//!   `ReplayClient`, a bench-local client that replays prebuilt events and records nothing:
//!   the difference is the test double's own work (it clones and validates every request's
//!   history), the rest is the agent's.
//! - `agent/concurrent`: 1,000 agent runs at once in one process, each a real
//!   [`AnthropicClient`] over loopback HTTP against one [`MockServer`], two turns each (a tool
//!   call, then text). Throughput is in runs. Before measuring, a counting global allocator
//!   records the peak heap in use during one batch of 1,000 runs; the bench prints
//!   (peak − baseline) / 1,000 as the peak memory per run.
//!
//! - `agent/nested`: the same replayed runs of 10, 100 and 1,000 turns, run directly and as a
//!   sub-agent (the agent as a tool of a lead that calls it once): the difference is what
//!   carrying a sub-agent's events up costs (a bounded channel, the lead's machine, its event
//!   stream), per turn of the sub-agent.
//!
//! Run: `cargo bench -p agent-loop-benches --bench agent`; results go to BENCHMARKS.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use agent_loop::context::TiktokenCounter;
use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, AnthropicClient, LlmClient, LlmEvent, StopReason, ToolError};
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// A counting allocator: current and peak bytes in use, for the memory-per-run figure.

struct Counting;

/// Bytes allocated minus bytes freed while counting was on (negative when memory allocated
/// before is freed): only differences mean anything.
static CURRENT: AtomicIsize = AtomicIsize::new(0);
/// The highest `CURRENT` since the last [`Counting::reset_peak`].
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// Counting is on only while memory is measured, so the timed benches pay one relaxed load
/// per allocation, not two contended atomic updates.
static COUNTING: AtomicBool = AtomicBool::new(false);

impl Counting {
    fn add(size: usize) {
        if !COUNTING.load(Ordering::Relaxed) {
            return;
        }
        let size = size as isize;
        let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(size: usize) {
        if COUNTING.load(Ordering::Relaxed) {
            CURRENT.fetch_sub(size as isize, Ordering::Relaxed);
        }
    }

    /// Turns counting on or off.
    fn enable(on: bool) {
        COUNTING.store(on, Ordering::Relaxed);
    }

    /// The current count; resets the peak to it.
    fn reset_peak() -> isize {
        let now = CURRENT.load(Ordering::Relaxed);
        PEAK.store(now, Ordering::Relaxed);
        now
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are only
// bookkeeping beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        Counting::sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                Counting::add(new_size - layout.size());
            } else {
                Counting::sub(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// ---------------------------------------------------------------------------------------------
// The agent under test.

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct Step {
    /// Which step this is.
    n: u64,
}

/// A tool that does nothing worth measuring.
fn step_tool() -> impl agent_loop::Tool {
    FnTool::new("step", "Records a step.", |input: Step, _ctx| async move {
        Ok::<_, ToolError>(format!("step {} done", input.n))
    })
}

fn build_agent(client: impl LlmClient + 'static, max_turns: u32) -> Agent {
    Agent::builder(client)
        .system("You are a careful agent. Call the step tool until you are done.")
        .tool(step_tool())
        .max_turns(max_turns)
        .build()
        .expect("valid agent")
}

/// `turns - 1` tool calls with distinct inputs (a repeated call would stop the run), then a
/// final text; each response reports a plausible usage.
fn script(turns: usize) -> Vec<ScriptedResponse> {
    (1..turns)
        .map(|i| {
            ScriptedResponse::tool_call(format!("call_{i:05}"), "step", json!({"n": i}))
                .usage_tokens(400 + 30 * i as u64, 20)
        })
        .chain(std::iter::once(
            ScriptedResponse::text("All steps are done.").usage_tokens(400 + 30 * turns as u64, 8),
        ))
        .collect()
}

/// Drives a run to its end; returns the number of turns and whether it completed, or `None`
/// when the stream ended without [`AgentEvent::Finished`].
///
/// Every caller wraps this in [`tokio::task::unconstrained`]: `Agent::run`'s stream ends early,
/// without its last events (`Finished` included), when tokio's cooperative budget runs out
/// just as the run's driver completes (see BENCHMARKS.md, "Agent stream loses its last events").
async fn drain(agent: &mut Agent, input: &str) -> Option<(u32, bool)> {
    let mut events = agent.run(input);
    let mut outcome = None;
    while let Some(event) = events.next().await {
        if let AgentEvent::Finished(o) = event {
            outcome = Some(o);
        }
    }
    outcome.map(|o| (o.turns, o.termination.is_completed()))
}

/// [`drain`] outside tokio's cooperative budget.
async fn run_to_end(agent: &mut Agent, input: &str) -> Option<(u32, bool)> {
    tokio::task::unconstrained(drain(agent, input)).await
}

#[path = "../replay.rs"]
mod replay;
use replay::ReplayClient;
#[path = "../loopback.rs"]
mod loopback;
use loopback::LoopbackServer;

// ---------------------------------------------------------------------------------------------
// (a) per-turn overhead, in process.

fn scripted(c: &mut Criterion) {
    TiktokenCounter::warm_up();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // Check once that the runs do what the figures claim.
    for turns in [10usize, 100, 1_000] {
        let client = ScriptedClient::new(script(turns));
        let mut agent = build_agent(client.clone(), turns as u32 + 1);
        let ran = rt.block_on(run_to_end(&mut agent, "Go."));
        assert_eq!(ran, Some((turns as u32, true)), "scripted run");
        assert!(client.history_violations().is_empty());
        let mut agent = build_agent(ReplayClient::new(turns), turns as u32 + 1);
        let ran = rt.block_on(run_to_end(&mut agent, "Go."));
        assert_eq!(ran, Some((turns as u32, true)), "replay run");
    }

    // The known bug the wrapper works around, shown while it lasts: a plain `block_on` of
    // the same runs, inside tokio's cooperative budget.
    for turns in [10usize, 100, 1_000] {
        let mut agent = build_agent(ScriptedClient::new(script(turns)), turns as u32 + 1);
        let plain = rt.block_on(drain(&mut agent, "Go."));
        let seen = agent.messages().len();
        println!(
            "agent/scripted {turns} turns without unconstrained: {}",
            match plain {
                Some(_) => "Finished arrived".to_owned(),
                None => format!(
                    "the stream ended WITHOUT Finished (the history holds {seen} messages: \
                     the run itself completed, its last events were lost)"
                ),
            }
        );
    }

    // Over HTTP: an OpenAiClient against a loopback server that only skips what it reads, so
    // the figures are the client's and the loop's (the encoded history included).
    let server = rt.block_on(LoopbackServer::start());
    let http = agent_loop::OpenAiClient::new("k")
        .base_url(server.base_url())
        .model("m");
    server.push_run(10);
    let mut agent = build_agent(http.clone(), 11);
    assert_eq!(
        rt.block_on(run_to_end(&mut agent, "Go.")),
        Some((10, true)),
        "http run"
    );

    let mut group = c.benchmark_group("agent/scripted");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for turns in [10usize, 100, 1_000] {
        group.throughput(Throughput::Elements(turns as u64));
        bench_runs(&mut group, &rt, "http_client", turns, |turns| {
            server.push_run(turns);
            build_agent(http.clone(), turns as u32 + 1)
        });
        bench_runs(&mut group, &rt, "scripted_client", turns, |turns| {
            build_agent(ScriptedClient::new(script(turns)), turns as u32 + 1)
        });
        bench_runs(&mut group, &rt, "replay_client", turns, |turns| {
            build_agent(ReplayClient::new(turns), turns as u32 + 1)
        });
    }
    group.finish();
}

/// Times whole runs of `turns` turns of the agents `make` builds (outside the timing).
fn bench_runs(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    id: &str,
    turns: usize,
    make: impl Fn(usize) -> Agent,
) {
    group.bench_with_input(BenchmarkId::new(id, turns), &turns, |b, &turns| {
        b.iter_batched(
            || make(turns),
            |mut agent| {
                black_box(rt.block_on(run_to_end(&mut agent, "Go.")));
                agent
            },
            BatchSize::PerIteration,
        )
    });
}

// ---------------------------------------------------------------------------------------------
// (b) 1,000 concurrent runs over loopback HTTP.

const RUNS: usize = 1_000;

/// A server scripted for `RUNS` two-turn runs. The script is one FIFO shared by every
/// connection, so which run gets which answer depends on arrival order; alternating tool calls
/// and texts, every run still ends on its first text, so the batch takes exactly `2 * RUNS`
/// responses (a run may take more turns and another fewer). Call ids are unique per response,
/// so no run sees the same id twice.
async fn scripted_server() -> MockServer {
    let server = MockServer::start().await;
    for i in 0..RUNS {
        server.push(ScriptedResponse::tool_call(
            format!("toolu_{i:05}"),
            "step",
            json!({"n": i}),
        ));
        server.push(ScriptedResponse::text("Done."));
    }
    server
}

/// Runs `RUNS` agents at once against `server`; returns how many completed and the turns.
async fn concurrent_runs(client: &AnthropicClient, server: &MockServer) -> (usize, u64) {
    let client = client.clone().base_url(server.anthropic_base_url());
    let tasks: Vec<_> = (0..RUNS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut agent = build_agent(client, 20);
                run_to_end(&mut agent, "Go.").await
            })
        })
        .collect();
    let mut completed = 0;
    let mut turns = 0;
    for task in tasks {
        if let Ok(Some((t, ok))) = task.await {
            completed += usize::from(ok);
            turns += u64::from(t);
        }
    }
    (completed, turns)
}

/// CPU time (user + system) this process has used, from `/proc/self/stat` (Linux; `None`
/// elsewhere). Clock ticks are taken as 100 Hz, the Linux default.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The host's `TcpExt` counters `ListenOverflows` and `TCPSynRetrans` from
/// `/proc/net/netstat` (Linux; `None` elsewhere): connections the mock server's accept queue
/// dropped, and the SYNs clients had to send again (each after a 1 s timeout).
fn tcp_drops() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        if !names.starts_with("TcpExt:") {
            continue;
        }
        let pairs: Vec<(&str, &str)> = names
            .split_whitespace()
            .zip(values.split_whitespace())
            .collect();
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == key)
                .and_then(|(_, v)| v.parse::<u64>().ok())
        };
        return Some((get("ListenOverflows")?, get("TCPSynRetrans")?));
    }
    None
}

fn concurrent(c: &mut Criterion) {
    TiktokenCounter::warm_up();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = AnthropicClient::new("bench-key")
        .model("claude-sonnet-4-5")
        .idle_timeout(Duration::from_secs(30));

    // Peak memory per run, three batches; and a check that every run completed.
    Counting::enable(true);
    for batch in 1..=3 {
        let server = rt.block_on(scripted_server());
        // Let the previous batch's server and connections finish closing before the baseline.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
        let baseline = Counting::reset_peak();
        let cpu_before = process_cpu();
        let drops_before = tcp_drops();
        let start = Instant::now();
        let (completed, turns) = rt.block_on(concurrent_runs(&client, &server));
        let elapsed = start.elapsed();
        let cores_busy = match (cpu_before, process_cpu()) {
            (Some(a), Some(b)) => format!("{:.2}", (b - a).as_secs_f64() / elapsed.as_secs_f64()),
            _ => "unknown".to_owned(),
        };
        let drops = match (drops_before, tcp_drops()) {
            (Some(a), Some(b)) => format!(
                "{} accept-queue overflows and {} SYN retransmits (1 s each) on the host",
                b.0 - a.0,
                b.1 - a.1
            ),
            _ => "TCP drop counters unavailable".to_owned(),
        };
        let peak = PEAK.load(Ordering::Relaxed);
        let after = CURRENT.load(Ordering::Relaxed);
        let requests = server.requests().len();
        let violations = server.history_violations().len();
        drop(server);
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
        let server_log = after - CURRENT.load(Ordering::Relaxed);
        println!(
            "agent/concurrent memory batch {batch}: {completed}/{RUNS} runs completed, \
             {turns} turns, {requests} requests, {violations} history violations, \
             {:.0} runs/s, {cores_busy} cores busy on average; peak heap above baseline {:.1} MiB = {:.1} KiB per run, of which \
             at most {:.1} KiB per run is the mock server's request log (freed with the server); \
             {drops}",
            RUNS as f64 / elapsed.as_secs_f64(),
            (peak - baseline) as f64 / (1 << 20) as f64,
            (peak - baseline) as f64 / RUNS as f64 / 1024.0,
            server_log as f64 / RUNS as f64 / 1024.0,
        );
        assert_eq!(completed, RUNS, "every run completes");
        assert_eq!(violations, 0, "every history is valid");
    }
    Counting::enable(false);

    let mut group = c.benchmark_group("agent/concurrent");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(RUNS as u64));
    group.bench_function("1000_runs_anthropic_http", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let server = rt.block_on(scripted_server());
                let start = Instant::now();
                black_box(rt.block_on(concurrent_runs(&client, &server)));
                total += start.elapsed();
                drop(server);
            }
            total
        })
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// (c) One response with very many tool calls, through the sans-IO machine.

/// A machine, and the inputs of a whole run whose first response holds `calls` calls of a
/// read-only tool, each answered, then a final text: the machine alone (no client, no tools,
/// no runtime).
fn wide_response(
    calls: usize,
) -> (
    agent_loop::agent::machine::AgentMachine,
    Vec<agent_loop::agent::machine::Input>,
) {
    use agent_loop::agent::machine::Input;
    use agent_loop::agent::ToolDecision;
    use agent_loop::tool::ToolCallResult;
    let look = FnTool::new("look", "Looks.", |_: serde_json::Value, _ctx| async move {
        Ok::<_, ToolError>("unused")
    })
    .read_only(true);
    let m = Agent::builder(ScriptedClient::new([]))
        .tool(look)
        .build_machine()
        .expect("valid machine");
    let event = Input::ModelEvent;
    let mut inputs = Vec::with_capacity(4 * calls + 4);
    for index in 0..calls {
        let id = format!("c{index}");
        let name = "look".to_owned();
        inputs.push(event(LlmEvent::ToolCallStart { index, id, name }));
        let partial_json = "{}".to_owned();
        inputs.push(event(LlmEvent::ToolCallDelta {
            index,
            partial_json,
        }));
        inputs.push(event(LlmEvent::BlockStop { index }));
    }
    let stop = |stop_reason| event(LlmEvent::MessageStop { stop_reason });
    inputs.push(stop(StopReason::ToolUse));
    inputs.push(Input::Approved(vec![ToolDecision::Allow; calls]));
    for index in 0..calls {
        let id = format!("c{index}");
        let result = ToolCallResult::new(id, "look", "seen", false, Duration::ZERO);
        inputs.push(Input::ToolDone(result));
    }
    let text = "Done.".to_owned();
    inputs.push(event(LlmEvent::TextDelta { index: 0, text }));
    inputs.push(stop(StopReason::EndTurn));
    (m, inputs)
}

/// Runs the machine over the inputs: the number of actions it produced.
fn run_machine(
    mut m: agent_loop::agent::machine::AgentMachine,
    inputs: Vec<agent_loop::agent::machine::Input>,
) -> usize {
    let now = Instant::now();
    m.start("Look at everything.", now);
    let mut actions = std::iter::from_fn(|| m.poll()).count();
    for input in inputs {
        m.handle(input, now);
        actions += std::iter::from_fn(|| m.poll()).count();
    }
    assert!(m.is_finished(), "the run ends");
    actions
}

fn wide(c: &mut Criterion) {
    let mut group = c.benchmark_group("agent/wide_response");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for calls in [1_024usize, 16_384] {
        group.throughput(Throughput::Elements(calls as u64));
        group.bench_with_input(BenchmarkId::from_parameter(calls), &calls, |b, &calls| {
            b.iter_batched(
                || wide_response(calls),
                |(m, inputs)| black_box(run_machine(m, inputs)),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// (d) a run as a sub-agent, against the same run on its own.

/// A lead whose one call runs `turns` replayed turns as the sub-agent `worker`.
fn lead_of(turns: usize) -> Agent {
    let worker = build_agent(ReplayClient::new(turns), turns as u32 + 1);
    Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "worker", json!({"task": "Go."})),
        ScriptedResponse::text("The worker is done."),
    ]))
    .tool(worker.as_tool("worker", "Runs the steps."))
    .build()
    .expect("valid agent")
}

fn nested(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Check once that the nested run does what the figures claim: the worker's turns all came
    // up as events of the lead's run.
    for turns in [10usize, 100, 1_000] {
        let mut lead = lead_of(turns);
        let nested_turns = rt.block_on(tokio::task::unconstrained(async {
            let mut events = lead.run("Go.");
            let mut count = 0;
            while let Some(event) = events.next().await {
                if let AgentEvent::SubAgent { event, .. } = event {
                    count += usize::from(matches!(*event, AgentEvent::TurnStart { .. }));
                }
            }
            count
        }));
        assert_eq!(nested_turns, turns, "nested run");
    }
    let mut group = c.benchmark_group("agent/nested");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for turns in [10usize, 100, 1_000] {
        group.throughput(Throughput::Elements(turns as u64));
        bench_runs(&mut group, &rt, "direct", turns, |turns| {
            build_agent(ReplayClient::new(turns), turns as u32 + 1)
        });
        bench_runs(&mut group, &rt, "as_sub_agent", turns, lead_of);
    }
    group.finish();
}

criterion_group!(benches, scripted, concurrent, wide, nested);
criterion_main!(benches);
