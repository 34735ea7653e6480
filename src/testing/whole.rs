//! Encodes a [`ScriptedResponse`] as one whole, non-streamed JSON message in each provider's
//! shape: what some proxies send in answer to a streaming request.
//!
//! The response is encoded as a stream first and decoded and assembled by the crate's own
//! wire layer, so the whole message holds exactly what the stream would have delivered.

use serde_json::Value;

use crate::wire::{ModelResponse, StreamAssembler, WireDecoder, WireFormat};

use super::scripted::ScriptedResponse;
use super::sse;
use crate::provider;

/// The whole JSON body of `response` in `format`, or `None` when the scripted response is
/// not a complete message (a scripted failure or stall).
pub(crate) fn encode(format: WireFormat, response: &ScriptedResponse) -> Option<Value> {
    let assembled = assemble(format, response)?;
    Some(provider::of(format).mock().encode_whole(&assembled))
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
