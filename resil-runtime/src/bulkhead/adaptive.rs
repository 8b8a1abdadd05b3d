//! The limit of an adaptive bulkhead (`bulkhead = "adaptive 4..64"`): AIMD, as TCP finds the
//! capacity of a path, with a latency signal for providers that queue before they refuse.
//!
//! - **Halve on overload.** A throttle (`Transient::is_throttle`), an attempt timeout or a
//!   transient server failure halves the limit, never below the minimum. Only once per round
//!   trip: an attempt that started before the last decrease ran under the old limit, which
//!   that decrease already answered, so a burst of N failures in flight halves once, not N
//!   times (TCP's once-per-window rule); nor while more operations hold places than the
//!   limit (a decrease revokes none), whose failures are the excess's. Halving rounds up, so
//!   a limit just over the capacity does not fall far below it.
//! - **Add one per window of successes.** After as many successes as the limit, one more, never
//!   above the maximum. Only while the bulkhead is at least half used: a limit nobody reaches
//!   proves nothing, and one grown idle would let the next burst through unchecked.
//! - **Latency.** Each success measures its latency per unit of cost (the token gate's cost,
//!   else per call; a stream's attempt ends at its first item). Over
//!   [`QUEUEING`] × the baseline, with the bulkhead at least half used, the provider is
//!   queueing our calls: the limit falls by a tenth (once per round trip, like a halving),
//!   gently, since latency is a softer sign than a refusal. With the bulkhead less than half
//!   used, slow answers are not a queue of ours but the provider's pace, which the baseline
//!   learns at its next window: cutting a limit nobody reaches would only reject calls.
//!   Over [`TOLERANCE`] × the baseline, growth stops: a provider under modest overload answers
//!   a little slower and throttles nobody, and a limit that kept growing there (Gradient2's
//!   unbounded growth) would push it into real overload.
//! - **The baseline** is the least latency seen, lowered by any faster answer at once, and
//!   re-measured every [`WINDOW`] (Envoy's minRTT): it then becomes the least latency of the
//!   window's answers taken while the bulkhead was less than half used (or at its minimum). A
//!   baseline measured under our own load would creep up with the queue it should detect
//!   (Vegas's drifting baseline); one never re-measured would call a provider that became
//!   slower for good "queueing" forever. Under saturation no answer qualifies and the baseline
//!   stands; a provider slower for good then brings the limit down to where answers qualify
//!   again, and the baseline follows it, as Envoy's measurement at minimum concurrency does.
//!
//! Plain `"adaptive"` is 1..=256 (`resil_spec::defaults::ADAPTIVE_BULKHEAD`) starting at 16: 1 so a provider down to one call at a time
//! still gets it, 256 because beyond it the process itself is rarely not the bottleneck, and
//! 16 as a start that a burst against an unknown provider cannot turn into a stampede, yet
//! that a healthy provider grows out of within a few hundred calls.

use std::time::Duration;

use tokio::time::Instant;

use crate::sync::{lock, Mutex};

/// Where a limit starts, within its bounds.
const START: usize = 16;
/// A latency per unit over this multiple of the baseline is a sign of queueing.
pub(crate) const QUEUEING: f64 = 2.0;
/// Over this multiple of the baseline, the limit no longer grows.
pub(crate) const TOLERANCE: f64 = 1.5;
/// How often the baseline is measured again.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);

/// How an attempt that called the provider ended, for the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// An answer: its latency is a sample.
    Success,
    /// A throttle, an attempt timeout or a transient server failure.
    Overload,
    /// A permanent error, or a cut by the deadline: says nothing about capacity.
    Neutral,
}

/// One attempt's end, as the limit hears it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) signal: Signal,
    /// When the attempt's call started.
    pub(crate) started: Instant,
    /// Units of cost the attempt took (1 without a token gate).
    pub(crate) cost: u64,
    /// Operations in the bulkhead as it ended, this one included.
    pub(crate) in_flight: usize,
}

/// The limit moved to `to`. `noted` is the limit last reported, when the change since then
/// is more than a tenth of it: worth an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitChange {
    pub(crate) to: usize,
    pub(crate) noted: Option<usize>,
}

/// The controller of one bulkhead's limit.
#[derive(Debug)]
pub(crate) struct Adaptive {
    pub(crate) min: usize,
    pub(crate) max: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    limit: usize,
    /// Successes counted towards the next step up.
    successes: usize,
    /// The last decrease: attempts started by then ran under the old limit.
    cut_at: Option<Instant>,
    /// Nanoseconds per unit of cost.
    baseline: Option<f64>,
    /// The least qualifying latency of the current window, and when it started.
    window_min: Option<f64>,
    window_start: Option<Instant>,
    reported: usize,
}

impl Adaptive {
    /// A controller between `min` and `max` (checked by the caller), and where it starts.
    pub(crate) fn new(min: usize, max: usize) -> (Self, usize) {
        let limit = START.clamp(min, max);
        let state = State {
            limit,
            successes: 0,
            cut_at: None,
            baseline: None,
            window_min: None,
            window_start: None,
            reported: limit,
        };
        let adaptive = Adaptive {
            min,
            max,
            state: Mutex::new(state),
        };
        (adaptive, limit)
    }

    /// The same bounds, from the start: a new key's.
    pub(crate) fn fresh(&self) -> (Self, usize) {
        Adaptive::new(self.min, self.max)
    }

    #[cfg(test)]
    fn limit(&self) -> usize {
        lock(&self.state).limit
    }

    /// The least latency per unit of cost, once one was measured.
    #[cfg(test)]
    fn baseline(&self) -> Option<Duration> {
        lock(&self.state)
            .baseline
            .map(|nanos| Duration::from_nanos(nanos as u64))
    }

    /// Hears one attempt's end at `now`; returns how the limit moved, if it did, once
    /// `apply` has moved it (under the lock, so that moves apply in their order).
    pub(crate) fn observe(
        &self,
        sample: Sample,
        now: Instant,
        apply: impl FnOnce(usize, usize),
    ) -> Option<LimitChange> {
        let mut state = lock(&self.state);
        let from = state.limit;
        let to = match sample.signal {
            Signal::Neutral => return None,
            // Over the limit (a cut revokes no place held), an overload is the excess's, which
            // the last cut already answered.
            Signal::Overload if sample.in_flight > from => return None,
            // Rounded up: a limit of 5 over a capacity of 4 halves to 3, not 2.
            Signal::Overload => state.cut(&sample, now, from.div_ceil(2)),
            Signal::Success => {
                let took = now.saturating_duration_since(sample.started).as_nanos() as f64;
                let per_unit = took / sample.cost.max(1) as f64;
                // Half used or more, the bulkhead is what is tested; less, the answers
                // waited on little of our own, and are what the baseline is made of.
                let loaded = sample.in_flight * 2 >= from;
                let ratio = state.measure(per_unit, !loaded || from <= self.min, now);
                if !loaded {
                    return None;
                }
                if ratio > QUEUEING {
                    state.cut(&sample, now, from * 9 / 10)
                } else if ratio <= TOLERANCE {
                    state.successes += 1;
                    if state.successes < from {
                        return None;
                    }
                    state.successes = 0;
                    from + 1
                } else {
                    return None;
                }
            }
        };
        let to = to.clamp(self.min, self.max);
        if to == from {
            return None;
        }
        state.limit = to;
        apply(from, to);
        let noted = (to.abs_diff(state.reported) * 10 > state.reported)
            .then(|| std::mem::replace(&mut state.reported, to));
        Some(LimitChange { to, noted })
    }
}

impl State {
    /// A decrease to `to`, unless the attempt started before the last one.
    fn cut(&mut self, sample: &Sample, now: Instant, to: usize) -> usize {
        if self.cut_at.is_some_and(|at| sample.started <= at) {
            return self.limit;
        }
        self.cut_at = Some(now);
        self.successes = 0;
        to
    }

    /// Takes a success's latency into the baseline (into its next measure too, if `light`);
    /// returns its ratio to the baseline.
    fn measure(&mut self, per_unit: f64, light: bool, now: Instant) -> f64 {
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= WINDOW {
            if let Some(least) = self.window_min.take() {
                self.baseline = Some(least);
            }
            self.window_start = Some(now);
        }
        if light {
            self.window_min = Some(self.window_min.map_or(per_unit, |m| m.min(per_unit)));
        }
        let baseline = match self.baseline {
            Some(baseline) if baseline <= per_unit => baseline,
            _ => {
                self.baseline = Some(per_unit);
                return 1.0;
            }
        };
        if baseline == 0.0 {
            return 1.0;
        }
        per_unit / baseline
    }
}

#[cfg(test)]
mod tests;
