//! Routes at their edges, on tokio's paused clock: the route's own bulkhead place, a target
//! that closes while another fails, going back after an error that moves on, a throttle with
//! a choice of targets, and the end when every target is skipped after a failure.

use std::time::Duration;

use crate::common::{Recorder, TargetCalls as Calls, TestError};
use resil_runtime::{Jitter, Keyed, Policy, PolicyBuilder};
use tokio::time::Instant;

fn keyed(retry: u32, threshold: u32) -> PolicyBuilder<Keyed> {
    Policy::builder()
        .retry(retry)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .breaker_per_key("model", threshold, Duration::from_secs(30))
}

/// Another caller's call through `breaker` fails `after` from now.
async fn another_callers_failure(breaker: &resil_runtime::Breaker, after: Duration) {
    tokio::time::sleep(after).await;
    let ticket = breaker.admit().await.unwrap();
    ticket.record(resil_runtime::Verdict::Failure);
}

fn seen(calls: &[(&str, u128)]) -> Vec<(String, u128)> {
    calls.iter().map(|(t, at)| ((*t).to_owned(), *at)).collect()
}

/// A per-key bulkhead of 1 with nothing in flight: the caller's target is idle and is
/// called; the place the route itself holds in it does not make it look full.
#[tokio::test(start_paused = true)]
async fn an_idle_first_target_with_a_bulkhead_of_one_is_called() {
    let policy = keyed(2, 5).bulkhead(1).bulkhead_per_key().build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            async move { Ok::<_, TestError>(model) }
        })
        .await;
    assert_eq!(answer, Ok("gpt"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0)]));
}

/// The same with one target only: it is called, not refused.
#[tokio::test(start_paused = true)]
async fn a_route_of_one_target_with_a_bulkhead_of_one_calls_it() {
    let policy = keyed(2, 5).bulkhead(1).bulkhead_per_key().build().unwrap();
    let answer = policy
        .run_routed("gpt", [], |model| async move { Ok::<_, TestError>(model) })
        .await;
    assert_eq!(answer, Ok("gpt"));
}

/// A per-key bulkhead of 2 with one other call in flight: the route holds the free place,
/// and calls.
#[tokio::test(start_paused = true)]
async fn a_first_target_with_a_free_place_is_called() {
    let policy = keyed(2, 5).bulkhead(2).bulkhead_per_key().build().unwrap();
    let (other, answer) = tokio::join!(
        policy.run_keyed("gpt", || async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, TestError>("other")
        }),
        async {
            tokio::task::yield_now().await;
            policy
                .run_routed("gpt", [], |model| async move { Ok::<_, TestError>(model) })
                .await
        }
    );
    assert_eq!(other, Ok("other"));
    assert_eq!(answer, Ok("gpt"));
}

/// The choice after a failure is made then: another caller opened claude's breaker during
/// gpt's call, so the route goes back to gpt, after the backoff, as a retry would.
#[tokio::test(start_paused = true)]
async fn going_back_to_a_failed_target_waits_the_backoff_even_if_the_fresh_one_closed_meanwhile() {
    let policy = keyed(2, 10).build().unwrap();
    let keys = policy.keys().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            let first = calls.seen().len() == 1;
            async move {
                if first {
                    // Another caller's failures open claude's breaker during gpt's call.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    keys.get("claude").breaker().unwrap().force_open();
                    Err(TestError::Busy)
                } else {
                    Ok(model)
                }
            }
        })
        .await;
    assert_eq!(answer, Ok("gpt"));
    // Back to gpt, which just failed: after the backoff of attempt 0 (1 s), as a retry.
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("gpt", 1100)]));
}

/// gpt fails (503), claude refuses for good (`moves_on`): going back to gpt, which failed,
/// waits the backoff.
#[tokio::test(start_paused = true)]
async fn going_back_after_an_error_that_moves_on_waits_the_backoff() {
    let policy = keyed(3, 10).build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            let n = calls.seen().len();
            async move {
                match (model, n) {
                    ("gpt", 1) => Err(TestError::Busy),
                    ("claude", _) => Err(TestError::TooLong),
                    _ => Ok(model),
                }
            }
        })
        .await;
    assert_eq!(answer, Ok("gpt"));
    // The backoff of attempt 1 (base · 2, no jitter), as in the suite's own
    // coming_back_to_a_target_that_failed_waits_the_backoff.
    assert_eq!(
        calls.seen(),
        seen(&[("gpt", 0), ("claude", 0), ("gpt", 2000)])
    );
}

/// A throttle never waits while another target admits now: gpt throttles, claude's gate has
/// its next slot 10 s away (within the deadline, so not skipped), mini admits now: mini.
#[tokio::test(start_paused = true)]
async fn a_throttle_goes_to_a_target_that_admits_now_rather_than_one_that_waits() {
    let policy = keyed(2, 5)
        .rate(1, Duration::from_secs(10), 1)
        .rate_per_key()
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    // claude's slot is used: its next one is 10 s away.
    assert_eq!(
        policy
            .run_keyed("claude", || async { Ok::<_, TestError>(()) })
            .await,
        Ok(())
    );
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude", "mini"], |model| {
            calls.record(model, start);
            async move {
                match model {
                    "gpt" => Err(TestError::Throttled(Duration::from_secs(20))),
                    _ => Ok(model),
                }
            }
        })
        .await;
    assert_eq!(answer, Ok("mini"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("mini", 0)]));
}

/// gpt fails and its breaker opens (threshold 1); claude is skipped (its bulkhead is full).
/// Every target skipped after a failure ends with what the provider said last, whatever
/// the skip.
#[tokio::test(start_paused = true)]
async fn after_a_failure_every_target_skipped_ends_with_the_providers_error_whatever_the_skip() {
    let policy = keyed(2, 1).bulkhead(2).bulkhead_per_key().build().unwrap();
    let busy = || async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, TestError>("other")
    };
    let (one, two, answer) = tokio::join!(
        policy.run_keyed("claude", busy),
        policy.run_keyed("claude", busy),
        async {
            tokio::task::yield_now().await;
            policy
                .run_routed("gpt", ["claude"], |_| async {
                    Err::<(), _>(TestError::Busy)
                })
                .await
        }
    );
    assert_eq!((one, two), (Ok("other"), Ok("other")));
    assert_eq!(answer, Err(TestError::Busy));
}

/// After a failure, when every target would be skipped, the operation ends at once with the
/// provider's error, as an unrouted retry that finds its breaker open does: no wait, no
/// Waiting event, no retry drawn for an attempt never made.
#[tokio::test(start_paused = true)]
async fn after_a_failure_with_every_target_skipped_nothing_is_waited_nor_drawn() {
    let recorder = Recorder::new();
    let policy = keyed(2, 1).listener(recorder.clone()).build().unwrap();
    policy
        .keys()
        .unwrap()
        .get("claude")
        .breaker()
        .unwrap()
        .force_open();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |_| async {
            Err::<(), _>(TestError::Busy)
        })
        .await;
    assert_eq!(answer, Err(TestError::Busy));
    assert_eq!(recorder.waits(), [], "{:?}", recorder.lines());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A model compared by a count of its comparisons.
#[derive(Clone, Debug)]
struct Model(u32);

impl std::hash::Hash for Model {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

thread_local! {
    static COMPARED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl PartialEq for Model {
    fn eq(&self, other: &Self) -> bool {
        COMPARED.with(|compared| compared.set(compared.get() + 1));
        self.0 == other.0
    }
}

impl Eq for Model {}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "m{}", self.0)
    }
}

/// A route of 1 000 targets, two of them repeated: the repeats are dropped in a number of
/// comparisons that grows with the route, not with its square, before the first attempt.
#[tokio::test(start_paused = true)]
async fn the_repeats_of_a_long_route_are_dropped_in_linear_time() {
    let policy = keyed(2, 5).build().unwrap();
    let models: Vec<Model> = (0..1000).map(Model).chain([Model(0), Model(500)]).collect();
    let calls = Calls::default();
    let start = Instant::now();
    COMPARED.with(|compared| compared.set(0));
    let compared = std::cell::Cell::new(None);
    let answer = policy
        .run_routed(&models[0], &models[1..], |model| {
            compared.set(compared.get().or(Some(COMPARED.with(std::cell::Cell::get))));
            calls.record(&model.to_string(), start);
            async move { Err::<(), _>(TestError::Busy) }
        })
        .await;
    assert_eq!(answer, Err(TestError::Busy));
    let compared = compared.get().unwrap();
    assert!(
        compared <= 1002,
        "{compared} comparisons before the first attempt"
    );
    // No repeat is called: m0, m1, m2 (retry = 2).
    assert_eq!(calls.targets(), ["m0", "m1", "m2"]);
}

/// The route moves from gpt to claude, half-open: the attempt on claude is its probe, and a
/// call nested in it through claude's breaker is part of it (the frame names the breaker the
/// route moved to), not a caller waiting for the probe's verdict, which depends on itself.
#[tokio::test(start_paused = true)]
async fn a_call_nested_in_a_probe_the_route_moved_to_goes_through_its_breaker() {
    let policy = keyed(2, 1).timeout(Duration::from_secs(5)).build().unwrap();
    let opened = policy
        .run_keyed("claude", || async { Err::<&str, _>(TestError::Busy) })
        .await;
    assert_eq!(opened, Err(TestError::Busy));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let start = Instant::now();
    let policy = &policy;
    let answer = policy
        .run_routed("gpt", ["claude"], |model| async move {
            match model {
                "gpt" => Err(TestError::Busy),
                _ => {
                    policy
                        .run_keyed("claude", || async { Ok::<_, TestError>("nested") })
                        .await
                }
            }
        })
        .await;
    assert_eq!(answer, Ok("nested"));
    assert_eq!(start.elapsed(), Duration::ZERO, "the nested call waited");
}

/// The first racer, on gpt, is admitted; gpt's breaker opens while it runs. The hedge goes to
/// claude, and a call nested in it through gpt's breaker is refused: the hedge's frame names
/// claude's breaker, the one it goes through, not the first racer's.
#[tokio::test(start_paused = true)]
async fn a_call_nested_in_a_hedge_elsewhere_does_not_pass_the_first_racers_open_breaker() {
    let policy = keyed(2, 5)
        .timeout(Duration::from_secs(10))
        .hedge(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let policy = &policy;
    let gpt = policy.keys().unwrap().get("gpt");
    let gpt = gpt.breaker().unwrap();
    let nested = std::sync::Mutex::new(None);
    let nested = &nested;
    let answer = policy
        .run_routed("gpt", ["claude"], |model| async move {
            if model == "gpt" {
                gpt.force_open();
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Ok("gpt");
            }
            let inner = policy
                .run_keyed("gpt", || async { Ok::<_, TestError>("nested") })
                .await;
            *nested.lock().unwrap() = Some(inner.clone());
            tokio::time::sleep(Duration::from_secs(5)).await;
            inner
        })
        .await;
    assert_eq!(answer, Ok("gpt"));
    let nested = nested.lock().unwrap().clone();
    assert!(
        matches!(
            nested,
            Some(Err(TestError::Rejected(
                resil_runtime::Rejected::BreakerOpen { .. }
            )))
        ),
        "the nested call passed gpt's open breaker: {nested:?}"
    );
}

/// gpt fails (503), then claude, then mini refuses for good: the route goes back to gpt after
/// the backoff, during which gpt's breaker opens (another caller's failure). gpt refuses the
/// attempt without a call: the route chooses again and claude, which could still serve, is
/// called, instead of the operation ending with mini's refusal.
#[tokio::test(start_paused = true)]
async fn a_target_that_refuses_before_its_call_after_a_move_on_lets_the_route_choose_again() {
    let policy = keyed(3, 2).build().unwrap();
    let gpt = policy.keys().unwrap().get("gpt");
    let gpt = gpt.breaker().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let (answer, ()) = tokio::join!(
        policy.run_routed("gpt", ["claude", "mini"], |model| {
            calls.record(model, start);
            let first = calls.seen().len() <= 3;
            async move {
                match (model, first) {
                    ("mini", _) => Err(TestError::TooLong),
                    (_, true) => Err(TestError::Busy),
                    _ => Ok(model),
                }
            }
        }),
        another_callers_failure(gpt, Duration::from_millis(500)),
    );
    assert_eq!(answer, Ok("claude"));
    let targets = calls.targets();
    assert_eq!(targets[..3], ["gpt", "claude", "mini"]);
    assert_eq!(
        targets.last().map(String::as_str),
        Some("claude"),
        "{targets:?}"
    );
}

/// One breaker for the whole policy, not one per target: gpt fails and opens it (threshold
/// 1), so every target would refuse the next attempt. The operation ends at once with gpt's
/// error, as the route's table says for every target skipped after a failure; it waited out
/// the 30 s cooldown, going from target to target with a backoff before each refusal, then
/// called claude.
#[tokio::test(start_paused = true)]
async fn a_breaker_of_the_whole_policy_opened_by_a_failure_ends_the_route_at_once() {
    let policy = Policy::builder()
        .retry(2)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .breaker_named("route_edges.whole", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            async move {
                match model {
                    "gpt" => Err(TestError::Busy),
                    _ => Ok(model),
                }
            }
        })
        .await;
    assert_eq!(
        (answer, start.elapsed()),
        (Err(TestError::Busy), Duration::ZERO)
    );
    assert_eq!(calls.seen(), seen(&[("gpt", 0)]));
}

/// gpt fails, claude (fresh, at once) fails; the route goes back to gpt after the backoff of
/// the second attempt (2 s), but gpt's breaker opened meanwhile (another caller's failure,
/// its second) and refuses before the call: claude, which failed as long ago, is called at once. Before,
/// it waited a second backoff (2 s more), past the operation's worst case (the simulator's
/// `worst_case_holds`, seeds 19063 and 94135).
#[tokio::test(start_paused = true)]
async fn a_target_that_refuses_after_the_backoff_does_not_make_the_route_wait_it_again() {
    let policy = keyed(3, 2).build().unwrap();
    let gpt = policy.keys().unwrap().get("gpt");
    let gpt = gpt.breaker().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let (answer, ()) = tokio::join!(
        policy.run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            let first = calls.seen().len() <= 2;
            async move {
                match first {
                    true => Err(TestError::Busy),
                    false => Ok(model),
                }
            }
        }),
        another_callers_failure(gpt, Duration::from_secs(1)),
    );
    assert_eq!(answer, Ok("claude"));
    // gpt's attempt at 2 s was made (its body's future) and refused before its call.
    assert_eq!(
        calls.seen(),
        seen(&[("gpt", 0), ("claude", 0), ("gpt", 2000), ("claude", 2000)])
    );
}

/// 5/s per target, deadline 1 s: gpt's next slot is at 1 s, the deadline itself, which the
/// attempt's gate refuses (a slot must leave its call time); claude's at 600 ms fits. The route
/// judges gpt as its gate will, skips it, and calls claude. Before, it judged by the deadline
/// itself, chose gpt, and the operation ended refused without trying claude.
#[tokio::test(start_paused = true)]
async fn a_target_whose_slot_is_at_the_deadline_is_skipped_for_one_that_fits() {
    let policy = keyed(0, 10)
        .rate(5, Duration::from_secs(1), 1)
        .rate_per_key()
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let keys = policy.keys().unwrap();
    for (model, taken) in [("gpt", 5), ("claude", 3)] {
        let scope = keys.get(model);
        for _ in 0..taken {
            scope.rate_gate().unwrap().reserve(1, None).unwrap();
        }
    }
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            let calls = &calls;
            async move {
                calls.record(model, start);
                Ok::<_, TestError>(model)
            }
        })
        .await;
    assert_eq!(answer, Ok("claude"));
    assert_eq!(calls.seen(), seen(&[("claude", 600)]));
}

/// gpt fails; claude fails asking for an hour (past `retry_after_max`, 30 s); going back to
/// gpt after the backoff, its breaker has opened and refuses before the call: the route ends
/// with claude's error rather than wait the hour claude asked.
#[tokio::test(start_paused = true)]
async fn after_a_refusal_a_retry_after_past_retry_after_max_ends_the_route() {
    let policy = keyed(3, 2)
        .retry_after_max(Duration::from_secs(30))
        .build()
        .unwrap();
    let gpt = policy.keys().unwrap().get("gpt");
    let gpt = gpt.breaker().unwrap();
    let start = Instant::now();
    let (answer, ()) = tokio::join!(
        policy.run_routed("gpt", ["claude"], |model| async move {
            match model {
                "gpt" => Err::<&str, _>(TestError::Busy),
                _ => Err(TestError::RetryAfter(Duration::from_secs(3600))),
            }
        }),
        another_callers_failure(gpt, Duration::from_secs(1)),
    );
    assert!(answer.is_err());
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}
