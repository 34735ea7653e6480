//! The agent reports its work as tracing spans named after OpenTelemetry's GenAI operations:
//! a run (`invoke_agent`), each model call (`chat`) and each tool call (`execute_tool`), with
//! usage and durations as fields; message content only when the agent opts in. And the
//! warning an agent built with strict tools logs for each tool that goes out non-strict.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::FnTool;
use agent_loop::{Agent, ToolError};
use futures::StreamExt;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Span name → the field names recorded on it, over all spans of that name.
type Seen = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

struct Recorder {
    next: AtomicU64,
    names: Mutex<BTreeMap<u64, String>>,
    seen: Seen,
}

struct FieldNames(Vec<String>);

impl Visit for FieldNames {
    fn record_debug(&mut self, field: &Field, _value: &dyn std::fmt::Debug) {
        self.0.push(field.name().to_owned());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let name = attrs.metadata().name().to_owned();
        let mut fields = FieldNames(Vec::new());
        attrs.record(&mut fields);
        self.names.lock().unwrap().insert(id, name.clone());
        self.seen
            .lock()
            .unwrap()
            .entry(name)
            .or_default()
            .extend(fields.0);
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut fields = FieldNames(Vec::new());
        values.record(&mut fields);
        if let Some(name) = self.names.lock().unwrap().get(&span.into_u64()) {
            self.seen
                .lock()
                .unwrap()
                .entry(name.clone())
                .or_default()
                .extend(fields.0);
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn runs_turns_model_calls_and_tool_calls_are_spans_with_usage_and_durations() {
    let seen: Seen = Arc::default();
    let recorder = Recorder {
        next: AtomicU64::new(0),
        names: Mutex::default(),
        seen: seen.clone(),
    };
    let _guard = tracing::subscriber::set_default(recorder);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = ScriptedClient::new([
            ScriptedResponse::tool_call("c1", "echo", json!({"text": "hi"})).usage_tokens(10, 2),
            ScriptedResponse::text("done").usage_tokens(12, 1),
        ])
        .with_model("scripted-model");
        let echo = FnTool::new("echo", "Echoes.", |v: serde_json::Value, _ctx| async move {
            Ok::<_, ToolError>(v.to_string())
        });
        let mut agent = Agent::builder(client).tool(echo).build().unwrap();
        let _: Vec<_> = agent.run("go").collect().await;
    });
    let seen = seen.lock().unwrap();
    let has =
        |span: &str, field: &str| seen.get(span).is_some_and(|f| f.iter().any(|n| n == field));
    for field in [
        "otel.name",
        "gen_ai.operation.name",
        "gen_ai.agent.name",
        "gen_ai.provider.name",
        "turns",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    ] {
        assert!(
            has("invoke_agent", field),
            "invoke_agent lacks {field}: {seen:?}"
        );
    }
    for field in [
        "otel.kind",
        "turn",
        "gen_ai.request.model",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    ] {
        assert!(has("chat", field), "chat lacks {field}: {seen:?}");
    }
    // A string array: with the `otel-attributes` feature it goes to the OpenTelemetry span as
    // an array (agent-loop-otel/tests/otel.rs), not through `tracing`, which has none.
    #[cfg(not(feature = "otel-attributes"))]
    assert!(has("chat", "gen_ai.response.finish_reasons"), "{seen:?}");
    for field in [
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "duration_ms",
        "is_error",
    ] {
        assert!(
            has("execute_tool", field),
            "execute_tool lacks {field}: {seen:?}"
        );
    }
    // Content is user data: recorded only on opt-in.
    for (span, field) in [
        ("chat", "gen_ai.input.messages"),
        ("chat", "gen_ai.output.messages"),
        ("execute_tool", "gen_ai.tool.call.arguments"),
        ("execute_tool", "gen_ai.tool.call.result"),
    ] {
        assert!(
            !has(span, field),
            "{span} has {field} without opt-in: {seen:?}"
        );
    }
}

/// The warning an agent logs, once per tool when it is built with strict tools on, for each
/// tool that goes out without strict mode. Here, in the binary whose tests watch tracing
/// output: a callsite's interest is cached when it is first hit, so a test of the providers
/// binary (whose other tests build such agents with no subscriber) could miss the event.
mod strict_warning {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use agent_loop::tool::FnTool;
    use agent_loop::{Agent, AnthropicClient, OpenAiClient, RequestSettings, ToolError};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// An event's level and fields.
    type Logged = (Level, BTreeMap<String, String>);

    /// Each event's level and fields.
    #[derive(Clone, Default)]
    struct Events(Arc<Mutex<Vec<Logged>>>);

    struct Fields(BTreeMap<String, String>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(
                field.name().to_owned(),
                format!("{value:?}").trim_matches('"').to_owned(),
            );
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }
    }

    impl Subscriber for Events {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(BTreeMap::new());
            event.record(&mut fields);
            self.0
                .lock()
                .unwrap()
                .push((*event.metadata().level(), fields.0));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
    #[schemars(crate = "agent_loop::tool::schemars")]
    #[allow(dead_code)]
    struct Node {
        name: String,
        children: Vec<Node>,
    }

    #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
    #[schemars(crate = "agent_loop::tool::schemars")]
    #[allow(dead_code)]
    struct City {
        city: String,
    }

    /// The warnings logged while an agent with a recursive and a plain tool is built.
    fn warnings(build: impl FnOnce() -> Agent) -> Vec<BTreeMap<String, String>> {
        let events = Events::default();
        let agent = tracing::subscriber::with_default(events.clone(), build);
        drop(agent);
        let seen = events.0.lock().unwrap().clone();
        seen.into_iter()
            .filter(|(level, _)| *level == Level::WARN)
            .map(|(_, fields)| fields)
            .collect()
    }

    fn tools(builder: agent_loop::AgentBuilder, strict: bool) -> Agent {
        builder
            .tool(FnTool::new(
                "tree",
                "Takes a tree.",
                |_: Node, _ctx| async move { Ok::<_, ToolError>("ok") },
            ))
            .tool(FnTool::new(
                "weather",
                "Weather.",
                |_: City, _ctx| async move { Ok::<_, ToolError>("sunny") },
            ))
            .settings(RequestSettings::new().strict_tools(strict))
            .build()
            .unwrap()
    }

    #[test]
    fn an_agent_warns_once_per_tool_that_goes_out_without_strict_mode() {
        let anthropic = warnings(|| tools(Agent::builder(AnthropicClient::new("k")), true));
        assert_eq!(anthropic.len(), 1, "{anthropic:?}");
        assert_eq!(anthropic[0]["tool"], "tree");
        assert!(
            anthropic[0]["reason"].contains("recursive"),
            "{anthropic:?}"
        );
        assert!(anthropic[0]["message"].contains("without strict mode"));
        // OpenAI takes root recursion: nothing to warn about.
        assert_eq!(
            warnings(|| tools(Agent::builder(OpenAiClient::new("k")), true)),
            Vec::<BTreeMap<String, String>>::new()
        );
        // Strict tools off: nothing goes out strict, so nothing to warn about.
        assert_eq!(
            warnings(|| tools(Agent::builder(AnthropicClient::new("k")), false)),
            Vec::<BTreeMap<String, String>>::new()
        );
    }
}
