//! An error type derived the way users write it, a provider that counts its calls, and the
//! starts of calls as a gate let them through.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resil::{Rejected, Transient};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
pub enum ApiError {
    #[error("provider busy")]
    #[transient]
    Busy,
    /// Failed, asking to be retried after `wait` (a 503 with `Retry-After`): not a throttle,
    /// so it counts toward opening a breaker.
    #[error("unavailable, retry after {wait:?}")]
    #[transient(retry_after = wait)]
    RetryAfter { wait: Option<Duration> },
    /// Too fast (a 429 with `Retry-After`): retried after the wait, never counted toward
    /// opening a breaker, and it holds a rate gate.
    #[error("rate limited, retry after {0:?}")]
    #[transient(throttle, retry_after = 0)]
    Throttled(Duration),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

impl ApiError {
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Busy => "busy",
            ApiError::RetryAfter { .. } => "retry_after",
            ApiError::Throttled(_) => "throttled",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Rejected(rejected) => rejected.kind(),
        }
    }
}

/// Counts calls; shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<AtomicU32>);

impl Calls {
    pub fn count(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
    pub fn add(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// When each call started, under a label (its class, its tenant), from the test's origin on
/// the paused clock.
pub struct Starts<L> {
    origin: tokio::time::Instant,
    starts: std::sync::Mutex<Vec<(L, Duration)>>,
}

impl<L: PartialEq> Starts<L> {
    pub fn new() -> Self {
        Starts {
            origin: tokio::time::Instant::now(),
            starts: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn add(&self, label: L) {
        let at = self.origin.elapsed();
        self.starts.lock().unwrap().push((label, at));
    }

    /// The starts under `label`, in order.
    pub fn of(&self, label: &L) -> Vec<Duration> {
        let starts = self.starts.lock().unwrap();
        (starts.iter())
            .filter(|(l, _)| l == label)
            .map(|(_, at)| *at)
            .collect()
    }

    /// Every start's label, in the order they started (those at one instant too).
    pub fn labels(&self) -> Vec<L>
    where
        L: Clone,
    {
        let starts = self.starts.lock().unwrap();
        starts.iter().map(|(label, _)| label.clone()).collect()
    }

    /// Every start, in order.
    pub fn all(&self) -> Vec<Duration> {
        let mut all: Vec<_> = self.starts.lock().unwrap().iter().map(|s| s.1).collect();
        all.sort();
        all
    }

    /// Never more than `count` starts within `period`.
    pub fn keep_rate(&self, count: usize, period: Duration) {
        let all = self.all();
        for (first, past) in all.iter().zip(&all[count..]) {
            assert!(*past - *first >= period, "{all:?}");
        }
    }
}

impl<L> Starts<(L, u64)> {
    /// Never more than `most` units started within any second, each start labelled with the
    /// units it took (a token gate's `count + burst - 1`).
    pub fn keep_units(&self, most: u64) {
        let mut all: Vec<(Duration, u64)> = (self.starts.lock().unwrap().iter())
            .map(|((_, units), at)| (*at, *units))
            .collect();
        all.sort();
        for (at, _) in &all {
            let within: u64 = (all.iter())
                .filter(|(other, _)| *other >= *at && *other < *at + Duration::from_secs(1))
                .map(|(_, units)| units)
                .sum();
            assert!(within <= most, "{within} units from {at:?}: {all:?}");
        }
    }
}

/// Calls `call` at `at` after now (the test's origin, on the paused clock).
pub async fn at<F: std::future::Future>(at: Duration, call: impl FnOnce() -> F) -> F::Output {
    tokio::time::sleep(at).await;
    call().await
}
