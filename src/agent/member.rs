//! [`Member`]: an agent a conversation can be handed to, as the driver needs it (its client,
//! tools, hooks and summarizer, and the agents it can hand to in turn).

use std::sync::Arc;

use crate::context::Summarizer;
use crate::provider::LlmClient;
use crate::tool::ToolSources;

use super::hooks::AgentHooks;

/// An agent's parts that a run switches to when the conversation is handed to it.
pub(crate) struct Member {
    pub(crate) client: Arc<dyn LlmClient>,
    pub(crate) sources: ToolSources,
    pub(crate) hooks: Arc<dyn AgentHooks>,
    pub(crate) summarizer: Option<Arc<dyn Summarizer>>,
    /// Its own handoffs, in the order of its config's.
    pub(crate) team: Arc<Vec<Member>>,
    /// Its fallbacks' clients, in the order of its config's.
    pub(crate) fallbacks: Arc<Vec<Arc<dyn LlmClient>>>,
}

impl Member {
    /// The member at `route` (indexes into each level's handoffs) below `team`.
    pub(crate) fn find<'a>(team: &'a Arc<Vec<Member>>, route: &[usize]) -> Option<&'a Member> {
        let (&first, rest) = route.split_first()?;
        let member = team.get(first)?;
        if rest.is_empty() {
            Some(member)
        } else {
            Member::find(&member.team, rest)
        }
    }
}
