//! Hostile stores against the windows summed across instances and each instance's share of a
//! shared gate (issue 36, items 5 and 6), through the public trait: whatever a store answers,
//! a breaker still judges and a gate still keeps a rate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resil_runtime::shared::{
    Announcement, BreakerLink, BreakerNews, GateLink, GateNews, InMemory, Probe, Reservation,
    Reserved, SharedStore, Slot, StoreFuture, Unavailable, WindowBatch, WindowSums,
};
use resil_runtime::{Breaker, BreakerConfig, BreakerKind, BreakerState, Policy, WindowSize};

use super::call;

/// How the store answers a window's batch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Windows {
    /// As the inner store does.
    Inner,
    /// An error at once: the store keeps windows but cannot add this batch.
    Fails,
    /// Never: the batch waits out `shared_timeout`.
    Hangs,
    /// Sums that cannot be: these calls and bad calls, whatever the batch.
    Claims(u64, u64),
    /// A panic, the first time; then as the inner store does.
    PanicsOnce,
}

/// A store of a team's own around an [`InMemory`] one: it says it is usable, yet its windows
/// fail or hang, and its gates count `instances` users.
struct Odd {
    inner: InMemory,
    windows: Windows,
    instances: AtomicU64,
    down: AtomicBool,
    panicked: AtomicBool,
}

impl Odd {
    fn new(windows: Windows) -> Arc<Self> {
        Arc::new(Odd {
            inner: InMemory::new(),
            windows,
            instances: AtomicU64::new(0),
            down: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
        })
    }
}

impl SharedStore for Odd {
    fn usable(&self) -> bool {
        !self.down.load(Ordering::Acquire)
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
        self.inner.acquire_probe(breaker, limit)
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        self.inner.release_probe(breaker);
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        let instances = self.instances.load(Ordering::Acquire);
        let slots: Vec<_> = (reservation.asks())
            .map(|_| Slot::new(0, 1, 0, Duration::ZERO).with_instances(instances))
            .collect();
        Box::pin(std::future::ready(Ok(Reserved::granted(
            Duration::ZERO,
            slots,
        ))))
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        self.inner.refund(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.inner.hold(gate, wait);
    }

    fn add_to_window<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        batch: WindowBatch,
    ) -> Option<StoreFuture<'a, Result<WindowSums, Unavailable>>> {
        match self.windows {
            Windows::Inner => self.inner.add_to_window(breaker, batch),
            Windows::Fails => Some(Box::pin(std::future::ready(Err(Unavailable)))),
            Windows::Hangs => Some(Box::pin(std::future::pending())),
            Windows::Claims(calls, bad) => Some(Box::pin(std::future::ready(Ok(WindowSums::new(
                calls, bad,
            ))))),
            Windows::PanicsOnce => {
                if !self.panicked.swap(true, Ordering::AcqRel) {
                    panic!("a store that panics in add_to_window");
                }
                self.inner.add_to_window(breaker, batch)
            }
        }
    }
}

fn windowed(store: &Arc<Odd>, name: &str) -> Policy {
    let kind = BreakerKind::FailureRate {
        percent: 50,
        window: WindowSize::Time(Duration::from_secs(10)),
        min_calls: 5,
    };
    let config = BreakerConfig::new(5, Duration::from_secs(30))
        .unwrap()
        .with_kind(kind)
        .unwrap();
    Policy::builder()
        .breaker(Arc::new(Breaker::new(name, config)))
        .shared_in(Arc::clone(store))
        .shared_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
}

/// Fails calls 50 ms apart (the batches' tasks run between them) until the breaker opens,
/// at most `calls` of them; says how many it took.
async fn fail_until_open(policy: &Policy, calls: usize) -> Option<usize> {
    for made in 1..=calls {
        let _ = call(policy, false).await;
        if policy.breaker().unwrap().state() == BreakerState::Open {
            return Some(made);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(start_paused = true)]
async fn a_store_whose_windows_fail_leaves_the_breaker_to_judge_its_own_calls() {
    for windows in [Windows::Fails, Windows::Hangs] {
        let store = Odd::new(windows);
        let policy = windowed(&store, "failing_windows");
        let opened = fail_until_open(&policy, 60).await;
        assert!(
            opened.is_some(),
            "60 failures of 60 calls in 3 s, min_calls 5, and the breaker never opened: a store \
             whose batches {} judged nothing",
            match windows {
                Windows::Fails => "fail",
                _ => "hang",
            }
        );
    }
}

#[tokio::test(start_paused = true)]
async fn sums_that_cannot_be_neither_open_nor_silence_the_breaker() {
    let store = Odd::new(Windows::Claims(u64::MAX, 0));
    let policy = windowed(&store, "endless_sums");
    let opened = fail_until_open(&policy, 60).await;
    assert!(
        opened.is_some(),
        "60 failures of 60 calls, and the breaker never opened: the store claims u64::MAX calls"
    );
    let store = Odd::new(Windows::Claims(5, 1_000));
    let policy = windowed(&store, "more_bad_than_calls");
    for _ in 0..60 {
        let _ = call(&policy, true).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        policy.breaker().unwrap().state(),
        BreakerState::Closed,
        "60 calls, none bad: the store claims 1 000 bad of 5"
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_panics_once_in_add_to_window_leaves_the_breaker_judging() {
    let store = Odd::new(Windows::PanicsOnce);
    let policy = windowed(&store, "panics_once");
    let opened = fail_until_open(&policy, 100).await;
    assert!(
        opened.is_some(),
        "100 failures of 100 calls never opened it: its batches' task panicked once"
    );
}

#[test]
fn a_batch_task_lost_with_its_runtime_leaves_the_breaker_judging_in_the_next() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let first = paused();
    let policy = first.block_on(async {
        let policy = windowed(&Odd::new(Windows::Hangs), "two_runtimes");
        let _ = call(&policy, false).await;
        policy
    });
    // The batch's task has not ended (not yet run, or waiting for the store): it goes
    // with its runtime.
    drop(first);
    let opened = paused().block_on(fail_until_open(&policy, 100));
    assert!(
        opened.is_some(),
        "100 failures of 100 calls in the next runtime never opened it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_keeps_windows_still_opens_on_the_sums() {
    let store = Odd::new(Windows::Inner);
    let policy = windowed(&store, "summed_windows");
    let opened = fail_until_open(&policy, 60).await;
    assert!(opened.is_some_and(|calls| calls <= 10), "{opened:?}");
}

/// Counts the calls a 10/s shared gate lets through in `span` while its store is down, the
/// store having last said `instances` instances use it.
async fn passed_while_down(instances: u64, span: Duration) -> u64 {
    let store = Odd::new(Windows::Inner);
    store.instances.store(instances, Ordering::Release);
    let policy = Policy::builder()
        .name(format!("share_{instances}"))
        .rate(10, Duration::from_secs(1), 10)
        .deadline(Duration::from_millis(200))
        .shared_in(Arc::clone(&store))
        .shared_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    call(&policy, true).await.expect("the store grants");
    store.down.store(true, Ordering::Release);
    let started = tokio::time::Instant::now();
    let mut passed = 0;
    while started.elapsed() < span {
        if call(&policy, true).await.is_ok() {
            passed += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    passed
}

#[tokio::test(start_paused = true)]
async fn an_absurd_count_of_instances_keeps_one_slot_per_period_and_no_more() {
    // 10/s shared, the store down: an instance's share is never below one call a second.
    let span = Duration::from_secs(10);
    let many = passed_while_down(1_000, span).await;
    assert!(
        (9..=12).contains(&many),
        "1 000 instances: {many} calls in 10 s, not one a second"
    );
    let absurd = passed_while_down(u64::MAX, span).await;
    assert!(
        (9..=12).contains(&absurd),
        "u64::MAX instances: {absurd} calls in 10 s, not one a second"
    );
    let two = passed_while_down(2, span).await;
    assert!((45..=60).contains(&two), "2 instances: {two} calls in 10 s");
}
