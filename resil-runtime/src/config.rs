//! [`ConfigError`]: a policy that cannot work as configured.

use std::time::Duration;

use crate::rejected::Rounded;

/// A policy setting that cannot work, reported by the builders instead of a panic.
///
/// ```
/// use resil_runtime::{ConfigError, Policy};
/// use std::time::Duration;
///
/// let err = Policy::builder().bulkhead(0).build().unwrap_err();
/// assert_eq!(err, ConfigError::ZeroBulkhead);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration that must be positive was zero.
    #[error("`{key}` is zero: give it a positive duration such as \"300ms\"")]
    ZeroDuration {
        /// The setting.
        key: &'static str,
    },
    /// The backoff's base is larger than its cap.
    #[error("backoff base {} is larger than its cap {}: write it as \"base..cap\" with base ≤ cap", Rounded(*base), Rounded(*cap))]
    BackoffBaseAboveCap {
        /// The first wait.
        base: Duration,
        /// The longest wait.
        cap: Duration,
    },
    /// A bulkhead of zero lets nothing through.
    #[error("a bulkhead of 0 rejects every call: give it at least 1")]
    ZeroBulkhead,
    /// A keyed registry bounded to zero keys could hold no breaker at all.
    #[error("`max_keys` is 0: a keyed breaker needs room for at least one key; give it the number of keys to remember, such as 10000")]
    ZeroMaxKeys,
    /// A breaker that opens after zero failures is always open.
    #[error("a breaker threshold of 0 would open before any failure: give it at least 1")]
    ZeroBreakerThreshold,
    /// The per-attempt timeout is longer than the whole operation's deadline.
    #[error("timeout {} is longer than deadline {}: the deadline would always cut the attempt first; make timeout ≤ deadline", Rounded(*timeout), Rounded(*deadline))]
    TimeoutAboveDeadline {
        /// Limit of one attempt.
        timeout: Duration,
        /// Limit of the whole operation.
        deadline: Duration,
    },
    /// A retry budget's share or minimum is negative or not a number.
    #[error("a retry budget needs a share ≥ 0 (\"20%\") and a minimum ≥ 0 retries per second")]
    InvalidRetryBudget,
    /// A named breaker is already in use with other settings.
    #[error("breaker `{name}` is already in use with threshold {existing_threshold} and cooldown {}; this site asks for threshold {threshold} and cooldown {}: configure every use of a named breaker alike", Rounded(*existing_cooldown), Rounded(*cooldown))]
    BreakerConflict {
        /// The breaker's name.
        name: String,
        /// Threshold of the breaker in use.
        existing_threshold: u32,
        /// Cooldown of the breaker in use.
        existing_cooldown: Duration,
        /// Threshold this site asked for.
        threshold: u32,
        /// Cooldown this site asked for.
        cooldown: Duration,
    },
}
