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
//! - **Latency, judged by the round.** A round is [`ROUND`] answers to calls made since the
//!   last decrease; each answer's latency is divided by what the baseline expects for its
//!   cost, and the round's median is its latency. Answers of LLMs spread by a factor of four
//!   or more whatever the load (100 to 400 ms is ordinary), so one answer alone says nothing
//!   of a queue: comparing each with the least latency ever seen took a healthy provider's
//!   slow half for queueing and brought the limit down to 1 (Gradient2 and Vegas judge a
//!   window's average or percentile for this reason). A round taken with the bulkhead at
//!   least half used (for most of its answers) whose median is over [`QUEUEING`] × the expected means the provider is
//!   queueing our calls: the limit falls by a tenth, once per round (the next round is made
//!   of calls sent under the new limit), gently, since latency is a softer sign than a
//!   refusal. A round taken with the bulkhead less than half used is not judged: slow answers
//!   there are not a queue of ours but the provider's pace, which the baseline learns at its
//!   next window, and cutting a limit nobody reaches would only reject calls. While the last
//!   round judged was over [`TOLERANCE`] × the expected, growth stops: a provider under
//!   modest overload answers a little slower and throttles nobody, and a limit that kept
//!   growing there (Gradient2's unbounded growth) would push it into real overload.
//! - **The baseline** is what an answer takes at light load, as a line of latency against
//!   cost (the token gate's cost, else 1 a call; a stream's attempt ends at its first item):
//!   a fixed part and a part per unit, fitted by least squares to the answers taken while
//!   the bulkhead was less than half used (or at its minimum), and measured again every
//!   [`WINDOW`] from at least a round of them (Envoy's minRTT window; at first, from the
//!   first round, whatever the load). A line rather than a time per unit: a call of 40
//!   tokens costs a hundredth of one of 4 000 and takes a third of its time, all of it the
//!   fixed part; per unit it took 34 times as long, and a bulkhead that read that as a queue
//!   held its limit down. Answers that all cost the same fix no slope: a call cheaper than
//!   them is then expected to take as long (never "slow" for being small), a dearer one
//!   proportionally longer. The line is the mean of those answers, not their least: a
//!   least latency falls with every sample and sits under most healthy answers. A baseline
//!   measured under our own load would creep up with the queue it should detect (Vegas's
//!   drifting baseline); one never re-measured would call a provider that became slower
//!   for good "queueing" forever. Under saturation no answer qualifies and the baseline
//!   stands; a provider slower for good then brings the limit down to where answers qualify
//!   again, and the baseline follows it, as Envoy's measurement at minimum concurrency does;
//!   a provider faster for good is learnt at the next window with room to spare.
//!
//! The state is fixed in size: the round's ratios and the fit's five sums, no allocation.
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
/// Answers judged together: their median is the round's latency.
pub(crate) const ROUND: usize = 16;
/// A round's median over this multiple of the expected latency is a sign of queueing.
pub(crate) const QUEUEING: f64 = 2.0;
/// Over this multiple of the expected latency, the limit no longer grows.
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
    /// What an answer is expected to take at light load, once measured.
    baseline: Option<Line>,
    /// The answers the next baseline is measured from, and since when.
    fit: Fit,
    window_start: Option<Instant>,
    /// The current round: each answer's latency over the expected, and how many of them
    /// were taken with the bulkhead at least half used.
    round: [f32; ROUND],
    len: u8,
    loaded: u8,
    /// The median of the last round taken under load: growth waits while it is over
    /// [`TOLERANCE`].
    verdict: f32,
    reported: usize,
}

/// Latency (nanoseconds) against cost: a line through the mean answer, its slope the time a
/// unit of cost adds (`None`: the answers measured all cost the same).
#[derive(Debug, Clone, Copy)]
struct Line {
    cost: f64,
    took: f64,
    slope: Option<f64>,
}

impl Line {
    /// What an answer of `cost` takes. Without a slope, the tolerant reading of a single
    /// cost: no dearer below it (a small call is all fixed part), proportional above.
    fn expected(&self, cost: f64) -> f64 {
        match self.slope {
            Some(slope) => self.took + slope * (cost - self.cost),
            None => self.took * (cost / self.cost).max(1.0),
        }
    }
}

/// Least squares of latency on cost, online (Welford): the means, and the sums of squares
/// and of products about them.
#[derive(Debug, Default)]
struct Fit {
    n: u32,
    cost: f64,
    took: f64,
    squares: f64,
    products: f64,
}

impl Fit {
    fn add(&mut self, cost: f64, took: f64) {
        self.n += 1;
        let n = f64::from(self.n);
        let dx = cost - self.cost;
        self.cost += dx / n;
        self.took += (took - self.took) / n;
        self.squares += dx * (cost - self.cost);
        self.products += dx * (took - self.took);
    }

    /// The line, its slope between none (all fixed part) and all of the latency
    /// (proportional): noise never makes an answer expected below nothing. Costs are at
    /// least 1, so is their mean.
    fn line(&self) -> Line {
        let slope = (self.squares > 0.0).then(|| {
            (self.products / self.squares)
                .max(0.0)
                .min(self.took / self.cost)
        });
        Line {
            cost: self.cost,
            took: self.took,
            slope,
        }
    }
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
            fit: Fit::default(),
            window_start: None,
            round: [0.0; ROUND],
            len: 0,
            loaded: 0,
            verdict: 1.0,
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

    /// What an answer of `cost` is expected to take, once the baseline was measured.
    #[cfg(test)]
    fn baseline(&self, cost: u64) -> Option<Duration> {
        lock(&self.state)
            .baseline
            .map(|line| Duration::from_nanos(line.expected(cost as f64).round() as u64))
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
                let cost = sample.cost.max(1) as f64;
                // Half used or more, the bulkhead is what is tested; less, the answers
                // waited on little of our own, and are what the baseline is made of.
                let loaded = sample.in_flight * 2 >= from;
                let queueing = state.judge(&sample, cost, took, loaded);
                state.measure(cost, took, !loaded || from <= self.min, now);
                if queueing {
                    state.cut(&sample, now, from * 9 / 10)
                } else if loaded && f64::from(state.verdict) <= TOLERANCE {
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
    /// A decrease to `to`, unless the attempt started before the last one. The round starts
    /// over: answers to calls made before the cut ran under the old limit.
    fn cut(&mut self, sample: &Sample, now: Instant, to: usize) -> usize {
        if self.cut_at.is_some_and(|at| sample.started <= at) {
            return self.limit;
        }
        self.cut_at = Some(now);
        self.successes = 0;
        self.len = 0;
        self.loaded = 0;
        to
    }

    /// Takes a success into the next baseline's measure, if `light` (any, until there is a
    /// baseline); makes that measure the baseline once a [`WINDOW`] has passed with a round
    /// of answers in it (the first round, at first).
    fn measure(&mut self, cost: f64, took: f64, light: bool, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        if light || self.baseline.is_none() {
            self.fit.add(cost, took);
        }
        let due = self.baseline.is_none() || now.saturating_duration_since(start) >= WINDOW;
        if due && self.fit.n as usize >= ROUND {
            self.baseline = Some(std::mem::take(&mut self.fit).line());
            self.window_start = Some(now);
            // The round so far was judged against the old baseline.
            self.len = 0;
            self.loaded = 0;
        }
    }

    /// Adds a success to the round; once the round is full, whether it was taken under load
    /// and queued: its median latency over [`QUEUEING`] × the expected. Answers to calls
    /// made before the last cut are left out.
    fn judge(&mut self, sample: &Sample, cost: f64, took: f64, loaded: bool) -> bool {
        let Some(baseline) = self.baseline else {
            return false;
        };
        if self.cut_at.is_some_and(|at| sample.started <= at) {
            return false;
        }
        let expected = baseline.expected(cost);
        let ratio = if expected > 0.0 { took / expected } else { 1.0 };
        self.round[usize::from(self.len)] = ratio as f32;
        self.len += 1;
        self.loaded += u8::from(loaded);
        if usize::from(self.len) < ROUND {
            return false;
        }
        let (len, loaded) = (
            std::mem::take(&mut self.len),
            std::mem::take(&mut self.loaded),
        );
        if loaded * 2 < len {
            return false;
        }
        let mut round = self.round;
        round.sort_unstable_by(f32::total_cmp);
        self.verdict = (round[ROUND / 2 - 1] + round[ROUND / 2]) / 2.0;
        f64::from(self.verdict) > QUEUEING
    }
}

#[cfg(test)]
mod tests;
