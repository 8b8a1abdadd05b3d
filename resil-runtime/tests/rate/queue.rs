//! The bulkhead's queue: callers wait for a place within their deadline, and one that gives
//! up costs nobody a turn.

use super::*;

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
