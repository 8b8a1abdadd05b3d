//! An attempt's slot in the token gate, beside its rate gate's: none beside a wait for a
//! probe's answer.

use std::time::Duration;

use super::admission::Reserved;
use super::Progress;
use crate::gate::RateGate;
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
        Ok(due.max(wait))
    }
}
