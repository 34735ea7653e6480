//! A tool that asks the host mid-call ([`ToolError::ask`]), through the public API: the run
//! pauses with the question, the call waits for [`WaitsFor::Answer`], and resuming (in this
//! agent or a fresh one, as in another process) runs the tool again with the answer in
//! [`ToolContext::reply`]; a tool that asks again pauses again, and an answer given to the
//! first question is refused for the second; a read-only tool started early cannot pause;
//! the events of a run under a call ([`ToolContext::nested`]) count toward the run's spending.

use std::sync::{Arc, Mutex};

use agent_loop::agent::{Resolution, Resolutions, RunPolicy, WaitsFor};
use agent_loop::error::ResumeError;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::{ExecOptions, FnTool, Question, ToolCall};
use agent_loop::{
    Agent, AgentBuilder, AgentEvent, Error, PausedRun, RunOutcome, StopReason, Termination,
    ToolContext, ToolError, ToolRegistry, Usage,
};
use serde_json::json;

use crate::common::grammar::grammar_violation;
use crate::pause::{collect, paused};

/// What each run of the tool saw: its input's `n` and the answer it ran with.
type Seen = Arc<Mutex<Vec<Option<Resolution>>>>;

/// `transfer`: asks which account on its first run, asks to confirm the amount on a run
/// answered with an account, and answers once confirmed; a denial is its error.
fn transfer(seen: Seen) -> impl agent_loop::Tool {
    FnTool::new(
        "transfer",
        "Transfers money.",
        move |input: serde_json::Value, ctx: ToolContext| {
            let seen = seen.clone();
            async move {
                let reply = ctx.reply().cloned();
                seen.lock()
                    .unwrap()
                    .push(reply.as_ref().map(|r| r.resolution.clone()));
                let Some(reply) = reply else {
                    return Err(ToolError::ask(
                        Question::new("Which account?")
                            .schema(json!({"type": "string"}))
                            .data(json!({"step": 1, "amount": input["amount"]})),
                    ));
                };
                match (reply.question.data["step"].as_u64(), reply.resolution) {
                    (Some(1), Resolution::Result { content, .. }) => Err(ToolError::ask(
                        Question::new(format!("Send {} to {content}?", input["amount"]))
                            .data(json!({"step": 2, "account": content})),
                    )),
                    (Some(2), Resolution::Approve) => Ok(format!(
                        "sent {} to {}",
                        input["amount"],
                        reply.question.data["account"].as_str().unwrap_or("?")
                    )),
                    (_, Resolution::Deny { reason }) => {
                        Err(ToolError::new(format!("not sent: {reason}")))
                    }
                    (step, other) => Err(ToolError::new(format!(
                        "unexpected answer {other:?} at step {step:?}"
                    ))),
                }
            }
        },
    )
}

fn builder(client: ScriptedClient, seen: Seen) -> AgentBuilder {
    Agent::builder(client)
        .tool(transfer(seen))
        .tool(FnTool::new(
            "note",
            "Notes something.",
            |_: serde_json::Value, _ctx| async { Ok::<_, ToolError>("noted") },
        ))
        .policy(RunPolicy::new().early_read_only_tools(false))
}

fn script() -> ScriptedClient {
    ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "transfer", json!({"amount": 30})).then_tool_call(
            "c2",
            "note",
            json!({"text": "transfer asked"}),
        ),
        ScriptedResponse::text("Sent."),
    ])
}

/// A fresh agent that resumes `paused` after it went through JSON, as another process would.
async fn resume_elsewhere(
    paused: &PausedRun,
    answers: Resolutions,
    client: ScriptedClient,
    seen: Seen,
) -> (Vec<AgentEvent>, RunOutcome) {
    let json = serde_json::to_string(paused).unwrap();
    let paused: PausedRun = serde_json::from_str(&json).unwrap();
    let mut agent = builder(client, seen).build().unwrap();
    collect(agent.resume(&paused, answers)).await
}

#[tokio::test]
async fn a_tool_that_asks_pauses_the_run_and_runs_again_with_each_answer() {
    let seen = Seen::default();
    let mut agent = builder(script(), seen.clone()).build().unwrap();
    let (events, outcome) = collect(agent.run("Send 30 to my savings")).await;
    assert_eq!(grammar_violation(&events), None);
    let first = paused(&outcome);
    let pending = first.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, "c1");
    assert_eq!(pending[0].waits_for, WaitsFor::Answer);
    let question = pending[0].question.clone().unwrap();
    assert_eq!(question.prompt, "Which account?");
    assert_eq!(question.schema, Some(json!({"type": "string"})));
    assert_eq!(question.data, json!({"step": 1, "amount": 30}));
    // The other call of the batch ran; the asking one has no result yet, and no event says
    // it has one.
    assert_eq!(first.finished().len(), 1);
    assert_eq!(first.finished()[0].content, "noted");
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolResult { id, .. } if id == "c1")));

    // Answered in another process: the tool runs again with the answer, and asks again.
    let client = ScriptedClient::new([ScriptedResponse::text("Sent.")]);
    let answer = Resolutions::new().for_call(
        &pending[0],
        Resolution::Result {
            content: "savings".into(),
            is_error: false,
        },
    );
    let (events, outcome) = resume_elsewhere(&first, answer, client, seen.clone()).await;
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolCall { .. })));
    let second = paused(&outcome);
    let pending2 = second.pending();
    assert_eq!(pending2[0].id, "c1");
    assert_eq!(
        pending2[0].question.as_ref().unwrap().prompt,
        "Send 30 to savings?"
    );
    assert_ne!(
        pending2[0].digest, pending[0].digest,
        "a new question is a new digest"
    );

    // The first question's answer is refused for the second question.
    let stale = Resolutions::new().for_call(&pending[0], Resolution::Approve);
    let mut again = builder(ScriptedClient::new([]), seen.clone())
        .build()
        .unwrap();
    let (_, outcome) = collect(again.resume(&second, stale)).await;
    match outcome.termination {
        Termination::Error(Error::Resume(ResumeError::StaleAnswer { id, .. })) => {
            assert_eq!(id, "c1")
        }
        other => panic!("expected a stale answer, got {other}"),
    }

    // Confirmed: the tool answers, and the run goes on to its end.
    let client = ScriptedClient::new([ScriptedResponse::text("Sent.")]);
    let confirm = Resolutions::new().for_call(&pending2[0], Resolution::Approve);
    let (events, outcome) = resume_elsewhere(&second, confirm, client.clone(), seen.clone()).await;
    assert!(matches!(outcome.termination, Termination::Completed));
    assert_eq!(outcome.final_text, "Sent.");
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolResult { id, content, is_error: false, .. }
            if id == "c1" && content == "sent 30 to savings"
    )));
    // The model saw both results, in the model's order.
    let request = &client.requests()[0];
    let results: Vec<String> = request
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            agent_loop::ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => Some(format!("{tool_use_id}={content}")),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["c1=sent 30 to savings", "c2=noted"]);

    // Each run of the tool saw the answer it was given (the stale one never reached it).
    assert_eq!(
        *seen.lock().unwrap(),
        [
            None,
            Some(Resolution::Result {
                content: "savings".into(),
                is_error: false
            }),
            Some(Resolution::Approve),
        ]
    );
}

#[tokio::test]
async fn a_denied_question_reaches_the_tool_and_a_call_left_unanswered_keeps_waiting() {
    let seen = Seen::default();
    let mut agent = builder(script(), seen.clone()).build().unwrap();
    let (_, outcome) = collect(agent.run("Send 30")).await;
    let first = paused(&outcome);

    // No answer for it: it waits again, with the same question and digest, and the tool is
    // not run.
    let (_, outcome) = collect(agent.resume(&first, Resolutions::new())).await;
    let still = paused(&outcome);
    assert_eq!(still.pending(), first.pending());
    assert_eq!(seen.lock().unwrap().len(), 1);

    let deny = Resolutions::new().deny("c1", "wrong amount");
    let (events, outcome) = collect(agent.resume(&still, deny)).await;
    assert_eq!(outcome.final_text, "Sent.");
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolResult { id, content, is_error: true, .. }
            if id == "c1" && content == "not sent: wrong amount"
    )));
    assert_eq!(
        seen.lock().unwrap().last().cloned().flatten(),
        Some(Resolution::Deny {
            reason: "wrong amount".into()
        })
    );
}

#[tokio::test]
async fn a_question_without_an_agent_is_an_error_result_carrying_it() {
    let mut tools = ToolRegistry::new();
    tools.register(transfer(Seen::default())).unwrap();
    let result = tools
        .execute_one(
            ToolCall::new("c1", "transfer", json!({"amount": 5})),
            &ExecOptions::default(),
        )
        .await;
    assert!(result.is_error);
    assert_eq!(result.content, "the tool asks: Which account?");
    assert_eq!(result.question().unwrap().prompt, "Which account?");
}

#[tokio::test]
async fn a_read_only_tool_started_early_cannot_pause_and_says_so() {
    let asks = FnTool::new("lookup", "Looks up.", |_: serde_json::Value, _ctx| async {
        Err::<String, _>(ToolError::ask(Question::new("Which one?")))
    })
    .read_only(true);
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "lookup", json!({})),
        ScriptedResponse::text("Could not look it up."),
    ]);
    let mut agent = Agent::builder(client).tool(asks).build().unwrap();
    let (events, outcome) = collect(agent.run("Look it up")).await;
    assert!(matches!(outcome.termination, Termination::Completed));
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolResult { content, is_error: true, .. }
            if content.starts_with("the tool asks: Which one? (it cannot wait for an answer")
    )));
}

#[tokio::test]
async fn a_run_under_a_call_counts_toward_the_budget_it_was_given() {
    let left = Arc::new(Mutex::new(None));
    let seen_left = left.clone();
    let sampler = FnTool::new(
        "sampler",
        "Asks a model of its own.",
        move |_: serde_json::Value, ctx: ToolContext| {
            let seen_left = seen_left.clone();
            async move {
                *seen_left.lock().unwrap() = Some(ctx.tokens_left());
                let events = ctx.nested("sampling").expect("a call of a run has a link");
                assert_eq!(
                    events.path().to_string(),
                    format!("sampling#{}", ctx.call_id())
                );
                let usage = Usage {
                    input_tokens: 700,
                    output_tokens: 100,
                    ..Usage::default()
                };
                events.send(AgentEvent::TurnStart { turn: 1 }).await;
                events
                    .send(AgentEvent::TurnEnd {
                        turn: 1,
                        stop_reason: StopReason::EndTurn,
                        usage,
                        cost: Default::default(),
                    })
                    .await;
                let mut outcome = RunOutcome::new(Termination::Completed);
                outcome.turns = 1;
                outcome.usage = usage;
                events.send(AgentEvent::Finished(outcome)).await;
                Ok::<_, ToolError>("sampled")
            }
        },
    );
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "sampler", json!({})).usage_tokens(100, 10),
        ScriptedResponse::text("Done.").usage_tokens(100, 10),
    ]);
    let mut agent = Agent::builder(client)
        .tool(sampler)
        .settings(agent_loop::RequestSettings::new().max_tokens(100))
        .policy(RunPolicy::new().token_budget(1_000))
        .build()
        .unwrap();
    let (events, outcome) = collect(agent.run("Sample")).await;
    assert_eq!(grammar_violation(&events), None);
    // The budget had 1,000 - 110 left when the call started.
    assert_eq!(*left.lock().unwrap(), Some(Some(890)));
    // The nested run's 800 tokens count: the next call would go past the budget.
    assert_eq!(outcome.sub_agents.len(), 1);
    assert_eq!(outcome.sub_agents[0].usage.total_tokens(), 800);
    assert_eq!(
        outcome.usage.total_tokens(),
        910,
        "the run's usage holds the nested run's"
    );
    assert!(
        matches!(outcome.termination, Termination::TokenBudget { .. }),
        "{}",
        outcome.termination
    );
}
