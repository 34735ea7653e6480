//! Properties of the OpenAI Responses decoder: random responses (text, refusals, reasoning with
//! several summary parts, parallel calls whose argument deltas interleave, text and refusal
//! parts that stay empty), written as the
//! documented event stream with or without `event:` lines and with keep-alive comments, decode
//! to exactly their content under any chunking; fixtures re-chunked at random change nothing;
//! arbitrary and mutated bodies never panic.

use crate::common;

use agent_loop::wire::{StreamLimits, WireDecoder, WireFormat};
use agent_loop::{ContentBlock, LlmError, StopReason};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value};

const F: WireFormat = WireFormat::OpenAiResponses;

/// One output item of a generated response.
#[derive(Debug, Clone)]
enum Item {
    /// A message with one `output_text` part, streamed in these deltas (none: an empty part,
    /// `""` in every finishing event).
    Text(Vec<String>),
    /// A message with one `refusal` part, likewise.
    Refusal(Vec<String>),
    Reasoning {
        parts: Vec<Vec<String>>,
        encrypted: Option<String>,
    },
    Call {
        name: String,
        args: Value,
        /// How many pieces the argument text is cut into.
        pieces: usize,
    },
}

#[derive(Debug, Clone, Copy)]
enum Ending {
    Completed,
    MaxTokens,
    ContentFilter,
}

fn piece() -> impl Strategy<Value = String> {
    // ASCII, multi-byte text, JSON-significant characters, newlines.
    "[a-zé€🎉 \"\\\\\n{}:,]{1,8}"
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        3 => prop::collection::vec(piece(), 0..5).prop_map(Item::Text),
        1 => prop::collection::vec(piece(), 0..3).prop_map(Item::Refusal),
        2 => (
            prop::collection::vec(prop::collection::vec(piece(), 1..4), 0..3),
            prop::option::of("[A-Za-z0-9+/=]{1,40}"),
        )
            .prop_map(|(parts, encrypted)| Item::Reasoning { parts, encrypted }),
        3 => (
            "[a-z_]{1,10}",
            prop::collection::btree_map("[a-z]{1,5}", prop_oneof![
                any::<i32>().prop_map(Value::from),
                piece().prop_map(Value::from),
                Just(json!([1, {"x": null}])),
            ], 0..4),
            1usize..6,
        )
            .prop_map(|(name, map, pieces)| Item::Call {
                name,
                args: Value::Object(map.into_iter().collect()),
                pieces,
            }),
    ]
}

/// Splits `s` into about `n` pieces on character boundaries.
fn split(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Writes the event stream of `items`; `order` interleaves the argument deltas of the calls.
fn stream(
    items: &[Item],
    ending: Ending,
    event_lines: bool,
    comments: bool,
    shuffle: &[usize],
) -> Vec<u8> {
    let mut out = String::new();
    let mut seq = 0;
    let mut push = |data: Value| {
        let mut data = data;
        data["sequence_number"] = json!(seq);
        seq += 1;
        if event_lines {
            out.push_str(&format!("event: {}\n", data["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {data}\n\n"));
        if comments && seq % 3 == 0 {
            out.push_str(": keep-alive\n\n");
        }
    };
    let response = |status: &str, output: &[Value], incomplete: Value| {
        json!({"id": "resp_p", "object": "response", "status": status, "model": "m",
        "output": output, "incomplete_details": incomplete, "error": null,
        "usage": if status == "in_progress" { Value::Null } else {
            json!({"input_tokens": 30, "input_tokens_details": {"cached_tokens": 10},
                   "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 5}})
        }})
    };
    push(
        json!({"type": "response.created", "response": response("in_progress", &[], Value::Null)}),
    );
    let mut finished = Vec::new();
    // Calls' argument pieces, delivered interleaved after all calls are announced.
    let mut pending: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Text(pieces) | Item::Refusal(pieces) => {
                let refusal = matches!(item, Item::Refusal(_));
                let (part_type, delta_type, done_type, key) = if refusal {
                    (
                        "refusal",
                        "response.refusal.delta",
                        "response.refusal.done",
                        "refusal",
                    )
                } else {
                    (
                        "output_text",
                        "response.output_text.delta",
                        "response.output_text.done",
                        "text",
                    )
                };
                let text: String = pieces.concat();
                push(
                    json!({"type": "response.output_item.added", "output_index": i,
                            "item": {"type": "message", "id": format!("msg_{i}"), "role": "assistant", "content": []}}),
                );
                push(
                    json!({"type": "response.content_part.added", "output_index": i, "content_index": 0,
                            "item_id": format!("msg_{i}"), "part": {"type": part_type, key: ""}}),
                );
                for p in pieces {
                    push(
                        json!({"type": delta_type, "output_index": i, "content_index": 0,
                                "item_id": format!("msg_{i}"), "delta": p}),
                    );
                }
                push(
                    json!({"type": done_type, "output_index": i, "content_index": 0,
                            "item_id": format!("msg_{i}"), key: text}),
                );
                let part = json!({"type": part_type, key: text});
                push(
                    json!({"type": "response.content_part.done", "output_index": i, "content_index": 0,
                            "item_id": format!("msg_{i}"), "part": part}),
                );
                let item = json!({"type": "message", "id": format!("msg_{i}"), "role": "assistant", "content": [part]});
                push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
                finished.push(item);
            }
            Item::Reasoning { parts, encrypted } => {
                push(
                    json!({"type": "response.output_item.added", "output_index": i,
                            "item": {"type": "reasoning", "id": format!("rs_{i}"), "summary": []}}),
                );
                for (s, pieces) in parts.iter().enumerate() {
                    push(
                        json!({"type": "response.reasoning_summary_part.added", "output_index": i,
                                "summary_index": s, "item_id": format!("rs_{i}"),
                                "part": {"type": "summary_text", "text": ""}}),
                    );
                    for p in pieces {
                        push(
                            json!({"type": "response.reasoning_summary_text.delta", "output_index": i,
                                    "summary_index": s, "item_id": format!("rs_{i}"), "delta": p}),
                        );
                    }
                }
                let item = json!({"type": "reasoning", "id": format!("rs_{i}"),
                                  "summary": parts.iter().map(|p| json!({"type": "summary_text", "text": p.concat()})).collect::<Vec<_>>(),
                                  "encrypted_content": encrypted});
                push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
                finished.push(item);
            }
            Item::Call { name, args, pieces } => {
                push(
                    json!({"type": "response.output_item.added", "output_index": i,
                            "item": {"type": "function_call", "id": format!("fc_{i}"),
                                     "call_id": format!("call_{i}"), "name": name, "arguments": ""}}),
                );
                pending.push((i, split(&args.to_string(), *pieces)));
            }
        }
    }
    // Interleave the argument deltas: `shuffle` picks which pending call sends next.
    let mut cursor: Vec<usize> = vec![0; pending.len()];
    let mut turn = 0;
    loop {
        let open: Vec<usize> = (0..pending.len())
            .filter(|&c| cursor[c] < pending[c].1.len())
            .collect();
        if open.is_empty() {
            break;
        }
        let c = open[shuffle.get(turn).copied().unwrap_or(0) % open.len()];
        turn += 1;
        let (i, pieces) = &pending[c];
        push(
            json!({"type": "response.function_call_arguments.delta", "output_index": i,
                    "item_id": format!("fc_{i}"), "delta": pieces[cursor[c]]}),
        );
        cursor[c] += 1;
    }
    for (i, pieces) in &pending {
        let Item::Call { name, .. } = &items[*i] else {
            unreachable!()
        };
        let item = json!({"type": "function_call", "id": format!("fc_{i}"), "call_id": format!("call_{i}"),
                          "name": name, "arguments": pieces.concat()});
        push(
            json!({"type": "response.function_call_arguments.done", "output_index": i,
                    "item_id": format!("fc_{i}"), "arguments": pieces.concat()}),
        );
        push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
        finished.push(item);
    }
    match ending {
        Ending::Completed => push(json!({"type": "response.completed",
                                         "response": response("completed", &finished, Value::Null)})),
        Ending::MaxTokens => push(json!({"type": "response.incomplete",
                                         "response": response("incomplete", &finished, json!({"reason": "max_output_tokens"}))})),
        Ending::ContentFilter => push(json!({"type": "response.incomplete",
                                             "response": response("incomplete", &finished, json!({"reason": "content_filter"}))})),
    }
    out.into_bytes()
}

/// The blocks a response of `items` assembles to: messages and reasoning in output order, then
/// the calls (their blocks open when they are announced, in output order too). Empty text and
/// refusal parts leave no block (the SDK keeps them as `""`: the text is the same).
fn expected(items: &[Item]) -> Vec<ContentBlock> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Item::Text(p) | Item::Refusal(p) if p.is_empty() => None,
            other => Some((i, other)),
        })
        .map(|(i, item)| match item {
            Item::Text(p) | Item::Refusal(p) => ContentBlock::text(p.concat()),
            Item::Reasoning { parts, encrypted } => ContentBlock::Reasoning {
                id: format!("rs_{i}"),
                summary: parts.iter().map(|p| p.concat()).collect(),
                encrypted_content: encrypted.clone(),
            },
            Item::Call { name, args, .. } => ContentBlock::ToolUse {
                id: format!("call_{i}"),
                name: name.clone(),
                input: args.clone(),
            },
        })
        .collect()
}

fn cuts(len: usize, picks: &[usize]) -> Vec<usize> {
    let mut cuts: Vec<usize> = picks.iter().map(|p| p % len.max(1)).collect();
    cuts.sort_unstable();
    cuts
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn random_responses_decode_to_their_content_under_any_chunking(
        items in prop::collection::vec(item(), 0..6),
        ending in prop_oneof![Just(Ending::Completed), Just(Ending::MaxTokens), Just(Ending::ContentFilter)],
        event_lines in any::<bool>(),
        comments in any::<bool>(),
        shuffle in prop::collection::vec(0usize..8, 0..40),
        picks in prop::collection::vec(any::<usize>(), 0..30),
    ) {
        let body = stream(&items, ending, event_lines, comments, &shuffle);
        let decoded = common::decode_split(F, &body, &cuts(body.len(), &picks));
        prop_assert_eq!(&decoded, &common::decode(F, &body));
        let response = decoded.result.unwrap();
        prop_assert_eq!(&response.message.content, &expected(&items));
        let calls = items.iter().any(|i| matches!(i, Item::Call { .. }));
        // An empty refusal refuses nothing.
        let refused = items.iter().any(|i| matches!(i, Item::Refusal(p) if !p.is_empty()));
        let stop = match ending {
            Ending::MaxTokens => StopReason::MaxTokens,
            Ending::ContentFilter => StopReason::ContentFilter,
            Ending::Completed if refused => StopReason::Refusal,
            Ending::Completed if calls => StopReason::ToolUse,
            Ending::Completed => StopReason::EndTurn,
        };
        prop_assert_eq!(response.stop_reason, stop);
        prop_assert_eq!(response.usage.input_tokens, 20);
        prop_assert_eq!(response.usage.cache_read_input_tokens, 10);
        prop_assert_eq!(response.usage.output_tokens, 20);
        prop_assert_eq!(response.usage.reasoning_tokens, 5);
        prop_assert!(response.invalid_tool_calls.is_empty());
        // With and without event lines, the same events.
        let other = stream(&items, ending, !event_lines, !comments, &shuffle);
        prop_assert_eq!(common::decode(F, &other).events, common::decode(F, &body).events);
    }

    #[test]
    fn random_responses_cut_short_are_incomplete(
        items in prop::collection::vec(item(), 1..5),
        shuffle in prop::collection::vec(0usize..8, 0..20),
        at in any::<usize>(),
    ) {
        let body = stream(&items, Ending::Completed, true, false, &shuffle);
        let last = String::from_utf8_lossy(&body).rfind("event: response.completed").unwrap();
        let cut = at % last;
        let result = common::decode(F, &body[..cut]).result;
        prop_assert!(matches!(result, Err(LlmError::Incomplete { .. })), "{:?}", result);
    }

    #[test]
    fn fixtures_rechunked_at_random_change_nothing(
        which in any::<usize>(),
        picks in prop::collection::vec(any::<usize>(), 0..64),
    ) {
        let all = common::fixtures("responses");
        let (name, body) = &all[which % all.len()];
        prop_assert_eq!(
            common::decode_split(F, body, &cuts(body.len(), &picks)),
            common::decode(F, body),
            "{}", name
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = common::decode(F, &bytes);
    }

    #[test]
    fn mutated_fixtures_never_panic_and_stay_within_limits(
        which in any::<usize>(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
        chunk in 1usize..64,
    ) {
        let all = common::fixtures("responses");
        let mut body = all[which % all.len()].1.clone();
        for (at, byte, op) in edits {
            if body.is_empty() {
                break;
            }
            let at = at % body.len();
            match op {
                0 => body[at] = byte,
                1 => { body.remove(at); }
                _ => body.insert(at, byte),
            }
        }
        let mut limits = StreamLimits::default();
        limits.max_line_bytes = 4096;
        limits.max_event_bytes = 4096;
        limits.max_tool_args_bytes = 64;
        limits.max_response_bytes = 1024;
        let mut decoder = WireDecoder::with_limits(F, limits);
        let mut events = Vec::new();
        let mut result = Ok(());
        for piece in body.chunks(chunk) {
            result = decoder.push(piece, &mut events);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            let _ = decoder.finish(&mut events);
        }
        let mut assembler = agent_loop::wire::StreamAssembler::with_limits(limits);
        for event in &events {
            if assembler.push(event).is_err() {
                break;
            }
        }
        // Chunking still does not matter after the mutation.
        prop_assert_eq!(common::decode_chunked(F, &body, chunk), common::decode(F, &body));
    }
}
