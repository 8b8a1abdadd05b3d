//! A shared request gate beside a shared token gate, in arrival order: of two slots the store
//! grants far apart, the earlier goes back and is asked for again when the later comes, as
//! the local gates do (`two_gates.rs`). Held, it counted the call where it did not start, and
//! the calls after it in its gate started within a period of the call's late start: more
//! than the gate's ceiling across the instances (the simulator's shared two-gate class,
//! issue 46). Paused clock, two instances of one `InMemory` store.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use resil_runtime::shared::InMemory;
use resil_runtime::{Keyed, Next, Policy, PolicyBuilder, Rejected};
use tokio::time::Instant;

use super::learn_bounds;
use super::learn_hostile::{MS, SEC};
use super::two_gates::per_key_breaches;

/// The schedules of `two_gates.rs`'s request gate of all calls beside a token gate per key,
/// short of the demand, their callers spread over two instances of the shared gates: every
/// ceiling holds over the starts of both together.
#[tokio::test(start_paused = true)]
async fn shared_per_key_token_gates_beside_a_shared_gate_of_all_calls_keep_every_ceiling() {
    let mut failures = Vec::new();
    for seed in 0..150 {
        let store = InMemory::new();
        let two = |policy: &dyn Fn() -> PolicyBuilder<Keyed>| {
            [store.clone(), store.instance()]
                .iter()
                .map(|store| {
                    let policy = policy().name("shared::two_gates");
                    policy.shared_in(store).build().unwrap()
                })
                .collect()
        };
        failures.extend(per_key_breaches(seed, two).await);
    }
    assert!(
        failures.is_empty(),
        "{} breaches: {failures:#?}",
        failures.len()
    );
}

/// The class at its smallest: a shared `10/s` request gate (burst 1) beside a shared
/// `1000/s` token gate per key, two instances. On key A, X takes its key's token burst at 0;
/// Y (1 000 tokens, at 0) has its request slot at 0.1 s and its tokens at 1 s. On key B, in
/// the other instance, a call of 1 token every 0.1 s from 0.1 s. Held, Y's request slot
/// counted it at 0.1 s and it started at 1 s beside B's calls, which took the slots after
/// it: 11 starts within a second where 10 may (the paused clock starts each call at its
/// slot). Given back, B's calls take 0.1 s to 0.9 s and Y the slot at 1 s.
#[tokio::test(start_paused = true)]
async fn a_request_slot_granted_far_before_its_tokens_goes_back() {
    let starts = two_instances(&[(0, 1000), (0, 1000)], (1..=15).map(|i| i * 100)).await;
    assert_eq!(starts.of("A"), [0, 1000]);
    let most = starts.most_in(None, SEC);
    assert!(most <= 10, "{most} starts within 1 s: {starts:?}");
}

/// The same gates, the other way round: Y's tokens, held while it asks for the request slot
/// that went back, are its key's latest when that slot comes 0.6 s later (B's 15 calls, in
/// the other instance, took the request gate until 1.5 s): they go back, and are asked for
/// again when the request slot comes. Held, Y started at 1.6 s on tokens counted at 1 s, and
/// Z (1 000 tokens on key A, at 1.1 s) at 2 s after them: 2 000 tokens within a second where
/// 1 999 may. Swapped, Y starts at 1.6 s and Z at 2.6 s.
#[tokio::test(start_paused = true)]
async fn held_units_that_are_their_gates_latest_go_back_while_the_request_slot_comes() {
    let a = [(0, 1000), (0, 1000), (1100, 1000)];
    let starts = two_instances(&a, (0..15).map(|_| 1)).await;
    assert_eq!(starts.of("A"), [0, 1600, 2600]);
    let most = starts.most_in(Some("A"), SEC);
    assert!(most < 2000, "{most} tokens of key A within 1 s: {starts:?}");
    assert!(starts.most_in(None, SEC) <= 10, "{starts:?}");
}

/// Calls on key A (when, in ms, and their units) through one instance of [`smallest`], and
/// calls of 1 token on key B (when) through another: when each started.
async fn two_instances(a: &[(u64, u64)], b: impl Iterator<Item = u64>) -> Starts {
    let store = InMemory::new();
    let (here, there) = (smallest(&store), smallest(&store.instance()));
    let starts = Starts::default();
    let a = join_all(
        a.iter()
            .map(|&(at, cost)| starts.call(&here, "A", at, cost)),
    );
    let b = join_all(b.map(|at| starts.call(&there, "B", at, 1)));
    futures::join!(a, b);
    starts
}

/// One instance of a shared `10/s` request gate (burst 1) beside a shared `1000/s` token gate
/// per key (burst 1 000).
fn smallest(store: &InMemory) -> Policy<Keyed> {
    Policy::builder()
        .name("shared::smallest")
        .keyed("model")
        .rate(10, SEC, 1)
        .token_rate(1000, SEC, 1000)
        .token_rate_per_key()
        .deadline(60 * SEC)
        .shared_in(store)
        .build()
        .unwrap()
}

/// When each call started since the first was made, with its key and units.
#[derive(Debug)]
struct Starts(Instant, Mutex<Vec<(&'static str, Duration, u64)>>);

impl Default for Starts {
    fn default() -> Self {
        Starts(Instant::now(), Mutex::default())
    }
}

impl Starts {
    /// A call of `cost` units on `key` through `policy`, `at` ms after the origin.
    async fn call(&self, policy: &Policy<Keyed>, key: &'static str, at: u64, cost: u64) {
        tokio::time::sleep_until(self.0 + MS * at as u32).await;
        let mut execution = policy.execute_keyed::<str, Rejected>(key);
        execution.set_cost(cost);
        let body = async {
            self.1.lock().unwrap().push((key, self.0.elapsed(), cost));
            Ok::<_, Rejected>(())
        };
        assert!(matches!(execution.attempt(body).await, Next::Done(_)));
    }

    /// The starts of `key`, in ms, in order.
    fn of(&self, key: &str) -> Vec<u64> {
        let starts = self.1.lock().unwrap();
        let of = starts.iter().filter(|(k, ..)| *k == key);
        let mut at: Vec<_> = of.map(|(_, at, _)| at.as_millis() as u64).collect();
        at.sort();
        at
    }

    /// The most calls started within `period` (`None`), or units of `key`.
    fn most_in(&self, key: Option<&str>, period: Duration) -> u64 {
        let starts = self.1.lock().unwrap();
        let counted = starts
            .iter()
            .filter(|(k, ..)| key.is_none_or(|key| key == *k));
        let units = counted.map(|&(_, at, cost)| (at, if key.is_some() { cost } else { 1 }));
        learn_bounds::most_in(units.collect(), period)
    }
}
