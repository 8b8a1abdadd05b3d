//! `priority = ARG` and `fair = ARG` with a token gate: callers that must wait for their units
//! are served most urgent first and in turn across tenants there too, so a critical call is not
//! queued behind the tokens of a batch job that the request gate already let through.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::{at, ApiError};
use tokio::time::sleep;

/// Each start's label and the tokens it took. Each test has its own function, and so its own
/// gates: tests run side by side.
type Starts = support::Starts<(&'static str, u64)>;

const MS: fn(u64) -> Duration = Duration::from_millis;

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn tokens_alone(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(rate = "10/s", token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn both_gates(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(rate = "10/s", token_rate = "1000/s", rate_cost = cost)]
async fn both_in_arrival_order(
    class: Priority,
    cost: u64,
    starts: &Starts,
) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn mixed_costs(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(token_rate = "1000/s", rate_cost = cost, fair = tenant)]
async fn fair_tokens(tenant: &'static str, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((tenant, cost));
    Ok(())
}

#[resilient(token_rate = "1000/s", rate_cost = cost, fair = tenant)]
async fn fair_by_units(tenant: &'static str, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((tenant, cost));
    Ok(())
}

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn given_up(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_critical_call_behind_queued_batch_tokens_takes_the_next_units() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| tokens_alone(Priority::Batch, 500, &starts)));
    let critical = at(MS(1050), || tokens_alone(Priority::Critical, 500, &starts));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    // The burst's 1 000 tokens at once, then 500 every 500 ms: the critical call takes the
    // units due at 1.5 s (in arrival order, after the 20 batch calls: at 9.5 s).
    assert_eq!(starts.of(&("critical", 500)), [MS(1500)]);
    let batch = starts.of(&("batch", 500));
    assert_eq!(&batch[..4], [MS(0), MS(0), MS(500), MS(1000)]);
    // The batch lost only the units taken from it.
    assert_eq!(batch.last(), Some(&MS(9_500)));
    starts.keep_units(1999);
}

#[tokio::test(start_paused = true)]
async fn with_both_gates_the_critical_call_passes_the_batch_in_each() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| both_gates(Priority::Batch, 500, &starts)));
    let critical = at(MS(1050), || both_gates(Priority::Critical, 500, &starts));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    // Its request slot at 1.1 s, its tokens at the next units due, 1.5 s.
    assert_eq!(starts.of(&("critical", 500)), [MS(1500)]);
    assert_eq!(starts.of(&("batch", 500)).last(), Some(&MS(9_500)));
    starts.keep_units(1999);
    starts.keep_rate(10, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn without_priority_the_critical_call_waits_for_the_batch_tokens() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| both_in_arrival_order(Priority::Batch, 500, &starts)));
    let critical = at(MS(1050), || {
        both_in_arrival_order(Priority::Critical, 500, &starts)
    });
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    assert_eq!(starts.of(&("critical", 500)), [MS(9_500)]);
}

#[tokio::test(start_paused = true)]
async fn a_small_critical_call_does_not_wait_for_a_large_batch_calls_units() {
    let starts = Starts::new();
    let batch = join_all((0..5).map(|_| mixed_costs(Priority::Batch, 1000, &starts)));
    let critical = at(MS(200), || mixed_costs(Priority::Critical, 10, &starts));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    // The slot booked for the next batch call (1 000 tokens, at 1 s) goes back: ten tokens
    // are due at 10 ms past the first call's; the batch call behind it then waits 10 ms more.
    assert_eq!(starts.of(&("critical", 10)), [MS(200)]);
    assert_eq!(
        starts.of(&("batch", 1000)),
        [MS(0), MS(1010), MS(2010), MS(3010), MS(4010)]
    );
    starts.keep_units(1999);
}

#[tokio::test(start_paused = true)]
async fn a_light_tenants_tokens_alternate_with_a_heavy_tenants_flood() {
    let starts = Starts::new();
    let heavy = join_all((0..20).map(|_| fair_tokens("heavy", 500, &starts)));
    let light = join_all((0..3).map(|_| fair_tokens("light", 500, &starts)));
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(heavy.iter().chain(&light).all(Result::is_ok));
    // The heavy tenant's first two calls took the burst; then the two take turns.
    assert_eq!(starts.of(&("light", 500)), [MS(1000), MS(2000), MS(3000)]);
    let heavy = starts.of(&("heavy", 500));
    assert_eq!(&heavy[..5], [MS(0), MS(0), MS(500), MS(1500), MS(2500)]);
    assert_eq!(heavy.last(), Some(&MS(10_500)));
    starts.keep_units(1999);
}

#[tokio::test(start_paused = true)]
async fn tenants_take_turns_by_the_tokens_they_were_served_not_by_calls() {
    let starts = Starts::new();
    let heavy = join_all((0..10).map(|_| fair_by_units("heavy", 1000, &starts)));
    let light = join_all((0..10).map(|_| fair_by_units("light", 100, &starts)));
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(heavy.iter().chain(&light).all(Result::is_ok));
    // One heavy call of 1 000 tokens, then the light tenant's ten of 100 (1 000 tokens too),
    // then the heavy tenant alone. By calls, they alternated: the light one's last at 10 s.
    let light = starts.of(&("light", 100));
    assert_eq!(
        light,
        (11..=20).map(|tenths| MS(tenths * 100)).collect::<Vec<_>>()
    );
    let heavy = starts.of(&("heavy", 1000));
    assert_eq!(&heavy[..3], [MS(0), MS(1000), MS(3000)]);
    assert_eq!(heavy.last(), Some(&MS(10_000)));
    starts.keep_units(1999);
}

#[tokio::test(start_paused = true)]
async fn a_token_waiter_that_gives_up_leaves_no_hole() {
    let starts = Starts::new();
    let batch = join_all((0..6).map(|_| given_up(Priority::Batch, 500, &starts)));
    // Next in line from 1.05 s, with the units due at 1.5 s booked for it: it leaves at 1.2 s.
    let leaves = at(MS(1050), || async {
        let call = given_up(Priority::Critical, 500, &starts);
        let _ = tokio::time::timeout(MS(150), call).await;
    });
    let (batch, _) = tokio::join!(batch, leaves);
    assert!(batch.iter().all(Result::is_ok));
    assert!(starts.of(&("critical", 500)).is_empty());
    // The batch call behind it takes those units: nobody waits for the ones given up.
    assert_eq!(
        starts.of(&("batch", 500)),
        [MS(0), MS(0), MS(500), MS(1000), MS(1500), MS(2000)]
    );
}

#[resilient(token_rate = "1000/s per key", key = model, rate_cost = cost, priority = class)]
async fn per_model(
    model: &'static str,
    class: Priority,
    cost: u64,
    starts: &Starts,
) -> Result<(), ApiError> {
    let label = match class {
        Priority::Critical => "critical",
        _ => model,
    };
    starts.add((label, cost));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_keys_token_gate_serves_its_own_waiters_by_class() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| per_model("gpt", Priority::Batch, 500, &starts)));
    let critical = at(MS(1050), || {
        per_model("gpt", Priority::Critical, 500, &starts)
    });
    let other = at(MS(1050), || {
        per_model("claude", Priority::Batch, 500, &starts)
    });
    let (batch, critical, other) = tokio::join!(batch, critical, other);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok() && other.is_ok());
    assert_eq!(starts.of(&("critical", 500)), [MS(1500)]);
    // Another model's gate holds nobody back.
    assert_eq!(starts.of(&("claude", 500)), [MS(1050)]);
}

// A caller with a deadline is judged by its room, not by the arrival order's schedule, which
// holds the slot booked for the room's next waiter (a hostile review's cases).

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn judged_alone(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(deadline = "500ms")]
async fn judged_alone_within(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    judged_alone(class, cost, starts).await
}

#[tokio::test(start_paused = true)]
async fn a_small_critical_call_with_a_deadline_is_not_refused_for_the_batch_units() {
    let starts = Starts::new();
    let batch = join_all((0..5).map(|_| judged_alone(Priority::Batch, 1000, &starts)));
    // In arrival order its 10 tokens came after the 1 000 booked for the next batch call:
    // refused, 810 ms away.
    let critical = at(MS(200), || {
        judged_alone_within(Priority::Critical, 10, &starts)
    });
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok));
    assert_eq!(critical, Ok(()));
    assert_eq!(starts.of(&("critical", 10)), [MS(200)]);
}

#[resilient(rate = "10/s", token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn judged_both(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(deadline = "500ms")]
async fn judged_both_within(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    judged_both(class, cost, starts).await
}

#[tokio::test(start_paused = true)]
async fn with_both_gates_a_critical_call_with_a_deadline_is_judged_by_each_room() {
    let starts = Starts::new();
    let batch = join_all((0..5).map(|_| judged_both(Priority::Batch, 1000, &starts)));
    let critical = at(MS(250), || {
        judged_both_within(Priority::Critical, 10, &starts)
    });
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok));
    // At once: the batch calls waiting for their units hold no request slot (each takes one
    // when its units come), and its units are the token room's next.
    assert_eq!(critical, Ok(()));
    assert_eq!(starts.of(&("critical", 10)), [MS(250)]);
    starts.keep_units(1000 + 1000 - 1);
}

#[resilient(key = model, rate = "10/s per key", token_rate = "1000/s", rate_cost = cost,
            priority = class)]
async fn judged_keyed(
    model: &'static str,
    class: Priority,
    cost: u64,
    starts: &Starts,
) -> Result<(), ApiError> {
    let _ = model;
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(deadline = "500ms")]
async fn judged_keyed_within(
    model: &'static str,
    class: Priority,
    cost: u64,
    starts: &Starts,
) -> Result<(), ApiError> {
    judged_keyed(model, class, cost, starts).await
}

#[tokio::test(start_paused = true)]
async fn served_by_its_request_room_a_critical_call_is_judged_by_the_token_room() {
    let starts = Starts::new();
    // Model a's request slot taken until 100 ms, the token burst spent.
    judged_keyed("a", Priority::Default, 1000, &starts)
        .await
        .unwrap();
    let critical = judged_keyed_within("a", Priority::Critical, 10, &starts);
    // At 50 ms a batch call of model b waits for its units, due at 1 s.
    let batch = at(MS(50), || judged_keyed("b", Priority::Batch, 1000, &starts));
    let (critical, batch) = tokio::join!(critical, batch);
    assert!(batch.is_ok());
    assert_eq!(critical, Ok(()));
    assert_eq!(starts.of(&("critical", 10)), [MS(100)]);
}

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn late_next(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn units_booked_for_a_late_next_go_to_a_cheaper_one_once_others_follow_them() {
    let starts = Starts::new();
    late_next(Priority::Default, 1000, &starts).await.unwrap();
    // Next in the room, its 500 units booked, due at 500 ms; not polled again until 700 ms.
    let mut batch = Box::pin(late_next(Priority::Batch, 500, &starts));
    assert!(futures::poll!(batch.as_mut()).is_pending());
    sleep(MS(550)).await;
    // 50 tokens free at 550 ms, after the booked 500: reserved after them.
    late_next(Priority::Default, 50, &starts).await.unwrap();
    // The critical call takes the 500 booked (they can no longer go back: given back, they
    // were lost for good, and the batch call started at 1.15 s).
    let critical = late_next(Priority::Critical, 100, &starts);
    let batch = async {
        sleep(MS(150)).await;
        batch.await
    };
    let (critical, batch) = tokio::join!(critical, batch);
    assert!(critical.is_ok() && batch.is_ok());
    assert_eq!(starts.of(&("critical", 100)), [MS(550)]);
    assert_eq!(starts.of(&("batch", 500)), [MS(1050)]);
}

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn behind_a_late_next(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(deadline = "180ms")]
async fn behind_a_late_next_within(
    class: Priority,
    cost: u64,
    starts: &Starts,
) -> Result<(), ApiError> {
    behind_a_late_next(class, cost, starts).await
}

#[tokio::test(start_paused = true)]
async fn a_next_late_for_its_units_does_not_lengthen_a_newcomers_wait() {
    let starts = Starts::new();
    behind_a_late_next(Priority::Default, 1000, &starts)
        .await
        .unwrap();
    // Next in the room, its 500 units due at 500 ms; not polled again.
    let mut next = Box::pin(behind_a_late_next(Priority::Default, 500, &starts));
    assert!(futures::poll!(next.as_mut()).is_pending());
    sleep(MS(550)).await;
    // Its 200 units come after the 500 booked, by 700 ms, within its deadline (730 ms):
    // counted from now rather than from the booked units, it was refused, 200 ms away.
    let newcomer = behind_a_late_next_within(Priority::Default, 200, &starts).await;
    assert_eq!(newcomer, Ok(()));
    let started = starts.of(&("default", 200));
    assert!(started.len() == 1 && started[0] <= MS(700), "{started:?}");
    drop(next);
}

#[resilient(token_rate = "1000/s", rate_cost = cost, fair = tenant)]
async fn coming_back(tenant: &'static str, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((tenant, cost));
    Ok(())
}

/// A tenant that sends one call at a time beside one that queued six (all of 500 tokens):
/// each time it comes back it starts where the last call served finished, so the two
/// alternate (from where it last stood, it went first each time, the queued one waiting until
/// it stopped: its fourth call at 7 s).
#[tokio::test(start_paused = true)]
async fn a_tenant_that_comes_back_one_call_at_a_time_does_not_starve_a_queued_one() {
    let starts = Starts::new();
    let queued = join_all((0..6).map(|_| coming_back("heavy", 500, &starts)));
    let looping = async {
        for _ in 0..12 {
            coming_back("light", 500, &starts).await.unwrap();
        }
    };
    let (queued, ()) = tokio::join!(queued, looping);
    assert!(queued.iter().all(Result::is_ok));
    let queued = starts.of(&("heavy", 500));
    assert!(
        queued[3] <= MS(2000),
        "{queued:?} beside {:?}",
        starts.of(&("light", 500))
    );
}

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn dearer_next(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

#[resilient(deadline = "500ms")]
async fn dearer_next_within(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    dearer_next(class, cost, starts).await
}

/// Units booked for a late next that a caller followed cannot go back: a dearer waiter books
/// its own after the schedule, and one whose deadline that passes is refused at once (it was
/// let in, counted from the units booked, and ended by its deadline 500 ms later).
#[tokio::test(start_paused = true)]
async fn a_dearer_waiter_that_cannot_take_units_booked_for_another_is_judged_from_the_schedule() {
    let starts = Starts::new();
    dearer_next(Priority::Default, 1000, &starts).await.unwrap();
    let mut batch = Box::pin(dearer_next(Priority::Batch, 500, &starts));
    assert!(futures::poll!(batch.as_mut()).is_pending());
    sleep(MS(550)).await;
    dearer_next(Priority::Default, 50, &starts).await.unwrap();
    let asked = tokio::time::Instant::now();
    let critical = dearer_next_within(Priority::Critical, 800, &starts).await;
    assert!(matches!(
        critical,
        Err(ApiError::Rejected(resil::Rejected::RateLimited { .. }))
    ));
    assert_eq!(asked.elapsed(), Duration::ZERO);
    drop(batch);
}
