//! A shared rate gate in Redis: one hash per gate holding its theoretical arrival time (µs on
//! Redis's clock), its throttle count and the latest throttle's end, expiring when that time
//! is past (the gate is then as new); one script per attempt reserves from it. Beside it,
//! `{gate}:seen` holds the instances that use the gate, each told by one reservation a second
//! and forgotten 5 s after: while Redis is down, each instance's local gate runs at its share
//! of the rate.

use std::sync::Arc;
use std::time::Duration;

use super::breaker::Message;
use super::scripts::{HOLD, REFUND, RESERVE};
use super::store::Store;
use crate::seams::{
    whole_micros, GateLink, Granted, RemoteSlot, SharedSlots, MAX_MICROS, SEEN_FOR,
};
use crate::Rejected;

/// The instances that use the gate, by their last heartbeat.
fn seen_key(gate: &GateLink) -> String {
    format!("{}:seen", gate.key)
}

impl Store {
    /// See [`SharedStore::refund`](crate::seams::SharedStore::refund).
    pub(crate) fn refund_slot(&self, gate: &GateLink, slot: RemoteSlot) {
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
            .arg(gate.credit())
            .arg(gate.interval)
            .arg(message);
        self.spawn_eval(gate.sharing.timeout, invocation, None);
    }
}

/// See [`SharedStore::reserve`](crate::seams::SharedStore::reserve): one script for both gates.
pub(crate) async fn reserve(
    store: Arc<Store>,
    gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
    limit: Option<Duration>,
) -> SharedSlots {
    // The seam asks only for a policy with a shared gate.
    let Some(timeout) = gates
        .iter()
        .flatten()
        .next()
        .map(|(gate, ..)| gate.sharing.timeout)
    else {
        return SharedSlots::Unavailable;
    };
    let limit = limit.map_or(-1, |limit| {
        i64::try_from(whole_micros(limit)).unwrap_or(i64::MAX)
    });
    let mut invocation = RESERVE.prepare_invoke();
    invocation.arg(limit).arg(whole_micros(SEEN_FOR));
    for (gate, cost, interval) in gates.iter().flatten() {
        let (interval, tolerance) = gate.schedule(*cost, *interval);
        let beat = if gate.beat_due() {
            store.instance()
        } else {
            ""
        };
        invocation
            .key(&*gate.key)
            .key(seen_key(gate))
            .arg(interval)
            .arg(tolerance)
            .arg((*cost).min(MAX_MICROS))
            .arg(beat);
    }
    let Some(reply) = store.eval::<Vec<u64>>(timeout, &invocation).await else {
        return SharedSlots::Unavailable;
    };
    match *reply.as_slice() {
        [1, wait, ref rest @ ..] => {
            for ((gate, ..), slot) in gates.iter().flatten().zip(rest.chunks_exact(5)) {
                gate.saw(slot[4]);
            }
            let mut slots = rest.chunks_exact(5).map(|slot| RemoteSlot {
                from: slot[0],
                end: slot[1],
                epoch: slot[2],
                ahead: Duration::from_micros(slot[3]),
            });
            let slots = gates.map(|gate| gate.and_then(|_| slots.next()));
            SharedSlots::Granted(Granted {
                wait: Duration::from_micros(wait),
                slots,
            })
        }
        [_, wait, ..] => SharedSlots::Refused(Rejected::RateLimited {
            retry_in: Duration::from_micros(wait),
        }),
        _ => SharedSlots::Unavailable,
    }
}
