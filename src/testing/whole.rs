//! Encodes a [`ScriptedResponse`] as one whole, non-streamed JSON message in each provider's
//! shape: what some proxies send in answer to a streaming request.
//!
//! The response is encoded as a stream first and decoded and assembled by the crate's own
//! wire layer, so the whole message holds exactly what the stream would have delivered.

use serde_json::{json, Value};

use crate::message::{ContentBlock, StopReason};
use crate::wire::{ModelResponse, StreamAssembler, WireDecoder, WireFormat};

use super::scripted::ScriptedResponse;
use super::sse;

/// The whole JSON body of `response` in `format`, or `None` when the scripted response is
/// not a complete message (a scripted failure or stall).
pub(crate) fn encode(format: WireFormat, response: &ScriptedResponse) -> Option<Value> {
    let assembled = assemble(format, response)?;
    Some(match format {
        WireFormat::Anthropic => anthropic(&assembled),
        WireFormat::OpenAiResponses => responses(&assembled),
        WireFormat::Gemini => super::gemini::whole(&assembled),
        WireFormat::Bedrock => super::bedrock::whole(&assembled),
        WireFormat::Ollama => super::ollama::whole(&assembled),
        _ => openai(&assembled),
    })
}

fn assemble(format: WireFormat, response: &ScriptedResponse) -> Option<ModelResponse> {
    let (segments, _) = sse::encode(format, response);
    let body: Vec<u8> = segments.into_iter().flat_map(|s| s.bytes).collect();
    let mut decoder = WireDecoder::new(format);
    let mut events = Vec::new();
    decoder.push(&body, &mut events).ok()?;
    decoder.finish(&mut events).ok()?;
    let mut assembler = StreamAssembler::new();
    for event in &events {
        assembler.push(event).ok()?;
    }
    assembler.finish().ok()
}

fn anthropic(response: &ModelResponse) -> Value {
    let usage = response.usage;
    json!({
        "id": response.id,
        "type": "message",
        "role": "assistant",
        "model": response.model,
        "content": response.message.content,
        "stop_reason": response.stop_reason,
        "stop_sequence": response.stop_sequence,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        },
    })
}

fn openai(response: &ModelResponse) -> Value {
    let text = response.message.text();
    let reasoning: String = response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    let tool_calls: Vec<Value> = response
        .message
        .tool_uses()
        .map(|(id, name, input)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": input.to_string()}})
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish_reason = match &response.stop_reason {
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
        _ => "stop",
    };
    let usage = response.usage;
    let prompt = usage.input_tokens + usage.cache_read_input_tokens;
    json!({
        "id": response.id,
        "object": "chat.completion",
        "created": 0,
        "model": response.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason,
                     "logprobs": null}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        },
    })
}

/// A Responses object (`{"object":"response","output":[…]}`): reasoning items, one message
/// item per text block, function calls, in the response's order.
fn responses(response: &ModelResponse) -> Value {
    let output: Vec<Value> = response
        .message
        .content
        .iter()
        .enumerate()
        .filter_map(|(i, block)| match block {
            ContentBlock::Text { text } => Some(json!({
                "type": "message", "id": format!("msg_{i}"), "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]})),
            ContentBlock::Reasoning {
                id,
                summary,
                encrypted_content,
            } => Some(json!({
                "type": "reasoning", "id": id,
                "summary": summary.iter()
                    .map(|t| json!({"type": "summary_text", "text": t}))
                    .collect::<Vec<_>>(),
                "encrypted_content": encrypted_content})),
            ContentBlock::ToolUse { id, name, input } => Some(json!({
                "type": "function_call", "id": format!("fc_{i}"), "call_id": id,
                "name": name, "arguments": input.to_string(), "status": "completed"})),
            _ => None,
        })
        .collect();
    let (status, incomplete) = match &response.stop_reason {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter | StopReason::Refusal => {
            ("incomplete", json!({"reason": "content_filter"}))
        }
        _ => ("completed", Value::Null),
    };
    let usage = response.usage;
    let input = usage.input_tokens + usage.cache_read_input_tokens;
    json!({
        "id": response.id,
        "object": "response",
        "created_at": 0,
        "status": status,
        "incomplete_details": incomplete,
        "error": null,
        "model": response.model,
        "output": output,
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": input + usage.output_tokens,
        },
    })
}
