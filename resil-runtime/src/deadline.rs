//! Time limits on one attempt: its own `timeout`, and what is left of the operation's
//! `deadline`, whichever ends first.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::Rejected;

/// The limits one attempt runs under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The attempt's own limit.
    pub(crate) timeout: Option<Duration>,
    /// When the attempt started, if the clock was already read; otherwise the timeout is
    /// counted from the first poll that returns `Pending`.
    pub(crate) started: Option<Instant>,
    /// The operation's deadline.
    pub(crate) deadline: Option<Instant>,
}

impl Limits {
    /// When the attempt must end, and the rejection it ends with then.
    pub(crate) fn end(&self, now: impl FnOnce() -> Instant) -> Option<(Instant, Rejected)> {
        let by_timeout = self.timeout.map(|after| {
            let start = self.started.unwrap_or_else(now);
            (start + after, Rejected::Timeout { after })
        });
        match (by_timeout, self.deadline) {
            (Some((at, timeout)), Some(deadline)) if at < deadline => Some((at, timeout)),
            (_, Some(deadline)) => Some((deadline, Rejected::DeadlineExceeded)),
            (by_timeout, None) => by_timeout,
        }
    }
}

pin_project! {
    /// Runs a future under [`Limits`]. The timer is created only when the first poll returns
    /// `Pending`: an answer that is ready at once costs no timer (most of a wrapper's cost).
    pub(crate) struct Limited<F> {
        #[pin]
        future: F,
        #[pin]
        sleep: Option<Sleep>,
        limits: Limits,
        rejection: Option<Rejected>,
    }
}

impl<F> Limited<F> {
    pub(crate) fn new(future: F, limits: Limits) -> Self {
        Limited {
            future,
            sleep: None,
            limits,
            rejection: None,
        }
    }
}

impl<F: Future> Future for Limited<F> {
    type Output = Result<F::Output, Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if this.sleep.is_none() {
            let Some((at, rejection)) = this.limits.end(Instant::now) else {
                return Poll::Pending;
            };
            *this.rejection = Some(rejection);
            this.sleep.set(Some(tokio::time::sleep_until(at)));
        }
        let fired = this
            .sleep
            .as_pin_mut()
            .is_some_and(|sleep| sleep.poll(cx).is_ready());
        match this.rejection.take() {
            Some(rejection) if fired => Poll::Ready(Err(rejection)),
            rejection => {
                *this.rejection = rejection;
                Poll::Pending
            }
        }
    }
}
