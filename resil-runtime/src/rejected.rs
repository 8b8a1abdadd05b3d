//! [`Rejected`]: what the runtime itself fails an operation with.

use std::sync::Arc;
use std::time::Duration;

use crate::Transient;

/// An operation the runtime stopped, before or instead of the provider answering.
///
/// Your error type takes these in through `From<Rejected>`, usually as a
/// `#[transient(transparent)]` variant, so callers see one error type:
///
/// ```
/// use resil_runtime::{Rejected, Transient};
/// use std::time::Duration;
///
/// let open = Rejected::BreakerOpen { breaker: "openai".into(), retry_in: Duration::from_secs(12) };
/// assert!(!open.is_transient());
/// assert_eq!(open.retry_after(), Some(Duration::from_secs(12)));
/// assert_eq!(
///     open.to_string(),
///     "circuit breaker `openai` is open: the provider failed repeatedly; \
///      no call was made, try again in 12s or serve a fallback"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejected {
    /// One attempt ran longer than its `timeout`. The only transient rejection: the next
    /// attempt may be faster.
    #[error("the attempt timed out after {after:?}: the provider did not answer in time; it may be retried")]
    Timeout {
        /// The attempt's time limit.
        after: Duration,
    },
    /// The whole operation ran out of time (`deadline`): no further attempt or wait fits.
    #[error("the operation's deadline passed: no time was left for another attempt; raise `deadline` or answer without this call")]
    DeadlineExceeded,
    /// The circuit breaker is open: the provider failed repeatedly, so no call was made.
    #[error("circuit breaker `{breaker}` is open: the provider failed repeatedly; no call was made, try again in {retry_in:?} or serve a fallback")]
    BreakerOpen {
        /// The breaker's name (`openai`, or `model=gpt-4o` for a keyed breaker).
        breaker: Arc<str>,
        /// Time until the breaker lets a probe through.
        retry_in: Duration,
    },
    /// The bulkhead already has `limit` operations in flight; this one was not queued.
    #[error("bulkhead full: {limit} operations already in flight; shed this request or raise `bulkhead`")]
    BulkheadFull {
        /// The number of operations the bulkhead lets run at once.
        limit: usize,
    },
}

impl Rejected {
    /// The short name of the kind of rejection (`"timeout"`, `"breaker_open"`, ...), for
    /// logs and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Rejected::Timeout { .. } => "timeout",
            Rejected::DeadlineExceeded => "deadline_exceeded",
            Rejected::BreakerOpen { .. } => "breaker_open",
            Rejected::BulkheadFull { .. } => "bulkhead_full",
        }
    }
}

/// Only [`Rejected::Timeout`] is transient. An open breaker carries its `retry_in` as
/// `retry_after`, so a server can answer 503 with `Retry-After`.
impl Transient for Rejected {
    fn is_transient(&self) -> bool {
        matches!(self, Rejected::Timeout { .. })
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Rejected::BreakerOpen { retry_in, .. } => Some(*retry_in),
            _ => None,
        }
    }
}
