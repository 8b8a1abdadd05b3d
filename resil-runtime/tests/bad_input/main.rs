//! Bad input never panics: whatever a server puts in `Retry-After` and whatever a caller gives
//! a builder, the answer is a value, an error, or a clamp. A builder refuses exactly the
//! settings that break a rule, and a policy built from any others, their edges included, ends
//! each call as the rules say (`rules.rs` works them out by a plain loop).

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "http")]
mod headers;
mod policies;
mod rules;
mod settings;

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use resil_runtime::{worst_case, Backoff};

use settings::{any_duration, jitter};

proptest! {
    #![proptest_config(common::proptest_config(256, "bad_input.proptest-regressions"))]

    /// Every draw of every jitter stays within its envelope, for any base, cap and retry.
    #[test]
    fn any_backoff_draws_within_bounds(
        base in any_duration(),
        cap in any_duration(),
        jitter in jitter(),
        retry in any::<u32>(),
        previous in proptest::option::of(any_duration()),
        seed in any::<u64>(),
    ) {
        let Ok(backoff) = Backoff::new(base, cap) else { return Ok(()) };
        let backoff = backoff.with_jitter(jitter);
        let mut rng = SmallRng::seed_from_u64(seed);
        let wait = backoff.delay(retry, previous, &mut rng);
        prop_assert!(wait <= backoff.cap());
        let _ = worst_case(Some(cap), Some(base), retry, &backoff, base);
    }
}
