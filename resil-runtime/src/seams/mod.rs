//! Feature `shared`: what a breaker and a rate gate need from a store that many instances of a
//! service share, as one public trait, [`SharedStore`], that the primitives hold and the
//! execution calls, and that the layers above implement (Redis and the in-memory store in
//! `crate::shared`; a team's own store outside the crate). Everything a store sees is plain
//! data or an opaque handle: names, durations, integers, and [`BreakerNews`] / [`GateNews`] to
//! deliver peers' news, through which a store can tell a breaker or a gate what happened
//! elsewhere and nothing more.
//!
//! resil bounds every answer it waits for by the policy's `shared_timeout` itself, and decides
//! locally (fails open, unless `shared_fail = "closed"`) when a store errs, is late or says it
//! is not [usable](SharedStore::usable).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::Rejected;

mod alone;
mod kept;
mod keys;
mod links;
mod news;
mod owed;
mod share;
mod slots;
mod window;

pub(crate) use alone::Alone;
pub(crate) use kept::keep_stretch;
#[cfg(any(test, feature = "conformance"))]
pub(crate) use keys::breaker_id;
#[cfg(test)]
pub(crate) use keys::gate_key;
pub use links::{BreakerLink, GateLink};
pub(crate) use links::{Linked, Sharing};
pub use news::{Announcement, BreakerNews, Change, GateNews};
#[cfg(any(test, feature = "redis", feature = "conformance"))]
pub(crate) use share::SEEN_FOR;
pub use slots::{Ask, Reservation, Reserved, Slot};
pub(crate) use slots::{GateAsk, RemoteSlot, RemoteSlots};
pub use window::{WindowBatch, WindowSums};

/// A future a store hands back: boxed, since it is a trait's, and rare (a probe, or a shared
/// gate's slot, which is a round trip anyway).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The largest number of µs handed to a store: far from where Lua's doubles lose units.
pub(crate) const MAX_MICROS: u64 = 1 << 50;

/// A duration in whole µs as a store takes it: saturating, and at most [`MAX_MICROS`].
pub(crate) fn whole_micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_MICROS)
}

/// A store shared by many instances of a service: where shared breakers announce their
/// transitions and take the half-open probe's lock, and where shared rate gates reserve,
/// refund and hold slots. Redis ([`Redis`](crate::shared::Redis), feature `redis`) and the
/// in-memory store ([`InMemory`](crate::shared::InMemory)) implement it; a team that keeps
/// its state elsewhere (Postgres, etcd, DynamoDB…) implements it too, and hands it to
/// [`PolicyBuilder::shared_in`](crate::PolicyBuilder::shared_in).
///
/// # What resil does, whatever the store
///
/// - **Bounds.** resil waits for [`acquire_probe`](Self::acquire_probe) and
///   [`reserve`](Self::reserve) at most the policy's `shared_timeout` (50 ms unless set), then
///   drops the future and calls [`timed_out`](Self::timed_out). The other methods return at
///   once: what they send, a store sends in the background, and bounds itself.
/// - **Fail-open.** An answer that is [`Unavailable`], or late, makes the local breaker and
///   gates decide (they mirror every call, so they decide from what this instance did), or,
///   with `shared_fail = "closed"`, refuse the call ([`Rejected::SharedUnavailable`]). No
///   store error reaches a caller otherwise.
/// - **`usable()`.** While it is false, resil asks nothing (no wait for a timeout): breakers'
///   transitions are kept as [untold](BreakerNews::untold), gates decide locally.
/// - **Wrong answers.** A grant with fewer slots than asks counts as no answer; a grant whose
///   wait exceeds [`Reservation::limit`] counts as a refusal (its slots are refunded); a
///   slot whose schedule runs further [ahead](Slot::ahead) than the grant's wait plus the
///   ask's [tolerance](Ask::tolerance) is taken to run that far: a store's mistake never
///   holds a call past its deadline, nor the local gate that decides when the store is down.
/// - **No lock held.** resil calls no method with a lock of its own held: a store may deliver
///   news through [`BreakerNews`] and [`GateNews`] from inside any method, and from any thread.
///
/// # What a store must keep
///
/// Each method's documentation states its semantics. Across them: what one instance writes,
/// every other instance reads (one state, however many processes); news a store learns of
/// (an opening, a closing, a throttle) reaches every *other* instance's handles of that name
/// ([`listen_breaker`](Self::listen_breaker), [`listen_gate`](Self::listen_gate)), not the
/// instance that caused it; and when the store answers again after an outage, it re-syncs
/// (see [`BreakerNews::untold`] and [`GateNews::store_returned`]).
///
/// # Stability
///
/// Methods added to this trait later come with a default implementation that means "not
/// shared: decide locally" (as [`usable`](Self::usable) and [`timed_out`](Self::timed_out)
/// have), so a store written today keeps compiling and keeps its meaning; the structs and
/// enums it sees are `#[non_exhaustive]` or opaque for the same reason.
///
/// # Example
///
/// A store that counts the reservations and keeps the state in an [`InMemory`] store (a real
/// one would talk to its server instead):
///
/// ```
/// use resil_runtime::shared::{
///     Announcement, BreakerLink, BreakerNews, GateLink, GateNews, InMemory, Probe, Reservation,
///     Reserved, SharedStore, Slot, StoreFuture, Unavailable,
/// };
/// use resil_runtime::Policy;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// struct Counted {
///     inner: InMemory,
///     reservations: AtomicU64,
/// }
///
/// impl SharedStore for Counted {
///     fn usable(&self) -> bool {
///         self.inner.usable()
///     }
///     fn listen_breaker(&self, breaker: BreakerNews) {
///         self.inner.listen_breaker(breaker)
///     }
///     fn listen_gate(&self, gate: GateNews) {
///         self.inner.listen_gate(gate)
///     }
///     fn announce(&self, announcement: Announcement) {
///         self.inner.announce(announcement)
///     }
///     fn acquire_probe<'a>(
///         &'a self,
///         breaker: &'a BreakerLink,
///         limit: Duration,
///     ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
///         self.inner.acquire_probe(breaker, limit)
///     }
///     fn release_probe(&self, breaker: &BreakerLink) {
///         self.inner.release_probe(breaker)
///     }
///     fn reserve<'a>(
///         &'a self,
///         reservation: &'a Reservation,
///     ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
///         self.reservations.fetch_add(1, Ordering::Relaxed);
///         self.inner.reserve(reservation)
///     }
///     fn refund(&self, gate: &GateLink, slot: Slot) {
///         self.inner.refund(gate, slot)
///     }
///     fn hold(&self, gate: &GateLink, wait: Duration) {
///         self.inner.hold(gate, wait)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(Counted { inner: InMemory::new(), reservations: AtomicU64::new(0) });
/// let policy = Policy::builder()
///     .name("llm::complete")
///     .rate(10, Duration::from_secs(1), 10)
///     .shared_in(Arc::clone(&store))
///     .build()?;
/// policy.run(|| async { Ok::<_, resil_runtime::Rejected>(()) }).await?;
/// assert_eq!(store.reservations.load(Ordering::Relaxed), 1);
/// # Ok(()) }
/// ```
///
/// [`InMemory`]: crate::shared::InMemory
pub trait SharedStore: Send + Sync {
    /// Whether to ask the store at all now: false while it is known to be down, so that the
    /// local state decides at once rather than after a timeout. Called before every
    /// operation, so it must be cheap (an atomic load). Unless implemented: always true.
    fn usable(&self) -> bool {
        true
    }

    /// Lists a shared breaker of this instance: news of its name that other instances cause
    /// (an opening, a closing) is delivered to it through the handle, and an opening in force
    /// when it is listed should be delivered at once. Several handles may share a name; a
    /// handle whose breaker is gone says so ([`BreakerNews::is_gone`]) and may be dropped.
    fn listen_breaker(&self, breaker: BreakerNews);

    /// Lists a shared rate gate of this instance: other instances' throttles of its name
    /// ([`hold`](Self::hold)) are delivered to it, and so is the store's return after an
    /// outage ([`GateNews::store_returned`]).
    fn listen_gate(&self, gate: GateNews);

    /// A breaker of this instance opened or closed by its own calls: record it, in the
    /// background (no call waits on it), and deliver it to every other instance's breakers of
    /// that name. An opening is recorded for [`Change::Opened`]'s duration (what is left of
    /// the cooldown) and ends any probe lock this instance holds; a closing removes the
    /// opening and that lock. Call [`Announcement::published`] once the store has recorded
    /// it; one never published is told again at the re-sync ([`BreakerNews::untold`]).
    fn announce(&self, announcement: Announcement);

    /// Whether this instance sends the half-open probe of `breaker`, once its cooldown is
    /// over: [`Probe::Granted`] takes the breaker's lock, held by one instance at a time
    /// across all of them, and expiring after `limit` unless released; while another
    /// instance holds it or an opening is recorded, [`Probe::Elsewhere`] says how long that
    /// is in force. Atomic: two instances asking at once never both get it.
    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>>;

    /// The probe this instance holds the lock for ended with no verdict: release the lock
    /// (only if this instance holds it), so that another instance may probe at once.
    fn release_probe(&self, breaker: &BreakerLink);

    /// Reserves an attempt's slots in one or two gates at once, atomically: every gate or
    /// none. Each gate keeps a GCRA schedule, its theoretical arrival time `tat` (none: now):
    /// for each [`Ask`], `next = max(tat, now + alone) + interval × cost` (its
    /// [`alone`](Ask::alone), zero unless this instance granted slots alone), and the attempt
    /// waits `next − tolerance − now` (never below zero). When a [`Reservation::limit`] is set
    /// and a gate's wait exceeds it, nothing is reserved: [`Reserved::refused`] with the
    /// longest such wait. Otherwise every gate's `tat` becomes its `next`, and [`Reserved::granted`]
    /// carries the longest wait and one [`Slot`] per ask, in the order of
    /// [`Reservation::asks`]. So the instances together never reserve faster than the
    /// declared rate, `burst` at once.
    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>>;

    /// Gives `slot` back, reserved but not used, unless a [`hold`](Self::hold) came after it
    /// (its [`Slot::epoch`]): while the gate's `tat` is still [`Slot::end`] (the latest slot
    /// promised), it returns to [`Slot::from`], then past the slots given back earlier that it
    /// reaches (one whose end is the new `tat`, and so on); a slot given back while later ones
    /// are promised is kept for that until it is past (adjoining slots as one stretch; a few
    /// hundred stretches at least, the one nearest now dropped first). A queue of callers
    /// that all give up, in any order, so gives the gate back.
    fn refund(&self, gate: &GateLink, slot: Slot);

    /// A provider throttled a call of `gate` and asked to wait `wait`: no slot of it before
    /// `now + wait` on any instance (a hold that ends sooner than one in force changes
    /// nothing), the steady rate after it, the slots promised so far revoked (the gate's
    /// epoch moves on, so their refunds do nothing), and every other gate of that name told
    /// ([`GateNews::throttled_elsewhere`]): every other instance's, and this instance's own
    /// others (two policies of one process, or a policy built twice, share a gate's name and
    /// the store's handle), all but `gate` itself ([`GateNews::is_of`]), which held already.
    fn hold(&self, gate: &GateLink, wait: Duration);

    /// Adds `batch`, this instance's calls to the shared failure-rate or slow-call breaker
    /// `breaker` since its last batch, to the breaker's window in time, and answers the
    /// window's sums over every instance, the batch included. Atomic: the batch is added
    /// whole and the sums read after it, in one step. The window is kept on the store's
    /// clock: a batch goes to bucket `now / width` ([`WindowBatch::width`]), the sums are
    /// over the latest [`buckets`](WindowBatch::buckets) buckets (older ones age out), and the
    /// store may forget the window [`expiry`](WindowBatch::expiry) after its last batch. An
    /// opening or a closing of the breaker ([`announce`](Self::announce)) empties its window.
    ///
    /// resil sends at most one batch per breaker at a time, one every 100 ms at most while
    /// calls are made, none while idle, and waits for the answer at most `shared_timeout`. A
    /// batch whose answer is [`Unavailable`], late, or sums that cannot be (more bad calls
    /// than calls, fewer calls or bad calls than the batch, more than 2^53 calls) is dropped,
    /// not sent again (the store may have counted it), and the instance judges its own window
    /// while the store does not answer. So `breaker_min_calls` counts the service's calls, not one instance's.
    ///
    /// Unless implemented: `None`, the store keeps no windows, and each instance judges its
    /// own window (resil asks no more for that breaker).
    fn add_to_window<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        batch: WindowBatch,
    ) -> Option<StoreFuture<'a, Result<WindowSums, Unavailable>>> {
        let _ = (breaker, batch);
        None
    }

    /// resil gave up waiting for an answer after `shared_timeout`: a store that tracks its
    /// own health may take it as a sign that it is down. Unless implemented: nothing.
    fn timed_out(&self) {}
}

/// The store could not answer (down, refusing, or erring): the local state decides.
///
/// ```
/// use resil_runtime::shared::Unavailable;
///
/// let answer: Result<(), Unavailable> = Err(Unavailable);
/// assert!(answer.is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unavailable;

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the shared store did not answer: deciding locally")
    }
}

impl std::error::Error for Unavailable {}

/// What a store said about the half-open probe's lock.
///
/// ```
/// use resil_runtime::shared::Probe;
/// use std::time::Duration;
///
/// let answer = Probe::Elsewhere(Duration::from_millis(200));
/// assert_ne!(answer, Probe::Granted);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// This instance holds the lock and probes.
    Granted,
    /// Another instance's opening or probe is in force for this long: reject meanwhile.
    Elsewhere(Duration),
}

/// What the store said about the half-open probe, as the execution reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeAnswer {
    /// This instance probes.
    Granted,
    /// A peer's opening or probe is in force for this long: reject meanwhile.
    Peer(Duration),
    /// The store did not answer in time.
    Unavailable,
}

/// Reserves an attempt's slots in its shared gates, through their store (both gates of a
/// policy share one), for at most the policy's `shared_timeout`.
pub(crate) fn reserve(
    gates: [Option<GateAsk>; 2],
    limit: Option<Duration>,
) -> StoreFuture<'static, SharedSlots> {
    let Some(sharing) = gates
        .iter()
        .flatten()
        .next()
        .map(|ask| ask.gate.sharing.clone())
    else {
        return Box::pin(std::future::ready(SharedSlots::Granted(Granted {
            wait: Duration::ZERO,
            slots: [None, None],
            waits: [Duration::ZERO; 2],
        })));
    };
    let mut asking = Asking {
        reservation: Reservation::new(gates, limit),
        answered: None,
    };
    Box::pin(async move {
        let reservation = &asking.reservation;
        for ask in reservation.asks() {
            ask.gate().pay_owed();
        }
        let answer = sharing.bounded(sharing.store.reserve(reservation)).await;
        let slots = match answer {
            Some(reserved) => reservation.slots(reserved),
            None => SharedSlots::Unavailable,
        };
        asking.heard(&slots);
        slots
    })
}

/// A reservation on its way to the store. What it claimed when it was made rides on the
/// next one unless the store took it: the charge of the slots granted alone unless the
/// store granted, the heartbeat unless the store answered (a refusal counts it too); and so
/// when the attempt is dropped before the answer comes.
struct Asking {
    reservation: Reservation,
    /// The store's answer: granted (`true`) or refused (`false`); `None`: none came.
    answered: Option<bool>,
}

impl Asking {
    /// What the store answered.
    fn heard(&mut self, slots: &SharedSlots) {
        self.answered = match slots {
            SharedSlots::Granted(_) => Some(true),
            SharedSlots::Refused(_) => Some(false),
            SharedSlots::Unavailable => None,
        };
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if self.answered != Some(true) {
            self.reservation.not_granted(self.answered.is_some());
        }
    }
}

/// What the shared gates said about an attempt.
#[derive(Debug)]
pub(crate) enum SharedSlots {
    /// Reserved in the store.
    Granted(Granted),
    /// The store's gate would make the attempt wait past its deadline: nothing reserved.
    Refused(Rejected),
    /// The store did not answer in time: the local gates decide (or, failing closed, refuse).
    Unavailable,
}

/// Slots the store reserved: the wait until the later of them, and each gate's (the rate
/// gate's, then the token gate's), with the wait until each (the schedule after it less the
/// gate's tolerance; zero for a gate not asked).
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) wait: Duration,
    pub(crate) slots: RemoteSlots,
    pub(crate) waits: [Duration; 2],
}
