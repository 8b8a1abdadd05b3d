//! A gate that learns the provider's limit from what its answers say (`rate = "auto"`, or a
//! declared rate with `learn = true`).
//!
//! An answer says "`remaining` units left until `reset`, out of `limit`". Two things follow:
//!
//! - **Before the reset**, at most `remaining` more units, less those the gate already
//!   promised before it (units reserved after the answered call, whether or not the provider
//!   had seen them: an answer never lets the gate send what the calls in flight will take).
//!   An auto gate hands what is left out at once, to whoever asks first, as the provider
//!   would; nothing left (or less than already promised) holds the gate until the reset, as
//!   a 429 would, but before it.
//! - **After it**, a steady pace of `limit` units per window, the window being the longest
//!   reset an answer stated (or the IETF `w`): paced rather than a burst at the reset, because
//!   the provider may count in fixed windows (all back at the reset) or as a token bucket
//!   (back a little at a time, so that a burst at the reset would exceed it). A provider that
//!   lowers its limit is followed at the next answer: the pace is the new limit's.
//!
//! An answer to a call older than the latest one applied is stale and is ignored.
//!
//! A gate that knows nothing yet (`rate = "auto"` before its first answer) sends one call
//! and holds the others until that call's answer says something: 40 callers at once do not
//! find the limit by collecting 30 × 429. A probe not answered within [`PROBE_LOST`] lets
//! another go. An answer that says nothing leaves an auto gate open (there is no figure to
//! keep), holding only for 429s; a declared gate keeps its declared rate.
//!
//! Hostile answers are bounded: a declared rate is a ceiling the gate never runs above (a
//! declared gate takes no burst from an answer, only its pace and its holds), and a reset is
//! cut to `retry_after_max` (the bound a `Retry-After` has).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{nanos, RateGate, Slot};
use crate::deadline::NEVER;
use crate::sync::lock_std;
use crate::{Quota, Rejected};

/// The longest a probe's call is waited for before another caller probes instead: a probe
/// cut by its timeout or cancelled lets another go at once, so this only bounds a probe
/// with no limit of its own.
const PROBE_LOST: Duration = Duration::from_secs(60);

/// The most slots a learning gate keeps booked: the calls in flight, whose answers may
/// still count them. An answer forgets those booked up to its call, so only calls that never
/// end (or never answer) could fill it.
const BOOKED_AT_MOST: usize = 64;

/// How often callers held by a probe look again: soon after the probe's answer, without a
/// wakeup per answer.
const PROBE_RECHECK: Duration = Duration::from_millis(20);

/// What a learning gate knows.
#[derive(Debug)]
pub(crate) struct Learning {
    /// Nanoseconds per unit the answers say (0: no answer stated figures yet).
    learnt: AtomicU64,
    /// Units reserved so far: the answered call's count tells which came after it.
    reserved: AtomicU64,
    /// When the probe in flight started (offset + 1; 0: none).
    probe: AtomicU64,
    /// 0: an auto gate that knows nothing yet; 1: it heard an answer (with figures or not).
    told: AtomicU64,
    /// Everything an answer changes, changed together: answers applied out of order on two
    /// threads cannot mix.
    state: Mutex<State>,
    /// The key whose gate this is, for a gate per key: what its gauge and events name.
    key: Option<Box<str>>,
}

/// A learning gate's knowledge, under its lock.
#[derive(Debug, Default)]
struct State {
    /// The mark of the latest answered call applied; older answers are stale.
    heard: u64,
    /// The units per window the latest answer stated (`None`: none said).
    limit: Option<u64>,
    /// The window, in nanoseconds: the longest reset (or IETF window) stated lately.
    window: Window,
    /// For an auto gate: the units it may still hand out at once before the reset.
    spare: Spare,
    /// The rate last reported, in units per second (0: none yet).
    noted: f64,
    /// The slots reserved and not yet forgotten.
    booked: VecDeque<Booked>,
}

/// The longest reset stated lately: the longest of this period and the last one, a period
/// being as long as the window itself. A hostile reset years ahead (cut to `retry_after_max`)
/// thus slows the gate for two such periods at most, not for ever.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    now: u64,
    before: u64,
    since: u64,
}

impl Window {
    fn get(&self) -> u64 {
        self.now.max(self.before)
    }

    /// `stated` (nanoseconds) heard at `at`.
    fn hear(&mut self, stated: u64, at: u64) {
        if at.saturating_sub(self.since) >= self.get() {
            (self.before, self.now, self.since) = (self.now, 0, at);
        }
        self.now = self.now.max(stated);
    }
}

/// A slot a learning gate reserved: when it starts and the schedule before it (nanoseconds
/// since the origin), the count of units reserved up to it, and its units.
#[derive(Debug, Clone, Copy)]
struct Booked {
    start: u64,
    from: u64,
    mark: u64,
    units: u64,
}

/// Units an auto gate may hand out at once, until the provider's reset.
#[derive(Debug, Default, Clone, Copy)]
struct Spare {
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
            told: AtomicU64::new(u64::from(told)),
            state: Mutex::new(State::default()),
            key: None,
        }
    }

    /// What the gate of the key `key` knows when it is made: nothing yet, for an auto gate.
    pub(crate) fn fresh(&self, auto: bool, key: &str) -> Self {
        Learning {
            key: Some(key.into()),
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

    /// The most units one call may cost an auto gate: the limit an answer stated (`None`:
    /// none stated yet, or not an auto gate).
    pub(super) fn learnt_limit(&self) -> Option<u64> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        lock_std(&learning.state).limit
    }

    /// Books `cost` units reserved by a learning gate, to start at `start` from the schedule
    /// at `from`; the count after them marks the slot. Nothing for another gate.
    pub(super) fn book(&self, cost: u64, start: u64, from: u64) -> u64 {
        let Some(learning) = &self.learning else {
            return 0;
        };
        let mut state = lock_std(&learning.state);
        if state.booked.len() >= BOOKED_AT_MOST {
            state.booked.pop_front();
        }
        let mark = learning
            .reserved
            .fetch_add(cost, Ordering::AcqRel)
            .saturating_add(cost);
        state.booked.push_back(Booked {
            start,
            from,
            mark,
            units: cost,
        });
        mark
    }

    /// `slot` went back unused: it is no longer booked. The schedule before it, if it is
    /// still booked.
    pub(super) fn unbook(&self, slot: Slot) -> Option<u64> {
        let learning = self.learning.as_ref()?;
        let mut state = lock_std(&learning.state);
        let at = state.booked.iter().position(|b| b.mark == slot.mark())?;
        state.booked.remove(at).map(|booked| booked.from)
    }

    /// A hold revoked every slot that starts after `now` (they are booked again after it),
    /// and what an auto gate could hand out at once.
    pub(super) fn unbook_after(&self, now: u64) {
        if let Some(learning) = &self.learning {
            let mut state = lock_std(&learning.state);
            state.booked.retain(|booked| booked.start <= now);
            state.spare = Spare::default();
        }
    }

    /// A slot from an auto gate that knows nothing yet: the probe's, at once, when none is in
    /// flight; otherwise a provisional one, a short look later (always revoked, so its caller
    /// reserves again). `None`: the gate knows enough to reserve as usual.
    pub(super) fn probe_slot(
        &self,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<Result<(Duration, Slot), Rejected>> {
        let learning = self.learning.as_ref()?;
        if learning.told() {
            return None;
        }
        let at = self.offset(now);
        let probe = learning.probe.load(Ordering::Acquire);
        let lost = probe != 0 && at.saturating_sub(probe - 1) >= nanos(PROBE_LOST);
        if (probe == 0 || lost)
            && learning
                .probe
                .compare_exchange(
                    probe,
                    at.saturating_add(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            let mark = self.book(1, at, at);
            return Some(Ok((Duration::ZERO, Slot::off_schedule(mark, self.epoch()))));
        }
        let left = deadline.map_or(NEVER, |deadline| deadline.saturating_duration_since(now));
        let wait = PROBE_RECHECK.min(left);
        if wait.is_zero() {
            return Some(Err(Rejected::RateLimited {
                retry_in: PROBE_RECHECK,
            }));
        }
        Some(Ok((wait, Slot::provisional())))
    }

    /// The wait an auto gate that knows nothing yet asks of a caller: a look again soon.
    pub(super) fn probe_wait(&self) -> Option<Duration> {
        self.probing().then_some(PROBE_RECHECK)
    }

    /// The probe's call ended without an answer to learn from (cancelled, cut by its timeout,
    /// or failed before the provider answered): another caller probes.
    pub(crate) fn probe_ended(&self, slot: Slot) {
        if let (Some(learning), true) = (&self.learning, slot.is_off_schedule()) {
            if !learning.told() {
                learning.probe.store(0, Ordering::Release);
            }
        }
    }

    /// Whether an auto gate may hand out `cost` units at once now, before the provider's
    /// reset, and no hold is in force.
    fn spare_covers(&self, learning: &Learning, at: u64, cost: u64) -> bool {
        let spare = lock_std(&learning.state).spare;
        at < spare.until && spare.units >= cost && self.held_until.load(Ordering::Acquire) <= at
    }

    /// The wait before `cost` units could pass through an auto gate's spare (zero), if they
    /// could.
    pub(super) fn spare_wait(&self, at: u64, cost: u64) -> Option<Duration> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        self.spare_covers(learning, at, cost)
            .then_some(Duration::ZERO)
    }

    /// A slot from what an auto gate may hand out at once before the provider's reset, if
    /// it may.
    pub(super) fn spare_slot(&self, now: Instant, cost: u64) -> Option<Slot> {
        let learning = self.learning.as_ref().filter(|_| self.auto)?;
        let at = self.offset(now);
        if self.held_until.load(Ordering::Acquire) > at {
            return None;
        }
        let mut state = lock_std(&learning.state);
        if at >= state.spare.until || state.spare.units < cost {
            return None;
        }
        state.spare.units -= cost;
        drop(state);
        Some(Slot::off_schedule(self.book(cost, at, at), self.epoch()))
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
        // The slots reserved up to the answered call count for no later answer.
        state.booked.retain(|booked| booked.mark > slot.mark());
        let quota = quota?;
        // Stale: a later call's answer was applied already.
        if state.heard > slot.mark() {
            return None;
        }
        state.heard = slot.mark();
        let reset = quota.reset.min(max_wait);
        let heard = self.offset(at);
        let until = heard.saturating_add(nanos(reset));
        if quota.limit.is_some() {
            state.limit = quota.limit;
        }
        let remaining = state
            .limit
            .map_or(quota.remaining, |l| quota.remaining.min(l));
        let stated = quota.window.map_or(reset, |window| window.min(max_wait));
        state.window.hear(nanos(stated), heard);
        // With no limit stated, the provider allows at least what is left and this call.
        let limit = state.limit.unwrap_or(remaining.saturating_add(1)).max(1);
        // Units reserved after the answered call that start before the reset.
        let promised: u64 = (state.booked.iter())
            .filter(|booked| booked.start < until)
            .map(|booked| booked.units)
            .sum();
        let now = self.offset(Instant::now());
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
        if spread.is_some() {
            self.tat.fetch_min(
                last.saturating_add(pace.max(self.interval)),
                Ordering::AcqRel,
            );
        }
        if remaining == 0 {
            // Nothing left: no slot before the reset, in any instance.
            state.spare = Spare::default();
            let left = until.saturating_sub(now);
            if left > 0 {
                drop(state);
                self.hold(Duration::from_nanos(left));
                state = lock_std(&learning.state);
            }
        } else if remaining <= promised {
            // The schedule already holds what is left (or a little more, the pace being an
            // estimate: the answer that says nothing is left holds the rest).
            state.spare = Spare::default();
        } else if self.auto {
            let units = remaining - promised;
            state.spare = Spare { units, until };
            // The schedule resumes at the reset: what goes before it is the spare.
            self.tat.fetch_max(until, Ordering::AcqRel);
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

    /// Calls that never end (nor answer) must not make the book grow with every call.
    #[tokio::test(start_paused = true)]
    async fn the_book_stays_bounded_when_no_answer_comes() {
        let gate = RateGate::new(1_000_000, Duration::from_secs(1), 1)
            .unwrap()
            .learning();
        for _ in 0..(BOOKED_AT_MOST * 3) {
            gate.reserve(1, None).unwrap();
        }
        let learning = gate.learning.as_ref().unwrap();
        assert_eq!(lock_std(&learning.state).booked.len(), BOOKED_AT_MOST);
    }
}
