//! The A2A 1.0 server against the official Python client (`a2a-sdk`, JSON-RPC binding), and
//! raw JSON-RPC for the protocol's error codes.

mod common;

use agent_loop::agent::RunPolicy;
use agent_loop::error::ApiError;
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, AgentBuilder, LlmError, ToolError};
use agent_loop_serve::a2a::{router, AgentCard};
use agent_loop_serve::AgentService;
use serde_json::{json, Value};

/// Serves `service` over A2A on a loopback port; gives its base URL.
async fn served(service: AgentService) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = AgentCard::new("adder", "Adds numbers.", &url);
    let app = router(&service, card);
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn adder(policy: RunPolicy) -> impl Fn() -> AgentBuilder + Send + Sync {
    move || {
        let model = ScriptedClient::new([
            ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
            ScriptedResponse::text("2 + 3 = 5"),
        ]);
        Agent::builder(model)
            .tool(common::add_tool())
            .policy(policy.clone())
    }
}

async fn client(url: &str, mode: &str) -> Option<Value> {
    let python = common::python("a2a")?;
    Some(common::python_json(&python, "a2a_client.py", &[url, mode]).await)
}

#[tokio::test]
async fn the_python_client_sends_and_reads_the_task() {
    let url = served(AgentService::new(adder(RunPolicy::new()))).await;
    let Some(seen) = client(&url, "send").await else {
        return;
    };
    assert_eq!(seen["task"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(seen["task"]["answer"], "2 + 3 = 5");
    assert_eq!(seen["got"], seen["task"]);
    assert_eq!(seen["cancel_done"], "TaskNotCancelableError");
}

#[tokio::test]
async fn the_python_client_streams_a_task() {
    let url = served(AgentService::new(adder(RunPolicy::new()))).await;
    let Some(seen) = client(&url, "stream").await else {
        return;
    };
    let stream = &seen["stream"];
    assert_eq!(stream["kinds"][0], "task");
    assert_eq!(stream["states"][0], "TASK_STATE_SUBMITTED");
    assert_eq!(stream["states"][1], "TASK_STATE_WORKING");
    assert_eq!(
        stream["states"].as_array().unwrap().last().unwrap(),
        "TASK_STATE_COMPLETED"
    );
    assert!(stream["kinds"]
        .as_array()
        .unwrap()
        .contains(&json!("artifact")));
    assert_eq!(stream["text"], "2 + 3 = 5");
}

#[tokio::test]
async fn a_paused_run_is_input_required_and_a_message_answers_it() {
    // One model for both requests: the resumed run asks it for its next response.
    let policy = RunPolicy::new().require_approval("add");
    let model = std::sync::Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("2 + 3 = 5"),
    ]));
    let url = served(AgentService::new(move || {
        Agent::builder(model.clone())
            .tool(common::add_tool())
            .policy(policy.clone())
    }))
    .await;
    let Some(seen) = client(&url, "input").await else {
        return;
    };
    let paused = &seen["paused"];
    assert_eq!(paused["state"], "TASK_STATE_INPUT_REQUIRED");
    let why = paused["status_text"].as_str().unwrap();
    assert!(why.contains("add") && why.contains("call_1"), "{why}");
    let answered = &seen["answered"];
    assert_eq!(answered["id"], paused["id"]);
    assert_eq!(answered["state"], "TASK_STATE_COMPLETED");
    assert_eq!(answered["answer"], "2 + 3 = 5");
}

#[tokio::test]
async fn the_client_cancels_a_running_task() {
    let url = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([
            ScriptedResponse::text("thinking…").then_stall()
        ]))
    }))
    .await;
    let Some(seen) = client(&url, "cancel").await else {
        return;
    };
    assert_eq!(seen["cancelled"]["state"], "TASK_STATE_CANCELED");
    // CancelTask answered once the run had stopped: what the stream says after it is the one
    // terminal state, never WORKING.
    assert_eq!(
        seen["after_cancel"],
        json!(["TASK_STATE_CANCELED"]),
        "{seen}"
    );
    assert_eq!(
        seen["states"].as_array().unwrap().last().unwrap(),
        "TASK_STATE_CANCELED"
    );
    assert_eq!(seen["got"]["state"], "TASK_STATE_CANCELED");
}

#[tokio::test]
async fn a_failed_run_is_a_failed_task_with_the_error() {
    let url = served(AgentService::new(|| {
        Agent::builder(ScriptedClient::new([ScriptedResponse::error(
            LlmError::Api(Box::new(ApiError::new(401, "bad key for the model"))),
        )]))
    }))
    .await;
    let Some(seen) = client(&url, "fail").await else {
        return;
    };
    assert_eq!(seen["task"]["state"], "TASK_STATE_FAILED");
    let why = seen["task"]["status_text"].as_str().unwrap();
    assert!(why.contains("bad key for the model"), "{why}");
}

#[tokio::test]
async fn bad_requests_get_the_protocol_errors_in_the_python_client() {
    let url = served(AgentService::new(adder(RunPolicy::new()))).await;
    let Some(seen) = client(&url, "bad").await else {
        return;
    };
    assert_eq!(seen["no_text"], "InvalidParamsError");
    assert_eq!(seen["unknown_task"], "TaskNotFoundError");
    assert_eq!(seen["answer_unknown_task"], "TaskNotFoundError");
}

async fn rpc(url: &str, body: &str, version: Option<&str>) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(version) = version {
        request = request.header("A2A-Version", version);
    }
    request.send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn bad_json_rpc_gets_its_error_codes() {
    let url = served(AgentService::new(adder(RunPolicy::new()))).await;
    let cases = [
        ("{nope", -32700),
        (r#"{"id": 1, "method": "GetTask"}"#, -32600),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tasks/list"}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}"#,
            -32001,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": "x"}}"#,
            -32001,
        ),
    ];
    for (body, code) in cases {
        let response = rpc(&url, body, None).await;
        assert_eq!(response["error"]["code"], code, "{body}: {response}");
        assert_eq!(response["jsonrpc"], "2.0");
    }
    let response = rpc(
        &url,
        r#"{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "x"}}"#,
        Some("0.3"),
    )
    .await;
    assert_eq!(response["error"]["code"], -32009);
    assert_eq!(response["id"], 7);
    let card: Value = reqwest::get(format!("{url}/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("{url}/a2a"));
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
}

#[tokio::test]
async fn the_pre_1_0_method_names_are_taken_as_aliases() {
    let url = served(AgentService::new(adder(RunPolicy::new()))).await;
    // `message/send` with a pre-1.0 message (`kind`ed parts, a lower-case role): the 1.0 task.
    let sent = rpc(
        &url,
        r#"{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message":
            {"kind": "message", "messageId": "m1", "role": "user",
             "parts": [{"kind": "text", "text": "Add 2 and 3."}]}}}"#,
        None,
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "2 + 3 = 5");
    let id = task["id"].as_str().unwrap();

    let got = rpc(
        &url,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": id}})
            .to_string(),
        None,
    )
    .await;
    assert_eq!(&got["result"], task, "{got}");
    // `tasks/cancel` is CancelTask: a completed task is not cancelable.
    let cancelled = rpc(
        &url,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel", "params": {"id": id}})
            .to_string(),
        None,
    )
    .await;
    assert_eq!(cancelled["error"]["code"], -32002, "{cancelled}");

    // `message/stream` streams the task's events as SSE.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "message/stream", "params":
        {"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "Again."}]}}});
    let response = reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "message/stream is SendStreamingMessage"
    );
    let text = response.text().await.unwrap();
    let frames: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(frames[0]["id"], 4);
    let last = &frames.last().unwrap()["result"];
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{text}"
    );

    // The card and the unknown-method error name only the 1.0 methods.
    let unknown = rpc(
        &url,
        r#"{"jsonrpc": "2.0", "id": 5, "method": "nope"}"#,
        None,
    )
    .await;
    let message = unknown["error"]["message"].as_str().unwrap();
    assert!(message.contains("SendMessage") && !message.contains("message/send"));
    let card = reqwest::get(format!("{url}/.well-known/agent-card.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !card.contains("message/send") && !card.contains("tasks/get"),
        "{card}"
    );
}

#[tokio::test]
async fn an_agent_calls_a_served_agent_over_a2a() {
    let url = served(AgentService::new(adder(RunPolicy::new()))).await;
    // The calling agent's tool: an A2A SendMessage to the served agent, its answer artifact back.
    let endpoint = format!("{url}/a2a");
    let ask = FnTool::new(
        "ask_adder",
        "Asks the adder agent.",
        move |input: Value, _ctx| {
            let endpoint = endpoint.clone();
            async move {
                let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                        "parts": [{"text": input["task"]}]}}});
                let response: Value = reqwest::Client::new()
                    .post(&endpoint)
                    .json(&request)
                    .send()
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?
                    .json()
                    .await
                    .map_err(|e| ToolError::new(e.to_string()))?;
                let task = &response["result"]["task"];
                match task["status"]["state"].as_str() {
                    Some("TASK_STATE_COMPLETED") => Ok(task["artifacts"][0]["parts"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()),
                    _ => Err(ToolError::new(response.to_string())),
                }
            }
        },
    );
    let model = std::sync::Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("o1", "ask_adder", json!({"task": "Add 2 and 3."})),
        ScriptedResponse::text("The adder says 5."),
    ]));
    let mut agent = Agent::builder(model.clone()).tool(ask).build().unwrap();
    let outcome = agent
        .run_to_end("What is 2 + 3?", agent_loop::agent::RunOptions::new())
        .await;
    assert_eq!(outcome.termination, agent_loop::Termination::Completed);
    let last = model.last_request().unwrap();
    let result = last
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .find_map(|b| match b {
            agent_loop::ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    assert_eq!(result, Some(("2 + 3 = 5".to_owned(), false)));
}
