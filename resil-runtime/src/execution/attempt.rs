//! [`Attempt`]: one attempt of an [`Execution`], as a hand-written future.
//!
//! Every wrapper's cost is mostly the size of its future, copied on each call, and its
//! timer. So the attempt is one flat state machine: the checks before the call are
//! synchronous, the call is polled in place, and a single timer slot serves first the
//! attempt's time limit (armed only if the first poll returns `Pending`), then the backoff.
//!
//! Every state change (an admission stored, a verdict recorded) is complete before a listener
//! hears of it, so a listener that panics cannot leave a probe slot or a permit held.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::{address, Decision, Execution, Failure, Next, Progress};
use crate::breaker::{Admit, Breaker, Ticket, Transition, Verdict};
use crate::deadline::{later, Cut, Limits};
use crate::events::AttemptOutcome;
use crate::operation;
use crate::policy::BreakerRef;
use crate::{Rejected, Transient};

type Admitted = (Ticket, Option<Transition>);
type ProbeWait<'p> = Pin<Box<dyn Future<Output = Result<Admitted, Rejected>> + Send + 'p>>;

enum Stage<'p> {
    Start,
    /// A probe is in flight: waiting for its verdict, within this attempt's limits.
    AwaitingProbe(ProbeWait<'p>),
    Call,
    Backoff,
    Done,
}

pin_project! {
    /// One attempt: see [`Execution::attempt`].
    #[must_use = "futures do nothing unless polled"]
    #[project = AttemptProjection]
    pub struct Attempt<'e, 'p, F, E> {
        execution: &'e mut Execution<'p, E>,
        #[pin]
        future: F,
        #[pin]
        timer: Option<Sleep>,
        stage: Stage<'p>,
        limits: Limits,
        // The limit the armed timer stands for.
        cut: Option<Cut>,
        // The breaker's ticket once it admitted the call, until its verdict is recorded.
        admitted: Option<Ticket>,
    }

    impl<'e, 'p, F, E> PinnedDrop for Attempt<'e, 'p, F, E> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // A cancelled probe frees the slot for the next caller; a cancelled call counts
            // for nothing.
            if let Some(ticket) = this.admitted.take().filter(|ticket| ticket.probe) {
                if let Some(breaker) = this.execution.progress.breaker() {
                    breaker.record(ticket, Verdict::Neutral);
                }
            }
        }
    }
}

impl<'e, 'p, F, E> Attempt<'e, 'p, F, E> {
    #[inline]
    pub(super) fn new(execution: &'e mut Execution<'p, E>, future: F) -> Self {
        let limits = execution.progress.limits();
        Attempt {
            execution,
            future,
            timer: None,
            stage: Stage::Start,
            limits,
            cut: None,
            admitted: None,
        }
    }
}

impl<'p, T, E, F> Future for Attempt<'_, 'p, F, E>
where
    F: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    type Output = Next<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Next<T, E>> {
        let mut this = self.project();
        // This call's frame is on the stack for the whole poll: the body's nested calls see
        // it, and so do listeners of the events emitted here.
        let pushed = this.execution.progress.frame.take().map(operation::push);
        let poll = step(&mut this, cx);
        if let Some(pushed) = pushed {
            this.execution.progress.frame = pushed.pop();
        }
        poll
    }
}

fn step<'p, T, E, F>(
    this: &mut AttemptProjection<'_, '_, 'p, F, E>,
    cx: &mut TaskContext<'_>,
) -> Poll<Next<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    loop {
        // Whether the call was made: a rejection before it is not an attempt's end.
        let mut called = false;
        let result = match this.stage {
            Stage::Start => match start(&mut this.execution.progress, this.stage, this.limits) {
                Ok(Started::Admitted(ticket, transition)) => {
                    admit(this, ticket, transition);
                    continue;
                }
                Ok(Started::AwaitingProbe) => continue,
                Err(rejected) => Err(Failure::Rejected(rejected)),
            },
            Stage::AwaitingProbe(wait) => {
                let verdict = wait.as_mut().poll(cx);
                match limited(verdict, this.timer.as_mut(), this.limits, this.cut, cx) {
                    Poll::Ready(Ok(Ok((ticket, transition)))) => {
                        admit(this, Some(ticket), transition);
                        continue;
                    }
                    Poll::Ready(Ok(Err(rejected)) | Err(rejected)) => {
                        Err(Failure::Rejected(rejected))
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
            Stage::Call => {
                called = true;
                let output = this.future.as_mut().poll(cx);
                match limited(output, this.timer.as_mut(), this.limits, this.cut, cx) {
                    Poll::Ready(Ok(output)) => output.map_err(Failure::Error),
                    Poll::Ready(Err(rejected)) => Err(Failure::Rejected(rejected)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            Stage::Backoff => {
                if !fired(this.timer.as_mut(), cx) {
                    return Poll::Pending;
                }
                *this.stage = Stage::Done;
                this.execution.progress.advance();
                return Poll::Ready(Next::Retry);
            }
            Stage::Done => panic!("`Attempt` polled after it completed"),
        };
        let verdict = verdict(&result);
        if let Some(ticket) = this.admitted.take() {
            if let Some(breaker) = this.execution.progress.breaker() {
                if let Some(transition) = breaker.record(ticket, verdict) {
                    this.execution.progress.transition(breaker, transition);
                }
            }
        }
        if called {
            this.execution.progress.ended(outcome(&result, verdict));
        }
        match this.execution.decide(result) {
            Decision::Done(next) => {
                *this.stage = Stage::Done;
                return Poll::Ready(next);
            }
            Decision::Wait(wait) if wait.is_zero() => {
                *this.stage = Stage::Done;
                this.execution.progress.advance();
                return Poll::Ready(Next::Retry);
            }
            Decision::Wait(wait) => {
                let at = later(Instant::now(), wait);
                match this.timer.as_mut().as_pin_mut() {
                    Some(timer) => timer.reset(at),
                    None => this.timer.set(Some(tokio::time::sleep_until(at))),
                }
                *this.stage = Stage::Backoff;
            }
        }
    }
}

/// The call may be made: store the admission, then tell the listeners.
fn admit<F, E>(
    this: &mut AttemptProjection<'_, '_, '_, F, E>,
    ticket: Option<Ticket>,
    transition: Option<Transition>,
) {
    *this.admitted = ticket;
    *this.stage = Stage::Call;
    let progress = &this.execution.progress;
    if let (Some(breaker), Some(transition)) = (progress.breaker(), transition) {
        progress.transition(breaker, transition);
    }
    this.execution.started();
}

/// How the checks before the call ended, when they did not reject it.
enum Started {
    /// The call may be made: with the breaker's ticket, if it gave one, and the transition
    /// admitting it caused.
    Admitted(Option<Ticket>, Option<Transition>),
    /// A probe is in flight; the stage now waits for its verdict.
    AwaitingProbe,
}

/// The checks before the call: bulkhead, deadline, breaker.
#[inline]
fn start<'p>(
    progress: &mut Progress<'p>,
    stage: &mut Stage<'p>,
    limits: &mut Limits,
) -> Result<Started, Rejected> {
    progress.before_call()?;
    let Some(breaker) = &progress.breaker else {
        return Ok(Started::Admitted(None, None));
    };
    // An enclosing call of this operation holds the breaker: this call is part of it, and must
    // not wait for a verdict that depends on itself.
    if progress.nested && operation::held_by_ancestor(address(breaker.get())) {
        return Ok(Started::Admitted(None, None));
    }
    match breaker.get().try_admit(Instant::now) {
        Admit::Pass(admission) => {
            let (ticket, transition) = admission.detach();
            Ok(Started::Admitted(Some(ticket), transition))
        }
        Admit::Reject(rejected) => Err(rejected),
        Admit::Wait => {
            // Waiting for the probe's verdict counts toward this attempt's own limits. Rare,
            // so the wait is boxed to keep every attempt small.
            limits.started = Some(Instant::now());
            let breaker = breaker.clone_ref();
            let wait: ProbeWait<'p> = Box::pin(async move { probe_verdict(breaker.get()).await });
            *stage = Stage::AwaitingProbe(wait);
            Ok(Started::AwaitingProbe)
        }
    }
}

async fn probe_verdict(breaker: &Breaker) -> Result<Admitted, Rejected> {
    breaker.admit().await.map(|admission| admission.detach())
}

/// `ready` under the attempt's limits: the one timer is armed only when the first poll
/// returns `Pending` (an answer ready at once costs no timer), and then stands for whichever
/// limit ends the attempt first.
fn limited<T>(
    ready: Poll<T>,
    mut timer: Pin<&mut Option<Sleep>>,
    limits: &Limits,
    cut: &mut Option<Cut>,
    cx: &mut TaskContext<'_>,
) -> Poll<Result<T, Rejected>> {
    if let Poll::Ready(output) = ready {
        return Poll::Ready(Ok(output));
    }
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
    Poll::Ready(Err(cut.map_or(Rejected::DeadlineExceeded, Cut::rejection)))
}

fn fired(timer: Pin<&mut Option<Sleep>>, cx: &mut TaskContext<'_>) -> bool {
    timer
        .as_pin_mut()
        .is_some_and(|sleep| sleep.poll(cx).is_ready())
}

/// How the attempt counts for the breaker: an attempt timeout is a failure of the
/// provider; a cut by the deadline, a rejection and a permanent error count for nothing.
fn verdict<T, E: Transient>(result: &Result<T, Failure<E>>) -> Verdict {
    match result {
        Ok(_) => Verdict::Success,
        Err(Failure::Error(error)) if error.is_transient() => Verdict::Failure,
        Err(Failure::Rejected(Rejected::Timeout { .. })) => Verdict::Failure,
        Err(_) => Verdict::Neutral,
    }
}

fn outcome<'r, T, E>(result: &'r Result<T, Failure<E>>, verdict: Verdict) -> AttemptOutcome<'r> {
    match result {
        Ok(_) => AttemptOutcome::Ok,
        Err(Failure::Error(_)) if verdict == Verdict::Failure => AttemptOutcome::Transient,
        Err(Failure::Error(_)) => AttemptOutcome::Permanent,
        Err(Failure::Rejected(rejected)) => AttemptOutcome::Rejected(rejected),
    }
}

impl BreakerRef<'_> {
    /// Another handle on the same breaker, for the probe wait that outlives this borrow.
    fn clone_ref(&self) -> Self {
        match self {
            BreakerRef::Shared(breaker) => BreakerRef::Shared(breaker),
            BreakerRef::Keyed(breaker) => BreakerRef::Keyed(breaker.clone()),
        }
    }
}
