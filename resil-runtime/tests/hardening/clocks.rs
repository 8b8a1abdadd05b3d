//! Time: arithmetic that saturates, clocks a breaker or budget outlives, and messages with
//! rounded durations.

use super::*;

// 1. Time arithmetic saturates; `retry_after_max` ends the operation instead of waiting.

#[tokio::test(start_paused = true)]
async fn a_hostile_retry_after_ends_the_operation_at_once_and_keeps_its_wait() {
    let policy = Policy::builder().retry(3).build().unwrap();
    let provider = Provider::default();
    let forever = Duration::from_secs(u64::MAX);
    let started = Instant::now();
    let result = policy
        .run(|| provider.answer(Err(TestError::RetryAfter(forever))))
        .await;
    assert_eq!(result, Err(TestError::RetryAfter(forever)));
    assert_eq!(result.unwrap_err().retry_after(), Some(forever));
    assert_eq!(provider.calls(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn retry_after_max_bounds_the_wait_and_the_deadline_bounds_it_too() {
    let policy = Policy::builder()
        .retry(1)
        .retry_after_max(Duration::from_secs(10))
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let asked = Duration::from_secs(11);
    let result = policy
        .run(|| provider.answer(Err(TestError::RetryAfter(asked))))
        .await;
    assert_eq!(result, Err(TestError::RetryAfter(asked)));
    assert_eq!((provider.calls(), started.elapsed()), (1, Duration::ZERO));

    let provider = Provider::default();
    let asked = Duration::from_secs(9);
    let result = policy
        .run(|| provider.answer(Err(TestError::RetryAfter(asked))))
        .await;
    assert_eq!(result, Err(TestError::RetryAfter(asked)));
    assert_eq!(provider.calls(), 2);
    assert!(
        started.elapsed() >= asked,
        "honoured: {:?}",
        started.elapsed()
    );

    let within_deadline = Policy::builder()
        .retry(1)
        .deadline(Duration::from_secs(5))
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let result = within_deadline
        .run(|| provider.answer(Err(TestError::RetryAfter(Duration::from_secs(6)))))
        .await;
    assert_eq!(result, Err(TestError::RetryAfter(Duration::from_secs(6))));
    assert_eq!((provider.calls(), started.elapsed()), (1, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn builder_values_as_long_as_duration_max_never_panic() {
    let max = Duration::MAX;
    let builder = || {
        Policy::builder()
            .timeout(max)
            .deadline(max)
            .retry(u32::MAX)
            .retry_after_max(max)
            .backoff(max, max)
            .breaker_named("hardening-max", u32::MAX, max)
            .bulkhead(usize::MAX)
            .retry_budget(f64::MAX, f64::MAX)
    };
    // Without jitter the waits alone outlast the deadline: refused, with the fix.
    let refused = builder().jitter(Jitter::None).build().unwrap_err();
    assert!(
        matches!(refused, ConfigError::RetriesPastDeadline { .. }),
        "{refused}"
    );
    let policy = builder().jitter(Jitter::Equal).build().unwrap_err();
    assert!(matches!(policy, ConfigError::RetriesPastDeadline { .. }));
    let policy = builder().jitter(Jitter::Full).build().unwrap();
    let provider = Provider::default();
    assert_eq!(policy.run(|| provider.answer(Ok(1))).await, Ok(1));
    // A full jitter draws the waits from up to "practically never" (thirty years, the deadline
    // too): a wait that would not end before the deadline is not started, so the error comes
    // back before the deadline, however the draws fall (at once, most often; after a wait
    // shorter than the deadline about one time in ten).
    let started = Instant::now();
    let retried = policy.run(|| provider.answer(Err(TestError::Busy))).await;
    assert_eq!(retried, Err(TestError::Busy));
    assert!(started.elapsed() < Duration::from_secs(86_400 * 365 * 30));
    let stuck = tokio::time::timeout(SECOND, policy.run(|| provider.hang())).await;
    assert!(stuck.is_err());
    assert!(policy.worst_case().is_some());
    for jitter in [
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
        Jitter::None,
    ] {
        let backoff = Backoff::new(max, max).unwrap().with_jitter(jitter);
        assert_eq!(
            worst_case(Some(max), None, u32::MAX, &backoff, max),
            Some(max)
        );
    }
}

// 10. A breaker or budget shared by two paused clocks measures time on the clock it is used on.

#[test]
fn a_breaker_outliving_its_runtime_cools_down_on_the_next_clock() {
    let cooldown = Duration::from_secs(30);
    let first = paused_runtime();
    let shared = first.block_on(async {
        let shared = breaker("two-clocks", 1, cooldown);
        advance(Duration::from_secs(3600)).await;
        shared.admit().await.unwrap().record(Verdict::Failure);
        shared
    });
    drop(first);
    paused_runtime().block_on(async {
        assert!(shared.admit().await.is_err(), "open on the new clock too");
        advance(cooldown).await;
        let probe = shared.admit().await.expect("one cooldown later, a probe");
        assert!(probe.is_probe());
    });
}

#[test]
fn a_budget_outliving_its_runtime_slides_on_the_next_clock() {
    let first = paused_runtime();
    let budget = first.block_on(async {
        let budget = RetryBudget::new(0.5, 0.0).unwrap();
        advance(Duration::from_secs(3600)).await;
        for _ in 0..10 {
            budget.record_first_attempt();
        }
        budget
    });
    drop(first);
    paused_runtime().block_on(async {
        budget.record_first_attempt();
        budget.record_first_attempt();
        assert!(
            budget.try_withdraw(),
            "2 firsts on this clock allow one retry"
        );
        assert!(
            !budget.try_withdraw(),
            "and the other clock's 10 do not count"
        );
        advance(Duration::from_secs(11)).await;
        assert!(!budget.try_withdraw(), "the window slid past them");
        budget.record_first_attempt();
        budget.record_first_attempt();
        assert!(budget.try_withdraw());
    });
}

// 14. Messages say what happened, with rounded durations.

#[test]
fn rejections_read_as_sentences_without_advice() {
    let cases = [
        (
            Rejected::Timeout {
                after: Duration::from_millis(20_000),
            },
            "the attempt timed out after 20s",
        ),
        (
            Rejected::DeadlineExceeded,
            "the operation's deadline passed",
        ),
        (
            Rejected::BreakerOpen {
                breaker: "model=gpt-4o".into(),
                retry_in: Duration::from_nanos(1_999_999_269),
            },
            "circuit breaker `model=gpt-4o` is open: no call was made (retry in 2s)",
        ),
        (
            Rejected::BulkheadFull { limit: 8 },
            "bulkhead full: 8 operations already in flight",
        ),
    ];
    for (rejected, message) in cases {
        assert_eq!(rejected.to_string(), message);
    }
}

// A body that panics leaves no frame behind: the next operation on the thread is not nested.

#[tokio::test(start_paused = true)]
async fn a_panicking_body_leaves_no_frame_on_the_thread() {
    let policy = Policy::builder().build().unwrap();
    let panicked = AssertUnwindSafe(policy.run(|| async {
        if true {
            panic!("the body panics");
        }
        Ok::<_, TestError>(())
    }))
    .catch_unwind()
    .await;
    assert!(panicked.is_err());
    assert!(Operation::current().is_none());
    let depth = policy
        .run(|| async { Ok::<_, TestError>(Operation::current().unwrap().id().depth()) })
        .await;
    assert_eq!(depth, Ok(0));
}
