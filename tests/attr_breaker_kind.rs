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
