//! The atomics and locks the policies use, swapped for loom's under `--cfg resil_loom` so the
//! model checker can explore every interleaving of the breaker and the bulkhead.

#[cfg(not(resil_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(resil_loom))]
pub(crate) use std::sync::Mutex;

#[cfg(resil_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(resil_loom)]
pub(crate) use loom::sync::Mutex;

/// Locks a mutex, ignoring poisoning: every critical section in this crate leaves the data
/// consistent before anything that can panic runs, so a poisoned lock holds valid state.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    #[cfg(not(resil_loom))]
    {
        lock_std(mutex)
    }
    #[cfg(resil_loom)]
    {
        mutex.lock().unwrap()
    }
}

/// [`lock`] for the std mutexes that loom does not model (registries, the seeded generator).
pub(crate) fn lock_std<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`lock_std`] for a std read-write lock, shared.
pub(crate) fn read_std<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`lock_std`] for a std read-write lock, exclusive.
pub(crate) fn write_std<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
