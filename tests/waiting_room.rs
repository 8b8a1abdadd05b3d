//! A gate's waiting room (`priority`, `fair`, a batch share) under the schedules a hostile
//! review wrote: callers left unpolled, deadlines, tiny shares, routed hedges, more values
//! than `max_keys`, a throttle. Each test failed on the code before its fix.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::{at, ApiError, Starts};
use tokio::time::{sleep, timeout, Instant};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[resilient(rate = "10/s", priority = class)]
async fn stalled_pair(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn two_waiters_left_unpolled_in_a_row_do_not_hold_the_room() {
    let starts = Starts::new();
    stalled_pair(Priority::Default, &starts).await.unwrap();
    let mut next = Box::pin(stalled_pair(Priority::Default, &starts));
    let mut watcher = Box::pin(stalled_pair(Priority::Default, &starts));
    assert!(futures::poll!(next.as_mut()).is_pending());
    assert!(futures::poll!(watcher.as_mut()).is_pending());
    let origin = Instant::now();
    let live = timeout(
        Duration::from_secs(30),
        stalled_pair(Priority::Default, &starts),
    )
    .await;
    assert!(live.is_ok(), "a live caller waited {:?}", origin.elapsed());
    assert!(origin.elapsed() <= MS(500), "{:?}", origin.elapsed());
}

#[resilient(rate = "10/s, batch 50%", priority = class, timeout = "2s", deadline = "2s")]
async fn share_deadline(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_batch_call_whose_share_place_cannot_come_in_time_is_refused_at_once() {
    let starts = Starts::new();
    let origin = Instant::now();
    let default = share_deadline(Priority::Default, &starts);
    let batch = join_all((0..30).map(|_| async {
        let result = share_deadline(Priority::Batch, &starts).await;
        (result, origin.elapsed())
    }));
    let (default, batch) = tokio::join!(default, batch);
    assert!(default.is_ok());
    let late: Vec<_> = (batch.iter())
        .filter(|(r, at)| r.is_err() && *at > MS(10))
        .map(|(_, at)| *at)
        .collect();
    assert!(late.is_empty(), "failed only after waiting: {late:?}");
}

#[resilient(rate = "10/s, batch 1%", priority = class)]
async fn one_percent(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_one_percent_share_keeps_batch_calls_to_one_percent() {
    let starts = Starts::new();
    let defaults = async {
        for _ in 0..20 {
            one_percent(Priority::Default, &starts).await.unwrap();
            sleep(MS(500)).await;
        }
    };
    let batch = join_all((0..50).map(|_| {
        timeout(
            Duration::from_secs(10),
            one_percent(Priority::Batch, &starts),
        )
    }));
    tokio::join!(defaults, batch);
    let batch = starts.of(&Priority::Batch);
    let within = batch
        .iter()
        .filter(|at| **at < Duration::from_secs(10))
        .count();
    assert!(within <= 2, "{within} batch starts in 10 s: {batch:?}");
}

#[resilient(route = target in ["b"], hedge = "1 after 50ms", retry = 1, timeout = "20s",
            rate = "10/s", priority = class)]
async fn routed_hedge(
    target: &str,
    class: Priority,
    starts: &Starts<String>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(target.to_owned());
    if target == "a" {
        sleep(Duration::from_secs(15)).await;
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_critical_calls_routed_hedge_waits_as_critical() {
    let starts = Starts::new();
    let fill = join_all((0..20).map(|_| routed_hedge("x", Priority::Default, &starts)));
    let critical = routed_hedge("a", Priority::Critical, &starts);
    let (fill, critical) = tokio::join!(fill, critical);
    assert!(fill.iter().all(Result::is_ok) && critical.is_ok());
    assert_eq!(starts.of(&"a".into()), [MS(100)]);
    let b = starts.of(&"b".into());
    assert!(
        b.first().is_some_and(|b| *b <= MS(300)),
        "the hedge started at {b:?}"
    );
}

#[resilient(rate = "10/s", fair = tenant, max_keys = 2)]
async fn two_lanes(tenant: &str, starts: &Starts<String>) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_newcomer_past_max_keys_takes_the_overflow_lanes_turn() {
    let starts = Starts::new();
    let heavy = join_all((0..50).map(|_| two_lanes("heavy", &starts)));
    let light = two_lanes("light", &starts);
    let late = at(MS(150), || two_lanes("late", &starts));
    let (heavy, light, late) = tokio::join!(heavy, light, late);
    assert!(heavy.iter().all(Result::is_ok) && light.is_ok() && late.is_ok());
    let late = starts.of(&"late".into());
    assert!(late[0] <= MS(500), "started at {late:?}");
}

#[resilient(rate = "10/s", priority = class)]
async fn throttled(class: Priority, id: u32, starts: &Starts<u32>) -> Result<(), ApiError> {
    let _ = class;
    starts.add(id);
    if id == 0 {
        sleep(MS(50)).await;
        return Err(ApiError::Throttled(MS(500)));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_throttle_keeps_the_waiters_in_arrival_order() {
    let starts = Starts::new();
    let first = throttled(Priority::Default, 0, &starts);
    let rest = join_all((1..=5).map(|id| throttled(Priority::Default, id, &starts)));
    let (first, rest) = tokio::join!(first, rest);
    assert!(first.is_err() && rest.iter().all(Result::is_ok));
    let mut order: Vec<_> = (1..=5u32).map(|id| (starts.of(&id)[0], id)).collect();
    order.sort();
    let ids: Vec<_> = order.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5], "{order:?}");
}

#[resilient(rate = "10/s, batch 1%", priority = class)]
async fn aged_batch(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

/// 60 default calls queue at once beside 5 batch calls, and one more default call comes
/// every 500 ms (so the share holds batch calls back): aging makes a batch call next every
/// ninth slot, and from the second on its place in the share is 10 s away.
#[tokio::test(start_paused = true)]
async fn an_aged_batch_call_waiting_for_its_share_leaves_no_slot_idle() {
    let starts = Starts::new();
    let queued = join_all((0..60).map(|_| aged_batch(Priority::Default, &starts)));
    let steady =
        join_all((0..12).map(|n| at(MS(500 * n), || aged_batch(Priority::Default, &starts))));
    let batch = join_all((0..5).map(|_| aged_batch(Priority::Batch, &starts)));
    let (queued, steady, batch) = tokio::join!(queued, steady, batch);
    assert!(queued
        .iter()
        .chain(&steady)
        .chain(&batch)
        .all(Result::is_ok));
    let within = (starts.of(&Priority::Default).iter())
        .filter(|at| **at < Duration::from_secs(6))
        .count();
    // 60 slots in 6 s, one of them the first batch call's.
    assert!(within >= 58, "{within} default starts in the first 6 s");
}

/// Each test has its own function, and so its own gate: tests run side by side.
#[resilient(rate = "10/s, batch 1%", priority = class)]
async fn held_batch(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

/// 60 default calls queue at once beside 10 batch calls: from one period on no default call
/// arrives, but they still wait.
#[tokio::test(start_paused = true)]
async fn calls_still_waiting_hold_batch_calls_to_their_share() {
    let starts = Starts::new();
    let defaults = join_all((0..60).map(|_| held_batch(Priority::Default, &starts)));
    let batch = join_all((0..10).map(|_| {
        timeout(
            Duration::from_secs(30),
            held_batch(Priority::Batch, &starts),
        )
    }));
    let (defaults, _) = tokio::join!(defaults, batch);
    assert!(defaults.iter().all(Result::is_ok));
    let last = *starts.of(&Priority::Default).last().unwrap();
    let batch = starts.of(&Priority::Batch);
    let before = batch.iter().filter(|at| **at < last).count();
    // 1 % of 10/s is one call in 10 s.
    assert!(
        before <= 1,
        "{before} batch starts while defaults waited: {batch:?}"
    );
}

#[resilient(bulkhead = 1, bulkhead_queue = 10, priority = class)]
async fn one_place(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

/// The next in an ordered bulkhead queue is left unpolled (a `select!` branch not polled):
/// the place freed for it goes on to the others.
#[tokio::test(start_paused = true)]
async fn a_bulkhead_queues_next_left_unpolled_does_not_keep_the_place() {
    let starts = Starts::new();
    let holder = one_place(Priority::Default, &starts);
    let mut stalled = Box::pin(one_place(Priority::Critical, &starts));
    let live = async {
        sleep(MS(10)).await;
        assert!(futures::poll!(stalled.as_mut()).is_pending());
        let origin = Instant::now();
        let live = timeout(
            Duration::from_secs(30),
            one_place(Priority::Default, &starts),
        )
        .await;
        (live, origin.elapsed())
    };
    let (held, (live, waited)) = tokio::join!(holder, live);
    assert!(held.is_ok());
    assert!(
        live.is_ok_and(|r| r.is_ok()),
        "a live caller waited {waited:?}"
    );
    // The place came back at 1 s; the stalled next was passed over SLOT_MISSED later.
    let defaults = starts.of(&Priority::Default);
    assert_eq!(defaults, [MS(0), MS(1_100)]);
}
