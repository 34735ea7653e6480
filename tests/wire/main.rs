//! The wire layer through the public API: SSE and provider decoding, the assembler, the
//! recorded SDK transcripts (conformance) and the Responses decoder's properties.
//!
//! One test binary for the area (one link instead of one per file); each module is one
//! former test file, run alone with `cargo test --test wire <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod assembler;
mod conformance;
mod responses_props;
mod wire;
