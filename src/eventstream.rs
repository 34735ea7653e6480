//! The AWS binary event-stream framing (Bedrock's `application/vnd.amazon.eventstream`):
//! bytes in, messages out, sans-IO, every length bounded and both CRC32 checks made.
//!
//! (Scaffold: the Bedrock work fills this in.)

use crate::error::LlmError;

/// Splits a body into event-stream messages; see the module docs.
#[derive(Debug)]
pub(crate) struct EventStreamDecoder {
    #[allow(dead_code)]
    max_message_bytes: usize,
}

impl EventStreamDecoder {
    /// A decoder that refuses messages longer than `max_message_bytes`.
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        EventStreamDecoder { max_message_bytes }
    }

    /// Feeds a chunk of the body; `on_event` gets each complete message as its event name
    /// (`:event-type`, or `:exception-type` for an exception) and its UTF-8 payload.
    pub(crate) fn push_with<F>(&mut self, _chunk: &[u8], _on_event: F) -> Result<(), LlmError>
    where
        F: FnMut(&str, &str) -> Result<(), LlmError>,
    {
        Err(LlmError::malformed(
            "the event-stream decoder is not built yet",
        ))
    }

    /// Ends the body: an error when it ended inside a message.
    pub(crate) fn finish(&mut self) -> Result<(), LlmError> {
        Ok(())
    }
}
