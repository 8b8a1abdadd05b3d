//! Breakers that judge by rate: scattered failures, slow calls, the minimum of calls.

mod common;

use std::time::Duration;

use common::TestError;
use resil_runtime::{BreakerKind, BreakerState, ConfigError, Policy, WindowSize};

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
            window: WindowSize::Calls(20),
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
            window: WindowSize::Calls(20),
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
            window: WindowSize::Calls(4),
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

/// A call that waited for another call's probe verdict is judged slow by its own call's time:
/// the provider answered in 1 s, not in the 2.5 s the caller waited in all.
#[tokio::test(start_paused = true)]
async fn a_wait_for_the_probe_is_not_the_providers_slowness() {
    let policy = Policy::builder()
        .breaker_named("kinds-slow-wait", 5, COOLDOWN)
        .breaker_kind(BreakerKind::SlowCall {
            percent: 100,
            slower_than: Duration::from_secs(2),
            window: WindowSize::Calls(1),
            min_calls: 1,
        })
        .build()
        .unwrap();
    let breaker = policy.breaker().unwrap();
    let call = |secs: f64| {
        policy.run(move || async move {
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            Ok::<(), TestError>(())
        })
    };
    call(3.0).await.unwrap();
    assert_eq!(breaker.state(), BreakerState::Open, "one slow call of one");
    tokio::time::advance(COOLDOWN).await;
    let waiter = async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        call(1.0).await
    };
    let (probe, waited) = tokio::join!(call(1.5), waiter);
    probe.unwrap();
    waited.unwrap();
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "the second call took 1 s once admitted"
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
        window: WindowSize::Calls(20),
        min_calls: 10,
    });
    assert_eq!(zero, ConfigError::BreakerRate { percent: 0 });
    assert!(zero.to_string().contains("such as \"25%\""), "{zero}");
    let window = refused(BreakerKind::FailureRate {
        percent: 25,
        window: WindowSize::Calls(5),
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
        window: WindowSize::Calls(20),
        min_calls: 10,
    });
    assert_eq!(
        instant,
        ConfigError::ZeroDuration {
            key: "breaker_slow"
        }
    );
}

/// One call a second, failing or not.
async fn once_a_second(policy: &Policy, calls: usize, fail: bool) {
    for _ in 0..calls {
        let _: Result<(), TestError> = policy
            .run(|| async move {
                if fail {
                    Err(TestError::Busy)
                } else {
                    Ok(())
                }
            })
            .await;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
}

fn judged_over_30_seconds(name: &str) -> Policy {
    Policy::builder()
        .breaker_named(name, 5, COOLDOWN)
        .breaker_kind(BreakerKind::FailureRate {
            percent: 50,
            window: WindowSize::Time(Duration::from_secs(30)),
            min_calls: 10,
        })
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_time_window_opens_on_the_share_of_its_last_30_seconds() {
    let policy = judged_over_30_seconds("kinds-time-opens");
    let breaker = policy.breaker().unwrap();
    // 20 successes, then failures: 20 calls counted before the first failure, so 20
    // failures would be needed in a count window of 40; in 30 s, the successes leave.
    once_a_second(&policy, 20, false).await;
    once_a_second(&policy, 14, true).await;
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "14 failures beside 16 successes still in the window"
    );
    once_a_second(&policy, 1, true).await;
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "15 of the last 30 s: 50 %"
    );
}

#[tokio::test(start_paused = true)]
async fn failures_older_than_the_window_do_not_open_it() {
    let policy = judged_over_30_seconds("kinds-time-ages");
    let breaker = policy.breaker().unwrap();
    once_a_second(&policy, 9, true).await;
    // A quiet night: a count window would still hold the 9 failures in the morning.
    tokio::time::advance(Duration::from_secs(8 * 60 * 60)).await;
    once_a_second(&policy, 1, true).await;
    once_a_second(&policy, 9, false).await;
    assert_eq!(breaker.state(), BreakerState::Closed, "1 failure of 10");
}

#[test]
fn a_minimum_the_rate_cannot_reach_in_the_window_is_refused() {
    let refused = Policy::builder()
        .breaker_named("kinds-time-rate", 5, COOLDOWN)
        .breaker_kind(BreakerKind::FailureRate {
            percent: 50,
            window: WindowSize::Time(Duration::from_secs(10)),
            min_calls: 20,
        })
        .rate(1, Duration::from_secs(1), 1)
        .build()
        .unwrap_err();
    assert_eq!(
        refused,
        ConfigError::MinCallsPastRate {
            min_calls: 20,
            window: Duration::from_secs(10),
            calls: 10
        }
    );
    assert!(
        refused
            .to_string()
            .contains("lower `breaker_min_calls` to at most 10"),
        "{refused}"
    );
    let short = Policy::builder()
        .breaker_named("kinds-time-short", 5, COOLDOWN)
        .breaker_kind(BreakerKind::FailureRate {
            percent: 50,
            window: WindowSize::Time(Duration::from_millis(500)),
            min_calls: 1,
        })
        .build()
        .unwrap_err();
    assert!(short.to_string().contains("from 1s to 24h"), "{short}");
}
