//! Hardening through the attribute: the fallback runs after the operation gave back its
//! permit, `retry_after_max` ends an operation the server asks to wait too long, and nested
//! calls get their own idempotency keys.

mod support;

use std::time::Duration;

use resil::{resilient, Operation};
use support::{ApiError, Calls};
use tokio::time::Instant;

#[resilient(bulkhead = 1, fallback = slow_backup)]
async fn guarded(calls: &Calls, fail: bool) -> Result<&'static str, ApiError> {
    calls.add();
    if fail {
        Err(ApiError::Busy)
    } else {
        Ok("primary")
    }
}

async fn slow_backup(_calls: &Calls, _fail: bool) -> Result<&'static str, ApiError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok("backup")
}

#[tokio::test(start_paused = true)]
async fn a_slow_fallback_does_not_hold_the_bulkhead() {
    let calls = Calls::default();
    let failing = guarded(&calls, true);
    let healthy = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        guarded(&calls, false).await
    };
    let (failing, healthy) = tokio::join!(failing, healthy);
    assert_eq!(failing, Ok("backup"));
    assert_eq!(
        healthy,
        Ok("primary"),
        "served by the provider, not refused"
    );
    assert_eq!(calls.count(), 2);
}

#[resilient(bulkhead = 1, fallback = same_again)]
async fn falls_back_to_itself(calls: &Calls, first: bool) -> Result<u32, ApiError> {
    calls.add();
    if first {
        Err(ApiError::Busy)
    } else {
        Ok(2)
    }
}

async fn same_again(calls: &Calls, _first: bool) -> Result<u32, ApiError> {
    Box::pin(falls_back_to_itself(calls, false)).await
}

#[tokio::test(start_paused = true)]
async fn a_fallback_may_call_the_same_function() {
    let calls = Calls::default();
    assert_eq!(falls_back_to_itself(&calls, true).await, Ok(2));
    assert_eq!(calls.count(), 2);
}

#[resilient(retry = 2, retry_after_max = "5s")]
async fn told_to_wait(calls: &Calls, wait: Duration) -> Result<(), ApiError> {
    calls.add();
    Err(ApiError::RetryAfter { wait: Some(wait) })
}

#[tokio::test(start_paused = true)]
async fn retry_after_max_from_the_attribute() {
    let calls = Calls::default();
    let started = Instant::now();
    let error = told_to_wait(&calls, Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ApiError::RetryAfter {
            wait: Some(Duration::from_secs(3600))
        },
        "the caller gets the wait the server asked for, to decide itself"
    );
    assert_eq!((calls.count(), started.elapsed()), (1, Duration::ZERO));
    let calls = Calls::default();
    told_to_wait(&calls, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(calls.count(), 3);
}

#[resilient(retry = 1, backoff = "10ms..10ms")]
async fn charge(ids: &std::sync::Mutex<Vec<String>>) -> Result<(), ApiError> {
    ids.lock()
        .unwrap()
        .push(Operation::current().unwrap().id().to_string());
    Ok(())
}

#[resilient(retry = 1, backoff = "10ms..10ms")]
async fn checkout(ids: &std::sync::Mutex<Vec<String>>) -> Result<(), ApiError> {
    charge(ids).await?;
    charge(ids).await?;
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn two_charges_in_one_checkout_get_two_idempotency_keys() {
    let ids = std::sync::Mutex::new(Vec::new());
    checkout(&ids).await.unwrap_err();
    let ids = ids.into_inner().unwrap();
    assert_eq!(ids.len(), 4);
    assert_ne!(ids[0], ids[1]);
    assert!(ids[0].ends_with(".1") && ids[1].ends_with(".2"), "{ids:?}");
    assert_eq!(
        ids[..2],
        ids[2..],
        "the retried checkout re-derives the same keys"
    );
}
