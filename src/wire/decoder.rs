//! [`WireDecoder`]: a framing (SSE, newline-delimited JSON, AWS event stream) and a format's
//! event decoder put together.
//!
//! Nothing here knows a format: each format's folder under `provider/` implements
//! [`EventDecoder`] and names its [`Framing`], and `provider/format.rs` (the one table of
//! formats) builds a `WireDecoder` for a [`WireFormat`](crate::wire::WireFormat) from them
//! (`WireDecoder::new`, `WireDecoder::with_limits`).

use std::fmt;

use crate::error::LlmError;
use crate::wire::eventstream::EventStreamDecoder;
use crate::wire::lines::LineDecoder;
use crate::wire::sse::SseDecoder;
use crate::wire::{LlmEvent, StreamLimits};

/// A format's decoder of framed events into [`LlmEvent`]s: what a format's `decode.rs`
/// implements, sans-IO. `event` is the SSE event name or the AWS event type (empty for
/// NDJSON), `data` the event's payload.
pub(crate) trait EventDecoder: Send + Sync + fmt::Debug {
    /// Decodes one framed event, appending the events it completes.
    fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError>;
    /// The body ended: an error when the format's end-of-message marker was not seen.
    fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError>;
    /// Decodes a whole, non-streamed JSON response body.
    fn decode_whole(&mut self, text: &str, out: &mut Vec<LlmEvent>) -> Result<(), LlmError>;
    /// Whether the end-of-message marker has been seen.
    fn is_done(&self) -> bool;
}

/// How a format's body is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-Sent Events (Anthropic, OpenAI, Gemini).
    Sse,
    /// Newline-delimited JSON (Ollama): each line is one event's data.
    Lines,
    /// The AWS binary event stream (Bedrock): each message is one event.
    EventStream,
}

impl Framing {
    /// The content type of a streamed body in this framing.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Framing::Sse => "text/event-stream",
            Framing::Lines => "application/x-ndjson",
            Framing::EventStream => "application/vnd.amazon.eventstream",
        }
    }
}

/// The sans-IO decoder of one streamed response: SSE framing plus the provider's event format.
///
/// Feed it the body bytes in any chunking; it appends the completed [`LlmEvent`]s.
///
/// ```
/// use agent_loop::{LlmEvent};
/// use agent_loop::wire::{WireDecoder, WireFormat};
///
/// let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
///              data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
///              data: [DONE]\n\n";
/// let mut decoder = WireDecoder::new(WireFormat::OpenAiChat);
/// let mut events = Vec::new();
/// for chunk in body.chunks(7) {
///     decoder.push(chunk, &mut events)?;
/// }
/// decoder.finish(&mut events)?;
/// assert!(events.iter().any(|e| matches!(e, LlmEvent::TextDelta { text, .. } if text == "Hi")));
/// assert!(matches!(events.last(), Some(LlmEvent::MessageStop { .. })));
/// # Ok::<(), agent_loop::LlmError>(())
/// ```
#[derive(Debug)]
pub struct WireDecoder {
    framing: Framer,
    inner: Box<dyn EventDecoder>,
    /// The first error; once set, every call returns it again.
    error: Option<LlmError>,
}

/// The framing's decoder, with its buffer.
#[derive(Debug)]
enum Framer {
    /// Server-Sent Events (Anthropic, OpenAI, Gemini).
    Sse(SseDecoder),
    /// Newline-delimited JSON (Ollama): each line is one event's data.
    Lines(LineDecoder),
    /// The AWS binary event stream (Bedrock): each message is one event.
    EventStream(EventStreamDecoder),
}

impl WireDecoder {
    /// A decoder of `inner`'s events in `framing`, each framing bounded by `limits`.
    pub(crate) fn from_parts(
        framing: Framing,
        inner: Box<dyn EventDecoder>,
        limits: StreamLimits,
    ) -> Self {
        let framing = match framing {
            Framing::Sse => Framer::Sse(SseDecoder::with_limits(limits.sse())),
            Framing::Lines => Framer::Lines(LineDecoder::new(limits.max_line_bytes)),
            Framing::EventStream => {
                Framer::EventStream(EventStreamDecoder::new(limits.max_event_bytes))
            }
        };
        WireDecoder {
            framing,
            inner,
            error: None,
        }
    }

    /// Decodes one chunk of the body, appending the events it completes. Never panics.
    ///
    /// After an error the decoder is spent: later calls return the same error.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let WireDecoder { framing, inner, .. } = self;
        let result = match framing {
            Framer::Sse(sse) => {
                sse.push_with(chunk, |event| inner.on_event(event.event, event.data, out))
            }
            Framer::Lines(lines) => lines.push_with(chunk, |line| inner.on_event("", line, out)),
            Framer::EventStream(messages) => {
                messages.push_with(chunk, |event, data| inner.on_event(event, data, out))
            }
        };
        self.remember(result)
    }

    fn remember(&mut self, result: Result<(), LlmError>) -> Result<(), LlmError> {
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    /// Ends the body: dispatches a pending last event and errors if the stream ended before
    /// the provider's end-of-message marker ([`LlmError::Incomplete`]).
    pub fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let WireDecoder { framing, inner, .. } = self;
        // An event dispatched only because the body ended was cut off in transit when it does
        // not parse: that is a truncated stream, not a malformed one.
        let cut_off = |e| match e {
            LlmError::Malformed { message } => {
                LlmError::incomplete(format!("the body ended inside an event ({message})"))
            }
            other => other,
        };
        let result = match framing {
            Framer::Sse(sse) => sse.finish_with(|event| {
                inner
                    .on_event(event.event, event.data, out)
                    .map_err(cut_off)
            }),
            Framer::Lines(lines) => {
                lines.finish_with(|line| inner.on_event("", line, out).map_err(cut_off))
            }
            Framer::EventStream(messages) => messages.finish(),
        };
        let result = result.and_then(|()| inner.finish(out));
        self.remember(result)
    }

    /// Decodes a whole, non-streamed response body: the JSON message (Anthropic
    /// `{"type":"message", …}`, OpenAI `{"object":"chat.completion", …}` or
    /// `{"object":"response", …}`) that some servers and
    /// proxies send in answer to a streaming request. Appends the same events a stream with
    /// the same content gives, ending with [`LlmEvent::MessageStop`]. A body that is the
    /// provider's error object gives the same error an in-stream error event would. Never
    /// panics.
    ///
    /// ```
    /// use agent_loop::{LlmEvent};
    /// use agent_loop::wire::{StreamAssembler, WireDecoder, WireFormat};
    ///
    /// let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m",
    ///     "content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
    ///     "stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}"#;
    /// let mut events = Vec::new();
    /// WireDecoder::new(WireFormat::Anthropic).decode_json(body, &mut events)?;
    /// let mut assembler = StreamAssembler::new();
    /// for event in &events {
    ///     assembler.push(event)?;
    /// }
    /// assert_eq!(assembler.finish()?.message.text(), "Hi");
    /// # Ok::<(), agent_loop::LlmError>(())
    /// ```
    pub fn decode_json(&mut self, body: &[u8], out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = match std::str::from_utf8(body) {
            Err(e) => Err(LlmError::malformed(format!(
                "the JSON response body is not UTF-8: {e}"
            ))),
            Ok(text) => self.inner.decode_whole(text, out),
        };
        self.remember(result)
    }

    /// Whether the provider's end-of-message marker has been seen.
    pub fn is_done(&self) -> bool {
        self.inner.is_done()
    }
}

/// Implements [`EventDecoder`] for a format's decoder by its inherent methods of the same
/// names (`on_event`, `finish`, `decode_whole`, `is_done`).
macro_rules! event_decoder {
    ($decoder:ty) => {
        impl $crate::wire::decoder::EventDecoder for $decoder {
            fn on_event(
                &mut self,
                event: &str,
                data: &str,
                out: &mut Vec<$crate::wire::LlmEvent>,
            ) -> Result<(), $crate::error::LlmError> {
                <$decoder>::on_event(self, event, data, out)
            }
            fn finish(
                &mut self,
                out: &mut Vec<$crate::wire::LlmEvent>,
            ) -> Result<(), $crate::error::LlmError> {
                <$decoder>::finish(self, out)
            }
            fn decode_whole(
                &mut self,
                text: &str,
                out: &mut Vec<$crate::wire::LlmEvent>,
            ) -> Result<(), $crate::error::LlmError> {
                <$decoder>::decode_whole(self, text, out)
            }
            fn is_done(&self) -> bool {
                <$decoder>::is_done(self)
            }
        }
    };
}
pub(crate) use event_decoder;
