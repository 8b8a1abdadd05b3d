//! Streaming calls: retried before the first item (the commit point), never after; the
//! first-item and idle timeouts and the deadline; the permit held while the stream lives; the
//! breaker's verdicts. Every test runs on tokio's paused clock, so times are exact.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestError;
use futures::{Stream, StreamExt};
use resil_runtime::{Breaker, BreakerConfig, BreakerState, Policy, Rejected};
use tokio::time::Instant;

/// One step of a scripted stream.
#[derive(Debug, Clone)]
enum Step {
    /// An item after a wait.
    Item(u64, &'static str),
    /// An error item after a wait.
    Fail(u64, TestError),
    /// Nothing ever again.
    Stall,
}
use Step::{Fail, Item, Stall};

/// Counts connects, and whether the last stream handed out is still alive.
#[derive(Debug, Clone, Default)]
struct Provider {
    connects: Arc<AtomicU32>,
    alive: Arc<AtomicBool>,
}

/// Marks the stream dead when the wrapper drops it.
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Provider {
    fn connects(&self) -> u32 {
        self.connects.load(Ordering::SeqCst)
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Connects after `connect_ms`, then plays `steps` (and ends after the last, unless it is
    /// a stall). A `Fail` before the connect finishes stands for a refused connection.
    async fn connect(
        &self,
        connect_ms: u64,
        steps: Vec<Step>,
    ) -> Result<impl Stream<Item = Result<&'static str, TestError>> + Send + 'static, TestError>
    {
        self.connects.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(connect_ms)).await;
        self.alive.store(true, Ordering::SeqCst);
        let alive = Alive(self.alive.clone());
        Ok(futures::stream::unfold(
            (steps.into_iter(), alive),
            |(mut steps, alive)| async move {
                let item = match steps.next()? {
                    Item(ms, text) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok(text)
                    }
                    Fail(ms, error) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Err(error)
                    }
                    Stall => std::future::pending().await,
                };
                Some((item, (steps, alive)))
            },
        ))
    }
}

fn is_done(chunk: &&'static str) -> bool {
    *chunk == "[DONE]"
}

fn breaker(threshold: u32) -> Arc<Breaker> {
    Arc::new(Breaker::new(
        "llm",
        BreakerConfig::new(threshold, Duration::from_secs(30)).unwrap(),
    ))
}

#[tokio::test(start_paused = true)]
async fn transient_failures_before_the_first_item_are_retried() {
    let policy = Policy::builder()
        .retry(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(1))
        .jitter(resil_runtime::Jitter::None)
        .build()
        .unwrap();
    let provider = Provider::default();
    let mut n = 0;
    let stream = policy
        .run_stream(|| {
            n += 1;
            let steps = match n {
                // The first item is an error: not committed, retried.
                1 => vec![Fail(0, TestError::Busy)],
                // An empty stream never committed: incomplete, retried.
                2 => vec![],
                _ => vec![Item(10, "Hel"), Item(10, "lo")],
            };
            provider.connect(5, steps)
        })
        .await
        .unwrap();
    assert_eq!(provider.connects(), 3);
    let items: Vec<_> = stream.collect().await;
    assert_eq!(items, [Ok("Hel"), Ok("lo")]);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_retried_after_the_first_item() {
    let policy = Policy::builder().retry(3).build().unwrap();
    let provider = Provider::default();
    let stream = policy
        .run_stream(|| {
            provider.connect(
                0,
                vec![Item(0, "Hel"), Fail(10, TestError::Busy), Item(10, "lo")],
            )
        })
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(items, [Ok("Hel"), Err(TestError::Busy), Ok("lo")]);
    assert_eq!(provider.connects(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_first_item_timeout_covers_the_connect() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(20))
        .retry(1)
        .backoff(Duration::from_secs(1), Duration::from_secs(1))
        .jitter(resil_runtime::Jitter::None)
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    // 15 s to connect and 10 s more to the first item: 25 s > 20 s, every time.
    let result = policy
        .run_stream(|| provider.connect(15_000, vec![Item(10_000, "late")]))
        .await;
    assert_eq!(
        result.unwrap_err(),
        TestError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(20)
        })
    );
    assert_eq!(provider.connects(), 2);
    assert_eq!(started.elapsed(), Duration::from_secs(41));
    assert!(!provider.alive(), "a timed-out attempt drops its stream");
}

#[tokio::test(start_paused = true)]
async fn a_stall_after_the_first_item_ends_the_stream_with_one_idle_error() {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(20))
        .idle_timeout(Duration::from_secs(30))
        .retry(2)
        .build()
        .unwrap();
    let provider = Provider::default();
    let mut stream = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Item(29_000, "lo"), Stall]))
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(stream.next().await, Some(Ok("Hel")));
    // 29 s is within the idle timeout.
    assert_eq!(stream.next().await, Some(Ok("lo")));
    assert_eq!(started.elapsed(), Duration::from_secs(29));
    assert_eq!(
        stream.next().await,
        Some(Err(TestError::Rejected(Rejected::Idle {
            after: Duration::from_secs(30)
        })))
    );
    assert_eq!(started.elapsed(), Duration::from_secs(59));
    assert!(!provider.alive(), "the stalled stream is dropped at once");
    assert_eq!(stream.next().await, None);
    assert_eq!(provider.connects(), 1, "never retried after the commit");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_whole_stream() {
    let policy = Policy::builder()
        .deadline(Duration::from_secs(60))
        .idle_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let steps: Vec<_> = (0..100).map(|_| Item(25_000, "tick")).collect();
    let stream = policy
        .run_stream(|| provider.connect(0, steps.clone()))
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    // Items at 25 s and 50 s; the deadline at 60 s comes before the idle limit at 80 s.
    assert_eq!(
        items,
        [
            Ok("tick"),
            Ok("tick"),
            Err(TestError::Rejected(Rejected::DeadlineExceeded))
        ]
    );
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn the_permit_is_held_while_the_stream_lives() {
    let policy = Policy::builder().bulkhead(1).build().unwrap();
    let provider = Provider::default();
    let busy = || async {
        policy
            .run_stream(|| provider.connect(0, vec![Item(0, "x"), Item(10, "[DONE]")]))
            .await
    };

    let stream = busy().await.unwrap();
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 1);
    assert_eq!(
        busy().await.unwrap_err(),
        TestError::Rejected(Rejected::BulkheadFull { limit: 1 })
    );
    // Consumed to its end: the permit goes back with the last item, before the drop.
    let mut stream = stream;
    while stream.next().await.is_some() {}
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
    drop(stream);

    // Dropped half-way: the permit and the body's stream go at once.
    let mut stream = busy().await.unwrap();
    assert_eq!(stream.next().await, Some(Ok("x")));
    assert!(provider.alive());
    drop(stream);
    assert!(!provider.alive());
    assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_incomplete_stream_is_retried_before_the_commit_and_reported_after() {
    let policy = Policy::builder()
        .retry(2)
        .breaker(breaker(5))
        .build()
        .unwrap();
    let provider = Provider::default();
    let stream = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Item(10, "lo")]))
        .await
        .unwrap()
        .complete_when(is_done);
    let items: Vec<_> = stream.collect().await;
    assert_eq!(
        items,
        [
            Ok("Hel"),
            Ok("lo"),
            Err(TestError::Rejected(Rejected::Incomplete))
        ]
    );
    assert_eq!(provider.connects(), 1);
    assert_eq!(policy.breaker().unwrap().failures(), 1);

    // An error item told the consumer already: the end that follows adds no `Incomplete`.
    let failed = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Fail(10, TestError::BadRequest)]))
        .await
        .unwrap()
        .complete_when(is_done);
    let items: Vec<_> = failed.collect().await;
    assert_eq!(items, [Ok("Hel"), Err(TestError::BadRequest)]);

    let complete = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Item(10, "[DONE]")]))
        .await
        .unwrap()
        .complete_when(is_done);
    let items: Vec<_> = complete.collect().await;
    assert_eq!(items, [Ok("Hel"), Ok("[DONE]")]);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_counts_failing_first_items_and_one_failure_per_stream() {
    let policy = Policy::builder().breaker(breaker(2)).build().unwrap();
    let breaker = policy.breaker().unwrap().clone();
    let provider = Provider::default();

    let first = policy
        .run_stream(|| provider.connect(0, vec![Fail(0, TestError::Busy)]))
        .await;
    assert_eq!(first.unwrap_err(), TestError::Busy);
    assert_eq!(breaker.failures(), 1);

    // A success on the first item resets the count; two errors after it count once.
    let stream = policy
        .run_stream(|| {
            provider.connect(
                0,
                vec![
                    Item(0, "Hel"),
                    Fail(1, TestError::Busy),
                    Fail(1, TestError::Busy),
                ],
            )
        })
        .await
        .unwrap();
    assert_eq!(breaker.failures(), 0);
    let _: Vec<_> = stream.collect().await;
    assert_eq!(breaker.failures(), 1);
    assert_eq!(breaker.state(), BreakerState::Closed);

    // A consumer that drops the stream counts for nothing.
    let mut stream = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Stall]))
        .await
        .unwrap();
    assert_eq!(stream.next().await, Some(Ok("Hel")));
    drop(stream);
    assert_eq!(breaker.failures(), 0);

    for _ in 0..2 {
        let failed = policy
            .run_stream(|| provider.connect(0, vec![Fail(0, TestError::Busy)]))
            .await;
        assert!(failed.is_err());
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    let refused = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "x")]))
        .await;
    assert!(matches!(
        refused.unwrap_err(),
        TestError::Rejected(Rejected::BreakerOpen { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_first_item_closes_a_half_open_breaker() {
    let policy = Policy::builder().breaker(breaker(1)).build().unwrap();
    let breaker = policy.breaker().unwrap().clone();
    let provider = Provider::default();
    let failed = policy
        .run_stream(|| provider.connect(0, vec![Fail(0, TestError::Busy)]))
        .await;
    assert!(failed.is_err());
    assert_eq!(breaker.state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(30)).await;
    let mut stream = policy
        .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Stall]))
        .await
        .unwrap();
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(stream.next().await, Some(Ok("Hel")));
}

#[tokio::test(start_paused = true)]
async fn a_keyed_stream_counts_its_failure_on_its_own_key() {
    let policy = Policy::builder()
        .breaker_per_key("model", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let provider = Provider::default();
    let stream = policy
        .run_stream_keyed("gpt", || {
            provider.connect(0, vec![Item(0, "Hel"), Fail(1, TestError::Busy)])
        })
        .await
        .unwrap();
    let _: Vec<_> = stream.collect().await;
    let refused = policy
        .run_stream_keyed("gpt", || provider.connect(0, vec![Item(0, "x")]))
        .await;
    assert!(matches!(
        refused.unwrap_err(),
        TestError::Rejected(Rejected::BreakerOpen { .. })
    ));
    let other = policy
        .run_stream_keyed("claude", || provider.connect(0, vec![Item(0, "x")]))
        .await;
    assert!(other.is_ok());
}

#[test]
fn streams_are_send_under_a_multi_thread_runtime() {
    static POLICY: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(|| {
        Policy::builder()
            .timeout(Duration::from_secs(5))
            .idle_timeout(Duration::from_secs(5))
            .retry(1)
            .bulkhead(4)
            .build()
            .unwrap()
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let items = runtime.block_on(async {
        let task = tokio::spawn(async {
            let provider = Provider::default();
            let stream = POLICY
                .run_stream(|| provider.connect(0, vec![Item(0, "a"), Item(1, "b")]))
                .await
                .unwrap();
            // The stream itself crosses to another task.
            tokio::spawn(stream.collect::<Vec<_>>()).await.unwrap()
        });
        task.await.unwrap()
    });
    assert_eq!(items, [Ok("a"), Ok("b")]);
    assert_eq!(POLICY.bulkhead().unwrap().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_a_ready_body_read_by_a_slow_consumer() {
    let policy = Policy::builder()
        .deadline(Duration::from_secs(3))
        .build()
        .unwrap();
    let provider = Provider::default();
    let steps: Vec<_> = (0..10).map(|_| Item(0, "tick")).collect();
    let mut stream = policy
        .run_stream(|| provider.connect(0, steps.clone()))
        .await
        .unwrap();
    let started = Instant::now();
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push((started.elapsed().as_secs(), item));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        items,
        [
            (0, Ok("tick")),
            (1, Ok("tick")),
            (2, Ok("tick")),
            (3, Err(TestError::Rejected(Rejected::DeadlineExceeded)))
        ]
    );
    assert!(
        !provider.alive(),
        "the body's stream is dropped at the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn the_final_item_ends_the_stream_whatever_the_connection_does() {
    let shared = breaker(1);
    let policy = Policy::builder()
        .breaker(shared.clone())
        .idle_timeout(Duration::from_secs(30))
        .bulkhead(1)
        .build()
        .unwrap();
    let provider = Provider::default();
    for _ in 0..3 {
        // The server keeps the connection open after `[DONE]`.
        let stream = policy
            .run_stream(|| provider.connect(0, vec![Item(0, "Hel"), Item(10, "[DONE]"), Stall]))
            .await
            .unwrap()
            .complete_when(is_done);
        let items: Vec<_> = stream.collect().await;
        assert_eq!(
            items,
            [Ok("Hel"), Ok("[DONE]")],
            "no Idle after the final item"
        );
        assert!(
            !provider.alive(),
            "the body's stream goes with the final item"
        );
        assert_eq!(policy.bulkhead().unwrap().in_flight(), 0);
    }
    assert_eq!(shared.state(), BreakerState::Closed);
    assert_eq!(shared.failures(), 0, "complete answers are no failures");
}
