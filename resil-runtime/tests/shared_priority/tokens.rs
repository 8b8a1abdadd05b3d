//! A shared token gate with no rate gate beside it: its callers ask the store in turn, as a
//! shared rate gate's do (it kept arrival order, priority ignored: a critical call behind 30
//! queued batch calls of 1 000 tokens on a `1000/s` gate started at 30 s).

use super::*;

/// One instance's policy of a shared `1000/s` token gate (burst 1 000) that orders its
/// waiters, with no rate gate.
fn tokens_policy(store: &InMemory) -> Policy {
    Policy::builder()
        .name("llm::tokens")
        .token_rate(1000, Duration::from_secs(1), 1000)
        .by_priority()
        .deadline(Duration::from_secs(60))
        .shared_in(store)
        .build()
        .unwrap()
}

/// A call of `class` costing 1 000 tokens, its start recorded under `label`.
async fn thousand_tokens(
    policy: &Policy,
    class: Priority,
    starts: &Starts,
    label: &'static str,
    origin: Instant,
) -> Result<(), Err429> {
    let mut execution = policy.execute::<Err429>();
    execution.set_priority(class);
    execution.set_cost(1000);
    execution
        .run(move || {
            let starts = starts.clone();
            async move {
                starts.push(label, origin);
                Ok(())
            }
        })
        .await
}

/// 30 batch calls of 1 000 tokens queued by instance `a` at 0; critical calls of 1 000 tokens
/// from instance `b` (which may be `a`) at 1.05, 5.02 and 9.07 s: each waits for the units
/// booked for the next caller of each instance asking (its own turn's included), a second
/// each at this gate, never for the batch; the gate's ceiling holds for all together.
async fn critical_beside_a_batch(a: &Policy, b: &Policy) {
    let (starts, origin) = (Starts::default(), Instant::now());
    let batch =
        join_all((0..30).map(|_| thousand_tokens(a, Priority::Batch, &starts, "batch", origin)));
    let critical = async {
        let mut results = Vec::new();
        for at in [1_050, 5_020, 9_070] {
            sleep_until(origin + MS(at)).await;
            let result = thousand_tokens(b, Priority::Critical, &starts, "critical", origin);
            results.push(result.await);
        }
        results
    };
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().chain(&critical).all(Result::is_ok));
    let arrived = [MS(1_050), MS(5_020), MS(9_070)];
    for (started, arrived) in starts.of("critical").into_iter().zip(arrived) {
        assert!(
            started - arrived <= MS(2_000),
            "critical arrived at {arrived:?}, started at {started:?}"
        );
    }
    // 1 000 tokens each, at most 1 999 in any second: one start a second.
    assert_eq!(most_in_a_second(&starts.all()), 1, "{:?}", starts.all());
    assert_eq!(starts.of("batch").len(), 30);
}

#[tokio::test(start_paused = true)]
async fn a_critical_call_is_not_queued_behind_its_own_instances_batch_at_a_shared_token_gate() {
    let store = InMemory::new();
    let gate = tokens_policy(&store);
    critical_beside_a_batch(&gate, &gate).await;
}

#[tokio::test(start_paused = true)]
async fn a_critical_call_is_not_queued_behind_anothers_batch_at_a_shared_token_gate() {
    let store = InMemory::new();
    let (a, b) = (tokens_policy(&store), tokens_policy(&store.instance()));
    critical_beside_a_batch(&a, &b).await;
}

/// A shared token gate that learns, alone, would hold the turn to ask while its answers move
/// the slots the store granted: refused, as a shared rate gate that learns is.
#[test]
fn a_shared_token_gate_that_learns_alone_is_not_ordered() {
    let store = InMemory::new();
    let built = Policy::builder()
        .token_rate(1000, Duration::from_secs(1), 1000)
        .token_rate_learn()
        .by_priority()
        .shared_in(&store)
        .build();
    assert_eq!(
        built.err(),
        Some(resil_runtime::ConfigError::OrderedLearningGate)
    );
}
