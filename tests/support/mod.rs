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
    #[error("rate limited")]
    #[transient(retry_after = wait)]
    RateLimited { wait: Option<Duration> },
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
            ApiError::RateLimited { .. } => "rate_limited",
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
