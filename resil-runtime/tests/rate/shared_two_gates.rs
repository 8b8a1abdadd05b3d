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
use resil_runtime::{Keyed, Next, Policy, PolicyBuilder};
use tokio::time::Instant;

use super::common::TestError;
use super::learn_bounds;
use super::learn_hostile::{MS, SEC};
use super::two_gates::{one_call, per_key_breaches, two_gates};

/// The schedules of `two_gates.rs`'s request gate of all calls beside a token gate per key,
/// short of the demand, their callers spread over two instances of the shared gates: every
/// ceiling holds over the starts of both together. A guard: it held before the slots went
/// back too (the request gate keeps up in these schedules), and holds with them.
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
/// slot). Given back, B's calls take 0.1 s to 0.9 s and Y the slot at 1 s. The same when
/// either gate learns (its declared figures hold while no answer states the provider's).
#[tokio::test(start_paused = true)]
async fn a_request_slot_granted_far_before_its_tokens_goes_back() {
    for learns in [Learns::Neither, Learns::Rate, Learns::Tokens] {
        let b = (1..=15).map(|i| i * 100);
        let starts = two_instances(&[(0, 1000), (0, 1000)], b, learns).await;
        assert_eq!(starts.of("A"), [0, 1000], "{learns:?}");
        let most = starts.most_in(None, SEC);
        assert!(
            most <= 10,
            "{learns:?}: {most} starts within 1 s: {starts:?}"
        );
    }
}

/// Which gate of [`smallest`] learns the provider's limits from its answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Learns {
    Neither,
    Rate,
    Tokens,
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
    let starts = two_instances(&a, (0..15).map(|_| 1), Learns::Neither).await;
    assert_eq!(starts.of("A"), [0, 1600, 2600]);
    let most = starts.most_in(Some("A"), SEC);
    assert!(most < 2000, "{most} tokens of key A within 1 s: {starts:?}");
    assert!(starts.most_in(None, SEC) <= 10, "{starts:?}");
}

/// A hostile review's: a 429 on key B (`Retry-After: 5 s`) holds the request gate of all
/// calls, the hold reaching the store late (Redis sends it in the background). X, on key A,
/// gave its request slot back while its tokens came (1 s); asked for then, the request slot
/// came from a store that had not heard, and X started inside the hold. The question for the
/// slot that went back passes every check the first did: X waits for the hold's end.
#[tokio::test(start_paused = true)]
async fn the_slot_that_went_back_is_not_asked_for_through_a_throttles_hold() {
    let store = InMemory::new();
    store.delay_holds();
    let policy = smallest(&store, Learns::Neither);
    let starts = Starts::default();
    let (w, x, z) = futures::join!(
        starts.answered(&policy, ("A", 0, 1000), Ok(())),
        starts.answered(&policy, ("A", 0, 1000), Ok(())),
        starts.answered(&policy, ("B", 50, 1), Err(TestError::Throttled(5 * SEC))),
    );
    assert_eq!(w, Some(Duration::ZERO));
    let (x, z) = (x.unwrap(), z.unwrap());
    assert!(
        x >= z + 5 * SEC,
        "X started at {x:?}, in the hold from {z:?}: {starts:?}"
    );
}

/// A second hostile review's: a 429 in the other instance (Y, key A, `Retry-After: 3 s`)
/// holds the request gate of all calls; this instance (X) hears of it through the store, a
/// revocation with no length. P1 and P2 (1 000 tokens each on key B, at 0.1 and 0.2 s, behind
/// Y's 1 000 at 0) gave their request slots back while their tokens came (1 s, 2 s); asked
/// for then, the request slots came after the hold (3.5 s), far, and P1 and P2 kept their
/// tokens: with Q (1 000 tokens at 2.5 s) 3 000 tokens of key B within 40 ms, where 1 999
/// may. A hold on the gate whose slot went back, since it went back, swaps the two: the
/// held tokens go back and are asked for when the request slot comes.
#[tokio::test(start_paused = true)]
async fn a_hold_heard_from_another_instance_swaps_a_held_slot_for_the_one_that_went_back() {
    let store = InMemory::new();
    let instance = |store: &InMemory| {
        let policy = Policy::builder()
            .name("shared::heard")
            .keyed("model")
            .rate(50, SEC, 5);
        let policy = policy.token_rate(1000, SEC, 1000).token_rate_per_key();
        policy.deadline(60 * SEC).shared_in(store).build().unwrap()
    };
    let (x, y) = (instance(&store), instance(&store.instance()));
    let starts = Starts::default();
    futures::join!(
        starts.answered(&y, ("B", 0, 1000), Ok(())),
        starts.answered(&x, ("B", 100, 1000), Ok(())),
        starts.answered(&x, ("B", 200, 1000), Ok(())),
        starts.answered(&y, ("A", 500, 1), Err(TestError::Throttled(3 * SEC))),
        starts.answered(&x, ("B", 2500, 1000), Ok(())),
    );
    let most = starts.most_in(Some("B"), SEC);
    assert!(most < 2000, "{most} tokens of key B within 1 s: {starts:?}");
}

/// The same with a learning token gate, whose answer in the other instance holds it alone:
/// Y's call on key A is told at 0.2 s that no tokens are left for 3 s. P (1 token on key A,
/// at 0.1 s, this instance) had its tokens at once and its request slot at 1.6 s behind Y's
/// 15 calls on key B: its tokens went back, and asked for then came at 3.2 s. Kept, its
/// request slot started it at 3.2 s beside Y's calls that took the request slots after it:
/// 11 starts within a second where 10 may (a second hostile review, on the commit that first
/// deferred learning gates' slots). The hold heard since swaps them.
#[tokio::test(start_paused = true)]
async fn a_learning_gates_hold_heard_from_another_instance_swaps_the_held_slot() {
    use resil_runtime::{operation, ProviderLimits};
    let store = InMemory::new();
    let (x, y) = (
        smallest(&store, Learns::Tokens),
        smallest(&store.instance(), Learns::Tokens),
    );
    let starts = Starts::default();
    let told = async {
        tokio::time::sleep_until(starts.0 + MS).await;
        let mut execution = y.execute_keyed::<str, TestError>("A");
        let body = async {
            tokio::time::sleep(200 * MS).await;
            let tokens = Some(super::learn_hostile::said(Some(1000), 0, 3 * SEC));
            operation::report_limits(ProviderLimits {
                requests: None,
                tokens,
            });
            Ok::<_, TestError>(())
        };
        execution.attempt(body).await;
    };
    let b = |at: u64| starts.call(&y, "B", at, 1);
    futures::join!(
        told,
        starts.call(&x, "A", 100, 1),
        join_all((0..15).map(|_| b(10))),
        join_all((0..20).map(|_| b(1000))),
    );
    let most = starts.most_in(None, SEC);
    assert!(most <= 10, "{most} starts within 1 s: {starts:?}");
}

/// A hostile review's: a caller alone in its instance (X), beside an instance whose 200
/// callers keep both shared gates short of the demand (`10/s` burst 1, `1000/s` burst 1 000;
/// 180 calls of 1 token and 20 of 900 within 8 s). Judged by its own instance's mirror, its
/// held slot was always its gate's latest: it swapped at every turn, its slot given back
/// behind the other instance's (spent in the store), and waited 15 to 20 s, passed by a
/// hundred calls that came after it, where the same caller in the busy instance waited 4 to
/// 9 s. It waits about as long in either.
#[tokio::test(start_paused = true)]
async fn a_caller_alone_in_its_instance_waits_as_long_as_in_the_busy_one() {
    let mut failures = Vec::new();
    for seed in 0..4 {
        for x in [(3000, 500), (3000, 1), (5000, 900), (2000, 100)] {
            let together = beside_a_busy_instance(seed, x, false).await;
            let apart = beside_a_busy_instance(seed, x, true).await;
            if apart > together + SEC {
                failures.push(format!(
                    "seed {seed}, X {x:?}: waited {apart:?} alone, {together:?} in the busy one"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// [`a_caller_alone_in_its_instance_waits_as_long_as_in_the_busy_one`]'s schedule: how long X
/// (when, in ms, and its units) waited, in an instance of its own (`apart`) or in the busy one.
async fn beside_a_busy_instance(seed: u64, (at, cost): (u64, u64), apart: bool) -> Duration {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let store = InMemory::new();
    let instance = |store: &InMemory| {
        let policy = two_gates(10, 1, 1000)
            .name("shared::lone")
            .deadline(600 * SEC);
        policy.shared_in(store).build().unwrap()
    };
    let (busy, lone) = (instance(&store), instance(&store.instance()));
    let mut costs: Vec<u64> = (0..180).map(|_| 1).chain((0..20).map(|_| 900)).collect();
    costs.shuffle(&mut rng);
    let plan: Vec<(u64, u64)> = (costs.into_iter())
        .map(|cost| (rng.random_range(0..8000), cost))
        .collect();
    let origin = Instant::now();
    let x = if apart { &lone } else { &busy };
    let (_, x) = futures::join!(
        join_all((plan.iter()).map(|&(at, cost)| one_call(&busy, origin, at, cost))),
        one_call(x, origin, at, cost),
    );
    x.started.expect("X starts") - MS * at as u32
}

/// Calls on key A (when, in ms, and their units) through one instance of [`smallest`], and
/// calls of 1 token on key B (when) through another: when each started.
async fn two_instances(a: &[(u64, u64)], b: impl Iterator<Item = u64>, learns: Learns) -> Starts {
    let store = InMemory::new();
    let (here, there) = (
        smallest(&store, learns),
        smallest(&store.instance(), learns),
    );
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
/// per key (burst 1 000), one of them learning if `learns` says so.
fn smallest(store: &InMemory, learns: Learns) -> Policy<Keyed> {
    let policy = Policy::builder()
        .name("shared::smallest")
        .keyed("model")
        .rate(10, SEC, 1)
        .token_rate(1000, SEC, 1000)
        .token_rate_per_key()
        .deadline(60 * SEC)
        .shared_in(store);
    let policy = match learns {
        Learns::Neither => policy,
        Learns::Rate => policy.rate_learn(),
        Learns::Tokens => policy.token_rate_learn(),
    };
    policy.build().unwrap()
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
        self.answered(policy, (key, at, cost), Ok(())).await;
    }

    /// The same, its body answering `answer`: when it started, if it did.
    async fn answered(
        &self,
        policy: &Policy<Keyed>,
        (key, at, cost): (&'static str, u64, u64),
        answer: Result<(), TestError>,
    ) -> Option<Duration> {
        tokio::time::sleep_until(self.0 + MS * at as u32).await;
        let mut execution = policy.execute_keyed::<str, TestError>(key);
        execution.set_cost(cost);
        let started = Mutex::new(None);
        let body = async {
            *started.lock().unwrap() = Some(self.0.elapsed());
            self.1.lock().unwrap().push((key, self.0.elapsed(), cost));
            answer
        };
        assert!(matches!(execution.attempt(body).await, Next::Done(_)));
        started.into_inner().unwrap()
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
