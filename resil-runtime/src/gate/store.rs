//! A gate's tie to its policy's shared store: its link, the slots the store granted counted
//! here too, and the hold the store is asked to keep.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::asking::Asking;
use super::{nanos, RateGate, Slot};
use crate::deadline::NEVER;
use crate::seams::{GateLink, Sharing};

impl RateGate {
    /// Keeps the gate in its policy's shared store too, as `resil:{gate:NAME}:WHAT` (see
    /// [`GateLink::name`](crate::seams::GateLink::name)).
    pub(crate) fn share(&mut self, sharing: &Arc<Sharing>, what: &'static str, name: &str) {
        self.shared = Some(GateLink::new(
            sharing,
            what,
            name,
            self.interval,
            self.burst,
        ));
        if let Some(waiters) = self.waiters.as_deref() {
            self.asking = Some(Arc::new(Asking::new(waiters.lanes(), sharing.timeout)));
        }
    }

    /// For a shared gate that orders its waiters, the turn to ask the store for a slot: one
    /// caller of this instance at a time, the most urgent first, from its question until its
    /// slot comes (see [`asking`](super::asking)).
    pub(crate) fn asking(&self) -> Option<&Arc<Asking>> {
        self.asking.as_ref()
    }

    /// Its place in the shared store, for a shared gate.
    pub(crate) fn shared(&self) -> Option<&Arc<GateLink>> {
        self.shared.as_ref()
    }

    /// Counts, in this instance's schedule, a slot that the shared gate granted: `ahead` is
    /// how far the shared schedule now runs past now. The local schedule then runs at least
    /// as far, so that if Redis goes this instance carries on from where every instance
    /// together stood, not from a fresh burst.
    pub(crate) fn mirror(&self, ahead: Duration, cost: u64) -> Slot {
        let target = self
            .offset(Instant::now())
            .saturating_add(nanos(ahead.min(NEVER)));
        loop {
            let epoch = self.epoch();
            let tat = self.tat.load(Ordering::Acquire);
            let next = tat.max(target);
            if (self.tat)
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return match self.learning_state() {
                    None => Slot::new(tat, next, epoch),
                    Some(mut state) => {
                        let start = self.offset(Instant::now());
                        let mark = self.book(&mut state, cost, (start, tat, next), 1);
                        Slot::new(mark, start, epoch)
                    }
                };
            }
        }
    }
}
