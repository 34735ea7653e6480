//! agent-loop-ui's chat routes (AG-UI and the AI SDK, and their reconnect routes) behind
//! `auth::require`: an unauthenticated caller is refused on every one, and the handlers see
//! the caller's principal, which keys the chat's session so that two callers naming the same
//! chat id have two conversations.

use std::sync::Arc;

use agent_loop::session::{MemoryStore, SessionStore};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::Agent;
use agent_loop_serve::auth::{self, BearerTokens, Principal};
use agent_loop_ui::{agui, ai_sdk, RespondOptions, RunStreams};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::json;
use tower::ServiceExt;

#[derive(Clone)]
struct App {
    model: Arc<ScriptedClient>,
    sessions: Arc<dyn SessionStore>,
    streams: RunStreams,
}

/// The session of `caller`'s chat `chat`: the client names the chat, the server the caller.
fn session(app: &App, caller: &Principal, chat: &str) -> Agent {
    Agent::builder(app.model.clone())
        .session(app.sessions.clone(), format!("{}:{chat}", caller.key_hex()))
        .build()
        .unwrap()
}

async fn chat(
    State(app): State<App>,
    Extension(caller): Extension<Principal>,
    body: Bytes,
) -> Response {
    let Ok(request) = ai_sdk::ChatRequest::from_slice(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut agent = session(&app, &caller, request.id());
    ai_sdk::respond_with(&mut agent, &body, &options(&app, &caller)).await
}

/// Runs kept for reconnects, under the caller's key and the chat's id.
fn options(app: &App, caller: &Principal) -> RespondOptions {
    RespondOptions::new()
        .resumable(app.streams.clone())
        .caller(caller.key_hex())
}

async fn chat_stream(
    State(app): State<App>,
    Extension(caller): Extension<Principal>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let key = options(&app, &caller).stream_key(&id);
    ai_sdk::reconnect(&app.streams, &key, &headers)
}

async fn agui_run(
    State(app): State<App>,
    Extension(caller): Extension<Principal>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let options = options(&app, &caller);
    if let Some(response) = agui::reconnect_with(&options, &headers, &body) {
        return response;
    }
    let Ok(request) = agui::RunAgentInput::from_slice(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut agent = session(&app, &caller, request.thread_id());
    agui::respond_with(&mut agent, &body, &options).await
}

fn app(model: &Arc<ScriptedClient>) -> Router {
    let app = App {
        model: model.clone(),
        sessions: Arc::new(MemoryStore::new()),
        streams: RunStreams::new(),
    };
    let routes = Router::new()
        .route("/api/chat", post(chat))
        .route("/api/chat/{id}/stream", get(chat_stream))
        .route("/agui", post(agui_run))
        .with_state(app);
    let tokens = BearerTokens::new()
        .token("token-a", Principal::new("alice"))
        .token("token-b", Principal::new("bob"));
    auth::require(routes, tokens)
}

fn requests(token: Option<&str>) -> Vec<(&'static str, Request<Body>)> {
    let chat = json!({"id": "chat-1", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi."}]}]});
    let run = json!({"threadId": "chat-1", "runId": "r1", "messages": [
        {"id": "u1", "role": "user", "content": "Hi."}], "tools": [], "context": [],
        "state": {}, "forwardedProps": {}});
    let with = |builder: axum::http::request::Builder| match token {
        Some(token) => builder.header("authorization", format!("Bearer {token}")),
        None => builder,
    };
    vec![
        (
            "ai sdk chat",
            with(Request::post("/api/chat").header("content-type", "application/json"))
                .body(Body::from(chat.to_string()))
                .unwrap(),
        ),
        (
            "ai sdk reconnect",
            with(Request::get("/api/chat/chat-1/stream"))
                .body(Body::empty())
                .unwrap(),
        ),
        (
            "ag-ui run",
            with(Request::post("/agui").header("content-type", "application/json"))
                .body(Body::from(run.to_string()))
                .unwrap(),
        ),
    ]
}

async fn send(app: &Router, request: Request<Body>) -> (u16, String, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        challenge,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn every_ui_route_refuses_an_unauthenticated_caller() {
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::text("Hello."),
        ScriptedResponse::text("Hello."),
    ]));
    let app = app(&model);
    for token in [None, Some("not-a-token")] {
        for (route, request) in requests(token) {
            let (status, challenge, body) = send(&app, request).await;
            assert_eq!(status, 401, "{route} with {token:?}: {body}");
            assert!(challenge.starts_with("Bearer"), "{route}: {challenge}");
            assert!(body.contains("authentication_error"), "{route}: {body}");
        }
    }
    for (route, request) in requests(Some("token-a")) {
        let (status, _, body) = send(&app, request).await;
        assert_ne!(status, 401, "{route}: {body}");
        assert!(status < 500, "{route}: {status} {body}");
    }
}

#[tokio::test]
async fn two_callers_naming_the_same_chat_have_two_conversations() {
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::text("Hello, first."),
        ScriptedResponse::text("Hello, second."),
    ]));
    let app = app(&model);
    for (token, answer) in [("token-a", "Hello, first."), ("token-b", "Hello, second.")] {
        let (route, request) = requests(Some(token)).remove(2);
        let (status, _, body) = send(&app, request).await;
        assert_eq!(status, 200, "{route}: {body}");
        assert!(body.contains(answer), "{body}");
        // The model saw this caller's message alone: the other's turn is in another session.
        let sent = model.last_request().unwrap().messages;
        assert_eq!(sent.len(), 1, "{token}: {sent:?}");
    }
}

#[tokio::test]
async fn another_caller_cannot_replay_a_kept_run_of_the_same_chat_id() {
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::text("For Alice only."),
        ScriptedResponse::text("For Alice only."),
    ]));
    let app = app(&model);
    // Alice's AI SDK chat and AG-UI thread, both "chat-1", kept for reconnects.
    for index in [0, 2] {
        let (route, request) = requests(Some("token-a")).remove(index);
        let (status, _, body) = send(&app, request).await;
        assert_eq!(status, 200, "{route}: {body}");
        assert!(body.contains("For Alice only."), "{route}: {body}");
    }
    let reconnect = |token: &str| {
        vec![
            Request::get("/api/chat/chat-1/stream")
                .header("authorization", format!("Bearer {token}"))
                .header("last-event-id", "1")
                .body(Body::empty())
                .unwrap(),
            {
                let (_, request) = requests(Some(token)).remove(2);
                let (mut parts, body) = request.into_parts();
                parts.headers.insert("last-event-id", "1".parse().unwrap());
                Request::from_parts(parts, body)
            },
        ]
    };
    // Alice gets the rest of her runs' frames.
    for request in reconnect("token-a") {
        let (status, _, body) = send(&app, request).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("For Alice only."), "{body}");
    }
    // Bob, naming the same chat and thread ids, gets none of them: the AI SDK reconnect finds
    // no run (204) and the AG-UI request is a new run of Bob's own (the model is out of
    // answers for it: its error, never Alice's text).
    for request in reconnect("token-b") {
        let (status, _, body) = send(&app, request).await;
        assert!(!body.contains("For Alice only."), "{status}: {body}");
    }
}
