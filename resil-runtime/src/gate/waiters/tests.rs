use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

/// Polls `turn`, counting the polls in `polls`; a runaway count is a spin.
async fn counted<F: Future>(turn: F, polls: &AtomicUsize) -> F::Output {
    let mut turn = std::pin::pin!(turn);
    std::future::poll_fn(|cx| {
        assert!(
            polls.fetch_add(1, Ordering::Relaxed) < 1_000,
            "the waiters spin"
        );
        turn.as_mut().poll(cx)
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_next_waiting_for_its_share_and_its_watcher_in_one_task_do_not_spin() {
    let gate = RateGate::new(10, Duration::from_secs(1), 1)
        .unwrap()
        .ordered(0)
        .batch_share(50)
        .unwrap();
    let share = gate.batch().unwrap();
    // Another class came, and the gate's and the share's free places are taken.
    assert!(!share.holds_back(Priority::Default));
    gate.reserve_slot(1, None).unwrap();
    share.reserve(1, None).unwrap();
    let batch = Place::new(Priority::Batch, 0);
    let next = Turn::join(&gate, batch, None, 1).unwrap();
    let watcher = Turn::join(&gate, batch, None, 1).unwrap();
    let polls = AtomicUsize::new(0);
    // The watcher polled first: the next's wait for its share wakes it, in the same task.
    let (watched, next) =
        futures::future::join(counted(watcher, &polls), counted(next, &polls)).await;
    assert!(watched.is_ok() && next.is_ok());
    assert!(polls.load(Ordering::Relaxed) < 20);
}

#[tokio::test(start_paused = true)]
async fn a_next_left_unpolled_is_passed_over_by_its_watcher() {
    let gate = RateGate::new(10, Duration::from_secs(1), 1)
        .unwrap()
        .ordered(0);
    gate.reserve_slot(1, None).unwrap();
    let place = Place::default();
    let origin = Instant::now();
    let mut stalled = Box::pin(Turn::join(&gate, place, None, 1).unwrap());
    let watcher = Turn::join(&gate, place, None, 1).unwrap();
    // The next books the slot at 100 ms, then is not polled again for a while.
    assert!(futures::poll!(stalled.as_mut()).is_pending());
    tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("the watcher waited for ever behind a next left unpolled")
        .unwrap();
    // Passed over once the slot was late by SLOT_MISSED: its slot went back, and the
    // watcher took the gate's next.
    assert_eq!(origin.elapsed(), Duration::from_millis(200));
    // The one passed over waits again, last, and takes a slot of its own.
    stalled.await.unwrap();
    assert_eq!(origin.elapsed(), Duration::from_millis(300));
}
