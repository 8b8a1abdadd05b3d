//! The bulkhead: a hard cap that rejects instead of queueing, and a permit that is always
//! given back, whether the operation completes, is cancelled or panics.

#[path = "bulkhead/adaptive.rs"]
mod adaptive;
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Provider, TestError};
use futures::FutureExt;
use resil_runtime::{Policy, Rejected};
use tokio::time::Instant;

fn bulkhead(limit: usize) -> Arc<Policy> {
    Arc::new(Policy::builder().bulkhead(limit).build().unwrap())
}

#[tokio::test(start_paused = true)]
async fn the_one_past_the_limit_fails_at_once_without_a_call() {
    let policy = bulkhead(2);
    let provider = Provider::default();
    let running: Vec<_> = (0..2)
        .map(|_| {
            let (policy, provider) = (policy.clone(), provider.clone());
            tokio::spawn(async move {
                policy
                    .run(|| provider.slow(Duration::from_secs(1), Ok(1)))
                    .await
            })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 2);

    let started = Instant::now();
    let third = policy.run(|| provider.answer(Ok(3))).await;
    assert_eq!(
        third,
        Err(TestError::Rejected(Rejected::BulkheadFull { limit: 2 }))
    );
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "rejected at once, not queued"
    );
    assert_eq!(provider.calls(), 2);

    for task in running {
        assert_eq!(task.await.unwrap(), Ok(1));
    }
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
    assert_eq!(policy.run(|| provider.answer(Ok(4))).await, Ok(4));
}

#[tokio::test(start_paused = true)]
async fn one_permit_covers_every_retry_of_the_operation() {
    let policy = Arc::new(
        Policy::builder()
            .bulkhead(1)
            .retry(2)
            .backoff(Duration::from_secs(1), Duration::from_secs(1))
            .jitter(resil_runtime::Jitter::None)
            .build()
            .unwrap(),
    );
    let provider = Provider::default();
    let retrying = {
        let (policy, provider) = (policy.clone(), provider.clone());
        tokio::spawn(async move { policy.run(|| provider.answer(Err(TestError::Busy))).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        policy.bulkhead().unwrap().in_flight(),
        1,
        "held during the backoff wait"
    );
    let other = policy.run(|| provider.answer(Ok(1))).await;
    assert_eq!(
        other,
        Err(TestError::Rejected(Rejected::BulkheadFull { limit: 1 }))
    );
    assert_eq!(retrying.await.unwrap(), Err(TestError::Busy));
    assert_eq!(provider.calls(), 3);
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_thousand_cancelled_operations_leave_every_permit_free() {
    let policy = bulkhead(8);
    let provider = Provider::default();
    for round in 0..125 {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (policy, provider) = (policy.clone(), provider.clone());
                tokio::spawn(async move { policy.run(|| provider.hang()).await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(policy.bulkhead().unwrap().in_flight(), 8, "round {round}");
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            assert!(task.await.unwrap_err().is_cancelled());
        }
        assert_eq!(policy.bulkhead().unwrap().in_flight(), 0, "round {round}");
    }
    assert_eq!(provider.calls(), 1000);
    assert_eq!(policy.run(|| provider.answer(Ok(1))).await, Ok(1));
}

#[tokio::test(start_paused = true)]
async fn dropping_an_operation_mid_wait_frees_its_permit() {
    let policy = Policy::builder().bulkhead(1).retry(3).build().unwrap();
    let provider = Provider::default();
    let operation =
        policy.run(|| provider.answer(Err(TestError::RetryAfter(Duration::from_secs(60)))));
    assert!(tokio::time::timeout(Duration::from_secs(1), operation)
        .await
        .is_err());
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_body_frees_its_permit() {
    let policy = bulkhead(1);
    let result = std::panic::AssertUnwindSafe(policy.run(|| async {
        if policy.bulkhead().is_some() {
            panic!("the provider client panicked");
        }
        Ok::<u32, TestError>(1)
    }))
    .catch_unwind()
    .await;
    assert!(result.is_err());
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);

    let spawned = {
        let policy = policy.clone();
        tokio::spawn(async move {
            policy
                .run(|| async { panic!("in a task") as Result<u32, TestError> })
                .await
        })
    };
    assert!(spawned.await.unwrap_err().is_panic());
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
}
