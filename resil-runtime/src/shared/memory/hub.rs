//! What every instance of an in-memory store shares: its state, and how what one instance
//! records reaches the others (not those cut off from it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::state::{Gate, State};
use super::InMemory;
use crate::seams::{whole_micros, Announcement, BreakerNews, Change};
use crate::sync::lock_std;

/// What every instance sees: the breakers' openings and probe locks, the gates' schedules,
/// and who listens for what.
pub(super) struct Hub {
    pub(super) origin: Instant,
    pub(super) available: AtomicBool,
    /// Whether its answers come too late (see [`InMemory::set_slow`]).
    pub(super) slow: AtomicBool,
    pub(super) state: Mutex<State>,
}

impl Hub {
    /// A new instance of the service, sharing the hub's state.
    pub(super) fn instance(hub: &Arc<Hub>) -> InMemory {
        let mut state = lock_std(&hub.state);
        state.instances += 1;
        InMemory {
            hub: Arc::clone(hub),
            instance: state.instances,
            reachable: Arc::new(AtomicBool::new(true)),
        }
    }

    /// The store answers in time again: the instances that gave up on it (and so decided
    /// alone) hear it back, as Redis's do when their reconnection's first PING is answered,
    /// and their gates revoke what they promised alone.
    pub(super) fn answers_again(&self) {
        let gates = {
            let mut state = lock_std(&self.state);
            let lost = std::mem::take(&mut state.lost);
            let gates = state.links.all();
            // One cut off hears it when it reaches the store again.
            gates
                .into_iter()
                .filter(|(instance, _)| lost.contains(instance) && !state.cut.contains(instance))
                .collect::<Vec<_>>()
        };
        for (_, gate) in gates {
            gate.store_returned();
        }
    }

    /// The store answers again (`only` that instance, once it reaches the store again): what
    /// was not heard is told, the others learn of the openings in force, and the gates revoke
    /// what they promised alone. An instance still cut off hears nothing.
    pub(super) fn resync(&self, only: Option<usize>) {
        let hears = |state: &State, instance: usize| {
            only.is_none_or(|only| only == instance) && !state.cut.contains(&instance)
        };
        let breakers = {
            let state = lock_std(&self.state);
            let all = state.breakers.all();
            all.into_iter()
                .filter(|(instance, _)| hears(&state, *instance))
                .collect::<Vec<_>>()
        };
        for (instance, breaker) in breakers {
            match breaker.untold() {
                Some(announcement) => self.record(instance, announcement),
                None => {
                    let open = lock_std(&self.state).open.get(breaker.name()).copied();
                    let left = open.map_or(0, |until| until.saturating_sub(self.now()));
                    if left > 0 {
                        breaker.opened_elsewhere(Duration::from_micros(left));
                    }
                }
            }
        }
        let gates = {
            let state = lock_std(&self.state);
            let all = state.links.all();
            all.into_iter()
                .filter(|(instance, _)| hears(&state, *instance))
                .collect::<Vec<_>>()
        };
        for (_, gate) in gates {
            gate.store_returned();
        }
    }

    /// HOLD: no slot of the gate `key` before `wait` from now, the slots after it revoked, the
    /// other instances told.
    pub(super) fn hold(
        &self,
        instance: usize,
        key: &Arc<str>,
        credit: u64,
        interval: u64,
        wait: Duration,
    ) {
        let now = self.now();
        let held = now.saturating_add(whole_micros(wait));
        let peers: Vec<_> = {
            let mut state = lock_std(&self.state);
            if let Some(late) = &mut state.late {
                late.push((instance, Arc::clone(key), credit, interval, wait));
                return;
            }
            state.sweep(now);
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
                given: Vec::new(),
            };
            state.links.others(instance, key, &state.cut)
        };
        for peer in peers {
            peer.throttled_elsewhere();
        }
    }

    pub(super) fn now(&self) -> u64 {
        whole_micros(self.origin.elapsed())
    }

    pub(super) fn up(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    pub(super) fn slow(&self) -> bool {
        self.slow.load(Ordering::Acquire)
    }

    /// The other instances' breakers named `id`, but those cut off.
    fn peers(&self, instance: usize, id: &str) -> Vec<BreakerNews> {
        let state = lock_std(&self.state);
        state.breakers.others(instance, id, &state.cut)
    }

    /// OPEN or CLOSE, then published: the opening for what is left of the cooldown (or none),
    /// this instance's probe lock freed, the peers told.
    pub(super) fn record(&self, instance: usize, announcement: Announcement) {
        let id = announcement.breaker();
        {
            let mut state = lock_std(&self.state);
            match announcement.change() {
                Change::Opened(left) => {
                    let now = self.now();
                    state.sweep(now);
                    state
                        .open
                        .insert(Arc::from(id), now.saturating_add(whole_micros(left)));
                }
                _ => {
                    state.open.remove(id);
                }
            }
            state.windows.remove(id);
            release(&mut state.probe, id, instance);
        }
        for peer in self.peers(instance, id) {
            match announcement.change() {
                Change::Opened(left) => peer.opened_elsewhere(left),
                _ => peer.closed_elsewhere(),
            }
        }
        announcement.published();
    }
}

/// Frees the probe lock of `id` if `instance` holds it.
pub(super) fn release(locks: &mut HashMap<Arc<str>, (usize, u64)>, id: &str, instance: usize) {
    if locks.get(id).is_some_and(|(holder, _)| *holder == instance) {
        locks.remove(id);
    }
}
