//! A shared rate gate in Redis: one hash per gate holding its theoretical arrival time (µs on
//! Redis's clock), its throttle count and the latest throttle's end, expiring when that time
//! is past (the gate is then as new); one script per attempt reserves from it. Beside it,
//! `{gate}:seen` holds the instances that use the gate, each told by one reservation a second
//! and forgotten 5 s after: while Redis is down, each instance's local gate runs at its share
//! of the rate.

use std::time::Duration;

use super::breaker::Message;
use super::scripts::{HOLD, REFUND, RESERVE};
use super::store::Store;
use crate::seams::{whole_micros, GateLink, Reservation, Reserved, Slot, Unavailable, SEEN_FOR};

/// The instances that use the gate, by their last heartbeat.
fn seen_key(gate: &GateLink) -> String {
    format!("{}:seen", gate.name())
}

impl Store {
    /// See [`SharedStore::refund`](crate::seams::SharedStore::refund).
    pub(crate) fn refund_slot(&self, gate: &GateLink, slot: Slot) {
        let mut invocation = REFUND.key(&*gate.key);
        invocation.arg(slot.end).arg(slot.from).arg(slot.epoch);
        self.spawn_eval(gate.sharing.timeout, invocation, None);
    }

    /// See [`SharedStore::hold`](crate::seams::SharedStore::hold).
    pub(crate) fn hold_gate(&self, gate: &GateLink, wait: Duration) {
        let wait = whole_micros(wait);
        let message = Message::held(self.instance(), wait, &gate.key);
        let mut invocation = HOLD.key(&*gate.key);
        invocation
            .arg(wait)
            .arg(gate.credit_micros())
            .arg(gate.interval)
            .arg(message);
        self.spawn_eval(gate.sharing.timeout, invocation, None);
    }
}

/// See [`SharedStore::reserve`](crate::seams::SharedStore::reserve): one script for both gates.
pub(crate) async fn reserve(
    store: &Store,
    reservation: &Reservation,
) -> Result<Reserved, Unavailable> {
    // resil asks only for a policy with a shared gate.
    let timeout = reservation
        .asks()
        .next()
        .map(|ask| ask.gate().timeout())
        .ok_or(Unavailable)?;
    let limit = reservation.limit().map_or(-1, |limit| {
        i64::try_from(whole_micros(limit)).unwrap_or(i64::MAX)
    });
    let mut invocation = RESERVE.prepare_invoke();
    invocation.arg(limit).arg(whole_micros(SEEN_FOR));
    for ask in reservation.asks() {
        let beat = match ask.heartbeat() {
            Some(_) => store.instance(),
            None => "",
        };
        invocation
            .key(ask.gate().name())
            .key(seen_key(ask.gate()))
            .arg(whole_micros(ask.interval()))
            .arg(whole_micros(ask.tolerance()))
            .arg(ask.cost())
            .arg(beat);
    }
    let reply = store
        .eval::<Vec<u64>>(timeout, &invocation)
        .await
        .ok_or(Unavailable)?;
    match *reply.as_slice() {
        [1, wait, ref rest @ ..] => {
            let slots = rest.chunks_exact(5).map(|slot| {
                Slot::new(slot[0], slot[1], slot[2], Duration::from_micros(slot[3]))
                    .with_instances(slot[4])
            });
            Ok(Reserved::granted(Duration::from_micros(wait), slots))
        }
        [_, wait, ..] => Ok(Reserved::refused(Duration::from_micros(wait))),
        _ => Err(Unavailable),
    }
}
