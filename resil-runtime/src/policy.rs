//! [`Policy`]: the policies put together in the order that makes them work, and
//! [`Execution`], the per-attempt API that `#[resilient]` expands to.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::time::Instant;

use crate::attempt::Attempt;
use crate::breaker::{named, Breaker, BreakerConfig, BreakerKey, BreakerState};
use crate::breaker::{KeyedBreakers, Transition, Verdict};
use crate::budget::RetryBudget;
use crate::bulkhead::{Bulkhead, BulkheadPermit};
use crate::deadline::Limits;
use crate::events::{self, AttemptOutcome, Event, GiveUp, Listener};
use crate::operation::{self, Context, OperationId};
use crate::{Backoff, ConfigError, Jitter, Rejected, Transient};

/// Timeout, deadline, retries with backoff, a circuit breaker and a bulkhead, applied in
/// this order: bulkhead (one permit for the whole operation) → retry loop → breaker check →
/// timeout → call. Build it once and share it; its state (breaker, bulkhead) is shared by
/// every call made through it.
///
/// ```
/// use resil_runtime::{Policy, Rejected, Transient};
/// use std::time::Duration;
///
/// #[derive(Debug)]
/// enum Error { Busy, Rejected(Rejected) }
/// impl Transient for Error {
///     fn is_transient(&self) -> bool {
///         match self { Error::Busy => true, Error::Rejected(r) => r.is_transient() }
///     }
/// }
/// impl From<Rejected> for Error {
///     fn from(r: Rejected) -> Self { Error::Rejected(r) }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::builder()
///     .timeout(Duration::from_secs(2))
///     .retry(2)
///     .breaker_named("inventory", 5, Duration::from_secs(30))
///     .bulkhead(8)
///     .build()?;
///
/// let mut calls = 0;
/// let stock: Result<u32, Error> = policy
///     .run(|| {
///         calls += 1;
///         let busy = calls < 3;
///         async move { if busy { Err(Error::Busy) } else { Ok(42) } }
///     })
///     .await;
/// assert_eq!(stock.unwrap(), 42);
/// assert_eq!(calls, 3);
/// # Ok(()) }
/// ```
pub struct Policy {
    name: Arc<str>,
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    retry: u32,
    backoff: Backoff,
    rng: Option<Mutex<SmallRng>>,
    breaker: BreakerSource,
    bulkhead: Option<Bulkhead>,
    budget: Option<RetryBudget>,
    independent: bool,
    listener: Option<Arc<dyn Listener>>,
}

enum BreakerSource {
    None,
    Shared(Arc<Breaker>),
    Keyed(KeyedBreakers),
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Policy");
        d.field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("deadline", &self.deadline)
            .field("retry", &self.retry)
            .field("backoff", &self.backoff);
        match &self.breaker {
            BreakerSource::None => d.field("breaker", &None::<()>),
            BreakerSource::Shared(b) => d.field("breaker", b),
            BreakerSource::Keyed(k) => d.field("breaker", k),
        };
        d.field("bulkhead", &self.bulkhead)
            .field("budget", &self.budget)
            .field("independent", &self.independent)
            .finish()
    }
}

impl Policy {
    /// A builder with nothing enabled: no timeout, no retry, no breaker, no bulkhead.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// The policy's name, used in events.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Extra attempts after the first.
    pub fn retries(&self) -> u32 {
        self.retry
    }

    /// The longest one operation can take (see [`crate::worst_case`]).
    pub fn worst_case(&self) -> Option<Duration> {
        crate::worst_case(self.timeout, self.deadline, self.retry, &self.backoff)
    }

    /// The bulkhead, if any.
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.bulkhead.as_ref()
    }

    /// The shared breaker (named, or given to the builder), if any.
    pub fn breaker(&self) -> Option<&Arc<Breaker>> {
        match &self.breaker {
            BreakerSource::Shared(breaker) => Some(breaker),
            _ => None,
        }
    }

    /// The keyed breakers, if the policy has one breaker per key.
    pub fn keyed_breakers(&self) -> Option<&KeyedBreakers> {
        match &self.breaker {
            BreakerSource::Keyed(keyed) => Some(keyed),
            _ => None,
        }
    }

    /// Runs one operation: `make_attempt` is called once per attempt and returns that
    /// attempt's future. The result is the first success, the first permanent error, or the
    /// last transient error or rejection once no retry is allowed.
    ///
    /// The futures run inside the operation ([`crate::Operation::current()`] is `Some` in
    /// them); the factory itself runs just outside it.
    ///
    /// On a policy with keyed breakers use [`Policy::run_keyed`].
    pub async fn run<T, E, F, Fut>(&self, mut make_attempt: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        debug_assert!(
            self.keyed_breakers().is_none(),
            "policy `{}` has one breaker per key: call run_keyed",
            self.name
        );
        let mut execution = self.execute();
        loop {
            if let Next::Done(outcome) = execution.attempt(make_attempt()).await {
                return outcome.into_result();
            }
        }
    }

    /// [`Policy::run`] through the breaker for `key`.
    pub async fn run_keyed<K, T, E, F, Fut>(&self, key: &K, mut make_attempt: F) -> Result<T, E>
    where
        K: BreakerKey + ?Sized,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        let mut execution = self.execute_keyed(key);
        loop {
            if let Next::Done(outcome) = execution.attempt(make_attempt()).await {
                return outcome.into_result();
            }
        }
    }

    /// Starts one operation by hand: takes the bulkhead permit and starts the deadline.
    /// Then hand it one attempt future at a time with [`Execution::attempt`].
    #[inline]
    pub fn execute(&self) -> Execution<'_> {
        let breaker = match &self.breaker {
            BreakerSource::Shared(breaker) => Some(BreakerRef::Shared(breaker)),
            _ => None,
        };
        self.start(breaker)
    }

    /// [`Policy::execute`] through the breaker for `key` (one breaker per key).
    pub fn execute_keyed<K: BreakerKey + ?Sized>(&self, key: &K) -> Execution<'_> {
        let breaker = match &self.breaker {
            BreakerSource::Shared(breaker) => Some(BreakerRef::Shared(breaker)),
            BreakerSource::Keyed(keyed) => Some(BreakerRef::Keyed(keyed.get(key))),
            BreakerSource::None => None,
        };
        self.start(breaker)
    }

    #[inline]
    fn start<'p>(&'p self, breaker: Option<BreakerRef<'p>>) -> Execution<'p> {
        let (permit, bulkhead_full) = match &self.bulkhead {
            None => (None, false),
            Some(bulkhead) => match bulkhead.try_acquire() {
                Ok(permit) => (Some(permit), false),
                Err(_) => (None, true),
            },
        };
        let own_deadline = self.deadline.map(|deadline| Instant::now() + deadline);
        // Inside an operation: the earlier deadline wins, and the outermost layer that
        // declares retries owns the allowance.
        let listening = events::resolve(self.listener.as_ref()).is_some();
        let nested = operation::with_current(|context| {
            if !self.independent && context.claim(self.retry) && listening {
                context.set_owner(&self.name);
            }
            earliest(context.deadline(), own_deadline)
        });
        let (context, deadline) = match nested {
            Some(deadline) => (None, deadline),
            None => {
                let context = Context::new(own_deadline, (self.retry > 0).then_some(self.retry));
                if self.retry > 0 && listening {
                    context.set_owner(&self.name);
                }
                (Some(context), own_deadline)
            }
        };
        Execution {
            policy: self,
            breaker,
            _permit: permit,
            bulkhead_full,
            deadline,
            attempt: 0,
            last_wait: None,
            context,
        }
    }

    /// The backoff's draw; a `Retry-After` is a floor under it, not a replacement: clients
    /// told the same `Retry-After` would otherwise all come back at the same instant.
    fn wait(&self, retry: u32, previous: Option<Duration>, floor: Option<Duration>) -> Duration {
        let drawn = match &self.rng {
            Some(rng) => {
                let mut rng = rng
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                self.backoff.delay(retry, previous, &mut *rng)
            }
            None => self.backoff.delay(retry, previous, &mut rand::rng()),
        };
        match (floor, self.backoff.jitter()) {
            (None, _) => drawn,
            (Some(floor), Jitter::None) => drawn.max(floor),
            (Some(floor), _) => floor.saturating_add(drawn),
        }
    }

    /// Builds and sends an event only when someone listens.
    #[inline]
    fn emit(&self, emit: impl FnOnce(&dyn Listener)) {
        if let Some(listener) = events::resolve(self.listener.as_ref()) {
            emit(&**listener);
        }
    }

    fn emit_transition(&self, breaker: &Breaker, transition: Transition) {
        self.emit(|listener| {
            listener.on_event(&Event::BreakerTransition {
                breaker: breaker.name(),
                transition,
            })
        });
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

pub(crate) enum BreakerRef<'p> {
    Shared(&'p Breaker),
    Keyed(Arc<Breaker>),
}

impl<'p> BreakerRef<'p> {
    pub(crate) fn get(&self) -> &Breaker {
        match self {
            BreakerRef::Shared(breaker) => breaker,
            BreakerRef::Keyed(breaker) => breaker,
        }
    }

    /// Another handle on the same breaker, for a future that outlives this borrow.
    pub(crate) fn clone_ref(&self) -> BreakerRef<'p> {
        match self {
            BreakerRef::Shared(breaker) => BreakerRef::Shared(breaker),
            BreakerRef::Keyed(breaker) => BreakerRef::Keyed(Arc::clone(breaker)),
        }
    }
}

/// One logical operation in progress: holds the bulkhead permit and the deadline, counts
/// attempts, and decides after each whether there is another.
///
/// This is what `#[resilient]` expands to; it takes one future per attempt so the body can
/// borrow `&mut self` across attempts and the whole stays `Send`.
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
pub struct Execution<'p> {
    policy: &'p Policy,
    breaker: Option<BreakerRef<'p>>,
    _permit: Option<BulkheadPermit<'p>>,
    bulkhead_full: bool,
    deadline: Option<Instant>,
    attempt: u32,
    last_wait: Option<Duration>,
    /// The operation's context when this call opened it; lent to each attempt's scope.
    context: Option<Context>,
}

impl fmt::Debug for Execution<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Execution")
            .field("policy", &self.policy.name)
            .field("attempt", &self.attempt)
            .field("deadline", &self.deadline)
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

impl<'p> Execution<'p> {
    /// 0 during the first attempt, 1 during the first retry, ...
    pub fn attempt_number(&self) -> u32 {
        self.attempt
    }

    /// One attempt: breaker check, the call under the attempt's timeout and what is left of
    /// the deadline, then the decision. Resolves to [`Next::Retry`] once the backoff wait is
    /// over, or to how the operation ended. Dropping it cancels the attempt: a probe frees
    /// its slot, and nothing is counted.
    #[inline]
    pub fn attempt<F>(&mut self, future: F) -> Attempt<'_, 'p, F> {
        Attempt::new(self, future)
    }

    fn with_context<R>(&self, f: impl FnOnce(&Context) -> R) -> Option<R> {
        match &self.context {
            Some(context) => Some(f(context)),
            None => operation::with_current(f),
        }
    }

    fn operation_id(&self) -> Option<OperationId> {
        self.with_context(Context::id)
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            timeout: self.policy.timeout,
            started: None,
            deadline: self.deadline,
        }
    }

    pub(crate) fn context(&mut self) -> &mut Option<Context> {
        &mut self.context
    }

    pub(crate) fn breaker_ref(&self) -> Option<&BreakerRef<'p>> {
        self.breaker.as_ref()
    }

    pub(crate) fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref().map(BreakerRef::get)
    }

    /// A full bulkhead or a passed deadline stop the attempt before anything else.
    #[inline]
    pub(crate) fn before_call(&mut self) -> Result<(), Rejected> {
        if self.bulkhead_full {
            self.bulkhead_full = false;
            let limit = self.policy.bulkhead.as_ref().map_or(0, Bulkhead::limit);
            return Err(Rejected::BulkheadFull { limit });
        }
        if let Some(deadline) = self.deadline {
            if Instant::now() >= deadline {
                return Err(Rejected::DeadlineExceeded);
            }
        }
        Ok(())
    }

    pub(crate) fn emit_transition(&self, breaker: &Breaker, transition: Transition) {
        self.policy.emit_transition(breaker, transition);
    }

    /// The call is about to be made.
    #[inline]
    pub(crate) fn started(&self) {
        let policy = self.policy;
        if self.attempt == 0 {
            if let Some(budget) = &policy.budget {
                budget.record_first_attempt();
            }
        }
        policy.emit(|listener| {
            listener.on_event(&Event::AttemptStarted {
                site: &policy.name,
                operation: self.operation_id(),
                attempt: self.attempt,
            })
        });
    }

    /// The call that `started` announced ended with `result`.
    #[inline]
    pub(crate) fn ended<T, E>(&self, result: &Result<T, Failure<E>>, verdict: Verdict) {
        let policy = self.policy;
        policy.emit(|listener| {
            let outcome = match result {
                Ok(_) => AttemptOutcome::Ok,
                Err(Failure::Error(_)) if verdict == Verdict::Failure => AttemptOutcome::Transient,
                Err(Failure::Error(_)) => AttemptOutcome::Permanent,
                Err(Failure::Rejected(rejected)) => AttemptOutcome::Rejected(rejected),
            };
            listener.on_event(&Event::AttemptEnded {
                site: &policy.name,
                operation: self.operation_id(),
                attempt: self.attempt,
                outcome,
            })
        });
    }

    /// The backoff wait is over: the next attempt begins.
    pub(crate) fn advance(&mut self) {
        self.attempt += 1;
    }

    /// After an attempt: the operation's end, or how long to wait before the next attempt.
    #[inline]
    pub(crate) fn decide<T, E>(&mut self, result: Result<T, Failure<E>>) -> Decision<T, E>
    where
        E: Transient + From<Rejected>,
    {
        let error = match result {
            Ok(value) => return Decision::Done(Next::Done(Outcome::Completed(Ok(value)))),
            Err(Failure::Error(error)) if !error.is_transient() => {
                return Decision::Done(Next::Done(Outcome::Completed(Err(error))))
            }
            Err(Failure::Error(error)) => error,
            Err(Failure::Rejected(rejected @ Rejected::Timeout { .. })) => E::from(rejected),
            Err(Failure::Rejected(rejected)) => return Decision::Done(self.reject(rejected)),
        };
        if self.policy.retry == 0 {
            return Decision::Done(self.give_up(error, GiveUp::NoRetries));
        }
        if self.attempt >= self.policy.retry {
            return Decision::Done(self.give_up(error, GiveUp::RetriesExhausted));
        }
        if let Some(breaker) = self.breaker() {
            // Opened meanwhile (by this failure or another caller's) and not yet cooled down.
            if breaker.state() == BreakerState::Open {
                let retry_in = breaker.retry_in(Instant::now());
                if !retry_in.is_zero() {
                    return Decision::Done(self.reject(breaker.rejection(retry_in)));
                }
            }
        }
        let wait = self
            .policy
            .wait(self.attempt, self.last_wait, error.retry_after());
        if let Some(deadline) = self.deadline {
            // No wait is started that cannot end, with time for the call, before the deadline.
            if Instant::now() + wait >= deadline {
                return Decision::Done(self.give_up(error, GiveUp::DeadlineTooClose));
            }
        }
        let independent = self.policy.independent;
        if !independent && self.with_context(Context::allowance) == Some(Some(0)) {
            return Decision::Done(self.give_up(error, GiveUp::AllowanceSpent));
        }
        if let Some(budget) = &self.policy.budget {
            if !budget.try_withdraw() {
                return Decision::Done(self.give_up(error, GiveUp::BudgetExhausted));
            }
        }
        self.with_context(|context| {
            if independent {
                context.count_retry();
            } else {
                context.draw();
            }
        });
        let policy = self.policy;
        policy.emit(|listener| {
            listener.on_event(&Event::Waiting {
                site: &policy.name,
                operation: self.operation_id(),
                attempt: self.attempt,
                wait,
            })
        });
        self.last_wait = Some(wait);
        Decision::Wait(wait)
    }

    fn give_up<T, E>(&self, error: E, reason: GiveUp) -> Next<T, E> {
        let policy = self.policy;
        policy.emit(|listener| {
            listener.on_event(&Event::GaveUp {
                site: &policy.name,
                operation: self.operation_id(),
                attempt: self.attempt,
                reason,
            })
        });
        Next::Done(Outcome::Failed(error))
    }

    fn reject<T, E: From<Rejected>>(&self, rejected: Rejected) -> Next<T, E> {
        let policy = self.policy;
        policy.emit(|listener| {
            listener.on_event(&Event::Rejected {
                site: &policy.name,
                operation: self.operation_id(),
                rejected: &rejected,
            })
        });
        Next::Done(Outcome::Failed(E::from(rejected)))
    }
}

/// Builds a [`Policy`]; [`PolicyBuilder::build`] checks that the settings can work.
///
/// ```
/// use resil_runtime::{ConfigError, Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .name("payments::charge")
///     .timeout(Duration::from_secs(5))
///     .deadline(Duration::from_secs(12))
///     .retry(2)
///     .backoff(Duration::from_millis(200), Duration::from_secs(2))
///     .jitter(Jitter::Equal)
///     .breaker_per_key("gateway", 5, Duration::from_secs(30))
///     .bulkhead(16)
///     .build()?;
/// assert_eq!(policy.retries(), 2);
///
/// let too_long = Policy::builder()
///     .timeout(Duration::from_secs(20))
///     .deadline(Duration::from_secs(10))
///     .build();
/// assert!(matches!(too_long, Err(ConfigError::TimeoutAboveDeadline { .. })));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug, Default)]
#[must_use = "call .build() to get the policy"]
pub struct PolicyBuilder {
    name: Option<Arc<str>>,
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    retry: u32,
    backoff: Option<(Duration, Duration)>,
    jitter: Jitter,
    seed: Option<u64>,
    breaker: BreakerSpec,
    bulkhead: Option<usize>,
    budget: Option<(f64, f64)>,
    independent: bool,
    listener: Option<Arc<dyn Listener>>,
}

#[derive(Debug, Default)]
enum BreakerSpec {
    #[default]
    None,
    Named(String, u32, Duration),
    Keyed(String, u32, Duration),
    Given(Arc<Breaker>),
}

impl PolicyBuilder {
    /// The name events carry (for `#[resilient]`, the function's path).
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Limit for one attempt; an attempt past it fails with [`Rejected::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Limit for the whole operation: every attempt and every wait.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Extra attempts after the first, made only for transient errors.
    pub fn retry(mut self, retries: u32) -> Self {
        self.retry = retries;
        self
    }

    /// Exponential backoff from `base` up to `cap` (default `300ms..8s`).
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff = Some((base, cap));
        self
    }

    /// How waits are drawn (default [`Jitter::Full`]).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Draws waits from a generator seeded with `seed`, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The process-wide breaker called `name`, shared with every policy that names it.
    pub fn breaker_named(
        mut self,
        name: impl Into<String>,
        threshold: u32,
        cooldown: Duration,
    ) -> Self {
        self.breaker = BreakerSpec::Named(name.into(), threshold, cooldown);
        self
    }

    /// One breaker per key (see [`Policy::run_keyed`]); `label` names them `label=key`.
    pub fn breaker_per_key(
        mut self,
        label: impl Into<String>,
        threshold: u32,
        cooldown: Duration,
    ) -> Self {
        self.breaker = BreakerSpec::Keyed(label.into(), threshold, cooldown);
        self
    }

    /// A breaker you created and may share by hand.
    pub fn breaker(mut self, breaker: Arc<Breaker>) -> Self {
        self.breaker = BreakerSpec::Given(breaker);
        self
    }

    /// At most `limit` operations in flight; the next fails with [`Rejected::BulkheadFull`].
    pub fn bulkhead(mut self, limit: usize) -> Self {
        self.bulkhead = Some(limit);
        self
    }

    /// Retries may add at most `ratio` (0.2 for 20 %) to first attempts over a sliding
    /// 10-second window, plus `min_per_sec` retries per second (see [`RetryBudget`]).
    pub fn retry_budget(mut self, ratio: f64, min_per_sec: f64) -> Self {
        self.budget = Some((ratio, min_per_sec));
        self
    }

    /// Inside another operation, keep this policy's own retry count instead of drawing from
    /// the operation's allowance (`nested = "independent"`). See [`crate::operation`].
    pub fn independent(mut self, independent: bool) -> Self {
        self.independent = independent;
        self
    }

    /// Sends this policy's events to `listener` instead of the global one.
    pub fn listener(mut self, listener: Arc<dyn Listener>) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Checks the settings and builds the policy.
    pub fn build(self) -> Result<Policy, ConfigError> {
        let (policy, conflict) = self.build_reporting_conflict()?;
        match conflict {
            Some(conflict) => Err(conflict),
            None => Ok(policy),
        }
    }

    /// Like [`PolicyBuilder::build`], but a named breaker already configured otherwise is
    /// used as it is, and the conflict is reported as an event and a debug assertion.
    /// Generated code calls this: its settings were checked at compile time.
    #[doc(hidden)]
    pub fn build_for_site(self) -> Policy {
        match self.build_reporting_conflict() {
            Ok((policy, None)) => policy,
            Ok((policy, Some(conflict))) => {
                let message = conflict.to_string();
                policy.emit(|listener| {
                    listener.on_event(&Event::ConfigConflict {
                        site: &policy.name,
                        message: &message,
                    })
                });
                debug_assert!(false, "{}: {message}", policy.name);
                policy
            }
            Err(error) => panic!("invalid resilience policy: {error}"),
        }
    }

    fn build_reporting_conflict(self) -> Result<(Policy, Option<ConfigError>), ConfigError> {
        for (key, value) in [("timeout", self.timeout), ("deadline", self.deadline)] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(ConfigError::ZeroDuration { key });
            }
        }
        if let (Some(timeout), Some(deadline)) = (self.timeout, self.deadline) {
            if timeout > deadline {
                return Err(ConfigError::TimeoutAboveDeadline { timeout, deadline });
            }
        }
        let backoff = match self.backoff {
            Some((base, cap)) => Backoff::new(base, cap)?,
            None => Backoff::default(),
        }
        .with_jitter(self.jitter);
        let bulkhead = self.bulkhead.map(Bulkhead::new).transpose()?;
        let budget = self
            .budget
            .map(|(ratio, min_per_sec)| RetryBudget::new(ratio, min_per_sec))
            .transpose()?;
        let mut conflict = None;
        let breaker = match self.breaker {
            BreakerSpec::None => BreakerSource::None,
            BreakerSpec::Given(breaker) => BreakerSource::Shared(breaker),
            BreakerSpec::Named(name, threshold, cooldown) => {
                let (breaker, clash) = named(&name, BreakerConfig::new(threshold, cooldown)?);
                conflict = clash;
                BreakerSource::Shared(breaker)
            }
            BreakerSpec::Keyed(label, threshold, cooldown) => BreakerSource::Keyed(
                KeyedBreakers::new(label, BreakerConfig::new(threshold, cooldown)?),
            ),
        };
        let policy = Policy {
            name: self.name.unwrap_or_else(|| Arc::from("policy")),
            timeout: self.timeout,
            deadline: self.deadline,
            retry: self.retry,
            backoff,
            rng: self
                .seed
                .map(|seed| Mutex::new(SmallRng::seed_from_u64(seed))),
            breaker,
            bulkhead,
            budget,
            independent: self.independent,
            listener: self.listener,
        };
        Ok((policy, conflict))
    }
}
