//! An attempt's slot in the token gate, beside its rate gate's: none beside a wait for a
//! probe's answer.

use std::time::Duration;

use super::admission::Reserved;
use super::Progress;
use crate::Rejected;

impl Progress<'_> {
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
