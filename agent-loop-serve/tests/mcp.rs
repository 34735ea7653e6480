//! The MCP server against its clients: the official TypeScript SDK (a node script per mode)
//! and the workspace's own MCP client (`agent-loop-mcp`: another agent calls the served one as
//! a tool).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_loop::agent::{RunOptions, RunPolicy};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, ContentBlock, Termination, ToolError};
use agent_loop_mcp::McpServer;
use agent_loop_serve::mcp::AgentMcpServer;
use agent_loop_serve::{AgentService, Limits};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ElicitRequestParams, ElicitResult, ElicitationAction,
    ProtocolVersion,
};
use serde_json::{json, Value};

/// An agent that adds: the model calls `add` with 2 and 3, then says what it read.
fn adder(
    policy: RunPolicy,
    answer: &'static str,
) -> impl Fn() -> agent_loop::AgentBuilder + Send + Sync {
    move || {
        let model = ScriptedClient::new([
            ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
            ScriptedResponse::text(answer),
        ]);
        Agent::builder(model)
            .tool(common::add_tool())
            .policy(policy.clone())
    }
}

async fn served(server: AgentMcpServer) -> String {
    let url = common::serve(server.router("/mcp")).await;
    format!("{url}/mcp")
}

#[tokio::test]
async fn the_typescript_client_calls_the_agent_with_progress() {
    if !common::node() {
        return;
    }
    let service = AgentService::new(adder(RunPolicy::new(), "2 + 3 = 5"));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "call"]).await;
    assert_eq!(
        seen["tools"],
        json!([{"name": "ask_agent", "required": ["task"]}])
    );
    assert_eq!(
        seen["result"],
        json!({"text": "2 + 3 = 5", "isError": false})
    );
    assert_eq!(
        seen["progress"],
        json!(["calling add", "add done", "2 + 3 = 5"])
    );
    assert_eq!(seen["bad"]["isError"], true);
    assert!(seen["bad"]["text"]
        .as_str()
        .unwrap()
        .contains("`task` is required"));
    // JSON-RPC's invalid params for a tool the server does not have.
    assert_eq!(seen["unknown"]["code"], -32602);
    assert_eq!(seen["elicitations"], json!([]));
}

#[tokio::test]
async fn a_paused_run_asks_by_elicitation_and_the_answer_resumes_it() {
    if !common::node() {
        return;
    }
    let approval = RunPolicy::new().require_approval("add");
    let service = AgentService::new(adder(approval.clone(), "It is 5."));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "approve"]).await;
    // The TypeScript SDK 1.32.2 speaks up to 2025-11-25: a pause is an elicitation.
    assert_eq!(seen["protocolVersion"], "2025-11-25");
    assert_eq!(
        seen["result"],
        json!({"text": "It is 5.", "isError": false})
    );
    let asked = seen["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1);
    let message = asked[0]["message"].as_str().unwrap();
    assert!(
        message.contains("add") && message.contains("\"a\":2"),
        "{message}"
    );
    assert_eq!(asked[0]["schema"]["required"], json!(["approve"]));
    assert!(seen["progress"]
        .as_array()
        .unwrap()
        .contains(&json!("add done")));

    // Denied: the tool does not run, and the model reads the reason.
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("Not added."),
    ]));
    let seen_model = model.clone();
    let policy = approval.clone();
    let service = AgentService::new(move || {
        Agent::builder(model.clone())
            .tool(common::add_tool())
            .policy(policy.clone())
    });
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "deny"]).await;
    assert_eq!(
        seen["result"],
        json!({"text": "Not added.", "isError": false})
    );
    assert!(!seen["progress"]
        .as_array()
        .unwrap()
        .contains(&json!("add done")));
    let last = seen_model.last_request().unwrap();
    let denial = last
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    let (content, is_error) = denial.expect("the call is answered");
    assert!(is_error && content.contains("not today"), "{content}");

    // A client that cannot be asked gets an error naming the waiting call.
    let service = AgentService::new(adder(approval, "unreachable"));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "noelicit"]).await;
    assert_eq!(seen["result"]["isError"], true);
    let text = seen["result"]["text"].as_str().unwrap();
    assert!(
        text.contains("elicitation") && text.contains("add"),
        "{text}"
    );
}

#[tokio::test]
async fn the_clients_cancellation_cancels_the_run() {
    if !common::node() {
        return;
    }
    let built = Arc::new(AtomicUsize::new(0));
    let service = AgentService::new(move || {
        let script = match built.fetch_add(1, Ordering::SeqCst) {
            0 => ScriptedResponse::text("thinking…").then_stall(),
            _ => ScriptedResponse::text("second run"),
        };
        Agent::builder(ScriptedClient::new([script]))
    })
    .limits(Limits::new().max_concurrent_runs(1));
    let url = served(AgentMcpServer::new(&service)).await;
    let seen = common::node_json("mcp-client.mjs", &[&url, "cancel"]).await;
    assert_eq!(seen["first"], "aborted");
    assert_eq!(seen["progress"], json!(["thinking…"]));
    // The stalled run held the only slot: a second run starts only once it was cancelled.
    assert_eq!(seen["second"]["text"], "second run", "{seen}");
    assert_eq!(seen["second"]["isError"], false);
}

#[tokio::test]
async fn an_agent_calls_a_served_agent_as_an_mcp_tool() {
    let service = AgentService::new(adder(RunPolicy::new(), "2 + 3 = 5"));
    let url = served(AgentMcpServer::new(&service).tool("helper", "Adds numbers.")).await;
    let helper = McpServer::http("helper", url).connect().await.unwrap();
    let model = Arc::new(ScriptedClient::new([
        ScriptedResponse::tool_call("o1", "helper", json!({"task": "Add 2 and 3."})),
        ScriptedResponse::text("The helper says 5."),
    ]));
    let mut agent = Agent::builder(model.clone())
        .tool_source(helper)
        .build()
        .unwrap();
    let outcome = agent.run_to_end("What is 2 + 3?", RunOptions::new()).await;
    assert_eq!(outcome.termination, Termination::Completed);
    assert_eq!(outcome.final_text, "The helper says 5.");
    let last = model.last_request().unwrap();
    let result = last
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        });
    assert_eq!(result, Some(("2 + 3 = 5".to_owned(), false)));
}

/// rmcp's client, answering each elicitation with a verdict and keeping what it was asked.
#[derive(Clone)]
struct Answerer {
    approve: bool,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Answerer {
    fn new(approve: bool) -> Self {
        Answerer {
            approve,
            asked: Arc::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl rmcp::ClientHandler for Answerer {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("serve-test", "1.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        let content = json!({"approve": self.approve, "reason": "not today"});
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }
}

/// rmcp's streamable HTTP client transport to `url` (its reqwest 0.13 needs a process-wide
/// crypto provider, even for http://).
fn rmcp_transport(
    url: &str,
) -> rmcp::transport::StreamableHttpClientTransport<
    impl rmcp::transport::streamable_http_client::StreamableHttpClient,
> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    rmcp::transport::StreamableHttpClientTransport::from_uri(url)
}

fn ask_agent() -> CallToolRequestParams {
    let arguments = json!({"task": "What is 2 + 3?"});
    CallToolRequestParams::new("ask_agent").with_arguments(arguments.as_object().unwrap().clone())
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test]
async fn a_2026_07_28_client_gets_an_input_required_result_and_its_retry_resumes_the_run() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    // One run slot: a parked run must not hold it.
    let approval = RunPolicy::new().require_approval("add");
    let service =
        AgentService::new(adder(approval, "It is 5.")).limits(Limits::new().max_concurrent_runs(1));
    let url = served(AgentMcpServer::new(&service)).await;
    let answerer = Answerer::new(true);
    let transport = rmcp_transport(&url);
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = answerer
        .clone()
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("the server offers 2026-07-28");

    // The call answers at once: input_required, one elicitation per waiting call, keyed by its id.
    let CallToolResponse::InputRequired(first) = client.call_tool_once(ask_agent()).await.unwrap()
    else {
        panic!("a paused run is an input_required result on 2026-07-28");
    };
    let requests = first.input_requests.clone().unwrap();
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["call_1"]);
    let request = serde_json::to_value(&requests["call_1"]).unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["approve"])
    );
    let message = request["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("add") && message.contains("\"a\":2"),
        "{message}"
    );
    let state = first.request_state.clone().expect("a requestState");
    // Nothing was asked by a server-to-client request.
    assert!(answerer.asked().is_empty());

    // The parked run holds no run slot: another call starts its own run meanwhile.
    let CallToolResponse::InputRequired(other) = client.call_tool_once(ask_agent()).await.unwrap()
    else {
        panic!("the second call is not refused as busy");
    };
    assert_ne!(other.request_state, first.request_state);

    // A forged requestState is refused with invalid params.
    let forged = ask_agent().with_request_state("run_forged");
    match client.call_tool_once(forged).await {
        Err(rmcp::ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{e:?}"),
        other => panic!("a forged requestState is refused, got {other:?}"),
    }

    // A retry without the answer asks again, under a new state.
    let again = ask_agent().with_request_state(state.clone());
    let CallToolResponse::InputRequired(again) = client.call_tool_once(again).await.unwrap() else {
        panic!("no answer: asked again");
    };
    assert_eq!(again.input_requests, first.input_requests);
    let state2 = again.request_state.unwrap();
    assert_ne!(state2, state);
    // The old state was used up.
    assert!(client
        .call_tool_once(ask_agent().with_request_state(state))
        .await
        .is_err());

    // The answer resumes the run to its end.
    let answer = json!({"action": "accept", "content": {"approve": true}});
    let retry = ask_agent()
        .with_request_state(state2)
        .with_input_responses([("call_1".to_owned(), answer)].into());
    let CallToolResponse::Complete(done) = client.call_tool_once(retry).await.unwrap() else {
        panic!("answered: the run completes");
    };
    assert_eq!(text(&done), "It is 5.");
    assert_eq!(done.is_error, Some(false));

    // rmcp's high-level call drives the rounds through the client's elicitation handler.
    let done = client.call_tool(ask_agent()).await.unwrap();
    assert_eq!(text(&done), "It is 5.");
    assert_eq!(answerer.asked().len(), 1);
    assert!(answerer.asked()[0].contains("add"));
}

#[tokio::test]
async fn a_2025_11_25_rmcp_client_is_asked_by_elicitation() {
    let approval = RunPolicy::new().require_approval("add");
    let service = AgentService::new(adder(approval, "It is 5."));
    let url = served(AgentMcpServer::new(&service)).await;
    let answerer = Answerer::new(true);
    let transport = rmcp_transport(&url);
    let client = rmcp::ServiceExt::serve(answerer.clone(), transport)
        .await
        .unwrap();
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2025_11_25
    );
    // The call stays open while the server asks; it ends with the result, never input_required.
    let CallToolResponse::Complete(done) = client.call_tool_once(ask_agent()).await.unwrap() else {
        panic!("a 2025-11-25 client is asked by elicitation");
    };
    assert_eq!(text(&done), "It is 5.");
    assert_eq!(answerer.asked().len(), 1);
}

#[tokio::test]
async fn a_2026_07_28_retry_while_the_slots_are_taken_keeps_the_run_parked() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    // Run 0 pauses for approval; run 1 waits in its tool until the test releases it.
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let release = Arc::new(tokio::sync::Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let released = release.clone();
    let service = AgentService::new(move || {
        let (started_tx, release) = (started_tx.clone(), released.clone());
        let hold = FnTool::new("hold", "Holds.", move |_: Value, _ctx| {
            let (started_tx, release) = (started_tx.clone(), release.clone());
            async move {
                let _ = started_tx.send(());
                release.notified().await;
                Ok::<_, ToolError>("released".to_owned())
            }
        });
        let model = match runs.fetch_add(1, Ordering::SeqCst) {
            0 => ScriptedClient::new([
                ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3})),
                ScriptedResponse::text("It is 5."),
            ]),
            _ => ScriptedClient::new([
                ScriptedResponse::tool_call("h1", "hold", json!({})),
                ScriptedResponse::text("held"),
            ]),
        };
        Agent::builder(model)
            .tool(common::add_tool())
            .tool(hold)
            .policy(RunPolicy::new().require_approval("add"))
    })
    .limits(Limits::new().max_concurrent_runs(1));
    let url = served(AgentMcpServer::new(&service)).await;
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = Answerer::new(true)
        .serve_with_lifecycle(rmcp_transport(&url), lifecycle)
        .await
        .unwrap();
    let CallToolResponse::InputRequired(paused) = client.call_tool_once(ask_agent()).await.unwrap()
    else {
        panic!("run 0 pauses");
    };
    let state = paused.request_state.unwrap();

    // Run 1 takes the only slot and holds it.
    let peer = client.peer().clone();
    let holding = tokio::spawn(async move { peer.call_tool_once(ask_agent()).await });
    started.recv().await.unwrap();

    let answer = json!({"action": "accept", "content": {"approve": true}});
    let retry = ask_agent()
        .with_request_state(state)
        .with_input_responses([("call_1".to_owned(), answer)].into());
    let CallToolResponse::Complete(busy) = client.call_tool_once(retry.clone()).await.unwrap()
    else {
        panic!("a busy server answers the retry with an error result");
    };
    assert_eq!(busy.is_error, Some(true));
    assert!(text(&busy).contains("busy"), "{}", text(&busy));

    // Run 1 ends (its call answered: its slot is free), and the same retry resumes run 0.
    release.notify_one();
    let CallToolResponse::Complete(held) = holding.await.unwrap().unwrap() else {
        panic!("run 1 completes");
    };
    assert_eq!(text(&held), "held");
    let CallToolResponse::Complete(done) = client.call_tool_once(retry).await.unwrap() else {
        panic!("the run was still parked under its state");
    };
    assert_eq!(text(&done), "It is 5.");
}
