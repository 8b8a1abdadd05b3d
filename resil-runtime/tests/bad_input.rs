//! Bad input never panics: whatever a server puts in `Retry-After` and whatever a caller gives
//! a builder, the answer is a value, an error, or a clamp.

mod common;

use std::time::Duration;

use common::{Provider, TestError};
use futures::StreamExt;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use resil_runtime::{worst_case, Backoff, Jitter, Policy, Rejected};

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..10_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        Just(Jitter::None)
    ]
}

fn ratio() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        Just(f64::MAX),
        0.0..5.0f64
    ]
}

#[derive(Debug, Clone)]
struct Settings {
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    retry: u32,
    retry_after_max: Duration,
    backoff: Option<(Duration, Duration)>,
    jitter: Jitter,
    breaker: Option<(u32, Duration)>,
    bulkhead: Option<usize>,
    budget: Option<(f64, f64)>,
    answer_wait: Duration,
    queue: Option<usize>,
    rate: Option<(u64, Duration, u64)>,
    token_rate: Option<(u64, Duration, u64)>,
    cost: u64,
    idle: Option<Duration>,
}

fn count() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), 1u64..100]
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        (
            proptest::option::of(duration()),
            proptest::option::of(duration()),
            prop_oneof![Just(0u32), Just(u32::MAX), 0u32..5],
            duration(),
            proptest::option::of((duration(), duration())),
            jitter(),
        ),
        (
            proptest::option::of((any::<u32>(), duration())),
            proptest::option::of(prop_oneof![Just(0usize), Just(usize::MAX), 1usize..4]),
            proptest::option::of((ratio(), ratio())),
            duration(),
        ),
        (
            proptest::option::of(prop_oneof![Just(0usize), Just(usize::MAX), 1usize..4]),
            proptest::option::of((count(), duration(), count())),
            proptest::option::of((count(), duration(), count())),
            count(),
            proptest::option::of(duration()),
        ),
    )
        .prop_map(
            |(
                (timeout, deadline, retry, retry_after_max, backoff, jitter),
                (breaker, bulkhead, budget, answer_wait),
                (queue, rate, token_rate, cost, idle),
            )| Settings {
                timeout,
                deadline,
                retry,
                retry_after_max,
                backoff,
                jitter,
                breaker,
                bulkhead,
                budget,
                answer_wait,
                queue,
                rate,
                token_rate,
                cost,
                idle,
            },
        )
}

fn build(settings: &Settings) -> Option<Policy> {
    let mut builder = Policy::builder()
        .retry(settings.retry)
        .retry_after_max(settings.retry_after_max)
        .jitter(settings.jitter)
        .seed(7);
    if let Some(timeout) = settings.timeout {
        builder = builder.timeout(timeout);
    }
    if let Some(deadline) = settings.deadline {
        builder = builder.deadline(deadline);
    }
    if let Some((base, cap)) = settings.backoff {
        builder = builder.backoff(base, cap);
    }
    if let Some((threshold, cooldown)) = settings.breaker {
        let breaker = resil_runtime::BreakerConfig::new(threshold, cooldown)
            .map(|config| resil_runtime::Breaker::new("bad-input", config));
        match breaker {
            Ok(breaker) => builder = builder.breaker(std::sync::Arc::new(breaker)),
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
    if let Some(bulkhead) = settings.bulkhead {
        builder = builder.bulkhead(bulkhead);
    }
    if let Some((ratio, min)) = settings.budget {
        builder = builder.retry_budget(ratio, min);
    }
    if let Some(queue) = settings.queue {
        builder = builder.bulkhead_queue(queue);
    }
    if let Some((count, period, burst)) = settings.rate {
        builder = builder.rate(count, period, burst);
    }
    if let Some((count, period, burst)) = settings.token_rate {
        builder = builder.token_rate(count, period, burst);
    }
    if let Some(idle) = settings.idle {
        builder = builder.idle_timeout(idle);
    }
    match builder.build() {
        Ok(policy) => Some(policy),
        Err(error) => {
            // Refused with a sentence that says the fix.
            assert!(error.to_string().len() > 20, "{error}");
            None
        }
    }
}

proptest! {
    #![proptest_config(common::proptest_config(256, "bad_input.proptest-regressions"))]

    /// Any settings: refused with a sentence, or a policy that runs calls (a ready one, one
    /// that keeps failing with the server asking for any wait, one that hangs) without a panic.
    #[test]
    fn any_builder_values_build_or_refuse_and_never_panic(settings in settings()) {
        let Some(policy) = build(&settings) else { return Ok(()) };
        let runtime = common::paused_runtime();
        runtime.block_on(async {
            let provider = Provider::default();
            let limit = Duration::from_secs(3600);
            let ready = tokio::time::timeout(limit, policy.run(|| provider.answer(Ok(1)))).await;
            // A fresh policy lets its first ready call through, whatever its breaker and gates
            // (their first slot is now); only a deadline already over refuses it.
            let over = settings.deadline == Some(Duration::ZERO);
            match ready {
                Ok(Ok(1)) => prop_assert!(!over, "a call past its deadline went out"),
                Ok(Err(TestError::Rejected(Rejected::DeadlineExceeded))) => prop_assert!(over),
                other => prop_assert!(false, "a ready call gave {other:?}"),
            }
            prop_assert_eq!(provider.calls(), u32::from(!over));
            let mut execution = policy.execute::<TestError>();
            execution.set_cost(settings.cost);
            let _ = tokio::time::timeout(limit, execution.attempt(provider.answer(Ok(1)))).await;
            let throttled = tokio::time::timeout(
                limit,
                policy.run(|| provider.answer(Err(TestError::Throttled(settings.answer_wait)))),
            )
            .await;
            match throttled {
                Ok(Err(TestError::Throttled(wait))) => prop_assert_eq!(wait, settings.answer_wait),
                // Refused without calling (a gate held past the deadline, a breaker), or still
                // waiting out a wait the policy honours when the hour is up.
                Ok(Err(TestError::Rejected(_))) | Err(_) => {}
                other => prop_assert!(false, "a throttled call gave {other:?}"),
            }
            let stream = tokio::time::timeout(
                limit,
                policy.run_stream(|| async {
                    Ok::<_, TestError>(futures::stream::iter([Ok(1), Ok(2)]).chain(futures::stream::pending()))
                }),
            )
            .await;
            if let Ok(Ok(stream)) = stream {
                let _ = tokio::time::timeout(limit, stream.collect::<Vec<_>>()).await;
            }
            let _ = tokio::time::timeout(
                limit,
                policy.run(|| provider.answer(Err(TestError::RetryAfter(settings.answer_wait)))),
            )
            .await;
            let hung = tokio::time::timeout(limit, policy.run(|| provider.hang())).await;
            match hung {
                Ok(Err(TestError::Rejected(_))) => {}
                // Only a deadline bounds the whole call (timeouts are retried): without one
                // within the hour, it may still be waiting when the hour is up.
                Err(_) => prop_assert!(settings.deadline.is_none_or(|deadline| deadline >= limit)),
                other => prop_assert!(false, "a call that never answers gave {other:?}"),
            }
            let _ = policy.worst_case();
            Ok(())
        })?;
    }

    /// Every draw of every jitter stays within its envelope, for any base, cap and retry.
    #[test]
    fn any_backoff_draws_within_bounds(
        base in duration(),
        cap in duration(),
        jitter in jitter(),
        retry in any::<u32>(),
        previous in proptest::option::of(duration()),
        seed in any::<u64>(),
    ) {
        let Ok(backoff) = Backoff::new(base, cap) else { return Ok(()) };
        let backoff = backoff.with_jitter(jitter);
        let mut rng = SmallRng::seed_from_u64(seed);
        let wait = backoff.delay(retry, previous, &mut rng);
        prop_assert!(wait <= backoff.cap());
        let _ = worst_case(Some(cap), Some(base), retry, &backoff, base);
    }
}

#[cfg(feature = "http")]
mod retry_after_header {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;
    use resil_runtime::http::retry_after_at;

    fn parse(value: &[u8], now: SystemTime) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_bytes(value).ok()?);
        retry_after_at(&headers, now)
    }

    proptest! {
        #![proptest_config(crate::common::proptest_config(1024, "bad_input.proptest-regressions"))]

        /// Garbage, huge numbers, any bytes a header may carry: a wait or `None`.
        #[test]
        fn any_header_value_is_a_wait_or_none(value in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse(&value, SystemTime::now());
        }

        #[test]
        fn delay_seconds_of_any_length(digits in "[0-9]{1,40}") {
            let parsed = parse(digits.as_bytes(), SystemTime::now());
            match digits.parse::<u64>() {
                Ok(secs) => prop_assert_eq!(parsed, Some(Duration::from_secs(secs))),
                Err(_) => prop_assert_eq!(parsed, None),
            }
        }

        /// Dates from 1970 to 9999, against a clock anywhere in that range: the future is a
        /// wait, the past is zero.
        #[test]
        fn http_dates_far_past_and_far_future(date in 0u64..253_402_300_799, now in 0u64..253_402_300_799) {
            let date = UNIX_EPOCH + Duration::from_secs(date);
            let now = UNIX_EPOCH + Duration::from_secs(now);
            let text = httpdate::fmt_http_date(date);
            let expected = date.duration_since(now).unwrap_or(Duration::ZERO);
            prop_assert_eq!(parse(text.as_bytes(), now), Some(expected));
        }
    }
}
