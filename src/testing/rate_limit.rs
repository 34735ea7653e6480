//! The mock server's opt-in rate limit ([`MockServer::rate_limit`](super::MockServer::rate_limit)):
//! requests and tokens per period, kept as the real APIs keep them (a token bucket), reported
//! in the provider's rate-limit headers on every answer, and enforced with a 429.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::Quota;
use crate::provider;
use crate::provider::transport::pacing::{Pace, Pacer, PacingLimits};
use crate::provider::transport::rate_limit_headers::{format_duration, format_rfc3339};
use crate::wire::WireFormat;

use super::MockResponse;

/// The limit and what was served under it.
#[derive(Debug)]
pub(super) struct MockLimit {
    pacer: Pacer,
    /// 429s answered so far.
    pub(super) refused: usize,
}

impl MockLimit {
    pub(super) fn new(limits: PacingLimits) -> Self {
        MockLimit {
            pacer: Pacer::new(limits),
            refused: 0,
        }
    }

    /// Decides on one model request: `Ok(headers)` to answer it with the script's next
    /// response and these headers, or `Err(the 429)`.
    pub(super) fn admit(
        &mut self,
        format: WireFormat,
        body: &Value,
    ) -> Result<Vec<(String, String)>, Box<MockResponse>> {
        // tokio's clock, so that a test with a paused clock controls the limit too.
        let now = tokio::time::Instant::now().into_std();
        let pace = self.pacer.try_acquire(request_tokens(format, body), now);
        let wait = match pace {
            Pace::Go => None,
            Pace::WaitUntil(at) => Some(at.saturating_duration_since(now)),
        };
        let headers = headers(format, self.pacer.quotas(now), wait);
        let Some(wait) = wait else {
            return Ok(headers);
        };
        self.refused += 1;
        let mut refusal = MockResponse::status(429).error_message(format!(
            "MockServer: rate limit exceeded; retry in {}",
            format_duration(wait)
        ));
        if format != WireFormat::Anthropic {
            refusal = refusal.error_code("rate_limit_exceeded");
        }
        for (name, value) in headers {
            refusal = refusal.header(name, value);
        }
        Err(Box::new(refusal))
    }
}

/// What the mock counts against the token limit: the request's `max_tokens` (where its
/// format's `MockFormat::max_tokens_at` says) plus a quarter of the bytes of its prompt (where
/// `prompt_at` says, as serialized), the real APIs' way of counting a request before it runs.
pub(crate) fn request_tokens(format: WireFormat, body: &Value) -> u64 {
    let mock = provider::of(format).mock();
    let max_tokens = mock
        .max_tokens_at()
        .iter()
        .find_map(|at| body.pointer(at).and_then(Value::as_u64))
        .unwrap_or(0);
    let bytes: usize = mock
        .prompt_at()
        .iter()
        .filter_map(|at| body.pointer(at))
        .map(|v| serde_json::to_string(v).map_or(0, |s| s.len()))
        .sum();
    max_tokens.saturating_add(bytes.div_ceil(4) as u64)
}

/// The provider's rate-limit headers for these figures (and `retry-after` on a refusal).
fn headers(
    format: WireFormat,
    [requests, tokens]: [Option<Quota>; 2],
    wait: Option<Duration>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |name: String, value: String| out.push((name, value));
    // The server's clock, to the second: Anthropic's resets are times after it.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let date = UNIX_EPOCH + Duration::from_secs(now);
    if format == WireFormat::Anthropic {
        add("date".into(), httpdate::fmt_http_date(date));
    }
    for (kind, quota) in [("requests", requests), ("tokens", tokens)] {
        let Some(q) = quota else { continue };
        let (limit, remaining, reset) = (
            q.limit.unwrap_or(0).to_string(),
            q.remaining.unwrap_or(0).to_string(),
            q.reset.unwrap_or_default(),
        );
        if format == WireFormat::Anthropic {
            let prefix = format!("anthropic-ratelimit-{kind}");
            add(format!("{prefix}-limit"), limit);
            add(format!("{prefix}-remaining"), remaining);
            add(format!("{prefix}-reset"), format_rfc3339(date + reset));
        } else {
            add(format!("x-ratelimit-limit-{kind}"), limit);
            add(format!("x-ratelimit-remaining-{kind}"), remaining);
            add(format!("x-ratelimit-reset-{kind}"), format_duration(reset));
        }
    }
    if let Some(wait) = wait {
        // Whole seconds, rounded up, as the real APIs send it; OpenAI adds milliseconds.
        let seconds = wait.as_millis().div_ceil(1000).max(1);
        add("retry-after".into(), seconds.to_string());
        if format != WireFormat::Anthropic {
            add("retry-after-ms".into(), wait.as_millis().max(1).to_string());
        }
    }
    out
}
