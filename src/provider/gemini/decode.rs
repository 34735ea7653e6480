//! (Scaffold) stream decoding.

use crate::error::LlmError;
use crate::provider::LlmEvent;

/// The format's decoder: one event's data in, `LlmEvent`s out.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    done: bool,
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Decoder::default()
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn on_event(
        &mut self,
        _event: &str,
        _data: &str,
        _out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        Err(LlmError::malformed("this wire format is not built yet"))
    }

    pub(crate) fn decode_whole(
        &mut self,
        _text: &str,
        _out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        Err(LlmError::malformed("this wire format is not built yet"))
    }

    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        Err(LlmError::incomplete("this wire format is not built yet"))
    }
}
