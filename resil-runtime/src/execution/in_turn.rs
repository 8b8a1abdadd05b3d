//! An attempt's wait in a gate's waiting room, for a policy that serves its waiters by
//! priority: the rate gate's for its slot, then the token gate's for its units; the gate of
//! all calls', or its key's, held with the key meanwhile.

#[cfg(feature = "shared")]
use super::admission::Reserved;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::Progress;
use crate::deadline::later;
use crate::gate::{RateGate, Slot, Turn, SLOT_MISSED};
use crate::policy::Scope;
use crate::priority::Served;
use crate::registry::Held;
use crate::Rejected;

/// An attempt's wait in a rate gate's waiting room, served by priority: boxed to one word, as
/// an attempt's other rare waits are, so that every attempt stays small.
pub(super) type TurnWait<'p> = Pin<Box<GateTurn<'p>>>;

/// What comes after a gate's waiting room served an attempt.
pub(super) enum Took<'p> {
    /// The wait until its slots are due.
    Wait(Duration),
    /// A wait in a gate's room: the token gate's for its units, or the rate gate's again
    /// for a request slot that is not free when its units come.
    Turn(TurnWait<'p>),
}

/// Which gate's room an attempt waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
    /// The rate gate's, for a slot.
    Rate,
    /// The token gate's, for the call's units.
    Tokens,
}

impl Room {
    /// The name listeners hear for the wait (`Event::Served`'s `wait`).
    pub(super) fn label(self) -> &'static str {
        match self {
            Room::Rate => "rate",
            Room::Tokens => "token_rate",
        }
    }
}

/// A wait in the room of a gate of all calls, or of the call's key's gate.
pub(super) struct GateTurn<'p> {
    turn: InRoom<'p>,
    room: Room,
}

enum InRoom<'p> {
    All(Turn<&'p RateGate>),
    Key(Turn<KeyGate>),
}

impl Future for GateTurn<'_> {
    type Output = Result<(Slot, Served, Room), Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let served = match &mut this.turn {
            InRoom::All(turn) => Pin::new(turn).poll(cx),
            InRoom::Key(turn) => Pin::new(turn).poll(cx),
        };
        served.map_ok(|(slot, served)| (slot, served, this.room))
    }
}

/// A key's rate or token gate, held with its key for as long as a caller waits in its room.
pub(super) struct KeyGate(Held<Scope>, Room);

impl std::ops::Deref for KeyGate {
    type Target = RateGate;

    fn deref(&self) -> &RateGate {
        let gate = match self.1 {
            Room::Rate => &self.0.rate,
            Room::Tokens => &self.0.token_rate,
        };
        gate.as_ref()
            .expect("a key's gate: checked before the wait")
    }
}

impl<'p> Progress<'p> {
    /// For a policy that serves its waiters by priority, the wait in a gate's waiting room of
    /// an attempt that found no slot free: the rate gate's while its slot is still to come,
    /// otherwise the token gate's. The slots it just reserved there go back (they are the
    /// gate's latest), and it waits in turn instead. `None`: neither gate orders its waiters,
    /// and the attempt waits for the slots it reserved. Out of line: only an attempt that must
    /// wait gets here.
    #[inline(never)]
    pub(super) fn wait_in_turn(&mut self) -> Result<Option<TurnWait<'p>>, Rejected> {
        let orders = |gate: Option<&RateGate>| gate.is_some_and(RateGate::orders);
        let (rate, tokens) = (orders(self.rate()), orders(self.token_rate()));
        let room = match (rate, tokens) {
            (true, true) if self.rate_slot_wait().is_some_and(|wait| wait.is_zero()) => {
                Room::Tokens
            }
            (true, _) => Room::Rate,
            (false, true) => Room::Tokens,
            (false, false) => return Ok(None),
        };
        self.join_room(room).map(Some)
    }

    /// The wait until the rate gate's slot this attempt holds is due, if it holds one.
    pub(super) fn rate_slot_wait(&self) -> Option<Duration> {
        let due = self.rate_slot_due()?;
        Some(due.saturating_duration_since(Instant::now()))
    }

    /// When the rate gate's slot this attempt holds is due, if it holds one.
    fn rate_slot_due(&self) -> Option<Instant> {
        let slot = self.admission.as_ref()?.reserved.rate?;
        Some(self.rate()?.due_at(slot, 1))
    }

    /// This attempt holds its request slot, due now, and waits in the token gate's room for
    /// its units, which come `wait` later in arrival order: past [`SLOT_MISSED`], its request
    /// slot goes back (at once, most often: it is the latest, or the rate gate's room served
    /// it and its next books the slot after it when it polls), and it takes one of the moment
    /// once its units come ([`Progress::rate_slot_after_units`]). Held while it waits for its
    /// units, the slot would count the call when the slot came, and the calls after it start
    /// within a period of the call's own late start: one more than the gate's ceiling (the
    /// simulator's two-gate class; in arrival order, see [`Progress::defer_earlier`]). Not a
    /// shared gate's, which the store spaced from other instances'.
    pub(super) fn defer_rate_slot(&mut self, wait: Duration) {
        if wait <= SLOT_MISSED || !self.rate().is_some_and(RateGate::is_local) {
            return;
        }
        let slot = (self.admission.as_mut()).and_then(|a| a.reserved.rate.take());
        if let Some((gate, slot)) = self.rate().zip(slot) {
            gate.refund(slot);
        }
    }

    /// The token gate's room served this attempt: the wait until its request slot is due,
    /// reserved now if it was deferred while it waited for its units (see
    /// [`Progress::defer_rate_slot`]), or refused by the deadline (its units then go back).
    /// A request slot that is not free within [`SLOT_MISSED`] (the rate gate held by a 429
    /// or an answer, or its room's waiters before it) is waited for in turn in the rate
    /// gate's room, the units given back: held, they would count the call while it waits
    /// (the token gate's ceiling exceeded by as many units as came meanwhile), and taken
    /// outside the room, the slot would pass its more urgent waiters.
    pub(super) fn rate_slot_after_units(&mut self) -> Result<Took<'p>, Rejected> {
        // A request slot held while the units took longer than foreseen, due more than
        // SLOT_MISSED ago, is given back too: the gate counted it then.
        let now = Instant::now();
        if self
            .rate_slot_due()
            .is_some_and(|due| later(due, SLOT_MISSED) < now)
        {
            self.defer_rate_slot(crate::deadline::NEVER);
        }
        let deferred = (self.admission.as_ref()).is_some_and(|a| a.reserved.rate.is_none());
        let Some(gate) = self.rate().filter(|gate| deferred && gate.is_local()) else {
            return Ok(Took::Wait(self.rate_slot_wait().unwrap_or_default()));
        };
        let (in_turn, start_by) = (gate.orders(), self.start_by());
        match gate.reserve_slot(1, gate.refuses_by(start_by)) {
            Ok((wait, slot)) => {
                if let Some(admission) = self.admission.as_mut() {
                    admission.reserved.rate = Some(slot);
                }
                // The room judges a wait past the deadline too: refused at once, as there.
                let late = start_by.is_some_and(|by| later(now, wait) > by);
                if in_turn && (wait > SLOT_MISSED || late) {
                    return self.join_room(Room::Rate).map(Took::Turn);
                }
                Ok(Took::Wait(wait))
            }
            Err(refused) => {
                self.refund_slots();
                Err(refused)
            }
        }
    }

    /// The attempt waits in `room`, which orders its waiters: what it reserved there goes back
    /// (in the rate gate's, the token gate's slot too: it is taken once the rate gate served
    /// the attempt).
    pub(super) fn join_room(&mut self, room: Room) -> Result<TurnWait<'p>, Rejected> {
        let settings = self.settings;
        let cost = match room {
            Room::Rate => {
                self.refund_slots();
                // The store's returns when the local gate took over, for the slot it will give.
                #[cfg(feature = "shared")]
                self.hold(Reserved {
                    returns: self.store_returns(),
                    ..Reserved::default()
                });
                1
            }
            Room::Tokens => {
                self.refund_tokens();
                let cost = self.cost();
                // An auto gate that knows nothing yet serves no one before its probe's answer,
                // whenever that comes.
                let gate = self.token_rate().filter(|gate| !gate.probing());
                let wait = gate.and_then(|gate| gate.wait_for(cost));
                self.defer_rate_slot(wait.unwrap_or(crate::deadline::NEVER));
                cost
            }
        };
        let admission = self.admission.as_ref();
        let place = admission.map_or_else(Default::default, |a| a.place);
        let deadline = self.start_by();
        let of_all = match room {
            Room::Rate => settings.rate.as_ref(),
            Room::Tokens => settings.token_rate.as_ref(),
        };
        let turn = match of_all {
            Some(gate) => InRoom::All(Turn::join(gate, place, deadline, cost)?),
            None => {
                let key = admission.and_then(|a| a.scope.clone());
                let key = key.expect("a gate of all calls or of the call's key orders here");
                InRoom::Key(Turn::join(KeyGate(key, room), place, deadline, cost)?)
            }
        };
        Ok(Box::pin(GateTurn { turn, room }))
    }
}
