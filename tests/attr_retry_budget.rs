//! `retry_budget`: across operations, retries add at most a share of the first attempts,
//! even when failures are too scattered to open a breaker.

mod support;

use resil::resilient;
use support::{ApiError, Calls};

/// Fails 3 calls in 10, never 5 in a row: the breaker never opens.
fn scattered_failure(call: u32) -> bool {
    matches!(call % 10, 1 | 4 | 7)
}

#[resilient(
    retry = 2,
    retry_budget = "20%",
    backoff = "10ms..10ms",
    jitter = "none",
    breaker = "budget-test-breaker",
    breaker_threshold = 5
)]
async fn with_budget(calls: &Calls) -> Result<u32, ApiError> {
    let call = calls.add();
    if scattered_failure(call) {
        return Err(ApiError::Busy);
    }
    Ok(call)
}

#[resilient(retry = 2, backoff = "10ms..10ms", jitter = "none")]
async fn without_budget(calls: &Calls) -> Result<u32, ApiError> {
    let call = calls.add();
    if scattered_failure(call) {
        return Err(ApiError::Busy);
    }
    Ok(call)
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_extra_calls_at_its_share() {
    let calls = Calls::default();
    let mut failed = 0;
    for _ in 0..100 {
        if with_budget(&calls).await.is_err() {
            failed += 1;
        }
    }
    let extra = calls.count() - 100;
    assert!(extra <= 20, "{extra} retries for 100 first attempts");
    assert_eq!(
        extra, 19,
        "the budget held: 19 retries, where unbudgeted makes 43"
    );
    assert_eq!(failed, 17, "failures the budget did not retry");

    let calls = Calls::default();
    for _ in 0..100 {
        without_budget(&calls).await.unwrap();
    }
    assert_eq!(
        calls.count() - 100,
        43,
        "unbudgeted: every failure is retried, some twice"
    );
}
