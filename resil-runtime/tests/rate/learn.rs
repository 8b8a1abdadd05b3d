//! Gates that learn the provider's limit from its answers (`rate = "auto"`, `learn = true`),
//! against a provider simulated on the paused clock: a fixed window that states its limit,
//! what is left and when it resets on every answer, and answers 429 past it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use resil_runtime::{operation, Policy, ProviderLimits, Quota, RateGate};
use tokio::time::Instant;

use crate::common::TestError;

/// A provider allowing `limit` requests per fixed window of `period`, saying so on every
/// answer (`x-ratelimit-*` as data), each answer `latency` after its request (half there,
/// half back).
struct Window {
    limit: u64,
    period: Duration,
    latency: Duration,
    origin: Instant,
    /// The current window's index and the requests it counted.
    counted: Mutex<(u128, u64)>,
    calls: AtomicU32,
    throttled: AtomicU32,
    /// Whether answers state the limits.
    states: bool,
}

impl Window {
    fn new(limit: u64, period: Duration) -> Arc<Self> {
        Arc::new(Window {
            limit,
            period,
            latency: Duration::from_millis(20),
            origin: Instant::now(),
            counted: Mutex::new((0, 0)),
            calls: AtomicU32::new(0),
            throttled: AtomicU32::new(0),
            states: true,
        })
    }

    fn silent(limit: u64, period: Duration) -> Arc<Self> {
        let mut window = Arc::into_inner(Window::new(limit, period)).unwrap();
        window.states = false;
        Arc::new(window)
    }

    /// One request: the provider counts it on arrival, answers, and the body reports what
    /// the answer said before returning.
    async fn call(&self) -> Result<(), TestError> {
        tokio::time::sleep(self.latency / 2).await;
        self.calls.fetch_add(1, Ordering::Relaxed);
        let elapsed = self.origin.elapsed();
        let index = elapsed.as_nanos() / self.period.as_nanos();
        let reset = self.period
            - Duration::from_nanos((elapsed.as_nanos() % self.period.as_nanos()) as u64);
        let (allowed, remaining) = {
            let mut counted = self.counted.lock().unwrap();
            if counted.0 != index {
                *counted = (index, 0);
            }
            let allowed = counted.1 < self.limit;
            if allowed {
                counted.1 += 1;
            }
            (allowed, self.limit - counted.1)
        };
        tokio::time::sleep(self.latency / 2).await;
        if self.states {
            let quota = Quota {
                limit: Some(self.limit),
                remaining,
                reset,
                window: None,
            };
            operation::report_limits(ProviderLimits {
                requests: Some(quota),
                tokens: None,
            });
        }
        if allowed {
            Ok(())
        } else {
            self.throttled.fetch_add(1, Ordering::Relaxed);
            Err(TestError::Throttled(reset))
        }
    }
}

fn policy(
    build: impl FnOnce(resil_runtime::PolicyBuilder) -> resil_runtime::PolicyBuilder,
) -> Policy {
    build(Policy::builder().timeout(Duration::from_secs(5)).retry(6))
        .build()
        .unwrap()
}

/// 40 calls at once through `policy` against a 10-per-second window: the 429s, and when the
/// last one ended.
async fn forty(policy: &Policy, window: &Window) -> (u32, Duration, usize) {
    let started = Instant::now();
    let results = join_all((0..40).map(|_| policy.run(|| window.call()))).await;
    let done = results.iter().filter(|result| result.is_ok()).count();
    (
        window.throttled.load(Ordering::Relaxed),
        started.elapsed(),
        done,
    )
}

#[tokio::test(start_paused = true)]
async fn no_gate_collects_429s() {
    let window = Window::new(10, Duration::from_secs(1));
    let (throttled, _, _) = forty(&policy(|b| b), &window).await;
    assert!(throttled >= 30, "{throttled} × 429");
}

#[tokio::test(start_paused = true)]
async fn a_gate_declared_exactly_collects_none_in_about_four_seconds() {
    let window = Window::new(10, Duration::from_secs(1));
    let policy = policy(|b| b.rate(10, Duration::from_secs(1), 1).rate_exact());
    let (throttled, took, done) = forty(&policy, &window).await;
    assert_eq!((throttled, done), (0, 40));
    assert!(took < Duration::from_millis(4000), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn an_auto_gate_told_nothing_does_as_well_as_one_declared_exactly() {
    let window = Window::new(10, Duration::from_secs(1));
    let policy = policy(|b| b.rate_learn());
    let (throttled, took, done) = forty(&policy, &window).await;
    assert_eq!(done, 40);
    assert!(throttled <= 1, "{throttled} × 429");
    assert!(took < Duration::from_millis(5000), "{took:?}");
    let learnt = policy.rate_gate().and_then(RateGate::learnt_rate).unwrap();
    assert!(learnt <= 12.0, "{learnt}/s");
}

#[tokio::test(start_paused = true)]
async fn a_declared_rate_that_learns_never_runs_above_it() {
    let window = Window::new(100, Duration::from_secs(1));
    let policy = policy(|b| b.rate(10, Duration::from_secs(1), 1).rate_learn());
    let (throttled, took, done) = forty(&policy, &window).await;
    assert_eq!((throttled, done), (0, 40));
    assert!(
        took >= Duration::from_millis(3900),
        "{took:?}: above the declared 10/s"
    );
}

#[tokio::test(start_paused = true)]
async fn an_auto_gate_whose_provider_says_nothing_stays_open() {
    let window = Window::silent(100, Duration::from_secs(1));
    let policy = policy(|b| b.rate_learn());
    let (throttled, took, done) = forty(&policy, &window).await;
    assert_eq!((throttled, done), (0, 40));
    assert!(took < Duration::from_millis(200), "{took:?}");
    assert_eq!(policy.rate_gate().and_then(RateGate::learnt_rate), None);
}

#[tokio::test(start_paused = true)]
async fn nothing_left_holds_the_gate_until_the_reset_at_most_retry_after_max() {
    let policy = policy(|b| b.rate_learn().retry_after_max(Duration::from_secs(2)));
    let years = Quota {
        limit: Some(10),
        remaining: 0,
        reset: Duration::from_secs(86_400 * 365),
        window: None,
    };
    let said = ProviderLimits {
        requests: Some(years),
        tokens: None,
    };
    let first = policy
        .run(|| async {
            operation::report_limits(said);
            Ok::<_, TestError>(())
        })
        .await;
    assert!(first.is_ok());
    let gate = policy.rate_gate().unwrap();
    let wait = gate.reserve(1, None).unwrap();
    assert!(wait <= Duration::from_secs(2), "{wait:?}");
    assert!(wait >= Duration::from_millis(1900), "{wait:?}");
}
