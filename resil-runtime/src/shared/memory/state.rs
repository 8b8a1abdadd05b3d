//! What every instance of an in-memory state sees, under one lock, and how it forgets what
//! is long past (as Redis's keys expire).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::seams::{keep_stretch, BreakerNews, GateNews};

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
    pub(super) breakers: Listeners<BreakerNews>,
    pub(super) links: Listeners<GateNews>,
    pub(super) instances: usize,
    /// While holds are late (as Redis's are: sent in the background), those not arrived yet.
    pub(super) late: Option<Vec<InFlight>>,
    /// Each shared breaker's time window: until when it lasts unfed (µs since the origin),
    /// and its buckets' calls and bad calls, by bucket number.
    pub(super) windows: HashMap<Arc<str>, (u64, Buckets)>,
    /// Batches added to windows so far: the round trips a Redis store would make.
    pub(super) batches: u64,
    /// Heartbeats heard so far (each a write a Redis store would make).
    pub(super) beats: u64,
    /// The users of each gate (an instance and its user's number), each until its heartbeat
    /// expires (µs since the origin).
    pub(super) seen: HashMap<Arc<str>, HashMap<(usize, u64), u64>>,
    /// The instances that gave up waiting for an answer while the store was slow: as a Redis
    /// store's reconnection does, its return revokes what their gates promised alone.
    pub(super) lost: Vec<usize>,
    /// The instances cut off from the store (see [`InMemory::set_reachable`]): they hear
    /// nothing of the others, and the others nothing of them.
    ///
    /// [`InMemory::set_reachable`]: super::InMemory::set_reachable
    pub(super) cut: Vec<usize>,
    /// Openings, locks and schedules kept after the last sweep.
    swept: usize,
}

/// A gate's hash in Redis.
#[derive(Default, Clone)]
pub(super) struct Gate {
    pub(super) tat: Option<u64>,
    pub(super) epoch: u64,
    pub(super) held: u64,
    /// Stretches of slots given back while later ones were still promised, `(from, end)`,
    /// adjoining ones merged: the schedule passes them once it returns to their end.
    pub(super) given: Vec<(u64, u64)>,
}

/// The most stretches a gate keeps given back (as Redis's script does). A queue of callers
/// that all give up, in any order, makes one stretch, or one per caller still waiting between
/// them (the simulator's queues of a few hundred callers made up to 154); beyond these, the
/// stretch nearest now stays spent, which holds the schedule back least.
const GIVEN_KEPT: usize = 256;

impl Gate {
    /// REFUND of the slot `(from, end)` of the gate's epoch: while `end` is the schedule's,
    /// the schedule returns to `from`, then past the stretch given back before it, if any;
    /// otherwise the slot joins the stretches given back (if it is still ahead). Slots given
    /// back in any order all return once the latest does.
    pub(super) fn give_back(&mut self, from: u64, end: u64, now: u64) {
        self.given.retain(|&(_, kept)| kept > now);
        let Some(tat) = self.tat else {
            return;
        };
        if tat != end {
            if end < tat && end > now {
                keep_stretch(&mut self.given, (from, end), GIVEN_KEPT);
            }
            return;
        }
        let tat = match self.given.iter().position(|&(_, kept)| kept == from) {
            Some(at) => self.given.swap_remove(at).0,
            None => from,
        };
        self.given.retain(|&(_, kept)| kept < tat);
        self.tat = Some(tat);
    }
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

/// The handles that listen for news, by the name they listen for, each with its instance: a
/// new handle costs a lookup of its name, not a scan of every handle listed (which made
/// 40 000 tenants of a keyed shared policy take seconds), and news of a name reaches its
/// handles without a look at the others.
pub(super) struct Listeners<T> {
    by_name: HashMap<Arc<str>, Vec<(usize, T)>>,
    /// Handles listed, and how many were after the last sweep of every name.
    listed: usize,
    swept: usize,
}

impl<T> Default for Listeners<T> {
    fn default() -> Self {
        Listeners {
            by_name: HashMap::new(),
            listed: 0,
            swept: 0,
        }
    }
}

/// A handle that listens for news of one name until its policy is gone.
pub(super) trait Listening: Clone {
    fn name(&self) -> &str;
    fn is_gone(&self) -> bool;
}

impl Listening for BreakerNews {
    fn name(&self) -> &str {
        BreakerNews::name(self)
    }
    fn is_gone(&self) -> bool {
        BreakerNews::is_gone(self)
    }
}

impl Listening for GateNews {
    fn name(&self) -> &str {
        GateNews::name(self)
    }
    fn is_gone(&self) -> bool {
        GateNews::is_gone(self)
    }
}

impl<T: Listening> Listeners<T> {
    /// Lists `handle` of `instance`. The handles of policies gone are forgotten: those of its
    /// name at once, every name's once the handles listed have doubled since the last such
    /// sweep (its cost spread over the handles that grew the list).
    pub(super) fn add(&mut self, instance: usize, handle: T) {
        if self.listed >= SWEPT_BELOW.max(self.swept.saturating_mul(2)) {
            self.by_name.retain(|_, handles| {
                handles.retain(|(_, handle)| !handle.is_gone());
                !handles.is_empty()
            });
            self.listed = self.by_name.values().map(Vec::len).sum();
            self.swept = self.listed;
        }
        let handles = match self.by_name.get_mut(handle.name()) {
            Some(handles) => handles,
            None => self.by_name.entry(Arc::from(handle.name())).or_default(),
        };
        let before = handles.len();
        handles.retain(|(_, listed)| !listed.is_gone());
        handles.push((instance, handle));
        self.listed = self.listed + handles.len() - before;
    }

    /// The handles named `name` of the instances other than `instance`, but those `cut` off.
    pub(super) fn others(&self, instance: usize, name: &str, cut: &[usize]) -> Vec<T> {
        (self.by_name.get(name).into_iter().flatten())
            .filter(|(of, _)| *of != instance && !cut.contains(of))
            .map(|(_, handle)| handle.clone())
            .collect()
    }

    /// Every handle, with its instance.
    pub(super) fn all(&self) -> Vec<(usize, T)> {
        self.by_name.values().flatten().cloned().collect()
    }
}

impl Listeners<GateNews> {
    /// The other gates of `gate`'s name in `instance`.
    pub(super) fn beside(&self, instance: usize, gate: &crate::seams::GateLink) -> Vec<GateNews> {
        (self.by_name.get(&*gate.key).into_iter().flatten())
            .filter(|(of, news)| *of == instance && !news.is_of(gate))
            .map(|(_, news)| news.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A handle that counts how often it is looked at.
    #[derive(Clone)]
    struct Counted {
        name: Arc<str>,
        looks: Rc<Cell<u64>>,
        gone: Rc<Cell<bool>>,
    }

    impl Listening for Counted {
        fn name(&self) -> &str {
            &self.name
        }
        fn is_gone(&self) -> bool {
            self.looks.set(self.looks.get() + 1);
            self.gone.get()
        }
    }

    /// 40 000 tenants of a keyed shared policy each list a handle: the looks stay linear in
    /// them (a scan of every handle at each new one looked 800 million times).
    #[test]
    fn listing_a_handle_costs_a_lookup_not_a_scan() {
        let looks = Rc::new(Cell::new(0));
        let gone = Rc::new(Cell::new(false));
        let mut listeners = Listeners::default();
        let n = 40_000;
        for i in 0..n {
            let handle = Counted {
                name: Arc::from(format!("tenant-{i}")),
                looks: Rc::clone(&looks),
                gone: Rc::clone(&gone),
            };
            listeners.add(1, handle);
        }
        assert!(looks.get() < 3 * n, "{} looks for {n} handles", looks.get());
        assert_eq!(listeners.others(2, "tenant-7", &[]).len(), 1);
        assert!(listeners.others(1, "tenant-7", &[]).is_empty());
        // The policies gone, their handles are forgotten as new ones come.
        gone.set(true);
        for i in 0..n {
            let handle = Counted {
                name: Arc::from(format!("other-{i}")),
                looks: Rc::new(Cell::new(0)),
                gone: Rc::new(Cell::new(false)),
            };
            listeners.add(1, handle);
        }
        assert!(listeners.all().len() < 2 * n as usize);
        assert!(listeners.others(2, "tenant-7", &[]).is_empty());
    }

    /// A queue of 200 slots whose callers all give up, first to last, last to first or
    /// shuffled, gives the gate back whole (before, a slot given back while later ones were
    /// promised stayed spent: the next caller after a queue that gave up waited for it all).
    #[test]
    fn a_queue_given_back_in_any_order_gives_the_gate_back() {
        let (now, interval, slots) = (1_000_u64, 10_u64, 200_u64);
        let orders: [Vec<u64>; 3] = [
            (0..slots).collect(),
            (0..slots).rev().collect(),
            (0..slots).map(|i| (i * 73) % slots).collect(),
        ];
        for order in orders {
            let mut gate = Gate {
                tat: Some(now + slots * interval),
                ..Gate::default()
            };
            for i in &order {
                gate.give_back(now + i * interval, now + (i + 1) * interval, now);
            }
            assert_eq!(gate.tat, Some(now), "{order:?}");
            assert!(gate.given.is_empty());
        }
    }

    /// A slot still promised between two given back keeps the earlier one spent until it
    /// goes back too.
    #[test]
    fn a_slot_still_promised_holds_the_stretch_before_it() {
        let mut gate = Gate {
            tat: Some(40),
            ..Gate::default()
        };
        gate.give_back(0, 10, 0);
        gate.give_back(30, 40, 0);
        assert_eq!(gate.tat, Some(30), "the slot 20..30 is still promised");
        gate.give_back(20, 30, 0);
        assert_eq!(gate.tat, Some(20), "the slot 10..20 is still promised");
        gate.give_back(10, 20, 0);
        assert_eq!(gate.tat, Some(0));
    }
}
