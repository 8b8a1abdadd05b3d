//! Where breakers live: named ones process-wide, keyed ones per call site and per value.

use std::any::Any;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt::{self, Display};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::Mutex;
use std::sync::{Arc, OnceLock};

use super::{Breaker, BreakerConfig};
use crate::sync::Ordering;
use crate::ConfigError;

/// The process-wide breaker called `name`, created with `config` on first use.
///
/// A later use with another config gets the existing breaker and an error describing the
/// conflict, which the caller reports (the policy builder returns it; generated code emits an
/// event and a debug assertion).
pub(crate) fn named(name: &str, config: BreakerConfig) -> (Arc<Breaker>, Option<ConfigError>) {
    static NAMED: OnceLock<std::sync::Mutex<HashMap<String, Arc<Breaker>>>> = OnceLock::new();
    let mut map = NAMED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
/// **Memory bound.** When a new key arrives and the registry holds its limit (at first
/// `max_idle`, 10 000 by default), a sweep forgets the breakers that are closed with no
/// failure counted, not in use by a call, and not looked up since the previous sweep
/// (second-chance eviction: no clock is read on the hot path). Open, half-open and failing
/// breakers are never forgotten, since they carry what the provider told us. The next limit
/// is `max(max_idle, 2 × survivors)`, so the registry holds at most that many breakers (each
/// about 200 bytes plus its key) and sweeps in amortised constant time per new key.
///
/// ```
/// use resil_runtime::{BreakerConfig, BreakerState, KeyedBreakers, Verdict};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let breakers = KeyedBreakers::new("model", BreakerConfig::new(1, std::time::Duration::from_secs(30))?);
/// breakers.get("gpt-4o").admit().await?.record(Verdict::Failure);
/// assert_eq!(breakers.get("gpt-4o").state(), BreakerState::Open);
/// assert_eq!(breakers.get("claude").state(), BreakerState::Closed);
/// assert_eq!(breakers.get("gpt-4o").name(), "model=gpt-4o");
/// # Ok(()) }
/// ```
pub struct KeyedBreakers {
    label: Arc<str>,
    config: BreakerConfig,
    max_idle: usize,
    hasher: foldhash::fast::RandomState,
    /// Key hash → the breakers whose keys have that hash (almost always one). Lookups read
    /// it without a lock (papaya: lock-free reads, memory reclaimed by epochs).
    map: papaya::HashMap<u64, Bucket, BuildHasherDefault<PreHashed>>,
    /// Serialises inserts and sweeps, which are rare; lookups never take it.
    writer: Mutex<Size>,
}

type Bucket = Box<[Entry]>;

#[derive(Clone)]
struct Entry {
    key: Arc<dyn Any + Send + Sync>,
    breaker: Arc<Breaker>,
}

#[derive(Debug)]
struct Size {
    len: usize,
    limit: usize,
}

impl fmt::Debug for KeyedBreakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreakers")
            .field("label", &self.label)
            .field("config", &self.config)
            .field("max_idle", &self.max_idle)
            .field("len", &self.len())
            .finish()
    }
}

impl KeyedBreakers {
    /// Default bound on idle breakers kept (see the type's docs).
    pub const DEFAULT_MAX_IDLE: usize = 10_000;

    /// One breaker per key; each is named `label=key`.
    pub fn new(label: impl Into<Arc<str>>, config: BreakerConfig) -> Self {
        KeyedBreakers {
            label: label.into(),
            config,
            max_idle: Self::DEFAULT_MAX_IDLE,
            hasher: foldhash::fast::RandomState::default(),
            map: papaya::HashMap::with_hasher(BuildHasherDefault::default()),
            writer: Mutex::new(Size {
                len: 0,
                limit: Self::DEFAULT_MAX_IDLE,
            }),
        }
    }

    /// Keeps at most `max_idle` idle breakers (at least 1).
    pub fn with_max_idle(mut self, max_idle: usize) -> Self {
        self.max_idle = max_idle.max(1);
        self.size().limit = self.max_idle;
        self
    }

    /// The tuning every breaker here gets.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    /// How many breakers are held now.
    pub fn len(&self) -> usize {
        self.size().len
    }

    /// True when no breaker is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The breaker for `key`, created closed on first use.
    pub fn get<K: BreakerKey + ?Sized>(&self, key: &K) -> Arc<Breaker> {
        let hash = self.hasher.hash_one(key);
        if let Some(breaker) = self.find(hash, key) {
            return breaker;
        }
        self.insert(hash, key)
    }

    fn find<K: BreakerKey + ?Sized>(&self, hash: u64, key: &K) -> Option<Arc<Breaker>> {
        let guard = self.map.guard();
        let entry = self.map.get(&hash, &guard)?.iter().find(|entry| {
            entry
                .key
                .downcast_ref::<K::Owned>()
                .is_some_and(|stored| stored.borrow() == key)
        })?;
        if !entry.breaker.recently_used.load(Ordering::Relaxed) {
            entry.breaker.recently_used.store(true, Ordering::Relaxed);
        }
        Some(Arc::clone(&entry.breaker))
    }

    #[cold]
    fn insert<K: BreakerKey + ?Sized>(&self, hash: u64, key: &K) -> Arc<Breaker> {
        let mut size = self.size();
        if let Some(breaker) = self.find(hash, key) {
            return breaker;
        }
        if size.len >= size.limit {
            size.len = self.sweep();
            size.limit = self.max_idle.max(size.len.saturating_mul(2));
        }
        let breaker = Arc::new(Breaker::new(format!("{}={}", self.label, key), self.config));
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
        size.len += 1;
        breaker
    }

    /// Forgets idle breakers that nobody looked up since the last sweep and nobody holds;
    /// returns how many remain. Called with the writer lock held.
    fn sweep(&self) -> usize {
        let map = self.map.pin();
        let mut kept = 0;
        let mut changed = Vec::new();
        for (hash, bucket) in map.iter() {
            let keep: Bucket = bucket
                .iter()
                .filter(|entry| {
                    let keep = !entry.breaker.is_idle()
                        || entry.breaker.recently_used.load(Ordering::Relaxed)
                        || Arc::strong_count(&entry.breaker) > 1;
                    entry.breaker.recently_used.store(false, Ordering::Relaxed);
                    keep
                })
                .cloned()
                .collect();
            kept += keep.len();
            if keep.len() != bucket.len() {
                changed.push((*hash, keep));
            }
        }
        for (hash, bucket) in changed {
            if bucket.is_empty() {
                map.remove(&hash);
            } else {
                map.insert(hash, bucket);
            }
        }
        kept
    }

    fn size(&self) -> std::sync::MutexGuard<'_, Size> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
