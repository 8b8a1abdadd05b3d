//! Shared gates across instances, to the microsecond: a throttle seen by one instance holds
//! the others until its end, a slot given up goes back to every instance, and a throttle
//! revokes the slots already promised. The real-Redis tests (`tests/shared/gates.rs`) check
//! what load cannot break; the spacing is checked here.

use tokio::sync::Notify;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

/// An instance's policy on the gate `memory::shared`: `count` per `period`, `burst` at once.
fn shared(count: u64, period: Duration, burst: u64) -> PolicyBuilder {
    Policy::builder()
        .name("memory::shared")
        .rate(count, period, burst)
}

/// One call through `policy` that the provider throttles, asking to wait `wait`.
async fn throttle(policy: &Policy, wait: Duration) {
    let throttled = policy
        .run(|| async { Err::<(), _>(Error::Throttled(wait)) })
        .await;
    assert_eq!(throttled, Err(Error::Throttled(wait)));
}

#[tokio::test(start_paused = true)]
async fn a_throttle_seen_by_one_instance_holds_the_other_until_its_end() {
    let hub = InMemory::new();
    let gated = |deadline: Option<Duration>| {
        let builder = shared(100, SECOND, 100);
        let builder = match deadline {
            Some(deadline) => builder.deadline(deadline),
            None => builder,
        };
        instance(builder, hub.instance())
    };
    let (a, b, hurried) = (gated(None), gated(None), gated(Some(SECOND / 2)));
    let start = Instant::now();
    throttle(&a, Duration::from_secs(5)).await;
    tokio::time::advance(SECOND).await;
    let calls = AtomicU32::new(0);
    assert_eq!(
        call(&hurried, &calls, Ok(())).await,
        Err(Error::Rejected(Rejected::RateLimited {
            retry_in: Duration::from_secs(4)
        })),
        "refused at once, told when the hold ends"
    );
    call(&b, &calls, Ok(())).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5), "at the hold's end");
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

/// A hold shorter than the interval must not lower the shared schedule below the slot the
/// throttled call used (another instance then called 1 ms after it).
#[tokio::test(start_paused = true)]
async fn a_short_throttle_keeps_counting_the_call_that_started() {
    let hub = InMemory::new();
    let gated = || {
        let builder = shared(1, 10 * SECOND, 1).deadline(5 * SECOND);
        instance(builder, hub.instance())
    };
    let (a, b) = (gated(), gated());
    throttle(&a, Duration::from_millis(1)).await;
    let calls = AtomicU32::new(0);
    assert_eq!(
        call(&b, &calls, Ok(())).await,
        Err(Error::Rejected(Rejected::RateLimited {
            retry_in: 10 * SECOND
        })),
        "a's call took the period's slot"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_slot_given_up_goes_back_to_every_instance() {
    let hub = InMemory::new();
    // 2 a second, no burst: slots 500 ms apart across both instances.
    let gated = || instance(shared(2, SECOND, 1), hub.instance());
    let (a, b) = (gated(), gated());
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    call(&a, &calls, Ok(())).await.unwrap();
    // A's second call waits for the slot at 500 ms, and its caller gives up at 100 ms.
    let given_up = tokio::time::timeout(SECOND / 10, call(&a, &calls, Ok(()))).await;
    assert!(given_up.is_err(), "still waiting for its slot");
    call(&b, &calls, Ok(())).await.unwrap();
    assert_eq!(
        start.elapsed(),
        SECOND / 2,
        "the slot A gave up, not the one after it"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

/// A takes the first slot of a gate of 2 a second and holds its answer while B's three
/// callers are promised the next three; at 100 ms the provider throttles A for 3 s. B's
/// promised slots are revoked, and its calls start from the hold's end at the gate's rate.
/// `late` (at 700 ms) is when the store hears of the hold (Redis's HOLD is sent in the
/// background), if not at once.
async fn revoked(late: Option<Duration>) -> Vec<Duration> {
    let hub = InMemory::new();
    let gated = || instance(shared(2, SECOND, 1), hub.instance());
    let (a, b) = (gated(), gated());
    if late.is_some() {
        hub.delay_holds();
    }
    let start = Instant::now();
    let answer = Notify::new();
    let started = Mutex::new(Vec::new());
    let throttled = a.run(|| async {
        answer.notified().await;
        Err::<(), _>(Error::Throttled(3 * SECOND))
    });
    let waiters = futures::future::join_all((0..3).map(|_| {
        b.run(|| async {
            started.lock().unwrap().push(start.elapsed());
            Ok::<(), Error>(())
        })
    }));
    let answered = async {
        tokio::time::sleep(SECOND / 10).await;
        answer.notify_one();
        if let Some(late) = late {
            tokio::time::sleep_until(start + late).await;
            hub.deliver_holds();
        }
    };
    let (throttled, waited, ()) = tokio::join!(throttled, waiters, answered);
    assert_eq!(throttled, Err(Error::Throttled(3 * SECOND)));
    assert!(waited.iter().all(Result::is_ok), "{waited:?}");
    started.into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_throttle_revokes_the_slots_the_other_instance_already_reserved() {
    let ms = Duration::from_millis;
    assert_eq!(
        revoked(None).await,
        [ms(3100), ms(3600), ms(4100)],
        "from the hold's end (100 ms + 3 s), 500 ms apart"
    );
}

/// A hold is in force from when the store hears of it: a slot that came before that is used,
/// and the later ones are revoked from then on. What the real-Redis test allows for.
#[tokio::test(start_paused = true)]
async fn a_throttle_the_store_hears_of_late_revokes_the_slots_still_ahead() {
    let ms = Duration::from_millis;
    assert_eq!(
        revoked(Some(ms(700))).await,
        [ms(500), ms(3700), ms(4200)],
        "the slot at 500 ms was due before anyone knew; the others wait from 700 ms + 3 s"
    );
}

/// The hold a 429 asks for reaches the store in the background (Redis's HOLD is sent by a
/// task of its own): the instance that was throttled waits it out all the same.
#[tokio::test(start_paused = true)]
async fn a_throttled_instance_waits_out_its_own_hold_before_the_store_hears_of_it() {
    let hub = InMemory::new();
    let a = instance(shared(1, SECOND, 1), hub.instance());
    hub.delay_holds();
    throttle(&a, 2 * SECOND).await;
    let asked = Instant::now();
    call(&a, &AtomicU32::new(0), Ok(())).await.unwrap();
    assert_eq!(
        asked.elapsed(),
        2 * SECOND,
        "the 429's wait, not the gate's next slot (1 s)"
    );
    hub.deliver_holds();
}

/// A call whose deadline ends inside the instance's own hold is refused at once, saying when
/// the gate opens, instead of waiting out the hold to fail at its deadline.
#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_ends_inside_the_hold_is_refused_at_once() {
    let hub = InMemory::new();
    let builder = shared(1, SECOND, 1).deadline(Duration::from_millis(500));
    let a = instance(builder, hub.instance());
    hub.delay_holds();
    throttle(&a, 2 * SECOND).await;
    let asked = Instant::now();
    let calls = AtomicU32::new(0);
    let refused = call(&a, &calls, Ok(())).await;
    assert_eq!(
        refused,
        Err(Error::Rejected(Rejected::RateLimited {
            retry_in: 2 * SECOND
        }))
    );
    assert_eq!(asked.elapsed(), Duration::ZERO);
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    hub.deliver_holds();
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
    let hub = InMemory::new();
    let (a, b) = (
        instance(shared(10, SECOND, 1), hub.instance()),
        instance(shared(10, SECOND, 1), hub.instance()),
    );
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
        .filter(|(_, at)| *at >= back && *at < back + SECOND)
        .count();
    assert!(
        in_the_second <= 10,
        "{in_the_second} calls started in the second after the store came back: {started:?}"
    );
    assert_eq!(started.len(), 16);
}

/// A saturated 1/s shared gate whose callers wait at most 100 ms, one every 10 ms: the store
/// refuses each of them, having heard the heartbeat one carried, and that refusal armed the
/// heartbeat again, so once the first second was over every refused reservation heartbeated
/// (one write to Redis each). A refusal is an answer: the store heard the heartbeat.
#[tokio::test(start_paused = true)]
async fn refused_reservations_of_a_saturated_gate_heartbeat_once_a_second() {
    let hub = InMemory::new();
    let policy = instance(
        shared(1, SECOND, 1).deadline(Duration::from_millis(100)),
        hub.instance(),
    );
    let calls = AtomicU32::new(0);
    assert_eq!(call(&policy, &calls, Ok(())).await, Ok(()));
    for _ in 0..200 {
        let _ = call(&policy, &calls, Ok(())).await;
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        3,
        "one a second, the others refused"
    );
    let beats = hub.hub.beats();
    assert!(beats <= 3, "{beats} heartbeats in 2 s");
}
