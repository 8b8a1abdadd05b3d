//! Slots given back while the store was down: kept by the gate's link and given back once the
//! store answers again. Dropped, each would stay spent in the store's schedule, and one
//! promised far ahead would hold back every caller of every instance until its time came.

use std::time::Duration;

use super::kept::keep_stretch;
use super::links::GateLink;
use super::slots::Slot;

/// The most stretches of slots a link keeps given back while the store is down, as the store
/// keeps them: those that end latest (one that ends sooner holds the schedule back less, and
/// passes first).
const OWED_KEPT: usize = 256;

impl GateLink {
    /// Gives `slot` back to the store, now if it answers, else once it does (see
    /// [`GateLink::pay_owed`]).
    pub(crate) fn refund(&self, slot: Slot) {
        if !self.sharing.store.usable() {
            return self.owe(slot);
        }
        self.pay_owed();
        self.sharing.store.refund(self, slot);
    }

    /// Keeps `slot` for the store, joined to the stretch it adjoins (a queue that gives up in
    /// order makes one, in any order one per caller still waiting between them). Only the
    /// latest epoch's: the store ignores a slot a hold revoked.
    fn owe(&self, slot: Slot) {
        self.apart(true, |apart| {
            let (epoch, stretches) = &mut apart.owed;
            if slot.epoch < *epoch {
                return;
            }
            if slot.epoch > *epoch {
                (*epoch, *stretches) = (slot.epoch, Vec::new());
            }
            keep_stretch(stretches, (slot.from, slot.end), OWED_KEPT);
        });
    }

    /// The slots given back while the store was down go back, if it answers now: when it
    /// says it is back, and before the next reservation asks it (or the next refund), for a
    /// store that does not say.
    pub(crate) fn pay_owed(&self) {
        if !self.sharing.store.usable() {
            return;
        }
        let owed = self.apart(false, |apart| {
            (apart.owed.0, std::mem::take(&mut apart.owed.1))
        });
        let Some((epoch, owed)) = owed else {
            return;
        };
        for (from, end) in owed {
            let slot = Slot::new(from, end, epoch, Duration::ZERO);
            self.sharing.store.refund(self, slot);
        }
    }
}
