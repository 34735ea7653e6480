//! The run's tracing spans, shaped by OpenTelemetry's GenAI semantic conventions, so that the
//! `otel` feature's exporter (or any `tracing-opentelemetry` layer) sends them as the
//! conventions name them: `invoke_agent {agent}` per run (kind internal), `chat {model}` per
//! model call (kind client; a retried call gets its own), and, from the tool layer,
//! `execute_tool {tool}` per tool call (`tool/exec.rs`). Both children of the run's span; a
//! sub-agent's run is a child of the `execute_tool` span of the call that runs it.
//!
//! The span names `tracing` sees are the operations (`invoke_agent`, `chat`); `otel.name`
//! and `otel.kind` give the exported span its full name and kind. Message content is
//! recorded only when the agent opts in ([`MachineConfig::trace_content`] or
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).

use serde_json::{json, Value};
use tracing::field::Empty;
use tracing::Span;

use crate::error::{Error, LlmError};
use crate::message::{ContentBlock, Message, Role, StopReason, Usage};
use crate::provider::{LlmClient, ModelRequest};
use crate::wire::LlmEvent;

use crate::agent::events::{RunOutcome, Termination};
use crate::agent::machine::config::MachineConfig;

/// The environment variable that turns content capture on (`true`), as the conventions name it.
const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// What a run's driver tells its spans.
pub(crate) struct Telemetry {
    /// The run's `invoke_agent` span: the parent of its `chat` and `execute_tool` spans.
    pub(crate) run: Span,
    /// The `chat` span of the model call in progress.
    chat: Span,
    /// Whether content is recorded.
    content: bool,
    /// The turn of the last model call, and the calls made in it.
    turn: u32,
    attempt: u32,
    /// The response so far, for `gen_ai.output.messages` (with content only).
    output: Vec<Part>,
    /// The call's latest usage (each replaces the last), recorded once, when the call ends:
    /// a span keeps every value recorded, not the last.
    usage: Option<Usage>,
}

/// One part of the answer being streamed: text, reasoning or a tool call (id and name).
struct Part {
    index: usize,
    kind: &'static str,
    text: String,
    call: Option<(String, String)>,
}

impl Part {
    /// The part in the conventions' shape; a call's arguments as JSON once they parse.
    fn into_json(self) -> Value {
        match self.call {
            Some((id, name)) => {
                let arguments =
                    serde_json::from_str(&self.text).unwrap_or(Value::String(self.text));
                json!({ "type": "tool_call", "id": id, "name": name, "arguments": arguments })
            }
            None => json!({ "type": self.kind, "content": self.text }),
        }
    }
}

/// The run's span: `invoke_agent {name}`, a child of the span current where the run starts.
pub(crate) fn run_span(config: &MachineConfig, client: &dyn LlmClient) -> Span {
    let span = tracing::info_span!(
        "invoke_agent",
        otel.name = format!("invoke_agent {}", config.name),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = Empty,
        gen_ai.agent.name = config.name.as_str(),
        gen_ai.request.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        "error.type" = Empty,
        otel.status_code = Empty,
        turns = Empty,
        termination = Empty,
    );
    record_nonempty(&span, "gen_ai.provider.name", client.provider_name());
    let model = config
        .settings
        .model
        .as_deref()
        .unwrap_or_else(|| client.model());
    record_nonempty(&span, "gen_ai.request.model", model);
    span
}

impl Telemetry {
    pub(crate) fn new(run: Span, config: &MachineConfig) -> Self {
        Telemetry {
            run,
            chat: Span::none(),
            content: capture_content(config.trace_content),
            turn: 0,
            attempt: 0,
            output: Vec::new(),
            usage: None,
        }
    }

    /// Whether tool calls record their arguments and results.
    pub(crate) fn content(&self) -> bool {
        self.content
    }

    /// A model call starts: its `chat {model}` span, which the call runs in.
    pub(crate) fn call_model(
        &mut self,
        request: &ModelRequest,
        client: &dyn LlmClient,
        turn: u32,
    ) -> Span {
        if turn != self.turn {
            self.turn = turn;
            self.attempt = 0;
        }
        let model = request.model.as_deref().unwrap_or_else(|| client.model());
        let span = tracing::info_span!(
            parent: &self.run,
            "chat",
            otel.name = if model.is_empty() { "chat".to_owned() } else { format!("chat {model}") },
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = Empty,
            gen_ai.request.model = Empty,
            gen_ai.request.max_tokens = i64::from(request.max_tokens),
            gen_ai.request.temperature = Empty,
            gen_ai.request.top_p = Empty,
            gen_ai.request.stop_sequences = Empty,
            gen_ai.response.id = Empty,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.usage.reasoning.output_tokens = Empty,
            gen_ai.system_instructions = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            "error.type" = Empty,
            otel.status_code = Empty,
            turn = i64::from(turn),
            attempt = i64::from(self.attempt),
        );
        self.attempt += 1;
        record_nonempty(&span, "gen_ai.provider.name", client.provider_name());
        record_nonempty(&span, "gen_ai.request.model", model);
        if let Some(t) = request.temperature {
            span.record("gen_ai.request.temperature", decimal(t));
        }
        if let Some(p) = request.top_p {
            span.record("gen_ai.request.top_p", decimal(p));
        }
        if !request.stop_sequences.is_empty() {
            record_strings(
                &span,
                "gen_ai.request.stop_sequences",
                &request.stop_sequences,
            );
        }
        if self.content {
            if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
                let parts = json!([{ "type": "text", "content": system }]);
                span.record("gen_ai.system_instructions", parts.to_string());
            }
            let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
            span.record("gen_ai.input.messages", Value::from(messages).to_string());
        }
        self.output.clear();
        self.usage = None;
        self.chat = span.clone();
        span
    }

    /// One event of the model's stream.
    pub(crate) fn model_event(&mut self, event: &LlmEvent) {
        let span = &self.chat;
        match event {
            LlmEvent::MessageStart { id, model } => {
                record_nonempty(span, "gen_ai.response.id", id);
                record_nonempty(span, "gen_ai.response.model", model);
            }
            LlmEvent::Usage(usage) => self.usage = Some(*usage),
            LlmEvent::MessageStop { stop_reason } => {
                if let Some(usage) = self.usage.take() {
                    record_usage(span, &usage);
                }
                let reason = finish_reason(stop_reason);
                record_strings(span, "gen_ai.response.finish_reasons", &[reason.to_owned()]);
                if self.content {
                    let parts: Vec<Value> = self.output.drain(..).map(Part::into_json).collect();
                    let message =
                        json!([{ "role": "assistant", "parts": parts, "finish_reason": reason }]);
                    span.record("gen_ai.output.messages", message.to_string());
                }
            }
            _ if self.content => self.output_part(event),
            _ => {}
        }
    }

    /// Adds a streamed piece of the answer to its part (content only).
    fn output_part(&mut self, event: &LlmEvent) {
        let (index, kind, piece) = match event {
            LlmEvent::TextDelta { index, text } => (*index, "text", text),
            LlmEvent::ThinkingDelta { index, thinking } => (*index, "reasoning", thinking),
            LlmEvent::ToolCallStart { index, id, name } => {
                let call = Some((id.clone(), name.clone()));
                let (index, kind, text) = (*index, "tool_call", String::new());
                self.output.push(Part {
                    index,
                    kind,
                    text,
                    call,
                });
                return;
            }
            LlmEvent::ToolCallDelta {
                index,
                partial_json,
            } => (*index, "tool_call", partial_json),
            _ => return,
        };
        let part = self.output.iter_mut().rev();
        match part
            .into_iter()
            .find(|p| p.index == index && p.kind == kind)
        {
            Some(part) => part.text.push_str(piece),
            None if kind != "tool_call" => self.output.push(Part {
                index,
                kind,
                text: piece.clone(),
                call: None,
            }),
            None => {}
        }
    }

    /// The model call failed: `error.type` and an error status on its span, which ends.
    pub(crate) fn model_failed(&mut self, error: &LlmError) {
        self.chat
            .record("error.type", llm_error_type(error).as_str());
        self.chat.record("otel.status_code", "error");
        self.model_done();
    }

    /// The model's stream ended: its span ends (with the usage, when the stream was cut short
    /// before its `MessageStop`).
    pub(crate) fn model_done(&mut self) {
        if let Some(usage) = self.usage.take() {
            record_usage(&self.chat, &usage);
        }
        self.chat = Span::none();
    }

    /// The run moved to a fallback model: an event on the run's span (the failed call's
    /// span has its `error.type`; the next `chat` span names the new model).
    pub(crate) fn fallback(&self, from: &str, to: &str) {
        tracing::warn!(
            parent: &self.run,
            gen_ai.fallback.from = from,
            gen_ai.fallback.to = to,
            "gen_ai.fallback"
        );
    }

    /// The run is over: its usage and how it ended.
    pub(crate) fn finish(&self, outcome: &RunOutcome) {
        let span = &self.run;
        span.record("turns", i64::from(outcome.turns));
        record_usage(span, &outcome.usage);
        span.record("termination", tracing::field::display(&outcome.termination));
        if let Termination::Error(error) = &outcome.termination {
            let kind = match error {
                Error::Llm(e) => llm_error_type(e),
                Error::Tool(_) => "tool".to_owned(),
                Error::Config(_) => "config".to_owned(),
                Error::Context(_) => "context".to_owned(),
                Error::Session(_) => "session".to_owned(),
                Error::Resume(_) => "resume".to_owned(),
                Error::Busy => "busy".to_owned(),
                _ => "_OTHER".to_owned(),
            };
            span.record("error.type", kind.as_str());
            span.record("otel.status_code", "error");
        }
    }
}

/// Whether content is captured: the agent's opt-in, or the conventions' variable.
fn capture_content(opt_in: bool) -> bool {
    opt_in
        || std::env::var(CAPTURE_CONTENT_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

fn record_nonempty(span: &Span, field: &str, value: &str) {
    if !value.is_empty() {
        span.record(field, value);
    }
}

/// The usage as the conventions count it: input tokens are all the prompt's tokens.
fn record_usage(span: &Span, usage: &Usage) {
    span.record("gen_ai.usage.input_tokens", int(usage.total_input_tokens()));
    span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
    if usage.cache_read_input_tokens > 0 {
        let read = int(usage.cache_read_input_tokens);
        span.record("gen_ai.usage.cache_read.input_tokens", read);
    }
    if usage.cache_creation_input_tokens > 0 {
        let created = int(usage.cache_creation_input_tokens);
        span.record("gen_ai.usage.cache_creation.input_tokens", created);
    }
    if usage.reasoning_tokens > 0 {
        let reasoning = int(usage.reasoning_tokens);
        span.record("gen_ai.usage.reasoning.output_tokens", reasoning);
    }
}

/// A count as a signed integer: `tracing-opentelemetry` sends a `u64` as text, an `i64` as
/// the integer attribute the conventions ask for.
fn int(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A string-array attribute: an array on the OpenTelemetry span (feature `otel-attributes`,
/// which the agent-loop-otel crate turns on); for other subscribers, which have no arrays,
/// its JSON text.
fn record_strings(span: &Span, field: &'static str, values: &[String]) {
    #[cfg(feature = "otel-attributes")]
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let values = values.iter().cloned().map(Into::into).collect();
        span.set_attribute(
            field,
            opentelemetry::Value::Array(opentelemetry::Array::String(values)),
        );
    }
    #[cfg(not(feature = "otel-attributes"))]
    span.record(field, Value::from(values).to_string());
}

/// An `f32` setting as the decimal written (0.3, not 0.30000001192092896).
fn decimal(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// The stop reason in the conventions' spelling (`stop`, `length`, `tool_call`,
/// `content_filter`); the provider's own word for what they do not name.
fn finish_reason(reason: &StopReason) -> &str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::ToolUse => "tool_call",
        StopReason::MaxTokens | StopReason::ModelContextWindowExceeded => "length",
        StopReason::Refusal | StopReason::ContentFilter => "content_filter",
        StopReason::PauseTurn => "pause_turn",
        StopReason::Other(other) => other,
    }
}

/// A model call's `error.type`: the provider's error type (`overloaded_error`), else the HTTP
/// status (`500`); `timeout`; else the error's kind (`connect`, `incomplete` …).
fn llm_error_type(error: &LlmError) -> String {
    match error {
        LlmError::Api(api) | LlmError::ContextOverflow(api) => api
            .error_type
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| api.status.to_string()),
        LlmError::Stream { error_type, .. } if !error_type.is_empty() => error_type.clone(),
        LlmError::Timeout { .. } => "timeout".to_owned(),
        other => error_variant(other).unwrap_or_else(|| "_OTHER".to_owned()),
    }
}

/// An error's kind: the `type` tag of its serialized form (errors that have one).
fn error_variant(error: &impl serde::Serialize) -> Option<String> {
    let value = serde_json::to_value(error).ok()?;
    Some(value.get("type")?.as_str()?.to_owned())
}

/// A message in the conventions' shape: a role and typed parts.
fn message_json(message: &Message) -> Value {
    let only_results = !message.content.is_empty()
        && message
            .content
            .iter()
            .all(|b| matches!(b, ContentBlock::ToolResult { .. }));
    let role = match message.role {
        Role::Assistant => "assistant",
        _ if only_results => "tool",
        _ => "user",
    };
    let parts: Vec<Value> = message.content.iter().filter_map(part_json).collect();
    json!({ "role": role, "parts": parts })
}

fn part_json(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } => json!({ "type": "text", "content": text }),
        ContentBlock::Thinking { thinking, .. } => {
            json!({ "type": "reasoning", "content": thinking })
        }
        ContentBlock::Reasoning { summary, .. } => {
            json!({ "type": "reasoning", "content": summary.join("\n") })
        }
        ContentBlock::ToolUse { id, name, input } => {
            json!({ "type": "tool_call", "id": id, "name": name, "arguments": input })
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } => json!({ "type": "tool_call_response", "id": tool_use_id, "response": content }),
        ContentBlock::Image { .. } => json!({ "type": "blob", "modality": "image" }),
        ContentBlock::Document { .. } => json!({ "type": "file", "modality": "document" }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_conventions_roles_and_parts() {
        let call = Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "add".into(),
                input: json!({"a": 1}),
            }],
        };
        let result = Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("c1", "2", false)],
        };
        assert_eq!(
            message_json(&Message::user("hi")),
            json!({"role": "user", "parts": [{"type": "text", "content": "hi"}]})
        );
        assert_eq!(
            message_json(&call),
            json!({"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1}}
            ]})
        );
        assert_eq!(
            message_json(&result),
            json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "c1", "response": "2"}
            ]})
        );
    }

    #[test]
    fn stop_reasons_and_errors_use_the_conventions_words() {
        assert_eq!(finish_reason(&StopReason::EndTurn), "stop");
        assert_eq!(finish_reason(&StopReason::ToolUse), "tool_call");
        assert_eq!(finish_reason(&StopReason::MaxTokens), "length");
        assert_eq!(finish_reason(&StopReason::Refusal), "content_filter");
        let timeout = LlmError::Timeout {
            kind: crate::error::TimeoutKind::Idle,
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(llm_error_type(&timeout), "timeout");
        let connect = LlmError::Connect {
            message: "refused".into(),
        };
        assert_eq!(llm_error_type(&connect), "connect");
        assert_eq!(decimal(0.3), 0.3);
    }
}
