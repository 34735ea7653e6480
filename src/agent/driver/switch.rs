//! The driver's parts that change while a run goes on: its tools, when a tool source
//! changed between turns, and its client, tools and hooks, when the conversation is handed to
//! another agent; its client, when the run moves to a fallback model. The machine decides
//! when ([`Action::Handoff`](crate::agent::machine::Action::Handoff),
//! [`Action::Fallback`](crate::agent::machine::Action::Fallback), [`Input::ToolsChanged`]
//! after a refresh); these carry it out.

use super::driver::Driver;
use crate::agent::agent::Parts;
use crate::agent::machine::{AgentMachine, Input};

impl Driver {
    /// Between turns: when a tool source changed, refreshes it and gives the machine (and
    /// the tool runner) the rebuilt registry. One atomic load per source when none changed;
    /// nothing once the run is over or stopping. A cancel during the refresh cancels the run at once.
    pub(crate) async fn refresh_tools(&mut self) {
        let over = self.machine.as_ref().is_none_or(AgentMachine::is_finished);
        // A run told to stop after this turn needs no new tools.
        if over || self.told_stop || !self.parts.sources.changed() {
            return;
        }
        let refreshed = tokio::select! {
            _ = self.cancel.cancelled(), if !self.told_cancel => {
                self.told_cancel = true;
                return self.tell(Input::Cancel);
            }
            refreshed = self.parts.sources.refresh() => refreshed,
        };
        if let Some(tools) = refreshed {
            tracing::debug!(tools = tools.len(), "the agent's tools changed");
            self.tell(Input::ToolsChanged(tools.catalog()));
            self.tools = tools;
        }
    }

    /// From now on, the model calls and tools are those of the agent at `route` (see
    /// [`Action::Handoff`](crate::agent::machine::Action::Handoff)); an unknown route changes nothing.
    pub(crate) fn hand_off(&mut self, route: &[usize]) {
        if let Some(member) = Parts::find(&self.parts.team, route) {
            self.tools = member.sources.current();
            self.parts = member.clone();
        }
    }

    /// From now on, the model calls go to the fallback at `index` of the agent in charge
    /// (see [`Action::Fallback`](crate::agent::machine::Action::Fallback)); an unknown one changes
    /// nothing.
    pub(crate) fn fall_back(&mut self, index: usize) {
        if let Some(client) = self.parts.fallbacks.get(index) {
            self.parts.client = client.clone();
        }
    }
}
