//! A shared rate gate in Redis: one hash per gate holding its theoretical arrival time (µs on
//! Redis's clock), its throttle count and the latest throttle's end, expiring when that time
//! is past (the gate is then as new); one script per attempt reserves from it.

use std::sync::Arc;
use std::time::Duration;

use super::breaker::Message;
use super::scripts::{HOLD, REFUND, RESERVE};
use super::store::Store;
use crate::seams::{whole_micros, GateLink, Granted, RemoteSlot, SharedSlots, MAX_MICROS};
use crate::Rejected;

impl Store {
    /// See [`SharedStore::refund`](crate::seams::SharedStore::refund).
    pub(crate) fn refund_slot(&self, gate: &GateLink, slot: RemoteSlot) {
        let mut invocation = REFUND.key(&*gate.key);
        invocation.arg(slot.end).arg(slot.from).arg(slot.epoch);
        self.spawn_eval(gate.sharing.timeout, gate.key.to_string(), invocation, None);
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
        self.spawn_eval(gate.sharing.timeout, gate.key.to_string(), invocation, None);
    }
}

/// An attempt's shared gates, each with its cost and its local gate's interval now.
type Gates = [Option<(Arc<GateLink>, u64, u64)>; 2];

/// See [`SharedStore::reserve`](crate::seams::SharedStore::reserve): one script for both gates.
/// On a Redis Cluster, a policy whose rate gate is per key and token gate per function (or the
/// reverse) has its gates in two slots: each is reserved by a script of its own, and the first
/// given back if the second refuses (both or neither still, though not in one step).
pub(crate) async fn reserve(
    store: Arc<Store>,
    gates: Gates,
    limit: Option<Duration>,
) -> SharedSlots {
    let [Some(rate), Some(tokens)] = &gates else {
        return reserve_together(store, gates, limit).await;
    };
    if !store.apart(&rate.0.key, &tokens.0.key) {
        return reserve_together(store, gates, limit).await;
    }
    let [rate, tokens] = gates;
    let first = reserve_together(Arc::clone(&store), [rate.clone(), None], limit).await;
    let SharedSlots::Granted(first) = first else {
        return first;
    };
    match reserve_together(Arc::clone(&store), [None, tokens], limit).await {
        SharedSlots::Granted(second) => SharedSlots::Granted(Granted {
            wait: first.wait.max(second.wait),
            slots: [first.slots[0], second.slots[1]],
        }),
        refused => {
            if let (Some((gate, ..)), Some(slot)) = (rate, first.slots[0]) {
                store.refund_slot(&gate, slot);
            }
            refused
        }
    }
}

/// One script for the gates given, whose keys share a hash slot.
async fn reserve_together(store: Arc<Store>, gates: Gates, limit: Option<Duration>) -> SharedSlots {
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
    invocation.arg(limit);
    for (gate, cost, interval) in gates.iter().flatten() {
        let (interval, tolerance) = gate.schedule(*cost, *interval);
        invocation
            .key(&*gate.key)
            .arg(interval)
            .arg(tolerance)
            .arg((*cost).min(MAX_MICROS));
    }
    let Some((first, ..)) = gates.iter().flatten().next() else {
        return SharedSlots::Unavailable;
    };
    let Some(reply) = store
        .eval::<Vec<u64>>(timeout, &first.key, &invocation)
        .await
    else {
        return SharedSlots::Unavailable;
    };
    match *reply.as_slice() {
        [1, wait, ref rest @ ..] => {
            let mut slots = rest.chunks_exact(4).map(|slot| RemoteSlot {
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
