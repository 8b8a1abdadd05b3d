//! Routes: one operation over several targets, each with its own breaker, bulkhead and
//! gates. A target that would make no call is skipped; a failure moves to the next target at
//! once; coming back to a target that failed waits the backoff. On tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Recorder, TargetCalls as Calls, TestError};
use futures::StreamExt;
use resil_runtime::stream::Commit;
use resil_runtime::{Jitter, Keyed, Operation, Policy, PolicyBuilder, Rejected};
use tokio::time::Instant;

const MODELS: [&str; 2] = ["claude", "mini"];

fn keyed(retry: u32) -> PolicyBuilder<Keyed> {
    Policy::builder()
        .retry(retry)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .breaker_per_key("model", 1, Duration::from_secs(30))
}

/// One routed call from "gpt" over `MODELS`, each target answering what `answer` says.
async fn call(
    policy: &Policy<Keyed>,
    calls: &Calls,
    answer: impl Fn(&str) -> Result<&'static str, TestError>,
) -> Result<&'static str, TestError> {
    let start = Instant::now();
    policy
        .run_routed("gpt", MODELS, |model| {
            calls.record(model, start);
            let answer = answer(model);
            async move { answer }
        })
        .await
}

fn only_claude(model: &str) -> Result<&'static str, TestError> {
    match model {
        "claude" => Ok("claude"),
        _ => Err(TestError::Busy),
    }
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_moves_to_the_next_target_at_once() {
    let policy = keyed(2).build().unwrap();
    let calls = Calls::default();
    assert_eq!(call(&policy, &calls, only_claude).await, Ok("claude"));
    assert_eq!(calls.seen(), [("gpt".into(), 0), ("claude".into(), 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_target_whose_breaker_is_open_is_skipped_without_a_call() {
    let recorder = Recorder::new();
    let policy = keyed(2).listener(recorder.clone()).build().unwrap();
    let calls = Calls::default();
    call(&policy, &calls, only_claude).await.unwrap();
    // gpt's breaker opened on its failure: the next call does not send it anything, and the
    // skip costs no retry (retry = 0 would do).
    let policy_without_retries = &policy;
    assert_eq!(
        call(policy_without_retries, &calls, only_claude).await,
        Ok("claude")
    );
    assert_eq!(calls.targets(), ["gpt", "claude", "claude"]);
    assert!(recorder
        .lines()
        .contains(&"skip gpt breaker_open".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_skip_is_no_attempt_and_costs_no_retry() {
    let policy = keyed(0).build().unwrap();
    let calls = Calls::default();
    // retry = 0: the first call fails on gpt, and only skips afterwards.
    assert_eq!(
        call(&policy, &calls, only_claude).await,
        Err(TestError::Busy)
    );
    assert_eq!(call(&policy, &calls, only_claude).await, Ok("claude"));
    assert_eq!(calls.targets(), ["gpt", "claude"]);
}

#[tokio::test(start_paused = true)]
async fn a_target_whose_gate_has_no_slot_before_the_deadline_is_skipped() {
    let policy = Policy::builder()
        .keyed("model")
        .rate(1, Duration::from_secs(60), 1)
        .rate_per_key()
        .deadline(Duration::from_secs(5))
        .build()
        .unwrap();
    let calls = Calls::default();
    assert_eq!(
        call(&policy, &calls, |model| Ok(leak(model))).await,
        Ok("gpt")
    );
    // gpt's next slot is a minute away, past the deadline: claude serves, at once.
    assert_eq!(
        call(&policy, &calls, |model| Ok(leak(model))).await,
        Ok("claude")
    );
    assert_eq!(calls.seen(), [("gpt".into(), 0), ("claude".into(), 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_target_whose_bulkhead_is_full_is_skipped() {
    let policy = Policy::builder()
        .keyed("model")
        .bulkhead(1)
        .bulkhead_per_key()
        .build()
        .unwrap();
    let calls = Calls::default();
    let slow = policy.run_keyed("gpt", || async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<_, TestError>("slow")
    });
    let routed = async {
        tokio::task::yield_now().await;
        call(&policy, &calls, |model| Ok(leak(model))).await
    };
    let (slow, routed) = tokio::join!(slow, routed);
    assert_eq!((slow, routed), (Ok("slow"), Ok("claude")));
}

#[tokio::test(start_paused = true)]
async fn a_throttle_moves_on_at_once_while_another_target_admits() {
    let policy = keyed(2).build().unwrap();
    let calls = Calls::default();
    let answer = |model: &str| match model {
        "gpt" => Err(TestError::Throttled(Duration::from_secs(20))),
        _ => Ok("claude"),
    };
    assert_eq!(call(&policy, &calls, answer).await, Ok("claude"));
    assert_eq!(calls.seen(), [("gpt".into(), 0), ("claude".into(), 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_ends_the_operation() {
    let policy = keyed(2).build().unwrap();
    let calls = Calls::default();
    let answer = |_: &str| Err(TestError::BadRequest);
    assert_eq!(
        call(&policy, &calls, answer).await,
        Err(TestError::BadRequest)
    );
    assert_eq!(calls.targets(), ["gpt"]);
}

#[tokio::test(start_paused = true)]
async fn an_error_that_moves_on_is_never_sent_to_its_target_again() {
    let policy = keyed(3).build().unwrap();
    let calls = Calls::default();
    let answer = |model: &str| match model {
        "gpt" => Err(TestError::TooLong),
        _ => Err(TestError::Busy),
    };
    assert_eq!(call(&policy, &calls, answer).await, Err(TestError::Busy));
    // gpt at once refused for good, claude and mini at once, then mini's breaker is open:
    // back to claude after the backoff (its breaker opened too: threshold 1). Never gpt.
    assert_eq!(calls.targets()[..3], ["gpt", "claude", "mini"]);
    assert!(!calls.targets()[1..].contains(&"gpt".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn an_error_that_moves_on_is_permanent_when_no_target_is_left() {
    let policy = keyed(3).build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["gpt"], |model| {
            calls.record(model, start);
            async { Err::<(), _>(TestError::TooLong) }
        })
        .await;
    assert_eq!(answer, Err(TestError::TooLong));
    assert_eq!(calls.targets(), ["gpt"]);
}

#[tokio::test(start_paused = true)]
async fn coming_back_to_a_target_that_failed_waits_the_backoff() {
    let policy = keyed(2)
        .breaker_per_key("model", 10, Duration::from_secs(30))
        .build()
        .unwrap();
    let calls = Calls::default();
    let failed = Arc::new(Mutex::new(0));
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            let mut failed = failed.lock().unwrap();
            *failed += 1;
            let answer = if *failed <= 2 {
                Err(TestError::Busy)
            } else {
                Ok(model)
            };
            async move { answer }
        })
        .await;
    assert_eq!(answer, Ok("gpt"));
    // The second failure comes back to gpt: the backoff of attempt 1 (base · 2, no jitter).
    assert_eq!(
        calls.seen(),
        [
            ("gpt".into(), 0),
            ("claude".into(), 0),
            ("gpt".into(), 2000)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn every_attempt_on_every_target_counts_against_one_allowance() {
    let policy = keyed(1).build().unwrap();
    let calls = Calls::default();
    let answer = |_: &str| Err(TestError::Busy);
    assert_eq!(call(&policy, &calls, answer).await, Err(TestError::Busy));
    assert_eq!(calls.targets(), ["gpt", "claude"]);
}

#[tokio::test(start_paused = true)]
async fn when_every_target_is_skipped_the_first_ones_rejection_ends_the_operation() {
    let policy = keyed(2).build().unwrap();
    let keys = policy.keys().unwrap();
    for model in ["gpt", "claude", "mini"] {
        keys.get(model).breaker().unwrap().force_open();
    }
    let calls = Calls::default();
    let answer = call(&policy, &calls, |model| Ok(leak(model))).await;
    match answer {
        Err(TestError::Rejected(Rejected::BreakerOpen { breaker, .. })) => {
            assert!(breaker.contains("gpt"), "{breaker}")
        }
        other => panic!("expected gpt's breaker to refuse, got {other:?}"),
    }
    assert!(calls.targets().is_empty());
}

#[tokio::test(start_paused = true)]
async fn after_a_failure_every_target_skipped_ends_with_the_providers_error() {
    let policy = keyed(2).build().unwrap();
    let keys = policy.keys().unwrap();
    for model in ["claude", "mini"] {
        keys.get(model).breaker().unwrap().force_open();
    }
    let calls = Calls::default();
    let answer = call(&policy, &calls, |_| Err(TestError::Busy)).await;
    assert_eq!(answer, Err(TestError::Busy));
    assert_eq!(calls.targets(), ["gpt"]);
}

#[tokio::test(start_paused = true)]
async fn the_targets_share_one_operation_id() {
    let policy = keyed(2).build().unwrap();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let answer = policy
        .run_routed("gpt", MODELS, |model| {
            let ids = Arc::clone(&ids);
            async move {
                let id = Operation::current().unwrap().id().to_string();
                ids.lock().unwrap().push(id);
                only_claude(model)
            }
        })
        .await;
    assert_eq!(answer, Ok("claude"));
    let ids = ids.lock().unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], ids[1]);
}

#[tokio::test(start_paused = true)]
async fn a_listed_value_equal_to_the_callers_is_not_repeated() {
    let policy = keyed(5).build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["gpt", "claude", "gpt"], |model| {
            calls.record(model, start);
            async { Err::<(), _>(TestError::Busy) }
        })
        .await;
    assert_eq!(answer, Err(TestError::Busy));
    // Both breakers open after their first failure (threshold 1): two calls, no repeats.
    assert_eq!(calls.targets(), ["gpt", "claude"]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_before_its_commit_moves_to_the_next_target() {
    let policy = keyed(2).build().unwrap();
    let stream = policy
        .run_stream_routed_until("gpt", MODELS, Commit::first_item(), |model| async move {
            let items: Vec<Result<String, TestError>> = match model {
                "gpt" => vec![Err(TestError::Busy)],
                _ => vec![Ok(format!("{model}: Hello")), Ok(format!("{model}: world"))],
            };
            Ok::<_, TestError>(futures::stream::iter(items))
        })
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(
        items,
        [
            Ok("claude: Hello".to_owned()),
            Ok("claude: world".to_owned())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_before_its_commit_moves_to_the_next_target() {
    let policy = keyed(2).timeout(Duration::from_secs(1)).build().unwrap();
    let start = Instant::now();
    let stream = policy
        .run_stream_routed_until("gpt", MODELS, Commit::first_item(), |model| async move {
            let delay = if model == "gpt" { 60 } else { 0 };
            let items = futures::stream::once(async move {
                tokio::time::sleep(Duration::from_secs(delay)).await;
                Ok::<_, TestError>(model)
            });
            Ok::<_, TestError>(items)
        })
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(items, [Ok("claude")]);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

fn leak(model: &str) -> &'static str {
    match model {
        "gpt" => "gpt",
        "claude" => "claude",
        _ => "mini",
    }
}
