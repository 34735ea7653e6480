//! The run's answer text: what the outcome's `final_text` will be, and what the attempt in
//! flight has streamed so far.

use serde::{Deserialize, Serialize};

/// The answer text of a run. A paused run keeps the answer so far (serde: `final_text`);
/// nothing streams while a run is paused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct AnswerText {
    /// The answer so far: the last response's text that had any (or that had no calls),
    /// with the continuations of a response cut off by `max_tokens` appended to it. Taken
    /// by the outcome when the run ends.
    pub(super) final_text: String,
    /// The text streamed by the attempt in flight: empty between attempts (cleared when a
    /// call is sent, when its response is taken and when it fails), kept, marked, when a
    /// cancel cuts it short.
    #[serde(skip)]
    pub(super) partial: String,
    /// The next response continues the last one (which `max_tokens` cut off): its text is
    /// appended to `final_text`, not put in its place. Only for that next response.
    #[serde(skip)]
    pub(super) continuing: bool,
}

impl AnswerText {
    /// Takes a whole response's text: appended after a cut-off one, else it replaces the
    /// answer, unless it is empty beside calls (a text-less tool turn keeps the earlier
    /// answer).
    pub(super) fn response(&mut self, text: String, has_calls: bool) {
        if self.continuing {
            self.final_text.push_str(&text);
        } else if !text.is_empty() || !has_calls {
            self.final_text = text;
        }
        self.continuing = false;
        self.partial.clear();
    }

    /// What a paused run keeps: the answer so far.
    pub(super) fn paused(&self) -> AnswerText {
        AnswerText {
            final_text: self.final_text.clone(),
            ..AnswerText::default()
        }
    }

    /// Takes the text streamed by the attempt in flight, leaving none.
    pub(super) fn take_partial(&mut self) -> String {
        std::mem::take(&mut self.partial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_appends_and_a_tool_turn_without_text_keeps_the_answer() {
        let mut text = AnswerText::default();
        text.partial.push_str("Hel");
        text.response("Hello".into(), false);
        assert_eq!(text.final_text, "Hello");
        assert!(text.partial.is_empty());
        text.response(String::new(), true);
        assert_eq!(
            text.final_text, "Hello",
            "a call without text keeps the answer"
        );
        text.continuing = true;
        text.response(", world".into(), false);
        assert_eq!(text.final_text, "Hello, world");
        assert!(!text.continuing, "only the next response continues");
        text.response("Bye".into(), true);
        assert_eq!(text.final_text, "Bye");
        text.partial.push_str("cut");
        assert_eq!(text.take_partial(), "cut");
        assert!(text.partial.is_empty());
    }
}
