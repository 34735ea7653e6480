//! Encodes a [`ModelRequest`] into an Anthropic Messages request body.
//!
//! - The system prompt is the top-level `system` field.
//! - Consecutive messages of the same role are merged into one (Anthropic requires
//!   alternation); in user messages `tool_result` blocks are moved before the other blocks
//!   (Anthropic requires the results first), keeping their order.
//! - Empty text blocks are dropped (Anthropic rejects them), and so are messages left empty.
//! - Thinking, redacted-thinking and unmodelled (`Other`) blocks are sent back unmodified.
//! - `tool_use.input` is always an object (anything else becomes `{}`).
//! - Prompt caching ([`PromptCache`], on by default): `cache_control` goes on the last tool, on
//!   the system prompt (then sent as one text block), and on the last cacheable block of each of
//!   the latest user messages. Thinking, redacted-thinking and empty text blocks may not carry
//!   one (the API refuses them), so the breakpoint goes on the last block that may; unmodelled
//!   blocks are sent as they are, and their own breakpoints count against the limit of four.
//! - Hosted tool search ([`ModelRequest::deferred_tools`]): the deferred tools go after the
//!   others with `defer_loading: true`, then `{"type": "tool_search_tool_bm25_20251119",
//!   "name": "tool_search_tool_bm25"}` (the local `search_tools` is left out unless the
//!   history called it).
//! - Context editing ([`ModelRequest::context_editing`]) and server compaction
//!   ([`ModelRequest::server_compaction`], a `compact_20260112` edit after the others):
//!   `context_management: {"edits": [...]}` (the client adds their beta headers). A
//!   `compaction` block the server returned is sent back verbatim (an unmodelled block).
//! - `tool_choice` is sent only when there are tools; `extra` fields are merged last, at the
//!   top level, and win over the encoded ones.

use crate::error::LlmError;
use crate::message::{ContentBlock, MediaSource, Message, Role};
use crate::provider::cache::{CacheTtl, PromptCache, MAX_CACHE_BREAKPOINTS};
use crate::provider::media_limits::{self as media, Provider};
use crate::provider::transport::http;
use crate::provider::{ModelRequest, ToolChoice};

/// Anthropic's hosted BM25 tool search (`ToolSearchToolBm25_20251119Param`).
const HOSTED_SEARCH_TYPE: &str = "tool_search_tool_bm25_20251119";
const HOSTED_SEARCH_NAME: &str = "tool_search_tool_bm25";

use super::wire::{
    MessagesRequest, ObjectOrEmpty, WireBlock, WireCacheControl, WireChoice, WireMessage,
    WireMetadata, WireSystem, WireSystemBlock, WireThinking, WireTool, WireToolChoice,
    WireToolContent,
};

/// The JSON body for `request`, using `default_model` when the request names none.
pub(crate) fn encode(request: &ModelRequest, default_model: &str) -> Result<Vec<u8>, LlmError> {
    let model = request.model.as_deref().unwrap_or(default_model);
    if model.is_empty() {
        return Err(LlmError::InvalidRequest {
            message: "no model: set one with AnthropicClient::model(..) (or ANTHROPIC_MODEL), \
                      or in ModelRequest::model"
                .to_owned(),
        });
    }
    let cache = request.prompt_cache;
    if let Some(cache) = &cache {
        cache.validate().map_err(|e| LlmError::InvalidRequest {
            message: e.to_string(),
        })?;
    }
    let control = cache.map(|c| cache_control(c.ttl));
    fn custom(t: &crate::message::ToolSpec, deferred: bool, strict: bool) -> WireTool<'_> {
        let (input_schema, strict) = crate::provider::strict::wire_schema(
            &t.name,
            &t.input_schema,
            crate::provider::strict::StrictDialect::Anthropic,
            strict,
        );
        WireTool {
            kind: None,
            name: &t.name,
            description: Some(&t.description),
            input_schema: Some(input_schema),
            strict: strict.then_some(true),
            defer_loading: deferred.then_some(true),
            cache_control: None,
        }
    }
    // Hosted tool search: the deferred tools with `defer_loading`, and Anthropic's search
    // tool in place of the local one (kept only if the history already called it).
    let hosted = !request.deferred_tools.is_empty();
    let local_search_used = hosted
        && request.messages.iter().any(|m| {
            m.content.iter().any(|b| {
                matches!(b, ContentBlock::ToolUse { name, .. }
                    if name == crate::tool::search::SEARCH_TOOL)
            })
        });
    let mut tools: Vec<WireTool<'_>> = request
        .tools
        .iter()
        .filter(|t| !hosted || local_search_used || t.name != crate::tool::search::SEARCH_TOOL)
        .map(|t| custom(t, false, request.strict_tools))
        .chain(
            request
                .deferred_tools
                .iter()
                .map(|t| custom(t, true, request.strict_tools)),
        )
        .collect();
    if hosted {
        tools.push(WireTool {
            kind: Some(HOSTED_SEARCH_TYPE),
            name: HOSTED_SEARCH_NAME,
            description: None,
            input_schema: None,
            strict: None,
            defer_loading: None,
            cache_control: None,
        });
    }
    let mut placed = 0;
    if let (Some(last), Some(PromptCache { tools: true, .. })) = (tools.last_mut(), &cache) {
        last.cache_control = control;
        placed += 1;
    }
    let system = request.system.as_deref().filter(|s| !s.is_empty());
    let system = match (system, &cache) {
        (Some(text), Some(PromptCache { system: true, .. })) => {
            placed += 1;
            Some(WireSystem::Blocks([WireSystemBlock {
                kind: "text",
                text,
                cache_control: cache_control(cache.map(|c| c.ttl).unwrap_or_default()),
            }]))
        }
        (Some(text), _) => Some(WireSystem::Text(text)),
        (None, _) => None,
    };
    if request.extra.contains_key("messages") {
        return Err(http::extra_clash("messages"));
    }
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"messages":["#);
    write_messages(request, cache.as_ref().zip(control), placed, &mut out)?;
    out.extend_from_slice(b"],");
    let tool_choice = (!tools.is_empty()).then(|| {
        let choice = match &request.tool_choice {
            ToolChoice::Auto => WireChoice::Auto,
            ToolChoice::Any => WireChoice::Any,
            ToolChoice::None => WireChoice::None,
            ToolChoice::Tool(name) => WireChoice::Tool { name },
        };
        // `none` takes no parallelism setting.
        let disable_parallel_tool_use = match (&choice, request.parallel_tool_calls) {
            (WireChoice::None, _) | (_, None) => None,
            (_, Some(parallel)) => Some(!parallel),
        };
        WireToolChoice {
            choice,
            disable_parallel_tool_use,
        }
    });
    let body = MessagesRequest {
        model,
        max_tokens: request.max_tokens,
        system,
        tools,
        tool_choice,
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: &request.stop_sequences,
        metadata: request
            .user
            .as_deref()
            .map(|user_id| WireMetadata { user_id }),
        thinking: request.thinking_budget.map(|budget_tokens| WireThinking {
            kind: "enabled",
            budget_tokens,
        }),
        context_management: crate::provider::context_editing::anthropic(
            request.context_editing.as_ref(),
            request.server_compaction,
        )
        .map(|(wire, _)| wire),
        stream: true,
    };
    let rest = http::body_bytes(&body, &request.extra)?;
    // `rest` is an object with at least `model`: its fields follow `messages`.
    out.extend_from_slice(rest.get(1..).unwrap_or_default());
    Ok(out)
}

/// The cache of encoded messages' key for this format.
const ENCODED_KEY: u32 = 3;

/// Writes the items of the `messages` list. When each message is a wire message of its own
/// (no two neighbours of one role, none left empty) and no unmodelled block carries a
/// breakpoint, the messages up to the first one that gets a breakpoint come from the
/// conversation's cache of encoded messages, and only the rest are encoded; otherwise every
/// message is encoded here.
fn write_messages(
    request: &ModelRequest,
    cache: Option<(&PromptCache, WireCacheControl)>,
    placed: u32,
    out: &mut Vec<u8>,
) -> Result<(), LlmError> {
    let room = MAX_CACHE_BREAKPOINTS.saturating_sub(placed);
    fn write(
        out: &mut Vec<u8>,
        after_item: &mut bool,
        message: &WireMessage<'_>,
    ) -> Result<(), LlmError> {
        if std::mem::replace(after_item, true) {
            out.push(b',');
        }
        serde_json::to_writer(out, message).map_err(http::encode_error)
    }
    if !one_to_one(&request.messages) {
        let mut messages = messages(&request.messages)?;
        if let Some((cache, control)) = cache {
            let verbatim = verbatim_breakpoints(&messages);
            let count = cache.message_breakpoints.min(room.saturating_sub(verbatim));
            mark_latest_user_messages(&mut messages, count, control);
        }
        let mut after_item = false;
        for message in &messages {
            write(out, &mut after_item, message)?;
        }
        return Ok(());
    }
    let count = cache.map_or(0, |(c, _)| c.message_breakpoints.min(room));
    let tail = first_marked(&request.messages, count);
    let wrote = request.encoded.write_messages(
        &request.messages,
        tail,
        ENCODED_KEY,
        false,
        out,
        |message, buf| {
            for m in messages(std::slice::from_ref(message))? {
                serde_json::to_writer(&mut *buf, &m).map_err(http::encode_error)?;
            }
            Ok(())
        },
    )?;
    let mut after_item = wrote;
    let mut messages = messages(request.messages.get(tail..).unwrap_or_default())?;
    if let Some((_, control)) = cache {
        mark_latest_user_messages(&mut messages, count, control);
    }
    for message in &messages {
        write(out, &mut after_item, message)?;
    }
    Ok(())
}

/// The `messages` list as it is without the conversation's cache: every message encoded,
/// merged, and the breakpoints placed over the whole list (the reference the cached path is
/// checked against).
#[cfg(test)]
pub(crate) fn plain_messages(request: &ModelRequest, _: u32) -> serde_json::Value {
    let Some(cache) = request.prompt_cache else {
        return serde_json::to_value(messages(&request.messages).unwrap()).unwrap();
    };
    let placed = u32::from(cache.tools && !request.tools.is_empty())
        + u32::from(cache.system && request.system.as_deref().is_some_and(|s| !s.is_empty()));
    let mut messages = messages(&request.messages).unwrap();
    let verbatim = verbatim_breakpoints(&messages);
    let room = MAX_CACHE_BREAKPOINTS.saturating_sub(placed + verbatim);
    mark_latest_user_messages(
        &mut messages,
        cache.message_breakpoints.min(room),
        cache_control(cache.ttl),
    );
    serde_json::to_value(messages).unwrap()
}

/// Whether each message is a wire message of its own: it sends a block, its role differs
/// from the one before, and no unmodelled block of it carries a breakpoint of its own.
fn one_to_one(messages: &[Message]) -> bool {
    let mut last = None;
    messages.iter().all(|m| {
        let role = matches!(m.role, Role::Assistant);
        let alternates = last != Some(role);
        last = Some(role);
        alternates
            && m.content.iter().any(sends)
            && !m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::Other(v) if v.get("cache_control").is_some()))
    })
}

/// Whether `block` is sent (empty text and Responses reasoning are not).
fn sends(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Text { text } => !text.is_empty(),
        ContentBlock::Reasoning { .. } | ContentBlock::Compaction { .. } => false,
        _ => true,
    }
}

/// The index of the earliest of the `count` latest user messages that take a breakpoint
/// ([`mark_latest_user_messages`]: those with a block that may carry one), or the length
/// when none does. Only for a history of [`one_to_one`] messages.
fn first_marked(messages: &[Message], count: u32) -> usize {
    let mut left = count;
    let mut first = messages.len();
    for (i, message) in messages.iter().enumerate().rev() {
        if left == 0 {
            break;
        }
        let markable = message.role != Role::Assistant
            && message.content.iter().any(|b| match b {
                ContentBlock::Text { text } => !text.is_empty(),
                ContentBlock::ToolUse { .. }
                | ContentBlock::ToolResult { .. }
                | ContentBlock::Image { .. }
                | ContentBlock::Document { .. } => true,
                _ => false,
            });
        if markable {
            first = i;
            left -= 1;
        }
    }
    first
}

fn cache_control(ttl: CacheTtl) -> WireCacheControl {
    WireCacheControl {
        kind: "ephemeral",
        ttl: match ttl {
            CacheTtl::FiveMinutes => None,
            CacheTtl::OneHour => Some("1h"),
        },
    }
}

/// The `cache_control` breakpoints already in unmodelled blocks, sent as they are.
fn verbatim_breakpoints(messages: &[WireMessage<'_>]) -> u32 {
    let n = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, WireBlock::Other(v) if v.get("cache_control").is_some()))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Puts `control` on the last block that may carry one in each of the `count` latest user
/// messages (a user message with no such block is skipped and does not use up a breakpoint).
fn mark_latest_user_messages(
    messages: &mut [WireMessage<'_>],
    count: u32,
    control: WireCacheControl,
) {
    let mut left = count;
    for message in messages.iter_mut().rev() {
        if left == 0 {
            return;
        }
        if message.role != "user" {
            continue;
        }
        let slot = message.content.iter_mut().rev().find_map(|b| match b {
            WireBlock::Text { cache_control, .. }
            | WireBlock::ToolUse { cache_control, .. }
            | WireBlock::ToolResult { cache_control, .. }
            | WireBlock::Image { cache_control, .. }
            | WireBlock::Document { cache_control, .. } => Some(cache_control),
            // Thinking blocks may not carry a breakpoint; unmodelled blocks are sent verbatim.
            _ => None,
        });
        if let Some(slot) = slot {
            *slot = Some(control);
            left -= 1;
        }
    }
}

fn messages(messages: &[Message]) -> Result<Vec<WireMessage<'_>>, LlmError> {
    let mut out: Vec<WireMessage<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let role = match message.role {
            Role::Assistant => "assistant",
            _ => "user",
        };
        let mut blocks: Vec<WireBlock<'_>> = Vec::with_capacity(message.content.len());
        for b in &message.content {
            if let Some(b) = block(b)? {
                blocks.push(b);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    for message in &mut out {
        if message.role == "user" {
            // Stable: results keep their order, and so do the other blocks.
            let (results, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut message.content)
                .into_iter()
                .partition(|b| matches!(b, WireBlock::ToolResult { .. }));
            message.content = results;
            message.content.extend(rest);
        }
    }
    Ok(out)
}

fn check_image(source: &MediaSource) -> Result<(), LlmError> {
    media::check_image(source, Provider::Anthropic)
}

fn check_document(source: &MediaSource) -> Result<(), LlmError> {
    media::check_document(source, Provider::Anthropic)
}

fn block(block: &ContentBlock) -> Result<Option<WireBlock<'_>>, LlmError> {
    Ok(Some(match block {
        ContentBlock::Text { text } if text.is_empty() => return Ok(None),
        ContentBlock::Text { text } => WireBlock::Text {
            text,
            cache_control: None,
        },
        ContentBlock::Thinking {
            thinking,
            signature,
        } => WireBlock::Thinking {
            thinking,
            signature,
        },
        ContentBlock::RedactedThinking { data } => WireBlock::RedactedThinking { data },
        // OpenAI Responses reasoning has no Anthropic form.
        // OpenAI Responses compaction neither: the first message keeps the task and a note.
        ContentBlock::Reasoning { .. } | ContentBlock::Compaction { .. } => return Ok(None),
        ContentBlock::ToolUse { id, name, input } => WireBlock::ToolUse {
            id,
            name,
            input: ObjectOrEmpty(input),
            cache_control: None,
        },
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
            images,
            ..
        } => WireBlock::ToolResult {
            tool_use_id,
            content: if images.is_empty() {
                WireToolContent::Text(content)
            } else {
                let mut parts = Vec::with_capacity(images.len() + 1);
                if !content.is_empty() {
                    parts.push(WireBlock::Text {
                        text: content,
                        cache_control: None,
                    });
                }
                for source in images {
                    check_image(source)?;
                    parts.push(WireBlock::Image {
                        source,
                        cache_control: None,
                    });
                }
                WireToolContent::Blocks(parts)
            },
            is_error: *is_error,
            cache_control: None,
        },
        ContentBlock::Image { source } => {
            check_image(source)?;
            WireBlock::Image {
                source,
                cache_control: None,
            }
        }
        ContentBlock::Document { source, title } => {
            check_document(source)?;
            WireBlock::Document {
                source,
                title: title.as_deref(),
                cache_control: None,
            }
        }
        // OpenAI Responses hosted tool search items neither: the calls they loaded are kept.
        ContentBlock::Other(value)
            if crate::provider::responses::decode::is_responses_only(value) =>
        {
            return Ok(None)
        }
        ContentBlock::Other(value) => WireBlock::Other(value),
        // A block kind this format cannot carry is left out.
        #[allow(unreachable_patterns)]
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::mock::decode;
    use super::*;
    use crate::message::{Message, ToolSpec};
    use serde_json::{json, Value};

    fn encode_value(request: &ModelRequest) -> Value {
        serde_json::from_slice(&encode(request, "claude-test").unwrap()).unwrap()
    }

    #[test]
    fn minimal_request() {
        let v = encode_value(&ModelRequest::new(vec![Message::user("hi")]));
        assert_eq!(
            v,
            json!({
                "model": "claude-test",
                "max_tokens": 4096,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
                ]}],
                "stream": true
            })
        );
        let mut uncached = ModelRequest::new(vec![Message::user("hi")]);
        uncached.prompt_cache = None;
        assert_eq!(
            encode_value(&uncached)["messages"][0]["content"][0],
            json!({"type": "text", "text": "hi"})
        );
    }

    #[test]
    fn a_user_message_without_a_cacheable_block_does_not_use_up_a_breakpoint() {
        let r = ModelRequest::new(vec![
            Message::user("first"),
            Message::assistant("a"),
            Message::user("second"),
            Message::assistant("b"),
            Message {
                role: Role::User,
                content: vec![ContentBlock::Other(json!({"type": "image", "source": {}}))],
            },
        ]);
        let v = encode_value(&r);
        assert!(v["messages"][4]["content"][0]
            .get("cache_control")
            .is_none());
        assert_eq!(
            v["messages"][2]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
        assert_eq!(
            v["messages"][0]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
    }

    /// A history Anthropic would refuse as it is: two user messages in a row, a tool input
    /// that is not an object, and a result after the user's note.
    fn unmerged_history() -> Vec<Message> {
        vec![
            Message::user("a"),
            Message::user("b"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "1".into(),
                    name: "t".into(),
                    input: json!("not an object"),
                }],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::text("note"),
                    ContentBlock::tool_result("1", "ok", false),
                ],
            },
        ]
    }

    #[test]
    fn merges_roles_orders_results_first_and_fixes_inputs() {
        let mut r = ModelRequest::new(unmerged_history());
        r.tools = vec![ToolSpec {
            name: "t".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        }];
        r.tool_choice = ToolChoice::Tool("t".into());
        r.extra.insert("top_k".into(), json!(5));
        let v = encode_value(&r);
        assert_eq!(v["messages"].as_array().unwrap().len(), 3);
        assert_eq!(v["messages"][0]["content"].as_array().unwrap().len(), 2);
        assert_eq!(v["messages"][1]["content"][0]["input"], json!({}));
        assert_eq!(v["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(v["messages"][2]["content"][1]["type"], "text");
        assert!(v["messages"][2]["content"][0].get("is_error").is_none());
        assert_eq!(v["tool_choice"], json!({"type": "tool", "name": "t"}));
        assert_eq!(v["top_k"], 5);
    }

    #[test]
    fn missing_model_is_an_invalid_request() {
        let err = encode(&ModelRequest::new(vec![Message::user("x")]), "").unwrap_err();
        assert!(matches!(err, LlmError::InvalidRequest { .. }));
    }

    /// A conversation with every kind of block the agent sends: parallel calls, an error
    /// result, signed and redacted thinking in a tool turn, and an unmodelled block.
    fn tool_conversation() -> Vec<Message> {
        vec![
            Message::user("list and read"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "two calls".into(),
                        signature: "sig".into(),
                    },
                    ContentBlock::RedactedThinking {
                        data: "opaque".into(),
                    },
                    ContentBlock::text("Looking."),
                    ContentBlock::ToolUse {
                        id: "toolu_1".into(),
                        name: "ls".into(),
                        input: json!({"path": "."}),
                    },
                    ContentBlock::ToolUse {
                        id: "toolu_2".into(),
                        name: "read".into(),
                        input: json!({"path": "a.txt", "lines": [1, 2]}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::tool_result("toolu_1", "a.txt", false),
                    ContentBlock::tool_result("toolu_2", "no such file", true),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Other(json!({"type": "server_tool_use", "id": "srv_1"})),
                    ContentBlock::text("a.txt is missing."),
                ],
            },
            Message::user("thanks"),
        ]
    }

    #[test]
    fn media_round_trip_through_the_body() {
        let mut request = ModelRequest::new(crate::provider::fixtures::media_conversation());
        request.prompt_cache = None;
        assert_eq!(
            decode(&encode_value(&request)),
            crate::provider::fixtures::media_conversation()
        );
    }

    #[test]
    fn decode_inverts_encode() {
        let history = tool_conversation();
        let body = encode_value(&ModelRequest::new(history.clone()));
        assert_eq!(decode(&body), history);
    }

    #[test]
    fn decode_sees_the_history_as_sent_merged_and_reordered() {
        // Two user messages become one; the result moves before the note.
        let r = ModelRequest::new(unmerged_history());
        let decoded = decode(&encode_value(&r));
        let roles: Vec<Role> = decoded.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        assert_eq!(
            decoded[0].content,
            [ContentBlock::text("a"), ContentBlock::text("b")]
        );
        assert_eq!(
            decoded[1].content,
            [ContentBlock::ToolUse {
                id: "1".into(),
                name: "t".into(),
                input: json!({}),
            }]
        );
        assert_eq!(
            decoded[2].content,
            [
                ContentBlock::tool_result("1", "ok", false),
                ContentBlock::text("note")
            ]
        );
    }

    #[test]
    fn decode_never_panics_on_odd_bodies() {
        for body in [
            json!(null),
            json!({"messages": "no"}),
            json!({"messages": [1, null, {"role": 5, "content": {"x": 1}}]}),
            json!({"messages": [{"role": "assistant", "content": [
                7, {"type": "tool_use"}, {"type": "tool_result", "content": [{"x": 1}]}
            ]}]}),
        ] {
            let _ = decode(&body);
        }
        assert!(decode(&json!({})).is_empty());
        let odd = decode(&json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_result", "tool_use_id": "x", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}
        ]}]}));
        assert_eq!(
            odd[0].content,
            [ContentBlock::tool_result("x", "a\nb", false)]
        );
    }
}
