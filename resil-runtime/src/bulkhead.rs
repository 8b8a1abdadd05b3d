//! [`Bulkhead`]: a cap on operations in flight, so one slow provider cannot take every
//! connection, thread and socket of the process with it.

use crate::sync::{AtomicUsize, Ordering};
use resil_spec::rules;

use crate::{ConfigError, Rejected};

/// At most `limit` operations in flight; the next is rejected at once with
/// [`Rejected::BulkheadFull`] rather than queued, because a queue in front of a stalled
/// provider only turns a fast failure into a slow one.
///
/// The permit is released when it is dropped: on completion, on cancellation and during a
/// panic's unwinding. Acquiring is a compare-and-swap, releasing a `fetch_sub`; no lock.
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
}

impl Bulkhead {
    /// A bulkhead letting `limit` operations run at once.
    pub fn new(limit: usize) -> Result<Self, ConfigError> {
        rules::bulkhead(limit)?;
        Ok(Bulkhead {
            limit,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Operations holding a permit now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// A permit, or [`Rejected::BulkheadFull`] if `limit` are already out.
    pub fn try_acquire(&self) -> Result<BulkheadPermit<'_>, Rejected> {
        // A CAS loop rather than add-then-undo: an add that overshoots would make a
        // concurrent caller see a full bulkhead that is not.
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            if current >= self.limit {
                return Err(Rejected::BulkheadFull { limit: self.limit });
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(BulkheadPermit { bulkhead: self }),
                Err(actual) => current = actual,
            }
        }
    }
}

/// One operation's place in a [`Bulkhead`]; dropping it frees the place.
#[derive(Debug)]
#[must_use = "the place is freed as soon as the permit is dropped"]
pub struct BulkheadPermit<'a> {
    bulkhead: &'a Bulkhead,
}

impl Drop for BulkheadPermit<'_> {
    fn drop(&mut self) {
        self.bulkhead.in_flight.fetch_sub(1, Ordering::Release);
    }
}
