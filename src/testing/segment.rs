//! One piece of an encoded response body and what it is: the unit the mock server cuts,
//! chunks and interrupts a body at, in every format (its own file, so that each format's
//! encoder and the dispatch in `sse.rs` depend on it and not on each other).

/// What a segment of the body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    /// Before content: `message_start`, pings, the role chunk.
    Preamble,
    /// Carries content (a block start or a delta).
    Content,
    /// A block stop, or anything between content events that is not content.
    Other,
    /// Part of the end-of-message marker (`message_delta`, `message_stop`; the finish chunk,
    /// the usage chunk, `[DONE]`).
    End,
}

/// One event's bytes (an SSE event, an NDJSON line, an event-stream message) and what it
/// is.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) bytes: Vec<u8>,
    pub(crate) kind: SegmentKind,
}
