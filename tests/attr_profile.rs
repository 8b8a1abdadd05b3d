//! `profile = "..."`: a preset the keys written beside it override.

mod support;

use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::Instant;

#[resilient(profile = "llm")]
async fn llm(calls: &Calls, hang: bool) -> Result<u32, ApiError> {
    calls.add();
    if hang {
        std::future::pending::<()>().await;
    }
    Err(ApiError::Busy)
}

#[resilient(profile = "llm", timeout = "1s", retry = 0)]
async fn impatient_llm(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    std::future::pending().await
}

#[resilient(profile = "payment", breaker = "profile-payments")]
async fn charge(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn the_llm_preset_waits_long_and_retries_twice() {
    let calls = Calls::default();
    let started = Instant::now();
    assert_eq!(llm(&calls, false).await, Err(ApiError::Busy));
    assert_eq!(calls.count(), 3, "retry = 2");
    assert!(
        started.elapsed() <= Duration::from_secs(2 + 4),
        "backoff 2s..30s, full jitter"
    );

    let started = Instant::now();
    let cut = llm(&calls, true).await;
    assert_eq!(
        cut,
        Err(ApiError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(60)
        }))
    );
    assert!(
        started.elapsed() >= Duration::from_secs(3 * 60),
        "three attempts of 60 s"
    );
}

#[tokio::test(start_paused = true)]
async fn keys_beside_the_profile_win() {
    let calls = Calls::default();
    let started = Instant::now();
    let cut = impatient_llm(&calls).await;
    assert_eq!(
        cut,
        Err(ApiError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(1)
        }))
    );
    assert_eq!(
        (calls.count(), started.elapsed()),
        (1, Duration::from_secs(1))
    );
}

#[tokio::test(start_paused = true)]
async fn the_payment_preset_trips_after_three_and_never_jitters() {
    let calls = Calls::default();
    let started = Instant::now();
    assert_eq!(charge(&calls).await, Err(ApiError::Busy));
    assert_eq!(calls.count(), 2, "retry = 1");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(300),
        "no jitter: the envelope exactly"
    );
    assert_eq!(charge(&calls).await, Err(ApiError::Busy));
    assert_eq!(
        calls.count(),
        3,
        "the third failure opens the breaker: no retry into it"
    );
    let refused = charge(&calls).await;
    assert!(
        matches!(refused, Err(ApiError::Rejected(Rejected::BreakerOpen { retry_in, .. })) if retry_in == Duration::from_secs(120)),
        "{refused:?}"
    );
}
