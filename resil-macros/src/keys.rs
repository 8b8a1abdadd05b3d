//! The one table of `#[resilient]` keys: each key's name, what it means, and how its value is
//! parsed and stored. It drives parsing, duplicate detection and "did you mean" suggestions;
//! adding a key is one line here and one field in [`ResilientArgs`].

use std::time::Duration;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::Expr;

pub(crate) use resil_spec::names::did_you_mean;
use resil_spec::profiles::Profile;
use resil_spec::Jitter;

use crate::values::{self, BreakerArg, Budget, Bulkhead, KindName, Rate};

/// A value with where it was written.
pub(crate) struct Setting<T> {
    pub(crate) value: T,
    pub(crate) key: Span,
    pub(crate) span: Span,
}

/// A key of the attribute.
pub(crate) struct Key {
    pub(crate) name: &'static str,
    /// What it means, in a few words: listed when a key is not recognised at all.
    pub(crate) doc: &'static str,
    /// Parses the value and stores it in the key's own field.
    pub(crate) assign: fn(&mut ResilientArgs, Span, &Expr) -> syn::Result<()>,
}

/// Declares the keys: each is a field of [`ResilientArgs`] named like the key, parsed by a
/// function of `values`, so a key cannot land in another key's field.
macro_rules! keys {
    ($($name:ident: $ty:ty = $parse:path, $doc:literal;)*) => {
        /// Everything the attribute said, parsed but not yet checked across keys.
        #[derive(Default)]
        pub(crate) struct ResilientArgs {
            $(pub(crate) $name: Option<Setting<$ty>>,)*
        }

        /// Every key, in the order the docs present them.
        pub(crate) const KEYS: &[Key] = &[$(Key {
            name: stringify!($name),
            doc: $doc,
            assign: |args, key, value| {
                let parsed = $parse(stringify!($name), value)?;
                args.$name = Some(Setting { value: parsed, key, span: value.span() });
                Ok(())
            },
        },)*];
    };
}

keys! {
    profile: &'static Profile = values::profile, "a preset the other keys override: fast, database, external_api, llm, payment or idempotent";
    timeout: Duration = values::duration_value, "limit for one attempt";
    deadline: Duration = values::duration_value, "limit for the whole operation, waits included";
    first_item_timeout: Duration = values::duration_value, "a stream's limit to its first item, connect included";
    idle_timeout: Duration = values::duration_value, "a stream's longest gap between items";
    complete_when: syn::Path = values::final_item, "a stream's test for its final item";
    commit_when: syn::Path = values::committing_item, "a stream's test for the item that commits it, such as its first content";
    retry: u32 = values::count_value, "extra attempts after the first, for transient errors only";
    retry_after_max: Duration = values::duration_value, "the longest Retry-After honoured";
    backoff: (Duration, Duration) = values::range, "the exponential envelope of the waits";
    jitter: Jitter = values::jitter, "how a wait is drawn from the envelope";
    key: Expr = values::expression, "an expression over the arguments that per-key breakers, bulkheads and gates are keyed by";
    breaker: BreakerArg = values::breaker, "a named breaker, one per key, or one per value of an argument";
    breaker_threshold: u32 = values::count_value, "consecutive transient failures that open it";
    breaker_cooldown: Duration = values::duration_value, "time open before one probe";
    breaker_kind: KindName = values::breaker_kind, "how the breaker judges: consecutive, failure_rate or slow_call";
    breaker_rate: u32 = values::percent, "the share of failed (or slow) calls that opens a failure_rate (or slow_call) breaker";
    breaker_window: u32 = values::count_value, "the calls a failure_rate or slow_call breaker remembers";
    breaker_min_calls: u32 = values::count_value, "the calls counted before a failure_rate or slow_call breaker may open";
    breaker_slow: Duration = values::duration_value, "what a slow_call breaker counts as slow";
    max_keys: u32 = values::count_value, "keys kept at most";
    bulkhead: Bulkhead = values::bulkhead, "operations in flight at most, in all or per key";
    bulkhead_queue: u32 = values::count_value, "callers that may wait for a place in the bulkhead";
    rate: Rate = values::rate, "attempts per period, retries included";
    token_rate: Rate = values::rate, "units of cost (tokens) per period";
    rate_cost: Expr = values::expression, "what one attempt costs the token gate";
    fallback: syn::Path = values::fallback, "an async fn with the same arguments";
    listener: syn::Path = values::listener, "a static that hears this function's events";
    retry_budget: Budget = values::budget, "retries as a share of first attempts";
    nested: bool = values::nesting, "keep this call's own retries inside another operation";
    shared: bool = values::flag, "keep the breaker and rate gates in Redis, shared by every instance";
    shared_timeout: Duration = values::duration_value, "how long a call waits for Redis before deciding locally";
    shared_fail: bool = values::shared_fail, "when Redis does not answer: open (decide locally) or closed (refuse)";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_documented_once() {
        for (i, key) in KEYS.iter().enumerate() {
            assert!(!key.doc.is_empty(), "{}", key.name);
            assert!(KEYS[..i].iter().all(|other| other.name != key.name));
        }
    }

    #[test]
    fn suggests_close_keys() {
        let keys = || KEYS.iter().map(|key| key.name);
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
