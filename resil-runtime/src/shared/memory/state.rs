//! What every instance of an in-memory state sees, under one lock, and how it forgets what
//! is long past (as Redis's keys expire).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::seams::{BreakerNews, GateNews};

/// A throttle's hold on its way to the store: who sent it, for which gate, how long.
pub(super) type InFlight = (usize, Arc<str>, u64, u64, Duration);

/// A shared window's buckets: calls and bad calls, by bucket number.
pub(super) type Buckets = HashMap<u64, (u64, u64)>;

/// Below this many entries, nothing is swept.
const SWEPT_BELOW: usize = 64;

#[derive(Default)]
pub(super) struct State {
    /// Until when each breaker is open (µs since the origin).
    pub(super) open: HashMap<Arc<str>, u64>,
    /// Each breaker's probe lock: the instance holding it, until when.
    pub(super) probe: HashMap<Arc<str>, (usize, u64)>,
    pub(super) gates: HashMap<Arc<str>, Gate>,
    pub(super) breakers: Vec<(usize, BreakerNews)>,
    pub(super) links: Vec<(usize, GateNews)>,
    pub(super) instances: usize,
    /// While holds are late (as Redis's are: sent in the background), those not arrived yet.
    pub(super) late: Option<Vec<InFlight>>,
    /// Each shared breaker's time window: until when it lasts unfed (µs since the origin),
    /// and its buckets' calls and bad calls, by bucket number.
    pub(super) windows: HashMap<Arc<str>, (u64, Buckets)>,
    /// Batches added to windows so far: the round trips a Redis store would make.
    pub(super) batches: u64,
    /// The instances that use each gate, each until its heartbeat expires (µs since the
    /// origin).
    pub(super) seen: HashMap<Arc<str>, HashMap<usize, u64>>,
    /// Openings, locks and schedules kept after the last sweep.
    swept: usize,
}

/// A gate's hash in Redis.
#[derive(Default, Clone, Copy)]
pub(super) struct Gate {
    pub(super) tat: Option<u64>,
    pub(super) epoch: u64,
    pub(super) held: u64,
}

impl State {
    /// Before an entry is added: once the entries have doubled since the last sweep, those
    /// past at `now` go, as Redis's keys expire. An opening or lock that ended is none; a
    /// schedule behind now is none too (GCRA starts from now, and its hold, never after its
    /// schedule, is over), so nothing decides differently, and a keyed policy's keys, however
    /// many come and go, cost the store only those in force. Doubling spreads a sweep's cost
    /// over the entries that grew it.
    pub(super) fn sweep(&mut self, now: u64) {
        if self.kept() < SWEPT_BELOW.max(self.swept.saturating_mul(2)) {
            return;
        }
        self.open.retain(|_, until| *until > now);
        self.probe.retain(|_, (_, until)| *until > now);
        self.gates
            .retain(|_, gate| gate.tat.is_some_and(|tat| tat > now) || gate.held > now);
        self.windows.retain(|_, (until, _)| *until > now);
        self.seen
            .retain(|_, users| users.values().any(|until| *until >= now));
        self.swept = self.kept();
    }

    fn kept(&self) -> usize {
        self.open.len() + self.probe.len() + self.gates.len() + self.windows.len() + self.seen.len()
    }
}
