//! A gate's slowdown after a throttle: 20 % off its rate, fading back within ten periods and
//! a minute.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{nanos, RateGate};
use crate::deadline::NEVER;
use crate::sync::lock_std;

/// Periods over which a slowdown fades (at most [`RateGate::FADE_AT_MOST`]).
const RECOVERY: u64 = 10;

impl RateGate {
    /// A call through the gate was throttled (a 429): the limit is lower than declared, or the
    /// network bunched calls the gate spaced. The gate takes 20 % off the rate it ran at (at
    /// most once a period, since calls already in flight collide too; never below a
    /// sixteenth of the declared rate, and never by more than [`RateGate::FADE_AT_MOST`] a
    /// unit), and returns to the declared rate linearly over the next ten periods without a
    /// throttle, and within [`RateGate::FADE_AT_MOST`]: a gate of 1000 a day is slowed for a
    /// minute, not for ten days. A gate at a provider's exact limit thus collides once, not
    /// again each time it resumes; one declared [`exact`](RateGate::exact) is not slowed at
    /// all.
    ///
    /// The slowdown is the gate's, for every caller through it: when the provider limits
    /// each model, API key or user on its own, one key's 429s would slow the others, so
    /// declare the gate per key (`rate = "500/min per key"`).
    ///
    /// ```
    /// use resil_runtime::RateGate;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let gate = RateGate::new(5, Duration::from_secs(1), 1).unwrap();
    /// gate.slow_down();
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::from_millis(250)), "4/s");
    /// tokio::time::advance(Duration::from_secs(5)).await;
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    /// assert_eq!(gate.reserve(1, None), Ok(Duration::from_millis(225)), "halfway back");
    /// # }
    /// ```
    pub fn slow_down(&self) {
        if self.exact || self.figures_stated() {
            return;
        }
        let now = self.offset(Instant::now());
        let _revising = lock_std(&self.revising);
        let since = now.saturating_sub(self.slowed_at.load(Ordering::Acquire));
        let fade = self.fade();
        // Once a period, or once the last slowdown has faded, whichever is sooner.
        if self.slowdown.load(Ordering::Acquire) > 0 && since < nanos(self.period).min(fade) {
            return;
        }
        let interval = self.interval_at(now);
        let slower = interval.saturating_add(interval / 4);
        // A unit slowed by more than the fade's length would outlast it in the schedule.
        let slowdown = slower
            .min(self.interval.saturating_mul(16))
            .saturating_sub(self.interval)
            .min(nanos(Self::FADE_AT_MOST));
        self.slowed_at.store(now, Ordering::Release);
        self.slowdown.store(slowdown, Ordering::Release);
    }

    /// The longest a slowdown lasts, whatever the period.
    pub const FADE_AT_MOST: Duration = Duration::from_secs(60);

    /// How long a slowdown takes to fade, in nanoseconds: ten periods, at most
    /// [`RateGate::FADE_AT_MOST`].
    fn fade(&self) -> u64 {
        nanos(self.period.min(NEVER))
            .saturating_mul(RECOVERY)
            .min(nanos(Self::FADE_AT_MOST))
    }

    /// The interval now, in nanoseconds (see [`RateGate::slow_down`]), for the shared gate.
    #[cfg(feature = "shared")]
    pub(crate) fn interval_now(&self) -> u64 {
        self.interval_at(self.offset(Instant::now()))
    }

    /// The interval at `at`: the declared one, plus what is left of a slowdown; what a
    /// learning gate learnt.
    pub(super) fn interval_at(&self, at: u64) -> u64 {
        if let Some(learning) = self.learning.as_ref().filter(|l| l.learnt() != 0) {
            return self.learnt_interval(learning);
        }
        let slowdown = self.slowdown.load(Ordering::Acquire);
        if slowdown == 0 {
            return self.interval;
        }
        let fade = self.fade();
        let since = at.saturating_sub(self.slowed_at.load(Ordering::Acquire));
        let left = u128::from(fade.saturating_sub(since));
        let fading = u128::from(slowdown) * left / u128::from(fade.max(1));
        self.interval
            .saturating_add(u64::try_from(fading).unwrap_or(u64::MAX))
    }
}
