//! `priority = ARG` on annotated functions: callers that must wait for a gate's slot or a
//! bulkhead's place are served most urgent first, in arrival order within a class, with aging;
//! the gate keeps its rate for all of them together, and a caller that gives up leaves no hole.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::ApiError;
use tokio::time::{sleep, timeout, Instant};

/// When each call started, and its class, from the test's origin.
struct Starts {
    origin: Instant,
    starts: Mutex<Vec<(Priority, Duration)>>,
}

impl Starts {
    fn new() -> Self {
        Starts {
            origin: Instant::now(),
            starts: Mutex::new(Vec::new()),
        }
    }

    fn add(&self, class: Priority) {
        let at = self.origin.elapsed();
        self.starts.lock().unwrap().push((class, at));
    }

    fn of(&self, class: Priority) -> Vec<Duration> {
        let starts = self.starts.lock().unwrap();
        starts
            .iter()
            .filter(|(c, _)| *c == class)
            .map(|(_, at)| *at)
            .collect()
    }

    fn all(&self) -> Vec<Duration> {
        let mut all: Vec<_> = self
            .starts
            .lock()
            .unwrap()
            .iter()
            .map(|(_, at)| *at)
            .collect();
        all.sort();
        all
    }
}

/// Each test has its own function, and so its own gate: tests run side by side.
macro_rules! gated {
    ($name:ident) => {
        #[resilient(rate = "10/s", priority = class)]
        async fn $name(class: Priority, starts: &Starts) -> Result<(), ApiError> {
            starts.add(class);
            Ok(())
        }
    };
}

gated!(behind_a_batch_job);
gated!(defaults_and_batch);
gated!(flooded);
gated!(given_up_in_the_middle);
gated!(given_up_last);

/// Calls `call` with `class` at `at` after the origin.
async fn at<F: std::future::Future<Output = Result<(), ApiError>>>(
    at: Duration,
    call: impl FnOnce() -> F,
) -> Result<(), ApiError> {
    sleep(at).await;
    call().await
}

#[tokio::test(start_paused = true)]
async fn a_critical_call_behind_100_batch_calls_starts_within_two_periods_and_the_rate_holds() {
    let starts = Starts::new();
    let batch = join_all((0..100).map(|_| behind_a_batch_job(Priority::Batch, &starts)));
    let arrives = Duration::from_millis(1050);
    let critical = at(arrives, || behind_a_batch_job(Priority::Critical, &starts));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    let started = starts.of(Priority::Critical)[0];
    assert!(
        started - arrives <= Duration::from_millis(200),
        "the critical call waited {:?} behind the batch",
        started - arrives
    );
    // The rate holds for all together: never 11 starts within a second, and the batch lost
    // only the slot taken from it (101 calls, 100 intervals).
    let all = starts.all();
    for (first, eleventh) in all.iter().zip(&all[10..]) {
        assert!(*eleventh - *first >= Duration::from_secs(1), "{all:?}");
    }
    assert_eq!(all.last(), Some(&Duration::from_secs(10)));
}

#[tokio::test(start_paused = true)]
async fn later_default_calls_start_before_earlier_batch_calls() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| defaults_and_batch(Priority::Batch, &starts)));
    let arrive = Duration::from_millis(250);
    let defaults =
        join_all((0..5).map(|_| at(arrive, || defaults_and_batch(Priority::Default, &starts))));
    let (batch, defaults) = tokio::join!(batch, defaults);
    assert!(batch.iter().chain(&defaults).all(Result::is_ok));
    let defaults = starts.of(Priority::Default);
    let ms = Duration::from_millis;
    assert_eq!(defaults, [ms(300), ms(400), ms(500), ms(600), ms(700)]);
    let batch = starts.of(Priority::Batch);
    assert!(
        batch
            .iter()
            .filter(|at| **at > arrive)
            .all(|at| *at > ms(700)),
        "{batch:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn aging_bounds_a_batch_calls_wait_under_a_steady_critical_flood() {
    let starts = Starts::new();
    // Twice the gate's rate, for 5 s: the criticals alone would keep it busy for 10 s.
    let flood = join_all((0..100).map(|n| {
        at(Duration::from_millis(50 * n), || {
            flooded(Priority::Critical, &starts)
        })
    }));
    let arrives = Duration::from_millis(10);
    let batch = at(arrives, || flooded(Priority::Batch, &starts));
    let (flood, batch) = tokio::join!(flood, batch);
    assert!(flood.iter().all(Result::is_ok) && batch.is_ok());
    let waited = starts.of(Priority::Batch)[0] - arrives;
    let period = Duration::from_millis(100);
    let bound = period * (Priority::AGING_PASSES + 2);
    assert!(waited <= bound, "waited {waited:?}, more than {bound:?}");
    assert!(
        waited >= period * Priority::AGING_PASSES,
        "not passed over: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_no_hole_in_the_schedule() {
    let starts = Starts::new();
    let ms = Duration::from_millis;
    let first = given_up_in_the_middle(Priority::Default, &starts);
    // The second waits for the slot at 100 ms and gives up at 50 ms; the third takes it.
    let second = timeout(ms(50), given_up_in_the_middle(Priority::Default, &starts));
    let third = at(ms(1), || given_up_in_the_middle(Priority::Default, &starts));
    let (first, second, third) = tokio::join!(first, second, third);
    assert!(first.is_ok() && second.is_err() && third.is_ok());
    assert_eq!(starts.all(), [ms(0), ms(100)]);
}

#[tokio::test(start_paused = true)]
async fn the_last_waiter_that_gives_up_gives_its_slot_back() {
    let starts = Starts::new();
    let ms = Duration::from_millis;
    let first = given_up_last(Priority::Batch, &starts);
    let second = timeout(ms(50), given_up_last(Priority::Batch, &starts));
    let third = at(ms(60), || given_up_last(Priority::Batch, &starts));
    let (first, second, third) = tokio::join!(first, second, third);
    assert!(first.is_ok() && second.is_err() && third.is_ok());
    assert_eq!(starts.all(), [ms(0), ms(100)]);
}

#[resilient(bulkhead = 1, bulkhead_queue = 10, priority = class)]
async fn one_at_a_time(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_bulkheads_freed_place_goes_to_the_most_urgent_waiter() {
    let starts = Starts::new();
    let ms = Duration::from_millis;
    let batch = join_all((0..4).map(|_| one_at_a_time(Priority::Batch, &starts)));
    let default = at(ms(100), || one_at_a_time(Priority::Default, &starts));
    let critical = at(ms(200), || one_at_a_time(Priority::Critical, &starts));
    let (batch, default, critical) = tokio::join!(batch, default, critical);
    assert!(batch.iter().all(Result::is_ok) && default.is_ok() && critical.is_ok());
    let s = |n| Duration::from_secs(n);
    assert_eq!(starts.of(Priority::Critical), [s(1)]);
    assert_eq!(starts.of(Priority::Default), [s(2)]);
    assert_eq!(starts.of(Priority::Batch), [s(0), s(3), s(4), s(5)]);
}

/// A function with no priority is served as before: in arrival order.
#[resilient(bulkhead = 1, bulkhead_queue = 10)]
async fn unordered(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn without_priority_waiters_keep_their_arrival_order() {
    let starts = Starts::new();
    let ms = Duration::from_millis;
    let batch = join_all((0..2).map(|_| unordered(Priority::Batch, &starts)));
    let critical = at(ms(200), || unordered(Priority::Critical, &starts));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    let s = |n| Duration::from_secs(n);
    assert_eq!(starts.of(Priority::Critical), [s(2)]);
}
