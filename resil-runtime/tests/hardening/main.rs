//! One regression test per defect of the hardening review: nothing a server sends, a listener
//! does or a nesting of calls can wedge, crash or mis-count the runtime.

#[path = "../common/mod.rs"]
mod common;

mod breakers;
mod clocks;
mod operations;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{paused_runtime, Provider, Recorder, TestError};
use futures::FutureExt;
use resil_runtime::events::{Event, Listener};
use resil_runtime::{
    worst_case, Backoff, Breaker, BreakerConfig, BreakerState, ConfigError, Jitter, KeyedBreakers,
    Operation, Policy, Rejected, RetryBudget, Transient, Verdict,
};
use tokio::time::{advance, Instant};

const SECOND: Duration = Duration::from_secs(1);

fn breaker(name: &str, threshold: u32, cooldown: Duration) -> Arc<Breaker> {
    Arc::new(Breaker::new(
        name,
        BreakerConfig::new(threshold, cooldown).unwrap(),
    ))
}
