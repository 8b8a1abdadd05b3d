//! [`Keys`]: what a keyed policy keeps per value of its key (a breaker, a bulkhead, rate
//! gates), bounded like keyed breakers.

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerConfig};
use crate::bulkhead::Bulkhead;
use crate::gate::RateGate;
use crate::key::Key;
use crate::registry::{Held, Member, Registry};

/// The breakers, bulkheads and rate gates of a keyed policy, one set per value of its key:
/// per model, per `(provider, model)`, per user. Each key gets what the policy declared per
/// key, fresh (a closed breaker, an empty bulkhead, a gate with its whole burst); what is not
/// per key is shared by all keys.
///
/// At most `max_keys` keys are kept (10 000 by default); past it, the keys whose state is the
/// least worth keeping are forgotten first: idle ones (breaker closed without failures, no
/// slot reserved in the gates), then open breakers past their cooldown, then closed breakers
/// with failures and gates with slots reserved, then open breakers still cooling; within each,
/// the least recently used. A key in use by a call is never forgotten. See
/// [`KeyedBreakers`](crate::KeyedBreakers), which follows the same rule.
///
/// ```
/// use resil_runtime::{Policy, Rejected};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::builder()
///     .keyed("user")
///     .bulkhead(1)
///     .bulkhead_per_key()
///     .build()
///     .unwrap();
/// let keys = policy.keys().unwrap();
/// assert_eq!(keys.get("ann").bulkhead().unwrap().limit(), 1);
/// assert_eq!(keys.len(), 1);
/// # }
/// ```
pub struct Keys {
    label: Arc<str>,
    registry: Registry<Scope>,
    /// What a new key gets: a breaker with this tuning, and fresh copies of these.
    breaker: Option<BreakerConfig>,
    bulkhead: Option<Bulkhead>,
    rate: Option<RateGate>,
    token_rate: Option<RateGate>,
    /// Where a new key's breaker is kept for every instance, and its name there's prefix
    /// (the policy's name), for a shared policy.
    #[cfg(feature = "shared")]
    shared: Option<(Arc<crate::seams::Sharing>, Arc<str>)>,
}

/// One key's share of a keyed policy.
pub(crate) struct Scope {
    pub(crate) breaker: Option<Arc<Breaker>>,
    /// In an `Arc` so a permit can outlive the lookup that found it.
    pub(crate) bulkhead: Option<Arc<Bulkhead>>,
    pub(crate) rate: Option<RateGate>,
    pub(crate) token_rate: Option<RateGate>,
}

/// What forgetting a key loses: its breaker's knowledge, or slots its gates reserved (a new
/// gate would hand them out again, over the limit).
impl Member for Scope {
    fn class(&self, now: Instant) -> u8 {
        let breaker = self
            .breaker
            .as_ref()
            .map_or(0, |breaker| breaker.class(now));
        let gates_busy = [&self.rate, &self.token_rate]
            .into_iter()
            .flatten()
            .any(|gate| !gate.is_idle(now));
        if gates_busy {
            breaker.max(2)
        } else {
            breaker
        }
    }
}

/// One key's breaker, bulkhead and gates, held: the policy does not forget the key meanwhile.
///
/// ```
/// use resil_runtime::Policy;
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .breaker_per_key("model", 3, Duration::from_secs(30))
///     .build()
///     .unwrap();
/// let key = policy.keys().unwrap().get("gpt-4o");
/// assert_eq!(key.breaker().unwrap().name(), "model=gpt-4o");
/// assert!(key.bulkhead().is_none());
/// ```
pub struct KeyScope(pub(crate) Held<Scope>);

impl KeyScope {
    /// The key's own breaker, if the breaker is per key.
    pub fn breaker(&self) -> Option<&Breaker> {
        self.0.breaker.as_deref()
    }

    /// The key's own bulkhead, if the bulkhead is per key.
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.0.bulkhead.as_deref()
    }

    /// The key's own rate gate, if the rate is per key.
    pub fn rate_gate(&self) -> Option<&RateGate> {
        self.0.rate.as_ref()
    }

    /// The key's own token gate, if the token rate is per key.
    pub fn token_gate(&self) -> Option<&RateGate> {
        self.0.token_rate.as_ref()
    }
}

impl fmt::Debug for KeyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyScope")
            .field("breaker", &self.breaker())
            .field("bulkhead", &self.bulkhead())
            .field("rate", &self.rate_gate())
            .field("token_rate", &self.token_gate())
            .finish()
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("label", &self.label)
            .field("breaker", &self.breaker)
            .field("bulkhead", &self.bulkhead)
            .field("rate", &self.rate)
            .field("token_rate", &self.token_rate)
            .field("max_keys", &self.max_keys())
            .field("len", &self.len())
            .finish()
    }
}

impl Keys {
    /// The most bytes one key of a keyed policy keeps, with everything per key (a breaker, an
    /// adaptive bulkhead and its queue, rate and token gates that learn, all serving their
    /// waiters by priority and in turn), whatever the key: a name is at most
    /// [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) (a longer key keeps its SHA-256 and its start),
    /// kept once by the registry's entry, which the gates and the bulkhead share; a breaker
    /// writes its own name, `label=key`, only once it is named (its first opening or
    /// rejection: a label longer than 256 bytes adds its excess). The heaviest key measures
    /// 2 KiB, 2.25 KiB once its breaker opened (2 KiB until the fifth wave, whose slots given
    /// back, next looks and waiters by priority cost each gate 120 bytes, and ordering at
    /// learning gates 150 bytes more). The default
    /// `max_keys` of 10 000 therefore bounds a keyed policy to about 25 MB. Checked by
    /// `tests/alloc.rs`. That is for a key whose calls came one at a time: a learning gate
    /// also keeps room for the slots of the calls that started through it at once (for the
    /// answers still to come), [`Keys::BYTES_PER_STARTED_SLOT`] each, up to 64, the room
    /// growing by doubling and kept: the simulator's keys, two calls at once with a hedge
    /// each, kept 2 704 bytes, and a key whose learning gate saw 33 calls at once keeps about
    /// 3.5 KiB more.
    pub const MAX_BYTES_PER_KEY: usize = 2560;

    /// What a learning gate keeps per slot of a call that started while others had (see
    /// [`Keys::MAX_BYTES_PER_KEY`]).
    ///
    /// ```
    /// use resil_runtime::Keys;
    ///
    /// // A key of two learning gates that saw 8 calls at once keeps at most this much more.
    /// assert_eq!(2 * 8 * Keys::BYTES_PER_STARTED_SLOT, 896);
    /// ```
    pub const BYTES_PER_STARTED_SLOT: usize = 56;

    /// [`Keys::MAX_BYTES_PER_KEY`] for a policy shared through Redis, whose keys also keep
    /// their places in the store (a Redis key per gate and per breaker, each holding the
    /// key's name): about 30 MB for 10 000 keys. Checked by `tests/alloc.rs`.
    #[cfg(feature = "shared")]
    pub const MAX_BYTES_PER_SHARED_KEY: usize = 3072;

    pub(crate) fn new(
        label: Arc<str>,
        max_keys: usize,
        breaker: Option<BreakerConfig>,
        bulkhead: Option<Bulkhead>,
        rate: Option<RateGate>,
        token_rate: Option<RateGate>,
    ) -> Self {
        Keys {
            label,
            registry: Registry::new(max_keys),
            breaker,
            bulkhead,
            rate,
            token_rate,
            #[cfg(feature = "shared")]
            shared: None,
        }
    }

    /// Keeps every key's breaker in Redis too, as `{policy}:{label}={key}` (the gates carry
    /// their own link).
    #[cfg(feature = "shared")]
    pub(crate) fn share(&mut self, sharing: &Arc<crate::seams::Sharing>, policy: &Arc<str>) {
        self.shared = Some((Arc::clone(sharing), Arc::clone(policy)));
    }

    /// What the keys are (`model`, `(provider, model)`): breakers are named `label=key`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The bound on keys kept.
    pub fn max_keys(&self) -> usize {
        self.registry.max_keys()
    }

    /// How many keys are kept now.
    pub fn len(&self) -> usize {
        self.registry.len()
    }

    /// True when no key is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The share of `key`, made fresh on first use.
    pub fn get<K: Key + ?Sized>(&self, key: &K) -> KeyScope {
        KeyScope(self.held(key))
    }

    pub(crate) fn held<K: Key + ?Sized>(&self, key: &K) -> Held<Scope> {
        self.registry.get(key, |key| Scope {
            breaker: self.breaker.map(|config| {
                let breaker = Arc::new(Breaker::keyed(&self.label, key, config));
                #[cfg(feature = "shared")]
                if let Some((sharing, policy)) = &self.shared {
                    // Written from its parts: the breaker writes its own name only when asked.
                    let name = format!("{policy}:{}={key}", self.label);
                    breaker.share(sharing, &name);
                }
                breaker
            }),
            bulkhead: self.bulkhead.as_ref().map(|b| Arc::new(b.fresh(key))),
            rate: (self.rate.as_ref()).map(|gate| gate.fresh(&self.label, key)),
            token_rate: (self.token_rate.as_ref()).map(|gate| gate.fresh(&self.label, key)),
        })
    }

    /// Whether each key has its own breaker.
    pub(crate) fn has_breakers(&self) -> bool {
        self.breaker.is_some()
    }

    /// Whether each key has its own rate or token gate.
    pub(crate) fn gated(&self) -> bool {
        self.rate.is_some() || self.token_rate.is_some()
    }

    /// Whether a gate of each key learns from the provider's answers.
    pub(crate) fn learns(&self) -> bool {
        [&self.rate, &self.token_rate]
            .into_iter()
            .flatten()
            .any(RateGate::learns)
    }

    /// The bulkhead every key gets a copy of, if the bulkhead is per key.
    pub(crate) fn bulkhead(&self) -> Option<&Bulkhead> {
        self.bulkhead.as_ref()
    }
}

/// The breakers list shows every key's breaker while the policy lives.
impl crate::breaker::KeptBreakers for Keys {
    fn each_breaker(&self, visit: &mut dyn FnMut(&Arc<Breaker>)) {
        self.registry.each(|scope| {
            if let Some(breaker) = &scope.breaker {
                visit(breaker);
            }
        });
    }
}
