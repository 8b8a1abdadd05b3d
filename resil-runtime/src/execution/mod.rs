//! [`Execution`]: one logical operation in progress, and the decision after each attempt.

pub(crate) mod admission;
#[cfg(feature = "shared")]
mod alone;
#[cfg(feature = "shared")]
mod ask_turn;
pub(crate) mod attempt;
mod call;
#[cfg(feature = "shared")]
mod deferred;
mod in_turn;
mod learn;
#[cfg(feature = "shared")]
mod probing;
mod refund;
mod report;
mod retry;
mod route;
mod run;
mod slots;
mod streams;
mod tokens;

pub use attempt::{Attempt, Hedging, Lost, Plain, Race, Racers};
pub use route::Route;

use admission::Admission;
use report::Report;
#[cfg(feature = "tracing")]
use report::Spans;
use retry::Tries;

use std::fmt;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::Breaker;
use crate::deadline::{later, Limits};
use crate::events::{Event, GiveUp};
use crate::operation::{self, Frame, Opening};
use crate::policy::{BreakerRef, Current, Scope, Settings, Tuning};
use crate::registry::Held;
use crate::{Rejected, Transient};

/// How long before the deadline an attempt's slot wait must end: an attempt at the deadline
/// has no time to call, and tokio's timers fire on the millisecond.
const LAST_START: Duration = Duration::from_millis(1);

/// One logical operation in progress: holds the bulkhead permit and the deadline, counts
/// attempts, and decides after each whether there is another.
///
/// This is what `#[resilient]` expands to; it takes one future per attempt so the body can
/// borrow `&mut self` across attempts and the whole stays `Send`. `E` is the operation's error
/// type: the execution keeps the last error the provider gave, so that a retry refused by a
/// breaker that opened meanwhile ends with that error rather than with a rejection.
///
/// ```
/// use resil_runtime::{Next, Policy, Rejected};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::builder().retry(1).build().unwrap();
/// let mut buffer = Vec::new();
/// let mut execution = policy.execute();
/// let outcome = loop {
///     let attempt = async {
///         buffer.push(1); // borrows `buffer` mutably, attempt after attempt
///         Ok::<_, Rejected>(buffer.len())
///     };
///     if let Next::Done(outcome) = execution.attempt(attempt).await {
///         break outcome;
///     }
/// };
/// assert_eq!(outcome.into_result(), Ok(1));
/// # }
/// ```
pub struct Execution<'p, E> {
    progress: Progress<'p>,
    /// The error of the last attempt that called, while the next one is pending.
    last_error: Option<E>,
}

/// Everything about an operation in progress that does not depend on its types: the
/// decisions are compiled once, not once per annotated function.
pub(crate) struct Progress<'p> {
    settings: &'p Settings,
    /// The limits and retries this operation started with, kept to its end.
    tuning: Current<'p>,
    /// What stands before each call (breaker, bulkhead, gates), when anything does.
    admission: Option<Admission<'p>>,
    /// The attempts made so far.
    tries: Tries,
    /// Who hears of the operation.
    report: Report<'p>,
    /// The earliest deadline this call is under: its own, or an enclosing call's.
    deadline: Option<Instant>,
    /// This call's place in the operation between polls (`None` before the first, and while
    /// an attempt is polled, when the poll holds it and publishes it).
    frame: Option<Frame>,
    /// Whether an enclosing call may hold this call's breaker.
    nested: bool,
}

impl<E> fmt::Debug for Execution<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let progress = &self.progress;
        f.debug_struct("Execution")
            .field("policy", &progress.settings.name)
            .field("attempt", &progress.tries.attempt)
            .field("deadline", &progress.deadline)
            .finish()
    }
}

/// What to do after an attempt.
#[derive(Debug)]
pub enum Next<T, E> {
    /// The wait is over: make the next attempt.
    Retry,
    /// The operation is over.
    Done(Outcome<T, E>),
}

/// How an operation ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<T, E> {
    /// What the call returned: a success or a permanent error. A fallback does not apply.
    Completed(Result<T, E>),
    /// A transient error with no retry left, or a rejection: where a fallback applies.
    Failed(E),
}

impl<T, E> Outcome<T, E> {
    /// The operation's result.
    pub fn into_result(self) -> Result<T, E> {
        match self {
            Outcome::Completed(result) => result,
            Outcome::Failed(error) => Err(error),
        }
    }
}

/// What identifies a breaker on the operation's stack.
fn address(breaker: &Breaker) -> usize {
    std::ptr::from_ref(breaker) as usize
}

/// What a call of `settings` under `tuning` brings to its frame: `deadline` is its own.
#[inline]
fn opening<'s>(
    settings: &'s Settings,
    tuning: &Tuning,
    listening: bool,
    deadline: Option<Instant>,
    breaker: Option<&Breaker>,
) -> Opening<'s> {
    Opening {
        deadline,
        retry: tuning.retry,
        independent: settings.independent,
        name: listening.then_some(&settings.name),
        breaker: breaker.map_or(0, address),
    }
}

/// How an attempt failed: the call's own error, or the runtime's.
pub(crate) enum Failure<E> {
    Error(E),
    Rejected(Rejected),
}

/// After an attempt: the end of the operation, or a wait before the next attempt.
pub(crate) enum Decision<T, E> {
    Done(Next<T, E>),
    Wait(Duration),
}

impl<'p, E> Execution<'p, E> {
    /// Takes the bulkhead permit, starts the deadline and takes this call's place in the
    /// enclosing operation, if any.
    #[inline]
    pub(crate) fn start(
        settings: &'p Settings,
        breaker: Option<BreakerRef<'p>>,
        scope: Option<Held<Scope>>,
    ) -> Self {
        Execution {
            progress: Progress::start(settings, breaker, scope),
            last_error: None,
        }
    }

    /// The operation's failure is being served by a fallback: with feature `metrics`, it
    /// counts as outcome `fallback`. `#[resilient]` calls this for its `fallback`.
    pub fn falls_back(&mut self) {
        #[cfg(feature = "metrics")]
        self.progress.report.meter.fell_back();
    }

    /// Whether the policy hedges: its attempts then run as a [`Race`] ([`Execution::race`]).
    pub fn hedges(&self) -> bool {
        self.progress.settings.hedge.is_some() && self.progress.tuning.enabled
    }

    /// 0 during the first attempt, 1 during the first retry, ...
    pub fn attempt_number(&self) -> u32 {
        self.progress.tries.attempt
    }

    /// One attempt: breaker check, the call under the attempt's timeout and what is left of
    /// the deadline, then the decision. Resolves to [`Next::Retry`] once the backoff wait is
    /// over, or to how the operation ended. Dropping it cancels the attempt: a probe frees
    /// its slot, and nothing is counted.
    #[inline]
    pub fn attempt<F>(&mut self, future: F) -> Attempt<'_, 'p, F, E> {
        if let Some(frame) = &self.progress.frame {
            frame.new_attempt();
        }
        #[cfg(feature = "tracing")]
        if let Some(spans) = &mut self.progress.report.spans {
            spans.attempt(self.progress.tries.attempt);
        }
        Attempt::new(self, future)
    }

    /// Moves the next attempts to another key's state: a route's next target.
    fn retarget(&mut self, breaker: Option<BreakerRef<'p>>, scope: Option<Held<Scope>>) {
        let progress = &mut self.progress;
        // A route moves on while its frame is published (the frame the call holds then).
        operation::set_breaker(breaker.as_ref().map_or(0, |breaker| address(breaker.get())));
        if let Some(admission) = &mut progress.admission {
            admission.retarget(progress.settings, breaker, scope);
        }
    }

    /// The call is about to be made.
    #[inline]
    fn started(&mut self) {
        self.last_error = None;
        self.progress.started();
    }

    /// After an attempt: the operation's end, or how long to wait before the next attempt.
    /// Inlined into the attempt's poll, so a success goes straight to its caller; the rare
    /// branches call out to `Progress`, compiled once.
    #[inline(always)]
    fn decide<T>(&mut self, result: Result<T, Failure<E>>) -> Decision<T, E>
    where
        E: Transient + From<Rejected>,
    {
        self.decide_holding(result, None)
    }

    /// [`Execution::decide`], with the target the next attempt goes back to still `held` for
    /// that long, as an earlier racer's error asked.
    #[inline(always)]
    fn decide_holding<T>(
        &mut self,
        result: Result<T, Failure<E>>,
        held: Option<Duration>,
    ) -> Decision<T, E>
    where
        E: Transient + From<Rejected>,
    {
        let progress = &mut self.progress;
        let (error, kind) = match result {
            Ok(value) => {
                progress.outcome("ok");
                return Decision::Done(Next::Done(Outcome::Completed(Ok(value))));
            }
            Err(Failure::Error(error)) if !error.is_transient() => {
                if progress.tries.routing.other && error.moves_on() {
                    return self.move_on(error);
                }
                progress.outcome("error");
                return Decision::Done(Next::Done(Outcome::Completed(Err(error))));
            }
            Err(Failure::Error(error)) => (error, "error"),
            Err(Failure::Rejected(rejected @ Rejected::Timeout { .. })) => {
                (E::from(rejected), "timeout")
            }
            Err(Failure::Rejected(
                rejected @ (Rejected::BreakerOpen { .. } | Rejected::RateLimited { .. }),
            )) => {
                // A route's target that changed since the route chose it is passed over as a
                // skipped one is: the route chooses again, with nothing drawn.
                if progress.tries.routing.routed && self.last_error.is_some() {
                    progress.tries.routing.refused = true;
                    return Decision::Wait(Duration::ZERO);
                }
                // A retry that meets an open breaker or a closed gate ends with what the
                // provider said last: the rejection means this operation made no call at all.
                let reason = match rejected {
                    Rejected::RateLimited { .. } => GiveUp::RateLimited,
                    _ => GiveUp::BreakerOpen,
                };
                return Decision::Done(match self.last_error.take() {
                    Some(error) => progress.give_up(error, reason, "error", None),
                    None => progress.reject(rejected),
                });
            }
            Err(Failure::Rejected(rejected)) => return Decision::Done(progress.reject(rejected)),
        };
        let asked = match (error.retry_after(), held) {
            (Some(asked), Some(held)) => Some(asked.max(held)),
            (asked, held) => asked.or(held),
        };
        match progress.plan_retry(asked) {
            Ok(wait) => {
                self.last_error = Some(error);
                Decision::Wait(wait)
            }
            Err(reason) => Decision::Done(progress.give_up(error, reason, kind, asked)),
        }
    }

    /// A route moves on from `error`, a permanent error of its target only, at once; with no
    /// attempt left, what the target said is permanent.
    #[cold]
    #[inline(never)]
    fn move_on<T>(&mut self, error: E) -> Decision<T, E> {
        match self.progress.plan_retry(None) {
            Ok(wait) => {
                self.last_error = Some(error);
                Decision::Wait(wait)
            }
            Err(_) => {
                self.progress.outcome("error");
                Decision::Done(Next::Done(Outcome::Completed(Err(error))))
            }
        }
    }
}

impl<'p> Progress<'p> {
    #[inline]
    fn start(
        settings: &'p Settings,
        breaker: Option<BreakerRef<'p>>,
        scope: Option<Held<Scope>>,
    ) -> Self {
        let tuning = settings.tunings.current();
        let deadline = tuning
            .deadline
            .map(|deadline| later(Instant::now(), deadline));
        // Made in place: a temporary admission would be moved into the execution once more.
        Progress {
            settings,
            admission: Admission::start(settings, &tuning, breaker, scope),
            tuning,
            tries: Tries::default(),
            report: Report {
                listening: settings.attentive | settings.listener().is_some(),
                #[cfg(feature = "tracing")]
                spans: None,
                #[cfg(feature = "metrics")]
                meter: crate::meter::Meter::start(
                    &settings.meters,
                    (settings.bulkhead.as_ref()).map(|b| b as &dyn crate::meter::InFlight),
                ),
                #[cfg(not(feature = "metrics"))]
                policy: std::marker::PhantomData,
            },
            deadline,
            frame: None,
            nested: false,
        }
    }

    /// This call's frame for one poll, taken from where the call keeps it between polls, or
    /// made now, at the first, where the frames published show the calls it is nested in (the
    /// deadline it sees then becomes the attempt's). The first poll is where a call joins the
    /// operation around it, with or without a tracing subscriber: an execution started
    /// outside a call and first polled inside one is nested in it.
    #[inline(always)]
    fn take_frame(&mut self, limits: &mut Limits) -> Frame {
        // Checked before it is taken: a first poll then copies no empty slot out.
        if self.frame.is_some() {
            if let Some(frame) = self.frame.take() {
                return frame;
            }
        }
        let opening = opening(
            self.settings,
            &self.tuning,
            self.report.listening,
            self.deadline,
            self.breaker(),
        );
        let frame = opening.frame();
        (self.deadline, self.nested) = (frame.deadline, frame.nested);
        limits.deadline = frame.deadline;
        // No subscriber wants INFO: no span is made, moved or entered (one atomic load).
        #[cfg(feature = "tracing")]
        if tracing::level_enabled!(tracing::Level::INFO) {
            self.trace(&frame);
        }
        frame
    }

    /// Keeps this call's frame until its next poll, unless the operation is over.
    #[inline(always)]
    fn keep_frame<T, E>(&mut self, frame: Frame, poll: &Poll<Next<T, E>>) {
        if !matches!(poll, Poll::Ready(Next::Done(_))) {
            self.frame = Some(frame);
        }
    }

    /// Opens the operation's span, named by the id of the frame just made, and its first
    /// attempt's. Out of line: only a traced call pays for it.
    #[cfg(feature = "tracing")]
    #[cold]
    #[inline(never)]
    fn trace(&mut self, frame: &Frame) {
        let mut spans = Box::new(Spans::start(&self.settings.name, frame));
        spans.attempt(self.tries.attempt);
        self.report.spans = Some(spans);
    }

    fn limits(&self) -> Limits {
        Limits {
            timeout: self.tuning.timeout,
            started: None,
            deadline: self.deadline,
        }
    }

    /// A full bulkhead or a passed deadline stop the attempt before anything else.
    #[inline]
    fn before_call(&mut self) -> Result<(), Rejected> {
        if let Some(admission) = &mut self.admission {
            admission.refuse_if_full(self.settings)?;
        }
        if let Some(deadline) = self.deadline {
            if Instant::now() >= deadline {
                return Err(Rejected::DeadlineExceeded);
            }
        }
        Ok(())
    }

    /// A wait for a slot judged to fit the deadline ends past it when the attempt is polled
    /// late (a shared future no one awaits for a while, a busy runtime): then it makes no
    /// call, which would have no time left to answer.
    #[inline]
    fn before_deadline(&self) -> Result<(), Rejected> {
        match self.deadline {
            Some(deadline) if Instant::now() >= deadline => Err(Rejected::DeadlineExceeded),
            _ => Ok(()),
        }
    }

    /// The latest an attempt may start after waiting for its slots: [`LAST_START`] before the
    /// deadline. An attempt at the deadline has no time to call, and tokio's timers fire on
    /// the millisecond, so a wait that ends within the deadline's last millisecond may end
    /// past it.
    #[inline]
    fn start_by(&self) -> Option<Instant> {
        (self.deadline).map(|deadline| deadline.checked_sub(LAST_START).unwrap_or(deadline))
    }

    #[inline]
    fn started(&mut self) {
        let settings = self.settings;
        if !self.tries.called {
            self.tries.called = true;
            if let Some(budget) = &settings.budget {
                budget.record_first_attempt();
            }
        }
        let attempt = self.tries.attempt;
        #[cfg(feature = "metrics")]
        settings.meters.attempt();
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::AttemptStarted {
                site,
                operation,
                attempt,
            })
        });
    }

    /// The backoff wait is over: the next attempt begins.
    fn advance(&mut self) {
        self.tries.attempt += 1;
    }
}
