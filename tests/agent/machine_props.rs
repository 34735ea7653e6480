//! The structural guard of the sans-IO machine: fed arbitrary model output, every run ends.
//!
//! A hand-written driver plays generated model responses into an [`AgentMachine`]: tool-call
//! ids repeated (in one response and across turns), empty or huge; tool names unknown or
//! empty; arguments that are not JSON or not an object; every stop reason; streams that end
//! without their stop event or break off (retryably or not) after any event. Tools finish in
//! any order, some twice, some with results for calls nobody made; hooks allow, deny or stop;
//! a cancel may come at any step. Hooks may also pause for a person, and a deferred tool's
//! calls wait for results from outside: a paused run is taken through JSON and resumed by a
//! new machine, with answers for some of its waiting calls (approve, deny, a result, none).
//! Every run must:
//!
//! - reach [`Action::Finish`] within a bounded number of steps, never waiting for an input
//!   the driver cannot give (a hang);
//! - never panic (debug builds check the history before every model call);
//! - send only valid histories, and leave a valid one: every id unique and not empty, every
//!   call answered once, in order;
//! - keep the event grammar (tests/common/grammar.rs), across its pauses: the paused runs'
//!   events and the resumed ones' read as one run.
//!
//! `cargo test` runs 256 cases (a few seconds). For a longer hunt:
//! `PROPTEST_CASES=100000 cargo test --release --test machine_props`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use agent_loop::agent::machine::{Action, AgentMachine, Handled, Input, MachineConfig};
use agent_loop::agent::{Resolutions, RunOptions, StructuredOutput, ToolDecision};
use agent_loop::context::ContextConfig;
use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::testing::history_violation;
use agent_loop::tool::{ToolCallResult, ToolCatalog, ToolProgress, ToolSpec};
use agent_loop::{
    AgentEvent, ContextManager, LlmError, LlmEvent, PausedRun, StopReason, Termination, Usage,
};
use proptest::prelude::*;
use serde_json::json;

use crate::common;
use common::grammar::grammar_violation;

/// More steps than any run of these scripts needs: a run still going after them hangs.
const MAX_STEPS: usize = 50_000;

#[derive(Debug, Clone)]
enum Block {
    Text(String),
    Thinking(String),
    Call {
        id: String,
        name: &'static str,
        /// The arguments, in the pieces they arrive in.
        args: Vec<String>,
    },
}

#[derive(Debug, Clone)]
enum Ending {
    /// `MessageStop` with this stop reason.
    Stop(StopReason),
    /// The stream ends without its stop event.
    Ends,
    /// The stream breaks after this many of its events.
    Breaks { after: usize, retryable: bool },
}

#[derive(Debug, Clone)]
struct Response {
    blocks: Vec<Block>,
    usage: bool,
    ending: Ending,
}

/// What the driver does when more than one thing could happen next, and how tools answer.
#[derive(Debug, Clone)]
struct World {
    /// Each a choice: which pending thing happens next (a model event or a tool's result).
    choices: Vec<u8>,
    /// The hooks' verdicts, used in turn.
    verdicts: Vec<u8>,
    /// Whether each finished tool failed, used in turn.
    failures: Vec<bool>,
    /// Cancel before this step.
    cancel_at: Option<usize>,
}

#[derive(Debug, Clone)]
struct Setup {
    max_turns: u32,
    early: bool,
    output: bool,
    final_answer: bool,
    continuations: u32,
    /// Calls of `act` wait for a person's approval.
    approval: bool,
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "call_[0-2]",
        2 => Just(String::new()),
        2 => "[a-z]{1,6}",
        1 => Just("x".repeat(4096)),
        1 => Just("call_0_1".to_owned()),
    ]
}

fn name() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => Just("act"),
        3 => Just("look"),
        2 => Just("ask"),
        2 => Just("final_answer"),
        1 => Just("nope"),
        1 => Just(""),
    ]
}

fn args() -> impl Strategy<Value = Vec<String>> {
    let whole = prop_oneof![
        Just("{}".to_owned()),
        Just(r#"{"x": 1}"#.to_owned()),
        Just(r#"{"name": "Ada", "age": 36}"#.to_owned()),
        Just(r#"{"name": 5}"#.to_owned()),
        Just("{".to_owned()),
        Just(String::new()),
        Just("[1, 2]".to_owned()),
        Just("null".to_owned()),
    ];
    (whole, any::<prop::sample::Index>()).prop_map(|(json, cut)| {
        let at = if json.is_empty() {
            0
        } else {
            cut.index(json.len())
        };
        let (a, b) = json.split_at(at);
        [a, b]
            .into_iter()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        2 => "[a-z ]{0,8}".prop_map(Block::Text),
        1 => "[a-z]{0,6}".prop_map(Block::Thinking),
        5 => (id(), name(), args()).prop_map(|(id, name, args)| Block::Call { id, name, args }),
    ]
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        3 => Just(StopReason::EndTurn),
        4 => Just(StopReason::ToolUse),
        1 => Just(StopReason::MaxTokens),
        1 => Just(StopReason::Refusal),
        1 => Just(StopReason::PauseTurn),
        1 => Just(StopReason::StopSequence),
        1 => Just(StopReason::Other("weird".to_owned())),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        8 => stop_reason().prop_map(Ending::Stop),
        1 => Just(Ending::Ends),
        2 => (0usize..12, any::<bool>())
            .prop_map(|(after, retryable)| Ending::Breaks { after, retryable }),
    ]
}

fn response() -> impl Strategy<Value = Response> {
    (
        prop::collection::vec(block(), 0..5),
        any::<bool>(),
        ending(),
    )
        .prop_map(|(blocks, usage, ending)| Response {
            blocks,
            usage,
            ending,
        })
}

fn world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(any::<u8>(), 1..64),
        prop::collection::vec(any::<u8>(), 1..16),
        prop::collection::vec(prop::bool::weighted(0.3), 1..16),
        prop::option::weighted(0.15, 0usize..400),
    )
        .prop_map(|(choices, verdicts, failures, cancel_at)| World {
            choices,
            verdicts,
            failures,
            cancel_at,
        })
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1u32..7,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u32..3,
        any::<bool>(),
    )
        .prop_map(
            |(max_turns, early, output, final_answer, continuations, approval)| Setup {
                max_turns,
                early,
                output,
                final_answer,
                continuations,
                approval,
            },
        )
}

/// A response as the inputs a stream gives.
fn inputs(response: &Response) -> VecDeque<Input> {
    let mut events = Vec::new();
    for (index, block) in response.blocks.iter().enumerate() {
        match block {
            Block::Text(text) => events.push(LlmEvent::TextDelta {
                index,
                text: text.clone(),
            }),
            Block::Thinking(thinking) => {
                events.push(LlmEvent::ThinkingDelta {
                    index,
                    thinking: thinking.clone(),
                });
                events.push(LlmEvent::SignatureDelta {
                    index,
                    signature: "sig".to_owned(),
                });
            }
            Block::Call { id, name, args } => {
                events.push(LlmEvent::ToolCallStart {
                    index,
                    id: id.clone(),
                    name: (*name).to_owned(),
                });
                for piece in args {
                    events.push(LlmEvent::ToolCallDelta {
                        index,
                        partial_json: piece.clone(),
                    });
                }
            }
        }
        events.push(LlmEvent::BlockStop { index });
    }
    if response.usage {
        events.push(LlmEvent::Usage(Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        }));
    }
    let mut inputs: VecDeque<Input> = events.into_iter().map(Input::ModelEvent).collect();
    match &response.ending {
        Ending::Stop(stop_reason) => inputs.push_back(Input::ModelEvent(LlmEvent::MessageStop {
            stop_reason: stop_reason.clone(),
        })),
        Ending::Ends => inputs.push_back(Input::ModelEnded(Ok(()))),
        Ending::Breaks { after, retryable } => {
            inputs.truncate(*after);
            let error = if *retryable {
                LlmError::Transport {
                    message: "the stream broke off".to_owned(),
                }
            } else {
                LlmError::InvalidRequest {
                    message: "refused".to_owned(),
                }
            };
            inputs.push_back(Input::ModelEnded(Err(error)));
        }
    }
    inputs
}

/// The machine's settings for `setup`.
fn config(setup: &Setup) -> MachineConfig {
    let mut config = MachineConfig::default();
    config.policy.max_turns = setup.max_turns;
    config.policy.early_read_only_tools = setup.early;
    config.policy.final_answer_at_max_turns = setup.final_answer;
    config.policy.max_continuations = setup.continuations;
    config.policy.retry = Some(
        RetryPolicy::default()
            .initial_backoff(Duration::from_secs(1))
            .jitter(Jitter::None),
    );
    if setup.approval {
        config.policy.require_approval = vec!["act".to_owned()];
    }
    config
}

/// `act` (side effects), `look` (read-only) and `ask` (deferred: answered from outside).
fn catalog() -> ToolCatalog {
    let spec = |name: &str| ToolSpec {
        name: name.to_owned(),
        description: format!("{name}s."),
        input_schema: json!({"type": "object"}),
    };
    ToolCatalog::new()
        .tool(spec("act"), false)
        .tool(spec("look"), true)
        .deferred_tool(spec("ask"))
}

fn options(setup: &Setup) -> RunOptions {
    let mut options = RunOptions::new();
    if setup.output {
        options = options.output(
            StructuredOutput::from_schema(json!({
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"]
            }))
            .expect("a valid schema"),
        );
    }
    options
}

fn fresh_context() -> ContextManager {
    ContextManager::new(ContextConfig::default())
}

/// Plays `script` into a machine; returns the events (with `Finished` last) and the final
/// history's violation, if any. Fails the case on a hang or an invalid request.
fn play(setup: &Setup, script: &[Response], world: &World) -> Result<(), TestCaseError> {
    let mut m = AgentMachine::new(config(setup), fresh_context(), catalog());
    let mut now = Instant::now();
    m.start_with("go", options(setup), now);
    let mut pauses = 0;

    let mut responses = script.iter();
    let mut choices = world.choices.iter().cycle();
    let mut verdicts = world.verdicts.iter().cycle();
    let mut failures = world.failures.iter().cycle();
    let mut stream: VecDeque<Input> = VecDeque::new();
    let mut running: Vec<(String, String)> = Vec::new();
    let mut waiting: VecDeque<Input> = VecDeque::new();
    let mut events: Vec<AgentEvent> = Vec::new();
    let mut requests = 0usize;
    let mut checkpoint_violation = None;

    for step in 0..MAX_STEPS {
        if world.cancel_at == Some(step) {
            m.handle(Input::Cancel, now);
        }
        if let Some(action) = m.poll() {
            if !matches!(action, Action::Finish(_)) {
                if let Some(violation) = checkpoint_violation.take() {
                    return Err(TestCaseError::fail(format!(
                        "a checkpoint's history is invalid: {violation}"
                    )));
                }
            }
            match action {
                Action::Emit(event) => events.push(event),
                Action::CallModel(request) => {
                    requests += 1;
                    if let Some(violation) = history_violation(&request.messages) {
                        return Err(TestCaseError::fail(format!(
                            "request {requests} has an invalid history: {violation}\n{:#?}",
                            request.messages
                        )));
                    }
                    // After the script, the model answers in text.
                    let fallback = Response {
                        blocks: vec![Block::Text("done".to_owned())],
                        usage: false,
                        ending: Ending::Stop(StopReason::EndTurn),
                    };
                    stream = inputs(responses.next().unwrap_or(&fallback));
                }
                Action::StopModel => stream.clear(),
                Action::Approve(calls) => {
                    let decisions = calls
                        .iter()
                        .map(|_| match verdicts.next().copied().unwrap_or(0) % 12 {
                            0 => ToolDecision::Deny("no".to_owned()),
                            1 => ToolDecision::Stop("enough".to_owned()),
                            2 => ToolDecision::Pause,
                            _ => ToolDecision::Allow,
                        })
                        .collect();
                    waiting.push_back(Input::Approved(decisions));
                }
                Action::RunTools(calls) => {
                    running.extend(calls.into_iter().map(|c| (c.id, c.name)));
                }
                Action::AbortTools => running.clear(),
                Action::Summarize(_) => waiting.push_back(Input::Summary(Ok("summary".to_owned()))),
                Action::Checkpoint => {
                    // The machine asks for a save only where a turn ended, and the history
                    // there is what a store may keep: valid (a pausing run's waiting calls
                    // excepted, which the paused run carries).
                    prop_assert!(
                        matches!(events.last(), Some(AgentEvent::TurnEnd { .. })),
                        "a checkpoint not right after a TurnEnd: {events:#?}"
                    );
                    checkpoint_violation = history_violation(m.context().messages());
                }
                Action::Finish(outcome) => {
                    let pausing = matches!(outcome.termination, Termination::Paused(_));
                    if let (Some(violation), false) = (checkpoint_violation.take(), pausing) {
                        return Err(TestCaseError::fail(format!(
                            "a checkpoint's history is invalid: {violation}"
                        )));
                    }
                    events.push(AgentEvent::Finished(outcome));
                    if let Some(violation) = grammar_violation(&events) {
                        return Err(TestCaseError::fail(format!(
                            "event grammar: {violation}\n{events:#?}"
                        )));
                    }
                    prop_assert!(m.poll().is_none(), "an action after Finish");
                    let paused = match events.last() {
                        Some(AgentEvent::Finished(outcome)) => match &outcome.termination {
                            Termination::Paused(paused) => Some(paused.clone()),
                            _ => None,
                        },
                        _ => None,
                    };
                    if paused.is_some() {
                        // The resumed run's events continue this one's.
                        events.pop();
                    }
                    let context = m.into_context();
                    if let Some(violation) = history_violation(context.messages()) {
                        return Err(TestCaseError::fail(format!(
                            "the final history is invalid: {violation}\n{:#?}",
                            context.messages()
                        )));
                    }
                    let Some(paused) = paused else {
                        return Ok(());
                    };
                    // Resume it, through JSON, in a new machine, with answers for some of
                    // its waiting calls.
                    pauses += 1;
                    let text = serde_json::to_string(&*paused).expect("serializes");
                    let paused: PausedRun = serde_json::from_str(&text).expect("deserializes");
                    let mut answers = Resolutions::new();
                    for call in paused.pending() {
                        let choice = choices.next().copied().unwrap_or(0);
                        // Past a few pauses, every call gets an answer, so the run ends.
                        answers = match (choice % 4, pauses > 3) {
                            (_, true) | (2, _) => answers.result(call.id, "from outside"),
                            (0, _) => answers.approve(call.id),
                            (1, _) => answers.deny(call.id, "no"),
                            _ => answers,
                        };
                    }
                    m = match AgentMachine::resume(
                        config(setup),
                        fresh_context(),
                        catalog(),
                        &paused,
                        &answers,
                        RunOptions::new(),
                        now,
                    ) {
                        Ok(m) => m,
                        Err(e) => return Err(TestCaseError::fail(format!("resume: {e}"))),
                    };
                    running.clear();
                    waiting.clear();
                    stream.clear();
                }
                other => return Err(TestCaseError::fail(format!("unknown action {other:?}"))),
            }
            continue;
        }
        // The machine waits: an answer it asked for, its timer, the model's next event, or a
        // tool.
        if let Some(input) = waiting.pop_front() {
            m.handle(input, now);
            continue;
        }
        if let Some(at) = m.poll_timeout() {
            now = now.max(at);
            m.handle_timeout(now);
            continue;
        }
        let choice = usize::from(*choices.next().unwrap_or(&0));
        let tool_next = !running.is_empty() && (stream.is_empty() || choice % 2 == 0);
        if tool_next {
            let (id, name) = running.remove(choice / 2 % running.len());
            if choice % 5 == 0 {
                m.handle(
                    Input::ToolProgress(ToolProgress::new(id.clone(), "working")),
                    now,
                );
            }
            let failed = *failures.next().unwrap_or(&false);
            let result = ToolCallResult::new(id, name, "result", failed, Duration::ZERO);
            m.handle(Input::ToolDone(result.clone()), now);
            // A tool that reports twice, and one for a call nobody made: both change
            // nothing, and the machine says so.
            let stray = match choice % 7 {
                0 => Some(result),
                1 => Some(ToolCallResult::new(
                    "stranger",
                    "act",
                    "?",
                    false,
                    Duration::ZERO,
                )),
                _ => None,
            };
            if let Some(stray) = stray {
                prop_assert_eq!(m.handle(Input::ToolDone(stray), now), Handled::Ignored);
            }
            continue;
        }
        if let Some(input) = stream.pop_front() {
            m.handle(input, now);
            continue;
        }
        return Err(TestCaseError::fail(format!(
            "the machine waits for nothing the driver can give (a hang) after {step} steps\n\
             {events:#?}"
        )));
    }
    Err(TestCaseError::fail(format!(
        "no Finish after {MAX_STEPS} steps\n{events:#?}"
    )))
}

proptest! {
    #[test]
    fn every_run_ends_with_a_valid_history(
        setup in setup(),
        script in prop::collection::vec(response(), 1..8),
        world in world(),
    ) {
        play(&setup, &script, &world)?;
    }
}

/// The repeated-id cases the property test generates, pinned: they hung or panicked once.
#[test]
fn pinned_repeated_and_empty_ids() {
    let call = |id: &str| Block::Call {
        id: id.to_owned(),
        name: "act",
        args: vec!["{}".to_owned()],
    };
    let tools = |blocks: Vec<Block>| Response {
        blocks,
        usage: true,
        ending: Ending::Stop(StopReason::ToolUse),
    };
    let setup = Setup {
        max_turns: 5,
        early: true,
        output: false,
        final_answer: false,
        continuations: 1,
        approval: false,
    };
    let world = World {
        choices: vec![0, 1, 2, 3],
        verdicts: vec![3],
        failures: vec![false],
        cancel_at: None,
    };
    let scripts = [
        vec![tools(vec![call("x"), call("x")])],
        vec![tools(vec![call("call_0")]), tools(vec![call("call_0")])],
        vec![tools(vec![call(""), call("")]), tools(vec![call("")])],
        vec![tools(vec![
            call("call_0"),
            call("call_0_1"),
            call("call_0"),
        ])],
    ];
    for script in scripts {
        play(&setup, &script, &world).unwrap();
    }
}
