//! A shared token gate that learns books no more of the store's schedule than its window,
//! however slow the pace it learnt, and one that probes keeps the shared gate beside it on the
//! store. The simulator's token gates (issue 46) found both; each test failed before its fix.

use std::sync::Mutex;
use std::time::Duration;

use resil_runtime::{operation, Next, Policy, PolicyBuilder, ProviderLimits, Rejected};
use tokio::time::Instant;

use super::learn_hostile::{said, MS, SEC};

/// When each call started, with its units, since `origin`.
type Started = Mutex<Vec<(Duration, u64)>>;

/// A call of `cost` units through `policy` `at` after `origin`, whose body records its start
/// and, if told, states the provider's limit on tokens.
async fn call(
    policy: &Policy,
    (at, cost): (Duration, u64),
    origin: Instant,
    started: &Started,
    says: Option<(u64, Duration)>,
) -> bool {
    tokio::time::sleep_until(origin + at).await;
    let mut execution = policy.execute::<Rejected>();
    execution.set_cost(cost);
    let body = async {
        started.lock().unwrap().push((origin.elapsed(), cost));
        if let Some((limit, reset)) = says {
            operation::report_limits(ProviderLimits {
                requests: None,
                tokens: Some(said(Some(limit), 0, reset)),
            });
        }
        Ok::<_, Rejected>(())
    };
    match execution.attempt(body).await {
        Next::Done(done) => done.into_result().is_ok(),
        _ => false,
    }
}

/// A shared token gate that learns, told `limit 0` (a pace of one token per reset) by one
/// answer: its next call's 1 362 tokens took 1 362 s of the store's schedule, and a call two
/// minutes later waited 16 minutes (seed 8756, through the slots granted alone while the store
/// was down; the store's own schedule the same way while it answered).
#[tokio::test(start_paused = true)]
async fn a_learnt_pace_moves_a_shared_token_gate_no_further_than_its_window() {
    use resil_runtime::shared::InMemory;
    for down in [false, true] {
        let store = InMemory::new();
        let policy = shared(&store)
            .token_rate(2_853, 691 * MS, 1_451)
            .token_rate_learn()
            .build()
            .unwrap();
        let (origin, started) = (Instant::now(), Started::default());
        assert!(
            call(
                &policy,
                (Duration::ZERO, 807),
                origin,
                &started,
                Some((0, SEC))
            )
            .await
        );
        store.set_available(!down);
        assert!(call(&policy, (14 * SEC, 1_362), origin, &started, None).await);
        store.set_available(true);
        let before = origin.elapsed();
        assert!(call(&policy, (134 * SEC, 1), origin, &started, None).await);
        let waited = started.lock().unwrap()[2].0 - before.max(134 * SEC);
        assert!(waited <= SEC, "store down {down}: waited {waited:?}");
    }
}

/// An auto token gate that knows nothing yet sent every call local, the shared rate gate
/// beside it too: two instances each ran the shared `1/s` at its whole rate, both calling at
/// once (the simulator's seed 1227). The probe's caller asks the store for its rate slot.
#[tokio::test(start_paused = true)]
async fn an_auto_gate_probing_keeps_the_shared_gate_beside_it_on_the_store() {
    let (a, b) = two_instances("probing");
    let (origin, started) = (Instant::now(), Started::default());
    let at_once = (Duration::ZERO, 10);
    let (first, second) = tokio::join!(
        call(&a, at_once, origin, &started, None),
        call(&b, at_once, origin, &started, None)
    );
    assert!(first && second);
    let mut at: Vec<_> = started.lock().unwrap().iter().map(|s| s.0).collect();
    at.sort();
    assert_eq!(at, [Duration::ZERO, SEC], "one slot per second over both");
}

/// The probe's caller holds the probe while it waits for the store's slot; a throttle that
/// revoked it then left the probe out, and no call went through the auto gate until the
/// probe was counted lost, 60 s later (a hostile review).
#[tokio::test(start_paused = true)]
async fn a_probe_revoked_while_its_caller_waits_lets_another_probe() {
    let (a, b) = two_instances("revoked");
    let (origin, started) = (Instant::now(), Started::default());
    let at_once = (Duration::ZERO, 10);
    let throttle = async {
        tokio::time::sleep(500 * MS).await;
        a.token_gate().unwrap().hold(2 * SEC);
    };
    let (first, second, ()) = tokio::join!(
        call(&b, at_once, origin, &started, None),
        call(&a, at_once, origin, &started, None),
        throttle
    );
    assert!(first && second);
    let last = started.lock().unwrap().iter().map(|s| s.0).max().unwrap();
    assert!(last <= 3 * SEC, "the second called at {last:?}");
}

/// Two instances of a shared `1/s` rate gate beside an auto token gate, on one store.
fn two_instances(name: &'static str) -> (Policy, Policy) {
    use resil_runtime::shared::InMemory;
    let here = InMemory::new();
    let instance = |store: &InMemory| {
        (shared(store).name(name))
            .rate(1, SEC, 1)
            .token_rate_learn()
            .build()
            .unwrap()
    };
    (instance(&here), instance(&here.instance()))
}

fn shared(store: &resil_runtime::shared::InMemory) -> PolicyBuilder {
    Policy::builder().deadline(60 * SEC).shared_in(store)
}
