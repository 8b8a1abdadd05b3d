//! `timeout` and `deadline` through the attribute, on the paused clock.

mod support;

use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::Instant;

#[resilient(timeout = "1s", retry = 2, backoff = "500ms..500ms", jitter = "none")]
async fn hangs(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_cut_at_its_timeout() {
    let calls = Calls::default();
    let started = Instant::now();
    let result = hangs(&calls).await;
    assert_eq!(
        result,
        Err(ApiError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(1)
        }))
    );
    assert_eq!(calls.count(), 3);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(4),
        "3 × 1s + 2 × 500ms"
    );
}

#[resilient(
    timeout = "20s",
    deadline = "45s",
    retry = 5,
    backoff = "1s..1s",
    jitter = "none"
)]
async fn slow(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_whole_operation() {
    let calls = Calls::default();
    let started = Instant::now();
    assert_eq!(
        slow(&calls).await,
        Err(ApiError::Rejected(Rejected::DeadlineExceeded))
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(45),
        "20 + 1 + 20 + 1, cut at 45"
    );
    assert_eq!(calls.count(), 3);
}

#[resilient(timeout = "1m30s")]
async fn answers_in(delay: Duration) -> Result<Duration, ApiError> {
    tokio::time::sleep(delay).await;
    Ok(delay)
}

#[tokio::test(start_paused = true)]
async fn compound_durations_parse() {
    assert_eq!(
        answers_in(Duration::from_secs(89)).await,
        Ok(Duration::from_secs(89))
    );
    assert!(answers_in(Duration::from_secs(91)).await.is_err());
}
