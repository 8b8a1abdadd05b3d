//! Frames through hedged races: each racer numbers its own nested calls, a hedge that panics
//! leaves nothing published, one allowance and one deadline reach every racer's nested calls.

use super::*;

/// Two retries, and one of them raced as a hedge 100 ms after the first call.
fn hedged_at_100ms() -> Policy {
    Policy::builder()
        .retry(2)
        .hedge(1, Duration::from_millis(100))
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Hedges: the first racer's count of nested calls is the frame's; a hedge swaps its own in.
// ---------------------------------------------------------------------------------------
#[tokio::test(start_paused = true)]
async fn each_racer_numbers_its_nested_calls_from_one_and_keeps_counting() {
    let policy = hedged_at_100ms();
    let inner = Policy::builder().build().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let n = AtomicU32::new(0);
    let r: Result<u32, Err> = policy
        .run(|| {
            let me = n.fetch_add(1, Ordering::SeqCst);
            let (log, inner) = (log.clone(), &inner);
            async move {
                for step in 0..3 {
                    let nested = inner.run(|| async { Ok::<_, Err>(id()) }).await?;
                    log.lock().unwrap().push((me, step, nested));
                    // racer 0 is slow: the hedge starts at 100 ms and interleaves.
                    sleep(Duration::from_millis(if me == 0 { 70 } else { 30 })).await;
                }
                sleep(Duration::from_millis(if me == 0 { 1000 } else { 10 })).await;
                Ok(me)
            }
        })
        .await;
    assert_eq!(r, Ok(1));
    let log = log.lock().unwrap();
    let root = log[0].2.rsplit_once('.').unwrap().0.to_owned();
    for (me, step, nested) in log.iter() {
        assert_eq!(
            nested,
            &format!("{root}.{}", step + 1),
            "racer {me} step {step}"
        );
    }
}

// A hedge whose body panics; the panic is caught around the whole operation. The thread's
// chain must be empty afterwards and the next operation must start clean.
#[tokio::test(start_paused = true)]
async fn a_panicking_hedge_leaves_nothing_published() {
    use futures::FutureExt;
    let policy = hedged_at_100ms();
    let inner = Policy::builder().build().unwrap();
    let n = AtomicU32::new(0);
    let caught = std::panic::AssertUnwindSafe(policy.run(|| {
        let me = n.fetch_add(1, Ordering::SeqCst);
        let inner = &inner;
        async move {
            let _ = inner.run(|| async { Ok::<_, Err>(()) }).await;
            if me == 1 {
                panic!("hedge panics");
            }
            sleep(Duration::from_secs(5)).await;
            Ok::<_, Err>(())
        }
    }))
    .catch_unwind()
    .await;
    assert!(caught.is_err());
    assert!(Operation::current().is_none());
    let ids: Result<(String, String), Err> = policy
        .run(|| async {
            let outer = id();
            let nested = inner.run(|| async { Ok::<_, Err>(id()) }).await?;
            Ok((outer, nested))
        })
        .await;
    let (outer, nested) = ids.unwrap();
    assert_eq!(nested, format!("{outer}.1"));
}

// One allowance: three layers of retry=2 over a failing call make 3 calls, hedged or not.
// The first racer's nested calls fail at 10 and 21 ms: the hedge starts at 15 ms, between
// them, and draws from the same allowance.
#[tokio::test(start_paused = true)]
async fn nested_retries_draw_from_one_allowance_through_a_hedge() {
    let outer = Policy::builder()
        .retry(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .hedge(1, Duration::from_millis(15))
        .build()
        .unwrap();
    let inner = Policy::builder()
        .retry(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let racers = AtomicU32::new(0);
    let r: Result<(), Err> = outer
        .run(|| {
            racers.fetch_add(1, Ordering::SeqCst);
            async {
                inner
                    .run(|| async {
                        calls.fetch_add(1, Ordering::SeqCst);
                        sleep(Duration::from_millis(10)).await;
                        Err::<(), _>(Err::Busy)
                    })
                    .await
            }
        })
        .await;
    assert_eq!(r, Err(Err::Busy));
    assert_eq!(racers.load(Ordering::SeqCst), 2, "the hedge started");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "one allowance of 2 retries"
    );
}

// Deadline propagation through a hedge.
#[tokio::test(start_paused = true)]
async fn deadline_reaches_nested_calls_in_hedges() {
    let outer = Policy::builder()
        .deadline(Duration::from_secs(2))
        .retry(1)
        .hedge(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let inner = Policy::builder()
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let n = AtomicU32::new(0);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let _: Result<(), Err> = outer
        .run(|| {
            let me = n.fetch_add(1, Ordering::SeqCst);
            let (seen, inner) = (seen.clone(), &inner);
            async move {
                let left = inner
                    .run(|| async { Ok::<_, Err>(Operation::current().unwrap().remaining()) })
                    .await?;
                seen.lock().unwrap().push((me, left));
                sleep(Duration::from_secs(if me == 0 { 10 } else { 0 })).await;
                Ok(())
            }
        })
        .await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], (0, Some(Duration::from_secs(2))));
    assert_eq!(seen[1], (1, Some(Duration::from_millis(1900))));
}
