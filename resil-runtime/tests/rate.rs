//! Rate gates, token gates and the bulkhead's queue: callers wait their turn within their
//! deadline instead of collecting 429s, or are refused at once without calling. Paused clock.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestError;
use futures::future::join_all;
use resil_runtime::{Breaker, BreakerConfig, BreakerState, Jitter, Policy, Rejected};
use tokio::time::Instant;

/// Records when each call started, and the most in flight at once (not the call counter of the
/// facade's tests).
#[derive(Debug, Default)]
struct Starts {
    at: std::sync::Mutex<Vec<Duration>>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

impl Starts {
    async fn call(&self, origin: Instant, lasts: Duration) -> Result<(), TestError> {
        self.at.lock().unwrap().push(origin.elapsed());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(lasts).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn times(&self) -> Vec<Duration> {
        let mut at = self.at.lock().unwrap().clone();
        at.sort();
        at
    }
}

#[tokio::test(start_paused = true)]
async fn twenty_calls_through_five_per_second_all_pass_in_turn() {
    let policy = Policy::builder()
        .rate(5, Duration::from_secs(1), 5)
        .build()
        .unwrap();
    let calls = Starts::default();
    let origin = Instant::now();
    let results =
        join_all((0..20).map(|_| policy.run(|| calls.call(origin, Duration::ZERO)))).await;
    assert!(results.iter().all(Result::is_ok));
    let times = calls.times();
    assert_eq!(
        times.iter().filter(|at| at.is_zero()).count(),
        5,
        "a burst of 5"
    );
    assert_eq!(times[5], Duration::from_millis(200));
    assert_eq!(times[19], Duration::from_secs(3), "then one every 200 ms");
}

#[tokio::test(start_paused = true)]
async fn a_slot_past_the_deadline_is_refused_at_once_without_calling() {
    let policy = Policy::builder()
        .rate(5, Duration::from_secs(1), 5)
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let calls = Starts::default();
    let origin = Instant::now();
    let results = join_all((0..20).map(|_| async {
        let result = policy.run(|| calls.call(origin, Duration::ZERO)).await;
        (result, origin.elapsed())
    }))
    .await;
    let served = results.iter().filter(|(result, _)| result.is_ok()).count();
    assert_eq!(
        served, 10,
        "slots at 0 (5), 200, 400, 600, 800 and 1000 ms fit"
    );
    for (result, when) in results.iter().filter(|(result, _)| result.is_err()) {
        assert!(matches!(
            result,
            Err(TestError::Rejected(Rejected::RateLimited { .. }))
        ));
        assert_eq!(*when, Duration::ZERO, "refused at once");
    }
    assert_eq!(calls.times().len(), 10, "the refused never called");
}

#[tokio::test(start_paused = true)]
async fn a_token_gate_weighs_each_call() {
    let policy = Policy::builder()
        .token_rate(1000, Duration::from_secs(1), 1000)
        .build()
        .unwrap();
    let calls = Starts::default();
    let origin = Instant::now();
    for cost in [600, 600] {
        let mut execution = policy.execute::<TestError>();
        execution.set_cost(cost);
        let next = execution.attempt(calls.call(origin, Duration::ZERO)).await;
        assert!(matches!(next, resil_runtime::Next::Done(_)));
    }
    assert_eq!(
        calls.times(),
        [Duration::ZERO, Duration::from_millis(200)],
        "the second 600 waits for 200 tokens to come back"
    );
    let mut execution = policy.execute::<TestError>();
    execution.set_cost(1500);
    let resil_runtime::Next::Done(outcome) =
        execution.attempt(calls.call(origin, Duration::ZERO)).await
    else {
        panic!("no retry declared")
    };
    assert_eq!(
        outcome.into_result(),
        Err(TestError::Rejected(Rejected::OverBurst {
            cost: 1500,
            burst: 1000
        }))
    );
    assert_eq!(
        calls.times().len(),
        2,
        "a call that can never pass is not made"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_take_slots_too() {
    let policy = Policy::builder()
        .rate(1, Duration::from_secs(1), 1)
        .retry(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let origin = Instant::now();
    let at = std::sync::Mutex::new(Vec::new());
    let result = policy
        .run(|| async {
            at.lock().unwrap().push(origin.elapsed());
            Err::<(), _>(TestError::Busy)
        })
        .await;
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(
        *at.lock().unwrap(),
        [
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_secs(2)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_queue_of_three_behind_a_bulkhead_of_two() {
    let policy = Policy::builder()
        .bulkhead(2)
        .bulkhead_queue(3)
        .build()
        .unwrap();
    let calls = Starts::default();
    let origin = Instant::now();
    let results = join_all((0..6).map(|_| async {
        let result = policy
            .run(|| calls.call(origin, Duration::from_secs(1)))
            .await;
        (result, origin.elapsed())
    }))
    .await;
    assert_eq!(
        results.iter().filter(|(result, _)| result.is_ok()).count(),
        5
    );
    let refused: Vec<_> = results
        .iter()
        .filter(|(result, _)| result.is_err())
        .collect();
    assert_eq!(
        refused[0].0,
        Err(TestError::Rejected(Rejected::BulkheadFull { limit: 2 }))
    );
    assert_eq!(refused[0].1, Duration::ZERO, "the sixth is refused at once");
    assert_eq!(
        calls.most.load(Ordering::SeqCst),
        2,
        "never more than 2 in flight"
    );
    assert_eq!(
        calls.times(),
        [0, 0, 1, 1, 2].map(Duration::from_secs),
        "the queue is served in turn"
    );
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
    assert_eq!(policy.bulkhead().unwrap().waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_queued_caller_waits_no_longer_than_its_deadline() {
    let policy = Policy::builder()
        .bulkhead(1)
        .bulkhead_queue(1)
        .deadline(Duration::from_millis(500))
        .build()
        .unwrap();
    let calls = Starts::default();
    let origin = Instant::now();
    let (first, second) = tokio::join!(
        policy.run(|| calls.call(origin, Duration::from_secs(1))),
        policy.run(|| calls.call(origin, Duration::ZERO)),
    );
    assert!(matches!(
        first,
        Err(TestError::Rejected(Rejected::DeadlineExceeded))
    ));
    assert_eq!(
        second,
        Err(TestError::Rejected(Rejected::DeadlineExceeded)),
        "the deadline ended the wait in the queue"
    );
    assert_eq!(calls.times().len(), 1);
    assert_eq!(policy.bulkhead().unwrap().waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_leaves_the_queue_and_costs_nobody_a_turn() {
    let policy = Arc::new(
        Policy::builder()
            .bulkhead(1)
            .bulkhead_queue(1)
            .build()
            .unwrap(),
    );
    let calls = Arc::new(Starts::default());
    let origin = Instant::now();
    let holder = {
        let (policy, calls) = (policy.clone(), calls.clone());
        tokio::spawn(async move {
            policy
                .run(|| calls.call(origin, Duration::from_secs(1)))
                .await
        })
    };
    tokio::task::yield_now().await;
    let waiter = {
        let (policy, calls) = (policy.clone(), calls.clone());
        tokio::spawn(async move { policy.run(|| calls.call(origin, Duration::ZERO)).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(policy.bulkhead().unwrap().waiting(), 1);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(
        policy.bulkhead().unwrap().waiting(),
        0,
        "the dropped waiter left"
    );
    // Its place in the queue is free for the next caller, who gets the permit in turn.
    let next = policy.run(|| calls.call(origin, Duration::ZERO)).await;
    assert_eq!(next, Ok(()));
    assert_eq!(origin.elapsed(), Duration::from_secs(1));
    assert_eq!(holder.await.unwrap(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_throttle_holds_the_gate_and_never_opens_the_breaker() {
    let breaker = Arc::new(Breaker::new(
        "throttled",
        BreakerConfig::new(1, Duration::from_secs(30)).unwrap(),
    ));
    let policy = Policy::builder()
        .rate(10, Duration::from_secs(1), 10)
        .breaker(breaker.clone())
        .build()
        .unwrap();
    let throttled = policy
        .run(|| async { Err::<(), _>(TestError::Throttled(Duration::from_secs(2))) })
        .await;
    assert_eq!(throttled, Err(TestError::Throttled(Duration::from_secs(2))));
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "a healthy provider saying 'too fast' is not an outage"
    );
    assert_eq!(breaker.failures(), 0);
    // The other callers wait in the gate for the wait the provider asked for.
    let origin = Instant::now();
    let calls = Starts::default();
    let results = join_all((0..3).map(|_| policy.run(|| calls.call(origin, Duration::ZERO)))).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(
        calls.times(),
        [2000, 2125, 2250].map(Duration::from_millis),
        "no slot before the wait, then the steady rate, 20 % slower than the one throttled"
    );
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_refuses_a_gated_call_before_it_takes_a_slot() {
    let breaker = Arc::new(Breaker::new(
        "gated",
        BreakerConfig::new(1, Duration::from_secs(30)).unwrap(),
    ));
    let policy = Policy::builder()
        .rate(1, Duration::from_secs(1), 1)
        .breaker(breaker.clone())
        .build()
        .unwrap();
    let failed = policy.run(|| async { Err::<(), _>(TestError::Busy) }).await;
    assert_eq!(failed, Err(TestError::Busy));
    assert_eq!(breaker.state(), BreakerState::Open);
    let origin = Instant::now();
    let refused = policy.run(|| async { Ok::<_, TestError>(()) }).await;
    assert!(matches!(
        refused,
        Err(TestError::Rejected(Rejected::BreakerOpen { .. }))
    ));
    assert_eq!(
        origin.elapsed(),
        Duration::ZERO,
        "refused at once, not after a slot wait"
    );
    assert_eq!(
        policy.rate_gate().unwrap().reserve(1, None),
        Ok(Duration::from_secs(1)),
        "the next slot is still the one after the first call's"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_after_a_slot_was_reserved_gives_it_back() {
    let policy = Policy::builder()
        .rate(1, Duration::from_secs(1), 1)
        .token_rate(10, Duration::from_secs(1), 10)
        .build()
        .unwrap();
    let mut execution = policy.execute::<TestError>();
    execution.set_cost(100);
    let resil_runtime::Next::Done(outcome) = execution.attempt(async { Ok(()) }).await else {
        panic!("no retry declared")
    };
    assert!(matches!(
        outcome.into_result(),
        Err(TestError::Rejected(Rejected::OverBurst { .. }))
    ));
    assert_eq!(
        policy.rate_gate().unwrap().reserve(1, None),
        Ok(Duration::ZERO),
        "the rate slot taken before the token gate refused went back"
    );
}

#[test]
fn nonsense_rates_are_refused_with_the_fix() {
    let zero = Policy::builder()
        .rate(0, Duration::from_secs(1), 1)
        .build()
        .unwrap_err();
    assert!(zero.to_string().contains("\"60/min\""), "{zero}");
    let no_period = Policy::builder()
        .token_rate(5, Duration::ZERO, 5)
        .build()
        .unwrap_err();
    assert!(
        no_period.to_string().contains("`token_rate` is zero"),
        "{no_period}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttle_revokes_the_slots_already_handed_out() {
    let policy = Policy::builder()
        .rate(10, Duration::from_secs(1), 1)
        .build()
        .unwrap();
    let origin = Instant::now();
    let calls = std::sync::Mutex::new(Vec::new());
    let call = || async {
        let mut calls = calls.lock().unwrap();
        calls.push(origin.elapsed());
        if calls.len() == 1 {
            return Err(TestError::Throttled(Duration::from_secs(1)));
        }
        Ok(())
    };
    let results = join_all((0..5).map(|_| policy.run(call))).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    assert_eq!(
        *calls.lock().unwrap(),
        [0, 1000, 1125, 1250, 1375].map(Duration::from_millis),
        "the slots at 100..400 ms were revoked by the throttle at 0 and taken again after it, at 8/s"
    );
}

/// A provider limiting like nginx's `limit_req` with no burst: a request that reaches it
/// sooner than `spacing` after the last one it accepted is refused with a 429 asking to wait
/// a second. Between the gate and it, a network that delays each request by 0 to 40 ms.
struct Limiter {
    spacing: Duration,
    last: std::sync::Mutex<Option<Instant>>,
    network: std::sync::Mutex<u64>,
    requests: AtomicUsize,
    refused: AtomicUsize,
}

impl Limiter {
    fn new(spacing: Duration) -> Self {
        Limiter {
            spacing,
            last: std::sync::Mutex::new(None),
            network: std::sync::Mutex::new(0x2545_f491_4f6c_dd1d),
            requests: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        }
    }

    async fn call(&self) -> Result<(), TestError> {
        let delay = {
            // xorshift: the same delays on every run.
            let mut state = self.network.lock().unwrap();
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            Duration::from_millis(*state % 41)
        };
        tokio::time::sleep(delay).await;
        self.requests.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        let mut last = self.last.lock().unwrap();
        if last.is_some_and(|last| now - last < self.spacing) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(TestError::Throttled(Duration::from_secs(1)));
        }
        *last = Some(now);
        Ok(())
    }
}

/// A gate set at the provider's exact limit collides with it as soon as the network adds
/// jitter; after the first 429 it keeps a margin, so it does not collide again and again
/// (before: 20 callers of a 5/s gate against a 5/s limiter made 29 requests, 9 of them 429,
/// in 13.3 s; now 21 and 1, in 5.5 s).
#[tokio::test(start_paused = true)]
async fn a_gate_at_the_exact_limit_learns_a_margin_from_its_first_429() {
    let policy = Policy::builder()
        .rate(5, Duration::from_secs(1), 1)
        .retry(5)
        .deadline(Duration::from_secs(30))
        .build()
        .unwrap();
    let provider = Limiter::new(Duration::from_millis(200));
    let origin = Instant::now();
    let results = join_all((0..20).map(|_| policy.run(|| provider.call()))).await;
    let took = origin.elapsed();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (requests, refused) = (
        provider.requests.load(Ordering::SeqCst),
        provider.refused.load(Ordering::SeqCst),
    );
    assert_eq!(
        (requests, refused),
        (21, 1),
        "one collision, then 20 % below the limit: {took:?}"
    );
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use resil_runtime::RateGate;

    proptest! {
        /// Whatever the arrivals, costs and deadlines: the units granted by any time t never
        /// exceed the burst plus what the rate has added since the start, no wait is negative,
        /// a refused reservation holds nothing, and a refusal is exactly a slot past the
        /// deadline.
        #[test]
        fn a_gate_never_grants_more_than_its_rate_allows(
            count in 1u64..50,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..400, 1u64..20, proptest::option::of(0u64..2_000)), 1..60),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async {
                let period = Duration::from_secs(1);
                let gate = RateGate::new(count, period, burst).unwrap();
                let origin = Instant::now();
                let interval = period.as_nanos() as u64 / count;
                let mut granted: Vec<(u64, u64)> = Vec::new();
                for (advance_ms, cost, deadline_ms) in steps {
                    tokio::time::advance(Duration::from_millis(advance_ms)).await;
                    let now = Instant::now();
                    let deadline = deadline_ms.map(|ms| now + Duration::from_millis(ms));
                    match gate.reserve(cost, deadline) {
                        Ok(wait) => {
                            prop_assert!(deadline.is_none_or(|d| now + wait <= d));
                            let at = (now + wait - origin).as_nanos() as u64;
                            granted.push((at, cost));
                        }
                        Err(Rejected::OverBurst { .. }) => prop_assert!(cost > burst),
                        Err(Rejected::RateLimited { retry_in }) => {
                            prop_assert!(deadline.is_some_and(|d| now + retry_in > d));
                        }
                        Err(other) => prop_assert!(false, "unexpected {other:?}"),
                    }
                }
                for &(at, _) in &granted {
                    let units: u64 = granted.iter().filter(|(t, _)| *t <= at).map(|(_, c)| c).sum();
                    prop_assert!(
                        units <= burst + at / interval,
                        "{units} units by {at} ns with burst {burst}, one per {interval} ns"
                    );
                }
                Ok(())
            })?;
        }
    }
}
