//! Learning a provider's limit from what its answers say, against the
//! [mock provider](crate::mock) stating 10 completions per 1 s window as OpenAI does
//! (`x-ratelimit-*-requests`, [`MockProvider::with_stated_limit`]), over loopback and real
//! time: 40 callers at once without a gate, through fixed gates set too high, too low and
//! exactly, through `rate = "auto"`, and through `rate = "auto"` while the provider halves
//! its limit mid-run and later restores it.
//!
//! A second table learns how many calls at once a provider takes: [`CALLS`] calls by
//! [`WORKERS`] workers against a provider generating at most [`CAPACITY`] completions at
//! once (about 400 ms each, [`GENERATION`]; beyond that, 429 with `Retry-After: 1`), whose
//! capacity halves for a while ([`SHRUNK`]) and recovers: without a bulkhead, through a
//! bulkhead of the full capacity (`bulkhead = 8`), of the halved one (`bulkhead = 4`), and
//! through `bulkhead = "adaptive"`, each with a queue for every worker (`bulkhead_queue =
//! 32`: a caller past the limit waits its turn rather than fails). An operation keeps its
//! place through its retries' waits, so a caller waiting out a 429's `Retry-After` holds a
//! place all along.
//!
//! Each row runs against a fresh provider, through a function of its own (a gate or an
//! adaptive bulkhead is its function's: two rows through one function would share what it
//! learnt). So [`run`] and [`run_bulkheads`], or [`run_together`], are meant to run once per
//! process, and not both.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::future::join_all;
use resil::http::classify;
use resil::resilient;

mod bulkheads;

use bulkheads::{heard, shrinking, Fixed, Learnt, Unbounded};
pub use bulkheads::{
    run_bulkheads, BulkheadRow, BULKHEAD_NAMES, CALLS, CAPACITY, GENERATION, SHRUNK, WORKERS,
};

use crate::mock::MockProvider;
use crate::ApiError;

/// The provider's stated limit: completions per [`WINDOW`].
pub const LIMIT: u64 = 10;
/// The provider's fixed window.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Callers, all at once.
pub const CALLERS: usize = 40;
/// When the provider of the last row halves its limit, and when it restores it (from its
/// start).
pub const HALVED: (Duration, Duration) = (Duration::from_millis(1500), Duration::from_millis(3500));

/// A client whose methods differ only in their rate gate.
#[derive(Debug, Clone)]
pub struct LearningClient {
    http: reqwest::Client,
    base: String,
}

impl LearningClient {
    /// A client for the provider at `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: impl Into<String>) -> Self {
        LearningClient {
            http: reqwest::Client::new(),
            base: base.into(),
        }
    }

    /// One completion: the body read to its end; any error status classified, and every
    /// answer's rate-limit headers reported to the call (by [`classify`]).
    pub async fn post(&self) -> Result<(), ApiError> {
        self.post_to("/v1/chat/completions?tokens=2").await
    }

    /// A completion that takes a while to generate ([`GENERATION`]), for the bulkhead rows.
    pub async fn post_slow(&self) -> Result<(), ApiError> {
        self.post_to(GENERATION).await
    }

    async fn post_to(&self, path: &str) -> Result<(), ApiError> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .send()
            .await?;
        classify(response).await?.bytes().await?;
        Ok(())
    }

    /// No gate: every caller goes at once and retries its 429s after their wait.
    #[resilient(timeout = "5s", retry = 6)]
    pub async fn ungated(&self) -> Result<(), ApiError> {
        self.post().await
    }

    /// A fixed gate twice the provider's limit.
    #[resilient(timeout = "5s", retry = 6, rate = "20/s")]
    pub async fn too_high(&self) -> Result<(), ApiError> {
        self.post().await
    }

    /// A fixed gate half the provider's limit.
    #[resilient(timeout = "5s", retry = 6, rate = "5/s")]
    pub async fn too_low(&self) -> Result<(), ApiError> {
        self.post().await
    }

    /// The provider's limit, declared exactly.
    #[resilient(timeout = "5s", retry = 6, rate = "10/s, exact")]
    pub async fn exact(&self) -> Result<(), ApiError> {
        self.post().await
    }

    /// A gate told nothing: it learns the limit from the answers.
    #[resilient(timeout = "5s", retry = 6, rate = "auto")]
    pub async fn auto(&self) -> Result<(), ApiError> {
        self.post().await
    }

    /// The same, with a gate of its own: for the row whose provider changes its limit.
    #[resilient(timeout = "5s", retry = 6, rate = "auto")]
    pub async fn auto_changing(&self) -> Result<(), ApiError> {
        self.post().await
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The row's letter.
    pub row: &'static str,
    /// What the row runs.
    pub name: &'static str,
    /// Callers, all at once.
    pub callers: usize,
    /// Callers whose call succeeded.
    pub succeeded: usize,
    /// Requests the provider received.
    pub calls: u32,
    /// Requests it answered 429.
    pub rate_limited: u32,
    /// From the first call to the last outcome.
    pub total: Duration,
    /// Completions the provider's windows could serve, from the first to the last that
    /// counted a request ([`MockProvider::stated_capacity`]).
    pub capacity: u64,
}

impl Row {
    /// The share of the provider's capacity the row used: its successes over what the
    /// windows it ran through could serve (1.0: every window full).
    pub fn share(&self) -> f64 {
        if self.capacity == 0 {
            return 0.0;
        }
        self.succeeded as f64 / self.capacity as f64
    }

    /// One JSON object for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "row": self.row,
            "name": self.name,
            "callers": self.callers,
            "succeeded": self.succeeded,
            "calls": self.calls,
            "rate_limited": self.rate_limited,
            "total_ms": self.total.as_millis() as u64,
            "capacity": self.capacity,
            "share": (self.share() * 1000.0).round() / 1000.0,
        })
    }
}

/// Runs every rate row against a fresh provider, one row at a time (about 32 s):
/// [`CALLERS`] calls at once. Once per process (see the module's docs).
pub async fn run() -> std::io::Result<Vec<Row>> {
    Ok(vec![
        row("a", NAMES[0], |c| async move { c.ungated().await }).await?,
        row("b", NAMES[1], |c| async move { c.too_high().await }).await?,
        row("c", NAMES[2], |c| async move { c.too_low().await }).await?,
        row("d", NAMES[3], |c| async move { c.exact().await }).await?,
        row("e", NAMES[4], |c| async move { c.auto().await }).await?,
        halved("f", NAMES[5]).await?,
    ])
}

/// The rows of [`run`] and of [`run_bulkheads`], all at once, each against its own provider
/// through its own gate or bulkhead: the time of the longest (about 10 s, `bulkhead = 4`)
/// instead of their sum. For the tests, which assert orderings; the example measures one
/// row at a time. Once per process.
pub async fn run_together() -> std::io::Result<(Vec<Row>, Vec<BulkheadRow>)> {
    let heard = heard();
    let (a, b, c, d, e, f, g, h, i, j) = futures::try_join!(
        row("a", NAMES[0], |c| async move { c.ungated().await }),
        row("b", NAMES[1], |c| async move { c.too_high().await }),
        row("c", NAMES[2], |c| async move { c.too_low().await }),
        row("d", NAMES[3], |c| async move { c.exact().await }),
        row("e", NAMES[4], |c| async move { c.auto().await }),
        halved("f", NAMES[5]),
        shrinking("g", BULKHEAD_NAMES[0], Unbounded, |c| async move {
            c.unbounded().await
        }),
        shrinking("h", BULKHEAD_NAMES[1], Fixed(8), |c| async move {
            c.bulkhead_full().await
        }),
        shrinking("i", BULKHEAD_NAMES[2], Fixed(4), |c| async move {
            c.bulkhead_half().await
        }),
        shrinking("j", BULKHEAD_NAMES[3], Learnt(heard), |c| async move {
            c.bulkhead_adaptive().await
        }),
    )?;
    Ok((vec![a, b, c, d, e, f], vec![g, h, i, j]))
}

/// What each row runs, in order.
pub const NAMES: [&str; 6] = [
    "no gate",
    "rate = \"20/s\"",
    "rate = \"5/s\"",
    "rate = \"10/s, exact\"",
    "rate = \"auto\"",
    "rate = \"auto\", limit 10 → 5 → 10",
];

async fn row<F, Fut>(row: &'static str, name: &'static str, call: F) -> std::io::Result<Row>
where
    F: Fn(LearningClient) -> Fut,
    Fut: Future<Output = Result<(), ApiError>>,
{
    let provider = MockProvider::with_stated_limit(LIMIT, WINDOW).await?;
    let client = LearningClient::new(provider.url(""));
    let started = Instant::now();
    let results = join_all((0..CALLERS).map(|_| call(client.clone()))).await;
    let total = started.elapsed();
    Ok(finish(row, name, provider, &results, total).await)
}

/// The last row: the provider halves its limit after [`HALVED`]`.0` and restores it after
/// [`HALVED`]`.1`, while the callers run.
async fn halved(row: &'static str, name: &'static str) -> std::io::Result<Row> {
    let provider = MockProvider::with_stated_limit(LIMIT, WINDOW).await?;
    let client = LearningClient::new(provider.url(""));
    let started = Instant::now();
    let callers = async {
        let results = join_all((0..CALLERS).map(|_| client.auto_changing())).await;
        (results, started.elapsed())
    };
    let changes = async {
        tokio::time::sleep(HALVED.0).await;
        provider.set_stated_limit(LIMIT / 2);
        tokio::time::sleep(HALVED.1 - HALVED.0).await;
        provider.set_stated_limit(LIMIT);
    };
    let ((results, total), ()) = futures::join!(callers, changes);
    Ok(finish(row, name, provider, &results, total).await)
}

async fn finish(
    row: &'static str,
    name: &'static str,
    provider: MockProvider,
    results: &[Result<(), ApiError>],
    total: Duration,
) -> Row {
    let stats = provider.stats();
    let capacity = provider.stated_capacity();
    provider.stop().await;
    Row {
        row,
        name,
        callers: results.len(),
        succeeded: results.iter().filter(|r| r.is_ok()).count(),
        calls: stats.requests,
        rate_limited: stats.rate_limited,
        total,
        capacity,
    }
}
