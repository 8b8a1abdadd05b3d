//! `priority = ARG` on annotated functions: callers that must wait for a gate's slot or a
//! bulkhead's place are served most urgent first, in arrival order within a class, with aging;
//! the gate keeps its rate for all of them together, and a caller that gives up leaves no hole.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::{at, ApiError};
use tokio::time::{sleep, timeout};

type Starts = support::Starts<Priority>;

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
gated!(heard_flooded);
gated!(given_up_in_the_middle);
gated!(given_up_last);

#[tokio::test(start_paused = true)]
async fn a_critical_call_behind_100_batch_calls_starts_within_two_periods_and_the_rate_holds() {
    let starts = Starts::new();
    let batch = join_all((0..100).map(|_| behind_a_batch_job(Priority::Batch, &starts)));
    let arrives = Duration::from_millis(1050);
    let critical = at(arrives, || behind_a_batch_job(Priority::Critical, &starts));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    let started = starts.of(&Priority::Critical)[0];
    assert!(
        started - arrives <= Duration::from_millis(200),
        "the critical call waited {:?} behind the batch",
        started - arrives
    );
    // The rate holds for all together: never 11 starts within a second, and the batch lost
    // only the slot taken from it (101 calls, 100 intervals).
    starts.keep_rate(10, Duration::from_secs(1));
    assert_eq!(starts.all().last(), Some(&Duration::from_secs(10)));
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
    let defaults = starts.of(&Priority::Default);
    let ms = Duration::from_millis;
    assert_eq!(defaults, [ms(300), ms(400), ms(500), ms(600), ms(700)]);
    let batch = starts.of(&Priority::Batch);
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
    let waited = starts.of(&Priority::Batch)[0] - arrives;
    let period = Duration::from_millis(100);
    let bound = period * (Priority::AGING_PASSES + 2);
    assert!(waited <= bound, "waited {waited:?}, more than {bound:?}");
    assert!(
        waited >= period * Priority::AGING_PASSES,
        "not passed over: {waited:?}"
    );
}

/// What a listener hears of the calls served in turn: class, wait, promoted.
#[derive(Debug, Default)]
struct Served(std::sync::Mutex<Vec<(Priority, Duration, bool)>>);

impl resil::events::Listener for Served {
    fn on_event(&self, event: &resil::events::Event<'_>) {
        if let resil::events::Event::Served {
            class,
            waited,
            promoted,
            wait,
            ..
        } = event
        {
            assert_eq!(*wait, "rate");
            self.0.lock().unwrap().push((*class, *waited, *promoted));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_promotion_by_aging_is_heard_with_the_wait() {
    let heard = std::sync::Arc::new(Served::default());
    resil::events::add_listener_for("attr_priority::heard_flooded", heard.clone());
    let starts = Starts::new();
    let flood = join_all((0..40).map(|n| {
        at(Duration::from_millis(50 * n), || {
            heard_flooded(Priority::Critical, &starts)
        })
    }));
    let batch = at(Duration::from_millis(10), || {
        heard_flooded(Priority::Batch, &starts)
    });
    let (flood, batch) = tokio::join!(flood, batch);
    assert!(flood.iter().all(Result::is_ok) && batch.is_ok());
    let heard = heard.0.lock().unwrap();
    let batch: Vec<_> = heard
        .iter()
        .filter(|(class, ..)| *class == Priority::Batch)
        .collect();
    // Served by aging after AGING_PASSES slots went to criticals, from 10 ms.
    assert_eq!(
        batch,
        [&(Priority::Batch, Duration::from_millis(890), true)]
    );
    assert!(heard
        .iter()
        .all(|(class, _, promoted)| *class == Priority::Batch || !promoted));
    // Every call but the first waited in turn.
    assert_eq!(heard.len(), 40, "{heard:?}");
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
    assert_eq!(starts.of(&Priority::Critical), [s(1)]);
    assert_eq!(starts.of(&Priority::Default), [s(2)]);
    assert_eq!(starts.of(&Priority::Batch), [s(0), s(3), s(4), s(5)]);
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
    assert_eq!(starts.of(&Priority::Critical), [s(2)]);
}

/// Default calls arrive every 200 ms for 2 s on a `10/s` gate; 40 batch calls queue at once.
async fn steady_defaults_and_a_batch_job<F: std::future::Future<Output = Result<(), ApiError>>>(
    call: impl Fn(Priority) -> F,
) {
    let defaults =
        join_all((0..10).map(|n| at(Duration::from_millis(200 * n), || call(Priority::Default))));
    let batch = join_all((0..40).map(|_| at(Duration::from_millis(1), || call(Priority::Batch))));
    let (defaults, batch) = tokio::join!(defaults, batch);
    assert!(defaults.iter().chain(&batch).all(Result::is_ok));
}

#[resilient(rate = "10/s, batch 50%", priority = class)]
async fn with_headroom(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn headroom_keeps_batch_to_its_share_while_others_come_and_all_of_it_after() {
    let starts = Starts::new();
    steady_defaults_and_a_batch_job(|class| with_headroom(class, &starts)).await;
    let ms = Duration::from_millis;
    // Every default call found a slot free: it started as it came.
    let arrivals: Vec<_> = (0..10).map(|n| ms(200 * n)).collect();
    assert_eq!(starts.of(&Priority::Default), arrivals);
    // While they came (and for the gate's period after the last, at 1.8 s), the batch took
    // at most half the gate: 5 a second, its share's burst of one at the start.
    let batch = starts.of(&Priority::Batch);
    let early = batch.iter().filter(|at| **at < ms(2800)).count();
    assert!(early <= 15, "{early} batch calls before 2.8 s: {batch:?}");
    // Then the whole gate: 10 a second.
    let late: Vec<_> = batch.iter().filter(|at| **at >= ms(2800)).collect();
    for pair in late.windows(2) {
        assert_eq!(*pair[1] - *pair[0], ms(100), "{batch:?}");
    }
    starts.keep_rate(10, Duration::from_secs(1));
}

#[resilient(rate = "10/s", priority = class)]
async fn without_headroom(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn without_headroom_default_calls_wait_behind_a_full_schedule() {
    let starts = Starts::new();
    steady_defaults_and_a_batch_job(|class| without_headroom(class, &starts)).await;
    let ms = Duration::from_millis;
    let late = (starts.of(&Priority::Default).iter().enumerate())
        .filter(|(n, at)| **at > ms(200 * *n as u64))
        .count();
    // (A default call that arrives at the instant a slot comes due may take it, being more
    // urgent than the batch call it was booked for: which one the task polls first decides.)
    assert!(
        late >= 7,
        "{late} default calls waited: {:?}",
        starts.of(&Priority::Default)
    );
}

#[resilient(rate = "10/s, batch 50%", priority = class)]
async fn batch_alone(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn batch_calls_take_the_whole_gate_when_nobody_else_comes() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| batch_alone(Priority::Batch, &starts)));
    assert!(batch.await.iter().all(Result::is_ok));
    assert_eq!(starts.all().last(), Some(&Duration::from_millis(1900)));
}

#[resilient(rate = "10/s, batch 50%", priority = class)]
async fn share_given_up(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_batch_call_that_gives_up_its_place_in_the_share_leaves_no_hole() {
    let starts = Starts::new();
    let ms = Duration::from_millis;
    let call = |class| share_given_up(class, &starts);
    // The default call makes the share hold batch calls back; the first batch call takes the
    // share's place at once (and the gate's slot at 100 ms), the second is given the share's
    // next place, at 201 ms, and gives up at 150 ms: the third takes that place.
    let default = call(Priority::Default);
    let first = at(ms(1), || call(Priority::Batch));
    let second = at(ms(2), || async {
        timeout(ms(148), call(Priority::Batch))
            .await
            .unwrap_or(Ok(()))
    });
    let third = at(ms(160), || call(Priority::Batch));
    let (default, first, second, third) = tokio::join!(default, first, second, third);
    assert!(default.is_ok() && first.is_ok() && second.is_ok() && third.is_ok());
    assert_eq!(starts.of(&Priority::Batch), [ms(100), ms(201)]);
}

#[resilient(rate = "10/s", priority = class)]
async fn aged_in_time(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[resilient(deadline = "1500ms")]
async fn aged_within(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    aged_in_time(class, starts).await
}

/// Behind 20 queued critical calls, a batch call with a 1.5 s deadline is served by aging
/// after eight of them: its room counts no more of them than aging lets go first (it counted
/// all 19 waiting, and refused it at once, 2 s away).
#[tokio::test(start_paused = true)]
async fn a_batch_call_that_aging_serves_in_time_is_not_refused() {
    let starts = Starts::new();
    let critical = join_all((0..20).map(|_| aged_in_time(Priority::Critical, &starts)));
    let batch = aged_within(Priority::Batch, &starts);
    let (critical, batch) = tokio::join!(critical, batch);
    assert!(critical.iter().all(Result::is_ok));
    assert_eq!(batch, Ok(()));
    assert_eq!(starts.of(&Priority::Batch), [Duration::from_millis(900)]);
}
