//! The headline: 100 requests from 10 parallel clients against a provider that hangs, each
//! attempt cut at 1 s. Unprotected, with retries, with retries and a breaker (then the
//! provider recovers), and a healthy provider behind a bulkhead with eager clients.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use resil::resilient;
use tokio::time::Instant;

use crate::report::Row;
use crate::timeline::{Recording, Timeline};
use crate::LlmError;

/// What the original measured, row by row: total ms, p50 ms, calls, outcomes.
pub const ORIGINAL: &[(&str, &str)] = &[
    ("a", "10066 ms, p50 1007, 100 calls"),
    ("b", "32026 ms, p50 3178, 300 calls"),
    (
        "c",
        "2063 ms, p50 0, 14 calls, 90 rejected by the open breaker",
    ),
    ("c_recovered", "278 ms, 100 ok"),
    ("d", "4 ok, 96 rejected"),
];

/// A provider that hangs until it recovers, then answers in 20 ms.
#[derive(Debug, Default)]
pub struct Provider {
    calls: AtomicU32,
    healthy: AtomicBool,
}

impl Provider {
    /// A provider in the given state.
    pub fn new(healthy: bool) -> Self {
        Provider {
            calls: AtomicU32::new(0),
            healthy: AtomicBool::new(healthy),
        }
    }

    async fn call(&self) -> Result<(), LlmError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !self.healthy.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }

    /// Calls so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[resilient(timeout = "1s")]
async fn unprotected(provider: &Provider) -> Result<(), LlmError> {
    provider.call().await
}

#[resilient(timeout = "1s", retry = 2)]
async fn retried(provider: &Provider) -> Result<(), LlmError> {
    provider.call().await
}

#[resilient(
    timeout = "1s",
    retry = 2,
    breaker = "retry_storm",
    breaker_threshold = 5,
    breaker_cooldown = "2s"
)]
async fn guarded(provider: &Provider) -> Result<(), LlmError> {
    provider.call().await
}

#[resilient(timeout = "1s", bulkhead = 4)]
async fn bulkheaded(provider: &Provider) -> Result<(), LlmError> {
    provider.call().await
}

/// 100 requests shared by 10 clients, each sending its next request when the last ends.
async fn clients<'a, F, Fut>(
    provider: &'a Provider,
    call: F,
) -> (Duration, Vec<(Duration, Result<(), LlmError>)>)
where
    F: Fn(&'a Provider) -> Fut,
    Fut: std::future::Future<Output = Result<(), LlmError>>,
{
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let per_client = join_all((0..10).map(|_| async {
        let mut mine = Vec::new();
        while next.fetch_add(1, Ordering::Relaxed) < 100 {
            let sent = Instant::now();
            let result = call(provider).await;
            mine.push((sent.elapsed(), result));
        }
        mine
    }))
    .await;
    (
        started.elapsed(),
        per_client.into_iter().flatten().collect(),
    )
}

/// Runs every row. Call it once per process: the breaker and the bulkhead are per function,
/// as in an application.
pub async fn run() -> Vec<Row> {
    crate::timeline::rows(run_recorded(None).await)
}

/// [`run`], with each row's timeline when `timeline` is given (and installed as a listener).
pub async fn run_recorded(timeline: Option<&Timeline>) -> Vec<(Row, Option<Recording>)> {
    let record = || timeline.map(Timeline::take);
    record();
    let mut rows = Vec::new();

    let provider = Provider::new(false);
    let (total, results) = clients(&provider, unprotected).await;
    rows.push((
        Row::new(
            "a",
            "unprotected (1 s timeout)",
            total,
            provider.calls(),
            &results,
        ),
        record(),
    ));

    let provider = Provider::new(false);
    let (total, results) = clients(&provider, retried).await;
    rows.push((
        Row::new("b", "retry = 2", total, provider.calls(), &results),
        record(),
    ));

    let provider = Provider::new(false);
    let (total, results) = clients(&provider, guarded).await;
    rows.push((
        Row::new(
            "c",
            "retry = 2 + breaker 5 / 2 s",
            total,
            provider.calls(),
            &results,
        ),
        record(),
    ));

    provider.healthy.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    record();
    let before = provider.calls();
    let (total, results) = clients(&provider, guarded).await;
    rows.push((
        Row::new(
            "c_recovered",
            "(c) after recovery + 2.1 s",
            total,
            provider.calls() - before,
            &results,
        ),
        record(),
    ));

    let provider = Provider::new(true);
    record();
    let started = Instant::now();
    let results = join_all((0..100).map(|_| async {
        let sent = Instant::now();
        let result = bulkheaded(&provider).await;
        (sent.elapsed(), result)
    }))
    .await;
    rows.push((
        Row::new(
            "d",
            "bulkhead = 4, 100 eager requests",
            started.elapsed(),
            provider.calls(),
            &results,
        ),
        record(),
    ));
    rows
}

/// Rows b and c again, through a tower stack instead of the attribute: the same policies as
/// `PolicyLayer`s in front of a `service_fn` calling the same hanging provider. The counts
/// match the attribute's (the breaker has its own name, so the runs do not share it).
pub async fn through_tower() -> Vec<Row> {
    use resil::tower::PolicyLayer;
    use resil::Policy;
    use std::sync::Arc;
    use tower::{service_fn, ServiceBuilder, ServiceExt};

    let retried = Policy::builder().timeout(Duration::from_secs(1)).retry(2);
    let guarded = Policy::builder()
        .timeout(Duration::from_secs(1))
        .retry(2)
        .breaker_named("retry_storm_tower", 5, Duration::from_secs(2));
    let mut rows = Vec::new();
    for (row, label, policy) in [
        ("b", "retry = 2, as a tower layer", retried),
        ("c", "retry = 2 + breaker, as a tower layer", guarded),
    ] {
        let provider = Arc::new(Provider::new(false));
        let calling = Arc::clone(&provider);
        let service = ServiceBuilder::new()
            .layer(PolicyLayer::new(policy.build().expect("valid settings")))
            .service(service_fn(move |()| {
                let provider = Arc::clone(&calling);
                async move { provider.call().await }
            }));
        let (total, results) = clients(&provider, |_| service.clone().oneshot(())).await;
        rows.push(Row::new(row, label, total, provider.calls(), &results));
    }
    rows
}
