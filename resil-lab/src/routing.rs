//! Routing a streamed completion over three models, each served by its own
//! [mock provider](crate::mock) on loopback, in real time: A is down (503), B's provider allows
//! 20 requests and then answers 429 with `Retry-After: 60`, C is healthy but every 10th answer
//! takes 5 s to its first token. The same 200 requests, their first choices cycling over A, B
//! and C, go four times: to their first choice only, without and with a hedge, and over a
//! route of all three, without and with a hedge.
//!
//! One keyed policy serves every row: per model a breaker (3 failures open it for a minute)
//! and a rate gate (wide enough never to be the limit; it is there to hear its model's 429s
//! and hold its callers for the `Retry-After`), 2 retries, a 10 s deadline; for the rows that
//! hedge, one hedge after [`HEDGE_AFTER`] without a first token. With the route, a hedge goes
//! to the next target that would call; here none does but C itself (A's breaker is open, B's
//! gate holds), so every hedge goes to C, as it does without a route.
//!
//! C does not replay by `Idempotency-Key` ([`MockProvider::no_replays`]), as completion APIs
//! mostly do not: a hedge carries its operation's key, and a provider that replays by key
//! answers a hedge on the same model from the slow generation it races, which cuts nothing.
//! Of C's hedges, 1 in 10 is slow too, counted apart from the new requests
//! ([`MockProvider::slow_tail`]).
//!
//! Requests start one after another, each once the one before has its answer's headers (or
//! its outcome): the breakers and gates then see the requests in one order, so the counts are
//! the same on every run, while the first tokens are awaited concurrently. A hedge starts
//! [`HEDGE_AFTER`] after its request, while later requests are starting; the mock counts it
//! apart, so that it changes none of their counts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use resil::events::{Event, Listener};
use resil::stream::Commit;
use resil::{Keyed, Policy};
use tokio::sync::Notify;

use crate::client::{ChatClient, Chunk, ClientError};
use crate::mock::MockProvider;
use crate::report::percentile;

/// The models, in the order of every table: A down, B over its quota, C slow in its tail.
pub const MODELS: [&str; 3] = ["A", "B", "C"];
/// Requests per row.
pub const REQUESTS: usize = 200;
/// Requests B's provider serves before answering 429.
pub const QUOTA: u32 = 20;
/// Every how many of C's answers one is slow to its first token, and how slow.
pub const TAIL: (u32, Duration) = (10, Duration::from_secs(5));
/// What each request asks for: 5 tokens, 20 ms apart.
const ANSWER: &str = "/v1/chat/completions?tokens=5&delay=20";

/// How long an attempt goes without a first token before its hedge starts, in the rows that
/// hedge: far above a first token outside C's tail (tens of milliseconds), far below the tail.
pub const HEDGE_AFTER: Duration = Duration::from_millis(800);

/// How the requests are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Each to its first choice only (`run_stream_keyed_until`).
    Direct,
    /// As [`Way::Direct`], under a policy that hedges: the hedge goes to the same model.
    Hedged,
    /// Each over all three models, its first choice first (`run_stream_routed_until`).
    Routed,
    /// As [`Way::Routed`], under a policy that hedges: the hedge goes to the next target
    /// that would call (the same one when none would).
    RoutedHedged,
}

/// The rows, in order: without a route, then with one; each without a hedge, then with one.
pub const WAYS: [Way; 4] = [Way::Direct, Way::Hedged, Way::Routed, Way::RoutedHedged];

impl Way {
    /// The row's name.
    pub fn name(self) -> &'static str {
        match self {
            Way::Direct => "no route",
            Way::Hedged => "hedge",
            Way::Routed => "route",
            Way::RoutedHedged => "route + hedge",
        }
    }

    /// Whether its policy hedges.
    pub fn hedges(self) -> bool {
        matches!(self, Way::Hedged | Way::RoutedHedged)
    }

    /// Whether its requests go over the route.
    pub fn routes(self) -> bool {
        matches!(self, Way::Routed | Way::RoutedHedged)
    }
}

/// What one row measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// How the requests were sent.
    pub way: Way,
    /// Requests each model's provider received, in the order of [`MODELS`], hedges included.
    pub sent: [u32; 3],
    /// Hedges started (`Event::Hedged`).
    pub hedges: u32,
    /// Median time to the first token, over the requests that got one.
    pub p50: Duration,
    /// 99th percentile of the same.
    pub p99: Duration,
    /// Requests whose first token took the slow tail's wait or more.
    pub slow: u32,
    /// Requests answered in full.
    pub ok: u32,
    /// Requests that failed, by kind (`breaker_open`, `rate_limited`, `503`, ...).
    pub failed: BTreeMap<&'static str, u32>,
    /// From the first request to the last answer's end.
    pub total: Duration,
}

impl Row {
    /// Requests that failed, all kinds together.
    pub fn failures(&self) -> u32 {
        self.failed.values().sum()
    }

    /// The failures as `breaker_open 66, rate_limited 46`.
    pub fn failed_text(&self) -> String {
        let kinds: Vec<String> = (self.failed.iter())
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        kinds.join(", ")
    }

    /// One JSON object for `--json`.
    pub fn json(&self) -> serde_json::Value {
        let sent: BTreeMap<&str, u32> = MODELS.into_iter().zip(self.sent).collect();
        serde_json::json!({
            "row": self.way.name(),
            "sent": sent,
            "hedges": self.hedges,
            "ttft_p50_ms": self.p50.as_millis() as u64,
            "ttft_p99_ms": self.p99.as_millis() as u64,
            "ttft_slow": self.slow,
            "ok": self.ok,
            "failed": self.failures(),
            "failed_by_kind": self.failed,
            "total_ms": self.total.as_millis() as u64,
        })
    }
}

/// Counts the hedges a policy starts.
#[derive(Debug, Default)]
struct Hedges(AtomicU32);

impl Listener for Hedges {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::Hedged { .. } = event {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The policy every row uses, fresh for each: per model a breaker and a gate; for a row
/// that hedges, one hedge after [`HEDGE_AFTER`]. `hedges` hears each hedge start.
fn policy(way: Way, hedges: Arc<Hedges>) -> Policy<Keyed> {
    let mut builder = Policy::builder().listener(hedges);
    if way.hedges() {
        builder = builder.hedge(1, HEDGE_AFTER);
    }
    builder
        .retry(2)
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .deadline(Duration::from_secs(10))
        .breaker_per_key("model", 3, Duration::from_secs(60))
        // The gate is per key, and every key gets the same one: sized for C's load, so that
        // only a 429's hold ever closes it.
        .rate(200, Duration::from_secs(1), 200)
        .rate_per_key()
        .build()
        .expect("a valid policy")
}

/// The three providers, with a client for each.
struct Models {
    providers: [MockProvider; 3],
    clients: [ChatClient; 3],
}

impl Models {
    async fn start() -> std::io::Result<Self> {
        let down = MockProvider::start().await?;
        down.set_down(true);
        let limited = MockProvider::with_quota(QUOTA, 60).await?;
        // Any number at once: C's slow answers must not turn into 429s.
        let slow = MockProvider::with_capacity(u32::MAX, 1).await?;
        slow.slow_tail(TAIL.0, TAIL.1);
        slow.no_replays();
        let providers = [down, limited, slow];
        let clients = providers.each_ref().map(|p| ChatClient::new(p.url("")));
        Ok(Models { providers, clients })
    }

    fn client(&self, model: &str) -> &ChatClient {
        let index = MODELS.iter().position(|m| *m == model);
        &self.clients[index.expect("one of MODELS")]
    }
}

/// How one request went.
struct Outcome {
    first_token: Option<Duration>,
    result: Result<(), ClientError>,
}

/// Every row, at the same time (each against providers and a policy of its own): about 8 s.
pub async fn run() -> std::io::Result<Vec<Row>> {
    futures::future::try_join_all(WAYS.map(run_one)).await
}

/// One row: [`REQUESTS`] requests against fresh providers.
pub async fn run_one(way: Way) -> std::io::Result<Row> {
    let models = Arc::new(Models::start().await?);
    let hedges = Arc::new(Hedges::default());
    let policy = Arc::new(policy(way, Arc::clone(&hedges)));
    let started = Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..REQUESTS {
        let settled = Arc::new(Notify::new());
        let first = MODELS[i % MODELS.len()];
        let (policy, models) = (Arc::clone(&policy), Arc::clone(&models));
        requests.spawn(send(way, first, policy, models, Arc::clone(&settled)));
        settled.notified().await;
    }
    let outcomes = requests.join_all().await;
    let total = started.elapsed();
    let mut first_tokens: Vec<Duration> = outcomes.iter().filter_map(|o| o.first_token).collect();
    first_tokens.sort();
    let mut failed = BTreeMap::new();
    for error in outcomes.iter().filter_map(|o| o.result.as_ref().err()) {
        *failed.entry(kind(error)).or_insert(0) += 1;
    }
    let models = Arc::into_inner(models).expect("every request has ended");
    let sent = models.providers.each_ref().map(|p| p.stats().requests);
    for provider in models.providers {
        provider.stop().await;
    }
    Ok(Row {
        way,
        sent,
        hedges: hedges.0.load(Ordering::SeqCst),
        p50: percentile(&first_tokens, 50),
        p99: percentile(&first_tokens, 99),
        slow: first_tokens.iter().filter(|t| **t >= TAIL.1).count() as u32,
        ok: outcomes.iter().filter(|o| o.result.is_ok()).count() as u32,
        failed,
        total,
    })
}

/// Wakes the loop that starts the requests, when dropped too: a request that ends (or
/// panics) without a stream must not hold up the next.
struct Settled(Arc<Notify>);

impl Drop for Settled {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// One request, from `first`: settles once an answer's headers are in, then reads it to
/// its end.
async fn send(
    way: Way,
    first: &'static str,
    policy: Arc<Policy<Keyed>>,
    models: Arc<Models>,
    settled: Arc<Notify>,
) -> Outcome {
    let started = Instant::now();
    let _settled = Settled(Arc::clone(&settled));
    let connect = |model: &'static str| {
        let (settled, models) = (Arc::clone(&settled), Arc::clone(&models));
        async move {
            let answer = models.client(model).events(ANSWER).await;
            if answer.is_ok() {
                settled.notify_one();
            }
            answer
        }
    };
    let commit = Commit::when(Chunk::has_content).complete_when(Chunk::is_final);
    let stream = if way.routes() {
        // After the first choice, the others in the cycle's order: B then C after A, C
        // then A after B, A then B after C.
        let at = MODELS.iter().position(|model| *model == first).unwrap_or(0);
        let others = (1..MODELS.len()).map(|k| MODELS[(at + k) % MODELS.len()]);
        policy
            .run_stream_routed_until(first, others, commit, connect)
            .await
    } else {
        policy
            .run_stream_keyed_until(first, commit, || connect(first))
            .await
    };
    let mut stream = match stream {
        Ok(stream) => stream,
        Err(error) => {
            return Outcome {
                first_token: None,
                result: Err(error),
            }
        }
    };
    // The committing token is in hand: the first item comes at once.
    let first_token = Some(started.elapsed());
    let mut result = Ok(());
    while let Some(item) = stream.next().await {
        if let Err(error) = item {
            result = Err(error);
        }
    }
    Outcome {
        first_token,
        result,
    }
}

/// A failure's kind in the table: the runtime's name for a rejection, the status otherwise.
fn kind(error: &ClientError) -> &'static str {
    match error {
        ClientError::Rejected(rejected) => rejected.kind(),
        ClientError::Status { status, .. } => match status.as_u16() {
            429 => "429",
            503 => "503",
            _ => "other status",
        },
        ClientError::Http(_) => "transport",
        ClientError::Truncated => "truncated",
        ClientError::Malformed(_) => "malformed",
    }
}
