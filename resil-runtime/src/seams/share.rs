//! Each instance's share of a shared gate's rate while its store is down: a reservation
//! tells the store, once a [`BEAT_EVERY`], that this instance uses the gate (a heartbeat,
//! [`Ask::heartbeat`](super::Ask::heartbeat)), and the store may answer how many instances
//! use it ([`Slot::with_instances`](super::Slot::with_instances)). While the store is down,
//! this instance's local gate runs at the rate divided by that count.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::links::GateLink;

/// How often an instance tells a shared gate's store that it uses the gate, with a
/// reservation it makes anyway.
pub(crate) const BEAT_EVERY: Duration = Duration::from_secs(1);

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

    /// Whether the store said this instance's gate is the gate's only user (a store that
    /// counts none never says so): then the local gate's mirror of the store's schedule is the
    /// store's.
    pub(crate) fn sole_user(&self) -> bool {
        self.seen.load(Ordering::Acquire) == 1
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
