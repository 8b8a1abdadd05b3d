//! A store that answers too late: the local state decides after exactly `shared_timeout`.

use super::*;

/// The fail-open promise, "within `shared_timeout`" (50 ms unless set), as an upper bound: a
/// store whose answer never comes (a Redis asleep) leaves the decision to the local state after
/// exactly that, not later. The bound itself is the store's (Redis's `Store::eval`; the
/// execution waits for a store within the deadline only), so this checks the rest of the way:
/// the default reaches the store, and the execution decides at once when it gives up.
#[tokio::test(start_paused = true)]
async fn a_slow_store_leaves_a_gated_call_to_the_local_gate_after_exactly_shared_timeout() {
    let hub = Hub::new();
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

    let mut builder = Policy::builder()
        .name("memory::gate")
        .rate(1, Duration::from_secs(1), 1);
    builder
        .sharing(|| hub.instance() as Arc<dyn SharedStore>)
        .timeout = Duration::from_millis(20);
    let impatient = builder.build().unwrap();
    let asked = Instant::now();
    assert_eq!(call(&impatient, &calls, Ok(())).await, Ok(()));
    assert_eq!(asked.elapsed(), Duration::from_millis(20), "as set");
}

/// A shared breaker whose cooldown is over asks the store for the probe's lock: a slow store
/// lets this instance probe (or, failing closed, refuse) after exactly `shared_timeout`.
#[tokio::test(start_paused = true)]
async fn a_slow_store_leaves_the_probe_to_the_local_breaker_after_exactly_shared_timeout() {
    let hub = Hub::new();
    let shared_breaker = |fail_closed: bool| {
        let breaker = Breaker::new("memory", BreakerConfig::new(2, COOLDOWN).unwrap());
        let mut builder = Policy::builder().breaker(Arc::new(breaker));
        builder
            .sharing(|| hub.instance() as Arc<dyn SharedStore>)
            .fail_closed = fail_closed;
        builder.build().unwrap()
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
