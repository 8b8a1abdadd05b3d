//! Each instance's share of a shared gate's rate while its store is down: a reservation
//! tells the store, once a [`BEAT_EVERY`], that this instance uses the gate (a heartbeat,
//! [`Ask::heartbeat`](super::Ask::heartbeat)), and the store may answer how many instances
//! use it ([`Slot::with_instances`](super::Slot::with_instances)). While the store is down,
//! this instance's local gate runs at the rate divided by that count.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::links::GateLink;
use crate::sync::lock_std;

/// How often an instance tells a shared gate's store that it uses the gate, with a
/// reservation it makes anyway.
pub(crate) const BEAT_EVERY: Duration = Duration::from_secs(1);

/// The most slots granted alone a link keeps charging: those that end latest (the charge is
/// the latest end; one given back among them lets the next latest be charged).
const ALONE_KEPT: usize = 256;

/// How long an instance counts among a gate's users after its last heartbeat.
pub(crate) const SEEN_FOR: Duration = Duration::from_secs(5);

impl GateLink {
    /// Whether this reservation should tell the store that this instance uses the gate (a
    /// heartbeat): once per [`BEAT_EVERY`], claimed by one reservation.
    pub(crate) fn beat_due(&self) -> bool {
        let now = self.since_created();
        let last = self.beat_at.load(Ordering::Acquire);
        let every = u64::try_from(BEAT_EVERY.as_nanos()).unwrap_or(u64::MAX);
        (last == 0 || now.saturating_sub(last) >= every)
            && (self.beat_at)
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The heartbeat claimed by [`GateLink::beat_due`] was not granted: the next reservation
    /// carries it.
    pub(crate) fn beat_missed(&self) {
        self.beat_at.store(0, Ordering::Release);
    }

    /// The local gate granted a slot alone that runs its schedule `ahead` (ns) past now:
    /// until its caller gives it back (or the schedule passes its end), every reservation in
    /// the store charges it first (see [`Ask::alone`](super::Ask::alone)). What to give back
    /// ([`GateLink::alone_given_back`]).
    pub(crate) fn granted_alone(&self, ahead: u64) -> u64 {
        let now = self.since_created();
        let until = now.saturating_add(ahead.max(1));
        let mut alone = lock_std(&self.alone);
        alone.retain(|&end| end > now);
        if alone.len() >= ALONE_KEPT {
            // Only the latest end is charged: the soonest may go.
            let soonest = (0..alone.len()).min_by_key(|&at| alone[at]);
            match soonest.filter(|&at| alone[at] < until) {
                Some(at) => _ = alone.swap_remove(at),
                None => return until,
            }
        }
        alone.push(until);
        until
    }

    /// The slot granted alone that ended at `until` went back (its caller gave up, or the
    /// store's return revoked it, and it asks the store instead): it is charged no more.
    pub(crate) fn alone_given_back(&self, until: u64) {
        let mut alone = lock_std(&self.alone);
        if let Some(at) = alone.iter().position(|&end| end == until) {
            alone.swap_remove(at);
        }
    }

    /// How far past now the slots granted alone and still held run the local schedule (ns;
    /// 0: none): what a reservation charges the store's schedule first. Only those: the rest
    /// of the local schedule is the store's own slots mirrored, or was given back.
    pub(crate) fn ahead_alone(&self) -> u64 {
        let now = self.since_created();
        let mut alone = lock_std(&self.alone);
        alone.retain(|&end| end > now);
        alone.iter().max().map_or(0, |end| end - now)
    }

    /// Now, in ns from the link's creation (at least 1: 0 means never).
    pub(crate) fn since_created(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// The store says `instances` use the gate (this one included): the share this instance
    /// takes while the store is down.
    pub(crate) fn saw(&self, instances: u64) {
        if instances > 0 {
            let instances = u32::try_from(instances).unwrap_or(u32::MAX);
            self.seen.store(instances, Ordering::Release);
        }
    }

    /// The instances the store last said use the gate (1 until it said).
    pub(crate) fn instances(&self) -> u64 {
        u64::from(self.seen.load(Ordering::Acquire).max(1))
    }

    /// The part of the rate this instance's local gate takes when it decides: `1 /
    /// instances`. It decides only when the store does not (down, or slow past
    /// `shared_timeout`, the store still "usable": a slow store's timeouts left every
    /// instance at the whole rate); what the store grants, it mirrors.
    pub(crate) fn share(&self) -> u64 {
        self.instances()
    }

    /// Whether the local gate's share in this outage is yet to be told to the listeners:
    /// once per outage, and only for a share below the whole rate.
    pub(crate) fn share_untold(&self) -> Option<u64> {
        let instances = self.instances();
        // Outages are told apart, not counted: the low bits do (and keep a link small).
        let outage = self.returns().wrapping_add(1) as u32;
        (instances > 1 && self.told.swap(outage, Ordering::AcqRel) != outage).then_some(instances)
    }
}
