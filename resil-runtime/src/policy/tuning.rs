//! [`Tuning`]: the numbers of a policy that configuration may change while it runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resil_spec::rules;

use crate::{Backoff, ConfigError};

/// The numbers of a policy that may change at run time: its limits, its retries and whether it
/// is on at all. An operation reads them once, when it starts, and keeps them to its end: a
/// reload never leaves an operation half under the old numbers and half under the new.
///
/// ```
/// use resil_runtime::Policy;
/// use std::time::Duration;
///
/// let policy = Policy::builder().timeout(Duration::from_secs(20)).retry(2).build().unwrap();
/// let mut tuning = policy.tuning();
/// tuning.timeout = Some(Duration::from_millis(50));
/// tuning.retry = 0;
/// policy.set_tuning(tuning).unwrap();
/// assert_eq!(policy.retries(), 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tuning {
    /// Off: calls go straight to the body, with no timeout, retry, breaker, bulkhead or gate
    /// (for a test, or to rule the policy out while investigating).
    pub enabled: bool,
    /// Limit for one attempt.
    pub timeout: Option<Duration>,
    /// Limit for the whole operation.
    pub deadline: Option<Duration>,
    /// A stream's longest gap between items.
    pub idle: Option<Duration>,
    /// Extra attempts after the first.
    pub retry: u32,
    /// The longest `Retry-After` honoured.
    pub retry_after_max: Duration,
    /// The waits between attempts.
    pub backoff: Backoff,
}

impl Tuning {
    /// Checks the rules a tuning follows, as the builder does.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("timeout", self.timeout),
            ("deadline", self.deadline),
            ("idle_timeout", self.idle),
        ] {
            value.map_or(Ok(()), |value| rules::positive(key, value))?;
        }
        if let (Some(timeout), Some(deadline)) = (self.timeout, self.deadline) {
            rules::timeout_within_deadline(timeout, deadline)?;
        }
        if let Some(deadline) = self.deadline {
            let backoff = (self.backoff.base(), self.backoff.cap());
            rules::retries_within_deadline(self.retry, backoff, self.backoff.jitter(), deadline)?;
        }
        Ok(())
    }

    /// What an operation of a policy switched off runs under.
    fn off(&self) -> Tuning {
        Tuning {
            enabled: false,
            timeout: None,
            deadline: None,
            idle: None,
            retry: 0,
            ..self.clone()
        }
    }
}

/// Every tuning a policy has had, which one is current, and which are its defaults. Tunings
/// are never removed while the policy lives, so an operation may hold a reference to the one
/// it started with; a tuning applied again is found, not added, so memory grows with the
/// distinct tunings applied, not with the reloads, and at most [`Tunings::MAX`] are kept.
///
/// The defaults are what configuration overrides and returns to: the attribute's or the
/// builder's values, or the last tuning set by hand ([`crate::Policy::set_tuning`]).
#[derive(Debug)]
pub(crate) struct Tunings {
    #[cfg(feature = "config")]
    name: Arc<str>,
    /// What the policy was built with: the attribute's or the builder's values.
    base: Tuning,
    applied: boxcar::Vec<Tuning>,
    /// 0: `base`; n: `applied[n - 1]`.
    current: AtomicUsize,
    /// The defaults, as `current`.
    defaults: AtomicUsize,
}

impl Tunings {
    pub(crate) fn new(_name: Arc<str>, base: Tuning) -> Arc<Self> {
        let tunings = Arc::new(Tunings {
            #[cfg(feature = "config")]
            name: _name,
            base,
            applied: boxcar::Vec::new(),
            current: AtomicUsize::new(0),
            defaults: AtomicUsize::new(0),
        });
        #[cfg(feature = "config")]
        registry::register(&tunings);
        tunings
    }

    /// The most distinct tunings a policy keeps: enough for any reloaded configuration,
    /// small enough that finding one again stays cheap.
    pub(crate) const MAX: usize = 256;

    /// The tuning new operations start with.
    #[inline]
    pub(crate) fn current(&self) -> &Tuning {
        self.at(self.current.load(Ordering::Acquire))
    }

    fn at(&self, index: usize) -> &Tuning {
        match index {
            0 => &self.base,
            n => self.applied.get(n - 1).unwrap_or(&self.base),
        }
    }

    /// The policy's name.
    #[cfg(feature = "config")]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// What configuration overrides and returns to.
    #[cfg(feature = "config")]
    pub(crate) fn defaults(&self) -> &Tuning {
        self.at(self.defaults.load(Ordering::Acquire))
    }

    /// Makes `tuning` current for new operations, after checking it (configuration).
    #[cfg(feature = "config")]
    pub(crate) fn apply(&self, tuning: Tuning) -> Result<(), ConfigError> {
        let index = self.index(tuning)?;
        self.current.store(index, Ordering::Release);
        Ok(())
    }

    /// Makes `tuning` current and the defaults configuration returns to (by hand).
    pub(crate) fn set(&self, tuning: Tuning) -> Result<(), ConfigError> {
        let index = self.index(tuning)?;
        self.defaults.store(index, Ordering::Release);
        self.current.store(index, Ordering::Release);
        Ok(())
    }

    /// Where `tuning` is kept, added if new.
    fn index(&self, tuning: Tuning) -> Result<usize, ConfigError> {
        tuning.check()?;
        let tuning = if tuning.enabled { tuning } else { tuning.off() };
        if tuning == self.base {
            return Ok(0);
        }
        if let Some((at, _)) = self.applied.iter().find(|(_, known)| **known == tuning) {
            return Ok(at + 1);
        }
        if self.applied.count() >= Self::MAX {
            return Err(ConfigError::TooManyTunings { limit: Self::MAX });
        }
        Ok(self.applied.push(tuning) + 1)
    }
}

#[cfg(feature = "config")]
pub(crate) use registry::registered;

/// Every live policy's tunings: what configuration applies to.
#[cfg(feature = "config")]
mod registry {
    use std::sync::{Arc, Mutex, OnceLock, Weak};

    use super::Tunings;
    use crate::sync::lock_std;

    static REGISTERED: OnceLock<Mutex<Vec<Weak<Tunings>>>> = OnceLock::new();

    pub(super) fn register(tunings: &Arc<Tunings>) {
        let mut all = lock_std(REGISTERED.get_or_init(Default::default));
        all.retain(|known| known.strong_count() > 0);
        all.push(Arc::downgrade(tunings));
    }

    /// Every live policy.
    pub(crate) fn registered() -> Vec<Arc<Tunings>> {
        REGISTERED.get().map_or_else(Vec::new, |all| {
            lock_std(all).iter().filter_map(Weak::upgrade).collect()
        })
    }
}
