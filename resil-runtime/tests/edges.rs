//! The promises of the second wave at their edges (issue 22's defects), each with the case
//! that broke it: what a refused wait says, what a stream's deadline bounds, what a refund
//! may give back.

mod common;

use std::time::Duration;

use common::{Provider, Recorder, TestError};
use resil_runtime::Policy;

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
