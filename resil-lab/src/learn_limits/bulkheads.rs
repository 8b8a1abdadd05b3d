//! The bulkhead rows of [`learn_limits`](super): how many calls at once a provider takes,
//! while its capacity halves and recovers. Apart from the rate rows, which are long enough
//! already.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::join_all;
use resil::events::{Event, Listener};
use resil::{resilient, Bulkhead};

use super::LearningClient;
use crate::mock::MockProvider;
use crate::ApiError;

impl LearningClient {
    /// No bulkhead: every worker's call goes at once, and retries its 429s after their wait.
    #[resilient(timeout = "5s", retry = 6)]
    pub async fn unbounded(&self) -> Result<(), ApiError> {
        self.post_slow().await
    }

    /// A bulkhead of the provider's full capacity ([`CAPACITY`]); the callers past it wait
    /// their turn.
    #[resilient(timeout = "5s", retry = 6, bulkhead = 8, bulkhead_queue = 32)]
    pub async fn bulkhead_full(&self) -> Result<(), ApiError> {
        self.post_slow().await
    }

    /// A bulkhead of half the provider's capacity: right while the capacity is halved.
    #[resilient(timeout = "5s", retry = 6, bulkhead = 4, bulkhead_queue = 32)]
    pub async fn bulkhead_half(&self) -> Result<(), ApiError> {
        self.post_slow().await
    }

    /// A bulkhead that learns the provider's capacity from its answers.
    #[resilient(timeout = "5s", retry = 6, bulkhead = "adaptive", bulkhead_queue = 32)]
    pub async fn bulkhead_adaptive(&self) -> Result<(), ApiError> {
        self.post_slow().await
    }
}

/// How many completions the bulkhead rows' provider generates at once, but while
/// [`SHRUNK`]: half as many.
pub const CAPACITY: u32 = 8;
/// What each bulkhead row's call asks for: 4 tokens 100 ms apart, about 400 ms generating.
pub const GENERATION: &str = "/v1/chat/completions?tokens=4&delay=100";
/// Calls each bulkhead row makes.
pub const CALLS: usize = 100;
/// The workers making them, each one call after another: more than the provider takes.
pub const WORKERS: usize = 32;
/// When the bulkhead rows' provider halves its capacity, and when it recovers (from the
/// row's start).
pub const SHRUNK: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(4));

/// One row of the bulkhead table.
#[derive(Debug, Clone)]
pub struct BulkheadRow {
    /// The row's letter.
    pub row: &'static str,
    /// What the row runs.
    pub name: &'static str,
    /// Calls made, by [`WORKERS`] workers.
    pub callers: usize,
    /// Calls that succeeded.
    pub succeeded: usize,
    /// Requests the provider received.
    pub calls: u32,
    /// Requests it answered 429 (more generating than it takes).
    pub rate_limited: u32,
    /// From the first call to the last outcome.
    pub total: Duration,
    /// The bulkhead's limit on average (over time) while the capacity was halved (`None`:
    /// no bulkhead).
    pub limit_shrunk: Option<f64>,
    /// Its limit on average while the capacity was whole: before [`SHRUNK`] and after.
    pub limit_whole: Option<f64>,
    /// Its limit at the end.
    pub limit: Option<usize>,
}

impl BulkheadRow {
    /// One JSON object for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "row": self.row,
            "name": self.name,
            "callers": self.callers,
            "workers": WORKERS,
            "succeeded": self.succeeded,
            "calls": self.calls,
            "rate_limited": self.rate_limited,
            "total_ms": self.total.as_millis() as u64,
            "limit_shrunk": self.limit_shrunk.map(|limit| (limit * 10.0).round() / 10.0),
            "limit_whole": self.limit_whole.map(|limit| (limit * 10.0).round() / 10.0),
            "limit": self.limit,
        })
    }
}

/// What the bulkhead rows run, in order.
pub const BULKHEAD_NAMES: [&str; 4] = [
    "no bulkhead",
    "bulkhead = 8",
    "bulkhead = 4",
    "bulkhead = \"adaptive\"",
];

/// The bulkhead rows, one at a time against a fresh provider each (about 34 s): [`CALLS`]
/// calls by [`WORKERS`] workers while the provider's capacity goes [`CAPACITY`] → half →
/// [`CAPACITY`]. Once per process, and not with [`run_together`](super::run_together).
pub async fn run_bulkheads() -> std::io::Result<Vec<BulkheadRow>> {
    let heard = heard();
    Ok(vec![
        shrinking("g", BULKHEAD_NAMES[0], Unbounded, |c| async move {
            c.unbounded().await
        })
        .await?,
        shrinking("h", BULKHEAD_NAMES[1], Fixed(8), |c| async move {
            c.bulkhead_full().await
        })
        .await?,
        shrinking("i", BULKHEAD_NAMES[2], Fixed(4), |c| async move {
            c.bulkhead_half().await
        })
        .await?,
        shrinking("j", BULKHEAD_NAMES[3], Learnt(heard), |c| async move {
            c.bulkhead_adaptive().await
        })
        .await?,
    ])
}

/// Where a row's bulkhead limit is read: none, fixed, or heard from the adaptive one's
/// events.
pub(super) enum Limit {
    Unbounded,
    Fixed(usize),
    Learnt(&'static Heard),
}
pub(super) use Limit::{Fixed, Learnt, Unbounded};

/// The adaptive bulkhead's moves, as its events report them (every move while the limit is
/// under 10: an event reports a move of more than a tenth).
#[derive(Debug, Default)]
pub(super) struct Heard(Mutex<Vec<(Instant, usize)>>);

/// The adaptive row's function, as its events name it.
const ADAPTIVE_SITE: &str = concat!(module_path!(), "::bulkhead_adaptive");

impl Listener for Heard {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::ConcurrencyLimit { site, to, .. } = event {
            if *site == ADAPTIVE_SITE {
                let mut heard = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
                heard.push((Instant::now(), *to));
            }
        }
    }
}

impl Heard {
    /// The limit at `at`: the last move heard by then, else where it starts.
    fn at(&self, at: Instant) -> usize {
        let heard = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
        let start = || {
            let (min, max) = Bulkhead::DEFAULT_ADAPTIVE_RANGE;
            Bulkhead::adaptive(min, max).map_or(0, |bulkhead| bulkhead.limit())
        };
        (heard.iter().rev())
            .find(|(when, _)| *when <= at)
            .map_or_else(start, |(_, limit)| *limit)
    }

    /// The limit's average over `from..to`, weighted by how long it held.
    fn mean(&self, from: Instant, to: Instant) -> f64 {
        let moves: Vec<Instant> = {
            let heard = self.0.lock().unwrap_or_else(|poison| poison.into_inner());
            (heard.iter())
                .map(|(when, _)| *when)
                .filter(|when| (from..to).contains(when))
                .collect()
        };
        let (mut sum, mut since) = (0.0, from);
        for when in moves.into_iter().chain([to]) {
            sum += self.at(since) as f64 * (when - since).as_secs_f64();
            since = when;
        }
        sum / (to - from).as_secs_f64().max(f64::EPSILON)
    }
}

/// The listener hearing the adaptive bulkhead, installed once.
pub(super) fn heard() -> &'static Heard {
    static HEARD: OnceLock<Arc<Heard>> = OnceLock::new();
    HEARD.get_or_init(|| {
        let heard = Arc::new(Heard::default());
        resil::events::add_global_listener(Arc::clone(&heard) as Arc<dyn Listener>);
        heard
    })
}

/// A bulkhead row: [`CALLS`] calls by [`WORKERS`] workers against a provider of
/// [`CAPACITY`] at once, halved from [`SHRUNK`]`.0` to [`SHRUNK`]`.1`.
pub(super) async fn shrinking<F, Fut>(
    row: &'static str,
    name: &'static str,
    limit: Limit,
    call: F,
) -> std::io::Result<BulkheadRow>
where
    F: Fn(LearningClient) -> Fut,
    Fut: Future<Output = Result<(), ApiError>>,
{
    let provider = MockProvider::with_capacity(CAPACITY, 1).await?;
    let client = LearningClient::new(provider.url(""));
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let worker = || async {
        let mut succeeded = 0;
        while next.fetch_add(1, Ordering::Relaxed) < CALLS {
            succeeded += usize::from(call(client.clone()).await.is_ok());
        }
        succeeded
    };
    let callers = async {
        let succeeded: usize = join_all((0..WORKERS).map(|_| worker())).await.iter().sum();
        (succeeded, started.elapsed())
    };
    let changes = async {
        tokio::time::sleep(SHRUNK.0).await;
        provider.set_capacity(CAPACITY / 2);
        tokio::time::sleep(SHRUNK.1 - SHRUNK.0).await;
        provider.set_capacity(CAPACITY);
    };
    let ((succeeded, total), ()) = futures::join!(callers, changes);
    let (limit_shrunk, limit_whole, limit) = match limit {
        Unbounded => (None, None, None),
        Fixed(limit) => (Some(limit as f64), Some(limit as f64), Some(limit)),
        Learnt(heard) => {
            let (halved, restored) = (started + SHRUNK.0, started + SHRUNK.1);
            let ended = (started + total).max(restored);
            let after = ended - restored;
            let whole = heard.mean(started, halved) * SHRUNK.0.as_secs_f64()
                + heard.mean(restored, ended) * after.as_secs_f64();
            let whole = whole / (SHRUNK.0 + after).as_secs_f64();
            (
                Some(heard.mean(halved, restored)),
                Some(whole),
                Some(heard.at(ended)),
            )
        }
    };
    let stats = provider.stats();
    provider.stop().await;
    Ok(BulkheadRow {
        row,
        name,
        callers: CALLS,
        succeeded,
        calls: stats.requests,
        rate_limited: stats.rate_limited,
        total,
        limit_shrunk,
        limit_whole,
        limit,
    })
}
