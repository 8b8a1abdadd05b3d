//! The values a policy takes where the attribute or the builder says nothing.

use core::time::Duration;

/// The first wait's envelope: `backoff = "300ms..8s"`.
pub const BACKOFF_BASE: Duration = Duration::from_millis(300);
/// The longest envelope.
pub const BACKOFF_CAP: Duration = Duration::from_secs(8);
/// Consecutive transient failures that open a breaker.
pub const BREAKER_THRESHOLD: u32 = 5;
/// The share of calls that opens a failure-rate or slow-call breaker, in percent.
pub const BREAKER_RATE: u32 = 50;
/// The calls a failure-rate or slow-call breaker remembers.
pub const BREAKER_WINDOW: u32 = 20;
/// The calls it counts before it may open: a handful of failures at start-up is not a rate.
pub const BREAKER_MIN_CALLS: u32 = 10;
/// How long a breaker stays open before one probe.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
/// The longest `Retry-After` honoured: a server asking for more ends the operation.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);
/// Items a stream's attempt holds before the one that commits it (`commit_when`), at most:
/// room for a long tool call streamed without text, not for a provider that never commits.
pub const COMMIT_HOLD: usize = 10_000;
/// The bounds of plain `bulkhead = "adaptive"`: down to one call at a time, up to 256 (see
/// the runtime's `bulkhead::adaptive` for why).
pub const ADAPTIVE_BULKHEAD: (usize, usize) = (1, 256);
/// Breakers kept per key (`per_<arg>`), at most.
pub const MAX_KEYS: usize = 10_000;
/// How long a shared policy waits for Redis before its local state decides: a Redis round
/// trip in one zone is well under a millisecond, so 50 ms is an answer that will not come.
pub const SHARED_TIMEOUT: Duration = Duration::from_millis(50);
