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

/// Two instances of a 1/s shared gate. The second's first call takes the store's slot at 0;
/// the store goes slow, and its next caller, given up on by its reservation, is granted the
/// local gate's next slot alone, at 1 s. The store answers in time again before then, and the
/// first instance is granted the store's slot at 1 s too. The caller whose slot was granted
/// alone takes its slot again from the store (at 2 s), as the store's return says: before,
/// both called at 1 s (the simulator's `gate_ceiling_across_instances`, seeds 34357, 39032).
#[tokio::test(start_paused = true)]
async fn a_slot_granted_alone_while_the_store_was_slow_is_taken_again_when_it_answers() {
    let hub = InMemory::new();
    let (here, there) = (gated(&hub, false), gated(&hub, false));
    let origin = Instant::now();
    let starts = Mutex::new(Vec::new());
    let call = |policy, at| call_at(policy, origin + at, &starts);
    call(&there, Duration::ZERO).await;
    hub.set_slow(true);
    let back = async {
        tokio::time::sleep_until(origin + Duration::from_millis(200)).await;
        hub.set_slow(false);
    };
    tokio::join!(
        call(&there, Duration::from_millis(100)),
        back,
        call(&here, Duration::from_millis(300)),
    );
    let mut starts: Vec<Duration> = (starts.into_inner().unwrap().into_iter())
        .map(|start| start - origin)
        .collect();
    starts.sort();
    assert_eq!(starts.len(), 3);
    for pair in starts.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(999),
            "two calls {:?} apart through a 1/s gate: {starts:?}",
            pair[1] - pair[0]
        );
    }
}

/// Calls through `policy` at `at`, noting when the call started (since `at`'s origin).
async fn call_at(policy: &Policy, at: Instant, starts: &Mutex<Vec<Instant>>) {
    tokio::time::sleep_until(at).await;
    policy
        .run(|| async {
            starts.lock().unwrap().push(Instant::now());
            Ok::<(), Error>(())
        })
        .await
        .unwrap();
}
