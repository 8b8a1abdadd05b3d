//! [`worst_case`]: how long a caller can wait, at most, for one operation.

use std::time::Duration;

use crate::Backoff;

/// The longest an operation can take: every attempt running to its `timeout` and every wait
/// at its longest (the backoff's envelope), capped by the `deadline`. `None` when nothing
/// bounds it (no timeout and no deadline). A `Retry-After` longer than the envelope can
/// stretch the waits; the deadline, if any, still caps the total.
///
/// This is the figure `#[resilient]` writes into each function's docs.
///
/// ```
/// use resil_runtime::{worst_case, Backoff};
/// use std::time::Duration;
///
/// let secs = Duration::from_secs;
/// let backoff = Backoff::default(); // 300ms..8s
/// assert_eq!(worst_case(Some(secs(20)), None, 2, &backoff), Some(Duration::from_millis(60_900)));
/// assert_eq!(worst_case(Some(secs(8)), None, 1, &backoff), Some(Duration::from_millis(16_300)));
/// assert_eq!(worst_case(Some(secs(20)), Some(secs(45)), 2, &backoff), Some(secs(45)));
/// assert_eq!(worst_case(None, None, 2, &backoff), None);
/// ```
pub fn worst_case(
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    retry: u32,
    backoff: &Backoff,
) -> Option<Duration> {
    let attempts = timeout.map(|timeout| {
        let waits: Duration = (0..retry).map(|n| backoff.envelope(n)).sum();
        timeout.saturating_mul(retry.saturating_add(1)) + waits
    });
    match (attempts, deadline) {
        (Some(attempts), Some(deadline)) => Some(attempts.min(deadline)),
        (attempts, deadline) => attempts.or(deadline),
    }
}
