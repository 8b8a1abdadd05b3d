//! [`Turns`]: the order in which the callers waiting for a gate's slot or a bulkhead's place
//! are served, by class with aging, and in turn across `fair` values within a class.

use std::collections::HashMap;
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::lanes::{Class, Waiter, WINDOW};
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
///
/// Joining, leaving and serving cost the same however many lanes wait (a lane is found by its
/// value, a waiter by its number), so that a flood of tenants costs each caller nothing more.
#[derive(Debug)]
pub(crate) struct Turns {
    classes: [Class; 3],
    /// Per class, the turns given to a more urgent class since this one last was served, while
    /// it had waiters.
    passed: [u32; 3],
    lanes: usize,
    next_id: u64,
    /// Where each waiter is: its class and its lane's value.
    index: HashMap<u64, (usize, u64)>,
    /// The waiters passed over that have not come back (see [`Turns::pass_over`]).
    passed_over: Vec<u64>,
    /// The waiter that stepped aside, and its class (see [`Turns::step_aside`]).
    aside: Option<(u64, usize)>,
}

impl Default for Turns {
    /// Waiters in arrival order within a class (one lane).
    fn default() -> Self {
        Turns::new(0)
    }
}

impl Turns {
    /// Waiters served round-robin across at most `lanes` values per class and the overflow
    /// lane; with `lanes` 0, in one lane whatever their values (a policy that is not fair).
    pub(crate) fn new(lanes: usize) -> Self {
        Turns::with_classes(lanes, Default::default())
    }

    /// Waiters whose costs differ (a token gate's): with `fair`, the lanes of a class take
    /// turns by the units they were served, not by calls (see `lanes.rs`).
    pub(crate) fn weighed(lanes: usize) -> Self {
        Turns::with_classes(lanes, std::array::from_fn(|_| Class::weighed()))
    }

    fn with_classes(lanes: usize, classes: [Class; 3]) -> Self {
        Turns {
            classes,
            passed: [0; 3],
            lanes,
            next_id: 0,
            index: HashMap::new(),
            passed_over: Vec::new(),
            aside: None,
        }
    }

    /// A new waiter at `place`, last of its lane: its number. The waiter it displaces as
    /// next, if any, is woken to stop waiting for the next slot or place.
    pub(crate) fn join(&mut self, place: Place) -> u64 {
        self.join_costing(place, 1)
    }

    /// [`Turns::join`], for a waiter that takes `cost` units when served.
    pub(crate) fn join_costing(&mut self, place: Place, cost: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let displaced = self.next();
        let index = place.class().index();
        let class = &mut self.classes[index];
        let value = class.lane_value(place.lane(), self.lanes);
        class.push(value, id, cost);
        self.index.insert(id, (index, value));
        if displaced.is_some() && self.next() == Some(id) {
            self.wake(displaced);
        }
        id
    }

    /// The class served next: a class passed over [`Priority::AGING_PASSES`] times (the most
    /// urgent of those), otherwise the most urgent that waits. The class of a waiter that
    /// stepped aside waits its turn after the others, if any.
    fn next_class(&self) -> Option<usize> {
        let waiting = |class: &usize| !self.classes[*class].is_empty();
        let aside = self
            .aside
            .map(|(_, class)| class)
            .filter(|aside| (0..3).filter(waiting).any(|class| class != *aside));
        let eligible = |class: &usize| waiting(class) && Some(*class) != aside;
        let aged = (0..3)
            .filter(eligible)
            .find(|class| self.passed[*class] >= Priority::AGING_PASSES);
        aged.or_else(|| (0..3).find(eligible))
    }

    /// The waiter served next.
    pub(crate) fn next(&self) -> Option<u64> {
        let class = self.next_class()?;
        let lane = self.classes[class].front_lane()?;
        lane.waiters.front().map(|waiter| waiter.id)
    }

    /// Serves the next waiter (`id`, as [`Turns::next`] said): it leaves, its lane goes to the
    /// back of its class, the classes it passed count one more pass, and the next waiter, if
    /// any, is woken to take its place. Whether it was promoted: served by aging, before a
    /// more urgent waiter.
    pub(crate) fn serve(&mut self, id: u64) -> bool {
        let Some(class) = self.next_class() else {
            return false;
        };
        let promoted = (0..class).any(|urgent| {
            !self.classes[urgent].is_empty() && self.aside.is_none_or(|(_, aside)| aside != urgent)
        });
        let served = self.classes[class].pop_front();
        debug_assert_eq!(served, Some(id));
        self.index.remove(&id);
        if self.is_aside(id) {
            self.aside = None;
        }
        self.passed[class] = 0;
        for other in class + 1..3 {
            if !self.classes[other].is_empty() {
                self.passed[other] = self.passed[other].saturating_add(1);
            }
        }
        self.wake_next();
        promoted
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
        let Some((index, value)) = self.index.remove(&id) else {
            return false;
        };
        if self.is_aside(id) {
            self.aside = None;
        }
        let class = &mut self.classes[index];
        if !class.remove(value, id) {
            return false;
        }
        if class.is_empty() {
            self.passed[index] = 0;
        }
        if next == Some(id) {
            self.wake_next();
        } else if watcher {
            self.wake_watcher();
        }
        true
    }

    /// Keeps `waker` to wake waiter `id` when its turn may have come.
    pub(crate) fn wait(&mut self, id: u64, waker: &Waker) {
        if let Some(waiter) = self.find(id) {
            match &mut waiter.waker {
                Some(kept) if kept.will_wake(waker) => {}
                kept => *kept = Some(waker.clone()),
            }
        }
    }

    fn find(&mut self, id: u64) -> Option<&mut Waiter> {
        let (class, value) = *self.index.get(&id)?;
        self.classes[class].find(value, id)
    }

    /// Wakes waiter `id`, if it waits for a wakeup.
    fn wake(&mut self, id: Option<u64>) {
        let waker = id.and_then(|id| self.find(id)?.waker.take());
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Wakes the waiter served next, to take (or wait for) the next slot or place, and the
    /// ones that watch it (see [`Turns::watcher`]).
    pub(crate) fn wake_next(&mut self) {
        let next = self.next();
        self.wake(next);
        self.wake_watcher();
    }

    /// How many waiters watch the next (see [`Turns::watcher`]).
    const WATCHERS: usize = WINDOW - 1;

    /// The waiters other than the next that watch that the next takes what comes due for it,
    /// the first watching closest: a next whose future is left unpolled (a call shared by
    /// coalescing whose caller left, a branch of a `select!` not polled) would otherwise hold
    /// every waiter behind it, and so would a watcher left unpolled beside it.
    fn watchers(&self) -> impl Iterator<Item = u64> + '_ {
        let next = self.next();
        let aside = self.aside();
        (self.classes.iter())
            .flat_map(Class::front_waiters)
            .filter(move |id| Some(*id) != next && Some(*id) != aside)
            .take(Self::WATCHERS)
    }

    /// For waiter `id`, not the next, whose next was due at `expected` to take what came for
    /// it (`missed`: how late it may be): when the next counts as left unpolled for this
    /// waiter, and when this waiter is to look. A watcher looks `rank` × `missed` after; any
    /// other waiter once every watcher would have, in case they are left unpolled too, and at
    /// most once every [`Turns::LOOK_AGAIN`] (a room of many waiters wakes each of them at most
    /// once a second for it).
    pub(crate) fn watch(&self, id: u64, expected: Instant, missed: Duration) -> (Instant, Instant) {
        let watcher = self.watcher(id);
        let rank = watcher.unwrap_or(Self::WATCHERS as u32 + 1);
        let late = (expected.checked_add(missed.saturating_mul(rank))).unwrap_or(expected);
        let wake = match watcher {
            Some(_) => late,
            None => late.max(Instant::now() + Self::LOOK_AGAIN),
        };
        (late, wake)
    }

    /// How often a waiter that does not watch the next looks whether the watchers stalled.
    const LOOK_AGAIN: Duration = Duration::from_secs(1);

    /// Which watcher waiter `id` is, from 1 (the closest), if it is one.
    pub(crate) fn watcher(&self, id: u64) -> Option<u32> {
        let rank = self.watchers().position(|watcher| watcher == id)?;
        u32::try_from(rank + 1).ok()
    }

    /// The watchers, kept apart from the turns (to wake them, or pass them over).
    fn watcher_ids(&self) -> [Option<u64>; Self::WATCHERS] {
        let mut watchers = [None; Self::WATCHERS];
        for (kept, id) in watchers.iter_mut().zip(self.watchers()) {
            *kept = Some(id);
        }
        watchers
    }

    /// Wakes the watchers, to watch the next's new slot.
    pub(crate) fn wake_watcher(&mut self) {
        for id in self.watcher_ids() {
            self.wake(id);
        }
    }

    /// The next did not take what came due for it, as waiter `by` sees: it is passed over,
    /// and, if `by` is no watcher, so are the watchers, who did not either.
    pub(crate) fn pass_over_stalled(&mut self, by: u64) {
        if self.watcher(by).is_none() {
            for id in self.watcher_ids().into_iter().flatten() {
                self.pass_over(id);
            }
        }
        if let Some(next) = self.next() {
            self.pass_over(next);
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

    /// The next, `id`, cannot take what comes due yet (a batch call waiting for its place in
    /// the batch share): the others are served meanwhile, and its class after them, until it
    /// comes back ([`Turns::come_back`]) or leaves. It stays next while no other class waits.
    pub(crate) fn step_aside(&mut self, id: u64) {
        let Some(&(class, _)) = self.index.get(&id) else {
            return;
        };
        self.aside = Some((id, class));
        self.wake_next();
    }

    /// The waiter that stepped aside and has not come back, if any.
    pub(crate) fn aside(&self) -> Option<u64> {
        self.aside.map(|(id, _)| id)
    }

    /// Wakes the waiter aside, if any, to see whether it may come back.
    pub(crate) fn wake_aside(&mut self) {
        let aside = self.aside();
        self.wake(aside);
    }

    /// Whether waiter `id` stepped aside and has not come back.
    pub(crate) fn is_aside(&self, id: u64) -> bool {
        self.aside.is_some_and(|(aside, _)| aside == id)
    }

    /// Waiter `id`, which stepped aside, comes back: next again if its class is, and the
    /// next it displaces is woken.
    pub(crate) fn come_back(&mut self, id: u64) {
        if !self.is_aside(id) {
            return;
        }
        let displaced = self.next();
        self.aside = None;
        if displaced != self.next() {
            self.wake(displaced);
            self.wake_watcher();
        }
    }

    /// How many waiters would be served before a newcomer at `place`, at least: those of its
    /// class served before it (see [`Class::ahead_of`]), and the more urgent ones, as many as
    /// aging lets go before each of them and before it (a class passed over
    /// [`Priority::AGING_PASSES`] times is served next).
    pub(crate) fn ahead_of(&self, place: Place) -> usize {
        let index = place.class().index();
        let urgent: usize = self.classes[..index].iter().map(Class::waiting).sum();
        let own = self.ahead_in_class(place);
        let aging = Priority::AGING_PASSES as usize;
        let passed = self.passed[index] as usize;
        let aged = (aging.saturating_sub(passed)).saturating_add(own.saturating_mul(aging));
        own + urgent.min(aged)
    }

    /// How many waiters of its own class would be served before a newcomer at `place`.
    pub(crate) fn ahead_in_class(&self, place: Place) -> usize {
        self.classes[place.class().index()].ahead_of(place.lane(), self.lanes)
    }

    /// Whether waiters of a class other than `class` wait.
    pub(crate) fn others_wait(&self, class: Priority) -> bool {
        (0..3).any(|other| other != class.index() && !self.classes[other].is_empty())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.classes.iter().all(Class::is_empty)
    }

    /// Nobody waits, and nobody passed over is to come back.
    pub(crate) fn is_idle(&self) -> bool {
        self.is_empty() && self.passed_over.is_empty()
    }
}

#[cfg(test)]
mod tests;
