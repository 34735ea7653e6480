//! Durability against the real restate-server: the worker is SIGKILLed mid-run and
//! restarted; the run completes with the same answer, and nothing completed is done twice.

mod common;

use agent_loop::testing::ScriptedResponse;
use agent_loop::testing::{MockResponse, MockServer, StreamPoint};
use common::*;
use serde_json::json;

/// The mock model, the server and one registered worker.
async fn setup(test: &str) -> Option<(Restate, MockServer, Worker, TempDir)> {
    let restate = restate_or_skip(test)?;
    restate.ready().await;
    let mock = MockServer::start().await;
    let tools = TempDir::new(test);
    let worker = Worker::start(&mock.anthropic_base_url(), &tools.0).await;
    let registered = restate.register(&worker).await;
    assert!(
        registered.status().is_success(),
        "registration failed: {registered:?}"
    );
    Some((restate, mock, worker, tools))
}

#[tokio::test]
async fn sigkill_mid_tool_reruns_only_that_tool_with_the_same_key() {
    let Some((restate, mock, mut worker, tools)) = setup("mid_tool").await else {
        return;
    };
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "a"}),
    ));
    mock.push(ScriptedResponse::text("All done."));
    hold(&tools.0, "a");
    let run = restate.run("s1", "Do step a.");

    wait_until("the tool starts", || async {
        count(&tool_log(&tools.0), "start a s1/c1") == 1
    })
    .await;
    worker.kill();
    worker.restart().await;
    // The interrupted call runs again on the new worker, with the same idempotency key.
    wait_until("the tool starts again", || async {
        count(&tool_log(&tools.0), "start a s1/c1") == 2
    })
    .await;
    release(&tools.0, "a");

    let report = run.await.expect("run task");
    assert_eq!(report["final_text"], "All done.");
    assert_eq!(report["completed"], true);
    assert_eq!(report["turns"], 2);
    // The first model call completed before the crash: it was not sent again.
    assert_eq!(mock.requests().len(), 2);
    let log = tool_log(&tools.0);
    assert_eq!(count(&log, "start a s1/c1"), 2, "{log:?}");
    assert_eq!(count(&log, "done a s1/c1"), 1, "{log:?}");
    assert!(mock.history_violations().is_empty());
    // The model saw the tool's result once, in a valid history.
    let last = &mock.requests()[1];
    assert!(last.body.to_string().contains("did a"), "{}", last.body);
}
