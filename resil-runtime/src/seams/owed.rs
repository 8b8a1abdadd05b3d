//! Slots given back while the store was down: kept by the gate's link and given back once the
//! store answers again. Dropped, each would stay spent in the store's schedule, and one
//! promised far ahead would hold back every caller of every instance until its time came.

use std::time::Duration;

use super::links::GateLink;
use super::slots::Slot;
use crate::sync::lock_std;

/// The most slots a link keeps given back while the store is down: those that end latest (a
/// slot that ends sooner holds the schedule back less, and passes first).
const OWED_KEPT: usize = 64;

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

    fn owe(&self, slot: Slot) {
        let mut owed = lock_std(&self.owed);
        if owed.len() >= OWED_KEPT {
            let soonest = (0..owed.len()).min_by_key(|&at| owed[at][1]);
            match soonest.filter(|&at| owed[at][1] < slot.end) {
                Some(at) => _ = owed.swap_remove(at),
                None => return,
            }
        }
        owed.push([slot.from, slot.end, slot.epoch]);
    }

    /// The slots given back while the store was down go back, if it answers now: before the
    /// next reservation asks it (or the next refund).
    pub(crate) fn pay_owed(&self) {
        if !self.sharing.store.usable() {
            return;
        }
        let owed = std::mem::take(&mut *lock_std(&self.owed));
        for [from, end, epoch] in owed {
            let slot = Slot::new(from, end, epoch, Duration::ZERO);
            self.sharing.store.refund(self, slot);
        }
    }
}
