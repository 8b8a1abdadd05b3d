//! [`worst_case`]: how long a caller can wait, at most, for one operation.

use core::time::Duration;

use crate::Jitter;

/// `min(cap, base·2ⁿ)`: the longest wait before retry `n` (jitter only shortens it).
///
/// ```
/// use std::time::Duration;
/// let (base, cap) = (Duration::from_millis(300), Duration::from_secs(8));
/// assert_eq!(resil_spec::envelope(base, cap, 2), Duration::from_millis(1200));
/// assert_eq!(resil_spec::envelope(base, cap, u32::MAX), cap);
/// ```
pub fn envelope(base: Duration, cap: Duration, retry: u32) -> Duration {
    let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

/// The least the waits before `retry` retries add up to: what no draw of the jitter can
/// shorten (nothing with full jitter; half the envelope with equal; the base with decorrelated;
/// the whole envelope with none).
///
/// ```
/// use resil_spec::{shortest_waits, Jitter};
/// use std::time::Duration;
///
/// let (base, cap) = (Duration::from_millis(300), Duration::from_secs(8));
/// assert_eq!(shortest_waits(2, (base, cap), Jitter::Full), Duration::ZERO);
/// assert_eq!(shortest_waits(2, (base, cap), Jitter::None), Duration::from_millis(900));
/// ```
pub fn shortest_waits(retry: u32, (base, cap): (Duration, Duration), jitter: Jitter) -> Duration {
    (0..retry.min(64)).fold(Duration::ZERO, |sum, n| {
        let envelope = envelope(base, cap, n);
        let least = match jitter {
            Jitter::Full => Duration::ZERO,
            Jitter::Equal => envelope / 2,
            Jitter::Decorrelated => base,
            Jitter::None => envelope,
        };
        sum.saturating_add(least)
    })
}

/// The longest an operation can take: every attempt running to its `timeout` and every wait
/// at its longest, capped by the `deadline`. `None` when nothing bounds it (no timeout and no
/// deadline).
///
/// A wait is at most the envelope plus `retry_after_max` (a `Retry-After` is a floor under the
/// jitter; with [`Jitter::None`] the longer of the two); with [`Jitter::Decorrelated`], three
/// times the wait before it (the first: three times the base), within the cap, plus
/// `retry_after_max`: a server that asks for more than
/// `retry_after_max` ends the operation instead. Pass `Duration::ZERO` for the figure when the
/// server never asks to wait. Every sum saturates.
pub fn worst_case(
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    retry: u32,
    (base, cap): (Duration, Duration),
    jitter: Jitter,
    retry_after_max: Duration,
) -> Option<Duration> {
    // The longest wait before retry `n`, given the longest before it: decorrelated jitter
    // draws up to three times the wait before it (its `Retry-After` included), not within
    // the envelope.
    let longest_wait = |n: u32, previous: Duration| {
        let drawn = match jitter {
            Jitter::Decorrelated => previous.saturating_mul(3).clamp(base, cap.max(base)),
            _ => envelope(base, cap, n),
        };
        match jitter {
            Jitter::None => drawn.max(retry_after_max),
            _ => drawn.saturating_add(retry_after_max),
        }
    };
    let attempts = timeout.map(|timeout| {
        // The longest wait stops growing by retry 31 at the latest: sum the first waits, then
        // multiply the last, so `retry = u32::MAX` costs no more than `retry = 32`.
        let growing = retry.min(32);
        let (waits, last) = (0..growing).fold((Duration::ZERO, base), |(total, previous), n| {
            let wait = longest_wait(n, previous);
            (total.saturating_add(wait), wait)
        });
        let waits =
            waits.saturating_add(longest_wait(growing, last).saturating_mul(retry - growing));
        timeout
            .saturating_mul(retry.saturating_add(1))
            .saturating_add(waits)
    });
    match (attempts, deadline) {
        (Some(attempts), Some(deadline)) => Some(attempts.min(deadline)),
        (attempts, deadline) => attempts.or(deadline),
    }
}
