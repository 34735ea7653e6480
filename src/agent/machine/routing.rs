//! Which agent and which model have the run: the handoffs taken, the fallbacks moved
//! through, and what the agent the run started with gets back when it ends.

use serde::{Deserialize, Serialize};

use crate::error::LlmError;
use crate::message::ToolSpec;

use super::config::{HandoffTarget, MachineConfig};
use crate::agent::fallback::FallbackTarget;

/// Where the run is among its agents' handoffs and fallbacks. A paused run keeps the route
/// (serde: `route`, absent when empty); the rest follows from the agents' configs when it
/// resumes ([`resumed`](Self::resumed)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Routing {
    /// The handoffs taken so far, each the index of a handoff of the agent before it: where
    /// the agent in charge is among the handoffs (empty: the agent the run started with).
    /// Only grows during a run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) route: Vec<usize>,
    /// Whether the agent in charge stays in charge after the run (its handoff was kept).
    #[serde(skip)]
    pub(super) keep: bool,
    /// How many of the agent in charge's fallbacks the run has moved through (the next
    /// one's index); back to 0 at each handoff (the new agent has fallbacks of its own).
    #[serde(skip)]
    pub(super) fallback: usize,
    /// The handoff tools of agents handed from: kept defined (never callable) when the agent
    /// in charge has no tools, since the history refers to them.
    #[serde(skip)]
    pub(super) retired: Vec<ToolSpec>,
    /// The system prompt of the agent the run started with, once a handoff replaced it: the
    /// conversation gets it back when the run ends (the next run starts with that agent).
    /// Set at the first handoff (or a start in charge), taken at the end.
    #[serde(skip)]
    pub(super) root_system: Option<Option<String>>,
}

impl Routing {
    /// The route to the agent in charge, if its handoff was kept (empty otherwise): where
    /// the agent's next run starts.
    pub(super) fn kept(&self) -> &[usize] {
        if self.keep {
            &self.route
        } else {
            &[]
        }
    }

    /// What a paused run keeps: the route.
    pub(super) fn paused(&self) -> Routing {
        Routing {
            route: self.route.clone(),
            ..Routing::default()
        }
    }

    /// The routing of a paused run on `route`, followed from the agent with `config`: the
    /// config of the agent in charge, and the routing (its handoff kept or not, the handoff
    /// tools retired on the way, the first agent's system prompt `system` to give back).
    /// `None` for a route `config` cannot follow.
    pub(super) fn resumed(
        route: &[usize],
        mut config: MachineConfig,
        system: Option<&str>,
    ) -> Option<(MachineConfig, Routing)> {
        let mut routing = Routing::default();
        for &index in route {
            let target = config.handoffs.get(index).cloned()?;
            routing.retire(&config.handoffs);
            routing.keep = target.keep;
            config = target.config;
        }
        if !route.is_empty() {
            routing.keep_root_system(system);
        }
        routing.route = route.to_vec();
        Some((config, routing))
    }

    /// Notes the system prompt of the agent the run started with, before a handoff replaces
    /// it (the first one only: later ones replace a handed-to agent's).
    pub(super) fn keep_root_system(&mut self, system: Option<&str>) {
        if self.root_system.is_none() {
            self.root_system = Some(system.map(str::to_owned));
        }
    }

    /// Notes a handoff from an agent with `handoffs` to `target`, its `index`-th: the
    /// agent's handoff tools retire, and the run starts over `target`'s fallbacks.
    pub(super) fn hand_off(&mut self, handoffs: &[HandoffTarget], index: usize, keep: bool) {
        self.retire(handoffs);
        self.route.push(index);
        self.keep = keep;
        self.fallback = 0;
    }

    /// The handoff tools of an agent handed from stay defined.
    pub(super) fn retire(&mut self, handoffs: &[HandoffTarget]) {
        self.retired.extend(handoffs.iter().map(|h| h.tool.clone()));
    }

    /// The next of `fallbacks` to move to, if it is for `error` (at once, or once
    /// `retries_spent`).
    pub(super) fn takes_fallback(
        &self,
        fallbacks: &[FallbackTarget],
        error: &LlmError,
        retries_spent: bool,
    ) -> bool {
        fallbacks
            .get(self.fallback)
            .is_some_and(|next| next.takes(error, retries_spent))
    }

    /// Moves to the next of `fallbacks`: its index and the fallback, or `None` when none is
    /// left.
    pub(super) fn next_fallback<'a>(
        &mut self,
        fallbacks: &'a [FallbackTarget],
    ) -> Option<(usize, &'a FallbackTarget)> {
        let index = self.fallback;
        let target = fallbacks.get(index)?;
        self.fallback += 1;
        Some((index, target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_kept_only_when_its_handoff_was() {
        let mut routing = Routing::default();
        assert!(routing.kept().is_empty());
        routing.fallback = 2;
        routing.hand_off(&[], 1, false);
        assert_eq!(routing.route, [1]);
        assert_eq!(routing.fallback, 0, "a new agent starts over its fallbacks");
        assert!(routing.kept().is_empty());
        routing.hand_off(&[], 0, true);
        assert_eq!(routing.kept(), [1, 0]);
    }

    #[test]
    fn the_first_system_prompt_is_the_one_given_back() {
        let mut routing = Routing::default();
        routing.keep_root_system(Some("root"));
        routing.keep_root_system(Some("second"));
        assert_eq!(routing.root_system, Some(Some("root".to_owned())));
    }

    #[test]
    fn a_paused_route_is_followed_again_or_refused() {
        let mut routing = Routing::default();
        routing.hand_off(&[], 0, true);
        let json = serde_json::to_value(routing.paused()).unwrap();
        assert_eq!(json, serde_json::json!({"route": [0]}));
        let back: Routing = serde_json::from_value(json).unwrap();
        assert!(
            Routing::resumed(&back.route, MachineConfig::default(), None).is_none(),
            "an agent with no handoffs cannot follow it"
        );
        let (_, none) = Routing::resumed(&[], MachineConfig::default(), Some("s")).unwrap();
        assert_eq!(none, Routing::default());
        let empty: Routing = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(empty.route.is_empty());
    }

    #[test]
    fn no_fallback_is_taken_when_none_is_left() {
        let mut routing = Routing::default();
        assert!(routing.next_fallback(&[]).is_none());
        assert_eq!(routing.fallback, 0);
        let error = LlmError::Incomplete {
            detail: "cut".into(),
        };
        assert!(!routing.takes_fallback(&[], &error, true));
    }
}
