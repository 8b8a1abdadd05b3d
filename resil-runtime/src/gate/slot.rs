//! [`Slot`]: what a gate promised one attempt, for a refund or a revocation to find.

use std::num::NonZeroU64;
use std::sync::atomic::Ordering;

use super::RateGate;
use crate::sync::lock_std;

/// How late a call may come to its slot and still take it: a timer's granularity and a busy
/// runtime's delay, which on a loaded machine is tens of milliseconds (the real-clock Redis
/// tests, beside two builds, lost their slots at 10 ms and were refused by their deadline).
/// Later (its future left unpolled, as a call shared by coalescing whose first caller left),
/// the slots after it were promised as if it had started: it takes a new one, so that the
/// gate's ceiling holds for the calls' starts, not only for its schedule.
pub(crate) const SLOT_MISSED: std::time::Duration = std::time::Duration::from_millis(100);

/// A slot a gate promised: the gate's schedule before it and after it, and under which
/// throttle it was promised. Three words, since every attempt of a gated call carries two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The schedule before the slot (where its units began: now, if the gate was idle); for a
    /// learning gate, which never takes a slot back into its schedule, the units reserved up
    /// to it instead (its mark: an answer to its call counts those reserved after it as
    /// promised).
    pub(super) from: u64,
    /// The schedule after it; for a learning gate, when it starts (its book keeps the
    /// schedule after it), or [`Slot::OFF_SCHEDULE`] for a slot handed out apart from its
    /// schedule (its probe, or what an answer said may go at once).
    pub(super) end: NonZeroU64,
    pub(super) epoch: u64,
}

impl Slot {
    /// The end of a slot outside the schedule: no schedule reaches it ([`NEVER`] bounds it).
    pub(super) const OFF_SCHEDULE: u64 = u64::MAX;

    pub(super) fn new(from: u64, end: u64, epoch: u64) -> Self {
        Slot {
            from,
            end: NonZeroU64::new(end).unwrap_or(NonZeroU64::MIN),
            epoch,
        }
    }

    /// A learning gate's slot apart from its schedule, marked `mark`: its probe, or one of
    /// what an answer said may go at once.
    pub(super) fn off_schedule(mark: u64, epoch: u64) -> Self {
        Slot::new(mark, Self::OFF_SCHEDULE, epoch)
    }

    /// A wait for the probe's answer: revoked whatever happens (no epoch reaches it), so that
    /// its caller reserves again once the gate knows more.
    pub(super) fn provisional() -> Self {
        Slot::new(0, Self::OFF_SCHEDULE, u64::MAX)
    }

    /// Whether it is a wait for a probe's answer ([`Slot::provisional`]).
    pub(crate) fn is_provisional(&self) -> bool {
        self.epoch == u64::MAX
    }

    /// Whether a learning gate handed it out apart from its schedule.
    pub(crate) fn is_off_schedule(&self) -> bool {
        self.end.get() == Self::OFF_SCHEDULE
    }

    /// A learning gate's slot's mark.
    pub(super) fn mark(&self) -> u64 {
        self.from
    }
}

impl RateGate {
    /// Gives `slot` back, reserved but not used (its call was refused by a later check, or its
    /// caller gave up waiting), so that the next caller does not wait for it: at once while it
    /// is the latest slot promised, otherwise once every slot after it went back too (a gate
    /// never promises one instant twice), unless a throttle revoked it. Whether it went back
    /// at once. A slot is given back at most once by its caller.
    pub(crate) fn refund(&self, slot: Slot) -> bool {
        let mut given = lock_std(&self.revising);
        if self.is_revoked(slot) {
            // A probe held while its caller waited for the other gate's slot (see
            // `execution/probing.rs`) ends all the same: no one else could probe until it was
            // counted lost.
            self.probe_ended(slot);
            return false;
        }
        if self.learning.is_some() {
            // A learning gate's slot keeps its mark where the schedule's start would be: the
            // start is in its book.
            let back = self.unbook(slot);
            self.probe_ended(slot);
            return back;
        }
        let now = self.offset(tokio::time::Instant::now());
        let epoch = slot.epoch;
        // Slots that end by now no longer hold anyone back; a shared gate's epoch also moves
        // with another instance's throttle, which revoked them.
        given.retain(|kept| kept.end.get() > now && kept.epoch == epoch);
        let Some(tat) = self.take_back(slot.end.get(), slot.from) else {
            // Later slots are still promised (a slot past the schedule went back already).
            if slot.end.get() <= self.tat.load(Ordering::Acquire) && !given.contains(&slot) {
                given.push(slot);
            }
            return false;
        };
        self.given_follow(&mut given, tat);
        true
    }

    /// Gives `slot` back if it is the latest slot promised (and not revoked): otherwise it
    /// stays its holder's, and nothing is kept for later. Whether it went back. A waiting
    /// room's slot booked for one waiter, which another would take in its place, goes back so
    /// or not at all: kept for later behind a slot promised after it, its units would never
    /// be handed out.
    pub(crate) fn refund_if_latest(&self, slot: Slot) -> bool {
        let mut given = lock_std(&self.revising);
        if self.is_revoked(slot) {
            return false;
        }
        if self.learning.is_some() {
            return self.unbook_if_latest(slot);
        }
        let Some(tat) = self.take_back(slot.end.get(), slot.from) else {
            return false;
        };
        self.given_follow(&mut given, tat);
        true
    }

    /// The schedule went back to `tat`: the slots before it given back earlier follow it, as
    /// far as they reach.
    fn given_follow(&self, given: &mut Vec<Slot>, mut tat: u64) {
        while let Some(at) = given.iter().position(|kept| kept.end.get() == tat) {
            let kept = given.swap_remove(at);
            match self.take_back(tat, kept.from) {
                Some(before) => tat = before,
                None => break,
            }
        }
        // What ends after the schedule now went back with a later slot.
        given.retain(|kept| kept.end.get() < tat);
    }

    /// Moves the schedule back from `end` to `from` if it still ends there: the schedule
    /// then, or `None`.
    fn take_back(&self, end: u64, from: u64) -> Option<u64> {
        (self.tat)
            .compare_exchange(end, from, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| from)
    }

    /// When `slot` of `cost` units, of a gate that does not learn, may start: as its
    /// reservation allowed, from where its units began in the schedule (its `from`). From the
    /// schedule's end it would be later by a slowdown's surplus, which took a call past its
    /// deadline (seed 76 of the simulator).
    pub(crate) fn due_unlearnt(&self, slot: Slot, cost: u64) -> tokio::time::Instant {
        let due = self.allowed_at_share(slot.from, cost, self.share_now());
        crate::deadline::later(self.origin, std::time::Duration::from_nanos(due))
    }

    /// Whether `slot` is the latest the gate promised (one given back goes back at once).
    pub(crate) fn is_latest(&self, slot: Slot) -> bool {
        match self.learning {
            None => self.tat.load(Ordering::Acquire) == slot.end.get(),
            Some(_) => self.booked_last(slot),
        }
    }

    /// Whether a throttle revoked `slot` since it was reserved.
    pub(crate) fn is_revoked(&self, slot: Slot) -> bool {
        self.epoch() != slot.epoch
    }

    /// When the latest throttle's hold ends, if it is still in force at `now`: a shared gate
    /// asks the store for no slot before then, since the store may not have heard of a hold
    /// this instance made (it goes there in the background) or heard of; and a call whose
    /// slot here went back while its other gate's came gives that one back rather than hold
    /// it through the hold (`execution/tokens.rs`).
    pub(crate) fn held_until(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let until = self.held_until.load(Ordering::Acquire);
        (until > self.offset(now))
            .then(|| crate::deadline::later(self.origin, std::time::Duration::from_nanos(until)))
    }
}
