//! Shared state through a real `redis-server` on loopback (started by each test on a free
//! port): two instances are two stores and two policies in one process, each with its own
//! local breaker and gates, as two processes would have.
//!
//! These tests run on the real clock: Redis answers over real sockets, which a paused clock
//! would race past. Their waits are bounded polls, never a sleep that hopes.
#![cfg(feature = "redis")]

mod support;

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
    let breaker = Arc::new(Breaker::new(
        "provider",
        BreakerConfig::new(2, COOLDOWN).unwrap(),
    ));
    let policy = shape(
        Policy::builder()
            .name("two::instances")
            .breaker(Arc::clone(&breaker))
            .shared_in(&store),
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
        server.keys("resil:breaker:").is_empty()
    })
    .await;
}

/// The shared-store events of one store, by URL (tests run side by side).
#[derive(Debug, Default)]
struct StoreEvents {
    url: String,
    seen: Mutex<Vec<&'static str>>,
}

impl Listener for StoreEvents {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::SharedUnavailable { store, .. } if *store == self.url => {
                self.seen.lock().unwrap().push("unavailable");
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

#[tokio::test]
async fn an_opening_and_a_closing_reach_the_other_instance() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        instance(&server, |p| p).await,
        instance(&server, |p| p).await,
    );
    let (calls_a, calls_b) = (Calls::default(), Calls::default());

    for _ in 0..2 {
        assert!(call(&a.policy, &calls_a, Err(ApiError::Busy))
            .await
            .is_err());
    }
    assert_eq!(a.breaker.state(), BreakerState::Open);
    eventually("b opens", || b.breaker.state() == BreakerState::Open).await;
    assert!(is_breaker_open(&call(&b.policy, &calls_b, Ok(())).await));
    assert_eq!(calls_b.count(), 0, "b rejects without calling");

    cooldown_over(&server).await;
    assert_eq!(call(&a.policy, &calls_a, Ok(())).await, Ok(()), "a's probe");
    eventually("b closes", || b.breaker.state() == BreakerState::Closed).await;
    assert_eq!(call(&b.policy, &calls_b, Ok(())).await, Ok(()));
    assert_eq!(
        server.keys("resil:"),
        Vec::<String>::new(),
        "closing leaves nothing"
    );
}

#[tokio::test]
async fn one_probe_across_instances() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        instance(&server, |p| p).await,
        instance(&server, |p| p).await,
    );
    let calls = Calls::default();
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    eventually("b opens", || b.breaker.state() == BreakerState::Open).await;
    cooldown_over(&server).await;

    let probes = Calls::default();
    let slow = |policy: &'static Policy| {
        let probes = probes.clone();
        async move {
            policy
                .run(|| {
                    let probes = probes.clone();
                    async move {
                        probes.add();
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok::<(), ApiError>(())
                    }
                })
                .await
        }
    };
    let (a_policy, b_policy): (&'static Policy, &'static Policy) =
        (Box::leak(Box::new(a.policy)), Box::leak(Box::new(b.policy)));
    let (from_a, from_b) = tokio::join!(slow(a_policy), slow(b_policy));
    assert_eq!(probes.count(), 1, "one probe in all: {from_a:?} {from_b:?}");
    assert_eq!(
        [&from_a, &from_b]
            .iter()
            .filter(|r| is_breaker_open(r))
            .count(),
        1,
        "the other instance rejects: {from_a:?} {from_b:?}"
    );
    eventually("both close", || {
        a.breaker.state() == BreakerState::Closed && b.breaker.state() == BreakerState::Closed
    })
    .await;
}

#[tokio::test]
async fn a_shared_gate_holds_the_combined_rate() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 10 a minute with a 1 s deadline: the 11th call's slot is 6 s away, so it is refused.
    let gated = |p: resil::PolicyBuilder| {
        p.rate(10, Duration::from_secs(60), 10)
            .deadline(Duration::from_secs(1))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    let calls = Calls::default();
    let mut limited = 0;
    for i in 0..30 {
        let instance = if i % 2 == 0 { &a } else { &b };
        match call(&instance.policy, &calls, Ok(())).await {
            Ok(()) => {}
            Err(ApiError::Rejected(Rejected::RateLimited { .. })) => limited += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(
        calls.count(),
        10,
        "10 a minute across both instances, not 10 each"
    );
    assert_eq!(limited, 20);
    assert_eq!(server.keys("resil:rate:"), ["resil:rate:two::instances"]);
}

#[tokio::test]
async fn keyed_state_is_shared_per_key() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let keyed = || async {
        let store = Redis::open(&server.url()).await.unwrap();
        let policy = Policy::builder()
            .name("llm::complete")
            .keyed("model")
            .breaker_per_key("model", 2, COOLDOWN)
            .rate(5, Duration::from_secs(60), 5)
            .rate_per_key()
            .deadline(Duration::from_secs(1))
            .shared_in(&store)
            .build()
            .unwrap();
        (store, policy)
    };
    let ((_a_store, a), (_b_store, b)) = (keyed().await, keyed().await);
    for model in ["gpt", "claude"] {
        assert_eq!(
            b.run_keyed(model, || async { Ok::<(), ApiError>(()) })
                .await,
            Ok(())
        );
    }
    for _ in 0..2 {
        let _ = a
            .run_keyed("gpt", || async { Err::<(), ApiError>(ApiError::Busy) })
            .await;
    }
    let state = |model: &str| b.keys().unwrap().get(model).breaker().unwrap().state();
    eventually("b's gpt opens", || state("gpt") == BreakerState::Open).await;
    assert_eq!(state("claude"), BreakerState::Closed);

    // The gate is per key across instances: a and b share gpt's 5, claude keeps its own.
    let mut passed = 0;
    for i in 0..8 {
        let policy = if i % 2 == 0 { &a } else { &b };
        if policy
            .run_keyed("claude", || async { Ok::<(), ApiError>(()) })
            .await
            .is_ok()
        {
            passed += 1;
        }
    }
    assert_eq!(
        passed, 4,
        "5 a minute for claude, one of them spent by b above"
    );
    let mut keys = server.keys("resil:");
    keys.sort();
    assert!(
        keys.contains(&"resil:breaker:llm::complete:model=gpt:open".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"resil:rate:llm::complete:model=claude".to_owned()),
        "{keys:?}"
    );
}

/// A tenant whose key prints like another's (`("openai, gpt-4o", "mini")` and
/// `("openai", "gpt-4o, mini")`, or a megabyte that starts like another megabyte) opens its
/// own breaker on every instance, never the other's.
#[tokio::test]
async fn keys_that_print_alike_never_share_redis_state() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let keyed = || async {
        let store = Redis::open(&server.url()).await.unwrap();
        let policy = Policy::builder()
            .name("llm::hostile")
            .breaker_per_key("(provider, model)", 1, Duration::from_secs(60))
            .shared_in(&store)
            .build()
            .unwrap();
        (store, policy)
    };
    let ((_a_store, a), (_b_store, b)) = (keyed().await, keyed().await);
    let mega = "m".repeat(1 << 20);
    let mega_too = format!("{mega}n");
    let victims = [("openai", "gpt-4o, mini"), (mega_too.as_str(), "x")];
    let attackers = [("openai, gpt-4o", "mini"), (mega.as_str(), "x")];
    for (provider, model) in victims.iter().chain(&attackers) {
        let key = KeyTuple((*provider, *model));
        assert_eq!(
            b.run_keyed(&key, || async { Ok::<(), ApiError>(()) }).await,
            Ok(())
        );
    }
    for (provider, model) in attackers {
        let _ = a
            .run_keyed(&KeyTuple((provider, model)), || async {
                Err::<(), ApiError>(ApiError::Busy)
            })
            .await;
    }
    let state = |(provider, model): (&str, &str)| {
        let scope = b.keys().unwrap().get(&KeyTuple((provider, model)));
        scope.breaker().unwrap().state()
    };
    eventually("b hears of both attackers' openings", || {
        attackers
            .iter()
            .all(|key| state(*key) == BreakerState::Open)
    })
    .await;
    for victim in victims {
        assert_eq!(state(victim), BreakerState::Closed, "{:.40}", victim.0);
    }
    let opened = server.keys("resil:breaker:llm::hostile");
    assert_eq!(opened.len(), 2, "one opening per attacker: {opened:.200?}");
    assert!(opened.iter().all(|key| key.len() < 400), "{opened:.200?}");
}

#[tokio::test]
async fn redis_killed_mid_run_fails_open_and_resyncs_when_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let events = listen(&server);
    let shape = |p: resil::PolicyBuilder| p.rate(100, Duration::from_secs(1), 100).bulkhead(1);
    let (a, b) = (
        instance(&server, shape).await,
        instance(&server, shape).await,
    );
    let calls = Calls::default();
    for _ in 0..5 {
        assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    }

    server.kill();
    for _ in 0..20 {
        assert_eq!(
            call(&a.policy, &calls, Ok(())).await,
            Ok(()),
            "no error reaches the caller"
        );
    }
    assert_eq!(calls.count(), 25, "every call made, on local decisions");
    assert_eq!(
        a.policy.bulkhead().unwrap().in_flight(),
        0,
        "no permit leaked"
    );
    assert!(!a.store.is_available());
    assert_eq!(
        *events.seen.lock().unwrap(),
        ["unavailable", "unavailable"],
        "said once per outage by each store"
    );
    // The breaker still works locally, and its opening waits for Redis.
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    assert_eq!(a.breaker.state(), BreakerState::Open);
    assert_eq!(b.breaker.state(), BreakerState::Closed);

    server.restart();
    eventually("both stores reconnect", || {
        a.store.is_available() && b.store.is_available()
    })
    .await;
    eventually("b learns a's opening from the re-sync", || {
        b.breaker.state() == BreakerState::Open
    })
    .await;
    assert_eq!(
        *events.seen.lock().unwrap(),
        ["unavailable", "unavailable", "restored", "restored"]
    );
    // No permit leaked: the bulkhead of 1 still admits once a's breaker lets calls through.
    b.breaker.reset();
    assert_eq!(call(&b.policy, &calls, Ok(())).await, Ok(()));
}

#[tokio::test]
async fn a_slow_redis_fails_open_within_shared_timeout() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let shape = |p: resil::PolicyBuilder| {
        p.rate(100, Duration::from_secs(1), 100)
            .shared_timeout(Duration::from_millis(50))
    };
    let a = instance(&server, shape).await;
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));

    let url = server.url();
    let sleeper = tokio::task::spawn_blocking(move || {
        let client = redis::Client::open(url).unwrap();
        let mut connection = client.get_connection().unwrap();
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(5)
            .query::<()>(&mut connection)
    });
    let url = server.url();
    eventually("redis-server sleeps", || {
        let client = redis::Client::open(url.as_str()).unwrap();
        let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_millis(200))
        else {
            return true;
        };
        let _ = connection.set_read_timeout(Some(Duration::from_millis(50)));
        redis::cmd("PING").query::<String>(&mut connection).is_err()
    })
    .await;
    assert!(a.store.is_available(), "nothing has waited on Redis yet");
    let started = Instant::now();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    // A lower bound holds however loaded the machine is; the upper one is Redis's sleep.
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "waited shared_timeout for Redis: {:?}",
        started.elapsed()
    );
    assert!(
        !sleeper.is_finished(),
        "decided locally after shared_timeout, while Redis still sleeps"
    );
    assert!(!a.store.is_available());
    sleeper.await.unwrap().unwrap();
    eventually("the store is back", || a.store.is_available()).await;
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
}

#[tokio::test]
async fn failing_closed_refuses_while_redis_is_down() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let shape = |p: resil::PolicyBuilder| {
        p.rate(100, Duration::from_secs(1), 100)
            .shared_fail_closed(true)
    };
    let a = instance(&server, shape).await;
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    server.kill();
    let mut refused = 0;
    for _ in 0..5 {
        match call(&a.policy, &calls, Ok(())).await {
            Err(ApiError::Rejected(Rejected::SharedUnavailable)) => refused += 1,
            other => assert_eq!(
                other,
                Ok(()),
                "only the call that finds Redis gone may pass"
            ),
        }
    }
    assert!(refused >= 4, "{refused}");
    assert!(calls.count() <= 2);
}

#[tokio::test]
async fn keys_expire_once_cooldowns_and_windows_pass() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let shape = |p: resil::PolicyBuilder| p.rate(20, Duration::from_secs(1), 2);
    let a = instance(&server, shape).await;
    let calls = Calls::default();
    for _ in 0..4 {
        let _ = call(&a.policy, &calls, Ok(())).await;
    }
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    eventually("the opening is in Redis", || {
        server.keys("resil:breaker:").len() == 1
    })
    .await;
    assert_eq!(server.keys("resil:rate:").len(), 1);
    eventually("nothing is left in Redis", || {
        server.keys("resil:").is_empty()
    })
    .await;
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
    deadline = "1s",
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
        server.keys("resil:rate:shared::shared_by"),
        ["resil:rate:shared::shared_by_the_attribute"]
    );

    // 400 tokens twice fit user a's 1000; the third would wait 12 s for its tokens.
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
    let mut keys = server.keys("resil:tokens:shared::handle");
    keys.sort();
    assert_eq!(
        keys,
        [
            "resil:tokens:shared::handle:user=a",
            "resil:tokens:shared::handle:user=b"
        ]
    );
}

#[tokio::test]
async fn a_bad_url_is_refused_and_an_unreachable_server_is_not() {
    for url in ["http://127.0.0.1/", "not a url", "", "rediss://127.0.0.1/"] {
        let error = Redis::open(url).await.unwrap_err().to_string();
        assert!(error.contains("redis://host:port/"), "{url}: {error}");
    }
    // Nothing listens on port 1: the service starts and decides locally.
    let store = Redis::open("redis://:hunter2@127.0.0.1:1/").await.unwrap();
    assert!(!store.is_available());
    let shown = format!("{store:?}");
    assert!(
        shown.contains("***@127.0.0.1:1") && !shown.contains("hunter2"),
        "{shown}"
    );
    let policy = Policy::builder()
        .rate(2, Duration::from_secs(60), 2)
        .deadline(Duration::from_secs(1))
        .shared_in(&store)
        .build()
        .unwrap();
    let calls = Calls::default();
    let results = [
        call(&policy, &calls, Ok(())).await,
        call(&policy, &calls, Ok(())).await,
        call(&policy, &calls, Ok(())).await,
    ];
    assert_eq!(calls.count(), 2, "the local gate decides: {results:?}");
}

#[test]
fn a_runtime_without_io_is_refused_with_the_fix() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let error = runtime
        .block_on(Redis::open("redis://127.0.0.1:1/"))
        .unwrap_err();
    assert!(error.to_string().contains("enable_all()"), "{error}");
}

/// One call through `instance` that the provider throttles, asking to wait `wait`.
async fn throttle(instance: &Instance, wait: Duration) {
    let throttled = instance
        .policy
        .run(|| async { Err::<(), _>(ApiError::Throttled(wait)) })
        .await;
    assert_eq!(throttled, Err(ApiError::Throttled(wait)));
}

#[tokio::test]
async fn a_throttle_seen_by_one_instance_holds_the_others() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let gated = |p: resil::PolicyBuilder| {
        p.rate(100, Duration::from_secs(1), 100)
            .deadline(Duration::from_millis(500))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    throttle(&a, Duration::from_secs(5)).await;
    // The hold is written in the background: b's gate says "no slot for 5 s" once it lands.
    let calls = Calls::default();
    let started = Instant::now();
    loop {
        match call(&b.policy, &calls, Ok(())).await {
            Err(ApiError::Rejected(Rejected::RateLimited { retry_in })) => {
                assert!(retry_in > Duration::from_secs(3), "{retry_in:?}");
                break;
            }
            other => assert_eq!(other, Ok(())),
        }
        assert!(started.elapsed() < Duration::from_secs(3), "b never held");
    }
}

/// Found by the gate's model: a hold shorter than the interval lowered the shared schedule
/// below the slot just used, so another instance called 1 ms after it (and the gate's key
/// expired with the hold).
#[tokio::test]
async fn a_short_throttle_keeps_counting_the_call_that_started() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let gated = |p: resil::PolicyBuilder| {
        p.rate(1, Duration::from_secs(10), 1)
            .deadline(Duration::from_secs(5))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    throttle(&a, Duration::from_millis(1)).await;
    // The hold is written in the background; it counts itself in `epoch` (or, before the
    // fix, let the key expire at once).
    let gate = "resil:rate:two::instances";
    eventually("the hold lands in Redis", || {
        let epoch = redis::cmd("HGET").arg(gate).arg("epoch").clone();
        let exists = redis::cmd("EXISTS").arg(gate).clone();
        server.query::<Option<u64>>(&epoch).flatten().is_some()
            || server.query::<bool>(&exists) == Some(false)
    })
    .await;
    let calls = Calls::default();
    let refused = call(&b.policy, &calls, Ok(())).await;
    assert!(
        matches!(refused, Err(ApiError::Rejected(Rejected::RateLimited { retry_in })) if retry_in > Duration::from_secs(5)),
        "a's call took the period's slot: {refused:?}"
    );
    assert_eq!(calls.count(), 0);
}

#[tokio::test]
async fn a_redis_that_refuses_scripts_is_said_once_and_calls_go_on() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let events = listen(&server);
    let shape = |p: resil::PolicyBuilder| p.rate(100, Duration::from_secs(1), 100);
    let a = instance(&server, shape).await;
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));

    // Out of memory: every write is refused, the connection stays up.
    let config = |value: &str| {
        server
            .query::<()>(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(value))
            .expect("CONFIG SET");
    };
    config("1");
    for _ in 0..10 {
        assert_eq!(
            call(&a.policy, &calls, Ok(())).await,
            Ok(()),
            "decided locally"
        );
    }
    assert!(
        a.store.is_available(),
        "connected all along: no reconnection"
    );
    config("0");
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    assert_eq!(calls.count(), 12);
    assert_eq!(*events.seen.lock().unwrap(), ["unavailable", "restored"]);
}

#[tokio::test]
async fn a_slot_given_up_goes_back_to_every_instance() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 2 a second, no burst: slots 500 ms apart across both instances.
    let gated = |p: resil::PolicyBuilder| p.rate(2, Duration::from_secs(1), 1);
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    let tat = || {
        server.query::<Option<String>>(
            redis::cmd("HGET")
                .arg("resil:rate:two::instances")
                .arg("tat"),
        )
    };
    let after_first = tat();
    // A's second call waits for the slot at +500 ms, and its caller gives up before.
    let given_up =
        tokio::time::timeout(Duration::from_millis(100), call(&a.policy, &calls, Ok(()))).await;
    assert!(given_up.is_err(), "still waiting for its slot");
    // The refund is written in the background: the schedule goes back to where it was.
    eventually("the slot is back in Redis", || tat() == after_first).await;
    // B may have that slot back: with a 700 ms deadline it passes (the next one is at +1 s).
    let b_policy = Policy::builder()
        .name("two::instances")
        .rate(2, Duration::from_secs(1), 1)
        .deadline(Duration::from_millis(700))
        .shared_in(&b.store)
        .build()
        .unwrap();
    assert_eq!(call(&b_policy, &calls, Ok(())).await, Ok(()));
    assert_eq!(calls.count(), 2);
}

#[tokio::test]
async fn a_throttle_revokes_the_slots_other_instances_already_reserved() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 2 a second, no burst: slots 500 ms apart across both instances.
    let gated = |p: resil::PolicyBuilder| p.rate(2, Duration::from_secs(1), 1);
    let (a, b) = (
        Arc::new(instance(&server, gated).await),
        Arc::new(instance(&server, gated).await),
    );
    // A takes the first slot and holds its answer until B has promised the next three.
    let answer = Arc::new(tokio::sync::Notify::new());
    let throttled = tokio::spawn({
        let (a, answer) = (Arc::clone(&a), Arc::clone(&answer));
        async move {
            a.policy
                .run(|| async {
                    answer.notified().await;
                    Err::<(), _>(ApiError::Throttled(Duration::from_secs(3)))
                })
                .await
        }
    });
    let tat = || {
        let key = server.keys("resil:rate:").pop()?;
        let tat: u64 = server.query(redis::cmd("HGET").arg(&key).arg("tat"))?;
        let (seconds, micros): (u64, u64) = server.query(&redis::cmd("TIME"))?;
        Some(Duration::from_micros(
            tat.saturating_sub(seconds * 1_000_000 + micros),
        ))
    };
    eventually("A's slot", || tat().is_some()).await;
    let started = Instant::now();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (b, calls) = (Arc::clone(&b), Arc::clone(&calls));
            tokio::spawn(async move {
                b.policy
                    .run(|| async {
                        calls.lock().unwrap().push(started.elapsed());
                        Ok::<(), ApiError>(())
                    })
                    .await
            })
        })
        .collect();
    // Four slots promised: Redis's schedule runs 1.5 s or more ahead.
    eventually("B's three slots", || {
        tat().is_some_and(|ahead| ahead > Duration::from_millis(1400))
    })
    .await;
    answer.notify_one();
    assert_eq!(
        throttled.await.unwrap(),
        Err(ApiError::Throttled(Duration::from_secs(3)))
    );
    let held_at = started.elapsed();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|at| *at >= held_at + Duration::from_millis(2900)),
        "B called during A's hold (from {held_at:?}): {calls:?}"
    );
}

/// The openings made during an outage reach a restarted Redis (which has lost its scripts) in
/// one pipeline, however many there are.
#[tokio::test]
async fn a_thousand_openings_made_during_an_outage_reach_redis_when_it_is_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = Redis::open(&server.url()).await.unwrap();
    let policy = Policy::builder()
        .name("llm::outage")
        .keyed("model")
        .breaker_per_key("model", 1, Duration::from_secs(60))
        .shared_in(&store)
        .build()
        .unwrap();
    server.kill();
    for model in 0..1000 {
        let failed = policy
            .run_keyed(&format!("m{model}"), || async {
                Err::<(), ApiError>(ApiError::Busy)
            })
            .await;
        assert_eq!(failed, Err(ApiError::Busy));
    }
    server.restart();
    eventually("every opening in Redis", || {
        server.keys("resil:breaker:llm::outage:").len() >= 1000
    })
    .await;
    let keys = server.keys("resil:breaker:llm::outage:");
    assert!(
        keys.contains(&"resil:breaker:llm::outage:model=m999:open".to_owned()),
        "{:?}",
        &keys[..5]
    );
}

/// Fail-open continues from where every instance together stood: the local gates mirror the
/// slots Redis granted, so a kill does not open a fresh local burst on top of the slots
/// already promised (before: about 2.2 × the local limits in the second after the kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_never_exceeds_the_local_limits() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let gated = |p: resil::PolicyBuilder| {
        p.rate(10, Duration::from_secs(1), 1)
            .deadline(Duration::from_secs(10))
    };
    let instances = [
        instance(&server, gated).await,
        instance(&server, gated).await,
    ];
    let started = Arc::new(Mutex::new(Vec::<(usize, Instant)>::new()));
    let origin = Instant::now();
    let end = origin + Duration::from_secs(3);
    let loopers = instances.iter().enumerate().flat_map(|(which, instance)| {
        let started = &started;
        (0..10).map(move |_| async move {
            while Instant::now() < end {
                let _ = instance
                    .policy
                    .run(|| async {
                        started.lock().unwrap().push((which, Instant::now()));
                        Ok::<(), ApiError>(())
                    })
                    .await;
            }
        })
    });
    let killer = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.kill();
        Instant::now()
    };
    let (killed, _) = tokio::join!(killer, futures::future::join_all(loopers));
    let started = started.lock().unwrap();
    for which in 0..2 {
        let after: Vec<_> = started
            .iter()
            .filter(|(by, at)| *by == which && *at >= killed)
            .map(|(_, at)| *at - killed)
            .collect();
        let first_second = after
            .iter()
            .filter(|at| **at < Duration::from_secs(1))
            .count();
        assert!(
            first_second <= 10,
            "instance {which} started {first_second} calls in the second after the kill, over its local 10/s: {after:?}"
        );
        assert!(!after.is_empty(), "instance {which} went on after the kill");
    }
}

/// The gate's model, through the real Redis: two instances run seeded random calls, calls
/// given up while they wait, and throttles. While Redis answers, the two together never start
/// more than `count + burst - 1` calls in a period, and nothing starts while a throttle holds;
/// once it is killed, each keeps its own limit. (Real time: a window is checked 50 ms short
/// of the period, for the wake-ups a loaded machine delays.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_keep_the_gate_model_through_redis_and_without_it() {
    const COUNT: usize = 5;
    const BURST: usize = 2;
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0x2545_f491_4f6c_dd1d] {
        let Some(mut server) = RedisServer::start() else {
            return;
        };
        let gated = |p: resil::PolicyBuilder| {
            p.rate(COUNT as u64, Duration::from_secs(1), BURST as u64)
                .deadline(Duration::from_secs(2))
        };
        let instances = [
            instance(&server, gated).await,
            instance(&server, gated).await,
        ];
        let origin = Instant::now();
        let killed_at = Duration::from_millis(2_500);
        let log = Log::default();
        let mut random = seed;
        let mut next = move |below: u64| {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random % below
        };
        let mut operations = Vec::new();
        for (which, instance) in instances.iter().enumerate() {
            for _ in 0..40 {
                let at = Duration::from_millis(next(4_000));
                let kind = match next(30) {
                    0..=21 => Op::Call,
                    22..=28 => Op::GiveUp(Duration::from_millis(next(800))),
                    // No throttle once Redis is gone: its hold would be this instance's alone.
                    _ if at < killed_at => Op::Throttle(Duration::from_millis(next(400))),
                    _ => Op::Call,
                };
                operations.push(run_op(instance, which, origin, at, kind, &log));
            }
        }
        let killer = async {
            tokio::time::sleep_until((origin + killed_at).into()).await;
            server.kill();
        };
        tokio::join!(killer, futures::future::join_all(operations));

        let started = log.started.lock().unwrap().clone();
        let holds = log.holds.lock().unwrap().clone();
        let window = Duration::from_millis(950);
        let most_in_a_window = |starts: &[Duration]| {
            let mut starts = starts.to_vec();
            starts.sort();
            (0..starts.len())
                .map(|i| {
                    starts[i..]
                        .iter()
                        .take_while(|at| **at - starts[i] < window)
                        .count()
                })
                .max()
                .unwrap_or(0)
        };
        let while_up: Vec<_> = started
            .iter()
            .filter(|(_, at)| *at + window < killed_at)
            .map(|(_, at)| *at)
            .collect();
        assert!(
            most_in_a_window(&while_up) < COUNT + BURST,
            "seed {seed:#x}: together over the limit while Redis answers: {started:?}"
        );
        for (made, until) in &holds {
            let during = started.iter().find(|(_, at)| {
                *at > *made + Duration::from_millis(100) && *at + Duration::from_millis(20) < *until
            });
            assert!(
                during.is_none(),
                "seed {seed:#x}: {during:?} started during the hold from {made:?} to {until:?}"
            );
        }
        for which in 0..2 {
            let after: Vec<_> = started
                .iter()
                .filter(|(by, at)| *by == which && *at >= killed_at)
                .map(|(_, at)| *at)
                .collect();
            assert!(
                most_in_a_window(&after) < COUNT + BURST,
                "seed {seed:#x}: instance {which} over its own limit without Redis: {after:?}"
            );
        }
        assert!(
            while_up.len() >= 3,
            "seed {seed:#x}: the gate let calls through: {started:?}"
        );
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Call,
    /// Waits at most this long for its slot, then gives up (its slot goes back).
    GiveUp(Duration),
    /// The provider answers 429, asking to wait this long.
    Throttle(Duration),
}

/// What the model test saw: calls started `(instance, since the origin)`, holds `(from, to)`.
#[derive(Debug, Default)]
struct Log {
    started: Mutex<Vec<(usize, Duration)>>,
    holds: Mutex<Vec<(Duration, Duration)>>,
}

async fn run_op(
    instance: &Instance,
    which: usize,
    origin: Instant,
    at: Duration,
    op: Op,
    log: &Log,
) {
    tokio::time::sleep_until((origin + at).into()).await;
    let call = instance.policy.run(|| async {
        log.started.lock().unwrap().push((which, origin.elapsed()));
        match op {
            Op::Throttle(wait) => Err(ApiError::Throttled(wait)),
            _ => Ok(()),
        }
    });
    match op {
        Op::GiveUp(patience) => {
            let _ = tokio::time::timeout(patience, call).await;
        }
        Op::Throttle(wait) => {
            if call.await == Err(ApiError::Throttled(wait)) {
                let made = origin.elapsed();
                log.holds.lock().unwrap().push((made, made + wait));
            }
        }
        Op::Call => {
            let _ = call.await;
        }
    }
}
