//! The AWS binary event-stream framing (Bedrock's `application/vnd.amazon.eventstream`):
//! bytes in, messages out, sans-IO, every length bounded and both CRC32 checks made.
//!
//! A message is, all integers big-endian:
//!
//! ```text
//!  ┌──────────────┬───────────────┬─────────────┬─────────┬─────────┬─────────────┐
//!  │ total length │ headers length│ prelude CRC │ headers │ payload │ message CRC │
//!  │     u32      │      u32      │ u32 (of 0..8)│         │         │ u32 (of all │
//!  │              │               │             │         │         │ before it)  │
//!  └──────────────┴───────────────┴─────────────┴─────────┴─────────┴─────────────┘
//! ```
//!
//! A header is a name (`u8` length, then the bytes), a type byte and a typed value: 0 true and
//! 1 false (no value), 2 byte (1), 3 short (2), 4 integer (4), 5 long (8), 6 byte array and
//! 7 string (`u16` length, then the bytes), 8 timestamp (8), 9 UUID (16). The headers read
//! here are the strings `:message-type` (`event`, `exception` or `error`), `:event-type`,
//! `:exception-type`, `:content-type`, `:error-code` and `:error-message`; the others are
//! skipped by their lengths.
//!
//! The decoder keeps at most one message: the prelude is checked (its CRC, `total >= 16`,
//! `headers <= total - 16`, `total <= max_message_bytes`) before any more of the message is
//! buffered, and the message CRC before its headers are read. An `event` reaches the caller as
//! its `:event-type` and UTF-8 payload; an `exception` as its `:exception-type` (a name that
//! ends in `Exception`, which the format's decoder turns into its error) and payload; an
//! `error` message is [`LlmError::Stream`] with its `:error-code` and `:error-message`.
//! Messages of another type are skipped.

use crate::error::LlmError;

/// The prelude: total length, headers length, prelude CRC.
const PRELUDE_BYTES: usize = 12;
/// The prelude and the message CRC: the smallest message.
const MIN_MESSAGE_BYTES: usize = PRELUDE_BYTES + 4;

/// Splits a body into event-stream messages; see the module docs.
#[derive(Debug)]
pub(crate) struct EventStreamDecoder {
    max_message_bytes: usize,
    /// The bytes of the message being read (at most one message).
    pending: Vec<u8>,
    /// Its total length, once its prelude is read and checked.
    total: Option<usize>,
}

impl EventStreamDecoder {
    /// A decoder that refuses messages longer than `max_message_bytes`.
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        EventStreamDecoder {
            max_message_bytes,
            pending: Vec::new(),
            total: None,
        }
    }

    /// Feeds a chunk of the body; `on_event` gets each complete message as its event name
    /// (`:event-type`, or `:exception-type` for an exception) and its UTF-8 payload.
    pub(crate) fn push_with<F>(&mut self, mut chunk: &[u8], mut on_event: F) -> Result<(), LlmError>
    where
        F: FnMut(&str, &str) -> Result<(), LlmError>,
    {
        while !chunk.is_empty() {
            let want = match self.total {
                None => PRELUDE_BYTES,
                Some(total) => total,
            };
            let take = want.saturating_sub(self.pending.len()).min(chunk.len());
            let (head, rest) = chunk.split_at(take);
            self.pending.extend_from_slice(head);
            chunk = rest;
            if self.pending.len() < want {
                continue;
            }
            match self.total {
                None => self.total = Some(self.prelude()?),
                Some(_) => {
                    let message = std::mem::take(&mut self.pending);
                    self.total = None;
                    dispatch(&message, &mut on_event)?;
                }
            }
        }
        Ok(())
    }

    /// Checks the prelude in `pending` and returns the message's total length.
    fn prelude(&self) -> Result<usize, LlmError> {
        let total = be_u32(&self.pending, 0)?;
        let headers = be_u32(&self.pending, 4)?;
        let crc = be_u32(&self.pending, 8)?;
        let prelude = self.pending.get(..8).unwrap_or_default();
        if crc32fast::hash(prelude) != crc {
            return Err(LlmError::malformed(
                "event-stream message: the prelude CRC does not match (corrupted lengths)",
            ));
        }
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        let headers = usize::try_from(headers).unwrap_or(usize::MAX);
        if total < MIN_MESSAGE_BYTES {
            return Err(LlmError::malformed(format!(
                "event-stream message: a total length of {total} bytes, less than the \
                 {MIN_MESSAGE_BYTES} of prelude and CRC"
            )));
        }
        if headers > total - MIN_MESSAGE_BYTES {
            return Err(LlmError::malformed(format!(
                "event-stream message: {headers} bytes of headers do not fit its total \
                 length of {total} bytes"
            )));
        }
        if total > self.max_message_bytes {
            return Err(LlmError::LimitExceeded {
                what: "an event-stream message".into(),
                limit: self.max_message_bytes,
                setting: "StreamLimits::max_event_bytes".into(),
            });
        }
        Ok(total)
    }

    /// Ends the body: an error when it ended inside a message.
    pub(crate) fn finish(&mut self) -> Result<(), LlmError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let detail = match self.total {
            Some(total) => format!(
                "the body ended inside an event-stream message ({} of its {total} bytes)",
                self.pending.len()
            ),
            None => format!(
                "the body ended inside an event-stream message's prelude ({} of 12 bytes)",
                self.pending.len()
            ),
        };
        Err(LlmError::incomplete(detail))
    }
}

fn be_u32(bytes: &[u8], at: usize) -> Result<u32, LlmError> {
    bytes
        .get(at..at + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| LlmError::malformed("event-stream message: cut short"))
}

/// The string headers a message is routed by.
#[derive(Default)]
struct Routing<'a> {
    message_type: Option<&'a str>,
    event_type: Option<&'a str>,
    exception_type: Option<&'a str>,
    error_code: Option<&'a str>,
    error_message: Option<&'a str>,
}

/// Checks one whole message (prelude already checked) and hands it on.
fn dispatch(
    message: &[u8],
    on_event: &mut dyn FnMut(&str, &str) -> Result<(), LlmError>,
) -> Result<(), LlmError> {
    let total = message.len();
    let body = message.get(..total.saturating_sub(4)).unwrap_or_default();
    let crc = be_u32(message, total.saturating_sub(4))?;
    if crc32fast::hash(body) != crc {
        return Err(LlmError::malformed(
            "event-stream message: the message CRC does not match (corrupted headers or payload)",
        ));
    }
    let headers_len = usize::try_from(be_u32(message, 4)?).unwrap_or(usize::MAX);
    let headers_end = PRELUDE_BYTES.saturating_add(headers_len);
    let headers = body
        .get(PRELUDE_BYTES..headers_end)
        .ok_or_else(|| LlmError::malformed("event-stream message: headers cut short"))?;
    let payload = body.get(headers_end..).unwrap_or_default();
    let routing = read_headers(headers)?;
    let payload = std::str::from_utf8(payload).map_err(|e| {
        LlmError::malformed(format!(
            "event-stream message: the payload is not UTF-8: {e}"
        ))
    })?;
    match routing.message_type.unwrap_or("event") {
        "event" => on_event(routing.event_type.unwrap_or_default(), payload),
        "exception" => {
            let name = routing.exception_type.unwrap_or("unknownException");
            if name.to_ascii_lowercase().ends_with("exception") {
                on_event(name, payload)
            } else {
                Err(LlmError::Stream {
                    error_type: name.to_owned(),
                    message: payload.chars().take(500).collect(),
                })
            }
        }
        "error" => Err(LlmError::Stream {
            error_type: routing.error_code.unwrap_or("error").to_owned(),
            message: routing.error_message.unwrap_or_default().to_owned(),
        }),
        // A message type added later carries nothing this decoder knows.
        _ => Ok(()),
    }
}

/// Reads every header by its type's length, keeping the string ones a message is routed by.
fn read_headers(mut bytes: &[u8]) -> Result<Routing<'_>, LlmError> {
    let cut = || LlmError::malformed("event-stream message: a header is cut short");
    let mut routing = Routing::default();
    while let Some((&name_len, rest)) = bytes.split_first() {
        let name_len = usize::from(name_len);
        let name = rest.get(..name_len).ok_or_else(cut)?;
        let (&kind, rest) = rest
            .get(name_len..)
            .unwrap_or_default()
            .split_first()
            .ok_or_else(cut)?;
        let (value, rest): (Option<&[u8]>, &[u8]) = match kind {
            0 | 1 => (None, rest),
            2..=5 | 8 | 9 => {
                let n = match kind {
                    2 => 1,
                    3 => 2,
                    4 => 4,
                    9 => 16,
                    _ => 8,
                };
                (None, rest.get(n..).ok_or_else(cut)?)
            }
            6 | 7 => {
                let len: [u8; 2] = rest
                    .get(..2)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(cut)?;
                let len = usize::from(u16::from_be_bytes(len));
                let value = rest.get(2..2 + len).ok_or_else(cut)?;
                (Some(value), rest.get(2 + len..).unwrap_or_default())
            }
            other => {
                return Err(LlmError::malformed(format!(
                    "event-stream message: unknown header value type {other}"
                )))
            }
        };
        bytes = rest;
        let (Some(value), 7) = (value, kind) else {
            continue;
        };
        let value = std::str::from_utf8(value).map_err(|_| {
            LlmError::malformed("event-stream message: a string header is not UTF-8")
        })?;
        match name {
            b":message-type" => routing.message_type = Some(value),
            b":event-type" => routing.event_type = Some(value),
            b":exception-type" => routing.exception_type = Some(value),
            b":error-code" => routing.error_code = Some(value),
            b":error-message" => routing.error_message = Some(value),
            _ => {}
        }
    }
    Ok(routing)
}

/// One message with string headers (type 7) and `payload`: the mock server's and the tests'
/// encoder. Names longer than 255 bytes and values longer than 65,535 are cut.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn encode_message(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (name, value) in headers {
        let name = name.as_bytes();
        let name = name.get(..255).unwrap_or(name);
        let value = value.as_bytes();
        let value = value.get(..usize::from(u16::MAX)).unwrap_or(value);
        encoded.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        encoded.extend_from_slice(name);
        encoded.push(7);
        encoded.extend_from_slice(&u16::try_from(value.len()).unwrap_or(u16::MAX).to_be_bytes());
        encoded.extend_from_slice(value);
    }
    let total = MIN_MESSAGE_BYTES + encoded.len() + payload.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(
        &u32::try_from(encoded.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&encoded);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Got = Vec<(String, String)>;

    fn decode_chunks(chunks: &[&[u8]], max: usize) -> (Got, Result<(), LlmError>) {
        let mut decoder = EventStreamDecoder::new(max);
        let mut got = Vec::new();
        for chunk in chunks {
            let result = decoder.push_with(chunk, |name, payload| {
                got.push((name.to_owned(), payload.to_owned()));
                Ok(())
            });
            if result.is_err() {
                return (got, result);
            }
        }
        let result = decoder.finish();
        (got, result)
    }

    fn decode(body: &[u8]) -> (Got, Result<(), LlmError>) {
        decode_chunks(&[body], 1 << 20)
    }

    fn event(name: &str, payload: &str) -> Vec<u8> {
        encode_message(
            &[
                (":event-type", name),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    // botocore's tests/unit/test_eventstream.py vectors.
    const EMPTY_MESSAGE: &[u8] = b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff";
    const PAYLOAD_ONE_STR_HEADER: &[u8] = b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1";
    const ALL_HEADER_TYPES: &[u8] = b"\x00\x00\x00\x62\x00\x00\x00\x52\x03\xb5\xcb\x9c\
\x010\x00\x011\x01\x012\x02\x02\x013\x03\x00\x03\
\x014\x04\x00\x00\x00\x04\x015\x05\x00\x00\x00\x00\x00\x00\x00\x05\
\x016\x06\x00\x05bytes\x017\x07\x00\x04utf8\
\x018\x08\x00\x00\x00\x00\x00\x00\x00\x08\x019\x090123456789abcdef\
\x63\x35\x36\x71";
    const ERROR_MESSAGE: &[u8] = b"\x00\x00\x00\x52\x00\x00\x00\x42\xbf\x23\x63\x7e\
\x0d:message-type\x07\x00\x05error\
\x0b:error-code\x07\x00\x04code\
\x0e:error-message\x07\x00\x07message\
\x6b\x6c\xea\x3d";
    const CORRUPTED_LENGTH: &[u8] =
        b"\x01\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96";
    const CORRUPTED_PAYLOAD: &[u8] =
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'\x8d\xc3e96";
    const CORRUPTED_HEADERS: &[u8] = b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent+type\x07\x00\x10application/json{'foo':'bar'}\x8d\x9c\x08\xb1";
    const INVALID_HEADERS_LENGTH: &[u8] = b"\x00\x00\x00\x3d\xff\x00\x01\x02\x15\x83\xf5\xc2\x0ccontent-type\x07\x00\x10application/json{'foo':'bar'}\x2f\x37\x7f\x5d";

    #[test]
    fn botocore_vectors_decode() {
        // Messages without a type are events; these have no :event-type.
        assert_eq!(
            decode(EMPTY_MESSAGE),
            (vec![(String::new(), String::new())], Ok(()))
        );
        assert_eq!(
            decode(PAYLOAD_ONE_STR_HEADER),
            (vec![(String::new(), "{'foo':'bar'}".to_owned())], Ok(()))
        );
        // Every header type is skipped by its length.
        assert_eq!(
            decode(ALL_HEADER_TYPES),
            (vec![(String::new(), String::new())], Ok(()))
        );
        let all: Vec<u8> = [EMPTY_MESSAGE, PAYLOAD_ONE_STR_HEADER, ALL_HEADER_TYPES].concat();
        assert_eq!(decode(&all).0.len(), 3);
        assert_eq!(
            decode(ERROR_MESSAGE).1,
            Err(LlmError::Stream {
                error_type: "code".into(),
                message: "message".into()
            })
        );
    }

    #[test]
    fn botocore_corruptions_are_refused_naming_the_check() {
        for (body, needle) in [
            (CORRUPTED_LENGTH, "prelude CRC"),
            (CORRUPTED_PAYLOAD, "message CRC"),
            (CORRUPTED_HEADERS, "message CRC"),
            (INVALID_HEADERS_LENGTH, "do not fit"),
        ] {
            let (got, result) = decode(body);
            assert!(got.is_empty());
            match result {
                Err(LlmError::Malformed { message }) => {
                    assert!(message.contains(needle), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn events_and_exceptions_are_routed_by_their_headers() {
        let body = [
            event("messageStart", r#"{"role":"assistant"}"#),
            encode_message(
                &[
                    (":exception-type", "throttlingException"),
                    (":content-type", "application/json"),
                    (":message-type", "exception"),
                ],
                br#"{"message":"slow down"}"#,
            ),
        ]
        .concat();
        let (got, result) = decode(&body);
        assert_eq!(result, Ok(()));
        assert_eq!(
            got,
            [
                (
                    "messageStart".to_owned(),
                    r#"{"role":"assistant"}"#.to_owned()
                ),
                (
                    "throttlingException".to_owned(),
                    r#"{"message":"slow down"}"#.to_owned()
                )
            ]
        );
        let odd = encode_message(
            &[(":message-type", "exception"), (":exception-type", "Boom")],
            b"{}",
        );
        assert!(
            matches!(decode(&odd).1, Err(LlmError::Stream { error_type, .. }) if error_type == "Boom")
        );
        let future = encode_message(&[(":message-type", "something-new")], b"x");
        assert_eq!(decode(&future), (vec![], Ok(())));
    }

    #[test]
    fn limits_and_truncation() {
        let body = event("metadata", &"x".repeat(100));
        let (_, result) = decode_chunks(&[&body], 64);
        assert!(
            matches!(result, Err(LlmError::LimitExceeded { limit: 64, .. })),
            "{result:?}"
        );
        let (_, result) = decode_chunks(&[&body], body.len());
        assert_eq!(result, Ok(()));
        for cut in [1, 11, 12, 13, body.len() - 1] {
            let (got, result) = decode(body.get(..cut).unwrap());
            assert!(got.is_empty());
            assert!(
                matches!(result, Err(LlmError::Incomplete { .. })),
                "{cut}: {result:?}"
            );
        }
        // A total below the minimum, with a valid prelude CRC.
        let mut small = 8u32.to_be_bytes().to_vec();
        small.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32fast::hash(&small);
        small.extend_from_slice(&crc.to_be_bytes());
        assert!(matches!(decode(&small).1, Err(LlmError::Malformed { .. })));
        // Headers one byte longer than the message has room for (valid CRCs): refused by
        // the prelude check, before any header is read.
        let mut over = 32u32.to_be_bytes().to_vec();
        over.extend_from_slice(&17u32.to_be_bytes());
        let crc = crc32fast::hash(&over);
        over.extend_from_slice(&crc.to_be_bytes());
        over.extend_from_slice(&[0u8; 16]);
        let crc = crc32fast::hash(&over);
        over.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(over.len(), 32);
        match decode(&over).1 {
            Err(LlmError::Malformed { message }) => {
                assert!(
                    message.contains("17 bytes of headers do not fit"),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
        // A payload that is not UTF-8.
        let bad = encode_message(&[(":event-type", "x")], &[0xff, 0xfe]);
        assert!(matches!(decode(&bad).1, Err(LlmError::Malformed { .. })));
    }

    #[test]
    fn an_error_from_the_callback_stops_the_push() {
        let body = [event("a", "1"), event("b", "2")].concat();
        let mut decoder = EventStreamDecoder::new(1 << 20);
        let mut seen = 0;
        let result = decoder.push_with(&body, |_, _| {
            seen += 1;
            Err(LlmError::malformed("stop"))
        });
        assert!(result.is_err());
        assert_eq!(seen, 1);
    }

    fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(("[a-zA-Z]{0,12}", "[ -~é🙂]{0,40}"), 1..5).prop_map(|events| {
            events
                .iter()
                .flat_map(|(name, payload)| event(name, payload))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_messages(body in body_strategy(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let (whole, result) = decode(&body);
            prop_assert_eq!(result, Ok(()));
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(body.get(last..p).unwrap_or_default());
                last = p;
            }
            chunks.push(body.get(last..).unwrap_or_default());
            let (split, result) = decode_chunks(&chunks, 1 << 20);
            prop_assert_eq!(result, Ok(()));
            prop_assert_eq!(&split, &whole);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            prop_assert_eq!(decode_chunks(&bytes, 1 << 20).0, whole);
        }

        /// A flipped bit anywhere in a message is caught by one of the CRCs.
        #[test]
        fn a_corrupted_bit_is_always_refused(body in body_strategy(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut corrupted = body.clone();
            let i = at.index(corrupted.len());
            corrupted[i] ^= 1 << bit;
            let (_, result) = decode(&corrupted);
            prop_assert!(result.is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), size in 1usize..20) {
            let chunks: Vec<&[u8]> = bytes.chunks(size).collect();
            let _ = decode_chunks(&chunks, 1 << 12);
        }
    }
}
