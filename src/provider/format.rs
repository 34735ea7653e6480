//! [`Format`]: what the crate needs of one wire format.
//!
//! A format is one folder under `provider/` (its serde types, its request encoder, its stream
//! decoder, its client and, with feature `testing`, its mock side) with one `Format` value in
//! its `mod.rs`, registered in `provider/mod.rs` (`of`, `ALL`). Nothing else in the crate
//! matches on a `WireFormat`: the framing, the content type, the decoder and everything the
//! mock server does ask the format's unit.

use crate::wire::decoder::{EventDecoder, Framing};

/// What the crate needs of one wire format.
pub(crate) trait Format: Sync {
    /// How its body is cut into events (by default Server-Sent Events).
    fn framing(&self) -> Framing {
        Framing::Sse
    }

    /// A new decoder of its events.
    fn decoder(&self) -> Box<dyn EventDecoder>;

    /// The body its client sends for `request` with its default options, `model` when the
    /// request names none (the fuzz targets' and the tests' way in).
    #[cfg(any(test, fuzzing))]
    fn encode(
        &self,
        request: &crate::provider::ModelRequest,
        model: &str,
    ) -> Result<Vec<u8>, crate::error::LlmError>;

    /// Its mock side, for the [`MockServer`](crate::testing::MockServer).
    #[cfg(any(test, feature = "testing"))]
    fn mock(&self) -> &'static dyn super::mock::MockFormat;
}

/// Declares a format's unit in its folder's `mod.rs`: `unit!(Name, "what it is", encode:
/// |request, model| body)`, and `framing: Kind` when its body is not Server-Sent Events. The
/// folder has `decode::Decoder` (its [`EventDecoder`]) and, with feature `testing`,
/// `mock::Mock` (its `MockFormat`).
macro_rules! unit {
    (
        $unit:ident,
        $what:literal,
        encode: |$request:ident, $model:ident| $encode:expr
        $(, framing: $framing:ident)?
        $(,)?
    ) => {
        #[doc = concat!($what, " as one unit (see `provider/format.rs`).")]
        pub(crate) struct $unit;

        impl $crate::provider::format::Format for $unit {
            $(
                fn framing(&self) -> $crate::wire::decoder::Framing {
                    $crate::wire::decoder::Framing::$framing
                }
            )?

            fn decoder(&self) -> Box<dyn $crate::wire::decoder::EventDecoder> {
                Box::<decode::Decoder>::default()
            }

            #[cfg(any(test, fuzzing))]
            fn encode(
                &self,
                $request: &$crate::provider::ModelRequest,
                $model: &str,
            ) -> Result<Vec<u8>, $crate::error::LlmError> {
                $encode
            }

            #[cfg(any(test, feature = "testing"))]
            fn mock(&self) -> &'static dyn $crate::provider::mock::MockFormat {
                &mock::Mock
            }
        }
    };
}
pub(crate) use unit;
