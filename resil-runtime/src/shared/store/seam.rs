//! Redis as the store (`crate::seams::SharedStore`) the breakers and gates of shared policies
//! hold: each method is a script, or a list of what peers' news reaches.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::super::gate::reserve;
use super::Store;
use crate::seams::{
    Announcement, BreakerLink, BreakerNews, GateLink, GateNews, Probe, Reservation, Reserved,
    SharedStore, Slot, StoreFuture, Unavailable, WindowBatch, WindowSums,
};

/// Redis, as the store the breakers and gates of shared policies hold.
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

    fn listen_breaker(&self, breaker: BreakerNews) {
        self.register(breaker);
    }

    fn listen_gate(&self, gate: GateNews) {
        self.gates.list(gate);
    }

    fn announce(&self, announcement: Announcement) {
        self.announce_transition(announcement);
    }

    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
        Box::pin(self.probe(breaker, limit))
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        self.release(breaker);
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        Box::pin(reserve(self, reservation))
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        self.refund_slot(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.hold_gate(gate, wait);
        // A peer's message is ignored by the instance that sent it: this instance's other
        // gates of the name (two policies of one process) hear here.
        for news in self.gates.named(&gate.key) {
            if !news.is_of(gate) {
                news.throttled_elsewhere();
            }
        }
    }

    fn add_to_window<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        batch: WindowBatch,
    ) -> Option<StoreFuture<'a, Result<WindowSums, Unavailable>>> {
        Some(Box::pin(Store::add_to_window(self, breaker, batch)))
    }

    /// resil gave up on an answer: on one server, check whether Redis still answers (as after
    /// an error). On a cluster, the late node is skipped already, by the call resil dropped
    /// (it knows its node); the other nodes' keys are still shared.
    fn timed_out(&self) {
        if !self.is_cluster() {
            self.lost("no answer within shared_timeout");
        }
    }
}

/// A Redis store is a store like any other: a store of your own may wrap it (to count, to
/// trace) and delegate to it.
impl SharedStore for super::super::Redis {
    fn usable(&self) -> bool {
        SharedStore::usable(&*self.store)
    }

    fn listen_breaker(&self, breaker: BreakerNews) {
        self.store.listen_breaker(breaker);
    }

    fn listen_gate(&self, gate: GateNews) {
        self.store.listen_gate(gate);
    }

    fn announce(&self, announcement: Announcement) {
        self.store.announce(announcement);
    }

    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
        self.store.acquire_probe(breaker, limit)
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        self.store.release_probe(breaker);
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        self.store.reserve(reservation)
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        self.store.refund(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.store.hold(gate, wait);
    }

    fn add_to_window<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        batch: WindowBatch,
    ) -> Option<StoreFuture<'a, Result<WindowSums, Unavailable>>> {
        SharedStore::add_to_window(&*self.store, breaker, batch)
    }

    fn timed_out(&self) {
        self.store.timed_out();
    }
}
