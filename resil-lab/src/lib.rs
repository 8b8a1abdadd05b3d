//! The outage lab: resil against the classic outages, as functions that return their
//! figures. The examples print them; the tests assert them.
//!
//! Scenarios run on whatever clock the caller's runtime has: under tokio's paused clock
//! (the examples and tests start one) a minute-long outage takes no wall time. The mock
//! provider is a real HTTP server on 127.0.0.1 and runs on real time.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod client;
pub mod fallback_trap;
pub mod interop;
pub mod learn_limits;
pub mod mock;
pub mod observe;
pub mod priority;
pub mod profiles;
pub mod rate_limits;
pub mod redis_cluster;
pub mod redis_server;
pub mod report;
pub mod retry_storm;
pub mod routing;
pub mod streaming;
pub mod thundering_herd;
pub mod timeline;
pub mod triage;
pub mod two_instances;
pub mod worst_case;

use resil::http::HttpError;
use resil::{Rejected, Transient};

/// What can go wrong: the provider's answer, the way there, or resil itself.
#[derive(Debug, thiserror::Error, Transient)]
pub enum ApiError {
    /// The provider answered with an error status (429 among them, with its wait).
    #[error(transparent)]
    #[transient(transparent)]
    Http(#[from] HttpError),
    /// The request failed on the way.
    #[error(transparent)]
    #[transient(transparent)]
    Transport(#[from] reqwest::Error),
    /// The runtime stopped the call.
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

/// The error a simulated LLM provider fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
pub enum LlmError {
    /// 503: try again later.
    #[error("provider unavailable (503)")]
    #[transient]
    Unavailable,
    /// 429 with a `Retry-After`.
    #[error("rate limited (429), retry after {0:?}")]
    #[transient(retry_after = 0)]
    RateLimited(std::time::Duration),
    /// 401: the same request will fail the same way.
    #[error("unauthorized (401)")]
    Unauthorized,
    /// The runtime stopped the call.
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

impl LlmError {
    /// The outcome kind for tables: `timeout`, `breaker_open`, `unavailable`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Unavailable => "unavailable",
            LlmError::RateLimited(_) => "rate_limited",
            LlmError::Unauthorized => "unauthorized",
            LlmError::Rejected(rejected) => rejected.kind(),
        }
    }
}

/// True when the program was asked for JSON lines (`--json`).
pub fn json_requested() -> bool {
    std::env::args().any(|arg| arg == "--json")
}

/// With `--json`, prints one JSON object per row and returns true; otherwise prints nothing.
pub fn print_json<R>(rows: &[R], json: impl Fn(&R) -> serde_json::Value) -> bool {
    if !json_requested() {
        return false;
    }
    for row in rows {
        println!("{}", json(row));
    }
    true
}
