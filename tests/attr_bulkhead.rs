//! `bulkhead`: a hard cap on operations in flight for the function, all callers together.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};

struct Service {
    calls: Calls,
}

impl Service {
    #[resilient(bulkhead = 2)]
    async fn work(&self) -> Result<u32, ApiError> {
        self.calls.add();
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(1)
    }
}

#[tokio::test(start_paused = true)]
async fn the_one_past_the_limit_is_rejected_across_instances() {
    let one = Arc::new(Service {
        calls: Calls::default(),
    });
    let two = Arc::new(Service {
        calls: one.calls.clone(),
    });
    let tasks: Vec<_> = [one.clone(), two.clone(), one.clone(), two.clone()]
        .into_iter()
        .map(|service| tokio::spawn(async move { service.work().await }))
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(results.iter().filter(|r| **r == Ok(1)).count(), 2);
    assert_eq!(
        results
            .iter()
            .filter(|r| **r == Err(ApiError::Rejected(Rejected::BulkheadFull { limit: 2 })))
            .count(),
        2,
        "state is per function, shared by every instance"
    );
    assert_eq!(one.calls.count(), 2);
    assert_eq!(one.work().await, Ok(1), "permits came back");
}

/// A provider that serves `capacity` calls at once, each in 50 ms, and throttles at once the
/// calls past it; it keeps the most it saw in flight.
#[derive(Default)]
struct Capacity {
    capacity: AtomicUsize,
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

impl Capacity {
    #[resilient(bulkhead = "adaptive 1..64")]
    async fn call(&self) -> Result<u32, ApiError> {
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        let result = if now > self.capacity.load(SeqCst) {
            Err(ApiError::Throttled(Duration::ZERO))
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(1)
        };
        self.in_flight.fetch_sub(1, SeqCst);
        result
    }

    /// 40 callers for 20 s, 20 ms apart after an error; then the most in flight at the
    /// provider over the last 10 s, and the throttles and refusals over them.
    async fn drive(self: &Arc<Self>) -> (usize, usize, usize) {
        let end = tokio::time::Instant::now() + Duration::from_secs(20);
        let half = end - Duration::from_secs(10);
        let counts = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let callers: Vec<_> = (0..40)
            .map(|_| {
                let (this, counts) = (Arc::clone(self), Arc::clone(&counts));
                tokio::spawn(async move {
                    while tokio::time::Instant::now() < end {
                        let late = tokio::time::Instant::now() >= half;
                        let which = match this.call().await {
                            Ok(_) => continue,
                            Err(ApiError::Throttled(_)) => 0,
                            Err(_) => 1,
                        };
                        if late {
                            counts[which].fetch_add(1, SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        tokio::time::sleep_until(half).await;
        self.most.store(0, SeqCst);
        for caller in callers {
            caller.await.unwrap();
        }
        let [throttled, refused] = &*counts;
        (
            self.most.load(SeqCst),
            throttled.load(SeqCst),
            refused.load(SeqCst),
        )
    }
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_bulkhead_finds_the_providers_capacity_and_follows_it_back_up() {
    let provider = Arc::new(Capacity::default());
    provider.capacity.store(4, SeqCst);
    let (most, throttled, refused) = provider.drive().await;
    // Near 4: one call past it now and then, each answered by a halving; the rest wait in
    // the caller's hands (refused at once) rather than in the provider's.
    assert!(most <= 6, "{most}");
    assert!(
        throttled * 20 < refused,
        "{throttled} throttled, {refused} refused"
    );

    provider.capacity.store(32, SeqCst);
    let (most, _, _) = provider.drive().await;
    assert!((24..=40).contains(&most), "{most}");
}
