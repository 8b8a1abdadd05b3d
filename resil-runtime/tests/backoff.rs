//! Backoff waits: the exponential envelope, each jitter's bounds (property-tested), the
//! `Retry-After` floor, and reproducibility under a seed.

mod common;

use std::time::Duration;

use common::{Provider, Recorder, TestError};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use resil_runtime::{Backoff, Jitter, Policy};

const MS: Duration = Duration::from_millis(1);

#[test]
fn envelope_doubles_up_to_the_cap() {
    let backoff = Backoff::new(300 * MS, Duration::from_secs(8)).unwrap();
    let envelopes: Vec<_> = (0..7).map(|n| backoff.envelope(n).as_millis()).collect();
    assert_eq!(envelopes, [300, 600, 1200, 2400, 4800, 8000, 8000]);
    assert_eq!(backoff.envelope(u32::MAX), Duration::from_secs(8));
}

#[test]
fn rejects_nonsense() {
    assert!(Backoff::new(Duration::ZERO, MS).is_err());
    assert!(Backoff::new(2 * MS, MS).is_err());
}

proptest! {
    #[test]
    fn waits_stay_within_their_jitter_bounds(
        base_ms in 1u64..2_000,
        extra_ms in 0u64..30_000,
        retry in 0u32..40,
        previous_ms in proptest::option::of(0u64..60_000),
        seed: u64,
    ) {
        let base = Duration::from_millis(base_ms);
        let cap = base + Duration::from_millis(extra_ms);
        let previous = previous_ms.map(Duration::from_millis);
        let mut rng = SmallRng::seed_from_u64(seed);
        let backoff = Backoff::new(base, cap).unwrap();
        let envelope = backoff.envelope(retry);
        prop_assert!(envelope <= cap && envelope >= base.min(cap));

        let full = backoff.with_jitter(Jitter::Full).delay(retry, previous, &mut rng);
        prop_assert!(full <= envelope);
        let equal = backoff.with_jitter(Jitter::Equal).delay(retry, previous, &mut rng);
        prop_assert!(equal >= envelope / 2 && equal <= envelope);
        let none = backoff.with_jitter(Jitter::None).delay(retry, previous, &mut rng);
        prop_assert_eq!(none, envelope);
        let decorrelated = backoff.with_jitter(Jitter::Decorrelated).delay(retry, previous, &mut rng);
        prop_assert!(decorrelated >= base && decorrelated <= cap);
        let upper = previous.unwrap_or(base).saturating_mul(3).max(base);
        prop_assert!(decorrelated <= upper);
    }

    #[test]
    fn waits_are_never_shorter_than_retry_after(retry_after_ms in 0u64..20_000, seed: u64) {
        let runtime = common::paused_runtime();
        let recorder = Recorder::new();
        let policy = Policy::builder()
            .retry(3)
            .seed(seed)
            .listener(recorder.clone())
            .build()
            .unwrap();
        let retry_after = Duration::from_millis(retry_after_ms);
        let provider = Provider::default();
        let result = runtime.block_on(
            policy.run(|| provider.answer(Err(TestError::RetryAfter(retry_after)))),
        );
        prop_assert_eq!(result, Err(TestError::RetryAfter(retry_after)));
        let waits = recorder.waits();
        prop_assert_eq!(waits.len(), 3);
        for (n, wait) in waits.into_iter().enumerate() {
            prop_assert!(wait >= retry_after, "wait {:?} < Retry-After {:?}", wait, retry_after);
            let envelope = Backoff::default().envelope(n as u32);
            prop_assert!(wait <= retry_after + envelope, "jitter spreads above the floor, within the envelope");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn without_jitter_retry_after_is_honoured_exactly() {
    let policy = Policy::builder()
        .retry(1)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let provider = Provider::default();
    let started = tokio::time::Instant::now();
    let result = policy
        .run(|| provider.answer(Err(TestError::RetryAfter(Duration::from_secs(30)))))
        .await;
    assert_eq!(result, Err(TestError::RetryAfter(Duration::from_secs(30))));
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(provider.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn same_seed_same_waits() {
    let waits = |seed| async move {
        let recorder = Recorder::new();
        let policy = Policy::builder()
            .retry(5)
            .seed(seed)
            .listener(recorder.clone())
            .build()
            .unwrap();
        let provider = Provider::default();
        policy
            .run(|| provider.answer(Err(TestError::Busy)))
            .await
            .unwrap_err();
        recorder.waits()
    };
    assert_eq!(waits(11).await, waits(11).await);
    assert_ne!(waits(11).await, waits(12).await);
}
