//! The checks of a store's shared windows ([`SharedStore::add_to_window`]) and of its count of
//! a gate's instances ([`Ask::heartbeat`](crate::seams::Ask::heartbeat)): both optional, so a
//! store that keeps neither passes, and a store without windows leaves each instance to judge
//! its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{call, gate, granted, link, reserve_in, Failure, Suite, PATIENCE, WITHIN};
use crate::breaker::summed::WindowCounts;
use crate::seams::{
    breaker_id, Announcement, BreakerLink, BreakerNews, GateLink, GateNews, Probe, Reservation,
    Reserved, SharedStore, Slot, StoreFuture, Unavailable, WindowBatch, WindowSums, SEEN_FOR,
};
use crate::shared::IntoSharedStore;
use crate::{BreakerKind, BreakerState, Policy, WindowSize};

/// A window's bucket in the checks: short, as they wait for buckets to age out, yet long
/// enough that two instances' batches, a round trip apart, land in one window on a busy
/// machine.
const WIDTH: Duration = Duration::from_millis(500);
const BUCKETS: u64 = 3;

impl<F, Fut, S> Suite<F>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
    S: IntoSharedStore,
{
    pub(super) async fn two_instances_batches_are_summed_and_age_out(&mut self) {
        let id = breaker_id(&self.name("window"));
        let (here, there) = (self.instance().await, self.instance().await);
        let (here, there) = (link(&here, &id), link(&there, &id));
        let Some(first) = add(&here, 3, 1).await else {
            return;
        };
        assert_eq!(
            first,
            Ok(WindowSums::new(3, 1)),
            "conformance: a batch is in the window's sums"
        );
        assert_eq!(
            add(&there, 5, 4).await,
            Some(Ok(WindowSums::new(8, 5))),
            "conformance: another instance's batch is summed with this one's"
        );
        let since = Instant::now();
        loop {
            sleep(WIDTH).await;
            match add(&here, 0, 0).await {
                Some(Ok(sums)) if sums == WindowSums::default() => break,
                Some(Ok(_)) => {}
                answer => panic!("conformance: an empty batch: the sums, not {answer:?}"),
            }
            assert!(
                since.elapsed() < WITHIN,
                "conformance: old buckets never aged out within {WITHIN:?}"
            );
        }
    }

    pub(super) async fn a_store_without_windows_leaves_each_instance_its_own(&mut self) {
        let store: Arc<dyn SharedStore> = Arc::new(Unsummed(self.instance().await));
        let kind = BreakerKind::FailureRate {
            percent: 50,
            window: WindowSize::Time(Duration::from_secs(10)),
            min_calls: 4,
        };
        let policy = Policy::builder()
            .breaker_named(self.name("unsummed").as_str(), 1, PATIENCE)
            .breaker_kind(kind)
            .shared_in(store)
            .build()
            .expect("a valid policy");
        for _ in 0..4 {
            let _ = call(&policy, Err(Failure::Down)).await;
        }
        // The first call asks the store for a window, in the background: one answer away.
        let since = Instant::now();
        while policy.breaker().map(|breaker| breaker.state()) != Some(BreakerState::Open)
            && since.elapsed() < PATIENCE
        {
            sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            policy.breaker().map(|breaker| breaker.state()),
            Some(BreakerState::Open),
            "conformance: without the store's windows, 4 failures of this instance open it"
        );
    }

    pub(super) async fn a_gate_counts_its_instances_and_forgets_the_silent(&mut self) {
        let name = self.name("seen");
        let elsewhere = self.instance().await;
        let (here, there) = (
            gate(&self.instance().await, &name, 10),
            gate(&elsewhere, &name, 10),
        );
        let Some(seen) = granted("a heartbeat", reserve_in(&[(&here, 1)], None).await).instances()
        else {
            return;
        };
        assert_eq!(seen, 1, "conformance: one instance uses the gate");
        let seen = granted("a heartbeat", reserve_in(&[(&there, 1)], None).await).instances();
        assert_eq!(seen, Some(2), "conformance: two instances use the gate");
        let also = gate(&elsewhere, &name, 10);
        let seen = granted("a heartbeat", reserve_in(&[(&also, 1)], None).await).instances();
        assert_eq!(
            seen,
            Some(3),
            "conformance: a second gate of one instance (another policy) is another user (Ask::user)"
        );
        // Only `there` beats from now on: `here` is forgotten once it has been silent too long.
        let since = Instant::now();
        loop {
            sleep(Duration::from_millis(500)).await;
            let slot = granted("a heartbeat", reserve_in(&[(&there, 1)], None).await);
            if slot.instances() == Some(1) {
                break;
            }
            assert!(
                since.elapsed() < SEEN_FOR + WITHIN,
                "conformance: a silent instance still counted after {:?}",
                since.elapsed()
            );
        }
        assert!(
            since.elapsed() >= SEEN_FOR - Duration::from_secs(1),
            "conformance: an instance counted for {SEEN_FOR:?} after its heartbeat"
        );
    }
}

/// Adds a batch through `link`'s store: `None` if it keeps no windows.
async fn add(link: &BreakerLink, calls: u64, bad: u64) -> Option<Result<WindowSums, Unavailable>> {
    let batch = WindowBatch::of(WindowCounts { calls, bad }, BUCKETS, WIDTH);
    let answer = link.sharing.store.add_to_window(link, batch)?;
    Some(answer.await)
}

/// A store without windows: every method but [`SharedStore::add_to_window`] delegated.
struct Unsummed(Arc<dyn SharedStore>);

impl SharedStore for Unsummed {
    fn usable(&self) -> bool {
        self.0.usable()
    }

    fn listen_breaker(&self, breaker: BreakerNews) {
        self.0.listen_breaker(breaker);
    }

    fn listen_gate(&self, gate: GateNews) {
        self.0.listen_gate(gate);
    }

    fn announce(&self, announcement: Announcement) {
        self.0.announce(announcement);
    }

    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
        self.0.acquire_probe(breaker, limit)
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        self.0.release_probe(breaker);
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        self.0.reserve(reservation)
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        self.0.refund(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.0.hold(gate, wait);
    }
}
