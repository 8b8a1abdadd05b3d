//! [`Attempt`]: one attempt of an [`Execution`], as a hand-written future.
//!
//! Every wrapper's cost is mostly the size of its future, copied on each call, and its
//! timer. So the attempt is one flat state machine: the checks before the call are
//! synchronous, the call is polled in place, and a single timer slot serves first the
//! attempt's time limit (armed only if the first poll returns `Pending`), then the backoff.
//! Its stage is plain data; the rare waits before a call (a place in the bulkhead's queue,
//! the shared gates' answer, a probe's verdict) are boxed and held apart, so the common path
//! moves and drops none of them.
//!
//! Every state change (an admission stored, a verdict recorded) is complete before a listener
//! hears of it, so a listener that panics cannot leave a probe slot or a permit held.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::admission::PermitWait;
use super::in_turn::Took;
use super::in_turn::TurnWait;
#[cfg(feature = "shared")]
use super::slots::SharedWait;
use super::{Decision, Execution, Failure, Next, Progress};
use crate::breaker::{Ticket, Transition};
use crate::deadline::{later, Cut, Limits};
use crate::{FromRejected, Rejected, Transient};

mod begin;
mod cancel;
mod outcome;
mod probe;
mod race;
#[cfg(feature = "shared")]
mod shared;
mod timer;

pub(crate) use race::SealedRacers;
pub use race::{Hedging, Lost, Plain, Race, Racers};

use begin::{admit, missed, start, waits_again, Begin};
use cancel::cancel;
use outcome::{outcome, verdict};
use probe::through_breaker;
use timer::{fired, lapsed, limited, set_timer};

type Admitted = (Ticket, Option<Transition>);
type ProbeWait<'p> = Pin<Box<dyn Future<Output = Result<Admitted, Rejected>> + Send + 'p>>;

/// Where the attempt stands, unless it waits on one of the rare [`Wait`]s. Plain data, so the
/// common path's changes of stage are single stores, with nothing to drop.
#[derive(Clone, Copy)]
enum Stage {
    Start,
    /// The rate gates' slot is reserved: waiting for its time (the timer stands for it).
    AwaitingSlot,
    /// A throttle's hold is in force, or a batch call of a shared gate waits for its place
    /// in its share: waiting for its end (the timer stands for it), then starting again.
    #[cfg(feature = "shared")]
    Held,
    Call,
    Backoff,
    Done,
}

/// A wait before the call, rare enough to be boxed. While one is held, the attempt polls it
/// and its stage waits.
enum Wait<'p> {
    /// In the bulkhead's queue, within the operation's deadline.
    Permit(PermitWait<'p>),
    /// In the rate gate's waiting room, served by priority, within the operation's deadline.
    Turn(TurnWait<'p>),
    /// Asking the shared gates in Redis for this attempt's slots, within `shared_timeout`.
    #[cfg(feature = "shared")]
    Shared(SharedWait),
    /// For this instance's turn to ask a shared gate that orders its waiters, served by
    /// priority, within the operation's deadline.
    #[cfg(feature = "shared")]
    Ask(Pin<Box<crate::gate::AskWait>>),
    /// A probe is in flight: waiting for its verdict, within this attempt's limits. Held: the
    /// probe is another call's (not this attempt's own, asking a shared store).
    Probe(ProbeWait<'p>, bool),
}

pin_project! {
    /// One attempt: see [`Execution::attempt`].
    #[must_use = "futures do nothing unless polled"]
    #[project = AttemptProjection]
    pub struct Attempt<'e, 'p, F, E> {
        execution: &'e mut Execution<'p, E>,
        // The body; dropped as soon as its limit cuts it, not at the end of the backoff.
        #[pin]
        future: Option<F>,
        #[pin]
        timer: Option<Sleep>,
        stage: Stage,
        wait: Option<Wait<'p>>,
        limits: Limits,
        // The limit the armed timer stands for.
        cut: Option<Cut>,
        // The breaker's ticket once it admitted the call, until its verdict is recorded.
        admitted: Option<Ticket>,
    }

    impl<'e, 'p, F, E> PinnedDrop for Attempt<'e, 'p, F, E> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            cancel(this.admitted, &mut this.execution.progress);
            if matches!(this.stage, Stage::Call) {
                let attempt = this.execution.progress.tries.attempt;
                this.execution.cancelled(attempt, this.limits.started, false);
            }
        }
    }
}

/// Where a race keeps its racer's result: nowhere for an attempt, which decides itself (a
/// unit, so that an attempt's step takes nothing more).
pub(super) trait Keep<R> {
    fn keep(&mut self, result: R);
}

impl<R> Keep<R> for () {
    #[inline(always)]
    fn keep(&mut self, _: R) {}
}

impl<R> Keep<R> for Option<R> {
    fn keep(&mut self, result: R) {
        *self = Some(result);
    }
}

impl<'e, 'p, F, E> Attempt<'e, 'p, F, E> {
    #[inline]
    pub(super) fn new(execution: &'e mut Execution<'p, E>, future: F) -> Self {
        let limits = execution.progress.limits();
        Attempt {
            execution,
            future: Some(future),
            timer: None,
            stage: Stage::Start,
            wait: None,
            limits,
            cut: None,
            admitted: None,
        }
    }
}

impl<'p, T, E, F> Future for Attempt<'_, 'p, F, E>
where
    F: Future<Output = Result<T, E>>,
    E: Transient + FromRejected,
{
    type Output = Next<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Next<T, E>> {
        let mut this = self.project();
        // This call's frame is published for the whole poll: the body's nested calls see it,
        // and so do listeners of the events emitted here and the error's `Transient` methods.
        let frame = this.execution.progress.take_frame(this.limits);
        let poll = crate::operation::published(&frame, || {
            // The body's own spans (an HTTP client's) nest under the attempt: entered for the
            // poll.
            #[cfg(feature = "tracing")]
            let entered =
                (this.execution.progress.report.spans.as_deref()).map(|spans| spans.enter());
            let poll = step::<_, _, _, true>(&mut this, cx, &mut ());
            // Matched rather than dropped whole: an untraced poll then runs no drop glue (a
            // plain `drop(entered)` costs every traced build's call about 16 instructions).
            #[cfg(feature = "tracing")]
            if let Some(entered) = entered {
                drop(entered);
            }
            poll
        });
        this.execution.progress.keep_frame(frame, &poll);
        poll
    }
}

/// The attempt to its end. With `DECIDE`, the decision and the backoff wait follow the call
/// and the attempt ends with what comes next; without, the call's result, reported (the
/// breaker's verdict recorded, the listeners told), goes to `call` for a race to decide on.
/// One body for both: an attempt's code is what it was before races.
fn step<'p, T, E, F, const DECIDE: bool>(
    this: &mut AttemptProjection<'_, '_, 'p, F, E>,
    cx: &mut TaskContext<'_>,
    call: &mut impl Keep<Result<T, Failure<E>>>,
) -> Poll<Next<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    loop {
        // Whether the call was made: a rejection before it is not an attempt's end.
        let mut called = false;
        let result = match this.wait.as_mut() {
            #[cfg(feature = "shared")]
            Some(Wait::Shared(wait)) => {
                let limits = this.limits.deadline_only();
                let answer =
                    match limited(wait.as_mut(), this.timer.as_mut(), &limits, this.cut, cx) {
                        Poll::Ready(answer) => answer,
                        Poll::Pending => return Poll::Pending,
                    };
                *this.wait = None;
                match answer.and_then(|answer| shared::answered(this, answer)) {
                    Ok(()) => continue,
                    Err(rejected) => Err(Failure::Rejected(rejected)),
                }
            }
            #[cfg(feature = "shared")]
            Some(Wait::Ask(wait)) => {
                let limits = this.limits.deadline_only();
                let turn = match limited(wait.as_mut(), this.timer.as_mut(), &limits, this.cut, cx)
                {
                    Poll::Ready(turn) => turn,
                    Poll::Pending => return Poll::Pending,
                };
                *this.wait = None;
                match turn {
                    Ok(Ok(turn)) => {
                        shared::took_turn(this, turn);
                        continue;
                    }
                    Ok(Err(rejected)) | Err(rejected) => Err(Failure::Rejected(rejected)),
                }
            }
            Some(Wait::Permit(wait)) => {
                let limits = this.limits.deadline_only();
                let permit =
                    match limited(wait.as_mut(), this.timer.as_mut(), &limits, this.cut, cx) {
                        Poll::Ready(permit) => permit,
                        Poll::Pending => return Poll::Pending,
                    };
                *this.wait = None;
                match permit {
                    Ok(Ok((permit, served))) => {
                        let progress = &mut this.execution.progress;
                        if let Some(served) = served {
                            progress.served("bulkhead", served);
                        }
                        if let Some(admission) = &mut progress.admission {
                            admission.permit = Some(permit);
                        }
                        this.timer.set(None);
                        *this.cut = None;
                        continue;
                    }
                    Ok(Err(rejected)) | Err(rejected) => Err(Failure::Rejected(rejected)),
                }
            }
            Some(Wait::Turn(wait)) => {
                let limits = this.limits.deadline_only();
                let slot = match limited(wait.as_mut(), this.timer.as_mut(), &limits, this.cut, cx)
                {
                    Poll::Ready(slot) => slot,
                    Poll::Pending => return Poll::Pending,
                };
                *this.wait = None;
                this.timer.set(None);
                *this.cut = None;
                let progress = &mut this.execution.progress;
                let took = slot.and_then(|slot| {
                    let (slot, served, room) = slot?;
                    progress.served(room.label(), served);
                    progress.took_turn(slot, room)
                });
                match took {
                    // The slot is due: the checks after a slot's wait follow (a throttle may
                    // have revoked it meanwhile).
                    Ok(Took::Wait(wait)) => {
                        set_timer(this.timer.as_mut(), later(Instant::now(), wait));
                        *this.stage = Stage::AwaitingSlot;
                        continue;
                    }
                    Ok(Took::Turn(turn)) => {
                        *this.wait = Some(Wait::Turn(turn));
                        continue;
                    }
                    Err(rejected) => Err(Failure::Rejected(rejected)),
                }
            }
            Some(Wait::Probe(wait, held)) => {
                let held = *held;
                let verdict = match limited(
                    wait.as_mut(),
                    this.timer.as_mut(),
                    this.limits,
                    this.cut,
                    cx,
                ) {
                    Poll::Ready(verdict) => verdict,
                    Poll::Pending => return Poll::Pending,
                };
                *this.wait = None;
                match verdict {
                    Ok(Ok((ticket, transition)))
                        if held
                            && this.execution.progress.holds_slots()
                            && this
                                .limits
                                .started
                                .is_some_and(|since| since < Instant::now()) =>
                    {
                        // The slot's moment passed while another call's probe was out (by
                        // as long as the probe took, no timer's lateness): the breaker's
                        // admission and the slots go back, and the attempt takes new ones.
                        let progress = &mut this.execution.progress;
                        if let (Some(breaker), Some(transition)) = (progress.breaker(), transition)
                        {
                            progress.transition(breaker, transition);
                        }
                        cancel(&mut Some(ticket), progress);
                        // Its time limit counts again from its next admission.
                        this.limits.started = None;
                        *this.stage = Stage::Start;
                        continue;
                    }
                    Ok(Ok((ticket, transition))) => {
                        admit(this, Some(ticket), transition);
                        continue;
                    }
                    Ok(Err(rejected)) | Err(rejected) => Err(Failure::Rejected(rejected)),
                }
            }
            None => match *this.stage {
                // Nothing stands before the call: only the deadline can stop it.
                Stage::Start if this.execution.progress.admission.is_none() => {
                    match this.execution.progress.before_call() {
                        Ok(()) => {
                            admit(this, None, None);
                            continue;
                        }
                        Err(rejected) => Err(Failure::Rejected(rejected)),
                    }
                }
                Stage::Start => match start(&mut this.execution.progress) {
                    Ok(Begin::Breaker) => match through_breaker(this) {
                        Ok(()) => continue,
                        Err(rejected) => Err(Failure::Rejected(rejected)),
                    },
                    Ok(Begin::Slot(at)) => {
                        set_timer(this.timer.as_mut(), at);
                        *this.stage = Stage::AwaitingSlot;
                        continue;
                    }
                    Ok(Begin::Wait(wait)) => {
                        *this.wait = Some(wait);
                        continue;
                    }
                    #[cfg(feature = "shared")]
                    Ok(Begin::Held(until)) => {
                        set_timer(this.timer.as_mut(), until);
                        *this.stage = Stage::Held;
                        continue;
                    }
                    Err(rejected) => Err(Failure::Rejected(rejected)),
                },
                #[cfg(feature = "shared")]
                Stage::Held => {
                    if !fired(this.timer.as_mut(), cx) {
                        return Poll::Pending;
                    }
                    this.timer.set(None);
                    *this.stage = Stage::Start;
                    continue;
                }
                Stage::AwaitingSlot => {
                    if !fired(this.timer.as_mut(), cx) {
                        return Poll::Pending;
                    }
                    let due = this
                        .timer
                        .as_ref()
                        .as_pin_ref()
                        .map(|timer| timer.deadline());
                    this.timer.set(None);
                    if this.execution.progress.slots_revoked() {
                        // A throttle meanwhile: take a new slot, after its wait.
                        *this.stage = Stage::Start;
                        continue;
                    }
                    if missed(due) {
                        // The slot's moment passed with the attempt unpolled: a new one.
                        this.execution.progress.refund_slots();
                        *this.stage = Stage::Start;
                        continue;
                    }
                    // The slot came within the deadline, but this poll may come after it.
                    let mut ready = this.execution.progress.before_deadline();
                    if ready.is_ok() {
                        match waits_again(this) {
                            Ok(true) => continue,
                            Ok(false) => {}
                            Err(rejected) => ready = Err(rejected),
                        }
                    }
                    match ready.and_then(|()| through_breaker(this)) {
                        Ok(()) => continue,
                        Err(rejected) => Err(Failure::Rejected(rejected)),
                    }
                }
                Stage::Call => {
                    called = true;
                    // What the body reports of the provider's limits, for a policy whose
                    // gates learn, is kept before the poll yields, or when the call ends.
                    let Some(future) = this.future.as_mut().as_pin_mut() else {
                        panic!("`Attempt` polled after its call was cut");
                    };
                    match future.poll(cx) {
                        Poll::Ready(output) => output.map_err(Failure::Error),
                        Poll::Pending => {
                            match lapsed(this.timer.as_mut(), this.limits, this.cut, cx) {
                                Poll::Ready(rejected) => {
                                    // Cut: what the body holds (a connection, a nested call's
                                    // places and slots) goes back now, not after the backoff.
                                    this.future.set(None);
                                    Err(Failure::Rejected(rejected))
                                }
                                Poll::Pending => {
                                    if this.execution.progress.settings.learns {
                                        let heard = crate::operation::heard();
                                        this.execution.progress.heard(heard);
                                    }
                                    return Poll::Pending;
                                }
                            }
                        }
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
            },
        };
        let verdict = verdict(&result);
        if called {
            if let Err(Failure::Error(error)) = &result {
                if error.is_throttle() {
                    this.execution.progress.throttled(error.retry_after());
                }
            }
        } else {
            this.execution.progress.refund_slots();
        }
        if let Some(ticket) = this.admitted.take() {
            if let Some(breaker) = this.execution.progress.breaker() {
                let took = this.limits.started.map(|started| started.elapsed());
                if let Some(transition) = breaker.record_timed(ticket, verdict, took) {
                    // The call is over: a listener that panics below leaves no call to tell
                    // cancelled.
                    *this.stage = Stage::Done;
                    this.execution.progress.transition(breaker, transition);
                }
            }
        }
        if called {
            let started = this.limits.started;
            // Only a listener can panic at the end: a call nobody listens to pays no store.
            if this.execution.progress.report.listening {
                *this.stage = Stage::Done;
            }
            this.execution.progress.ended(outcome(&result), started);
        }
        if !DECIDE {
            *this.stage = Stage::Done;
            call.keep(result);
            return Poll::Ready(Next::Retry);
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
                set_timer(this.timer.as_mut(), later(Instant::now(), wait));
                *this.stage = Stage::Backoff;
            }
        }
    }
}
