//! A shared rate gate in Redis: one hash per gate holding its theoretical arrival time (µs on
//! Redis's clock), its throttle count and the latest throttle's end, expiring when that time
//! is past (the gate is then as new); one script per attempt reserves from it. Beside it,
//! `{gate}:seen` holds the users of the gate (each policy's gate, in each instance), each
//! told by one reservation a second and forgotten 5 s after: while Redis is down, each
//! user's local gate runs at its share of the rate.

use std::time::Duration;

use tokio::time::Instant;

use super::breaker::Message;
use super::scripts::{HOLD, REFUND, RESERVE};
use super::store::Store;
use crate::seams::{
    whole_micros, Ask, GateLink, Reservation, Reserved, Slot, Unavailable, SEEN_FOR,
};

/// The users of the gate, by their last heartbeat (in the gate's hash slot).
fn seen_key(gate: &GateLink) -> String {
    format!("{}:seen", gate.name())
}

impl Store {
    /// See [`SharedStore::refund`](crate::seams::SharedStore::refund).
    pub(crate) fn refund_slot(&self, gate: &GateLink, slot: Slot) {
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
            .arg(gate.credit_micros())
            .arg(gate.interval)
            .arg(message);
        self.spawn_eval(gate.sharing.timeout, gate.key.to_string(), invocation, None);
    }
}

/// See [`SharedStore::reserve`](crate::seams::SharedStore::reserve): one script for both gates.
/// On a Redis Cluster, a policy whose rate gate is per key and token gate per function (or the
/// reverse) has its gates in two slots: each is reserved by a script of its own, within one
/// `shared_timeout` together, and the first given back if the second does not grant (both or
/// neither still, though not in one step).
pub(crate) async fn reserve(
    store: &Store,
    reservation: &Reservation,
) -> Result<Reserved, Unavailable> {
    let mut asks = reservation.asks();
    // resil asks only for a policy with a shared gate.
    let first = asks.next().ok_or(Unavailable)?;
    let deadline = Instant::now() + first.gate().timeout();
    let limit = reservation.limit().map_or(-1, |limit| {
        i64::try_from(whole_micros(limit)).unwrap_or(i64::MAX)
    });
    let second = match asks.next() {
        Some(second) if store.apart(first.gate().name(), second.gate().name()) => second,
        second => {
            let both = [Some(first), second];
            return Ok(run(store, both, limit, deadline).await?.into());
        }
    };
    let (wait, slot) = match run(store, [Some(first), None], limit, deadline).await? {
        Reply::Granted(wait, [Some(slot), _]) => (wait, slot),
        other => return Ok(other.into()),
    };
    match run(store, [Some(second), None], limit, deadline).await {
        Ok(Reply::Granted(other, [Some(second), _])) => {
            Ok(Reserved::granted(wait.max(other), [slot, second]))
        }
        Ok(Reply::Refused(retry_in, [users, _])) => {
            store.refund_slot(first.gate(), slot);
            Ok(Reserved::refused(retry_in).with_instances([0, users]))
        }
        answer => {
            store.refund_slot(first.gate(), slot);
            Ok(answer?.into())
        }
    }
}

/// What one reservation script answered.
enum Reply {
    Granted(Duration, [Option<Slot>; 2]),
    /// The wait, and each gate's users its heartbeat counted.
    Refused(Duration, [u64; 2]),
}

impl From<Reply> for Reserved {
    fn from(reply: Reply) -> Self {
        match reply {
            Reply::Granted(wait, slots) => Reserved::granted(wait, slots.into_iter().flatten()),
            Reply::Refused(retry_in, users) => Reserved::refused(retry_in).with_instances(users),
        }
    }
}

/// One script for the asks given (whose keys share a hash slot), answered by `deadline`.
async fn run(
    store: &Store,
    asks: [Option<&Ask>; 2],
    limit: i64,
    deadline: Instant,
) -> Result<Reply, Unavailable> {
    let mut invocation = RESERVE.prepare_invoke();
    invocation.arg(limit).arg(whole_micros(SEEN_FOR));
    for ask in asks.iter().flatten() {
        let beat = match ask.heartbeat() {
            Some(_) => format!("{}:{}", store.instance(), ask.user()),
            None => String::new(),
        };
        invocation
            .key(ask.gate().name())
            .key(seen_key(ask.gate()))
            .arg(whole_micros(ask.interval()))
            .arg(whole_micros(ask.tolerance()))
            .arg(ask.cost())
            .arg(beat)
            .arg(whole_micros(ask.alone()))
            .arg(whole_micros(ask.alone_used()));
    }
    let key = asks
        .iter()
        .flatten()
        .next()
        .ok_or(Unavailable)?
        .gate()
        .name();
    let patience = deadline.saturating_duration_since(Instant::now());
    let reply = store
        .eval::<Vec<u64>>(patience, key, &invocation)
        .await
        .ok_or(Unavailable)?;
    match *reply.as_slice() {
        [1, wait, ref rest @ ..] => {
            let mut slots = rest.chunks_exact(5).map(|slot| {
                Slot::new(slot[0], slot[1], slot[2], Duration::from_micros(slot[3]))
                    .with_instances(slot[4])
            });
            let wait = Duration::from_micros(wait);
            Ok(Reply::Granted(wait, [slots.next(), slots.next()]))
        }
        [_, wait, ref users @ ..] => {
            let users = [0, 1].map(|at| users.get(at).copied().unwrap_or(0));
            Ok(Reply::Refused(Duration::from_micros(wait), users))
        }
        _ => Err(Unavailable),
    }
}
