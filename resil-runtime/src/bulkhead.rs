//! [`Bulkhead`]: a cap on operations in flight, so one slow provider cannot take every
//! connection, thread and socket of the process with it.

use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering};
use resil_spec::rules;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};

use crate::{ConfigError, Rejected};

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
    limit: usize,
    in_flight: AtomicUsize,
    queue: Option<Queue>,
}

/// The waiting room of a bulkhead with a queue: tokio's semaphore serves waiters in order,
/// and a waiter that is dropped leaves without costing anyone their turn.
#[derive(Debug)]
struct Queue {
    /// Shared with the owned permits of a bulkhead per key.
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    capacity: usize,
}

impl Queue {
    fn new(limit: usize, capacity: usize) -> Self {
        Queue {
            permits: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            waiting: AtomicUsize::new(0),
            capacity,
        }
    }
}

impl Bulkhead {
    /// A bulkhead letting `limit` operations run at once, rejecting the next.
    pub fn new(limit: usize) -> Result<Self, ConfigError> {
        rules::bulkhead(limit)?;
        Ok(Bulkhead {
            limit,
            in_flight: AtomicUsize::new(0),
            queue: None,
        })
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
        let mut bulkhead = Bulkhead::new(limit)?;
        if queue > 0 {
            bulkhead.queue = Some(Queue::new(limit, queue));
        }
        Ok(bulkhead)
    }

    /// A bulkhead with the same limit and queue, and nobody in it: the bulkhead of a new key.
    pub(crate) fn fresh(&self) -> Self {
        Bulkhead {
            limit: self.limit,
            in_flight: AtomicUsize::new(0),
            queue: self
                .queue
                .as_ref()
                .map(|queue| Queue::new(self.limit, queue.capacity)),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Callers that may wait for a place (0: none).
    pub fn queue(&self) -> usize {
        self.queue.as_ref().map_or(0, |queue| queue.capacity)
    }

    /// Operations holding a permit now.
    pub fn in_flight(&self) -> usize {
        match &self.queue {
            None => self.in_flight.load(Ordering::Acquire),
            Some(queue) => {
                self.limit.min(Semaphore::MAX_PERMITS) - queue.permits.available_permits()
            }
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
        self.in_flight() < self.limit || self.waiting() < self.queue()
    }

    fn full(&self) -> Rejected {
        Rejected::BulkheadFull { limit: self.limit }
    }

    /// A permit now, or [`Rejected::BulkheadFull`] if `limit` are already out (whether or not
    /// others are waiting in the queue).
    pub fn try_acquire(&self) -> Result<BulkheadPermit<'_>, Rejected> {
        if let Some(queue) = &self.queue {
            return match queue.permits.try_acquire() {
                Ok(permit) => Ok(BulkheadPermit(Place::Queued { _permit: permit })),
                Err(_) => Err(self.full()),
            };
        }
        self.count()?;
        Ok(BulkheadPermit(Place::Counted(self)))
    }

    /// [`Bulkhead::try_acquire`] for a bulkhead per key, whose permit outlives the borrow of
    /// the registry that holds it.
    pub(crate) fn try_acquire_owned(self: &Arc<Self>) -> Result<BulkheadPermit<'static>, Rejected> {
        if let Some(queue) = &self.queue {
            return match Arc::clone(&queue.permits).try_acquire_owned() {
                Ok(permit) => Ok(BulkheadPermit(Place::QueuedOwned { _permit: permit })),
                Err(_) => Err(self.full()),
            };
        }
        self.count()?;
        Ok(BulkheadPermit(Place::CountedOwned(Arc::clone(self))))
    }

    /// Counts one more in flight, unless `limit` are.
    fn count(&self) -> Result<(), Rejected> {
        // A CAS loop rather than add-then-undo: an add that overshoots would make a
        // concurrent caller see a full bulkhead that is not.
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if current >= self.limit {
                return Err(self.full());
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
            return Ok(BulkheadPermit(Place::Queued { _permit: permit }));
        }
        let _waiting = self.join(queue)?;
        match queue.permits.acquire().await {
            Ok(permit) => Ok(BulkheadPermit(Place::Queued { _permit: permit })),
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
            return Ok(BulkheadPermit(Place::QueuedOwned { _permit: permit }));
        }
        let _waiting = self.join(queue)?;
        match Arc::clone(&queue.permits).acquire_owned().await {
            Ok(permit) => Ok(BulkheadPermit(Place::QueuedOwned { _permit: permit })),
            Err(_) => Err(self.full()),
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

#[derive(Debug)]
enum Place<'a> {
    Counted(&'a Bulkhead),
    CountedOwned(Arc<Bulkhead>),
    /// Dropping tokio's permit hands the place to the first waiter.
    Queued {
        _permit: SemaphorePermit<'a>,
    },
    QueuedOwned {
        _permit: OwnedSemaphorePermit,
    },
}

impl Drop for BulkheadPermit<'_> {
    fn drop(&mut self) {
        match &self.0 {
            Place::Counted(bulkhead) => bulkhead.in_flight.fetch_sub(1, Ordering::Release),
            Place::CountedOwned(bulkhead) => bulkhead.in_flight.fetch_sub(1, Ordering::Release),
            Place::Queued { .. } | Place::QueuedOwned { .. } => return,
        };
    }
}
