//! Newline-delimited JSON framing (Ollama's `application/x-ndjson` stream): bytes in, lines
//! out, sans-IO, with a bound on the line length.
//!
//! A line ends at `\n`; a `\r` before it is dropped, and so are empty lines. The bytes of a
//! line are buffered only until its end, and never past `max_line_bytes`: a longer line is
//! refused with [`LlmError::LimitExceeded`]. A line that is not UTF-8 is
//! [`LlmError::Malformed`]. After an error the decoder is spent and returns it again.

use crate::error::LlmError;

/// Splits a body into lines; see the module docs.
#[derive(Debug)]
pub(crate) struct LineDecoder {
    /// The bytes of the line being read (no `\n` yet).
    pending: Vec<u8>,
    max_line_bytes: usize,
    error: Option<LlmError>,
}

impl LineDecoder {
    /// A decoder that refuses lines longer than `max_line_bytes`.
    pub(crate) fn new(max_line_bytes: usize) -> Self {
        LineDecoder {
            pending: Vec::new(),
            max_line_bytes,
            error: None,
        }
    }

    /// Feeds a chunk of the body; `on_line` gets each complete, non-empty line.
    pub(crate) fn push_with<F>(&mut self, chunk: &[u8], mut on_line: F) -> Result<(), LlmError>
    where
        F: FnMut(&str) -> Result<(), LlmError>,
    {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let result = self.push_inner(chunk, &mut on_line);
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    /// Ends the body: a last line without its `\n` is dispatched too.
    pub(crate) fn finish_with<F>(&mut self, mut on_line: F) -> Result<(), LlmError>
    where
        F: FnMut(&str) -> Result<(), LlmError>,
    {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let line = std::mem::take(&mut self.pending);
        let result = dispatch(&line, &mut on_line);
        if let Err(e) = &result {
            self.error = Some(e.clone());
        }
        result
    }

    fn push_inner(
        &mut self,
        mut chunk: &[u8],
        on_line: &mut dyn FnMut(&str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            let (head, rest) = chunk.split_at(end);
            chunk = rest.get(1..).unwrap_or_default();
            if self.pending.is_empty() {
                self.check(head.len())?;
                dispatch(head, on_line)?;
            } else {
                self.check(self.pending.len() + head.len())?;
                self.pending.extend_from_slice(head);
                let line = std::mem::take(&mut self.pending);
                dispatch(&line, on_line)?;
            }
        }
        self.check(self.pending.len() + chunk.len())?;
        self.pending.extend_from_slice(chunk);
        Ok(())
    }

    fn check(&self, len: usize) -> Result<(), LlmError> {
        if len > self.max_line_bytes {
            return Err(LlmError::LimitExceeded {
                what: "an NDJSON line".into(),
                limit: self.max_line_bytes,
                setting: "StreamLimits::max_line_bytes".into(),
            });
        }
        Ok(())
    }
}

fn dispatch(
    line: &[u8],
    on_line: &mut dyn FnMut(&str) -> Result<(), LlmError>,
) -> Result<(), LlmError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let text = simdutf8::basic::from_utf8(line)
        .map_err(|_| LlmError::malformed("an NDJSON line is not UTF-8"))?;
    on_line(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(decoder: &mut LineDecoder, chunks: &[&[u8]]) -> Result<Vec<String>, LlmError> {
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push_with(chunk, |l| {
                out.push(l.to_owned());
                Ok(())
            })?;
        }
        decoder.finish_with(|l| {
            out.push(l.to_owned());
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn splits_on_newlines_and_skips_blank_lines() {
        let mut d = LineDecoder::new(64);
        let got = lines(&mut d, &[b"{\"a\":1}\r\n\n{\"b\"", b":2}\n  \n{\"c\":3}"]).unwrap();
        assert_eq!(got, ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }

    #[test]
    fn a_long_line_is_refused_and_the_decoder_stays_spent() {
        let mut d = LineDecoder::new(4);
        assert!(lines(&mut d, &[b"1234\n"]).is_ok());
        let mut d = LineDecoder::new(4);
        let err = lines(&mut d, &[b"123", b"45"]).unwrap_err();
        assert!(
            matches!(err, LlmError::LimitExceeded { limit: 4, .. }),
            "{err}"
        );
        assert_eq!(d.push_with(b"\n", |_| Ok(())).unwrap_err(), err);
        let mut d = LineDecoder::new(4);
        assert!(d.push_with(b"12345\n", |_| Ok(())).is_err());
        // The bound counts the bytes held and the new ones together, with or without the end
        // of the line in the chunk.
        for (chunks, ok) in [
            (&[&b"1"[..], b"2345\n"][..], false),
            (&[&b"1"[..], b"2345"][..], false),
            (&[&b"12"[..], b"34\n"][..], true),
            (&[&b"123"[..], b"4"][..], true),
        ] {
            let got = lines(&mut LineDecoder::new(4), chunks);
            assert_eq!(got.is_ok(), ok, "{chunks:?}: {got:?}");
        }
        let got = lines(&mut LineDecoder::new(5), &[b"123", b"45\n", b"123", b"45"]);
        assert_eq!(got.unwrap(), ["12345", "12345"]);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_malformed() {
        let mut d = LineDecoder::new(64);
        let err = lines(&mut d, &[b"\xff\xfe\n"]).unwrap_err();
        assert!(matches!(err, LlmError::Malformed { .. }), "{err}");
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_lines(
            body in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'x'), Just(b' '), any::<u8>()], 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let whole = lines(&mut LineDecoder::new(1 << 20), &[&body]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut at = 0;
            for cut in cuts {
                chunks.push(&body[at..cut]);
                at = cut;
            }
            chunks.push(&body[at..]);
            prop_assert_eq!(lines(&mut LineDecoder::new(1 << 20), &chunks), whole);
        }
    }
}
