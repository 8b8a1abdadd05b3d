//! A partition: one instance cut off from the store while the others go on sharing.

use super::*;

fn breaker_on(store: &InMemory) -> Policy {
    let breaker = Breaker::new("memory", BreakerConfig::new(2, COOLDOWN).unwrap());
    instance(Policy::builder().breaker(Arc::new(breaker)), store.clone())
}

#[tokio::test(start_paused = true)]
async fn an_instance_cut_off_hears_nothing_and_learns_what_it_missed_when_it_returns() {
    let hub = InMemory::new();
    let (here, there) = (hub.instance(), hub.instance());
    let (a, b) = (breaker_on(&here), breaker_on(&there));
    let calls = AtomicU32::new(0);
    there.set_reachable(false);
    assert!(here.is_available() && !there.is_available());
    for _ in 0..2 {
        let _ = call(&a, &calls, Err(Error::Down)).await;
    }
    assert_eq!(a.breaker().unwrap().state(), BreakerState::Open);
    assert_eq!(
        b.breaker().unwrap().state(),
        BreakerState::Closed,
        "not heard across the partition"
    );
    there.set_reachable(true);
    assert_eq!(
        b.breaker().unwrap().state(),
        BreakerState::Open,
        "the opening in force, told at its return"
    );
}

#[tokio::test(start_paused = true)]
async fn what_an_instance_cut_off_did_reaches_the_others_when_it_returns() {
    let hub = InMemory::new();
    let (here, there) = (hub.instance(), hub.instance());
    let (a, b) = (breaker_on(&here), breaker_on(&there));
    let calls = AtomicU32::new(0);
    there.set_reachable(false);
    for _ in 0..2 {
        let _ = call(&b, &calls, Err(Error::Down)).await;
    }
    assert_eq!(
        a.breaker().unwrap().state(),
        BreakerState::Closed,
        "not heard"
    );
    there.set_reachable(true);
    assert_eq!(
        a.breaker().unwrap().state(),
        BreakerState::Open,
        "told at its return"
    );
}

#[tokio::test(start_paused = true)]
async fn a_gate_cut_off_decides_alone_while_the_others_keep_sharing() {
    let hub = InMemory::new();
    let (here, there) = (hub.instance(), hub.instance());
    let gated_on = |store: &InMemory| {
        Policy::builder()
            .name("memory::partition")
            .rate(1, Duration::from_secs(1), 1)
            .shared_in(store.clone())
            .shared_fail_closed(true)
            .build()
            .unwrap()
    };
    let (a, b) = (gated_on(&here), gated_on(&there));
    let calls = AtomicU32::new(0);
    there.set_reachable(false);
    assert_eq!(
        call(&b, &calls, Ok(())).await,
        Err(Error::Rejected(Rejected::SharedUnavailable)),
        "cut off, it fails closed"
    );
    assert_eq!(call(&a, &calls, Ok(())).await, Ok(()), "the other goes on");
    there.set_reachable(true);
    let start = Instant::now();
    assert_eq!(call(&b, &calls, Ok(())).await, Ok(()));
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "back, it shares the store's schedule: the slot after the other's"
    );
}
