//! A learning gate's book: the slots it reserved, given back, forgotten after a hold, and
//! placed again by the answers (see the [module docs](super)).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    BeforeReset, Booked, Learning, State, BOOKED_AT_MOST, PROBE_RECHECK, SLOT_RECHECK,
    STARTED_AT_MOST,
};
use crate::deadline::later;
use crate::gate::{nanos, RateGate, Slot};
use crate::sync::lock_std;

impl RateGate {
    /// Books `cost` units reserved by a learning gate, to start at `start`, the schedule
    /// going from `from` to `end`, in its `state`; the count after them marks the slot. The
    /// floor takes them at the declared interval (`share` times it for a shared gate's share).
    pub(in crate::gate) fn book(
        &self,
        state: &mut State,
        cost: u64,
        (start, from, end): (u64, u64, u64),
        share: u64,
    ) -> u64 {
        let Some(learning) = &self.learning else {
            return 0;
        };
        let now = self.offset(Instant::now());
        let started = (state.booked.iter())
            .take_while(|booked| booked.start <= now && booked.end <= now)
            .count();
        if started >= STARTED_AT_MOST || state.booked.len() >= BOOKED_AT_MOST {
            state.booked.pop_front();
        }
        let mark = learning
            .reserved
            .fetch_add(cost, Ordering::AcqRel)
            .saturating_add(cost);
        let floor = state.floor;
        state.floor = floor
            .max(start)
            .saturating_add(self.interval.saturating_mul(share).saturating_mul(cost));
        let looks = self.next_look(start);
        // A gate per key mostly has one call in flight: room for one, not the four a first
        // push makes, keeps a key within `Keys::MAX_BYTES_PER_KEY`; more grow as usual.
        if state.booked.capacity() == 0 {
            state.booked.reserve_exact(1);
        }
        state.booked.push_back(Booked {
            start,
            looks,
            from,
            end,
            floor,
            mark,
            units: cost,
        });
        mark
    }

    /// `slot` went back unused: it is no longer booked, and once it and every slot promised
    /// after it went back, the schedule and the floor go back to where they stood before it.
    /// Whether the schedule went back at once.
    pub(in crate::gate) fn unbook(&self, slot: Slot) -> bool {
        self.unbook_kept(slot, true)
    }

    /// [`RateGate::unbook`] if `slot` is the latest the schedule promised: otherwise it stays
    /// booked, its holder's (see [`RateGate::refund_if_latest`]). Whether it went back.
    pub(in crate::gate) fn unbook_if_latest(&self, slot: Slot) -> bool {
        self.unbook_kept(slot, false)
    }

    /// [`RateGate::unbook`]; a slot that cannot go back at once is kept for later if `keep`,
    /// or left booked.
    fn unbook_kept(&self, slot: Slot, keep: bool) -> bool {
        let Some(mut state) = self.learning_state() else {
            return false;
        };
        let found = state.booked.iter().position(|b| b.mark == slot.mark());
        if slot.is_off_schedule() {
            if let Some(booked) = found
                .filter(|_| keep)
                .and_then(|at| state.booked.remove(at))
            {
                // Given back unused: its units are left until the reset again (an
                // answer since counted them as promised, not in what it left).
                if state.spare.until > self.offset(Instant::now()) {
                    state.spare.units = state.spare.units.saturating_add(booked.units);
                }
            }
            return false;
        }
        let Some(at) = found else {
            return false;
        };
        let booked = state.booked[at];
        let now = self.offset(Instant::now());
        state.given.retain(|kept| kept.end > now);
        let back = self.unbook_back(&mut state, &booked);
        if back || keep {
            state.booked.remove(at);
        }
        if !back {
            if keep && booked.end <= self.tat.load(Ordering::Acquire) {
                state.given.push(booked);
                if booked.start > now {
                    self.close_hole(&mut state, &booked, at, now);
                }
            }
            return false;
        }
        // The slots before it given back earlier follow it, as far as they reach.
        let mut tat = booked.from;
        while let Some(at) = state.given.iter().position(|kept| kept.end == tat) {
            let kept = state.given.swap_remove(at);
            if !self.unbook_back(&mut state, &kept) {
                break;
            }
            tat = kept.from;
        }
        state.given.retain(|kept| kept.end < tat);
        true
    }

    /// A caller gave up `hole`, a slot ahead with others booked after it (at `at` in the book
    /// before it left): they are placed again at the pace learnt, as an answer would place
    /// them, from where the schedule stood before the first of them or the hole, and the
    /// declared floor no longer counts the hole's units. Left booked where they were, the
    /// callers behind slots given up would wait for starts that never come: a pace briefly
    /// slow (a flapping "limit 1") booked ten callers a window apart, eight gave up, and the
    /// last started nine windows later, the gate idle, no call in flight to bring the answer
    /// that places them again. Not for a shared gate: its slots mirror the store's schedule.
    fn close_hole(&self, state: &mut State, hole: &Booked, at: usize, now: u64) {
        #[cfg(feature = "shared")]
        if self.shared.is_some() {
            return;
        }
        let Some(learning) = &self.learning else {
            return;
        };
        let Some(first) = state.booked.iter().find(|booked| booked.start > now) else {
            return;
        };
        let from = first.from.min(hole.from).max(state.paced);
        // A schedule that runs past every slot booked or given back was moved there (to an
        // auto gate's reset, what comes before it being what the answer said is left): it
        // stays, or callers to come would take slots before the reset on top of it.
        let tat = self.tat.load(Ordering::Acquire);
        let ends = (state.booked.iter())
            .chain(&state.given)
            .map(|booked| booked.end);
        let moved = (ends.max().unwrap_or(0) < tat).then_some(tat);
        // The first of them after it counted its units in the floor before it.
        if let Some(next) = state.booked.get_mut(at).filter(|next| next.start > now) {
            next.floor = next.floor.min(hole.floor);
        }
        // What the schedule before them ends with, as the answered call's slot would.
        let before = Booked {
            start: from,
            units: 0,
            ..*hole
        };
        self.replace(learning, state, &before, now);
        if let Some(tat) = moved {
            self.resume_at(state, tat);
        }
    }

    /// Whether `slot` is the latest the schedule promised.
    pub(in crate::gate) fn booked_last(&self, slot: Slot) -> bool {
        let Some(state) = self.learning_state() else {
            return false;
        };
        let tat = self.tat.load(Ordering::Acquire);
        (state.booked.iter()).any(|booked| booked.mark == slot.mark() && booked.end == tat)
    }

    /// When `slot` starts (ns since the origin): where its book places it now, or where it
    /// was placed, once forgotten.
    pub(in crate::gate) fn start_of(&self, slot: Slot) -> u64 {
        let Some(state) = self.learning_state() else {
            return slot.end.get();
        };
        let booked = state
            .booked
            .iter()
            .find(|booked| booked.mark == slot.mark());
        booked.map_or(slot.end.get(), |booked| booked.start)
    }

    /// The schedule runs at least to `until`: the slots given back before it no longer lead
    /// to its end.
    pub(super) fn resume_at(&self, state: &mut State, until: u64) {
        if self.tat.fetch_max(until, Ordering::AcqRel) < until {
            state.given.clear();
        }
    }

    /// Moves the schedule and the floor back to where they stood before `booked`, if the
    /// schedule still ends with it. Whether it did.
    fn unbook_back(&self, state: &mut State, booked: &Booked) -> bool {
        let back = (self.tat)
            .compare_exchange(booked.end, booked.from, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if back {
            state.floor = booked.floor;
        }
        back
    }

    /// A hold revoked every slot that starts after `now` (they are booked again after it),
    /// and what an auto gate could hand out at once; the slots still counted end by `used`.
    pub(in crate::gate) fn unbook_after(&self, now: u64, used: u64) {
        if let Some(mut state) = self.learning_state() {
            state.booked.retain(|booked| booked.start <= now);
            state.given.clear();
            state.spare = BeforeReset::default();
            // The slots started end by `used` in the declared schedule too.
            state.floor = state.floor.min(used);
        }
    }

    /// Puts the slots booked ahead of `now` again at the pace learnt, in their order, after
    /// the answered call's slot and those started (each taking its units at that pace), never
    /// before the floor, and only when that brings the schedule sooner: slots booked while
    /// the pace was briefly slow are not kept there once it recovers. No slot starts later
    /// than it was promised: a caller keeps the slot its deadline was judged by. Their
    /// callers find their new start at their next look ([`RateGate::due`]). A shared gate
    /// deciding alone (its store down) places them at its share of the rate, as it reserved
    /// them.
    pub(super) fn replace(
        &self,
        learning: &Learning,
        state: &mut State,
        answered: &Booked,
        now: u64,
    ) {
        let share = self.share_now();
        let interval = self.learnt_interval(learning).saturating_mul(share);
        let window = state.window.get();
        let taken = |units| self.extent(learning, window, interval, units, share);
        let tat = self.tat.load(Ordering::Acquire);
        let ahead = |booked: &&Booked| booked.start > now;
        let floor = (state.booked.iter().find(ahead)).map_or(state.floor, |booked| booked.floor);
        let started = (state.booked.iter().filter(|booked| !ahead(booked)))
            .chain([answered])
            .map(|booked| booked.start.saturating_add(taken(booked.units)))
            .max()
            .unwrap_or(0);
        state.paced = started;
        // No slot goes before a throttle's hold ends: the answer of a call that was in flight
        // when the 429 came says nothing of the wait it asked for.
        let earliest = now.max(self.held_until.load(Ordering::Acquire));
        // Each slot ahead, from the schedule and floor before it: its start, and the schedule
        // and floor after it.
        // Nor before its caller looks: callers that booked together look together, and a
        // slot placed before that would start with all the others placed before it, at once.
        let place = |(next, floor): (u64, u64), booked: &Booked| {
            let units = booked.units;
            let from = next.max(earliest).max(booked.looks);
            let start = (self.allowed_at_share(from, units, share))
                .max(earliest)
                .max(booked.looks);
            let floor = floor
                .max(start)
                .saturating_add(self.interval.saturating_mul(share).saturating_mul(units));
            (start, from.saturating_add(taken(units)), floor)
        };
        let base = (started.max(floor), floor);
        let (end, _) = (state.booked.iter().filter(ahead)).fold(base, |placed, booked| {
            let (_, next, floor) = place(placed, booked);
            (next, floor)
        });
        if end >= tat {
            return;
        }
        if (self.tat)
            .compare_exchange(tat, end, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // A hold meanwhile: it placed the schedule.
            return;
        }
        // The slots given back were placed otherwise: they no longer lead to it.
        state.given.clear();
        let mut placed = base;
        for booked in state.booked.iter_mut().filter(|booked| booked.start > now) {
            let (start, next, floor) = place(placed, booked);
            // Sooner, never later than promised: its caller was told it fits in its deadline
            // (a hole closed up at a slower pace would move the slots before it later).
            (booked.start, booked.from, booked.end) = (start.min(booked.start), placed.0, next);
            // The declared schedule before it, as placed now: what giving it back restores
            // and what the next placing starts from.
            booked.floor = placed.1;
            placed = (next, floor);
        }
        state.floor = placed.1;
    }

    /// The schedule `units` take at `interval` nanoseconds each (`share` times the declared
    /// one for a shared gate's share): at most a window once answers stated figures, since
    /// a provider counts no more than its limit in a window whatever one call costs (a
    /// flapping "limit 1" must not book a call of 100 units a hundred windows ahead), and
    /// never less than the declared interval allows.
    pub(in crate::gate) fn extent(
        &self,
        learning: &Learning,
        window: u64,
        interval: u64,
        units: u64,
        share: u64,
    ) -> u64 {
        let paced = interval.saturating_mul(units);
        if learning.learnt() == 0 {
            return paced;
        }
        let declared = self.interval.saturating_mul(share).saturating_mul(units);
        paced.min(window.max(declared))
    }

    /// What `cost` units take of the schedule now, as this gate books them: for a learning
    /// gate, no more than the window its provider stated (or the declared pace), however
    /// slow the pace it learnt. What the shared store is asked to book and charged, so that
    /// one answer stating `limit 0` does not push a shared token gate's schedule hours ahead
    /// (the simulator's `recovers_after_quiet`, issue 46).
    #[cfg(feature = "shared")]
    pub(crate) fn taken_by(&self, cost: u64) -> u64 {
        let interval = self.interval_now();
        match (&self.learning, self.learning_state()) {
            (Some(knows), Some(state)) => self.extent(knows, state.window(), interval, cost, 1),
            _ => interval.saturating_mul(cost),
        }
    }

    /// When a learning gate's `slot` starts now that answers may have placed it again
    /// (`None`: at once, or not a learning gate's): its caller looks again at most every
    /// [`SLOT_RECHECK`] until then.
    pub(crate) fn due(&self, slot: Slot) -> Option<Instant> {
        let learning = self.learning.as_ref()?;
        if slot.is_off_schedule() {
            return None;
        }
        let mut state = lock_std(&learning.state);
        let start = match state.booked.iter_mut().find(|b| b.mark == slot.mark()) {
            Some(booked) => {
                booked.looks = self.next_look(booked.start);
                booked.start
            }
            None => slot.end.get(),
        };
        Some(later(self.origin, Duration::from_nanos(start)))
    }

    /// When `slot` of `cost` units may start: [`RateGate::due_unlearnt`], or for a learning
    /// gate where its book places it now (at once, for one handed out apart from its
    /// schedule; a look again soon, for a wait for the probe's answer). Unlike
    /// [`RateGate::due`], not its holder's look: an estimate.
    pub(crate) fn due_at(&self, slot: Slot, cost: u64) -> Instant {
        let now = Instant::now();
        if self.learning.is_none() {
            return self.due_unlearnt(slot, cost);
        } else if slot.is_provisional() {
            return later(now, PROBE_RECHECK);
        } else if slot.is_off_schedule() {
            return now;
        }
        let start = Duration::from_nanos(self.start_of(slot));
        later(self.origin, start)
    }

    /// When the caller of a slot starting at `start` looks at it next: at its start, or
    /// [`SLOT_RECHECK`] from now if that comes first (as the attempt's timer does).
    fn next_look(&self, start: u64) -> u64 {
        let recheck = self
            .offset(Instant::now())
            .saturating_add(nanos(SLOT_RECHECK));
        start.min(recheck)
    }
}
