//! Feature `metrics`: what each operation reports to the `metrics` crate's recorder, through
//! the series [`crate::series`] names and documents.
//!
//! `fn` is the policy's name: for `#[resilient]`, the function's path.
//!
//! A policy registers its series with the recorder once, at its first call (every outcome of
//! `resil_calls_total` at once, so each starts at 0), and keeps the handles: a call then costs
//! a few atomic adds, no allocation. Install the recorder before the first call.

use std::sync::{Arc, OnceLock};

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};
use tokio::time::Instant;

use crate::breaker_state::{BreakerState, Transition};
use crate::series::{self, OUTCOMES};

/// A policy's series, registered at its first call.
pub(crate) struct Handles {
    calls: [Counter; OUTCOMES.len()],
    attempts: Counter,
    retries: Counter,
    seconds: Histogram,
    /// Registered at the first stream a call returns: a function that never streams has no
    /// such series.
    first_item: OnceLock<Histogram>,
    /// Only for a policy with a bulkhead all calls share.
    in_use: Option<Gauge>,
}

impl Handles {
    fn new(name: &Arc<str>, bulkhead: bool) -> Self {
        let name = || metrics::SharedString::from(Arc::clone(name));
        Handles {
            calls: OUTCOMES
                .map(|outcome| counter!(series::CALLS.name, "fn" => name(), "outcome" => outcome)),
            attempts: counter!(series::ATTEMPTS.name, "fn" => name()),
            retries: counter!(series::RETRIES.name, "fn" => name()),
            seconds: histogram!(series::OPERATION_SECONDS.name, "fn" => name()),
            first_item: OnceLock::new(),
            in_use: bulkhead.then(|| gauge!(series::BULKHEAD_IN_USE.name, "fn" => name())),
        }
    }

    fn first_item(&self, name: &Arc<str>) -> &Histogram {
        self.first_item.get_or_init(|| {
            histogram!(series::FIRST_ITEM_SECONDS.name, "fn" => metrics::SharedString::from(Arc::clone(name)))
        })
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

    fn handles(&self) -> &Handles {
        (self.handles).get_or_init(|| Handles::new(&self.name, self.bulkhead))
    }

    /// Sets the bulkhead gauge to what `in_flight` counts now.
    fn in_use(&self, in_flight: Option<&dyn InFlight>) {
        if let (Some(in_flight), Some(gauge)) = (in_flight, &self.handles().in_use) {
            gauge.set(in_flight.in_flight() as f64);
        }
    }

    pub(crate) fn attempt(&self) {
        self.handles().attempts.increment(1);
    }

    pub(crate) fn retry(&self) {
        self.handles().retries.increment(1);
    }
}

/// What the bulkhead gauge reads: the calls in flight, counted by whoever holds them.
pub(crate) trait InFlight: Sync {
    fn in_flight(&self) -> usize;
}

/// One operation's report, sent when the operation is over.
pub(crate) struct Meter<'p> {
    slot: &'p Slot,
    bulkhead: Option<&'p dyn InFlight>,
    started: Instant,
    outcome: Option<&'static str>,
    fallback: bool,
    streamed: bool,
}

impl<'p> Meter<'p> {
    pub(crate) fn start(slot: &'p Slot, bulkhead: Option<&'p dyn InFlight>) -> Self {
        slot.in_use(bulkhead);
        Meter {
            slot,
            bulkhead,
            started: Instant::now(),
            outcome: None,
            fallback: false,
            streamed: false,
        }
    }

    pub(crate) fn ended(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
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
        self.slot.in_use(self.bulkhead);
        let Some(outcome) = self.outcome else {
            return;
        };
        let outcome = if self.fallback { "fallback" } else { outcome };
        let handles = self.slot.handles();
        if let Some(at) = OUTCOMES.iter().position(|known| *known == outcome) {
            handles.calls[at].increment(1);
        }
        let seconds = self.started.elapsed().as_secs_f64();
        handles.seconds.record(seconds);
        if self.streamed {
            handles.first_item(&self.slot.name).record(seconds);
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

/// A routed attempt sent to `target`, or `target` skipped: looked up each time, as only
/// routed calls report it.
pub(crate) fn routed(name: &str, target: &str, outcome: &'static str) {
    counter!(series::ROUTE.name, "fn" => name.to_owned(), "target" => target.to_owned(), "outcome" => outcome)
        .increment(1);
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
