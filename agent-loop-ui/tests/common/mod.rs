//! Helpers shared by the web front-ends' tests (a few, copied from the core's tests/common/).
#![allow(dead_code, unreachable_pub)]

pub mod ui;
pub mod web;

use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::{Agent, AgentEvent, RunOutcome};
use futures::StreamExt;

/// Retries at once (1 ms, no jitter): for tests of what is retried, not of how long it waits.
pub fn fast_retries() -> RetryPolicy {
    RetryPolicy::default()
        .initial_backoff(std::time::Duration::from_millis(1))
        .jitter(Jitter::None)
}

/// Runs the agent, calling `handle.cancel()` right after the first event `cancel_on` accepts;
/// checks that `Finished` is the last event and the only one.
pub async fn run_cancelling(
    agent: &mut Agent,
    input: &str,
    cancel_on: impl Fn(&AgentEvent) -> bool,
) -> (Vec<AgentEvent>, RunOutcome) {
    let handle = agent.handle();
    let mut events = Vec::new();
    {
        let mut stream = std::pin::pin!(agent.run(input));
        let mut cancelled = false;
        while let Some(event) = stream.next().await {
            if !cancelled && cancel_on(&event) {
                handle.cancel();
                cancelled = true;
            }
            events.push(event);
        }
    }
    let outcome = match events.last() {
        Some(AgentEvent::Finished(o)) => o.clone(),
        other => panic!("the last event is not Finished: {other:?}\n{events:#?}"),
    };
    let count = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Finished(_)))
        .count();
    assert_eq!(count, 1, "exactly one Finished event: {events:#?}");
    (events, outcome)
}
