//! A bulkhead's queue served by [`Priority`](crate::Priority): the place freed goes to the
//! most urgent waiter, in turn across `fair` values (see [`Turns`]), not to the one that came
//! first.
//!
//! tokio's semaphore serves its waiters in order, so only one waiter waits in it at a time:
//! the one served next. A more urgent caller that arrives meanwhile becomes next, and the one
//! it displaced leaves the semaphore (a permit it was given meanwhile goes back, to the new
//! next). A waiter dropped leaves no hole: if it was next, the new next is woken.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::sync::{AcquireError, Semaphore, SemaphorePermit};

use super::{Bulkhead, BulkheadPermit};
use crate::priority::{Place, Turns};
use crate::sync::lock_std;
use crate::Rejected;

type Acquire<'a> =
    Pin<Box<dyn Future<Output = Result<SemaphorePermit<'a>, AcquireError>> + Send + 'a>>;

impl Bulkhead {
    /// Its queue's waiters are served by priority, and round-robin across up to `lanes`
    /// `fair` values. No queue, nothing to order.
    pub(crate) fn ordered(mut self, lanes: usize) -> Self {
        if let Some(queue) = &mut self.queue {
            queue.turns = Some(Box::new(Mutex::new(Turns::new(lanes))));
        }
        self
    }

    /// A place, waiting for it in the queue in the turn of `place` (see [`Turns`]), for a
    /// bulkhead whose queue orders its waiters; [`Bulkhead::acquire`] otherwise.
    pub(crate) async fn acquire_in_turn(
        &self,
        place: Place,
    ) -> Result<BulkheadPermit<'_>, Rejected> {
        let Some((queue, turns)) =
            (self.queue.as_ref()).and_then(|queue| Some((queue, queue.turns.as_deref()?)))
        else {
            return self.acquire().await;
        };
        if lock_std(turns).is_empty() {
            if let Ok(permit) = queue.permits.try_acquire() {
                return Ok(self.queued_place(permit));
            }
        }
        let _waiting = self.join(queue)?;
        let id = lock_std(turns).join(place);
        let mut turn = InTurn {
            turns,
            permits: &queue.permits,
            id: Some(id),
            acquire: None,
        };
        match std::future::poll_fn(|cx| turn.poll_place(cx)).await {
            Ok(permit) => Ok(self.queued_place(permit)),
            // The semaphore is never closed.
            Err(_) => Err(self.full()),
        }
    }
}

/// One caller's wait in an ordered queue; dropped, it leaves it.
struct InTurn<'a> {
    turns: &'a Mutex<Turns>,
    permits: &'a Semaphore,
    /// Its number in the queue, until it is served.
    id: Option<u64>,
    /// Its wait in the semaphore, while it is next.
    acquire: Option<Acquire<'a>>,
}

impl<'a> InTurn<'a> {
    fn poll_place(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<SemaphorePermit<'a>, AcquireError>> {
        let id = self.id.expect("polled after it was served");
        let mut turns = lock_std(self.turns);
        if turns.next() != Some(id) {
            turns.wait(id, cx.waker());
            drop(turns);
            // Displaced: a permit given to it meanwhile goes back, to the next.
            self.acquire = None;
            return Poll::Pending;
        }
        let permits = self.permits;
        let acquire = (self.acquire).get_or_insert_with(|| Box::pin(permits.acquire()));
        match acquire.as_mut().poll(cx) {
            Poll::Ready(permit) => {
                if permit.is_ok() {
                    turns.serve(id);
                } else {
                    turns.leave(id);
                }
                drop(turns);
                self.id = None;
                self.acquire = None;
                Poll::Ready(permit)
            }
            Poll::Pending => {
                turns.wait(id, cx.waker());
                Poll::Pending
            }
        }
    }
}

impl Drop for InTurn<'_> {
    fn drop(&mut self) {
        // Out of the semaphore first: a permit it was given goes back before the next looks.
        self.acquire = None;
        if let Some(id) = self.id.take() {
            lock_std(self.turns).leave(id);
        }
    }
}
