//! Redis as the seam (`crate::seams::SharedStore`) the breakers and gates of shared policies
//! hold: each method is a script, or a lookup in what the store lists.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::super::breaker::add_to_window;
use super::super::gate::reserve;
use super::Store;
use crate::breaker::{Breaker, BreakerState};
use crate::seams::{
    BreakerLink, GateLink, ProbeAnswer, RemoteSlot, SharedSlots, SharedStore, StoreFuture,
    WindowCounts,
};

/// Redis, as the seam the breakers and gates of shared policies hold.
impl SharedStore for Store {
    /// Whether Redis answers now, for a policy about to use it: a policy shared through a store
    /// that was never connected says so once, since it would otherwise decide locally in
    /// silence.
    fn usable(&self) -> bool {
        let available = self.is_available();
        if !available && !self.in_outage.load(Ordering::Acquire) && !self.is_attached() {
            self.outage_begins(
                "no Redis store is connected: call resil::shared::Redis::connect(url) at startup",
            );
        }
        available
    }

    fn register_breaker(&self, link: &BreakerLink, breaker: &Arc<Breaker>) {
        self.register(&link.id, breaker);
    }

    /// Lists a shared gate, so that other instances' throttles reach it.
    fn register_gate(&self, link: &Arc<GateLink>) {
        self.gates.list(&link.key, link);
    }

    fn announce(&self, link: &BreakerLink, breaker: &Breaker, to: BreakerState) {
        self.announce_transition(link, breaker, to);
    }

    fn acquire_probe<'a>(
        &'a self,
        link: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, ProbeAnswer> {
        Box::pin(self.probe(link, limit))
    }

    fn release_probe(&self, link: &BreakerLink) {
        self.release(link);
    }

    fn reserve(
        self: Arc<Self>,
        gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
        limit: Option<Duration>,
    ) -> StoreFuture<'static, SharedSlots> {
        Box::pin(reserve(self, gates, limit))
    }

    fn refund(&self, gate: &GateLink, slot: RemoteSlot) {
        self.refund_slot(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.hold_gate(gate, wait);
    }

    fn add_to_window(
        self: Arc<Self>,
        link: &BreakerLink,
        batch: WindowCounts,
    ) -> Option<StoreFuture<'static, Option<WindowCounts>>> {
        add_to_window(self, link, batch)
    }
}
