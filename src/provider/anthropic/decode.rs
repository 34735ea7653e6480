//! Anthropic Messages stream decoding: SSE events → [`LlmEvent`]s.
//!
//! The documented sequence is `message_start`, then per content block `content_block_start`,
//! `content_block_delta`*, `content_block_stop`, then `message_delta` (stop reason, usage) and
//! `message_stop`; `ping` and `error` events may appear anywhere. Unknown event names, block
//! types and delta types are tolerated (the API's versioning policy adds them).
//!
//! Payloads are deserialized into flat borrowed structs: text and JSON fragments without
//! escapes are never copied before they become the event's own `String`.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::LlmError;
use crate::message::{StopReason, Usage};
use crate::provider::CowStr;
use crate::wire::LlmEvent;

/// Every Anthropic stream event in one flat shape; which fields are set depends on `type`.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<CowStr<'a>>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    content_block: Option<&'a RawValue>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
    /// `message_delta`: the context edits the server applied (context editing).
    #[serde(default)]
    context_management: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    text: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    thinking: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    signature: Option<CowStr<'a>>,
    /// `compaction_delta`.
    #[serde(borrow, default)]
    content: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    encrypted_content: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    stop_sequence: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Usage as sent; absent fields leave the running figure unchanged.
#[derive(Deserialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    /// `iterations`: per-pass usage; its `compaction` entries (server compaction's own pass)
    /// are not in the top-level fields. Read leniently: any other shape counts nothing.
    #[serde(default)]
    iterations: Option<serde_json::Value>,
}

impl WireUsage {
    /// Anthropic's usage figures are cumulative: a present field replaces the running one, and
    /// present `iterations` replace the running sum of the compaction passes (`passes`).
    fn apply(&self, usage: &mut Usage, passes: &mut Usage) {
        if let Some(serde_json::Value::Array(iterations)) = &self.iterations {
            *passes = Usage::default();
            let field = |entry: &serde_json::Value, name: &str| {
                entry
                    .get(name)
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0)
            };
            for entry in iterations {
                if entry.get("type").and_then(serde_json::Value::as_str) != Some("compaction") {
                    continue;
                }
                passes.input_tokens = passes
                    .input_tokens
                    .saturating_add(field(entry, "input_tokens"));
                passes.output_tokens = passes
                    .output_tokens
                    .saturating_add(field(entry, "output_tokens"));
                passes.cache_read_input_tokens = passes
                    .cache_read_input_tokens
                    .saturating_add(field(entry, "cache_read_input_tokens"));
                passes.cache_creation_input_tokens = passes
                    .cache_creation_input_tokens
                    .saturating_add(field(entry, "cache_creation_input_tokens"));
            }
        }
        if let Some(v) = self.input_tokens {
            usage.input_tokens = v;
        }
        if let Some(v) = self.output_tokens {
            usage.output_tokens = v;
        }
        if let Some(v) = self.cache_read_input_tokens {
            usage.cache_read_input_tokens = v;
        }
        if let Some(v) = self.cache_creation_input_tokens {
            usage.cache_creation_input_tokens = v;
        }
    }
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    ty: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The start of a content block, for the types the crate models.
#[derive(Deserialize)]
struct BlockStart {
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

/// Decoder state: what has been seen of the message so far.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    done: bool,
    usage: Usage,
    /// The usage of the server compaction passes (`usage.iterations`), which the top-level
    /// figures leave out; added to them in the usage the decoder reports, so a budget counts
    /// what the compaction cost.
    passes: Usage,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    /// A server compaction block being streamed (`compaction` + `compaction_delta`s): sent
    /// whole, as an unmodelled block, at its `content_block_stop`.
    compaction: Option<(usize, serde_json::Value)>,
}

/// The most bytes a streamed compaction block may hold.
const MAX_COMPACTION_BYTES: usize = 16 << 20;

/// A whole, non-streamed Messages response (`{"type":"message", …}`), as some proxies answer a
/// streaming request.
#[derive(Deserialize)]
struct WholeMessage<'a> {
    #[serde(rename = "type", default)]
    ty: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(borrow, default)]
    content: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    stop_sequence: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

/// The input of a whole `tool_use` block.
#[derive(Deserialize)]
struct WholeToolInput<'a> {
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

fn required_index(index: Option<usize>, what: &str) -> Result<usize, LlmError> {
    index.ok_or_else(|| LlmError::malformed(format!("Anthropic {what} event without an index")))
}

crate::wire::decoder::event_decoder!(Decoder);

impl Decoder {
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The usage to report: the top-level figures plus the compaction passes'.
    fn billed(&self) -> Usage {
        let mut usage = self.usage;
        let passes = &self.passes;
        usage.input_tokens = usage.input_tokens.saturating_add(passes.input_tokens);
        usage.output_tokens = usage.output_tokens.saturating_add(passes.output_tokens);
        usage.cache_read_input_tokens = usage
            .cache_read_input_tokens
            .saturating_add(passes.cache_read_input_tokens);
        usage.cache_creation_input_tokens = usage
            .cache_creation_input_tokens
            .saturating_add(passes.cache_creation_input_tokens);
        usage
    }

    pub(crate) fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        if event == "ping" || self.done {
            // Keep-alives carry nothing; anything after message_stop is ignored.
            return Ok(());
        }
        if let Some(delta) = fast_delta(data) {
            out.push(delta);
            return Ok(());
        }
        self.parse_event(event, data, out)
    }

    /// Any event, through serde.
    fn parse_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        // llama.cpp's `/v1/messages` sends an error (its tool-call parser failing on the
        // model's output, say) as `event: error` with the fields at the top level:
        // `{"code":500,"message":…,"type":"server_error"}`. It is read as the OpenAI-style
        // error it is (a status in `code`): as an Anthropic event its string `message` made the
        // server's error a "malformed stream" that hid what the server said.
        if event == "error" {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(data) {
                let anthropic_shape = value.get("error").is_some()
                    || value.get("type").and_then(serde_json::Value::as_str) == Some("error");
                if !anthropic_shape {
                    return Err(crate::provider::openai::decode::stream_error(&value));
                }
            }
        }
        let parsed: Event<'_> = serde_json::from_str(data).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in Anthropic `{event}` event: {e}"))
        })?;
        // The payload's `type` is authoritative; proxies that drop `event:` lines are tolerated.
        let ty = match &parsed.ty {
            Some(t) => t.as_str(),
            None => event,
        };
        match ty {
            "content_block_delta" => {
                let index = required_index(parsed.index, ty)?;
                let Some(delta) = parsed.delta else {
                    return Err(LlmError::malformed(
                        "Anthropic content_block_delta without a delta",
                    ));
                };
                let delta_ty = delta.ty.as_ref().map(|t| t.as_str()).unwrap_or("");
                match delta_ty {
                    "text_delta" => {
                        if let Some(text) = delta.text {
                            out.push(LlmEvent::TextDelta {
                                index,
                                text: text.into_string(),
                            });
                        }
                    }
                    "input_json_delta" => {
                        if let Some(json) = delta.partial_json {
                            out.push(LlmEvent::ToolCallDelta {
                                index,
                                partial_json: json.into_string(),
                            });
                        }
                    }
                    "thinking_delta" => {
                        if let Some(thinking) = delta.thinking {
                            out.push(LlmEvent::ThinkingDelta {
                                index,
                                thinking: thinking.into_string(),
                            });
                        }
                    }
                    "signature_delta" => {
                        if let Some(signature) = delta.signature {
                            out.push(LlmEvent::SignatureDelta {
                                index,
                                signature: signature.into_string(),
                            });
                        }
                    }
                    "compaction_delta" => {
                        if let Some((at, block)) = &mut self.compaction {
                            if *at == index {
                                compaction_delta(block, delta.content, delta.encrypted_content)?;
                            }
                        }
                    }
                    // citations_delta and future delta types carry nothing the crate models.
                    _ => {}
                }
            }
            "content_block_start" => {
                let index = required_index(parsed.index, ty)?;
                let Some(raw) = parsed.content_block else {
                    return Err(LlmError::malformed(
                        "Anthropic content_block_start without a content_block",
                    ));
                };
                self.block_start(index, raw, out)?;
            }
            "content_block_stop" => {
                let index = required_index(parsed.index, ty)?;
                if self.compaction.as_ref().is_some_and(|(at, _)| *at == index) {
                    if let Some((index, block)) = self.compaction.take() {
                        out.push(LlmEvent::OtherBlock { index, block });
                    }
                }
                out.push(LlmEvent::BlockStop { index });
            }
            "message_start" => {
                self.started = true;
                let message = parsed.message.unwrap_or(MessageStart {
                    id: None,
                    model: None,
                    usage: None,
                });
                out.push(LlmEvent::MessageStart {
                    id: message.id.unwrap_or_default(),
                    model: message.model.unwrap_or_default(),
                });
                if let Some(usage) = message.usage {
                    usage.apply(&mut self.usage, &mut self.passes);
                    out.push(LlmEvent::Usage(self.billed()));
                }
            }
            "message_delta" => {
                if let Some(delta) = parsed.delta {
                    if let Some(reason) = delta.stop_reason {
                        self.stop_reason = Some(StopReason::from_wire(reason.as_str()));
                    }
                    if let Some(sequence) = delta.stop_sequence {
                        self.stop_sequence = Some(sequence.into_string());
                    }
                }
                if let Some(usage) = parsed.usage {
                    usage.apply(&mut self.usage, &mut self.passes);
                    out.push(LlmEvent::Usage(self.billed()));
                }
                if let Some(managed) = &parsed.context_management {
                    let edits = crate::provider::context_editing::read_applied(managed);
                    if !edits.is_empty() {
                        out.push(LlmEvent::ContextEdited { edits });
                    }
                }
            }
            "message_stop" => {
                if !self.started {
                    return Err(LlmError::malformed(
                        "Anthropic message_stop without a message_start",
                    ));
                }
                self.stop(out);
                out.push(LlmEvent::MessageStop {
                    stop_reason: self.stop_reason.clone().unwrap_or(StopReason::EndTurn),
                });
            }
            "error" => return Err(stream_error(parsed.error, data)),
            // "ping" with a `type` only, and event types added later.
            _ => {}
        }
        Ok(())
    }

    fn block_start(
        &mut self,
        index: usize,
        raw: &RawValue,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let block: BlockStart = serde_json::from_str(raw.get())
            .map_err(|e| LlmError::malformed(format!("invalid Anthropic content_block: {e}")))?;
        match block.ty.as_str() {
            "text" => {
                // Opens the block (usually with empty text); the assembler drops text blocks
                // that stay empty, which Anthropic would reject when the history is sent back.
                out.push(LlmEvent::TextDelta {
                    index,
                    text: block.text.unwrap_or_default(),
                });
            }
            "thinking" => {
                out.push(LlmEvent::ThinkingDelta {
                    index,
                    thinking: block.thinking.unwrap_or_default(),
                });
                if let Some(signature) = block.signature.filter(|s| !s.is_empty()) {
                    out.push(LlmEvent::SignatureDelta { index, signature });
                }
            }
            "redacted_thinking" => {
                out.push(LlmEvent::RedactedThinking {
                    index,
                    data: block.data.unwrap_or_default(),
                });
            }
            "tool_use" => {
                let (Some(id), Some(name)) = (block.id, block.name) else {
                    return Err(LlmError::malformed(
                        "Anthropic tool_use block without an id or a name",
                    ));
                };
                out.push(LlmEvent::ToolCallStart { index, id, name });
            }
            "compaction" => {
                // Server compaction: its content streams in `compaction_delta`s; the whole
                // block goes out at its stop, kept verbatim to be sent back.
                let value: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| {
                    LlmError::malformed(format!("invalid Anthropic content_block: {e}"))
                })?;
                if let Some((index, block)) = self.compaction.replace((index, value)) {
                    out.push(LlmEvent::OtherBlock { index, block });
                }
            }
            _ => {
                // server_tool_use, web_search_tool_result and future types: kept verbatim.
                let value: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| {
                    LlmError::malformed(format!("invalid Anthropic content_block: {e}"))
                })?;
                out.push(LlmEvent::OtherBlock {
                    index,
                    block: value,
                });
            }
        }
        Ok(())
    }

    /// Marks the message done and reports its stop sequence, if one stopped it. The caller
    /// pushes the `MessageStop` right after.
    fn stop(&mut self, out: &mut Vec<LlmEvent>) {
        self.done = true;
        if let Some((index, block)) = self.compaction.take() {
            out.push(LlmEvent::OtherBlock { index, block });
            out.push(LlmEvent::BlockStop { index });
        }
        if let Some(sequence) = self.stop_sequence.take() {
            out.push(LlmEvent::StopSequence { sequence });
        }
    }

    /// Decodes a whole, non-streamed Messages response into the events a stream with the same
    /// content gives: `MessageStart`, each block opened, filled and stopped in order, `Usage`,
    /// then `MessageStop`. An error body (`{"type":"error", …}`) is the same error an in-stream
    /// `error` event would be.
    pub(crate) fn decode_whole(
        &mut self,
        body: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let message: WholeMessage<'_> = serde_json::from_str(body).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in an Anthropic message body: {e}"))
        })?;
        if message.ty.as_deref() == Some("error") || message.error.is_some() {
            return Err(stream_error(message.error, body));
        }
        let Some(content) = message.content else {
            return Err(LlmError::malformed(
                "a JSON body that is neither an Anthropic message nor an error (no `content`)",
            ));
        };
        self.started = true;
        out.push(LlmEvent::MessageStart {
            id: message.id.unwrap_or_default(),
            model: message.model.unwrap_or_default(),
        });
        for (index, raw) in content.into_iter().enumerate() {
            let before = out.len();
            self.block_start(index, raw, out)?;
            let is_tool = matches!(out.get(before), Some(LlmEvent::ToolCallStart { .. }));
            if is_tool {
                let input: WholeToolInput<'_> = serde_json::from_str(raw.get()).map_err(|e| {
                    LlmError::malformed(format!("invalid Anthropic tool_use block: {e}"))
                })?;
                out.push(LlmEvent::ToolCallDelta {
                    index,
                    partial_json: input.input.map_or("{}", RawValue::get).to_owned(),
                });
            }
            out.push(LlmEvent::BlockStop { index });
        }
        if let Some(usage) = message.usage {
            usage.apply(&mut self.usage, &mut self.passes);
            out.push(LlmEvent::Usage(self.billed()));
        }
        self.stop_sequence = message.stop_sequence;
        self.stop(out);
        out.push(LlmEvent::MessageStop {
            stop_reason: message
                .stop_reason
                .as_deref()
                .map_or(StopReason::EndTurn, StopReason::from_wire),
        });
        Ok(())
    }

    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no message_stop event"
        } else {
            "no message_start event; the body was empty or not an Anthropic stream"
        }))
    }
}

/// An Anthropic `error` (an in-stream event, or a 200 body that is one).
fn stream_error(error: Option<WireError>, data: &str) -> LlmError {
    let error = error.unwrap_or(WireError {
        ty: None,
        message: None,
    });
    LlmError::Stream {
        error_type: error.ty.unwrap_or_else(|| "error".to_owned()),
        message: error
            .message
            .unwrap_or_else(|| data.chars().take(500).collect()),
    }
}

/// Reads the `content_block_delta` events that make up nearly all of a stream without going
/// through serde: `{"type":"content_block_delta","index":N,"delta":{"type":K,F:S}}` in that
/// key order, with any JSON whitespace between tokens, for the four delta kinds the crate
/// models. The string value `S` is still decoded by serde_json (borrowed when it has no
/// escapes), so escapes and control characters follow JSON exactly. Anything else (other
/// events, other key orders, extra fields, numbers that are not plain non-negative integers)
/// returns `None` and takes the general path, which gives the same events for every payload
/// this accepts.
fn fast_delta(data: &str) -> Option<LlmEvent> {
    let mut c = Tokens { text: data, pos: 0 };
    c.literal(b"{")?;
    c.key(b"\"type\"")?;
    c.literal(b"\"content_block_delta\"")?;
    c.literal(b",")?;
    c.key(b"\"index\"")?;
    let index = c.index()?;
    c.literal(b",")?;
    c.key(b"\"delta\"")?;
    c.literal(b"{")?;
    c.key(b"\"type\"")?;
    let kind = c.delta_kind()?;
    c.literal(b",")?;
    c.key(kind.field())?;
    let value = c.string()?;
    c.literal(b"}")?;
    c.literal(b"}")?;
    c.skip_whitespace();
    if c.pos != data.len() {
        return None;
    }
    Some(kind.event(index, value))
}

/// The delta kinds [`fast_delta`] reads.
#[derive(Clone, Copy)]
enum DeltaKind {
    Text,
    Thinking,
    Json,
    Signature,
}

impl DeltaKind {
    /// The key of the field that carries the kind's string, quoted.
    fn field(self) -> &'static [u8] {
        match self {
            DeltaKind::Text => b"\"text\"",
            DeltaKind::Thinking => b"\"thinking\"",
            DeltaKind::Json => b"\"partial_json\"",
            DeltaKind::Signature => b"\"signature\"",
        }
    }

    fn event(self, index: usize, value: String) -> LlmEvent {
        match self {
            DeltaKind::Text => LlmEvent::TextDelta { index, text: value },
            DeltaKind::Thinking => LlmEvent::ThinkingDelta {
                index,
                thinking: value,
            },
            DeltaKind::Json => LlmEvent::ToolCallDelta {
                index,
                partial_json: value,
            },
            DeltaKind::Signature => LlmEvent::SignatureDelta {
                index,
                signature: value,
            },
        }
    }
}

/// A cursor over the JSON text for [`fast_delta`]; every method returns `None` on anything
/// unexpected. Tokens are ASCII, so `pos` is always at a character boundary.
struct Tokens<'a> {
    text: &'a str,
    pos: usize,
}

impl Tokens<'_> {
    fn rest(&self) -> &[u8] {
        self.text.as_bytes().get(self.pos..).unwrap_or_default()
    }

    /// JSON's insignificant whitespace: space, tab, LF, CR.
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.rest().first() {
            self.pos += 1;
        }
    }

    /// Exactly `token` after optional whitespace.
    fn literal(&mut self, token: &[u8]) -> Option<()> {
        self.skip_whitespace();
        if !self.rest().starts_with(token) {
            return None;
        }
        self.pos += token.len();
        Some(())
    }

    /// A quoted key, then `:`.
    fn key(&mut self, quoted: &[u8]) -> Option<()> {
        self.literal(quoted)?;
        self.literal(b":")
    }

    /// A JSON integer that fits a `usize`, without sign, fraction or exponent.
    fn index(&mut self) -> Option<usize> {
        self.skip_whitespace();
        let rest = self.rest();
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        // JSON forbids leading zeros; a fraction or exponent is left to serde.
        if digits == 0
            || (digits > 1 && rest.first() == Some(&b'0'))
            || matches!(rest.get(digits), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let number = self.text.get(self.pos..self.pos + digits)?.parse().ok()?;
        self.pos += digits;
        Some(number)
    }

    fn delta_kind(&mut self) -> Option<DeltaKind> {
        for (kind, token) in [
            (DeltaKind::Text, &b"\"text_delta\""[..]),
            (DeltaKind::Thinking, b"\"thinking_delta\""),
            (DeltaKind::Json, b"\"input_json_delta\""),
            (DeltaKind::Signature, b"\"signature_delta\""),
        ] {
            if self.literal(token).is_some() {
                return Some(kind);
            }
        }
        None
    }

    /// A JSON string, decoded by serde_json.
    fn string(&mut self) -> Option<String> {
        self.skip_whitespace();
        let body = self.rest().strip_prefix(b"\"")?;
        // The closing quote: the first `"` not escaped by a backslash.
        let mut i = 0;
        let len = loop {
            i += memchr::memchr2(b'"', b'\\', body.get(i..)?)?;
            match body.get(i)? {
                b'"' => break i + 2, // the token, both quotes included
                _ => i += 2,         // a backslash and the byte it escapes
            }
        };
        let token = self.text.get(self.pos..self.pos + len)?;
        let value: CowStr<'_> = serde_json::from_str(token).ok()?;
        self.pos += len;
        Some(value.into_string())
    }
}

/// Adds a `compaction_delta`'s summary text and encrypted content to the block, bounded.
fn compaction_delta(
    block: &mut serde_json::Value,
    content: Option<CowStr<'_>>,
    encrypted: Option<CowStr<'_>>,
) -> Result<(), LlmError> {
    let Some(object) = block.as_object_mut() else {
        return Ok(());
    };
    for (key, piece) in [("content", content), ("encrypted_content", encrypted)] {
        let Some(piece) = piece else { continue };
        let mut text = object
            .get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if text.len() + piece.as_str().len() > MAX_COMPACTION_BYTES {
            return Err(LlmError::malformed(format!(
                "an Anthropic compaction block over {MAX_COMPACTION_BYTES} bytes"
            )));
        }
        text.push_str(piece.as_str());
        object.insert(key.to_owned(), serde_json::Value::String(text));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the general (serde) path makes of a payload.
    fn general(data: &str) -> Result<Vec<LlmEvent>, LlmError> {
        let mut out = Vec::new();
        Decoder::default().parse_event("content_block_delta", data, &mut out)?;
        Ok(out)
    }

    /// Decodes an SSE body in one piece: the events, and the first error.
    fn decode_body(body: &str) -> (Vec<LlmEvent>, Option<LlmError>) {
        let mut decoder = crate::wire::WireDecoder::new(crate::wire::WireFormat::Anthropic);
        let mut out = Vec::new();
        let error = decoder
            .push(body.as_bytes(), &mut out)
            .and_then(|()| decoder.finish(&mut out))
            .err();
        (out, error)
    }

    /// Observed from llama.cpp b11434's `/v1/messages` (Qwen2.5-Coder-1.5B, tools declared,
    /// prose with `{`): its tool-call parser fails mid-stream and the error comes as
    /// `event: error` with the fields at the top level, then the body ends.
    #[test]
    fn a_llama_cpp_error_event_is_the_servers_error_not_a_malformed_stream() {
        let body = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"id":"chatcmpl-QoxKoK2IG36uyNiCHis8PX6FJFPQxZGk","type":"message","role":"assistant","content":[],"model":"qwen.gguf","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":224,"input_tokens":1,"output_tokens":0}}}"#,
            "\n\nevent: content_block_start\n",
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            "\n\nevent: content_block_delta\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The"}}"#,
            "\n\nevent: error\n",
            r#"data: {"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}"#,
            "\n\n",
        );
        let (events, error) = decode_body(body);
        assert!(matches!(events.last(), Some(LlmEvent::TextDelta { text, .. }) if text == "The"));
        let Some(LlmError::Api(api)) = error else {
            panic!("{error:?}");
        };
        assert_eq!(api.status, 500);
        assert_eq!(api.error_type.as_deref(), Some("server_error"));
        assert!(api.message.contains("peg-native format"), "{}", api.message);
    }

    /// Observed from the same server: a `tool_use` block starts with no `input` field, its
    /// input comes in `input_json_delta` fragments.
    #[test]
    fn a_llama_cpp_tool_use_start_without_input_takes_its_input_from_the_deltas() {
        let body = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"id":"chatcmpl-m17U","type":"message","role":"assistant","content":[],"model":"qwen.gguf","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":175,"input_tokens":1,"output_tokens":0}}}"#,
            "\n\nevent: content_block_start\n",
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"J7UJu7Dzl0mW9qY45h0axecWR5hK6NGx","name":"weather"}}"#,
            "\n\nevent: content_block_delta\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}}"#,
            "\n\nevent: content_block_stop\n",
            r#"data: {"type":"content_block_stop","index":0}"#,
            "\n\nevent: message_delta\n",
            r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":16}}"#,
            "\n\nevent: message_stop\n",
            r#"data: {"type":"message_stop"}"#,
            "\n\n",
        );
        let (events, error) = decode_body(body);
        assert!(error.is_none(), "{error:?}");
        let mut assembler = crate::wire::StreamAssembler::new();
        for event in &events {
            assembler.push(event).unwrap();
        }
        let response = assembler.finish().unwrap();
        assert_eq!(
            response.message.content,
            vec![crate::message::ContentBlock::ToolUse {
                id: "J7UJu7Dzl0mW9qY45h0axecWR5hK6NGx".into(),
                name: "weather".into(),
                input: serde_json::json!({"city": "Paris"}),
            }]
        );
    }

    /// Context editing: `message_delta` carries `context_management.applied_edits`; an
    /// entry or a whole field the decoder cannot read is skipped, never an error.
    #[test]
    fn applied_context_edits_are_read_from_message_delta_leniently() {
        let body = |managed: &str| {
            format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m\",\"model\":\"c\",\"usage\":{{\"input_tokens\":5}}}}}}\n\n\
                 event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":1}},\"context_management\":{managed}}}\n\n\
                 event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
            )
        };
        let edits = |managed: &str| {
            let (events, error) = decode_body(&body(managed));
            assert!(error.is_none(), "{managed}: {error:?}");
            events
                .into_iter()
                .filter_map(|e| match e {
                    LlmEvent::ContextEdited { edits } => Some(edits),
                    _ => None,
                })
                .flatten()
                .collect::<Vec<_>>()
        };
        let read = edits(
            r#"{"applied_edits":[{"type":"clear_tool_uses_20250919","cleared_tool_uses":3,"cleared_input_tokens":4096},{"oops":1}]}"#,
        );
        assert_eq!(
            read,
            [
                crate::provider::context_editing::AppliedEdit::new("clear_tool_uses_20250919")
                    .cleared_tool_uses(3)
                    .cleared_input_tokens(4096)
            ]
        );
        for odd in [
            r#"{"applied_edits":[]}"#,
            "null",
            r#""x""#,
            r#"{"applied_edits":7}"#,
        ] {
            assert!(edits(odd).is_empty(), "{odd}");
        }
    }

    /// Server compaction: a `compaction` block's summary streams in `compaction_delta`s; the
    /// whole block comes out at its stop, verbatim.
    #[test]
    fn a_streamed_compaction_block_comes_out_whole() {
        let body = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":5}}}"#,
            "\n\nevent: content_block_start\n",
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null}}"#,
            "\n\nevent: content_block_delta\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"Summary: "}}"#,
            "\n\nevent: content_block_delta\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"read a.","encrypted_content":"opaque"}}"#,
            "\n\nevent: content_block_stop\n",
            r#"data: {"type":"content_block_stop","index":0}"#,
            "\n\nevent: message_delta\n",
            r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
            "\n\nevent: message_stop\n",
            r#"data: {"type":"message_stop"}"#,
            "\n\n",
        );
        let (events, error) = decode_body(body);
        assert!(error.is_none(), "{error:?}");
        let mut assembler = crate::wire::StreamAssembler::new();
        for event in &events {
            assembler.push(event).unwrap();
        }
        let response = assembler.finish().unwrap();
        assert_eq!(
            response.message.content,
            vec![crate::message::ContentBlock::Other(serde_json::json!({
                "type": "compaction", "content": "Summary: read a.", "encrypted_content": "opaque"
            }))]
        );
    }

    /// The compaction pass's usage (`usage.iterations`, left out of the top-level figures) is
    /// added to the usage reported, once, however many events carry it; other iteration types
    /// and odd shapes count nothing.
    #[test]
    fn compaction_passes_are_added_to_the_usage_once() {
        let usage = |delta_usage: &str| {
            // One SSE data line: the JSON without its newlines.
            let delta_usage = delta_usage.replace('\n', "");
            let body = format!(
                "event: message_start\ndata: {}\n\nevent: message_delta\ndata: {}\n\n\
                 event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n",
                r#"{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":5000,"output_tokens":1}}}"#,
                format_args!(r#"{{"type":"message_delta","delta":{{}},"usage":{delta_usage}}}"#),
                format_args!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn"}},"usage":{delta_usage}}}"#
                ),
                r#"{"type":"message_stop"}"#,
            );
            let (events, error) = decode_body(&body);
            assert!(error.is_none(), "{error:?}");
            events
                .iter()
                .rev()
                .find_map(|e| match e {
                    LlmEvent::Usage(u) => Some(*u),
                    _ => None,
                })
                .unwrap()
        };
        let u = usage(
            r#"{"output_tokens":200,"iterations":[
                {"type":"compaction","input_tokens":180000,"output_tokens":3000,
                 "cache_read_input_tokens":7,"cache_creation_input_tokens":9},
                {"type":"message","input_tokens":5000,"output_tokens":200}]}"#,
        );
        assert_eq!(u.input_tokens, 185_000);
        assert_eq!(u.output_tokens, 3_200);
        assert_eq!(u.cache_read_input_tokens, 7);
        assert_eq!(u.cache_creation_input_tokens, 9);
        for odd in [
            r#"{"output_tokens":200}"#,
            r#"{"output_tokens":200,"iterations":"x"}"#,
            r#"{"output_tokens":200,"iterations":[1,null,{"type":"compaction","input_tokens":"many"}]}"#,
            r#"{"output_tokens":200,"iterations":[{"type":"message","input_tokens":9}]}"#,
        ] {
            let u = usage(odd);
            assert_eq!((u.input_tokens, u.output_tokens), (5_000, 200), "{odd}");
        }
        let huge = usage(
            r#"{"output_tokens":200,"iterations":[{"type":"compaction","input_tokens":18446744073709551615},
                {"type":"compaction","input_tokens":18446744073709551615}]}"#,
        );
        assert_eq!(huge.input_tokens, u64::MAX);
    }

    #[test]
    fn the_fast_path_reads_compact_spaced_and_escaped_deltas() {
        for (data, want) in [
            (
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
                LlmEvent::TextDelta { index: 0, text: "Hi".into() },
            ),
            (
                r#"{"type": "content_block_delta", "index": 12, "delta": {"type": "thinking_delta", "thinking": "a\nb \"q\" \u00e9\ud83d\ude42"}}"#,
                LlmEvent::ThinkingDelta { index: 12, thinking: "a\nb \"q\" é🙂".into() },
            ),
            (
                "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\\\"}  \n}\r\n",
                LlmEvent::ToolCallDelta { index: 0, partial_json: "{\"a\\".into() },
            ),
            (
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"signature_delta","signature":""}}"#,
                LlmEvent::SignatureDelta { index: 3, signature: String::new() },
            ),
        ] {
            assert_eq!(fast_delta(data), Some(want.clone()), "{data}");
            assert_eq!(general(data).unwrap(), vec![want], "{data}");
        }
    }

    #[test]
    fn the_fast_path_leaves_everything_else_to_serde() {
        for data in [
            // another key order, an extra field, another kind, trailing bytes
            r#"{"index":0,"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","citations":[]}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}}"#,
            // numbers serde reads differently or refuses
            r#"{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":1e0,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":99999999999999999999,"delta":{"type":"text_delta","text":"x"}}"#,
            // strings serde refuses: a raw control character, a bad escape, a lone surrogate
            "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\u{1}\"}}",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ud800"}}"#,
            // cut off
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x\"}}"#,
        ] {
            assert_eq!(fast_delta(data), None, "{data}");
        }
    }

    fn whitespace() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "", "", "", " ", "\n", "\t ", "\r\n", "\u{a0}", "\u{c}",
        ])
    }

    fn json_string() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec![
                "a",
                "b c",
                "é",
                "🙂",
                "\\n",
                "\\\"",
                "\\\\",
                "\\u00e9",
                "\\ud83d\\ude42",
                "\\ud800",
                "\\x",
                "\u{1}",
                "\t",
                "\"",
                "\\",
            ]),
            0..8,
        )
        .prop_map(|parts| format!("\"{}\"", parts.concat()))
    }

    proptest! {
        /// Whatever the fast path accepts, the general path reads the same way.
        #[test]
        fn the_fast_path_agrees_with_serde(
            ws in prop::collection::vec(whitespace(), 20),
            ty in prop::sample::select(vec!["content_block_delta", "content_block_delta", "content_block_start", "content_block_deltas"]),
            index in prop::sample::select(vec!["0", "7", "123", "01", "-1", "1.0", "2E1", "18446744073709551615", "18446744073709551616"]),
            kind in prop::sample::select(vec!["text_delta", "thinking_delta", "input_json_delta", "signature_delta", "citations_delta", "text"]),
            field in prop::sample::select(vec!["", "", "", "text", "thinking", "partial_json", "signature", "type"]),
            value in json_string(),
            extra in prop::sample::select(vec!["", "", "", ",\"x\":1", "}", "x"]),
        ) {
            let field = if field.is_empty() {
                match kind {
                    "text_delta" => "text",
                    "thinking_delta" => "thinking",
                    "input_json_delta" => "partial_json",
                    _ => "signature",
                }
            } else {
                field
            };
            let (ty, kind, field) = (format!("\"{ty}\""), format!("\"{kind}\""), format!("\"{field}\""));
            let tokens = [
                "{", "\"type\"", ":", &ty, ",", "\"index\"", ":", index, ",", "\"delta\"", ":",
                "{", "\"type\"", ":", &kind, ",", &field, ":", &value, extra, "}", "}",
            ];
            // Whitespace before every token and after the last.
            let mut data = String::new();
            for (i, token) in tokens.iter().enumerate() {
                data.push_str(ws[i % ws.len()]);
                data.push_str(token);
            }
            data.push_str(ws[tokens.len() % ws.len()]);
            if let Some(event) = fast_delta(&data) {
                prop_assert_eq!(general(&data), Ok(vec![event]), "{}", data);
            }
        }
    }
}
