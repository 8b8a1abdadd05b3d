//! [`RateGate`]: a rate limit kept on this side, so the provider's is not hit.

use std::fmt;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use resil_spec::rules;
use tokio::time::Instant;

use crate::deadline::NEVER;
use crate::sync::lock_std;
use crate::{ConfigError, Rejected};

/// Stays under a provider's rate limit instead of collecting its 429s: `count` units per
/// `period`, at most `burst` at once.
///
/// A generic cell rate algorithm (GCRA) with reservations: each call takes a slot (or, for a
/// token gate, as many slots as it costs) at the earliest time the limit allows, and waits
/// until then, if that fits in its deadline; otherwise it is refused at once, without calling,
/// with [`Rejected::RateLimited`], and reserves nothing. Callers are served in the order they
/// asked: the 20th of 20 simultaneous callers of a `5/s` gate knows at once that its slot is
/// 3 s away.
///
/// Hand-written rather than `governor`: governor's limiter answers "now, or not before T" but
/// cannot reserve a future slot, so callers told to wait would all wake at T and race for one
/// slot (and a caller with a 1 s deadline could not know at once that its turn is 3 s away);
/// and it reads its own clock, where resil's timing follows tokio's (paused in tests). The
/// schedule is one atomic word: the theoretical arrival time, in nanoseconds since the gate was
/// made.
///
/// When a gated call is throttled anyway (a 429 with `Retry-After`, see
/// [`Transient::is_throttle`](crate::Transient::is_throttle)), the gate hands out no slot
/// before that wait is over, then resumes at its steady rate, one slot at a time: the other
/// callers wait in the gate instead of each provoking its own 429. Slots reserved before the
/// throttle are revoked: their callers take new ones, in turn, after the wait. Every throttle,
/// with a wait or without, also slows the gate for a while ([`RateGate::slow_down`]).
///
/// A slot reserved and not used (its caller gave up waiting) goes back unless a throttle
/// revoked it, once every slot promised after it has gone back too: a gate never promises one
/// instant twice, so a slot given up in the middle of the queue stays spent while a later one
/// is still held, and callers that all gave up leave no schedule behind them.
///
/// ```
/// use resil_runtime::{RateGate, Rejected};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let gate = RateGate::new(5, Duration::from_secs(1), 5).unwrap(); // 5/s, burst 5
/// for _ in 0..5 {
///     assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
/// }
/// assert_eq!(gate.reserve(1, None), Ok(Duration::from_millis(200)));
/// let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
/// assert_eq!(
///     gate.reserve(1, Some(deadline)),
///     Err(Rejected::RateLimited { retry_in: Duration::from_millis(400) })
/// );
/// # }
/// ```
pub struct RateGate {
    /// Nanoseconds per unit.
    interval: u64,
    burst: u64,
    count: u64,
    period: Duration,
    /// Theoretical arrival time, in nanoseconds since `origin`.
    tat: AtomicU64,
    /// The end of the latest throttle's wait, in nanoseconds since `origin`.
    held_until: AtomicU64,
    /// Counts throttles: a slot reserved under an older one is revoked.
    epoch: AtomicU64,
    /// Nanoseconds added to the interval by the latest slowdown, fading to none over
    /// [`RateGate::fade`] from `slowed_at` (see [`RateGate::slow_down`]).
    slowdown: AtomicU64,
    slowed_at: AtomicU64,
    /// The declared limit is the provider's exactly: a throttle holds the gate for its wait
    /// but does not slow it down.
    exact: bool,
    /// What a gate that learns from the provider's answers knows (see [`learn`]).
    learning: Option<Box<learn::Learning>>,
    /// A learning gate with no declared figure (`rate = "auto"`): no ceiling, no burst.
    auto: bool,
    /// Serialises a refund's check with a throttle's revocation (both rare; reservations
    /// never take it), and holds the slots given back while later ones were still promised:
    /// they go back into the schedule once every slot after them has.
    revising: Mutex<Vec<Slot>>,
    origin: Instant,
    /// Where the gate is kept for every instance, for a shared policy.
    #[cfg(feature = "shared")]
    shared: Option<std::sync::Arc<crate::seams::GateLink>>,
    /// A shared gate that orders its waiters asks its store for one slot at a time, for its
    /// most urgent caller (see [`RateGate::asking`]).
    #[cfg(feature = "shared")]
    asking: Option<std::sync::Arc<asking::Asking>>,
    /// Where callers wait, served by priority, in a gate that orders them (see [`waiters`]).
    waiters: Option<Box<waiters::Waiters>>,
    /// The share batch calls may take while others come (see [`batch`]).
    batch: Option<Box<batch::BatchShare>>,
}

impl fmt::Debug for RateGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateGate")
            .field("count", &self.count)
            .field("period", &self.period)
            .field("burst", &self.burst)
            .field("exact", &self.exact)
            .finish_non_exhaustive()
    }
}

impl RateGate {
    /// `count` units per `period`, up to `burst` of them at once. In any window of `period`
    /// the gate lets at most `count + burst - 1` units start: burst 1 keeps a provider that
    /// counts over a sliding window from ever seeing more than `count` (the attribute's
    /// `rate` defaults to it; `token_rate` defaults to the count, since one call may cost many
    /// units at once).
    pub fn new(count: u64, period: Duration, burst: u64) -> Result<Self, ConfigError> {
        Self::for_key("rate", count, period, burst)
    }

    /// [`RateGate::new`], reporting a broken rule under the setting `key`.
    pub(crate) fn for_key(
        key: &'static str,
        count: u64,
        period: Duration,
        burst: u64,
    ) -> Result<Self, ConfigError> {
        rules::rate(key, count, period, burst)?;
        // A period beyond "never" is "never": the arithmetic below then stays far from
        // saturation, where a second slot would wrongly cost nothing.
        // Rounded up: rounded down, `count` intervals would fall short of the period and a
        // window of it could see one unit more than promised.
        let interval = nanos(period.min(NEVER)).div_ceil(count).max(1);
        Ok(RateGate {
            interval,
            burst,
            count,
            period,
            tat: AtomicU64::new(0),
            held_until: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            slowdown: AtomicU64::new(0),
            slowed_at: AtomicU64::new(0),
            exact: false,
            learning: None,
            auto: false,
            revising: Mutex::new(Vec::new()),
            // Offsets are unsigned: an origin a little in the past keeps `now` after it even
            // when the gate is made and used at once.
            origin: Instant::now(),
            #[cfg(feature = "shared")]
            shared: None,
            #[cfg(feature = "shared")]
            asking: None,
            waiters: None,
            batch: None,
        })
    }

    /// A gate with the same limit and nothing reserved: the gate of the key named `key` of a
    /// keyed policy whose keys are `label` (`label=key` in Redis, for a shared gate).
    pub(crate) fn fresh(&self, label: &str, key: &std::sync::Arc<str>) -> Self {
        #[cfg(not(feature = "shared"))]
        let _ = label;
        RateGate {
            interval: self.interval,
            burst: self.burst,
            count: self.count,
            period: self.period,
            tat: AtomicU64::new(0),
            held_until: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            slowdown: AtomicU64::new(0),
            slowed_at: AtomicU64::new(0),
            exact: self.exact,
            learning: (self.learning.as_ref())
                .map(|learning| Box::new(learning.fresh(self.auto, key))),
            auto: self.auto,
            revising: Mutex::new(Vec::new()),
            origin: Instant::now(),
            #[cfg(feature = "shared")]
            shared: self.shared.as_ref().map(|link| link.for_key(label, key)),
            #[cfg(feature = "shared")]
            asking: (self.asking.as_ref()).map(|asking| std::sync::Arc::new(asking.fresh(key))),
            waiters: (self.waiters.as_ref()).map(|waiters| Box::new(waiters.fresh())),
            // The share is the gate of all calls'.
            batch: None,
        }
    }

    /// A gate whose limit is the provider's exactly (`rate = "10/s, exact"`): a throttle
    /// holds it for the wait it asks, but does not slow it down ([`RateGate::slow_down`]).
    ///
    /// ```
    /// use resil_runtime::RateGate;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let gate = RateGate::new(5, Duration::from_secs(1), 1).unwrap().exact();
    /// gate.slow_down();
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::from_millis(200)), "still 5/s");
    /// # }
    /// ```
    pub fn exact(mut self) -> Self {
        self.exact = true;
        self
    }

    /// A gate that learns its limit from the provider's answers (`rate = "auto"`): it starts
    /// knowing nothing, sends one call and holds the others until that call's answer says
    /// how many are left until when (reported by
    /// [`operation::report_limits`](crate::operation::report_limits)); what is left goes at
    /// once, then the limit per window sets the pace. No figure is declared, so none is a
    /// ceiling: [`count`](RateGate::count) and [`period`](RateGate::period) are 0, and a cost
    /// passes up to the limit the provider stated, until the reset of the answer that stated
    /// it (a limit of 0 holds the gate until then, as nothing left does).
    ///
    /// ```
    /// use resil_runtime::RateGate;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let gate = RateGate::auto();
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO), "the probe");
    /// assert!(gate.reserve(1, None).unwrap() > Duration::ZERO, "held until it is answered");
    /// # }
    /// ```
    pub fn auto() -> Self {
        let mut gate = Self::for_key("rate", 1, Duration::from_nanos(1), 1)
            .expect("one unit a nanosecond is a valid rate");
        gate.learning = Some(Box::new(learn::Learning::new(false)));
        gate.auto = true;
        gate.exact = true;
        gate
    }

    /// This gate also learns from the provider's answers (`learn = true`): it starts at its
    /// declared rate, follows what the answers say, and never runs faster than declared. A
    /// 429 holds it for its wait; it slows the gate down only until an answer states the
    /// provider's figures, which then set the pace.
    pub fn learning(mut self) -> Self {
        if self.learning.is_none() {
            self.learning = Some(Box::new(learn::Learning::new(true)));
        }
        self
    }

    /// Whether the gate learns from the provider's answers.
    pub fn learns(&self) -> bool {
        self.learning.is_some()
    }

    /// Whether forgetting the gate loses nothing: no slot is reserved past `now`.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        self.tat.load(Ordering::Acquire) <= self.offset(now)
    }

    /// Units per period (0 for an [`auto`](RateGate::auto) gate).
    pub fn count(&self) -> u64 {
        if self.auto {
            return 0;
        }
        self.count
    }

    /// The period (0 for an [`auto`](RateGate::auto) gate).
    pub fn period(&self) -> Duration {
        if self.auto {
            return Duration::ZERO;
        }
        self.period
    }

    /// Units that may pass at once (1 for an [`auto`](RateGate::auto) gate, which takes
    /// no burst of its own: what the provider's answers say is left may go at once).
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The most units one call may cost: the burst, or for an auto gate the limit its
    /// provider stated, until its reset (`None`: none in force).
    pub(crate) fn burst_limit(&self) -> Option<u64> {
        match self.auto {
            false => Some(self.burst),
            true => self.learnt_limit(),
        }
    }

    /// Reserves `cost` units at the earliest time the limit allows and returns the wait until
    /// then. A wait that would end after `deadline` reserves nothing and is refused with
    /// [`Rejected::RateLimited`] (a slot free now is granted whatever the deadline); a cost
    /// above the burst can never pass and is refused with [`Rejected::OverBurst`].
    pub fn reserve(&self, cost: u64, deadline: Option<Instant>) -> Result<Duration, Rejected> {
        self.reserve_slot(cost, deadline).map(|(wait, _)| wait)
    }

    /// [`RateGate::reserve`], with the slot it promised, for [`RateGate::refund`] and
    /// [`RateGate::is_revoked`].
    pub(crate) fn reserve_slot(
        &self,
        cost: u64,
        deadline: Option<Instant>,
    ) -> Result<(Duration, Slot), Rejected> {
        if let Some(burst) = self.burst_limit().filter(|burst| cost > *burst) {
            return Err(Rejected::OverBurst { cost, burst });
        }
        self.reserve_units(cost, deadline)
    }

    /// [`RateGate::reserve_slot`] for `cost` units even past the burst: the slot comes the
    /// later, once the schedule has been clear for as long as the excess takes.
    #[inline]
    pub(crate) fn reserve_units(
        &self,
        cost: u64,
        deadline: Option<Instant>,
    ) -> Result<(Duration, Slot), Rejected> {
        self.reserve_from(cost, deadline, false)
    }

    /// [`RateGate::reserve_units`]; `in_turn` for the gate's waiting room's next, which takes
    /// what an auto gate may hand out at once before others do (see [`RateGate::spare_slot`]).
    #[inline]
    pub(super) fn reserve_from(
        &self,
        cost: u64,
        deadline: Option<Instant>,
        in_turn: bool,
    ) -> Result<(Duration, Slot), Rejected> {
        let now = Instant::now();
        if let Some(probing) = self.probe_slot(now, deadline) {
            return probing;
        }
        if let Some(spare) = self.spare_slot(now, cost, in_turn) {
            return Ok((Duration::ZERO, spare));
        }
        let at = self.offset(now);
        let limit = deadline.map(|deadline| self.offset(deadline));
        let share = self.share_now();
        let interval = self.interval_at(at).saturating_mul(share);
        // A learning gate's schedule changes with its book and floor, under its lock.
        let mut learning = self.learning_state();
        let taken = match (&self.learning, &learning) {
            (Some(knows), Some(state)) => self.extent(knows, state.window(), interval, cost, share),
            _ => interval.saturating_mul(cost),
        };
        loop {
            // The epoch before the schedule: a throttle sets the schedule, then counts itself,
            // so a slot is never labelled newer than the schedule it was taken from.
            let epoch = self.epoch();
            let tat = self.tat.load(Ordering::Acquire);
            // A slowed unit starts when it would have, and takes the longer interval out
            // of the schedule: the slowdown delays the units after it, never adds credit.
            let from = tat.max(at);
            let next = from.saturating_add(taken);
            let allowed = self.allowed_at_share(from, cost, share);
            let wait = allowed.saturating_sub(at);
            // A slot free now is never refused: the deadline refuses waits only.
            if limit.is_some_and(|limit| allowed > limit.max(at)) {
                return Err(Rejected::RateLimited {
                    retry_in: Duration::from_nanos(wait),
                });
            }
            if (self.tat)
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // A gate that does not learn keeps where the units began (not the schedule
                // before them, which an idle gate left behind): its due is read from it.
                let slot = match &mut learning {
                    None => Slot::new(from, next, epoch),
                    Some(state) => {
                        let start = allowed.max(at);
                        let mark = self.book(state, cost, (start, tat, next), share);
                        Slot::new(mark, start, epoch)
                    }
                };
                return Ok((Duration::from_nanos(wait), slot));
            }
        }
    }

    /// When `cost` units starting from `from` may pass, in nanoseconds since the origin.
    #[inline]
    fn allowed(&self, from: u64, cost: u64) -> u64 {
        self.allowed_at_share(from, cost, 1)
    }

    /// The wait before `cost` units could pass, reserving nothing (`None`: never, the cost is
    /// above the burst): what a route asks of a target's gate before choosing it.
    pub(crate) fn wait_for(&self, cost: u64) -> Option<Duration> {
        if self.burst_limit().is_some_and(|burst| cost > burst) {
            return None;
        }
        if let Some(wait) = self.probe_wait() {
            return Some(wait);
        }
        let at = self.offset(Instant::now());
        if let Some(wait) = self.spare_wait(at, cost) {
            return Some(wait);
        }
        let from = self.tat.load(Ordering::Acquire).max(at);
        Some(Duration::from_nanos(
            self.allowed(from, cost).saturating_sub(at),
        ))
    }

    /// The provider throttled a call and asked to wait `wait`: no slot before then, and the
    /// steady rate after it (no burst). Slots reserved before now are revoked (see
    /// [`RateGate::epoch`]); a wait that ends before an earlier throttle's changes nothing.
    pub fn hold(&self, wait: Duration) {
        #[cfg(feature = "shared")]
        if let Some(link) = &self.shared {
            link.hold(wait);
        }
        self.hold_here(wait);
    }

    /// [`RateGate::hold`] in this instance only: what another instance's throttle does here.
    pub(crate) fn hold_here(&self, wait: Duration) {
        let now = self.offset(Instant::now());
        let until = now.saturating_add(nanos(wait.min(NEVER)));
        let mut revising = lock_std(&self.revising);
        if self.held_until.fetch_max(until, Ordering::AcqRel) >= until {
            return;
        }
        revising.clear();
        // The slots already used stay counted: a short hold must not open a fresh burst
        // right after calls that started. They end at most a burst's credit past now; the
        // later ones are revoked.
        let used = self
            .tat
            .load(Ordering::Acquire)
            .min(now.saturating_add(self.credit()));
        let tat = until
            .saturating_add(self.credit())
            .saturating_sub(self.interval)
            .max(used);
        self.tat.store(tat, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.unbook_after(now, used);
    }

    /// Nanoseconds of credit a full burst stands for.
    fn credit(&self) -> u64 {
        self.interval.saturating_mul(self.burst)
    }

    /// Throttles so far (for a shared gate, those other instances saw too). A caller that
    /// reserved a slot under an older count lost it to a throttle and must reserve again.
    pub fn epoch(&self) -> u64 {
        let here = self.epoch.load(Ordering::Acquire);
        #[cfg(feature = "shared")]
        if let Some(link) = &self.shared {
            return here.wrapping_add(link.holds());
        }
        here
    }

    fn offset(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.origin))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(feature = "shared")]
mod asking;
mod batch;
mod learn;
mod share;
mod slot;
mod slowdown;
#[cfg(feature = "shared")]
mod store;
mod waiters;

#[cfg(feature = "shared")]
pub(crate) use asking::{AskTurn, AskWait, Asking};
pub(crate) use batch::BatchShare;
pub(crate) use learn::SLOT_RECHECK;
pub(crate) use slot::{Slot, SLOT_MISSED};
pub(crate) use waiters::Turn;

#[cfg(test)]
mod model;

#[cfg(test)]
mod tests;
