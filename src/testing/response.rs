//! [`MockResponse`]: what the [`MockServer`](super::MockServer) answers to one request, and
//! how it becomes bytes on the wire ([`Reply`]), with no socket and no clock: the streamed
//! body is encoded, then cut at the [`StreamPoint`] of its [`Interruption`].

use std::time::Duration;

use serde_json::json;

use crate::error::LlmError;
use crate::provider;
use crate::wire::WireFormat;

use super::scripted::{Ending, ScriptedResponse};
use super::sse::{self, Segment, Tail};
use crate::provider::mock::SegmentKind;

/// Where in a streamed response an [`Interruption`] happens.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamPoint {
    /// After the preamble (`message_start` / the role chunk), before any content event.
    BeforeContent,
    /// Right after the first content event.
    AfterFirstContent,
    /// After all content, before the end-of-message marker.
    BeforeEnd,
    /// After this many bytes of the body.
    AfterBytes(usize),
}

/// What happens to a streamed response at a [`StreamPoint`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum Interruption {
    /// The connection is closed without ending the chunked body (a transport error).
    Disconnect,
    /// The body ends cleanly here, without the end-of-message marker (a truncated stream).
    End,
    /// Nothing more is sent and the connection stays open, with a keep-alive (Anthropic
    /// `event: ping`, OpenAI `: keep-alive`) every `keep_alive` when set.
    Stall {
        /// The interval of keep-alives, if any.
        keep_alive: Option<Duration>,
    },
    /// An in-stream `error` event in the provider's shape, then the body ends.
    ErrorEvent {
        /// The provider error type (for example `overloaded_error`).
        error_type: String,
        /// The message.
        message: String,
    },
}

/// One scripted answer of the [`MockServer`](super::MockServer): a streamed
/// [`ScriptedResponse`] (optionally chunked, delayed or interrupted), an error status, raw
/// bytes, or silence.
///
/// A `ScriptedResponse` converts into a `MockResponse` (`server.push(ScriptedResponse::text("hi"))`).
/// Its failures map to the wire like this: [`ScriptedResponse::error`] with an
/// [`LlmError::Api`] or [`LlmError::ContextOverflow`] answers with that status, headers
/// (`retry-after[-ms]`, `x-should-retry`, `request-id`) and a provider-shaped error body, with
/// [`LlmError::Connect`] closes the connection without answering, with
/// [`LlmError::Timeout`] never sends headers; mid-stream (`then_fail`),
/// [`LlmError::Incomplete`] truncates the body, [`LlmError::Transport`] disconnects,
/// [`LlmError::Timeout`] stalls, [`LlmError::Malformed`] sends invalid JSON, and the others
/// send an in-stream error event.
#[derive(Debug, Clone)]
pub struct MockResponse {
    kind: Kind,
    headers: Vec<(String, String)>,
    chunk_size: Option<usize>,
    chunk_delay: Option<Duration>,
    terminator_delay: Option<Duration>,
    interrupt: Option<(StreamPoint, Interruption)>,
    /// Whether the body of an in-stream error event ends with the terminator and keeps the
    /// connection (else the server closes it after the event).
    keep_alive_after_error: bool,
}

#[derive(Debug, Clone)]
enum Kind {
    Stream(ScriptedResponse),
    Status {
        status: u16,
        error_type: String,
        message: String,
        code: Option<String>,
    },
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// The scripted response as one whole JSON message (`content-type: application/json`).
    Json(ScriptedResponse),
    NoHeaders,
    Close,
}

impl From<ScriptedResponse> for MockResponse {
    fn from(response: ScriptedResponse) -> Self {
        MockResponse::stream(response)
    }
}

impl MockResponse {
    fn new(kind: Kind) -> Self {
        MockResponse {
            kind,
            headers: Vec::new(),
            chunk_size: None,
            chunk_delay: None,
            terminator_delay: None,
            interrupt: None,
            keep_alive_after_error: false,
        }
    }

    /// Streams `response` in the requesting client's wire format.
    pub fn stream(response: ScriptedResponse) -> Self {
        if response.preamble || response.ending == Ending::Raw {
            return MockResponse::new(Kind::Stream(response));
        }
        // ScriptedResponse::error: an immediate failure.
        let Ending::Fail(error) = &response.ending else {
            return MockResponse::new(Kind::Stream(response));
        };
        match error {
            LlmError::Api(api) | LlmError::ContextOverflow(api) => {
                let mut mock = MockResponse::status(api.status).error_message(api.message.clone());
                if let Some(t) = &api.error_type {
                    mock = mock.error_type(t.clone());
                }
                if let Some(c) = &api.code {
                    mock = mock.error_code(c.clone());
                }
                if let Some(delay) = api.retry_after {
                    mock = if delay.subsec_nanos() == 0 {
                        mock.retry_after(delay.as_secs())
                    } else {
                        mock.retry_after_ms(delay.as_millis().min(u64::MAX as u128) as u64)
                    };
                }
                if let Some(verdict) = api.should_retry {
                    mock = mock.should_retry(verdict);
                }
                if let Some(id) = &api.request_id {
                    mock = mock.header("request-id", id.clone());
                }
                mock
            }
            LlmError::Connect { .. } => MockResponse::new(Kind::Close),
            LlmError::Timeout { .. } => MockResponse::no_headers(),
            _ => MockResponse::new(Kind::Stream(response)),
        }
    }

    /// Answers with this error status and an error body in the provider's shape (Anthropic
    /// `{"type":"error","error":{"type","message"}}`, OpenAI
    /// `{"error":{"message","type","code"}}`). The error type defaults from the status
    /// (`rate_limit_error` for 429, `overloaded_error` for 529 …).
    pub fn status(status: u16) -> Self {
        let error_type = match status {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "error",
        };
        MockResponse::new(Kind::Status {
            status,
            error_type: error_type.to_owned(),
            message: format!("mock error {status}"),
            code: None,
        })
    }

    /// Answers with this status, content type and body, as they are.
    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        MockResponse::new(Kind::Raw {
            status,
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// Answers with `response` as one whole, non-streamed JSON message in the provider's shape
    /// (Anthropic `{"type":"message", …}`, OpenAI `{"object":"chat.completion", …}`) with
    /// `content-type: application/json`, as some proxies answer a streaming request (LiteLLM
    /// for its mock models, servers whose upstream does not stream). A scripted failure
    /// answers `500`.
    pub fn json(response: ScriptedResponse) -> Self {
        MockResponse::new(Kind::Json(response))
    }

    /// Redirects with `status` (301, 302, 303, 307 or 308) to `location`, as a load balancer
    /// or a moved endpoint does.
    pub fn redirect(status: u16, location: impl Into<String>) -> Self {
        MockResponse::raw(status, "text/plain", Vec::new()).header("location", location)
    }

    /// Reads the request and never answers (not even headers); the connection stays open.
    pub fn no_headers() -> Self {
        MockResponse::new(Kind::NoHeaders)
    }

    /// Reads the request and closes the connection without answering.
    pub fn close() -> Self {
        MockResponse::new(Kind::Close)
    }

    /// Sets the provider error type of a [`MockResponse::status`] answer.
    pub fn error_type(mut self, error_type: impl Into<String>) -> Self {
        if let Kind::Status { error_type: t, .. } = &mut self.kind {
            *t = error_type.into();
        }
        self
    }

    /// Sets the message of a [`MockResponse::status`] answer.
    pub fn error_message(mut self, message: impl Into<String>) -> Self {
        if let Kind::Status { message: m, .. } = &mut self.kind {
            *m = message.into();
        }
        self
    }

    /// Sets the OpenAI `code` of a [`MockResponse::status`] answer (for example
    /// `insufficient_quota` or `context_length_exceeded`).
    pub fn error_code(mut self, code: impl Into<String>) -> Self {
        if let Kind::Status { code: c, .. } = &mut self.kind {
            *c = Some(code.into());
        }
        self
    }

    /// Adds a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds `retry-after: <seconds>`.
    pub fn retry_after(self, seconds: u64) -> Self {
        self.header("retry-after", seconds.to_string())
    }

    /// Adds `retry-after-ms: <milliseconds>`.
    pub fn retry_after_ms(self, milliseconds: u64) -> Self {
        self.header("retry-after-ms", milliseconds.to_string())
    }

    /// Adds `x-should-retry: true|false`.
    pub fn should_retry(self, verdict: bool) -> Self {
        self.header("x-should-retry", verdict.to_string())
    }

    /// Sends the body in HTTP chunks of at most `bytes` bytes (default: one chunk per SSE
    /// event); 1 sends every byte on its own.
    pub fn chunk_size(mut self, bytes: u32) -> Self {
        self.chunk_size = Some((bytes as usize).max(1));
        self
    }

    /// Waits `delay` between HTTP chunks (the server uses `tokio::time`).
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Waits `delay` after the last event before the chunked body's terminator, as real
    /// servers do (the terminator of a streamed body often arrives a few milliseconds after
    /// the end-of-message event). A client that stops reading at the end-of-message event and
    /// drops the body loses the connection; one that reads on to the terminator keeps it.
    pub fn terminator_delay(mut self, delay: Duration) -> Self {
        self.terminator_delay = Some(delay);
        self
    }

    /// Interrupts the stream at `point` with `interruption`.
    pub fn interrupt(mut self, point: StreamPoint, interruption: Interruption) -> Self {
        self.interrupt = Some((point, interruption));
        self
    }

    /// Drops the connection after `bytes` bytes of the body.
    pub fn disconnect_after_bytes(self, bytes: usize) -> Self {
        self.interrupt(StreamPoint::AfterBytes(bytes), Interruption::Disconnect)
    }

    /// Drops the connection right after the first content event.
    pub fn disconnect_after_first_content(self) -> Self {
        self.interrupt(StreamPoint::AfterFirstContent, Interruption::Disconnect)
    }

    /// Drops the connection before any content event.
    pub fn disconnect_before_content(self) -> Self {
        self.interrupt(StreamPoint::BeforeContent, Interruption::Disconnect)
    }

    /// Stops sending at `point` and keeps the connection open, with keep-alives every
    /// `keep_alive` when set.
    pub fn stall_at(self, point: StreamPoint, keep_alive: Option<Duration>) -> Self {
        self.interrupt(point, Interruption::Stall { keep_alive })
    }

    /// Sends an in-stream error event (for example `overloaded_error`) at `point`.
    pub fn error_event_at(
        self,
        point: StreamPoint,
        error_type: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        self.interrupt(
            point,
            Interruption::ErrorEvent {
                error_type: error_type.into(),
                message: message.into(),
            },
        )
    }

    /// Ends the body cleanly after the content, without the end-of-message marker.
    pub fn truncated(self) -> Self {
        self.interrupt(StreamPoint::BeforeEnd, Interruption::End)
    }

    /// After an in-stream error event ([`error_event_at`](Self::error_event_at), or a
    /// scripted mid-stream failure sent as one), ends the body as real servers do: with the
    /// terminating chunk (after [`terminator_delay`](Self::terminator_delay), if set), the
    /// connection kept open for the next request. By default the server closes the
    /// connection after the error event. A client that drops the body at the error event
    /// loses the connection; one that reads on to the terminator keeps it.
    pub fn keep_alive_after_error(mut self) -> Self {
        self.keep_alive_after_error = true;
        self
    }
}

/// A [`MockResponse`] made concrete for one request's wire format: what the server writes.
#[derive(Debug)]
pub(super) enum Reply {
    /// Close the connection without answering.
    Close,
    /// Send nothing, not even headers; keep the connection open until the client leaves.
    Silence,
    /// One whole response with `content-length`, then close.
    Whole {
        status: u16,
        content_type: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A `200` event stream with a chunked body.
    Stream(StreamReply),
}

/// The body of a streamed reply and how to send it.
#[derive(Debug)]
pub(super) struct StreamReply {
    /// The body's content type (the format's streaming type).
    pub(super) content_type: &'static str,
    /// Extra response headers.
    pub(super) headers: Vec<(String, String)>,
    /// The body, one piece per SSE event (or one piece when cut at a byte offset).
    pub(super) pieces: Vec<Vec<u8>>,
    /// The largest HTTP chunk, when pieces are split further.
    pub(super) chunk_size: Option<usize>,
    /// The wait between two HTTP chunks.
    pub(super) chunk_delay: Option<Duration>,
    /// The wait before the terminating chunk of a body that ends cleanly.
    pub(super) terminator_delay: Option<Duration>,
    /// What happens after the pieces.
    pub(super) end: BodyEnd,
}

/// How a streamed body ends, with the bytes it still needs.
#[derive(Debug, PartialEq)]
pub(super) enum BodyEnd {
    /// The terminating chunk; the connection stays open for the next request.
    Terminator,
    /// The connection is dropped without the terminating chunk.
    Disconnect,
    /// This last event (an in-stream error), the terminating chunk, then close.
    LastEvent(Vec<u8>),
    /// Nothing more; the connection stays open until the client leaves.
    Stall,
    /// This keep-alive every `every`, forever.
    KeepAlive { every: Duration, ping: Vec<u8> },
}

impl MockResponse {
    /// What to send for this response to a request in `format`.
    /// This answer to a request for `model`: a scripted response that names no model of
    /// its own names that one, as a provider does.
    pub(super) fn answering_for(mut self, model: Option<String>) -> Self {
        if let (Kind::Stream(response) | Kind::Json(response), Some(model)) =
            (&mut self.kind, model)
        {
            if response.model.is_none() {
                response.model = Some(model);
            }
        }
        self
    }

    pub(super) fn into_reply(self, format: WireFormat) -> Reply {
        let MockResponse {
            kind,
            mut headers,
            chunk_size,
            chunk_delay,
            terminator_delay,
            interrupt,
            keep_alive_after_error,
        } = self;
        let scripted = match kind {
            Kind::Close => return Reply::Close,
            Kind::NoHeaders => return Reply::Silence,
            Kind::Raw {
                status,
                content_type,
                body,
            } => {
                return Reply::Whole {
                    status,
                    content_type,
                    headers,
                    body,
                }
            }
            Kind::Json(scripted) => {
                let (status, body) = match super::whole::encode(format, &scripted) {
                    Some(body) => (200, body),
                    None => (
                        500,
                        json!({"error": {"type": "api_error",
                                          "message": "MockServer: a scripted failure has no whole-JSON form"}}),
                    ),
                };
                return Reply::Whole {
                    status,
                    content_type: "application/json".to_owned(),
                    headers,
                    body: body.to_string().into_bytes(),
                };
            }
            Kind::Status {
                status,
                error_type,
                message,
                code,
            } => {
                let (body, more) = provider::of(format).mock().status_body(
                    status,
                    &error_type,
                    &message,
                    code.as_deref(),
                );
                headers.extend(more);
                if !headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("request-id"))
                {
                    headers.push(("request-id".to_owned(), "req_mock".to_owned()));
                }
                return Reply::Whole {
                    status,
                    content_type: "application/json".to_owned(),
                    headers,
                    body: body.to_string().into_bytes(),
                };
            }
            Kind::Stream(scripted) => scripted,
        };
        let (segments, tail) = sse::encode(format, &scripted);
        let (mut pieces, tail) = cut(format, &segments, tail, interrupt);
        let end = match tail {
            Interruption::End => BodyEnd::Terminator,
            Interruption::Disconnect => BodyEnd::Disconnect,
            Interruption::ErrorEvent {
                error_type,
                message,
            } if keep_alive_after_error => {
                pieces.push(sse::error_event(format, &error_type, &message));
                BodyEnd::Terminator
            }
            Interruption::ErrorEvent {
                error_type,
                message,
            } => BodyEnd::LastEvent(sse::error_event(format, &error_type, &message)),
            Interruption::Stall { keep_alive: None } => BodyEnd::Stall,
            Interruption::Stall {
                keep_alive: Some(every),
            } => BodyEnd::KeepAlive {
                every,
                ping: sse::keep_alive(format),
            },
        };
        Reply::Stream(StreamReply {
            content_type: format.stream_content_type(),
            headers,
            pieces,
            chunk_size,
            chunk_delay,
            terminator_delay,
            end,
        })
    }
}

/// Cuts the encoded segments at the interruption point: the body pieces to send and what
/// happens after them.
fn cut(
    format: WireFormat,
    segments: &[Segment],
    tail: Tail,
    interrupt: Option<(StreamPoint, Interruption)>,
) -> (Vec<Vec<u8>>, Interruption) {
    let mut pieces: Vec<Vec<u8>> = segments.iter().map(|s| s.bytes.clone()).collect();
    let natural = match tail {
        Tail::None => Interruption::End,
        Tail::Disconnect => Interruption::Disconnect,
        Tail::Stall => Interruption::Stall { keep_alive: None },
        Tail::ErrorEvent {
            error_type,
            message,
        } => Interruption::ErrorEvent {
            error_type,
            message,
        },
        Tail::Garbage => {
            pieces.push(provider::of(format).mock().garbage());
            Interruption::End
        }
    };
    let Some((point, interruption)) = interrupt else {
        return (pieces, natural);
    };
    let position = |pred: &dyn Fn(&Segment) -> bool| segments.iter().position(pred);
    // The number of whole segments to send, or a byte offset.
    let cut_segments = match point {
        StreamPoint::BeforeContent => {
            position(&|s| s.kind != SegmentKind::Preamble).unwrap_or(segments.len())
        }
        StreamPoint::AfterFirstContent => position(&|s| s.kind == SegmentKind::Content)
            .map(|i| i + 1)
            .unwrap_or(segments.len()),
        StreamPoint::BeforeEnd => {
            position(&|s| s.kind == SegmentKind::End).unwrap_or(segments.len())
        }
        StreamPoint::AfterBytes(n) => {
            let all: Vec<u8> = pieces.concat();
            let cut = n.min(all.len());
            return (
                vec![all.get(..cut).unwrap_or_default().to_vec()],
                interruption,
            );
        }
    };
    pieces.truncate(cut_segments);
    (pieces, interruption)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(reply: Reply) -> StreamReply {
        match reply {
            Reply::Stream(stream) => stream,
            other => panic!("expected a stream, got {other:?}"),
        }
    }

    fn text(stream: &StreamReply) -> String {
        String::from_utf8(stream.pieces.concat()).unwrap()
    }

    #[test]
    fn a_whole_stream_ends_with_the_marker_and_the_terminator() {
        let reply = stream(
            MockResponse::stream(ScriptedResponse::text("hi")).into_reply(WireFormat::Anthropic),
        );
        assert!(text(&reply).contains("event: message_stop"));
        assert_eq!(reply.end, BodyEnd::Terminator);
    }

    #[test]
    fn truncated_drops_the_end_marker_but_ends_the_body_cleanly() {
        for format in [WireFormat::Anthropic, WireFormat::OpenAiChat] {
            let whole =
                stream(MockResponse::stream(ScriptedResponse::text("hi")).into_reply(format));
            let cut = stream(
                MockResponse::stream(ScriptedResponse::text("hi"))
                    .truncated()
                    .into_reply(format),
            );
            assert!(cut.pieces.len() < whole.pieces.len(), "{format:?}");
            assert!(text(&whole).starts_with(&text(&cut)), "{format:?}");
            assert!(!text(&cut).contains("message_stop") && !text(&cut).contains("[DONE]"));
            assert_eq!(cut.end, BodyEnd::Terminator);
        }
    }

    #[test]
    fn a_byte_cut_sends_exactly_that_many_bytes_then_disconnects() {
        let reply = stream(
            MockResponse::stream(ScriptedResponse::text("hello"))
                .disconnect_after_bytes(7)
                .into_reply(WireFormat::OpenAiChat),
        );
        assert_eq!(reply.pieces.concat().len(), 7);
        assert_eq!(reply.end, BodyEnd::Disconnect);
    }

    #[test]
    fn before_content_keeps_only_the_preamble() {
        let reply = stream(
            MockResponse::stream(ScriptedResponse::text("hello"))
                .error_event_at(StreamPoint::BeforeContent, "overloaded_error", "busy")
                .into_reply(WireFormat::Anthropic),
        );
        assert!(text(&reply).contains("message_start"));
        assert!(!text(&reply).contains("hello"));
        let BodyEnd::LastEvent(event) = reply.end else {
            panic!("expected an error event");
        };
        assert!(String::from_utf8(event)
            .unwrap()
            .contains("overloaded_error"));
    }

    #[test]
    fn an_error_event_may_end_with_the_terminator_and_keep_the_connection() {
        for format in [
            WireFormat::Anthropic,
            WireFormat::OpenAiChat,
            WireFormat::OpenAiResponses,
        ] {
            let reply = stream(
                MockResponse::stream(ScriptedResponse::text("hello"))
                    .error_event_at(StreamPoint::AfterFirstContent, "server_error", "busy")
                    .keep_alive_after_error()
                    .into_reply(format),
            );
            assert_eq!(reply.end, BodyEnd::Terminator, "{format:?}");
            let last = String::from_utf8(reply.pieces.last().unwrap().clone()).unwrap();
            assert!(last.contains("server_error"), "{format:?}: {last}");
            assert!(text(&reply).contains("hello"), "{format:?}");
        }
    }

    #[test]
    fn a_status_answer_is_a_whole_provider_shaped_error() {
        let Reply::Whole {
            status,
            headers,
            body,
            ..
        } = MockResponse::status(529).into_reply(WireFormat::Anthropic)
        else {
            panic!("expected a whole reply");
        };
        assert_eq!(status, 529);
        assert!(headers
            .iter()
            .any(|(n, v)| n == "request-id" && v == "req_mock"));
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["type"], "overloaded_error");
    }
}
