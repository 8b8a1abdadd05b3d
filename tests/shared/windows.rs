//! A failure-rate window summed over ten instances through Redis: they open together when the
//! service as a whole crosses 50 % failures, though none alone reaches `breaker_min_calls`,
//! with the round trips counted by Redis itself (a bound per 100 ms, not per call); while
//! Redis is down, each judges its own window.

use resil::{BreakerKind, WindowSize};

use super::*;

const INSTANCES: usize = 10;
/// Calls each instance makes per round; rounds are 50 ms apart.
const PER_ROUND: usize = 5;
const MIN_CALLS: u32 = 40;

async fn windowed(server: &RedisServer, name: &str) -> (Redis, Policy) {
    let store = Redis::open(&server.url()).await.expect("a Redis URL");
    let kind = BreakerKind::FailureRate {
        percent: 50,
        window: WindowSize::Time(Duration::from_secs(30)),
        min_calls: MIN_CALLS,
    };
    let config = BreakerConfig::new(5, Duration::from_secs(30))
        .unwrap()
        .with_kind(kind)
        .unwrap();
    let policy = Policy::builder()
        .name(name)
        .breaker(Arc::new(Breaker::new(name, config)))
        .shared_in(&store)
        .build()
        .unwrap();
    (store, policy)
}

/// The scripts Redis ran so far: `EVALSHA` calls, less those refused at once because Redis
/// had not loaded the script yet (redis-rs then loads it and asks again).
fn scripts_run(server: &RedisServer) -> u64 {
    let info: String = server
        .query(redis::cmd("INFO").arg("commandstats"))
        .expect("INFO commandstats");
    let stat = |line: &str, name: &str| -> u64 {
        let value = line.split(&format!("{name}=")).nth(1).unwrap_or("0");
        value.split(',').next().unwrap_or("0").parse().unwrap_or(0)
    };
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:"))
        .map(|line| stat(line, "calls") - stat(line, "failed_calls"))
        .sum()
}

fn open(policies: &[(Redis, Policy)]) -> usize {
    let open =
        |(_, policy): &&(Redis, Policy)| policy.breaker().unwrap().state() == BreakerState::Open;
    policies.iter().filter(open).count()
}

/// Every instance makes [`PER_ROUND`] calls answering `answer`; then 50 ms pass.
async fn round(policies: &[(Redis, Policy)], calls: &Calls, answer: Result<(), ApiError>) {
    for (_, policy) in policies {
        for _ in 0..PER_ROUND {
            let _ = call(policy, calls, answer.clone()).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn ten_instances_open_on_the_services_failures_with_a_round_trip_per_100_ms_at_most() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut policies = Vec::new();
    for _ in 0..INSTANCES {
        policies.push(windowed(&server, "ten::window").await);
    }
    let _: () = server
        .query(redis::cmd("CONFIG").arg("RESETSTAT"))
        .expect("CONFIG RESETSTAT");
    let start = Instant::now();
    let calls = Calls::default();
    for _ in 0..2 {
        round(&policies, &calls, Ok(())).await;
    }
    let mut rounds = 2;
    while open(&policies) == 0 {
        assert!(
            (rounds + 1) * PER_ROUND < MIN_CALLS as usize,
            "still closed after {rounds} rounds: an instance alone would reach its minimum"
        );
        round(&policies, &calls, Err(ApiError::Busy)).await;
        rounds += 1;
    }
    eventually("the opening reaches every instance", || {
        open(&policies) == INSTANCES
    })
    .await;
    let (scripts, elapsed) = (scripts_run(&server), start.elapsed());
    // A batch per 100 ms per instance, and an opening per instance: each may judge the
    // tripping sums before the first opening's news reaches it, and announce its own.
    let bound = INSTANCES as u64 * (elapsed.as_millis() as u64 / 100 + 2);
    assert!(
        scripts <= bound,
        "{scripts} scripts in {elapsed:?}: more than one per 100 ms per instance"
    );
    assert!(
        scripts * 2 < u64::from(calls.count()),
        "{scripts} scripts for {} calls: not one per call",
        calls.count()
    );
    // Idle: nothing goes to Redis.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = scripts_run(&server);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(scripts_run(&server), idle, "none while idle");
}

#[tokio::test]
async fn while_redis_is_down_each_instance_judges_its_own_window() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let mut policies = Vec::new();
    for _ in 0..INSTANCES {
        policies.push(windowed(&server, "ten::window::down").await);
    }
    server.kill();
    let calls = Calls::default();
    // The first call of each finds Redis gone; the rest are judged here.
    round(&policies, &calls, Err(ApiError::Busy)).await;
    eventually("every store knows Redis is down", || {
        policies.iter().all(|(store, _)| !store.is_available())
    })
    .await;
    for _ in 0..4 {
        round(&policies, &calls, Err(ApiError::Busy)).await;
    }
    assert_eq!(
        open(&policies),
        0,
        "25 failures each: under the minimum of 40"
    );
    let (_, lone) = &policies[0];
    for _ in 0..15 {
        let _ = call(lone, &calls, Err(ApiError::Busy)).await;
    }
    assert_eq!(open(&policies), 1, "its own 40 failures open it, alone");
}
