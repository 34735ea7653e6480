//! Where a sub-agent's run sits below the run that reports it ([`AgentPath`], a list of
//! [`PathStep`]s) and what it used ([`SubAgentUsage`]): plain data, kept in events, outcomes
//! and paused runs.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::message::Usage;
use crate::pricing::Cost;

/// One step down to a sub-agent: the agent, and the id of the tool call (of the run one
/// level up) that runs it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PathStep {
    /// The sub-agent's name: its tool's name ([`Agent::as_tool`](crate::Agent::as_tool)).
    pub agent: String,
    /// The id of the call that runs it.
    pub call_id: String,
}

impl PathStep {
    /// A step to `agent`, run by the call `call_id`.
    pub fn new(agent: impl Into<String>, call_id: impl Into<String>) -> Self {
        PathStep {
            agent: agent.into(),
            call_id: call_id.into(),
        }
    }
}

/// Where a sub-agent's event comes from: the steps from the run that reports it down to the
/// run the event belongs to, outermost first. Displayed as `agent#call/agent#call`.
///
/// ```
/// use agent_loop::agent::{AgentPath, PathStep};
///
/// let path = AgentPath::from(vec![PathStep::new("researcher", "call_1"), PathStep::new("critic", "c7")]);
/// assert_eq!(path.depth(), 2);
/// assert_eq!(path.to_string(), "researcher#call_1/critic#c7");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentPath(Vec<PathStep>);

impl AgentPath {
    /// The steps, outermost first.
    pub fn steps(&self) -> &[PathStep] {
        &self.0
    }

    /// How many levels down the run is (1: a sub-agent of the run reporting it).
    pub fn depth(&self) -> usize {
        self.0.len()
    }

    /// The first step: the call of the reporting run that the event comes through.
    pub fn first(&self) -> Option<&PathStep> {
        self.0.first()
    }

    /// The path of the run one level up (empty for a depth-1 path).
    pub fn parent(&self) -> AgentPath {
        AgentPath(self.0[..self.0.len().saturating_sub(1)].to_vec())
    }

    /// This path with `inner` below it.
    pub fn join(&self, inner: &AgentPath) -> AgentPath {
        AgentPath(self.0.iter().chain(&inner.0).cloned().collect())
    }
}

impl From<Vec<PathStep>> for AgentPath {
    fn from(steps: Vec<PathStep>) -> Self {
        AgentPath(steps)
    }
}

impl fmt::Display for AgentPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{}#{}", step.agent, step.call_id)?;
        }
        Ok(())
    }
}

/// What one sub-agent run used: an entry of [`RunOutcome::sub_agents`](crate::RunOutcome::sub_agents).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubAgentUsage {
    /// Which run: the path from the run whose outcome this is.
    pub path: AgentPath,
    /// Its model turns.
    pub turns: u32,
    /// Everything it used, its own sub-agents' included (its outcome's `usage`).
    pub usage: Usage,
    /// Of `usage`, what failed attempts used.
    pub failed_usage: Usage,
    /// What it cost, its own sub-agents' included (its outcome's `cost`).
    #[serde(default)]
    pub cost: Cost,
    /// Of `cost`, what failed attempts cost.
    #[serde(default)]
    pub failed_cost: Cost,
}
