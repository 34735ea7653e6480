//! Callers kept apart: every route refuses an unauthenticated caller, each protocol in its own
//! way; two callers with different tokens cannot reach each other's A2A tasks and contexts, MCP
//! sessions or parked MCP runs; a service with no authenticator serves loopback peers only.
//! Against the official clients where the other tests use them (Python `a2a-sdk` and `openai`),
//! raw HTTP (reqwest) and rmcp's client for the rest. Also the A2A cancel race and the artifact
//! chunks (what a client joins is what `GetTask` returns).

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use agent_loop::agent::RunPolicy;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentBuilder, ContentBlock, ToolError};
use agent_loop_serve::a2a::{self, AgentCard};
use agent_loop_serve::auth::{BearerTokens, Principal};
use agent_loop_serve::mcp::AgentMcpServer;
use agent_loop_serve::{responses, AgentService};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use futures::StreamExt;
use serde_json::{json, Value};
use tower::ServiceExt;

const ALICE: &str = "token-of-alice";
const BOB: &str = "token-of-bob";

fn tokens() -> BearerTokens {
    BearerTokens::new()
        .token(ALICE, Principal::new("alice"))
        .token(BOB, Principal::new("bob"))
}

/// A fresh adder per run: `add` 2 and 3, then the answer.
fn adder() -> AgentBuilder {
    Agent::builder(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("2 + 3 = 5"),
    ]))
    .tool(common::add_tool())
}

/// Every protocol over `service` on one router, served on loopback (with the peer's address);
/// gives the base URL.
async fn serve_all(service: &AgentService) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = responses::router(service)
        .merge(AgentMcpServer::new(service).router("/mcp"))
        .merge(a2a::router(
            service,
            AgentCard::new("adder", "Adds numbers.", &url),
        ));
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn rpc_body(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

async fn a2a_call(url: &str, token: Option<&str>, method: &str, params: Value) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .json(&rpc_body(method, params));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn every_route_refuses_an_unauthenticated_caller_in_its_protocols_way() {
    let service = AgentService::new(adder).authenticate(tokens());
    let url = serve_all(&service).await;
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let requests = [
        (
            "responses",
            http.post(format!("{url}/v1/responses"))
                .json(&json!({"model": "m", "input": "hi"})),
        ),
        (
            "a2a",
            http.post(format!("{url}/a2a"))
                .json(&rpc_body("GetTask", json!({"id": "x"}))),
        ),
        (
            "mcp post",
            http.post(format!("{url}/mcp"))
                .header("accept", "application/json, text/event-stream")
                .json(&initialize),
        ),
        (
            "mcp get",
            http.get(format!("{url}/mcp"))
                .header("accept", "text/event-stream"),
        ),
        (
            "mcp delete",
            http.delete(format!("{url}/mcp"))
                .header("mcp-session-id", "x"),
        ),
    ];
    for (route, request) in requests {
        for token in [None, Some("not-a-token")] {
            let request = request.try_clone().unwrap();
            let request = match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            };
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{route} with {token:?}");
            let challenge = response.headers()["www-authenticate"].to_str().unwrap();
            assert!(challenge.starts_with("Bearer"), "{route}: {challenge}");
            let body: Value = response.json().await.unwrap();
            match route {
                "responses" => {
                    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
                    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
                }
                "a2a" => {
                    assert_eq!(body["jsonrpc"], "2.0", "{body}");
                    assert!(body["error"]["code"].is_i64(), "{body}");
                }
                _ => assert_eq!(body["error"], "invalid_token", "{body}"),
            }
        }
    }
    // The card stays public, and declares the scheme.
    let card: Value = http
        .get(format!("{url}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"bearer": {"list": []}}}])
    );
    // With a token every route answers.
    let response = http
        .post(format!("{url}/v1/responses"))
        .bearer_auth(ALICE)
        .json(&json!({"model": "m", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let got = a2a_call(&url, Some(ALICE), "GetTask", json!({"id": "x"})).await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
}

#[tokio::test]
async fn the_openai_client_gets_its_authentication_error_for_a_wrong_key() {
    let service = AgentService::new(adder).authenticate(tokens());
    let url = serve_all(&service).await;
    let Some(python) = common::python("openai") else {
        return;
    };
    let seen = common::python_json(&python, "openai_auth.py", &[&format!("{url}/v1"), ALICE]).await;
    assert_eq!(seen["good"], "2 + 3 = 5");
    let wrong = &seen["wrong"];
    assert_eq!(wrong["class"], "AuthenticationError", "{seen}");
    assert_eq!(wrong["status"], 401);
    assert_eq!(wrong["code"], "invalid_api_key");
    assert_eq!(wrong["type"], "invalid_request_error");
}

#[tokio::test]
async fn two_a2a_callers_cannot_reach_each_others_tasks_or_contexts() {
    // One model for every run, in the order the script below makes them: A's run pauses at
    // `add`; A's answer resumes it; B's message (in a context named as A's) is a run of its own.
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("2 + 3 = 5"),
        ScriptedResponse::text("Hi B."),
    ]));
    let policy = RunPolicy::new().require_approval("add");
    let runs = model.clone();
    let service = AgentService::new(move || {
        Agent::builder(runs.clone())
            .tool(common::add_tool())
            .policy(policy.clone())
    })
    .authenticate(tokens());
    let url = serve_all(&service).await;
    let Some(python) = common::python("a2a") else {
        return;
    };
    let seen = common::python_json(&python, "a2a_callers.py", &[&url, "two", ALICE, BOB]).await;
    // A's client found the scheme on the card and sent its token.
    assert_eq!(seen["a_schemes"][0], "bearer", "{seen}");
    assert_eq!(seen["a_paused"]["state"], "TASK_STATE_INPUT_REQUIRED");
    // B is told A's task does not exist, whatever it tries.
    for probe in ["b_get", "b_cancel", "b_answer"] {
        assert_eq!(seen[probe]["error"], "TaskNotFoundError", "{probe}: {seen}");
    }
    // A's task is untouched, and A's answer completes it.
    assert_eq!(seen["a_got"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(seen["a_answered"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(seen["a_answered"]["answer"], "2 + 3 = 5");
    // B naming A's context id gets a conversation of its own: the model saw B's message alone.
    let b = &seen["b_in_a_context"];
    assert_eq!(b["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(b["answer"], "Hi B.");
    assert_eq!(b["context_id"], seen["a_paused"]["context_id"]);
    let last = model.last_request().unwrap();
    assert_eq!(last.messages.len(), 1, "{:?}", last.messages);
    assert_eq!(
        last.messages[0].content,
        vec![ContentBlock::text("Hello from B.")]
    );
    // A client with no token is refused with HTTP 401.
    for probe in ["anonymous_send", "anonymous_get"] {
        let text = seen[probe]["text"].as_str().unwrap_or_default();
        assert!(text.contains("401"), "{probe}: {seen}");
    }
}

#[tokio::test]
async fn two_a2a_callers_over_raw_json_rpc_and_a_streamed_task() {
    let service = AgentService::new(|| {
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("thinking…").then_stall()
        ]))
    })
    .authenticate(tokens());
    let url = serve_all(&service).await;
    // A starts a streamed task that keeps running.
    let body = rpc_body(
        "SendStreamingMessage",
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}),
    );
    let response = reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .bearer_auth(ALICE)
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut frames = sse_frames(response);
    let first = frames.next().await.unwrap();
    let task_id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        task_id.len(),
        "task-".len() + 32,
        "128 random bits: {task_id}"
    );
    for (method, params) in [
        ("GetTask", json!({"id": task_id})),
        ("CancelTask", json!({"id": task_id})),
        (
            "SendMessage",
            json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": task_id,
                "parts": [{"text": "approve"}]}}),
        ),
    ] {
        let got = a2a_call(&url, Some(BOB), method, params).await;
        assert_eq!(got["error"]["code"], -32001, "{method}: {got}");
        assert!(!got.to_string().contains("thinking"), "{got}");
    }
    // A's task still runs: A cancels it.
    let cancelled = a2a_call(&url, Some(ALICE), "CancelTask", json!({"id": task_id})).await;
    assert_eq!(
        cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
}

/// The JSON of each `data:` line of an SSE response, as they come.
fn sse_frames(response: reqwest::Response) -> futures::stream::BoxStream<'static, Value> {
    let bytes = response.bytes_stream();
    futures::stream::unfold(
        (bytes, String::new()),
        |(mut bytes, mut buffer)| async move {
            loop {
                if let Some(end) = buffer.find("\n\n") {
                    let frame: String = buffer.drain(..end + 2).collect();
                    let data = frame
                        .lines()
                        .filter_map(|l| l.strip_prefix("data: "))
                        .collect::<String>();
                    if data.is_empty() {
                        continue;
                    }
                    let value: Value = serde_json::from_str(&data).unwrap();
                    return Some((value, (bytes, buffer)));
                }
                match bytes.next().await {
                    Some(Ok(chunk)) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
                    _ => return None,
                }
            }
        },
    )
    .boxed()
}

fn state_of(frame: &Value) -> Option<&str> {
    let result = &frame["result"];
    result["statusUpdate"]["status"]["state"]
        .as_str()
        .or(result["task"]["status"]["state"].as_str())
}

#[tokio::test]
async fn cancel_task_answers_only_once_the_run_stopped_50_times() {
    // The tool notes its start in the log, then waits forever (until the run drops it). Odd
    // runs' model stalls before its call (the cancel lands while it streams, the tool never
    // starts); even runs' calls the tool at once (the cancel lands while it runs).
    let log: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let tool_log = log.clone();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let service = AgentService::new(move || {
        let log = tool_log.clone();
        let run = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let work = FnTool::new("work", "Works.", move |_input: Value, _ctx| {
            log.lock().unwrap().push("tool started");
            async move {
                std::future::pending::<()>().await;
                Ok::<_, ToolError>(String::new())
            }
        });
        let first = match run % 2 {
            0 => ScriptedResponse::text("On it.").chunked(2).then_tool_call(
                "call_1",
                "work",
                json!({}),
            ),
            _ => ScriptedResponse::text("On it.").then_stall(),
        };
        Agent::builder(ScriptedClient::new([first, ScriptedResponse::text("done")])).tool(work)
    })
    .authenticate(tokens());
    let url = serve_all(&service).await;
    let http = reqwest::Client::new();
    let mut tools_started_before_the_answer = 0;
    for round in 0..50 {
        log.lock().unwrap().clear();
        let body = rpc_body(
            "SendStreamingMessage",
            json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "go"}]}}),
        );
        let response = http
            .post(format!("{url}/a2a"))
            .bearer_auth(ALICE)
            .json(&body)
            .send()
            .await
            .unwrap();
        let mut frames = sse_frames(response);
        let first = frames.next().await.unwrap();
        let task_id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
        let cancelled = a2a_call(&url, Some(ALICE), "CancelTask", json!({"id": task_id})).await;
        log.lock().unwrap().push("cancel answered");
        assert_eq!(
            cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED",
            "round {round}: {cancelled}"
        );
        let rest: Vec<Value> = frames.collect().await;
        let states: Vec<&str> = std::iter::once(&first)
            .chain(&rest)
            .filter_map(state_of)
            .collect();
        let terminal: Vec<&&str> = states
            .iter()
            .filter(|s| {
                [
                    "TASK_STATE_COMPLETED",
                    "TASK_STATE_FAILED",
                    "TASK_STATE_CANCELED",
                ]
                .contains(s)
            })
            .collect();
        assert_eq!(
            terminal,
            [&"TASK_STATE_CANCELED"],
            "round {round}: {states:?}"
        );
        assert_eq!(
            states.last(),
            Some(&"TASK_STATE_CANCELED"),
            "round {round}: {states:?}"
        );
        let log = log.lock().unwrap().clone();
        let answered = log.iter().position(|e| *e == "cancel answered").unwrap();
        assert!(
            !log[answered..].contains(&"tool started"),
            "round {round}: a tool started after CancelTask answered: {log:?}"
        );
        tools_started_before_the_answer += log[..answered].len();
        let got = a2a_call(&url, Some(ALICE), "GetTask", json!({"id": task_id})).await;
        assert_eq!(got["result"]["status"]["state"], "TASK_STATE_CANCELED");
    }
    // Not asserted (it depends on scheduling), but shown: how often the tool had started.
    println!(
        "rounds in which the tool started before the cancel: {tools_started_before_the_answer}/50"
    );
}

#[tokio::test]
async fn the_a2a_sdk_joins_the_streamed_chunks_to_what_get_task_returns() {
    // Turn one says something, then calls `add`; turn two's text is the answer.
    let service = AgentService::new(|| {
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("Let me add.").then_tool_call(
                "call_1",
                "add",
                json!({"a": 2, "b": 3}),
            ),
            ScriptedResponse::text("Result: 5").chunked(3),
        ]))
        .tool(common::add_tool())
    })
    .authenticate(tokens());
    let url = serve_all(&service).await;
    let Some(python) = common::python("a2a") else {
        return;
    };
    let seen = common::python_json(&python, "a2a_callers.py", &[&url, "join", ALICE]).await;
    assert_eq!(seen["got"]["answer"], "Result: 5", "{seen}");
    assert_eq!(seen["joined"], "Result: 5", "{seen}");
    assert_eq!(seen["joined_artifacts"], 1);
    let chunks: Vec<&Value> = seen["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("text").is_some())
        .collect();
    assert_eq!(chunks[0]["append"], false, "{seen}");
    let last: Vec<usize> = chunks
        .iter()
        .enumerate()
        .filter(|(_, c)| c["last_chunk"] == true)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(last, [chunks.len() - 1], "one last chunk, the last: {seen}");
    let events = seen["chunks"].as_array().unwrap();
    assert_eq!(
        events.last().unwrap()["state"],
        "TASK_STATE_COMPLETED",
        "{seen}"
    );
}

/// An MCP request over HTTP: the JSON-RPC `body` with `token` and `session`.
fn mcp_post(
    url: &str,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request
}

#[tokio::test]
async fn two_mcp_callers_cannot_use_each_others_session_and_delete_answers_200() {
    let service = AgentService::new(adder).authenticate(tokens());
    let url = serve_all(&service).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let opened = mcp_post(&url, ALICE, None, &initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(opened.text().await);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = mcp_post(&url, ALICE, Some(&session), &initialized)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // Bob, naming Alice's session, is told it does not exist: POST, GET and DELETE.
    let http = reqwest::Client::new();
    let probes = [
        mcp_post(&url, BOB, Some(&session), &list),
        http.get(format!("{url}/mcp"))
            .bearer_auth(BOB)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session),
        http.delete(format!("{url}/mcp"))
            .bearer_auth(BOB)
            .header("mcp-session-id", &session),
    ];
    for probe in probes {
        let response = probe.send().await.unwrap();
        assert_eq!(response.status(), 404);
    }
    // Alice's session is untouched.
    let listed = mcp_post(&url, ALICE, Some(&session), &list)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert!(listed.text().await.unwrap().contains("ask_agent"));
    // Alice closes it: 200, as the Python `mcp` client expects (rmcp itself says 202).
    let closed = http
        .delete(format!("{url}/mcp"))
        .bearer_auth(ALICE)
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 200);
    let gone = mcp_post(&url, ALICE, Some(&session), &list)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}

/// rmcp's client, declaring elicitation (its answers come in the retries below).
#[derive(Clone)]
struct Elicits;

impl rmcp::ClientHandler for Elicits {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("serve-test", "1.0.0"),
        )
    }
}

/// rmcp's streamable HTTP client transport with `token` (its reqwest 0.13 needs a
/// process-wide crypto provider, even for http://).
fn rmcp_client(
    url: &str,
    token: &str,
) -> rmcp::transport::StreamableHttpClientTransport<
    impl rmcp::transport::streamable_http_client::StreamableHttpClient,
> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).auth_header(token);
    rmcp::transport::StreamableHttpClientTransport::from_config(config)
}

#[tokio::test]
async fn a_parked_mcp_run_resumes_for_its_own_caller_only() {
    use rmcp::model::{CallToolRequestParams, CallToolResponse, ProtocolVersion};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let service = AgentService::new(|| adder().policy(RunPolicy::new().require_approval("add")))
        .authenticate(tokens());
    let url = serve_all(&service).await;
    let lifecycle = || ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let alice = Elicits
        .serve_with_lifecycle(rmcp_client(&url, ALICE), lifecycle())
        .await
        .unwrap();
    let bob = Elicits
        .serve_with_lifecycle(rmcp_client(&url, BOB), lifecycle())
        .await
        .unwrap();
    let ask = || {
        let arguments = json!({"task": "What is 2 + 3?"});
        CallToolRequestParams::new("ask_agent")
            .with_arguments(arguments.as_object().unwrap().clone())
    };
    let CallToolResponse::InputRequired(paused) = alice.call_tool_once(ask()).await.unwrap() else {
        panic!("a paused run is an input_required result on 2026-07-28");
    };
    let state = paused.request_state.clone().unwrap();
    assert_eq!(state.len(), "run_".len() + 32, "128 random bits: {state}");
    let answer = json!({"action": "accept", "content": {"approve": true}});
    let retry = || {
        ask()
            .with_request_state(state.clone())
            .with_input_responses([("call_1".to_owned(), answer.clone())].into())
    };
    // Bob, retrying with Alice's requestState, is told it names no paused run.
    match bob.call_tool_once(retry()).await {
        Err(rmcp::ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{e:?}"),
        other => panic!("another caller's requestState is refused, got {other:?}"),
    }
    // Alice's run is still parked: her retry completes it.
    let CallToolResponse::Complete(done) = alice.call_tool_once(retry()).await.unwrap() else {
        panic!("answered: the run completes");
    };
    let text: String = done
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(text, "2 + 3 = 5");
}

/// A request through the router with no real socket: `peer` is the address axum would have
/// put in the request's extensions.
async fn status_from(
    router: &axum::Router,
    request: Request<Body>,
    peer: Option<&str>,
) -> (u16, String) {
    let mut request = request;
    if let Some(peer) = peer {
        let addr: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(addr));
    }
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn requests() -> Vec<(&'static str, Request<Body>)> {
    let json = |path: &str, body: Value| {
        Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    vec![
        (
            "responses",
            json("/v1/responses", json!({"model": "m", "input": "hi"})),
        ),
        ("a2a", json("/a2a", rpc_body("GetTask", json!({"id": "x"})))),
        (
            "mcp",
            json(
                "/mcp",
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"}}}),
            ),
        ),
    ]
}

#[tokio::test]
async fn without_an_authenticator_only_loopback_peers_are_served() {
    let app = |service: &AgentService| {
        responses::router(service)
            .merge(AgentMcpServer::new(service).router("/mcp"))
            .merge(a2a::router(
                service,
                AgentCard::new("adder", "Adds.", "http://127.0.0.1"),
            ))
    };
    let local = app(&AgentService::new(adder));
    for (route, request) in requests() {
        let (status, body) = status_from(&local, request, Some("10.0.0.7:5555")).await;
        assert_eq!(status, 403, "{route}: {body}");
        assert!(
            body.contains("AgentService::authenticate") && body.contains("allow_anonymous"),
            "{route}: {body}"
        );
    }
    for (route, request) in requests() {
        let (status, body) = status_from(&local, request, None).await;
        assert_eq!(status, 403, "{route}: {body}");
        assert!(
            body.contains("into_make_service_with_connect_info"),
            "{route}: {body}"
        );
    }
    for (route, request) in requests() {
        let (status, body) = status_from(&local, request, Some("127.0.0.1:5555")).await;
        assert_eq!(status, 200, "{route}: {body}");
    }
    // The card is public whoever asks.
    let card = Request::get("/.well-known/agent-card.json")
        .body(Body::empty())
        .unwrap();
    assert_eq!(status_from(&local, card, None).await.0, 200);
    // The host's explicit choice: anyone.
    let open = app(&AgentService::new(adder).allow_anonymous());
    for (route, request) in requests() {
        let (status, body) = status_from(&open, request, Some("10.0.0.7:5555")).await;
        assert_eq!(status, 200, "{route}: {body}");
    }
}

#[tokio::test]
async fn open_responses_history_with_calls_the_server_never_made_is_refused() {
    let service = AgentService::new(adder).allow_anonymous();
    let router = responses::router(&service);
    let cases = [
        (
            "a call with no output",
            json!([
                {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
                {"role": "user", "content": "go on"},
            ]),
        ),
        (
            "an output for no call",
            json!([
                {"role": "user", "content": "hi"},
                {"type": "function_call_output", "call_id": "c9", "output": "42"},
                {"role": "user", "content": "go on"},
            ]),
        ),
        (
            "an output for another call",
            json!([
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c2", "output": "42"},
                {"role": "user", "content": "go on"},
            ]),
        ),
    ];
    for (case, input) in cases {
        let request = Request::post("/v1/responses")
            .header("content-type", "application/json")
            .body(Body::from(
                json!({"model": "m", "input": input}).to_string(),
            ))
            .unwrap();
        let (status, body) = status_from(&router, request, None).await;
        assert_eq!(status, 400, "{case}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["param"], "input", "{case}: {body}");
    }
}

#[tokio::test]
async fn the_python_mcp_client_closes_its_session_without_a_warning() {
    let service = AgentService::new(adder).authenticate(tokens());
    let url = serve_all(&service).await;
    let Some(python) = common::python("mcp") else {
        return;
    };
    let seen =
        common::python_json(&python, "mcp_session.py", &[&format!("{url}/mcp"), ALICE]).await;
    assert_eq!(seen["tools"], json!(["ask_agent"]), "{seen}");
    assert_eq!(seen["text"], "2 + 3 = 5", "{seen}");
    // rmcp's own 202 made the client log "Session termination failed: 202".
    assert_eq!(seen["warnings"], json!([]), "{seen}");
}

#[tokio::test]
async fn a_host_layer_in_front_names_the_caller_through_from_extension() {
    use agent_loop_serve::auth::FromExtension;
    use axum::middleware::{self, Next};
    /// The host's own check: here a gateway's header (in production, its OAuth or mTLS).
    async fn gateway(mut request: axum::extract::Request, next: Next) -> axum::response::Response {
        let user = request
            .headers()
            .get("x-gateway-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if let Some(user) = user {
            request.extensions_mut().insert(Principal::new(user));
        }
        next.run(request).await
    }
    let service = AgentService::new(adder).authenticate(FromExtension);
    let router = responses::router(&service)
        .merge(a2a::router(
            &service,
            AgentCard::new("adder", "Adds.", "http://127.0.0.1"),
        ))
        .layer(middleware::from_fn(gateway));
    let request = |user: Option<&str>| {
        let mut request = Request::post("/v1/responses")
            .header("content-type", "application/json")
            .body(Body::from(json!({"model": "m", "input": "hi"}).to_string()))
            .unwrap();
        if let Some(user) = user {
            request
                .headers_mut()
                .insert("x-gateway-user", user.parse().unwrap());
        }
        request
    };
    let (status, body) = status_from(&router, request(Some("carol")), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = status_from(&router, request(None), None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("invalid_api_key"), "{body}");
}
