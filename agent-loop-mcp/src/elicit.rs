//! [`Elicitation`]: a server's `elicitation/create`, arriving during one of our tool calls,
//! becomes a pause of the agent's run; the host's answer goes back to the server when the run
//! is resumed.
//!
//! ```text
//!  tools/call in flight ──► elicitation/create (routed to the call: see route.rs)
//!        │                          │
//!        │                          ▼
//!        │               the call parks: its flight (the pending tools/call, its progress
//!        │               token, the server's queue) moves into `Parked` under a ticket,
//!        │               and the tool returns ToolError::ask(Question { prompt: message,
//!        │               schema: requestedSchema, data: { mcp_elicitation: { ticket … } } })
//!        │                          │                              ── the run pauses
//!        │        ┌─────────────────┴───────────────┐
//!        │   re-run with the reply               timeout / close / dropped
//!        │   (ctx.reply(): same call id)         server answered `cancel`,
//!        │        │                              tools/call cancelled
//!        │   Deny ─► decline    error result ─► cancel
//!        │   Approve / Result ─► the content checked against requestedSchema:
//!        │        valid ─► accept(content); not valid ─► ask again (3 asks, then decline)
//!        ▼        │
//!  the call goes on with the re-run's context: its result, or another question
//! ```
//!
//! Form-mode content is what a person typed: it goes to the server, never to the model; the
//! model reads the tool's result as the server makes it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::Duration;

use agent_loop::agent::Resolution;
use agent_loop::tool::Question;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::call::Flight;

/// How many times one server question is put to the host when the answers do not fit its
/// schema; after that the server is answered `decline`.
pub(crate) const MAX_ASKS: u32 = 3;

/// Where a question's own state lives in [`Question::data`].
pub(crate) const DATA_KEY: &str = "mcp_elicitation";

/// How many given-up tickets are remembered, to say why a late answer cannot be taken.
const REMEMBERED: usize = 256;

/// Turns a server's elicitation requests into pauses of the agent's run; give it to
/// [`McpServer::elicitation`](crate::McpServer::elicitation).
///
/// With it, the client declares the `elicitation` capability (form mode, and URL mode unless
/// [`url_mode(false)`](Self::url_mode)). When a server asks during one of its tools' calls,
/// the call pauses: the tool returns
/// [`ToolError::ask`](agent_loop::ToolError::ask) with a [`Question`] whose `prompt` is the
/// server's message (in URL mode, followed by the URL to open) and whose `schema` is the
/// server's `requestedSchema`, and the run ends `Paused` with the call waiting for an answer
/// (see [`Agent::resume`](agent_loop::Agent::resume)). The `tools/call` request stays in flight
/// meanwhile, held by the connection under the call's id, and the host's answer goes to the
/// server when the run is resumed:
///
/// | resolution | the server gets |
/// | --- | --- |
/// | [`Resolutions::result`](agent_loop::agent::Resolutions::result) with a JSON object | `accept` with that content, once it matches `requestedSchema` |
/// | [`Resolutions::approve`](agent_loop::agent::Resolutions::approve) | `accept` with `{}` (the server's defaults), when the schema requires nothing; URL mode: `accept` (the person went to the URL) |
/// | [`Resolutions::deny`](agent_loop::agent::Resolutions::deny) | `decline` |
/// | [`Resolutions::error`](agent_loop::agent::Resolutions::error) | `cancel` |
///
/// An answer that does not match the schema (not JSON, a missing required field, a wrong
/// type, a value out of range) is not sent: the run pauses again with the same question, the
/// problem said in its prompt, up to three times; then the server gets `decline`. After the
/// answer the call goes on: its result comes back to the model, or the server asks again
/// (another pause).
///
/// Bounds: at most [`max_parked`](Self::max_parked) calls wait at once on one connection (a
/// question over that is declined at once), and a call waits at most
/// [`timeout`](Self::timeout): then the server is answered `cancel` and the call is cancelled
/// (`notifications/cancelled`). Closing or dropping the connection does the same.
///
/// **A resumed call that finds nothing waiting.** The waiting call lives in this process, in
/// this connection. A run resumed elsewhere (another process, after a restart, from a session
/// store), or after the timeout, or after the connection was closed, finds no call to answer:
/// the tool's result is then an error that tells the model the server's question can no longer
/// be answered, and why; calling the tool again starts over.
///
/// **Which call a question belongs to.** Over streamable HTTP a server sends its question on
/// the response stream of the `tools/call` it belongs to, so several calls can be in flight
/// at once. Over stdio nothing on the wire says which call a question belongs to: it is taken
/// for the one call in flight, and declined when several are (use
/// [`Concurrency::Exclusive`](agent_loop::tool::Concurrency::Exclusive) for a stdio server
/// whose tools ask). A question that belongs to no call (sent on the standalone stream, or
/// between calls) is declined, and so is every question when elicitation is not turned on
/// (the capability is then not declared). So is a question asked of a call that runs outside
/// an agent run (a bare [`ToolRegistry`](agent_loop::ToolRegistry)), where no one could
/// answer it.
///
/// ```
/// use std::time::Duration;
/// use agent_loop_mcp::{Elicitation, McpServer};
///
/// let server = McpServer::http("bookings", "http://127.0.0.1:3001/mcp")
///     .elicitation(Elicitation::new().timeout(Duration::from_secs(600)).max_parked(8));
/// # let _ = server;
/// ```
#[derive(Debug, Clone)]
pub struct Elicitation {
    pub(crate) max_parked: u32,
    pub(crate) timeout: Duration,
    pub(crate) url: bool,
}

impl Default for Elicitation {
    fn default() -> Self {
        Elicitation {
            max_parked: 32,
            timeout: Duration::from_secs(15 * 60),
            url: true,
        }
    }
}

impl Elicitation {
    /// Elicitation on: form and URL mode, at most 32 waiting calls, 15 minutes each.
    pub fn new() -> Self {
        Elicitation::default()
    }

    /// The most calls that may wait for an answer at once on one connection (default 32; at
    /// least 1). A question over that is declined at once.
    pub fn max_parked(mut self, calls: u32) -> Self {
        self.max_parked = calls.max(1);
        self
    }

    /// How long a call waits for the host's answer (default 15 minutes). Then the server is
    /// answered `cancel`, the call is cancelled, and a later resume gets an error result.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether URL-mode questions are taken (default yes): the question's prompt holds the
    /// server's message and the URL, for a person to open; approving it answers `accept`.
    /// Off, the client declares form mode only (and declines a URL-mode question).
    pub fn url_mode(mut self, on: bool) -> Self {
        self.url = on;
        self
    }
}

/// A server question a call is waiting to answer.
pub(crate) struct Asked {
    pub(crate) params: ElicitRequestParams,
    pub(crate) reply: oneshot::Sender<ElicitResult>,
    /// How many times it was put to the host.
    pub(crate) asks: u32,
}

impl Asked {
    pub(crate) fn answer(self, result: ElicitResult) {
        let _ = self.reply.send(result);
    }
}

pub(crate) fn action(action: ElicitationAction) -> ElicitResult {
    ElicitResult::new(action)
}

/// The question for the host. `note` says why an answer was not taken (asked again).
pub(crate) fn question(
    server: &str,
    tool: &str,
    params: &ElicitRequestParams,
    ticket: &str,
    note: Option<&str>,
) -> Question {
    let (prompt, schema, mut data) = match params {
        ElicitRequestParams::UrlElicitationParams {
            message,
            url,
            elicitation_id,
            ..
        } => (
            format!("{message}\n\nOpen this URL to go on: {url}"),
            None,
            json!({"mode": "url", "url": url, "elicitation_id": elicitation_id}),
        ),
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => (
            message.clone(),
            serde_json::to_value(requested_schema).ok(),
            json!({"mode": "form"}),
        ),
        _ => (String::new(), None, json!({"mode": "unknown"})),
    };
    let prompt = match note {
        Some(note) => format!("{prompt}\n\n({note})"),
        None => prompt,
    };
    data["server"] = server.into();
    data["tool"] = tool.into();
    data["ticket"] = ticket.into();
    let mut question = Question::new(prompt).data(json!({ DATA_KEY: data }));
    if let Some(schema) = schema {
        question = question.schema(schema);
    }
    question
}

/// The ticket a question carries, from a reply's question.
pub(crate) fn ticket_of(question: &Question) -> Option<&str> {
    question.data.get(DATA_KEY)?.get("ticket")?.as_str()
}

/// What the host's resolution answers the server.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Send this.
    Answer(ElicitResult),
    /// The answer does not fit: ask again, saying why.
    AskAgain(String),
}

pub(crate) fn verdict(params: &ElicitRequestParams, resolution: &Resolution) -> Verdict {
    let schema = match params {
        ElicitRequestParams::UrlElicitationParams { .. } => {
            return Verdict::Answer(action(match resolution {
                Resolution::Approve => ElicitationAction::Accept,
                Resolution::Result {
                    is_error: false, ..
                } => ElicitationAction::Accept,
                Resolution::Result { is_error: true, .. } => ElicitationAction::Cancel,
                _ => ElicitationAction::Decline,
            }))
        }
        ElicitRequestParams::FormElicitationParams {
            requested_schema, ..
        } => serde_json::to_value(requested_schema).unwrap_or(Value::Null),
        // A mode this client does not know (rmcp's enum may grow): not answered.
        _ => return Verdict::Answer(action(ElicitationAction::Decline)),
    };
    let (content, approval) = match resolution {
        Resolution::Approve => (Value::Object(Default::default()), true),
        Resolution::Result {
            content,
            is_error: false,
        } => match serde_json::from_str::<Value>(content) {
            Ok(value @ Value::Object(_)) => (value, false),
            Ok(_) | Err(_) => {
                return Verdict::AskAgain(
                    "the answer was not taken: it must be a JSON object matching the schema; \
                     answer again, or deny"
                        .to_owned(),
                )
            }
        },
        Resolution::Result { is_error: true, .. } => {
            return Verdict::Answer(action(ElicitationAction::Cancel))
        }
        _ => return Verdict::Answer(action(ElicitationAction::Decline)),
    };
    match check(&schema, &content) {
        Ok(()) => Verdict::Answer(action(ElicitationAction::Accept).with_content(content)),
        Err(problems) if approval => Verdict::AskAgain(format!(
            "an approval alone does not answer this: {problems}; answer with a JSON object \
             matching the schema, or deny"
        )),
        Err(problems) => Verdict::AskAgain(format!(
            "the answer was not taken: {problems}; answer again with a JSON object matching \
             the schema, or deny"
        )),
    }
}

/// Checks `content` against the server's schema; the error lists what is wrong (at most
/// three problems).
fn check(schema: &Value, content: &Value) -> Result<(), String> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(validator) => validator,
        Err(e) => {
            // The server's schema is its own business: it checks the content itself.
            tracing::warn!(error = %e, "an MCP server's requestedSchema does not compile; the answer is sent unchecked");
            return Ok(());
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(content)
        .take(3)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// This process's mark on its tickets, and the keys that make them unguessable.
static TICKETS: LazyLock<(
    u64,
    std::collections::hash_map::RandomState,
    std::collections::hash_map::RandomState,
)> = LazyLock::new(|| {
    let a = std::collections::hash_map::RandomState::new();
    let b = std::collections::hash_map::RandomState::new();
    let process = a.hash_one(std::process::id()) ^ b.hash_one(u64::MAX);
    (process, a, b)
});
static TICKET_SERIAL: AtomicU64 = AtomicU64::new(0);

/// A new ticket: `<process>-<128 bits>`. The process part says whether a ticket came from
/// this process; the rest is SipHash of a serial under random keys, so tickets of other calls
/// cannot be guessed from one's own.
pub(crate) fn new_ticket() -> String {
    let (process, a, b) = &*TICKETS;
    let serial = TICKET_SERIAL.fetch_add(1, Ordering::Relaxed);
    let mut ha = a.build_hasher();
    ha.write_u64(serial);
    let mut hb = b.build_hasher();
    hb.write_u64(serial);
    format!("{process:016x}-{:016x}{:016x}", ha.finish(), hb.finish())
}

fn from_this_process(ticket: &str) -> bool {
    let (process, _, _) = &*TICKETS;
    ticket
        .split_once('-')
        .is_some_and(|(p, _)| p == format!("{process:016x}"))
}

/// A call waiting for the host's answer (`T`: its flight; generic for the tests).
pub(crate) struct ParkedCall<T = Flight> {
    pub(crate) call_id: String,
    pub(crate) flight: T,
    pub(crate) asked: Asked,
    timer: tokio::task::AbortHandle,
}

/// The calls of one connection waiting for answers, by ticket; bounded in number and time.
pub(crate) struct Parked<T = Flight> {
    pub(crate) config: Elicitation,
    calls: Mutex<HashMap<String, ParkedCall<T>>>,
    /// Tickets given up lately, with why.
    gone: Mutex<VecDeque<(String, String)>>,
}

/// Why a resumed call found nothing waiting.
pub(crate) enum Missing {
    /// The ticket is not this process's.
    OtherProcess,
    /// Given up, for this reason.
    Gone(String),
    /// Not known here.
    Unknown,
}

impl<T: Send + 'static> Parked<T> {
    pub(crate) fn new(config: Elicitation) -> Arc<Self> {
        Arc::new(Parked {
            config,
            calls: Mutex::new(HashMap::new()),
            gone: Mutex::new(VecDeque::new()),
        })
    }

    /// Parks a call under `ticket`; gives it back (`Some`) when the connection already holds
    /// `max_parked` waiting calls.
    pub(crate) fn park(
        self: &Arc<Self>,
        ticket: String,
        call_id: String,
        flight: T,
        asked: Asked,
    ) -> Option<(T, Asked)> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if calls.len() >= self.config.max_parked as usize {
            return Some((flight, asked));
        }
        let weak: Weak<Parked<T>> = Arc::downgrade(self);
        let timeout = self.config.timeout;
        let expiring = ticket.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some(parked) = weak.upgrade() {
                parked.give_up(
                    &expiring,
                    format!(
                        "no answer came within {timeout:?}, so the server was told the question \
                         was cancelled and the call was cancelled"
                    ),
                );
            }
        })
        .abort_handle();
        calls.insert(
            ticket,
            ParkedCall {
                call_id,
                flight,
                asked,
                timer,
            },
        );
        None
    }

    /// Takes the call parked under `ticket` for `call_id`.
    pub(crate) fn take(&self, ticket: &str, call_id: &str) -> Result<ParkedCall<T>, Missing> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        match calls.get(ticket) {
            Some(parked) if parked.call_id == call_id => {
                let parked = calls.remove(ticket).ok_or(Missing::Unknown)?;
                parked.timer.abort();
                Ok(parked)
            }
            Some(_) => Err(Missing::Unknown),
            None => {
                drop(calls);
                let gone = self.gone.lock().unwrap_or_else(PoisonError::into_inner);
                match gone.iter().find(|(t, _)| t == ticket) {
                    Some((_, why)) => Err(Missing::Gone(why.clone())),
                    None if !from_this_process(ticket) => Err(Missing::OtherProcess),
                    None => Err(Missing::Unknown),
                }
            }
        }
    }

    /// Gives up the call under `ticket`: the server is answered `cancel`, the call cancelled.
    fn give_up(&self, ticket: &str, why: String) {
        let parked = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(ticket);
        if let Some(parked) = parked {
            self.remember(ticket, why);
            parked.timer.abort();
            parked.asked.answer(action(ElicitationAction::Cancel));
            drop(parked.flight);
        }
    }

    /// Gives up every waiting call (the connection is closed).
    pub(crate) fn give_up_all(&self, why: &str) {
        let tickets: Vec<String> = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        for ticket in tickets {
            self.give_up(&ticket, why.to_owned());
        }
    }

    fn remember(&self, ticket: &str, why: String) {
        let mut gone = self.gone.lock().unwrap_or_else(PoisonError::into_inner);
        if gone.len() >= REMEMBERED {
            gone.pop_front();
        }
        gone.push_back((ticket.to_owned(), why));
    }
}

impl<T> Drop for Parked<T> {
    fn drop(&mut self) {
        // The connection is gone: answer every waiting question `cancel` (dropping each
        // flight cancels its call).
        let calls = std::mem::take(self.calls.get_mut().unwrap_or_else(PoisonError::into_inner));
        for (_, parked) in calls {
            parked.timer.abort();
            parked.asked.answer(action(ElicitationAction::Cancel));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(schema: Value) -> ElicitRequestParams {
        serde_json::from_value(json!({
            "mode": "form", "message": "How many seats?", "requestedSchema": schema
        }))
        .unwrap()
    }

    fn seats() -> ElicitRequestParams {
        form(json!({
            "type": "object",
            "properties": {
                "seats": {"type": "integer", "minimum": 1, "maximum": 12},
                "window": {"type": "boolean", "default": false}
            },
            "required": ["seats"]
        }))
    }

    fn result(content: &str) -> Resolution {
        Resolution::Result {
            content: content.to_owned(),
            is_error: false,
        }
    }

    #[test]
    fn a_valid_answer_is_accepted_with_its_content() {
        let verdict = verdict(&seats(), &result(r#"{"seats": 4, "window": true}"#));
        assert_eq!(
            verdict,
            Verdict::Answer(
                action(ElicitationAction::Accept).with_content(json!({"seats": 4, "window": true}))
            )
        );
    }

    #[test]
    fn an_answer_that_does_not_fit_is_asked_again_saying_why() {
        for (answer, expected) in [
            ("four", "must be a JSON object"),
            ("[4]", "must be a JSON object"),
            (r#"{"window": true}"#, "\"seats\" is a required property"),
            (
                r#"{"seats": 40}"#,
                "/seats: 40 is greater than the maximum of 12",
            ),
            (
                r#"{"seats": "4"}"#,
                "/seats: \"4\" is not of type \"integer\"",
            ),
        ] {
            match verdict(&seats(), &result(answer)) {
                Verdict::AskAgain(why) => assert!(why.contains(expected), "{answer}: {why}"),
                other => panic!("{answer}: {other:?}"),
            }
        }
        // An approval answers a question that requires nothing, with the server's defaults.
        match verdict(&seats(), &Resolution::Approve) {
            Verdict::AskAgain(why) => {
                assert!(
                    why.starts_with("an approval alone does not answer this"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        let optional = form(json!({"type": "object", "properties": {"note": {"type": "string"}}}));
        assert_eq!(
            verdict(&optional, &Resolution::Approve),
            Verdict::Answer(action(ElicitationAction::Accept).with_content(json!({})))
        );
    }

    #[test]
    fn deny_declines_and_an_error_result_cancels() {
        let deny = Resolution::Deny {
            reason: "no".into(),
        };
        let error = Resolution::Result {
            content: "failed".into(),
            is_error: true,
        };
        assert_eq!(
            verdict(&seats(), &deny),
            Verdict::Answer(action(ElicitationAction::Decline))
        );
        assert_eq!(
            verdict(&seats(), &error),
            Verdict::Answer(action(ElicitationAction::Cancel))
        );
        let url: ElicitRequestParams = serde_json::from_value(json!({
            "mode": "url", "message": "Sign in.", "url": "https://example.com/x", "elicitationId": "e1"
        }))
        .unwrap();
        assert_eq!(
            verdict(&url, &Resolution::Approve),
            Verdict::Answer(action(ElicitationAction::Accept))
        );
        assert_eq!(
            verdict(&url, &deny),
            Verdict::Answer(action(ElicitationAction::Decline))
        );
        let q = question("s", "t", &url, "tk", None);
        assert_eq!(
            q.prompt,
            "Sign in.\n\nOpen this URL to go on: https://example.com/x"
        );
        assert_eq!(q.schema, None);
        assert_eq!(ticket_of(&q), Some("tk"));
    }

    #[test]
    fn the_question_carries_the_servers_message_and_schema() {
        let q = question("bookings", "book", &seats(), "tk-1", None);
        assert_eq!(q.prompt, "How many seats?");
        assert_eq!(q.schema.as_ref().unwrap()["required"], json!(["seats"]));
        assert_eq!(q.data[DATA_KEY]["server"], "bookings");
        assert_eq!(q.data[DATA_KEY]["mode"], "form");
        let again = question("bookings", "book", &seats(), "tk-2", Some("why"));
        assert_eq!(again.prompt, "How many seats?\n\n(why)");
    }

    fn asked() -> (Asked, oneshot::Receiver<ElicitResult>) {
        let (reply, answer) = oneshot::channel();
        (
            Asked {
                params: seats(),
                reply,
                asks: 1,
            },
            answer,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_left_waiting_past_the_timeout_is_given_up_and_the_server_told_cancel() {
        let parked: Arc<Parked<&str>> =
            Parked::new(Elicitation::new().timeout(Duration::from_secs(60)));
        let (first, mut first_answer) = asked();
        let (second, second_answer) = asked();
        assert!(parked
            .park("t1".into(), "call_1".into(), "flight 1", first)
            .is_none());
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(parked
            .park("t2".into(), "call_2".into(), "flight 2", second)
            .is_none());
        tokio::time::sleep(Duration::from_secs(31)).await;
        // The first waited 61 s: given up, its question answered `cancel`.
        assert_eq!(
            first_answer.try_recv().unwrap(),
            action(ElicitationAction::Cancel)
        );
        match parked.take("t1", "call_1") {
            Err(Missing::Gone(why)) => {
                assert!(why.starts_with("no answer came within 60s"), "{why}")
            }
            _ => panic!("t1 is gone"),
        }
        // The second (31 s) still waits, for its own call id only.
        assert!(matches!(parked.take("t2", "call_1"), Err(Missing::Unknown)));
        let waiting = parked.take("t2", "call_2").ok().unwrap();
        assert_eq!(waiting.flight, "flight 2");
        // Taken: its timer no longer runs.
        tokio::time::sleep(Duration::from_secs(120)).await;
        waiting.asked.answer(action(ElicitationAction::Decline));
        assert_eq!(
            second_answer.await.unwrap(),
            action(ElicitationAction::Decline)
        );
        assert!(matches!(
            parked.take(&new_ticket(), "call_3"),
            Err(Missing::Unknown)
        ));
        assert!(matches!(
            parked.take("0000000000000000-00", "call_3"),
            Err(Missing::OtherProcess)
        ));
    }

    #[tokio::test]
    async fn at_most_max_parked_calls_wait_and_closing_gives_them_up() {
        let parked: Arc<Parked<u32>> = Parked::new(Elicitation::new().max_parked(2));
        let mut answers = Vec::new();
        for n in 0..2 {
            let (question, answer) = asked();
            answers.push(answer);
            assert!(parked
                .park(format!("t{n}"), format!("c{n}"), n, question)
                .is_none());
        }
        let (third, _) = asked();
        let Some((given_back, _)) = parked.park("t2".into(), "c2".into(), 2, third) else {
            panic!("a third call may not wait");
        };
        assert_eq!(given_back, 2);
        parked.give_up_all("the connection to the server was closed");
        for answer in answers {
            assert_eq!(answer.await.unwrap(), action(ElicitationAction::Cancel));
        }
        match parked.take("t0", "c0") {
            Err(Missing::Gone(why)) => assert_eq!(why, "the connection to the server was closed"),
            _ => panic!("t0 is gone"),
        }
    }

    #[tokio::test]
    async fn dropping_the_connection_answers_waiting_questions_cancel() {
        let parked: Arc<Parked<()>> = Parked::new(Elicitation::new());
        let (question, answer) = asked();
        assert!(parked.park("t".into(), "c".into(), (), question).is_none());
        drop(parked);
        assert_eq!(answer.await.unwrap(), action(ElicitationAction::Cancel));
    }

    #[test]
    fn tickets_differ_and_say_which_process_made_them() {
        let a = new_ticket();
        let b = new_ticket();
        assert_ne!(a, b);
        assert!(from_this_process(&a));
        assert!(!from_this_process("0000000000000000-00"));
        assert_eq!(a.len(), 16 + 1 + 32);
    }
}
