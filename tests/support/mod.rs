//! An error type derived the way users write it, and a provider that counts its calls.
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
