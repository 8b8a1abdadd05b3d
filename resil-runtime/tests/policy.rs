//! The policy as a whole: what is retried and what is not, the order of the policies,
//! outcomes a fallback can act on, events, and `Send` futures.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Provider, Recorder, TestError};
use resil_runtime::{Breaker, BreakerConfig, ConfigError, Keyed, Next, Outcome, Policy, Rejected};

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_until_success() {
    let policy = Policy::builder().retry(3).build().unwrap();
    let provider = Provider::default();
    let mut n = 0;
    let result = policy
        .run(|| {
            n += 1;
            provider.answer(if n < 3 { Err(TestError::Busy) } else { Ok(n) })
        })
        .await;
    assert_eq!(result, Ok(3));
    assert_eq!(provider.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_never_retried() {
    let policy = Policy::builder().retry(5).build().unwrap();
    let provider = Provider::default();
    let started = tokio::time::Instant::now();
    let result = policy
        .run(|| provider.answer(Err(TestError::BadRequest)))
        .await;
    assert_eq!(result, Err(TestError::BadRequest));
    assert_eq!(provider.calls(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_retry_plus_one_attempts() {
    let policy = Policy::builder().retry(2).build().unwrap();
    let provider = Provider::default();
    let result = policy.run(|| provider.answer(Err(TestError::Busy))).await;
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(provider.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_meets_an_open_breaker_ends_with_the_providers_error() {
    let breaker = Arc::new(Breaker::new(
        "flaky",
        BreakerConfig::new(2, Duration::from_secs(30)).unwrap(),
    ));
    let policy = Policy::builder().retry(5).breaker(breaker).build().unwrap();
    let provider = Provider::default();
    let result = policy.run(|| provider.answer(Err(TestError::Busy))).await;
    assert_eq!(
        result,
        Err(TestError::Busy),
        "the operation called: its result is what the provider said, still transient"
    );
    assert_eq!(
        provider.calls(),
        2,
        "the second failure opened it; no third call"
    );
    let refused = policy.run(|| provider.answer(Ok(1))).await;
    assert!(
        matches!(
            refused,
            Err(TestError::Rejected(Rejected::BreakerOpen { .. }))
        ),
        "an operation that made no call: {refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn outcomes_tell_where_a_fallback_applies() {
    let policy = Policy::builder().retry(1).bulkhead(1).build().unwrap();
    let provider = Provider::default();
    async fn outcome(
        policy: &Policy,
        provider: &Provider,
        result: Result<u32, TestError>,
    ) -> Outcome<u32, TestError> {
        let mut execution = policy.execute();
        loop {
            if let Next::Done(outcome) = execution.attempt(provider.answer(result.clone())).await {
                return outcome;
            }
        }
    }
    assert_eq!(
        outcome(&policy, &provider, Ok(1)).await,
        Outcome::Completed(Ok(1))
    );
    assert_eq!(provider.calls(), 1);
    assert_eq!(
        outcome(&policy, &provider, Err(TestError::BadRequest)).await,
        Outcome::Completed(Err(TestError::BadRequest)),
        "permanent: no fallback"
    );
    assert_eq!(provider.calls(), 2, "permanent: not retried");
    assert_eq!(
        outcome(&policy, &provider, Err(TestError::Busy)).await,
        Outcome::Failed(TestError::Busy)
    );
    assert_eq!(provider.calls(), 4, "transient: retried once, then failed");

    let _held = policy.execute::<TestError>();
    assert_eq!(
        outcome(&policy, &provider, Ok(1)).await,
        Outcome::Failed(TestError::Rejected(Rejected::BulkheadFull { limit: 1 })),
        "a rejection: fallback"
    );
    assert_eq!(provider.calls(), 4, "a rejection calls nothing");
}

#[tokio::test(start_paused = true)]
async fn an_execution_lets_each_attempt_borrow_mutably() {
    let policy = Policy::builder().retry(2).build().unwrap();
    let mut log = Vec::new();
    let mut execution = policy.execute();
    let result = loop {
        let attempt = async {
            log.push(execution_len(&log));
            if log.len() < 3 {
                Err(TestError::Busy)
            } else {
                Ok(log.len())
            }
        };
        if let Next::Done(outcome) = execution.attempt(attempt).await {
            break outcome.into_result();
        }
    };
    assert_eq!(result, Ok(3));
    assert_eq!(log, [0, 1, 2]);
}

fn execution_len(log: &[usize]) -> usize {
    log.len()
}

#[tokio::test(start_paused = true)]
async fn events_trace_the_operation() {
    let recorder = Recorder::new();
    let policy = Policy::builder()
        .retry(1)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .jitter(resil_runtime::Jitter::None)
        .listener(recorder.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let mut n = 0;
    policy
        .run(|| {
            n += 1;
            provider.answer(if n == 1 { Err(TestError::Busy) } else { Ok(1) })
        })
        .await
        .unwrap();
    assert_eq!(
        recorder.lines(),
        [
            "start 0",
            "end 0 Transient",
            "wait 100000000",
            "start 1",
            "end 1 Ok"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_are_send_when_attempts_borrow() {
    struct Client {
        policy: Policy<Keyed>,
        prefix: String,
    }
    impl Client {
        async fn call(&self, name: &str) -> Result<String, TestError> {
            self.policy
                .run_keyed(name, || async move {
                    tokio::task::yield_now().await;
                    Ok(format!("{}{name}", self.prefix))
                })
                .await
        }
    }
    let client = Arc::new(Client {
        policy: Policy::builder()
            .timeout(Duration::from_secs(5))
            .retry(2)
            .breaker_per_key("name", 5, Duration::from_secs(30))
            .bulkhead(8)
            .build()
            .unwrap(),
        prefix: "hello ".into(),
    });
    let handles: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            let client = client.clone();
            tokio::spawn(async move { client.call(name).await })
        })
        .collect();
    for (handle, name) in handles.into_iter().zip(["a", "b", "c"]) {
        assert_eq!(handle.await.unwrap().unwrap(), format!("hello {name}"));
    }
}

#[test]
fn builders_report_settings_that_cannot_work() {
    let zero = Policy::builder().timeout(Duration::ZERO).build();
    assert_eq!(
        zero.unwrap_err(),
        ConfigError::ZeroDuration { key: "timeout" }
    );
    assert_eq!(
        Policy::builder().bulkhead(0).build().unwrap_err(),
        ConfigError::ZeroBulkhead
    );
    let threshold = Policy::builder()
        .breaker_per_key("k", 0, Duration::from_secs(1))
        .build();
    assert_eq!(threshold.unwrap_err(), ConfigError::ZeroBreakerThreshold);
    let backoff = Policy::builder()
        .backoff(Duration::from_secs(2), Duration::from_secs(1))
        .build();
    assert!(matches!(
        backoff,
        Err(ConfigError::BackoffBaseAboveCap { .. })
    ));
    let message = Policy::builder()
        .timeout(Duration::from_secs(20))
        .deadline(Duration::from_secs(10))
        .build()
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "timeout 20s is longer than deadline 10s: the deadline would cut every attempt first; make the timeout shorter than the deadline"
    );
}

/// Records, for every event, whether the operation was visible to the listener.
#[derive(Debug, Default)]
struct SeesOperation(std::sync::Mutex<Vec<bool>>);

impl resil_runtime::events::Listener for SeesOperation {
    fn on_event(&self, _: &resil_runtime::events::Event<'_>) {
        let visible = resil_runtime::Operation::current().is_some();
        self.0.lock().unwrap().push(visible);
    }
}

#[tokio::test(start_paused = true)]
async fn listeners_see_the_operation_of_every_event() {
    let seen = Arc::new(SeesOperation::default());
    let policy = Policy::builder()
        .retry(2)
        .listener(seen.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    policy
        .run(|| provider.answer(Err(TestError::Busy)))
        .await
        .unwrap_err();
    let seen = seen.0.lock().unwrap();
    assert_eq!(seen.len(), 9, "3 starts, 3 ends, 2 waits, 1 give-up");
    assert!(seen.iter().all(|visible| *visible));
}
