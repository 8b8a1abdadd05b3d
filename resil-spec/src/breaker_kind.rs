//! [`BreakerKind`]: how a closed breaker judges its provider.

use core::time::Duration;

/// How a closed breaker judges its provider.
///
/// A consecutive breaker misses a provider that fails 40 % of calls in a scattered way, never
/// five in a row; a failure-rate breaker catches it. A slow-call breaker catches a provider
/// that still answers, but too slowly to be of use. All three share the half-open probe and
/// the generations.
///
/// ```
/// use resil_spec::{rules, BreakerKind};
///
/// let kind = BreakerKind::FailureRate { percent: 25, window: 20, min_calls: 10 };
/// assert!(rules::breaker_kind(kind).is_ok());
/// let never = BreakerKind::FailureRate { percent: 25, window: 5, min_calls: 10 };
/// assert!(rules::breaker_kind(never).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakerKind {
    /// Opens after `threshold` consecutive transient failures (the default).
    #[default]
    Consecutive,
    /// Opens when at least `percent` % of the last `window` calls failed transiently, once at
    /// least `min_calls` of them were counted.
    FailureRate {
        /// The share of failures that opens it, 1 to 100.
        percent: u8,
        /// Calls remembered.
        window: u32,
        /// Calls counted before it may open.
        min_calls: u32,
    },
    /// Opens when at least `percent` % of the last `window` calls took `slower_than` or more
    /// (a timed-out call is as slow as its timeout), once at least `min_calls` were counted.
    SlowCall {
        /// The share of slow calls that opens it, 1 to 100.
        percent: u8,
        /// What counts as slow.
        slower_than: Duration,
        /// Calls remembered.
        window: u32,
        /// Calls counted before it may open.
        min_calls: u32,
    },
}
