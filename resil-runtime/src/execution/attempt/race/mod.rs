//! [`Race`]: the hedged attempts of one operation, racing inside the caller's task.
//!
//! The first racer starts at once; each time the racers so far have run the hedge's delay
//! without an answer, one more starts, drawn from the operation's retries (and the retry
//! budget, which may refuse it), up to the hedge's count. Each racer is an attempt as any
//! other, through the same steps: its own slots, its own ticket from the breaker, its own
//! timer; a hedge shares the operation's place in the bulkhead. The first success (for a
//! stream, the first commit) wins and the others are dropped at once: a probe place or a
//! reserved slot goes back, and a call cut short counts for nothing. A racer that fails
//! while others run is a failure of its target, reported as such (an error that moves on
//! bans that target), and the race goes on: the racers that have not called yet on a target
//! that now refuses (banned, or its Retry-After not over) are dropped, and no hedge goes to
//! it before its wait's end; the last one's failure is decided on as any attempt's, on its
//! own target: a retry after the backoff and every wait that target asked for, or the end.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::timer::{fired, set_timer};
use super::{cancel, step, AttemptProjection, Stage};
use crate::deadline::{later, Limits};
use crate::events::Event;
use crate::execution::admission::Admission;
use crate::execution::{Decision, Execution, Failure, Next};
use crate::operation;
use crate::{Rejected, Transient};

mod racers;
mod seat;

pub(crate) use racers::sealed::Sealed as SealedRacers;
pub use racers::{Hedging, Lost, Plain, Racers};
use seat::{Lane, Racer, Seat, Which};

pin_project! {
    /// Hedged attempts of one operation: see [`Execution::race`].
    #[must_use = "futures do nothing unless polled"]
    #[project = RaceProjection]
    pub struct Race<'e, 'p, R: Racers<'p>, E> {
        execution: &'e mut Execution<'p, E>,
        make: R,
        // The first racer, in place, so that a call answered before any hedge allocates
        // nothing; `None` once it ended.
        #[pin]
        first: Option<Lane<'p, R::Attempt>>,
        first_seat: Seat<'p>,
        // The hedges, each pinned in a box of its own: started only after the hedge's delay.
        hedged: Vec<Racer<'p, R::Attempt>>,
        // The next hedge's time while racing; the backoff's after the last racer failed.
        #[pin]
        timer: Option<Sleep>,
        backoff: bool,
        // Hedges started in this race.
        hedges: u32,
        // A hedge was refused (the budget, an enclosing allowance): none starts again.
        refused: bool,
        // The racer being polled and the operation's attempt count, while one is: a racer
        // that panics leaves its admission in the execution's place, and the drop puts it back.
        polling: Option<(Which, u32)>,
    }

    impl<'e, 'p, R: Racers<'p>, E> PinnedDrop for Race<'e, 'p, R, E> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if let Some((which, attempts)) = this.polling.take() {
                let progress = &mut this.execution.progress;
                if let Which::Hedge(i) = which {
                    if let Some(racer) = this.hedged.get_mut(i) {
                        racer.seat.swap_admission(progress);
                    }
                }
                progress.tries.attempt = attempts;
            }
            cancel_all(&mut this, false);
            // A race dropped before its end lost its hedges.
            report(&mut this, false);
        }
    }
}

/// Every racer still running dropped before its end (the first's admission is the
/// execution's own).
fn cancel_all<'p, R: Racers<'p>, E>(this: &mut RaceProjection<'_, '_, 'p, R, E>, polled: bool) {
    if let Some(first) = this.first.as_mut().as_pin_mut() {
        let first = first.project();
        cancel(first.admitted, &mut this.execution.progress);
        if matches!(first.stage, Stage::Call) {
            let attempt = this.first_seat.attempt;
            (this.execution).cancelled(attempt, first.limits.started, polled);
        }
        this.first.set(None);
    }
    if !this.hedged.is_empty() {
        for mut racer in this.hedged.drain(..) {
            racer.cancel(this.execution, polled);
        }
    }
}

impl<'p, E> Execution<'p, E> {
    /// Hedged attempts (see [`crate::PolicyBuilder::hedge`]): `make` is called for the first
    /// racer at once and for each hedge when it starts, and the futures it returns run
    /// concurrently inside the caller's task. Resolves as [`Execution::attempt`] does: to
    /// [`Next::Retry`] once the backoff after the last racer's failure is over, or to how
    /// the operation ended. Dropping it drops every racer, each giving back what it holds.
    #[inline(always)]
    pub fn race<F, M>(&mut self, make: M) -> Race<'_, 'p, Plain<M>, E>
    where
        M: FnMut() -> F,
    {
        self.race_with(Plain::new(make))
    }

    /// [`Execution::race`] with racers made by `make`: a route's, which sends hedges to its
    /// next targets.
    // Inlined, as `race` and the facade's `race` are, so that the race is built in place in
    // the future that awaits it: called apart (the race grew past the inliner's threshold),
    // it came back in a temporary that caller copied whole, a memcpy each call.
    #[inline(always)]
    pub(crate) fn race_with<R: Racers<'p>>(&mut self, mut make: R) -> Race<'_, 'p, R, E> {
        if let Some(frame) = &self.progress.frame {
            frame.new_attempt();
        }
        // A race after a backoff is a new attempt, in a span of its own.
        #[cfg(feature = "tracing")]
        if let Some(spans) = &mut self.progress.report.spans {
            spans.attempt(self.progress.tries.attempt);
        }
        let mut hedging = Hedging {
            progress: &self.progress,
            hedge: false,
            admission: None,
            tag: 0,
        };
        let future = make.make(&mut hedging);
        let tag = hedging.tag;
        let first = Lane::new(&self.progress, future);
        let first_seat = Seat::new(&self.progress, None, tag, false);
        Race {
            execution: self,
            make,
            first: Some(first),
            first_seat,
            hedged: Vec::new(),
            timer: None,
            backoff: false,
            hedges: 0,
            refused: false,
            polling: None,
        }
    }
}

impl<'p, T, E, R> Future for Race<'_, 'p, R, E>
where
    R: Racers<'p>,
    R::Attempt: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    type Output = Next<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Next<T, E>> {
        let mut this = self.project();
        // At the first poll the frame gives the first racer the enclosing calls' deadline.
        let mut own = Limits::default();
        let limits = match this.first.as_mut().as_pin_mut() {
            Some(first) => first.project().limits,
            None => &mut own,
        };
        let frame = this.execution.progress.take_frame(limits);
        let poll = operation::published(&frame, || run(&mut this, cx));
        this.execution.progress.keep_frame(frame, &poll);
        poll
    }
}

fn run<'p, T, E, R>(
    this: &mut RaceProjection<'_, '_, 'p, R, E>,
    cx: &mut TaskContext<'_>,
) -> Poll<Next<T, E>>
where
    R: Racers<'p>,
    R::Attempt: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    loop {
        if *this.backoff {
            if !fired(this.timer.as_mut(), cx) {
                return Poll::Pending;
            }
            *this.backoff = false;
            this.execution.progress.advance();
            return Poll::Ready(Next::Retry);
        }
        if fired(this.timer.as_mut(), cx) {
            this.timer.set(None);
            hedge(this);
            // A hedge put off sets the timer again: polled at once, so that it wakes the race.
            continue;
        }
        let Some((which, result)) = poll_racers(this, cx) else {
            // The delay counts from the newest racer's call: not while it waits for a place
            // in the bulkhead, a rate slot or a probe's verdict, which a hedge would skip.
            let calling = match this.hedged.last_mut() {
                Some(racer) => racer.lane.as_mut().stage_is_call(),
                None => (this.first.as_mut().as_pin_mut()).is_some_and(Lane::stage_is_call),
            };
            if this.timer.is_none() && calling && can_hedge(this) {
                let at = later(Instant::now(), delay(this));
                set_timer(this.timer.as_mut(), at);
                continue;
            }
            return Poll::Pending;
        };
        let (tag, hedge) = match which {
            Which::First => {
                this.first.set(None);
                (this.first_seat.tag, None)
            }
            Which::Hedge(i) => {
                let seat = this.hedged.remove(i).seat;
                (seat.tag, Some((seat.moved, seat.admission.flatten())))
            }
        };
        let hedge_won = result.is_ok() && hedge.is_some();
        // An error that moves on refuses its target only, when the route has another.
        let other = this.execution.progress.tries.routing.other;
        let over = match &result {
            Ok(_) => true,
            Err(Failure::Error(error)) => !error.is_transient() && (!other || !error.moves_on()),
            Err(Failure::Rejected(_)) => false,
        };
        if !over {
            if let Err(Failure::Error(error)) = &result {
                this.make.lost(tag, Lost::of(error));
                drop_refused(this);
            }
            if this.first.is_some() || !this.hedged.is_empty() {
                if let Err(Failure::Error(error)) = result {
                    // What the provider said is what a later rejection of the others ends
                    // with.
                    this.execution.last_error = Some(error);
                }
                continue;
            }
        }
        // The race is over: the others are dropped, each giving back what it holds to its
        // own target (the first racer's is the operation's until a hedge's replaces it), and
        // the result decided on. The target of the racer that ended it, winner or last to
        // fail, is the operation's from now on: a hedge's admission elsewhere too, so that
        // its failure is its own target's.
        cancel_all(this, true);
        this.timer.set(None);
        this.make.ended(tag);
        if let Some((true, admission)) = hedge {
            this.execution.progress.moved_to(admission);
        }
        report(this, hedge_won);
        // A racer's wait asked for holds the target the next attempt goes back to.
        let held = this.make.asked(tag);
        match this.execution.decide_holding(result, held) {
            Decision::Done(next) => return Poll::Ready(next),
            Decision::Wait(wait) if wait.is_zero() => {
                this.execution.progress.advance();
                return Poll::Ready(Next::Retry);
            }
            Decision::Wait(wait) => {
                set_timer(this.timer.as_mut(), later(Instant::now(), wait));
                *this.backoff = true;
            }
        }
    }
}

/// After a racer's failure, the racers that have not called yet on a target that now
/// refuses (it moved the operation on, or asked to wait) are dropped, as losers are: no
/// call goes to that target from this race.
fn drop_refused<'p, R: Racers<'p>, E>(this: &mut RaceProjection<'_, '_, 'p, R, E>) {
    let now = Instant::now();
    if let Some(mut first) = this.first.as_mut().as_pin_mut() {
        if !first.as_mut().stage_is_call() && this.make.refuses(this.first_seat.tag, now) {
            cancel(first.project().admitted, &mut this.execution.progress);
            this.first.set(None);
        }
    }
    let make = &*this.make;
    let execution = &mut *this.execution;
    this.hedged.retain_mut(|racer| {
        let keep = racer.lane.as_mut().stage_is_call() || !make.refuses(racer.seat.tag, now);
        if !keep {
            racer.cancel(execution, true);
        }
        keep
    });
}

/// Each racer's steps in turn, the first first, until one ends: which, and its result.
fn poll_racers<'p, T, E, R>(
    this: &mut RaceProjection<'_, '_, 'p, R, E>,
    cx: &mut TaskContext<'_>,
) -> Option<(Which, Result<T, Failure<E>>)>
where
    R: Racers<'p>,
    R::Attempt: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    if let Some(first) = this.first.as_mut().as_pin_mut() {
        *this.polling = Some((Which::First, this.execution.progress.tries.attempt));
        let poll = poll_racer(this.execution, this.first_seat, first, cx);
        *this.polling = None;
        if let Poll::Ready(result) = poll {
            return Some((Which::First, result));
        }
    }
    for (i, racer) in this.hedged.iter_mut().enumerate() {
        *this.polling = Some((Which::Hedge(i), this.execution.progress.tries.attempt));
        let poll = poll_racer(this.execution, &mut racer.seat, racer.lane.as_mut(), cx);
        *this.polling = None;
        if let Poll::Ready(result) = poll {
            return Some((Which::Hedge(i), result));
        }
    }
    None
}

/// One racer's steps, with its admission in the execution's place.
fn poll_racer<'p, T, E, F>(
    execution: &mut &mut Execution<'p, E>,
    racer: &mut Seat<'p>,
    lane: Pin<&mut Lane<'p, F>>,
    cx: &mut TaskContext<'_>,
) -> Poll<Result<T, Failure<E>>>
where
    F: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    let mut call = None;
    // The body's own spans nest under the racer's attempt.
    #[cfg(feature = "tracing")]
    let span = {
        if racer.span.is_none() {
            let spans = execution.progress.report.spans.as_ref();
            // The first racer is the operation's current attempt; a hedge is one more.
            racer.span = spans.map(|spans| match racer.admission {
                None => spans.attempt.clone(),
                Some(_) => spans.hedge(racer.attempt),
            });
        }
        racer.span.clone()
    };
    #[cfg(feature = "tracing")]
    let _entered = span.as_ref().map(tracing::Span::enter);
    racer.swap_admission(&mut execution.progress);
    let hedge = racer.admission.is_some();
    if hedge {
        operation::swap_children(&mut racer.children);
    }
    // A hedge sent elsewhere goes through its own target's breaker: the frame names it while
    // the hedge is polled, so that a call nested in it holds that one, not the operation's.
    if racer.moved {
        named_breaker(&execution.progress);
    }
    let attempts = std::mem::replace(&mut execution.progress.tries.attempt, racer.attempt);
    let lane = lane.project();
    let mut this = AttemptProjection {
        execution,
        future: lane.future,
        timer: lane.timer,
        stage: lane.stage,
        wait: lane.wait,
        limits: lane.limits,
        cut: lane.cut,
        admitted: lane.admitted,
    };
    let poll = step::<_, _, _, false>(&mut this, cx, &mut call);
    execution.progress.tries.attempt = attempts;
    if hedge {
        operation::swap_children(&mut racer.children);
    }
    racer.swap_admission(&mut execution.progress);
    if racer.moved {
        named_breaker(&execution.progress);
    }
    match (poll, call) {
        (Poll::Ready(_), Some(result)) => Poll::Ready(result),
        _ => Poll::Pending,
    }
}

/// The published frame names the breaker of the admission in place.
fn named_breaker(progress: &crate::execution::Progress<'_>) {
    operation::set_breaker(progress.breaker().map_or(0, crate::execution::address));
}

fn delay<'p, R: Racers<'p>, E>(this: &RaceProjection<'_, '_, 'p, R, E>) -> std::time::Duration {
    this.execution
        .progress
        .settings
        .hedge
        .map_or(std::time::Duration::MAX, |hedge| hedge.delay)
}

/// Whether another hedge may start: one is declared, and the operation has a retry left.
fn can_hedge<'p, R: Racers<'p>, E>(this: &RaceProjection<'_, '_, 'p, R, E>) -> bool {
    let progress = &this.execution.progress;
    !*this.refused
        && (progress.settings.hedge).is_some_and(|hedge| *this.hedges < hedge.count)
        && progress.tries.attempt < progress.tuning.retry
}

/// Starts a hedge, if the operation's allowance and the retry budget allow one more attempt.
fn hedge<'p, R: Racers<'p>, E>(this: &mut RaceProjection<'_, '_, 'p, R, E>) {
    if !can_hedge(this) || (this.first.is_none() && this.hedged.is_empty()) {
        return;
    }
    let progress = &mut this.execution.progress;
    let asking = Hedging {
        progress,
        hedge: true,
        admission: None,
        tag: 0,
    };
    // No target would take it now: none is sent before one may.
    if let Some(at) = this.make.hedge_at(&asking, Instant::now()) {
        set_timer(this.timer.as_mut(), at);
        return;
    }
    if !progress.draw_hedge() {
        *this.refused = true;
        return;
    }
    *this.hedges += 1;
    let mut hedging = Hedging {
        progress,
        hedge: true,
        admission: None,
        tag: 0,
    };
    let future = this.make.make(&mut hedging);
    let (tag, moved) = (hedging.tag, hedging.admission.is_some());
    let admission = match hedging.admission {
        Some(elsewhere) => Some(elsewhere),
        None => progress.admission.as_ref().map(Admission::hedge),
    };
    this.hedged.push(Racer {
        lane: Box::pin(Lane::new(progress, future)),
        seat: Seat::new(progress, Some(admission), tag, moved),
    });
    let attempt = progress.tries.attempt;
    progress.notify(|listener, site, operation| {
        listener.on_event(&Event::Hedged {
            site,
            operation,
            attempt,
        });
    });
}

/// The race's hedges, won or lost, for the metrics: once, when the race ends or is dropped.
fn report<'p, R: Racers<'p>, E>(this: &mut RaceProjection<'_, '_, 'p, R, E>, _hedge_won: bool) {
    let hedges = std::mem::take(this.hedges);
    #[cfg(feature = "metrics")]
    if hedges > 0 {
        let won = u64::from(_hedge_won);
        let name = &this.execution.progress.settings.name;
        crate::meter::hedged(name, won, u64::from(hedges) - won);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = hedges;
}
