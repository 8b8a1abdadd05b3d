//! Every breaker the process's policies use: named ones (kept here), and those given to a
//! policy or kept per key (watched here while their policy lives), for [`breakers`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{Breaker, BreakerConfig, BreakerState};
use crate::sync::lock_std;
use crate::ConfigError;

static NAMED: OnceLock<Mutex<HashMap<String, Arc<Breaker>>>> = OnceLock::new();
static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());

/// Breakers a policy holds: gone from the snapshot when the policy is dropped.
enum Watched {
    Given(Weak<Breaker>),
    Keys(Weak<dyn KeptBreakers>),
}

/// Breakers kept by someone else, listed while they live: a keyed policy's, one per key.
pub(crate) trait KeptBreakers: Send + Sync {
    /// Visits each breaker kept now.
    fn each_breaker(&self, visit: &mut dyn FnMut(&Arc<Breaker>));
}

/// The process-wide breaker called `name`, created with `config` on first use.
///
/// A later use with another config gets the existing breaker and an error describing the
/// conflict, which the caller reports (the policy builder returns it; generated code emits an
/// event and a debug assertion).
pub(crate) fn named(name: &str, config: BreakerConfig) -> (Arc<Breaker>, Option<ConfigError>) {
    let mut map = lock_std(NAMED.get_or_init(Default::default));
    let breaker = map
        .entry(name.to_owned())
        .or_insert_with(|| Arc::new(Breaker::new(name, config)));
    let existing = breaker.config();
    let conflict = (existing != config).then(|| ConfigError::BreakerConflict {
        name: name.to_owned(),
        existing_threshold: existing.threshold(),
        existing_cooldown: existing.cooldown(),
        threshold: config.threshold(),
        cooldown: config.cooldown(),
    });
    (Arc::clone(breaker), conflict)
}

/// Lists a breaker given to a policy, unless it is named (listed already) or listed.
pub(crate) fn watch_breaker(breaker: &Arc<Breaker>) {
    let named = NAMED.get().is_some_and(|map| {
        lock_std(map)
            .get(breaker.name())
            .is_some_and(|known| Arc::ptr_eq(known, breaker))
    });
    if named {
        return;
    }
    let mut watched = lock_std(&WATCHED);
    let listed = watched.iter().any(|watched| match watched {
        Watched::Given(given) => given.as_ptr() == Arc::as_ptr(breaker),
        Watched::Keys(_) => false,
    });
    if !listed {
        forget_dropped(&mut watched);
        watched.push(Watched::Given(Arc::downgrade(breaker)));
    }
}

/// Lists a keyed policy's breakers.
pub(crate) fn watch_keys(keys: &Arc<impl KeptBreakers + 'static>) {
    let mut watched = lock_std(&WATCHED);
    forget_dropped(&mut watched);
    let keys: Arc<dyn KeptBreakers> = keys.clone();
    watched.push(Watched::Keys(Arc::downgrade(&keys)));
}

fn forget_dropped(watched: &mut Vec<Watched>) {
    watched.retain(|watched| match watched {
        Watched::Given(breaker) => breaker.strong_count() > 0,
        Watched::Keys(keys) => keys.strong_count() > 0,
    });
}

/// One breaker as it was when [`breakers`] looked, with a handle to act on it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BreakerStatus {
    /// The breaker's name: `label=key` for a breaker per key.
    pub name: Arc<str>,
    /// The key, for a breaker per key.
    pub key: Option<String>,
    /// Its state then.
    pub state: BreakerState,
    /// Consecutive transient failures counted then (closed).
    pub failures: u32,
    /// How long until it lets a probe through (open; `Duration::MAX` when forced open).
    pub retry_in: Duration,
    /// Whether an operator forced it open.
    pub forced_open: bool,
    /// The breaker itself: [`Breaker::reset`] and [`Breaker::force_open`] act on it.
    pub breaker: Arc<Breaker>,
}

impl BreakerStatus {
    fn of(breaker: Arc<Breaker>, now: Instant) -> Self {
        BreakerStatus {
            name: Arc::from(breaker.name()),
            key: breaker.key().map(str::to_owned),
            state: breaker.state(),
            failures: breaker.failures(),
            retry_in: breaker.retry_in(now),
            forced_open: breaker.is_forced_open(),
            breaker,
        }
    }
}

/// A snapshot of every breaker the process's policies use: named ones, ones given to a
/// policy, and each key's of a keyed policy (for `#[resilient]` functions, once they have
/// been called). Sorted by name; serve it on a health endpoint, or act on one:
///
/// ```
/// use resil_runtime::{breaker, BreakerState, Policy};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::builder()
///     .breaker_named("billing-doc", 5, Duration::from_secs(30))
///     .build()
///     .unwrap();
/// let status = breaker::breakers()
///     .into_iter()
///     .find(|status| &*status.name == "billing-doc")
///     .unwrap();
/// assert_eq!(status.state, BreakerState::Closed);
/// status.breaker.force_open(); // a maintenance window
/// assert_eq!(policy.breaker().unwrap().state(), BreakerState::Open);
/// # }
/// ```
pub fn breakers() -> Vec<BreakerStatus> {
    let now = Instant::now();
    let mut all: Vec<Arc<Breaker>> = NAMED
        .get()
        .map(|map| lock_std(map).values().cloned().collect())
        .unwrap_or_default();
    let watched: Vec<_> = lock_std(&WATCHED)
        .iter()
        .filter_map(|watched| match watched {
            Watched::Given(breaker) => breaker.upgrade().map(|b| (Some(b), None)),
            Watched::Keys(keys) => keys.upgrade().map(|k| (None, Some(k))),
        })
        .collect();
    for (given, keys) in watched {
        all.extend(given);
        if let Some(keys) = keys {
            keys.each_breaker(&mut |breaker| all.push(Arc::clone(breaker)));
        }
    }
    let mut statuses: Vec<_> = all
        .into_iter()
        .map(|breaker| BreakerStatus::of(breaker, now))
        .collect();
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    statuses
}

/// The breaker called `name` (`label=key` for one per key), if a policy uses it: for an
/// operator's reset or force-open by name.
pub fn find(name: &str) -> Option<Arc<Breaker>> {
    breakers()
        .into_iter()
        .find(|status| &*status.name == name)
        .map(|status| status.breaker)
}
