//! Any settings: refused with a sentence when they break a rule, otherwise a policy whose
//! calls end exactly as the rules say, each call under a fresh policy so that its outcome
//! follows from the settings alone. Paused clock.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use resil_runtime::{Next, Outcome, Rejected};
use tokio::time::{timeout, Instant};

use crate::common::{self, Provider, TestError};
use crate::rules::{by_the_rules, later, Body, Progress, Waits};
use crate::settings::{build, builder, settings, Settings};

/// How long a case waits for a call: past it, the call is still going, which is an outcome
/// too (a body that never answers, under neither timeout nor deadline).
const LIMIT: Duration = Duration::from_secs(3600);

proptest! {
    #![proptest_config(common::proptest_config(256, "bad_input.proptest-regressions"))]

    /// Refused with a sentence exactly when a rule is broken; otherwise a ready call, a call
    /// that costs what the settings say, a stream that stalls after two items, and a body
    /// that throttles, fails asking to wait, or hangs, each ending as the rules say.
    #[test]
    fn any_builder_values_build_or_refuse_and_never_panic(settings in settings()) {
        match build(&settings) {
            Err(error) => {
                prop_assert!(settings.broken.is_some(), "valid settings refused: {error}");
                // Refused with a sentence that says the fix.
                prop_assert!(error.to_string().len() > 20, "{error}");
                return Ok(());
            }
            Ok(policy) => {
                prop_assert!(settings.broken.is_none(), "built despite {:?}", settings.broken);
                let _ = policy.worst_case();
            }
        }
        common::paused_runtime().block_on(async {
            a_ready_call_goes_through(&settings).await?;
            a_costly_call_passes_or_is_over_the_burst(&settings).await?;
            a_stalled_stream_ends_at_its_first_limit(&settings).await?;
            for body in [
                Body::Throttled(settings.answer_wait),
                Body::RetryAfter(settings.answer_wait),
                Body::Hang,
            ] {
                a_failing_body_ends_as_the_rules_say(&settings, body).await?;
            }
            Ok::<_, TestCaseError>(())
        })?;
    }
}

/// A fresh policy lets its first ready call through, whatever its breaker and gates (their
/// first slot is now) and its deadline (positive).
async fn a_ready_call_goes_through(settings: &Settings) -> Result<(), TestCaseError> {
    let policy = build(settings).unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    prop_assert_eq!(policy.run(|| provider.answer(Ok(1))).await, Ok(1));
    prop_assert_eq!(provider.calls(), 1);
    prop_assert_eq!(started.elapsed(), Duration::ZERO);
    Ok(())
}

/// An attempt that costs more than the token gate's burst can never pass: refused without a
/// call. Any other cost passes at once. The execution is dropped before the next check.
async fn a_costly_call_passes_or_is_over_the_burst(
    settings: &Settings,
) -> Result<(), TestCaseError> {
    let policy = build(settings).unwrap();
    let provider = Provider::default();
    let mut execution = policy.execute::<TestError>();
    execution.set_cost(settings.cost);
    let next = execution.attempt(provider.answer(Ok(1))).await;
    let over = (settings.token_rate).filter(|&(_, _, burst)| settings.cost > burst);
    match (next, over) {
        (Next::Done(Outcome::Completed(Ok(1))), None) => prop_assert_eq!(provider.calls(), 1),
        (Next::Done(Outcome::Failed(TestError::Rejected(rejected))), Some((_, _, burst))) => {
            let cost = settings.cost;
            prop_assert_eq!(rejected, Rejected::OverBurst { cost, burst });
            prop_assert_eq!(provider.calls(), 0);
        }
        (next, _) => prop_assert!(false, "an attempt costing {} gave {next:?}", settings.cost),
    }
    Ok(())
}

/// Two ready items, then nothing: the stream is committed at its first item, hands both over,
/// then ends with one error at the earlier of its idle timeout (from the second item) and the
/// deadline, or is still open when the hour is up.
async fn a_stalled_stream_ends_at_its_first_limit(
    settings: &Settings,
) -> Result<(), TestCaseError> {
    let policy = build(settings).unwrap();
    let started = Instant::now();
    let stream = policy
        .run_stream(|| async {
            let items = futures::stream::iter([Ok(1), Ok(2)]);
            Ok::<_, TestError>(items.chain(futures::stream::pending()))
        })
        .await;
    let Ok(mut stream) = stream else {
        return Err(TestCaseError::fail(format!(
            "a ready stream gave {stream:?}"
        )));
    };
    prop_assert_eq!(stream.next().await, Some(Ok(1)));
    prop_assert_eq!(stream.next().await, Some(Ok(2)));
    let idle = (settings.idle).map(|idle| later(started, idle));
    let deadline = (settings.deadline).map(|deadline| later(started, deadline));
    let end = match (idle, deadline) {
        (Some(idle), Some(deadline)) => Some(idle.min(deadline)),
        (idle, deadline) => idle.or(deadline),
    };
    let third = timeout(LIMIT, stream.next()).await;
    let now = Instant::now();
    let Some(end) = end.filter(|&end| end <= started + LIMIT) else {
        prop_assert!(third.is_err(), "a stream past every limit gave {third:?}");
        return Ok(());
    };
    // Timers fire on whole milliseconds: on the end's tick, by which the deadline may have
    // passed too, and then it is the deadline that ends the stream.
    prop_assert!(
        now >= end && now - end < Duration::from_millis(1),
        "{now:?} for {end:?}"
    );
    let rejected = match settings.idle {
        Some(after) if deadline.is_none_or(|deadline| now < deadline) => Rejected::Idle { after },
        _ => Rejected::DeadlineExceeded,
    };
    prop_assert_eq!(third, Ok(Some(Err(TestError::Rejected(rejected)))));
    prop_assert_eq!(stream.next().await, None);
    Ok(())
}

/// The operation a failing body makes under a fresh policy, and the one the rules make of the
/// same settings: the same outcome (or both still going when the hour is up), the same calls,
/// the same waits announced before them, the same time taken.
async fn a_failing_body_ends_as_the_rules_say(
    settings: &Settings,
    body: Body,
) -> Result<(), TestCaseError> {
    let waits = Arc::new(Waits::default());
    let policy = builder(settings)
        .unwrap()
        .listener(waits.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = Instant::now();
    let run = policy.run(|| async {
        // Polled in turn: this call is the next one.
        match body.answer(provider.calls() + 1) {
            Some(error) => provider.answer(Err(error)).await,
            None => provider.hang().await,
        }
    });
    let outcome = timeout(LIMIT, run).await.ok();
    let took = started.elapsed();
    let made = Progress {
        calls: provider.calls(),
        waits: waits.taken(),
    };

    let started = Instant::now();
    let mut expected = Progress::default();
    let expected_outcome = timeout(LIMIT, by_the_rules(settings, body, &mut expected))
        .await
        .ok();
    let expected_took = started.elapsed();
    prop_assert_eq!(outcome, expected_outcome, "{:?}: how it ended", body);
    prop_assert_eq!(made, expected, "{:?}: calls and waits", body);
    prop_assert_eq!(took, expected_took, "{:?}: time taken", body);
    Ok(())
}
