//! A gate's waiting room, for a policy that orders its waiters by [`Priority`]: the callers that
//! must wait for a slot wait here, and each slot goes, when it comes due, to the waiter served
//! next (see [`Turns`]), not to the one that asked first.
//!
//! The room books one slot at a time in the gate's schedule, for whoever is next when it comes
//! due: the gate keeps its rate for all callers together, and a more urgent caller arriving
//! meanwhile takes that slot. A caller that needs no wait never comes here (the gate's own
//! path, unchanged, serves it); one that gives up leaves no hole: the next waiter takes the
//! slot booked, and the last one gives it back to the gate. The room is made at the first wait
//! and let go once nobody waits, so a key's gate keeps none between waits.
//!
//! A token gate's slot is of the units its waiter costs: one booked for a waiter of another
//! cost, who was next then, goes back when another becomes next, and that one books its own;
//! if a slot was promised after it, it cannot go back, and the new next takes it if its units
//! are enough (otherwise it is given up: see [`RateGate::refund`]).
//!
//! A learning gate's slot booked so follows the answers as any caller's does (its next looks
//! at it every [`SLOT_RECHECK`]: an answer places it no sooner than that look), and what an
//! auto gate's answer says is left goes to the next first: the answer wakes it, and a caller
//! that needs no wait takes none of it while the next could (see `RateGate::spare_slot`).

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use super::{BatchShare, RateGate, Slot, SLOT_MISSED, SLOT_RECHECK};
use crate::deadline::{later, slept};
use crate::priority::{Idle, Locked, Place, Priority, Served, Turns};
use crate::Rejected;

/// The waiters of one gate, and the slot booked for the next of them.
pub(crate) type Waiters = crate::priority::Room<GateRoom>;

/// The room of the gate's waiters.
fn room(waiters: &Waiters) -> Locked<'_, GateRoom> {
    waiters.lock(|turns| GateRoom {
        turns,
        booked: None,
        expected: None,
        aside: None,
        placed: 0,
    })
}

#[derive(Debug)]
pub(crate) struct GateRoom {
    turns: Turns,
    /// The slot booked for whoever is next when it comes due, and its cost (in a token gate,
    /// the units of the waiter that was next when it was booked).
    booked: Option<(Instant, Slot, u64)>,
    /// When the next waiter is to come back for its slot (or its place in the batch share):
    /// the watchers pass it over if it has not come by then and [`SLOT_MISSED`] (the closest
    /// watcher; the next ones one and two more later, in case it is left unpolled too).
    expected: Option<Instant>,
    /// When the waiter that stepped aside for its place in the batch share comes back (see
    /// [`Turns::step_aside`]).
    aside: Option<Instant>,
    /// The waiters that hold their place in the batch share (the one aside, one back from
    /// it): counted once, in the share, against a newcomer's deadline.
    placed: usize,
}

impl Idle for GateRoom {
    fn is_idle(&self) -> bool {
        self.turns.is_idle() && self.booked.is_none()
    }
}

impl GateRoom {
    /// Waiter `id` leaves. If it was the next, the new next (woken) is expected back for the
    /// slot booked, or now.
    fn leave(&mut self, id: u64) {
        if self.turns.next() == Some(id) {
            let due = self.booked.map_or_else(Instant::now, |(due, ..)| due);
            self.expected = Some(due);
        }
        self.turns.leave(id);
        if self.turns.is_empty() {
            self.expected = None;
        }
        self.let_go_aside();
    }

    /// The waiter aside is woken once no other class waits: the share may hold nothing back.
    fn let_go_aside(&mut self) {
        if !self.turns.others_wait(Priority::Batch) {
            self.turns.wake_aside();
        }
    }

    /// Whether `share` holds batch calls back: calls of other classes came within the gate's
    /// period, or wait in this room.
    fn holds_back(&self, share: &BatchShare) -> bool {
        share.holds_back(Priority::Batch) || self.turns.others_wait(Priority::Batch)
    }

    /// When the next is to come back for what comes due for it: its place in the batch share
    /// if it stepped aside for it, otherwise its slot.
    fn watched(&self) -> Option<Instant> {
        let next = self.turns.next()?;
        match self.turns.is_aside(next) {
            true => self.aside,
            false => self.expected,
        }
    }

    /// A waiter that stepped aside and did not come back [`SLOT_MISSED`] after its place in
    /// the share is passed over by another (`by`): its class would otherwise wait behind it
    /// for as long as others come.
    fn pass_over_aside(&mut self, now: Instant, by: u64) {
        let Some(at) = self.aside else {
            return;
        };
        if now < later(at, SLOT_MISSED) || self.turns.is_aside(by) {
            return;
        }
        self.aside = None;
        if let Some(stalled) = self.turns.aside() {
            self.turns.pass_over(stalled);
        }
    }
}

impl<G: Deref<Target = RateGate>> Turn<G> {
    /// A caller at `place` waits for its slot in `gate` (borrowed, or held with the key whose
    /// gate it is): refused at once, with [`Rejected::RateLimited`], when the waiters served
    /// before it (the more urgent ones, and those of its class served before its lane's turn)
    /// take the slots until after `deadline`. Its wait may grow while it waits, as more urgent
    /// callers come: its deadline then ends it. A batch call takes its place in the gate's
    /// batch share, if the share holds it back, when its turn comes. Its slot is of `cost`
    /// units (a token gate's; 1 in a rate gate).
    pub(crate) fn join(
        gate: G,
        place: Place,
        deadline: Option<Instant>,
        cost: u64,
    ) -> Result<Self, Rejected> {
        let id = Self::enter(&gate, place, deadline, cost)?;
        let share = match place.class() {
            Priority::Batch if gate.batch().is_some() => Share::Due,
            _ => Share::Taken,
        };
        Ok(Turn {
            gate,
            wait: Wait {
                id: Some(id),
                since: Instant::now(),
                place,
                deadline,
                cost,
                share,
                sleep: None,
            },
        })
    }

    /// Its number in the room, unless refused (see [`Turn::join`]).
    fn enter(
        gate: &RateGate,
        place: Place,
        deadline: Option<Instant>,
        cost: u64,
    ) -> Result<u64, Rejected> {
        let now = Instant::now();
        let mut room = room(gate.waiters());
        let wait = gate.turn_wait(&room, place, now, cost);
        if deadline.is_some_and(|deadline| later(now, wait) > deadline.max(now)) {
            return Err(Rejected::RateLimited { retry_in: wait });
        }
        Ok(room.turns.join_costing(place, cost))
    }
}

/// One caller's wait in a gate's waiting room: resolves to its slot, due now, and how it was
/// served. Dropped before, it leaves the room (see the module's docs).
#[must_use = "futures do nothing unless polled"]
pub(crate) struct Turn<G: Deref<Target = RateGate>> {
    gate: G,
    wait: Wait,
}

/// Where a caller stands in the room.
struct Wait {
    /// Its number in the room, until it is served.
    id: Option<u64>,
    /// When it joined.
    since: Instant,
    /// Where it joined, to join again if it was passed over.
    place: Place,
    deadline: Option<Instant>,
    /// The units its slot takes.
    cost: u64,
    /// Where a batch call stands with the gate's batch share.
    share: Share,
    /// The wait for the booked slot (or for its place in the batch share), while it is next.
    sleep: Option<Pin<Box<Sleep>>>,
}

/// A waiter's place in its gate's batch share (see `batch.rs`).
#[derive(Debug, Clone, Copy)]
enum Share {
    /// Taken, or none to take: on to the gate's slot.
    Taken,
    /// A batch call's, to take when its turn comes.
    Due,
    /// Taken for this instant: the waiter's slot is booked once it comes.
    At(Instant, Slot),
}

impl<G: Deref<Target = RateGate> + Unpin> Future for Turn<G> {
    type Output = Result<(Slot, Served), Rejected>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Turn { gate, wait: this } = &mut *self;
        let gate: &RateGate = gate;
        let Some(mut id) = this.id else {
            panic!("`Turn` polled after it completed");
        };
        loop {
            let mut room = room(gate.waiters());
            let now = Instant::now();
            room.pass_over_aside(now, id);
            if room.turns.was_passed_over(id) {
                // Passed over while it was not polled: it waits again, last of its lane.
                id = room.turns.join_costing(this.place, this.cost);
                this.id = Some(id);
            }
            if room.turns.is_aside(id) {
                let back = match this.share {
                    Share::At(at, _) => at,
                    _ => now,
                };
                // Held back only while others came within the period or wait: once neither,
                // its place in the share goes back and it comes back at once.
                let share = gate.batch();
                if !share.is_some_and(|share| room.holds_back(share)) {
                    this.give_back_share(gate, &mut room);
                } else if now < back {
                    room.turns.wait(id, cx.waker());
                    let until = share.and_then(BatchShare::held_until);
                    let wake = until
                        .filter(|until| *until > now)
                        .map_or(back, |u| u.min(back));
                    drop(room);
                    if slept(&mut this.sleep, wake, cx) {
                        continue;
                    }
                    return Poll::Pending;
                }
                room.turns.come_back(id);
                room.aside = None;
            }
            if room.turns.next() != Some(id) {
                room.turns.wait(id, cx.waker());
                let Some(expected) = room.watched() else {
                    drop(room);
                    this.sleep = None;
                    return Poll::Pending;
                };
                let (late, wake) = room.turns.watch(id, expected, SLOT_MISSED);
                if now < late {
                    drop(room);
                    if slept(&mut this.sleep, wake, cx) {
                        continue;
                    }
                    return Poll::Pending;
                }
                // The next did not come back for what came due: it is passed over, and its
                // slot goes back to the gate.
                if let Some((_, slot, _)) = room.booked.take() {
                    gate.refund(slot);
                }
                room.turns.pass_over_stalled(id);
                // The waiter aside, if another, keeps its time to come back.
                if room.turns.aside().is_none() {
                    room.aside = None;
                }
                // The new next is woken: it is expected now, and watched in turn.
                room.expected = Some(now);
                continue;
            }
            // A throttle revoked the slot booked: the next books one after the throttle's
            // wait, keeping its place in the room (taken as the attempt's, it would be
            // revoked there and its caller would wait again, last). A wait for an auto gate's
            // probe, always revoked, is booked again once it comes: again at every poll, it
            // would wake the watchers at every poll, and a watcher in the same task (a
            // hedge's) would poll it again at once, for ever.
            if room.booked.is_some_and(|(due, slot, _)| {
                gate.is_revoked(slot) && (due <= now || !slot.is_provisional())
            }) {
                room.booked = None;
                room.expected = None;
            }
            // Booked for a waiter of another cost, who was next then (a token gate's): it
            // goes back, and this one books its own; if a slot was promised after it, it
            // cannot go back, and this one takes it if its units are enough.
            if let Some((_, slot, booked)) = room.booked.filter(|(.., cost)| *cost != this.cost) {
                if gate.refund_if_latest(slot) {
                    room.booked = None;
                } else if booked < this.cost {
                    room.booked = None;
                    gate.refund(slot);
                }
            }
            // What an auto gate may hand out at once (an answer said so) is the next's: its
            // slot on the schedule goes back, and it takes that instead.
            if let Some((_, slot, _)) = room
                .booked
                .filter(|(_, slot, _)| !slot.is_off_schedule() && gate.spare_covers_now(this.cost))
            {
                room.booked = None;
                gate.refund(slot);
            }
            match this.share_due(gate, &mut room, now) {
                None => {}
                Some(Ok(at)) => {
                    // It steps aside until its place in the share: the others take the slots
                    // meanwhile (a slot booked stays theirs), and it is served after them.
                    // Told once: it is aside from now, so a watcher in the same task (a
                    // hedge's) is not woken again by it.
                    room.aside = Some(at);
                    room.turns.step_aside(id);
                    room.turns.wait(id, cx.waker());
                    drop(room);
                    if slept(&mut this.sleep, at, cx) {
                        continue;
                    }
                    return Poll::Pending;
                }
                Some(Err(refused)) => {
                    room.leave(id);
                    drop(room);
                    this.id = None;
                    return Poll::Ready(Err(refused));
                }
            }
            let due = match room.booked {
                // An answer may have placed a learning gate's slot sooner (never later): it
                // is looked at again (see `RateGate::due`).
                Some((due, slot, cost)) if gate.learns() && !slot.is_provisional() => {
                    let due = gate.due(slot).map_or(now, |placed| placed.min(due));
                    room.booked = Some((due, slot, cost));
                    // Back: expected for the slot again (an answer expected it at once).
                    room.expected = Some(due);
                    due
                }
                Some((due, ..)) => due,
                None => match gate.reserve_in_turn(this.cost) {
                    Ok((wait, slot)) => {
                        let due = later(now, wait);
                        room.booked = Some((due, slot, this.cost));
                        room.expected = Some(due);
                        room.turns.wake_watcher();
                        due
                    }
                    Err(refused) => {
                        this.give_back_share(gate, &mut room);
                        room.leave(id);
                        drop(room);
                        this.id = None;
                        return Poll::Ready(Err(refused));
                    }
                },
            };
            if due <= now {
                let (_, slot, _) = room.booked.take().expect("booked above");
                room.expected = None;
                if now.saturating_duration_since(due) > SLOT_MISSED {
                    // Back too late for it (see SLOT_MISSED): it goes back, and a new one is
                    // booked.
                    gate.refund(slot);
                    continue;
                }
                let promoted = room.turns.serve(id);
                if let Share::At(..) = this.share {
                    room.placed = room.placed.saturating_sub(1);
                }
                // The new next, woken, is expected now to book its slot: watched from now,
                // in case it is left unpolled.
                room.expected = room.turns.next().map(|_| now);
                room.let_go_aside();
                drop(room);
                this.id = None;
                this.share = Share::Taken;
                let waited = now.saturating_duration_since(this.since);
                return Poll::Ready(Ok((slot, Served { waited, promoted })));
            }
            // Woken by the slot's time (or a learning gate's next look at it), or by a
            // change of who is next.
            room.turns.wait(id, cx.waker());
            drop(room);
            let look = match gate.learns() {
                true => due.min(later(now, SLOT_RECHECK)),
                false => due,
            };
            if !slept(&mut this.sleep, look, cx) {
                return Poll::Pending;
            }
        }
    }
}

impl Wait {
    /// Its place in the batch share, held and not used, goes back.
    fn give_back_share(&mut self, gate: &RateGate, room: &mut GateRoom) {
        if let (Share::At(_, slot), Some(share)) = (self.share, gate.batch()) {
            share.refund(slot);
            room.placed = room.placed.saturating_sub(1);
            self.share = Share::Taken;
        }
    }

    /// For a batch call next in `room`, before it takes a slot: the instant of its place in
    /// the batch share, taken now (and counted in the room) if due and the share holds batch
    /// calls back; `None` once that instant has come (or there is no share to wait for). The
    /// refusal of a place past the deadline.
    fn share_due(
        &mut self,
        gate: &RateGate,
        room: &mut GateRoom,
        now: Instant,
    ) -> Option<Result<Instant, Rejected>> {
        if let Share::Due = self.share {
            let share = gate.batch()?;
            self.share = match room.holds_back(share) {
                false => Share::Taken,
                true => match share.reserve(self.cost, self.deadline) {
                    Ok((wait, slot)) => {
                        room.placed += 1;
                        Share::At(later(now, wait), slot)
                    }
                    Err(refused) => return Some(Err(refused)),
                },
            };
        }
        match self.share {
            Share::At(at, _) if at > now => Some(Ok(at)),
            _ => None,
        }
    }
}

impl<G: Deref<Target = RateGate>> Drop for Turn<G> {
    fn drop(&mut self) {
        let Some(id) = self.wait.id.take() else {
            return;
        };
        let gate: &RateGate = &self.gate;
        let mut room = room(gate.waiters());
        self.wait.give_back_share(gate, &mut room);
        room.leave(id);
        // The last waiter gone: the slot booked for it goes back, so no one waits for it.
        if room.turns.is_empty() {
            if let Some((_, slot, _)) = room.booked.take() {
                gate.refund(slot);
            }
        }
    }
}

impl<G: Deref<Target = RateGate>> std::fmt::Debug for Turn<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn").field("id", &self.wait.id).finish()
    }
}

mod ordered;
#[cfg(test)]
mod tests;
