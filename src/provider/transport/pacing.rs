//! [`RateLimiter`]: paces the requests of every run that shares one API key, ahead of time,
//! so that the provider's rate limit is not hit (no 429 to wait out).
//!
//! Its decisions are a sans-IO core ([`Pacer`]: two token buckets fed with the time); the
//! limiter wraps it in a mutex and sleeps with tokio until the core says go.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{LlmError, RateLimits};
use crate::wire::LlmEvent;

/// The limits a [`RateLimiter`] keeps to: requests and tokens per period.
///
/// A limit left `None` is not paced. The default period is one minute, the period the
/// providers state their limits in (requests per minute, tokens per minute).
///
/// ```
/// use agent_loop::provider::transport::PacingLimits;
/// use std::time::Duration;
///
/// let limits = PacingLimits::per_minute().requests(50).tokens(40_000);
/// assert_eq!(limits.per, Duration::from_secs(60));
/// let fast = PacingLimits::per(Duration::from_secs(1)).requests(5);
/// assert_eq!((fast.requests, fast.tokens), (Some(5), None));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacingLimits {
    /// Requests per period (a limit of 0 is read as 1).
    pub requests: Option<u64>,
    /// Tokens per period: a request's estimated input plus its `max_tokens` (a limit of 0 is
    /// read as 1).
    pub tokens: Option<u64>,
    /// The period (at least a millisecond).
    pub per: Duration,
}

impl PacingLimits {
    /// No limit yet, per minute.
    pub fn per_minute() -> Self {
        Self::per(Duration::from_secs(60))
    }

    /// No limit yet, per `period`.
    pub fn per(period: Duration) -> Self {
        PacingLimits {
            requests: None,
            tokens: None,
            per: period,
        }
    }

    /// At most `n` requests per period.
    pub fn requests(mut self, n: u64) -> Self {
        self.requests = Some(n);
        self
    }

    /// At most `n` tokens per period.
    pub fn tokens(mut self, n: u64) -> Self {
        self.tokens = Some(n);
        self
    }
}

impl Default for PacingLimits {
    fn default() -> Self {
        Self::per_minute()
    }
}

/// One token bucket: holds up to `capacity`, refills `capacity` per period, continuously.
#[derive(Debug, Clone)]
struct Bucket {
    capacity: f64,
    /// Units per second.
    rate: f64,
    level: f64,
}

/// The longest an observed `retry-after` holds requests back.
const MAX_HOLD: Duration = Duration::from_secs(600);

/// Below this a bucket's shortfall is rounding, not a wait.
const EPSILON: f64 = 1e-6;

impl Bucket {
    fn new(limit: u64, per: Duration) -> Bucket {
        let capacity = limit.max(1) as f64;
        Bucket {
            capacity,
            rate: capacity / per.max(Duration::from_millis(1)).as_secs_f64(),
            level: capacity,
        }
    }

    fn refill(&mut self, elapsed: Duration) {
        self.level = (self.level + elapsed.as_secs_f64() * self.rate).min(self.capacity);
    }

    /// How long until `need` (at most the capacity) is in the bucket.
    fn wait_for(&self, need: f64) -> Duration {
        let short = need.min(self.capacity) - self.level;
        if short <= EPSILON {
            return Duration::ZERO;
        }
        // Rounded up to the next microsecond: waking at the time given always succeeds.
        Duration::try_from_secs_f64(short / self.rate)
            .map_or(Duration::MAX, |d| d + Duration::from_micros(1))
    }
}

/// What [`Pacer::try_acquire`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Go now: the request and its tokens are taken from the buckets.
    Go,
    /// Nothing was taken; ask again at this time.
    WaitUntil(Instant),
}

/// The sans-IO core of a [`RateLimiter`]: a token bucket of requests and one of tokens,
/// both full at first, each refilled by its limit per period, continuously. It reads no
/// clock: each call says what time it is (times earlier than one already given are taken
/// as that one).
///
/// A request of more tokens than the whole per-period limit would never fit: it goes when
/// the bucket is full, and empties it.
///
/// ```
/// use agent_loop::provider::transport::{Pace, Pacer, PacingLimits};
/// use std::time::{Duration, Instant};
///
/// let mut pacer = Pacer::new(PacingLimits::per(Duration::from_secs(10)).requests(2));
/// let t0 = Instant::now();
/// assert_eq!(pacer.try_acquire(0, t0), Pace::Go);
/// assert_eq!(pacer.try_acquire(0, t0), Pace::Go);
/// // Two per ten seconds: one more every five.
/// let Pace::WaitUntil(at) = pacer.try_acquire(0, t0) else { panic!() };
/// assert!(at > t0 + Duration::from_secs(5) && at < t0 + Duration::from_millis(5001));
/// assert_eq!(pacer.try_acquire(0, at), Pace::Go);
/// ```
#[derive(Debug, Clone)]
pub struct Pacer {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    /// The last time given.
    now: Option<Instant>,
    /// No request before this (a `retry-after` observed).
    blocked_until: Option<Instant>,
}

impl Pacer {
    /// Full buckets for `limits`.
    pub fn new(limits: PacingLimits) -> Pacer {
        Pacer {
            requests: limits.requests.map(|n| Bucket::new(n, limits.per)),
            tokens: limits.tokens.map(|n| Bucket::new(n, limits.per)),
            now: None,
            blocked_until: None,
        }
    }

    /// Moves the clock to `now`, refilling the buckets; returns the time used.
    fn advance(&mut self, now: Instant) -> Instant {
        let now = match self.now {
            Some(last) if last >= now => return last,
            Some(last) => {
                let elapsed = now - last;
                for bucket in [&mut self.requests, &mut self.tokens].into_iter().flatten() {
                    bucket.refill(elapsed);
                }
                now
            }
            None => now,
        };
        self.now = Some(now);
        now
    }

    /// One request of `tokens` (estimated) at `now`: [`Pace::Go`] takes them, else the time
    /// to ask again.
    pub fn try_acquire(&mut self, tokens: u64, now: Instant) -> Pace {
        let now = self.advance(now);
        if let Some(until) = self.blocked_until.filter(|&t| t > now) {
            return Pace::WaitUntil(until);
        }
        let wait = [
            self.requests.as_ref().map(|b| b.wait_for(1.0)),
            self.tokens.as_ref().map(|b| b.wait_for(tokens as f64)),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(Duration::ZERO);
        if wait > Duration::ZERO {
            // A wait too long to represent is asked again a day later.
            let at = now.checked_add(wait.min(Duration::from_secs(86_400)));
            return Pace::WaitUntil(at.unwrap_or(now));
        }
        if let Some(b) = self.requests.as_mut() {
            b.level = (b.level - 1.0).max(0.0);
        }
        if let Some(b) = self.tokens.as_mut() {
            b.level = (b.level - tokens as f64).max(0.0);
        }
        Pace::Go
    }

    /// What the buckets hold at `now` as the providers report it: requests and tokens, each
    /// with its limit, what is left (whole units) and when it is full again (to the
    /// millisecond, rounded up). What the mock server's headers say.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn quotas(&mut self, now: Instant) -> [Option<crate::error::Quota>; 2] {
        self.advance(now);
        [&self.requests, &self.tokens].map(|bucket| {
            bucket.as_ref().map(|b| {
                let empty = (b.capacity - b.level).max(0.0) / b.rate;
                crate::error::Quota {
                    limit: Some(b.capacity as u64),
                    remaining: Some((b.level + EPSILON).floor() as u64),
                    reset: Some(Duration::from_millis(
                        (empty * 1000.0 - 1e-6).ceil().max(0.0) as u64,
                    )),
                }
            })
        })
    }

    /// Learns from what the provider reported at `now`: a bucket holds no more than the
    /// `remaining` figure (requests; tokens, else input tokens), and a `retry-after` holds
    /// every request back until it has passed (at most ten minutes). Reports only ever slow
    /// the pace down.
    pub fn observe(&mut self, limits: &RateLimits, now: Instant) {
        let now = self.advance(now);
        if let (Some(b), Some(left)) = (self.requests.as_mut(), limits.requests.remaining) {
            b.level = b.level.min(left as f64);
        }
        let tokens_left = limits.tokens.remaining.or(limits.input_tokens.remaining);
        if let (Some(b), Some(left)) = (self.tokens.as_mut(), tokens_left) {
            b.level = b.level.min(left as f64);
        }
        // A server's word, capped: a bogus `retry-after` must not hold every run forever.
        let retry_after = limits.retry_after.map(|d| d.min(MAX_HOLD));
        if let Some(until) = retry_after.and_then(|d| now.checked_add(d)) {
            self.blocked_until = Some(self.blocked_until.map_or(until, |t| t.max(until)));
        }
    }
}

/// Paces model requests ahead of time so that they stay under a provider's rate limit:
/// requests and tokens per period. Clone it into every agent that uses one API key
/// ([`AgentBuilder::rate_limiter`](crate::AgentBuilder::rate_limiter)): the clones share one
/// budget, and each model call of their runs waits for its turn before it is sent, rather
/// than being refused with a 429 and retried.
///
/// A call's tokens are estimated as its context's token count plus its `max_tokens` (what
/// the providers count against the limit before the answer is known). A call bigger than the
/// whole per-period token limit goes when the bucket is full (it would never fit otherwise).
/// The agent also tells the limiter what each response's rate-limit headers say
/// ([`RateLimiter::observe`]): the pace slows down when the provider counts less left than
/// the limiter does, or asks to wait (`retry-after`).
///
/// ```no_run
/// use agent_loop::{Agent, AnthropicClient};
/// use agent_loop::provider::transport::{PacingLimits, RateLimiter};
///
/// # fn demo() -> Result<(), agent_loop::Error> {
/// let limiter = RateLimiter::new(PacingLimits::per_minute().requests(50).tokens(40_000));
/// let client = AnthropicClient::from_env()?;
/// let first = Agent::builder(client.clone()).rate_limiter(limiter.clone()).build()?;
/// let second = Agent::builder(client).rate_limiter(limiter).build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimiter {
    pacer: Arc<Mutex<Pacer>>,
}

impl RateLimiter {
    /// A limiter with full buckets.
    pub fn new(limits: PacingLimits) -> Self {
        RateLimiter {
            pacer: Arc::new(Mutex::new(Pacer::new(limits))),
        }
    }

    fn pacer(&self) -> std::sync::MutexGuard<'_, Pacer> {
        self.pacer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (tokio's clock) until a request of `estimated_tokens` may go, and takes them.
    /// Dropping the future gives up the wait and takes nothing.
    pub async fn acquire(&self, estimated_tokens: u64) {
        loop {
            let now = tokio::time::Instant::now().into_std();
            let pace = self.pacer().try_acquire(estimated_tokens, now);
            match pace {
                Pace::Go => return,
                Pace::WaitUntil(at) => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                }
            }
        }
    }

    /// [`Pacer::try_acquire`] on the shared buckets, at `now`.
    pub fn try_acquire(&self, estimated_tokens: u64, now: Instant) -> Pace {
        self.pacer().try_acquire(estimated_tokens, now)
    }

    /// [`Pacer::observe`] on the shared buckets, at `now`.
    pub fn observe(&self, limits: &RateLimits, now: Instant) {
        self.pacer().observe(limits, now);
    }

    /// Observes the figures an item of a model stream carries, if any: a response head's
    /// ([`LlmEvent::RateLimits`]) or a refusal's ([`ApiError::rate_limits`](crate::error::ApiError::rate_limits)).
    pub(crate) fn observe_response(&self, item: &Result<LlmEvent, LlmError>, now: Instant) {
        let limits = match item {
            Ok(LlmEvent::RateLimits(limits)) => &**limits,
            Err(LlmError::Api(error)) => match &error.rate_limits {
                Some(limits) => limits,
                None => return,
            },
            _ => return,
        };
        self.observe(limits, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    #[test]
    fn requests_are_paced_evenly_after_the_burst() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacingLimits::per(Duration::from_secs(60)).requests(3));
        for _ in 0..3 {
            assert_eq!(p.try_acquire(0, t0), Pace::Go);
        }
        // One request every 20 s from then on.
        let Pace::WaitUntil(at) = p.try_acquire(0, t0) else {
            panic!("a fourth request went at once")
        };
        assert!(
            at >= secs(t0, 20.0) && at <= secs(t0, 20.001),
            "{:?}",
            at - t0
        );
        assert!(matches!(
            p.try_acquire(0, secs(t0, 19.9)),
            Pace::WaitUntil(_)
        ));
        assert_eq!(p.try_acquire(0, at), Pace::Go);
    }

    #[test]
    fn tokens_are_paced_and_an_oversized_request_goes_when_the_bucket_is_full() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacingLimits::per(Duration::from_secs(10)).tokens(1000));
        assert_eq!(p.try_acquire(600, t0), Pace::Go);
        // 400 left; 600 more take 2 s to refill (100 per second).
        let Pace::WaitUntil(at) = p.try_acquire(600, t0) else {
            panic!()
        };
        assert!(at >= secs(t0, 2.0) && at <= secs(t0, 2.001));
        assert_eq!(p.try_acquire(600, at), Pace::Go);
        // 5,000 tokens never fit in 1,000: they wait for a full bucket (10 s), then go.
        let Pace::WaitUntil(full) = p.try_acquire(5000, at) else {
            panic!()
        };
        assert!(full >= at + Duration::from_secs(10) && full <= at + Duration::from_millis(10_001));
        assert_eq!(p.try_acquire(5000, full), Pace::Go);
        assert!(matches!(p.try_acquire(1, full), Pace::WaitUntil(_)));
    }

    #[test]
    fn observed_figures_only_slow_the_pace() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacingLimits::per(Duration::from_secs(60)).requests(60));
        let mut seen = RateLimits::default();
        seen.requests.remaining = Some(0);
        p.observe(&seen, t0);
        assert!(matches!(p.try_acquire(0, t0), Pace::WaitUntil(_)));
        assert_eq!(p.try_acquire(0, secs(t0, 1.001)), Pace::Go);
        // A retry-after holds everything back, however full the bucket.
        let told = RateLimits {
            retry_after: Some(Duration::from_secs(30)),
            ..RateLimits::default()
        };
        p.observe(&told, secs(t0, 100.0));
        assert_eq!(
            p.try_acquire(0, secs(t0, 100.0)),
            Pace::WaitUntil(secs(t0, 130.0))
        );
        assert_eq!(p.try_acquire(0, secs(t0, 130.0)), Pace::Go);
        // A report of more left than the limiter counts changes nothing.
        let mut p = Pacer::new(PacingLimits::per(Duration::from_secs(60)).requests(1));
        assert_eq!(p.try_acquire(0, t0), Pace::Go);
        seen.requests.remaining = Some(100);
        p.observe(&seen, t0);
        assert!(matches!(p.try_acquire(0, t0), Pace::WaitUntil(_)));
    }

    #[test]
    fn a_bogus_retry_after_holds_requests_back_ten_minutes_at_most() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacingLimits::per(Duration::from_secs(60)).requests(60));
        let told = RateLimits {
            retry_after: Some(Duration::from_secs(u64::MAX / 4)),
            ..RateLimits::default()
        };
        p.observe(&told, t0);
        assert_eq!(p.try_acquire(0, t0), Pace::WaitUntil(secs(t0, 600.0)));
        assert_eq!(p.try_acquire(0, secs(t0, 600.0)), Pace::Go);
    }

    #[test]
    fn a_time_earlier_than_one_given_is_that_one() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacingLimits::per(Duration::from_secs(1)).requests(1));
        assert_eq!(p.try_acquire(0, secs(t0, 5.0)), Pace::Go);
        assert!(matches!(p.try_acquire(0, t0), Pace::WaitUntil(at) if at > secs(t0, 5.0)));
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_sleeps_until_the_pacer_says_go() {
        let limiter = RateLimiter::new(PacingLimits::per(Duration::from_secs(10)).requests(2));
        let start = tokio::time::Instant::now();
        for _ in 0..6 {
            limiter.acquire(0).await;
        }
        // Two at once, then one every 5 s: the sixth at 20 s.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(20) && took < Duration::from_millis(20_010),
            "{took:?}"
        );
    }

    #[test]
    fn a_limiter_shares_what_it_observes_with_its_clones() {
        let t0 = Instant::now();
        let limiter = RateLimiter::new(PacingLimits::per(Duration::from_secs(60)).requests(60));
        let clone = limiter.clone();
        let told = RateLimits {
            retry_after: Some(Duration::from_secs(30)),
            ..RateLimits::default()
        };
        limiter.observe(&told, t0);
        assert_eq!(clone.try_acquire(0, t0), Pace::WaitUntil(secs(t0, 30.0)));
        assert_eq!(clone.try_acquire(0, secs(t0, 30.0)), Pace::Go);
    }

    proptest! {
        /// Whatever the requests and their times, what went in any window of time is at most
        /// the burst plus the refill over that window; and a request told to wait goes when
        /// it asks again at the time given (if nothing else went meanwhile).
        #[test]
        fn never_more_than_the_limit_allows(
            requests in 1u64..20,
            tokens in 1u64..5000,
            per_ms in 1u64..10_000,
            asks in proptest::collection::vec((0u64..3000, 0u64..8000), 1..60),
        ) {
            let per = Duration::from_millis(per_ms);
            let mut p = Pacer::new(PacingLimits::per(per).requests(requests).tokens(tokens));
            let t0 = Instant::now();
            let mut now = t0;
            let mut went: Vec<(Duration, u64)> = Vec::new();
            for (gap_ms, size) in asks {
                now += Duration::from_millis(gap_ms);
                match p.try_acquire(size, now) {
                    Pace::Go => went.push((now - t0, size.min(tokens))),
                    Pace::WaitUntil(at) => {
                        prop_assert!(at > now);
                        prop_assert_eq!(p.try_acquire(size, at), Pace::Go);
                        now = at;
                        went.push((now - t0, size.min(tokens)));
                    }
                }
            }
            let rate = |limit: u64, span: Duration| {
                limit as f64 + limit as f64 * span.as_secs_f64() / per.as_secs_f64() + 1e-3
            };
            for i in 0..went.len() {
                for j in i..went.len() {
                    let span = went[j].0 - went[i].0;
                    let n = (j - i + 1) as f64;
                    let t: u64 = went[i..=j].iter().map(|w| w.1).sum();
                    prop_assert!(n <= rate(requests, span), "{} requests in {:?}", n, span);
                    prop_assert!(t as f64 <= rate(tokens, span), "{} tokens in {:?}", t, span);
                }
            }
        }
    }
}
