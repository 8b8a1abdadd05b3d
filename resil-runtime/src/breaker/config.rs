//! [`BreakerConfig`]: when a breaker opens and how long it stays open.

use std::time::Duration;

use crate::ConfigError;
use resil_spec::rules;

/// A breaker's tuning: consecutive transient failures that open it, and how long it stays
/// open before a probe.
///
/// ```
/// use resil_runtime::BreakerConfig;
/// use std::time::Duration;
///
/// let config = BreakerConfig::new(5, Duration::from_secs(30))?;
/// assert_eq!(config, BreakerConfig::default());
/// # Ok::<(), resil_runtime::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    threshold: u32,
    cooldown: Duration,
    kind: BreakerKind,
}

pub use resil_spec::{BreakerKind, WindowSize};

impl Default for BreakerConfig {
    /// 5 consecutive transient failures, 30 s cooldown.
    fn default() -> Self {
        BreakerConfig {
            threshold: resil_spec::defaults::BREAKER_THRESHOLD,
            cooldown: resil_spec::defaults::BREAKER_COOLDOWN,
            kind: BreakerKind::Consecutive,
        }
    }
}

impl BreakerConfig {
    /// Opens after `threshold` consecutive transient failures, probes after `cooldown`.
    pub fn new(threshold: u32, cooldown: Duration) -> Result<Self, ConfigError> {
        rules::breaker_threshold(threshold)?;
        rules::positive("breaker_cooldown", cooldown)?;
        Ok(BreakerConfig {
            threshold,
            cooldown,
            kind: BreakerKind::Consecutive,
        })
    }

    /// Judges by `kind` instead of consecutive failures (the threshold then counts for
    /// nothing).
    pub fn with_kind(mut self, kind: BreakerKind) -> Result<Self, ConfigError> {
        rules::breaker_kind(kind)?;
        self.kind = kind;
        Ok(self)
    }

    /// Consecutive transient failures that open the breaker.
    pub const fn threshold(&self) -> u32 {
        self.threshold
    }

    /// Time from opening to the first probe.
    pub const fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// How it judges the provider.
    pub const fn kind(&self) -> BreakerKind {
        self.kind
    }
}

/// Whether `bad` of `calls` trip a window: at least `min_calls` counted, and at least
/// `percent` % of them bad. Every window judges by it (a count window, a time window, and the
/// sums of a shared one).
pub(crate) fn trips(calls: u64, bad: u64, percent: u8, min_calls: u32) -> bool {
    calls >= u64::from(min_calls)
        && u128::from(bad) * 100 >= u128::from(percent) * u128::from(calls)
}
