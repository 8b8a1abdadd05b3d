//! The slots a gate's local gate granted alone (its store down or late), as its link keeps
//! them for the store: every reservation charges the store's schedule with the latest end of
//! those still held ([`Ask::alone`](super::Ask::alone)), and with the latest of those whose
//! call was made as a charge that stays ([`Ask::alone_used`](super::Ask::alone_used)); one
//! given back unused is charged no more.

use super::kept::room_for;
use super::links::GateLink;

/// The most slots granted alone a link keeps: those that end latest (a charge is the latest
/// end; one given back among them lets the next latest be charged).
const ALONE_KEPT: usize = 256;

/// What a reservation charges the store for the slots granted alone, in ns past now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Alone {
    /// The latest end of those still held, used or not.
    pub(crate) held: u64,
    /// The latest end of those whose call was made: a charge no slot given back withdraws.
    pub(crate) used: u64,
}

impl GateLink {
    /// The local gate granted a slot alone that runs its schedule `ahead` (ns) past now:
    /// until its caller gives it back (or the schedule passes its end), every reservation in
    /// the store charges it first. What marks it ([`GateLink::alone_used`],
    /// [`GateLink::alone_given_back`]).
    pub(crate) fn granted_alone(&self, ahead: u64) -> u64 {
        let now = self.since_created();
        let until = now.saturating_add(ahead.max(1));
        self.apart(true, |apart| {
            let alone = &mut apart.alone;
            alone.retain(|&(end, _)| end > now);
            // Only the latest ends are charged: the soonest may go.
            if !room_for(alone, until, ALONE_KEPT, |&(end, _)| end) {
                return;
            }
            // A key's gate mostly holds one slot granted alone at a time: room for one keeps a
            // key within `Keys::MAX_BYTES_PER_SHARED_KEY` while its store is down.
            if alone.capacity() == 0 {
                alone.reserve_exact(1);
            }
            alone.push((until, false));
        });
        until
    }

    /// The call of the slot granted alone that ends at `until` was made now, its units
    /// taking the schedule `ahead` (ns) past now: its charge stays, whatever the slot that
    /// carries it to the store becomes, and runs at least that far (a call may start after
    /// its slot, held by a ceiling).
    pub(crate) fn alone_used(&self, until: u64, ahead: u64) {
        let now = self.since_created();
        self.apart(false, |apart| {
            if let Some(held) = apart.alone.iter_mut().find(|h| **h == (until, false)) {
                *held = (until.max(now.saturating_add(ahead)), true);
            }
        });
    }

    /// The slot granted alone that ends at `until` went back unused (its caller gave up, or
    /// the store's return revoked it, and it asks the store instead): charged no more.
    pub(crate) fn alone_given_back(&self, until: u64) {
        self.apart(false, |apart| {
            if let Some(at) = apart.alone.iter().position(|h| *h == (until, false)) {
                apart.alone.swap_remove(at);
            }
        });
    }

    /// What the slots granted alone and still held charge a reservation now. Only those: the
    /// rest of the local schedule is the store's own slots mirrored, or was given back.
    pub(crate) fn ahead_alone(&self) -> Alone {
        let now = self.since_created();
        let alone = self.apart(false, |apart| {
            apart.alone.retain(|&(end, _)| end > now);
            let latest = |only_used: bool| {
                (apart.alone.iter())
                    .filter(|&&(_, used)| used || !only_used)
                    .map(|&(end, _)| end - now)
                    .max()
                    .unwrap_or(0)
            };
            Alone {
                held: latest(false),
                used: latest(true),
            }
        });
        alone.unwrap_or_default()
    }
}
