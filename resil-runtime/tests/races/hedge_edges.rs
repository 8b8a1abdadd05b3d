//! Hedges at their edges, on tokio's paused clock: bulkhead queues, rate slots and probes
//! before the first call, the retry budget, enclosing deadlines, events, spans and metrics.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Recorder, TestError};
use resil_runtime::{Breaker, BreakerConfig, Policy, PolicyBuilder, Rejected};
use tokio::time::{sleep, Instant};

const DELAY: Duration = Duration::from_millis(800);

fn hedged(retry: u32, hedges: u32) -> PolicyBuilder {
    Policy::builder()
        .timeout(Duration::from_secs(10))
        .retry(retry)
        .backoff(Duration::from_secs(1), Duration::from_secs(1))
        .hedge(hedges, DELAY)
}

/// Bodies in flight, and the most seen at once.
#[derive(Clone, Default)]
struct InFlight {
    now: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
    calls: Arc<AtomicU32>,
}

struct Leave(Arc<AtomicU32>);
impl Drop for Leave {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    fn call(
        &self,
        ms: u64,
        answer: Result<u32, TestError>,
    ) -> impl std::future::Future<Output = Result<u32, TestError>> {
        let (now, most) = (Arc::clone(&self.now), Arc::clone(&self.most));
        self.calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(n, Ordering::SeqCst);
            let _leave = Leave(now);
            sleep(Duration::from_millis(ms)).await;
            answer
        }
    }
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// A bulkhead of one with a queue: the hedged operation waits in the queue behind another
/// operation whose call takes 3 s. Until it has the place, none of its racers may call (the
/// bulkhead holds "at most 1 operation in flight").
#[tokio::test(start_paused = true)]
async fn a_hedge_does_not_call_past_a_full_bulkhead() {
    let policy = hedged(1, 1).bulkhead(1).bulkhead_queue(1).build().unwrap();
    let holder = InFlight::default();
    let queued = InFlight::default();
    let start = Instant::now();
    let first_call = Arc::new(Mutex::new(None));
    let holding = policy.run(|| holder.call(3000, Ok(1)));
    let waiting = async {
        // Polled after the holder took the place.
        tokio::task::yield_now().await;
        let answer = policy
            .run(|| {
                let first_call = Arc::clone(&first_call);
                let call = queued.call(100, Ok(2));
                async move {
                    // When the body is polled: when it calls.
                    first_call.lock().unwrap().get_or_insert(start.elapsed());
                    call.await
                }
            })
            .await;
        (answer, start.elapsed())
    };
    let (held, (answer, took)) = tokio::join!(holding, waiting);
    assert_eq!(held, Ok(1));
    assert_eq!(answer, Ok(2));
    let first_call = first_call.lock().unwrap().unwrap();
    assert!(
        first_call >= Duration::from_millis(3000),
        "the queued operation called at {first_call:?}, while the other held the only place"
    );
    assert!(took >= Duration::from_millis(3100), "answered at {took:?}");
}

/// A retry budget that refuses every retry refuses every hedge, even while the first racer
/// waits for a rate slot (another caller took the only one) and has not called yet.
#[tokio::test(start_paused = true)]
async fn a_budget_that_refuses_refuses_a_hedge_started_before_the_first_call() {
    let policy = hedged(1, 1)
        .rate(1, Duration::from_secs(2), 1)
        .retry_budget(0.0, 0.0)
        .build()
        .unwrap();
    let bodies = InFlight::default();
    // Takes the only slot of the first 2 s.
    assert_eq!(policy.run(|| bodies.call(0, Ok(0))).await, Ok(0));
    let before = bodies.calls();
    // Its first racer waits until 2 s for a slot, then calls for 5 s.
    let answer = policy.run(|| bodies.call(5000, Ok(1))).await;
    assert_eq!(answer, Ok(1));
    assert_eq!(
        bodies.calls() - before,
        1,
        "a hedge started though the budget refuses every retry"
    );
}

/// The first racer is the half-open probe; the hedge, started at 800 ms, waits for the probe's
/// verdict (the breaker lets one probe out). The probe fails with a transient error. Without
/// hedge the operation ends with the provider's error (the breaker reopened, no retry); with
/// hedge it must too.
#[tokio::test(start_paused = true)]
async fn a_probe_that_fails_under_a_hedge_ends_with_the_providers_error() {
    for hedge in [false, true] {
        let breaker = Arc::new(Breaker::new(
            if hedge { "hedged-probe" } else { "plain-probe" },
            BreakerConfig::new(1, Duration::from_secs(30)).unwrap(),
        ));
        let builder = Policy::builder()
            .timeout(Duration::from_secs(10))
            .retry(1)
            .backoff(Duration::from_secs(1), Duration::from_secs(1))
            .breaker(Arc::clone(&breaker));
        let builder = if hedge {
            builder.hedge(1, DELAY)
        } else {
            builder
        };
        let policy = builder.build().unwrap();
        let bodies = InFlight::default();
        // Opens the breaker.
        assert_eq!(
            policy.run(|| bodies.call(0, Err(TestError::Busy))).await,
            Err(TestError::Busy)
        );
        sleep(Duration::from_secs(30)).await;
        let answer = policy.run(|| bodies.call(2000, Err(TestError::Busy))).await;
        assert_eq!(answer, Err(TestError::Busy), "hedge: {hedge}");
    }
}

/// A hedged operation's GaveUp names the last attempt drawn: the hedge (attempt 1) fails first
/// at 900 ms, the first racer (attempt 0) last at 2 s, and the operation gives up with both
/// attempts spent; each racer's own end names its own number.
#[tokio::test(start_paused = true)]
async fn gave_up_names_the_last_attempt_drawn() {
    let recorder = Recorder::new();
    let policy = hedged(1, 1).listener(recorder.clone()).build().unwrap();
    let order = AtomicU32::new(0);
    let answer = policy
        .run(|| {
            let first = order.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                sleep(Duration::from_millis(if first { 2000 } else { 100 })).await;
                Err::<u32, _>(TestError::Busy)
            }
        })
        .await;
    assert_eq!(answer, Err(TestError::Busy));
    let lines = recorder.lines();
    let gave_up: Vec<_> = lines
        .iter()
        .filter(|line| line.starts_with("GaveUp"))
        .collect();
    assert_eq!(gave_up.len(), 1, "{lines:?}");
    assert!(gave_up[0].contains("attempt: 1"), "{lines:?}");
    assert!(lines.contains(&"end 0 Transient".to_owned()), "{lines:?}");
}

/// A hedge starts when an attempt "has neither answered nor committed within the delay": an
/// attempt still waiting for its rate slot has not been sent. The first racer waits 2 s for its
/// slot, then answers in 100 ms: no hedge (the attempt answered 100 ms after it was sent).
#[tokio::test(start_paused = true)]
async fn the_hedge_delay_counts_from_the_call_not_from_the_wait_for_a_slot() {
    let recorder = Recorder::new();
    let policy = hedged(1, 1)
        .rate(1, Duration::from_secs(2), 1)
        .listener(recorder.clone())
        .build()
        .unwrap();
    let bodies = InFlight::default();
    assert_eq!(policy.run(|| bodies.call(0, Ok(0))).await, Ok(0));
    let start = Instant::now();
    assert_eq!(policy.run(|| bodies.call(100, Ok(1))).await, Ok(1));
    assert_eq!(start.elapsed(), Duration::from_millis(2100));
    let lines = recorder.lines();
    assert!(
        !lines.iter().any(|line| line.starts_with("Hedged")),
        "a hedge started before the first racer was sent: {lines:?}"
    );
}

/// Cancelled while its hedge waits for a rate slot, the race gives the slot back: the next
/// caller gets the slot the hedge had reserved.
#[tokio::test(start_paused = true)]
async fn a_cancelled_race_gives_back_the_hedges_slot() {
    let policy = hedged(1, 1)
        .rate(1, Duration::from_secs(1), 1)
        .build()
        .unwrap();
    let bodies = InFlight::default();
    let cut = tokio::time::timeout(
        Duration::from_millis(900),
        policy.run(|| bodies.call(4000, Ok(1))),
    )
    .await;
    assert!(cut.is_err());
    let start = Instant::now();
    assert_eq!(policy.run(|| bodies.call(0, Ok(2))).await, Ok(2));
    // The slot at 1 s, which the dropped hedge had reserved, is the next caller's.
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

/// A race dropped while its first racer waits in the bulkhead's queue leaves the one place as
/// it was: free again once its holder ends.
#[tokio::test(start_paused = true)]
async fn a_race_cancelled_while_queued_gives_back_nothing_it_did_not_take() {
    let policy = hedged(1, 1).bulkhead(1).bulkhead_queue(1).build().unwrap();
    let bodies = InFlight::default();
    let holder = policy.run(|| bodies.call(3000, Ok(1)));
    let cancelled = async {
        tokio::task::yield_now().await;
        tokio::time::timeout(
            Duration::from_millis(500),
            policy.run(|| bodies.call(100, Ok(2))),
        )
        .await
    };
    let (held, cut) = tokio::join!(holder, cancelled);
    assert_eq!(held, Ok(1));
    assert!(cut.is_err());
    // One place, free again.
    assert_eq!(policy.run(|| bodies.call(0, Ok(3))).await, Ok(3));
}

/// An enclosing call's deadline bounds every attempt of a nested call (the attempt learns it
/// when the call enters its frame, at its first poll): a hedged call's first racer too ends at
/// the outer deadline, as an attempt without hedge would.
#[tokio::test(start_paused = true)]
async fn the_first_racer_is_cut_at_an_enclosing_deadline() {
    for hedge in [false, true] {
        let outer = Policy::builder()
            .deadline(Duration::from_secs(2))
            .build()
            .unwrap();
        let recorder = Recorder::new();
        let builder = Policy::builder()
            .timeout(Duration::from_secs(10))
            .retry(1)
            .backoff(Duration::from_secs(1), Duration::from_secs(1))
            .listener(recorder.clone());
        let inner = if hedge {
            builder.hedge(1, DELAY)
        } else {
            builder
        }
        .build()
        .unwrap();
        let answer = outer
            .run(|| {
                inner.run(|| async {
                    sleep(Duration::from_secs(5)).await;
                    Ok::<_, TestError>(1)
                })
            })
            .await;
        assert!(
            matches!(answer, Err(TestError::Rejected(Rejected::DeadlineExceeded))),
            "{answer:?}"
        );
        let lines = recorder.lines();
        assert!(
            lines.iter().any(|line| line.starts_with("end 0")),
            "hedge: {hedge}: the first attempt was not cut at the deadline: {lines:?}"
        );
    }
}

/// A hedge on another target panics while the first racer is the half-open probe of its
/// own breaker: dropping the race frees that probe's place, so the next caller probes
/// instead of waiting for a verdict that will never come.
#[test]
fn a_hedge_that_panics_frees_the_first_racers_probe() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(10))
        .retry(1)
        .breaker_per_key("model", 1, Duration::from_secs(30))
        .hedge(1, Duration::from_millis(800))
        .build()
        .unwrap();
    let runtime = crate::common::paused_runtime();
    let failing = |model: &'static str| async move {
        assert_ne!(model, "claude", "the hedge panics");
        sleep(Duration::from_secs(5)).await;
        Err::<&str, _>(TestError::Busy)
    };
    // gpt fails at once: its breaker opens.
    let fast = |_: &'static str| async { Err::<&str, _>(TestError::Busy) };
    let _ = runtime.block_on(policy.run_keyed("gpt", || fast("gpt")));
    runtime.block_on(async { sleep(Duration::from_secs(30)).await });
    // gpt is half-open: the first racer is its probe; claude's hedge panics at 800 ms.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(policy.run_routed("gpt", ["claude"], failing))
    }));
    assert!(caught.is_err());
    // The probe's place is free: the next call on gpt probes at once.
    let answer = runtime.block_on(async {
        let probe = policy.run_keyed("gpt", || async { Ok::<_, TestError>("probed") });
        tokio::time::timeout(Duration::from_secs(1), probe).await
    });
    assert_eq!(answer.ok(), Some(Ok("probed")));
}
