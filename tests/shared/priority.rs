//! Priority across two instances on a real Redis, while it answers: one instance runs a batch
//! job on the shared gate, the other's interactive calls start within a slot or two of their
//! arrival, not behind the batch's schedule.

use super::*;
use resil::Priority;
use support::Starts;

/// A shared gate of 20 a second, burst 1, that orders its waiters.
fn ordered(p: resil::PolicyBuilder) -> resil::PolicyBuilder {
    p.rate(20, Duration::from_secs(1), 1)
        .by_priority()
        .deadline(Duration::from_secs(30))
}

/// One call of `class` costing `cost` through `policy`, its start recorded under `label`.
async fn in_class(
    policy: &Policy,
    (class, cost): (Priority, u64),
    starts: &Starts<&'static str>,
    label: &'static str,
) -> Result<(), ApiError> {
    let mut execution = policy.execute::<ApiError>();
    execution.set_priority(class);
    execution.set_cost(cost);
    execution
        .run(|| async {
            starts.add(label);
            Ok(())
        })
        .await
}

#[tokio::test]
async fn an_interactive_call_is_not_queued_behind_another_instances_batch() {
    interactive_beside_a_batch(ordered, 1).await;
}

/// A shared token gate of 20 000 a second (burst 1 000), alone, that orders its waiters.
fn ordered_tokens(p: resil::PolicyBuilder) -> resil::PolicyBuilder {
    p.token_rate(20_000, Duration::from_secs(1), 1_000)
        .by_priority()
        .deadline(Duration::from_secs(30))
}

/// The same for a token gate with no rate gate beside it, its calls of 1 000 tokens (20 a
/// second): it served them in arrival order, the critical calls behind the whole batch.
#[tokio::test]
async fn an_interactive_call_is_not_queued_behind_another_instances_batch_at_a_token_gate() {
    interactive_beside_a_batch(ordered_tokens, 1_000).await;
}

/// Two instances of the gate `ordered` declares, calls costing `cost`: one runs a batch of
/// 60 (20 a second), the other's three critical calls come 400 ms apart.
async fn interactive_beside_a_batch(
    ordered: fn(resil::PolicyBuilder) -> resil::PolicyBuilder,
    cost: u64,
) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        instance(&server, ordered).await,
        instance(&server, ordered).await,
    );
    let starts = Starts::new();
    // 60 batch calls at 20 a second: 3 s of the gate's schedule, had they booked it at once.
    let batch = futures::future::join_all(
        (0..60).map(|_| in_class(&a.policy, (Priority::Batch, cost), &starts, "batch")),
    );
    let interactive = async {
        let mut waits = Vec::new();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let arrived = Instant::now();
            in_class(&b.policy, (Priority::Critical, cost), &starts, "critical")
                .await
                .expect("within its deadline");
            waits.push(arrived.elapsed());
        }
        waits
    };
    let (batch, waits) = tokio::join!(batch, interactive);
    assert!(batch.iter().all(Result::is_ok), "{batch:?}");
    // Each waits for the slot a's batch holds booked, then takes the next (50 to 100 ms
    // here): well under a second even on a busy machine, against 2.6 s behind the batch's
    // schedule booked at arrival.
    for wait in &waits {
        assert!(*wait < Duration::from_secs(1), "critical waits {waits:?}");
    }
    // In the order the gate served them: each critical call started while batch calls that
    // came before it still waited.
    let last_batch = *starts.of(&"batch").last().unwrap();
    let last_critical = *starts.of(&"critical").last().unwrap();
    assert!(last_critical + Duration::from_millis(500) < last_batch);
}
