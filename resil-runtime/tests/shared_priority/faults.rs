//! The turn to ask a shared gate's store (`gate/asking.rs`) under the schedules of a hostile
//! review: a learning token gate, a throttle's hold, a deadline the turn cannot meet, a store
//! that answers late. Each test but the controls failed on 3723967 (the two of the throttle's
//! hold also before it, on bf98c4a).

use super::*;

// ---------------------------------------------------------------------------------------
// 1. A learning token gate keeps the reserved slots (and with them the turn to ask) for the
//    whole call: an ordered shared gate then starts one call per lease (SLOT_MISSED, 100 ms)
//    whatever its rate, when calls last longer than that (and one call at a time, a
//    bulkhead of 1, when they are shorter). Passes on bf98c4a.
// ---------------------------------------------------------------------------------------

fn learning_policy(store: &InMemory, ordered: bool) -> Policy {
    let builder = Policy::builder()
        .name("review::learning")
        .rate(100, Duration::from_secs(1), 1)
        .token_rate(1_000_000, Duration::from_secs(1), 1_000_000)
        .token_rate_learn()
        .deadline(Duration::from_secs(60));
    let builder = if ordered {
        builder.by_priority()
    } else {
        builder
    };
    builder.shared_in(store).build().unwrap()
}

async fn twenty_one_second_calls(policy: &Policy) -> Vec<Duration> {
    let (starts, origin) = (Starts::default(), Instant::now());
    let calls = join_all((0..20).map(|_| {
        call_with(
            policy,
            Priority::Default,
            &starts,
            "c",
            origin,
            MS(1_000),
            Ok(()),
        )
    }));
    assert!(calls.await.iter().all(Result::is_ok));
    starts.of("c")
}

#[tokio::test(start_paused = true)]
async fn control_unordered_learning_gate_starts_twenty_calls_at_its_rate() {
    let store = InMemory::new();
    let starts = twenty_one_second_calls(&learning_policy(&store, false)).await;
    // 100/s: 20 calls start within 200 ms.
    assert!(starts[19] <= MS(250), "starts: {starts:?}");
}

#[tokio::test(start_paused = true)]
async fn ordered_learning_gate_starts_twenty_calls_at_its_rate() {
    let store = InMemory::new();
    let starts = twenty_one_second_calls(&learning_policy(&store, true)).await;
    assert!(starts[19] <= MS(250), "starts: {starts:?}");
}

// ---------------------------------------------------------------------------------------
// 2. A holder whose slot a throttle revokes keeps the turn into the throttle's hold
//    (`slots_revoked` keeps `asking`; `shared_slots` returns `Held` before it looks at the
//    turn). Its lease runs out, each waiter in turn takes the turn over and goes into the
//    hold with it, and at the hold's end every one of them asks the store at once, with a
//    stale turn, ahead of a critical call that came during the hold.
// ---------------------------------------------------------------------------------------

/// 20 batch calls queued by instance `a` at 0 behind a call answered 429 (Retry-After 3 s)
/// at 150 ms; a critical call of `critical_in` at 3.2 s, after the hold (3.15 s). When the
/// critical call started, and the batch calls' starts.
async fn batch_behind_a_throttle(a: &Policy, critical_in: &Policy) -> (Duration, Vec<Duration>) {
    let (starts, origin) = (Starts::default(), Instant::now());
    let throttler = call_with(
        a,
        Priority::Default,
        &starts,
        "throttler",
        origin,
        MS(150),
        Err(Err429::Throttled(Duration::from_secs(3))),
    );
    let batch = join_all((0..20).map(|_| call(a, Priority::Batch, &starts, "batch", origin)));
    let critical = async {
        sleep(MS(3_200)).await;
        let c = Priority::Critical;
        call(critical_in, c, &starts, "critical", origin).await
    };
    let (_, batch, critical) = tokio::join!(throttler, batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    (starts.of("critical")[0], starts.of("batch"))
}

#[tokio::test(start_paused = true)]
async fn after_a_throttle_hold_a_critical_call_is_not_queued_behind_its_instances_batch() {
    let store = InMemory::new();
    let a = policy(&store);
    let (critical, batch) = batch_behind_a_throttle(&a, &a).await;
    // It should wait for at most the slot booked by the instance's caller asking then.
    assert!(
        critical <= MS(3_200 + 300),
        "critical (at 3.2 s) started at {critical:?}; batch: {batch:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_throttle_hold_the_store_holds_at_most_one_slot_ahead_per_instance() {
    let store = InMemory::new();
    let (a, b) = (policy(&store), policy(&store.instance()));
    let (critical, batch) = batch_behind_a_throttle(&a, &b).await;
    // Another instance's critical call waits for a's one slot booked ahead, then its own.
    assert!(
        critical <= MS(3_200 + 300),
        "b's critical (at 3.2 s) started at {critical:?}; a's batch: {batch:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. A caller whose deadline its gate cannot meet: refused at once (`RateLimited`) by a
//    local ordered gate and by an unordered shared gate (and by this gate on bf98c4a); an
//    ordered shared gate keeps it in the turn's queue until the turn comes (here 400 ms of
//    a 500 ms deadline), and only then asks the store, which refuses it.
// ---------------------------------------------------------------------------------------

fn short_deadline(store: Option<&InMemory>, ordered: bool) -> Policy {
    let builder = Policy::builder()
        .name("review::deadline")
        .rate(10, Duration::from_secs(1), 1)
        .deadline(MS(500));
    let builder = if ordered {
        builder.by_priority()
    } else {
        builder
    };
    match store {
        Some(store) => builder.shared_in(store).build().unwrap(),
        None => builder.build().unwrap(),
    }
}

/// 20 calls at once: when and how the refused ones ended.
async fn refusals(policy: &Policy) -> Vec<(Duration, Rejected)> {
    let (starts, origin) = (Starts::default(), Instant::now());
    let calls = (0..20).map(|_| {
        let starts = &starts;
        async move {
            match call(policy, Priority::Default, starts, "c", origin).await {
                Err(Err429::Rejected(rejected)) => Some((origin.elapsed(), rejected)),
                _ => None,
            }
        }
    });
    join_all(calls).await.into_iter().flatten().collect()
}

/// Some calls were refused, each at once (within 10 ms) and for the rate.
fn refused_at_once(refused: &[(Duration, Rejected)]) {
    let late = refused.iter().filter(|(at, _)| *at > MS(10)).count();
    let first: Vec<String> = (refused.iter().take(3))
        .map(|(at, r)| format!("{at:?} {r:?}"))
        .collect();
    assert!(
        !refused.is_empty()
            && late == 0
            && (refused.iter()).all(|(_, r)| matches!(r, Rejected::RateLimited { .. })),
        "{} refused, {late} of them after 10 ms; first: {first:?}",
        refused.len()
    );
}

#[tokio::test(start_paused = true)]
async fn control_local_ordered_gate_refuses_a_deadline_it_cannot_meet_at_once() {
    refused_at_once(&refusals(&short_deadline(None, true)).await);
}

#[tokio::test(start_paused = true)]
async fn control_unordered_shared_gate_refuses_a_deadline_it_cannot_meet_at_once() {
    let store = InMemory::new();
    refused_at_once(&refusals(&short_deadline(Some(&store), false)).await);
}

#[tokio::test(start_paused = true)]
async fn ordered_shared_gate_refuses_a_deadline_it_cannot_meet_at_once() {
    let store = InMemory::new();
    refused_at_once(&refusals(&short_deadline(Some(&store), true)).await);
}

// ---------------------------------------------------------------------------------------
// 4. A store that answers too late (`set_slow`, as a slow Redis Cluster node: a timeout does
//    not mark it lost) while callers wait: unordered, every caller gives up on it after one
//    `shared_timeout` at once and the local gate decides; ordered, they ask one after
//    another, each holding the turn for its whole `shared_timeout`. Passes on bf98c4a.
// ---------------------------------------------------------------------------------------

fn roomy(store: &InMemory, ordered: bool) -> Policy {
    let builder = Policy::builder()
        .name("review::slow")
        .rate(1_000, Duration::from_secs(1), 1_000)
        .deadline(Duration::from_secs(60))
        .shared_timeout(MS(50));
    let builder = if ordered {
        builder.by_priority()
    } else {
        builder
    };
    builder.shared_in(store).build().unwrap()
}

async fn forty_calls_on_a_slow_store(policy: &Policy, store: &InMemory) -> Vec<Duration> {
    store.set_slow(true);
    let (starts, origin) = (Starts::default(), Instant::now());
    let calls = join_all((0..40).map(|_| call(policy, Priority::Default, &starts, "c", origin)));
    assert!(calls.await.iter().all(Result::is_ok));
    starts.of("c")
}

#[tokio::test(start_paused = true)]
async fn control_unordered_shared_gate_on_a_slow_store_waits_one_shared_timeout() {
    let store = InMemory::new();
    let starts = forty_calls_on_a_slow_store(&roomy(&store, false), &store).await;
    assert!(
        starts[39] <= MS(100),
        "last of 40 started at {:?}",
        starts[39]
    );
}

#[tokio::test(start_paused = true)]
async fn ordered_shared_gate_on_a_slow_store_waits_one_shared_timeout() {
    let store = InMemory::new();
    let starts = forty_calls_on_a_slow_store(&roomy(&store, true), &store).await;
    assert!(
        starts[39] <= MS(100),
        "last of 40 started at {:?}; starts: {starts:?}",
        starts[39]
    );
}
