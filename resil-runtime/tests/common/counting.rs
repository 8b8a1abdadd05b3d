//! The one counting allocator of the tests (included with `#[path]` by the allocation tests
//! of both crates, and by the simulator): it counts allocations and live bytes per thread, so
//! tests running side by side do not disturb each other, and forwards everything to the
//! system allocator.

// A global allocator cannot be written without `unsafe`; this one only counts and forwards.
#![allow(unsafe_code, dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

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
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.with(|n| n.set(n.get() - layout.size() as i64));
        // SAFETY: allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `future` is polled once; it must finish then.
pub(crate) fn allocations_while_polling<F: Future>(future: F) -> u64 {
    let mut cx = Context::from_waker(Waker::noop());
    let before = ALLOCATIONS.with(Cell::get);
    let ready = pin!(future).poll(&mut cx).is_ready();
    let after = ALLOCATIONS.with(Cell::get);
    assert!(ready, "the call should finish on its first poll");
    after - before
}

/// Bytes allocated and not freed on this thread so far. (What another thread frees counts
/// as kept here: a difference can only overstate.)
pub(crate) fn live_bytes() -> i64 {
    LIVE_BYTES.with(Cell::get)
}
