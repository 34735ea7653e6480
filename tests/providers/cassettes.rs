//! Cassettes: real exchanges with a real model (llama.cpp's `llama-server`, see
//! `real_model`), recorded by a loopback proxy between the client and the server, committed
//! under `tests/fixtures/real_model/`, and replayed here with no server, so that a plain
//! `cargo test` runs real model output through the decoders and the whole loop.
//!
//! A cassette is one agent run: the scenario it ran (`real_model::scenario`), the endpoint,
//! and each exchange: the request body the client sent, the response status, content type
//! and bytes, cut where the server's chunks ended. Record them again with the server
//! running: `AGENT_LOOP_RECORD_CASSETTES=1 AGENT_LOOP_REAL_MODEL_URL=<url> cargo test --test
//! providers real_model::`.
//!
//! Replaying one checks:
//! - each response decodes the same at its recorded chunk boundaries as in one piece, and
//!   assembles when it was a success;
//! - the same scenario's agent, against the mock server answering with the recorded bytes,
//!   sends exactly the recorded requests (the history it built from real output is the one
//!   the real server was sent), ends as the real run ended, keeps the event grammar and a
//!   valid history.

use std::sync::{Arc, Mutex};

use agent_loop::provider::reqwest;
use agent_loop::testing::{MockResponse, MockServer};
use agent_loop::wire::WireFormat;
use agent_loop::{AnthropicClient, LlmClient, OpenAiClient};
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

/// The same parse failure without streaming, as llama.cpp b11434 answers it on both
/// endpoints (observed with `"stream": false`): HTTP 500 with an OpenAI-style error body.
/// Either client reports the status and the server's message.
#[tokio::test]
async fn the_servers_http_500_is_a_clear_error_on_both_endpoints() {
    const BODY: &str = r#"{"error":{"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}}"#;
    for endpoint in [Endpoint::OpenAi, Endpoint::Anthropic] {
        let server = MockServer::start().await;
        server.push(MockResponse::raw(
            500,
            "application/json; charset=utf-8",
            BODY,
        ));
        let client: Box<dyn LlmClient> = match endpoint {
            Endpoint::OpenAi | Endpoint::Responses => Box::new(
                OpenAiClient::new("")
                    .base_url(server.openai_base_url())
                    .model(MODEL)
                    .retry_policy(agent_loop::provider::transport::RetryPolicy::none()),
            ),
            Endpoint::Anthropic => Box::new(
                AnthropicClient::new("no-key")
                    .base_url(server.anthropic_base_url())
                    .model(MODEL)
                    .retry_policy(agent_loop::provider::transport::RetryPolicy::none()),
            ),
        };
        let request = agent_loop::provider::ModelRequest::new(vec![agent_loop::Message::user(
            "Write one sentence that explains what the JSON object {\"a\": 1} is.",
        )]);
        let items: Vec<_> = client.stream(&request).collect().await;
        let Some(Err(agent_loop::LlmError::Api(api))) = items.last() else {
            panic!("{endpoint:?}: {items:?}");
        };
        assert_eq!(api.status, 500, "{endpoint:?}");
        assert!(
            api.message.contains("peg-native format"),
            "{endpoint:?}: {}",
            api.message
        );
    }
}
