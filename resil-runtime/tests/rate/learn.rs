//! Gates that learn the provider's limit from its answers (`rate = "auto"`, `learn = true`),
//! against a provider simulated on the paused clock: a fixed window that states its limit,
//! what is left and when it resets on every answer, and answers 429 past it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    limit: AtomicU64,
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
            limit: AtomicU64::new(limit),
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
        let limit = self.limit.load(Ordering::Relaxed);
        let (allowed, remaining) = {
            let mut counted = self.counted.lock().unwrap();
            if counted.0 != index {
                *counted = (index, 0);
            }
            let allowed = counted.1 < limit;
            if allowed {
                counted.1 += 1;
            }
            (allowed, limit.saturating_sub(counted.1))
        };
        tokio::time::sleep(self.latency / 2).await;
        if self.states {
            let quota = Quota {
                limit: Some(limit),
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
    // As the gate declared exactly: the first window at once, then the provider's pace.
    assert!(took < Duration::from_millis(4200), "{took:?}");
    let learnt = policy.rate_gate().and_then(RateGate::learnt_rate).unwrap();
    assert!(learnt <= 12.0, "{learnt}/s");
}

#[tokio::test(start_paused = true)]
async fn an_auto_gate_follows_a_limit_that_halves() {
    let window = Window::new(10, Duration::from_secs(1));
    let policy = policy(|b| b.rate_learn());
    let halves = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        window.limit.store(5, Ordering::Relaxed);
    };
    let ((throttled, took, done), ()) = tokio::join!(forty(&policy, &window), halves);
    assert_eq!(done, 40);
    // The cut comes mid-window, after that window's calls went: the next call meets it.
    assert!(throttled <= 2, "{throttled} × 429");
    // About 15 by the cut, then 5 a second: the gate follows the new limit, not 1 a second.
    assert!(took < Duration::from_millis(7500), "{took:?}");
    let learnt = policy.rate_gate().and_then(RateGate::learnt_rate).unwrap();
    assert!(learnt <= 5.5, "{learnt}/s");
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

/// A body that reports `quota` as its answer's requests limit.
async fn answers(quota: Quota) -> Result<(), TestError> {
    operation::report_limits(ProviderLimits {
        requests: Some(quota),
        tokens: None,
    });
    Ok(())
}

fn quota(remaining: u64, reset: Duration) -> Quota {
    Quota {
        limit: Some(10),
        remaining,
        reset,
        window: None,
    }
}

#[tokio::test(start_paused = true)]
async fn flapping_answers_never_lift_a_declared_ceiling_nor_stall_past_retry_after_max() {
    let policy = policy(|b| {
        b.rate(10, Duration::from_secs(1), 1)
            .rate_learn()
            .retry_after_max(Duration::from_secs(3))
    });
    let start = Instant::now();
    let mut started = Vec::new();
    for n in 0..20u64 {
        // Alternately "plenty left, resets at once" and "nothing left for an hour".
        let said = match n % 2 {
            0 => quota(1_000_000, Duration::from_millis(1)),
            _ => quota(0, Duration::from_secs(3600)),
        };
        let before = Instant::now();
        policy.run(|| answers(said)).await.unwrap();
        started.push(before.elapsed());
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "{took:?}: faster than the declared 10/s"
    );
    let longest = started.iter().max().unwrap();
    assert!(
        *longest <= Duration::from_secs(3),
        "{longest:?}: held past retry_after_max"
    );
}

#[tokio::test(start_paused = true)]
async fn each_key_learns_its_own_limit() {
    let policy = Policy::builder()
        .keyed("model")
        .rate_learn()
        .rate_per_key()
        .build()
        .unwrap();
    let spent = quota(0, Duration::from_secs(2));
    policy.run_keyed("gpt-4o", || answers(spent)).await.unwrap();
    let start = Instant::now();
    policy
        .run_keyed("claude", || answers(quota(9, Duration::from_secs(1))))
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "claude's gate heard nothing of gpt-4o's"
    );
    policy
        .run_keyed("gpt-4o", || answers(quota(9, Duration::from_secs(1))))
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "gpt-4o's gate held until its reset"
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_to_an_older_call_is_stale() {
    let policy = policy(|b| b.rate(100, Duration::from_secs(1), 1).rate_learn());
    let gate = policy.rate_gate().unwrap();
    // The later call answers first: 50 left for a second, a pace of 50/s.
    let older = policy.run(|| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        answers(quota(0, Duration::from_secs(30))).await
    });
    let newer = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        policy
            .run(|| answers(quota(50, Duration::from_secs(1))))
            .await
    };
    let (older, newer) = tokio::join!(older, newer);
    assert!(older.is_ok() && newer.is_ok());
    assert_eq!(
        gate.reserve(1, None),
        Ok(Duration::ZERO),
        "the older call's \"nothing left\" came after a newer answer, and is ignored"
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_cut_by_its_timeout_lets_another_go() {
    let policy = Policy::builder()
        .timeout(Duration::from_millis(100))
        .rate_learn()
        .build()
        .unwrap();
    let hangs = policy.run(|| async {
        std::future::pending::<()>().await;
        Ok::<_, TestError>(())
    });
    let next = async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let before = Instant::now();
        policy
            .run(|| answers(quota(9, Duration::from_secs(1))))
            .await
            .unwrap();
        before.elapsed()
    };
    let (hung, waited) = tokio::join!(hangs, next);
    assert!(hung.is_err());
    assert!(
        waited <= Duration::from_millis(120),
        "{waited:?}: the next caller probes once the first is cut"
    );
}

#[tokio::test(start_paused = true)]
async fn a_nested_call_that_does_not_learn_keeps_its_answers() {
    let outer = policy(|b| b.rate_learn());
    let inner = Policy::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    outer
        .run(|| async {
            inner
                .run(|| answers(quota(0, Duration::from_secs(5))))
                .await
        })
        .await
        .unwrap();
    let gate = outer.rate_gate().unwrap();
    assert_eq!(
        gate.reserve(1, None),
        Ok(Duration::ZERO),
        "the inner call's provider said nothing of the outer's"
    );
}

#[tokio::test(start_paused = true)]
async fn a_token_gate_learns_from_the_tokens_headers() {
    let policy = Policy::builder().token_rate_learn().build().unwrap();
    let tokens = Quota {
        limit: Some(1000),
        remaining: 0,
        reset: Duration::from_secs(2),
        window: None,
    };
    policy
        .run(|| async {
            operation::report_limits(ProviderLimits {
                requests: None,
                tokens: Some(tokens),
            });
            Ok::<_, TestError>(())
        })
        .await
        .unwrap();
    let gate = policy.token_gate().unwrap();
    assert_eq!(gate.reserve(500, None), Ok(Duration::from_secs(2)));
}

/// Keeps the rates a listener heard learnt.
#[derive(Debug, Default)]
struct Learnt(Mutex<Vec<(f64, f64)>>);

impl resil_runtime::events::Listener for Learnt {
    fn on_event(&self, event: &resil_runtime::events::Event<'_>) {
        if let resil_runtime::events::Event::RateLearnt { from, to, gate, .. } = event {
            assert_eq!(*gate, "rate");
            self.0.lock().unwrap().push((*from, *to));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_change_of_more_than_a_tenth_is_news_and_less_is_not() {
    let heard = Arc::new(Learnt::default());
    let policy = policy(|b| b.rate_learn().listener(heard.clone()));
    // 10 a second: 10/s. 10 in the longest reset yet, 1050 ms: 9.5/s, no news. 20 in it:
    // 19/s, news.
    for (limit, reset) in [(10, 1000), (10, 1050), (20, 1050)] {
        let said = Quota {
            limit: Some(limit),
            remaining: 5,
            reset: Duration::from_millis(reset),
            window: None,
        };
        policy.run(|| answers(said)).await.unwrap();
    }
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert_eq!(heard[0].0, 0.0, "nothing learnt before");
    assert!((heard[0].1 - 10.0).abs() < 0.1, "{heard:?}");
    assert!((heard[1].1 - 19.05).abs() < 0.1, "{heard:?}");
}
