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
///
/// The random values come from a generator seeded randomly per thread (so clients in different
/// processes and threads draw different delays), or from [`RetryPolicy::jitter_seed`] when a
/// caller needs the same delays on every run.
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
/// use agent_loop::{LlmError};
/// use agent_loop::provider::transport::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .max_retries(5)
///     .initial_backoff(Duration::from_millis(200))
///     .jitter(agent_loop::provider::transport::Jitter::None);
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
    /// `Some` makes the jitter a function of this seed and the attempt number.
    jitter_seed: Option<u64>,
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
            jitter_seed: None,
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

    /// The factor the backoff grows by per attempt (default 2; values below 1, NaN and
    /// infinities are taken as 1).
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        // `f64::max` returns 1.0 for NaN as well as for anything smaller.
        self.multiplier = if multiplier.is_finite() {
            multiplier.max(1.0)
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

    /// Makes the jitter deterministic: the random part of the delay before retry `attempt`
    /// becomes the `attempt`-th output of a SplitMix64 generator seeded with `seed`, so the
    /// same policy gives the same delay for the same attempt on every run, and the delays of
    /// successive attempts still differ.
    ///
    /// Without a seed (the default) each thread draws from its own randomly seeded generator,
    /// which is what spreads the retries of many clients apart. Use a seed for reproducible
    /// runs (tests, replays, a durable engine that journals its steps); give clients that share
    /// a server different seeds, or they retry in lockstep.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_loop::{LlmError};
    /// use agent_loop::provider::transport::{Jitter, RetryPolicy};
    ///
    /// let policy = RetryPolicy::default()
    ///     .initial_backoff(Duration::from_secs(1))
    ///     .jitter(Jitter::Full)
    ///     .jitter_seed(7);
    /// let error = LlmError::Connect { message: "refused".into() };
    /// let first = policy.delay_for(1, &error);
    /// assert_eq!(first, policy.clone().delay_for(1, &error));
    /// assert!(first.unwrap() <= Duration::from_secs(1));
    /// ```
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
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
        if attempt == 0 || attempt > self.max_retries || !error.is_retryable() {
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
            Jitter::Full => capped * self.random_unit(attempt),
            Jitter::Equal => capped / 2.0 + capped / 2.0 * self.random_unit(attempt),
        };
        Duration::try_from_secs_f64(seconds).unwrap_or(self.max_backoff)
    }

    /// A uniform value in `[0, 1)`: from the seed and the attempt when seeded, otherwise the
    /// next value of this thread's generator.
    fn random_unit(&self, attempt: u32) -> f64 {
        let bits = match self.jitter_seed {
            Some(seed) => splitmix64(seed.wrapping_add(GAMMA.wrapping_mul(u64::from(attempt)))),
            None => RNG.with(|state| {
                let next = state.get().wrapping_add(GAMMA);
                state.set(next);
                splitmix64(next)
            }),
        };
        unit(bits)
    }
}

thread_local! {
    /// The state of this thread's SplitMix64 generator (any value is a valid state).
    static RNG: Cell<u64> = Cell::new(random_seed());
}

/// A random 64-bit value, different per thread and per process.
fn random_seed() -> u64 {
    // RandomState's keys are random per thread (and differ between the RandomStates of one
    // thread); hashing nothing gives a random 64-bit value without a rand dependency.
    RandomState::new().build_hasher().finish()
}

/// The increment of SplitMix64's state per output (the golden ratio in 64-bit fixed point).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (Steele, Lea and Flood 2014): the `n`-th output of the
/// generator seeded with `s` is `splitmix64(s + n * GAMMA)`.
fn splitmix64(state: u64) -> u64 {
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The top 53 bits of `bits` as a uniform value in `[0, 1)`.
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
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

    fn connect() -> LlmError {
        LlmError::Connect {
            message: "x".into(),
        }
    }

    /// A policy whose un-jittered backoff is 1 s at every attempt, so that a delay in
    /// seconds is the jitter's random value itself (`Full`) or `0.5 + value / 2` (`Equal`).
    fn one_second(jitter: Jitter) -> RetryPolicy {
        RetryPolicy::default()
            .max_retries(u32::MAX)
            .initial_backoff(Duration::from_secs(1))
            .max_backoff(Duration::from_secs(1))
            .jitter(jitter)
    }

    fn delays(policy: &RetryPolicy, attempts: std::ops::RangeInclusive<u32>) -> Vec<Duration> {
        attempts
            .map(|attempt| policy.delay_for(attempt, &connect()).unwrap())
            .collect()
    }

    fn distinct(delays: &[Duration]) -> usize {
        let mut sorted = delays.to_vec();
        sorted.sort();
        sorted.dedup();
        sorted.len()
    }

    #[test]
    fn splitmix64_matches_the_reference_outputs() {
        // The first outputs of SplitMix64 for seeds 0 and 0xDEADBEEF, as published with the
        // reference implementation (and computed independently for the second seed).
        let outputs = |seed: u64| -> Vec<u64> {
            (1..=3u64)
                .map(|n| splitmix64(seed.wrapping_add(GAMMA.wrapping_mul(n))))
                .collect()
        };
        assert_eq!(
            outputs(0),
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        assert_eq!(
            outputs(0xDEAD_BEEF),
            [
                0x4adf_b90f_68c9_eb9b,
                0xde58_6a31_41a1_0922,
                0x021f_bc2f_8e1c_fc1d
            ]
        );
        assert_eq!(unit(0), 0.0);
        assert_eq!(unit(u64::MAX), 1.0 - f64::EPSILON / 2.0);
        assert_eq!(unit(1 << 63), 0.5);
    }

    #[test]
    fn a_seeded_delay_is_the_seeds_generator_output_for_that_attempt() {
        let expected = |seconds: f64| Duration::from_secs_f64(seconds);
        // Attempt 1 with seed 0 is SplitMix64's first output, 0xe220a8397b1dcdaf.
        let full = one_second(Jitter::Full).jitter_seed(0);
        assert_eq!(
            full.delay_for(1, &connect()),
            Some(expected(0.8833108082136426))
        );
        let full = one_second(Jitter::Full).jitter_seed(42);
        assert_eq!(
            full.delay_for(3, &connect()),
            Some(expected(0.27860113025513866))
        );
        let equal = one_second(Jitter::Equal).jitter_seed(42);
        assert_eq!(
            equal.delay_for(3, &connect()),
            Some(expected(0.5 + 0.27860113025513866 / 2.0))
        );
    }

    #[test]
    fn seeded_jitter_is_reproducible_and_varies_by_attempt_and_seed() {
        for jitter in [Jitter::Full, Jitter::Equal] {
            let policy = one_second(jitter).jitter_seed(42);
            let first = delays(&policy, 1..=64);
            assert_eq!(first, delays(&policy.clone(), 1..=64), "{jitter:?}");
            assert_eq!(
                first,
                delays(&one_second(jitter).jitter_seed(42), 1..=64),
                "{jitter:?}"
            );
            assert!(distinct(&first) >= 60, "{jitter:?}: {first:?}");
            let other = delays(&one_second(jitter).jitter_seed(43), 1..=64);
            let same = first.iter().zip(&other).filter(|(a, b)| a == b).count();
            assert!(same <= 2, "{jitter:?}: seeds 42 and 43 agree {same} times");
        }
        // Seeded or not, a policy without jitter is exactly the backoff.
        let none = one_second(Jitter::None).jitter_seed(42);
        assert_eq!(delays(&none, 1..=4), [Duration::from_secs(1); 4]);
    }

    #[test]
    fn jitter_spreads_uniformly_over_its_range() {
        // 4000 seeded draws: each quarter of the range gets close to a quarter of them.
        for (jitter, low) in [(Jitter::Full, 0.0), (Jitter::Equal, 0.5)] {
            let policy = one_second(jitter).jitter_seed(7);
            let mut quarters = [0usize; 4];
            for d in delays(&policy, 1..=4000) {
                let seconds = d.as_secs_f64();
                assert!((low..=1.0).contains(&seconds), "{jitter:?}: {d:?}");
                let quarter = ((seconds - low) / (1.0 - low) * 4.0) as usize;
                quarters[quarter.min(3)] += 1;
            }
            for count in quarters {
                assert!((850..=1150).contains(&count), "{jitter:?}: {quarters:?}");
            }
        }
    }

    #[test]
    fn unseeded_jitter_varies_between_attempts_and_between_clients() {
        // One client (thread): successive draws differ, for the same attempt too.
        let policy = one_second(Jitter::Full);
        let draws: Vec<Duration> = (0..64)
            .map(|_| policy.delay_for(1, &connect()).unwrap())
            .collect();
        assert!(distinct(&draws) >= 60, "{draws:?}");
        // Clients in other threads (as in other processes) draw other delays: a generator
        // seeded the same everywhere would have them all retry in lockstep.
        let sequences: Vec<Vec<Duration>> = (0..8)
            .map(|_| {
                std::thread::spawn(|| delays(&one_second(Jitter::Equal), 1..=4))
                    .join()
                    .unwrap()
            })
            .collect();
        for (i, a) in sequences.iter().enumerate() {
            for b in &sequences[i + 1..] {
                assert_ne!(a, b, "two threads drew the same delays");
            }
        }
    }

    #[test]
    fn custom_multiplier_and_max_backoff_shape_the_backoff() {
        let p = RetryPolicy::default()
            .max_retries(6)
            .initial_backoff(Duration::from_secs(1))
            .multiplier(3.0)
            .max_backoff(Duration::from_secs(20))
            .jitter(Jitter::None);
        assert_eq!(
            delays(&p, 1..=6),
            [1, 3, 9, 20, 20, 20].map(Duration::from_secs)
        );
        let p = p.multiplier(1.5);
        assert_eq!(
            delays(&p, 1..=3),
            [1000, 1500, 2250].map(Duration::from_millis)
        );
        // The cap also bounds the jitter.
        let equal = RetryPolicy::default()
            .max_retries(10)
            .max_backoff(Duration::from_secs(2));
        for d in delays(&equal, 6..=10) {
            assert!(
                d >= Duration::from_secs(1) && d <= Duration::from_secs(2),
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_multiplier_below_one_or_not_finite_becomes_one() {
        let one = RetryPolicy::default().multiplier(1.0);
        for bad in [f64::NAN, 0.5, 0.0, -2.0, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(RetryPolicy::default().multiplier(bad), one, "{bad}");
        }
        assert_ne!(RetryPolicy::default().multiplier(1.5), one);
        let flat = RetryPolicy::default()
            .multiplier(f64::NAN)
            .initial_backoff(Duration::from_secs(1))
            .jitter(Jitter::None);
        assert_eq!(delays(&flat, 1..=3), [Duration::from_secs(1); 3]);
    }

    #[test]
    fn retry_limits_are_inclusive() {
        let p = RetryPolicy::default().max_retries(3).jitter(Jitter::None);
        assert_eq!(p.get_max_retries(), 3);
        assert_eq!(p.delay_for(3, &connect()), Some(Duration::from_secs(2)));
        assert_eq!(p.delay_for(4, &connect()), None);
        assert_eq!(p.delay_for(0, &connect()), None);
        let none = RetryPolicy::none();
        assert_eq!(none.get_max_retries(), 0);
        assert_eq!(none.delay_for(1, &connect()), None);

        let asks = |seconds: u64| {
            let mut e = ApiError::new(503, "busy");
            e.retry_after = Some(Duration::from_secs(seconds));
            LlmError::Api(Box::new(e))
        };
        let p = RetryPolicy::default().max_retry_after(Duration::from_secs(10));
        assert_eq!(p.delay_for(1, &asks(10)), Some(Duration::from_secs(10)));
        assert_eq!(p.delay_for(1, &asks(11)), None);
        assert_eq!(p.delay_for(3, &asks(1)), Some(Duration::from_secs(1)));
        assert_eq!(p.delay_for(4, &asks(1)), None);
    }
}
