//! The breaker's rules, under the paused clock: what opens it, what it does while open and
//! half-open, and that no cancellation can wedge it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Provider, Recorder, TestError};
use resil_runtime::{
    Breaker, BreakerConfig, BreakerState, KeyedBreakers, Policy, Rejected, Verdict,
};
use tokio::time::{advance, Instant};

fn policy(breaker: Arc<Breaker>) -> Policy {
    Policy::builder().breaker(breaker).build().unwrap()
}

fn breaker(threshold: u32, cooldown_secs: u64) -> Arc<Breaker> {
    Arc::new(Breaker::new(
        "test",
        BreakerConfig::new(threshold, Duration::from_secs(cooldown_secs)).unwrap(),
    ))
}

fn open_rejection(retry_in: Duration) -> TestError {
    TestError::Rejected(Rejected::BreakerOpen {
        breaker: "test".into(),
        retry_in,
    })
}

#[tokio::test(start_paused = true)]
async fn canon_walk_open_probe_fails_then_probe_closes() {
    let breaker = breaker(3, 10);
    let policy = policy(breaker.clone());
    let provider = Provider::default();

    for _ in 0..3 {
        let result = policy.run(|| provider.answer(Err(TestError::Busy))).await;
        assert_eq!(result, Err(TestError::Busy));
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(provider.calls(), 3);

    advance(Duration::from_secs(4)).await;
    let result = policy.run(|| provider.answer(Ok(1))).await;
    assert_eq!(result, Err(open_rejection(Duration::from_secs(6))));
    assert_eq!(provider.calls(), 3, "an open breaker makes no call");

    advance(Duration::from_secs(6)).await;
    let result = policy.run(|| provider.answer(Err(TestError::Busy))).await;
    assert_eq!(
        result,
        Err(TestError::Busy),
        "the probe reaches the provider"
    );
    assert_eq!(provider.calls(), 4);
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "a failed probe re-opens"
    );
    let result = policy.run(|| provider.answer(Ok(1))).await;
    assert_eq!(result, Err(open_rejection(Duration::from_secs(10))));

    advance(Duration::from_secs(10)).await;
    assert_eq!(policy.run(|| provider.answer(Ok(7))).await, Ok(7));
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(provider.calls(), 5);
}

#[tokio::test(start_paused = true)]
async fn success_resets_the_count_and_permanent_errors_count_for_nothing() {
    let breaker = breaker(3, 10);
    let policy = policy(breaker.clone());
    let provider = Provider::default();
    let busy = || policy.run(|| provider.answer(Err(TestError::Busy)));

    busy().await.unwrap_err();
    busy().await.unwrap_err();
    policy.run(|| provider.answer(Ok(1))).await.unwrap();
    busy().await.unwrap_err();
    busy().await.unwrap_err();
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "the success reset the count"
    );

    for _ in 0..10 {
        let result = policy
            .run(|| provider.answer(Err(TestError::BadRequest)))
            .await;
        assert_eq!(result, Err(TestError::BadRequest));
    }
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "permanent errors count for nothing"
    );
    busy().await.unwrap_err();
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn attempt_timeouts_count_toward_opening() {
    let breaker = breaker(2, 10);
    let policy = Policy::builder()
        .breaker(breaker.clone())
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let provider = Provider::default();
    for _ in 0..2 {
        let result = policy.run(|| provider.hang()).await;
        assert_eq!(
            result,
            Err(TestError::Rejected(Rejected::Timeout {
                after: Duration::from_secs(1)
            }))
        );
    }
    assert_eq!(breaker.state(), BreakerState::Open);
}

async fn open_and_cool(breaker: &Arc<Breaker>, cooldown: Duration) {
    let admission = breaker.admit().await.unwrap();
    admission.record(Verdict::Failure);
    assert_eq!(breaker.state(), BreakerState::Open);
    advance(cooldown).await;
}

#[tokio::test(start_paused = true)]
async fn half_open_five_callers_one_failed_probe_one_call() {
    let breaker = breaker(1, 30);
    open_and_cool(&breaker, Duration::from_secs(30)).await;
    let policy = Arc::new(policy(breaker.clone()));
    let provider = Provider::default();

    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (policy, provider) = (policy.clone(), provider.clone());
        tasks.push(tokio::spawn(async move {
            policy
                .run(|| provider.slow(Duration::from_millis(500), Err(TestError::Busy)))
                .await
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(
        provider.calls(),
        1,
        "exactly one probe reaches the provider"
    );
    assert_eq!(
        results
            .iter()
            .filter(|r| **r == Err(TestError::Busy))
            .count(),
        1
    );
    assert_eq!(
        results
            .iter()
            .filter(|r| **r == Err(open_rejection(Duration::from_secs(30))))
            .count(),
        4,
        "the waiters are rejected without a call: {results:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn half_open_successful_probe_lets_waiters_through() {
    let breaker = breaker(1, 30);
    open_and_cool(&breaker, Duration::from_secs(30)).await;
    let policy = Arc::new(policy(breaker.clone()));
    let provider = Provider::default();
    let started = Instant::now();

    let mut tasks = Vec::new();
    for i in 0..5 {
        let (policy, provider) = (policy.clone(), provider.clone());
        tasks.push(tokio::spawn(async move {
            let result = policy
                .run(|| provider.slow(Duration::from_millis(500), Ok(i)))
                .await;
            (result, started.elapsed())
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let (result, elapsed) = task.await.unwrap();
        assert_eq!(result, Ok(i as u32));
        let expected = if i == 0 { 500 } else { 1000 };
        assert_eq!(
            elapsed,
            Duration::from_millis(expected),
            "caller {i}: probe first, then the rest"
        );
    }
    assert_eq!(provider.calls(), 5);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn cancelled_probe_frees_the_slot_at_once() {
    let breaker = breaker(1, 30);
    open_and_cool(&breaker, Duration::from_secs(30)).await;
    let policy = policy(breaker.clone());
    let provider = Provider::default();

    let probe = policy.run(|| provider.hang());
    let cut = tokio::time::timeout(Duration::from_secs(1), probe).await;
    assert!(cut.is_err(), "the probe was cancelled");
    assert_eq!(breaker.state(), BreakerState::HalfOpen);

    let started = Instant::now();
    assert_eq!(policy.run(|| provider.answer(Ok(3))).await, Ok(3));
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "the next caller probes without waiting"
    );
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn probe_with_permanent_error_hands_the_probe_to_the_next_caller() {
    let breaker = breaker(1, 30);
    open_and_cool(&breaker, Duration::from_secs(30)).await;
    let policy = Arc::new(policy(breaker.clone()));
    let provider = Provider::default();

    let first = {
        let (policy, provider) = (policy.clone(), provider.clone());
        tokio::spawn(async move {
            policy
                .run(|| provider.slow(Duration::from_millis(100), Err(TestError::BadRequest)))
                .await
        })
    };
    tokio::task::yield_now().await;
    let second = {
        let (policy, provider) = (policy.clone(), provider.clone());
        tokio::spawn(async move {
            policy
                .run(|| provider.slow(Duration::from_millis(100), Ok(2)))
                .await
        })
    };
    assert_eq!(first.await.unwrap(), Err(TestError::BadRequest));
    assert_eq!(second.await.unwrap(), Ok(2));
    assert_eq!(provider.calls(), 2);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn waiter_times_out_within_its_own_timeout_and_counts_for_nothing() {
    let breaker = breaker(2, 30);
    for _ in 0..2 {
        breaker.admit().await.unwrap().record(Verdict::Failure);
    }
    advance(Duration::from_secs(30)).await;
    let slow_probe = Arc::new(policy(breaker.clone()));
    let impatient = Policy::builder()
        .breaker(breaker.clone())
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let provider = Provider::default();

    let probe = {
        let (policy, provider) = (slow_probe.clone(), provider.clone());
        tokio::spawn(async move {
            policy
                .run(|| provider.slow(Duration::from_secs(5), Ok(1)))
                .await
        })
    };
    tokio::task::yield_now().await;
    let started = Instant::now();
    let waited = impatient.run(|| provider.answer(Ok(2))).await;
    assert_eq!(
        waited,
        Err(TestError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(2)
        }))
    );
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(
        breaker.state(),
        BreakerState::HalfOpen,
        "the waiter's timeout did not count"
    );
    assert_eq!(probe.await.unwrap(), Ok(1));
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn transitions_are_events() {
    let recorder = Recorder::new();
    let breaker = breaker(1, 5);
    let policy = Policy::builder()
        .breaker(breaker.clone())
        .listener(recorder.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    policy
        .run(|| provider.answer(Err(TestError::Busy)))
        .await
        .unwrap_err();
    advance(Duration::from_secs(5)).await;
    policy.run(|| provider.answer(Ok(1))).await.unwrap();
    let transitions: Vec<_> = recorder
        .lines()
        .into_iter()
        .filter(|line| line.starts_with("breaker"))
        .collect();
    assert_eq!(
        transitions,
        [
            "breaker test closed -> open",
            "breaker test open -> half-open",
            "breaker test half-open -> closed"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn keyed_breakers_are_isolated_per_value() {
    let policy = Policy::builder()
        .breaker_per_key("model", 2, Duration::from_secs(30))
        .build()
        .unwrap();
    let provider = Provider::default();
    for _ in 0..2 {
        let result = policy
            .run_keyed("dead", || provider.answer(Err(TestError::Busy)))
            .await;
        assert_eq!(result, Err(TestError::Busy));
    }
    let rejected = policy.run_keyed("dead", || provider.answer(Ok(1))).await;
    assert!(matches!(
        rejected,
        Err(TestError::Rejected(Rejected::BreakerOpen { ref breaker, .. })) if &**breaker == "model=dead"
    ));
    let healthy = policy
        .run_keyed(&String::from("alive"), || provider.answer(Ok(2)))
        .await;
    assert_eq!(healthy, Ok(2));
    let keys = policy.keys().unwrap();
    assert_eq!(keys.len(), 2);
    let (dead, again) = (keys.get("dead"), keys.get(&String::from("dead")));
    assert_eq!(dead.breaker().unwrap().state(), BreakerState::Open);
    assert!(same(dead.breaker().unwrap(), again.breaker().unwrap()));
}

fn same(a: &Breaker, b: &Breaker) -> bool {
    std::ptr::eq(a, b)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Model {
    Large,
    Small,
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Model::Large => "large",
            Model::Small => "small",
        })
    }
}

#[test]
fn keys_of_different_types_never_share_a_breaker() {
    let keyed = KeyedBreakers::new("k", BreakerConfig::default());
    let by_enum = keyed.get(&Model::Large);
    let by_str = keyed.get("large");
    let by_int = keyed.get(&7u64);
    assert!(!same(&by_enum, &by_str));
    assert!(same(&by_enum, &keyed.get(&Model::Large)));
    assert!(!same(&by_enum, &keyed.get(&Model::Small)));
    assert_eq!(by_int.name(), "k=7");
    assert_eq!(keyed.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn idle_keyed_breakers_are_evicted_but_failing_ones_are_kept() {
    let keyed = KeyedBreakers::new(
        "user",
        BreakerConfig::new(3, Duration::from_secs(30)).unwrap(),
    )
    .with_max_keys(100);
    keyed
        .get("failing")
        .admit()
        .await
        .unwrap()
        .record(Verdict::Failure);
    let held = keyed.get("held");
    for user in 0..10_000 {
        keyed.get(&format!("user-{user}"));
    }
    assert!(keyed.len() <= 100, "bounded: {} breakers held", keyed.len());
    let failing = keyed.get("failing");
    failing.admit().await.unwrap().record(Verdict::Failure);
    failing.admit().await.unwrap().record(Verdict::Failure);
    assert_eq!(
        failing.state(),
        BreakerState::Open,
        "its failure count survived the sweeps"
    );
    assert!(
        same(&held, &keyed.get("held")),
        "a breaker in use is never evicted"
    );
}

#[tokio::test(start_paused = true)]
async fn named_breakers_are_shared_and_conflicts_are_reported() {
    let one = Policy::builder()
        .breaker_named("breaker-test-shared", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let two = Policy::builder()
        .breaker_named("breaker-test-shared", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    assert!(Arc::ptr_eq(one.breaker().unwrap(), two.breaker().unwrap()));
    let provider = Provider::default();
    one.run(|| provider.answer(Err(TestError::Busy)))
        .await
        .unwrap_err();
    let result = two.run(|| provider.answer(Ok(1))).await;
    assert!(matches!(
        result,
        Err(TestError::Rejected(Rejected::BreakerOpen { .. }))
    ));

    let conflicting = Policy::builder()
        .breaker_named("breaker-test-shared", 9, Duration::from_secs(30))
        .build();
    assert!(matches!(
        conflicting,
        Err(resil_runtime::ConfigError::BreakerConflict {
            existing_threshold: 1,
            threshold: 9,
            ..
        })
    ));
}
