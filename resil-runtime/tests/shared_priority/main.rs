//! Priority across instances while the store answers: a shared gate that orders its waiters
//! asks its store for one slot at a time, for its instance's most urgent caller, so a batch
//! queued by one instance never books the slots a critical call of either instance waits for.
//! Instances are `InMemory::instance()`s of one store, under the paused clock. `faults` and
//! `faults_more` hold the schedules of two hostile reviews of the turn to ask.
#![cfg(feature = "shared")]

mod faults;
mod faults_more;
mod room;
mod tokens;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use resil_runtime::shared::InMemory;
use resil_runtime::{Policy, Priority, Rejected, Transient};
use tokio::time::{sleep, sleep_until, Instant};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// One instance's policy of a shared `10/s` gate (burst 1) that orders its waiters.
fn policy(store: &InMemory) -> Policy {
    Policy::builder()
        .name("llm::complete")
        .rate(10, Duration::from_secs(1), 1)
        .by_priority()
        .deadline(Duration::from_secs(60))
        .shared_in(store)
        .build()
        .unwrap()
}

/// When each call started, by label, from `origin`.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<(&'static str, Duration)>>>);

impl Starts {
    /// The starts under `label`, in order.
    fn of(&self, label: &str) -> Vec<Duration> {
        let starts = self.0.lock().unwrap();
        let mut of: Vec<_> = (starts.iter())
            .filter(|(l, _)| *l == label)
            .map(|(_, at)| *at)
            .collect();
        of.sort();
        of
    }

    /// Every start, in order.
    fn all(&self) -> Vec<Duration> {
        let mut all: Vec<_> = self.0.lock().unwrap().iter().map(|(_, at)| *at).collect();
        all.sort();
        all
    }

    fn push(&self, label: &'static str, origin: Instant) {
        self.0.lock().unwrap().push((label, origin.elapsed()));
    }
}

/// An error that can be a throttle (a 429 with its Retry-After).
#[derive(Debug, Clone, PartialEq)]
enum Err429 {
    Throttled(Duration),
    Rejected(Rejected),
}

impl From<Rejected> for Err429 {
    fn from(rejected: Rejected) -> Self {
        Err429::Rejected(rejected)
    }
}

impl Transient for Err429 {
    fn is_transient(&self) -> bool {
        matches!(self, Err429::Throttled(_))
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Err429::Throttled(wait) => Some(*wait),
            Err429::Rejected(_) => None,
        }
    }

    fn is_throttle(&self) -> bool {
        matches!(self, Err429::Throttled(_))
    }
}

/// A call of `class` whose body records its start under `label`, then takes `body` to answer
/// `answer`.
async fn call_with(
    policy: &Policy,
    class: Priority,
    starts: &Starts,
    label: &'static str,
    origin: Instant,
    body: Duration,
    answer: Result<(), Err429>,
) -> Result<(), Err429> {
    let mut execution = policy.execute::<Err429>();
    execution.set_priority(class);
    recorded(execution, (starts, label, origin), body, answer).await
}

/// `execution` run on a body that records its start under `label`, then takes `body` to
/// answer `answer`.
async fn recorded(
    execution: resil_runtime::Execution<'_, Err429>,
    (starts, label, origin): (&Starts, &'static str, Instant),
    body: Duration,
    answer: Result<(), Err429>,
) -> Result<(), Err429> {
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

/// A call of `class` that answers at once, its start recorded under `label`.
async fn call(
    policy: &Policy,
    class: Priority,
    starts: &Starts,
    label: &'static str,
    origin: Instant,
) -> Result<(), Err429> {
    call_with(policy, class, starts, label, origin, MS(0), Ok(())).await
}

/// The most starts in any window of one second.
fn most_in_a_second(starts: &[Duration]) -> usize {
    (starts.iter())
        .map(|from| {
            (starts.iter())
                .filter(|at| **at >= *from && **at < *from + MS(1000))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn a_critical_call_is_not_queued_behind_its_own_instances_batch_while_the_store_answers() {
    let store = InMemory::new();
    let gate = policy(&store);
    let (starts, origin) = (Starts::default(), Instant::now());
    let batch = join_all((0..100).map(|_| call(&gate, Priority::Batch, &starts, "batch", origin)));
    let critical = async {
        sleep(MS(1_050)).await;
        call(&gate, Priority::Critical, &starts, "critical", origin).await
    };
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    // Booked at arrival, the 100 batch calls held the next 10 s of the store's schedule.
    let critical = starts.of("critical")[0];
    assert!(
        critical <= MS(1_050 + 200),
        "critical started at {critical:?}"
    );
    assert!(
        most_in_a_second(&starts.all()) <= 10,
        "the rate holds for all together"
    );
}

#[tokio::test(start_paused = true)]
async fn a_critical_call_of_one_instance_is_not_queued_behind_anothers_batch() {
    let store = InMemory::new();
    let (a, b) = (policy(&store), policy(&store.instance()));
    let (starts, origin) = (Starts::default(), Instant::now());
    let batch = join_all((0..100).map(|_| call(&a, Priority::Batch, &starts, "batch", origin)));
    let critical = async {
        let mut results = Vec::new();
        for at in [1_050, 3_020, 5_070] {
            sleep_until(origin + MS(at)).await;
            let result = call(&b, Priority::Critical, &starts, "critical", origin).await;
            results.push(result);
        }
        results
    };
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().chain(&critical).all(Result::is_ok));
    // Each waits for at most the slot a's batch holds booked, then takes the next.
    let expected = [MS(1_050), MS(3_020), MS(5_070)];
    for (started, arrived) in starts.of("critical").into_iter().zip(expected) {
        let waited = started - arrived;
        assert!(
            waited <= MS(200),
            "critical arrived at {arrived:?}, started at {started:?}"
        );
    }
    assert!(
        most_in_a_second(&starts.all()) <= 10,
        "the rate holds across instances"
    );
    assert_eq!(starts.of("batch").len(), 100);
}

#[tokio::test(start_paused = true)]
async fn a_caller_left_unpolled_holding_the_turn_to_ask_does_not_hold_the_others() {
    let store = InMemory::new();
    let gate = policy(&store);
    let (starts, origin) = (Starts::default(), Instant::now());
    // The first call takes the burst; the second asks, is granted the slot at 100 ms, and is
    // then left unpolled, alive, holding its instance's turn to ask.
    call(&gate, Priority::Default, &starts, "first", origin)
        .await
        .unwrap();
    let mut stalled = Box::pin(call(&gate, Priority::Default, &starts, "stalled", origin));
    tokio::select! {
        biased;
        _ = &mut stalled => panic!("its slot is 100 ms away"),
        _ = sleep(MS(10)) => {}
    }
    let others = join_all((0..3).map(|_| call(&gate, Priority::Critical, &starts, "live", origin)));
    let others = tokio::time::timeout(Duration::from_secs(5), others).await;
    let others = others.expect("the live callers take the turn once its lease ended");
    assert!(others.iter().all(Result::is_ok));
    // The stalled slot at 100 ms went by; the live ones started from its lease's end.
    let live = starts.of("live");
    assert!(
        live.iter().all(|at| *at <= MS(600)),
        "live callers started at {live:?}"
    );
    drop(stalled);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_no_hole_in_the_turns() {
    let store = InMemory::new();
    let gate = policy(&store);
    let (starts, origin) = (Starts::default(), Instant::now());
    call(&gate, Priority::Default, &starts, "first", origin)
        .await
        .unwrap();
    let waiters = join_all((0..5).map(|i| {
        let starts = starts.clone();
        let gate = &gate;
        async move {
            let call = call(gate, Priority::Default, &starts, "waiter", origin);
            match i % 2 {
                // Every other waiter gives up after 50 ms, the first holding the turn.
                0 => tokio::time::timeout(MS(50), call).await.ok(),
                _ => Some(call.await),
            }
        }
    }));
    let done = waiters.await;
    assert_eq!(
        done.iter().flatten().count(),
        2,
        "the two that stayed were served"
    );
    // The two left take the gate's next two slots.
    assert_eq!(starts.of("waiter"), [MS(100), MS(200)]);
}

#[tokio::test(start_paused = true)]
async fn a_call_the_slow_store_leaves_to_the_local_gate_waits_in_its_room() {
    let store = InMemory::new();
    let gate = Policy::builder()
        .name("llm::complete")
        .rate(10, Duration::from_secs(1), 1)
        .by_priority()
        .deadline(Duration::from_secs(60))
        .shared_in(&store)
        .shared_timeout(MS(20))
        .build()
        .unwrap();
    let (starts, origin) = (Starts::default(), Instant::now());
    // The store answers too late for every question: each call is left to the local gate.
    store.set_slow(true);
    let batch = join_all((0..30).map(|_| call(&gate, Priority::Batch, &starts, "batch", origin)));
    let critical = async {
        sleep(MS(1_050)).await;
        call(&gate, Priority::Critical, &starts, "critical", origin).await
    };
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    // Served in the local gate's room: booked at the back of its schedule, it started after
    // every batch call (at 3.02 s).
    let critical = starts.of("critical")[0];
    let after = starts
        .of("batch")
        .iter()
        .filter(|at| **at > critical)
        .count();
    assert!(
        after >= 15,
        "critical started at {critical:?}, before {after} batch calls"
    );
    assert!(
        most_in_a_second(&starts.all()) <= 10,
        "the rate holds for all together"
    );
}
