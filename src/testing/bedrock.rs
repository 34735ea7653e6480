//! (Scaffold) the mock server's side of this wire format: a scripted response as the
//! provider's body, its errors, and its whole (non-streamed) form.

use serde_json::{json, Value};

use crate::assemble::ModelResponse;
use crate::message::Usage;
use crate::provider::LlmEvent;

use super::sse::Segment;
use super::tool_schemas::Rejection;

/// The body's segments for `events` (ending with `Usage` and `MessageStop` when complete).
pub(crate) fn encode(_events: &[LlmEvent], _usage: Usage) -> Vec<Segment> {
    Vec::new()
}

/// The bytes of an in-stream error.
pub(crate) fn error_event(_error_type: &str, _message: &str) -> Vec<u8> {
    Vec::new()
}

/// The bytes of a keep-alive, or none when the format has none.
pub(crate) fn keep_alive() -> Vec<u8> {
    Vec::new()
}

/// Bytes the client cannot decode.
pub(crate) fn garbage() -> Vec<u8> {
    b"{not json\n".to_vec()
}

/// The whole, non-streamed response.
pub(crate) fn whole(_response: &ModelResponse) -> Value {
    json!({})
}

/// The error body of a refusal with `status`, and the headers that go with it.
pub(crate) fn status_body(
    _status: u16,
    error_type: &str,
    message: &str,
) -> (Value, Vec<(String, String)>) {
    (
        json!({"error": {"type": error_type, "message": message}}),
        Vec::new(),
    )
}

/// What the real API refuses in a request body (tool schemas, block shapes, media), as it
/// says so; `None` when it would take it.
pub(crate) fn rejection(_body: &Value) -> Option<Rejection> {
    None
}
