//! The examples' scripted scenarios, run through the public API with the examples' own code
//! (their scripts, agents and helpers are included from examples/ with `#[path]`).
// Each included example brings its own copy of examples/common/mod.rs, as in its own build.
#![allow(clippy::duplicate_mod)]

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/parallel_tools.rs"]
mod parallel_tools;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/coding_agent/main.rs"]
mod coding_agent;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/repl.rs"]
mod repl;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/vision.rs"]
mod vision;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/structured_output.rs"]
mod structured_output;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/subagents.rs"]
mod subagents;

#[allow(unreachable_pub)]
#[path = "../examples/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_loop::testing::{MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::{AgentEvent, AnthropicClient, ContentBlock, Message, Termination};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Every tool result of the conversation, in the model's order: (tool name, content, is_error).
fn tool_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for pair in messages.windows(2) {
        let [asked, answered] = pair else { continue };
        for (id, name, _) in asked.tool_uses() {
            for block in &answered.content {
                if let ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } = block
                {
                    if tool_use_id == id {
                        out.push((name.to_owned(), content.clone(), *is_error));
                    }
                }
            }
        }
    }
    out
}

fn weather(content: &str) -> Value {
    serde_json::from_str(content).unwrap_or_else(|e| panic!("not JSON ({e}): {content}"))
}

// ---------------------------------------------------------------------------------------------
// parallel_tools

const PARALLEL_FINAL: &str = "Paris: 18 °C with light rain. Tokyo: 24 °C and sunny. \
                              A 9700 km flight at 850 km/h takes about 11.4 hours.";

fn assert_parallel_results(messages: &[Message]) {
    let results = tool_results(messages);
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0].0, "get_weather");
    assert_eq!(
        weather(&results[0].1),
        json!({"city": "Paris", "temperature_c": 18, "conditions": "light rain"})
    );
    assert_eq!(results[1].0, "get_weather");
    assert_eq!(
        weather(&results[1].1),
        json!({"city": "Tokyo", "temperature_c": 24, "conditions": "sunny"})
    );
    assert_eq!(
        (results[2].0.as_str(), results[2].1.as_str()),
        ("calculator", "11.411765")
    );
    assert!(results.iter().all(|r| !r.2));
}

#[tokio::test(start_paused = true)]
async fn parallel_tools_run_concurrently_and_answer_in_order() {
    let client = ScriptedClient::new(parallel_tools::script());
    let mut agent = parallel_tools::build_agent(Arc::new(client.clone())).unwrap();
    let mut arrived = Vec::new();
    let (outcome, timer) = parallel_tools::run(&mut agent, parallel_tools::QUESTION, |event| {
        if let AgentEvent::ToolResult { id, .. } = event {
            arrived.push(id.clone());
        }
    })
    .await;
    let outcome = outcome.expect("a Finished event");
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, PARALLEL_FINAL);
    assert_eq!(outcome.turns, 2);

    // Results are shown as they finish (the calculator at once, Tokyo's 0.9 s lookup last)...
    assert_eq!(arrived, ["call_flight", "call_paris", "call_tokyo"]);
    // ...and the history keeps them in the model's order.
    assert_parallel_results(&agent.messages());
    let in_order: Vec<String> = timer
        .calls_in_order(&agent.messages())
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(in_order, ["get_weather", "get_weather", "calculator"]);

    // Concurrency, on tokio's paused clock: 0.6 s + 0.9 s of lookups in 0.9 s of wall time.
    let batches = timer.batches();
    assert_eq!(batches.len(), 1, "{batches:?}");
    let batch = &batches[0];
    assert_eq!((batch.turn, batch.calls), (1, 3));
    assert!(batch.sequential >= Duration::from_millis(1500), "{batch:?}");
    assert!(batch.wall >= Duration::from_millis(900), "{batch:?}");
    assert!(batch.wall < Duration::from_millis(1000), "{batch:?}");
    assert!(client.history_violations().is_empty());
}

#[tokio::test]
async fn parallel_tools_over_the_mock_server() {
    // The example's own path: real Anthropic client, loopback HTTP, SSE.
    let server = MockServer::start().await;
    for response in parallel_tools::script() {
        server.push(response);
    }
    let client = AnthropicClient::new("mock-key")
        .base_url(server.anthropic_base_url())
        .model("scripted");
    let mut agent = parallel_tools::build_agent(Arc::new(client)).unwrap();
    let (outcome, _) = parallel_tools::run(&mut agent, parallel_tools::QUESTION, |_| {}).await;
    let outcome = outcome.expect("a Finished event");
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, PARALLEL_FINAL);
    assert_parallel_results(&agent.messages());
    assert_eq!(server.remaining(), 0);
    assert!(server.history_violations().is_empty());
}

// ---------------------------------------------------------------------------------------------
// coding_agent

#[tokio::test]
async fn coding_agent_writes_reads_runs_edits_and_summarizes() {
    let dir = coding_agent::fresh_temp_dir("agent-loop-test-coding").unwrap();
    let ws = Arc::new(coding_agent::tools::Workspace::new(&dir).unwrap());
    let client = ScriptedClient::new(coding_agent::script());
    let mut agent = coding_agent::build_agent(Arc::new(client.clone()), &ws).unwrap();

    let events: Vec<AgentEvent> = futures::StreamExt::collect(agent.run(coding_agent::TASK)).await;
    let outcome = match events.last() {
        Some(AgentEvent::Finished(o)) => o.clone(),
        other => panic!("the last event is not Finished: {other:?}"),
    };
    let on_disk = std::fs::read_to_string(dir.join(coding_agent::NOTES));
    let results = tool_results(&agent.messages());
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.turns, 5);
    assert!(outcome.final_text.starts_with("Done. I created `notes.md`"));
    assert_eq!(on_disk.unwrap(), coding_agent::NOTES_EDITED);

    let names: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "write_file",
            "read_file",
            "read_file",
            "bash",
            "edit_file",
            "bash"
        ]
    );
    let written = coding_agent::NOTES_WRITTEN;
    assert_eq!(
        results[0].1,
        format!("created notes.md ({} bytes, 4 lines)", written.len())
    );
    assert_eq!(results[1].1, written);
    assert!(results[2].2, "reading outside is refused");
    assert!(
        results[2].1.contains("outside the working directory"),
        "{}",
        results[2].1
    );
    assert_eq!(results[3].1, "exit code: 0\nnotes.md\n4 notes.md");
    assert_eq!(
        results[4].1,
        "edited notes.md: replaced 1 line(s) with 1 line(s)"
    );
    // bash is exclusive: it ran after the edit of the same turn, and saw it.
    assert_eq!(
        results[5].1,
        format!("exit code: 0\n{}", coding_agent::NOTES_EDITED.trim_end())
    );
    let errors = results.iter().filter(|r| r.2).count();
    assert_eq!(errors, 1, "{results:?}");
    assert!(client.history_violations().is_empty());
}

// ---------------------------------------------------------------------------------------------
// repl

fn lines(input: &[&str]) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(input.len().max(1));
    for line in input {
        tx.try_send((*line).to_owned()).unwrap();
    }
    rx // the sender is dropped: end of input after these lines
}

#[tokio::test(start_paused = true)]
async fn repl_answers_piped_lines_and_exits_at_end_of_input() {
    let client = ScriptedClient::new(repl::script());
    let mut agent = repl::build_agent(Arc::new(client.clone())).unwrap();
    let mut input = lines(&[
        "hello",
        "",
        "what's the weather in Paris and London?",
        "a story",
    ]);
    let (_ctrl_c, mut interrupts) = mpsc::unbounded_channel();
    let mut out = Vec::new();
    repl::repl(
        &mut agent,
        &mut input,
        &mut interrupts,
        &mut out,
        repl::ReplOptions::default(),
    )
    .await
    .unwrap();
    let out = String::from_utf8(out).unwrap();

    let expected_in_order = [
        "you> hello\n",
        "Hello! I'm the scripted mock model",
        "[1 turn(s) · 310 in / 34 out tokens · 0% of input from cache]\n",
        "you> what's the weather in Paris and London?\n",
        "Let me check both cities.\n",
        "  → get_weather({\"city\":\"Paris\"})\n",
        "  → get_weather({\"city\":\"London\"})\n",
        "Paris has 18 °C and light rain",
        "[2 turn(s) · 833 in / 95 out tokens · 0% of input from cache]\n",
        "you> a story\n",
        "Once upon a time",
        "The end.\n[1 turn(s) · 512 in / 420 out tokens · 0% of input from cache]\n",
    ];
    let mut rest = out.as_str();
    for expected in expected_in_order {
        let at = rest
            .find(expected)
            .unwrap_or_else(|| panic!("{expected:?} missing (in order) from:\n{out}"));
        rest = &rest[at + expected.len()..];
    }
    assert!(out.contains("  ← get_weather ["), "{out}");
    assert!(out.contains("\"city\":\"London\""), "{out}");
    assert_eq!(client.remaining(), 0);
    assert!(client.history_violations().is_empty());
}

#[tokio::test(start_paused = true)]
async fn repl_ctrl_c_cancels_the_answer_and_keeps_the_session() {
    let client = ScriptedClient::new([
        ScriptedResponse::text("Once upon a time").then_stall(),
        ScriptedResponse::text("Still here.").usage_tokens(40, 3),
    ]);
    let mut agent = repl::build_agent(Arc::new(client.clone())).unwrap();
    let mut input = lines(&["tell me a story", "are you there?"]);
    let (ctrl_c, mut interrupts) = mpsc::unbounded_channel();
    // Press Ctrl-C once the first answer is streaming (its request has been sent).
    let watcher = client.clone();
    tokio::spawn(async move {
        while watcher.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        let _ = ctrl_c.send(());
    });
    let mut out = Vec::new();
    repl::repl(
        &mut agent,
        &mut input,
        &mut interrupts,
        &mut out,
        repl::ReplOptions::default(),
    )
    .await
    .unwrap();
    let out = String::from_utf8(out).unwrap();

    assert!(
        out.contains("Once upon a time\n^C (cancelling this answer)\n[cancelled · "),
        "{out}"
    );
    assert!(
        out.contains("you> are you there?\nStill here.\n[1 turn(s) · 40 in / 3 out tokens · 0% of input from cache]"),
        "{out}"
    );
    assert!(!out.contains("bye"), "one Ctrl-C does not exit: {out}");
    assert_eq!(client.requests().len(), 2);
    assert!(client.history_violations().is_empty());
}

#[tokio::test]
async fn repl_exits_on_a_second_ctrl_c_at_the_prompt() {
    let client = ScriptedClient::new([]);
    let mut agent = repl::build_agent(Arc::new(client.clone())).unwrap();
    // Input stays open: only Ctrl-C can end the session.
    let (_keep_open, mut input) = mpsc::channel::<String>(1);
    let (ctrl_c, mut interrupts) = mpsc::unbounded_channel();
    ctrl_c.send(()).unwrap();
    ctrl_c.send(()).unwrap();
    let mut out = Vec::new();
    repl::repl(
        &mut agent,
        &mut input,
        &mut interrupts,
        &mut out,
        repl::ReplOptions::default(),
    )
    .await
    .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("(press Ctrl-C again to exit"), "{out}");
    assert!(out.ends_with("bye\n"), "{out}");
    assert!(client.requests().is_empty());
}

// ---------------------------------------------------------------------------------------------
// vision and structured_output

#[tokio::test]
async fn vision_sends_the_flag_and_returns_the_chart_to_the_model() {
    let client = ScriptedClient::new(vision::script());
    let mut agent = vision::build_agent(Arc::new(client.clone())).unwrap();
    let outcome = vision::run(&mut agent, |_| {}).await.unwrap();
    assert_eq!(outcome.termination, Termination::Completed);
    assert!(outcome.final_text.contains("France"));
    let first = &client.requests()[0];
    let image = agent_loop::media::Image::png(&vision::flag()).unwrap();
    assert_eq!(image.dimensions(), Some((96, 64)));
    assert!(first.messages[0]
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::Image { source } if source == image.source())));
    let second = &client.requests()[1];
    let images = second
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolResult { images, .. } => Some(images.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(images.len(), 1);
    assert!(client.history_violations().is_empty());
}

#[tokio::test]
async fn structured_output_extracts_the_invoice_after_one_correction() {
    let client = ScriptedClient::new(structured_output::script());
    let mut agent = structured_output::build_agent(Arc::new(client.clone())).unwrap();
    let outcome = structured_output::run(&mut agent, |_| {}).await.unwrap();
    assert_eq!(outcome.turns, 2);
    let invoice: structured_output::Invoice = outcome.parse_output().unwrap();
    assert_eq!(invoice.number, "INV-2041");
    assert_eq!(invoice.lines[0].quantity, 4);
    assert_eq!(invoice.currency, "EUR");
}

// ---------------------------------------------------------------------------------------------
// subagents

#[tokio::test]
async fn subagents_fans_out_to_three_workers_then_hands_off_to_the_editor() {
    let lead = ScriptedClient::new(subagents::lead_script());
    let workers: Vec<ScriptedClient> = subagents::WORKERS
        .iter()
        .map(|(_, _, _, tool, answer)| ScriptedClient::new(subagents::worker_script(tool, answer)))
        .collect();
    let editor = ScriptedClient::new(subagents::editor_script());
    let clients = subagents::Clients {
        lead: Arc::new(lead.clone()),
        workers: [
            Arc::new(workers[0].clone()),
            Arc::new(workers[1].clone()),
            Arc::new(workers[2].clone()),
        ],
        editor: Arc::new(editor.clone()),
    };
    let mut agent = subagents::build_lead(clients).unwrap();
    let mut lines = Vec::new();
    let outcome = subagents::run(&mut agent, subagents::QUESTION, |line| lines.push(line))
        .await
        .expect("a Finished event");
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, subagents::PLAN);
    // Every worker ran once, its tool inside its run, indented one level.
    for (name, _, _, tool, answer) in subagents::WORKERS {
        assert!(
            lines.contains(&format!("    {name} ▸ turn 1")),
            "{lines:#?}"
        );
        assert!(
            lines.contains(&format!("    {name} ← {tool}: {answer}")),
            "{lines:#?}"
        );
        assert!(
            lines.contains(&format!("lead ← {name}: {answer}")),
            "{lines:#?}"
        );
    }
    let handoff = lines
        .iter()
        .position(|l| l == "lead ⇢ hands the conversation to editor")
        .expect("the handoff is shown");
    assert_eq!(lines[handoff + 1], "editor ▸ turn 3");
    // Usage: the lead's and the editor's turns, and the three workers' rolled up.
    let paths: Vec<String> = outcome
        .sub_agents
        .iter()
        .map(|s| s.path.to_string())
        .collect();
    assert_eq!(paths.len(), 3);
    for name in [
        "weather#call_weather",
        "museums#call_museums",
        "food#call_food",
    ] {
        assert!(paths.contains(&name.to_owned()), "{paths:?}");
    }
    assert_eq!(
        outcome.usage.input_tokens,
        420 + 640 + 900 + 3 * (120 + 160)
    );
    // The editor was asked with its own system prompt, on the whole history.
    let request = &editor.requests()[0];
    assert!(request
        .system
        .as_deref()
        .unwrap()
        .starts_with("You write short"));
    assert_eq!(request.messages.len(), 5);
    for client in workers.iter().chain([&lead, &editor]) {
        assert!(client.history_violations().is_empty());
        assert_eq!(client.remaining(), 0);
    }
}

/// The examples' renderer follows `AgentEvent::Retry`'s rule: the partial text of the
/// abandoned attempt is marked discarded, and the answer sent again starts on its own line.
#[test]
fn the_renderer_marks_the_text_a_retry_abandons() {
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta {
            text: "The answer is".into(),
        },
        retry_event(1),
        // A retry before any text of its attempt marks nothing.
        retry_event(2),
        AgentEvent::TextDelta { text: "42".into() },
    ];
    let mut out = Vec::new();
    let mut partial = false;
    for event in &events {
        assert!(common::render_to(&mut out, &mut partial, event).is_none());
    }
    let out = String::from_utf8(out).unwrap();
    let marker = "✗ [discarded: the answer above broke off; the turn starts again]";
    assert_eq!(out.matches(marker).count(), 1, "{out}");
    let discarded = out.find("The answer is").unwrap();
    let first_mark = out.find(marker).unwrap();
    let answer = out.find("42").unwrap();
    assert!(discarded < first_mark && first_mark < answer, "{out}");
    assert!(out.contains("The answer is\n✗ [discarded"), "{out}");
}

fn retry_event(attempt: u32) -> AgentEvent {
    AgentEvent::Retry {
        attempt,
        delay: Duration::ZERO,
        error: "HTTP 500".into(),
        usage: agent_loop::Usage::default(),
        cost: agent_loop::pricing::Cost::default(),
    }
}

/// A fallback voids the attempt's text as a retry does: the renderer marks it discarded and
/// says which model takes over.
#[test]
fn the_renderer_marks_the_text_a_fallback_abandons() {
    let events = [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta {
            text: "The answer is".into(),
        },
        AgentEvent::Fallback {
            from: "big-model".into(),
            to: "small-model".into(),
            error: "HTTP 529".into(),
        },
        AgentEvent::TextDelta { text: "42".into() },
    ];
    let mut out = Vec::new();
    let mut partial = false;
    for event in &events {
        assert!(common::render_to(&mut out, &mut partial, event).is_none());
    }
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("The answer is\n✗ [discarded: the answer above broke off; the turn starts again]\n(big-model failed: HTTP 529; falling back to small-model)\n42"),
        "{out}"
    );
}

/// The sub-agent tree drops what an attempt said when a retry voids it: the agent's line
/// holds only the text of the attempt that counted.
#[test]
fn the_subagent_tree_drops_the_text_a_retry_abandons() {
    let mut tree = subagents::Tree::new("lead");
    let mut lines = Vec::new();
    for event in [
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta {
            text: "The answer is".into(),
        },
        retry_event(1),
        AgentEvent::TextDelta { text: "42".into() },
        AgentEvent::TurnEnd {
            turn: 1,
            stop_reason: agent_loop::StopReason::EndTurn,
            usage: agent_loop::Usage::default(),
            cost: agent_loop::pricing::Cost::default(),
        },
    ] {
        lines.extend(tree.lines(&event));
    }
    assert_eq!(lines, ["lead ▸ turn 1", "lead says: 42"]);
}
