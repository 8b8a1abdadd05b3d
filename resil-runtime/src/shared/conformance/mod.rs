//! Feature `conformance`: the checks every [`SharedStore`] passes, run against any store by
//! [`run`]: resil's tests run them over the in-memory store, Redis, Redis over TLS and a Redis
//! Cluster, and a store of your own can.
//!
//! [`run`] takes a maker of instances: each call returns a new instance of the service (a new
//! connection, as another process would have) sharing one state. The checks use names of
//! their own (a random part in each), so the state need not be empty, and may be shared with
//! other tests. They run on tokio's clock: on a paused clock for a store that reads it (the
//! in-memory store: exact and instant), on the real clock for a store with a server (its
//! clock is the server's); their waits are bounded polls. Run them on a current-thread
//! runtime.
//!
//! What they check: a reservation takes both gates or neither; the instances together keep a
//! gate's rate; the slots an instance's gate granted alone come first
//! ([`Ask::alone`](crate::seams::Ask::alone)); refunds give a gate back from its latest slot,
//! in any order; a hold revokes and holds every instance and the holder's other gates; an
//! opening and a closing reach every other instance's breaker (one listed after the opening
//! too); the probe's lock has one holder, expires after its limit and is released; a store that is not usable, or
//! that never answers (within `shared_timeout`), leaves decisions to the local state. And, for
//! a store that keeps them (both are optional): two instances' batches are summed in a shared
//! window, and its old buckets age out; two instances are counted among a gate's users, and
//! so are two gates of one instance ([`Ask::user`](crate::seams::Ask::user)), and a user
//! silent past its heartbeat's expiry is forgotten. Whatever the store, one without
//! windows leaves each instance to judge its own.
//!
//! ```no_run
//! use resil_runtime::shared::{conformance, InMemory};
//!
//! #[tokio::test(start_paused = true)]
//! async fn the_in_memory_store_conforms() {
//!     let state = InMemory::new();
//!     conformance::run(|| std::future::ready(state.instance())).await;
//! }
//! ```

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::IntoSharedStore;
use links::{eventually_granted, gate, granted, link, refused, reserve_in};
use outage::Outage;

mod links;
mod outage;
mod queues;
mod windows;
use crate::seams::{
    breaker_id, reserve, BreakerLink, GateAsk, Probe, SharedSlots, SharedStore, Unavailable,
};
use crate::{Breaker, BreakerConfig, BreakerState, Policy, Rejected, Transient};

/// How long the checks wait for a store's answer: a loaded machine's server still counts.
const PATIENCE: Duration = Duration::from_secs(1);
/// How long news may take to reach another instance.
const WITHIN: Duration = Duration::from_secs(10);
/// A wait no check reaches: slots and holds that last the whole run.
const HOUR: Duration = Duration::from_secs(3600);
/// A breaker's cooldown and a probe's limit: the checks wait them out, but an opening must
/// still be in force when an instance made after it (a connection, a TLS handshake) starts, on
/// a busy machine too.
const COOLDOWN: Duration = Duration::from_secs(2);

/// Runs every check against the store `instance` makes, panicking with the check and what
/// failed. See the [module](self).
pub async fn run<F, Fut, S>(instance: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
    S: IntoSharedStore,
{
    let mut suite = Suite {
        instance,
        run: rand::random::<u32>(),
    };
    suite.a_reservation_takes_both_gates_or_neither().await;
    suite.instances_together_keep_the_rate().await;
    suite.slots_granted_alone_come_first().await;
    suite.refunds_give_back_from_the_latest_slot().await;
    suite
        .a_long_queue_given_back_in_any_order_gives_the_gate_back()
        .await;
    suite
        .a_slot_given_back_keeps_the_charge_of_calls_made_alone()
        .await;
    suite.a_hold_revokes_and_holds_every_instance().await;
    suite
        .openings_and_closings_reach_every_other_instance()
        .await;
    suite.the_probe_lock_has_one_holder_and_expires().await;
    suite
        .an_unusable_store_leaves_decisions_to_the_local_state()
        .await;
    suite
        .a_store_that_never_answers_is_given_up_after_shared_timeout()
        .await;
    suite.two_instances_batches_are_summed_and_age_out().await;
    suite
        .a_store_without_windows_leaves_each_instance_its_own()
        .await;
    suite
        .a_gate_counts_its_instances_and_forgets_the_silent()
        .await;
}

struct Suite<F> {
    instance: F,
    run: u32,
}

impl<F, Fut, S> Suite<F>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
    S: IntoSharedStore,
{
    async fn instance(&mut self) -> Arc<dyn SharedStore> {
        (self.instance)().await.into_shared_store()
    }

    /// A name of this run's.
    fn name(&self, what: &str) -> String {
        format!("conformance-{:08x}-{what}", self.run)
    }

    async fn a_reservation_takes_both_gates_or_neither(&mut self) {
        let store = self.instance().await;
        let (one, three) = (
            gate(&store, &self.name("atomic-1"), 1),
            gate(&store, &self.name("atomic-3"), 3),
        );
        let now = Some(Duration::ZERO);
        granted(
            "both gates, free",
            reserve_in(&[(&one, 1), (&three, 1)], now).await,
        );
        refused(
            "the first gate spent",
            reserve_in(&[(&one, 1), (&three, 1)], now).await,
        );
        for left in ["two left", "one left"] {
            granted(left, reserve_in(&[(&three, 1)], now).await);
        }
        refused(
            "the refused reservation took nothing",
            reserve_in(&[(&three, 1)], now).await,
        );
    }

    async fn instances_together_keep_the_rate(&mut self) {
        let name = self.name("rate");
        let mut gates = Vec::new();
        for _ in 0..3 {
            gates.push(gate(&self.instance().await, &name, 4));
        }
        let mut passed = 0;
        for _ in 0..3 {
            for gate in &gates {
                let answer = reserve_in(&[(gate, 1)], Some(Duration::ZERO)).await;
                passed += u32::from(matches!(answer, SharedSlots::Granted(_)));
            }
        }
        assert_eq!(
            passed, 4,
            "conformance: three instances together reserve the burst, 4"
        );
        let SharedSlots::Granted(next) = reserve_in(&[(&gates[1], 1)], None).await else {
            panic!("conformance: a reservation with no limit is granted");
        };
        assert!(
            next.wait > HOUR - Duration::from_secs(60) && next.wait <= HOUR,
            "conformance: the fifth slot is an interval (1 h) after the burst, not {:?}",
            next.wait
        );
    }

    async fn slots_granted_alone_come_first(&mut self) {
        let store = self.instance().await;
        let gate = gate(&store, &self.name("alone"), 1);
        let ask = GateAsk {
            gate: Arc::clone(&gate),
            cost: 1,
            interval: gate.interval * 1000,
            alone: crate::seams::Alone {
                held: u64::try_from((HOUR / 2).as_nanos()).unwrap_or(u64::MAX),
                used: 0,
            },
        };
        let SharedSlots::Granted(first) = reserve([Some(ask), None], None).await else {
            panic!("conformance: a reservation with no limit is granted");
        };
        assert!(
            first.wait > HOUR / 2 - Duration::from_secs(60) && first.wait <= HOUR / 2,
            "conformance: an instance whose gate ran 30 min ahead alone (Ask::alone) waits that \
             long for its next slot, not {:?}",
            first.wait
        );
        // Given back (its caller gave up), the slot takes the charge back with it: the
        // schedule no slot owns would otherwise hold every instance for 30 min.
        let [Some(slot), _] = first.slots else {
            panic!("conformance: a grant of one gate has its slot");
        };
        store.refund(&gate, slot);
        eventually_granted(
            "the slot that carried the charge, given back, takes it back",
            &gate,
        )
        .await;
    }

    async fn refunds_give_back_from_the_latest_slot(&mut self) {
        let store = self.instance().await;
        let gate = gate(&store, &self.name("refund"), 2);
        let now = Some(Duration::ZERO);
        let first = granted("the first slot", reserve_in(&[(&gate, 1)], now).await);
        let second = granted("the second slot", reserve_in(&[(&gate, 1)], now).await);
        refused("the burst spent", reserve_in(&[(&gate, 1)], now).await);
        store.refund(&gate, first);
        // A refund is sent in the background: what it must not do shows only later.
        sleep(Duration::from_millis(200)).await;
        refused(
            "an older slot's refund waits for the slots after it",
            reserve_in(&[(&gate, 1)], now).await,
        );
        store.refund(&gate, second);
        eventually_granted("the latest slot's refund gives it back", &gate).await;
        granted(
            "and the older one given back before it",
            reserve_in(&[(&gate, 1)], now).await,
        );
        refused(
            "two slots given back, two taken",
            reserve_in(&[(&gate, 1)], now).await,
        );
    }

    async fn a_hold_revokes_and_holds_every_instance(&mut self) {
        let name = self.name("hold");
        let (here, there) = (self.instance().await, self.instance().await);
        let (held, other) = (gate(&here, &name, 2), gate(&there, &name, 2));
        // Another policy of the holder's process, with a gate of the same name.
        let beside = gate(&here, &name, 2);
        let promised = granted(
            "a slot before the hold",
            reserve_in(&[(&other, 1)], None).await,
        );
        here.hold(&held, 2 * HOUR);
        eventually("the hold reaches the other instance's gate", || {
            other.holds() > 0
        })
        .await;
        eventually(
            "the hold reaches the holder's instance's other gate",
            || beside.holds() > 0,
        )
        .await;
        assert_eq!(
            held.holds(),
            0,
            "conformance: the instance that held hears no news of it"
        );
        match reserve_in(&[(&other, 1)], Some(Duration::ZERO)).await {
            SharedSlots::Refused(Rejected::RateLimited { retry_in }) => assert!(
                retry_in > 2 * HOUR - Duration::from_secs(60),
                "conformance: held for 2 h, not {retry_in:?}"
            ),
            answer => panic!("conformance: the other instance is held, not {answer:?}"),
        }
        let after = granted(
            "a slot after the hold",
            reserve_in(&[(&other, 1)], None).await,
        );
        assert!(
            after.epoch > promised.epoch,
            "conformance: a hold revokes the slots promised before it (their epoch moves on)"
        );
    }

    async fn openings_and_closings_reach_every_other_instance(&mut self) {
        let name = self.name("breaker");
        let shared = |store: Arc<dyn SharedStore>| {
            let config = BreakerConfig::new(2, COOLDOWN).expect("a valid breaker");
            Policy::builder()
                .breaker(Arc::new(Breaker::new(name.as_str(), config)))
                .shared_in(store)
                .shared_timeout(PATIENCE)
                .build()
                .expect("a valid policy")
        };
        let (here, there) = (shared(self.instance().await), shared(self.instance().await));
        let state = |policy: &Policy| policy.breaker().map(|breaker| breaker.state());
        for _ in 0..2 {
            let _ = call(&here, Err(Failure::Down)).await;
        }
        assert_eq!(
            state(&here),
            Some(BreakerState::Open),
            "conformance: two failures open"
        );
        eventually("the opening reaches the other instance", || {
            state(&there) == Some(BreakerState::Open)
        })
        .await;
        let late = shared(self.instance().await);
        eventually(
            "an opening in force reaches a breaker listed after it",
            || state(&late) == Some(BreakerState::Open),
        )
        .await;
        let since = Instant::now();
        while call(&here, Ok(())).await.is_err() {
            assert!(
                since.elapsed() < WITHIN,
                "conformance: a probe goes after the cooldown"
            );
            sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            state(&here),
            Some(BreakerState::Closed),
            "conformance: the probe closes"
        );
        eventually("the closing reaches the other instance", || {
            state(&there) == Some(BreakerState::Closed)
        })
        .await;
    }

    async fn the_probe_lock_has_one_holder_and_expires(&mut self) {
        let id = breaker_id(&self.name("probe"));
        let (here, there) = (self.instance().await, self.instance().await);
        let (mine, theirs) = (link(&here, &id), link(&there, &id));
        let answer = probe(&here, &mine, COOLDOWN).await;
        assert_eq!(
            answer,
            Ok(Probe::Granted),
            "conformance: a free lock is granted"
        );
        match probe(&there, &theirs, COOLDOWN).await {
            Ok(Probe::Elsewhere(left)) => assert!(
                !left.is_zero() && left <= COOLDOWN,
                "conformance: the lock is held for at most its limit, not {left:?}"
            ),
            answer => panic!("conformance: a held lock is held elsewhere, not {answer:?}"),
        }
        let since = Instant::now();
        while probe(&there, &theirs, HOUR).await != Ok(Probe::Granted) {
            assert!(
                since.elapsed() < WITHIN,
                "conformance: the lock expires after its limit"
            );
            sleep(Duration::from_millis(20)).await;
        }
        there.release_probe(&theirs);
        let since = Instant::now();
        while probe(&here, &mine, COOLDOWN).await != Ok(Probe::Granted) {
            assert!(
                since.elapsed() < WITHIN,
                "conformance: a released lock is free at once"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    async fn an_unusable_store_leaves_decisions_to_the_local_state(&mut self) {
        let name = self.name("unusable");
        let (here, there) = (
            Outage::of(self.instance().await),
            Outage::of(self.instance().await),
        );
        for store in [&here, &there] {
            store.down.store(true, Ordering::Release);
        }
        let gated = |store: &Arc<Outage>, fail_closed: bool| {
            Policy::builder()
                .name(name.as_str())
                .rate(1, HOUR, 1)
                .deadline(Duration::from_millis(100))
                .shared_in(Arc::clone(store))
                .shared_fail_closed(fail_closed)
                .build()
                .expect("a valid policy")
        };
        let (a, b) = (gated(&here, false), gated(&there, false));
        assert!(
            call(&a, Ok(())).await.is_ok(),
            "conformance: the local gate lets one by"
        );
        assert!(
            call(&b, Ok(())).await.is_ok(),
            "conformance: each instance's own"
        );
        assert!(
            matches!(
                call(&a, Ok(())).await,
                Err(Failure::Rejected(Rejected::RateLimited { .. }))
            ),
            "conformance: the local gate refuses the second"
        );
        assert!(
            matches!(
                call(&gated(&here, true), Ok(())).await,
                Err(Failure::Rejected(Rejected::SharedUnavailable))
            ),
            "conformance: failing closed, refused"
        );
        assert_eq!(
            here.asked.load(Ordering::Acquire),
            0,
            "conformance: nothing asked"
        );
    }

    async fn a_store_that_never_answers_is_given_up_after_shared_timeout(&mut self) {
        let limit = Duration::from_millis(100);
        let store = Outage::of(self.instance().await);
        let policy = Policy::builder()
            .name(self.name("hung").as_str())
            .rate(10, Duration::from_secs(1), 10)
            .shared_in(Arc::clone(&store))
            .shared_timeout(limit)
            .build()
            .expect("a valid policy");
        store.hung.store(true, Ordering::Release);
        let asked = Instant::now();
        assert!(
            call(&policy, Ok(())).await.is_ok(),
            "conformance: fails open"
        );
        let waited = asked.elapsed();
        assert!(
            waited >= limit && waited < WITHIN,
            "conformance: given up after shared_timeout ({limit:?}), not {waited:?}"
        );
        assert!(
            store.timed_out.load(Ordering::Acquire) > 0,
            "conformance: told it was late"
        );
    }
}

/// What `store` says of the probe's lock of `breaker`: a store that does not answer within
/// [`PATIENCE`] fails the check (resil would give up on it, and decide locally forever).
async fn probe(
    store: &Arc<dyn SharedStore>,
    breaker: &BreakerLink,
    limit: Duration,
) -> Result<Probe, Unavailable> {
    tokio::time::timeout(PATIENCE, store.acquire_probe(breaker, limit))
        .await
        .unwrap_or_else(|_| panic!("conformance: acquire_probe answers within {PATIENCE:?}"))
}

async fn eventually(what: &str, done: impl Fn() -> bool) {
    let since = Instant::now();
    while !done() {
        assert!(
            since.elapsed() < WITHIN,
            "conformance: never within {WITHIN:?}: {what}"
        );
        sleep(Duration::from_millis(10)).await;
    }
}

/// What the checks' calls fail with.
#[derive(Debug)]
enum Failure {
    Down,
    Rejected(Rejected),
}

impl Transient for Failure {
    fn is_transient(&self) -> bool {
        matches!(self, Failure::Down)
    }
}

impl From<Rejected> for Failure {
    fn from(rejected: Rejected) -> Self {
        Failure::Rejected(rejected)
    }
}

async fn call(policy: &Policy, answer: Result<(), Failure>) -> Result<(), Failure> {
    let mut answer = Some(answer);
    policy
        .run(|| std::future::ready(answer.take().unwrap_or(Ok(()))))
        .await
}
