//! Hedges sent to other targets, each racer on its own: what a racer holds (a probe, a
//! learning gate's probe slot) goes back to its own target, an error that moves on bans the
//! target that sent it while the race goes on, and a Retry-After delays only the target that
//! asked. On tokio's paused clock.

use std::time::Duration;

use crate::common::{Recorder, TargetCalls as Calls, TestError};
use futures::StreamExt;
use resil_runtime::stream::Commit;
use resil_runtime::{BreakerState, Jitter, Keyed, Policy, PolicyBuilder, Verdict};
use tokio::time::{sleep, Instant};

const DELAY: Duration = Duration::from_millis(800);
const HOUR: Duration = Duration::from_secs(3600);

/// Routed hedges over breakers per model (threshold `threshold`, cooldown 30 s).
fn hedged(threshold: u32) -> PolicyBuilder<Keyed> {
    Policy::builder()
        .timeout(Duration::from_secs(10))
        .retry(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .breaker_per_key("model", threshold, Duration::from_secs(30))
        .hedge(1, DELAY)
}

fn seen(calls: &[(&str, u128)]) -> Vec<(String, u128)> {
    calls.iter().map(|(t, at)| ((*t).to_owned(), *at)).collect()
}

/// gpt's breaker opens on one failure; after its cooldown gpt is half-open.
async fn half_open_gpt(policy: &Policy<Keyed>) {
    let failed = policy
        .run_keyed("gpt", || async { Err::<(), _>(TestError::Busy) })
        .await;
    assert_eq!(failed, Err(TestError::Busy));
    sleep(Duration::from_secs(30)).await;
}

/// One routed call from gpt over claude, where the next call goes: gpt only if its breaker
/// lets a call out.
async fn next_target(policy: &Policy<Keyed>) -> Result<&'static str, TestError> {
    policy
        .run_routed("gpt", ["claude"], |model| async move {
            Ok::<_, TestError>(model)
        })
        .await
}

// ---------------------------------------------------------------------------------------
// What a racer holds goes back to its own target.
// ---------------------------------------------------------------------------------------

/// gpt is half-open: the first racer is its probe, slow; the hedge to claude wins. The probe
/// is cancelled on gpt's breaker, not recorded on claude's: an hour later gpt lets a call out.
#[tokio::test(start_paused = true)]
async fn a_hedge_that_wins_elsewhere_gives_back_the_first_racers_probe() {
    let policy = hedged(1).build().unwrap();
    half_open_gpt(&policy).await;
    let answer = policy
        .run_routed("gpt", ["claude"], |model| async move {
            let delay = if model == "gpt" { 5000 } else { 100 };
            sleep(Duration::from_millis(delay)).await;
            Ok::<_, TestError>(model)
        })
        .await;
    assert_eq!(answer, Ok("claude"));
    sleep(HOUR).await;
    assert_eq!(
        next_target(&policy).await,
        Ok("gpt"),
        "gpt's probe is still out"
    );
}

/// The same for a stream hedge that commits on claude.
#[tokio::test(start_paused = true)]
async fn a_stream_hedge_that_commits_elsewhere_gives_back_the_first_racers_probe() {
    let policy = hedged(1).build().unwrap();
    half_open_gpt(&policy).await;
    let stream = policy
        .run_stream_routed_until(
            "gpt",
            ["claude"],
            Commit::first_item(),
            |model| async move {
                let delay = if model == "gpt" { 5000 } else { 100 };
                let items = futures::stream::once(async move {
                    sleep(Duration::from_millis(delay)).await;
                    Ok::<_, TestError>(model)
                });
                Ok::<_, TestError>(items)
            },
        )
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(items, [Ok("claude")]);
    sleep(HOUR).await;
    assert_eq!(
        next_target(&policy).await,
        Ok("gpt"),
        "gpt's probe is still out"
    );
}

/// gpt's auto gate knows nothing: the first racer takes its probe slot, slow; the hedge to
/// claude wins. The slot goes back to gpt's gate: its next caller probes at once, not after
/// the 60 s a lost probe is waited for.
#[tokio::test(start_paused = true)]
async fn a_hedge_that_wins_elsewhere_gives_back_the_first_racers_learning_probe() {
    let policy = Policy::builder()
        .keyed("model")
        .timeout(Duration::from_secs(10))
        .retry(1)
        .rate_learn()
        .rate_per_key()
        .hedge(1, DELAY)
        .build()
        .unwrap();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| async move {
            let delay = if model == "gpt" { 5000 } else { 100 };
            sleep(Duration::from_millis(delay)).await;
            Ok::<_, TestError>(model)
        })
        .await;
    assert_eq!(answer, Ok("claude"));
    let start = Instant::now();
    let answer = policy
        .run_keyed("gpt", || async { Ok::<_, TestError>("gpt") })
        .await;
    assert_eq!(answer, Ok("gpt"));
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "gpt's probe slot is still out"
    );
}

// ---------------------------------------------------------------------------------------
// An error that moves on bans the target that sent it; the race goes on.
// ---------------------------------------------------------------------------------------

/// A route of gpt and claude, each racer answering after `ms(model)` with `answer(model)`.
async fn race(
    policy: &Policy<Keyed>,
    calls: &Calls,
    ms: fn(&str) -> u64,
    answer: fn(&str) -> Result<&'static str, TestError>,
) -> Result<&'static str, TestError> {
    let start = Instant::now();
    policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            async move {
                sleep(Duration::from_millis(ms(model))).await;
                answer(model)
            }
        })
        .await
}

/// claude's hedge refuses for good (context too long) at 900 ms while gpt answers at 2 s:
/// claude is banned, gpt is not cancelled, and gpt's answer ends the operation.
#[tokio::test(start_paused = true)]
async fn an_error_that_moves_on_from_a_hedge_bans_the_hedges_target_and_the_race_goes_on() {
    let policy = hedged(5).build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = race(
        &policy,
        &calls,
        |model| if model == "gpt" { 2000 } else { 100 },
        |model| match model {
            "gpt" => Ok("gpt"),
            _ => Err(TestError::TooLong),
        },
    )
    .await;
    assert_eq!(answer, Ok("gpt"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("claude", 800)]));
    assert_eq!(start.elapsed(), Duration::from_millis(2000));
}

/// gpt refuses for good at 1 s while claude's hedge (sent at 800 ms) answers at 1.8 s: gpt
/// is banned, claude's hedge is not cancelled nor called again.
#[tokio::test(start_paused = true)]
async fn an_error_that_moves_on_from_the_first_racer_leaves_the_hedge_running() {
    let policy = hedged(5).build().unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = race(
        &policy,
        &calls,
        |_| 1000,
        |model| match model {
            "gpt" => Err(TestError::TooLong),
            _ => Ok("claude"),
        },
    )
    .await;
    assert_eq!(answer, Ok("claude"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("claude", 800)]));
    assert_eq!(start.elapsed(), Duration::from_millis(1800));
}

/// Both refuse for good, gpt first: each is banned, and with no target left the operation
/// ends with the last refusal, without calling either again.
#[tokio::test(start_paused = true)]
async fn when_every_racer_moves_on_the_last_refusal_ends_the_operation() {
    let policy = hedged(5).build().unwrap();
    let calls = Calls::default();
    let answer = race(&policy, &calls, |_| 1000, |_| Err(TestError::TooLong)).await;
    assert_eq!(answer, Err(TestError::TooLong));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("claude", 800)]));
}

/// claude's hedge refuses for good at 900 ms, then gpt fails (503) at 2 s: the route goes
/// back to gpt after the backoff, never to claude.
#[tokio::test(start_paused = true)]
async fn a_target_banned_during_a_race_is_not_called_after_it() {
    let policy = hedged(5).build().unwrap();
    let calls = Calls::default();
    let answer = race(
        &policy,
        &calls,
        |model| if model == "gpt" { 2000 } else { 100 },
        |model| match model {
            "gpt" => Err(TestError::Busy),
            _ => Err(TestError::TooLong),
        },
    )
    .await;
    assert_eq!(answer, Err(TestError::Busy));
    let targets = calls.targets();
    assert_eq!(targets[..2], ["gpt", "claude"]);
    assert!(
        !targets[2..].contains(&"claude".to_owned()),
        "{:?}",
        calls.seen()
    );
}

// ---------------------------------------------------------------------------------------
// A Retry-After delays the target that asked for it, and only it.
// ---------------------------------------------------------------------------------------

/// gpt throttles asking for 10 s: claude at once, which fails and opens its breaker
/// (threshold 1). Going back to gpt waits what gpt asked for, not only the backoff (2 s).
#[tokio::test(start_paused = true)]
async fn going_back_to_a_target_waits_its_own_retry_after_once_another_was_tried() {
    let policy = Policy::builder()
        .retry(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .breaker_per_key("model", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let calls = Calls::default();
    let start = Instant::now();
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            calls.record(model, start);
            let first = calls.seen().len() == 1;
            async move {
                match (model, first) {
                    ("gpt", true) => Err(TestError::Throttled(Duration::from_secs(10))),
                    ("gpt", false) => Ok(model),
                    _ => Err(TestError::Busy),
                }
            }
        })
        .await;
    assert_eq!(answer, Ok("gpt"));
    assert_eq!(
        calls.seen(),
        seen(&[("gpt", 0), ("claude", 0), ("gpt", 10_000)])
    );
}

/// The first racer (gpt) asks for 10 s at 850 ms while claude's hedge races on; claude
/// fails last at 900 ms and its breaker opens (one failure before, threshold 2). Going back
/// to gpt waits what gpt asked for, counted from its answer: at 10.85 s.
#[tokio::test(start_paused = true)]
async fn a_racers_retry_after_holds_its_target_after_the_race() {
    let policy = hedged(2).build().unwrap();
    claude_failed_once(&policy).await;
    let calls = Calls::default();
    let answer = race(
        &policy,
        &calls,
        |model| if model == "gpt" { 850 } else { 100 },
        |model| match model {
            "gpt" if NOW.with(|now| now.get()) == 0 => {
                NOW.with(|now| now.set(1));
                Err(TestError::RetryAfter(Duration::from_secs(10)))
            }
            "gpt" => Ok("gpt"),
            _ => Err(TestError::Busy),
        },
    )
    .await;
    assert_eq!(answer, Ok("gpt"));
    // (gpt's last racer is hedged on gpt at +800 ms: claude's breaker is open.)
    assert_eq!(
        calls.seen()[..3],
        seen(&[("gpt", 0), ("claude", 800), ("gpt", 10_850)])
    );
}

/// claude's hedge asks for 30 s and fails last (its breaker opens: one failure before,
/// threshold 2), after gpt failed asking for nothing: back to gpt after the backoff (2 s),
/// not after claude's 30 s.
#[tokio::test(start_paused = true)]
async fn a_hedges_retry_after_does_not_delay_another_target() {
    let policy = hedged(2).build().unwrap();
    claude_failed_once(&policy).await;
    let calls = Calls::default();
    let answer = race(
        &policy,
        &calls,
        |model| if model == "gpt" { 850 } else { 100 },
        |model| match model {
            "gpt" if NOW.with(|now| now.get()) == 0 => {
                NOW.with(|now| now.set(1));
                Err(TestError::Busy)
            }
            "gpt" => Ok("gpt"),
            _ => Err(TestError::RetryAfter(Duration::from_secs(30))),
        },
    )
    .await;
    assert_eq!(answer, Ok("gpt"));
    // (gpt's last racer is hedged on gpt at +800 ms: claude's breaker is open.)
    assert_eq!(
        calls.seen()[..3],
        seen(&[("gpt", 0), ("claude", 800), ("gpt", 2900)])
    );
}

/// gpt throttles asking for 10 s: claude at once, slow. Its hedge at 800 ms does not go to
/// gpt, whose wait is not over: it races on claude.
#[tokio::test(start_paused = true)]
async fn a_hedge_is_not_sent_to_a_target_whose_retry_after_is_not_over() {
    let policy = hedged(5).build().unwrap();
    let calls = Calls::default();
    let answer = race(
        &policy,
        &calls,
        |model| if model == "gpt" { 0 } else { 5000 },
        |model| match model {
            "gpt" => Err(TestError::Throttled(Duration::from_secs(10))),
            _ => Ok("claude"),
        },
    )
    .await;
    assert_eq!(answer, Ok("claude"));
    assert_eq!(
        calls.seen(),
        seen(&[("gpt", 0), ("claude", 0), ("claude", 800)])
    );
}

thread_local! {
    /// Whether gpt answered once in this test (each test runs on a thread of its own).
    static NOW: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One failure on claude before the test's call: its next opens its breaker (threshold 2).
async fn claude_failed_once(policy: &Policy<Keyed>) {
    let claude = policy.keys().unwrap().get("claude");
    let breaker = claude.breaker().unwrap();
    breaker.admit().await.unwrap().record(Verdict::Failure);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

// ---------------------------------------------------------------------------------------
// Every hedge's target is marked.
// ---------------------------------------------------------------------------------------

/// claude's breaker is open: gpt's hedge stays on gpt, and its target is marked as any
/// hedge's (`Routed { hedge: true }`).
#[tokio::test(start_paused = true)]
async fn a_hedge_kept_on_the_same_target_is_marked_as_a_hedge() {
    let recorder = Recorder::new();
    let policy = hedged(5).listener(recorder.clone()).build().unwrap();
    let keys = policy.keys().unwrap();
    keys.get("claude").breaker().unwrap().force_open();
    let calls = Calls::default();
    let answer = race(&policy, &calls, |_| 1000, |model| Ok(leak(model))).await;
    assert_eq!(answer, Ok("gpt"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("gpt", 800)]));
    let lines = recorder.lines();
    let routed: Vec<_> = lines
        .iter()
        .filter(|line| line.starts_with("route ") || line.starts_with("hedge "))
        .collect();
    assert_eq!(routed, ["route gpt", "hedge gpt"], "{lines:?}");
}

fn leak(model: &str) -> &'static str {
    match model {
        "gpt" => "gpt",
        _ => "claude",
    }
}

/// A hedge over 1 000 targets judges only as far as it needs: the next one, which would call
/// at once. The route keeps state for the two it looked at.
#[tokio::test(start_paused = true)]
async fn a_hedge_over_a_long_route_judges_only_as_far_as_it_needs() {
    let policy = hedged(5).build().unwrap();
    let models: Vec<String> = (0..1000).map(|n| format!("m{n}")).collect();
    let answer = policy
        .run_routed(&models[0], &models[1..], |model| async move {
            let delay = if model == "m0" { 5000 } else { 100 };
            sleep(Duration::from_millis(delay)).await;
            Ok::<_, TestError>(model.clone())
        })
        .await;
    assert_eq!(answer.as_deref(), Ok("m1"));
    assert_eq!(
        policy.keys().unwrap().len(),
        2,
        "keyed state made while judging"
    );
}

// ---------------------------------------------------------------------------------------
// A racer's target that asked to wait, or moved the operation on, gets no call from the
// racers after it: no hedge is sent to it, and a racer that has not called yet is dropped.
// ---------------------------------------------------------------------------------------

type Script = std::sync::Arc<std::sync::Mutex<Vec<(u64, Result<&'static str, TestError>)>>>;

/// Calls whose answers come after the delays given, in order of the calls: each records
/// when its body is first polled (when it calls), and only then takes its answer.
fn scripted(
    calls: &Calls,
    start: Instant,
    answers: &Script,
    model: &str,
) -> impl std::future::Future<Output = Result<&'static str, TestError>> {
    let (calls, answers, model) = (calls.clone(), answers.clone(), model.to_owned());
    async move {
        calls.record(&model, start);
        let (delay, answer) = answers.lock().unwrap().remove(0);
        sleep(Duration::from_millis(delay)).await;
        answer
    }
}

fn answers(answers: &[(u64, Result<&'static str, TestError>)]) -> Script {
    std::sync::Arc::new(std::sync::Mutex::new(answers.to_vec()))
}

/// The first racer asks for 2 s at 150 ms while the first hedge (100 ms) races on: the
/// second hedge, due at 200 ms, goes to the same target no sooner than its wait's end.
#[tokio::test(start_paused = true)]
async fn no_hedge_goes_to_a_target_before_the_retry_after_its_racer_asked_for() {
    let policy = Policy::builder()
        .retry(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .hedge(2, Duration::from_millis(100))
        .build()
        .unwrap();
    let (calls, start) = (Calls::default(), Instant::now());
    let script = answers(&[
        (150, Err(TestError::RetryAfter(Duration::from_secs(2)))),
        (5000, Ok("slow")),
        (0, Ok("third")),
    ]);
    let answer = policy.run(|| scripted(&calls, start, &script, "gpt")).await;
    assert_eq!(answer, Ok("third"));
    assert_eq!(
        calls.seen(),
        seen(&[("gpt", 0), ("gpt", 100), ("gpt", 2150)])
    );
}

/// The first racer asks for 5 s at 150 ms; the hedge fails last at 300 ms asking for
/// nothing. The retry goes back to the same target after what the first racer asked for
/// (5.15 s), not after the backoff (1 s) alone.
#[tokio::test(start_paused = true)]
async fn a_retry_after_a_race_waits_the_retry_after_an_earlier_racer_asked_for() {
    let policy = Policy::builder()
        .retry(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .hedge(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let (calls, start) = (Calls::default(), Instant::now());
    let script = answers(&[
        (150, Err(TestError::RetryAfter(Duration::from_secs(5)))),
        (200, Err(TestError::Busy)),
        (0, Ok("third")),
    ]);
    let answer = policy.run(|| scripted(&calls, start, &script, "gpt")).await;
    assert_eq!(answer, Ok("third"));
    assert_eq!(
        calls.seen(),
        seen(&[("gpt", 0), ("gpt", 100), ("gpt", 5150)])
    );
}

/// The hedge (100 ms) waits for its rate slot (500 ms) when the first racer asks for 2 s at
/// 200 ms: it is dropped without calling, and the retry comes after the wait asked for.
#[tokio::test(start_paused = true)]
async fn a_hedge_waiting_for_its_slot_does_not_call_a_target_that_asked_to_wait() {
    let policy = Policy::builder()
        .retry(3)
        .backoff(Duration::from_secs(1), Duration::from_secs(8))
        .jitter(Jitter::None)
        .rate(1, Duration::from_millis(500), 1)
        .hedge(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let (calls, start) = (Calls::default(), Instant::now());
    let script = answers(&[
        (200, Err(TestError::RetryAfter(Duration::from_secs(2)))),
        (0, Ok("second")),
    ]);
    let answer = policy.run(|| scripted(&calls, start, &script, "gpt")).await;
    assert_eq!(answer, Ok("second"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("gpt", 2200)]));
}

/// claude's breaker is open, so gpt's hedge (100 ms) stays on gpt and waits for gpt's rate
/// slot (500 ms); gpt refuses for good at 200 ms. The hedge is dropped without calling gpt,
/// and with no target left the refusal ends the operation.
#[tokio::test(start_paused = true)]
async fn a_hedge_that_has_not_called_is_dropped_when_its_target_moves_the_operation_on() {
    let policy = Policy::builder()
        .retry(3)
        .breaker_per_key("model", 5, Duration::from_secs(30))
        .rate(1, Duration::from_millis(500), 1)
        .rate_per_key()
        .hedge(1, Duration::from_millis(100))
        .build()
        .unwrap();
    let keys = policy.keys().unwrap();
    keys.get("claude").breaker().unwrap().force_open();
    let (calls, start) = (Calls::default(), Instant::now());
    let script = answers(&[(200, Err(TestError::TooLong)), (0, Ok("second"))]);
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            scripted(&calls, start, &script, model)
        })
        .await;
    assert_eq!(answer, Err(TestError::TooLong));
    assert_eq!(calls.seen(), seen(&[("gpt", 0)]));
}

/// gpt refuses for good at 150 ms while claude's hedge (100 ms) races on: the second hedge,
/// due at 200 ms, has no target left but gpt, and is not sent there.
#[tokio::test(start_paused = true)]
async fn no_hedge_goes_to_a_target_that_moved_the_operation_on() {
    let policy = Policy::builder()
        .retry(3)
        .breaker_per_key("model", 5, Duration::from_secs(30))
        .hedge(2, Duration::from_millis(100))
        .build()
        .unwrap();
    let (calls, start) = (Calls::default(), Instant::now());
    let script = answers(&[
        (150, Err(TestError::TooLong)),
        (1000, Ok("claude")),
        (0, Ok("third")),
    ]);
    let answer = policy
        .run_routed("gpt", ["claude"], |model| {
            scripted(&calls, start, &script, model)
        })
        .await;
    assert_eq!(answer, Ok("claude"));
    assert_eq!(calls.seen(), seen(&[("gpt", 0), ("claude", 100)]));
}
