//! The turn to ask a shared gate's store under a second hostile review's schedules: a store
//! late once (fail-closed and fail-open, two instances), a local schedule left stale by a
//! throttle elsewhere, a call that waited in turn heard once. Each test but the controls
//! failed on a609f90.

use super::*;
use resil_runtime::events::{Event, Listener};

// ---------------------------------------------------------------------------------------
// 1. Fail-closed: one late answer refuses every caller of the instance for the next
//    shared_timeout, without asking the store, though it answers in time again.
// ---------------------------------------------------------------------------------------

fn fail_closed(store: &InMemory, ordered: bool) -> Policy {
    let builder = Policy::builder()
        .name("review2::closed")
        .rate(100, Duration::from_secs(1), 10)
        .deadline(Duration::from_secs(60))
        .shared_in(store)
        .shared_timeout(MS(50))
        .shared_fail_closed(true);
    let builder = if ordered {
        builder.by_priority()
    } else {
        builder
    };
    builder.build().unwrap()
}

async fn after_one_late_answer(policy: &Policy, store: &InMemory) -> Vec<Result<(), Err429>> {
    let (starts, origin) = (Starts::default(), Instant::now());
    store.set_slow(true);
    let first = call(policy, Priority::Default, &starts, "first", origin).await;
    assert_eq!(first, Err(Err429::Rejected(Rejected::SharedUnavailable)));
    // The store answers in time again.
    store.set_slow(false);
    sleep(MS(10)).await;
    join_all((0..5).map(|_| call(policy, Priority::Critical, &starts, "next", origin))).await
}

#[tokio::test(start_paused = true)]
async fn control_unordered_fail_closed_serves_once_the_store_answers() {
    let store = InMemory::new();
    let results = after_one_late_answer(&fail_closed(&store, false), &store).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[tokio::test(start_paused = true)]
async fn ordered_fail_closed_serves_once_the_store_answers() {
    let store = InMemory::new();
    let results = after_one_late_answer(&fail_closed(&store, true), &store).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

// ---------------------------------------------------------------------------------------
// 2. Fail-open: one late answer sends every caller that comes within the next
//    shared_timeout to the local room, where they are served alone for as long as it takes
//    (seconds), while the store answers in time and another instance takes the whole rate
//    from it.
// ---------------------------------------------------------------------------------------

fn flapping(store: &InMemory, ordered: bool) -> Policy {
    let builder = Policy::builder()
        .name("review2::flap")
        .rate(10, Duration::from_secs(1), 1)
        .deadline(Duration::from_secs(60))
        .shared_in(store)
        .shared_timeout(MS(50));
    let builder = if ordered {
        builder.by_priority()
    } else {
        builder
    };
    builder.build().unwrap()
}

/// Instances `a` and `b` both call once (the store counts two users); at 1 s, one question
/// of `a` is late (the store is slow for an instant: `a` gives up on it at 1.05 s, and is
/// told the store is back at 1.055 s); `a`'s 20 batch calls come at 1.06 s, within the
/// 50 ms `a` then takes the store for late; `b` runs 40 batch calls from 1 s. The starts.
async fn one_late_answer_then_both_instances(store: &InMemory, ordered: bool) -> Starts {
    let (a, b) = (
        flapping(store, ordered),
        flapping(&store.instance(), ordered),
    );
    let (starts, origin) = (Starts::default(), Instant::now());
    call(&b, Priority::Default, &starts, "warm", origin)
        .await
        .unwrap();
    call(&a, Priority::Default, &starts, "warm", origin)
        .await
        .unwrap();
    sleep_until(origin + MS(1_000)).await;
    store.set_slow(true);
    let mut late = Box::pin(call(&a, Priority::Default, &starts, "late", origin));
    // Its question is on its way: the store answers in time again.
    tokio::select! {
        biased;
        _ = &mut late => panic!("asked a slow store"),
        _ = tokio::task::yield_now() => {}
    }
    store.set_slow(false);
    let b_batch = join_all((0..40).map(|_| call(&b, Priority::Batch, &starts, "b", origin)));
    let a_batch = async {
        // `a` gave up on its question at 1.05 s; it hears the store back (as a Redis
        // store's reconnection does when its first PING is answered) at 1.055 s.
        sleep_until(origin + MS(1_055)).await;
        store.set_slow(false);
        sleep_until(origin + MS(1_060)).await;
        join_all((0..20).map(|_| call(&a, Priority::Batch, &starts, "a", origin))).await
    };
    let (late, b_batch, a_batch) = tokio::join!(late, b_batch, a_batch);
    assert!(late.is_ok());
    assert!(b_batch.iter().chain(&a_batch).all(Result::is_ok));
    starts
}

#[tokio::test(start_paused = true)]
async fn control_unordered_after_one_late_answer_the_rate_holds_across_instances() {
    let store = InMemory::new();
    let starts = one_late_answer_then_both_instances(&store, false).await;
    let most = most_in_a_second(&starts.all());
    assert!(
        most <= 11,
        "{most} starts in one second; a: {:?}",
        starts.of("a")
    );
}

#[tokio::test(start_paused = true)]
async fn ordered_after_one_late_answer_the_rate_holds_across_instances() {
    let store = InMemory::new();
    let starts = one_late_answer_then_both_instances(&store, true).await;
    let most = most_in_a_second(&starts.all());
    assert!(
        most <= 11,
        "{most} starts in one second; a: {:?}; b: {:?}",
        starts.of("a"),
        starts.of("b")
    );
}

// ---------------------------------------------------------------------------------------
// 3. The deadline estimate of `ask_turn` reads the local gate's schedule, which mirrors the
//    store's as it was at this instance's last grant. A throttle elsewhere revokes that
//    slot (the local refund is then a no-op) and cuts the store's schedule back: the local
//    schedule stays far ahead, and a call the store serves in time is refused at once.
// ---------------------------------------------------------------------------------------

fn deadline_510(store: &InMemory, ordered: bool) -> Policy {
    let builder = Policy::builder()
        .name("review2::stale")
        .rate(10, Duration::from_secs(1), 1)
        .deadline(MS(510))
        .shared_in(store);
    let builder = if ordered {
        builder.by_priority()
    } else {
        builder
    };
    builder.build().unwrap()
}

/// Six instances, deadline 510 ms: the first's call (at once) is throttled at 10 ms
/// (Retry-After 20 ms: the store's schedule is cut back to 110 ms, every slot after it
/// revoked); four others and `a` booked the store's next slots (100 to 500 ms: `a`'s local
/// gate mirrors 600 ms) and give up at 20 ms (`a`'s local refund of its revoked slot is a
/// no-op). `a`'s next call comes at 50 ms, nobody ahead of it: the store would grant 110 ms.
async fn after_a_throttle_elsewhere(
    store: &InMemory,
    ordered: bool,
) -> (Result<(), Err429>, Starts) {
    let others: Vec<Policy> = (0..5)
        .map(|_| deadline_510(&store.instance(), ordered))
        .collect();
    let a = deadline_510(store, ordered);
    let (starts, origin) = (Starts::default(), Instant::now());
    let throttled = call_with(
        &others[0],
        Priority::Default,
        &starts,
        "throttled",
        origin,
        MS(10),
        Err(Err429::Throttled(MS(20))),
    );
    let booked = join_all(others[1..].iter().chain([&a]).map(|policy| {
        let starts = &starts;
        async move {
            let call = call(policy, Priority::Default, starts, "booked", origin);
            tokio::time::timeout(MS(20), call).await
        }
    }));
    let next = async {
        sleep_until(origin + MS(50)).await;
        call(&a, Priority::Critical, &starts, "next", origin).await
    };
    let (_, booked, next) = tokio::join!(throttled, booked, next);
    assert!(booked.iter().all(Result::is_err), "all gave up: {booked:?}");
    (next, starts)
}

#[tokio::test(start_paused = true)]
async fn control_unordered_serves_a_call_the_store_serves_in_time() {
    let store = InMemory::new();
    let (next, starts) = after_a_throttle_elsewhere(&store, false).await;
    assert!(next.is_ok(), "{next:?}");
    assert!(starts.of("next")[0] <= MS(200), "{:?}", starts.of("next"));
}

#[tokio::test(start_paused = true)]
async fn ordered_serves_a_call_the_store_serves_in_time() {
    let store = InMemory::new();
    let (next, starts) = after_a_throttle_elsewhere(&store, true).await;
    assert!(next.is_ok(), "{next:?}");
    assert!(starts.of("next")[0] <= MS(200), "{:?}", starts.of("next"));
}

// ---------------------------------------------------------------------------------------
// 4. `Event::Served` ("waited in turn for the rate gate's slot ... and was served") is told
//    when a caller takes the turn to ask, and again when the same call then waits in the
//    local room (the store did not answer in time): one call, two events, two samples in
//    the wait histogram.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Heard(Mutex<Vec<(Priority, Duration)>>);

impl Listener for Heard {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::Served { class, waited, .. } = event {
            self.0.lock().unwrap().push((*class, *waited));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn one_call_that_waited_in_turn_is_served_once() {
    let store = InMemory::new();
    let heard = Arc::new(Heard::default());
    let gate = Policy::builder()
        .name("review2::served")
        .rate(10, Duration::from_secs(1), 1)
        .by_priority()
        .deadline(Duration::from_secs(60))
        .shared_in(&store)
        .shared_timeout(MS(50))
        .listener(heard.clone())
        .build()
        .unwrap();
    let (starts, origin) = (Starts::default(), Instant::now());
    // The first takes the burst, the second the slot at 100 ms (and the turn until then);
    // the third waits for the turn, and asks at 100 ms a store that is slow from 90 ms.
    let calls = join_all(
        ["first", "second", "third"]
            .map(|label| call(&gate, Priority::Default, &starts, label, origin)),
    );
    let slow = async {
        sleep(MS(90)).await;
        store.set_slow(true);
    };
    let (calls, ()) = tokio::join!(calls, slow);
    assert!(calls.iter().all(Result::is_ok));
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(
        heard.len(),
        1,
        "Served events for 1 call that waited: {heard:?}; third started at {:?}",
        starts.of("third")
    );
}
