//! Helpers of the web front-ends' tests: the core's own (`tests/common/` of the workspace
//! root, included as they are, not copied) and the UI's.
#![allow(dead_code, unreachable_pub, unused_imports)]

#[path = "../../../tests/common/mod.rs"]
mod shared;

pub mod ui;
pub mod web;

pub use shared::agent::run_cancelling;
pub use shared::fast_retries;
