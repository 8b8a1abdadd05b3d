//! The hot path through the attribute allocates nothing: closed breaker (named or keyed by a
//! `&str`), free bulkhead, a timeout, and an answer ready on the first poll. A counting
//! allocator (per thread, so parallel tests do not disturb it) watches one poll.

// A global allocator cannot be written without `unsafe`; this one only counts and forwards.
#![allow(unsafe_code)]

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

use resil::resilient;
use support::ApiError;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_while_polling<F: Future>(future: F) -> u64 {
    let mut cx = Context::from_waker(Waker::noop());
    let before = ALLOCATIONS.with(Cell::get);
    let ready = pin!(future).poll(&mut cx).is_ready();
    let after = ALLOCATIONS.with(Cell::get);
    assert!(ready, "the call should finish on its first poll");
    after - before
}

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
