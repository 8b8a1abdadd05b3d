//! Time limits on one attempt: its own `timeout`, and what is left of the operation's
//! `deadline`, whichever ends first.

use std::time::Duration;

use tokio::time::Instant;

use crate::Rejected;

/// "Practically never": thirty years, what tokio itself takes for "never".
pub(crate) const NEVER: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `at + after`, saturating: a `Retry-After` of `u64::MAX` seconds or a builder's
/// `Duration::MAX` means "practically never", not a panic.
pub(crate) fn later(at: Instant, after: Duration) -> Instant {
    at.checked_add(after.min(NEVER))
        .or_else(|| at.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(at)
}

/// Sleeps until `at` in `sleep` (made, or moved, as needed): whether it has come. For a
/// waiter polled by hand that must be woken at a time of its own.
pub(crate) fn slept(
    sleep: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    at: Instant,
    cx: &mut std::task::Context<'_>,
) -> bool {
    use std::future::Future;
    let sleep = match sleep {
        Some(sleep) => {
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            sleep
        }
        sleep => sleep.insert(Box::pin(tokio::time::sleep_until(at))),
    };
    sleep.as_mut().poll(cx).is_ready()
}

/// The limits one attempt runs under.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    /// The attempt's own limit.
    pub(crate) timeout: Option<Duration>,
    /// When the attempt started, if the clock was already read; otherwise the timeout is
    /// counted from the first poll that returns `Pending`.
    pub(crate) started: Option<Instant>,
    /// The operation's deadline.
    pub(crate) deadline: Option<Instant>,
}

/// Which limit ends an attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cut {
    /// Its own timeout, of this length.
    Timeout(Duration),
    /// The operation's deadline.
    Deadline,
}

impl Cut {
    pub(crate) fn rejection(self) -> Rejected {
        match self {
            Cut::Timeout(after) => Rejected::Timeout { after },
            Cut::Deadline => Rejected::DeadlineExceeded,
        }
    }
}

impl Limits {
    /// The same limits but the attempt's timeout: a wait before the call (a bulkhead's
    /// place, a slot's turn, the store's answer) is bounded by the deadline only, the timeout
    /// being the call's.
    #[inline]
    pub(crate) fn deadline_only(self) -> Limits {
        Limits {
            timeout: None,
            ..self
        }
    }

    /// When the attempt must end, and which limit ends it then. Inlined: one caller arms the
    /// timer, and an outlined call costs it the pieces of `Limits` it reads (11 instructions).
    #[inline]
    pub(crate) fn end(&self, now: impl FnOnce() -> Instant) -> Option<(Instant, Cut)> {
        let by_timeout = self.timeout.map(|after| {
            let start = self.started.unwrap_or_else(now);
            (later(start, after), Cut::Timeout(after))
        });
        match (by_timeout, self.deadline) {
            (Some((at, timeout)), Some(deadline)) if at < deadline => Some((at, timeout)),
            (_, Some(deadline)) => Some((deadline, Cut::Deadline)),
            (by_timeout, None) => by_timeout,
        }
    }
}
