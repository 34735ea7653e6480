//! 100 concurrent sessions over 2 worker processes behind a load balancer; one worker is
//! SIGKILLed mid-way. Every run completes, none is lost or done twice.

mod common;

use std::time::Duration;

use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use common::*;

const SESSIONS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_sessions_over_two_workers_survive_losing_one() {
    let Some(restate) = restate_or_skip("hundred_sessions") else {
        return;
    };
    restate.ready().await;
    let mock = MockServer::start().await;
    // Slow enough that calls are in flight when the worker dies; enough answers for every
    // call and every re-sent one.
    for _ in 0..SESSIONS * 2 {
        mock.push(
            MockResponse::stream(ScriptedResponse::text("ok"))
                .chunk_size(16)
                .chunk_delay(Duration::from_millis(5)),
        );
    }
    let tools = TempDir::new("scale");
    let mut first = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    let second = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    let balancer = Balancer::start(vec![first.port, second.port]).await;
    let registered = restate.register_uri(&balancer.url()).await;
    assert!(registered.status().is_success(), "{registered:?}");

    let runs: Vec<_> = (0..SESSIONS)
        .map(|i| restate.run(&format!("many-{i}"), &format!("question {i}")))
        .collect();
    wait_until("half the model calls are made", || async {
        mock.requests().len() >= SESSIONS / 2
    })
    .await;
    first.kill();

    for run in runs {
        let report = run.await.expect("run task");
        assert_eq!(report["final_text"], "ok", "{report}");
        assert_eq!(report["turns"], 1, "{report}");
    }
    // Not lost, not duplicated: each session holds exactly its question and one answer.
    for i in 0..SESSIONS {
        let (_, state) = restate.call(&format!("many-{i}"), "state", None).await;
        let messages = state["conversation"]["messages"]
            .as_array()
            .expect("messages");
        assert_eq!(messages.len(), 2, "session {i}: {state}");
        assert!(
            messages[0].to_string().contains(&format!("question {i}")),
            "session {i}: {state}"
        );
    }
    let calls = mock.requests().len();
    assert!(calls >= SESSIONS, "{calls} model calls");
    let connections: Vec<usize> = balancer
        .connections
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    eprintln!(
        "{SESSIONS} sessions: {calls} model calls ({} re-sent after the kill), worker \
         connections {connections:?}",
        calls - SESSIONS
    );
    assert!(mock.history_violations().is_empty());
}
