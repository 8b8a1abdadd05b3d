//! An attempt's slots in the rate gates, local and shared: reserved before it calls, used
//! when it calls, revoked by a throttle, refunded when it never called.

use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "shared")]
use super::admission::Remote;
use super::admission::Reserved;
use super::in_turn::{Room, Took};
#[cfg(feature = "shared")]
use super::probing::probes;
use super::Progress;

#[cfg(feature = "shared")]
use crate::gate::AskWait;
use crate::gate::{BatchShare, RateGate, Slot};
use crate::Rejected;
#[cfg(feature = "shared")]
use std::pin::Pin;
#[cfg(feature = "shared")]
use std::sync::Arc;

/// Where a batch call held back by its gate's batch share waits for its place there.
pub(super) enum ShareWait {
    /// Until this instant, then it starts again: a shared gate's, its place booked at once.
    #[cfg(feature = "shared")]
    Until(Instant, Slot),
    /// In the gate's waiting room, taking its place when it is next.
    InTurn,
}

/// Where a batch call held back by `share` waits for its place there.
fn wait_for_share(
    gate: &RateGate,
    share: &BatchShare,
    deadline: Option<Instant>,
) -> Result<ShareWait, Rejected> {
    // The waiting room takes no slot from the store: a shared gate's batch call books its
    // place in the share now and waits for it before it asks.
    #[cfg(feature = "shared")]
    if gate.shared().is_some() {
        let (wait, slot) = share.reserve(1, deadline)?;
        let until = crate::deadline::later(Instant::now(), wait);
        return Ok(ShareWait::Until(until, slot));
    }
    // In turn with the other waiters, each taking its place when it is next (at once, if one
    // is free): one place at a time, so the share lets go of batch calls as soon as the
    // others leave.
    let _ = (gate, share, deadline);
    Ok(ShareWait::InTurn)
}

/// An attempt's question to the shared store for its slots.
#[cfg(feature = "shared")]
pub(super) type SharedWait = crate::seams::StoreFuture<'static, crate::seams::SharedSlots>;

/// How an attempt of a policy with shared gates starts.
#[cfg(feature = "shared")]
pub(super) enum SharedStart {
    /// Ask the store for this attempt's slots.
    Ask(SharedWait),
    /// Wait for a throttle's hold to end first, then start again.
    Held(Instant),
    /// Wait for this instance's turn to ask, for a gate that orders its waiters (see
    /// `gate/asking.rs`), then start again.
    Turn(Pin<Box<AskWait>>),
    /// The local gates decide.
    Local,
}

impl<'p> Progress<'p> {
    /// Reserves this attempt's slots in the rate gates: the wait until the later of them, or
    /// the refusal of a gate whose slot would come after the deadline (nothing is then held).
    #[inline]
    pub(super) fn reserve_slots(&mut self) -> Result<Duration, Rejected> {
        if !self.settings.gated || !self.tuning.enabled {
            return Ok(Duration::ZERO);
        }
        self.refuse_if_open()?;
        let mut reserved = Reserved::default();
        let mut wait = Duration::ZERO;
        if let Some(gate) = self.rate() {
            let (rate, slot) = gate.reserve_slot(1, gate.refuses_by(self.start_by()))?;
            (wait, reserved.rate) = (rate, Some(slot));
        }
        if self.token_rate().is_some() {
            match self.reserve_tokens(&mut reserved, wait) {
                Ok(both) => wait = both,
                Err(refused) => {
                    self.hold(reserved);
                    self.refund_slots();
                    return Err(refused);
                }
            }
        }
        #[cfg(feature = "shared")]
        self.granted_alone(&mut reserved, self.store_returns());
        self.hold(reserved);
        Ok(wait)
    }

    /// For a gate with a batch share (`rate = "500/min, batch 80%"`), where a batch call held
    /// back by the share waits for its place there, before it takes its slot in the gate (see
    /// `gate/batch.rs`); a call of another class is noted there. `None`: on to the gate. For
    /// a gated call.
    #[inline]
    pub(super) fn batch_turn(&mut self) -> Result<Option<ShareWait>, Rejected> {
        if self.rate().and_then(RateGate::batch).is_none() {
            return Ok(None);
        }
        self.take_share()
    }

    #[inline(never)]
    fn take_share(&mut self) -> Result<Option<ShareWait>, Rejected> {
        let deadline = self.start_by();
        let settings = self.settings;
        let Some(admission) = self.admission.as_mut() else {
            return Ok(None);
        };
        // Back from its wait for the share (and then for its turn to ask the store, if any):
        // the place is its own now, on to the gate.
        #[cfg(feature = "shared")]
        if admission.reserved.share.take().is_some() || admission.reserved.asking.is_some() {
            return Ok(None);
        }
        let class = admission.place.class();
        let Some(gate) = admission.rate(settings) else {
            return Ok(None);
        };
        let share = gate.batch().expect("checked by batch_turn");
        if !share.holds_back(class) {
            return Ok(None);
        }
        let wait = wait_for_share(gate, share, deadline)?;
        #[cfg(feature = "shared")]
        if let ShareWait::Until(_, slot) = wait {
            admission.reserved.share = Some(slot);
        }
        Ok(Some(wait))
    }

    /// A gate's waiting room gave this attempt its slot, due now. The rate gate's: it takes
    /// its token gate's slot too, if any, or waits in the token gate's room if that one orders
    /// its waiters and has none free. The token gate's: the rate gate's slot, if any, is held
    /// already. What comes next: the wait until the slots are due, or a wait in turn; or the
    /// token gate's refusal (the rate gate's slot then goes back).
    pub(super) fn took_turn(&mut self, slot: Slot, room: Room) -> Result<Took<'p>, Rejected> {
        if room == Room::Tokens {
            let Some(admission) = self.admission.as_mut() else {
                return Ok(Took::Wait(Duration::ZERO));
            };
            admission.reserved.tokens = Some(slot);
            return self.rate_slot_after_units();
        }
        let mut reserved = Reserved {
            rate: Some(slot),
            ..Reserved::default()
        };
        let mut wait = Duration::ZERO;
        if (self.token_rate()).is_some_and(|gate| self.held_by_token_share(gate)) {
            // Its place in the token gate's batch share first, in the gate's room.
            self.hold(reserved);
            return self.join_room(Room::Tokens).map(Took::Turn);
        }
        if let Some(gate) = self.token_rate() {
            match gate.reserve_slot(self.cost(), gate.refuses_by(self.start_by())) {
                Ok((tokens, slot)) => (wait, reserved.tokens) = (tokens, Some(slot)),
                Err(refused) => {
                    self.hold(reserved);
                    self.refund_slots();
                    return Err(refused);
                }
            }
        }
        // Granted alone, like a slot the local gate reserved while the store was down (since
        // the store's returns when the call came to the room).
        #[cfg(feature = "shared")]
        self.granted_alone(
            &mut reserved,
            self.admission.as_ref().and_then(|a| a.reserved.returns),
        );
        self.hold(reserved);
        if !wait.is_zero() && self.token_rate().is_some_and(RateGate::orders) {
            return self.join_room(Room::Tokens).map(Took::Turn);
        }
        Ok(Took::Wait(wait))
    }

    /// For a policy with shared gates, the times their store answered again after an outage.
    #[cfg(feature = "shared")]
    pub(super) fn store_returns(&self) -> Option<u64> {
        [self.rate(), self.token_rate()]
            .into_iter()
            .flatten()
            .find_map(RateGate::shared)
            .map(|link| link.returns())
    }

    /// For a policy with shared gates, whether their store is usable now.
    #[cfg(feature = "shared")]
    fn store_answers(&self) -> bool {
        [self.rate(), self.token_rate()]
            .into_iter()
            .flatten()
            .find_map(RateGate::shared)
            .is_some_and(|link| link.is_available())
    }

    /// A call the breaker will refuse does not wait for a slot first.
    fn refuse_if_open(&self) -> Result<(), Rejected> {
        if let Some(breaker) = self.breaker() {
            let retry_in = breaker.retry_in(Instant::now());
            if !retry_in.is_zero() {
                return Err(breaker.rejection(retry_in));
            }
        }
        Ok(())
    }

    /// For a shared policy whose store answers, the request for this attempt's slots in the
    /// shared gates; `Local` when the local gates decide alone (no shared gate, or the store is
    /// known to be down and the policy fails open). Out of line: only gated policies get
    /// here, and the attempt's own code stays small.
    #[cfg(feature = "shared")]
    #[inline(never)]
    pub(super) fn shared_slots(&mut self) -> Result<SharedStart, Rejected> {
        if !self.tuning.enabled {
            return Ok(SharedStart::Local);
        }
        let (rate, tokens) = (self.rate(), self.token_rate());
        let shared = |gate: Option<&RateGate>| gate.and_then(|gate| gate.shared()).cloned();
        let (rate_link, token_link) = (shared(rate), shared(tokens));
        let Some(link) = rate_link.as_ref().or(token_link.as_ref()) else {
            return Ok(SharedStart::Local);
        };
        // An auto gate that knows nothing yet probes here: the store has no rate to keep for
        // it, and the other gate asks the store for the probe's caller only (`probing.rs`).
        let mut probing = [probes(rate), probes(tokens)];
        if (rate_link.is_none() || probing[0]) && (token_link.is_none() || probing[1]) {
            return Ok(SharedStart::Local);
        }
        if !link.is_available() {
            // A slot held while the other went back goes back too: the local gates decide.
            self.give_deferred_back();
            self.refuse_if_failing_closed()?;
            self.tell_shares();
            return Ok(SharedStart::Local);
        }
        self.refuse_if_open()?;
        // A throttle this instance knows of holds it, whatever the store says: the store may
        // not have heard yet (the hold goes there in the background).
        let now = Instant::now();
        let held = [rate, tokens]
            .into_iter()
            .flatten()
            .filter_map(|gate| gate.held_until(now))
            .max();
        if let Some(until) = held {
            if self.start_by().is_some_and(|start_by| until > start_by) {
                return Err(Rejected::RateLimited {
                    retry_in: until.saturating_duration_since(now),
                });
            }
            // Its turn to ask goes to the next meanwhile: after the hold, it asks again in turn.
            // A slot held while the other went back would be late by the hold: it goes back.
            self.let_go_turn();
            self.give_deferred_back();
            return Ok(SharedStart::Held(until));
        }
        // A call the token gate cannot pass now fails at once, not after its turn (after a
        // hold, since an auto gate's burst, the limit it was told, may end with it).
        let burst = self.token_rate().and_then(RateGate::burst_limit);
        if let Some(burst) = burst.filter(|burst| self.cost() > *burst) {
            return Err(Rejected::OverBurst {
                cost: self.cost(),
                burst,
            });
        }
        let asking = self.turn_gate().and_then(|(gate, room)| {
            let burst = gate.burst_limit().unwrap_or(1);
            let (units, each) = match room {
                Room::Rate => (1, 1),
                Room::Tokens => (self.cost(), 0),
            };
            let asking = Arc::clone(gate.asking()?);
            Some((asking, (gate.interval_now(), burst, units, each)))
        });
        if let Some((asking, gate)) = asking {
            if let Some(start) = self.ask_turn(&asking, gate, now)? {
                return Ok(start);
            }
        }
        if probing.contains(&true) && !self.take_probes(&mut probing)? {
            return Ok(SharedStart::Local);
        }
        // A slot held while the other went back: the store is asked for the other alone.
        let held = self.deferred_held();
        let asked = |link: Option<Arc<_>>, skip: bool, gate: Option<&RateGate>, cost| {
            let (link, gate) = link.filter(|_| !skip).zip(gate)?;
            Some(self.ask_of(link, cost, gate))
        };
        let gates = [
            asked(rate_link, probing[0] || held[0], self.rate(), 1),
            asked(
                token_link,
                probing[1] || held[1],
                self.token_rate(),
                self.cost(),
            ),
        ];
        let limit = self.ask_limit();
        Ok(SharedStart::Ask(crate::seams::reserve(gates, limit)))
    }

    /// What the shared gates answered: the wait for the slot (the local gates then count the
    /// call too, so that they decide from what this instance did if Redis goes), or the
    /// refusal. No answer: the local gates decide, unless the policy fails closed.
    #[cfg(feature = "shared")]
    pub(super) fn shared_answer(
        &mut self,
        answer: crate::seams::SharedSlots,
    ) -> Result<Duration, Rejected> {
        use crate::seams::{RemoteSlot, SharedSlots};
        let held = self.take_deferred_held();
        match answer {
            SharedSlots::Granted(granted) => {
                let [rate, tokens] = granted.slots;
                // The turn to ask is held until the slot comes.
                let mut asking = (self.admission.as_mut()).and_then(|a| a.reserved.asking.take());
                if let Some(asking) = &mut asking {
                    asking.granted(granted.wait);
                    if let Some((served, (_, room))) = asking.take_served().zip(self.turn_gate()) {
                        self.served(room.label(), served);
                    }
                }
                let mirror = |gate: Option<&RateGate>, remote: Option<RemoteSlot>, cost| {
                    gate.zip(remote)
                        .map(|(gate, remote)| gate.mirror(remote.ahead, cost))
                };
                let [rate_probe, tokens_probe] = self.probes_taken();
                self.hold(Reserved {
                    rate: mirror(self.rate(), rate, 1).or(rate_probe),
                    tokens: mirror(self.token_rate(), tokens, self.cost()).or(tokens_probe),
                    share: None,
                    used: false,
                    deferred: false,
                    remote: Some(Box::new(Remote {
                        slots: [rate, tokens],
                        went_back: None,
                    })),
                    returns: None,
                    alone: [0; 2],
                    asking,
                });
                match held {
                    Some(held) => self.join_held(held, granted.wait),
                    None => self.defer_shared(granted.waits),
                }
                Ok(granted.wait)
            }
            SharedSlots::Refused(rejected) => {
                if let Some(held) = held {
                    self.give_held_back(held);
                }
                Err(rejected)
            }
            SharedSlots::Unavailable => {
                if let Some(held) = held {
                    self.give_held_back(held);
                }
                self.give_probes_back();
                if let Some(asking) = self.turn_gate().and_then(|(gate, _)| gate.asking()) {
                    asking.answered_late();
                }
                self.refuse_if_failing_closed()?;
                self.tell_shares();
                self.reserve_slots()
            }
        }
    }

    /// The local gates decide alone, each at its share of the rate: said once per outage.
    #[cfg(feature = "shared")]
    fn tell_shares(&self) {
        let links = [self.rate(), self.token_rate()].map(|gate| gate.and_then(RateGate::shared));
        for link in links.into_iter().flatten() {
            if let Some(instances) = link.share_untold() {
                crate::events::gate_share(&link.key, instances);
            }
        }
    }

    /// Redis does not answer: the local gates decide, unless the policy fails closed.
    #[cfg(feature = "shared")]
    pub(super) fn refuse_if_failing_closed(&self) -> Result<(), Rejected> {
        let fail_closed = [self.rate(), self.token_rate()]
            .into_iter()
            .flatten()
            .filter_map(RateGate::shared)
            .any(|link| link.fail_closed());
        match fail_closed {
            true => Err(Rejected::SharedUnavailable),
            false => Ok(()),
        }
    }

    /// Did a throttle (or the store's return, for slots the local gates promised alone)
    /// revoke a slot this attempt waits for? Then the attempt must reserve again: what was
    /// revoked is gone, and what was not (the other gate's slot) goes back.
    pub(super) fn slots_revoked(&mut self) -> bool {
        let revoked = |gate: Option<&RateGate>, slot: Option<Slot>| {
            gate.zip(slot)
                .is_some_and(|(gate, slot)| gate.is_revoked(slot))
        };
        let Some(reserved) = self.admission.as_ref().map(|admission| &admission.reserved) else {
            return false;
        };
        let revoked =
            revoked(self.rate(), reserved.rate) || revoked(self.token_rate(), reserved.tokens);
        // Promised by the local gates alone while the store was down, and the store is back.
        // Down again, the slot stands: the local gates decide again, and the next reservation
        // in the store charges what they granted (taken again, it would be granted at the back
        // of the local queue, and revoked again by the next return, for ever).
        #[cfg(feature = "shared")]
        let revoked = revoked
            || reserved.returns.is_some_and(|then| {
                (Some(then) != self.store_returns() || self.asks_in_turn()) && self.store_answers()
            });
        if revoked {
            // Its turn to ask the store stays its own: it asks again at once.
            #[cfg(feature = "shared")]
            let asking = (self.admission.as_mut()).and_then(|a| a.reserved.asking.take());
            self.refund_slots();
            #[cfg(feature = "shared")]
            if let Some(admission) = &mut self.admission {
                admission.reserved.asking = asking;
            }
        }
        revoked
    }

    /// Whether the attempt holds slots reserved and not yet used.
    pub(super) fn holds_slots(&self) -> bool {
        self.settings.gated
            && (self.admission.as_ref()).is_some_and(|admission| {
                let reserved = &admission.reserved;
                !reserved.used && (reserved.rate.is_some() || reserved.tokens.is_some())
            })
    }

    /// The slots reserved are spent by the call.
    #[inline]
    pub(super) fn slots_used(&mut self) {
        if self.settings.gated {
            #[cfg(feature = "shared")]
            self.alone_used();
            if self.settings.learns {
                return self.listen();
            }
            self.hold(Reserved::default());
        }
    }

    /// The provider throttled this call: the gates slow down, and if it asked to wait, they
    /// hand out no slot until then, so other callers wait in them instead of provoking their
    /// own 429.
    pub(super) fn throttled(&self, wait: Option<Duration>) {
        for gate in [self.rate(), self.token_rate()].into_iter().flatten() {
            gate.slow_down();
            if let Some(wait) = wait {
                gate.hold(wait.min(self.tuning.retry_after_max));
            }
        }
    }
}
