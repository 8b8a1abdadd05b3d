//! An adaptive bulkhead driven by the execution (`bulkhead_adaptive`): its limit follows a
//! provider's capacity down when the provider throttles, and back up when it returns.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Recorder, TestError};
use futures::future::BoxFuture;
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use resil_runtime::{Bulkhead, Next, Outcome, Policy};
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

/// A call's cost and latency, drawn from the provider's seeded generator.
type Draw = fn(&mut StdRng) -> (u64, Duration);

/// `callers` calling in a loop for 60 s through `policy` (20 ms apart after a refusal), each
/// call's cost and latency drawn by `draw` from a seeded generator, whatever the calls in
/// flight: a provider that never queues. Returns the calls served and the limit at the end.
async fn sixty_seconds(policy: Policy, callers: usize, draw: Draw) -> (usize, usize) {
    let policy = Arc::new(policy);
    let rng = Arc::new(std::sync::Mutex::new(StdRng::seed_from_u64(44)));
    let served = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(60);
    let callers: Vec<_> = (0..callers)
        .map(|_| {
            let (policy, rng, served) =
                (Arc::clone(&policy), Arc::clone(&rng), Arc::clone(&served));
            tokio::spawn(async move {
                while Instant::now() < end {
                    let (cost, latency) = draw(&mut rng.lock().unwrap());
                    let mut execution = policy.execute::<TestError>();
                    execution.set_cost(cost);
                    let next = execution
                        .attempt(async move {
                            sleep(latency).await;
                            Ok::<u32, TestError>(1)
                        })
                        .await;
                    if matches!(next, Next::Done(Outcome::Completed(Ok(_)))) {
                        served.fetch_add(1, SeqCst);
                    } else {
                        sleep(20 * MS).await;
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    let limit = policy.bulkhead().map_or(0, Bulkhead::limit);
    (served.load(SeqCst), limit)
}

fn adaptive() -> Policy {
    let (min, max) = Bulkhead::DEFAULT_ADAPTIVE_RANGE;
    Policy::builder()
        .bulkhead_adaptive(min, max)
        .build()
        .unwrap()
}

/// LLM answers take 100 to 400 ms whatever the load: that spread is no queue. 32 callers are
/// served about as often as by a provider answering in 250 ms every time, and the limit
/// grows past them in both cases (it fell to 1, each slow answer taken for a queue: 389 calls
/// served against 7 544).
#[tokio::test(start_paused = true)]
async fn a_healthy_provider_whose_latency_spreads_keeps_the_limit_up() {
    let constant: Draw = |_| (1, 250 * MS);
    let spread: Draw = |rng| (1, rng.random_range(100..=400) * MS);
    let (constant_served, constant_limit) = sixty_seconds(adaptive(), 32, constant).await;
    let (spread_served, spread_limit) = sixty_seconds(adaptive(), 32, spread).await;
    println!(
        "constant 250 ms: {constant_served} served, limit {constant_limit}; \
         uniform 100-400 ms: {spread_served} served, limit {spread_limit}"
    );
    assert!(constant_limit >= 32, "{constant_limit}");
    assert!(spread_limit >= 32, "{spread_limit}");
    assert!(
        spread_served * 10 >= constant_served * 9,
        "{spread_served} served against {constant_served}"
    );
}

/// Calls of 4 000 and of 40 units (the token gate's cost), the provider taking 100 ms plus
/// 50 µs a unit, never queueing: a small call's fixed part is no queue, and the limit grows
/// past the 32 callers (it fell to 2, and 659 calls were served).
#[tokio::test(start_paused = true)]
async fn calls_of_mixed_cost_do_not_hold_the_limit_down() {
    let mixed: Draw = |rng| {
        let cost = if rng.random_bool(0.5) { 4_000 } else { 40 };
        (cost, 100 * MS + Duration::from_micros(50 * cost))
    };
    let (served, limit) = sixty_seconds(adaptive(), 32, mixed).await;
    println!("mixed costs: {served} served, limit {limit}");
    assert!(limit >= 32, "{limit}");
    // 32 in flight at 201 ms on average: 9 550 in 60 s, less the first seconds' climb.
    assert!(served >= 8_500, "{served}");
}

/// A provider that really queues (each call takes 50 ms a quarter of the calls it holds, so
/// 200 ms at 16 in flight) brings the limit down from its start, however its answers are
/// spread. Callers arrive one every 250 ms, as traffic grows.
#[tokio::test(start_paused = true)]
async fn a_provider_that_queues_brings_the_limit_down() {
    let policy = Arc::new(adaptive());
    let at_provider = Arc::new(AtomicUsize::new(0));
    let rng = Arc::new(std::sync::Mutex::new(StdRng::seed_from_u64(44)));
    let end = Instant::now() + Duration::from_secs(60);
    let callers: Vec<_> = (0..32u64)
        .map(|n| {
            let (policy, at_provider, rng) = (
                Arc::clone(&policy),
                Arc::clone(&at_provider),
                Arc::clone(&rng),
            );
            tokio::spawn(async move {
                sleep(250 * MS * n as u32).await;
                while Instant::now() < end {
                    let result = policy
                        .run(|| async {
                            let held = at_provider.fetch_add(1, SeqCst) + 1;
                            let spread: f64 = rng.lock().unwrap().random_range(0.8..1.2);
                            let took = 50 * MS * held.max(4) as u32 / 4;
                            sleep(took.mul_f64(spread)).await;
                            at_provider.fetch_sub(1, SeqCst);
                            Ok::<u32, TestError>(1)
                        })
                        .await;
                    if result.is_err() {
                        sleep(20 * MS).await;
                    }
                }
            })
        })
        .collect();
    let mut limits = Vec::new();
    while Instant::now() < end {
        sleep(100 * MS).await;
        limits.push(policy.bulkhead().unwrap().limit());
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let late = limits.split_off(limits.len() / 2);
    println!("queueing provider, limits over the last 30 s: {late:?}");
    assert!(late.iter().all(|&limit| limit <= 10), "{late:?}");
}
