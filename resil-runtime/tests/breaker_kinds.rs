//! Breakers that judge by rate: scattered failures, slow calls, the minimum of calls.

mod common;

use std::time::Duration;

use common::TestError;
use resil_runtime::{BreakerKind, BreakerState, ConfigError, Policy};

const COOLDOWN: Duration = Duration::from_secs(30);

/// 30 % failures, never five in a row: F S S F S S F S S S, again and again.
fn scattered(call: usize) -> bool {
    matches!(call % 10, 0 | 3 | 6)
}

async fn drive(policy: &Policy, calls: usize) -> Vec<BreakerState> {
    let mut states = Vec::new();
    for call in 0..calls {
        let fail = scattered(call);
        let _: Result<(), TestError> = policy
            .run(|| async move {
                if fail {
                    Err(TestError::Busy)
                } else {
                    Ok(())
                }
            })
            .await;
        states.push(policy.breaker().unwrap().state());
    }
    states
}

#[tokio::test(start_paused = true)]
async fn scattered_failures_trip_a_rate_breaker_and_never_a_consecutive_one() {
    let consecutive = Policy::builder()
        .breaker_named("kinds-consecutive", 5, COOLDOWN)
        .build()
        .unwrap();
    assert!(drive(&consecutive, 100)
        .await
        .iter()
        .all(|state| *state == BreakerState::Closed));

    let rate = Policy::builder()
        .breaker_named("kinds-rate", 5, COOLDOWN)
        .breaker_kind(BreakerKind::FailureRate {
            percent: 25,
            window: 20,
            min_calls: 10,
        })
        .build()
        .unwrap();
    let states = drive(&rate, 12).await;
    let opened = states.iter().position(|state| *state == BreakerState::Open);
    assert_eq!(
        opened,
        Some(9),
        "3 of the first 10 calls failed: 30 % >= 25 %, at the minimum"
    );
}

#[tokio::test(start_paused = true)]
async fn no_trip_before_the_minimum_of_calls() {
    let policy = Policy::builder()
        .breaker_named("kinds-minimum", 5, COOLDOWN)
        .breaker_kind(BreakerKind::FailureRate {
            percent: 50,
            window: 20,
            min_calls: 10,
        })
        .build()
        .unwrap();
    let breaker = policy.breaker().unwrap();
    for call in 0..10 {
        assert_eq!(breaker.state(), BreakerState::Closed, "call {call}");
        let _: Result<(), TestError> = policy.run(|| async { Err(TestError::Busy) }).await;
    }
    assert_eq!(breaker.state(), BreakerState::Open, "the tenth failure");
}

#[tokio::test(start_paused = true)]
async fn slow_calls_trip_a_slow_call_breaker_and_a_fast_probe_closes_it() {
    let policy = Policy::builder()
        .breaker_named("kinds-slow", 5, COOLDOWN)
        .breaker_kind(BreakerKind::SlowCall {
            percent: 50,
            slower_than: Duration::from_secs(2),
            window: 4,
            min_calls: 4,
        })
        .build()
        .unwrap();
    let breaker = policy.breaker().unwrap();
    for secs in [1, 3, 1] {
        let _: Result<(), TestError> = policy
            .run(|| async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(())
            })
            .await;
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
    let _: Result<(), TestError> = policy
        .run(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        })
        .await;
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "2 of 4 calls took 2 s or more"
    );

    tokio::time::advance(COOLDOWN).await;
    let _: Result<(), TestError> = policy.run(|| async { Ok(()) }).await;
    assert_eq!(breaker.state(), BreakerState::Closed, "a fast probe");
    for _ in 0..3 {
        let _: Result<(), TestError> = policy
            .run(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok(())
            })
            .await;
    }
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "the window started afresh: 3 calls are below the minimum of 4"
    );
}

#[test]
fn nonsense_kinds_are_refused_with_the_fix() {
    let refused = |kind| {
        Policy::builder()
            .breaker_named("kinds-refused", 5, COOLDOWN)
            .breaker_kind(kind)
            .build()
            .unwrap_err()
    };
    let zero = refused(BreakerKind::FailureRate {
        percent: 0,
        window: 20,
        min_calls: 10,
    });
    assert_eq!(zero, ConfigError::BreakerRate { percent: 0 });
    assert!(zero.to_string().contains("such as \"25%\""), "{zero}");
    let window = refused(BreakerKind::FailureRate {
        percent: 25,
        window: 5,
        min_calls: 10,
    });
    assert_eq!(
        window,
        ConfigError::BreakerWindow {
            window: 5,
            min_calls: 10
        }
    );
    let instant = refused(BreakerKind::SlowCall {
        percent: 50,
        slower_than: Duration::ZERO,
        window: 20,
        min_calls: 10,
    });
    assert_eq!(
        instant,
        ConfigError::ZeroDuration {
            key: "breaker_slow"
        }
    );
}
