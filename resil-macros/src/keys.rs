//! The one table of `#[resilient]` keys: each key's name and how its value is parsed and
//! stored. It drives parsing, duplicate detection and "did you mean" suggestions; what a key
//! means is in `resil_spec::keys`, in the same order (a test below holds the two together).
//! Adding a key is one line here, one field in [`ResilientArgs`] and one entry there.

use std::time::Duration;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::Expr;

pub(crate) use resil_spec::names::did_you_mean;
use resil_spec::profiles::Profile;
use resil_spec::{Jitter, WindowSize};

use crate::values::{self, BreakerArg, Budget, Bulkhead, Hedge, KindName, Rate, Route};

/// A value with where it was written.
pub(crate) struct Setting<T> {
    pub(crate) value: T,
    pub(crate) key: Span,
    pub(crate) span: Span,
}

/// A key of the attribute.
pub(crate) struct Key {
    pub(crate) name: &'static str,
    /// Parses the value and stores it in the key's own field.
    pub(crate) assign: fn(&mut ResilientArgs, Span, &Expr) -> syn::Result<()>,
}

/// Declares the keys: each is a field of [`ResilientArgs`] named like the key, parsed by a
/// function of `values`, so a key cannot land in another key's field.
macro_rules! keys {
    ($($name:ident: $ty:ty = $parse:path;)*) => {
        /// Everything the attribute said, parsed but not yet checked across keys.
        #[derive(Default)]
        pub(crate) struct ResilientArgs {
            $(pub(crate) $name: Option<Setting<$ty>>,)*
        }

        /// Every key, in the order the docs present them.
        pub(crate) const KEYS: &[Key] = &[$(Key {
            name: stringify!($name),
            assign: |args, key, value| {
                let parsed = $parse(stringify!($name), value)?;
                args.$name = Some(Setting { value: parsed, key, span: value.span() });
                Ok(())
            },
        },)*];
    };
}

keys! {
    profile: &'static Profile = values::profile;
    timeout: Duration = values::duration_value;
    deadline: Duration = values::duration_value;
    first_item_timeout: Duration = values::duration_value;
    idle_timeout: Duration = values::duration_value;
    complete_when: syn::Path = values::final_item;
    commit_when: syn::Path = values::committing_item;
    commit_hold: u32 = values::count_value;
    retry: u32 = values::count_value;
    retry_after_max: Duration = values::duration_value;
    backoff: (Duration, Duration) = values::range;
    jitter: Jitter = values::jitter;
    transient: syn::Path = values::classifier;
    rejected: syn::Path = values::carrier;
    key: Expr = values::expression;
    breaker: BreakerArg = values::breaker;
    breaker_threshold: u32 = values::count_value;
    breaker_cooldown: Duration = values::duration_value;
    breaker_kind: KindName = values::breaker_kind;
    breaker_rate: u32 = values::percent;
    breaker_window: WindowSize = values::window;
    breaker_min_calls: u32 = values::count_value;
    breaker_slow: Duration = values::duration_value;
    max_keys: u32 = values::count_value;
    bulkhead: Bulkhead = values::bulkhead;
    bulkhead_queue: u32 = values::count_value;
    rate: Rate = values::rate;
    token_rate: Rate = values::rate;
    rate_cost: Expr = values::expression;
    priority: Expr = values::expression;
    fair: Expr = values::expression;
    learn: bool = values::flag;
    route: Route = values::route;
    hedge: Hedge = values::hedge;
    fallback: syn::Path = values::fallback;
    listener: syn::Path = values::listener;
    retry_budget: Budget = values::budget;
    nested: bool = values::nesting;
    shared: bool = values::flag;
    shared_timeout: Duration = values::duration_value;
    shared_fail: bool = values::shared_fail;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_documented_in_the_reference_in_the_same_order() {
        let parsed: Vec<_> = KEYS.iter().map(|key| key.name).collect();
        let documented: Vec<_> = resil_spec::keys::KEYS.iter().map(|key| key.name).collect();
        assert_eq!(parsed, documented);
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
