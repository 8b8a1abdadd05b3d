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
    SharedStore, StoreFuture,
};
use crate::sync::lock_std;
use crate::Rejected;

/// What every instance sees: the breakers' openings and probe locks, the gates' schedules,
/// and who listens for what.
pub(crate) struct Hub {
    origin: Instant,
    available: AtomicBool,
    state: Mutex<State>,
}

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
    /// not heard is told, and every breaker learns of the openings in force.
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
    }

    fn now(&self) -> u64 {
        whole_micros(self.origin.elapsed())
    }

    fn up(&self) -> bool {
        self.available.load(Ordering::Acquire)
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

    fn hold(&self, gate: &GateLink, wait: Duration) {
        if !self.hub.up() {
            return;
        }
        let now = self.hub.now();
        let held = now.saturating_add(whole_micros(wait));
        let peers: Vec<_> = {
            let mut state = lock_std(&self.hub.state);
            let kept = state.gates.entry(Arc::clone(&gate.key)).or_default();
            if kept.held >= held {
                return;
            }
            let used = kept.tat.unwrap_or(0).min(now.saturating_add(gate.credit()));
            let tat = (held + gate.credit())
                .saturating_sub(gate.interval)
                .max(used);
            *kept = Gate {
                tat: Some(tat),
                epoch: kept.epoch + 1,
                held,
            };
            state
                .links
                .iter()
                .filter(|(of, _)| *of != self.instance)
                .filter_map(|(_, link)| link.upgrade())
                .filter(|link| link.key == gate.key)
                .collect()
        };
        for peer in peers {
            peer.peer_held();
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
            }
        }
        SharedSlots::Granted(Granted {
            wait: Duration::from_micros(longest),
            slots,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::{BreakerConfig, Policy, PolicyBuilder, Transient};

    const COOLDOWN: Duration = Duration::from_secs(30);

    #[derive(Debug, PartialEq)]
    enum Error {
        Down,
        Rejected(Rejected),
    }

    impl Transient for Error {
        fn is_transient(&self) -> bool {
            match self {
                Error::Down => true,
                Error::Rejected(rejected) => rejected.is_transient(),
            }
        }
    }

    impl From<Rejected> for Error {
        fn from(rejected: Rejected) -> Self {
            Error::Rejected(rejected)
        }
    }

    /// The policy of one instance, its state shared through `store`.
    fn instance(builder: PolicyBuilder, store: Arc<Memory>) -> Policy {
        let mut builder = builder;
        builder.sharing(|| store as Arc<dyn SharedStore>);
        builder.build().unwrap()
    }

    fn breaker_policy(hub: &Arc<Hub>) -> Policy {
        let breaker = Breaker::new("memory", BreakerConfig::new(2, COOLDOWN).unwrap());
        instance(Policy::builder().breaker(Arc::new(breaker)), hub.instance())
    }

    async fn call(
        policy: &Policy,
        calls: &AtomicU32,
        answer: Result<(), Error>,
    ) -> Result<(), Error> {
        policy
            .run(|| {
                let answer = match &answer {
                    Ok(()) => Ok(()),
                    Err(_) => Err(Error::Down),
                };
                async move {
                    calls.fetch_add(1, Ordering::Relaxed);
                    answer
                }
            })
            .await
    }

    fn is_open(answer: &Result<(), Error>) -> bool {
        matches!(answer, Err(Error::Rejected(Rejected::BreakerOpen { .. })))
    }

    #[tokio::test(start_paused = true)]
    async fn an_opening_reaches_the_other_instance_and_one_probe_goes_out_for_both() {
        let hub = Hub::new();
        let (a, b) = (breaker_policy(&hub), breaker_policy(&hub));
        let calls = AtomicU32::new(0);
        for _ in 0..2 {
            assert_eq!(call(&a, &calls, Err(Error::Down)).await, Err(Error::Down));
        }
        assert_eq!(b.breaker().unwrap().state(), BreakerState::Open);
        assert!(
            is_open(&call(&b, &calls, Ok(())).await),
            "refused without a call"
        );
        assert_eq!(calls.load(Ordering::Relaxed), 2);

        tokio::time::advance(COOLDOWN).await;
        let probe = a.run(|| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, Error>(())
        });
        let (probed, refused) = tokio::join!(probe, async {
            tokio::task::yield_now().await;
            call(&b, &calls, Ok(())).await
        });
        assert_eq!(probed, Ok(()));
        assert!(is_open(&refused), "A probes for both: {refused:?}");
        assert_eq!(
            b.breaker().unwrap().state(),
            BreakerState::Closed,
            "A's closing reached B"
        );
        assert_eq!(call(&b, &calls, Ok(())).await, Ok(()));
    }

    fn gated(hub: &Arc<Hub>, fail_closed: bool) -> Policy {
        let builder = Policy::builder()
            .name("memory::gate")
            .rate(1, Duration::from_secs(1), 1);
        let mut policy = builder;
        policy
            .sharing(|| hub.instance() as Arc<dyn SharedStore>)
            .fail_closed = fail_closed;
        policy.build().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_gate_holds_its_rate_across_instances() {
        let hub = Hub::new();
        let (a, b) = (gated(&hub, false), gated(&hub, false));
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        call(&a, &calls, Ok(())).await.unwrap();
        call(&b, &calls, Ok(())).await.unwrap();
        call(&a, &calls, Ok(())).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "1/s across both, not each"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_store_is_down_instances_decide_alone_and_catch_up_when_it_is_back() {
        let hub = Hub::new();
        let calls = AtomicU32::new(0);
        hub.set_available(false);
        let (open, closed) = (gated(&hub, false), gated(&hub, true));
        assert_eq!(call(&open, &calls, Ok(())).await, Ok(()), "fails open");
        assert_eq!(
            call(&closed, &calls, Ok(())).await,
            Err(Error::Rejected(Rejected::SharedUnavailable)),
            "fails closed"
        );

        let (a, b) = (breaker_policy(&hub), breaker_policy(&hub));
        for _ in 0..2 {
            let _ = call(&a, &calls, Err(Error::Down)).await;
        }
        assert_eq!(
            b.breaker().unwrap().state(),
            BreakerState::Closed,
            "not heard"
        );
        hub.set_available(true);
        assert_eq!(
            b.breaker().unwrap().state(),
            BreakerState::Open,
            "told at the re-sync"
        );
    }
}
