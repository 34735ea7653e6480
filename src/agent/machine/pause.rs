//! A run that paused to wait for something from outside (a person's approval, a deferred
//! tool's result), as data: [`PausedRun`], and what the host answers it with:
//! [`Resolutions`]. The machine makes and takes them (`mod.rs`); this file is their shape.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::context::Conversation;
use crate::error::ResumeError;
use crate::message::{StopReason, Usage};
use crate::provider::RequestSettings;
pub use crate::tool::Resolution;
use crate::tool::{Question, ToolCall, ToolCallResult, ToolCatalog};

use super::counters::Counters;
use super::digest::{asked_digest, call_digest};
use super::ids::CallIds;
use super::routing::Routing;
use super::spending::Spending;
use super::text::AnswerText;
use crate::agent::hooks::ToolDecision;
use crate::agent::path::SubAgentUsage;

/// The format of the paused runs this build writes and reads.
pub(crate) const PAUSE_FORMAT: u32 = 1;

/// A run that stopped to wait for something from outside: a person's approval of a call
/// ([`ToolDecision::Pause`], [`RunPolicy::require_approval`](crate::agent::RunPolicy::require_approval)),
/// or the result of a deferred tool ([`DeferredTool`](crate::tool::DeferredTool), [`Tool::deferred`](crate::Tool::deferred)),
/// which comes from a person, a webhook or a UI.
///
/// A run ends with [`Termination::Paused`](crate::Termination::Paused) carrying one. It is
/// plain data (serde): keep it anywhere, and continue the run in any process, even after a
/// restart, with [`Agent::resume`](crate::Agent::resume) (or, with a session store, let the
/// agent keep it: [`Agent::load_session`](crate::Agent::load_session)). It holds the
/// conversation, the calls that wait ([`pending`](Self::pending)) and everything the loop
/// needs to go on: turn and retry counters, usage, the structured-answer state.
///
/// The resumed run gives the same events and the same final history as a run that never
/// paused: a paused run's stream ends with `Finished` inside its open turn (no `TurnEnd`),
/// and the resumed stream starts with the rest of that turn. (Call for call, that is: a
/// read-only call that started early, while the model streamed, may report its result before
/// the pause, where a run that never paused could report it after the batch's verdicts.)
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::{Agent, AgentEvent, Termination, ToolError};
/// use agent_loop::agent::{Resolutions, RunPolicy};
/// use agent_loop::tool::FnTool;
/// use futures::StreamExt;
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let delete = FnTool::new("delete", "Deletes a file.", |_: serde_json::Value, _ctx| async move {
///     Ok::<_, ToolError>("deleted")
/// });
/// let client = ScriptedClient::new([
///     ScriptedResponse::tool_call("c1", "delete", json!({"path": "a.txt"})),
///     ScriptedResponse::text("Done."),
/// ]);
/// let mut agent = Agent::builder(client)
///     .tool(delete)
///     .policy(RunPolicy::new().require_approval("delete"))
///     .build()?;
///
/// let events: Vec<AgentEvent> = agent.run("Delete a.txt").collect().await;
/// let Some(AgentEvent::Finished(outcome)) = events.last() else { unreachable!() };
/// let Termination::Paused(paused) = &outcome.termination else { unreachable!() };
/// assert_eq!(paused.pending()[0].name, "delete");
///
/// // Later, in this process or another (the paused run is serde):
/// let saved = serde_json::to_string(&**paused)?;
/// let paused: agent_loop::PausedRun = serde_json::from_str(&saved)?;
/// let events: Vec<AgentEvent> =
///     agent.resume(&paused, Resolutions::new().approve("c1")).collect().await;
/// let Some(AgentEvent::Finished(outcome)) = events.last() else { unreachable!() };
/// assert_eq!(outcome.final_text, "Done.");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PausedRun {
    /// The conversation, up to the response whose calls wait (their results not yet in).
    pub(crate) conversation: Conversation,
    /// The machine's state.
    pub(crate) state: PauseState,
}

impl PausedRun {
    /// The pause's id: unique within its session, rewinds included (it names the session's
    /// version the run started from: `v7-t1-p1-call_1`), or, for an agent with no session,
    /// within its conversation (`t1-p1-call_1`). An opaque string: compare it, do not parse
    /// it (a pause saved before ids named the version has an id without it, and resumes as
    /// any other).
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Where the agent in charge is among the handoffs (empty: the agent the run started
    /// with).
    pub(crate) fn route(&self) -> &[usize] {
        &self.state.routing.route
    }

    /// The calls that wait, in the model's order, each with its
    /// [digest](PendingCall::digest).
    pub fn pending(&self) -> Vec<PendingCall> {
        let calls = self.calls();
        let (waiting, waits_for): (Vec<usize>, _) = match &self.state.waiting {
            Waiting::Approval { verdicts } => (
                verdicts
                    .iter()
                    .filter(|(_, verdict)| verdict.is_none())
                    .map(|&(i, _)| i)
                    .collect(),
                WaitsFor::Approval,
            ),
            Waiting::Results { calls: waiting } => (waiting.clone(), WaitsFor::Result),
        };
        waiting
            .iter()
            .filter_map(|&i| calls.get(i))
            .map(|(id, name, input)| {
                let question = self.state.asked.get(id).cloned();
                PendingCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                    waits_for: if question.is_some() {
                        WaitsFor::Answer
                    } else {
                        waits_for
                    },
                    // As the pause recorded it; a pause from before digests has it computed.
                    digest: self
                        .state
                        .digests
                        .get(id)
                        .cloned()
                        .unwrap_or_else(|| digest_now(id, name, input, question.as_ref())),
                    question,
                }
            })
            .collect()
    }

    /// The digests of the waiting calls, by id, as a pause records them.
    pub(crate) fn digests_of(pending: &[PendingCall]) -> BTreeMap<String, String> {
        pending
            .iter()
            .map(|p| (p.id.clone(), p.digest.clone()))
            .collect()
    }

    /// The results of the paused response's calls that were answered before the run paused
    /// (calls that ran, or were refused, before the pause), in the model's order; the calls
    /// that wait ([`pending`](PausedRun::pending)) have none. For a host that leaves the
    /// pause behind instead of resuming it: these calls keep their results, the waiting ones
    /// get an answer of the host's (a denial) in the conversation it
    /// [restores](crate::Agent::restore).
    pub fn finished(&self) -> Vec<ToolCallResult> {
        self.state.results.iter().flatten().cloned().collect()
    }

    /// The conversation, up to the response whose calls wait.
    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// The turn the run paused in (1 for the first).
    pub fn turn(&self) -> u32 {
        self.state.counters.turns
    }

    /// The tokens the run used before it paused.
    pub fn usage(&self) -> Usage {
        self.state.spending.spent.usage
    }

    /// The calls of the response the run paused in: id, name, input.
    pub(crate) fn calls(&self) -> Vec<(String, String, serde_json::Value)> {
        self.conversation
            .messages
            .last()
            .map(|m| {
                m.tool_uses()
                    .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The machine's state as JSON, for a session store (the conversation is the session's).
    pub(crate) fn state_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.state).unwrap_or_default()
    }

    /// A paused run from a session's conversation and the state it stored.
    pub(crate) fn from_parts(
        conversation: Conversation,
        state: serde_json::Value,
    ) -> Result<PausedRun, String> {
        let found = state
            .get("format")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if found != u64::from(PAUSE_FORMAT) {
            return Err(format!(
                "a paused run in format {found}; this build reads format {PAUSE_FORMAT}"
            ));
        }
        let state = serde_json::from_value(state).map_err(|e| format!("a paused run: {e}"))?;
        Ok(PausedRun {
            conversation,
            state,
        })
    }

    /// Checks a paused run (deserialized from elsewhere) before it resumes with `resolutions`
    /// over `tools`: its format; that its batch matches the conversation's last response
    /// (each call with a result slot and an announced flag, each waiting call once and
    /// unanswered); that each answer is for a waiting call; and that no approved call's tool
    /// was lost since the pause. Gives the batch's calls.
    pub(crate) fn check(
        &self,
        resolutions: &Resolutions,
        tools: &ToolCatalog,
    ) -> Result<Vec<ToolCall>, ResumeError> {
        self.check_format()?;
        let state = &self.state;
        let calls: Vec<ToolCall> = self
            .calls()
            .into_iter()
            .map(|(id, name, input)| ToolCall::new(id, name, input))
            .collect();
        let n = calls.len();
        let waiting: Vec<usize> = match &state.waiting {
            Waiting::Approval { verdicts } => verdicts.iter().map(|&(i, _)| i).collect(),
            Waiting::Results { calls } => calls.clone(),
        };
        let mut seen = HashSet::with_capacity(waiting.len());
        if n == 0
            || state.results.len() != n
            || state.announced.len() != n
            // A call waiting twice would be counted twice: the batch could never pause or end.
            || waiting
                .iter()
                .any(|&i| i >= n || state.results[i].is_some() || !seen.insert(i))
        {
            return Err(ResumeError::Damaged(
                "its calls do not match the conversation's last response".to_owned(),
            ));
        }
        let pending = self.pending();
        for (id, resolution) in resolutions.iter() {
            let Some(call) = pending.iter().find(|p| p.id == id) else {
                let waiting: Vec<&str> = pending.iter().map(|p| p.id.as_str()).collect();
                return Err(ResumeError::UnknownCall {
                    id: id.to_owned(),
                    waiting: waiting.join(", "),
                });
            };
            // What waits now is what was asked when the pause was made (a paused run changed
            // since is damaged), and what the answer was given for, if it says.
            let current = digest_now(&call.id, &call.name, &call.input, call.question.as_ref());
            if call.digest != current {
                return Err(ResumeError::Damaged(format!(
                    "call {id:?} is not the call its pause recorded"
                )));
            }
            if let Some(given) = resolutions.digest(id) {
                if given != current {
                    return Err(ResumeError::StaleAnswer {
                        id: id.to_owned(),
                        given: given.to_owned(),
                        waiting: current,
                    });
                }
            }
            // An approved call runs, and so does an asking one, whatever its answer.
            let runs = match call.waits_for {
                WaitsFor::Approval => *resolution == Resolution::Approve,
                WaitsFor::Answer => true,
                WaitsFor::Result => false,
            };
            let had = state.tools.contains(&call.name);
            if runs && had && !tools.contains(&call.name) {
                return Err(ResumeError::MissingTool {
                    id: call.id.clone(),
                    tool: call.name.clone(),
                });
            }
        }
        Ok(calls)
    }

    /// Checks the format (a paused run deserialized from elsewhere).
    pub(crate) fn check_format(&self) -> Result<(), ResumeError> {
        if self.state.format == PAUSE_FORMAT {
            Ok(())
        } else {
            Err(ResumeError::Format {
                found: self.state.format,
                supported: PAUSE_FORMAT,
            })
        }
    }
}

/// A call that waits in a [`PausedRun`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct PendingCall {
    /// The call's id: resolve it by this id.
    pub id: String,
    /// The tool called.
    pub name: String,
    /// Its arguments.
    pub input: serde_json::Value,
    /// What it waits for.
    pub waits_for: WaitsFor,
    /// What its tool asked, for a call that waits for [`WaitsFor::Answer`].
    pub question: Option<Question>,
    /// The digest of what was asked: `sha256:` and the hex SHA-256 of the canonical JSON
    /// (keys sorted, no whitespace) of `[id, name, input]`. Give it back with the answer
    /// ([`Resolutions::for_call`], [`Resolutions::with_digest`]) and the answer is refused
    /// ([`ResumeError::StaleAnswer`]) unless the call waiting under this id is this very call:
    /// not one asked again after a rewind, not one of another branch with the same id. The
    /// same call has the same digest in every process.
    pub digest: String,
}

/// What a [`PendingCall`] waits for.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitsFor {
    /// A verdict: [`Resolutions::approve`] or [`Resolutions::deny`] (or a result, when the
    /// host ran the call itself).
    Approval,
    /// Its result, from outside: [`Resolutions::result`] or [`Resolutions::error`].
    Result,
    /// An answer to what its tool asked ([`ToolError::ask`](crate::ToolError::ask); the
    /// question is [`PendingCall::question`]): any answer runs the tool again with it, and
    /// the tool reads it in [`ToolContext::reply`](crate::ToolContext::reply).
    Answer,
}

/// The digest of a waiting call as it stands: with its question, for an asking one.
fn digest_now(
    id: &str,
    name: &str,
    input: &serde_json::Value,
    question: Option<&Question>,
) -> String {
    match question {
        Some(question) => asked_digest(id, name, input, question),
        None => call_digest(id, name, input),
    }
}

/// The host's answers to the calls of a [`PausedRun`], by call id, for
/// [`Agent::resume`](crate::Agent::resume). A call left without one keeps waiting: the
/// resumed run pauses again once everything else is done. Serde, so a web host can take
/// them in a request body.
///
/// ```
/// use agent_loop::agent::Resolutions;
///
/// use agent_loop::agent::Resolution;
///
/// assert!(Resolutions::new().is_empty());
/// let answers = Resolutions::new()
///     .approve("call_1")
///     .deny("call_2", "not on a Friday")
///     .result("call_3", "the user picked blue")
///     .deny("call_1", "changed my mind"); // a later answer for an id replaces it
/// assert_eq!(answers.len(), 3);
/// assert!(!answers.is_empty());
/// assert_eq!(
///     answers.get("call_1"),
///     Some(&Resolution::Deny { reason: "changed my mind".into() })
/// );
/// assert_eq!(answers.iter().map(|(id, _)| id).collect::<Vec<_>>(), ["call_1", "call_2", "call_3"]);
/// let json = serde_json::to_value(&answers)?;
/// assert_eq!(json["call_2"], serde_json::json!({"type": "deny", "reason": "not on a Friday"}));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Resolutions {
    /// By call id. Serialized as a JSON object: `{"call_1": {"type": "approve"}}`, with the
    /// digest the answer was given for, if any: `{"type": "approve", "digest": "sha256:…"}`.
    answers: BTreeMap<String, Answer>,
}

/// One answer, and the digest of the call it was given for, if the host said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Answer {
    #[serde(flatten)]
    resolution: Resolution,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
}

impl Resolutions {
    /// No answers yet.
    pub fn new() -> Self {
        Resolutions::default()
    }

    /// Approves the call `id`.
    pub fn approve(self, id: impl Into<String>) -> Self {
        self.with(id, Resolution::Approve)
    }

    /// Denies the call `id`; the model reads `reason`.
    pub fn deny(self, id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.with(
            id,
            Resolution::Deny {
                reason: reason.into(),
            },
        )
    }

    /// Answers the call `id` with its result.
    pub fn result(self, id: impl Into<String>, content: impl Into<String>) -> Self {
        self.with(
            id,
            Resolution::Result {
                content: content.into(),
                is_error: false,
            },
        )
    }

    /// Answers the call `id` with an error result.
    pub fn error(self, id: impl Into<String>, content: impl Into<String>) -> Self {
        self.with(
            id,
            Resolution::Result {
                content: content.into(),
                is_error: true,
            },
        )
    }

    /// Adds an answer (a later one for the same id replaces it).
    pub fn with(mut self, id: impl Into<String>, resolution: Resolution) -> Self {
        self.answers.insert(
            id.into(),
            Answer {
                resolution,
                digest: None,
            },
        );
        self
    }

    /// Adds an answer for the call `id` whose [digest](PendingCall::digest) is `digest`: the
    /// resume is refused ([`ResumeError::StaleAnswer`]) if the call waiting under `id` is
    /// another (asked again after a rewind, or from another branch). For a host that carries
    /// the id and the digest to a person and back.
    ///
    /// ```
    /// use agent_loop::agent::{Resolution, Resolutions};
    ///
    /// let answers = Resolutions::new().with_digest("c1", "sha256:00ff", Resolution::Approve);
    /// assert_eq!(answers.digest("c1"), Some("sha256:00ff"));
    /// let json = serde_json::to_value(&answers)?;
    /// assert_eq!(json["c1"], serde_json::json!({"type": "approve", "digest": "sha256:00ff"}));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn with_digest(
        mut self,
        id: impl Into<String>,
        digest: impl Into<String>,
        resolution: Resolution,
    ) -> Self {
        self.answers.insert(
            id.into(),
            Answer {
                resolution,
                digest: Some(digest.into()),
            },
        );
        self
    }

    /// Adds an answer for this very call: its id and its [digest](PendingCall::digest)
    /// (see [`with_digest`](Self::with_digest)).
    pub fn for_call(self, call: &PendingCall, resolution: Resolution) -> Self {
        self.with_digest(call.id.clone(), call.digest.clone(), resolution)
    }

    /// The answer for call `id`.
    pub fn get(&self, id: &str) -> Option<&Resolution> {
        self.answers.get(id).map(|a| &a.resolution)
    }

    /// The digest the answer for call `id` was given for, if it names one.
    pub fn digest(&self, id: &str) -> Option<&str> {
        self.answers.get(id).and_then(|a| a.digest.as_deref())
    }

    /// The answers, by call id (in the ids' order).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Resolution)> {
        self.answers
            .iter()
            .map(|(id, a)| (id.as_str(), &a.resolution))
    }

    /// The number of answers.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}

/// Everything the machine needs to go on from a pause, besides the conversation: the
/// machine's own parts, each as a pause keeps it (its `paused()` form), and the paused
/// batch. The parts are flattened, so the JSON is the one format 1 always had: a session
/// written before the parts existed reads the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PauseState {
    pub(crate) format: u32,
    pub(crate) id: String,
    /// The run's counts: the open turn (`turn`), pauses (this one included), continuations,
    /// the final call, the repeat and failure trackers.
    #[serde(flatten)]
    pub(super) counters: Counters,
    /// What the run spent, and the open turn's response cost (for its `TurnEnd`).
    #[serde(flatten)]
    pub(super) spending: Spending,
    /// The answer so far.
    #[serde(flatten)]
    pub(super) text: AnswerText,
    /// The renaming of repeated call ids so far.
    #[serde(flatten)]
    pub(super) ids: CallIds,
    /// The handoffs taken before the pause: where the agent in charge is.
    #[serde(flatten)]
    pub(super) routing: Routing,
    pub(crate) settings: RequestSettings,
    /// The structured answer asked for, and how it went so far.
    pub(crate) output: Option<OutputState>,
    /// The paused response's stop reason and usage (for its `TurnEnd`).
    pub(crate) stop_reason: StopReason,
    pub(crate) response_usage: Usage,
    /// Each call's result so far, in the model's order.
    pub(crate) results: Vec<Option<ToolCallResult>>,
    /// Whether each call's `ToolCall` event was emitted.
    pub(crate) announced: Vec<bool>,
    pub(crate) waiting: Waiting,
    /// The tools the agent had when it paused (a call of a tool it never had is answered as
    /// unknown when approved; one of a tool it had and lost is refused).
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    /// The handoff a call of the waiting batch asked for, applied when the batch completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) handoff: Option<usize>,
    /// The sub-agents' runs finished before the pause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sub_agents: Vec<SubAgentUsage>,
    /// The digest of each waiting call, by id ([`PendingCall::digest`]), as it was asked
    /// (absent in a pause from before digests: computed from the conversation then).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) digests: BTreeMap<String, String>,
    /// The version of the session the run started from, which its pauses' ids name (absent
    /// without a session, and in a pause from before ids named it: a resumed run's pauses
    /// then name none, as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session_version: Option<u64>,
    /// What the waiting calls whose tools asked asked, by call id (they wait among
    /// `Waiting::Results`' calls).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) asked: BTreeMap<String, Question>,
}

/// What the paused batch waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Waiting {
    /// Verdicts: each deciding call's position and verdict (`None`: a person's, pending).
    /// Nothing of the batch ran since they were asked for.
    Approval {
        verdicts: Vec<(usize, Option<ToolDecision>)>,
    },
    /// Results of deferred calls, or answers to calls whose tools asked (positions); every
    /// other call is answered.
    Results { calls: Vec<usize> },
}

/// The structured answer asked for, and how it went so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutputState {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) schema: serde_json::Value,
    pub(crate) max_retries: u32,
    pub(crate) failures: u32,
    pub(crate) force: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paused run's state as format 1 wrote it before the machine's parts existed: every
    /// key of the old hand-written `PauseState`.
    fn format_1() -> serde_json::Value {
        serde_json::json!({
            "format": 1,
            "id": "t3-p2-c1",
            "turn": 3,
            "pauses": 2,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0,
                      "cache_creation_input_tokens": 0},
            "failed_usage": {"input_tokens": 1, "output_tokens": 0, "cache_read_input_tokens": 0,
                             "cache_creation_input_tokens": 0},
            "cost": serde_json::to_value(crate::pricing::Cost::default()).unwrap(),
            "failed_cost": serde_json::to_value(crate::pricing::Cost::default()).unwrap(),
            "final_text": "so far",
            "repeats": ["sig", 2],
            "failures": 1,
            "continuations": 1,
            "final_call": true,
            "renamed_ids": 7,
            "settings": serde_json::to_value(RequestSettings::default()).unwrap(),
            "output": null,
            "stop_reason": "tool_use",
            "response_usage": {"input_tokens": 4, "output_tokens": 2,
                               "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            "response_cost": serde_json::to_value(crate::pricing::Cost::default()).unwrap(),
            "results": [null],
            "announced": [true],
            "waiting": {"type": "approval", "verdicts": [[0, null]]},
            "tools": ["delete"],
            "route": [1],
            "handoff": 0
        })
    }

    #[test]
    fn a_format_1_state_reads_into_the_parts_and_writes_back_the_same() {
        let old = format_1();
        let state: PauseState = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(state.counters.turns, 3);
        assert_eq!(state.counters.pauses, 2);
        assert_eq!(state.counters.continuations, 1);
        assert!(state.counters.final_call);
        assert_eq!(state.spending.spent.usage.input_tokens, 10);
        assert_eq!(state.spending.spent.failed_usage.input_tokens, 1);
        assert_eq!(state.text.final_text, "so far");
        assert_eq!(state.ids.renamed, 7);
        assert_eq!(state.routing.route, [1]);
        assert_eq!(serde_json::to_value(&state).unwrap(), old);
    }

    #[test]
    fn a_state_without_costs_or_a_route_reads_with_none() {
        let mut old = format_1();
        let map = old.as_object_mut().unwrap();
        for key in [
            "cost",
            "failed_cost",
            "response_cost",
            "route",
            "tools",
            "handoff",
        ] {
            map.remove(key);
        }
        let state: PauseState = serde_json::from_value(old).unwrap();
        assert_eq!(state.spending.turn_cost, crate::pricing::Cost::default());
        assert!(state.routing.route.is_empty());
        assert!(state.tools.is_empty());
    }

    #[test]
    fn resolutions_count_their_answers_and_a_later_one_replaces_an_earlier() {
        let none = Resolutions::new();
        assert!(none.is_empty());
        assert_eq!(none.len(), 0);
        let answers = Resolutions::new()
            .approve("a")
            .error("b", "broke")
            .deny("a", "no");
        assert!(!answers.is_empty());
        assert_eq!(answers.len(), 2);
        assert_eq!(
            answers.get("a"),
            Some(&Resolution::Deny {
                reason: "no".into()
            })
        );
        assert_eq!(
            answers.get("b"),
            Some(&Resolution::Result {
                content: "broke".into(),
                is_error: true
            })
        );
        assert_eq!(answers.get("c"), None);
        let json = serde_json::to_string(&answers).unwrap();
        assert_eq!(
            json,
            r#"{"a":{"type":"deny","reason":"no"},"b":{"type":"result","content":"broke","is_error":true}}"#
        );
        assert_eq!(serde_json::from_str::<Resolutions>(&json).unwrap(), answers);
    }
}
