//! Limits: a gate at the exact limit of a provider that counts its own way learns a margin
//! from its first 429, and a model checks what any gate grants against its rate and burst.

use super::*;

/// A provider limiting like nginx's `limit_req` with no burst: a request that reaches it
/// sooner than `spacing` after the last one it accepted is refused with a 429 asking to wait
/// a second. Between the gate and it, a network that delays each request by 0 to 40 ms.
struct Limiter {
    spacing: Duration,
    last: std::sync::Mutex<Option<Instant>>,
    network: std::sync::Mutex<u64>,
    requests: AtomicUsize,
    refused: AtomicUsize,
}

impl Limiter {
    fn new(spacing: Duration) -> Self {
        Limiter {
            spacing,
            last: std::sync::Mutex::new(None),
            network: std::sync::Mutex::new(0x2545_f491_4f6c_dd1d),
            requests: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        }
    }

    async fn call(&self) -> Result<(), TestError> {
        let delay = {
            // xorshift: the same delays on every run.
            let mut state = self.network.lock().unwrap();
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            Duration::from_millis(*state % 41)
        };
        tokio::time::sleep(delay).await;
        self.requests.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        let mut last = self.last.lock().unwrap();
        if last.is_some_and(|last| now - last < self.spacing) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(TestError::Throttled(Duration::from_secs(1)));
        }
        *last = Some(now);
        Ok(())
    }
}

/// A gate set at the provider's exact limit collides with it as soon as the network adds
/// jitter; after the first 429 it keeps a margin, so it does not collide again and again
/// (before: 20 callers of a 5/s gate against a 5/s limiter made 29 requests, 9 of them 429,
/// in 13.3 s; now 21 and 1, in 5.5 s).
#[tokio::test(start_paused = true)]
async fn a_gate_at_the_exact_limit_learns_a_margin_from_its_first_429() {
    let policy = Policy::builder()
        .rate(5, Duration::from_secs(1), 1)
        .retry(5)
        .deadline(Duration::from_secs(30))
        .build()
        .unwrap();
    let provider = Limiter::new(Duration::from_millis(200));
    let origin = Instant::now();
    let results = join_all((0..20).map(|_| policy.run(|| provider.call()))).await;
    let took = origin.elapsed();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (requests, refused) = (
        provider.requests.load(Ordering::SeqCst),
        provider.refused.load(Ordering::SeqCst),
    );
    assert_eq!(
        (requests, refused),
        (21, 1),
        "one collision, then 20 % below the limit: {took:?}"
    );
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use resil_runtime::RateGate;

    proptest! {
        #![proptest_config(crate::common::proptest_config(256, "rate/limits.proptest-regressions"))]

        /// Whatever the arrivals, costs and deadlines: the units granted by any time t never
        /// exceed the burst plus what the rate has added since the start, no wait is negative,
        /// a refused reservation holds nothing, and a refusal is exactly a slot past the
        /// deadline.
        #[test]
        fn a_gate_never_grants_more_than_its_rate_allows(
            count in 1u64..50,
            burst in 1u64..20,
            steps in proptest::collection::vec((0u64..400, 1u64..20, proptest::option::of(0u64..2_000)), 1..60),
        ) {
            let runtime = crate::common::paused_runtime();
            runtime.block_on(async {
                let period = Duration::from_secs(1);
                let gate = RateGate::new(count, period, burst).unwrap();
                let origin = Instant::now();
                let interval = period.as_nanos() as u64 / count;
                let mut granted: Vec<(u64, u64)> = Vec::new();
                for (advance_ms, cost, deadline_ms) in steps {
                    tokio::time::advance(Duration::from_millis(advance_ms)).await;
                    let now = Instant::now();
                    let deadline = deadline_ms.map(|ms| now + Duration::from_millis(ms));
                    match gate.reserve(cost, deadline) {
                        Ok(wait) => {
                            prop_assert!(deadline.is_none_or(|d| now + wait <= d));
                            let at = (now + wait - origin).as_nanos() as u64;
                            granted.push((at, cost));
                        }
                        Err(Rejected::OverBurst { .. }) => prop_assert!(cost > burst),
                        Err(Rejected::RateLimited { retry_in }) => {
                            prop_assert!(deadline.is_some_and(|d| now + retry_in > d));
                        }
                        Err(other) => prop_assert!(false, "unexpected {other:?}"),
                    }
                }
                for &(at, _) in &granted {
                    let units: u64 = granted.iter().filter(|(t, _)| *t <= at).map(|(_, c)| c).sum();
                    prop_assert!(
                        units <= burst + at / interval,
                        "{units} units by {at} ns with burst {burst}, one per {interval} ns"
                    );
                }
                Ok(())
            })?;
        }
    }
}
