//! Pacing ahead of time against waiting out 429s (issue #29): 50 agent runs at once, each
//! one model call, against a `MockServer` that enforces 10 requests per second (burst 10).
//!
//! - unpaced: the agent's default retry policy honours the server's `retry-after`;
//! - unpaced, retries enough: the same with 20 retries, so that every run completes;
//! - paced: one `RateLimiter` with the same limit, shared by the 50 runs.
//!
//! One-shot measurement (no criterion iterations): the 429s the mock served, the runs that
//! completed, and the wall time of each, with the ratio to the paced run measured in the same
//! process. Both wire formats. Takes about 25 s.
//!
//! `cargo bench -p agent-loop-benches --bench ratelimit`

use std::time::{Duration, Instant};

use agent_loop::agent::RunPolicy;
use agent_loop::provider::transport::{PacingLimits, RateLimiter, RetryPolicy};
use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::RequestSettings;
use agent_loop::{Agent, AgentBuilder, AnthropicClient, OpenAiClient, Termination};
use futures::StreamExt;

const RUNS: usize = 50;

#[derive(Clone, Copy, Debug)]
enum Format {
    Anthropic,
    OpenAi,
}

fn builder(format: Format, server: &MockServer) -> AgentBuilder {
    match format {
        Format::Anthropic => Agent::builder(
            AnthropicClient::new("k")
                .base_url(server.anthropic_base_url())
                .model("m"),
        ),
        Format::OpenAi => Agent::builder(
            OpenAiClient::new("k")
                .base_url(server.openai_base_url())
                .model("m"),
        ),
    }
}

struct Figures {
    refused: usize,
    completed: usize,
    wall: Duration,
}

async fn measure(
    format: Format,
    limits: PacingLimits,
    retry: Option<RetryPolicy>,
    limiter: Option<RateLimiter>,
) -> Figures {
    let server = MockServer::start().await;
    server.rate_limit(limits);
    for _ in 0..RUNS {
        server.push(ScriptedResponse::text("done"));
    }
    let start = Instant::now();
    let runs = (0..RUNS).map(|_| {
        let mut b = builder(format, &server).settings(RequestSettings::new().max_tokens(100));
        if let Some(retry) = &retry {
            b = b.policy(RunPolicy::new().retry(retry.clone()));
        }
        if let Some(limiter) = &limiter {
            b = b.rate_limiter(limiter.clone());
        }
        let mut agent = b.build().expect("agent");
        tokio::spawn(async move {
            let events: Vec<_> = agent.run("go").collect().await;
            matches!(
                events.last(),
                Some(agent_loop::AgentEvent::Finished(o)) if o.termination == Termination::Completed
            )
        })
    });
    let done = futures::future::join_all(runs).await;
    let wall = start.elapsed();
    Figures {
        refused: server.rate_limited(),
        completed: done.into_iter().filter(|d| matches!(d, Ok(true))).count(),
        wall,
    }
}

fn main() {
    // `cargo test --benches` runs this with `--bench`-less args: skip the measurement then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limits = PacingLimits::per(Duration::from_secs(1))
        .requests(10)
        .tokens(1_000_000);
    println!("{RUNS} runs at once, one model call each; the server allows 10 requests per second");
    println!("| format | variant | 429s served | runs completed | wall time | / paced |");
    println!("|---|---|---|---|---|---|");
    for format in [Format::Anthropic, Format::OpenAi] {
        let paced = rt.block_on(measure(
            format,
            limits,
            None,
            Some(RateLimiter::new(limits)),
        ));
        let unpaced = rt.block_on(measure(format, limits, None, None));
        let patient = rt.block_on(measure(
            format,
            limits,
            Some(RetryPolicy::default().max_retries(20)),
            None,
        ));
        for (name, f) in [
            ("unpaced, default retries (3)", &unpaced),
            ("unpaced, 20 retries", &patient),
            ("paced, one shared RateLimiter", &paced),
        ] {
            println!(
                "| {format:?} | {name} | {} | {}/{RUNS} | {:.2} s | {:.2}x |",
                f.refused,
                f.completed,
                f.wall.as_secs_f64(),
                f.wall.as_secs_f64() / paced.wall.as_secs_f64()
            );
        }
    }
}
