//! [`Outage`]: a store as resil may find it, down or hung, around any store.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::seams::{
    Announcement, BreakerLink, BreakerNews, GateLink, GateNews, Probe, Reservation, Reserved,
    SharedStore, Slot, StoreFuture, Unavailable,
};

/// A store as resil may find it: down (not usable), or hung (its answers never come).
pub(super) struct Outage {
    inner: Arc<dyn SharedStore>,
    pub(super) down: AtomicBool,
    pub(super) hung: AtomicBool,
    /// Reservations and probes asked of it.
    pub(super) asked: AtomicU64,
    pub(super) timed_out: AtomicU64,
}

impl Outage {
    pub(super) fn of(inner: Arc<dyn SharedStore>) -> Arc<Self> {
        Arc::new(Outage {
            inner,
            down: AtomicBool::new(false),
            hung: AtomicBool::new(false),
            asked: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        })
    }

    fn ask<'a, T: Send + 'a>(&self, answer: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        self.asked.fetch_add(1, Ordering::AcqRel);
        match self.hung.load(Ordering::Acquire) {
            true => Box::pin(std::future::pending()),
            false => answer,
        }
    }
}

impl SharedStore for Outage {
    fn usable(&self) -> bool {
        !self.down.load(Ordering::Acquire) && self.inner.usable()
    }

    fn listen_breaker(&self, breaker: BreakerNews) {
        self.inner.listen_breaker(breaker);
    }

    fn listen_gate(&self, gate: GateNews) {
        self.inner.listen_gate(gate);
    }

    fn announce(&self, announcement: Announcement) {
        self.inner.announce(announcement);
    }

    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
        self.ask(self.inner.acquire_probe(breaker, limit))
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        self.inner.release_probe(breaker);
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        self.ask(self.inner.reserve(reservation))
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        self.inner.refund(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.inner.hold(gate, wait);
    }

    fn timed_out(&self) {
        self.timed_out.fetch_add(1, Ordering::AcqRel);
    }
}
