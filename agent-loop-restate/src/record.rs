//! What the journal holds: a model call's events and how it ended, and a tool call's result,
//! as the core's own serde types ([`LlmEvent`], [`LlmError`], [`ToolCallResult`]). Read back,
//! each is equal to what the first run saw, so a replay feeds the machine the same inputs.

use std::mem::Discriminant;
use std::sync::Arc;

use agent_loop::agent::{AgentHooks, HookAction};
use agent_loop::provider::ModelRequest;
use agent_loop::tool::{ExecOptions, ToolCall, ToolCallResult};
use agent_loop::wire::StreamAssembler;
use agent_loop::{LlmClient, LlmError, LlmEvent, ToolRegistry};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use restate_sdk::serde::{Deserialize, PayloadMetadata, Serialize};

use crate::agent::{ApprovalPolicy, ApprovalRequest};

/// The most events one model step keeps; the client's own stream limits bound the bytes, and
/// coalescing deltas keeps the count near the number of content blocks.
const MAX_EVENTS: usize = 65_536;
/// The most progress notes one tool step keeps (the first ones), and the longest kept.
pub(crate) const MAX_PROGRESS_NOTES: usize = 16;
pub(crate) const MAX_NOTE_BYTES: usize = 1024;

/// One journaled model call: the response's events (deltas of a block merged) and how the
/// stream ended; or the `before_model_call` hook's stop instead of the call; and the results
/// of the read-only calls that started while it streamed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ModelStep {
    pub events: Vec<LlmEvent>,
    /// `None`: the stream ended cleanly (after `MessageStop`, or simply ended).
    pub error: Option<LlmError>,
    /// Why the `before_model_call` hook stopped the run instead of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_stopped: Option<String>,
    /// Read-only calls run while the response streamed, with the call each ran as, in the
    /// order the calls came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub early: Vec<ToolStep>,
}

impl ModelStep {
    /// Whether the response ended with its `MessageStop` (the machine stops listening then).
    pub fn stopped(&self) -> bool {
        matches!(self.events.last(), Some(LlmEvent::MessageStop { .. }))
    }
}

/// One journaled tool call: its result, the input it ran with (for a call started early,
/// matched against the machine's call), and its first progress notes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ToolStep {
    #[serde(flatten)]
    pub result: ToolCallResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<String>,
    /// The input and output tokens of a sub-agent's run (not journaled: its report is).
    #[serde(skip)]
    pub usage: Option<(u64, u64)>,
}

/// What starts read-only calls while the model streams (`RunPolicy::early_read_only_tools`):
/// the tools, the approval policy (only calls it allows start early) and the session.
pub(crate) struct EarlyCalls {
    pub tools: ToolRegistry,
    pub policy: Arc<dyn ApprovalPolicy>,
    pub session: Arc<str>,
}

impl EarlyCalls {
    /// Whether `call` may start before the response ends.
    fn allows(&self, call: &ToolCall) -> bool {
        self.tools.is_read_only(&call.name)
            && matches!(self.policy.check(call), ApprovalRequest::Allow)
    }
}

/// Which calls of a streaming response start early, by the machine's rule: a read-only call
/// starts when its block closes with valid arguments, unless a call that is not read-only
/// started before it; here also only when the policy allows it. The crate's assembler parses
/// the arguments, as the machine's does; a response it refuses starts nothing more (the
/// machine fails that response).
struct EarlyStarts<'a> {
    calls: &'a EarlyCalls,
    assembler: StreamAssembler,
    blocked: bool,
}

impl<'a> EarlyStarts<'a> {
    fn new(calls: &'a EarlyCalls) -> Self {
        EarlyStarts {
            calls,
            assembler: StreamAssembler::new(),
            blocked: false,
        }
    }

    /// The call to start now, after `event`.
    fn on_event(&mut self, event: &LlmEvent) -> Option<ToolCall> {
        if self.blocked {
            return None;
        }
        if self.assembler.push(event).is_err() {
            self.blocked = true;
            return None;
        }
        match event {
            LlmEvent::ToolCallStart { name, .. } => {
                self.blocked = !self.calls.tools.is_read_only(name);
                None
            }
            LlmEvent::BlockStop { index } => {
                let (id, name, input) = self.assembler.completed_tool_call(*index)?;
                let call = ToolCall::new(id, name, input.clone());
                self.calls.allows(&call).then_some(call)
            }
            _ => None,
        }
    }
}

/// Calls the model once and records what it said. Never fails: an error is part of the
/// record, for the machine to decide on (retry after a backoff, or end the run) exactly as
/// in-process. The hook, when there is one, is asked first (its changes to the request are
/// part of this step: a replay reads the response, not the request). Read-only calls the
/// policy allows start as soon as their arguments are complete, until a call that is not
/// read-only (calls after it wait for the response's end, as the machine has them wait).
pub(crate) async fn call_model(
    client: Arc<dyn LlmClient>,
    mut request: ModelRequest,
    hooks: Option<(Arc<dyn AgentHooks>, u32)>,
    early: Option<EarlyCalls>,
) -> ModelStep {
    let mut step = ModelStep {
        events: Vec::new(),
        error: None,
        hook_stopped: None,
        early: Vec::new(),
    };
    if let Some((hooks, turn)) = hooks {
        if let HookAction::Stop(reason) = hooks.before_model_call(&mut request, turn).await {
            step.hook_stopped = Some(reason);
            return step;
        }
    }
    let mut starts = early.as_ref().map(EarlyStarts::new);
    let mut running = FuturesUnordered::new();
    // Early results as they finish, with their place among the calls started.
    let mut done: Vec<(usize, ToolStep)> = Vec::new();
    let mut stream = client.stream(&request);
    loop {
        let item = tokio::select! {
            Some(finished) = running.next(), if !running.is_empty() => {
                done.push(finished);
                continue;
            }
            item = stream.next() => item,
        };
        let Some(item) = item else { break };
        let event = match item {
            Ok(event) => event,
            Err(e) => {
                step.error = Some(e);
                break;
            }
        };
        if let Some(call) = starts.as_mut().and_then(|starts| starts.on_event(&event)) {
            if let Some(early) = &early {
                let order = running.len() + done.len();
                let run = run_tool(early.tools.clone(), early.session.clone(), call);
                running.push(async move { (order, run.await) });
            }
        }
        let stop = matches!(event, LlmEvent::MessageStop { .. });
        push_coalesced(&mut step.events, event);
        if step.events.len() > MAX_EVENTS {
            // Not kept: the record ends at the bound, with the error (a `MessageStop` past it
            // must not make the response look whole).
            step.events.pop();
            step.error = Some(LlmError::LimitExceeded {
                what: "the response".into(),
                limit: MAX_EVENTS,
                setting: "StreamLimits::max_response_bytes".into(),
            });
            break;
        }
        if stop {
            break;
        }
    }
    drop(stream);
    while let Some(finished) = running.next().await {
        done.push(finished);
    }
    // In the calls' order, whatever order they finished in: the record is the same for the
    // same response.
    done.sort_by_key(|(order, _)| *order);
    step.early = done.into_iter().map(|(_, step)| step).collect();
    step
}

/// Runs one tool call with its idempotency key scoped to the session, keeping its first
/// progress notes.
pub(crate) async fn run_tool(tools: ToolRegistry, session: Arc<str>, call: ToolCall) -> ToolStep {
    let (tx, mut rx) = tokio::sync::mpsc::channel(MAX_PROGRESS_NOTES);
    let opts = ExecOptions::new().idempotency_scope(session).progress(tx);
    let input = call.input.clone();
    let mut progress = Vec::new();
    let run = tools.execute_one(call, &opts);
    tokio::pin!(run);
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            Some(note) = rx.recv() => keep_note(&mut progress, note.message),
        }
    };
    while let Ok(note) = rx.try_recv() {
        keep_note(&mut progress, note.message);
    }
    ToolStep {
        result,
        input: Some(input),
        progress,
        usage: None,
    }
}

/// Keeps a progress note while fewer than [`MAX_PROGRESS_NOTES`] are kept, cut to
/// [`MAX_NOTE_BYTES`].
fn keep_note(notes: &mut Vec<String>, note: String) {
    if notes.len() < MAX_PROGRESS_NOTES {
        notes.push(bounded(note, MAX_NOTE_BYTES));
    }
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
pub(crate) fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Appends `event`, merging it into the last one when both are deltas of the same block: the
/// assembler sees the same text, the journal holds one entry per block instead of one per
/// token.
fn push_coalesced(events: &mut Vec<LlmEvent>, mut event: LlmEvent) {
    if let (Some((kind, index, text)), Some((more_kind, more_index, more))) =
        (events.last_mut().and_then(delta), delta(&mut event))
    {
        if kind == more_kind && index == more_index {
            text.push_str(more);
            return;
        }
    }
    events.push(event);
}

/// The kind, block index and text of a delta that merges with the next delta of its kind and
/// block.
fn delta(event: &mut LlmEvent) -> Option<(Discriminant<LlmEvent>, usize, &mut String)> {
    let kind = std::mem::discriminant(event);
    match event {
        LlmEvent::TextDelta { index, text }
        | LlmEvent::ThinkingDelta {
            index,
            thinking: text,
        }
        | LlmEvent::SignatureDelta {
            index,
            signature: text,
        }
        | LlmEvent::ToolCallDelta {
            index,
            partial_json: text,
        } => Some((kind, *index, text)),
        _ => None,
    }
}

/// A journaled value (a [`ModelStep`], a [`ToolCallResult`](agent_loop::tool::ToolCallResult)): JSON,
/// like Restate's `Json`, except that a record in the format of earlier builds of this crate is
/// refused with an error naming the migration instead of serde's "missing field".
pub(crate) struct Journaled<T>(pub T);

impl<T: serde::Serialize> Serialize for Journaled<T> {
    type Error = serde_json::Error;

    fn serialize(&self) -> Result<Bytes, Self::Error> {
        serde_json::to_vec(&self.0).map(Bytes::from)
    }
}

impl<T: serde::de::DeserializeOwned> Deserialize for Journaled<T> {
    type Error = serde_json::Error;

    fn deserialize(bytes: &mut Bytes) -> Result<Self, Self::Error> {
        serde_json::from_slice(bytes)
            .map(Journaled)
            .map_err(|error| {
                if is_mirror_record(bytes) {
                    <serde_json::Error as serde::de::Error>::custom(format!(
                        "{MIRROR_FORMAT} ({error})"
                    ))
                } else {
                    error
                }
            })
    }
}

impl<T> PayloadMetadata for Journaled<T> {}

/// Why a journal written by an earlier build cannot be replayed, and what to do about it.
const MIRROR_FORMAT: &str = "this journal entry was written by an earlier agent-loop-restate, \
     whose records mirrored the core's types (events tagged `e`, errors tagged `kind`, tool \
     results with `duration_ms`); this version journals LlmEvent, LlmError and ToolCallResult \
     in their own serde form and cannot replay it. Let invocations started by the earlier \
     version finish on it: register this version as a new Restate deployment (invocations in \
     flight stay on the deployment they started on) rather than replacing the old one in \
     place, or cancel those invocations";

/// Whether `bytes` is a record of the mirror format: a model step whose events are tagged `e`
/// or whose error is tagged `kind`, or a tool step with `duration_ms` and no call id. (An
/// empty model step, `{"events":[],"error":null}`, reads the same in both formats.)
fn is_mirror_record(bytes: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return false;
    };
    let tagged_e = value
        .get("events")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|events| events.iter().any(|event| event.get("e").is_some()));
    let kind_error = value
        .get("error")
        .is_some_and(|error| error.get("kind").is_some());
    let tool_step = value.get("duration_ms").is_some() && value.get("id").is_none();
    tagged_e || kind_error || tool_step
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use agent_loop::error::{ApiError, TimeoutKind};
    use agent_loop::tool::ToolCallResult;
    use agent_loop::StopReason;
    use serde_json::json;

    use super::*;

    fn journal<T: serde::Serialize>(value: T) -> Bytes {
        Serialize::serialize(&Journaled(value)).unwrap()
    }

    fn replay<T: serde::de::DeserializeOwned>(mut bytes: Bytes) -> Result<T, serde_json::Error> {
        <Journaled<T> as Deserialize>::deserialize(&mut bytes).map(|Journaled(value)| value)
    }

    #[test]
    fn a_model_step_replays_as_the_same_events_and_error() {
        let mut api = ApiError::new(529, "overloaded");
        api.error_type = Some("overloaded_error".into());
        api.retry_after = Some(Duration::from_millis(1500));
        let step = ModelStep {
            hook_stopped: None,
            early: Vec::new(),
            events: vec![
                LlmEvent::Reasoning {
                    index: 0,
                    id: "rs_1".into(),
                    summary: vec!["plan".into()],
                    encrypted_content: Some("gAAAA".into()),
                },
                LlmEvent::TextDelta {
                    index: 1,
                    text: "hi".into(),
                },
            ],
            error: Some(LlmError::LimitExceeded {
                what: "an SSE line".into(),
                limit: 10,
                setting: "StreamLimits::max_line_bytes".into(),
            }),
        };
        let back: ModelStep = replay(journal(step.clone())).unwrap();
        assert_eq!(back, step);
        let timeout = ModelStep {
            hook_stopped: None,
            early: Vec::new(),
            events: Vec::new(),
            error: Some(LlmError::Timeout {
                kind: TimeoutKind::Idle,
                after: Duration::from_secs(30),
            }),
        };
        let back: ModelStep = replay(journal(timeout.clone())).unwrap();
        assert!(back.error.as_ref().is_some_and(LlmError::is_retryable));
        assert_eq!(back, timeout);
    }

    #[test]
    fn a_tool_result_replays_as_the_same_result() {
        let result = ToolCallResult::new("c1", "t", "out", true, Duration::new(1, 7));
        let back: ToolCallResult = replay(journal(result.clone())).unwrap();
        assert_eq!(back, result);
    }

    /// Records of the mirror format (written before the core types had serde) are refused with
    /// the migration named; an empty model step means the same in both formats.
    #[test]
    fn a_mirror_format_record_names_the_migration() {
        for (old, what) in [
            (
                r#"{"events":[{"e":"text","index":0,"text":"hi"}],"error":null}"#,
                "model step",
            ),
            (
                r#"{"events":[],"error":{"kind":"connect","message":"refused"}}"#,
                "model step",
            ),
            (
                r#"{"content":"out","is_error":false,"duration_ms":12}"#,
                "tool step",
            ),
        ] {
            let bytes = Bytes::from(old);
            let error = if what == "model step" {
                replay::<ModelStep>(bytes).map(drop).unwrap_err()
            } else {
                replay::<ToolStep>(bytes).map(drop).unwrap_err()
            };
            let message = error.to_string();
            assert!(message.contains("earlier agent-loop-restate"), "{message}");
            assert!(message.contains("new Restate deployment"), "{message}");
        }
        let empty: ModelStep = replay(Bytes::from(r#"{"events":[],"error":null}"#)).unwrap();
        assert_eq!(
            empty,
            ModelStep {
                events: Vec::new(),
                error: None,
                hook_stopped: None,
                early: Vec::new(),
            }
        );
        // Not JSON at all, or JSON of neither format: serde's own error.
        let error = replay::<ModelStep>(Bytes::from("{\"events\":7}")).unwrap_err();
        assert!(!error.to_string().contains("agent-loop-restate"), "{error}");
    }

    #[test]
    fn deltas_of_one_block_merge() {
        let mut events = Vec::new();
        for event in [
            LlmEvent::TextDelta {
                index: 0,
                text: "he".into(),
            },
            LlmEvent::TextDelta {
                index: 0,
                text: "llo".into(),
            },
            LlmEvent::BlockStop { index: 0 },
            LlmEvent::ToolCallStart {
                index: 1,
                id: "c".into(),
                name: "t".into(),
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: "{\"a\"".into(),
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: ":1}".into(),
            },
            LlmEvent::ThinkingDelta {
                index: 2,
                thinking: "a".into(),
            },
            LlmEvent::ThinkingDelta {
                index: 3,
                thinking: "b".into(),
            },
            LlmEvent::MessageStop {
                stop_reason: StopReason::ToolUse,
            },
        ] {
            push_coalesced(&mut events, event);
        }
        assert_eq!(
            events,
            [
                LlmEvent::TextDelta {
                    index: 0,
                    text: "hello".into()
                },
                LlmEvent::BlockStop { index: 0 },
                LlmEvent::ToolCallStart {
                    index: 1,
                    id: "c".into(),
                    name: "t".into(),
                },
                LlmEvent::ToolCallDelta {
                    index: 1,
                    partial_json: "{\"a\":1}".into()
                },
                LlmEvent::ThinkingDelta {
                    index: 2,
                    thinking: "a".into(),
                },
                LlmEvent::ThinkingDelta {
                    index: 3,
                    thinking: "b".into(),
                },
                LlmEvent::MessageStop {
                    stop_reason: StopReason::ToolUse,
                },
            ]
        );
    }

    use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    use agent_loop::tool::FnTool;
    use agent_loop::{Message, ToolError};

    /// Tools `look` (read-only) and `step` (not); the policy leaves `look` of label `ask` to a
    /// person.
    fn early() -> EarlyCalls {
        let look = FnTool::new(
            "look",
            "Looks.",
            |input: serde_json::Value, _ctx| async move {
                match input["label"].as_str() {
                    Some(label) => Ok(format!("saw {label}")),
                    None => Err(ToolError::new("no label")),
                }
            },
        )
        .read_only(true);
        let step = FnTool::new(
            "step",
            "Steps.",
            |_input: serde_json::Value, _ctx| async move { Ok::<_, ToolError>("stepped") },
        );
        let tools = ToolRegistry::new()
            .with(look)
            .and_then(|r| r.with(step))
            .expect("tools");
        let policy = |call: &ToolCall| {
            if call.input["label"] == "ask" {
                ApprovalRequest::AskHuman
            } else {
                ApprovalRequest::Allow
            }
        };
        EarlyCalls {
            tools,
            policy: Arc::new(policy),
            session: Arc::from("s"),
        }
    }

    async fn step_of(response: ScriptedResponse) -> ModelStep {
        let client = Arc::new(ScriptedClient::new([response]));
        call_model(
            client,
            ModelRequest::new(vec![Message::user("go")]),
            None,
            Some(early()),
        )
        .await
    }

    /// The early calls' ids and contents, in id order.
    fn early_ran(step: &ModelStep) -> Vec<(String, String)> {
        let mut ran: Vec<(String, String)> = step
            .early
            .iter()
            .map(|s| (s.result.id.clone(), s.result.content.clone()))
            .collect();
        ran.sort();
        ran
    }

    #[tokio::test]
    async fn read_only_calls_start_early_until_one_that_is_not() {
        let step = step_of(
            ScriptedResponse::tool_call("l1", "look", json!({"label": "a"}))
                // Left to a person: not started early, and it blocks nothing.
                .then_tool_call("l2", "look", json!({"label": "ask"}))
                .then_tool_call("l3", "look", json!({"label": "b"}))
                .then_tool_call("s1", "step", json!({}))
                .then_tool_call("l4", "look", json!({"label": "c"})),
        )
        .await;
        assert_eq!(
            early_ran(&step),
            [
                ("l1".to_owned(), "saw a".to_owned()),
                ("l3".to_owned(), "saw b".to_owned())
            ]
        );
        assert!(step.stopped());
        assert_eq!(
            step.early[0].input,
            Some(json!({"label": step.early[0].result.content[4..].to_owned()}))
        );
    }

    /// Early results are recorded in the calls' order, not the order they finished in.
    #[tokio::test]
    async fn early_results_keep_the_calls_order() {
        let b_done = Arc::new(tokio::sync::Notify::new());
        let signal = b_done.clone();
        let look = FnTool::new("look", "Looks.", move |input: serde_json::Value, _ctx| {
            let b_done = signal.clone();
            async move {
                match input["label"].as_str() {
                    // `a` finishes only after `b` has.
                    Some("a") => b_done.notified().await,
                    _ => b_done.notify_one(),
                }
                Ok::<_, ToolError>(format!("saw {}", input["label"]))
            }
        })
        .read_only(true);
        let early = EarlyCalls {
            tools: ToolRegistry::new().with(look).expect("tools"),
            policy: Arc::new(|_: &ToolCall| ApprovalRequest::Allow),
            session: Arc::from("s"),
        };
        let client = Arc::new(ScriptedClient::new([ScriptedResponse::tool_call(
            "l1",
            "look",
            json!({"label": "a"}),
        )
        .then_tool_call("l2", "look", json!({"label": "b"}))
        .then_tool_call("l3", "look", json!({"label": "c"}))]));
        let step = call_model(
            client,
            ModelRequest::new(vec![Message::user("go")]),
            None,
            Some(early),
        )
        .await;
        let ids: Vec<&str> = step.early.iter().map(|s| s.result.id.as_str()).collect();
        assert_eq!(ids, ["l1", "l2", "l3"]);
    }

    #[tokio::test]
    async fn a_call_whose_arguments_are_not_an_object_does_not_start() {
        for bad in ["not json", "[1]"] {
            let step = step_of(
                ScriptedResponse::tool_call_raw("l1", "look", bad).then_tool_call(
                    "l2",
                    "look",
                    json!({"label": "a"}),
                ),
            )
            .await;
            // As the machine has it: the bad call is answered with an error later; the calls
            // after it are not held back by it.
            assert_eq!(
                early_ran(&step),
                [("l2".to_owned(), "saw a".to_owned())],
                "{bad}"
            );
        }
        // No arguments at all are an empty object: the call starts (and its tool says why it
        // fails).
        let step = step_of(ScriptedResponse::tool_call_raw("l1", "look", "")).await;
        assert_eq!(early_ran(&step), [("l1".to_owned(), "no label".to_owned())]);
        assert_eq!(step.early[0].input, Some(json!({})));
    }

    #[tokio::test]
    async fn a_response_the_assembler_refuses_starts_nothing_more() {
        // A delta for a block that never started: the machine fails this response, so
        // nothing after it starts early.
        let step = step_of(ScriptedResponse::from_events([
            LlmEvent::ToolCallDelta {
                index: 0,
                partial_json: "junk".into(),
            },
            LlmEvent::ToolCallStart {
                index: 1,
                id: "l1".into(),
                name: "look".into(),
            },
            LlmEvent::ToolCallDelta {
                index: 1,
                partial_json: r#"{"label":"a"}"#.into(),
            },
            LlmEvent::BlockStop { index: 1 },
            LlmEvent::MessageStop {
                stop_reason: StopReason::ToolUse,
            },
        ]))
        .await;
        assert!(step.early.is_empty(), "{:?}", step.early);
        // The same call without the stray delta starts.
        let step = step_of(ScriptedResponse::tool_call(
            "l1",
            "look",
            json!({"label": "a"}),
        ))
        .await;
        assert_eq!(early_ran(&step), [("l1".to_owned(), "saw a".to_owned())]);
    }

    #[tokio::test]
    async fn a_hook_stop_is_the_step_and_no_call_is_made() {
        struct Stop;
        #[agent_loop::async_trait]
        impl AgentHooks for Stop {
            async fn before_model_call(&self, _r: &mut ModelRequest, turn: u32) -> HookAction {
                HookAction::Stop(format!("not at turn {turn}"))
            }
        }
        let client = Arc::new(ScriptedClient::new([ScriptedResponse::text("unused")]));
        let step = call_model(
            client.clone(),
            ModelRequest::new(vec![Message::user("go")]),
            Some((Arc::new(Stop), 3)),
            None,
        )
        .await;
        assert_eq!(step.hook_stopped.as_deref(), Some("not at turn 3"));
        assert!(step.events.is_empty());
        assert!(client.requests().is_empty());
    }

    #[tokio::test]
    async fn a_response_may_have_exactly_the_most_events() {
        let response = |n: usize| {
            ScriptedResponse::from_events((0..n).map(|index| LlmEvent::BlockStop { index }).chain(
                [LlmEvent::MessageStop {
                    stop_reason: StopReason::EndTurn,
                }],
            ))
        };
        let step = step_of(response(MAX_EVENTS - 1)).await;
        assert_eq!(step.events.len(), MAX_EVENTS);
        assert!(step.error.is_none() && step.stopped());
        let step = step_of(response(MAX_EVENTS)).await;
        assert!(
            matches!(step.error, Some(LlmError::LimitExceeded { limit, .. }) if limit == MAX_EVENTS),
            "{:?}",
            step.error
        );
        assert_eq!(step.events.len(), MAX_EVENTS);
        assert!(!step.stopped());
    }

    #[test]
    fn progress_notes_are_bounded() {
        let mut notes = Vec::new();
        for n in 0..MAX_PROGRESS_NOTES + 3 {
            keep_note(&mut notes, format!("{n}{}", "é".repeat(MAX_NOTE_BYTES)));
        }
        assert_eq!(notes.len(), MAX_PROGRESS_NOTES);
        assert!(notes
            .iter()
            .all(|n| n.len() <= MAX_NOTE_BYTES && n.ends_with('…')));
        assert!(notes[0].starts_with('0') && notes[15].starts_with("15"));
        assert_eq!(bounded("short".into(), 5), "short");
        assert_eq!(bounded("longer".into(), 5), "lo…");
    }
}
