//! SseDecoder on arbitrary bytes: fed whole, split at the fuzzer's cut points, and one byte at a
//! time, with the default and with small limits. Every run must give the same events and the
//! same error, never panic, and dispatch only well-formed events. Input layout: see
//! `agent_loop_fuzz` (fuzz/src/lib.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_loop_fuzz::sse_target(data));
