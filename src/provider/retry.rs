//! [`RetryPolicy`]: which failures are retried, and after how long.
//!
//! The clients use it for failures before any content arrived; the agent reuses
//! [`RetryPolicy::delay_for`] for responses that fail after they started.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::error::LlmError;

/// How the backoff delay is randomized, so that many clients do not retry in lockstep.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// No randomness: exactly the exponential backoff (useful in tests).
    None,
    /// Uniform in `[0, backoff]` ("full jitter").
    Full,
    /// Uniform in `[backoff / 2, backoff]` ("equal jitter"; the default): never much shorter
    /// than the backoff, still spread out.
    #[default]
    Equal,
}

/// Which failures to retry and how long to wait before each retry.
///
/// Retried: connection failures, timeouts, HTTP 408, 409, 429 (but not an exhausted quota),
/// 5xx and Anthropic's 529 `overloaded_error`, in-stream overload and server errors, and
/// streams cut short or corrupted before any content arrived. A server's `x-should-retry`
/// header overrides the status, except that 400, 401, 403, 404, 413 and 422 are never retried.
///
/// The delay is the server's `retry-after-ms` / `retry-after` when it sent one (a request to
/// wait longer than [`RetryPolicy::max_retry_after`] is not retried: the error surfaces with
/// [`LlmError::retry_after`] set), otherwise
/// `initial_backoff * multiplier^(attempt - 1)`, capped at `max_backoff`, with [`Jitter`].
///
/// ```
/// use std::time::Duration;
/// use agent_loop::{LlmError, RetryPolicy};
///
/// let policy = RetryPolicy::default()
///     .max_retries(5)
///     .initial_backoff(Duration::from_millis(200))
///     .jitter(agent_loop::Jitter::None);
/// let error = LlmError::Connect { message: "refused".into() };
/// assert_eq!(policy.delay_for(1, &error), Some(Duration::from_millis(200)));
/// assert_eq!(policy.delay_for(2, &error), Some(Duration::from_millis(400)));
/// assert_eq!(policy.delay_for(6, &error), None);
/// assert_eq!(RetryPolicy::none().delay_for(1, &error), None);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    multiplier: f64,
    jitter: Jitter,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 3 retries, 500 ms initial backoff doubling up to 30 s, equal jitter, server-requested
    /// delays honoured up to 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            multiplier: 2.0,
            jitter: Jitter::Equal,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy::default().max_retries(0)
    }

    /// The most retries after the first attempt (default 3; 0 disables retries).
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// The backoff before the first retry (default 500 ms).
    pub fn initial_backoff(mut self, delay: Duration) -> Self {
        self.initial_backoff = delay;
        self
    }

    /// The longest backoff (default 30 s).
    pub fn max_backoff(mut self, delay: Duration) -> Self {
        self.max_backoff = delay;
        self
    }

    /// The factor the backoff grows by per attempt (default 2; values below 1 are taken as 1).
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = if multiplier.is_finite() && multiplier >= 1.0 {
            multiplier
        } else {
            1.0
        };
        self
    }

    /// How the backoff is randomized (default [`Jitter::Equal`]).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The longest server-requested delay (`retry-after`) that is honoured (default 60 s);
    /// a server asking for more is not retried.
    pub fn max_retry_after(mut self, delay: Duration) -> Self {
        self.max_retry_after = delay;
        self
    }

    /// The configured maximum number of retries.
    pub fn get_max_retries(&self) -> u32 {
        self.max_retries
    }

    /// How long to wait before retry number `attempt` (1 for the first retry) after `error`,
    /// or `None` when the error must not be retried or the retries are used up.
    pub fn delay_for(&self, attempt: u32, error: &LlmError) -> Option<Duration> {
        if attempt == 0 || attempt > self.max_retries || !is_retryable(error) {
            return None;
        }
        if let Some(requested) = error.retry_after() {
            return (requested <= self.max_retry_after).then_some(requested);
        }
        Some(self.backoff(attempt))
    }

    /// The jittered exponential backoff for `attempt` (1-based).
    fn backoff(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let base = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = base.min(self.max_backoff.as_secs_f64()).max(0.0);
        let seconds = match self.jitter {
            Jitter::None => capped,
            Jitter::Full => capped * random_unit(),
            Jitter::Equal => capped / 2.0 + capped / 2.0 * random_unit(),
        };
        Duration::try_from_secs_f64(seconds).unwrap_or(self.max_backoff)
    }
}

/// [`LlmError::is_retryable`], except that the statuses that can never succeed on a resend are
/// not retried even when the server says `x-should-retry: true`.
fn is_retryable(error: &LlmError) -> bool {
    if let Some(status) = error.status() {
        if matches!(status, 400 | 401 | 403 | 404 | 413 | 422) {
            return false;
        }
    }
    error.is_retryable()
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    // RandomState is seeded randomly per process (and per thread's keys); hashing nothing
    // gives a random 64-bit value without a rand dependency.
    let seed = RandomState::new().build_hasher().finish();
    seed | 1
}

/// A uniform value in `[0, 1)` from a thread-local xorshift64* generator.
fn random_unit() -> f64 {
    RNG.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (r >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;

    fn api(status: u16) -> LlmError {
        LlmError::Api(Box::new(ApiError::new(status, "x")))
    }

    #[test]
    fn statuses_are_classified() {
        let p = RetryPolicy::default();
        for status in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(p.delay_for(1, &api(status)).is_some(), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(p.delay_for(1, &api(status)).is_none(), "{status}");
        }
    }

    #[test]
    fn should_retry_header_cannot_force_a_client_error() {
        let mut e = ApiError::new(400, "bad");
        e.should_retry = Some(true);
        assert_eq!(
            RetryPolicy::default().delay_for(1, &LlmError::Api(Box::new(e))),
            None
        );
        let mut e = ApiError::new(503, "no");
        e.should_retry = Some(false);
        assert_eq!(
            RetryPolicy::default().delay_for(1, &LlmError::Api(Box::new(e))),
            None
        );
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let mut e = ApiError::new(429, "slow down");
        e.retry_after = Some(Duration::from_secs(7));
        let e = LlmError::Api(Box::new(e));
        let p = RetryPolicy::default();
        assert_eq!(p.delay_for(1, &e), Some(Duration::from_secs(7)));
        assert_eq!(
            p.clone()
                .max_retry_after(Duration::from_secs(5))
                .delay_for(1, &e),
            None
        );
    }

    #[test]
    fn backoff_grows_caps_and_jitters_within_bounds() {
        let p = RetryPolicy::default().max_retries(20).jitter(Jitter::None);
        let e = LlmError::Connect {
            message: "x".into(),
        };
        assert_eq!(p.delay_for(1, &e), Some(Duration::from_millis(500)));
        assert_eq!(p.delay_for(3, &e), Some(Duration::from_secs(2)));
        assert_eq!(p.delay_for(20, &e), Some(Duration::from_secs(30)));
        let equal = RetryPolicy::default();
        let full = RetryPolicy::default().jitter(Jitter::Full);
        for _ in 0..1000 {
            let d = equal.delay_for(2, &e).unwrap();
            assert!(
                d >= Duration::from_millis(500) && d <= Duration::from_secs(1),
                "{d:?}"
            );
            let d = full.delay_for(2, &e).unwrap();
            assert!(d <= Duration::from_secs(1), "{d:?}");
        }
    }

    #[test]
    fn non_retryable_errors_are_not_retried() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.delay_for(
                1,
                &LlmError::InvalidRequest {
                    message: "x".into()
                }
            ),
            None
        );
        let overflow = LlmError::ContextOverflow(Box::new(ApiError::new(400, "too long")));
        assert_eq!(p.delay_for(1, &overflow), None);
        let quota = {
            let mut e = ApiError::new(429, "quota");
            e.code = Some("insufficient_quota".into());
            LlmError::Api(Box::new(e))
        };
        assert_eq!(p.delay_for(1, &quota), None);
        assert_eq!(
            p.delay_for(
                0,
                &LlmError::Connect {
                    message: "x".into()
                }
            ),
            None
        );
    }
}
