//! A shared gate's share of its rate while its store is down: each instance's local gate runs
//! at the declared rate divided by the instances the store last saw using it, so that together
//! they keep about the declared rate instead of sending it once each.

use super::RateGate;
#[cfg(feature = "shared")]
use super::Slot;
#[cfg(feature = "shared")]
use crate::seams::Alone;

impl RateGate {
    /// [`RateGate::allowed`] for a gate that runs at `1 / share` of its rate, with its burst
    /// divided too (at least one).
    #[inline]
    pub(super) fn allowed_at_share(&self, from: u64, cost: u64, share: u64) -> u64 {
        if self.auto {
            // No burst: each call passes when the schedule reaches it.
            return from;
        }
        let interval = self.interval.saturating_mul(share);
        let credit = interval.saturating_mul((self.burst / share).max(1));
        from.saturating_add(interval.saturating_mul(cost))
            .saturating_sub(credit)
    }

    /// How far past now the slots this gate granted alone and its callers still hold (or its
    /// waiting room booked for them) run its schedule (ns; 0: none): what its next
    /// reservation in the store charges first, so that the store's schedule counts them.
    #[cfg(feature = "shared")]
    pub(crate) fn ahead_alone(&self) -> Alone {
        let Some(link) = &self.shared else {
            return Alone::default();
        };
        // The slot its waiting room booked for the next waiter is held alone from its booking.
        let room = (self.room_booked_end()).map_or(0, |end| {
            end.saturating_sub(self.offset(tokio::time::Instant::now()))
        });
        let alone = link.ahead_alone();
        Alone {
            held: alone.held.max(room),
            ..alone
        }
    }

    /// `slot` of `cost` units, granted alone: how far past now it runs the schedule (a
    /// learning gate's slot holds one interval from its start, one off the schedule one
    /// interval from now), charged to the store until it is given back (see
    /// [`GateLink::granted_alone`](crate::seams::GateLink::granted_alone)); what to give back.
    #[cfg(feature = "shared")]
    pub(crate) fn granted_alone(&self, slot: Slot, cost: u64) -> u64 {
        let Some(link) = &self.shared else {
            return 0;
        };
        let now = self.offset(tokio::time::Instant::now());
        let held = self.taken_by(cost);
        let end = match (slot.is_off_schedule(), self.learning.is_some()) {
            (true, _) => now.saturating_add(held),
            (false, true) => slot.end.get().saturating_add(held),
            (false, false) => slot.end.get(),
        };
        link.granted_alone(end.saturating_sub(now))
    }

    /// Whether the gate decides alone: no store spaces its slots from other instances'.
    pub(crate) fn is_local(&self) -> bool {
        #[cfg(feature = "shared")]
        if self.shared.is_some() {
            return false;
        }
        true
    }

    /// The part of its rate the gate may take when it decides alone: all of it, except for a
    /// shared gate while its store is down, which takes its instance's share (see
    /// [`GateLink::share`](crate::seams::GateLink::share)), never below one unit per period:
    /// a store counting more instances than the rate has units (or answering `u64::MAX`,
    /// whose interval saturated and let every call through) leaves one.
    #[inline]
    pub(super) fn share_now(&self) -> u64 {
        #[cfg(feature = "shared")]
        if let Some(link) = &self.shared {
            return link.share().clamp(1, self.count.max(1));
        }
        1
    }
}
