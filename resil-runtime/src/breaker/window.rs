//! [`Window`]: the calls a failure-rate or slow-call breaker judges: the last so many, as a
//! ring of bits ([`CallWindow`]), or those of the last so long, as a ring of buckets
//! ([`TimeWindow`]).

use tokio::time::Instant;

use super::config::trips;
use super::time_window::TimeWindow;
use super::BreakerKind;
use resil_spec::WindowSize;

/// The calls a failure-rate or slow-call breaker judges.
#[derive(Debug)]
pub(crate) enum Window {
    Calls(CallWindow),
    Time(TimeWindow),
}

impl Window {
    /// The window of a failure-rate or slow-call breaker; none for a consecutive one.
    pub(crate) fn of(kind: BreakerKind) -> Option<Self> {
        match kind {
            BreakerKind::Consecutive => None,
            BreakerKind::FailureRate { window, .. } | BreakerKind::SlowCall { window, .. } => {
                Some(match window {
                    WindowSize::Calls(size) => Window::Calls(CallWindow::new(size)),
                    WindowSize::Time(span) => Window::Time(TimeWindow::new(span, Instant::now())),
                })
            }
        }
    }

    /// Counts one call and says whether at least `percent` % of the calls in the window were
    /// bad, with at least `min_calls` counted. Only a time window reads the clock.
    pub(crate) fn push_trips(&mut self, bad: bool, percent: u8, min_calls: u32) -> bool {
        match self {
            Window::Calls(window) => {
                window.push(bad);
                window.trips(percent, min_calls)
            }
            Window::Time(window) => {
                let now = Instant::now();
                window.push(now, bad);
                window.trips(now, percent, min_calls)
            }
        }
    }

    /// Whether the calls in the window trip it, as [`Window::push_trips`] says, counting none.
    #[cfg(feature = "shared")]
    pub(crate) fn trips(&mut self, percent: u8, min_calls: u32) -> bool {
        match self {
            Window::Calls(window) => window.trips(percent, min_calls),
            Window::Time(window) => window.trips(Instant::now(), percent, min_calls),
        }
    }

    /// Bad calls in the window (for a time window, as of now).
    pub(crate) fn bad(&mut self) -> u32 {
        match self {
            Window::Calls(window) => window.bad(),
            Window::Time(window) => window.bad(Instant::now()),
        }
    }

    /// Forgets every call: the breaker starts judging afresh.
    pub(crate) fn clear(&mut self) {
        match self {
            Window::Calls(window) => window.clear(),
            Window::Time(window) => window.clear(),
        }
    }
}

/// The outcomes of the last `size` calls (a bit each: bad or not) and how many are bad, so
/// that judging is a comparison, not a scan. At most 10 000 calls: 1.25 KB.
#[derive(Debug)]
pub(crate) struct CallWindow {
    bits: Box<[u64]>,
    size: u32,
    /// Calls counted, up to `size`.
    len: u32,
    /// Where the next outcome goes.
    next: u32,
    bad: u32,
}

impl CallWindow {
    pub(crate) fn new(size: u32) -> Self {
        let size = size.max(1);
        CallWindow {
            bits: vec![0; size.div_ceil(64) as usize].into_boxed_slice(),
            size,
            len: 0,
            next: 0,
            bad: 0,
        }
    }

    /// Counts one call, forgetting the oldest once the window is full.
    pub(crate) fn push(&mut self, bad: bool) {
        let (word, bit) = ((self.next / 64) as usize, self.next % 64);
        let mask = 1u64 << bit;
        if self.len == self.size {
            if self.bits[word] & mask != 0 {
                self.bad -= 1;
            }
        } else {
            self.len += 1;
        }
        if bad {
            self.bits[word] |= mask;
            self.bad += 1;
        } else {
            self.bits[word] &= !mask;
        }
        self.next = (self.next + 1) % self.size;
    }

    /// Whether at least `percent` % of the calls counted were bad, with at least `min_calls`
    /// counted.
    pub(crate) fn trips(&self, percent: u8, min_calls: u32) -> bool {
        trips(self.len.into(), self.bad.into(), percent, min_calls)
    }

    /// Bad calls in the window.
    pub(crate) fn bad(&self) -> u32 {
        self.bad
    }

    /// Forgets every call: the breaker starts judging afresh.
    pub(crate) fn clear(&mut self) {
        self.bits.fill(0);
        self.len = 0;
        self.next = 0;
        self.bad = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// The ring counts what a plain queue of the last `size` outcomes counts.
        #[test]
        fn counts_the_last_calls(size in 1u32..200, outcomes in proptest::collection::vec(any::<bool>(), 0..1000), percent in 1u8..=100, min in 1u32..50) {
            let mut window = CallWindow::new(size);
            let mut model = VecDeque::new();
            for bad in outcomes {
                window.push(bad);
                model.push_back(bad);
                if model.len() > size as usize {
                    model.pop_front();
                }
                let bad_calls = model.iter().filter(|bad| **bad).count() as u32;
                prop_assert_eq!(window.bad(), bad_calls);
                let trips = model.len() as u32 >= min && bad_calls * 100 >= u32::from(percent) * model.len() as u32;
                prop_assert_eq!(window.trips(percent, min), trips);
            }
            window.clear();
            prop_assert!(!window.trips(1, 1));
        }
    }
}
