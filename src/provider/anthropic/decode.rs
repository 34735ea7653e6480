//! Stream decoding (stub).
use crate::error::LlmError;
use crate::provider::LlmEvent;

#[derive(Debug, Default)]
pub(crate) struct Decoder {
    done: bool,
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
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
        Ok(())
    }
    pub(crate) fn finish(&mut self, _out: &mut Vec<LlmEvent>) -> Result<(), LlmError> {
        Ok(())
    }
}
