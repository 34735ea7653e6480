//! [`Agent`]: a model client, tools, and the conversation it holds. Building one is
//! `builder.rs`'s, running one `driver/run.rs`'s. And [`Parts`]: what an agent is made of
//! beside its settings, the one type an agent, a handoff target and a run's driver hold.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::context::{ContextConfig, ContextManager, Conversation, Summarizer};
use crate::error::{ConfigError, Error};
use crate::message::Message;
use crate::provider::transport::RateLimiter;
use crate::provider::LlmClient;
use crate::tool::{ToolRegistry, ToolSources};

use super::driver::persist::{self, SessionLink};
use super::handle::{lock, AgentHandle, Shared};
use super::hooks::AgentHooks;
use super::machine::config::MachineConfig;
use super::machine::pause::PausedRun;

/// An LLM agent: a model client, tools, and the conversation it holds.
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::{Agent, AgentEvent};
/// use futures::StreamExt;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
/// let mut agent = Agent::builder(client).system("Be brief.").build()?;
/// let events: Vec<AgentEvent> = agent.run("Hi").collect().await;
/// match events.last() {
///     Some(AgentEvent::Finished(outcome)) => assert_eq!(outcome.final_text, "Hello!"),
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok::<(), agent_loop::Error>(())
/// # }).unwrap();
/// ```
pub struct Agent {
    /// The client, tool sources, hooks, summarizer, handoff targets and fallbacks.
    pub(crate) parts: Parts,
    /// The tools as built.
    pub(crate) tools: ToolRegistry,
    pub(crate) config: MachineConfig,
    pub(crate) handle: AgentHandle,
    /// The session store the conversation is kept in, if any.
    pub(crate) session: Option<SessionLink>,
    /// The conversation, shared with the run in flight (if any) and with the handles.
    pub(crate) shared: Arc<Mutex<Shared>>,
    /// How deep its runs are: 0 for an agent the host runs, more for a sub-agent's.
    pub(crate) depth: u32,
    /// How deep sub-agents below its runs may go.
    pub(crate) max_depth: u32,
    /// Paces its model calls, shared with the other agents of one API key.
    pub(crate) limiter: Option<RateLimiter>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model_name())
            .field("tools", &self.tools)
            .field("messages", &self.messages().len())
            .field("running", &self.is_running())
            .field("name", &self.config.name)
            .field("max_turns", &self.config.policy.max_turns)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// The conversation so far. While a run is in flight: as of its last turn boundary (the
    /// end of a turn's tool results, or the run's start).
    pub fn messages(&self) -> Arc<Vec<Message>> {
        let shared = lock(&self.shared);
        match &shared.context {
            Some(context) => context.shared_messages(),
            None => Arc::new(shared.view.messages.clone()),
        }
    }

    /// A copy of the context manager holding the conversation (its settings, counts and
    /// messages). While a run is in flight the run holds the live one: this is the
    /// conversation as of the run's last turn boundary, counted afresh.
    pub fn context(&self) -> ContextManager {
        let shared = lock(&self.shared);
        match &shared.context {
            Some(context) => context.clone(),
            None => {
                let mut context = ContextManager::new(ContextConfig::default());
                let _ = context.restore(shared.view.clone());
                context
            }
        }
    }

    /// The conversation, for saving (serde); restore it with [`Agent::restore`]. Callable at
    /// any time, also while a run is in flight (from the event loop, or through
    /// [`AgentHandle::snapshot`] from another task): it then gives the conversation as of the
    /// run's last turn boundary, which is always a valid history to resume from.
    pub fn snapshot(&self) -> Conversation {
        lock(&self.shared).conversation()
    }

    /// Replaces the conversation with a saved one; unanswered tool calls of an interrupted
    /// run are answered as interrupted so the next request is valid.
    ///
    /// The system prompt: the saved conversation's, when it has one; otherwise the agent
    /// keeps its own (the builder's [`system`](crate::AgentBuilder::system)). Fails while a run is
    /// in flight.
    pub fn restore(&mut self, mut conversation: Conversation) -> Result<(), Error> {
        let mut shared = lock(&self.shared);
        let context = shared.context.as_mut().ok_or(Error::Busy)?;
        if conversation.system.is_none() {
            conversation.system = context.system().map(str::to_owned);
        }
        context.restore(conversation).map(|_| ())
    }

    /// Forgets the conversation (the system prompt stays). Fails while a run is in flight.
    pub fn clear(&mut self) -> Result<(), Error> {
        let mut shared = lock(&self.shared);
        shared.context.as_mut().ok_or(Error::Busy)?.clear();
        Ok(())
    }

    /// The paused run the agent's last run ended in, if it paused and was not resumed since
    /// (or the pause its session waits in, once loaded): what
    /// [`Termination::Paused`](crate::Termination::Paused) carried.
    pub fn paused(&self) -> Option<PausedRun> {
        lock(&self.shared).paused.clone()
    }

    /// Whether the agent keeps its conversation in a session store
    /// ([`AgentBuilder::session`](crate::AgentBuilder::session)): then its paused run is in
    /// the store, where [`Agent::load_session`] finds it (from another process too), and not
    /// only in this value's [`Agent::paused`]. A web handler that builds an agent per request
    /// asks this to know where a pause is kept.
    pub fn has_session(&self) -> bool {
        self.session.is_some()
    }

    /// Loads the agent's [session](crate::AgentBuilder::session) from its store, replacing
    /// the conversation the agent holds, and gives the paused run it waits in, if any
    /// (resume it with [`Agent::resume`]). A run loads the session by itself when it was not
    /// loaded; this is for looking first, or for reading it again after another process
    /// wrote to it.
    ///
    /// Fails with [`Error::Session`] when the store does (a corrupt entry, a database
    /// error), with [`ConfigError::Setting`](crate::error::ConfigError::Setting) when the agent has
    /// no session, and with [`Error::Busy`] while a run is in flight; the conversation is
    /// then unchanged.
    pub async fn load_session(&mut self) -> Result<Option<PausedRun>, Error> {
        let link = self.session_link()?;
        let mut context = lock(&self.shared).context.clone().ok_or(Error::Busy)?;
        // Read afresh: another process may have written since.
        let saved_version = lock(&self.shared).session_version.take();
        if let Err(e) = persist::open(&link, &self.shared, &mut context).await {
            lock(&self.shared).session_version = saved_version;
            return Err(e);
        }
        let mut shared = lock(&self.shared);
        shared
            .context
            .as_mut()
            .ok_or(Error::Busy)?
            .clone_from(&context);
        Ok(shared.paused.clone())
    }

    /// The agent's session link, or the error of an agent without one.
    fn session_link(&self) -> Result<SessionLink, Error> {
        self.session.clone().ok_or_else(|| {
            ConfigError::setting(
                "session",
                "the agent has no session: give it one with AgentBuilder::session",
            )
            .into()
        })
    }

    /// Forks the agent's [session](crate::AgentBuilder::session) after its first `at`
    /// messages into the new session `into` of the same store
    /// ([`SessionStore::fork`](crate::session::SessionStore::fork)): a copy that shares
    /// nothing with this one. Build an agent on `into` to go on there; this agent stays on its
    /// own session. What the store holds is forked: the turns saved so far.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_loop::session::MemoryStore;
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent, AgentEvent};
    /// use futures::StreamExt;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let client = ScriptedClient::new([
    ///     ScriptedResponse::text("Red."),
    ///     ScriptedResponse::text("Green."),
    ///     ScriptedResponse::text("Blue."),
    /// ]);
    /// let mut agent = Agent::builder(client.clone()).session(store.clone(), "main").build()?;
    /// let _: Vec<AgentEvent> = agent.run("A colour?").collect().await;
    /// let _: Vec<AgentEvent> = agent.run("Another?").collect().await;
    ///
    /// // Back to after the first answer, on a branch of its own.
    /// agent.fork_session("branch", 2).await?;
    /// let mut branch = Agent::builder(client).session(store, "branch").build()?;
    /// let _: Vec<AgentEvent> = branch.run("A third?").collect().await;
    /// assert_eq!(branch.messages().len(), 4);
    /// assert_eq!(agent.messages().len(), 4);
    /// // And the main session rewinds to its first answer, the rewind kept in its log.
    /// agent.rewind_session(2).await?;
    /// assert_eq!(agent.messages().len(), 2);
    /// # Ok::<(), agent_loop::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// Fails as the store's fork does ([`Error::Session`]: no such point, a cut between a
    /// call and its result, `into` taken), and with
    /// [`ConfigError::Setting`](crate::error::ConfigError::Setting) when the agent has no
    /// session.
    pub async fn fork_session(&self, into: &str, at: u64) -> Result<(), Error> {
        let link = self.session_link()?;
        link.store.fork(&link.id, at, into).await?;
        Ok(())
    }

    /// Rewinds the agent's [session](crate::AgentBuilder::session) to its first `to`
    /// messages ([`SessionStore::rewind`](crate::session::SessionStore::rewind): an entry of
    /// its log, the history before it kept there), then loads it: the agent's conversation
    /// is the rewound one, and the pause the session waited in, if any, is gone (resuming it
    /// is refused). See [`fork_session`](Self::fork_session) for an example.
    ///
    /// Fails with [`Error::Busy`] while a run is in flight, as the store's rewind does
    /// ([`Error::Session`]: no such point, a cut between a call and its result, another
    /// agent's run holding the session), and with
    /// [`ConfigError::Setting`](crate::error::ConfigError::Setting) when the agent has no
    /// session; the conversation is then unchanged.
    pub async fn rewind_session(&mut self, to: u64) -> Result<(), Error> {
        let link = self.session_link()?;
        if self.is_running() {
            return Err(Error::Busy);
        }
        link.store.rewind(&link.id, to).await?;
        self.load_session().await?;
        Ok(())
    }

    /// The name of the agent in charge of the next run: this agent's own name, or, after a
    /// run that handed the conversation over with [`Handoff::keep`](crate::agent::Handoff::keep),
    /// that agent's. (A handoff without `keep` lasts for its run only.)
    pub fn in_charge(&self) -> String {
        let route = lock(&self.shared).route.clone();
        let mut config = &self.config;
        for index in route {
            match config.handoffs.get(index) {
                Some(target) => config = &target.config,
                None => break,
            }
        }
        config.name.clone()
    }

    /// Hands the conversation back to this agent: the next run starts with it in charge,
    /// whatever a [kept](crate::agent::Handoff::keep) handoff left. Refused with [`Error::Busy`]
    /// while a run is in flight.
    pub fn take_back(&mut self) -> Result<(), Error> {
        let mut shared = lock(&self.shared);
        if shared.context.is_none() {
            return Err(Error::Busy);
        }
        shared.route.clear();
        Ok(())
    }

    /// Whether a run is in flight (its stream not yet finished or dropped).
    pub fn is_running(&self) -> bool {
        lock(&self.shared).context.is_none()
    }

    /// The tools, as built. With [tool sources](crate::AgentBuilder::tool_source), a run uses the
    /// newest set, which may differ.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Which tools can go out strict for this agent's client
    /// ([`RequestSettings::strict_tools`](crate::RequestSettings::strict_tools)): each tool of
    /// the newest set (handoffs included), in order, with `Ok(())` or the reason
    /// [`strict_schema`](crate::provider::strict::strict_schema) gives for the client's
    /// dialect; a tool that fails goes out as it is, without strict mode. Empty when the
    /// client's format has no strict tools (Gemini, Bedrock, Ollama, a custom client). Ask
    /// before the first run; the agent also logs each failing tool once, at `warn` level, when
    /// it is built with strict tools on.
    ///
    /// ```
    /// use agent_loop::{Agent, OpenAiClient, ToolError};
    /// use agent_loop::provider::strict::NotStrict;
    /// use agent_loop::tool::FnTool;
    /// use std::collections::HashMap;
    ///
    /// #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
    /// #[schemars(crate = "agent_loop::tool::schemars")]
    /// struct Tag { labels: HashMap<String, String> }
    ///
    /// let tag = FnTool::new("tag", "Labels a thing.", |_: Tag, _ctx| async move {
    ///     Ok::<_, ToolError>("done")
    /// });
    /// let agent = Agent::builder(OpenAiClient::new("sk-…")).tool(tag).build()?;
    /// let report = agent.strict_check();
    /// assert_eq!(report[0].0, "tag");
    /// // An open map cannot be strict: the tool goes out without strict mode.
    /// assert!(matches!(report[0].1, Err(NotStrict::OpenObject { .. })));
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn strict_check(&self) -> Vec<(String, Result<(), crate::provider::strict::NotStrict>)> {
        let Some(dialect) = self.parts.client.strict_dialect() else {
            return Vec::new();
        };
        let tools = self.parts.sources.current();
        tools
            .specs()
            .iter()
            .chain(self.config.handoffs.iter().map(|h| &h.tool))
            .map(|spec| {
                let verdict =
                    crate::provider::strict::strict_schema(&spec.input_schema, dialect).map(|_| ());
                (spec.name.clone(), verdict)
            })
            .collect()
    }

    /// The model knobs every run starts from ([`AgentBuilder::settings`](crate::AgentBuilder::settings)).
    pub fn settings(&self) -> &crate::provider::RequestSettings {
        &self.config.settings
    }

    /// The loop's policy, as built ([`AgentBuilder::policy`](crate::AgentBuilder::policy),
    /// with the client's retry policy where none was given).
    pub fn policy(&self) -> &super::RunPolicy {
        &self.config.policy
    }

    /// A handle to cancel runs and read the conversation from elsewhere.
    pub fn handle(&self) -> AgentHandle {
        self.handle.clone()
    }

    /// The settings of a run's machine: the builder's, with the client's stream limits and
    /// whether a summarizer is there.
    pub(crate) fn machine_config(&self) -> MachineConfig {
        let mut config = self.config.clone();
        config.stream_limits = self.parts.client.stream_limits();
        config.summarizer = self.parts.summarizer.is_some();
        config.client_model = self.parts.client.model().to_owned();
        config
    }

    fn model_name(&self) -> String {
        self.config
            .settings
            .model
            .clone()
            .unwrap_or_else(|| self.parts.client.model().to_owned())
    }
}

/// What an agent is made of beside its settings ([`MachineConfig`]): the one set of parts
/// an [`Agent`] holds, each agent it can hand the conversation to holds (in `team`), and a
/// run's driver holds and switches (to a handoff target's parts, or to a fallback's client).
#[derive(Clone)]
pub(crate) struct Parts {
    pub(crate) client: Arc<dyn LlmClient>,
    /// The builder's own tools and the tool sources, with the newest registry.
    pub(crate) sources: ToolSources,
    pub(crate) hooks: Arc<dyn AgentHooks>,
    pub(crate) summarizer: Option<Arc<dyn Summarizer>>,
    /// The agents the conversation can be handed to, in the order of the config's handoffs.
    pub(crate) team: Arc<Vec<Parts>>,
    /// The fallbacks' clients, in the order of the config's fallbacks.
    pub(crate) fallbacks: Arc<Vec<Arc<dyn LlmClient>>>,
}

impl Parts {
    /// The parts at `route` (indexes into each level's handoffs) below `team`.
    pub(crate) fn find<'a>(team: &'a Arc<Vec<Parts>>, route: &[usize]) -> Option<&'a Parts> {
        let (&first, rest) = route.split_first()?;
        let member = team.get(first)?;
        if rest.is_empty() {
            Some(member)
        } else {
            Parts::find(&member.team, rest)
        }
    }
}
