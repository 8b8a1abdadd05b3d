//! The attempt's one timer: armed only when what it waits for is pending, it stands for
//! whichever limit ends the attempt first, then for a slot's time or the backoff.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use tokio::time::{Instant, Sleep};

use crate::deadline::{Cut, Limits};
use crate::Rejected;

pub(super) fn set_timer(mut timer: Pin<&mut Option<Sleep>>, at: Instant) {
    match timer.as_mut().as_pin_mut() {
        Some(sleep) => sleep.reset(at),
        None => timer.set(Some(tokio::time::sleep_until(at))),
    }
}

/// `wait` under the attempt's limits: see [`lapsed`]. A limit that ran out while the attempt
/// was not polled (a busy executor, a shared future no one awaited for a while) ends the
/// wait before it is polled again: what it would bring now (a permit, a probe's verdict, the
/// shared gates' slots) comes too late to call with, and is never taken.
pub(super) fn limited<F: Future + ?Sized>(
    wait: Pin<&mut F>,
    mut timer: Pin<&mut Option<Sleep>>,
    limits: &Limits,
    cut: &mut Option<Cut>,
    cx: &mut TaskContext<'_>,
) -> Poll<Result<F::Output, Rejected>> {
    if timer.is_some() && fired(timer.as_mut(), cx) {
        return Poll::Ready(Err(cut.map_or(Rejected::DeadlineExceeded, Cut::rejection)));
    }
    match wait.poll(cx) {
        Poll::Ready(output) => Poll::Ready(Ok(output)),
        Poll::Pending => lapsed(timer, limits, cut, cx).map(Err),
    }
}

/// Whether the attempt's limits ran out while what it waits for is pending: the one timer is
/// armed only here, when a first poll returned `Pending` (an answer ready at once costs no
/// timer), and then stands for whichever limit ends the attempt first.
pub(super) fn lapsed(
    mut timer: Pin<&mut Option<Sleep>>,
    limits: &Limits,
    cut: &mut Option<Cut>,
    cx: &mut TaskContext<'_>,
) -> Poll<Rejected> {
    if timer.is_none() {
        let Some((at, limit)) = limits.end(Instant::now) else {
            return Poll::Pending;
        };
        *cut = Some(limit);
        timer.set(Some(tokio::time::sleep_until(at)));
    }
    if !fired(timer, cx) {
        return Poll::Pending;
    }
    Poll::Ready(cut.map_or(Rejected::DeadlineExceeded, Cut::rejection))
}

pub(super) fn fired(timer: Pin<&mut Option<Sleep>>, cx: &mut TaskContext<'_>) -> bool {
    timer
        .as_pin_mut()
        .is_some_and(|sleep| sleep.poll(cx).is_ready())
}
