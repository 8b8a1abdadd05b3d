//! The one seam everything observable passes through: attempts, waits, rejections and
//! breaker transitions. Tracing and metrics attach here without touching the policies.
//!
//! With no listener set, emitting an event costs one atomic load.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use crate::breaker_state::Transition;
use crate::operation_id::OperationId;
use crate::priority::Priority;
use crate::sync::{read_std, write_std};
use crate::Rejected;

mod outcomes;

pub use outcomes::{AttemptOutcome, GiveUp};

/// Something a policy did.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An attempt is about to call the provider.
    AttemptStarted {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name (the annotated function's path, for `#[resilient]`).
        site: &'a str,
        /// 0 for the first attempt.
        attempt: u32,
    },
    /// An attempt ended.
    AttemptEnded {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// 0 for the first attempt.
        attempt: u32,
        /// How it ended.
        outcome: AttemptOutcome<'a>,
        /// From the attempt's start (its call, or its wait for a breaker probe's verdict) to
        /// its end.
        elapsed: Duration,
    },
    /// The policy is waiting before the next attempt.
    Waiting {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The attempt that failed.
        attempt: u32,
        /// How long.
        wait: Duration,
    },
    /// The operation was rejected by the runtime (bulkhead, breaker, deadline).
    Rejected {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// Why.
        rejected: &'a Rejected,
    },
    /// The operation ended on a transient failure although the error was worth retrying.
    GaveUp {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The attempt that failed last; for a hedged operation, the last attempt drawn.
        attempt: u32,
        /// Why no retry was made.
        reason: GiveUp,
        /// The wait the last error asked for (its `retry_after()`), if it asked: with
        /// [`GiveUp::RetryAfterTooLong`] or [`GiveUp::DeadlineTooClose`], the wait refused.
        asked: Option<Duration>,
    },
    /// A routed operation (`route = model in [...]`) sends its next attempt to `target`.
    Routed {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The attempt about to start (0 for the first).
        attempt: u32,
        /// The target's name: the routed key's value.
        target: &'a str,
        /// Whether the attempt is a hedge, racing attempts still in flight.
        hedge: bool,
    },
    /// A hedge started: one more attempt beside those in flight, which keep running.
    Hedged {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The hedge's attempt number.
        attempt: u32,
    },
    /// A routed operation passed over `target` without calling it: its breaker is open (or
    /// its probe is out), its gate has no slot within the deadline, or its bulkhead is full.
    Skipped {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The target's name.
        target: &'a str,
        /// What the target would have answered.
        rejected: &'a Rejected,
    },
    /// A call of a policy that orders its waiters (`priority`, `fair`) waited in turn for the
    /// rate gate's slot or a place in the bulkhead's queue, and was served. (A call that needed
    /// no wait hears none.)
    Served {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// What it waited for: `"rate"` (the rate gate's slot) or `"bulkhead"` (a place).
        wait: &'static str,
        /// Its class.
        class: Priority,
        /// From joining the waiting room to being served.
        waited: Duration,
        /// Served by aging, before a more urgent waiter (see [`Priority::AGING_PASSES`]).
        promoted: bool,
    },
    /// A gate that learns from the provider's answers (`rate = "auto"`) changed its rate by
    /// more than a tenth.
    RateLearnt {
        /// The policy's name.
        site: &'a str,
        /// The key whose gate it is, for a gate per key.
        key: Option<&'a str>,
        /// `"rate"` (requests) or `"token_rate"` (tokens).
        gate: &'static str,
        /// Units per second before (0: nothing learnt yet).
        from: f64,
        /// Units per second now.
        to: f64,
    },
    /// An adaptive bulkhead's limit moved by more than a tenth since it was last reported.
    ConcurrencyLimit {
        /// The policy's name.
        site: &'a str,
        /// The key, for a bulkhead per key.
        key: Option<&'a str>,
        /// The limit last reported (or its start).
        from: usize,
        /// The limit now.
        to: usize,
    },
    /// A breaker changed state.
    BreakerTransition {
        /// The breaker's name.
        breaker: &'a str,
        /// From which state to which.
        transition: Transition,
    },
    /// An operator forced a breaker open or reset it ([`crate::Breaker::force_open`],
    /// [`crate::Breaker::reset`]).
    BreakerOverridden {
        /// The breaker's name.
        breaker: &'a str,
        /// What the operator did.
        action: Override,
    },
    /// A configuration was refused as a whole (see [`crate::config`]): every policy keeps its
    /// tuning.
    ConfigRefused {
        /// What was read: a file, the environment.
        origin: &'a str,
        /// Every problem, one a line, each with where it is and the fix.
        message: &'a str,
    },
    /// A configuration changed this policy's tuning; new operations start with it.
    Reconfigured {
        /// The policy's name.
        site: &'a str,
    },
    /// The Redis store of shared policies stopped answering (unreachable, or slower than a
    /// policy's `shared_timeout`): until [`Event::SharedRestored`], every instance decides
    /// locally (or refuses, for a policy that fails closed). Heard once per outage.
    SharedUnavailable {
        /// The store's URL, its password hidden.
        store: &'a str,
        /// What went wrong first.
        reason: &'a str,
    },
    /// The Redis store answers again; shared breakers were re-synced with it.
    SharedRestored {
        /// The store's URL, its password hidden.
        store: &'a str,
    },
    /// While its store does not answer, a shared rate gate decides alone at its share of the
    /// rate: the declared rate and burst divided by the users the store last saw (each
    /// policy's gate of that name, in each instance; the burst at least 1), so that together
    /// they keep about the declared rate. Heard once per outage and gate, when it first
    /// decides alone; not heard by a gate that saw no other user.
    GateShare {
        /// The gate's name in the store (`resil:{gate:FN}:rate`, `resil:{gate:FN}:tokens`).
        gate: &'a str,
        /// The users the store last saw (each policy's gate of this name, in each instance),
        /// this one included.
        instances: u64,
    },
    /// A setting was ignored because of a conflict (a named breaker configured differently
    /// at two sites).
    ConfigConflict {
        /// The policy's name.
        site: &'a str,
        /// What conflicts, and what to do.
        message: &'a str,
    },
}

impl<'a> Event<'a> {
    /// The policy the event comes from, for the events that carry one (attempts, waits,
    /// rejections, give-ups, conflicts).
    pub fn site(&self) -> Option<&'a str> {
        match self {
            Event::AttemptStarted { site, .. }
            | Event::AttemptEnded { site, .. }
            | Event::Waiting { site, .. }
            | Event::Rejected { site, .. }
            | Event::GaveUp { site, .. }
            | Event::Routed { site, .. }
            | Event::Hedged { site, .. }
            | Event::Skipped { site, .. }
            | Event::Served { site, .. }
            | Event::RateLearnt { site, .. }
            | Event::ConcurrencyLimit { site, .. }
            | Event::ConfigConflict { site, .. }
            | Event::Reconfigured { site } => Some(site),
            Event::BreakerTransition { .. }
            | Event::BreakerOverridden { .. }
            | Event::ConfigRefused { .. }
            | Event::SharedUnavailable { .. }
            | Event::SharedRestored { .. }
            | Event::GateShare { .. } => None,
        }
    }
}

/// Receives [`Event`]s. Keep it fast: it runs inline on the calling task.
///
/// ```
/// use resil_runtime::events::{Event, Listener};
/// use resil_runtime::Policy;
/// use std::sync::{Arc, atomic::{AtomicU32, Ordering}};
///
/// #[derive(Debug, Default)]
/// struct CountAttempts(AtomicU32);
///
/// impl Listener for CountAttempts {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::AttemptStarted { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let counter = Arc::new(CountAttempts::default());
/// let policy = Policy::builder().listener(counter.clone()).build().unwrap();
/// let _: Result<(), resil_runtime::Rejected> = policy.run(|| async { Ok(()) }).await;
/// assert_eq!(counter.0.load(Ordering::Relaxed), 1);
/// # }
/// ```
pub trait Listener: Send + Sync + fmt::Debug + 'static {
    /// Called for every event.
    fn on_event(&self, event: &Event<'_>);
}

/// A listener kept in a `static`, as `#[resilient(listener = AUDIT)]` names one.
impl<L: Listener + ?Sized> Listener for &'static L {
    fn on_event(&self, event: &Event<'_>) {
        (**self).on_event(event);
    }
}

/// The listeners registered for every policy, and for policies by name. Each list is swapped
/// whole on registration, so sending an event clones one `Arc` and holds no lock while the
/// listeners run (a listener may register another).
#[derive(Debug, Default)]
struct Hub {
    all: RwLock<Listeners>,
    by_site: RwLock<HashMap<String, Listeners>>,
}

type Listeners = Arc<[Arc<dyn Listener>]>;

impl Listener for Hub {
    fn on_event(&self, event: &Event<'_>) {
        let all = Arc::clone(&read_std(&self.all));
        for listener in all.iter() {
            listener.on_event(event);
        }
        let Some(site) = event.site() else {
            return;
        };
        let mine = read_std(&self.by_site).get(site).cloned();
        for listener in mine.iter().flat_map(|listeners| listeners.iter()) {
            listener.on_event(event);
        }
    }
}

static HUB: OnceLock<Arc<Hub>> = OnceLock::new();
/// The hub as the listener policies send to: set at the first registration, so until then
/// emitting an event costs one atomic load.
static GLOBAL: OnceLock<Arc<dyn Listener>> = OnceLock::new();

fn hub() -> &'static Hub {
    let hub = HUB.get_or_init(Arc::default);
    GLOBAL.get_or_init(|| Arc::clone(hub) as Arc<dyn Listener>);
    hub
}

/// Adds a listener for every policy's events (every `#[resilient]` function's too), beside
/// the others and each policy's own.
///
/// ```
/// use resil_runtime::events::{self, Event, Listener};
/// use std::sync::Arc;
///
/// #[derive(Debug)]
/// struct Log;
///
/// impl Listener for Log {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::BreakerTransition { breaker, transition } = event {
///             eprintln!("{breaker}: {} -> {}", transition.from, transition.to);
///         }
///     }
/// }
///
/// events::add_global_listener(Arc::new(Log));
/// ```
pub fn add_global_listener(listener: Arc<dyn Listener>) {
    let hub = hub();
    let mut all = write_std(&hub.all);
    *all = all.iter().cloned().chain([listener]).collect();
}

/// Adds a listener for the events of the policy named `site` (for a `#[resilient]`
/// function, its path: `my_crate::billing::charge`), whenever it is called: the events that
/// carry a site (attempts, waits, rejections, give-ups). Breaker transitions go to the global
/// listeners and to the policy's own (`#[resilient(listener = …)]`).
///
/// ```
/// use resil_runtime::events::{self, Event, Listener};
/// use resil_runtime::Policy;
/// use std::sync::{atomic::{AtomicU32, Ordering}, Arc};
///
/// #[derive(Debug, Default)]
/// struct Attempts(AtomicU32);
///
/// impl Listener for Attempts {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::AttemptStarted { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let attempts = Arc::new(Attempts::default());
/// events::add_listener_for("billing::charge", attempts.clone());
/// let charge = Policy::builder().name("billing::charge").build().unwrap();
/// let other = Policy::builder().name("billing::refund").build().unwrap();
/// let _: Result<(), resil_runtime::Rejected> = charge.run(|| async { Ok(()) }).await;
/// let _: Result<(), resil_runtime::Rejected> = other.run(|| async { Ok(()) }).await;
/// assert_eq!(attempts.0.load(Ordering::Relaxed), 1);
/// # }
/// ```
pub fn add_listener_for(site: &str, listener: Arc<dyn Listener>) {
    let hub = hub();
    let mut by_site = write_std(&hub.by_site);
    let mine = by_site
        .entry(site.to_owned())
        .or_insert_with(|| Arc::new([]));
    *mine = mine.iter().cloned().chain([listener]).collect();
}

/// A policy's own listener, then the global ones.
#[derive(Debug)]
pub(crate) struct Both(pub(crate) Arc<dyn Listener>);

impl Listener for Both {
    fn on_event(&self, event: &Event<'_>) {
        self.0.on_event(event);
        if let Some(global) = GLOBAL.get() {
            global.on_event(event);
        }
    }
}

/// What an operator did to a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Override {
    /// Opened it until reset.
    ForcedOpen,
    /// Closed it.
    Reset,
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Override::ForcedOpen => "forced_open",
            Override::Reset => "reset",
        })
    }
}

/// The listener a policy emits to: its own (which passes events on to the global ones), or
/// else the global ones.
#[inline]
pub(crate) fn resolve(own: Option<&Arc<dyn Listener>>) -> Option<&Arc<dyn Listener>> {
    own.or_else(|| GLOBAL.get())
}

/// Tells `listener`, with feature `tracing` the tracing subscriber (a WARN event with
/// `breaker`, `key`, `from`, `to`), and with feature `metrics` the breaker's gauge, that a
/// breaker changed state.
pub(crate) fn breaker_transition(
    listener: Option<&std::sync::Arc<dyn Listener>>,
    breaker: BreakerName<'_>,
    transition: Transition,
) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        breaker = breaker.label,
        key = breaker.key.unwrap_or_default(),
        from = %transition.from,
        to = %transition.to,
        "circuit breaker changed state"
    );
    #[cfg(feature = "metrics")]
    crate::meter::breaker_state(breaker.label, breaker.key, transition);
    if let Some(listener) = listener {
        listener.on_event(&Event::BreakerTransition {
            breaker: breaker.name,
            transition,
        });
    }
}

/// How a breaker is named where it is reported: its full name (`label=key` for a keyed one),
/// its label and its key.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(
        dead_code,
        reason = "label and key label only tracing's events and metrics' series"
    )
)]
pub(crate) struct BreakerName<'a> {
    pub(crate) name: &'a str,
    pub(crate) label: &'a str,
    pub(crate) key: Option<&'a str>,
}

/// Tells the global listeners, with feature `tracing` the subscriber (WARN when lost, INFO
/// when back) and with feature `metrics` the gauge `resil_shared_available{store}`, that a
/// Redis store stopped answering (`reason`) or answers again (`None`).
#[cfg(feature = "redis")]
pub(crate) fn shared_store(store: &str, reason: Option<&str>) {
    #[cfg(feature = "tracing")]
    match reason {
        Some(reason) => tracing::warn!(store, reason, "shared store unavailable: deciding locally"),
        None => tracing::info!(store, "shared store available again: re-synced"),
    }
    #[cfg(feature = "metrics")]
    metrics::gauge!(crate::series::SHARED_AVAILABLE.name, "store" => store.to_owned())
        .set(if reason.is_none() { 1.0 } else { 0.0 });
    if let Some(listener) = resolve(None) {
        listener.on_event(&match reason {
            Some(reason) => Event::SharedUnavailable { store, reason },
            None => Event::SharedRestored { store },
        });
    }
}

/// A shared gate decides alone at its share of the rate (see [`Event::GateShare`]).
#[cfg(feature = "shared")]
pub(crate) fn gate_share(gate: &str, instances: u64) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        gate,
        instances,
        "shared store unavailable: the gate decides alone at its share of the rate"
    );
    if let Some(listener) = resolve(None) {
        listener.on_event(&Event::GateShare { gate, instances });
    }
}
