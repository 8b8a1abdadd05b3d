//! An adaptive bulkhead driven by the execution (`bulkhead_adaptive`): its limit follows a
//! provider's capacity down when the provider throttles, and back up when it returns.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Recorder, TestError};
use futures::future::BoxFuture;
use futures::FutureExt;
use resil_runtime::{Bulkhead, Policy};
use tokio::time::{sleep, Instant};

const MS: Duration = Duration::from_millis(1);

/// A provider that serves `capacity` calls at once, each in 50 ms, and throttles at once
/// those past it.
#[derive(Debug)]
struct Capacity {
    capacity: AtomicUsize,
    in_flight: AtomicUsize,
}

impl Capacity {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Capacity {
            capacity: AtomicUsize::new(capacity),
            in_flight: AtomicUsize::new(0),
        })
    }

    async fn call(&self) -> Result<u32, TestError> {
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        let result = if now > self.capacity.load(SeqCst) {
            Err(TestError::Throttled(Duration::ZERO))
        } else {
            sleep(50 * MS).await;
            Ok(1)
        };
        self.in_flight.fetch_sub(1, SeqCst);
        result
    }
}

type Call = Arc<dyn Fn() -> BoxFuture<'static, Result<u32, TestError>> + Send + Sync>;

/// 40 callers calling in a loop for `phase` (20 ms apart after a refusal), while `limit` is
/// read every 100 ms; returns the limits read in the phase's second half.
async fn drive(call: &Call, limit: impl Fn() -> usize, phase: Duration) -> Vec<usize> {
    let end = Instant::now() + phase;
    let callers: Vec<_> = (0..40)
        .map(|_| {
            let call = Arc::clone(call);
            tokio::spawn(async move {
                while Instant::now() < end {
                    if call().await.is_err() {
                        sleep(20 * MS).await;
                    }
                }
            })
        })
        .collect();
    let mut limits = Vec::new();
    while Instant::now() < end {
        sleep(100 * MS).await;
        limits.push(limit());
    }
    for caller in callers {
        caller.await.unwrap();
    }
    limits.split_off(limits.len() / 2)
}

/// The limit keeps near a capacity of 4 (AIMD's saw: halved past it, grown back one by
/// one), then climbs near 32 once the provider serves 32.
#[tokio::test(start_paused = true)]
async fn the_limit_follows_the_providers_capacity_down_and_back_up() {
    let listener = Recorder::new();
    let policy = Arc::new(
        Policy::builder()
            .name("adaptive-doc")
            .bulkhead_adaptive(1, 64)
            .listener(listener.clone())
            .build()
            .unwrap(),
    );
    let provider = Capacity::new(4);
    let call: Call = {
        let (policy, provider) = (Arc::clone(&policy), Arc::clone(&provider));
        Arc::new(move || {
            let (policy, provider) = (Arc::clone(&policy), Arc::clone(&provider));
            Box::pin(async move { policy.run(|| provider.call()).await })
        })
    };
    let limit = || policy.bulkhead().map_or(0, Bulkhead::limit);
    let throttled = drive(&call, limit, Duration::from_secs(20)).await;
    assert!(
        throttled.iter().all(|limit| (2..=6).contains(limit)),
        "{throttled:?}"
    );

    provider.capacity.store(32, SeqCst);
    let recovered = drive(&call, limit, Duration::from_secs(20)).await;
    assert!(
        recovered.iter().all(|limit| (12..=40).contains(limit)),
        "{recovered:?}"
    );
    assert!(recovered.iter().any(|&limit| limit >= 28), "{recovered:?}");

    let lines = listener.lines();
    let events: Vec<_> = lines
        .iter()
        .filter(|line| line.starts_with("ConcurrencyLimit"))
        .collect();
    assert!(
        events[0].contains("from: 16, to: 8"),
        "the first halving is reported: {events:?}"
    );
}

/// Per key, each key learns its own limit: a throttling model does not shrink another's.
#[tokio::test(start_paused = true)]
async fn each_key_learns_its_own_limit() {
    let policy = Arc::new(
        Policy::builder()
            .keyed("model")
            .bulkhead_adaptive(1, 64)
            .bulkhead_per_key()
            .build()
            .unwrap(),
    );
    let (small, large) = (Capacity::new(2), Capacity::new(64));
    let call: Call = {
        let (policy, small, large) = (Arc::clone(&policy), small, large);
        let turn = Arc::new(AtomicUsize::new(0));
        Arc::new(move || {
            let (policy, small, large) = (Arc::clone(&policy), small.clone(), large.clone());
            let key = if turn.fetch_add(1, SeqCst) % 2 == 0 {
                "small"
            } else {
                "large"
            };
            Box::pin(async move {
                let provider = if key == "small" { small } else { large };
                policy.run_keyed(key, || provider.call()).await
            })
        })
    };
    let limit_of = |key: &str| {
        let keys = policy.keys().unwrap();
        keys.get(key).bulkhead().map_or(0, Bulkhead::limit)
    };
    let small = drive(&call, || limit_of("small"), Duration::from_secs(20)).await;
    assert!(
        small.iter().all(|limit| (1..=4).contains(limit)),
        "{small:?}"
    );
    assert!(limit_of("large") >= 16, "{}", limit_of("large"));
}

/// With a queue, a decrease takes back free places at once and the rest as they come back:
/// the operations holding one keep it.
#[tokio::test(start_paused = true)]
async fn a_decrease_never_revokes_a_place_already_held() {
    let policy = Arc::new(
        Policy::builder()
            .bulkhead_adaptive(1, 64)
            .bulkhead_queue(4)
            .build()
            .unwrap(),
    );
    let bulkhead = || policy.bulkhead().unwrap();
    // Sixteen in flight: eight throttled at 100 ms, eight answered at 1 s.
    let calls: Vec<_> = (0..16)
        .map(|n| {
            let policy = Arc::clone(&policy);
            tokio::spawn(async move {
                let answer = if n % 2 == 0 {
                    Err(TestError::Throttled(Duration::ZERO))
                } else {
                    Ok(1)
                };
                let took = if n % 2 == 0 { 100 * MS } else { 1000 * MS };
                policy
                    .run(|| {
                        let answer = answer.clone();
                        async move {
                            sleep(took).await;
                            answer
                        }
                    })
                    .await
            })
        })
        .collect();
    sleep(500 * MS).await;
    assert_eq!(bulkhead().limit(), 8, "halved once for the burst");
    assert_eq!(
        bulkhead().in_flight(),
        8,
        "the eight answered later still run"
    );
    for call in calls {
        call.await.unwrap().ok();
    }
    // Eight places now, not sixteen: the ninth caller waits in the queue.
    let holders: Vec<_> = (0..9)
        .map(|_| {
            let policy = Arc::clone(&policy);
            tokio::spawn(
                async move { policy.run(|| sleep(100 * MS).map(Ok::<_, TestError>)).await },
            )
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!((bulkhead().in_flight(), bulkhead().waiting()), (8, 1));
    for holder in holders {
        holder.await.unwrap().unwrap();
    }
}
