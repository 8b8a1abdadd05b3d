//! A store that answers too late: the local state decides after exactly `shared_timeout`.

use super::*;

/// The fail-open promise, "within `shared_timeout`" (50 ms unless set), as an upper bound: a
/// store whose answer never comes (a Redis asleep) leaves the decision to the local state after
/// exactly that, not later. resil bounds the wait itself, whatever the store.
#[tokio::test(start_paused = true)]
async fn a_slow_store_leaves_a_gated_call_to_the_local_gate_after_exactly_shared_timeout() {
    let hub = InMemory::new();
    let (open, closed) = (gated(&hub, false), gated(&hub, true));
    hub.set_slow(true);
    let calls = AtomicU32::new(0);
    let asked = Instant::now();
    assert_eq!(call(&open, &calls, Ok(())).await, Ok(()), "fails open");
    assert_eq!(asked.elapsed(), Duration::from_millis(50));
    assert_eq!(calls.load(Ordering::Relaxed), 1);

    let asked = Instant::now();
    assert_eq!(
        call(&closed, &calls, Ok(())).await,
        Err(Error::Rejected(Rejected::SharedUnavailable)),
        "fails closed"
    );
    assert_eq!(asked.elapsed(), Duration::from_millis(50));

    let impatient = Policy::builder()
        .name("memory::gate")
        .rate(1, Duration::from_secs(1), 1)
        .shared_in(hub.instance())
        .shared_timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    let asked = Instant::now();
    assert_eq!(call(&impatient, &calls, Ok(())).await, Ok(()));
    assert_eq!(asked.elapsed(), Duration::from_millis(20), "as set");
}

/// A shared breaker whose cooldown is over asks the store for the probe's lock: a slow store
/// lets this instance probe (or, failing closed, refuse) after exactly `shared_timeout`.
#[tokio::test(start_paused = true)]
async fn a_slow_store_leaves_the_probe_to_the_local_breaker_after_exactly_shared_timeout() {
    let hub = InMemory::new();
    let shared_breaker = |fail_closed: bool| {
        let breaker = Breaker::new("memory", BreakerConfig::new(2, COOLDOWN).unwrap());
        Policy::builder()
            .breaker(Arc::new(breaker))
            .shared_in(hub.instance())
            .shared_fail_closed(fail_closed)
            .build()
            .unwrap()
    };
    let (open, closed) = (shared_breaker(false), shared_breaker(true));
    let calls = AtomicU32::new(0);
    for _ in 0..2 {
        let _ = call(&open, &calls, Err(Error::Down)).await;
    }
    assert_eq!(closed.breaker().unwrap().state(), BreakerState::Open);
    tokio::time::advance(COOLDOWN).await;
    hub.set_slow(true);

    let asked = Instant::now();
    assert_eq!(
        call(&closed, &calls, Ok(())).await,
        Err(Error::Rejected(Rejected::SharedUnavailable)),
        "fails closed"
    );
    assert_eq!(asked.elapsed(), Duration::from_millis(50));
    let asked = Instant::now();
    assert_eq!(call(&open, &calls, Ok(())).await, Ok(()), "probes");
    assert_eq!(asked.elapsed(), Duration::from_millis(50));
    assert_eq!(open.breaker().unwrap().state(), BreakerState::Closed);
}

/// A 1/s shared gate grants a slot alone while its store is down; back, the store is slow and
/// the next caller gives up on its reservation before `shared_timeout` (its future dropped):
/// that ask had claimed the charge of the slot granted alone and lost it, so the store's
/// schedule never counted that slot, and the call after it went 20 ms after the first. A
/// reservation dropped before its answer gives back what it claimed.
#[tokio::test(start_paused = true)]
async fn a_reservation_dropped_before_its_answer_still_charges_the_slots_granted_alone() {
    let hub = InMemory::new();
    let policy = gated(&hub, false);
    let calls = AtomicU32::new(0);
    hub.set_available(false);
    let first = Instant::now();
    assert_eq!(call(&policy, &calls, Ok(())).await, Ok(()), "alone");
    hub.set_available(true);
    hub.set_slow(true);
    let dropped =
        tokio::time::timeout(Duration::from_millis(10), call(&policy, &calls, Ok(()))).await;
    assert!(dropped.is_err(), "given up before the store answered");
    hub.set_slow(false);
    tokio::time::advance(Duration::from_millis(10)).await;
    let started = Mutex::new(None);
    policy
        .run(|| async {
            *started.lock().unwrap() = Some(first.elapsed());
            Ok::<(), Error>(())
        })
        .await
        .unwrap();
    let started = started.into_inner().unwrap().unwrap();
    assert!(
        started >= Duration::from_secs(1),
        "two calls {started:?} apart through a 1/s gate"
    );
}
