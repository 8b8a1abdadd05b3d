//! `priority` and `fair` with gates and bulkhead queues per key: each key's waiters are
//! served by class and in turn among themselves, and a key's waiters never hold another's.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::{at, ApiError, Starts};
use tokio::time::sleep;

const MS: fn(u64) -> Duration = Duration::from_millis;

#[resilient(rate = "10/s per key", key = model, priority = class)]
async fn per_model(
    model: &str,
    class: Priority,
    starts: &Starts<(String, Priority)>,
) -> Result<(), ApiError> {
    starts.add((model.to_owned(), class));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_keys_gate_serves_its_critical_call_before_its_batch_calls() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| per_model("a", Priority::Batch, &starts)));
    let critical = at(MS(10), || per_model("a", Priority::Critical, &starts));
    let other = at(MS(10), || per_model("b", Priority::Batch, &starts));
    let (batch, critical, other) = tokio::join!(batch, critical, other);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok() && other.is_ok());
    // The next slot of key a's gate, at 100 ms, not after the 20 batch calls.
    assert_eq!(starts.of(&("a".into(), Priority::Critical)), [MS(100)]);
    // Key b's gate is its own: its call starts at once.
    assert_eq!(starts.of(&("b".into(), Priority::Batch)), [MS(10)]);
    // Key a's gate keeps its rate for all of its calls together.
    let mut a = starts.of(&("a".into(), Priority::Batch));
    a.extend(starts.of(&("a".into(), Priority::Critical)));
    a.sort();
    assert_eq!(a.len(), 21);
    assert!(a.windows(2).all(|w| w[1] - w[0] >= MS(100)), "{a:?}");
}

#[resilient(rate = "10/s per key", key = model, fair = tenant)]
async fn per_model_fair(
    model: &str,
    tenant: &str,
    starts: &Starts<String>,
) -> Result<(), ApiError> {
    let _ = model;
    starts.add(tenant.to_owned());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_keys_gate_takes_its_tenants_in_turn() {
    let starts = Starts::new();
    let heavy = join_all((0..20).map(|_| per_model_fair("a", "heavy", &starts)));
    let light = join_all((0..3).map(|_| at(MS(10), || per_model_fair("a", "light", &starts))));
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(heavy.iter().chain(&light).all(Result::is_ok));
    assert_eq!(starts.of(&"light".to_owned()), [MS(200), MS(400), MS(600)]);
}

#[resilient(bulkhead = "1 per key", bulkhead_queue = 10, key = model, priority = class)]
async fn one_place_per_model(
    model: &str,
    class: Priority,
    starts: &Starts<(String, Priority)>,
) -> Result<(), ApiError> {
    starts.add((model.to_owned(), class));
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_keys_bulkhead_gives_its_freed_place_to_the_most_urgent_waiter() {
    let starts = Starts::new();
    let batch = join_all((0..3).map(|_| one_place_per_model("a", Priority::Batch, &starts)));
    let critical = at(MS(100), || {
        one_place_per_model("a", Priority::Critical, &starts)
    });
    let other = at(MS(100), || {
        one_place_per_model("b", Priority::Batch, &starts)
    });
    let (batch, critical, other) = tokio::join!(batch, critical, other);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok() && other.is_ok());
    let s = Duration::from_secs;
    assert_eq!(starts.of(&("a".into(), Priority::Critical)), [s(1)]);
    assert_eq!(
        starts.of(&("a".into(), Priority::Batch)),
        [s(0), s(2), s(3)]
    );
    assert_eq!(starts.of(&("b".into(), Priority::Batch)), [MS(100)]);
}

#[resilient(key = model, rate = "10/s per key", priority = class, route = model in others.iter().copied())]
async fn routed(
    model: &str,
    others: &[&str],
    class: Priority,
    starts: &Starts<(String, Priority)>,
) -> Result<(), ApiError> {
    let _ = others;
    starts.add((model.to_owned(), class));
    Ok(())
}

/// A call to model a, then b, under a deadline of a second (the nested call inherits it).
#[resilient(deadline = "1s")]
async fn within_a_second(
    class: Priority,
    starts: &Starts<(String, Priority)>,
) -> Result<(), ApiError> {
    routed("a", &["b"], class, starts).await
}

/// Model a's gate has 20 batch calls waiting: a batch call routed to a, then b, would wait
/// 2 s there, past its deadline, so the route sends it to b at once; a critical call, next in
/// a's room, still goes to a.
#[tokio::test(start_paused = true)]
async fn a_route_judges_a_target_by_the_callers_turn_in_its_room() {
    let starts = Starts::new();
    let queued = join_all((0..20).map(|_| routed("a", &[], Priority::Batch, &starts)));
    let batch = at(MS(10), || within_a_second(Priority::Batch, &starts));
    let critical = at(MS(10), || within_a_second(Priority::Critical, &starts));
    let (queued, batch, critical) = tokio::join!(queued, batch, critical);
    assert!(queued.iter().all(Result::is_ok) && batch.is_ok() && critical.is_ok());
    assert_eq!(starts.of(&("b".into(), Priority::Batch)), [MS(10)]);
    assert_eq!(starts.of(&("a".into(), Priority::Critical)), [MS(100)]);
}
