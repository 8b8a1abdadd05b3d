//! `PolicyBuilder::transient`: a function decides which errors are worth retrying, for an
//! error type that does not implement `Transient` (one of another crate), as the attribute's
//! `transient = path` does. Through `Policy::run`, `run_keyed` and `run_routed`, on the paused
//! clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resil_runtime::{Classification, Jitter, Policy, Rejected};
use tokio::time::{sleep, Instant};

/// An error type as a client library would define it: no `Transient`, only what it needs to
/// carry resil's own failures.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Code {
    Unavailable,
    ResourceExhausted,
    InvalidArgument,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    code: Code,
    message: String,
    retry_after: Option<Duration>,
}

impl Status {
    fn new(code: Code) -> Self {
        Status {
            code,
            message: String::new(),
            retry_after: None,
        }
    }
}

/// resil's failures reach the caller as `Internal`, which the classifiers below call
/// permanent: resil keeps its own classification of them anyway.
impl From<Rejected> for Status {
    fn from(rejected: Rejected) -> Self {
        Status {
            code: Code::Internal,
            message: rejected.to_string(),
            retry_after: None,
        }
    }
}

fn is_retryable(status: &Status) -> bool {
    status.code == Code::Unavailable
}

fn classify(status: &Status) -> Classification {
    match status.code {
        Code::Unavailable => Classification::Transient,
        Code::ResourceExhausted => Classification::Throttle {
            wait: status.retry_after,
        },
        Code::InvalidArgument => Classification::MoveOn,
        Code::Internal => Classification::Permanent,
    }
}

/// Answers `codes` in turn, then `Ok` with the number of calls.
#[derive(Default)]
struct Provider {
    calls: AtomicU32,
}

impl Provider {
    async fn answer(&self, codes: &[Status]) -> Result<u32, Status> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        match codes.get(n as usize - 1) {
            Some(status) => Err(status.clone()),
            None => Ok(n),
        }
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[tokio::test(start_paused = true)]
async fn a_builders_classifier_decides_for_an_error_type_without_transient() {
    let policy = Policy::builder()
        .retry(2)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .jitter(Jitter::None)
        .transient(is_retryable)
        .build()
        .unwrap();
    let provider = Provider::default();
    let unavailable = [
        Status::new(Code::Unavailable),
        Status::new(Code::Unavailable),
    ];
    let started = Instant::now();
    assert_eq!(policy.run(|| provider.answer(&unavailable)).await, Ok(3));
    assert_eq!(started.elapsed(), Duration::from_millis(200));

    let provider = Provider::default();
    let invalid = [Status::new(Code::InvalidArgument)];
    assert_eq!(
        policy.run(|| provider.answer(&invalid)).await,
        Err(invalid[0].clone())
    );
    assert_eq!(provider.calls(), 1, "permanent: not retried");
}

#[tokio::test(start_paused = true)]
async fn a_builders_classifier_can_ask_for_a_wait() {
    let policy = Policy::builder()
        .retry(1)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .jitter(Jitter::None)
        .transient(classify)
        .build()
        .unwrap();
    let provider = Provider::default();
    let busy = [Status {
        retry_after: Some(Duration::from_secs(2)),
        ..Status::new(Code::ResourceExhausted)
    }];
    let started = Instant::now();
    assert_eq!(policy.run(|| provider.answer(&busy)).await, Ok(2));
    // The throttle's 2 s, not the backoff's 100 ms.
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn the_runtimes_own_failures_keep_their_classification_under_a_classifier() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(1))
        .retry(2)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .jitter(Jitter::None)
        .breaker_named("classifier_slow", 2, Duration::from_secs(30))
        .transient(is_retryable)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let slow = || async {
        calls.fetch_add(1, Ordering::Relaxed);
        sleep(Duration::from_secs(5)).await;
        Ok::<u32, Status>(0)
    };
    let started = Instant::now();
    // A timeout, converted into `Internal`, which `is_retryable` calls permanent: retried, and
    // counted by the breaker as the runtime classifies it: two open it, and the third attempt
    // is not made.
    let status = policy.run(slow).await.unwrap_err();
    assert_eq!(status.code, Code::Internal);
    assert!(status.message.contains("timed out"), "{}", status.message);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert_eq!(started.elapsed(), Duration::from_millis(2 * 1000 + 100));
    let status = policy.run(slow).await.unwrap_err();
    assert!(status.message.contains("breaker"), "{}", status.message);
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_policy_with_a_classifier_opens_each_keys_breaker_on_what_it_calls_transient() {
    let policy = Policy::builder()
        .retry(0)
        .breaker_per_key("model", 1, Duration::from_secs(30))
        .transient(is_retryable)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let fail = |code: Code| async {
        calls.fetch_add(1, Ordering::Relaxed);
        Err::<u32, _>(Status::new(code))
    };
    // A permanent error leaves the breaker closed; a transient one opens it (threshold 1).
    let _ = policy
        .run_keyed("small", || fail(Code::InvalidArgument))
        .await;
    let _ = policy
        .run_keyed("small", || fail(Code::InvalidArgument))
        .await;
    let _ = policy.run_keyed("small", || fail(Code::Unavailable)).await;
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    let refused = policy
        .run_keyed("small", || fail(Code::Unavailable))
        .await
        .unwrap_err();
    assert!(refused.message.contains("breaker"), "{}", refused.message);
    assert_eq!(calls.load(Ordering::Relaxed), 3, "refused without a call");
    // Another key's breaker is its own.
    let other = Provider::default();
    assert_eq!(policy.run_keyed("large", || other.answer(&[])).await, Ok(1));
}

#[tokio::test(start_paused = true)]
async fn a_classifier_can_move_a_route_on() {
    let policy = Policy::builder()
        .retry(1)
        .transient(classify)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let answer = policy
        .run_routed("small", ["large"], |model| {
            calls.fetch_add(1, Ordering::Relaxed);
            async move {
                match model {
                    "large" => Ok(format!("answered by {model}")),
                    _ => Err(Status::new(Code::InvalidArgument)),
                }
            }
        })
        .await;
    assert_eq!(answer.as_deref(), Ok("answered by large"));
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_classified_policy_hedges() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(5))
        .retry(1)
        .hedge(1, Duration::from_millis(800))
        .transient(is_retryable)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let answer = policy
        .run(|| {
            let n = calls.fetch_add(1, Ordering::Relaxed);
            async move {
                sleep(Duration::from_millis(if n == 0 { 4000 } else { 100 })).await;
                Ok::<_, Status>(n)
            }
        })
        .await;
    assert_eq!(answer, Ok(1));
    assert_eq!(started.elapsed(), Duration::from_millis(900));
}

/// Made by [`PolicyBuilder::rejected`](resil_runtime::PolicyBuilder::rejected) rather than
/// through `From<Rejected>` (which makes `Internal`): what an error type of another crate
/// needs, for which neither impl can be written.
fn carried(rejected: Rejected) -> Status {
    Status {
        message: format!("carried: {rejected}"),
        ..Status::new(Code::ResourceExhausted)
    }
}

#[tokio::test(start_paused = true)]
async fn the_builders_conversion_makes_resils_failures_keyed_and_routed() {
    let keyed = Policy::builder()
        .retry(0)
        .breaker_per_key("model", 1, Duration::from_secs(30))
        .transient(is_retryable)
        .rejected(carried)
        .build()
        .unwrap();
    let unavailable = || async { Err::<u32, _>(Status::new(Code::Unavailable)) };
    let _ = keyed.run_keyed("small", unavailable).await;
    let refused = keyed.run_keyed("small", unavailable).await.unwrap_err();
    assert_eq!(refused.code, Code::ResourceExhausted);
    assert!(
        refused.message.starts_with("carried: "),
        "{}",
        refused.message
    );
    assert!(refused.message.contains("breaker"), "{}", refused.message);

    let routed = Policy::builder()
        .timeout(Duration::from_secs(1))
        .retry(1)
        .transient(classify)
        .rejected(carried)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let answer = routed
        .run_routed("small", ["large"], |_| {
            calls.fetch_add(1, Ordering::Relaxed);
            async {
                sleep(Duration::from_secs(5)).await;
                Ok::<u32, Status>(1)
            }
        })
        .await
        .unwrap_err();
    assert!(
        answer.message.starts_with("carried: "),
        "{}",
        answer.message
    );
    assert!(answer.message.contains("timed out"), "{}", answer.message);
    assert_eq!(calls.load(Ordering::Relaxed), 2, "the timeout was retried");
}
