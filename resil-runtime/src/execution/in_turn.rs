//! An attempt's wait in its rate gate's waiting room, for a policy that serves its waiters by
//! priority: the gate of all calls', or its key's, held with the key meanwhile.

#[cfg(feature = "shared")]
use super::admission::Reserved;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Progress;
use crate::gate::{RateGate, Slot, Turn};
use crate::policy::Scope;
use crate::priority::Served;
use crate::registry::Held;
use crate::Rejected;

/// An attempt's wait in a rate gate's waiting room, served by priority: boxed to one word, as
/// an attempt's other rare waits are, so that every attempt stays small.
pub(super) type TurnWait<'p> = Pin<Box<GateTurn<'p>>>;

/// A wait in the room of the gate of all calls, or of the call's key's gate.
pub(super) enum GateTurn<'p> {
    All(Turn<&'p RateGate>),
    Key(Turn<KeyGate>),
}

impl Future for GateTurn<'_> {
    type Output = Result<(Slot, Served), Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            GateTurn::All(turn) => Pin::new(turn).poll(cx),
            GateTurn::Key(turn) => Pin::new(turn).poll(cx),
        }
    }
}

/// A key's rate gate, held with its key for as long as a caller waits in its room.
pub(super) struct KeyGate(Held<Scope>);

impl std::ops::Deref for KeyGate {
    type Target = RateGate;

    fn deref(&self) -> &RateGate {
        self.0
            .rate
            .as_ref()
            .expect("a key's gate: checked before the wait")
    }
}

impl<'p> Progress<'p> {
    /// For a policy that serves its waiters by priority, the wait in the rate gate's waiting
    /// room of an attempt that found no slot free: the slots it just reserved go back (they
    /// are the gate's latest), and it waits in turn instead. `None`: the gate does not order
    /// its waiters, and the attempt waits for the slots it reserved. Out of line: only an
    /// attempt that must wait gets here.
    #[inline(never)]
    pub(super) fn wait_in_turn(&mut self) -> Result<Option<TurnWait<'p>>, Rejected> {
        let settings = self.settings;
        let key = (self.admission.as_ref())
            .and_then(|a| a.scope.as_ref())
            .filter(|scope| scope.rate.as_ref().is_some_and(RateGate::orders));
        let ordered = settings.rate.as_ref().filter(|gate| gate.orders());
        if ordered.is_none() && key.is_none() {
            return Ok(None);
        }
        let key = key.cloned();
        self.refund_slots();
        // The store's returns when the local gate took over, for the slot it will give.
        #[cfg(feature = "shared")]
        self.hold(Reserved {
            returns: self.store_returns(),
            ..Reserved::default()
        });
        let place = self
            .admission
            .as_ref()
            .map_or_else(Default::default, |a| a.place);
        let deadline = self.start_by();
        Ok(Some(match (ordered, key) {
            (Some(gate), _) => Box::pin(GateTurn::All(Turn::join(gate, place, deadline)?)),
            (None, Some(key)) => {
                Box::pin(GateTurn::Key(Turn::join(KeyGate(key), place, deadline)?))
            }
            (None, None) => return Ok(None),
        }))
    }
}
