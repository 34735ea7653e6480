//! Prompt caching: where a request asks the provider to cache its prefix, and for how long.
//!
//! Providers bill a cached input token at a tenth of the price or less, but only when the start
//! of a request is byte-identical to an earlier one. OpenAI caches every prompt of 1,024 tokens
//! or more by itself; Anthropic caches only up to the blocks marked with a `cache_control`
//! breakpoint, at most four per request. [`PromptCache`] says where the Anthropic encoder puts
//! them:
//!
//! ```text
//!  tools ──► system ──► messages … user(previous turn) … assistant … user(latest)
//!      ▲          ▲                              ▲                          ▲
//!   last tool  last system block      last block of the previous     last block of the
//!                                     user message (read the cache   latest message
//!                                     the previous request wrote)    (write it for the next)
//! ```
//!
//! The message breakpoints move with the conversation: each request marks the end of its latest
//! message, so the next request, which repeats it and adds a step, reads everything up to there
//! from the cache.

use std::fmt;
use std::str::FromStr;

use crate::error::{ConfigError, Error};

/// The most `cache_control` breakpoints Anthropic accepts in one request.
pub const MAX_CACHE_BREAKPOINTS: u32 = 4;

/// How long a cached prefix lives after its last use.
///
/// Anthropic accepts `"5m"` (the default, written without a `ttl` field) and `"1h"` (a cache
/// write costs 2x the input price instead of 1.25x). Parse a user's string with
/// [`str::parse`]: anything else is an [`Error::Config`], not a `400` from the server.
///
/// ```
/// use agent_loop::provider::cache::CacheTtl;
///
/// assert_eq!("1h".parse::<CacheTtl>()?, CacheTtl::OneHour);
/// assert!("10m".parse::<CacheTtl>().is_err());
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[non_exhaustive]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub enum CacheTtl {
    /// Five minutes (`{"type": "ephemeral"}`).
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// One hour (`{"type": "ephemeral", "ttl": "1h"}`).
    #[serde(rename = "1h")]
    OneHour,
}

impl CacheTtl {
    /// The value of the `ttl` field: `"5m"` or `"1h"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => "5m",
            CacheTtl::OneHour => "1h",
        }
    }
}

impl fmt::Display for CacheTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CacheTtl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim() {
            "5m" => Ok(CacheTtl::FiveMinutes),
            "1h" => Ok(CacheTtl::OneHour),
            other => Err(ConfigError::setting(
                "CacheTtl",
                format!(
                    "prompt cache TTL {other:?} is not one the API accepts: use \"5m\" or \"1h\""
                ),
            )
            .into()),
        }
    }
}

/// Where a request asks the provider to cache its prefix (Anthropic `cache_control`
/// breakpoints).
///
/// ```text
///  tools ──► system ──► messages … user(previous turn) … assistant … user(latest)
///      ▲          ▲                          ▲                              ▲
///   last tool  system prompt     read: the previous request      write: for the next
///                                wrote the cache up to here      request to read
/// ```
///
/// Thinking and empty text blocks may not carry a breakpoint, so a message's breakpoint goes
/// on its last block that may (text, tool call or tool result).
///
/// The default, which [`ModelRequest::default`](crate::provider::ModelRequest) uses, marks the last tool
/// definition, the system prompt, and the last block of each of the two latest user messages
/// (four breakpoints, the API's limit), with the 5-minute TTL. Set
/// [`ModelRequest::prompt_cache`](crate::provider::ModelRequest::prompt_cache) to `None` to send no
/// breakpoint at all. OpenAI-compatible servers cache by themselves and ignore this.
///
/// ```
/// use agent_loop::provider::cache::{CacheTtl, PromptCache};
///
/// let cache = PromptCache::default().ttl(CacheTtl::OneHour).message_breakpoints(1);
/// assert_eq!(cache.breakpoints(), 3);
/// cache.validate()?;
/// assert!(PromptCache::default().message_breakpoints(3).validate().is_err());
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PromptCache {
    /// How long the cached prefix lives (default five minutes).
    pub ttl: CacheTtl,
    /// Mark the last tool definition, caching the tools (default `true`).
    pub tools: bool,
    /// Mark the system prompt, caching tools and system (default `true`).
    pub system: bool,
    /// How many of the latest user messages get a breakpoint on their last cacheable block
    /// (default 2: the latest, which writes the cache, and the one before, which the previous
    /// request wrote and this one reads).
    pub message_breakpoints: u32,
}

impl Default for PromptCache {
    fn default() -> Self {
        PromptCache {
            ttl: CacheTtl::FiveMinutes,
            tools: true,
            system: true,
            message_breakpoints: 2,
        }
    }
}

impl PromptCache {
    /// No breakpoint anywhere: the provider caches only what it caches by itself.
    ///
    /// ```
    /// use agent_loop::provider::cache::PromptCache;
    ///
    /// assert_eq!(PromptCache::off().breakpoints(), 0);
    /// ```
    pub fn off() -> Self {
        PromptCache {
            ttl: CacheTtl::FiveMinutes,
            tools: false,
            system: false,
            message_breakpoints: 0,
        }
    }

    /// Sets the TTL.
    pub fn ttl(mut self, ttl: CacheTtl) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets whether the last tool definition gets a breakpoint.
    pub fn tools(mut self, on: bool) -> Self {
        self.tools = on;
        self
    }

    /// Sets whether the system prompt gets a breakpoint.
    pub fn system(mut self, on: bool) -> Self {
        self.system = on;
        self
    }

    /// Sets how many of the latest user messages get a breakpoint.
    pub fn message_breakpoints(mut self, count: u32) -> Self {
        self.message_breakpoints = count;
        self
    }

    /// The most breakpoints a request can get with this setting (fewer when the request has no
    /// tools, no system prompt or fewer user messages).
    pub fn breakpoints(&self) -> u32 {
        u32::from(self.tools)
            .saturating_add(u32::from(self.system))
            .saturating_add(self.message_breakpoints)
    }

    /// Checks the setting against the API's limit of [`MAX_CACHE_BREAKPOINTS`] breakpoints per
    /// request; the error ([`Error::Config`]) says how many were asked for. Call it when the
    /// setting is made (the agent's builder does); the Anthropic encoder refuses an invalid one
    /// too, before anything is sent.
    pub fn validate(&self) -> Result<(), Error> {
        let n = self.breakpoints();
        if n > MAX_CACHE_BREAKPOINTS {
            return Err(ConfigError::setting(
                "prompt_cache",
                format!(
                    "the prompt cache asks for {n} cache_control breakpoints (tools {}, system \
                     {}, messages {}), more than the {MAX_CACHE_BREAKPOINTS} the Anthropic API \
                     accepts in one request: lower `message_breakpoints` or turn tools/system off",
                    u32::from(self.tools),
                    u32::from(self.system),
                    self.message_breakpoints
                ),
            )
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_strings_round_trip_and_others_are_config_errors() {
        for ttl in [CacheTtl::FiveMinutes, CacheTtl::OneHour] {
            assert_eq!(ttl.as_str().parse::<CacheTtl>().unwrap(), ttl);
            assert_eq!(ttl.to_string(), ttl.as_str());
        }
        for bad in ["", "1m", "60m", "2h", "ephemeral"] {
            let err = bad.parse::<CacheTtl>().unwrap_err();
            assert!(
                matches!(&err, Error::Config(ConfigError::Setting { message, .. }) if message.contains("\"5m\" or \"1h\"")),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn the_breakpoint_limit_is_inclusive() {
        assert_eq!(PromptCache::default().breakpoints(), 4);
        PromptCache::default().validate().unwrap();
        PromptCache::default()
            .tools(false)
            .system(false)
            .message_breakpoints(4)
            .validate()
            .unwrap();
        let err = PromptCache::default()
            .system(false)
            .message_breakpoints(4)
            .validate()
            .unwrap_err();
        assert!(
            matches!(&err, Error::Config(ConfigError::Setting { message, .. }) if message.contains("5 cache_control breakpoints")),
            "{err:?}"
        );
        assert!(PromptCache::default()
            .message_breakpoints(u32::MAX)
            .validate()
            .is_err());
    }
}
