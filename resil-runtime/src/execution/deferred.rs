//! Two shared gates whose slots the store grants far apart: the earlier goes back, and is
//! asked for alone when the later comes, as two local gates do (`tokens.rs`). Held, it counted
//! the call where it did not start, and the calls after it in its gate started within a
//! period of the call's late start, more than the gate's ceiling over every instance (the
//! simulator's shared two-gate class).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::Reserved;
use super::Progress;
use crate::gate::{RateGate, SLOT_MISSED};
use crate::seams::{GateAsk, GateLink};

impl Progress<'_> {
    /// What this attempt asks of the store for `cost` units of `link`, the shared side of
    /// `local`: the local gate's interval per unit (a learning gate's no more than its window)
    /// and the slots it granted alone.
    pub(super) fn ask_of(&self, link: Arc<GateLink>, cost: u64, local: &RateGate) -> GateAsk {
        GateAsk {
            gate: link,
            cost,
            interval: local.taken_by(cost) / cost.max(1),
            alone: local.ahead_alone(),
        }
    }

    /// The longest wait for a slot the attempt accepts: what is left until it must start.
    pub(super) fn ask_limit(&self) -> Option<Duration> {
        (self.start_by()).map(|start_by| start_by.saturating_duration_since(Instant::now()))
    }

    /// Of the two slots the store just granted, due after `waits` (the rate gate's, then the
    /// token gate's), the earlier goes back, to the store and to the local gate that mirrors
    /// it, when they come more than [`SLOT_MISSED`] apart: it is asked for again when the
    /// later comes ([`Progress::asks_deferred`]; a learning gate's held slot comes when the
    /// answers place it). In arrival order: a gate that orders its waiters asks the store in
    /// turn, for the room's next.
    pub(super) fn defer_shared(&mut self, waits: [Duration; 2]) {
        let [rate, tokens] = waits;
        if rate.abs_diff(tokens) <= SLOT_MISSED || !self.defers_shared() {
            return;
        }
        let at = usize::from(tokens < rate);
        let Some(reserved) = self.admission.as_mut().map(|a| &mut a.reserved) else {
            return;
        };
        let Some(remote) = reserved.remote.as_mut() else {
            return;
        };
        let Some(slot) = remote.slots[at].take() else {
            return;
        };
        let local = [&mut reserved.rate, &mut reserved.tokens][at].take();
        remote.went_back = local;
        reserved.deferred = true;
        let gate = [self.rate(), self.token_rate()][at];
        if let Some(gate) = gate {
            if let Some(link) = gate.shared() {
                link.refund(slot);
            }
            if let Some(local) = local {
                gate.refund(local);
            }
        }
    }

    /// Whether this attempt's two shared gates take its slots when it can start.
    fn defers_shared(&self) -> bool {
        let plain = |gate: Option<&RateGate>| {
            gate.is_some_and(|gate| gate.shared().is_some() && !gate.orders())
        };
        plain(self.rate()) && plain(self.token_rate())
    }

    /// The later slot came: whether the attempt starts again, to ask the store for the earlier,
    /// which went back ([`Progress::defer_shared`]), through every check a question to the
    /// store passes (a throttle's hold, the breaker, the store's health).
    pub(super) fn asks_deferred(&self) -> bool {
        (self.admission.as_ref()).is_some_and(|admission| one_went_back(&admission.reserved))
    }

    /// Which gates hold a slot while the other's went back (`[rate, tokens]`): the store is
    /// asked for the other alone.
    pub(super) fn deferred_held(&self) -> [bool; 2] {
        let reserved = self.admission.as_ref().map(|admission| &admission.reserved);
        match reserved.filter(|reserved| one_went_back(reserved)) {
            Some(reserved) => [reserved.rate.is_some(), reserved.tokens.is_some()],
            None => [false; 2],
        }
    }

    /// The slot held while the other went back, taken out of the reservation while the store
    /// is asked for the other: `None` unless one went back.
    pub(super) fn take_deferred_held(&mut self) -> Option<Reserved> {
        let reserved = &mut self.admission.as_mut()?.reserved;
        one_went_back(reserved).then(|| std::mem::take(reserved))
    }

    /// The store granted the slot that went back, due after `wait`: the one `held` joins it,
    /// and the attempt waits for the later. The new one coming more than [`SLOT_MISSED`] after
    /// the held one (due now), the two swap, the held one going back to be asked for again when
    /// the new one comes, if it is the store's latest (its gate's latest here, and the store
    /// said this instance's gate is the gate's only user) or a throttle holds the new one's
    /// gate (held, it would be late by the hold). Otherwise both are kept and the call starts
    /// late on the held one's gate, both gates short of the demand at once: given back behind
    /// later slots, the held one would stay spent, and a caller swapping at every turn would
    /// spend a slot of each gate each time (judged by its own instance's mirror alone, a
    /// caller alone in its instance swapped at every turn and was passed by a hundred later
    /// calls of another).
    pub(super) fn join_held(&mut self, held: Reserved, wait: Duration) {
        let at = usize::from(held.rate.is_none());
        let gates = [self.rate(), self.token_rate()];
        let slot = [held.rate, held.tokens][at];
        let latest = |gate: &RateGate, slot| {
            gate.is_latest(slot) && gate.shared().is_some_and(|link| link.sole_user())
        };
        // A throttle holds the new one's gate: in force here, or heard since its slot went
        // back (from another instance, through the store, with no length).
        let went_back = held.remote.as_ref().and_then(|remote| remote.went_back);
        let held_new = gates[1 - at].is_some_and(|new| {
            new.held_until(Instant::now()).is_some()
                || went_back.is_some_and(|slot| new.is_revoked(slot))
        });
        let swap = wait > SLOT_MISSED
            && gates[at]
                .zip(slot)
                .is_some_and(|(gate, slot)| held_new || latest(gate, slot));
        if swap {
            // The reservation now holds the new slot alone: the held one goes back.
            let new = self
                .admission
                .as_mut()
                .map(|a| std::mem::take(&mut a.reserved));
            self.give_held_back(held);
            if let Some(mut new) = new {
                new.deferred = true;
                if let Some(remote) = new.remote.as_mut() {
                    remote.went_back = slot;
                }
                self.hold(new);
            }
            return;
        }
        let Some(reserved) = self.admission.as_mut().map(|a| &mut a.reserved) else {
            return;
        };
        reserved.rate = reserved.rate.or(held.rate);
        reserved.tokens = reserved.tokens.or(held.tokens);
        if let (Some(remote), Some(held)) = (reserved.remote.as_mut(), held.remote) {
            for (slot, held) in remote.slots.iter_mut().zip(held.slots) {
                *slot = slot.or(held);
            }
        }
    }

    /// The store refused the slot that went back, or did not answer: the one `held` goes back
    /// too.
    pub(super) fn give_held_back(&mut self, held: Reserved) {
        self.hold(held);
        self.refund_slots();
    }

    /// The slot held while the other went back goes back, if any: the attempt asks for both
    /// again.
    pub(super) fn give_deferred_back(&mut self) {
        if let Some(held) = self.take_deferred_held() {
            self.give_held_back(held);
        }
    }
}

/// Whether `reserved` holds a slot of one of two shared gates while the other's went back.
fn one_went_back(reserved: &Reserved) -> bool {
    reserved.deferred && reserved.remote.is_some()
}
