//! `token_rate = "1000/s, batch 50%"` with `priority`: while calls of other classes come,
//! batch calls take at most the share of the token gate's tokens, so the others find their
//! units free; when none came for a period, batch calls take all of them.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::{at, ApiError};

/// Each start's class and the tokens it took. Each test has its own function, and so its own
/// gates: tests run side by side.
type Starts = support::Starts<(Priority, u64)>;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Default calls of 100 tokens every 200 ms for 2 s; 40 batch calls of 100 tokens at 1 ms.
async fn defaults_beside_a_batch_job<F: std::future::Future<Output = Result<(), ApiError>>>(
    call: impl Fn(Priority) -> F,
) {
    let defaults = join_all((0..10).map(|n| at(MS(200 * n), || call(Priority::Default))));
    let batch = join_all((0..40).map(|_| at(MS(1), || call(Priority::Batch))));
    let (defaults, batch) = tokio::join!(defaults, batch);
    assert!(defaults.iter().chain(&batch).all(Result::is_ok));
}

#[resilient(token_rate = "1000/s, batch 50%", rate_cost = 100, priority = class)]
async fn with_share(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class, 100));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_token_share_keeps_batch_to_its_tokens_while_others_come_and_all_of_them_after() {
    let starts = Starts::new();
    defaults_beside_a_batch_job(|class| with_share(class, &starts)).await;
    // Every default call found its units free: it started as it came.
    let arrivals: Vec<_> = (0..10).map(|n| MS(200 * n)).collect();
    assert_eq!(starts.of(&(Priority::Default, 100)), arrivals);
    // While they came (and for the gate's period after the last, at 1.8 s), the batch took
    // at most half the tokens: 500 a second, after the share's burst of 500.
    let batch = starts.of(&(Priority::Batch, 100));
    let early = batch.iter().filter(|at| **at < MS(2800)).count();
    assert!(early <= 19, "{early} batch calls before 2.8 s: {batch:?}");
    // Then all of them: 1 000 a second, 100 ms apart once the gate's burst is spent.
    let late: Vec<_> = batch.iter().filter(|at| **at >= MS(2800)).collect();
    assert_eq!(late.len(), 40 - early, "{batch:?}");
    for pair in late.windows(2).skip(10) {
        assert_eq!(*pair[1] - *pair[0], MS(100), "{batch:?}");
    }
    starts.keep_units(1999);
}

#[resilient(token_rate = "1000/s", rate_cost = 100, priority = class)]
async fn without_share(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class, 100));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn without_the_token_share_default_calls_wait_behind_the_batch_tokens() {
    let starts = Starts::new();
    defaults_beside_a_batch_job(|class| without_share(class, &starts)).await;
    let late = (starts.of(&(Priority::Default, 100)).iter().enumerate())
        .filter(|(n, at)| **at > MS(200 * *n as u64))
        .count();
    assert!(
        late >= 7,
        "{late} default calls waited: {starts:?}",
        starts = starts.all()
    );
}

#[resilient(token_rate = "1000/s, batch 50%", rate_cost = cost, priority = class)]
async fn large_batch(class: Priority, cost: u64, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class, cost));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_batch_call_larger_than_the_shares_burst_waits_the_longer_for_it() {
    let starts = Starts::new();
    large_batch(Priority::Default, 100, &starts).await.unwrap();
    // 800 tokens where the share holds 500 at once: 300 more at its 500 a second.
    at(MS(1), || large_batch(Priority::Batch, 800, &starts))
        .await
        .unwrap();
    assert_eq!(starts.of(&(Priority::Batch, 800)), [MS(601)]);
}

#[resilient(token_rate = "1000/s, batch 50%", rate_cost = 100, priority = class)]
async fn batch_alone(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class, 100));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn batch_calls_take_all_the_tokens_when_nobody_else_comes() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| batch_alone(Priority::Batch, &starts)));
    assert!(batch.await.iter().all(Result::is_ok));
    // The burst's ten at once, then one every 100 ms.
    assert_eq!(starts.all().last(), Some(&MS(1000)));
}

#[resilient(rate = "20/s", token_rate = "1000/s, batch 50%", rate_cost = 100, priority = class)]
async fn share_beside_a_rate(class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add((class, 100));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn beside_a_rate_gate_a_batch_call_takes_its_place_in_the_token_share_after_its_slot() {
    let starts = Starts::new();
    defaults_beside_a_batch_job(|class| share_beside_a_rate(class, &starts)).await;
    // A default call waits at most for the request slot booked for the next batch call.
    for (n, at) in starts.of(&(Priority::Default, 100)).iter().enumerate() {
        assert!(*at - MS(200 * n as u64) <= MS(50), "{:?}", starts.all());
    }
    let batch = starts.of(&(Priority::Batch, 100));
    let early = batch.iter().filter(|at| **at < MS(2800)).count();
    assert!(early <= 19, "{early} batch calls before 2.8 s: {batch:?}");
    starts.keep_units(1999);
    starts.keep_rate(20, Duration::from_secs(1));
}
