//! How an attempt ended, and why an operation made no further retry: what the events say of
//! an attempt's end.

use crate::Rejected;

/// Why an operation made no further retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// The policy declares no retries (`retry = 0`).
    NoRetries,
    /// The policy's own `retry` count is used up.
    RetriesExhausted,
    /// The operation's retry allowance, owned by an outer layer, is used up.
    AllowanceSpent,
    /// The retry budget across operations is used up.
    BudgetExhausted,
    /// The next wait would end past the deadline.
    DeadlineTooClose,
    /// The error asked to wait longer than `retry_after_max`: the caller decides whether to.
    RetryAfterTooLong,
    /// The breaker opened meanwhile: the operation ends with the provider's last error.
    BreakerOpen,
    /// The rate gate has no slot before the deadline: the operation ends with the provider's
    /// last error.
    RateLimited,
    /// Every target of the route would make no call (breaker open, no slot within the
    /// deadline, bulkhead full): the operation ends with the provider's last error.
    NoTarget,
}

impl GiveUp {
    /// A short name for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            GiveUp::NoRetries => "no retries declared",
            GiveUp::RetriesExhausted => "retries exhausted",
            GiveUp::AllowanceSpent => "operation's retry allowance spent",
            GiveUp::BudgetExhausted => "retry budget exhausted",
            GiveUp::DeadlineTooClose => "no time left before the deadline",
            GiveUp::RetryAfterTooLong => "asked to wait longer than retry_after_max",
            GiveUp::BreakerOpen => "the breaker opened",
            GiveUp::RateLimited => "no rate slot before the deadline",
            GiveUp::NoTarget => "no target of the route would call",
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome<'a> {
    /// The provider answered with success.
    Ok,
    /// A permanent error: not retried.
    Permanent,
    /// A transient error: may be retried.
    Transient,
    /// A throttle (a 429, or an error marked one): retried after its wait, and neither a
    /// success nor a failure for the breaker.
    Throttled,
    /// The runtime cut or refused the attempt.
    Rejected(&'a Rejected),
    /// Dropped while its call was under way: its caller stopped waiting for the operation,
    /// or another racer of its race ended it. Neither a success nor a failure for the
    /// breaker. Every attempt told as started is told as ended, this way or another, unless
    /// a panic unwinds through it.
    Cancelled,
}
