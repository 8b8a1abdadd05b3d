//! What the timed benchmarks and the instruction counter share: the error type, a poll with a
//! no-op waker, the operation under the wrappers, and the peers both measure (the
//! hand-written stack, failsafe's breaker and backon's retry around tokio's timeout), so the
//! two count one code.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use failsafe::futures::CircuitBreaker as _;
use resil::{Rejected, Transient};
use tokio::sync::Semaphore;

/// The operations' error: transient, and a rejection converts into it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
pub enum Failure {
    #[error("busy")]
    #[transient]
    Busy,
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

/// Polls a future once with a no-op waker: for the rejected-call benchmarks, which finish
/// on the first poll, and the instruction counter's ready calls.
#[inline]
pub fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    std::pin::pin!(future).poll(&mut cx)
}

pub const TIMEOUT: Duration = Duration::from_secs(20);
pub const COOLDOWN: Duration = Duration::from_secs(30);

/// The operation under the wrappers.
pub trait Operation: Copy + Send + Sync + 'static {
    fn run(self) -> impl Future<Output = Result<u64, Failure>> + Send;
}

/// Answers on the first poll.
#[derive(Debug, Clone, Copy)]
pub struct Ready;

impl Operation for Ready {
    fn run(self) -> impl Future<Output = Result<u64, Failure>> + Send {
        std::future::ready(Ok(std::hint::black_box(1)))
    }
}

/// A consecutive-failure breaker by hand: atomics for the count and the state, a mutex for
/// the opening time (taken only while open or opening). Opens after 5 failures in a row for
/// [`COOLDOWN`].
#[derive(Debug, Default)]
pub struct Breaker {
    failures: AtomicU32,
    open: AtomicBool,
    opened_at: Mutex<Option<Instant>>,
}

impl Breaker {
    fn allow(&self) -> bool {
        if !self.open.load(Ordering::Acquire) {
            return true;
        }
        let opened_at = self.opened_at.lock().unwrap();
        opened_at.is_some_and(|at| at.elapsed() >= COOLDOWN)
    }

    fn record(&self, ok: bool) {
        if ok {
            if self.failures.load(Ordering::Relaxed) != 0 || self.open.load(Ordering::Relaxed) {
                self.failures.store(0, Ordering::Relaxed);
                self.open.store(false, Ordering::Release);
            }
        } else if self.failures.fetch_add(1, Ordering::AcqRel) + 1 >= 5 {
            *self.opened_at.lock().unwrap() = Some(Instant::now());
            self.open.store(true, Ordering::Release);
        }
    }
}

/// The hand-written stack around one operation: a place taken with `try_acquire` (refused
/// when none is free), then up to 3 attempts, each asking the breaker, under tokio's timeout,
/// and recorded; a failed attempt sleeps 300 ms, doubling, before the next.
pub async fn hand_written<O: Operation>(
    bulkhead: &Semaphore,
    breaker: &Breaker,
    op: O,
) -> Result<u64, Failure> {
    let _permit = bulkhead.try_acquire().map_err(|_| Failure::Busy)?;
    let mut attempt = 0;
    loop {
        if !breaker.allow() {
            return Err(Failure::Busy);
        }
        let result = match tokio::time::timeout(TIMEOUT, op.run()).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Busy),
        };
        breaker.record(result.is_ok());
        match result {
            Err(error) if attempt < 2 => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(300) * 2u32.pow(attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// What a careful user writes by hand: a semaphore, a retry loop, a consecutive-failure
/// breaker on atomics with a mutex for the opening time, tokio's timeout.
#[derive(Debug)]
pub struct HandWritten {
    bulkhead: Semaphore,
    breaker: Breaker,
}

impl Default for HandWritten {
    fn default() -> Self {
        HandWritten {
            bulkhead: Semaphore::new(8),
            breaker: Breaker::default(),
        }
    }
}

impl HandWritten {
    pub async fn call<O: Operation>(&self, op: O) -> Result<u64, Failure> {
        hand_written(&self.bulkhead, &self.breaker, op).await
    }
}

pub type FailsafeBreaker = failsafe::StateMachine<
    failsafe::failure_policy::ConsecutiveFailures<failsafe::backoff::Constant>,
    (),
>;

pub fn failsafe_breaker() -> FailsafeBreaker {
    failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            5,
            failsafe::backoff::constant(COOLDOWN),
        ))
        .build()
}

/// failsafe's breaker around tokio's timeout.
pub async fn failsafe_timeout<O: Operation>(
    breaker: &FailsafeBreaker,
    op: O,
) -> Result<u64, Failure> {
    let timed = async {
        tokio::time::timeout(TIMEOUT, op.run())
            .await
            .map_err(|_| Failure::Busy)?
    };
    breaker.call(timed).await.map_err(|_| Failure::Busy)
}

/// backon's exponential backoff as the contenders retry: 300 ms, 2 retries, jittered.
pub fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(300))
        .with_max_times(2)
        .with_jitter()
}

/// backon's retry around tokio's timeout.
pub async fn backon_timeout<O: Operation>(op: O) -> Result<u64, Failure> {
    (|| async {
        tokio::time::timeout(TIMEOUT, op.run())
            .await
            .map_err(|_| Failure::Busy)?
    })
    .retry(backoff())
    .await
}
