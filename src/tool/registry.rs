//! [`ToolRegistry`]: the type-erased tools and the argument checks at the registry boundary.
//! It prepares each call of a batch (lookup, checks, [`Schedule`]) and hands them to `exec`.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};

use super::call::{ExecOptions, Prepared, ToolCall, ToolCallResult};
use super::catalog::ToolCatalog;
use super::exec::{self, panic_message};
use super::plan::{Access, Schedule};
use super::schema;
use super::text::{cut, quote};
use super::Tool;
use crate::error::{ConfigError, Error};
use crate::message::ToolSpec;

/// The object-safe face of a [`Tool`] inside the registry (rig's Tool/ToolDyn split): it takes
/// checked JSON and hides the input type.
pub(crate) trait ErasedTool: Send + Sync {
    /// Deserializes the (schema-checked) arguments and binds them to a call of the tool,
    /// with the tool's access and this call's concurrency; the timeout is left to the caller.
    fn prepare(&self, input: &serde_json::Value, access: Access) -> Result<Prepared<'_>, String>;
}

struct Erased<T>(T);

impl<T: Tool> ErasedTool for Erased<T> {
    fn prepare(&self, input: &serde_json::Value, access: Access) -> Result<Prepared<'_>, String> {
        let input: T::Input = schema::deserialize(input)?;
        let concurrency = self.0.concurrency(&input);
        Ok(Prepared {
            schedule: Schedule::new(access, concurrency),
            timeout: Duration::ZERO,
            run: Box::new(move |ctx| self.0.call(input, ctx)),
        })
    }
}

/// A tool as the registry holds it: its spec, its settings and its compiled input schema.
pub(crate) struct RegisteredTool {
    spec: ToolSpec,
    access: Access,
    timeout: Option<Duration>,
    deferred: bool,
    validator: schema::InputValidator,
    tool: Box<dyn ErasedTool>,
}

impl RegisteredTool {
    /// The tool's name.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// The tool as the model sees it.
    pub(crate) fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// What the tool's calls do to the world (from [`Tool::read_only`]); see [`Access`].
    pub(crate) fn access(&self) -> Access {
        self.access
    }

    /// See [`Tool::timeout`].
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Checks the arguments against the schema, then deserializes them.
    ///
    /// Arguments that fail only for a `null` at an optional property (what a strict OpenAI
    /// call sends for one it leaves out: strict mode makes optional properties nullable) are
    /// checked again without those `null`s.
    fn prepare(&self, input: &serde_json::Value) -> Result<Prepared<'_>, String> {
        let checked = schema::check_arguments(&self.validator, input);
        if checked.is_err() {
            if let Some(without) = schema::drop_optional_nulls(&self.spec.input_schema, input) {
                if schema::check_arguments(&self.validator, &without).is_ok() {
                    return self
                        .tool
                        .prepare(&without, self.access)
                        .map_err(|detail| schema::invalid_arguments(self.name(), &detail));
                }
            }
        }
        checked
            .and_then(|()| self.tool.prepare(input, self.access))
            .map_err(|detail| schema::invalid_arguments(self.name(), &detail))
    }
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.spec.name)
            .field("access", &self.access)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The registry's settings.
#[derive(Debug, Clone, Copy)]
struct Config {
    max_concurrency: u32,
    default_timeout: Duration,
    max_output_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrency: 8,
            default_timeout: Duration::from_secs(120),
            max_output_bytes: 64 * 1024,
        }
    }
}

#[derive(Clone, Default)]
struct Tools {
    /// In registration order.
    list: Vec<Arc<RegisteredTool>>,
    /// Name → position in `list`.
    by_name: HashMap<String, usize>,
}

/// The tools an agent can call, type-erased, with the rules for running them.
///
/// Arguments are checked here, once per call: unknown tool names, text that is not JSON,
/// JSON that fails the tool's schema and JSON that does not deserialize into its input all
/// become `is_error` results naming the problem, and the tool is not called.
///
/// Execution ([`execute_batch`](Self::execute_batch), [`execute_stream`](Self::execute_stream)):
/// the calls of a batch run concurrently (at most [`max_concurrency`](Self::max_concurrency) at
/// once) under each call's [`Concurrency`](super::Concurrency); each call gets exactly one
/// result, in the model's order, whatever happens (error, panic, timeout, cancellation);
/// outputs longer than [`max_output_bytes`](Self::max_output_bytes) are cut in the middle.
///
/// Cloning is cheap (the tools are shared); registering on a clone does not affect the original.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Arc<Tools>,
    config: Config,
}

impl ToolRegistry {
    /// An empty registry with the default settings: 8 concurrent calls, a 120 s timeout per
    /// call, 64 KiB of output per result.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// Adds a tool.
    ///
    /// Both providers take a tool's input as one JSON object, and Anthropic refuses an
    /// `input_schema` with `oneOf`, `anyOf` or `allOf` at its top level, which is what schemars
    /// derives for an enum (`#[serde(tag = "op")]`), an enum `#[serde(flatten)]`ed into a
    /// struct, or `Option<Struct>`. Such a schema is sent to the model flattened into one
    /// object schema: the variants' properties merged (a property whose schemas differ gets
    /// a property-level `anyOf`; the tag becomes a string `enum`), the properties every variant
    /// requires required, and a description of which fields go with which tag. The arguments
    /// are still checked against the tool's own schema, and for a tagged enum against the
    /// variant the tag names, so a call that mixes variants gets an error result saying what
    /// its variant needs.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the name is taken or does not match `^[a-zA-Z0-9_-]{1,64}$`,
    /// when the input schema is not a valid JSON Schema, or when it does not describe an
    /// object: a top-level type other than `"object"` (a `String` or `Vec` input), or a
    /// top-level union with an alternative that is not an object (an untagged enum of plain
    /// values, a unit variant of an externally tagged enum). The message says how to fix the
    /// type: usually, wrap the value in a struct field.
    pub fn register<T: Tool>(&mut self, tool: T) -> Result<(), Error> {
        let name = tool.name().to_owned();
        let invalid = |message: String| ConfigError::Tool {
            tool: cut(name.clone(), 100),
            message,
        };
        schema::check_name(&name).map_err(invalid)?;
        if self.tools.by_name.contains_key(&name) {
            return Err(invalid(format!(
                "a tool named {} is already registered; tool names must be unique",
                quote(&name)
            ))
            .into());
        }
        let (input_schema, validator) =
            schema::prepare(&name, tool.input_schema()).map_err(invalid)?;
        let registered = RegisteredTool {
            spec: ToolSpec {
                name: name.clone(),
                description: tool.description().to_owned(),
                input_schema,
            },
            access: Access::from_read_only(tool.read_only()),
            timeout: tool.timeout(),
            deferred: tool.deferred(),
            validator,
            tool: Box::new(Erased(tool)),
        };
        let tools = Arc::make_mut(&mut self.tools);
        tools.by_name.insert(name, tools.list.len());
        tools.list.push(Arc::new(registered));
        Ok(())
    }

    /// [`register`](Self::register), builder style.
    ///
    /// # Errors
    ///
    /// As [`register`](Self::register).
    pub fn with<T: Tool>(mut self, tool: T) -> Result<Self, Error> {
        self.register(tool)?;
        Ok(self)
    }

    /// At most this many calls of a batch run at once (default 8; 0 counts as 1).
    pub fn max_concurrency(mut self, max: u32) -> Self {
        self.config.max_concurrency = max.max(1);
        self
    }

    /// How long a call may run when its tool sets no [`Tool::timeout`] (default 120 s).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.config.default_timeout = timeout;
        self
    }

    /// The longest result text sent to the model (default 64 KiB). Longer outputs keep their
    /// start and end, cut on character boundaries, with a marker such as
    /// `[... 12345 bytes removed ...]` in between (the marker comes on top of the limit).
    pub fn max_output_bytes(mut self, max: usize) -> Self {
        self.config.max_output_bytes = max;
        self
    }

    /// The tool with this name, as the registry holds it.
    pub(crate) fn get(&self, name: &str) -> Option<&RegisteredTool> {
        let index = *self.tools.by_name.get(name)?;
        self.tools.list.get(index).map(|tool| &**tool)
    }

    /// The spec (name, description, input schema as sent) of the tool with this name.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.get(name).map(RegisteredTool::spec)
    }

    /// The time limit of the tool with this name, when it has its own.
    pub fn timeout(&self, name: &str) -> Option<Duration> {
        self.get(name).and_then(RegisteredTool::timeout)
    }

    /// Whether the named tool is registered and [deferred](Tool::deferred).
    pub fn is_deferred(&self, name: &str) -> bool {
        self.get(name).is_some_and(|tool| tool.deferred)
    }

    /// Whether a tool with this name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.by_name.contains_key(name)
    }

    /// The tool names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.tools.list.iter().map(|tool| tool.name())
    }

    /// The tools as the model sees them, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .list
            .iter()
            .map(|tool| tool.spec.clone())
            .collect()
    }

    /// The tools as the agent's machine sees them: specs and read-only flags, no code.
    pub fn catalog(&self) -> ToolCatalog {
        self.tools
            .list
            .iter()
            .fold(ToolCatalog::new(), |catalog, tool| {
                if tool.deferred {
                    catalog.deferred_tool(tool.spec.clone())
                } else {
                    catalog.tool(tool.spec.clone(), tool.access.is_read_only())
                }
            })
    }

    /// Whether the named tool is registered and [read-only](Tool::read_only): the same as
    /// `self.access(name) == Some(Access::ReadOnly)`.
    pub fn is_read_only(&self, name: &str) -> bool {
        self.access(name).is_some_and(Access::is_read_only)
    }

    /// What the named tool's calls do to the world, if it is registered; see [`Access`].
    pub fn access(&self, name: &str) -> Option<Access> {
        self.get(name).map(RegisteredTool::access)
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.list.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.list.is_empty()
    }

    /// Runs the calls of one model turn and returns one result per call, in the model's order.
    pub async fn execute_batch(
        &self,
        calls: Vec<ToolCall>,
        opts: &ExecOptions,
    ) -> Vec<ToolCallResult> {
        let count = calls.len();
        let mut slots: Vec<Option<ToolCallResult>> = vec![None; count];
        let mut stream = std::pin::pin!(self.execute_stream(calls, opts.clone()));
        while let Some((index, result)) = stream.next().await {
            if let Some(slot) = slots.get_mut(index) {
                *slot = Some(result);
            }
        }
        slots.into_iter().flatten().collect()
    }

    /// Runs one call.
    pub async fn execute_one(&self, call: ToolCall, opts: &ExecOptions) -> ToolCallResult {
        let (id, name) = (call.id.clone(), call.name.clone());
        self.execute_batch(vec![call], opts)
            .await
            .pop()
            .unwrap_or_else(|| ToolCallResult::cancelled(id, name, Duration::ZERO))
    }

    /// Runs the calls of one model turn and yields each result as it arrives, with the call's
    /// index in `calls`; every call yields exactly one result. Use it to show results as they
    /// come while still writing them into the history in the model's order.
    pub fn execute_stream(
        &self,
        calls: Vec<ToolCall>,
        opts: ExecOptions,
    ) -> impl Stream<Item = (usize, ToolCallResult)> + Send + '_ {
        let calls = calls
            .into_iter()
            .map(|call| {
                let prepared = self.prepare_call(&call);
                (call, prepared)
            })
            .collect();
        let limits = exec::Limits {
            max_concurrency: self.config.max_concurrency,
            max_output_bytes: self.config.max_output_bytes,
        };
        exec::run(calls, limits, opts)
    }

    /// Looks the call's tool up and checks its arguments; an `Err` is the text of the error
    /// result that answers the call without running it.
    fn prepare_call(&self, call: &ToolCall) -> Result<Prepared<'_>, String> {
        let tool = self
            .get(&call.name)
            .ok_or_else(|| self.unknown_tool(&call.name))?;
        if let Some(error) = call.parse_error() {
            return Err(schema::invalid_arguments(&call.name, error));
        }
        // A custom `Deserialize` or `Tool::concurrency` may panic: that is the tool's failure,
        // answered like a panic in `call`.
        let mut prepared = std::panic::catch_unwind(AssertUnwindSafe(|| tool.prepare(&call.input)))
            .unwrap_or_else(|panic| {
                Err(format!(
                    "tool {} panicked: {}",
                    quote(&call.name),
                    panic_message(panic.as_ref())
                ))
            })?;
        prepared.timeout = tool.timeout().unwrap_or(self.config.default_timeout);
        Ok(prepared)
    }

    fn unknown_tool(&self, name: &str) -> String {
        let names: Vec<String> = self.names().map(quote).collect();
        if names.is_empty() {
            format!("unknown tool {}; no tools are available", quote(name))
        } else {
            format!(
                "unknown tool {}; available tools: {}",
                quote(name),
                names.join(", ")
            )
        }
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names().collect::<Vec<_>>())
            .field("max_concurrency", &self.config.max_concurrency)
            .field("default_timeout", &self.config.default_timeout)
            .field("max_output_bytes", &self.config.max_output_bytes)
            .finish()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ContentBlock;
    use crate::tool::FnTool;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Path {
        #[allow(dead_code)]
        path: String,
    }

    fn registry() -> ToolRegistry {
        let read = FnTool::new("read", "Reads a file.", |_: Path, _ctx| async move {
            Ok("text")
        })
        .read_only(true)
        .timeout(Duration::from_secs(5));
        let write = FnTool::new("write", "Writes a file.", |_: Path, _ctx| async move {
            Ok("done")
        });
        ToolRegistry::new().with(read).unwrap().with(write).unwrap()
    }

    #[test]
    fn a_registered_tool_shows_what_the_model_sees() {
        let registry = registry();
        let read = registry.get("read").unwrap();
        assert_eq!(read.name(), "read");
        let spec = registry.spec("read").unwrap();
        assert_eq!(spec, read.spec());
        assert_eq!(spec.description, "Reads a file.");
        assert_eq!(spec.input_schema["required"], serde_json::json!(["path"]));
        assert!(registry.is_read_only("read"));
        assert_eq!(registry.timeout("read"), Some(Duration::from_secs(5)));
        assert!(!registry.is_read_only("write"));
        assert_eq!(registry.timeout("write"), None);
        let debug = format!("{read:?}");
        assert!(debug.starts_with("RegisteredTool"), "{debug}");
        assert!(
            debug.contains("\"read\"") && debug.contains("access: ReadOnly"),
            "{debug}"
        );
    }

    #[test]
    fn the_registry_answers_by_name() {
        let registry = registry();
        assert!(registry.contains("read") && registry.contains("write"));
        assert!(!registry.contains("delete"));
        assert!(registry.get("delete").is_none());
        assert!(registry.is_read_only("read"));
        assert!(!registry.is_read_only("write"));
        assert!(!registry.is_read_only("delete"));
        assert_eq!(registry.names().collect::<Vec<_>>(), ["read", "write"]);
        let specs: Vec<String> = registry.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(specs, ["read", "write"]);
        assert_eq!(registry.len(), 2);
        assert!(!registry.is_empty());
        assert!(ToolRegistry::new().is_empty());
        assert_eq!(ToolRegistry::new().len(), 0);
        let debug = format!("{:?}", registry.max_concurrency(3));
        assert!(
            debug.starts_with("ToolRegistry")
                && debug.contains("[\"read\", \"write\"]")
                && debug.contains("max_concurrency: 3"),
            "{debug}"
        );
    }

    #[test]
    fn calls_and_results_convert_to_and_from_blocks() {
        let block = ContentBlock::ToolUse {
            id: "c1".into(),
            name: "read".into(),
            input: serde_json::json!({"path": "a"}),
        };
        let call = ToolCall::from_block(&block).unwrap();
        assert_eq!((call.id.as_str(), call.name.as_str()), ("c1", "read"));
        assert_eq!(call.input, serde_json::json!({"path": "a"}));
        assert!(!call.has_invalid_json());
        assert!(ToolCall::from_block(&ContentBlock::text("hi")).is_none());
        assert!(ToolCall::from_raw("c2", "read", "{\"path\":").has_invalid_json());
        assert!(!ToolCall::from_raw("c3", "read", "").has_invalid_json());
        let result = ToolCallResult::new("c1", "read", "oops", true, Duration::ZERO);
        assert_eq!(
            result.to_block(),
            ContentBlock::tool_result("c1", "oops", true)
        );
    }
}
