//! A gate's waiting room, for a policy that orders its waiters by [`Priority`]: the callers that
//! must wait for a slot wait here, and each slot goes, when it comes due, to the waiter served
//! next (see [`Turns`]), not to the one that asked first.
//!
//! The room books one slot at a time in the gate's schedule, for whoever is next when it comes
//! due: the gate keeps its rate for all callers together, and a more urgent caller arriving
//! meanwhile takes that slot. A caller that needs no wait never comes here (the gate's own
//! path, unchanged, serves it); one that gives up leaves no hole: the next waiter takes the
//! slot booked, and the last one gives it back to the gate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use super::{RateGate, Slot};
use crate::deadline::later;
use crate::priority::{Priority, Turns};
use crate::sync::lock_std;
use crate::Rejected;

/// The waiters of one gate, and the slot booked for the next of them.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    room: Mutex<Room>,
}

#[derive(Debug, Default)]
struct Room {
    turns: Turns,
    /// The slot booked for whoever is next when it comes due.
    booked: Option<(Instant, Slot)>,
}

impl RateGate {
    /// Callers that must wait for a slot are served by priority (see [`Priority`]).
    pub(crate) fn ordered(mut self) -> Self {
        self.waiters = Some(Box::default());
        self
    }

    /// Whether callers that must wait are served by priority.
    pub(crate) fn orders(&self) -> bool {
        self.waiters.is_some()
    }

    /// A caller of `class` waits for its slot: refused at once, with [`Rejected::RateLimited`],
    /// when the waiters served before it (those of its class and the more urgent ones) take
    /// the slots until after `deadline`. Its wait may grow while it waits, as more urgent
    /// callers come: its deadline then ends it.
    pub(crate) fn turn(
        &self,
        class: Priority,
        deadline: Option<Instant>,
    ) -> Result<Turn<'_>, Rejected> {
        let Some(waiters) = &self.waiters else {
            unreachable!("only an ordered gate has waiters")
        };
        let now = Instant::now();
        let mut room = lock_std(&waiters.room);
        let next = match room.booked {
            Some((due, _)) => due.saturating_duration_since(now),
            None => self.wait_for(1).unwrap_or(crate::deadline::NEVER),
        };
        let interval = self
            .interval_at(self.offset(now))
            .saturating_mul(self.share_now());
        let ahead = u64::try_from(room.turns.ahead_of(class)).unwrap_or(u64::MAX);
        let wait = next.saturating_add(std::time::Duration::from_nanos(
            interval.saturating_mul(ahead),
        ));
        if deadline.is_some_and(|deadline| later(now, wait) > deadline.max(now)) {
            return Err(Rejected::RateLimited { retry_in: wait });
        }
        let id = room.turns.join(class);
        Ok(Turn {
            gate: self,
            id: Some(id),
            sleep: None,
        })
    }
}

/// One caller's wait in a gate's waiting room: resolves to its slot, due now. Dropped before,
/// it leaves the room (see the module's docs).
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Turn<'g> {
    gate: &'g RateGate,
    /// Its number in the room, until it is served.
    id: Option<u64>,
    /// The wait for the booked slot, while it is next.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<'g> Turn<'g> {
    fn room(&self) -> std::sync::MutexGuard<'g, Room> {
        let waiters = self
            .gate
            .waiters
            .as_ref()
            .expect("a turn is in an ordered gate");
        lock_std(&waiters.room)
    }
}

impl Future for Turn<'_> {
    type Output = Result<Slot, Rejected>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(id) = this.id else {
            panic!("`Turn` polled after it completed");
        };
        loop {
            let mut room = this.room();
            if room.turns.next() != Some(id) {
                room.turns.wait(id, cx.waker());
                drop(room);
                this.sleep = None;
                return Poll::Pending;
            }
            let now = Instant::now();
            let due = match room.booked {
                Some((due, _)) => due,
                None => match this.gate.reserve_slot(1, None) {
                    Ok((wait, slot)) => {
                        let due = later(now, wait);
                        room.booked = Some((due, slot));
                        due
                    }
                    Err(refused) => {
                        room.turns.leave(id);
                        drop(room);
                        this.id = None;
                        return Poll::Ready(Err(refused));
                    }
                },
            };
            if due <= now {
                let (_, slot) = room.booked.take().expect("booked above");
                room.turns.serve(id);
                drop(room);
                this.id = None;
                return Poll::Ready(Ok(slot));
            }
            // Woken by the slot's time, or by a change of who is next.
            room.turns.wait(id, cx.waker());
            drop(room);
            let sleep = match &mut this.sleep {
                Some(sleep) => {
                    if sleep.deadline() != due {
                        sleep.as_mut().reset(due);
                    }
                    sleep
                }
                sleep => sleep.insert(Box::pin(tokio::time::sleep_until(due))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let gate = self.gate;
        let mut room = self.room();
        room.turns.leave(id);
        // The last waiter gone: the slot booked for it goes back, so no one waits for it.
        if room.turns.is_empty() {
            if let Some((_, slot)) = room.booked.take() {
                gate.refund(slot);
            }
        }
    }
}

impl std::fmt::Debug for Turn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").field("id", &self.id).finish()
    }
}
