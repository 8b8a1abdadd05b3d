//! [`Rejected`]: what the runtime itself fails an operation with.

use std::fmt;
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
/// assert_eq!(open.to_string(), "circuit breaker `openai` is open: no call was made (retry in 12s)");
/// let open = Rejected::BreakerOpen { breaker: "openai".into(), retry_in: Duration::from_nanos(1_999_999_269) };
/// assert_eq!(open.to_string(), "circuit breaker `openai` is open: no call was made (retry in 2s)");
/// ```
///
/// The messages say what happened, not what to do: they end up in end users' error chains.
/// Durations are rounded for people (`1.5s`, `2m30s`); the exact values are in the fields.
///
/// ```
/// # use resil_runtime::Rejected;
/// # use std::time::Duration;
/// let timeout = Rejected::Timeout { after: Duration::from_millis(1500) };
/// assert_eq!(timeout.to_string(), "the attempt timed out after 1.5s");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejected {
    /// One attempt ran longer than its `timeout`. Transient: the next attempt may be faster.
    #[error("the attempt timed out after {}", Rounded(*after))]
    Timeout {
        /// The attempt's time limit.
        after: Duration,
    },
    /// The whole operation ran out of time (`deadline`): no further attempt or wait fits.
    #[error("the operation's deadline passed")]
    DeadlineExceeded,
    /// The circuit breaker is open: the provider failed repeatedly, so no call was made.
    #[error("circuit breaker `{breaker}` is open: no call was made (retry in {})", Rounded(*retry_in))]
    BreakerOpen {
        /// The breaker's name (`openai`, or `model=gpt-4o` for a keyed breaker).
        breaker: Arc<str>,
        /// Time until the breaker lets a probe through.
        retry_in: Duration,
    },
    /// The bulkhead already has `limit` operations in flight; this one was not queued.
    #[error("bulkhead full: {limit} operations already in flight")]
    BulkheadFull {
        /// The number of operations the bulkhead lets run at once.
        limit: usize,
    },
    /// A committed stream went `after` without an item (`idle_timeout`); it ends here.
    /// Transient: the provider stalled.
    #[error("the stream stalled: no item for {}", Rounded(*after))]
    Idle {
        /// The longest gap allowed between two items.
        after: Duration,
    },
    /// The rate gate has no slot for this call before its deadline; no call was made.
    #[error("rate limited: no slot for {} (no call was made)", Rounded(*retry_in))]
    RateLimited {
        /// Time until the gate could let a call through.
        retry_in: Duration,
    },
    /// The call costs more than the token gate lets through at once, so it could never pass.
    #[error("the call costs {cost}, more than the gate's burst of {burst}: it can never pass")]
    OverBurst {
        /// What the call costs.
        cost: u64,
        /// The most the gate lets through at once.
        burst: u64,
    },
    /// A stream ended before its final item (`complete_when`), or before any item at all.
    /// Transient: retried before the stream's first item, the stream's last item after it.
    #[error("the stream ended before its final item")]
    Incomplete,
    /// A stream sent `held` items without the one that commits it (`commit_when`), more than
    /// the policy holds before a commit (`commit_hold`): the attempt ends rather than keep
    /// them. Transient: retried like a stall before the commit.
    #[error("the stream sent {held} item{} without one that commits it", if *held == 1 { "" } else { "s" })]
    Uncommitted {
        /// The items it sent before the attempt ended.
        held: usize,
    },
    /// A policy declared `shared_fail = "closed"` could not reach its Redis store within
    /// `shared_timeout`, so it refused rather than decide locally; no call was made.
    #[error("the shared store did not answer and this limit fails closed (no call was made)")]
    SharedUnavailable,
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
            Rejected::RateLimited { .. } => "rate_limited",
            Rejected::OverBurst { .. } => "over_burst",
            Rejected::Idle { .. } => "idle",
            Rejected::Incomplete => "incomplete",
            Rejected::Uncommitted { .. } => "uncommitted",
            Rejected::SharedUnavailable => "shared_unavailable",
        }
    }
}

/// A timeout, a stalled stream, an incomplete one and one that never commits are transient;
/// the rest are not. An open
/// breaker and a closed rate gate carry their `retry_in` as `retry_after`, so a server can
/// answer 503 or 429 with `Retry-After`.
impl Transient for Rejected {
    fn is_transient(&self) -> bool {
        matches!(
            self,
            Rejected::Timeout { .. }
                | Rejected::Idle { .. }
                | Rejected::Incomplete
                | Rejected::Uncommitted { .. }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Rejected::BreakerOpen { retry_in, .. } | Rejected::RateLimited { retry_in } => {
                Some(*retry_in)
            }
            _ => None,
        }
    }
}

/// A function returning `Box<dyn Error + Send>` can fail with the runtime's own failures
/// too: the standard library converts an error into `Box<dyn Error>` and
/// `Box<dyn Error + Send + Sync>`, not into this box. The caller finds the `Rejected` with
/// `downcast_ref`.
impl From<Rejected> for Box<dyn std::error::Error + Send> {
    fn from(rejected: Rejected) -> Self {
        Box::new(rejected)
    }
}

/// A function returning `std::io::Error` can fail with the runtime's own failures too: a
/// timeout as kind `TimedOut`, every other as kind `Other`, each holding the `Rejected`
/// (`get_ref`, `into_inner`), which keeps resil's classification of it (an io error of kind
/// `Other` says what the error it wraps says).
///
/// ```
/// use resil_runtime::{Rejected, Transient};
/// use std::{io, time::Duration};
///
/// let timeout = io::Error::from(Rejected::Timeout { after: Duration::from_secs(1) });
/// assert_eq!(timeout.kind(), io::ErrorKind::TimedOut);
/// let open = io::Error::from(Rejected::BreakerOpen {
///     breaker: "gpt".into(),
///     retry_in: Duration::from_secs(9),
/// });
/// assert_eq!(open.retry_after(), Some(Duration::from_secs(9)));
/// assert!(matches!(
///     open.get_ref().and_then(|e| e.downcast_ref::<Rejected>()),
///     Some(Rejected::BreakerOpen { .. })
/// ));
/// ```
impl From<Rejected> for std::io::Error {
    fn from(rejected: Rejected) -> Self {
        let kind = match rejected {
            Rejected::Timeout { .. } => std::io::ErrorKind::TimedOut,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, rejected)
    }
}

/// `From<Rejected>`, with an error message written for a person: what an error type needs so
/// that an operation can fail with the runtime's own failures.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry resil's own failures (timeouts, open breaker, full bulkhead): it does not implement `From<resil::Rejected>`",
    label = "this error type needs `From<resil::Rejected>`",
    note = "for an error type of your crate, add a variant such as `#[error(transparent)] #[transient(transparent)] Rejected(#[from] resil::Rejected)`, or implement `From<resil::Rejected>` by hand",
    note = "for an error type of another crate (`reqwest::Error`, a gRPC `Status`), name the functions that decide and that make one from resil's failures: `transient = is_worth_retrying, rejected = to_error` (the guide's page `resil::guide::adopting`)"
)]
pub trait FromRejected: From<Rejected> {}

#[diagnostic::do_not_recommend]
impl<E: From<Rejected>> FromRejected for E {}

/// A duration written for people: `250ms`, `1.5s`, `12s`, `2m30s`, `3h20m`. Rounded up to the
/// unit shown, so a "retry in" is never shorter than the real wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rounded(pub(crate) Duration);

impl fmt::Display for Rounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ceil = |unit: u128| self.0.as_nanos().div_ceil(unit);
        let ms = ceil(1_000_000);
        if ms < 1000 {
            return write!(f, "{ms}ms");
        }
        let tenths = ceil(100_000_000);
        if tenths < 100 {
            return match tenths % 10 {
                0 => write!(f, "{}s", tenths / 10),
                tenth => write!(f, "{}.{tenth}s", tenths / 10),
            };
        }
        let secs = ceil(1_000_000_000);
        match (secs / 3600, secs % 3600 / 60, secs % 60) {
            (0, 0, s) => write!(f, "{s}s"),
            (0, m, 0) => write!(f, "{m}m"),
            (0, m, s) => write!(f, "{m}m{s}s"),
            (h, 0, _) => write!(f, "{h}h"),
            (h, m, _) => write!(f, "{h}h{m}m"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounded_for_people() {
        let cases = [
            (Duration::ZERO, "0ms"),
            (Duration::from_nanos(1), "1ms"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_nanos(1_999_999_269), "2s"),
            (Duration::from_secs(12), "12s"),
            (Duration::from_secs(150), "2m30s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(3600 * 3 + 1200), "3h20m"),
            (Duration::MAX, "5124095576030431h"),
        ];
        for (duration, text) in cases {
            assert_eq!(Rounded(duration).to_string(), text, "{duration:?}");
        }
    }
}
