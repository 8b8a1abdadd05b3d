//! The waiting rooms (`priority`, `fair`, a batch share, an ordered bulkhead queue) under the
//! schedules of a second hostile review, through the public API: callers left unpolled in a
//! full queue or four in a row, a stalled caller aside for its share, a share let go, a
//! share place counted once, an exact count ahead of a `fair` newcomer, an adaptive
//! bulkhead's decrease. Each test but the two controls failed on 85cec44.

mod support;

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::{at, ApiError, Starts};
use tokio::time::{sleep, sleep_until, timeout, Instant};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Polls `fut` until `until`, then leaves it unpolled but alive (a `select!` branch not
/// polled again): `None` if it had not finished.
async fn poll_until<F: Future + Unpin>(fut: &mut F, until: Instant) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = fut => Some(out),
        _ = sleep_until(until) => None,
    }
}

// ---------------------------------------------------------------------------------------
// 1. Bulkhead queue of 1: one next left unpolled locked the bulkhead for every caller.

#[resilient(bulkhead = 1, bulkhead_queue = 1, priority = class)]
async fn small_queue(
    class: Priority,
    starts: &Starts<&'static str>,
    label: &'static str,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_stalled_next_in_a_full_queue_does_not_lock_the_bulkhead() {
    let starts = Starts::new();
    let origin = Instant::now();
    let mut stalled = Box::pin(at(MS(10), || {
        small_queue(Priority::Default, &starts, "stalled")
    }));
    let holder = small_queue(Priority::Default, &starts, "holder");
    let (held, left) = tokio::join!(holder, poll_until(&mut stalled, origin + MS(500)));
    assert!(held.is_ok() && left.is_none());
    // The place came back at 1 s and was handed to the room, whose only waiter is left
    // unpolled. Callers that come later:
    let mut outcomes = Vec::new();
    for n in 0..5u64 {
        sleep_until(origin + Duration::from_secs(2 + 2 * n)).await;
        let result = small_queue(Priority::Critical, &starts, "late").await;
        outcomes.push((origin.elapsed(), result.map_err(|e| e.kind())));
    }
    assert!(
        outcomes.iter().any(|(_, r)| r.is_ok()),
        "every later caller refused for 10 s with nothing in flight: {outcomes:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 2. A batch call aside for its share, left unpolled, after a watcher passed over a
//    stalled default next: the batch class waited for ever.

#[resilient(rate = "10/s, batch 1%", priority = class)]
async fn aside(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_stalled_aside_batch_call_does_not_hold_its_class_for_ever() {
    let starts = Starts::new();
    let origin = Instant::now();
    // A: a batch call whose turn comes at 100 ms; its place in the 1 % share is at 10 s,
    // so it steps aside; it is left unpolled from 1 s on.
    let mut a = Box::pin(at(MS(2), || aside(Priority::Batch, "a", &starts)));
    // A default call that becomes next at 501 ms and is left unpolled from 550 ms on.
    let mut stalled = Box::pin(at(MS(501), || aside(Priority::Default, "stalled", &starts)));
    let b = at(MS(3), || {
        timeout(
            Duration::from_secs(60),
            aside(Priority::Batch, "b", &starts),
        )
    });
    let (d0, b1, _, dx, _, live, b) = tokio::join!(
        aside(Priority::Default, "d0", &starts),
        at(MS(1), || aside(Priority::Batch, "b1", &starts)),
        poll_until(&mut a, origin + MS(1_000)),
        at(MS(500), || aside(Priority::Default, "dx", &starts)),
        poll_until(&mut stalled, origin + MS(550)),
        at(MS(502), || aside(Priority::Default, "live", &starts)),
        b,
    );
    assert!(d0.is_ok() && b1.is_ok() && dx.is_ok() && live.is_ok());
    let seen: Vec<_> = ["d0", "b1", "a", "dx", "stalled", "live", "b"]
        .iter()
        .map(|l| (*l, starts.of(l)))
        .collect();
    assert!(
        b.is_ok(),
        "the batch call behind a stalled aside waited 60 s and never started: {seen:?}"
    );
}

/// Control: the same schedule without the stalled default call; b starts.
#[resilient(rate = "10/s, batch 1%", priority = class)]
async fn aside_control(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn control_a_stalled_aside_alone_is_passed_over() {
    let starts = Starts::new();
    let origin = Instant::now();
    let mut a = Box::pin(at(MS(2), || aside_control(Priority::Batch, "a", &starts)));
    let b = at(MS(3), || {
        timeout(
            Duration::from_secs(60),
            aside_control(Priority::Batch, "b", &starts),
        )
    });
    let (_, _, _, _, _, b) = tokio::join!(
        aside_control(Priority::Default, "d0", &starts),
        at(MS(1), || aside_control(Priority::Batch, "b1", &starts)),
        poll_until(&mut a, origin + MS(1_000)),
        at(MS(500), || aside_control(Priority::Default, "dx", &starts)),
        at(MS(502), || aside_control(
            Priority::Default,
            "live",
            &starts
        )),
        b,
    );
    assert!(b.is_ok(), "{:?}", starts.of(&"b"));
}

// ---------------------------------------------------------------------------------------
// 3. Four waiters left unpolled in a row (the next and its three watchers) hold a live
//    caller behind them: it waited for ever.

#[resilient(rate = "10/s", priority = class)]
async fn plain(class: Priority, starts: &Starts<Priority>) -> Result<(), ApiError> {
    starts.add(class);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn four_waiters_left_unpolled_in_a_row_do_not_hold_the_room() {
    let starts = Starts::new();
    plain(Priority::Default, &starts).await.unwrap();
    let mut stalled: Vec<_> = (0..4)
        .map(|_| Box::pin(plain(Priority::Default, &starts)))
        .collect();
    for waiter in &mut stalled {
        assert!(futures::poll!(waiter.as_mut()).is_pending());
    }
    let origin = Instant::now();
    let live = timeout(Duration::from_secs(30), plain(Priority::Default, &starts)).await;
    assert!(live.is_ok(), "a live caller waited {:?}", origin.elapsed());
    // A waiter that watches nothing looks once a second whether the watchers stalled too,
    // and passes them over with the next: the live caller starts within two seconds.
    assert!(
        origin.elapsed() <= Duration::from_secs(2),
        "{:?}",
        origin.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// 4. fair: a count ahead that left out the lanes served before the newcomer's own accepted
//    callers that could not make their deadline: they waited, and failed at the deadline.

#[resilient(rate = "10/s", fair = tenant, max_keys = 100, deadline = "4050ms")]
async fn tenants(tenant: u32, starts: &Starts<u32>) -> Result<(), ApiError> {
    starts.add(tenant);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_fair_caller_whose_turn_is_past_its_deadline_is_refused_at_once() {
    let starts = Starts::new();
    let origin = Instant::now();
    // At 0 s: tenants 1..=13 three calls each (tenant 1's first takes the free slot), tenant
    // 14 two: 40 waiters, served at 0.1 .. 4.0 s, all within their 4.05 s deadline.
    let fill = (1..=13u32)
        .flat_map(|tenant| std::iter::repeat_n(tenant, 3))
        .chain([14, 14]);
    let fill = join_all(fill.map(|tenant| tenants(tenant, &starts)));
    // At 5 ms, nothing after it: tenant 14's third call is served after rounds one and two
    // of all 14 lanes (40 waiters): 4.1 s, past its deadline (4.055 s).
    let probe = at(MS(5), || async {
        let result = tenants(14, &starts).await;
        (result.map_err(|e| e.kind()), origin.elapsed())
    });
    let (fill, (probe, when)) = tokio::join!(fill, probe);
    assert!(fill.iter().all(Result::is_ok));
    assert!(
        probe.is_ok() || when <= MS(10),
        "tenant 14's third call: {probe:?} at {when:?}, after waiting (last fill start {:?})",
        starts.all().last()
    );
}

// ---------------------------------------------------------------------------------------
// 5. A batch newcomer's wait for its share counts the place of a batch call that already
//    took it twice: it was refused at once though served within its deadline.

#[resilient(rate = "10/s, batch 1%", priority = class, deadline = "15s")]
async fn share_twice(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_batch_call_that_can_make_its_deadline_is_not_refused() {
    let starts = Starts::new();
    let origin = Instant::now();
    let (d0, b1, a) = tokio::join!(
        share_twice(Priority::Default, "d0", &starts),
        at(MS(1), || share_twice(Priority::Batch, "b1", &starts)),
        at(MS(2), || async {
            let r = share_twice(Priority::Batch, "a", &starts).await;
            (r, origin.elapsed())
        }),
    );
    assert!(d0.is_ok() && b1.is_ok());
    // b1 took the share's place at once; the next one is 10 s later, within 15 s.
    let (a, when) = a;
    assert!(
        a.is_ok(),
        "refused at {when:?}: {a:?} (b1 started {:?})",
        starts.of(&"b1")
    );
}

// ---------------------------------------------------------------------------------------
// 6. A batch call aside for its share place kept waiting for it after the others left:
//    the gate idled, and a batch newcomer overtook it.

#[resilient(rate = "10/s, batch 1%", priority = class)]
async fn let_go(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_batch_call_aside_is_let_go_when_the_others_leave() {
    let starts = Starts::new();
    let (d0, b1, a, b, n) = tokio::join!(
        let_go(Priority::Default, "d0", &starts),
        at(MS(1), || let_go(Priority::Batch, "b1", &starts)),
        at(MS(2), || let_go(Priority::Batch, "a", &starts)),
        at(MS(3), || let_go(Priority::Batch, "b", &starts)),
        at(MS(2_000), || let_go(Priority::Batch, "newcomer", &starts)),
    );
    assert!(d0.is_ok() && b1.is_ok() && a.is_ok() && b.is_ok() && n.is_ok());
    let (a, b, n) = (
        starts.of(&"a")[0],
        starts.of(&"b")[0],
        starts.of(&"newcomer")[0],
    );
    // No call of another class since 0 s: the share holds nothing back from 1 s on.
    assert!(
        a < n && b < n && a <= MS(1_200),
        "a started at {a:?}, b at {b:?}, the newcomer (came at 2 s) at {n:?}; the gate idled"
    );
}

// ---------------------------------------------------------------------------------------
// 7. Adaptive bulkhead: a decrease took a place handed to the room but left the room's
//    `expected` behind; the next place handed was then "late" at once, and a watcher polled
//    before the live next passed it over.

static Y_TRIES: AtomicU32 = AtomicU32::new(0);

#[resilient(bulkhead = "adaptive 1..2", bulkhead_queue = 10, priority = class, retry = 1,
            backoff = "1s..1s", jitter = "none")]
async fn adaptive_room(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    hold_or_fail(label, &Y_TRIES).await
}

/// `y` fails after a second, then at once; the others answer after a second.
async fn hold_or_fail(label: &str, tries: &AtomicU32) -> Result<(), ApiError> {
    match label {
        "y" if tries.fetch_add(1, Ordering::SeqCst) == 0 => {
            sleep(Duration::from_secs(1)).await;
            Err(ApiError::Busy)
        }
        "y" => Err(ApiError::Busy),
        _ => {
            sleep(Duration::from_secs(1)).await;
            Ok(())
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_live_critical_next_is_not_passed_over_after_an_adaptive_decrease() {
    let starts = Starts::new();
    // x and y hold the two places; y fails at 1 s (the limit halves to 1) and is retried
    // 1 s later, holding its place, and fails again (the limit stays at its minimum, 1).
    let holders = futures::future::join(
        adaptive_room(Priority::Default, "x", &starts),
        adaptive_room(Priority::Default, "y", &starts),
    );
    // A critical caller and a default one queue, in one task, the default one polled first.
    let queued = at(MS(1), || {
        futures::future::join(
            adaptive_room(Priority::Default, "w", &starts),
            adaptive_room(Priority::Critical, "n", &starts),
        )
    });
    let ((x, y), (w, n)) = tokio::join!(holders, queued);
    assert!(x.is_ok() && y.is_err() && w.is_ok() && n.is_ok());
    let (n, w) = (starts.of(&"n"), starts.of(&"w"));
    assert!(
        n[0] <= w[0],
        "the live critical next started at {n:?}, the default behind it at {w:?}"
    );
}

/// Control for 7: the same, the critical caller polled first in its task: it starts at 2 s.
static Y2_TRIES: AtomicU32 = AtomicU32::new(0);

#[resilient(bulkhead = "adaptive 1..2", bulkhead_queue = 10, priority = class, retry = 1,
            backoff = "1s..1s", jitter = "none")]
async fn adaptive_control(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    hold_or_fail(label, &Y2_TRIES).await
}

#[tokio::test(start_paused = true)]
async fn control_the_critical_next_polled_first_takes_the_place() {
    let starts = Starts::new();
    let holders = futures::future::join(
        adaptive_control(Priority::Default, "x", &starts),
        adaptive_control(Priority::Default, "y", &starts),
    );
    let queued = at(MS(1), || {
        futures::future::join(
            adaptive_control(Priority::Critical, "n", &starts),
            adaptive_control(Priority::Default, "w", &starts),
        )
    });
    let _ = tokio::join!(holders, queued);
    assert_eq!(starts.of(&"n"), [MS(2_000)]);
}

// ---------------------------------------------------------------------------------------
// 8. A waiter made next by the one before it being served (not by a slot booked for it),
//    then left unpolled: no one watched it, and the room, of all calls or a key's, stopped.
//    (Found by a third review, on the commit before its fix.)

#[resilient(rate = "10/s", priority = class)]
async fn served_then_stalled(
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = class;
    starts.add(label);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_next_made_next_by_a_serve_and_left_unpolled_is_passed_over() {
    let starts = Starts::new();
    let origin = Instant::now();
    let call = |label| served_then_stalled(Priority::Default, label, &starts);
    let mut stalled = Box::pin(at(MS(2), || call("stalled")));
    let (d0, w1, left, w3) = tokio::join!(
        call("d0"),
        at(MS(1), || call("w1")),
        poll_until(&mut stalled, origin + MS(50)),
        at(MS(3), || timeout(Duration::from_secs(10), call("w3"))),
    );
    assert!(d0.is_ok() && w1.is_ok() && left.is_none());
    assert!(w3.is_ok_and(|w3| w3.is_ok()), "{:?}", starts.all());
    // w1 served at 100 ms, the stalled next watched from then and passed over 100 ms later.
    assert_eq!(starts.of(&"w3"), [MS(200)]);
}

#[resilient(rate = "10/s per key", key = model, priority = class, max_keys = 4)]
async fn served_then_stalled_per_key(
    model: u32,
    class: Priority,
    label: &'static str,
    starts: &Starts<&'static str>,
) -> Result<(), ApiError> {
    let _ = (model, class);
    starts.add(label);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_keys_next_made_next_by_a_serve_and_left_unpolled_is_passed_over() {
    let starts = Starts::new();
    let origin = Instant::now();
    let call = |model, label| served_then_stalled_per_key(model, Priority::Default, label, &starts);
    let mut stalled = Box::pin(at(MS(2), || call(7, "stalled")));
    // 40 other keys come meanwhile, past `max_keys`.
    let churn = at(MS(5), || join_all((100..140).map(|key| call(key, "churn"))));
    let (d0, w1, left, w3, churn) = tokio::join!(
        call(7, "d0"),
        at(MS(1), || call(7, "w1")),
        poll_until(&mut stalled, origin + MS(50)),
        at(MS(3), || timeout(Duration::from_secs(10), call(7, "w3"))),
        churn,
    );
    assert!(d0.is_ok() && w1.is_ok() && left.is_none());
    assert!(churn.iter().all(Result::is_ok));
    assert!(w3.is_ok_and(|w3| w3.is_ok()), "{:?}", starts.of(&"w3"));
    assert_eq!(starts.of(&"w3"), [MS(200)]);
}
