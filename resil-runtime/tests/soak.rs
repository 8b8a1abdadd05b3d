//! The soak: many operations on a multi-thread runtime through named and keyed breakers,
//! bulkheads and nested calls, with random transient and permanent errors, cancellations at
//! every await point, panics in bodies and in listeners, and hostile `Retry-After` values.
//! At the end every permit is back, the keyed registry is within its bound, every breaker that
//! lived through the run lets the next caller through at once (none stuck half-open with its
//! probe slot taken, none refusing past its cooldown), the listener that panics now and then
//! was told of every call to the provider and still hears after its last panic, and every kind
//! of fault was seen to fire (an error of each kind, a cancellation, a panic in a body and in a
//! listener).
//!
//! Ignored by default (it runs on the real clock). `.ci/run` runs it in release with 10⁵
//! operations; the documented size is 10⁶:
//!
//! ```text
//! RESIL_SOAK_OPERATIONS=1000000 cargo test -p resil-runtime --release --test soak -- --ignored --nocapture
//! ```

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Provider, TestError};
use futures::{FutureExt, StreamExt};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use resil_runtime::events::{Event, Listener};
use resil_runtime::{BreakerState, Keyed, Policy, Verdict};

const MAX_KEYS: usize = 64;
const KEYS: u64 = 200;

/// Panics on one event in `every` until it is calmed, counting what it saw.
#[derive(Debug)]
struct Unreliable {
    every: u64,
    seen: AtomicU64,
    panicked: AtomicU64,
    /// Panics that no event has reached it after.
    unfollowed: AtomicU64,
    /// The inner policy's attempts it heard start (and did not panic on): each of its calls
    /// to the provider has one.
    started: AtomicU64,
    calm: AtomicBool,
}

impl Unreliable {
    fn new(every: u64) -> Self {
        Unreliable {
            every,
            seen: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            unfollowed: AtomicU64::new(0),
            started: AtomicU64::new(0),
            calm: AtomicBool::new(false),
        }
    }
}

impl Listener for Unreliable {
    fn on_event(&self, event: &Event<'_>) {
        let seen = self.seen.fetch_add(1, Ordering::Relaxed);
        if seen % self.every == self.every - 1 && !self.calm.load(Ordering::Relaxed) {
            self.panicked.fetch_add(1, Ordering::Relaxed);
            self.unfollowed.fetch_add(1, Ordering::Relaxed);
            panic!("a listener that panics");
        }
        self.unfollowed.store(0, Ordering::Relaxed);
        if matches!(
            event,
            Event::AttemptStarted {
                site: "soak::inner",
                ..
            }
        ) {
            self.started.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What one operation did, drawn from its seed.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    Ok,
    Busy,
    Permanent,
    RetryAfter(Duration),
    Hang,
    Panic,
}

fn behaviour(rng: &mut SmallRng) -> Behaviour {
    match rng.random_range(0..100) {
        0..78 => Behaviour::Ok,
        78..88 => Behaviour::Busy,
        88..91 => Behaviour::Permanent,
        91..95 => Behaviour::RetryAfter(match rng.random_range(0..4) {
            0 => Duration::from_secs(u64::MAX),
            1 => Duration::MAX,
            2 => Duration::ZERO,
            _ => Duration::from_micros(rng.random_range(0..3_000)),
        }),
        95..99 => Behaviour::Hang,
        _ => Behaviour::Panic,
    }
}

async fn provider_call(provider: &Provider, behaviour: Behaviour) -> Result<u32, TestError> {
    tokio::task::yield_now().await;
    match behaviour {
        Behaviour::Ok => provider.answer(Ok(1)).await,
        Behaviour::Busy => provider.answer(Err(TestError::Busy)).await,
        Behaviour::Permanent => provider.answer(Err(TestError::BadRequest)).await,
        Behaviour::RetryAfter(wait) => provider.answer(Err(TestError::RetryAfter(wait))).await,
        Behaviour::Hang => provider.hang().await,
        Behaviour::Panic => panic!("a body that panics"),
    }
}

struct Stack {
    outer: Policy,
    inner: Policy<Keyed>,
    /// The provider the inner policy calls.
    provider: Provider,
    /// The provider the outer policy's bodies call directly, besides the inner policy.
    direct: Provider,
}

fn stack(listener: Arc<Unreliable>) -> Stack {
    let outer = Policy::builder()
        .name("soak::outer")
        .deadline(Duration::from_millis(40))
        .retry(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .retry_after_max(Duration::from_millis(2))
        .breaker_named("soak", 8, Duration::from_millis(5))
        .bulkhead(48)
        .listener(listener.clone())
        .build()
        .unwrap();
    let inner = Policy::builder()
        .name("soak::inner")
        .timeout(Duration::from_millis(2))
        .retry(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .retry_after_max(Duration::from_millis(2))
        .breaker_per_key("key", 3, Duration::from_millis(5))
        .max_keys(MAX_KEYS)
        .bulkhead(64)
        .listener(listener)
        .build()
        .unwrap();
    Stack {
        outer,
        inner,
        provider: Provider::default(),
        direct: Provider::default(),
    }
}

async fn operation(stack: &Stack, seed: u64) -> Result<u32, TestError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let key = rng.random_range(0..KEYS);
    let nested = rng.random_bool(0.5);
    let behaviours: Vec<Behaviour> = (0..9).map(|_| behaviour(&mut rng)).collect();
    let mut next = behaviours.into_iter().cycle();
    let mut next = move || next.next().unwrap();
    if nested {
        stack
            .outer
            .run(|| {
                let first = next();
                let second = next();
                async move {
                    stack
                        .inner
                        .run_keyed(&key, || provider_call(&stack.provider, first))
                        .await?;
                    provider_call(&stack.direct, second).await
                }
            })
            .await
    } else {
        stack
            .inner
            .run_keyed(&key, || provider_call(&stack.provider, next()))
            .await
    }
}

#[test]
#[ignore = "runs on the real clock; `.ci/run` runs it in release"]
fn soak() {
    let operations: u64 = std::env::var("RESIL_SOAK_OPERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    // Thousands of expected panics: keep their messages out of the output.
    std::panic::set_hook(Box::new(|_| {}));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let listener = Arc::new(Unreliable::new(997));
    let stack = Arc::new(stack(listener.clone()));
    let outcomes = Arc::new(Mutex::new(BTreeMap::<&'static str, u64>::new()));
    let started = std::time::Instant::now();
    runtime.block_on(async {
        futures::stream::iter(0..operations)
            .for_each_concurrent(64, |seed| {
                let (stack, outcomes) = (stack.clone(), outcomes.clone());
                async move {
                    // Cancelled at a random await point by a random limit, or not at all.
                    let limit = Duration::from_micros(seed.wrapping_mul(7_919) % 30_000);
                    let task = tokio::spawn(async move {
                        let run = operation(&stack, seed);
                        if seed % 3 == 0 {
                            tokio::time::timeout(limit, run).await.ok()
                        } else {
                            Some(run.await)
                        }
                    });
                    let kind = match task.await {
                        Ok(Some(Ok(_))) => "ok",
                        Ok(Some(Err(error))) => error.kind(),
                        Ok(None) => "cancelled",
                        Err(join) if join.is_panic() => "panicked",
                        Err(_) => "aborted",
                    };
                    *outcomes.lock().unwrap().entry(kind).or_default() += 1;
                }
            })
            .await;
    });
    let elapsed = started.elapsed();
    let _ = std::panic::take_hook();

    let outcomes = outcomes.lock().unwrap().clone();
    println!(
        "soak: {operations} operations in {:.1} s ({:.0} per second), {} provider calls",
        elapsed.as_secs_f64(),
        operations as f64 / elapsed.as_secs_f64(),
        stack.provider.calls() + stack.direct.calls()
    );
    for (kind, count) in &outcomes {
        println!("  {kind:<18} {count}");
    }
    println!(
        "  listener: {} events, {} panics, {} attempts heard starting",
        listener.seen.load(Ordering::Relaxed),
        listener.panicked.load(Ordering::Relaxed),
        listener.started.load(Ordering::Relaxed)
    );
    // Every kind of fault fired, so what follows checks that each one's effects were undone.
    for kind in [
        "ok",
        "busy",
        "bad_request",
        "timeout",
        "cancelled",
        "panicked",
    ] {
        assert!(
            outcomes.get(kind).is_some_and(|count| *count > 0),
            "no operation ended `{kind}`: the soak did not exercise it ({outcomes:?})"
        );
    }
    let panicked = listener.panicked.load(Ordering::Relaxed);
    assert!(panicked > 0, "the listener never panicked");
    // Every call of the inner policy to its provider was announced to the listener first (an
    // attempt whose announcement panicked makes no call; one cancelled before calling is the
    // only slack): events kept reaching it between its panics, not
    // only up to the first. (Only its last panic can lack a later event: another takes 996.)
    let (started, calls) = (
        listener.started.load(Ordering::Relaxed),
        u64::from(stack.provider.calls()),
    );
    assert!(
        started >= calls,
        "the listener heard {started} attempts start, for {calls} provider calls: events stopped reaching it after a panic"
    );
    assert_eq!(stack.outer.bulkhead().unwrap().in_flight(), 0);
    assert_eq!(stack.inner.bulkhead().unwrap().in_flight(), 0);
    let keys = stack.inner.keys().unwrap();
    println!("  keyed breakers held: {} (bound {MAX_KEYS})", keys.len());
    assert!(keys.len() <= MAX_KEYS, "{}", keys.len());

    // The breakers that lived through the run, as they are (asking the policy for a key would
    // make a fresh one): the named one and each key's that the registry kept.
    let breakers = resil_runtime::breaker::breakers();
    assert_eq!(breakers.len(), keys.len() + 1, "{breakers:#?}");
    let open = (breakers.iter())
        .filter(|status| status.state != BreakerState::Closed)
        .count();
    println!("  breakers swept: {} ({open} not closed)", breakers.len());
    // Past every cooldown, each lets the next caller through at once: a closed one as a call,
    // an open or half-open one as its probe. None keeps it waiting on a probe nobody runs, and
    // none refuses it.
    std::thread::sleep(Duration::from_millis(20));
    runtime.block_on(async {
        for status in &breakers {
            let breaker = &status.breaker;
            let closed = status.state == BreakerState::Closed;
            if closed {
                assert!(status.failures < breaker.config().threshold(), "{status:?}");
            }
            let admission = match breaker.admit().now_or_never() {
                Some(Ok(admission)) => admission,
                Some(Err(refused)) => panic!("{status:?} refuses past its cooldown: {refused}"),
                None => panic!("{status:?} keeps its caller waiting on a probe nobody runs"),
            };
            assert_eq!(admission.is_probe(), !closed, "{status:?}");
            admission.record(Verdict::Success);
            assert_eq!(breaker.state(), BreakerState::Closed, "{status:?}");
        }
    });

    // The listener still hears after its last panic.
    listener.calm.store(true, Ordering::Relaxed);
    let after = runtime.block_on(stack.outer.run(|| stack.provider.answer(Ok(1))));
    assert_eq!(after, Ok(1));
    assert_eq!(
        listener.unfollowed.load(Ordering::Relaxed),
        0,
        "no event reached the listener after its last panic"
    );
}
