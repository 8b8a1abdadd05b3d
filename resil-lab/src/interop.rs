//! A tower client against the mock provider during an outage (every completion answers 503
//! with `Retry-After: 1`): the requests the provider saw from 20 callers through a plain
//! service, a retrying `PolicyLayer`, and a retrying one with a breaker. Real time: about
//! 5 seconds.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use resil::http::classify;
use resil::tower::PolicyLayer;
use resil::Policy;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, ServiceBuilder, ServiceExt};

use crate::mock::MockProvider;
use crate::ApiError;

/// One way of calling.
#[derive(Debug, Clone)]
pub struct Row {
    /// The stack.
    pub label: &'static str,
    /// Callers answered, of 20.
    pub answered: usize,
    /// Requests the provider received.
    pub requests: u32,
    /// From the first call to the last answer.
    pub total: Duration,
}

type Client = BoxCloneSyncService<(), String, ApiError>;

fn client(url: String, policy: Option<Policy>) -> Client {
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

/// The three stacks, each against a fresh mock provider that is down.
pub async fn run() -> std::io::Result<Vec<Row>> {
    let stacks: [(&'static str, Option<Policy>); 3] = [
        ("plain tower service", None),
        (
            "PolicyLayer: retry = 2",
            Some(
                Policy::builder()
                    .timeout(Duration::from_secs(2))
                    .retry(2)
                    .build()
                    .map_err(std::io::Error::other)?,
            ),
        ),
        (
            "PolicyLayer: retry = 2 + breaker 5 / 30 s",
            Some(
                Policy::builder()
                    .timeout(Duration::from_secs(2))
                    .retry(2)
                    .breaker_named("interop-tower", 5, Duration::from_secs(30))
                    .build()
                    .map_err(std::io::Error::other)?,
            ),
        ),
    ];
    let mut rows = Vec::new();
    for (label, policy) in stacks {
        let provider = MockProvider::with_capacity(u32::MAX, 1).await?;
        provider.set_down(true);
        let service = client(provider.url("/v1/chat/completions?tokens=1"), policy);
        let started = tokio::time::Instant::now();
        let results = join_all((0..20).map(|_| service.clone().oneshot(()))).await;
        rows.push(Row {
            label,
            answered: results.iter().filter(|result| result.is_ok()).count(),
            requests: provider.stats().requests,
            total: started.elapsed(),
        });
        provider.stop().await;
    }
    Ok(rows)
}
