//! agent-loop and rig side by side: the same scripted work through each crate's agent, against
//! one loopback mock server (agent-loop's `MockServer`, speaking OpenAI Chat Completions with
//! streaming), each side in a process of its own so that its CPU time and peak RSS are its own.
//!
//! The work: `N` turns that each call the tool `step` (`{"n": i}` → `"ok"`), then a turn that
//! answers in text; `N` = 1, 10 and 100. Each side runs it from the runtime's main task
//! (`block_on`) and from a spawned task. A child process builds its client once, then runs
//! the work `runs` times, each with a new agent, and reports the CPU time (user + system,
//! `getrusage`) and wall time of those runs, its peak RSS (`VmHWM`) and, through the mock,
//! how many connections it opened. The parent prints the medians of `reps` children per cell
//! and the ratios agent-loop / rig. BENCHMARKS.md §21 has the figures.
//!
//! ```text
//! cargo build --release -p agent-loop-benches --example vs_rig
//! target/release/examples/vs_rig            # 5 children per cell
//! target/release/examples/vs_rig 9          # 9 children per cell
//! ```

use std::convert::Infallible;
use std::process::Command;
use std::time::Instant;

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentEvent, OpenAiClient, ToolError};
use futures::StreamExt;
use serde::Deserialize;

const LENGTHS: [usize; 3] = [1, 10, 100];
const SIDES: [&str; 2] = ["agent-loop", "rig"];
const PLACEMENTS: [&str; 2] = ["main", "spawned"];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        child(&args[2..]);
    } else {
        let reps = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
        parent(reps);
    }
}

/// How many runs a child makes at `turns`: about 200 model calls a child, at least 2 runs.
fn runs_for(turns: usize) -> usize {
    (200 / (turns + 1)).max(2)
}

/// What one child reports.
#[derive(Debug, Clone, Copy, Deserialize)]
struct Report {
    cpu_us: u64,
    wall_us: u64,
    rss_kib: u64,
    /// Context switches (voluntary and not) during the runs.
    switches: u64,
}

fn parent(reps: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(MockServer::start());
    let base_url = server.openai_base_url();
    let exe = std::env::current_exe().unwrap();
    println!("| turns | task | CPU per run: agent-loop | rig | ratio | wall ratio | peak RSS: agent-loop | rig | ratio | switches per model call: agent-loop | rig | connections: agent-loop | rig |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for turns in LENGTHS {
        let runs = runs_for(turns);
        for placement in PLACEMENTS {
            let mut cells: Vec<(Vec<Report>, Vec<usize>)> = vec![(vec![], vec![]); SIDES.len()];
            for _ in 0..reps {
                // Alternate the sides within a rep, so that drift in the machine's load falls
                // on both.
                for (s, side) in SIDES.iter().enumerate() {
                    for _ in 0..runs {
                        for i in 1..=turns {
                            server.push(ScriptedResponse::tool_call(
                                format!("call_{i:05}"),
                                "step",
                                serde_json::json!({ "n": i }),
                            ));
                        }
                        server.push(ScriptedResponse::text("All steps are done."));
                    }
                    let before = server.connections();
                    let out = Command::new(&exe)
                        .args(["child", side, &turns.to_string(), &runs.to_string()])
                        .arg(placement)
                        .arg(&base_url)
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{side} child failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
                    assert_eq!(server.remaining(), 0, "{side} left answers unused");
                    cells[s].0.push(report);
                    cells[s].1.push(server.connections() - before);
                }
            }
            let violations = server.history_violations();
            assert!(violations.is_empty(), "{violations:?}");
            let median = |reports: &[Report], f: fn(&Report) -> u64| {
                let mut v: Vec<u64> = reports.iter().map(f).collect();
                v.sort_unstable();
                v[v.len() / 2]
            };
            let (ours, rig) = (&cells[0], &cells[1]);
            let cpu = |r: &[Report]| median(r, |x| x.cpu_us) as f64 / runs as f64;
            let wall = |r: &[Report]| median(r, |x| x.wall_us) as f64 / runs as f64;
            let rss = |r: &[Report]| median(r, |x| x.rss_kib);
            let calls = (runs * (turns + 1)) as f64;
            let switches = |r: &[Report]| median(r, |x| x.switches) as f64 / calls;
            let conns = |c: &[usize]| {
                let mut v = c.to_vec();
                v.sort_unstable();
                v[v.len() / 2]
            };
            println!(
                "| {turns} | {placement} | {:.0} µs | {:.0} µs | {:.2}× | {:.2}× | {:.1} MB | {:.1} MB | {:.2}× | {:.1} | {:.1} | {} | {} |",
                cpu(&ours.0),
                cpu(&rig.0),
                cpu(&ours.0) / cpu(&rig.0),
                wall(&ours.0) / wall(&rig.0),
                rss(&ours.0) as f64 / 1024.0,
                rss(&rig.0) as f64 / 1024.0,
                rss(&ours.0) as f64 / rss(&rig.0) as f64,
                switches(&ours.0),
                switches(&rig.0),
                conns(&ours.1),
                conns(&rig.1),
            );
        }
    }
}

/// `child <side> <turns> <runs> <main|spawned> <base url>`: runs the work and prints a
/// [`Report`] as JSON.
fn child(args: &[String]) {
    let side = args[0].clone();
    let turns: usize = args[1].parse().unwrap();
    let runs: usize = args[2].parse().unwrap();
    let spawned = args[3] == "spawned";
    let base_url = args[4].clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (usage0, t0) = (usage(), Instant::now());
    rt.block_on(async move {
        let work = async move {
            match side.as_str() {
                "agent-loop" => agent_loop_runs(&base_url, turns, runs).await,
                "rig" => rig_runs(&base_url, turns, runs).await,
                other => panic!("no side {other}"),
            }
        };
        if spawned {
            tokio::spawn(work).await.unwrap();
        } else {
            work.await;
        }
    });
    let wall_us = t0.elapsed().as_micros() as u64;
    let usage1 = usage();
    println!(
        "{}",
        serde_json::json!({
            "cpu_us": usage1.0 - usage0.0,
            "switches": usage1.1 - usage0.1,
            "wall_us": wall_us,
            "rss_kib": peak_rss_kib(),
        })
    );
}

async fn agent_loop_runs(base_url: &str, turns: usize, runs: usize) {
    let client = OpenAiClient::new("test-key").base_url(base_url).model("m");
    for _ in 0..runs {
        let step = FnTool::new("step", "Does a step.", |_: StepArgs, _ctx| async {
            Ok::<_, ToolError>("ok")
        });
        let mut agent = Agent::builder(client.clone())
            .tool(step)
            .max_turns(turns as u32 + 2)
            .build()
            .unwrap();
        let mut events = agent.run("Go.");
        let mut finished = false;
        while let Some(event) = events.next().await {
            if let AgentEvent::Finished(outcome) = event {
                assert_eq!(outcome.turns as usize, turns + 1, "{outcome:?}");
                finished = true;
            }
        }
        assert!(finished);
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StepArgs {
    #[allow(dead_code)]
    n: u64,
}

/// rig's side of the `step` tool.
struct Step;

impl rig_core::tool::PortableTool for Step {
    const NAME: &'static str = "step";
    type Args = StepArgs;
    type Output = String;
    type Error = Infallible;

    fn description(&self) -> String {
        "Does a step.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": { "n": { "type": "integer" } },
            "required": ["n"],
        })
    }

    async fn call(&self, _args: StepArgs) -> Result<String, Infallible> {
        Ok("ok".into())
    }
}

async fn rig_runs(base_url: &str, turns: usize, runs: usize) {
    let provider = rig_core::providers::openai::OpenAIConfig::new("test-key")
        .with_base_url(base_url)
        .client();
    for _ in 0..runs {
        let agent = rig_agent::AgentBuilder::new(provider.chat("m"))
            .tool(Step)
            .build();
        let mut stream = agent.prompt("Go.").max_turns(turns + 2).stream();
        let mut finished = false;
        while let Some(item) = stream.next().await {
            match item {
                Ok(rig_agent::agent::MultiTurnStreamItem::FinalResponse(_)) => finished = true,
                Ok(_) => {}
                Err(e) => panic!("rig run failed: {e}"),
            }
        }
        assert!(finished);
    }
}

/// The process's CPU time so far (user and system, µs) and its context switches.
fn usage() -> (u64, u64) {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (
        us(usage.ru_utime) + us(usage.ru_stime),
        (usage.ru_nvcsw + usage.ru_nivcsw) as u64,
    )
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
