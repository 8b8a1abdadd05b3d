//! The contenders, all configured alike: timeout 20 s, 2 retries, a breaker opening after 5
//! consecutive failures (30 s cooldown), a bulkhead of 8. Each exposes
//! `async fn call(&self, op) -> Result<u64, Failure>`.

use std::sync::LazyLock;
use std::time::Duration;

use backon::Retryable;
use resil::{resilient, Policy};
use tokio::sync::Semaphore;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The operation, the hand-written stack, failsafe's and backon's rows: shared with the
/// instruction counter.
pub use crate::common::*;

/// Yields once before answering: a stand-in for I/O, so a timer is really registered.
#[derive(Debug, Clone, Copy)]
pub struct Yielding;

impl Operation for Yielding {
    async fn run(self) -> Result<u64, Failure> {
        tokio::task::yield_now().await;
        Ok(std::hint::black_box(1))
    }
}

pub async fn bare<O: Operation>(op: O) -> Result<u64, Failure> {
    op.run().await
}

pub async fn tokio_timeout<O: Operation>(op: O) -> Result<u64, Failure> {
    tokio::time::timeout(TIMEOUT, op.run())
        .await
        .map_err(|_| Failure::Busy)?
}

#[resilient(timeout = "20s", retry = 2, breaker = "bench", bulkhead = 8)]
pub async fn resil_attribute<O: Operation>(op: O) -> Result<u64, Failure> {
    op.run().await
}

pub static RESIL_POLICY: LazyLock<Policy> = LazyLock::new(|| {
    Policy::builder()
        .timeout(TIMEOUT)
        .retry(2)
        .breaker_named("bench-policy", 5, COOLDOWN)
        .bulkhead(8)
        .build()
        .expect("valid policy")
});

pub async fn resil_policy<O: Operation>(op: O) -> Result<u64, Failure> {
    RESIL_POLICY.run(|| op.run()).await
}

/// tower's own middleware: load shed, concurrency limit, retry, timeout (no breaker).
pub fn tower_stack<O: Operation>(
) -> impl Service<O, Response = u64, Error = tower::BoxError, Future: Send> + Clone + Send + Sync {
    ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(8)
        .retry(Attempts(2))
        .timeout(TIMEOUT)
        .service_fn(|op: O| op.run())
}

#[derive(Debug, Clone, Copy)]
pub struct Attempts(u32);

impl<O: Copy, Res, E> tower::retry::Policy<O, Res, E> for Attempts {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut O, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, op: &O) -> Option<O> {
        Some(*op)
    }
}

/// Calls a tower service the way a shared client does: clone, ready, call.
pub async fn call_tower<S, O>(service: &S, op: O) -> Result<u64, tower::BoxError>
where
    S: Service<O, Response = u64, Error = tower::BoxError> + Clone,
{
    call_owned_tower(service.clone(), op).await
}

/// Calls the clone of a tower service that the caller made: ready, call.
pub async fn call_owned_tower<S, O>(mut service: S, op: O) -> Result<u64, tower::BoxError>
where
    S: Service<O, Response = u64, Error = tower::BoxError>,
{
    service.ready().await?.call(op).await
}

/// tower-resilience (Resilience4j's design for tower): bulkhead, circuit breaker, retry,
/// time limiter.
pub fn tower_resilience_stack<O: Operation>(
) -> impl Service<O, Response = u64, Error = tower::BoxError, Future: Send> + Clone + Send + Sync {
    let bulkhead = tower_resilience::bulkhead::BulkheadLayer::builder()
        .max_concurrent_calls(8)
        .build()
        .expect("valid bulkhead");
    let breaker = tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .consecutive_failures(5)
        .wait_duration_in_open(COOLDOWN)
        .build()
        .expect("valid breaker");
    let retry = tower_resilience::retry::RetryLayer::<O, u64, tower::BoxError>::builder()
        .max_attempts(3)
        .exponential_backoff(Duration::from_millis(300))
        .build();
    let timeout = tower_resilience::timelimiter::TimeLimiterLayer::builder()
        .timeout_duration(TIMEOUT)
        .build();
    ServiceBuilder::new()
        .map_err(Into::<tower::BoxError>::into)
        .layer(bulkhead)
        .map_err(Into::<tower::BoxError>::into)
        .layer(breaker)
        .layer(retry)
        .map_err(Into::<tower::BoxError>::into)
        .layer(timeout)
        .map_err(Into::<tower::BoxError>::into)
        .service_fn(|op: O| op.run())
}

/// The four policies from three crates: a semaphore, backon, failsafe, tokio's timeout.
#[derive(Debug)]
pub struct PeerStack {
    bulkhead: Semaphore,
    breaker: FailsafeBreaker,
}

impl Default for PeerStack {
    fn default() -> Self {
        PeerStack {
            bulkhead: Semaphore::new(8),
            breaker: failsafe_breaker(),
        }
    }
}

impl PeerStack {
    pub async fn call<O: Operation>(&self, op: O) -> Result<u64, Failure> {
        let _permit = self.bulkhead.try_acquire().map_err(|_| Failure::Busy)?;
        (|| failsafe_timeout(&self.breaker, op))
            .retry(backoff())
            .await
    }
}
