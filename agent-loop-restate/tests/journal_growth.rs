//! How a durable run's storage grows with its turns: runs of 10, 100 and 1,000 turns (a tool
//! call each turn, then an answer), each in a fresh session, against the real restate-server;
//! after each, the session's state bytes and the run's journal bytes, read through the admin
//! SQL API (the worker keeps finished journals: `JOURNAL_RETENTION_SECS`).
//!
//! Both must grow linearly with the turns: bytes per turn at 1,000 turns at most
//! [`FLAT`]× those at 100 (and [`FLAT_SHORT`]× between 10 and 100, where the run's fixed
//! entries still weigh). A run that re-writes the whole conversation at every turn end
//! journals O(turns²) bytes and fails here. Prints the table (the figures of BENCHMARKS.md):
//! `cargo test -p agent-loop-restate --test journal_growth -- --nocapture`.

mod common;

use std::time::Instant;

use agent_loop::testing::{MockServer, ScriptedResponse};
use common::*;
use serde_json::{json, Value};

/// Runs of these many turns, one session each.
const TURNS: [usize; 3] = [10, 100, 1000];
/// Bytes per turn at 1,000 turns over bytes per turn at 100: at most this.
const FLAT: f64 = 1.5;
/// The same from 10 to 100 turns: looser, the first turns and the run's own entries weigh.
const FLAT_SHORT: f64 = 2.0;

/// A number of a SQL row: the admin API gives integers as numbers (or, for some aggregates,
/// as strings); a sum over no rows is null.
fn number(value: &Value) -> u64 {
    match value {
        Value::Number(n) => n
            .as_u64()
            .unwrap_or_else(|| n.as_f64().unwrap_or(0.0) as u64),
        Value::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

async fn one(restate: &Restate, sql: &str) -> Value {
    restate
        .query(sql)
        .await
        .into_iter()
        .next()
        .unwrap_or(Value::Null)
}

struct Figures {
    turns: usize,
    state: u64,
    state_keys: u64,
    journal: u64,
    journal_entries: u64,
    tools: u64,
    tool_invocations: u64,
    tool_journals: u64,
    seconds: f64,
}

impl Figures {
    fn state_per_turn(&self) -> f64 {
        self.state as f64 / self.turns as f64
    }

    fn journal_per_turn(&self) -> f64 {
        self.journal as f64 / self.turns as f64
    }
}

/// One run of `turns` turns in session `session`, then its figures.
async fn measure(restate: &Restate, mock: &MockServer, session: &str, turns: usize) -> Figures {
    for i in 0..turns - 1 {
        mock.push(ScriptedResponse::tool_call(
            format!("c{i}"),
            "step",
            json!({"label": format!("t{i}")}),
        ));
    }
    mock.push(ScriptedResponse::text("All steps done."));
    let start = Instant::now();
    let report = restate
        .run(session, "Do the steps.")
        .await
        .expect("run task");
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["turns"], turns, "{report}");
    assert_eq!(report["final_text"], "All steps done.");
    assert_eq!(mock.remaining(), 0, "the run did not use its whole script");

    let run = format!("AgentSession/{session}/run");
    let status = format!("SELECT id, status FROM sys_invocation WHERE target = '{run}'");
    wait_until("the run's invocation is completed", || async {
        one(restate, &status).await["status"] == "completed"
    })
    .await;
    let id = one(restate, &status).await["id"]
        .as_str()
        .expect("the run's invocation id")
        .to_owned();

    let state = one(
        restate,
        &format!(
            "SELECT sum(value_length) AS bytes, count(*) AS keys FROM state WHERE \
             service_name = 'AgentSession' AND service_key = '{session}'"
        ),
    )
    .await;
    let journal = one(
        restate,
        &format!(
            "SELECT sum(raw_length) AS bytes, count(*) AS entries FROM sys_journal WHERE id = \
             '{id}'"
        ),
    )
    .await;
    let tool_filter =
        format!("i.target = 'AgentTools/execute' AND i.idempotency_key LIKE '{session}/{id}/%'");
    let tools = one(
        restate,
        &format!(
            "SELECT sum(j.raw_length) AS bytes, count(DISTINCT j.id) AS journals FROM \
             sys_journal j JOIN sys_invocation i ON j.id = i.id WHERE {tool_filter}"
        ),
    )
    .await;
    let tool_invocations = one(
        restate,
        &format!("SELECT count(*) AS n FROM sys_invocation i WHERE {tool_filter}"),
    )
    .await;

    if std::env::var_os("GROWTH_BREAKDOWN").is_some() {
        println!("journal of the {turns}-turn run, by entry:");
        for row in restate
            .query(&format!(
                "SELECT entry_type, name, count(*) AS entries, sum(raw_length) AS bytes FROM \
                 sys_journal WHERE id = '{id}' GROUP BY entry_type, name ORDER BY bytes DESC \
                 LIMIT 12"
            ))
            .await
        {
            println!("  {row}");
        }
    }

    Figures {
        turns,
        state: number(&state["bytes"]),
        state_keys: number(&state["keys"]),
        journal: number(&journal["bytes"]),
        journal_entries: number(&journal["entries"]),
        tools: number(&tools["bytes"]),
        tool_invocations: number(&tool_invocations["n"]),
        tool_journals: number(&tools["journals"]),
        seconds,
    }
}

/// `later` per turn over `earlier` per turn must stay within `bound`.
fn check(
    failures: &mut Vec<String>,
    what: &str,
    earlier: &Figures,
    later: &Figures,
    bound: f64,
    per_turn: fn(&Figures) -> f64,
) {
    let ratio = per_turn(later) / per_turn(earlier);
    if ratio > bound {
        failures.push(format!(
            "{what} bytes per turn grow {ratio:.2}× from {} to {} turns ({:.0} → {:.0}; at \
             most {bound}× is linear growth)",
            earlier.turns,
            later.turns,
            per_turn(earlier),
            per_turn(later)
        ));
    }
}

#[tokio::test]
async fn journal_and_state_grow_linearly_with_turns() {
    let Some(restate) = restate_or_skip("journal_and_state_grow_linearly_with_turns") else {
        return;
    };
    let started = Instant::now();
    restate.ready().await;
    let mock = MockServer::start().await;
    let tools = TempDir::new("growth");
    let worker = Worker::start_with(
        &mock.anthropic_base_url(),
        &tools.0,
        &[("JOURNAL_RETENTION_SECS", "3600"), ("MAX_TURNS", "2000")],
    )
    .await;
    let registered = restate.register(&worker).await;
    assert!(
        registered.status().is_success(),
        "registration failed: {registered:?}"
    );

    let mut rows = Vec::new();
    for turns in TURNS {
        rows.push(measure(&restate, &mock, &format!("growth{turns}"), turns).await);
    }

    println!(
        "\n{:>6} {:>12} {:>10} {:>14} {:>12} {:>12} {:>8}",
        "turns", "state B", "state B/t", "journal B", "journal B/t", "tool jrnl B", "run s"
    );
    for r in &rows {
        println!(
            "{:>6} {:>12} {:>10.0} {:>14} {:>12.0} {:>12} {:>8.2}",
            r.turns,
            r.state,
            r.state_per_turn(),
            r.journal,
            r.journal_per_turn(),
            r.tools,
            r.seconds
        );
    }
    for r in &rows {
        println!(
            "{} turns: {} state keys, {} journal entries, {} tool invocations ({} with a \
             retained journal)",
            r.turns, r.state_keys, r.journal_entries, r.tool_invocations, r.tool_journals
        );
    }
    println!("wall time: {:.1} s\n", started.elapsed().as_secs_f64());

    for r in &rows {
        assert_eq!(
            r.tool_invocations as usize,
            r.turns - 1,
            "one AgentTools invocation per tool call"
        );
        assert!(r.state > 0 && r.journal > 0, "nothing measured");
    }
    let mut failures = Vec::new();
    let (short, mid, long) = (&rows[0], &rows[1], &rows[2]);
    check(
        &mut failures,
        "state",
        mid,
        long,
        FLAT,
        Figures::state_per_turn,
    );
    check(
        &mut failures,
        "state",
        short,
        mid,
        FLAT_SHORT,
        Figures::state_per_turn,
    );
    check(
        &mut failures,
        "journal",
        mid,
        long,
        FLAT,
        Figures::journal_per_turn,
    );
    check(
        &mut failures,
        "journal",
        short,
        mid,
        FLAT_SHORT,
        Figures::journal_per_turn,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
