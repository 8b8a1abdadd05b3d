//! The hot path through the attribute allocates nothing: closed breaker (named or keyed by a
//! `&str`), free bulkhead, a timeout, and an answer ready on the first poll. A counting
//! allocator (per thread, so parallel tests do not disturb it) watches one poll.

#[path = "../resil-runtime/tests/common/counting.rs"]
mod counting;
mod support;

use counting::allocations_while_polling;
use resil::resilient;
use support::ApiError;

#[resilient(timeout = "20s", retry = 2, breaker = "alloc-test", bulkhead = 8)]
async fn named(n: u64) -> Result<u64, ApiError> {
    Ok(n)
}

#[resilient(timeout = "20s", retry = 2, breaker = "per_model", bulkhead = 8)]
async fn keyed(model: &str, n: u64) -> Result<u64, ApiError> {
    let _ = model;
    Ok(n)
}

#[test]
fn a_ready_call_with_every_policy_allocates_nothing() {
    // The first call builds the policy and registers the breakers.
    allocations_while_polling(named(0));
    allocations_while_polling(keyed("gpt-4o", 0));
    for n in 1..=3 {
        assert_eq!(allocations_while_polling(named(n)), 0);
        assert_eq!(allocations_while_polling(keyed("gpt-4o", n)), 0);
    }
}
