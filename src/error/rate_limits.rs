//! The rate-limit figures of a response head ([`RateLimits`]), as an [`ApiError`](super::ApiError)
//! carries them; [`RateLimits::from_headers`] reads them (in `provider`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One limit of a provider (requests, tokens …) as a response reported it.
///
/// Every figure is optional: a provider sends some, none, or sends one malformed.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// The most the period allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// What is left of it now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    /// How long after the response the limit is fully replenished (OpenAI sends a duration;
    /// Anthropic an RFC 3339 time, taken relative to the response's `date`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<Duration>,
}

impl Quota {
    /// Whether no figure was given.
    pub fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset.is_none()
    }
}

/// The rate-limit figures of one response head, as the provider sent them.
///
/// Read from Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
/// (reset: an RFC 3339 time), OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`
/// (reset: a duration such as `1s`, `6m0s` or `20ms`), and `retry-after-ms` / `retry-after`
/// (seconds, or an HTTP date). An agent reports them as
/// [`AgentEvent::RateLimits`](crate::AgentEvent::RateLimits); an error status carries them in
/// [`ApiError::rate_limits`](crate::error::ApiError::rate_limits).
///
/// ```
/// use agent_loop::provider::reqwest::header::{HeaderMap, HeaderValue};
/// use agent_loop::provider::transport::RateLimits;
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit-requests", HeaderValue::from_static("500"));
/// headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("499"));
/// headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("120ms"));
/// headers.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("6m0s"));
/// let limits = RateLimits::from_headers(&headers);
/// assert_eq!(limits.requests.remaining, Some(499));
/// assert_eq!(limits.requests.reset, Some(Duration::from_millis(120)));
/// assert_eq!(limits.tokens.reset, Some(Duration::from_secs(360)));
/// assert!(RateLimits::from_headers(&HeaderMap::new()).is_empty());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimits {
    /// Requests per period.
    #[serde(default, skip_serializing_if = "Quota::is_empty")]
    pub requests: Quota,
    /// Tokens per period (Anthropic: the most restrictive token limit in effect).
    #[serde(default, skip_serializing_if = "Quota::is_empty")]
    pub tokens: Quota,
    /// Input tokens per period (Anthropic).
    #[serde(default, skip_serializing_if = "Quota::is_empty")]
    pub input_tokens: Quota,
    /// Output tokens per period (Anthropic).
    #[serde(default, skip_serializing_if = "Quota::is_empty")]
    pub output_tokens: Quota,
    /// How long the server asks to wait before the next request (`retry-after-ms`, else
    /// `retry-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Duration>,
}

impl RateLimits {
    /// Whether the head carried no figure at all.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
            && self.tokens.is_empty()
            && self.input_tokens.is_empty()
            && self.output_tokens.is_empty()
            && self.retry_after.is_none()
    }
}
