//! `rate`, `token_rate` with `rate_cost`, and `bulkhead_queue` on annotated functions: callers
//! wait their turn within their deadline, or are refused at once without calling.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::{sleep, Instant};

struct Request {
    max_tokens: u32,
}

#[resilient(rate = "5/s")]
async fn gated(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Ok(())
}

/// Its own gate: tests run side by side, and each annotated function has one.
#[resilient(rate = "5/s")]
async fn gated_alone(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Ok(())
}

#[resilient(rate = "5/s", deadline = "1s")]
async fn gated_with_deadline(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Ok(())
}

#[resilient(token_rate = "1000/s", rate_cost = req.max_tokens, retry = 1)]
async fn completion(req: &Request, calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Ok(())
}

#[resilient(bulkhead = 2, bulkhead_queue = 3)]
async fn queued(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_rate_gate_serves_everyone_in_turn() {
    let calls = Calls::default();
    let origin = Instant::now();
    let done = join_all((0..20).map(|_| async {
        gated(&calls).await.unwrap();
        origin.elapsed()
    }))
    .await;
    assert_eq!(calls.count(), 20);
    assert_eq!(done.iter().max(), Some(&Duration::from_millis(3800)));
}

/// `rate = "5/s"` means what it says: a provider counting over a sliding second never sees a
/// sixth call.
#[tokio::test(start_paused = true)]
async fn a_default_gate_never_starts_more_than_its_count_in_any_window() {
    let calls = Calls::default();
    let origin = Instant::now();
    let mut started = join_all((0..20).map(|_| async {
        gated_alone(&calls).await.unwrap();
        origin.elapsed()
    }))
    .await;
    started.sort();
    for (first, sixth) in started.iter().zip(&started[5..]) {
        assert!(
            *sixth - *first >= Duration::from_secs(1),
            "six calls within a second: {started:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_gate_refuses_at_once_what_its_deadline_cannot_wait_for() {
    let calls = Calls::default();
    let results = join_all((0..20).map(|_| gated_with_deadline(&calls))).await;
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(ApiError::Rejected(Rejected::RateLimited { .. }))))
        .count();
    // Slots 200 ms apart: the five from 0 to 800 ms fit the deadline; one at 1 s, the deadline
    // itself, would leave its call no time.
    assert_eq!((calls.count(), refused), (5, 15));
}

#[tokio::test(start_paused = true)]
async fn the_cost_expression_weighs_each_call() {
    let calls = Calls::default();
    let origin = Instant::now();
    completion(&Request { max_tokens: 600 }, &calls)
        .await
        .unwrap();
    completion(&Request { max_tokens: 600 }, &calls)
        .await
        .unwrap();
    assert_eq!(origin.elapsed(), Duration::from_millis(200));
    let too_big = completion(&Request { max_tokens: 5000 }, &calls).await;
    assert!(matches!(
        too_big,
        Err(ApiError::Rejected(Rejected::OverBurst {
            cost: 5000,
            burst: 1000
        }))
    ));
    assert_eq!(calls.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_queue_lets_callers_wait_for_the_bulkhead() {
    let calls = Calls::default();
    let results = join_all((0..6).map(|_| queued(&calls))).await;
    let full = results
        .iter()
        .filter(|r| {
            matches!(
                r,
                Err(ApiError::Rejected(Rejected::BulkheadFull { limit: 2 }))
            )
        })
        .count();
    assert_eq!((calls.count(), full), (5, 1));
}

/// A 429 on its first call, then answers: the gate's limit known exactly or not.
async fn throttled_once(calls: &Calls) -> Result<(), ApiError> {
    if calls.add() == 1 {
        return Err(ApiError::Throttled(Duration::from_secs(1)));
    }
    Ok(())
}

#[resilient(rate = "2/s", retry = 1, jitter = "none")]
async fn guessed(calls: &Calls) -> Result<(), ApiError> {
    throttled_once(calls).await
}

#[resilient(rate = "2/s, exact", retry = 1, jitter = "none")]
async fn known(calls: &Calls) -> Result<(), ApiError> {
    throttled_once(calls).await
}

/// After a 429 both gates wait out its second; then a gate declared `exact` goes on at its
/// 2/s, and one that guessed its limit goes 20 % slower for a while.
#[tokio::test(start_paused = true)]
async fn a_gate_declared_exact_is_held_by_a_429_but_not_slowed() {
    for exact in [false, true] {
        let calls = Calls::default();
        let origin = Instant::now();
        let call = || async {
            match exact {
                true => known(&calls).await,
                false => guessed(&calls).await,
            }
        };
        call().await.unwrap();
        assert_eq!(origin.elapsed(), Duration::from_secs(1), "the 429's wait");
        call().await.unwrap();
        let spacing = origin.elapsed() - Duration::from_secs(1);
        match exact {
            true => assert_eq!(spacing, Duration::from_millis(500)),
            // 20 % slower, fading over ten periods: a tenth of it gone after the 1 s wait
            // (612.5 ms, which tokio's timer rounds up to its millisecond).
            false => assert_eq!(spacing, Duration::from_millis(613)),
        }
    }
}

/// Stands for a provider whose every answer says nothing is left until a second from now.
#[resilient(rate = "auto")]
async fn learning(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    let spent = resil::Quota {
        limit: Some(10),
        remaining: 0,
        reset: Duration::from_secs(1),
        window: None,
    };
    resil::operation::report_limits(resil::ProviderLimits {
        requests: Some(spent),
        tokens: None,
    });
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_auto_gate_probes_then_follows_what_the_answers_say() {
    let calls = Calls::default();
    let start = Instant::now();
    let ended = join_all((0..3).map(|_| async {
        learning(&calls).await.unwrap();
        start.elapsed()
    }))
    .await;
    // The probe at once; its answer says nothing is left for a second; then one a second.
    assert_eq!(
        ended,
        [0, 1, 2].map(Duration::from_secs),
        "each answer holds the gate until its reset"
    );
    assert_eq!(calls.count(), 3);
}
