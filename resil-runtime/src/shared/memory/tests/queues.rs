//! A queue of callers that gives up leaves a shared gate as it found it, whatever the store did
//! meanwhile (the simulator's `recovers_after_quiet`: after every caller gave up and a quiet
//! spell of two minutes, the next caller still waited minutes for its slot).

use super::*;

/// `waiting` callers of `policy`, each waiting for its slot, and a call after which each has
/// its slot (the first goes at once, the others wait in the store's schedule).
async fn queue(policy: &Arc<Policy>, waiting: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let tasks = (0..waiting)
        .map(|_| {
            let policy = Arc::clone(policy);
            tokio::spawn(async move {
                let _ = policy.run(|| async { Ok::<(), Error>(()) }).await;
            })
        })
        .collect();
    settle().await;
    tasks
}

/// Lets the spawned callers ask, be answered, and drop what they held.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// How long the next call through `policy` waits to start.
async fn next_start(policy: &Policy) -> Duration {
    let asked = Instant::now();
    let started = Mutex::new(None);
    policy
        .run(|| async {
            *started.lock().unwrap() = Some(asked.elapsed());
            Ok::<(), Error>(())
        })
        .await
        .unwrap();
    started.into_inner().unwrap().unwrap()
}

/// 30 callers of a 1/s shared gate wait for their slots in the store, the last 30 s ahead; the
/// store goes down and every caller gives up. Their slots were given back to a store that did
/// not answer, and were lost: back, the store's schedule still ran 30 s ahead and the next
/// caller waited 30 s for a gate nobody used. Kept, they go back once the store answers.
#[tokio::test(start_paused = true)]
async fn slots_given_back_while_the_store_was_down_go_back_when_it_answers() {
    let hub = InMemory::new();
    let policy = Arc::new(gated(&hub, false));
    let waiting = queue(&policy, 30).await;
    hub.set_available(false);
    for caller in &waiting {
        caller.abort();
    }
    settle().await;
    hub.set_available(true);
    let waited = next_start(&policy).await;
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
}

/// 30 callers of a 1/s shared gate wait for the store's slots (the local gate mirrors its
/// schedule, 30 s ahead). The store blips, and a caller meanwhile is granted the local gate's
/// next slot alone, 31 s ahead; the next reservation charged the store the whole local
/// schedule. Then every caller gave up. The charge was a jump in the store's schedule that no
/// slot owned: the schedule went back to it, not to now, and the next caller waited 31 s. Now
/// the charge is what is still held alone, and the slot that carried it takes it back with it.
#[tokio::test(start_paused = true)]
async fn a_charge_for_slots_granted_alone_goes_back_with_the_slot_that_carried_it() {
    let hub = InMemory::new();
    let policy = Arc::new(gated(&hub, false));
    let mut waiting = queue(&policy, 30).await;
    hub.set_available(false);
    waiting.extend(queue(&policy, 1).await);
    hub.set_available(true);
    waiting.extend(queue(&policy, 1).await);
    for caller in &waiting {
        caller.abort();
    }
    settle().await;
    let waited = next_start(&policy).await;
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
}

/// 100 callers of a shared 1/s gate that learns wait for the store's slots; every one gives up,
/// and the store goes down. The local gate had booked each slot the store granted as started
/// (at its grant), and forgot the oldest past 64 "calls in flight": their callers' giving up
/// found nothing to take back, and the local schedule stayed 35 s ahead for a gate nobody
/// used (the simulator's seeds 28796, 33141, 59021).
#[tokio::test(start_paused = true)]
async fn a_learning_gate_keeps_the_store_slots_it_mirrors_until_their_callers_give_up() {
    let hub = InMemory::new();
    let builder = Policy::builder()
        .name("memory::learning_queue")
        .rate(1, Duration::from_secs(1), 1)
        .rate_learn();
    let policy = Arc::new(instance(builder, hub.instance()));
    let waiting = queue(&policy, 100).await;
    for caller in &waiting {
        caller.abort();
    }
    settle().await;
    hub.set_available(false);
    let waited = next_start(&policy).await;
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
}
