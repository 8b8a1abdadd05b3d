//! One regression test per defect of the hardening review: nothing a server sends, a listener
//! does or a nesting of calls can wedge, crash or mis-count the runtime.

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Provider, Recorder, TestError};
use futures::FutureExt;
use resil_runtime::events::{Event, Listener};
use resil_runtime::{
    worst_case, Backoff, Breaker, BreakerConfig, BreakerState, ConfigError, Jitter, KeyedBreakers,
    Operation, Policy, Rejected, RetryBudget, Transient, Verdict,
};
use tokio::time::{advance, Instant};

const SECOND: Duration = Duration::from_secs(1);

fn breaker(name: &str, threshold: u32, cooldown: Duration) -> Arc<Breaker> {
    Arc::new(Breaker::new(
        name,
        BreakerConfig::new(threshold, cooldown).unwrap(),
    ))
}

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
    // The next wait would be "practically never", which no deadline fits: the error, at once.
    let started = Instant::now();
    let retried = policy.run(|| provider.answer(Err(TestError::Busy))).await;
    assert_eq!(retried, Err(TestError::Busy));
    assert_eq!(started.elapsed(), Duration::ZERO);
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

// 2. Generations: a late verdict of an old generation counts for nothing.

#[tokio::test(start_paused = true)]
async fn calls_admitted_before_the_breaker_opened_cannot_reopen_it_after_a_probe_closed_it() {
    let breaker = breaker("generations", 2, SECOND);
    let late_one = breaker.admit().await.unwrap();
    let late_two = breaker.admit().await.unwrap();
    for _ in 0..2 {
        breaker.admit().await.unwrap().record(Verdict::Failure);
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    advance(SECOND).await;
    let probe = breaker.admit().await.unwrap();
    assert!(probe.is_probe());
    probe.record(Verdict::Success);
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(late_one.record(Verdict::Failure), None);
    assert_eq!(late_two.record(Verdict::Failure), None);
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(
        breaker.failures(),
        0,
        "the old generation's failures were not counted"
    );
}

// 3. One breaker, two layers: the inner call goes through as part of the outer one.

#[tokio::test(start_paused = true)]
async fn a_nested_call_on_the_breaker_its_parent_probes_goes_through() {
    let shared = breaker("two-layers", 1, SECOND);
    let outer = Policy::builder()
        .timeout(Duration::from_secs(5))
        .breaker(shared.clone())
        .build()
        .unwrap();
    let inner = Policy::builder()
        .timeout(Duration::from_secs(5))
        .breaker(shared.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let result = outer
        .run(|| inner.run(|| provider.answer(Err(TestError::Busy))))
        .await;
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(shared.state(), BreakerState::Open);
    advance(SECOND).await;
    let started = Instant::now();
    let result = outer.run(|| inner.run(|| provider.answer(Ok(7)))).await;
    assert_eq!(result, Ok(7), "not a wait for its own verdict");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(shared.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn one_operation_through_two_layers_of_one_breaker_counts_once() {
    let shared = breaker("counts-once", 3, SECOND);
    let outer = Policy::builder().breaker(shared.clone()).build().unwrap();
    let inner = Policy::builder().breaker(shared.clone()).build().unwrap();
    let provider = Provider::default();
    let result = outer
        .run(|| inner.run(|| provider.answer(Err(TestError::Busy))))
        .await;
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(shared.failures(), 1);
}

// 4. A panicking listener cannot leave a probe slot or a permit held.

#[derive(Debug)]
struct PanicOn(&'static str);

impl Listener for PanicOn {
    fn on_event(&self, event: &Event<'_>) {
        let kind = match event {
            Event::AttemptStarted { .. } => "started",
            Event::AttemptEnded { .. } => "ended",
            Event::Waiting { .. } => "waiting",
            Event::Rejected { .. } => "rejected",
            Event::GaveUp { .. } => "gave_up",
            Event::BreakerTransition { transition, .. } => match transition.to {
                BreakerState::Open => "to_open",
                BreakerState::HalfOpen => "to_half_open",
                BreakerState::Closed => "to_closed",
            },
            _ => "other",
        };
        if kind == self.0 {
            panic!("listener panics on {kind}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_listener_that_panics_on_any_event_leaves_nothing_held() {
    for kind in [
        "started",
        "ended",
        "waiting",
        "rejected",
        "gave_up",
        "to_open",
        "to_half_open",
        "to_closed",
    ] {
        let shared = breaker(kind, 1, SECOND);
        let policy = Policy::builder()
            .retry(1)
            .backoff(SECOND, SECOND)
            .breaker(shared.clone())
            .bulkhead(1)
            .listener(Arc::new(PanicOn(kind)))
            .build()
            .unwrap();
        let provider = Provider::default();
        let script = [
            Err(TestError::Busy),
            Err(TestError::Busy),
            Ok(1),
            Ok(1),
            Ok(1),
        ];
        for answer in script {
            // Bounded, so a leaked probe slot fails the test instead of hanging it.
            let run = AssertUnwindSafe(policy.run(|| provider.answer(answer.clone())));
            let _ = tokio::time::timeout(Duration::from_secs(10), run.catch_unwind()).await;
            advance(Duration::from_secs(2)).await;
            assert_eq!(policy.bulkhead().unwrap().in_flight(), 0, "{kind}");
        }
        // The slot was freed: a caller after the cooldown is admitted, never left waiting.
        advance(Duration::from_secs(2)).await;
        let admitted = tokio::time::timeout(SECOND, shared.admit()).await;
        assert!(
            matches!(admitted, Ok(Ok(_))),
            "{kind}: {:?}",
            shared.state()
        );
    }
}

// 6. The keyed registry is bounded, whatever its keys went through.

#[tokio::test(start_paused = true)]
async fn the_keyed_registry_stays_within_max_keys() {
    let keyed =
        KeyedBreakers::new("user", BreakerConfig::new(3, SECOND).unwrap()).with_max_keys(10);
    for user in 0..10_000 {
        let breaker = keyed.get(&user);
        breaker.admit().await.unwrap().record(Verdict::Failure);
        if user % 2 == 0 {
            for _ in 0..2 {
                breaker.admit().await.unwrap().record(Verdict::Failure);
            }
        }
        assert!(keyed.len() <= 10, "{} breakers at user {user}", keyed.len());
    }
    advance(Duration::from_secs(86_400)).await;
    let held: Vec<_> = (0..100).map(|n| keyed.get(&format!("new-{n}"))).collect();
    assert_eq!(keyed.len(), 100, "in-use breakers are never evicted");
    drop(held);
    for n in 0..100 {
        keyed.get(&format!("newer-{n}"));
    }
    assert!(keyed.len() <= 10, "{}", keyed.len());
}

#[test]
fn a_lookup_racing_a_sweep_never_hands_out_an_orphan_breaker() {
    let keyed = Arc::new(KeyedBreakers::new("k", BreakerConfig::default()).with_max_keys(8));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _clock = runtime.enter();
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let keyed = keyed.clone();
            let handle = runtime.handle().clone();
            scope.spawn(move || {
                let _clock = handle.enter();
                for round in 0..2_000 {
                    let held = keyed.get("hot");
                    // Fresh keys force sweeps while `hot` is looked up again.
                    keyed.get(&format!("cold-{thread}-{round}"));
                    let again = keyed.get("hot");
                    assert!(std::ptr::eq::<Breaker>(&*held, &*again));
                }
            });
        }
    });
}

// 7, 8, 9. Siblings keep their own allowance; nested ids; the tighter deadline is visible.

#[tokio::test(start_paused = true)]
async fn siblings_under_a_parent_without_retries_each_keep_their_allowance() {
    let parent = Policy::builder().build().unwrap();
    let child = Policy::builder().retry(2).build().unwrap();
    let (a, b) = (Provider::default(), Provider::default());
    let _ = parent
        .run(|| async {
            let _ = child.run(|| a.answer(Err(TestError::Busy))).await;
            child.run(|| b.answer(Err(TestError::Busy))).await
        })
        .await;
    assert_eq!((a.calls(), b.calls()), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn nested_calls_get_their_own_ids_rederived_when_the_parent_retries() {
    let parent = Policy::builder()
        .retry(1)
        .backoff(SECOND, SECOND)
        .build()
        .unwrap();
    let charge = Policy::builder().build().unwrap();
    let ids = Mutex::new(Vec::new());
    let record = |ids: &Mutex<Vec<String>>| {
        let operation = Operation::current().unwrap();
        ids.lock()
            .unwrap()
            .push(format!("{} {}", operation.id(), operation.operation_id()));
    };
    let _: Result<(), TestError> = parent
        .run(|| async {
            record(&ids);
            charge
                .run(|| async {
                    record(&ids);
                    Ok::<_, TestError>(())
                })
                .await?;
            charge
                .run(|| async {
                    record(&ids);
                    Ok::<_, TestError>(())
                })
                .await?;
            Err(TestError::Busy)
        })
        .await;
    let ids = ids.into_inner().unwrap();
    let root = ids[0].split(' ').next().unwrap().to_owned();
    let expected = [
        format!("{root} {root}"),
        format!("{root}.1 {root}"),
        format!("{root}.2 {root}"),
    ];
    assert_eq!(ids[..3], expected, "two charges, two keys");
    assert_eq!(
        ids[3..],
        expected,
        "the retried parent re-derives the same keys"
    );
}

#[tokio::test(start_paused = true)]
async fn a_nested_call_sees_the_tighter_deadline() {
    let outer = Policy::builder()
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let inner = Policy::builder()
        .deadline(Duration::from_secs(5))
        .build()
        .unwrap();
    let deeper = Policy::builder().build().unwrap();
    let seen = outer
        .run(|| {
            inner.run(|| {
                deeper
                    .run(|| async { Ok::<_, TestError>(Operation::current().unwrap().remaining()) })
            })
        })
        .await;
    assert_eq!(seen, Ok(Some(Duration::from_secs(5))));
}

// 10. A breaker or budget shared by two paused clocks measures time on the clock it is used on.

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

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

// 11. The budget is exact under concurrency; a waiter that never called withdraws nothing.

#[test]
fn concurrent_withdrawals_never_overshoot_the_budget() {
    let runtime = paused_runtime();
    let _clock = runtime.enter();
    let budget = RetryBudget::new(0.2, 0.0).unwrap();
    for _ in 0..100 {
        budget.record_first_attempt();
    }
    let granted = AtomicU32::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let handle = runtime.handle().clone();
            let (budget, granted) = (&budget, &granted);
            scope.spawn(move || {
                let _clock = handle.enter();
                for _ in 0..10 {
                    if budget.try_withdraw() {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(granted.load(Ordering::Relaxed), 20);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_timed_out_before_calling_takes_nothing_from_the_budget() {
    let shared = breaker("waiter-budget", 1, SECOND);
    shared.admit().await.unwrap().record(Verdict::Failure);
    advance(SECOND).await;
    let probe = shared.admit().await.unwrap();
    let policy = Policy::builder()
        .timeout(SECOND)
        .retry(1)
        .backoff(SECOND, SECOND)
        .jitter(Jitter::None)
        .retry_budget(0.0, 0.0)
        .breaker(shared.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let waiter = policy.run(|| provider.answer(Ok(5)));
    let verdict = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        probe.record(Verdict::Success);
    };
    let (result, ()) = tokio::join!(waiter, verdict);
    assert_eq!(
        result,
        Ok(5),
        "retried after the wait timed out, budget untouched"
    );
    assert_eq!(provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_becomes_the_probe_reports_the_transition_it_causes() {
    let shared = breaker("waiter-probe", 1, SECOND);
    shared.admit().await.unwrap().record(Verdict::Failure);
    advance(SECOND).await;
    let first_probe = shared.admit().await.unwrap();
    let recorder = Recorder::new();
    let policy = Policy::builder()
        .breaker(shared.clone())
        .listener(recorder.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let waiter = policy.run(|| provider.answer(Ok(1)));
    let neutral = async {
        tokio::time::sleep(SECOND).await;
        first_probe.record(Verdict::Neutral);
    };
    let (result, ()) = tokio::join!(waiter, neutral);
    assert_eq!(result, Ok(1));
    assert!(recorder
        .lines()
        .contains(&"breaker waiter-probe half-open -> closed".to_owned()));
}

// 13. A retry that meets a breaker opened during its wait ends with the provider's error.

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_during_the_backoff_ends_the_operation_with_the_last_error() {
    let shared = breaker("opened-meanwhile", 2, Duration::from_secs(30));
    let policy = Policy::builder()
        .retry(2)
        .backoff(SECOND, SECOND)
        .jitter(Jitter::None)
        .breaker(shared.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let operation = policy.run(|| provider.answer(Err(TestError::Busy)));
    let other_caller = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        shared.admit().await.unwrap().record(Verdict::Failure);
    };
    let (result, ()) = tokio::join!(operation, other_caller);
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(provider.calls(), 1);
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
