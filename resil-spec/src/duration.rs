//! Durations written as strings with units: "300ms", "20s", "1m", "1m30s", "1h".

use std::time::Duration;

const UNITS: &[(&str, u64)] = &[
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a backoff range `"base..cap"`, or says what one looks like.
///
/// ```
/// use std::time::Duration;
/// let range = resil_spec::duration::parse_range("300ms..8s");
/// assert_eq!(range, Ok((Duration::from_millis(300), Duration::from_secs(8))));
/// assert!(resil_spec::duration::parse_range("8s..300ms").is_err());
/// ```
pub fn parse_range(text: &str) -> Result<(Duration, Duration), String> {
    let (base, cap) = text.split_once("..").ok_or_else(|| {
        format!("`backoff = \"{text}\"` is not a range: write it as \"base..cap\", such as \"300ms..8s\"")
    })?;
    let (base, cap) = (parse(base)?, parse(cap)?);
    crate::rules::backoff(base, cap).map_err(|rule| rule.to_string())?;
    Ok((base, cap))
}

/// Parses `text`, or says what a duration looks like.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(resil_spec::duration::parse("1m30s"), Ok(Duration::from_secs(90)));
/// assert!(resil_spec::duration::parse("90").unwrap_err().contains("with a unit"));
/// ```
pub fn parse(text: &str) -> Result<Duration, String> {
    let malformed = || {
        format!(
            "`{text}` is not a duration: write a number with a unit (ms, s, m, h), such as \"300ms\", \"20s\", \"1m\" or \"1m30s\""
        )
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(malformed());
    }
    let mut nanos: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(malformed());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| malformed())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(malformed());
        };
        nanos = number
            .checked_mul(scale)
            .and_then(|n| nanos.checked_add(n))
            .ok_or_else(|| format!("`{text}` is too long a duration"))?;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_nanos(nanos))
}

/// Writes a duration the way a person would: "300ms", "20s", "1m30s".
///
/// ```
/// use std::time::Duration;
/// assert_eq!(resil_spec::duration::human(Duration::from_secs(90)), "1m30s");
/// ```
pub fn human(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms % 1000 != 0 || ms == 0 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_malformed() {
        for text in ["", "20", "s", "20 s", "2.5s", "20sec", "-1s", "1m30"] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn writes_like_a_person() {
        assert_eq!(human(Duration::from_millis(300)), "300ms");
        assert_eq!(human(Duration::from_secs(90)), "1m30s");
        assert_eq!(human(Duration::from_secs(20)), "20s");
    }
}
