//! Each client over loopback HTTP: request bodies, streaming, retries and faults, rate
//! limits, the mock server itself, media, settings, the OpenAI-compatible servers, and a real
//! model (llama.cpp, when `AGENT_LOOP_REAL_MODEL_URL` is set).
//!
//! One test binary for the area (one link instead of one per file); each module is one
//! former test file, run alone with `cargo test --test providers <module>::`.

#[path = "../common/mod.rs"]
mod common;

mod aimock;
mod bedrock;
mod cassette_player;
mod cassettes;
mod clients;
mod compat;
mod conformance;
mod context_editing;
mod faults;
mod gemini;
mod hosted_search;
mod mock_server;
mod multimodal;
mod ollama;
mod ratelimit;
mod real_model;
mod responses;
mod responses_client;
mod responses_compact;
mod server_compaction;
mod settings;
mod strict_schemas;
mod strict_tools;
