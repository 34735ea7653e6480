//! Structured output and per-run options: [`StructuredOutput`], [`RunOptions`].
//!
//! A typed final answer is asked for the portable way, as a tool: the model is given one
//! more tool (`final_answer` by default) whose input schema is the answer's, and answers by
//! calling it. Every provider and compatible server that does tool calling can do this,
//! which is not true of response-format features. The machine checks the call's input
//! against the schema (and, for a Rust type, that it deserializes); a wrong answer goes back
//! to the model as an error result saying what is wrong, and the next call is forced to the
//! tool (where the provider allows: Anthropic does not with extended thinking on). After
//! [`StructuredOutput::max_retries`] wrong answers the run ends with
//! [`Termination::InvalidOutput`](crate::Termination::InvalidOutput), carrying the last one.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ConfigError, Error};
use crate::message::ToolSpec;
use crate::provider::RequestSettings;
use crate::tool::schema;

/// The default name of the answer tool.
pub const DEFAULT_OUTPUT_TOOL: &str = "final_answer";

type Check = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// A typed final answer for a run: the answer tool's name, description and schema, and how
/// the answer is checked.
///
/// ```
/// use agent_loop::agent::StructuredOutput;
///
/// #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
/// #[schemars(crate = "agent_loop::tool::schemars")] // so that you need no schemars dependency
/// struct Contact {
///     name: String,
///     email: Option<String>,
/// }
///
/// let output = StructuredOutput::of::<Contact>()?.max_retries(1);
/// assert_eq!(output.tool_name(), "final_answer");
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[derive(Clone)]
pub struct StructuredOutput {
    pub(crate) spec: ToolSpec,
    pub(crate) check: Check,
    pub(crate) max_retries: u32,
}

impl fmt::Debug for StructuredOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StructuredOutput")
            .field("tool", &self.spec.name)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl StructuredOutput {
    /// An answer of type `T`: its schemars schema (an object: wrap other types in a struct),
    /// checked against the schema and by deserializing into `T`.
    pub fn of<T: DeserializeOwned + schemars::JsonSchema + 'static>() -> Result<Self, Error> {
        let mut output = Self::from_schema(schema::input_schema_for::<T>())?;
        let whole = output.check.clone();
        output.check = Arc::new(move |value: &Value| {
            whole(value)?;
            schema::deserialize::<T>(value).map(drop)
        });
        Ok(output)
    }

    /// An answer described by a JSON Schema (an object schema), checked against it.
    pub fn from_schema(input_schema: Value) -> Result<Self, Error> {
        let (sent, validator) =
            schema::prepare(DEFAULT_OUTPUT_TOOL, input_schema).map_err(|message| {
                ConfigError::Tool {
                    tool: DEFAULT_OUTPUT_TOOL.to_owned(),
                    message,
                }
            })?;
        let validator = Arc::new(validator);
        Ok(StructuredOutput {
            spec: ToolSpec {
                name: DEFAULT_OUTPUT_TOOL.to_owned(),
                description: "Give your final answer by calling this tool with it, once, when \
                              you are done, instead of answering in text."
                    .to_owned(),
                input_schema: sent,
            },
            check: Arc::new(move |value: &Value| schema::check_arguments(&validator, value)),
            max_retries: 2,
        })
    }

    /// Names the answer tool (default `final_answer`); it may not clash with a tool of the
    /// agent.
    pub fn name(mut self, name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        schema::check_name(&name).map_err(|message| ConfigError::Tool {
            tool: name.clone(),
            message,
        })?;
        self.spec.name = name;
        Ok(self)
    }

    /// Describes the answer tool to the model (say what the answer is for).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.spec.description = description.into();
        self
    }

    /// How many wrong answers the model may correct before the run ends with
    /// [`Termination::InvalidOutput`](crate::Termination::InvalidOutput) (default 2).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The answer tool's name.
    pub fn tool_name(&self) -> &str {
        &self.spec.name
    }

    /// The answer tool as the model sees it.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Checks an answer; the error says what is wrong, for the model.
    pub fn check(&self, answer: &Value) -> Result<(), String> {
        (self.check)(answer)
    }
}

/// Options for one run: request settings over the agent's, and a structured answer.
///
/// ```
/// use agent_loop::{RequestSettings};
/// use agent_loop::agent::RunOptions;
///
/// let options = RunOptions::new().settings(RequestSettings::new().temperature(0.0));
/// # let _ = options;
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Settings for this run's requests, over the builder's.
    pub settings: RequestSettings,
    /// The typed final answer asked for, if any.
    pub output: Option<StructuredOutput>,
}

impl RunOptions {
    /// No options: the agent's settings, a text answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Settings for this run's requests, over the builder's.
    pub fn settings(mut self, settings: RequestSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Asks for a structured answer.
    pub fn output(mut self, output: StructuredOutput) -> Self {
        self.output = Some(output);
        self
    }
}
