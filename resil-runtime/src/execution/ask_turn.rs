//! An attempt's turn to ask a shared gate that orders its waiters (see `gate/asking.rs`):
//! waited for in priority order, held until the slot granted comes, let go otherwise.

use std::sync::Arc;

use tokio::time::Instant;

use super::in_turn::Room;
use super::slots::SharedStart;
use super::Progress;
use crate::deadline::later;
use crate::gate::{Asking, RateGate};
use crate::Rejected;

impl Progress<'_> {
    /// For a shared gate that orders its waiters (see `gate/asking.rs`), how this attempt
    /// waits for its turn to ask the store: `None` to ask now (it holds the turn). Refused at
    /// once when the callers before it take the gate's slots until after its deadline,
    /// counted from below (`(interval, burst)`: the gate's, in ns and units; `units`, what
    /// this attempt takes of it, and `each`, the least each caller before it takes: 1 and 1
    /// at the rate gate, its cost and 0 at the token gate, where a call may cost nothing).
    /// While the store is taken for late, the local gate decides, rather than each caller
    /// wait a whole timeout in turn (a policy that fails closed asks at once instead: only
    /// the store's silence refuses it); what it grants alone is taken again from the store
    /// once it answers in time (see [`Progress::slots_revoked`]).
    pub(super) fn ask_turn(
        &mut self,
        asking: &Arc<Asking>,
        (interval, burst, units, each): (u64, u64, u64, u64),
        now: Instant,
    ) -> Result<Option<SharedStart>, Rejected> {
        let start_by = self.start_by();
        let fails_closed = self.refuse_if_failing_closed().is_err();
        let Some(admission) = self.admission.as_mut() else {
            return Ok(None);
        };
        let held = &mut admission.reserved.asking;
        if asking.is_late(now) {
            // Let go, so that the callers waiting for the turn go on at once too.
            *held = None;
            return Ok((!fails_closed).then_some(SharedStart::Local));
        }
        if let Some(turn) = held.as_mut().filter(|turn| turn.is_current()) {
            turn.asks(units);
            return Ok(None);
        }
        // Taken over while it waited for something else: it asks again in turn.
        *held = None;
        let place = admission.place;
        let wait = asking.least_wait(place, (interval, burst), (units, each));
        if start_by.is_some_and(|start_by| later(now, wait) > start_by.max(now)) {
            return Err(Rejected::RateLimited { retry_in: wait });
        }
        Ok(Some(SharedStart::Turn(Box::pin(asking.wait(place, units)))))
    }

    /// The shared gate whose callers ask its store in turn, if one orders its waiters: the
    /// rate gate (its question takes the token gate's units too), else the token gate.
    pub(super) fn turn_gate(&self) -> Option<(&RateGate, Room)> {
        let asks = |gate: &&RateGate| gate.asking().is_some();
        (self.rate().filter(asks).map(|gate| (gate, Room::Rate)))
            .or_else(|| (self.token_rate().filter(asks)).map(|gate| (gate, Room::Tokens)))
    }

    /// Whether a gate's callers ask the store in turn ([`Progress::turn_gate`]) and its
    /// store is not taken for late: a slot its local gate granted alone meanwhile is taken
    /// again from the store.
    pub(super) fn asks_in_turn(&self) -> bool {
        let asking = self.turn_gate().and_then(|(gate, _)| gate.asking());
        asking.is_some_and(|asking| !asking.is_late(Instant::now()))
    }

    /// Lets go of this attempt's turn to ask, if it holds one.
    pub(super) fn let_go_turn(&mut self) {
        if let Some(admission) = &mut self.admission {
            admission.reserved.asking = None;
        }
    }
}
