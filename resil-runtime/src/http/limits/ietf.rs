//! The IETF draft's structured fields (RFC 8941 lists): `RateLimit` and `RateLimit-Policy`.

use ::http::HeaderMap;

use super::*;

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

    /// Whether a policy's quota counts requests: its unit `qu` is absent (requests, the
    /// draft's default) or `"requests"`.
    fn counts_requests(&self) -> bool {
        match self.params.iter().rev().find(|(name, _)| *name == "qu") {
            Some((_, unit)) => matches!(*unit, "\"requests\"" | "requests"),
            None => true,
        }
    }
}

/// The draft's structured fields: each `RateLimit` member with both `r` and `t`, its limit
/// and window from the `RateLimit-Policy` member of the same name (the first of that name);
/// the one with fewest remaining, as it is the one that stops the next request. A policy
/// whose quota unit (`qu`) is not requests (`"content-bytes"`, `"concurrent-requests"`) says
/// nothing of how many requests may go, and its member is not read.
pub(super) fn ietf_structured(headers: &HeaderMap) -> Option<Quota> {
    let members = list(headers, "ratelimit")?;
    let policies = match headers.contains_key("ratelimit-policy") {
        true => list(headers, "ratelimit-policy")?,
        false => Vec::new(),
    };
    // By name, so that many members and many policies cost a lookup each, not a product.
    let mut by_name = std::collections::HashMap::with_capacity(policies.len());
    for policy in &policies {
        by_name.entry(policy.name).or_insert(policy);
    }
    let mut fewest: Option<Quota> = None;
    for member in &members {
        // The draft makes `t` optional; without it there is no quota to learn.
        let (Some(remaining), Some(reset)) = (member.count("r")?, member.count("t")?) else {
            continue;
        };
        let policy = by_name.get(member.name);
        if policy.is_some_and(|policy| !policy.counts_requests()) {
            continue;
        }
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

/// The most bytes a structured-field list is read in, all its lines together: a real
/// `RateLimit` field is a few dozen bytes, and an answer's headers are read on every call.
pub(super) const MAX_LIST_BYTES: usize = 4096;

/// Every line of a structured-field list, joined (a list may be split across lines):
/// `None` when absent, longer than [`MAX_LIST_BYTES`], or when any line is not UTF-8 or not
/// a list.
fn list<'a>(headers: &'a HeaderMap, name: &str) -> Option<Vec<Member<'a>>> {
    let lines = headers.get_all(name);
    let bytes = lines.iter().map(|value| value.len()).sum::<usize>();
    if bytes > MAX_LIST_BYTES {
        return None;
    }
    let mut members = Vec::new();
    for value in lines {
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
