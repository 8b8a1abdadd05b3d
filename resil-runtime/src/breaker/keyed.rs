//! [`KeyedBreakers`]: one breaker per value of a key.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Breaker, BreakerConfig, BreakerState};
use crate::key::Key;
use crate::registry::{Held, Member, Registry};

/// What forgetting a breaker loses: nothing if it is idle; stale knowledge if it is open past
/// its cooldown or closed with failures; protection if it is open and still cooling.
impl Member for Breaker {
    fn class(&self, now: Instant) -> u8 {
        match self.state() {
            BreakerState::Closed if self.is_idle() => 0,
            BreakerState::Open | BreakerState::HalfOpen if self.retry_in(now).is_zero() => 1,
            BreakerState::Closed => 2,
            _ => 3,
        }
    }
}

/// One breaker per value of a key: `breaker = "per_model"` gives each model its own, so a
/// dead model never blocks a healthy one.
///
/// **Memory bound.** The registry holds at most `max_keys` breakers (10 000 by default), so a
/// key set driven by request input (user ids, model names from the request) cannot exhaust
/// memory. When a new key arrives at the bound, a sweep forgets a tenth of them, in this order:
/// idle breakers (closed, no failure counted), then open ones whose cooldown has passed (what
/// they knew is stale), then closed ones with stale failures, then open ones still cooling;
/// within each, the least recently used first. A breaker in use by a call is never forgotten,
/// so the bound can be exceeded only by keys in flight at once. Keys of any [`Key`] type
/// share one registry; a lookup takes no lock and, for a key seen before, allocates nothing.
///
/// ```
/// use resil_runtime::{BreakerConfig, BreakerState, KeyedBreakers, Verdict};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let breakers = KeyedBreakers::new("model", BreakerConfig::new(1, std::time::Duration::from_secs(30))?)
///     .with_max_keys(1_000);
/// breakers.get("gpt-4o").admit().await?.record(Verdict::Failure);
/// assert_eq!(breakers.get("gpt-4o").state(), BreakerState::Open);
/// assert_eq!(breakers.get("claude").state(), BreakerState::Closed);
/// assert_eq!(breakers.get("gpt-4o").name(), "model=gpt-4o");
/// # Ok(()) }
/// ```
pub struct KeyedBreakers {
    label: Arc<str>,
    config: BreakerConfig,
    registry: Registry<Breaker>,
}

/// A keyed breaker in use: the registry will not forget it while this is held.
///
/// ```
/// use resil_runtime::{BreakerConfig, KeyedBreakers};
///
/// let breakers = KeyedBreakers::new("model", BreakerConfig::default());
/// let breaker = breakers.get("gpt-4o");
/// assert_eq!(breaker.name(), "model=gpt-4o");
/// ```
#[derive(Debug, Clone)]
pub struct KeyedBreaker(Held<Breaker>);

impl Deref for KeyedBreaker {
    type Target = Breaker;

    fn deref(&self) -> &Breaker {
        &self.0
    }
}

impl fmt::Debug for KeyedBreakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreakers")
            .field("label", &self.label)
            .field("config", &self.config)
            .field("max_keys", &self.max_keys())
            .field("len", &self.len())
            .finish()
    }
}

impl KeyedBreakers {
    /// Default bound on the breakers kept (see the type's docs).
    pub const DEFAULT_MAX_KEYS: usize = resil_spec::defaults::MAX_KEYS;

    /// One breaker per key; each is named `label=key`.
    pub fn new(label: impl Into<Arc<str>>, config: BreakerConfig) -> Self {
        KeyedBreakers {
            label: label.into(),
            config,
            registry: Registry::new(Self::DEFAULT_MAX_KEYS),
        }
    }

    /// Keeps at most `max_keys` breakers (at least 1; see the type's docs).
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.registry = Registry::new(max_keys);
        self
    }

    /// The bound on breakers kept.
    pub fn max_keys(&self) -> usize {
        self.registry.max_keys()
    }

    /// The tuning every breaker here gets.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    /// How many breakers are held now.
    pub fn len(&self) -> usize {
        self.registry.len()
    }

    /// True when no breaker is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The breaker for `key`, created closed on first use.
    pub fn get<K: Key + ?Sized>(&self, key: &K) -> KeyedBreaker {
        KeyedBreaker(
            self.registry
                .get(key, |key| Breaker::keyed(&self.label, key, self.config)),
        )
    }
}
