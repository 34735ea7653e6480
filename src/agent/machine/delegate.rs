//! What a call of an agent used as a tool ([`AgentTool`](crate::agent::AgentTool)) decides: how deep
//! it runs (or that it may not), and what it answers from how the agent's run ended. Pure
//! functions; `../team.rs` runs the agent.

use crate::tool::{ToolError, ToolOutput};

use crate::agent::events::{RunOutcome, Termination};

/// The depth a call of the agent `name` would run at, and the limit below it: its caller's
/// depth plus one (`caller`: its depth and limit; `None` for a run the host started), under
/// the lower of the caller's limit and the agent's own. Past the limit, the error the call
/// is answered with.
pub(crate) fn depth(
    name: &str,
    caller: Option<(u32, u32)>,
    own_limit: u32,
) -> Result<(u32, u32), ToolError> {
    let depth = caller.map_or(0, |(depth, _)| depth) + 1;
    let max_depth = caller.map_or(own_limit, |(_, limit)| limit.min(own_limit));
    if depth > max_depth {
        return Err(ToolError::new(format!(
            "not run: the agent `{name}` would run {depth} levels below the run the host \
             started, past the limit of {max_depth} (RunPolicy::max_depth); do the task \
             without it"
        )));
    }
    Ok((depth, max_depth))
}

/// What a call of the agent `name` answers, from how its run ended: the final text when it
/// completed, else an error saying why there is none.
pub(crate) fn answer(name: &str, outcome: Option<RunOutcome>) -> Result<ToolOutput, ToolError> {
    let Some(outcome) = outcome else {
        return Err(ToolError::new(format!(
            "the agent `{name}` ended without an outcome"
        )));
    };
    match outcome.termination {
        Termination::Completed => Ok(ToolOutput::text(outcome.final_text)),
        Termination::Error(e) => Err(ToolError::new(format!("the agent `{name}` failed: {e}"))),
        Termination::Paused(_) => Err(ToolError::new(format!(
            "the agent `{name}` paused to wait for an approval or a result from outside, \
             which sub-agents do not support; do the task without it"
        ))),
        termination => {
            let mut message =
                format!("the agent `{name}` stopped without an answer: {termination}");
            if !outcome.final_text.is_empty() {
                message.push_str("; its last text: ");
                message.push_str(&outcome.final_text);
            }
            Err(ToolError::new(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_runs_one_level_down_under_the_lowest_limit() {
        // From a run the host started: depth 1, the agent's own limit.
        assert_eq!(depth("w", None, 4).unwrap(), (1, 4));
        assert!(depth("w", None, 0).is_err());
        // Below a caller: its depth plus one, the lower of the two limits.
        assert_eq!(depth("w", Some((1, 4)), 3).unwrap(), (2, 3));
        assert_eq!(depth("w", Some((1, 2)), 9).unwrap(), (2, 2));
        let refused = depth("w", Some((2, 2)), 9).unwrap_err().to_string();
        assert!(
            refused.contains("3 levels") && refused.contains("limit of 2"),
            "{refused}"
        );
    }

    #[test]
    fn a_run_without_an_answer_answers_with_why() {
        let completed = RunOutcome {
            final_text: "42".into(),
            ..RunOutcome::new(Termination::Completed)
        };
        assert_eq!(answer("w", Some(completed)).unwrap().into_text(), "42");
        assert!(answer("w", None)
            .unwrap_err()
            .to_string()
            .contains("without an outcome"));
        let silent = answer("w", Some(RunOutcome::new(Termination::MaxTurns)));
        let silent = silent.unwrap_err().to_string();
        assert!(
            silent.contains("turn limit") && !silent.contains("last text"),
            "{silent}"
        );
        let cancelled = answer("w", Some(RunOutcome::new(Termination::Cancelled)));
        assert!(cancelled.unwrap_err().to_string().contains("cancelled"));
    }
}
