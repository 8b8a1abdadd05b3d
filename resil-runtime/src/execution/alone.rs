//! The slots a policy's local gates grant alone while its shared store is down or late: each
//! charged to the store by every reservation until its caller gives it back (see
//! `GateLink::granted_alone`).

use super::admission::Reserved;
use super::Progress;
use crate::gate::RateGate;

impl<'p> Progress<'p> {
    /// For a policy with shared gates, the local gates granted `reserved` alone: a return of
    /// the store since `returns` revokes what is still waiting, and until each is given back,
    /// every reservation in the store charges it first.
    pub(super) fn granted_alone(&self, reserved: &mut Reserved, returns: Option<u64>) {
        reserved.returns = returns;
        let slots = [
            (self.rate(), reserved.rate, 1),
            (self.token_rate(), reserved.tokens, self.cost()),
        ];
        for ((gate, slot, cost), until) in slots.into_iter().zip(&mut reserved.alone) {
            if let Some((gate, slot)) = gate.zip(slot) {
                *until = gate.granted_alone(slot, cost);
            }
        }
    }

    /// For a policy with shared gates, slots the local gates granted alone went back unused:
    /// they are charged to the store no more.
    pub(super) fn alone_given_back(&self, alone: [u64; 2]) {
        let links = [self.rate(), self.token_rate()].map(|gate| gate.and_then(RateGate::shared));
        for (link, until) in links.into_iter().zip(alone) {
            if let Some(link) = link.filter(|_| until > 0) {
                link.alone_given_back(until);
            }
        }
    }

    /// The call is made with the attempt's slots: those granted alone are charged to the
    /// store for good (see `GateLink::alone_used`).
    pub(super) fn alone_used(&self) {
        let Some(reserved) = self.admission.as_ref().map(|a| &a.reserved) else {
            return;
        };
        let gates = [(self.rate(), 1), (self.token_rate(), self.cost())];
        for ((gate, cost), until) in gates.into_iter().zip(reserved.alone) {
            let Some(gate) = gate.filter(|_| until > 0) else {
                continue;
            };
            if let Some(link) = gate.shared() {
                link.alone_used(until, gate.taken_by(cost));
            }
        }
    }
}
