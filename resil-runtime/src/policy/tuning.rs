//! [`Tuning`]: the numbers of a policy that configuration may change while it runs.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use resil_spec::rules;

use crate::sync::lock_std;
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

/// A policy's tunings: the one new operations start with, and the defaults configuration
/// overrides and returns to.
///
/// An operation keeps the tuning it started with to its end. Under the policy's own (the
/// attribute's or the builder's values: what every policy never tuned runs under) it borrows
/// it, at no cost; under a tuning applied since, it holds a count on it, and a tuning no
/// operation holds any more is freed. So a service may change a policy's values as often as it
/// likes (a reloaded file, an adaptive controller calling [`crate::Policy::set_tuning`]): each
/// change costs the same, and memory holds the current tuning and those in flight, not every
/// tuning there has been.
///
/// The defaults are what configuration overrides and returns to: the attribute's or the
/// builder's values, or the last tuning set by hand. The configuration's overrides of this
/// policy are kept too, so a tuning set by hand is overridden key by key, as the file says,
/// without waiting for the file to change.
pub(crate) struct Tunings {
    #[cfg(feature = "config")]
    name: Arc<str>,
    /// What the policy was built with: the attribute's or the builder's values.
    base: Tuning,
    /// The tuning new operations start with, when it is not `base`.
    current: ArcSwapOption<Tuning>,
    /// Whether `current` holds one: a policy never tuned pays this one load per operation.
    tuned: AtomicBool,
    /// Changes are made one at a time, from the defaults and the overrides kept here.
    revision: Mutex<Revision>,
}

#[derive(Default)]
struct Revision {
    /// What configuration overrides and returns to, when it is not `base`.
    defaults: Option<Tuning>,
    /// The configuration's overrides of this policy, written over the defaults.
    #[cfg(feature = "config")]
    overlay: Option<Overlay>,
}

/// The configuration's overrides of one policy: its defaults in, its tuning out.
#[cfg(feature = "config")]
pub(crate) type Overlay = Arc<dyn Fn(&Tuning) -> Tuning + Send + Sync>;

/// The tuning an operation runs under, for as long as it runs.
pub(crate) enum Current<'t> {
    /// The policy's own: borrowed, nothing to count.
    Base(&'t Tuning),
    /// One applied since: held, so it lives until the operation ends.
    Applied(Arc<Tuning>),
}

impl Deref for Current<'_> {
    type Target = Tuning;

    #[inline]
    fn deref(&self) -> &Tuning {
        match self {
            Current::Base(tuning) => tuning,
            Current::Applied(tuning) => tuning,
        }
    }
}

impl fmt::Debug for Tunings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tunings")
            .field("current", &*self.current())
            .finish_non_exhaustive()
    }
}

impl Tunings {
    pub(crate) fn new(_name: Arc<str>, base: Tuning) -> Arc<Self> {
        let tunings = Arc::new(Tunings {
            #[cfg(feature = "config")]
            name: _name,
            base,
            current: ArcSwapOption::empty(),
            tuned: AtomicBool::new(false),
            revision: Mutex::default(),
        });
        #[cfg(feature = "config")]
        registry::register(&tunings);
        tunings
    }

    /// The tuning new operations start with.
    #[inline]
    pub(crate) fn current(&self) -> Current<'_> {
        if !self.tuned.load(Ordering::Acquire) {
            return Current::Base(&self.base);
        }
        self.applied()
    }

    #[cold]
    fn applied(&self) -> Current<'_> {
        match self.current.load_full() {
            Some(tuning) => Current::Applied(tuning),
            // Back to the base meanwhile.
            None => Current::Base(&self.base),
        }
    }

    /// Holds the policy's tunings still while a configuration is checked against its
    /// defaults and applied: a tuning set by hand meanwhile waits, so what was checked is
    /// what applies.
    #[cfg(feature = "config")]
    pub(crate) fn revise(&self) -> Revising<'_> {
        Revising {
            tunings: self,
            revision: lock_std(&self.revision),
        }
    }

    /// Makes `tuning` the defaults, and current under the configuration's overrides (by
    /// hand). Refused, changing nothing, if it breaks a rule alone or under the overrides.
    pub(crate) fn set(&self, tuning: Tuning) -> Result<(), ConfigError> {
        tuning.check()?;
        let mut revision = lock_std(&self.revision);
        #[cfg(feature = "config")]
        let current = match &revision.overlay {
            Some(overlay) => {
                let overridden = overlay(&tuning);
                overridden.check().map_err(|rule| ConfigError::Overridden {
                    rule: Box::new(rule),
                })?;
                overridden
            }
            None => tuning.clone(),
        };
        #[cfg(not(feature = "config"))]
        let current = tuning.clone();
        // Under the revision, so changes apply in the order they are made.
        self.install(current);
        revision.defaults = Some(tuning);
        Ok(())
    }

    /// Makes `tuning`, checked, current for new operations: whether it changed (compared as
    /// operations run it, so a policy switched off again is no change).
    fn install(&self, tuning: Tuning) -> bool {
        let tuning = if tuning.enabled { tuning } else { tuning.off() };
        if *self.current() == tuning {
            return false;
        }
        if tuning == self.base {
            self.tuned.store(false, Ordering::Release);
            self.current.store(None);
        } else {
            // Stored before it is announced: a reader told `tuned` finds it.
            self.current.store(Some(Arc::new(tuning)));
            self.tuned.store(true, Ordering::Release);
        }
        true
    }
}

/// A policy's tunings held still by a configuration being applied (see [`Tunings::revise`]).
#[cfg(feature = "config")]
pub(crate) struct Revising<'t> {
    tunings: &'t Tunings,
    revision: std::sync::MutexGuard<'t, Revision>,
}

#[cfg(feature = "config")]
impl Revising<'_> {
    /// The policy's name.
    pub(crate) fn name(&self) -> &str {
        &self.tunings.name
    }

    /// What configuration overrides and returns to.
    pub(crate) fn defaults(&self) -> &Tuning {
        self.revision
            .defaults
            .as_ref()
            .unwrap_or(&self.tunings.base)
    }

    /// Makes `overlay` (none: the defaults as they are) the policy's configuration, and
    /// `tuning`, the defaults under it, checked by the caller, current for new operations.
    /// Whether the tuning changed.
    pub(crate) fn configure(&mut self, overlay: Option<Overlay>, tuning: Tuning) -> bool {
        self.revision.overlay = overlay;
        self.tunings.install(tuning)
    }
}

#[cfg(feature = "config")]
pub(crate) use registry::{built, registered};

/// Every live policy's tunings: what configuration applies to.
#[cfg(feature = "config")]
mod registry {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, OnceLock, Weak};

    use super::Tunings;
    use crate::sync::lock_std;

    static REGISTERED: OnceLock<Mutex<Vec<Weak<Tunings>>>> = OnceLock::new();
    /// Counts the policies built: a watched configuration refused for naming one not built
    /// yet is read again once another is.
    static BUILT: AtomicU64 = AtomicU64::new(0);

    pub(super) fn register(tunings: &Arc<Tunings>) {
        let mut all = lock_std(REGISTERED.get_or_init(Default::default));
        all.retain(|known| known.strong_count() > 0);
        all.push(Arc::downgrade(tunings));
        BUILT.fetch_add(1, Ordering::AcqRel);
    }

    /// Every live policy.
    pub(crate) fn registered() -> Vec<Arc<Tunings>> {
        REGISTERED.get().map_or_else(Vec::new, |all| {
            lock_std(all).iter().filter_map(Weak::upgrade).collect()
        })
    }

    /// How many policies have been built so far.
    pub(crate) fn built() -> u64 {
        BUILT.load(Ordering::Acquire)
    }
}
