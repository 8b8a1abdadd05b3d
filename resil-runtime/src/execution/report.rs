//! What an execution tells its observers: the listener's events, metrics' outcome.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Progress;
use crate::breaker::{Breaker, Transition};
use crate::bulkhead::adaptive::Signal;
use crate::events::{self, AttemptOutcome, Event, Listener};
#[cfg(feature = "tracing")]
use crate::operation::Frame;
use crate::operation::{self, OperationId};
use crate::priority::{Priority, Served};
use crate::Rejected;

/// Who hears of an operation: its listener, its spans, its meter.
pub(super) struct Report<'p> {
    /// Whether someone listened when the operation started, or the bulkhead adapts (it hears
    /// each attempt's end, and events then find no listener): events are built only then.
    pub(super) listening: bool,
    /// `resil.operation`, and the current `resil.attempt` under it.
    #[cfg(feature = "tracing")]
    pub(super) spans: Option<Box<Spans>>,
    /// Records the operation's outcome and duration when it ends.
    #[cfg(feature = "metrics")]
    pub(super) meter: crate::meter::Meter<'p>,
    #[cfg(not(feature = "metrics"))]
    pub(super) policy: std::marker::PhantomData<&'p ()>,
}

impl<'p> Progress<'p> {
    /// Who hears this operation's events: looked up at each event, when someone listened at
    /// the start, rather than kept (which keeps the execution small enough to move cheaply).
    #[inline]
    pub(super) fn listener(&self) -> Option<&'p Arc<dyn Listener>> {
        if !self.report.listening {
            return None;
        }
        self.settings.listener()
    }

    /// Calls `send` with the listener, this call's site and its id, when someone listens: a
    /// call nobody listens to pays one check.
    #[inline(always)]
    pub(super) fn notify(&self, send: impl FnOnce(&dyn Listener, &str, Option<&OperationId>)) {
        if self.report.listening {
            self.send(send);
        }
    }

    /// This attempt waited in turn for `wait` (`"rate"`, `"bulkhead"`) and was `served`: the
    /// listeners, tracing and metrics hear how long, by class. Out of line: only an attempt
    /// that waited gets here, and inlined it grew every attempt's code.
    #[inline(never)]
    pub(super) fn served(&self, wait: &'static str, served: Served) {
        let class = self
            .admission
            .as_ref()
            .map_or(Priority::Default, |a| a.place.class());
        let Served { waited, promoted } = served;
        #[cfg(feature = "metrics")]
        self.settings.meters.waited(wait, class, waited, promoted);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            wait,
            class = class.as_str(),
            waited_ms = waited.as_millis() as u64,
            promoted,
            "served in turn"
        );
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::Served {
                operation,
                site,
                wait,
                class,
                waited,
                promoted,
            });
        });
    }

    /// The listener runs `observed`: the calls it makes are not this call's nested calls.
    #[inline(never)]
    fn send(&self, send: impl FnOnce(&dyn Listener, &str, Option<&OperationId>)) {
        if let Some(listener) = self.settings.listener() {
            let operation = operation::current_id();
            operation::observed(|| send(&**listener, &self.settings.name, operation.as_ref()));
        }
    }

    /// Attempt `attempt` of `operation` was dropped while its call, started at `started`,
    /// was under way: the listener hears it ended so. Nothing learns from it: no answer came.
    #[cold]
    #[inline(never)]
    pub(super) fn cancelled(&self, operation: OperationId, attempt: u32, started: Option<Instant>) {
        let Some(listener) = self.settings.listener() else {
            return;
        };
        operation::observed(|| {
            listener.on_event(&Event::AttemptEnded {
                site: &self.settings.name,
                operation: Some(&operation),
                attempt,
                outcome: AttemptOutcome::Cancelled,
                elapsed: started.map_or(Duration::ZERO, |at| at.elapsed()),
            })
        });
    }

    /// The call that `started` announced, in an attempt that started at `started`, ended with
    /// `outcome`: the listener, an adaptive bulkhead and gates that learn hear it, behind the
    /// one check of `listening` that a call nobody listens to pays anyway.
    #[inline]
    pub(super) fn ended(&mut self, outcome: AttemptOutcome<'_>, started: Option<Instant>) {
        if self.report.listening {
            self.ended_heard(outcome, started);
        }
    }

    #[inline(never)]
    fn ended_heard(&mut self, outcome: AttemptOutcome<'_>, started: Option<Instant>) {
        if self.settings.learns {
            // A success, a throttle or a permanent error is the provider's answer; a call cut
            // by the runtime (its timeout) or failed in transit had none to learn from.
            let answered = matches!(
                outcome,
                AttemptOutcome::Ok | AttemptOutcome::Throttled | AttemptOutcome::Permanent
            );
            self.learn(answered);
        }
        if self.settings.adaptive {
            self.adapt(signal(outcome), started);
        }
        let attempt = self.tries.attempt;
        self.send(|listener, site, operation| {
            listener.on_event(&Event::AttemptEnded {
                site,
                operation,
                attempt,
                outcome,
                elapsed: started.map_or(Duration::ZERO, |at| at.elapsed()),
            })
        });
    }

    /// Tells an adaptive bulkhead how the attempt that started at `started` ended. Where its
    /// limit moved goes to the gauge `resil_concurrency_limit` (feature `metrics`); a move of
    /// more than a tenth since the last one reported, to the listener and the tracing
    /// subscriber (INFO) too.
    fn adapt(&self, signal: Signal, started: Option<Instant>) {
        let admission = self.admission.as_ref();
        let bulkhead = admission.and_then(|admission| admission.bulkhead(self.settings));
        let (Some(bulkhead), Some(started)) = (bulkhead, started) else {
            return;
        };
        let Some(change) = bulkhead.observe(signal, started, self.cost()) else {
            return;
        };
        let (site, key, to) = (&*self.settings.name, bulkhead.key(), change.to);
        #[cfg(feature = "metrics")]
        crate::meter::concurrency_limit(site, key, to);
        let Some(from) = change.noted else {
            return;
        };
        #[cfg(feature = "tracing")]
        tracing::info!(
            site,
            key = key.unwrap_or_default(),
            from,
            to,
            "adaptive bulkhead moved its limit"
        );
        if let Some(listener) = self.listener() {
            operation::observed(|| {
                listener.on_event(&Event::ConcurrencyLimit {
                    site,
                    key,
                    from,
                    to,
                })
            });
        }
    }

    /// Tells the listener, if any, that the breaker changed state.
    pub(super) fn transition(&self, breaker: &Breaker, transition: Transition) {
        let listener = self.listener();
        operation::observed(|| events::breaker_transition(listener, breaker.into(), transition));
    }

    /// How the operation ended, for the metrics (`resil_calls_total{outcome}`).
    #[inline(always)]
    pub(super) fn outcome(&mut self, _outcome: &'static str) {
        #[cfg(feature = "metrics")]
        self.report.meter.ended(_outcome);
    }
}

/// What an attempt's end tells an adaptive bulkhead of the provider's capacity: a throttle, an
/// attempt timeout or a transient failure is overload; a permanent error, a cut by the
/// deadline or a rejection says nothing of it.
fn signal(outcome: AttemptOutcome<'_>) -> Signal {
    match outcome {
        AttemptOutcome::Ok => Signal::Success,
        AttemptOutcome::Throttled | AttemptOutcome::Transient => Signal::Overload,
        AttemptOutcome::Rejected(Rejected::Timeout { .. }) => Signal::Overload,
        _ => Signal::Neutral,
    }
}

/// The operation's span and its current attempt's.
#[cfg(feature = "tracing")]
#[derive(Debug)]
pub(super) struct Spans {
    operation: tracing::Span,
    pub(super) attempt: tracing::Span,
}

#[cfg(feature = "tracing")]
impl Spans {
    /// The span of the operation whose frame is `frame`.
    pub(super) fn start(name: &str, frame: &Frame) -> Self {
        let operation = tracing::info_span!(
            "resil.operation",
            "resil.fn" = name,
            "resil.id" = tracing::field::Empty
        );
        if !operation.is_disabled() {
            operation.record("resil.id", tracing::field::display(frame.id()));
        }
        Spans {
            operation,
            attempt: tracing::Span::none(),
        }
    }

    /// A hedge's span, under the operation's: an attempt beside the first racer's.
    pub(super) fn hedge(&self, attempt: u32) -> tracing::Span {
        tracing::info_span!(
            parent: &self.operation,
            "resil.attempt",
            attempt,
            "resil.hedge" = true,
            "http.request.resend_count" = attempt
        )
    }

    /// The attempt's span, entered for one poll: out of line, so that a call nobody traces
    /// pays one check for it.
    #[cold]
    #[inline(never)]
    pub(super) fn enter(&self) -> tracing::span::EnteredSpan {
        self.attempt.clone().entered()
    }

    pub(super) fn attempt(&mut self, attempt: u32) {
        self.attempt = tracing::info_span!(
            parent: &self.operation,
            "resil.attempt",
            attempt,
            "http.request.resend_count" = tracing::field::Empty
        );
        if attempt > 0 {
            self.attempt.record("http.request.resend_count", attempt);
        }
    }
}
