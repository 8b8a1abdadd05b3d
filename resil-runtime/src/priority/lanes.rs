//! [`Class`]: one class's waiters, in lanes of their `fair` values served round-robin, first
//! come first served within a lane; or, where waiters cost different units (a token gate's),
//! in turn by the units each lane was served (start-time fair queuing).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::task::Waker;

use super::Place;

/// How many lanes at the front of a class's order are kept live, and how many waiters of each
/// are looked at there: the next, and the three that watch it (see `Turns::watcher`).
pub(super) const WINDOW: usize = 4;

/// Up to how many lanes in a class's order the count ahead of a newcomer is exact (see
/// [`Class::ahead_of`]).
const EXACT: usize = 1024;

/// One class's lanes with waiters, in the order they are served: the front lane's first
/// waiter is next, and a lane served goes to the back (or, [`Weighed`], after the lanes that
/// were served fewer units).
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
    /// Lanes served by units rather than by turns, if their waiters' costs differ.
    weighed: Option<Box<Weighed>>,
}

/// Start-time fair queuing across lanes whose waiters cost different units: each lane's first
/// waiter starts at its lane's tag, the units its lane was served before it, and the lowest tag
/// is served next, the earlier lane first on a tie. A tenant of 100-unit calls is served ten of
/// them for each call of one of 1 000-unit calls: each gets the units of the other, not the
/// calls. A lane made now starts at the class's clock, where the waiter served last finished:
/// an idle tenant banks nothing, and a tenant that comes back (or a flood of new ones) comes
/// after the lanes served up to then, not before them.
#[derive(Debug, Default)]
struct Weighed {
    /// Each lane's first waiter by its tag: (tag, the lane's generation, the lane's value).
    order: BTreeSet<(u64, u64, u64)>,
    /// Where the waiter served last finished: its tag plus its units.
    clock: u64,
}

#[derive(Debug)]
pub(super) struct Lane {
    generation: u64,
    /// For a [`Weighed`] class, the tag its first waiter starts at.
    tag: u64,
    /// In the order they came, so by number.
    pub(super) waiters: VecDeque<Waiter>,
}

#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) waker: Option<Waker>,
    /// The units it takes when served.
    cost: u64,
}

impl Class {
    /// A class whose lanes are served by units (see [`Weighed`]).
    pub(super) fn weighed() -> Self {
        Class {
            weighed: Some(Box::default()),
            ..Class::default()
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting == 0
    }

    /// The lane served next: the front of the order, which is never stale.
    pub(super) fn front_lane(&self) -> Option<&Lane> {
        let value = match &self.weighed {
            Some(weighed) => weighed.order.first().map(|(_, _, value)| value)?,
            None => self.order.front().map(|(value, _)| value)?,
        };
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
        let weighed = (self.weighed.iter()).flat_map(|w| w.order.iter().map(|(_, _, value)| value));
        let turns = (self.order.iter()).map(|(value, _)| value);
        (weighed.chain(turns).take(WINDOW))
            .filter_map(|value| self.lanes.get(value))
            .flat_map(|lane| lane.waiters.iter().take(WINDOW))
            .map(|waiter| waiter.id)
    }

    /// Waiter `id`, which takes `cost` units when served, joins lane `value`, last.
    pub(super) fn push(&mut self, value: u64, id: u64, cost: u64) {
        let waiter = Waiter {
            id,
            waker: None,
            cost,
        };
        let lane = match self.lanes.get_mut(&value) {
            Some(lane) => lane,
            None => {
                self.generation += 1;
                let tag = match &mut self.weighed {
                    Some(weighed) => {
                        weighed
                            .order
                            .insert((weighed.clock, self.generation, value));
                        weighed.clock
                    }
                    None => {
                        self.order.push_back((value, self.generation));
                        0
                    }
                };
                self.lanes.entry(value).or_insert(Lane {
                    generation: self.generation,
                    tag,
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
        // Its first waiter left unserved: the next keeps its tag.
        let entry = (lane.tag, lane.generation, value);
        self.waiting -= 1;
        self.resized(length + 1, length);
        if length == 0 {
            self.lanes.remove(&value);
            match &mut self.weighed {
                Some(weighed) => _ = weighed.order.remove(&entry),
                None => {
                    self.stale += 1;
                    self.settle();
                }
            }
        }
        true
    }

    /// The front lane's first waiter is served: the lane goes to the back, or is forgotten
    /// once empty.
    pub(super) fn pop_front(&mut self) -> Option<u64> {
        if self.weighed.is_some() {
            return self.pop_weighed();
        }
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

    /// The lane with the lowest tag serves its first waiter; the next starts at the tag after
    /// its units.
    fn pop_weighed(&mut self) -> Option<u64> {
        let weighed = self.weighed.as_deref_mut()?;
        let (tag, generation, value) = weighed.order.pop_first()?;
        let lane = self.lanes.get_mut(&value)?;
        let waiter = lane.waiters.pop_front()?;
        weighed.clock = weighed.clock.max(tag.saturating_add(waiter.cost));
        let length = lane.waiters.len();
        if length == 0 {
            self.lanes.remove(&value);
        } else {
            lane.tag = tag.saturating_add(waiter.cost);
            weighed.order.insert((lane.tag, generation, value));
        }
        self.waiting -= 1;
        self.resized(length + 1, length);
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
        if let Some(weighed) = &self.weighed {
            return weighed.ahead_of(self.lanes.get(&value));
        }
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

impl Weighed {
    /// How many would be served before a newcomer to `lane` (`None`: a lane made for it), at
    /// least: its lane's waiters, and the first waiter of each lane whose tag is lower than its
    /// lane's (each lane's later waiters, whose tags depend on what they cost, are left out: a
    /// call that could be served in time is never refused). At most [`EXACT`] lanes counted.
    fn ahead_of(&self, lane: Option<&Lane>) -> usize {
        // A lane made now comes after the lanes of its tag: they were made before.
        let (tag, own, ties) = match lane {
            Some(lane) => (lane.tag, lane.waiters.len(), false),
            None => (self.clock, 0, true),
        };
        let before = (self.order.iter().take(EXACT))
            .take_while(|(other, ..)| *other < tag || (ties && *other == tag))
            .count();
        own + before
    }
}

/// The lane of `value` if the order's entry `(value, generation)` is it, not a stale entry of
/// a lane since emptied (and perhaps made again).
fn live_lane(lanes: &HashMap<u64, Lane>, value: u64, generation: u64) -> Option<&Lane> {
    lanes
        .get(&value)
        .filter(|lane| lane.generation == generation)
}
