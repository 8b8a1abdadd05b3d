//! Clients that are not `#[resilient]` functions against the mock provider during an outage
//! (every completion answers 503 with `Retry-After: 1`): the requests the provider saw from 20
//! callers through no policy, a retrying one, and a retrying one with a breaker, applied as a
//! tower layer or as a reqwest middleware. Real time: about 5 seconds for each.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use resil::http::classify;
use resil::middleware::PolicyMiddleware;
use resil::tower::PolicyLayer;
use resil::{Policy, PolicyBuilder};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, ServiceBuilder, ServiceExt};

use crate::mock::MockProvider;
use crate::ApiError;

/// One way of calling.
#[derive(Debug, Clone)]
pub struct Row {
    /// The policy.
    pub label: &'static str,
    /// Callers answered, of 20.
    pub answered: usize,
    /// Requests the provider received.
    pub requests: u32,
    /// From the first call to the last answer.
    pub total: Duration,
}

/// Prints `rows` as the examples show them, under a header naming the `path` they took.
pub fn print(path: &str, rows: &[Row]) {
    println!("20 callers, the provider answers 503 (Retry-After: 1) to everything\n");
    println!(
        "{path:<44} {:>9} {:>9} {:>9}",
        "answered", "requests", "total"
    );
    for row in rows {
        println!(
            "{:<44} {:>6}/20 {:>9} {:>6} ms",
            row.label,
            row.answered,
            row.requests,
            row.total.as_millis()
        );
    }
}

/// No policy, retries, retries and a breaker (named `breaker`).
fn policies(breaker: &str) -> std::io::Result<[(&'static str, Option<Policy>); 3]> {
    let retried = || Policy::builder().timeout(Duration::from_secs(2)).retry(2);
    let build = |builder: PolicyBuilder| builder.build().map_err(std::io::Error::other);
    Ok([
        ("no policy", None),
        ("retry = 2", Some(build(retried())?)),
        (
            "retry = 2 + breaker 5 / 30 s",
            Some(build(retried().breaker_named(
                breaker,
                5,
                Duration::from_secs(30),
            ))?),
        ),
    ])
}

/// 20 callers at once against a fresh provider that is down, through the client `make`
/// builds for its address; a caller is answered when `call` is `Ok`.
async fn outage<C, T, E, Fut>(
    label: &'static str,
    make: impl FnOnce(String) -> C,
    call: impl Fn(&C) -> Fut,
) -> std::io::Result<Row>
where
    Fut: Future<Output = Result<T, E>>,
{
    let provider = MockProvider::with_capacity(u32::MAX, 1).await?;
    provider.set_down(true);
    // Every caller's first request is in before any 503 comes back, so each row counts what
    // its policy does, not how far the scheduler got: on a loaded machine the runtime's other
    // worker answered the first callers while the last were still being started, and the
    // breaker, open after five 503s, refused those (15 requests instead of 20, once in CI).
    provider.answer_together(CALLERS);
    let client = make(provider.url("/v1/chat/completions?tokens=1"));
    let started = tokio::time::Instant::now();
    let results = join_all((0..CALLERS).map(|_| call(&client))).await;
    let row = Row {
        label,
        answered: results.iter().filter(|result| result.is_ok()).count(),
        requests: provider.stats().requests,
        total: started.elapsed(),
    };
    provider.stop().await;
    Ok(row)
}

/// Callers at once, in every row.
const CALLERS: u32 = 20;

type Service = BoxCloneSyncService<(), String, ApiError>;

/// A tower service posting to `url`, under `policy` if any.
fn service(url: String, policy: Option<Policy>) -> Service {
    let http = reqwest::Client::new();
    let send = service_fn(move |()| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let response = http.post(url).send().await?;
            Ok::<_, ApiError>(classify(response).await?.text().await?)
        }
    });
    match policy {
        Some(policy) => BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(PolicyLayer::shared(Arc::new(policy)))
                .service(send),
        ),
        None => BoxCloneSyncService::new(send),
    }
}

/// The three policies as tower layers.
pub async fn run() -> std::io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (label, policy) in policies("interop-tower")? {
        let make = |url| service(url, policy);
        rows.push(outage(label, make, |service| service.clone().oneshot(())).await?);
    }
    Ok(rows)
}

async fn post(url: &str) -> Result<String, ApiError> {
    let response = reqwest::Client::new().post(url).send().await?;
    Ok(classify(response).await?.text().await?)
}

#[resil::resilient(timeout = "2s", retry = 2)]
async fn retried(url: &str) -> Result<String, ApiError> {
    post(url).await
}

#[resil::resilient(
    timeout = "2s",
    retry = 2,
    breaker = "interop-attribute",
    breaker_threshold = 5,
    breaker_cooldown = "30s"
)]
async fn guarded(url: &str) -> Result<String, ApiError> {
    post(url).await
}

/// The same three policies as `#[resilient]` functions, for comparison.
pub async fn through_attribute() -> std::io::Result<Vec<Row>> {
    Ok(vec![
        outage(
            "no policy",
            |url| url,
            |url| {
                let url = url.clone();
                async move { post(&url).await }
            },
        )
        .await?,
        outage(
            "retry = 2",
            |url| url,
            |url| {
                let url = url.clone();
                async move { retried(&url).await }
            },
        )
        .await?,
        outage(
            "retry = 2 + breaker 5 / 30 s",
            |url| url,
            |url| {
                let url = url.clone();
                async move { guarded(&url).await }
            },
        )
        .await?,
    ])
}

/// The three policies as a reqwest middleware. Its answer is a response either way (a 503
/// too): a caller counts as answered on a success.
pub async fn through_middleware() -> std::io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (label, policy) in policies("interop-middleware")? {
        let make = |url| {
            let mut builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
            if let Some(policy) = policy {
                builder = builder.with(PolicyMiddleware::new(policy));
            }
            (builder.build(), url)
        };
        let call = |(client, url): &(reqwest_middleware::ClientWithMiddleware, String)| {
            let request = client.post(url.as_str());
            async move {
                let response = request.send().await.map_err(|_| ())?;
                response.status().is_success().then_some(()).ok_or(())
            }
        };
        rows.push(outage(label, make, call).await?);
    }
    Ok(rows)
}
