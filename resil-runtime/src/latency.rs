//! [`worst_case`]: how long a caller can wait, at most, for one operation.

use std::time::Duration;

use crate::{Backoff, Jitter};

/// The longest an operation can take: every attempt running to its `timeout` and every wait
/// at its longest, capped by the `deadline`. `None` when nothing bounds it (no timeout and no
/// deadline).
///
/// A wait is at most the backoff's envelope plus `retry_after_max` (a `Retry-After` is a floor
/// under the jitter; with [`Jitter::None`] the longer of the two): a server that asks for more
/// than `retry_after_max` ends the operation instead. Pass `Duration::ZERO` for the figure when
/// the server never asks to wait.
///
/// This is the figure `#[resilient]` writes into each function's docs.
///
/// ```
/// use resil_runtime::{worst_case, Backoff};
/// use std::time::Duration;
///
/// let secs = Duration::from_secs;
/// let backoff = Backoff::default(); // 300ms..8s
/// let quiet = Duration::ZERO;
/// assert_eq!(worst_case(Some(secs(20)), None, 2, &backoff, quiet), Some(Duration::from_millis(60_900)));
/// assert_eq!(worst_case(Some(secs(8)), None, 1, &backoff, quiet), Some(Duration::from_millis(16_300)));
/// assert_eq!(worst_case(Some(secs(20)), Some(secs(45)), 2, &backoff, quiet), Some(secs(45)));
/// assert_eq!(worst_case(None, None, 2, &backoff, quiet), None);
/// // A server may ask to wait up to a minute before each retry:
/// assert_eq!(worst_case(Some(secs(20)), None, 2, &backoff, secs(60)), Some(Duration::from_millis(180_900)));
/// ```
pub fn worst_case(
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    retry: u32,
    backoff: &Backoff,
    retry_after_max: Duration,
) -> Option<Duration> {
    let longest_wait = |n: u32| {
        let envelope = backoff.envelope(n);
        match backoff.jitter() {
            Jitter::None => envelope.max(retry_after_max),
            _ => envelope.saturating_add(retry_after_max),
        }
    };
    let attempts = timeout.map(|timeout| {
        // The envelope stops growing by retry 31 at the latest: sum the first waits, then
        // multiply the last, so `retry = u32::MAX` costs no more than `retry = 32`.
        let growing = retry.min(32);
        let waits = (0..growing)
            .fold(Duration::ZERO, |total, n| {
                total.saturating_add(longest_wait(n))
            })
            .saturating_add(longest_wait(growing).saturating_mul(retry - growing));
        timeout
            .saturating_mul(retry.saturating_add(1))
            .saturating_add(waits)
    });
    match (attempts, deadline) {
        (Some(attempts), Some(deadline)) => Some(attempts.min(deadline)),
        (attempts, deadline) => attempts.or(deadline),
    }
}
