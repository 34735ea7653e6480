//! [`WireDecoder`]: a framing (SSE, newline-delimited JSON, AWS event stream) and a provider's
//! event decoder put together, re-exported as [`wire::WireDecoder`](crate::wire::WireDecoder).

use crate::error::LlmError;
use crate::wire::eventstream::EventStreamDecoder;
use crate::wire::lines::LineDecoder;
use crate::wire::sse::SseDecoder;
use crate::wire::{LlmEvent, StreamLimits, WireFormat};

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
    framing: Framing,
    inner: ProviderDecoder,
    /// The first error; once set, every call returns it again.
    error: Option<LlmError>,
}

/// How the body is cut into the provider's events.
#[derive(Debug)]
enum Framing {
    /// Server-Sent Events (Anthropic, OpenAI, Gemini).
    Sse(SseDecoder),
    /// Newline-delimited JSON (Ollama): each line is one event's data.
    Lines(LineDecoder),
    /// The AWS binary event stream (Bedrock): each message is one event.
    EventStream(EventStreamDecoder),
}

#[derive(Debug)]
enum ProviderDecoder {
    Anthropic(super::anthropic::decode::Decoder),
    OpenAi(super::openai::decode::Decoder),
    Responses(super::responses::decode::Decoder),
    Gemini(super::gemini::decode::Decoder),
    Bedrock(super::bedrock::decode::Decoder),
    Ollama(super::ollama::decode::Decoder),
}

impl WireDecoder {
    /// A decoder for `format` with the default [`StreamLimits`].
    pub fn new(format: WireFormat) -> Self {
        Self::with_limits(format, StreamLimits::default())
    }

    /// A decoder for `format` with the given limits.
    pub fn with_limits(format: WireFormat, limits: StreamLimits) -> Self {
        let inner = match format {
            WireFormat::Anthropic => {
                ProviderDecoder::Anthropic(super::anthropic::decode::Decoder::new())
            }
            WireFormat::OpenAiChat => {
                ProviderDecoder::OpenAi(super::openai::decode::Decoder::new())
            }
            WireFormat::OpenAiResponses => {
                ProviderDecoder::Responses(super::responses::decode::Decoder::new())
            }
            WireFormat::Gemini => ProviderDecoder::Gemini(super::gemini::decode::Decoder::new()),
            WireFormat::Bedrock => ProviderDecoder::Bedrock(super::bedrock::decode::Decoder::new()),
            WireFormat::Ollama => ProviderDecoder::Ollama(super::ollama::decode::Decoder::new()),
        };
        let framing = match format {
            WireFormat::Bedrock => {
                Framing::EventStream(EventStreamDecoder::new(limits.max_event_bytes))
            }
            WireFormat::Ollama => Framing::Lines(LineDecoder::new(limits.max_line_bytes)),
            _ => Framing::Sse(SseDecoder::with_limits(limits.sse())),
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
            Framing::Sse(sse) => {
                sse.push_with(chunk, |event| inner.on_event(event.event, event.data, out))
            }
            Framing::Lines(lines) => lines.push_with(chunk, |line| inner.on_event("", line, out)),
            Framing::EventStream(messages) => {
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
            Framing::Sse(sse) => sse.finish_with(|event| {
                inner
                    .on_event(event.event, event.data, out)
                    .map_err(cut_off)
            }),
            Framing::Lines(lines) => {
                lines.finish_with(|line| inner.on_event("", line, out).map_err(cut_off))
            }
            Framing::EventStream(messages) => messages.finish(),
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
            Ok(text) => match &mut self.inner {
                ProviderDecoder::Anthropic(d) => d.decode_whole(text, out),
                ProviderDecoder::OpenAi(d) => d.decode_whole(text, out),
                ProviderDecoder::Responses(d) => d.decode_whole(text, out),
                ProviderDecoder::Gemini(d) => d.decode_whole(text, out),
                ProviderDecoder::Bedrock(d) => d.decode_whole(text, out),
                ProviderDecoder::Ollama(d) => d.decode_whole(text, out),
            },
        };
        self.remember(result)
    }

    /// Whether the provider's end-of-message marker has been seen.
    pub fn is_done(&self) -> bool {
        match &self.inner {
            ProviderDecoder::Anthropic(d) => d.is_done(),
            ProviderDecoder::OpenAi(d) => d.is_done(),
            ProviderDecoder::Responses(d) => d.is_done(),
            ProviderDecoder::Gemini(d) => d.is_done(),
            ProviderDecoder::Bedrock(d) => d.is_done(),
            ProviderDecoder::Ollama(d) => d.is_done(),
        }
    }
}

impl ProviderDecoder {
    fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        match self {
            ProviderDecoder::Anthropic(d) => d.on_event(event, data, out),
            ProviderDecoder::OpenAi(d) => d.on_event(event, data, out),
            ProviderDecoder::Responses(d) => d.on_event(event, data, out),
            ProviderDecoder::Gemini(d) => d.on_event(event, data, out),
            ProviderDecoder::Bedrock(d) => d.on_event(event, data, out),
            ProviderDecoder::Ollama(d) => d.on_event(event, data, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        match self {
            ProviderDecoder::Anthropic(d) => d.finish(out),
            ProviderDecoder::OpenAi(d) => d.finish(out),
            ProviderDecoder::Responses(d) => d.finish(out),
            ProviderDecoder::Gemini(d) => d.finish(out),
            ProviderDecoder::Bedrock(d) => d.finish(out),
            ProviderDecoder::Ollama(d) => d.finish(out),
        }
    }
}
