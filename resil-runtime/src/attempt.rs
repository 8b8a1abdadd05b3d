//! [`Attempt`]: one attempt of an [`Execution`], as a hand-written future.
//!
//! Every wrapper's cost is mostly the size of its future, copied on each call, and its
//! timer. So the attempt is one flat state machine: the checks before the call are
//! synchronous, the call is polled in place, and a single timer slot serves first the
//! attempt's time limit (armed only if the first poll returns `Pending`), then the backoff.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::breaker::{Admit, Breaker, Verdict};
use crate::deadline::{Cut, Limited, Limits};
use crate::operation;
use crate::policy::{Decision, Execution, Failure, Next};
use crate::{Rejected, Transient};

type ProbeWait<'p> =
    Pin<Box<dyn Future<Output = Result<Result<bool, Rejected>, Rejected>> + Send + 'p>>;

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
    pub struct Attempt<'e, 'p, F> {
        execution: &'e mut Execution<'p>,
        #[pin]
        future: F,
        #[pin]
        timer: Option<Sleep>,
        stage: Stage<'p>,
        limits: Limits,
        // The limit the armed timer stands for.
        cut: Option<Cut>,
        // `Some(probe)` once the breaker admitted the call, until its verdict is recorded.
        admitted: Option<bool>,
    }

    impl<'e, 'p, F> PinnedDrop for Attempt<'e, 'p, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // A cancelled probe frees the slot for the next caller; a cancelled call counts
            // for nothing.
            if *this.admitted == Some(true) {
                if let Some(breaker) = this.execution.breaker() {
                    breaker.record(true, Verdict::Neutral);
                }
            }
        }
    }
}

impl<'e, 'p, F> Attempt<'e, 'p, F> {
    #[inline]
    pub(crate) fn new(execution: &'e mut Execution<'p>, future: F) -> Self {
        let limits = execution.limits();
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

impl<'p, T, E, F> Future for Attempt<'_, 'p, F>
where
    F: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    type Output = Next<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Next<T, E>> {
        let mut this = self.project();
        // The operation is current for the whole poll: the body's nested calls see it, and so
        // do listeners of the events emitted here.
        let mut context = this.execution.context().take();
        let poll = operation::enter(&mut context, || step(&mut this, cx));
        *this.execution.context() = context;
        poll
    }
}

fn step<'p, T, E, F>(
    this: &mut AttemptProjection<'_, '_, 'p, F>,
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
            Stage::Start => match start(this.execution, this.stage, this.limits) {
                Ok(Started::Admitted(admitted)) => {
                    *this.admitted = admitted;
                    this.execution.started();
                    *this.stage = Stage::Call;
                    continue;
                }
                Ok(Started::AwaitingProbe) => continue,
                Err(rejected) => Err(Failure::Rejected(rejected)),
            },
            Stage::AwaitingProbe(wait) => match wait.as_mut().poll(cx) {
                Poll::Ready(Ok(Ok(probe))) => {
                    *this.admitted = Some(probe);
                    this.execution.started();
                    *this.stage = Stage::Call;
                    continue;
                }
                Poll::Ready(Ok(Err(rejected)) | Err(rejected)) => Err(Failure::Rejected(rejected)),
                Poll::Pending => return Poll::Pending,
            },
            Stage::Call => {
                called = true;
                if let Poll::Ready(output) = this.future.as_mut().poll(cx) {
                    match output {
                        Ok(value) => Ok(value),
                        Err(error) => Err(Failure::Error(error)),
                    }
                } else {
                    if this.timer.is_none() {
                        let Some((at, cut)) = this.limits.end(Instant::now) else {
                            return Poll::Pending;
                        };
                        *this.cut = Some(cut);
                        this.timer.set(Some(tokio::time::sleep_until(at)));
                    }
                    if !fired(this.timer.as_mut(), cx) {
                        return Poll::Pending;
                    }
                    Err(Failure::Rejected(
                        this.cut.map_or(Rejected::DeadlineExceeded, Cut::rejection),
                    ))
                }
            }
            Stage::Backoff => {
                if !fired(this.timer.as_mut(), cx) {
                    return Poll::Pending;
                }
                *this.stage = Stage::Done;
                this.execution.advance();
                return Poll::Ready(Next::Retry);
            }
            Stage::Done => panic!("`Attempt` polled after it completed"),
        };
        let verdict = verdict(&result);
        if let Some(probe) = this.admitted.take() {
            if let Some(breaker) = this.execution.breaker() {
                if let Some(transition) = breaker.record(probe, verdict) {
                    this.execution.emit_transition(breaker, transition);
                }
            }
        }
        if called {
            this.execution.ended(&result, verdict);
        }
        match this.execution.decide(result) {
            Decision::Done(next) => {
                *this.stage = Stage::Done;
                return Poll::Ready(next);
            }
            Decision::Wait(wait) if wait.is_zero() => {
                *this.stage = Stage::Done;
                this.execution.advance();
                return Poll::Ready(Next::Retry);
            }
            Decision::Wait(wait) => {
                let at = Instant::now() + wait;
                match this.timer.as_mut().as_pin_mut() {
                    Some(timer) => timer.reset(at),
                    None => this.timer.set(Some(tokio::time::sleep_until(at))),
                }
                *this.stage = Stage::Backoff;
            }
        }
    }
}

/// How the checks before the call ended, when they did not reject it.
enum Started {
    /// Admitted: `Some(probe)` through a breaker, `None` without one.
    Admitted(Option<bool>),
    /// A probe is in flight; the stage now waits for its verdict.
    AwaitingProbe,
}

/// The checks before the call: bulkhead, deadline, breaker.
#[inline]
fn start<'p>(
    execution: &mut Execution<'p>,
    stage: &mut Stage<'p>,
    limits: &mut Limits,
) -> Result<Started, Rejected> {
    execution.before_call()?;
    let Some(breaker) = execution.breaker_ref() else {
        return Ok(Started::Admitted(None));
    };
    match breaker.get().try_admit(Instant::now) {
        Admit::Pass(admission) => {
            let (probe, transition) = admission.detach();
            if let Some(transition) = transition {
                execution.emit_transition(breaker.get(), transition);
            }
            Ok(Started::Admitted(Some(probe)))
        }
        Admit::Reject(rejected) => Err(rejected),
        Admit::Wait => {
            // Waiting for the probe's verdict counts toward this attempt's own limits. Rare,
            // so the wait is boxed to keep every attempt small.
            limits.started = Some(Instant::now());
            let wait_limits = *limits;
            let breaker = breaker.clone_ref();
            let wait: ProbeWait<'p> =
                Box::pin(async move { probe_verdict(breaker.get(), wait_limits).await });
            *stage = Stage::AwaitingProbe(wait);
            Ok(Started::AwaitingProbe)
        }
    }
}

async fn probe_verdict(
    breaker: &Breaker,
    limits: Limits,
) -> Result<Result<bool, Rejected>, Rejected> {
    Limited::new(breaker.admit(), limits)
        .await
        .map(|admitted| admitted.map(|admission| admission.detach().0))
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
