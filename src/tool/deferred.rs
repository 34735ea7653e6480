//! [`DeferredTool`]: a tool whose results come from outside the agent.

use async_trait::async_trait;

use super::{Tool, ToolContext, ToolError, ToolOutput};

/// A tool whose results come from outside the agent: a person, a webhook, a UI. The model
/// sees it as any tool (name, description, input schema); a run with calls of it pauses,
/// ending with [`Termination::Paused`](crate::Termination::Paused), once the response's
/// other calls are answered, and [`Agent::resume`](crate::Agent::resume) continues it with
/// the results ([`Resolutions::result`](crate::agent::Resolutions::result)).
///
/// ```
/// use agent_loop::{Tool};
/// use agent_loop::tool::DeferredTool;
/// use serde_json::json;
///
/// let ask = DeferredTool::new("ask_user", "Asks the user a question and returns the answer.")
///     .input_schema(json!({
///         "type": "object",
///         "properties": {"question": {"type": "string"}},
///         "required": ["question"]
///     }));
/// assert!(ask.deferred());
/// ```
#[derive(Debug, Clone)]
pub struct DeferredTool {
    name: String,
    description: String,
    schema: serde_json::Value,
}

impl DeferredTool {
    /// A deferred tool taking any object (set its schema with
    /// [`input_schema`](Self::input_schema)).
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        DeferredTool {
            name: name.into(),
            description: description.into(),
            schema: serde_json::json!({"type": "object"}),
        }
    }

    /// The JSON Schema of its input (an object schema).
    pub fn input_schema(mut self, schema: serde_json::Value) -> Self {
        self.schema = schema;
        self
    }
}

#[async_trait]
impl Tool for DeferredTool {
    type Input = serde_json::Value;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> serde_json::Value {
        self.schema.clone()
    }

    fn deferred(&self) -> bool {
        true
    }

    /// Only reached when a driver runs it anyway (the agent never does): an error result.
    async fn call(&self, _input: Self::Input, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::new(format!(
            "{} is answered from outside the agent; it pauses the run instead of running",
            self.name
        )))
    }
}
