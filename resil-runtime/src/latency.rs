//! [`worst_case`]: how long a caller can wait, at most, for one operation.

use std::time::Duration;

use crate::Backoff;
#[cfg(doc)]
use crate::Jitter;

/// The longest an operation can take: every attempt running to its `timeout` and every wait
/// at its longest, capped by the `deadline`. `None` when nothing bounds it (no timeout and no
/// deadline).
///
/// A wait is at most the backoff's envelope plus `retry_after_max` (a `Retry-After` is a floor
/// under the jitter; with [`Jitter::None`] the longer of the two; with
/// [`Jitter::Decorrelated`], three times the wait before it, within the cap, plus
/// `retry_after_max`): a server that asks for more
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
    resil_spec::worst_case(
        timeout,
        deadline,
        retry,
        (backoff.base(), backoff.cap()),
        backoff.jitter(),
        retry_after_max,
    )
}
