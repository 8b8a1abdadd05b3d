//! [`Class`]: one class's waiters, in lanes of their `fair` values served round-robin, first
//! come first served within a lane.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::task::Waker;

use super::Place;

/// How many lanes at the front of a class's order are kept live, and how many waiters of each
/// are looked at there: the next, and the three that watch it (see `Turns::watcher`).
pub(super) const WINDOW: usize = 4;

/// Up to how many lanes in a class's order the count ahead of a newcomer is exact (see
/// [`Class::ahead_of`]).
const EXACT: usize = 1024;

/// One class's lanes with waiters, in the order they are served: the front lane's first
/// waiter is next, and a lane served goes to the back.
#[derive(Debug, Default)]
pub(super) struct Class {
    /// The lanes in the order they are served, each as its value and the generation it was
    /// made in: a lane emptied by its waiters leaving stays in the order, stale, until it
    /// comes to the front (or the order is compacted), so leaving costs no search.
    order: VecDeque<(u64, u64)>,
    lanes: HashMap<u64, Lane>,
    /// How many lanes hold each number of waiters (for [`Class::ahead_of`]).
    lengths: BTreeMap<usize, usize>,
    waiting: usize,
    stale: usize,
    generation: u64,
}

#[derive(Debug)]
pub(super) struct Lane {
    generation: u64,
    /// In the order they came, so by number.
    pub(super) waiters: VecDeque<Waiter>,
}

#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) waker: Option<Waker>,
}

impl Class {
    pub(super) fn is_empty(&self) -> bool {
        self.waiting == 0
    }

    /// The lane served next: the front of the order, which is never stale.
    pub(super) fn front_lane(&self) -> Option<&Lane> {
        let (value, _) = self.order.front()?;
        self.lanes.get(value)
    }

    /// The value of the lane a waiter of `value` joins: its own, or, all `lanes` taken by
    /// others, the overflow lane, which takes its turns like the others.
    pub(super) fn lane_value(&self, value: u64, lanes: usize) -> u64 {
        if lanes == 0 {
            return 0;
        }
        let own = self.lanes.len() - usize::from(self.lanes.contains_key(&Place::OVERFLOW));
        if self.lanes.contains_key(&value) || own < lanes {
            value
        } else {
            Place::OVERFLOW
        }
    }

    /// A lane's length moves from `from` to `to`.
    fn resized(&mut self, from: usize, to: usize) {
        if from > 0 {
            if let Some(count) = self.lengths.get_mut(&from) {
                *count -= 1;
                if *count == 0 {
                    self.lengths.remove(&from);
                }
            }
        }
        if to > 0 {
            *self.lengths.entry(to).or_default() += 1;
        }
    }

    /// How many wait.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }

    /// How many lanes hold waiters.
    pub(super) fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// The first waiters of the first lanes in the order, the first first: where the next
    /// and its watchers are.
    pub(super) fn front_waiters(&self) -> impl Iterator<Item = u64> + '_ {
        (self.order.iter().take(WINDOW))
            .filter_map(|(value, _)| self.lanes.get(value))
            .flat_map(|lane| lane.waiters.iter().take(WINDOW))
            .map(|waiter| waiter.id)
    }

    /// Waiter `id` joins lane `value`, last.
    pub(super) fn push(&mut self, value: u64, id: u64) {
        let waiter = Waiter { id, waker: None };
        let lane = match self.lanes.get_mut(&value) {
            Some(lane) => lane,
            None => {
                self.generation += 1;
                self.order.push_back((value, self.generation));
                self.lanes.entry(value).or_insert(Lane {
                    generation: self.generation,
                    waiters: VecDeque::new(),
                })
            }
        };
        lane.waiters.push_back(waiter);
        let length = lane.waiters.len();
        self.waiting += 1;
        self.resized(length - 1, length);
    }

    /// Waiter `id` of lane `value` leaves; a lane left empty is forgotten.
    pub(super) fn remove(&mut self, value: u64, id: u64) -> bool {
        let Some(lane) = self.lanes.get_mut(&value) else {
            return false;
        };
        let Ok(at) = lane.waiters.binary_search_by_key(&id, |waiter| waiter.id) else {
            return false;
        };
        lane.waiters.remove(at);
        let length = lane.waiters.len();
        self.waiting -= 1;
        self.resized(length + 1, length);
        if length == 0 {
            self.lanes.remove(&value);
            self.stale += 1;
            self.settle();
        }
        true
    }

    /// The front lane's first waiter is served: the lane goes to the back, or is forgotten
    /// once empty.
    pub(super) fn pop_front(&mut self) -> Option<u64> {
        let (value, generation) = self.order.pop_front()?;
        let lane = self.lanes.get_mut(&value)?;
        let waiter = lane.waiters.pop_front()?;
        let length = lane.waiters.len();
        self.waiting -= 1;
        self.resized(length + 1, length);
        if length == 0 {
            self.lanes.remove(&value);
        } else {
            self.order.push_back((value, generation));
        }
        self.settle();
        Some(waiter.id)
    }

    /// Drops the stale lanes among the first of the order, so that the next and its watchers
    /// are found at once, and compacts the order once stale lanes outnumber the live ones
    /// (each stale lane is dropped once: leaving and serving stay O(1) on average).
    fn settle(&mut self) {
        let (mut at, mut live) = (0, 0);
        while live < WINDOW {
            let Some(&(value, generation)) = self.order.get(at) else {
                break;
            };
            if live_lane(&self.lanes, value, generation).is_some() {
                live += 1;
                at += 1;
            } else {
                self.order.remove(at);
                self.stale = self.stale.saturating_sub(1);
            }
        }
        if self.stale > self.lanes.len() + 16 {
            let lanes = &self.lanes;
            (self.order)
                .retain(|(value, generation)| live_lane(lanes, *value, *generation).is_some());
            self.stale = 0;
        }
    }

    /// How many of its waiters would be served before a newcomer of `value`: for a value with
    /// no lane, the first of each lane; for one with `r` waiters, its own, up to `r` of each
    /// other lane, and one more of each lane served before its own in the current round that
    /// holds more than `r`. That last count takes a pass over the order, made while it holds
    /// at most [`EXACT`] lanes; past them it is left out, and the count is a lower bound (a
    /// call that could be served in time is never refused; one that cannot may wait, by up
    /// to a round, before its deadline ends it).
    pub(super) fn ahead_of(&self, value: u64, lanes: usize) -> usize {
        let value = self.lane_value(value, lanes);
        let Some(lane) = self.lanes.get(&value) else {
            return self.lanes();
        };
        let rounds = lane.waiters.len();
        let shorter: usize = (self.lengths.range(..rounds))
            .map(|(length, count)| length * count)
            .sum();
        let longer: usize = self.lengths.range(rounds..).map(|(_, count)| count).sum();
        let before = match self.order.len() <= EXACT {
            true => (self.order.iter())
                .take_while(|(other, generation)| (*other, *generation) != (value, lane.generation))
                .filter_map(|(other, generation)| live_lane(&self.lanes, *other, *generation))
                .filter(|other| other.waiters.len() > rounds)
                .count(),
            false => 0,
        };
        shorter + rounds * longer + before
    }

    pub(super) fn find(&mut self, value: u64, id: u64) -> Option<&mut Waiter> {
        let waiters = &mut self.lanes.get_mut(&value)?.waiters;
        let at = waiters.binary_search_by_key(&id, |waiter| waiter.id).ok()?;
        waiters.get_mut(at)
    }
}

/// The lane of `value` if the order's entry `(value, generation)` is it, not a stale entry of
/// a lane since emptied (and perhaps made again).
fn live_lane(lanes: &HashMap<u64, Lane>, value: u64, generation: u64) -> Option<&Lane> {
    lanes
        .get(&value)
        .filter(|lane| lane.generation == generation)
}
