//! An attempt's slots given back to their gates when it made no call: all of them, or the
//! token gate's alone while it waits for its units in turn.

use super::Progress;
#[cfg(feature = "shared")]
use crate::gate::RateGate;

impl Progress<'_> {
    /// The attempt was refused, or gave up waiting, after its slots were reserved: it made no
    /// call, so each goes back to its gate (each gate takes back only what it can: see
    /// [`RateGate::refund`]).
    #[inline]
    pub(super) fn refund_slots(&mut self) {
        // Every attempt ends here: a policy with no gate pays one check.
        if self.settings.gated {
            self.refund_reserved();
        }
    }

    #[inline(never)]
    fn refund_reserved(&mut self) {
        let Some(reserved) = self
            .admission
            .as_mut()
            .map(|a| std::mem::take(&mut a.reserved))
        else {
            return;
        };
        if reserved.used {
            // A call cut short: spent, but a probe that taught nothing lets another go.
            let slots = [
                (self.rate(), reserved.rate),
                (self.token_rate(), reserved.tokens),
            ];
            for (gate, slot) in slots {
                if let Some((gate, slot)) = gate.zip(slot) {
                    gate.probe_ended(slot);
                }
            }
            return;
        }
        #[cfg(feature = "shared")]
        self.alone_given_back(reserved.alone);
        #[cfg(feature = "shared")]
        if let Some(remote) = reserved.remote {
            let links =
                [self.rate(), self.token_rate()].map(|gate| gate.and_then(RateGate::shared));
            for (link, slot) in links.into_iter().zip(remote.slots) {
                if let (Some(link), Some(slot)) = (link, slot) {
                    link.refund(slot);
                }
            }
        }
        if let (Some(gate), Some(slot)) = (self.rate(), reserved.rate) {
            gate.refund(slot);
        }
        #[cfg(feature = "shared")]
        if let Some((share, slot)) = self.rate().and_then(RateGate::batch).zip(reserved.share) {
            share.refund(slot);
        }
        if let (Some(gate), Some(slot)) = (self.token_rate(), reserved.tokens) {
            gate.refund(slot);
        }
    }

    /// The token gate's slot goes back, the rate gate's kept: the attempt waits in the token
    /// gate's room for its units.
    pub(super) fn refund_tokens(&mut self) {
        let slot = (self.admission.as_mut()).and_then(|a| a.reserved.tokens.take());
        if let Some((gate, slot)) = self.token_rate().zip(slot) {
            gate.refund(slot);
        }
    }
}
