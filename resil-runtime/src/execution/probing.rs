//! An auto gate that knows nothing yet beside a shared gate: the store has no rate to keep for
//! the auto gate, and the other gate's slot is still the store's to grant. Only the caller that
//! takes the auto gate's probe asks the store, for the other gate alone; the others wait for
//! the probe's answer, holding nothing. (Before, every call went local while a gate probed:
//! two instances each ran the shared gate at its whole rate; the simulator's seed 1227.)

use super::Progress;
use crate::gate::{RateGate, Slot};
use crate::Rejected;

/// Which of a policy's two gates probe: `[rate, tokens]`.
pub(super) type Probing = [bool; 2];

/// Whether `gate` is an auto gate that knows nothing yet.
pub(super) fn probes(gate: Option<&RateGate>) -> bool {
    gate.is_some_and(RateGate::probing)
}

impl Progress<'_> {
    /// Takes the probe of each gate that probes, kept in the attempt's reservation while it
    /// asks the store for the other gate: whether it took them all. `false`: another call's
    /// probe is out, and the local gates make this one wait for its answer (its turn to ask
    /// goes to the next meanwhile). A gate whose probe was answered meanwhile gives its slot
    /// back and is asked of the store with the other (`probing` says so).
    pub(super) fn take_probes(&mut self, probing: &mut Probing) -> Result<bool, Rejected> {
        let start_by = self.start_by();
        let costs = [1, self.cost()];
        let mut taken = [None; 2];
        for at in 0..2 {
            let gate = [self.rate(), self.token_rate()][at];
            let Some(gate) = gate.filter(|_| probing[at]) else {
                continue;
            };
            match gate.reserve_slot(costs[at], start_by) {
                Ok((_, slot)) if slot.is_provisional() => {
                    self.give_back(taken);
                    self.let_go_turn();
                    return Ok(false);
                }
                Ok((_, probe)) if gate.probing() => taken[at] = Some(probe),
                Ok((_, learnt)) => {
                    gate.refund(learnt);
                    probing[at] = false;
                }
                Err(refused) => {
                    self.give_back(taken);
                    return Err(refused);
                }
            }
        }
        if let Some(admission) = &mut self.admission {
            [admission.reserved.rate, admission.reserved.tokens] = taken;
        }
        Ok(true)
    }

    /// The probes taken before asking the store, out of the attempt's reservation.
    pub(super) fn probes_taken(&mut self) -> [Option<Slot>; 2] {
        self.admission.as_mut().map_or([None; 2], |admission| {
            let reserved = &mut admission.reserved;
            [reserved.rate.take(), reserved.tokens.take()]
        })
    }

    /// The store did not answer: the probes taken go back, for the local gates to decide.
    pub(super) fn give_probes_back(&mut self) {
        let taken = self.probes_taken();
        self.give_back(taken);
    }

    fn give_back(&self, slots: [Option<Slot>; 2]) {
        for (gate, slot) in [self.rate(), self.token_rate()].into_iter().zip(slots) {
            if let Some((gate, slot)) = gate.zip(slot) {
                gate.refund(slot);
            }
        }
    }
}
