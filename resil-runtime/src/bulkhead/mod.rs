//! [`Bulkhead`]: a cap on operations in flight, so one slow provider cannot take every
//! connection, thread and socket of the process with it. An adaptive one
//! ([`Bulkhead::adaptive`]) finds its limit from what the provider answers: see [`adaptive`].

use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering};
use resil_spec::rules;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::{ConfigError, Rejected};

pub(crate) mod adaptive;
mod queue;

use adaptive::{Adaptive, LimitChange, Sample, Signal};

/// At most `limit` operations in flight. By default the next is rejected at once with
/// [`Rejected::BulkheadFull`] rather than queued, because a queue in front of a stalled
/// provider only turns a fast failure into a slow one. [`Bulkhead::with_queue`] lets up to
/// `queue` callers wait, first come first served, within their deadline: for a provider that
/// is busy, not down (a gate of 3 in front of a provider that serves 3 at once).
///
/// The permit is released when it is dropped: on completion, on cancellation and during a
/// panic's unwinding. Without a queue, acquiring is a compare-and-swap and releasing a
/// `fetch_sub`; no lock.
///
/// ```
/// use resil_runtime::{Bulkhead, Rejected};
///
/// let bulkhead = Bulkhead::new(1)?;
/// let permit = bulkhead.try_acquire()?;
/// assert_eq!(bulkhead.try_acquire().unwrap_err(), Rejected::BulkheadFull { limit: 1 });
/// drop(permit);
/// assert_eq!(bulkhead.in_flight(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Bulkhead {
    /// Fixed, unless the bulkhead adapts it.
    limit: AtomicUsize,
    in_flight: AtomicUsize,
    queue: Option<Queue>,
    /// The controller of the limit, and the key it is for, in an adaptive bulkhead.
    adaptive: Option<Box<(Adaptive, Option<Arc<str>>)>>,
}

/// The waiting room of a bulkhead with a queue: tokio's semaphore serves waiters in order,
/// and a waiter that is dropped leaves without costing anyone their turn.
#[derive(Debug)]
struct Queue {
    /// Shared with the owned permits of a bulkhead per key.
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    capacity: usize,
    /// Permits to forget as they come back, owed by a decrease of the limit: a decrease
    /// never revokes a place already held.
    debt: AtomicUsize,
    /// The waiters in the order they are served, for a bulkhead that orders them by priority
    /// (see [`queue`]).
    room: Option<Box<queue::Room>>,
    /// Places handed to the room's waiters, not yet taken (see [`queue`]); changed under the
    /// room's lock.
    handed: AtomicUsize,
}

impl Queue {
    fn new(limit: usize, capacity: usize) -> Self {
        Queue {
            permits: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            waiting: AtomicUsize::new(0),
            capacity,
            debt: AtomicUsize::new(0),
            room: None,
            handed: AtomicUsize::new(0),
        }
    }
}

impl Bulkhead {
    /// The bounds of an adaptive bulkhead when none are given (`bulkhead = "adaptive"`): down
    /// to one call at a time, up to 256.
    pub const DEFAULT_ADAPTIVE_RANGE: (usize, usize) = resil_spec::defaults::ADAPTIVE_BULKHEAD;

    /// A bulkhead letting `limit` operations run at once, rejecting the next.
    pub fn new(limit: usize) -> Result<Self, ConfigError> {
        rules::bulkhead(limit)?;
        Ok(Bulkhead {
            limit: AtomicUsize::new(limit),
            in_flight: AtomicUsize::new(0),
            queue: None,
            adaptive: None,
        })
    }

    /// A bulkhead whose limit adapts between `min` and `max` to what the provider answers
    /// (see [`Bulkhead::adaptive_range`]): halved on a throttle, an attempt timeout or a
    /// transient failure, one more after as many successes as the limit, and a tenth less
    /// when a round of answers slows down to twice its usual latency (its median, against
    /// the latency at light load for each answer's cost). A [`Policy`](crate::Policy) tells
    /// it each attempt's end (taking a short lock on the limit's state: the one lock of an
    /// adaptive bulkhead); used by hand, it is a bulkhead at its starting limit.
    ///
    /// ```
    /// use resil_runtime::Bulkhead;
    ///
    /// let bulkhead = Bulkhead::adaptive(4, 64)?;
    /// assert_eq!(bulkhead.adaptive_range(), Some((4, 64)));
    /// assert_eq!(bulkhead.limit(), 16); // a modest start, within the range
    /// assert!(Bulkhead::adaptive(8, 4).is_err());
    /// # Ok::<(), resil_runtime::ConfigError>(())
    /// ```
    pub fn adaptive(min: usize, max: usize) -> Result<Self, ConfigError> {
        rules::adaptive_bulkhead(min, max)?;
        let (adaptive, limit) = Adaptive::new(min, max);
        let mut bulkhead = Bulkhead::new(limit)?;
        bulkhead.adaptive = Some(Box::new((adaptive, None)));
        Ok(bulkhead)
    }

    /// Lets up to `queue` callers wait for a place: [`Bulkhead::with_queue`] for a bulkhead
    /// made otherwise, such as an adaptive one.
    pub(crate) fn queued(mut self, queue: usize) -> Self {
        if queue > 0 {
            self.queue = Some(Queue::new(self.limit(), queue));
        }
        self
    }

    /// A bulkhead letting `limit` operations run at once and up to `queue` more wait for a
    /// place, in order; the next is rejected at once. A queue of 0 is [`Bulkhead::new`].
    ///
    /// ```
    /// use resil_runtime::{Bulkhead, Rejected};
    /// use std::sync::Arc;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let bulkhead = Arc::new(Bulkhead::with_queue(1, 1).unwrap());
    /// let first = bulkhead.try_acquire().unwrap();
    /// let queued = Arc::clone(&bulkhead);
    /// let waiter = tokio::spawn(async move { queued.acquire().await.map(drop) });
    /// tokio::task::yield_now().await; // the waiter takes the one place in the queue
    /// assert_eq!(bulkhead.waiting(), 1);
    /// assert_eq!(bulkhead.acquire().await.unwrap_err(), Rejected::BulkheadFull { limit: 1 });
    /// drop(first); // the waiter gets the place
    /// assert_eq!(waiter.await.unwrap(), Ok(()));
    /// # }
    /// ```
    pub fn with_queue(limit: usize, queue: usize) -> Result<Self, ConfigError> {
        Ok(Bulkhead::new(limit)?.queued(queue))
    }

    /// A bulkhead with the same settings, and nobody in it: the bulkhead of the new `key`
    /// (an adaptive one starts over, and names the key in its events and gauge).
    pub(crate) fn fresh(&self, key: &Arc<str>) -> Self {
        let (adaptive, limit) = match self.adaptive.as_deref() {
            Some((adaptive, _)) => {
                let (adaptive, limit) = adaptive.fresh();
                (Some(Box::new((adaptive, Some(Arc::clone(key))))), limit)
            }
            None => (None, self.limit()),
        };
        Bulkhead {
            limit: AtomicUsize::new(limit),
            in_flight: AtomicUsize::new(0),
            queue: (self.queue.as_ref()).map(|queue| Queue {
                room: (queue.room.as_ref()).map(|room| Box::new(room.fresh())),
                ..Queue::new(limit, queue.capacity)
            }),
            adaptive,
        }
    }

    /// The limit: fixed, or where an adaptive bulkhead has brought it now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The least and the most an adaptive bulkhead's limit may be; `None` for a fixed one.
    pub fn adaptive_range(&self) -> Option<(usize, usize)> {
        let (adaptive, _) = self.adaptive.as_deref()?;
        Some((adaptive.min, adaptive.max))
    }

    /// Whether the limit adapts: the execution then tells it each attempt's end.
    #[inline]
    pub(crate) fn is_adaptive(&self) -> bool {
        self.adaptive.is_some()
    }

    /// The key an adaptive bulkhead per key is for.
    pub(crate) fn key(&self) -> Option<&str> {
        self.adaptive.as_deref()?.1.as_deref()
    }

    /// Tells an adaptive bulkhead how an attempt that started at `started` and cost `cost`
    /// ended; returns how its limit moved, if it did.
    pub(crate) fn observe(
        &self,
        signal: Signal,
        started: Instant,
        cost: u64,
    ) -> Option<LimitChange> {
        let (adaptive, _) = self.adaptive.as_deref()?;
        let sample = Sample {
            signal,
            started,
            cost,
            in_flight: self.in_flight(),
        };
        adaptive.observe(sample, Instant::now(), |from, to| self.resize(from, to))
    }

    /// Moves the limit from `from` to `to`. In a queue, a decrease forgets the free permits
    /// and owes the rest, forgotten as they come back; an increase pays that debt first.
    fn resize(&self, from: usize, to: usize) {
        self.limit.store(to, Ordering::Relaxed);
        let Some(queue) = &self.queue else {
            return;
        };
        if to < from {
            let forgotten = queue.permits.forget_permits(from - to);
            let owed = (from - to) - forgotten;
            let handed = (queue.handed)
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |handed| {
                    Some(handed - handed.min(owed))
                })
                .map_or(0, |handed| handed.min(owed));
            queue.debt.fetch_add(owed - handed, Ordering::AcqRel);
            return;
        }
        let mut added = to - from;
        let paid = queue
            .debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |debt| {
                Some(debt - debt.min(added))
            })
            .map_or(0, |debt| debt.min(added));
        added -= paid;
        queue.release(added);
    }

    /// Callers that may wait for a place (0: none).
    pub fn queue(&self) -> usize {
        self.queue.as_ref().map_or(0, |queue| queue.capacity)
    }

    /// Operations holding a permit now.
    pub fn in_flight(&self) -> usize {
        match &self.queue {
            None => self.in_flight.load(Ordering::Acquire),
            Some(queue) => (self.limit().min(Semaphore::MAX_PERMITS)
                + queue.debt.load(Ordering::Acquire))
            .saturating_sub(queue.permits.available_permits())
            .saturating_sub(queue.handed.load(Ordering::Acquire)),
        }
    }

    /// Callers waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.queue
            .as_ref()
            .map_or(0, |queue| queue.waiting.load(Ordering::Acquire))
    }

    /// Whether an operation arriving now would get a place or one in the queue.
    pub(crate) fn has_room(&self) -> bool {
        self.in_flight() < self.limit() || self.waiting() < self.queue()
    }

    fn full(&self) -> Rejected {
        Rejected::BulkheadFull {
            limit: self.limit(),
        }
    }

    /// A permit now, or [`Rejected::BulkheadFull`] if `limit` are already out (whether or not
    /// others are waiting in the queue).
    pub fn try_acquire(&self) -> Result<BulkheadPermit<'_>, Rejected> {
        if let Some(queue) = &self.queue {
            return self.try_queued(queue);
        }
        self.count()?;
        Ok(BulkheadPermit(Place::Counted(self)))
    }

    /// [`Bulkhead::try_acquire`] for a bulkhead per key, whose permit outlives the borrow of
    /// the registry that holds it.
    pub(crate) fn try_acquire_owned(self: &Arc<Self>) -> Result<BulkheadPermit<'static>, Rejected> {
        if let Some(queue) = &self.queue {
            return match Arc::clone(&queue.permits).try_acquire_owned() {
                Ok(permit) => Ok(self.owned_place(permit)),
                Err(_) => Err(self.full()),
            };
        }
        self.count()?;
        Ok(BulkheadPermit(Place::CountedOwned(Arc::clone(self))))
    }

    /// A place from the queue's semaphore now: out of line, so that the count's path stays
    /// small enough to inline.
    #[inline(never)]
    fn try_queued(&self, queue: &Queue) -> Result<BulkheadPermit<'_>, Rejected> {
        match queue.permits.try_acquire() {
            Ok(permit) => Ok(self.queued_place(permit)),
            Err(_) => Err(self.full()),
        }
    }

    /// Counts one more in flight, unless `limit` are.
    fn count(&self) -> Result<(), Rejected> {
        // A CAS loop rather than add-then-undo: an add that overshoots would make a
        // concurrent caller see a full bulkhead that is not.
        let limit = self.limit.load(Ordering::Relaxed);
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if current >= limit {
                return Err(Rejected::BulkheadFull { limit });
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// A permit, waiting in the queue for one if the bulkhead has a queue with room;
    /// [`Rejected::BulkheadFull`] at once otherwise. Dropping the future leaves the queue.
    pub async fn acquire(&self) -> Result<BulkheadPermit<'_>, Rejected> {
        let Some(queue) = &self.queue else {
            return self.try_acquire();
        };
        if let Ok(permit) = queue.permits.try_acquire() {
            return Ok(self.queued_place(permit));
        }
        let _waiting = self.join(queue)?;
        match queue.permits.acquire().await {
            Ok(permit) => Ok(self.queued_place(permit)),
            // The semaphore is never closed.
            Err(_) => Err(self.full()),
        }
    }

    /// [`Bulkhead::acquire`] for a bulkhead per key.
    pub(crate) async fn acquire_owned(
        self: Arc<Self>,
    ) -> Result<BulkheadPermit<'static>, Rejected> {
        let Some(queue) = &self.queue else {
            return self.try_acquire_owned();
        };
        if let Ok(permit) = Arc::clone(&queue.permits).try_acquire_owned() {
            return Ok(self.owned_place(permit));
        }
        let _waiting = self.join(queue)?;
        match Arc::clone(&queue.permits).acquire_owned().await {
            Ok(permit) => Ok(self.owned_place(permit)),
            Err(_) => Err(self.full()),
        }
    }

    /// tokio's permit, kept as the bulkhead's own: forgotten now, given back by the place's
    /// drop (to the first waiter, unless a decrease of the limit owes it).
    fn queued_place(&self, permit: SemaphorePermit<'_>) -> BulkheadPermit<'_> {
        permit.forget();
        BulkheadPermit(Place::Queued(self))
    }

    fn owned_place(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> BulkheadPermit<'static> {
        permit.forget();
        BulkheadPermit(Place::QueuedOwned(Arc::clone(self)))
    }

    /// A place whose holder no longer counts (a shared gate's turn to ask, whose lease ended)
    /// goes to the queue now: its holder's permit is then [forfeited](BulkheadPermit::forfeited).
    #[cfg(feature = "shared")]
    pub(crate) fn forfeit(&self) {
        if let Some(queue) = &self.queue {
            queue.release(1);
        }
    }

    /// A queued place comes back.
    #[inline(never)]
    fn give_back(&self) {
        if let Some(queue) = &self.queue {
            if !owed(&queue.debt) {
                queue.release(1);
            }
        }
    }

    /// A place in the queue, if it has room.
    fn join<'q>(&self, queue: &'q Queue) -> Result<Waiting<'q>, Rejected> {
        queue
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                (waiting < queue.capacity).then_some(waiting + 1)
            })
            .map(|_| Waiting(&queue.waiting))
            .map_err(|_| self.full())
    }
}

/// A place in the queue, given up when the wait ends or is dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One operation's place in a [`Bulkhead`]; dropping it frees the place.
#[derive(Debug)]
#[must_use = "the place is freed as soon as the permit is dropped"]
pub struct BulkheadPermit<'a>(Place<'a>);

impl BulkheadPermit<'_> {
    /// Its place was given to the queue already ([`Bulkhead::forfeit`]): it frees none.
    #[cfg(feature = "shared")]
    pub(crate) fn forfeited(mut self) {
        self.0 = Place::Forfeited;
    }
}

#[derive(Debug)]
enum Place<'a> {
    #[cfg(feature = "shared")]
    Forfeited,
    Counted(&'a Bulkhead),
    CountedOwned(Arc<Bulkhead>),
    /// A place from the queue's semaphore: see [`Bulkhead::give_back`].
    Queued(&'a Bulkhead),
    QueuedOwned(Arc<Bulkhead>),
}

impl Drop for BulkheadPermit<'_> {
    fn drop(&mut self) {
        match &self.0 {
            Place::Counted(bulkhead) => {
                bulkhead.in_flight.fetch_sub(1, Ordering::Release);
            }
            Place::CountedOwned(bulkhead) => {
                bulkhead.in_flight.fetch_sub(1, Ordering::Release);
            }
            Place::Queued(bulkhead) => bulkhead.give_back(),
            Place::QueuedOwned(bulkhead) => bulkhead.give_back(),
            #[cfg(feature = "shared")]
            Place::Forfeited => {}
        }
    }
}

/// Whether a permit coming back pays a debt of the limit (and is forgotten).
fn owed(debt: &AtomicUsize) -> bool {
    debt.load(Ordering::Acquire) > 0
        && debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |debt| {
                debt.checked_sub(1)
            })
            .is_ok()
}
