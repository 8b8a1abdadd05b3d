//! [`Turns`]: the order in which the callers waiting for a gate's slot or a bulkhead's place
//! are served, by class with aging, and in turn across `fair` values within a class.

use std::collections::VecDeque;
use std::task::Waker;

use super::{Place, Priority};

/// The callers waiting for a gate's slot or a bulkhead's place, in the order they are served:
/// by class, with aging (see [`Priority::AGING_PASSES`]); within a class, round-robin across
/// the lanes of its `fair` values, first come first served within a lane. It only orders:
/// the gate or the bulkhead decides when the next one is served, and each waiter's wait
/// leaves it (served, or dropped) so that none leaves a hole.
///
/// A lane is held only while one of its callers waits, as its value's hash alone, and at
/// most `lanes` of them per class (the policy's `max_keys`; a policy that is not fair has one
/// lane for all), and one more: a value that comes when they are all taken waits in the overflow
/// lane, which takes its turn like the others.
#[derive(Debug)]
pub(crate) struct Turns {
    classes: [Class; 3],
    /// Per class, the turns given to a more urgent class since this one last was served, while
    /// it had waiters.
    passed: [u32; 3],
    lanes: usize,
    next_id: u64,
    /// The waiters passed over that have not come back (see [`Turns::pass_over`]).
    passed_over: Vec<u64>,
}

/// One class's lanes with waiters, in the order they are served: the front lane's first
/// waiter is next, and a lane served goes to the back.
#[derive(Debug, Default)]
struct Class {
    lanes: VecDeque<Lane>,
}

#[derive(Debug)]
struct Lane {
    value: u64,
    waiters: VecDeque<Waiter>,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    waker: Option<Waker>,
}

impl Default for Turns {
    /// Waiters in arrival order within a class (one lane).
    fn default() -> Self {
        Turns::new(0)
    }
}

impl Class {
    fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    fn len(&self) -> usize {
        self.lanes.iter().map(|lane| lane.waiters.len()).sum()
    }

    fn front(&mut self) -> Option<&mut Waiter> {
        self.lanes.front_mut()?.waiters.front_mut()
    }

    /// The value of the lane a waiter of `value` joins: its own, or, all `lanes` taken by
    /// others, the overflow lane, which takes its turns like the others.
    fn lane_value(&self, value: u64, lanes: usize) -> u64 {
        if lanes == 0 {
            return 0;
        }
        let own = self.lanes.iter().any(|lane| lane.value == value);
        if own || self.lanes.len() < lanes {
            value
        } else {
            Place::OVERFLOW
        }
    }

    /// Where the lane of a waiter of `value` is. `None`: a new lane, at the back.
    fn lane_of(&self, value: u64, lanes: usize) -> Option<usize> {
        let value = self.lane_value(value, lanes);
        self.lanes.iter().position(|lane| lane.value == value)
    }

    /// How many of its waiters would be served before a newcomer of `value`: its lane's
    /// waiters, and from each other lane as many as the rounds before the newcomer's (one
    /// more from the lanes served before its own).
    fn ahead_of(&self, value: u64, lanes: usize) -> usize {
        let at = self.lane_of(value, lanes);
        let rounds = at.map_or(0, |at| self.lanes[at].waiters.len());
        let before = at.unwrap_or(self.lanes.len());
        self.lanes
            .iter()
            .enumerate()
            .map(|(i, lane)| match i.cmp(&before) {
                std::cmp::Ordering::Less => lane.waiters.len().min(rounds + 1),
                std::cmp::Ordering::Equal => rounds,
                std::cmp::Ordering::Greater => lane.waiters.len().min(rounds),
            })
            .sum()
    }

    fn find(&mut self, id: u64) -> Option<&mut Waiter> {
        self.lanes
            .iter_mut()
            .flat_map(|lane| lane.waiters.iter_mut())
            .find(|waiter| waiter.id == id)
    }
}

impl Turns {
    /// Waiters served round-robin across at most `lanes` values per class and the overflow
    /// lane; with `lanes` 0, in one lane whatever their values (a policy that is not fair).
    pub(crate) fn new(lanes: usize) -> Self {
        Turns {
            classes: Default::default(),
            passed: [0; 3],
            lanes,
            next_id: 0,
            passed_over: Vec::new(),
        }
    }

    /// A new waiter at `place`, last of its lane: its number. The waiter it displaces as
    /// next, if any, is woken to stop waiting for the next slot or place.
    pub(crate) fn join(&mut self, place: Place) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let displaced = self.next_class();
        let class = &mut self.classes[place.class().index()];
        let waiter = Waiter { id, waker: None };
        match class.lane_of(place.lane(), self.lanes) {
            Some(at) => class.lanes[at].waiters.push_back(waiter),
            None => class.lanes.push_back(Lane {
                value: class.lane_value(place.lane(), self.lanes),
                waiters: VecDeque::from([waiter]),
            }),
        }
        if let Some(displaced) = displaced.filter(|_| self.next() == Some(id)) {
            let waker = self.classes[displaced].front().and_then(|w| w.waker.take());
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        id
    }

    /// The class served next: a class passed over [`Priority::AGING_PASSES`] times (the most
    /// urgent of those), otherwise the most urgent that waits.
    fn next_class(&self) -> Option<usize> {
        let waiting = |class: &usize| !self.classes[*class].is_empty();
        let aged = (0..3)
            .filter(waiting)
            .find(|class| self.passed[*class] >= Priority::AGING_PASSES);
        aged.or_else(|| (0..3).find(waiting))
    }

    /// The waiter served next.
    pub(crate) fn next(&self) -> Option<u64> {
        let class = self.next_class()?;
        let lane = self.classes[class].lanes.front()?;
        lane.waiters.front().map(|waiter| waiter.id)
    }

    /// Serves the next waiter (`id`, as [`Turns::next`] said): it leaves, its lane goes to the
    /// back of its class, the classes it passed count one more pass, and the next waiter, if
    /// any, is woken to take its place.
    pub(crate) fn serve(&mut self, id: u64) {
        let Some(class) = self.next_class() else {
            return;
        };
        let lanes = &mut self.classes[class].lanes;
        if let Some(mut lane) = lanes.pop_front() {
            debug_assert_eq!(lane.waiters.front().map(|w| w.id), Some(id));
            lane.waiters.pop_front();
            if !lane.waiters.is_empty() {
                lanes.push_back(lane);
            }
        }
        self.passed[class] = 0;
        for other in class + 1..3 {
            if !self.classes[other].is_empty() {
                self.passed[other] = self.passed[other].saturating_add(1);
            }
        }
        self.wake_next();
    }

    /// A waiter gives up (its caller dropped the wait), or is passed over: it leaves without
    /// a trace; if it was next or watched the next, the new one is woken. Whether it was still
    /// waiting.
    pub(crate) fn leave(&mut self, id: u64) -> bool {
        if self.was_passed_over(id) {
            return false;
        }
        let next = self.next();
        let watcher = self.watcher(id).is_some();
        for (index, class) in self.classes.iter_mut().enumerate() {
            for at in 0..class.lanes.len() {
                let waiters = &mut class.lanes[at].waiters;
                let Some(position) = waiters.iter().position(|waiter| waiter.id == id) else {
                    continue;
                };
                waiters.remove(position);
                if waiters.is_empty() {
                    class.lanes.remove(at);
                }
                if class.is_empty() {
                    self.passed[index] = 0;
                }
                if next == Some(id) {
                    self.wake_next();
                } else if watcher {
                    self.wake_watcher();
                }
                return true;
            }
        }
        false
    }

    /// Keeps `waker` to wake waiter `id` when its turn may have come.
    pub(crate) fn wait(&mut self, id: u64, waker: &Waker) {
        let waiter = self.classes.iter_mut().find_map(|class| class.find(id));
        if let Some(waiter) = waiter {
            match &mut waiter.waker {
                Some(kept) if kept.will_wake(waker) => {}
                kept => *kept = Some(waker.clone()),
            }
        }
    }

    /// Wakes the waiter served next, to take (or wait for) the next slot or place, and the
    /// one that watches it (see [`Turns::watcher`]).
    pub(crate) fn wake_next(&mut self) {
        if let Some(class) = self.next_class() {
            if let Some(waker) = self.classes[class].front().and_then(|w| w.waker.take()) {
                waker.wake();
            }
        }
        self.wake_watcher();
    }

    /// How many waiters watch the next (see [`Turns::watcher`]).
    const WATCHERS: usize = 3;

    /// The waiters other than the next that watch that the next takes what comes due for it,
    /// the first watching closest: a next whose future is left unpolled (a call shared by
    /// coalescing whose caller left, a branch of a `select!` not polled) would otherwise hold
    /// every waiter behind it, and so would a watcher left unpolled beside it.
    fn watchers(&self) -> impl Iterator<Item = u64> + '_ {
        let next = self.next();
        (self.classes.iter())
            .flat_map(|class| class.lanes.iter())
            .flat_map(|lane| lane.waiters.iter().take(Self::WATCHERS + 1))
            .map(|waiter| waiter.id)
            .filter(move |id| Some(*id) != next)
            .take(Self::WATCHERS)
    }

    /// Which watcher waiter `id` is, from 1 (the closest), if it is one.
    pub(crate) fn watcher(&self, id: u64) -> Option<u32> {
        let rank = self.watchers().position(|watcher| watcher == id)?;
        u32::try_from(rank + 1).ok()
    }

    /// Wakes the watchers, to watch the next's new slot.
    pub(crate) fn wake_watcher(&mut self) {
        let watchers: Vec<u64> = self.watchers().collect();
        for id in watchers {
            let waker = (self.classes.iter_mut())
                .find_map(|class| class.find(id))
                .and_then(|waiter| waiter.waker.take());
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// The next leaves, passed over by a watcher: it joins again when it comes back.
    pub(crate) fn pass_over(&mut self, id: u64) {
        if self.leave(id) {
            self.passed_over.push(id);
        }
    }

    /// Whether waiter `id` was passed over since it last looked (then it no longer waits).
    pub(crate) fn was_passed_over(&mut self, id: u64) -> bool {
        let at = self.passed_over.iter().position(|passed| *passed == id);
        at.map(|at| self.passed_over.swap_remove(at)).is_some()
    }

    /// How many waiters would be served before a newcomer at `place`, ignoring aging: the
    /// more urgent ones, and those of its class served before it (see [`Class::ahead_of`]).
    pub(crate) fn ahead_of(&self, place: Place) -> usize {
        let urgent: usize = (self.classes[..place.class().index()].iter())
            .map(Class::len)
            .sum();
        urgent + self.classes[place.class().index()].ahead_of(place.lane(), self.lanes)
    }

    /// How many waiters of its own class would be served before a newcomer at `place`.
    pub(crate) fn ahead_in_class(&self, place: Place) -> usize {
        self.classes[place.class().index()].ahead_of(place.lane(), self.lanes)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.classes.iter().all(Class::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(class: Priority) -> Place {
        Place::new(class, 0)
    }

    #[test]
    fn serves_the_most_urgent_first_and_in_arrival_order_within_a_class() {
        let mut turns = Turns::default();
        let batch = turns.join(of(Priority::Batch));
        let default = turns.join(of(Priority::Default));
        let critical = turns.join(of(Priority::Critical));
        let second_critical = turns.join(of(Priority::Critical));
        for expected in [critical, second_critical, default, batch] {
            assert_eq!(turns.next(), Some(expected));
            turns.serve(expected);
        }
        assert!(turns.is_empty());
    }

    #[test]
    fn a_class_passed_over_aging_passes_times_is_served_next() {
        let mut turns = Turns::default();
        let batch = turns.join(of(Priority::Batch));
        let mut served = 0;
        loop {
            let critical = turns.join(of(Priority::Critical));
            let next = turns.next().unwrap();
            turns.serve(next);
            if next == batch {
                break;
            }
            assert_eq!(next, critical);
            served += 1;
        }
        assert_eq!(served, Priority::AGING_PASSES);
    }

    #[test]
    fn a_waiter_that_leaves_leaves_no_trace() {
        let mut turns = Turns::default();
        let first = turns.join(of(Priority::Batch));
        let second = turns.join(of(Priority::Batch));
        assert!(turns.leave(first));
        assert_eq!(turns.next(), Some(second));
        assert!(!turns.leave(first));
        assert_eq!(turns.ahead_of(of(Priority::Batch)), 1);
        assert_eq!(turns.ahead_of(of(Priority::Critical)), 0);
    }

    fn in_lane(lane: u64) -> Place {
        Place::new(Priority::Default, lane)
    }

    #[test]
    fn lanes_of_a_class_are_served_in_turn() {
        let mut turns = Turns::new(100);
        let heavy: Vec<u64> = (0..4).map(|_| turns.join(in_lane(1))).collect();
        let light: Vec<u64> = (0..2).map(|_| turns.join(in_lane(2))).collect();
        let order = [heavy[0], light[0], heavy[1], light[1], heavy[2], heavy[3]];
        for expected in order {
            assert_eq!(turns.next(), Some(expected));
            turns.serve(expected);
        }
        assert!(turns.is_empty());
    }

    #[test]
    fn a_newcomer_counts_one_of_each_lane_per_round_before_it() {
        let mut turns = Turns::new(100);
        for _ in 0..10 {
            turns.join(in_lane(1));
        }
        turns.join(in_lane(2));
        // Lane 1's next, lane 2's first, then its own turn.
        assert_eq!(turns.ahead_of(in_lane(3)), 2);
        // Lane 2 holds one: its second waiter waits for two rounds of lane 1.
        assert_eq!(turns.ahead_of(in_lane(2)), 3);
        assert_eq!(turns.ahead_of(in_lane(1)), 11);
        assert_eq!(turns.ahead_of(of(Priority::Critical)), 0);
        assert_eq!(turns.ahead_of(of(Priority::Batch)), 11);
    }

    #[test]
    fn values_past_the_bound_share_the_overflow_lane_which_takes_its_turn() {
        let mut turns = Turns::new(2);
        let first = turns.join(in_lane(1));
        let second = turns.join(in_lane(1));
        let third = turns.join(in_lane(2));
        let fourth = turns.join(in_lane(3));
        let fifth = turns.join(in_lane(4));
        assert_eq!(turns.classes[1].lanes.len(), 3);
        for expected in [first, third, fourth, second, fifth] {
            assert_eq!(turns.next(), Some(expected));
            turns.serve(expected);
        }
        assert!(turns.is_empty());
    }

    #[test]
    fn a_policy_that_is_not_fair_keeps_one_lane_whatever_the_values() {
        let mut turns = Turns::default();
        let first = turns.join(in_lane(1));
        let second = turns.join(in_lane(2));
        let third = turns.join(in_lane(1));
        for expected in [first, second, third] {
            assert_eq!(turns.next(), Some(expected));
            turns.serve(expected);
        }
    }

    #[test]
    fn a_lane_left_empty_is_forgotten() {
        let mut turns = Turns::new(100);
        let gone = turns.join(in_lane(7));
        let stays = turns.join(in_lane(8));
        assert!(turns.leave(gone));
        assert_eq!(turns.classes[1].lanes.len(), 1);
        assert_eq!(turns.next(), Some(stays));
    }
}
