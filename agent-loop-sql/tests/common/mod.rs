//! Helpers shared by the stores' integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod stores;

use agent_loop::tool::FnTool;
use agent_loop::ToolError;

/// A read-only tool `read` that answers "hello".
pub fn read_tool() -> impl agent_loop::Tool {
    FnTool::new(
        "read",
        "Reads a file.",
        |_: serde_json::Value, _ctx| async move { Ok::<_, ToolError>("hello") },
    )
    .read_only(true)
}
