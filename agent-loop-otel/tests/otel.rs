//! The agent's spans, exported over OTLP/HTTP (feature `otel`) to a loopback receiver that
//! decodes them with the official OTLP protobuf types: the GenAI conventions' names, kinds,
//! parent links and attributes, content only on opt-in, and the exporter configured from the
//! standard environment variables (in a child process, so no test mutates its environment).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_loop::agent::RunPolicy;
use agent_loop::provider::transport::{Jitter, RetryPolicy};
use agent_loop::testing::{MockResponse, MockServer, ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::RequestSettings;
use agent_loop::{Agent, AgentEvent, AnthropicClient, Termination, ToolError, Usage};
use agent_loop_otel::{OtelBuilder, OtelGuard};
use futures::StreamExt;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span};
use prost::Message as _;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt;

/// What the receiver was sent: each request's path and content type, and its decoded body.
#[derive(Default)]
struct Received {
    posts: Vec<(String, String)>,
    requests: Vec<ExportTraceServiceRequest>,
}

/// A loopback OTLP/HTTP receiver: `POST /v1/traces` with a protobuf body, answered `200` with
/// an empty `ExportTraceServiceResponse`. It runs on a runtime of its own, so that it answers
/// while the test's thread waits in a flush.
struct Receiver {
    url: String,
    received: Arc<Mutex<Received>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Received::default()));
        let state = received.clone();
        runtime.spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, state.clone()));
            }
        });
        Receiver {
            url,
            received,
            _runtime: runtime,
        }
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for request in &received.requests {
            for resource_spans in &request.resource_spans {
                let service = resource_spans
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                    .and_then(|a| a.value.as_ref())
                    .map(any_to_json)
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                for scope in &resource_spans.scope_spans {
                    for span in &scope.spans {
                        spans.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        spans
    }
}

/// Serves one connection's requests (the exporter keeps it alive between exports).
async fn serve(socket: tokio::net::TcpStream, state: Arc<Mutex<Received>>) {
    let mut reader = BufReader::new(socket);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        let decoded = ExportTraceServiceRequest::decode(body.as_slice());
        let ok = request_line.starts_with("POST ") && path == "/v1/traces" && decoded.is_ok();
        {
            let mut state = state.lock().unwrap();
            state.posts.push((path, content_type));
            if let Ok(request) = decoded {
                state.requests.push(request);
            }
        }
        let answer = ExportTraceServiceResponse::default().encode_to_vec();
        let head = if ok {
            "HTTP/1.1 200 OK"
        } else {
            "HTTP/1.1 400 Bad Request"
        };
        let response = format!(
            "{head}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        let socket = reader.get_mut();
        if socket.write_all(response.as_bytes()).await.is_err()
            || socket.write_all(&answer).await.is_err()
        {
            return;
        }
    }
}

fn any_to_json(value: &opentelemetry_proto::tonic::common::v1::AnyValue) -> Value {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(f)) => json!(f),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().map(any_to_json).collect(),
        other => panic!("an attribute of a type the agent never sends: {other:?}"),
    }
}

/// A span's attributes as JSON values.
fn attrs(span: &Span) -> BTreeMap<String, Value> {
    span.attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map_or(Value::Null, any_to_json),
            )
        })
        .collect()
}

fn kind(span: &Span) -> SpanKind {
    SpanKind::try_from(span.kind).unwrap()
}

fn is_error(span: &Span) -> bool {
    span.status
        .as_ref()
        .is_some_and(|s| s.code == StatusCode::Error as i32)
}

/// The spans named `name`, in the order they started.
fn named<'a>(spans: &'a [(String, Span)], name: &str) -> Vec<&'a Span> {
    let mut found: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == name)
        .collect();
    found.sort_by_key(|s| s.start_time_unix_nano);
    found
}

/// Runs `agent` on `input` with the guard's layer as this thread's subscriber, to the end;
/// then flushes, so that every span of the run has reached the receiver.
fn run_exported(guard: &OtelGuard, agent: &mut Agent, input: &str) -> Vec<AgentEvent> {
    let subscriber = tracing_subscriber::registry().with(guard.layer());
    let events = {
        let _default = tracing::subscriber::set_default(subscriber);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(agent.run(input).collect::<Vec<_>>())
    };
    guard.flush().unwrap();
    events
}

fn add_tool() -> impl agent_loop::Tool {
    FnTool::new("add", "Adds two numbers.", |v: Value, _ctx| async move {
        let sum = v["a"].as_i64().unwrap_or(0) + v["b"].as_i64().unwrap_or(0);
        Ok::<_, ToolError>(sum.to_string())
    })
}

fn fail_tool() -> impl agent_loop::Tool {
    FnTool::new("fail", "Always fails.", |_: Value, _ctx| async move {
        Err::<String, _>(ToolError::new("no luck"))
    })
}

fn quick_retries() -> RetryPolicy {
    RetryPolicy::default()
        .initial_backoff(Duration::from_millis(1))
        .jitter(Jitter::None)
}

/// An agent on the mock server (Anthropic): a 529, then a tool call, then the answer.
async fn scripted_server() -> MockServer {
    let server = MockServer::start().await;
    server.push(MockResponse::status(529));
    let cached = Usage {
        input_tokens: 20,
        output_tokens: 7,
        cache_read_input_tokens: 100,
        cache_creation_input_tokens: 30,
        ..Usage::default()
    };
    server.push(
        ScriptedResponse::tool_call("call_1", "add", json!({"a": 2, "b": 3}))
            .id("msg_1")
            .model("claude-test-1")
            .usage(cached),
    );
    server.push(
        ScriptedResponse::text("5")
            .id("msg_2")
            .model("claude-test-1")
            .usage_tokens(160, 2),
    );
    server
}

fn calculator(server: &MockServer, content: bool) -> Agent {
    let client = AnthropicClient::new("test-key")
        .base_url(server.anthropic_base_url())
        .model("claude-test");
    Agent::builder(client)
        .name("calculator")
        .system("You add numbers.")
        .tool(add_tool())
        .settings(
            RequestSettings::new()
                .max_tokens(256)
                .temperature(0.3)
                .top_p(0.9)
                .stop_sequences(["END"]),
        )
        .policy(RunPolicy::new().retry(quick_retries()))
        .trace_content(content)
        .build()
        .unwrap()
}

fn mock_server() -> (tokio::runtime::Runtime, MockServer) {
    // The mock server's own runtime: it answers while the agent's runtime runs the agent.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(scripted_server());
    (runtime, server)
}

#[test]
fn a_run_exports_invoke_agent_chat_and_execute_tool_spans_with_the_conventions_attributes() {
    let receiver = Receiver::start();
    let guard = OtelBuilder::new()
        .endpoint(format!("{}/v1/traces", receiver.url))
        .service_name("otel-test")
        .build()
        .unwrap();
    let (_server_runtime, server) = mock_server();
    let mut agent = calculator(&server, false);
    let events = run_exported(&guard, &mut agent, "What is 2 + 3?");
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("no Finished: {events:?}");
    };
    assert!(
        matches!(outcome.termination, Termination::Completed),
        "{outcome:?}"
    );

    let spans = receiver.spans();
    assert!(spans.iter().all(|(service, _)| service == "otel-test"));
    {
        let received = receiver.received.lock().unwrap();
        assert!(!received.posts.is_empty());
        for (path, content_type) in &received.posts {
            assert_eq!(path, "/v1/traces");
            assert_eq!(content_type, "application/x-protobuf");
        }
    }

    let runs = named(&spans, "invoke_agent calculator");
    let chats = named(&spans, "chat claude-test");
    let tools = named(&spans, "execute_tool add");
    assert_eq!(
        (runs.len(), chats.len(), tools.len(), spans.len()),
        (1, 3, 1, 5),
        "{:?}",
        spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>()
    );
    let (run, failed, call, answer, tool) = (runs[0], chats[0], chats[1], chats[2], tools[0]);

    // Each attribute once (a span keeps every value recorded, not the last).
    for (_, span) in &spans {
        let keys: Vec<&str> = span.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(
            attrs(span).len(),
            keys.len(),
            "{} repeats one of {keys:?}",
            span.name
        );
    }

    // Kinds and parents: invoke_agent > chat, invoke_agent > execute_tool.
    assert_eq!(kind(run), SpanKind::Internal);
    assert_eq!(kind(tool), SpanKind::Internal);
    assert!(run.parent_span_id.is_empty());
    for chat in &chats {
        assert_eq!(kind(chat), SpanKind::Client);
        assert_eq!(chat.parent_span_id, run.span_id);
        assert_eq!(chat.trace_id, run.trace_id);
    }
    assert_eq!(tool.parent_span_id, run.span_id);

    let run_attrs = attrs(run);
    assert_eq!(run_attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(run_attrs["gen_ai.agent.name"], "calculator");
    assert_eq!(run_attrs["gen_ai.provider.name"], "anthropic");
    assert_eq!(run_attrs["gen_ai.request.model"], "claude-test");
    // The run's usage sums its answered calls; input tokens count the whole prompt.
    assert_eq!(run_attrs["gen_ai.usage.input_tokens"], 150 + 160);
    assert_eq!(run_attrs["gen_ai.usage.output_tokens"], 7 + 2);
    assert!(!run_attrs.contains_key("error.type"));
    assert!(!is_error(run));

    // The first attempt: refused with 529, so error.type and an error status.
    let failed_attrs = attrs(failed);
    assert_eq!(failed_attrs["error.type"], "overloaded_error");
    assert!(is_error(failed));
    assert!(!failed_attrs.contains_key("gen_ai.response.id"));

    let call_attrs = attrs(call);
    let expected = json!({
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-test",
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.temperature": 0.3,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ["END"],
        "gen_ai.response.id": "msg_1",
        "gen_ai.response.model": "claude-test-1",
        "gen_ai.response.finish_reasons": ["tool_call"],
        "gen_ai.usage.input_tokens": 150,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.cache_creation.input_tokens": 30,
    });
    for (key, value) in expected.as_object().unwrap() {
        assert_eq!(call_attrs.get(key), Some(value), "{key} on {call_attrs:?}");
    }
    assert!(!call_attrs.contains_key("error.type"));
    assert!(!is_error(call));
    let answer_attrs = attrs(answer);
    assert_eq!(answer_attrs["gen_ai.response.id"], "msg_2");
    assert_eq!(
        answer_attrs["gen_ai.response.finish_reasons"],
        json!(["stop"])
    );
    assert_eq!(answer_attrs["gen_ai.usage.input_tokens"], 160);
    assert_eq!(answer_attrs["gen_ai.usage.output_tokens"], 2);
    assert!(!answer_attrs.contains_key("gen_ai.usage.cache_read.input_tokens"));

    let tool_attrs = attrs(tool);
    assert_eq!(tool_attrs["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool_attrs["gen_ai.tool.name"], "add");
    assert_eq!(tool_attrs["gen_ai.tool.call.id"], "call_1");
    assert_eq!(tool_attrs["gen_ai.tool.type"], "function");
    assert!(!tool_attrs.contains_key("error.type"));

    // Content is user data: none of it without the opt-in.
    for span in [run, failed, call, answer, tool] {
        let attrs = attrs(span);
        for key in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.system_instructions",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(
                !attrs.contains_key(key),
                "{key} on {} by default",
                span.name
            );
        }
    }
    guard.shutdown().unwrap();
}

#[test]
fn with_the_opt_in_spans_carry_the_messages_in_the_conventions_shape() {
    let receiver = Receiver::start();
    let guard = OtelBuilder::new()
        .endpoint(format!("{}/v1/traces", receiver.url))
        .build()
        .unwrap();
    let (_server_runtime, server) = mock_server();
    let mut agent = calculator(&server, true);
    run_exported(&guard, &mut agent, "What is 2 + 3?");
    let spans = receiver.spans();
    let chats = named(&spans, "chat claude-test");
    assert_eq!(chats.len(), 3);
    let parse = |span: &Span, key: &str| -> Value {
        let text = attrs(span)[key].as_str().unwrap().to_owned();
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(
        parse(chats[1], "gen_ai.system_instructions"),
        json!([{"type": "text", "content": "You add numbers."}])
    );
    assert_eq!(
        parse(chats[1], "gen_ai.input.messages"),
        json!([{"role": "user", "parts": [{"type": "text", "content": "What is 2 + 3?"}]}])
    );
    assert_eq!(
        parse(chats[1], "gen_ai.output.messages"),
        json!([{"role": "assistant", "finish_reason": "tool_call", "parts": [
            {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}
        ]}])
    );
    assert_eq!(
        parse(chats[2], "gen_ai.input.messages"),
        json!([
            {"role": "user", "parts": [{"type": "text", "content": "What is 2 + 3?"}]},
            {"role": "assistant", "parts": [
                {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}
            ]},
            {"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "call_1", "response": "5"}
            ]},
        ])
    );
    assert_eq!(
        parse(chats[2], "gen_ai.output.messages"),
        json!([{"role": "assistant", "finish_reason": "stop", "parts": [
            {"type": "text", "content": "5"}
        ]}])
    );
    let tool = named(&spans, "execute_tool add")[0];
    assert_eq!(
        parse(tool, "gen_ai.tool.call.arguments"),
        json!({"a": 2, "b": 3})
    );
    assert_eq!(attrs(tool)["gen_ai.tool.call.result"], "5");
}

#[test]
fn a_sub_agent_runs_under_its_calls_execute_tool_span_and_a_failed_tool_has_its_error_type() {
    let receiver = Receiver::start();
    let guard = OtelBuilder::new()
        .endpoint(format!("{}/v1/traces", receiver.url))
        .build()
        .unwrap();
    let helper_client =
        ScriptedClient::new([ScriptedResponse::text("sub answer")]).with_model("helper-model");
    let helper = Agent::builder(helper_client)
        .name("helper")
        .build()
        .unwrap();
    let lead_client = ScriptedClient::new([
        ScriptedResponse::tool_call("call_h", "ask_helper", json!({"task": "help"}))
            .then_tool_call("call_f", "fail", json!({})),
        ScriptedResponse::text("done"),
    ])
    .with_model("lead-model");
    let mut lead = Agent::builder(lead_client)
        .name("lead")
        .tool(helper.as_tool("ask_helper", "Asks the helper."))
        .tool(fail_tool())
        .build()
        .unwrap();
    run_exported(&guard, &mut lead, "go");
    let spans = receiver.spans();
    let lead_run = named(&spans, "invoke_agent lead")[0];
    let ask = named(&spans, "execute_tool ask_helper")[0];
    let helper_run = named(&spans, "invoke_agent helper")[0];
    let helper_chat = named(&spans, "chat helper-model")[0];
    let failed = named(&spans, "execute_tool fail")[0];
    assert_eq!(ask.parent_span_id, lead_run.span_id);
    assert_eq!(failed.parent_span_id, lead_run.span_id);
    assert_eq!(helper_run.parent_span_id, ask.span_id);
    assert_eq!(helper_chat.parent_span_id, helper_run.span_id);
    assert_eq!(helper_run.trace_id, lead_run.trace_id);
    assert_eq!(attrs(helper_run)["gen_ai.provider.name"], "scripted");
    assert_eq!(attrs(failed)["error.type"], "tool_error");
    assert!(is_error(failed));
    assert!(!attrs(ask).contains_key("error.type"));
}

#[test]
fn a_move_to_a_fallback_model_is_an_event_of_the_run_span() {
    let receiver = Receiver::start();
    let guard = OtelBuilder::new()
        .endpoint(format!("{}/v1/traces", receiver.url))
        .build()
        .unwrap();
    let primary = ScriptedClient::new([ScriptedResponse::error(agent_loop::LlmError::Api(
        Box::new(agent_loop::error::ApiError::new(529, "Overloaded")),
    ))])
    .with_model("primary-model");
    let backup = ScriptedClient::new([ScriptedResponse::text("ok")]).with_model("backup-model");
    let mut agent = Agent::builder(primary)
        .name("lead")
        .fallback(agent_loop::agent::Fallback::new(backup))
        .build()
        .unwrap();
    run_exported(&guard, &mut agent, "go");
    let spans = receiver.spans();
    let run = named(&spans, "invoke_agent lead")[0];
    let failed = named(&spans, "chat primary-model")[0];
    let moved = named(&spans, "chat backup-model")[0];
    assert!(is_error(failed));
    assert_eq!(attrs(failed)["error.type"], "529");
    assert!(!is_error(moved));
    assert_eq!(moved.parent_span_id, run.span_id);
    let event = run
        .events
        .iter()
        .find(|e| e.name == "gen_ai.fallback")
        .expect("a fallback event on the run span");
    let event_attrs: BTreeMap<String, Value> = event
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map_or(Value::Null, any_to_json),
            )
        })
        .collect();
    assert_eq!(event_attrs["gen_ai.fallback.from"], "primary-model");
    assert_eq!(event_attrs["gen_ai.fallback.to"], "backup-model");
}

/// The child's marker: set only by [`init_reads_the_endpoint_service_and_content_opt_in_from_the_environment`].
const CHILD: &str = "AGENT_LOOP_OTEL_TEST_CHILD";

#[test]
fn init_reads_the_endpoint_service_and_content_opt_in_from_the_environment() {
    let receiver = Receiver::start();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_exports_through_init", "--test-threads=1"])
        .env(CHILD, "1")
        // The base endpoint: the exporter appends /v1/traces.
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("OTEL_SERVICE_NAME", "from-the-environment")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .status()
        .unwrap();
    assert!(status.success());
    let spans = receiver.spans();
    let run = named(&spans, "invoke_agent env-agent");
    assert_eq!(run.len(), 1, "{spans:?}");
    assert!(spans
        .iter()
        .all(|(service, _)| service == "from-the-environment"));
    let chat = named(&spans, "chat env-model")[0];
    assert_eq!(chat.parent_span_id, run[0].span_id);
    // The agent did not opt in; the environment variable did.
    let input = attrs(chat)["gen_ai.input.messages"].clone();
    assert!(
        input.as_str().unwrap().contains("hello from the child"),
        "{input}"
    );
}

/// Run by the test above in a child process, with the environment set; nothing otherwise.
#[test]
fn child_exports_through_init() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let guard = agent_loop_otel::init().unwrap();
    let client = ScriptedClient::new([ScriptedResponse::text("hi")]).with_model("env-model");
    let mut agent = Agent::builder(client).name("env-agent").build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(agent.run("hello from the child").collect::<Vec<_>>());
    guard.shutdown().unwrap();
}
