//! What is served: the agent (its client, tools, configuration and sub-agents) and the
//! policy that decides which of its calls need a human's approval. Plain configuration: the
//! driver and the session read it, it reads neither.

use std::sync::Arc;

use agent_loop::agent::machine::MachineParts;
use agent_loop::agent::SubAgentTask;
use agent_loop::context::{ContextConfig, Conversation};
use agent_loop::tool::{FnTool, ToolCall};
use agent_loop::{Agent, AgentBuilder, ContextManager, LlmClient, ToolError, ToolRegistry};
use restate_sdk::errors::TerminalError;
use serde::{Deserialize, Serialize};

/// Default bound on the saved conversation (Restate's default message limit is larger; the
/// margin leaves room for the rest of the journal entry).
const DEFAULT_MAX_STATE_BYTES: usize = 16 * 1024 * 1024;

/// What the approval policy says about a tool call before it runs.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalRequest {
    /// Run it.
    Allow,
    /// Do not run it; the model reads the reason as the tool's error result.
    Deny(String),
    /// Wait, durably, for a human's [`ApprovalDecision`] (through the `approve` handler or by
    /// resolving the awakeable named in the [`ProgressEvent::ApprovalNeeded`](crate::ProgressEvent::ApprovalNeeded) event).
    AskHuman,
}

/// Decides which tool calls need a human's approval. Any
/// `Fn(&ToolCall) -> ApprovalRequest` is one.
///
/// It must be deterministic (decide from the call alone): Restate replays a run after a crash
/// by running the handler again, and a different verdict on replay is a journal mismatch.
pub trait ApprovalPolicy: Send + Sync + 'static {
    /// The verdict on one call.
    fn check(&self, call: &ToolCall) -> ApprovalRequest;
}

impl<F> ApprovalPolicy for F
where
    F: Fn(&ToolCall) -> ApprovalRequest + Send + Sync + 'static,
{
    fn check(&self, call: &ToolCall) -> ApprovalRequest {
        self(call)
    }
}

/// A human's verdict on a call waiting for approval: the body of the `approve` handler, or
/// the value an awakeable is resolved with.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The call decided on.
    pub call_id: String,
    /// Whether it may run.
    pub allow: bool,
    /// Why not (the model reads it), when denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// Allows the call.
    pub fn allow(call_id: impl Into<String>) -> Self {
        ApprovalDecision {
            call_id: call_id.into(),
            allow: true,
            reason: None,
        }
    }

    /// Denies the call, telling the model why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        ApprovalDecision {
            call_id: call_id.into(),
            allow: false,
            reason: Some(reason.into()),
        }
    }
}

type Configure = dyn Fn(AgentBuilder) -> AgentBuilder + Send + Sync;

/// An agent to serve durably: the model client, the tools, how to configure each run's
/// machine, and which calls need a human's approval.
#[derive(Clone)]
pub struct DurableAgent {
    pub(crate) client: Arc<dyn LlmClient>,
    pub(crate) tools: ToolRegistry,
    configure: Arc<Configure>,
    pub(crate) approval: Arc<dyn ApprovalPolicy>,
    pub(crate) max_state_bytes: usize,
    pub(crate) journal_retention: Option<std::time::Duration>,
    /// Sub-agents by the name the model calls them by.
    sub_agents: Vec<(String, Arc<DurableAgent>)>,
}

impl std::fmt::Debug for DurableAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableAgent")
            .field("tools", &self.tools.names().collect::<Vec<_>>())
            .field("max_state_bytes", &self.max_state_bytes)
            .finish_non_exhaustive()
    }
}

impl DurableAgent {
    /// An agent on this client with these tools; every call allowed.
    pub fn new(client: impl LlmClient + 'static, tools: ToolRegistry) -> Self {
        DurableAgent {
            client: Arc::new(client),
            tools,
            configure: Arc::new(|builder| builder),
            approval: Arc::new(|_: &ToolCall| ApprovalRequest::Allow),
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            journal_retention: None,
            sub_agents: Vec::new(),
        }
    }

    /// Configures each run's machine (system prompt, limits, retry policy, context window,
    /// hooks, summarizer…) on a builder that already has the client and the tools. Keep it
    /// deterministic, like everything a replay runs again.
    ///
    /// What the builder's settings become in a durable run:
    /// - [`hooks`](AgentBuilder::hooks): `before_model_call` runs in the model call's
    ///   journaled step (its stop is journaled; its changes to the request need not be, the
    ///   response is); `before_tool` is a journaled step of its own per call, run after the
    ///   [`approval`](Self::approval) policy allowed the call. Its
    ///   [`ToolDecision::Pause`](agent_loop::agent::ToolDecision::Pause) waits for a
    ///   human's [`ApprovalDecision`] durably, as the policy's [`ApprovalRequest::AskHuman`]
    ///   does.
    /// - the [`summarizer`](AgentBuilder::summarizer) (by default the agent's own model):
    ///   compaction's summary call is a journaled step.
    /// - [`early_read_only_tools`](agent_loop::agent::RunPolicy::early_read_only_tools) (on by default):
    ///   read-only calls the policy allows start while the response streams, inside the model
    ///   call's step, and their results are journaled with it. Not with hooks (each call's
    ///   `before_tool` step comes first then).
    /// - [`require_approval`](agent_loop::agent::RunPolicy::require_approval) and
    ///   [`DeferredTool`](agent_loop::tool::DeferredTool)s pause an in-process run for
    ///   [`Agent::resume`]; a durable run does not pause (it already outlives its process):
    ///   use the policy's [`ApprovalRequest::AskHuman`]. A run that pauses anyway ends, its
    ///   calls answered as interrupted.
    pub fn configure(
        mut self,
        configure: impl Fn(AgentBuilder) -> AgentBuilder + Send + Sync + 'static,
    ) -> Self {
        self.configure = Arc::new(configure);
        self
    }

    /// Which tool calls need a human's approval (all are allowed by default).
    pub fn approval(mut self, policy: impl ApprovalPolicy) -> Self {
        self.approval = Arc::new(policy);
        self
    }

    /// The largest conversation, serialized, the session saves (default 16 MiB, under
    /// Restate's message limit). A run whose conversation grows past it ends with an error
    /// saying so; configure a context window so that the machine compacts long before.
    pub fn max_state_bytes(mut self, bytes: usize) -> Self {
        self.max_state_bytes = bytes;
        self
    }

    /// Adds `agent` as a sub-agent the model calls by `name` with `{"task": "…"}`, as
    /// [`Agent::as_tool`] does in-process: each call runs it on a fresh conversation and
    /// answers with its final text (a run that ends without one is an error result saying
    /// why). Its run is a durable call: the `AgentSession` object's `subAgent` handler on the
    /// child session `{session}/{call id}`, so its model calls and tools are journaled steps
    /// of their own (a crash inside it resumes inside it), its approvals wait in the child
    /// session, its tokens add to the caller's report, and the caller's progress log names
    /// the child session ([`ProgressEvent::SubAgent`](crate::ProgressEvent::SubAgent)). Sub-agents may have sub-agents.
    ///
    /// Fails when `name` is not a valid tool name or the agent has a tool of that name.
    pub fn sub_agent(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        agent: DurableAgent,
    ) -> Result<Self, agent_loop::Error> {
        let name = name.into();
        let tool = FnTool::new(
            name.clone(),
            description.into(),
            |_task: SubAgentTask, _ctx| async move {
                Err::<String, _>(ToolError::new(
                    "a durable sub-agent runs as a call of its own session, not as a tool",
                ))
            },
        );
        self.tools = self.tools.with(tool)?;
        self.sub_agents.push((name, Arc::new(agent)));
        Ok(self)
    }

    /// Whether the model calls a sub-agent by `name`.
    pub(crate) fn has_sub_agent(&self, name: &str) -> bool {
        self.sub_agents.iter().any(|(n, _)| n == name)
    }

    /// The agent at `path` (sub-agent names from this one down): this one when empty.
    pub(crate) fn find(&self, path: &[String]) -> Option<&DurableAgent> {
        let Some((first, rest)) = path.split_first() else {
            return Some(self);
        };
        self.sub_agents
            .iter()
            .find(|(name, _)| name == first)
            .and_then(|(_, agent)| agent.find(rest))
    }

    /// How long Restate keeps the journal of a finished run (the server's default when not
    /// set). A kept journal can be read back with the admin API's `sys_journal` table, and
    /// turned into a test (see the replay module). Needs restate-server 1.4 or later.
    pub fn journal_retention(mut self, retention: std::time::Duration) -> Self {
        self.journal_retention = Some(retention);
        self
    }

    /// The run's machine, hooks and summarizer, on the stored conversation; `saved`: whether
    /// the state holds it as it is restored (then only what changes is saved).
    pub(crate) fn machine(
        &self,
        stored: Option<Conversation>,
        saved: bool,
    ) -> Result<MachineParts, TerminalError> {
        let new_builder = || Agent::builder(self.client.clone()).tools(self.tools.clone());
        let mut builder = (self.configure)(new_builder());
        let mut repaired = 0;
        let stored_system = stored.as_ref().and_then(|c| c.system.clone());
        if let Some(conversation) = stored {
            // The stored conversation goes into the context the configuration gives (its
            // window, its counter), not a default one: an agent built once as configured
            // lends its context.
            let mut context = (self.configure)(new_builder())
                .build()
                .map(|agent| agent.context())
                .unwrap_or_else(|_| {
                    ContextManager::new(ContextConfig::for_model(self.client.model()))
                });
            repaired = context
                .restore(conversation)
                .map_err(|e| TerminalError::new(format!("the saved conversation: {e}")))?;
            builder = builder.context(context);
        }
        let mut parts = builder
            .build_machine_parts()
            .map_err(|e| TerminalError::new(format!("building the agent: {e}")))?;
        // The state holds this conversation as it is, unless the restore repaired it or the
        // configuration changed its system prompt: then it is saved whole at the first turn.
        if saved && repaired == 0 && parts.machine.context().system() == stored_system.as_deref() {
            parts.machine.mark_saved();
        }
        let machine = &parts.machine;
        if !machine.config().handoffs.is_empty() {
            return Err(TerminalError::new(
                "durable runs do not support handoffs yet: configure the agent without \
                 AgentBuilder::handoff",
            ));
        }
        if !machine.config().fallbacks.is_empty() {
            return Err(TerminalError::new(
                "durable runs do not support fallback models yet: configure the agent without \
                 AgentBuilder::fallback",
            ));
        }
        Ok(parts)
    }
}
