//! What an answer may and may not do to the slots booked ahead of a learning gate when it
//! places them again (issue 44, item 8, and what a reading review found of it): never before
//! a throttle's hold, never before their callers look, and never lose the calls in flight
//! however many wait.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use resil_runtime::{operation, Policy, Priority};
use tokio::time::{sleep, Instant};

use super::learn_bounds::{ordered_if, tokens_answer};
use super::learn_hostile::{answers, requests, said, MS, SEC};
use super::learn_in_turn::once;
use crate::common::TestError;

/// Records when each call started, from an origin.
struct Started {
    origin: Instant,
    at: Mutex<Vec<Duration>>,
}

impl Started {
    fn new() -> Self {
        Started {
            origin: Instant::now(),
            at: Mutex::new(Vec::new()),
        }
    }

    fn mark(&self) {
        self.at.lock().unwrap().push(self.origin.elapsed());
    }

    fn times(&self) -> Vec<Duration> {
        let mut at = self.at.lock().unwrap().clone();
        at.sort();
        at
    }
}

/// An auto gate: A and B in flight; A's 429 asks for 30 s and holds the gate; C and D book
/// their slots at the hold's end; B's answer (200, 40 left) placed C and D again at once,
/// and they called within a second, undoing the hold. Placed again, a slot stays after the
/// hold.
#[tokio::test(start_paused = true)]
async fn an_answer_in_flight_does_not_place_slots_before_a_throttles_hold() {
    let policy = Policy::builder().rate_learn().build().unwrap();
    // The probe: 50 left of 100 until a reset a minute away.
    policy
        .run(|| answers(said(Some(100), 50, 60 * SEC)))
        .await
        .unwrap();
    let started = Started::new();
    let (policy, started) = (&policy, &started);
    let a = async {
        let _ = policy
            .run(|| async {
                sleep(10 * MS).await;
                Err::<(), _>(TestError::Throttled(30 * SEC))
            })
            .await;
    };
    let b = async {
        policy
            .run(|| async {
                sleep(20 * MS).await;
                operation::report_limits(requests(said(Some(100), 40, 60 * SEC)));
                Ok::<(), TestError>(())
            })
            .await
            .unwrap();
    };
    let late = |_| async move {
        sleep(15 * MS).await;
        policy
            .run(|| async {
                started.mark();
                Ok::<(), TestError>(())
            })
            .await
            .unwrap();
    };
    futures::join!(a, b, join_all((0..2).map(late)));
    let times = started.times();
    assert!(
        times.iter().all(|at| *at >= 30 * SEC),
        "C and D called at {times:?}, before the hold asked for by A's 429 ended (30 s)"
    );
}

/// `rate = "10/s"`, `learn = true` (burst 1): one answer's slow pace (10 per 2 s) booked 14
/// callers 200 ms apart; the next said the pace was back, and placed them again 100 ms apart,
/// but a caller looks at its slot at most a second after it booked: the six placed before
/// that second all found their slot past and called at once, 11 calls in one second. A slot
/// is placed again no sooner than its caller looks.
#[tokio::test(start_paused = true)]
async fn slots_placed_again_start_when_their_callers_look_never_all_at_once() {
    let policy = Policy::builder()
        .rate(10, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    policy
        .run(|| answers(said(Some(10), 9, 2 * SEC)))
        .await
        .unwrap();
    sleep(10 * SEC).await;
    let started = Started::new();
    let (policy, started) = (&policy, &started);
    join_all((0..15).map(|_| async move {
        policy
            .run(|| async {
                started.mark();
                sleep(20 * MS).await;
                operation::report_limits(requests(said(Some(100), 99, SEC)));
                Ok::<(), TestError>(())
            })
            .await
            .unwrap();
    }))
    .await;
    let times = started.times();
    let closest = times.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(
        closest >= 100 * MS,
        "two calls {closest:?} apart through a gate of 10/s with burst 1: {times:?}"
    );
}

/// The book of a learning gate kept 64 slots, dropping the earliest: with 80 callers
/// waiting, the call in flight was dropped from it, and its answer (the pace back to the
/// declared 100/s after a slow one of 1/s) placed nobody again: the last waited 79 s. The
/// slots of calls in flight are kept however many wait.
#[tokio::test(start_paused = true)]
async fn more_than_sixty_four_waiters_are_placed_again_by_the_answer_in_flight() {
    let policy = Policy::builder()
        .rate(100, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    policy
        .run(|| answers(said(Some(10), 9, 10 * SEC)))
        .await
        .unwrap();
    sleep(10 * SEC).await;
    let origin = Instant::now();
    let policy = &policy;
    let waits = join_all((0..80).map(|_| async move {
        let waited = Mutex::new(Duration::ZERO);
        policy
            .run(|| async {
                *waited.lock().unwrap() = origin.elapsed();
                sleep(20 * MS).await;
                operation::report_limits(requests(said(Some(1000), 999, SEC)));
                Ok::<(), TestError>(())
            })
            .await
            .unwrap();
        waited.into_inner().unwrap()
    }))
    .await;
    let longest = waits.iter().max().unwrap();
    assert!(
        *longest <= 3 * SEC,
        "the last of 80 callers waited {longest:?}"
    );
}

/// A token gate that learns (declared at 100 000 a minute with burst 100, or auto), told
/// once "100 tokens a minute, none left": ten callers of 100 tokens came and were booked a
/// window apart from the reset; eight gave up within a second, and the two left kept their
/// slots nine windows away (they started at 540 s), the gate idle all along: no call was in
/// flight to bring the answer that would place them again (found in a stress schedule that
/// stalled 70 minutes). The first caller left starts at the reset, the next at the pace its
/// answer states. Served by priority, the gate's waiting room books one slot at a time for
/// whoever is next, and was right already: kept as a guard.
#[tokio::test(start_paused = true)]
async fn callers_behind_those_that_gave_up_are_not_held_by_their_slots() {
    for (auto, ordered) in [(false, false), (false, true), (true, false), (true, true)] {
        let builder = match auto {
            false => Policy::builder()
                .token_rate(100_000, 60 * SEC, 100)
                .token_rate_learn(),
            true => Policy::builder().token_rate_learn(),
        };
        let policy = ordered_if(builder, ordered).build().unwrap();
        let times = behind_those_that_gave_up(&policy).await;
        assert_eq!(
            times.len(),
            2,
            "only the two patient callers started: {times:?}"
        );
        assert!(
            times[1] <= 61 * SEC,
            "the callers left started at {times:?}, a window after the answer sufficed \
             (auto: {auto}, ordered: {ordered})"
        );
    }
}

/// When the callers that did not give up started, in the schedule of the test above.
async fn behind_those_that_gave_up(policy: &Policy) -> Vec<Duration> {
    for quota in [
        said(Some(100_000), 99_900, 60 * SEC),
        said(Some(100), 0, 60 * SEC),
    ] {
        once(
            policy.execute(),
            Priority::Default,
            100,
            tokens_answer(quota),
        )
        .await
        .unwrap();
    }
    let started = Started::new();
    let started = &started;
    join_all((0..10).map(|n| async move {
        let call = async {
            started.mark();
            tokens_answer(said(Some(100_000), 99_000, 60 * SEC)).await
        };
        let call = once(policy.execute(), Priority::Default, 100, call);
        // Eight of the ten give up after a second.
        let patience = if n < 8 { SEC } else { 3_600 * SEC };
        let _ = tokio::time::timeout(patience, call).await;
    }))
    .await;
    started.times()
}

/// A hostile review of the above: an auto gate told "100 per second, 1 left" books B, C and D
/// at 1.00, 1.01 and 1.02 s; A's answer at 0.5 s says 50 are left until 10.5 s (47 for at
/// once, the schedule resuming at the reset); C gives up at 0.6 s, and placing D again pulled
/// the schedule back from the reset: of 100 callers at 0.7 s, 53 more than were left started
/// before it (102 in all). At most the 50 said left start before the reset.
#[tokio::test(start_paused = true)]
async fn a_give_up_does_not_pull_an_auto_gates_schedule_back_before_the_reset() {
    let policy = Policy::builder().rate_learn().build().unwrap();
    policy
        .run(|| answers(said(Some(100), 1, SEC)))
        .await
        .unwrap();
    let started = Started::new();
    let (policy, started) = (&policy, &started);
    let call = |body_ms: u32, said_after| async move {
        once(policy.execute(), Priority::Default, 1, async move {
            started.mark();
            sleep(body_ms * MS).await;
            if let Some(quota) = said_after {
                operation::report_limits(requests(quota));
            }
            Ok(())
        })
        .await
    };
    let a = call(500, Some(said(Some(100), 50, 10 * SEC)));
    let waiter = |patience| async move {
        sleep(MS / 10).await;
        let _ = tokio::time::timeout(patience, call(0, None)).await;
    };
    let late = async {
        sleep(700 * MS).await;
        join_all((0..100).map(|_| call(0, None))).await
    };
    let _ = futures::join!(
        a,
        waiter(3_600 * SEC),
        waiter(600 * MS),
        waiter(3_600 * SEC),
        late
    );
    let before_reset = (started.times().into_iter())
        .filter(|at| *at >= 500 * MS && *at < 10_500 * MS)
        .count();
    assert!(
        before_reset <= 50,
        "50 left until 10.5 s, {before_reset} started before"
    );
}

/// The same review: a declared token gate (100/s, burst 100) that learns, calls of 100
/// tokens: W0 starts at 0, W1 and W2 are booked at 1 and 2 s; W0's answer says 600 per 10 s
/// (1.667 s a call; W1 and W2 keep their slots, never later than promised). W1 gives up at
/// 0.5 s, and W2 was placed from where W1's slot began, at 1.001 s. Placed again, as an answer
/// would place it, W2 starts no sooner than 1.667 s after W0.
#[tokio::test(start_paused = true)]
async fn a_give_up_does_not_place_the_next_slot_faster_than_the_pace_learnt() {
    let policy = Policy::builder()
        .token_rate(100, SEC, 100)
        .token_rate_learn()
        .build()
        .unwrap();
    let started = Started::new();
    let (policy, started) = (&policy, &started);
    let w0 = once(policy.execute(), Priority::Default, 100, async {
        sleep(10 * MS).await;
        tokens_answer(said(Some(600), 300, 10 * SEC)).await
    });
    let w = |patience, marks: bool| async move {
        sleep(MS / 10).await;
        let call = once(policy.execute(), Priority::Default, 100, async move {
            if marks {
                started.mark();
            }
            Ok(())
        });
        let _ = tokio::time::timeout(patience, call).await;
    };
    let _ = futures::join!(w0, w(500 * MS, false), w(3_600 * SEC, true));
    let w2 = started.times()[0];
    assert!(
        w2 >= Duration::from_micros(1_666_666),
        "the pace learnt is 600 per 10 s, W0 started at 0: W2 at {w2:?}"
    );
}
