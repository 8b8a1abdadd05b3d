//! What a builder says when a setting cannot work: the one error of every layer's
//! constructors.

/// A policy setting that cannot work, reported by the builders instead of a panic. It is the
/// spec's [`Violation`](resil_spec::rules::Violation): the `#[resilient]` macro checks the same
/// rules at compile time and says the same sentence.
///
/// ```
/// use resil_runtime::{ConfigError, Policy};
///
/// let err = Policy::builder().bulkhead(0).build().unwrap_err();
/// assert_eq!(err, ConfigError::ZeroBulkhead);
/// assert!(err.to_string().contains("give the number of calls allowed in flight"));
/// ```
pub type ConfigError = resil_spec::rules::Violation;
