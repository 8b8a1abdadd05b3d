//! The hot path allocates nothing: closed breaker, free bulkhead, a timeout, and an answer
//! ready on the first poll. A counting allocator (per thread, so parallel tests do not
//! disturb it) watches one poll of the whole operation. The first operation on a thread
//! grows that thread's operation stack once; every later one allocates nothing.

// A global allocator cannot be written without `unsafe`; this one only counts and forwards.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::Duration;

use resil_runtime::{Policy, Rejected};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes allocated minus bytes freed on this thread.
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        LIVE_BYTES.with(|n| n.set(n.get() + layout.size() as i64));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.with(|n| n.set(n.get() - layout.size() as i64));
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_while_polling<F: Future>(future: F) -> u64 {
    let mut cx = Context::from_waker(Waker::noop());
    let before = ALLOCATIONS.with(Cell::get);
    let ready = pin!(future).poll(&mut cx).is_ready();
    let after = ALLOCATIONS.with(Cell::get);
    assert!(ready, "the operation should finish on its first poll");
    after - before
}

#[test]
fn closed_breaker_bulkhead_timeout_ready_call_allocates_nothing() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(20))
        .retry(2)
        .breaker_named("alloc-test", 5, Duration::from_secs(30))
        .bulkhead(8)
        .build()
        .unwrap();
    let _ = allocations_while_polling(policy.run(|| async { Ok::<_, Rejected>(1) }));
    for _ in 0..3 {
        let allocations = allocations_while_polling(policy.run(|| async { Ok::<_, Rejected>(1) }));
        assert_eq!(allocations, 0);
    }
}

#[test]
fn keyed_breaker_lookup_of_a_known_key_allocates_nothing() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(20))
        .breaker_per_key("model", 5, Duration::from_secs(30))
        .bulkhead(8)
        .build()
        .unwrap();
    let owned = String::from("gpt-4o");
    let _ =
        allocations_while_polling(policy.run_keyed("gpt-4o", || async { Ok::<_, Rejected>(1) }));
    assert_eq!(
        allocations_while_polling(policy.run_keyed("gpt-4o", || async { Ok::<_, Rejected>(1) })),
        0
    );
    assert_eq!(
        allocations_while_polling(policy.run_keyed(&owned, || async { Ok::<_, Rejected>(1) })),
        0
    );
}

/// The docs of `Keys` promise what a key costs whatever a request puts in it: keys of a
/// megabyte each, through a policy with everything per key, keep at most that many bytes.
/// (What another thread frees counts as kept here: the figure can only be overstated.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_key_costs_a_bounded_number_of_bytes_whatever_its_size() {
    let policy = Policy::builder()
        .breaker_per_key("user", 5, Duration::from_secs(30))
        .bulkhead(8)
        .bulkhead_per_key()
        .rate(60, Duration::from_secs(60), 1)
        .rate_per_key()
        .token_rate(90_000, Duration::from_secs(60), 1_000)
        .token_rate_per_key()
        .build()
        .unwrap();
    const KEYS: usize = 100;
    let keys: Vec<String> = (0..KEYS)
        .map(|i| format!("{i}:{}", "x".repeat(1 << 20)))
        .collect();
    let before = LIVE_BYTES.with(Cell::get);
    for key in &keys {
        policy
            .run_keyed(key, || async { Ok::<_, Rejected>(()) })
            .await
            .unwrap();
    }
    let per_key = (LIVE_BYTES.with(Cell::get) - before) / KEYS as i64;
    assert_eq!(policy.keys().unwrap().len(), KEYS);
    assert!(
        per_key <= resil_runtime::Keys::MAX_BYTES_PER_KEY as i64,
        "a key costs {per_key} bytes"
    );
    println!("a key of 1 MiB costs {per_key} bytes");
}
