//! The retry budget's window, on the paused clock: first attempts earn retries for 10 s,
//! then expire; a floor lets a quiet service retry at all.

use std::time::Duration;

use resil_runtime::RetryBudget;
use tokio::time::advance;

#[tokio::test(start_paused = true)]
async fn retries_are_a_share_of_recent_first_attempts() {
    let budget = RetryBudget::new(0.5, 0.0).unwrap();
    assert!(!budget.try_withdraw(), "no first attempt, no retry");
    for _ in 0..4 {
        budget.record_first_attempt();
    }
    assert!(budget.try_withdraw());
    assert!(budget.try_withdraw());
    assert!(!budget.try_withdraw(), "50 % of 4");

    advance(Duration::from_secs(5)).await;
    for _ in 0..2 {
        budget.record_first_attempt();
    }
    assert!(
        budget.try_withdraw(),
        "6 first attempts in the window earn 3 retries"
    );
    assert!(!budget.try_withdraw());

    advance(Duration::from_secs(6)).await;
    // The first 4 attempts and the first 2 retries left the window.
    assert!(
        !budget.try_withdraw(),
        "2 first attempts earn 1 retry, already spent"
    );
    budget.record_first_attempt();
    budget.record_first_attempt();
    assert!(budget.try_withdraw());
}

#[tokio::test(start_paused = true)]
async fn a_floor_allows_retries_without_traffic() {
    let budget = RetryBudget::new(0.0, 0.5).unwrap();
    for _ in 0..5 {
        assert!(budget.try_withdraw());
    }
    assert!(!budget.try_withdraw(), "0.5/s over a 10 s window is 5");
    advance(Duration::from_secs(11)).await;
    assert!(budget.try_withdraw());
}

#[test]
fn nonsense_budgets_are_refused() {
    assert!(RetryBudget::new(-0.1, 0.0).is_err());
    assert!(RetryBudget::new(f64::NAN, 0.0).is_err());
    assert!(RetryBudget::new(0.2, -1.0).is_err());
}
