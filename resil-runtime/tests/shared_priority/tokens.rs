//! A shared token gate with no rate gate beside it: its callers ask the store in turn, as a
//! shared rate gate's do (it kept arrival order, priority ignored: a critical call behind 30
//! queued batch calls of 1 000 tokens on a `1000/s` gate started at 30 s).

use super::*;

/// One instance's policy of a shared `1000/s` token gate (burst 1 000) that orders its
/// waiters, with no rate gate.
fn tokens_policy(store: &InMemory) -> Policy {
    tokens_within(store, MS(100), Duration::from_secs(60))
}

/// The same, the store's answers awaited `timeout`, calls given `deadline`.
fn tokens_within(store: &InMemory, timeout: Duration, deadline: Duration) -> Policy {
    Policy::builder()
        .name("llm::tokens")
        .token_rate(1000, Duration::from_secs(1), 1000)
        .by_priority()
        .deadline(deadline)
        .shared_in(store)
        .shared_timeout(timeout)
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
    costing(policy, class, 1000, starts, label, origin).await
}

/// A call of `class` costing `cost` tokens, its start recorded under `label`.
async fn costing(
    policy: &Policy,
    class: Priority,
    cost: u64,
    starts: &Starts,
    label: &'static str,
    origin: Instant,
) -> Result<(), Err429> {
    let mut execution = policy.execute::<Err429>();
    execution.set_priority(class);
    execution.set_cost(cost);
    recorded(execution, (starts, label, origin), MS(0), Ok(())).await
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

/// A hostile review of the turn at a token gate alone: a store that answers late was taken
/// for late by the rate gate only, so each of 30 callers of 10 tokens held the turn for a
/// whole timeout, one after another (the last started at 600 ms, 30 × 20 ms), where the
/// local gate had their tokens at once. After one late answer the local gate decides.
#[tokio::test(start_paused = true)]
async fn after_a_late_answer_a_token_gate_alone_decides_locally_not_one_timeout_a_caller() {
    let store = InMemory::new();
    let gate = tokens_within(&store, MS(20), Duration::from_secs(60));
    store.set_slow(true);
    let (starts, origin) = (Starts::default(), Instant::now());
    let calls = (0..30).map(|_| costing(&gate, Priority::Default, 10, &starts, "c", origin));
    let all = join_all(calls).await;
    assert!(all.iter().all(Result::is_ok));
    let last = *starts.all().last().unwrap();
    assert!(last <= MS(40), "the last started at {last:?}");
}

/// The same review: a call costing more than the token gate's burst waited for the turn
/// behind five queued calls (4 s) before it failed with `OverBurst`; beside a rate gate, the
/// same before (the check came after the turn). It fails at once.
#[tokio::test(start_paused = true)]
async fn a_call_over_the_burst_fails_at_once_not_after_its_turn() {
    for with_rate in [false, true] {
        let store = InMemory::new();
        let builder = Policy::builder().name("llm::over");
        let builder = match with_rate {
            true => builder.rate(1, Duration::from_secs(1), 1),
            false => builder,
        };
        let gate = (builder.token_rate(1000, Duration::from_secs(1), 1000))
            .by_priority()
            .deadline(Duration::from_secs(60))
            .shared_in(&store)
            .build()
            .unwrap();
        let (starts, origin) = (Starts::default(), Instant::now());
        let batch =
            join_all((0..5).map(|_| thousand_tokens(&gate, Priority::Batch, &starts, "b", origin)));
        let over = async {
            sleep(MS(10)).await;
            let over = costing(&gate, Priority::Batch, 1001, &starts, "over", origin).await;
            (over, origin.elapsed())
        };
        let (_, (over, at)) = tokio::join!(batch, over);
        assert!(
            matches!(over, Err(Err429::Rejected(Rejected::OverBurst { .. }))),
            "{over:?}"
        );
        assert_eq!(
            at,
            MS(10),
            "refused at {at:?} (with a rate gate: {with_rate})"
        );
    }
}

/// The same review: the bound a newcomer is refused by at once counted the holder and each
/// caller before it one token (a rate gate's slot), and none of its own. Deadline 1.2 s: A
/// (1 000 tokens) starts at 0; B comes at 10 ms, its units due at 1 s, and holds the turn
/// until then; C (1 000 tokens) comes at 20 ms, and cannot start before B's units are taken,
/// at 2 s: it waited for its turn and was refused by the store at 1 s. The holder's units
/// and its own count now: refused at once. (Callers waiting before it still count one token
/// each, the store refusing them at their turn, never started past their deadline.)
#[tokio::test(start_paused = true)]
async fn a_deadline_the_holders_units_leave_no_room_for_is_refused_at_once() {
    let store = InMemory::new();
    let gate = tokens_within(&store, MS(50), MS(1_200));
    let (starts, origin) = (Starts::default(), Instant::now());
    let after = |at: u64, label| {
        let (gate, starts) = (&gate, &starts);
        async move {
            sleep(MS(at)).await;
            let result = thousand_tokens(gate, Priority::Batch, starts, label, origin).await;
            (result, origin.elapsed())
        }
    };
    let (a, b, c) = tokio::join!(after(0, "a"), after(10, "b"), after(20, "c"));
    assert!(a.0.is_ok() && b.0.is_ok(), "{a:?} {b:?}");
    assert_eq!(starts.of("b"), [MS(1_000)]);
    assert!(
        matches!(c.0, Err(Err429::Rejected(Rejected::RateLimited { .. }))),
        "{c:?}"
    );
    assert_eq!(c.1, MS(20), "refused at {:?}", c.1);
}

/// A third review: counting each caller before a newcomer one token was no bound from below
/// at a token gate, where a call may cost nothing. A (1 000 tokens) starts at 0, B (1 000)
/// holds the turn for its units at 1 s, and 400 calls of no tokens come at 2 ms, deadline
/// 1.3 s: 98 of them were refused at once, where all start at 1 s.
#[tokio::test(start_paused = true)]
async fn calls_of_no_tokens_behind_the_holder_are_not_refused_at_once() {
    let store = InMemory::new();
    let gate = tokens_within(&store, MS(50), MS(1_300));
    let (starts, origin) = (Starts::default(), Instant::now());
    let after = |at: u64, cost: u64, label| {
        let (gate, starts) = (&gate, &starts);
        async move {
            sleep(MS(at)).await;
            costing(gate, Priority::Batch, cost, starts, label, origin).await
        }
    };
    let free = join_all((0..400).map(|_| after(2, 0, "free")));
    let (a, b, free) = tokio::join!(after(0, 1000, "a"), after(1, 1000, "b"), free);
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    let refused = free.iter().filter(|result| result.is_err()).count();
    assert_eq!(refused, 0, "{refused} calls of no tokens refused");
    assert!(starts.of("free").iter().all(|at| *at <= MS(1_000)));
}

/// The same review: an auto token gate's burst is the limit it was told, until the
/// provider's reset; refused before a throttle's hold that ends after the reset, a call over
/// it was refused where it passes when the hold ends (20 s). It is judged after the hold, and
/// a local gate held past the reset no longer takes the limit for its burst.
#[tokio::test(start_paused = true)]
async fn a_call_over_a_told_limit_is_judged_after_a_hold_that_outlasts_it() {
    for shared in [true, false] {
        a_call_over_a_told_limit_during_a_hold(shared).await;
    }
}

/// The schedule above, on a shared gate or a local one (which refused it the same).
async fn a_call_over_a_told_limit_during_a_hold(shared: bool) {
    let store = InMemory::new();
    let builder = Policy::builder()
        .name("llm::auto")
        .token_rate_learn()
        .deadline(Duration::from_secs(60));
    let gate = match shared {
        true => builder.shared_in(&store),
        false => builder,
    };
    let gate = gate.build().unwrap();
    let origin = Instant::now();
    let said = resil_runtime::ProviderLimits {
        requests: None,
        tokens: Some(resil_runtime::Quota {
            limit: Some(100),
            remaining: 50,
            reset: Duration::from_secs(10),
            window: None,
        }),
    };
    let probe = gate.execute::<Err429>().run(|| async {
        resil_runtime::operation::report_limits(said);
        Ok(())
    });
    assert!(probe.await.is_ok());
    let throttled = (gate.execute::<Err429>())
        .run(|| async { Err::<(), _>(Err429::Throttled(Duration::from_secs(20))) })
        .await;
    assert!(throttled.is_err());
    sleep_until(origin + MS(1_000)).await;
    let mut execution = gate.execute::<Err429>();
    execution.set_cost(200);
    let big = execution.run(|| async { Ok(()) }).await;
    assert_eq!(big, Ok(()), "at {:?} (shared: {shared})", origin.elapsed());
    assert!(origin.elapsed() >= Duration::from_secs(20));
}
