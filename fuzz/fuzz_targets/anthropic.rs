//! WireDecoder (Anthropic Messages) + StreamAssembler on arbitrary bytes: fed whole, split at the
//! fuzzer's cut points, and one byte at a time, with the default and with small StreamLimits.
//! Every run must give the same events and result, never panic, and a complete response must
//! be sound (ends with MessageStop, tool inputs are objects, invalid calls are never runnable,
//! limits hold). Input layout: see `agent_loop_fuzz` (fuzz/src/lib.rs).
#![no_main]

use agent_loop::wire::WireFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| agent_loop_fuzz::wire_target(WireFormat::Anthropic, data));
