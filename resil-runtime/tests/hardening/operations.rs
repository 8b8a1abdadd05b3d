//! Operations: siblings' allowances, nested ids, the tighter deadline, and a budget exact
//! under concurrency.

use super::*;

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
