//! Feature `metrics`: what each operation reports to the `metrics` crate's recorder, through
//! the series [`crate::series`] names and documents.
//!
//! `fn` is the policy's name: for `#[resilient]`, the function's path.
//!
//! A policy registers its series with the recorder once, at its first call (every outcome of
//! `resil_calls_total` at once, so each starts at 0), and keeps the handles: a call then costs
//! a few atomic adds, no allocation. Install the recorder before the first call.
//!
//! A histogram or gauge no recorder stands behind (none installed, or one that drops the
//! series) is known at registration: a call then reads no clock and counts no calls in flight.
//! With metrics compiled in and no recorder, a call pays a few checks and two counters' no-op
//! adds (a counter's handle does not tell whether it records).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram, IntoF64};
use tokio::time::Instant;

use crate::breaker_state::{BreakerState, Transition};
use crate::priority::Priority;
use crate::series::{self, OUTCOMES};

/// A policy's series, registered at its first call.
pub(crate) struct Handles {
    name: Arc<str>,
    calls: [Counter; OUTCOMES.len()],
    attempts: Counter,
    retries: Counter,
    /// `None` when nothing records it.
    seconds: Option<Histogram>,
    /// Registered at the first stream a call returns: a function that never streams has no
    /// such series. `None` inside when nothing records it.
    first_item: OnceLock<Option<Histogram>>,
    /// Whether a call reads the clock: one of the histograms of durations is recorded.
    timed: AtomicBool,
    /// Only for a policy with a bulkhead all calls share, and when something records it.
    in_use: Option<Gauge>,
    /// A routed policy's `resil_route_total` by target: `sent` and `skipped`, made at the
    /// target's first attempt (for at most [`ROUTE_TARGETS`] targets). The map itself is made
    /// at the policy's first routed attempt: a policy that does not route allocates none.
    routes: OnceLock<papaya::HashMap<Box<str>, [Counter; 2], foldhash::fast::RandomState>>,
    /// `resil_wait_seconds` by wait, class and promotion, made at the policy's first wait in
    /// turn for that wait: a policy without a token gate shows no `token_rate` series.
    waits: [OnceLock<[[Histogram; 2]; 3]>; 3],
}

/// The targets whose route counters a policy keeps; a target past them is looked up in the
/// recorder at each attempt, as every series was before it was kept.
const ROUTE_TARGETS: usize = 1024;

/// What a call waits for in turn, as `resil_wait_seconds`'s `wait` label says it (and
/// `Event::Served`'s `wait`).
const WAITS: [&str; 3] = ["rate", "token_rate", "bulkhead"];

impl Handles {
    fn new(name: &Arc<str>, bulkhead: bool) -> Self {
        let label = || metrics::SharedString::from(Arc::clone(name));
        let seconds = recorded(histogram!(series::OPERATION_SECONDS.name, "fn" => label()));
        Handles {
            name: Arc::clone(name),
            calls: OUTCOMES
                .map(|outcome| counter!(series::CALLS.name, "fn" => label(), "outcome" => outcome)),
            attempts: counter!(series::ATTEMPTS.name, "fn" => label()),
            retries: counter!(series::RETRIES.name, "fn" => label()),
            timed: AtomicBool::new(seconds.is_some()),
            seconds,
            first_item: OnceLock::new(),
            in_use: bulkhead
                .then(|| gauge!(series::BULKHEAD_IN_USE.name, "fn" => label()))
                .filter(|gauge| {
                    // Adding nothing to a gauge changes nothing, and reads the value only when a
                    // recorder stands behind it.
                    let read = Cell::new(false);
                    gauge.increment(Probe(&read));
                    read.get()
                }),
            routes: OnceLock::new(),
            waits: Default::default(),
        }
    }

    fn first_item(&self) -> Option<&Histogram> {
        let first_item = self.first_item.get_or_init(|| {
            let histogram = recorded(histogram!(series::FIRST_ITEM_SECONDS.name, "fn" => metrics::SharedString::from(Arc::clone(&self.name))));
            if histogram.is_some() {
                self.timed.store(true, Ordering::Relaxed);
            }
            histogram
        });
        first_item.as_ref()
    }

    /// Sets the bulkhead gauge to what `in_flight` counts now.
    #[inline]
    fn in_use(&self, in_flight: Option<&dyn InFlight>) {
        if let (Some(in_flight), Some(gauge)) = (in_flight, &self.in_use) {
            gauge.set(in_flight.in_flight() as f64);
        }
    }
}

/// `histogram`, if a recorder stands behind it: a handle hides whether it records, but
/// reads the value it is given only when it does, and recording none of it records nothing.
fn recorded(histogram: Histogram) -> Option<Histogram> {
    let read = Cell::new(false);
    histogram.record_many(Probe(&read), 0);
    read.get().then_some(histogram)
}

/// A value that tells when it is read.
struct Probe<'a>(&'a Cell<bool>);

impl IntoF64 for Probe<'_> {
    fn into_f64(self) -> f64 {
        self.0.set(true);
        0.0
    }
}

/// Where a policy keeps its handles, registered on first use: its name, and whether it has a
/// bulkhead all calls share.
pub(crate) struct Slot {
    name: Arc<str>,
    bulkhead: bool,
    handles: OnceLock<Handles>,
}

impl Slot {
    pub(crate) fn new(name: Arc<str>, bulkhead: bool) -> Self {
        Slot {
            name,
            bulkhead,
            handles: OnceLock::new(),
        }
    }

    #[inline]
    fn handles(&self) -> &Handles {
        (self.handles).get_or_init(|| Handles::new(&self.name, self.bulkhead))
    }

    #[inline]
    pub(crate) fn attempt(&self) {
        self.handles().attempts.increment(1);
    }

    #[inline]
    pub(crate) fn retry(&self) {
        self.handles().retries.increment(1);
    }

    /// A routed attempt sent to `target`, or `target` skipped.
    pub(crate) fn routed(&self, target: &str, sent: bool) {
        let handles = self.handles();
        let outcome = usize::from(!sent);
        let routes = handles.routes.get_or_init(papaya::HashMap::default).pin();
        if let Some(counters) = routes.get(target) {
            counters[outcome].increment(1);
            return;
        }
        let label = || metrics::SharedString::from(Arc::clone(&self.name));
        let counters = ["sent", "skipped"].map(|name| {
            counter!(series::ROUTE.name, "fn" => label(), "target" => target.to_owned(), "outcome" => name)
        });
        counters[outcome].increment(1);
        if routes.len() < ROUTE_TARGETS {
            routes.insert(target.into(), counters);
        }
    }
}

impl Slot {
    /// A call of `class` waited in turn for `waited`, and was `promoted` by aging or not.
    pub(crate) fn waited(
        &self,
        wait: &'static str,
        class: Priority,
        waited: Duration,
        promoted: bool,
    ) {
        let index = WAITS.iter().position(|known| *known == wait).unwrap_or(0);
        let waits = self.handles().waits[index].get_or_init(|| {
            let label = || metrics::SharedString::from(Arc::clone(&self.name));
            [Priority::Critical, Priority::Default, Priority::Batch].map(|class| {
                ["false", "true"].map(|promoted| {
                    histogram!(series::WAIT_SECONDS.name, "fn" => label(), "wait" => WAITS[index], "class" => class.as_str(), "promoted" => promoted)
                })
            })
        });
        let class = match class {
            Priority::Critical => 0,
            Priority::Default => 1,
            Priority::Batch => 2,
        };
        waits[class][usize::from(promoted)].record(waited.as_secs_f64());
    }
}

/// What the bulkhead gauge reads: the calls in flight, counted by whoever holds them.
pub(crate) trait InFlight: Sync {
    fn in_flight(&self) -> usize;
}

/// One operation's report, sent when the operation is over.
pub(crate) struct Meter<'p> {
    handles: &'p Handles,
    bulkhead: Option<&'p dyn InFlight>,
    /// Read only when a duration is recorded.
    started: Option<Instant>,
    /// Where in [`OUTCOMES`] the outcome is, once the operation ended (`None` inside for an
    /// outcome not listed there).
    outcome: Option<Option<u8>>,
    fallback: bool,
    streamed: bool,
}

impl<'p> Meter<'p> {
    #[inline]
    pub(crate) fn start(slot: &'p Slot, bulkhead: Option<&'p dyn InFlight>) -> Self {
        let handles = slot.handles();
        handles.in_use(bulkhead);
        Meter {
            handles,
            bulkhead,
            started: handles.timed.load(Ordering::Relaxed).then(Instant::now),
            outcome: None,
            fallback: false,
            streamed: false,
        }
    }

    /// Found here rather than when the meter drops: an outcome named by a literal is found
    /// where it is named, as the code is compiled.
    #[inline(always)]
    pub(crate) fn ended(&mut self, outcome: &'static str) {
        let at = OUTCOMES.iter().position(|known| *known == outcome);
        self.outcome = Some(at.and_then(|at| u8::try_from(at).ok()));
    }

    pub(crate) fn fell_back(&mut self) {
        self.fallback = true;
    }

    pub(crate) fn committed(&mut self) {
        self.streamed = true;
    }
}

/// Sent when the execution ends, after its bulkhead permit went back.
impl Drop for Meter<'_> {
    fn drop(&mut self) {
        let handles = self.handles;
        handles.in_use(self.bulkhead);
        let Some(outcome) = self.outcome else {
            return;
        };
        let outcome = match self.fallback {
            true => OUTCOMES.iter().position(|known| *known == "fallback"),
            false => outcome.map(usize::from),
        };
        if let Some(calls) = outcome.and_then(|at| handles.calls.get(at)) {
            calls.increment(1);
        }
        let Some(started) = self.started else {
            // Untimed, a first stream still registers its histogram: if that one is recorded,
            // the calls after this one are timed.
            if self.streamed {
                handles.first_item();
            }
            return;
        };
        let seconds = started.elapsed().as_secs_f64();
        if let Some(histogram) = &handles.seconds {
            histogram.record(seconds);
        }
        if let Some(histogram) = self.streamed.then(|| handles.first_item()).flatten() {
            histogram.record(seconds);
        }
    }
}

/// Transitions are rare: the gauge is looked up each time.
pub(crate) fn breaker_state(label: &str, key: Option<&str>, transition: Transition) {
    let state = match transition.to {
        BreakerState::Closed => 0.0,
        BreakerState::HalfOpen => 1.0,
        BreakerState::Open => 2.0,
    };
    let key = key.unwrap_or_default();
    gauge!(series::BREAKER_STATE.name, "breaker" => label.to_owned(), "key" => key.to_owned())
        .set(state);
}

/// An adaptive bulkhead's limit moved: rarer than calls (at most once per window of
/// successes), so the gauge is looked up each time.
pub(crate) fn concurrency_limit(name: &str, key: Option<&str>, limit: usize) {
    let key = key.unwrap_or_default();
    gauge!(series::CONCURRENCY_LIMIT.name, "fn" => name.to_owned(), "key" => key.to_owned())
        .set(limit as f64);
}

/// A learning gate's new rate: rare (a change of more than a tenth), looked up each time.
pub(crate) fn rate_learnt(name: &str, key: Option<&str>, gate: &'static str, per_second: f64) {
    let key = key.unwrap_or_default().to_owned();
    gauge!(series::RATE_LEARNT.name, "fn" => name.to_owned(), "key" => key, "gate" => gate)
        .set(per_second);
}

/// A race's hedges: `won` (0 or 1) and `lost`, counted when the race ends.
pub(crate) fn hedged(name: &str, won: u64, lost: u64) {
    for (outcome, count) in [("won", won), ("lost", lost)] {
        if count > 0 {
            counter!(series::HEDGES.name, "fn" => name.to_owned(), "outcome" => outcome)
                .increment(count);
        }
    }
}
