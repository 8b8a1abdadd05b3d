//! Feature `reqwest-middleware`, over loopback against the mock provider (real time, about
//! 3 s): Retry-After honoured, an exhausted quota and a streaming body not retried, the last
//! response handed back as the server sent it.
#![cfg(feature = "reqwest-middleware")]

use std::time::{Duration, Instant};

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use resil::middleware::PolicyMiddleware;
use resil::Policy;
use resil_lab::mock::MockProvider;

fn client(retry: u32) -> ClientWithMiddleware {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(5))
        .retry(retry)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap();
    ClientBuilder::new(reqwest::Client::new())
        .with(PolicyMiddleware::new(policy).idempotency_key("Idempotency-Key"))
        .build()
}

#[tokio::test]
async fn a_throttled_request_is_retried_after_its_wait() {
    let provider = MockProvider::start().await.unwrap();
    let started = Instant::now();
    let response = client(2)
        .post(provider.url("/v1/chat/completions?tokens=1&fail_first=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(provider.stats().requests, 3, "two 429s, then the answer");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "Retry-After: 1, twice"
    );
    provider.stop().await;
}

#[tokio::test]
async fn the_last_answer_comes_back_as_the_server_sent_it() {
    let provider = MockProvider::start().await.unwrap();
    let unavailable = client(1).get(provider.url("/503")).send().await.unwrap();
    assert_eq!(unavailable.status(), 503, "a response, not an error");
    assert_eq!(provider.stats().requests, 2);

    let quota = client(2).get(provider.url("/quota")).send().await.unwrap();
    assert_eq!(quota.status(), 429);
    assert!(quota.text().await.unwrap().contains("insufficient_quota"));
    assert_eq!(
        provider.stats().requests,
        3,
        "an exhausted quota is not retried"
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_body_that_cannot_be_cloned_is_sent_once() {
    let provider = MockProvider::start().await.unwrap();
    let chunks = futures::stream::iter([Ok::<_, std::io::Error>("streamed")]);
    let response = client(2)
        .post(provider.url("/503"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(provider.stats().requests, 1);
    provider.stop().await;
}
