//! `backoff` and `jitter`: the waits between attempts, and `Retry-After` as their floor.

mod support;

use std::time::Duration;

use resil::resilient;
use support::{ApiError, Calls};
use tokio::time::Instant;

#[resilient(retry = 3, backoff = "100ms..250ms", jitter = "none")]
async fn busy(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn waits_double_up_to_the_cap() {
    let calls = Calls::default();
    let started = Instant::now();
    assert_eq!(busy(&calls).await, Err(ApiError::Busy));
    assert_eq!(started.elapsed(), Duration::from_millis(100 + 200 + 250));
    assert_eq!(calls.count(), 4);
}

#[resilient(retry = 2)]
async fn full_jitter(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn full_jitter_stays_under_the_default_envelope() {
    for _ in 0..20 {
        let calls = Calls::default();
        let started = Instant::now();
        full_jitter(&calls).await.unwrap_err();
        assert!(started.elapsed() <= Duration::from_millis(300 + 600));
    }
}

#[resilient(retry = 1, backoff = "10ms..20ms")]
async fn rate_limited(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Err(ApiError::RetryAfter {
        wait: Some(Duration::from_secs(3)),
    })
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_a_floor() {
    let calls = Calls::default();
    let started = Instant::now();
    rate_limited(&calls).await.unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
    assert!(
        waited <= Duration::from_millis(3010),
        "the floor plus full jitter of 10ms: {waited:?}"
    );
    assert_eq!(calls.count(), 2);
}
