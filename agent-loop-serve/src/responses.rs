//! An [Open Responses](https://www.openresponses.org) endpoint: `POST /v1/responses`, the
//! OpenAI Responses API's request and its stream, served by an agent.
//!
//! Three parts, usable on their own:
//!
//! 1. [`ResponsesRequest`]: the request body, parsed and checked. `input` is a string (the
//!    user's message) or a list of items (`message` with role `user` or `assistant`,
//!    `function_call`, `function_call_output`): the conversation so far, ending with the
//!    user's new message. What the served agent cannot honour is refused with a 400 rather
//!    than ignored: `previous_response_id` and `conversation` (nothing is stored: send the
//!    whole conversation), `tools` of the client's own (the agent runs its own tools),
//!    `instructions` and `system`/`developer` messages (the agent has its own), and
//!    `background`. Model settings (`model`, `temperature`, `max_output_tokens` …) are read
//!    leniently and not applied: the agent's own settings are its own; `model` is echoed.
//! 2. [`ResponsesEncoder`]: a sans-IO state machine from [`AgentEvent`]s to the Responses
//!    stream events (`response.created`, `response.output_item.added`,
//!    `response.output_text.delta`, `response.function_call_arguments.delta`,
//!    `response.completed` …), each with its `sequence_number`, and the response object they
//!    build. The agent's text is an assistant `message` item of `output_text` per turn; each
//!    tool call is a `function_call` item (already run: the client has nothing to do), followed
//!    by a `function_call_output` item with the tool's result. Reasoning is not sent.
//! 3. [`router`]: the axum handler over an [`AgentService`]: streamed with `"stream": true`,
//!    else the whole response object. A run that ends for a reason other than completion is
//!    `incomplete` (`incomplete_details.reason`: `max_output_tokens`, `content_filter`,
//!    `max_turns`, `paused`, `cancelled`, `budget`, `tool_failures`, `stopped`, `invalid_output`);
//!    a run that fails is `failed` with `error.message`. A client that leaves a stream before
//!    its end cancels the run: the server drops it (its tools' futures with it) and its run
//!    slot is free again.
//!
//! Errors before a run starts are the OpenAI error body, `{"error": {"message", "type",
//! "param", "code"}}`: 400 `invalid_request_error` for a bad body, 413 for one past
//! [`Limits::max_body_bytes`](crate::Limits::max_body_bytes), 429 `rate_limit_error` when every
//! run slot is taken, 500 `server_error` when the agent cannot be built.
//!
//! ```sh
//! curl -sN http://127.0.0.1:8080/v1/responses -H 'content-type: application/json' \
//!   -d '{"model": "agent", "input": "What is 2+2?", "stream": true}'
//! ```
//!
//! ```python
//! from openai import OpenAI
//! client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="unused")
//! print(client.responses.create(model="agent", input="What is 2+2?").output_text)
//! ```

use std::collections::HashMap;

use agent_loop::context::Conversation;
use agent_loop::wire::sse::SseFrame;
use agent_loop::{AgentEvent, ContentBlock, Message, Role, RunOutcome, Termination, Usage};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::AgentService;

/// The router of the endpoint: `POST /v1/responses`, behind the service's
/// [authenticator](crate::AgentService::authenticate): a refused caller gets 401 (or 403)
/// with OpenAI's error body, `{"error": {"message", "type": "invalid_request_error", "param":
/// null, "code": "invalid_api_key"}}` (`"code": "forbidden"` for a 403), which the `openai`
/// SDKs raise as `AuthenticationError` (`PermissionDeniedError`). The SDKs send their
/// `api_key` as `Authorization: Bearer <api_key>`, so [`BearerTokens`](crate::auth::BearerTokens)
/// fit them as they are.
pub fn router(service: &AgentService) -> Router {
    let router = Router::new()
        .route("/v1/responses", post(create))
        .with_state(service.clone());
    crate::auth::guard(router, service.access().clone(), refused)
}

/// A refused caller's answer: OpenAI's error body for a bad key (401) or a forbidden caller.
fn refused(refusal: &crate::auth::Refusal) -> Response {
    let code = match refusal.kind() {
        crate::auth::RefusalKind::Unauthenticated => "invalid_api_key",
        _ => "forbidden",
    };
    let body = json!({"error": {
        "message": refusal.message(),
        "type": "invalid_request_error",
        "param": Value::Null,
        "code": code,
    }});
    (refusal.status(), axum::Json(body)).into_response()
}

/// Why a request is refused: its HTTP status and the OpenAI error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ResponsesError {
    /// The HTTP status (400, 413, 429, 500).
    pub status: u16,
    /// The error's `type`: `invalid_request_error`, `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    /// What is wrong, and what to do.
    pub message: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
}

impl ResponsesError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ResponsesError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_owned),
        }
    }

    /// The body: `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": Value::Null,
        }})
    }
}

impl IntoResponse for ResponsesError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(self.body())).into_response()
    }
}

/// A checked request: the conversation so far and the user's new message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResponsesRequest {
    /// The `model` the client named (echoed in the response; the agent's own model answers).
    pub model: String,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// The conversation before the new message (may be empty).
    pub history: Vec<Message>,
    /// The user's new message: the last `input` item.
    pub input: Vec<ContentBlock>,
}

/// The most items an `input` list may hold.
pub const MAX_INPUT_ITEMS: usize = 4096;

impl ResponsesRequest {
    /// Parses and checks a request body.
    pub fn from_slice(body: &[u8]) -> Result<Self, ResponsesError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ResponsesError::invalid(None, format!("the request body is not valid JSON: {e}"))
        })?;
        let Value::Object(body) = value else {
            return Err(ResponsesError::invalid(
                None,
                "the request body must be a JSON object",
            ));
        };
        for (field, why) in [
            (
                "previous_response_id",
                "responses are not stored: send the whole conversation in `input`",
            ),
            (
                "conversation",
                "conversations are not stored: send the whole conversation in `input`",
            ),
            (
                "instructions",
                "the served agent has its own instructions; put yours in the user message",
            ),
            (
                "background",
                "background responses are not supported: stream instead",
            ),
        ] {
            if body.get(field).is_some_and(|v| !v.is_null() && v != false) {
                return Err(ResponsesError::invalid(
                    Some(field),
                    format!("`{field}` is not supported: {why}"),
                ));
            }
        }
        if body
            .get("tools")
            .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()))
        {
            return Err(ResponsesError::invalid(
                Some("tools"),
                "`tools` is not supported: the served agent runs its own tools",
            ));
        }
        let model = match body.get("model") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(m)) => m.clone(),
            Some(_) => {
                return Err(ResponsesError::invalid(
                    Some("model"),
                    "`model` must be a string",
                ))
            }
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ResponsesError::invalid(
                    Some("stream"),
                    "`stream` must be a boolean",
                ))
            }
        };
        let (history, input) = match body.get("input") {
            Some(Value::String(text)) => (Vec::new(), vec![ContentBlock::text(text.as_str())]),
            Some(Value::Array(items)) => {
                if items.len() > MAX_INPUT_ITEMS {
                    return Err(ResponsesError::invalid(
                        Some("input"),
                        format!("`input` holds more than {MAX_INPUT_ITEMS} items"),
                    ));
                }
                let Some((last, earlier)) = items.split_last() else {
                    return Err(ResponsesError::invalid(
                        Some("input"),
                        "`input` is empty: it must end with the user's message",
                    ));
                };
                let input = match input_items(std::slice::from_ref(last), earlier.len())?.pop() {
                    Some(Message {
                        role: Role::User,
                        content,
                    }) if content
                        .iter()
                        .all(|b| matches!(b, ContentBlock::Text { .. })) =>
                    {
                        content
                    }
                    _ => {
                        return Err(ResponsesError::invalid(
                            Some("input"),
                            "the last input item must be a user message (the served agent \
                             runs its own tools: function_call_output items belong to \
                             earlier turns only)",
                        ))
                    }
                };
                (input_items(earlier, 0)?, input)
            }
            None | Some(Value::Null) => {
                return Err(ResponsesError::invalid(
                    Some("input"),
                    "`input` is required: a string or a list of input items",
                ))
            }
            Some(_) => {
                return Err(ResponsesError::invalid(
                    Some("input"),
                    "`input` must be a string or a list of input items",
                ))
            }
        };
        check_calls_pair_up(&history)?;
        Ok(ResponsesRequest {
            model,
            stream,
            history,
            input,
        })
    }
}

/// Refuses a history whose calls and results do not pair up: each `function_call` answered by
/// one `function_call_output` right after its turn, and each output answering a call of the
/// turn just before. A client may not hand the agent results for calls it never made, nor
/// leave a call without its result (the advisory GHSA-jpr8-2v3g-wgf9, on an AG-UI adapter).
fn check_calls_pair_up(history: &[Message]) -> Result<(), ResponsesError> {
    let mut open: Vec<&str> = Vec::new();
    for message in history {
        let results: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        if message.role == Role::User || !results.is_empty() {
            for id in &results {
                match open.iter().position(|o| o == id) {
                    Some(at) => {
                        open.remove(at);
                    }
                    None => {
                        return Err(ResponsesError::invalid(
                            Some("input"),
                            format!(
                                "the function_call_output for call_id {id:?} answers no                                  function_call of the turn before it: send each output right                                  after the assistant turn that made its call"
                            ),
                        ))
                    }
                }
            }
        }
        if let Some(id) = open.first() {
            return Err(ResponsesError::invalid(
                Some("input"),
                format!(
                    "the function_call with call_id {id:?} has no function_call_output after                      it: send each call's output right after the assistant turn that made it"
                ),
            ));
        }
        if message.role == Role::Assistant {
            open = message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                    _ => None,
                })
                .collect();
        }
    }
    match open.first() {
        Some(id) => Err(ResponsesError::invalid(
            Some("input"),
            format!(
                "the function_call with call_id {id:?} has no function_call_output after it:                  send each call's output before the new user message"
            ),
        )),
        None => Ok(()),
    }
}

/// The text of a message's `content`: a string, or `input_text` / `output_text` parts.
fn content_text(index: usize, content: Option<&Value>) -> Result<String, ResponsesError> {
    let param = format!("input[{index}].content");
    match content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                    (other, _) => {
                        return Err(ResponsesError::invalid(
                            Some(&param),
                            format!(
                                "content parts of type {} are not supported: send text \
                                 (`input_text`)",
                                other.unwrap_or("(none)")
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ResponsesError::invalid(
            Some(&param),
            "a message's `content` must be a string or a list of text parts",
        )),
    }
}

/// The conversation an `input` list describes: messages, calls and their outputs, with
/// consecutive items of one role in one message.
fn input_items(items: &[Value], first: usize) -> Result<Vec<Message>, ResponsesError> {
    let mut messages: Vec<Message> = Vec::new();
    let mut push = |role: Role, block: ContentBlock| match messages.last_mut() {
        Some(last) if last.role == role => last.content.push(block),
        _ => messages.push(Message {
            role,
            content: vec![block],
        }),
    };
    for (i, item) in items.iter().enumerate() {
        let i = i + first;
        let param = format!("input[{i}]");
        let str_field = |name: &str| -> Result<String, ResponsesError> {
            item.get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ResponsesError::invalid(
                        Some(&format!("{param}.{name}")),
                        format!("`{name}` must be a string"),
                    )
                })
        };
        let ty = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match ty {
            "message" => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    Some(r @ ("system" | "developer")) => {
                        return Err(ResponsesError::invalid(
                            Some(&format!("{param}.role")),
                            format!(
                                "`{r}` messages are not supported: the served agent has its \
                                 own instructions"
                            ),
                        ))
                    }
                    _ => {
                        return Err(ResponsesError::invalid(
                            Some(&format!("{param}.role")),
                            "`role` must be `user` or `assistant`",
                        ))
                    }
                };
                let text = content_text(i, item.get("content"))?;
                push(role, ContentBlock::text(text));
            }
            "function_call" => {
                let arguments = str_field("arguments")?;
                let input: Value = serde_json::from_str(&arguments).map_err(|e| {
                    ResponsesError::invalid(
                        Some(&format!("{param}.arguments")),
                        format!("`arguments` is not JSON: {e}"),
                    )
                })?;
                push(
                    Role::Assistant,
                    ContentBlock::ToolUse {
                        id: str_field("call_id")?,
                        name: str_field("name")?,
                        input,
                    },
                );
            }
            "function_call_output" => {
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => content_text(i, Some(v))?,
                    _ => {
                        return Err(ResponsesError::invalid(
                            Some(&format!("{param}.output")),
                            "`output` must be a string or a list of text parts",
                        ))
                    }
                };
                push(
                    Role::User,
                    ContentBlock::tool_result(str_field("call_id")?, output, false),
                );
            }
            other => {
                return Err(ResponsesError::invalid(
                    Some(&format!("{param}.type")),
                    format!(
                        "input items of type `{other}` are not supported: send `message`, \
                         `function_call` and `function_call_output` items"
                    ),
                ))
            }
        }
    }
    Ok(messages)
}

/// An item being streamed.
#[derive(Debug)]
struct OpenItem {
    /// Its place in `output`.
    index: usize,
    /// Its `id`.
    item_id: String,
    /// The text or the arguments so far.
    text: String,
}

/// The Responses stream of one run, from its [`AgentEvent`]s: sans-IO (no clock, no I/O;
/// ids are made from the response's id).
///
/// It keeps the output items (the response object's `output`): what the run said and the
/// tools' results as the events carry them (at most
/// [`RunPolicy::event_content_limit`](agent_loop::agent::RunPolicy::event_content_limit) per
/// result), bounded by the agent's own limits.
///
/// ```
/// use agent_loop::AgentEvent;
/// use agent_loop_serve::responses::ResponsesEncoder;
///
/// let mut encoder = ResponsesEncoder::new("resp_1", "agent", 0);
/// let start = encoder.start();
/// assert_eq!(start[0]["type"], "response.created");
/// let events = encoder.push(&AgentEvent::TextDelta { text: "Hi".into() });
/// assert_eq!(events.last().unwrap()["type"], "response.output_text.delta");
/// ```
#[derive(Debug)]
pub struct ResponsesEncoder {
    id: String,
    model: String,
    created_at: u64,
    sequence: u64,
    /// The output items; an open item's slot holds its item as announced.
    output: Vec<Value>,
    /// The assistant message being streamed (one per turn's text).
    message: Option<OpenItem>,
    /// Function calls announced and not yet done, by call id.
    calls: HashMap<String, OpenItem>,
    usage: Usage,
    /// The terminal event was sent: nothing more is.
    done: bool,
    /// The terminal event's response object.
    last: Option<Value>,
}

impl ResponsesEncoder {
    /// An encoder for the response `id`, echoing `model`, created at `created_at` (Unix
    /// seconds).
    pub fn new(id: impl Into<String>, model: impl Into<String>, created_at: u64) -> Self {
        ResponsesEncoder {
            id: id.into(),
            model: model.into(),
            created_at,
            sequence: 0,
            output: Vec::new(),
            message: None,
            calls: HashMap::new(),
            usage: Usage::default(),
            done: false,
            last: None,
        }
    }

    /// The opening events: `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        let response = self.response("in_progress", Value::Null, Value::Null);
        self.emit(
            &mut out,
            json!({"type": "response.created", "response": response}),
        );
        self.emit(
            &mut out,
            json!({"type": "response.in_progress", "response": response}),
        );
        out
    }

    /// The events `event` makes (none after the terminal event).
    pub fn push(&mut self, event: &AgentEvent) -> Vec<Value> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match event {
            AgentEvent::TextDelta { text } if !text.is_empty() => {
                let message = match self.message.take() {
                    Some(open) => open,
                    None => self.open_message(&mut out),
                };
                let delta = json!({"type": "response.output_text.delta",
                    "item_id": message.item_id, "output_index": message.index,
                    "content_index": 0, "delta": text, "logprobs": []});
                self.message = Some(OpenItem {
                    text: message.text + text,
                    ..message
                });
                self.emit(&mut out, delta);
            }
            AgentEvent::ToolCallStart { id, name } => {
                self.close_message(&mut out, "completed");
                if !self.calls.contains_key(id) {
                    self.open_call(&mut out, id, name);
                }
            }
            AgentEvent::ToolInputDelta { id, partial_json } => {
                if let Some(call) = self.calls.get_mut(id) {
                    call.text.push_str(partial_json);
                    let delta = json!({"type": "response.function_call_arguments.delta",
                        "item_id": call.item_id, "output_index": call.index,
                        "delta": partial_json});
                    self.emit(&mut out, delta);
                }
            }
            AgentEvent::ToolCall { id, name, input } => {
                self.close_message(&mut out, "completed");
                if !self.calls.contains_key(id) {
                    self.open_call(&mut out, id, name);
                }
                self.close_call(&mut out, id, name, Some(input.to_string()), "completed");
            }
            AgentEvent::ToolResult {
                id, name, content, ..
            } => {
                self.close_message(&mut out, "completed");
                // A call answered without a `ToolCall` (refused before it ran) is closed as
                // the model streamed it.
                self.close_call(&mut out, id, name, None, "completed");
                let index = self.output.len();
                let item = json!({"type": "function_call_output",
                    "id": format!("fco_{}_{index}", self.id), "call_id": id,
                    "output": content, "status": "completed"});
                self.output.push(item.clone());
                let added = json!({"type": "response.output_item.added",
                    "output_index": index, "item": item});
                self.emit(&mut out, added);
                let done = json!({"type": "response.output_item.done",
                    "output_index": index, "item": item});
                self.emit(&mut out, done);
            }
            // The text of a turn sent again is a new message; what was streamed stays, marked
            // incomplete.
            AgentEvent::Retry { .. } | AgentEvent::Fallback { .. } => {
                self.close_message(&mut out, "incomplete");
            }
            AgentEvent::TurnEnd { .. } => self.close_message(&mut out, "completed"),
            AgentEvent::Finished(outcome) => self.finish(&mut out, outcome),
            // Open Responses output items are the answer's text and the function calls with
            // their outputs. Not in them: an empty delta; reasoning (the served agent's own);
            // a turn's start (a message opens with its first text); a tool's progress; the
            // agent's bookkeeping (compaction, sub-agents, handoffs, the host's steering,
            // rate limits).
            AgentEvent::TextDelta { .. }
            | AgentEvent::ThinkingDelta { .. }
            | AgentEvent::TurnStart { .. }
            | AgentEvent::ToolProgress { .. }
            | AgentEvent::Compacted { .. }
            | AgentEvent::SubAgent { .. }
            | AgentEvent::Handoff { .. }
            | AgentEvent::Steered { .. }
            | AgentEvent::RateLimits(_) => {}
        }
        out
    }

    /// The response object of the terminal event, once sent.
    pub fn final_response(&self) -> Option<&Value> {
        self.last.as_ref()
    }

    /// Whether the terminal event was sent.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn emit(&mut self, out: &mut Vec<Value>, mut event: Value) {
        event["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push(event);
    }

    fn open_message(&mut self, out: &mut Vec<Value>) -> OpenItem {
        let index = self.output.len();
        let item_id = format!("msg_{}_{index}", self.id);
        let item = json!({"type": "message", "id": item_id, "status": "in_progress",
            "role": "assistant", "content": []});
        self.output.push(item.clone());
        let added = json!({"type": "response.output_item.added", "output_index": index,
            "item": item});
        self.emit(out, added);
        let part = json!({"type": "response.content_part.added", "item_id": item_id,
            "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}});
        self.emit(out, part);
        OpenItem {
            index,
            item_id,
            text: String::new(),
        }
    }

    fn close_message(&mut self, out: &mut Vec<Value>, status: &str) {
        let Some(message) = self.message.take() else {
            return;
        };
        let OpenItem {
            index,
            item_id,
            text,
        } = message;
        let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
        let done = json!({"type": "response.output_text.done", "item_id": item_id,
            "output_index": index, "content_index": 0, "text": text, "logprobs": []});
        self.emit(out, done);
        let done = json!({"type": "response.content_part.done", "item_id": item_id,
            "output_index": index, "content_index": 0, "part": part});
        self.emit(out, done);
        let item = json!({"type": "message", "id": item_id, "status": status,
            "role": "assistant", "content": [part]});
        if let Some(slot) = self.output.get_mut(index) {
            *slot = item.clone();
        }
        let done = json!({"type": "response.output_item.done", "output_index": index,
            "item": item});
        self.emit(out, done);
    }

    fn open_call(&mut self, out: &mut Vec<Value>, call_id: &str, name: &str) {
        let index = self.output.len();
        let item_id = format!("fc_{}_{index}", self.id);
        let item = json!({"type": "function_call", "id": item_id, "call_id": call_id,
            "name": name, "arguments": "", "status": "in_progress"});
        self.output.push(item.clone());
        let added = json!({"type": "response.output_item.added", "output_index": index,
            "item": item});
        self.emit(out, added);
        self.calls.insert(
            call_id.to_owned(),
            OpenItem {
                index,
                item_id,
                text: String::new(),
            },
        );
    }

    fn close_call(
        &mut self,
        out: &mut Vec<Value>,
        call_id: &str,
        name: &str,
        arguments: Option<String>,
        status: &str,
    ) {
        let Some(call) = self.calls.remove(call_id) else {
            return;
        };
        let arguments = arguments.unwrap_or(call.text);
        let done = json!({"type": "response.function_call_arguments.done",
            "item_id": call.item_id, "output_index": call.index, "name": name,
            "arguments": arguments});
        self.emit(out, done);
        let item = json!({"type": "function_call", "id": call.item_id, "call_id": call_id,
            "name": name, "arguments": arguments, "status": status});
        if let Some(slot) = self.output.get_mut(call.index) {
            *slot = item.clone();
        }
        let done = json!({"type": "response.output_item.done", "output_index": call.index,
            "item": item});
        self.emit(out, done);
    }

    fn finish(&mut self, out: &mut Vec<Value>, outcome: &RunOutcome) {
        self.close_message(out, "completed");
        let mut open: Vec<(String, usize)> = self
            .calls
            .iter()
            .map(|(k, v)| (k.clone(), v.index))
            .collect();
        open.sort_by_key(|(_, index)| *index);
        for (id, index) in open {
            let name = self.output[index]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.close_call(out, &id, &name, None, "incomplete");
        }
        self.usage = outcome.usage;
        let incomplete = |reason: &str| json!({ "reason": reason });
        let (ty, status, details, error) = match &outcome.termination {
            Termination::Completed => ("response.completed", "completed", Value::Null, Value::Null),
            Termination::Error(e) => (
                "response.failed",
                "failed",
                Value::Null,
                json!({"code": "server_error", "message": e.to_string()}),
            ),
            other @ (Termination::MaxTurns
            | Termination::Cancelled
            | Termination::StoppedAfterTurn
            | Termination::TokenBudget { .. }
            | Termination::CostBudget { .. }
            | Termination::ToolFailures { .. }
            | Termination::RepeatedToolCall { .. }
            | Termination::StoppedByHook { .. }
            | Termination::Refused
            | Termination::MaxTokens
            | Termination::InvalidOutput { .. }
            | Termination::Paused(_)) => {
                let reason = match other {
                    Termination::MaxTokens => "max_output_tokens",
                    Termination::Refused => "content_filter",
                    Termination::MaxTurns => "max_turns",
                    Termination::Paused(_) => "paused",
                    Termination::Cancelled => "cancelled",
                    Termination::TokenBudget { .. } | Termination::CostBudget { .. } => "budget",
                    Termination::ToolFailures { .. } | Termination::RepeatedToolCall { .. } => {
                        "tool_failures"
                    }
                    Termination::InvalidOutput { .. } => "invalid_output",
                    Termination::StoppedAfterTurn | Termination::StoppedByHook { .. } => "stopped",
                    // Answered by the arm above.
                    Termination::Completed | Termination::Error(_) => "stopped",
                };
                (
                    "response.incomplete",
                    "incomplete",
                    incomplete(reason),
                    Value::Null,
                )
            }
        };
        let response = self.response(status, details, error);
        self.last = Some(response.clone());
        self.emit(out, json!({"type": ty, "response": response}));
        self.done = true;
    }

    /// The response object as it stands, with `status`.
    fn response(&self, status: &str, incomplete_details: Value, error: Value) -> Value {
        let mut response = Map::new();
        let usage = if status == "in_progress" {
            Value::Null
        } else {
            let u = &self.usage;
            let input = u
                .input_tokens
                .saturating_add(u.cache_read_input_tokens)
                .saturating_add(u.cache_creation_input_tokens);
            json!({"input_tokens": input,
                "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
                "output_tokens": u.output_tokens,
                "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                "total_tokens": input.saturating_add(u.output_tokens)})
        };
        for (k, v) in [
            ("id", json!(self.id)),
            ("object", json!("response")),
            ("created_at", json!(self.created_at)),
            ("status", json!(status)),
            ("model", json!(self.model)),
            ("output", Value::Array(self.output.clone())),
            ("error", error),
            ("incomplete_details", incomplete_details),
            ("usage", usage),
            ("instructions", Value::Null),
            ("parallel_tool_calls", json!(true)),
            ("tool_choice", json!("auto")),
            ("tools", json!([])),
            ("metadata", json!({})),
            ("temperature", Value::Null),
            ("top_p", Value::Null),
            ("store", json!(false)),
            ("background", json!(false)),
            ("text", json!({"format": {"type": "text"}})),
        ] {
            response.insert(k.to_owned(), v);
        }
        Value::Object(response)
    }
}

/// One SSE frame: `event: {type}\ndata: {json}\n\n`.
fn sse_frame(event: &Value) -> Bytes {
    let ty = event["type"].as_str().unwrap_or("message");
    let data = event.to_string();
    Bytes::from(SseFrame::new(&data).event(ty).to_string())
}

/// `POST /v1/responses`.
async fn create(State(service): State<AgentService>, body: Body) -> Response {
    let limit = service.current_limits().body_bytes();
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(body) => body,
        Err(_) => {
            return ResponsesError {
                status: 413,
                kind: "invalid_request_error",
                message: format!("the request body is larger than {limit} bytes"),
                param: None,
            }
            .into_response()
        }
    };
    let request = match ResponsesRequest::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    let Some(slot) = service.try_run_slot() else {
        return ResponsesError {
            status: 429,
            kind: "rate_limit_error",
            message: format!(
                "every run slot is taken ({} runs at once): try again when a run ends",
                service.current_limits().concurrent_runs()
            ),
            param: None,
        }
        .into_response();
    };
    let server_error = |message: String| ResponsesError {
        status: 500,
        kind: "server_error",
        message,
        param: None,
    };
    let mut agent = match service.agent() {
        Ok(agent) => agent,
        Err(e) => {
            return server_error(format!("the agent could not be built: {e}")).into_response()
        }
    };
    if !request.history.is_empty() {
        if let Err(e) = agent.restore(Conversation::new(None, request.history)) {
            return ResponsesError::invalid(
                Some("input"),
                format!("the conversation in `input` is not a valid history: {e}"),
            )
            .into_response();
        }
    }
    let mut encoder = ResponsesEncoder::new(
        crate::fresh_id("resp_"),
        request.model,
        crate::unix_seconds(),
    );
    let events = agent.run(request.input);
    if request.stream {
        let start = futures::stream::iter(encoder.start());
        let rest = events
            .map(move |event| {
                let _slot = &slot;
                futures::stream::iter(encoder.push(&event))
            })
            .flatten();
        let frames = start
            .chain(rest)
            .map(|event| Ok::<_, std::convert::Infallible>(sse_frame(&event)));
        let mut response = Response::new(Body::from_stream(frames));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    } else {
        let mut events = std::pin::pin!(events);
        encoder.start();
        while let Some(event) = events.next().await {
            encoder.push(&event);
        }
        drop(slot);
        match encoder.final_response() {
            Some(response) => axum::Json(response.clone()).into_response(),
            None => server_error("the run ended without its outcome".to_owned()).into_response(),
        }
    }
}
