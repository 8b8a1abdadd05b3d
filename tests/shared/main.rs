//! Shared state through a real `redis-server` on loopback (started by each test on a free
//! port): two instances are two stores and two policies in one process, each with its own
//! local breaker and gates, as two processes would have.
//!
//! These tests run on the real clock: Redis answers over real sockets, which a paused clock
//! would race past. Their waits are bounded polls, never a sleep that hopes.
#![cfg(feature = "redis")]

#[path = "../support/mod.rs"]
mod support;

mod breakers;
mod cluster;
#[cfg(feature = "conformance")]
mod conformance;
mod gates;
mod hostile;
mod learning;
mod outages;
mod priority;
mod processes;
mod returns;
#[cfg(feature = "redis-tls")]
mod tls;
mod windows;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use resil::events::{self, Event, Listener};
use resil::shared::Redis;
use resil::{resilient, Breaker, BreakerConfig, BreakerState, KeyTuple, Policy, Rejected};
use resil_lab::redis_server::{settled, RedisServer, SETTLE_WITHIN};
use support::{ApiError, Calls};

const COOLDOWN: Duration = Duration::from_millis(600);

/// One instance: a store of its own and a policy whose breaker is its own.
struct Instance {
    store: Redis,
    breaker: Arc<Breaker>,
    policy: Policy,
}

async fn instance(
    server: &RedisServer,
    shape: impl FnOnce(resil::PolicyBuilder) -> resil::PolicyBuilder,
) -> Instance {
    let store = Redis::open(&server.url()).await.expect("a Redis URL");
    assert!(store.is_available(), "the test's server answers");
    instance_in(store, shape)
}

/// [`instance`] through `store`.
fn instance_in(
    store: Redis,
    shape: impl FnOnce(resil::PolicyBuilder) -> resil::PolicyBuilder,
) -> Instance {
    let breaker = Arc::new(Breaker::new(
        "provider",
        BreakerConfig::new(2, COOLDOWN).unwrap(),
    ));
    let policy = shape(
        Policy::builder()
            .name("two::instances")
            .breaker(Arc::clone(&breaker))
            .shared_in(&store)
            // Redis decides while it is up, however late a busy machine lets it answer (the
            // default 50 ms would decide locally and say an outage); a test of the timeout
            // sets its own.
            .shared_timeout(Duration::from_secs(1)),
    )
    .build()
    .unwrap();
    Instance {
        store,
        breaker,
        policy,
    }
}

async fn call(
    policy: &Policy,
    calls: &Calls,
    answer: Result<(), ApiError>,
) -> Result<(), ApiError> {
    policy
        .run(|| {
            let (calls, answer) = (calls.clone(), answer.clone());
            async move {
                calls.add();
                answer
            }
        })
        .await
}

/// The gates in Redis whose keys start with `prefix`, sorted: without the sets beside them of
/// the instances that use them (`…:seen`).
fn gate_keys(server: &RedisServer, prefix: &str) -> Vec<String> {
    let mut keys = server.keys(prefix);
    keys.retain(|key| !key.ends_with(":seen"));
    keys.sort();
    keys
}

/// Waits until `done` holds; fails, naming what never happened, after [`SETTLE_WITHIN`].
async fn eventually(what: &str, done: impl Fn() -> bool) {
    assert!(
        settled(done).await,
        "never within {SETTLE_WITHIN:?}: {what}"
    );
}

/// Waits until the opening has expired in Redis: it was written after the local breaker
/// opened, so every instance's local cooldown is over too, and a probe may go.
async fn cooldown_over(server: &RedisServer) {
    tokio::time::sleep(COOLDOWN).await;
    eventually("the opening expires in Redis", || {
        server.keys("resil:{breaker:").is_empty()
    })
    .await;
}

/// The shared-store events of one store, by URL (tests run side by side).
#[derive(Debug, Default)]
struct StoreEvents {
    url: String,
    seen: Mutex<Vec<&'static str>>,
    /// When the first outage was said.
    first_outage: Mutex<Option<Instant>>,
}

impl Listener for StoreEvents {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::SharedUnavailable { store, .. } if *store == self.url => {
                self.seen.lock().unwrap().push("unavailable");
                self.first_outage
                    .lock()
                    .unwrap()
                    .get_or_insert_with(Instant::now);
            }
            Event::SharedRestored { store } if *store == self.url => {
                self.seen.lock().unwrap().push("restored");
            }
            _ => {}
        }
    }
}

fn listen(server: &RedisServer) -> Arc<StoreEvents> {
    let listener = Arc::new(StoreEvents {
        url: server.url(),
        seen: Mutex::default(),
        first_outage: Mutex::default(),
    });
    events::add_global_listener(Arc::clone(&listener) as Arc<dyn Listener>);
    listener
}

fn is_breaker_open(result: &Result<(), ApiError>) -> bool {
    matches!(
        result,
        Err(ApiError::Rejected(Rejected::BreakerOpen { .. }))
    )
}

#[resilient(rate = "5/min", deadline = "1s", shared = true)]
async fn shared_by_the_attribute(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Ok(())
}

/// An inbound limit on a handler: per user, requests and tokens a minute, for every instance.
#[resilient(
    key = user,
    rate = "60/min per key",
    token_rate = "1000/min per key",
    rate_cost = tokens,
    deadline = "2s",
    shared = true
)]
async fn handle(user: &str, tokens: u64) -> Result<u64, ApiError> {
    Ok(tokens)
}

#[tokio::test]
async fn the_attribute_shares_through_the_installed_store() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    Redis::connect(&server.url()).await.unwrap();
    assert!(Redis::installed().is_some_and(|store| store.is_available()));
    let calls = Calls::default();
    let mut passed = 0;
    for _ in 0..8 {
        if shared_by_the_attribute(&calls).await.is_ok() {
            passed += 1;
        }
    }
    assert_eq!(passed, 1, "5 a minute: the next slot is 12 s away");
    assert_eq!(
        gate_keys(&server, "resil:{gate:shared::shared_by"),
        ["resil:{gate:shared::shared_by_the_attribute}:rate"]
    );

    // 400 tokens twice fit user a's 1000 (the second waits a second for its rate slot); the
    // third would wait 12 s for its tokens.
    assert_eq!(handle("a", 400).await, Ok(400));
    assert_eq!(handle("a", 400).await, Ok(400));
    assert!(matches!(
        handle("a", 400).await,
        Err(ApiError::Rejected(Rejected::RateLimited { .. }))
    ));
    assert_eq!(
        handle("b", 400).await,
        Ok(400),
        "user b has a gate of its own"
    );
    assert_eq!(
        gate_keys(&server, "resil:{gate:shared::handle"),
        [
            "resil:{gate:shared::handle:user=a}:rate",
            "resil:{gate:shared::handle:user=a}:tokens",
            "resil:{gate:shared::handle:user=b}:rate",
            "resil:{gate:shared::handle:user=b}:tokens"
        ],
        "a key's rate and token gates share a hash tag: one Redis Cluster node"
    );
}
