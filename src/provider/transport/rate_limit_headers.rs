//! The rate-limit figures a provider sends in a response's head: Anthropic's
//! `anthropic-ratelimit-*` headers, OpenAI's `x-ratelimit-*`, and `retry-after`.
//!
//! Read leniently: a header that is missing or malformed is `None`, never an error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Quota, RateLimits};
use reqwest::header::HeaderMap;

/// Longest header value read; longer ones are malformed.
const MAX_VALUE: usize = 64;

impl RateLimits {
    /// The figures of `headers`. Times (Anthropic's resets, an HTTP-date `retry-after`) are
    /// taken relative to the response's `date` header: without one they are `None` (see
    /// [`from_headers_at`](Self::from_headers_at)).
    pub fn from_headers(headers: &HeaderMap) -> RateLimits {
        Self::read(headers, None)
    }

    /// The figures of `headers`, times taken relative to the response's `date` header, else
    /// to `received` (when the head arrived).
    pub fn from_headers_at(headers: &HeaderMap, received: SystemTime) -> RateLimits {
        Self::read(headers, Some(received))
    }

    fn read(headers: &HeaderMap, received: Option<SystemTime>) -> RateLimits {
        let date = value(headers, "date")
            .and_then(|d| httpdate::parse_http_date(d).ok())
            .or(received);
        let anthropic = |kind: &str| Quota {
            limit: number(headers, &format!("anthropic-ratelimit-{kind}-limit")),
            remaining: number(headers, &format!("anthropic-ratelimit-{kind}-remaining")),
            reset: value(headers, &format!("anthropic-ratelimit-{kind}-reset"))
                .and_then(parse_rfc3339)
                .zip(date)
                .map(|(at, now)| at.duration_since(now).unwrap_or(Duration::ZERO)),
        };
        let openai = |kind: &str| Quota {
            limit: number(headers, &format!("x-ratelimit-limit-{kind}")),
            remaining: number(headers, &format!("x-ratelimit-remaining-{kind}")),
            reset: value(headers, &format!("x-ratelimit-reset-{kind}")).and_then(parse_duration),
        };
        let either = |a: Quota, o: Quota| Quota {
            limit: a.limit.or(o.limit),
            remaining: a.remaining.or(o.remaining),
            reset: a.reset.or(o.reset),
        };
        RateLimits {
            requests: either(anthropic("requests"), openai("requests")),
            tokens: either(anthropic("tokens"), openai("tokens")),
            input_tokens: anthropic("input-tokens"),
            output_tokens: anthropic("output-tokens"),
            retry_after: retry_after(headers, date),
        }
    }
}

/// A header's value, trimmed; `None` when missing, not text, empty or too long.
fn value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty() && value.len() <= MAX_VALUE).then_some(value)
}

fn number(headers: &HeaderMap, name: &str) -> Option<u64> {
    value(headers, name)?.parse().ok()
}

/// `retry-after-ms` (milliseconds), else `retry-after` (seconds, or an HTTP date relative to
/// `now`).
fn retry_after(headers: &HeaderMap, now: Option<SystemTime>) -> Option<Duration> {
    if let Some(ms) = value(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Ok(delay) = Duration::try_from_secs_f64(ms / 1000.0) {
            return Some(delay);
        }
    }
    let value = value(headers, "retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now?).unwrap_or(Duration::ZERO))
}

/// A Go duration as OpenAI sends it: one or more `<decimal><unit>` with units `h`, `m`, `s`,
/// `ms`, `us` (`µs`) and `ns` (`6m0s`, `1.5s`, `20ms`); `0` alone is zero.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total: u128 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let nanos_per: u128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" | "μs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut part = whole.checked_mul(nanos_per)?;
        // The fraction's digits, down to the nanosecond.
        let mut scale = nanos_per;
        for digit in fraction.bytes() {
            if !digit.is_ascii_digit() {
                return None;
            }
            scale /= 10;
            part = part.checked_add(u128::from(digit - b'0') * scale)?;
        }
        total = total.checked_add(part)?;
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// An RFC 3339 time (`2025-06-01T12:00:30Z`, `…T12:00:30.250+02:00`).
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        let mut scale = 100_000_000;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            nanos += u32::from(d - b'0') * scale;
            scale /= 10;
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let hours = digits(i + 1, 2)?;
            let minutes = digits(i + 4, 2)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'+' {
                offset
            } else {
                -offset
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset;
    let since = Duration::new(secs.unsigned_abs(), nanos);
    if secs >= 0 {
        UNIX_EPOCH.checked_add(since)
    } else {
        UNIX_EPOCH.checked_sub(since)
    }
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An RFC 3339 time, UTC, to the millisecond (what the mock server sends).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn format_rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// A duration as OpenAI sends it (`1m30.5s`, `20ms`), what the mock server sends.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (minutes, ms) = (ms / 60_000, ms % 60_000);
    let seconds = if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    };
    if minutes > 0 {
        format!("{minutes}m{seconds}")
    } else {
        seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn anthropic_headers_are_read_with_resets_relative_to_the_date() {
        let h = headers(&[
            ("date", "Sun, 01 Jun 2025 12:00:00 GMT"),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", "2025-06-01T12:00:01Z"),
            ("anthropic-ratelimit-tokens-limit", "90000"),
            ("anthropic-ratelimit-tokens-remaining", "88000"),
            (
                "anthropic-ratelimit-tokens-reset",
                "2025-06-01T12:00:01.250Z",
            ),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-input-tokens-remaining", "39000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-06-01T14:00:02+02:00",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "7000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-06-01T11:59:00Z",
            ),
            ("retry-after", "3"),
        ]);
        let r = RateLimits::from_headers(&h);
        let quota = |limit, remaining, reset_ms| Quota {
            limit: Some(limit),
            remaining: Some(remaining),
            reset: Some(Duration::from_millis(reset_ms)),
        };
        assert_eq!(r.requests, quota(50, 49, 1000));
        assert_eq!(r.tokens, quota(90_000, 88_000, 1250));
        assert_eq!(r.input_tokens, quota(40_000, 39_000, 2000));
        // A reset already past is now.
        assert_eq!(r.output_tokens, quota(8000, 7000, 0));
        assert_eq!(r.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn without_a_date_the_times_need_the_received_time() {
        let h = headers(&[
            ("anthropic-ratelimit-requests-reset", "2025-06-01T12:00:05Z"),
            ("retry-after", "Sun, 01 Jun 2025 12:00:07 GMT"),
        ]);
        assert!(RateLimits::from_headers(&h).is_empty());
        let received = parse_rfc3339("2025-06-01T12:00:00Z").unwrap();
        let r = RateLimits::from_headers_at(&h, received);
        assert_eq!(r.requests.reset, Some(Duration::from_secs(5)));
        assert_eq!(r.retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn openai_headers_are_read() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "499"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "29000"),
            ("x-ratelimit-reset-tokens", "2m59.56s"),
            ("retry-after-ms", "1500"),
            ("retry-after", "9"),
        ]);
        let r = RateLimits::from_headers(&h);
        assert_eq!(r.requests.limit, Some(500));
        assert_eq!(r.requests.remaining, Some(499));
        assert_eq!(r.requests.reset, Some(Duration::from_millis(120)));
        assert_eq!(r.tokens.limit, Some(30_000));
        assert_eq!(r.tokens.remaining, Some(29_000));
        assert_eq!(r.tokens.reset, Some(Duration::from_millis(179_560)));
        assert!(r.input_tokens.is_empty() && r.output_tokens.is_empty());
        assert_eq!(r.retry_after, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn malformed_figures_are_none() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "-1"),
            ("x-ratelimit-remaining-requests", "lots"),
            ("x-ratelimit-reset-requests", "1y"),
            ("x-ratelimit-reset-tokens", "s"),
            ("anthropic-ratelimit-tokens-reset", "2025-02-30T00:00:00Z"),
            ("date", "Sun, 01 Jun 2025 12:00:00 GMT"),
            ("retry-after", "soon"),
        ]);
        assert!(RateLimits::from_headers(&h).is_empty());
    }

    #[test]
    fn go_durations() {
        for (text, ms) in [
            ("1s", 1000),
            ("6m0s", 360_000),
            ("20ms", 20),
            ("1h2m3.5s", 3_723_500),
            ("0", 0),
            (".5s", 500),
            ("1500us", 1),
        ] {
            assert_eq!(
                parse_duration(text).map(|d| d.as_millis()),
                Some(ms),
                "{text}"
            );
        }
        for text in ["", "1", "1x", "s", "1..2s", "-1s", "1s2", "."] {
            assert_eq!(parse_duration(text), None, "{text}");
        }
    }

    #[test]
    fn formatted_times_and_durations_read_back() {
        let t = UNIX_EPOCH + Duration::from_millis(1_748_779_230_250);
        assert_eq!(format_rfc3339(t), "2025-06-01T12:00:30.250Z");
        assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
        for ms in [0, 20, 1000, 1250, 60_000, 179_560] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Some(d), "{ms}");
        }
    }

    proptest! {
        #[test]
        fn any_header_values_parse_without_panic(
            values in proptest::collection::vec(("[ -~]{0,80}", 0usize..NAMES.len()), 0..20)
        ) {
            let mut map = HeaderMap::new();
            for (value, name) in &values {
                if let Ok(value) = HeaderValue::from_str(value) {
                    map.insert(HeaderName::from_static(NAMES[*name]), value);
                }
            }
            let _ = RateLimits::from_headers(&map);
            let _ = RateLimits::from_headers_at(&map, UNIX_EPOCH);
        }

        #[test]
        fn any_text_is_a_duration_or_none(text in "[0-9.hmsuµn]{0,24}") {
            let _ = parse_duration(&text);
        }

        #[test]
        fn any_text_is_a_time_or_none(text in "[0-9TZz:+. -]{0,32}") {
            let _ = parse_rfc3339(&text);
        }

        #[test]
        fn durations_round_trip(ms in 0u64..10_000_000_000) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }

        #[test]
        fn times_round_trip(ms in 0u64..10_000_000_000_000) {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
        }

        #[test]
        fn figures_read_back_exactly(limit: u64, remaining: u64, reset_ms in 0u64..1 << 40) {
            let reset = format_duration(Duration::from_millis(reset_ms));
            let h = headers(&[
                ("x-ratelimit-limit-tokens", &limit.to_string()),
                ("x-ratelimit-remaining-tokens", &remaining.to_string()),
                ("x-ratelimit-reset-tokens", &reset),
            ]);
            let r = RateLimits::from_headers(&h);
            prop_assert_eq!(r.tokens, Quota {
                limit: Some(limit),
                remaining: Some(remaining),
                reset: Some(Duration::from_millis(reset_ms)),
            });
        }
    }

    const NAMES: &[&str] = &[
        "date",
        "retry-after",
        "retry-after-ms",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
    ];
}
