//! A stream's commit phase: the items before the one that commits it are held, bounded in
//! number and in time however fast the provider sends them, and the runtime's API commits
//! what the attribute commits. Every test runs on tokio's paused clock.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestError;
use futures::{Stream, StreamExt};
use resil_runtime::stream::Commit;
use resil_runtime::{Policy, Rejected, Transient};

/// A provider whose items are always ready and never commit (role-only chunks, keep-alives),
/// up to `limit` of them: it counts how many were read.
fn flood(
    read: &Arc<AtomicUsize>,
    limit: usize,
) -> impl Stream<Item = Result<&'static str, TestError>> {
    let read = Arc::clone(read);
    futures::stream::iter(0..limit).map(move |_| {
        read.fetch_add(1, Ordering::Relaxed);
        Ok("")
    })
}

/// The outcome of a streaming call through `policy` whose every connect floods a million
/// items that never commit, counting them in `read`.
async fn flooded(policy: &Policy, read: &Arc<AtomicUsize>) -> Result<(), TestError> {
    policy
        .run_stream_until(Commit::when(has_content), || async {
            Ok::<_, TestError>(flood(read, 1_000_000))
        })
        .await
        .map(drop)
}

fn has_content(chunk: &&str) -> bool {
    !chunk.is_empty()
}

fn is_final(chunk: &&str) -> bool {
    *chunk == "[DONE]"
}

/// The clock moves 10 ms each time the scheduler gets the thread back, as a real clock would
/// while a provider floods: the attempt's time limit can then only end a flood that yields.
fn advance_while_polled() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        loop {
            tokio::time::advance(Duration::from_millis(10)).await;
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_ready_flood_before_the_commit_is_cut_by_the_first_item_timeout() {
    let clock = advance_while_polled();
    let policy = Policy::builder()
        .timeout(Duration::from_millis(100))
        .commit_hold(usize::MAX)
        .build()
        .unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let outcome = flooded(&policy, &read).await;
    clock.abort();
    assert!(
        matches!(outcome, Err(TestError::Rejected(Rejected::Timeout { .. }))),
        "{outcome:?}"
    );
    // A yield every 128 ready items, 10 ms each: the limit ends it after about ten of them.
    let read = read.load(Ordering::Relaxed);
    assert!(
        read <= 128 * 12,
        "{read} items read before the time limit held"
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_never_commits_ends_the_attempt_at_the_hold_and_is_retried() {
    let policy = Policy::builder()
        .retry(1)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .build()
        .unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let outcome = flooded(&policy, &read).await;
    let uncommitted = Rejected::Uncommitted { held: 10_001 };
    assert_eq!(
        outcome.err(),
        Some(TestError::Rejected(uncommitted.clone())),
        "the default hold is 10 000 items"
    );
    assert!(uncommitted.is_transient());
    assert_eq!(
        uncommitted.to_string(),
        "the stream sent 10001 items without one that commits it"
    );
    assert_eq!(
        read.load(Ordering::Relaxed),
        2 * 10_001,
        "two attempts, each cut at the hold"
    );
}

#[tokio::test(start_paused = true)]
async fn the_hold_is_set_by_the_builder_and_what_it_held_is_handed_over_at_the_commit() {
    let policy = Policy::builder().commit_hold(2).build().unwrap();
    let stream = policy
        .run_stream_until(Commit::when(has_content), || async {
            Ok::<_, TestError>(futures::stream::iter(["", "", "Hello"].map(Ok)))
        })
        .await
        .unwrap();
    assert_eq!(
        stream.collect::<Vec<_>>().await,
        [Ok(""), Ok(""), Ok("Hello")]
    );
    let outcome = policy
        .run_stream_until(Commit::when(has_content), || async {
            Ok::<_, TestError>(futures::stream::iter(["", "", "", "Hello"].map(Ok)))
        })
        .await;
    assert_eq!(
        outcome.err(),
        Some(TestError::Rejected(Rejected::Uncommitted { held: 3 }))
    );
}

/// A role chunk, then the final item: complete, without content. The attribute commits it
/// (`commit_when` and `complete_when`); so does the runtime's API, plain and keyed.
#[tokio::test(start_paused = true)]
async fn an_empty_but_complete_answer_commits_through_the_runtimes_api_as_through_the_attribute() {
    let commit = Commit::when(has_content).complete_when(is_final);
    let answer = || async { Ok::<_, TestError>(futures::stream::iter(["", "[DONE]"].map(Ok))) };

    let policy = Policy::builder().retry(1).build().unwrap();
    let stream = policy.run_stream_until(commit, answer).await.unwrap();
    assert_eq!(stream.collect::<Vec<_>>().await, [Ok(""), Ok("[DONE]")]);

    let keyed = Policy::builder()
        .breaker_per_key("model", 5, Duration::from_secs(30))
        .build()
        .unwrap();
    let stream = keyed
        .run_stream_keyed_until("gpt-4o", commit, answer)
        .await
        .unwrap();
    assert!(!stream.is_complete(), "nothing read yet");
    let chunks: Vec<_> = stream.collect().await;
    assert_eq!(chunks, [Ok(""), Ok("[DONE]")]);
}

/// The final item named by the commit ends the stream: what the body sends after it is not
/// read, and an end before it is `Incomplete`.
#[tokio::test(start_paused = true)]
async fn the_final_item_named_at_the_commit_ends_the_stream() {
    let policy = Policy::builder().build().unwrap();
    let commit = Commit::first_item().complete_when(is_final);
    let stream = policy
        .run_stream_until(commit, || async {
            Ok::<_, TestError>(futures::stream::iter(["Hel", "[DONE]", "after"].map(Ok)))
        })
        .await
        .unwrap();
    assert_eq!(stream.collect::<Vec<_>>().await, [Ok("Hel"), Ok("[DONE]")]);
    let stream = policy
        .run_stream_until(commit, || async {
            Ok::<_, TestError>(futures::stream::iter(["Hel"].map(Ok)))
        })
        .await
        .unwrap();
    assert_eq!(
        stream.collect::<Vec<_>>().await,
        [Ok("Hel"), Err(TestError::Rejected(Rejected::Incomplete))]
    );
}
