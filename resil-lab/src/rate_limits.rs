//! Staying under a provider's limits instead of collecting its 429s, against the
//! [mock provider](crate::mock) over loopback and real time: the same requests without a gate,
//! with a rate gate, with a queue in front of a provider that serves 3 at once, with a token
//! gate, and with a gate set too fast that learns from the provider's first 429.

use std::time::{Duration, Instant};

use futures::future::join_all;
use resil::http::classify;
use resil::resilient;

use crate::mock::{MockProvider, Stats};
use crate::ApiError;

/// A client whose methods differ only in how they pace themselves.
#[derive(Debug, Clone)]
pub struct PacedClient {
    http: reqwest::Client,
    base: String,
}

impl PacedClient {
    /// A client for the provider at `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: impl Into<String>) -> Self {
        PacedClient {
            http: reqwest::Client::new(),
            base: base.into(),
        }
    }

    /// One completion: the body read to its end; any error status classified.
    pub async fn post(&self, path: &str) -> Result<(), ApiError> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .send()
            .await?;
        classify(response).await?.bytes().await?;
        Ok(())
    }

    /// No gate: every caller goes at once and retries its 429s after `Retry-After`.
    #[resilient(retry = 5, deadline = "20s", backoff = "50ms..200ms")]
    pub async fn ungated(&self, path: &str) -> Result<(), ApiError> {
        self.post(path).await
    }

    /// A rate gate matching the provider's limit.
    #[resilient(
        rate = "50/s, burst 1",
        retry = 5,
        deadline = "20s",
        backoff = "50ms..200ms"
    )]
    pub async fn gated(&self, path: &str) -> Result<(), ApiError> {
        self.post(path).await
    }

    /// A gate twice too fast for the provider: it learns the limit from the provider's 429s.
    #[resilient(
        rate = "100/s, burst 1",
        retry = 5,
        deadline = "20s",
        backoff = "50ms..200ms"
    )]
    pub async fn too_fast(&self, path: &str) -> Result<(), ApiError> {
        self.post(path).await
    }

    /// Three at once, the others waiting their turn: for a provider that serves 3 at once.
    #[resilient(bulkhead = 3, bulkhead_queue = 100, retry = 5, deadline = "20s")]
    pub async fn queued(&self, path: &str) -> Result<(), ApiError> {
        self.post(path).await
    }

    /// A token gate: 2000 tokens per second, 40 at once, each request weighing what it asks for.
    #[resilient(token_rate = "2000/s, burst 40", rate_cost = tokens, retry = 5, deadline = "20s")]
    pub async fn weighed(&self, path: &str, tokens: u32) -> Result<(), ApiError> {
        self.post(path).await
    }
}

/// One row of the table.
#[derive(Debug)]
pub struct Row {
    /// What the row runs.
    pub name: &'static str,
    /// Callers, and how many got their answer.
    pub callers: usize,
    /// Callers that got their answer.
    pub answered: usize,
    /// From the first call to the last answer.
    pub total: Duration,
    /// What the provider did.
    pub provider: Stats,
}

impl Row {
    /// One JSON object for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "row": self.name,
            "callers": self.callers,
            "answered": self.answered,
            "total_ms": self.total.as_millis() as u64,
            "requests": self.provider.requests,
            "rate_limited": self.provider.rate_limited,
        })
    }
}

/// The provider's limit in the rate rows: 50 completions per second.
pub const LIMIT: usize = 50;

/// Runs every row against fresh providers, one row at a time: `callers` requests at once.
pub async fn run(callers: usize) -> std::io::Result<Vec<Row>> {
    let path = "/v1/chat/completions?tokens=2";
    let mut rows = Vec::new();
    rows.push(
        row("no gate", callers, LIMIT, |client| async move {
            client.ungated(path).await
        })
        .await?,
    );
    rows.push(
        row("rate = \"50/s\"", callers, LIMIT, |client| async move {
            client.gated(path).await
        })
        .await?,
    );
    rows.push(
        row(
            "rate = \"100/s\", learning from 429s",
            callers,
            LIMIT,
            |client| async move { client.too_fast(path).await },
        )
        .await?,
    );
    rows.push(
        row(
            "token_rate = \"2000/s, burst 40\", 40 each",
            callers,
            LIMIT,
            |client| async move { client.weighed(path, 40).await },
        )
        .await?,
    );
    // The jitter-herd measurement's gate of 3, in front of a provider serving 3 at once.
    let provider = MockProvider::with_capacity(3, 1).await?;
    let client = PacedClient::new(provider.url(""));
    let started = Instant::now();
    let slow = "/v1/chat/completions?tokens=2&delay=20";
    let results = join_all((0..20).map(|_| client.queued(slow))).await;
    rows.push(Row {
        name: "bulkhead = 3, bulkhead_queue (capacity 3)",
        callers: 20,
        answered: results.iter().filter(|r| r.is_ok()).count(),
        total: started.elapsed(),
        provider: provider.stats(),
    });
    provider.stop().await;
    Ok(rows)
}

async fn row<F, Fut>(
    name: &'static str,
    callers: usize,
    limit: usize,
    call: F,
) -> std::io::Result<Row>
where
    F: Fn(PacedClient) -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    let provider = MockProvider::with_rate_limit(limit).await?;
    let client = PacedClient::new(provider.url(""));
    let started = Instant::now();
    let results = join_all((0..callers).map(|_| call(client.clone()))).await;
    let row = Row {
        name,
        callers,
        answered: results.iter().filter(|r| r.is_ok()).count(),
        total: started.elapsed(),
        provider: provider.stats(),
    };
    provider.stop().await;
    Ok(row)
}
