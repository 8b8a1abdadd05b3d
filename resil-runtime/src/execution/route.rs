//! [`Route`]: one operation over several targets, the values of a keyed policy's key (models,
//! providers, regions), each with its own breaker, bulkhead and gates.
//!
//! Before each attempt the route looks at its targets in order, from the one after the last
//! it tried, wrapping around, and takes the first that would call, those not yet tried first.
//! A target whose breaker is open (or whose probe is out), whose gate has no slot within the
//! deadline, or whose bulkhead is full with no place in its queue is skipped: no attempt, no
//! retry spent. A transient failure moves to a target not yet tried at once (a throttle, to
//! any target that admits now); going back to a target that failed waits the backoff and its
//! Retry-After, as a retry would. The operation stays one: one deadline, one retry
//! allowance, one id.

use tokio::time::Instant;

use super::retry::Routing;
use super::{Decision, Execution, Failure, Next, Outcome};
use crate::deadline::{later, Limits};
use crate::events::Event;
use crate::key::{Key, KeyName};
use crate::policy::{BreakerRef, Scope, Settings};
use crate::registry::Held;
use crate::{Rejected, Transient};

/// An operation routed over several targets: see [`crate::Policy::run_routed`], which drives one,
/// and `route = model in [...]` on `#[resilient]`, which expands to one.
///
/// Ask [`Route::target`] for each attempt's target, then run the attempt on
/// [`Route::execution`]:
///
/// ```
/// use resil_runtime::{Next, Policy, Rejected};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::builder().retry(2).breaker_per_key("model", 5, std::time::Duration::from_secs(30)).build().unwrap();
/// let mut route = policy.route("gpt-4o", ["claude-sonnet"]);
/// let outcome = loop {
///     let model = match route.target() {
///         Ok(model) => *model,
///         Err(outcome) => break outcome,
///     };
///     let attempt = async move {
///         if model == "gpt-4o" { Err(Rejected::Incomplete) } else { Ok(model) }
///     };
///     if let Next::Done(outcome) = route.execution().attempt(attempt).await {
///         break outcome;
///     }
/// };
/// assert_eq!(outcome.into_result(), Ok("claude-sonnet"));
/// # }
/// ```
pub struct Route<'p, Q, K: ?Sized, E> {
    settings: &'p Settings,
    /// The key a target's state is kept under.
    key: fn(&Q) -> &K,
    execution: Execution<'p, E>,
    targets: Vec<Target<Q>>,
    /// The target of the attempt in progress, or of the last one.
    current: usize,
    started: bool,
}

struct Target<Q> {
    value: Q,
    tried: bool,
    /// It refused the request for good ([`Transient::moves_on`]): never sent it again.
    banned: bool,
}

/// How a target would take an attempt now.
enum Standing {
    /// It would make no call: what it would answer.
    Skip(Rejected),
    /// It calls after a wait (a rate slot, a place in its bulkhead's queue).
    Later,
    /// It calls at once.
    Now,
}

impl<Q, K: ?Sized, E> std::fmt::Debug for Route<'_, Q, K, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("execution", &self.execution)
            .field("targets", &self.targets.len())
            .field("current", &self.current)
            .finish()
    }
}

impl<'p, Q, K, E> Route<'p, Q, K, E>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// Starts the operation on `first`, with `others` after it in order (a value equal to
    /// one before it is not repeated).
    pub(crate) fn new(
        settings: &'p Settings,
        key: fn(&Q) -> &K,
        first: Q,
        others: impl IntoIterator<Item = Q>,
    ) -> Self {
        let mut targets = vec![Target::new(first)];
        for value in others {
            if !targets.iter().any(|target| target.value == value) {
                targets.push(Target::new(value));
            }
        }
        let scope = (settings.keys.as_ref()).map(|keys| keys.held(key(&targets[0].value)));
        let execution = Execution::start(settings, breaker_of(settings, scope.as_ref()), scope);
        Route {
            settings,
            key,
            execution,
            targets,
            current: 0,
            started: false,
        }
    }

    /// The execution the next attempt runs on, with its target's state.
    pub fn execution(&mut self) -> &mut Execution<'p, E> {
        &mut self.execution
    }

    /// The execution, once the attempts are over: for a stream's commit, or a fallback.
    pub fn into_execution(self) -> Execution<'p, E> {
        self.execution
    }

    /// The target of the next attempt, its state in place; or, when every target would make
    /// no call, how the operation ends: with the first one's rejection, or after a failure
    /// with what the provider said last.
    pub fn target<T>(&mut self) -> Result<&Q, Outcome<T, E>>
    where
        E: Transient + From<Rejected>,
    {
        let from = if self.started {
            let moves_on = (self.execution.last_error.as_ref())
                .is_some_and(|error| !error.is_transient() && error.moves_on());
            let target = &mut self.targets[self.current];
            target.tried = true;
            target.banned |= moves_on;
            self.current + 1
        } else {
            0
        };
        self.started = true;
        // The frame goes on the stack now, as at an attempt's first poll: the deadline the
        // targets are judged by includes the enclosing calls', and the events carry the id.
        let mut limits = Limits::default();
        let pushed = self.execution.progress.push_frame(&mut limits);
        let standings = self.standings();
        let order: Vec<usize> = (0..self.targets.len())
            .map(|i| (from + i) % self.targets.len())
            .filter(|&i| !self.targets[i].banned)
            .collect();
        let admits = |i: &usize| !matches!(standings[*i], Standing::Skip(_));
        let chosen = (order.iter().copied())
            .find(|i| admits(i) && !self.targets[*i].tried)
            .or_else(|| order.iter().copied().find(admits));
        for &i in order.iter().take_while(|&&i| Some(i) != chosen) {
            if let Standing::Skip(rejected) = &standings[i] {
                self.skipped(i, rejected);
            }
        }
        let result = match chosen {
            Some(i) => {
                self.go_to(i, &standings);
                Ok(i)
            }
            None => Err(self.turned_away(&order, standings)),
        };
        self.execution.progress.frame = pushed.pop();
        result.map(|i| &self.targets[i].value)
    }

    /// How each target would take an attempt now. A policy switched off skips nothing.
    fn standings(&self) -> Vec<Standing> {
        let progress = &self.execution.progress;
        let Some(admission) = &progress.admission else {
            return self.targets.iter().map(|_| Standing::Now).collect();
        };
        let (settings, deadline, cost) = (progress.settings, progress.deadline, admission.cost);
        let keys = self.settings.keys.as_deref();
        let now = Instant::now();
        (self.targets.iter())
            .map(|target| match keys {
                Some(keys) => standing(
                    settings,
                    &keys.held((self.key)(&target.value)),
                    deadline,
                    cost,
                    now,
                ),
                None => Standing::Now,
            })
            .collect()
    }

    /// Moves the operation to target `i` and notes where a failure there may go.
    fn go_to(&mut self, i: usize, standings: &[Standing]) {
        if i != self.current {
            let settings = self.settings;
            let scope = settings
                .keys
                .as_ref()
                .map(|keys| keys.held((self.key)(&self.targets[i].value)));
            let breaker = breaker_of(settings, scope.as_ref());
            self.execution.retarget(breaker, scope);
            self.current = i;
        }
        let others = || (0..self.targets.len()).filter(|&j| j != i && !self.targets[j].banned);
        self.execution.progress.tries.routing = Routing {
            routed: true,
            fresh: others()
                .any(|j| !self.targets[j].tried && !matches!(standings[j], Standing::Skip(_))),
            now: others().any(|j| matches!(standings[j], Standing::Now)),
            other: others().next().is_some(),
        };
        let progress = &self.execution.progress;
        #[cfg(feature = "metrics")]
        crate::meter::routed(&progress.settings.name, self.name(i).as_str(), "sent");
        if progress.report.listening {
            let (attempt, name) = (progress.tries.attempt, self.name(i));
            progress.notify(|listener, site, operation| {
                listener.on_event(&Event::Routed {
                    site,
                    operation,
                    attempt,
                    target: name.as_str(),
                    hedge: false,
                });
            });
        }
    }

    /// Every target would make no call: the operation ends as if the first in `order` had
    /// been called and had refused.
    fn turned_away<T>(&mut self, order: &[usize], mut standings: Vec<Standing>) -> Outcome<T, E>
    where
        E: Transient + From<Rejected>,
    {
        let rejected = order
            .first()
            .and_then(
                |&i| match std::mem::replace(&mut standings[i], Standing::Now) {
                    Standing::Skip(rejected) => Some(rejected),
                    _ => None,
                },
            )
            .unwrap_or(Rejected::Incomplete);
        match self
            .execution
            .decide(Err::<T, _>(Failure::Rejected(rejected)))
        {
            Decision::Done(Next::Done(outcome)) => outcome,
            Decision::Done(Next::Retry) | Decision::Wait(_) => {
                unreachable!("a rejection before any call ends the operation")
            }
        }
    }

    fn skipped(&self, i: usize, rejected: &Rejected) {
        let progress = &self.execution.progress;
        #[cfg(feature = "metrics")]
        crate::meter::routed(&progress.settings.name, self.name(i).as_str(), "skipped");
        if progress.report.listening {
            let name = self.name(i);
            progress.notify(|listener, site, operation| {
                listener.on_event(&Event::Skipped {
                    site,
                    operation,
                    target: name.as_str(),
                    rejected,
                });
            });
        }
    }

    fn name(&self, i: usize) -> KeyName {
        KeyName::of((self.key)(&self.targets[i].value))
    }
}

impl<Q> Target<Q> {
    fn new(value: Q) -> Self {
        Target {
            value,
            tried: false,
            banned: false,
        }
    }
}

/// The breaker a call on `scope` goes through: its key's, or the one all calls share.
pub(super) fn breaker_of<'p>(
    settings: &'p Settings,
    scope: Option<&Held<Scope>>,
) -> Option<BreakerRef<'p>> {
    match scope.and_then(|scope| scope.breaker.as_ref()) {
        Some(breaker) => Some(BreakerRef::Keyed(std::sync::Arc::clone(breaker))),
        None => settings.breaker.as_deref().map(BreakerRef::Shared),
    }
}

/// How a call on `scope` would be taken at `now`, costing `cost` tokens, under `deadline`.
fn standing(
    settings: &Settings,
    scope: &Scope,
    deadline: Option<Instant>,
    cost: u64,
    now: Instant,
) -> Standing {
    let breaker = scope.breaker.as_deref().or(settings.breaker.as_deref());
    if let Some(rejected) = breaker.and_then(|breaker| breaker.turns_away(now)) {
        return Standing::Skip(rejected);
    }
    let mut at_once = true;
    if let Some(bulkhead) = &scope.bulkhead {
        if !bulkhead.has_room() {
            return Standing::Skip(Rejected::BulkheadFull {
                limit: bulkhead.limit(),
            });
        }
        at_once = bulkhead.in_flight() < bulkhead.limit();
    }
    let gates = [
        (scope.rate.as_ref().or(settings.rate.as_ref()), 1),
        (
            scope.token_rate.as_ref().or(settings.token_rate.as_ref()),
            cost,
        ),
    ];
    for (gate, cost) in gates {
        let Some(gate) = gate else { continue };
        let Some(wait) = gate.wait_for(cost) else {
            return Standing::Skip(Rejected::OverBurst {
                cost,
                burst: gate.burst(),
            });
        };
        if deadline.is_some_and(|deadline| later(now, wait) > deadline) {
            return Standing::Skip(Rejected::RateLimited { retry_in: wait });
        }
        at_once &= wait.is_zero();
    }
    if at_once {
        Standing::Now
    } else {
        Standing::Later
    }
}
