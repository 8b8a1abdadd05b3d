//! The turn to ask a shared gate's store (`gate/asking.rs`) under the schedules of a hostile
//! review: a learning token gate, a throttle's hold, a deadline the turn cannot meet, a store
//! that answers late. Each test but the controls failed on 3723967 (the two of the throttle's
//! hold also before it, on bf98c4a).
#![cfg(feature = "shared")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use resil_runtime::shared::InMemory;
use resil_runtime::{Policy, Priority, Rejected, Transient};
use tokio::time::{sleep, Instant};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// When each call started, by label, from `origin`.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<(&'static str, Duration)>>>);

impl Starts {
    fn of(&self, label: &str) -> Vec<Duration> {
        let starts = self.0.lock().unwrap();
        let mut v: Vec<_> = starts
            .iter()
            .filter(|(l, _)| *l == label)
            .map(|(_, at)| *at)
            .collect();
        v.sort();
        v
    }
    fn push(&self, label: &'static str, origin: Instant) {
        self.0.lock().unwrap().push((label, origin.elapsed()));
    }
}

/// An error that can be a throttle (429 with Retry-After).
#[derive(Debug, Clone, PartialEq)]
enum Err429 {
    Throttled(Duration),
    Rejected(Rejected),
}
impl From<Rejected> for Err429 {
    fn from(r: Rejected) -> Self {
        Err429::Rejected(r)
    }
}
impl Transient for Err429 {
    fn is_transient(&self) -> bool {
        matches!(self, Err429::Throttled(_))
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Err429::Throttled(d) => Some(*d),
            _ => None,
        }
    }
    fn is_throttle(&self) -> bool {
        matches!(self, Err429::Throttled(_))
    }
}

/// A call of `class` whose body records its start, then takes `body` to answer.
async fn call(
    policy: &Policy,
    class: Priority,
    starts: &Starts,
    label: &'static str,
    origin: Instant,
    body: Duration,
) -> Result<(), Rejected> {
    let mut execution = policy.execute::<Rejected>();
    execution.set_priority(class);
    execution
        .run(move || {
            let starts = starts.clone();
            async move {
                starts.push(label, origin);
                sleep(body).await;
                Ok(())
            }
        })
        .await
}

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
    let calls =
        join_all((0..20).map(|_| call(policy, Priority::Default, &starts, "c", origin, MS(1_000))));
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

fn throttled_policy(store: &InMemory) -> Policy {
    Policy::builder()
        .name("review::throttle")
        .rate(10, Duration::from_secs(1), 1)
        .by_priority()
        .deadline(Duration::from_secs(60))
        .shared_in(store)
        .build()
        .unwrap()
}

async fn call429(
    policy: &Policy,
    class: Priority,
    starts: &Starts,
    label: &'static str,
    origin: Instant,
    answer: Result<(), Err429>,
    body: Duration,
) -> Result<(), Err429> {
    let mut execution = policy.execute::<Err429>();
    execution.set_priority(class);
    execution
        .run(move || {
            let (starts, answer) = (starts.clone(), answer.clone());
            async move {
                starts.push(label, origin);
                sleep(body).await;
                answer
            }
        })
        .await
}

/// 20 batch calls queued by instance `a` at 0 behind a call answered 429 (Retry-After 3 s)
/// at 150 ms; a critical call of `critical_in` at 3.2 s, after the hold (3.15 s). When the
/// critical call started, and the batch calls' starts.
async fn batch_behind_a_throttle(a: &Policy, critical_in: &Policy) -> (Duration, Vec<Duration>) {
    let (starts, origin) = (Starts::default(), Instant::now());
    let throttler = call429(
        a,
        Priority::Default,
        &starts,
        "throttler",
        origin,
        Err(Err429::Throttled(Duration::from_secs(3))),
        MS(150),
    );
    let batch = join_all(
        (0..20).map(|_| call429(a, Priority::Batch, &starts, "batch", origin, Ok(()), MS(0))),
    );
    let critical = async {
        sleep(MS(3_200)).await;
        let c = Priority::Critical;
        call429(critical_in, c, &starts, "critical", origin, Ok(()), MS(0)).await
    };
    let (_, batch, critical) = tokio::join!(throttler, batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    (starts.of("critical")[0], starts.of("batch"))
}

#[tokio::test(start_paused = true)]
async fn after_a_throttle_hold_a_critical_call_is_not_queued_behind_its_instances_batch() {
    let store = InMemory::new();
    let a = throttled_policy(&store);
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
    let (a, b) = (
        throttled_policy(&store),
        throttled_policy(&store.instance()),
    );
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
            let r = call(policy, Priority::Default, starts, "c", origin, MS(0)).await;
            r.err().map(|e| (origin.elapsed(), e))
        }
    });
    join_all(calls).await.into_iter().flatten().collect()
}

fn summary(refused: &[(Duration, Rejected)]) -> String {
    let late = refused.iter().filter(|(at, _)| *at > MS(10)).count();
    let kinds: Vec<String> = refused
        .iter()
        .map(|(at, r)| format!("{at:?} {r:?}"))
        .take(3)
        .collect();
    format!(
        "{} refused, {late} of them after 10 ms; first: {kinds:?}",
        refused.len()
    )
}

#[tokio::test(start_paused = true)]
async fn control_local_ordered_gate_refuses_a_deadline_it_cannot_meet_at_once() {
    let refused = refusals(&short_deadline(None, true)).await;
    assert!(!refused.is_empty());
    assert!(
        refused
            .iter()
            .all(|(at, r)| *at <= MS(10) && matches!(r, Rejected::RateLimited { .. })),
        "{}",
        summary(&refused)
    );
}

#[tokio::test(start_paused = true)]
async fn control_unordered_shared_gate_refuses_a_deadline_it_cannot_meet_at_once() {
    let store = InMemory::new();
    let refused = refusals(&short_deadline(Some(&store), false)).await;
    assert!(!refused.is_empty());
    assert!(
        refused
            .iter()
            .all(|(at, r)| *at <= MS(10) && matches!(r, Rejected::RateLimited { .. })),
        "{}",
        summary(&refused)
    );
}

#[tokio::test(start_paused = true)]
async fn ordered_shared_gate_refuses_a_deadline_it_cannot_meet_at_once() {
    let store = InMemory::new();
    let refused = refusals(&short_deadline(Some(&store), true)).await;
    assert!(!refused.is_empty());
    assert!(
        refused
            .iter()
            .all(|(at, r)| *at <= MS(10) && matches!(r, Rejected::RateLimited { .. })),
        "{}",
        summary(&refused)
    );
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
    let calls =
        join_all((0..40).map(|_| call(policy, Priority::Default, &starts, "c", origin, MS(0))));
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
