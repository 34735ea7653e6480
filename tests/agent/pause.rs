//! Pause and resume, through the public API: a run that stops for a person's approval or a
//! deferred tool's result, is kept as data (serde), and continues in another agent (as in
//! another process) with the same events and the same final history as a run that never
//! paused; resuming twice, unknown calls and missing tools refused; sessions saved on their
//! own, per turn, appended.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::agent::{
    AgentHooks, Resolutions, RunOptions, StructuredOutput, ToolDecision, WaitsFor,
};
use agent_loop::error::{ResumeError, SessionError};
use agent_loop::session::{self, MemoryStore, SessionEntry, SessionStore};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::{DeferredTool, FnTool, ToolCall};
use agent_loop::{
    Agent, AgentBuilder, AgentEvent, Error, Message, PausedRun, RunOutcome, Termination, ToolError,
};
use futures::StreamExt;
use serde_json::json;

use crate::common;
use common::agent::read_tool;
use common::grammar::grammar_violation;

/// A response that reads and deletes a file, then one that says it is done.
fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("Let me look.")
            .then_tool_call("c1", "read", json!({"path": "a.txt"}))
            .then_tool_call("c2", "delete", json!({"path": "a.txt"}))
            .usage_tokens(100, 20),
        ScriptedResponse::text("Deleted a.txt.").usage_tokens(150, 5),
    ]
}

/// The agent's tools; `deletes` counts the deletions that ran.
fn builder(client: ScriptedClient, deletes: Arc<AtomicUsize>) -> AgentBuilder {
    let read = read_tool();
    let delete = FnTool::new(
        "delete",
        "Deletes a file.",
        move |_: serde_json::Value, _ctx| {
            let deletes = deletes.clone();
            async move {
                deletes.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("deleted")
            }
        },
    );
    Agent::builder(client)
        .tool(read)
        .tool(delete)
        .policy(RunPolicy::new().early_read_only_tools(false))
}

/// A run's events and its outcome (the last event's).
pub(crate) async fn collect(
    stream: impl futures::Stream<Item = AgentEvent>,
) -> (Vec<AgentEvent>, RunOutcome) {
    let events: Vec<AgentEvent> = stream.collect().await;
    let outcome = match events.last() {
        Some(AgentEvent::Finished(outcome)) => outcome.clone(),
        other => panic!("a run ends with Finished, not {other:?}"),
    };
    (events, outcome)
}

/// The paused run an outcome ends with.
pub(crate) fn paused(outcome: &RunOutcome) -> PausedRun {
    match &outcome.termination {
        Termination::Paused(paused) => (**paused).clone(),
        other => panic!("expected a pause, got {other}"),
    }
}

/// Events with durations zeroed (tool timings differ from run to run).
fn timeless(events: &[AgentEvent]) -> Vec<AgentEvent> {
    events
        .iter()
        .map(|e| match e.clone() {
            AgentEvent::ToolResult {
                id,
                name,
                content,
                is_error,
                ..
            } => AgentEvent::ToolResult {
                id,
                name,
                content,
                is_error,
                duration: Duration::ZERO,
            },
            e => e,
        })
        .collect()
}

/// Round-trips through JSON, as a paused run kept in a file or a database does.
fn through_json(paused: &PausedRun) -> PausedRun {
    let text = serde_json::to_string(paused).expect("a paused run serializes");
    serde_json::from_str(&text).expect("and deserializes")
}

#[tokio::test]
async fn an_approval_pause_resumed_elsewhere_gives_the_events_and_history_of_an_uninterrupted_run()
{
    // The run that never paused: a person approves at once, in the hook.
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut straight = builder(ScriptedClient::new(script()), deletes.clone())
        .build()
        .unwrap();
    let (straight_events, straight_outcome) = collect(straight.run("Delete a.txt")).await;
    assert_eq!(straight_outcome.termination, Termination::Completed);
    assert_eq!(deletes.swap(0, Ordering::SeqCst), 1);

    // The same run, paused for the person.
    let client = ScriptedClient::new(script());
    let mut first = builder(client.clone(), deletes.clone())
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (before, outcome) = collect(first.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "nothing runs before the verdict"
    );
    assert!(
        !before.iter().any(|e| matches!(
            e,
            AgentEvent::ToolResult { .. } | AgentEvent::TurnEnd { .. }
        )),
        "nothing of the batch ran, and its turn stays open: {before:?}"
    );
    let pending = paused.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].id.as_str(), pending[0].name.as_str()),
        ("c2", "delete")
    );
    assert_eq!(pending[0].waits_for, WaitsFor::Approval);
    assert_eq!(pending[0].input, json!({"path": "a.txt"}));
    assert_eq!(paused.turn(), 1);
    assert_eq!(paused.usage().input_tokens, 100);

    // Another agent, as another process would build it, from the paused run's JSON.
    let mut second = builder(client.clone(), deletes.clone())
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (after, resumed) =
        collect(second.resume(&through_json(&paused), Resolutions::new().approve("c2"))).await;
    assert_eq!(deletes.load(Ordering::SeqCst), 1);

    let mut joined = before[..before.len() - 1].to_vec();
    joined.extend(after.iter().cloned());
    assert_eq!(timeless(&joined), timeless(&straight_events));
    assert_eq!(grammar_violation(&joined), None);
    assert_eq!(
        resumed, straight_outcome,
        "turns, usage and text carry over"
    );
    assert_eq!(second.messages(), straight.messages());
    second
        .messages()
        .iter()
        .for_each(|m| assert!(!m.content.is_empty()));
}

#[tokio::test]
async fn a_deferred_tools_result_comes_from_outside_after_the_other_calls_ran() {
    let ask = DeferredTool::new("ask_user", "Asks the user.").input_schema(json!({
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"]
    }));
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "read", json!({"path": "a"})).then_tool_call(
            "c2",
            "ask_user",
            json!({"question": "Which colour?"}),
        ),
        ScriptedResponse::text("Blue it is."),
    ]);
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = builder(client.clone(), deletes.clone())
        .tool(ask)
        .build()
        .unwrap();
    let (before, outcome) = collect(agent.run("Paint it")).await;
    let paused = paused(&outcome);
    // The read ran; the question was asked (its ToolCall), its answer waits.
    assert!(before.iter().any(
        |e| matches!(e, AgentEvent::ToolResult { id, content, .. } if id == "c1" && content == "hello")
    ));
    assert!(before
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolCall { id, .. } if id == "c2")));
    let pending = paused.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].waits_for, WaitsFor::Result);

    let (after, outcome) = collect(agent.resume(
        &through_json(&paused),
        Resolutions::new().result("c2", "blue"),
    ))
    .await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "Blue it is.");
    assert!(matches!(
        &after[0],
        AgentEvent::ToolResult { id, content, is_error: false, .. } if id == "c2" && content == "blue"
    ));
    // The model was sent both results, in call order.
    let request = client.last_request().unwrap();
    let results: Vec<(String, String)> = request.messages[request.messages.len() - 1]
        .content
        .iter()
        .filter_map(|b| match b {
            agent_loop::ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => Some((tool_use_id.clone(), content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [("c1".into(), "hello".into()), ("c2".into(), "blue".into())]
    );
    let mut joined = before[..before.len() - 1].to_vec();
    joined.extend(after);
    assert_eq!(grammar_violation(&joined), None);
}

#[tokio::test]
async fn a_pause_is_resumed_once_and_bad_resolutions_change_nothing() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let client = ScriptedClient::new(script());
    let mut agent = builder(client, deletes.clone())
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    assert_eq!(agent.paused().as_ref(), Some(&paused));

    // An answer for a call that does not wait: refused, nothing run, still resumable.
    let (events, refused) =
        collect(agent.resume(&paused, Resolutions::new().approve("c1").approve("c2"))).await;
    assert_eq!(events.len(), 1);
    match refused.termination {
        Termination::Error(Error::Resume(ResumeError::UnknownCall { id, waiting })) => {
            assert_eq!((id.as_str(), waiting.as_str()), ("c1", "c2"));
        }
        other => panic!("{other}"),
    }
    assert_eq!(agent.paused().as_ref(), Some(&paused), "nothing is lost");

    let (_, done) = collect(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert_eq!(done.termination, Termination::Completed);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);

    // Again: refused, and the delete does not run twice.
    let (_, again) = collect(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert!(
        matches!(
            &again.termination,
            Termination::Error(Error::Resume(ResumeError::AlreadyResumed { pause })) if pause == paused.id()
        ),
        "{}",
        again.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn approving_a_tool_the_agent_no_longer_has_is_refused_clearly() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = builder(ScriptedClient::new(script()), deletes)
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);

    let mut without = Agent::builder(ScriptedClient::new(script()))
        .build()
        .unwrap();
    let (_, refused) = collect(without.resume(&paused, Resolutions::new().approve("c2"))).await;
    let Termination::Error(error) = refused.termination else {
        panic!("refused")
    };
    assert!(
        matches!(&error, Error::Resume(ResumeError::MissingTool { tool, .. }) if tool == "delete"),
        "{error}"
    );
    assert!(error.to_string().contains("register it"), "{error}");
    // A denial needs no tool: the model reads it.
    let (_, denied) =
        collect(without.resume(&paused, Resolutions::new().deny("c2", "not today"))).await;
    assert_eq!(denied.termination, Termination::Completed);
    let history = without.messages();
    let answered = history.iter().flat_map(|m| m.content.clone()).any(|b| {
        matches!(b, agent_loop::ContentBlock::ToolResult { tool_use_id, content, is_error: true, .. }
            if tool_use_id == "c2" && content.contains("not today"))
    });
    assert!(answered, "{history:?}");
}

#[tokio::test]
async fn calls_left_unanswered_keep_waiting_and_a_hooks_verdicts_wait_with_them() {
    struct DenyReads;
    #[agent_loop::async_trait]
    impl AgentHooks for DenyReads {
        async fn before_tool(&self, call: &ToolCall) -> ToolDecision {
            match call.name.as_str() {
                "read" => ToolDecision::Deny("no reading".into()),
                _ => ToolDecision::Pause,
            }
        }
    }
    let deletes = Arc::new(AtomicUsize::new(0));
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "read", json!({}))
            .then_tool_call("c2", "delete", json!({"path": "x"}))
            .then_tool_call("c3", "delete", json!({"path": "y"})),
        ScriptedResponse::text("Done."),
    ]);
    let mut agent = builder(client, deletes.clone())
        .hooks(DenyReads)
        .build()
        .unwrap();
    let (first, outcome) = collect(agent.run("Clean up")).await;
    let paused1 = paused(&outcome);
    let ids: Vec<String> = paused1.pending().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["c2", "c3"]);
    assert!(
        !first
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolResult { .. })),
        "the hook's denial waits with the batch: {first:?}"
    );

    // One verdict: the run pauses again at once, for the other.
    let (second, outcome) = collect(agent.resume(&paused1, Resolutions::new().approve("c2"))).await;
    assert_eq!(second.len(), 1, "{second:?}");
    let paused2 = paused(&outcome);
    assert_ne!(paused2.id(), paused1.id());
    let ids: Vec<String> = paused2.pending().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["c3"]);
    assert_eq!(deletes.load(Ordering::SeqCst), 0);

    let (third, outcome) =
        collect(agent.resume(&paused2, Resolutions::new().deny("c3", "keep y"))).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    let results: Vec<(String, bool)> = third
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { id, is_error, .. } => Some((id.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("c1".into(), true),
            ("c3".into(), true),
            ("c2".into(), false)
        ],
        "the denials first, then the run, as an uninterrupted run gives them"
    );
}

#[tokio::test]
async fn a_new_run_leaves_a_pause_behind_with_a_valid_history() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut script = script();
    script[1] = ScriptedResponse::text("OK, something else.");
    let client = ScriptedClient::new(script);
    let mut agent = builder(client.clone(), deletes.clone())
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    let (_, next) = collect(agent.run("Never mind.")).await;
    assert_eq!(next.termination, Termination::Completed);
    assert_eq!(next.final_text, "OK, something else.");
    // The waiting calls were answered as interrupted in what the model was sent.
    let sent = client.last_request().unwrap();
    let answered: Vec<(String, bool)> = sent.messages[2]
        .content
        .iter()
        .filter_map(|b| match b {
            agent_loop::ContentBlock::ToolResult {
                tool_use_id,
                is_error,
                ..
            } => Some((tool_use_id.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(answered, [("c1".into(), true), ("c2".into(), true)]);
    agent.context().validate().unwrap();
    let (_, refused) = collect(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert!(matches!(
        refused.termination,
        Termination::Error(Error::Resume(ResumeError::AlreadyResumed { .. }))
    ));
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_typed_answer_survives_a_pause() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Verdict {
        ok: bool,
    }
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "delete", json!({"path": "a"})),
        ScriptedResponse::tool_call("c2", "final_answer", json!({"ok": "yes"})),
        ScriptedResponse::tool_call("c3", "final_answer", json!({"ok": true})),
    ]);
    let mut agent = builder(client, Arc::new(AtomicUsize::new(0)))
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let options = || RunOptions::new().output(StructuredOutput::of::<Verdict>().unwrap());
    let (_, outcome) = collect(agent.run_with("Delete a", options())).await;
    let paused = through_json(&paused(&outcome));
    // Resumed without the options: the paused run's schema still checks the answer.
    let mut other = builder(ScriptedClient::new([]), Arc::new(AtomicUsize::new(0)))
        .build()
        .unwrap();
    let (_, wrong) = collect(
        other.resume_with(
            &paused,
            Resolutions::new().approve("c1"),
            RunOptions::new().output(
                StructuredOutput::of::<Verdict>()
                    .unwrap()
                    .name("other")
                    .unwrap(),
            ),
        ),
    )
    .await;
    assert!(matches!(
        wrong.termination,
        Termination::Error(Error::Resume(ResumeError::Output(_)))
    ));
    let (_, done) = collect(agent.resume(&paused, Resolutions::new().approve("c1"))).await;
    assert_eq!(done.termination, Termination::Completed);
    assert_eq!(
        done.output,
        Some(json!({"ok": true})),
        "the wrong answer was refused first"
    );

    // Resumed with the typed answer given back: the same tool, so it is taken.
    let mut typed = builder(
        ScriptedClient::new([ScriptedResponse::tool_call(
            "c4",
            "final_answer",
            json!({"ok": false}),
        )]),
        Arc::new(AtomicUsize::new(0)),
    )
    .build()
    .unwrap();
    let (_, done) =
        collect(typed.resume_with(&paused, Resolutions::new().approve("c1"), options())).await;
    assert_eq!(done.termination, Termination::Completed);
    assert!(!done.parse_output::<Verdict>().unwrap().ok);
}

// ----- sessions -----------------------------------------------------------------------

fn session_agent(
    client: ScriptedClient,
    store: Arc<dyn SessionStore>,
    deletes: Arc<AtomicUsize>,
) -> Agent {
    builder(client, deletes)
        .session(store, "chat-1")
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap()
}

/// The version of the session's newest `Conversation` entry (where loading starts): 1 when
/// only the first save wrote the conversation whole.
async fn first_whole_entry(store: &MemoryStore) -> u64 {
    let stored = store.load("chat-1").await.unwrap().expect("a session");
    assert!(matches!(
        stored.entries.first(),
        Some((_, SessionEntry::Conversation { .. }))
    ));
    stored.entries[0].0
}

/// The session's entries, as the store keeps them (from the newest `Conversation` on).
async fn entries(store: &MemoryStore) -> Vec<SessionEntry> {
    store
        .load("chat-1")
        .await
        .unwrap()
        .map(|s| s.entries.into_iter().map(|(_, e)| e).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_session_keeps_each_turn_appended_and_a_pause_another_agent_resumes() {
    let store = Arc::new(MemoryStore::new());
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut script = script();
    script.push(ScriptedResponse::text("Hello again."));
    let client = ScriptedClient::new(script);
    let mut first = session_agent(client.clone(), store.clone(), deletes.clone());
    let (_, outcome) = collect(first.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    let kept = entries(&store).await;
    let kinds: Vec<&str> = kept.iter().map(SessionEntry::kind).collect();
    // The run's lease, its turn whole (the input with it), the pause, the lease released.
    assert_eq!(
        kinds,
        ["conversation", "lease", "messages", "paused", "released"],
        "{kept:?}"
    );

    // Another agent (a restart): it loads the session and finds the pause.
    let mut second = session_agent(client.clone(), store.clone(), deletes.clone());
    let found = second
        .load_session()
        .await
        .unwrap()
        .expect("the session waits");
    assert_eq!(found, paused);
    let (_, done) = collect(second.resume(&found, Resolutions::new().approve("c2"))).await;
    assert_eq!(done.termination, Termination::Completed);
    let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
    assert_eq!(stored.conversation.messages, *second.messages());
    assert_eq!(stored.pause, None);

    // The first agent (its view of the session is stale) cannot resume it too: the store
    // refuses its claim.
    let (_, again) = collect(first.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert!(
        matches!(
            again.termination,
            Termination::Error(Error::Resume(ResumeError::AlreadyResumed { .. }))
        ),
        "{}",
        again.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1, "never deleted twice");

    // A later run appends only what it added: its lease, its turn whole (the input and
    // the answer) with the lease renewed, and the lease released.
    let before = entries(&store).await.len();
    let (_, _) = collect(second.run("Hi")).await;
    let after = entries(&store).await;
    let added: Vec<&str> = after[before..].iter().map(SessionEntry::kind).collect();
    assert_eq!(added, ["lease", "messages", "lease", "released"]);
    match &after[before + 1] {
        SessionEntry::Messages { start, messages } => {
            assert_eq!(*start as usize + messages.len(), second.messages().len());
            assert_eq!(messages.len(), 2, "{messages:?}");
            assert_eq!(messages[0].text(), "Hi");
        }
        other => panic!("{other:?}"),
    }
}

/// Two agents that loaded one session take turns: the second run finds the store moved on
/// (its view was stale), reads it again before anything of its own is written, and goes on
/// from the first's run. Nothing is lost, merged or stored twice.
#[tokio::test]
async fn two_writers_on_one_session_take_turns_and_lose_nothing() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let client = ScriptedClient::new([
        ScriptedResponse::text("one"),
        ScriptedResponse::text("two"),
        ScriptedResponse::text("three"),
    ]);
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut a = session_agent(client.clone(), store.clone(), deletes.clone());
    let mut b = session_agent(client.clone(), store.clone(), deletes.clone());
    a.load_session().await.unwrap();
    b.load_session().await.unwrap();
    let (_, first) = collect(a.run("from a")).await;
    assert_eq!(first.termination, Termination::Completed);
    let (_, second) = collect(b.run("from b")).await;
    assert_eq!(second.termination, Termination::Completed);
    let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
    let texts: Vec<String> = stored
        .conversation
        .messages
        .iter()
        .map(Message::text)
        .collect();
    assert_eq!(texts, ["from a", "one", "from b", "two"]);
    assert_eq!(stored.conversation.messages, *b.messages());
}

#[tokio::test]
async fn a_session_replays_to_the_agents_conversation_through_compaction() {
    // A small window: old tool outputs are elided and old turns dropped as the runs go on,
    // rewriting messages already saved.
    let big = "x".repeat(3000);
    let mut script = Vec::new();
    for i in 0..12 {
        script.push(ScriptedResponse::tool_call(
            format!("c{i}"),
            "read",
            json!({"path": format!("{i}.txt")}),
        ));
        script.push(ScriptedResponse::text(format!("answer {i}")));
    }
    let client = ScriptedClient::new(script);
    let store = Arc::new(MemoryStore::new());
    let read = FnTool::new(
        "read",
        "Reads a file.",
        move |_: serde_json::Value, _ctx| {
            let big = big.clone();
            async move { Ok::<_, ToolError>(big) }
        },
    )
    .read_only(true);
    let mut agent = Agent::builder(client)
        .tool(read)
        .context(agent_loop::ContextManager::new(
            agent_loop::context::ContextConfig::default()
                .context_window(6000)
                .output_reserve(1000)
                .summarize(false),
        ))
        .session(store.clone(), "chat-1")
        .build()
        .unwrap();
    let mut compacted = 0;
    for i in 0..12 {
        let (events, outcome) = collect(agent.run(format!("question {i}"))).await;
        assert_eq!(outcome.termination, Termination::Completed, "{events:?}");
        compacted += events
            .iter()
            .filter(|e| matches!(e, AgentEvent::Compacted { .. }))
            .count();
        let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
        assert_eq!(
            stored.conversation.messages,
            *agent.messages(),
            "after run {i}"
        );
    }
    assert!(compacted > 0, "the test compacts");
    // Each save carried what changed, not the whole conversation again.
    assert_eq!(
        first_whole_entry(&store).await,
        1,
        "only the first save writes it whole"
    );
}

#[tokio::test]
async fn answers_applied_at_the_resume_itself_are_saved_too() {
    // A denial answers the batch's last call at once: the results, and the turn's end, come
    // before the resumed run's first save.
    for answers in [
        Resolutions::new().deny("c2", "no"),
        Resolutions::new().result("c2", "done by hand"),
    ] {
        let store = Arc::new(MemoryStore::new());
        let deletes = Arc::new(AtomicUsize::new(0));
        let client = ScriptedClient::new([
            ScriptedResponse::tool_call("c2", "delete", json!({"path": "a.txt"})),
            ScriptedResponse::text("OK."),
        ]);
        let mut first = session_agent(client.clone(), store.clone(), deletes.clone());
        let (_, outcome) = collect(first.run("Delete a.txt")).await;
        let paused = paused(&outcome);
        let mut second = session_agent(client.clone(), store.clone(), deletes.clone());
        second.load_session().await.unwrap();
        let (_, done) = collect(second.resume(&paused, answers)).await;
        assert_eq!(done.termination, Termination::Completed);
        let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
        assert_eq!(stored.conversation.messages, *second.messages());
        assert_eq!(deletes.load(Ordering::SeqCst), 0);
        assert_eq!(
            first_whole_entry(&store).await,
            1,
            "the resume saves what it added, not the conversation again"
        );
    }
}

#[tokio::test]
async fn a_sessions_system_prompt_is_kept_over_the_agents() {
    let store = Arc::new(MemoryStore::new());
    let conversation = agent_loop::context::Conversation::new(
        Some("The session's prompt.".into()),
        vec![Message::user("Hi"), Message::assistant("Hello.")],
    );
    store
        .append("chat-1", 0, &[SessionEntry::Conversation { conversation }])
        .await
        .unwrap();
    let client = ScriptedClient::new([ScriptedResponse::text("Sure.")]);
    let mut agent = Agent::builder(client.clone())
        .system("The agent's prompt.")
        .session(store.clone(), "chat-1")
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Again?")).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let sent = client.last_request().unwrap();
    assert_eq!(sent.system.as_deref(), Some("The session's prompt."));
    let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
    assert_eq!(
        stored.conversation.system.as_deref(),
        Some("The session's prompt.")
    );
}

#[tokio::test]
async fn a_session_without_a_system_prompt_takes_the_agents() {
    let store = Arc::new(MemoryStore::new());
    let conversation = agent_loop::context::Conversation::new(
        None,
        vec![Message::user("Hi"), Message::assistant("Hello.")],
    );
    store
        .append("chat-1", 0, &[SessionEntry::Conversation { conversation }])
        .await
        .unwrap();
    let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("Sure.")]))
        .system("Be brief.")
        .session(store.clone(), "chat-1")
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Again?")).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
    assert_eq!(stored.conversation.system.as_deref(), Some("Be brief."));
    assert_eq!(stored.conversation.messages, *agent.messages());
    assert_eq!(stored.conversation.messages.len(), 4);
}

#[tokio::test]
async fn a_stored_conversation_no_provider_accepts_is_a_clear_error() {
    let store = Arc::new(MemoryStore::new());
    // Starts with the assistant: no repair makes that a valid history.
    let conversation =
        agent_loop::context::Conversation::new(None, vec![Message::assistant("Hello.")]);
    store
        .append("chat-1", 0, &[SessionEntry::Conversation { conversation }])
        .await
        .unwrap();
    let client = ScriptedClient::new([ScriptedResponse::text("never sent")]);
    let mut agent = Agent::builder(client.clone())
        .session(store.clone(), "chat-1")
        .build()
        .unwrap();
    let error = agent.load_session().await.unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Session(SessionError::Corrupt { version: 1, .. })
        ),
        "{error}"
    );
    let (_, outcome) = collect(agent.run("Hi")).await;
    assert!(matches!(
        outcome.termination,
        Termination::Error(Error::Session(SessionError::Corrupt { .. }))
    ));
    assert_eq!(client.requests().len(), 0, "nothing was sent");
    assert!(
        agent.messages().is_empty(),
        "and the agent's conversation is as it was"
    );
}

#[tokio::test]
async fn a_paused_run_that_does_not_hold_together_is_refused() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = builder(ScriptedClient::new(script()), deletes.clone())
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    let json = serde_json::to_value(&paused).unwrap();
    let tampered = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut json = json.clone();
        change(&mut json);
        serde_json::from_value::<PausedRun>(json).unwrap()
    };
    let broken = [
        // A result too few, or too many.
        tampered(&|j| {
            j["state"]["results"].as_array_mut().unwrap().pop();
        }),
        tampered(&|j| {
            j["state"]["announced"]
                .as_array_mut()
                .unwrap()
                .push(json!(false));
        }),
        // A waiting call past the end, one already answered, or one waiting twice.
        tampered(&|j| j["state"]["waiting"]["verdicts"][1][0] = json!(7)),
        tampered(&|j| j["state"]["waiting"]["verdicts"][0] = json!([1, null])),
        tampered(&|j| {
            j["state"]["results"][1] = json!({
                "id": "c2", "name": "delete", "content": "x", "is_error": false,
                "duration": {"secs": 0, "nanos": 0}
            })
        }),
        // The conversation's last response holds no calls.
        tampered(&|j| {
            j["conversation"]["messages"]
                .as_array_mut()
                .unwrap()
                .push(json!({"role": "user", "content": [{"type": "text", "text": "hm"}]}))
        }),
    ];
    for paused in broken {
        let mut fresh = builder(ScriptedClient::new(script()), deletes.clone())
            .build()
            .unwrap();
        let (_, refused) = collect(fresh.resume(&paused, Resolutions::new().approve("c2"))).await;
        assert!(
            matches!(
                refused.termination,
                Termination::Error(Error::Resume(ResumeError::Damaged(_)))
            ),
            "{}",
            refused.termination
        );
    }
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_read_only_tool_that_needs_approval_does_not_start_early() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let read = FnTool::new(
        "read",
        "Reads a file.",
        move |_: serde_json::Value, _ctx| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("hello")
            }
        },
    )
    .read_only(true);
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "read", json!({"path": "secret"}))
            .then_text("Reading it."),
        ScriptedResponse::text("It says hello."),
    ]);
    let mut agent = Agent::builder(client)
        .tool(read)
        .policy(
            RunPolicy::new()
                .early_read_only_tools(true)
                .require_approval("read"),
        )
        .build()
        .unwrap();
    let (events, outcome) = collect(agent.run("Read the secret")).await;
    let paused = paused(&outcome);
    assert_eq!(reads.load(Ordering::SeqCst), 0, "{events:?}");
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolCall { .. })));
    let (_, done) = collect(agent.resume(&paused, Resolutions::new().approve("c1"))).await;
    assert_eq!(done.termination, Termination::Completed);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_deferred_call_can_be_denied_or_left_waiting_again() {
    let ask = DeferredTool::new("ask_user", "Asks the user.");
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "ask_user", json!({"q": "?"})),
        ScriptedResponse::text("Fine, I will not ask."),
    ]);
    let mut agent = Agent::builder(client).tool(ask).build().unwrap();
    let (_, outcome) = collect(agent.run("Ask")).await;
    let first = paused(&outcome);
    // No answer: it pauses again at once, a new pause.
    let (events, outcome) = collect(agent.resume(&first, Resolutions::new())).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let second = paused(&outcome);
    assert_ne!(second.id(), first.id());
    assert_eq!(second.pending(), first.pending());
    // A denial answers it as an error the model reads.
    let (events, outcome) =
        collect(agent.resume(&second, Resolutions::new().deny("c1", "the user is away"))).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert!(matches!(
        &events[0],
        AgentEvent::ToolResult { id, content, is_error: true, .. }
            if id == "c1" && content == "denied: the user is away"
    ));
}

#[tokio::test]
async fn a_paused_run_says_its_turn_and_a_newer_format_is_refused() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "read", json!({"path": "a"})).usage_tokens(10, 1),
        ScriptedResponse::tool_call("c2", "delete", json!({"path": "a"})).usage_tokens(20, 2),
        ScriptedResponse::text("Done."),
    ]);
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = builder(client, deletes.clone())
        .policy(
            RunPolicy::new()
                .early_read_only_tools(false)
                .require_approval("delete"),
        )
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Read, then delete")).await;
    let paused = paused(&outcome);
    assert_eq!(paused.turn(), 2);
    assert_eq!(paused.usage().input_tokens, 30);

    let mut json = serde_json::to_value(&paused).unwrap();
    json["state"]["format"] = json!(2);
    let newer: PausedRun = serde_json::from_value(json).unwrap();
    let (_, refused) = collect(agent.resume(&newer, Resolutions::new().approve("c2"))).await;
    assert!(
        matches!(
            refused.termination,
            Termination::Error(Error::Resume(ResumeError::Format {
                found: 2,
                supported: 1
            }))
        ),
        "{}",
        refused.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    let (_, done) = collect(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert_eq!((done.termination, done.turns), (Termination::Completed, 3));
}

/// A store that refuses every append while `broken` is set, as a database that went away.
#[derive(Debug, Default)]
struct FlakyStore {
    inner: MemoryStore,
    broken: std::sync::atomic::AtomicBool,
}

#[agent_loop::async_trait]
impl SessionStore for FlakyStore {
    async fn load(
        &self,
        session: &str,
    ) -> Result<Option<agent_loop::session::StoredSession>, SessionError> {
        self.inner.load(session).await
    }

    async fn append(
        &self,
        session: &str,
        expected: u64,
        entries: &[SessionEntry],
    ) -> Result<u64, SessionError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(SessionError::Database("the disk is full".into()));
        }
        self.inner.append(session, expected, entries).await
    }

    async fn delete(&self, session: &str) -> Result<(), SessionError> {
        self.inner.delete(session).await
    }
}

#[tokio::test]
async fn a_store_that_fails_stops_the_run_with_its_error_and_the_pause_stays() {
    let store = Arc::new(FlakyStore::default());
    let deletes = Arc::new(AtomicUsize::new(0));
    let client = ScriptedClient::new(script());
    let mut agent = session_agent(client.clone(), store.clone(), deletes.clone());
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    assert_eq!(paused.conversation().messages.len(), 2);
    assert_eq!(paused.conversation().messages[0].text(), "Delete a.txt");

    // The claim cannot be written: the database's error, not "resumed already", and
    // nothing runs.
    store.broken.store(true, Ordering::SeqCst);
    let (_, failed) = collect(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert!(
        matches!(
            &failed.termination,
            Termination::Error(Error::Session(SessionError::Database(m))) if m.contains("disk")
        ),
        "{}",
        failed.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    assert_eq!(agent.paused().as_ref(), Some(&paused), "the pause stays");

    // Once the database is back, the same pause resumes.
    store.broken.store(false, Ordering::SeqCst);
    let (_, done) = collect(agent.resume(&paused, Resolutions::new().approve("c2"))).await;
    assert_eq!(done.termination, Termination::Completed);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_session_resumes_only_the_pause_it_waits_in() {
    let store = Arc::new(MemoryStore::new());
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = session_agent(
        ScriptedClient::new(script()),
        store.clone(),
        deletes.clone(),
    );
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    // Another pause (another session's, or one written by hand): refused.
    let mut json = serde_json::to_value(&paused).unwrap();
    json["state"]["id"] = json!("t9-p9-elsewhere");
    let other: PausedRun = serde_json::from_value(json).unwrap();
    let (_, refused) = collect(agent.resume(&other, Resolutions::new().approve("c2"))).await;
    assert!(matches!(
        refused.termination,
        Termination::Error(Error::Resume(ResumeError::AlreadyResumed { .. }))
    ));
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_restored_conversation_is_saved_whole_with_its_system_prompt() {
    let store = Arc::new(MemoryStore::new());
    let client =
        ScriptedClient::new([ScriptedResponse::text("one"), ScriptedResponse::text("two")]);
    let mut agent = Agent::builder(client)
        .session(store.clone(), "chat-1")
        .build()
        .unwrap();
    let _ = collect(agent.run("first")).await;
    agent
        .restore(agent_loop::context::Conversation::new(
            Some("A new prompt.".into()),
            vec![Message::user("restored"), Message::assistant("yes")],
        ))
        .unwrap();
    let _ = collect(agent.run("second")).await;
    let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
    assert_eq!(stored.conversation.system.as_deref(), Some("A new prompt."));
    assert_eq!(stored.conversation.messages, *agent.messages());
}

#[tokio::test]
async fn a_deferred_call_answered_with_an_error() {
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "ask_user", json!({})),
        ScriptedResponse::text("The form failed."),
    ]);
    let mut agent = Agent::builder(client)
        .tool(DeferredTool::new("ask_user", "Asks the user."))
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Ask")).await;
    let paused = paused(&outcome);
    let (events, _) =
        collect(agent.resume(&paused, Resolutions::new().error("c1", "the form broke"))).await;
    assert!(matches!(
        &events[0],
        AgentEvent::ToolResult { content, is_error: true, .. } if content == "the form broke"
    ));
}

/// A run whose stream is dropped (a web client that went away, a Stop button) frees its
/// session at once: its turn is saved cut short and answered, as a cancel's is, and its lease
/// released, so another agent (a new one per request, say) can run on the session without
/// waiting for the lease to run out.
#[tokio::test]
async fn a_dropped_run_releases_its_session() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let hang = FnTool::new(
        "hang",
        "Never returns.",
        |_: serde_json::Value, _ctx| async {
            std::future::pending::<()>().await;
            Ok::<_, ToolError>("unreachable")
        },
    );
    let mut first = Agent::builder(ScriptedClient::new([ScriptedResponse::tool_call(
        "c1",
        "hang",
        json!({}),
    )]))
    .tool(hang)
    .session(store.clone(), "chat-1")
    .build()
    .unwrap();
    let mut events = first.run("Wait for it");
    while let Some(event) = events.next().await {
        if matches!(event, AgentEvent::ToolCall { .. }) {
            break;
        }
    }
    let held = session::load(&*store, "chat-1").await.unwrap().unwrap();
    assert!(held.lease.is_some(), "the run holds its session");
    drop(events);

    // The release runs on a task of its own; wait for it (the timeout only bounds a failure).
    let released = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let now = session::load(&*store, "chat-1").await.unwrap().unwrap();
            if now.lease.is_none() {
                return now;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the dropped run's lease is released");
    assert_eq!(
        released.conversation.messages.len(),
        3,
        "the cut turn, answered: {:?}",
        released.conversation.messages
    );

    let client = ScriptedClient::new([ScriptedResponse::text("Here now.")]);
    let mut second = Agent::builder(client)
        .session(store.clone(), "chat-1")
        .build()
        .unwrap();
    let (_, outcome) = collect(second.run("Still there?")).await;
    assert_eq!(outcome.termination, Termination::Completed);
    let stored = session::load(&*store, "chat-1").await.unwrap().unwrap();
    assert_eq!(stored.conversation.messages, *second.messages());
    assert_eq!(stored.conversation.messages.len(), 4);
}

/// A response that deletes `path` with the call id `c1`, then one that says it is done.
fn delete_script(path: &str) -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::tool_call("c1", "delete", json!({"path": path})),
        ScriptedResponse::text("Done."),
    ]
}

fn approving(builder: AgentBuilder) -> AgentBuilder {
    builder.policy(
        RunPolicy::new()
            .early_read_only_tools(false)
            .require_approval("delete"),
    )
}

#[tokio::test]
async fn a_pending_call_carries_a_digest_of_what_was_asked_kept_in_the_paused_run() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let client = ScriptedClient::new(delete_script("a.txt"));
    let mut agent = approving(builder(client, deletes.clone())).build().unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let paused = paused(&outcome);
    let pending = &paused.pending()[0];
    assert!(pending.digest.starts_with("sha256:"), "{}", pending.digest);
    assert_eq!(pending.digest.len(), "sha256:".len() + 64);
    // Serialized with the paused run, and the same after a round trip.
    let json = serde_json::to_string(&paused).unwrap();
    assert!(json.contains(&pending.digest), "{json}");
    let back: PausedRun = serde_json::from_str(&json).unwrap();
    assert_eq!(back.pending()[0].digest, pending.digest);
    // A paused run whose call was changed since does not hold together.
    let tampered = json.replace("a.txt", "b.txt");
    let tampered: PausedRun = serde_json::from_str(&tampered).unwrap();
    let (_, outcome) = collect(agent.resume(&tampered, Resolutions::new().approve("c1"))).await;
    assert!(
        matches!(
            &outcome.termination,
            Termination::Error(Error::Resume(ResumeError::Damaged(_)))
        ),
        "{}",
        outcome.termination
    );
    // The answer given for this very call resumes it.
    let answer = Resolutions::new().for_call(pending, agent_loop::agent::Resolution::Approve);
    let (_, outcome) = collect(agent.resume(&back, answer)).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_for_the_same_id_from_another_branch_is_refused() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut first = approving(builder(
        ScriptedClient::new(delete_script("a.txt")),
        deletes.clone(),
    ))
    .build()
    .unwrap();
    let mut second = approving(builder(
        ScriptedClient::new(delete_script("everything")),
        deletes.clone(),
    ))
    .build()
    .unwrap();
    let (_, a) = collect(first.run("Delete a.txt")).await;
    let (_, b) = collect(second.run("Delete it all")).await;
    let (a, b) = (paused(&a), paused(&b));
    assert_eq!(a.pending()[0].id, b.pending()[0].id);
    assert_ne!(a.pending()[0].digest, b.pending()[0].digest);
    // The person approved deleting a.txt; that approval does not delete everything.
    let answer =
        Resolutions::new().for_call(&a.pending()[0], agent_loop::agent::Resolution::Approve);
    let (events, outcome) = collect(second.resume(&b, answer)).await;
    let Termination::Error(Error::Resume(ResumeError::StaleAnswer { id, given, waiting })) =
        &outcome.termination
    else {
        panic!("{}", outcome.termination)
    };
    assert_eq!(id, "c1");
    assert_eq!(given, &a.pending()[0].digest);
    assert_eq!(waiting, &b.pending()[0].digest);
    assert!(outcome.termination.to_string().contains("another call"));
    assert_eq!(events.len(), 1, "nothing ran: {events:#?}");
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    // Without a digest the answer is taken as before.
    let (_, outcome) = collect(second.resume(&b, Resolutions::new().deny("c1", "no"))).await;
    assert_eq!(outcome.termination, Termination::Completed);
}

#[tokio::test]
async fn an_answer_given_before_a_rewind_is_refused_for_the_call_asked_again() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let mut script = delete_script("a.txt");
    script.truncate(1);
    script.extend(delete_script("b.txt"));
    let mut agent = approving(builder(ScriptedClient::new(script), deletes.clone()))
        .session(store.clone(), "s")
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Delete a file")).await;
    let before = paused(&outcome);
    // The host shows the call; meanwhile the session is rewound to its start and asked again.
    agent.rewind_session(0).await.unwrap();
    assert!(agent.paused().is_none(), "the rewind dropped the pause");
    let (_, outcome) = collect(agent.run("Delete a file")).await;
    let after = paused(&outcome);
    assert_eq!(before.pending()[0].id, after.pending()[0].id);
    // The answer the person gave for the first call comes back: refused, nothing run.
    let stale =
        Resolutions::new().for_call(&before.pending()[0], agent_loop::agent::Resolution::Approve);
    let (_, outcome) = collect(agent.resume(&after, stale.clone())).await;
    assert!(
        matches!(
            &outcome.termination,
            Termination::Error(Error::Resume(ResumeError::StaleAnswer { .. }))
        ),
        "{}",
        outcome.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    // The pause asked again has an id of its own, though its turn, its count and its call's
    // id are the same: the ids name the session's version the run started from.
    assert_ne!(before.id(), after.id());
    // The old pause itself is refused, as left behind by the rewind (not as resumed).
    let (_, outcome) = collect(agent.resume(&before, stale)).await;
    let Termination::Error(Error::Resume(agent_loop::agent::ResumeError::Superseded { pause })) =
        &outcome.termination
    else {
        panic!("{}", outcome.termination)
    };
    assert_eq!(pause, before.id());
    assert!(
        outcome.termination.to_string().contains("rewound past it"),
        "{}",
        outcome.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    // The answer for the call that waits now runs it.
    let fresh =
        Resolutions::new().for_call(&after.pending()[0], agent_loop::agent::Resolution::Approve);
    let (_, outcome) = collect(agent.resume(&after, fresh)).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    // The log holds both pauses, each under its own id.
    let log = store.load("s").await.unwrap().unwrap();
    let pauses: Vec<&str> = log
        .entries
        .iter()
        .filter_map(|(_, e)| match e {
            SessionEntry::Paused { pause, .. } => Some(pause.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(pauses, [before.id(), after.id()]);
    // Resumed once, its pause is refused as resumed (the log says so).
    let (_, outcome) = collect(agent.resume(&after, Resolutions::new().approve("c1"))).await;
    assert!(
        matches!(
            &outcome.termination,
            Termination::Error(Error::Resume(ResumeError::AlreadyResumed { .. }))
        ),
        "{}",
        outcome.termination
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    let stored = session::load(&*store, "s").await.unwrap().unwrap();
    assert!(stored
        .conversation
        .messages
        .iter()
        .any(|m| m.tool_uses().any(|(_, _, input)| input["path"] == "b.txt")));
    assert!(!stored
        .conversation
        .messages
        .iter()
        .any(|m| m.tool_uses().any(|(_, _, input)| input["path"] == "a.txt")));
}

#[tokio::test]
async fn a_pause_saved_before_ids_named_the_session_version_still_resumes() {
    // A pause as an older build wrote it, in its session and as the host kept it: an id with
    // no version, and no version in its state.
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut agent = approving(builder(
        ScriptedClient::new(delete_script("a.txt")),
        deletes.clone(),
    ))
    .session(Arc::new(MemoryStore::new()), "new")
    .build()
    .unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    let mut json = serde_json::to_value(paused(&outcome)).unwrap();
    let state = json["state"].as_object_mut().unwrap();
    assert!(state.remove("session_version").is_some(), "{state:?}");
    state.insert("id".into(), json!("t1-p1-c1"));
    let old: PausedRun = serde_json::from_value(json.clone()).unwrap();
    let store = Arc::new(MemoryStore::new());
    let conversation = serde_json::from_value(json["conversation"].clone()).unwrap();
    let saved = [
        SessionEntry::Conversation { conversation },
        SessionEntry::Paused {
            pause: "t1-p1-c1".into(),
            state: json["state"].clone(),
        },
    ];
    store.append("old", 0, &saved).await.unwrap();

    let mut agent = approving(builder(
        ScriptedClient::new(delete_script("a.txt").split_off(1)),
        deletes.clone(),
    ))
    .session(store.clone(), "old")
    .build()
    .unwrap();
    let (_, outcome) = collect(agent.resume(&old, Resolutions::new().approve("c1"))).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    let log = store.load("old").await.unwrap().unwrap();
    assert!(log.entries.iter().any(|(_, e)| *e
        == SessionEntry::Resumed {
            pause: "t1-p1-c1".into()
        }));
}

#[tokio::test]
async fn a_cut_between_a_call_and_its_result_names_the_valid_cuts_and_no_repair() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let mut agent = builder(ScriptedClient::new(delete_script("a.txt")), deletes.clone())
        .session(store.clone(), "main")
        .build()
        .unwrap();
    let (_, outcome) = collect(agent.run("Delete a.txt")).await;
    assert_eq!(outcome.termination, Termination::Completed);
    // Four messages: the question, the call, its result, the answer.
    assert_eq!(agent.messages().len(), 4);
    for refused in [
        agent.fork_session("branch", 2).await.unwrap_err(),
        agent.rewind_session(2).await.unwrap_err(),
    ] {
        // The error is named where the store's methods are.
        assert!(
            matches!(
                &refused,
                Error::Session(session::SessionError::InvalidPoint { at: 2, .. })
            ),
            "{refused}"
        );
        assert_eq!(
            refused.to_string(),
            "session \"main\" cannot be cut after message 2: message 2 asks for tool calls \
             (c1) whose results are in message 3, and a cut keeps each call with its result; \
             the valid cuts nearest to it, nearest first: after message 3, 1, 4"
        );
    }
    // Past the end: the nearest valid cuts are its last ones.
    let refused = agent.rewind_session(7).await.unwrap_err();
    assert!(
        refused.to_string().ends_with(
            "cannot be cut after message 7: it has 4 messages; the valid cuts nearest to it, \
             nearest first: after message 4, 3, 1"
        ),
        "{refused}"
    );
    // The cuts it names are taken.
    agent.fork_session("branch", 3).await.unwrap();
    agent.rewind_session(1).await.unwrap();
    assert_eq!(agent.messages().len(), 1);
}
