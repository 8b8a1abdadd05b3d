//! A shared token gate that learns books no more of the store's schedule than its window,
//! however slow the pace it learnt. The simulator's token gates (issue 46) found the schedule
//! below; the test failed before its fix.

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

fn shared(store: &resil_runtime::shared::InMemory) -> PolicyBuilder {
    Policy::builder().deadline(60 * SEC).shared_in(store)
}
