//! Where a shared breaker and gate live in a key-value store, named in one place: every key
//! one script touches carries one Redis Cluster hash tag (the part in braces), and a name's own
//! text never ends or splits it.

use std::borrow::Cow;

/// A breaker's id in the store, `resil:{breaker:NAME}`: its keys are the id and a suffix
/// (`:open`, `:probe`), all in one Redis Cluster hash slot (the part in braces), so one script
/// touches one node; different breakers spread over the nodes.
pub(crate) fn breaker_id(name: &str) -> String {
    format!("resil:{{breaker:{}}}", tag_safe(name))
}

/// A gate's key in the store, `resil:{gate:FN}:rate` or `resil:{gate:FN}:tokens` (`what`):
/// the rate and the token gate of one function (or of one key of it) share the hash tag, so
/// the script reserving both at once runs on one Redis Cluster node.
pub(crate) fn gate_key(what: &str, name: &str) -> String {
    format!("resil:{{gate:{}}}:{what}", tag_safe(name))
}

/// A name as it may stand inside a hash tag: `%`, `{` and `}` percent-encoded, so that no
/// name ends or splits the tag, and two names stay two keys (the encoding is injective).
fn tag_safe(name: &str) -> Cow<'_, str> {
    if !name.contains(['%', '{', '}']) {
        return Cow::Borrowed(name);
    }
    let mut safe = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => safe.push_str("%25"),
            '{' => safe.push_str("%7B"),
            '}' => safe.push_str("%7D"),
            c => safe.push(c),
        }
    }
    Cow::Owned(safe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_end_or_split_the_hash_tag() {
        assert_eq!(breaker_id("openai"), "resil:{breaker:openai}");
        assert_eq!(
            gate_key("rate", "llm::complete"),
            "resil:{gate:llm::complete}:rate"
        );
        assert_eq!(breaker_id("a}b"), "resil:{breaker:a%7Db}");
        let names = ["a}b", "a", "{x}", "%7Bx%7D", "%", "%25", "}", "{"];
        let keys: std::collections::HashSet<_> =
            names.iter().map(|name| gate_key("rate", name)).collect();
        assert_eq!(keys.len(), names.len(), "two names, two keys: {keys:?}");
        for key in &keys {
            let tag = &key[key.find('{').unwrap() + 1..];
            assert!(!tag[..tag.find('}').unwrap()].contains('{'), "{key}");
            assert!(
                key.ends_with("}:rate"),
                "the tag ends where resil ends it: {key}"
            );
        }
    }
}
