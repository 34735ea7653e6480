//! A sans-IO, incremental decoder for `text/event-stream` bodies (Server-Sent Events).
//!
//! It follows the WHATWG HTML "Interpreting an event stream" rules
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>);
//! the steps are quoted beside the lines that implement them.
//!
//! Feed it body bytes in any chunking with [`SseDecoder::push`]; each completed event is handed
//! out once. The whole lines of a chunk are validated as UTF-8 in one SIMD pass and parsed in
//! place as `str`; lines are split with `memchr`, and an `event:` line that repeats the current
//! event type is recognised by comparison alone. A one-line event's data is handed out
//! borrowed from the chunk; only the unterminated tail of a chunk is copied into the line
//! buffer. Line and event sizes are bounded by [`SseLimits`]; exceeding one is an
//! [`LlmError::LimitExceeded`].

use std::borrow::Cow;

use crate::error::LlmError;

/// Size limits of the SSE decoder, in bytes.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// Longest line, terminator excluded (default 4 MiB).
    pub max_line_bytes: usize,
    /// Largest data of one event (default 8 MiB), counted as decoded: an invalid UTF-8
    /// sequence counts as the 3 bytes of its U+FFFD replacement.
    pub max_event_bytes: usize,
}

impl Default for SseLimits {
    fn default() -> Self {
        SseLimits {
            max_line_bytes: 4 << 20,
            max_event_bytes: 8 << 20,
        }
    }
}

impl SseLimits {
    /// Limits with the given line and event sizes.
    pub fn new(max_line_bytes: usize, max_event_bytes: usize) -> Self {
        SseLimits {
            max_line_bytes,
            max_event_bytes,
        }
    }
}

/// One dispatched event, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type (`message` when the stream named none).
    pub event: String,
    /// The data lines joined with `\n`.
    pub data: String,
    /// The last event id seen so far, if any.
    pub id: Option<String>,
    /// The `retry` value sent with this event, in milliseconds.
    pub retry: Option<u64>,
}

/// One dispatched event, borrowed from the decoder's buffers (no allocation when the bytes
/// are valid UTF-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// The event type (`message` when the stream named none).
    pub event: &'a str,
    /// The data lines joined with `\n`.
    pub data: &'a str,
    /// The last event id seen so far, if any.
    pub id: Option<&'a str>,
    /// The `retry` value sent with this event, in milliseconds.
    pub retry: Option<u64>,
}

impl SseEventRef<'_> {
    /// An owned copy.
    pub fn to_owned_event(&self) -> SseEvent {
        SseEvent {
            event: self.event.to_owned(),
            data: self.data.to_owned(),
            id: self.id.map(str::to_owned),
            retry: self.retry,
        }
    }
}

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// The incremental SSE decoder.
///
/// ```
/// use agent_loop::wire::sse::SseDecoder;
///
/// let mut decoder = SseDecoder::new();
/// let mut events = Vec::new();
/// decoder.push(b"event: ping\r\ndata: {\"a\":", &mut events)?;
/// assert!(events.is_empty()); // the event is not complete yet
/// decoder.push(b"1}\r\n\r\n", &mut events)?;
/// assert_eq!(events[0].event, "ping");
/// assert_eq!(events[0].data, "{\"a\":1}");
/// # Ok::<(), agent_loop::LlmError>(())
/// ```
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The unterminated tail of the current line. Invariant: holds no CR or LF byte, and at
    /// most `limits.max_line_bytes` bytes.
    line: Vec<u8>,
    /// The event being built from the lines seen so far.
    builder: EventBuilder,
    /// The previous chunk ended in CR: an LF at the start of the next chunk belongs to it.
    skip_lf: bool,
    /// How many bytes of a leading BOM have been matched; `BOM_DONE` once decided.
    bom_matched: u8,
    /// Set by the first error; the decoder is spent and returns it again.
    error: Option<LlmError>,
    limits: SseLimits,
}

const BOM_DONE: u8 = u8::MAX;

#[derive(Debug, Default)]
struct EventBuilder {
    /// The data buffer: data lines joined by LF, without the spec's trailing LF.
    /// Invariant: at most `max_event_bytes` bytes.
    data: String,
    /// Whether a `data` field was seen since the last dispatch (`data:` with an empty value
    /// still makes an event).
    has_data: bool,
    /// The event type buffer (empty means `message`). Kept, not cleared, between events while
    /// `event_set` is false, so a stream that names the same event type over and over copies
    /// it once, not once per event.
    event_type: String,
    /// Whether an `event` field was seen since the last dispatch (the spec's buffer is
    /// non-empty).
    event_set: bool,
    /// The last event id buffer; survives dispatches, as the spec says.
    last_id: Option<String>,
    /// A `retry` value seen since the last dispatch.
    retry: Option<u64>,
    max_event_bytes: usize,
}

impl SseDecoder {
    /// A decoder with the default [`SseLimits`].
    pub fn new() -> Self {
        Self::with_limits(SseLimits::default())
    }

    /// A decoder with the given limits.
    pub fn with_limits(limits: SseLimits) -> Self {
        SseDecoder {
            limits,
            builder: EventBuilder {
                max_event_bytes: limits.max_event_bytes,
                ..EventBuilder::default()
            },
            ..SseDecoder::default()
        }
    }

    /// Decodes a chunk, appending the events it completes to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        self.push_with(chunk, |e| {
            out.push(e.to_owned_event());
            Ok(())
        })
    }

    /// Ends the body: an unterminated last line counts as terminated and a pending event is
    /// dispatched (servers and the official SDKs' fixtures end that way).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        self.finish_with(|e| {
            out.push(e.to_owned_event());
            Ok(())
        })
    }

    /// Decodes a chunk, calling `on_event` with each completed event, borrowed.
    ///
    /// An error from `on_event` stops decoding and is returned; like a decoding error it
    /// leaves the decoder spent.
    pub fn push_with<F>(&mut self, chunk: &[u8], mut on_event: F) -> Result<(), LlmError>
    where
        F: FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = self.push_inner(chunk, &mut on_event);
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    /// [`finish`](Self::finish) with a callback, like [`push_with`](Self::push_with).
    pub fn finish_with<F>(&mut self, mut on_event: F) -> Result<(), LlmError>
    where
        F: FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = self.finish_inner(&mut on_event);
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    fn push_inner(
        &mut self,
        mut chunk: &[u8],
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        // "The stream must then be parsed by ... the UTF-8 decode algorithm", which strips
        // one leading BOM. It may arrive split across chunks.
        if self.bom_matched != BOM_DONE {
            while let Some((&b, rest)) = chunk.split_first() {
                let matched = usize::from(self.bom_matched);
                if b == BOM[matched] {
                    chunk = rest;
                    self.bom_matched += 1;
                    if usize::from(self.bom_matched) == BOM.len() {
                        self.bom_matched = BOM_DONE;
                        break;
                    }
                } else {
                    self.line.extend_from_slice(&BOM[..matched]);
                    self.bom_matched = BOM_DONE;
                    break;
                }
            }
            if self.bom_matched != BOM_DONE {
                return Ok(()); // everything so far could still be a BOM
            }
        }

        // "a single U+000D CARRIAGE RETURN U+000A LINE FEED (CRLF) character pair": when the
        // CR ended the previous chunk, its LF starts this one.
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        let Some(&last) = chunk.last() else {
            return Ok(());
        };
        // A CR is always a line end; ending the chunk, it may be the first half of a CRLF.
        self.skip_lf = last == b'\r';

        // A line whose start an earlier chunk left in the line buffer ends at the first
        // terminator of this one.
        if !self.line.is_empty() {
            let Some((end, next)) = line_at(chunk, 0) else {
                return self.buffer_tail(chunk);
            };
            check_line(self.line.len() + end, &self.limits)?;
            self.line.extend_from_slice(&chunk[..end]);
            let result = self.builder.line(&utf8_lossy(&self.line), on_event);
            self.line.clear();
            result?;
            chunk = chunk.get(next..).unwrap_or_default();
        }

        // Everything up to the last terminator is whole lines; the rest is the start of a
        // line that goes on in the next chunk.
        let Some(last) = memchr::memrchr2(b'\n', b'\r', chunk) else {
            return self.buffer_tail(chunk);
        };
        let (lines, tail) = chunk.split_at(last + 1);
        // The lines are validated as one piece: one SIMD pass per chunk rather than one per
        // event (a character split across chunks sits in the tail). Only when that fails is
        // each line decoded on its own, replacing invalid UTF-8 with U+FFFD; splitting on CR
        // and LF before decoding is equivalent to decoding first because they never occur
        // inside a multi-byte sequence.
        match simdutf8::basic::from_utf8(lines) {
            Ok(text) => self.whole_lines(text, on_event)?,
            Err(_) => self.whole_lines_lossy(lines, on_event)?,
        }
        self.buffer_tail(tail)
    }

    /// Processes `text`, which is whole lines (it ends with a terminator).
    fn whole_lines(
        &mut self,
        text: &str,
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        let bytes = text.as_bytes();
        let mut pos = 0;
        // The value of a `data` line that is only borrowed so far: the usual one-line event
        // is dispatched straight from the chunk, without copying its data.
        let mut borrowed: Option<&str> = None;
        loop {
            // Streams name the same event type over and over (`event: content_block_delta`):
            // a line that names the current type again is recognised by comparison, without
            // a search for its end.
            if let Some((len, next)) = self
                .builder
                .repeated_event_line(bytes.get(pos..).unwrap_or_default())
            {
                check_line(len, &self.limits)?;
                if let Some(data) = borrowed.take() {
                    self.builder.append_data(data)?;
                }
                self.builder.event_set = true;
                pos += next;
                continue;
            }
            let Some((end, next)) = line_at(bytes, pos) else {
                break;
            };
            // Terminators are ASCII, so they sit on character boundaries.
            let line = text.get(pos..end).unwrap_or_default();
            check_line(line.len(), &self.limits)?;
            match borrowed.take() {
                Some(data) if line.is_empty() => {
                    self.builder.dispatch_with(Some(data), on_event)?;
                }
                pending => {
                    if let Some(data) = pending {
                        self.builder.append_data(data)?;
                    }
                    match line.strip_prefix("data:") {
                        Some(value) if !self.builder.has_data => {
                            let value = value.strip_prefix(' ').unwrap_or(value);
                            self.builder.check_data(value.len())?;
                            borrowed = Some(value);
                        }
                        _ => self.builder.line(line, on_event)?,
                    }
                }
            }
            pos = next;
        }
        if let Some(data) = borrowed {
            // The event goes on in the next chunk: keep its data.
            self.builder.append_data(data)?;
        }
        Ok(())
    }

    /// [`whole_lines`](Self::whole_lines) for bytes that are not valid UTF-8: each line is
    /// decoded with replacement characters (the line limit counts the bytes received).
    fn whole_lines_lossy(
        &mut self,
        bytes: &[u8],
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        let mut pos = 0;
        while let Some((end, next)) = line_at(bytes, pos) {
            let line = &bytes[pos..end];
            check_line(line.len(), &self.limits)?;
            self.builder
                .line(&String::from_utf8_lossy(line), on_event)?;
            pos = next;
        }
        Ok(())
    }

    /// Keeps the unterminated start of a line for the next chunk.
    fn buffer_tail(&mut self, tail: &[u8]) -> Result<(), LlmError> {
        if !tail.is_empty() {
            check_line(self.line.len() + tail.len(), &self.limits)?;
            self.line.extend_from_slice(tail);
        }
        Ok(())
    }

    fn finish_inner(
        &mut self,
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        if self.bom_matched != BOM_DONE {
            // A body of only part of a BOM: those bytes were content after all.
            let matched = usize::from(self.bom_matched);
            self.line.extend_from_slice(&BOM[..matched]);
            self.bom_matched = BOM_DONE;
        }
        if !self.line.is_empty() {
            let result = self.builder.line(&utf8_lossy(&self.line), on_event);
            self.line.clear();
            result?;
        }
        // The spec discards a pending event at end of file; real servers and the official SDK
        // fixtures end without the final blank line, so a pending event is dispatched.
        self.builder.dispatch(on_event)?;
        self.skip_lf = false;
        Ok(())
    }
}

/// `String::from_utf8_lossy`, with a SIMD validation first: the lossy path walks the bytes
/// in chunks and was the largest single cost of decoding valid input.
fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The line of `bytes` that starts at `pos`: where it ends and where the next one starts, or
/// `None` when no terminator follows `pos`.
fn line_at(bytes: &[u8], pos: usize) -> Option<(usize, usize)> {
    let &first = bytes.get(pos)?;
    // A blank line (an event's end) is found without a search.
    let end = if first == b'\n' || first == b'\r' {
        pos
    } else {
        pos + memchr::memchr2(b'\n', b'\r', bytes.get(pos..)?)?
    };
    // "Lines must be separated by either a U+000D CARRIAGE RETURN U+000A LINE FEED (CRLF)
    // character pair, a single U+000A LINE FEED (LF) character, or a single U+000D CARRIAGE
    // RETURN (CR) character."
    let next = match bytes.get(end..end + 2) {
        Some(b"\r\n") => end + 2,
        _ => end + 1,
    };
    Some((end, next))
}

/// A line's field name and value (the value without its one leading space).
fn split_field(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    // Field names are short: a plain look at the first bytes finds the colon of `data:` or
    // `event:` sooner than a vectorized search of the whole line would start.
    let colon = match bytes.iter().take(8).position(|&b| b == b':') {
        Some(i) => Some(i),
        None => memchr::memchr(b':', bytes),
    };
    match colon {
        // The colon is ASCII, so both sides of it are character boundaries.
        Some(i) => {
            let field = line.get(..i).unwrap_or_default();
            let value = line.get(i + 1..).unwrap_or_default();
            (field, value.strip_prefix(' ').unwrap_or(value))
        }
        None => (line, ""),
    }
}

fn check_line(len: usize, limits: &SseLimits) -> Result<(), LlmError> {
    if len > limits.max_line_bytes {
        return Err(LlmError::LimitExceeded {
            what: "an SSE line".into(),
            limit: limits.max_line_bytes,
            setting: "StreamLimits::max_line_bytes".into(),
        });
    }
    Ok(())
}

impl EventBuilder {
    /// Processes one complete line (terminator removed).
    fn line(
        &mut self,
        line: &str,
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        // "If the line is empty (a blank line): Dispatch the event."
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        // "If the line starts with a U+003A COLON character (:): Ignore the line."
        if line.starts_with(':') {
            return Ok(());
        }
        // "If the line contains a U+003A COLON character (:): Collect the characters on the
        // line before the first U+003A COLON character (:), and let field be that string.
        // Collect the characters on the line after the first U+003A COLON character (:), and
        // let value be that string. If value starts with a U+0020 SPACE character, remove it
        // from value." Otherwise "the whole line as the field name, and the empty string as
        // the field value."
        let (field, value) = split_field(line);
        match field {
            // "Append the field value to the data buffer, then append a single U+000A LINE
            // FEED (LF) character to the data buffer." (The trailing LF is removed again at
            // dispatch, so it is written only between lines here.)
            "data" => self.append_data(value)?,
            // "Set the event type buffer to field value."
            "event" => {
                if self.event_type != value {
                    self.event_type.clear();
                    self.event_type.push_str(value);
                }
                self.event_set = true;
            }
            // "If the field value does not contain U+0000 NULL, then set the last event ID
            // buffer to the field value. Otherwise, ignore the field."
            "id" if !value.contains('\0') => {
                self.last_id = Some(value.to_owned());
            }
            // "If the field value consists of only ASCII digits, then interpret the field value
            // as an integer in base ten ... Otherwise, ignore the field."
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // All digits, so only overflow can fail; an absurd value is ignored.
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(ms);
                }
            }
            // "Otherwise: The field is ignored."
            _ => {}
        }
        Ok(())
    }

    /// When `rest` starts with an `event` line that names the current event type again
    /// (`event: <type>` and a terminator), that line's length and the offset after its
    /// terminator.
    fn repeated_event_line(&self, rest: &[u8]) -> Option<(usize, usize)> {
        if self.event_type.is_empty() {
            return None;
        }
        let after = rest
            .strip_prefix(b"event: ")?
            .strip_prefix(self.event_type.as_bytes())?;
        let len = rest.len() - after.len();
        match after {
            [b'\r', b'\n', ..] => Some((len, len + 2)),
            [b'\n' | b'\r', ..] => Some((len, len + 1)),
            _ => None,
        }
    }

    /// Checks that appending a data value of `len` bytes stays within the event limit.
    fn check_data(&self, len: usize) -> Result<(), LlmError> {
        let extra = usize::from(self.has_data) + len;
        if self.data.len() + extra > self.max_event_bytes {
            return Err(LlmError::LimitExceeded {
                what: "an SSE event".into(),
                limit: self.max_event_bytes,
                setting: "StreamLimits::max_event_bytes".into(),
            });
        }
        Ok(())
    }

    /// "Append the field value to the data buffer, then append a single U+000A LINE FEED (LF)
    /// character to the data buffer." (The trailing LF is removed again at dispatch, so it is
    /// written only between lines here.)
    fn append_data(&mut self, value: &str) -> Result<(), LlmError> {
        self.check_data(value.len())?;
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(value);
        self.has_data = true;
        Ok(())
    }

    fn dispatch(
        &mut self,
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        self.dispatch_with(None, on_event)
    }

    /// Dispatches the event; `borrowed` is its whole data when it was never copied into the
    /// data buffer (a single data line, borrowed from the chunk).
    fn dispatch_with(
        &mut self,
        borrowed: Option<&str>,
        on_event: &mut dyn FnMut(SseEventRef<'_>) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        let has_data = self.has_data || borrowed.is_some();
        // "If the data buffer is an empty string, set the data buffer and the event type
        // buffer to the empty string and return."
        if !has_data {
            self.event_set = false;
            self.retry = None;
            return Ok(());
        }
        let data = borrowed.unwrap_or(&self.data);
        // "Initialize event's type attribute to "message" ... If the event type buffer has a
        // value other than the empty string, change the type of the newly created event to
        // equal the value of the event type buffer."
        let event: &str = if !self.event_set || self.event_type.is_empty() {
            "message"
        } else {
            &self.event_type
        };
        let result = on_event(SseEventRef {
            event,
            data,
            id: self.last_id.as_deref(),
            retry: self.retry,
        });
        // "Set the data buffer and the event type buffer to the empty string."
        self.data.clear();
        self.event_set = false;
        self.has_data = false;
        self.retry = None;
        result
    }
}

/// One Server-Sent Event to write: the sans-IO inverse of [`SseDecoder`].
///
/// Build it from its data, name it with [`event`](Self::event), number it with
/// [`id`](Self::id), then write it with [`write_to`](Self::write_to) (appending to a byte
/// buffer) or [`to_string`](ToString::to_string). The frame is `id:`, `event:`, `retry:` (each
/// when set), one `data:` line per line of the data, and a blank line.
///
/// What [`SseDecoder`] (or a browser's `EventSource`) reads back is what was written, except
/// where the format cannot carry it:
/// - the data's line breaks (CRLF, CR or LF) come back as LF: each line of the data is a
///   `data:` line of its own, as the WHATWG rules ask;
/// - a CR or LF in the event name or the id (which would end the field early and let the rest
///   pass for fields of its own) is left out, and so is a NUL in the id (a reader ignores an
///   id that has one);
/// - an unnamed event (or one named `""`) is read as `message`; an event without an id reads
///   the last id the stream sent, as the rules say.
///
/// ```
/// use agent_loop::wire::sse::{SseDecoder, SseFrame};
///
/// let mut body = Vec::new();
/// SseFrame::new("{\"a\":1}").event("delta").id("7").write_to(&mut body);
/// SseFrame::new("two\nlines").write_to(&mut body);
/// assert_eq!(body, b"id: 7\nevent: delta\ndata: {\"a\":1}\n\ndata: two\ndata: lines\n\n");
///
/// // A line break cannot slip into a field of its own.
/// assert_eq!(SseFrame::new("x").event("a\ndata: b").to_string(), "event: adata: b\ndata: x\n\n");
///
/// let mut events = Vec::new();
/// let mut decoder = SseDecoder::new();
/// decoder.push(&body, &mut events)?;
/// assert_eq!((events[0].event.as_str(), events[0].data.as_str()), ("delta", "{\"a\":1}"));
/// assert_eq!(events[0].id.as_deref(), Some("7"));
/// assert_eq!((events[1].event.as_str(), events[1].data.as_str()), ("message", "two\nlines"));
/// # Ok::<(), agent_loop::LlmError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseFrame<'a> {
    data: &'a str,
    event: Option<&'a str>,
    id: Option<&'a str>,
    retry: Option<u64>,
}

impl<'a> SseFrame<'a> {
    /// An unnamed event (read as `message`) carrying `data`.
    pub fn new(data: &'a str) -> Self {
        SseFrame {
            data,
            event: None,
            id: None,
            retry: None,
        }
    }

    /// Names the event (`event: {name}`); CR and LF are left out of the name.
    pub fn event(mut self, name: &'a str) -> Self {
        self.event = Some(name);
        self
    }

    /// Gives the event an id (`id: {id}`), what a reconnecting client sends back as
    /// `Last-Event-ID`; CR, LF and NUL are left out of it.
    pub fn id(mut self, id: &'a str) -> Self {
        self.id = Some(id);
        self
    }

    /// Asks the client to wait this long before it reconnects (`retry: {ms}`).
    pub fn retry(mut self, ms: u64) -> Self {
        self.retry = Some(ms);
        self
    }

    /// Appends the frame to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        // Writing to a `Vec` cannot fail.
        let _ = self.write_with(&mut |piece| {
            out.extend_from_slice(piece.as_bytes());
            Ok(())
        });
    }

    /// Hands out the frame's text in pieces.
    fn write_with(&self, put: &mut dyn FnMut(&str) -> std::fmt::Result) -> std::fmt::Result {
        if let Some(id) = self.id {
            put("id: ")?;
            put_without(id, &['\r', '\n', '\0'], put)?;
            put("\n")?;
        }
        if let Some(event) = self.event {
            put("event: ")?;
            put_without(event, &['\r', '\n'], put)?;
            put("\n")?;
        }
        if let Some(ms) = self.retry {
            put("retry: ")?;
            put(&ms.to_string())?;
            put("\n")?;
        }
        // "Lines must be separated by either a CRLF pair, a single LF or a single CR": each
        // line of the data is a `data:` line, which the reader joins again with LF.
        let mut rest = self.data;
        loop {
            put("data: ")?;
            match memchr::memchr2(b'\r', b'\n', rest.as_bytes()) {
                Some(end) => {
                    // CR and LF are ASCII, so they sit on character boundaries.
                    put(rest.get(..end).unwrap_or_default())?;
                    put("\n")?;
                    let next = if rest.as_bytes().get(end..end + 2) == Some(b"\r\n") {
                        end + 2
                    } else {
                        end + 1
                    };
                    rest = rest.get(next..).unwrap_or_default();
                }
                None => {
                    put(rest)?;
                    put("\n")?;
                    break;
                }
            }
        }
        put("\n")
    }
}

impl std::fmt::Display for SseFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write_with(&mut |piece| f.write_str(piece))
    }
}

/// Hands out `text` without the characters `left_out`.
fn put_without(
    text: &str,
    left_out: &[char],
    put: &mut dyn FnMut(&str) -> std::fmt::Result,
) -> std::fmt::Result {
    text.split(left_out).try_for_each(put)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c, &mut out).unwrap();
        }
        d.finish(&mut out).unwrap();
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
            retry: None,
        }
    }

    #[test]
    fn all_three_line_endings() {
        let out = decode_all(&[b"data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\r\n\n"]);
        assert_eq!(
            out,
            vec![
                ev("message", "a"),
                ev("message", "b"),
                ev("message", "c"),
                ev("message", "d")
            ]
        );
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        let out = decode_all(&[b"data: a\r", b"\n", b"\r", b"\ndata: b\r", b"\r\n"]);
        assert_eq!(out, vec![ev("message", "a"), ev("message", "b")]);
    }

    #[test]
    fn bom_is_stripped_even_when_split() {
        let out = decode_all(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]);
        assert_eq!(out, vec![ev("message", "x")]);
        // Only one BOM is stripped; a second one is content of the field name.
        let out = decode_all(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n"]);
        assert!(out.is_empty());
    }

    #[test]
    fn partial_bom_then_other_bytes_is_content() {
        let out = decode_all(&[b"\xEF", b"data: x\n\n"]);
        assert!(out.is_empty(), "field name starts with a stray byte");
        let out = decode_all(&[b"\xEF\xBB"]);
        assert!(out.is_empty());
    }

    #[test]
    fn comments_fields_without_colon_and_space_rules() {
        let out = decode_all(&[b": keep-alive\ndata\n\ndata:no-space\ndata:  two\n\n"]);
        assert_eq!(
            out,
            vec![ev("message", ""), ev("message", "no-space\n two")]
        );
    }

    #[test]
    fn event_id_and_retry_fields() {
        let out = decode_all(&[
            b"event: add\nid: 7\nretry: 1500\ndata: x\n\nretry: 1a\nid: b\0ad\ndata: y\n\n",
            // Only ASCII digits: Rust's integer parsing would take the `+`, the spec does not.
            b"retry: +25\ndata: z\n\n",
        ]);
        assert_eq!(
            out,
            vec![
                SseEvent {
                    event: "add".into(),
                    data: "x".into(),
                    id: Some("7".into()),
                    retry: Some(1500)
                },
                SseEvent {
                    event: "message".into(),
                    data: "y".into(),
                    id: Some("7".into()),
                    retry: None
                },
                SseEvent {
                    event: "message".into(),
                    data: "z".into(),
                    id: Some("7".into()),
                    retry: None
                },
            ]
        );
    }

    #[test]
    fn a_repeated_event_line_ends_exactly_at_its_terminator() {
        // The repeat of `event: paid` takes the fast path: it must skip exactly the line and its
        // terminator, or the tail `id` would be read as an `id` field.
        for nl in ["\n", "\r\n", "\r"] {
            let body = format!("event: paid{nl}data: 1{nl}{nl}event: paid{nl}data: 2{nl}{nl}");
            let out = decode_all(&[body.as_bytes()]);
            assert_eq!(out, vec![ev("paid", "1"), ev("paid", "2")], "{nl:?}");
        }
    }

    #[test]
    fn a_repeated_event_line_is_held_to_the_line_limit() {
        // `event:abc` (9 bytes) sets the type; the repeat `event: abc` is 10 bytes.
        let mut d = SseDecoder::with_limits(SseLimits::new(9, 64));
        let mut out = Vec::new();
        d.push(
            b"event:abc
data: 1

",
            &mut out,
        )
        .unwrap();
        assert_eq!(out, vec![ev("abc", "1")]);
        let err = d
            .push(
                b"event: abc
data: 2

",
                &mut out,
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::LimitExceeded {
                    limit: 9,
                    ref what,
                    ..
                } if what == "an SSE line"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_repeated_event_type_is_told_from_a_longer_one() {
        let body = b"event: ab\ndata: 1\n\nevent: ab\r\ndata: 2\n\nevent: abc\ndata: 3\n\n\
                     event: ab \ndata: 4\n\nevent: ab\rdata: 5\n\nevent: ab:\ndata: 6\n\n";
        let want = vec![
            ev("ab", "1"),
            ev("ab", "2"),
            ev("abc", "3"),
            ev("ab ", "4"),
            ev("ab", "5"),
            ev("ab:", "6"),
        ];
        for cut in 0..=body.len() {
            assert_eq!(
                decode_all(&[&body[..cut], &body[cut..]]),
                want,
                "cut at {cut}"
            );
        }
        assert_eq!(decode_all(&[body.as_slice()]), want);
    }

    #[test]
    fn no_dispatch_without_data_and_event_type_resets() {
        let out = decode_all(&[b"event: a\n\ndata: x\n\n"]);
        assert_eq!(out, vec![ev("message", "x")]);
    }

    #[test]
    fn utf8_split_across_chunks_and_invalid_bytes_replaced() {
        let s = "data: héllo €\n\n".as_bytes();
        let out = decode_all(&[&s[..8], &s[8..15], &s[15..]]);
        assert_eq!(out, vec![ev("message", "héllo €")]);
        let out = decode_all(&[b"data: a\xFFb\n\n"]);
        assert_eq!(out, vec![ev("message", "a\u{FFFD}b")]);
    }

    #[test]
    fn unterminated_last_line_dispatches_at_finish() {
        let out = decode_all(&[b"data: a\n\ndata: b"]);
        assert_eq!(out, vec![ev("message", "a"), ev("message", "b")]);
    }

    #[test]
    fn oversize_line_and_event_name_the_limit() {
        let mut d = SseDecoder::with_limits(SseLimits::new(16, 32));
        let mut out = Vec::new();
        let err = d.push(&[b'x'; 17], &mut out).unwrap_err();
        assert!(err.to_string().contains("16 bytes"), "{err}");
        // spent: the same error again
        assert_eq!(d.push(b"\n\n", &mut out).unwrap_err(), err);

        let mut d = SseDecoder::with_limits(SseLimits::new(16, 32));
        let err = d
            .push(
                b"data: 0123456789\ndata: 0123456789\ndata: 0123456789\ndata: 0\n",
                &mut out,
            )
            .unwrap_err();
        assert!(
            matches!(err, LlmError::LimitExceeded { limit: 32, .. }),
            "{err}"
        );
    }

    #[test]
    fn oversize_line_split_across_chunks_is_refused_before_it_ends() {
        let mut d = SseDecoder::with_limits(SseLimits::new(16, 32));
        let mut out = Vec::new();
        d.push(&[b'x'; 10], &mut out).unwrap();
        assert!(d.push(&[b'x'; 10], &mut out).is_err());
    }

    #[test]
    fn frames_are_written_field_by_field() {
        assert_eq!(SseFrame::new("x").to_string(), "data: x\n\n");
        assert_eq!(SseFrame::new("").to_string(), "data: \n\n");
        assert_eq!(
            SseFrame::new("a\r\nb\rc\n")
                .event("e")
                .id("1")
                .retry(5)
                .to_string(),
            "id: 1\nevent: e\nretry: 5\ndata: a\ndata: b\ndata: c\ndata: \n\n"
        );
        assert_eq!(
            SseFrame::new("x").id("a\r\n\0b").to_string(),
            "id: ab\ndata: x\n\n"
        );
        let mut out = b"before ".to_vec();
        SseFrame::new("x").write_to(&mut out);
        assert_eq!(out, b"before data: x\n\n");
    }

    #[test]
    fn an_empty_data_still_makes_an_event() {
        let body = SseFrame::new("").event("ping").to_string();
        assert_eq!(decode_all(&[body.as_bytes()]), vec![ev("ping", "")]);
    }

    use proptest::prelude::*;

    /// Text with what matters to the format: line breaks, NUL, colons, spaces, a BOM,
    /// multi-byte characters.
    fn tricky() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z: \r\n\u{0}\u{FEFF}é€]{0,12}", any::<String>(),]
    }

    proptest! {
        /// Any frames written, then read at any chunking, give back their event, data, id
        /// and retry, as far as the format carries them (`SseFrame`'s docs).
        #[test]
        fn written_frames_read_back_at_any_chunking(
            frames in prop::collection::vec(
                (proptest::option::of(tricky()), tricky(), proptest::option::of(tricky()),
                 proptest::option::of(any::<u64>())),
                1..5,
            ),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut body = Vec::new();
            let mut want = Vec::new();
            let mut last_id: Option<String> = None;
            for (event, data, id, retry) in &frames {
                let mut frame = SseFrame::new(data);
                if let Some(event) = event {
                    frame = frame.event(event);
                }
                if let Some(id) = id {
                    frame = frame.id(id);
                    last_id = Some(id.replace(['\r', '\n', '\0'], ""));
                }
                if let Some(ms) = retry {
                    frame = frame.retry(*ms);
                }
                frame.write_to(&mut body);
                let event = event
                    .as_deref()
                    .map(|e| e.replace(['\r', '\n'], ""))
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "message".to_owned());
                want.push(SseEvent {
                    event,
                    data: data.replace("\r\n", "\n").replace('\r', "\n"),
                    id: last_id.clone(),
                    retry: *retry,
                });
            }
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            at.sort_unstable();
            let mut decoder = SseDecoder::new();
            let mut got = Vec::new();
            let mut from = 0;
            for cut in at.into_iter().chain([body.len()]) {
                decoder.push(&body[from..cut], &mut got).unwrap();
                from = cut;
            }
            decoder.finish(&mut got).unwrap();
            prop_assert_eq!(got, want);
        }
    }
}
