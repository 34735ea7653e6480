//! Tool sources: sets of tools that can change while an agent runs (an MCP server's, say).
//!
//! The agent's tools are its builder's own plus every source's current tools. At each turn
//! boundary the driver asks the sources whether they [`changed`](ToolSource::changed) (an
//! atomic load each); when one did, it refreshes it, rebuilds the registry and hands it to
//! the machine (`Input::ToolsChanged`), so the next model request lists the new tools.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;

use super::ToolRegistry;
use crate::error::Error;

/// A set of tools that can change over time, such as an MCP server's
/// (`agent_loop_mcp::McpConnection`, in the agent-loop-mcp crate). Give it to an agent with
/// [`AgentBuilder::tool_source`](crate::AgentBuilder::tool_source).
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use futures::future::BoxFuture;
/// use agent_loop::{Error, ToolError, ToolRegistry};
/// use agent_loop::tool::{FnTool, ToolSource};
///
/// /// A source whose one tool appears once `ready` is set.
/// #[derive(Default)]
/// struct Late { ready: AtomicBool }
///
/// impl ToolSource for Late {
///     fn changed(&self) -> bool {
///         self.ready.load(Ordering::Acquire)
///     }
///     fn refresh(&self) -> BoxFuture<'_, Result<(), Error>> {
///         Box::pin(async { Ok(()) })
///     }
///     fn register(&self, registry: &mut ToolRegistry) -> Result<usize, Error> {
///         if !self.ready.load(Ordering::Acquire) {
///             return Ok(0);
///         }
///         registry.register(FnTool::new("late", "Came late.", |_: serde_json::Value, _ctx| async {
///             Ok::<_, ToolError>("here")
///         }))?;
///         Ok(1)
///     }
/// }
/// ```
pub trait ToolSource: Send + Sync {
    /// Whether the tools changed since the last [`refresh`](Self::refresh). Asked at every
    /// turn boundary of every run: it must be cheap (an atomic load).
    fn changed(&self) -> bool;

    /// Fetches the current tools (and clears [`changed`](Self::changed)). On an error the
    /// agent logs it and keeps the tools it had.
    fn refresh(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// Registers the current tools (as of the last refresh) in `registry`; returns how many.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when a tool cannot be registered (a name taken, a schema the
    /// registry refuses).
    fn register(&self, registry: &mut ToolRegistry) -> Result<usize, Error>;
}

/// The tools of an agent: its builder's own, and the sources that add theirs. Clones share
/// the current registry, so a refresh in one run is what the next run starts from.
#[derive(Clone, Default)]
pub(crate) struct ToolSources {
    base: ToolRegistry,
    sources: Vec<Arc<dyn ToolSource>>,
    current: Arc<Mutex<ToolRegistry>>,
}

impl fmt::Debug for ToolSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSources")
            .field("base", &self.base)
            .field("sources", &self.sources.len())
            .finish_non_exhaustive()
    }
}

impl ToolSources {
    /// `base` plus every source's current tools.
    ///
    /// # Errors
    ///
    /// The first source's registration error.
    pub(crate) fn new(
        base: ToolRegistry,
        sources: Vec<Arc<dyn ToolSource>>,
    ) -> Result<Self, Error> {
        let current = combine(&base, &sources)?;
        Ok(ToolSources {
            base,
            sources,
            current: Arc::new(Mutex::new(current)),
        })
    }

    /// The registry as of the last build or refresh.
    pub(crate) fn current(&self) -> ToolRegistry {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether any source changed: one atomic load per source.
    pub(crate) fn changed(&self) -> bool {
        self.sources.iter().any(|source| source.changed())
    }

    /// Refreshes the sources that changed and rebuilds the registry; `None` when nothing
    /// new came of it (no source changed, every refresh failed, or the new tools could not
    /// be registered: the old tools stay, and the failure is logged).
    pub(crate) async fn refresh(&self) -> Option<ToolRegistry> {
        let mut refreshed = false;
        for source in self.sources.iter().filter(|source| source.changed()) {
            match source.refresh().await {
                Ok(()) => refreshed = true,
                Err(error) => {
                    tracing::warn!(%error, "refreshing a tool source failed; keeping its old tools")
                }
            }
        }
        if !refreshed {
            return None;
        }
        match combine(&self.base, &self.sources) {
            Ok(tools) => {
                *self.current.lock().unwrap_or_else(PoisonError::into_inner) = tools.clone();
                Some(tools)
            }
            Err(error) => {
                tracing::warn!(%error, "the refreshed tools could not be registered; keeping the old tools");
                None
            }
        }
    }
}

fn combine(base: &ToolRegistry, sources: &[Arc<dyn ToolSource>]) -> Result<ToolRegistry, Error> {
    let mut tools = base.clone();
    for source in sources {
        source.register(&mut tools)?;
    }
    Ok(tools)
}
