//! The reset's two time forms: Go's duration (OpenAI) and the RFC 3339 instant (Anthropic),
//! written here (a few dozen lines each) rather than taken from a dependency.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::RESET_MAX;

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
pub(super) fn go_duration(text: &str) -> Option<Duration> {
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
pub(super) fn until(text: &str, now: SystemTime) -> Option<Duration> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let (secs, millis) = (Duration::from_secs, Duration::from_millis);
        let nanos = Duration::from_nanos;
        for (text, expected) in [
            ("6m0s", secs(360)),
            ("1s", secs(1)),
            ("20ms", millis(20)),
            ("59.4s", millis(59_400)),
            ("2m59.56s", millis(179_560)),
            ("1h2m3s", secs(3723)),
            ("0s", Duration::ZERO),
            ("0", Duration::ZERO),
            ("500us", nanos(500_000)),
            ("500µs", nanos(500_000)),
            ("500μs", nanos(500_000)),
            ("100ns", nanos(100)),
            ("1.5h", secs(5400)),
            ("0.0000000000000000000000001h", Duration::ZERO),
            ("9999999999h", RESET_MAX),
            ("99999999999999999999999s", RESET_MAX),
            ("23h59m59s1h", RESET_MAX),
        ] {
            assert_eq!(go_duration(text), Some(expected), "{text}");
        }
        for text in [
            "", "-1s", "+1s", "1e5s", "5m-3s", "1.2.3s", "1x", "s", "1", ".5s", "1.s", "1 s",
            "1mx", "1hm", "0.0",
        ] {
            assert_eq!(go_duration(text), None, "{text:?}");
        }
    }

    #[test]
    fn rfc3339_instants() {
        let at = |secs: i128, nanos: i128| Some(secs * 1_000_000_000 + nanos);
        for (text, expected) in [
            ("1970-01-01T00:00:00Z", at(0, 0)),
            ("1969-12-31T23:59:59Z", at(-1, 0)),
            ("2024-08-21T16:21:00Z", at(1_724_257_260, 0)),
            ("2024-08-21t16:21:00z", at(1_724_257_260, 0)),
            ("2024-08-21T18:21:00+02:00", at(1_724_257_260, 0)),
            ("2024-08-21T15:51:00-00:30", at(1_724_257_260, 0)),
            ("2024-08-21T16:21:00.5Z", at(1_724_257_260, 500_000_000)),
            (
                "2024-08-21T16:21:00.1234567891Z",
                at(1_724_257_260, 123_456_789),
            ),
            ("2000-02-29T00:00:00Z", at(951_782_400, 0)),
            ("2024-12-31T23:59:60Z", at(1_735_689_600, 0)),
            ("0001-01-01T00:00:00Z", at(-62_135_596_800, 0)),
            ("9999-12-31T23:59:59Z", at(253_402_300_799, 0)),
        ] {
            assert_eq!(rfc3339(text), expected, "{text}");
        }
        for text in [
            "",
            "2024-13-01T00:00:00Z",
            "2024-00-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-01-32T00:00:00Z",
            "2024-01-00T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:60:00Z",
            "2024-01-01T00:00:61Z",
            "2024-01-01T00:00:00",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+24:00",
            "2024-01-01T00:00:00+02:60",
            "2024-01-01T00:00:00+0200",
            "2024-01-01T00:00:00Zjunk",
            "-024-01-01T00:00:00Z",
            "2024-1-01T00:00:00Z",
            "2024-+1-01T00:00:00Z",
            "Wed, 21 Aug 2024 16:21:00 GMT",
        ] {
            assert_eq!(rfc3339(text), None, "{text:?}");
        }
    }
}
