//! `breaker_kind`: a breaker that judges by the share of failed or slow calls.

mod support;

use std::time::Duration;

use resil::{resilient, BreakerState, Rejected};
use support::{ApiError, Calls};

#[resilient(
    breaker = "attr-kind-rate",
    breaker_kind = "failure_rate",
    breaker_rate = "25%",
    breaker_window = 20,
    breaker_min_calls = 10
)]
async fn scattered(calls: &Calls) -> Result<u32, ApiError> {
    // 30 % failures, never two in a row.
    if matches!(calls.add() % 10, 1 | 4 | 7) {
        return Err(ApiError::Busy);
    }
    Ok(0)
}

#[resilient(
    timeout = "5s",
    breaker = "attr-kind-slow",
    breaker_kind = "slow_call",
    breaker_slow = "2s",
    breaker_window = 4,
    breaker_min_calls = 4
)]
async fn sluggish(secs: u64) -> Result<u64, ApiError> {
    tokio::time::sleep(Duration::from_secs(secs)).await;
    Ok(secs)
}

#[resilient(
    breaker = "attr-kind-time",
    breaker_kind = "failure_rate",
    breaker_rate = "50%",
    breaker_window = "30s",
    breaker_min_calls = 10,
    rate = "1/s"
)]
async fn judged_by_the_last_30_seconds(fail: bool) -> Result<(), ApiError> {
    if fail {
        return Err(ApiError::Busy);
    }
    Ok(())
}

fn state(name: &str) -> BreakerState {
    resil::breaker::find(name).unwrap().state()
}

#[tokio::test(start_paused = true)]
async fn a_failure_rate_breaker_from_the_attribute() {
    let calls = Calls::default();
    for _ in 0..9 {
        let _ = scattered(&calls).await;
        assert_eq!(
            state("attr-kind-rate"),
            BreakerState::Closed,
            "below the minimum"
        );
    }
    let _ = scattered(&calls).await;
    assert_eq!(
        state("attr-kind-rate"),
        BreakerState::Open,
        "3 of 10 failed"
    );
    assert!(matches!(
        scattered(&calls).await,
        Err(ApiError::Rejected(Rejected::BreakerOpen { .. }))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_breaker_from_the_attribute() {
    for secs in [1, 3, 1] {
        assert_eq!(sluggish(secs).await, Ok(secs));
    }
    assert_eq!(sluggish(4).await, Ok(4));
    assert_eq!(
        state("attr-kind-slow"),
        BreakerState::Open,
        "2 of 4 took 2 s or more"
    );
}

#[tokio::test(start_paused = true)]
async fn a_time_window_from_the_attribute_forgets_old_failures() {
    // One call a second (the rate gate's pace): 9 failures, then a quiet night.
    for _ in 0..9 {
        let _ = judged_by_the_last_30_seconds(true).await;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    tokio::time::advance(Duration::from_secs(8 * 60 * 60)).await;
    // In the morning, 1 failure of 10: a count window would hold 10 of 19.
    let _ = judged_by_the_last_30_seconds(true).await;
    for _ in 0..9 {
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(judged_by_the_last_30_seconds(false).await, Ok(()));
    }
    assert_eq!(state("attr-kind-time"), BreakerState::Closed);
    // Then failures in a row: at the 8th, half of the last 30 s failed.
    for failure in 1..=8 {
        assert_eq!(state("attr-kind-time"), BreakerState::Closed, "{failure}");
        tokio::time::advance(Duration::from_secs(1)).await;
        let _ = judged_by_the_last_30_seconds(true).await;
    }
    assert_eq!(state("attr-kind-time"), BreakerState::Open, "9 of 18");
}
