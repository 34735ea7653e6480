//! Strategies for the UI protocols' property tests (tests/agui.rs, tests/ai_sdk.rs).

use std::time::Duration;

use agent_loop::pricing::Cost;
use agent_loop::{AgentEvent, StopReason, Usage};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Any agent event, grammatical or not, from a small alphabet of ids, names and texts (JSON
/// fragments among them): what an encoder must survive in any order.
pub fn any_event() -> impl Strategy<Value = AgentEvent> {
    let id = prop::sample::select(vec!["c0", "c1", "c2"]).prop_map(str::to_owned);
    let text = prop::sample::select(vec!["", "a", "bc", "{\"x\":", "1}"]).prop_map(str::to_owned);
    prop_oneof![
        (1u32..4).prop_map(|turn| AgentEvent::TurnStart { turn }),
        text.clone().prop_map(|text| AgentEvent::TextDelta { text }),
        text.clone()
            .prop_map(|text| AgentEvent::ThinkingDelta { text }),
        id.clone().prop_map(|id| AgentEvent::ToolCallStart {
            id,
            name: "get_weather".into()
        }),
        (id.clone(), text.clone())
            .prop_map(|(id, partial_json)| AgentEvent::ToolInputDelta { id, partial_json }),
        id.clone().prop_map(|id| AgentEvent::ToolCall {
            id,
            name: "get_weather".into(),
            input: json!({"city": "Paris"})
        }),
        (id.clone(), any::<bool>()).prop_map(|(id, is_error)| AgentEvent::ToolResult {
            id,
            name: "get_weather".into(),
            content: "sunny".into(),
            is_error,
            duration: Duration::ZERO,
        }),
        id.prop_map(|id| AgentEvent::ToolProgress {
            id,
            message: "half".into()
        }),
        (1u32..3).prop_map(|attempt| AgentEvent::Retry {
            attempt,
            delay: Duration::ZERO,
            error: "overloaded".into(),
            usage: Usage::default(),
            cost: Cost::default(),
        }),
        Just(AgentEvent::Fallback {
            from: "a".into(),
            to: "b".into(),
            error: "down".into()
        }),
        Just(AgentEvent::Compacted {
            tokens_before: 10,
            tokens_after: 5
        }),
        Just(AgentEvent::Handoff {
            from: "a".into(),
            to: "b".into()
        }),
        prop::sample::select(vec!["", "go on"]).prop_map(|text| AgentEvent::Steered {
            input: agent_loop::UserInput::text(text)
        }),
        (1u32..4).prop_map(|turn| AgentEvent::TurnEnd {
            turn,
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            cost: Cost::default(),
        }),
    ]
}

/// Any JSON of leaves from `words` and objects keyed by `keys` (a protocol's own vocabulary,
/// so that near-valid requests come up often), nested four deep at most.
pub fn any_json(
    words: &'static [&'static str],
    keys: &'static [&'static str],
) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop::sample::select(words).prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(keys).prop_map(str::to_owned),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A turn whose text a fallback voids, then a compaction, a tool's progress and a handoff: the
/// run's own events both protocols carry as theirs (`CUSTOM` events, `data-*` parts).
pub fn run_status_events() -> Vec<AgentEvent> {
    vec![
        AgentEvent::TurnStart { turn: 1 },
        AgentEvent::TextDelta { text: "Par".into() },
        AgentEvent::Fallback {
            from: "big".into(),
            to: "small".into(),
            error: "overloaded".into(),
        },
        AgentEvent::Compacted {
            tokens_before: 900,
            tokens_after: 300,
        },
        AgentEvent::ToolProgress {
            id: "c1".into(),
            message: "halfway".into(),
        },
        AgentEvent::Handoff {
            from: "triage".into(),
            to: "billing".into(),
        },
    ]
}
