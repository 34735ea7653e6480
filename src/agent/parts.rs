//! The driver's parts that change while a run goes on: its tools, when a tool source
//! changed between turns, and its client, tools and hooks, when the conversation is handed to
//! another agent; its client, when the run moves to a fallback model.

use super::driver::Driver;
use super::machine::{AgentMachine, Input};
use super::member::Member;

impl Driver {
    /// Between turns: when a tool source changed, refreshes it and gives the machine (and
    /// the tool runner) the rebuilt registry. One atomic load per source when none changed;
    /// nothing once the run is over or stopping. A cancel during the refresh cancels the run at once.
    pub(super) async fn refresh_tools(&mut self) {
        let over = self.machine.as_ref().is_none_or(AgentMachine::is_finished);
        // A run told to stop after this turn needs no new tools.
        if over || self.told_stop || !self.sources.changed() {
            return;
        }
        let refreshed = tokio::select! {
            _ = self.cancel.cancelled(), if !self.told_cancel => {
                self.told_cancel = true;
                return self.tell(Input::Cancel);
            }
            refreshed = self.sources.refresh() => refreshed,
        };
        if let Some(tools) = refreshed {
            tracing::debug!(tools = tools.len(), "the agent's tools changed");
            self.tell(Input::ToolsChanged(tools.catalog()));
            self.tools = tools;
        }
    }

    /// From now on, the model calls and tools are those of the agent at `route` (see
    /// [`Action::Handoff`](super::machine::Action::Handoff)); an unknown route changes nothing.
    pub(super) fn hand_off(&mut self, route: &[usize]) {
        if let Some(member) = Member::find(&self.team, route) {
            self.client = member.client.clone();
            self.sources = member.sources.clone();
            self.tools = member.sources.current();
            self.hooks = member.hooks.clone();
            self.summarizer = member.summarizer.clone();
            self.fallbacks = member.fallbacks.clone();
        }
    }

    /// From now on, the model calls go to the fallback at `index` of the agent in charge
    /// (see [`Action::Fallback`](super::machine::Action::Fallback)); an unknown one changes
    /// nothing.
    pub(super) fn fall_back(&mut self, index: usize) {
        if let Some(client) = self.fallbacks.get(index) {
            self.client = client.clone();
        }
    }
}
