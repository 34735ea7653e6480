//! [`FnTool`]: a tool made from a name, a description and an async closure.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use super::{schema, Concurrency, Tool, ToolContext, ToolError, ToolOutput};

/// A tool made from a name, a description and an async closure; the input type (and so the
/// schema the model sees) is the closure's first argument.
///
/// ```
/// use agent_loop::tool::schemars::JsonSchema;
/// use agent_loop::{ToolError, ToolRegistry};
/// use agent_loop::tool::FnTool;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// #[schemars(crate = "agent_loop::tool::schemars")]
/// struct Shout {
///     /// The text to shout.
///     text: String,
/// }
///
/// let shout = FnTool::new("shout", "Upper-cases the text.", |input: Shout, _ctx| async move {
///     if input.text.is_empty() {
///         return Err(ToolError::new("text is empty; pass some text"));
///     }
///     Ok(input.text.to_uppercase())
/// })
/// .read_only(true);
///
/// let registry = ToolRegistry::new().with(shout).unwrap();
/// assert_eq!(registry.names().collect::<Vec<_>>(), ["shout"]);
/// ```
///
/// The closure may return anything that converts into a [`ToolOutput`] (`String`, `&str`,
/// `serde_json::Value`, `ToolOutput`).
///
/// The builder setters share their names with [`Tool`]'s methods; to read a setting back, call
/// the trait method explicitly (`Tool::read_only(&tool)`).
pub struct FnTool<I, F> {
    name: String,
    description: String,
    func: F,
    schema: Option<serde_json::Value>,
    read_only: bool,
    timeout: Option<Duration>,
    concurrency: Concurrency,
    _input: PhantomData<fn(I)>,
}

impl<I, F, Fut, O> FnTool<I, F>
where
    I: DeserializeOwned + schemars::JsonSchema + Send + 'static,
    F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    O: Into<ToolOutput>,
{
    /// A tool named `name` that runs `func`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, func: F) -> Self {
        FnTool {
            name: name.into(),
            description: description.into(),
            func,
            schema: None,
            read_only: false,
            timeout: None,
            concurrency: Concurrency::Shared,
            _input: PhantomData,
        }
    }

    /// Uses this input schema instead of the one derived from `I` (for `I = serde_json::Value`).
    pub fn input_schema(mut self, schema: serde_json::Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Marks the tool as free of side effects (see [`Tool::read_only`]).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The tool's own timeout (see [`Tool::timeout`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How every call of this tool may overlap others (see [`Tool::concurrency`]).
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }
}

#[async_trait]
impl<I, F, Fut, O> Tool for FnTool<I, F>
where
    I: DeserializeOwned + schemars::JsonSchema + Send + 'static,
    F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    O: Into<ToolOutput>,
{
    type Input = I;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> serde_json::Value {
        match &self.schema {
            Some(schema) => schema.clone(),
            None => schema::input_schema_for::<I>(),
        }
    }

    async fn call(&self, input: I, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        (self.func)(input, ctx).await.map(Into::into)
    }

    fn concurrency(&self, _input: &I) -> Concurrency {
        self.concurrency.clone()
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

impl<I, F> fmt::Debug for FnTool<I, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.name)
            .field("read_only", &self.read_only)
            .field("timeout", &self.timeout)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}
