//! [`GateLink`]: a rate gate's state in Redis, reserved from by one script per attempt.

use std::sync::Arc;
use std::time::Duration;

use super::scripts::{HOLD, REFUND, RESERVE};
use super::Sharing;
use crate::Rejected;

/// The largest number of µs handed to a script: far from where Lua's doubles lose units.
const MAX_MICROS: u64 = 1 << 50;

/// A rate gate's place in Redis: one key holding its theoretical arrival time (µs on
/// Redis's clock), expiring when that time is past (the gate is then as new).
#[derive(Debug)]
pub(crate) struct GateLink {
    sharing: Sharing,
    key: String,
    interval: u64,
    tolerance: u64,
}

/// What the shared gates said about an attempt.
#[derive(Debug)]
pub(crate) enum SharedSlots {
    /// Reserved in Redis; the slot comes after this wait.
    Granted(Duration),
    /// Redis's gate would make the attempt wait past its deadline: nothing reserved.
    Refused(Rejected),
    /// Redis did not answer in time: the local gates decide (or, failing closed, refuse).
    Unavailable,
}

impl GateLink {
    /// The link of a gate whose Redis key is `resil:{what}:{name}` and whose slots are
    /// `interval` apart, `tolerance` of them at once (nanoseconds, as the local gate's).
    pub(crate) fn new(
        sharing: &Sharing,
        what: &str,
        name: &str,
        interval: u64,
        tolerance: u64,
    ) -> Arc<Self> {
        let micros = |nanos: u64| nanos.div_ceil(1000).min(MAX_MICROS);
        Arc::new(GateLink {
            sharing: sharing.clone(),
            key: format!("resil:{what}:{name}"),
            interval: micros(interval).max(1),
            tolerance: micros(tolerance),
        })
    }

    /// The same gate for one key of a keyed policy: `…:{label=key}`.
    pub(crate) fn for_key(&self, key: &str) -> Arc<Self> {
        Arc::new(GateLink {
            sharing: self.sharing.clone(),
            key: format!("{}:{key}", self.key),
            interval: self.interval,
            tolerance: self.tolerance,
        })
    }

    pub(crate) fn fail_closed(&self) -> bool {
        self.sharing.fail_closed
    }

    /// Whether to ask Redis at all: not while it is known to be down (the local gate then
    /// decides at once, with no wait for a timeout).
    pub(crate) fn is_available(&self) -> bool {
        self.sharing.store.usable()
    }

    /// Gives back `cost` units reserved in Redis but not used.
    pub(crate) fn refund(&self, cost: u64) {
        let mut invocation = REFUND.key(&self.key);
        invocation.arg(self.interval.saturating_mul(cost).min(MAX_MICROS));
        self.sharing
            .store
            .spawn_eval(self.sharing.timeout, invocation, None);
    }

    /// A provider throttled a call: every instance's gate holds its slots for `wait`.
    pub(crate) fn hold(&self, wait: Duration) {
        let wait = u64::try_from(wait.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_MICROS);
        let mut invocation = HOLD.key(&self.key);
        invocation.arg(wait).arg(self.tolerance).arg(self.interval);
        self.sharing
            .store
            .spawn_eval(self.sharing.timeout, invocation, None);
    }
}

/// Reserves an attempt's slots in the shared gates (the rate gate's and the token gate's, with
/// their costs) at once: both or neither. `limit` is the longest wait the deadline allows.
pub(crate) async fn reserve(
    gates: [Option<(Arc<GateLink>, u64)>; 2],
    limit: Option<Duration>,
) -> SharedSlots {
    let Some((first, _)) = gates.iter().flatten().next() else {
        return SharedSlots::Granted(Duration::ZERO);
    };
    let (store, timeout) = (Arc::clone(&first.sharing.store), first.sharing.timeout);
    let limit = limit.map_or(-1, |limit| {
        i64::try_from(limit.as_micros().min(u128::from(MAX_MICROS))).unwrap_or(i64::MAX)
    });
    let mut invocation = RESERVE.prepare_invoke();
    invocation.arg(limit);
    for (gate, cost) in gates.iter().flatten() {
        invocation
            .key(&gate.key)
            .arg(gate.interval)
            .arg(gate.tolerance)
            .arg((*cost).min(MAX_MICROS));
    }
    match store.eval::<(u8, u64)>(timeout, &invocation).await {
        Some((1, wait)) => SharedSlots::Granted(Duration::from_micros(wait)),
        Some((_, wait)) => SharedSlots::Refused(Rejected::RateLimited {
            retry_in: Duration::from_micros(wait),
        }),
        None => SharedSlots::Unavailable,
    }
}
