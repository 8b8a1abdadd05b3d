//! Pacing against the mock provider's limits, over loopback and real time (about 10 s): the
//! HTTP classification of its answers, and the rows of `cargo run --example rate_limits`.

use std::time::Duration;

use resil::http::{classify, HttpError, StatusCode};
use resil::Transient;
use resil_lab::mock::MockProvider;
use resil_lab::rate_limits::run;

async fn answer(provider: &MockProvider, path: &str) -> Result<(), HttpError> {
    let response = reqwest::Client::new()
        .post(provider.url(path))
        .send()
        .await
        .unwrap();
    classify(response).await.map(drop)
}

#[tokio::test]
async fn the_providers_answers_classified() {
    let provider = MockProvider::with_rate_limit(1).await.unwrap();
    assert_eq!(
        answer(&provider, "/v1/chat/completions?tokens=1").await,
        Ok(())
    );

    let throttled = answer(&provider, "/v1/chat/completions?tokens=1")
        .await
        .unwrap_err();
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(throttled.retry_after, Some(Duration::from_secs(1)));
    assert!(throttled.is_transient() && throttled.is_throttle());
    assert!(throttled.body.contains("overloaded"), "{throttled}");

    let quota = answer(&provider, "/quota").await.unwrap_err();
    assert!(quota.quota_exhausted());
    assert!(
        !quota.is_transient() && !quota.is_throttle(),
        "no wait refills a quota"
    );

    let unavailable = answer(&provider, "/503").await.unwrap_err();
    assert!(unavailable.is_transient() && !unavailable.is_throttle());
    assert_eq!(unavailable.retry_after(), Some(Duration::from_secs(1)));

    let unauthorized = answer(&provider, "/401").await.unwrap_err();
    assert!(!unauthorized.is_transient());
    assert_eq!(
        unauthorized.to_string(),
        r#"the server answered 401 Unauthorized: {"error":"invalid api key"}"#
    );
    provider.stop().await;
}

/// The guide's figures (`resil::guide::rates_and_keys`): 100 callers against a provider that takes 50 a second collect 50 ×
/// 429 without a gate, and at most 2 with one (1 on a quiet machine: a collision at a window's
/// edge), the gate set twice too fast included.
#[tokio::test]
async fn gates_and_queues_keep_the_429s_away() {
    let rows = run(100).await.unwrap();
    let row = |name: &str| rows.iter().find(|r| r.name.starts_with(name)).unwrap();
    for row in &rows {
        assert_eq!(
            row.answered, row.callers,
            "{}: every caller answered",
            row.name
        );
    }
    let ungated = row("no gate");
    assert_eq!(
        ungated.provider.rate_limited, 50,
        "without a gate half the callers collect a 429"
    );
    for gated in ["rate = \"50/s\"", "rate = \"100/s\"", "token_rate"] {
        let gated = row(gated);
        assert!(
            gated.provider.rate_limited <= 2,
            "{}: {} × 429",
            gated.name,
            gated.provider.rate_limited
        );
    }
    let queued = row("bulkhead = 3");
    assert_eq!(
        queued.provider.rate_limited, 0,
        "a gate of 3 for a capacity of 3"
    );
}
