//! Where breakers live: named ones process-wide, keyed ones per call site and per value.

use std::any::Any;
use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::fmt::{self, Display};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;

use super::{Breaker, BreakerConfig, BreakerState};
use crate::sync::lock_std;
use crate::ConfigError;

/// The process-wide breaker called `name`, created with `config` on first use.
///
/// A later use with another config gets the existing breaker and an error describing the
/// conflict, which the caller reports (the policy builder returns it; generated code emits an
/// event and a debug assertion).
pub(crate) fn named(name: &str, config: BreakerConfig) -> (Arc<Breaker>, Option<ConfigError>) {
    static NAMED: OnceLock<std::sync::Mutex<HashMap<String, Arc<Breaker>>>> = OnceLock::new();
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

/// A value that can key a breaker: `str`, `String`, or any `Clone + Hash + Eq + Display`
/// type (an enum of models, a tenant id...).
///
/// Lookups borrow the key; it is copied into the registry only the first time a value is
/// seen, so a `&str` lookup of a known key allocates nothing.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a circuit breaker",
    note = "a `per_<arg>` breaker needs the argument to be `&str`, `String`, or a `Clone + Hash + Eq + Display + Send + Sync + 'static` type"
)]
pub trait BreakerKey: Hash + Eq + Display {
    /// What the registry stores.
    type Owned: Borrow<Self> + Send + Sync + 'static;
    /// Copies the key into the registry.
    fn to_owned_key(&self) -> Self::Owned;
}

impl BreakerKey for str {
    type Owned = String;
    fn to_owned_key(&self) -> String {
        self.to_owned()
    }
}

impl<T: Clone + Hash + Eq + Display + Send + Sync + 'static> BreakerKey for T {
    type Owned = T;
    fn to_owned_key(&self) -> T {
        self.clone()
    }
}

/// One breaker per value of a key: `breaker = "per_model"` gives each model its own, so a
/// dead model never blocks a healthy one.
///
/// Keys of any [`BreakerKey`] type share one registry; two values never share a breaker
/// (equal hashes are told apart by comparing the stored key). A lookup takes no lock and,
/// for a key seen before, allocates nothing.
///
/// **Memory bound.** The registry holds at most `max_keys` breakers (10 000 by default), so a
/// key set driven by request input (user ids, model names from the request) cannot exhaust
/// memory. When a new key arrives at the bound, a sweep forgets a tenth of them, in this order:
/// idle breakers (closed, no failure counted), then open ones whose cooldown has passed (what
/// they knew is stale), then closed ones with stale failures, then open ones still cooling;
/// within each, the least recently used first. A breaker in use by a call is never forgotten,
/// so the bound can be exceeded only by keys in flight at once.
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
    max_keys: usize,
    hasher: foldhash::fast::RandomState,
    /// Key hash → the breakers whose keys have that hash (almost always one). Lookups read
    /// it without a lock (papaya: lock-free reads, memory reclaimed by epochs).
    map: papaya::HashMap<u64, Bucket, BuildHasherDefault<PreHashed>>,
    /// Sweeps so far: a lookup stamps it on the breaker, which orders eviction by recency
    /// without reading a clock on the hot path.
    sweeps: AtomicU32,
    /// Serialises inserts and sweeps, which are rare; lookups never take it.
    writer: Mutex<usize>,
}

type Bucket = Box<[Entry]>;

#[derive(Clone)]
struct Entry {
    key: Arc<dyn Any + Send + Sync>,
    breaker: Arc<Breaker>,
}

/// How many calls hold a keyed breaker, and whether the registry retired it. One word, so a
/// lookup and a sweep cannot both win: a sweep retires only a breaker nobody holds, and a
/// lookup that finds it retired goes to the writer's path, which sees it gone.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    holders: AtomicU32,
    last_seen: AtomicU32,
}

const RETIRED: u32 = 1 << 31;

impl Lease {
    fn take(&self) -> bool {
        if self.holders.fetch_add(1, Ordering::AcqRel) & RETIRED == 0 {
            return true;
        }
        self.holders.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// One more hold on a breaker already held, which therefore cannot be retired meanwhile.
    fn hold_again(&self) {
        self.holders.fetch_add(1, Ordering::AcqRel);
    }

    fn release(&self) {
        self.holders.fetch_sub(1, Ordering::AcqRel);
    }

    fn retire(&self) -> bool {
        self.holders
            .compare_exchange(0, RETIRED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn in_use(&self) -> bool {
        self.holders.load(Ordering::Acquire) & !RETIRED != 0
    }

    fn seen(&self, sweep: u32) {
        if self.last_seen.load(Ordering::Relaxed) != sweep {
            self.last_seen.store(sweep, Ordering::Relaxed);
        }
    }
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
#[derive(Debug)]
pub struct KeyedBreaker {
    breaker: Arc<Breaker>,
}

impl Deref for KeyedBreaker {
    type Target = Breaker;

    fn deref(&self) -> &Breaker {
        &self.breaker
    }
}

/// Another hold on the same breaker: it is already held, so it cannot be retired meanwhile.
impl Clone for KeyedBreaker {
    fn clone(&self) -> Self {
        self.breaker.lease.hold_again();
        KeyedBreaker {
            breaker: Arc::clone(&self.breaker),
        }
    }
}

impl Drop for KeyedBreaker {
    fn drop(&mut self) {
        self.breaker.lease.release();
    }
}

impl fmt::Debug for KeyedBreakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreakers")
            .field("label", &self.label)
            .field("config", &self.config)
            .field("max_keys", &self.max_keys)
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
            max_keys: Self::DEFAULT_MAX_KEYS,
            hasher: foldhash::fast::RandomState::default(),
            map: papaya::HashMap::with_hasher(BuildHasherDefault::default()),
            sweeps: AtomicU32::new(0),
            writer: Mutex::new(0),
        }
    }

    /// Keeps at most `max_keys` breakers (at least 1; see the type's docs).
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// The bound on breakers kept.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The tuning every breaker here gets.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    /// How many breakers are held now.
    pub fn len(&self) -> usize {
        *self.size()
    }

    /// True when no breaker is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The breaker for `key`, created closed on first use.
    pub fn get<K: BreakerKey + ?Sized>(&self, key: &K) -> KeyedBreaker {
        let hash = self.hasher.hash_one(key);
        if let Some(breaker) = self.find(hash, key) {
            return breaker;
        }
        self.insert(hash, key)
    }

    fn find<K: BreakerKey + ?Sized>(&self, hash: u64, key: &K) -> Option<KeyedBreaker> {
        let guard = self.map.guard();
        let entry = self.map.get(&hash, &guard)?.iter().find(|entry| {
            entry
                .key
                .downcast_ref::<K::Owned>()
                .is_some_and(|stored| stored.borrow() == key)
        })?;
        let lease = &entry.breaker.lease;
        if !lease.take() {
            return None;
        }
        lease.seen(self.sweeps.load(Ordering::Relaxed));
        Some(KeyedBreaker {
            breaker: Arc::clone(&entry.breaker),
        })
    }

    #[cold]
    fn insert<K: BreakerKey + ?Sized>(&self, hash: u64, key: &K) -> KeyedBreaker {
        let mut len = self.size();
        if let Some(breaker) = self.find(hash, key) {
            return breaker;
        }
        if *len >= self.max_keys {
            *len = self.sweep(*len);
        }
        let breaker = Arc::new(Breaker::keyed(&self.label, key, self.config));
        breaker.lease.take();
        let entry = Entry {
            key: Arc::new(key.to_owned_key()),
            breaker: Arc::clone(&breaker),
        };
        let map = self.map.pin();
        // Writers are serialised: replacing the bucket whole cannot lose another insert.
        let bucket: Bucket = match map.get(&hash) {
            Some(bucket) => bucket.iter().cloned().chain([entry]).collect(),
            None => Box::new([entry]),
        };
        map.insert(hash, bucket);
        *len += 1;
        KeyedBreaker { breaker }
    }

    /// Forgets a tenth of the breakers (see the type's docs), never one in use; returns how
    /// many remain. Called with the writer lock held.
    fn sweep(&self, len: usize) -> usize {
        let now = Instant::now();
        let map = self.map.pin();
        let sweep = self.sweeps.load(Ordering::Relaxed);
        let mut candidates: Vec<(u8, Reverse<u32>, u64, Arc<Breaker>)> = map
            .iter()
            .flat_map(|(hash, bucket)| bucket.iter().map(move |entry| (*hash, entry)))
            .filter(|(_, entry)| !entry.breaker.lease.in_use())
            .map(|(hash, entry)| {
                let breaker = &entry.breaker;
                let class = match breaker.state() {
                    BreakerState::Closed if breaker.is_idle() => 0,
                    BreakerState::Open | BreakerState::HalfOpen
                        if breaker.retry_in(now).is_zero() =>
                    {
                        1
                    }
                    BreakerState::Closed => 2,
                    _ => 3,
                };
                let age = sweep.wrapping_sub(breaker.lease.last_seen.load(Ordering::Relaxed));
                (class, Reverse(age), hash, Arc::clone(breaker))
            })
            .collect();
        // Least useful class first; within it, the longest unseen first.
        candidates.sort_unstable_by_key(|(class, age, ..)| (*class, *age));
        let target = self.max_keys - (self.max_keys / 10).max(1);
        let mut evicted = Vec::new();
        for (.., hash, breaker) in candidates {
            if len - evicted.len() <= target {
                break;
            }
            if breaker.lease.retire() {
                evicted.push((hash, breaker));
            }
        }
        for (hash, breaker) in &evicted {
            let Some(bucket) = map.get(hash) else {
                continue;
            };
            let keep: Bucket = bucket
                .iter()
                .filter(|entry| !Arc::ptr_eq(&entry.breaker, breaker))
                .cloned()
                .collect();
            if keep.is_empty() {
                map.remove(hash);
            } else {
                map.insert(*hash, keep);
            }
        }
        self.sweeps.store(sweep.wrapping_add(1), Ordering::Relaxed);
        len - evicted.len()
    }

    fn size(&self) -> std::sync::MutexGuard<'_, usize> {
        lock_std(&self.writer)
    }
}
/// The map's keys are already hashes: pass them through.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }
    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}
