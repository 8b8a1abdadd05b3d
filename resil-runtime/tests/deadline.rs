//! Timeouts and deadlines on tokio's clock: an attempt past its timeout, an operation past
//! its deadline, no wait started that cannot finish in time, and no timer at all when the
//! answer is ready on the first poll.

mod common;

use std::time::Duration;

use common::{Provider, TestError};
use proptest::prelude::*;
use resil_runtime::{Breaker, BreakerConfig, BreakerState, Jitter, Policy, Rejected, Verdict};
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

/// A caller waiting for its rate slot (due at 1 s, within its 2 s deadline) whose future is
/// not polled again until 3 s (an executor that is late, a shared future that no one awaits
/// for a while): the slot's time had come, so the call was made then, a second after the
/// deadline (the simulator's `attempts_within_deadline`, seed 271: 15.5 s after). A wait
/// that ends past the deadline makes no call.
#[tokio::test(start_paused = true)]
async fn a_slot_waited_for_past_the_deadline_makes_no_call() {
    let policy = Policy::builder()
        .rate(1, SEC, 1)
        .deadline(2 * SEC)
        .build()
        .unwrap();
    let provider = Provider::default();
    policy.run(|| provider.answer(Ok(1))).await.unwrap();
    let mut waiting = std::pin::pin!(policy.run(|| provider.answer(Ok(2))));
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "its slot is at 1 s"
    );
    tokio::time::sleep(3 * SEC).await;
    assert_eq!(
        waiting.await,
        Err(TestError::Rejected(Rejected::DeadlineExceeded))
    );
    assert_eq!(provider.calls(), 1, "no call after the deadline");
}

/// The same for a caller waiting for a half-open breaker's probe (within its 2 s deadline):
/// the probe succeeded at 1 s, and the caller, polled again at 3 s, was admitted then and
/// called a second past its deadline (the simulator's `attempts_within_deadline`, seed 14849).
/// A wait whose limit ran out while it was not polled ends with that limit, whatever it
/// would answer now.
#[tokio::test(start_paused = true)]
async fn a_probe_waited_for_past_the_deadline_makes_no_call() {
    let breaker = std::sync::Arc::new(Breaker::new(
        "late-waiter",
        BreakerConfig::new(1, SEC).unwrap(),
    ));
    breaker.admit().await.unwrap().record(Verdict::Failure);
    tokio::time::sleep(SEC).await;
    let probe = breaker.admit().await.unwrap();
    let policy = Policy::builder()
        .breaker(breaker.clone())
        .deadline(2 * SEC)
        .build()
        .unwrap();
    let provider = Provider::default();
    let mut waiting = std::pin::pin!(policy.run(|| provider.answer(Ok(2))));
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "waits for the probe"
    );
    tokio::time::sleep(SEC).await;
    probe.record(Verdict::Success);
    tokio::time::sleep(2 * SEC).await;
    assert_eq!(
        waiting.await,
        Err(TestError::Rejected(Rejected::DeadlineExceeded))
    );
    assert_eq!(provider.calls(), 0, "no call after the deadline");
    assert_eq!(breaker.state(), BreakerState::Closed);
}

/// An attempt cut by its timeout kept its body, never polled again, until its backoff
/// ended: what the body held (a connection, a nested call with its bulkhead place and rate
/// slots) stayed held through the wait, and a nested call under its own deadline ended after
/// it (the simulator's `a_cancelled_body_is_dropped_by_its_deadline`, seed 855: 16 ms after).
/// A body cut is dropped at once.
#[tokio::test(start_paused = true)]
async fn a_body_cut_by_its_timeout_is_dropped_at_once_not_after_the_backoff() {
    struct Held<'a>(&'a std::sync::Mutex<Vec<Duration>>, Instant);
    impl Drop for Held<'_> {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(self.1.elapsed());
        }
    }
    let policy = Policy::builder()
        .timeout(SEC / 10)
        .retry(1)
        .backoff(SEC, SEC)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let dropped = std::sync::Mutex::new(Vec::new());
    let start = Instant::now();
    let result = policy
        .run(|| async {
            let _held = Held(&dropped, start);
            std::future::pending::<Result<u32, TestError>>().await
        })
        .await;
    assert_eq!(
        result,
        Err(TestError::Rejected(Rejected::Timeout { after: SEC / 10 }))
    );
    assert_eq!(
        *dropped.lock().unwrap(),
        [SEC / 10, SEC + SEC / 5],
        "each body dropped when cut: the first before the 1 s backoff"
    );
}

/// `Policy::worst_case` of a policy whose callers wait in a rate gate (or a bulkhead's
/// queue) under a deadline counted the attempts and backoffs only: 100 ms for a timeout of
/// 100 ms, while a caller that waited its turn 1 s then called took 1.05 s (the simulator's
/// `worst_case_holds`, seed 49: 524 ms against 28 ms). Such a wait lasts as long as the
/// deadline allows, so the deadline is the worst case.
#[tokio::test(start_paused = true)]
async fn the_worst_case_of_a_caller_that_waits_its_turn_is_its_deadline() {
    let gated = Policy::builder()
        .rate(1, SEC, 1)
        .timeout(SEC / 10)
        .deadline(2 * SEC)
        .build()
        .unwrap();
    let queued = Policy::builder()
        .bulkhead(1)
        .bulkhead_queue(1)
        .timeout(SEC / 10)
        .deadline(2 * SEC)
        .build()
        .unwrap();
    /// Two callers at once, each 50 ms: the second's result and when it ended.
    async fn second_of_two(policy: &Policy) -> (Result<u32, TestError>, Duration) {
        let provider = Provider::default();
        let started = Instant::now();
        let call = || async {
            let result = policy.run(|| provider.slow(SEC / 20, Ok(1))).await;
            (result, started.elapsed())
        };
        futures::future::join(call(), call()).await.1
    }
    let second = second_of_two(&gated).await;
    assert_eq!(second, (Ok(1), SEC + SEC / 20), "its slot at 1 s");
    assert_eq!(gated.worst_case(), Some(2 * SEC));
    let second = second_of_two(&queued).await;
    assert_eq!(second, (Ok(1), SEC / 10), "after the first, in the queue");
    assert_eq!(queued.worst_case(), Some(2 * SEC));
    let unbounded = Policy::builder()
        .rate(1, SEC, 1)
        .timeout(SEC / 10)
        .build()
        .unwrap();
    assert_eq!(unbounded.worst_case(), None, "no deadline bounds the wait");
}

/// With decorrelated jitter a wait is drawn up to three times the one before it, not within
/// the envelope `base·2ⁿ` the worst case counted: `timeout = "35ms", retry = 2` (backoff
/// 300ms..8s, `retry_after_max = "1ms"`) said 1.007 s while its waits alone took longer (the simulator's `worst_case_holds`, seed 6937: 498 ms
/// past a worst case of 1.611 s). No draw outlasts the worst case.
#[tokio::test(start_paused = true)]
async fn decorrelated_waits_stay_within_the_worst_case() {
    let ms = Duration::from_millis;
    let provider = Provider::default();
    for seed in 0..100 {
        let policy = Policy::builder()
            .timeout(ms(35))
            .retry(2)
            .backoff(ms(300), 8 * SEC)
            .jitter(Jitter::Decorrelated)
            .retry_after_max(ms(1))
            .seed(seed)
            .build()
            .unwrap();
        let started = Instant::now();
        let result = policy.run(|| provider.answer(Err(TestError::Busy))).await;
        assert_eq!(result, Err(TestError::Busy));
        let worst = policy.worst_case().unwrap();
        assert!(
            started.elapsed() <= worst,
            "seed {seed}: {:?} against a worst case of {worst:?}",
            started.elapsed()
        );
    }
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
