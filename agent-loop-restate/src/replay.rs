//! Replay as a test: a finished durable run's journal, read back from Restate, drives the
//! agent machine again with no server, no model and no tools, and fails where the loop's
//! decisions differ from the recorded ones.
//!
//! A durable run's journal holds everything the run was told (each model response, tool
//! result, hook verdict, summary and human decision) and everything it did (each tool call
//! it made, with its arguments, and each state write: the conversation's messages, the
//! progress events, the status, and the report it answered with). A [`RecordedRun`] is that
//! journal; [`RecordedRun::replay`] runs the same driver the `AgentSession` object runs, on
//! the recorded results instead of Restate, and compares every call and write with the
//! recorded one, exactly as Restate does when it replays a run after a crash. The test fails
//! at the first difference: after a change to the agent (its prompt, tools, settings) or to
//! the loop, a recorded session shows whether the loop still decides the same way.
//!
//! Recording needs the journal kept after the run ends:
//! [`DurableAgent::journal_retention`](crate::DurableAgent::journal_retention). Then
//! [`RecordedRun::fetch`] reads it from the admin API, and [`RecordedRun::to_json`] gives
//! it as a file to keep next to the test:
//!
//! ```no_run
//! # async fn record() -> Result<(), agent_loop_restate::replay::ReplayError> {
//! use agent_loop_restate::replay::RecordedRun;
//!
//! // The last finished `run` of session `demo`, from the admin API.
//! let run = RecordedRun::fetch_last("http://127.0.0.1:9070", "demo").await?;
//! std::fs::write("tests/recorded/demo.json", run.to_json()).expect("write");
//! # Ok(())
//! # }
//! ```
//!
//! and the test, which needs no server:
//!
//! ```no_run
//! # async fn test(agent: agent_loop_restate::DurableAgent) {
//! use agent_loop_restate::replay::RecordedRun;
//!
//! // `agent`: built as the worker builds it (same client model, tools, configuration).
//! let run = RecordedRun::from_json(&std::fs::read_to_string("tests/recorded/demo.json").unwrap())
//!     .expect("a recorded run");
//! let report = run.replay(&agent).await.expect("the loop decides as it did");
//! assert!(report.completed);
//! # }
//! ```
//!
//! The replay needs the agent as the worker served it: the same tools (their names, schemas
//! and read-only flags; they do not run), the same configuration and approval policy, and a
//! client for the same model (it is not called). The recorded journal is Restate's own
//! (`sys_journal`'s `entry_json`, restate-server 1.7); only a run's `AgentSession/run`
//! invocation is read (each tool call's result is in it).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::agent::{AgentHooks, ToolDecision};
use agent_loop::context::{Conversation, Summarizer};
use agent_loop::tool::ToolCall;
use agent_loop::Message;
use bytes::Bytes;
use restate_sdk::errors::TerminalError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{ApprovalDecision, DurableAgent};
use crate::driver::{
    message_key, DurableDriver, Journal, ModelCall, Request, Stop, SubAgentRequest, CONVERSATION,
    EVENT_COUNT, MESSAGE_COUNT, SYSTEM,
};
use crate::inbox::Inbox;
use crate::record::{ModelStep, ToolStep};
use crate::report::RunReport;
use crate::session::OBJECT_NAME;

/// Why a recorded run could not be read or replayed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The journal could not be read: not the journal of a finished `run`, an entry of an
    /// unknown shape, or the admin API's answer.
    #[error("the recorded run cannot be read: {0}")]
    Unreadable(String),
    /// The replay did something else than the recorded run at this step: the loop's
    /// decisions changed.
    #[error(
        "the replay differs from the recorded run at journal entry {entry}: it recorded \
         {recorded}, the replay did {replayed}"
    )]
    Diverged {
        /// The index of the recorded journal entry (`sys_journal.index`).
        entry: u32,
        /// What the recorded run did there.
        recorded: String,
        /// What the replay did instead.
        replayed: String,
    },
    /// The agent could not be built, or the run ended with an error the recorded one did
    /// not end with.
    #[error("the replay failed: {0}")]
    Failed(String),
}

/// A finished `run` of a durable session, as its journal recorded it. Serializes (with
/// [`to_json`](Self::to_json)) to keep as a test fixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRun {
    /// The session (the object's key).
    pub session: String,
    /// The `run` invocation's id.
    pub invocation: String,
    /// The journal's entries in order, as `sys_journal.entry_json` gives them.
    pub entries: Vec<Value>,
}

impl RecordedRun {
    /// A recorded run from its journal entries (`sys_journal.entry_json`, in `index` order).
    pub fn new(
        session: impl Into<String>,
        invocation: impl Into<String>,
        entries: Vec<Value>,
    ) -> RecordedRun {
        RecordedRun {
            session: session.into(),
            invocation: invocation.into(),
            entries,
        }
    }

    /// Reads the journal of the `run` invocation `invocation` from Restate's admin API
    /// (`admin`: its base URL, `http://127.0.0.1:9070` by default). The run must be
    /// finished and its journal kept
    /// ([`DurableAgent::journal_retention`](crate::DurableAgent::journal_retention)).
    pub async fn fetch(admin: &str, invocation: &str) -> Result<RecordedRun, ReplayError> {
        let id = sql_string(invocation)?;
        let rows = query(
            admin,
            &format!(
                "SELECT target_service_key, status FROM sys_invocation WHERE id = '{id}' \
                 AND target_service_name = '{OBJECT_NAME}' AND target_handler_name IN \
                 ('run', 'subAgent')"
            ),
        )
        .await?;
        let Some(row) = rows.first() else {
            return Err(ReplayError::Unreadable(format!(
                "no {OBJECT_NAME}/run invocation {invocation} (finished runs are kept only \
                 with a journal retention)"
            )));
        };
        if row["status"] != "completed" {
            return Err(ReplayError::Unreadable(format!(
                "the run {invocation} is {}, not completed",
                row["status"]
            )));
        }
        let session = row["target_service_key"].as_str().unwrap_or("").to_owned();
        let rows = query(
            admin,
            &format!("SELECT index, entry_json FROM sys_journal WHERE id = '{id}' ORDER BY index"),
        )
        .await?;
        let mut entries = Vec::with_capacity(rows.len());
        for row in rows {
            let json = row["entry_json"].as_str().ok_or_else(|| {
                ReplayError::Unreadable(format!("journal entry {} has no entry_json", row["index"]))
            })?;
            entries.push(serde_json::from_str(json).map_err(|e| {
                ReplayError::Unreadable(format!("journal entry {}: {e}", row["index"]))
            })?);
        }
        Ok(RecordedRun::new(session, invocation, entries))
    }

    /// Reads the last finished `run` of `session` from the admin API (see
    /// [`fetch`](Self::fetch)); for a sub-agent's child session (`{session}/{call id}`), its
    /// run.
    pub async fn fetch_last(admin: &str, session: &str) -> Result<RecordedRun, ReplayError> {
        let key = sql_string(session)?;
        let rows = query(
            admin,
            &format!(
                "SELECT id FROM sys_invocation WHERE target_service_name = '{OBJECT_NAME}' AND \
                 target_service_key = '{key}' AND target_handler_name IN ('run', 'subAgent') \
                 AND status = 'completed' ORDER BY completed_at DESC LIMIT 1"
            ),
        )
        .await?;
        let id = rows
            .first()
            .and_then(|row| row["id"].as_str())
            .ok_or_else(|| {
                ReplayError::Unreadable(format!(
                    "session {session:?} has no finished run whose journal is kept"
                ))
            })?
            .to_owned();
        RecordedRun::fetch(admin, &id).await
    }

    /// The recorded run as JSON, to keep as a test fixture: one journal entry per line.
    pub fn to_json(&self) -> String {
        let mut out = format!(
            "{{\"session\": {},\n\"invocation\": {},\n\"entries\": [",
            Value::from(self.session.as_str()),
            Value::from(self.invocation.as_str())
        );
        for (i, entry) in self.entries.iter().enumerate() {
            out.push_str(if i == 0 { "\n" } else { ",\n" });
            out.push_str(&entry.to_string());
        }
        out.push_str("\n]}\n");
        out
    }

    /// A recorded run kept with [`to_json`](Self::to_json).
    pub fn from_json(json: &str) -> Result<RecordedRun, ReplayError> {
        serde_json::from_str(json).map_err(|e| ReplayError::Unreadable(e.to_string()))
    }

    /// The user's message the run started with (a sub-agent's run: its task).
    pub fn input(&self) -> Result<String, ReplayError> {
        let journal = Recorded::parse(&self.entries)?;
        Ok(journal.input)
    }

    /// Runs `agent` again on the recorded journal, with no server: the model's responses, the
    /// tools' results, hook verdicts, summaries and human decisions come from the journal;
    /// every tool call the replay makes and every state write must be the recorded one, in
    /// the recorded order, and the run must answer with the recorded report. Returns that
    /// report.
    pub async fn replay(&self, agent: &DurableAgent) -> Result<RunReport, ReplayError> {
        let recorded = Recorded::parse(&self.entries)?;
        let input = recorded.input.clone();
        let path = recorded.path.clone();
        let agent = agent.find(&path).ok_or_else(|| {
            ReplayError::Failed(format!("the agent has no sub-agent {}", path.join("/")))
        })?;
        let output = recorded.output.clone();
        let output_entry = recorded.output_entry;
        let (conversation, legacy, events) = recorded.start_state()?;
        let mut journal = ReplayJournal {
            recorded,
            diverged: None,
        };
        journal.skip_reads();
        // A sub-agent's run (a child session's `subAgent`) is replayed with that sub-agent.
        let (mut driver, machine) = DurableDriver::new(
            journal,
            agent,
            path,
            Arc::from(self.session.as_str()),
            conversation,
            legacy,
            events,
        )
        .map_err(|e| ReplayError::Failed(e.message().to_owned()))?;
        let result = driver.drive(machine, input).await;
        let journal = &mut driver.journal;
        if let Some(diverged) = journal.diverged.take() {
            return Err(diverged);
        }
        let replayed = match result {
            Ok(report) => Ok(
                serde_json::to_value(&report).map_err(|e| ReplayError::Failed(e.to_string()))?
            ),
            Err(e) => Err(e.message().to_owned()),
        };
        if let Some(next) = journal.recorded.commands.front() {
            return Err(ReplayError::Diverged {
                entry: next.entry,
                recorded: next.describe(),
                replayed: "nothing more: the run ended".into(),
            });
        }
        match (output, replayed) {
            (Ok(recorded), Ok(replayed)) if recorded == replayed => {
                serde_json::from_value(replayed).map_err(|e| ReplayError::Failed(e.to_string()))
            }
            (recorded, replayed) => Err(ReplayError::Diverged {
                entry: output_entry,
                recorded: format!("the answer {}", show_result(&recorded)),
                replayed: format!("the answer {}", show_result(&replayed)),
            }),
        }
    }
}

fn show_result(result: &Result<Value, String>) -> String {
    match result {
        Ok(value) => short(&value.to_string()),
        Err(message) => format!("error {message:?}"),
    }
}

/// `text`, cut for an error message.
fn short(text: &str) -> String {
    crate::record::bounded(text.to_owned(), 600)
}

/// A string for a SQL literal; refused when it holds a quote.
fn sql_string(text: &str) -> Result<&str, ReplayError> {
    if text.contains('\'') || text.contains('\\') {
        return Err(ReplayError::Unreadable(format!(
            "{text:?} cannot be an invocation id or session id here"
        )));
    }
    Ok(text)
}

/// Rows of the admin API's SQL endpoint.
async fn query(admin: &str, sql: &str) -> Result<Vec<Value>, ReplayError> {
    let unreadable =
        |e: agent_loop::provider::reqwest::Error| ReplayError::Unreadable(e.to_string());
    let response = agent_loop::provider::reqwest::Client::new()
        .post(format!("{}/query", admin.trim_end_matches('/')))
        .header("accept", "application/json")
        .json(&serde_json::json!({ "query": sql }))
        .send()
        .await
        .map_err(unreadable)?;
    let status = response.status();
    let body: Value = response.json().await.map_err(unreadable)?;
    if !status.is_success() {
        return Err(ReplayError::Unreadable(format!(
            "the admin API answered {status}: {body}"
        )));
    }
    Ok(body["rows"].as_array().cloned().unwrap_or_default())
}

/// One command of the journal with its result.
#[derive(Debug, Clone)]
struct Command {
    /// Its journal index.
    entry: u32,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Get {
        key: String,
        value: Option<Bytes>,
    },
    Set {
        key: String,
        value: Bytes,
    },
    Clear {
        key: String,
    },
    Run {
        name: String,
        result: Result<Bytes, String>,
    },
    Call {
        /// `{service}/{handler}`.
        target: String,
        parameter: Bytes,
        /// Its place among the calls' results, in the order they came.
        order: usize,
        result: Result<Bytes, String>,
    },
    Sleep,
    /// A one-way call (`send`).
    Send {
        /// `{service}/{handler}`.
        target: String,
        parameter: Bytes,
    },
    /// An awakeable resolved: its place among the signals, in order.
    Other(String),
}

impl Command {
    fn describe(&self) -> String {
        match &self.kind {
            Kind::Get { key, .. } => format!("a read of {key:?}"),
            Kind::Set { key, value } => {
                format!(
                    "the write of {key:?} = {}",
                    short(&String::from_utf8_lossy(value))
                )
            }
            Kind::Clear { key } => format!("the clear of {key:?}"),
            Kind::Run { name, .. } => format!("the step {name:?}"),
            Kind::Call { target, .. } if target == INBOX_TAKE => {
                "a read of the session's inbox".into()
            }
            Kind::Call { parameter, .. } => {
                format!(
                    "the tool call {}",
                    short(&String::from_utf8_lossy(parameter))
                )
            }
            Kind::Send { target, parameter } => format!(
                "the one-way call {target} {}",
                short(&String::from_utf8_lossy(parameter))
            ),
            Kind::Sleep => "a sleep".into(),
            Kind::Other(what) => what.clone(),
        }
    }
}

/// The journal, parsed: the input, the commands in order with their results, the signals
/// (awakeables resolved) in order, and the output.
#[derive(Debug)]
struct Recorded {
    input: String,
    /// The sub-agent that ran it (empty: the served agent).
    path: Vec<String>,
    commands: VecDeque<Command>,
    signals: VecDeque<Bytes>,
    output: Result<Value, String>,
    output_entry: u32,
}

/// The bytes of a JSON array of numbers (how `entry_json` writes byte strings).
fn bytes_of(value: &Value) -> Option<Bytes> {
    let items = value.as_array()?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(u8::try_from(item.as_u64()?).ok()?);
    }
    Some(Bytes::from(out))
}

/// `{service}/{handler}` of a call's request (`invocation_target` of any kind).
fn target_of(request: &Value) -> String {
    request["invocation_target"]
        .as_object()
        .and_then(|o| o.values().next())
        .map(|t| {
            format!(
                "{}/{}",
                t["name"].as_str().unwrap_or_default(),
                t["handler"].as_str().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}

/// The run's read of the session's inbox.
const INBOX_TAKE: &str = "AgentInbox/take";
/// The run's putting back of words it could not hand back.
const INBOX_PUT_BACK: &str = "AgentInbox/putBack";

/// A result as `entry_json` writes it: `{"Success": bytes}`, `{"Value": bytes}`,
/// `{"Failure": {...}}`; `None` for `"Void"` (no value) and any other shape.
fn result_of(value: &Value) -> Option<Result<Bytes, String>> {
    if let Some(bytes) = value.get("Success").or_else(|| value.get("Value")) {
        return bytes_of(bytes).map(Ok);
    }
    if let Some(failure) = value.get("Failure") {
        let message = failure
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| failure.to_string(), str::to_owned);
        return Some(Err(message));
    }
    // `"Void"` (no value) and anything else.
    None
}

impl Recorded {
    fn parse(entries: &[Value]) -> Result<Recorded, ReplayError> {
        let bad =
            |i: usize, what: &str| ReplayError::Unreadable(format!("journal entry {i}: {what}"));
        let mut input = None;
        let mut commands: VecDeque<Command> = VecDeque::new();
        // Completion id → the command waiting for it.
        let mut waiting: HashMap<u64, usize> = HashMap::new();
        let mut results: HashMap<u64, Result<Bytes, String>> = HashMap::new();
        let mut call_order: Vec<u64> = Vec::new();
        let mut signals = VecDeque::new();
        let mut output = None;
        let mut output_entry = 0;
        for (i, entry) in entries.iter().enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            if let Some(command) = entry.get("Command") {
                let Some((name, body)) = command.as_object().and_then(|o| o.iter().next()) else {
                    return Err(bad(i, "an empty command"));
                };
                let key = || body["key"].as_str().unwrap_or_default().to_owned();
                let kind = match name.as_str() {
                    "Input" => {
                        let payload = bytes_of(&body["payload"])
                            .ok_or_else(|| bad(i, "an input without payload"))?;
                        // A `run`'s input is the user's message; a `subAgent`'s, the task and
                        // which sub-agent runs it.
                        input = Some(match serde_json::from_slice::<String>(&payload) {
                            Ok(message) => (Vec::new(), message),
                            Err(_) => {
                                let sub: SubAgentRequest = serde_json::from_slice(&payload)
                                    .map_err(|e| {
                                        bad(i, &format!("the input is not a run's: {e}"))
                                    })?;
                                (sub.path, sub.task)
                            }
                        });
                        continue;
                    }
                    "GetEagerState" => Kind::Get {
                        key: key(),
                        value: result_of(&body["result"])
                            .and_then(Result::ok)
                            .filter(|b| !b.is_empty()),
                    },
                    "GetLazyState" => {
                        if let Some(id) = body["completion_id"].as_u64() {
                            waiting.insert(id, commands.len());
                        }
                        Kind::Get {
                            key: key(),
                            value: None,
                        }
                    }
                    "SetState" => Kind::Set {
                        key: key(),
                        value: bytes_of(&body["value"])
                            .ok_or_else(|| bad(i, "a state write without value"))?,
                    },
                    "ClearState" => Kind::Clear { key: key() },
                    "Run" => {
                        if let Some(id) = body["completion_id"].as_u64() {
                            waiting.insert(id, commands.len());
                        }
                        Kind::Run {
                            name: body["name"].as_str().unwrap_or_default().to_owned(),
                            result: Err("no result recorded".into()),
                        }
                    }
                    "Call" => {
                        if let Some(id) = body["result_completion_id"].as_u64() {
                            waiting.insert(id, commands.len());
                        }
                        Kind::Call {
                            target: target_of(&body["request"]),
                            parameter: bytes_of(&body["request"]["parameter"])
                                .ok_or_else(|| bad(i, "a call without parameter"))?,
                            order: usize::MAX,
                            result: Err("no result recorded".into()),
                        }
                    }
                    "Sleep" => Kind::Sleep,
                    "OneWayCall" => Kind::Send {
                        target: target_of(&body["request"]),
                        parameter: bytes_of(&body["request"]["parameter"])
                            .ok_or_else(|| bad(i, "a one-way call without parameter"))?,
                    },
                    "Output" => {
                        output_entry = index;
                        output = Some(match result_of(&body["result"]) {
                            Some(Ok(bytes)) => Ok(serde_json::from_slice::<Value>(&bytes)
                                .map_err(|e| bad(i, &format!("the output: {e}")))?),
                            Some(Err(message)) => Err(message),
                            None => return Err(bad(i, "an output of unknown shape")),
                        });
                        continue;
                    }
                    other => Kind::Other(format!("a {other} command")),
                };
                commands.push_back(Command { entry: index, kind });
            } else if let Some(notification) = entry.get("Notification") {
                if let Some(completion) = notification.get("Completion") {
                    let Some((name, body)) = completion.as_object().and_then(|o| o.iter().next())
                    else {
                        continue;
                    };
                    if name == "CallInvocationId" {
                        continue;
                    }
                    let Some(id) = body["completion_id"].as_u64() else {
                        continue;
                    };
                    let result = result_of(&body["result"]).unwrap_or(Ok(Bytes::new()));
                    if name == "Call" {
                        call_order.push(id);
                    }
                    results.insert(id, result);
                } else if let Some(signal) = notification.get("Signal") {
                    if let Some(Ok(bytes)) = result_of(&signal["result"]) {
                        signals.push_back(bytes);
                    }
                }
            }
        }
        let (path, input) = input.ok_or_else(|| {
            ReplayError::Unreadable("the journal has no input: not a run's journal".into())
        })?;
        let output = output.ok_or_else(|| {
            ReplayError::Unreadable("the journal has no output: the run is not finished".into())
        })?;
        for (id, at) in &waiting {
            let result = results.remove(id);
            let order = call_order
                .iter()
                .position(|c| c == id)
                .unwrap_or(usize::MAX);
            match (&mut commands[*at].kind, result) {
                (Kind::Run { result, .. }, Some(r)) => *result = r,
                (
                    Kind::Call {
                        result, order: o, ..
                    },
                    Some(r),
                ) => {
                    *result = r;
                    *o = order;
                }
                (Kind::Get { value, .. }, Some(Ok(bytes))) if !bytes.is_empty() => {
                    *value = Some(bytes);
                }
                _ => {}
            }
        }
        Ok(Recorded {
            input,
            path,
            commands,
            signals,
            output,
            output_entry,
        })
    }

    /// The value the run read for `key` before it started (`None`: not set).
    fn read(&self, key: &str) -> Option<&Bytes> {
        self.commands.iter().find_map(|c| match &c.kind {
            Kind::Get { key: k, value } if k == key => value.as_ref(),
            _ => None,
        })
    }

    /// The session's conversation and event count as the run read them.
    fn start_state(&self) -> Result<(Option<Conversation>, bool, u64), ReplayError> {
        let parse = |key: &str, bytes: &Bytes| -> Result<Value, ReplayError> {
            serde_json::from_slice(bytes)
                .map_err(|e| ReplayError::Unreadable(format!("the state {key:?}: {e}")))
        };
        let events = match self.read(EVENT_COUNT) {
            Some(bytes) => parse(EVENT_COUNT, bytes)?.as_u64().unwrap_or(0),
            None => 0,
        };
        if let Some(bytes) = self.read(MESSAGE_COUNT) {
            let count = parse(MESSAGE_COUNT, bytes)?.as_u64().unwrap_or(0);
            let system = match self.read(SYSTEM) {
                Some(bytes) => serde_json::from_value(parse(SYSTEM, bytes)?)
                    .map_err(|e| ReplayError::Unreadable(format!("the system prompt: {e}")))?,
                None => None,
            };
            let mut messages = Vec::new();
            for n in 0..usize::try_from(count).unwrap_or(usize::MAX) {
                let key = message_key(n);
                let bytes = self.read(&key).ok_or_else(|| {
                    ReplayError::Unreadable(format!("the run did not read {key}"))
                })?;
                let message: Message = serde_json::from_value(parse(&key, bytes)?)
                    .map_err(|e| ReplayError::Unreadable(format!("{key}: {e}")))?;
                messages.push(message);
            }
            return Ok((Some(Conversation::new(system, messages)), false, events));
        }
        if let Some(bytes) = self.read(CONVERSATION) {
            let conversation = serde_json::from_value(parse(CONVERSATION, bytes)?)
                .map_err(|e| ReplayError::Unreadable(format!("the conversation: {e}")))?;
            return Ok((Some(conversation), true, events));
        }
        Ok((None, false, events))
    }
}

/// The recorded journal as the driver's [`Journal`]: each step answered from it, each call
/// and write checked against it.
struct ReplayJournal {
    recorded: Recorded,
    /// The first difference; after it, steps fail and writes are ignored.
    diverged: Option<ReplayError>,
}

impl ReplayJournal {
    /// Skips the reads the handler made before the run started.
    fn skip_reads(&mut self) {
        while matches!(
            self.recorded.commands.front(),
            Some(Command {
                kind: Kind::Get { .. },
                ..
            })
        ) {
            self.recorded.commands.pop_front();
        }
    }

    /// Notes the first difference and fails the step.
    fn diverge(&mut self, replayed: String) -> Stop {
        if self.diverged.is_none() {
            let (entry, recorded) = match self.recorded.commands.front() {
                Some(next) => (next.entry, next.describe()),
                None => (self.recorded.output_entry, "the end of the run".into()),
            };
            self.diverged = Some(ReplayError::Diverged {
                entry,
                recorded,
                replayed,
            });
        }
        TerminalError::new("the replay diverged from the recorded run")
    }

    /// The next command, when it is what `matches` wants; else the divergence.
    fn next(
        &mut self,
        replayed: impl FnOnce() -> String,
        matches: impl Fn(&Kind) -> bool,
    ) -> Result<Kind, Stop> {
        if self.diverged.is_some() {
            return Err(TerminalError::new(
                "the replay diverged from the recorded run",
            ));
        }
        match self.recorded.commands.front() {
            Some(command) if matches(&command.kind) => Ok(self
                .recorded
                .commands
                .pop_front()
                .map(|c| c.kind)
                .unwrap_or(Kind::Sleep)),
            _ => Err(self.diverge(replayed())),
        }
    }

    /// The next step named `name`, decoded.
    fn step<T: serde::de::DeserializeOwned>(&mut self, name: &str) -> Result<T, Stop> {
        let kind = self.next(
            || format!("the step {name:?}"),
            |k| matches!(k, Kind::Run { name: n, .. } if n == name),
        )?;
        let Kind::Run { result, .. } = kind else {
            return Err(self.diverge(format!("the step {name:?}")));
        };
        match result {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                self.diverge(format!(
                    "the step {name:?}, whose recorded result does not read: {e}"
                ))
            }),
            // A step that failed for good: the run saw a terminal error there.
            Err(message) => Err(TerminalError::new(message)),
        }
    }
}

/// Whether two JSON values written by the run are the same (bytes, or the same JSON).
fn same_json(a: &[u8], b: &[u8]) -> bool {
    a == b
        || matches!(
            (serde_json::from_slice::<Value>(a), serde_json::from_slice::<Value>(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

impl Journal for ReplayJournal {
    type Awakeable = ();

    fn set(&mut self, key: &str, value: Bytes) {
        let replayed = || {
            format!(
                "the write of {key:?} = {}",
                short(&String::from_utf8_lossy(&value))
            )
        };
        let _ = self.next(
            replayed,
            |k| matches!(k, Kind::Set { key: rk, value: rv } if rk == key && same_json(rv, &value)),
        );
    }

    fn clear(&mut self, key: &str) {
        let _ = self.next(
            || format!("the clear of {key:?}"),
            |k| matches!(k, Kind::Clear { key: rk } if rk == key),
        );
    }

    async fn model(&mut self, _call: ModelCall) -> Result<ModelStep, Stop> {
        self.step("model")
    }

    async fn before_tool(
        &mut self,
        _hooks: Arc<dyn AgentHooks>,
        call: ToolCall,
    ) -> Result<ToolDecision, Stop> {
        self.step(&format!("before_tool {}", call.id))
    }

    async fn summary(
        &mut self,
        _summarizer: Arc<dyn Summarizer>,
        _span: Vec<Message>,
    ) -> Result<Result<String, String>, Stop> {
        self.step("summary")
    }

    /// The recorded read of the inbox; none (nothing said) when the run was recorded by a
    /// version that did not read it there.
    async fn inbox(&mut self) -> Result<Inbox, Stop> {
        if self.diverged.is_some() {
            return Err(TerminalError::new(
                "the replay diverged from the recorded run",
            ));
        }
        let is_read = matches!(
            self.recorded.commands.front(),
            Some(Command { kind: Kind::Call { target, .. }, .. }) if target == INBOX_TAKE
        );
        if !is_read {
            return Ok(Inbox::default());
        }
        let Some(Command {
            kind: Kind::Call { result, .. },
            ..
        }) = self.recorded.commands.pop_front()
        else {
            return Ok(Inbox::default());
        };
        let bytes = result.map_err(TerminalError::new)?;
        serde_json::from_slice(&bytes).map_err(|e| {
            self.diverge(format!(
                "a read of the inbox, whose recorded value does not read: {e}"
            ))
        })
    }

    fn put_back(&mut self, inputs: Vec<String>) {
        let sent = serde_json::to_vec(&inputs).unwrap_or_default();
        let _ = self.next(
            || format!("the one-way call {INBOX_PUT_BACK} {}", short(&String::from_utf8_lossy(&sent))),
            |k| matches!(k, Kind::Send { target, parameter } if target == INBOX_PUT_BACK && same_json(parameter, &sent)),
        );
    }

    async fn sleep(&mut self, _delay: Duration) -> Result<(), Stop> {
        self.next(|| "a sleep".into(), |k| matches!(k, Kind::Sleep))
            .map(drop)
    }

    fn awakeable(&mut self) -> (String, ()) {
        // Its id is what the run wrote next (the `approval/{call}` key); if the run wrote
        // something else next, that write's check says so.
        let id = match self.recorded.commands.front() {
            Some(Command {
                kind: Kind::Set { value, .. },
                ..
            }) => serde_json::from_slice::<String>(value).unwrap_or_default(),
            _ => String::new(),
        };
        (id, ())
    }

    async fn wait(&mut self, _awakeable: ()) -> Result<ApprovalDecision, Stop> {
        let Some(bytes) = self.recorded.signals.pop_front() else {
            return Err(self.diverge("a wait for a human's decision".into()));
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            self.diverge(format!(
                "a wait for a decision, whose recorded value does not read: {e}"
            ))
        })
    }

    async fn run_tools(
        &mut self,
        requests: Vec<Request>,
        done: &mut (dyn FnMut(ToolStep) + Send),
    ) -> Result<(), Stop> {
        let mut results = Vec::with_capacity(requests.len());
        for request in &requests {
            let sent = request.parameter();
            let replayed = || format!("the call {}", short(&String::from_utf8_lossy(&sent)));
            let kind = self.next(
                replayed,
                |k| matches!(k, Kind::Call { parameter, .. } if same_json(parameter, &sent)),
            )?;
            if let Kind::Call { order, result, .. } = kind {
                let sub_agent = match request {
                    Request::Tool(_) => None,
                    Request::SubAgent { id, name, .. } => Some((id.clone(), name.clone())),
                };
                results.push((order, sub_agent, result));
            }
        }
        // Fed in the order the results came in the recorded run.
        results.sort_by_key(|(order, _, _)| *order);
        for (_, sub_agent, result) in results {
            let bytes = result.map_err(TerminalError::new)?;
            let step = crate::session::answer(sub_agent, bytes).map_err(|e| {
                self.diverge(format!(
                    "a call's result that does not read: {}",
                    e.message()
                ))
            })?;
            done(step);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writes_match_as_bytes_or_as_the_same_json() {
        assert!(same_json(b"{\"a\":1}", b"{\"a\":1}"));
        assert!(same_json(b"{\"a\":1,\"b\":2}", b"{ \"b\": 2, \"a\": 1 }"));
        assert!(!same_json(b"{\"a\":1}", b"{\"a\":2}"));
        assert!(!same_json(b"not json", b"not json either"));
    }

    #[test]
    fn results_read_in_each_shape() {
        assert_eq!(
            result_of(&json!({"Success": [104, 105]})),
            Some(Ok(Bytes::from("hi")))
        );
        assert_eq!(
            result_of(&json!({"Value": [104]})),
            Some(Ok(Bytes::from("h")))
        );
        assert_eq!(
            result_of(&json!({"Failure": {"code": 500, "message": "boom"}})),
            Some(Err("boom".to_owned()))
        );
        assert_eq!(
            result_of(&json!({"Failure": {"code": 500}})),
            Some(Err(r#"{"code":500}"#.to_owned()))
        );
        assert_eq!(result_of(&json!("Void")), None);
        assert_eq!(result_of(&json!({"Success": [256]})), None);
        assert_eq!(bytes_of(&json!([1, -1])), None);
    }

    /// State read lazily (a completion after the command) counts like state read eagerly; a
    /// key read as absent is absent.
    #[test]
    fn lazily_read_state_is_the_start_state() {
        let count = json!([49]); // "1"
        let message = serde_json::to_vec(&Message::user("hi")).unwrap();
        let entries = vec![
            json!({"Command": {"Input": {"payload": [34, 104, 34]}}}),
            json!({"Command": {"GetLazyState": {"key": "messages", "completion_id": 1}}}),
            json!({"Notification": {"Completion": {"GetLazyState": {"completion_id": 1, "result": {"Value": count}}}}}),
            json!({"Command": {"GetLazyState": {"key": "system", "completion_id": 2}}}),
            json!({"Notification": {"Completion": {"GetLazyState": {"completion_id": 2, "result": "Void"}}}}),
            json!({"Command": {"GetLazyState": {"key": "message/0", "completion_id": 3}}}),
            json!({"Notification": {"Completion": {"GetLazyState": {"completion_id": 3, "result": {"Value": message}}}}}),
            json!({"Command": {"GetLazyState": {"key": "events", "completion_id": 4}}}),
            json!({"Notification": {"Completion": {"GetLazyState": {"completion_id": 4, "result": {"Value": []}}}}}),
            json!({"Command": {"Output": {"result": {"Success": [123, 125]}}}}),
        ];
        let recorded = Recorded::parse(&entries).expect("parses");
        assert_eq!(recorded.input, "h");
        assert!(recorded.read("system").is_none());
        assert!(recorded.read("events").is_none());
        let (conversation, legacy, events) = recorded.start_state().expect("start state");
        assert_eq!(
            conversation,
            Some(Conversation::new(None, vec![Message::user("hi")]))
        );
        assert!(!legacy);
        assert_eq!(events, 0);
    }
}
