//! `bulkhead`: a hard cap on operations in flight for the function, all callers together.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
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

/// A provider answering in 100 to 400 ms (seeded), whatever the calls in flight, as LLM
/// answers do; or in 250 ms each time, if `steady`. Each through a bulkhead of its own.
struct Spread {
    rng: std::sync::Mutex<StdRng>,
    steady: bool,
}

impl Spread {
    #[resilient(bulkhead = "adaptive")]
    async fn spread(&self) -> Result<u32, ApiError> {
        let took = self.rng.lock().unwrap().random_range(100..=400);
        tokio::time::sleep(Duration::from_millis(took)).await;
        Ok(1)
    }

    #[resilient(bulkhead = "adaptive")]
    async fn steady(&self) -> Result<u32, ApiError> {
        tokio::time::sleep(Duration::from_millis(250)).await;
        Ok(1)
    }

    async fn call(&self) -> Result<u32, ApiError> {
        if self.steady {
            self.steady().await
        } else {
            self.spread().await
        }
    }

    /// 32 callers for 60 s, 20 ms apart after a refusal: the calls answered.
    async fn served(steady: bool) -> usize {
        let provider = Arc::new(Spread {
            rng: std::sync::Mutex::new(StdRng::seed_from_u64(44)),
            steady,
        });
        let served = Arc::new(AtomicUsize::new(0));
        let end = tokio::time::Instant::now() + Duration::from_secs(60);
        let callers: Vec<_> = (0..32)
            .map(|_| {
                let (provider, served) = (Arc::clone(&provider), Arc::clone(&served));
                tokio::spawn(async move {
                    while tokio::time::Instant::now() < end {
                        match provider.call().await {
                            Ok(_) => served.fetch_add(1, SeqCst),
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                0
                            }
                        };
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        served.load(SeqCst)
    }
}

/// Answers spread from 100 to 400 ms are no queue: `bulkhead = "adaptive"` serves 32 callers
/// about as often as against answers of 250 ms every time (it served 431 calls in 60 s
/// against 7 544, its limit down to 1).
#[tokio::test(start_paused = true)]
async fn an_adaptive_bulkhead_keeps_up_with_answers_that_spread() {
    let constant = Spread::served(true).await;
    let spread = Spread::served(false).await;
    println!("{spread} served against {constant}");
    assert!(
        spread * 10 >= constant * 9,
        "{spread} served against {constant}"
    );
}
