//! (Scaffold) request encoding, and its inverse for the mock server's checks.

use serde_json::Value;

use crate::message::Message;

/// The conversation a request body carries (the mock server checks the history invariant
/// on it).
#[allow(dead_code)]
pub(crate) fn decode(_body: &Value) -> Vec<Message> {
    Vec::new()
}
