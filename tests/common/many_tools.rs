//! 500 generated tools (10 verbs × 10 nouns × 5 systems, each a name, one sentence and a
//! two-property schema, about MCP size): the tool-search test (`tests/agent/tool_search.rs`)
//! and the request-bytes example (`benches/examples/tool_search_bytes.rs`) include this file.

use agent_loop::tool::FnTool;
use agent_loop::{AgentBuilder, ToolError};
use serde_json::{json, Value};

const VERBS: [&str; 10] = [
    "create", "delete", "list", "update", "archive", "export", "import", "rename", "share", "watch",
];
const NOUNS: [&str; 10] = [
    "invoice",
    "customer",
    "ticket",
    "repository",
    "calendar event",
    "spreadsheet",
    "contact",
    "deployment",
    "playlist",
    "weather report",
];
const SYSTEMS: [&str; 5] = ["CRM", "GitHub", "Google Workspace", "Stripe", "Spotify"];

/// 500 tools: every verb × noun × system, each with a small object schema.
pub(crate) fn with_tools(mut builder: AgentBuilder) -> AgentBuilder {
    for verb in VERBS {
        for noun in NOUNS {
            for system in SYSTEMS {
                let name = format!(
                    "{}_{}_{}",
                    system.to_lowercase().replace(' ', "_"),
                    verb,
                    noun.replace(' ', "_")
                );
                let description = format!("{verb}s a {noun} in {system}");
                let answer = format!("{verb}d the {noun}");
                let tool = FnTool::new(name, description, move |_: Value, _ctx| {
                    let answer = answer.clone();
                    async move { Ok::<_, ToolError>(answer) }
                })
                .input_schema(json!({
                    "type": "object",
                    "properties": {"id": {"type": "string", "description": "The item's id."},
                                   "note": {"type": "string", "description": "A note to add."}},
                    "required": ["id"]
                }));
                builder = builder.tool(tool);
            }
        }
    }
    builder
}
