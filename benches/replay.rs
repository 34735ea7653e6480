//! `ReplayClient`: a client that replays prebuilt responses and keeps nothing of the
//! requests, shared by the `agent` bench and the `per_turn` example (`#[path]` modules).

use std::collections::VecDeque;
use std::sync::Mutex;

use agent_loop::provider::{LlmStream, ModelRequest};
use agent_loop::{LlmClient, LlmEvent, StopReason, Usage};

/// A client that replays prebuilt event lists, one per request, and records nothing: the
/// lower bound of what a client costs the loop.
#[derive(Debug)]
pub(crate) struct ReplayClient {
    turns: Mutex<VecDeque<Vec<LlmEvent>>>,
}

impl ReplayClient {
    pub(crate) fn new(turns: usize) -> Self {
        let mut script = VecDeque::with_capacity(turns);
        for i in 1..=turns {
            let mut events = vec![LlmEvent::MessageStart {
                id: format!("msg_{i}"),
                model: "replay".into(),
            }];
            let stop_reason = if i < turns {
                events.push(LlmEvent::ToolCallStart {
                    index: 0,
                    id: format!("call_{i:05}"),
                    name: "step".into(),
                });
                events.push(LlmEvent::ToolCallDelta {
                    index: 0,
                    partial_json: format!("{{\"n\":{i}}}"),
                });
                StopReason::ToolUse
            } else {
                events.push(LlmEvent::TextDelta {
                    index: 0,
                    text: "All steps are done.".into(),
                });
                StopReason::EndTurn
            };
            events.push(LlmEvent::BlockStop { index: 0 });
            events.push(LlmEvent::Usage(Usage {
                input_tokens: 400 + 30 * i as u64,
                output_tokens: 20,
                ..Usage::default()
            }));
            events.push(LlmEvent::MessageStop { stop_reason });
            script.push_back(events);
        }
        ReplayClient {
            turns: Mutex::new(script),
        }
    }
}

impl LlmClient for ReplayClient {
    fn stream<'a>(&'a self, _request: &'a ModelRequest) -> LlmStream<'a> {
        let events = self
            .turns
            .lock()
            .map(|mut t| t.pop_front().unwrap_or_default())
            .unwrap_or_default();
        Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
    }
}
