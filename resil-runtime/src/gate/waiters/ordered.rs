//! A gate that orders its waiters: made so, and what a newcomer's wait in its room is.

use std::time::Duration;

use tokio::time::Instant;

use super::{GateRoom, Waiters};
use crate::deadline::later;
use crate::gate::{RateGate, Slot};
use crate::priority::{Place, Priority};
use crate::Rejected;

impl RateGate {
    /// Callers that must wait for a slot are served by priority (see
    /// [`Priority`](crate::Priority)), and round-robin across up to `lanes` `fair` values.
    pub(crate) fn ordered(mut self, lanes: usize) -> Self {
        self.waiters = Some(Box::new(Waiters::new(lanes)));
        self
    }

    /// [`RateGate::ordered`], for a token gate: its waiters' lanes take turns by the units
    /// they were served, not by calls.
    pub(crate) fn ordered_by_units(mut self, lanes: usize) -> Self {
        self.waiters = Some(Box::new(Waiters::weighed(lanes)));
        self
    }

    /// Whether callers that must wait are served by priority.
    pub(crate) fn orders(&self) -> bool {
        self.waiters.is_some()
    }

    /// The deadline a reservation in arrival order is refused by: none where callers that
    /// must wait are served by priority, since that order holds the slot booked for the
    /// room's next caller, which a more urgent (or, in a token gate, cheaper) caller takes in
    /// its place: its room judges its wait ([`Turn::join`]).
    #[inline]
    pub(crate) fn refuses_by(&self, deadline: Option<Instant>) -> Option<Instant> {
        deadline.filter(|_| self.waiters.is_none())
    }

    /// Where the slot the waiting room booked for its next waiter ends, if it booked one
    /// (gate offsets). A shared gate's room books alone (the store down or late).
    #[cfg(feature = "shared")]
    pub(in crate::gate) fn room_booked_end(&self) -> Option<u64> {
        let room = self.waiters.as_deref()?.made()?;
        room.booked.map(|(_, slot, _)| slot.end.get())
    }

    /// [`RateGate::reserve_slot`] for the next of the gate's waiting room, with no deadline
    /// (the room judges it): first to what an auto gate may hand out at once.
    pub(super) fn reserve_in_turn(&self, cost: u64) -> Result<(Duration, Slot), Rejected> {
        if let Some(burst) = self.burst_limit().filter(|burst| cost > *burst) {
            return Err(Rejected::OverBurst { cost, burst });
        }
        self.reserve_from(cost, None, true)
    }

    /// The units the room's next waits for, if callers wait (`Some(None)`: not known yet,
    /// the next has booked nothing).
    pub(in crate::gate) fn next_waits_for(&self) -> Option<Option<u64>> {
        let room = self.waiters.as_deref().and_then(Waiters::made)?;
        (!room.turns.is_empty()).then(|| room.booked.map(|(.., cost)| cost))
    }

    /// Wakes the room's next, if callers wait, and expects it now: what an answer says is
    /// left is its to take, and a next left unpolled is passed over for it `SLOT_MISSED`
    /// later rather than after the slot it booked.
    pub(in crate::gate) fn wake_room(&self) {
        if let Some(mut room) = self.waiters.as_deref().and_then(Waiters::made) {
            if !room.turns.is_empty() {
                room.expected = Some(Instant::now());
                room.turns.wake_next();
            }
        }
    }

    pub(super) fn waiters(&self) -> &Waiters {
        self.waiters
            .as_deref()
            .expect("only an ordered gate has waiters")
    }

    /// The wait of a caller at `place` in `room` at `now`, whose slot takes `cost` units:
    /// served first, its slot (the one booked, or one of its cost in its place); behind
    /// others, the slot booked for the next (or the gate's next free one), then one unit for
    /// each other waiter served before it (the least each costs: a token gate's caller is
    /// never refused for a wait it may not have) and its own units; for a batch call held back by the batch share, at least its place
    /// there, after the places of the batch calls before it.
    pub(super) fn turn_wait(
        &self,
        room: &GateRoom,
        place: Place,
        now: Instant,
        cost: u64,
    ) -> Duration {
        let count = |ahead: usize| u64::try_from(ahead).unwrap_or(u64::MAX);
        let ahead = count(room.turns.ahead_of(place));
        let mut wait = match (room.booked, ahead) {
            // It takes the slot booked, or one of its cost in its place.
            (Some((due, _, booked)), 0) if booked == cost => due.saturating_duration_since(now),
            // Too few units, and a slot promised after it: it is given up, and this one's
            // units come after the schedule.
            (Some((_, slot, booked)), 0) if booked < cost && !self.is_latest(slot) => {
                self.wait_for(cost).unwrap_or(crate::deadline::NEVER)
            }
            (Some((_, slot, _)), 0) => self.due_at(slot, cost).saturating_duration_since(now),
            (None, 0) => self.wait_for(cost).unwrap_or(crate::deadline::NEVER),
            (booked, _) => {
                // From the next's slot, even past (its waiter late for it, and soon passed
                // over): from now, the wait would be overstated by that lateness.
                let next = match booked {
                    Some((due, ..)) => due,
                    None => later(now, self.wait_for(1).unwrap_or(crate::deadline::NEVER)),
                };
                let interval = self
                    .interval_at(self.offset(now))
                    .saturating_mul(self.share_now());
                let units = (ahead - 1).saturating_add(cost.max(1));
                let after = Duration::from_nanos(interval.saturating_mul(units));
                later(next, after).saturating_duration_since(now)
            }
        };
        let share = self.batch().filter(|_| place.class() == Priority::Batch);
        if let Some(share) = share.filter(|share| room.holds_back(share)) {
            let before = count(room.turns.ahead_in_class(place).saturating_sub(room.placed));
            wait = wait.max(share.wait_after(before));
        }
        wait
    }
}
