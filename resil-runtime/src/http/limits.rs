//! Providers' rate-limit headers read into [`ProviderLimits`]: OpenAI's `x-ratelimit-*`,
//! Anthropic's `anthropic-ratelimit-*` and the IETF draft's `RateLimit` fields.
//!
//! The values come from the network, so every parser here is strict and total: what does not
//! parse is `None`, never a panic, and no reset is believed beyond [`RESET_MAX`]. The Go
//! duration and RFC 3339 parsers are written here (a few dozen lines each) rather than taken
//! from a dependency.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::http::HeaderMap;

use crate::{ProviderLimits, Quota};

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
/// the quota. Remaining is clamped to the limit, and the reset to [`RESET_MAX`].
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
    let remaining = count(text(headers, remaining)?)?;
    let reset = read_reset(text(headers, reset)?)?;
    // Absent is fine; present and malformed means the answer is not to be trusted.
    let limit = match headers.contains_key(limit) {
        true => Some(count(text(headers, limit)?)?),
        false => None,
    };
    Some(clamped(limit, remaining, reset, None))
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

/// A header's first value as trimmed text: `None` when absent or not UTF-8. UTF-8 rather than
/// `to_str`'s visible ASCII, for Go's `µs`.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    std::str::from_utf8(headers.get(name)?.as_bytes())
        .ok()
        .map(str::trim)
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

/// Go's units, longest first where one is a prefix of another (`ms` before `m`).
const GO_UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5 MICRO SIGN, what Go prints
    ("μs", 1_000), // U+03BC GREEK SMALL LETTER MU, which Go also accepts
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// A Go duration as `time.Duration.String` prints it: a sum of number-and-unit terms, the
/// numbers with an optional fraction (`2m59.56s`, `500µs`), or a bare `0`. No sign: a
/// negative reset means nothing. Anything beyond [`RESET_MAX`] (however many digits) is
/// [`RESET_MAX`].
fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    // u128 nanoseconds, saturating: only whether the sum passes RESET_MAX matters beyond it.
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let (whole, after) = split_digits(rest);
        if whole.is_empty() {
            return None;
        }
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => match split_digits(after) {
                ("", _) => return None,
                split => split,
            },
            None => ("", after),
        };
        let (unit, after) = GO_UNITS
            .iter()
            .find_map(|&(name, unit)| after.strip_prefix(name).map(|after| (unit, after)))?;
        let whole = whole.bytes().fold(0u128, |n, digit| {
            n.saturating_mul(10)
                .saturating_add(u128::from(digit - b'0'))
        });
        // 18 digits are below a nanosecond even in hours, and keep 10^n and the product
        // within u128; the rest are checked to be digits (above) and ignored.
        let fraction = &fraction[..fraction.len().min(18)];
        let scale = 10u128.pow(fraction.len() as u32);
        let fraction = fraction
            .bytes()
            .fold(0u128, |n, digit| n * 10 + u128::from(digit - b'0'));
        nanos = nanos
            .saturating_add(whole.saturating_mul(unit))
            .saturating_add(fraction * unit / scale);
        rest = after;
    }
    let max = RESET_MAX.as_nanos();
    Some(Duration::from_nanos(nanos.min(max) as u64))
}

/// The leading ASCII digits of `text`, and what follows them.
fn split_digits(text: &str) -> (&str, &str) {
    let end = text.bytes().take_while(u8::is_ascii_digit).count();
    text.split_at(end)
}

/// How long from `now` until the RFC 3339 instant `text`: zero for an instant past, at most
/// [`RESET_MAX`].
fn until(text: &str, now: SystemTime) -> Option<Duration> {
    let at = rfc3339(text)?;
    let now = match now.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).ok()?,
        Err(before) => -i128::try_from(before.duration().as_nanos()).ok()?,
    };
    let ahead = (at - now).clamp(0, RESET_MAX.as_nanos() as i128);
    Some(Duration::from_nanos(ahead as u64))
}

/// An RFC 3339 date-time (`2024-08-21T16:21:00Z`, `2024-08-21T18:21:00.5+02:00`) as
/// nanoseconds since the Unix epoch. Every field is range-checked (no month 13, no
/// 30 February, no hour 24); a leap second (`:60`) is allowed, as RFC 3339 allows it.
fn rfc3339(text: &str) -> Option<i128> {
    let b = text.as_bytes();
    let separators = [
        (4, b"-" as &[u8]),
        (7, b"-"),
        (10, b"Tt"),
        (13, b":"),
        (16, b":"),
    ];
    if !separators
        .iter()
        .all(|(at, allowed)| b.get(*at).is_some_and(|c| allowed.contains(c)))
    {
        return None;
    }
    let year = number(b.get(0..4)?)?;
    let (month, day) = (number(b.get(5..7)?)?, number(b.get(8..10)?)?);
    let (hour, minute, second) = (
        number(b.get(11..13)?)?,
        number(b.get(14..16)?)?,
        number(b.get(17..19)?)?,
    );
    let month_ok = (1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day);
    if !month_ok || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0;
    if let Some(after) = rest.strip_prefix(b".") {
        let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
        // Nanoseconds: the first nine digits, the rest below our resolution.
        let kept = digits.min(9);
        nanos = number(&after[..kept])? * 10i64.pow(9 - kept as u32);
        rest = &after[digits..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (number(&[*h1, *h2])?, number(&[*m1, *m2])?);
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
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// A non-empty run of ASCII digits (at most nine here, so no overflow).
fn number(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0i64, |n, digit| {
        digit
            .is_ascii_digit()
            .then(|| n * 10 + i64::from(digit - b'0'))
    })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`):
/// years counted from March, so the leap day falls at a year's end.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// One member of a structured-field list (RFC 8941): its name and its parameters' values, as
/// sent (a string with its quotes).
struct Member<'a> {
    name: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl Member<'_> {
    /// A parameter as a count: `Some(None)` when absent, `None` when present and not a count
    /// (a negative integer, a decimal, a string). The last of repeated keys wins (RFC 8941).
    fn count(&self, key: &str) -> Option<Option<u64>> {
        match self.params.iter().rev().find(|(name, _)| *name == key) {
            Some((_, value)) => count(value).map(Some),
            None => Some(None),
        }
    }
}

/// The draft's structured fields: each `RateLimit` member with both `r` and `t`, its limit
/// and window from the `RateLimit-Policy` member of the same name; the one with fewest
/// remaining, as it is the one that stops the next request.
fn ietf_structured(headers: &HeaderMap) -> Option<Quota> {
    let members = list(headers, "ratelimit")?;
    let policies = match headers.contains_key("ratelimit-policy") {
        true => list(headers, "ratelimit-policy")?,
        false => Vec::new(),
    };
    let mut fewest: Option<Quota> = None;
    for member in &members {
        // The draft makes `t` optional; without it there is no quota to learn.
        let (Some(remaining), Some(reset)) = (member.count("r")?, member.count("t")?) else {
            continue;
        };
        let policy = policies.iter().find(|policy| policy.name == member.name);
        let (limit, window) = match policy {
            Some(policy) => (policy.count("q")?, policy.count("w")?),
            None => (None, None),
        };
        let reset = Duration::from_secs(reset);
        let quota = clamped(limit, remaining, reset, window.map(Duration::from_secs));
        if fewest.is_none_or(|fewest| quota.remaining < fewest.remaining) {
            fewest = Some(quota);
        }
    }
    fewest
}

/// Every line of a structured-field list, joined (a list may be split across lines):
/// `None` when absent, or when any line is not UTF-8 or not a list.
fn list<'a>(headers: &'a HeaderMap, name: &str) -> Option<Vec<Member<'a>>> {
    let mut members = Vec::new();
    for value in headers.get_all(name) {
        members.extend(members_of(std::str::from_utf8(value.as_bytes()).ok()?)?);
    }
    (!members.is_empty()).then_some(members)
}

/// A structured-field list's members: `name;key=value;key, name;key=value`. Strict: no
/// space before a `;`, no trailing comma.
fn members_of(text: &str) -> Option<Vec<Member<'_>>> {
    const OWS: [char; 2] = [' ', '\t'];
    let mut rest = text.trim_matches(OWS);
    let mut members = Vec::new();
    while !rest.is_empty() {
        let (name, after) = bare_item(rest)?;
        rest = after;
        let mut params = Vec::new();
        while let Some(after) = rest.strip_prefix(';') {
            let after = after.trim_start_matches(' ');
            let key_len = after
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(b))
                .count();
            if !after.starts_with(|c: char| c.is_ascii_lowercase() || c == '*') {
                return None;
            }
            let (key, after) = after.split_at(key_len);
            // A key without a value is the boolean true.
            let (value, after) = match after.strip_prefix('=') {
                Some(after) => bare_item(after)?,
                None => ("?1", after),
            };
            params.push((key, value));
            rest = after;
        }
        members.push(Member { name, params });
        rest = rest.trim_start_matches(OWS);
        if !rest.is_empty() {
            rest = rest.strip_prefix(',')?.trim_start_matches(OWS);
            if rest.is_empty() {
                return None;
            }
        }
    }
    Some(members)
}

/// A bare item as sent and what follows it: a string, quotes included (so that `r="5"` is
/// not a count), or a token, number or boolean up to the next delimiter.
fn bare_item(text: &str) -> Option<(&str, &str)> {
    if let Some(string) = text.strip_prefix('"') {
        let mut escaped = false;
        for (at, c) in string.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                return Some(text.split_at(at + 2));
            }
        }
        return None;
    }
    let end = text.find([';', ',', ' ', '\t']).unwrap_or(text.len());
    (end > 0).then(|| text.split_at(end))
}

#[cfg(test)]
mod tests;
