//! 100 concurrent sessions on a three-node Restate cluster (replicated log and metadata),
//! over 2 worker processes behind a load balancer. Half the runs finish; then one Restate
//! node and one worker are SIGKILLed while the other half's tools are running. Every run
//! completes, none is lost, nothing that had completed is done twice.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use agent_loop::testing::{MockServer, RecordedRequest, ScriptedResponse};
use common::cluster::*;
use common::*;
use serde_json::json;

const SESSIONS: usize = 100;
/// Sessions `0..DONE_BEFORE` finish before the kills.
const DONE_BEFORE: usize = SESSIONS / 2;

/// The session a model request belongs to (its first message says `question {i}`), and how
/// many messages it carries.
fn session_of(request: &RecordedRequest) -> Option<(usize, usize)> {
    let messages = request.body["messages"].as_array()?;
    let first = messages.first()?.to_string();
    let rest = &first[first.find("question ")? + "question ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((digits.parse().ok()?, messages.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_sessions_on_a_cluster_survive_losing_a_node_and_a_worker() {
    let Some(mut cluster) = cluster_or_skip("hundred_sessions_on_a_cluster") else {
        return;
    };
    let started = Instant::now();
    cluster.ready().await;
    let ready_after = started.elapsed();

    // The model: session i's first call asks for tool `t{i}`, its second answers.
    let mock = MockServer::start().await;
    mock.respond_with(|request| {
        let (i, messages) = session_of(request)?;
        Some(if messages == 1 {
            ScriptedResponse::tool_call(format!("c{i}"), "step", json!({"label": format!("t{i}")}))
                .into()
        } else {
            ScriptedResponse::text(format!("answer {i}")).into()
        })
    });
    let tools = TempDir::new("cluster");
    for i in 0..SESSIONS {
        hold(&tools.0, &format!("t{i}"));
    }
    let mut first = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    let second = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    let balancer = Balancer::start(vec![first.port, second.port]).await;
    // Registered once, through the first node's admin API; the others learn it from the
    // replicated metadata.
    let registered = cluster.register_uri(0, &balancer.url()).await;
    assert!(registered.status().is_success(), "{registered:?}");
    cluster.schema_propagated(0).await;

    // The node to kill: of the nodes the test does not talk to first, the one that leads
    // more partitions (its partitions must fail over). Runs go to the other two ingresses.
    let leaders = cluster.leaders().await;
    let victim = if leaders[1] > leaders[2] { 1 } else { 2 };
    let survivors: Vec<String> = (0..NODES)
        .filter(|&n| n != victim)
        .map(|n| cluster.nodes[n].ingress.clone())
        .collect();
    let retries = Arc::new(AtomicUsize::new(0));
    let runs: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let mut ingresses = survivors.clone();
            ingresses.rotate_left(i % survivors.len());
            let client = DurableClient {
                http: cluster.http.clone(),
                ingresses,
                retries: retries.clone(),
            };
            tokio::spawn(async move {
                let session = format!("many-{i}");
                client
                    .invoke(
                        "AgentSession",
                        &session,
                        "run",
                        Some(&json!(format!("question {i}"))),
                        &format!("{session}-run-1"),
                    )
                    .await
            })
        })
        .collect();

    // Every first model call answered, every tool started (and held).
    let started_tool = |log: &[String], i: usize| {
        let prefix = format!("start t{i} many-{i}/");
        log.iter().filter(|l| l.starts_with(&prefix)).count()
    };
    let done_tool = |log: &[String], i: usize| {
        let prefix = format!("done t{i} many-{i}/");
        log.iter().filter(|l| l.starts_with(&prefix)).count()
    };
    wait_until("every session's tool has started", || async {
        let log = tool_log(&tools.0);
        (0..SESSIONS).all(|i| started_tool(&log, i) >= 1)
    })
    .await;
    let mut runs = runs.into_iter();
    for i in 0..DONE_BEFORE {
        release(&tools.0, &format!("t{i}"));
    }
    let mut reports = Vec::new();
    for run in runs.by_ref().take(DONE_BEFORE) {
        reports.push(run.await.expect("run task"));
    }
    let half_after = started.elapsed();

    // The log is replicated: every record the sequencers committed is stored on
    // REPLICATION log-servers, spread over the nodes.
    let (stored, committed) = cluster.log_figures().await;
    let stored_total: f64 = stored.iter().sum();
    assert!(committed > 0.0, "no log records committed");
    assert!(
        stored_total >= REPLICATION as f64 * committed,
        "stored {stored:?} for {committed} committed records"
    );
    assert!(
        stored.iter().filter(|&&s| s > 0.0).count() >= REPLICATION,
        "{stored:?}"
    );

    // Kill a Restate node and a worker while the other half's tools are running.
    let leaders_before = cluster.leaders().await;
    cluster.nodes[victim].kill();
    first.kill();
    let killed_at = Instant::now();
    for i in DONE_BEFORE..SESSIONS {
        release(&tools.0, &format!("t{i}"));
    }
    for run in runs {
        reports.push(run.await.expect("run task"));
    }
    let recovered_after = killed_at.elapsed();

    for (i, report) in reports.iter().enumerate() {
        assert_eq!(report["completed"], true, "session {i}: {report}");
        assert_eq!(
            report["final_text"],
            format!("answer {i}"),
            "session {i}: {report}"
        );
    }
    // Not lost, not duplicated: each session holds its question, the tool call, one
    // result and the answer.
    let state_client = DurableClient {
        http: cluster.http.clone(),
        ingresses: survivors.clone(),
        retries: Arc::new(AtomicUsize::new(0)),
    };
    for i in 0..SESSIONS {
        let state = state_client
            .invoke(
                "AgentSession",
                &format!("many-{i}"),
                "state",
                None,
                &format!("many-{i}-state"),
            )
            .await;
        let messages = state["conversation"]["messages"]
            .as_array()
            .expect("messages");
        assert_eq!(messages.len(), 4, "session {i}: {state}");
        assert!(
            messages[0].to_string().contains(&format!("question {i}")),
            "session {i}: {state}"
        );
        assert!(
            messages[3].to_string().contains(&format!("answer {i}")),
            "session {i}: {state}"
        );
        let results = messages
            .iter()
            .map(|m| m.to_string().matches("\"type\":\"tool_result\"").count())
            .sum::<usize>();
        assert_eq!(results, 1, "session {i}: {state}");
    }

    // Counted on the model: every first call once (it completed before the kills);
    // the second calls of the sessions that had finished once, the others at least once.
    let requests = mock.requests();
    let mut firsts = vec![0; SESSIONS];
    let mut seconds = vec![0; SESSIONS];
    for request in &requests {
        let (i, messages) = session_of(request).expect("a session's request");
        if messages == 1 {
            firsts[i] += 1;
        } else {
            seconds[i] += 1;
        }
    }
    for i in 0..SESSIONS {
        assert_eq!(firsts[i], 1, "session {i}'s first model call");
        if i < DONE_BEFORE {
            assert_eq!(seconds[i], 1, "session {i}'s second model call");
        } else {
            assert!(seconds[i] >= 1, "session {i}'s second model call");
        }
    }
    // Counted on the tools: the finished half's ran exactly once; the others finished at
    // least once (a call interrupted by a kill runs again, with the same key).
    let log = tool_log(&tools.0);
    let mut restarted_tools = 0;
    for i in 0..SESSIONS {
        if i < DONE_BEFORE {
            assert_eq!(started_tool(&log, i), 1, "session {i}: {log:?}");
            assert_eq!(done_tool(&log, i), 1, "session {i}: {log:?}");
        } else {
            assert!(done_tool(&log, i) >= 1, "session {i}: {log:?}");
            restarted_tools += started_tool(&log, i) - 1;
        }
    }
    assert!(mock.history_violations().is_empty());

    let connections: Vec<usize> = balancer
        .connections
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let calls = requests.len();
    eprintln!(
        "{SESSIONS} sessions on {NODES} nodes (replication {REPLICATION}, {PARTITIONS} \
         partitions): {calls} model calls ({} re-sent), {restarted_tools} tools started again; \
         killed {} (led {} of {PARTITIONS} partitions {leaders_before:?}) and worker 1; \
         client retries {}; worker connections {connections:?}; log records committed \
         {committed}, stored per node {stored:?}; ready in {ready_after:.1?}, half done at \
         {half_after:.1?}, the rest {recovered_after:.1?} after the kills, total {:.1?}",
        calls - 2 * SESSIONS,
        cluster.nodes[victim].name,
        leaders_before[victim],
        retries.load(Ordering::Relaxed),
        started.elapsed(),
    );
}
