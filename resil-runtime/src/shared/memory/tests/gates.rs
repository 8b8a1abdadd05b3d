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
    let hub = Hub::new();
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
    let hub = Hub::new();
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
    let hub = Hub::new();
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
    let hub = Hub::new();
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
