//! A bulkhead's queue served by [`Priority`](crate::Priority): the place freed goes to the
//! most urgent waiter, in turn across `fair` values (see [`Turns`]), not to the one that came
//! first.
//!
//! A place that comes back while callers wait is handed to the room, for whoever is next
//! when it looks, rather than put back in the semaphore, where a newcomer would take it first
//! (and tokio's waiter would hold it even unpolled). A next that does not come for it is
//! passed over by the waiters that watch it (see [`Turns::watcher`]): a caller left unpolled
//! (a `select!` branch, a coalesced call whose caller left) holds no place and no one behind
//! it. A waiter dropped leaves no hole: if it was next, the new next is woken.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use super::{Bulkhead, BulkheadPermit, Place as Held, Queue};
use crate::deadline::{later, slept};
use crate::gate::SLOT_MISSED;
use crate::priority::{Idle, Locked, Place, Served, Turns};
use crate::sync::Ordering;
use crate::Rejected;

/// The waiters of an ordered queue.
pub(super) type Room = crate::priority::Room<QueueRoom>;

#[derive(Debug)]
pub(super) struct QueueRoom {
    turns: Turns,
    /// When the next was handed a place it has yet to take: the k-th watcher passes it over
    /// k × [`SLOT_MISSED`] later.
    expected: Option<Instant>,
}

impl Idle for QueueRoom {
    /// Places handed to the room go back to the semaphore as the last waiter leaves.
    fn is_idle(&self) -> bool {
        self.turns.is_idle()
    }
}

impl Bulkhead {
    /// Its queue's waiters are served by priority, and round-robin across up to `lanes`
    /// `fair` values. No queue, nothing to order.
    pub(crate) fn ordered(mut self, lanes: usize) -> Self {
        if let Some(queue) = &mut self.queue {
            queue.room = Some(Box::new(Room::new(lanes)));
        }
        self
    }

    /// A place, waiting for it in the queue in the turn of `place` (see [`Turns`]), and how
    /// it was served if it waited, for a bulkhead whose queue orders its waiters;
    /// [`Bulkhead::acquire`] otherwise.
    pub(crate) async fn acquire_in_turn(
        &self,
        place: Place,
    ) -> Result<(BulkheadPermit<'_>, Option<Served>), Rejected> {
        let Some((queue, room)) = self.ordered_queue() else {
            return Ok((self.acquire().await?, None));
        };
        let served = self.take_in_turn(queue, room, place).await?;
        Ok((BulkheadPermit(Held::Queued(self)), served))
    }

    /// [`Bulkhead::acquire_in_turn`] for a bulkhead per key.
    pub(crate) async fn acquire_in_turn_owned(
        self: Arc<Self>,
        place: Place,
    ) -> Result<(BulkheadPermit<'static>, Option<Served>), Rejected> {
        let Some((queue, room)) = self.ordered_queue() else {
            return Ok((Arc::clone(&self).acquire_owned().await?, None));
        };
        let served = self.take_in_turn(queue, room, place).await?;
        Ok((BulkheadPermit(Held::QueuedOwned(Arc::clone(&self))), served))
    }

    /// How many waiters of its ordered queue would be served before a newcomer at `place`.
    #[cfg(feature = "shared")]
    pub(crate) fn ahead_of(&self, place: Place) -> usize {
        let room = self.ordered_queue().and_then(|(_, room)| room.made());
        room.map_or(0, |room| room.turns.ahead_of(place))
    }

    fn ordered_queue(&self) -> Option<(&Queue, &Room)> {
        let queue = self.queue.as_ref()?;
        Some((queue, queue.room.as_deref()?))
    }

    /// Takes a place in the queue's turn: held once this returns, for the caller to wrap in
    /// its permit.
    async fn take_in_turn(
        &self,
        queue: &Queue,
        room: &Room,
        place: Place,
    ) -> Result<Option<Served>, Rejected> {
        if lock(room).turns.is_empty() {
            if let Ok(permit) = queue.permits.try_acquire() {
                permit.forget();
                return Ok(None);
            }
        }
        let _waiting = match self.join(queue) {
            Ok(waiting) => waiting,
            // A full queue: a place handed to a next that did not take it is this caller's.
            Err(_) if queue.take_from_stalled(room) => return Ok(None),
            Err(full) => return Err(full),
        };
        let since = Instant::now();
        let id = lock(room).turns.join(place);
        let mut turn = InTurn {
            queue,
            room,
            id: Some(id),
            place,
            sleep: None,
        };
        let promoted = std::future::poll_fn(|cx| turn.poll_place(cx)).await;
        let waited = since.elapsed();
        Ok(Some(Served { waited, promoted }))
    }
}

/// The room of an ordered queue's waiters.
fn lock(room: &Room) -> Locked<'_, QueueRoom> {
    room.lock(|turns| QueueRoom {
        turns,
        expected: None,
    })
}

impl Queue {
    /// `count` places come back, or come with a higher limit: handed to the room when callers
    /// wait in an ordered queue (the next is woken to take one), into the semaphore otherwise.
    pub(super) fn release(&self, count: usize) {
        let Some(mut room) = self.room.as_deref().and_then(Room::made) else {
            self.permits.add_permits(count);
            // A first caller may have made the room and found no place meanwhile: woken.
            if let Some(mut room) = self.room.as_deref().and_then(Room::made) {
                room.turns.wake_next();
            }
            return;
        };
        if room.turns.is_empty() {
            // Under the room's lock: a caller that joins after finds them in the semaphore.
            self.permits.add_permits(count);
            return;
        }
        // Expected from now, unless places handed earlier still wait to be taken (a decrease
        // of the limit may have taken them back meanwhile: then from now).
        if self.handed.fetch_add(count, Ordering::AcqRel) == 0 || room.expected.is_none() {
            room.expected = Some(Instant::now());
        }
        room.turns.wake_next();
    }

    /// The last waiter gone (served or not), the places handed to the room go back to the
    /// semaphore, for the callers that find the room empty.
    fn unhand(&self, room: &mut QueueRoom) {
        if room.turns.is_empty() {
            room.expected = None;
            let handed = self.handed.swap(0, Ordering::AcqRel);
            self.permits.add_permits(handed);
        }
    }

    /// A caller that finds the queue full takes a place handed to the next, if the next did
    /// not take it within [`SLOT_MISSED`] (left unpolled, it holds its place in the queue, and
    /// with the queue full no watcher could come): the next is passed over. Whether it took one.
    fn take_from_stalled(&self, room: &Room) -> bool {
        let Some(mut room) = room.made() else {
            return false;
        };
        let now = Instant::now();
        let late = room
            .expected
            .is_some_and(|at| now >= later(at, SLOT_MISSED));
        if !late || !self.take_handed() {
            return false;
        }
        if let Some(stalled) = room.turns.next() {
            room.turns.pass_over(stalled);
        }
        self.taken(&mut room, now);
        true
    }

    /// A place was taken from the room at `now`: the new next is expected from now for a
    /// place still handed, and with nobody left the places go back.
    fn taken(&self, room: &mut QueueRoom, now: Instant) {
        room.expected = (self.handed.load(Ordering::Acquire) > 0).then_some(now);
        self.unhand(room);
    }

    /// A place handed to the room, if one is.
    fn take_handed(&self) -> bool {
        (self.handed)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |handed| {
                handed.checked_sub(1)
            })
            .is_ok()
    }
}

/// One caller's wait in an ordered queue; dropped, it leaves it.
struct InTurn<'a> {
    queue: &'a Queue,
    room: &'a Room,
    /// Its number in the queue, until it is served.
    id: Option<u64>,
    /// Where it joined, to join again if it was passed over.
    place: Place,
    /// The wait of a watcher (see [`Turns::watcher`]).
    sleep: Option<Pin<Box<Sleep>>>,
}

impl InTurn<'_> {
    /// Ready once it holds a place, handed to it or taken from the semaphore: whether it was
    /// promoted (see [`Turns::serve`]).
    fn poll_place(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        loop {
            let mut id = self.id.expect("polled after it was served");
            let mut room = lock(self.room);
            let now = Instant::now();
            if room.turns.was_passed_over(id) {
                // Passed over while it was not polled: it waits again, last of its lane.
                id = room.turns.join(self.place);
                self.id = Some(id);
            }
            if room.turns.next() == Some(id) {
                let taken = self.queue.take_handed()
                    || (self.queue.permits.try_acquire())
                        .map(tokio::sync::SemaphorePermit::forget)
                        .is_ok();
                if !taken {
                    room.turns.wait(id, cx.waker());
                    return Poll::Pending;
                }
                let promoted = room.turns.serve(id);
                self.queue.taken(&mut room, now);
                self.id = None;
                return Poll::Ready(promoted);
            }
            room.turns.wait(id, cx.waker());
            let Some(expected) = room.expected.filter(|_| self.handed_out()) else {
                self.sleep = None;
                return Poll::Pending;
            };
            let (late, wake) = room.turns.watch(id, expected, SLOT_MISSED);
            if now < late {
                drop(room);
                if slept(&mut self.sleep, wake, cx) {
                    continue;
                }
                return Poll::Pending;
            }
            // The next did not come for the place handed to it: it is passed over, and the
            // new next (woken) is expected now.
            room.turns.pass_over_stalled(id);
            room.expected = Some(now);
        }
    }

    /// Whether places handed to the room wait to be taken.
    fn handed_out(&self) -> bool {
        self.queue.handed.load(Ordering::Acquire) > 0
    }
}

impl Drop for InTurn<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let mut room = lock(self.room);
        let next = room.turns.next() == Some(id);
        room.turns.leave(id);
        if next && self.handed_out() {
            room.expected = Some(Instant::now());
        }
        self.queue.unhand(&mut room);
    }
}
