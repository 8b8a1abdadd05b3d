//! [`GateLink`]: a rate gate's state in Redis, reserved from by one script per attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::breaker::Message;
use super::scripts::{HOLD, REFUND, RESERVE};
use super::Sharing;
use crate::Rejected;

/// The largest number of µs handed to a script: far from where Lua's doubles lose units.
const MAX_MICROS: u64 = 1 << 50;

/// A rate gate's place in Redis: one hash holding its theoretical arrival time (µs on
/// Redis's clock), its throttle count and the latest throttle's end, expiring when that time
/// is past (the gate is then as new).
#[derive(Debug)]
pub(crate) struct GateLink {
    sharing: Sharing,
    key: Arc<str>,
    /// The declared interval between units, in µs.
    interval: u64,
    burst: u64,
    /// Throttles that other instances saw (each revokes the slots this instance waits for).
    holds: AtomicU64,
}

/// What the shared gates said about an attempt.
#[derive(Debug)]
pub(crate) enum SharedSlots {
    /// Reserved in Redis.
    Granted(Granted),
    /// Redis's gate would make the attempt wait past its deadline: nothing reserved.
    Refused(Rejected),
    /// Redis did not answer in time: the local gates decide (or, failing closed, refuse).
    Unavailable,
}

/// Slots Redis reserved: the wait until the later of them, and each gate's (the rate gate's,
/// then the token gate's).
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) wait: Duration,
    pub(crate) slots: RemoteSlots,
}

/// The slots of an attempt in the shared gates: the rate gate's, then the token gate's.
pub(crate) type RemoteSlots = [Option<RemoteSlot>; 2];

/// A slot Redis promised: the gate's schedule before and after it (µs on Redis's clock), its
/// throttle count then, and how far past now the schedule runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteSlot {
    from: u64,
    end: u64,
    epoch: u64,
    pub(crate) ahead: Duration,
}

impl GateLink {
    /// The link of a gate whose Redis key is `resil:{what}:{name}` and whose slots are
    /// `interval` apart (nanoseconds, as the local gate's), `burst` of them at once.
    pub(crate) fn new(
        sharing: &Sharing,
        what: &str,
        name: &str,
        interval: u64,
        burst: u64,
    ) -> Arc<Self> {
        Self::listed(
            sharing,
            format!("resil:{what}:{name}"),
            micros(interval),
            burst,
        )
    }

    /// The burst's credit, in µs.
    fn credit(&self) -> u64 {
        self.interval.saturating_mul(self.burst).min(MAX_MICROS)
    }

    /// The same gate for one key of a keyed policy: `…:{label=key}`.
    pub(crate) fn for_key(&self, key: &str) -> Arc<Self> {
        let key = format!("{}:{key}", self.key);
        Self::listed(&self.sharing, key, self.interval, self.burst)
    }

    /// A link the store lists, so that other instances' throttles reach it.
    fn listed(sharing: &Sharing, key: String, interval: u64, burst: u64) -> Arc<Self> {
        let link = Arc::new(GateLink {
            sharing: sharing.clone(),
            key: Arc::from(key),
            interval,
            burst,
            holds: AtomicU64::new(0),
        });
        sharing.store.register_gate(&link.key, &link);
        link
    }

    pub(crate) fn fail_closed(&self) -> bool {
        self.sharing.fail_closed
    }

    /// Whether to ask Redis at all: not while it is known to be down (the local gate then
    /// decides at once, with no wait for a timeout).
    pub(crate) fn is_available(&self) -> bool {
        self.sharing.store.usable()
    }

    /// Throttles other instances saw: part of the local gate's epoch.
    pub(crate) fn holds(&self) -> u64 {
        self.holds.load(Ordering::Acquire)
    }

    /// Another instance was throttled: the slots this instance waits for are revoked (they
    /// take new ones from Redis, after the wait).
    pub(crate) fn peer_held(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives `slot` back to Redis, reserved but not used (only while it is the latest
    /// promised and no throttle revoked it: see the script).
    pub(crate) fn refund(&self, slot: RemoteSlot) {
        let mut invocation = REFUND.key(&*self.key);
        invocation.arg(slot.end).arg(slot.from).arg(slot.epoch);
        self.sharing
            .store
            .spawn_eval(self.sharing.timeout, invocation, None);
    }

    /// A provider throttled a call: every instance's gate holds its slots for `wait`, and the
    /// slots they promised are revoked.
    pub(crate) fn hold(&self, wait: Duration) {
        let wait = u64::try_from(wait.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_MICROS);
        let message = Message::held(self.sharing.store.instance(), wait, &self.key);
        let mut invocation = HOLD.key(&*self.key);
        invocation
            .arg(wait)
            .arg(self.credit())
            .arg(self.interval)
            .arg(message);
        self.sharing
            .store
            .spawn_eval(self.sharing.timeout, invocation, None);
    }
}

/// Nanoseconds in whole µs, rounded up (a slot is never closer than the local gate's).
fn micros(nanos: u64) -> u64 {
    nanos.div_ceil(1000).clamp(1, MAX_MICROS)
}

/// Reserves an attempt's slots in the shared gates (the rate gate's and the token gate's, with
/// their costs and the intervals their local gates run at, slowed down or not) at once: both
/// or neither. `limit` is the longest wait the deadline allows.
pub(crate) async fn reserve(
    gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
    limit: Option<Duration>,
) -> SharedSlots {
    let Some((first, ..)) = gates.iter().flatten().next() else {
        return SharedSlots::Granted(Granted {
            wait: Duration::ZERO,
            slots: [None, None],
        });
    };
    let (store, timeout) = (Arc::clone(&first.sharing.store), first.sharing.timeout);
    let limit = limit.map_or(-1, |limit| {
        i64::try_from(limit.as_micros().min(u128::from(MAX_MICROS))).unwrap_or(i64::MAX)
    });
    let mut invocation = RESERVE.prepare_invoke();
    invocation.arg(limit);
    for (gate, cost, interval) in gates.iter().flatten() {
        // The script's slot is `tolerance` before the schedule's new end: a slowed unit takes
        // the longer interval out of the schedule and starts when it would have (see
        // `RateGate::slow_down`).
        let interval = micros(*interval).max(gate.interval);
        let slower = (interval - gate.interval).saturating_mul((*cost).min(MAX_MICROS));
        invocation
            .key(&*gate.key)
            .arg(interval)
            .arg(gate.credit().saturating_add(slower).min(MAX_MICROS))
            .arg((*cost).min(MAX_MICROS));
    }
    let Some(reply) = store.eval::<Vec<u64>>(timeout, &invocation).await else {
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
