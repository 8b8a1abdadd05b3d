//! Providers' rate-limit headers read into [`ProviderLimits`]: OpenAI's `x-ratelimit-*`,
//! Anthropic's `anthropic-ratelimit-*` and the IETF draft's `RateLimit` fields.
//!
//! The values come from the network, so every parser here is strict and total: what does not
//! parse is `None`, never a panic, and no reset is believed beyond [`RESET_MAX`].

use std::time::{Duration, SystemTime};

use ::http::HeaderMap;

use crate::{ProviderLimits, Quota};

use ietf::ietf_structured;
use reset::{go_duration, until};

mod ietf;
mod reset;

/// The longest reset a header is believed for: a hostile reset never stalls longer than
/// this; the gate clamps further to `retry_after_max`.
pub const RESET_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// OpenAI's fields: limit, remaining, reset (a Go duration), for requests and for tokens.
const OPENAI_REQUESTS: [&str; 3] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
];
const OPENAI_TOKENS: [&str; 3] = [
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];

/// Anthropic's fields: limit, remaining, reset (an RFC 3339 instant), per family.
const ANTHROPIC_REQUESTS: [&str; 3] = [
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
];
const ANTHROPIC_TOKENS: [&str; 3] = [
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
];
const ANTHROPIC_INPUT_TOKENS: [&str; 3] = [
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
];
const ANTHROPIC_OUTPUT_TOKENS: [&str; 3] = [
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
];

/// The IETF draft's older separate fields: limit, remaining, reset (delay-seconds).
const IETF_SEPARATE: [&str; 3] = ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"];

/// What an answer's headers say of the provider's rate limits, as of now. See
/// [`rate_limits_at`] for the forms read.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit-requests", HeaderValue::from_static("10000"));
/// headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("9999"));
/// headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("6ms"));
///
/// let limits = resil_runtime::http::rate_limits(&headers);
/// let requests = limits.requests.unwrap();
/// assert_eq!((requests.limit, requests.remaining), (Some(10000), 9999));
/// assert_eq!(requests.reset, Duration::from_millis(6));
/// assert_eq!(limits.tokens, None);
/// ```
pub fn rate_limits(headers: &HeaderMap) -> ProviderLimits {
    rate_limits_at(headers, SystemTime::now())
}

/// [`rate_limits`] as of `now`, which Anthropic's reset instants are counted from.
///
/// Read, for each of requests and tokens, from the first form that gives a whole quota:
///
/// 1. OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset a Go
///    duration (`6m0s`, `59.4s`, `20ms`).
/// 2. Anthropic: `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, the reset
///    an RFC 3339 instant (one in the past is zero). Without the `tokens` family, tokens are
///    the `input-tokens` or `output-tokens` family with fewer remaining.
/// 3. IETF (requests only): `RateLimit: "name";r=50;t=30` with `RateLimit-Policy:
///    "name";q=100;w=10` (of several policies, the one with fewest remaining), else the older
///    `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (seconds).
///
/// A quota needs both its remaining and its reset; its limit and window are optional, but a
/// field present and malformed (a sign, an exponent, not UTF-8, too large for a count) drops
/// the quota. A field repeated is read where it is tightest (the least remaining or limit,
/// the latest reset). Remaining is clamped to the limit, and the reset to [`RESET_MAX`]. A
/// `RateLimit` list longer than 4 KiB is not read, and an IETF policy whose quota unit is not
/// requests (`qu="content-bytes"`) is no request quota.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use std::time::{Duration, SystemTime};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("anthropic-ratelimit-tokens-limit", HeaderValue::from_static("80000"));
/// headers.insert("anthropic-ratelimit-tokens-remaining", HeaderValue::from_static("79000"));
/// headers.insert("anthropic-ratelimit-tokens-reset", HeaderValue::from_static("2024-08-21T16:21:00Z"));
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=50;t=30"#));
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_724_257_245); // 2024-08-21T16:20:45Z
/// let limits = resil_runtime::http::rate_limits_at(&headers, now);
/// let tokens = limits.tokens.unwrap();
/// assert_eq!((tokens.remaining, tokens.reset), (79000, Duration::from_secs(15)));
/// assert_eq!(limits.requests.unwrap().reset, Duration::from_secs(30));
/// ```
pub fn rate_limits_at(headers: &HeaderMap, now: SystemTime) -> ProviderLimits {
    let instant = |text: &str| until(text, now);
    let requests = quota(headers, OPENAI_REQUESTS, go_duration)
        .or_else(|| quota(headers, ANTHROPIC_REQUESTS, instant))
        .or_else(|| ietf_structured(headers))
        .or_else(|| quota(headers, IETF_SEPARATE, seconds));
    let tokens = quota(headers, OPENAI_TOKENS, go_duration)
        .or_else(|| quota(headers, ANTHROPIC_TOKENS, instant))
        .or_else(|| {
            let input = quota(headers, ANTHROPIC_INPUT_TOKENS, instant);
            let output = quota(headers, ANTHROPIC_OUTPUT_TOKENS, instant);
            // The tighter of the two is the one that stops the next request.
            match (input, output) {
                (Some(input), Some(output)) if output.remaining < input.remaining => Some(output),
                (input, output) => input.or(output),
            }
        });
    ProviderLimits { requests, tokens }
}

/// A quota from its `[limit, remaining, reset]` fields, the reset read by `read_reset`.
fn quota(
    headers: &HeaderMap,
    [limit, remaining, reset]: [&str; 3],
    read_reset: impl Fn(&str) -> Option<Duration>,
) -> Option<Quota> {
    let remaining = tightest(headers, remaining, count, Ord::min)?;
    let reset = tightest(headers, reset, read_reset, Ord::max)?;
    // Absent is fine; present and malformed means the answer is not to be trusted.
    let limit = match headers.contains_key(limit) {
        true => Some(tightest(headers, limit, count, Ord::min)?),
        false => None,
    };
    Some(clamped(limit, remaining, reset, None))
}

/// Every value of the field `name`, each read by `read`, and of those the tightest as `pick`
/// chooses: a field repeated with values that disagree (remaining 100, then 0) is believed
/// where it says the least is allowed, never where it says the most, whether it came as two
/// lines or as one a proxy folded (`100, 0`; none of these fields' forms holds a comma).
/// `None` when the field is absent or any value does not read.
fn tightest<T>(
    headers: &HeaderMap,
    name: &str,
    read: impl Fn(&str) -> Option<T>,
    pick: fn(T, T) -> T,
) -> Option<T> {
    let mut values = headers.get_all(name).iter().flat_map(|line| {
        let line = text(line);
        // A line that is not UTF-8 is one value that does not read.
        let unreadable = line.is_none().then_some(None);
        let values = line.into_iter().flat_map(|line| line.split(','));
        values.map(|value| read(value.trim())).chain(unreadable)
    });
    let first = values.next()??;
    values.try_fold(first, |kept, value| Some(pick(kept, value?)))
}

/// The quota, with remaining no higher than the limit and the reset no longer than
/// [`RESET_MAX`]. A limit of 0 is kept: the provider says nothing passes.
fn clamped(limit: Option<u64>, remaining: u64, reset: Duration, window: Option<Duration>) -> Quota {
    Quota {
        limit,
        remaining: limit.map_or(remaining, |limit| remaining.min(limit)),
        reset: reset.min(RESET_MAX),
        window,
    }
}

/// A header line as trimmed text: `None` when not UTF-8. UTF-8 rather than `to_str`'s visible
/// ASCII, for Go's `µs`.
fn text(value: &::http::HeaderValue) -> Option<&str> {
    std::str::from_utf8(value.as_bytes()).ok().map(str::trim)
}

/// A count: ASCII digits only (no sign, no exponent, no inner space), within u64.
fn count(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Delay-seconds: digits only; more seconds than a u64 holds is still only [`RESET_MAX`].
fn seconds(text: &str) -> Option<Duration> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs = text.bytes().fold(0u64, |n, digit| {
        n.saturating_mul(10).saturating_add(u64::from(digit - b'0'))
    });
    Some(Duration::from_secs(secs).min(RESET_MAX))
}

#[cfg(test)]
mod tests;
