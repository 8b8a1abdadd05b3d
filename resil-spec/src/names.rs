//! Names as people mistype them: the closest known name, for "did you mean".

/// The closest of `candidates` to `typo`, if one is close enough to be what was meant.
///
/// ```
/// use resil_spec::names::did_you_mean;
///
/// assert_eq!(did_you_mean("timout", ["timeout", "retry"]), Some("timeout"));
/// assert_eq!(did_you_mean("colour", ["timeout", "retry"]), None);
/// ```
pub fn did_you_mean<'a>(
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
