//! Agents that use agents, through the public API: an agent as a tool (its events nested and
//! tagged, its usage rolled up, its own conversation, several at once, a depth limit,
//! cancellation, panics contained) and handoffs (the crate's tool, the new agent's settings,
//! the input filter, the history both providers accept, a pause after a handoff).

use std::sync::Arc;

use agent_loop::agent::RunPolicy;
use agent_loop::agent::{Handoff, HandoffFilter, Resolutions};
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::provider::{LlmStream, ModelRequest, ToolChoice};
use agent_loop::testing::{history_violation, MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::RequestSettings;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, ContentBlock, LlmClient, Message, OpenAiClient, Role,
    Termination, ToolError, Usage,
};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::common;
use common::agent::result_in_history;
use common::grammar::grammar_violation;

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// A tool that answers `answer` to any input.
fn answering(name: &str, answer: &'static str) -> impl agent_loop::Tool {
    FnTool::new(
        name,
        "Looks something up.",
        move |_: Value, _ctx| async move { Ok::<_, ToolError>(answer) },
    )
}

async fn run(agent: &mut Agent, input: &str) -> Vec<AgentEvent> {
    agent.run(input).collect().await
}

fn outcome(events: &[AgentEvent]) -> &agent_loop::RunOutcome {
    match events.last() {
        Some(AgentEvent::Finished(outcome)) => outcome,
        other => panic!("no Finished: {other:?}"),
    }
}

/// The nested events of `path` (as displayed), unwrapped.
fn nested<'a>(events: &'a [AgentEvent], path: &str) -> Vec<&'a AgentEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::SubAgent { path: p, event } if p.to_string() == path => Some(&**event),
            _ => None,
        })
        .collect()
}

/// A lead that calls `tool` once (call `c1`) with `task`, then answers `answer`.
fn lead_calling(tool: impl agent_loop::Tool, task: &str, answer: &str) -> Agent {
    let name = tool.name().to_owned();
    Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", name, json!({"task": task})),
        ScriptedResponse::text(answer),
    ]))
    .tool(tool)
    .build()
    .unwrap()
}

#[tokio::test]
async fn a_sub_agent_runs_on_its_own_conversation_and_reports_tagged_events_and_usage() {
    let worker_client = ScriptedClient::new([
        ScriptedResponse::tool_call("w1", "lookup", json!({"q": "answer"})).usage(usage(10, 2)),
        ScriptedResponse::text("found: 42").usage(usage(20, 3)),
    ]);
    let worker = Agent::builder(worker_client.clone())
        .system("You research.")
        .tool(answering("lookup", "42"))
        .build()
        .unwrap();
    let lead_client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "research", json!({"task": "Find the answer."}))
            .usage(usage(100, 5)),
        ScriptedResponse::text("The answer is 42.").usage(usage(200, 6)),
    ]);
    let mut lead = Agent::builder(lead_client.clone())
        .system("You lead.")
        .tool(worker.as_tool("research", "Researches a question."))
        .build()
        .unwrap();

    let events = run(&mut lead, "What is the answer?").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    let outcome = outcome(&events);
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "The answer is 42.");
    // The worker's whole run came up, tagged with the call that ran it.
    let inner = nested(&events, "research#c1");
    assert!(matches!(
        inner.first(),
        Some(AgentEvent::TurnStart { turn: 1 })
    ));
    assert!(inner.iter().any(|e| matches!(e, AgentEvent::ToolResult { name, content, .. } if name == "lookup" && content == "42")));
    let Some(AgentEvent::Finished(inner_outcome)) = inner.last() else {
        panic!("{inner:#?}")
    };
    assert_eq!(inner_outcome.final_text, "found: 42");
    // Usage rolls up: the lead's two turns and the worker's two, and per sub-agent run.
    assert_eq!(outcome.usage, usage(330, 16));
    assert_eq!(outcome.sub_agents.len(), 1);
    assert_eq!(outcome.sub_agents[0].path.to_string(), "research#c1");
    assert_eq!(outcome.sub_agents[0].turns, 2);
    assert_eq!(outcome.sub_agents[0].usage, usage(30, 5));
    // The lead's own turns report their own usage.
    let turn_usage: Vec<Usage> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TurnEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .collect();
    assert_eq!(turn_usage, [usage(100, 5), usage(200, 6)]);
    // The worker saw only its task, under its own system prompt; the lead got its answer.
    let first = &worker_client.requests()[0];
    assert_eq!(first.system.as_deref(), Some("You research."));
    assert_eq!(*first.messages, vec![Message::user("Find the answer.")]);
    assert_eq!(
        result_in_history(&lead, "c1"),
        ("found: 42".to_owned(), false)
    );
    assert!(lead_client.history_violations().is_empty());
    assert!(worker_client.history_violations().is_empty());
}

#[tokio::test(start_paused = true)]
async fn sub_agents_called_together_run_at_once_each_alone_and_answer_in_call_order() {
    // Each worker's tool waits for the other two: the run finishes only if all three run at
    // the same time (with paused time, a wait that never ends fails the timeout at once).
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let mut lead = Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("a1", "alpha", json!({"task": "task for alpha"}))
            .then_tool_call("b1", "beta", json!({"task": "task for beta"}))
            .then_tool_call("g1", "gamma", json!({"task": "task for gamma"})),
        ScriptedResponse::text("all three answered"),
    ]));
    let mut clients = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let client = ScriptedClient::new([
            ScriptedResponse::tool_call("w", "meet", json!({})),
            ScriptedResponse::text(format!("{name} done")),
        ]);
        clients.push(client.clone());
        let barrier = barrier.clone();
        let meet = FnTool::new("meet", "Waits for the others.", move |_: Value, _ctx| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                Ok::<_, ToolError>("met")
            }
        });
        let worker = Agent::builder(client).tool(meet).build().unwrap();
        lead = lead.tool(worker.as_tool(name, "A worker."));
    }
    let mut lead = lead.build().unwrap();
    let events = tokio::time::timeout(std::time::Duration::from_secs(60), run(&mut lead, "go"))
        .await
        .expect("the three sub-agents did not run at the same time");
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    assert_eq!(outcome(&events).final_text, "all three answered");
    // Results in the model's order, each the worker's own answer.
    let results = lead.messages()[2].content.clone();
    let order: Vec<(&str, &str)> = results
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => (tool_use_id.as_str(), content.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        order,
        [
            ("a1", "alpha done"),
            ("b1", "beta done"),
            ("g1", "gamma done")
        ]
    );
    // Each worker saw only its own task.
    for (client, name) in clients.iter().zip(["alpha", "beta", "gamma"]) {
        let request = &client.requests()[0];
        assert_eq!(
            *request.messages,
            vec![Message::user(format!("task for {name}"))]
        );
    }
    assert_eq!(outcome(&events).sub_agents.len(), 3);
}

#[tokio::test]
async fn a_call_past_the_depth_limit_is_answered_with_an_error_saying_so() {
    // lead → middle → bottom: two levels, over a limit of one.
    let bottom = Agent::builder(ScriptedClient::new([ScriptedResponse::text("bottom")]))
        .build()
        .unwrap();
    let middle_client = ScriptedClient::new([
        ScriptedResponse::tool_call("m1", "bottom", json!({"task": "go deeper"})),
        ScriptedResponse::text("middle gave up on bottom"),
    ]);
    let middle = Agent::builder(middle_client)
        .tool(bottom.as_tool("bottom", "The lowest agent."))
        .build()
        .unwrap();
    let mut lead = Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "middle", json!({"task": "go down"})),
        ScriptedResponse::text("done"),
    ]))
    .tool(middle.as_tool("middle", "The middle agent."))
    .policy(RunPolicy::new().max_depth(1))
    .build()
    .unwrap();
    let events = run(&mut lead, "Go as deep as you can.").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    let refused = nested(&events, "middle#c1")
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } if id == "m1" => Some((content.clone(), *is_error)),
            _ => None,
        })
        .expect("the middle agent's call of bottom is answered");
    assert!(refused.1);
    assert!(
        refused.0.contains("2 levels") && refused.0.contains("limit of 1"),
        "{}",
        refused.0
    );
    assert!(nested(&events, "middle#c1/bottom#m1").is_empty());
    assert_eq!(outcome(&events).final_text, "done");

    // The default limit lets the same tree run.
    let bottom = Agent::builder(ScriptedClient::new([ScriptedResponse::text("bottom")]))
        .build()
        .unwrap();
    let middle = Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("m1", "bottom", json!({"task": "go deeper"})),
        ScriptedResponse::text("middle heard bottom"),
    ]))
    .tool(bottom.as_tool("bottom", "The lowest agent."))
    .build()
    .unwrap();
    let mut lead = lead_calling(
        middle.as_tool("middle", "The middle agent."),
        "go down",
        "done",
    );
    let events = run(&mut lead, "Go as deep as you can.").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    assert!(!nested(&events, "middle#c1/bottom#m1").is_empty());
    let paths: Vec<String> = outcome(&events)
        .sub_agents
        .iter()
        .map(|s| s.path.to_string())
        .collect();
    assert_eq!(paths, ["middle#c1/bottom#m1", "middle#c1"]);
}

#[tokio::test]
async fn cancelling_during_a_sub_agent_closes_its_run_and_leaves_the_history_valid() {
    let stuck = FnTool::new("wait", "Waits forever.", |_: Value, _ctx| async move {
        futures::future::pending::<()>().await;
        Ok::<_, ToolError>("never")
    });
    let worker = Agent::builder(ScriptedClient::new([ScriptedResponse::text(
        "thinking about it",
    )
    .then_tool_call("w1", "wait", json!({}))]))
    .tool(stuck)
    .build()
    .unwrap();
    let lead_client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "worker", json!({"task": "wait"})),
        ScriptedResponse::text("after the cancel"),
    ]);
    let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = kept.clone();
    let worker = worker
        .as_tool("worker", "Waits.")
        .on_finish(move |id, conversation| {
            keep.lock().unwrap().push((id.to_owned(), conversation))
        });
    let mut lead = Agent::builder(lead_client.clone())
        .tool(worker)
        .build()
        .unwrap();
    let handle = lead.handle();
    let mut stream = lead.run("Start the worker.");
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        // Cancel once the worker's own tool is running.
        if matches!(&event, AgentEvent::SubAgent { event, .. } if matches!(**event, AgentEvent::ToolCall { .. }))
        {
            handle.cancel();
        }
        events.push(event);
    }
    drop(stream);
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    assert_eq!(outcome(&events).termination, Termination::Cancelled);
    // The worker's run is closed as a cancelled run closes, before the lead's call ends.
    let inner = nested(&events, "worker#c1");
    let tail: Vec<String> = inner[inner.len() - 3..]
        .iter()
        .map(|e| match e {
            AgentEvent::ToolResult { id, content, .. } => format!("result {id} {content}"),
            AgentEvent::TurnEnd { stop_reason, .. } => format!("end {stop_reason:?}"),
            AgentEvent::Finished(o) => format!("finished {}", o.termination),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        tail,
        [
            "result w1 cancelled",
            "end Other(\"interrupted\")",
            "finished cancelled"
        ]
    );
    assert_eq!(outcome(&events).sub_agents.len(), 1);
    // The worker's own conversation was left valid too: its call answered as interrupted.
    let kept = kept.lock().unwrap().clone();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].0, "c1");
    let worker_history = &kept[0].1.messages;
    assert_eq!(
        history_violation(worker_history),
        None,
        "{worker_history:#?}"
    );
    assert_eq!(worker_history.len(), 3, "{worker_history:#?}");
    assert_eq!(worker_history[0], Message::user("wait"));
    // The lead's history is valid, and the lead runs again.
    assert_eq!(history_violation(&lead.messages()), None);
    assert_eq!(result_in_history(&lead, "c1").0, "cancelled");
    let events = run(&mut lead, "Go on.").await;
    assert_eq!(outcome(&events).final_text, "after the cancel");
    assert!(lead_client.history_violations().is_empty());
}

/// A client whose stream panics.
struct Panicking;

impl LlmClient for Panicking {
    fn stream<'a>(&'a self, _request: &'a ModelRequest) -> LlmStream<'a> {
        panic!("the client panicked")
    }

    fn model(&self) -> &str {
        "panicking"
    }
}

#[tokio::test]
async fn panics_inside_a_sub_agent_are_contained() {
    // The worker's tool panics: the worker reads the error and answers anyway.
    let worker_client = ScriptedClient::new([
        ScriptedResponse::tool_call("w1", "explode", json!({})),
        ScriptedResponse::text("the tool broke, but here is an answer"),
    ]);
    let explode = FnTool::new("explode", "Panics.", |_: Value, _ctx| async move {
        if true {
            panic!("boom");
        }
        Ok::<_, ToolError>("never")
    });
    let worker = Agent::builder(worker_client).tool(explode).build().unwrap();
    // The other worker's client itself panics: its whole call is an error result.
    let broken = Agent::builder(Panicking).build().unwrap();
    let mut lead = Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "worker", json!({"task": "try"})).then_tool_call(
            "c2",
            "broken",
            json!({"task": "try"}),
        ),
        ScriptedResponse::text("done despite it all"),
    ]))
    .tool(worker.as_tool("worker", "Tries."))
    .tool(broken.as_tool("broken", "Breaks."))
    .build()
    .unwrap();
    let events = run(&mut lead, "Try everything.").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    assert_eq!(outcome(&events).final_text, "done despite it all");
    let inner_error = nested(&events, "worker#c1")
        .into_iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    let (content, is_error) = inner_error.expect("the worker's tool is answered");
    assert!(is_error && content.contains("panicked") && content.contains("boom"));
    assert_eq!(
        result_in_history(&lead, "c1"),
        ("the tool broke, but here is an answer".to_owned(), false)
    );
    let (content, is_error) = result_in_history(&lead, "c2");
    assert!(is_error && content.contains("panicked"), "{content}");
    assert_eq!(history_violation(&lead.messages()), None);
}

#[tokio::test]
async fn a_sub_agent_without_an_answer_is_an_error_result_saying_why() {
    let worker = Agent::builder(ScriptedClient::new([ScriptedResponse::tool_call(
        "w1",
        "lookup",
        json!({}),
    )
    .then_text("half an answer")]))
    .tool(answering("lookup", "x"))
    .max_turns(1)
    .build()
    .unwrap();
    let mut lead = lead_calling(worker.as_tool("worker", "Tries."), "try", "ok");
    let events = run(&mut lead, "Go.").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    let (content, is_error) = result_in_history(&lead, "c1");
    assert!(is_error);
    assert!(
        content.contains("stopped without an answer")
            && content.contains("turn limit")
            && content.ends_with("its last text: half an answer"),
        "{content}"
    );
}

#[tokio::test]
async fn a_typed_input_is_rendered_into_the_prompt_and_its_schema_sent() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Question {
        /// The city.
        city: String,
    }
    let worker_client = ScriptedClient::new([ScriptedResponse::text("sunny")]);
    let worker = Agent::builder(worker_client.clone()).build().unwrap();
    let lead_client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "weather", json!({"city": "Oslo"})),
        ScriptedResponse::text("It is sunny."),
    ]);
    let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = kept.clone();
    let tool = worker
        .as_tool("weather", "The weather in a city.")
        .on_finish(move |id, conversation| keep.lock().unwrap().push((id.to_owned(), conversation)))
        .input(|q: Question| format!("What is the weather in {}?", q.city));
    let mut lead = Agent::builder(lead_client.clone())
        .tool(tool)
        .build()
        .unwrap();
    let events = run(&mut lead, "Weather in Oslo?").await;
    assert_eq!(outcome(&events).final_text, "It is sunny.");
    assert_eq!(
        *worker_client.requests()[0].messages,
        vec![Message::user("What is the weather in Oslo?")]
    );
    // The call's own conversation, handed over when it ended.
    let kept = kept.lock().unwrap().clone();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].1.messages,
        vec![
            Message::user("What is the weather in Oslo?"),
            Message::assistant("sunny")
        ]
    );
    let spec = &lead_client.requests()[0].tools[0];
    assert_eq!(spec.name, "weather");
    assert_eq!(spec.description, "The weather in a city.");
    assert_eq!(spec.input_schema["properties"]["city"]["type"], "string");
    assert_eq!(spec.input_schema["required"], json!(["city"]));
}

// ----- handoffs ------------------------------------------------------------------------

fn fast() -> RetryPolicy {
    RetryPolicy::none()
}

/// Triage hands off to billing on each provider's mock; billing answers with its own tool.
/// Every request is one the mock (which refuses what the real API refuses) accepts.
#[tokio::test]
async fn a_handoff_gives_the_next_turn_to_the_target_and_both_providers_accept_the_history() {
    for anthropic in [true, false] {
        let server = MockServer::start().await;
        server.push(
            ScriptedResponse::text("Let me pass you to billing.").then_tool_call(
                "h1",
                "transfer_to_billing",
                json!({}),
            ),
        );
        server.push(ScriptedResponse::tool_call(
            "b1",
            "refund",
            json!({"order": 7}),
        ));
        server.push(ScriptedResponse::text("Your order 7 is refunded."));
        let client = |model: &str| -> Arc<dyn LlmClient> {
            if anthropic {
                Arc::new(
                    AnthropicClient::new("k")
                        .base_url(server.anthropic_base_url())
                        .model(model)
                        .retry_policy(fast()),
                )
            } else {
                Arc::new(
                    OpenAiClient::new("k")
                        .base_url(server.openai_base_url())
                        .model(model)
                        .retry_policy(fast()),
                )
            }
        };
        let billing = Agent::builder(client("billing-model"))
            .name("billing")
            .system("You handle refunds.")
            .settings(RequestSettings::new().temperature(0.1))
            .tool(answering("refund", "refunded"))
            .build()
            .unwrap();
        let mut triage = Agent::builder(client("triage-model"))
            .name("triage")
            .system("You route questions.")
            .tool(answering("faq", "see the FAQ"))
            .handoff(Handoff::new(billing).description("Refunds and invoices."))
            .build()
            .unwrap();
        let events = run(&mut triage, "Refund order 7, please.").await;
        assert_eq!(grammar_violation(&events), None, "{events:#?}");
        assert_eq!(outcome(&events).final_text, "Your order 7 is refunded.");
        assert!(
            server.history_violations().is_empty(),
            "{:?}",
            server.history_violations()
        );
        // The handoff is reported between turns: after the turn that asked for it ends (as
        // the old agent's), before the new agent's turn starts.
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match e {
                AgentEvent::ToolResult { .. } => "result",
                AgentEvent::Handoff { .. } => "handoff",
                AgentEvent::TurnEnd { .. } => "end",
                _ => "",
            })
            .filter(|k| !k.is_empty())
            .collect();
        assert_eq!(kinds, ["result", "end", "handoff", "result", "end", "end"]);
        assert!(events.contains(&AgentEvent::Handoff {
            from: "triage".into(),
            to: "billing".into()
        }));
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        let names = |body: &Value| -> Vec<String> {
            body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    t.get("name")
                        .or_else(|| t["function"].get("name"))
                        .and_then(Value::as_str)
                        .unwrap()
                        .to_owned()
                })
                .collect()
        };
        // Triage offers its tool and the handoff; billing its own tool, with its settings.
        assert_eq!(names(&requests[0].body), ["faq", "transfer_to_billing"]);
        assert_eq!(names(&requests[1].body), ["refund"]);
        assert_eq!(requests[0].body["model"], "triage-model");
        assert_eq!(requests[1].body["model"], "billing-model");
        assert_eq!(requests[1].body["temperature"], json!(0.1));
        let system = |body: &Value| -> String {
            if anthropic {
                body["system"]
                    .as_array()
                    .map(|blocks| blocks[0]["text"].as_str().unwrap().to_owned())
                    .or_else(|| body["system"].as_str().map(str::to_owned))
                    .unwrap()
            } else {
                body["messages"][0]["content"].as_str().unwrap().to_owned()
            }
        };
        assert_eq!(system(&requests[0].body), "You route questions.");
        assert_eq!(system(&requests[1].body), "You handle refunds.");
        // The history keeps the handoff: the call and its answer.
        let (answer, is_error) = result_in_history(&triage, "h1");
        assert!(!is_error && answer.contains("billing"), "{answer}");
    }
}

#[tokio::test]
async fn a_target_without_tools_keeps_the_handoff_tool_defined_but_not_callable() {
    let server = MockServer::start().await;
    server.push(ScriptedResponse::tool_call(
        "h1",
        "transfer_to_writer",
        json!({}),
    ));
    server.push(ScriptedResponse::text("A poem."));
    let client = |model: &str| {
        AnthropicClient::new("k")
            .base_url(server.anthropic_base_url())
            .model(model)
            .retry_policy(fast())
    };
    let writer = Agent::builder(client("w")).name("writer").build().unwrap();
    let mut triage = Agent::builder(client("t")).handoff(writer).build().unwrap();
    let events = run(&mut triage, "Write me a poem.").await;
    assert_eq!(outcome(&events).final_text, "A poem.", "{events:#?}");
    assert!(server.history_violations().is_empty());
    let second = &server.requests()[1].body;
    assert_eq!(second["tools"][0]["name"], "transfer_to_writer");
    assert_eq!(second["tool_choice"], json!({"type": "none"}));
}

#[tokio::test]
async fn the_input_filter_decides_what_history_the_target_sees() {
    let billing_client = ScriptedClient::new([ScriptedResponse::text("Refunded.")]);
    let billing = Agent::builder(billing_client.clone())
        .name("billing")
        .build()
        .unwrap();
    let mut triage = Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("f1", "faq", json!({})),
        ScriptedResponse::text("Passing you on.").then_tool_call(
            "h1",
            "transfer_to_billing",
            json!({}),
        ),
    ]))
    .tool(answering("faq", "see the FAQ"))
    .handoff(Handoff::new(billing).input_filter(HandoffFilter::WithoutTools))
    .build()
    .unwrap();
    let events = run(&mut triage, "Refund, please.").await;
    assert_eq!(outcome(&events).final_text, "Refunded.", "{events:#?}");
    let seen = billing_client.requests()[0].messages.clone();
    assert_eq!(
        *seen,
        vec![
            Message::user("Refund, please."),
            Message::assistant("Passing you on."),
            Message::user("The conversation was handed over to you: continue it."),
        ]
    );
    // The agent's history is what the target saw and said from the handoff on.
    assert_eq!(triage.messages().len(), 4);
    assert_eq!(triage.messages()[3], Message::assistant("Refunded."));

    // A filter that gives an invalid history ends the run with an error saying so.
    let billing = Agent::builder(ScriptedClient::new([ScriptedResponse::text("x")]))
        .name("billing")
        .build()
        .unwrap();
    let mut triage = Agent::builder(ScriptedClient::new([ScriptedResponse::tool_call(
        "h1",
        "transfer_to_billing",
        json!({}),
    )]))
    .handoff(
        Handoff::new(billing)
            .input_filter(HandoffFilter::custom(|_| vec![Message::assistant("hi")])),
    )
    .build()
    .unwrap();
    let events = run(&mut triage, "Refund.").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    let Termination::Error(error) = &outcome(&events).termination else {
        panic!("{events:#?}")
    };
    assert!(
        error.to_string().contains("handoff input filter"),
        "{error}"
    );
    assert_eq!(history_violation(&triage.messages()), None);
}

#[tokio::test]
async fn a_handoff_lasts_for_the_run_and_the_next_run_starts_with_the_agent_itself() {
    let billing = Agent::builder(ScriptedClient::new([ScriptedResponse::text("Refunded.")]))
        .name("billing")
        .system("You handle refunds.")
        .build()
        .unwrap();
    let triage_client = ScriptedClient::new([
        ScriptedResponse::tool_call("h1", "transfer_to_billing", json!({})),
        ScriptedResponse::text("Triage again."),
    ]);
    let mut triage = Agent::builder(triage_client.clone())
        .name("triage")
        .system("You route questions.")
        .tool(answering("faq", "see the FAQ"))
        .handoff(billing)
        .build()
        .unwrap();
    let events = run(&mut triage, "Refund.").await;
    assert_eq!(outcome(&events).final_text, "Refunded.");
    assert_eq!(triage.context().system(), Some("You route questions."));
    let events = run(&mut triage, "Anything else?").await;
    assert_eq!(outcome(&events).final_text, "Triage again.");
    let request = triage_client.last_request().unwrap();
    assert_eq!(request.system.as_deref(), Some("You route questions."));
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["faq", "transfer_to_billing"]);
    // The whole history went to it: the handoff and billing's answer included.
    assert_eq!(request.messages.len(), 5);
    assert!(triage_client.history_violations().is_empty());
}

#[tokio::test]
async fn one_handoff_per_response_and_the_names_are_checked() {
    let make = |name: &str| {
        Agent::builder(ScriptedClient::new([ScriptedResponse::text(format!(
            "{name} here"
        ))]))
        .name(name)
        .build()
        .unwrap()
    };
    let mut triage = Agent::builder(ScriptedClient::new([ScriptedResponse::tool_call(
        "h1",
        "transfer_to_billing",
        json!({}),
    )
    .then_tool_call("h2", "transfer_to_support", json!({}))]))
    .handoff(make("billing"))
    .handoff(make("support"))
    .build()
    .unwrap();
    let events = run(&mut triage, "Help.").await;
    assert_eq!(outcome(&events).final_text, "billing here");
    let (second, is_error) = result_in_history(&triage, "h2");
    assert!(is_error && second.contains("billing already"), "{second}");

    assert!(format!("{:?}", Handoff::new(make("billing"))).contains("billing"));
    let clash = Agent::builder(ScriptedClient::new([]))
        .handoff(make("billing"))
        .handoff(make("billing"))
        .build();
    assert!(clash
        .unwrap_err()
        .to_string()
        .contains("transfer_to_billing"));
    let bad_name = Agent::builder(ScriptedClient::new([]))
        .handoff(make("billing desk"))
        .build();
    assert!(bad_name
        .unwrap_err()
        .to_string()
        .contains("not a valid tool name"));
}

#[tokio::test]
async fn a_run_paused_after_a_handoff_resumes_with_the_agent_it_was_handed_to() {
    // Built the same way in "both processes".
    let build = |triage: ScriptedClient, billing: ScriptedClient| {
        let billing = Agent::builder(billing)
            .name("billing")
            .system("You handle refunds.")
            .tool(answering("refund", "refunded"))
            .policy(RunPolicy::new().require_approval("refund"))
            .build()
            .unwrap();
        Agent::builder(triage)
            .name("triage")
            .handoff(billing)
            .build()
            .unwrap()
    };
    let billing_first =
        ScriptedClient::new([ScriptedResponse::tool_call("b1", "refund", json!({}))]);
    let mut first = build(
        ScriptedClient::new([ScriptedResponse::tool_call(
            "h1",
            "transfer_to_billing",
            json!({}),
        )]),
        billing_first,
    );
    let events = run(&mut first, "Refund.").await;
    let Termination::Paused(paused) = &outcome(&events).termination else {
        panic!("{events:#?}")
    };
    let json = serde_json::to_string(&**paused).unwrap();
    let paused: agent_loop::PausedRun = serde_json::from_str(&json).unwrap();

    let triage_second = ScriptedClient::new([]);
    let billing_second = ScriptedClient::new([ScriptedResponse::text("Done: refunded.")]);
    let mut second = build(triage_second.clone(), billing_second.clone());
    let resolutions = Resolutions::new().approve("b1");
    let resumed: Vec<AgentEvent> = second.resume(&paused, resolutions).collect().await;
    assert_eq!(
        outcome(&resumed).final_text,
        "Done: refunded.",
        "{resumed:#?}"
    );
    // The billing agent's client answered, with its system prompt and tools.
    assert!(triage_second.requests().is_empty());
    let request = &billing_second.requests()[0];
    assert_eq!(request.system.as_deref(), Some("You handle refunds."));
    assert_eq!(request.tools[0].name, "refund");
    assert_eq!(request.tool_choice, ToolChoice::Auto);
    let (refund, _) = result_in_history(&second, "b1");
    assert_eq!(refund, "refunded");
    assert_eq!(second.messages()[0].role, Role::User);
}

#[tokio::test]
async fn a_run_paused_after_a_sub_agent_keeps_what_it_used_when_resumed() {
    let build = |lead: ScriptedClient| {
        let worker = Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("found it").usage(usage(10, 1))
        ]))
        .build()
        .unwrap();
        Agent::builder(lead)
            .tool(worker.as_tool("worker", "Finds things."))
            .tool(agent_loop::tool::DeferredTool::new(
                "ask_user",
                "Asks the user.",
            ))
            .build()
            .unwrap()
    };
    let mut first = build(ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "worker",
        json!({"task": "find"}),
    )
    .then_tool_call("q1", "ask_user", json!({}))]));
    let events = run(&mut first, "Go.").await;
    let Termination::Paused(paused) = &outcome(&events).termination else {
        panic!("{events:#?}")
    };
    assert_eq!(outcome(&events).sub_agents.len(), 1);
    let json = serde_json::to_string(&**paused).unwrap();
    let paused: agent_loop::PausedRun = serde_json::from_str(&json).unwrap();
    let mut second = build(ScriptedClient::new([ScriptedResponse::text("done")]));
    let resumed: Vec<AgentEvent> = second
        .resume(&paused, Resolutions::new().result("q1", "yes"))
        .collect()
        .await;
    let outcome = outcome(&resumed);
    assert_eq!(outcome.final_text, "done", "{resumed:#?}");
    assert_eq!(outcome.sub_agents.len(), 1);
    assert_eq!(outcome.sub_agents[0].path.to_string(), "worker#c1");
    assert_eq!(outcome.usage.input_tokens, 10);
}

/// A sub-agent's whole run may take longer than the registry's default tool timeout (120 s):
/// its own limit applies (10 minutes unless set). On tokio's paused clock, no real waiting.
#[tokio::test(start_paused = true)]
async fn a_sub_agent_has_its_own_time_limit() {
    let slow_worker = || {
        let wait = FnTool::new("wait", "Waits.", |_: Value, _ctx| async move {
            tokio::time::sleep(std::time::Duration::from_secs(200)).await;
            Ok::<_, ToolError>("waited")
        });
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::tool_call("w1", "wait", json!({})),
            ScriptedResponse::text("finally"),
        ]))
        .tool(wait.timeout(std::time::Duration::from_secs(300)))
        .build()
        .unwrap()
    };
    let mut lead = lead_calling(slow_worker().as_tool("worker", "Slow."), "wait", "ok");
    run(&mut lead, "Go.").await;
    assert_eq!(
        result_in_history(&lead, "c1"),
        ("finally".to_owned(), false)
    );

    let tool = slow_worker()
        .as_tool("worker", "Slow.")
        .timeout(std::time::Duration::from_secs(60));
    let mut lead = lead_calling(tool, "wait", "ok");
    let events = run(&mut lead, "Go.").await;
    assert_eq!(grammar_violation(&events), None, "{events:#?}");
    let (content, is_error) = result_in_history(&lead, "c1");
    assert!(
        is_error && content.contains("timed out after 60s"),
        "{content}"
    );
}

/// A run paused before any handoff resumes with the agent itself, not a handoff's target.
#[tokio::test]
async fn a_run_paused_without_a_handoff_resumes_with_the_agent_itself() {
    let build = |triage: ScriptedClient, billing: ScriptedClient| {
        let billing = Agent::builder(billing).name("billing").build().unwrap();
        Agent::builder(triage)
            .name("triage")
            .tool(answering("lookup", "found"))
            .policy(RunPolicy::new().require_approval("lookup"))
            .handoff(billing)
            .build()
            .unwrap()
    };
    let mut first = build(
        ScriptedClient::new([ScriptedResponse::tool_call("l1", "lookup", json!({}))]),
        ScriptedClient::new([]),
    );
    let events = run(&mut first, "Look it up.").await;
    let Termination::Paused(paused) = &outcome(&events).termination else {
        panic!("{events:#?}")
    };
    let triage = ScriptedClient::new([ScriptedResponse::text("triage answers")]);
    let billing = ScriptedClient::new([ScriptedResponse::text("billing answers")]);
    let mut second = build(triage.clone(), billing.clone());
    let resumed: Vec<AgentEvent> = second
        .resume(paused, Resolutions::new().approve("l1"))
        .collect()
        .await;
    assert_eq!(
        outcome(&resumed).final_text,
        "triage answers",
        "{resumed:#?}"
    );
    assert!(billing.requests().is_empty());
}

/// A handoff lasts for its run unless kept: the next run starts with the agent you built
/// again. With `Handoff::keep` the specialist stays in charge of the next runs (its
/// prompt, tools and model) until `take_back`.
#[tokio::test]
async fn a_kept_handoff_leaves_the_specialist_in_charge_of_the_next_runs() {
    for keep in [false, true] {
        let billing_model = ScriptedClient::new([
            ScriptedResponse::text("Refunded."),
            ScriptedResponse::tool_call("r2", "refund", json!({})),
            ScriptedResponse::text("Refunded again."),
        ]);
        let billing = Agent::builder(billing_model.clone())
            .name("billing")
            .system("You handle refunds.")
            .tool(answering("refund", "refunded"))
            .build()
            .unwrap();
        let triage_model = ScriptedClient::new([
            ScriptedResponse::tool_call("h1", "transfer_to_billing", json!({})),
            ScriptedResponse::text("Triage here."),
            ScriptedResponse::text("Triage again."),
        ]);
        let handoff = Handoff::new(billing);
        let mut triage = Agent::builder(triage_model.clone())
            .name("triage")
            .system("You route questions.")
            .handoff(if keep { handoff.keep() } else { handoff })
            .build()
            .unwrap();
        let first = run(&mut triage, "Refund order 7.").await;
        assert_eq!(outcome(&first).final_text, "Refunded.");
        // The conversation has the agent's own prompt back between runs.
        assert_eq!(
            triage.snapshot().system.as_deref(),
            Some("You route questions.")
        );

        let second = run(&mut triage, "And order 8?").await;
        assert_eq!(grammar_violation(&second), None, "{second:#?}");
        if !keep {
            assert_eq!(triage.in_charge(), "triage");
            assert_eq!(outcome(&second).final_text, "Triage here.");
            assert_eq!(billing_model.requests().len(), 1);
            continue;
        }
        assert_eq!(triage.in_charge(), "billing");
        assert_eq!(outcome(&second).final_text, "Refunded again.");
        assert_eq!(
            triage_model.requests().len(),
            1,
            "triage is not asked again"
        );
        let asked = billing_model.requests();
        assert_eq!(asked.len(), 3);
        // Billing's own prompt and tool, and no handoff tool of triage's to call.
        assert_eq!(asked[1].system.as_deref(), Some("You handle refunds."));
        let tools: Vec<&str> = asked[1].tools.iter().map(|t| t.name.as_str()).collect();
        assert!(tools.contains(&"refund"), "{tools:?}");
        assert!(
            second
                .iter()
                .any(|e| matches!(e, AgentEvent::ToolResult { name, is_error: false, .. } if name == "refund")),
            "billing's tool ran: {second:#?}"
        );
        assert!(history_violation(&triage.messages()).is_none());

        triage.take_back().unwrap();
        assert_eq!(triage.in_charge(), "triage");
        let third = run(&mut triage, "Thanks.").await;
        assert_eq!(outcome(&third).final_text, "Triage here.");
    }
}
