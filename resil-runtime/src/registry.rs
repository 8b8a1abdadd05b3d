//! Where keyed state lives: one entry per value of a key (a breaker per model, a bulkhead and
//! rate gates per user...), bounded, looked up without a lock.

use std::any::Any;
use std::cmp::Reverse;
use std::fmt::{self, Display};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::sync::lock_std;

/// A value that can key a breaker, a bulkhead or a rate gate: `str`, `String`, any
/// `Clone + Hash + Eq + Display` type (an enum of models, a tenant id...), or a [`KeyTuple`] of
/// those (per `(provider, model)`).
///
/// Lookups borrow the key; it is copied into the registry only the first time a value is
/// seen, so a `&str` lookup of a known key allocates nothing.
///
/// ```
/// use resil_runtime::{BreakerConfig, KeyTuple, KeyedBreakers};
///
/// let breakers = KeyedBreakers::new("(provider, model)", BreakerConfig::default());
/// let breaker = breakers.get(&KeyTuple(("openai", "gpt-4o")));
/// assert_eq!(breaker.key(), Some("(openai, gpt-4o)"));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a breaker, bulkhead or rate gate",
    note = "a key must be `str`, `String`, a tuple of keys, or a `Clone + Hash + Eq + Display + Send + Sync + 'static` type; a key expression is borrowed, so dereference a reference: `key = *req.model()`"
)]
pub trait Key: Hash {
    /// What the registry stores.
    type Owned: Send + Sync + 'static;
    /// Copies the key into the registry.
    fn to_owned_key(&self) -> Self::Owned;
    /// Whether the stored key is this one.
    fn is(&self, stored: &Self::Owned) -> bool;
    /// Writes the key as names and labels show it.
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl Key for str {
    type Owned = String;
    fn to_owned_key(&self) -> String {
        self.to_owned()
    }
    fn is(&self, stored: &String) -> bool {
        self == stored
    }
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl<T: Clone + Hash + Eq + Display + Send + Sync + 'static> Key for T {
    type Owned = T;
    fn to_owned_key(&self) -> T {
        self.clone()
    }
    fn is(&self, stored: &T) -> bool {
        self == stored
    }
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(self, f)
    }
}

/// Several keys as one: `KeyTuple((provider, model))` keys per pair, written
/// `(openai, gpt-4o)`. `#[resilient(key = (provider, model))]` builds it.
#[derive(Debug, Clone, Copy, Hash)]
pub struct KeyTuple<T>(pub T);

macro_rules! key_tuple {
    ($($name:ident $index:tt),+) => {
        impl<$($name: Key + ?Sized),+> Key for KeyTuple<($(&$name,)+)> {
            type Owned = ($($name::Owned,)+);
            fn to_owned_key(&self) -> Self::Owned {
                ($(self.0.$index.to_owned_key(),)+)
            }
            fn is(&self, stored: &Self::Owned) -> bool {
                $(self.0.$index.is(&stored.$index))&&+
            }
            fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("(")?;
                let mut first = true;
                $(
                    if !std::mem::take(&mut first) {
                        f.write_str(", ")?;
                    }
                    self.0.$index.write(f)?;
                )+
                f.write_str(")")
            }
        }
    };
}

key_tuple!(A 0, B 1);
key_tuple!(A 0, B 1, C 2);
key_tuple!(A 0, B 1, C 2, D 3);

/// A key displayed as [`Key::write`] writes it.
pub(crate) struct Shown<'k, K: ?Sized>(pub(crate) &'k K);

impl<K: Key + ?Sized> Display for Shown<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write(f)
    }
}

/// What a registry holds per key.
pub(crate) trait Member: Send + Sync + 'static {
    /// How much forgetting it would lose, 0 (nothing: it is as new) to 3 (what it knows still
    /// protects the provider); a sweep forgets the lowest classes first.
    fn class(&self, now: Instant) -> u8;
}

/// One value per key, at most `max_keys` of them, so a key set driven by request input (user
/// ids, model names from the request) cannot exhaust memory. When a new key arrives at the
/// bound, a sweep forgets a tenth of them, lowest [`Member::class`] first and, within a class,
/// the least recently used first. An entry in use by a call is never forgotten, so the bound
/// can be exceeded only by keys in flight at once.
///
/// Keys of any [`Key`] type share one registry; two values never share an entry (equal hashes
/// are told apart by comparing the stored key). A lookup takes no lock and, for a key seen
/// before, allocates nothing.
pub(crate) struct Registry<T> {
    max_keys: usize,
    hasher: foldhash::fast::RandomState,
    /// Key hash → the entries whose keys have that hash (almost always one). Lookups read it
    /// without a lock (papaya: lock-free reads, memory reclaimed by epochs).
    map: papaya::HashMap<u64, Bucket<T>, BuildHasherDefault<PreHashed>>,
    /// Sweeps so far: a lookup stamps it on the entry, which orders eviction by recency
    /// without reading a clock on the hot path.
    sweeps: AtomicU32,
    /// Serialises inserts and sweeps, which are rare; lookups never take it. Holds the count.
    writer: Mutex<usize>,
}

type Bucket<T> = Box<[Entry<T>]>;

/// An entry a sweep may forget: its class, how long unseen, its hash.
type Candidate<T> = (u8, Reverse<u32>, u64, Arc<Cell<T>>);

struct Entry<T> {
    key: Arc<dyn Any + Send + Sync>,
    cell: Arc<Cell<T>>,
}

impl<T> Clone for Entry<T> {
    fn clone(&self) -> Self {
        Entry {
            key: Arc::clone(&self.key),
            cell: Arc::clone(&self.cell),
        }
    }
}

struct Cell<T> {
    lease: Lease,
    value: T,
}

/// How many calls hold an entry, and whether the registry retired it. One word, so a lookup
/// and a sweep cannot both win: a sweep retires only an entry nobody holds, and a lookup that
/// finds it retired goes to the writer's path, which sees it gone.
#[derive(Debug, Default)]
struct Lease {
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

    /// One more hold on an entry already held, which therefore cannot be retired meanwhile.
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

/// An entry in use: the registry will not forget it while this is held.
pub(crate) struct Held<T>(Arc<Cell<T>>);

impl<T> Deref for Held<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0.value
    }
}

/// Another hold on the same entry: it is already held, so it cannot be retired meanwhile.
impl<T> Clone for Held<T> {
    fn clone(&self) -> Self {
        self.0.lease.hold_again();
        Held(Arc::clone(&self.0))
    }
}

impl<T> Drop for Held<T> {
    fn drop(&mut self) {
        self.0.lease.release();
    }
}

impl<T: fmt::Debug> fmt::Debug for Held<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.value.fmt(f)
    }
}

impl<T: Member> Registry<T> {
    /// At most `max_keys` entries (at least 1).
    pub(crate) fn new(max_keys: usize) -> Self {
        Registry {
            max_keys: max_keys.max(1),
            hasher: foldhash::fast::RandomState::default(),
            map: papaya::HashMap::with_hasher(BuildHasherDefault::default()),
            sweeps: AtomicU32::new(0),
            writer: Mutex::new(0),
        }
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    pub(crate) fn len(&self) -> usize {
        *self.size()
    }

    /// The entry for `key`, made by `make` on first use.
    pub(crate) fn get<K: Key + ?Sized>(&self, key: &K, make: impl FnOnce(&K) -> T) -> Held<T> {
        let hash = self.hasher.hash_one(key);
        if let Some(held) = self.find(hash, key) {
            return held;
        }
        self.insert(hash, key, make)
    }

    /// Every entry now (a snapshot: entries may come and go meanwhile).
    pub(crate) fn each(&self, mut visit: impl FnMut(&T)) {
        let map = self.map.pin();
        for (_, bucket) in map.iter() {
            for entry in bucket.iter() {
                visit(&entry.cell.value);
            }
        }
    }

    fn find<K: Key + ?Sized>(&self, hash: u64, key: &K) -> Option<Held<T>> {
        let guard = self.map.guard();
        let entry = self.map.get(&hash, &guard)?.iter().find(|entry| {
            entry
                .key
                .downcast_ref::<K::Owned>()
                .is_some_and(|stored| key.is(stored))
        })?;
        let lease = &entry.cell.lease;
        if !lease.take() {
            return None;
        }
        lease.seen(self.sweeps.load(Ordering::Relaxed));
        Some(Held(Arc::clone(&entry.cell)))
    }

    #[cold]
    fn insert<K: Key + ?Sized>(&self, hash: u64, key: &K, make: impl FnOnce(&K) -> T) -> Held<T> {
        let mut len = self.size();
        if let Some(held) = self.find(hash, key) {
            return held;
        }
        if *len >= self.max_keys {
            *len = self.sweep(*len);
        }
        let cell = Arc::new(Cell {
            lease: Lease::default(),
            value: make(key),
        });
        cell.lease.take();
        cell.lease.seen(self.sweeps.load(Ordering::Relaxed));
        let entry = Entry {
            key: Arc::new(key.to_owned_key()),
            cell: Arc::clone(&cell),
        };
        let map = self.map.pin();
        // Writers are serialised: replacing the bucket whole cannot lose another insert.
        let bucket: Bucket<T> = match map.get(&hash) {
            Some(bucket) => bucket.iter().cloned().chain([entry]).collect(),
            None => Box::new([entry]),
        };
        map.insert(hash, bucket);
        *len += 1;
        Held(cell)
    }

    /// Forgets a tenth of the entries (see the type's docs), never one in use; returns how
    /// many remain. Called with the writer lock held.
    fn sweep(&self, len: usize) -> usize {
        let now = Instant::now();
        let map = self.map.pin();
        let sweep = self.sweeps.load(Ordering::Relaxed);
        let mut candidates: Vec<Candidate<T>> = map
            .iter()
            .flat_map(|(hash, bucket)| bucket.iter().map(move |entry| (*hash, entry)))
            .filter(|(_, entry)| !entry.cell.lease.in_use())
            .map(|(hash, entry)| {
                let cell = &entry.cell;
                let age = sweep.wrapping_sub(cell.lease.last_seen.load(Ordering::Relaxed));
                (cell.value.class(now), Reverse(age), hash, Arc::clone(cell))
            })
            .collect();
        // Least useful class first; within it, the longest unseen first.
        candidates.sort_unstable_by_key(|(class, age, ..)| (*class, *age));
        let target = self.max_keys - (self.max_keys / 10).max(1);
        let mut evicted = Vec::new();
        for (.., hash, cell) in candidates {
            if len - evicted.len() <= target {
                break;
            }
            if cell.lease.retire() {
                evicted.push((hash, cell));
            }
        }
        for (hash, cell) in &evicted {
            let Some(bucket) = map.get(hash) else {
                continue;
            };
            let keep: Bucket<T> = bucket
                .iter()
                .filter(|entry| !Arc::ptr_eq(&entry.cell, cell))
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
