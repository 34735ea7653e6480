//! Cassettes: real exchanges with a real model (llama.cpp's `llama-server`, see
//! `real_model`), recorded by a loopback proxy between the client and the server, committed
//! under `tests/fixtures/real_model/`, and replayed here with no server, so that a plain
//! `cargo test` runs real model output through the decoders and the whole loop.
//!
//! A cassette is one agent run: the scenario it ran (`real_model::scenario`), the endpoint,
//! and each exchange: the request body the client sent, the response status, content type
//! and bytes, cut where the server's chunks ended. Record them again with the server
//! running: `AGENT_LOOP_RECORD_CASSETTES=1 AGENT_LOOP_REAL_MODEL_URL=<url> cargo test --test
//! providers -- --ignored real_model::`.
//!
//! Replaying one checks:
//! - each response decodes the same at its recorded chunk boundaries as in one piece, and
//!   assembles when it was a success;
//! - the same scenario's agent, against the mock server answering with the recorded bytes,
//!   sends exactly the recorded requests (the history it built from real output is the one
//!   the real server was sent), ends as the real run ended, keeps the event grammar and a
//!   valid history.

use std::sync::{Arc, Mutex};

use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::provider::reqwest;
use agent_loop::provider::transport::RetryPolicy;
use agent_loop::testing::{MockResponse, MockServer, ScriptedResponse};
use agent_loop::wire::WireFormat;
use agent_loop::{
    Agent, AgentEvent, AnthropicClient, LlmClient, LlmError, OpenAiClient, Termination,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use crate::real_model::{retries, run_checked, scenario, Endpoint, MODEL};

/// Where cassettes live.
fn dir() -> String {
    format!("{}/tests/fixtures/real_model", env!("CARGO_MANIFEST_DIR"))
}

/// One recorded run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Cassette {
    /// What served it.
    pub(crate) server: String,
    /// The scenario (`real_model::scenario`) whose agent made the requests.
    pub(crate) scenario: String,
    pub(crate) endpoint: Endpoint,
    /// How the real run ended (`Debug` of its termination's kind).
    pub(crate) termination: String,
    pub(crate) exchanges: Vec<Exchange>,
}

/// One request and its response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Exchange {
    pub(crate) path: String,
    pub(crate) request: Value,
    pub(crate) status: u16,
    pub(crate) content_type: String,
    /// The response body, cut where the server's chunks ended (a cut inside a UTF-8
    /// character is moved to its end).
    pub(crate) chunks: Vec<String>,
}

impl Exchange {
    fn body(&self) -> String {
        self.chunks.concat()
    }
}

/// A loopback proxy in front of the real server that records every exchange.
pub(crate) struct Recorder {
    url: String,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Starts a proxy forwarding to `upstream` (`http://127.0.0.1:<port>`).
    pub(crate) async fn start(upstream: &str) -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let upstream = upstream.to_owned();
        // No pooled connections: llama-server closes idle ones after 5 s, and a request on
        // a connection it just closed fails.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let log = exchanges.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (upstream, http, log) = (upstream.clone(), http.clone(), log.clone());
                tokio::spawn(async move {
                    let _ = proxy(socket, &upstream, &http, &log).await;
                });
            }
        });
        Recorder {
            url,
            exchanges,
            task,
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Writes what was recorded as the cassette `{scenario}_{endpoint}.json`.
    pub(crate) fn save(&self, scenario: &str, endpoint: Endpoint, termination: String) {
        let cassette = Cassette {
            server: format!("llama.cpp llama-server b11434, {MODEL} Q4_K_M"),
            scenario: scenario.to_owned(),
            endpoint,
            termination,
            exchanges: self.exchanges.lock().unwrap().clone(),
        };
        let path = format!("{}/{scenario}_{}.json", dir(), endpoint.name());
        std::fs::create_dir_all(dir()).unwrap();
        let mut text = serde_json::to_string_pretty(&cassette).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        eprintln!("recorded {path}");
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: reads a request (`content-length` body), forwards it, streams the
/// response back chunk by chunk while recording it. One request per connection.
async fn proxy(
    mut socket: tokio::net::TcpStream,
    upstream: &str,
    http: &reqwest::Client,
    log: &Mutex<Vec<Exchange>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut piece = [0u8; 8192];
        let n = socket.read(&mut piece).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&piece[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_owned();
    let mut length = 0;
    let mut forwarded = Vec::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_owned());
            if name == "content-length" {
                length = value.parse().unwrap_or(0);
            }
            if !matches!(
                name.as_str(),
                "host" | "content-length" | "connection" | "accept-encoding"
            ) {
                forwarded.push((name, value));
            }
        }
    }
    while buf.len() < head_end + length {
        let mut piece = [0u8; 8192];
        let n = socket.read(&mut piece).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&piece[..n]);
    }
    let body = buf[head_end..head_end + length].to_vec();
    let mut request = http.post(format!("{upstream}{path}")).body(body.clone());
    for (name, value) in &forwarded {
        request = request.header(name, value);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => {
            let text = format!("upstream: {e}");
            let reply = format!(
                "HTTP/1.1 502 Bad Gateway\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            return socket.write_all(reply.as_bytes()).await;
        }
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    socket
        .write_all(
            format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                response.status().canonical_reason().unwrap_or("")
            )
            .as_bytes(),
        )
        .await?;
    let index = {
        let mut log = log.lock().unwrap();
        log.push(Exchange {
            path,
            request: serde_json::from_slice(&body).unwrap_or(Value::Null),
            status,
            content_type,
            chunks: Vec::new(),
        });
        log.len() - 1
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(bytes)) = stream.next().await {
        pending.extend_from_slice(&bytes);
        // A chunk is kept as text up to its last whole UTF-8 character.
        let whole = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => pending.len(),
        };
        if whole > 0 {
            let text = String::from_utf8_lossy(&pending[..whole]).into_owned();
            log.lock().unwrap()[index].chunks.push(text);
            pending.drain(..whole);
        }
        socket
            .write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
            .await?;
        socket.write_all(&bytes).await?;
        socket.write_all(b"\r\n").await?;
        socket.flush().await?;
    }
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await
}

fn cassettes() -> Vec<(String, Cassette)> {
    let mut out: Vec<(String, Cassette)> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|entry| {
            let path = entry.unwrap().path();
            (path.extension()? == "json").then(|| {
                let text = std::fs::read_to_string(&path).unwrap();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let cassette =
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("cassette {name}: {e}"));
                (name, cassette)
            })
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every response decodes the same at its recorded chunk boundaries as in one piece; a
/// success assembles into a response, a failure status carries no stream.
#[test]
fn recorded_responses_decode_at_their_chunk_boundaries() {
    let all = cassettes();
    assert!(!all.is_empty(), "no cassettes in {}", dir());
    for (name, cassette) in all {
        let format = match cassette.endpoint {
            Endpoint::OpenAi => WireFormat::OpenAiChat,
            Endpoint::Anthropic => WireFormat::Anthropic,
            Endpoint::Responses => WireFormat::OpenAiResponses,
        };
        for (i, exchange) in cassette.exchanges.iter().enumerate() {
            if exchange.status != 200 || !exchange.content_type.starts_with("text/event-stream") {
                continue;
            }
            let body = exchange.body();
            let mut cuts = Vec::new();
            let mut at = 0;
            for chunk in &exchange.chunks {
                at += chunk.len();
                cuts.push(at);
            }
            cuts.pop();
            let split = common::decode_split(format, body.as_bytes(), &cuts);
            let whole = common::decode(format, body.as_bytes());
            assert_eq!(split, whole, "{name} exchange {i}");
            let bytewise = common::decode_chunked(format, body.as_bytes(), 1);
            assert_eq!(bytewise, whole, "{name} exchange {i}, byte by byte");
        }
    }
}

/// The scenario of each cassette, run against the recorded responses: the agent sends the
/// recorded requests, one for one, and ends as the real run did.
#[tokio::test]
async fn recorded_runs_replay_through_the_clients() {
    for (name, cassette) in cassettes() {
        let server = MockServer::start().await;
        for exchange in &cassette.exchanges {
            server.push(MockResponse::raw(
                exchange.status,
                exchange.content_type.clone(),
                exchange.body().into_bytes(),
            ));
        }
        let client: Box<dyn LlmClient> = match cassette.endpoint {
            Endpoint::OpenAi => Box::new(
                OpenAiClient::new("")
                    .base_url(server.openai_base_url())
                    .model(MODEL)
                    .retry_policy(retries()),
            ),
            Endpoint::Anthropic => Box::new(
                AnthropicClient::new("no-key")
                    .base_url(server.anthropic_base_url())
                    .model(MODEL)
                    .retry_policy(retries()),
            ),
            Endpoint::Responses => Box::new(
                OpenAiClient::new("")
                    .base_url(server.openai_base_url())
                    .model(MODEL)
                    .retry_policy(retries())
                    .responses(),
            ),
        };
        let (mut agent, input) = scenario(&cassette.scenario, client);
        let (_, outcome) = run_checked(&mut agent, input, None).await;
        let sent: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
        let recorded: Vec<Value> = cassette
            .exchanges
            .iter()
            .map(|e| e.request.clone())
            .collect();
        assert_eq!(
            sent, recorded,
            "{name}: the requests differ from the real run's"
        );
        assert_eq!(
            termination_kind(&outcome.termination),
            cassette.termination,
            "{name}: {:?}",
            outcome.termination
        );
        assert_eq!(server.history_violations(), Vec::<String>::new(), "{name}");
    }
}

/// A termination's kind, as a cassette records it (`Error` without its text).
pub(crate) fn termination_kind(t: &agent_loop::Termination) -> String {
    let text = format!("{t:?}");
    let end = text.find([' ', '(', '{']).unwrap_or(text.len());
    text[..end].to_owned()
}

/// llama.cpp's parse failure of the model's output before the stream started, as b11434
/// sends it on both endpoints (`tests/fixtures/real_model/http_500_unparsed_output.body`):
/// HTTP 500, `application/json; charset=utf-8`, an OpenAI-style error body. Its source:
/// `common_chat_parse` (common/chat.cpp) throws, the route's `ex_wrapper`
/// (tools/server/server.cpp) answers `format_error_response(…, ERROR_TYPE_SERVER)`.
fn unparsed_output_500() -> MockResponse {
    let body = std::fs::read(format!("{}/http_500_unparsed_output.body", dir())).unwrap();
    MockResponse::raw(500, "application/json; charset=utf-8", body)
}

/// A client of `endpoint` on the mock server, with the default retry policy (three
/// retries) made quick.
fn mock_client(endpoint: Endpoint, server: &MockServer) -> Box<dyn LlmClient> {
    let retry = RetryPolicy::default().initial_backoff(Duration::from_millis(1));
    match endpoint {
        Endpoint::OpenAi | Endpoint::Responses => Box::new(
            OpenAiClient::new("")
                .base_url(server.openai_base_url())
                .model(MODEL)
                .retry_policy(retry),
        ),
        Endpoint::Anthropic => Box::new(
            AnthropicClient::new("no-key")
                .base_url(server.anthropic_base_url())
                .model(MODEL)
                .retry_policy(retry),
        ),
    }
}

/// An agent with the calculator's shape (one tool) and three quick retries.
fn agent_on(endpoint: Endpoint, server: &MockServer) -> Agent {
    Agent::builder(mock_client(endpoint, server))
        .tool(common::agent::add_tool())
        .policy(
            RunPolicy::new()
                .retry(RetryPolicy::default().initial_backoff(Duration::from_millis(1))),
        )
        .build()
        .unwrap()
}

/// The last user message's last text of a request body (both formats keep it last).
fn last_user_text(body: &Value) -> String {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user", "{body}");
    match &last["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.last().unwrap()["text"].as_str().unwrap().to_owned(),
        other => panic!("content {other}"),
    }
}

/// A client on its own does not send the parse failure again (the same request, the same
/// output at temperature 0): one request, with three retries allowed, and the error is the
/// model's failure naming the server's message.
#[tokio::test]
async fn the_servers_parse_failure_is_not_sent_again_by_a_client() {
    for endpoint in [Endpoint::OpenAi, Endpoint::Anthropic] {
        let server = MockServer::start().await;
        for _ in 0..4 {
            server.push(unparsed_output_500());
        }
        let client = mock_client(endpoint, &server);
        let request = agent_loop::provider::ModelRequest::new(vec![agent_loop::Message::user(
            "What is 17 + 25?",
        )]);
        let items: Vec<_> = client.stream(&request).collect().await;
        let Some(Err(error @ LlmError::ModelFailure { reason, message })) = items.last() else {
            panic!("{endpoint:?}: {items:?}");
        };
        assert_eq!(reason, "unparsed_output", "{endpoint:?}");
        assert!(
            message.contains("does not match the expected peg-native format"),
            "{endpoint:?}: {message}"
        );
        assert!(error.is_retryable(), "the agent may send it again, changed");
        assert_eq!(server.requests().len(), 1, "{endpoint:?}");
    }
}

/// The agent sends the turn again once, with a note to the model, and no more: the failure
/// again would be the same request again. Two requests (not four), then an error that says
/// what the server said.
#[tokio::test]
async fn the_servers_parse_failure_is_sent_again_once_with_a_note() {
    for endpoint in [Endpoint::OpenAi, Endpoint::Anthropic] {
        let server = MockServer::start().await;
        for _ in 0..4 {
            server.push(unparsed_output_500());
        }
        let mut agent = agent_on(endpoint, &server);
        let (events, outcome) = common::agent::run(&mut agent, "What is 17 + 25?").await;
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{endpoint:?}: {events:#?}");
        let retries = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::Retry { .. }))
            .count();
        assert_eq!(retries, 1, "{endpoint:?}");
        assert_eq!(last_user_text(&requests[0].body), "What is 17 + 25?");
        let note = last_user_text(&requests[1].body);
        assert!(
            note.contains("could not be used") && note.contains("peg-native format"),
            "{endpoint:?}: {note}"
        );
        let Termination::Error(error) = &outcome.termination else {
            panic!("{endpoint:?}: {:?}", outcome.termination);
        };
        assert!(
            error.to_string().contains("does not match the expected"),
            "{error}"
        );
        assert!(server.history_violations().is_empty(), "{endpoint:?}");
        common::agent::assert_valid(&agent);
    }
}

/// After the note the model answers: the run completes with the answer, two requests.
#[tokio::test]
async fn the_servers_parse_failure_then_an_answer_completes() {
    for endpoint in [Endpoint::OpenAi, Endpoint::Anthropic] {
        let server = MockServer::start().await;
        server.push(unparsed_output_500());
        server.push(ScriptedResponse::text("17 + 25 = 42"));
        let mut agent = agent_on(endpoint, &server);
        let (events, outcome) = common::agent::run(&mut agent, "What is 17 + 25?").await;
        assert_eq!(
            outcome.termination,
            Termination::Completed,
            "{endpoint:?}: {events:#?}"
        );
        assert_eq!(outcome.final_text, "17 + 25 = 42");
        assert_eq!(server.requests().len(), 2, "{endpoint:?}");
    }
}

/// The same failure inside the stream, after some text (the recorded
/// `parse_failure_mid_stream_*` bytes: `data: {"error":…}` and `event: error`): also the
/// model's failure, sent again once with the note, not three times.
#[tokio::test]
async fn the_servers_parse_failure_mid_stream_is_sent_again_once() {
    for (endpoint, file) in [
        (Endpoint::OpenAi, "parse_failure_mid_stream_openai.json"),
        (
            Endpoint::Anthropic,
            "parse_failure_mid_stream_anthropic.json",
        ),
    ] {
        let cassette: Cassette =
            serde_json::from_str(&std::fs::read_to_string(format!("{}/{file}", dir())).unwrap())
                .unwrap();
        let exchange = &cassette.exchanges[0];
        let server = MockServer::start().await;
        for _ in 0..4 {
            server.push(MockResponse::raw(
                exchange.status,
                exchange.content_type.clone(),
                exchange.body().into_bytes(),
            ));
        }
        let mut agent = agent_on(endpoint, &server);
        let (events, outcome) = common::agent::run(&mut agent, "Explain {\"a\": 1}.").await;
        assert_eq!(server.requests().len(), 2, "{endpoint:?}: {events:#?}");
        let Termination::Error(error) = &outcome.termination else {
            panic!("{endpoint:?}: {:?}", outcome.termination);
        };
        assert!(error.to_string().contains("unparsed_output"), "{error}");
        common::agent::assert_valid(&agent);
    }
}
