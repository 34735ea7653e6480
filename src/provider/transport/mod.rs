//! How requests travel: retries and their backoff, pacing under a provider's rate limits,
//! the limits a response reports, and the redirect policy of the HTTP client.
//!
//! Inside: `exchange.rs` (the sans-IO exchange machine: one request's attempts, what a status,
//! a header or a body means, the retries before content), `http.rs` (its reqwest driver and
//! the clients' shared HTTP settings), `retry.rs` (`RetryPolicy`), `pacing.rs` (`Pacer`,
//! `RateLimiter`), `rate_limit_headers.rs` (`RateLimits::from_headers`: the providers'
//! rate-limit headers, read leniently).

pub(crate) mod exchange;
pub(crate) mod http;
pub(crate) mod pacing;
pub(crate) mod rate_limit_headers;
pub(crate) mod retry;

pub use crate::error::{Quota, RateLimits};
pub use http::redirect_policy;
pub use pacing::{Pace, Pacer, PacingLimits, RateLimiter};
pub use retry::{Jitter, RetryPolicy};
