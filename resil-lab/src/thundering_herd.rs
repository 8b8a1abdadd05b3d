//! The thundering herd: clients against a server that serves 3 at once and answers 429 with
//! `Retry-After: 1` beyond that. Without jitter, every rejected client comes back at the same
//! instant and most are rejected again; jitter spreads them out; a client-side gate of 3
//! keeps them from arriving at all.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use resil::{Jitter, Policy};
use serde_json::json;
use tokio::time::Instant;

use crate::timeline::{Recording, Timeline};
use crate::LlmError;

/// What the original measured.
pub const ORIGINAL: &str =
    "20 clients, jitter: 74 requests, 54 × 429, 7.1 s; gate of 3: 20 requests, 0 × 429, 883 ms; \
100 clients: no jitter 226 s median (65–246 s), full jitter 2.2 s";

/// How the clients pace themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Wait exactly what the server said.
    NoJitter,
    /// `Retry-After` plus a full-jitter draw.
    FullJitter,
    /// Full jitter, and at most 3 requests in flight from this process, the others waiting
    /// their turn (`bulkhead = 3, bulkhead_queue = …`).
    Gated,
}

impl Variant {
    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::NoJitter => "no jitter",
            Variant::FullJitter => "full jitter",
            Variant::Gated => "full jitter + gate of 3",
        }
    }
}

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Clients, each sending one request.
    pub clients: u32,
    /// Pacing.
    pub variant: Variant,
    /// Jitter seed.
    pub seed: u64,
    /// Requests the server saw.
    pub requests: u32,
    /// Of which rejected with 429.
    pub rejected: u32,
    /// Until the last client had its answer.
    pub total: Duration,
    /// Retries per client, on average.
    pub retries_per_client: f64,
    /// Clients that got their answer.
    pub answered: u32,
}

impl Row {
    /// One JSON object.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "clients": self.clients,
            "variant": self.variant.name(),
            "seed": self.seed,
            "requests": self.requests,
            "rejected_429": self.rejected,
            "total_ms": self.total.as_millis() as u64,
            "retries_per_client": self.retries_per_client,
            "answered": self.answered,
        })
    }
}

/// Serves 3 requests at once in 125 ms each; answers 429 `Retry-After: 1` beyond.
#[derive(Debug, Default)]
struct Server {
    in_flight: AtomicUsize,
    requests: AtomicU32,
    rejected: AtomicU32,
}

impl Server {
    async fn handle(&self) -> Result<(), LlmError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(5)).await;
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= 3 {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(LlmError::RateLimited(Duration::from_secs(1)));
        }
        tokio::time::sleep(Duration::from_millis(120)).await;
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }
}

/// `clients` clients, each sending one request, paced by `variant`.
pub async fn run_one(clients: u32, variant: Variant, seed: u64) -> Row {
    let mut policy = Policy::builder()
        .retry(100)
        .jitter(if variant == Variant::NoJitter {
            Jitter::None
        } else {
            Jitter::Full
        })
        .seed(seed);
    if variant == Variant::Gated {
        policy = policy.bulkhead(3).bulkhead_queue(clients as usize);
    }
    let policy = policy.build().expect("valid policy");
    let server = Server::default();
    let started = Instant::now();
    let answered =
        join_all((0..clients).map(|_| async { policy.run(|| server.handle()).await.is_ok() }))
            .await;
    let requests = server.requests.load(Ordering::Relaxed);
    Row {
        clients,
        variant,
        seed,
        requests,
        rejected: server.rejected.load(Ordering::Relaxed),
        total: started.elapsed(),
        retries_per_client: f64::from(requests - clients) / f64::from(clients),
        answered: answered.into_iter().filter(|ok| *ok).count() as u32,
    }
}

/// 20 and 100 clients, each variant, seeds 1 to 3.
pub async fn run() -> Vec<Row> {
    crate::timeline::rows(run_recorded(None).await)
}

/// [`run`], with each row's timeline when `timeline` is given (and installed as a listener).
pub async fn run_recorded(timeline: Option<&Timeline>) -> Vec<(Row, Option<Recording>)> {
    let record = || timeline.map(Timeline::take);
    let mut rows = Vec::new();
    for clients in [20, 100] {
        for variant in [Variant::NoJitter, Variant::FullJitter, Variant::Gated] {
            for seed in 1..=3 {
                record();
                let row = run_one(clients, variant, seed).await;
                rows.push((row, record()));
            }
        }
    }
    rows
}
