//! [`Execution`]: one logical operation in progress, and the decision after each attempt.

mod attempt;
mod run;

pub use attempt::Attempt;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerState, Transition};
use crate::bulkhead::{Bulkhead, BulkheadPermit};
use crate::deadline::{later, Limits};
use crate::events::{self, AttemptOutcome, Event, GiveUp, Listener};
use crate::gate::{RateGate, Slot};
use crate::operation::{self, Frame, OperationId};
use crate::policy::{BreakerRef, Scope, Settings, Tuning};
use crate::registry::Held;
use crate::stream::{committing_item, Committed, Holdings, ResilientStream};
use crate::{Rejected, Transient};

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

/// The slots an attempt holds in the rate gates, each as its gate promised it: a throttle on
/// one gate revokes its slot only, and each goes back to its own gate.
#[derive(Debug, Default)]
struct Reserved {
    rate: Option<Slot>,
    tokens: Option<Slot>,
    /// The same slots in Redis, when the shared gates granted them.
    #[cfg(feature = "redis")]
    remote: Option<Box<crate::shared::RemoteSlots>>,
}

/// Everything about an operation in progress that does not depend on its types: the
/// decisions are compiled once, not once per annotated function.
struct Progress<'p> {
    settings: &'p Settings,
    /// The limits and retries this operation started with, kept to its end.
    tuning: &'p Tuning,
    breaker: Option<BreakerRef<'p>>,
    /// This call's key's breaker, bulkhead and gates, for a keyed policy: held, so the policy
    /// does not forget the key meanwhile.
    scope: Option<Held<Scope>>,
    permit: Option<BulkheadPermit<'p>>,
    entry: Entry,
    /// What the next attempt costs the token gate.
    cost: u64,
    /// Slots reserved in the rate gates for the current attempt, each as its gate promised
    /// it: given back if the attempt is refused before calling.
    reserved: Reserved,
    deadline: Option<Instant>,
    attempt: u32,
    /// The last wait in nanoseconds (saturating), 0 before the first: decorrelated jitter,
    /// the only reader, never waits less than its positive base. Eight bytes rather than an
    /// `Option<Duration>`'s sixteen keep the execution within a cheap move.
    last_wait: u64,
    /// Whether an attempt has called the provider (the retry budget counts calls).
    called: bool,
    /// Whether someone listened when the operation started: events are built only then.
    listening: bool,
    /// This call's place in the operation; on the thread's stack while an attempt is polled.
    frame: Option<Frame>,
    /// Whether an enclosing call may hold this call's breaker.
    nested: bool,
    /// `resil.operation`, and the current `resil.attempt` under it.
    #[cfg(feature = "tracing")]
    spans: Option<Box<Spans>>,
    /// Records the operation's outcome and duration when it ends.
    #[cfg(feature = "metrics")]
    meter: crate::meter::Meter<'p>,
}

/// The operation's span and its current attempt's.
#[cfg(feature = "tracing")]
#[derive(Debug)]
struct Spans {
    operation: tracing::Span,
    attempt: tracing::Span,
}

#[cfg(feature = "tracing")]
impl Spans {
    fn start(name: &str, frame: &mut Frame) -> Self {
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

    fn attempt(&mut self, attempt: u32) {
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

impl<E> fmt::Debug for Execution<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let progress = &self.progress;
        f.debug_struct("Execution")
            .field("policy", &progress.settings.name)
            .field("attempt", &progress.attempt)
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

/// How the operation stands with its bulkhead before the first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A place is held, or there is no bulkhead.
    Admitted,
    /// No place, and no queue: rejected before the first call.
    Full,
    /// No place yet: the first attempt waits in the queue.
    Queue,
}

/// What identifies a breaker on the operation's stack.
fn address(breaker: &Breaker) -> usize {
    std::ptr::from_ref(breaker) as usize
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
        self.progress.meter.fell_back();
    }

    /// What the next attempts cost the policy's token gate (`rate_cost`; 1 unless set).
    pub fn set_cost(&mut self, cost: u64) {
        self.progress.cost = cost;
    }

    /// 0 during the first attempt, 1 during the first retry, ...
    pub fn attempt_number(&self) -> u32 {
        self.progress.attempt
    }

    /// One attempt: breaker check, the call under the attempt's timeout and what is left of
    /// the deadline, then the decision. Resolves to [`Next::Retry`] once the backoff wait is
    /// over, or to how the operation ended. Dropping it cancels the attempt: a probe frees
    /// its slot, and nothing is counted.
    #[inline]
    pub fn attempt<F>(&mut self, future: F) -> Attempt<'_, 'p, F, E> {
        if let Some(frame) = &mut self.progress.frame {
            frame.new_attempt();
        }
        #[cfg(feature = "tracing")]
        if let Some(spans) = &mut self.progress.spans {
            spans.attempt(self.progress.attempt);
        }
        Attempt::new(self, future)
    }

    /// One attempt of a streaming call: `connect`, then the stream's first item, under the
    /// attempt's timeout (see [`crate::stream`]).
    pub fn attempt_stream<T, S, Fut>(
        &mut self,
        connect: Fut,
    ) -> Attempt<'_, 'p, impl Future<Output = Result<Committed<T, S>, E>> + use<'p, T, E, S, Fut>, E>
    where
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: From<Rejected>,
    {
        self.attempt(committing_item(connect, |_| true))
    }

    /// [`Execution::attempt_stream`] whose commit point is the first item that `commits`
    /// accepts: the items before it are held and handed over at the commit (see
    /// [`crate::stream`]).
    pub fn attempt_stream_until<T, S, Fut, C>(
        &mut self,
        connect: Fut,
        commits: C,
    ) -> Attempt<
        '_,
        'p,
        impl Future<Output = Result<Committed<T, S>, E>> + use<'p, T, E, S, Fut, C>,
        E,
    >
    where
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: From<Rejected>,
        C: Fn(&T) -> bool,
    {
        self.attempt(committing_item(connect, commits))
    }

    /// Ends a streaming operation: a committed stream takes over the bulkhead permit, the
    /// breaker and the deadline; a failure gives them back here, before any fallback runs.
    pub fn commit<T, S>(
        self,
        outcome: Outcome<Committed<T, S>, E>,
    ) -> Outcome<ResilientStream<'p, T, E, S>, E> {
        match outcome {
            Outcome::Completed(Ok(committed)) => {
                #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
                let mut progress = self.progress;
                #[cfg(feature = "metrics")]
                progress.meter.committed();
                let holdings = Holdings {
                    listener: progress.listener(),
                    breaker: progress.breaker,
                    scope: progress.scope,
                    permit: progress.permit,
                    deadline: progress.deadline,
                    idle: progress.tuning.idle,
                };
                Outcome::Completed(Ok(ResilientStream::new(committed, holdings)))
            }
            Outcome::Completed(Err(error)) => Outcome::Completed(Err(error)),
            Outcome::Failed(error) => Outcome::Failed(error),
        }
    }

    /// The call is about to be made.
    #[inline]
    fn started(&mut self) {
        self.last_error = None;
        self.progress.started();
    }

    /// After an attempt: the operation's end, or how long to wait before the next attempt.
    #[inline]
    fn decide<T>(&mut self, result: Result<T, Failure<E>>) -> Decision<T, E>
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
        let asked = error.retry_after();
        match progress.plan_retry(asked) {
            Ok(wait) => {
                self.last_error = Some(error);
                Decision::Wait(wait)
            }
            Err(reason) => Decision::Done(progress.give_up(error, reason, kind, asked)),
        }
    }
}

/// Where an operation stands after asking `bulkhead` for a permit at once.
#[inline]
fn enter<'p>(
    bulkhead: &Bulkhead,
    permit: Result<BulkheadPermit<'p>, Rejected>,
) -> (Option<BulkheadPermit<'p>>, Entry) {
    match permit {
        Ok(permit) => (Some(permit), Entry::Admitted),
        Err(_) if bulkhead.queue() > 0 => (None, Entry::Queue),
        Err(_) => (None, Entry::Full),
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
        // Switched off: straight to the body, past the breaker, the bulkhead and the gates.
        let (breaker, scope) = match tuning.enabled {
            true => (breaker, scope),
            false => (None, None),
        };
        let own = scope.as_ref().and_then(|scope| scope.bulkhead.as_ref());
        let shared = settings.bulkhead.as_ref().filter(|_| tuning.enabled);
        let (permit, entry) = match (shared, own) {
            (Some(bulkhead), _) => enter(bulkhead, bulkhead.try_acquire()),
            (None, Some(bulkhead)) => enter(bulkhead, bulkhead.try_acquire_owned()),
            (None, None) => (None, Entry::Admitted),
        };
        let own_deadline = tuning
            .deadline
            .map(|deadline| later(Instant::now(), deadline));
        let listening = settings.listener().is_some();
        let owner = listening.then_some(&settings.name);
        let address = breaker.as_ref().map_or(0, |breaker| address(breaker.get()));
        #[cfg_attr(not(feature = "tracing"), allow(unused_mut))]
        let mut frame = Frame::start(
            own_deadline,
            tuning.retry,
            settings.independent,
            owner,
            address,
        );
        #[cfg(feature = "tracing")]
        // No subscriber wants INFO: no span is made, moved or entered (one atomic load).
        let spans = tracing::level_enabled!(tracing::Level::INFO)
            .then(|| Box::new(Spans::start(&settings.name, &mut frame)));
        Progress {
            settings,
            tuning,
            breaker,
            scope,
            permit,
            entry,
            cost: 1,
            reserved: Reserved::default(),
            deadline: frame.deadline(),
            attempt: 0,
            last_wait: 0,
            called: false,
            listening,
            nested: frame.is_nested(),
            frame: Some(frame),
            #[cfg(feature = "tracing")]
            spans,
            #[cfg(feature = "metrics")]
            meter: crate::meter::Meter::start(
                &settings.meters,
                (settings.bulkhead.as_ref()).map(|b| b as &dyn crate::meter::InFlight),
            ),
        }
    }

    fn limits(&self) -> Limits {
        Limits {
            timeout: self.tuning.timeout,
            started: None,
            deadline: self.deadline,
        }
    }

    fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref().map(BreakerRef::get)
    }

    /// The bulkhead: all calls', or this key's.
    #[inline]
    fn bulkhead(&self) -> Option<&Bulkhead> {
        (self.settings.bulkhead.as_ref()).or_else(|| self.scope.as_ref()?.bulkhead.as_deref())
    }

    /// The rate gate: all calls', or this key's.
    #[inline]
    fn rate(&self) -> Option<&RateGate> {
        (self.settings.rate.as_ref()).or_else(|| self.scope.as_ref()?.rate.as_ref())
    }

    /// The token gate: all calls', or this key's.
    #[inline]
    fn token_rate(&self) -> Option<&RateGate> {
        (self.settings.token_rate.as_ref()).or_else(|| self.scope.as_ref()?.token_rate.as_ref())
    }

    /// The wait for a place in the bulkhead's queue, if this operation has yet to wait in it.
    #[inline]
    fn queue(&mut self) -> Option<attempt::PermitWait<'p>> {
        if self.entry != Entry::Queue {
            return None;
        }
        self.entry = Entry::Admitted;
        // Rare (the bulkhead is full), so the wait is boxed to keep every attempt small.
        if let Some(bulkhead) = &self.settings.bulkhead {
            return Some(Box::pin(bulkhead.acquire()));
        }
        let bulkhead = Arc::clone(self.scope.as_ref()?.bulkhead.as_ref()?);
        Some(Box::pin(async move {
            let permit: Result<BulkheadPermit<'p>, Rejected> = bulkhead.acquire_owned().await;
            permit
        }))
    }

    /// Reserves this attempt's slots in the rate gates: the wait until the later of them, or
    /// the refusal of a gate whose slot would come after the deadline (nothing is then held).
    #[inline]
    fn reserve_slots(&mut self) -> Result<Duration, Rejected> {
        if !self.settings.gated || !self.tuning.enabled {
            return Ok(Duration::ZERO);
        }
        self.refuse_if_open()?;
        let mut reserved = Reserved::default();
        let mut wait = Duration::ZERO;
        if let Some(gate) = self.rate() {
            let (rate, slot) = gate.reserve_slot(1, self.deadline)?;
            (wait, reserved.rate) = (rate, Some(slot));
        }
        if let Some(gate) = self.token_rate() {
            match gate.reserve_slot(self.cost, self.deadline) {
                Ok((tokens, slot)) => (wait, reserved.tokens) = (wait.max(tokens), Some(slot)),
                Err(refused) => {
                    self.reserved = reserved;
                    self.refund_slots();
                    return Err(refused);
                }
            }
        }
        self.reserved = reserved;
        Ok(wait)
    }

    /// A call the breaker will refuse does not wait for a slot first.
    fn refuse_if_open(&self) -> Result<(), Rejected> {
        if let Some(breaker) = self.breaker() {
            let retry_in = breaker.retry_in(Instant::now());
            if !retry_in.is_zero() {
                return Err(breaker.rejection(retry_in));
            }
        }
        Ok(())
    }

    /// For a shared policy whose store answers, the request for this attempt's slots in the
    /// shared gates; `None` when the local gates decide alone (no shared gate, or Redis is
    /// known to be down and the policy fails open). Out of line: only gated policies get
    /// here, and the attempt's own code stays small.
    #[cfg(feature = "redis")]
    #[inline(never)]
    fn shared_slots(&mut self) -> Result<Option<attempt::SharedWait>, Rejected> {
        if !self.tuning.enabled {
            return Ok(None);
        }
        let (rate, tokens) = (self.rate(), self.token_rate());
        let shared = |gate: Option<&RateGate>| gate.and_then(|gate| gate.shared()).cloned();
        let (rate_link, token_link) = (shared(rate), shared(tokens));
        let Some(link) = rate_link.as_ref().or(token_link.as_ref()) else {
            return Ok(None);
        };
        if !link.is_available() {
            return self.refuse_if_failing_closed().map(|()| None);
        }
        self.refuse_if_open()?;
        if let Some(gate) = tokens.filter(|gate| self.cost > gate.burst()) {
            return Err(Rejected::OverBurst {
                cost: self.cost,
                burst: gate.burst(),
            });
        }
        let limit = self
            .deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()));
        let interval = |gate: Option<&RateGate>| gate.map_or(0, RateGate::interval_now);
        let gates = [
            rate_link.map(|link| (link, 1, interval(rate))),
            token_link.map(|link| (link, self.cost, interval(tokens))),
        ];
        Ok(Some(Box::pin(crate::shared::reserve(gates, limit))))
    }

    /// What the shared gates answered: the wait for the slot (the local gates then count the
    /// call too, so that they decide from what this instance did if Redis goes), or the
    /// refusal. No answer: the local gates decide, unless the policy fails closed.
    #[cfg(feature = "redis")]
    fn shared_answer(&mut self, answer: crate::shared::SharedSlots) -> Result<Duration, Rejected> {
        use crate::shared::{RemoteSlot, SharedSlots};
        match answer {
            SharedSlots::Granted(granted) => {
                let [rate, tokens] = granted.slots;
                let mirror = |gate: Option<&RateGate>, remote: Option<RemoteSlot>| {
                    gate.zip(remote)
                        .map(|(gate, remote)| gate.mirror(remote.ahead))
                };
                self.reserved = Reserved {
                    rate: mirror(self.rate(), rate),
                    tokens: mirror(self.token_rate(), tokens),
                    remote: Some(Box::new([rate, tokens])),
                };
                Ok(granted.wait)
            }
            SharedSlots::Refused(rejected) => Err(rejected),
            SharedSlots::Unavailable => {
                self.refuse_if_failing_closed()?;
                self.reserve_slots()
            }
        }
    }

    /// Redis does not answer: the local gates decide, unless the policy fails closed.
    #[cfg(feature = "redis")]
    fn refuse_if_failing_closed(&self) -> Result<(), Rejected> {
        let fail_closed = [self.rate(), self.token_rate()]
            .into_iter()
            .flatten()
            .filter_map(RateGate::shared)
            .any(|link| link.fail_closed());
        match fail_closed {
            true => Err(Rejected::SharedUnavailable),
            false => Ok(()),
        }
    }

    /// Did a throttle revoke a slot this attempt waits for? Then the attempt must reserve
    /// again: what a throttle revoked is gone, and what it did not (the other gate's slot)
    /// goes back.
    fn slots_revoked(&mut self) -> bool {
        let revoked = |gate: Option<&RateGate>, slot: Option<Slot>| {
            gate.zip(slot)
                .is_some_and(|(gate, slot)| gate.is_revoked(slot))
        };
        let reserved = &self.reserved;
        let revoked =
            revoked(self.rate(), reserved.rate) || revoked(self.token_rate(), reserved.tokens);
        if revoked {
            self.refund_slots();
        }
        revoked
    }

    /// The slots reserved are spent by the call.
    fn slots_used(&mut self) {
        self.reserved = Reserved::default();
    }

    /// The attempt was refused, or gave up waiting, after its slots were reserved: it made no
    /// call, so each goes back to its gate (each gate takes back only what it can: see
    /// [`RateGate::refund`]).
    fn refund_slots(&mut self) {
        let reserved = std::mem::take(&mut self.reserved);
        #[cfg(feature = "redis")]
        if let Some(remote) = reserved.remote {
            let links =
                [self.rate(), self.token_rate()].map(|gate| gate.and_then(RateGate::shared));
            for (link, slot) in links.into_iter().zip(*remote) {
                if let (Some(link), Some(slot)) = (link, slot) {
                    link.refund(slot);
                }
            }
        }
        if let (Some(gate), Some(slot)) = (self.rate(), reserved.rate) {
            gate.refund(slot);
        }
        if let (Some(gate), Some(slot)) = (self.token_rate(), reserved.tokens) {
            gate.refund(slot);
        }
    }

    /// The provider throttled this call: the gates slow down, and if it asked to wait, they
    /// hand out no slot until then, so other callers wait in them instead of provoking their
    /// own 429.
    fn throttled(&self, wait: Option<Duration>) {
        for gate in [self.rate(), self.token_rate()].into_iter().flatten() {
            gate.slow_down();
            if let Some(wait) = wait {
                gate.hold(wait.min(self.tuning.retry_after_max));
            }
        }
    }

    /// A full bulkhead or a passed deadline stop the attempt before anything else.
    #[inline]
    fn before_call(&mut self) -> Result<(), Rejected> {
        if self.entry == Entry::Full {
            self.entry = Entry::Admitted;
            let limit = self.bulkhead().map_or(0, Bulkhead::limit);
            return Err(Rejected::BulkheadFull { limit });
        }
        if let Some(deadline) = self.deadline {
            if Instant::now() >= deadline {
                return Err(Rejected::DeadlineExceeded);
            }
        }
        Ok(())
    }

    #[inline]
    fn started(&mut self) {
        let settings = self.settings;
        if !self.called {
            self.called = true;
            if let Some(budget) = &settings.budget {
                budget.record_first_attempt();
            }
        }
        let attempt = self.attempt;
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

    /// Who hears this operation's events: looked up at each event, when someone listened at
    /// the start, rather than kept (which keeps the execution small enough to move cheaply).
    #[inline]
    fn listener(&self) -> Option<&'p Arc<dyn Listener>> {
        if !self.listening {
            return None;
        }
        self.settings.listener()
    }

    /// Calls `send` with the listener, this call's site and its id, when someone listens.
    #[inline]
    fn notify(&self, send: impl FnOnce(&dyn Listener, &str, Option<&OperationId>)) {
        if let Some(listener) = self.listener() {
            let operation = operation::current_id();
            send(&**listener, &self.settings.name, operation.as_ref());
        }
    }

    /// The call that `started` announced, in an attempt that started at `started`, ended with
    /// `outcome`.
    #[inline]
    fn ended(&self, outcome: AttemptOutcome<'_>, started: Option<Instant>) {
        let attempt = self.attempt;
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::AttemptEnded {
                site,
                operation,
                attempt,
                outcome,
                elapsed: started.map_or(Duration::ZERO, |at| at.elapsed()),
            })
        });
    }

    /// Tells the listener, if any, that the breaker changed state.
    fn transition(&self, breaker: &Breaker, transition: Transition) {
        events::breaker_transition(self.listener(), breaker.into(), transition);
    }

    /// How the operation ended, for the metrics (`resil_calls_total{outcome}`).
    #[inline(always)]
    fn outcome(&mut self, _outcome: &'static str) {
        #[cfg(feature = "metrics")]
        self.meter.ended(_outcome);
    }

    /// The backoff wait is over: the next attempt begins.
    fn advance(&mut self) {
        self.attempt += 1;
    }

    /// A transient failure (whose error asked to wait `asked`, if it did): the wait before
    /// the next attempt, with the retry drawn, or why there is none.
    fn plan_retry(&mut self, asked: Option<Duration>) -> Result<Duration, GiveUp> {
        let (settings, tuning) = (self.settings, self.tuning);
        if tuning.retry == 0 {
            return Err(GiveUp::NoRetries);
        }
        if self.attempt >= tuning.retry {
            return Err(GiveUp::RetriesExhausted);
        }
        if let Some(breaker) = self.breaker() {
            // Opened meanwhile (by this failure or another caller's) and not yet cooled down.
            if breaker.state() == BreakerState::Open && !breaker.retry_in(Instant::now()).is_zero()
            {
                return Err(GiveUp::BreakerOpen);
            }
        }
        if asked.is_some_and(|asked| asked > tuning.retry_after_max) {
            return Err(GiveUp::RetryAfterTooLong);
        }
        let previous = (self.last_wait > 0).then(|| Duration::from_nanos(self.last_wait));
        let wait = settings.wait(&tuning.backoff, self.attempt, previous, asked);
        if let Some(deadline) = self.deadline {
            // No wait is started that cannot end, with time for the call, before the deadline.
            if later(Instant::now(), wait) >= deadline {
                return Err(GiveUp::DeadlineTooClose);
            }
        }
        if operation::allowance() == Some(0) {
            return Err(GiveUp::AllowanceSpent);
        }
        if let Some(budget) = &settings.budget {
            // An operation that has not called yet (its first attempt waited for a probe and
            // timed out) withdraws nothing: its next call is its first.
            if self.called && !budget.try_withdraw() {
                return Err(GiveUp::BudgetExhausted);
            }
        }
        operation::draw();
        let attempt = self.attempt;
        #[cfg(feature = "metrics")]
        settings.meters.retry();
        #[cfg(feature = "tracing")]
        tracing::debug!(
            wait_ms = wait.as_millis() as u64,
            reason = if asked.is_some() {
                "retry_after"
            } else {
                "backoff"
            },
            "waiting before the next attempt"
        );
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::Waiting {
                site,
                operation,
                attempt,
                wait,
            })
        });
        self.last_wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        Ok(wait)
    }

    /// Ends the operation with the provider's `error` (`outcome`: `error` or `timeout`), which
    /// asked to wait `asked` if it did.
    fn give_up<T, E>(
        &mut self,
        error: E,
        reason: GiveUp,
        outcome: &'static str,
        asked: Option<Duration>,
    ) -> Next<T, E> {
        self.outcome(outcome);
        let attempt = self.attempt;
        // The error itself does not say why it was not retried: a wait refused is logged.
        #[cfg(feature = "tracing")]
        if let (GiveUp::RetryAfterTooLong | GiveUp::DeadlineTooClose, Some(asked)) = (reason, asked)
        {
            tracing::warn!(
                asked_ms = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX),
                reason = reason.as_str(),
                "not retried: the error asked to wait {asked:?}"
            );
        }
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::GaveUp {
                site,
                operation,
                attempt,
                reason,
                asked,
            })
        });
        Next::Done(Outcome::Failed(error))
    }

    fn reject<T, E: From<Rejected>>(&mut self, rejected: Rejected) -> Next<T, E> {
        self.outcome(match &rejected {
            Rejected::OverBurst { .. } => "rate_limited",
            Rejected::Idle { .. } | Rejected::Incomplete => "error",
            other => other.kind(),
        });
        #[cfg(feature = "tracing")]
        tracing::info!(kind = rejected.kind(), "{rejected}");
        self.notify(|listener, site, operation| {
            listener.on_event(&Event::Rejected {
                site,
                operation,
                rejected: &rejected,
            })
        });
        Next::Done(Outcome::Failed(E::from(rejected)))
    }
}
