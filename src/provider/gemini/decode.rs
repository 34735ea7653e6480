//! Gemini stream decoding: `streamGenerateContent?alt=sse` events → [`LlmEvent`]s.
//!
//! Each SSE event is a whole `GenerateContentResponse` (`data: {json}`, no event name). Text
//! arrives in many chunks that each repeat the candidate with the next piece of its parts;
//! there is no end marker: the response is complete with the chunk whose candidate carries a
//! `finishReason`. Anything after it is ignored.
//!
//! How the parts become blocks (each block its own index, in order):
//!
//! - consecutive `text` parts continue one text block; consecutive `thought: true` parts one
//!   thinking block ([`LlmEvent::ThinkingDelta`]);
//! - a `functionCall` arrives whole: [`LlmEvent::ToolCallStart`], one
//!   [`LlmEvent::ToolCallDelta`] with the whole `args` JSON, [`LlmEvent::BlockStop`]. When the
//!   call has no `id` (the Gemini API often sends none), the decoder gives it one that is
//!   stable and unique within the response: `gemini_call_{responseId}_{n}` (`gemini_call_{n}`
//!   without a response id). The encoder recognises that prefix and sends such ids back to
//!   no one: results are matched by name and order, as Gemini does;
//! - a `thoughtSignature` on a thought part is that thinking block's signature
//!   ([`LlmEvent::SignatureDelta`]), and closes the block: a later thought part starts another.
//!   On any other part (a function call, a text part, often an empty text part in the last
//!   chunk) it becomes a thinking block of its own with empty thinking and the signature (a
//!   carrier), placed right before the part's block; the encoder puts such a signature back on
//!   the part that follows it, so every signature goes back verbatim on the part it came with,
//!   in its place. A signed text part is a text block of its own, closed at once (no later
//!   text is merged into it), even when its text is empty: the assembler keeps an empty text
//!   block right after a carrier. A signed thought part with no text and no unsigned thought
//!   run to close is likewise a carrier and an empty thinking block.
//!
//! A `finishReason` of `MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL` or `OTHER` is the
//! model failing its turn, not a stop: the decoder reports the usage so far and fails with
//! [`LlmError::ModelFailure`] (retryable; the agent sends the turn again with a note).
//!
//! `usageMetadata`: `input_tokens` is `promptTokenCount` (plus `toolUsePromptTokenCount`)
//! minus `cachedContentTokenCount`, which is `cache_read_input_tokens` (the crate's meaning:
//! the four figures add up to what was processed); `output_tokens` is
//! `candidatesTokenCount + thoughtsTokenCount`, as Google bills thinking as output, and
//! `reasoning_tokens` is `thoughtsTokenCount`.

use crate::error::LlmError;
use crate::message::{StopReason, Usage};
use crate::wire::LlmEvent;

use super::wire::{Chunk, Part, UsageMetadata, WireError};

/// The prefix of the call ids the decoder makes up for calls that came without one.
pub(crate) const GENERATED_ID_PREFIX: &str = "gemini_call_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    /// A thinking block; `signed` once its signature arrived, `text` once it has some.
    Thinking {
        signed: bool,
        text: bool,
    },
}

/// Decoder state for one response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    started: bool,
    done: bool,
    response_id: String,
    /// The index the next block gets.
    next_index: usize,
    /// The text or thinking block still open, which the next part of its kind continues.
    current: Option<(Open, usize)>,
    /// Function calls seen (for ids and the stop reason).
    calls: usize,
    usage: Option<Usage>,
}

crate::wire::decoder::event_decoder!(Decoder);

impl Decoder {
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        if self.done || data.trim().is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| LlmError::malformed(format!("invalid JSON in a Gemini event: {e}")))?;
        self.chunk(chunk, data, out)
    }

    fn chunk(&mut self, chunk: Chunk, data: &str, out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if let Some(error) = chunk.error {
            return Err(stream_error(error, data));
        }
        if !self.started {
            self.started = true;
            self.response_id = chunk.response_id.clone().unwrap_or_default();
            out.push(LlmEvent::MessageStart {
                id: self.response_id.clone(),
                model: chunk.model_version.clone().unwrap_or_default(),
            });
        }
        if let Some(usage) = &chunk.usage_metadata {
            self.usage = Some(usage_of(usage));
        }
        let candidate = chunk
            .candidates
            .into_iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0);
        let Some(candidate) = candidate else {
            // No candidate: a usage-only chunk, or a blocked prompt.
            if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
                tracing::debug!(%reason, "Gemini blocked the prompt");
                self.stop(StopReason::ContentFilter, out);
            }
            return Ok(());
        };
        for part in candidate
            .content
            .and_then(|c| c.parts)
            .into_iter()
            .flatten()
        {
            self.part(part, out);
        }
        if let Some(reason) = candidate.finish_reason {
            if let Some(error) = model_failure(&reason, candidate.finish_message.as_deref()) {
                // What the failed response used still counts.
                self.done = true;
                if let Some(usage) = self.usage {
                    out.push(LlmEvent::Usage(usage));
                }
                return Err(error);
            }
            let reason = stop_reason(&reason, self.calls > 0);
            self.stop(reason, out);
        }
        Ok(())
    }

    fn part(&mut self, part: Part, out: &mut Vec<LlmEvent>) {
        let signature = part.thought_signature.filter(|s| !s.is_empty());
        if let Some(call) = part.function_call {
            self.close(out);
            if let Some(signature) = signature {
                self.carrier(signature, out);
            }
            let index = self.take_index();
            let id = call.id.filter(|id| !id.is_empty()).unwrap_or_else(|| {
                if self.response_id.is_empty() {
                    format!("{GENERATED_ID_PREFIX}{}", self.calls)
                } else {
                    format!("{GENERATED_ID_PREFIX}{}_{}", self.response_id, self.calls)
                }
            });
            self.calls += 1;
            out.push(LlmEvent::ToolCallStart {
                index,
                id,
                name: call.name.unwrap_or_default(),
            });
            let args = call.args.as_deref().map_or("{}", |raw| raw.get());
            out.push(LlmEvent::ToolCallDelta {
                index,
                partial_json: if args == "null" { "{}" } else { args }.to_owned(),
            });
            out.push(LlmEvent::BlockStop { index });
            return;
        }
        let Some(text) = part.text else {
            // Inline data, executable code and other parts the crate does not model.
            return;
        };
        if part.thought == Some(true) {
            self.thought(text, signature, out);
            return;
        }
        let Some(signature) = signature else {
            if text.is_empty() {
                return;
            }
            let index = match self.current {
                Some((Open::Text, index)) => index,
                _ => self.open(Open::Text, out),
            };
            out.push(LlmEvent::TextDelta { index, text });
            return;
        };
        // A signed text part is a text block of its own, even empty, after the carrier of
        // its signature, and closed at once: no later text is merged into it.
        self.close(out);
        self.carrier(signature, out);
        let index = self.take_index();
        out.push(LlmEvent::TextDelta { index, text });
        out.push(LlmEvent::BlockStop { index });
    }

    /// A `thought: true` part: it continues the open thinking block unless that one is signed
    /// (a signature closes its run of thought parts).
    fn thought(&mut self, text: String, signature: Option<String>, out: &mut Vec<LlmEvent>) {
        let open = match self.current {
            Some((
                Open::Thinking {
                    signed: false,
                    text,
                },
                index,
            )) => Some((index, text)),
            _ => None,
        };
        let had_text = open.is_some_and(|(_, text)| text);
        if let Some(signature) = signature.as_ref().filter(|_| text.is_empty() && !had_text) {
            // A signed thought with no text, and no thought text before it to sign: the
            // signature travels on a carrier before an empty thinking block (the part itself),
            // as for other parts (a thinking block with only a signature is a carrier).
            self.close(out);
            self.carrier(signature.clone(), out);
            let index = self.take_index();
            out.push(LlmEvent::ThinkingDelta {
                index,
                thinking: String::new(),
            });
            out.push(LlmEvent::BlockStop { index });
            return;
        }
        let index = match open {
            Some((index, _)) => index,
            None => self.open(
                Open::Thinking {
                    signed: false,
                    text: false,
                },
                out,
            ),
        };
        let has_text = had_text || !text.is_empty();
        if !text.is_empty() || signature.is_none() {
            out.push(LlmEvent::ThinkingDelta {
                index,
                thinking: text,
            });
        }
        let signed = signature.is_some();
        if let Some(signature) = signature {
            out.push(LlmEvent::SignatureDelta { index, signature });
        }
        self.current = Some((
            Open::Thinking {
                signed,
                text: has_text,
            },
            index,
        ));
    }

    fn take_index(&mut self) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        index
    }

    /// Closes the open block and opens one of `kind`.
    fn open(&mut self, kind: Open, out: &mut Vec<LlmEvent>) -> usize {
        self.close(out);
        let index = self.take_index();
        self.current = Some((kind, index));
        index
    }

    fn close(&mut self, out: &mut Vec<LlmEvent>) {
        if let Some((_, index)) = self.current.take() {
            out.push(LlmEvent::BlockStop { index });
        }
    }

    /// A thinking block with no text that carries the signature of the part after it.
    fn carrier(&mut self, signature: String, out: &mut Vec<LlmEvent>) {
        let index = self.take_index();
        out.push(LlmEvent::SignatureDelta { index, signature });
        out.push(LlmEvent::BlockStop { index });
    }

    fn stop(&mut self, reason: StopReason, out: &mut Vec<LlmEvent>) {
        self.close(out);
        self.done = true;
        if let Some(usage) = self.usage {
            out.push(LlmEvent::Usage(usage));
        }
        out.push(LlmEvent::MessageStop {
            stop_reason: reason,
        });
    }

    /// A whole, non-streamed body: one `GenerateContentResponse` (`:generateContent`), or the
    /// JSON array of them that `:streamGenerateContent` sends without `alt=sse`. An error body
    /// is the error an in-stream error would be.
    pub(crate) fn decode_whole(
        &mut self,
        text: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            LlmError::malformed(format!("invalid JSON in a Gemini response body: {e}"))
        })?;
        let items =
            match value {
                serde_json::Value::Array(items) => items,
                object @ serde_json::Value::Object(_) => vec![object],
                _ => return Err(LlmError::malformed(
                    "a JSON body that is not a Gemini response (neither an object nor an array)",
                )),
            };
        for item in items {
            if self.done {
                break;
            }
            let chunk: Chunk = serde_json::from_value(item)
                .map_err(|e| LlmError::malformed(format!("invalid Gemini response object: {e}")))?;
            self.chunk(chunk, text, out)?;
        }
        if !self.done {
            return Err(LlmError::malformed(
                "a JSON body that is neither a complete Gemini response (no candidate with a \
                 finishReason) nor an error",
            ));
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        Err(LlmError::incomplete(if self.started {
            "no candidate with a finishReason: the Gemini stream ended early"
        } else {
            "no event; the body was empty or not a Gemini stream"
        }))
    }
}

/// The crate's usage for Gemini's `usageMetadata` (see the module docs).
fn usage_of(meta: &UsageMetadata) -> Usage {
    let cached = meta.cached_content_token_count.unwrap_or(0);
    let prompt = meta
        .prompt_token_count
        .unwrap_or(0)
        .saturating_add(meta.tool_use_prompt_token_count.unwrap_or(0));
    let thoughts = meta.thoughts_token_count.unwrap_or(0);
    Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: meta
            .candidates_token_count
            .unwrap_or(0)
            .saturating_add(thoughts),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
        reasoning_tokens: thoughts,
    }
}

/// The error for a `finishReason` that says the model failed its turn: a malformed function
/// call, a call of a tool it was not offered, or `OTHER`. Such a response is not an answer
/// (often it has no content at all); it is a [`LlmError::ModelFailure`], which is retried.
fn model_failure(reason: &str, finish_message: Option<&str>) -> Option<LlmError> {
    let what = match reason {
        "MALFORMED_FUNCTION_CALL" => {
            "the model wrote a malformed function call (its code or arguments do not parse, or \
             do not fit the function's declaration)"
        }
        "UNEXPECTED_TOOL_CALL" => "the model called a tool that the request did not offer",
        "OTHER" => "the model stopped for an unstated reason, without a usable answer",
        _ => return None,
    };
    let message = match finish_message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(said) => {
            let said: String = said.chars().take(500).collect();
            format!("{what}: {said}")
        }
        None => what.to_owned(),
    };
    Some(LlmError::ModelFailure {
        reason: reason.to_owned(),
        message,
    })
}

/// Gemini's `finishReason` as a [`StopReason`]. `STOP` after function calls is
/// [`StopReason::ToolUse`]; the safety-filter reasons are [`StopReason::ContentFilter`];
/// reasons without a crate equivalent are kept as sent in [`StopReason::Other`].
pub(crate) fn stop_reason(reason: &str, has_calls: bool) -> StopReason {
    match reason {
        "STOP" if has_calls => StopReason::ToolUse,
        "STOP" => StopReason::EndTurn,
        // Not a documented value, but what some compatible servers (aimock) send.
        "FUNCTION_CALL" => StopReason::ToolUse,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => StopReason::ContentFilter,
        // LANGUAGE, TOO_MANY_TOOL_CALLS, FINISH_REASON_UNSPECIFIED, and reasons added later
        // (MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL and OTHER are errors: `model_failure`).
        other => StopReason::Other(other.to_owned()),
    }
}

/// A Gemini error object as the crate's error: its `status` (`RESOURCE_EXHAUSTED`,
/// `UNAVAILABLE` …) is the error type.
fn stream_error(error: WireError, data: &str) -> LlmError {
    let error_type = error
        .status
        .filter(|s| !s.is_empty())
        .or_else(|| error.code.as_ref().map(|c| c.to_string()))
        .unwrap_or_else(|| "error".to_owned());
    LlmError::Stream {
        error_type,
        message: error
            .message
            .unwrap_or_else(|| data.chars().take(500).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_failure_says_what_gemini_said_and_only_that() {
        let message = |said: Option<&str>| match model_failure("MALFORMED_FUNCTION_CALL", said) {
            Some(LlmError::ModelFailure { reason, message }) => {
                assert_eq!(reason, "MALFORMED_FUNCTION_CALL");
                message
            }
            other => panic!("{other:?}"),
        };
        let bare = message(None);
        assert!(
            bare.starts_with("the model wrote a malformed function call"),
            "{bare}"
        );
        assert!(!bare.contains(": "), "{bare}");
        assert_eq!(
            message(Some("  ")),
            bare,
            "a blank finishMessage adds nothing"
        );
        let said = message(Some(" Malformed call: print(x "));
        assert!(said.ends_with(": Malformed call: print(x"), "{said}");
        let long = message(Some(&"x".repeat(2_000)));
        assert_eq!(long.len(), bare.len() + 2 + 500, "cut at 500 characters");
        assert!(model_failure("STOP", Some("fine")).is_none());
    }

    fn decode(body: &str) -> Result<Vec<LlmEvent>, LlmError> {
        let mut decoder = crate::wire::WireDecoder::new(crate::wire::WireFormat::Gemini);
        let mut out = Vec::new();
        decoder.push(body.as_bytes(), &mut out)?;
        decoder.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn text_chunks_continue_one_block() {
        let body = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]}}],\"responseId\":\"r1\",\"modelVersion\":\"gemini-2.5-flash\"}\r\n\r\n\
                    data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"lo\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":2,\"cachedContentTokenCount\":4,\"thoughtsTokenCount\":3}}\r\n\r\n";
        let events = decode(body).unwrap();
        assert_eq!(
            events,
            vec![
                LlmEvent::MessageStart {
                    id: "r1".into(),
                    model: "gemini-2.5-flash".into()
                },
                LlmEvent::TextDelta {
                    index: 0,
                    text: "Hel".into()
                },
                LlmEvent::TextDelta {
                    index: 0,
                    text: "lo".into()
                },
                LlmEvent::BlockStop { index: 0 },
                LlmEvent::Usage(Usage {
                    input_tokens: 6,
                    output_tokens: 5,
                    cache_read_input_tokens: 4,
                    cache_creation_input_tokens: 0,
                    reasoning_tokens: 3,
                }),
                LlmEvent::MessageStop {
                    stop_reason: StopReason::EndTurn
                },
            ]
        );
    }

    #[test]
    fn a_signed_call_gets_a_carrier_block_and_a_stable_id() {
        let body = r#"data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"add","args":{"a":1}},"thoughtSignature":"sig"}]},"finishReason":"STOP"}],"responseId":"r"}

"#;
        let events = decode(body).unwrap();
        assert_eq!(
            events[1..],
            [
                LlmEvent::SignatureDelta {
                    index: 0,
                    signature: "sig".into()
                },
                LlmEvent::BlockStop { index: 0 },
                LlmEvent::ToolCallStart {
                    index: 1,
                    id: "gemini_call_r_0".into(),
                    name: "add".into()
                },
                LlmEvent::ToolCallDelta {
                    index: 1,
                    partial_json: r#"{"a":1}"#.into()
                },
                LlmEvent::BlockStop { index: 1 },
                LlmEvent::MessageStop {
                    stop_reason: StopReason::ToolUse
                },
            ]
        );
    }

    #[test]
    fn errors_and_truncation() {
        let err = decode(
            "data: {\"error\":{\"code\":503,\"message\":\"overloaded\",\"status\":\"UNAVAILABLE\"}}\n\n",
        )
        .unwrap_err();
        assert!(matches!(&err, LlmError::Stream { error_type, .. } if error_type == "UNAVAILABLE"));
        assert!(err.is_retryable());
        let err =
            decode("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\n\n")
                .unwrap_err();
        assert!(matches!(err, LlmError::Incomplete { .. }), "{err:?}");
    }
}
