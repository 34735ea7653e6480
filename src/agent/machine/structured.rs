//! The run's structured answer: the answer tool asked for, its wrong answers so far, whether
//! the next call is forced to it, and the answer accepted.

use crate::error::ResumeError;
use crate::wire::ModelResponse;

use super::output::StructuredOutput;
use super::pause::OutputState;

/// The structured answer of a run ([`RunOptions::output`](crate::agent::RunOptions::output)).
#[derive(Debug, Default)]
pub(super) struct Answer {
    /// The typed final answer asked for; `None`: the run answers in text, and the other
    /// fields stay at their defaults.
    pub(super) asked: Option<StructuredOutput>,
    /// Wrong (or missing) final answers so far; past the tool's `max_retries` the run ends
    /// with `InvalidOutput`.
    pub(super) failures: u32,
    /// The next call must be to the answer tool (after a wrong or missing answer, until a
    /// valid one).
    pub(super) force: bool,
    /// The accepted final answer: set once, by a valid call of the answer tool (which ends
    /// the run with its batch); taken by the outcome.
    pub(super) value: Option<serde_json::Value>,
}

impl Answer {
    /// The answer tool's name, when a structured answer is asked for.
    pub(super) fn tool_name(&self) -> Option<&str> {
        self.asked.as_ref().map(|o| o.spec.name.as_str())
    }

    /// Whether `response` calls the answer tool.
    pub(super) fn called_in(&self, response: &ModelResponse) -> bool {
        self.tool_name().is_some_and(|tool| {
            response
                .message
                .tool_uses()
                .any(|(_, name, _)| name == tool)
        })
    }

    /// Takes a valid answer.
    pub(super) fn accept(&mut self, value: serde_json::Value) {
        self.value = Some(value);
        self.force = false;
    }

    /// Counts a wrong or missing answer: `true` when the retries are spent (the run ends),
    /// else the next call is forced to the answer tool.
    pub(super) fn reject(&mut self) -> bool {
        self.failures += 1;
        let spent = self
            .asked
            .as_ref()
            .is_none_or(|o| self.failures > o.max_retries);
        if !spent {
            self.force = true;
        }
        spent
    }

    /// What a paused run keeps of it.
    pub(super) fn paused(&self) -> Option<OutputState> {
        self.asked.as_ref().map(|output| OutputState {
            name: output.spec.name.clone(),
            description: output.spec.description.clone(),
            schema: output.spec.input_schema.clone(),
            max_retries: output.max_retries,
            failures: self.failures,
            force: self.force,
        })
    }

    /// The answer of a resumed run: the paused run's, with the typed answer `given` back
    /// (the paused run keeps only its schema), or rebuilt from its schema. Refused when
    /// `given` names another tool, or is given for a run that asked for none.
    pub(super) fn resumed(
        saved: Option<&OutputState>,
        given: Option<StructuredOutput>,
    ) -> Result<Answer, ResumeError> {
        let asked = match (saved, given) {
            (None, None) => None,
            (Some(saved), Some(given)) if given.tool_name() == saved.name => Some(given),
            (Some(saved), None) => Some(
                StructuredOutput::from_schema(saved.schema.clone())
                    .and_then(|o| o.name(saved.name.clone()))
                    .map(|o| {
                        o.description(saved.description.clone())
                            .max_retries(saved.max_retries)
                    })
                    .map_err(|e| {
                        ResumeError::Output(format!("the paused run's answer tool: {e}"))
                    })?,
            ),
            (Some(saved), Some(given)) => {
                return Err(ResumeError::Output(format!(
                    "the paused run asked for a structured answer from the tool {:?}, not {:?}",
                    saved.name,
                    given.tool_name()
                )))
            }
            (None, Some(_)) => {
                return Err(ResumeError::Output(
                    "the paused run asked for no structured answer: resume it without one"
                        .to_owned(),
                ))
            }
        };
        Ok(Answer {
            asked,
            failures: saved.map_or(0, |s| s.failures),
            force: saved.is_some_and(|s| s.force),
            value: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asked(retries: u32) -> Answer {
        let output = StructuredOutput::from_schema(json!({"type": "object"}))
            .unwrap()
            .max_retries(retries);
        Answer {
            asked: Some(output),
            ..Answer::default()
        }
    }

    #[test]
    fn wrong_answers_force_the_tool_until_the_retries_are_spent() {
        let mut answer = asked(1);
        assert!(!answer.reject());
        assert!(answer.force);
        assert!(answer.reject(), "the second wrong answer is one too many");
        answer.accept(json!({"a": 1}));
        assert!(!answer.force);
        assert_eq!(answer.value, Some(json!({"a": 1})));
    }

    #[test]
    fn a_paused_answer_comes_back_with_its_count_and_its_tool() {
        let mut answer = asked(3);
        answer.reject();
        let saved = answer.paused().expect("asked");
        let back = Answer::resumed(Some(&saved), None).unwrap();
        assert_eq!(back.failures, 1);
        assert!(back.force);
        assert_eq!(back.tool_name(), answer.tool_name());
        assert!(Answer::resumed(None, None).unwrap().asked.is_none());
        let other = StructuredOutput::from_schema(json!({"type": "object"}))
            .unwrap()
            .name("other")
            .unwrap();
        assert!(Answer::resumed(Some(&saved), Some(other)).is_err());
        assert!(Answer::resumed(None, asked(0).asked).is_err());
        assert!(Answer::default().paused().is_none());
    }
}
