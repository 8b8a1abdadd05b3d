//! [`BreakerKind`]: how a closed breaker judges its provider, and [`WindowSize`]: over what.

use core::fmt;
use core::time::Duration;

/// How a closed breaker judges its provider.
///
/// A consecutive breaker misses a provider that fails 40 % of calls in a scattered way, never
/// five in a row; a failure-rate breaker catches it. A slow-call breaker catches a provider
/// that still answers, but too slowly to be of use. All three share the half-open probe and
/// the generations.
///
/// ```
/// use std::time::Duration;
/// use resil_spec::{rules, BreakerKind, WindowSize};
///
/// let kind = BreakerKind::FailureRate { percent: 25, window: WindowSize::Calls(20), min_calls: 10 };
/// assert!(rules::breaker_kind(kind).is_ok());
/// let never = BreakerKind::FailureRate { percent: 25, window: 5.into(), min_calls: 10 };
/// assert!(rules::breaker_kind(never).is_err());
/// let timed = BreakerKind::FailureRate {
///     percent: 25,
///     window: WindowSize::Time(Duration::from_secs(30)),
///     min_calls: 10,
/// };
/// assert!(rules::breaker_kind(timed).is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakerKind {
    /// Opens after `threshold` consecutive transient failures (the default).
    #[default]
    Consecutive,
    /// Opens when at least `percent` % of the calls in the `window` failed transiently, once
    /// at least `min_calls` of them were counted.
    FailureRate {
        /// The share of failures that opens it, 1 to 100.
        percent: u8,
        /// The calls remembered: the last so many, or those of the last so long.
        window: WindowSize,
        /// Calls counted before it may open.
        min_calls: u32,
    },
    /// Opens when at least `percent` % of the calls in the `window` took `slower_than` or
    /// more (a timed-out call is as slow as its timeout), once at least `min_calls` were
    /// counted.
    SlowCall {
        /// The share of slow calls that opens it, 1 to 100.
        percent: u8,
        /// What counts as slow.
        slower_than: Duration,
        /// The calls remembered: the last so many, or those of the last so long.
        window: WindowSize,
        /// Calls counted before it may open.
        min_calls: u32,
    },
}

/// The calls a failure-rate or slow-call breaker judges: the last so many (Resilience4j's
/// `COUNT_BASED`), or those of the last so long (its `TIME_BASED`, Polly's
/// `SamplingDuration`).
///
/// A count window remembers a failure until enough calls came after it, however long that
/// takes: a quiet night keeps the evening's failures. A time window forgets a failure once
/// the window has passed over it, whatever the traffic; it keeps its calls in buckets of
/// about a second (at least 10, at most 60 buckets), so a failure is forgotten between one
/// bucket short of the window and the window after it.
///
/// ```
/// use std::time::Duration;
/// use resil_spec::WindowSize;
///
/// assert_eq!(WindowSize::from(20), WindowSize::Calls(20));
/// assert_eq!(WindowSize::from(Duration::from_secs(30)), WindowSize::Time(Duration::from_secs(30)));
/// assert_eq!(WindowSize::Time(Duration::from_secs(30)).to_string(), "the calls of the last 30s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowSize {
    /// The last so many calls (1 to [`crate::rules::MAX_WINDOW`]).
    Calls(u32),
    /// The calls of the last so long (1 s to [`crate::rules::MAX_TIME_WINDOW`]).
    Time(Duration),
}

impl From<u32> for WindowSize {
    fn from(calls: u32) -> Self {
        WindowSize::Calls(calls)
    }
}

impl From<Duration> for WindowSize {
    fn from(time: Duration) -> Self {
        WindowSize::Time(time)
    }
}

impl fmt::Display for WindowSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowSize::Calls(calls) => write!(f, "the last {calls} calls"),
            WindowSize::Time(time) => {
                write!(f, "the calls of the last {}", crate::duration::human(*time))
            }
        }
    }
}
