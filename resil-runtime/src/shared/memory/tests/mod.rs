//! The seam driven through the in-memory store on the paused clock: what two instances see
//! of each other's breakers and gates.

use std::sync::atomic::AtomicU32;

use super::*;
use crate::breaker::{Breaker, BreakerState};
use crate::{BreakerConfig, Policy, PolicyBuilder, Rejected, Transient};

mod gates;
mod model;
mod partition;
mod queues;
mod shares;
mod slow;
mod windows;

const COOLDOWN: Duration = Duration::from_secs(30);

#[derive(Debug, PartialEq)]
enum Error {
    Down,
    /// A 429 asking to wait.
    Throttled(Duration),
    Rejected(Rejected),
}

impl Transient for Error {
    fn is_transient(&self) -> bool {
        match self {
            Error::Down | Error::Throttled(_) => true,
            Error::Rejected(rejected) => rejected.is_transient(),
        }
    }

    fn is_throttle(&self) -> bool {
        matches!(self, Error::Throttled(_))
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Throttled(wait) => Some(*wait),
            _ => None,
        }
    }
}

impl From<Rejected> for Error {
    fn from(rejected: Rejected) -> Self {
        Error::Rejected(rejected)
    }
}

/// The policy of one instance, its state shared through `store`.
fn instance(builder: PolicyBuilder, store: InMemory) -> Policy {
    builder.shared_in(store).build().unwrap()
}

fn breaker_policy(hub: &InMemory) -> Policy {
    let breaker = Breaker::new("memory", BreakerConfig::new(2, COOLDOWN).unwrap());
    instance(Policy::builder().breaker(Arc::new(breaker)), hub.instance())
}

async fn call(policy: &Policy, calls: &AtomicU32, answer: Result<(), Error>) -> Result<(), Error> {
    policy
        .run(|| {
            let answer = match &answer {
                Ok(()) => Ok(()),
                Err(_) => Err(Error::Down),
            };
            async move {
                calls.fetch_add(1, Ordering::Relaxed);
                answer
            }
        })
        .await
}

fn is_open(answer: &Result<(), Error>) -> bool {
    matches!(answer, Err(Error::Rejected(Rejected::BreakerOpen { .. })))
}

#[tokio::test(start_paused = true)]
async fn an_opening_reaches_the_other_instance_and_one_probe_goes_out_for_both() {
    let hub = InMemory::new();
    let (a, b) = (breaker_policy(&hub), breaker_policy(&hub));
    let calls = AtomicU32::new(0);
    for _ in 0..2 {
        assert_eq!(call(&a, &calls, Err(Error::Down)).await, Err(Error::Down));
    }
    assert_eq!(b.breaker().unwrap().state(), BreakerState::Open);
    assert!(
        is_open(&call(&b, &calls, Ok(())).await),
        "refused without a call"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);

    tokio::time::advance(COOLDOWN).await;
    let probe = a.run(|| async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, Error>(())
    });
    let (probed, refused) = tokio::join!(probe, async {
        tokio::task::yield_now().await;
        call(&b, &calls, Ok(())).await
    });
    assert_eq!(probed, Ok(()));
    assert!(is_open(&refused), "A probes for both: {refused:?}");
    assert_eq!(
        b.breaker().unwrap().state(),
        BreakerState::Closed,
        "A's closing reached B"
    );
    assert_eq!(call(&b, &calls, Ok(())).await, Ok(()));
}

fn gated(hub: &InMemory, fail_closed: bool) -> Policy {
    Policy::builder()
        .name("memory::gate")
        .rate(1, Duration::from_secs(1), 1)
        .shared_in(hub.instance())
        .shared_fail_closed(fail_closed)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_shared_gate_holds_its_rate_across_instances() {
    let hub = InMemory::new();
    let (a, b) = (gated(&hub, false), gated(&hub, false));
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    call(&a, &calls, Ok(())).await.unwrap();
    call(&b, &calls, Ok(())).await.unwrap();
    call(&a, &calls, Ok(())).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "1/s across both, not each"
    );
}

#[tokio::test(start_paused = true)]
async fn while_the_store_is_down_instances_decide_alone_and_catch_up_when_it_is_back() {
    let hub = InMemory::new();
    let calls = AtomicU32::new(0);
    hub.set_available(false);
    let (open, closed) = (gated(&hub, false), gated(&hub, true));
    assert_eq!(call(&open, &calls, Ok(())).await, Ok(()), "fails open");
    assert_eq!(
        call(&closed, &calls, Ok(())).await,
        Err(Error::Rejected(Rejected::SharedUnavailable)),
        "fails closed"
    );

    let (a, b) = (breaker_policy(&hub), breaker_policy(&hub));
    for _ in 0..2 {
        let _ = call(&a, &calls, Err(Error::Down)).await;
    }
    assert_eq!(
        b.breaker().unwrap().state(),
        BreakerState::Closed,
        "not heard"
    );
    hub.set_available(true);
    assert_eq!(
        b.breaker().unwrap().state(),
        BreakerState::Open,
        "told at the re-sync"
    );
}

#[tokio::test(start_paused = true)]
async fn the_in_memory_store_conforms() {
    let state = InMemory::new();
    crate::shared::conformance::run(|| std::future::ready(state.instance())).await;
}
