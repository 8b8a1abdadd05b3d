//! A shared breaker's time window summed over the instances, as a store sees it: a batch of
//! one instance's calls ([`WindowBatch`]) and the sums the store answers ([`WindowSums`]).

use std::time::Duration;

use crate::breaker::summed::{SummedWindow, WindowCounts};

/// One instance's calls to a shared failure-rate or slow-call breaker since its last batch,
/// to add to the breaker's window in time
/// ([`SharedStore::add_to_window`](super::SharedStore::add_to_window)), with the window's
/// shape: [`buckets`](Self::buckets) buckets of [`width`](Self::width) each.
///
/// ```
/// use resil_runtime::shared::WindowBatch;
///
/// fn describe(batch: &WindowBatch) -> String {
///     let (calls, bad) = (batch.calls(), batch.bad());
///     format!("{bad} of {calls} bad, {} buckets of {:?}", batch.buckets(), batch.width())
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowBatch {
    calls: u64,
    bad: u64,
    buckets: u64,
    width: Duration,
}

impl WindowBatch {
    pub(crate) fn new(window: &SummedWindow, batch: WindowCounts) -> Self {
        Self::of(batch, window.buckets, window.width)
    }

    /// `batch` for a window of `buckets` buckets `width` long each.
    pub(crate) fn of(batch: WindowCounts, buckets: u64, width: Duration) -> Self {
        WindowBatch {
            calls: batch.calls,
            bad: batch.bad,
            buckets,
            width,
        }
    }

    /// The calls in the batch.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Those of them that were bad (failures, or slow calls).
    pub fn bad(&self) -> u64 {
        self.bad
    }

    /// How many buckets the window has: the sums are over the latest this many.
    pub fn buckets(&self) -> u64 {
        self.buckets
    }

    /// How long each bucket lasts: the bucket of a batch is the store's now divided by it.
    pub fn width(&self) -> Duration {
        self.width
    }

    /// How long after the window's last batch the store may forget it: its buckets and one
    /// more (every bucket has aged out by then).
    pub fn expiry(&self) -> Duration {
        let buckets = u32::try_from(self.buckets.saturating_add(1)).unwrap_or(u32::MAX);
        self.width.saturating_mul(buckets)
    }
}

/// A shared breaker's window summed over every instance, as a store answers a
/// [`WindowBatch`]: the calls and the bad calls in its buckets.
///
/// ```
/// use resil_runtime::shared::WindowSums;
///
/// let sums = WindowSums::new(40, 22);
/// assert_eq!((sums.calls(), sums.bad()), (40, 22));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowSums {
    calls: u64,
    bad: u64,
}

impl WindowSums {
    /// `calls` in the window, `bad` of them bad.
    pub fn new(calls: u64, bad: u64) -> Self {
        WindowSums { calls, bad }
    }

    /// The calls in the window.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Those of them that were bad.
    pub fn bad(&self) -> u64 {
        self.bad
    }
}

impl From<WindowSums> for WindowCounts {
    fn from(sums: WindowSums) -> Self {
        WindowCounts {
            calls: sums.calls,
            bad: sums.bad,
        }
    }
}
