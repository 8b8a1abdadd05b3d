//! Pacing against the mock provider's limits, over loopback and real time (about 10 s): the
//! HTTP classification of its answers, the rows of `cargo run --example rate_limits`, the
//! headers of a provider stating its limit, and a gate learning that limit (issue 35's bar).

use std::time::{Duration, Instant};

use futures::future::join_all;
use resil::http::{classify, rate_limits, HttpError, StatusCode};
use resil::{resilient, Transient};
use resil_lab::mock::MockProvider;
use resil_lab::rate_limits::run;
use resil_lab::ApiError;

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

/// A provider stating 10 completions a second says so on every answer, as OpenAI does: the
/// limit, what is left after this one, and the time to the window's end; the 11th in a
/// window is a 429 asking to wait until then, and a limit changed mid-window applies at once.
#[tokio::test]
async fn a_provider_states_its_limit_on_every_answer() {
    let provider = MockProvider::with_stated_limit(10, Duration::from_secs(1))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let url = provider.url("/v1/chat/completions?tokens=1");
    let post = || client.post(&url).send();
    let header = |response: &reqwest::Response, name: &str| {
        response.headers()[name].to_str().unwrap().to_owned()
    };

    let first = post().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "x-ratelimit-limit-requests"), "10");
    assert_eq!(header(&first, "x-ratelimit-remaining-requests"), "9");
    let reset = header(&first, "x-ratelimit-reset-requests");
    assert!(
        reset.ends_with("ms") || reset == "1s",
        "a Go duration: {reset}"
    );
    let stated = rate_limits(first.headers()).requests.unwrap();
    assert_eq!((stated.limit, stated.remaining), (Some(10), 9));
    assert!(stated.reset > Duration::ZERO && stated.reset <= Duration::from_secs(1));

    // All in the first window: a few milliseconds over loopback.
    for left in (0..9).rev() {
        let answer = post().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(
            header(&answer, "x-ratelimit-remaining-requests"),
            left.to_string()
        );
    }
    let throttled = post().await.unwrap();
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&throttled, "x-ratelimit-remaining-requests"), "0");
    let wait: u64 = header(&throttled, "retry-after-ms").parse().unwrap();
    assert!(wait > 0 && wait <= 1000, "retry-after-ms: {wait}");
    assert_eq!(header(&throttled, "retry-after"), "1");
    let error = classify(throttled).await.unwrap_err();
    assert_eq!(error.retry_after, Some(Duration::from_millis(wait)));

    // Raised at once: the same window takes 10 more.
    provider.set_stated_limit(20);
    let raised = post().await.unwrap();
    assert_eq!(raised.status(), StatusCode::OK);
    assert_eq!(header(&raised, "x-ratelimit-limit-requests"), "20");
    assert_eq!(header(&raised, "x-ratelimit-remaining-requests"), "9");

    let stats = provider.stats();
    assert_eq!(
        (stats.requests, stats.generations, stats.rate_limited),
        (12, 11, 1)
    );
    provider.stop().await;
}

#[resilient(timeout = "5s", retry = 6, rate = "auto")]
async fn learnt(client: &reqwest::Client, url: &str) -> Result<(), ApiError> {
    classify(client.post(url).send().await?)
        .await?
        .bytes()
        .await?;
    Ok(())
}

/// Issue 35's bar: 40 callers at once through a gate told nothing, against a provider stating
/// 10 a second, all served with at most a stray 429 at a window's edge (2 allowed on a busy
/// machine) within 6 s; no gate collects 60 (`cargo run --example learn_limits`).
#[tokio::test]
async fn a_gate_told_nothing_learns_the_stated_limit() {
    let provider = MockProvider::with_stated_limit(10, Duration::from_secs(1))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let url = provider.url("/v1/chat/completions?tokens=2");
    let started = Instant::now();
    let results = join_all((0..40).map(|_| learnt(&client, &url))).await;
    let took = started.elapsed();
    let stats = provider.stats();
    eprintln!(
        "rate = \"auto\": {} × 429, {} calls, {:.2} s",
        stats.rate_limited,
        stats.requests,
        took.as_secs_f64()
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(stats.rate_limited <= 2, "{stats:?}");
    assert!(took < Duration::from_secs(6), "{took:?}");
    provider.stop().await;
}
