//! [`InMemory`]: a store kept in this process's memory, with the same decisions as Redis's
//! scripts (`scripts.rs`) on tokio's clock. Several policies and runtimes of one process share
//! their state through it; [`InMemory::instance`] simulates another instance of the service
//! (another process) sharing the same state, so that a test runs many instances on the paused
//! clock, exact and instant, without a server.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::seams::{
    whole_micros, Announcement, BreakerLink, BreakerNews, GateLink, GateNews, Probe, Reservation,
    Reserved, SharedStore, Slot, StoreFuture, Unavailable, WindowBatch, WindowSums,
};
use crate::sync::lock_std;
use hub::{release, Hub};

mod hub;
mod scripts;

/// A store shared by the policies of one process, kept in memory: breakers shared through it
/// open and close together, rate gates shared through it hold one limit. Clones are the same
/// store (the same instance); [`InMemory::instance`] makes another instance of the service
/// that shares the state, as a second process sharing a Redis would: what one instance does
/// reaches the others' breakers and gates.
///
/// No call waits on it (its answers are ready at once, unless [made slow](Self::set_slow)),
/// and it costs a lock per shared decision. It reads tokio's clock, so its schedules follow a
/// paused clock in tests.
///
/// ```
/// use resil_runtime::shared::InMemory;
/// use resil_runtime::{Breaker, BreakerConfig, BreakerState, Policy, Rejected, Transient};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// #[derive(Debug)]
/// enum Error {
///     Down,
///     Rejected(Rejected),
/// }
/// # impl Transient for Error {
/// #     fn is_transient(&self) -> bool { matches!(self, Error::Down) }
/// # }
/// # impl From<Rejected> for Error {
/// #     fn from(rejected: Rejected) -> Self { Error::Rejected(rejected) }
/// # }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let here = InMemory::new();
/// let there = here.instance();
/// let shared = |store: &InMemory| {
///     let breaker = Breaker::new("provider", BreakerConfig::new(1, Duration::from_secs(30))?);
///     Policy::builder().breaker(Arc::new(breaker)).shared_in(store).build()
/// };
/// let (a, b) = (shared(&here)?, shared(&there)?);
/// let _ = a.run(|| async { Err::<(), _>(Error::Down) }).await;
/// assert_eq!(b.breaker().unwrap().state(), BreakerState::Open, "opened elsewhere");
/// # Ok(()) }
/// ```
///
/// # Simulating an outage
///
/// [`set_available`](Self::set_available), [`set_slow`](Self::set_slow) and
/// [`delay_holds`](Self::delay_holds) act on every instance of the state: tests of code that
/// uses shared policies see what an outage of their store does (the policies decide locally,
/// or refuse with `shared_fail = "closed"`), and what its return does.
/// [`set_reachable`](Self::set_reachable) cuts one instance off, as a partition does.
#[derive(Clone)]
pub struct InMemory {
    hub: Arc<Hub>,
    instance: usize,
    /// Not cut off (see [`InMemory::set_reachable`]): read on every call, so an atomic.
    reachable: Arc<AtomicBool>,
}

impl fmt::Debug for InMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemory")
            .field("instance", &self.instance)
            .field("available", &self.is_available())
            .finish()
    }
}

impl Default for InMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemory {
    /// A new shared state, and this process's instance of it. It reads tokio's clock from
    /// now on: make it inside the runtime whose clock the policies read (a paused one, in a
    /// test).
    pub fn new() -> Self {
        let hub = Arc::new(Hub {
            origin: Instant::now(),
            available: AtomicBool::new(true),
            slow: AtomicBool::new(false),
            state: Mutex::default(),
        });
        Hub::instance(&hub)
    }

    /// Another instance of the service sharing this state, as another process would: it
    /// hears what the others do, and they hear what it does.
    ///
    /// ```
    /// use resil_runtime::shared::InMemory;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let here = InMemory::new();
    /// let there = here.instance();
    /// assert!(there.is_available());
    /// # }
    /// ```
    pub fn instance(&self) -> InMemory {
        Hub::instance(&self.hub)
    }

    /// Whether this instance reaches the store (true unless
    /// [`set_available`](Self::set_available) or [`set_reachable`](Self::set_reachable) said
    /// otherwise).
    pub fn is_available(&self) -> bool {
        self.reaches()
    }

    /// The store stops answering (`false`): every instance's policies decide locally. Or it
    /// answers again (`true`): as Redis's re-sync does, what was not heard is told, every
    /// breaker learns of the openings in force, and the slots the local gates promised
    /// meanwhile are revoked (taken again from the store).
    ///
    /// ```
    /// use resil_runtime::shared::InMemory;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = InMemory::new();
    /// store.set_available(false);
    /// assert!(!store.instance().is_available(), "the state is down for every instance");
    /// store.set_available(true);
    /// # }
    /// ```
    pub fn set_available(&self, available: bool) {
        self.hub.available.store(available, Ordering::Release);
        if available {
            self.hub.resync(None);
        }
    }

    /// This instance is cut off from the store (`false`), as a network partition cuts one
    /// process off from its Redis: its policies decide locally and hear nothing of the other
    /// instances, which go on sharing without it. Or it reaches the store again (`true`): as
    /// Redis's re-sync does for a reconnected client, what it did not publish is told, its
    /// breakers learn of the openings in force, and its gates revoke what they promised alone.
    ///
    /// ```
    /// use resil_runtime::shared::InMemory;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let here = InMemory::new();
    /// let there = here.instance();
    /// there.set_reachable(false);
    /// assert!(here.is_available() && !there.is_available(), "only `there` is cut off");
    /// there.set_reachable(true);
    /// # }
    /// ```
    pub fn set_reachable(&self, reachable: bool) {
        let changed = {
            let mut state = lock_std(&self.hub.state);
            let cut = state.cut.contains(&self.instance);
            match (reachable, cut) {
                (false, false) => state.cut.push(self.instance),
                (true, true) => {
                    state.cut.retain(|&instance| instance != self.instance);
                    // The re-sync below returns the store to its gates.
                    state.lost.retain(|&instance| instance != self.instance);
                }
                _ => {}
            }
            self.reachable.store(reachable, Ordering::Release);
            reachable == cut
        };
        if changed && reachable && self.hub.up() {
            self.hub.resync(Some(self.instance));
        }
    }

    /// Whether this instance reaches the store: it is up, and this instance is not cut off.
    fn reaches(&self) -> bool {
        self.hub.up() && self.reachable.load(Ordering::Acquire)
    }

    /// The store answers too late from now on (`true`), as a Redis in `DEBUG SLEEP` does, or
    /// in time again: a reservation or a probe's lock gets no answer, and resil gives up on it
    /// after the policy's `shared_timeout`.
    ///
    /// ```
    /// use resil_runtime::shared::InMemory;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = InMemory::new();
    /// store.set_slow(true);
    /// # }
    /// ```
    pub fn set_slow(&self, slow: bool) {
        self.hub.slow.store(slow, Ordering::Release);
        if !slow {
            self.hub.answers_again();
        }
    }

    /// Throttles' holds arrive late from now on, as Redis's may (they are sent in the
    /// background): the store decides without them until
    /// [`deliver_holds`](Self::deliver_holds).
    ///
    /// ```
    /// use resil_runtime::shared::InMemory;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = InMemory::new();
    /// store.delay_holds();
    /// store.deliver_holds();
    /// # }
    /// ```
    pub fn delay_holds(&self) {
        lock_std(&self.hub.state).late.get_or_insert_with(Vec::new);
    }

    /// The holds on their way arrive, and later ones arrive at once again.
    pub fn deliver_holds(&self) {
        let late = lock_std(&self.hub.state).late.take().unwrap_or_default();
        for (instance, key, credit, interval, wait) in late {
            self.hub.hold(instance, &key, credit, interval, wait);
        }
    }
}

/// The in-memory store, as the store of shared policies: what Redis's scripts decide, decided
/// under one lock.
impl SharedStore for InMemory {
    fn usable(&self) -> bool {
        self.reaches()
    }

    fn listen_breaker(&self, breaker: BreakerNews) {
        let now = self.hub.now();
        let open = {
            let mut state = lock_std(&self.hub.state);
            state.breakers.add(self.instance, breaker.clone());
            let until = state.open.get(breaker.name()).copied();
            until.map_or(0, |until| until.saturating_sub(now))
        };
        // An opening in force reaches a breaker listed after it, as Redis's re-sync does.
        if open > 0 && self.reaches() {
            breaker.opened_elsewhere(Duration::from_micros(open));
        }
    }

    fn listen_gate(&self, gate: GateNews) {
        let mut state = lock_std(&self.hub.state);
        state.links.add(self.instance, gate);
    }

    fn announce(&self, announcement: Announcement) {
        if self.reaches() {
            self.hub.record(self.instance, announcement);
        }
    }

    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
        if !self.reaches() {
            return Box::pin(std::future::ready(Err(Unavailable)));
        }
        if self.hub.slow() {
            return Box::pin(std::future::pending());
        }
        let now = self.hub.now();
        let mut state = lock_std(&self.hub.state);
        let id = breaker.name();
        let open = state
            .open
            .get(id)
            .map_or(0, |until| until.saturating_sub(now));
        let held = state
            .probe
            .get(id)
            .map_or(0, |(_, until)| until.saturating_sub(now));
        let answer = match (open, held) {
            (0, 0) => {
                let until = now.saturating_add(whole_micros(limit));
                state.sweep(now);
                state.probe.insert(Arc::from(id), (self.instance, until));
                Probe::Granted
            }
            (0, held) => Probe::Elsewhere(Duration::from_micros(held)),
            (open, _) => Probe::Elsewhere(Duration::from_micros(open)),
        };
        Box::pin(std::future::ready(Ok(answer)))
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        if self.reaches() {
            let mut state = lock_std(&self.hub.state);
            release(&mut state.probe, breaker.name(), self.instance);
        }
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        if !self.reaches() {
            return Box::pin(std::future::ready(Err(Unavailable)));
        }
        if self.hub.slow() {
            return Box::pin(std::future::pending());
        }
        Box::pin(std::future::ready(Ok(self.reserve_now(reservation))))
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        if !self.reaches() {
            return;
        }
        let now = self.hub.now();
        let mut state = lock_std(&self.hub.state);
        if let Some(kept) = state.gates.get_mut(gate.name()) {
            if kept.epoch == slot.epoch() {
                kept.give_back(slot.from(), slot.end(), now);
            }
        }
    }

    fn add_to_window<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        batch: WindowBatch,
    ) -> Option<StoreFuture<'a, Result<WindowSums, Unavailable>>> {
        let answer = match self.reaches() {
            true => Ok(self.hub.add_to_window(breaker, batch)),
            false => Err(Unavailable),
        };
        Some(Box::pin(std::future::ready(answer)))
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        if self.reaches() {
            let (credit, interval) = (whole_micros(gate.credit()), whole_micros(gate.interval()));
            self.hub
                .hold(self.instance, &gate.key, credit, interval, wait);
            // This instance's other gates of the name hear at once, as Redis's do.
            let beside = lock_std(&self.hub.state).links.beside(self.instance, gate);
            for news in beside {
                news.throttled_elsewhere();
            }
        }
    }

    /// resil gave up waiting for an answer: this instance decides alone until the store
    /// answers in time again ([`InMemory::set_slow`]).
    fn timed_out(&self) {
        let mut state = lock_std(&self.hub.state);
        if !state.lost.contains(&self.instance) {
            state.lost.push(self.instance);
        }
    }
}

mod state;
#[cfg(test)]
mod tests;
