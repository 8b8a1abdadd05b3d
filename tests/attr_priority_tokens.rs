//! `priority = ARG` and `fair = ARG` with a token gate: callers that must wait for their units
//! are served most urgent first and in turn across tenants there too, so a critical call is not
//! queued behind the tokens of a batch job that the request gate already let through.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::ApiError;
use tokio::time::sleep;

/// Each start's label and the tokens it took.
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

#[resilient(token_rate = "1000/s", rate_cost = cost, priority = class)]
async fn given_up(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class.as_str(), cost));
    Ok(())
}

/// Never more tokens started within any `period` than the gate lets: its count and burst,
/// less one.
fn keep_units(starts: &Starts, label: impl Fn(&'static str) -> bool, most: u64) {
    let mut all: Vec<(Duration, u64)> = ["critical", "batch", "light", "heavy"]
        .into_iter()
        .filter(|l| label(l))
        .flat_map(|l| {
            [1, 10, 500, 1000]
                .into_iter()
                .flat_map(move |cost| starts.of(&(l, cost)).into_iter().map(move |at| (at, cost)))
        })
        .collect();
    all.sort();
    for (at, _) in &all {
        let within: u64 = (all.iter())
            .filter(|(other, _)| *other >= *at && *other < *at + Duration::from_secs(1))
            .map(|(_, cost)| cost)
            .sum();
        assert!(within <= most, "{within} tokens from {at:?}: {all:?}");
    }
}

/// Calls `call` at `at` after the origin.
async fn at<F: std::future::Future<Output = Result<(), ApiError>>>(
    at: Duration,
    call: impl FnOnce() -> F,
) -> Result<(), ApiError> {
    sleep(at).await;
    call().await
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
    keep_units(&starts, |_| true, 1999);
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
    keep_units(&starts, |_| true, 1999);
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
    keep_units(&starts, |_| true, 1999);
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
    keep_units(&starts, |_| true, 1999);
}

#[tokio::test(start_paused = true)]
async fn a_token_waiter_that_gives_up_leaves_no_hole() {
    let starts = Starts::new();
    let batch = join_all((0..6).map(|_| given_up(Priority::Batch, 500, &starts)));
    // Next in line from 1.05 s, with the units due at 1.5 s booked for it: it leaves at 1.2 s.
    let leaves = at(MS(1050), || async {
        let call = given_up(Priority::Critical, 500, &starts);
        let _ = tokio::time::timeout(MS(150), call).await;
        Ok(())
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
