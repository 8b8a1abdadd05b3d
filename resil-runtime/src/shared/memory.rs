//! The seam's second implementation: a store kept in memory, where each [`Memory`] is one
//! instance of a service and the [`Hub`] they share plays Redis, with the same decisions as
//! the scripts (`scripts.rs`) on tokio's clock. It tests the execution's use of the seam
//! without a server, on the paused clock: exact and instant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::heard;
use crate::breaker::{Breaker, BreakerState};
use crate::seams::{
    whole_micros, BreakerLink, GateLink, Granted, Pending, ProbeAnswer, RemoteSlot, SharedSlots,
    SharedStore, StoreFuture, WindowCounts, SEEN_FOR,
};
use crate::sync::lock_std;
use crate::Rejected;

/// What every instance sees: the breakers' openings and probe locks, the gates' schedules,
/// and who listens for what.
pub(crate) struct Hub {
    origin: Instant,
    available: AtomicBool,
    /// Whether its answers come too late (see [`Hub::set_slow`]).
    slow: AtomicBool,
    state: Mutex<State>,
}

/// A throttle's hold on its way to the store: who sent it, for which gate, how long.
type InFlight = (usize, Arc<str>, u64, u64, Duration);

#[derive(Default)]
struct State {
    /// Until when each breaker is open (µs since the origin).
    open: HashMap<Arc<str>, u64>,
    /// Each breaker's probe lock: the instance holding it, until when.
    probe: HashMap<Arc<str>, (usize, u64)>,
    gates: HashMap<Arc<str>, Gate>,
    breakers: Vec<(usize, Arc<str>, Weak<Breaker>)>,
    links: Vec<(usize, Weak<GateLink>)>,
    instances: usize,
    /// Each shared breaker's time window: its buckets' calls and bad calls, by bucket number.
    windows: HashMap<Arc<str>, HashMap<u64, WindowCounts>>,
    /// Batches added to windows so far: the round trips a Redis store would make.
    batches: u64,
    /// The instances that use each gate, with their last heartbeat (µs since the origin).
    seen: HashMap<Arc<str>, HashMap<usize, u64>>,
    /// While holds are late (as Redis's are: sent in the background), those not arrived yet.
    late: Option<Vec<InFlight>>,
}

/// A gate's hash in Redis.
#[derive(Default, Clone, Copy)]
struct Gate {
    tat: Option<u64>,
    epoch: u64,
    held: u64,
}

impl Hub {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Hub {
            origin: Instant::now(),
            available: AtomicBool::new(true),
            slow: AtomicBool::new(false),
            state: Mutex::default(),
        })
    }

    /// A new instance of the service, with its own store.
    pub(crate) fn instance(self: &Arc<Self>) -> Arc<Memory> {
        let mut state = lock_std(&self.state);
        state.instances += 1;
        Arc::new(Memory {
            hub: Arc::clone(self),
            instance: state.instances,
        })
    }

    /// The store stops answering, or answers again: then, as Redis's re-sync does, what was
    /// not heard is told, every breaker learns of the openings in force, and the slots the
    /// local gates promised meanwhile are revoked (taken again from the store).
    pub(crate) fn set_available(&self, available: bool) {
        self.available.store(available, Ordering::Release);
        if !available {
            return;
        }
        let breakers: Vec<_> = lock_std(&self.state)
            .breakers
            .iter()
            .filter_map(|(instance, _, breaker)| breaker.upgrade().map(|b| (*instance, b)))
            .collect();
        for (instance, breaker) in breakers {
            let Some(link) = breaker.shared_link() else {
                continue;
            };
            let (untold, pending) = link.pending.untold(breaker.state());
            match untold {
                Some(BreakerState::Open) => self.opened(instance, link, &breaker),
                Some(_) => self.closed(instance, link),
                None => {
                    let open = lock_std(&self.state).open.get(&link.id).copied();
                    let left = open.map_or(0, |until| until.saturating_sub(self.now()));
                    if left > 0 {
                        heard(&breaker, breaker.remote_open(Duration::from_micros(left)));
                    }
                }
            }
            link.pending.published(pending);
        }
        let links: Vec<_> = lock_std(&self.state)
            .links
            .iter()
            .filter_map(|(_, link)| link.upgrade())
            .collect();
        for link in links {
            link.store_returned();
        }
    }

    /// The store answers too late from now on (`true`), as a Redis in `DEBUG SLEEP` does, or in
    /// time again: a reservation or a probe's lock gets no answer, and is given up after the
    /// policy's `shared_timeout` as Redis's store gives it up (`Store::eval`; which then decides
    /// locally at once until Redis answers again, where every question here waits it out). The
    /// seam leaves that bound to the store: the execution waits for a store's answer within
    /// the deadline only.
    pub(crate) fn set_slow(&self, slow: bool) {
        self.slow.store(slow, Ordering::Release);
    }

    /// Throttles' holds arrive late from now on, as Redis's may: the store decides without
    /// them until [`Hub::deliver_holds`].
    pub(crate) fn delay_holds(&self) {
        lock_std(&self.state).late.get_or_insert_with(Vec::new);
    }

    /// The holds on their way arrive, and later ones arrive at once again.
    pub(crate) fn deliver_holds(&self) {
        let late = lock_std(&self.state).late.take().unwrap_or_default();
        for (instance, key, credit, interval, wait) in late {
            self.hold(instance, &key, credit, interval, wait);
        }
    }

    /// HOLD: no slot of the gate `key` before `wait` from now, the slots after it revoked, the
    /// other instances told.
    fn hold(&self, instance: usize, key: &Arc<str>, credit: u64, interval: u64, wait: Duration) {
        let now = self.now();
        let held = now.saturating_add(whole_micros(wait));
        let peers: Vec<_> = {
            let mut state = lock_std(&self.state);
            if let Some(late) = &mut state.late {
                late.push((instance, Arc::clone(key), credit, interval, wait));
                return;
            }
            let kept = state.gates.entry(Arc::clone(key)).or_default();
            if kept.held >= held {
                return;
            }
            let used = kept.tat.unwrap_or(0).min(now.saturating_add(credit));
            let tat = (held + credit).saturating_sub(interval).max(used);
            *kept = Gate {
                tat: Some(tat),
                epoch: kept.epoch + 1,
                held,
            };
            state
                .links
                .iter()
                .filter(|(of, _)| *of != instance)
                .filter_map(|(_, link)| link.upgrade())
                .filter(|link| link.key == *key)
                .collect()
        };
        for peer in peers {
            peer.revoke_waiting();
        }
    }

    fn now(&self) -> u64 {
        whole_micros(self.origin.elapsed())
    }

    /// Batches added to shared windows so far (a Redis store's round trips for them).
    pub(crate) fn batches(&self) -> u64 {
        lock_std(&self.state).batches
    }

    /// WINDOW: adds a batch to the bucket of now, forgets the buckets the window has passed,
    /// and answers the sums.
    fn add_to_window(&self, link: &BreakerLink, batch: WindowCounts) -> Option<WindowCounts> {
        let window = link.window.as_deref()?;
        let head = self.now() / whole_micros(window.width).max(1);
        let oldest = (head + 1).saturating_sub(window.buckets);
        let mut state = lock_std(&self.state);
        state.batches += 1;
        let buckets = state.windows.entry(Arc::clone(&link.id)).or_default();
        let bucket = buckets.entry(head).or_default();
        bucket.calls += batch.calls;
        bucket.bad += batch.bad;
        buckets.retain(|n, _| *n >= oldest);
        Some(
            buckets
                .values()
                .fold(WindowCounts::default(), |sum, b| WindowCounts {
                    calls: sum.calls + b.calls,
                    bad: sum.bad + b.bad,
                }),
        )
    }

    fn up(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    fn slow(&self) -> bool {
        self.slow.load(Ordering::Acquire)
    }

    /// The other instances' breakers named `id`.
    fn peers(&self, instance: usize, id: &str) -> Vec<Arc<Breaker>> {
        lock_std(&self.state)
            .breakers
            .iter()
            .filter(|(of, named, _)| *of != instance && &**named == id)
            .filter_map(|(_, _, breaker)| breaker.upgrade())
            .collect()
    }

    /// OPEN: the opening for what is left of the cooldown, this instance's probe lock freed,
    /// the peers told.
    fn opened(&self, instance: usize, link: &BreakerLink, breaker: &Breaker) {
        let left = breaker.retry_in(Instant::now());
        if left.is_zero() {
            return;
        }
        {
            let mut state = lock_std(&self.state);
            let until = self.now().saturating_add(whole_micros(left));
            state.open.insert(Arc::clone(&link.id), until);
            state.windows.remove(&link.id);
            release(&mut state.probe, &link.id, instance);
        }
        for peer in self.peers(instance, &link.id) {
            heard(&peer, peer.remote_open(left));
        }
    }

    /// CLOSE: the opening gone, this instance's probe lock freed, the peers told.
    fn closed(&self, instance: usize, link: &BreakerLink) {
        {
            let mut state = lock_std(&self.state);
            state.open.remove(&link.id);
            state.windows.remove(&link.id);
            release(&mut state.probe, &link.id, instance);
        }
        for peer in self.peers(instance, &link.id) {
            heard(&peer, peer.remote_closed());
        }
    }
}

/// Frees the probe lock of `id` if `instance` holds it.
fn release(locks: &mut HashMap<Arc<str>, (usize, u64)>, id: &str, instance: usize) {
    if locks.get(id).is_some_and(|(holder, _)| *holder == instance) {
        locks.remove(id);
    }
}

/// A question a slow store never answers: `unanswered` once `timeout` is over, as Redis's
/// store bounds its scripts.
async fn too_late<T>(timeout: Duration, unanswered: T) -> T {
    let never = std::future::pending::<T>();
    tokio::time::timeout(timeout, never)
        .await
        .unwrap_or(unanswered)
}

/// One instance's store.
pub(crate) struct Memory {
    hub: Arc<Hub>,
    instance: usize,
}

impl SharedStore for Memory {
    fn usable(&self) -> bool {
        self.hub.up()
    }

    fn register_breaker(&self, link: &BreakerLink, breaker: &Arc<Breaker>) {
        let mut state = lock_std(&self.hub.state);
        let entry = (self.instance, Arc::clone(&link.id), Arc::downgrade(breaker));
        state.breakers.push(entry);
    }

    fn register_gate(&self, gate: &Arc<GateLink>) {
        let mut state = lock_std(&self.hub.state);
        state.links.push((self.instance, Arc::downgrade(gate)));
    }

    fn announce(&self, link: &BreakerLink, breaker: &Breaker, to: BreakerState) {
        let pending = match to {
            BreakerState::Open => Pending::OPENED,
            BreakerState::Closed => Pending::CLOSED,
            BreakerState::HalfOpen => return,
        };
        let announced = link.pending.announce(pending);
        if !self.hub.up() {
            return;
        }
        match to {
            BreakerState::Open => self.hub.opened(self.instance, link, breaker),
            _ => self.hub.closed(self.instance, link),
        }
        link.pending.published(announced);
    }

    fn acquire_probe<'a>(
        &'a self,
        link: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, ProbeAnswer> {
        if self.hub.up() && self.hub.slow() {
            return Box::pin(too_late(link.sharing.timeout, ProbeAnswer::Unavailable));
        }
        let answer = if self.hub.up() {
            let now = self.hub.now();
            let mut state = lock_std(&self.hub.state);
            let open = state
                .open
                .get(&link.id)
                .map_or(0, |until| until.saturating_sub(now));
            let held = state
                .probe
                .get(&link.id)
                .map_or(0, |(_, until)| until.saturating_sub(now));
            match (open, held) {
                (0, 0) => {
                    let until = now.saturating_add(whole_micros(limit));
                    state
                        .probe
                        .insert(Arc::clone(&link.id), (self.instance, until));
                    ProbeAnswer::Granted
                }
                (0, held) => ProbeAnswer::Peer(Duration::from_micros(held)),
                (open, _) => ProbeAnswer::Peer(Duration::from_micros(open)),
            }
        } else {
            ProbeAnswer::Unavailable
        };
        Box::pin(std::future::ready(answer))
    }

    fn release_probe(&self, link: &BreakerLink) {
        if self.hub.up() {
            release(
                &mut lock_std(&self.hub.state).probe,
                &link.id,
                self.instance,
            );
        }
    }

    fn reserve(
        self: Arc<Self>,
        gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
        limit: Option<Duration>,
    ) -> StoreFuture<'static, SharedSlots> {
        let first = gates.iter().flatten().next();
        if let Some((gate, ..)) = first.filter(|_| self.hub.up() && self.hub.slow()) {
            return Box::pin(too_late(gate.sharing.timeout, SharedSlots::Unavailable));
        }
        Box::pin(std::future::ready(self.reserve_now(&gates, limit)))
    }

    fn refund(&self, gate: &GateLink, slot: RemoteSlot) {
        if !self.hub.up() {
            return;
        }
        let mut state = lock_std(&self.hub.state);
        if let Some(kept) = state.gates.get_mut(&gate.key) {
            if kept.tat == Some(slot.end) && kept.epoch == slot.epoch {
                kept.tat = Some(slot.from);
            }
        }
    }

    fn add_to_window(
        self: Arc<Self>,
        link: &BreakerLink,
        batch: WindowCounts,
    ) -> Option<StoreFuture<'static, Option<WindowCounts>>> {
        let answer = match self.hub.up() {
            true => self.hub.add_to_window(link, batch),
            false => None,
        };
        Some(Box::pin(std::future::ready(answer)))
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        if self.hub.up() {
            let (credit, interval) = (gate.credit(), gate.interval);
            self.hub
                .hold(self.instance, &gate.key, credit, interval, wait);
        }
    }
}

impl Memory {
    /// RESERVE: GCRA over the gates at once, all or none.
    fn reserve_now(
        &self,
        gates: &[Option<(Arc<GateLink>, u64, u64)>; 2],
        limit: Option<Duration>,
    ) -> SharedSlots {
        if !self.hub.up() {
            return SharedSlots::Unavailable;
        }
        let now = self.hub.now();
        let mut state = lock_std(&self.hub.state);
        let mut longest = 0;
        let mut slots = [None, None];
        for (slot, (gate, cost, interval)) in slots
            .iter_mut()
            .zip(gates)
            .filter_map(|(slot, gate)| Some((slot, gate.as_ref()?)))
        {
            let (interval, tolerance) = gate.schedule(*cost, *interval);
            let kept = state.gates.get(&gate.key).copied().unwrap_or_default();
            let from = kept.tat.unwrap_or(now);
            let next = from.max(now).saturating_add(interval.saturating_mul(*cost));
            let wait = next.saturating_sub(tolerance).saturating_sub(now);
            if limit.is_some_and(|limit| wait > whole_micros(limit)) {
                return SharedSlots::Refused(Rejected::RateLimited {
                    retry_in: Duration::from_micros(wait),
                });
            }
            longest = longest.max(wait);
            *slot = Some(RemoteSlot {
                from,
                end: next,
                epoch: kept.epoch,
                ahead: Duration::from_micros(next - now),
            });
        }
        for (gate, slot) in gates.iter().zip(&slots) {
            if let (Some((gate, ..)), Some(slot)) = (gate, slot) {
                state.gates.entry(Arc::clone(&gate.key)).or_default().tat = Some(slot.end);
                if gate.beat_due() {
                    let seen = state.seen.entry(Arc::clone(&gate.key)).or_default();
                    seen.insert(self.instance, now);
                    seen.retain(|_, at| now.saturating_sub(*at) <= whole_micros(SEEN_FOR));
                    gate.saw(seen.len() as u64);
                }
            }
        }
        SharedSlots::Granted(Granted {
            wait: Duration::from_micros(longest),
            slots,
        })
    }
}

#[cfg(test)]
mod tests;
