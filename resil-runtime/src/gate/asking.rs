//! A shared gate's turn to ask its store, for a gate that orders its waiters by
//! [`Priority`](crate::Priority): one caller of the instance asks at a time, the most urgent
//! first, and holds the turn from its question until the slot granted comes.
//!
//! Asked at arrival, the store books each caller's slot in the order callers came: 100 batch
//! calls queued by one instance would book the next 10 s of a `10/s` gate before a critical
//! call of any instance could ask. Asked in turn, the store holds at most one slot booked ahead
//! for each instance, for its most urgent caller: a critical call waits for the slots of the
//! callers asking now, one per instance, and its own.
//!
//! The turn is a bulkhead of one place whose queue is served in turn (see
//! [`Bulkhead::ordered`]). It is let go for any wait that is not the slot's own (a throttle's
//! hold; a learning gate's call, which keeps its slots until it is answered). A holder left
//! unpolled (a `select!` branch never polled again) would hold every caller of the instance:
//! its turn is a lease, until the slot granted is due and [`SLOT_MISSED`] (or, while it asks,
//! the store's timeout and as much again), after which the waiters give the place to the next
//! and the holder's comes back forgotten; the holder, polled again, asks again in turn. After a
//! question the store answered late, the local gate decides for as long again (asked in turn,
//! each caller would wait a whole timeout), and what it grants alone is taken again from the
//! store once it answers in time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::{nanos, SLOT_MISSED};
use crate::bulkhead::{Bulkhead, BulkheadPermit};
use crate::deadline::{later, slept};
use crate::priority::{Place, Served};
use crate::Rejected;

/// The turn to ask a shared gate's store (see the module's docs).
#[derive(Debug)]
pub(crate) struct Asking {
    turn: Arc<Bulkhead>,
    /// How long a question may take: the store's timeout.
    question: Duration,
    /// When the holder's lease ends, in ns from `origin` (0: nobody holds it).
    lease: AtomicU64,
    /// When the slot the store granted the holder is due, in ns from `origin` (0: none yet).
    due: AtomicU64,
    /// The units the holder asks for: 1 at a rate gate, its cost at a token gate.
    units: AtomicU64,
    /// Until when the store is taken for late, in ns from `origin`: after a question it
    /// answered later than `question`, the local gate decides for as long again, rather than
    /// each caller hold the turn for a whole `question` (a store that answers late is not
    /// known to be down).
    late: AtomicU64,
    origin: Instant,
}

impl Asking {
    /// The turn for a gate whose waiters are served round-robin across `lanes` `fair` values,
    /// whose store answers within `question`.
    pub(crate) fn new(lanes: usize, question: Duration) -> Self {
        let turn = Bulkhead::new(1).expect("one place is a valid limit");
        Asking {
            turn: Arc::new(turn.queued(usize::MAX).ordered(lanes)),
            question,
            lease: AtomicU64::new(0),
            due: AtomicU64::new(0),
            units: AtomicU64::new(0),
            late: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    /// The same turn, nobody holding it, for a key's gate.
    pub(crate) fn fresh(&self, key: &Arc<str>) -> Self {
        Asking {
            turn: Arc::new(self.turn.fresh(key)),
            question: self.question,
            lease: AtomicU64::new(0),
            due: AtomicU64::new(0),
            units: AtomicU64::new(0),
            late: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    /// The wait for the turn, in the turn of `place`, to ask for `units`.
    pub(crate) fn wait(self: &Arc<Self>, place: Place, units: u64) -> AskWait {
        AskWait {
            acquire: Box::pin(Arc::clone(&self.turn).acquire_in_turn_owned(place)),
            asking: Arc::clone(self),
            sleep: None,
            units,
        }
    }

    /// The least a newcomer at `place` waits for its `units`, for a gate of `interval` (ns)
    /// and `burst`, if each caller before it takes at least `each` units: from the holder's
    /// slot (or now, if it has none yet), the holder's units and theirs, less the burst's
    /// credit beside its own units (a GCRA passes `units` once the schedule is within `burst -
    /// units` of now; the holder's slot granted, the schedule runs at least its units past
    /// it). A bound from below (callers before it may cost more; the store may have granted
    /// other instances more since), so that a call the store could serve in time is never
    /// refused for it.
    pub(crate) fn least_wait(
        &self,
        place: Place,
        (interval, burst): (u64, u64),
        (units, each): (u64, u64),
    ) -> Duration {
        let now = Instant::now();
        let ahead = u64::try_from(self.turn.ahead_of(place)).unwrap_or(u64::MAX);
        let held = match self.lease.load(Ordering::Acquire) {
            0 => 0,
            _ => self.units.load(Ordering::Acquire),
        };
        let from = match self.due.load(Ordering::Acquire) {
            0 => now,
            due => self.at(due),
        };
        let taken = ahead.saturating_mul(each).saturating_add(held);
        let slots = interval.saturating_mul(taken);
        let credit = interval.saturating_mul(burst.saturating_sub(units));
        let past = Duration::from_nanos(slots.saturating_sub(credit));
        later(from, past).saturating_duration_since(now)
    }

    /// The store did not answer a question within `question`.
    pub(crate) fn answered_late(&self) {
        let until = self.offset(later(Instant::now(), self.question));
        self.late.fetch_max(until, Ordering::AcqRel);
    }

    /// Whether the store is taken for late now (see [`Asking::answered_late`]).
    pub(crate) fn is_late(&self, now: Instant) -> bool {
        self.late.load(Ordering::Acquire) > self.offset(now)
    }

    fn offset(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.origin)).max(1)
    }

    fn at(&self, offset: u64) -> Instant {
        later(self.origin, Duration::from_nanos(offset))
    }

    /// The holder's lease ended at `lease`: its place goes to the next now (the holder's
    /// permit, when let go, frees none).
    fn take_over(&self, lease: u64) {
        let over = (self.lease).compare_exchange(lease, 0, Ordering::AcqRel, Ordering::Acquire);
        if over.is_ok() {
            self.turn.forfeit();
        }
    }
}

/// The wait for the bulkhead's one place.
type Acquire = Pin<
    Box<dyn Future<Output = Result<(BulkheadPermit<'static>, Option<Served>), Rejected>> + Send>,
>;

/// A caller's wait for the turn to ask.
pub(crate) struct AskWait {
    acquire: Acquire,
    asking: Arc<Asking>,
    sleep: Option<Pin<Box<Sleep>>>,
    units: u64,
}

impl Future for AskWait {
    type Output = Result<AskTurn, Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if let Poll::Ready(taken) = this.acquire.as_mut().poll(cx) {
                let asking = Arc::clone(&this.asking);
                return Poll::Ready(taken.map(|(permit, served)| {
                    let mut turn = AskTurn {
                        permit: Some(permit),
                        asking,
                        lease: 0,
                        served,
                    };
                    turn.asks(this.units);
                    turn
                }));
            }
            // A lease of 0 may be read between a holder's taking its place and writing its
            // lease: looked at again a question later, in case that holder is left unpolled.
            let lease = this.asking.lease.load(Ordering::Acquire);
            let at = match lease {
                0 => later(Instant::now(), this.asking.question.saturating_mul(2)),
                lease => this.asking.at(lease),
            };
            if !slept(&mut this.sleep, at, cx) {
                return Poll::Pending;
            }
            if lease != 0 {
                this.asking.take_over(lease);
            }
        }
    }
}

impl std::fmt::Debug for AskWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AskWait").finish_non_exhaustive()
    }
}

/// The turn to ask, held: let go when dropped.
#[derive(Debug)]
pub(crate) struct AskTurn {
    permit: Option<BulkheadPermit<'static>>,
    asking: Arc<Asking>,
    /// Its lease, as written in `asking` (0: not written yet).
    lease: u64,
    /// How its caller waited for it, if it did: told once the store grants its slot.
    served: Option<Served>,
}

impl AskTurn {
    /// Its caller asks the store now for `units`: the turn is held for the question, twice
    /// the store's timeout.
    pub(crate) fn asks(&mut self, units: u64) {
        let until = later(Instant::now(), self.asking.question.saturating_mul(2));
        self.asking.units.store(units, Ordering::Release);
        self.renew(until, 0);
    }

    /// How its caller waited for it, once.
    pub(crate) fn take_served(&mut self) -> Option<Served> {
        self.served.take()
    }

    /// Whether the turn is still this holder's: not taken over by the waiters when its lease
    /// ended.
    pub(crate) fn is_current(&self) -> bool {
        self.asking.lease.load(Ordering::Acquire) == self.lease
    }

    /// The store granted a slot in `wait`: the turn is held until it is due.
    pub(crate) fn granted(&mut self, wait: Duration) {
        let due = later(Instant::now(), wait);
        let due_at = self.asking.offset(due);
        self.renew(later(due, SLOT_MISSED), due_at);
    }

    /// The lease runs until `until`, for a slot due at `due` (0: none): unless the waiters
    /// took the turn over meanwhile (a first lease is written whatever the last one was: the
    /// place is this holder's).
    fn renew(&mut self, until: Instant, due: u64) {
        let lease = self.asking.offset(until);
        let renewed = match self.lease {
            0 => {
                self.asking.lease.store(lease, Ordering::Release);
                true
            }
            held => (self.asking.lease)
                .compare_exchange(held, lease, Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
        };
        if renewed {
            self.lease = lease;
            self.asking.due.store(due, Ordering::Release);
        }
    }
}

impl Drop for AskTurn {
    fn drop(&mut self) {
        // Its lease ends with it, and its place goes back; a lease taken over ended already
        // (nobody else writes it meanwhile), and its place went to the next then.
        let ended = (self.asking.lease).compare_exchange(
            self.lease,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        match (ended, self.permit.take()) {
            (Ok(_), _) => self.asking.due.store(0, Ordering::Release),
            (Err(_), Some(permit)) => permit.forfeited(),
            (Err(_), None) => {}
        }
    }
}
