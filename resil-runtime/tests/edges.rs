//! The promises of the second wave at their edges (issue 22's defects), each with the case
//! that broke it: what a refused wait says, what a stream's deadline bounds, what a refund
//! may give back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Provider, Recorder, TestError};
use resil_runtime::Policy;
use tokio::time::Instant;

/// An error asking for 10¹⁹ s ends the operation at once, and says why it was not retried.
#[tokio::test(start_paused = true)]
async fn a_refused_retry_after_says_why_nothing_was_retried() {
    let recorder = Recorder::new();
    let policy = Policy::builder()
        .retry(2)
        .listener(recorder.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let asked = Duration::from_secs(10_000_000_000_000_000_000);
    let result = policy
        .run(|| provider.answer(Err(TestError::RetryAfter(asked))))
        .await;
    assert_eq!(result, Err(TestError::RetryAfter(asked)));
    assert_eq!(provider.calls(), 1);
    let gave_up = recorder
        .lines()
        .into_iter()
        .find(|line| line.starts_with("GaveUp"))
        .expect("a GaveUp event");
    assert!(gave_up.contains("reason: RetryAfterTooLong"), "{gave_up}");
    assert!(
        gave_up.contains(&format!("asked: Some({asked:?})")),
        "{gave_up}"
    );

    let deadline = Policy::builder()
        .retry(2)
        .deadline(Duration::from_secs(10))
        .listener(recorder.clone())
        .build()
        .unwrap();
    let asked = Duration::from_secs(30);
    let _ = deadline
        .run(|| provider.answer(Err(TestError::RetryAfter(asked))))
        .await;
    let last = recorder.lines().pop().unwrap();
    assert!(last.contains("reason: DeadlineTooClose"), "{last}");
    assert!(last.contains("asked: Some(30s)"), "{last}");
}

/// When each call went out, in seconds after the start.
#[derive(Debug, Clone, Default)]
struct Sent(std::sync::Arc<std::sync::Mutex<Vec<f64>>>);

impl Sent {
    fn record(&self, origin: Instant) {
        self.0.lock().unwrap().push(origin.elapsed().as_secs_f64());
    }
    fn times(&self) -> Vec<f64> {
        self.0.lock().unwrap().clone()
    }
}

fn one_per_second() -> Arc<Policy> {
    Arc::new(
        Policy::builder()
            .rate(1, Duration::from_secs(1), 1)
            .build()
            .unwrap(),
    )
}

/// A call through `policy` that records when it went out, lasts `lasts` and answers `answer`.
fn call(
    policy: &Arc<Policy>,
    sent: &Sent,
    origin: Instant,
    answer: Result<u32, TestError>,
    lasts: Duration,
) -> tokio::task::JoinHandle<Result<u32, TestError>> {
    let (policy, sent) = (Arc::clone(policy), sent.clone());
    tokio::spawn(async move {
        policy
            .run(|| {
                let (sent, answer) = (sent.clone(), answer.clone());
                async move {
                    sent.record(origin);
                    tokio::time::sleep(lasts).await;
                    answer
                }
            })
            .await
    })
}

/// A throttle revokes the slots already promised; a waiter cancelled afterwards has nothing to
/// give back, so a newcomer still waits for the throttle's end (10.5 s), not 6.5 s.
#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_gives_back_nothing_a_throttle_revoked() {
    let policy = one_per_second();
    let (origin, sent) = (Instant::now(), Sent::default());
    let throttle = Err(TestError::Throttled(Duration::from_secs(10)));
    let throttled = call(
        &policy,
        &sent,
        origin,
        throttle.clone(),
        Duration::from_millis(500),
    );
    tokio::task::yield_now().await;
    let waiters: Vec<_> = (0..4)
        .map(|_| call(&policy, &sent, origin, Ok(1), Duration::ZERO))
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(throttled.await.unwrap(), throttle);
    for waiter in waiters {
        waiter.abort();
        let _ = waiter.await;
    }
    let newcomer = call(&policy, &sent, origin, Ok(2), Duration::ZERO);
    assert_eq!(newcomer.await.unwrap(), Ok(2));
    assert_eq!(sent.times(), [0.0, 10.5]);
}

/// Five callers queued one second apart; the three in the middle give up; three newcomers
/// take the slots after the last promised one, never the instant still promised to the fifth.
#[tokio::test(start_paused = true)]
async fn a_slot_given_up_in_the_middle_never_double_books_the_tail() {
    let policy = one_per_second();
    let (origin, sent) = (Instant::now(), Sent::default());
    let mut queued: Vec<_> = (0..5)
        .map(|n| call(&policy, &sent, origin, Ok(n), Duration::ZERO))
        .collect();
    tokio::task::yield_now().await;
    for waiter in queued.drain(1..4) {
        waiter.abort();
        let _ = waiter.await;
    }
    let newcomers: Vec<_> = (5..8)
        .map(|n| call(&policy, &sent, origin, Ok(n), Duration::ZERO))
        .collect();
    for caller in queued.into_iter().chain(newcomers) {
        assert!(caller.await.unwrap().is_ok());
    }
    assert_eq!(sent.times(), [0.0, 4.0, 5.0, 6.0, 7.0]);
}
