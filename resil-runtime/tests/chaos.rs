//! Feature `chaos`: a fixed seed replays the same faults; a policy under chaos retries the
//! injected failures; a cut stream ends early.
#![cfg(feature = "chaos")]

mod common;

use std::time::Duration;

use common::TestError;
use futures::StreamExt;
use resil_runtime::chaos::Chaos;
use resil_runtime::Policy;
use tokio::time::Instant;

async fn run(seed: u64) -> Vec<(bool, Duration)> {
    let chaos = Chaos::seeded(seed)
        .fail(0.4, || TestError::Busy)
        .latency(Duration::from_millis(10)..Duration::from_millis(50));
    let mut seen = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let answer = chaos.inject(async { Ok::<_, TestError>(()) }).await;
        seen.push((answer.is_ok(), started.elapsed()));
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn a_fixed_seed_replays_the_same_faults() {
    let (first, again, other) = (run(3).await, run(3).await, run(4).await);
    assert_eq!(first, again);
    assert_ne!(first, other);
    let failed = first.iter().filter(|(ok, _)| !ok).count();
    assert!((10..=30).contains(&failed), "about 40 % of 50: {failed}");
    assert!(first
        .iter()
        .all(|(_, took)| (Duration::from_millis(10)..Duration::from_millis(50)).contains(took)));
}

#[tokio::test(start_paused = true)]
async fn a_policy_retries_what_chaos_injects_and_times_out_a_stall() {
    let chaos = Chaos::seeded(11).fail(0.5, || TestError::Busy);
    let policy = Policy::builder()
        .retry(10)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap();
    for _ in 0..20 {
        let answer: Result<u32, TestError> = policy.run(|| chaos.inject(async { Ok(1) })).await;
        assert_eq!(
            answer,
            Ok(1),
            "ten retries outlast a 50 % failure rate with this seed"
        );
    }

    let stalls = Chaos::<TestError>::seeded(1).stall(1.0);
    let cut = Policy::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let answer: Result<u32, TestError> = cut.run(|| stalls.inject(async { Ok(1) })).await;
    assert!(matches!(answer, Err(TestError::Rejected(_))), "{answer:?}");
}

#[tokio::test]
async fn a_cut_stream_ends_within_its_first_five_items() {
    let chaos = Chaos::<TestError>::seeded(5).cut(1.0);
    let items: Vec<u32> = chaos
        .inject_stream(futures::stream::iter(0..100))
        .collect()
        .await;
    assert!((1..=5).contains(&items.len()), "{items:?}");
    let whole = Chaos::<TestError>::seeded(5).inject_stream(futures::stream::iter(0..100));
    assert_eq!(whole.count().await, 100, "no cut asked: the whole stream");
}

#[tokio::test(start_paused = true)]
async fn the_layer_replays_its_seed_and_a_policy_layer_above_retries_it() {
    use resil_runtime::chaos::ChaosLayer;
    use resil_runtime::tower::PolicyLayer;
    use tower::{service_fn, ServiceBuilder, ServiceExt};

    let answers = |seed: u64| async move {
        let service = ServiceBuilder::new()
            .layer(ChaosLayer::new(
                Chaos::seeded(seed).fail(0.5, || TestError::Busy),
            ))
            .service(service_fn(|n: u32| async move { Ok::<_, TestError>(n) }));
        let mut seen = Vec::new();
        for n in 0..20 {
            seen.push(service.clone().oneshot(n).await.is_ok());
        }
        seen
    };
    assert_eq!(answers(9).await, answers(9).await);

    let retried = ServiceBuilder::new()
        .layer(PolicyLayer::new(
            Policy::builder()
                .retry(10)
                .backoff(Duration::from_millis(1), Duration::from_millis(1))
                .build()
                .unwrap(),
        ))
        .layer(ChaosLayer::new(
            Chaos::seeded(9).fail(0.5, || TestError::Busy),
        ))
        .service(service_fn(|n: u32| async move { Ok::<_, TestError>(n) }));
    for n in 0..20 {
        assert_eq!(retried.clone().oneshot(n).await, Ok(n));
    }
}

/// `Chaos::fail` and `Chaos::stall` say the call is not made: through the layer, the inner
/// service is not called for them (a `service_fn` counts its calls when called).
#[tokio::test(start_paused = true)]
async fn the_layer_does_not_call_the_service_it_fails_or_stalls() {
    use resil_runtime::chaos::ChaosLayer;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use tower::{service_fn, ServiceBuilder, ServiceExt};

    let calls = Arc::new(AtomicU32::new(0));
    let counted = || {
        let calls = Arc::clone(&calls);
        service_fn(move |n: u32| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, TestError>(n) }
        })
    };
    let failing = ServiceBuilder::new()
        .layer(ChaosLayer::new(
            Chaos::seeded(1).fail(1.0, || TestError::Busy),
        ))
        .service(counted());
    for n in 0..10 {
        assert_eq!(failing.clone().oneshot(n).await, Err(TestError::Busy));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a failed call is not made");

    let stalling = ServiceBuilder::new()
        .layer(ChaosLayer::new(Chaos::<TestError>::seeded(1).stall(1.0)))
        .service(counted());
    let cut = tokio::time::timeout(Duration::from_secs(5), stalling.oneshot(1)).await;
    assert!(cut.is_err(), "a stalled call never answers");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a stalled call is not made"
    );

    let half = ServiceBuilder::new()
        .layer(ChaosLayer::new(
            Chaos::seeded(9).fail(0.5, || TestError::Busy),
        ))
        .service(counted());
    let mut made = 0;
    for n in 0..20 {
        made += u32::from(half.clone().oneshot(n).await.is_ok());
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        made,
        "only the calls let through"
    );
}
