//! The rules of a failure-rate or slow-call breaker: its share, its window, its minimum.

use std::time::Duration;

use super::{positive, Violation};

/// The most calls a failure-rate or slow-call breaker remembers.
pub const MAX_WINDOW: u32 = 10_000;

/// The longest time window of a failure-rate or slow-call breaker.
pub const MAX_TIME_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// A failure-rate or slow-call breaker: trips at `percent` % of the calls in `window`, once
/// `min_calls` were counted.
pub fn breaker_window(
    percent: u32,
    window: crate::WindowSize,
    min_calls: u32,
) -> Result<(), Violation> {
    if !(1..=100).contains(&percent) {
        return Err(Violation::BreakerRate { percent });
    }
    match window {
        crate::WindowSize::Calls(window) => {
            if window == 0 || window > MAX_WINDOW || min_calls == 0 || min_calls > window {
                return Err(Violation::BreakerWindow { window, min_calls });
            }
        }
        crate::WindowSize::Time(window) => {
            // Under a second, the buckets of a tenth would be too short to mean anything.
            if window < Duration::from_secs(1) || window > MAX_TIME_WINDOW {
                return Err(Violation::BreakerTimeWindow { window });
            }
            if min_calls == 0 {
                return Err(Violation::BreakerWindow {
                    window: 0,
                    min_calls,
                });
            }
        }
    }
    Ok(())
}

/// A breaker's time window sees at least `min_calls` at the rate declared (`count` per
/// `period`, `burst` at once: at most `count + burst - 1` in any `period`). A count window
/// fills at any rate, only more slowly.
///
/// It holds for a shared breaker and gate too: the shared window sums every instance's
/// calls, and the shared gate lets through the declared rate for the service as a whole, so
/// the rate still bounds what the window sees.
///
/// ```
/// use std::time::Duration;
/// use resil_spec::{rules, WindowSize};
///
/// let second = Duration::from_secs(1);
/// let window = WindowSize::Time(Duration::from_secs(30));
/// assert!(rules::min_calls_within_rate(10, window, (1, second, 1)).is_ok());
/// assert!(rules::min_calls_within_rate(40, window, (1, second, 1)).is_err());
/// assert!(rules::min_calls_within_rate(40, WindowSize::Calls(50), (1, second, 1)).is_ok());
/// ```
pub fn min_calls_within_rate(
    min_calls: u32,
    window: crate::WindowSize,
    (count, period, burst): (u64, Duration, u64),
) -> Result<(), Violation> {
    let crate::WindowSize::Time(window) = window else {
        return Ok(());
    };
    if period.is_zero() {
        return Ok(());
    }
    let periods = window.as_nanos().div_ceil(period.as_nanos());
    let calls = u128::from(count)
        .saturating_mul(periods)
        .saturating_add(u128::from(burst.saturating_sub(1)));
    let calls = u64::try_from(calls).unwrap_or(u64::MAX);
    if u64::from(min_calls) > calls {
        return Err(Violation::MinCallsPastRate {
            min_calls,
            window,
            calls,
        });
    }
    Ok(())
}

/// A shared failure-rate or slow-call breaker sums the calls of every instance over a window
/// of time: a window counted in calls is refused, since the last 20 calls of a service are
/// no one instance's to count.
///
/// ```
/// use std::time::Duration;
/// use resil_spec::{rules, WindowSize};
///
/// assert!(rules::shared_window(WindowSize::Time(Duration::from_secs(30))).is_ok());
/// assert!(rules::shared_window(WindowSize::Calls(20)).is_err());
/// ```
pub fn shared_window(window: crate::WindowSize) -> Result<(), Violation> {
    match window {
        crate::WindowSize::Calls(window) => Err(Violation::SharedCountWindow { window }),
        crate::WindowSize::Time(_) => Ok(()),
    }
}

/// A breaker kind's own settings: its share, window and minimum, and what counts as slow.
pub fn breaker_kind(kind: crate::BreakerKind) -> Result<(), Violation> {
    match kind {
        crate::BreakerKind::Consecutive => Ok(()),
        crate::BreakerKind::FailureRate {
            percent,
            window,
            min_calls,
        } => breaker_window(percent.into(), window, min_calls),
        crate::BreakerKind::SlowCall {
            percent,
            slower_than,
            window,
            min_calls,
        } => {
            positive("breaker_slow", slower_than)?;
            breaker_window(percent.into(), window, min_calls)
        }
    }
}
