//! Rate gates, token gates and the bulkhead's queue: callers wait their turn within their
//! deadline instead of collecting 429s, or are refused at once without calling. Paused clock.

#[path = "../common/mod.rs"]
mod common;

mod gates;
mod learn;
mod learn_bounds;
mod learn_hostile;
mod learn_hostile_more;
mod learn_in_turn;
mod learn_replace;
mod limits;
mod queue;
#[cfg(feature = "shared")]
mod shared_pace;
#[cfg(feature = "shared")]
mod shared_two_gates;
mod two_gates;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestError;
use futures::future::join_all;
use resil_runtime::{Breaker, BreakerConfig, BreakerState, Jitter, Policy, Rejected};
use tokio::time::Instant;

/// Records when each call started, and the most in flight at once (not the call counter of the
/// facade's tests).
#[derive(Debug, Default)]
struct Starts {
    at: std::sync::Mutex<Vec<Duration>>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

impl Starts {
    async fn call(&self, origin: Instant, lasts: Duration) -> Result<(), TestError> {
        self.at.lock().unwrap().push(origin.elapsed());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(lasts).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn times(&self) -> Vec<Duration> {
        let mut at = self.at.lock().unwrap().clone();
        at.sort();
        at
    }
}
