//! Where keyed state lives: one entry per value of a key (a breaker per model, a bulkhead and
//! rate gates per user...), bounded, looked up without a lock.

use std::cmp::Reverse;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use sha2::{Digest as _, Sha256};

use crate::key::{is_plain, Key, KeyName};
use crate::sync::lock_std;

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
/// Entries are found by the key's value: its [`KeyName`], which tells apart any two distinct
/// strings and integers and bounds what they cost, and the digest of its parts of other types
/// ([`Key::values`]), so two unequal values that print alike never share an entry. A lookup
/// takes no lock and, for a key seen before, allocates nothing.
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
    name: Arc<str>,
    cell: Arc<Cell<T>>,
}

impl<T> Clone for Entry<T> {
    fn clone(&self) -> Self {
        Entry {
            name: Arc::clone(&self.name),
            cell: Arc::clone(&self.cell),
        }
    }
}

struct Cell<T> {
    lease: Lease,
    value: T,
    /// The SHA-256 of the key's parts that its name does not tell apart (see
    /// [`Key::values`]), if it has any.
    parts: Option<Parts>,
    /// Its name is a plain text, with no other part: the name of that string and of nothing
    /// else, so a string key is found by its text alone.
    plain: bool,
}

/// What a key's parts other than text and integers write through their `Hash` (each with its
/// type), digested: bounded whatever they hold, and not collidable by a hostile value.
type Parts = [u8; 32];

/// The parts of `key` that its name does not tell apart, digested; `None` when it has none.
fn parts<K: Key + ?Sized>(key: &K) -> Option<Parts> {
    let mut digest: Option<Digest> = None;
    key.values(&mut |part| {
        part.hash_into(digest.get_or_insert_with(|| Digest(Sha256::new())));
    });
    digest.map(|digest| digest.0.finalize().into())
}

/// A `Hasher` that feeds a SHA-256.
struct Digest(Sha256);

impl Hasher for Digest {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
    }
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

    /// The entry for `key`, made by `make` from the key's name on first use.
    #[inline]
    pub(crate) fn get<K: Key + ?Sized>(
        &self,
        key: &K,
        make: impl FnOnce(&Arc<str>) -> T,
    ) -> Held<T> {
        // A string is looked for by its text among the entries named by their own text: an
        // entry whose name is `text` and a plain text can only be this string's, so a key
        // seen before costs a hash and a comparison, and no look at its characters.
        let Some(text) = key.text() else {
            return self.get_written(key, make);
        };
        let hash = self.hasher.hash_one(text);
        let found = self.find(hash, |entry| entry.cell.plain && *entry.name == *text);
        match found {
            Some(held) => held,
            None if is_plain(text) => self.insert(hash, text, None, make),
            None => self.get_written(key, make),
        }
    }

    /// [`Registry::get`] for a key whose name is written, and whose parts other than strings
    /// and integers are told apart by their digest.
    #[inline(never)]
    fn get_written<K: Key + ?Sized>(&self, key: &K, make: impl FnOnce(&Arc<str>) -> T) -> Held<T> {
        let name = KeyName::of(key);
        let name = name.as_str();
        let parts = parts(key);
        let mut hash = self.hasher.hash_one(name);
        if let Some(parts) = &parts {
            hash ^= self.hasher.hash_one(parts);
        }
        let found = self.find(hash, |entry| {
            *entry.name == *name && entry.cell.parts == parts
        });
        match found {
            Some(held) => held,
            None => self.insert(hash, name, parts, make),
        }
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

    #[inline]
    fn find(&self, hash: u64, is_key: impl Fn(&Entry<T>) -> bool) -> Option<Held<T>> {
        let guard = self.map.guard();
        let entry = (self.map.get(&hash, &guard)?.iter()).find(|entry| is_key(entry))?;
        let lease = &entry.cell.lease;
        if !lease.take() {
            return None;
        }
        lease.seen(self.sweeps.load(Ordering::Relaxed));
        Some(Held(Arc::clone(&entry.cell)))
    }

    #[cold]
    fn insert(
        &self,
        hash: u64,
        name: &str,
        parts: Option<Parts>,
        make: impl FnOnce(&Arc<str>) -> T,
    ) -> Held<T> {
        let mut len = self.size();
        let found = self.find(hash, |entry| {
            *entry.name == *name && entry.cell.parts == parts
        });
        if let Some(held) = found {
            return held;
        }
        if *len >= self.max_keys {
            *len = self.sweep(*len);
        }
        // The key's one copy of its name: what it makes keeps clones of it.
        let name: Arc<str> = Arc::from(name);
        let cell = Arc::new(Cell {
            lease: Lease::default(),
            value: make(&name),
            plain: parts.is_none() && is_plain(&name),
            parts,
        });
        cell.lease.take();
        cell.lease.seen(self.sweeps.load(Ordering::Relaxed));
        let entry = Entry {
            name,
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
        // The forgotten entries' state is freed now, not after the `max(32, cpus)`
        // retirements papaya batches by default (that many keys' bytes past the bound) when
        // no other thread is looking a key up; else with a later sweep's flush. A flush costs
        // a process-wide barrier: only when something was forgotten.
        drop(map);
        if !evicted.is_empty() {
            papaya::Guard::flush(&self.map.guard());
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
