//! Timeouts and deadlines on tokio's clock: an attempt past its timeout, an operation past
//! its deadline, no wait started that cannot finish in time, and no timer at all when the
//! answer is ready on the first poll.

mod common;

use std::time::Duration;

use common::{Provider, TestError};
use proptest::prelude::*;
use resil_runtime::{Jitter, Policy, Rejected};
use tokio::time::Instant;

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn an_attempt_past_its_timeout_is_cut_and_retried() {
    let policy = Policy::builder()
        .timeout(SEC)
        .retry(2)
        .backoff(SEC, SEC)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let result = policy.run(|| provider.hang()).await;
    assert_eq!(
        result,
        Err(TestError::Rejected(Rejected::Timeout { after: SEC }))
    );
    assert_eq!(provider.calls(), 3);
    assert_eq!(
        started.elapsed(),
        5 * SEC,
        "3 timeouts of 1s and 2 waits of 1s"
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_the_attempt_in_flight() {
    let policy = Policy::builder()
        .timeout(10 * SEC)
        .deadline(15 * SEC)
        .retry(5)
        .backoff(SEC, SEC)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let result = policy.run(|| provider.hang()).await;
    assert_eq!(result, Err(TestError::Rejected(Rejected::DeadlineExceeded)));
    assert_eq!(
        started.elapsed(),
        15 * SEC,
        "10s attempt, 1s wait, cut at 15s"
    );
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn no_wait_is_started_that_cannot_finish_before_the_deadline() {
    let policy = Policy::builder()
        .deadline(10 * SEC)
        .retry(5)
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let result = policy
        .run(|| provider.answer(Err(TestError::RetryAfter(30 * SEC))))
        .await;
    assert_eq!(
        result,
        Err(TestError::RetryAfter(30 * SEC)),
        "ends with its last error"
    );
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "did not sleep toward a deadline it cannot meet"
    );
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_would_end_past_the_deadline_is_not_started() {
    let policy = Policy::builder()
        .deadline(2 * SEC)
        .retry(1)
        .backoff(SEC, SEC)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let provider = Provider::default();
    let result = policy
        .run(|| provider.slow(2 * SEC - Duration::from_millis(1), Err(TestError::Busy)))
        .await;
    assert_eq!(
        result,
        Err(TestError::Busy),
        "the 1s wait would end past the deadline"
    );
    assert_eq!(provider.calls(), 1);
}

#[test]
fn a_ready_answer_creates_no_timer() {
    // A runtime without a time driver panics if anything creates a timer.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let policy = Policy::builder()
        .timeout(SEC)
        .retry(2)
        .breaker_named("deadline-test-no-timer", 5, SEC)
        .bulkhead(4)
        .build()
        .unwrap();
    let provider = Provider::default();
    for _ in 0..100 {
        assert_eq!(
            runtime.block_on(policy.run(|| provider.answer(Ok(1)))),
            Ok(1)
        );
    }
}

#[test]
#[should_panic(expected = "timers are disabled")]
fn a_pending_answer_does_create_a_timer() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let policy = Policy::builder().timeout(SEC).build().unwrap();
    let _ = runtime.block_on(policy.run(|| async {
        tokio::task::yield_now().await;
        Ok::<u32, TestError>(1)
    }));
}

proptest! {
    #![proptest_config(common::proptest_config(64, "deadline.proptest-regressions"))]
    #[test]
    fn attempts_and_time_stay_within_the_policy(
        retry in 0u32..6,
        timeout_ms in 1u64..3_000,
        deadline_extra_ms in 0u64..10_000,
        latencies in proptest::collection::vec(0u64..5_000, 8),
        seed: u64,
    ) {
        let runtime = common::paused_runtime();
        let timeout = Duration::from_millis(timeout_ms);
        let deadline = timeout + Duration::from_millis(deadline_extra_ms);
        let policy = Policy::builder()
            .timeout(timeout)
            .deadline(deadline)
            .retry(retry)
            .seed(seed)
            .build()
            .unwrap();
        let provider = Provider::default();
        let (elapsed, calls) = runtime.block_on(async {
            let started = Instant::now();
            let mut n = 0;
            let _ = policy
                .run(|| {
                    let latency = Duration::from_millis(latencies[n % latencies.len()]);
                    n += 1;
                    provider.slow(latency, Err(TestError::Busy))
                })
                .await;
            (started.elapsed(), provider.calls())
        });
        prop_assert!(calls <= retry + 1, "{} calls for retry = {}", calls, retry);
        prop_assert!(elapsed <= deadline, "{:?} past the {:?} deadline", elapsed, deadline);
    }
}
