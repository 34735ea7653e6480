//! The loop's decisions, without I/O: what a model response means for the run, and when the
//! run must stop. The machine (`mod.rs`) asks; these functions answer.

use crate::message::StopReason;
use crate::wire::ModelResponse;

use crate::agent::events::Termination;

/// What the loop does after a response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Next {
    /// Run the response's tool calls and send the results.
    RunTools,
    /// The response was cut off by `max_tokens`: answer any cut-off calls and ask the model
    /// to go on.
    Continue,
    /// `pause_turn`: send the conversation back as it is so the server-side turn goes on.
    Resend,
    /// The run is over.
    Stop(Termination),
}

/// Decides what a complete response means.
///
/// Tools never run from a turn that ended in `max_tokens`, a refusal or a content filter.
pub(crate) fn after_response(response: &ModelResponse, continuations_left: bool) -> Next {
    let has_calls = response.message.tool_uses().next().is_some();
    match response.stop_reason {
        StopReason::Refusal | StopReason::ContentFilter => Next::Stop(Termination::Refused),
        StopReason::MaxTokens | StopReason::ModelContextWindowExceeded => {
            if continuations_left {
                Next::Continue
            } else {
                Next::Stop(Termination::MaxTokens)
            }
        }
        StopReason::PauseTurn => Next::Resend,
        _ if has_calls => Next::RunTools,
        _ => Next::Stop(Termination::Completed),
    }
}

/// Shortens a tool result for an event, on a character boundary, saying how much was cut.
pub(crate) fn display_content(content: &str, limit: usize) -> String {
    if content.len() <= limit {
        return content.to_owned();
    }
    let mut end = limit;
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &content[..end], content.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::machine::counters::RepeatTracker;
    use crate::message::{ContentBlock, Message, Role};
    use crate::tool::ToolCall;
    use serde_json::json;

    fn response(stop: StopReason, blocks: Vec<ContentBlock>) -> ModelResponse {
        let mut assembler = crate::wire::StreamAssembler::new();
        assembler
            .push(&crate::wire::LlmEvent::MessageStop { stop_reason: stop })
            .unwrap();
        let mut r = assembler.finish().unwrap();
        r.message = Message {
            role: Role::Assistant,
            content: blocks,
        };
        r
    }

    fn call() -> ContentBlock {
        ContentBlock::ToolUse {
            id: "1".into(),
            name: "t".into(),
            input: json!({}),
        }
    }

    #[test]
    fn tools_run_only_from_a_normal_stop() {
        assert_eq!(
            after_response(&response(StopReason::ToolUse, vec![call()]), true),
            Next::RunTools
        );
        assert_eq!(
            after_response(&response(StopReason::MaxTokens, vec![call()]), false),
            Next::Stop(Termination::MaxTokens)
        );
        assert_eq!(
            after_response(&response(StopReason::MaxTokens, vec![call()]), true),
            Next::Continue
        );
        assert_eq!(
            after_response(&response(StopReason::Refusal, vec![call()]), true),
            Next::Stop(Termination::Refused)
        );
        assert_eq!(
            after_response(
                &response(StopReason::EndTurn, vec![ContentBlock::text("hi")]),
                true
            ),
            Next::Stop(Termination::Completed)
        );
        assert_eq!(
            after_response(&response(StopReason::PauseTurn, vec![]), true),
            Next::Resend
        );
    }

    #[test]
    fn repeats_count_only_identical_consecutive_turns() {
        let mut t = RepeatTracker::default();
        let a = [ToolCall::new("1", "t", json!({"x": 1, "y": 2}))];
        let a2 = [ToolCall::new("2", "t", json!({"y": 2, "x": 1}))];
        let b = [ToolCall::new("3", "t", json!({"x": 2}))];
        assert_eq!(t.observe(a.iter()), 1);
        assert_eq!(t.observe(a2.iter()), 2, "ids differ, calls are the same");
        assert_eq!(t.observe(b.iter()), 1);
        assert_eq!(t.observe(b.iter()), 2);
        assert_eq!(t.observe([].iter()), 0, "no calls to count");
        assert_eq!(
            t.observe(b.iter()),
            1,
            "a turn without calls breaks the run"
        );
    }

    #[test]
    fn display_content_cuts_on_char_boundaries() {
        assert_eq!(display_content("héllo", 2), "h… [5 more bytes]");
        assert_eq!(display_content("abc", 3), "abc");
    }
}
