//! `#[resilient]` on a streaming function: `Result<impl Stream<Item = Result<T, E>>, E>` keeps
//! its signature, is retried up to its first item, and ends with the idle timeout, the deadline
//! or an incomplete end after it.

mod support;

use std::time::Duration;

use futures::{stream, Stream, StreamExt};
use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::{sleep, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Chunk(&'static str);

impl Chunk {
    fn is_final(&self) -> bool {
        self.0 == "[DONE]"
    }

    /// OpenAI's first chunk carries only the role: nothing to commit to yet.
    fn has_content(&self) -> bool {
        !self.0.is_empty() && !self.is_final()
    }
}

/// The scripted provider's answer to one connect.
fn script(
    chunks: Vec<(u64, Result<Chunk, ApiError>)>,
) -> impl Stream<Item = Result<Chunk, ApiError>> {
    stream::iter(chunks).then(|(ms, item)| async move {
        sleep(Duration::from_millis(ms)).await;
        item
    })
}

struct Client {
    calls: Calls,
}

impl Client {
    /// Fails to connect twice, then streams two chunks and the final one.
    #[resilient(
        first_item_timeout = "20s",
        idle_timeout = "30s",
        deadline = "5m",
        retry = 2,
        backoff = "1s..1s",
        jitter = "none",
        breaker = "per_model",
        bulkhead = 2,
        complete_when = Chunk::is_final
    )]
    async fn stream_chat(
        &self,
        model: &str,
        prompt: &str,
    ) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        let n = self.calls.add();
        if n <= 2 {
            return Err(ApiError::Busy);
        }
        assert_eq!((model, prompt), ("gpt", "hi"));
        Ok(script(vec![
            (100, Ok(Chunk("Hel"))),
            (100, Ok(Chunk("lo"))),
            (100, Ok(Chunk("[DONE]"))),
        ]))
    }

    /// Commits, then stalls after one chunk.
    #[resilient(first_item_timeout = "5s", idle_timeout = "10s", retry = 3)]
    async fn stalls(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        self.calls.add();
        let stalled = stream::once(async { Ok(Chunk("Hel")) }).chain(stream::pending());
        Ok(stalled)
    }

    /// Commits, then ends without its final chunk.
    #[resilient(first_item_timeout = "5s", retry = 3, complete_when = Chunk::is_final)]
    async fn cut(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        self.calls.add();
        Ok(script(vec![(0, Ok(Chunk("Hel")))]))
    }

    /// Never sends its first chunk in time; the fallback streams a canned answer.
    #[resilient(first_item_timeout = "5s", retry = 1, fallback = Self::canned)]
    async fn slow_start(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        self.calls.add();
        Ok(script(vec![(6_000, Ok(Chunk("late")))]))
    }

    /// The role chunk at once, then a stall before the first token on the first connect; the
    /// second answers.
    #[resilient(
        first_item_timeout = "5s",
        retry = 2,
        commit_when = Chunk::has_content,
        complete_when = Chunk::is_final
    )]
    async fn role_first(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        let first_token = match self.calls.add() {
            1 => 60_000,
            _ => 100,
        };
        Ok(script(vec![
            (0, Ok(Chunk(""))),
            (first_token, Ok(Chunk("Hel"))),
            (0, Ok(Chunk("[DONE]"))),
        ]))
    }

    /// A role chunk and the final one, then a connection held open: an empty answer.
    #[resilient(
        first_item_timeout = "5s",
        commit_when = Chunk::has_content,
        complete_when = Chunk::is_final
    )]
    async fn empty_answer(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        self.calls.add();
        let held_open = stream::iter([Ok(Chunk("")), Ok(Chunk("[DONE]"))]).chain(stream::pending());
        Ok(held_open)
    }

    /// Role-only chunks, always ready, never content: a provider that never commits.
    #[resilient(
        first_item_timeout = "5s",
        retry = 1,
        commit_when = Chunk::has_content,
        commit_hold = 3
    )]
    async fn never_commits(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        self.calls.add();
        Ok(stream::repeat_with(|| Ok(Chunk(""))))
    }

    async fn canned(&self) -> Result<impl Stream<Item = Result<Chunk, ApiError>>, ApiError> {
        Ok(stream::iter([Ok(Chunk("sorry")), Ok(Chunk("[DONE]"))]))
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_method_is_retried_to_its_first_item_then_streams() {
    let client = Client {
        calls: Calls::default(),
    };
    let started = Instant::now();
    let stream = client.stream_chat("gpt", "hi").await.unwrap();
    // Two failed connects, two 1 s waits, then 100 ms to the first chunk.
    assert_eq!(started.elapsed(), Duration::from_millis(2_100));
    assert_eq!(client.calls.count(), 3);
    let chunks: Vec<_> = stream.collect().await;
    assert_eq!(
        chunks,
        [Ok(Chunk("Hel")), Ok(Chunk("lo")), Ok(Chunk("[DONE]"))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stall_after_the_first_item_yields_one_idle_error_and_ends() {
    let client = Client {
        calls: Calls::default(),
    };
    let chunks: Vec<_> = client.stalls().await.unwrap().collect().await;
    assert_eq!(
        chunks,
        [
            Ok(Chunk("Hel")),
            Err(ApiError::Rejected(Rejected::Idle {
                after: Duration::from_secs(10)
            }))
        ]
    );
    assert_eq!(client.calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_before_its_final_item_ends_incomplete() {
    let client = Client {
        calls: Calls::default(),
    };
    let chunks: Vec<_> = client.cut().await.unwrap().collect().await;
    assert_eq!(
        chunks,
        [
            Ok(Chunk("Hel")),
            Err(ApiError::Rejected(Rejected::Incomplete))
        ]
    );
    assert_eq!(client.calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_streaming_call_falls_back_to_another_stream() {
    let client = Client {
        calls: Calls::default(),
    };
    let stream = client.slow_start().await.unwrap();
    assert_eq!(client.calls.count(), 2);
    let chunks: Vec<_> = stream.collect().await;
    assert_eq!(chunks, [Ok(Chunk("sorry")), Ok(Chunk("[DONE]"))]);
}

#[test]
fn streaming_methods_and_their_streams_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let client = Client {
        calls: Calls::default(),
    };
    let future = client.stream_chat("gpt", "hi");
    assert_send(&future);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let chunks = runtime.block_on(async {
        let client = Client {
            calls: Calls::default(),
        };
        tokio::spawn(async move {
            let stream = client.stream_chat("gpt", "hi").await.unwrap();
            tokio::spawn(stream.collect::<Vec<_>>()).await.unwrap()
        })
        .await
        .unwrap()
    });
    assert_eq!(chunks.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_stall_before_the_first_content_is_retried_and_the_held_items_come_first() {
    let client = Client {
        calls: Calls::default(),
    };
    let started = Instant::now();
    let stream = client.role_first().await.unwrap();
    // The first connect's role chunk did not commit: its stall is the attempt's timeout (5 s),
    // then a backoff, then the second connect's first token at 100 ms.
    assert_eq!(client.calls.count(), 2);
    assert!(
        started.elapsed() > Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let chunks: Vec<_> = stream.collect().await;
    assert_eq!(
        chunks,
        [Ok(Chunk("")), Ok(Chunk("Hel")), Ok(Chunk("[DONE]"))],
        "the held role chunk, then the rest, once"
    );
}

#[tokio::test(start_paused = true)]
async fn the_final_item_commits_a_stream_that_had_no_content() {
    let client = Client {
        calls: Calls::default(),
    };
    let started = Instant::now();
    let chunks: Vec<_> = client.empty_answer().await.unwrap().collect().await;
    assert_eq!(chunks, [Ok(Chunk("")), Ok(Chunk("[DONE]"))]);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no wait for content that never comes"
    );
    assert_eq!(client.calls.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_never_commits_is_cut_at_the_declared_hold_and_retried() {
    let client = Client {
        calls: Calls::default(),
    };
    let outcome = client.never_commits().await.err();
    assert_eq!(
        outcome,
        Some(ApiError::Rejected(Rejected::Uncommitted { held: 4 }))
    );
    assert_eq!(client.calls.count(), 2);
}
