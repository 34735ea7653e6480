//! Cost and budgets through the public API, to the token and the picodollar: each call's cost
//! at the agent's prices, failed attempts apart, sub-agents rolled up, an unknown model never
//! free; a token or cost budget that stops a run before the call that could cross it, and the
//! final answer a budget can ask for.

use std::sync::Arc;

use agent_loop::agent::RunPolicy;
use agent_loop::context::{ContextConfig, TokenCounter};
use agent_loop::error::ApiError;
use agent_loop::pricing::{Cost, ModelPrice, Pricing, Usd};
use agent_loop::provider::ToolChoice;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::RequestSettings;
use agent_loop::{
    Agent, AgentEvent, ContentBlock, ContextManager, LlmError, LlmEvent, Message, Role,
    Termination, ToolRegistry, Usage,
};
use serde_json::json;

use crate::common;
use common::agent::{echo_tool, run};

/// Counts one token per byte: the tests' estimates are exact and easy to follow.
#[derive(Debug)]
struct Bytes;

impl TokenCounter for Bytes {
    fn count(&self, text: &str) -> usize {
        text.len()
    }
}

/// $1 input, $2 output, $1.25 cache writes, $0.10 cache reads per million tokens of `m`.
fn pricing() -> Pricing {
    Pricing::empty().with("m", ModelPrice::per_million(1.0, 2.0).cache(1.25, 0.10))
}

fn echo_specs() -> Vec<agent_loop::tool::ToolSpec> {
    let mut registry = ToolRegistry::new();
    registry.register(echo_tool()).unwrap();
    registry.specs()
}

fn context() -> ContextManager {
    ContextManager::new(ContextConfig::default()).with_counter(Bytes)
}

fn usage(input: u64, output: u64, write: u64, read: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_creation_input_tokens: write,
        cache_read_input_tokens: read,
        ..Usage::default()
    }
}

fn dollars(d: f64) -> Cost {
    let mut cost = Cost::default();
    cost.usd = Usd::from_dollars(d);
    cost
}

/// The policy every agent here starts from: the test prices.
fn policy() -> RunPolicy {
    RunPolicy::new().pricing(pricing())
}

fn builder(client: Arc<ScriptedClient>) -> agent_loop::AgentBuilder {
    Agent::builder(client)
        .policy(policy())
        .context(context())
        .tool(echo_tool())
        .settings(RequestSettings::new().max_tokens(100))
}

fn turn_costs(events: &[AgentEvent]) -> Vec<Cost> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TurnEnd { cost, .. } => Some(*cost),
            _ => None,
        })
        .collect()
}

/// What the agent counts for its first request: the tools and the prompt, with the
/// tests' counter.
fn first_request_tokens(prompt: &str) -> u64 {
    let mut ctx = context();
    ctx.set_tools(&echo_specs());
    ctx.push(Message::user(prompt));
    ctx.token_count() as u64
}

#[tokio::test]
async fn each_call_is_costed_at_its_model_price_and_the_run_sums_them() {
    let client = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "echo", json!({"text": "x"}))
            .model("m-2026-01-01")
            .usage(usage(1_000, 100, 2_000, 10_000)),
        ScriptedResponse::text("done")
            .model("m")
            .usage(usage(3_000, 500, 0, 0)),
    ]));
    let mut agent = builder(client).build().unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    // $0.001 + $0.0002 + $0.0025 + $0.001, then $0.003 + $0.001.
    assert_eq!(turn_costs(&events), [dollars(0.0047), dollars(0.004)]);
    assert_eq!(outcome.cost, dollars(0.0087));
    assert_eq!(
        outcome.cost.known(),
        Some(Usd::from_picodollars(8_700_000_000))
    );
    assert_eq!(outcome.failed_cost, Cost::default());
    assert_eq!(outcome.cost.to_string(), "$0.008700");
}

#[tokio::test]
async fn a_failed_attempt_is_costed_apart() {
    let client = Arc::new(ScriptedClient::new([
        ScriptedResponse::text("partial")
            .model("m")
            .then_event(LlmEvent::Usage(usage(2_000, 50, 0, 0)))
            .then_fail(LlmError::Api(Box::new(ApiError::new(529, "Overloaded")))),
        ScriptedResponse::text("done")
            .model("m")
            .usage(usage(1_000, 10, 0, 0)),
    ]));
    let mut agent = builder(client)
        .policy(policy().retry(common::fast_retries()))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    let retry = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Retry { usage, cost, .. } => Some((*usage, *cost)),
            _ => None,
        })
        .expect("a retry");
    // 2,000 × $1 + 50 × $2 per million.
    assert_eq!(retry, (usage(2_000, 50, 0, 0), dollars(0.0021)));
    assert_eq!(turn_costs(&events), [dollars(0.00102)]);
    assert_eq!(outcome.failed_cost, dollars(0.0021));
    assert_eq!(outcome.cost, dollars(0.00312));
    assert_eq!(outcome.failed_usage, usage(2_000, 50, 0, 0));
}

#[tokio::test]
async fn a_model_with_no_known_price_is_never_free() {
    let client = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "echo", json!({"text": "x"}))
            .model("mystery")
            .usage_tokens(10, 10),
        ScriptedResponse::text("done")
            .model("m")
            .usage_tokens(1_000, 0),
    ]));
    let mut agent = builder(client).build().unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    let costs = turn_costs(&events);
    assert_eq!(costs[0].known(), None);
    assert_eq!(costs[0].to_string(), "no price known");
    assert_eq!(costs[1], dollars(0.001));
    assert_eq!(outcome.cost.known(), None);
    assert_eq!(outcome.cost.unpriced_calls, 1);
    assert_eq!(
        outcome.cost.to_string(),
        "$0.001000 and 1 model call with no price known"
    );
}

/// A response that names a model with no known price (a proxy's alias, a test double's
/// name) is priced at the model the request asked for: the budget never stops counting.
#[tokio::test]
async fn a_response_naming_an_unpriced_model_counts_at_the_requested_price() {
    // Each call: 20,000 tokens in at $1 and 100 out at $2 per million = $0.0202.
    let per_call = dollars(0.0202);
    let call = |named: Option<&str>| {
        let response = ScriptedResponse::tool_call("c1", "echo", json!({"text": "x"}))
            .usage_tokens(20_000, 100);
        match named {
            Some(model) => response.model(model),
            None => response,
        }
    };
    let client = Arc::new(
        ScriptedClient::new([
            call(Some("scripted-model")),
            call(Some("anthropic/an-alias-with-no-price")),
            call(None),
            call(Some("scripted-model")),
            call(Some("scripted-model")),
        ])
        .with_model("m"),
    );
    let mut agent = builder(client.clone())
        .policy(policy().cost_budget(0.05))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    // Two calls fit in $0.05: the third could cost $0.025 more (its 20,000-token history at
    // the cache-write price, and its max_tokens) with $0.0404 spent. Priced as free, all
    // five went through.
    assert_eq!(client.requests().len(), 2, "{}", outcome.termination);
    assert!(
        matches!(outcome.termination, Termination::CostBudget { .. }),
        "{}",
        outcome.termination
    );
    assert_eq!(turn_costs(&events), [per_call, per_call]);
    assert_eq!(outcome.cost.unpriced_calls, 0);
    assert_eq!(outcome.cost, dollars(0.0404));
}

/// The test doubles answer as the model the request asked for, as a provider does.
#[tokio::test]
async fn the_scripted_client_names_the_requested_model() {
    let client = Arc::new(
        ScriptedClient::new([ScriptedResponse::text("hi").usage_tokens(1_000, 0)]).with_model("m"),
    );
    let mut agent = builder(client).build().unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(turn_costs(&events), [dollars(0.001)]);
    assert_eq!(outcome.cost.known(), Some(Usd::from_dollars(0.001)));
}

#[tokio::test]
async fn the_token_budget_stops_the_run_before_a_call_that_could_cross_it() {
    let tokens = first_request_tokens("go");
    // Exactly the first call's most (its request and its 100 max tokens): it is made.
    let client = Arc::new(ScriptedClient::new([ScriptedResponse::text("hi")
        .model("m")
        .usage_tokens(5, 5)]));
    let mut agent = builder(client.clone())
        .policy(policy().token_budget(tokens + 100))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(client.requests().len(), 1);

    // One token less: nothing is sent.
    let client = Arc::new(ScriptedClient::new([ScriptedResponse::text("hi")]));
    let mut agent = builder(client.clone())
        .policy(policy().token_budget(tokens + 99))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(
        outcome.termination,
        Termination::TokenBudget {
            used: 0,
            next_call: tokens + 100,
            budget: tokens + 99,
        }
    );
    assert_eq!(outcome.turns, 0);
    assert!(client.requests().is_empty());
    assert_eq!(events.len(), 1, "only Finished: {events:?}");
}

#[tokio::test]
async fn the_token_budget_counts_what_the_run_used_and_the_next_request() {
    // The first call used 300 tokens (its request 200 by the provider's count). The second
    // request is that plus the response and the result the agent added, by its counter.
    let first = usage(200, 100, 0, 0);
    let mut ctx = context();
    ctx.set_tools(&echo_specs());
    ctx.push(Message::user("go"));
    ctx.record_usage(&first, 1);
    ctx.push(Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: "c1".into(),
            name: "echo".into(),
            input: json!({"text": "x"}),
        }],
    });
    ctx.push_tool_results(vec![ContentBlock::tool_result("c1", "x", false)]);
    let second = ctx.token_count() as u64 + 100;

    let script = || {
        Arc::new(ScriptedClient::new([
            ScriptedResponse::tool_call("c1", "echo", json!({"text": "x"}))
                .model("m")
                .usage(first),
            ScriptedResponse::text("done").model("m").usage_tokens(1, 1),
        ]))
    };
    // Room for exactly the second call.
    let client = script();
    let mut agent = builder(client.clone())
        .policy(policy().token_budget(300 + second))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(client.requests().len(), 2);

    // A token short: the run ends after the first call, with the figures.
    let client = script();
    let mut agent = builder(client.clone())
        .policy(policy().token_budget(300 + second - 1))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert_eq!(
        outcome.termination,
        Termination::TokenBudget {
            used: 300,
            next_call: second,
            budget: 300 + second - 1,
        }
    );
    assert_eq!(client.requests().len(), 1);
    assert_eq!(outcome.turns, 1);
    // The call was answered before the run stopped: the history is valid.
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolResult { id, .. } if id == "c1")));
    assert!(agent.snapshot().messages.len() >= 3);
}

#[tokio::test]
async fn the_cost_budget_stops_the_run_before_a_call_that_could_cross_it() {
    let tokens = first_request_tokens("go");
    // The prompt at the cache-write price ($1.25, dearer than input), 100 tokens at $2.
    let most = Usd::from_picodollars(tokens * 1_250_000 + 100 * 2_000_000);
    let client = Arc::new(
        ScriptedClient::new([ScriptedResponse::text("hi").model("m").usage_tokens(5, 5)])
            .with_model("m"),
    );
    let mut agent = builder(client.clone())
        .policy(policy().cost_budget(most.dollars()))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.cost, dollars(0.000015));

    let budget = most.saturating_sub(Usd::from_picodollars(1_000_000));
    let client = Arc::new(ScriptedClient::new([ScriptedResponse::text("hi")]).with_model("m"));
    let mut agent = builder(client.clone())
        .policy(policy().cost_budget(budget.dollars()))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(
        outcome.termination,
        Termination::CostBudget {
            spent: Cost::default(),
            next_call: most,
            budget,
        }
    );
    assert!(client.requests().is_empty());
    assert!(outcome.termination.to_string().contains("cost budget"));
}

#[tokio::test]
async fn at_the_budget_the_last_call_that_fits_can_be_a_final_answer() {
    let tokens = first_request_tokens("go");
    // Room for the first call twice over; after it (its request counted by the provider as
    // ours), the second call fits but a third like it would not: the second is the last.
    let client = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "echo", json!({"text": "x"}))
            .model("m")
            .usage_tokens(tokens, 1),
        ScriptedResponse::text("my final answer")
            .model("m")
            .usage_tokens(1, 1),
    ]));
    let mut agent = builder(client.clone())
        .policy(
            policy()
                .token_budget(2 * (tokens + 100) + 60)
                .final_answer_at_budget(true),
        )
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    let requests = client.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].tool_choice, ToolChoice::Auto);
    assert_eq!(requests[1].tool_choice, ToolChoice::None);
    assert_eq!(outcome.final_text, "my final answer");
    assert!(
        matches!(outcome.termination, Termination::TokenBudget { used, .. } if used == tokens + 1),
        "{:?}",
        outcome.termination
    );
}

#[test]
fn a_cost_budget_needs_a_price_for_the_model() {
    let client = ScriptedClient::new([]).with_model("mystery");
    let error = Agent::builder(client)
        .policy(RunPolicy::new().pricing(pricing()).cost_budget(1.0))
        .build()
        .expect_err("refused");
    assert!(error.to_string().contains("\"mystery\""), "{error}");
    let client = ScriptedClient::new([]).with_model("m-2026");
    assert!(Agent::builder(client)
        .policy(RunPolicy::new().pricing(pricing()).cost_budget(1.0))
        .build()
        .is_ok());
}

#[tokio::test]
async fn a_sub_agent_run_cost_rolls_up_into_the_caller() {
    let inner = Agent::builder(ScriptedClient::new([ScriptedResponse::text("found")
        .model("m")
        .usage_tokens(1_000, 0)]))
    .name("researcher")
    .policy(RunPolicy::new().pricing(pricing()))
    .build()
    .unwrap();
    let client = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "research", json!({"task": "look"}))
            .model("m")
            .usage_tokens(2_000, 0),
        ScriptedResponse::text("done")
            .model("m")
            .usage_tokens(3_000, 0),
    ]));
    let mut agent = Agent::builder(client)
        .policy(RunPolicy::new().pricing(pricing()))
        .tool(inner.as_tool("research", "Researches."))
        .build()
        .unwrap();
    let (_, outcome) = run(&mut agent, "go").await;
    assert_eq!(outcome.sub_agents.len(), 1);
    assert_eq!(outcome.sub_agents[0].cost, dollars(0.001));
    assert_eq!(outcome.cost, dollars(0.006));
}

#[tokio::test]
async fn a_sub_agent_may_spend_only_what_its_caller_has_left() {
    let inner_client = Arc::new(ScriptedClient::new([ScriptedResponse::text("found")]));
    // On its own the sub-agent may spend a million tokens; under a caller that has fewer
    // than its first call could use left, it makes no call.
    let inner = Agent::builder(inner_client.clone())
        .name("researcher")
        .settings(RequestSettings::new().max_tokens(5_000))
        .policy(RunPolicy::new().token_budget(1_000_000))
        .build()
        .unwrap();
    let client = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "research", json!({"task": "look"})).usage_tokens(500, 0),
        ScriptedResponse::text("done").usage_tokens(1, 1),
    ]));
    let mut agent = Agent::builder(client)
        .settings(RequestSettings::new().max_tokens(100))
        .policy(RunPolicy::new().token_budget(4_000))
        .tool(inner.as_tool("research", "Researches."))
        .build()
        .unwrap();
    let (events, outcome) = run(&mut agent, "go").await;
    assert!(inner_client.requests().is_empty());
    let nested_stop = events.iter().find_map(|e| match e {
        AgentEvent::SubAgent { event, .. } => match &**event {
            AgentEvent::Finished(o) => Some(o.termination.clone()),
            _ => None,
        },
        _ => None,
    });
    assert!(
        matches!(
            nested_stop,
            Some(Termination::TokenBudget {
                used: 0,
                budget: 3_500,
                ..
            })
        ),
        "{nested_stop:?}"
    );
    assert_eq!(outcome.termination, Termination::Completed);
}
