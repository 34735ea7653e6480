//! The warning an agent logs, once per tool when it is built with strict tools on, for each
//! tool that goes out without strict mode.

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
