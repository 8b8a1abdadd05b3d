//! Profiles: presets for the kinds of providers teams call, which keys written beside them
//! override (`#[resilient(profile = "llm", timeout = "90s")]`). The numbers come from DESIGN.md,
//! after the experience of teams that ran these patterns in production; each says why.

use core::time::Duration;

use crate::Jitter;

/// A preset: a value for each key it sets, `None` for the keys it leaves to their defaults.
/// The breaker's tuning applies to the breaker the function declares; a profile declares no
/// breaker by itself (one needs a name, or a key).
///
/// ```
/// use resil_spec::profiles;
/// use std::time::Duration;
///
/// let llm = profiles::named("llm").unwrap();
/// assert_eq!(llm.timeout, Some(Duration::from_secs(60)));
/// assert_eq!(llm.breaker_threshold, Some(3));
/// assert!(profiles::named("lm").is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// Its name: `profile = "<name>"`.
    pub name: &'static str,
    /// What it is for, and why its numbers.
    pub doc: &'static str,
    /// Limit for one attempt.
    pub timeout: Option<Duration>,
    /// Extra attempts after the first.
    pub retry: Option<u32>,
    /// The backoff's envelope, `base..cap`.
    pub backoff: Option<(Duration, Duration)>,
    /// How waits are drawn.
    pub jitter: Option<Jitter>,
    /// The longest `Retry-After` honoured.
    pub retry_after_max: Option<Duration>,
    /// Consecutive transient failures that open the breaker.
    pub breaker_threshold: Option<u32>,
    /// How long the breaker stays open before one probe.
    pub breaker_cooldown: Option<Duration>,
}

const fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

const NONE: Profile = Profile {
    name: "",
    doc: "",
    timeout: None,
    retry: None,
    backoff: None,
    jitter: None,
    retry_after_max: None,
    breaker_threshold: None,
    breaker_cooldown: None,
};

/// Every built-in profile.
pub const ALL: &[Profile] = &[
    Profile {
        name: "fast",
        doc: "a lookup that answers in milliseconds when healthy (cache, feature flags): 3 s per attempt, one retry; waiting longer only holds the caller",
        timeout: Some(secs(3)),
        retry: Some(1),
        ..NONE
    },
    Profile {
        name: "database",
        doc: "a database or internal service: 5 s per attempt, two retries; a query slower than that is stuck, not busy",
        timeout: Some(secs(5)),
        retry: Some(2),
        ..NONE
    },
    Profile {
        name: "external_api",
        doc: "a third party's API: 10 s per attempt, two retries 1 s..8 s apart; its breaker is tolerant (5 failures) and recovers fast (30 s), since such APIs blip more than they die",
        timeout: Some(secs(10)),
        retry: Some(2),
        backoff: Some((secs(1), secs(8))),
        breaker_threshold: Some(5),
        breaker_cooldown: Some(secs(30)),
        ..NONE
    },
    Profile {
        name: "llm",
        doc: "an LLM provider: 60 s per attempt (long answers are normal), two retries 2 s..30 s apart, Retry-After honoured up to 60 s; its breaker is sensitive (3 failures) and slow to recover (60 s), since an overloaded model stays overloaded for minutes",
        timeout: Some(secs(60)),
        retry: Some(2),
        backoff: Some((secs(2), secs(30))),
        retry_after_max: Some(secs(60)),
        breaker_threshold: Some(3),
        breaker_cooldown: Some(secs(60)),
        ..NONE
    },
    Profile {
        name: "payment",
        doc: "a payment gateway: fail fast (10 s, one retry, no jitter so an audit can replay the timing); its breaker trips after 3 failures and waits 120 s, never hammering a gateway that moves money",
        timeout: Some(secs(10)),
        retry: Some(1),
        jitter: Some(Jitter::None),
        breaker_threshold: Some(3),
        breaker_cooldown: Some(secs(120)),
        ..NONE
    },
    Profile {
        name: "idempotent",
        doc: "a job that is safe to repeat: five retries 500 ms..30 s apart; give it a timeout or a deadline of its own",
        retry: Some(5),
        backoff: Some((Duration::from_millis(500), secs(30))),
        ..NONE
    },
];

/// The built-in profile called `name`.
pub fn named(name: &str) -> Option<&'static Profile> {
    ALL.iter().find(|profile| profile.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_as_designed() {
        let get = |name| named(name).unwrap();
        assert_eq!(
            (get("fast").timeout, get("fast").retry),
            (Some(secs(3)), Some(1))
        );
        assert_eq!(get("database").timeout, Some(secs(5)));
        assert_eq!(get("external_api").backoff, Some((secs(1), secs(8))));
        assert_eq!(get("llm").breaker_cooldown, Some(secs(60)));
        assert_eq!(get("payment").jitter, Some(Jitter::None));
        assert_eq!(get("idempotent").retry, Some(5));
        assert_eq!(get("idempotent").timeout, None);
        for profile in ALL {
            if let Some((base, cap)) = profile.backoff {
                assert!(base <= cap, "{}", profile.name);
            }
            assert!(!profile.doc.is_empty());
        }
    }
}
