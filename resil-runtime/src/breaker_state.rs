//! [`BreakerState`] and [`Transition`]: what a breaker is and what it went through, as plain
//! data that events, metrics and tracing carry without knowing the breaker.

use std::fmt;

/// The state a breaker is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; transient failures are counted.
    Closed,
    /// Calls fail at once with [`Rejected::BreakerOpen`](crate::Rejected::BreakerOpen).
    Open,
    /// The cooldown passed: one probe decides whether the breaker closes or opens again.
    HalfOpen,
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        })
    }
}

/// A state change, reported to the caller that caused it so it can emit an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
}
