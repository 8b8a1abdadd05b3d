//! A gate's starts, per instance and over every instance: within the declared ceiling in
//! any window, while the store is down within the instances' shares, and while some are cut
//! off from it within the ceiling and a share for each of those.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::{Checker, GateScope, Inv, Trouble};
use crate::plan::{Ceiling, TARGETS};

/// How late a call may come to its slot and still take it (the guide's key reference: "one
/// that comes to its slot more than 100 ms late ... takes a new one"): a start may follow
/// its slot by this much, so a gate's starts keep its ceiling over its period less this.
const SLOT_LATE: Duration = Duration::from_millis(100);

/// The instances the store had seen (a start 2 to 3 s before `at`) when each last asked it
/// (a start in the second before): each then knew the others.
fn knew_each_other(starts: &VecDeque<(Instant, usize, u64)>, at: Instant) -> BTreeSet<usize> {
    let within = |early: u64, late: u64| -> BTreeSet<usize> {
        starts
            .iter()
            .filter(|(start, ..)| {
                *start + Duration::from_secs(early) >= at && *start + Duration::from_secs(late) < at
            })
            .map(|&(_, instance, _)| instance)
            .collect()
    };
    within(1, 0).intersection(&within(3, 2)).copied().collect()
}

impl Checker {
    /// An attempt of call `index` on `instance` to `target` started through its policy's
    /// gates, unless the policy was switched off.
    pub(super) fn gate_start(
        &mut self,
        index: usize,
        instance: usize,
        target: usize,
        now: Instant,
        caller: Option<usize>,
    ) {
        let call = &self.calls[index].0;
        if !call.enabled {
            return;
        }
        let (policy, shared, cost) = (call.policy, call.shared, call.cost);
        for at in 0..call.gates.len() {
            let gate = self.calls[index].0.gates[at];
            let scope = (policy, gate.per_key.then_some(target), gate.tokens);
            let units = if gate.tokens { cost } else { 1 };
            let (ceiling, period) = (gate.units, gate.period);
            let starts = self.gates.entry((instance, scope)).or_default();
            starts.push_back((now, units));
            // Counted over the period less the lateness a slot allows: the slots hold the
            // ceiling in any period, and a start may follow its slot by up to that.
            let window = period.saturating_sub(SLOT_LATE);
            while starts
                .front()
                .is_some_and(|&(start, _)| start + window <= now)
            {
                starts.pop_front();
            }
            let seen: u64 = starts.iter().map(|&(_, units)| units).sum();
            self.check(Inv::GateCeiling, seen <= ceiling, caller, || {
                let policy = if policy == 0 { "outer" } else { "inner" };
                let gate = if scope.2 { "token gate" } else { "gate" };
                let key = scope.1.map_or(String::new(), |target| format!(" of {}", TARGETS[target]));
                format!("instance {instance}: {seen} units started through the {policy} policy's {gate}{key} within {period:?} (ceiling {ceiling})")
            });
            if shared {
                self.across_instances(scope, (instance, units), now, gate, caller);
            }
        }
    }

    /// A shared gate's starts over every instance: within its ceiling while the store answers
    /// (from a period after any trouble), within the instances' shares while it does not.
    fn across_instances(
        &mut self,
        scope: GateScope,
        (instance, units): (usize, u64),
        now: Instant,
        gate: Ceiling,
        caller: Option<usize>,
    ) {
        let (ceiling, period) = (gate.units, gate.period);
        let starts = self.across.entry(scope).or_default();
        starts.push_back((now, instance, units));
        // Keep 6 s of history for the instances the store saw before an outage.
        let keep = period.max(Duration::from_secs(6));
        while starts
            .front()
            .is_some_and(|&(start, ..)| start + keep <= now)
        {
            starts.pop_front();
        }
        let window: Vec<_> = starts
            .iter()
            .filter(|(start, ..)| *start + period.saturating_sub(SLOT_LATE) > now)
            .copied()
            .collect();
        let seen: u64 = window.iter().map(|&(.., units)| units).sum();
        // What one instance may start past its share: one call's units.
        let slack = window.iter().map(|&(.., units)| units).max().unwrap_or(1);
        let from = now.checked_sub(period).unwrap_or(self.origin);
        let quiet = |&(start, end, _): &Trouble| match end {
            Some(end) => end + period <= from || start > now,
            None => start > now,
        };
        let cuts: Vec<&(Trouble, BTreeSet<usize>)> = self
            .cuts
            .iter()
            .filter(|(spell, _)| !quiet(spell))
            .collect();
        let outage = !self.trouble.iter().all(quiet);
        if !outage && cuts.is_empty() {
            self.check(Inv::SharedCeiling, seen <= ceiling, caller, || {
                format!("{seen} units started over every instance within {period:?} while the store answered (ceiling {ceiling})")
            });
            return;
        }
        // Inside one outage, or one partition alone, since at least a second before the window.
        let inside = |&(start, end, _): &Trouble| {
            start + Duration::from_secs(1) <= from && end.is_none_or(|end| end >= now)
        };
        let (spell, cut) = match (outage, &cuts[..]) {
            (true, []) => match self.trouble.iter().find(|spell| inside(spell)) {
                Some(spell) => (spell, None),
                None => return,
            },
            (false, [(spell, cut)]) if inside(spell) => (spell, Some(cut)),
            _ => return,
        };
        let before = spell.2.get(&scope).cloned().unwrap_or_default();
        let during: BTreeSet<usize> = window.iter().map(|&(_, instance, _)| instance).collect();
        if before.len() < 2 || !during.is_subset(&before) {
            return;
        }
        let instances = before.len() as u64;
        let Some(cut) = cut else {
            let bound = ceiling + instances * slack;
            self.check(Inv::OutageShare, seen <= bound, caller, || {
                format!("{seen} units started over {instances} instances within {period:?} while the store was down (ceiling {ceiling}, shares' slack {})", bound - ceiling)
            });
            return;
        };
        // The others share the store's ceiling; each instance cut off runs at its share.
        let (cut, alone) = (cut.clone(), cut.intersection(&before).count() as u64);
        let bound = ceiling + alone * (ceiling.div_ceil(instances) + slack);
        self.check(Inv::OutageShare, seen <= bound, caller, || {
            format!("{seen} units started over {instances} instances within {period:?} while {cut:?} were cut off from the store (ceiling {ceiling}, and a share each for those cut off: {bound})")
        });
    }

    /// `instances` are cut off from the store (`cut`), or reach it again.
    pub(crate) fn cut(&mut self, instances: &[usize], cut: bool) {
        let now = Instant::now();
        let these: BTreeSet<usize> = instances.iter().copied().collect();
        let open = (self.cuts.iter_mut()).rfind(|(spell, cut)| spell.1.is_none() && *cut == these);
        match (cut, open) {
            // Cut already, they stay so until they rejoin (as the store keeps them).
            (true, Some(_)) | (false, None) => {}
            (true, None) => {
                let knew = (self.across.iter())
                    .map(|(scope, starts)| (*scope, knew_each_other(starts, now)))
                    .collect();
                self.cuts.push(((now, None, knew), these));
            }
            (false, Some((spell, _))) => spell.1 = Some(now),
        }
    }

    /// The store is down or slow (`down`), or answers again.
    pub(crate) fn store(&mut self, down: bool) {
        let now = Instant::now();
        match self.trouble.last_mut() {
            Some((_, end @ None, _)) if !down => *end = Some(now),
            Some((_, None, _)) => {}
            _ if down => {
                let knew = self
                    .across
                    .iter()
                    .map(|(scope, starts)| (*scope, knew_each_other(starts, now)))
                    .collect();
                self.trouble.push((now, None, knew));
            }
            _ => {}
        }
    }
}
