//! Streams that survive a reconnect, over loopback HTTP, for both protocols: every frame
//! carries its id; a client cut off mid-answer reconnects with `Last-Event-ID` and gets
//! exactly the frames it missed, then the live ones; the run goes on without its client for
//! the grace time and is cancelled after it; a client that asks for frames the bounded
//! buffer dropped is told so (410).
//!
//! The model is gated by the test (each event sent when the test says), so where the client
//! is cut off and what the run has done by then is decided, not timed.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_loop::provider::reqwest;
use agent_loop::provider::{LlmStream, ModelRequest};
use agent_loop::session::MemoryStore;
use agent_loop::{Agent, LlmClient, LlmError, LlmEvent, Role, StopReason};
use agent_loop_ui::{agui, ai_sdk, ReplayLimits, RespondOptions, RunStreams};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// What the gated model's response streams.
type Events = mpsc::UnboundedReceiver<Result<LlmEvent, LlmError>>;

/// A model whose responses are what the test sends on their channels, when it sends it;
/// each request, as it comes, goes to the test (so that it knows the run is in that model
/// call).
#[derive(Clone)]
struct Gated {
    responses: Arc<Mutex<std::collections::VecDeque<Events>>>,
    requests: mpsc::UnboundedSender<ModelRequest>,
}

type Gate = mpsc::UnboundedSender<Result<LlmEvent, LlmError>>;

impl Gated {
    /// One response.
    fn new() -> (Gated, Gate) {
        let (gated, mut gates, _) = Gated::responses(1);
        (gated, gates.remove(0))
    }

    /// `n` responses, in order, and the requests as they come.
    fn responses(n: usize) -> (Gated, Vec<Gate>, mpsc::UnboundedReceiver<ModelRequest>) {
        let (gates, receivers): (Vec<Gate>, std::collections::VecDeque<Events>) =
            (0..n).map(|_| mpsc::unbounded_channel()).unzip();
        let (requests, asked) = mpsc::unbounded_channel();
        let gated = Gated {
            responses: Arc::new(Mutex::new(receivers)),
            requests,
        };
        (gated, gates, asked)
    }
}

impl LlmClient for Gated {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
        let rx = self
            .responses
            .lock()
            .unwrap()
            .pop_front()
            .expect("a response left");
        let _ = self.requests.send(request.clone());
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        }))
    }

    fn model(&self) -> &str {
        "gated"
    }
}

fn start() -> Result<LlmEvent, LlmError> {
    Ok(LlmEvent::MessageStart {
        id: "msg_1".into(),
        model: "gated".into(),
    })
}

fn text(text: &str) -> Result<LlmEvent, LlmError> {
    Ok(LlmEvent::TextDelta {
        index: 0,
        text: text.into(),
    })
}

fn end() -> Vec<Result<LlmEvent, LlmError>> {
    vec![
        Ok(LlmEvent::BlockStop { index: 0 }),
        Ok(LlmEvent::MessageStop {
            stop_reason: StopReason::EndTurn,
        }),
    ]
}

/// The routes of a resumable chat server for both protocols: `POST /api/chat` and
/// `GET /api/chat/{id}/stream` (the AI SDK), `POST /agui` (AG-UI, a reconnect first).
async fn server(model: Gated, streams: RunStreams) -> String {
    let store = Arc::new(MemoryStore::new());
    let options = RespondOptions::new().resumable(streams.clone());
    let (chat_model, chat_store, chat_options) = (model.clone(), store.clone(), options.clone());
    let agui_streams = streams.clone();
    let app = axum::Router::new()
        .route(
            "/api/chat",
            axum::routing::post(move |body: bytes::Bytes| {
                let (model, store, options) =
                    (chat_model.clone(), chat_store.clone(), chat_options.clone());
                async move {
                    let id = ai_sdk::ChatRequest::from_slice(&body)
                        .unwrap()
                        .id()
                        .to_owned();
                    let mut agent = Agent::builder(model).session(store, id).build().unwrap();
                    ai_sdk::respond_with(&mut agent, &body, &options).await
                }
            }),
        )
        .route(
            "/api/chat/{id}/stream",
            axum::routing::get(
                move |axum::extract::Path(id): axum::extract::Path<String>,
                      headers: axum::http::HeaderMap| {
                    let streams = streams.clone();
                    async move { ai_sdk::reconnect(&streams, &id, &headers) }
                },
            ),
        )
        .route(
            "/agui",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
                let (model, store, options, streams) = (
                    model.clone(),
                    store.clone(),
                    options.clone(),
                    agui_streams.clone(),
                );
                async move {
                    if let Some(response) = agui::reconnect(&streams, &headers, &body) {
                        return response;
                    }
                    let thread = agui::RunAgentInput::from_slice(&body)
                        .unwrap()
                        .thread_id()
                        .to_owned();
                    let mut agent = Agent::builder(model)
                        .session(store, thread)
                        .build()
                        .unwrap();
                    agui::respond_with(&mut agent, &body, &options).await
                }
            }),
        );
    common::web::serve(app).await
}

/// One SSE frame as sent: its id and its data.
#[derive(Debug, Clone, PartialEq)]
struct Frame {
    id: u64,
    data: String,
}

/// Reads SSE frames off a response as they come.
struct Frames {
    response: reqwest::Response,
    buffer: String,
}

impl Frames {
    fn new(response: reqwest::Response) -> Frames {
        Frames {
            response,
            buffer: String::new(),
        }
    }

    /// The next frame; `None` at the body's end.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(at) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..at + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.parse().expect("a numeric id"));
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                let id = id.unwrap_or_else(|| panic!("a frame without an id: {frame:?}"));
                return Some(Frame { id, data });
            }
            let chunk = self.response.chunk().await.expect("the body reads")?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Frames until (and with) the first whose data contains `needle`.
    async fn until(&mut self, needle: &str) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(frame) = self.next().await {
            let done = frame.data.contains(needle);
            out.push(frame);
            if done {
                return out;
            }
        }
        panic!("the stream ended before {needle:?}: {out:?}");
    }

    async fn rest(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(frame) = self.next().await {
            out.push(frame);
        }
        out
    }
}

fn chat_body(chat: &str, question: &str) -> Value {
    json!({"id": chat, "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": question}]}]})
}

fn agui_body(thread: &str, run: &str, question: &str) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [{"id": "u1", "role": "user", "content": question}]})
}

/// Waits until no client follows the run (the server saw the cut).
async fn until_unwatched(streams: &RunStreams, key: &str) {
    while streams.watchers(key) > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The text of the AI SDK frames' `text-delta` chunks.
fn ai_text(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .filter(|v| v["type"] == "text-delta")
        .map(|v| v["delta"].as_str().unwrap().to_owned())
        .collect()
}

/// The text of the AG-UI frames' `TEXT_MESSAGE_CONTENT` events.
fn agui_text(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .filter(|v| v["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|v| v["delta"].as_str().unwrap().to_owned())
        .collect()
}

fn ids(frames: &[Frame]) -> Vec<u64> {
    frames.iter().map(|f| f.id).collect()
}

/// The AI SDK: cut off after "Hello", the run goes on; the reconnect with `Last-Event-ID`
/// gets exactly the frames after it, then the live ones to `[DONE]`; the first part and the
/// rest are the whole answer, every id once and in order. Without the header (what the `ai`
/// package sends), the replay is the whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ai_sdk_client_reconnects_and_gets_exactly_what_it_missed() {
    let (model, gate) = Gated::new();
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{url}/api/chat"))
        .json(&chat_body("c1", "Say hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut live = Frames::new(response);
    gate.send(start()).unwrap();
    gate.send(text("Hello")).unwrap();
    let first = live.until("Hello").await;
    drop(live); // the connection is cut mid-answer
    until_unwatched(&streams, "c1").await;
    assert!(streams.is_live("c1"), "the run goes on without its client");
    gate.send(text(", world")).unwrap();
    let last_seen = first.last().unwrap().id;

    let response = http
        .get(format!("{url}/api/chat/c1/stream"))
        .header("last-event-id", last_seen.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let mut resumed = Frames::new(response);
    let before_end = resumed.until(", world").await;
    for event in end() {
        gate.send(event).unwrap();
    }
    let mut after = before_end;
    after.extend(resumed.rest().await);
    assert_eq!(after.first().unwrap().id, last_seen + 1, "{after:?}");
    assert_eq!(after.last().unwrap().data, "[DONE]");
    let all: Vec<Frame> = first.iter().chain(&after).cloned().collect();
    assert_eq!(ids(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(ai_text(&all), "Hello, world");

    // The `ai` package's reconnect sends no id: the whole run again, the same frames.
    let replay = Frames::new(
        http.get(format!("{url}/api/chat/c1/stream"))
            .header("last-event-id", "0")
            .send()
            .await
            .unwrap(),
    )
    .rest()
    .await;
    assert_eq!(replay, all);
    // Over, and no id named: nothing to resume (204), as for a chat with no run.
    for chat in ["c1", "unknown"] {
        let response = http
            .get(format!("{url}/api/chat/{chat}/stream"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 204, "{chat}");
    }
    // An id the run never sent.
    let response = http
        .get(format!("{url}/api/chat/c1/stream"))
        .header("last-event-id", (all.len() + 5).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

/// AG-UI: the run's request sent again with `Last-Event-ID` gets the events after it, then
/// the live ones to `RUN_FINISHED`; sent again with no id, all of them; no second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agui_client_reconnects_with_its_run_and_last_event_id() {
    let (model, gate) = Gated::new();
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let body = agui_body("t1", "r1", "Say hello");
    let mut live = Frames::new(
        http.post(format!("{url}/agui"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    );
    gate.send(start()).unwrap();
    gate.send(text("Hello")).unwrap();
    let first = live.until("Hello").await;
    drop(live);
    until_unwatched(&streams, "t1").await;
    let last_seen = first.last().unwrap().id;

    let mut resumed = Frames::new(
        http.post(format!("{url}/agui"))
            .header("last-event-id", last_seen.to_string())
            .json(&body)
            .send()
            .await
            .unwrap(),
    );
    // A second client, from the start, at the same time.
    let mut again = Frames::new(
        http.post(format!("{url}/agui"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    );
    gate.send(text(", world")).unwrap();
    for event in end() {
        gate.send(event).unwrap();
    }
    let after = resumed.rest().await;
    assert_eq!(after.first().unwrap().id, last_seen + 1);
    assert!(
        after.last().unwrap().data.contains("RUN_FINISHED"),
        "{after:?}"
    );
    let all: Vec<Frame> = first.iter().chain(&after).cloned().collect();
    assert_eq!(ids(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(agui_text(&all), "Hello, world");
    assert_eq!(
        all.iter()
            .filter(|f| f.data.contains("\"RUN_STARTED\""))
            .count(),
        1
    );
    assert_eq!(again.rest().await, all);
}

/// With no client, the run is cancelled after the grace time (here none): it ends with a
/// cancelled run's events, kept for a client that comes back, and the model's stream is
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_clients_is_cancelled_after_the_grace_time() {
    let (model, gate) = Gated::new();
    let streams = RunStreams::new().grace(Duration::ZERO);
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/api/chat"))
            .json(&chat_body("c2", "Say hello"))
            .send()
            .await
            .unwrap(),
    );
    gate.send(start()).unwrap();
    gate.send(text("Hello")).unwrap();
    let first = live.until("Hello").await;
    drop(live);
    streams.finished("c2").await;
    assert!(gate.is_closed(), "the model's stream was dropped");
    let rest = Frames::new(
        http.get(format!("{url}/api/chat/c2/stream"))
            .header("last-event-id", first.last().unwrap().id.to_string())
            .send()
            .await
            .unwrap(),
    )
    .rest()
    .await;
    assert_eq!(rest.last().unwrap().data, "[DONE]");
    assert_eq!(ai_text(&rest), "");
}

/// The buffer keeps the newest frames only: a client whose next frame was dropped gets 410
/// saying so, one that saw the newest kept ones gets the rest. (A live client that falls
/// so far behind that its next frame is dropped has its stream ended, and its reconnect
/// gets the same 410.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_past_the_buffer_is_refused_with_410() {
    let (model, gate) = Gated::new();
    let streams = RunStreams::new()
        .grace(Duration::from_secs(600))
        .limits(ReplayLimits::default().events(6));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/api/chat"))
            .json(&chat_body("c3", "Count"))
            .send()
            .await
            .unwrap(),
    );
    gate.send(start()).unwrap();
    // One at a time, read as they come: a live client never falls behind the buffer here.
    let mut all = Vec::new();
    for n in ["1", "2", "3", "4", "5", "6", "7", "8", "9"] {
        gate.send(text(n)).unwrap();
        all.extend(live.until(&format!("\"delta\":\"{n}\"")).await);
    }
    for event in end() {
        gate.send(event).unwrap();
    }
    all.extend(live.rest().await);
    assert_eq!(ai_text(&all), "123456789");
    assert_eq!(ids(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    let last = all.last().unwrap().id;
    let response = http
        .get(format!("{url}/api/chat/c3/stream"))
        .header("last-event-id", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 410);
    let text = response.text().await.unwrap();
    assert!(text.contains("no longer kept"), "{text}");
    let tail = Frames::new(
        http.get(format!("{url}/api/chat/c3/stream"))
            .header("last-event-id", (last - 3).to_string())
            .send()
            .await
            .unwrap(),
    )
    .rest()
    .await;
    assert_eq!(tail, all[all.len() - 3..].to_vec());
}

/// Waits until a client follows the run (it reconnected).
async fn until_watched(streams: &RunStreams, key: &str) {
    while streams.watchers(key) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The `ai` package's own chat client, come back mid-answer (`resumeStream()`, what
/// `useChat({ resume: true })` calls on mount): it GETs the reconnect route with no id, is
/// given the run from its start, then the live rest, and holds the whole answer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_packages_chat_resumes_a_running_stream() {
    if !common::web::node_available("the AI SDK resume test", "ai") {
        return;
    }
    let (model, gate) = Gated::new();
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/api/chat"))
            .json(&chat_body("c4", "Say hello"))
            .send()
            .await
            .unwrap(),
    );
    gate.send(start()).unwrap();
    gate.send(text("Hello")).unwrap();
    live.until("Hello").await;
    drop(live);
    until_unwatched(&streams, "c4").await;
    let api = format!("{url}/api/chat");
    let client = tokio::spawn(async move {
        common::web::node_json("ai-sdk-client.mjs", &["resume", &api, "c4"]).await
    });
    until_watched(&streams, "c4").await;
    gate.send(text(", world")).unwrap();
    for event in end() {
        gate.send(event).unwrap();
    }
    let seen = client.await.unwrap();
    assert_eq!(seen["error"], Value::Null, "{seen:#}");
    assert_eq!(seen["status"], "ready", "{seen:#}");
    let messages = seen["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{seen:#}");
    assert_eq!(messages[0]["role"], "assistant");
    let texts: Vec<&str> = messages[0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hello, world"], "{seen:#}");
}

/// `@ag-ui/client`'s `HttpAgent` sending the run's request again (its connection was lost):
/// it is given the run from its start, then the live rest, which its own checks
/// (`verifyEvents`) take as one valid run; no second run starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_agent_that_sends_its_run_again_follows_it() {
    if !common::web::node_available("the AG-UI reconnect test", "@ag-ui/client") {
        return;
    }
    let (model, gate) = Gated::new();
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/agui"))
            .json(&agui_body("t5", "r5", "Say hello"))
            .send()
            .await
            .unwrap(),
    );
    gate.send(start()).unwrap();
    gate.send(text("Hello")).unwrap();
    live.until("Hello").await;
    drop(live);
    until_unwatched(&streams, "t5").await;
    let endpoint = format!("{url}/agui");
    let client = tokio::spawn(async move {
        common::web::node_json(
            "agui-client.mjs",
            &["again", &endpoint, "t5", "r5", "Say hello"],
        )
        .await
    });
    until_watched(&streams, "t5").await;
    gate.send(text(", world")).unwrap();
    for event in end() {
        gate.send(event).unwrap();
    }
    let seen = client.await.unwrap();
    let types = strings(&seen["events"]);
    assert_eq!(
        types.first().map(String::as_str),
        Some("RUN_STARTED"),
        "{seen:#}"
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("RUN_FINISHED"),
        "{seen:#}"
    );
    assert_eq!(types.iter().filter(|t| *t == "RUN_STARTED").count(), 1);
    let answer: Vec<&Value> = seen["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(answer.len(), 1, "{seen:#}");
    assert_eq!(answer[0]["content"], "Hello, world", "{seen:#}");
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `RunStreams::cancel` (a Stop button) ends a running run at once, as a cancelled run
/// ends; its client gets that end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_kept_run() {
    let (model, gate) = Gated::new();
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/api/chat"))
            .json(&chat_body("c6", "Say hello"))
            .send()
            .await
            .unwrap(),
    );
    gate.send(start()).unwrap();
    gate.send(text("Hello")).unwrap();
    live.until("Hello").await;
    assert!(streams.cancel("c6"));
    let rest = live.rest().await;
    assert_eq!(rest.last().unwrap().data, "[DONE]");
    assert!(
        rest.iter().any(|f| f.data.contains("\"abort\"")),
        "{rest:?}"
    );
    assert!(!streams.is_live("c6"));
    assert!(!streams.cancel("c6"), "nothing to cancel once over");
    assert!(gate.is_closed(), "the model's stream was dropped");
}

/// Sends a whole text response on `gate`.
fn answer(gate: &Gate, words: &str) {
    gate.send(start()).unwrap();
    gate.send(text(words)).unwrap();
    for event in end() {
        gate.send(event).unwrap();
    }
}

/// The text of the last user message of a model request.
fn last_user_text(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.text())
        .unwrap_or_default()
}

/// `RunStreams::steer` mid-answer (the model's first response in flight) in the AI SDK: the
/// words enter the run after that response, the model's next call hears them, and the
/// client sees them where they landed, a `data-steered` part between the two steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ai_sdk_client_sees_the_words_that_steered_its_run_and_the_run_goes_on() {
    let (model, gates, mut asked) = Gated::responses(2);
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/api/chat"))
            .json(&chat_body("c7", "Largest French city?"))
            .send()
            .await
            .unwrap(),
    );
    asked.recv().await.expect("the first model call");
    gates[0].send(start()).unwrap();
    gates[0].send(text("Paris.")).unwrap();
    let first = live.until("Paris.").await;
    assert!(streams.steer("c7", "And the second?"));
    for event in end() {
        gates[0].send(event).unwrap();
    }
    let second_call = asked.recv().await.expect("a second model call");
    assert_eq!(last_user_text(&second_call), "And the second?");
    answer(&gates[1], "Marseille.");
    let all: Vec<Frame> = first.into_iter().chain(live.rest().await).collect();
    assert_eq!(ids(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    let chunks: Vec<Value> = all
        .iter()
        .filter_map(|f| serde_json::from_str(&f.data).ok())
        .collect();
    let types: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
    let steered = types.iter().position(|t| *t == "data-steered").unwrap();
    assert_eq!(
        chunks[steered],
        json!({"type": "data-steered", "data": {"text": "And the second?"}})
    );
    assert_eq!(types[steered - 1], "finish-step", "{types:?}");
    assert_eq!(types[steered + 1], "start-step", "{types:?}");
    assert_eq!(ai_text(&all), "Paris.Marseille.");
    assert_eq!(
        chunks.last().unwrap(),
        &json!({"type": "finish", "finishReason": "stop"})
    );
    assert!(
        !streams.steer("c7", "too late"),
        "nothing to steer once over"
    );
    assert!(!streams.steer("unknown", "hello"));
}

/// The same in AG-UI: the words are a user text message between the two turns' answers,
/// and the snapshot at the end keeps the id it was streamed with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agui_client_sees_the_words_that_steered_its_run_and_the_run_goes_on() {
    let (model, gates, mut asked) = Gated::responses(2);
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/agui"))
            .json(&agui_body("t8", "r8", "Largest French city?"))
            .send()
            .await
            .unwrap(),
    );
    asked.recv().await.expect("the first model call");
    gates[0].send(start()).unwrap();
    gates[0].send(text("Paris.")).unwrap();
    let first = live.until("Paris.").await;
    assert!(streams.steer("t8", "And the second?"));
    for event in end() {
        gates[0].send(event).unwrap();
    }
    let second_call = asked.recv().await.expect("a second model call");
    assert_eq!(last_user_text(&second_call), "And the second?");
    answer(&gates[1], "Marseille.");
    let all: Vec<Frame> = first.into_iter().chain(live.rest().await).collect();
    let events: Vec<Value> = all
        .iter()
        .filter_map(|f| serde_json::from_str(&f.data).ok())
        .collect();
    let brief: Vec<String> = events
        .iter()
        .map(|e| {
            let mut s = e["type"].as_str().unwrap().to_owned();
            for key in ["messageId", "role", "delta"] {
                if let Some(v) = e[key].as_str() {
                    s.push(' ');
                    s.push_str(v);
                }
            }
            s
        })
        .collect();
    let at = brief
        .iter()
        .position(|l| l == "TEXT_MESSAGE_START r8:s1 user")
        .unwrap_or_else(|| panic!("{brief:#?}"));
    assert_eq!(
        brief[at - 1..at + 4],
        [
            "STEP_FINISHED",
            "TEXT_MESSAGE_START r8:s1 user",
            "TEXT_MESSAGE_CONTENT r8:s1 And the second?",
            "TEXT_MESSAGE_END r8:s1",
            "STEP_STARTED",
        ],
        "{brief:#?}"
    );
    assert_eq!(agui_text(&all), "Paris.And the second?Marseille.");
    let snapshot = events
        .iter()
        .find(|e| e["type"] == "MESSAGES_SNAPSHOT")
        .unwrap();
    assert_eq!(
        snapshot["messages"][2],
        json!({"role": "user", "id": "r8:s1", "content": "And the second?"}),
        "{snapshot:#}"
    );
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

/// `RunStreams::stop_after_turn`: the turn in flight finishes, the run ends as a finished
/// run (no abort), and no other model call is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_after_turn_ends_a_kept_run_as_a_finished_one() {
    let (model, gates, mut asked) = Gated::responses(2);
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;
    let http = reqwest::Client::new();
    let mut live = Frames::new(
        http.post(format!("{url}/agui"))
            .json(&agui_body("t9", "r9", "Say hello"))
            .send()
            .await
            .unwrap(),
    );
    asked.recv().await.expect("the model call");
    gates[0].send(start()).unwrap();
    gates[0].send(text("Hello")).unwrap();
    live.until("Hello").await;
    assert!(streams.steer("t9", "Then say goodbye."));
    assert!(streams.stop_after_turn("t9"));
    for event in end() {
        gates[0].send(event).unwrap();
    }
    let rest = live.rest().await;
    let last: Value = serde_json::from_str(&rest.last().unwrap().data).unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{rest:?}");
    assert_eq!(last["outcome"], json!({"type": "success"}));
    // The words it never heard are handed back to the client.
    let undelivered = rest
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .find(|e| e["name"] == "agent_loop.undelivered")
        .unwrap_or_else(|| panic!("{rest:?}"));
    assert_eq!(
        undelivered["value"],
        json!({"texts": ["Then say goodbye."]})
    );
    assert!(!streams.stop_after_turn("t9"), "nothing to stop once over");
    assert!(asked.try_recv().is_err(), "no second model call");
    drop(gates);
}

/// The real clients follow a steered run: `@ag-ui/client`'s `HttpAgent` (its own checks,
/// `verifyEvents`, pass) holds the host's words as a user message between the two answers;
/// the `ai` package's chat holds them as a `data-steered` part between the two steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_clients_hold_the_words_that_steered_the_run() {
    if !common::web::node_available("the steering tests with the real clients", "ai") {
        return;
    }
    let (model, gates, mut asked) = Gated::responses(4);
    let streams = RunStreams::new().grace(Duration::from_secs(600));
    let url = server(model, streams.clone()).await;

    // AG-UI.
    let endpoint = format!("{url}/agui");
    let client = tokio::spawn(async move {
        common::web::node_json(
            "agui-client.mjs",
            &["again", &endpoint, "t10", "r10", "Largest French city?"],
        )
        .await
    });
    asked.recv().await.expect("the first model call");
    gates[0].send(start()).unwrap();
    gates[0].send(text("Paris.")).unwrap();
    assert!(streams.steer("t10", "And the second?"));
    for event in end() {
        gates[0].send(event).unwrap();
    }
    assert_eq!(
        last_user_text(&asked.recv().await.unwrap()),
        "And the second?"
    );
    answer(&gates[1], "Marseille.");
    let seen = client.await.unwrap();
    let messages: Vec<Value> = seen["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"id": m["id"], "role": m["role"], "content": m["content"]}))
        .collect();
    assert_eq!(
        messages,
        [
            json!({"id": "u1", "role": "user", "content": "Largest French city?"}),
            json!({"id": "r10:t1", "role": "assistant", "content": "Paris."}),
            json!({"id": "r10:s1", "role": "user", "content": "And the second?"}),
            json!({"id": "r10:t2", "role": "assistant", "content": "Marseille."}),
        ],
        "{seen:#}"
    );

    // The AI SDK's chat (its id: "chat-approval").
    let api = format!("{url}/api/chat");
    let client = tokio::spawn(async move {
        common::web::node_json("ai-sdk-client.mjs", &["chat", &api, "none"]).await
    });
    asked.recv().await.expect("the first model call");
    gates[2].send(start()).unwrap();
    gates[2].send(text("Paris.")).unwrap();
    assert!(streams.steer("chat-approval", "And the second?"));
    for event in end() {
        gates[2].send(event).unwrap();
    }
    assert_eq!(
        last_user_text(&asked.recv().await.unwrap()),
        "And the second?"
    );
    answer(&gates[3], "Marseille.");
    let seen = client.await.unwrap();
    assert_eq!(seen["status"], "ready", "{seen:#}");
    let parts: Vec<Value> = seen["first"][1]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| json!({"type": p["type"], "text": p["text"], "data": p["data"]}))
        .collect();
    assert_eq!(
        parts,
        [
            json!({"type": "step-start", "text": null, "data": null}),
            json!({"type": "text", "text": "Paris.", "data": null}),
            json!({"type": "data-steered", "text": null, "data": {"text": "And the second?"}}),
            json!({"type": "step-start", "text": null, "data": null}),
            json!({"type": "text", "text": "Marseille.", "data": null}),
        ],
        "{seen:#}"
    );
}
