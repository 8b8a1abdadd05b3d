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

/// Every tuning a policy has had, and which one is current. Tunings are never removed while
/// the policy lives, so an operation may hold a reference to the one it started with; a
/// tuning applied again is found, not added, so memory grows with the distinct tunings
/// applied, not with the reloads.
#[derive(Debug)]
pub(crate) struct Tunings {
    #[cfg(feature = "config")]
    name: Arc<str>,
    /// What the policy was built with: the attribute's or the builder's values.
    base: Tuning,
    applied: boxcar::Vec<Tuning>,
    /// 0: `base`; n: `applied[n - 1]`.
    current: AtomicUsize,
}

impl Tunings {
    pub(crate) fn new(_name: Arc<str>, base: Tuning) -> Arc<Self> {
        let tunings = Arc::new(Tunings {
            #[cfg(feature = "config")]
            name: _name,
            base,
            applied: boxcar::Vec::new(),
            current: AtomicUsize::new(0),
        });
        #[cfg(feature = "config")]
        registry::register(&tunings);
        tunings
    }

    /// The tuning new operations start with.
    #[inline]
    pub(crate) fn current(&self) -> &Tuning {
        match self.current.load(Ordering::Acquire) {
            0 => &self.base,
            n => self.applied.get(n - 1).unwrap_or(&self.base),
        }
    }

    /// The policy's name.
    #[cfg(feature = "config")]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// What the policy was built with.
    #[cfg(feature = "config")]
    pub(crate) fn base(&self) -> &Tuning {
        &self.base
    }

    /// Makes `tuning` current for new operations, after checking it.
    pub(crate) fn apply(&self, tuning: Tuning) -> Result<(), ConfigError> {
        tuning.check()?;
        let tuning = if tuning.enabled { tuning } else { tuning.off() };
        let index = if tuning == self.base {
            0
        } else {
            match self.applied.iter().find(|(_, known)| **known == tuning) {
                Some((at, _)) => at + 1,
                None => self.applied.push(tuning) + 1,
            }
        };
        self.current.store(index, Ordering::Release);
        Ok(())
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
