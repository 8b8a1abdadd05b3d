//! The seam driven through the in-memory store on the paused clock: what two instances see
//! of each other's breakers and gates.

use std::sync::atomic::AtomicU32;

use super::*;
use crate::{BreakerConfig, Policy, PolicyBuilder, Transient};

mod gates;
mod model;
mod slow;

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
fn instance(builder: PolicyBuilder, store: Arc<Memory>) -> Policy {
    let mut builder = builder;
    builder.sharing(|| store as Arc<dyn SharedStore>);
    builder.build().unwrap()
}

fn breaker_policy(hub: &Arc<Hub>) -> Policy {
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
    let hub = Hub::new();
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

fn gated(hub: &Arc<Hub>, fail_closed: bool) -> Policy {
    let builder = Policy::builder()
        .name("memory::gate")
        .rate(1, Duration::from_secs(1), 1);
    let mut policy = builder;
    policy
        .sharing(|| hub.instance() as Arc<dyn SharedStore>)
        .fail_closed = fail_closed;
    policy.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_shared_gate_holds_its_rate_across_instances() {
    let hub = Hub::new();
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
    let hub = Hub::new();
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

/// The hold a 429 asks for reaches the store in the background (Redis's HOLD is sent by a
/// task of its own): the instance that was throttled waits it out all the same.
#[tokio::test(start_paused = true)]
async fn a_throttled_instance_waits_out_its_own_hold_before_the_store_hears_of_it() {
    let hub = Hub::new();
    let a = gated(&hub, false);
    hub.delay_holds();
    let throttled = a
        .run(|| async { Err::<(), _>(Error::Throttled(Duration::from_secs(2))) })
        .await;
    assert_eq!(throttled, Err(Error::Throttled(Duration::from_secs(2))));
    let asked = Instant::now();
    let calls = AtomicU32::new(0);
    call(&a, &calls, Ok(())).await.unwrap();
    assert_eq!(
        asked.elapsed(),
        Duration::from_secs(2),
        "the 429's wait, not the gate's next slot (1 s)"
    );
    hub.deliver_holds();
}

/// A call whose deadline ends inside the instance's own hold is refused at once, saying when
/// the gate opens, instead of waiting out the hold to fail at its deadline.
#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_ends_inside_the_hold_is_refused_at_once() {
    let hub = Hub::new();
    let mut builder = Policy::builder()
        .name("memory::gate")
        .rate(1, Duration::from_secs(1), 1)
        .deadline(Duration::from_millis(500));
    builder.sharing(|| hub.instance() as Arc<dyn SharedStore>);
    let a = builder.build().unwrap();
    hub.delay_holds();
    let throttled = a
        .run(|| async { Err::<(), _>(Error::Throttled(Duration::from_secs(2))) })
        .await;
    assert_eq!(throttled, Err(Error::Throttled(Duration::from_secs(2))));
    let asked = Instant::now();
    let calls = AtomicU32::new(0);
    let refused = call(&a, &calls, Ok(())).await;
    assert_eq!(
        refused,
        Err(Error::Rejected(Rejected::RateLimited {
            retry_in: Duration::from_secs(2)
        }))
    );
    assert_eq!(asked.elapsed(), Duration::ZERO);
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    hub.deliver_holds();
}

/// A gate of 10/s shared by two instances.
fn gated_ten(hub: &Arc<Hub>) -> Policy {
    let builder = Policy::builder()
        .name("memory::ten")
        .rate(10, Duration::from_secs(1), 1);
    instance(builder, hub.instance())
}

/// A call through `policy` that notes when it started, and by which instance.
async fn timed(policy: &Policy, who: &'static str, started: &Mutex<Vec<(&'static str, Instant)>>) {
    policy
        .run(|| async {
            started.lock().unwrap().push((who, Instant::now()));
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
}

/// While the store is down, A's local gate queues calls; when it is back, B calls through the
/// store. A's queued slots are taken again from the store rather than run beside its schedule:
/// in the second after the store is back, the two together start at most the gate's 10.
#[tokio::test(start_paused = true)]
async fn after_the_store_is_back_one_schedule_serves_both_instances() {
    let hub = Hub::new();
    let (a, b) = (gated_ten(&hub), gated_ten(&hub));
    let started = Mutex::new(Vec::new());
    hub.set_available(false);
    let origin = Instant::now();
    let queued = futures::future::join_all((0..8).map(|_| timed(&a, "a", &started)));
    let after = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        hub.set_available(true);
        futures::future::join_all((0..8).map(|_| timed(&b, "b", &started))).await;
    };
    tokio::join!(queued, after);
    let back = origin + Duration::from_millis(150);
    let started = started.into_inner().unwrap();
    let in_the_second = started
        .iter()
        .filter(|(_, at)| *at >= back && *at < back + Duration::from_secs(1))
        .count();
    assert!(
        in_the_second <= 10,
        "{in_the_second} calls started in the second after the store came back: {started:?}"
    );
    assert_eq!(started.len(), 16);
}
