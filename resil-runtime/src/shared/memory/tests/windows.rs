//! Failure-rate windows summed over instances, on the paused clock: ten instances open
//! together when the service as a whole crosses the rate, though none alone reaches the
//! minimum; each judges its own calls while the store is down; old failures age out of the
//! store's window too. The batches are counted: a bound per second, not per call.

use crate::{BreakerKind, WindowSize};

use super::*;

const INSTANCES: usize = 10;
const WINDOW: Duration = Duration::from_secs(30);
const MIN_CALLS: u32 = 20;

fn windowed(hub: &InMemory) -> Policy {
    let kind = BreakerKind::FailureRate {
        percent: 50,
        window: WindowSize::Time(WINDOW),
        min_calls: MIN_CALLS,
    };
    let config = BreakerConfig::new(5, COOLDOWN)
        .unwrap()
        .with_kind(kind)
        .unwrap();
    let breaker = Breaker::new("memory::window", config);
    instance(Policy::builder().breaker(Arc::new(breaker)), hub.instance())
}

fn open_count(policies: &[Policy]) -> usize {
    let open = |policy: &&Policy| policy.breaker().unwrap().state() == BreakerState::Open;
    policies.iter().filter(open).count()
}

/// One round: every instance makes one call, then 50 ms pass (the batches' tasks run).
async fn round(policies: &[Policy], calls: &AtomicU32, answer: Result<(), Error>) {
    for policy in policies {
        let _ = call(policy, calls, answer.clone()).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Down => Error::Down,
            Error::Throttled(wait) => Error::Throttled(*wait),
            Error::Rejected(rejected) => Error::Rejected(rejected.clone()),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn ten_instances_open_together_on_the_services_failures() {
    let hub = InMemory::new();
    let policies: Vec<_> = (0..INSTANCES).map(|_| windowed(&hub)).collect();
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    for _ in 0..3 {
        round(&policies, &calls, Ok(())).await;
    }
    let mut rounds = 0;
    while open_count(&policies) == 0 {
        round(&policies, &calls, Err(Error::Down)).await;
        rounds += 1;
        assert!(rounds < 8, "still closed after {rounds} rounds of failures");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        open_count(&policies),
        INSTANCES,
        "the opening reached every instance"
    );
    // Each instance made at most 3 + 7 calls: far from its 20.
    assert!(3 + rounds < MIN_CALLS as usize);
    // 30 calls succeeded, so the service crossed 50 % at its 30th failure: the fourth round.
    assert!(
        rounds >= 3,
        "opened at {rounds} rounds of failures: too early"
    );
    let batches = hub.hub.batches();
    let elapsed = start.elapsed();
    let bound = INSTANCES as u64 * (elapsed.as_millis() as u64 / 100 + 1);
    assert!(
        batches <= bound,
        "{batches} batches in {elapsed:?}: at most one per 100 ms per instance"
    );
    assert!(
        batches < u64::from(calls.load(Ordering::Relaxed)),
        "{batches} batches for {} calls: not one per call",
        calls.load(Ordering::Relaxed)
    );
    // Idle: no batch goes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(hub.hub.batches(), batches, "none while idle");
}

#[tokio::test(start_paused = true)]
async fn while_the_store_is_down_each_judges_its_own_window() {
    let hub = InMemory::new();
    let policies: Vec<_> = (0..INSTANCES).map(|_| windowed(&hub)).collect();
    let calls = AtomicU32::new(0);
    hub.set_available(false);
    for _ in 0..10 {
        round(&policies, &calls, Err(Error::Down)).await;
    }
    assert_eq!(
        open_count(&policies),
        0,
        "10 failures each: none reaches its minimum alone"
    );
    let lone = &policies[0];
    for _ in 0..10 {
        let _ = call(lone, &calls, Err(Error::Down)).await;
    }
    assert_eq!(
        open_count(&policies),
        1,
        "its own 20 failures open it alone"
    );
    assert_eq!(hub.hub.batches(), 0, "nothing sent while the store is down");
}

#[tokio::test(start_paused = true)]
async fn old_failures_age_out_of_the_shared_window() {
    let hub = InMemory::new();
    let policies: Vec<_> = (0..INSTANCES).map(|_| windowed(&hub)).collect();
    let calls = AtomicU32::new(0);
    // 15 failures across the service: under its minimum of 20.
    for policy in &policies[..5] {
        for _ in 0..3 {
            let _ = call(policy, &calls, Err(Error::Down)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(open_count(&policies), 0);
    tokio::time::sleep(WINDOW).await;
    // 15 more, a window later: 30 if the first had stayed, 15 once they aged out.
    for policy in &policies[5..] {
        for _ in 0..3 {
            let _ = call(policy, &calls, Err(Error::Down)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(open_count(&policies), 0, "the first 15 have aged out");
    // A quiet night: the evening's failures do not count in the morning.
    tokio::time::sleep(Duration::from_secs(8 * 60 * 60)).await;
    for policy in &policies {
        let _ = call(policy, &calls, Err(Error::Down)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        open_count(&policies),
        0,
        "10 failures in the morning: alone"
    );
    for policy in &policies {
        let _ = call(policy, &calls, Err(Error::Down)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(open_count(&policies), INSTANCES, "20 in the window: open");
}

#[test]
fn a_shared_count_window_is_refused_with_the_fix() {
    let hub = InMemory::new();
    let kind = BreakerKind::FailureRate {
        percent: 50,
        window: WindowSize::Calls(20),
        min_calls: 10,
    };
    let mut builder = Policy::builder()
        .breaker_named("memory::counted", 5, COOLDOWN)
        .breaker_kind(kind);
    builder.sharing(|| Arc::new(hub.instance()) as Arc<dyn SharedStore>);
    let refused = builder.build().unwrap_err();
    assert!(
        refused.to_string().contains("breaker_window = \"30s\""),
        "{refused}"
    );
}
