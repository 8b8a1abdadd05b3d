//! Hedges: when an attempt has not answered within the delay, one more races it inside the
//! caller's task; the first success wins and the others are dropped, counted nowhere. On
//! tokio's paused clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Recorder, TestError};
use futures::StreamExt;
use resil_runtime::stream::Commit;
use resil_runtime::{Breaker, BreakerConfig, Operation, Policy, PolicyBuilder};
use tokio::time::{sleep, Instant};

const DELAY: Duration = Duration::from_millis(800);

fn hedged(retry: u32, hedges: u32) -> PolicyBuilder {
    Policy::builder()
        .timeout(Duration::from_secs(10))
        .retry(retry)
        .backoff(Duration::from_secs(1), Duration::from_secs(1))
        .hedge(hedges, DELAY)
}

/// An answer after its delay in milliseconds.
type Answer = (u64, Result<u32, TestError>);

/// Calls whose answers come after the delays given, in order of the calls, each counted
/// when it starts and when it is dropped unfinished.
#[derive(Clone, Default)]
struct Calls {
    started: Arc<AtomicU32>,
    dropped: Arc<AtomicU32>,
    delays: Arc<Mutex<Vec<Answer>>>,
}

struct DropGuard(Arc<AtomicU32>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Calls {
    fn scripted(answers: &[Answer]) -> Self {
        let calls = Calls::default();
        calls
            .delays
            .lock()
            .unwrap()
            .extend(answers.iter().cloned().rev());
        calls
    }

    fn call(&self) -> impl std::future::Future<Output = Result<u32, TestError>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let (delay, answer) = self.delays.lock().unwrap().pop().unwrap_or((0, Ok(0)));
        let dropped = Arc::clone(&self.dropped);
        async move {
            let mut guard = DropGuard(dropped, false);
            sleep(Duration::from_millis(delay)).await;
            guard.1 = true;
            answer
        }
    }

    fn started(&self) -> u32 {
        self.started.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> u32 {
        self.dropped.load(Ordering::SeqCst)
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_attempt_is_raced_after_the_delay_and_the_faster_wins() {
    let policy = hedged(1, 1).build().unwrap();
    let calls = Calls::scripted(&[(4000, Ok(1)), (100, Ok(2))]);
    let start = Instant::now();
    assert_eq!(policy.run(|| calls.call()).await, Ok(2));
    assert_eq!(start.elapsed(), Duration::from_millis(900));
    assert_eq!((calls.started(), calls.dropped()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_answers_within_the_delay_is_not_hedged() {
    let policy = hedged(1, 1).build().unwrap();
    let calls = Calls::scripted(&[(700, Ok(1))]);
    assert_eq!(policy.run(|| calls.call()).await, Ok(1));
    assert_eq!(calls.started(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_first_racer_may_win_and_the_hedge_is_dropped() {
    let policy = hedged(1, 1).build().unwrap();
    let calls = Calls::scripted(&[(1000, Ok(1)), (5000, Ok(2))]);
    assert_eq!(policy.run(|| calls.call()).await, Ok(1));
    assert_eq!((calls.started(), calls.dropped()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn hedges_are_attempts_drawn_from_the_retries() {
    // Three hedges declared, one retry: one hedge only.
    let policy = hedged(1, 3).build().unwrap();
    let calls = Calls::scripted(&[(9000, Ok(1)), (9000, Ok(2)), (100, Ok(3))]);
    let start = Instant::now();
    assert_eq!(policy.run(|| calls.call()).await, Ok(1));
    assert_eq!(start.elapsed(), Duration::from_millis(9000));
    assert_eq!(calls.started(), 2);
}

#[tokio::test(start_paused = true)]
async fn each_hedge_starts_a_delay_after_the_last() {
    let policy = hedged(3, 2).build().unwrap();
    let calls = Calls::scripted(&[(9000, Ok(1)), (9000, Ok(2)), (100, Ok(3))]);
    let start = Instant::now();
    assert_eq!(policy.run(|| calls.call()).await, Ok(3));
    assert_eq!(start.elapsed(), Duration::from_millis(1700));
    assert_eq!((calls.started(), calls.dropped()), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn no_hedge_starts_when_the_retry_budget_refuses() {
    let policy = hedged(1, 1).retry_budget(0.0, 0.0).build().unwrap();
    let calls = Calls::scripted(&[(4000, Ok(1)), (100, Ok(2))]);
    let start = Instant::now();
    assert_eq!(policy.run(|| calls.call()).await, Ok(1));
    assert_eq!(start.elapsed(), Duration::from_millis(4000));
    assert_eq!(calls.started(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_racer_that_fails_leaves_the_others_running() {
    let recorder = Recorder::new();
    let policy = hedged(1, 1).listener(recorder.clone()).build().unwrap();
    let calls = Calls::scripted(&[(900, Err(TestError::Busy)), (500, Ok(2))]);
    let start = Instant::now();
    assert_eq!(policy.run(|| calls.call()).await, Ok(2));
    assert_eq!(start.elapsed(), Duration::from_millis(1300));
    let lines = recorder.lines();
    assert!(lines.contains(&"end 0 Transient".to_owned()), "{lines:?}");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_from_a_racer_ends_the_race() {
    let policy = hedged(1, 1).build().unwrap();
    let calls = Calls::scripted(&[(900, Err(TestError::BadRequest)), (5000, Ok(2))]);
    assert_eq!(
        policy.run(|| calls.call()).await,
        Err(TestError::BadRequest)
    );
    assert_eq!((calls.started(), calls.dropped()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn when_every_racer_fails_the_operation_retries_after_the_backoff() {
    let policy = hedged(2, 1).build().unwrap();
    let calls = Calls::scripted(&[
        (900, Err(TestError::Busy)),
        (200, Err(TestError::Busy)),
        (0, Ok(3)),
    ]);
    let start = Instant::now();
    assert_eq!(policy.run(|| calls.call()).await, Ok(3));
    // The hedge fails last at 1 s; the backoff (1 s, full jitter) then the third attempt.
    assert!(start.elapsed() <= Duration::from_secs(2));
    assert_eq!(calls.started(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_racer_counts_nowhere_on_the_breaker() {
    let breaker = Arc::new(Breaker::new(
        "hedged",
        BreakerConfig::new(1, Duration::from_secs(30)).unwrap(),
    ));
    let policy = hedged(1, 1).breaker(Arc::clone(&breaker)).build().unwrap();
    let calls = Calls::scripted(&[(4000, Err(TestError::Busy)), (100, Ok(2))]);
    assert_eq!(policy.run(|| calls.call()).await, Ok(2));
    // The first racer was dropped before it failed: the breaker saw one success only.
    assert_eq!(breaker.failures(), 0);
    assert_eq!(breaker.state(), resil_runtime::BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_racers_share_the_bulkheads_place_and_give_it_back() {
    let policy = hedged(1, 1).bulkhead(1).build().unwrap();
    let calls = Calls::scripted(&[(4000, Ok(1)), (100, Ok(2))]);
    assert_eq!(policy.run(|| calls.call()).await, Ok(2));
    let calls = Calls::scripted(&[(0, Ok(3))]);
    assert_eq!(policy.run(|| calls.call()).await, Ok(3));
}

#[tokio::test(start_paused = true)]
async fn the_racers_share_one_operation_id_and_nested_ids() {
    let policy = hedged(1, 1).build().unwrap();
    let inner = Policy::builder().build().unwrap();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let calls = AtomicU32::new(0);
    let answer = policy
        .run(|| {
            let ids = Arc::clone(&ids);
            let slow = calls.fetch_add(1, Ordering::SeqCst) == 0;
            let inner = &inner;
            async move {
                let id = Operation::current().unwrap().id().to_string();
                let nested = inner
                    .run(|| async {
                        Ok::<_, TestError>(Operation::current().unwrap().id().to_string())
                    })
                    .await?;
                ids.lock().unwrap().push((id, nested));
                sleep(Duration::from_millis(if slow { 4000 } else { 100 })).await;
                Ok::<_, TestError>(())
            }
        })
        .await;
    assert_eq!(answer, Ok(()));
    let ids = ids.lock().unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        ids[0], ids[1],
        "the hedge derives the ids its first racer did"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_commits_on_the_second_racer_and_the_consumer_sees_only_its_items() {
    let policy = hedged(1, 1).build().unwrap();
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    let stream = policy
        .run_stream_until(Commit::first_item(), || {
            let racer = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let delay = if racer == 0 { 5000 } else { 100 };
                let items =
                    futures::stream::iter([format!("{racer}: Hello"), format!("{racer}: world")])
                        .then(move |item| async move {
                            sleep(Duration::from_millis(delay)).await;
                            Ok::<_, TestError>(item)
                        });
                Ok::<_, TestError>(items)
            }
        })
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(900));
    let items: Vec<_> = stream.collect().await;
    assert_eq!(
        items,
        [Ok("1: Hello".to_owned()), Ok("1: world".to_owned())]
    );
}

#[test]
fn a_hedge_is_refused_when_it_could_never_start() {
    let refused = |builder: PolicyBuilder| builder.build().unwrap_err().to_string();
    assert!(refused(hedged(1, 4)).contains("1 to 3"));
    assert!(refused(hedged(0, 1)).contains("retry"));
    let late = Policy::builder()
        .timeout(Duration::from_millis(500))
        .retry(1)
        .hedge(1, DELAY);
    assert!(refused(late).contains("shorter than the limit"));
}

#[tokio::test(start_paused = true)]
async fn with_a_route_the_hedge_goes_to_the_next_target() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(10))
        .retry(2)
        .breaker_per_key("model", 5, Duration::from_secs(30))
        .bulkhead(1)
        .bulkhead_per_key()
        .hedge(1, DELAY)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            seen.lock()
                .unwrap()
                .push((model, start.elapsed().as_millis()));
            async move {
                let delay = if model == "gpt" { 5000 } else { 100 };
                sleep(Duration::from_millis(delay)).await;
                Ok::<_, TestError>(model)
            }
        })
        .await;
    assert_eq!(answer, Ok("claude"));
    assert_eq!(*seen.lock().unwrap(), [("gpt", 0), ("claude", 800)]);
    // Each racer held its own target's bulkhead place, and gave it back.
    let keys = policy.keys().unwrap();
    for model in ["gpt", "claude"] {
        assert_eq!(
            keys.get(model).bulkhead().unwrap().in_flight(),
            0,
            "{model}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_routed_stream_commits_on_the_hedges_target_and_holds_its_state() {
    let policy = Policy::builder()
        .keyed("model")
        .timeout(Duration::from_secs(10))
        .retry(2)
        .bulkhead(1)
        .bulkhead_per_key()
        .hedge(1, DELAY)
        .build()
        .unwrap();
    let stream = policy
        .run_stream_routed("gpt", ["claude"], |model| async move {
            let delay = if model == "gpt" { 5000 } else { 100 };
            let items =
                futures::stream::iter([format!("{model}: Hello"), format!("{model}: world")]).then(
                    move |item| async move {
                        sleep(Duration::from_millis(delay)).await;
                        Ok::<_, TestError>(item)
                    },
                );
            Ok::<_, TestError>(items)
        })
        .await
        .unwrap();
    let keys = policy.keys().unwrap();
    // The committed stream holds claude's place; gpt's racer gave its own back.
    assert_eq!(keys.get("claude").bulkhead().unwrap().in_flight(), 1);
    assert_eq!(keys.get("gpt").bulkhead().unwrap().in_flight(), 0);
    let items: Vec<_> = stream.collect().await;
    assert_eq!(
        items,
        [
            Ok("claude: Hello".to_owned()),
            Ok("claude: world".to_owned())
        ]
    );
    assert_eq!(keys.get("claude").bulkhead().unwrap().in_flight(), 0);
}
