//! A gate that learns the provider's limit from what its answers say (`rate = "auto"`, or a
//! declared rate with `learn = true`).
//!
//! An answer says "`remaining` units left until `reset`, out of `limit`". Two things follow:
//!
//! - **Before the reset**, at most `remaining` more units, less those the gate already
//!   promised before it (units reserved after the answered call, whether or not the provider
//!   had seen them, and those reserved before it that still wait: an answer never lets the
//!   gate send what the calls in flight and waiting will take).
//!   An auto gate hands what is left out at once, to whoever asks first, as the provider
//!   would; nothing left (or less than already promised) holds the gate until the reset, as
//!   a 429 would, but before it.
//! - **After it**, a steady pace of `limit` units per window, the window being the longest
//!   reset an answer stated (or the IETF `w`): paced rather than a burst at the reset, because
//!   the provider may count in fixed windows (all back at the reset) or as a token bucket
//!   (back a little at a time, so that a burst at the reset would exceed it). A provider that
//!   lowers its limit is followed at the next answer: the pace is the new limit's.
//!
//! An answer to a call older than the latest one applied is stale and is ignored. An answer
//! whose pace is faster than the one the slots ahead were booked at places them again, in
//! their order (their callers look every [`SLOT_RECHECK`] whether their slot came sooner), as
//! does a caller giving up a slot with others behind it, and one call takes at most a window
//! of the schedule: a flapping "limit 1" holds no caller past the window it stated, at most
//! `retry_after_max`, once the pace recovers.
//!
//! A gate that knows nothing yet (`rate = "auto"` before its first answer) sends one call
//! and holds the others until that call's answer says something: 40 callers at once do not
//! find the limit by collecting 30 × 429. A probe not answered within [`PROBE_LOST`] lets
//! another go. An answer that says nothing leaves an auto gate open (there is no figure to
//! keep), holding only for 429s; a declared gate keeps its declared rate.
//!
//! Hostile answers are bounded: a declared rate is a ceiling the gate never runs above (a
//! declared gate takes no burst from an answer, only its pace and its holds, and its schedule
//! is never put back before the declared schedule of the calls it started: its floor), a
//! reset is cut to `retry_after_max` (the bound a `Retry-After` has), and nothing an answer
//! states outlives its reset but the pace.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{nanos, RateGate, Slot};
use crate::sync::lock_std;
use crate::Quota;

mod book;
mod ceiling;
mod probe;

/// The longest a probe's call is waited for before another caller probes instead: a probe
/// cut by its timeout or cancelled lets another go at once, so this only bounds a probe
/// with no limit of its own.
const PROBE_LOST: Duration = Duration::from_secs(60);

/// The most slots started a learning gate keeps booked: the calls in flight, whose answers
/// may still count them and place the slots ahead again. An answer forgets those booked up to
/// its call that started (one still waiting stays: its caller may give it back), so only
/// calls that never end (or never answer) could fill it; the earliest of them goes first. A
/// slot counts as started once the schedule passed its end too: a shared gate's slot that the
/// store granted is booked at its grant, its caller still waiting, and forgotten its giving
/// up would leave the schedule where it ended. The slots ahead are kept whatever their number
/// (each has its caller waiting, or went back when it gave up), or the answer of a call in
/// flight would find its slot gone with more than this many waiting, and place none of them
/// again.
const STARTED_AT_MOST: usize = 64;

/// The most slots a learning gate keeps booked at all: only slots reserved and neither used
/// nor given back ([`RateGate::reserve`] called by hand) could reach it.
const BOOKED_AT_MOST: usize = 4096;

/// How often callers held by a probe look again: soon after the probe's answer, without a
/// wakeup per answer.
const PROBE_RECHECK: Duration = Duration::from_millis(20);

/// How often a caller waiting for a learning gate's slot looks whether an answer placed it
/// sooner (see [`RateGate::due`]).
pub(crate) const SLOT_RECHECK: Duration = Duration::from_secs(1);

/// What a learning gate knows.
#[derive(Debug)]
pub(crate) struct Learning {
    /// Nanoseconds per unit the answers say (0: no answer stated figures yet).
    learnt: AtomicU64,
    /// Units reserved so far: the answered call's count tells which came after it.
    reserved: AtomicU64,
    /// When the probe in flight started (offset + 1; 0: none).
    probe: AtomicU64,
    /// The declared schedule of the units that started (nanoseconds since the origin): what a
    /// start is checked against, so that the declared ceiling holds over the starts themselves
    /// whatever the answers did to the slots (see [`RateGate::start_within_ceiling`]).
    started: AtomicU64,
    /// 0: an auto gate that knows nothing yet; 1: it heard an answer (with figures or not).
    told: AtomicU64,
    /// Everything an answer changes, changed together: answers applied out of order on two
    /// threads cannot mix.
    state: Mutex<State>,
    /// The key whose gate this is, for a gate per key: what its gauge and events name.
    key: Option<std::sync::Arc<str>>,
}

/// A learning gate's knowledge, under its lock.
#[derive(Debug, Default)]
pub(super) struct State {
    /// The mark of the latest answered call applied; older answers are stale.
    heard: u64,
    /// The units per window the latest answer stated (`None`: none said).
    limit: Option<u64>,
    /// The window, in nanoseconds: the longest reset (or IETF window) stated lately.
    window: Window,
    /// For an auto gate: the units it may still hand out at once before the reset.
    spare: BeforeReset,
    /// For an auto gate: the most units one call may cost, the limit stated, until the reset
    /// of the answer that stated it.
    ceiling: BeforeReset,
    /// The declared schedule of the slots' starts (nanoseconds since the origin): where the
    /// gate's would stand had every unit taken the declared interval. The schedule is never
    /// put back before it, so that no answer lifts the declared ceiling.
    floor: u64,
    /// Where the slots started end at the pace learnt, as the latest placing counted them
    /// (nanoseconds since the origin): a slot given up places the ones after it no sooner
    /// (the answered calls' slots, which it counted, are forgotten since).
    paced: u64,
    /// The rate last reported, in units per second (0: none yet).
    noted: f64,
    /// The slots reserved and not yet forgotten.
    booked: VecDeque<Booked>,
    /// Slots given back while later ones were still promised: they go back into the schedule
    /// once every slot after them has (until the schedule is placed otherwise).
    given: Vec<Booked>,
}

impl State {
    /// The window, in nanoseconds (see [`Window`]).
    pub(super) fn window(&self) -> u64 {
        self.window.get()
    }
}

/// The window: the longest reset stated, each being at most the provider's window (a fixed
/// window's reset is what is left of it, a token bucket's the time to refill it). Kept, not
/// let to decay: the longest reset of a while is what was left of the window at its first
/// call, and a window taken from it shrinks period after period, the rate learnt rising
/// above the provider's (1.0/s, then 1.19/s and 1.40/s, against 10 per 10 s). Only a reset
/// more than twice the longest stated in this period and the last (a period being as long as
/// the window) is forgotten: a hostile reset years ahead (cut to `retry_after_max`), or a
/// window the provider shortened, slows the gate for two such periods at most, not for ever.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    longest: u64,
    now: u64,
    before: u64,
    since: u64,
}

impl Window {
    fn get(&self) -> u64 {
        self.longest
    }

    /// `stated` (nanoseconds) heard at `at`.
    fn hear(&mut self, stated: u64, at: u64) {
        if at.saturating_sub(self.since) >= self.get() {
            (self.before, self.now, self.since) = (self.now, 0, at);
        }
        self.now = self.now.max(stated);
        let lately = self.now.max(self.before);
        self.longest = match self.longest > lately.saturating_mul(2) {
            true => lately,
            false => self.longest.max(stated),
        };
    }
}

/// A slot a learning gate reserved: when it starts, when its caller looks at it next, the
/// schedule before and after it and the floor before it (nanoseconds since the origin), the
/// count of units reserved up to it, and its units.
#[derive(Debug, Clone, Copy)]
struct Booked {
    start: u64,
    looks: u64,
    from: u64,
    end: u64,
    floor: u64,
    mark: u64,
    units: u64,
}

// What `Keys::BYTES_PER_STARTED_SLOT` tells users a started slot keeps.
const _: () = assert!(std::mem::size_of::<Booked>() == 56);

/// Units an answer stated, that hold until the provider's reset.
#[derive(Debug, Default, Clone, Copy)]
struct BeforeReset {
    units: u64,
    /// The reset, in nanoseconds since the gate's origin.
    until: u64,
}

/// What an answer did to a learning gate's rate: units per second now, and, when it moved by
/// more than a tenth since last reported, what it was then (0: nothing learnt before).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Learnt {
    pub(crate) to: f64,
    pub(crate) news: Option<f64>,
}

impl Learning {
    pub(crate) fn new(told: bool) -> Self {
        Learning {
            learnt: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            probe: AtomicU64::new(0),
            started: AtomicU64::new(0),
            told: AtomicU64::new(u64::from(told)),
            state: Mutex::new(State::default()),
            key: None,
        }
    }

    /// What the gate of the key `key` knows when it is made: nothing yet, for an auto gate.
    pub(crate) fn fresh(&self, auto: bool, key: &std::sync::Arc<str>) -> Self {
        Learning {
            key: Some(std::sync::Arc::clone(key)),
            ..Learning::new(!auto)
        }
    }

    fn told(&self) -> bool {
        self.told.load(Ordering::Acquire) != 0
    }

    /// Nanoseconds per unit an answer stated (0: none yet).
    pub(super) fn learnt(&self) -> u64 {
        self.learnt.load(Ordering::Acquire)
    }
}

impl RateGate {
    /// Whether this is an auto gate that knows nothing yet: it sends one call at a time.
    pub(crate) fn probing(&self) -> bool {
        self.learning
            .as_ref()
            .is_some_and(|learning| !learning.told())
    }

    /// Whether answers have stated this gate's figures: then they, not its 429s, set its
    /// pace (a learning gate whose provider states nothing is slowed by a 429 as any gate).
    pub(super) fn figures_stated(&self) -> bool {
        self.learning
            .as_ref()
            .is_some_and(|learning| learning.learnt() != 0)
    }

    /// The most units one call may cost an auto gate: the limit an answer stated, until that
    /// answer's reset (`None`: none stated, a limit of 0, which says only that nothing may go
    /// before the reset, as the hold until it does, or not an auto gate). A limit stated
    /// once never refuses calls past its reset: one hostile answer would shut the gate for
    /// good, no call going to bring a newer answer. Nor a call held past it by a throttle's
    /// hold: it starts after the reset.
    pub(super) fn learnt_limit(&self) -> Option<u64> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        let ceiling = lock_std(&learning.state).ceiling;
        let at = (self.offset(Instant::now())).max(self.held_until.load(Ordering::Acquire));
        (at < ceiling.until && ceiling.units > 0).then_some(ceiling.units)
    }

    /// The state of a learning gate, locked while its schedule changes (`None`: not a
    /// learning gate): its book and its floor change with the schedule.
    pub(super) fn learning_state(&self) -> Option<MutexGuard<'_, State>> {
        self.learning
            .as_ref()
            .map(|learning| lock_std(&learning.state))
    }

    /// What the answer to a call through this gate said (`None`: it stated nothing), for the
    /// call whose slot `slot` was, heard at `at` (see the [module docs](self)): the pace
    /// after the reset, what may go before it, or a hold until it (at most `max_wait`).
    /// Returns the rate the gate runs at since, when the answer stated figures.
    pub(crate) fn learn(
        &self,
        quota: Option<Quota>,
        at: Instant,
        slot: Slot,
        max_wait: Duration,
    ) -> Option<Learnt> {
        let learning = self.learning.as_ref()?;
        // A slot apart from the schedule may be the probe: an answer, whatever it says,
        // ends the probing (a spare's, in a gate no longer probing, changes nothing).
        if slot.is_off_schedule() {
            learning.told.store(1, Ordering::Release);
            learning.probe.store(0, Ordering::Release);
        }
        let mut state = lock_std(&learning.state);
        let answered = (state.booked.iter())
            .find(|booked| booked.mark == slot.mark())
            .copied();
        // The slots reserved up to the answered call count for no later answer, but those
        // still waiting: the provider has not seen them, and their callers may give them back.
        let now = self.offset(Instant::now());
        state
            .booked
            .retain(|booked| booked.mark > slot.mark() || booked.start > now);
        let quota = quota?;
        // Stale: a later call's answer was applied already.
        if state.heard > slot.mark() {
            return None;
        }
        state.heard = slot.mark();
        let reset = quota.reset.min(max_wait);
        let heard = self.offset(at);
        let until = heard.saturating_add(nanos(reset));
        // A limit holds until the reset of the answer that stated it: an answer that states
        // none after it (an IETF field without its policy) is not clamped by a stale one, or
        // a limit of 0 once stated would hold every later answer's callers, for good.
        if state.ceiling.until <= heard {
            state.limit = None;
        }
        if let Some(limit) = quota.limit {
            state.limit = Some(limit);
            state.ceiling = BeforeReset {
                units: limit,
                until,
            };
        }
        let remaining = state
            .limit
            .map_or(quota.remaining, |l| quota.remaining.min(l));
        let stated = quota.window.map_or(reset, |window| window.min(max_wait));
        state.window.hear(nanos(stated), heard);
        // With no limit stated, the provider allows at least what is left and this call.
        let limit = state.limit.unwrap_or(remaining.saturating_add(1)).max(1);
        // Units not yet seen by the provider (reserved after the answered call, or before it
        // and still waiting) that start before the reset.
        let promised: u64 = (state.booked.iter())
            .filter(|booked| booked.start < until)
            .map(|booked| booked.units)
            .sum();
        // The limit per window. A declared gate, which takes nothing at once from an answer,
        // runs faster when what is left, spread from its last slot until the reset, allows
        // it: a window overestimated (by a hostile reset) does not slow a gate the answers
        // say may go faster, and its schedule comes back to that pace.
        let steady = (state.window.get() / limit).max(1);
        let last = (state.booked.iter().map(|booked| booked.start).max())
            .unwrap_or(now)
            .max(now);
        let spread = (!self.auto && remaining > promised)
            .then(|| until.saturating_sub(last) / (remaining - promised))
            .filter(|spread| *spread > 0 && *spread < steady);
        let pace = spread.unwrap_or(steady);
        learning.learnt.store(pace, Ordering::Release);
        if let Some(answered) = answered {
            self.replace(learning, &mut state, &answered, now);
        }
        // Units not yet seen by the provider that start before the reset, where they
        // start now.
        let promised: u64 = (state.booked.iter())
            .filter(|booked| booked.start < until)
            .map(|booked| booked.units)
            .sum();
        if remaining == 0 {
            // Nothing left: no slot before the reset, in any instance.
            state.spare = BeforeReset::default();
            let left = until.saturating_sub(now);
            if left > 0 {
                drop(state);
                self.hold(Duration::from_nanos(left));
                state = lock_std(&learning.state);
            }
        } else if remaining <= promised {
            // The schedule already holds what is left (or a little more, the pace being an
            // estimate: the answer that says nothing is left holds the rest).
            state.spare = BeforeReset::default();
            if self.auto {
                // An auto gate's schedule resumes at the reset, however its slots ahead
                // were placed again.
                self.resume_at(&mut state, until);
            }
        } else if self.auto {
            let units = remaining - promised;
            state.spare = BeforeReset { units, until };
            // The schedule resumes at the reset: what goes before it is the spare.
            self.resume_at(&mut state, until);
            // The room's waiters are served from it first (its lock is never taken under
            // this one's).
            drop(state);
            self.wake_room();
            state = lock_std(&learning.state);
        }
        let to = per_second(self.learnt_interval(learning));
        // A tenth either way since last reported is news; less is the pace breathing.
        let noted = state.noted;
        let news = (noted == 0.0 || (to - noted).abs() > noted / 10.0).then_some(noted);
        if news.is_some() {
            state.noted = to;
        }
        Some(Learnt { to, news })
    }

    /// The interval a learning gate runs at: what it learnt, never faster than declared.
    #[inline]
    pub(super) fn learnt_interval(&self, learning: &Learning) -> u64 {
        learning.learnt().max(self.interval)
    }

    /// The key a learning gate per key belongs to.
    pub(crate) fn learnt_key(&self) -> Option<&str> {
        self.learning.as_ref()?.key.as_deref()
    }

    /// The units per second a learning gate runs at now (`None`: not a learning gate, or
    /// no answer stated figures yet).
    pub fn learnt_rate(&self) -> Option<f64> {
        let learning = self.learning.as_ref()?;
        (learning.learnt() != 0).then(|| per_second(self.learnt_interval(learning)))
    }
}

/// Units per second at `interval` nanoseconds per unit.
fn per_second(interval: u64) -> f64 {
    1e9 / interval.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls that never end (nor answer) must not make the book grow with every call, nor
    /// slots reserved by hand and never used.
    #[tokio::test(start_paused = true)]
    async fn the_book_stays_bounded_when_no_answer_comes() {
        let gate = RateGate::new(1_000, Duration::from_secs(1), 1)
            .unwrap()
            .learning();
        for _ in 0..(STARTED_AT_MOST * 3) {
            gate.reserve(1, None).unwrap();
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        let learning = gate.learning.as_ref().unwrap();
        assert_eq!(lock_std(&learning.state).booked.len(), STARTED_AT_MOST);
        for _ in 0..(BOOKED_AT_MOST * 3) {
            gate.reserve(1, None).unwrap();
        }
        assert_eq!(lock_std(&learning.state).booked.len(), BOOKED_AT_MOST);
    }
}
