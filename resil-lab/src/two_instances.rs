//! Two instances of one service against the mock provider, sharing their breaker and their
//! 10/s rate gate through a real `redis-server`: what each instance does and what the provider
//! sees, then the same with Redis killed mid-run and restarted; and how long the openings
//! one instance made during an outage take to reach Redis once it is back (polled every 10 ms);
//! and a failure-rate window summed over both, which opens on their failures together though
//! neither alone reaches its minimum of calls.
//!
//! The two instances live in one process, each with its own store (its own connection and
//! subscription) and its own local breaker and gate, as two processes would have them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use resil::events::{self, Event, Listener};
use resil::http::classify;
use resil::shared::Redis;
use resil::{Breaker, BreakerConfig, BreakerKind, BreakerState, Policy, Rejected, WindowSize};

use crate::mock::MockProvider;
use crate::redis_server::{settled, RedisServer};
use crate::{ApiError, LlmError};

/// Longer than a reconnection takes (2 s at most), so an opening made while Redis is down is
/// still in force when it returns.
const COOLDOWN: Duration = Duration::from_secs(5);

/// What the run showed.
#[derive(Debug, Default)]
pub struct Report {
    /// Requests A sent into the outage before its breaker opened.
    pub outage_requests_a: u32,
    /// Whether B's breaker was open, without B sending anything, a moment later.
    pub b_opened_by_a: bool,
    /// Requests B sent meanwhile (B was called 5 times).
    pub outage_requests_b: u32,
    /// Requests sent when the cooldown was over and both instances were called at once.
    pub probes: u32,
    /// Requests the provider saw in 2 s of both instances calling as fast as they can.
    pub gated_requests: u32,
    /// Failing calls each instance made into a failure-rate window of 10 s summed over both
    /// (at least 10 calls, half of them bad), and whether both breakers opened.
    pub window: (u32, bool),
    /// Calls made with Redis killed, and how many of them failed.
    pub calls_without_redis: (u32, u32),
    /// Requests the provider saw in 2 s of calling with Redis killed (each local gate decides,
    /// at its share of the rate: half, having seen the other instance).
    pub ungated_requests: u32,
    /// Whether B followed A's opening (made while Redis was down) once Redis was back.
    pub resynced: bool,
    /// Openings one instance made, one per key, while Redis was down, and how long after its
    /// store reconnected they were all in Redis (they go in one pipeline).
    pub resync: (usize, Duration),
    /// What the instances' stores said (SharedUnavailable, SharedRestored).
    pub store_events: Vec<String>,
    /// What a call through a rate gate costs, on average: the gate kept locally, and the gate
    /// shared through Redis (one script's round trip on loopback).
    pub gate_cost: (Duration, Duration),
    /// States the run waited for and never saw within 15 s (its figures after one are moot).
    pub unsettled: Vec<&'static str>,
}

/// One instance: its own store, breaker and policy.
struct Instance {
    store: Redis,
    breaker: Arc<Breaker>,
    policy: Policy,
}

impl Instance {
    async fn start(redis: &RedisServer) -> Instance {
        let store = Redis::open(&redis.url()).await.expect("a Redis URL");
        let breaker = Arc::new(Breaker::new(
            "provider",
            BreakerConfig::new(3, COOLDOWN).expect("a valid breaker"),
        ));
        let policy = Policy::builder()
            .name("chat::complete")
            .timeout(Duration::from_secs(2))
            .breaker(Arc::clone(&breaker))
            .rate(10, Duration::from_secs(1), 1)
            .shared_in(&store)
            .build()
            .expect("a valid policy");
        Instance {
            store,
            breaker,
            policy,
        }
    }

    async fn complete(&self, url: &str) -> Result<String, ApiError> {
        self.policy
            .run(|| async {
                let response = reqwest::Client::new().post(url).send().await?;
                Ok(classify(response).await?.text().await?)
            })
            .await
    }
}

#[derive(Debug, Default)]
struct StoreEvents(Mutex<Vec<String>>);

impl Listener for StoreEvents {
    fn on_event(&self, event: &Event<'_>) {
        let said = match event {
            Event::SharedUnavailable { reason, .. } => format!("unavailable ({reason})"),
            Event::SharedRestored { .. } => "restored".to_owned(),
            Event::GateShare { instances, .. } => format!("gate at its share (1/{instances})"),
            _ => return,
        };
        self.0.lock().expect("not poisoned").push(said);
    }
}

/// Runs the scenario against a `redis-server` it starts; `None` when none is installed and
/// `RESIL_SKIP_REDIS` says to skip (see [`RedisServer::start`]).
/// Real time: about 15 seconds.
pub async fn run() -> std::io::Result<Option<Report>> {
    let Some(mut redis) = RedisServer::start() else {
        return Ok(None);
    };
    let provider = MockProvider::with_capacity(u32::MAX, 1).await?;
    let url = provider.url("/v1/chat/completions");
    let heard = Arc::new(StoreEvents::default());
    events::add_global_listener(Arc::clone(&heard) as Arc<dyn Listener>);
    let (a, b) = (Instance::start(&redis).await, Instance::start(&redis).await);
    let requests = || provider.stats().requests;
    let mut report = Report {
        gate_cost: (gate_cost(None).await, gate_cost(Some(&a.store)).await),
        ..Report::default()
    };

    // The provider goes down: A's breaker opens after 3 failures, and B's with it.
    provider.set_down(true);
    for _ in 0..5 {
        let _ = a.complete(&url).await;
    }
    report.outage_requests_a = requests();
    settle(&mut report, "B's breaker opens", || {
        b.breaker.state() == BreakerState::Open
    })
    .await;
    report.b_opened_by_a = b.breaker.state() == BreakerState::Open;
    let before = requests();
    for _ in 0..5 {
        let _ = b.complete(&url).await;
    }
    report.outage_requests_b = requests() - before;

    // It comes back: once the cooldown is over, one probe (a slow answer) for both instances.
    provider.set_down(false);
    tokio::time::sleep(COOLDOWN).await;
    let before = requests();
    let slow = format!("{url}?delay=300");
    let _ = tokio::join!(a.complete(&slow), b.complete(&slow));
    report.probes = requests() - before;
    settle(&mut report, "B's breaker closes", || {
        b.breaker.state() == BreakerState::Closed
    })
    .await;

    // Both call as fast as they can for 2 s through the shared 10/s gate.
    report.gated_requests = calls_for(&a, &b, &url, Duration::from_secs(2), requests).await;

    // The provider fails: a window summed over both instances opens on their calls together.
    provider.set_down(true);
    report.window = shared_window(&redis, &url, &mut report).await;
    provider.set_down(false);

    // Redis is killed: both go on, each on its own gate and breaker.
    redis.kill();
    let (mut made, mut failed) = (0, 0);
    for _ in 0..5 {
        for instance in [&a, &b] {
            made += 1;
            failed += u32::from(instance.complete(&url).await.is_err());
        }
    }
    report.calls_without_redis = (made, failed);
    report.ungated_requests = calls_for(&a, &b, &url, Duration::from_secs(2), requests).await;

    // A sees the provider fail while Redis is down: its opening waits for Redis.
    provider.set_down(true);
    for _ in 0..3 {
        let _ = a.complete(&url).await;
    }
    redis.restart();
    settle(&mut report, "both stores reconnect", || {
        a.store.is_available() && b.store.is_available()
    })
    .await;
    settle(&mut report, "B's breaker opens from the re-sync", || {
        b.breaker.state() == BreakerState::Open
    })
    .await;
    let before = requests();
    let rejected = matches!(
        b.complete(&url).await,
        Err(ApiError::Rejected(Rejected::BreakerOpen { .. }))
    );
    report.resynced = rejected && requests() == before;
    report.store_events = heard.0.lock().expect("not poisoned").clone();
    // Apart, with a store of its own and a second outage: what the events above do not see.
    report.resync = resync(&mut redis, &mut report).await;
    provider.stop().await;
    Ok(Some(report))
}

/// Two more instances whose breaker judges a window of 10 s summed over both (50 % of at least
/// 10 calls): each makes 6 failing calls, too few alone. The failing calls each made, and
/// whether both breakers opened.
async fn shared_window(redis: &RedisServer, url: &str, report: &mut Report) -> (u32, bool) {
    const CALLS: u32 = 6;
    let kind = BreakerKind::FailureRate {
        percent: 50,
        window: WindowSize::Time(Duration::from_secs(10)),
        min_calls: 10,
    };
    let mut instances = Vec::new();
    for _ in 0..2 {
        let store = Redis::open(&redis.url()).await.expect("a Redis URL");
        let config = BreakerConfig::new(3, COOLDOWN)
            .and_then(|config| config.with_kind(kind))
            .expect("a valid breaker");
        let breaker = Arc::new(Breaker::new("window", config));
        let policy = Policy::builder()
            .name("chat::window")
            .breaker(Arc::clone(&breaker))
            .shared_in(&store)
            .build()
            .expect("a valid policy");
        instances.push(Instance {
            store,
            breaker,
            policy,
        });
    }
    for _ in 0..CALLS {
        for instance in &instances {
            let _ = instance.complete(url).await;
        }
        // Each instance sends its calls to Redis every 100 ms at most.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let open = || (instances.iter()).all(|instance| instance.breaker.state() == BreakerState::Open);
    settle(report, "the shared window opens both breakers", open).await;
    (CALLS, open())
}

/// How many openings of a per-key breaker, made while Redis is down, reach Redis once it is
/// back, and how long after the store reconnects.
async fn resync(redis: &mut RedisServer, report: &mut Report) -> (usize, Duration) {
    const OPENINGS: usize = 1000;
    const PREFIX: &str = "resil:{breaker:lab::resync:";
    let store = Redis::open(&redis.url()).await.expect("a Redis URL");
    let policy = Policy::builder()
        .name("lab::resync")
        .keyed("model")
        .breaker_per_key("model", 1, Duration::from_secs(60))
        .shared_in(&store)
        .build()
        .expect("a valid policy");
    redis.kill();
    for model in 0..OPENINGS {
        let failing = || async { Err::<(), _>(LlmError::Unavailable) };
        let _ = policy.run_keyed(&format!("m{model}"), failing).await;
    }
    redis.restart();
    settle(report, "the re-syncing store reconnects", || {
        store.is_available()
    })
    .await;
    let reconnected = Instant::now();
    settle(
        report,
        "every opening made while Redis was down reaches it",
        || redis.keys(PREFIX).len() >= OPENINGS,
    )
    .await;
    (redis.keys(PREFIX).len(), reconnected.elapsed())
}

/// Calls through both instances, one caller each, for `span`; the requests the provider saw.
async fn calls_for(
    a: &Instance,
    b: &Instance,
    url: &str,
    span: Duration,
    requests: impl Fn() -> u32,
) -> u32 {
    let before = requests();
    let until = Instant::now() + span;
    tokio::join!(keep_calling(a, url, until), keep_calling(b, url, until));
    requests() - before
}

/// The mean time of a call (whose body answers at once) through a gate that never makes it
/// wait, kept locally or in `store`.
async fn gate_cost(store: Option<&Redis>) -> Duration {
    const CALLS: u32 = 1000;
    let builder =
        Policy::builder()
            .name("gate::cost")
            .rate(1_000_000, Duration::from_secs(1), 1_000_000);
    let policy = match store {
        // The round trip is what is measured: a reply late on a busy machine is waited for,
        // not decided locally (and said as an outage).
        Some(store) => builder
            .shared_in(store)
            .shared_timeout(Duration::from_secs(1)),
        None => builder,
    }
    .build()
    .expect("a valid policy");
    let started = Instant::now();
    for _ in 0..CALLS {
        let _ = policy.run(|| async { Ok::<(), Rejected>(()) }).await;
    }
    started.elapsed() / CALLS
}

async fn keep_calling(instance: &Instance, url: &str, until: Instant) {
    while Instant::now() < until {
        let _ = instance.complete(url).await;
    }
}

/// Waits for the instances to reach a state, and reports `what` when they did not.
async fn settle(report: &mut Report, what: &'static str, done: impl Fn() -> bool) {
    if !settled(done).await {
        report.unsettled.push(what);
    }
}

/// Prints the run.
pub fn print(report: &Report) {
    println!("Two instances, one provider, one redis-server on 127.0.0.1\n");
    for what in &report.unsettled {
        println!("(never happened within 15 s: {what}; the figures after it are moot)");
    }
    println!(
        "outage      A sent {} requests, then its breaker opened (3 failures)",
        report.outage_requests_a
    );
    println!(
        "            B's breaker open without a call of its own: {}; B sent {} requests for 5 calls",
        report.b_opened_by_a, report.outage_requests_b
    );
    println!(
        "recovery    both called after the cooldown: {} probe request(s) in all",
        report.probes
    );
    println!(
        "shared gate 10/s across both, 2 s of calling: the provider saw {} requests (10/s each would be ~40)",
        report.gated_requests
    );
    let (calls, opened) = report.window;
    println!(
        "window      {calls} failing calls each into a window summed over both (10 calls at least): both opened: {opened}"
    );
    let (made, failed) = report.calls_without_redis;
    println!(
        "redis down  {made} calls, {failed} failed: every instance decides locally (fail-open)"
    );
    println!(
        "            2 s of calling: the provider saw {} requests (each at its share, 5/s; ~40 at 10/s each)",
        report.ungated_requests
    );
    println!(
        "restart     B follows A's opening made while Redis was down, rejecting without a request: {}",
        report.resynced
    );
    let (openings, took) = report.resync;
    println!(
        "re-sync     {openings} openings of a per-key breaker, made while Redis was down, all in Redis {took:.0?} after its store reconnected"
    );
    println!("\nwhat the stores said: {}", report.store_events.join("; "));
    let (local, shared) = report.gate_cost;
    println!(
        "a call through a rate gate: {local:.1?} kept locally, {shared:.1?} shared (one Lua script's round trip to Redis on loopback; --release for real figures)"
    );
}
