//! An attempt's slot in the token gate, beside its rate gate's: none beside a wait for a
//! probe's answer; and of two slots that come far apart, the earlier taken when the later
//! comes.

use std::time::Duration;

use tokio::time::Instant;

use super::admission::Reserved;
use super::Progress;
use crate::deadline::later;
use crate::gate::{RateGate, SLOT_MISSED};
use crate::Rejected;

/// The wait [`Progress::reserve_tokens`] gives a batch call the token gate's batch share holds
/// back: any wait sends the attempt to the gate's waiting room, where it takes its place in the
/// share, then its units, in turn.
const IN_TURN: Duration = Duration::from_nanos(1);

impl Progress<'_> {
    /// Whether `tokens`' batch share (`token_rate = "40000/min, batch 80%"`) holds this
    /// attempt back: a batch call while others came; a call of another class is noted there.
    pub(super) fn held_by_token_share(&self, tokens: &RateGate) -> bool {
        let class = self.admission.as_ref().map(|a| a.place.class());
        let share = tokens.batch().zip(class);
        share.is_some_and(|(share, class)| share.holds_back(class))
    }

    /// Reserves the token gate's slot of an attempt whose rate gate slot (if any) is due after
    /// `wait`: the wait until both are due, or the token gate's refusal (what `reserved` holds
    /// is then for the caller to give back). Beside a wait for a probe's answer (a provisional
    /// slot, always revoked), it takes none: the attempt reserves again after the answer, and
    /// tokens taken now would go back then, behind another waiter's, so that a few waiters
    /// taking turns pushed the token gate's schedule further at every look.
    #[inline(never)]
    pub(super) fn reserve_tokens(
        &self,
        reserved: &mut Reserved,
        wait: Duration,
    ) -> Result<Duration, Rejected> {
        let Some(tokens) = self.token_rate() else {
            return Ok(wait);
        };
        if reserved.rate.is_some_and(|slot| slot.is_provisional()) {
            // What can never pass is still refused at once.
            let cost = self.cost();
            return match tokens.burst_limit().filter(|burst| cost > *burst) {
                Some(burst) => Err(Rejected::OverBurst { cost, burst }),
                None => Ok(wait),
            };
        }
        if self.held_by_token_share(tokens) {
            return Ok(wait.max(IN_TURN));
        }
        let (due, slot) = tokens.reserve_slot(self.cost(), tokens.refuses_by(self.start_by()))?;
        reserved.tokens = Some(slot);
        // The same the other way: the rate gate's slot goes back while it is the latest.
        if let Some(rate) = (self.rate()).filter(|_| slot.is_provisional()) {
            if let Some(early) = reserved.rate.take() {
                rate.refund(early);
            }
            return Ok(due);
        }
        Ok(self.defer_earlier(reserved, wait, due))
    }

    /// Of the two slots `reserved` holds, due after `rate` and `tokens`, the earlier goes back
    /// when they come more than [`SLOT_MISSED`] apart (at once: it is the gate's latest), to
    /// be taken again when the later comes ([`Progress::take_deferred`]). Held, it would count
    /// the call when it came, and the calls after it in its gate would start within a period
    /// of the call's late start: more than the gate's ceiling (the simulator's two-gate
    /// class). The wait until the later. Local gates in arrival order only (a waiting room
    /// takes the slots in turn, `in_turn.rs`; the store spaced a shared gate's from other
    /// instances'), not an auto gate still probing, nor a slot from what an auto gate was
    /// told is left (given back, it would not go back there).
    fn defer_earlier(&self, reserved: &mut Reserved, rate: Duration, tokens: Duration) -> Duration {
        let both = rate.max(tokens);
        if rate.abs_diff(tokens) <= SLOT_MISSED || !self.defers() {
            return both;
        }
        let (gate, earlier) = match rate < tokens {
            true => (self.rate(), &mut reserved.rate),
            false => (self.token_rate(), &mut reserved.tokens),
        };
        if earlier.is_none_or(|slot| slot.is_off_schedule()) {
            return both;
        }
        if let Some((gate, slot)) = gate.zip(earlier.take()) {
            gate.refund(slot);
        }
        reserved.deferred = true;
        both
    }

    /// Whether this attempt's two gates take its slots when it can start (see
    /// [`Progress::defer_earlier`]).
    fn defers(&self) -> bool {
        let plain = |gate: Option<&RateGate>| {
            gate.is_some_and(|gate| gate.is_local() && !gate.orders() && !gate.probing())
        };
        plain(self.rate()) && plain(self.token_rate())
    }

    /// The slot that went back while the other came ([`Progress::defer_earlier`]), taken now
    /// that the other is due: `None` when both are (or nothing was deferred), otherwise when
    /// the slot taken comes, or the refusal of a slot past the deadline (the other then goes
    /// back). A slot that comes more than [`SLOT_MISSED`] after the one held is waited for
    /// with the two roles swapped, the held one going back, if that one is still its gate's
    /// latest or a 429 holds the other gate (held, it would be late by the hold, and a hold
    /// on its own gate spends it all the same). Otherwise both are kept and the call starts
    /// late on the held one's gate: with both gates busy at once, a case left where a gate
    /// may start more than its ceiling. Given back behind later slots, the held one
    /// would stay spent, and a caller swapping at every turn spent a slot of each gate each
    /// time (200 calls through two busy gates took 78 s where 42 sufficed).
    pub(super) fn take_deferred(&mut self) -> Result<Option<Instant>, Rejected> {
        let Some(reserved) = (self.admission.as_ref())
            .map(|admission| &admission.reserved)
            .filter(|reserved| reserved.deferred)
        else {
            return Ok(None);
        };
        let (rate, tokens) = (self.rate(), self.token_rate());
        let (Some(rate), Some(tokens)) = (rate, tokens) else {
            return Ok(None);
        };
        let cost = self.cost();
        // The gate whose slot went back, and the one whose slot is held.
        let rate_missing = reserved.rate.is_none();
        let (missing, missing_cost, held, held_slot, held_cost) = match rate_missing {
            true => (rate, 1, tokens, reserved.tokens, cost),
            false => (tokens, cost, rate, reserved.rate, 1),
        };
        let Some(held_slot) = held_slot else {
            return Ok(None);
        };
        let now = Instant::now();
        let (wait, slot) =
            match missing.reserve_slot(missing_cost, missing.refuses_by(self.start_by())) {
                Ok(taken) => taken,
                Err(refused) => {
                    self.refund_slots();
                    return Err(refused);
                }
            };
        let due = later(now, wait);
        let held_due = held.due_at(held_slot, held_cost);
        let far = due > later(held_due, SLOT_MISSED);
        let swap = far
            && !held_slot.is_off_schedule()
            && (held.is_latest(held_slot) || missing.held_until(now).is_some());
        if swap {
            held.refund(held_slot);
        }
        let kept = (!swap).then_some(held_slot);
        let slots = match rate_missing {
            true => (Some(slot), kept),
            false => (kept, Some(slot)),
        };
        if let Some(admission) = self.admission.as_mut() {
            let reserved = &mut admission.reserved;
            (reserved.rate, reserved.tokens) = slots;
            reserved.deferred = swap;
        }
        Ok((!wait.is_zero()).then_some(due))
    }
}
