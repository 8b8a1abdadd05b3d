//! The one table of `#[resilient]` keys: it drives parsing, duplicate detection and
//! "did you mean" suggestions.

/// What a key's value looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `"20s"`
    Duration,
    /// `2`
    Count,
    /// `"300ms..8s"`
    Range,
    /// `"full"`
    Jitter,
    /// `"openai"` or `"per_model"`
    Breaker,
    /// `path::to::function`
    Path,
    /// `"20%"` or `"20%, min 10/s"`
    Budget,
    /// `"independent"` or `"shared"`
    Nested,
}

/// Every key, in the order the docs present them.
pub(crate) const KEYS: &[(&str, Kind)] = &[
    ("timeout", Kind::Duration),
    ("deadline", Kind::Duration),
    ("retry", Kind::Count),
    ("retry_after_max", Kind::Duration),
    ("backoff", Kind::Range),
    ("jitter", Kind::Jitter),
    ("breaker", Kind::Breaker),
    ("breaker_threshold", Kind::Count),
    ("breaker_cooldown", Kind::Duration),
    ("max_keys", Kind::Count),
    ("bulkhead", Kind::Count),
    ("fallback", Kind::Path),
    ("retry_budget", Kind::Budget),
    ("nested", Kind::Nested),
];

/// The closest of `candidates` to `typo`, if one is close enough to be what was meant.
pub(crate) fn did_you_mean<'a>(
    typo: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(typo, candidate), candidate))
        .filter(|(distance, candidate)| {
            *distance <= 2.max(candidate.len() / 3) || common_prefix(typo, candidate) >= 4
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_keys() {
        let keys = || KEYS.iter().map(|(name, _)| *name);
        assert_eq!(did_you_mean("retries", keys()), Some("retry"));
        assert_eq!(did_you_mean("timout", keys()), Some("timeout"));
        assert_eq!(
            did_you_mean("breaker_treshold", keys()),
            Some("breaker_threshold")
        );
        assert_eq!(did_you_mean("bulk_head", keys()), Some("bulkhead"));
        assert_eq!(did_you_mean("colour", keys()), None);
    }
}
